//! The cost of finding a received spike's row among a shard's present
//! sources: [`SourceIndex::get`] (a bitmap with per-word counts) beside a
//! sorted list of the present sources searched by bisection, and beside a
//! dense array of one entry per source of the network (what a shard held
//! before it kept rows for present sources only).
//!
//! ```text
//! cargo run --release -p hpc-spiking --example present_lookup -- [sources] [rounds]
//! ```
//!
//! Defaults: 1,125,000 sources (hpc_benchmark at 100 ranks of scale 1), 5
//! rounds. For each fraction of present sources (100 %, 67 %, 10 %, 1 %),
//! looks up batches of 1,000 random sources in increasing order (the order
//! of an exchange's spike codes within a step), alternating the three ways
//! in every round, and prints the median nanoseconds per lookup (the
//! process's CPU time; it has one thread) and each way's bytes.

use std::hint::black_box;

use anyhow::{Context, Result};
use hpc_spiking::rng::{below, draw, stream_key, Purpose};
use hpc_spiking::run::cpu_seconds as cpu;
use hpc_spiking::targets::{IndexBuilder, SourceIndex};

/// Argument `i` as a number, `default` when absent.
fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> Result<T> {
    args.get(i).map_or(Ok(default), |s| {
        s.parse()
            .ok()
            .with_context(|| format!("argument {}: {s:?} is not a number", i + 1))
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: u32 = arg(&args, 0, 1_125_000)?;
    let rounds: usize = arg(&args, 1, 5)?;
    anyhow::ensure!(n > 0 && rounds > 0, "sources and rounds must be above 0");
    let key = stream_key(5, Purpose::Connect, 0);
    // 2,000 batches of 1,000 sorted sources.
    let batches: Vec<Vec<u32>> = (0..2_000u64)
        .map(|b| {
            let mut v: Vec<u32> = (0..1_000)
                .map(|i| below(draw(key, b * 1_000 + i), n))
                .collect();
            v.sort_unstable();
            v
        })
        .collect();
    let lookups = batches.len() as f64 * 1_000.0;
    println!("{n} sources, {rounds} rounds, ns per lookup (median), bytes of each structure");
    println!("| present | bitmap + counts | sorted list, bisection | dense array |");
    println!("|--------:|----------------:|-----------------------:|------------:|");
    for percent in [100u64, 67, 10, 1] {
        let threshold = (percent as f64 / 100.0 * u64::MAX as f64) as u64;
        let present = |s: u32| percent == 100 || draw(key ^ 0x55, s as u64) < threshold;
        let mut marks = IndexBuilder::new(n);
        let mut sorted = Vec::new();
        let mut dense = vec![u32::MAX; n as usize];
        for s in (0..n).filter(|&s| present(s)) {
            marks.mark(s);
            dense[s as usize] = sorted.len() as u32;
            sorted.push(s);
        }
        let index: SourceIndex = marks.finish();
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t0 = cpu();
            let mut sum = 0usize;
            for batch in &batches {
                for &s in batch {
                    sum += index.get(s).unwrap_or(0);
                }
            }
            black_box(sum);
            let t1 = cpu();
            let mut sum = 0usize;
            for batch in &batches {
                for &s in batch {
                    sum += sorted.binary_search(&s).unwrap_or(0);
                }
            }
            black_box(sum);
            let t2 = cpu();
            let mut sum = 0usize;
            for batch in &batches {
                for &s in batch {
                    let p = dense[s as usize];
                    sum += if p == u32::MAX { 0 } else { p as usize };
                }
            }
            black_box(sum);
            let t3 = cpu();
            a.push((t1 - t0) * 1e9 / lookups);
            b.push((t2 - t1) * 1e9 / lookups);
            c.push((t3 - t2) * 1e9 / lookups);
        }
        println!(
            "| {percent} % | {:.2} ns, {} B | {:.2} ns, {} B | {:.2} ns, {} B |",
            median(a),
            index.bytes(),
            median(b),
            sorted.len() * 4,
            median(c),
            dense.len() * 4
        );
    }
    Ok(())
}
