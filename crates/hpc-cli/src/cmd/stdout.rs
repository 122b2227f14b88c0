//! Standard output (and standard error) as `hpc` was given them, closed included.
//!
//! The Rust runtime opens `/dev/null` on a standard descriptor that is closed
//! when the program starts (before `main`), so that no file this process opens
//! later takes its number; and the standard library takes a write to a closed
//! standard output (`EBADF`) for a success. `hpc topo >&-` then exited 0 with
//! its output lost, and `hpc run -n 2 -- hpc selftest >&-` forwarded the ranks'
//! lines to that `/dev/null` (hostile pass 20). Once `main` runs, that
//! `/dev/null` cannot be told from one the user asked for (`>/dev/null`); so the
//! descriptor is looked at before the runtime's opening, from the executable's
//! initialisers (`.init_array`, run by the C library before `main`), and every
//! write to standard output ([`Stdout`]) fails with an error that says so. The
//! ranks' standard error that `hpc run` forwards ([`Stderr`]) likewise: its
//! message is lost with the stream, but the job's status (125) says it.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether descriptor 1 was closed when the process started.
static CLOSED_AT_START: AtomicBool = AtomicBool::new(false);

/// Whether descriptor 2 was closed when the process started.
static STDERR_CLOSED_AT_START: AtomicBool = AtomicBool::new(false);

/// Run by the C library before `main`, so before the Rust runtime opens
/// `/dev/null` in place of a closed standard descriptor.
#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static LOOK_BEFORE_MAIN: extern "C" fn() = look_at_stdout;

/// Notes whether descriptors 1 and 2 are open; nothing else (it runs before
/// the standard library is set up, so it uses none of it).
extern "C" fn look_at_stdout() {
    // SAFETY: `fcntl(F_GETFD)` on a descriptor number only asks the kernel
    // whether it is open; it reads and writes no memory of this process.
    let closed = |fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1;
    CLOSED_AT_START.store(closed(libc::STDOUT_FILENO), Ordering::Relaxed);
    STDERR_CLOSED_AT_START.store(closed(libc::STDERR_FILENO), Ordering::Relaxed);
}

/// Whether standard output was closed when `hpc` started (`hpc ... >&-`).
pub fn closed_at_start() -> bool {
    CLOSED_AT_START.load(Ordering::Relaxed)
}

/// The error every write to a standard output closed at the start gets.
pub fn closed_error() -> std::io::Error {
    std::io::Error::other(
        "standard output was closed when hpc started (>&-): what is written there would \
         be lost (give it a file, or /dev/null to throw it away)",
    )
}

/// Standard output, except that every write fails when it was closed when `hpc`
/// started ([`closed_at_start`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if closed_at_start() && !buf.is_empty() {
            return Err(closed_error());
        }
        std::io::stdout().write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        if closed_at_start() && !buf.is_empty() {
            return Err(closed_error());
        }
        std::io::stdout().lock().write_all(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().flush()
    }
}

/// Standard error, except that every write fails when it was closed when `hpc`
/// started (`2>&-`): for the ranks' lines `hpc run` forwards, lost there with
/// status 0 before.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if STDERR_CLOSED_AT_START.load(Ordering::Relaxed) && !buf.is_empty() {
            return Err(std::io::Error::other(
                "standard error was closed when hpc started (2>&-): what is written there \
                 would be lost (give it a file, or /dev/null to throw it away)",
            ));
        }
        std::io::stderr().write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}
