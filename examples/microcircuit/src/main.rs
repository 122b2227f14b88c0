//! `microcircuit`: the Potjans & Diesmann (2014) cortical microcircuit on hpc-rs.
//!
//! ```text
//! microcircuit --n-scaling 0.1 --k-scaling 0.1 --t-sim 1000      # one rank
//! microcircuit --n-scaling 1 --k-scaling 1 --threads 2            # full scale
//! hpc run -n 2 -- microcircuit --threads 1                        # two ranks
//! ```
//! See the README for every flag, the spike file format and checkpointing.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use clap::Parser;
use hpc_io::message::num;
use hpc_io::say_or_return as say;
use hpc_spiking::alltoallv::RunExchange;
use hpc_spiking::args::RunArgs;
use hpc_spiking::progress::ProgressLine;
use microcircuit::params::{Input, Model, Params, NPOP};
use microcircuit::sim::{RankReport, Simulation};

/// How spikes travel between ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Exchange {
    /// Every rank receives every spike.
    Allgather,
    /// Each spike goes only to the ranks that hold targets of its source.
    Alltoallv,
}

#[derive(Parser, Debug)]
// A negative number is a flag's value, refused by the flag's own check
// ("dt must be > 0, got -1"), not clap's "unexpected argument '-1' found",
// which named the value and not the flag.
#[command(
    name = "microcircuit",
    version,
    allow_negative_numbers = true,
    about = "Potjans & Diesmann (2014) cortical microcircuit (NEST's Potjans_2014), distributed with hpc-rs"
)]
struct Args {
    /// TOML parameter file (keys as in `microcircuit.toml`); flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Fraction of the neurons, in (0, 1].
    #[arg(long, allow_hyphen_values = true)]
    n_scaling: Option<f64>,
    /// Fraction of the in-degrees, in (0, 1].
    #[arg(long, allow_hyphen_values = true)]
    k_scaling: Option<f64>,
    /// Recorded time after the warm-up (ms).
    #[arg(long, allow_hyphen_values = true)]
    t_sim: Option<f64>,
    /// Warm-up (ms).
    #[arg(long, allow_hyphen_values = true)]
    t_presim: Option<f64>,
    /// Seed of all random streams.
    #[arg(long)]
    seed: Option<u64>,
    /// Poisson background input (the default).
    #[arg(long, conflicts_with = "dc")]
    poisson: bool,
    /// DC background input instead of Poisson.
    #[arg(long)]
    dc: bool,
    /// Add the thalamic input.
    #[arg(long)]
    thalamic: bool,
    /// Run the neuron update's portable build even where the processor has
    /// AVX2 or AVX-512 (to compare their speed: the spikes are the same).
    #[arg(long)]
    portable_update: bool,
    /// How spikes travel between ranks: `allgather` (every rank receives every
    /// spike) or `alltoallv` (each spike to the ranks with its targets, and rank
    /// 0 for the output; through the `--engine`, `inline` when that is `world`).
    #[arg(long, value_enum, default_value_t = Exchange::Allgather)]
    exchange: Exchange,
    /// Output directory (spikes.spk, summary.json, report.html, figures).
    #[arg(long, default_value = "microcircuit-out")]
    out: PathBuf,
    /// Do not draw the figures.
    #[arg(long)]
    no_plot: bool,
    #[command(flatten)]
    run: RunArgs,
}

fn params_of(args: &Args) -> Result<Params> {
    use hpc_spiking::args::{flag_file, read_flag_file};
    let mut p = match &args.config {
        Some(f) => {
            let text = read_flag_file("--config", f, hpc_io::read::MAX_CONFIG_BYTES)?;
            Params::from_toml_str(&text).with_context(|| flag_file("--config", f))?
        }
        None => Params::default(),
    };
    macro_rules! set {
        ($($f:ident),*) => { $( if let Some(v) = args.$f { p.$f = v; } )* };
    }
    set!(n_scaling, k_scaling, t_sim, t_presim, seed);
    if args.dc {
        p.input = Input::Dc;
    }
    if args.poisson {
        p.input = Input::Poisson;
    }
    if args.thalamic {
        p.thalamus.enabled = true;
    }
    Ok(p)
}

/// Where the parameters came from, for an error about their values when a
/// file set them: `--config FILE`, with the flags that override it
/// (`--config FILE with --t-sim, --dc`); `None` without `--config` (the
/// message names the parameter, as its flag is named). A value of the file
/// that the model refused was named without the file.
fn params_source(args: &Args) -> Option<String> {
    let file = args.config.as_deref()?;
    Some(hpc_spiking::args::config_source(
        file,
        &[
            ("--n-scaling", args.n_scaling.is_some()),
            ("--k-scaling", args.k_scaling.is_some()),
            ("--t-sim", args.t_sim.is_some()),
            ("--t-presim", args.t_presim.is_some()),
            ("--seed", args.seed.is_some()),
            ("--poisson", args.poisson),
            ("--dc", args.dc),
            ("--thalamic", args.thalamic),
        ],
    ))
}

/// The exchange the run uses: `--exchange` between the ranks of `world`.
fn make_exchange(
    args: &Args,
    world: Arc<hpc_rs::World>,
    sim: &Simulation,
    model: &Model,
) -> Result<RunExchange> {
    let needed =
        (args.exchange == Exchange::Alltoallv && world.size() > 1).then(|| sim.has_targets());
    let targeted = needed.as_deref().map(|n| (n, sim.block(), model.gid_bits));
    RunExchange::new(args.run.engine, world, targeted)
}

fn run(args: Args) -> Result<()> {
    let ra = &args.run;
    ra.check()?;
    let params = params_of(&args)?;
    // Every parameter is checked here, before anything is allocated.
    let model = match (Model::new(params), params_source(&args)) {
        (Err(e), Some(from)) => return Err(e.context(from)),
        (model, _) => model?,
    };
    let dt = model.params.dt;
    let times = ra.times(dt, model.steps)?;
    microcircuit::sim::set_portable_update(args.portable_update);
    let ctx = hpc_rs::init()?;
    let world = Arc::new(ctx.world);
    let (rank, size) = (world.rank(), world.size());
    // Every rank given the same model and options, checked before any of it
    // is built (a rank given another seed built another network silently).
    hpc_spiking::run::same_on_every_rank(
        &world,
        &serde_json::json!({
            "params": model.params, "out": hpc_spiking::run::path_setting(&args.out), "run": ra.shared(),
            "exchange": format!("{:?}", args.exchange),
        }),
    )?;
    // Refuse a network that cannot fit before allocating any of it.
    model.check_memory(
        size,
        world.local_size(),
        hpc_spiking::memory::available(ctx.environment.resources.memory_limit_bytes),
    )?;
    let pool = hpc_spiking::run::thread_pool(&world, ra.threads(), !ra.no_pin, "microcircuit")?;
    // Rank 0 writes the shared files: it owns the directory, and a second run on it
    // fails here, before any of its files is touched. The earlier run's files are
    // removed only once the input (a checkpoint to resume from) is checked.
    // SIGTERM, SIGINT and SIGHUP end the run cleanly at every moment of it: in
    // the loop after the interval in progress, elsewhere at once, with its
    // run.json marked incomplete naming what was being done (hpc_spiking::stop).
    let on_signal = hpc_spiking::stop::OnSignal::around(true, "microcircuit")?;
    let mut out_dir = hpc_spiking::run::own_output_dir(
        &world,
        &args.out,
        "microcircuit",
        serde_json::json!({ "seed": model.params.seed, "ranks": size }),
        hpc_spiking::run::output_names(hpc_spike_report::plot::Plot::ALL.map(|p| p.file_stem())),
    )?;
    let opts = ra.options(&world, &args.out, times, true, |d| {
        Ok(microcircuit::checkpoint::open(d)?.dir().to_path_buf())
    })?;
    // The checkpoint directory is this run's while it runs (held to the end of
    // `run`).
    let _checkpoint_lock = opts.claim_checkpoint_dir(&world, &model.params, out_dir.as_ref())?;
    on_signal.doing("while building the network");
    let mut sim = Simulation::new(&model, rank, size, &pool, &opts)?;
    opts.start_output_dir(out_dir.as_mut())?;
    let mut line = ProgressLine::new(ra.shows_progress(rank), dt, model.presim_steps, None);
    let report = {
        let mut ex = make_exchange(&args, world.clone(), &sim, &model)?;
        line.drive(|cb| sim.run(&pool, &mut ex, &opts, cb))
    };
    // A run a signal stopped says so in its run.json (incomplete, the signal named).
    let report = report.map_err(|e| hpc_spiking::stop::mark_stopped(out_dir.take(), e, dt))?;
    on_signal.doing("while writing the summary");
    let end = (report.completed, report.end_step, dt);
    hpc_spiking::run::hand_off(&world, &report, out_dir, end, |dir, all| {
        summary(&args, dir, &model, &report, all, &pool)
    })
}

fn summary(
    args: &Args,
    dir: &mut hpc_io::rundir::RunDir,
    model: &Model,
    me: &RankReport,
    all: &[hpc_spiking::run::Gathered],
    pool: &rayon::ThreadPool,
) -> Result<()> {
    let reports: Vec<RankReport> = hpc_spiking::run::reports(all)?;
    let p = &model.params;
    let stats = me.stats.clone().context("rank 0 has no statistics")?;
    let synapses: u64 = reports.iter().map(|r| r.synapses).sum();
    let conn_bytes: u64 = reports.iter().map(|r| r.connectivity_bytes).sum();
    let events: u64 = reports.iter().map(|r| r.events).sum();
    let max = |f: fn(&RankReport) -> f64| reports.iter().map(f).fold(0.0, f64::max);
    let sim_s = max(|r| r.simulate_s);
    let rec_s = max(|r| r.simulate_recorded_s);
    let rec_bio = me
        .end_step
        .saturating_sub(model.presim_steps.max(me.start_step)) as f64
        * p.dt
        / 1000.0;
    let rtf = if rec_bio > 0.0 { rec_s / rec_bio } else { 0.0 };
    say!(
        "Potjans-Diesmann microcircuit, N_scaling {} K_scaling {}: {} neurons, {} synapses, {:?} background{}, {} rank(s) x {} thread(s)",
        num(p.n_scaling), num(p.k_scaling), model.n, synapses, p.input,
        if p.thalamus.enabled { ", thalamic input" } else { "" },
        me.size, pool.current_num_threads()
    );
    say!(
        "simulated {:.1} ms ({:.1} ms warm-up), dt {} ms, exchange every {} step(s)",
        (me.end_step - me.start_step) as f64 * p.dt,
        p.t_presim,
        num(p.dt),
        me.interval_steps
    );
    if stats.window_ms <= 0.0 {
        // No time recorded: the table's 0.000 Hz said the network was silent.
        say!(
            "  rates             none: the run stopped at {:.1} ms, before its warm-up of {} ms \
             ended ({} spikes in it)",
            me.end_step as f64 * p.dt,
            num(p.t_presim),
            stats.spikes_total
        );
    } else {
        say!("  population   neurons     rate (Hz)   CV ISI");
        for q in &stats.populations {
            say!(
                "  {:<10} {:>9} {:>12.3} {:>8.3}",
                q.name,
                q.neurons,
                q.rate_hz,
                q.cv_isi
            );
        }
        say!(
            "  all        {:>9} {:>12.3}   (spikes {} in all, {} after the warm-up)",
            model.n,
            stats.rate_hz,
            stats.spikes_total,
            stats.populations.iter().map(|q| q.spikes).sum::<u64>()
        );
    }
    say!(
        "  wall time         build {:.3} s ({:.1} CPU-s) | simulate {:.3} s ({:.3} s after the warm-up; update {:.3} s, communicate {:.3} s, output {:.3} s)",
        max(|r| r.build_s), reports.iter().map(|r| r.build_cpu_s).sum::<f64>(), sim_s, rec_s, max(|r| r.update_s), max(|r| r.communicate_s), max(|r| r.io_s)
    );
    let cpu_s: f64 = reports.iter().map(|r| r.simulate_cpu_s).sum();
    say!("  CPU time          simulate {cpu_s:.3} CPU-s (all ranks and threads)");
    say!(
        "  real-time factor  {} (wall / biological time after the warm-up); {:.3e} synaptic events/s of wall time",
        if rec_bio > 0.0 {
            format!("{rtf:.3}")
        } else {
            "none".into()
        },
        events as f64 / sim_s.max(1e-9)
    );
    for line in hpc_spiking::run::memory_lines(all, conn_bytes, synapses) {
        say!("{line}");
    }
    let recv: Vec<u64> = reports.iter().map(|r| r.bytes_received).collect();
    let bio_all = (me.end_step - me.start_step) as f64 * p.dt / 1000.0;
    say!(
        "  exchange          {:?}: {:.0} bytes received per rank per biological second (max over ranks)",
        args.exchange,
        recv.iter().copied().max().unwrap_or(0) as f64 / bio_all.max(1e-9)
    );
    let summary = serde_json::json!({
        "params": p, "neurons": model.n, "synapses": synapses, "ranks": me.size,
        "threads": pool.current_num_threads(), "stats": stats,
        "build_s": max(|r| r.build_s), "build_cpu_s": reports.iter().map(|r| r.build_cpu_s).sum::<f64>(), "simulate_s": sim_s, "simulate_recorded_s": rec_s,
        "simulate_cpu_s": cpu_s, "real_time_factor": rtf, "events": events,
        "exchange": format!("{:?}", args.exchange).to_lowercase(),
        "bytes_received_per_rank": recv,
        "peak_rss_bytes": all.iter().map(|g| g.peak_rss).collect::<Vec<_>>(),
        "bytes_per_synapse": conn_bytes as f64 / synapses.max(1) as f64,
        "completed": me.completed, "ranks_report": reports,
    });
    dir.write_atomic("summary.json", &serde_json::to_vec_pretty(&summary)?)?;
    let end_ms = me.end_step as f64 * p.dt;
    let file = me.spike_file.as_deref();
    if let Some(line) = args
        .run
        .spike_file_line(&args.out, file, me.completed, end_ms)
    {
        say!("{line}");
    }
    if let (Some(f), false) = (&me.spike_file, args.no_plot) {
        hpc_spiking::run::record_figures(
            dir,
            hpc_spike_report::plot::Plot::ALL.map(|p| p.file_stem()),
        )?;
        let r = microcircuit::plot::report(f, model, &summary, &args.out)?;
        say!(
            "  figures: {} (raster, firing-rates, cv-isi, overview; .png and .svg)",
            hpc_io::message::path(&args.out)
        );
        say!("  report: {}", hpc_io::message::path(&r));
    }
    let _ = NPOP;
    Ok(())
}

fn main() {
    // The `proxy` engine re-executes this program as the node's progress process.
    hpc_spiking::run::run_program::<Args>("microcircuit", run);
}
