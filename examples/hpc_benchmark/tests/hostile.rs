//! Input a hostile user gives `hpc_benchmark`: refused with a message naming the
//! flag and status 1, never a panic, and nothing written.

use std::path::PathBuf;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_hpc_benchmark");

/// A fresh directory, removed at the end of the test (and when it fails).
fn tmpdir(tag: &str) -> hpc_test_support::TmpDir {
    hpc_test_support::TmpDir::new("hpc-benchmark", tag)
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

/// `hpc_benchmark --scale 0.02 --t-presim 0 --t-sim 20 --quiet --out OUT ARGS`.
fn small_cmd(out: &std::path::Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args([
        "--scale",
        "0.02",
        "--t-presim",
        "0",
        "--t-sim",
        "20",
        "--quiet",
    ])
    .arg("--out")
    .arg(out)
    .args(args);
    c
}

/// [`small_cmd`], run to its end.
fn small(out: &std::path::Path, args: &[&str]) -> std::process::Output {
    small_cmd(out, args).output().unwrap()
}

/// A restart that cannot continue its checkpoint with this run's options (a
/// `--stop-at` before the checkpoint, a spike file to continue from a checkpoint
/// written with `--no-spikes`) is refused naming the flag before the output
/// directory is touched: before, the network was built and the earlier run's
/// spikes.spk, summary.json and weights.svg removed, then the run failed with
/// "the run resumes at step 100 but is asked to stop at step 50". A run stopped
/// with `--no-spikes` says it has no spike file (it named a `.partial` file that
/// does not exist).
#[test]
fn a_restart_its_options_cannot_continue_is_refused_before_the_output_is_touched() {
    let dir = tmpdir("restart-options");
    let with_spikes = dir.join("with");
    let without = dir.join("without");
    let out = dir.join("out");
    let stop = ["--checkpoint-every", "10", "--stop-at", "10"];
    let o = small(&with_spikes, &stop);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = small(&without, &[&stop[..], &["--no-spikes"]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains("stopped at 10.0 ms (no spike file: --no-spikes)")
            && !said.contains(".partial"),
        "{said}"
    );
    let o = small(&out, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let files = ["spikes.spk", "summary.json", "weights.svg"];
    let before: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(out.join(f)).unwrap())
        .collect();
    let ck = |d: &PathBuf| d.join("checkpoints").to_str().unwrap().to_string();
    for (args, want) in [
        (
            vec![
                "--restart".to_string(),
                ck(&with_spikes),
                "--stop-at".into(),
                "5".into(),
            ],
            vec!["--stop-at 5 ms", "--restart", "10 ms, step 100"],
        ),
        (
            vec!["--restart".to_string(), ck(&without)],
            vec!["no spike file to continue", "--no-spikes"],
        ),
    ] {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = small(&out, &a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(want.iter().all(|w| err.contains(w)), "{args:?}: {err}");
        for (f, b) in files.iter().zip(&before) {
            assert_eq!(
                std::fs::read(out.join(f)).ok().as_ref(),
                Some(b),
                "{args:?} changed {f}"
            );
        }
    }
    // The checkpoint without spikes continues with --no-spikes.
    let o = small(
        &dir.join("again"),
        &["--restart", &ck(&without), "--no-spikes"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A checkpoint directory or a restart that names a device is refused naming the
/// flag: before, "cannot create the checkpoint directory /dev/null: File exists"
/// and "cannot read the directory /dev/zero: Not a directory" named neither
/// `--checkpoint-dir` nor `--restart`.
#[test]
fn devices_given_for_checkpoints_are_refused_naming_the_flag() {
    let dir = tmpdir("device-checkpoints");
    for (args, want) in [
        (
            ["--checkpoint-every", "10", "--checkpoint-dir", "/dev/null"],
            "--checkpoint-dir",
        ),
        (
            ["--restart", "/dev/zero", "--seed", "1"],
            "--restart /dev/zero",
        ),
    ] {
        let o = small(&dir.join("out"), &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(want) && !err.contains("File exists"),
            "{args:?}: {err}"
        );
    }
    // A link planted at the checkpoint directory's lock: refused naming the flag
    // (the advice was "choose another output directory").
    let ck = dir.join("ck");
    std::fs::create_dir_all(&ck).unwrap();
    std::os::unix::fs::symlink("/dev/null", ck.join("checkpoints.lock")).unwrap();
    let o = small(
        &dir.join("out"),
        &[
            "--checkpoint-every",
            "10",
            "--checkpoint-dir",
            ck.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("symbolic link") && err.contains("choose another --checkpoint-dir"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A checkpoint directory at the name of one of the run's own files in its output
/// directory (`OUT/summary.json`, `OUT/run.json`) is refused before the run,
/// naming the flag: before, the whole run ran, then "cannot replace
/// OUT/summary.json: it is a directory", and the next run into OUT was refused
/// for a summary.json no run wrote (pass 15).
#[test]
fn a_checkpoint_directory_at_an_output_of_the_run_is_refused_before_it() {
    let dir = tmpdir("checkpoint-at-output");
    let out = dir.join("out");
    for name in ["summary.json", "weights.svg", "run.json"] {
        let ck = out.join(name);
        let o = small(
            &out,
            &[
                "--checkpoint-every",
                "10",
                "--checkpoint-dir",
                ck.to_str().unwrap(),
            ],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{name}: {err}");
        assert!(
            err.contains("--checkpoint-dir") && err.contains("one of the files this run writes"),
            "{name}: {err}"
        );
        assert!(!ck.exists() || name == "run.json", "{name} was made");
        assert!(!out.join("summary.json").exists(), "{name}: the run ran");
    }
    // The run then goes into that directory as into any.
    let o = small(&out, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `HPC_TRACE=DIR` (what `hpc run --trace FILE` sets) records the rank's timeline,
/// and a bad one is refused naming it: before, the binary's own log subscriber
/// left the setting ignored with a warning, and `hpc run --trace` merged none of
/// its ranks.
#[test]
fn hpc_trace_records_the_timeline() {
    let dir = tmpdir("trace");
    let traces = dir.join("trace.d");
    let o = small_cmd(&dir.join("out"), &[])
        .env("HPC_TRACE", &traces)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("HPC_TRACE is set but"), "{err}");
    let files: Vec<_> = std::fs::read_dir(&traces)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, ["rank-0.json"], "{files:?}");
    let trace = std::fs::read_to_string(traces.join("rank-0.json")).unwrap();
    assert!(
        trace.contains("\"traceEvents\"") && trace.contains("\"ph\":\"X\""),
        "{trace}"
    );
    let o = small_cmd(&dir.join("out2"), &[])
        .env("HPC_TRACE", "/dev/null")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("HPC_TRACE") && err.contains("not a directory"),
        "{err}"
    );
    // At the name of one of the run's files (pass 15: "out3 holds spikes.spk that
    // no earlier run of this program wrote", naming no variable).
    let out3 = dir.join("out3");
    let o = small_cmd(&out3, &[])
        .env("HPC_TRACE", out3.join("spikes.spk"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("HPC_TRACE=") && err.contains("one of the files this run writes"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A usage error quoting a value of 100,000 characters is cut, and `--help`
/// on a full device is an error, not a silent 0.
#[test]
fn the_usage_text_is_cut_and_its_write_checked() {
    hpc_test_support::example::assert_usage_is_cut_and_checked(BIN, &["BIG"]);
}

/// A run stopped before its warm-up ended recorded no time: it has no mean
/// rate, said in words and `null` in summary.json (it said "0.00 Hz (… after
/// the warm-up)" and wrote 0.0, a silent network's rate).
#[test]
fn a_run_stopped_in_its_warm_up_has_no_rate() {
    let dir = tmpdir("stopped-warm-up");
    let out = dir.join("out");
    let o = Command::new(BIN)
        .args(["--scale", "0.02", "--t-presim", "10", "--t-sim", "20"])
        .args(["--stop-at", "5", "--no-plot", "--quiet", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{said}");
    assert!(
        said.contains(
            "mean rate         none: the run stopped at 5.0 ms, before its warm-up of 10 ms ended"
        ),
        "{said}"
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert!(
        summary["mean_rate_hz"].is_null(),
        "{}",
        summary["mean_rate_hz"]
    );
    // Stopped after it: a rate.
    let out = dir.join("after");
    let o = small(&out, &["--stop-at", "10", "--no-plot"]);
    assert!(o.status.success());
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert!(
        summary["mean_rate_hz"].is_f64(),
        "{}",
        summary["mean_rate_hz"]
    );
}

/// The delay rows of a network started with `--allow-oversize` where the
/// memory available cannot hold them (`MemAvailable` of 1 KiB, a copy of
/// `/proc/meminfo` mounted over it): an error naming the rows, status 1; they
/// were made by `DelayRing::new`, which panicked, status 101.
#[test]
fn delay_rows_beyond_the_memory_available_are_an_error_not_a_panic() {
    let dir = tmpdir("rings");
    let out = dir.join("out");
    let out_s = out.display().to_string();
    let argv = [
        BIN,
        "--scale",
        "0.02",
        "--t-presim",
        "0",
        "--t-sim",
        "20",
        "--quiet",
        "--threads",
        "1",
        "--allow-oversize",
        "--out",
        &out_s,
    ];
    let Some(o) = hpc_test_support::example::run_with_mem_available(&dir, 1, &argv) else {
        return;
    };
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("rows (delays up to"), "{err}");
}

/// A checkpoint that cannot be written (every file limited to 4096 bytes: a
/// write past it fails as on a full disk) ends the run naming the time it had
/// completed, the checkpoint's: it said "stopped after 9.0 ms" of the step-100
/// (10 ms) checkpoint, the time of the interval before.
#[test]
fn a_checkpoint_that_cannot_be_written_names_the_time_it_was_written_at() {
    let dir = tmpdir("ckpt-efbig");
    let ck = dir.join("ck");
    let mut c = small_cmd(
        &dir.join("out"),
        &[
            "--no-plot",
            "--no-spikes",
            "--checkpoint-every",
            "10",
            "--checkpoint-dir",
            ck.to_str().unwrap(),
        ],
    );
    let o = hpc_test_support::example::limit_file_size(&mut c, 4096)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("stopped after 10.0 ms: ") && err.contains("step-0000000100"),
        "{err}"
    );
    assert!(err.contains("File too large"), "{err}");
}

/// A `--restart` refused once the output directory is locked (here one that
/// does not exist) leaves no directory behind when the run made it: it left
/// OUT holding only an empty `run.lock`.
#[test]
fn a_refused_restart_leaves_no_output_directory_it_made() {
    let dir = tmpdir("restart-made");
    let out = dir.join("out");
    let o = small(&out, &["--no-plot", "--restart", "/nonexistent/ck"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("--restart /nonexistent/ck"), "{err}");
    assert!(!out.exists(), "{err}");
}
