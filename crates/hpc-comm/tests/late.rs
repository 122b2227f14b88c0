//! Members that come late to a collective another rank gave up on its
//! timeout, on real jobs (this binary re-executes itself as the ranks and as
//! the proxy, as `engines.rs` does): the rank that gave up may reuse its
//! buffers at once, so a late member never takes what it reads of them for
//! its part, and nothing writes into them after. A rank counts as successful
//! only if it printed [`CHILD_OK`] at the end of its scenario.

use std::time::Duration;

use hpc_comm::{Comm, CommOptions, Engine, Error, ReduceOp};

mod common;
use common::{CHILD_OK, ENGINES};

/// `scenario` on `size` ranks of one node, with a communicator timeout of
/// `timeout_s` seconds.
fn run(scenario: &str, size: usize, timeout_s: u64) {
    common::run(scenario, size, 1, timeout_s, &[]);
}

#[test]
fn proxy_entry() {
    hpc_comm::proxy::serve_env().unwrap();
}

#[test]
fn child_entry() {
    let Some((s, world)) = common::rank_scenario() else {
        return;
    };
    let engines: &[Engine] = match s.as_str() {
        "late_bcasts" => &[Engine::Inline],
        _ => &ENGINES,
    };
    for &engine in engines {
        let comm = Comm::with_options(&world, CommOptions::new(engine)).unwrap();
        match s.as_str() {
            "late_bcast" => late_bcast(&comm),
            "late_bcasts" => late_bcasts(&comm),
            "late_allreduce" => late_allreduce(&comm),
            o => panic!("unknown scenario {o}"),
        }
    }
    eprintln!("{CHILD_OK} rank {} {s}", world.rank());
}

/// A broadcast of 8 MiB (read at the root's address) whose root timed out
/// waiting for a slow member, the root's buffer then written again, and the
/// member's part after that: the member's part fails (on the `Inline` and
/// `Thread` engines naming the root that gave up); it returned `Ok` with the
/// root's new bytes as the broadcast before hostile pass 21 (a collective's
/// timeout left no record for the members that read its buffers later).
/// Then the communicator goes on.
fn late_bcast(comm: &Comm) {
    let (me, n) = (comm.rank(), 8 << 20);
    if me == 0 {
        let mut b = vec![1u8; n];
        let e = comm.bcast(&mut b, 0).unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
        // Written again while rank 1 reads (from 2.5 s), until its barrier.
        b.fill(9);
        std::thread::sleep(Duration::from_millis(1000));
        drop(b);
    } else {
        std::thread::sleep(Duration::from_millis(2500));
        let mut got = vec![0u8; n];
        let r = comm.bcast(&mut got, 0);
        let nines = got.iter().filter(|&&b| b == 9).count();
        match (comm.engine(), r) {
            (Engine::Inline | Engine::Thread, Err(e)) => assert!(
                matches!(
                    e,
                    Error::PeerTimedOut {
                        rank: 0,
                        waited_for: 1
                    }
                ),
                "{:?}: {e}",
                comm.engine()
            ),
            // The proxy holds a copy of the root's part: the broadcast as the
            // root gave it, or an error; never the reused buffer.
            (Engine::Proxy, Ok(())) => assert!(
                got.iter().all(|&b| b == 1),
                "Proxy: not the root's broadcast: {nines} bytes of 9"
            ),
            (e, Ok(())) => {
                panic!("{e:?}: the root's reused buffer taken as its broadcast: {nines} bytes of 9")
            }
            (_, Err(_)) => {}
        }
    }
    comm.barrier().unwrap();
    let mut b = [0u32; 4];
    comm.sendrecv(&[me as u32; 4], 1 - me, 81, &mut b, 1 - me, 81)
        .unwrap();
    assert_eq!(b, [(1 - me) as u32; 4]);
}

/// Five broadcasts of 8 MiB from one buffer whose root timed out on each
/// (the communicator's timeout is 1 s), the buffer then written again, and
/// the member's parts after that: each fails. The root's fifth failure
/// replaced the record of its first (a rank keeps four), and before hostile
/// pass 21 the member took the reused buffer as the first broadcast, `Ok`.
fn late_bcasts(comm: &Comm) {
    let (me, n) = (comm.rank(), 8 << 20);
    if me == 0 {
        let mut b = vec![1u8; n];
        for _ in 0..5 {
            let e = comm.bcast(&mut b, 0).unwrap_err();
            assert!(matches!(e, Error::Timeout { .. }), "{e}");
        }
        b.fill(9);
        // Held while rank 1 reads (from 6 s).
        std::thread::sleep(Duration::from_millis(3000));
    } else {
        std::thread::sleep(Duration::from_millis(6000));
        for i in 0..5 {
            let mut got = vec![0u8; n];
            if comm.bcast(&mut got, 0).is_ok() {
                let nines = got.iter().filter(|&&b| b == 9).count();
                panic!("broadcast {i}: the root's reused buffer taken: {nines} bytes of 9");
            }
        }
    }
}

/// An allreduce of 8 MiB whose rank 0 timed out waiting for rank 1, its
/// receive buffer then written again and held, and rank 1's part after
/// that: nothing writes into rank 0's buffer once its part ended (the
/// `Proxy` engine's proxy writes a rank's result into its buffer at its
/// address; it must not once the rank gave the buffer back), and rank 1
/// gets no result made of rank 0's reused buffer.
fn late_allreduce(comm: &Comm) {
    let (me, n) = (comm.rank(), 1 << 20);
    let send = vec![1u64; n];
    if me == 0 {
        let mut recv = vec![0u64; n];
        let e = comm.allreduce(&send, &mut recv, ReduceOp::Sum).unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
        recv.fill(7);
        // Held while rank 1 comes (at 2.5 s) and ends its part.
        std::thread::sleep(Duration::from_millis(1500));
        let touched = recv.iter().filter(|&&v| v != 7).count();
        assert_eq!(
            touched,
            0,
            "{:?}: {touched} elements of a buffer given back written after",
            comm.engine()
        );
    } else {
        std::thread::sleep(Duration::from_millis(2500));
        let mut recv = vec![0u64; n];
        if comm.allreduce(&send, &mut recv, ReduceOp::Sum).is_ok() {
            assert!(
                recv.iter().all(|&v| v == 2),
                "{:?}: a result made of a reused buffer",
                comm.engine()
            );
        }
    }
    comm.barrier().unwrap();
}

#[test]
fn a_member_late_to_a_collective_its_root_gave_up_does_not_take_the_reused_buffer() {
    run("late_bcast", 2, 2);
}

#[test]
fn a_member_late_to_collectives_their_root_gave_up_and_forgot_does_not_take_them() {
    run("late_bcasts", 2, 1);
}

#[test]
fn nothing_is_written_into_a_buffer_given_back_by_a_timeout() {
    run("late_allreduce", 2, 2);
}
