//! Who holds a lock file, looked at without taking it: what a run directory's
//! claim ([`crate::rundir`]) and the atomic replacement of a finished file
//! ([`crate::atomic::rename_over`]) both ask.

use std::fs::File;
use std::io::Read;
use std::path::Path;

/// The lock file `path` opened for reading: not through a link, without
/// blocking (a FIFO), and only where it is a regular file.
fn open_regular(path: &Path) -> Option<File> {
    use rustix::fs::{FileType, Mode, OFlags};
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = rustix::fs::open(path, flags, Mode::empty()).ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    (FileType::from_raw_mode(st.st_mode) == FileType::RegularFile).then(|| File::from(fd))
}

/// Who holds the lock file `lock` (a run directory's, a checkpoint
/// directory's, a [`crate::rundir::FileClaim`]'s), as
/// [`crate::rundir::try_lock_file`]'s holder wrote it, when a running process
/// holds it; `None` when it is free, missing or no regular file. It only looks:
/// nothing is made, and no lock is kept.
pub fn lock_holder(lock: &Path) -> Option<String> {
    let f = open_regular(lock)?;
    let held = matches!(
        rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockShared),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK
    );
    held.then(|| holder_in(lock))
}

/// Who holds the lock file `lock`, as it says (at most 300 characters; quoted
/// and escaped where it holds a control character).
pub(crate) fn holder_in(lock: &Path) -> String {
    let mut text = String::new();
    if let Some(f) = open_regular(lock) {
        let _ = f.take(4096).read_to_string(&mut text);
    }
    let text = text.trim();
    if text.is_empty() {
        "another run".into()
    } else {
        // A lock file is anyone's to write: a line break or a terminal's
        // escape in it broke the refusal's line or cleared the terminal.
        crate::message::said(&text.chars().take(300).collect::<String>()).into_owned()
    }
}
