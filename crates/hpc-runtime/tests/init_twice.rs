//! `World::init` called twice by a rank of a launcher's job (a file of its
//! own: the test sets the process's environment).

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use hpc_runtime::{Coordinator, Error, World};

/// A second `World::init` in a rank of a launcher's job waited the job's
/// timeout for a launcher that has no second place for the rank, then said
/// "the launcher at … is unreachable: no answer to init within 7.5s
/// (launcher hung or network partitioned)" of a launcher that was fine (the
/// facade, `hpc_rs::init`, refused it; the runtime's own call did not). It is
/// refused at once, naming the rank, and the first world still works.
#[test]
fn a_second_world_init_in_a_rank_is_refused_at_once_by_name() {
    for v in hpc_env::ALL {
        std::env::remove_var(v.name);
    }
    let coord = Coordinator::start(
        1,
        0x05ee_d20c,
        Duration::from_secs(4),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
    )
    .unwrap();
    for (k, v) in coord.rank_env(0) {
        std::env::set_var(k, v);
    }
    let first = World::init().unwrap();
    let t0 = Instant::now();
    let e = World::init().expect_err("a second join was taken");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(
        matches!(e, Error::AlreadyJoined { rank: 0, size: 1 }),
        "{e:?}"
    );
    let e = e.to_string();
    assert!(
        e.contains("already joined the job as rank 0 of 1")
            && !e.contains("unreachable")
            && !e.contains("bootstrap failed"),
        "{e}"
    );
    first.barrier().unwrap();
}
