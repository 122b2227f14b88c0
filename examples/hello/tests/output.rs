//! The result lines are not silently lost: stdout on a full device is an error that
//! names it; a reader that goes away (`| head`) is not.

use std::process::{Command, Stdio};

/// The smallest run.
const ARGS: &[&str] = &[];

const BIN: &str = env!("CARGO_BIN_EXE_hello");

#[test]
fn stdout_on_a_full_device_fails_naming_it() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = Command::new(BIN)
        .args(ARGS)
        .env("HPC_LOG", "warn")
        .env_remove("RUST_BACKTRACE")
        .stdout(full)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot write standard output") && err.contains("No space left"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_closed_stdout_is_not_an_error() {
    let mut c = Command::new(BIN)
        .args(ARGS)
        .env("HPC_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    drop(c.stdout.take());
    assert!(c.wait().unwrap().success());
}
