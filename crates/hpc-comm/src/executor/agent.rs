//! The `Thread` engine's progress agent: its loop, its priority and the
//! state it shares with the communicator's users.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Core;
use hpc_board::board::Board;
use hpc_board::sync::lock;

/// State shared by a communicator's users and its progress agent.
pub(crate) struct Shared {
    pub core: Mutex<Core>,
    pub shutdown: AtomicBool,
}

impl Shared {
    pub(crate) fn new(core: Core) -> Shared {
        Shared {
            core: Mutex::new(core),
            shutdown: AtomicBool::new(false),
        }
    }
}

/// Raises the calling (agent) thread's scheduling priority so that a wake-up
/// preempts the computing thread at once instead of after a time slice.
/// The agent only runs in short bursts and sleeps otherwise, so it cannot
/// starve the application. `HPC_PROGRESS_SCHED`: `nice` (default: nice -20
/// for this thread), `fifo` (`SCHED_FIFO` priority 1, root or
/// `CAP_SYS_NICE`), `none`. Failures are logged, not fatal.
pub(crate) fn raise_priority() {
    // A value that is none of the three is warned about by name (it was taken for
    // `nice` without a word), as one that is not UTF-8 is.
    let how =
        hpc_runtime::env::parsed(hpc_runtime::env::PROGRESS_SCHED, sched_policy).unwrap_or("nice");
    let result = match how {
        "fifo" => {
            // rustix has no `sched_setscheduler`.
            let p = libc::sched_param { sched_priority: 1 };
            // SAFETY: a valid `sched_param` for the calling thread (pid 0).
            let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) };
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        }
        "none" => Ok(()),
        _ => {
            // On Linux a thread id names one thread to `setpriority`.
            let r = rustix::process::setpriority_process(Some(rustix::thread::gettid()), -20);
            if r.is_ok() {
                short_slice();
            }
            r.map_err(std::io::Error::from)
        }
    };
    if let Err(error) = result {
        tracing::info!(how, %error, "progress thread keeps its priority");
    }
}

/// `HPC_PROGRESS_SCHED`'s value, for [`hpc_runtime::env::parsed`].
fn sched_policy(value: &str) -> Result<&'static str, &'static str> {
    match value.trim() {
        "nice" => Ok("nice"),
        "fifo" => Ok("fifo"),
        "none" => Ok("none"),
        _ => Err("not `nice`, `fifo` or `none`"),
    }
}

/// `struct sched_attr` of `sched_setattr(2)` (version 1, 56 bytes).
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
    util_min: u32,
    util_max: u32,
}

/// Asks the EEVDF scheduler (Linux 6.6+) for a short time slice (0.1 ms, its
/// minimum) for this thread. EEVDF lets a waking thread preempt the running
/// one only if its deadline is earlier, and with the default slice a woken
/// agent waits for the computing thread's slice to end (up to 3 ms) however
/// high its nice priority: the agent then never runs while the application
/// computes. A short slice makes the wake-up preempt at once. Older kernels
/// ignore the runtime of a `SCHED_OTHER` thread; failures are logged.
fn short_slice() {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        flags: 0,
        nice: -20,
        priority: 0,
        runtime: 100_000,
        deadline: 0,
        period: 0,
        util_min: 0,
        util_max: 0,
    };
    // SAFETY: `attr` is a valid, initialised `sched_attr` whose `size` field
    // says how much of it the kernel may read; pid 0 is the calling thread.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "no short scheduler slice");
    }
}

/// The `Thread` engine's agent: sleeps on its bell until a ring wakes it (an
/// eager agent) or a millisecond passes while collectives are in flight,
/// runs the schedules, wakes waiters when operations finish.
pub(crate) fn agent_loop(shared: Arc<Shared>, board: Arc<Board>, me: usize) {
    let _span = tracing::debug_span!("progress-agent", rank = me).entered();
    // The agent polls every millisecond from its last collective in flight
    // until `LINGER` later, and only then sleeps until woken: an application
    // that runs collectives back to back does not pay a wake-up for each.
    const LINGER: Duration = Duration::from_millis(100);
    let mut last_active = std::time::Instant::now();
    let mut busy = hpc_board::busy::Busy::default();
    loop {
        let seen = board.doorbell(me).load(Ordering::SeqCst);
        if shared.shutdown.load(Ordering::Acquire) {
            break;
        }
        if board.someone_waits(me) {
            // The waiting application thread advances the collectives itself; stand
            // aside rather than take turns with it (woken when it leaves `wait`).
            board.agent_sleep(me, seen, Duration::from_millis(50));
            continue;
        }
        let (active, moved, polling) = {
            let mut core = lock(&shared.core);
            let before = core.active();
            busy.track(before, || {
                tracing::trace_span!("progress", engine = "thread", rank = me)
            });
            let moved = core.progress();
            let after = core.active();
            busy.track(after, tracing::Span::none);
            if after < before {
                // Wake an application thread sleeping in `wait`.
                board.ring(me);
            }
            (after, moved, core.net_pending() || core.has_output())
        };
        if moved {
            continue;
        }
        if active > 0 {
            last_active = std::time::Instant::now();
        }
        // Sleep until a peer or the application rings (bounded so that shutdown and
        // the liveness checks of waiters are never stuck behind a lost wake-up).
        let nap = if polling {
            // Network completions ring no doorbell, nor does a peer that makes room
            // in a full ring: poll.
            Duration::from_micros(50)
        } else if active > 0 || last_active.elapsed() < LINGER {
            // No ring wakes a lazy agent, nor an eager one for a small message
            // in the last round: a pass every millisecond keeps the collectives
            // moving while the application neither tests nor waits.
            Duration::from_millis(1)
        } else {
            // Idle: the next collective posted wakes the agent (`Board::agent_idle`).
            board.set_agent_idle(me, true);
            // A collective posted before the flag was up found no idle agent to
            // wake: look again under the lock that `submit` holds.
            if lock(&shared.core).active() > 0 {
                board.set_agent_idle(me, false);
                continue;
            }
            board.agent_sleep(me, seen, Duration::from_millis(200));
            board.set_agent_idle(me, false);
            continue;
        };
        board.agent_sleep(me, seen, nap);
    }
    lock(&shared.core).stopped = true;
    board.ring(me);
}

#[cfg(test)]
mod tests {
    use super::sched_policy;

    #[test]
    fn the_progress_policy_is_one_of_three_or_refused() {
        assert_eq!(sched_policy(" fifo"), Ok("fifo"));
        assert_eq!(sched_policy("none"), Ok("none"));
        assert_eq!(sched_policy("nice"), Ok("nice"));
        for bad in ["", "FIFO", "realtime", "-1"] {
            assert!(sched_policy(bad).unwrap_err().contains("`nice`"), "{bad}");
        }
    }
}
