//! Files replaced atomically: a reader sees the old file or the new one, never a
//! part of the new one, and a crash does not lose the new one once the call returned.
//!
//! The file is written under a temporary name in the same directory (the caller
//! names it, so that it can recognise and clean up what an interrupted write left),
//! synced, and renamed over the final name; [`fn@write`] then syncs the directory so
//! that the rename itself survives a crash. On any error the temporary file is
//! removed and the final name is left as it was.
//!
//! ```
//! let dir = std::env::temp_dir().join(format!("hpc-io-atomic-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("result.json");
//! hpc_io::atomic::write(&path, &dir.join(".result.json.tmp"), b"{}\n").unwrap();
//! assert_eq!(std::fs::read(&path).unwrap(), b"{}\n");
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A step of a file operation that failed: what was being done and to which path.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op} {}: {error}", crate::message::path(path))]
pub struct StepError {
    /// What was being done (`create`, `write`, `sync`, `rename`, ...).
    pub op: &'static str,
    /// The file or directory.
    pub path: PathBuf,
    /// The operating system's error (in the message, so not also a `source`).
    pub error: std::io::Error,
}

impl StepError {
    /// The error of `op` on `path`, for `map_err`.
    pub fn of<'a>(
        op: &'static str,
        path: &'a Path,
    ) -> impl FnOnce(std::io::Error) -> StepError + 'a {
        move |error| StepError {
            op,
            path: path.to_path_buf(),
            error,
        }
    }
}

/// Writes `path` through the temporary file `tmp` (in the same directory as `path`):
/// `fill` writes the contents into the new, empty `tmp` (given the permission
/// bits of the regular file at `path`, when there is one); then it is synced and
/// renamed over `path`. A `path` that exists as something other than a regular
/// file or a symbolic link is refused first, before `tmp` is created
/// ([`check_replaceable`]). On an error of any step (`fill`'s included) `tmp` is
/// removed (unless another writer's is there now). A `tmp` removed or replaced
/// while `fill` wrote is not renamed: an error ([`still_at`]). The rename is
/// durable once the directory is synced ([`sync_dir`]),
/// which this function leaves to the caller, so that many files of one directory
/// cost one directory sync.
pub fn replace_with<T, E: From<StepError>>(
    path: &Path,
    tmp: &Path,
    fill: impl FnOnce(&mut File) -> Result<T, E>,
) -> Result<T, E> {
    // A final name that cannot be replaced is refused before the temporary file is
    // made beside it (`/dev/null` would otherwise have its temporary in `/dev`).
    check_replaceable(path)?;
    let mut made: Option<File> = None;
    // A `fill` that panics (the caller's code) unwinds past the clean-up
    // below: the temporary it half wrote was left beside the output.
    let unwinding = RemoveOnUnwind {
        tmp,
        made: std::cell::Cell::new(None),
    };
    let result = (|| {
        let f = made.insert(create_fresh(tmp)?);
        unwinding.made.set(identity(f));
        let value = fill(f)?;
        f.sync_all().map_err(StepError::of("sync", tmp))?;
        // Another writer of the same temporary name (two threads of one
        // process writing one checkpoint file) removed this one and made its
        // own: renaming the name published the other's bytes, half written,
        // under this write's `Ok` (and this write's size and checksum).
        if !still_at(f, tmp) {
            return Err(StepError {
                op: "rename",
                path: tmp.to_path_buf(),
                error: std::io::Error::other(
                    "it is no longer the file written here (removed or replaced while it \
                     was written: another writer of the same name?); nothing renamed",
                ),
            }
            .into());
        }
        rename_over(tmp, path)?;
        Ok(value)
    })();
    // The temporary is removed on an error only where it is still this
    // write's (another writer's is left to it).
    if result.is_err() && made.as_ref().is_none_or(|f| still_at(f, tmp)) {
        let _ = fs::remove_file(tmp);
    }
    drop(unwinding);
    result
}

/// A file's device and inode.
fn identity(f: &File) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    f.metadata().ok().map(|m| (m.dev(), m.ino()))
}

/// Removes the temporary file [`replace_with`] made when its `fill` panics,
/// where the name is still that file (another writer's is left to it).
struct RemoveOnUnwind<'a> {
    tmp: &'a Path,
    made: std::cell::Cell<Option<(u64, u64)>>,
}

impl Drop for RemoveOnUnwind<'_> {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt as _;
        let Some(made) = self.made.get().filter(|_| std::thread::panicking()) else {
            return;
        };
        if fs::symlink_metadata(self.tmp).is_ok_and(|m| (m.dev(), m.ino()) == made) {
            let _ = fs::remove_file(self.tmp);
        }
    }
}

/// Creates `path` as a new, empty file for writing (`O_EXCL`, so never through a
/// symbolic link planted at its name, and never opening a FIFO there, which would
/// block for ever). Whatever is at that name (a file an interrupted write left, a
/// link or a FIFO put there) is removed first, never followed: for a name that is
/// the caller's own (a temporary file, a run's `.partial` file). A directory there
/// is an error.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("hpc-io-fresh-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// std::fs::write(dir.join("victim"), b"keep").unwrap();
/// std::os::unix::fs::symlink(dir.join("victim"), dir.join("out.partial")).unwrap();
/// let mut f = hpc_io::atomic::create_fresh(&dir.join("out.partial")).unwrap();
/// std::io::Write::write_all(&mut f, b"new").unwrap();
/// assert_eq!(std::fs::read(dir.join("victim")).unwrap(), b"keep");
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn create_fresh(path: &Path) -> Result<File, StepError> {
    let new = || {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
    };
    match new() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            fs::remove_file(path).map_err(StepError::of("remove the earlier", path))?;
            new()
        }
        r => r,
    }
    .map_err(StepError::of("create", path))
}

/// Renames `tmp` over `path`, refusing (with `tmp` left for the caller to remove)
/// when `path` exists and is not a regular file or a symbolic link: a rename
/// would replace a device (`--trace /dev/full` made `/dev/full` a plain file), a
/// FIFO or a socket by the new file; and when it is a lock file that a running
/// process holds (a run directory's `run.lock` taken after the name was
/// claimed: the next run would take that run's directory).
///
/// ```
/// let dir = std::env::temp_dir().join(format!("hpc-io-rename-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// std::fs::write(dir.join("new"), b"x").unwrap();
/// let err = hpc_io::atomic::rename_over(&dir.join("new"), std::path::Path::new("/dev/null"))
///     .unwrap_err();
/// assert_eq!(err.to_string(), "cannot replace /dev/null: it is a character device, not a regular file");
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
///
/// The new file takes the permission bits of the regular file it replaces
/// (of a link's target), and the owner and group of a file there (not of a
/// link's target) where this process may give them (as root): a private file
/// (0600) replaced came back readable by everyone (0644, the umask's), an
/// executable lost its `x`. Set-id bits are never copied onto new contents.
pub fn rename_over(tmp: &Path, path: &Path) -> Result<(), StepError> {
    check_replaceable(path)?;
    keep_mode(tmp, path, None)?;
    fs::rename(tmp, path).map_err(StepError::of("rename", path))
}

/// [`rename_over`], the new file given the permission bits `mode` (not the
/// replaced file's) before the rename: a script that must be executable
/// whatever the file it replaces was (a mode set by the path after the
/// rename reached whatever was put at the name meanwhile). The owner is
/// kept as `rename_over` keeps it.
pub fn rename_over_with_mode(tmp: &Path, path: &Path, mode: u32) -> Result<(), StepError> {
    check_replaceable(path)?;
    keep_mode(tmp, path, Some(mode & 0o777))?;
    fs::rename(tmp, path).map_err(StepError::of("rename", path))
}

/// Gives `tmp` the permission bits `mode`, or, where it is `None`, those of
/// the regular file `path` names, if it names one (through a link), and,
/// where this process may, the owner and group of a regular file at `path`
/// itself. `tmp` is opened without following a link and changed through its
/// descriptor (`/proc/self/fd`), so that nothing planted at its name is
/// changed.
fn keep_mode(tmp: &Path, path: &Path, mode: Option<u32>) -> Result<(), StepError> {
    use rustix::fs::{Gid, Mode, OFlags, Uid};
    use std::os::unix::fs::MetadataExt as _;
    let old = fs::metadata(path).ok().filter(fs::Metadata::is_file);
    if old.is_none() && mode.is_none() {
        return Ok(());
    }
    let err = |op| StepError::of(op, tmp);
    let fd = rustix::fs::open(
        tmp,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| err("open")(e.into()))?;
    let new = rustix::fs::fstat(&fd).map_err(|e| err("stat")(e.into()))?;
    if rustix::fs::FileType::from_raw_mode(new.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(err("open")(std::io::Error::other(
            "it is not a regular file (replaced while it was written?); nothing renamed",
        )));
    }
    // Through the descriptor's name in /proc (an `O_PATH` descriptor has no
    // fchmod); where /proc is missing, through the name just checked.
    let proc = PathBuf::from(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&fd)
    ));
    let by = if proc.exists() { proc.as_path() } else { tmp };
    // The owner only of a file at the name itself, never a link's target's:
    // a link planted to another user's file would give them the output.
    let own = fs::symlink_metadata(path).is_ok_and(|m| m.is_file());
    if let Some(old) = old.as_ref().filter(|_| own) {
        if (new.st_uid, new.st_gid) != (old.uid(), old.gid()) {
            // Only root may give a file to another user: otherwise the new
            // file is this process's, as a file it writes is.
            let _ = rustix::fs::chown(
                by,
                Some(Uid::from_raw(old.uid())),
                Some(Gid::from_raw(old.gid())),
            );
        }
    }
    let Some(bits) = mode.or_else(|| old.map(|o| o.mode() & 0o777)) else {
        return Ok(());
    };
    if new.st_mode & 0o7777 != bits {
        rustix::fs::chmod(by, Mode::from_raw_mode(bits))
            .map_err(|e| err("set the mode of")(e.into()))?;
    }
    Ok(())
}

/// Whether `path` still names `file` (the same device and inode, not
/// following a link): a temporary a writer holds open may have been removed
/// or replaced by another's while it wrote, and renaming the name then
/// publishes what is there, not what was written.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("hpc-io-still-at-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let part = dir.join("out.part");
/// let file = std::fs::File::create(&part).unwrap();
/// assert!(hpc_io::atomic::still_at(&file, &part));
/// std::fs::remove_file(&part).unwrap();
/// std::fs::write(&part, b"another's").unwrap();
/// assert!(!hpc_io::atomic::still_at(&file, &part));
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn still_at(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (file.metadata(), fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => false,
    }
}

/// Refuses `path` as the final name of a file written whole when it exists and is
/// not a regular file or a symbolic link, when it is a link to something that is
/// not a regular file (`/dev/stdout`'s pipe, a FIFO, a folder), when it is in
/// `/dev`, `/proc` or `/sys`, and when it is a lock file that a running process
/// holds (a run directory's `run.lock`) ([`rename_over`]'s check), so that a
/// program can refuse such a name before its work rather than after.
pub fn check_replaceable(path: &Path) -> Result<(), StepError> {
    use std::os::unix::ffi::OsStrExt as _;
    // `out/` or `out/.` names a directory, even one not made yet (`Path` drops the
    // trailing separator, so `file_name` would take it for the file `out`).
    let text = path.as_os_str().as_bytes();
    let dir_only = [&b"/"[..], b"/.", b"/.."].iter().any(|t| text.ends_with(t))
        || text == b"."
        || text == b"..";
    if dir_only {
        return Err(StepError {
            op: "replace",
            path: path.to_path_buf(),
            error: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "it names a directory (it ends with /, . or ..), not a file",
            ),
        });
    }
    let refuse = |why: String| StepError {
        op: "replace",
        path: path.to_path_buf(),
        error: std::io::Error::new(std::io::ErrorKind::InvalidInput, why),
    };
    if let Ok(m) = fs::symlink_metadata(path) {
        let t = m.file_type();
        if t.is_symlink() {
            // A link to a device, a FIFO, a socket or a folder names something the
            // new file would not be written to: refused as that thing itself is.
            if let Ok(target) = fs::metadata(path) {
                if !target.is_file() {
                    return Err(refuse(format!(
                        "it is a symbolic link to {}, not to a regular file",
                        crate::read::kind_of_meta(&target)
                    )));
                }
            }
        }
        if !t.is_file() && !t.is_symlink() {
            return Err(refuse(format!(
                "it is {}, not a regular file",
                crate::read::kind_of_meta(&m)
            )));
        }
        // A lock file that a running process holds (a run directory's
        // `run.lock`, taken by a run after this program's claim of the name):
        // replaced, the next run took that run's directory while it still ran.
        // Checked again here, at the rename, not only when the name was claimed.
        if t.is_file() {
            if let Some(holder) = crate::lockfile::lock_holder(path) {
                return Err(refuse(format!(
                    "it is a lock file that a running process holds ({holder}): replacing \
                     it would let a second run into what that process owns; choose another file"
                )));
            }
        }
    }
    // The folders of devices and of processes: `/dev/stdout` is a link there
    // (to `/proc/self/fd/1`), which the rename replaced by a regular file for
    // every program of the machine (as root).
    let dir = fs::canonicalize(parent(path)).unwrap_or_else(|_| parent(path).to_path_buf());
    if dir == Path::new("/dev") || dir.starts_with("/proc") || dir.starts_with("/sys") {
        return Err(refuse(format!(
            "it is in {}, a folder of the system's devices and processes, whose files are \
             not replaced (write to a file elsewhere)",
            dir.display()
        )));
    }
    Ok(())
}

/// Writes `bytes` to `path` through `tmp` ([`replace_with`]), then syncs the
/// directory of `path`.
pub fn write(path: &Path, tmp: &Path, bytes: &[u8]) -> Result<(), StepError> {
    replace_with(path, tmp, |f| {
        f.write_all(bytes).map_err(StepError::of("write", tmp))
    })?;
    sync_dir(parent(path))
}

/// Syncs the directory `dir`, so that the renames and removals in it survive a
/// crash.
pub fn sync_dir(dir: &Path) -> Result<(), StepError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(StepError::of("sync the directory", dir))
}

/// The directory `path` is in (`.` for a bare file name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt as _;

    /// `-o /dev/stdout`: the link `/dev/stdout` was replaced by a regular file
    /// holding the output, for every program of the machine (as root). A link to
    /// what is no regular file, and a name in `/dev` or `/proc`, are refused; a
    /// link to a regular file, or to nothing, is still replaced, its target kept.
    /// `hpc run --trace W/run.lock`, W's run started after the claim (no run held
    /// it then): the finished trace replaced the lock that run held, and a third
    /// run took W while the second still wrote into it. A lock file a running
    /// process holds is refused at the rename; free again, it is replaced.
    #[test]
    fn a_lock_file_taken_after_the_claim_is_not_renamed_over() {
        let dir = scratch("held");
        let lock = dir.join("run.lock");
        // Held as a run holds its `run.lock`: an exclusive flock.
        let lock_now = |path: &Path| {
            let f = fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(path)
                .unwrap();
            rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive)
                .is_ok()
                .then_some(f)
        };
        let held = lock_now(&lock).unwrap();
        let tmp = dir.join(".trace.tmp");
        fs::write(&tmp, b"{}").unwrap();
        let e = rename_over(&tmp, &lock).unwrap_err().to_string();
        assert!(
            e.contains("run.lock: it is a lock file that a running process holds"),
            "{e}"
        );
        assert!(tmp.exists(), "the new file is left for the caller");
        let still = lock_now(&lock);
        assert!(still.is_none(), "the held lock file was replaced");
        drop(held);
        rename_over(&tmp, &lock).unwrap();
        assert_eq!(fs::read(&lock).unwrap(), b"{}");
    }

    /// A user's file replaced by a new one (a `-o` output, a run's result, a
    /// checkpoint) came back with the mode the process's umask gives: a
    /// private file (0600) became readable by everyone (0644), an
    /// executable lost its `x`. The new file takes the permission bits of
    /// the one it replaces (of a link's target, for a link to a regular file),
    /// never its set-id bits; a new name keeps the umask's.
    #[test]
    fn a_replaced_file_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = scratch("mode");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        for (old, kept) in [
            (0o600, 0o600),
            (0o640, 0o640),
            (0o755, 0o755),
            (0o4755, 0o755),
        ] {
            let path = d.join("out.json");
            fs::write(&path, "old").unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(old)).unwrap();
            write(&path, &d.join(".out.json.tmp"), b"new").unwrap();
            assert_eq!(fs::read(&path).unwrap(), b"new");
            assert_eq!(mode(&path), kept, "{old:o}");
            fs::remove_file(&path).unwrap();
        }
        // Through `replace_with` and `rename_over` alike, and of a link's target.
        fs::write(d.join("target"), "old").unwrap();
        fs::set_permissions(d.join("target"), fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(d.join("target"), d.join("link")).unwrap();
        fs::write(d.join(".tmp"), "new").unwrap();
        fs::set_permissions(d.join(".tmp"), fs::Permissions::from_mode(0o666)).unwrap();
        rename_over(&d.join(".tmp"), &d.join("link")).unwrap();
        assert_eq!(mode(&d.join("link")), 0o600);
        assert_eq!(fs::read(d.join("target")).unwrap(), b"old");
        // A new name: the mode the file was made with.
        fs::write(d.join(".tmp"), "new").unwrap();
        fs::set_permissions(d.join(".tmp"), fs::Permissions::from_mode(0o640)).unwrap();
        rename_over(&d.join(".tmp"), &d.join("fresh")).unwrap();
        assert_eq!(mode(&d.join("fresh")), 0o640);
        // As root: a user's file replaced stays the user's; a link to another
        // user's file does not give that user the new file.
        if rustix::process::geteuid().is_root() {
            use std::os::unix::fs::MetadataExt as _;
            let nobody = (65534, 65534);
            let give = |p: &Path| {
                rustix::fs::chown(
                    p,
                    Some(rustix::fs::Uid::from_raw(nobody.0)),
                    Some(rustix::fs::Gid::from_raw(nobody.1)),
                )
                .unwrap()
            };
            let owner = |p: &Path| {
                let m = fs::symlink_metadata(p).unwrap();
                (m.uid(), m.gid())
            };
            fs::write(d.join("theirs"), "old").unwrap();
            give(&d.join("theirs"));
            write(&d.join("theirs"), &d.join(".tmp"), b"new").unwrap();
            assert_eq!(owner(&d.join("theirs")), nobody);
            give(&d.join("target"));
            fs::remove_file(d.join("link")).unwrap();
            std::os::unix::fs::symlink(d.join("target"), d.join("link")).unwrap();
            write(&d.join("link"), &d.join(".tmp"), b"new").unwrap();
            assert_eq!(owner(&d.join("link")), (0, 0));
            assert_eq!(mode(&d.join("link")), 0o600);
        }
    }

    /// A mode asked for (a script that must be executable) is given whatever
    /// the replaced file's was, before the rename; the owner is kept as
    /// `rename_over` keeps it; a new name takes it too.
    #[test]
    fn a_mode_asked_for_is_given_over_the_replaced_files() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = scratch("with-mode");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let path = d.join("init.sh");
        fs::write(&path, "old").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        for target in [&path, &d.join("fresh.sh")] {
            fs::write(d.join(".tmp"), "new").unwrap();
            rename_over_with_mode(&d.join(".tmp"), target, 0o4755).unwrap();
            assert_eq!(mode(target), 0o755, "{}", target.display());
            assert_eq!(fs::read(target).unwrap(), b"new");
        }
    }

    /// A `fill` that panics (a payload's reader, a serialiser: the caller's
    /// code) left the temporary file beside the output, half written, for
    /// good: the clean-up ran on an error only. It is removed as the panic
    /// unwinds, and the old file is kept.
    #[test]
    fn a_fill_that_panics_leaves_no_temporary() {
        let d = scratch("panic");
        let (path, tmp) = (d.join("a"), d.join(".a.tmp"));
        fs::write(&path, "old").unwrap();
        let r = std::panic::catch_unwind(|| {
            let _ = replace_with(&path, &tmp, |f| -> Result<(), StepError> {
                f.write_all(b"half").unwrap();
                panic!("the caller's fill failed");
            });
        });
        assert!(r.is_err());
        assert!(!tmp.exists(), "the temporary file was left");
        assert_eq!(fs::read_to_string(&path).unwrap(), "old");
    }

    #[test]
    fn a_link_to_a_stream_or_a_name_among_the_devices_is_never_replaced() {
        for p in ["/dev/stdout", "/dev/stderr", "/dev/fd/1", "/proc/self/fd/1"] {
            let e = check_replaceable(Path::new(p)).unwrap_err().to_string();
            assert!(e.starts_with(&format!("cannot replace {p}: it is")), "{e}");
        }
        let dir = scratch("linked");
        let link = dir.join("out.json");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        let e = check_replaceable(&link).unwrap_err().to_string();
        assert!(e.contains("a symbolic link to a character device"), "{e}");
        fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = check_replaceable(&link).unwrap_err().to_string();
        assert!(e.contains("a symbolic link to a directory"), "{e}");
        fs::remove_file(&link).unwrap();
        fs::write(dir.join("victim"), b"keep").unwrap();
        std::os::unix::fs::symlink(dir.join("victim"), &link).unwrap();
        write(&link, &dir.join(".out.tmp"), b"new").unwrap();
        assert_eq!(fs::read(dir.join("victim")).unwrap(), b"keep");
        assert_eq!(fs::read(&link).unwrap(), b"new");
    }

    #[test]
    fn a_device_a_fifo_or_a_directory_is_never_replaced() {
        let dir = scratch("rename-over");
        fs::create_dir_all(dir.join("sub")).unwrap();
        let fifo = dir.join("fifo");
        crate::test_util::mkfifo(&fifo);
        for (target, kind) in [
            (Path::new("/dev/null").to_path_buf(), "a character device"),
            (fifo.clone(), "a FIFO"),
            (dir.join("sub"), "a directory"),
        ] {
            let tmp = dir.join(".new.tmp");
            let err = write(&target, &tmp, b"data").unwrap_err().to_string();
            assert!(
                err.contains(&format!("it is {kind}, not a regular file")),
                "{err}"
            );
            assert!(!tmp.exists(), "the temporary file is removed");
        }
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
        assert!(fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device());
        // A regular file is replaced as before.
        write(&dir.join("f"), &dir.join(".f.tmp"), b"1").unwrap();
        write(&dir.join("f"), &dir.join(".f.tmp"), b"2").unwrap();
        assert_eq!(fs::read(dir.join("f")).unwrap(), b"2");
    }

    /// The final name is checked before the temporary file is made: nothing is
    /// created beside a device (`/dev/null`'s temporary would be in `/dev`) and the
    /// contents are never computed for a name that would be refused.
    #[test]
    fn a_final_name_that_cannot_be_replaced_is_refused_before_the_temporary() {
        let dir = scratch("before-tmp");
        fs::create_dir_all(dir.join("sub")).unwrap();
        let tmp = dir.join(".sub.tmp");
        let mut filled = false;
        let err = replace_with(&dir.join("sub"), &tmp, |_f| -> Result<(), StepError> {
            filled = true;
            Ok(())
        })
        .unwrap_err();
        assert_eq!(err.op, "replace", "{err}");
        assert!(!filled, "the contents were written for a refused name");
        assert!(!tmp.exists());
    }

    /// A symbolic link or a FIFO planted at the temporary name is neither written
    /// through nor opened (a FIFO would block the write for ever): it is removed
    /// and the file written as usual.
    #[test]
    fn a_link_or_fifo_at_the_temporary_name_is_not_followed() {
        let d = scratch("planted");
        let victim = d.join("victim");
        fs::write(&victim, "precious").unwrap();
        let (path, tmp) = (d.join("out.json"), d.join(".out.json.tmp"));
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        write(&path, &tmp, b"new").unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(fs::read_to_string(&path).unwrap(), "new");
        crate::test_util::mkfifo(&tmp);
        write(&path, &tmp, b"newer").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "newer");
        assert!(!tmp.exists());
    }

    /// `out/` (or `out/.`) names a directory, even one that does not exist yet:
    /// refused before any work, not written as the file `out` (or failed after it).
    #[test]
    fn a_name_ending_as_a_directory_is_refused() {
        let d = scratch("slash");
        for name in ["new/", "new/.", "new/..", "."] {
            let p = if name == "." {
                PathBuf::from(".")
            } else {
                PathBuf::from(format!("{}/{name}", d.display()))
            };
            let e = check_replaceable(&p).unwrap_err().to_string();
            assert!(e.contains("names a directory"), "{name}: {e}");
        }
        assert!(!d.join("new").exists());
        check_replaceable(&d.join("a..b")).unwrap();
        check_replaceable(&d.join("new")).unwrap();
    }

    fn scratch(tag: &str) -> crate::test_util::TmpDir {
        crate::test_util::scratch("atomic", tag)
    }

    #[test]
    fn write_replaces_the_file_and_leaves_no_temporary() {
        let d = scratch("replace");
        let (path, tmp) = (d.join("a.json"), d.join("a.json.tmp1"));
        fs::write(&path, "old").unwrap();
        write(&path, &tmp, b"new").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new");
        assert!(!tmp.exists());
    }

    #[test]
    fn a_failed_fill_keeps_the_old_file_and_removes_the_temporary() {
        #[derive(Debug)]
        enum E {
            Step,
            Mine,
        }
        impl From<StepError> for E {
            fn from(_: StepError) -> E {
                E::Step
            }
        }
        let d = scratch("fill");
        let (path, tmp) = (d.join("a"), d.join(".a.tmp"));
        fs::write(&path, "old").unwrap();
        let r = replace_with(&path, &tmp, |f| {
            f.write_all(b"half").unwrap();
            Err::<(), E>(E::Mine)
        });
        assert!(matches!(r, Err(E::Mine)), "{r:?}");
        assert_eq!(fs::read_to_string(&path).unwrap(), "old");
        assert!(!tmp.exists(), "the temporary file was left");
    }

    #[test]
    fn a_failed_step_names_it_and_the_path() {
        let d = scratch("step");
        let missing = d.join("no-such-dir");
        let e = write(&missing.join("a"), &missing.join("a.tmp"), b"x").unwrap_err();
        assert_eq!(e.op, "create");
        assert_eq!(e.path, missing.join("a.tmp"));
        assert!(e.to_string().starts_with("cannot create "), "{e}");
        // A directory where the file should be: refused, the temporary goes.
        fs::create_dir(d.join("taken")).unwrap();
        fs::write(d.join("taken/x"), "").unwrap();
        let tmp = d.join("taken.tmp");
        let e = write(&d.join("taken"), &tmp, b"x").unwrap_err();
        assert_eq!(e.op, "replace", "{e}");
        assert!(!tmp.exists());
    }
}
