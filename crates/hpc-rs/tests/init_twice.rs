//! `init` called twice by a rank of a launcher's job.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use hpc_rs::runtime::Coordinator;

/// A second `hpc_rs::init` in a rank of a launcher's job waited the job's
/// timeout for a launcher that has no second place for the rank, then said
/// "the launcher at … is unreachable: no answer to init within 7.5s
/// (launcher hung or network partitioned)" of a launcher that was fine. It
/// is refused at once, naming the rank, and the first context still works;
/// not as "bootstrap failed" (pass 19's leftover): nothing failed to start,
/// the process had joined already (`Error::AlreadyJoined`).
#[test]
fn a_second_init_in_a_rank_is_refused_at_once_by_name() {
    for v in hpc_env::ALL {
        std::env::remove_var(v.name);
    }
    let coord = Coordinator::start(
        1,
        0x05ee_d19c,
        Duration::from_secs(4),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
    )
    .unwrap();
    for (k, v) in coord.rank_env(0) {
        std::env::set_var(k, v);
    }
    let options = || hpc_rs::Options {
        bind: Some(false),
        ..Default::default()
    };
    let first = hpc_rs::init_with(options()).unwrap();
    let t0 = Instant::now();
    let e = match hpc_rs::init_with(options()) {
        Ok(_) => panic!("a second init was taken"),
        Err(e) => e.to_string(),
    };
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(
        e.contains("already joined the job as rank 0 of 1")
            && !e.contains("unreachable")
            && !e.contains("bootstrap failed"),
        "{e}"
    );
    first.world.barrier().unwrap();
}
