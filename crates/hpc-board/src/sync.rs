//! Locking that survives a panic elsewhere, below every module that locks.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`; a mutex poisoned by a thread that panicked while holding it is
/// taken over as is (every structure guarded here stays consistent between
/// statements, and the engines report failures through their operations).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
