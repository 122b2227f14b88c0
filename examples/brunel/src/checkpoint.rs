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

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use hpc_checkpoint::{rank_file_name, Checkpoint, Checkpoints, FileEntry};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::network::Block;
use crate::output::decode_spikes;
use crate::params::{Model, Params};

const MAGIC: &[u8; 8] = b"BRCKPT02";
const HEAD: usize = 28;
/// Name of the spike file inside a checkpoint.
pub const SPIKES: &str = "spikes";

/// Brunel's metadata in a checkpoint's manifest.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Meta {
    /// The model parameters.
    pub params: Params,
    /// Spikes in the checkpoint's spike file (`None`: the run wrote none).
    pub spikes: Option<u64>,
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

/// Writes this rank's file of the checkpoint at `step`; the entry goes to rank 0
/// for [`commit`].
pub fn write_rank(
    set: &Checkpoints,
    model: &Model,
    step: u64,
    rank: usize,
    size: usize,
    block: Block,
    state: &State,
) -> Result<FileEntry> {
    Ok(set.write_rank(
        step,
        rank as u32,
        size as u32,
        &encode(model, step, block, state),
    )?)
}

/// The four words a rank sends to rank 0 about its file of a checkpoint: 1, the
/// file's size (low and high word) and its CRC-32C; zeros when it could not write it.
pub fn entry_words(written: &Result<FileEntry>) -> [u32; 4] {
    match written {
        Ok(e) => [1, e.size as u32, (e.size >> 32) as u32, e.crc32c],
        Err(_) => [0; 4],
    }
}

/// The rank files of the checkpoint at `step` from every rank's [`entry_words`],
/// gathered in rank order (`all`, `size` ranks); an error when a rank could not write
/// its file or the words do not add up.
pub fn gathered_entries(all: &[u32], size: usize, step: u64) -> Result<Vec<FileEntry>> {
    if all.len() != 4 * size {
        bail!(
            "checkpoint at step {step}: {} words from the ranks, expected {}",
            all.len(),
            4 * size
        );
    }
    if let Some(r) = (0..size).find(|&r| all[4 * r] != 1) {
        bail!("rank {r} could not write its part of the checkpoint at step {step}");
    }
    Ok((0..size)
        .map(|r| FileEntry {
            name: rank_file_name(r as u32),
            rank: Some(r as u32),
            size: all[4 * r + 1] as u64 | (all[4 * r + 2] as u64) << 32,
            crc32c: all[4 * r + 3],
        })
        .collect())
}

/// Completes the checkpoint at `step` (rank 0, once every rank's file is written):
/// copies the spike file `spikes` (holding `count` spikes) and writes the manifest.
pub fn commit(
    set: &Checkpoints,
    model: &Model,
    step: u64,
    size: usize,
    entries: Vec<FileEntry>,
    spikes: Option<(&Path, u64)>,
) -> Result<Checkpoint> {
    let meta = Meta {
        params: model.params.clone(),
        spikes: spikes.map(|(_, n)| n),
    };
    commit_with(set, step, size, entries, spikes.map(|(p, _)| p), &meta)
}

/// Completes the checkpoint at `step` with any model's metadata `meta` (rank 0, once
/// every rank's file is written): copies the spike file `spikes` into it as
/// [`SPIKES`] and writes the manifest last.
pub fn commit_with<M: Serialize>(
    set: &Checkpoints,
    step: u64,
    size: usize,
    mut entries: Vec<FileEntry>,
    spikes: Option<&Path>,
    meta: &M,
) -> Result<Checkpoint> {
    if let Some(path) = spikes {
        let (mut f, len) = hpc_io::read::open_regular(path)?;
        entries.push(set.write_file_from(step, SPIKES, len, &mut f)?);
    }
    Ok(set.commit(step, size as u32, entries, serde_json::to_value(meta)?)?)
}

/// A checkpoint to resume from, with its model's metadata (brunel's by default).
#[derive(Clone, Debug)]
pub struct Restart<M = Meta> {
    /// The verified checkpoint.
    pub checkpoint: Checkpoint,
    /// Its metadata.
    pub meta: M,
}

impl<M> Restart<M> {
    /// The step it holds.
    pub fn step(&self) -> u64 {
        self.checkpoint.step()
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        self.checkpoint.dir()
    }
}

/// The checkpoint to resume from: `dir` itself if it is a step directory (used as
/// named, no fallback), else the newest checkpoint in `dir` that verifies (each newer
/// one that fails is skipped with a warning).
pub fn open(dir: &Path) -> Result<Restart> {
    open_with(dir, "brunel")
}

/// As [`open`], for any model's metadata `M`; the error names the manifest that does
/// not hold `model`'s metadata.
pub fn open_with<M: DeserializeOwned>(dir: &Path, model: &str) -> Result<Restart<M>> {
    let named = dir.join(hpc_checkpoint::MANIFEST).exists()
        || dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("step-"));
    let checkpoint = if named {
        Checkpoint::open(dir)?
    } else {
        Checkpoints::new(dir).latest()?
    };
    let meta: M = serde_json::from_value(checkpoint.metadata().clone()).with_context(|| {
        format!(
            "{} does not hold {model}'s metadata",
            checkpoint.dir().join(hpc_checkpoint::MANIFEST).display()
        )
    })?;
    Ok(Restart { checkpoint, meta })
}

/// The checkpoint every rank resumes from: rank 0 chooses it with `find` (for
/// [`open`]: the newest that verifies, warning about each newer one it skips, or
/// `dir` itself when it names a step directory) and tells the others, so all ranks
/// resume from the same one. Every rank fails when rank 0 finds none; rank 0's
/// error says why.
pub fn choose(
    world: &hpc_rs::World,
    dir: &Path,
    find: impl FnOnce(&Path) -> Result<PathBuf>,
) -> Result<PathBuf> {
    let mine: std::result::Result<PathBuf, String> = if world.rank() == 0 {
        find(dir).map_err(|e| format!("{e:#}"))
    } else {
        Err(String::new())
    };
    let chosen: std::result::Result<PathBuf, String> =
        serde_json::from_slice(&world.broadcast(0, &serde_json::to_vec(&mine)?)?)?;
    chosen.map_err(|e| {
        if world.rank() == 0 {
            anyhow::anyhow!(e)
        } else {
            anyhow::anyhow!(
                "rank 0 found no checkpoint to resume from in {}",
                dir.display()
            )
        }
    })
}

/// Checks that `model` can continue from `r`: the same network and dynamics, and a
/// `t_sim` that reaches at least the checkpoint's time.
pub fn check_model(r: &Restart, model: &Model) -> Result<()> {
    if !r.meta.params.same_model(&model.params) {
        bail!(
            "checkpoint {} is of a different model: {} (checkpoint -> this run)",
            r.dir().display(),
            crate::params_diff(&r.meta.params, &model.params, &["t_sim"]).join(", ")
        );
    }
    if r.step() > model.steps {
        let dt = model.params.dt;
        bail!(
            "checkpoint {} is at {:.1} ms (step {}) but t_sim is {:.1} ms: a restart \
             continues that run, so give --t-sim {:.1} or more",
            r.dir().display(),
            r.step() as f64 * dt,
            r.step(),
            model.params.t_sim,
            r.step() as f64 * dt
        );
    }
    Ok(())
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

/// The spikes recorded up to the checkpoint (`None` if it has no spike file),
/// checked: a valid spike file of this model's neurons, no spike after the
/// checkpoint's step, and as many spikes as the manifest counted.
pub fn spikes(r: &Restart, model: &Model) -> Result<Option<Vec<(u32, u32)>>> {
    spikes_of(&r.checkpoint, model.n, r.meta.spikes)
}

/// The spikes of `checkpoint`'s spike file (`None` if it has none), checked: a valid
/// spike file of `n_neurons` neurons, no spike after the checkpoint's step, and
/// `counted` spikes when the manifest counted them.
pub fn spikes_of(
    checkpoint: &Checkpoint,
    n_neurons: u32,
    counted: Option<u64>,
) -> Result<Option<Vec<(u32, u32)>>> {
    let Some(bytes) = checkpoint.read_file(SPIKES)? else {
        return Ok(None);
    };
    let path = checkpoint.dir().join(format!("{SPIKES}.ckpt"));
    let f = decode_spikes(&bytes, false)
        .with_context(|| format!("{} does not hold a valid spike file", path.display()))?;
    if f.n_neurons != n_neurons {
        bail!(
            "{}: spikes of {} neurons, the model has {}",
            path.display(),
            f.n_neurons,
            n_neurons
        );
    }
    if let Some(&(tick, id)) = f.spikes.last() {
        if tick as u64 > checkpoint.step() {
            bail!(
                "{}: neuron {id} spikes at tick {tick}, after the checkpoint's step {}",
                path.display(),
                checkpoint.step()
            );
        }
    }
    if let Some(n) = counted {
        if n != f.spikes.len() as u64 {
            bail!(
                "{}: {} spikes, the manifest counted {n}",
                path.display(),
                f.spikes.len()
            );
        }
    }
    Ok(Some(f.spikes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_words_round_trip_and_a_failed_rank_is_named() {
        let e = FileEntry {
            name: rank_file_name(1),
            rank: Some(1),
            size: (5u64 << 32) | 7,
            crc32c: 0xDEAD_BEEF,
        };
        let ok = entry_words(&Ok(e.clone()));
        let mut all = [ok, ok].concat();
        let got = gathered_entries(&all, 2, 40).unwrap();
        assert_eq!(
            (got[1].size, got[1].crc32c, got[1].rank),
            (e.size, e.crc32c, Some(1))
        );
        assert_eq!(got[0].name, rank_file_name(0));
        all[4..].copy_from_slice(&entry_words(&Err(anyhow::anyhow!("disk full"))));
        let err = gathered_entries(&all, 2, 40).unwrap_err().to_string();
        assert!(err.contains("rank 1 could not write"), "{err}");
        let err = gathered_entries(&all[..4], 2, 40).unwrap_err().to_string();
        assert!(err.contains("4 words from the ranks, expected 8"), "{err}");
    }
}
