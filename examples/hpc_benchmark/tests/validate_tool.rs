//! `tools/validate.py` given hostile input: refused with one line and a status,
//! never a traceback, a hang or a run of the binary on values it refuses.
//!
//! Without `python3` the test says so and passes, unless `HPC_REQUIRE_PYTHON=1`
//! (set by `cargo xtask test`; set-up installs Python).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn tool() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/validate.py")
}

/// Whether `python3` runs ([`hpc_test_support::have_python`]).
fn have_python() -> bool {
    hpc_test_support::have_python("validate.py's tests")
}

/// `validate.py --hpc-benchmark /bin/false ARGS` (a binary that fails if it is
/// ever run), stdout to `stdout`, ended after 20 s.
fn validate(args: &[&str], stdout: Stdio) -> Output {
    let mut child = Command::new("python3")
        .arg(tool())
        .args(["--hpc-benchmark", "/bin/false"])
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(20) {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("validate.py {args:?} did not end in 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// A fresh directory, removed at the end of the test (and when it fails).
fn scratch(tag: &str) -> hpc_test_support::TmpDir {
    hpc_test_support::TmpDir::new("hpc-benchmark-validate", tag)
}

/// Values the binary refuses (NaN passed `--scale <= 0`, and the binary ran),
/// a `--results` that is a device, a FIFO (read without end: a hang), a
/// directory or holds a line that is no JSON (a traceback), and a `--keep` that
/// is a file: each named in one line, status 1 or 2, nothing run.
#[test]
fn hostile_arguments_are_named_not_a_traceback_or_a_hang() {
    if !have_python() {
        return;
    }
    let d = scratch("args");
    let fifo = d.join("fifo");
    hpc_test_support::mkfifo(&fifo);
    let bad = d.join("bad.jsonl");
    std::fs::write(&bad, "\nnot json\n").unwrap();
    // Pass 15: nested deeper than Python's recursion limit, a RecursionError's
    // traceback.
    let deep = d.join("deep.jsonl");
    std::fs::write(&deep, "[".repeat(100_000)).unwrap();
    let (f, b, dir) = (
        fifo.to_str().unwrap(),
        bad.to_str().unwrap(),
        d.to_str().unwrap(),
    );
    for (args, status, want) in [
        (vec!["--scale", "nan"], 2, "--scale nan"),
        (vec!["--t-sim", "inf"], 2, "--t-sim inf"),
        (vec!["--t-presim", "-1"], 2, "--t-presim -1"),
        (
            vec!["--layers", "3", "--baseline-hz", "nan", "1"],
            2,
            "--baseline-hz",
        ),
        (
            vec!["--results", "/dev/zero"],
            1,
            "--results /dev/zero: a character device, not a regular file",
        ),
        (vec!["--results", f], 1, "not a regular file"),
        (vec!["--results", dir], 1, "--results"),
        (vec!["--results", b], 1, "line 2 is not a JSON run"),
        (
            vec!["--results", deep.to_str().unwrap()],
            1,
            "line 1 is not a JSON run",
        ),
        (vec!["--keep", b], 2, "--keep"),
        // Pass 16: found missing after the first run, a traceback.
        (
            vec!["--results", "/nonexistent/r.jsonl"],
            2,
            "--results /nonexistent/r.jsonl: its folder does not exist",
        ),
        (
            vec!["--seeds-off", "1", "99999999999999999999999"],
            2,
            "--seeds-off 99999999999999999999999: a seed is a whole number",
        ),
        (vec!["--seeds-plastic", "-1"], 2, "--seeds-plastic -1:"),
        (
            vec!["--python", "/dev/null"],
            2,
            "--python /dev/null: not an executable file",
        ),
        (vec!["--python", f], 2, "not an executable file"),
        (
            vec!["--hpc-benchmark", "/dev/zero"],
            2,
            "--hpc-benchmark /dev/zero: not an executable file",
        ),
        (
            vec!["--before", "/nonexistent"],
            2,
            "--before /nonexistent: not an executable file",
        ),
    ] {
        let o = validate(&args, Stdio::null());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(status), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(
            !err.contains("Traceback") && !err.contains("running ours"),
            "{args:?}: {err}"
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// A finished run of `engine` (seed 1, lambda 0, scale 0.1) as `--results`
/// holds it, run by the build `build` ([`builds`]).
fn row(engine: &str, build: &str) -> String {
    serde_json::json!({
        "engine": engine, "seed": 1, "lambda": 0.0, "scale": 0.1, "t_presim": 50.0,
        "t_sim": 250.0, "build": build, "rate": 8.0, "mean_pa": 45.6096, "sd_pa": 0.0,
        "p5_pa": 45.6, "p95_pa": 45.6, "weights_from": "all", "build_s": 1.0, "sim_s": 2.0,
        "sim_cpu_s": 2.0, "wall_s": 3.0, "cpu_s": 3.0, "peak_rss": 1 << 20,
        "bytes_per_syn": 10.0, "load": 1.0,
    })
    .to_string()
}

/// Stands for the build of ours in [`row`]: replaced by [`with_builds`].
const OURS: &str = "BUILD-OF-OURS";
/// Stands for the build of NEST in [`row`]: replaced by [`with_builds`].
const NEST: &str = "BUILD-OF-NEST";

/// `text` with [`OURS`] and [`NEST`] replaced by the builds `validate.py`
/// gives `/bin/false` (the `--hpc-benchmark` of [`validate`]) and its
/// default `--python` (this `python3`), by its own `build_of`.
fn with_builds(text: &str) -> String {
    let o = Command::new("python3")
        .arg("-c")
        .arg(
            "import os, sys; sys.path.insert(0, sys.argv[1]); import validate as v; \
             print(v.build_of(v.Path('/bin/false'))); \
             print(v.build_of(os.path.abspath(sys.executable), v.HERE / 'nest_hpc_benchmark.py'))",
        )
        .arg(tool().parent().unwrap())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let mut lines = out.lines();
    let (ours, nest) = (lines.next(), lines.next());
    let (Some(ours), Some(nest)) = (ours, nest) else {
        panic!("no builds: {}", String::from_utf8_lossy(&o.stderr));
    };
    text.replace(OURS, ours).replace(NEST, nest)
}

/// A `--results` row is reused only for the build that ran it: one of an
/// earlier build of the binary (another `build`, or none, as every row before
/// pass 21) was reported as this build's run, status 0, the binary never run.
/// Now it is run again (here `/bin/false`, which fails: status 1), saying the
/// results hold a run of another build; the same rows with this build's
/// `build` are reused and nothing runs.
#[test]
fn a_results_row_of_another_build_is_run_again_not_reused() {
    if !have_python() {
        return;
    }
    let d = scratch("build");
    let results = d.join("runs.jsonl");
    let args = [
        "--layers",
        "2",
        "--seeds-off",
        "1",
        "--scale",
        "0.1",
        "--results",
        results.to_str().unwrap(),
    ];
    let mut no_build: serde_json::Value = serde_json::from_str(&row("ours", OURS)).unwrap();
    no_build.as_object_mut().unwrap().remove("build").unwrap();
    let no_build = no_build.to_string();
    for ours in [row("ours", "0123abcd"), no_build] {
        let text = with_builds(&format!("{ours}\n{}\n", row("NEST", NEST)));
        std::fs::write(&results, text).unwrap();
        let o = validate(&args, Stdio::piped());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{ours}: {err}");
        assert!(
            err.contains("running ours, seed 1, lambda 0.0, scale 0.1 (the results hold a run of another build)")
                && err.contains("/bin/false failed with status 1"),
            "{ours}: {err}"
        );
        assert!(!String::from_utf8_lossy(&o.stdout).contains("PASS"));
    }
    // This build's rows: reused, nothing run.
    let text = with_builds(&format!("{}\n{}\n", row("ours", OURS), row("NEST", NEST)));
    std::fs::write(&results, text).unwrap();
    let o = validate(&args, Stdio::piped());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("running"), "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("PASS"));
    std::fs::remove_dir_all(&d).unwrap();
}

/// A `--results` whose name holds a line break and a terminal's escape is
/// quoted in validate.py's messages, one line: it was written raw (pass 21,
/// as the spike tools' paths).
#[test]
fn a_results_name_with_a_line_break_is_quoted_in_one_line() {
    if !have_python() {
        return;
    }
    let d = scratch("odd-name");
    let results = d.join("r\nx\u{1b}[31m.jsonl");
    std::fs::write(&results, "not json\n").unwrap();
    let o = validate(&["--results", results.to_str().unwrap()], Stdio::null());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("r\\nx\\x1b[31m.jsonl': line 1 is not a JSON run"),
        "{err:?}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err:?}");
}

/// The report written to a full device (`> /dev/full`) ends with one line naming
/// standard output and status 1, not a traceback. The runs come from a results
/// file, so nothing is run.
#[test]
fn a_report_to_a_full_device_is_one_line_and_status_1() {
    if !have_python() {
        return;
    }
    let d = scratch("full");
    let results = d.join("runs.jsonl");
    std::fs::write(
        &results,
        with_builds(&format!("{}\n{}\n", row("ours", OURS), row("NEST", NEST))),
    )
    .unwrap();
    let args = [
        "--layers",
        "2",
        "--seeds-off",
        "1",
        "--scale",
        "0.1",
        "--results",
        results.to_str().unwrap(),
    ];
    // The report itself, from the results alone.
    let o = validate(&args, Stdio::piped());
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(text.contains("layer 2") && text.contains("PASS"), "{text}");
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = validate(&args, Stdio::from(full));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot write to standard output") && !err.contains("Traceback"),
        "{err}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// `tools/scaling_model.py` given hostile arguments: `--threads 0`, `--ranks 0` and
/// `--scale 0` ended in a ZeroDivisionError traceback, `--scale nan`, `-1` and
/// `1e300`, `--rate nan` and negative counts printed a table of NaN, negative or
/// 300-digit sizes with status 0, and a table to `/dev/full` ended in a traceback.
/// Each is refused by name with status 2 (a full device: one line, status 1); the
/// book's tables are unchanged.
#[test]
fn the_scaling_model_refuses_what_it_cannot_model() {
    if !have_python() {
        return;
    }
    let tool = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/scaling_model.py");
    let run = |args: &[&str], stdout: Stdio| {
        Command::new("python3")
            .arg(&tool)
            .args(args)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdout(stdout)
            .stderr(Stdio::piped())
            .output()
            .unwrap()
    };
    let huge = format!("1{}", "0".repeat(400));
    for (args, words) in [
        (&["--threads", "0"][..], "--threads 0: a thread count"),
        (&["--threads", "1", "-1"][..], "--threads -1:"),
        (&["--ranks", "0"][..], "--ranks 0: a rank count"),
        (&["--ranks", huge.as_str()][..], "(401 characters)"),
        (
            &["--scale", "0"][..],
            "--scale 0.0: must be a finite number",
        ),
        (&["--scale", "nan"][..], "--scale nan:"),
        (&["--scale", "-1"][..], "--scale -1.0:"),
        (&["--scale", "1e300"][..], "--scale 1e+300:"),
        (
            &["--rate", "nan"][..],
            "--rate nan: must be a finite number of Hz",
        ),
        (&["--rate", "-5"][..], "--rate -5.0:"),
    ] {
        let o = run(args, Stdio::piped());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(words), "{args:?}: {words:?} not in {err}");
        assert!(
            !err.contains("Traceback") && err.len() < 600,
            "{args:?}: {err}"
        );
        assert!(o.stdout.is_empty(), "{args:?}: a table was printed");
    }
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = run(&[], Stdio::from(full));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("scaling_model.py: cannot write to standard output")
            && !err.contains("Traceback"),
        "{err}"
    );
    // The book's figures (plasticity.md) are still printed.
    let o = run(
        &["--scale", "4", "--threads", "64", "--ranks", "2"],
        Stdio::piped(),
    );
    assert_eq!(o.status.code(), Some(0));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("| 2 | 64 | 90,000 |"), "{table}");
}

/// `tools/before-after.sh` given a round count that is no positive whole number,
/// or binaries that write no summary (not hpc_benchmark): one line naming it and
/// status 2 or 1, never Python's traceback of a results file that was never
/// written (pass 15).
#[test]
fn before_after_names_a_bad_round_count_or_a_binary_that_writes_no_summary() {
    if !have_python() {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/before-after.sh");
    for (rounds, status, want) in [
        ("0", 2, "ROUNDS 0: "),
        ("abc", 2, "ROUNDS abc: "),
        ("-1", 2, "ROUNDS -1: "),
        ("1", 1, "/bin/true wrote no summary.json"),
    ] {
        let o = Command::new("bash")
            .arg(&script)
            .args(["/bin/true", "/bin/true", rounds])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(status), "{rounds}: {err}");
        assert!(err.contains(want), "{rounds}: {err}");
        assert!(!err.contains("Traceback"), "{rounds}: {err}");
    }
}

/// `tools/before-after.sh` with flags that leave nothing to compare or a
/// time it did not simulate: `--no-spikes` said "spikes and weights
/// identical in every run" of runs that wrote no spike file, and `--stop-at`
/// divided CPU time by `t_presim + t_sim` it did not simulate. Now the first
/// says the weights alone were compared, the second is refused.
#[test]
fn before_after_says_what_it_compared_and_refuses_a_run_stopped_early() {
    if !have_python() {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/before-after.sh");
    let bin = env!("CARGO_BIN_EXE_hpc_benchmark");
    let small = [
        "--scale",
        "0.02",
        "--t-presim",
        "0",
        "--t-sim",
        "10",
        "--quiet",
    ];
    let o = Command::new("bash")
        .arg(&script)
        .args([bin, bin, "1"])
        .args(small)
        .arg("--no-spikes")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("weights identical in every run (no spike file to compare)")
            && !out.contains("spikes and weights"),
        "{out}"
    );
    let o = Command::new("bash")
        .arg(&script)
        .args([bin, bin, "1"])
        .args(small)
        .args(["--stop-at", "5"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("stopped before the end of its run (--stop-at?)")
            && !err.contains("Traceback"),
        "{err}"
    );
}

/// A binary that writes no summary (`/bin/true`) or another program's (brunel's
/// has no `t_presim`), a `--results` row that is no finished run, and relative
/// paths of the binary and of `--keep` (the docstring's
/// `target/release/hpc_benchmark`: the runs start in the work directory, where
/// it is not). Pass 16: a `FileNotFoundError` or `KeyError` traceback, a binary
/// "not found" with status 127, the outputs in `KEEP/KEEP`. Pass 21: a binary
/// that writes nothing given a `--keep` holding an earlier run's summary.
#[test]
fn a_binary_or_results_row_of_another_shape_and_relative_paths_are_handled() {
    if !have_python() {
        return;
    }
    let d = scratch("shape");
    // Writes a summary.json that is not hpc_benchmark's into its --out.
    let fake = d.join("fake.sh");
    std::fs::write(
        &fake,
        "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --out ] && out=$2; shift; done\n\
         mkdir -p \"$out\"; echo '{\"params\": {\"t_sim\": 20}}' > \"$out/summary.json\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let rows = d.join("rows.jsonl");
    std::fs::write(
        &rows,
        "{\"engine\": \"ours\", \"seed\": 1, \"lambda\": 0.0, \"scale\": 1.0}\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let o = Command::new("python3")
            .arg(tool())
            .args(["--layers", "2", "--seeds-off", "1", "--scale", "0.02"])
            .args(args)
            .current_dir(&d)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    for (args, want) in [
        (vec!["--hpc-benchmark", "/bin/true"], "/bin/true wrote no "),
        (
            vec!["--hpc-benchmark", "./fake.sh"],
            "fake.sh wrote is not the summary of a run",
        ),
        (
            vec!["--hpc-benchmark", "/bin/true", "--results", "rows.jsonl"],
            "line 1 is not a finished run of this tool (no finite number rate)",
        ),
    ] {
        let (status, err) = run(&args);
        assert_eq!(status, Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("Traceback"), "{args:?}: {err}");
    }
    // A relative --keep holds the outputs itself, not in KEEP/KEEP.
    let (_, err) = run(&["--hpc-benchmark", "./fake.sh", "--keep", "kept"]);
    assert!(d.join("kept/ours-1-0.0/summary.json").is_file(), "{err}");
    assert!(!d.join("kept/kept").exists(), "{err}");
    // A binary that writes nothing, given that --keep: the summary an earlier
    // invocation left there was read as its run's.
    let (status, err) = run(&["--hpc-benchmark", "/bin/true", "--keep", "kept"]);
    assert_eq!(status, Some(1), "{err}");
    assert!(
        err.contains("/bin/true did not write")
            && err.contains("ours-1-0.0/summary.json: the one there is an earlier run's"),
        "{err}"
    );
    // before-after.sh with a binary writing another program's summary.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/before-after.sh");
    let o = Command::new("bash")
        .arg(&script)
        .args(["./fake.sh", "./fake.sh", "1"])
        .current_dir(&d)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("./fake.sh wrote a summary.json that is not hpc_benchmark's"),
        "{err}"
    );
    assert!(!err.contains("Traceback"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}
