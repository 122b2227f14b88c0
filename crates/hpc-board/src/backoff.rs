//! How a thread that found nothing to do passes the time: spin, then yield
//! the core, then sleep. One policy for the places that wait on peers: a
//! rank's `wait` on its own path and the proxy waiting for work. What
//! "sleep" means stays with each (a futex on the doorbell, or a short timed
//! sleep where completions ring no doorbell); when each phase ends is decided
//! here. A rank waiting for the proxy's answer yields for up to
//! [`YIELD_FOR`] where the node has no core for the proxy, then blocks on its
//! doorbell (`proxy/client.rs`, `SLEEP.md`).

use std::time::{Duration, Instant};

/// How long a waiter yields the core before it sleeps, where yielding is
/// worth it.
///
/// Where the node has no core for the proxy (spin 0), the proxy runs on the
/// cores of the waiting ranks: a rank that yields hands its core to the
/// proxy at once and sees the answer without a wake-up of its own, where a
/// rank asleep on the futex costs the proxy a wake-up system call and itself
/// a reschedule; the same holds the other way round for the proxy waiting
/// for the other ranks' posts. On 2 ranks and 2 cores, blocking 1 KiB
/// collectives went from 93–153 µs to 35–85 µs when the ranks yielded, and
/// pure 1 KiB times from 15–41 µs to 16–32 µs (allreduce 27–32 → 18–21) when
/// the proxy yielded too. The price: where the proxy runs on the other core,
/// every `sched_yield` returns at once and the wait costs the rank its whole
/// length in CPU time; blocking at once instead made the Proxy engine's pure
/// 1 MiB times 1.1–1.6× longer (`SLEEP.md`). A yielding process that nobody waits for costs the
/// others a context switch per time slice, hence the bound. A rank polling
/// the network yields for as long, because the transport's reader thread may
/// need its core.
pub const YIELD_FOR: Duration = Duration::from_millis(1);

/// What to do on this pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pause {
    /// Poll again at once (`spin_loop` hint).
    Spin,
    /// Give the core to whoever has work (`yield_now`).
    Yield,
    /// Sleep (the caller's way).
    Sleep,
}

/// Idle time since the last work, and the phases over it.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    spin: Duration,
    yield_until: Duration,
    since: Instant,
}

impl Backoff {
    /// Spins for `spin` of idleness, then yields until [`YIELD_FOR`] of
    /// idleness if `yields`, then sleeps.
    pub fn new(spin: Duration, yields: bool) -> Backoff {
        Backoff {
            spin,
            yield_until: if yields { YIELD_FOR } else { Duration::ZERO },
            since: Instant::now(),
        }
    }

    /// Work was done: the next idle period starts now.
    pub fn reset(&mut self) {
        self.since = Instant::now();
    }

    /// Time since the last work.
    pub fn idle(&self) -> Duration {
        self.since.elapsed()
    }

    /// The phase for the idle time so far.
    pub fn pause(&self) -> Pause {
        phase(self.idle(), self.spin, self.yield_until)
    }

    /// Passes the time as the phase says: a spin-loop hint, a yield, or a
    /// sleep of `sleep(idle time so far)` (where completions ring no
    /// doorbell, the caller's sleep is timed).
    pub fn rest(&self, sleep: impl FnOnce(Duration) -> Duration) {
        match self.pause() {
            Pause::Spin => std::hint::spin_loop(),
            Pause::Yield => std::thread::yield_now(),
            Pause::Sleep => std::thread::sleep(sleep(self.idle())),
        }
    }
}

fn phase(idle: Duration, spin: Duration, yield_until: Duration) -> Pause {
    if idle < spin {
        Pause::Spin
    } else if idle < yield_until {
        Pause::Yield
    } else {
        Pause::Sleep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_follow_idle_time() {
        let us = Duration::from_micros;
        assert_eq!(phase(us(10), us(50), YIELD_FOR), Pause::Spin);
        assert_eq!(phase(us(60), us(50), YIELD_FOR), Pause::Yield);
        assert_eq!(phase(us(1500), us(50), YIELD_FOR), Pause::Sleep);
        // No yielding: straight from spinning to sleeping.
        assert_eq!(phase(us(60), us(50), Duration::ZERO), Pause::Sleep);
        // No spinning, yielding first.
        assert_eq!(phase(us(0), Duration::ZERO, YIELD_FOR), Pause::Yield);
        let mut b = Backoff::new(Duration::from_secs(3600), false);
        assert_eq!(b.pause(), Pause::Spin);
        b.reset();
        assert!(b.idle() < Duration::from_secs(3600));
    }
}
