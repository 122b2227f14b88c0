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
