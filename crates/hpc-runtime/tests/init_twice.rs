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

/// `World::init_with` given the same rank of the same job twice in one
/// process (pass 20's leftover): it joined again, and the launcher answered
/// "another process of this job joined as rank 0 first: two processes were
/// given HPC_RANK=0", of this process itself. It is `Error::AlreadyJoined`
/// at once, while the first world lives and after it is dropped; another
/// rank of the same job is still joined by another thread (tests run ranks
/// so), and the first world still works.
#[test]
fn init_with_the_same_rank_twice_is_refused_at_once_by_name() {
    let coord = Coordinator::start(
        2,
        0x05ee_d21c,
        Duration::from_secs(6),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
    )
    .unwrap();
    let env = |rank: usize| -> std::collections::HashMap<String, String> {
        coord
            .rank_env(rank)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    };
    let config = |rank| hpc_runtime::Config::from_map(env(rank)).unwrap();
    let one = {
        let c = config(1);
        std::thread::spawn(move || {
            let w = World::init_with(c).unwrap();
            w.barrier().unwrap();
            w.allgather(&[1u8]).unwrap()
        })
    };
    let zero = World::init_with(config(0)).unwrap();
    let refused = |e: Error| {
        assert!(
            matches!(e, Error::AlreadyJoined { rank: 0, size: 2 }),
            "{e:?}"
        );
        let e = e.to_string();
        assert!(
            e.contains("already joined the job as rank 0 of 2") && !e.contains("another process"),
            "{e}"
        );
    };
    let t0 = Instant::now();
    refused(World::init_with(config(0)).expect_err("a second join of rank 0 was taken"));
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    zero.barrier().unwrap();
    assert_eq!(zero.allgather(&[0u8]).unwrap(), [[0u8], [1]]);
    assert_eq!(one.join().unwrap(), [[0u8], [1]]);
    drop(zero);
    refused(World::init_with(config(0)).expect_err("a join after the drop was taken"));
}
