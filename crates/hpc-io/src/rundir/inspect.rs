//! Readers of a run directory: whether its run is alive ([`inspect`]) and whether
//! a file in it can be trusted ([`check_file`]).

use std::fs;
use std::path::Path;

use super::error::{io, Error, Result};
use super::manifest::{open_own, read_manifest, Manifest, Status};
use super::{LOCK, MANIFEST};
use crate::message::said;

/// Whether the run that wrote a manifest is still there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// A process holds the lock: the run is in progress.
    Running,
    /// The run finished (completely or not).
    Finished,
    /// The manifest says `running` but nobody holds the lock: the run was killed.
    Abandoned,
}

/// A run directory's manifest as a reader finds it.
#[derive(Clone, Debug)]
pub struct Inspected {
    /// The manifest.
    pub manifest: Manifest,
    /// Whether its run is still there.
    pub liveness: Liveness,
}

/// Reads the manifest of `dir` (`None` when there is none) and finds out whether its
/// run is still in progress (by trying its lock, released at once).
pub fn inspect(dir: &Path) -> Result<Option<Inspected>> {
    let Some(manifest) = read_manifest(&dir.join(MANIFEST))? else {
        return Ok(None);
    };
    let liveness = match manifest.status {
        Status::Running => {
            let held = match open_own(&dir.join(LOCK), false) {
                Ok(Some((f, _))) => matches!(
                    rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockShared),
                    Err(e) if e == rustix::io::Errno::WOULDBLOCK
                ),
                _ => false,
            };
            if held {
                Liveness::Running
            } else {
                Liveness::Abandoned
            }
        }
        _ => Liveness::Finished,
    };
    Ok(Some(Inspected { manifest, liveness }))
}

/// Checks that the file at `path` can be trusted as a result: when its directory has
/// a manifest, the manifest must list it, its run must have completed, and its size
/// must be the listed one. A file in a directory without a manifest passes (it was
/// not written by a run directory); the caller decides whether to warn.
pub fn check_file(path: &Path) -> Result<()> {
    let untrusted = |reason: String| Error::Untrusted {
        path: path.to_path_buf(),
        reason,
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| untrusted("not a file name".into()))?;
    let Some(found) = inspect(dir)? else {
        return Ok(());
    };
    let m = &found.manifest;
    let Some(entry) = m.file(name) else {
        return Err(untrusted(format!(
            "not written by the run {} that {} describes (an older or foreign file)",
            said(&m.run_id),
            dir.join(MANIFEST).display()
        )));
    };
    match (&m.status, found.liveness) {
        (_, Liveness::Running) => {
            return Err(untrusted(format!(
                "the run {} (pid {} on {}) is still writing it",
                said(&m.run_id),
                m.pid,
                said(&m.host)
            )))
        }
        (_, Liveness::Abandoned) => {
            return Err(untrusted(format!(
                "the run {} that wrote it ended without finishing (killed, or it failed and \
                 could not mark its run.json: a full disk?)",
                said(&m.run_id)
            )))
        }
        (Status::Incomplete { reason, stopped_at }, _) => {
            return Err(untrusted(format!(
                "the run {} that wrote it is incomplete: {}{}",
                said(&m.run_id),
                said(reason),
                stopped_at
                    .as_ref()
                    .map(|s| format!(" (stopped at {})", said(s)))
                    .unwrap_or_default()
            )))
        }
        _ => {}
    }
    let size = fs::metadata(path).map_err(io("read", path))?.len();
    if entry.size.is_some_and(|s| s != size) {
        return Err(untrusted(format!(
            "{size} bytes, but its run's manifest says {} (changed since)",
            entry.size.unwrap_or(0)
        )));
    }
    Ok(())
}
