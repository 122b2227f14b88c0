//! The engines behind a [`Comm`](crate::Comm): one module each, behind one
//! trait, as a graphics abstraction layer keeps one module per back end.
//!
//! * [`inline`]: the ranks run their schedules in `test`/`wait` (the executor
//!   of `executor.rs` over the node's board);
//! * [`thread`]: the same, plus a progress thread per process;
//! * [`proxy`]: a process per node runs every local rank's schedules, with
//!   the ranks' own path (`inline`) for collectives below `proxy_min`;
//! * `mpi` (feature `mpi`): the MPI library's immediate collectives.
//!
//! `Comm` starts a collective with [`Driver::start`], which returns a
//! [`Ticket`]: the engine's handle on that one collective, whose own type
//! says how it is tested, waited for and cancelled, with no matching of
//! handles against engines. The engine that started it is passed to those
//! calls (every holder of a ticket borrows its communicator, which owns the
//! engine), so that a handle need not hold its engine: the ranks' path hands
//! out its executor's op itself, one allocation and no reference count per
//! collective. Whether an engine works on the caller's buffers
//! or on copies of its own is decided once, by `Comm`, when it builds the
//! [`Job`].

use std::sync::Arc;

pub(crate) use crate::job::{Job, Message, Split};
use hpc_board::Result;
use inline::Host;

pub(crate) mod dpu;
pub(crate) mod inline;
#[cfg(feature = "mpi")]
pub(crate) mod mpi;
pub(crate) mod proxy;
pub(crate) mod thread;

/// An engine: starts collectives, and stops when its communicator goes.
pub(crate) trait Driver: Send + Sync {
    /// Starts `job`; its buffers stay valid until the ticket is finished
    /// (waited for, or cancelled).
    fn start(&self, job: Job<'_>) -> Result<Ticket>;

    /// An engine with communicators of its own (MPI's) splits them itself,
    /// and one with a shared service (the DPU-placed proxy) gives the new
    /// group the same service; `None`: the communicator builds the new
    /// group's engine like a new one.
    fn split(&self, _split: &Split<'_>) -> Option<Result<Box<dyn Driver>>> {
        None
    }

    /// Called once when the communicator is dropped: deliver what peers still
    /// wait for, stop helpers (threads), detach.
    fn shutdown(&self) {}

    /// The ranks' own path, where this engine runs collectives on it (the
    /// [`Pending`] of an executor op finds its executor here).
    fn host(&self) -> Option<&Host> {
        None
    }

    /// Starts a point-to-point message on an engine without the ranks' own
    /// path (MPI's, which has point-to-point of its own; the DPU-placed
    /// proxy's, which carries them): `bufs` are the send and receive buffers
    /// (pointer, length), valid until the ticket finishes (`stage` owns them
    /// where given). `None`: the engine has none.
    fn message(
        &self,
        _m: &Message,
        _bufs: (*const u8, usize, *mut u8, usize),
        _stage: Option<crate::job::Stage>,
    ) -> Option<Result<Ticket>> {
        None
    }

    /// Memory of `bytes` registered with this engine's transport, for an
    /// application buffer it reaches in place; `None` where it has none.
    fn register(&self, _bytes: usize) -> Option<Result<Arc<hpc_rdma::Region>>> {
        None
    }
}

/// One collective in flight, as its engine sees it.
///
/// Every method gets `engine`, the engine that started it.
pub(crate) trait Pending: Send + Sync {
    /// Whether it finished (advancing it where the engine progresses in `test`).
    fn test(&self, engine: &dyn Driver) -> bool;

    /// Waits until it finished or failed, then takes its outcome; `out`
    /// receives a staged result.
    fn wait(&self, engine: &dyn Driver, out: Option<&mut [u8]>) -> Result<()>;

    /// After a [`Pending::wait`] that failed (or timed out): makes sure the
    /// engine no longer touches its buffers.
    fn cancel(&self, engine: &dyn Driver);

    /// Finished, but nobody takes its outcome: drop what the engine keeps for it.
    fn discard(&self, _engine: &dyn Driver) {}

    /// The source and tag of the message a point-to-point receive matched,
    /// once known (a receive of any source or tag learns them when it
    /// matches a message).
    fn matched(&self) -> Option<(usize, u16)> {
        None
    }
}

/// An engine's handle on one collective.
pub(crate) type Ticket = Arc<dyn Pending>;
