//! Exhaustive verification: every collective, every algorithm (and the
//! automatic choice), every rank count 1..=64, a spread of sizes including
//! 0 and odd ones, several roots — all run in the simulator against a
//! naive reference.

mod common;

use std::collections::BTreeSet;
use std::ops::RangeInclusive;

use common::{check, check_alltoallv, combos, mix};
use hpc_collectives::{Algorithm, Collective, CollectiveKind, DataType, Options, ReduceOp};
use rayon::prelude::*;

const MAX_RANKS: usize = 64;

/// Element counts to test at `p` ranks (fewer for large rank counts to keep
/// the debug-build run short).
fn sizes(p: usize) -> &'static [usize] {
    if p <= 16 {
        &[0, 1, 3, 7, 64, 1000]
    } else if p <= 40 {
        &[0, 1, 7, 64, 1000]
    } else {
        &[0, 7, 1000]
    }
}

fn roots(p: usize) -> BTreeSet<usize> {
    [0, p - 1, p / 2, 1 % p].into_iter().collect()
}

fn algorithms(kind: CollectiveKind) -> Vec<Algorithm> {
    let mut v = vec![Algorithm::Auto];
    v.extend_from_slice(kind.algorithms());
    v
}

/// All cases for `p` ranks.
fn cases(p: usize) -> Vec<Collective> {
    let all = combos();
    // Two fixed (dtype, op) pairs everywhere, plus two that rotate with p so
    // that every pair is exercised across the rank counts.
    let reductions = [
        (DataType::I32, ReduceOp::Sum),
        (DataType::F32, ReduceOp::Sum),
        all[p % all.len()],
        all[(p * 7 + 3) % all.len()],
    ];
    let mut v = vec![Collective::Barrier];
    for &n in sizes(p) {
        let dtype = if n == 7 { DataType::F64 } else { DataType::U8 };
        for root in roots(p) {
            v.push(Collective::Broadcast {
                root,
                count: n,
                dtype,
            });
            v.push(Collective::Gather {
                root,
                count: n,
                dtype,
            });
            v.push(Collective::Scatter {
                root,
                count: n,
                dtype,
            });
            let (d, op) = reductions[(root + n) % reductions.len()];
            let count = if p > 16 { n.min(129) } else { n };
            v.push(Collective::Reduce {
                root,
                count,
                dtype: d,
                op,
            });
        }
        v.push(Collective::Allgather { count: n, dtype });
        v.push(Collective::Allgatherv {
            counts: (0..p)
                .map(|r| (mix((r * 31 + n) as u64) as usize) % (n + 1))
                .collect(),
            dtype,
        });
        v.push(Collective::Alltoall { count: n, dtype });
        // Reductions dominate the debug-build run time (the kernel is not
        // optimised there): above 16 ranks the largest vector is 129
        // elements, and reduce-scatter blocks shrink with p.
        let n = if p > 16 { n.min(129) } else { n };
        let per = n.min(256 / p + 1);
        for (dtype, op) in reductions {
            v.push(Collective::Allreduce {
                count: n,
                dtype,
                op,
            });
            v.push(Collective::ReduceScatterBlock {
                count: per,
                dtype,
                op,
            });
            v.push(Collective::ReduceScatter {
                counts: (0..p)
                    .map(|r| (mix((r * 17 + n) as u64) as usize) % (per + 1))
                    .collect(),
                dtype,
                op,
            });
        }
    }
    v
}

/// Runs every case of [`cases`] with every algorithm (and the automatic
/// choice) at each rank count of `ranks`; returns the number of cases.
fn check_every_case(ranks: RangeInclusive<usize>) -> usize {
    let work: Vec<(usize, Collective, Algorithm)> = ranks
        .flat_map(|p| {
            cases(p).into_iter().flat_map(move |c| {
                algorithms(c.kind())
                    .into_iter()
                    .map(move |a| (p, c.clone(), a))
            })
        })
        .collect();
    // Largest rank counts first for better load balance.
    work.par_iter()
        .rev()
        .map(|(p, c, a)| {
            if *a == Algorithm::Auto {
                // The automatic choice must build exactly the schedule of
                // the algorithm the rule selects (which is run below).
                let picked = c.select(*p, &Options::default()).unwrap();
                for r in 0..*p {
                    assert_eq!(
                        c.schedule(r, *p, &Options::default()).unwrap(),
                        c.schedule(r, *p, &Options::with_algorithm(picked)).unwrap()
                    );
                }
            } else {
                check(c, *p, *a, mix(*p as u64));
            }
        })
        .count()
}

/// Alltoallv with counts drawn per pair, at each rank count of `ranks`.
fn check_alltoallv_ranks(ranks: RangeInclusive<usize>) {
    ranks.into_par_iter().for_each(|p| {
        for n in [0usize, 1, 7, 40] {
            let matrix: Vec<Vec<usize>> = (0..p)
                .map(|i| {
                    (0..p)
                        .map(|j| mix((i * 1000 + j + n) as u64) as usize % (n + 1))
                        .collect()
                })
                .collect();
            check_alltoallv(&matrix, DataType::U8, p as u64);
            if n == 7 {
                check_alltoallv(&matrix, DataType::F64, p as u64);
            }
        }
    });
}

#[test]
fn every_collective_every_algorithm_every_rank_count() {
    let n = check_every_case(1..=MAX_RANKS);
    assert!(n > 10_000, "only {n} cases");
}

#[test]
fn alltoallv_every_rank_count() {
    check_alltoallv_ranks(1..=MAX_RANKS);
}

/// The same cases up to nine ranks: every fold of recursive doubling and
/// Rabenseifner (3, 5, 6, 7, 9), powers of two up to three levels (1, 2, 4,
/// 8), and both sides of the rank thresholds of the automatic choice (8).
/// Seconds in a debug build, where the tests above take minutes, so it is the
/// check run after each change to an algorithm (and by `benches/mutants.sh`).
#[test]
fn every_collective_every_algorithm_up_to_nine_ranks() {
    let n = check_every_case(1..=9);
    assert!(n > 1_000, "only {n} cases");
}

#[test]
fn alltoallv_up_to_nine_ranks() {
    check_alltoallv_ranks(1..=9);
}

/// Round counts match the algorithms' complexity, so a regression to a
/// linear algorithm (or extra rounds) is caught.
#[test]
fn round_counts() {
    let rounds = |c: &Collective, p: usize, a: Algorithm| {
        (0..p)
            .map(|r| {
                c.schedule(r, p, &Options::with_algorithm(a))
                    .unwrap()
                    .rounds
                    .len()
            })
            .max()
            .unwrap()
    };
    for p in [2usize, 5, 8, 13, 32, 64] {
        let log = p.next_power_of_two().ilog2() as usize;
        let flog = p.ilog2() as usize;
        let fold = if p.is_power_of_two() { 0 } else { 2 };
        assert_eq!(
            rounds(&Collective::Barrier, p, Algorithm::Dissemination),
            log
        );
        let b = Collective::Broadcast {
            root: 0,
            count: 100,
            dtype: DataType::U8,
        };
        assert_eq!(rounds(&b, p, Algorithm::Binomial), log);
        // Van de Geijn: the scatter's levels (the root sends at each), then
        // the ring allgather's p - 1 steps.
        assert_eq!(rounds(&b, p, Algorithm::ScatterAllgather), log + p - 1);
        // Binomial gather and scatter: a round per tree level, the root's own
        // block copied beside its first exchange; a root other than 0 adds
        // the rotation of its buffer into rank order (after gather, before
        // scatter).
        for (root, rotation) in [(0, 0), (p - 1, 1)] {
            let g = Collective::Gather {
                root,
                count: 3,
                dtype: DataType::U8,
            };
            let s = Collective::Scatter {
                root,
                count: 3,
                dtype: DataType::U8,
            };
            assert_eq!(rounds(&g, p, Algorithm::Binomial), log + rotation);
            assert_eq!(rounds(&s, p, Algorithm::Binomial), log + rotation);
        }
        let ag = Collective::Allgather {
            count: 10,
            dtype: DataType::U8,
        };
        assert_eq!(rounds(&ag, p, Algorithm::Ring), p - 1);
        assert_eq!(rounds(&ag, p, Algorithm::Bruck), log + 1);
        assert_eq!(
            rounds(&ag, p, Algorithm::RecursiveDoubling),
            flog + 1 + fold / 2
        );
        let ar = Collective::Allreduce {
            count: 1000,
            dtype: DataType::F32,
            op: ReduceOp::Sum,
        };
        assert_eq!(
            rounds(&ar, p, Algorithm::RecursiveDoubling),
            2 * flog + 1 + fold
        );
        assert_eq!(rounds(&ar, p, Algorithm::Rabenseifner), 3 * flog + 1 + fold);
        assert_eq!(rounds(&ar, p, Algorithm::Ring), 3 * (p - 1));
        let aa = Collective::Alltoall {
            count: 4,
            dtype: DataType::U8,
        };
        assert_eq!(rounds(&aa, p, Algorithm::Pairwise), p - 1);
        assert_eq!(rounds(&aa, p, Algorithm::Bruck), 3 * log + 2);
        // Reduce-scatter: ring, a send/receive round and a reduce round per
        // step; pairwise, the own copy beside the first exchange and the last
        // reduce after the last.
        let rs = Collective::ReduceScatterBlock {
            count: 10,
            dtype: DataType::U8,
            op: ReduceOp::Sum,
        };
        assert_eq!(rounds(&rs, p, Algorithm::Ring), 2 * (p - 1));
        assert_eq!(rounds(&rs, p, Algorithm::Pairwise), p);
    }
}

/// Reduce-scatter: both algorithms send every block but the rank's own once
/// (ring a partial result, pairwise a contribution): `(p - 1)` blocks per rank.
#[test]
fn reduce_scatter_traffic() {
    for p in [1usize, 2, 3, 5, 8] {
        let c = Collective::ReduceScatterBlock {
            count: 10,
            dtype: DataType::I32,
            op: ReduceOp::Sum,
        };
        for a in [Algorithm::Ring, Algorithm::Pairwise] {
            for r in 0..p {
                let s = c.schedule(r, p, &Options::with_algorithm(a)).unwrap();
                assert_eq!(s.bytes_sent(), 40 * (p - 1), "{a} rank {r} of {p}");
            }
        }
    }
}

/// Bandwidth: ring and Rabenseifner allreduce send about `2 n (p-1)/p`
/// bytes per rank (power-of-two `p`), recursive doubling `n log2 p`.
#[test]
fn allreduce_traffic() {
    let n = 1 << 12;
    for p in [2usize, 4, 8, 16, 32, 64] {
        let c = Collective::Allreduce {
            count: n,
            dtype: DataType::U8,
            op: ReduceOp::Sum,
        };
        let sent = |a| {
            c.schedule(0, p, &Options::with_algorithm(a))
                .unwrap()
                .bytes_sent()
        };
        assert_eq!(sent(Algorithm::Ring), 2 * n * (p - 1) / p);
        assert_eq!(sent(Algorithm::Rabenseifner), 2 * n * (p - 1) / p);
        assert_eq!(sent(Algorithm::RecursiveDoubling), n * p.ilog2() as usize);
    }
}
