//! Property tests: random counts for the v-variants, random element types
//! and operations for allreduce, and floating-point determinism.

mod common;

use common::{check, check_alltoallv, combos};
use hpc_collectives::sim::{self, RankBuffers};
use hpc_collectives::{Algorithm, Collective, DataType, Options, ReduceOp};
use proptest::prelude::*;

fn counts(max_ranks: usize, max_count: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..=max_count, 1..=max_ranks)
}

fn allgather_algorithm() -> impl Strategy<Value = Algorithm> {
    prop::sample::select(vec![
        Algorithm::Auto,
        Algorithm::Ring,
        Algorithm::RecursiveDoubling,
        Algorithm::Bruck,
    ])
}

fn allreduce_algorithm() -> impl Strategy<Value = Algorithm> {
    prop::sample::select(vec![
        Algorithm::RecursiveDoubling,
        Algorithm::Rabenseifner,
        Algorithm::Ring,
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn allgatherv_random_counts(
        counts in counts(24, 40),
        algorithm in allgather_algorithm(),
        dtype in prop::sample::select(DataType::ALL.to_vec()),
        seed in any::<u64>(),
    ) {
        let size = counts.len();
        let c = Collective::Allgatherv { counts, dtype };
        let algorithm = if algorithm == Algorithm::Auto {
            c.select(size, &Options::default()).unwrap()
        } else {
            algorithm
        };
        check(&c, size, algorithm, seed);
    }

    #[test]
    fn alltoallv_random_counts(
        size in 1usize..=16,
        raw in prop::collection::vec(0usize..=24, 256),
        dtype in prop::sample::select(DataType::ALL.to_vec()),
        seed in any::<u64>(),
    ) {
        let matrix: Vec<Vec<usize>> = (0..size)
            .map(|i| (0..size).map(|j| raw[i * 16 + j]).collect())
            .collect();
        check_alltoallv(&matrix, dtype, seed);
    }

    #[test]
    fn reduce_scatter_random_counts(
        counts in counts(20, 30),
        algorithm in prop::sample::select(vec![Algorithm::Ring, Algorithm::Pairwise]),
        combo in prop::sample::select(combos()),
        seed in any::<u64>(),
    ) {
        let size = counts.len();
        let c = Collective::ReduceScatter { counts, dtype: combo.0, op: combo.1 };
        check(&c, size, algorithm, seed);
    }

    #[test]
    fn allreduce_random_types_and_ops(
        size in 1usize..=24,
        count in 0usize..=300,
        algorithm in allreduce_algorithm(),
        combo in prop::sample::select(combos()),
        seed in any::<u64>(),
    ) {
        let c = Collective::Allreduce { count, dtype: combo.0, op: combo.1 };
        check(&c, size, algorithm, seed);
    }

    #[test]
    fn reduce_random_types_ops_and_roots(
        size in 1usize..=24,
        root_pick in any::<usize>(),
        count in 0usize..=100,
        combo in prop::sample::select(combos()),
        seed in any::<u64>(),
    ) {
        let c = Collective::Reduce { root: root_pick % size, count, dtype: combo.0, op: combo.1 };
        check(&c, size, Algorithm::Binomial, seed);
    }

    /// With arbitrary (inexact) float inputs every rank of an allreduce gets
    /// the same bits, and a rerun gives the same bits again.
    #[test]
    fn float_allreduce_is_deterministic(
        size in 1usize..=20,
        count in 1usize..=200,
        algorithm in allreduce_algorithm(),
        values in prop::collection::vec(-1.0e6f32..1.0e6, 20 * 200),
    ) {
        let c = Collective::Allreduce { count, dtype: DataType::F32, op: ReduceOp::Sum };
        let opts = Options::with_algorithm(algorithm);
        let scheds: Vec<_> = (0..size).map(|r| c.schedule(r, size, &opts).unwrap()).collect();
        let inputs = || -> Vec<RankBuffers> {
            (0..size)
                .map(|r| RankBuffers {
                    send: values[r * count..(r + 1) * count]
                        .iter()
                        .flat_map(|x| x.to_ne_bytes())
                        .collect(),
                    recv: vec![0; count * 4],
                })
                .collect()
        };
        let a = sim::run(&scheds, inputs()).unwrap();
        let b = sim::run(&scheds, inputs()).unwrap();
        prop_assert_eq!(&a, &b);
        for r in 1..size {
            prop_assert_eq!(&a[r], &a[0]);
        }
        // And close to the sequential sum.
        for i in 0..count {
            let exact: f64 = (0..size).map(|r| values[r * count + i] as f64).sum();
            let got = f32::from_ne_bytes(a[0][i * 4..i * 4 + 4].try_into().unwrap()) as f64;
            prop_assert!((got - exact).abs() <= 1e-6 * 1e6 * size as f64);
        }
    }
}
