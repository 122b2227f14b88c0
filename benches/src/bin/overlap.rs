//! Overlap of non-blocking collectives with computation, measured the way
//! the OSU micro-benchmarks do (`osu_ialltoall` and friends, the figure of
//! MVAPICH2-DPU):
//!
//! 1. `pure`: post the collective and wait at once (median over iterations);
//! 2. `compute`: a dummy compute loop calibrated to last `pure` alone;
//! 3. `overall`: post, run the same compute loop, wait;
//! 4. `overlap = max(0, 100 - 100 * (overall - compute) / pure)`;
//! 5. `eff`: the compute loop's speed during the overlapped window over its
//!    speed alone (1.0 = the engine stole nothing from the application).
//!
//! Also the blocking collective's time (the engine's, or the MPI library's
//! blocking `MPI_Alltoall` etc. with `--engine mpi`).
//!
//! Usage: `hpc run -n 2 -- overlap [--engine inline,thread,proxy] [--iters N]
//! [--sizes BYTES,...] [--colls alltoall,allgather,bcast,allreduce]
//! [--shm auto|on|off]` (`SharedBuf` buffers; `auto`: for the proxy only)
//! or `mpirun -n 2 overlap --engine mpi` (built with `--features mpi`).
//! The same binary serves as the proxy process of the `proxy` engine.

use std::hint::black_box;
use std::time::Instant;

use hpc_benches::median;
use hpc_comm::{Comm, CommOptions, Engine, ReduceOp, SharedBuf};
use hpc_runtime::World;

#[derive(Clone, Copy, Debug)]
enum Coll {
    Alltoall,
    Allgather,
    Bcast,
    Allreduce,
}

impl Coll {
    fn name(self) -> &'static str {
        match self {
            Coll::Alltoall => "ialltoall",
            Coll::Allgather => "iallgather",
            Coll::Bcast => "ibcast",
            Coll::Allreduce => "iallreduce",
        }
    }
}

/// A benchmark buffer: ordinary memory, or a `SharedBuf` that the proxy maps.
enum Mem {
    Heap(Vec<f32>),
    Shared(SharedBuf<f32>),
}

impl Mem {
    fn new(len: usize, v: f32, shared: bool) -> Mem {
        if shared {
            let mut b = SharedBuf::new(len).expect("shared buffer");
            b.fill(v);
            Mem::Shared(b)
        } else {
            Mem::Heap(vec![v; len])
        }
    }
}

impl std::ops::Deref for Mem {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        match self {
            Mem::Heap(v) => v,
            Mem::Shared(b) => b,
        }
    }
}

impl std::ops::DerefMut for Mem {
    fn deref_mut(&mut self) -> &mut [f32] {
        match self {
            Mem::Heap(v) => v,
            Mem::Shared(b) => b,
        }
    }
}

struct Bufs {
    send: Mem,
    recv: Mem,
}

impl Bufs {
    fn new(c: Coll, bytes: usize, n: usize, shared: bool) -> Bufs {
        let e = (bytes / 4).max(1);
        let (s, r) = match c {
            // Per-rank message size = bytes sent to each peer, as OSU counts it.
            Coll::Alltoall => (e * n, e * n),
            Coll::Allgather => (e, e * n),
            Coll::Bcast => (0, e),
            Coll::Allreduce => (e, e),
        };
        Bufs {
            send: Mem::new(s, 1.0, shared),
            recv: Mem::new(r, 0.0, shared),
        }
    }
}

/// A compute loop that needs the core but little memory bandwidth.
#[inline(never)]
fn compute(iters: u64) -> f64 {
    let mut x = black_box(1.0f64);
    for _ in 0..iters {
        x = black_box(x * 1.000_000_1 + 1e-9);
    }
    x
}

/// Starts and waits one collective with the zero-copy (scoped) requests.
fn nonblocking(comm: &Comm, c: Coll, b: &mut Bufs, work: u64) -> (f64, f64) {
    let t0 = Instant::now();
    let mut tc = 0.0;
    comm.scope(|s| {
        let req = match c {
            Coll::Alltoall => s.ialltoall(&b.send[..], &mut b.recv[..]),
            Coll::Allgather => s.iallgather(&b.send[..], &mut b.recv[..]),
            Coll::Bcast => s.ibcast(&mut b.recv[..], 0),
            Coll::Allreduce => s.iallreduce(&b.send[..], &mut b.recv[..], ReduceOp::Sum),
        }
        .expect("post");
        if work > 0 {
            let c0 = Instant::now();
            black_box(compute(work));
            tc = c0.elapsed().as_secs_f64();
        }
        req.wait().expect("wait");
    });
    (t0.elapsed().as_secs_f64(), tc)
}

fn blocking(comm: &Comm, c: Coll, b: &mut Bufs) -> f64 {
    let t0 = Instant::now();
    #[cfg(feature = "mpi")]
    if comm.engine() == Engine::Mpi {
        mpi_blocking(c, b);
        return t0.elapsed().as_secs_f64();
    }
    match c {
        Coll::Alltoall => comm.alltoall(&b.send[..], &mut b.recv[..]),
        Coll::Allgather => comm.allgather(&b.send[..], &mut b.recv[..]),
        Coll::Bcast => comm.bcast(&mut b.recv[..], 0),
        Coll::Allreduce => comm.allreduce(&b.send[..], &mut b.recv[..], ReduceOp::Sum),
    }
    .expect("blocking collective");
    t0.elapsed().as_secs_f64()
}

#[cfg(feature = "mpi")]
fn mpi_blocking(c: Coll, b: &mut Bufs) {
    use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
    use mpi::topology::Communicator;
    let world = mpi::topology::SimpleCommunicator::world();
    match c {
        Coll::Alltoall => world.all_to_all_into(&b.send[..], &mut b.recv[..]),
        Coll::Allgather => world.all_gather_into(&b.send[..], &mut b.recv[..]),
        Coll::Bcast => world.process_at_rank(0).broadcast_into(&mut b.recv[..]),
        Coll::Allreduce => {
            world.all_reduce_into(&b.send[..], &mut b.recv[..], SystemOperation::sum())
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The proxy engine starts this same binary as its proxy process.
    hpc_comm::proxy::serve_env()?;
    let args: Vec<String> = std::env::args().collect();
    let get = |k: &str| {
        args.iter()
            .position(|a| a == k)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let engines: Vec<Engine> = get("--engine")
        .unwrap_or_else(|| "inline,thread,proxy".into())
        .split(',')
        .map(|e| e.parse())
        .collect::<Result<_, _>>()?;
    let iters: usize = get("--iters").map_or(Ok(100), |s| s.parse())?;
    // Buffers in shared memory (`SharedBuf`): `auto` for the proxy engine only,
    // which maps them instead of copying through the kernel.
    let shm = get("--shm").unwrap_or_else(|| "auto".into());
    if !["auto", "on", "off"].contains(&shm.as_str()) {
        return Err(format!("--shm {shm:?}: auto, on or off").into());
    }
    let sizes: Vec<usize> = get("--sizes")
        .map(|s| {
            s.split(',')
                .map(|x| x.parse().expect("size in bytes"))
                .collect()
        })
        .unwrap_or_else(|| vec![1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20]);
    let all = [
        Coll::Alltoall,
        Coll::Allgather,
        Coll::Bcast,
        Coll::Allreduce,
    ];
    let colls: Vec<Coll> = match get("--colls") {
        Some(list) => list
            .split(',')
            .map(|n| {
                all.into_iter()
                    .find(|c| c.name().trim_start_matches('i') == n.trim_start_matches('i'))
                    .ok_or_else(|| {
                        format!("unknown collective {n:?} (alltoall, allgather, bcast, allreduce)")
                    })
            })
            .collect::<Result<_, _>>()?,
        None => all.to_vec(),
    };
    let world = World::init()?;
    // Calibrate the compute loop alone: iterations per second (median of short runs:
    // the machine is shared, long runs catch other processes' bursts).
    let rate = {
        let n = 200_000u64;
        let t: Vec<f64> = (0..30)
            .map(|_| {
                let t0 = Instant::now();
                black_box(compute(n));
                t0.elapsed().as_secs_f64()
            })
            .collect();
        n as f64 / median(&t)
    };
    if world.rank() == 0 {
        println!(
            "# overlap (OSU method), {} ranks, {} cores, medians of {iters} iterations; times in us",
            world.size(),
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        println!(
            "{:<7} {:<11} {:>8} {:>10} {:>10} {:>10} {:>10} {:>8} {:>6}",
            "engine",
            "collective",
            "bytes",
            "blocking",
            "pure",
            "compute",
            "overall",
            "overlap%",
            "eff"
        );
    }
    for engine in engines {
        let comm = Comm::with_options(&world, CommOptions::new(engine))?;
        if world.rank() == 0 {
            println!("# {}: {}", engine.name(), comm.progress_note());
        }
        for &c in &colls {
            for &bytes in &sizes {
                let shared = match shm.as_str() {
                    "on" => true,
                    "off" => false,
                    _ => engine == Engine::Proxy,
                };
                let mut b = Bufs::new(c, bytes, comm.size(), shared);
                let it = if bytes >= 256 << 10 {
                    iters.div_ceil(2).max(10)
                } else {
                    iters
                };
                for _ in 0..5 {
                    nonblocking(&comm, c, &mut b, 0);
                }
                let mut tb = Vec::new();
                for _ in 0..it {
                    comm.barrier()?;
                    tb.push(blocking(&comm, c, &mut b));
                }
                let mut tp = Vec::new();
                for _ in 0..it {
                    comm.barrier()?;
                    tp.push(nonblocking(&comm, c, &mut b, 0).0);
                }
                let pure = median(&tp);
                // Agree on one compute length (rank 0's pure time) on every rank.
                let mut p = [0.0f64];
                if comm.rank() == 0 {
                    p[0] = pure;
                }
                comm.bcast(&mut p, 0)?;
                // Compute alone for as long as the pure communication (two refinements).
                let mut work = (p[0] * rate) as u64;
                let mut t_compute = 0.0;
                for _ in 0..3 {
                    let mut alone = Vec::new();
                    for _ in 0..it.min(20) {
                        let t0 = Instant::now();
                        black_box(compute(work));
                        alone.push(t0.elapsed().as_secs_f64());
                    }
                    t_compute = median(&alone);
                    work = ((work as f64) * p[0] / t_compute.max(1e-9)) as u64;
                }
                let (mut to, mut tc) = (Vec::new(), Vec::new());
                for _ in 0..it {
                    comm.barrier()?;
                    let (o, c) = nonblocking(&comm, c, &mut b, work);
                    to.push(o);
                    tc.push(c);
                }
                let overall = median(&to);
                let eff = t_compute / median(&tc);
                let overlap = (100.0 - 100.0 * (overall - t_compute) / pure).clamp(0.0, 100.0);
                // Report the slowest rank's view, like OSU (max over ranks).
                let mine = [median(&tb), pure, t_compute, overall, overlap, eff];
                let mut all = vec![0.0f64; 6 * comm.size()];
                comm.allgather(&mine, &mut all)?;
                if comm.rank() == 0 {
                    let col = |i: usize| all.chunks(6).map(|r| r[i]).fold(f64::MIN, f64::max);
                    let colmin = |i: usize| all.chunks(6).map(|r| r[i]).fold(f64::MAX, f64::min);
                    println!(
                        "{:<7} {:<11} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>8.1} {:>6.2}",
                        engine.name(),
                        c.name(),
                        bytes,
                        col(0) * 1e6,
                        col(1) * 1e6,
                        col(2) * 1e6,
                        col(3) * 1e6,
                        colmin(4),
                        colmin(5)
                    );
                }
            }
        }
    }
    Ok(())
}
