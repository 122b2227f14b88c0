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
    let mut child = hpc_logging(Stdio::from(slave), env);
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
    assert!(child.wait().unwrap().success());
    String::from_utf8_lossy(&got).into_owned()
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
