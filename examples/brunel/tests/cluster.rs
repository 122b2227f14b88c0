//! The Brunel example on a real multi-node cluster (Slurm + PMIx across Docker
//! containers, `hpc cluster`): the same spikes on 2 nodes x 2 ranks as
//! on one node, and a node lost mid-run: the job ends naming the lost ranks, the spike
//! file written so far is intact, and a restart from the last checkpoint on the
//! remaining node reproduces the uninterrupted run exactly.
//!
//! Runs only with `HPC_TEST_CLUSTER=1` (set by `.ci/run`) and the `mpi` feature.
#![cfg(feature = "mpi")]

use std::path::PathBuf;
use std::process::{Output, Stdio};

use hpc_test_support::Cluster;
use std::time::{Duration, Instant};

const BRUNEL: &str = env!("CARGO_BIN_EXE_brunel");

fn cluster(args: &[&str]) -> Output {
    Cluster::default().run(args)
}

/// `srun` of the brunel binary with `args`, on `nodes` nodes and `ranks` ranks.
fn srun(nodes: &str, ranks: &str, args: &[&str]) -> Output {
    srun_after(&[], nodes, ranks, args)
}

/// [`srun`] with `before` between `hpc cluster exec` and `srun` (`env VAR=VALUE...`).
fn srun_after(before: &[&str], nodes: &str, ranks: &str, args: &[&str]) -> Output {
    let mut a = Cluster::srun_args(before, nodes, ranks);
    a.extend_from_slice(&["brunel", "--order", "500"]);
    a.extend_from_slice(args);
    cluster(&a)
}

fn shared() -> PathBuf {
    Cluster::default().shared()
}

fn spikes(dir: &str) -> Vec<u8> {
    std::fs::read(shared().join(dir).join("spikes.spk")).unwrap_or_default()
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one scenario, step after step, whose asserts read best in order"
)]
fn brunel_across_cluster_nodes() {
    if !hpc_test_support::cluster_tests_on() {
        return;
    }
    let (_down, up) = Cluster::default().up(2, &[], &Cluster::bin_dir(BRUNEL));
    assert!(up.status.success());
    for d in [
        "ref",
        "n2-world",
        "ref-short",
        "n2-mpi",
        "n2-inline",
        "n2-thread",
        "n2-proxy",
        "n2-ofi",
        "ref-long",
        "lost",
        "restarted",
    ] {
        let _ = std::fs::remove_dir_all(shared().join(d));
    }

    // Same spikes on 2 nodes x 2 ranks as on 1 node x 2 ranks, through the runtime's
    // exchange and through MPI's own MPI_Iallgatherv across hosts.
    assert!(srun("1", "2", &["--t-sim", "1000", "--out", "/shared/ref"])
        .status
        .success());
    assert!(srun(
        "2",
        "4",
        &[
            "--t-sim",
            "1000",
            "--engine",
            "world",
            "--out",
            "/shared/n2-world"
        ]
    )
    .status
    .success());
    assert!(!spikes("ref").is_empty());
    assert!(
        spikes("ref") == spikes("n2-world"),
        "2 nodes (world engine) differ from 1 node"
    );
    assert!(
        srun("1", "2", &["--t-sim", "200", "--out", "/shared/ref-short"])
            .status
            .success()
    );
    assert!(srun(
        "2",
        "4",
        &[
            "--t-sim",
            "200",
            "--engine",
            "mpi",
            "--out",
            "/shared/n2-mpi"
        ]
    )
    .status
    .success());
    assert!(
        spikes("ref-short") == spikes("n2-mpi"),
        "2 nodes (mpi engine) differ from 1 node"
    );
    // hpc-collectives' own engines across nodes: boards within each node, TCP between.
    for engine in ["inline", "thread"] {
        let out = format!("/shared/n2-{engine}");
        let o = srun(
            "2",
            "4",
            &["--t-sim", "200", "--engine", engine, "--out", &out],
        );
        assert!(
            o.status.success(),
            "{engine}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            spikes("ref-short") == spikes(&format!("n2-{engine}")),
            "2 nodes ({engine} engine) differ from 1 node"
        );
    }
    // The same exchange over the libfabric backend (tcp;ofi_rxm: the provider path a
    // real fabric takes), every route on it, the same spikes.
    let o = srun_after(
        &[
            "env",
            "HPC_TRANSPORT=ofi",
            "HPC_OFI_PROVIDER=tcp;ofi_rxm",
            "HPC_LOG=hpc_rdma=info",
        ],
        "2",
        "4",
        &[
            "--t-sim",
            "200",
            "--engine",
            "inline",
            "--out",
            "/shared/n2-ofi",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "ofi: {err}");
    let routes: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("transport route"))
        .collect();
    assert_eq!(routes.len(), 4 * 3, "one route per rank and peer: {err}");
    assert!(
        routes.iter().all(|l| l.contains("backend=\"ofi\"")),
        "{err}"
    );
    assert!(
        spikes("ref-short") == spikes("n2-ofi"),
        "2 nodes over ofi differ from 1 node"
    );
    // The proxy engine across nodes: each node's proxy carries its ranks'
    // exchanges with the other node's proxy.
    let o = srun(
        "2",
        "4",
        &[
            "--t-sim",
            "200",
            "--engine",
            "proxy",
            "--out",
            "/shared/n2-proxy",
        ],
    );
    assert!(
        o.status.success(),
        "proxy: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        spikes("ref-short") == spikes("n2-proxy"),
        "2 nodes (proxy engine) differ from 1 node"
    );

    // The uninterrupted reference of the long run.
    let long = ["--t-sim", "6000"];
    let mut a = long.to_vec();
    a.extend_from_slice(&["--out", "/shared/ref-long"]);
    assert!(srun("1", "2", &a).status.success());

    // Lose node2 in the middle of a checkpointed run.
    let mut job = Cluster::default()
        .command()
        .args(Cluster::srun_args(&["env", "HPC_TIMEOUT=8"], "2", "4"))
        .args([
            "brunel",
            "--order",
            "500",
            "--t-sim",
            "6000",
            "--checkpoint-every",
            "500",
            // At most a fifth of real time (30 s of wall clock for 6 s of model
            // time), so that the node is lost well before the end however fast the
            // machine simulates and however long a loaded Docker daemon takes to
            // kill a container (seconds, on CI). The restart below runs unpaced.
            "--pace",
            "0.2",
            "--out",
            "/shared/lost",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ckpts = shared().join("lost/checkpoints");
    let deadline = Instant::now() + Duration::from_secs(120);
    // Wait for at least one complete checkpoint (a step dir whose manifest is written:
    // the manifest is renamed into place last).
    loop {
        let done = std::fs::read_dir(&ckpts)
            .map(|d| {
                d.flatten()
                    .any(|e| e.path().join(hpc_checkpoint::MANIFEST).exists())
            })
            .unwrap_or(false);
        if done {
            break;
        }
        if job.try_wait().unwrap().is_some() {
            let out = job.wait_with_output().unwrap();
            panic!(
                "the run ended before the fault ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(Instant::now() < deadline, "no checkpoint within 120 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let t = Instant::now();
    assert!(cluster(&["kill-node", "node2"]).status.success());
    eprintln!("docker kill of node2 took {:?}", t.elapsed());
    let out = job.wait_with_output().unwrap();
    let took = t.elapsed();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("node2 killed -> job ended in {took:?}");
    assert!(!out.status.success(), "the job must fail: {text}");
    assert!(took < Duration::from_secs(120), "{took:?}: {text}");
    assert!(
        text.contains("rank(s) 2, 3") || text.contains("Node failure on node2"),
        "{text}"
    );

    // The spikes written so far are intact: a readable header and whole records up to
    // the last exchange.
    assert!(
        !shared().join("lost/spikes.spk").exists(),
        "the run finished before node2 was lost: {text}"
    );
    let partial = shared().join("lost/spikes.spk.partial");
    let f =
        hpc_spiking::spikes::read_spikes_partial(&partial).expect("partial spike file readable");
    assert!(!f.spikes.is_empty());
    let len = std::fs::metadata(&partial).unwrap().len();
    assert!(len > 16, "{len}");

    // Restart from the last checkpoint on the remaining node: exactly the spikes of
    // the uninterrupted run.
    let mut a = long.to_vec();
    a.extend_from_slice(&[
        "--restart",
        "/shared/lost/checkpoints",
        "--out",
        "/shared/restarted",
    ]);
    let out = cluster(
        &[
            "exec",
            "srun",
            "--mpi=pmix",
            "-N",
            "1",
            "-n",
            "2",
            "-w",
            "node1",
            "brunel",
            "--order",
            "500",
        ]
        .into_iter()
        .chain(a.iter().copied())
        .collect::<Vec<_>>(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!spikes("ref-long").is_empty());
    assert!(
        spikes("restarted") == spikes("ref-long"),
        "restart differs from the uninterrupted run"
    );
}
