//! Checkpoints: the state of every neuron at an interval boundary, one file per
//! rank, keyed by neuron id so a run can resume with any number of ranks/threads.
//!
//! ```text
//! <dir>/step-0000005000/
//!   meta.json      step, ranks, model parameters (written by rank 0)
//!   rank-0.bin     "BRCKPT01", first id u32, count u32, slots D u32, step u64,
//!   rank-1.bin     then V (f64 x count), refractory counters (u32 x count),
//!   ...            ring buffer (u32 x D x count, offset-major: input arriving
//!                  at step + d for d in 0..D)
//!   spikes.spk     the spike file up to this step (rank 0)
//! ```
//!
//! Every file is written under a temporary name and renamed, so a directory is
//! complete when `meta.json` and all `rank-*.bin` exist. Random streams are
//! counter-based with the step as counter, so the step is the only RNG state; no
//! spikes are pending at a checkpoint (the exchange is drained first); the
//! connectivity is regenerated from the seed.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};

use crate::network::Block;
use crate::params::{Model, Params};

const MAGIC: &[u8; 8] = b"BRCKPT01";

/// `meta.json` of a checkpoint.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Meta {
    /// The step the state belongs to (steps `0..step` are done).
    pub step: u64,
    /// Number of rank files.
    pub ranks: u32,
    /// The model parameters.
    pub params: Params,
}

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

/// The directory of the checkpoint at `step`.
pub fn step_dir(dir: &Path, step: u64) -> PathBuf {
    dir.join(format!("step-{step:010}"))
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, path)?;
    Ok(())
}

/// Writes this rank's part of the checkpoint at `step` (and, on rank 0, the meta
/// data and a copy of the spike file `spikes`).
#[allow(clippy::too_many_arguments)]
pub fn write(
    dir: &Path,
    model: &Model,
    step: u64,
    rank: usize,
    size: usize,
    block: Block,
    state: &State,
    spikes: Option<&Path>,
) -> Result<PathBuf> {
    let sd = step_dir(dir, step);
    fs::create_dir_all(&sd).with_context(|| format!("creating {}", sd.display()))?;
    let d = model.delay_steps;
    let mut b = Vec::with_capacity(28 + state.v.len() * 12 + state.ring.len() * 4);
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
    write_atomic(&sd.join(format!("rank-{rank}.bin")), &b)?;
    if rank == 0 {
        if let Some(s) = spikes {
            let tmp = sd.join("spikes.spk.tmp");
            fs::copy(s, &tmp).with_context(|| format!("copying {}", s.display()))?;
            fs::rename(&tmp, sd.join("spikes.spk"))?;
        }
        let meta = Meta {
            step,
            ranks: size as u32,
            params: model.params.clone(),
        };
        write_atomic(&sd.join("meta.json"), &serde_json::to_vec_pretty(&meta)?)?;
    }
    Ok(sd)
}

fn complete(sd: &Path) -> Option<Meta> {
    let meta: Meta = serde_json::from_slice(&fs::read(sd.join("meta.json")).ok()?).ok()?;
    (0..meta.ranks)
        .all(|r| sd.join(format!("rank-{r}.bin")).is_file())
        .then_some(meta)
}

/// The checkpoint to resume from: `dir` itself if it is a complete checkpoint,
/// else its newest complete `step-*` subdirectory.
pub fn find(dir: &Path) -> Result<(PathBuf, Meta)> {
    if let Some(m) = complete(dir) {
        return Ok((dir.to_owned(), m));
    }
    let mut steps: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("reading checkpoint directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("step-"))
        })
        .collect();
    steps.sort();
    for sd in steps.iter().rev() {
        if let Some(m) = complete(sd) {
            return Ok((sd.clone(), m));
        }
    }
    bail!("no complete checkpoint in {}", dir.display())
}

/// Reads the state of the neurons of `block` (global ids) from checkpoint `sd`.
pub fn read(sd: &Path, meta: &Meta, model: &Model, block: Block) -> Result<State> {
    let d = model.delay_steps as usize;
    let n = block.len as usize;
    let mut st = State {
        v: vec![0.0; n],
        refr: vec![0; n],
        ring: vec![0; d * n],
    };
    let mut covered = 0usize;
    for r in 0..meta.ranks {
        let path = sd.join(format!("rank-{r}.bin"));
        let b = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        if b.len() < 28 || &b[..8] != MAGIC {
            bail!("{} is not a checkpoint file", path.display());
        }
        let (first, len, dd) = (u32_at(8), u32_at(12) as usize, u32_at(16) as usize);
        if dd != d || b.len() != 28 + len * 12 + dd * len * 4 {
            bail!("{} does not match the model", path.display());
        }
        let lo = first.max(block.first);
        let hi = (first as usize + len).min(block.end() as usize) as u32;
        let v0 = 28;
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
        bail!("checkpoint {} does not cover all neurons", sd.display());
    }
    Ok(st)
}
