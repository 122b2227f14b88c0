//! Checkpoints of a spiking network on `hpc-checkpoint`: one file per rank, the spike
//! file so far, and a manifest written last by rank 0 with the model's metadata.
//!
//! ```text
//! <dir>/step-0000005000/
//!   rank-000000.ckpt  each rank's state (written by that rank, in the model's format)
//!   rank-000001.ckpt
//!   ...
//!   spikes.ckpt       the spike file up to this step (rank 0)
//!   manifest.json     written last by rank 0: step, ranks, every file's size and
//!                     CRC-32C, and the model's metadata (parameters, spikes so far)
//! ```
//!
//! Every rank writes its file, sends rank 0 its size and checksum
//! ([`entry_words`], gathered into [`gathered_entries`]), and rank 0 commits the
//! checkpoint ([`commit_with`]). A restart ([`open_with`], agreed on by every rank
//! through [`choose`]) checks every file against the manifest and names the file and
//! the problem when anything differs; [`spikes_of`] checks the spike file against the
//! model and the manifest.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use hpc_checkpoint::{rank_file_name, Checkpoint, Checkpoints, FileEntry};
use serde::{de::DeserializeOwned, Serialize};

use crate::spikes::decode_spikes;
use crate::Block;

/// Name of the spike file inside a checkpoint.
pub const SPIKES: &str = "spikes";

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

/// The metadata of a simulation's checkpoint manifest: its model parameters `P` and
/// the spikes in the checkpoint's spike file (`None`: the run wrote none).
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct RunMeta<P> {
    /// The model parameters.
    pub params: P,
    /// Spikes in the checkpoint's spike file (`None`: the run wrote none).
    pub spikes: Option<u64>,
}

/// [`commit_with`] the [`RunMeta`] of `params` and the spike file `spikes` (its path
/// and how many spikes it holds).
pub fn commit_run<P: Serialize>(
    set: &Checkpoints,
    params: &P,
    step: u64,
    size: usize,
    entries: Vec<FileEntry>,
    spikes: Option<(&Path, u64)>,
) -> Result<Checkpoint> {
    let meta = RunMeta {
        params,
        spikes: spikes.map(|(_, n)| n),
    };
    commit_with(set, step, size, entries, spikes.map(|(p, _)| p), &meta)
}

/// The checkpoints a run writes: their directory, the model parameters `P` of
/// their manifests, how many of them to keep, and the steps this run committed.
#[derive(Debug)]
pub struct RunCheckpoints<'a, P> {
    set: Checkpoints,
    params: &'a P,
    keep: Option<usize>,
    written: Vec<u64>,
}

impl<'a, P: Serialize> RunCheckpoints<'a, P> {
    /// The checkpoints of a run of `params` in `dir`, of which the newest `keep`
    /// that this run writes are kept (`None`: all).
    pub fn new(dir: &Path, params: &'a P, keep: Option<usize>) -> RunCheckpoints<'a, P> {
        RunCheckpoints {
            set: Checkpoints::new(dir),
            params,
            keep,
            written: Vec::new(),
        }
    }

    /// Writes the checkpoint at `step` (a collective: every rank of `size` calls
    /// it). Rank `rank` writes its file holding `payload`; every rank's file size
    /// and CRC-32C go to rank 0 through `gather` (an allgather of words in rank
    /// order), which commits the checkpoint with the spike file `spikes` (its path
    /// and how many spikes it holds) once every rank's file is there, and removes
    /// this run's checkpoints older than the newest `keep`. A rank that could not
    /// write its file makes every rank fail here.
    pub fn write(
        &mut self,
        (step, rank, size): (u64, usize, usize),
        payload: &[u8],
        spikes: Option<(&Path, u64)>,
        gather: impl FnOnce(&[u32], &mut Vec<u32>) -> Result<()>,
    ) -> Result<()> {
        let _s = tracing::info_span!("checkpoint", step).entered();
        let written = self
            .set
            .write_rank(step, rank as u32, size as u32, payload)
            .map_err(anyhow::Error::from);
        let mut all = Vec::new();
        gather(&entry_words(&written), &mut all)?;
        written?;
        let entries = gathered_entries(&all, size, step)?;
        if rank == 0 {
            let ck = commit_run(&self.set, self.params, step, size, entries, spikes)?;
            tracing::debug!(dir = %hpc_io::message::path(ck.dir()), "checkpoint written");
            self.written.push(step);
            if let Some(keep) = self.keep {
                self.set.prune(&mut self.written, keep)?;
            }
        }
        Ok(())
    }
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

/// A checkpoint to resume from, with its model's metadata `M`.
#[derive(Clone, Debug)]
pub struct Restart<M> {
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

impl<M> Restart<M> {
    /// Checks that a run can continue this checkpoint: the same model (the
    /// error names the `differences`, `name checkpoint -> run`, between the
    /// checkpoint's parameters and the run's, such as [`crate::run::params_diff`]
    /// gives them leaving out `t_sim`), and a run of `steps` steps of `dt` ms that
    /// reaches the checkpoint's step (the error gives the `--t-sim` that does, the
    /// simulated time counting from `t_sim_from` ms: a warm-up before it).
    pub fn check_continues(
        &self,
        differences: &[String],
        steps: u64,
        dt: f64,
        t_sim_from: f64,
    ) -> Result<()> {
        if !differences.is_empty() {
            bail!(
                "checkpoint {} is of a different model: {} (checkpoint -> this run); a \
                 restart continues the same network",
                hpc_io::message::path(self.dir()),
                differences.join(", ")
            );
        }
        if self.step() > steps {
            let at = self.step() as f64 * dt;
            bail!(
                "checkpoint {} is at {at:.1} ms (step {}) but the run ends at {:.1} ms (step \
                 {steps}): a restart continues that run, so give --t-sim {:.1} or more",
                hpc_io::message::path(self.dir()),
                self.step(),
                steps as f64 * dt,
                at - t_sim_from
            );
        }
        Ok(())
    }
}

/// The checkpoint to resume from, when `dir` is given ([`open_with`] for `model`'s
/// metadata `M`), checked with `check` (such as [`Restart::check_continues`])
/// before anything of its state is read, so that a checkpoint of another model is
/// refused before a network is built for it.
pub fn resume<M: DeserializeOwned>(
    dir: Option<&Path>,
    model: &str,
    check: impl FnOnce(&Restart<M>) -> Result<()>,
) -> Result<Option<Restart<M>>> {
    let Some(dir) = dir else {
        return Ok(None);
    };
    let r = open_with(dir, model)?;
    check(&r)?;
    Ok(Some(r))
}

/// Logs that this rank restored its state from `r`.
pub fn restored<M>(r: &Restart<M>) {
    tracing::info!(checkpoint = %hpc_io::message::path(r.dir()), step = r.step(), "restored");
}

/// The checkpoint to resume from: `dir` itself if it is a step directory (used as
/// named, no fallback), else the newest checkpoint in `dir` that verifies (each newer
/// one that fails is skipped with a warning), with its metadata `M`; the error names
/// the manifest that does not hold `model`'s metadata.
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
    // serde's message quotes the string it refused whole: cut.
    let meta: M = serde_json::from_value(checkpoint.metadata().clone()).map_err(|e| {
        anyhow::anyhow!(
            "{} does not hold {model}'s metadata: {}",
            hpc_io::message::path(&checkpoint.dir().join(hpc_checkpoint::MANIFEST)),
            hpc_io::message::cut(&e.to_string())
        )
    })?;
    Ok(Restart { checkpoint, meta })
}

/// The checkpoint every rank resumes from: rank 0 chooses it with `find` (for
/// [`open_with`]: the newest that verifies, warning about each newer one it skips, or
/// `dir` itself when it names a step directory) and tells the others, so all ranks
/// resume from the same one. Every rank fails when rank 0 finds none; rank 0's
/// error says why.
pub fn choose(
    world: &hpc_rs::World,
    dir: &Path,
    find: impl FnOnce(&Path) -> Result<PathBuf>,
) -> Result<PathBuf> {
    let mine: std::result::Result<PathBuf, String> = if world.rank() == 0 {
        // A path that does not exist is said so ("no checkpoint in X (no step-*
        // directory)" read as if X were an empty checkpoint directory).
        match std::fs::metadata(dir) {
            Err(e) => Err(format!("--restart {}: {e}", hpc_io::message::path(dir))),
            // A run writing checkpoints there removes and writes steps while this
            // one reads them: a restart failed as "listed in the manifest but
            // missing", or took the step being written for an interrupted one.
            Ok(_) => match writer_of(dir) {
                Some((held, holder)) => Err(format!(
                    "--restart {}: checkpoint directory {} is in use by {holder}, which \
                     writes and removes checkpoints in it while this run would read them: \
                     restart once that run has ended, or from a copy of one of its steps",
                    hpc_io::message::path(dir),
                    hpc_io::message::path(&held)
                )),
                // Named with the flag: "cannot read the directory /dev/zero: Not a
                // directory" did not say which option gave it.
                None => find(dir).map_err(|e| {
                    format!(
                        "--restart {}: {}",
                        hpc_io::message::path(dir),
                        hpc_io::message::chain(e.as_ref())
                    )
                }),
            },
        }
    } else {
        Err(String::new())
    };
    // A path that is not UTF-8 (a name Linux allows) failed rank 0's
    // serialisation, "path contains invalid UTF-8 characters", naming neither
    // the flag nor the path, before the broadcast the other ranks waited in:
    // it travels as its bytes ([`hpc_io::serde_path`]).
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Chosen(#[serde(with = "hpc_io::serde_path")] PathBuf);
    let mine = mine.map(Chosen);
    let chosen: std::result::Result<Chosen, String> =
        serde_json::from_slice(&world.broadcast(0, &serde_json::to_vec(&mine)?)?)?;
    let chosen = chosen.map(|c| c.0);
    chosen.map_err(|e| {
        if world.rank() == 0 {
            anyhow::anyhow!(e)
        } else {
            anyhow::anyhow!(
                "rank 0 found no checkpoint to resume from in {}",
                hpc_io::message::path(dir)
            )
        }
    })
}

/// The lock file of a checkpoint directory, held by the run that writes into it.
pub const LOCK: &str = "checkpoints.lock";

/// The checkpoint directory of `dir` (`dir` itself, and its parent when `dir`
/// is a step directory) whose [`LOCK`] a running process holds, with the holder
/// as the lock file names it; `None` when no run writes there (a lock left by
/// an ended run is free). Nothing is made in a directory that is only read.
fn writer_of(dir: &Path) -> Option<(PathBuf, String)> {
    let step = dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("step-"))
        || dir.join(hpc_checkpoint::MANIFEST).exists();
    let parent = dir.parent().filter(|p| step && !p.as_os_str().is_empty());
    [Some(dir), parent]
        .into_iter()
        .flatten()
        .find_map(|d| Some((d.to_path_buf(), hpc_io::rundir::lock_holder(&d.join(LOCK))?)))
}

/// Takes the checkpoint directory `dir` for this run (a collective: every rank
/// calls it; rank 0 decides and tells the others, so all fail together with rank 0's
/// message). Rank 0 creates the directory, locks it against other runs (a second run
/// writing checkpoints into it fails at once, naming the holder), and refuses it
/// when it holds a checkpoint of a different model than `params` (compared as for a
/// restart, all but `t_sim`; the error names the parameters that differ): such
/// checkpoints would be overwritten by or mixed with this run's. Checkpoints of the
/// same model are the same state at the same step, so a rerun may replace them.
/// Rank 0 gets the lock, to hold until the run ends; the others `None`. A `dir`
/// at the name of one of the files of the run's output directory `out` (rank 0's)
/// is refused before it is made: the run's write of that file failed at its end.
pub fn claim_dir(
    world: &hpc_rs::World,
    dir: &Path,
    params: &impl Serialize,
    out: Option<&hpc_io::rundir::RunDir>,
) -> Result<Option<DirLock>> {
    let mine = serde_json::to_value(params)?;
    claim_dir_with(
        world,
        dir,
        |theirs| crate::run::params_diff(theirs, &mine, &["t_sim"]),
        out,
    )
}

/// [`claim_dir`], where `differences` says in which parameters a checkpoint's
/// (its metadata's `params`) differ from this run's (`name theirs -> mine`,
/// empty: the same model): for a model whose parameters are compared as it
/// uses them (brunel's in-degrees given or taken from `epsilon`), so that the
/// check of the directory says what a restart's check says.
pub fn claim_dir_with(
    world: &hpc_rs::World,
    dir: &Path,
    differences: impl Fn(&serde_json::Value) -> Vec<String>,
    out: Option<&hpc_io::rundir::RunDir>,
) -> Result<Option<DirLock>> {
    crate::run::rank0_takes(
        world,
        || format!("the checkpoint directory {}", hpc_io::message::path(dir)),
        || claim(dir, &differences, out).map_err(|e| hpc_io::message::chain(e.as_ref())),
    )
}

fn claim(
    dir: &Path,
    differences: &dyn Fn(&serde_json::Value) -> Vec<String>,
    out: Option<&hpc_io::rundir::RunDir>,
) -> Result<DirLock> {
    use std::io::Write as _;
    // A directory that is, or goes through, a link another user planted: its
    // lock and checkpoints would go where the link points (as `Checkpoints` and
    // a run directory refuse it).
    hpc_io::rundir::check_dir_link(dir).map_err(|e| anyhow::anyhow!("--checkpoint-dir: {e}"))?;
    if out.is_some_and(|o| o.owns_path(dir)) {
        bail!(
            "--checkpoint-dir {} is the name of one of the files this run writes into its \
             output directory: choose another --checkpoint-dir",
            hpc_io::message::path(dir)
        );
    }
    // A checkpoint's own step directory, or a folder inside one: this run's
    // checkpoints were nested there, where no restart from the directory
    // holding that checkpoint finds them, and its files mixed with the
    // checkpoint's (`--restart D/step-N --checkpoint-dir D/step-N` wrote
    // `D/step-N/step-M`).
    if let Some(ck) = Checkpoint::holding(dir) {
        let holder = ck
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        bail!(
            "--checkpoint-dir {} {} the checkpoint {}: this run's checkpoints would be nested \
             in it, where no restart from {} finds them; give {} or another --checkpoint-dir",
            hpc_io::message::path(dir),
            if ck == dir { "is" } else { "lies in" },
            hpc_io::message::path(ck),
            hpc_io::message::path(holder),
            hpc_io::message::path(holder),
        );
    }
    if let Ok(m) = std::fs::metadata(dir) {
        // `create_dir_all` says only "File exists" of a file or a device there.
        if !m.is_dir() {
            bail!(
                "the checkpoint directory {} exists and is not a directory: choose another \
                 --checkpoint-dir (a missing one is made)",
                hpc_io::message::path(dir)
            );
        }
    }
    std::fs::create_dir_all(dir).with_context(|| {
        format!(
            "cannot create the checkpoint directory {}",
            hpc_io::message::path(dir)
        )
    })?;
    let lock_path = dir.join(LOCK);
    let taken = hpc_io::rundir::try_lock_file(&lock_path).map_err(|e| match e {
        // hpc-io's advice names the output directory; this is the checkpoints'.
        hpc_io::rundir::Error::WrongType { path, kind, wanted } => anyhow::anyhow!(
            "{} is {kind}, not {wanted}; remove it or choose another --checkpoint-dir",
            hpc_io::message::path(&path)
        ),
        e => e.into(),
    })?;
    let Some(mut lock) = taken else {
        let holder = hpc_io::read::read_regular_to_string(&lock_path, 4096).unwrap_or_default();
        let holder = holder.trim();
        bail!(
            "checkpoint directory {} is in use by {}; wait for it to finish or choose another --checkpoint-dir",
            hpc_io::message::path(dir),
            if holder.is_empty() { "another run" } else { holder }
        );
    };
    let holder = format!("the run of pid {}", std::process::id());
    (|| {
        lock.set_len(0)?;
        write!(lock, "{holder}")?;
        lock.sync_all()
    })()
    .with_context(|| format!("cannot write {}", hpc_io::message::path(&lock_path)))?;
    // From here its holder's name goes with the lock, also when this claim
    // fails below.
    let lock = DirLock::new(lock, lock_path, holder);
    let set = Checkpoints::new(dir);
    for step in set.steps()? {
        // A step directory without a manifest is an interrupted write: no checkpoint.
        let Ok(ck) = Checkpoint::open(set.step_dir(step)) else {
            continue;
        };
        let differs = match ck.metadata().get("params") {
            Some(theirs) => differences(theirs),
            None => vec!["its metadata holds no model parameters".into()],
        };
        if !differs.is_empty() {
            bail!(
                "checkpoint directory {} holds {} of a different model ({}: checkpoint -> \
                 this run), which this run's checkpoints would overwrite or be mixed with: \
                 choose another --checkpoint-dir or remove it",
                hpc_io::message::path(dir),
                hpc_io::message::path(ck.dir()),
                differs.join(", ")
            );
        }
    }
    Ok(lock)
}

/// The lock of a checkpoint directory this run holds ([`claim_dir`]): the
/// lock goes with it when it is dropped, and so does the holder's name in the
/// lock file ("the run of pid N", which only a run refused while the lock is
/// held reads), as a run directory's `run.lock` is emptied at its end; a
/// signal that ends the process at once empties it too
/// ([`crate::stop::before_end`]), while it still names this run. (It named
/// every run that had ever written checkpoints there.)
#[derive(Debug)]
pub struct DirLock {
    file: std::fs::File,
}

impl DirLock {
    fn new(file: std::fs::File, path: PathBuf, holder: String) -> DirLock {
        crate::stop::before_end(move || clear_holder(&path, &holder));
        DirLock { file }
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
    }
}

/// Empties the lock file at `path` while it names `holder` (once this run let
/// the lock go, another run's name may be there).
fn clear_holder(path: &Path, holder: &str) {
    if hpc_io::read::read_regular_to_string(path, 4096).is_ok_and(|h| h == holder) {
        use std::os::unix::fs::OpenOptionsExt as _;
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path);
        if let Ok(f) = opened {
            let _ = f.set_len(0);
        }
    }
}

/// Bytes of the head of a rank file as [`rank_head`] writes it.
pub const RANK_HEAD: usize = 28;

/// Starts a rank's payload (what it hands to [`RunCheckpoints::write`]): the
/// model's 8-byte `magic`, the first neuron and the count of `block` (u32 each),
/// one word of the model's own (`extra`, u32: its delay in steps, the spikes it
/// has in flight) and `step` (u64), little-endian: [`RANK_HEAD`] bytes, which
/// [`RankFile::read`] reads back. The model's state follows; `capacity` bytes
/// in all are reserved.
///
/// Public for a network of your own that keeps this layout, so that its
/// restart is checked as the examples' are.
pub fn rank_head(magic: &[u8; 8], block: Block, extra: u32, step: u64, capacity: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(capacity.max(RANK_HEAD));
    b.extend_from_slice(magic);
    b.extend_from_slice(&block.first.to_le_bytes());
    b.extend_from_slice(&block.len.to_le_bytes());
    b.extend_from_slice(&extra.to_le_bytes());
    b.extend_from_slice(&step.to_le_bytes());
    b
}

/// The number of rank files of `r`, checked to be a decomposition of `n`
/// neurons (one to `n` ranks): the ranks whose files a restart reads with
/// [`RankFile::read`].
pub fn rank_files<M>(r: &Restart<M>, n: u32) -> Result<u32> {
    let ranks = r.checkpoint.ranks();
    if ranks == 0 || ranks > n {
        bail!(
            "checkpoint {} was written by {ranks} ranks, not a decomposition of {n} neurons",
            hpc_io::message::path(r.dir())
        );
    }
    Ok(ranks)
}

/// Checks that the rank files of `r` gave the state of every neuron of `block`:
/// `covered` of them.
pub fn check_covered<M>(r: &Restart<M>, covered: usize, block: Block) -> Result<()> {
    if covered != block.len as usize {
        bail!(
            "checkpoint {} does not cover neurons {}..{}",
            hpc_io::message::path(r.dir()),
            block.first,
            block.end()
        );
    }
    Ok(())
}

/// A rank's file of a checkpoint (verified against the manifest), its head
/// ([`rank_head`]) read: errors about it name the file ([`RankFile::error`]).
#[derive(Clone, Debug)]
pub struct RankFile {
    /// The file.
    pub path: PathBuf,
    /// Its content, the head included.
    pub bytes: Vec<u8>,
    /// The neurons it holds.
    pub block: Block,
    /// The model's own word of the head.
    pub extra: u32,
    /// The step it holds.
    pub step: u64,
}

impl RankFile {
    /// Reads rank `rank`'s file of `r`; refused when it does not start with
    /// `magic` (not a rank state of `model`, a name for the error).
    pub fn read<M>(r: &Restart<M>, rank: u32, magic: &[u8; 8], model: &str) -> Result<RankFile> {
        let path = r.dir().join(rank_file_name(rank));
        let bytes = r.checkpoint.read_rank(rank)?;
        if bytes.len() < RANK_HEAD || &bytes[..8] != magic {
            bail!(
                "{}: not a rank state of {model} (wrong magic)",
                hpc_io::message::path(&path)
            );
        }
        let u32_at =
            |o: usize| u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
        let block = Block {
            first: u32_at(8),
            len: u32_at(12),
        };
        let extra = u32_at(16);
        let step = u64::from_le_bytes(bytes[20..28].try_into()?);
        Ok(RankFile {
            path,
            bytes,
            block,
            extra,
            step,
        })
    }

    /// An error about this file: its path, then `what`.
    pub fn error(&self, what: impl std::fmt::Display) -> anyhow::Error {
        anyhow::anyhow!("{}: {what}", hpc_io::message::path(&self.path))
    }

    /// Checks that the file holds rank `rank`'s part of `n` neurons (of
    /// `r`'s decomposition) at `r`'s step.
    pub fn check_holds<M>(&self, r: &Restart<M>, rank: u32, n: u32) -> Result<()> {
        let ranks = r.checkpoint.ranks();
        let theirs = Block::part(n, ranks, rank);
        let Block { first, len } = self.block;
        if self.block != theirs {
            return Err(self.error(format!(
                "holds neurons {first}..{} but rank {rank} of {ranks} has {}..{}",
                first as u64 + len as u64,
                theirs.first,
                theirs.end()
            )));
        }
        if self.step != r.step() {
            return Err(self.error(format!(
                "holds step {} but the checkpoint is of step {}",
                self.step,
                r.step()
            )));
        }
        Ok(())
    }

    /// Checks that the file is `want` bytes long: the state of `what`.
    pub fn check_len(&self, want: usize, what: impl std::fmt::Display) -> Result<()> {
        if self.bytes.len() != want {
            return Err(self.error(format!(
                "{} bytes for {what}, expected {want}",
                self.bytes.len()
            )));
        }
        Ok(())
    }

    /// The u32 at byte `o` (little-endian); `o + 4` must be within the file.
    pub fn u32_at(&self, o: usize) -> u32 {
        let b = &self.bytes;
        u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
    }

    /// The u64 at byte `o` (little-endian); `o + 8` must be within the file.
    pub fn u64_at(&self, o: usize) -> u64 {
        let mut w = [0; 8];
        w.copy_from_slice(&self.bytes[o..o + 8]);
        u64::from_le_bytes(w)
    }

    /// The f64 at byte `o` (little-endian); `o + 8` must be within the file.
    pub fn f64_at(&self, o: usize) -> f64 {
        f64::from_bits(self.u64_at(o))
    }

    /// The f64 at byte `o` ([`f64_at`](Self::f64_at)), refused unless finite: a
    /// neuron's state (`what`, such as `"V of neuron 3"`) that is infinite or
    /// NaN would silence the neuron (an infinite potential becomes NaN at the
    /// first update, which never reaches the threshold) without a word.
    pub fn finite_f64_at(&self, o: usize, what: impl std::fmt::Display) -> Result<f64> {
        let x = self.f64_at(o);
        if !x.is_finite() {
            return Err(self.error(format!(
                "{what} is {x} (at byte {o}): not a state a run has"
            )));
        }
        Ok(x)
    }

    /// The refractory counter at byte `o` ([`u32_at`](Self::u32_at)) of
    /// `what`, refused above `max`, the model's refractory period in steps
    /// (a counter is set to it at a spike and counts down): a larger one would
    /// keep the neuron silent for that many steps.
    pub fn refractory_at(&self, o: usize, max: u32, what: impl std::fmt::Display) -> Result<u32> {
        let r = self.u32_at(o);
        if r > max {
            return Err(self.error(format!(
                "{what} has {r} refractory steps left, more than the model's {max}"
            )));
        }
        Ok(r)
    }
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
    let f = decode_spikes(&bytes, false).with_context(|| {
        format!(
            "{} does not hold a valid spike file",
            hpc_io::message::path(&path)
        )
    })?;
    if f.n_neurons != n_neurons {
        bail!(
            "{}: spikes of {} neurons, the model has {}",
            hpc_io::message::path(&path),
            f.n_neurons,
            n_neurons
        );
    }
    if let Some(&(tick, id)) = f.spikes.last() {
        if tick as u64 > checkpoint.step() {
            bail!(
                "{}: neuron {id} spikes at tick {tick}, after the checkpoint's step {}",
                hpc_io::message::path(&path),
                checkpoint.step()
            );
        }
    }
    if let Some(n) = counted {
        if n != f.spikes.len() as u64 {
            bail!(
                "{}: {} spikes, the manifest counted {n}",
                hpc_io::message::path(&path),
                f.spikes.len()
            );
        }
    }
    Ok(Some(f.spikes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--restart` of a directory whose name is not UTF-8 (Linux allows it):
    /// rank 0's choice failed to serialise, "path contains invalid UNICODE
    /// characters", naming neither the flag nor the path, and the other ranks
    /// waited for its broadcast. The path travels as its bytes.
    #[test]
    fn a_restart_directory_not_in_utf8_is_chosen_as_it_is() {
        use std::os::unix::ffi::OsStrExt as _;
        let world = hpc_rs::World::init_with(
            hpc_rs::runtime::Config::from_map(std::collections::HashMap::new()).unwrap(),
        )
        .unwrap();
        let base = hpc_test_support::TmpDir::new("hpc-spiking", "odd-restart");
        let dir = base.join(std::ffi::OsStr::from_bytes(b"ck\xff"));
        std::fs::create_dir(&dir).unwrap();
        let step = dir.join("step-0000000001");
        let chosen = choose(&world, &dir, |d| Ok(d.join("step-0000000001")))
            .unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(chosen, step);
    }

    /// A checkpoint directory whose lock a running writer holds is found, for
    /// itself and for its steps (a restart from it failed at random, as
    /// "listed in the manifest but missing", when the writer pruned the step
    /// being read); a lock left by an ended run, or none, is no writer.
    #[test]
    fn a_checkpoint_dir_a_run_writes_into_is_found_for_a_restart() {
        let base = hpc_test_support::TmpDir::unmade("hpc-spiking", "ckwriter");
        let step = base.join("step-0000000100");
        std::fs::create_dir_all(&step).unwrap();
        assert!(writer_of(&base).is_none(), "no lock file: no writer");
        assert!(
            !base.join(LOCK).exists(),
            "nothing made where a restart only reads"
        );
        let held = hpc_io::rundir::try_lock_file(&base.join(LOCK))
            .unwrap()
            .unwrap();
        std::fs::write(base.join(LOCK), "the run of pid 4242").unwrap();
        let (dir, holder) = writer_of(&base).expect("the writer of the directory");
        assert_eq!(
            (dir.as_path(), holder.as_str()),
            (&*base, "the run of pid 4242")
        );
        let (dir, _) = writer_of(&step).expect("the writer of a step's directory");
        assert_eq!(dir, *base);
        drop(held);
        assert!(
            writer_of(&base).is_none() && writer_of(&step).is_none(),
            "an ended run's lock"
        );
    }

    /// A checkpoint directory that is a link another user planted is refused
    /// before its lock is made (the lock went where the link pointed).
    #[test]
    fn a_checkpoint_dir_that_is_a_planted_link_is_refused_before_its_lock() {
        let base = hpc_test_support::TmpDir::unmade("hpc-spiking", "cklink");
        let target = base.join("target");
        std::fs::create_dir_all(&target).unwrap();
        let dir = base.join("ck");
        std::os::unix::fs::symlink(&target, &dir).unwrap();
        if let Err(e) = std::os::unix::fs::lchown(&dir, Some(65534), Some(65534)) {
            eprintln!("the link's owner kept ({e}): not run");
            return;
        }
        let e = claim(&dir, &|_: &serde_json::Value| Vec::new(), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--checkpoint-dir") && e.contains("user 65534"),
            "{e}"
        );
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
    }

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

    #[test]
    fn a_run_commits_its_checkpoints_keeps_the_newest_and_checks_a_restart() {
        let dir = hpc_test_support::TmpDir::unmade("hpc-spiking", "ck");
        let params = serde_json::json!({"g": 5.0, "t_sim": 100.0});
        let mut ck = RunCheckpoints::new(&dir, &params, Some(2));
        for step in [10, 20, 30] {
            ck.write((step, 0, 1), b"state", None, |w, all| {
                all.extend_from_slice(w);
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(Checkpoints::new(&dir).steps().unwrap(), [20, 30]);
        let r: Restart<RunMeta<serde_json::Value>> = open_with(&dir, "test").unwrap();
        assert_eq!((r.step(), r.meta.spikes), (30, None));
        assert_eq!(r.checkpoint.read_rank(0).unwrap(), b"state");
        // Continued by a run of the same model long enough; refused otherwise.
        r.check_continues(&[], 30, 0.1, 0.0).unwrap();
        let e = r
            .check_continues(&[], 20, 0.1, 1.0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("at 3.0 ms (step 30)") && e.contains("--t-sim 2.0 or more"),
            "{e}"
        );
        let e = r
            .check_continues(&["g 5.0 -> 6.0".into()], 30, 0.1, 0.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("of a different model: g 5.0 -> 6.0"), "{e}");
        // A rank whose file could not be written stops every rank.
        let err = ck
            .write((40, 0, 1), b"state", None, |_, all| {
                all.extend_from_slice(&entry_words(&Err(anyhow::anyhow!("disk full"))));
                Ok(())
            })
            .unwrap_err()
            .to_string();
        assert!(err.contains("could not write"), "{err}");
    }

    /// The lock file of a checkpoint directory names its holder while the run
    /// holds it and is emptied when the lock goes, also when the claim is
    /// refused (another model's checkpoints there), as a run directory's
    /// `run.lock` is: it kept "the run of pid N" of every run that had ended.
    #[test]
    fn the_checkpoint_lock_names_its_holder_only_while_held() {
        let dir = hpc_test_support::TmpDir::unmade("hpc-spiking", "ck-holder");
        let lock = dir.join(LOCK);
        let same = |_: &serde_json::Value| Vec::new();
        let held = claim(&dir, &same, None).unwrap();
        let text = std::fs::read_to_string(&lock).unwrap();
        assert_eq!(text, format!("the run of pid {}", std::process::id()));
        drop(held);
        assert_eq!(std::fs::read_to_string(&lock).unwrap(), "");
        let params = serde_json::json!({"g": 5.0, "t_sim": 100.0});
        let mut ck = RunCheckpoints::new(&dir, &params, None);
        ck.write((10, 0, 1), b"state", None, |w, all| {
            all.extend_from_slice(w);
            Ok(())
        })
        .unwrap();
        let other = |_: &serde_json::Value| vec!["g 5.0 -> 6.0".to_string()];
        let e = claim(&dir, &other, None).unwrap_err().to_string();
        assert!(e.contains("of a different model (g 5.0 -> 6.0"), "{e}");
        assert_eq!(std::fs::read_to_string(&lock).unwrap(), "");
        // The chore a signal's end runs empties it only while it names this run.
        std::fs::write(&lock, "another run").unwrap();
        clear_holder(&lock, &text);
        assert_eq!(std::fs::read_to_string(&lock).unwrap(), "another run");
        std::fs::write(&lock, &text).unwrap();
        clear_holder(&lock, &text);
        assert_eq!(std::fs::read_to_string(&lock).unwrap(), "");
    }

    /// A checkpoint's step directory given as the checkpoint directory (the
    /// one a run resumes from, `--restart D/step-N --checkpoint-dir D/step-N`),
    /// or a folder in one: refused, naming the directory that holds it (the
    /// run's checkpoints were written as `D/step-N/step-M`, which no restart
    /// from `D` finds); `D` itself is taken.
    #[test]
    fn a_step_directory_is_no_checkpoint_directory() {
        let dir = hpc_test_support::TmpDir::unmade("hpc-spiking", "ck-in-step");
        let params = serde_json::json!({"g": 5.0, "t_sim": 100.0});
        let mut ck = RunCheckpoints::new(&dir, &params, None);
        ck.write((10, 0, 1), b"state", None, |w, all| {
            all.extend_from_slice(w);
            Ok(())
        })
        .unwrap();
        let step = Checkpoints::new(&dir).step_dir(10);
        let same = |_: &serde_json::Value| Vec::new();
        for (given, verb) in [(step.clone(), "is"), (step.join("sub"), "lies in")] {
            let e = claim(&given, &same, None).unwrap_err().to_string();
            assert!(
                e.contains(&format!("{verb} the checkpoint {}: ", step.display()))
                    && e.contains("would be nested in it, where no restart from")
                    && e.contains(&format!("give {} or another", dir.display())),
                "{e}"
            );
            assert!(!given.join(LOCK).exists() && !step.join("sub").exists());
        }
        drop(claim(&dir, &same, None).unwrap());
    }

    /// Metadata of another shape quoting a string of 100,000 characters (a
    /// forged manifest, its checksum recomputed): serde's message quoted it
    /// whole (pass 16).
    #[test]
    fn metadata_of_another_shape_is_refused_in_a_short_message() {
        let dir = hpc_test_support::TmpDir::unmade("hpc-spiking", "meta");
        let params = serde_json::json!({"g": 5.0});
        let mut ck = RunCheckpoints::new(&dir, &params, None);
        ck.write((10, 0, 1), b"state", None, |w, all| {
            all.extend_from_slice(w);
            Ok(())
        })
        .unwrap();
        #[derive(Debug, serde::Deserialize)]
        struct Model {
            #[allow(dead_code)]
            g: f64,
        }
        let set = Checkpoints::new(&dir);
        let e = set.write_rank(20, 0, 1, b"state").unwrap();
        let meta = serde_json::json!({"params": {"g": "y".repeat(100_000)}, "spikes": null});
        set.commit(20, 1, [e], meta).unwrap();
        let e = format!(
            "{:#}",
            open_with::<RunMeta<Model>>(&dir, "test").unwrap_err()
        );
        assert!(
            e.len() < 1000
                && e.contains("does not hold test's metadata")
                && e.contains("more characters"),
            "{}",
            &e[..300]
        );
    }
}
