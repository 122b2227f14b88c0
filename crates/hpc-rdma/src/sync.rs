//! Synchronization primitives of the in-process bookkeeping, switched to `loom`'s
//! under `cfg(loom)` (as crossbeam-utils does) so that the loom models in
//! `completion.rs` and below explore every interleaving of the real code.
//!
//! Memory shared between processes (rings, regions) keeps `std` atomics: loom cannot
//! live in a mapping; the ring's algorithm is modelled over loom memory instead (see
//! `ring.rs`, `RingMem`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

pub(crate) use std::sync::atomic::Ordering;

#[cfg(loom)]
use loom::cell::UnsafeCell;
#[cfg(not(loom))]
use std::cell::UnsafeCell;

/// A value that one thread at a time works on, claimed with a single atomic
/// compare-and-swap and released with a plain store (a `Mutex` costs two atomic
/// read-modify-writes per use, and a thread that only polls should not wait).
///
/// Made for state that has one user in the common case (one end of a shared-memory
/// ring, used by the thread that sends or polls): [`Exclusive::try_with`] never
/// waits, [`Exclusive::with`] spins and then yields until the other user is done.
pub(crate) struct Exclusive<T> {
    busy: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through `try_with`/`with`, which hand it to one
// thread at a time (the flag's acquire/release order each use after the previous
// one), so sharing the cell is like sharing a `Mutex<T>`: fine when `T: Send`.
unsafe impl<T: Send> Sync for Exclusive<T> {}

impl<T> Exclusive<T> {
    pub(crate) fn new(value: T) -> Exclusive<T> {
        Exclusive {
            busy: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Runs `f` on the value if no other thread is using it, else returns `None` at
    /// once.
    #[inline]
    pub(crate) fn try_with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        // Acquire: the previous user's writes (made before its release below) are
        // visible to this one.
        if self
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        /// Releases the claim, also when `f` unwinds (so a panic cannot leave the
        /// value claimed forever and hang the next user).
        struct Release<'a>(&'a AtomicBool);
        impl Drop for Release<'_> {
            #[inline]
            fn drop(&mut self) {
                // Release: this user's writes happen before the next claim.
                self.0.store(false, Ordering::Release);
            }
        }
        let _release = Release(&self.busy);
        #[cfg(not(loom))]
        {
            // SAFETY: the flag was false and this thread set it: no other thread
            // reaches the value until `_release` clears it, after `f` returned.
            Some(f(unsafe { &mut *self.value.get() }))
        }
        #[cfg(loom)]
        {
            // SAFETY: as above; loom checks the claim by tracking the cell's accesses.
            Some(self.value.with_mut(|p| f(unsafe { &mut *p })))
        }
    }

    /// Runs `f` on the value, waiting (spinning, then yielding) while another thread
    /// uses it.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut f = Some(f);
        let mut spins = 0u32;
        loop {
            if let Some(r) = self.try_with(|v| (f.take().expect("called once"))(v)) {
                return r;
            }
            spins += 1;
            #[cfg(loom)]
            {
                let _ = spins;
                loom::thread::yield_now();
            }
            #[cfg(not(loom))]
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// Loom model of [`Exclusive`]: threads that claim it (waiting and not waiting)
/// update a plain value; loom reports any two uses that are not ordered by the flag.
/// Run with `RUSTFLAGS="--cfg loom" cargo test --release --lib -p hpc-rdma loom`.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;

    #[test]
    fn loom_exclusive_orders_every_use() {
        loom::model(|| {
            let cell = Arc::new(Exclusive::new((0u32, 0u32)));
            let c2 = cell.clone();
            let t = loom::thread::spawn(move || {
                // The polling side: gives up when busy, as `Shm::progress` does.
                let mut done = 0;
                for _ in 0..2 {
                    if c2.try_with(|v| v.1 += 1).is_some() {
                        done += 1;
                    }
                }
                c2.with(|v| v.0 += 1);
                done
            });
            cell.with(|v| v.0 += 1);
            let tries = t.join().unwrap();
            cell.with(|v| {
                assert_eq!(v.0, 2, "every waiting use happened once");
                assert_eq!(v.1, tries, "every successful try happened once");
            });
        });
    }
}
