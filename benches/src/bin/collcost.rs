//! Cost of one small collective: back-to-back zero-copy collectives
//! (`scope` + `i<collective>` + `wait`, the overlap benchmark's `pure`
//! form) in batches, timed per batch by the calling thread's CPU clock
//! (`CLOCK_THREAD_CPUTIME_ID`), the process's CPU clock and the wall clock.
//! On a shared machine the thread's CPU time is the quiet measure: another
//! process's burst lengthens the wall time of a batch, not the CPU time the
//! rank spends on it.
//!
//! Prints one line per engine, collective and size: the median over batches
//! of the time per collective, and the 10th percentile (`-p10`, the quiet
//! batches: with more ranks than idle cores a rank's CPU time includes its
//! spin for a peer that another process displaced); thread CPU time averaged
//! over ranks, the wall time the slowest rank's.
//!
//! Usage: `hpc run -n N -- collcost [--engine inline,thread,proxy]
//! [--colls allreduce,bcast] [--sizes 8,1024,4096] [--batch 200]
//! [--batches 40] [--registered]`. The same binary serves as the proxy
//! process of the `proxy` engine. `--registered` takes the buffers from
//! `Comm::registered_buf` (in place for a proxy in DPU placement). With
//! `HPC_TRACE=DIR` each rank records its timeline (the cost of recording).

use std::hint::black_box;
use std::time::Instant;

use hpc_benches::{clock, median, percentile, Mem};
use hpc_comm::{Comm, CommOptions, Engine, ReduceOp};
use hpc_runtime::World;

#[derive(Clone, Copy)]
enum Coll {
    Allreduce,
    Bcast,
    Allgather,
    Alltoall,
}

impl Coll {
    fn name(self) -> &'static str {
        match self {
            Coll::Allreduce => "allreduce",
            Coll::Bcast => "bcast",
            Coll::Allgather => "allgather",
            Coll::Alltoall => "alltoall",
        }
    }
}

/// One zero-copy collective, started and waited for.
fn once(comm: &Comm, c: Coll, send: &[u8], recv: &mut [u8]) {
    comm.scope(|s| {
        match c {
            Coll::Allreduce => s.iallreduce(send, recv, ReduceOp::Max),
            Coll::Bcast => s.ibcast(recv, 0),
            Coll::Allgather => s.iallgather(send, recv),
            Coll::Alltoall => s.ialltoall(send, recv),
        }
        .expect("post")
        .wait()
        .expect("wait");
    });
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // With HPC_TRACE set, the timeline's recording (its cost is what is measured);
    // without, no subscriber at all.
    let trace = hpc_trace::layer_from_env()?;
    if let Some(layer) = &trace {
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::Layer as _;
        let subscriber = tracing_subscriber::registry()
            .with(layer.clone().with_filter(hpc_trace::default_filter()));
        tracing::subscriber::set_global_default(subscriber)?;
    }
    // The proxy engine starts this same binary as its proxy process.
    hpc_comm::proxy::serve_env()?;
    let args: Vec<String> = std::env::args().collect();
    let get = |k: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let list = |k: &str, d: &str| -> Vec<String> {
        get(k)
            .unwrap_or_else(|| d.into())
            .split(',')
            .map(String::from)
            .collect()
    };
    let engines: Vec<Engine> = list("--engine", "inline,thread,proxy")
        .iter()
        .map(|e| e.parse())
        .collect::<Result<_, _>>()?;
    let colls: Vec<Coll> = list("--colls", "allreduce,bcast")
        .iter()
        .map(|n| {
            [
                Coll::Allreduce,
                Coll::Bcast,
                Coll::Allgather,
                Coll::Alltoall,
            ]
            .into_iter()
            .find(|c| c.name() == n)
            .ok_or_else(|| format!("unknown collective {n:?}"))
        })
        .collect::<Result<_, _>>()?;
    let sizes: Vec<usize> = list("--sizes", "8,1024,4096")
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let batch = hpc_benches::count_arg(&args, "--batch", 200)?;
    let registered = args.iter().any(|a| a == "--registered");
    let batches = hpc_benches::count_arg(&args, "--batches", 40)?;

    let world = World::init()?;
    if let Some(layer) = &trace {
        layer.set_rank(world.rank());
    }
    if world.rank() == 0 {
        println!(
            "# collcost, {} ranks, medians of {batches} batches of {batch}; us per collective",
            world.size()
        );
        println!(
            "{:<7} {:<10} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "engine", "collective", "bytes", "thr-cpu", "thr-p10", "proc-cpu", "wall", "wall-p10"
        );
    }
    for engine in engines {
        let comm = Comm::with_options(&world, CommOptions::new(engine))?;
        let n = comm.size();
        for &c in &colls {
            for &bytes in &sizes {
                // u8 elements: `bytes` per rank's block, as the overlap benchmark counts.
                let (s, r) = match c {
                    Coll::Allreduce => (bytes, bytes),
                    Coll::Bcast => (0, bytes),
                    Coll::Allgather => (bytes, bytes * n),
                    Coll::Alltoall => (bytes * n, bytes * n),
                };
                // `--registered`: buffers from `Comm::registered_buf` (in place for
                // a proxy in DPU placement, ordinary memory elsewhere).
                let (mut send, mut recv): (Mem<u8>, Mem<u8>) = if registered {
                    (
                        Mem::Registered(comm.registered_buf(s)?),
                        Mem::Registered(comm.registered_buf(r)?),
                    )
                } else {
                    (Mem::Heap(vec![0; s]), Mem::Heap(vec![0; r]))
                };
                send.fill(1);
                for _ in 0..batch {
                    once(&comm, c, &send, &mut recv);
                }
                let (mut thr, mut proc_, mut wall) = (Vec::new(), Vec::new(), Vec::new());
                for _ in 0..batches {
                    comm.barrier()?;
                    let (t0, p0, w0) = (
                        clock(libc::CLOCK_THREAD_CPUTIME_ID),
                        clock(libc::CLOCK_PROCESS_CPUTIME_ID),
                        Instant::now(),
                    );
                    for _ in 0..batch {
                        once(&comm, c, &send, &mut recv);
                    }
                    wall.push(w0.elapsed().as_secs_f64() / batch as f64);
                    thr.push((clock(libc::CLOCK_THREAD_CPUTIME_ID) - t0) / batch as f64);
                    proc_.push((clock(libc::CLOCK_PROCESS_CPUTIME_ID) - p0) / batch as f64);
                }
                black_box(&recv);
                let mine = [
                    median(&thr),
                    percentile(&thr, 10.0),
                    median(&proc_),
                    median(&wall),
                    percentile(&wall, 10.0),
                ];
                let mut all = vec![0.0f64; 5 * n];
                comm.allgather(&mine, &mut all)?;
                if comm.rank() == 0 {
                    let mean = |i: usize| all.chunks(5).map(|r| r[i]).sum::<f64>() / n as f64;
                    let max = |i: usize| all.chunks(5).map(|r| r[i]).fold(0.0, f64::max);
                    println!(
                        "{:<7} {:<10} {:>6} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
                        engine.name(),
                        c.name(),
                        bytes,
                        mean(0) * 1e6,
                        mean(1) * 1e6,
                        mean(2) * 1e6,
                        max(3) * 1e6,
                        max(4) * 1e6
                    );
                }
            }
        }
    }
    Ok(())
}
