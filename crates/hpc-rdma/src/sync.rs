//! Synchronization primitives of the in-process bookkeeping, switched to `loom`'s
//! under `cfg(loom)` (as crossbeam-utils does) so that the loom models in
//! `completion.rs` explore every interleaving of the real code.
//!
//! Memory shared between processes (rings, regions) keeps `std` atomics: loom cannot
//! live in a mapping; the ring's algorithm is modelled over loom memory instead (see
//! `ring.rs`, `RingMem`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

pub(crate) use std::sync::atomic::Ordering;
