//! Plans executed on host memory: every native collective computes what it
//! should for 1..=8 ranks, every type and op, in both rank orders.

use half::{bf16, f16};
use rand::{Rng, SeedableRng};

use crate::plan::{self, Buf, HostOrder, Loc, Op, Plan};
use crate::{Dtype, GpuOp};

/// Random small integers as `dtype` bytes (exact in every type, so that any
/// reduction order gives the same bits); never all zeros.
fn random(dtype: Dtype, op: GpuOp, n: usize, rng: &mut impl Rng) -> (Vec<u8>, Vec<f64>) {
    let vals: Vec<f64> = (0..n)
        .map(|_| {
            if op == GpuOp::Prod {
                [-2.0, -1.0, 1.0, 2.0][rng.random_range(0..4)]
            } else {
                f64::from(rng.random_range(-8i32..=8).max(1) * if rng.random() { 1 } else { -1 })
            }
        })
        .collect();
    (encode(dtype, &vals), vals)
}

fn encode(dtype: Dtype, v: &[f64]) -> Vec<u8> {
    v.iter()
        .flat_map(|&x| match dtype {
            Dtype::F32 => (x as f32).to_ne_bytes().to_vec(),
            Dtype::F64 => x.to_ne_bytes().to_vec(),
            Dtype::F16 => f16::from_f64(x).to_ne_bytes().to_vec(),
            Dtype::Bf16 => bf16::from_f64(x).to_ne_bytes().to_vec(),
            Dtype::I32 => (x as i32).to_ne_bytes().to_vec(),
        })
        .collect()
}

fn combine(op: GpuOp, a: f64, b: f64) -> f64 {
    match op {
        GpuOp::Sum => a + b,
        GpuOp::Prod => a * b,
        GpuOp::Min => a.min(b),
        GpuOp::Max => a.max(b),
    }
}

fn run_both(plans: &[Plan], inputs: &[Vec<u8>], out_len: usize) -> Vec<Vec<u8>> {
    let mut first = None;
    for order in [HostOrder::Forward, HostOrder::Reverse] {
        let mut outs = vec![vec![0xFFu8; out_len]; plans.len()];
        plan::run_on_host(plans, inputs, &mut outs, order).unwrap();
        match &first {
            None => first = Some(outs),
            Some(f) => assert_eq!(f, &outs, "rank order changed the result"),
        }
    }
    first.unwrap()
}

fn check_invariants(plans: &[Plan]) {
    let n = plans[0].phases.len();
    for p in plans {
        assert_eq!(
            p.phases.len(),
            n,
            "all ranks have the same number of phases"
        );
        for op in p.ops() {
            match op {
                Op::Put { dst, .. } | Op::Land { dst, .. } => assert_eq!(dst.buf, Buf::Window),
                Op::Copy { dst, .. } | Op::Reduce { dst, .. } => assert_ne!(dst.buf, Buf::Input),
            }
            if let Op::Put { dst, .. } | Op::Land { dst, .. } = op {
                assert!(dst.end() <= p.window_bytes);
            }
        }
    }
    // Every put has its land, in the same phase, in the same order.
    for (j, _) in plans[0].phases.iter().enumerate() {
        for a in 0..plans.len() {
            for b in 0..plans.len() {
                let puts: Vec<_> = plans[a].phases[j]
                    .ops
                    .iter()
                    .filter_map(|o| match o {
                        Op::Put { peer, dst, .. } if *peer == b => Some(*dst),
                        _ => None,
                    })
                    .collect();
                let lands: Vec<_> = plans[b].phases[j]
                    .ops
                    .iter()
                    .filter_map(|o| match o {
                        Op::Land { peer, dst } if *peer == a => Some(*dst),
                        _ => None,
                    })
                    .collect();
                assert_eq!(puts, lands, "phase {j} {a} -> {b}");
            }
        }
    }
}

const COUNTS: [usize; 7] = [0, 1, 3, 9, 16, 31, 257];

#[test]
fn allreduce_plans_compute_the_allreduce() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    for size in 1..=8 {
        for dtype in Dtype::ALL {
            for op in GpuOp::ALL {
                for count in COUNTS {
                    let plans = plan::allreduce(size, count, dtype, op).unwrap();
                    check_invariants(&plans);
                    let (inputs, vals): (Vec<_>, Vec<_>) = (0..size)
                        .map(|_| random(dtype, op, count, &mut rng))
                        .unzip();
                    let expect: Vec<f64> = (0..count)
                        .map(|i| (1..size).fold(vals[0][i], |a, r| combine(op, a, vals[r][i])))
                        .collect();
                    let outs = run_both(&plans, &inputs, count * dtype.size());
                    for (r, out) in outs.iter().enumerate() {
                        assert_eq!(
                            out,
                            &encode(dtype, &expect),
                            "size {size} {dtype} {op} count {count} rank {r}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn reduce_scatter_plans() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    for size in 1..=8 {
        for dtype in Dtype::ALL {
            for op in GpuOp::ALL {
                for count in [0, 1, 3, 33] {
                    let plans = plan::reduce_scatter(size, count, dtype, op).unwrap();
                    check_invariants(&plans);
                    let (inputs, vals): (Vec<_>, Vec<_>) = (0..size)
                        .map(|_| random(dtype, op, count * size, &mut rng))
                        .unzip();
                    let outs = run_both(&plans, &inputs, count * dtype.size());
                    for (r, out) in outs.iter().enumerate() {
                        let expect: Vec<f64> = (0..count)
                            .map(|i| {
                                let k = r * count + i;
                                (1..size).fold(vals[0][k], |a, q| combine(op, a, vals[q][k]))
                            })
                            .collect();
                        assert_eq!(out, &encode(dtype, &expect), "size {size} {dtype} {op}");
                    }
                }
            }
        }
    }
}

#[test]
fn allgather_and_broadcast_plans() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for size in 1..=8 {
        for dtype in Dtype::ALL {
            for count in [0, 1, 5, 64] {
                let plans = plan::allgather(size, count, dtype).unwrap();
                check_invariants(&plans);
                let inputs: Vec<Vec<u8>> = (0..size)
                    .map(|_| random(dtype, GpuOp::Sum, count, &mut rng).0)
                    .collect();
                let outs = run_both(&plans, &inputs, count * size * dtype.size());
                let expect: Vec<u8> = inputs.concat();
                for out in &outs {
                    assert_eq!(out, &expect);
                }
                for root in 0..size {
                    let plans = plan::broadcast(size, root, count, dtype).unwrap();
                    check_invariants(&plans);
                    let outs = run_both(&plans, &inputs, count * dtype.size());
                    for out in &outs {
                        assert_eq!(out, &inputs[root]);
                    }
                }
            }
        }
    }
    assert!(plan::broadcast(2, 2, 1, Dtype::F32).is_err());
}

#[test]
fn ring_allreduce_shape() {
    // n ranks: n - 1 reduce-scatter pushes and n - 1 allgather pushes per
    // rank, 2 (n - 1) barriers plus the final phase, every chunk start
    // 16-byte aligned.
    for size in 2..=8 {
        let plans = plan::allreduce(size, 1 << 16, Dtype::F32, GpuOp::Sum).unwrap();
        for p in &plans {
            let puts = p.ops().filter(|o| matches!(o, Op::Put { .. })).count();
            assert_eq!(puts, 2 * (size - 1));
            assert_eq!(p.barriers(), 2 * (size - 1) + 1);
            for o in p.ops() {
                if let Op::Put { src, dst, .. } = o {
                    assert_eq!(src.offset % 16, 0);
                    assert_eq!(dst.offset % 16, 0);
                }
            }
            let sent: usize = p
                .ops()
                .map(|o| match o {
                    Op::Put { src, .. } => src.len,
                    _ => 0,
                })
                .sum();
            // 2 (n - 1) / n of the vector, as the busbw formula assumes.
            let ideal = 2 * (size - 1) * (1 << 18) / size;
            assert!(sent.abs_diff(ideal) <= 2 * size * 16, "{sent} vs {ideal}");
        }
    }
}

/// A size of 0 or beyond [`MAX_PLAN_RANKS`], and counts whose bytes overflow,
/// are a typed error naming them: 0 ranks panicked in the chunking ("parts
/// must be positive"), `usize::MAX` elements overflowed, and 2^40 ranks
/// aborted the process on an allocation of 8 TiB.
#[test]
fn sizes_and_counts_no_plan_can_hold_are_refused_by_name() {
    use crate::plan::{allgather, allreduce, broadcast, reduce_scatter, MAX_PLAN_RANKS};
    let all = |size: usize, count: usize| {
        [
            allreduce(size, count, Dtype::F32, GpuOp::Sum).map(|_| ()),
            reduce_scatter(size, count, Dtype::F32, GpuOp::Sum).map(|_| ()),
            allgather(size, count, Dtype::F32).map(|_| ()),
            broadcast(size, 0, count, Dtype::F32).map(|_| ()),
        ]
    };
    for (size, count, says) in [
        (0, 4, "on 0 ranks"),
        (1 << 40, 1, "on 1099511627776 ranks"),
        (MAX_PLAN_RANKS + 1, 1, "at most 4096"),
        (4, usize::MAX, "of 18446744073709551615 elements"),
        (1, usize::MAX / 2, "more bytes than a buffer can hold"),
    ] {
        for r in all(size, count) {
            let e = r.unwrap_err().to_string();
            assert!(e.contains(says), "{size} ranks, {count}: {e}");
        }
    }
    for r in all(3, 5) {
        r.unwrap();
    }
}

/// Plans that would need more memory than the machine has are refused by name
/// before they are built: 4096 ranks, which `MAX_PLAN_RANKS` admits, aborted
/// the process on an allocation within 8 GB.
#[test]
fn plans_beyond_the_memory_available_are_refused_by_name() {
    use crate::plan::{check_plan_memory, MAX_PLAN_RANKS};
    let gib = 1u64 << 30;
    let e = check_plan_memory("allreduce", MAX_PLAN_RANKS, Some(8 * gib))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("allreduce on 4096 ranks") && e.contains("MemAvailable"),
        "{e}"
    );
    check_plan_memory("allreduce", 512, Some(8 * gib)).unwrap();
    check_plan_memory("allreduce", MAX_PLAN_RANKS, None).unwrap();
}

/// `run_on_host` with buffers that do not fit the plans (one input for two
/// ranks, an input or output shorter than its plan's bytes) is a typed
/// error before anything runs: each panicked on a slice's index ("range end
/// index 16 out of range for slice of length 4").
#[test]
fn run_on_host_refuses_buffers_that_do_not_fit_the_plans() {
    let p = plan::allreduce(2, 4, Dtype::F32, GpuOp::Sum).unwrap();
    let run = |inputs: &[Vec<u8>], outs: usize, out_len: usize| {
        let mut o = vec![vec![0u8; out_len]; outs];
        plan::run_on_host(&p, inputs, &mut o, HostOrder::Forward)
    };
    let fits = vec![vec![0u8; 16]; 2];
    for (inputs, outs, out_len) in [
        (vec![vec![0u8; 4]; 2], 2, 16),
        (vec![vec![0u8; 16]], 2, 16),
        (fits.clone(), 2, 1),
        (fits.clone(), 0, 16),
    ] {
        let e = run(&inputs, outs, out_len).unwrap_err();
        assert!(matches!(e, crate::GpuError::Mismatch { .. }), "{e}");
    }
    run(&fits, 2, 16).unwrap();
}

/// A range whose offset and length add up beyond `usize::MAX` ends there:
/// `Loc::end` and `Loc::overlaps` panicked with "attempt to add with
/// overflow" (as `hpc_collectives`' `Region` did).
#[test]
fn a_range_beyond_usize_max_ends_there() {
    let far = plan::Loc::new(Buf::Window, usize::MAX, 2);
    assert_eq!(far.end(), usize::MAX);
    assert!(!far.overlaps(&plan::Loc::new(Buf::Window, 0, 8)));
}

/// A forged plan (a plan's fields are public) is refused by `run_on_host`
/// with [`crate::GpuError::Plan`] naming the rank, phase and op before
/// anything runs: a range beyond its buffer or its peer's window, a peer
/// that is not a rank, a copy of another length, a put outside the window,
/// a plan of another rank, and a window of `usize::MAX` bytes. The ranges,
/// the put's peer and the copy's length panicked on a slice's index, the
/// window on its allocation ("capacity overflow"), and the land's peer, the
/// put into the output and the plan of another rank ran and said `Ok` (pass
/// 18's C noticed list); the write into the input and unequal phases were
/// refused already.
#[test]
fn run_on_host_refuses_forged_plans_before_running() {
    let honest = plan::allreduce(2, 4, Dtype::F32, GpuOp::Sum).unwrap();
    let inputs = vec![vec![0u8; 16]; 2];
    let first = |p: &mut Vec<Plan>, op: Op| {
        p[0].phases[0].ops.insert(0, op);
    };
    let w = |offset, len| Loc::new(Buf::Window, offset, len);
    type Forge = Box<dyn Fn(&mut Vec<Plan>)>;
    let forgeries: Vec<(&str, Forge)> = vec![
        (
            "beyond the Window of",
            Box::new(move |p| {
                first(
                    p,
                    Op::Copy {
                        src: w(1 << 20, 8),
                        dst: Loc::new(Buf::Output, 0, 8),
                    },
                )
            }),
        ),
        (
            "beyond the Window of",
            Box::new(move |p| {
                first(
                    p,
                    Op::Copy {
                        src: w(usize::MAX, 2),
                        dst: w(0, 2),
                    },
                )
            }),
        ),
        (
            "peer 5 is not a rank",
            Box::new(move |p| {
                first(
                    p,
                    Op::Put {
                        peer: 5,
                        src: w(0, 4),
                        dst: w(0, 4),
                    },
                )
            }),
        ),
        (
            "peer 9 is not a rank",
            Box::new(move |p| {
                first(
                    p,
                    Op::Land {
                        peer: 9,
                        dst: w(0, 4),
                    },
                )
            }),
        ),
        (
            "beyond the Window of",
            Box::new(move |p| {
                first(
                    p,
                    Op::Put {
                        peer: 1,
                        src: w(0, 4),
                        dst: w(1 << 30, 4),
                    },
                )
            }),
        ),
        (
            "it takes 4 bytes and writes 8",
            Box::new(move |p| {
                first(
                    p,
                    Op::Copy {
                        src: w(0, 4),
                        dst: Loc::new(Buf::Output, 0, 8),
                    },
                )
            }),
        ),
        (
            "not the window",
            Box::new(move |p| {
                first(
                    p,
                    Op::Put {
                        peer: 1,
                        src: w(0, 4),
                        dst: Loc::new(Buf::Output, 0, 4),
                    },
                )
            }),
        ),
        (
            "it writes the input",
            Box::new(move |p| {
                first(
                    p,
                    Op::Reduce {
                        src: w(0, 4),
                        dst: Loc::new(Buf::Input, 0, 4),
                    },
                )
            }),
        ),
        ("says it is rank 1 of 2", Box::new(|p| p[0].rank = 1)),
        (
            "disagree on the number of phases",
            Box::new(|p| p[1].phases.clear()),
        ),
        ("windows of", Box::new(|p| p[1].window_bytes = usize::MAX)),
    ];
    for (said, forge) in forgeries {
        let mut plans = honest.clone();
        forge(&mut plans);
        let mut outs = vec![vec![0u8; 16]; 2];
        let e = plan::run_on_host(&plans, &inputs, &mut outs, HostOrder::Forward).unwrap_err();
        assert!(
            matches!(e, crate::GpuError::Plan(_)) && e.to_string().contains(said),
            "{said}: {e}"
        );
        assert_eq!(outs, vec![vec![0u8; 16]; 2], "{said}: nothing ran");
    }
    plan::check_plans(&honest).unwrap();
}
