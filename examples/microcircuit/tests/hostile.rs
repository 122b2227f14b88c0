//! Bad input: the program refuses it with a message that names the problem, before
//! it builds anything (it exits at once and writes no output directory).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_microcircuit");

/// 1 % of the neurons and of the in-degrees, no warm-up: a network that builds at
/// once (the runs add their `--t-sim`).
const TINY: [&str; 6] = [
    "--n-scaling",
    "0.01",
    "--k-scaling",
    "0.01",
    "--t-presim",
    "0",
];

fn refused(args: &[&str], toml: Option<&str>, expect: &str) {
    let dir = std::env::temp_dir().join(format!(
        "microcircuit-hostile-{}-{}",
        std::process::id(),
        expect.len() * 131 + args.len()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out: PathBuf = dir.join("out");
    let mut cmd = Command::new(BIN);
    cmd.args(args).arg("--out").arg(&out).arg("--quiet");
    if let Some(t) = toml {
        let f = dir.join("p.toml");
        std::fs::write(&f, t).unwrap();
        cmd.arg("--config").arg(&f);
    }
    let t0 = Instant::now();
    let o = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "accepted {args:?} {toml:?}");
    assert!(err.contains(expect), "expected `{expect}` in: {err}");
    assert!(!out.exists(), "wrote {} before refusing", out.display());
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t0.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_scalings_are_refused() {
    refused(&["--n-scaling", "0"], None, "n_scaling must be in (0, 1]");
    refused(&["--n-scaling", "1.5"], None, "n_scaling must be in (0, 1]");
    refused(
        &["--k-scaling", "-0.1"],
        None,
        "k_scaling must be in (0, 1]",
    );
    refused(&["--k-scaling", "NaN"], None, "k_scaling");
    // Huge and tiny numbers are named in exponent form, not in 300 digits.
    refused(
        &["--n-scaling", "1e-300"],
        None,
        "n_scaling 1e-300 leaves population",
    );
    refused(
        &["--t-sim", "1e300"],
        None,
        "t_presim + t_sim is 1e301 steps",
    );
    refused(
        &["--threads", "100000"],
        None,
        "--threads 100000 is more than the limit",
    );
}

#[test]
fn bad_files_are_refused() {
    refused(
        &[],
        Some("[populations.L7E]\nn_full = 10\nk_ext = 1.0\nfull_mean_rate = 1.0\nv0_mean = -60.0\nv0_std = 1.0\n"),
        "unknown population `L7E`",
    );
    refused(
        &[],
        Some("[conn_probs]\nL4I = [0.1, -0.2, 0, 0, 0, 0, 0, 0]\n"),
        "conn_probs.L4I from L23I is -0.2",
    );
    refused(&[], Some("delay_inh_mean = 0.01\n"), "below the time step");
    refused(&[], Some("dt = 0.1\nnot_a_key = 3\n"), "not_a_key");
    refused(&[], Some("n_scaling = ["), "TOML");
    refused(&["--t-sim", "-5"], None, "t_sim must be > 0");
}

/// A refusal of `--config` names the flag as well as the file, and a value
/// the model refuses names the file (and the flags over it) when a file set
/// it: they said "/tmp is a directory, not a regular file" and "dt must be >
/// 0, got -1", the flag or the file unnamed.
#[test]
fn config_refusals_name_the_flag_and_the_file() {
    refused(&[], Some("dt = -1\n"), "p.toml: dt must be > 0, got -1");
    refused(&[], Some("dt = -1\n"), "error: --config /");
    refused(
        &["--t-sim", "10", "--dc"],
        Some("dt = -1\n"),
        "p.toml with --t-sim, --dc: dt must be > 0",
    );
    refused(&[], Some("dt = [\n"), "p.toml: not valid TOML");
    let o = Command::new(BIN)
        .args(["--config", "/", "--out", "/nonexistent/out"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error: --config /: / is a directory, not a regular file"),
        "{err}"
    );
}

/// The last message is one write: `hpc run` stopping a rank between the pieces of
/// `writeln!` left `microcircuit: error: ` cut short.
#[test]
fn the_last_message_is_written_whole() {
    let out = std::env::temp_dir().join(format!("microcircuit-last-words-{}", std::process::id()));
    let mut c = Command::new(BIN);
    c.args(["--n-scaling", "NaN", "--out"]).arg(&out);
    hpc_test_support::output::assert_last_words_whole(
        &mut c,
        "microcircuit",
        1,
        "n_scaling must be a finite number",
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// Settings that would change nothing are refused, not ignored: a `--stop-at` or
/// `--checkpoint-every` beyond the end of the run, and `--checkpoint-dir` or
/// `--checkpoint-keep` without `--checkpoint-every`.
#[test]
fn settings_that_would_change_nothing_are_refused() {
    let run = [&TINY[..], &["--t-sim", "10"]].concat();
    let with = |extra: &[&'static str]| {
        let mut a = run.to_vec();
        a.extend_from_slice(extra);
        a
    };
    for (extra, why) in [
        (
            ["--stop-at", "30"],
            "--stop-at 30 ms is beyond the end of the run (10 ms",
        ),
        (
            ["--checkpoint-every", "11"],
            "--checkpoint-every 11 ms is beyond the end of the run (10 ms",
        ),
        (["--checkpoint-keep", "2"], "--checkpoint-every"),
        (["--checkpoint-dir", "ck"], "--checkpoint-every"),
    ] {
        refused(&with(&extra), None, why);
    }
}

/// An `HPC_LOG` that is not a log filter is warned about by name (it was dropped
/// without a word); the run goes on.
#[test]
fn a_log_filter_that_is_not_one_is_named() {
    let out = std::env::temp_dir().join(format!("microcircuit-log-filter-{}", std::process::id()));
    let o = Command::new(BIN)
        .args(TINY)
        .args(["--t-sim", "5"])
        .args(["--quiet", "--no-plot", "--out"])
        .arg(&out)
        .env(hpc_runtime::env::LOG, "[[[")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("HPC_LOG=\"[[[\" is not a log filter"), "{err}");
    let _ = std::fs::remove_dir_all(&out);
}

/// A usage error quoting a value of 100,000 characters is cut, and `--help`
/// on a full device is an error, not a silent 0.
#[test]
fn the_usage_text_is_cut_and_its_write_checked() {
    hpc_test_support::example::assert_usage_is_cut_and_checked(BIN, &["BIG"]);
}

/// An external in-degree beyond 32 bits is refused quoting what the file asked
/// for: the background's check quoted the count after its saturating cast
/// ("3435974 spikes per step" for `k_ext = 1e300`).
#[test]
fn a_huge_external_in_degree_is_quoted_as_given() {
    let pop = "[populations]\nL23E = { n_full = 20683, k_ext = 1e300, full_mean_rate = 0.903, \
               v0_mean = -68.28, v0_std = 5.36 }\n";
    refused(
        &TINY,
        Some(pop),
        "external in-degree of L23E is 1.0000000000000001e298",
    );
    let dc = format!("input = \"dc\"\n{pop}");
    refused(
        &TINY,
        Some(&dc),
        "external in-degree of L23E is 1.0000000000000001e298",
    );
}
