//! Colour in `hpc`'s log lines only on a terminal, and never with `NO_COLOR`.

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

const HPC: &str = env!("CARGO_BIN_EXE_hpc");

/// `hpc --log debug topo --synthetic ...` (which logs at debug level) with `env`.
fn hpc_logging(stderr: Stdio, env: &[(&str, &str)]) -> std::process::Child {
    let mut cmd = Command::new(HPC);
    cmd.args([
        "--log",
        "debug",
        "topo",
        "--synthetic",
        "pack:1 core:2 pu:1",
    ])
    .env_remove("NO_COLOR")
    .envs(env.iter().copied())
    .stdout(Stdio::null())
    .stderr(stderr);
    cmd.spawn().unwrap()
}

/// Runs it with stderr on a fresh pseudo-terminal; returns what the terminal got.
fn on_a_terminal(env: &[(&str, &str)]) -> String {
    let (got, status) = stderr_on_a_terminal(|stderr| hpc_logging(stderr, env));
    assert!(status.success());
    got
}

/// Runs the child `start` makes with the standard error it is given, a fresh
/// pseudo-terminal's; returns what the terminal got and the child's status.
fn stderr_on_a_terminal(
    start: impl FnOnce(Stdio) -> std::process::Child,
) -> (String, std::process::ExitStatus) {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors into the integers we pass; the other
    // arguments may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened by openpty and are owned here only.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let mut child = start(Stdio::from(slave));
    // The child holds the terminal's slave side now; reading the master ends (EIO)
    // when it exits.
    let mut got = Vec::new();
    let mut master = std::fs::File::from(master);
    let mut buf = [0u8; 4096];
    loop {
        match master.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let status = child.wait().unwrap();
    (String::from_utf8_lossy(&got).into_owned(), status)
}

#[test]
fn colour_only_on_a_terminal_and_never_with_no_color() {
    // Redirected: plain text.
    let out = hpc_logging(Stdio::piped(), &[]).wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("DEBUG"), "{err}");
    assert!(!err.contains('\x1b'), "colour in a pipe: {err:?}");
    // A terminal: colour.
    let tty = on_a_terminal(&[]);
    assert!(tty.contains("DEBUG") && tty.contains('\x1b'), "{tty:?}");
    // A terminal with NO_COLOR: none.
    let tty = on_a_terminal(&[("NO_COLOR", "1")]);
    assert!(tty.contains("DEBUG") && !tty.contains('\x1b'), "{tty:?}");
}

/// Pass 19's leftover: a refused value holding a carriage return or a
/// right-to-left override (U+202E) reached a terminal raw in the coloured usage
/// error (the carriage return hid what came before it, the override reordered
/// the line), and a pipe raw in the plain one. Both show them escaped now; a
/// terminal's own escapes in the value (a title, a colour) reach neither.
#[test]
fn a_refused_value_is_shown_escaped_on_a_terminal_and_in_a_pipe() {
    for (value, shown) in [
        ("1\rHIDDEN\u{202e}2", "1\\rHIDDEN\\u{202e}2"),
        ("1\u{1b}]0;pwned\u{7}\u{1b}[31m2", "1"),
    ] {
        let start = |stderr: Stdio| {
            Command::new(HPC)
                .args(["topo", "--ranks", value])
                .env_remove("NO_COLOR")
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .unwrap()
        };
        let (tty, status) = stderr_on_a_terminal(start);
        let out = start(Stdio::piped()).wait_with_output().unwrap();
        let pipe = String::from_utf8_lossy(&out.stderr).into_owned();
        for (text, code) in [(&tty, status.code()), (&pipe, out.status.code())] {
            assert_eq!(code, Some(2), "{text:?}");
            assert!(text.contains(shown), "{text:?}");
            assert!(
                !text.contains("\rHIDDEN")
                    && !text.contains('\u{202e}')
                    && !text.contains("pwned")
                    && !text.contains("\u{1b}[31m"),
                "{text:?}"
            );
        }
    }
}
