//! Locks on files and claims of output files ([`FileClaim`]).

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{check_dir_link, io, open_own, Error, Result};
pub(super) use crate::lockfile::holder_in;
pub use crate::lockfile::lock_holder;

/// Takes an exclusive, non-blocking `flock` on the lock file at `path` (created if
/// missing; a symbolic link, a FIFO or a device there is refused with
/// [`Error::WrongType`]); `Ok(None)` when another process holds it. The lock goes
/// with the returned file (and with the process, however it ends). For a directory
/// a run owns that is not a run directory (a checkpoint directory).
pub fn try_lock_file(path: &Path) -> Result<Option<File>> {
    let path = path.to_path_buf();
    let (f, _) = open_own(&path, true)?
        .ok_or_else(|| io("open the lock file", &path)(std::io::ErrorKind::NotFound.into()))?;
    match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(f)),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => Ok(None),
        Err(e) => Err(io("lock", &path)(e.into())),
    }
}

/// An output file that one run writes whole at its end (a merged trace), claimed
/// at the run's start: a second run given the same name is refused at once
/// ([`Error::FileBusy`], naming the holder) instead of both writing it and the
/// last to finish silently winning. The claim is an exclusive `flock` on
/// `.NAME.lock` beside the file (what [`try_lock_file`] takes), which says who
/// holds it; the lock file is removed when the claim is dropped, still locked, so
/// that no other run takes the removed file's lock for its own.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("hpc-io-claim-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let out = dir.join("trace.json");
/// let claim = hpc_io::rundir::FileClaim::take(&out, "the first run").unwrap();
/// let e = hpc_io::rundir::FileClaim::take(&out, "the second").unwrap_err();
/// assert!(e.to_string().contains("is being written by the first run"), "{e}");
/// drop(claim);
/// assert!(!dir.join(".trace.json.lock").exists());
/// hpc_io::rundir::FileClaim::take(&out, "the second").unwrap();
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Debug)]
pub struct FileClaim {
    lock: PathBuf,
    _file: File,
}

impl FileClaim {
    /// Claims `path` for this run, `holder` naming it to a run refused for it.
    pub fn take(path: &Path, holder: &str) -> Result<FileClaim> {
        use std::os::unix::fs::MetadataExt as _;
        let name = path
            .file_name()
            .ok_or_else(|| Error::Name(path.display().to_string()))?;
        let mut lock_name = std::ffi::OsString::from(".");
        lock_name.push(name);
        lock_name.push(".lock");
        let lock = path.with_file_name(lock_name);
        // Said of the file asked for, not of the lock beside it that no user
        // named ("cannot open N/.trace.json.lock" where N was not made yet).
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // Its folder through a link another user planted: refused, as a run
            // directory is (the file went where the link pointed).
            check_dir_link(dir)?;
            if !dir.is_dir() {
                return Err(io("open", path)(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("its folder {} does not exist", dir.display()),
                )));
            }
        }
        // A lock file that a running process holds (another run's `run.lock` or
        // checkpoint lock) replaced by the file written here: the next run took
        // that run's directory while it still ran.
        if lock_holder(path).is_some() {
            return Err(Error::LockFile {
                path: path.to_path_buf(),
            });
        }
        // A lock file removed by the run that held it, between our open and our
        // lock, is no claim of this name any more: opened again.
        for _ in 0..8 {
            let Some(mut f) = try_lock_file(&lock)? else {
                return Err(Error::FileBusy {
                    path: path.to_path_buf(),
                    holder: holder_in(&lock),
                });
            };
            let same = match (f.metadata(), fs::symlink_metadata(&lock)) {
                (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
                _ => false,
            };
            if !same {
                continue;
            }
            if let Err(e) = f.set_len(0).and_then(|()| f.write_all(holder.as_bytes())) {
                // The lock file made here is not left behind (a full disk left
                // `.NAME.lock` beside a trace that was never written).
                let _ = fs::remove_file(&lock);
                return Err(io("write", &lock)(e));
            }
            return Ok(FileClaim { lock, _file: f });
        }
        Err(io("lock", &lock)(std::io::Error::other(
            "its lock file keeps being replaced",
        )))
    }
}

impl FileClaim {
    /// The lock file beside the claimed file (`.NAME.lock`), removed when the
    /// claim is dropped: for a process that may end without dropping it (a
    /// signal's end at once), which removes it itself.
    pub fn lock_path(&self) -> &Path {
        &self.lock
    }
}

impl Drop for FileClaim {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.lock);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A holder named with a line break and a terminal's escape is quoted and
    /// escaped in the refusal of a second claim: "is being written by run A",
    /// a line break, then the escape that clears the terminal.
    #[test]
    fn a_holder_with_a_control_character_is_quoted_escaped() {
        let dir = crate::test_util::scratch("claim", "odd");
        let out = dir.join("out.json");
        let claim = FileClaim::take(&out, "run A\n\u{1b}[2Jrun B").unwrap();
        let e = FileClaim::take(&out, "x").unwrap_err().to_string();
        assert!(!e.chars().any(char::is_control), "{e:?}");
        assert!(e.contains("by \"run A\\n\\u{1b}[2Jrun B\";"), "{e}");
        drop(claim);
    }

    /// A file claimed as an output that is a lock a running process holds (a
    /// run directory's `run.lock`) is refused: written over, the next run took
    /// the directory while its run still ran. Free again, it is claimed.
    #[test]
    fn a_lock_file_a_running_process_holds_is_not_claimed_as_an_output() {
        let dir = crate::test_util::scratch("claim", "lock");
        let lock = dir.join(super::super::LOCK);
        let held = try_lock_file(&lock).unwrap().unwrap();
        let e = FileClaim::take(&lock, "a trace").unwrap_err();
        assert!(matches!(e, Error::LockFile { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("lock file that a running process holds"),
            "{e}"
        );
        drop(held);
        drop(FileClaim::take(&lock, "a trace").unwrap());
    }
}
