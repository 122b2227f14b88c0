//! The network of one thread's neurons: their synapses, state and step.
//!
//! # Network
//!
//! Neuron `t` draws its 9,000 excitatory and 2,250 inhibitory sources from its
//! own stream (`Purpose::Connect`, key `t`; draw `k` is its `k`-th source; a
//! source equal to `t` is skipped by drawing from the others), so the network
//! does not depend on the decomposition. A rank holds the synapses onto its
//! neurons, split into one *shard* per thread (contiguous neurons): the E->E
//! synapses as one [`StdpRow`] per excitatory source, the static ones as a
//! list of targets per source. Targets are local indices connected in
//! increasing order (the neurons draw their sources in id order), stored as
//! `u16` steps ([`hpc_spiking::targets`]): a step is about `scale` on average,
//! so an E->E synapse takes 10 bytes (with its `f64` weight) and a static one
//! 2; a step of 65,535 or more would take 6 bytes and is counted as such.
//!
//! # Memory
//!
//! [`Shard::synapse_bytes`] counts what the synapses hold as allocated: the
//! rows (struct, targets, weights), the static targets with their offsets, and
//! the postsynaptic archives (struct and spikes). At scale 1 and above,
//! 64 % of the synapses are E->E, so that is about
//! `0.64 x 10 + 0.36 x 2 = 7.1` bytes a synapse with the rest amortised. The
//! ring buffers of pending input (per neuron, not per synapse) are
//! [`Shard::ring_bytes`], reported apart.

use anyhow::Result;
use hpc_spiking::neuron::{AlphaState, IafPscAlpha};
use hpc_spiking::plasticity::{PostArchive, StdpPlHom, StdpRow};
use hpc_spiking::ring::DelayRing;
use hpc_spiking::rng::{below, draw, standard_normal, stream_key, PoissonTable, Purpose};
use hpc_spiking::targets;

use crate::params::{Model, CE, CI};

/// Calls `f(k, source)` for each of neuron `t`'s sources in draw order: the
/// excitatory ones (`k < CE`), then the inhibitory ones.
#[inline]
pub fn sources(model: &Model, t: u32, mut f: impl FnMut(u32, u32)) {
    let key = stream_key(model.params.seed, Purpose::Connect, t);
    let (ne, ni) = (model.ne, model.ni);
    let is_e = t < ne;
    for k in 0..CE {
        let mut s = below(draw(key, k as u64), ne - u32::from(is_e));
        if is_e && s >= t {
            s += 1;
        }
        f(k, s);
    }
    for k in 0..CI {
        let mut s = below(draw(key, (CE + k) as u64), ni - u32::from(!is_e));
        if !is_e && s >= t - ne {
            s += 1;
        }
        f(CE + k, ne + s);
    }
}

/// The initial membrane potential of neuron `t` (mV): N(v_mean, v_sd).
pub fn initial_v(model: &Model, t: u32) -> f64 {
    let key = stream_key(model.params.seed, Purpose::Init, t);
    model.params.v_mean + model.params.v_sd * standard_normal(draw(key, 0), draw(key, 1))
}

/// The synapses and state of a thread's neurons.
pub struct Shard {
    /// Global id of the first neuron.
    pub first: u32,
    /// Number of neurons.
    pub len: u32,
    /// The neurons' state.
    pub state: Vec<AlphaState>,
    /// The neurons' spike archives (read by their incoming STDP synapses).
    pub archives: Vec<PostArchive>,
    /// One STDP row per excitatory source (targets: local indices).
    pub rows: Vec<StdpRow>,
    /// Static synapses: the targets of source `s` are the units
    /// `targets[offsets[s]..offsets[s + 1]]` ([`targets::decode`]).
    offsets: Vec<u64>,
    targets: Vec<u16>,
    /// Number of static synapses.
    n_static: u64,
    /// STDP input per (step, neuron) (pA).
    pub ring_w: DelayRing<f64>,
    /// Static excitatory spikes per (step, neuron).
    pub ring_ex: DelayRing<u32>,
    /// Inhibitory spikes per (step, neuron).
    pub ring_in: DelayRing<u32>,
    keys: Vec<u64>,
    pub(crate) spikes: Vec<u32>,
}

/// Constants of the update.
#[derive(Clone, Copy)]
pub(crate) struct Dyn<'m> {
    pub(crate) neuron: &'m IafPscAlpha,
    pub(crate) rule: &'m StdpPlHom,
    pub(crate) je: f64,
    pub(crate) gje: f64,
    pub(crate) dt: f64,
    pub(crate) delay: u64,
    pub(crate) gid_bits: u32,
    pub(crate) ne: u32,
}

impl Shard {
    pub(crate) fn build(model: &Model, first: u32, len: u32) -> Result<Shard> {
        let (ne, n) = (model.ne as usize, model.n as usize);
        let mut stdp_count = vec![0u32; ne];
        // First pass: the synapses of each row and the units of each static
        // list (`prev`: each source's previous static target).
        let mut offsets = vec![0u64; n + 1];
        let mut prev = vec![0u32; n];
        let mut n_static = 0u64;
        for t in first..first + len {
            let local = t - first;
            sources(model, t, |_, s| {
                if t < model.ne && s < model.ne {
                    stdp_count[s as usize] += 1;
                } else {
                    let p = std::mem::replace(&mut prev[s as usize], local);
                    offsets[s as usize + 1] += targets::units(p, local) as u64;
                    n_static += 1;
                }
            });
        }
        for s in 0..n {
            offsets[s + 1] += offsets[s];
        }
        let mut archives = (0..len)
            .map(|_| PostArchive::new(model.params.tau_minus, model.params.delay))
            .collect::<Result<Vec<_>, _>>()?;
        let mut rows = Vec::with_capacity(ne);
        for &c in &stdp_count {
            let mut r = StdpRow::new(model.params.delay)?;
            r.reserve(c as usize);
            rows.push(r);
        }
        let mut targets = vec![0u16; offsets[n] as usize];
        let mut fill = offsets.clone();
        prev.fill(0);
        let mut failed = None;
        for t in first..first + len {
            let local = t - first;
            sources(model, t, |_, s| {
                if t < model.ne && s < model.ne {
                    if let Err(e) = rows[s as usize].connect(local, model.je, &mut archives) {
                        failed = Some(e);
                    }
                } else {
                    let (s, at) = (s as usize, fill[s as usize] as usize);
                    let p = std::mem::replace(&mut prev[s], local);
                    fill[s] += targets::write(&mut targets[at..], p, local) as u64;
                }
            });
        }
        if let Some(e) = failed {
            return Err(e.into());
        }
        drop((fill, prev));
        // A row with an escape outgrew its reservation.
        rows.iter_mut().for_each(StdpRow::shrink_to_fit);
        let state = (first..first + len)
            .map(|t| {
                let mut s = model.neuron.rest();
                model.neuron.set_v_m(&mut s, initial_v(model, t));
                s
            })
            .collect();
        Ok(Shard {
            first,
            len,
            state,
            archives,
            rows,
            offsets,
            targets,
            n_static,
            ring_w: DelayRing::new(model.delay_steps, len as usize),
            ring_ex: DelayRing::new(model.delay_steps, len as usize),
            ring_in: DelayRing::new(model.delay_steps, len as usize),
            keys: (first..first + len)
                .map(|t| stream_key(model.params.seed, Purpose::External, t))
                .collect(),
            spikes: Vec::new(),
        })
    }

    /// Delivers the spikes `codes` (sorted) of the interval that starts at `base`.
    pub(crate) fn deliver(&mut self, codes: &[u32], base: u64, d: &Dyn) -> Result<()> {
        let len = self.len as usize;
        let mask = (1u32 << d.gid_bits) - 1;
        let Shard {
            rows,
            archives,
            ring_w,
            ring_ex,
            ring_in,
            offsets,
            targets,
            ..
        } = self;
        for &code in codes {
            let gid = code & mask;
            let step = base + (code >> d.gid_bits) as u64;
            let arrival = step + d.delay;
            let stat = &targets[offsets[gid as usize] as usize..offsets[gid as usize + 1] as usize];
            let stat = targets::decode(stat);
            if gid < d.ne {
                let t = (step + 1) as f64 * d.dt;
                let ring = &mut ring_w.row_mut(arrival)[..len];
                rows[gid as usize].deliver_into(d.rule, t, archives, ring)?;
                let ring = &mut ring_ex.row_mut(arrival)[..len];
                for tgt in stat {
                    ring[tgt as usize] += 1;
                }
            } else {
                let ring = &mut ring_in.row_mut(arrival)[..len];
                for tgt in stat {
                    ring[tgt as usize] += 1;
                }
            }
        }
        Ok(())
    }

    /// Updates steps `step0..step0 + m`, appending spike codes to `self.spikes`.
    pub(crate) fn update(
        &mut self,
        step0: u64,
        m: u32,
        d: &Dyn,
        pois: &PoissonTable,
    ) -> Result<()> {
        let len = self.len as usize;
        self.spikes.clear();
        for s in 0..m {
            let step = step0 + s as u64;
            let ring_w = &mut self.ring_w.row_mut(step)[..len];
            let ring_ex = &mut self.ring_ex.row_mut(step)[..len];
            let ring_in = &mut self.ring_in.row_mut(step)[..len];
            let t = (step + 1) as f64 * d.dt;
            let code0 = (s << d.gid_bits) | self.first;
            for i in 0..len {
                let w = std::mem::take(&mut ring_w[i]);
                let n_ex = std::mem::take(&mut ring_ex[i]);
                let n_in = std::mem::take(&mut ring_in[i]);
                let drive = pois.sample(draw(self.keys[i], step));
                let ex = w + (n_ex + drive) as f64 * d.je;
                let inh = n_in as f64 * d.gje;
                if d.neuron.step(&mut self.state[i], ex, inh, 0.0) {
                    self.archives[i].record_post_spike(t)?;
                    self.spikes.push(code0 + i as u32);
                }
            }
        }
        Ok(())
    }

    /// Bytes of the synapses and of their plastic state, as allocated: the
    /// rows (struct, targets, weights), the static targets and their offsets,
    /// and the archives (struct and archived spikes, 24 bytes each).
    pub fn synapse_bytes(&self) -> u64 {
        let rows: usize = self.rows.iter().map(StdpRow::bytes).sum();
        let archives: usize = self
            .archives
            .iter()
            .map(|a| std::mem::size_of::<PostArchive>() + a.archived() * 24)
            .sum();
        let stat = self.targets.capacity() * 2 + self.offsets.capacity() * 8;
        (rows + archives + stat) as u64
    }

    /// Bytes of the ring buffers of pending input (per neuron and slot).
    pub fn ring_bytes(&self) -> u64 {
        (self.ring_w.bytes() + self.ring_ex.bytes() + self.ring_in.bytes()) as u64
    }

    /// The E->E (STDP) and the static synapses onto the shard's neurons.
    pub fn synapses(&self) -> (u64, u64) {
        let stdp: usize = self.rows.iter().map(StdpRow::len).sum();
        (stdp as u64, self.n_static)
    }
}
