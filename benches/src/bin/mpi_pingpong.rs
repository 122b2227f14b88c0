//! Open MPI reference for `transport`: a blocking send/recv ping-pong between ranks
//! 0 and 1 (`mpirun -np 2 mpi_pingpong [size] [iters]`), printing the median half
//! round trip in microseconds as `mpi_half_rtt_us <value>`.

use std::time::Instant;

use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().expect("MPI initialises");
    let world = universe.world();
    let rank = world.rank();
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(8);
    let iters: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let other = world.process_at_rank(1 - rank);
    let mut buf = vec![0u8; size];
    let warmup = iters / 10;
    let mut times = Vec::with_capacity(iters);
    for i in 0..warmup + iters {
        let t0 = Instant::now();
        if rank == 0 {
            other.send(&buf[..]);
            other.receive_into(&mut buf[..]);
        } else {
            other.receive_into(&mut buf[..]);
            other.send(&buf[..]);
        }
        if i >= warmup {
            times.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    if rank == 0 {
        println!("mpi_half_rtt_us {:.3}", hpc_benches::median(&times));
    }
}
