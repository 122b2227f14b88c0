//! The plastic network at a small scale (0.02: 225 neurons, still 11,250 inputs
//! each, with multapses) as real processes under the built-in launcher: the
//! same spikes and final weights for any ranks and threads, the same after a
//! restart from a checkpoint, and bad input refused before the network is
//! built, with the parameter named.

use std::path::Path;
use std::time::{Duration, Instant};

use hpc_test_support::{example, Job};

const BIN: &str = env!("CARGO_BIN_EXE_hpc_benchmark");
const MODEL: &[&str] = &["--scale", "0.02", "--t-presim", "10", "--t-sim", "40"];

/// A fresh directory, removed at the end of the test (and when it fails).
fn tmpdir(tag: &str) -> hpc_test_support::TmpDir {
    hpc_test_support::TmpDir::new("hpc-benchmark-test", tag)
}

/// Runs `ranks` processes of `threads` threads into `out`; answers the spike
/// file's bytes and the summary.
fn run(
    out: &Path,
    (ranks, threads): (usize, usize),
    extra: &[&str],
) -> (Vec<u8>, serde_json::Value) {
    let threads = threads.to_string();
    let mut more = vec!["--threads", &threads];
    more.extend_from_slice(extra);
    let args = example::args(MODEL, out, &more);
    example::run_ranks(BIN, &args, ranks, 1, Duration::from_secs(60));
    let summary = std::fs::read(out.join("summary.json")).unwrap();
    (
        std::fs::read(out.join("spikes.spk")).unwrap(),
        serde_json::from_slice(&summary).unwrap(),
    )
}

fn digest(summary: &serde_json::Value) -> String {
    summary["weights"]["digest"].as_str().unwrap().to_string()
}

#[test]
fn any_ranks_and_threads_give_the_same_spikes_and_weights() {
    let dir = tmpdir("decomp");
    let (spikes, summary) = run(&dir.join("1x1"), (1, 1), &[]);
    // Enough activity and plasticity for the comparison to mean something.
    let recorded = summary["recorded_spikes"].as_u64().unwrap();
    assert!(recorded > 100, "{recorded} spikes");
    let sd = summary["weights"]["sd_pa"].as_f64().unwrap();
    assert!(sd > 0.01, "the weights did not change: SD {sd}");
    assert_eq!(summary["stdp_synapses"].as_u64(), Some(180 * 9000));
    // Targets as u16 steps: 10 bytes an E->E synapse, 2 a static one, with
    // the rows, offsets and archives on top (7.12 without them).
    let bytes = summary["bytes_per_synapse"].as_f64().unwrap();
    assert!((7.12..=8.0).contains(&bytes), "{bytes} bytes a synapse");
    assert!(summary["ring_buffer_bytes"].as_u64().unwrap() > 0);
    for (ranks, threads) in [(1, 2), (2, 1), (2, 2), (4, 1), (4, 2)] {
        let (s, sum) = run(
            &dir.join(format!("{ranks}x{threads}")),
            (ranks, threads),
            &[],
        );
        assert!(
            s == spikes,
            "{ranks} ranks x {threads} threads: other spikes than 1 x 1"
        );
        assert_eq!(
            digest(&sum),
            digest(&summary),
            "{ranks} ranks x {threads} threads: other weights"
        );
        // The allgather: every rank receives every spike code, 4 bytes each,
        // as the one rank of 1 x 1 does.
        let recv = sum["bytes_received_per_rank"].as_array().unwrap();
        assert_eq!(recv.len(), ranks, "{ranks} ranks: {recv:?}");
        for b in recv {
            assert_eq!(
                b, &summary["bytes_received_per_rank"][0],
                "{ranks} ranks x {threads} threads: other bytes received"
            );
        }
        assert_eq!(sum["ranks_report"].as_array().map(Vec::len), Some(ranks));
    }
    let one = summary["bytes_received_per_rank"][0].as_u64().unwrap();
    assert!(
        one >= 4 * recorded,
        "{one} bytes for {recorded} recorded spikes"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_restart_gives_the_uninterrupted_spikes_and_weights() {
    let dir = tmpdir("restart");
    let (spikes, summary) = run(&dir.join("whole"), (1, 1), &[]);
    // Interrupted at 30 ms with a checkpoint at 20 ms, on 2 ranks...
    let first = dir.join("first");
    let ck = dir.join("checkpoints");
    let ck_s = ck.display().to_string();
    let args = example::args(
        MODEL,
        &first,
        &[
            "--threads",
            "2",
            "--checkpoint-every",
            "20",
            "--checkpoint-dir",
            &ck_s,
            "--stop-at",
            "30",
        ],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for o in Job::program(BIN, &args, 2)
        .timeout(Duration::from_secs(60))
        .run()
    {
        assert!(o.status.success(), "{}", example::stderr(&o));
    }
    assert!(
        !first.join("spikes.spk").exists(),
        "an interrupted run has no complete spike file"
    );
    // ...resumed from the newest checkpoint on 1 rank of 2 threads and on 4 ranks.
    for (ranks, threads) in [(1, 2), (4, 1)] {
        let out = dir.join(format!("resumed-{ranks}"));
        let (s, sum) = run(&out, (ranks, threads), &["--restart", &ck_s]);
        assert!(
            s == spikes,
            "resumed on {ranks} ranks: other spikes than the uninterrupted run"
        );
        assert_eq!(
            digest(&sum),
            digest(&summary),
            "resumed on {ranks} ranks: other weights"
        );
    }
    // A damaged rank file is named, not used.
    let step = ck.join("step-0000000200");
    let rank0 = step.join("rank-000000.ckpt");
    let mut bytes = std::fs::read(&rank0).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&rank0, &bytes).unwrap();
    let step_s = step.display().to_string();
    let o = example::command(BIN, MODEL, &dir.join("damaged"), &["--restart", &step_s])
        .output()
        .unwrap();
    let err = example::refused(&o);
    assert!(err.contains("rank-000000"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs the binary with `model` and expects a refusal within `secs` seconds
/// whose message holds `named`, with nothing written into the output directory.
fn refused_quickly(model: &[&str], extra: &[&str], named: &str) {
    let dir = tmpdir("bad");
    let out = dir.join("out");
    let t0 = Instant::now();
    let o = example::command(BIN, model, &out, extra).output().unwrap();
    let err = example::refused(&o);
    assert!(err.contains(named), "expected {named:?} in: {err}");
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "{model:?}: took {:?}",
        t0.elapsed()
    );
    assert!(!out.join("spikes.spk.partial").exists() && !out.join("summary.json").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_is_refused_with_the_parameter_named() {
    // A network that cannot fit, before any of it is allocated (scale 1000 is
    // about 10^11 synapses).
    refused_quickly(&["--scale", "1000"], &[], "--scale");
    refused_quickly(&["--scale", "1e9"], &[], "--scale");
    refused_quickly(&["--scale", "-1"], &[], "--scale");
    // A time beyond what the spike file can hold, or not a number of steps.
    refused_quickly(&["--scale", "0.02", "--t-sim", "1e12"], &[], "--t-sim");
    refused_quickly(&["--scale", "0.02", "--t-sim", "nan"], &[], "--t-sim");
    refused_quickly(
        &["--scale", "0.02", "--t-presim", "0.05"],
        &[],
        "--t-presim",
    );
    // Malformed STDP parameters.
    refused_quickly(&["--scale", "0.02", "--tau-plus", "-15"], &[], "tau_plus");
    refused_quickly(&["--scale", "0.02", "--tau-minus", "-30"], &[], "tau_minus");
    refused_quickly(&["--scale", "0.02", "--lambda", "nan"], &[], "lambda");
    refused_quickly(&["--scale", "0.02", "--mu", "-0.4"], &[], "mu");
    refused_quickly(&["--scale", "0.02", "--alpha", "inf"], &[], "alpha");
    // A restart with other parameters names what differs.
    let dir = tmpdir("bad-restart");
    let args = example::args(
        MODEL,
        &dir.join("first"),
        &["--checkpoint-every", "20", "--stop-at", "20"],
    );
    let o = std::process::Command::new(BIN)
        .args(&args)
        .output()
        .unwrap();
    example::succeeded(&o);
    let ck = dir.join("first").join("checkpoints").display().to_string();
    let model_seed: Vec<&str> = MODEL.iter().copied().chain(["--seed", "7"]).collect();
    refused_quickly(&model_seed, &["--restart", &ck], "seed 1 -> 7");
    let model_lambda: Vec<&str> = MODEL.iter().copied().chain(["--lambda", "0"]).collect();
    refused_quickly(&model_lambda, &["--restart", &ck], "stdp.lambda");
    let _ = std::fs::remove_dir_all(&dir);
}
