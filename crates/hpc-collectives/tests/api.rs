//! Validation, selection rule, printing and serialisation.

use hpc_collectives::sim::{self, RankBuffers, SimError};
use hpc_collectives::{
    Algorithm, BufferId, Collective, CollectiveError, CollectiveKind, CustomOps, DataType, Options,
    ReduceOp, Schedule, Step, MAX_RANKS,
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
    // A rank equal to the size is out of range too.
    assert_eq!(
        a.check_buffers(2, 2, 16, 16),
        Err(CollectiveError::RankOutOfRange { rank: 2, size: 2 })
    );
    assert_eq!(
        a.schedule(2, 2, &Options::default()),
        Err(CollectiveError::RankOutOfRange { rank: 2, size: 2 })
    );
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
    use {Algorithm as A, DataType as D};
    let ar = |count, dtype| Collective::Allreduce {
        count,
        dtype,
        op: ReduceOp::Sum,
    };
    assert_eq!(sel(ar(512, D::F32), 8), Algorithm::RecursiveDoubling); // 2 KiB
    assert_eq!(sel(ar(513, D::F32), 8), Algorithm::Rabenseifner);
    assert_eq!(sel(ar(600, D::F32), 1024), Algorithm::RecursiveDoubling); // count < pof2
    assert_eq!(sel(ar(4 << 20, D::F32), 8), Algorithm::Ring); // 16 MiB
    let bc = |count, dtype| Collective::Broadcast {
        root: 0,
        count,
        dtype,
    };
    assert_eq!(sel(bc(12287, D::U8), 64), Algorithm::Binomial);
    assert_eq!(sel(bc(12288, D::U8), 64), Algorithm::ScatterAllgather);
    assert_eq!(sel(bc(1 << 20, D::U8), 7), Algorithm::Binomial);
    let ag = |count, dtype| Collective::Allgather { count, dtype };
    assert_eq!(sel(ag(1024, D::U8), 16), Algorithm::RecursiveDoubling);
    assert_eq!(sel(ag(1024, D::U8), 12), Algorithm::Bruck);
    assert_eq!(sel(ag(1 << 16, D::U8), 16), Algorithm::Ring);
    assert_eq!(sel(ag(1 << 14, D::U8), 12), Algorithm::Ring);
    let aa = |count, dtype| Collective::Alltoall { count, dtype };
    assert_eq!(sel(aa(256, D::U8), 8), Algorithm::Bruck);
    assert_eq!(sel(aa(257, D::U8), 8), Algorithm::Pairwise);
    assert_eq!(sel(aa(16, D::U8), 4), Algorithm::Pairwise);
    let rs = |count, dtype| Collective::ReduceScatterBlock {
        count,
        dtype,
        op: ReduceOp::Sum,
    };
    assert_eq!(sel(rs(1024, D::U8), 4), Algorithm::Ring);
    assert_eq!(sel(rs(1 << 17, D::U8), 4), Algorithm::Pairwise);
    assert_eq!(sel(Collective::Barrier, 3), Algorithm::Dissemination);
    // Every threshold at its exact boundary, from both sides, with element
    // types wider than a byte where the rule counts bytes.
    // Broadcast: binomial below 12 KiB or below 8 ranks.
    assert_eq!(sel(bc(6143, D::U16), 8), A::Binomial);
    assert_eq!(sel(bc(6144, D::U16), 8), A::ScatterAllgather);
    assert_eq!(sel(bc(6144, D::U16), 7), A::Binomial);
    assert_eq!(sel(bc(1 << 20, D::U16), 8), A::ScatterAllgather);
    // Allgather(v): the whole gathered vector in bytes against 512 KiB
    // (power of two) or 80 KiB (other rank counts).
    let agv = |first: usize, p: usize| Collective::Allgatherv {
        counts: (0..p).map(|r| if r == 0 { first } else { 1 }).collect(),
        dtype: D::U16,
    };
    assert_eq!(sel(agv(256 * 1024 - 4, 4), 4), A::RecursiveDoubling);
    assert_eq!(sel(agv(256 * 1024 - 3, 4), 4), A::Ring);
    assert_eq!(sel(agv(40 * 1024 - 3, 3), 3), A::Bruck);
    assert_eq!(sel(agv(40 * 1024 - 2, 3), 3), A::Ring);
    assert_eq!(sel(ag(256 * 1024 / 4 - 1, D::U16), 4), A::RecursiveDoubling);
    assert_eq!(sel(ag(256 * 1024 / 4, D::U16), 4), A::Ring);
    assert_eq!(sel(ag(40 * 1024 / 5 - 1, D::U16), 5), A::Bruck);
    assert_eq!(sel(ag(40 * 1024 / 5, D::U16), 5), A::Ring);
    // Alltoall: Bruck for blocks up to 256 B from 8 ranks on.
    assert_eq!(sel(aa(128, D::U16), 8), A::Bruck);
    assert_eq!(sel(aa(129, D::U16), 8), A::Pairwise);
    assert_eq!(sel(aa(1, D::U16), 7), A::Pairwise);
    assert_eq!(sel(aa(1, D::U16), 8), A::Bruck);
    let v = Collective::Alltoallv {
        send_counts: vec![0; 16],
        recv_counts: vec![0; 16],
        dtype: D::U8,
    };
    assert_eq!(sel(v, 16), A::Pairwise);
    // Allreduce: recursive doubling up to 2 KiB or below pof2(p) elements,
    // ring from 16 MiB.
    assert_eq!(sel(ar(256, D::F64), 8), A::RecursiveDoubling);
    assert_eq!(sel(ar(257, D::F64), 8), A::Rabenseifner);
    assert_eq!(sel(ar(511, D::F64), 600), A::RecursiveDoubling);
    assert_eq!(sel(ar(512, D::F64), 600), A::Rabenseifner);
    assert_eq!(sel(ar((2 << 20) - 1, D::F64), 8), A::Rabenseifner);
    assert_eq!(sel(ar(2 << 20, D::F64), 8), A::Ring);
    assert_eq!(sel(ar(1, D::F64), 1), A::RecursiveDoubling);
    // Reduce-scatter: ring below 512 KiB of input, pairwise from there.
    assert_eq!(sel(rs(64 * 1024 - 1, D::U16), 4), A::Ring);
    assert_eq!(sel(rs(64 * 1024, D::U16), 4), A::Pairwise);
    let rsv = |first| Collective::ReduceScatter {
        counts: vec![first, 1, 1],
        dtype: D::U16,
        op: ReduceOp::Sum,
    };
    assert_eq!(sel(rsv(256 * 1024 - 3), 3), A::Ring);
    assert_eq!(sel(rsv(256 * 1024 - 2), 3), A::Pairwise);
    // The rooted collectives and the barrier have one rule each.
    for c in [
        Collective::Gather {
            root: 1,
            count: 1 << 20,
            dtype: D::U8,
        },
        Collective::Scatter {
            root: 1,
            count: 1 << 20,
            dtype: D::U8,
        },
        Collective::Reduce {
            root: 1,
            count: 1 << 20,
            dtype: D::U8,
            op: ReduceOp::Sum,
        },
    ] {
        assert_eq!(sel(c, 16), A::Binomial);
    }
    assert_eq!(sel(Collective::Barrier, 16), A::Dissemination);
    // Tuning is overridable.
    let mut o2 = Options::default();
    o2.tuning.allreduce_short = 1 << 30;
    assert_eq!(
        ar(1 << 20, D::F32).select(8, &o2).unwrap(),
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

/// A name that is no kind or algorithm is quoted cut in the refusal (one of
/// 100,000 characters was quoted whole).
#[test]
fn an_unknown_name_is_quoted_cut() {
    let e = "fast".parse::<Algorithm>().unwrap_err();
    assert_eq!(e, "unknown algorithm \"fast\"");
    let long = "x".repeat(100_000);
    for e in [
        long.parse::<Algorithm>().unwrap_err(),
        long.parse::<CollectiveKind>().unwrap_err(),
    ] {
        assert!(
            e.len() < 120 && e.ends_with("(99960 more characters)"),
            "{}",
            e.len()
        );
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

/// `block_bytes`, the per-rank block a benchmark reports, for every variant.
#[test]
fn block_bytes_of_every_collective() {
    let d = DataType::U16;
    let op = ReduceOp::Sum;
    let cases = [
        (Collective::Barrier, Some(0)),
        (
            Collective::Broadcast {
                root: 1,
                count: 5,
                dtype: d,
            },
            Some(10),
        ),
        (
            Collective::Gather {
                root: 1,
                count: 5,
                dtype: d,
            },
            Some(10),
        ),
        (
            Collective::Scatter {
                root: 1,
                count: 5,
                dtype: d,
            },
            Some(10),
        ),
        (Collective::Allgather { count: 5, dtype: d }, Some(10)),
        (Collective::Alltoall { count: 5, dtype: d }, Some(10)),
        (
            Collective::Reduce {
                root: 1,
                count: 5,
                dtype: d,
                op,
            },
            Some(10),
        ),
        (
            Collective::Allreduce {
                count: 5,
                dtype: d,
                op,
            },
            Some(10),
        ),
        (
            Collective::ReduceScatterBlock {
                count: 5,
                dtype: d,
                op,
            },
            Some(10),
        ),
        (
            Collective::Allgatherv {
                counts: vec![2, 7, 3],
                dtype: d,
            },
            Some(14),
        ),
        (
            Collective::Allgatherv {
                counts: vec![],
                dtype: d,
            },
            Some(0),
        ),
        (
            Collective::ReduceScatter {
                counts: vec![3, 1, 6],
                dtype: d,
                op,
            },
            Some(12),
        ),
        (
            Collective::Alltoallv {
                send_counts: vec![1, 2],
                recv_counts: vec![1, 2],
                dtype: d,
            },
            None,
        ),
    ];
    for (c, want) in cases {
        assert_eq!(c.block_bytes(), want, "{c:?}");
    }
}

/// Each count vector is checked for its length, and byte totals of exactly
/// `isize::MAX` still fit.
#[test]
fn every_count_vector_and_rank_is_validated() {
    let d = DataType::U8;
    let short = [
        Collective::ReduceScatter {
            counts: vec![1, 1],
            dtype: d,
            op: ReduceOp::Sum,
        },
        Collective::Alltoallv {
            send_counts: vec![1, 1],
            recv_counts: vec![1, 1, 1],
            dtype: d,
        },
        Collective::Alltoallv {
            send_counts: vec![1, 1, 1],
            recv_counts: vec![1, 1],
            dtype: d,
        },
    ];
    for c in short {
        assert!(
            matches!(
                c.validate(3),
                Err(CollectiveError::CountMismatch {
                    expected: 3,
                    got: 2,
                    ..
                })
            ),
            "{c:?}"
        );
        assert!(c.schedule(0, 3, &Options::default()).is_err(), "{c:?}");
    }
    assert_eq!(
        Collective::Reduce {
            root: 2,
            count: 1,
            dtype: d,
            op: ReduceOp::Sum
        }
        .validate(2),
        Err(CollectiveError::RootOutOfRange { root: 2, size: 2 })
    );
    let max = isize::MAX as usize;
    let fits = [
        Collective::Broadcast {
            root: 0,
            count: max,
            dtype: d,
        },
        Collective::Allgatherv {
            counts: vec![max - 1, 1],
            dtype: d,
        },
        Collective::Alltoallv {
            send_counts: vec![max - 1, 1],
            recv_counts: vec![max - 1, 1],
            dtype: d,
        },
    ];
    for c in fits {
        assert_eq!(c.validate(if c.root().is_some() { 1 } else { 2 }), Ok(()));
    }
    let over = [
        Collective::Alltoallv {
            send_counts: vec![max, 1],
            recv_counts: vec![1, 1],
            dtype: d,
        },
        Collective::Alltoallv {
            send_counts: vec![1, 1],
            recv_counts: vec![max, 1],
            dtype: d,
        },
        Collective::Broadcast {
            root: 0,
            count: max / 2 + 1,
            dtype: d,
        },
    ];
    for c in over {
        assert!(
            matches!(c.validate(2), Err(CollectiveError::TooLarge { .. })),
            "{c:?}"
        );
    }
}

/// Recursive doubling and Rabenseifner give one vector of scratch to the ranks
/// that receive data to reduce, and none to a single rank or to a rank folded
/// away (it only sends its input and receives the result); ring needs one
/// chunk, the largest.
#[test]
fn allreduce_scratch_only_where_data_is_reduced() {
    for p in 1..=9usize {
        let rem = p - (1 << p.ilog2());
        for count in [0usize, 5, 100] {
            let c = Collective::Allreduce {
                count,
                dtype: DataType::I32,
                op: ReduceOp::Sum,
            };
            let scratch = |r, a| {
                c.schedule(r, p, &Options::with_algorithm(a))
                    .unwrap()
                    .scratch_bytes
            };
            for r in 0..p {
                let folded_away = r < 2 * rem && r % 2 == 0;
                let want = if p == 1 || folded_away { 0 } else { count * 4 };
                for a in [Algorithm::RecursiveDoubling, Algorithm::Rabenseifner] {
                    assert_eq!(scratch(r, a), want, "{a} rank {r} of {p}, {count}");
                }
                let ring = if p == 1 { 0 } else { count.div_ceil(p) * 4 };
                assert_eq!(scratch(r, Algorithm::Ring), ring, "ring rank {r} of {p}");
            }
        }
    }
}

/// Each algorithm's first exchange sends from the send buffer where what it
/// sends is only the rank's own input (the copy into the receive buffer was
/// just written by this core, and a peer reading it from there pays a
/// cross-core transfer of every line), and from the receive buffer where the
/// rank holds more than its input: a folded-in partner's data or an earlier
/// exchange's result. Results are the same either way, so only the schedule
/// shows it.
#[test]
fn exchanges_send_the_bare_input_from_the_send_buffer() {
    use BufferId::{Recv, Send};
    // The buffers that the sends of `tag` read, in schedule order.
    let sources = |s: &Schedule, tag: Option<u32>| -> Vec<BufferId> {
        s.steps()
            .filter_map(|st| match st {
                Step::Send { region, tag: t, .. } if tag.is_none_or(|tag| *t == tag) => {
                    Some(region.buf)
                }
                _ => None,
            })
            .collect()
    };
    for p in 1..=9usize {
        let pof2 = 1usize << p.ilog2();
        let rem = p - pof2;
        let exchanges = pof2.ilog2() as usize;
        let reduce = Collective::Allreduce {
            count: 16,
            dtype: DataType::I32,
            op: ReduceOp::Sum,
        };
        let gather = Collective::Allgather {
            count: 3,
            dtype: DataType::U8,
        };
        for r in 0..p {
            let sched = |c: &Collective, a| c.schedule(r, p, &Options::with_algorithm(a)).unwrap();
            let folded_in = r < 2 * rem && r % 2 == 1;
            let folded_away = r < 2 * rem && r % 2 == 0;
            // Recursive doubling (allreduce and allgather) and Rabenseifner's
            // reduce-scatter exchange with tag 1; a folded-away rank does not.
            let want: Vec<BufferId> = if folded_away {
                vec![]
            } else {
                (0..exchanges)
                    .map(|i| if i == 0 && !folded_in { Send } else { Recv })
                    .collect()
            };
            for (c, a) in [
                (&reduce, Algorithm::RecursiveDoubling),
                (&reduce, Algorithm::Rabenseifner),
                (&gather, Algorithm::RecursiveDoubling),
            ] {
                let s = sched(c, a);
                assert_eq!(sources(&s, Some(1)), want, "{c:?} {a} rank {r} of {p}");
            }
            // Rabenseifner's allgather of the reduced chunks (tag 2).
            let s = sched(&reduce, Algorithm::Rabenseifner);
            let chunks = if folded_away { 0 } else { exchanges };
            assert_eq!(sources(&s, Some(2)), vec![Recv; chunks], "rank {r} of {p}");
            // Ring and Bruck allgather: the first send only.
            for a in [Algorithm::Ring, Algorithm::Bruck] {
                let got = sources(&sched(&gather, a), None);
                assert_eq!(
                    got.len(),
                    if a == Algorithm::Ring {
                        p - 1
                    } else {
                        exchanges + usize::from(rem > 0)
                    },
                    "{a} rank {r} of {p}"
                );
                for (i, buf) in got.iter().enumerate() {
                    assert_eq!(*buf == Send, i == 0, "{a} rank {r} of {p}: send {i}");
                }
            }
        }
    }
}

/// Binomial reduce: a rank that receives from children gets one scratch
/// buffer per child, up to two (they alternate, so that reducing one child's
/// data overlaps receiving the next), and an accumulator unless it is the
/// root (which accumulates in its receive buffer); a leaf gets none. The
/// root receives from `ceil(log2 p)` children.
#[test]
fn reduce_scratch_per_child_up_to_two() {
    for p in 1..=9usize {
        for root in 0..p {
            // 64 bytes: every scratch buffer starts at a multiple of 64.
            let c = Collective::Reduce {
                root,
                count: 16,
                dtype: DataType::I32,
                op: ReduceOp::Sum,
            };
            for r in 0..p {
                let s = c
                    .schedule(r, p, &Options::with_algorithm(Algorithm::Binomial))
                    .unwrap();
                let children = s
                    .steps()
                    .filter(|st| matches!(st, Step::Recv { .. }))
                    .count();
                if r == root {
                    assert_eq!(children, p.next_power_of_two().ilog2() as usize);
                }
                let buffers = if children == 0 {
                    0
                } else {
                    children.min(2) + usize::from(r != root)
                };
                assert_eq!(
                    s.scratch_bytes,
                    64 * buffers,
                    "rank {r} of {p}, root {root}"
                );
            }
        }
    }
}

/// A communicator size beyond any machine (a rank count computed wrongly) is a
/// typed error naming it, for every collective and from `select` too: it was an
/// allocation of a count per rank that aborted the process (an allgather of 0
/// elements on 2^40 ranks asked for 8 TiB), a loop of a step per rank that did
/// not end (an alltoall), or an arithmetic overflow (a barrier or a broadcast
/// on `usize::MAX` ranks); `select` on 0 ranks took the logarithm of 0, and
/// `block_bytes` of a count of `usize::MAX` overflowed.
#[test]
fn a_size_beyond_any_machine_is_refused_by_name() {
    let colls = [
        Collective::Barrier,
        Collective::Broadcast {
            root: 0,
            count: 0,
            dtype: DataType::F64,
        },
        Collective::Allgather {
            count: 0,
            dtype: DataType::F64,
        },
        Collective::Alltoall {
            count: 0,
            dtype: DataType::F64,
        },
        Collective::ReduceScatterBlock {
            count: 0,
            dtype: DataType::F64,
            op: ReduceOp::Sum,
        },
    ];
    for c in &colls {
        for size in [MAX_RANKS + 1, 1 << 40, usize::MAX] {
            let e = c.schedule(0, size, &Options::default()).unwrap_err();
            assert_eq!(
                e,
                CollectiveError::TooManyRanks {
                    size,
                    max: MAX_RANKS
                },
                "{c:?}"
            );
            assert!(e.to_string().contains(&size.to_string()), "{e}");
            assert!(c.select(size, &Options::default()).is_err(), "{c:?}");
        }
        assert_eq!(
            c.select(0, &Options::default()),
            Err(CollectiveError::EmptyCommunicator),
            "{c:?}"
        );
    }
    assert!(Collective::Barrier
        .schedule(0, MAX_RANKS, &Options::default())
        .is_ok());
    let huge = Collective::Broadcast {
        root: 0,
        count: usize::MAX,
        dtype: DataType::F64,
    };
    assert_eq!(huge.block_bytes(), None);
}

/// `buffer_bytes`, `block_bytes`'s neighbour, asked without `validate`: a count
/// of `usize::MAX` overflowed and a rank past a v-variant's counts indexed out
/// of bounds (panics); the sizes are `usize::MAX` (no buffer holds them) and 0.
#[test]
fn buffer_bytes_of_a_collective_validate_refuses_do_not_panic() {
    let f = DataType::F64;
    let huge = Collective::Allgather {
        count: usize::MAX,
        dtype: f,
    };
    assert_eq!(huge.buffer_bytes(0, 4), (usize::MAX, usize::MAX));
    let v = Collective::Allgatherv {
        counts: vec![1, 2],
        dtype: f,
    };
    assert_eq!(v.buffer_bytes(5, 2), (0, 24));
    let v = Collective::ReduceScatter {
        counts: vec![usize::MAX, 1],
        op: ReduceOp::Sum,
        dtype: f,
    };
    assert_eq!(v.buffer_bytes(7, 2), (usize::MAX, 0));
    // What validate accepts is unchanged.
    let g = Collective::Gather {
        root: 1,
        count: 3,
        dtype: f,
    };
    assert_eq!(g.buffer_bytes(1, 4), (24, 96));
    assert_eq!(g.buffer_bytes(0, 4), (24, 0));
}

/// `select`, `buffer_bytes`'s neighbour, asked without `validate`: counts of
/// `usize::MAX` overflowed (a panic in a debug build); they select as the
/// largest collectives do.
#[test]
fn select_of_a_collective_validate_refuses_does_not_panic() {
    let (f, sum, o) = (DataType::F64, ReduceOp::Sum, Options::default());
    let m = usize::MAX;
    let all = [
        Collective::Broadcast {
            root: 0,
            count: m,
            dtype: f,
        },
        Collective::Allgather { count: m, dtype: f },
        Collective::Allgatherv {
            counts: vec![m, 1, 0, 0],
            dtype: f,
        },
        Collective::Alltoall { count: m, dtype: f },
        Collective::Allreduce {
            count: m,
            dtype: f,
            op: sum,
        },
        Collective::ReduceScatterBlock {
            count: m,
            dtype: f,
            op: sum,
        },
        Collective::ReduceScatter {
            counts: vec![m, 1, 0, 0],
            dtype: f,
            op: sum,
        },
    ];
    for c in all {
        let big = c.select(4, &o).unwrap();
        // Each as the largest of its kind: never the short-message algorithm.
        assert!(
            !matches!(big, Algorithm::RecursiveDoubling | Algorithm::Bruck),
            "{c:?}: {big:?}"
        );
    }
}

/// `min` and `max` of `-0.0` and `+0.0` gave the zero of one operand or the
/// other by their order, so the ranks of a recursive-doubling allreduce got
/// zeros of different signs; a NaN operand is still ignored.
#[test]
fn every_rank_gets_the_same_zero_from_min_and_max() {
    for (op, want_negative) in [(ReduceOp::Min, true), (ReduceOp::Max, false)] {
        for size in [2usize, 3, 4, 5] {
            let c = Collective::Allreduce {
                count: 1,
                dtype: DataType::F64,
                op,
            };
            for &alg in c.kind().algorithms() {
                let opts = Options::with_algorithm(alg);
                let Ok(s) = (0..size)
                    .map(|r| c.schedule(r, size, &opts))
                    .collect::<Result<Vec<_>, _>>()
                else {
                    continue;
                };
                let zero = |r: usize| if r % 2 == 0 { 0.0f64 } else { -0.0 };
                let inputs = (0..size)
                    .map(|r| RankBuffers {
                        send: zero(r).to_ne_bytes().to_vec(),
                        recv: vec![0; 8],
                    })
                    .collect();
                for out in sim::run(&s, inputs).unwrap() {
                    let v = f64::from_ne_bytes(out[..8].try_into().unwrap());
                    assert_eq!(v.is_sign_negative(), want_negative, "{op:?} {size} {alg:?}");
                }
            }
        }
    }
    for dtype in [DataType::F16, DataType::Bf16, DataType::F32] {
        let n = dtype.size();
        let (mut a, mut b) = (vec![0u8; n], vec![0u8; n]);
        // -0 has the sign bit alone: the top bit of the last byte.
        a[n - 1] = 0x80;
        let neg = a.clone();
        hpc_collectives::apply_reduce(ReduceOp::Min, dtype, &b.clone(), &mut a).unwrap();
        hpc_collectives::apply_reduce(ReduceOp::Min, dtype, &neg, &mut b).unwrap();
        assert_eq!((&a, &b), (&neg, &neg), "{dtype:?}");
    }
    let one = 1.0f64.to_ne_bytes();
    let mut nan = f64::NAN.to_ne_bytes();
    hpc_collectives::apply_reduce(ReduceOp::Max, DataType::F64, &one, &mut nan).unwrap();
    assert_eq!(nan, one);
}

/// Every rank of an allreduce gets the same bits also where NaNs meet (the
/// crate's documentation promises identical bits on every rank): recursive
/// doubling combines the operands in another order on each rank, and a NaN
/// result carried the payload of whichever operand came first, so with
/// NaNs of different payloads the ranks got NaNs of different bits, for
/// `Sum`, `Prod`, `Min` and `Max`, of every float type.
#[test]
fn every_rank_gets_the_same_nan_whatever_the_payloads() {
    for dtype in [DataType::F64, DataType::F32, DataType::F16, DataType::Bf16] {
        let n = dtype.size();
        // A quiet NaN of payload `p` (the exponent all ones, the top bit of
        // the fraction set, `p` in the low bits), native-endian.
        let nan = |p: u64| -> Vec<u8> {
            let bits: u64 = match n {
                8 => 0x7ff8_0000_0000_0000 | p,
                4 => 0x7fc0_0000 | p,
                _ if dtype == DataType::F16 => 0x7e00 | p,
                _ => 0x7fc0 | p,
            };
            let mut b = bits.to_le_bytes()[..n].to_vec();
            if cfg!(target_endian = "big") {
                b.reverse();
            }
            b
        };
        for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max] {
            for size in [2usize, 3, 4, 5] {
                let c = Collective::Allreduce {
                    count: 1,
                    dtype,
                    op,
                };
                for &alg in c.kind().algorithms() {
                    let opts = Options::with_algorithm(alg);
                    let Ok(s) = (0..size)
                        .map(|r| c.schedule(r, size, &opts))
                        .collect::<Result<Vec<_>, _>>()
                    else {
                        continue;
                    };
                    let inputs = (0..size)
                        .map(|r| RankBuffers {
                            send: nan(r as u64 + 1),
                            recv: vec![0; n],
                        })
                        .collect();
                    let outs = sim::run(&s, inputs).unwrap();
                    assert!(
                        outs.iter().all(|o| o[..n] == outs[0][..n]),
                        "{dtype:?} {op:?} {size} {alg:?}: {outs:x?}"
                    );
                }
            }
        }
    }
}

/// A region whose offset and length add up beyond `usize::MAX` (a schedule
/// built or edited by hand) is out of its buffer, refused by the checks that
/// take a `Result`: `Buffers::read`, `write`, `src_dst` and `sim::check`
/// panicked with "attempt to add with overflow" in `Region::end`.
#[test]
fn a_region_beyond_usize_max_is_out_of_bounds_not_a_panic() {
    use hpc_collectives::interp::Buffers;
    use hpc_collectives::schedule::Region;
    let far = Region::send(usize::MAX, 2);
    assert_eq!(far.end(), usize::MAX);
    let mut b = Buffers {
        send: vec![0; 8],
        recv: vec![0; 8],
        scratch: Vec::new(),
    };
    assert!(b.read(far).is_err());
    assert!(b.write(far).is_err());
    assert!(b.src_dst(far, Region::recv(0, 2)).is_err());
    assert!(b.src_dst(Region::recv(0, 2), far).is_err());
    assert!(!far.overlaps(&Region::send(0, 8)));
    let c = Collective::Allreduce {
        count: 1,
        dtype: DataType::U16,
        op: ReduceOp::Sum,
    };
    let mut s = c.schedule(0, 2, &Options::default()).unwrap();
    for r in &mut s.rounds {
        for step in &mut r.steps {
            if let hpc_collectives::schedule::Step::Send { region, .. } = step {
                *region = far;
            }
        }
    }
    assert!(sim::check(&s, 2, 2).is_err());
}
