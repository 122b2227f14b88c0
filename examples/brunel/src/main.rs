//! `brunel`: the Brunel (2000) balanced network on hpc-rs.
//!
//! ```text
//! brunel --preset nest --order 2500 --t-sim 1000           # one rank
//! hpc run -n 2 -- brunel --threads 1 --order 2500          # two ranks
//! ```
//! See the README for every flag, the spike file format and checkpointing.

use std::io::{IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, Result};
use brunel::params::{Model, Params, Preset};
use brunel::sim::{RankReport, Simulation};
use clap::Parser;
use hpc_io::say_or_return as say;
use hpc_spiking::args::RunArgs;
use hpc_spiking::exchange::AnyExchange;
use hpc_spiking::progress::ProgressLine;

#[derive(Parser, Debug)]
// A negative number is a flag's value, refused by the flag's own check
// ("dt must be > 0, got -1"), not clap's "unexpected argument '-1' found",
// which named the value and not the flag.
#[command(
    name = "brunel",
    version,
    allow_negative_numbers = true,
    about = "Brunel (2000) balanced network of LIF neurons, distributed with hpc-rs"
)]
struct Args {
    /// TOML parameter file (keys as in `brunel.toml`); flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Base parameter set: `paper` (V_reset 10 mV) or `nest` (brunel_delta_nest.py, V_reset 0 mV).
    #[arg(long, value_enum)]
    preset: Option<Preset>,
    /// NE = 4*order, NI = order.
    #[arg(long)]
    order: Option<u32>,
    /// Excitatory in-degree (default 0.1*NE).
    #[arg(long)]
    ce: Option<u32>,
    /// Inhibitory in-degree (default 0.1*NI).
    #[arg(long)]
    ci: Option<u32>,
    /// Synaptic weight J (mV).
    #[arg(long)]
    j: Option<f64>,
    /// Relative inhibition g.
    #[arg(long)]
    g: Option<f64>,
    /// External drive relative to threshold.
    #[arg(long)]
    eta: Option<f64>,
    /// Synaptic delay (ms).
    #[arg(long)]
    delay: Option<f64>,
    /// Reset potential (mV).
    #[arg(long, allow_hyphen_values = true)]
    v_reset: Option<f64>,
    /// Refractory period (ms).
    #[arg(long)]
    t_ref: Option<f64>,
    /// Time step (ms).
    #[arg(long)]
    dt: Option<f64>,
    /// Simulated time (ms).
    #[arg(long)]
    t_sim: Option<f64>,
    /// Seed of all random streams.
    #[arg(long)]
    seed: Option<u64>,
    /// Exchange every delay (D steps) and wait before the next update, instead of
    /// every D/2 steps overlapped with the next update.
    #[arg(long)]
    no_overlap: bool,
    /// Output directory (spikes.spk, summary.json, report.html and the figures).
    #[arg(long, default_value = "brunel-out")]
    out: PathBuf,
    /// Do not draw the figures nor write report.html.
    #[arg(long)]
    no_plot: bool,
    /// NEST's statistics of the same network (the JSON line tools/nest_brunel.py
    /// prints), compared with this run in report.html (with --no-plot or
    /// --no-spikes, which write no report, it is only checked, with a warning).
    #[arg(long, value_name = "FILE")]
    reference: Option<PathBuf>,
    /// Run no faster than this multiple of real time (1.0: one simulated second per
    /// wall-clock second), for coupling to a live display or hardware in the loop, or
    /// to give an operator time to act during a demonstration. The spikes do not
    /// change; the reported real-time factor includes the waits.
    #[arg(long, value_name = "FACTOR")]
    pace: Option<f64>,
    /// Start even when the estimated memory exceeds what the node has available
    /// (the estimate is printed either way when it does).
    #[arg(long)]
    allow_oversize: bool,
    /// Write a Chrome/Perfetto trace of this rank's timeline (the update and
    /// exchange phases, the SDK's collectives; `FILE.rankR` per rank in a job of
    /// several). `hpc run --trace FILE` merges every rank's into one instead
    /// (not both: refused).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    #[command(flatten)]
    run: RunArgs,
}

fn params_of(args: &Args) -> Result<Params> {
    use hpc_spiking::args::{flag_file, read_flag_file};
    let mut p = match &args.config {
        Some(file) => {
            let text = read_flag_file("--config", file, hpc_io::read::MAX_CONFIG_BYTES)?;
            match args.preset {
                // An explicit --preset wins over the file's `preset` key as the
                // base of the values the file does not set.
                Some(preset) => text
                    .parse::<toml::Table>()
                    .map_err(|e| anyhow::anyhow!("{}", hpc_io::message::cut(&e.to_string())))
                    .context("parsing TOML")
                    .and_then(|mut table| {
                        table.remove("preset");
                        Params::from_toml_str(&toml::to_string(&table)?, preset)
                    }),
                None => Params::from_toml_str(&text, Preset::Paper),
            }
            .with_context(|| flag_file("--config", file))?
        }
        None => Params::preset(args.preset.unwrap_or(Preset::Paper)),
    };
    macro_rules! set {
        ($($f:ident),*) => { $( if let Some(v) = args.$f { p.$f = v; } )* };
    }
    set!(order, j, g, eta, delay, v_reset, t_ref, dt, t_sim, seed);
    if args.ce.is_some() {
        p.ce = args.ce;
    }
    if args.ci.is_some() {
        p.ci = args.ci;
    }
    Ok(p)
}

/// Where the parameters came from, for an error about their values when a
/// file set them: `--config FILE`, with the flags that override it
/// (`--config FILE with --dt, --seed`); `None` without `--config` (the
/// message names the parameter, as its flag is named). A value of the file
/// that the model refused was named without the file (`dt must be > 0`).
fn params_source(args: &Args) -> Option<String> {
    let file = args.config.as_deref()?;
    Some(hpc_spiking::args::config_source(
        file,
        &[
            ("--preset", args.preset.is_some()),
            ("--order", args.order.is_some()),
            ("--ce", args.ce.is_some()),
            ("--ci", args.ci.is_some()),
            ("--j", args.j.is_some()),
            ("--g", args.g.is_some()),
            ("--eta", args.eta.is_some()),
            ("--delay", args.delay.is_some()),
            ("--v-reset", args.v_reset.is_some()),
            ("--t-ref", args.t_ref.is_some()),
            ("--dt", args.dt.is_some()),
            ("--t-sim", args.t_sim.is_some()),
            ("--seed", args.seed.is_some()),
        ],
    ))
}

fn run(args: Args, on_signal: &hpc_spiking::stop::OnSignal) -> Result<()> {
    let ra = &args.run;
    ra.check()?;
    let params = params_of(&args)?;
    let model = match (Model::new(params), params_source(&args)) {
        (Err(e), Some(from)) => return Err(e.context(from)),
        (model, _) => model?,
    };
    if let Some(f) = args.pace {
        brunel::check_pace(f, &model)?;
    }
    // Times in steps, checked against the run's length before anything starts.
    let dt = model.params.dt;
    let times = ra.times(dt, model.steps)?;
    // Checked before the run, so a wrong file costs no simulation.
    if args.reference.is_some() && (args.no_plot || ra.no_spikes) {
        tracing::warn!(
            "--reference is compared with the run in report.html, which {} leaves out: \
             it is only checked",
            if args.no_plot {
                "--no-plot"
            } else {
                "--no-spikes"
            }
        );
    }
    let reference = args
        .reference
        .as_deref()
        .map(|f| brunel::plot::Reference::read(f, &model))
        .transpose()?;
    // Plans (and, unless --no-pin, binds) for this run's threads per rank.
    let ctx = hpc_rs::init_with(hpc_rs::Options {
        threads: Some(ra.threads().max(1)),
        bind: Some(!ra.no_pin),
        ..Default::default()
    })?;
    let world = Arc::new(ctx.world);
    let (rank, size) = (world.rank(), world.size());
    // Every rank given the same model and options, checked before any of it
    // is built (a rank given another seed built another network silently).
    hpc_spiking::run::same_on_every_rank(
        &world,
        &serde_json::json!({
            "params": model.params, "out": hpc_spiking::run::path_setting(&args.out), "run": ra.shared(),
            "no_overlap": args.no_overlap, "pace": args.pace,
        }),
    )?;
    // Refuse a network that cannot fit before allocating any of it.
    let estimate = brunel::memory::estimate(
        &model,
        size,
        world.local_size(),
        ra.threads(),
        ra.checkpoint_every.is_some(),
    );
    let available = hpc_spiking::memory::available(ctx.environment.resources.memory_limit_bytes);
    match brunel::memory::check(&model, &estimate, available) {
        Ok(()) => {}
        Err(e) if args.allow_oversize => {
            if rank == 0 {
                let _ = writeln!(
                    std::io::stderr(),
                    "brunel: warning: {} (going on: --allow-oversize)",
                    hpc_io::message::chain(e.as_ref())
                );
            }
        }
        Err(e) => return Err(e),
    }
    let pool = hpc_spiking::run::thread_pool(&world, ra.threads(), !ra.no_pin, "brunel")?;
    // Rank 0 writes the shared files: it owns the directory, and a second run on it
    // fails here, before any of its files is touched. The earlier run's files are
    // removed only once the input (a checkpoint to resume from) is checked.
    let mut out_dir = hpc_spiking::run::own_output_dir(
        &world,
        &args.out,
        "brunel",
        serde_json::json!({ "seed": model.params.seed, "ranks": size }),
        hpc_spiking::run::output_names(hpc_spike_report::plot::Plot::ALL.map(|p| p.file_stem())),
    )?;
    let opts = ra.options(&world, &args.out, times, !args.no_overlap, |d| {
        Ok(brunel::checkpoint::open(d)?.dir().to_path_buf())
    })?;
    // The checkpoint directory is this run's while it runs (held to the end of
    // `run`).
    // Another model's checkpoints there are named as a restart's check names
    // them (the in-degrees as the network uses them).
    let mine = serde_json::to_value(&model.params)?;
    let differences =
        |theirs: &serde_json::Value| match serde_json::from_value::<Params>(theirs.clone()) {
            Ok(theirs) => brunel::checkpoint::model_differences(&theirs, &model.params),
            Err(_) => hpc_spiking::run::params_diff(theirs, &mine, &["t_sim"]),
        };
    let _checkpoint_lock = opts.claim_checkpoint_dir_with(&world, differences, out_dir.as_ref())?;
    on_signal.doing("while building the network");
    let mut sim = Simulation::new(&model, rank, size, &pool, &opts)?;
    opts.start_output_dir(out_dir.as_mut())?;
    let mut line = ProgressLine::new(ra.shows_progress(rank), dt, 0, args.pace);
    let report = {
        let mut ex = AnyExchange::new(ra.engine, world.clone())?;
        line.drive(|cb| sim.run(&pool, &mut ex, &opts, cb))
    };
    // A run a signal stopped says so in its run.json (incomplete, the signal named).
    let report = report.map_err(|e| hpc_spiking::stop::mark_stopped(out_dir.take(), e, dt))?;
    on_signal.doing("while writing the summary");
    let end = (report.completed, report.end_step, dt);
    hpc_spiking::run::hand_off(&world, &report, out_dir, end, |dir, all| {
        summary(&args, dir, &model, &report, all, &pool, reference.as_ref())
    })
}

fn summary(
    args: &Args,
    dir: &mut hpc_io::rundir::RunDir,
    model: &Model,
    me: &RankReport,
    all: &[hpc_spiking::run::Gathered],
    pool: &rayon::ThreadPool,
    reference: Option<&brunel::plot::Reference>,
) -> Result<()> {
    let reports: Vec<RankReport> = hpc_spiking::run::reports(all)?;
    let p = &model.params;
    let stats = me.stats.clone().context("rank 0 has no statistics")?;
    let synapses: u64 = reports.iter().map(|r| r.synapses).sum();
    let conn_bytes: u64 = reports.iter().map(|r| r.connectivity_bytes).sum();
    let max = |f: fn(&RankReport) -> f64| reports.iter().map(f).fold(0.0, f64::max);
    let sim_s = max(|r| r.simulate_s);
    let bio_s = (me.end_step - me.start_step) as f64 * p.dt / 1000.0;
    say!(
        "Brunel network, order {}: {} neurons ({} E, {} I), {} synapses (CE {}, CI {}), {} rank(s) x {} thread(s)",
        p.order, model.n, model.ne, model.ni, synapses, model.ce, model.ci, me.size, pool.current_num_threads()
    );
    say!(
        "simulated {:.1} ms (steps {}..{}, dt {} ms, delay {} steps), exchange every {} steps{}",
        bio_s * 1000.0,
        me.start_step,
        me.end_step,
        hpc_io::message::num(p.dt),
        model.delay_steps,
        me.interval_steps,
        if args.no_overlap {
            ""
        } else {
            ", overlapped with the next update"
        }
    );
    say!("  spikes            {}", stats.spikes);
    say!("  mean rate         {:.2} Hz", stats.rate_hz);
    say!(
        "  CV ISI            {:.3} (mean over {} neurons with >= 2 ISIs)",
        stats.cv_isi,
        stats.cv_neurons
    );
    say!(
        "  wall time         build {:.3} s | simulate {:.3} s (update {:.3} s, communicate/wait {:.3} s, output {:.3} s)",
        max(|r| r.build_s), sim_s, max(|r| r.update_s), max(|r| r.communicate_s), max(|r| r.io_s)
    );
    let cpu_s: f64 = reports.iter().map(|r| r.simulate_cpu_s).sum();
    say!("  CPU time          simulate {cpu_s:.3} CPU-s (all ranks and threads)");
    if bio_s > 0.0 {
        say!(
            "  real-time factor  {:.3} (wall / biological time); {:.0} spikes/s, {:.3e} synaptic events/s",
            sim_s / bio_s,
            me.spikes_exchanged as f64 / sim_s.max(1e-9),
            (me.spikes_exchanged as f64 * (model.ce + model.ci) as f64) / sim_s.max(1e-9)
        );
    }
    for line in hpc_spiking::run::memory_lines(all, conn_bytes, synapses) {
        say!("{line}");
    }
    let summary = serde_json::json!({
        "params": p, "neurons": model.n, "synapses": synapses, "ranks": me.size,
        "threads": pool.current_num_threads(), "stats": stats,
        "build_s": max(|r| r.build_s), "simulate_s": sim_s, "simulate_cpu_s": cpu_s,
        "update_s": max(|r| r.update_s), "communicate_s": max(|r| r.communicate_s),
        "real_time_factor": if bio_s > 0.0 { sim_s / bio_s } else { 0.0 },
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
        draw(f, model, &summary, reference, dir)?;
    }
    Ok(())
}

fn draw(
    spikes: &Path,
    model: &Model,
    summary: &serde_json::Value,
    reference: Option<&brunel::plot::Reference>,
    dir: &mut hpc_io::rundir::RunDir,
) -> Result<()> {
    hpc_spiking::run::record_figures(
        dir,
        hpc_spike_report::plot::Plot::ALL.map(|p| p.file_stem()),
    )?;
    let out = dir.path();
    let report = brunel::plot::report(spikes, model, summary, reference, out)?;
    say!(
        "  figures: {} (raster, firing-rates, cv-isi, overview; .png and .svg)",
        hpc_io::message::path(out)
    );
    say!("  report: {}", hpc_io::message::path(&report));
    Ok(())
}

fn main() {
    // The `proxy` engine re-executes this program as the node's progress process.
    if hpc_spiking::run::serve_proxy("brunel") {
        return;
    }
    let args = hpc_spiking::run::parse_args::<Args>("brunel");
    use tracing_subscriber::prelude::*;
    let (filter, log_problem) = hpc_spiking::run::log_filter();
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(hpc_trace::LogWriter::stderr())
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(filter);
    // `--trace FILE`: this rank's timeline, recorded into a directory beside FILE
    // and merged into it at the end; without it, `HPC_TRACE` (`hpc run --trace`).
    let own_trace = args.trace.as_deref().map(|t| trace::start(t, &args));
    let layer = match own_trace {
        Some(Ok((_, ref l))) => Ok(Some(l.clone())),
        Some(Err(ref e)) => Err(e.to_string()),
        None => hpc_trace::layer_from_env().map_err(|e| e.to_string()),
    };
    let layer = match layer {
        Ok(l) => l,
        Err(e) => {
            hpc_io::message::last_words("brunel", &e);
            std::process::exit(1);
        }
    };
    tracing_subscriber::registry()
        .with(fmt)
        .with(layer.map(|l| l.with_filter(hpc_trace::default_filter())))
        .init();
    if let Some(p) = log_problem {
        tracing::warn!("{p}");
    }
    // SIGTERM, SIGINT and SIGHUP end the run cleanly at every moment of it: in
    // the loop after the interval in progress, elsewhere at once, with its
    // run.json marked incomplete naming what was being done (hpc_spiking::stop),
    // and the trace's temporaries removed; held to the end of the trace's
    // write, which a signal used to end by its default action, leaving them.
    let on_signal = match hpc_spiking::stop::OnSignal::around(true, "brunel") {
        Ok(o) => o,
        Err(e) => {
            hpc_io::message::last_words("brunel", &format!("cannot handle signals: {e}"));
            std::process::exit(1);
        }
    };
    let result = run(args, &on_signal);
    let traced = match own_trace {
        Some(Ok((t, _))) => {
            on_signal.doing("while writing the trace");
            t.finish()
        }
        _ => Ok(()),
    };
    drop(on_signal);
    let mut failed = false;
    if let Err(e) = result {
        // A failed write of the message (stderr on a full device) changes nothing:
        // the status still says the run failed.
        hpc_io::message::last_words("brunel", &hpc_io::message::chain(e.as_ref()));
        failed = true;
    }
    if let Err(e) = traced {
        hpc_io::message::last_words("brunel", &format!("{e} (the trace was not written)"));
        failed = true;
    }
    if failed {
        // A run a signal stopped ends by that signal (143 for SIGTERM in a shell).
        if let Some(signal) = hpc_spiking::stop::received() {
            hpc_spiking::stop::end_by(signal);
        }
        std::process::exit(1);
    }
}

/// `--trace FILE`: this rank's timeline (hpc-trace), written whole to FILE at the end.
mod trace {
    use std::path::{Path, PathBuf};

    /// A trace being recorded for `--trace`.
    pub struct Trace {
        /// The recording's directory, beside the final name.
        dir: PathBuf,
        /// The final name (`FILE`, or `FILE.rankR` in a job of several ranks).
        path: PathBuf,
        /// The final name claimed for this run (a second run given it is refused).
        _claim: hpc_io::rundir::FileClaim,
    }

    /// Refuses a trace at the name of a file the run reads (`--config`,
    /// `--reference`) or writes into its output directory (`spikes.spk`,
    /// `run.json`, ...): the trace, written at the end, replaced it (the spike
    /// file of a run that ended with status 0, the next run's manifest).
    fn check_not_the_runs(path: &Path, args: &super::Args) -> anyhow::Result<()> {
        let same_file = |other: &Path| match (std::fs::metadata(path), std::fs::metadata(other)) {
            (Ok(a), Ok(b)) => {
                use std::os::unix::fs::MetadataExt as _;
                a.dev() == b.dev() && a.ino() == b.ino()
            }
            _ => false,
        };
        for (flag, input) in [("--config", &args.config), ("--reference", &args.reference)] {
            if input.as_deref().is_some_and(same_file) {
                anyhow::bail!(
                    "--trace {} is the file of {flag}: choose another name for the trace",
                    hpc_io::message::path(path)
                );
            }
        }
        // Inside the checkpoints the run resumes from or writes (the trace replaced
        // the manifest of the checkpoint it resumed from).
        let within = |dir: &Path| {
            let parent = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            match (std::fs::canonicalize(parent), std::fs::canonicalize(dir)) {
                (Ok(p), Ok(d)) => p.starts_with(d),
                _ => false,
            }
        };
        let checkpoints = args.run.checkpoint_every.map(|_| {
            args.run
                .checkpoint_dir
                .clone()
                .unwrap_or_else(|| args.out.join("checkpoints"))
        });
        // The checkpoint directory itself, made by the run after this check (the
        // default OUT/checkpoints, or a --checkpoint-dir not made yet): the trace
        // could not replace it at the end, after all the run's work.
        let spelled = |p: &Path| {
            let parent = match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            Some(std::fs::canonicalize(parent).ok()?.join(p.file_name()?))
        };
        let itself =
            |dir: &Path| path == dir || spelled(path).is_some_and(|p| Some(p) == spelled(dir));
        for (flag, dir) in [
            ("--restart", args.run.restart.as_deref()),
            ("--checkpoint-dir", checkpoints.as_deref()),
        ] {
            if dir.is_some_and(|d| within(d) || itself(d)) {
                anyhow::bail!(
                    "--trace {} lies in the checkpoints of {flag}: choose another name for the trace",
                    hpc_io::message::path(path)
                );
            }
        }
        if itself(&args.out) {
            anyhow::bail!(
                "--trace {} is the output directory --out: choose another name for the trace",
                hpc_io::message::path(path)
            );
        }
        let outputs = hpc_spiking::run::output_names(
            hpc_spike_report::plot::Plot::ALL.map(|p| p.file_stem()),
        );
        if hpc_io::rundir::is_run_file(&args.out, &outputs, path) {
            anyhow::bail!(
                "--trace {} is the name of one of the files the run writes into --out {}: \
                 choose another name for the trace",
                hpc_io::message::path(path),
                hpc_io::message::path(&args.out)
            );
        }
        Ok(())
    }

    /// Checks `--trace FILE` and starts recording beside it.
    pub fn start(
        path: &Path,
        args: &super::Args,
    ) -> anyhow::Result<(Trace, hpc_trace::TraceLayer)> {
        // `hpc run --trace F` (HPC_TRACE) asks for the same timeline: the flag
        // took it, and `hpc run` said that no rank recorded one, status 125.
        if let Some(v) = std::env::var_os(hpc_runtime::env::TRACE) {
            anyhow::bail!(
                "--trace {} and {}={} (which `hpc run --trace` sets) both ask for this rank's \
                 timeline: give one of them",
                hpc_io::message::path(path),
                hpc_runtime::env::TRACE,
                hpc_io::message::path(Path::new(&v))
            );
        }
        // One file per rank when there are several.
        let path = match std::env::var(hpc_runtime::env::RANK) {
            Ok(r) if std::env::var(hpc_runtime::env::SIZE).is_ok_and(|s| s != "1") => {
                let mut p = path.as_os_str().to_owned();
                p.push(format!(".rank{r}"));
                PathBuf::from(p)
            }
            _ => path.to_path_buf(),
        };
        check_not_the_runs(&path, args)?;
        // A device, a FIFO or a directory of that name is refused before the run,
        // not replaced after it.
        hpc_io::atomic::check_replaceable(&path).map_err(|e| anyhow::anyhow!("--trace: {e}"))?;
        let holder = format!("brunel, pid {}", std::process::id());
        let claim = hpc_io::rundir::FileClaim::take(&path, &holder)
            .map_err(|e| anyhow::anyhow!("--trace: {e}"))?;
        let mut dir = path.as_os_str().to_owned();
        dir.push(format!(".tmp-{}", std::process::id()));
        let dir = PathBuf::from(dir);
        let layer = hpc_trace::TraceLayer::create(&dir).map_err(|e| {
            anyhow::anyhow!(
                "cannot create the trace {}: {e}",
                hpc_io::message::path(&path)
            )
        })?;
        // A signal that ends the process at once (outside the run's loop, the
        // trace's own write included) leaves neither the recording folder nor
        // the claim, as `finish` does not (the trace is not written); the
        // temporary of the write is the process's own name.
        let (rec, lock, mut tmp) = (dir.clone(), claim.lock_path().to_path_buf(), path.clone());
        tmp.as_mut_os_string()
            .push(format!(".tmp-{}.json", std::process::id()));
        hpc_spiking::stop::before_end(move || {
            let _ = std::fs::remove_dir_all(&rec);
            let _ = std::fs::remove_file(&tmp);
            // The claim's lock while it names this run (once `finish` dropped
            // it, another run's may be there).
            if hpc_io::read::read_regular_to_string(&lock, 4096).is_ok_and(|h| h == holder) {
                let _ = std::fs::remove_file(&lock);
            }
        });
        Ok((
            Trace {
                dir,
                path,
                _claim: claim,
            },
            layer,
        ))
    }

    impl Trace {
        /// Finishes the recording and writes it to its final name: through a new
        /// temporary file renamed into place (never through a symbolic link, never
        /// over a device), the directory removed. A write that failed names the file.
        /// A name that has become a lock file a running process holds since the
        /// claim (a run that took the directory `--trace DIR/run.lock` lies in,
        /// after this run started) is not replaced: the next run took that
        /// directory while its run still ran.
        pub fn finish(self) -> anyhow::Result<()> {
            let failed = |e: &dyn std::fmt::Display| {
                anyhow::anyhow!("cannot write {}: {e}", hpc_io::message::path(&self.path))
            };
            let done = hpc_trace::finish()
                .map_err(|e| match e {
                    // Its words say the part file is left unfinished: this
                    // recording folder is removed below, and the trace is not
                    // written, which `main` says.
                    hpc_trace::Error::Write { error, .. } => failed(&error),
                    e => failed(&e),
                })
                .and_then(|_| match hpc_io::rundir::lock_holder(&self.path) {
                    Some(holder) => Err(failed(&format_args!(
                        "it has become a lock file that a running process holds since \
                         this run started ({}): not replaced",
                        hpc_io::message::cut(&holder)
                    ))),
                    None => Ok(()),
                })
                .and_then(|_| hpc_trace::merge::merge_dir(&self.dir).map_err(|e| failed(&e)))
                .and_then(|m| {
                    let mut tmp = self.path.as_os_str().to_owned();
                    tmp.push(format!(".tmp-{}.json", std::process::id()));
                    hpc_io::atomic::write(&self.path, Path::new(&tmp), &m.to_json())
                        .map_err(|e| failed(&e))
                });
            let _ = std::fs::remove_dir_all(&self.dir);
            done
        }
    }
}
