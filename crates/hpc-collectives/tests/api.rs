//! Validation, selection rule, printing and serialisation.

use hpc_collectives::sim::{self, RankBuffers, SimError};
use hpc_collectives::{
    Algorithm, BufferId, Collective, CollectiveError, CollectiveKind, CustomOps, DataType, Options,
    ReduceOp, Schedule,
};

#[test]
fn validation_errors() {
    let dt = DataType::F32;
    assert_eq!(
        Collective::Barrier.schedule(0, 0, &Options::default()),
        Err(CollectiveError::EmptyCommunicator)
    );
    assert_eq!(
        Collective::Barrier.schedule(4, 4, &Options::default()),
        Err(CollectiveError::RankOutOfRange { rank: 4, size: 4 })
    );
    let b = Collective::Broadcast {
        root: 5,
        count: 1,
        dtype: dt,
    };
    assert_eq!(
        b.validate(5),
        Err(CollectiveError::RootOutOfRange { root: 5, size: 5 })
    );
    let v = Collective::Allgatherv {
        counts: vec![1, 2],
        dtype: dt,
    };
    assert!(matches!(
        v.validate(3),
        Err(CollectiveError::CountMismatch {
            expected: 3,
            got: 2,
            ..
        })
    ));
    let x = Collective::Allreduce {
        count: 4,
        dtype: dt,
        op: ReduceOp::Bxor,
    };
    assert_eq!(
        x.validate(2),
        Err(CollectiveError::UnsupportedOp {
            op: ReduceOp::Bxor,
            dtype: dt
        })
    );
    let ok = Collective::Allreduce {
        count: 4,
        dtype: DataType::U16,
        op: ReduceOp::Bxor,
    };
    assert_eq!(ok.validate(2), Ok(()));
    let a = Collective::Allreduce {
        count: 4,
        dtype: dt,
        op: ReduceOp::Sum,
    };
    assert_eq!(
        a.check_buffers(0, 2, 16, 8),
        Err(CollectiveError::BufferTooSmall {
            buffer: BufferId::Recv,
            needed: 16,
            got: 8
        })
    );
    assert_eq!(
        a.check_buffers(0, 2, 15, 16),
        Err(CollectiveError::BufferTooSmall {
            buffer: BufferId::Send,
            needed: 16,
            got: 15
        })
    );
    assert_eq!(a.check_buffers(1, 2, 16, 16), Ok(()));
    assert_eq!(
        a.schedule(0, 2, &Options::with_algorithm(Algorithm::Bruck)),
        Err(CollectiveError::UnsupportedAlgorithm {
            algorithm: Algorithm::Bruck,
            kind: CollectiveKind::Allreduce
        })
    );
    let t = Collective::Alltoallv {
        send_counts: vec![1, 2],
        recv_counts: vec![3, 2],
        dtype: dt,
    };
    assert!(matches!(
        t.schedule(0, 2, &Options::default()),
        Err(CollectiveError::CountMismatch { .. })
    ));
    // Error messages are readable.
    assert_eq!(
        CollectiveError::RootOutOfRange { root: 5, size: 5 }.to_string(),
        "root 5 out of range for 5 ranks"
    );
}

#[test]
fn selection_rule() {
    let o = Options::default();
    let sel = |c: Collective, p| c.select(p, &o).unwrap();
    let f32s = |count| Collective::Allreduce {
        count,
        dtype: DataType::F32,
        op: ReduceOp::Sum,
    };
    assert_eq!(sel(f32s(512), 8), Algorithm::RecursiveDoubling); // 2 KiB
    assert_eq!(sel(f32s(513), 8), Algorithm::Rabenseifner);
    assert_eq!(sel(f32s(600), 1024), Algorithm::RecursiveDoubling); // count < pof2
    assert_eq!(sel(f32s(4 << 20), 8), Algorithm::Ring); // 16 MiB
    let bc = |count| Collective::Broadcast {
        root: 0,
        count,
        dtype: DataType::U8,
    };
    assert_eq!(sel(bc(12287), 64), Algorithm::Binomial);
    assert_eq!(sel(bc(12288), 64), Algorithm::ScatterAllgather);
    assert_eq!(sel(bc(1 << 20), 7), Algorithm::Binomial);
    let ag = |count| Collective::Allgather {
        count,
        dtype: DataType::U8,
    };
    assert_eq!(sel(ag(1024), 16), Algorithm::RecursiveDoubling);
    assert_eq!(sel(ag(1024), 12), Algorithm::Bruck);
    assert_eq!(sel(ag(1 << 16), 16), Algorithm::Ring);
    assert_eq!(sel(ag(1 << 14), 12), Algorithm::Ring);
    let aa = |count| Collective::Alltoall {
        count,
        dtype: DataType::U8,
    };
    assert_eq!(sel(aa(256), 8), Algorithm::Bruck);
    assert_eq!(sel(aa(257), 8), Algorithm::Pairwise);
    assert_eq!(sel(aa(16), 4), Algorithm::Pairwise);
    let rs = |count| Collective::ReduceScatterBlock {
        count,
        dtype: DataType::U8,
        op: ReduceOp::Sum,
    };
    assert_eq!(sel(rs(1024), 4), Algorithm::Ring);
    assert_eq!(sel(rs(1 << 17), 4), Algorithm::Pairwise);
    assert_eq!(sel(Collective::Barrier, 3), Algorithm::Dissemination);
    // Tuning is overridable.
    let mut o2 = Options::default();
    o2.tuning.allreduce_short = 1 << 30;
    assert_eq!(
        f32s(1 << 20).select(8, &o2).unwrap(),
        Algorithm::RecursiveDoubling
    );
    // Every kind lists algorithms that parse back from their names.
    for k in CollectiveKind::ALL {
        assert_eq!(k.name().parse::<CollectiveKind>().unwrap(), k);
        for a in k.algorithms() {
            assert_eq!(a.name().parse::<Algorithm>().unwrap(), *a);
        }
    }
}

#[test]
fn display_shows_rounds_peers_and_bytes() {
    let c = Collective::Allgather {
        count: 16,
        dtype: DataType::U8,
    };
    let s = c
        .schedule(1, 4, &Options::with_algorithm(Algorithm::Ring))
        .unwrap();
    let text = s.to_string();
    assert!(text
        .starts_with("allgather / ring: rank 1 of 4, send 16 B, recv 64 B, scratch 0 B, 3 rounds"));
    assert!(text.contains("round 2:"));
    assert!(text.contains("send   -> 2   send[0..16] 16 B tag 0"));
    assert!(text.contains("recv   <- 0   recv[0..16] 16 B tag 0"));
    let r = Collective::Allreduce {
        count: 8,
        dtype: DataType::F32,
        op: ReduceOp::Sum,
    };
    let s = r.schedule(1, 2, &Options::default()).unwrap();
    assert!(s
        .to_string()
        .contains("reduce scratch[0..32] into recv[0..32] 32 B sum f32"));
}

#[test]
fn schedules_round_trip_through_serde() {
    let c = Collective::Allreduce {
        count: 100,
        dtype: DataType::Bf16,
        op: ReduceOp::Custom(7),
    };
    for a in [
        Algorithm::RecursiveDoubling,
        Algorithm::Rabenseifner,
        Algorithm::Ring,
    ] {
        let s = c.schedule(2, 5, &Options::with_algorithm(a)).unwrap();
        let json = serde_json::to_string(&s).unwrap();
        let back: Schedule = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
    }
    let json = serde_json::to_string(&c).unwrap();
    assert_eq!(serde_json::from_str::<Collective>(&json).unwrap(), c);
}

#[test]
fn pure_functions_are_deterministic() {
    let c = Collective::Alltoall {
        count: 3,
        dtype: DataType::I16,
    };
    for p in 1..20 {
        for r in 0..p {
            let a = c
                .schedule(r, p, &Options::with_algorithm(Algorithm::Bruck))
                .unwrap();
            let b = c
                .schedule(r, p, &Options::with_algorithm(Algorithm::Bruck))
                .unwrap();
            assert_eq!(a, b);
        }
    }
}

/// A custom operation registered with the simulator runs through every
/// allreduce algorithm.
#[test]
fn custom_op_allreduce() {
    let mut ops = CustomOps::new();
    // Saturating u8 addition.
    let id = ops.register(|_, src, dst| {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = d.saturating_add(*s);
        }
    });
    let size = 7;
    let c = Collective::Allreduce {
        count: 3,
        dtype: DataType::U8,
        op: ReduceOp::Custom(id),
    };
    for a in [
        Algorithm::RecursiveDoubling,
        Algorithm::Rabenseifner,
        Algorithm::Ring,
    ] {
        let scheds: Vec<_> = (0..size)
            .map(|r| c.schedule(r, size, &Options::with_algorithm(a)).unwrap())
            .collect();
        let inputs = (0..size)
            .map(|r| RankBuffers {
                send: vec![1, 50, r as u8],
                recv: vec![0; 3],
            })
            .collect();
        let out = sim::run_with(&scheds, inputs, &ops).unwrap();
        for b in &out.recv {
            assert_eq!(b, &[7, 255, 21], "{a}");
        }
        // Without the registry the simulator reports the unknown operation.
        let inputs = (0..size)
            .map(|_| RankBuffers {
                send: vec![0; 3],
                recv: vec![0; 3],
            })
            .collect();
        assert!(matches!(
            sim::run(&scheds, inputs),
            Err(SimError::Reduce { .. })
        ));
    }
}

/// Mismatched alltoallv counts (only detectable at run time) are reported.
#[test]
fn alltoallv_count_mismatch_is_reported() {
    let size = 2;
    let c0 = Collective::Alltoallv {
        send_counts: vec![1, 2],
        recv_counts: vec![1, 1],
        dtype: DataType::U8,
    };
    let c1 = Collective::Alltoallv {
        send_counts: vec![1, 1],
        recv_counts: vec![1, 1],
        dtype: DataType::U8,
    };
    let scheds = vec![
        c0.schedule(0, size, &Options::default()).unwrap(),
        c1.schedule(1, size, &Options::default()).unwrap(),
    ];
    let inputs = vec![
        RankBuffers {
            send: vec![0; 3],
            recv: vec![0; 2],
        },
        RankBuffers {
            send: vec![0; 2],
            recv: vec![0; 2],
        },
    ];
    let err = sim::run(&scheds, inputs).unwrap_err();
    assert_eq!(
        err,
        SimError::SizeMismatch {
            src: 0,
            dst: 1,
            tag: 0,
            sent: 2,
            expected: 1
        }
    );
}

/// Counts whose bytes overflow (found by fuzzing the proxy's decoding of a
/// rank's blob, where `buffer_bytes` multiplied them with overflow) are refused
/// by validation, before any size is computed from them.
#[test]
fn counts_beyond_the_address_space_are_refused() {
    let huge = [
        Collective::Allgather {
            count: usize::MAX / 2,
            dtype: DataType::F64,
        },
        Collective::Broadcast {
            root: 0,
            count: isize::MAX as usize,
            dtype: DataType::U16,
        },
        Collective::Alltoallv {
            send_counts: vec![usize::MAX, 2, 0],
            recv_counts: vec![1, 1, 1],
            dtype: DataType::U8,
        },
        Collective::ReduceScatter {
            counts: vec![usize::MAX / 4; 3],
            dtype: DataType::I32,
            op: ReduceOp::Sum,
        },
    ];
    for c in huge {
        assert!(
            matches!(c.validate(3), Err(CollectiveError::TooLarge { .. })),
            "{c:?}"
        );
        assert!(
            c.check_buffers(1, 3, usize::MAX, usize::MAX).is_err(),
            "{c:?}"
        );
        assert!(c.schedule(1, 3, &Options::default()).is_err(), "{c:?}");
    }
    // The largest that fits still validates.
    let fits = Collective::Allgather {
        count: isize::MAX as usize / 8 / 3,
        dtype: DataType::F64,
    };
    assert_eq!(fits.validate(3), Ok(()));
}

/// Counts that validate but whose schedule's scratch blocks together pass what
/// a `usize` counts (Bruck's alltoall asked for by name: its rotation and two
/// packing blocks, each just under `isize::MAX` bytes) are a typed error, not
/// an overflow in the proxy that builds the schedule.
#[test]
fn scratch_beyond_the_address_space_is_refused() {
    let coll = Collective::Alltoall {
        count: isize::MAX as usize / 2,
        dtype: DataType::U8,
    };
    assert_eq!(coll.validate(2), Ok(()));
    let opts = Options::with_algorithm(Algorithm::Bruck);
    for rank in 0..2 {
        assert!(
            matches!(
                coll.schedule(rank, 2, &opts),
                Err(CollectiveError::TooLarge { .. })
            ),
            "rank {rank}"
        );
    }
    // A small one by the same algorithm still schedules.
    let small = Collective::Alltoall {
        count: 4,
        dtype: DataType::U8,
    };
    assert!(small.schedule(0, 2, &opts).unwrap().scratch_bytes > 0);
}
