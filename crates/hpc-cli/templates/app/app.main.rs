//! {{name}}: an hpc-rs application.
//!
//! The same binary runs alone (`cargo run`), as N ranks on this machine
//! (`hpc run -n 4 target/debug/{{name}}`) and, built with `--features mpi`, under
//! `mpirun` and `srun --mpi=pmix`.

fn main() -> anyhow::Result<()> {
    // Joins the job, however it was launched, and finds this rank's place in it.
    let ctx = hpc_rs::init()?;
    let world = &ctx.world;
    let (rank, size) = (world.rank(), world.size());
    println!(
        "rank {rank} of {size} on {} (local rank {} of {})",
        world.nodes().name(world.node()),
        world.local_rank(),
        world.local_size()
    );
    if let Some(p) = &ctx.placement {
        println!("rank {rank}: cores {:?}, NUMA node {:?}", p.compute_cores, p.numa);
    }

    // A sum over all ranks through the world's allgather.
    let mine = (rank as u64 + 1).to_le_bytes();
    let total: u64 = world
        .allgather(&mine)?
        .iter()
        .map(|b| u64::from_le_bytes(b[..8].try_into().expect("8 bytes from every rank")))
        .sum();
    let expected = (size as u64) * (size as u64 + 1) / 2;
    anyhow::ensure!(total == expected, "sum {total}, expected {expected}");
    if rank == 0 {
        println!("sum of 1..={size} over the ranks: {total} ({})", world.bootstrap());
    }
    Ok(())
}
