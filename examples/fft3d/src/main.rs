//! `fft3d`: a distributed 3-D complex FFT (pencil decomposition, as P3DFFT) on
//! hpc-rs, timed and checked against a serial FFT of the same data.
//!
//! ```text
//! fft3d --n 32                                          # one rank
//! hpc run -n 4 -- fft3d --n 64 --grid 2x2 --engine thread
//! hpc run -n 2 --proxy -- fft3d --n 128 --engine proxy --reps 20
//! mpirun -n 2 fft3d --engine mpi                        # built with --features mpi
//! ```
//!
//! Rank 0 prints one `result` line of `key=value` pairs (the benchmark script
//! reads them): the median and best time per transform (the slowest rank's),
//! the rank's thread CPU time per transform, and the relative error against
//! the serial transform (`rel_err=unchecked max_err=unchecked` under
//! `--no-check`: no number).

use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use fft3d::{serial_fft3d, whole_input, Fft3d, Grid, Mode, Setup, C64};
use hpc_comm::{CommOptions, Engine, ReduceOp};
use hpc_io::say_or_return as say;

#[derive(Parser, Debug)]
// A negative number is a flag's value, refused by the flag's own check
// ("dt must be > 0, got -1"), not clap's "unexpected argument '-1' found",
// which named the value and not the flag.
#[command(
    name = "fft3d",
    version,
    allow_negative_numbers = true,
    about = "Distributed 3-D complex FFT with a pencil decomposition (P3DFFT's method) on hpc-rs"
)]
struct Args {
    /// Points per dimension (the grid is N x N x N complex numbers); a multiple of
    /// both dimensions of the process grid.
    #[arg(long, default_value_t = 64)]
    n: usize,
    /// Process grid P1xP2 (P1 * P2 = ranks; 1xP is a slab decomposition).
    /// Default: the most square grid with P1 <= P2.
    #[arg(long, value_name = "P1xP2")]
    grid: Option<String>,
    /// Collectives engine: inline, thread, proxy, mpi (feature `mpi`, under
    /// mpirun), or auto (what `hpc_rs` chooses: HPC_ENGINE, else by placement).
    #[arg(long, default_value = "auto")]
    engine: String,
    /// `overlap`: each transpose's batches are ialltoalls overlapped with the
    /// neighbouring batches' FFTs; `blocking`: a blocking alltoall per batch.
    #[arg(long, default_value = "overlap", value_parser = ["overlap", "blocking"])]
    mode: String,
    /// Batches per transpose.
    #[arg(long, default_value_t = 4)]
    batches: usize,
    /// Timed transforms (after the warm-up ones), 1 to 100000.
    #[arg(long, default_value_t = 10)]
    reps: usize,
    /// Untimed transforms first, at most 100000.
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Seed of the input data.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Transpose buffers in shared memory (`SharedBuf`): auto (for the proxy
    /// engine only), on or off.
    #[arg(long, default_value = "auto", value_parser = ["auto", "on", "off"])]
    shm: String,
    /// Largest relative L2 error accepted against the serial FFT.
    #[arg(long, default_value_t = 1e-12)]
    tolerance: f64,
    /// Skip the check against the serial FFT (it transforms the whole grid on
    /// every rank). Not with `--tolerance`, which only the check uses (it was
    /// taken and ignored).
    #[arg(long, conflicts_with = "tolerance")]
    no_check: bool,
}

/// Seconds of this thread's CPU time.
fn thread_cpu() -> f64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

/// An error of the result line: `1.234e-15`, or `unchecked` under
/// `--no-check` (it wrote `NaN`, which a reader's `float()` takes for a
/// number: a run never checked passed for one whose check came out NaN).
fn error_field(err: Option<f64>) -> String {
    err.map_or_else(|| "unchecked".to_string(), |e| format!("{e:.3e}"))
}

/// The most timed (and warm-up) transforms a run does: more is a mistake, not a
/// benchmark.
const MAX_REPS: usize = 100_000;

/// Checks that every rank was given rank 0's flags (a collective over `world`,
/// before the communicator is made; [`hpc_rs::World::same_on_every_rank`]): a
/// launcher line that differs by rank (`--reps $RANK`, another `--mode`) ran
/// ranks that disagree, and rank 0 printed a result line of its own flags
/// (`mode=blocking` where rank 1 overlapped; ten reps where rank 1, failing,
/// did eleven). Where one differs, every rank fails with one message naming
/// the lowest such rank and the flag.
///
/// The values are compared as the run uses them, not as typed: the grid
/// parsed (and, not given, the default one of this job's size), the engine
/// by its name (`--grid 1x2` and `--grid 01x002`, `--engine thread` and
/// `--engine Thread` were refused as different).
fn same_on_every_rank(
    world: &hpc_rs::World,
    args: &Args,
    grid: Grid,
    engine: Option<Engine>,
) -> Result<()> {
    // Each value as Debug writes it: quoted, its control characters escaped.
    let mine = [
        ("--n", format!("{:?}", args.n)),
        ("--grid", grid.to_string()),
        (
            "--engine",
            engine.map_or("auto".to_string(), |e| e.name().to_string()),
        ),
        ("--mode", format!("{:?}", args.mode)),
        ("--batches", format!("{:?}", args.batches)),
        ("--reps", format!("{:?}", args.reps)),
        ("--warmup", format!("{:?}", args.warmup)),
        ("--seed", format!("{:?}", args.seed)),
        ("--shm", format!("{:?}", args.shm)),
        ("--tolerance", format!("{:?}", args.tolerance)),
        ("--no-check", format!("{:?}", args.no_check)),
    ];
    world.same_on_every_rank("flags", &mine)?;
    Ok(())
}

fn run(args: Args) -> Result<()> {
    if args.n == 0 {
        bail!("--n must be at least 1");
    }
    if args.reps == 0 {
        bail!("--reps must be at least 1");
    }
    if args.reps > MAX_REPS || args.warmup > MAX_REPS {
        bail!(
            "--reps and --warmup are at most {MAX_REPS} each, got --reps {} --warmup {}",
            args.reps,
            args.warmup
        );
    }
    // NaN would turn the check off (no error compares greater than NaN).
    if !(args.tolerance.is_finite() && args.tolerance >= 0.0) {
        bail!(
            "--tolerance must be a finite number >= 0, got {}",
            hpc_io::message::num(args.tolerance)
        );
    }
    let mode = match args.mode.as_str() {
        "blocking" => Mode::Blocking,
        _ => Mode::Overlap,
    };
    // Parsed before the ranks compare them (compared as parsed).
    let engine = if args.engine.trim().eq_ignore_ascii_case("auto") {
        None
    } else {
        Some(args.engine.parse::<Engine>().map_err(|_| {
            anyhow::anyhow!(
                "--engine {:?}: inline, thread, proxy{} or auto",
                args.engine,
                if cfg!(feature = "mpi") {
                    ", mpi"
                } else {
                    " (mpi needs --features mpi)"
                }
            )
        })?)
    };
    let grid = args
        .grid
        .as_deref()
        .map(Grid::parse)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let ctx = hpc_rs::init()?;
    let grid = grid.unwrap_or_else(|| Grid::for_ranks(ctx.world.size()));
    same_on_every_rank(&ctx.world, &args, grid, engine)?;
    let mut opts = ctx.comm_options()?;
    if let Some(engine) = engine {
        opts = CommOptions { engine, ..opts };
    }
    let comm = hpc_comm::Comm::with_options(&ctx.world, opts).context("making the communicator")?;
    let (engine, note) = (comm.engine(), comm.progress_note().to_string());
    let size = comm.size();
    let shared = match args.shm.as_str() {
        "on" => true,
        "off" => false,
        _ => engine == Engine::Proxy,
    };
    // Before anything of the grid is allocated (`--n 100000` would ask for 2 PB).
    fft3d::check_memory(
        args.n,
        size,
        ctx.world.local_size(),
        !args.no_check,
        hpc_io::read::mem_available(),
    )
    .map_err(anyhow::Error::msg)?;
    let mut fft = Fft3d::new(
        comm,
        Setup {
            n: args.n,
            grid,
            batches: args.batches,
            mode,
            shared,
        },
    )
    .map_err(anyhow::Error::msg)?;
    let d = fft.decomp();
    let rank = fft.comm().rank();
    let pristine = d.input(args.seed);
    let mut input = pristine.clone();
    let mut out = vec![C64::default(); d.len()];

    // Checked first (the first transform is also a warm-up).
    let checked = if args.no_check {
        None
    } else {
        fft.forward(&mut input, &mut out)?;
        let mut reference = whole_input(args.seed, args.n);
        serial_fft3d(args.n, &mut reference);
        Some(fft.check(&out, &reference)?)
    };
    // Before anything is timed, as the README says (every rank has the same
    // error): a run that failed its check went on timing and printed its
    // `result` line, which a reader of the output (benches/fft3d.sh takes
    // every such line) took for a good run's. NaN (a broken transform) fails too.
    if let Some((rel, max)) = checked.filter(|&(rel, _)| rel.is_nan() || rel > args.tolerance) {
        bail!(
            "relative error {rel:.3e} (largest absolute {max:.3e}) against the serial FFT \
             exceeds the tolerance {:.1e}: nothing was timed",
            args.tolerance
        );
    }
    for _ in 0..args.warmup {
        input.copy_from_slice(&pristine);
        fft.forward(&mut input, &mut out)?;
    }
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..args.reps {
        input.copy_from_slice(&pristine);
        fft.comm().barrier()?;
        let (t0, c0) = (Instant::now(), thread_cpu());
        fft.forward(&mut input, &mut out)?;
        let (t, c) = (t0.elapsed().as_secs_f64(), thread_cpu() - c0);
        // The slowest rank's time; the mean of the ranks' CPU time.
        let mut m = [0.0f64];
        fft.comm().allreduce(&[t], &mut m, ReduceOp::Max)?;
        let mut s = [0.0f64];
        fft.comm().allreduce(&[c], &mut s, ReduceOp::Sum)?;
        wall.push(m[0]);
        cpu.push(s[0] / size as f64);
    }
    // The batches that ran (at most one per plane), not only the ones asked for.
    let batches = match fft.batches() {
        (a, b) if a == b => a.to_string(),
        (a, b) => format!("{a},{b}"),
    };
    if rank == 0 {
        // The node's cores (the rank itself may be bound to fewer).
        // SAFETY: sysconf has no preconditions.
        let cores = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1);
        say!(
            "# fft3d: {n}^3 complex, grid {grid}, {size} ranks on {nodes} node(s), {cores} cores per node, \
             engine {} ({note}), {} transposes in {} batches, {} reps",
            engine.name(),
            mode.name(),
            batches,
            args.reps,
            n = args.n,
            nodes = ctx.world.node_count(),
        );
        say!(
            "result n={} grid={grid} ranks={size} nodes={} cores={cores} engine={} mode={} batches={} \
             reps={} median_ms={:.3} min_ms={:.3} cpu_ms={:.3} rel_err={} max_err={}",
            args.n,
            ctx.world.node_count(),
            engine.name(),
            mode.name(),
            batches,
            args.reps,
            median(&wall) * 1e3,
            wall.iter().copied().fold(f64::INFINITY, f64::min) * 1e3,
            median(&cpu) * 1e3,
            error_field(checked.map(|c| c.0)),
            error_field(checked.map(|c| c.1)),
        );
        hpc_io::write::flush_stdout()?;
    }
    Ok(())
}

fn main() {
    // The `proxy` engine re-executes this program as the node's progress process.
    match hpc_comm::proxy::serve_env() {
        Ok(false) => {}
        Ok(true) => return,
        Err(e) => {
            hpc_io::message::last_words("fft3d", &format!("proxy failed: {}", e.chain()));
            std::process::exit(1);
        }
    }
    // Usage text written and checked as every program of the project writes it.
    let args = Args::try_parse().unwrap_or_else(|e| {
        hpc_io::message::usage_exit(
            "fft3d",
            &e.render().to_string(),
            e.use_stderr(),
            e.exit_code(),
        )
    });
    if let Err(e) = run(args) {
        // A failed write of the message (stderr on a full device) changes nothing:
        // the status still says the run failed.
        hpc_io::message::last_words("fft3d", &hpc_io::message::chain(e.as_ref()));
        std::process::exit(1);
    }
}
