//! Output directories owned by one run at a time.
//!
//! A run that writes into a directory ([`RunDir::create`]):
//!
//! 1. creates the directory if it is missing and takes an exclusive, non-blocking
//!    `flock` on [`LOCK`] inside it. A second run on the same directory fails at once
//!    with [`Error::Busy`], which names the directory and the process (pid, host,
//!    run id) holding it. The lock belongs to the open file, so it goes away with
//!    the process however it ends (a crash or `kill -9` leaves no stale lock);
//!    It refuses ([`Error::Foreign`]) a directory holding files of the names the
//!    program declares as its outputs ([`RunInfo::outputs`]) that no earlier run's
//!    manifest lists as its own: they are someone's files, not a run's, and are
//!    never removed; and ([`Error::OtherProgram`]) a directory whose earlier run
//!    was another program's (`microcircuit --out brunel-out`), whose results a
//!    run of this one would otherwise remove;
//!    A `dir` that is, or goes through, a symbolic link is followed when this
//!    process's user, `root` or the owner of the folder holding the link made it
//!    (a user's own link to scratch space), and refused ([`Error::ForeignLink`])
//!    when another user did: a link planted where a run will write would send its
//!    files elsewhere unseen ([`check_dir_link`]); an empty `dir` is refused;
//! 2. removes the files that an earlier run's manifest lists (saying so, with the
//!    earlier run's id), so that nothing older can be taken for this run's.
//!    Subdirectories and unknown files are left alone;
//! 3. writes the manifest [`MANIFEST`] (`run.json`): run id, program, pid, host,
//!    start time, arguments, the program's details (such as the seed) and status
//!    `running`.
//!
//! [`RunDir::lock`] does the first step only, so that a run can check its input
//! (a checkpoint to resume from, its parameters) once it holds the directory and
//! before [`RunDir::start`] changes anything in it: a run refused for bad input
//! leaves the earlier run's files as they were.
//!
//! Every file the run writes is recorded in the manifest ([`RunDir::record`]);
//! [`RunDir::finish`] marks the run [`Status::Complete`] or [`Status::Incomplete`]
//! (a run stopped early, with the reason and where it stopped) and lists every
//! recorded file that exists with its size. Each manifest is written to a temporary
//! name, synced and renamed, and the directory synced, so a reader sees either the
//! old or the new manifest. A run dropped without `finish` (an error) marks itself
//! incomplete (a program that stops its run on a signal finishes it as
//! incomplete with the signal as the reason, as `hpc_spiking::stop` does); a run
//! that was killed leaves status `running` without a lock holder, which
//! [`inspect`] reports as [`Liveness::Abandoned`].
//!
//! The manifest and the lock file are opened without following a symbolic link and
//! without blocking, and must be regular files (a FIFO or a device there is refused,
//! or, for an earlier manifest, ignored with a warning); a manifest is read with the
//! bound [`crate::read::MAX_METADATA_BYTES`].
//!
//! Readers check a file with [`check_file`]: a file in a run directory is trusted
//! only when the manifest lists it and the run completed.
//!
//! `flock` works across nodes on NFSv4 and on Lustre mounted with `-o flock`; with
//! `-o localflock` (or NFSv3 without lockd) two runs on different nodes are not kept
//! apart. In a multi-rank run, the rank that writes the shared files (rank 0) owns
//! the directory; the other ranks only write under subdirectories it leaves alone.
//!
//! ```
//! use hpc_io::rundir::{RunDir, RunInfo, Status, Liveness};
//! let dir = std::env::temp_dir().join(format!("rundir-doc-{}", std::process::id()));
//! let mut info = RunInfo::new("demo");
//! info.outputs = vec!["result.txt".into()];
//! let mut run = RunDir::create(&dir, info.clone())?;
//! // A second run on the same directory is refused at once.
//! let busy = RunDir::create(&dir, info).unwrap_err();
//! assert!(busy.to_string().contains("in use by"), "{busy}");
//! run.write_atomic("result.txt", b"42\n")?;
//! run.finish(Status::Complete)?;
//! let m = hpc_io::rundir::inspect(&dir)?.unwrap();
//! assert_eq!(m.liveness, Liveness::Finished);
//! assert_eq!(m.manifest.files[0].name, "result.txt");
//! hpc_io::rundir::check_file(&dir.join("result.txt"))?;
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), hpc_io::rundir::Error>(())
//! ```

use std::fs::{self, File};
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};

use crate::atomic::{self, StepError};

mod claim;
mod error;
mod inspect;
mod last_words;
mod link;
mod manifest;
use claim::holder_in;
pub use claim::{lock_holder, try_lock_file, FileClaim};
use error::io;
pub use error::{Error, Result};
pub use inspect::{check_file, inspect, Inspected, Liveness};
pub use last_words::mark_incomplete_before_exit;
pub use link::{check_dir_link, dangling_link, dangling_link_in, dangling_said};
use manifest::{host_name, now_ms, read_manifest};
pub use manifest::{open_own, Manifest, RunFile, RunInfo, Status};

/// The manifest of a run directory.
pub const MANIFEST: &str = "run.json";
/// The lock file of a run directory (it holds the pid, host and run id of its holder).
pub const LOCK: &str = "run.lock";
/// The `format` field of every manifest.
pub const FORMAT: &str = "hpc-io run";
/// The manifest format version this crate writes.
pub const FORMAT_VERSION: u32 = 1;

fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\0')
        && name != MANIFEST
        && name != LOCK
        && !is_temporary(name);
    if ok {
        Ok(())
    } else {
        Err(Error::Name(name.into()))
    }
}

/// Whether `name` is of the form of the directory's temporaries
/// (`.NAME.tmp-PID`, [`tmp_path`]): such a file of the caller's was taken by
/// the next write of the manifest (`.run.json.tmp-PID`, renamed to
/// `run.json`) or of `NAME`, or removed by [`RunDir::start`] as a leftover.
fn is_temporary(name: &str) -> bool {
    name.strip_prefix('.')
        .and_then(|n| n.rsplit_once(".tmp-"))
        .is_some_and(|(_, pid)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

fn tmp_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!(".{name}.tmp-{}", std::process::id()))
}

/// Writes `bytes` to `dir/name` through a temporary name ([`tmp_path`]) with
/// [`atomic::write`].
fn write_replace(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    Ok(atomic::write(&dir.join(name), &tmp_path(dir, name), bytes)?)
}

/// Tries to take the lock of `dir`; `Ok(None)` when another process holds it.
fn try_lock(dir: &Path) -> Result<Option<File>> {
    try_lock_file(&dir.join(LOCK))
}

/// Who holds the run directory `dir`, as its lock file says.
fn holder_of(dir: &Path) -> String {
    holder_in(&dir.join(LOCK))
}

/// An output directory this run owns (see the [module](self) documentation).
#[derive(Debug)]
pub struct RunDir {
    dir: PathBuf,
    manifest: Manifest,
    lock: Option<File>,
    earlier: Option<Manifest>,
    started: bool,
    finished: bool,
    /// Whether [`RunDir::lock`] made the directory (it was not there): a run
    /// dropped before [`RunDir::start`] then removes it, its lock file with it.
    made: bool,
    /// This run's id among this process's runs ([`last_words`]).
    id: u64,
}

impl RunDir {
    /// Creates `dir` if missing, takes its lock (failing at once with
    /// [`Error::Busy`] when another run holds it), removes the files of an earlier
    /// run and writes the manifest with status `running`: [`RunDir::lock`], then
    /// [`RunDir::start`].
    pub fn create(dir: impl Into<PathBuf>, info: RunInfo) -> Result<RunDir> {
        let mut run = RunDir::lock(dir, info)?;
        run.start()?;
        Ok(run)
    }

    /// Creates `dir` if missing and takes its lock (failing at once with
    /// [`Error::Busy`] when another run holds it), changing nothing else: a run
    /// that finds a problem in its input after this and before [`RunDir::start`]
    /// leaves the earlier run's files and manifest as they were, and a directory
    /// this call made is removed again (it left a folder holding only an empty
    /// `run.lock` behind each refused `--restart`).
    pub fn lock(dir: impl Into<PathBuf>, info: RunInfo) -> Result<RunDir> {
        let dir = dir.into();
        check_dir_link(&dir)?;
        let made = fs::symlink_metadata(&dir).is_err();
        if let Err(e) = fs::create_dir_all(&dir) {
            return Err(match fs::metadata(&dir) {
                Ok(m) if !m.is_dir() => Error::WrongType {
                    // What it is in words ("/dev/null is a character device, not a
                    // directory"), not "is not a directory, not a directory".
                    kind: crate::read::kind_of_meta(&m),
                    path: dir,
                    wanted: "a directory",
                },
                _ => io("create", &dir)(e),
            });
        }
        let Some(mut lock) = try_lock(&dir)? else {
            return Err(Error::Busy {
                holder: holder_of(&dir),
                dir,
            });
        };
        let earlier = match read_manifest(&dir.join(MANIFEST)) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "ignoring an unreadable earlier manifest");
                None
            }
        };
        // Files of the output names that no earlier run lists are not a run's;
        // nor is a directory of such a name, whatever a manifest lists (no run
        // writes one there, and the run's write of that file would fail only
        // at its end, after all its work).
        let foreign: Vec<String> = info
            .outputs
            .iter()
            .filter(|name| check_name(name).is_ok())
            .filter(|name| match fs::symlink_metadata(dir.join(name)) {
                Ok(m) if m.is_dir() => true,
                Ok(_) => earlier.as_ref().is_none_or(|m| m.file(name).is_none()),
                Err(_) => false,
            })
            .cloned()
            .collect();
        if !foreign.is_empty() {
            return Err(Error::Foreign {
                dir,
                files: foreign,
            });
        }
        // Another program's run: its files are its results, not this program's to
        // replace (a manifest that lists no file leaves nothing to lose).
        if let Some(m) = earlier
            .as_ref()
            .filter(|m| m.info.program != info.program && !m.files.is_empty())
        {
            return Err(Error::OtherProgram {
                dir,
                program: m.info.program.clone(),
                run_id: m.run_id.clone(),
            });
        }
        let pid = std::process::id();
        let host = host_name();
        let started = now_ms();
        let run_id = format!("{host}-{pid}-{started}");
        let lock_path = dir.join(LOCK);
        (|| {
            lock.set_len(0)?;
            lock.rewind()?;
            write!(lock, "run {run_id} (pid {pid} on host {host})")?;
            lock.sync_all()
        })()
        .map_err(io("write", &lock_path))?;
        let id = last_words::next_id();
        // Its holder's name is cleared by a process that ends at once from now
        // on (a signal while the run builds), as when this is dropped.
        last_words::note_locked(id, &dir, true, made);
        Ok(RunDir {
            manifest: Manifest {
                format: FORMAT.into(),
                version: FORMAT_VERSION,
                run_id,
                pid,
                host,
                started_unix_ms: started,
                finished_unix_ms: None,
                info,
                status: Status::Running,
                files: Vec::new(),
            },
            dir,
            lock: Some(lock),
            earlier,
            started: false,
            finished: false,
            made,
            id,
        })
    }

    /// Starts the run in the locked directory (once; later calls do nothing):
    /// removes what an earlier run left (the files its manifest lists, and the
    /// temporaries of those and of the program's output names), saying so with the
    /// earlier run's id, and writes the manifest with status `running`.
    pub fn start(&mut self) -> Result<()> {
        if self.started {
            return Ok(());
        }
        let dir = self.dir.clone();
        let mut stale: Vec<String> = Vec::new();
        if let Some(m) = &self.earlier {
            stale.extend(m.files.iter().map(|f| f.name.clone()));
        }
        stale.sort();
        stale.dedup();
        let mut removed = Vec::new();
        for name in stale.iter().filter(|n| check_name(n).is_ok()) {
            if fs::symlink_metadata(dir.join(name)).is_ok_and(|m| !m.is_dir()) {
                let path = dir.join(name);
                fs::remove_file(&path).map_err(io("remove the earlier run's", &path))?;
                removed.push(name.as_str());
            }
        }
        if let (Some(m), false) = (&self.earlier, removed.is_empty()) {
            let status = match &m.status {
                Status::Complete => "complete",
                Status::Incomplete { .. } => "incomplete",
                Status::Running => "not finished",
            };
            tracing::info!(
                dir = %crate::message::path(&dir),
                files = %removed.join(", "),
                "removed the files of the earlier run {} ({status})",
                m.run_id
            );
        }
        // Temporaries (`.NAME.tmp-PID`) are never anyone's finished file.
        let mut names: Vec<&String> = self.manifest.info.outputs.iter().chain(&stale).collect();
        names.sort();
        names.dedup();
        for name in names.into_iter().filter(|n| check_name(n).is_ok()) {
            let path = tmp_path(&dir, name);
            if fs::symlink_metadata(&path).is_ok_and(|m| !m.is_dir()) {
                fs::remove_file(&path).map_err(io("remove the temporary", &path))?;
            }
        }
        self.started = true;
        self.write_manifest()
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Whether `path` names one of this run's files ([`is_run_file`] of its
    /// outputs).
    pub fn owns_path(&self, path: &Path) -> bool {
        is_run_file(&self.dir, &self.manifest.info.outputs, path)
    }

    /// The manifest as last written.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The path of `name` in the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn write_manifest(&mut self) -> Result<()> {
        let mut text = serde_json::to_vec_pretty(&self.manifest).map_err(|e| Error::Manifest {
            path: self.dir.join(MANIFEST),
            reason: e.to_string(),
        })?;
        text.push(b'\n');
        // Not written where its own reader ([`read_manifest`]) would refuse it:
        // details nested deeper than the parser goes, or a manifest beyond the
        // bound of a metadata file, were written, and then every later run in
        // the directory and every reader refused it. Refused at `start`, before
        // the run's work.
        let refused = |reason: String| Error::Manifest {
            path: self.dir.join(MANIFEST),
            reason,
        };
        if text.len() as u64 > crate::read::MAX_METADATA_BYTES {
            return Err(refused(format!(
                "this run's manifest would be {} bytes, more than the {} bytes its readers take",
                text.len(),
                crate::read::MAX_METADATA_BYTES
            )));
        }
        serde_json::from_slice::<Manifest>(&text)
            .map_err(|e| refused(format!("its readers would refuse this run's manifest: {e}")))?;
        // The manifest's name in the directory this run holds the lock of is the
        // run's own: a FIFO, device node or socket left there (warned about as an
        // unreadable earlier manifest) is removed, not refused as `atomic`'s
        // renames refuse such a name elsewhere. Removing the entry touches no
        // device; a directory of that name stays an error.
        let path = self.dir.join(MANIFEST);
        if fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
            fs::remove_file(&path).map_err(StepError::of("remove", &path))?;
        }
        // Never at once with a thread marking this process's runs before it
        // ends the process ([`mark_incomplete_before_exit`]).
        let mut held = last_words::hold();
        let written = write_replace(&self.dir, MANIFEST, &text);
        last_words::note(&mut held, self.id, &self.dir, &self.manifest, self.finished);
        written
    }

    /// Records `name` as a file this run writes (before writing it, so that a run
    /// that dies mid-write still names it); rewrites the manifest when it is new.
    pub fn record(&mut self, name: &str) -> Result<PathBuf> {
        check_name(name)?;
        self.start()?;
        if self.manifest.file(name).is_none() {
            self.manifest.files.push(RunFile {
                name: name.into(),
                size: None,
            });
            self.write_manifest()?;
        }
        Ok(self.dir.join(name))
    }

    /// Records the file at `path`, which must lie directly in the directory (as the
    /// paths a writer returns); see [`RunDir::record`].
    pub fn record_path(&mut self, path: &Path) -> Result<()> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|_| path.parent().is_some_and(|p| same_dir(p, &self.dir)))
            .ok_or_else(|| Error::Name(path.display().to_string()))?;
        self.record(name).map(|_| ())
    }

    /// Writes `bytes` to `name` atomically (temporary name, sync, rename) and
    /// records it.
    pub fn write_atomic(&mut self, name: &str, bytes: &[u8]) -> Result<PathBuf> {
        let path = self.record(name)?;
        write_replace(&self.dir, name, bytes)?;
        Ok(path)
    }

    /// Ends the run: every recorded file that exists is listed with its size (a
    /// recorded name that no longer exists, such as a `.partial` file renamed to its
    /// final name, is dropped), `status` is written, and the lock is released.
    pub fn finish(mut self, status: Status) -> Result<Manifest> {
        self.finish_with(status)?;
        Ok(self.manifest.clone())
    }

    fn finish_with(&mut self, status: Status) -> Result<()> {
        self.start()?;
        self.finished = true;
        let dir = self.dir.clone();
        self.manifest
            .files
            .retain_mut(|f| match fs::symlink_metadata(dir.join(&f.name)) {
                // A directory under a recorded file's name is not what the run
                // wrote (its write there failed): not listed as the run's.
                Ok(m) if !m.is_dir() => {
                    f.size = Some(m.len());
                    true
                }
                _ => false,
            });
        self.manifest.status = status;
        self.manifest.finished_unix_ms = Some(now_ms());
        let r = self.write_manifest();
        // The holder's name goes with the lock, so that it never names a run that
        // has ended; closing the file releases the lock.
        if let Some(lock) = self.lock.take() {
            let _ = lock.set_len(0);
        }
        r
    }
}

/// Whether `path` names one of the files a run writing into `dir` owns: one of its
/// `outputs` (file names, as [`RunInfo::outputs`]), its manifest (`run.json`) or
/// its lock (`run.lock`), directly in `dir` (`./out/x` and `out/x` alike). Another
/// output of the same run (a trace, a checkpoint directory) given such a name would
/// replace the run's file, or be replaced by it, after all the run's work: it is
/// refused before the run with this.
pub fn is_run_file(dir: &Path, outputs: &[String], path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    (name == MANIFEST || name == LOCK || outputs.iter().any(|o| o == name)) && same_dir(parent, dir)
}

fn same_dir(a: &Path, b: &Path) -> bool {
    a == b
        || match (fs::canonicalize(a), fs::canonicalize(b)) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if !self.started {
            // Nothing was changed: only the holder's name leaves the lock file,
            // and a directory `lock` made goes (the lock file first, while it is
            // held; the directory only when nothing else came into it).
            if let Some(lock) = self.lock.take() {
                let _ = lock.set_len(0);
                if self.made {
                    last_words::remove_made(&self.dir);
                }
            }
            last_words::note_locked(self.id, &self.dir, false, false);
        } else if !self.finished {
            let status = Status::Incomplete {
                reason: "the run ended with an error before finishing".into(),
                stopped_at: None,
            };
            if let Err(e) = self.finish_with(status) {
                // The run fails anyway (this is its error path); the manifest that
                // still says "running" is named, and readers take a "running"
                // manifest whose lock nobody holds as a run that ended unfinished
                // (`inspect`'s `Liveness::Abandoned`, the Python reader's check).
                tracing::error!(
                    error = %e,
                    "could not mark {} incomplete: it still says \"running\"; \
                     its files are not a finished run's",
                    self.dir.join(MANIFEST).display()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests;
