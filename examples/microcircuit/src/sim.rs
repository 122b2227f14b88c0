//! The simulation loop of one rank.
//!
//! # Neurons
//!
//! Step `u` advances every neuron from `u*dt` to `(u+1)*dt` exactly as NEST's
//! `iaf_psc_exp` (exact integration, `V` relative to `E_L`): a neuron that is not
//! refractory evolves `V <- V P22 + I_ex P21 + I_in P21 + I_e P20`; a refractory one
//! counts down. Both currents then decay by `P11` and take the input arriving in
//! this step; `V >= V_th` emits a spike at `(u+1)*dt`, resets `V` and starts
//! `t_ref/dt` refractory steps. A spike of step `u` with a delay of `d` steps
//! arrives in step `u + d` (NEST's convention). The background is a Poisson count
//! of mean `bg_rate K_ext dt` per neuron and step, drawn from the neuron's stream
//! with the step as counter, times the external weight.
//!
//! # Inputs in integers, delivered when they arrive
//!
//! Both synaptic currents have the same time constant, so one current `I_syn`
//! carries them. Weights are stored as 16-bit multiples of a quantum (about
//! 0.01 pA at full scale, 1e-4 of the mean weight) and summed in an `i32` input
//! buffer per neuron, so the sum does not depend on the order of delivery and the
//! spikes are bit-identical for any number of ranks and threads.
//!
//! A spike is not written into a ring buffer of future inputs at once (gigabytes
//! of random writes at full scale). It waits in a calendar of steps (one slot per
//! step, as many slots as the longest delay): in each step the spikes of the
//! current slot deliver their synapses of the delay that has come due (one group
//! of their row, [`crate::network`]) into the one input buffer of that step, which
//! stays in cache, and move to the slot of their next delay.
//!
//! # Shards and exchange
//!
//! A rank's neurons are split into one shard per thread, each with its own
//! connectivity ([`crate::network`]), state and calendar. Spikes are exchanged
//! every `M` steps: `M` is the shortest delay (one step with NEST's redrawn normal
//! delays) and each exchange completes before the next update; when the shortest
//! delay is `D >= 2` steps, `M = D/2` and the exchange of interval `k` overlaps the
//! update of interval `k + 1` (see the brunel example's `sim` module for why that
//! is exact).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use hpc_spiking::Block;
use rayon::prelude::*;

use crate::checkpoint::{self, Restart, State};
use crate::network::{build_shard, Conn, COUNT_BITS, COUNT_MAX};
use crate::output::{spike_writer, Recorder, SpikeWriter, Stats};
use crate::params::{Model, Propagators, V0Type, NPOP};
use crate::rng::{draw, key, normal_redraw, Poisson32, Purpose, Stream};
use hpc_spiking::alltoallv::Exchange;
use hpc_spiking::team::{StopOnDrop, Team};

/// How to run: the options of brunel's simulation.
pub use hpc_spiking::RunOptions;

/// Progress, reported after every interval.
#[derive(Clone, Debug)]
pub struct Progress {
    /// Steps done.
    pub step: u64,
    /// Steps of the whole run.
    pub steps: u64,
    /// Step this run started from.
    pub start_step: u64,
    /// Wall time since the loop started.
    pub wall: Duration,
    /// Wall time since the warm-up ended (zero before).
    pub wall_recorded: Duration,
}

/// What one rank did.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct RankReport {
    /// This rank.
    pub rank: usize,
    /// Number of ranks.
    pub size: usize,
    /// Threads (shards) of this rank.
    pub threads: usize,
    /// First neuron of this rank.
    pub first: u32,
    /// Neurons of this rank.
    pub neurons: u32,
    /// Synapses onto this rank's neurons.
    pub synapses: u64,
    /// Bytes of this rank's connectivity.
    pub connectivity_bytes: u64,
    /// Bytes of neuron state and spikes in flight.
    pub state_bytes: u64,
    /// Steps per exchange interval.
    pub interval_steps: u32,
    /// Step the run started from.
    pub start_step: u64,
    /// Step the run reached.
    pub end_step: u64,
    /// Whether the run reached its end.
    pub completed: bool,
    /// Seconds building (or restoring) the network.
    pub build_s: f64,
    /// CPU seconds of the process while building.
    pub build_cpu_s: f64,
    /// Seconds in the loop.
    pub simulate_s: f64,
    /// Seconds in the loop after the warm-up.
    pub simulate_recorded_s: f64,
    /// CPU seconds of the process in the loop.
    pub simulate_cpu_s: f64,
    /// Seconds delivering and updating.
    pub update_s: f64,
    /// Seconds exchanging (and waiting).
    pub communicate_s: f64,
    /// Seconds writing spikes and checkpoints.
    pub io_s: f64,
    /// Spikes exchanged (of all ranks, as this rank received them).
    pub spikes_received: u64,
    /// Bytes of spike codes this rank received.
    pub bytes_received: u64,
    /// Synaptic events delivered onto this rank's neurons.
    pub events: u64,
    /// Statistics (rank 0).
    pub stats: Option<Stats>,
    /// The spike file, once complete (rank 0); any file name, UTF-8 or not.
    #[serde(with = "hpc_spiking::run::opt_path")]
    pub spike_file: Option<PathBuf>,
}

/// Constants of the update.
#[derive(Clone, Copy, Debug)]
struct Dyn {
    p22: f64,
    p21: f64,
    p20: f64,
    p11: f64,
    theta: f64,
    v_reset: f64,
    ref_steps: u32,
    q_syn: f64,
    w_ext: f64,
    dc: [f64; NPOP],
    /// Whether each population has a Poisson background.
    bg: [bool; NPOP],
    /// Key of the background streams (one per step, counter = neuron).
    bg_key: u64,
    gid_bits: u32,
    gid_mask: u32,
}

/// Whether [`Shard::update`] runs its portable build on every processor.
static PORTABLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes the neuron update run its portable build (`true`) even where the
/// processor has AVX2 or AVX-512, for which it is also compiled and chosen at
/// run time (the default, `false`). Both give the same spikes: Rust fuses no
/// multiply with an add unless asked, so the wider instructions compute the
/// same bits; a test checks it.
pub fn set_portable_update(portable: bool) {
    PORTABLE.store(portable, std::sync::atomic::Ordering::Relaxed);
}

/// A spike whose synapses onto the shard are not all delivered yet, waiting in
/// the calendar slot of the step its next group is due.
#[derive(Clone, Copy, Debug)]
struct Active {
    /// Next group of its row.
    g: u32,
    /// End of its row's groups.
    gend: u32,
    /// Position in `syn` of the next group's synapses.
    pos: u32,
    /// Inhibitory source.
    neg: bool,
    /// Step it was emitted in.
    t0: u64,
}

struct Shard {
    first: u32,
    len: u32,
    conn: Conn,
    v: Vec<f64>,
    isyn: Vec<f64>,
    refr: Vec<u32>,
    /// Input arriving in the current step, in weight quanta.
    input: Vec<i32>,
    /// Calendar of spikes in flight: slot `u & mask` holds those with a group due
    /// in step `u` (every delay is below the number of slots).
    calendar: Vec<Vec<Active>>,
    /// A spare slot, swapped with the one being delivered.
    spare: Vec<Active>,
    spikes: Vec<u32>,
    events: u64,
}

impl Shard {
    /// Starts delivering the spike of `gid` emitted in step `t0`; groups due
    /// before step `now` (delivered before a checkpoint) are skipped.
    #[inline]
    fn activate(&mut self, gid: u32, t0: u64, now: u64, neg: bool) {
        let c = &self.conn;
        let s = gid as usize;
        let (mut g, gend) = (c.grp[s], c.grp[s + 1]);
        let mut pos = c.row[s];
        while g < gend && t0 + (c.groups[g as usize] >> 24) as u64 <= now.saturating_sub(1) {
            pos += c.groups[g as usize] & COUNT_MAX;
            g += 1;
        }
        if g < gend {
            let due = t0 + (c.groups[g as usize] >> 24) as u64;
            let mask = self.calendar.len() - 1;
            self.calendar[due as usize & mask].push(Active {
                g,
                gend,
                pos,
                neg,
                t0,
            });
        }
    }

    /// Adds the input of every group due in step `u` to `input`, and files each
    /// spike under the step of its next group.
    fn deliver(&mut self, u: u64) {
        let (groups, syn, base) = (&self.conn.groups, &self.conn.syn, &self.conn.pop_base);
        let input = &mut self.input[..];
        let mask = self.calendar.len() - 1;
        // The next step's spikes: fetch their groups and first synapses into cache
        // while this step delivers and updates.
        for a in &self.calendar[(u + 1) as usize & mask] {
            prefetch(&groups[a.g as usize]);
            prefetch(&syn[a.pos as usize]);
        }
        let mut due = std::mem::take(&mut self.spare);
        std::mem::swap(&mut due, &mut self.calendar[u as usize & mask]);
        let mut events = 0u64;
        for mut a in due.drain(..) {
            let age = (u - a.t0) as u32;
            while a.g < a.gend {
                let gr = groups[a.g as usize];
                let d = gr >> 24;
                if d > age {
                    break;
                }
                debug_assert_eq!(d, age, "a group was not delivered in its step");
                let cnt = gr & COUNT_MAX;
                let b = base[((gr >> COUNT_BITS) & 7) as usize] as usize;
                let tg = &mut input[b..];
                let ws = &syn[a.pos as usize..(a.pos + cnt) as usize];
                if a.neg {
                    for &w in ws {
                        tg[(w & 0xFFFF) as usize] -= (w >> 16) as i32;
                    }
                } else {
                    for &w in ws {
                        tg[(w & 0xFFFF) as usize] += (w >> 16) as i32;
                    }
                }
                events += cnt as u64;
                a.pos += cnt;
                a.g += 1;
            }
            if a.g < a.gend {
                let next = a.t0 + (groups[a.g as usize] >> 24) as u64;
                self.calendar[next as usize & mask].push(a);
            }
        }
        self.spare = due;
        self.events += events;
    }

    /// Updates step `u` (`s`-th of its interval), appending spike codes to `spikes`.
    ///
    /// Per chunk of a population's neurons that fits L1, two loops: the
    /// background counts (one hash per pair of neurons, a guide-table lookup per
    /// neuron), then the neurons' exact update without branches, which the
    /// compiler turns into vector instructions; the spikes are collected from the
    /// refractory counters that were just set.
    fn update(&mut self, u: u64, s: u32, d: &Dyn, pois: &[Poisson32; NPOP]) {
        #[cfg(target_arch = "x86_64")]
        if !PORTABLE.load(std::sync::atomic::Ordering::Relaxed) {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx512dq") && has!("avx512vl") {
                // SAFETY: the processor has the features the function is compiled for.
                return unsafe { self.update_avx512(u, s, d, pois) };
            }
            if has!("avx2") {
                // SAFETY: as above.
                return unsafe { self.update_avx2(u, s, d, pois) };
            }
        }
        self.update_body(u, s, d, pois)
    }

    /// [`Shard::update`] compiled for AVX-512 (4 to 8 neurons per instruction,
    /// and the background's 64-bit multiplies vectorised). Rust never fuses a
    /// multiply and an add on its own, so every variant computes the same bits.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,avx512f,avx512dq,avx512vl")]
    unsafe fn update_avx512(&mut self, u: u64, s: u32, d: &Dyn, pois: &[Poisson32; NPOP]) {
        self.update_body(u, s, d, pois)
    }

    /// [`Shard::update`] compiled for AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn update_avx2(&mut self, u: u64, s: u32, d: &Dyn, pois: &[Poisson32; NPOP]) {
        self.update_body(u, s, d, pois)
    }

    #[inline(always)]
    fn update_body(&mut self, u: u64, s: u32, d: &Dyn, pois: &[Poisson32; NPOP]) {
        let code0 = s << d.gid_bits;
        let bg_key = key(d.bg_key, Purpose::Background, u, 0);
        for pop in 0..NPOP {
            let a = self.conn.pop_base[pop] as usize;
            let b = if pop + 1 < NPOP {
                self.conn.pop_base[pop + 1] as usize
            } else {
                self.len as usize
            };
            if a >= b {
                continue;
            }
            let gid0 = (self.first as usize + a) as u64;
            let dc = d.dc[pop] * d.p20;
            let (p22, p21, p11, q, w_ext) = (d.p22, d.p21, d.p11, d.q_syn, d.w_ext);
            let (theta, v_reset, ref_steps) = (d.theta, d.v_reset, d.ref_steps);
            // In chunks that stay in L1: the background counts of a chunk, then
            // its neurons.
            const CHUNK: usize = 512;
            let mut ext = [0.0f64; CHUNK];
            let mut c0 = a;
            while c0 < b {
                let c1 = (c0 + CHUNK).min(b);
                let n = c1 - c0;
                let ext = &mut ext[..n];
                if d.bg[pop] {
                    background(&pois[pop], bg_key, (self.first as usize + c0) as u64, ext);
                }
                let (v, isyn, refr, input) = (
                    &mut self.v[c0..c1],
                    &mut self.isyn[c0..c1],
                    &mut self.refr[c0..c1],
                    &mut self.input[c0..c1],
                );
                for i in 0..n {
                    let inp = input[i] as f64 * q + ext[i] * w_ext;
                    input[i] = 0;
                    let r = refr[i];
                    let x = if r == 0 {
                        v[i] * p22 + isyn[i] * p21 + dc
                    } else {
                        v[i]
                    };
                    isyn[i] = isyn[i] * p11 + inp;
                    let spike = x >= theta;
                    v[i] = if spike { v_reset } else { x };
                    refr[i] = if spike {
                        ref_steps
                    } else {
                        r.saturating_sub(1)
                    };
                }
                c0 = c1;
            }
            let refr = &self.refr[a..b];
            // A counter at its full value was set in this step (t_ref is at least
            // one step, so a counter set before has counted down): a spike.
            for (i, &r) in refr.iter().enumerate() {
                if r == ref_steps {
                    self.spikes.push(code0 | (gid0 as u32 + i as u32));
                }
            }
        }
    }
}

/// The background counts of the neurons `gid0..gid0 + out.len()` in step key
/// `bg_key`: one 64-bit draw per pair of neurons (2k, 2k + 1), the even one
/// taking the low 32 bits and the odd one the high 32, as uniforms of 32-bit
/// resolution for the table's inverse.
#[inline(always)]
fn background(table: &Poisson32, bg_key: u64, gid0: u64, out: &mut [f64]) {
    let n = out.len();
    let lo = |h: u64| table.sample(h as u32) as f64;
    let hi = |h: u64| table.sample((h >> 32) as u32) as f64;
    let mut i = 0;
    if gid0 & 1 == 1 && n > 0 {
        out[0] = hi(draw(bg_key, gid0 >> 1));
        i = 1;
    }
    while i + 1 < n {
        let h = draw(bg_key, (gid0 + i as u64) >> 1);
        out[i] = lo(h);
        out[i + 1] = hi(h);
        i += 2;
    }
    if i < n {
        out[i] = lo(draw(bg_key, (gid0 + i as u64) >> 1));
    }
}

/// Hints the processor to bring `x`'s cache line into L2.
#[inline(always)]
fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it reads nothing architecturally and cannot
    // fault, and `x` is a valid reference besides.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_mm_prefetch(x as *const T as *const i8, std::arch::x86_64::_MM_HINT_T1);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// One interval of `m` steps of one shard: the spikes `codes` (emitted from
/// step `base` on) start their delivery, then each step delivers and updates.
#[allow(clippy::too_many_arguments)]
fn interval(
    sh: &mut Shard,
    codes: &[u32],
    base: u64,
    step0: u64,
    m: u32,
    dp: &Dyn,
    pois: &[Poisson32; NPOP],
    inh: &[bool],
) {
    for &c in codes {
        let gid = c & dp.gid_mask;
        sh.activate(
            gid,
            base + (c >> dp.gid_bits) as u64,
            step0,
            inh[gid as usize],
        );
    }
    sh.spikes.clear();
    for s in 0..m {
        sh.deliver(step0 + s as u64);
        sh.update(step0 + s as u64, s, dp, pois);
    }
}

/// One interval, as the team's workers need it (see [`crate::team`]).
struct Job {
    codes: Vec<u32>,
    base: u64,
    step0: u64,
    m: u32,
}

impl Clone for Job {
    fn clone(&self) -> Job {
        let mut j = Job::empty();
        j.clone_from(self);
        j
    }

    /// Reuses the worker's buffer: an interval's codes are copied, not
    /// allocated, 10^4 times per biological second.
    fn clone_from(&mut self, o: &Job) {
        self.codes.clear();
        self.codes.extend_from_slice(&o.codes);
        (self.base, self.step0, self.m) = (o.base, o.step0, o.m);
    }
}

impl Job {
    fn empty() -> Job {
        Job {
            codes: Vec::new(),
            base: 0,
            step0: 0,
            m: 0,
        }
    }
}

/// One rank of the simulation.
pub struct Simulation<'a> {
    model: &'a Model,
    rank: usize,
    size: usize,
    block: Block,
    shards: Vec<Shard>,
    dynp: Dyn,
    inh: Vec<bool>,
    pois: [Poisson32; NPOP],
    /// Spikes `(step, gid)` whose synapses may still be pending (the last
    /// `max_delay` steps), for checkpoints.
    recent: Vec<(u64, u32)>,
    step: u64,
    build_s: f64,
    build_cpu_s: f64,
    restored: Option<Restart>,
}

impl<'a> Simulation<'a> {
    /// Builds rank `rank`'s part of the network with the threads of `pool` (one
    /// shard each), or restores its state from a checkpoint.
    pub fn new(
        model: &'a Model,
        rank: usize,
        size: usize,
        pool: &rayon::ThreadPool,
        restart: Option<&std::path::Path>,
    ) -> Result<Simulation<'a>> {
        let t0 = Instant::now();
        let cpu0 = hpc_spiking::run::cpu_seconds();
        let _span = tracing::info_span!("build").entered();
        let block = Block::part(model.n, size as u32, rank as u32);
        let threads = pool
            .current_num_threads()
            .clamp(1, block.len.max(1) as usize) as u32;
        let p = &model.params;
        let shards: Vec<Shard> = pool.install(|| {
            (0..threads)
                .into_par_iter()
                .map(|t| {
                    let b = Block::part(block.len, threads, t);
                    let first = block.first + b.first;
                    let len = b.len as usize;
                    let conn = build_shard(model, first, b.len);
                    let v = (0..b.len)
                        .map(|i| {
                            let gid = first + i;
                            let pop = model.pop_of(gid);
                            let (mean, std) = match p.v0_type {
                                V0Type::Optimized => {
                                    let q = &p.populations[crate::params::POPULATIONS[pop]];
                                    (q.v0_mean, q.v0_std)
                                }
                                V0Type::Original => (-58.0, 10.0),
                            };
                            let mut s = Stream::new(key(p.seed, Purpose::V0, gid as u64, 0));
                            normal_redraw(&mut s, mean, std, f64::NEG_INFINITY, f64::INFINITY)
                                - p.neuron.e_l
                        })
                        .collect();
                    Shard {
                        first,
                        len: b.len,
                        conn,
                        v,
                        isyn: vec![0.0; len],
                        refr: vec![0; len],
                        input: vec![0; len],
                        calendar: vec![
                            Vec::new();
                            (model.max_delay as usize + 1).next_power_of_two()
                        ],
                        spare: Vec::new(),
                        spikes: Vec::with_capacity(len.min(1 << 14)),
                        events: 0,
                    }
                })
                .collect()
        });
        let nu = &p.neuron;
        let prop = Propagators::new(nu, p.dt);
        let dynp = Dyn {
            p22: prop.p22,
            p21: prop.p21,
            p20: prop.p20,
            p11: prop.p11,
            theta: nu.v_th - nu.e_l,
            v_reset: nu.v_reset - nu.e_l,
            ref_steps: model.ref_steps,
            q_syn: model.q_syn,
            w_ext: model.w_ext,
            dc: model.dc,
            bg: std::array::from_fn(|i| model.lambda_ext[i] > 0.0),
            bg_key: p.seed,
            gid_bits: model.gid_bits,
            gid_mask: ((1u64 << model.gid_bits) - 1) as u32,
        };
        let inh = (0..model.n + model.n_th)
            .map(|g| {
                let pop = model.pop_of(g);
                pop < NPOP && !Model::excitatory(pop)
            })
            .collect();
        let mut sim = Simulation {
            model,
            rank,
            size,
            block,
            shards,
            dynp,
            inh,
            pois: std::array::from_fn(|i| Poisson32::new(model.lambda_ext[i])),
            recent: Vec::new(),
            step: 0,
            build_s: 0.0,
            build_cpu_s: 0.0,
            restored: None,
        };
        if let Some(dir) = restart {
            let r = checkpoint::open(dir)?;
            checkpoint::check_model(&r, model)?;
            let st = checkpoint::read(&r, model, block)?;
            sim.set_state(r.step(), st);
            tracing::info!(checkpoint = %r.dir().display(), step = r.step(), "restored");
            sim.restored = Some(r);
        }
        sim.build_s = t0.elapsed().as_secs_f64();
        sim.build_cpu_s = hpc_spiking::run::cpu_seconds() - cpu0;
        Ok(sim)
    }

    /// Steps done.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The rank's neurons.
    pub fn block(&self) -> Block {
        self.block
    }

    /// Synapses onto the rank's neurons.
    pub fn synapses(&self) -> u64 {
        self.shards.iter().map(|s| s.conn.synapses()).sum()
    }

    /// Bytes of the rank's connectivity.
    pub fn connectivity_bytes(&self) -> u64 {
        self.shards.iter().map(|s| s.conn.bytes()).sum()
    }

    /// Which sources have synapses onto this rank (for the targeted exchange).
    pub fn has_targets(&self) -> Vec<bool> {
        let n = (self.model.n + self.model.n_th) as usize;
        let mut out = vec![false; n];
        for c in self.shards.iter().map(|s| &s.conn) {
            for (s, o) in out.iter_mut().enumerate() {
                *o |= c.row[s + 1] > c.row[s];
            }
        }
        out
    }

    /// The state of the rank's neurons and the spikes still in flight.
    pub fn state(&self) -> State {
        let n = self.block.len as usize;
        let mut st = State {
            v: Vec::with_capacity(n),
            isyn: Vec::with_capacity(n),
            refr: Vec::with_capacity(n),
            recent: self.recent.clone(),
        };
        for sh in &self.shards {
            st.v.extend_from_slice(&sh.v);
            st.isyn.extend_from_slice(&sh.isyn);
            st.refr.extend_from_slice(&sh.refr);
        }
        st
    }

    fn set_state(&mut self, step: u64, st: State) {
        self.step = step;
        for sh in &mut self.shards {
            let len = sh.len as usize;
            let f = (sh.first - self.block.first) as usize;
            sh.v.copy_from_slice(&st.v[f..f + len]);
            sh.isyn.copy_from_slice(&st.isyn[f..f + len]);
            sh.refr.copy_from_slice(&st.refr[f..f + len]);
            sh.calendar.iter_mut().for_each(Vec::clear);
            for &(t0, gid) in &st.recent {
                sh.activate(gid, t0, step, self.inh[gid as usize]);
            }
        }
        self.recent = st.recent;
    }

    /// Starts delivering `codes`, spikes of the interval starting at `base`, on
    /// every shard, and remembers them for checkpoints.
    fn activate_all(&mut self, pool: &rayon::ThreadPool, codes: &[u32], base: u64) {
        let (d, inh, now) = (&self.dynp, &self.inh, self.step);
        pool.install(|| {
            self.shards.par_iter_mut().for_each(|sh| {
                for &c in codes {
                    let gid = c & d.gid_mask;
                    sh.activate(gid, base + (c >> d.gid_bits) as u64, now, inh[gid as usize]);
                }
            })
        });
        self.remember(codes, base);
    }

    fn remember(&mut self, codes: &[u32], base: u64) {
        let d = &self.dynp;
        let keep = self.step.saturating_sub(self.model.max_delay as u64 + 1);
        self.recent.retain(|&(t0, _)| t0 >= keep);
        self.recent.extend(
            codes
                .iter()
                .map(|&c| (base + (c >> d.gid_bits) as u64, c & d.gid_mask)),
        );
    }

    /// The thalamic spikes of steps `base..base + m` as spike codes (every rank
    /// draws all of them: they need no exchange).
    fn thalamic(&self, base: u64, m: u32, out: &mut Vec<u32>) {
        let model = self.model;
        let (on, off) = model.th_steps;
        if model.n_th == 0 || base + m as u64 <= on || base >= off {
            return;
        }
        let thr = (model.th_p * 18_446_744_073_709_551_616.0) as u64;
        let seed = model.params.seed;
        for s in 0..m {
            let step = base + s as u64;
            if step < on || step >= off {
                continue;
            }
            for k in 0..model.n_th {
                if draw(key(seed, Purpose::Thalamus, k as u64, 0), step) < thr {
                    out.push(s << model.gid_bits | (model.n + k));
                }
            }
        }
    }

    /// Runs to the end (or `opts.stop_at`), exchanging spikes through `ex`.
    pub fn run<E: Exchange>(
        &mut self,
        pool: &rayon::ThreadPool,
        ex: &mut E,
        opts: &RunOptions,
        progress: Option<&mut dyn FnMut(&Progress)>,
    ) -> Result<RankReport> {
        if self.shards.len() < 2 {
            return self.run_inner(pool, ex, opts, progress, None);
        }
        // One worker per shard but the first, for the whole run, on the pool's
        // (pinned) threads; this thread steps the first shard (see `Team`).
        let team = Team::new(self.shards.len() - 1, Job::empty());
        let (dp, pois, inh) = (self.dynp, self.pois.clone(), self.inh.clone());
        pool.in_place_scope(|sc| {
            for w in 0..team.workers() {
                let (team, dp, pois, inh) = (&team, &dp, &pois, &inh);
                sc.spawn(move |_| {
                    team.work(w, Job::empty(), |sh, j| {
                        interval(sh, &j.codes, j.base, j.step0, j.m, dp, pois, inh)
                    })
                });
            }
            let _stop = StopOnDrop(&team);
            self.run_inner(pool, ex, opts, progress, Some(&team))
        })
    }

    fn run_inner<E: Exchange>(
        &mut self,
        pool: &rayon::ThreadPool,
        ex: &mut E,
        opts: &RunOptions,
        mut progress: Option<&mut dyn FnMut(&Progress)>,
        team: Option<&Team<Shard, Job>>,
    ) -> Result<RankReport> {
        let model = self.model;
        let dmin = model.min_delay;
        let (m_steps, lag) = if opts.overlap && dmin >= 2 {
            (dmin / 2, 2)
        } else {
            (dmin, 1)
        };
        let end = opts.stop_at.map_or(model.steps, |s| s.min(model.steps));
        let start_step = self.step;
        if end < start_step {
            bail!("the run resumes at step {start_step} but is asked to stop at step {end}");
        }
        let ck_every = opts.checkpoint_every.filter(|&c| c > 0);
        if ck_every.is_some() && opts.checkpoint_dir.is_none() {
            bail!("checkpoints need a directory");
        }
        let mut recorder = None;
        let mut writer = None;
        if self.rank == 0 {
            let mut rec = Recorder::new(model.n, model.presim_steps as u32);
            if let Some(r) = &self.restored {
                match checkpoint::spikes(r, model)? {
                    Some(prefix) => {
                        rec.add(&prefix);
                        if let Some(p) = &opts.spikes {
                            let mut w = spike_writer(p, model)?;
                            w.write(&prefix)?;
                            writer = Some(w);
                        }
                    }
                    None if opts.spikes.is_some() => bail!(
                        "checkpoint {} has no spike file to continue",
                        r.dir().display()
                    ),
                    None => {}
                }
            } else if let Some(p) = &opts.spikes {
                writer = Some(spike_writer(p, model)?);
            }
            recorder = Some(rec);
        }

        let t0 = Instant::now();
        let mut t_rec: Option<Instant> = (self.step >= model.presim_steps).then(Instant::now);
        let cpu0 = hpc_spiking::run::cpu_seconds();
        let (mut update_s, mut comm_s, mut io_s) = (0.0, 0.0, 0.0);
        let mut send: Vec<u32> = Vec::new();
        let mut send_base: Option<(u64, u32)> = None;
        let mut gathered: Vec<u32> = Vec::new();
        let mut incoming: Vec<u32> = Vec::new();
        let mut gathered_base = 0u64;
        let mut has_gathered = false;
        let mut records: Vec<(u32, u32)> = Vec::new();
        let mut received = 0u64;
        // The checkpoints this run committed (rank 0), for `checkpoint_keep`.
        let mut ck_written: Vec<u64> = Vec::new();
        let gid_bits = model.gid_bits;
        let gid_mask = self.dynp.gid_mask;
        let mut last_flush = self.step;

        macro_rules! received {
            ($base:expr, $m:expr) => {{
                let (base, m): (u64, u32) = ($base, $m);
                std::mem::swap(&mut gathered, &mut incoming);
                gathered_base = base;
                has_gathered = true;
                received += gathered.len() as u64;
                if let Some(rec) = recorder.as_mut() {
                    let ti = Instant::now();
                    records.clear();
                    records.extend(
                        gathered
                            .iter()
                            .map(|&c| ((base + (c >> gid_bits) as u64 + 1) as u32, c & gid_mask)),
                    );
                    records.sort_unstable();
                    rec.add(&records);
                    if let Some(w) = writer.as_mut() {
                        w.write(&records)?;
                        if base + m as u64 >= last_flush + 100 {
                            w.flush()?;
                            last_flush = base + m as u64;
                        }
                    }
                    io_s += ti.elapsed().as_secs_f64();
                }
                self.thalamic(base, m, &mut gathered);
            }};
        }

        while self.step < end {
            let mut m = (end - self.step).min(m_steps as u64);
            if let Some(c) = ck_every {
                m = m.min(c - self.step % c);
            }
            if self.step < model.presim_steps {
                m = m.min(model.presim_steps - self.step);
            }
            let m = m as u32;
            let step0 = self.step;
            {
                let tu = Instant::now();
                let (dp, pois, inh) = (&self.dynp, &self.pois, &self.inh);
                let codes: &[u32] = if has_gathered { &gathered } else { &[] };
                let base = gathered_base;
                let shards = &mut self.shards;
                // This thread steps the first shard itself and the team's
                // workers the others: handing every shard to the pool made this
                // thread sleep and wake once per interval, 10^4 times per
                // biological second, and with one thread it handed over all the
                // work.
                let mut work = || -> Result<()> {
                    let Some(team) = team else {
                        interval(&mut shards[0], codes, base, step0, m, dp, pois, inh);
                        return Ok(());
                    };
                    // `Vec::as_mut_ptr` makes no reference to the slice, so
                    // the workers' pointers stay valid beside this thread's.
                    let p = shards.as_mut_ptr();
                    // SAFETY: `shards` holds one shard per worker and the first,
                    // lives past `finish` below, and this thread touches only the
                    // first until then.
                    unsafe {
                        team.start(p, shards.len(), |j| {
                            j.codes.clear();
                            j.codes.extend_from_slice(codes);
                            (j.base, j.step0, j.m) = (base, step0, m);
                        })
                    };
                    // SAFETY: `start` gave the workers the shards after the
                    // first, through this same pointer; the first is this
                    // thread's alone until `finish`.
                    let first = unsafe { &mut *p };
                    interval(first, codes, base, step0, m, dp, pois, inh);
                    team.finish()
                };
                match send_base.take() {
                    Some((prev, pm)) => {
                        let (r, work_s) = ex.spikes(&send, &mut incoming, work)?;
                        r?;
                        update_s += work_s;
                        comm_s += tu.elapsed().as_secs_f64() - work_s;
                        received!(prev, pm);
                    }
                    None => {
                        work()?;
                        update_s += tu.elapsed().as_secs_f64();
                    }
                }
                if has_gathered {
                    let codes = std::mem::take(&mut gathered);
                    self.remember(&codes, gathered_base);
                    gathered = codes;
                    has_gathered = false;
                }
            }
            send.clear();
            for sh in &self.shards {
                send.extend_from_slice(&sh.spikes);
            }
            send_base = Some((step0, m));
            if lag == 1 {
                let tc = Instant::now();
                ex.spikes(&send, &mut incoming, || ())?;
                comm_s += tc.elapsed().as_secs_f64();
                received!(step0, m);
                send_base = None;
            }
            self.step += m as u64;
            if self.step == model.presim_steps {
                t_rec = Some(Instant::now());
            }

            let at_checkpoint = ck_every.is_some_and(|c| self.step % c == 0);
            if at_checkpoint || self.step == end {
                if let Some((prev, pm)) = send_base.take() {
                    if has_gathered {
                        let codes = std::mem::take(&mut gathered);
                        self.activate_all(pool, &codes, gathered_base);
                        gathered = codes;
                    }
                    let tc = Instant::now();
                    ex.spikes(&send, &mut incoming, || ())?;
                    comm_s += tc.elapsed().as_secs_f64();
                    received!(prev, pm);
                }
                if has_gathered {
                    let codes = std::mem::take(&mut gathered);
                    self.activate_all(pool, &codes, gathered_base);
                    gathered = codes;
                    has_gathered = false;
                }
                if let Some(w) = writer.as_mut() {
                    w.flush()?;
                }
            }
            if at_checkpoint {
                if let Some(dir) = &opts.checkpoint_dir {
                    let ti = Instant::now();
                    self.write_checkpoint(ex, dir, writer.as_ref(), recorder.as_ref())?;
                    if self.rank == 0 {
                        ck_written.push(self.step);
                        if let Some(keep) = opts.checkpoint_keep {
                            hpc_checkpoint::Checkpoints::new(dir).prune(&mut ck_written, keep)?;
                        }
                    }
                    io_s += ti.elapsed().as_secs_f64();
                }
            }
            if let Some(cb) = progress.as_mut() {
                cb(&Progress {
                    step: self.step,
                    steps: model.steps,
                    start_step,
                    wall: t0.elapsed(),
                    wall_recorded: t_rec.map_or(Duration::ZERO, |t| t.elapsed()),
                });
            }
        }
        let completed = self.step >= model.steps;
        let spike_file = match writer {
            Some(w) if completed => Some(w.finish()?),
            _ => None,
        };
        let simulate_s = t0.elapsed().as_secs_f64();
        let state_bytes: usize = self
            .shards
            .iter()
            .map(|s| {
                s.v.len() * 24
                    + s.calendar.iter().map(Vec::capacity).sum::<usize>()
                        * std::mem::size_of::<Active>()
            })
            .sum();
        let window = (self.step.saturating_sub(model.presim_steps)) as f64 * model.params.dt;
        for (i, sh) in self.shards.iter().enumerate() {
            tracing::debug!(
                shard = i,
                first = sh.first,
                neurons = sh.len,
                events = sh.events,
                "shard load"
            );
        }
        Ok(RankReport {
            rank: self.rank,
            size: self.size,
            threads: self.shards.len(),
            first: self.block.first,
            neurons: self.block.len,
            synapses: self.synapses(),
            connectivity_bytes: self.connectivity_bytes(),
            state_bytes: state_bytes as u64,
            interval_steps: m_steps,
            start_step,
            end_step: self.step,
            completed,
            build_s: self.build_s,
            build_cpu_s: self.build_cpu_s,
            simulate_s,
            simulate_recorded_s: t_rec.map_or(0.0, |t| t.elapsed().as_secs_f64()),
            simulate_cpu_s: hpc_spiking::run::cpu_seconds() - cpu0,
            update_s,
            communicate_s: comm_s,
            io_s,
            spikes_received: received,
            bytes_received: received * 4,
            events: self.shards.iter().map(|s| s.events).sum(),
            stats: recorder.map(|r| r.stats(model, window)),
            spike_file,
        })
    }

    fn write_checkpoint<E: Exchange>(
        &mut self,
        ex: &mut E,
        dir: &std::path::Path,
        writer: Option<&SpikeWriter>,
        recorder: Option<&Recorder>,
    ) -> Result<()> {
        let model = self.model;
        let _s = tracing::info_span!("checkpoint", step = self.step).entered();
        let set = hpc_checkpoint::Checkpoints::new(dir);
        let st = self.state();
        let written =
            checkpoint::write_rank(&set, self.step, self.rank, self.size, self.block, &st);
        // Every rank's file size and CRC-32C go to rank 0, which writes the manifest
        // only once every file is there; a rank that failed stops every rank.
        let words = hpc_spiking::checkpoint::entry_words(&written);
        let mut all = Vec::new();
        ex.words(&words, &mut all)?;
        written?;
        let entries = hpc_spiking::checkpoint::gathered_entries(&all, self.size, self.step)?;
        if self.rank == 0 {
            let spikes = match (writer, recorder) {
                (Some(w), Some(rec)) => Some((w.partial(), rec.spikes)),
                _ => None,
            };
            checkpoint::commit(&set, model, self.step, self.size, entries, spikes)?;
        }
        Ok(())
    }
}
