//! The microcircuit on a real multi-node cluster (Slurm + PMIx across Docker
//! containers, `hpc cluster`): the same spikes on 2 and 3 nodes as on
//! one, through the allgather and the targeted alltoallv exchange, on the inline and
//! the thread engine, and the targeted exchange receiving less on the ranks other
//! than 0 than the allgather does on the same nodes.
//!
//! The cluster has a name and a work directory of its own (`hpc-microcircuit`,
//! `target/cluster-microcircuit`), so it runs beside the other cluster tests.
//!
//! Runs only with `HPC_TEST_CLUSTER=1` (set by `.ci/run`) and the `mpi` feature.
#![cfg(feature = "mpi")]

use std::path::{Path, PathBuf};
use std::process::Output;

use hpc_test_support::Cluster;

const MICROCIRCUIT: &str = env!("CARGO_BIN_EXE_microcircuit");
const NAME: &str = "hpc-microcircuit";

/// This cluster's work directory: beside the binaries' target directory.
fn work() -> PathBuf {
    Path::new(MICROCIRCUIT)
        .parent()
        .and_then(Path::parent)
        .expect("the binary lies in target/<profile>")
        .join("cluster-microcircuit")
}

fn shared() -> PathBuf {
    work().join("shared")
}

/// This test's own cluster.
fn this_cluster() -> Cluster {
    Cluster::named(NAME, &work())
}

fn cluster(args: &[&str]) -> Output {
    this_cluster().run(args)
}

/// `srun` of the microcircuit on `nodes` nodes and `ranks` ranks, writing to
/// /shared/`dir`; fails the test with the job's output if the job fails.
fn srun(nodes: usize, ranks: usize, dir: &str, extra: &[&str]) {
    let _ = std::fs::remove_dir_all(shared().join(dir));
    let (n, r, out) = (
        nodes.to_string(),
        ranks.to_string(),
        format!("/shared/{dir}"),
    );
    // A job that has not ended after 5 minutes (a few seconds each here) fails with
    // the cluster's state: the queue, the nodes and their processes; a lost node or
    // a stuck exchange ends the job with a message, not a hang.
    let mut a = Cluster::srun_args(&["--timeout", "300", "env", "HPC_TIMEOUT=60"], &n, &r);
    a.extend_from_slice(&[
        "microcircuit",
        "--n-scaling",
        "0.05",
        "--k-scaling",
        "0.1",
        "--t-presim",
        "20",
        "--t-sim",
        "200",
        "--quiet",
        "--no-pin",
        "--no-plot",
        "--out",
        &out,
    ]);
    a.extend_from_slice(extra);
    let o = cluster(&a);
    assert!(
        o.status.success(),
        "{dir} on {nodes} node(s), {ranks} rank(s) failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(
        s.contains(&format!("{ranks} rank(s) x 1 thread(s)")) && s.contains("L23E"),
        "{dir}: {s}"
    );
}

fn spikes(dir: &str) -> Vec<u8> {
    std::fs::read(shared().join(dir).join("spikes.spk")).unwrap_or_default()
}

/// Bytes each rank received, from the run's summary.
fn received(dir: &str) -> Vec<u64> {
    hpc_test_support::example::received_per_rank(&shared().join(dir))
}

#[test]
fn microcircuit_across_cluster_nodes() {
    if !hpc_test_support::cluster_tests_on() {
        return;
    }
    let (_down, up) = this_cluster().up(3, &[], &Cluster::bin_dir(MICROCIRCUIT));
    assert!(up.status.success());

    // The reference: one rank on one node.
    srun(1, 1, "ref", &[]);
    let reference = spikes("ref");
    assert!(
        reference.len() > 8000,
        "too few spikes to compare: {} bytes",
        reference.len()
    );

    // One rank per node over 2 and 3 nodes, and 2 ranks on each of 2 nodes (the
    // engine's boards within a node, TCP between them).
    let runs: [(usize, usize, &str, &str); 5] = [
        (2, 2, "allgather", "inline"),
        (2, 2, "alltoallv", "thread"),
        (3, 3, "allgather", "thread"),
        (3, 3, "alltoallv", "inline"),
        (2, 4, "alltoallv", "thread"),
    ];
    for (nodes, ranks, exchange, engine) in runs {
        let dir = format!("n{nodes}-r{ranks}-{exchange}-{engine}");
        srun(
            nodes,
            ranks,
            &dir,
            &["--exchange", exchange, "--engine", engine],
        );
        assert!(
            spikes(&dir) == reference,
            "{ranks} ranks on {nodes} nodes ({exchange}, {engine} engine) differ from 1 node"
        );
    }

    // On the same 3 nodes the targeted exchange sends each rank other than 0 only
    // the spikes of sources with targets there (rank 0 receives every spike for the
    // output either way).
    let g = received("n3-r3-allgather-thread");
    let t = received("n3-r3-alltoallv-inline");
    assert_eq!(g.len(), 3);
    assert_eq!(g[0], t[0], "rank 0 receives every spike either way");
    assert!(
        (1..3).all(|r| t[r] <= g[r]) && t[1] + t[2] < g[1] + g[2],
        "allgather {g:?}, alltoallv {t:?}"
    );
    // The allgather gives every rank every spike: 4 bytes each, all ranks alike.
    assert!(g.iter().all(|&b| b == g[0]), "allgather {g:?}");
    assert_eq!(g[0] as usize % 4, 0);

    let _ = std::fs::remove_dir_all(shared());
}
