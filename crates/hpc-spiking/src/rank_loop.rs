//! The loop of a rank that every network with an overlapped exchange shares
//! ([`run_intervals`]): intervals of updates between exchanges ([`Intervals`]),
//! the exchange of an interval overlapped with the next interval's update, the
//! spikes received on their way to delivery and to rank 0's statistics and spike
//! file ([`Intake`]), drained before every checkpoint and at the end, the
//! checkpoints, the progress and the clocks of the run.
//!
//! The network keeps what is its own ([`IntervalRank`]): its update and delivery
//! (monomorphised into the loop, so that they inline in the network's code as
//! before), what it does with the spikes it receives, and its checkpoint
//! payload. The brunel and microcircuit examples run on it; a network of your own
//! with the same scheme of exchange can too (hence public).

use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;

use crate::alltoallv::Exchange;
use crate::intake::{Intake, Intervals, Record};
use crate::progress::Progress;
use crate::run::{cpu_seconds, RunOptions};

/// A rank of a network as [`run_intervals`] steps it.
pub trait IntervalRank {
    /// Rank 0's statistics of the spikes ([`Intake`]'s).
    type Record: Record;

    /// `(rank, ranks)` of this rank.
    fn rank_size(&self) -> (usize, usize);

    /// Steps done.
    fn step(&self) -> u64;

    /// Sets the steps done (the loop advances them by an interval).
    fn set_step(&mut self, step: u64);

    /// The run's shape: the shortest delay in steps (the exchange interval is
    /// derived from it, [`Intervals::new`]), the steps of the whole run, and the
    /// end of a warm-up (`None`: none), at which an interval is cut and the
    /// real-time factor starts.
    fn shape(&self) -> (u32, u64, Option<u64>);

    /// The intake of this rank for a run with `opts` from the current step
    /// (such as [`Intake::open`]).
    fn intake(&self, opts: &RunOptions) -> Result<Intake<Self::Record>>;

    /// Delivers `codes` (spikes of the interval from step `base`; none when
    /// nothing waits) and updates steps `step0..step0 + m`; called on this
    /// thread, while the previous interval's exchange is in flight.
    fn update(&mut self, codes: &[u32], base: u64, step0: u64, m: u32) -> Result<()>;

    /// After an [`update`](Self::update) that delivered `codes` (from `base`):
    /// what the network keeps of them (nothing, by default).
    fn delivered(&mut self, codes: &[u32], base: u64) {
        let _ = (codes, base);
    }

    /// Delivers `codes` (spikes of the interval from `base`) at once, with no
    /// update: the spikes received and not yet delivered before a checkpoint or
    /// the end of the run.
    fn deliver_now(&mut self, codes: &[u32], base: u64);

    /// Appends the spike codes of this rank's last update to `send`.
    fn spikes(&self, send: &mut Vec<u32>);

    /// Takes the spikes of the exchange of the interval of `m` steps from
    /// `base`, landed in `intake.incoming` ([`Intake::receive`], and what else
    /// the network adds).
    fn receive(&self, intake: &mut Intake<Self::Record>, base: u64, m: u32) -> Result<()>;

    /// This rank's checkpoint payload at the current step (no spike pending).
    fn checkpoint(&self) -> Vec<u8>;
}

/// The clocks of a run: its start (and the end of its warm-up, once reached),
/// the CPU seconds of the process at its start, and the seconds updating and
/// exchanging (waits included).
#[derive(Clone, Copy, Debug)]
pub struct Clocks {
    /// When the loop started.
    pub t0: Instant,
    /// When the warm-up ended (at the start without one; `None` before its end).
    pub t_rec: Option<Instant>,
    /// CPU seconds of the process when the loop started.
    pub cpu0: f64,
    /// Seconds delivering and updating.
    pub update_s: f64,
    /// Seconds exchanging and waiting for the exchange.
    pub comm_s: f64,
}

impl Clocks {
    /// The clocks of a loop starting now at `step`, its warm-up ending at
    /// `presim` steps.
    pub fn start(step: u64, presim: Option<u64>) -> Clocks {
        let t0 = Instant::now();
        Clocks {
            t0,
            t_rec: (step >= presim.unwrap_or(0)).then_some(t0),
            cpu0: cpu_seconds(),
            update_s: 0.0,
            comm_s: 0.0,
        }
    }

    /// Seconds since the loop started.
    pub fn simulate_s(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// Seconds since the warm-up ended (0 before its end).
    pub fn recorded_s(&self) -> f64 {
        self.t_rec.map_or(0.0, |t| t.elapsed().as_secs_f64())
    }

    /// CPU seconds of the process since the loop started.
    pub fn cpu_s(&self) -> f64 {
        cpu_seconds() - self.cpu0
    }
}

/// What [`run_intervals`] leaves for the rank's report.
pub struct Ran<R> {
    /// The intake, to [`finish`](Intake::finish).
    pub intake: Intake<R>,
    /// The run's clocks.
    pub clocks: Clocks,
    /// Steps per exchange interval.
    pub interval: u32,
    /// The step the run started from.
    pub start_step: u64,
}

/// What every rank's report holds after [`run_intervals`], whatever its
/// network: the network's own report takes it in with `#[serde(flatten)]` (its
/// fields then stand beside the network's in the JSON of every rank's report).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct RankRun {
    /// This rank.
    pub rank: usize,
    /// Number of ranks.
    pub size: usize,
    /// Threads (shards) of this rank.
    pub threads: usize,
    /// The rank's first neuron (global id).
    pub first: u32,
    /// Number of neurons of this rank.
    pub neurons: u32,
    /// Steps per exchange interval.
    pub interval_steps: u32,
    /// Step the run started from.
    pub start_step: u64,
    /// Step the run reached.
    pub end_step: u64,
    /// Whether the run reached its end (false when stopped early).
    pub completed: bool,
    /// Seconds building the network (and reading a checkpoint).
    pub build_s: f64,
    /// Seconds in the simulation loop.
    pub simulate_s: f64,
    /// CPU seconds (user + system, all threads of the process) in the loop.
    pub simulate_cpu_s: f64,
    /// Seconds delivering and updating.
    pub update_s: f64,
    /// Seconds starting exchanges and waiting for them to finish.
    pub communicate_s: f64,
    /// Seconds writing spikes and checkpoints.
    pub io_s: f64,
    /// The spike file, once complete (rank 0); any file name, UTF-8 or not.
    #[serde(with = "crate::run::opt_path")]
    pub spike_file: Option<std::path::PathBuf>,
}

impl<R: Record> Ran<R> {
    /// Ends the run of rank `rank` of `size` (`threads` shards, the neurons of
    /// `block`), which reached `end_step` of its `steps` after `build_s` seconds
    /// of building: the spike file, renamed to its final name if the run
    /// completed ([`Intake::finish`]), rank 0's statistics, and the report.
    pub fn finish(
        self,
        (rank, size, threads): (usize, usize, usize),
        block: crate::Block,
        (end_step, steps, build_s): (u64, u64, f64),
    ) -> Result<(RankRun, Option<R>)> {
        let completed = end_step >= steps;
        let io_s = self.intake.io_s;
        let (spike_file, recorder) = self.intake.finish(completed)?;
        let clocks = self.clocks;
        let run = RankRun {
            rank,
            size,
            threads,
            first: block.first,
            neurons: block.len,
            interval_steps: self.interval,
            start_step: self.start_step,
            end_step,
            completed,
            build_s,
            simulate_s: clocks.simulate_s(),
            simulate_cpu_s: clocks.cpu_s(),
            update_s: clocks.update_s,
            communicate_s: clocks.comm_s,
            io_s,
            spike_file,
        };
        Ok((run, recorder))
    }
}

/// Runs `net` to the end of its run (or `opts.stop_at`), exchanging spikes
/// through `ex`, its checkpoints (`opts`) of the model's `params`; `progress` is
/// called after every interval.
///
/// Each interval delivers the spikes received and updates its steps while the
/// previous interval's spikes are exchanged (with `opts.overlap` and a shortest
/// delay of 2 steps or more; else each exchange completes before the next
/// update). Before a checkpoint and at the end every spike in flight is
/// exchanged and delivered, and the spike file flushed; the checkpoint then
/// holds no pending spike. A signal ([`RunOptions::stop_on_signal`]) stops every
/// rank at the same step ([`OnSignal::check_among`](crate::stop::OnSignal::check_among)),
/// drained as at the end.
pub fn run_intervals<N: IntervalRank, E: Exchange, P: Serialize>(
    net: &mut N,
    ex: &mut E,
    (opts, params): (&RunOptions, &P),
    mut progress: Option<&mut dyn FnMut(&Progress)>,
) -> Result<Ran<N::Record>> {
    let (min_delay, steps, presim) = net.shape();
    let start_step = net.step();
    let iv = Intervals::new(opts, min_delay, steps, start_step)?;
    let mut intake = net.intake(opts)?;
    let mut clocks = Clocks::start(start_step, presim);
    // `send`: this rank's spikes of the interval `send_base`, not yet exchanged
    // (lag 2 only).
    let mut send: Vec<u32> = Vec::new();
    let mut send_base: Option<(u64, u32)> = None;
    let mut checkpoints = opts.checkpoints(params);
    // SIGTERM, SIGINT and SIGHUP stop the loop after the interval in progress.
    let on_signal = crate::stop::OnSignal::install(opts.stop_on_signal)?;

    while net.step() < iv.end {
        let step0 = net.step();
        let m = iv.next(step0, presim);
        let tu = Instant::now();
        let base = intake.base;
        match send_base.take() {
            // Exchange the previous interval while updating this one.
            Some((prev, pm)) => {
                let (r, work_s) = {
                    let (codes, incoming) = intake.codes_and_incoming();
                    ex.spikes(&send, incoming, || net.update(codes, base, step0, m))?
                };
                r?;
                clocks.update_s += work_s;
                clocks.comm_s += tu.elapsed().as_secs_f64() - work_s;
                delivered(net, &mut intake);
                net.receive(&mut intake, prev, pm)?;
            }
            None => {
                let (codes, _) = intake.codes_and_incoming();
                net.update(codes, base, step0, m)?;
                clocks.update_s += tu.elapsed().as_secs_f64();
                delivered(net, &mut intake);
            }
        }
        send.clear();
        net.spikes(&mut send);
        send_base = Some((step0, m));
        if iv.lag == 1 {
            let tc = Instant::now();
            ex.spikes(&send, &mut intake.incoming, || ())?;
            clocks.comm_s += tc.elapsed().as_secs_f64();
            net.receive(&mut intake, step0, m)?;
            send_base = None;
        }
        let step = step0 + m as u64;
        net.set_step(step);
        if presim == Some(step) {
            clocks.t_rec = Some(Instant::now());
        }

        // SIGTERM, SIGINT or SIGHUP: every rank stops at the same step (one
        // word each every few intervals, nothing else in flight), after the
        // drain, so that the spike file holds every spike up to it.
        let (_, size) = net.rank_size();
        let stop = on_signal.check_among(step, (size, step == iv.end), |words, all| {
            ex.words(words, all)
        })?;
        let at_checkpoint = iv.at_checkpoint(step);
        if at_checkpoint || step == iv.end || stop.is_some() {
            // Drain: deliver everything so that no spike is pending.
            if let Some((prev, pm)) = send_base.take() {
                deliver_now(net, &mut intake);
                let tc = Instant::now();
                ex.spikes(&send, &mut intake.incoming, || ())?;
                clocks.comm_s += tc.elapsed().as_secs_f64();
                net.receive(&mut intake, prev, pm)?;
            }
            deliver_now(net, &mut intake);
            intake.flush()?;
        }
        if at_checkpoint {
            if let Some(ck) = checkpoints.as_mut() {
                let ti = Instant::now();
                let payload = net.checkpoint();
                let (rank, size) = net.rank_size();
                ck.write(
                    (step, rank, size),
                    &payload,
                    intake.checkpoint_spikes(),
                    |words, all| ex.words(words, all),
                )?;
                intake.io_s += ti.elapsed().as_secs_f64();
            }
        }
        if let Some(cb) = progress.as_mut() {
            let wall = clocks.t0.elapsed();
            let recorded = clocks
                .t_rec
                .map_or(Duration::ZERO, |t| wall.saturating_sub(t - clocks.t0));
            cb(&Progress {
                step,
                steps,
                start_step,
                wall,
                wall_recorded: recorded,
            });
        }
        if let Some(stopped) = stop {
            return Err(stopped.into());
        }
    }
    Ok(Ran {
        intake,
        clocks,
        interval: iv.interval,
        start_step,
    })
}

/// After an update that delivered the spikes `intake` gathered: the network
/// keeps what it needs of them, and they are taken.
fn delivered<N: IntervalRank>(net: &mut N, intake: &mut Intake<N::Record>) {
    if intake.has {
        net.delivered(&intake.gathered, intake.base);
        intake.has = false;
    }
}

/// Delivers at once the spikes `intake` gathered and not yet delivered, and
/// takes them.
fn deliver_now<N: IntervalRank>(net: &mut N, intake: &mut Intake<N::Record>) {
    if intake.has {
        net.deliver_now(&intake.gathered, intake.base);
        intake.has = false;
    }
}
