//! Micro benchmark of the reduction kernel: f32 sum at 1 MiB and 64 MiB,
//! against a plain `memcpy` (`copy_from_slice`) of the same size measured
//! in the same run.
//!
//! ```text
//! cargo run --release -p hpc-collectives --example reduce_kernel_bench
//! ```
//!
//! GB/s counts the bytes the operation touches: the kernel reads `src` and
//! `dst` and writes `dst` (3 × size), memcpy reads `src` and writes `dst`
//! (2 × size). Also reports the "payload" rate (size / time).

use std::hint::black_box;
use std::time::{Duration, Instant};

use hpc_collectives::{apply_reduce, DataType, ReduceOp};

fn time<F: FnMut()>(bytes: usize, mut f: F) -> Duration {
    // Warm up, then repeat until ~0.5 s of samples, keep the best.
    f();
    let iters = (256 * 1024 * 1024 / bytes).clamp(3, 2000);
    let mut best = Duration::MAX;
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(500) {
        let t = Instant::now();
        for _ in 0..iters {
            f();
        }
        best = best.min(t.elapsed() / iters as u32);
    }
    best
}

fn gbs(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

fn main() {
    for (label, size) in [("1 MiB", 1usize << 20), ("64 MiB", 64 << 20)] {
        let n = size / 4;
        let src: Vec<u8> = (0..n)
            .flat_map(|i| (i as f32 * 0.5).to_ne_bytes())
            .collect();
        let mut dst: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_ne_bytes()).collect();
        let t_sum = time(size, || {
            apply_reduce(
                ReduceOp::Sum,
                DataType::F32,
                black_box(&src),
                black_box(&mut dst),
            )
            .unwrap();
        });
        // Misaligned by one byte: exercises the unaligned path.
        let mut dst_u = vec![0u8; size + 1];
        let src_u = {
            let mut v = vec![0u8; size + 1];
            v[1..].copy_from_slice(&src);
            v
        };
        let t_unaligned = time(size, || {
            apply_reduce(
                ReduceOp::Sum,
                DataType::F32,
                black_box(&src_u[1..]),
                black_box(&mut dst_u[1..]),
            )
            .unwrap();
        });
        let t_copy = time(size, || {
            black_box(&mut dst).copy_from_slice(black_box(&src));
        });
        println!(
            "{label:>6}: f32 sum {:6.2} GB/s touched ({:6.2} GB/s payload) | misaligned {:6.2} GB/s touched | memcpy {:6.2} GB/s touched ({:6.2} GB/s payload)",
            gbs(3 * size, t_sum),
            gbs(size, t_sum),
            gbs(3 * size, t_unaligned),
            gbs(2 * size, t_copy),
            gbs(size, t_copy),
        );
    }
}
