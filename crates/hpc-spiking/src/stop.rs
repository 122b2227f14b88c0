//! A run stopped by SIGTERM, SIGINT or SIGHUP (a batch system's time limit, `scancel`,
//! Ctrl-C): while a run's loop runs ([`OnSignal`], installed by the loop when
//! [`RunOptions::stop_on_signal`](crate::RunOptions::stop_on_signal) asks for
//! it), the signal only sets a flag, which the loop looks at after every
//! interval; it then flushes the spike file (`.partial`, valid up to that step)
//! and returns [`Stopped`]. The binary marks its output directory incomplete,
//! naming the signal and the time it stopped at ([`mark_stopped`]), and ends by
//! the same signal ([`end_by`]), so that its parent sees the status a signal
//! gives (128 + the signal's number in a shell: 143, 130).
//!
//! The ranks of a run of several stop at the same step, whichever of them the
//! signal reached and at whichever interval ([`OnSignal::check_among`]): every
//! [`AGREE_EVERY`] intervals and at the end of the run they gather one word
//! each, the signal each received or 0, and all stop there when one is not 0,
//! each naming the same step and ending by the same signal (pass 19: a rank
//! that saw the signal one interval later than another went on exchanging
//! with it and failed with "rank N is lost").
//!
//! The handler does nothing but store the signal's number in an atomic (the
//! only work that is safe in a signal handler); it is installed with
//! `SA_RESETHAND`, so a second signal ends the process at once, as before; and
//! a watchdog thread ends the process by the signal when the loop has not taken
//! it within [`GRACE`] (a rank blocked in an exchange with a rank that is gone,
//! a long checkpoint write). A signal that is ignored when the loop starts (a
//! background job's SIGINT) stays ignored.
//!
//! Outside the loop (the network's build, the summary, figures and report after
//! it) there is no interval to end: a binary holds an [`OnSignal::around`] for
//! its whole run and says what it is doing ([`OnSignal::doing`]), and a signal
//! there ends the run at once, by the watchdog: every started run directory of
//! the process is marked incomplete first
//! ([`hpc_io::rundir::mark_incomplete_before_exit`]: "stopped by SIGTERM while
//! writing the summary"), or, during the build, before the directory was
//! started, left as it was (only its lock file's holder text goes); the
//! temporaries of an output written at the end are removed ([`before_end`]:
//! a `--trace` file's recording folder); the message names the signal and
//! what was being done, and the process ends by the signal. The watchdog
//! ending a loop blocked past [`GRACE`] marks the run incomplete the same way.
//!
//! ```
//! use hpc_spiking::stop::{signal_name, Stopped};
//!
//! let e = Stopped { signal: libc::SIGTERM, step: 1520 };
//! assert_eq!(e.to_string(), "stopped by SIGTERM at step 1520");
//! assert_eq!(signal_name(libc::SIGINT), "SIGINT");
//! ```

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The signals that stop a run: SIGTERM (a batch system's time limit,
/// `scancel`, `kill`), SIGINT (Ctrl-C) and SIGHUP (the terminal closed, an ssh
/// session lost).
pub const SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// How long after a signal the watchdog waits for the loop to take it before it
/// ends the process by that signal (the loop looks at it after every interval,
/// milliseconds of wall time; the ranks of a run of several agree every
/// [`AGREE_EVERY`] intervals, and the grace runs from the loop's last look;
/// Slurm's default wait between SIGTERM and SIGKILL is 30 s).
pub const GRACE: Duration = Duration::from_secs(10);

/// The signal received while an [`OnSignal`] was installed (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// The steps completed when a loop last looked at the flag ([`OnSignal::check`];
/// `u64::MAX`: none yet), named when an exchange fails after a signal (a rank
/// that stopped at another interval).
static LAST_STEP: AtomicU64 = AtomicU64::new(u64::MAX);

/// How many times a loop looked at the flag ([`OnSignal::check`],
/// [`OnSignal::check_among`]): the watchdog's [`GRACE`] runs from the last look
/// while the loop has not taken the signal, so that a loop that goes on to its
/// next agreement ([`AGREE_EVERY`]) is not ended before it.
static LOOKS: AtomicU64 = AtomicU64::new(0);

/// Every how many intervals the ranks of a run of several agree whether a
/// signal stops it ([`OnSignal::check_among`]), and at the end of the run: a
/// fixed number, so that every rank agrees at the same intervals, whatever
/// each saw. One word a rank each time, the exchange's
/// [`words`](crate::alltoallv::Exchange::words). 32: each agreement is one
/// more collective, which waits for the slowest rank (every 4 intervals it
/// added about a fifth to brunel's loop on 2 ranks of a loaded 2-core machine,
/// where an interval is about 1 ms of wall time; every 32, nothing measurable);
/// the stop waits up to 32 intervals (48 ms of biological time in brunel).
pub const AGREE_EVERY: u64 = 32;

/// Whether the run took the signal received (a loop's [`OnSignal::check`]
/// returned [`Stopped`], or [`mark_stopped`] ran): the watchdog then leaves it
/// to the run, up to [`GRACE`].
static TAKEN: AtomicBool = AtomicBool::new(false);

/// The loops' [`OnSignal`]s held ([`OnSignal::install`]): while one is, a
/// signal waits for the loop's check.
static IN_LOOP: AtomicUsize = AtomicUsize::new(0);

/// The program and what it does outside its loop, while an
/// [`OnSignal::around`] is held (`None`: none is).
static OUTSIDE: Mutex<Option<(String, &'static str)>> = Mutex::new(None);

/// Held for good by the first watchdog that ends the process, so that only one
/// speaks.
static ENDING: Mutex<()> = Mutex::new(());

/// What to remove before the process ends at once by a signal ([`end_now`]):
/// the temporaries of an output the run writes at its end ([`before_end`]).
type Chore = Box<dyn Fn() + Send>;

/// The chores of [`before_end`].
static CHORES: Mutex<Vec<Chore>> = Mutex::new(Vec::new());

/// Runs `chore` when a signal ends the process at once (outside a run's loop,
/// or a loop blocked past [`GRACE`]), after the run directories are marked and
/// before the process ends: for the temporaries of an output written whole at
/// the end (a `--trace` file's recording folder and claim), which no
/// destructor removes then. It may run at any moment, even after the output
/// was written, so it must remove only what is still this run's own.
pub fn before_end(chore: impl Fn() + Send + 'static) {
    CHORES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Box::new(chore));
}

/// The handler: one atomic store, which is async-signal-safe.
extern "C" fn note(signal: libc::c_int) {
    RECEIVED.store(signal, Ordering::SeqCst);
}

/// The name of `signal` as a message says it (`SIGTERM`, `SIGINT`, else
/// `signal N`).
pub fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGINT => "SIGINT".into(),
        libc::SIGHUP => "SIGHUP".into(),
        n => format!("signal {n}"),
    }
}

/// The signal that stopped this process's run (`None`: none was received while a
/// run's loop had [`OnSignal`] installed, and no other rank's stopped it,
/// [`OnSignal::check_among`]).
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// A run's loop stopped by `signal` once it had completed `step` steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("stopped by {} at step {step}", signal_name(*signal))]
pub struct Stopped {
    /// The signal's number.
    pub signal: i32,
    /// The steps completed (the spike file holds every spike up to it).
    pub step: u64,
}

/// While held, SIGTERM, SIGINT and SIGHUP set a flag that [`OnSignal::check`] turns into
/// [`Stopped`]; once the last one held is dropped, the earlier actions are back
/// (the flag stays for [`received`]). Several may be held at once (ranks run as
/// threads of one process, `crate::exchange::virtual_ranks`): the first installs
/// the handler, the last restores what it found.
pub struct OnSignal {
    /// Whether this one stops its loop (it installed the handler or shares it).
    enabled: bool,
    /// The looks of [`OnSignal::check_among`] so far (every
    /// [`AGREE_EVERY`]th agrees).
    looks: AtomicU64,
    /// Whether this one is a loop's ([`OnSignal::install`]), not a whole
    /// run's ([`OnSignal::around`]).
    in_loop: bool,
    /// The watchdog: its "done" flag and thread.
    watchdog: Option<(Arc<Done>, JoinHandle<()>)>,
}

/// The watchdog's "done" flag and the condition it waits on.
type Done = (Mutex<bool>, Condvar);

/// The [`OnSignal`]s held, and the signals handled with their earlier actions.
static HELD: Mutex<(usize, Vec<(libc::c_int, libc::sigaction)>)> = Mutex::new((0, Vec::new()));

/// Puts back the earlier actions `old` of the signals handled.
fn restore(old: &mut Vec<(libc::c_int, libc::sigaction)>) {
    for (signal, old) in old.drain(..) {
        // SAFETY: `old` is the action `sigaction` gave for `signal` at install.
        unsafe {
            libc::sigaction(signal, &old, std::ptr::null_mut());
        }
    }
}

impl OnSignal {
    /// Installs the handler when `enabled` (else an `OnSignal` that never stops
    /// the run and changes nothing), with the watchdog.
    pub fn install(enabled: bool) -> std::io::Result<OnSignal> {
        OnSignal::held(enabled, true)
    }

    /// Installs the handler for a whole run of `program` when `enabled` (else
    /// changes nothing): outside a loop's [`OnSignal::install`], a signal ends
    /// the process at once, the process's started run directories marked
    /// incomplete "stopped by SIGTERM while …" ([`OnSignal::doing`]), and the
    /// message saying so; inside a loop, the loop takes it as without this.
    pub fn around(enabled: bool, program: &str) -> std::io::Result<OnSignal> {
        let on = OnSignal::held(enabled, false)?;
        if enabled {
            *OUTSIDE.lock().unwrap_or_else(|e| e.into_inner()) =
                Some((program.into(), "while preparing the run"));
        }
        Ok(on)
    }

    /// Says what the run does now, outside its loop ("while building the
    /// network", "while writing the summary"), for the message of a signal
    /// that comes in it.
    pub fn doing(&self, what: &'static str) {
        if self.enabled && !self.in_loop {
            if let Some(o) = OUTSIDE.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                o.1 = what;
            }
        }
    }

    fn held(enabled: bool, in_loop: bool) -> std::io::Result<OnSignal> {
        if !enabled {
            return Ok(OnSignal {
                enabled,
                looks: AtomicU64::new(0),
                in_loop,
                watchdog: None,
            });
        }
        let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
        if held.0 == 0 {
            RECEIVED.store(0, Ordering::SeqCst);
            TAKEN.store(false, Ordering::SeqCst);
            LAST_STEP.store(u64::MAX, Ordering::Relaxed);
            for signal in SIGNALS {
                // SAFETY: `sigaction` reads the zero-initialised struct `act` (a
                // valid empty mask, flags and a handler that is an
                // `extern "C" fn(c_int)` doing one atomic store) and writes the
                // earlier action into `old`, both live for the call.
                let installed = unsafe {
                    let mut old: libc::sigaction = std::mem::zeroed();
                    if libc::sigaction(signal, std::ptr::null(), &mut old) != 0 {
                        Err(std::io::Error::last_os_error())
                    } else if old.sa_sigaction == libc::SIG_IGN {
                        // Ignored (nohup, a background job's SIGINT): left so.
                        Ok(None)
                    } else {
                        let mut act: libc::sigaction = std::mem::zeroed();
                        act.sa_sigaction = note as extern "C" fn(libc::c_int) as libc::sighandler_t;
                        // A second Ctrl-C ends the process at once (SA_RESETHAND);
                        // a second SIGTERM does not: launchers send it more than
                        // once (`hpc run` to each rank, then again when another
                        // rank ended).
                        act.sa_flags = libc::SA_RESTART
                            | if signal == libc::SIGINT {
                                libc::SA_RESETHAND
                            } else {
                                0
                            };
                        libc::sigemptyset(&mut act.sa_mask);
                        if libc::sigaction(signal, &act, std::ptr::null_mut()) != 0 {
                            Err(std::io::Error::last_os_error())
                        } else {
                            Ok(Some(old))
                        }
                    }
                };
                match installed {
                    Ok(Some(old)) => held.1.push((signal, old)),
                    Ok(None) => {}
                    Err(e) => {
                        restore(&mut held.1);
                        return Err(e);
                    }
                }
            }
        }
        held.0 += 1;
        drop(held);
        if in_loop {
            IN_LOOP.fetch_add(1, Ordering::SeqCst);
        }
        let mut on = OnSignal {
            enabled,
            looks: AtomicU64::new(0),
            in_loop,
            watchdog: None,
        };
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        let theirs = done.clone();
        let thread = std::thread::Builder::new()
            .name("stop-watchdog".into())
            .spawn(move || watch(&theirs))?;
        on.watchdog = Some((done, thread));
        Ok(on)
    }

    /// `Err(Stopped)` when a signal came since the first [`OnSignal`] held was
    /// installed, the run having completed `step` steps.
    pub fn check(&self, step: u64) -> Result<(), Stopped> {
        if self.enabled {
            LAST_STEP.store(step, Ordering::Relaxed);
            LOOKS.fetch_add(1, Ordering::SeqCst);
        }
        match (self.enabled, received()) {
            (true, Some(signal)) => {
                TAKEN.store(true, Ordering::SeqCst);
                Err(Stopped { signal, step })
            }
            _ => Ok(()),
        }
    }

    /// [`check`](Self::check) for a rank of a run of `ranks`, after an
    /// interval that completed `step` steps (`last`: the run's last): one rank
    /// alone stops as `check` says; ranks of a run of several stop together, at
    /// the same step. Every [`AGREE_EVERY`]th look and at the last interval,
    /// each rank gives the signal it received or 0 through `words` (a gather
    /// of one word a rank, in rank order, such as
    /// [`Exchange::words`](crate::alltoallv::Exchange::words), with nothing
    /// else in flight); if any is not 0, every rank stops there, by the signal
    /// of the lowest rank that had one (which [`received`] then says on every
    /// rank, and by which each ends). Between agreements a signal waits (the
    /// watchdog's [`GRACE`] runs from the loop's last look). `Ok(None)`: go on;
    /// `Err`: the gather failed.
    pub fn check_among(
        &self,
        step: u64,
        (ranks, last): (usize, bool),
        words: impl FnOnce(&[u32], &mut Vec<u32>) -> anyhow::Result<()>,
    ) -> anyhow::Result<Option<Stopped>> {
        if !self.enabled {
            return Ok(None);
        }
        if ranks <= 1 {
            return Ok(self.check(step).err());
        }
        LAST_STEP.store(step, Ordering::Relaxed);
        LOOKS.fetch_add(1, Ordering::SeqCst);
        let looks = self.looks.fetch_add(1, Ordering::Relaxed) + 1;
        if looks % AGREE_EVERY != 0 && !last {
            return Ok(None);
        }
        let mine = [RECEIVED.load(Ordering::SeqCst) as u32];
        let mut all = Vec::with_capacity(ranks);
        words(&mine, &mut all)?;
        match all.iter().find(|&&w| w != 0) {
            Some(&signal) => {
                let signal = signal as i32;
                // This rank ends by the signal the ranks agreed on, received
                // here or not.
                RECEIVED.store(signal, Ordering::SeqCst);
                TAKEN.store(true, Ordering::SeqCst);
                Ok(Some(Stopped { signal, step }))
            }
            None => Ok(None),
        }
    }
}

impl Drop for OnSignal {
    fn drop(&mut self) {
        if let Some((done, thread)) = self.watchdog.take() {
            *done.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
            done.1.notify_all();
            let _ = thread.join();
        }
        if self.enabled {
            if self.in_loop {
                // What follows a loop is the summary: a signal as the loop ends
                // is named so, not by the phase before the loop.
                if let Some(o) = OUTSIDE.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                    o.1 = "while writing the summary";
                }
                IN_LOOP.fetch_sub(1, Ordering::SeqCst);
            } else {
                // A signal after the run's last look ([`take_outside`]) leaves
                // it as it ended: complete, or failing with its own message
                // (which the binary prints, then ends by the signal).
                *OUTSIDE.lock().unwrap_or_else(|e| e.into_inner()) = None;
            }
            let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
            held.0 -= 1;
            if held.0 == 0 {
                restore(&mut held.1);
            }
        }
    }
}

/// The watchdog: when a signal came outside a loop (and the run did not take
/// it), ends the process at once; else when the loop has not taken it within
/// [`GRACE`] (until `done`). Either way by [`end_now`].
fn watch(done: &Done) {
    let mut since: Option<Instant> = None;
    let mut looked = LOOKS.load(Ordering::SeqCst);
    let mut finished = done.0.lock().unwrap_or_else(|e| e.into_inner());
    while !*finished {
        if let Some(signal) = received() {
            let outside = OUTSIDE.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let looping = IN_LOOP.load(Ordering::SeqCst) > 0 || TAKEN.load(Ordering::SeqCst);
            match outside {
                Some((program, what)) if !looping => {
                    end_now(signal, &program, what, unmarked(what))
                }
                _ => {
                    // A loop that still looks after every interval is on its
                    // way to its next agreement: the grace runs from its last
                    // look.
                    let looks = LOOKS.load(Ordering::SeqCst);
                    if looks != looked && !TAKEN.load(Ordering::SeqCst) {
                        looked = looks;
                        since = Some(Instant::now());
                    }
                    if since.get_or_insert_with(Instant::now).elapsed() >= GRACE {
                        tracing::error!(
                            "{} was not taken by the run within {} s (it is blocked): \
                             ended at once",
                            signal_name(signal),
                            GRACE.as_secs()
                        );
                        let program = outside.map(|o| o.0).unwrap_or_default();
                        end_now(signal, &program, "while blocked", "");
                    }
                }
            }
        }
        finished = done
            .1
            .wait_timeout(finished, Duration::from_millis(50))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// What [`end_now`] says when no run directory was started.
const NOTHING_YET: &str = " (no output directory was changed yet)";

/// What [`end_now`] says when it marked no run directory, by what was being
/// done: before the loop, nothing was changed yet; after it (the summary, a
/// trace written at the end), a rank other than 0 (which writes none), or a
/// run whose directory was finished, says nothing of it.
fn unmarked(what: &str) -> &'static str {
    if what.contains("summary") || what.contains("trace") {
        ""
    } else {
        NOTHING_YET
    }
}

/// Ends the process at once as the watchdog would (its run directories marked
/// incomplete, the signal and what was being done named, ended by it) when a
/// signal came outside a loop and the run has not taken it: for a run about to
/// mark its output directory complete, so that a signal in the last moments is
/// not lost to the watchdog's next look.
pub fn take_outside() {
    let Some(signal) = received() else {
        return;
    };
    if TAKEN.load(Ordering::SeqCst) || IN_LOOP.load(Ordering::SeqCst) > 0 {
        return;
    }
    let outside = OUTSIDE.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some((program, what)) = outside {
        end_now(signal, &program, what, unmarked(what));
    }
}

/// Ends the process by `signal` after marking its started run directories
/// incomplete, "stopped by SIGTERM while …" (`what`), and saying so as
/// `program`'s last words (a process's first caller only; a second waits for
/// the end).
fn end_now(signal: i32, program: &str, what: &str, unmarked: &str) -> ! {
    std::mem::forget(ENDING.lock().unwrap_or_else(|e| e.into_inner()));
    let reason = format!("stopped by {} {what}", signal_name(signal));
    let mut message = reason.clone();
    let marked = hpc_io::rundir::mark_incomplete_before_exit(&reason);
    for chore in CHORES.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        chore();
    }
    if marked.is_empty() {
        message.push_str(unmarked);
    }
    for (path, outcome) in marked {
        match outcome {
            Ok(()) => message.push_str(&format!(
                "; {} says the run is incomplete",
                hpc_io::message::path(&path)
            )),
            Err(e) => message.push_str(&format!(
                "; {} could not be marked incomplete (it still says running): {e}",
                hpc_io::message::path(&path)
            )),
        }
    }
    if program.is_empty() {
        tracing::error!("{message}");
    } else {
        hpc_io::message::last_words(program, &message);
    }
    end_by(signal)
}

/// Ends the process by `signal` with its default action (a parent sees the
/// status of a process that signal ended: 128 + its number in a shell), or, if
/// that does not end it, with status 128 + its number.
pub fn end_by(signal: i32) -> ! {
    // SAFETY: `sigaction` and `pthread_sigmask` read zero-initialised structs
    // (an empty set, then `signal` added) that live for the calls; `raise`
    // sends the signal to this thread.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(signal, &act, std::ptr::null_mut());
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(signal);
    }
    std::process::exit(128 + signal)
}

/// After the run failed with `err`: when a signal stopped it (`err` is a
/// [`Stopped`], or any error once a signal was received: an exchange with a rank
/// the signal ended), rank 0's output directory `dir` is marked incomplete,
/// naming the signal and the time it stopped at (steps of `dt` ms), and the
/// error returned says so; else `dir` is dropped as on every error (marked
/// incomplete: "the run ended with an error") and `err` returned as it is.
pub fn mark_stopped(
    dir: Option<hpc_io::rundir::RunDir>,
    err: anyhow::Error,
    dt: f64,
) -> anyhow::Error {
    // The run is on its error path: a signal from now on (a launcher's, as
    // another rank ended) leaves the watchdog to wait, so that this error is
    // the one said, not the watchdog's "while writing the summary".
    TAKEN.store(true, Ordering::SeqCst);
    let stopped = err.downcast_ref::<Stopped>().copied();
    let ms = |step: u64| format!("{:.1} ms", step as f64 * dt);
    let last = match LAST_STEP.load(Ordering::Relaxed) {
        u64::MAX => None,
        step => Some(step),
    };
    let Some(signal) = stopped.map(|s| s.signal).or_else(received) else {
        // A rank whose exchange failed before its own signal came (another rank
        // was stopped, and the launcher signals this one after): where it
        // stopped is named.
        return match last {
            Some(step) => err.context(format!("stopped after {}", ms(step))),
            None => err,
        };
    };
    // An exchange that failed after the signal (another rank stopped at another
    // interval and is gone): the step this rank had completed is named.
    let at = stopped.map(|s| ms(s.step)).or_else(|| last.map(ms));
    let mut message = match (&at, stopped) {
        (Some(at), Some(_)) => format!("stopped by {} at {at}", signal_name(signal)),
        (Some(at), None) => format!(
            "stopped by {} after {at}, in an exchange with a rank that had stopped: {}",
            signal_name(signal),
            hpc_io::message::chain(err.as_ref())
        ),
        (None, _) => format!(
            "stopped by {}: {}",
            signal_name(signal),
            hpc_io::message::chain(err.as_ref())
        ),
    };
    if let Some(d) = dir {
        let path = d.path().to_path_buf();
        let status = hpc_io::rundir::Status::Incomplete {
            reason: format!("stopped by {}", signal_name(signal)),
            stopped_at: at,
        };
        match d.finish(status) {
            Ok(_) => message.push_str(&format!(
                "; {} says the run is incomplete",
                path.join(hpc_io::rundir::MANIFEST).display()
            )),
            Err(e) => message.push_str(&format!(
                "; {} could not be marked incomplete (it still says running): {e}",
                path.join(hpc_io::rundir::MANIFEST).display()
            )),
        }
    }
    anyhow::anyhow!(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The action of SIGTERM now.
    fn action() -> libc::sighandler_t {
        // SAFETY: `sigaction` only writes the current action into `now`.
        unsafe {
            let mut now: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGTERM, std::ptr::null(), &mut now);
            now.sa_sigaction
        }
    }

    /// The only test here that installs the handler: a signal sets the flag,
    /// `check` says so to every `OnSignal` held (two, as ranks run as threads of
    /// one process), the handler stays while one is held and the earlier
    /// action is back once the last is dropped; an `OnSignal` not enabled
    /// changes nothing.
    #[test]
    fn a_signal_is_taken_by_check_and_the_earlier_action_restored() {
        // A whole run's guard: the phase it names is the build's until a loop
        // ends, then the summary's (a signal as the loop ended was named as
        // one in the build).
        let run = OnSignal::around(true, "test").unwrap();
        run.doing("while building the network");
        let phase = || OUTSIDE.lock().unwrap().clone().map(|o| o.1);
        assert_eq!(phase(), Some("while building the network"));
        drop(OnSignal::install(true).unwrap());
        assert_eq!(phase(), Some("while writing the summary"));
        drop(run);
        assert_eq!(phase(), None);
        assert_eq!(action(), libc::SIG_DFL);
        let off = OnSignal::install(false).unwrap();
        assert_eq!(off.check(3), Ok(()));
        drop(off);
        assert_eq!(action(), libc::SIG_DFL);
        let on = OnSignal::install(true).unwrap();
        let other = OnSignal::install(true).unwrap();
        assert_eq!(on.check(5), Ok(()));
        // An exchange failing before this rank's own signal (another rank was
        // stopped and is gone): where it stopped is named (pass 18: "rank 1 is
        // lost", no step).
        let e = mark_stopped(None, anyhow::anyhow!("rank 1 is lost"), 0.1);
        assert_eq!(
            hpc_io::message::chain(e.as_ref()),
            "stopped after 0.5 ms: rank 1 is lost"
        );
        // SAFETY: `raise` sends SIGTERM to this thread, whose action is `note`.
        unsafe {
            libc::raise(libc::SIGTERM);
        }
        let stopped = Err(Stopped {
            signal: libc::SIGTERM,
            step: 7,
        });
        assert_eq!(on.check(7), stopped);
        assert_eq!(other.check(7), stopped);
        drop(on);
        assert_eq!(
            action(),
            note as extern "C" fn(libc::c_int) as libc::sighandler_t
        );
        drop(other);
        assert_eq!(received(), Some(libc::SIGTERM));
        assert_eq!(action(), libc::SIG_DFL);
        // An exchange failing after the signal (a rank that stopped at another
        // interval): the step this rank completed is named (pass 18: "stopped by
        // SIGTERM: rank 0 is lost", no step).
        let e = mark_stopped(None, anyhow::anyhow!("rank 0 is lost"), 0.1).to_string();
        assert_eq!(
            e,
            "stopped by SIGTERM after 0.7 ms, in an exchange with a rank that had \
             stopped: rank 0 is lost"
        );
    }
}
