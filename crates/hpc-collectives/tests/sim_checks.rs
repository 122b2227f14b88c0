//! The simulator's static checks on hand-made schedules.

use hpc_collectives::sim::{self, SimError};
use hpc_collectives::{Algorithm, CollectiveKind, Region, Round, Schedule, Step};

fn one_round(steps: Vec<Step>) -> Schedule {
    Schedule {
        kind: CollectiveKind::Barrier,
        algorithm: Algorithm::Dissemination,
        rank: 0,
        size: 1,
        send_bytes: 16,
        recv_bytes: 16,
        scratch_bytes: 16,
        rounds: vec![Round { steps }],
    }
}

/// An empty step between two conflicting ones (in address order) hides nothing:
/// the write of `recv[0..10]` and the read of `recv[6..8]` in the same round are
/// still reported, with an empty write at `recv[5]` sorted between them.
#[test]
fn an_empty_region_does_not_hide_a_conflict() {
    let write_all = Step::Copy {
        src: Region::send(0, 10),
        dst: Region::recv(0, 10),
    };
    let read_part = Step::Copy {
        src: Region::recv(6, 2),
        dst: Region::scratch(0, 2),
    };
    let empty = Step::Copy {
        src: Region::send(0, 0),
        dst: Region::recv(5, 0),
    };
    assert!(matches!(
        sim::check(&one_round(vec![write_all, read_part]), 16, 16),
        Err(SimError::Conflict { .. })
    ));
    let e = sim::check(&one_round(vec![write_all, empty, read_part]), 16, 16);
    assert!(matches!(e, Err(SimError::Conflict { .. })), "{e:?}");
    // The empty step alone conflicts with nothing.
    sim::check(&one_round(vec![empty, read_part]), 16, 16).unwrap();
}

fn two_ranks(size_of_second: usize) -> Vec<Schedule> {
    let mut s0 = one_round(vec![
        Step::Send {
            peer: 1,
            region: Region::send(0, 4),
            tag: 0,
        },
        Step::Send {
            peer: 1,
            region: Region::send(4, 6),
            tag: 1,
        },
    ]);
    s0.size = 2;
    let mut s1 = one_round(vec![
        Step::Recv {
            peer: 0,
            region: Region::recv(0, 4),
            tag: 0,
        },
        Step::Recv {
            peer: 0,
            region: Region::recv(4, 6),
            tag: 1,
        },
    ]);
    s1.rank = 1;
    s1.size = size_of_second;
    vec![s0, s1]
}

fn inputs() -> Vec<sim::RankBuffers> {
    (0..2)
        .map(|r| sim::RankBuffers {
            send: vec![r as u8 + 1; 16],
            recv: vec![0; 16],
        })
        .collect()
}

/// The counters add up every message and byte sent, and a schedule with the
/// right rank but the wrong job size is refused.
#[test]
fn counters_and_job_size() {
    let custom = hpc_collectives::CustomOps::new();
    let out = sim::run_with(&two_ranks(2), inputs(), &custom).unwrap();
    assert_eq!(out.recv[1][..10], [1; 10]);
    assert_eq!(out.stats.messages, 2);
    assert_eq!(out.stats.bytes, 10);
    assert_eq!(out.stats.max_bytes_per_rank, 10);
    assert_eq!(out.stats.max_rounds, 1);
    assert!(matches!(
        sim::run_with(&two_ranks(3), inputs(), &custom),
        Err(SimError::WrongRank {
            index: 1,
            rank: 1,
            size: 3
        })
    ));
}
