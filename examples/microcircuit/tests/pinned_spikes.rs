//! The spike files of fixed seeds, pinned by their SHA-256: a change to the code
//! that moves a single spike (or a byte of the file format) fails here, whatever
//! the ranks, threads, exchange and engine of the run.

use std::path::Path;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_microcircuit");

/// `spikes.spk` of 1.5 % of the neurons, 5 % of the in-degrees, 20 ms warm-up and
/// 60 ms with the thalamic input, for each seed.
const PINNED: [(u64, &str); 2] = [
    (
        55,
        "f15158f1d016c621be057488d70be5c78388243c3286dc12d9b1507f5b1749ab",
    ),
    (
        3,
        "2145ea8be35a552374f2699f8f16c25a2491908c447f5cc31f553edcf94b56da",
    ),
];

fn args(out: &Path, seed: u64, threads: usize) -> Vec<String> {
    let seed = seed.to_string();
    let threads = threads.to_string();
    [
        "--n-scaling",
        "0.015",
        "--k-scaling",
        "0.05",
        "--t-presim",
        "20",
        "--t-sim",
        "60",
        "--thalamic",
        "--seed",
        &seed,
        "--threads",
        &threads,
        "--quiet",
        "--no-pin",
        "--no-plot",
        "--out",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([out.display().to_string()])
    .collect()
}

/// The digest of one run: `ranks` processes (a singleton without a launcher when
/// 1) of `threads` threads, with `extra` arguments.
fn digest(seed: u64, ranks: usize, threads: usize, extra: &[&str]) -> String {
    let dir = hpc_test_support::tmpdir("microcircuit-pin", &format!("{seed}-{ranks}-{threads}"));
    let mut a = args(&dir, seed, threads);
    a.extend(extra.iter().map(|s| s.to_string()));
    let spikes = dir.join("spikes.spk");
    let d = hpc_test_support::digest_of_run(BIN, &a, ranks, Duration::from_secs(60), &spikes);
    let _ = std::fs::remove_dir_all(&dir);
    d
}

#[test]
fn spike_files_of_fixed_seeds_keep_their_digests() {
    for (seed, want) in PINNED {
        assert_eq!(
            digest(seed, 1, 1, &[]),
            want,
            "seed {seed}, 1 rank x 1 thread"
        );
    }
    let (seed, want) = PINNED[0];
    for (ranks, threads, extra) in [
        (1, 2, &[][..]),
        (2, 1, &["--exchange", "allgather", "--engine", "world"][..]),
        (2, 2, &["--exchange", "allgather", "--engine", "inline"][..]),
        (2, 1, &["--exchange", "alltoallv", "--engine", "inline"][..]),
        (2, 2, &["--exchange", "alltoallv", "--engine", "thread"][..]),
    ] {
        assert_eq!(
            digest(seed, ranks, threads, extra),
            want,
            "seed {seed}, {ranks} ranks x {threads} threads, {extra:?}"
        );
    }
}
