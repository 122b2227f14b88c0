//! The cost of a synaptic event of `stdp_pl_synapse_hom` ([`StdpRow::deliver`]),
//! beside a static synapse's on the same spikes: a random network of
//! `neurons` neurons, each the source of a row of `out_degree` synapses onto
//! random targets (delay 1.5 ms, hpc_benchmark's parameters), every neuron
//! firing as a Poisson process on a 0.1 ms grid; one thread.
//!
//! ```text
//! cargo run --release -p hpc-spiking --example stdp_bench -- [neurons] [out_degree] [rate_hz] [t_sim_ms]
//! ```
//!
//! Defaults: 4,000 neurons, 1,000 synapses each, 10 Hz, 2 s. Prints the events,
//! nanoseconds per synaptic event of each kind (the thread's CPU time, which a
//! loaded machine inflates less than wall time, with the wall time beside it),
//! and the mean archive length.

use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hpc_spiking::plasticity::{PostArchive, StdpPlHom, StdpPlParams, StdpRow};
use hpc_spiking::rng::{below, draw, stream_key, Purpose};

/// The calling thread's CPU time.
fn cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec that outlives the call, the only
    // memory clock_gettime writes.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> Result<T> {
    match args.get(i) {
        None => Ok(default),
        Some(s) => s
            .parse()
            .ok()
            .with_context(|| format!("argument {}: {s:?} is not a number", i + 1)),
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: u32 = arg(&args, 0, 4000)?;
    let k: u32 = arg(&args, 1, 1000)?;
    let rate: f64 = arg(&args, 2, 10.0)?;
    let t_sim: f64 = arg(&args, 3, 2000.0)?;
    let (h, delay, seed) = (0.1, 1.5, 7u64);
    let rule = StdpPlHom::new(StdpPlParams {
        tau_plus: 15.0,
        lambda: 0.1,
        alpha: 0.0513,
        mu: 0.4,
    })?;
    let mut archives: Vec<PostArchive> = (0..n)
        .map(|_| PostArchive::new(30.0, delay))
        .collect::<Result<_, _>>()?;
    let mut rows = Vec::with_capacity(n as usize);
    let mut static_rows: Vec<(Vec<u32>, Vec<f64>)> = Vec::with_capacity(n as usize);
    for i in 0..n {
        let key = stream_key(seed, Purpose::Connect, i);
        let mut row = StdpRow::new(delay)?;
        for j in 0..k {
            row.connect(below(draw(key, j as u64), n), 45.61, &mut archives)?;
        }
        static_rows.push((row.targets().collect(), row.weights().to_vec()));
        rows.push(row);
    }
    let p = rate * h * 1e-3;
    let threshold = (p * 2f64.powi(64)) as u64;
    let steps = (t_sim / h).round() as u64;
    let mut input = vec![0.0f64; n as usize];
    let (mut plastic, mut fixed, mut record) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let (mut plastic_wall, mut fixed_wall) = (Duration::ZERO, Duration::ZERO);
    let (mut events, mut spikes, mut archived) = (0u64, 0u64, 0u64);
    let mut fired = Vec::new();
    for step in 1..=steps {
        let t = step as f64 * h;
        fired.clear();
        fired.extend(
            (0..n).filter(|&i| draw(stream_key(seed, Purpose::External, i), step) < threshold),
        );
        // The step's spikes are recorded by their neurons, then delivered along
        // the neurons' rows (every postsynaptic spike up to t is recorded first).
        let t0 = cpu();
        for &i in &fired {
            archives[i as usize].record_post_spike(t)?;
        }
        let (t1, w1) = (cpu(), Instant::now());
        for &i in &fired {
            for (target, w) in rows[i as usize].deliver(&rule, t, &mut archives)? {
                input[target as usize] += w;
            }
        }
        let (t2, w2) = (cpu(), Instant::now());
        for &i in &fired {
            let (targets, weights) = &static_rows[i as usize];
            for (&target, &w) in targets.iter().zip(weights) {
                input[target as usize] += w;
            }
        }
        let (t3, w3) = (cpu(), Instant::now());
        record += t1 - t0;
        plastic += t2 - t1;
        fixed += t3 - t2;
        plastic_wall += w2 - w1;
        fixed_wall += w3 - w2;
        spikes += fired.len() as u64;
        events += fired.len() as u64 * k as u64;
        if step % 1000 == 0 {
            archived += archives.iter().map(|a| a.archived() as u64).sum::<u64>();
        }
    }
    black_box(&input);
    let ns = |d: Duration| d.as_nanos() as f64 / events.max(1) as f64;
    // Targets in random order: about half are a step back and take 6 bytes
    // instead of 2 (a row connected in target order takes 10 bytes a synapse).
    let bytes: usize = rows.iter().map(StdpRow::bytes).sum();
    println!(
        "{n} neurons x {k} synapses, {rate} Hz, {t_sim} ms: {spikes} spikes, {events} synaptic events \
         ({bytes} bytes of synapses, {:.2} per synapse)",
        bytes as f64 / (n as f64 * k as f64).max(1.0)
    );
    println!(
        "stdp_pl_synapse_hom: {:.1} ns per synaptic event (CPU time; wall {:.1})",
        ns(plastic),
        ns(plastic_wall)
    );
    println!(
        "static synapse:      {:.1} ns per synaptic event (CPU time; wall {:.1}; same targets, f64 weights)",
        ns(fixed),
        ns(fixed_wall)
    );
    println!(
        "archive: {:.1} ns per recorded spike (CPU time), {:.2} spikes archived per neuron on average",
        record.as_nanos() as f64 / spikes.max(1) as f64,
        archived as f64 / ((steps / 1000).max(1) * n as u64) as f64
    );
    Ok(())
}
