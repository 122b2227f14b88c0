//! A run's progress: what the run reports after every interval ([`Progress`]),
//! and what a binary does with it ([`ProgressLine`]): the progress bar on rank 0's
//! terminal, with the real-time factor, and the pace of a run held to a multiple of
//! real time.

use std::io::Write as _;
use std::time::{Duration, Instant};

/// Progress, reported after every interval.
#[derive(Clone, Debug)]
pub struct Progress {
    /// Steps done.
    pub step: u64,
    /// Steps of the whole run.
    pub steps: u64,
    /// Step this run started from (non-zero after a restart).
    pub start_step: u64,
    /// Wall time since the simulation loop started.
    pub wall: Duration,
    /// Wall time since the warm-up ended (zero before; `wall` without a warm-up).
    pub wall_recorded: Duration,
}

/// What a binary does with the run's [`Progress`]: draws the progress bar (when
/// `show`, at most every 200 ms and at the end) with the real-time factor of the
/// time after the warm-up, and, with a pace, waits so that the run goes no faster
/// than that multiple of real time (every rank waits, so that none runs ahead into
/// the next exchange; the spikes do not change).
///
/// ```
/// use std::time::Duration;
/// use hpc_spiking::progress::{Progress, ProgressLine};
///
/// // Not shown and not paced: the run needs no callback.
/// assert!(!ProgressLine::new(false, 0.1, 0, None).active());
/// // Paced at 100x real time: 10 ms of simulated time take at least 0.1 ms.
/// let mut line = ProgressLine::new(false, 0.1, 0, Some(100.0));
/// assert!(line.active());
/// let t0 = std::time::Instant::now();
/// line.update(&Progress {
///     step: 100, steps: 100, start_step: 0, wall: Duration::ZERO, wall_recorded: Duration::ZERO,
/// });
/// assert!(t0.elapsed() >= Duration::from_micros(100));
/// ```
#[derive(Debug)]
pub struct ProgressLine {
    show: bool,
    dt: f64,
    presim_steps: u64,
    pace: Option<f64>,
    last: Option<Instant>,
}

impl ProgressLine {
    /// The line of a run of `dt` ms steps whose first `presim_steps` are a warm-up
    /// (not in the real-time factor), drawn when `show`
    /// ([`crate::args::RunArgs::shows_progress`]), held to `pace` times real time
    /// when given (a finite factor above 0, checked by the caller).
    pub fn new(show: bool, dt: f64, presim_steps: u64, pace: Option<f64>) -> ProgressLine {
        ProgressLine {
            show,
            dt,
            presim_steps,
            pace,
            last: None,
        }
    }

    /// Whether the run needs to report its progress here (drawn or paced).
    pub fn active(&self) -> bool {
        self.show || self.pace.is_some()
    }

    /// Takes the progress `p` of the run: waits for the pace, then draws the bar.
    pub fn update(&mut self, p: &Progress) {
        if let Some(f) = self.pace {
            let due = (p.step - p.start_step) as f64 * self.dt / 1000.0 / f;
            // A factor the caller bounded keeps the wait to the run's planned time.
            if let Ok(d) = Duration::try_from_secs_f64(due - p.wall.as_secs_f64()) {
                wait_unless_stopped(d);
            }
        }
        if !self.show {
            return;
        }
        if self
            .last
            .is_some_and(|t| t.elapsed() < Duration::from_millis(200))
            && p.step < p.steps
        {
            return;
        }
        self.last = Some(Instant::now());
        let recorded =
            p.step.saturating_sub(self.presim_steps.max(p.start_step)) as f64 * self.dt / 1000.0;
        let rtf = if recorded > 0.0 {
            format!("{:.2}", p.wall_recorded.as_secs_f64() / recorded)
        } else {
            "(warm-up)".into()
        };
        crate::run::draw_progress(p.step, p.steps, self.dt, &rtf);
    }

    /// Runs `run` with the progress callback a run takes (such as the examples'
    /// `Simulation::run`): this line's [`update`](Self::update) when it is
    /// [`active`](Self::active), else none, so that a run neither drawn nor paced
    /// is not called back; then [`end`](Self::end)s the line (also when the run
    /// failed or a signal stopped it, so that its message starts a line).
    pub fn drive<R>(
        &mut self,
        run: impl FnOnce(Option<&mut dyn FnMut(&Progress)>) -> anyhow::Result<R>,
    ) -> anyhow::Result<R> {
        let r = if self.active() {
            let mut bar = |p: &Progress| self.update(p);
            run(Some(&mut bar))
        } else {
            run(None)
        };
        self.end();
        r
    }

    /// Ends the line (a new line after the bar, when it was drawn).
    pub fn end(&self) {
        if self.show {
            // A failed write (stderr closed) loses only the line's end.
            let _ = writeln!(std::io::stderr());
        }
    }
}

/// How long a pace's wait sleeps at a time before it looks whether a signal
/// stopped the run.
const PACE_SLICE: Duration = Duration::from_millis(50);

/// Waits `d` for a pace, in slices of [`PACE_SLICE`], ending at once when a
/// signal stopped the run ([`crate::stop::received`]), so that the loop takes
/// it after this interval: a slow pace (`--pace 1e-6`, 700 s of waiting an
/// interval) slept through SIGTERM until the watchdog's grace ended the run
/// "while blocked".
fn wait_unless_stopped(d: Duration) {
    let start = Instant::now();
    while crate::stop::received().is_none() {
        let left = d.saturating_sub(start.elapsed());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(PACE_SLICE));
    }
}
