//! Writes whose failures are reported, not dropped.
//!
//! - [`stdout_line`] and [`flush_stdout`]: a program's result lines. A write that
//!   fails (`> /dev/full`, a full disk) is an error naming standard output; a reader
//!   that went away (`| head`, `EPIPE`) is not, and the lines after it are skipped.
//! - [`Latched`]: a writer for a library that drops write errors (one that writes
//!   from a thread of its own, or `unwrap`s them): it keeps the first error and
//!   reports success, so that the owner can ask [`ErrorLatch::check`] at the end and
//!   fail with the file's name.
//!
//! ```
//! use std::io::Write;
//! let (mut w, latch) = hpc_io::write::Latched::new(hpc_io::write::Failing, "trace.json");
//! w.write_all(b"[").unwrap(); // the library sees success
//! let err = latch.check().unwrap_err();
//! assert!(err.to_string().contains("trace.json"), "{err}");
//! ```

use std::io::{ErrorKind, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A write that failed, naming the file or stream.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {what}: {error}")]
pub struct WriteError {
    /// The file or stream (`standard output`, a path).
    pub what: String,
    /// The operating system's error (in the message, so not also a `source`).
    pub error: std::io::Error,
}

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

fn stdout_result(r: std::io::Result<()>) -> Result<(), WriteError> {
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        Err(error) => Err(WriteError {
            what: "standard output".into(),
            error,
        }),
    }
}

/// Writes one line to standard output. An error is returned when the write fails;
/// a closed pipe is not an error (nothing more is written to it).
pub fn stdout_line(args: std::fmt::Arguments<'_>) -> Result<(), WriteError> {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    stdout_result(writeln!(std::io::stdout().lock(), "{args}"))
}

/// Flushes standard output, with [`stdout_line`]'s rules.
pub fn flush_stdout() -> Result<(), WriteError> {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    stdout_result(std::io::stdout().flush())
}

/// Writes a line to standard output with [`stdout_line`], returning its error
/// (`?`-able in any function returning a `Result` whose error converts from
/// [`WriteError`]).
#[macro_export]
macro_rules! say {
    ($($t:tt)*) => {
        $crate::write::stdout_line(format_args!($($t)*))
    };
}

/// [`say!`] that returns its error from the enclosing function (`?` applied):
/// a failed write (`> /dev/full`: the result would be lost) ends it, a closed
/// stdout (`| head`) does not. A binary's summary lines take it as their `say!`
/// (`use hpc_io::say_or_return as say;`).
#[macro_export]
macro_rules! say_or_return {
    ($($t:tt)*) => {
        $crate::say!($($t)*)?
    };
}

/// The first error of a [`Latched`] writer, shared with its owner.
#[derive(Clone, Debug)]
pub struct ErrorLatch {
    what: String,
    first: Arc<Mutex<Option<std::io::Error>>>,
}

impl ErrorLatch {
    /// `Err` naming the file when any write or flush failed.
    pub fn check(&self) -> Result<(), WriteError> {
        let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
        match first.take() {
            Some(error) => Err(WriteError {
                what: self.what.clone(),
                error,
            }),
            None => Ok(()),
        }
    }

    fn set(&self, e: std::io::Error) {
        let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            *first = Some(e);
        }
    }

    fn failed(&self) -> bool {
        self.first
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }
}

/// A writer that keeps its first error for its owner (see the [module](self)).
/// After an error nothing more is written (the output would have a hole).
#[derive(Debug)]
pub struct Latched<W> {
    inner: W,
    latch: ErrorLatch,
}

impl<W: Write> Latched<W> {
    /// Wraps `inner`, named `what` in the error.
    pub fn new(inner: W, what: impl std::fmt::Display) -> (Latched<W>, ErrorLatch) {
        let latch = ErrorLatch {
            what: what.to_string(),
            first: Arc::new(Mutex::new(None)),
        };
        (
            Latched {
                inner,
                latch: latch.clone(),
            },
            latch,
        )
    }
}

impl<W: Write> Write for Latched<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.latch.failed() {
            return Ok(buf.len());
        }
        match self.inner.write_all(buf) {
            Ok(()) => Ok(buf.len()),
            Err(e) => {
                self.latch.set(e);
                Ok(buf.len())
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.latch.failed() {
            if let Err(e) = self.inner.flush() {
                self.latch.set(e);
            }
        }
        Ok(())
    }
}

/// A writer whose every write fails with `ENOSPC`, as on a full disk (for tests
/// of the paths that must report it).
#[derive(Clone, Copy, Debug, Default)]
pub struct Failing;

impl Write for Failing {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::Error::from_raw_os_error(28))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Err(std::io::Error::from_raw_os_error(28))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_error_is_kept_and_named() {
        let (mut w, latch) = Latched::new(Vec::new(), "a.json");
        w.write_all(b"ok").unwrap();
        w.flush().unwrap();
        latch.check().unwrap();
        assert_eq!(w.inner, b"ok");

        let (mut w, latch) = Latched::new(Failing, "/full/trace.json");
        w.write_all(b"x").unwrap();
        w.flush().unwrap();
        let e = latch.check().unwrap_err();
        assert_eq!(e.error.raw_os_error(), Some(28));
        assert!(
            e.to_string().starts_with("cannot write /full/trace.json"),
            "{e}"
        );
    }

    #[test]
    fn a_full_stdout_is_an_error_and_a_closed_one_is_not() {
        let full = stdout_result(Err(std::io::Error::from_raw_os_error(28))).unwrap_err();
        assert!(full.to_string().contains("standard output"), "{full}");
        stdout_result(Err(ErrorKind::BrokenPipe.into())).unwrap();
    }
}
