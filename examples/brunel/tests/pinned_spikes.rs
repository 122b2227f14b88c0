//! The spike files of fixed seeds, pinned by their SHA-256: a change to the code
//! that moves a single spike (or a byte of the file format) fails here, whatever
//! the ranks, threads and exchange engine of the run.

use std::path::Path;
use std::time::Duration;

const BRUNEL: &str = env!("CARGO_BIN_EXE_brunel");

/// `spikes.spk` of `--preset nest --order 100 --t-sim 100` for each seed.
const PINNED: [(u64, &str); 2] = [
    (
        1,
        "318d8428b50448e3515283e0a6865932302cc90b4b44ec5796083f3968fb89bc",
    ),
    (
        7,
        "7938f8cb76b9928ab72a3e8eb3ac7e20803213d8a40408c3bbee040abff2b305",
    ),
];

fn args(out: &Path, seed: u64, threads: usize) -> Vec<String> {
    let seed = seed.to_string();
    let threads = threads.to_string();
    [
        "--preset",
        "nest",
        "--order",
        "100",
        "--t-sim",
        "100",
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
    let dir = hpc_test_support::tmpdir("brunel-pin", &format!("{seed}-{ranks}-{threads}"));
    let mut a = args(&dir, seed, threads);
    a.extend(extra.iter().map(|s| s.to_string()));
    let spikes = dir.join("spikes.spk");
    let d = hpc_test_support::digest_of_run(BRUNEL, &a, ranks, Duration::from_secs(60), &spikes);
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
        (2, 1, &["--engine", "world"][..]),
        (2, 2, &["--engine", "inline"][..]),
        (2, 1, &["--engine", "thread"][..]),
    ] {
        assert_eq!(
            digest(seed, ranks, threads, extra),
            want,
            "seed {seed}, {ranks} ranks x {threads} threads, {extra:?}"
        );
    }
}
