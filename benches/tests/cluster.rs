//! The overlap benchmark across two Docker hosts (Slurm + PMIx, `hpc cluster`):
//! hpc-collectives' Inline and Thread engines and the MPI library's own immediate
//! collectives with the bytes crossing a network. A smoke run (few iterations, a debug
//! build): it proves the benchmark runs across nodes and prints well-formed rows; the
//! figures of a release build are in the book's collectives chapter.
//!
//! Runs only with `HPC_TEST_CLUSTER=1` (set by `.ci/run`) and the `mpi` feature.
#![cfg(feature = "mpi")]

use std::process::Output;

use hpc_test_support::Cluster;

const OVERLAP: &str = env!("CARGO_BIN_EXE_overlap");

fn cluster(args: &[&str]) -> Output {
    Cluster::default().run(args)
}

#[test]
fn overlap_benchmark_across_cluster_nodes() {
    if !hpc_test_support::cluster_tests_on() {
        return;
    }
    let (_down, up) = Cluster::default().up(2, &[], &Cluster::bin_dir(OVERLAP));
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let mut overlap = Cluster::srun_args(&[], "2", "2");
    overlap.extend_from_slice(&[
        "overlap",
        "--engine",
        "inline,thread,mpi",
        "--iters",
        "10",
        "--sizes",
        "1024,65536",
    ]);
    let out = cluster(&overlap);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    // The local engines reached the other node over the network path.
    assert!(text.contains("other nodes over tcp"), "{text}");
    for engine in ["inline", "thread", "mpi"] {
        for coll in ["ialltoall", "iallgather", "ibcast", "iallreduce"] {
            for bytes in ["1024", "65536"] {
                let row = text
                    .lines()
                    .map(|l| l.split_whitespace().collect::<Vec<_>>())
                    .find(|c| c.len() == 9 && c[0] == engine && c[1] == coll && c[2] == bytes)
                    .unwrap_or_else(|| panic!("no {engine} {coll} {bytes} row:\n{text}"));
                let nums: Vec<f64> = row[3..].iter().map(|x| x.parse().unwrap()).collect();
                assert!(
                    nums.iter().all(|x| x.is_finite() && *x >= 0.0) && nums[1] > 0.0,
                    "{row:?}"
                );
            }
        }
    }
}
