//! Communicators and non-blocking collectives for hpc-rs: the engines that
//! run the schedules of [`hpc_collectives`].
//!
//! `hpc-collectives` says *what* a collective does, as data, without I/O;
//! this crate does it: a [`Comm`] of the ranks of a
//! [`World`](hpc_runtime::World) starts collectives and returns [`Request`]s,
//! and an [`Engine`] moves the bytes, over a shared-memory board between the
//! ranks of a node (staging slots for small messages, one cross-memory read
//! for large ones) and `hpc-rdma` between nodes:
//!
//! * `Inline` — the application advances collectives in `test`/`wait`;
//! * `Thread` — a progress thread per process, sleeping on a futex;
//! * `Proxy` — a separate process per node ([`proxy`]) runs every local
//!   rank's schedules, with [`SharedBuf`]s mapped into it;
//! * `Mpi` (feature `mpi`) — the MPI library's own `MPI_I*` collectives.
//!
//! See [`comm`] for requests, buffer safety and the engines' trade-offs.
//!
//! # Layers
//!
//! From the bottom: [`Error`] and the buffer traits ([`Elem`], [`Buf`],
//! [`BufMut`]); locks and mappings; the board (rings of descriptors, staging
//! slots and doorbells in a shared file); the executor of the `Inline` and
//! `Thread` engines; the proxy; `SharedBuf`; and [`Comm`] on top. No module
//! imports one above it (`cargo xtask modcycles` checks).

mod backoff;
mod board;
mod buf;
pub mod comm;
mod engines;
mod error;
mod executor;
mod job;
mod map;
#[cfg(feature = "mpi")]
mod mpi_engine;
pub mod proxy;
pub mod shm;
mod sync;

pub use buf::{Buf, BufMut, Elem};
pub use comm::{
    AgentWake, Comm, CommOptions, Engine, Request, Scope, ScopedRequest, DEFAULT_PROXY_MIN,
    DEFAULT_STAGE_MAX,
};
pub use error::{Error, Result};
/// The types of `hpc-collectives` that appear in this crate's calls.
pub use hpc_collectives::{Algorithm, Collective, CollectiveError, DataType, Options, ReduceOp};
pub use shm::SharedBuf;
