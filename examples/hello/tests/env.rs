//! `hello` with environment variables that are not UTF-8: one of someone else's is
//! skipped (the program runs), one of ours is a clear error naming it (no panic).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output};

const HELLO: &str = env!("CARGO_BIN_EXE_hello");

/// `hello` alone (a singleton), without the caller's `HPC_*` settings, plus `env`.
fn hello(env: &[(&[u8], &[u8])]) -> Output {
    let mut c = Command::new(HELLO);
    for v in hpc_env::ALL {
        c.env_remove(v.name);
    }
    c.env("HPC_BOOTSTRAP", "singleton").env("HPC_BIND", "0");
    for (k, v) in env {
        c.env(OsStr::from_bytes(k), OsStr::from_bytes(v));
    }
    c.output().unwrap()
}

#[test]
fn a_foreign_variable_that_is_not_utf8_is_skipped() {
    let o = hello(&[(b"FOO", b"\xff"), (b"BAR\xff", b"x")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "stderr: {err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("hello from rank 0 of 1"));
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn an_hpc_variable_that_is_not_utf8_is_a_clear_error() {
    let o = hello(&[(b"HPC_TIMEOUT", b"3\xff")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("HPC_TIMEOUT") && err.contains("not valid UTF-8"),
        "{err}"
    );
}

#[test]
fn a_yes_no_or_number_setting_that_is_neither_is_warned_about_not_ignored() {
    for (k, v, words) in [
        (
            &b"HPC_BIND"[..],
            &b"false"[..],
            "HPC_BIND=\"false\" is ignored",
        ),
        (
            b"HPC_THREADS",
            b"four",
            "HPC_THREADS=\"four\" is not a whole number",
        ),
        // 0 parsed as a number, then made the placement fail behind a warning that
        // did not name the variable: the rank ran unplaced.
        (
            b"HPC_THREADS",
            b"0",
            "HPC_THREADS=0: a rank needs at least 1 thread; using the default",
        ),
    ] {
        let mut c = Command::new(HELLO);
        for var in hpc_env::ALL {
            c.env_remove(var.name);
        }
        let o = c
            .env("HPC_BOOTSTRAP", "singleton")
            .env("HPC_LOG", "warn")
            .env(OsStr::from_bytes(k), OsStr::from_bytes(v))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "stderr: {err}");
        assert!(err.contains(words), "{err}");
        assert!(!err.contains("cannot plan"), "{err}");
    }
}

/// `HPC_PROGRESS_SCHED` that is none of `nice`, `fifo`, `none` was taken for `nice`
/// without a word; it is warned about by name (here with the thread engine, whose
/// progress thread reads it).
#[test]
fn a_progress_policy_that_is_none_of_three_is_warned_about() {
    let mut c = Command::new(HELLO);
    for var in hpc_env::ALL {
        c.env_remove(var.name);
    }
    let o = c
        .env(hpc_env::BOOTSTRAP, "singleton")
        .env(hpc_env::LOG, "warn")
        .env(hpc_env::ENGINE, "thread")
        .env(hpc_env::PROGRESS_SCHED, "realtime")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "stderr: {err}");
    assert!(
        err.contains("HPC_PROGRESS_SCHED=\"realtime\" is ignored: not `nice`, `fifo` or `none`"),
        "{err}"
    );
}

/// As many threads as `HPC_THREADS` may ask for (65,536) on this machine's few
/// cores: the placement line names them as a cpulist and a count, in a line.
#[test]
fn many_threads_are_named_in_a_line() {
    let o = hello(&[(hpc_env::THREADS.as_bytes(), b"65536")]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{:.300}",
        String::from_utf8_lossy(&o.stderr)
    );
    let line = out
        .lines()
        .find(|l| l.starts_with("rank 0: cores"))
        .unwrap();
    assert!(
        line.len() < 300 && line.contains("(65536 threads)"),
        "{line:.300}"
    );
}
