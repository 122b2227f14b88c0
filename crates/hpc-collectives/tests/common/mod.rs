//! Shared test harness: input generation, naive reference implementations,
//! and a checker that runs all ranks' schedules in the simulator.

#![allow(dead_code)]

use half::{bf16, f16};
use hpc_collectives::sim::{self, RankBuffers};
use hpc_collectives::{
    apply_reduce, Algorithm, Collective, CollectiveKind, DataType, Options, ReduceOp, Step,
};

/// Deterministic pseudo-random 64-bit value.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Arbitrary bytes for data-movement collectives.
pub fn bytes(seed: u64, rank: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| mix(seed ^ ((rank as u64) << 40) ^ i as u64) as u8)
        .collect()
}

/// `n` elements of `dtype` whose reduction with `op` over up to 64 ranks is
/// exact in any order (so any algorithm must match the reference bit for
/// bit). Integers are arbitrary (wrapping arithmetic is exact).
pub fn elems(seed: u64, dtype: DataType, op: ReduceOp, rank: usize, n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * dtype.size());
    for i in 0..n {
        let r = mix(seed ^ ((rank as u64) << 40) ^ (i as u64).wrapping_mul(0x0001_2345_6789));
        if dtype.is_integer() {
            out.extend_from_slice(&r.to_ne_bytes()[..dtype.size()]);
            continue;
        }
        let v: f64 = match op {
            ReduceOp::Prod => {
                if r % 2 == 0 {
                    1.0
                } else {
                    -1.0
                }
            }
            _ => {
                let range = match dtype {
                    DataType::Bf16 => 3,
                    DataType::F16 => 13,
                    _ => 201,
                };
                (r % range) as f64 - (range / 2) as f64
            }
        };
        match dtype {
            DataType::F16 => out.extend_from_slice(&f16::from_f64(v).to_ne_bytes()),
            DataType::Bf16 => out.extend_from_slice(&bf16::from_f64(v).to_ne_bytes()),
            DataType::F32 => out.extend_from_slice(&(v as f32).to_ne_bytes()),
            DataType::F64 => out.extend_from_slice(&v.to_ne_bytes()),
            _ => unreachable!(),
        }
    }
    out
}

/// Every valid built-in (dtype, op) pair.
pub fn combos() -> Vec<(DataType, ReduceOp)> {
    let mut v = Vec::new();
    for d in DataType::ALL {
        for op in ReduceOp::BUILTIN {
            if op.supports(d) {
                v.push((d, op));
            }
        }
    }
    v
}

fn prefix(v: &[usize]) -> Vec<usize> {
    let mut out = vec![0];
    for x in v {
        out.push(out.last().unwrap() + x);
    }
    out
}

fn reduce_all(inputs: &[Vec<u8>], dtype: DataType, op: ReduceOp) -> Vec<u8> {
    let mut acc = inputs[0].clone();
    for x in &inputs[1..] {
        apply_reduce(op, dtype, x, &mut acc).unwrap();
    }
    acc
}

/// Inputs for every rank and the expected receive buffers.
pub fn inputs_and_expected(
    coll: &Collective,
    size: usize,
    seed: u64,
) -> (Vec<RankBuffers>, Vec<Vec<u8>>) {
    const GARBAGE: u8 = 0xEE;
    let mut inputs: Vec<RankBuffers> = (0..size)
        .map(|r| {
            let (s, rv) = coll.buffer_bytes(r, size);
            RankBuffers {
                send: bytes(seed, r, s),
                recv: vec![GARBAGE; rv],
            }
        })
        .collect();
    let e = coll.dtype().map_or(1, DataType::size);
    let expected: Vec<Vec<u8>> = match coll {
        Collective::Barrier => vec![vec![]; size],
        Collective::Broadcast { root, count, .. } => {
            let data = bytes(seed, *root, count * e);
            inputs[*root].recv = data.clone();
            vec![data; size]
        }
        Collective::Gather { root, .. } => {
            let all: Vec<u8> = inputs.iter().flat_map(|b| b.send.clone()).collect();
            (0..size)
                .map(|r| if r == *root { all.clone() } else { vec![] })
                .collect()
        }
        Collective::Scatter { root, count, .. } => {
            let src = &inputs[*root].send;
            let b = count * e;
            (0..size)
                .map(|r| src[r * b..(r + 1) * b].to_vec())
                .collect()
        }
        Collective::Allgather { .. } | Collective::Allgatherv { .. } => {
            let all: Vec<u8> = inputs.iter().flat_map(|b| b.send.clone()).collect();
            vec![all; size]
        }
        Collective::Alltoall { count, .. } => {
            let b = count * e;
            (0..size)
                .map(|j| {
                    (0..size)
                        .flat_map(|i| inputs[i].send[j * b..(j + 1) * b].to_vec())
                        .collect()
                })
                .collect()
        }
        Collective::Alltoallv { .. } => unreachable!("use alltoallv_case"),
        Collective::Reduce {
            root,
            count,
            dtype,
            op,
        } => {
            for (r, inp) in inputs.iter_mut().enumerate() {
                inp.send = elems(seed, *dtype, *op, r, *count);
            }
            let sends: Vec<_> = inputs.iter().map(|b| b.send.clone()).collect();
            let res = reduce_all(&sends, *dtype, *op);
            (0..size)
                .map(|r| if r == *root { res.clone() } else { vec![] })
                .collect()
        }
        Collective::Allreduce { count, dtype, op } => {
            for (r, inp) in inputs.iter_mut().enumerate() {
                inp.send = elems(seed, *dtype, *op, r, *count);
            }
            let sends: Vec<_> = inputs.iter().map(|b| b.send.clone()).collect();
            vec![reduce_all(&sends, *dtype, *op); size]
        }
        Collective::ReduceScatterBlock { count, dtype, op } => {
            rs_expected(&mut inputs, &vec![*count; size], *dtype, *op, seed)
        }
        Collective::ReduceScatter { counts, dtype, op } => {
            rs_expected(&mut inputs, counts, *dtype, *op, seed)
        }
    };
    (inputs, expected)
}

fn rs_expected(
    inputs: &mut [RankBuffers],
    counts: &[usize],
    dtype: DataType,
    op: ReduceOp,
    seed: u64,
) -> Vec<Vec<u8>> {
    let total: usize = counts.iter().sum();
    for (r, inp) in inputs.iter_mut().enumerate() {
        inp.send = elems(seed, dtype, op, r, total);
    }
    let sends: Vec<_> = inputs.iter().map(|b| b.send.clone()).collect();
    let res = reduce_all(&sends, dtype, op);
    let off: Vec<usize> = prefix(counts).iter().map(|x| x * dtype.size()).collect();
    (0..counts.len())
        .map(|r| res[off[r]..off[r + 1]].to_vec())
        .collect()
}

/// Builds every rank's schedule and checks their static properties.
pub fn schedules(
    coll: &Collective,
    size: usize,
    algorithm: Algorithm,
) -> Vec<hpc_collectives::Schedule> {
    let opts = Options::with_algorithm(algorithm);
    (0..size)
        .map(|r| {
            let s = coll
                .schedule(r, size, &opts)
                .unwrap_or_else(|e| panic!("{coll:?} p={size} {algorithm}: {e}"));
            assert_eq!(s.kind, coll.kind());
            assert_ne!(s.algorithm, Algorithm::Auto);
            let (sb, rb) = coll.buffer_bytes(r, size);
            assert_eq!(
                (s.send_bytes, s.recv_bytes),
                (sb, rb),
                "{coll:?} {algorithm}"
            );
            s
        })
        .collect()
}

/// Runs `coll` on `size` ranks with `algorithm` in the simulator and
/// compares with the naive reference. Returns the number of rounds.
pub fn check(coll: &Collective, size: usize, algorithm: Algorithm, seed: u64) -> usize {
    let scheds = schedules(coll, size, algorithm);
    let (inputs, expected) = inputs_and_expected(coll, size, seed);
    let out = sim::run_with(&scheds, inputs, &hpc_collectives::CustomOps::new())
        .unwrap_or_else(|e| panic!("{coll:?} p={size} {algorithm}: {e}"));
    for (r, (got, want)) in out.recv.iter().zip(&expected).enumerate() {
        assert!(
            got == want,
            "{coll:?} p={size} {algorithm}: rank {r} wrong result"
        );
    }
    if coll.kind() == CollectiveKind::Barrier {
        check_barrier(&scheds);
    }
    out.stats.max_rounds
}

/// Barrier semantics: following the message dependencies round by round,
/// every rank must (transitively) hear from every other rank before it
/// finishes.
pub fn check_barrier(scheds: &[hpc_collectives::Schedule]) {
    let size = scheds.len();
    let mut known: Vec<Vec<bool>> = (0..size)
        .map(|r| (0..size).map(|j| j == r).collect())
        .collect();
    let rounds = scheds.iter().map(|s| s.rounds.len()).max().unwrap_or(0);
    for k in 0..rounds {
        let before = known.clone();
        for s in scheds {
            if let Some(round) = s.rounds.get(k) {
                for step in &round.steps {
                    if let Step::Recv { peer, .. } = step {
                        for j in 0..size {
                            known[s.rank][j] |= before[*peer][j];
                        }
                    }
                }
            }
        }
    }
    assert!(
        known.iter().all(|k| k.iter().all(|&x| x)),
        "barrier does not synchronise"
    );
}

/// Runs an alltoallv where rank `i` sends `matrix[i][j]` elements of
/// `dtype` to rank `j`.
pub fn check_alltoallv(matrix: &[Vec<usize>], dtype: DataType, seed: u64) {
    let size = matrix.len();
    let e = dtype.size();
    let colls: Vec<Collective> = (0..size)
        .map(|r| Collective::Alltoallv {
            send_counts: matrix[r].clone(),
            recv_counts: (0..size).map(|i| matrix[i][r]).collect(),
            dtype,
        })
        .collect();
    let opts = Options::default();
    let scheds: Vec<_> = (0..size)
        .map(|r| colls[r].schedule(r, size, &opts).unwrap())
        .collect();
    let inputs: Vec<RankBuffers> = (0..size)
        .map(|r| {
            let (s, rv) = colls[r].buffer_bytes(r, size);
            RankBuffers {
                send: bytes(seed, r, s),
                recv: vec![0xEE; rv],
            }
        })
        .collect();
    let soff: Vec<Vec<usize>> = matrix.iter().map(|row| prefix(row)).collect();
    let expected: Vec<Vec<u8>> = (0..size)
        .map(|j| {
            (0..size)
                .flat_map(|i| inputs[i].send[soff[i][j] * e..soff[i][j + 1] * e].to_vec())
                .collect()
        })
        .collect();
    let out = sim::run(&scheds, inputs).unwrap_or_else(|e| panic!("alltoallv {matrix:?}: {e}"));
    assert_eq!(out, expected, "alltoallv {matrix:?}");
}
