//! The workers that step a rank's shards after the first, one each, for a whole
//! run, waiting for the next interval spinning rather than asleep.
//!
//! # The protocol
//!
//! The rank's thread writes the interval into `job` and bumps `epoch`
//! (release); worker `w` sees the new epoch (acquire), copies the job, steps
//! shard `w + 1` through the published pointer, and counts itself in `done`
//! (release); the rank's thread steps shard 0 and waits until `done` reaches
//! `epoch * workers` (acquire). So:
//!
//! - between [`Team::start`] and the return of [`Team::finish`] the rank's
//!   thread touches no shard but the first, and worker `w` only shard `w + 1`;
//! - outside that window no worker touches any shard: a worker's accesses to
//!   its shard happen before its `done` increment (release), which the rank's
//!   thread reads (acquire) before it returns from `finish`, and the next
//!   interval's job and pointer are written under the job's lock, which the
//!   worker takes after it sees the next `epoch` (the lock alone orders them:
//!   the model still passes with `epoch` relaxed; its release/acquire pair is
//!   kept so that the protocol does not rest on the lock's placement);
//! - a worker cannot miss an epoch: the rank's thread bumps `epoch` again only
//!   after every worker counted itself done for the previous one.
//!
//! Nothing sleeps on a condition, so no wake-up can be lost: every wait re-reads
//! its counter. The 60 s limit in `finish` guards against a worker that never
//! comes back (a bug or a machine stopped in a debugger), not against a lost
//! wake-up. The protocol is model-checked with loom (`RUSTFLAGS="--cfg loom"
//! cargo test --release --lib -p hpc-spiking loom`): with the
//! workers' `done` increment weakened to `Relaxed` the model fails ("Causality
//! violation: Concurrent read and write accesses").
//!
//! A waiting thread spins for about 50 µs (the gap between two intervals on an
//! idle core), then yields for about 1 ms, then sleeps 50 µs at a time, so an
//! oversubscribed machine is not held up by spinning threads.

use anyhow::{bail, Result};

#[cfg(loom)]
use loom::sync::{
    atomic::{AtomicBool, AtomicU64, Ordering},
    Mutex,
};
#[cfg(not(loom))]
use std::sync::{
    atomic::{AtomicBool, AtomicU64, Ordering},
    Mutex,
};

/// A team of `workers` threads stepping shards `1..=workers` of a slice whose
/// first shard the rank's own thread steps, one interval (`J`) at a time.
pub struct Team<S, J> {
    workers: usize,
    epoch: AtomicU64,
    done: AtomicU64,
    stop: AtomicBool,
    failed: AtomicBool,
    job: Mutex<(J, Shards<S>)>,
}

/// The rank's shards, published to the workers between `start` and `finish`.
struct Shards<S>(*mut S);

impl<S> Clone for Shards<S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for Shards<S> {}

// SAFETY: the pointer is dereferenced only under the protocol above: each shard
// by one thread at a time, ordered by `epoch` and `done`; `S: Send` because a
// worker steps a shard the rank's thread owns.
unsafe impl<S: Send> Send for Shards<S> {}

/// Stops the team when dropped (the run ended, by error or not), so that the
/// scope the workers run in can end.
pub struct StopOnDrop<'a, S, J>(pub &'a Team<S, J>);

impl<S, J> Drop for StopOnDrop<'_, S, J> {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::Release);
    }
}

impl<S: Send, J: Clone> Team<S, J> {
    /// A team of `workers` threads; `job` is the first (empty) interval.
    pub fn new(workers: usize, job: J) -> Team<S, J> {
        Team {
            workers,
            epoch: AtomicU64::new(0),
            done: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            job: Mutex::new((job, Shards(std::ptr::null_mut()))),
        }
    }

    /// How many worker threads the team needs.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Hands the shards after the first to the workers for one interval, which
    /// `set` writes. `shards` must stay valid, and its shards after the first
    /// untouched by the caller, until [`Team::finish`] returns.
    ///
    /// # Safety
    ///
    /// `shards` points to `len` (`workers + 1`) initialised shards that stay
    /// valid, and of which the caller touches none but the first, until
    /// [`Team::finish`] returns (or, if it is never called, until every worker
    /// has returned from [`Team::work`]).
    pub unsafe fn start(&self, shards: *mut S, len: usize, set: impl FnOnce(&mut J)) {
        assert_eq!(len, self.workers + 1, "one worker per shard but the first");
        let mut j = self.job.lock().unwrap_or_else(|e| e.into_inner());
        set(&mut j.0);
        j.1 = Shards(shards);
        drop(j);
        self.epoch.fetch_add(1, Ordering::Release);
    }

    /// Waits until every worker stepped its shard for this interval.
    pub fn finish(&self) -> Result<()> {
        let target = self.epoch.load(Ordering::Relaxed) * self.workers as u64;
        let mut wait = Wait::new();
        while self.done.load(Ordering::Acquire) < target {
            if wait.pause() {
                bail!("the rank's shard workers did not finish an interval within 60 s");
            }
        }
        if self.failed.load(Ordering::Relaxed) {
            bail!("a worker thread panicked while stepping its shard");
        }
        Ok(())
    }

    /// Worker `w`'s loop: steps shard `w + 1` with `step` once per epoch until
    /// the team is stopped. `local` is the worker's copy of the job (its
    /// buffers are reused from one interval to the next).
    pub fn work(&self, w: usize, mut local: J, step: impl Fn(&mut S, &J)) {
        let mut seen = 0;
        loop {
            let mut wait = Wait::new();
            let epoch = loop {
                let e = self.epoch.load(Ordering::Acquire);
                if e != seen {
                    break e;
                }
                if self.stop.load(Ordering::Acquire) {
                    return;
                }
                wait.pause();
            };
            seen = epoch;
            let shards = {
                let j = self.job.lock().unwrap_or_else(|e| e.into_inner());
                local.clone_from(&j.0);
                j.1
            };
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // SAFETY: `start` published this pointer to the rank's shards
                // for this epoch; shard `w + 1` is this worker's alone until
                // it counts itself done (see the protocol above).
                let sh = unsafe { &mut *shards.0.add(w + 1) };
                step(sh, &local);
            }));
            if ok.is_err() {
                self.failed.store(true, Ordering::Relaxed);
            }
            self.done.fetch_add(1, Ordering::Release);
        }
    }
}

/// Spin-loop hints before a waiting thread yields (about 50 µs).
#[cfg(not(loom))]
const SPINS: u32 = 20_000;

/// Spins about 50 µs, then yields for about a millisecond, then sleeps 50 µs
/// at a time; `pause` says when 60 s have passed.
#[cfg(not(loom))]
struct Wait {
    spins: u32,
    since: Option<std::time::Instant>,
}

#[cfg(not(loom))]
impl Wait {
    fn new() -> Wait {
        Wait {
            spins: 0,
            since: None,
        }
    }

    /// Waits a little; true once the wait has lasted 60 s.
    fn pause(&mut self) -> bool {
        use std::time::Duration;
        if self.spins < SPINS {
            self.spins += 1;
            std::hint::spin_loop();
            return false;
        }
        let since = *self.since.get_or_insert_with(std::time::Instant::now);
        let waited = since.elapsed();
        if waited < Duration::from_millis(1) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
        waited > Duration::from_secs(60)
    }
}

/// Under loom a wait is a yield (loom then runs another thread); loom has no
/// clock, so it never times out.
#[cfg(loom)]
struct Wait;

#[cfg(loom)]
impl Wait {
    fn new() -> Wait {
        Wait
    }

    fn pause(&mut self) -> bool {
        loom::thread::yield_now();
        false
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    /// `workers` workers and the rank's thread step their shards for each
    /// interval of `adds`: every access to a shard is checked by loom against
    /// every other (its `UnsafeCell` panics on an unordered pair), and the
    /// results are those of the intervals done in turn.
    fn model(workers: usize, adds: &'static [u64], preemptions: usize) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(preemptions);
        b.max_branches = 20_000;
        b.check(move || {
            let team = Arc::new(Team::<UnsafeCell<u64>, u64>::new(workers, 0));
            let mut shards: Vec<UnsafeCell<u64>> =
                (0..=workers).map(|_| UnsafeCell::new(0)).collect();
            let p = shards.as_mut_ptr();
            let handles: Vec<_> = (0..workers)
                .map(|w| {
                    let team = team.clone();
                    loom::thread::spawn(move || {
                        // SAFETY: the team hands this worker its shard alone.
                        team.work(w, 0, |s, add| s.with_mut(|v| unsafe { *v += *add }))
                    })
                })
                .collect();
            {
                let _stop = StopOnDrop(&*team);
                for &add in adds {
                    // SAFETY: `shards` outlives the team's use of it; shards after
                    // the first are the workers' until `finish`.
                    unsafe { team.start(p, workers + 1, |j| *j = add) };
                    // SAFETY: shard 0 is this thread's (the protocol).
                    unsafe { &*p }.with_mut(|v| unsafe { *v += add });
                    team.finish().unwrap();
                }
                let want: u64 = adds.iter().sum();
                for s in &shards {
                    // Reading every shard after `finish` is the access that a
                    // missing release/acquire would leave unordered.
                    // SAFETY: no worker touches a shard after `finish`.
                    s.with(|v| assert_eq!(unsafe { *v }, want));
                }
            }
            for h in handles {
                h.join().unwrap();
            }
        });
    }

    /// One worker, two intervals: the second interval's job and pointer, and
    /// the first interval's writes, are ordered for both threads.
    #[test]
    fn loom_team_two_intervals() {
        model(1, &[1, 10], 2);
    }

    // Two workers are not modelled: with three threads waiting by yielding,
    // loom's exploration exceeds its branch budget (every yield is a branch).
    // The workers share nothing but `done`, whose `fetch_add`s form one release
    // sequence that the rank's acquire load reads in full, and each touches
    // only its own shard; the one-worker model checks everything else.
}
