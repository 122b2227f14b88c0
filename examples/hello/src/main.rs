//! Hello from every rank, then a sum over all ranks.
//!
//! ```text
//! hpc run -n 4 -- hello
//! ```

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env(
            hpc_rs::runtime::env::LOG,
        ))
        .with_writer(std::io::stderr)
        .init();
    let ctx = hpc_rs::init()?;
    let world = &ctx.world;
    println!(
        "hello from rank {} of {} on node {} ({}), local rank {} of {}",
        world.rank(),
        world.size(),
        world.node(),
        world.nodes().name(world.node()),
        world.local_rank(),
        world.local_size()
    );
    if let Some(p) = &ctx.placement {
        println!(
            "rank {}: cores {:?} (PUs {}), NUMA {:?}, environment: {}",
            world.rank(),
            p.compute_cores,
            p.cpuset,
            p.numa,
            ctx.environment.runtime.kind.name()
        );
    }
    // Allreduce (sum) of a per-rank value through the world's allgather.
    let mine = (world.rank() as f64 + 1.0).powi(2);
    let total: f64 = world
        .allgather(&mine.to_le_bytes())?
        .iter()
        .map(|b| f64::from_le_bytes(b[..8].try_into().expect("8 bytes per rank")))
        .sum();
    let n = world.size() as f64;
    let expected = n * (n + 1.0) * (2.0 * n + 1.0) / 6.0;
    anyhow::ensure!(
        total == expected,
        "allreduce gave {total}, expected {expected}"
    );
    world.barrier()?;
    if world.rank() == 0 {
        println!(
            "allreduce: sum over ranks of (rank+1)^2 = {total} (expected {expected}) via {}",
            world.bootstrap()
        );
    }
    Ok(())
}
