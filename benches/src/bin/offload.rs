//! What offload buys a rank: the CPU time it spends per non-blocking collective
//! (post + test + wait) while it computes between post and wait, as in OSU's
//! overlap benchmarks, for each engine.
//!
//! Per engine, collective and size:
//!
//! 1. `pure`: post and wait at once (median wall time over iterations; the
//!    slowest rank's);
//! 2. a compute loop calibrated to last rank 0's `pure` alone, cut into
//!    `--tests` slices with a `test` of the request after each (OSU's
//!    compute-and-probe);
//! 3. post, compute with tests, wait, `--iters` times; the rank's thread CPU
//!    time (`CLOCK_THREAD_CPUTIME_ID`) over the whole window less the thread CPU
//!    time of the compute slices is `cpu`: what the collective cost the rank's
//!    own thread (post, tests, wait, the scope). `proc` is the same with the
//!    process's CPU clock: it adds the CPU of the rank's other threads (the
//!    `Thread` engine's progress thread), not the proxy's, a separate process.
//!    `overall` is the window's wall time.
//!
//! Every engine asked for is set up at once and they take turns, size by size
//! (the order rotates), so a drift of the machine weighs on all of them.
//! The proxy gets every collective (`proxy_min` 0) and makes every copy
//! (`own_copies` off), as on a node with a core for it or a DPU; `--proxy-defaults`
//! keeps this node's defaults instead.
//!
//! Usage: `hpc run -n 2 -- offload [--engine inline,thread,proxy] [--iters N]
//! [--sizes BYTES,...] [--colls alltoall,allgather,bcast,allreduce] [--tests K]
//! [--shm auto|on|off] [--proxy-defaults]`, or `mpirun -n 2 offload --engine mpi`
//! (built with `--features mpi`). Rank 0 prints a `row` line per measurement:
//! `row ENGINE COLLECTIVE BYTES cpu proc pure overall post tests wait` (µs; cpu,
//! proc and the thread CPU of the post, the tests and the wait alone the mean
//! over ranks, pure and overall the slowest rank's). `benches/offload-cpu.sh`
//! runs it for every engine and prints the table. The same binary serves as the
//! proxy process of the `proxy` engine.

use std::hint::black_box;
use std::time::Instant;

use hpc_benches::{
    agree, calibrate, compute, compute_rate, median, process_cpu, thread_cpu, Bufs, Coll, Options,
};
use hpc_comm::{Comm, CommOptions, Engine};
use hpc_runtime::World;

/// What one read of the thread's CPU clock costs that thread (a system call
/// on most virtual machines: no vDSO for per-thread clocks), in seconds.
fn clock_cost() -> f64 {
    let samples: Vec<f64> = (0..50)
        .map(|_| {
            let t0 = thread_cpu();
            for _ in 0..100 {
                black_box(thread_cpu());
            }
            (thread_cpu() - t0) / 101.0
        })
        .collect();
    median(&samples)
}

/// One measurement: `[cpu, proc, pure, overall, post, tests, wait]` in
/// seconds, this rank's medians (`post`, `tests` and `wait`: the thread CPU time
/// of those calls alone; `cpu` adds the scope's own).
fn measure(comm: &Comm, c: Coll, b: &mut Bufs, it: usize, tests: usize, rate: f64) -> [f64; 7] {
    let once = |b: &mut Bufs| {
        comm.scope(|s| {
            c.start(s, b).wait().expect("wait");
        })
    };
    for _ in 0..3 {
        once(b);
    }
    let mut tp = Vec::with_capacity(it);
    for _ in 0..it {
        comm.barrier().expect("barrier");
        let t0 = Instant::now();
        once(b);
        tp.push(t0.elapsed().as_secs_f64());
    }
    let pure = median(&tp);
    let (work, _) = calibrate(agree(comm, pure), rate, it.min(20));
    let slices = tests.max(1);
    let slice = work / slices as u64;
    let mut v: [Vec<f64>; 6] = Default::default();
    for _ in 0..it {
        comm.barrier().expect("barrier");
        let (mut computing, mut post, mut testing, mut waiting) = (0.0, 0.0, 0.0, 0.0);
        let (w0, p0, c0) = (Instant::now(), process_cpu(), thread_cpu());
        comm.scope(|s| {
            // One chain of clock reads: each ends a segment and starts the next, so
            // that a read is paid once (see `clock_cost`).
            let mut last = thread_cpu();
            let mut lap = |acc: &mut f64| {
                let now = thread_cpu();
                *acc += now - last;
                last = now;
            };
            let mut req = c.start(s, b);
            lap(&mut post);
            for _ in 0..slices {
                black_box(compute(slice));
                lap(&mut computing);
                if tests > 0 {
                    req.test();
                    lap(&mut testing);
                }
            }
            req.wait().expect("wait");
            lap(&mut waiting);
        });
        let (c1, p1) = (thread_cpu(), process_cpu());
        v[0].push((c1 - c0 - computing).max(0.0));
        v[1].push((p1 - p0 - computing).max(0.0));
        v[2].push(w0.elapsed().as_secs_f64());
        v[3].push(post);
        v[4].push(testing);
        v[5].push(waiting);
    }
    [
        median(&v[0]),
        median(&v[1]),
        pure,
        median(&v[2]),
        median(&v[3]),
        median(&v[4]),
        median(&v[5]),
    ]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The proxy engine starts this same binary as its proxy process.
    let sizes = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20];
    let Options {
        args,
        engines,
        iters,
        shm,
        sizes,
        colls,
    } = Options::from_env(50, &sizes)?;
    let tests = hpc_benches::count_arg(&args, "--tests", 8)?;
    let proxy_defaults = args.iter().any(|a| a == "--proxy-defaults");
    let world = World::init()?;
    let rate = compute_rate();
    let mut comms = Vec::new();
    for &engine in &engines {
        let mut opts = CommOptions::new(engine);
        if engine == Engine::Proxy && !proxy_defaults {
            opts.proxy_min = Some(0);
            opts.own_copies = Some(false);
        }
        comms.push(Comm::with_options(&world, opts)?);
    }
    if world.rank() == 0 {
        println!(
            "# offload: rank CPU per collective, {} ranks, {} cores, medians of {iters} \
             iterations, {tests} tests during the compute; times in us",
            world.size(),
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        // Each collective's window holds 2 * tests + 4 clock reads, about half of
        // whose cost falls on the collective's side: part of every engine's `cpu`.
        println!(
            "# a read of the thread CPU clock costs {:.2} us; about {} of them fall in each figure",
            clock_cost() * 1e6,
            tests.max(1) + 2
        );
        for c in &comms {
            println!("# {}: {}", c.engine().name(), c.progress_note());
        }
        println!(
            "{:<3} {:<7} {:<11} {:>8} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8}",
            "",
            "engine",
            "collective",
            "bytes",
            "cpu",
            "proc",
            "pure",
            "overall",
            "post",
            "tests",
            "wait"
        );
    }
    for &c in &colls {
        for (si, &bytes) in sizes.iter().enumerate() {
            let it = if bytes >= 1 << 20 {
                iters.div_ceil(2).max(10)
            } else {
                iters
            };
            for j in 0..comms.len() {
                let comm = &comms[(j + si) % comms.len()];
                let engine = comm.engine();
                let shared = shm.shared(engine);
                let mut b = Bufs::new(c, bytes, comm.size(), shared);
                let mine = measure(comm, c, &mut b, it, tests, rate);
                let mut all = vec![0.0f64; 7 * comm.size()];
                comm.allgather(&mine, &mut all)?;
                if comm.rank() == 0 {
                    let n = comm.size() as f64;
                    let mean = |i: usize| all.chunks(7).map(|r| r[i]).sum::<f64>() / n;
                    let max = |i: usize| all.chunks(7).map(|r| r[i]).fold(0.0, f64::max);
                    println!(
                        "row {:<7} {:<11} {:>8} {:>10.2} {:>10.2} {:>10.1} {:>10.1} {:>8.2} {:>8.2} {:>8.2}",
                        engine.name(),
                        c.name(),
                        bytes,
                        mean(0) * 1e6,
                        mean(1) * 1e6,
                        max(2) * 1e6,
                        max(3) * 1e6,
                        mean(4) * 1e6,
                        mean(5) * 1e6,
                        mean(6) * 1e6
                    );
                }
            }
        }
    }
    Ok(())
}
