//! Files written whole and renamed into place ([`replace_file`]).

use std::ffi::OsString;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// How many temporary names are tried before giving up.
const TMP_NAMES: u32 = 64;

/// Writes `bytes` to `path`, replacing what is there, without following a symlink:
/// the text goes into a new file beside it, which is then renamed over `path` (a
/// symlink at `path` is replaced, its target untouched). A directory at `path` is
/// an error; a failure removes the temporary file this call made, never one it
/// did not.
///
/// The bytes are written into a file without a name (`O_TMPFILE`) that is given
/// its temporary name (`.NAME.tmp-PID`, made new: a name already taken is left as
/// it is and the next one tried) only once it is whole and synced, just before
/// the rename: a process killed while it writes (`hpc man -o DIR`, `hpc trace
/// merge` of a large trace, stopped) leaves nothing behind. Where the file system
/// has no such files, the temporary is named from the start, as before.
///
/// A regular file at `path` keeps its permission bits (not its set-id bits):
/// the new file is given them before it has its name.
pub fn replace_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    replace(path, bytes, None)
}

/// [`replace_file`], the new file given `mode` before it is renamed into place
/// (set on the open file: never on whatever `path` names by then).
pub fn replace_file_with_mode(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    replace(path, bytes, Some(mode))
}

fn replace(path: &Path, bytes: &[u8], mode: Option<u32>) -> anyhow::Result<()> {
    // A regular file replaced keeps its permission bits, by the rename
    // (`hpc_io::atomic::rename_over`; hostile pass 21: a trace or page made
    // private, 0600, came back 0644 for everyone to read).
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .with_context(|| format!("{} names no file", hpc_io::message::path(path)))?;
    let tmp_of = |n: u32| {
        let mut tmp_name = OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        if n > 0 {
            tmp_name.push(format!("-{n}"));
        }
        dir.join(tmp_name)
    };
    // `shown`: the temporary's name, or `None` while it has none.
    let fill = |f: &mut File, shown: Option<&Path>| -> anyhow::Result<()> {
        f.write_all(bytes)
            .and_then(|()| f.sync_all())
            .with_context(|| {
                // The output named, not only its hidden temporary (hostile
                // pass 20: "writing ./.big.json.tmp-PID: File too large").
                match shown {
                    Some(tmp) => format!(
                        "writing {} (through its temporary {})",
                        hpc_io::message::path(path),
                        hpc_io::message::path(tmp)
                    ),
                    None => format!(
                        "writing {} (through a temporary file without a name in its folder)",
                        hpc_io::message::path(path)
                    ),
                }
            })
    };
    // Hostile pass 20: the temporary, named from the start, was left
    // (`.NAME.tmp-PID`, part written) by a process killed while it wrote.
    let (tmp, f) = match unnamed_in(dir) {
        Some(mut f) => {
            fill(&mut f, None)?;
            match link_unnamed(&f, &tmp_of) {
                Ok(tmp) => (tmp, f),
                // No `/proc` to name it by: written again, under a name.
                Err(_) => named(&tmp_of, path, &fill)?,
            }
        }
        None => named(&tmp_of, path, &fill)?,
    };
    // Never over a directory, a device or a FIFO of that name.
    // The mode asked for, else the replaced file's (`rename_over`).
    let renamed = match mode {
        Some(m) => hpc_io::atomic::rename_over_with_mode(&tmp, path, m),
        None => hpc_io::atomic::rename_over(&tmp, path),
    };
    if renamed.is_err() && hpc_io::atomic::still_at(&f, &tmp) {
        let _ = std::fs::remove_file(&tmp);
    }
    Ok(renamed?)
}

/// A new file without a name in `dir` (`O_TMPFILE`), or `None` where the file
/// system (or the kernel) has none.
fn unnamed_in(dir: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o666)
        .open(dir)
        .ok()
}

/// Gives the unnamed file `f` the first free name of `tmp_of` (a name already
/// taken is left as it is); the name it was given.
fn link_unnamed(f: &File, tmp_of: &dyn Fn(u32) -> PathBuf) -> std::io::Result<PathBuf> {
    use std::os::unix::ffi::OsStrExt as _;
    use std::os::unix::io::AsRawFd as _;
    let from = std::ffi::CString::new(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .map_err(std::io::Error::other)?;
    let mut n = 0;
    loop {
        let tmp = tmp_of(n);
        let to =
            std::ffi::CString::new(tmp.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
        // SAFETY: both paths are NUL-terminated strings that outlive the call;
        // linkat reads them and nothing else of this process.
        let r = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                from.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if r == 0 {
            return Ok(tmp);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::AlreadyExists && n + 1 < TMP_NAMES {
            n += 1;
            continue;
        }
        return Err(e);
    }
}

/// The temporary named from the start (`create_new`, so nothing planted is
/// opened; a name already taken is left as it is and the next one tried),
/// filled by `fill`; removed again if that fails.
fn named(
    tmp_of: &dyn Fn(u32) -> PathBuf,
    path: &Path,
    fill: &dyn Fn(&mut File, Option<&Path>) -> anyhow::Result<()>,
) -> anyhow::Result<(PathBuf, File)> {
    // Hostile pass 20: a `.NAME.tmp-PID` already there (planted, or left by
    // another process of this id) was met with "File exists" and then removed
    // as if it were this call's own.
    let mut n = 0;
    let (tmp, mut f) = loop {
        let tmp = tmp_of(n);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n + 1 < TMP_NAMES => n += 1,
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "writing {}: creating its temporary {}",
                        hpc_io::message::path(path),
                        hpc_io::message::path(&tmp)
                    )
                })
            }
        }
    };
    if let Err(e) = fill(&mut f, Some(&tmp)) {
        if hpc_io::atomic::still_at(&f, &tmp) {
            let _ = std::fs::remove_file(&tmp);
        }
        return Err(e);
    }
    Ok((tmp, f))
}
