//! The `show_schedule` example as a user runs it: bad arguments are refused with
//! status 2 and a message, never a panic, a default taken in silence, or an
//! allocation of the size a typo asks for.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::{Command, Output};

/// The example's binary: `cargo test` builds the examples beside the tests
/// (`target/debug/examples/`).
fn show_schedule() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    dir.join("examples").join("show_schedule")
}

fn run(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(show_schedule()).args(args).output().unwrap()
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

#[test]
fn bad_arguments_are_refused_with_status_2() {
    let bad: [&[&std::ffi::OsStr]; 5] = [
        // Not UTF-8: a message, not a panic (status 101).
        &[
            os("allreduce"),
            os("ring"),
            os("4"),
            std::ffi::OsStr::from_bytes(b"\xff"),
        ],
        // A rank that is not a number is not "every rank"; a root not rank 0.
        &[
            os("allgather"),
            os("ring"),
            os("4"),
            os("16"),
            os("--rank"),
            os("x"),
        ],
        &[
            os("broadcast"),
            os("binomial"),
            os("4"),
            os("16"),
            os("--root"),
            os("-1"),
        ],
        // Sizes that would allocate terabytes, or overflow.
        &[os("alltoall"), os("pairwise"), os("60000"), os("100000000")],
        &[
            os("alltoall"),
            os("auto"),
            os("4"),
            os("18446744073709551615"),
        ],
    ];
    for args in bad {
        let o = run(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    let o = run(&[os("allgather"), os("ring"), os("2"), os("2")]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("simulated: 1 rounds"));
}
