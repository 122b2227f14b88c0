//! Another program run for its answer (`git`, `docker`, `ldd`, `apptainer
//! inspect`), bounded in time and in the output kept: a tool that hangs or
//! prints without end must not hang the caller or fill its memory.
//!
//! [`output_within`] runs a tool in a process group of its own, with an empty
//! standard input; of each of its streams the first `max` bytes are kept and the
//! rest read and dropped (so the tool never blocks on a full pipe); one still
//! running at its time limit is stopped with its process group (SIGTERM, SIGKILL
//! after a grace) and the run ends with [`TimedOut`], naming the command. The
//! image builder's tools share [`drain`], [`collect`], [`TimedOut`] and
//! [`shown_command`], and add its own stop on a signal.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long a tool stopped at its limit is given to end on SIGTERM before its
/// process group gets SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// A tool that did not end within its time limit: it and its process group were
/// stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedOut {
    /// The command, as a message shows it ([`shown_command`]).
    pub command: String,
    /// The time it was given.
    pub limit: Duration,
}

impl std::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} did not end within {} s: it and its process group were stopped",
            self.command,
            self.limit.as_secs_f64()
        )
    }
}

impl std::error::Error for TimedOut {}

/// Why [`output_within`] has no output to give.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The tool could not be started (not installed, not executable).
    #[error("cannot run {command}: {source}")]
    Start {
        /// The command, as a message shows it.
        command: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Waiting for the tool failed.
    #[error("cannot wait for {command}: {source}")]
    Wait {
        /// The command, as a message shows it.
        command: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The tool did not end within its limit.
    #[error(transparent)]
    TimedOut(#[from] TimedOut),
}

/// `cmd` as a message names it: the program and its arguments, cut, and
/// quoted and escaped where they hold a control character.
///
/// ```
/// let mut cmd = std::process::Command::new("git");
/// cmd.args(["rev-parse", "--is-inside-work-tree"]);
/// assert_eq!(hpc_io::tool::shown_command(&cmd), "git rev-parse --is-inside-work-tree");
/// ```
pub fn shown_command(cmd: &Command) -> String {
    let mut words = vec![cmd.get_program().to_string_lossy().into_owned()];
    words.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    // Cut as a whole, not line by line: a `sh -c SCRIPT` of many lines was
    // shown whole (each line cut, the lines all there).
    let line = words.join(" ");
    let n = line.chars().count();
    let line = if n > COMMAND_CHARS {
        let head: String = line.chars().take(COMMAND_CHARS).collect();
        format!("{head}… ({} more characters)", n - COMMAND_CHARS)
    } else {
        line
    };
    crate::message::said(&line).into_owned()
}

/// The most characters of a command line that [`shown_command`] shows (the
/// program and its first arguments); the rest is counted.
pub const COMMAND_CHARS: usize = 200;

/// Reads `r` to its end on a thread of its own, keeping its first `max` bytes
/// (the rest is read and dropped, so that the writer never blocks on a full
/// pipe); the receiver gets what was kept once `r` ends.
pub fn drain<R: Read + Send + 'static>(r: Option<R>, max: u64) -> Receiver<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut r) = r {
            let _ = r.by_ref().take(max).read_to_end(&mut buf);
            let _ = std::io::copy(&mut r, &mut std::io::sink());
        }
        let _ = tx.send(buf);
    });
    rx
}

/// What [`drain`] kept, waited for until `deadline` (a process the tool started
/// outside its group may hold its output open after the tool ended): `None`
/// when the deadline passed first.
pub fn collect(rx: &Receiver<Vec<u8>>, deadline: Option<Instant>) -> Option<Vec<u8>> {
    match deadline {
        None => Some(rx.recv().unwrap_or_default()),
        Some(d) => match rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
            Ok(buf) => Some(buf),
            Err(RecvTimeoutError::Disconnected) => Some(Vec::new()),
            Err(RecvTimeoutError::Timeout) => None,
        },
    }
}

/// Sends `sig` to the process group `pgid`; a group already gone is no error.
fn signal_group(pgid: u32, sig: rustix::process::Signal) {
    if let Some(group) = i32::try_from(pgid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(group, sig);
    }
}

/// Stops `child`, leader of its own process group: SIGTERM to the group,
/// SIGKILL after [`STOP_GRACE`], and SIGKILL to what is left of the group.
fn stop_group(child: &mut Child) -> std::io::Result<()> {
    let pgid = child.id();
    signal_group(pgid, rustix::process::Signal::TERM);
    let t = Instant::now();
    while child.try_wait()?.is_none() {
        if t.elapsed() > STOP_GRACE {
            signal_group(pgid, rustix::process::Signal::KILL);
            child.wait()?;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    signal_group(pgid, rustix::process::Signal::KILL);
    Ok(())
}

/// Runs `cmd` and collects its output as [`Command::output`] does, bounded: the
/// tool leads a process group of its own with an empty standard input; of each
/// stream the first `max` bytes are kept; a tool still running after `limit`,
/// or whose output a process it started still holds open then, is stopped with
/// its group and the run ends with [`ToolError::TimedOut`]. A `limit` beyond
/// any instant the clock can name (`Duration::MAX`) is no limit.
///
/// ```
/// use std::time::Duration;
/// let mut cmd = std::process::Command::new("sh");
/// cmd.args(["-c", "echo hi"]);
/// let out = hpc_io::tool::output_within(&mut cmd, Duration::from_secs(30), 1 << 20).unwrap();
/// assert_eq!(out.stdout, b"hi\n");
/// ```
pub fn output_within(cmd: &mut Command, limit: Duration, max: u64) -> Result<Output, ToolError> {
    // `Instant + Duration::MAX` panicked ("overflow when adding duration to
    // instant"): a limit no clock reaches is none.
    let deadline = Instant::now().checked_add(limit);
    let command = shown_command(cmd);
    let timed_out = |command: String| ToolError::TimedOut(TimedOut { command, limit });
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|source| ToolError::Start {
            command: command.clone(),
            source,
        })?;
    let out = drain(child.stdout.take(), max);
    let err = drain(child.stderr.take(), max);
    let wait = |child: &mut Child| -> std::io::Result<Option<std::process::ExitStatus>> {
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(Some(status));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                stop_group(child)?;
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let status = match wait(&mut child) {
        Ok(Some(status)) => status,
        Ok(None) => return Err(timed_out(command)),
        Err(source) => {
            let _ = stop_group(&mut child);
            return Err(ToolError::Wait { command, source });
        }
    };
    let (Some(stdout), Some(stderr)) = (collect(&out, deadline), collect(&err, deadline)) else {
        return Err(timed_out(command));
    };
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A limit of `Duration::MAX` (a caller's "no limit") panicked with
    /// "overflow when adding duration to instant"; it is no limit.
    #[test]
    fn a_limit_beyond_any_instant_is_no_limit() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo hi"]);
        let out = output_within(&mut cmd, Duration::MAX, 1 << 10).unwrap();
        assert_eq!(out.stdout, b"hi\n");
        assert!(out.status.success());
    }

    /// Hostile pass 20: a tool stopped at its limit was named by its whole
    /// command line: a `sh -c SCRIPT` of many lines wrote the whole script
    /// into the message (each line cut, none left out). It is cut as a whole.
    #[test]
    fn a_long_command_line_is_cut_in_the_message() {
        let script = format!(
            "sleep 60\n{}",
            "# a comment line of the script\n".repeat(500)
        );
        let e = output_within(
            Command::new("sh").args(["-c", &script]),
            Duration::from_millis(100),
            1 << 10,
        )
        .unwrap_err()
        .to_string();
        assert!(e.len() < 400, "{} bytes: {e}", e.len());
        assert!(
            e.starts_with("\"sh -c sleep 60\\n# a comment line")
                && e.contains("… (")
                && e.ends_with("more characters)\" did not end within 0.1 s: it and its process group were stopped"),
            "{e}"
        );
    }

    /// A tool that never ends is stopped at its limit with its group, and named;
    /// one printing without end is kept bounded.
    #[test]
    fn a_tool_that_hangs_or_prints_without_end_is_bounded() {
        let t = Instant::now();
        let e = output_within(
            Command::new("sh").args(["-c", "sleep 60 & exec sleep 60"]),
            Duration::from_millis(300),
            1 << 10,
        )
        .unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert_eq!(
            e.to_string(),
            "sh -c sleep 60 & exec sleep 60 did not end within 0.3 s: it and its process \
             group were stopped"
        );
        let out = output_within(
            Command::new("sh").args(["-c", "head -c 100000 /dev/zero; echo done >&2"]),
            Duration::from_secs(30),
            1 << 10,
        )
        .unwrap();
        assert!(out.status.success());
        assert_eq!(out.stdout.len(), 1 << 10);
        assert_eq!(out.stderr, b"done\n");
        let e = output_within(
            &mut Command::new("/nonexistent/tool"),
            Duration::from_secs(1),
            1,
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("cannot run /nonexistent/tool: "),
            "{e}"
        );
    }
}
