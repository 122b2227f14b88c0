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

mod run;
mod shard;

pub use shard::set_portable_update;
use shard::{Dyn, Shard};

use std::time::Instant;

use anyhow::Result;
use hpc_spiking::rank_loop::RankRun;
use hpc_spiking::Block;
use rayon::prelude::*;

use crate::checkpoint::{self, Restart, State};
use crate::network::build_shard;
use crate::output::Stats;
use crate::params::{Model, Propagators, V0Type, NPOP};
use crate::rng::{key, normal_redraw, Poisson32, Purpose, Stream};

/// How to run: the options of brunel's simulation.
pub use hpc_spiking::RunOptions;

pub use hpc_spiking::progress::Progress;

/// What one rank did: what every network's rank reports ([`RankRun`], its
/// fields read through this report), then the microcircuit's own.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct RankReport {
    /// The run of the rank.
    #[serde(flatten)]
    pub run: RankRun,
    /// Synapses onto this rank's neurons.
    pub synapses: u64,
    /// Bytes of this rank's connectivity.
    pub connectivity_bytes: u64,
    /// Bytes of neuron state and spikes in flight.
    pub state_bytes: u64,
    /// CPU seconds of the process while building.
    pub build_cpu_s: f64,
    /// Seconds in the loop after the warm-up.
    pub simulate_recorded_s: f64,
    /// Spikes exchanged (of all ranks, as this rank received them).
    pub spikes_received: u64,
    /// Bytes of spike codes this rank received.
    pub bytes_received: u64,
    /// Synaptic events delivered onto this rank's neurons.
    pub events: u64,
    /// Statistics (rank 0).
    pub stats: Option<Stats>,
}

impl std::ops::Deref for RankReport {
    type Target = RankRun;

    fn deref(&self) -> &RankRun {
        &self.run
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
        opts: &hpc_spiking::run::RunOptions,
    ) -> Result<Simulation<'a>> {
        let t0 = Instant::now();
        let cpu0 = hpc_spiking::run::cpu_seconds();
        let _span = tracing::info_span!("build").entered();
        // A checkpoint of another model is refused before the network is built.
        let restored = checkpoint::resume(opts, model)?;
        let block = Block::part(model.n, size as u32, rank as u32);
        let threads = block.shards(pool.current_num_threads());
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
                        scratch: Default::default(),
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
        if let Some(r) = restored {
            let st = checkpoint::read(&r, model, block)?;
            sim.set_state(r.step(), st);
            hpc_spiking::checkpoint::restored(&r);
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
}
