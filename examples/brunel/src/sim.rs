//! The simulation loop of one rank.
//!
//! # Time stepping
//!
//! Step `u` advances every neuron from `u*dt` to `(u+1)*dt` exactly as NEST's
//! `iaf_psc_delta`: a neuron that is not refractory decays, `V <- V*exp(-dt/tau_m)`,
//! and adds the inputs arriving in this step (`J` per excitatory and external
//! spike, `-g*J` per inhibitory spike); a refractory one stays at `V_reset`, counts
//! down and drops its inputs. `V >= V_th` emits a spike at time `(u+1)*dt`, resets
//! and starts `t_ref/dt` refractory steps. A spike emitted in step `u` arrives in
//! step `u + D` (`D = delay/dt`). The external drive is a Poisson count with mean
//! `p_rate*dt` drawn per neuron per step from the neuron's own stream (counter =
//! step); it is drawn for every neuron, a chunk of neurons at a time, and a
//! refractory neuron's count is not used (NEST draws and discards).
//!
//! # State layout
//!
//! The rank's neurons are split into one *shard* per thread (contiguous ranges).
//! A shard owns its potentials (f64, as NEST), refractory counters (u32) and ring
//! buffers: `R = next_pow2(D + 1)` slots of one `u16` per neuron for the number
//! of excitatory and one for the number of inhibitory inputs arriving in that
//! step (a slot's row is 2 bytes per neuron, so it stays in cache during
//! delivery). Counting in integers makes the sum of inputs independent of the
//! order of delivery, so the result is bit-identical for any number of ranks and
//! threads without sorting spikes.
//!
//! # Exchange and overlap
//!
//! Spikes are exchanged every interval of `M` steps. A spike of interval `k`
//! (steps `kM..kM+M`) arrives at step `kM + D` or later. With overlap (the
//! default), `M = floor(D/2)`: iteration `k` exchanges the spikes of interval
//! `k-1` ([`SpikeExchange::overlap`]) while it delivers the spikes of interval
//! `k-2` and updates interval `k`. This is exact
//! because `2M <= D`: the earliest arrival of interval `k-2`, `(k-2)M + D`, is not
//! before `kM`. (With `M = D` the spikes of interval `k-1` are needed by the first
//! step of interval `k`, so an exchange at the min-delay interval cannot overlap
//! the next update.) Without overlap `M = D` and each exchange is finished before
//! the next update, as NEST does.

use std::time::Instant;

use anyhow::Result;
use rayon::prelude::*;

use crate::checkpoint::{self, Restart, State};
use crate::network::{Block, Connectivity, Csr, Local, Rows};
use crate::output::{Recorder, Stats};
use crate::params::Model;
use hpc_spiking::alltoallv::Gather;
use hpc_spiking::exchange::SpikeExchange;
use hpc_spiking::intake::{Intake, SpikeFile};
use hpc_spiking::rank_loop::{run_intervals, IntervalRank, Ran, RankRun};
use hpc_spiking::ring::DelayRing;
use hpc_spiking::rng::{stream_key, PoissonTable, Purpose};

pub use hpc_spiking::RunOptions;

pub use hpc_spiking::progress::Progress;

/// What one rank did: what every network's rank reports ([`RankRun`], its
/// fields read through this report), then brunel's own.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct RankReport {
    /// The run of the rank.
    #[serde(flatten)]
    pub run: RankRun,
    /// Synapses stored on this rank (onto its neurons).
    pub synapses: u64,
    /// Bytes of the rank's connectivity.
    pub connectivity_bytes: u64,
    /// Bytes of the rank's neuron state and ring buffers.
    pub state_bytes: u64,
    /// Spikes of all ranks exchanged during this run.
    pub spikes_exchanged: u64,
    /// Statistics of the whole run so far (rank 0 only).
    pub stats: Option<Stats>,
}

impl std::ops::Deref for RankReport {
    type Target = RankRun;

    fn deref(&self) -> &RankRun {
        &self.run
    }
}

/// Constants of the update, copied into each worker.
#[derive(Clone, Copy, Debug)]
struct Dyn {
    decay: f64,
    j: f64,
    gj: f64,
    v_th: f64,
    v_reset: f64,
    ref_steps: u32,
    delay: u64,
    gid_bits: u32,
    gid_mask: u32,
    ne: u32,
}

#[derive(Clone)]
struct Shard {
    /// Local indices of the shard's neurons.
    block: Block,
    /// Global id of the first neuron.
    gid0: u32,
    v: Vec<f64>,
    refr: Vec<u32>,
    keys: Vec<u64>,
    /// Excitatory inputs per (step, neuron).
    ring_e: DelayRing<u16>,
    /// Inhibitory inputs per (step, neuron).
    ring_i: DelayRing<u16>,
    spikes: Vec<u32>,
    /// The drive of the chunk being updated ([`CHUNK`] counts; every chunk
    /// writes what it reads, so it needs no clearing).
    drive: Box<[u32; CHUNK]>,
    /// Who fired in the chunk being updated.
    fired: Box<[u8; CHUNK]>,
}

impl Shard {
    /// Adds the inputs of the spikes `codes` of the interval starting at `base`.
    fn deliver(&mut self, conn: &Connectivity, codes: &[u32], base: u64, d: &Dyn, whole: bool) {
        match conn.rows() {
            Rows::Narrow(rows) => self.deliver_rows(rows, codes, base, d, whole),
            Rows::Wide(rows) => self.deliver_rows(rows, codes, base, d, whole),
        }
    }

    /// [`Shard::deliver`] from rows of targets of one width.
    #[inline(always)]
    fn deliver_rows<T: Local>(
        &mut self,
        rows: Csr<'_, T>,
        codes: &[u32],
        base: u64,
        d: &Dyn,
        whole: bool,
    ) {
        let len = self.block.len as usize;
        let (lo_t, hi_t) = (self.block.first, self.block.end());
        for &code in codes {
            let gid = code & d.gid_mask;
            let s = (code >> d.gid_bits) as u64;
            let arrival = base + s + d.delay;
            let mut row = rows.row(gid);
            if !whole {
                let lo = row.partition_point(|&t| t.index() < lo_t);
                row = &row[lo..];
                let hi = row.partition_point(|&t| t.index() < hi_t);
                row = &row[..hi];
            }
            let ring = if gid < d.ne {
                &mut self.ring_e.row_mut(arrival)[..len]
            } else {
                &mut self.ring_i.row_mut(arrival)[..len]
            };
            for &t in row {
                ring[(t.index() - lo_t) as usize] += 1;
            }
        }
    }

    /// Updates steps `step0..step0 + m`, appending spike codes to `self.spikes`,
    /// with the widest vector instructions the processor has (AVX-512, AVX2,
    /// else the portable build): every build gives the same bits, since Rust
    /// fuses no multiply with an add unless asked.
    fn update(&mut self, step0: u64, m: u32, d: &Dyn, pois: &PoissonTable) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx512dq") && has!("avx512vl") {
                // SAFETY: the processor has the features the function is compiled for.
                return unsafe { self.update_avx512(step0, m, d, pois) };
            }
            if has!("avx2") {
                // SAFETY: as above.
                return unsafe { self.update_avx2(step0, m, d, pois) };
            }
        }
        self.update_body(step0, m, d, pois)
    }

    /// [`Shard::update`] compiled for AVX-512 (the drive's 64-bit hashes in
    /// eight lanes).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,avx512f,avx512dq,avx512vl")]
    unsafe fn update_avx512(&mut self, step0: u64, m: u32, d: &Dyn, pois: &PoissonTable) {
        self.update_body(step0, m, d, pois)
    }

    /// [`Shard::update`] compiled for AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn update_avx2(&mut self, step0: u64, m: u32, d: &Dyn, pois: &PoissonTable) {
        self.update_body(step0, m, d, pois)
    }

    /// The update, a chunk of [`CHUNK`] neurons at a time: the chunk's drive
    /// ([`PoissonTable::sample_streams`], drawn for every neuron: a
    /// refractory one's draw is not used, as NEST draws and discards), then
    /// its neurons in a loop without branches, which also marks who fired;
    /// only a chunk with a spike is scanned for them.
    #[inline(always)]
    fn update_body(&mut self, step0: u64, m: u32, d: &Dyn, pois: &PoissonTable) {
        let len = self.block.len as usize;
        let (decay, j, gj, v_th, v_reset, ref_steps) =
            (d.decay, d.j, d.gj, d.v_th, d.v_reset, d.ref_steps);
        for s in 0..m {
            let step = step0 + s as u64;
            let ring_e = &mut self.ring_e.row_mut(step)[..len];
            let ring_i = &mut self.ring_i.row_mut(step)[..len];
            let code0 = (s << d.gid_bits) | self.gid0;
            let mut c0 = 0;
            while c0 < len {
                let c1 = (c0 + CHUNK).min(len);
                let n = c1 - c0;
                let drive = &mut self.drive[..n];
                pois.sample_streams(&self.keys[c0..c1], step, drive);
                let fired = &mut self.fired[..n];
                let (v, refr) = (&mut self.v[c0..c1], &mut self.refr[c0..c1]);
                let (ring_e, ring_i) = (&mut ring_e[c0..c1], &mut ring_i[c0..c1]);
                let mut any = 0u8;
                for i in 0..n {
                    let exc = std::mem::take(&mut ring_e[i]) as u32 + drive[i];
                    let inh = std::mem::take(&mut ring_i[i]);
                    let r = refr[i];
                    let x = v[i] * decay + j * exc as f64 - gj * inh as f64;
                    let spike = r == 0 && x >= v_th;
                    v[i] = if spike {
                        v_reset
                    } else if r == 0 {
                        x
                    } else {
                        v[i]
                    };
                    refr[i] = if spike {
                        ref_steps
                    } else {
                        r.saturating_sub(1)
                    };
                    fired[i] = spike as u8;
                    any |= spike as u8;
                }
                if any != 0 {
                    let first = code0 + c0 as u32;
                    for (i, &f) in fired.iter().enumerate() {
                        if f != 0 {
                            self.spikes.push(first + i as u32);
                        }
                    }
                }
                c0 = c1;
            }
        }
    }
}

/// Neurons per chunk of the update: their state, inputs and drive stay in L1
/// between the chunk's loops.
const CHUNK: usize = 512;

/// One rank of the simulation.
pub struct Simulation<'a> {
    model: &'a Model,
    rank: usize,
    size: usize,
    block: Block,
    conn: Connectivity,
    shards: Vec<Shard>,
    dynp: Dyn,
    pois: PoissonTable,
    step: u64,
    build_s: f64,
    restored: Option<Restart>,
}

impl<'a> Simulation<'a> {
    /// Builds rank `rank`'s part of the network with the threads of `pool`, or
    /// restores it from a checkpoint.
    pub fn new(
        model: &'a Model,
        rank: usize,
        size: usize,
        pool: &rayon::ThreadPool,
        opts: &hpc_spiking::run::RunOptions,
    ) -> Result<Simulation<'a>> {
        let t0 = Instant::now();
        let _span = tracing::info_span!("build").entered();
        // A checkpoint of another model is refused before the network is built.
        let restored = checkpoint::resume(opts, model)?;
        let block = Block::part(model.n, size as u32, rank as u32);
        let conn = pool.install(|| Connectivity::build(model, block));
        let threads = block.shards(pool.current_num_threads());
        let p = &model.params;
        let shards = (0..threads)
            .map(|t| {
                let b = Block::part(block.len, threads, t);
                let len = b.len as usize;
                // The rows' size follows --delay and --order: beyond the memory
                // available (with --allow-oversize) it is an error, not a panic.
                let ring = || DelayRing::try_new(model.delay_steps, len);
                Ok(Shard {
                    block: b,
                    gid0: block.first + b.first,
                    v: vec![p.v_init; len],
                    refr: vec![0; len],
                    keys: (0..b.len)
                        .map(|i| stream_key(p.seed, Purpose::External, block.first + b.first + i))
                        .collect(),
                    ring_e: ring()?,
                    ring_i: ring()?,
                    spikes: Vec::with_capacity(len.min(1 << 16)),
                    drive: Box::new([0; CHUNK]),
                    fired: Box::new([0; CHUNK]),
                })
            })
            .collect::<Result<_>>()?;
        let dynp = Dyn {
            decay: model.decay,
            j: p.j,
            gj: p.g * p.j,
            v_th: p.v_th,
            v_reset: p.v_reset,
            ref_steps: model.ref_steps,
            delay: model.delay_steps as u64,
            gid_bits: model.gid_bits,
            gid_mask: ((1u64 << model.gid_bits) - 1) as u32,
            ne: model.ne,
        };
        let mut sim = Simulation {
            model,
            rank,
            size,
            block,
            conn,
            shards,
            dynp,
            pois: PoissonTable::new(model.lambda_ext),
            step: 0,
            build_s: 0.0,
            restored: None,
        };
        if let Some(r) = restored {
            let st = checkpoint::read(&r, model, block)?;
            sim.set_state(r.step(), &st);
            hpc_spiking::checkpoint::restored(&r);
            sim.restored = Some(r);
        }
        sim.build_s = t0.elapsed().as_secs_f64();
        Ok(sim)
    }

    /// Steps done.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The rank's neurons (global ids).
    pub fn block(&self) -> Block {
        self.block
    }

    /// The rank's connectivity.
    pub fn connectivity(&self) -> &Connectivity {
        &self.conn
    }

    /// The state of the rank's neurons (ring buffer relative to the current step).
    pub fn state(&self) -> State {
        let n = self.block.len as usize;
        let d = self.model.delay_steps as usize;
        let mut st = State {
            v: Vec::with_capacity(n),
            refr: Vec::with_capacity(n),
            ring: vec![0; d * n],
        };
        for sh in &self.shards {
            st.v.extend_from_slice(&sh.v);
            st.refr.extend_from_slice(&sh.refr);
            let len = sh.block.len as usize;
            for k in 0..d {
                let at = self.step + k as u64;
                let (e, i) = (sh.ring_e.row(at), sh.ring_i.row(at));
                let dst = &mut st.ring[k * n + sh.block.first as usize..][..len];
                for (x, (&e, &i)) in dst.iter_mut().zip(e.iter().zip(i)) {
                    *x = e as u32 | (i as u32) << 16;
                }
            }
        }
        st
    }

    fn set_state(&mut self, step: u64, st: &State) {
        self.step = step;
        let n = self.block.len as usize;
        let d = self.model.delay_steps as usize;
        for sh in &mut self.shards {
            let (f, len) = (sh.block.first as usize, sh.block.len as usize);
            sh.v.copy_from_slice(&st.v[f..f + len]);
            sh.refr.copy_from_slice(&st.refr[f..f + len]);
            sh.ring_e.clear();
            sh.ring_i.clear();
            for k in 0..d {
                let at = step + k as u64;
                let src = &st.ring[k * n + f..][..len];
                let (e, i) = (sh.ring_e.row_mut(at), sh.ring_i.row_mut(at));
                for (&x, (e, i)) in src.iter().zip(e.iter_mut().zip(i)) {
                    (*e, *i) = ((x & 0xFFFF) as u16, (x >> 16) as u16);
                }
            }
        }
    }

    fn deliver_all(&mut self, pool: &rayon::ThreadPool, codes: &[u32], base: u64) {
        let (conn, d) = (&self.conn, &self.dynp);
        let whole = self.shards.len() == 1;
        pool.install(|| {
            self.shards
                .par_iter_mut()
                .for_each(|sh| sh.deliver(conn, codes, base, d, whole))
        });
    }

    /// Runs to `t_sim` (or `opts.stop_at`), exchanging spikes through `ex`.
    /// `progress` is called after every interval.
    pub fn run<E: SpikeExchange>(
        &mut self,
        pool: &rayon::ThreadPool,
        ex: &mut E,
        opts: &RunOptions,
        progress: Option<&mut dyn FnMut(&Progress)>,
    ) -> Result<RankReport> {
        let model = self.model;
        let mut rank = Stepping { sim: self, pool };
        let ran = run_intervals(&mut rank, &mut Gather(ex), (opts, &model.params), progress)?;
        self.report(ran)
    }

    /// The rank's report at the end of the run, its spike file finished if
    /// the run completed.
    fn report(&self, ran: Ran<Recorder>) -> Result<RankReport> {
        let model = self.model;
        let exchanged = ran.intake.received;
        let who = (self.rank, self.size, self.shards.len());
        let (run, recorder) =
            ran.finish(who, self.block, (self.step, model.steps, self.build_s))?;
        let state_bytes: usize = self
            .shards
            .iter()
            .map(|s| {
                s.v.len() * 8
                    + s.refr.len() * 4
                    + s.keys.len() * 8
                    + s.ring_e.bytes()
                    + s.ring_i.bytes()
            })
            .sum();
        Ok(RankReport {
            run,
            synapses: self.conn.synapses(),
            connectivity_bytes: self.conn.bytes(),
            state_bytes: state_bytes as u64,
            spikes_exchanged: exchanged,
            stats: recorder.map(|r| r.stats(self.step as f64 * model.params.dt)),
        })
    }
}

/// A rank of the simulation as [`run_intervals`] steps it: with the threads of
/// its pool, one shard each.
struct Stepping<'s, 'a> {
    sim: &'s mut Simulation<'a>,
    pool: &'s rayon::ThreadPool,
}

impl IntervalRank for Stepping<'_, '_> {
    type Record = Recorder;

    fn rank_size(&self) -> (usize, usize) {
        (self.sim.rank, self.sim.size)
    }

    fn step(&self) -> u64 {
        self.sim.step
    }

    fn set_step(&mut self, step: u64) {
        self.sim.step = step;
    }

    fn shape(&self) -> (u32, u64, Option<u64>) {
        (self.sim.model.delay_steps, self.sim.model.steps, None)
    }

    /// Rank 0's recorder (it receives every spike in the exchange) and spike
    /// file, continued from a restored checkpoint's; nothing on the others.
    fn intake(&self, opts: &RunOptions) -> Result<Intake<Recorder>> {
        let (sim, model) = (&*self.sim, self.sim.model);
        let header = crate::output::header_json(model);
        let file = opts.spikes.as_deref().map(|path| SpikeFile {
            path,
            header: &header,
            flush_every: 1,
        });
        let recorder = || Recorder::new(model.n);
        let restored = sim.restored.as_ref();
        Intake::open((sim.rank, sim.step), recorder, file, restored, model.n)
    }

    fn update(&mut self, codes: &[u32], base: u64, step0: u64, m: u32) -> Result<()> {
        let sim = &mut *self.sim;
        let (conn, dp, pois) = (&sim.conn, &sim.dynp, &sim.pois);
        let whole = sim.shards.len() == 1;
        let shards = &mut sim.shards;
        let _s = tracing::info_span!("deliver_update", step = step0).entered();
        self.pool.install(|| {
            shards.par_iter_mut().for_each(|sh| {
                sh.deliver(conn, codes, base, dp, whole);
                sh.spikes.clear();
                sh.update(step0, m, dp, pois);
            })
        });
        Ok(())
    }

    fn deliver_now(&mut self, codes: &[u32], base: u64) {
        self.sim.deliver_all(self.pool, codes, base);
    }

    fn spikes(&self, send: &mut Vec<u32>) {
        for sh in &self.sim.shards {
            send.extend_from_slice(&sh.spikes);
        }
    }

    /// Takes the spikes of the exchange of the interval of `m` steps from `base`.
    /// Rank 0 sorts them first (by step, then neuron), so that it delivers them in
    /// that order and they need no sorting as it records them.
    fn receive(&self, intake: &mut Intake<Recorder>, base: u64, m: u32) -> Result<()> {
        if self.sim.rank == 0 {
            intake.incoming.sort_unstable();
        }
        intake.receive(base, m, self.sim.model.gid_bits)
    }

    /// This rank's checkpoint at the current step; rank 0 commits it (with the
    /// spike file so far) once every rank's file is there.
    fn checkpoint(&self) -> Vec<u8> {
        let sim = &*self.sim;
        checkpoint::encode(sim.model, sim.step, sim.block, &sim.state())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hpc_spiking::rng::{draw, mix64};

    /// A shard of `len` neurons in mid-run: potentials near threshold, some
    /// refractory, inputs pending in every slot.
    fn shard(len: u32, d: &Dyn) -> Shard {
        let n = len as usize;
        let mut ring_e = DelayRing::new(4, n);
        let mut ring_i = DelayRing::new(4, n);
        for step in 0..4u64 {
            for i in 0..n {
                let h = mix64(step << 32 | i as u64);
                ring_e.row_mut(step)[i] = (h % 7) as u16;
                ring_i.row_mut(step)[i] = (h >> 8) as u16 % 3;
            }
        }
        Shard {
            block: Block { first: 0, len },
            gid0: 100,
            v: (0..n)
                .map(|i| (mix64(i as u64) % 200) as f64 / 10.0)
                .collect(),
            refr: (0..n)
                .map(|i| (i % 5 == 0) as u32 * (i as u32 % d.ref_steps.max(1)))
                .collect(),
            keys: (0..len)
                .map(|i| stream_key(3, Purpose::External, i))
                .collect(),
            ring_e,
            ring_i,
            spikes: Vec::new(),
            drive: Box::new([0; CHUNK]),
            fired: Box::new([0; CHUNK]),
        }
    }

    /// One neuron at a time as the update was written first: the draw only
    /// when the neuron integrates.
    fn reference(sh: &mut Shard, step0: u64, m: u32, d: &Dyn, pois: &PoissonTable) {
        let len = sh.block.len as usize;
        for s in 0..m {
            let step = step0 + s as u64;
            let code0 = (s << d.gid_bits) | sh.gid0;
            for i in 0..len {
                let exc = std::mem::take(&mut sh.ring_e.row_mut(step)[i]) as u32;
                let inh = std::mem::take(&mut sh.ring_i.row_mut(step)[i]);
                if sh.refr[i] == 0 {
                    let exc = exc + pois.sample(draw(sh.keys[i], step));
                    let mut x = sh.v[i] * d.decay + d.j * exc as f64 - d.gj * inh as f64;
                    if x >= d.v_th {
                        x = d.v_reset;
                        sh.refr[i] = d.ref_steps;
                        sh.spikes.push(code0 + i as u32);
                    }
                    sh.v[i] = x;
                } else {
                    sh.refr[i] -= 1;
                }
            }
        }
    }

    #[test]
    fn every_build_of_the_update_gives_the_neuron_at_a_times_bits() {
        for ref_steps in [0, 1, 20] {
            let d = Dyn {
                decay: (-0.1f64 / 20.0).exp(),
                j: 0.1,
                gj: 0.5,
                v_th: 20.0,
                v_reset: 10.0,
                ref_steps,
                delay: 15,
                gid_bits: 16,
                gid_mask: 0xFFFF,
                ne: 0,
            };
            let pois = PoissonTable::new(2.0);
            // Over and under a chunk, and not a multiple of one.
            for len in [1, 7, CHUNK as u32, 1300] {
                let mut want = shard(len, &d);
                let (mut portable, mut best) = (want.clone(), want.clone());
                reference(&mut want, 40, 4, &d, &pois);
                portable.update_body(40, 4, &d, &pois);
                best.update(40, 4, &d, &pois);
                assert!(
                    len < 512 || !want.spikes.is_empty(),
                    "len {len}: no spike to compare"
                );
                for got in [&mut portable, &mut best] {
                    assert_eq!(got.spikes, want.spikes, "len {len}, ref {ref_steps}");
                    assert_eq!(got.refr, want.refr, "len {len}, ref {ref_steps}");
                    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got.v), bits(&want.v), "len {len}, ref {ref_steps}");
                    for step in 40..44 {
                        assert!(got.ring_e.row_mut(step).iter().all(|&x| x == 0));
                    }
                }
            }
        }
    }
}
