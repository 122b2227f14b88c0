//! The output directory belongs to one run: a second run on it fails at once, an
//! earlier run's files do not stay beside a new run's, a run stopped early says so,
//! and a restart of another model names what differs.

mod common;

use std::path::Path;
use std::process::Output;

use hpc_io::rundir::Status;
use hpc_test_support::example::{self, stderr};

const BIN: &str = env!("CARGO_BIN_EXE_microcircuit");

/// A fresh directory, removed at the end of the test (and when it fails).
fn tmpdir(tag: &str) -> hpc_test_support::TmpDir {
    hpc_test_support::TmpDir::new("microcircuit-rundir", tag)
}

fn run(out: &Path, extra: &[&str]) -> Output {
    example::command(BIN, &common::small_model("20"), out, extra)
        .output()
        .unwrap()
}

#[test]
fn a_held_directory_is_refused_and_an_early_stop_is_marked_incomplete() {
    let dir = tmpdir("own");
    let out = dir.join("out");
    let holder =
        hpc_io::rundir::RunDir::create(&out, hpc_io::rundir::RunInfo::new("holder")).unwrap();
    let o = run(&out, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("is in use by"), "{}", stderr(&o));
    holder.finish(Status::Complete).unwrap();

    let o = run(&out, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.join("spikes.spk").exists());
    // Stopped early in the same directory: the complete spike file is gone, and the
    // manifest says where the run stopped.
    let o = run(&out, &["--stop-at", "30", "--checkpoint-every", "10"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!out.join("spikes.spk").exists());
    let m = hpc_io::rundir::inspect(&out).unwrap().unwrap();
    assert_eq!(
        m.manifest.status,
        Status::Incomplete {
            reason: "stopped early (--stop-at)".into(),
            stopped_at: Some("30.0 ms".into()),
        }
    );
    // A restart of another model names the parameter and both values.
    let o = run(
        &dir.join("again"),
        &[
            "--seed",
            "7",
            "--restart",
            &out.join("checkpoints").display().to_string(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is of a different model: seed 55 -> 7"),
        "{}",
        stderr(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The summary's first line and the report's note write a tiny scaling in
/// exponent form: `--k-scaling 1e-300` was written out in 301 digits.
#[test]
fn a_tiny_scaling_is_written_short_in_the_summary_and_the_report() {
    let out = tmpdir("tiny-scaling");
    let model = [
        "--n-scaling",
        "0.015",
        "--k-scaling",
        "1e-300",
        "--t-presim",
        "0",
        "--t-sim",
        "20",
    ];
    let o = std::process::Command::new(BIN)
        .args(model)
        .args(["--no-pin", "-q", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("K_scaling 1e-300:"), "{stdout}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("K_scaling 1e-300,"),
        "{}",
        &html[..html.len().min(2000)]
    );
    assert!(!stdout.contains("00000000000000000000") && !html.contains("00000000000000000000"));
}

/// A run stopped before its warm-up ended recorded no time: it has no rates
/// and no real-time factor, said in words (the table said 0.000 Hz for every
/// population and the factor 0.000, a silent network's and an infinitely fast
/// run's); its summary's `window_ms` is 0.
#[test]
fn a_run_stopped_in_its_warm_up_says_it_has_no_rates() {
    let dir = tmpdir("stopped-warm-up");
    let out = dir.join("out");
    let o = run(&out, &["--stop-at", "10"]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{said}{}", stderr(&o));
    assert!(
        said.contains(
            "rates             none: the run stopped at 10.0 ms, before its warm-up of 20 ms ended"
        ) && said.contains("real-time factor  none")
            && !said.contains("population   neurons"),
        "{said}"
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["stats"]["window_ms"], 0.0);
}
