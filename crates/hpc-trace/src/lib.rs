//! # hpc-trace: a timeline of every rank of a job
//!
//! With `HPC_TRACE=DIR` set, `hpc_rs::init()` adds a [`TraceLayer`] beside its log
//! subscriber. The layer records every span a process enters and leaves as a Chrome
//! trace event (`"ph":"X"`: name, start, duration, thread, the span's fields as
//! `args`) and every event as an instant (`"ph":"i"`), streamed through a buffered
//! writer into a file of its own in `DIR`. What is recorded:
//!
//! - the SDK's spans (`hpc_comm`, `hpc_proxy`, `hpc_board`, `hpc_rdma`,
//!   `hpc_runtime`, `hpc_collectives`, at every level: a collective's post, wait
//!   and progress, the proxy's work, the transport's put, get, send and receive),
//!   see [`default_filter`];
//! - the application's spans and events at `INFO` and above, and the regions of
//!   [`region`].
//!
//! The SDK's spans are at `TRACE` level: without a trace layer (and with `HPC_LOG`
//! below `trace`) each costs the static level check of `tracing`'s macros.
//!
//! The file is `DIR/pid-<PID>.json.part` while the process runs and becomes
//! `DIR/rank-<R>.json` when it finishes (at exit, or at [`finish`]), `R` being the
//! rank given to [`set_rank`] (`hpc_rs::init()` gives it once the world is known); a
//! rank that ends before it learns its rank (it failed to join the job) is named by
//! `HPC_RANK` where `hpc run` started it, and a process that is no rank (the
//! collectives proxy, named by [`set_label`]) writes `DIR/proc-<PID>.json`
//! (`-<N>` after the id where another process of the same id, in another
//! container or on another machine sharing `DIR`, took the name). A rank's
//! `rank-<R>.json` of an earlier run is replaced (a rerun into `DIR`), but one
//! of another job written while this job ran (two jobs given one `DIR` at once)
//! is kept: the rank writes `rank-<R>-<N>.json` beside it and warns, and the
//! merge refuses the mixture. Each finished file is a Chrome trace of its own, and records the clocks of its start
//! (`CLOCK_REALTIME` and `CLOCK_MONOTONIC`), its host and the
//! machine's boot: [`merge::merge_dir`] (`hpc trace merge`, and `hpc run --trace FILE`
//! after the job) aligns the files on them, one process per rank.
//!
//! A write that fails (a full disk) stops the recording; the file is left as
//! `.part`, [`finish`] returns the error (at exit: logged, naming the file, and a
//! process that was to end 0 ends with status [`EXIT_TRACE_LOST`]; one ending with
//! a status of its own keeps it), and the merge refuses the file naming it: a
//! timeline is never silently shorter than the run.
//!
//! ```
//! let dir = std::env::temp_dir().join(format!("hpc-trace-doc-{}", std::process::id()));
//! let layer = hpc_trace::TraceLayer::create(&dir)?;
//! let sink = layer.clone();
//! use tracing_subscriber::layer::SubscriberExt as _;
//! let subscriber = tracing_subscriber::registry().with(layer);
//! tracing::subscriber::with_default(subscriber, || {
//!     let _r = hpc_trace::region("solve");
//!     tracing::info!(step = 1, "stepped");
//! });
//! sink.set_rank(0);
//! let file = sink.finish()?.expect("a file");
//! assert_eq!(file, dir.join("rank-0.json"));
//! let merged = hpc_trace::merge::merge_dir(&dir)?;
//! assert!(merged.events.iter().any(|e| e["name"] == "solve" && e["ph"] == "X"));
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

mod clock;
mod log;
pub mod merge;
mod record;
mod sink;
pub mod svg;

pub use log::{LogEvent, LogWriter};
pub use record::TraceLayer;

/// The version of the per-process file format ([`merge`] refuses another).
pub const FORMAT_VERSION: u64 = 1;

/// The name of a span that [`region`] makes: the event takes its `name` field.
pub const REGION: &str = "region";

/// What can go wrong while recording.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The trace directory could not be made or written into.
    #[error("{}{}: {error}", named(what), hpc_io::message::path(path))]
    Dir {
        /// Where the directory came from (`HPC_TRACE=`, a flag).
        what: String,
        /// The directory.
        path: PathBuf,
        /// The operating system's error.
        error: std::io::Error,
    },
    /// A write of the trace file failed: the file is left unfinished.
    #[error(
        "cannot write the trace {}: {error}; the trace is incomplete and left unfinished",
        hpc_io::message::path(path)
    )]
    Write {
        /// The file (its `.part` name).
        path: PathBuf,
        /// The operating system's error.
        error: std::io::Error,
    },
    /// `HPC_TRACE` is not valid UTF-8 or is empty.
    #[error("{0}")]
    Setting(String),
}

/// `what` before a path in a message: `HPC_TRACE=/x` (a variable and its
/// value, no blank between: "HPC_TRACE= /x" read as a value with a leading
/// blank), `trace directory /x`.
fn named(what: &str) -> String {
    if what.ends_with('=') {
        what.to_string()
    } else {
        format!("{what} ")
    }
}

/// The sinks of this process that [`set_rank`], [`set_label`] and [`finish`] act on,
/// and that are finished at exit.
static SINKS: Mutex<Vec<Arc<sink::Sink>>> = Mutex::new(Vec::new());

fn sinks() -> Vec<Arc<sink::Sink>> {
    SINKS.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The longest path Linux takes (`PATH_MAX`, its terminating NUL included).
const MAX_PATH_BYTES: usize = 4096;

/// The trace layer that `HPC_TRACE` asks for: `None` when it is unset, an error
/// naming it when it is not a directory that can be made and written into.
pub fn layer_from_env() -> Result<Option<TraceLayer>, Error> {
    use std::os::unix::ffi::OsStrExt as _;
    let Some(v) = std::env::var_os(hpc_env::TRACE) else {
        return Ok(None);
    };
    if v.is_empty() {
        return Err(Error::Setting(format!(
            "{} is set but empty: give the directory the ranks' traces go to",
            hpc_env::TRACE
        )));
    }
    if std::str::from_utf8(v.as_bytes()).is_err() {
        return Err(Error::Setting(format!(
            "{}={} is not valid UTF-8",
            hpc_env::TRACE,
            hpc_env::shown(&v.to_string_lossy())
        )));
    }
    // Longer than any path: refused with the value cut, as every HPC_* value
    // is shown (the error of making it echoed all of it).
    if v.len() > MAX_PATH_BYTES {
        return Err(Error::Setting(format!(
            "{}={} is {} bytes, longer than any path ({MAX_PATH_BYTES})",
            hpc_env::TRACE,
            hpc_env::shown(&v.to_string_lossy()),
            v.len()
        )));
    }
    // `HPC_TRACE=/` (or `/etc`, `/usr/bin`, `/tmp`), as root: each process
    // wrote its `proc-<PID>.json` or `rank-<R>.json` there.
    // Something else than a directory there is said so by its kind, below.
    let not_a_dir = std::fs::metadata(&v).is_ok_and(|m| !m.is_dir());
    if let Some(why) = hpc_io::system::system_folder(Path::new(&v)).filter(|_| !not_a_dir) {
        return Err(Error::Setting(format!(
            "{}={}: {why}, not a folder for the processes' timelines: name a folder of \
             your own (a new one is made)",
            hpc_env::TRACE,
            hpc_io::message::path(Path::new(&v))
        )));
    }
    TraceLayer::create_named(Path::new(&v), &format!("{}=", hpc_env::TRACE)).map(Some)
}

/// The targets and levels a [`TraceLayer`] records when installed by
/// `hpc_rs::init()`: the SDK's crates at every level (their spans are at `TRACE`),
/// everything else at `INFO` and above (the application's spans and regions).
pub fn default_filter() -> tracing_subscriber::filter::Targets {
    use tracing::Level;
    let mut t = tracing_subscriber::filter::Targets::new().with_default(Level::INFO);
    for sdk in [
        "hpc_comm",
        "hpc_proxy",
        "hpc_board",
        "hpc_rdma",
        "hpc_runtime",
        "hpc_collectives",
        "hpc_trace",
    ] {
        t = t.with_target(sdk, Level::TRACE);
    }
    t
}

/// Whether this process records a timeline: a [`TraceLayer`] was made in it.
pub fn recording() -> bool {
    !sinks().is_empty()
}

/// Names this process's trace as rank `rank`'s (its file becomes `rank-<R>.json`).
/// `hpc_rs::init()` calls it once the world is known. A rank the merge refuses is
/// not taken (one beyond [`merge::MAX_RANK`], or not below a size given before
/// by [`set_size`]): the file stays one of a process that is no rank
/// (`proc-<PID>.json`), and a warning says so.
pub fn set_rank(rank: usize) {
    for s in sinks() {
        s.set_rank(rank);
    }
}

/// Records the number of ranks of this process's job in its trace, which the merge
/// checks every rank file against (a file of another job left in the directory is
/// refused). `hpc_rs::init()` calls it with [`set_rank`]. A size the merge
/// refuses (0, or not above the rank given before) is not taken, and a warning
/// says so.
pub fn set_size(size: usize) {
    for s in sinks() {
        s.set_size(size);
    }
}

/// Names this process in the merged timeline (for a process that is no rank, such as
/// the collectives proxy: `proxy`).
pub fn set_label(label: &str) {
    for s in sinks() {
        s.set_label(label);
    }
}

/// Finishes this process's traces now: the files are complete and renamed to their
/// final names, returned. Spans that end later are not recorded. It also runs at
/// exit (returning from `main`, `std::process::exit`), where an error is logged
/// and a process that was to end 0 ends with status [`EXIT_TRACE_LOST`].
pub fn finish() -> Result<Vec<PathBuf>, Error> {
    let mut done = Vec::new();
    for s in sinks() {
        if let Some(p) = s.finish()? {
            match s.aside() {
                Some((own, false)) => tracing::warn!(
                    "{}: {} is another job's, written while this one ran (two jobs given one \
                     folder?): this rank's timeline is {}; hpc trace merge refuses the \
                     mixture: give each job a folder of its own",
                    hpc_env::TRACE,
                    hpc_io::message::path(&own),
                    hpc_io::message::path(&p)
                ),
                Some((own, true)) => tracing::warn!(
                    "{}: {} is this job's, of the same rank, written while this process ran \
                     (two processes given one rank, or two trace layers of one process in \
                     one folder?): this timeline is {}; hpc trace merge refuses two files of \
                     one rank",
                    hpc_env::TRACE,
                    hpc_io::message::path(&own),
                    hpc_io::message::path(&p)
                ),
                None => {}
            }
            done.push(p);
        }
    }
    Ok(done)
}

/// A region of the application's code, recorded on the timeline from now until the
/// guard is dropped: an `INFO` span named [`REGION`] whose event takes `name`.
///
/// ```
/// fn step() {
///     let _region = hpc_trace::region("halo exchange");
///     // ... the work ...
/// }
/// step();
/// ```
pub fn region(name: &str) -> tracing::span::EnteredSpan {
    tracing::info_span!(REGION, name).entered()
}

/// The exit status of a process whose trace could not be finished at exit (a full
/// disk): a process that was to end well does not end 0 with its timeline lost. A
/// process that was ending with a status of its own (`std::process::exit(3)`)
/// keeps it: its failure says more than the lost timeline, which is logged.
pub const EXIT_TRACE_LOST: i32 = 1;

/// The status a process ends with when its trace is lost at exit, `status` being
/// the one it was ending with: its own when it was failing already,
/// [`EXIT_TRACE_LOST`] where it would have ended 0.
fn status_with_trace_lost(status: i32) -> i32 {
    if status == 0 {
        EXIT_TRACE_LOST
    } else {
        status
    }
}

/// Finishes the traces at exit, the process ending with `status`: a lost trace
/// is logged (naming the file), and a process that was to end 0 ends with
/// [`EXIT_TRACE_LOST`] instead.
fn finish_at_exit_with(status: i32) {
    if let Err(e) = finish() {
        tracing::error!("{e}");
        let end = status_with_trace_lost(status);
        if end != status {
            // `exit` may not be called again from an exit handler: `_exit` ends
            // the process at once, standard output having been flushed by the
            // runtime before the handlers ran.
            // SAFETY: `_exit` takes a plain integer and does not return; ending
            // the process from an exit handler through it is what POSIX allows.
            unsafe { libc::_exit(end) };
        }
    }
}

/// glibc passes an `on_exit` handler the status given to `exit` (returning from
/// `main` included): a status the process chose is kept.
#[cfg(target_env = "gnu")]
extern "C" fn finish_at_exit(status: libc::c_int, _arg: *mut libc::c_void) {
    finish_at_exit_with(status);
}

/// Without `on_exit` the status cannot be read: taken as 0 (a lost trace ends
/// the process with [`EXIT_TRACE_LOST`]).
#[cfg(not(target_env = "gnu"))]
extern "C" fn finish_at_exit() {
    finish_at_exit_with(0);
}

#[cfg(target_env = "gnu")]
extern "C" {
    /// glibc's `on_exit(3)` (the `libc` crate does not declare it).
    fn on_exit(
        function: extern "C" fn(libc::c_int, *mut libc::c_void),
        arg: *mut libc::c_void,
    ) -> libc::c_int;
}

/// Registers `finish_at_exit`, returning `atexit`'s or `on_exit`'s result.
fn register_at_exit() -> libc::c_int {
    // SAFETY: `finish_at_exit` is an `extern "C"` function that lives for the
    // whole program, of the signature the registering function takes (glibc's
    // `on_exit` passes it the exit status and the null argument given here, which
    // it does not read); it catches no panic, and none escapes it (`finish` locks
    // with poison recovery and returns its errors).
    #[cfg(target_env = "gnu")]
    let rc = unsafe { on_exit(finish_at_exit, std::ptr::null_mut()) };
    // SAFETY: as above, `atexit`'s handler taking nothing.
    #[cfg(not(target_env = "gnu"))]
    let rc = unsafe { libc::atexit(finish_at_exit) };
    rc
}

/// Registers [`finish`] to run at exit, once per process.
fn finish_at_exit_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if register_at_exit() != 0 {
            tracing::warn!(
                "cannot register the trace's end at exit; call hpc_trace::finish() before exiting"
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two trace layers of one process in one folder (or two processes of one
    /// job given the same rank), both rank 0: the second to finish replaced
    /// the first's `rank-0.json` without a word, its timeline lost. The file
    /// written while this one ran is kept and this one written beside it,
    /// said to be of this job; the merge refuses the two files of one rank.
    #[test]
    fn a_rank_file_of_this_job_written_meanwhile_is_kept() {
        let dir = hpc_test_support::TmpDir::new("hpc-trace", "same-rank");
        let trace = format!("{}=", hpc_env::TRACE);
        let pause = || std::thread::sleep(std::time::Duration::from_millis(30));
        let a = crate::sink::Sink::create(&dir, &trace).unwrap();
        let b = crate::sink::Sink::create(&dir, &trace).unwrap();
        for s in [&a, &b] {
            s.set_rank(0);
            s.set_size(1);
        }
        pause();
        assert_eq!(a.finish().unwrap().unwrap(), dir.join("rank-0.json"));
        let second = b.finish().unwrap().unwrap();
        assert_eq!(second, dir.join("rank-0-1.json"));
        assert_eq!(b.aside(), Some((dir.join("rank-0.json"), true)));
        let e = merge::merge_dir(&dir).unwrap_err().to_string();
        assert!(e.contains("are both rank 0's"), "{e}");
    }

    /// A variable and its value are written as they are set: "HPC_TRACE= /x"
    /// read as a value with a leading blank.
    #[test]
    fn a_directory_error_names_the_variable_and_its_value_together() {
        let e = |what: &str| {
            Error::Dir {
                what: what.into(),
                path: PathBuf::from("/proc/x"),
                error: std::io::ErrorKind::NotFound.into(),
            }
            .to_string()
        };
        let var = format!("{}=", hpc_env::TRACE);
        let shown = e(&var);
        assert!(shown.starts_with(&format!("{var}/proc/x: ")), "{shown}");
        assert!(e("trace directory").starts_with("trace directory /proc/x: "));
    }
}
