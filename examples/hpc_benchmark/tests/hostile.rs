//! Input a hostile user gives `hpc_benchmark`: refused with a message naming the
//! flag and status 1, never a panic, and nothing written.

use std::path::PathBuf;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_hpc_benchmark");

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hpc-benchmark-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Times so long that their steps do not fit a count (`1e300` ms is u64::MAX
/// steps, and warm-up plus recorded time overflowed: a panic in a debug build, a
/// wrapped count in a release one) are refused naming the flag, before anything
/// is written.
#[test]
fn times_beyond_any_count_of_steps_are_refused_not_a_panic() {
    let dir = tmpdir("huge-times");
    let out = dir.join("out");
    for times in [
        ["--t-presim", "1e300", "--t-sim", "1e300"],
        ["--t-presim", "10", "--t-sim", "1e300"],
        ["--t-presim", "1e300", "--t-sim", "10"],
        ["--t-presim", "1.7976931348623157e308", "--t-sim", "1e19"],
    ] {
        let o = Command::new(BIN)
            .args(["--scale", "0.02", "--quiet", "--out"])
            .arg(&out)
            .args(times)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{times:?}: {err}");
        assert!(!err.contains("panicked"), "{times:?}: {err}");
        let flag = if times[1] == "10" {
            "--t-sim"
        } else {
            "--t-presim"
        };
        assert!(
            err.contains(flag) && err.contains("2^53"),
            "{times:?}: {err}"
        );
        assert!(!out.exists(), "{times:?} wrote {}", out.display());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An STDP exponent that grows the weights beyond the finite numbers (`--mu 50`:
/// a weight of 45.6 pA to the 50th power) ends the run with an error naming
/// lambda and mu, and the run directory says it is incomplete: before, the
/// infinite and then NaN weights were clipped to 0 by the depression while their
/// input drove the network at 1,489 Hz, and the run reported success.
#[test]
fn weights_grown_beyond_the_finite_numbers_end_the_run_naming_the_rule() {
    let dir = tmpdir("weight-overflow");
    let out = dir.join("out");
    let o = Command::new(BIN)
        .args([
            "--scale",
            "0.1",
            "--t-presim",
            "5",
            "--t-sim",
            "50",
            "--quiet",
        ])
        .args(["--mu", "50", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("an STDP weight became inf") && err.contains("mu 50"),
        "{err}"
    );
    let run = std::fs::read_to_string(out.join("run.json")).unwrap();
    assert!(run.contains("\"incomplete\""), "{run}");
    assert!(!out.join("summary.json").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
