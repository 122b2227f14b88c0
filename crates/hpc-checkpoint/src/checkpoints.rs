//! The root of a run's checkpoints: writing, committing, finding and pruning them.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::checkpoint::Checkpoint;
use crate::error::{io, Error, Rejected, Result};
use crate::file::{
    check_name, is_temporary, named_file_name, rank_file_name, sync_dir, tmp_name, write_atomic,
    Header,
};
use crate::manifest::{check_files, manifest_text, parse_manifest, FileEntry, Manifest};
use crate::{
    CRC_PLACEHOLDER, FORMAT, FORMAT_VERSION, KIND_NAMED, KIND_RANK, MANIFEST, MAX_MANIFEST_BYTES,
    NO_RANK,
};

/// A directory of checkpoints, one `step-NNNNNNNNNN` directory per step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoints {
    root: PathBuf,
}

/// After a failed write (a full disk), the step's directory goes again if nothing is
/// in it, so that no empty `step-*` is left for a reader to wonder about. A directory
/// another rank already wrote into stays (`remove_dir` refuses a non-empty one).
fn remove_if_empty(dir: &Path) {
    let _ = fs::remove_dir(dir);
}

impl Checkpoints {
    /// The checkpoint set in `root` (created when the first file is written).
    pub fn new(root: impl Into<PathBuf>) -> Checkpoints {
        Checkpoints { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Refuses an empty root before anything is changed on disk: its step
    /// directories (`"".join("step-…")`) were those of the current directory,
    /// which a prune removed and a commit wrote a manifest into.
    fn check_root(&self) -> Result<()> {
        if self.root.as_os_str().is_empty() {
            return Err(io("use the checkpoint directory", &self.root)(
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "an empty path names no directory",
                ),
            ));
        }
        Ok(())
    }

    /// The directory of the checkpoint of `step`.
    pub fn step_dir(&self, step: u64) -> PathBuf {
        self.root.join(format!("step-{step:010}"))
    }

    /// Makes the directory of `step`'s checkpoint (or takes the one another rank
    /// made). A symbolic link planted at its name is refused, not followed: the
    /// checkpoint was written into the directory it pointed to. So is a root
    /// that is, or goes through, a link another user made
    /// ([`hpc_io::rundir::check_dir_link`], as a run directory is checked).
    fn make_dir(&self, step: u64) -> Result<PathBuf> {
        hpc_io::rundir::check_dir_link(&self.root)
            .map_err(|e| Error::InvalidArgument(format!("checkpoint directory: {e}")))?;
        let dir = self.step_dir(step);
        // A file, a FIFO or a device where a directory goes: `create_dir_all`
        // said only "File exists" or "Not a directory", not what is there.
        let in_the_way = |path: &Path, meta: fs::Metadata, what: &str| {
            Error::InvalidArgument(format!(
                "{} is {}, not a directory: {what}; remove it or choose another \
                 checkpoint directory",
                hpc_io::message::path(path),
                hpc_io::read::kind_of_meta(&meta)
            ))
        };
        if let Some(m) = fs::metadata(&self.root).ok().filter(|m| !m.is_dir()) {
            return Err(in_the_way(
                &self.root,
                m,
                "the checkpoints are directories in the checkpoint directory",
            ));
        }
        if let Some(m) = fs::symlink_metadata(&dir)
            .ok()
            .filter(|m| !m.is_dir() && !m.is_symlink())
        {
            return Err(in_the_way(
                &dir,
                m,
                &format!("the checkpoint of step {step} is a directory of that name"),
            ));
        }
        fs::create_dir_all(&dir).map_err(io("create", &dir))?;
        let meta = fs::symlink_metadata(&dir).map_err(io("inspect", &dir))?;
        if !meta.is_dir() {
            return Err(Error::InvalidArgument(format!(
                "{} is a symbolic link, not a directory: a checkpoint is never written \
                 through a link planted at its name; remove it",
                hpc_io::message::path(&dir)
            )));
        }
        Ok(dir)
    }

    /// Writes rank `rank`'s part (of `ranks`) of the checkpoint of `step`.
    pub fn write_rank(
        &self,
        step: u64,
        rank: u32,
        ranks: u32,
        payload: &[u8],
    ) -> Result<FileEntry> {
        self.write_rank_from(step, rank, ranks, payload.len() as u64, &mut &payload[..])
    }

    /// Like [`Checkpoints::write_rank`], streaming `len` bytes from `payload`.
    pub fn write_rank_from(
        &self,
        step: u64,
        rank: u32,
        ranks: u32,
        len: u64,
        payload: &mut dyn Read,
    ) -> Result<FileEntry> {
        if rank >= ranks {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} is not below the rank count {ranks}"
            )));
        }
        let dir = self.make_dir(step)?;
        let name = rank_file_name(rank);
        let header = Header {
            kind: KIND_RANK,
            step,
            rank,
            ranks,
            payload_len: len,
        };
        let (size, crc32c) = write_atomic(&dir.join(&name), header, payload)
            .inspect_err(|_| remove_if_empty(&dir))?;
        Ok(FileEntry {
            name,
            rank: Some(rank),
            size,
            crc32c,
        })
    }

    /// Writes a named file (not tied to a rank) into the checkpoint of `step`:
    /// `<name>.ckpt`. Names are letters, digits, `.`, `_` and `-`.
    pub fn write_file(&self, step: u64, name: &str, payload: &[u8]) -> Result<FileEntry> {
        self.write_file_from(step, name, payload.len() as u64, &mut &payload[..])
    }

    /// Like [`Checkpoints::write_file`], streaming `len` bytes from `payload` (a large
    /// file is copied without holding it in memory).
    pub fn write_file_from(
        &self,
        step: u64,
        name: &str,
        len: u64,
        payload: &mut dyn Read,
    ) -> Result<FileEntry> {
        check_name(name)?;
        let dir = self.make_dir(step)?;
        let file = named_file_name(name);
        let header = Header {
            kind: KIND_NAMED,
            step,
            rank: NO_RANK,
            ranks: 0,
            payload_len: len,
        };
        let (size, crc32c) = write_atomic(&dir.join(&file), header, payload)
            .inspect_err(|_| remove_if_empty(&dir))?;
        Ok(FileEntry {
            name: file,
            rank: None,
            size,
            crc32c,
        })
    }

    /// Completes the checkpoint of `step`: checks that `entries` name every rank
    /// `0..ranks` once and that each file is on disk with its size, then writes the
    /// manifest (last, atomically) with `metadata`. Call it on one rank, after every
    /// rank's [`Checkpoints::write_rank`] returned.
    pub fn commit(
        &self,
        step: u64,
        ranks: u32,
        entries: impl IntoIterator<Item = FileEntry>,
        metadata: serde_json::Value,
    ) -> Result<Checkpoint> {
        self.check_root()?;
        let dir = self.step_dir(step);
        let mut files: Vec<FileEntry> = entries.into_iter().collect();
        files.sort_by(|a, b| {
            (a.rank.is_none(), a.rank, &a.name).cmp(&(b.rank.is_none(), b.rank, &b.name))
        });
        // What a manifest must list (every rank once, plain names), checked
        // before anything is looked at on disk.
        check_files(&files, ranks).map_err(|reason| {
            Error::InvalidArgument(format!(
                "checkpoint {}: {reason}",
                hpc_io::message::path(&dir)
            ))
        })?;
        // A step nothing was written for (a commit of no files, of 0 ranks):
        // refused by name, not as "cannot create …/manifest.json.tmp123: No
        // such file or directory", a file the caller never named.
        if !fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
            return Err(Error::InvalidArgument(format!(
                "checkpoint {}: no file of it was written (its directory does not exist); \
                 write every rank's part (write_rank) before the commit",
                hpc_io::message::path(&dir)
            )));
        }
        for f in &files {
            let path = dir.join(&f.name);
            let found = fs::metadata(&path)
                .map_err(|_| Error::Missing { path: path.clone() })?
                .len();
            if found != f.size {
                return Err(Error::Size {
                    path,
                    expected: f.size,
                    found,
                });
            }
        }
        // Every rank's file of this step is written, and earlier steps are done:
        // a temporary file left in any of them is an interrupted write's.
        self.remove_temporaries(step);
        let manifest = Manifest {
            format: FORMAT.into(),
            version: FORMAT_VERSION,
            step,
            ranks,
            files,
            metadata,
            manifest_crc32c: CRC_PLACEHOLDER.into(),
        };
        let text = manifest_text(&manifest);
        let path = dir.join(MANIFEST);
        // Larger than its reader takes (a metadata of 65 MiB): the commit
        // said Ok, and every later open refused the step as "not a valid
        // checkpoint manifest: it is 68157693 bytes, more than the 67108864
        // accepted".
        if text.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(Error::InvalidArgument(format!(
                "checkpoint {}: its manifest would be {} bytes (the metadata and {} files' \
                 entries), more than the {MAX_MANIFEST_BYTES} bytes a checkpoint's reader \
                 accepts; nothing committed: keep large data in a file of the checkpoint \
                 (write_file), not in its metadata",
                hpc_io::message::path(&dir),
                text.len(),
                manifest.files.len()
            )));
        }
        // Read back before it is written: a manifest its reader refuses
        // (metadata nested deeper than the parser goes) replaced the step's
        // manifest, and the commit failed after it.
        let checked = parse_manifest(&path, text.as_bytes())?;
        // Synced, renamed, and the step's directory synced (its rank files' renames
        // with the manifest's). A step that had no manifest and cannot get one (a
        // full disk) is removed: no reader would take it, and nothing else would
        // remove its rank files, which a full disk needs back most.
        let first = fs::symlink_metadata(&path).is_err();
        if let Err(e) = hpc_io::atomic::write(&path, &tmp_name(&path), text.as_bytes()) {
            if first {
                match fs::remove_dir_all(&dir) {
                    Ok(()) => tracing::warn!(
                        checkpoint = %hpc_io::message::path(&dir),
                        "its manifest could not be written: the step's files are removed"
                    ),
                    Err(r) => tracing::warn!(
                        checkpoint = %hpc_io::message::path(&dir),
                        "its manifest could not be written, nor the step removed: {r}"
                    ),
                }
            }
            return Err(e.into());
        }
        sync_dir(&self.root)?;
        Ok(Checkpoint {
            dir,
            manifest: checked,
        })
    }

    /// Keeps the newest `keep` (at least one) of the checkpoints whose steps are
    /// listed in `written` (those this run committed) and removes the
    /// directories of the others, oldest first; `written` is left holding the kept
    /// steps, ascending and each once. Only the listed steps are touched, so checkpoints of another run in the
    /// same root (newer ones included) are never removed for this run's. Returns the
    /// steps removed.
    pub fn prune(&self, written: &mut Vec<u64>, keep: usize) -> Result<Vec<u64>> {
        self.check_root()?;
        // In step order, each once: a list out of order removed the newest
        // checkpoint (`[5, 1, 3]` keeping one kept 3), and a step listed twice
        // counted twice.
        written.sort_unstable();
        written.dedup();
        let keep = keep.max(1);
        let excess = written.len().saturating_sub(keep);
        let gone: Vec<u64> = written.drain(..excess).collect();
        for &step in &gone {
            let dir = self.step_dir(step);
            match fs::remove_dir_all(&dir) {
                Ok(()) => {
                    tracing::debug!(checkpoint = %hpc_io::message::path(&dir), "removed an older checkpoint")
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("remove the older checkpoint", &dir)(e)),
            }
        }
        if !gone.is_empty() {
            sync_dir(&self.root)?;
        }
        Ok(gone)
    }

    /// Removes the temporary files (`<name>.tmp<pid>`) that interrupted writes left
    /// in the directories of `step` and of the steps before it, whose writes are all
    /// over once `step` is committed; each removal is logged. Returns how many were
    /// removed. Failures are warnings: a leftover costs space, not correctness.
    pub fn remove_temporaries(&self, step: u64) -> usize {
        let mut removed = 0;
        if self.check_root().is_err() {
            return 0;
        }
        let steps = match self.steps() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot look for temporary checkpoint files");
                return 0;
            }
        };
        for s in steps.into_iter().filter(|&s| s <= step) {
            let dir = self.step_dir(s);
            let Ok(rd) = fs::read_dir(&dir) else { continue };
            for e in rd.filter_map(|e| e.ok()) {
                let name = e.file_name();
                let Some(name) = name.to_str() else { continue };
                if !is_temporary(name) || !e.file_type().is_ok_and(|t| t.is_file()) {
                    continue;
                }
                let path = e.path();
                match fs::remove_file(&path) {
                    Ok(()) => {
                        removed += 1;
                        tracing::info!(file = %hpc_io::message::path(&path), "removed the temporary file of an interrupted checkpoint write");
                    }
                    Err(e) => {
                        tracing::warn!(file = %hpc_io::message::path(&path), error = %e, "cannot remove a temporary checkpoint file")
                    }
                }
            }
        }
        removed
    }

    /// The steps that have a directory (complete or not), ascending.
    pub fn steps(&self) -> Result<Vec<u64>> {
        let rd = match fs::read_dir(&self.root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("read the directory", &self.root)(e)),
        };
        let mut steps: Vec<u64> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name();
                let name = name.to_str()?;
                let digits = name.strip_prefix("step-")?;
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                // Only the name `step_dir` gives the step: `step-10` is not step
                // 10's directory (`step-0000000010`), which would then be opened.
                let step: u64 = digits.parse().ok()?;
                (self.step_dir(step).file_name()? == name).then_some(step)
            })
            .collect();
        steps.sort_unstable();
        steps.dedup();
        Ok(steps)
    }

    /// The newest checkpoint that verifies completely ([`Checkpoint::verify`]).
    /// Each newer one that does not is skipped with a `tracing` warning naming the
    /// file and the problem.
    pub fn latest(&self) -> Result<Checkpoint> {
        self.latest_with_rejections().map(|(c, _)| c)
    }

    /// Like [`Checkpoints::latest`], also returning the checkpoints skipped (newest
    /// first), for applications that report them themselves.
    pub fn latest_with_rejections(&self) -> Result<(Checkpoint, Vec<Rejected>)> {
        let steps = self.steps()?;
        if steps.is_empty() {
            return Err(Error::NotFound {
                root: self.root.clone(),
            });
        }
        let mut rejected = Vec::new();
        for (i, &step) in steps.iter().enumerate().rev() {
            let dir = self.step_dir(step);
            // Whether an older checkpoint is left to try after this one.
            let older = i > 0;
            match Checkpoint::open(&dir).and_then(|c| c.verify().map(|()| c)) {
                Ok(c) => {
                    if c.step() != step {
                        let e = Error::Manifest {
                            path: dir.join(MANIFEST),
                            reason: format!(
                                "it names step {} but lies in the directory of step {step}",
                                c.step()
                            ),
                        };
                        warn_rejected(&dir, &e, older);
                        rejected.push(Rejected {
                            step,
                            dir,
                            error: Box::new(e),
                        });
                        continue;
                    }
                    if !rejected.is_empty() {
                        tracing::warn!(
                            checkpoint = %hpc_io::message::path(&dir),
                            step,
                            skipped = rejected.len(),
                            "resuming from an older checkpoint because the newer one(s) failed verification"
                        );
                    }
                    return Ok((c, rejected));
                }
                Err(e) => {
                    warn_rejected(&dir, &e, older);
                    rejected.push(Rejected {
                        step,
                        dir,
                        error: Box::new(e),
                    });
                }
            }
        }
        Err(Error::NoneValid {
            root: self.root.clone(),
            rejected,
        })
    }
}

/// Logs that the checkpoint in `dir` failed verification with `e`, and whether
/// an `older` one is tried next (else none is left: the error that follows
/// lists every one rejected).
pub(crate) fn warn_rejected(dir: &Path, e: &Error, older: bool) {
    if older {
        tracing::warn!(
            checkpoint = %hpc_io::message::path(dir),
            error = %e,
            "checkpoint failed verification; trying the previous one"
        );
    } else {
        tracing::warn!(
            checkpoint = %hpc_io::message::path(dir),
            error = %e,
            "checkpoint failed verification, and no older one is left to try"
        );
    }
}
