//! Checkpoints: the state of every neuron at an interval boundary, one file per
//! rank, keyed by neuron id so that a run can resume with any number of ranks and
//! threads; stored with `hpc-checkpoint` (sizes and CRC-32C in a manifest written
//! last, every file verified before use).
//!
//! ```text
//! <dir>/step-0000005000/
//!   rank-000000.ckpt  payload: "MCCKPT02", first id u32, count u32, spikes in
//!   ...                 flight k u32, step u64, then V and I_syn (f64 x count
//!                       each), refractory counters (u32 x count), and the spikes
//!                       of the last max_delay steps the rank received (k x
//!                       (step u64, neuron id u32)): their synapses due from this
//!                       step on are delivered again after a restart
//!   spikes.ckpt       the spike file up to this step (rank 0)
//!   manifest.json     step, ranks, every file's size and CRC-32C, the parameters
//! ```
//!
//! Random streams are counter-based (the step is the background's position), no
//! spike is in flight at a checkpoint (the exchange is drained first), and the
//! connectivity is drawn again from the seed.

use std::path::Path;

use anyhow::Result;
use hpc_spiking::checkpoint::{check_covered, rank_files, rank_head, RankFile, RANK_HEAD};
use hpc_spiking::run::RunOptions;
use hpc_spiking::Block;

use crate::params::{Model, Params};

const MAGIC: &[u8; 8] = b"MCCKPT02";
pub use hpc_spiking::checkpoint::SPIKES;

/// The metadata in a checkpoint's manifest: the parameters and the spike count.
pub type Meta = hpc_spiking::checkpoint::RunMeta<Params>;

/// The state of a block of neurons at a step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct State {
    /// Membrane potentials relative to `E_L`.
    pub v: Vec<f64>,
    /// Synaptic currents.
    pub isyn: Vec<f64>,
    /// Refractory steps left.
    pub refr: Vec<u32>,
    /// Spikes `(step, neuron)` whose synapses may still be due.
    pub recent: Vec<(u64, u32)>,
}

/// A rank's payload: its block of neurons at `step`.
pub fn encode(step: u64, block: Block, st: &State) -> Vec<u8> {
    let n = st.v.len();
    let capacity = RANK_HEAD + n * 20 + st.recent.len() * 12;
    let mut b = rank_head(MAGIC, block, st.recent.len() as u32, step, capacity);
    for x in st.v.iter().chain(&st.isyn) {
        b.extend_from_slice(&x.to_le_bytes());
    }
    for x in &st.refr {
        b.extend_from_slice(&x.to_le_bytes());
    }
    for (t, g) in &st.recent {
        b.extend_from_slice(&t.to_le_bytes());
        b.extend_from_slice(&g.to_le_bytes());
    }
    b
}

/// A checkpoint to resume from, with the microcircuit's metadata.
pub type Restart = hpc_spiking::checkpoint::Restart<Meta>;

/// The checkpoint `dir` names (a step directory), or the newest that verifies in
/// `dir`.
pub fn open(dir: &Path) -> Result<Restart> {
    hpc_spiking::checkpoint::open_with(dir, "the microcircuit")
}

/// Checks that `model` can continue from `r`.
pub fn check_model(r: &Restart, model: &Model) -> Result<()> {
    let differences = if r.meta.params.same_model(&model.params) {
        Vec::new()
    } else {
        hpc_spiking::run::params_diff(&r.meta.params, &model.params, &["t_sim"])
    };
    let p = &model.params;
    r.check_continues(&differences, model.steps, p.dt, p.t_presim)
}

/// The checkpoint `opts.restart` to resume from ([`open`]), checked against
/// `model` ([`check_model`]) and the run's options
/// ([`RunOptions::check_restart`]) before anything of it is read; `None` without one.
pub fn resume(opts: &RunOptions, model: &Model) -> Result<Option<Restart>> {
    hpc_spiking::checkpoint::resume(opts.restart.as_deref(), "the microcircuit", |r| {
        check_model(r, model)?;
        opts.check_restart(r, model.params.dt)
    })
}

/// Reads the state of the neurons of `block` from the rank files that hold them,
/// and the spikes in flight of every rank file.
pub fn read(r: &Restart, model: &Model, block: Block) -> Result<State> {
    let n = block.len as usize;
    let mut st = State {
        v: vec![0.0; n],
        isyn: vec![0.0; n],
        refr: vec![0; n],
        recent: Vec::new(),
    };
    let ranks = rank_files(r, model.n)?;
    let total = model.n + model.n_th;
    let mut covered = 0usize;
    for rank in 0..ranks {
        let f = RankFile::read(r, rank, MAGIC, "the microcircuit")?;
        f.check_holds(r, rank, model.n)?;
        let (first, len, k) = (f.block.first, f.block.len as usize, f.extra as usize);
        let want = RANK_HEAD + len * 20 + k * 12;
        f.check_len(want, format_args!("{len} neurons and {k} spikes"))?;
        let h = RANK_HEAD;
        let (v0, i0, r0, s0) = (h, h + 8 * len, h + 16 * len, h + 20 * len);
        for j in 0..k {
            let (t, g) = (f.u64_at(s0 + 12 * j), f.u32_at(s0 + 12 * j + 8));
            if g >= total || t >= f.step {
                return Err(f.error(format!(
                    "spike in flight of neuron {g} at step {t}: not a neuron of the model or not before the checkpoint"
                )));
            }
            st.recent.push((t, g));
        }
        let lo = f.block.first.max(block.first);
        let hi = f.block.end().min(block.end());
        for gid in lo..hi {
            let (i, j) = ((gid - first) as usize, (gid - block.first) as usize);
            st.v[j] = f.finite_f64_at(v0 + 8 * i, format_args!("V of neuron {gid}"))?;
            st.isyn[j] = f.finite_f64_at(i0 + 8 * i, format_args!("I_syn of neuron {gid}"))?;
            st.refr[j] =
                f.refractory_at(r0 + 4 * i, model.ref_steps, format_args!("neuron {gid}"))?;
            covered += 1;
        }
    }
    check_covered(r, covered, block)?;
    // Every rank remembered the spikes it received: their union is every spike
    // still in flight, whatever the decomposition that wrote them.
    st.recent.sort_unstable();
    st.recent.dedup();
    Ok(st)
}
