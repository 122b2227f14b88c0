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

use hpc_benches::{agree, calibrate, compute, compute_rate, median, Bufs, Coll, Options};
use hpc_comm::{Comm, CommOptions, ReduceOp};
use hpc_runtime::World;

/// Starts and waits one collective with the zero-copy (scoped) requests.
fn nonblocking(comm: &Comm, c: Coll, b: &mut Bufs, work: u64) -> (f64, f64) {
    let t0 = Instant::now();
    let mut tc = 0.0;
    comm.scope(|s| {
        let req = c.start(s, b);
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
    if comm.engine() == hpc_comm::Engine::Mpi {
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
    // The proxy engine starts this same binary as its proxy process. Buffers
    // in shared memory (`SharedBuf`, `--shm`): `auto` for the proxy engine
    // only, which maps them instead of copying through the kernel.
    let sizes = [1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20];
    let Options {
        engines,
        iters,
        shm,
        sizes,
        colls,
        ..
    } = Options::from_env(100, &sizes)?;
    let world = World::init()?;
    // Calibrate the compute loop alone: iterations per second.
    let rate = compute_rate();
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
                let shared = shm.shared(engine);
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
                // Agree on one compute length (rank 0's pure time) on every rank,
                // and compute alone for as long as the pure communication.
                let (work, t_compute) = calibrate(agree(&comm, pure), rate, it.min(20));
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
