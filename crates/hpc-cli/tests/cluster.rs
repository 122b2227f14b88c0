//! A real multi-node cluster: Slurm + PMIx across Docker containers, each a host with
//! its own address (`hpc cluster`), with a node lost mid-run.
//!
//! Slow (the first run builds the node file system with mmdebstrap, about 2 minutes),
//! so it runs only with `HPC_TEST_CLUSTER=1` (set by `.ci/run`), and needs the `mpi`
//! feature (the ranks bootstrap through Open MPI under `srun --mpi=pmix`).
#![cfg(feature = "mpi")]

use std::process::{Command, Output};

use hpc_test_support::Cluster;
use std::time::{Duration, Instant};

const HPC: &str = env!("CARGO_BIN_EXE_hpc");

fn cluster(args: &[&str]) -> Output {
    Cluster::default().run(args)
}

/// The kernel's recent reports of crashed processes (a rank that dies of a
/// signal leaves only `srun`'s exit status otherwise), for a failure message.
fn crashes() -> String {
    match Command::new("dmesg").output() {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            let lines: Vec<&str> = text
                .lines()
                .filter(|l| {
                    l.contains("segfault")
                        || l.contains("traps:")
                        || l.contains("general protection")
                })
                .collect();
            format!(
                "kernel log, last crash reports:\n{}",
                lines[lines.len().saturating_sub(5)..].join("\n")
            )
        }
        _ => "kernel log not readable".to_string(),
    }
}

fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// What losing a node did to a running job.
struct Loss {
    /// From the fault to the first rank reporting the error (the runtime's part).
    error_after: Duration,
    /// From the fault to `srun` returning (Slurm's part: node-failure detection).
    job_end_after: Duration,
    /// Everything the job printed.
    text: String,
}

/// Runs a 4-rank job for ever, loses node2 in the way `fault` says, and reports when
/// the surviving ranks named the loss and when the job ended.
fn lose_node(fault: &str) -> Loss {
    use std::io::BufRead;
    let mut job = Cluster::default()
        .command()
        .args(Cluster::srun_args(&["env", "HPC_TIMEOUT=8"], "2", "4"))
        .args(["hpc", "selftest", "--rounds", "1000000000"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, String)>();
    let stderr = job.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send((Instant::now(), line));
        }
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        job.try_wait().unwrap().is_none(),
        "the job ended before the fault"
    );
    let t = Instant::now();
    assert!(cluster(&[fault, "node2"]).status.success());
    // Slurm may take minutes to give up on a node it cannot reach; past 300 s the job
    // counts as hung.
    let status = loop {
        if let Some(s) = job.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(300) {
            let _ = job.kill();
            panic!("the job still runs 300 s after losing node2");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let job_end_after = t.elapsed();
    reader.join().unwrap();
    assert!(!status.success(), "the job must fail when a node is lost");
    let lines: Vec<(Instant, String)> = rx.try_iter().collect();
    let error_after = lines
        .iter()
        .find(|(_, l)| l.contains("still waiting for rank(s)") || l.contains("is lost"))
        .map(|(at, _)| at.duration_since(t))
        .unwrap_or(job_end_after);
    let text = lines.into_iter().map(|(_, l)| l + "\n").collect();
    Loss {
        error_after,
        job_end_after,
        text,
    }
}

#[test]
fn slurm_pmix_cluster_across_docker_hosts() {
    if !hpc_test_support::cluster_tests_on() {
        return;
    }
    let bin = Cluster::bin_dir(HPC);
    let t = Instant::now();
    let (_down, up) = Cluster::default().up(2, &[], &bin);
    assert!(up.status.success(), "cluster up failed");
    eprintln!("cluster up in {:?}", t.elapsed());

    // Ranks on both nodes see the right node ids; same-node pairs use shm and
    // cross-node pairs tcp, and data moves both ways intact.
    let mut selftest = Cluster::srun_args(&[], "2", "4");
    selftest.extend_from_slice(&["hpc", "selftest", "--json", "--transport"]);
    selftest.extend_from_slice(&["--expect-size", "4", "--expect-nodes", "2"]);
    let out = cluster(&selftest);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        crashes()
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
    let mut doctor = Cluster::srun_args(&[], "1", "1");
    doctor.extend_from_slice(&["-w", "node1", "hpc", "doctor", "--json"]);
    let out = cluster(&doctor);
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

    // A job that does not end within `hpc cluster exec`'s bound: ended (status 124),
    // with the queue, the nodes and the job's processes printed while it was still
    // there, and its step cancelled.
    let t = Instant::now();
    let out = cluster(&[
        "exec",
        "--timeout",
        "10",
        "srun",
        "-N",
        "1",
        "-n",
        "1",
        "sleep",
        "300",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(124), "{err}");
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    assert!(err.contains("did not end within 10s"), "{err}");
    assert!(
        err.contains("RUNNING") && err.contains("/usr/bin/sleep 300"),
        "{err}"
    );
    let queue = cluster(&["exec", "squeue", "-h"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut left = String::from_utf8_lossy(&queue.stdout).into_owned();
    while !left.trim().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        left = String::from_utf8_lossy(&cluster(&["exec", "squeue", "-h"]).stdout).into_owned();
    }
    assert!(
        left.trim().is_empty(),
        "the ended job is still queued: {left}"
    );

    // A node killed, then a node cut off, mid-run: the surviving ranks name the lost
    // ranks within the runtime timeout (8 s) and the job ends (Slurm's node-failure
    // detection adds its own time on top).
    for fault in ["kill-node", "cut-node"] {
        let loss = lose_node(fault);
        eprintln!(
            "{fault}: ranks reported the loss after {:?}, srun ended after {:?}",
            loss.error_after, loss.job_end_after
        );
        assert!(
            loss.error_after < Duration::from_secs(20),
            "{:?}\n{}",
            loss.error_after,
            loss.text
        );
        assert!(
            loss.text.contains("still waiting for rank(s) 2")
                || loss.text.contains("still waiting for rank(s) 3"),
            "{}",
            loss.text
        );
        // Bring node2 back for the next fault.
        assert!(cluster(&["up", "--nodes", "2", "--bin", &bin])
            .status
            .success());
    }
}
