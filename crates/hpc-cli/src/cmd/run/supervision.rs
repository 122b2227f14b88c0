//! What the supervisor of `hpc run` knows of a running job and does about it:
//! the ranks' exits, the signals, the deadlines, and the draining of their
//! output once they have ended.

use std::io::Write as _;
use std::process::ExitStatus;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hpc_runtime::Coordinator;

use super::{describe, exit_code_of, kill_group, reserved_status, signal_name, SIGNAL};
use crate::cmd::job::{self, note};

/// What the supervisor knows of a running job: which ranks live, the first
/// failure (rank or `usize::MAX`, message, exit status), the signal that
/// interrupted it, and when the ranks still running get `SIGKILL`.
pub(super) struct Supervision<'a> {
    pub(super) pids: &'a [u32],
    pub(super) alive: Vec<bool>,
    pub(super) remaining: usize,
    pub(super) first_failure: Option<(usize, String, i32)>,
    pub(super) kill_at: Option<Instant>,
    pub(super) interrupted: Option<i32>,
    /// `--time-limit` stopped the job.
    pub(super) out_of_time: bool,
    pub(super) forwarders_done: usize,
    pub(super) failed_streams: Vec<&'static str>,
    pub(super) grace: Duration,
}

impl Supervision<'_> {
    /// Sends `sig` to the process group of every rank still alive.
    pub(super) fn stop_all(&self, sig: i32) {
        for (r, &a) in self.alive.iter().enumerate() {
            if a {
                kill_group(self.pids[r], sig);
            }
        }
    }

    /// Whether nothing failed and no signal came yet.
    pub(super) fn quiet(&self) -> bool {
        self.first_failure.is_none() && self.interrupted.is_none()
    }

    /// The first failure: the ranks get `SIGTERM` now and `SIGKILL` after the grace.
    pub(super) fn fail(&mut self, failure: (usize, String, i32)) {
        self.first_failure = Some(failure);
        self.stop_all(libc::SIGTERM);
        self.kill_at = Some(Instant::now() + self.grace);
    }

    /// Says once per stream that the ranks' output to it is lost.
    pub(super) fn lost_output(&mut self, stream: &'static str, error: &str) {
        // Said even after another failure: output was lost. Once per stream:
        // every rank's forwarder of that stream fails the same way.
        if !self.failed_streams.contains(&stream) {
            note!("hpc run: cannot write the ranks' {stream}: {error}");
            self.failed_streams.push(stream);
        }
    }

    /// What a forwarder of the ranks' output reports while ranks run.
    pub(super) fn output(&mut self, o: job::Output) {
        match o {
            job::Output::Done => self.forwarders_done += 1,
            job::Output::Closed(stream) => {
                if self.quiet() {
                    // As every subcommand: 141 without a message (`| head -1`).
                    tracing::info!(%stream, remaining = self.remaining, "closed pipe; stopping the ranks");
                    self.fail((
                        usize::MAX,
                        format!("{stream} closed"),
                        crate::cmd::EXIT_BROKEN_PIPE,
                    ));
                }
            }
            job::Output::Failed(stream, error) => {
                self.lost_output(stream, &error);
                if self.quiet() {
                    note!("hpc run: stopping {} rank(s)", self.remaining);
                    self.fail((
                        usize::MAX,
                        format!("writing {stream}: {error}"),
                        crate::cmd::EXIT_RUN_FAILED,
                    ));
                }
            }
        }
    }

    /// Rank `rank` exited with `status`: the coordinator learns it, and a
    /// failure stops the others.
    pub(super) fn exited(&mut self, coord: &Coordinator, rank: usize, status: ExitStatus) {
        if !self.alive[rank] {
            return;
        }
        self.alive[rank] = false;
        self.remaining -= 1;
        // Whatever the rank left behind in its group goes with it.
        kill_group(self.pids[rank], libc::SIGKILL);
        let ok = status.success();
        coord.rank_exited(rank, ok, describe(&status));
        if !ok && self.quiet() {
            let mut msg = format!(
                "rank {rank} (pid {}) {}",
                self.pids[rank],
                describe(&status)
            );
            let mut code = exit_code_of(&status);
            if let Some(mapped) = reserved_status(code) {
                msg.push_str(&format!(
                    " (hpc run keeps {code} for itself: its exit status is {mapped})"
                ));
                code = mapped;
            }
            if self.remaining > 0 {
                note!(
                    "hpc run: {msg}; stopping the other {} rank(s)",
                    self.remaining
                );
            } else {
                note!("hpc run: {msg}");
            }
            self.fail((rank, msg, code));
        }
    }

    /// A signal to `hpc run`: passed on to the ranks; a second one kills them.
    pub(super) fn signal(&mut self, sig: i32) {
        if self.interrupted.is_some() {
            note!("hpc run: second signal, killing all ranks");
            self.stop_all(libc::SIGKILL);
        } else {
            if self.remaining > 0 {
                note!(
                    "hpc run: got {}, stopping {} rank(s)",
                    signal_name(sig),
                    self.remaining
                );
            } else {
                // Every rank had ended: the wait for the output stops.
                note!("hpc run: got {}, stopping", signal_name(sig));
            }
            self.interrupted = Some(sig);
            self.stop_all(sig);
            self.kill_at = Some(Instant::now() + self.grace);
        }
    }

    /// The time limit (the ranks are stopped) and the end of the grace (the
    /// ranks still running are killed).
    pub(super) fn deadlines(&mut self, time_limit: Option<Instant>) {
        if let Some(limit) = time_limit {
            if Instant::now() >= limit && self.kill_at.is_none() {
                note!(
                    "hpc run: time limit reached, stopping {} rank(s)",
                    self.remaining
                );
                self.first_failure
                    .get_or_insert((usize::MAX, "time limit reached".into(), 124));
                self.out_of_time = true;
                self.stop_all(libc::SIGTERM);
                self.kill_at = Some(Instant::now() + self.grace);
            }
        }
        if let Some(t) = self.kill_at {
            if Instant::now() >= t {
                self.stop_all(libc::SIGKILL);
                self.kill_at = Some(Instant::now() + Duration::from_secs(3600));
            }
        }
    }

    /// Drains the ranks' output once every rank exited: a stream that does not
    /// end (held open by a process outside the job) is waited for at most
    /// `job::OUTPUT_GRACE`; output being written to `hpc run`'s own standard
    /// output or error (`writing`: its reader reads slowly, `| less` at a page's
    /// end) is waited for until it is written, unless the job was stopped by a
    /// signal or its time limit. Given up after 1 s, the output a reader had
    /// not read yet was lost with status 0 (hostile pass 21: 38,528 of 100,000
    /// bytes for a reader that paused 3 s). Nor past `--time-limit`: a job
    /// that ended in time, its reader not reading, ends there with 124.
    pub(super) fn drain(
        &mut self,
        out_rx: &mpsc::Receiver<job::Output>,
        forwarders: usize,
        writing: &std::sync::atomic::AtomicUsize,
        time_limit: Option<Instant>,
        front: Option<libc::pid_t>,
    ) {
        let mut stopped = self.interrupted.is_some() || self.out_of_time;
        let mut drain_until = Instant::now() + job::OUTPUT_GRACE;
        while self.forwarders_done < forwarders {
            // `hpc run` itself killed, or a signal (Ctrl-C): the wait for a
            // reader ends, as the job's did (the supervisor outlived its front,
            // holding its output, and took SIGTERM for nothing).
            if job::front_gone(front) {
                break;
            }
            let sig = SIGNAL.swap(0, Ordering::SeqCst);
            if sig != 0 {
                self.signal(sig);
                stopped = true;
            }
            let in_time = time_limit.is_none_or(|t| Instant::now() < t);
            if !stopped && in_time && writing.load(Ordering::SeqCst) > 0 {
                drain_until = Instant::now() + job::OUTPUT_GRACE;
            }
            if !stopped && !in_time && writing.load(Ordering::SeqCst) > 0 {
                note!(
                    "hpc run: time limit reached while the ranks' output was still being \
                     written (hpc run's own output does not take it); the rest is not written"
                );
                self.first_failure
                    .get_or_insert((usize::MAX, "time limit reached".into(), 124));
                break;
            }
            let left = drain_until
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50));
            if left.is_zero() {
                if writing.load(Ordering::SeqCst) > 0 {
                    note!(
                        "hpc run: the ranks' output that hpc run's own output had not taken \
                         when the job was stopped is not written"
                    );
                } else {
                    tracing::warn!(
                        streams = forwarders - self.forwarders_done,
                        "output still open after every process of the job ended; not waiting for it"
                    );
                }
                break;
            }
            match out_rx.recv_timeout(left) {
                Ok(job::Output::Done) => self.forwarders_done += 1,
                Ok(job::Output::Closed(_)) => {
                    self.first_failure.get_or_insert((
                        usize::MAX,
                        "output closed".into(),
                        crate::cmd::EXIT_BROKEN_PIPE,
                    ));
                }
                Ok(job::Output::Failed(stream, error)) => {
                    self.lost_output(stream, &error);
                    self.first_failure.get_or_insert((
                        usize::MAX,
                        format!("writing {stream}: {error}"),
                        crate::cmd::EXIT_RUN_FAILED,
                    ));
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }
}
