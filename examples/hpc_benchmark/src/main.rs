//! `hpc_benchmark`: NEST's weak-scaling benchmark with STDP on hpc-rs.
//!
//! ```text
//! hpc_benchmark --scale 0.1 --t-presim 50 --t-sim 250           # one rank
//! hpc run -n 2 -- hpc_benchmark --scale 0.1 --threads 1          # two ranks
//! ```

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use clap::Parser;
use hpc_benchmark::figure::{self, WEIGHTS_SVG};
use hpc_benchmark::network::{expected_rank_trace_bytes, expected_shard_bytes};
use hpc_benchmark::params::{Model, Params, CE, CI};
use hpc_benchmark::sim::{RankReport, Simulation, WeightStats};
use hpc_io::say_or_return as say;
use hpc_spiking::args::RunArgs;
use hpc_spiking::exchange::AnyExchange;
use hpc_spiking::plasticity::StdpRow;
use hpc_spiking::Block;

#[derive(Parser, Debug)]
// A negative number is a flag's value, refused by the flag's own check
// ("dt must be > 0, got -1"), not clap's "unexpected argument '-1' found",
// which named the value and not the flag.
#[command(
    name = "hpc_benchmark",
    version,
    allow_negative_numbers = true,
    about = "NEST's hpc_benchmark (balanced network, STDP on E->E), distributed with hpc-rs"
)]
struct Args {
    /// Network size: scale x 11,250 neurons (in-degree 11,250 whatever the scale).
    #[arg(long, default_value_t = 1.0, allow_hyphen_values = true)]
    scale: f64,
    /// Warm-up (ms) before the recorded time.
    #[arg(long, default_value_t = 50.0, allow_hyphen_values = true)]
    t_presim: f64,
    /// Recorded time (ms) after the warm-up.
    #[arg(long, default_value_t = 250.0, allow_hyphen_values = true)]
    t_sim: f64,
    /// Seed of all random streams.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// STDP time constant of potentiation (ms).
    #[arg(long, default_value_t = 15.0, allow_hyphen_values = true)]
    tau_plus: f64,
    /// STDP time constant of depression, the neurons' tau_minus (ms).
    #[arg(long, default_value_t = 30.0, allow_hyphen_values = true)]
    tau_minus: f64,
    /// STDP step size (0: plasticity off).
    #[arg(long, default_value_t = 0.1, allow_hyphen_values = true)]
    lambda: f64,
    /// STDP asymmetry (depression / potentiation).
    #[arg(long, default_value_t = 0.0513, allow_hyphen_values = true)]
    alpha: f64,
    /// STDP weight dependence exponent of potentiation.
    #[arg(long, default_value_t = 0.4, allow_hyphen_values = true)]
    mu: f64,
    /// Output directory (spikes.spk, summary.json, weights.svg).
    #[arg(long, default_value = "hpc-benchmark-out")]
    out: PathBuf,
    /// Start even when the estimated memory exceeds what the node has available.
    #[arg(long)]
    allow_oversize: bool,
    /// Do not draw the weight histogram (weights.svg).
    #[arg(long)]
    no_plot: bool,
    #[command(flatten)]
    run: RunArgs,
}

fn params_of(a: &Args) -> Params {
    let mut p = Params {
        scale: a.scale,
        t_presim: a.t_presim,
        t_sim: a.t_sim,
        seed: a.seed,
        tau_minus: a.tau_minus,
        ..Params::default()
    };
    p.stdp.tau_plus = a.tau_plus;
    p.stdp.lambda = a.lambda;
    p.stdp.alpha = a.alpha;
    p.stdp.mu = a.mu;
    p
}

/// Bytes a rank of `size` (`threads` threads) will hold: synapses, plastic
/// state, neurons and buffers, as [`Simulation::new`] allocates them (targets
/// as `u16` steps: 10 bytes an E->E synapse, 2 a static one; see
/// `hpc_benchmark::network`), for the mean rank.
fn estimate(model: &Model, size: usize, threads: usize) -> u64 {
    let per_rank = |n: f64| n / size as f64;
    let (ne, ni, n) = (model.ne as f64, model.ni as f64, model.n as f64);
    let stdp = per_rank(ne) * CE as f64 * StdpRow::BYTES_PER_SYNAPSE as f64;
    let stat = (per_rank(ne) * CI as f64 + per_rank(ni) * (CE + CI) as f64) * 2.0;
    // Per shard: the rows' and lists' offsets for the sources expected to
    // have a target there, and their indexes; per rank, the traces of the
    // sources with a row on one of its shards or a neuron on it; the mean
    // over every rank.
    let rows = (0..size as u32)
        .map(|r| {
            let b = Block::part(model.n, size as u32, r);
            let shards = b.shards(threads);
            expected_rank_trace_bytes(model, b.first, b.len)
                + (0..shards)
                    .map(|t| {
                        let s = Block::part(b.len, shards, t);
                        expected_shard_bytes(model, b.first + s.first, s.len)
                    })
                    .sum::<f64>()
        })
        .sum::<f64>()
        / size as f64;
    let slots = (model.delay_steps as f64 + 1.0).log2().ceil().exp2();
    let neurons = per_rank(n) * (56.0 + 96.0 + 8.0 + slots * 16.0 + 4.0 * 24.0);
    (stdp + stat + rows + neurons) as u64
}

fn check_memory(
    args: &Args,
    model: &Model,
    need: u64,
    ranks_here: usize,
    available: Option<(u64, String)>,
) -> Result<()> {
    let Some((avail, source)) = available else {
        return Ok(());
    };
    let total = need.saturating_mul(ranks_here as u64);
    if total > avail && !args.allow_oversize {
        anyhow::bail!(
            "--scale {} needs an estimated {} per rank ({} for the {ranks_here} rank(s) on this node, \
             {} synapses) but {} is available ({source}); give a smaller --scale, more nodes, or \
             --allow-oversize",
            args.scale,
            hpc_spiking::memory::human(need),
            hpc_spiking::memory::human(total),
            model.n as u64 * (CE + CI) as u64,
            hpc_spiking::memory::human(avail)
        );
    }
    Ok(())
}

fn run(args: Args) -> Result<()> {
    let ra = &args.run;
    ra.check()?;
    let model = Model::new(params_of(&args))?;
    let dt = model.params.dt;
    let times = ra.times(dt, model.steps)?;
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

        }),
    )?;
    // Refused before any of the network is allocated.
    let need = estimate(&model, size, ra.threads());
    let available = hpc_spiking::memory::available(ctx.environment.resources.memory_limit_bytes);
    check_memory(&args, &model, need, world.local_size(), available)?;
    let pool = hpc_spiking::run::thread_pool(&world, ra.threads(), !ra.no_pin, "hpc_benchmark")?;
    // SIGTERM, SIGINT and SIGHUP end the run cleanly at every moment of it: in
    // the loop after the interval in progress, elsewhere at once, with its
    // run.json marked incomplete naming what was being done (hpc_spiking::stop).
    let on_signal = hpc_spiking::stop::OnSignal::around(true, "hpc_benchmark")?;
    let mut out_dir = hpc_spiking::run::own_output_dir(
        &world,
        &args.out,
        "hpc_benchmark",
        serde_json::json!({ "seed": model.params.seed, "ranks": size, "scale": model.params.scale }),
        output_names(),
    )?;
    let opts = ra.options(&world, &args.out, times, false, |d| {
        Ok(hpc_benchmark::checkpoint::open(d)?.dir().to_path_buf())
    })?;
    let _checkpoint_lock = opts.claim_checkpoint_dir(&world, &model.params, out_dir.as_ref())?;
    on_signal.doing("while building the network");
    let mut sim = Simulation::new(&model, (rank, size), &pool, &opts)?;
    opts.start_output_dir(out_dir.as_mut())?;
    let show = ra.shows_progress(rank);
    let report = {
        let mut ex = AnyExchange::new(ra.engine, world.clone())?;
        sim.run(&pool, &mut ex, &opts, |step, steps| {
            if show {
                hpc_spiking::run::draw_progress(step, steps, dt, "");
            }
        })
    };
    if show {
        let _ = writeln!(std::io::stderr());
    }
    // A run a signal stopped says so in its run.json (incomplete, the signal named).
    let report = report.map_err(|e| hpc_spiking::stop::mark_stopped(out_dir.take(), e, dt))?;
    on_signal.doing("while writing the summary");
    let end = (report.completed, report.end_step, dt);
    hpc_spiking::run::hand_off(&world, &report, out_dir, end, |dir, all| {
        summary(&args, dir, &model, &report, all, need)
    })
}

/// The files this run writes into its output directory.
fn output_names() -> Vec<String> {
    let mut names = hpc_spiking::run::output_names([]);
    names.push(WEIGHTS_SVG.to_string());
    names
}

fn summary(
    args: &Args,
    dir: &mut hpc_io::rundir::RunDir,
    model: &Model,
    me: &RankReport,
    all: &[hpc_spiking::run::Gathered],
    estimate: u64,
) -> Result<()> {
    let reports: Vec<RankReport> = hpc_spiking::run::reports(all)?;
    let p = &model.params;
    let mut weights = WeightStats::default();
    reports.iter().for_each(|r| weights.merge(&r.weights));
    let (mean, sd) = weights.mean_sd();
    let (p5, p95) = (weights.quantile(0.05), weights.quantile(0.95));
    let synapses: u64 = reports
        .iter()
        .map(|r| r.stdp_synapses + r.static_synapses)
        .sum();
    let syn_bytes: u64 = reports.iter().map(|r| r.synapse_bytes).sum();
    let ring_bytes: u64 = reports.iter().map(|r| r.ring_bytes).sum();
    let max = |f: fn(&RankReport) -> f64| reports.iter().map(f).fold(0.0, f64::max);
    let sim_s = max(|r| r.simulate_s);
    let bio_s = (me.end_step - me.start_step) as f64 * p.dt / 1000.0;
    let (after, total) = me.recorded.unwrap_or((0, 0));
    let recorded_s = (me.end_step.saturating_sub(model.presim_steps)) as f64 * p.dt / 1000.0;
    // None for a run stopped before its warm-up ended: no time was recorded,
    // and 0 Hz (written before) said the network was silent.
    let rate = (recorded_s > 0.0).then(|| after as f64 / (model.n_rec as f64 * recorded_s));
    let cpu_s: f64 = reports.iter().map(|r| r.simulate_cpu_s).sum();
    let rtf = if bio_s > 0.0 { sim_s / bio_s } else { 0.0 };
    say!(
        "hpc_benchmark, scale {}: {} neurons ({} E, {} I), {} synapses ({} E->E with STDP), {} rank(s) x {} thread(s)",
        p.scale, model.n, model.ne, model.ni, synapses, weights.count, me.size, reports[0].threads
    );
    say!(
        "simulated {:.1} ms (steps {}..{}, dt {} ms, warm-up {} ms), JE {:.4} pA, drive {:.1} Hz",
        bio_s * 1000.0,
        me.start_step,
        me.end_step,
        p.dt,
        p.t_presim,
        model.je,
        model.p_rate
    );
    match rate {
        Some(rate) => say!("  mean rate         {rate:.2} Hz ({} recorded E neurons after the warm-up; {total} spikes recorded)", model.n_rec),
        None => say!(
            "  mean rate         none: the run stopped at {:.1} ms, before its warm-up of {} ms ended \
             ({total} spikes recorded in it)",
            me.end_step as f64 * p.dt,
            hpc_io::message::num(p.t_presim)
        ),
    }
    say!(
        "  E->E weights      mean {mean:.4} pA, SD {sd:.4} pA, 5% {p5:.2} pA, 95% {p95:.2} pA (min {:.4}, max {:.4}); digest {:016x}",
        weights.min, weights.max, weights.digest
    );
    say!(
        "  wall time         build {:.3} s | simulate {sim_s:.3} s (communicate/wait {:.3} s)",
        max(|r| r.build_s),
        max(|r| r.communicate_s)
    );
    say!("  CPU time          simulate {cpu_s:.3} CPU-s (all ranks and threads)");
    say!("  real-time factor  {rtf:.3} (wall / biological time)");
    let per_rank: Vec<String> = all
        .iter()
        .map(|g| hpc_spiking::memory::human(g.peak_rss))
        .collect();
    say!(
        "  peak memory       per rank {} (estimate {})",
        per_rank.join(", "),
        hpc_spiking::memory::human(estimate)
    );
    say!(
        "  bytes/synapse     {:.3} (synapses with their plastic state; ring buffers {} more)",
        syn_bytes as f64 / synapses.max(1) as f64,
        hpc_spiking::memory::human(ring_bytes)
    );
    // Every rank receives every spike code (4 bytes) of the allgather.
    let recv: Vec<u64> = reports.iter().map(|r| r.spikes_exchanged * 4).collect();
    say!(
        "  exchange          {:.0} bytes received per rank per biological second (max over ranks)",
        recv.iter().max().copied().unwrap_or(0) as f64 / bio_s.max(f64::MIN_POSITIVE)
    );
    let ranks_report: Vec<_> = reports
        .iter()
        .zip(all)
        .map(|(r, g)| {
            serde_json::json!({
                "rank": r.rank, "first": r.first, "neurons": r.neurons,
                "simulate_s": r.simulate_s, "communicate_s": r.communicate_s,
                "spikes_received": r.spikes_exchanged, "bytes_received": r.spikes_exchanged * 4,
                "synapse_bytes": r.synapse_bytes, "peak_rss_bytes": g.peak_rss,
            })
        })
        .collect();
    let bars = figure::histogram(&weights);
    let summary = serde_json::json!({
        "params": p, "neurons": model.n, "synapses": synapses, "stdp_synapses": weights.count,
        "ranks": me.size, "threads": reports[0].threads, "je_pa": model.je, "drive_hz": model.p_rate,
        "recorded_neurons": model.n_rec, "mean_rate_hz": rate, "recorded_spikes": total,
        "weights": {
            "mean_pa": mean, "sd_pa": sd, "p5_pa": p5, "p95_pa": p95, "min_pa": weights.min,
            "max_pa": weights.max, "digest": format!("{:016x}", weights.digest),
            "histogram": &bars,
        },
        "build_s": max(|r| r.build_s), "simulate_s": sim_s, "simulate_cpu_s": cpu_s,
        "communicate_s": max(|r| r.communicate_s), "real_time_factor": rtf,
        "simulate_s_per_bio_s": rtf,
        "bytes_per_synapse": syn_bytes as f64 / synapses.max(1) as f64,
        "synapse_bytes": syn_bytes, "ring_buffer_bytes": ring_bytes,
        "peak_rss_bytes": all.iter().map(|g| g.peak_rss).collect::<Vec<_>>(),
        "estimate_bytes_per_rank": estimate, "completed": me.completed,
        "interval_steps": model.delay_steps, "bytes_received_per_rank": recv,
        "ranks_report": ranks_report,
    });
    dir.write_atomic("summary.json", &serde_json::to_vec_pretty(&summary)?)?;
    if !args.no_plot {
        let title = format!(
            "E->E weights at {:.0} ms, hpc_benchmark scale {}, seed {}",
            me.end_step as f64 * p.dt,
            p.scale,
            p.seed
        );
        let subtitle = format!(
            "{} synapses: mean {mean:.3} pA, SD {sd:.3} pA, min {:.2}, max {:.2}",
            weights.count, weights.min, weights.max
        );
        let svg = figure::weights_svg(&bars, &title, &subtitle, model.je);
        dir.write_atomic(WEIGHTS_SVG, svg.as_bytes())?;
        say!(
            "  weight histogram  {}",
            hpc_io::message::path(&args.out.join(WEIGHTS_SVG))
        );
    }
    let end_ms = me.end_step as f64 * p.dt;
    let file = me.spike_file.as_deref();
    if let Some(line) = args
        .run
        .spike_file_line(&args.out, file, me.completed, end_ms)
    {
        say!("{line}");
    }
    Ok(())
}

fn main() {
    // The `proxy` engine re-executes this program as the node's progress process.
    hpc_spiking::run::run_program::<Args>("hpc_benchmark", run);
}
