//! The manifests of this process's started runs, kept so that a thread that must
//! end the process at once (a signal outside a run's loop, a loop blocked past its
//! grace: `hpc_spiking::stop`) can mark them incomplete first
//! ([`mark_incomplete_before_exit`]) instead of leaving them "running".
//!
//! A directory locked and not started yet ([`RunDir::lock`](super::RunDir::lock),
//! a run that is still checking its input or building) is noted too: nothing of
//! it was changed, but its lock file names the run as its holder, which goes
//! with the lock as at the run's end (and a directory its lock made goes too).
//!
//! Every manifest write of a [`RunDir`](super::RunDir) holds [`STARTED`]'s lock,
//! so the two never write one `run.json` at once, and once marked, the lock stays
//! held: no later write of this process replaces the mark.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::manifest::{now_ms, open_own, Manifest};
use super::{write_replace, Status, LOCK, MANIFEST};

/// A run of this process that holds its directory's lock: its id in this
/// process, its directory, its manifest as last written (`None`: locked, not
/// started yet) and whether its `lock` made the directory (removed again
/// when the run ends before it starts).
type Started = (u64, PathBuf, Option<Manifest>, bool);

/// The locked, unfinished runs of this process.
static STARTED: Mutex<Vec<Started>> = Mutex::new(Vec::new());

/// The next run's id in this process.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A new id for a run of this process.
pub(super) fn next_id() -> u64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The list of started runs, locked (held while a manifest is written).
pub(super) fn hold() -> MutexGuard<'static, Vec<Started>> {
    STARTED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Notes the manifest `m` of the run `id` in `dir` as last written (`finished`:
/// the run has ended, and is no longer noted).
pub(super) fn note(held: &mut Vec<Started>, id: u64, dir: &Path, m: &Manifest, finished: bool) {
    held.retain(|(i, _, _, _)| *i != id);
    if !finished {
        held.push((id, dir.to_path_buf(), Some(m.clone()), false));
    }
}

/// Notes the run `id` as holding the lock of `dir`, not started yet (`locked`
/// false: it let the lock go without starting, and is no longer noted;
/// `made`: its `lock` made `dir`).
pub(super) fn note_locked(id: u64, dir: &Path, locked: bool, made: bool) {
    let mut held = hold();
    held.retain(|(i, _, _, _)| *i != id);
    if locked {
        held.push((id, dir.to_path_buf(), None, made));
    }
}

/// Removes the lock file of the run directory `dir` and `dir` itself when
/// nothing else is in it: a directory a run's `lock` made, which the run
/// leaves before it starts (its input refused, a signal while it builds);
/// it left a folder holding only an empty `run.lock`.
pub(super) fn remove_made(dir: &Path) {
    let _ = std::fs::remove_file(dir.join(LOCK));
    let _ = std::fs::remove_dir(dir);
}

/// Marks every started, unfinished run of this process incomplete with `reason`
/// (its files listed with their sizes, as `RunDir::finish` lists them) and gives
/// each manifest's path with the outcome of its write; a directory only locked
/// (not started: nothing of it was changed) keeps its files and manifest and is
/// not listed, and every lock file's holder text is cleared. **For a process
/// about to end**: the lock on the runs' manifests stays held, so any later
/// manifest write of this process waits for ever (none may replace the mark).
pub fn mark_incomplete_before_exit(reason: &str) -> Vec<(PathBuf, super::Result<()>)> {
    let mut held = hold();
    let mut done = Vec::new();
    for (_, dir, m, made) in held.iter_mut() {
        let Some(m) = m else {
            // Locked, not started: only the holder's name goes, as when such a
            // run is dropped (a signal in the network's build left it), and the
            // directory when its lock made it.
            clear_holder(dir);
            if *made {
                remove_made(dir);
            }
            continue;
        };
        m.files
            .retain_mut(|f| match std::fs::symlink_metadata(dir.join(&f.name)) {
                Ok(meta) if !meta.is_dir() => {
                    f.size = Some(meta.len());
                    true
                }
                _ => false,
            });
        m.status = Status::Incomplete {
            reason: reason.into(),
            stopped_at: None,
        };
        m.finished_unix_ms = Some(now_ms());
        let outcome = match serde_json::to_vec_pretty(&*m) {
            Ok(mut text) => {
                text.push(b'\n');
                write_replace(dir, MANIFEST, &text)
            }
            Err(e) => Err(super::Error::Manifest {
                path: dir.join(MANIFEST),
                reason: e.to_string(),
            }),
        };
        // The holder's name goes with the lock (as `RunDir::finish` does), so
        // that it never names a run that has ended.
        clear_holder(dir);
        done.push((dir.join(MANIFEST), outcome));
    }
    held.clear();
    std::mem::forget(held);
    done
}

/// Empties the lock file of the run directory `dir` (the holder's name).
fn clear_holder(dir: &Path) {
    if let Ok(Some((lock, _))) = open_own(&dir.join(LOCK), true) {
        let _ = lock.set_len(0);
    }
}
