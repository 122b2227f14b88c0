//! The result lines are not silently lost: stdout on a full device is an error that
//! names it; a reader that goes away (`| head`) is not.

use std::process::Command;

use hpc_test_support::output;

#[test]
fn stdout_on_a_full_device_fails_naming_it_and_a_closed_one_does_not() {
    // The smallest run.
    output::assert_run_lines_not_lost(env!("CARGO_BIN_EXE_hello"), &[]);
}

#[test]
fn an_error_is_one_line_naming_the_program_even_under_rust_backtrace() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_hello"))
        .env("RUST_BACKTRACE", "1")
        .stdout(full)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.starts_with("hello: error: "), "{err}");
    assert!(!err.contains("backtrace"), "{err}");
}

/// The last message is one write: `hpc run` stopping a rank between the pieces of
/// `writeln!` left `hello: error: ` cut short.
#[test]
fn the_last_message_is_written_whole() {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hello"));
    c.env(hpc_env::ENGINE, "bogus");
    output::assert_last_words_whole(&mut c, "hello", 1, "bogus");
}

/// An argument is bad input (status 2), said before `init` (a bad engine in the
/// environment is not reached first), its value cut; `--help` says how to run it.
#[test]
fn an_argument_is_refused_not_ignored() {
    let long = format!("--{}", "v".repeat(100_000));
    for (arg, shown) in [
        ("--verbose", "--verbose:"),
        (long.as_str(), "more characters"),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_hello"))
            .arg(arg)
            .env(hpc_env::ENGINE, "bogus")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err:.300}");
        assert!(
            err.contains("hello takes no arguments") && err.contains(shown),
            "{err:.300}"
        );
        assert!(err.len() < 300, "a message of {} bytes", err.len());
        assert!(o.stdout.is_empty(), "it ran anyway: {:?}", o.stdout);
    }
    let o = Command::new(env!("CARGO_BIN_EXE_hello"))
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("hpc run -n 4 -- hello"));
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_hello"))
        .arg("--help")
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("standard output"));
}

/// An engine this build has not is refused before the program's work: `hello`
/// printed its greeting and placement lines first, refused only at `ctx.comm()`.
#[test]
fn an_unknown_engine_is_refused_before_any_output() {
    let o = Command::new(env!("CARGO_BIN_EXE_hello"))
        .env(hpc_env::ENGINE, "bogus")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("HPC_ENGINE=\"bogus\" is not an engine"),
        "{err}"
    );
    assert!(
        o.stdout.is_empty(),
        "it ran anyway: {:?}",
        String::from_utf8_lossy(&o.stdout)
    );
}

/// The proxy's settings are refused with the engine, before the program's work:
/// `hello` printed its lines, and only its `ctx.comm()` refused them.
#[test]
fn bad_proxy_settings_are_refused_before_any_output() {
    for (var, value, said) in [
        (
            hpc_env::COLL_PROXY_MAX_SCRATCH,
            "-1",
            "is not a size in bytes",
        ),
        (
            hpc_env::COLL_PROXY_PLACEMENT,
            "moon",
            "expected host or dpu",
        ),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_hello"))
            .env(hpc_env::ENGINE, "proxy")
            .env(var, value)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{var}: {err}");
        assert!(err.contains(var) && err.contains(said), "{err}");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.stdout.is_empty(), "{var}: it ran anyway: {out}");
    }
}
