//! Numbers from the command line that cannot be used: each is refused before
//! anything is allocated, with a message naming the flag, never an abort or a check
//! silently turned off.

use std::process::{Command, Output};

const FFT3D: &str = env!("CARGO_BIN_EXE_fft3d");

fn fft3d(args: &[&str]) -> Output {
    Command::new(FFT3D)
        .args(args)
        .env("HPC_BOOTSTRAP", "singleton")
        .env("HPC_BIND", "0")
        .output()
        .unwrap()
}

fn refused(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "expected a refusal: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("memory allocation"),
        "{err}"
    );
    err
}

#[test]
fn a_grid_larger_than_memory_is_refused_with_the_bytes() {
    let e = refused(&fft3d(&["--n", "100000"]));
    assert!(
        e.contains("--n 100000 needs about 144000000000000000 bytes")
            && e.contains("bytes are available"),
        "{e}"
    );
    let e = refused(&fft3d(&["--n", "100000", "--no-check"]));
    assert!(
        e.contains("--n 100000 needs about 128000000000000000 bytes"),
        "{e}"
    );
}

#[test]
fn a_tolerance_that_is_not_a_finite_number_is_refused() {
    for t in ["NaN", "inf", "-1"] {
        let e = refused(&fft3d(&["--n", "8", &format!("--tolerance={t}")]));
        assert!(
            e.contains("--tolerance must be a finite number >= 0"),
            "{t}: {e}"
        );
    }
    // Pass 16: written out in 301 digits.
    let e = refused(&fft3d(&["--n", "8", "--tolerance=-1e300"]));
    assert!(e.contains("got -1e300") && e.len() < 200, "{e}");
    // A usable tolerance still runs and checks.
    let o = fft3d(&[
        "--n",
        "8",
        "--reps",
        "1",
        "--warmup",
        "0",
        "--tolerance",
        "1e-9",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn endless_repetitions_are_refused_and_a_full_stderr_is_no_panic() {
    for flag in ["--reps", "--warmup"] {
        let e = refused(&fft3d(&["--n", "8", flag, "18446744073709551615"]));
        assert!(e.contains("at most 100000"), "{e}");
    }
    // The error cannot be said (stderr on a full device): still status 1.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = Command::new(FFT3D)
        .args(["--n", "0"])
        .env("HPC_BOOTSTRAP", "singleton")
        .stderr(full)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn the_result_line_reports_the_batches_that_ran_and_a_huge_grid_is_refused() {
    // An 8^3 grid on one rank has 8 planes per transpose: at most 8 batches run,
    // whatever --batches asks.
    let o = fft3d(&["--n", "8", "--batches", "18446744073709551615"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(" batches=8 "), "{out}");
    // A process grid whose size overflows: an error, not a panic.
    let err = refused(&fft3d(&["--n", "8", "--grid", "4294967296x4294967296"]));
    assert!(err.contains("is too many"), "{err}");
}

/// A usage error quoting a value of 100,000 characters is cut, and `--help`
/// on a full device is an error, not a silent 0.
#[test]
fn the_usage_text_is_cut_and_its_write_checked() {
    hpc_test_support::example::assert_usage_is_cut_and_checked(FFT3D, &["BIG"]);
}

/// Under `--no-check` the result line's errors are `unchecked`, which no
/// reader takes for a number: it wrote `rel_err=NaN max_err=NaN`, which
/// `float()` and `str::parse::<f64>` read as a number (a check that came out
/// NaN). A checked run still writes its errors as numbers.
#[test]
fn an_unchecked_run_writes_no_number_for_its_errors() {
    let result = |o: &Output| {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        out.lines()
            .find(|l| l.starts_with("result "))
            .unwrap_or_else(|| panic!("no result line: {out}"))
            .to_string()
    };
    let field = |line: &str, key: &str| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")).map(str::to_string))
            .unwrap_or_else(|| panic!("no {key} in {line}"))
    };
    let small = ["--n", "8", "--reps", "1", "--warmup", "0"];
    let line = result(&fft3d(&[&small[..], &["--no-check"]].concat()));
    for key in ["rel_err", "max_err"] {
        let v = field(&line, key);
        assert_eq!(v, "unchecked", "{line}");
        assert!(v.parse::<f64>().is_err(), "{line}");
    }
    let line = result(&fft3d(&small));
    for key in ["rel_err", "max_err"] {
        let v: f64 = field(&line, key).parse().unwrap();
        assert!(v < 1e-12, "{line}");
    }
}

/// A run whose result fails its check ends before anything is timed, as the
/// README says, and prints no `result` line: it went on timing and printed
/// one like a good run's (`rel_err=2.1e-16` under `--tolerance 0`), status
/// 1 only at the end, and a reader of the output (benches/fft3d.sh takes
/// every `result` line) took it for a measurement.
#[test]
fn a_run_that_fails_its_check_times_nothing_and_prints_no_result() {
    let o = fft3d(&[
        "--n",
        "8",
        "--reps",
        "1",
        "--warmup",
        "0",
        "--tolerance",
        "0",
    ]);
    let err = refused(&o);
    assert!(
        err.contains("exceeds the tolerance 0.0e0: nothing was timed"),
        "{err}"
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("result "), "{out}");
}

/// `--tolerance` with `--no-check` would change nothing (only the check uses
/// it): a usage error naming both, as every setting that would be ignored
/// (it ran, status 0, the tolerance taken and never used).
#[test]
fn a_tolerance_without_the_check_is_refused() {
    let o = fft3d(&["--n", "8", "--no-check", "--tolerance", "1e-9"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--no-check") && err.contains("--tolerance"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}

/// `--tolerance -1` (a negative number after its flag) is refused by the
/// flag's own check, not clap's "unexpected argument '-1' found".
#[test]
fn a_negative_tolerance_after_its_flag_is_named() {
    let e = refused(&fft3d(&["--n", "8", "--tolerance", "-1"]));
    assert!(
        e.contains("--tolerance must be a finite number >= 0, got -1"),
        "{e}"
    );
}
