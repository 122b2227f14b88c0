//! A real multi-node cluster: Slurm + PMIx across Docker containers, each a host with
//! its own address (containers/cluster/cluster.sh), with a node lost mid-run.
//!
//! Slow (the first run builds the node file system with mmdebstrap, about 2 minutes),
//! so it runs only with `HPC_TEST_CLUSTER=1` (set by `.ci/run`), and needs the `mpi`
//! feature (the ranks bootstrap through Open MPI under `srun --mpi=pmix`).
#![cfg(feature = "mpi")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const HPC: &str = env!("CARGO_BIN_EXE_hpc");

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../containers/cluster/cluster.sh")
}

fn cluster(args: &[&str]) -> Output {
    let out = Command::new("bash")
        .arg(script())
        .args(args)
        .output()
        .expect("run cluster.sh");
    eprintln!(
        "cluster.sh {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Removes the cluster even if the test fails half-way.
struct Down;
impl Drop for Down {
    fn drop(&mut self) {
        cluster(&["down"]);
    }
}

fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// Runs a 4-rank job for ever, loses node2 in the way `fault` says, and returns how
/// long the job took to fail after the fault, and its output.
fn lose_node(fault: &str) -> (Duration, String) {
    let mut job = Command::new("bash")
        .arg(script())
        .args([
            "exec",
            "env",
            "HPC_TIMEOUT=8",
            "srun",
            "--mpi=pmix",
            "-N",
            "2",
            "-n",
            "4",
        ])
        .args(["hpc", "selftest", "--rounds", "1000000000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        job.try_wait().unwrap().is_none(),
        "the job ended before the fault"
    );
    let t = Instant::now();
    assert!(cluster(&[fault, "node2"]).status.success());
    let out = job.wait_with_output().unwrap();
    let took = t.elapsed();
    assert!(
        !out.status.success(),
        "the job must fail when a node is lost"
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (took, text)
}

#[test]
fn slurm_pmix_cluster_across_docker_hosts() {
    if std::env::var("HPC_TEST_CLUSTER").ok().as_deref() != Some("1") {
        eprintln!("skipped: set HPC_TEST_CLUSTER=1 to run the Docker cluster test");
        return;
    }
    let bin = Path::new(HPC)
        .parent()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let t = Instant::now();
    let _down = Down;
    let up = cluster(&["up", "--nodes", "2", "--bin", &bin]);
    assert!(up.status.success(), "cluster up failed");
    eprintln!("cluster up in {:?}", t.elapsed());

    // Ranks on both nodes see the right node ids; same-node pairs use shm and
    // cross-node pairs tcp, and data moves both ways intact.
    let out = cluster(&[
        "exec",
        "srun",
        "--mpi=pmix",
        "-N",
        "2",
        "-n",
        "4",
        "hpc",
        "selftest",
        "--json",
        "--transport",
        "--expect-size",
        "4",
        "--expect-nodes",
        "2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let rows = json_lines(&out);
    assert_eq!(rows.len(), 4);
    for r in &rows {
        let rank = r["rank"].as_u64().unwrap();
        // Slurm's block distribution: ranks 0,1 on node1, 2,3 on node2.
        assert_eq!(r["node"].as_u64(), Some(rank / 2), "{r}");
        assert_eq!(
            r["node_name"].as_str(),
            Some(if rank < 2 { "node1" } else { "node2" })
        );
        assert!(
            r["bootstrap"]
                .as_str()
                .unwrap()
                .contains("Slurm srun (PMIx)"),
            "{r}"
        );
        for (peer, backend) in r["transport"].as_object().unwrap() {
            let peer: u64 = peer.parse().unwrap();
            let want = if peer / 2 == rank / 2 { "shm" } else { "tcp" };
            assert_eq!(backend.as_str(), Some(want), "rank {rank} -> {peer}");
        }
    }

    // The doctor on a compute node, inside a job step, sees Docker, Slurm and PMIx.
    let out = cluster(&[
        "exec",
        "srun",
        "--mpi=pmix",
        "-N",
        "1",
        "-n",
        "1",
        "-w",
        "node1",
        "hpc",
        "doctor",
        "--json",
    ]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor json");
    let text = doc.to_string();
    assert_eq!(
        doc["environment"]["runtime"]["kind"].as_str(),
        Some("docker"),
        "{text}"
    );
    assert!(
        text.contains("\"slurm\"") && text.contains("\"pmix\""),
        "{text}"
    );

    // A node killed mid-run: the job fails, naming the lost ranks, within the runtime
    // timeout (8 s) plus Slurm's node-failure detection, and nothing hangs.
    let (took, text) = lose_node("kill-node");
    eprintln!("node kill -> job error in {took:?}");
    assert!(took < Duration::from_secs(40), "{took:?}\n{text}");
    assert!(
        text.contains("still waiting for rank(s) 2, 3") || text.contains("Node failure on node2"),
        "{text}"
    );

    // Bring node2 back, then cut it off the network instead.
    assert!(cluster(&["up", "--nodes", "2", "--bin", &bin])
        .status
        .success());
    let (took, text) = lose_node("cut-node");
    eprintln!("node cut off -> job error in {took:?}");
    assert!(took < Duration::from_secs(60), "{took:?}\n{text}");
    assert!(
        text.contains("rank(s) 2, 3") || text.contains("node2"),
        "{text}"
    );
}
