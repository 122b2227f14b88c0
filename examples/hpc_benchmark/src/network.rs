//! The network of one thread's neurons: their synapses, state and step.
//!
//! # Network
//!
//! Neuron `t` draws its 9,000 excitatory and 2,250 inhibitory sources from its
//! own stream (`Purpose::Connect`, key `t`; draw `k` is its `k`-th source; a
//! source equal to `t` is skipped by drawing from the others), so the network
//! does not depend on the decomposition. A rank holds the synapses onto its
//! neurons, split into one *shard* per thread (contiguous neurons): the E->E
//! synapses as [`StdpRows`], a row per excitatory source with a target in the
//! shard, the static ones as [`SourceLists`], a list of targets per source
//! with a target in the shard. Targets are local indices connected in
//! increasing order (the neurons draw their sources in id order), stored as
//! `u16` steps ([`hpc_spiking::targets`]): a step is about `scale` on average,
//! so an E->E synapse takes 10 bytes (with its `f64` weight) and a static one
//! 2; a step of 65,535 or more would take 6 bytes and is counted as such.
//!
//! # Memory
//!
//! [`Shard::synapse_bytes`] counts what the synapses hold as allocated: the
//! rows (targets, weights, and per present source two `u32` offsets, 8
//! bytes), the static targets with a `u32` offset per present source, the two
//! [`SourceIndex`]es (a quarter of a byte per source of the network each: the
//! only part that grows with the network rather than with the shard), and the
//! postsynaptic archives (struct and spikes). The sources' traces `K+` and
//! last spike times are the rank's, not a shard's: a [`SourceTraces`] of the
//! excitatory sources with a row on any of the rank's shards or a neuron on
//! the rank (16 bytes each, and its index; [`rank_traces`]), advanced once
//! per spike as the rank takes in an exchange and handed to every shard's
//! delivery (`Shard::deliver`). At scale 1 and above, 64 % of
//! the synapses are E->E, so that is about `0.64 x 10 + 0.36 x 2 = 7.1` bytes
//! a synapse with the rest amortised. The ring buffers of pending input (per
//! neuron, not per synapse) are [`Shard::ring_bytes`], reported apart.
//! [`expected_shard_bytes`] is what the memory estimate counts per shard
//! beside the synapses, from the expected number of present sources, and
//! [`expected_rank_trace_bytes`] what it counts for the rank's traces.

use anyhow::Result;
use hpc_spiking::neuron::{AlphaState, IafPscAlpha};
use hpc_spiking::plasticity::{
    PostArchive, SourceTrace, SourceTraces, StdpPlHom, StdpRows, StdpRowsFiller,
    DELIVERY_MEMO_BYTES, ROW_HEAD_BYTES,
};
use hpc_spiking::ring::DelayRing;
use hpc_spiking::rng::{below, draw, standard_normal, stream_key, PoissonTable, Purpose};
use hpc_spiking::targets::{DenseCounter, IndexBuilder, ListCounter, SourceIndex, SourceLists};

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
    /// The E->E synapses: a row per excitatory source with a target here
    /// (targets: local indices).
    pub plastic: StdpRows,
    /// Static synapses: a list of targets per source with a target here.
    stat: SourceLists,
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

/// The excitatory neurons among `len` from `first` (ids below `ne`).
fn excitatory(model: &Model, first: u32, len: u32) -> u32 {
    model.ne.saturating_sub(first).min(len)
}

impl Shard {
    /// Builds the shard of neurons `first..first + len`: three passes over
    /// their sources (which sources have a target here, how many units each
    /// list takes, the lists), so that nothing but the indexes' bits is held
    /// per source of the network; or two, the first counting every source
    /// ([`counts_densely`]), where that takes less than the shard's synapses.
    pub(crate) fn build(model: &Model, first: u32, len: u32) -> Result<Shard> {
        Shard::build_counting(model, first, len, counts_densely(model, first, len))
    }

    /// [`build`](Self::build), counting densely or not as `dense` says.
    fn build_counting(model: &Model, first: u32, len: u32, dense: bool) -> Result<Shard> {
        let ne = model.ne;
        let each = |f: &mut dyn FnMut(bool, u32, u32)| {
            for t in first..first + len {
                let local = t - first;
                sources(model, t, |_, s| f(t < ne && s < ne, s, local));
            }
        };
        let (plastic, stat) = if dense {
            let (mut plastic, mut stat) = (DenseCounter::new(ne), DenseCounter::new(model.n));
            each(&mut |p, s, local| {
                if p {
                    plastic.count(s, local)
                } else {
                    stat.count(s, local)
                }
            });
            (plastic.finish(), stat.finish())
        } else {
            let (mut plastic, mut stat) = (IndexBuilder::new(ne), IndexBuilder::new(model.n));
            each(&mut |p, s, _| if p { plastic.mark(s) } else { stat.mark(s) });
            let mut plastic = ListCounter::new(plastic.finish());
            let mut stat = ListCounter::new(stat.finish());
            each(&mut |p, s, local| {
                if p {
                    plastic.count(s, local)
                } else {
                    stat.count(s, local)
                }
            });
            (plastic, stat)
        };
        let mut archives = (0..len)
            .map(|_| PostArchive::new(model.params.tau_minus, model.params.delay))
            .collect::<Result<Vec<_>, _>>()?;
        let mut plastic = StdpRowsFiller::new(model.params.delay, plastic)?;
        let mut stat = stat.filler()?;
        let mut failed = None;
        each(&mut |p, s, local| {
            if !p {
                stat.push(s, local);
            } else if let Err(e) = plastic.connect(s, local, model.je, &mut archives) {
                failed = Some(e);
            }
        });
        if let Some(e) = failed {
            return Err(e.into());
        }
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
            plastic: plastic.finish(),
            stat: stat.finish(),
            // Beyond the memory available (with --allow-oversize) an error,
            // not a panic.
            ring_w: DelayRing::try_new(model.delay_steps, len as usize)?,
            ring_ex: DelayRing::try_new(model.delay_steps, len as usize)?,
            ring_in: DelayRing::try_new(model.delay_steps, len as usize)?,
            keys: (first..first + len)
                .map(|t| stream_key(model.params.seed, Purpose::External, t))
                .collect(),
            spikes: Vec::new(),
        })
    }

    /// Delivers the spikes `codes` (sorted) of the interval that starts at
    /// `base`; `before[i]` is the trace of `codes[i]`'s source before that
    /// spike where the source has a row here (the rank's [`SourceTraces`]
    /// answered it: [`traces_before`]).
    pub(crate) fn deliver(
        &mut self,
        codes: &[u32],
        before: &[SourceTrace],
        base: u64,
        d: &Dyn,
    ) -> Result<()> {
        let len = self.len as usize;
        let mask = (1u32 << d.gid_bits) - 1;
        let Shard {
            plastic,
            archives,
            ring_w,
            ring_ex,
            ring_in,
            stat,
            ..
        } = self;
        for (&code, before) in codes.iter().zip(before) {
            let gid = code & mask;
            let step = base + (code >> d.gid_bits) as u64;
            let arrival = step + d.delay;
            let targets = stat.get(gid);
            if gid < d.ne {
                let t = (step + 1) as f64 * d.dt;
                let ring = &mut ring_w.row_mut(arrival)[..len];
                plastic.deliver_into(gid, d.rule, before, t, archives, ring)?;
                let ring = &mut ring_ex.row_mut(arrival)[..len];
                for tgt in targets {
                    ring[tgt as usize] += 1;
                }
            } else {
                let ring = &mut ring_in.row_mut(arrival)[..len];
                for tgt in targets {
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
    /// rows (index, targets, weights, offsets and the memo of their
    /// delivery), the static lists (index, targets and offsets), and the
    /// archives (struct and archived spikes, 24 bytes each); the sources'
    /// traces are the rank's ([`rank_traces`]).
    pub fn synapse_bytes(&self) -> u64 {
        let archives: usize = self
            .archives
            .iter()
            .map(|a| std::mem::size_of::<PostArchive>() + a.archived() * 24)
            .sum();
        (self.plastic.bytes() + self.stat.bytes() + archives) as u64
    }

    /// The sources with a row (E->E) and with a static list here.
    pub fn present_sources(&self) -> (usize, usize) {
        (self.plastic.index().len(), self.stat.index().len())
    }

    /// Bytes of the ring buffers of pending input (per neuron and slot).
    pub fn ring_bytes(&self) -> u64 {
        (self.ring_w.bytes() + self.ring_ex.bytes() + self.ring_in.bytes()) as u64
    }

    /// The E->E (STDP) and the static synapses onto the shard's neurons.
    pub fn synapses(&self) -> (u64, u64) {
        (self.plastic.len() as u64, self.stat.synapses())
    }
}

/// Whether `Shard::build` counts the lists of the shard of neurons
/// `first..first + len` densely, in one pass with 12 bytes per source of the
/// network ([`DenseCounter`]): where that is less than what the shard will
/// hold (its synapses' targets and weights and the expected rows and lists),
/// so that the peak of the build is not raised, and one pass of drawing
/// every source of every neuron again is saved. Under weak scaling it is
/// up to about 10⁴ ranks of one unit of scale.
pub fn counts_densely(model: &Model, first: u32, len: u32) -> bool {
    let e = excitatory(model, first, len) as f64;
    let synapses = e * CE as f64 * 10.0 + (len as f64 * (CE + CI) as f64 - e * CE as f64) * 2.0;
    let dense = (DenseCounter::BYTES_PER_SOURCE * (model.ne + model.n) as usize) as f64;
    dense <= synapses + expected_shard_bytes(model, first, len)
}

/// `1 - (1 - 1/pool)^draws`: the chance that a source is drawn at least once
/// in `draws` uniform draws from `pool` sources.
fn drawn(pool: f64, draws: f64) -> f64 {
    if pool <= 0.0 || draws <= 0.0 {
        return 0.0;
    }
    -(draws * (-1.0 / pool).ln_1p()).exp_m1()
}

/// The expected sources with a row (E->E) and with a static list on the
/// shard of neurons `first..first + len`: a source is present when one of
/// the shard's neurons draws it, and a neuron never draws itself.
pub fn expected_present(model: &Model, first: u32, len: u32) -> (f64, f64) {
    let (ne, ni) = (model.ne as f64, model.ni as f64);
    let e = excitatory(model, first, len) as f64;
    let i = len as f64 - e;
    let (ce, ci) = (CE as f64, CI as f64);
    // E sources drawn by the shard's E neurons (from the other ne - 1): the
    // shard's own e sources by e - 1 of them, the others by all e.
    let plastic = e * drawn(ne - 1.0, ce * (e - 1.0)) + (ne - e) * drawn(ne - 1.0, ce * e);
    // E sources drawn by the I neurons (from all ne); I sources drawn by the
    // E neurons (from all ni) and by the I neurons (from the other ni - 1).
    let stat_e = ne * drawn(ne, ce * i);
    let absent_i = |others: f64| (1.0 - drawn(ni, ci * e)) * (1.0 - drawn(ni - 1.0, ci * others));
    let stat_i = i * (1.0 - absent_i(i - 1.0)) + (ni - i) * (1.0 - absent_i(i));
    (plastic, stat_e + stat_i)
}

/// Bytes the shard of neurons `first..first + len` holds beside its
/// synapses' targets and weights, its archives and its buffers, as
/// `Shard::build` allocates them for the [expected](expected_present)
/// present sources: the two indexes, each row's offsets
/// ([`ROW_HEAD_BYTES`]), each static list's offset, one more offset of each
/// kind, the delivery's memo where there are rows
/// ([`DELIVERY_MEMO_BYTES`]), and while building each present source's
/// previous target (4 bytes).
pub fn expected_shard_bytes(model: &Model, first: u32, len: u32) -> f64 {
    let (plastic, stat) = expected_present(model, first, len);
    let indexes = SourceIndex::bytes_for(model.ne) + SourceIndex::bytes_for(model.n);
    let e = excitatory(model, first, len) as usize;
    let memo = if e > 0 { DELIVERY_MEMO_BYTES } else { 0 };
    (indexes + memo) as f64
        + plastic * (ROW_HEAD_BYTES + 4) as f64
        + stat * (4.0 + 4.0)
        + (4 + 4 + 4) as f64
}

/// The excitatory sources whose traces the rank of neurons `first..first +
/// len` keeps ([`rank_traces`]): those with a row on one of its shards (the
/// shards' rows together are the rows of one shard of all the rank's
/// neurons, [`expected_present`]) and its own excitatory neurons, expected.
pub fn expected_rank_traces(model: &Model, first: u32, len: u32) -> f64 {
    let (plastic, _) = expected_present(model, first, len);
    let e = excitatory(model, first, len) as f64;
    // An own neuron without a row here: drawn by none of the other e - 1.
    plastic + e * (1.0 - drawn(model.ne as f64 - 1.0, CE as f64 * (e - 1.0)))
}

/// Bytes of the rank's traces ([`rank_traces`]) for the rank of neurons
/// `first..first + len`, expected: the index over the excitatory sources and
/// 16 bytes a trace.
pub fn expected_rank_trace_bytes(model: &Model, first: u32, len: u32) -> f64 {
    SourceIndex::bytes_for(model.ne) as f64
        + expected_rank_traces(model, first, len) * SourceTraces::BYTES_PER_SOURCE as f64
}

/// The rank's traces of its excitatory sources as sources, `K+` and last
/// spike time, once for all its shards: one for each excitatory source with a
/// row on one of `shards`, and one for each of the rank's own excitatory
/// neurons among `own` (a checkpoint keeps those, and their rows may all be
/// on other ranks).
pub fn rank_traces(model: &Model, shards: &[Shard], own: std::ops::Range<u32>) -> SourceTraces {
    let mut marks = IndexBuilder::new(model.ne);
    for sh in shards {
        sh.plastic.index().iter().for_each(|s| marks.mark(s));
    }
    own.take_while(|&t| t < model.ne)
        .for_each(|t| marks.mark(t));
    SourceTraces::new(marks.finish())
}

/// The trace before each spike of `codes` (sorted, of the interval that
/// starts at `base`) of its source, from `traces`, which takes the spike in
/// (advanced once, whatever number of shards deliver it), into `before`
/// (as long as `codes` after): what [`Shard::deliver`] hands each row. A
/// source without a trace on the rank (inhibitory, or without a row here)
/// gets a zero one, which no shard reads. The spikes of a step, sorted by
/// source, are taken in by up to `parts` threads of the current pool
/// ([`SourceTraces::spike_step`]). Never inlined, so that profiles count
/// it apart from the delivery.
#[inline(never)]
pub(crate) fn traces_before(
    traces: &mut SourceTraces,
    codes: &[u32],
    base: u64,
    d: &Dyn,
    before: &mut Vec<SourceTrace>,
    parts: usize,
) -> Result<()> {
    let mask = (1u32 << d.gid_bits) - 1;
    before.clear();
    before.resize(codes.len(), SourceTrace::default());
    let mut at = 0;
    while at < codes.len() {
        let offset = codes[at] >> d.gid_bits;
        // This step's spikes, the excitatory sources (ids below ne) first.
        let len = codes[at..].partition_point(|&c| c >> d.gid_bits == offset);
        let step = &codes[at..at + len];
        let e = step.partition_point(|&c| c & mask < d.ne);
        let t = (base + offset as u64 + 1) as f64 * d.dt;
        traces.spike_step(
            d.rule,
            t,
            &step[..e],
            |c| c & mask,
            &mut before[at..at + e],
            parts,
        )?;
        at += len;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Params;

    fn model(scale: f64) -> Model {
        Model::new(Params {
            scale,
            ..Params::default()
        })
        .unwrap()
    }

    /// Counted densely (two passes) or not (three), a shard is the same.
    #[test]
    fn both_ways_of_counting_build_the_same_shard() {
        let model = model(0.05);
        // E neurons, and a shard of E and I neurons.
        for (first, len) in [(0, 100), (440, 30)] {
            assert!(counts_densely(&model, first, len));
            let a = Shard::build_counting(&model, first, len, true).unwrap();
            let b = Shard::build_counting(&model, first, len, false).unwrap();
            assert_eq!(a.stat, b.stat);
            assert_eq!(a.plastic.index(), b.plastic.index());
            assert_eq!(a.plastic.all_weights(), b.plastic.all_weights());
            for p in 0..a.plastic.index().len() {
                assert!(a.plastic.targets(p).eq(b.plastic.targets(p)));
                assert_eq!(a.plastic.weights_start(p), b.plastic.weights_start(p));
            }
            assert_eq!(a.synapse_bytes(), b.synapse_bytes());
            assert_eq!(a.synapses(), b.synapses());
            assert!(!a.plastic.is_empty() && a.stat.synapses() > 0);
        }
    }

    /// On a shard of a few neurons of a network of 112,500 (scale 10), most
    /// sources have no target: the shard holds rows and lists for the
    /// present ones only, allocated to the byte as counted, and the estimate's
    /// expected counts are what is drawn.
    #[test]
    fn a_small_shard_holds_its_present_sources_only() {
        let model = model(10.0);
        let (ne, n) = (model.ne, model.n);
        // E only, E only, E and I, I only: few synapses, counted in three
        // passes.
        for (first, len) in [(0, 1), (50_000, 4), (ne - 3, 6), (n - 5, 5)] {
            assert!(!counts_densely(&model, first, len));
            let sh = Shard::build(&model, first, len).unwrap();
            let (plastic, stat) = sh.present_sources();
            let (stdp, n_static) = sh.synapses();
            let e = excitatory(&model, first, len) as u64;
            assert_eq!(stdp, e * CE as u64);
            assert_eq!(stdp + n_static, len as u64 * (CE + CI) as u64);
            // Every row's targets and weights in place: no step of a shard of
            // 6 neurons needs an escape, so a target is one unit.
            let archives = len as usize * std::mem::size_of::<PostArchive>();
            let memo = if plastic > 0 { DELIVERY_MEMO_BYTES } else { 0 };
            let want = SourceIndex::bytes_for(ne)
                + SourceIndex::bytes_for(n)
                + plastic * ROW_HEAD_BYTES
                + 8
                + memo
                + stdp as usize * 10
                + (stat + 1) * 4
                + n_static as usize * 2
                + archives;
            assert_eq!(sh.synapse_bytes(), want as u64, "shard {first}+{len}");
            // Far fewer rows than sources: at most a few per synapse.
            assert!(plastic as u64 <= stdp && stat as u64 <= n_static);
            let (ep, es) = expected_present(&model, first, len);
            for (got, exp, what) in [(plastic, ep, "rows"), (stat, es, "lists")] {
                // Within four standard deviations of a binomial count.
                let tol = 4.0 * exp.sqrt() + 1.0;
                assert!(
                    (got as f64 - exp).abs() <= tol,
                    "shard {first}+{len}: {got} {what}, {exp:.1} expected"
                );
            }
            // The rank's traces (one shard here): a row's source or an own
            // excitatory neuron each.
            let traces = rank_traces(&model, std::slice::from_ref(&sh), first..first + len);
            assert!(traces.len() >= plastic && traces.len() <= plastic + e as usize);
            assert_eq!(
                traces.bytes(),
                SourceIndex::bytes_for(ne) + traces.len() * SourceTraces::BYTES_PER_SOURCE
            );
            let exp = expected_rank_traces(&model, first, len);
            assert!(
                (traces.len() as f64 - exp).abs() <= 4.0 * exp.sqrt() + 1.0,
                "shard {first}+{len}: {} traces, {exp:.1} expected",
                traces.len()
            );
            let beside =
                sh.synapse_bytes() as f64 - (stdp * 10 + n_static * 2) as f64 - archives as f64
                    + 4.0 * (plastic + stat) as f64;
            let est = expected_shard_bytes(&model, first, len);
            assert!(
                (est - beside).abs() <= 0.01 * beside,
                "shard {first}+{len}: estimate {est:.0}, allocated {beside:.0}"
            );
        }
    }
}
