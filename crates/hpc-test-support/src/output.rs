//! A program's standard streams as a user meets them: output to a full device
//! (`/dev/full`) is an error that names the stream, never a panic; a reader that goes
//! away (`| head`) is not an error, or is the quiet end of a closed pipe.
//!
//! ```no_run
//! use std::process::Command;
//! use hpc_test_support::output;
//!
//! let mut c = Command::new("my-program");
//! let err = output::assert_full_stdout_fails(&mut c, 1, &["cannot write standard output"]);
//! assert!(err.contains("No space left"), "{err}");
//! assert!(output::with_stdout_closed(&mut Command::new("my-program")).success());
//! ```

use std::fs::OpenOptions;
use std::io::Read;
use std::process::{Command, ExitStatus, Output, Stdio};

/// `/dev/full`, for a child's standard output or error: every write fails with
/// `ENOSPC` ("No space left on device").
pub fn dev_full() -> Stdio {
    Stdio::from(
        OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full"),
    )
}

/// Runs `cmd` with its standard output on [`dev_full`] and returns what it did.
pub fn stdout_to_full(cmd: &mut Command) -> Output {
    cmd.stdout(dev_full())
        .output()
        .expect("running the program")
}

/// Runs `cmd` with its standard output on [`dev_full`] and checks that it ends
/// with status `code`, says each of `needles` on standard error, and did not
/// panic; returns its standard error.
pub fn assert_full_stdout_fails(cmd: &mut Command, code: i32, needles: &[&str]) -> String {
    let o = stdout_to_full(cmd);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "{cmd:?}: {err}");
    assert!(!err.contains("panicked"), "{cmd:?}: {err}");
    for needle in needles {
        assert!(err.contains(needle), "{cmd:?}: no {needle:?} in: {err}");
    }
    err
}

/// The checks of a program that prints its result lines with `hpc_io::write`'s
/// rules, each on a fresh command from `cmd`: with standard output on a full
/// device it fails with status 1, naming standard output and the device's error
/// ("No space left"), without a panic; with a reader that goes away at once (`|
/// head`), it succeeds.
pub fn assert_result_lines_not_lost(mut cmd: impl FnMut() -> Command) {
    assert_full_stdout_fails(
        &mut cmd(),
        1,
        &["cannot write standard output", "No space left"],
    );
    let mut c = cmd();
    let status = with_stdout_closed(&mut c);
    assert!(status.success(), "{c:?} with its stdout closed: {status}");
}

/// [`assert_result_lines_not_lost`] for a whole run of `program` with `args`,
/// its log at `warn` and no backtrace asked for (an example's smallest run).
pub fn assert_run_lines_not_lost(program: &str, args: &[&str]) {
    assert_result_lines_not_lost(|| {
        let mut c = Command::new(program);
        c.args(args)
            .env(hpc_runtime::env::LOG, "warn")
            .env_remove("RUST_BACKTRACE");
        c
    });
}

/// Starts `cmd` with its standard output on a pipe that this side closes at once
/// (a reader that went away before the first line) and returns its exit status.
pub fn with_stdout_closed(cmd: &mut Command) -> ExitStatus {
    let mut c = cmd
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the program");
    drop(c.stdout.take());
    c.wait().expect("waiting for the program")
}

/// Starts `cmd` with its standard output and error on pipes, reads one byte of its
/// output and closes the pipe, as `| head -c 1` does; returns its exit status and
/// its standard error.
pub fn after_one_byte(cmd: &mut Command) -> (ExitStatus, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the program");
    let mut out = child.stdout.take().expect("a piped stdout");
    let mut one = [0u8; 1];
    out.read_exact(&mut one).expect("the program's first byte");
    drop(out);
    let status = child.wait().expect("waiting for the program");
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("a piped stderr")
        .read_to_string(&mut err)
        .expect("the program's standard error");
    (status, err)
}

/// Runs `cmd` with its standard error on a datagram socket, which keeps the
/// boundaries of writes, and returns its status and each `write` to standard error
/// as one string: a program's last message written in pieces (`writeln!` with
/// arguments on unbuffered standard error) shows as several, and a launcher that
/// stops the program between two of them leaves the line cut.
pub fn stderr_writes(cmd: &mut Command) -> (ExitStatus, Vec<String>) {
    let (ours, theirs) = std::os::unix::net::UnixDatagram::pair().expect("a socket pair");
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .spawn()
        .expect("start the program");
    // Read once the child has exited (a datagram socket has no end of file); the
    // socket's buffer (some 200 KiB) holds what a program says when it fails.
    let status = child.wait().expect("wait for the program");
    ours.set_nonblocking(true).expect("non-blocking socket");
    let mut writes = Vec::new();
    let mut buf = vec![0u8; 1 << 17];
    while let Ok(n) = ours.recv(&mut buf) {
        writes.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    (status, writes)
}

/// Asserts that the program `cmd` ends with status `code` and a last message
/// `{program}: error: ...` that contains `needle`, written to standard error whole
/// in one write ([`stderr_writes`]); returns that message.
pub fn assert_last_words_whole(
    cmd: &mut Command,
    program: &str,
    code: i32,
    needle: &str,
) -> String {
    let (status, writes) = stderr_writes(cmd);
    assert_eq!(status.code(), Some(code), "{writes:?}");
    let head = format!("{program}: error: ");
    let line = writes
        .iter()
        .find(|w| w.contains(&head))
        .unwrap_or_else(|| panic!("no {head:?} among the writes {writes:?}"));
    assert!(
        line.starts_with(&head) && line.ends_with('\n') && line.contains(needle),
        "the message was written in pieces (or lacks {needle:?}): {writes:?}"
    );
    line.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn a_full_device_fails_every_write() {
        let o = stdout_to_full(&mut sh("echo hello || { echo failed >&2; exit 3; }"));
        assert_eq!(o.status.code(), Some(3));
        assert!(String::from_utf8_lossy(&o.stderr).contains("failed"));
        let err = assert_full_stdout_fails(
            &mut sh("echo hello || { echo no way >&2; exit 4; }"),
            4,
            &["no way"],
        );
        assert!(err.contains("no way"), "{err}");
    }

    #[test]
    #[should_panic(expected = "no \"missing\" in")]
    fn a_needle_not_said_fails_the_check() {
        assert_full_stdout_fails(&mut sh("echo hello || exit 1"), 1, &["missing"]);
    }

    #[test]
    fn result_lines_not_lost_is_met_by_a_careful_writer_only() {
        // Names the full device; on a closed pipe (SIGPIPE ignored) ends with 0.
        let full = "if [ \"$(readlink /proc/$$/fd/1)\" = /dev/full ]; then \
                    echo 'cannot write standard output: No space left on device' >&2; exit 1; fi";
        let careful = format!("trap '' PIPE; {full}; sleep 0.1; echo result 2>/dev/null; exit 0");
        assert_result_lines_not_lost(|| sh(&careful));
        // Killed by SIGPIPE on the closed pipe; a full device not an error.
        for careless in [
            format!("{full}; sleep 0.1; echo result"),
            "echo result; exit 0".into(),
        ] {
            let r = std::panic::catch_unwind(|| assert_result_lines_not_lost(|| sh(&careless)));
            assert!(r.is_err(), "{careless} passed");
        }
    }

    #[test]
    fn a_closed_stdout_and_one_byte_read() {
        let st = with_stdout_closed(&mut sh("sleep 0.2; exit 7"));
        assert_eq!(st.code(), Some(7));
        let (st, err) = after_one_byte(&mut sh("echo x; echo said >&2; exit 5"));
        assert_eq!(st.code(), Some(5));
        assert_eq!(err, "said\n");
    }

    #[test]
    fn stderr_writes_keeps_each_write_apart() {
        let (st, writes) = stderr_writes(&mut sh(
            "printf 'p: error: ' >&2; printf 'cut\\n' >&2; exit 1",
        ));
        assert_eq!(st.code(), Some(1));
        assert_eq!(writes, ["p: error: ", "cut\n"]);
        let (_, writes) = stderr_writes(&mut sh("printf 'p: error: whole\\n' >&2; exit 1"));
        assert_eq!(writes, ["p: error: whole\n"]);
    }
}
