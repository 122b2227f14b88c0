//! The runtime's own failure detection, without the launcher stopping anyone: ranks are
//! started by hand against a `Coordinator`, so what the survivors see is what the
//! runtime reports.

use std::net::{IpAddr, Ipv4Addr};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hpc_runtime::Coordinator;

const HPC: &str = env!("CARGO_BIN_EXE_hpc");

fn start_rank(coord: &Coordinator, secret: u64, rank: usize, size: usize, extra: &[&str]) -> Child {
    Command::new(HPC)
        .arg("selftest")
        .args(extra)
        .envs(coord.rank_env(rank))
        .env("HPC_SIZE", size.to_string())
        .env("HPC_JOB_SECRET", format!("{secret:x}"))
        .env("HPC_TIMEOUT", "1.5")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A coordinator on the loopback for `size` ranks that gives up on a silent one after
/// `timeout`, and the secret of its job.
fn coordinator(size: usize, timeout: Duration) -> (Coordinator, u64) {
    let secret = hpc_runtime::random_u64().expect("random bytes from the kernel");
    let coord = Coordinator::start(size, secret, timeout, IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
    (coord, secret)
}

#[test]
fn dead_peer_is_named_without_the_launcher() {
    let (coord, secret) = coordinator(3, Duration::from_millis(1500));
    let t = Instant::now();
    let kids: Vec<Child> = (0..3)
        .map(|r| {
            start_rank(
                &coord,
                secret,
                r,
                3,
                &["--fail-rank", "1", "--fail-mode", "kill"],
            )
        })
        .collect();
    for (r, k) in kids.into_iter().enumerate() {
        let out = k.wait_with_output().unwrap();
        if r == 1 {
            continue;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.contains("rank 1 is lost"), "rank {r}: {err}");
    }
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

#[test]
fn rank_that_never_shows_up_is_named() {
    let (coord, secret) = coordinator(3, Duration::from_millis(1000));
    let t = Instant::now();
    let kids: Vec<Child> = (0..2)
        .map(|r| start_rank(&coord, secret, r, 3, &[]))
        .collect();
    for k in kids {
        let out = k.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains("init") && err.contains("still waiting for rank(s) 2"),
            "{err}"
        );
    }
    assert!(t.elapsed() < Duration::from_secs(6));
}

#[test]
fn wrong_secret_is_refused() {
    let (coord, secret) = coordinator(1, Duration::from_millis(800));
    let out = start_rank(&coord, secret ^ 1, 0, 1, &[])
        .wait_with_output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn mismatched_collectives_are_reported() {
    // Rank 0 runs 0 rounds, rank 1 runs 1 round: after the node-map allgather, rank 0
    // finalizes while rank 1 enters an allgather that rank 0 never joins.
    let (coord, secret) = coordinator(2, Duration::from_millis(1500));
    let a = start_rank(&coord, secret, 0, 2, &["--rounds", "0"]);
    let b = start_rank(&coord, secret, 1, 2, &["--rounds", "1"]);
    assert!(a.wait_with_output().unwrap().status.success());
    let out = b.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("rank 0") && err.contains("finalized"), "{err}");
}
