//! Checkpoints: the state of every neuron at an interval boundary, one file per
//! rank, keyed by neuron id so a run can resume with any number of ranks/threads.
//! Stored with `hpc-checkpoint`, which verifies every file before it is used.
//!
//! ```text
//! <dir>/step-0000005000/
//!   rank-000000.ckpt  each rank's state (written by that rank), payload:
//!   rank-000001.ckpt    "BRCKPT02", first id u32, count u32, slots D u32, step u64,
//!   ...                 then V (f64 x count), refractory counters (u32 x count),
//!                       ring buffer (u32 x D x count, offset-major: input arriving
//!                       at step + d for d in 0..D)
//!   spikes.ckpt       the spike file up to this step (rank 0)
//!   manifest.json     written last by rank 0: step, ranks, every file's size and
//!                     CRC-32C, and brunel's metadata (parameters, spikes so far)
//! ```
//!
//! Every file is written under a temporary name and renamed; the manifest comes last,
//! after every rank's file (the ranks exchange their files' sizes and checksums
//! first). A restart checks every file it reads against the manifest (size,
//! checksum, step, rank) and then its content against the model (parameters, delay,
//! the rank's neurons, step, the number of spikes), and names the file and the
//! problem when anything differs. Given the checkpoint directory, a restart takes the
//! newest checkpoint that verifies and warns about each newer one it skipped.
//!
//! Random streams are counter-based with the step as counter, so the step is the only
//! RNG state; no spikes are pending at a checkpoint (the exchange is drained first);
//! the connectivity is regenerated from the seed.

use std::path::Path;

use anyhow::{bail, Result};
use hpc_checkpoint::rank_file_name;

pub use hpc_spiking::checkpoint::{
    choose, commit_with, entry_words, gathered_entries, open_with, spikes_of, SPIKES,
};
use hpc_spiking::Block;

use crate::params::{Model, Params};

/// A checkpoint to resume from, with brunel's metadata.
pub type Restart = hpc_spiking::checkpoint::Restart<Meta>;

const MAGIC: &[u8; 8] = b"BRCKPT02";
const HEAD: usize = 28;

/// The metadata in a checkpoint's manifest: the parameters and the spike count.
pub type Meta = hpc_spiking::checkpoint::RunMeta<Params>;

/// The state of a block of neurons at a step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct State {
    /// Membrane potentials.
    pub v: Vec<f64>,
    /// Refractory counters (steps left).
    pub refr: Vec<u32>,
    /// Ring buffer, `ring[d * len + i]` = input of neuron `i` arriving at `step + d`.
    pub ring: Vec<u32>,
}

/// A rank's payload: its block of neurons at `step`.
pub fn encode(model: &Model, step: u64, block: Block, state: &State) -> Vec<u8> {
    let d = model.delay_steps;
    let mut b = Vec::with_capacity(HEAD + state.v.len() * 12 + state.ring.len() * 4);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&block.first.to_le_bytes());
    b.extend_from_slice(&block.len.to_le_bytes());
    b.extend_from_slice(&d.to_le_bytes());
    b.extend_from_slice(&step.to_le_bytes());
    state
        .v
        .iter()
        .for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    state
        .refr
        .iter()
        .for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    state
        .ring
        .iter()
        .for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    b
}

/// The checkpoint to resume from: `dir` itself if it is a step directory (used as
/// named, no fallback), else the newest checkpoint in `dir` that verifies (each newer
/// one that fails is skipped with a warning).
pub fn open(dir: &Path) -> Result<Restart> {
    open_with(dir, "brunel")
}

/// Checks that `model` can continue from `r`: the same network and dynamics, and a
/// `t_sim` that reaches at least the checkpoint's time.
pub fn check_model(r: &Restart, model: &Model) -> Result<()> {
    let differences = if r.meta.params.same_model(&model.params) {
        Vec::new()
    } else {
        hpc_spiking::run::params_diff(&r.meta.params, &model.params, &["t_sim"])
    };
    r.check_continues(&differences, model.steps, model.params.dt, 0.0)
}

/// The checkpoint `dir` to resume from ([`open`]), checked against `model`
/// ([`check_model`]) before anything of it is read; `None` without one.
pub fn resume(dir: Option<&Path>, model: &Model) -> Result<Option<Restart>> {
    hpc_spiking::checkpoint::resume(dir, "brunel", |r| check_model(r, model))
}

/// Reads the state of the neurons of `block` (global ids) from the rank files that
/// hold them (each checked against the manifest and the model).
pub fn read(r: &Restart, model: &Model, block: Block) -> Result<State> {
    let d = model.delay_steps as usize;
    let n = block.len as usize;
    let mut st = State {
        v: vec![0.0; n],
        refr: vec![0; n],
        ring: vec![0; d * n],
    };
    let ranks = r.checkpoint.ranks();
    if ranks == 0 || ranks > model.n {
        bail!(
            "checkpoint {} was written by {ranks} ranks, not a possible decomposition of {} neurons",
            r.dir().display(),
            model.n
        );
    }
    let mut covered = 0usize;
    for rank in 0..ranks {
        let theirs = Block::part(model.n, ranks, rank);
        let lo = theirs.first.max(block.first);
        let hi = theirs.end().min(block.end());
        if lo >= hi {
            continue;
        }
        let path = r.dir().join(rank_file_name(rank));
        let b = r.checkpoint.read_rank(rank)?;
        let bad = |what: String| anyhow::anyhow!("{}: {what}", path.display());
        if b.len() < HEAD || &b[..8] != MAGIC {
            return Err(bad("not a brunel rank state (wrong magic)".into()));
        }
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let (first, len, dd) = (u32_at(8), u32_at(12), u32_at(16));
        let step = u64::from_le_bytes(b[20..28].try_into()?);
        if dd as usize != d {
            return Err(bad(format!(
                "written with a delay of {dd} steps, the model has {d}"
            )));
        }
        if (first, len) != (theirs.first, theirs.len) {
            return Err(bad(format!(
                "holds neurons {first}..{} but rank {rank} of {ranks} has {}..{}",
                first as u64 + len as u64,
                theirs.first,
                theirs.end()
            )));
        }
        if step != r.step() {
            return Err(bad(format!(
                "holds step {step} but the checkpoint is of step {}",
                r.step()
            )));
        }
        let len = len as usize;
        let want = HEAD + len * 12 + d * len * 4;
        if b.len() != want {
            return Err(bad(format!(
                "{} bytes of state for {len} neurons with a delay of {d} steps, expected {want}",
                b.len()
            )));
        }
        let v0 = HEAD;
        let r0 = v0 + len * 8;
        let g0 = r0 + len * 4;
        for gid in lo..hi {
            let (i, j) = ((gid - first) as usize, (gid - block.first) as usize);
            let o = v0 + i * 8;
            st.v[j] = f64::from_le_bytes(b[o..o + 8].try_into()?);
            st.refr[j] = u32_at(r0 + i * 4);
            for k in 0..d {
                st.ring[k * n + j] = u32_at(g0 + (k * len + i) * 4);
            }
            covered += 1;
        }
    }
    if covered != n {
        bail!(
            "checkpoint {} does not cover neurons {}..{}",
            r.dir().display(),
            block.first,
            block.end()
        );
    }
    Ok(st)
}
