//! Hello from every rank, then a sum over all ranks.
//!
//! ```text
//! hpc run -n 4 -- hello
//! ```
//!
//! No logging set-up, no engine, no proxy entry: `hpc_rs::init()` installs a log
//! subscriber (`HPC_LOG`, default `warn`), serves as the collectives proxy when started
//! as one, binds the rank to its placement, and `ctx.comm()` picks the engine that fits
//! it (`HPC_ENGINE` overrides).

use hpc_rs::comm::ReduceOp;

/// What `hello --help` prints.
const USAGE: &str = "Hello from every rank, then a sum over all ranks.\n\n\
    Usage: hpc run -n 4 -- hello\n\n\
    It takes no arguments: the settings of hpc-rs in its environment (the book's \
    reference lists them) set it up.";

fn main() {
    // The arguments first, before `init` joins the other ranks: a mistake in them
    // is bad input (status 2, as every program of the project gives it), said
    // before anything runs.
    if let Some(a) = std::env::args_os().nth(1) {
        let a = a.to_string_lossy();
        if a == "--help" || a == "-h" {
            let code = match hpc_io::write::stdout_line(format_args!("{USAGE}")) {
                Ok(()) => 0,
                Err(e) => {
                    hpc_io::message::last_words("hello", &e.to_string());
                    2
                }
            };
            std::process::exit(code);
        }
        hpc_io::message::last_words(
            "hello",
            &format!(
                "{}: hello takes no arguments (run it as `hpc run -n 4 -- hello`; --help says more)",
                hpc_io::message::cut_at(&a, 40)
            ),
        );
        std::process::exit(2);
    }
    if let Err(e) = run() {
        // The project's one-line message (not `main`'s `Error: {e:?}`, which adds a
        // stack backtrace under RUST_BACKTRACE), in one write; a failed write of it
        // changes nothing.
        hpc_io::message::last_words("hello", &hpc_io::message::chain(e.as_ref()));
        std::process::exit(1);
    }
}

/// The cores of a rank's threads, one per thread: listed for a few threads, as a
/// count and a cpulist for many (`HPC_THREADS=65536` on two cores listed 65,536
/// cores in a line of 196 KB).
fn cores(per_thread: &[u32]) -> String {
    if per_thread.len() <= 16 {
        return format!("{per_thread:?}");
    }
    let set: hpc_rs::topology::CpuSet = per_thread.iter().copied().collect();
    format!("{set} ({} threads)", per_thread.len())
}

fn run() -> anyhow::Result<()> {
    let ctx = hpc_rs::init()?;
    let world = &ctx.world;
    // A failed write to stdout (`> /dev/full`) is kept and returned at the end, after
    // the collectives, so that the other ranks are not left waiting for this one; a
    // closed stdout (`| head`) is not an error.
    let mut out = Ok(());
    let mut say = |args: std::fmt::Arguments<'_>| {
        if out.is_ok() {
            out = hpc_io::write::stdout_line(args);
        }
    };
    say(format_args!(
        "hello from rank {} of {} on node {} ({}), local rank {} of {}",
        world.rank(),
        world.size(),
        world.node(),
        world.nodes().name(world.node()),
        world.local_rank(),
        world.local_size()
    ));
    if let Some(p) = &ctx.placement {
        say(format_args!(
            "rank {}: cores {} (PUs {}{}), NUMA {:?}, environment: {}",
            world.rank(),
            cores(&p.compute_cores),
            p.cpuset,
            if ctx.bound { ", bound" } else { "" },
            p.numa,
            ctx.environment.runtime.kind.name()
        ));
    }
    // Allreduce (sum) of a per-rank value.
    let comm = ctx.comm()?;
    let mine = [(world.rank() as f64 + 1.0).powi(2)];
    let mut total = [0.0f64];
    comm.allreduce(&mine, &mut total, ReduceOp::Sum)?;
    let total = total[0];
    let n = world.size() as f64;
    let expected = n * (n + 1.0) * (2.0 * n + 1.0) / 6.0;
    anyhow::ensure!(
        total == expected,
        "allreduce gave {total}, expected {expected}"
    );
    comm.barrier()?;
    if world.rank() == 0 {
        say(format_args!(
            "allreduce: sum over ranks of (rank+1)^2 = {total} (expected {expected}) via {}, \
             engine {} ({})",
            world.bootstrap(),
            comm.engine().name(),
            comm.progress_note()
        ));
    }
    out?;
    hpc_io::write::flush_stdout()?;
    Ok(())
}
