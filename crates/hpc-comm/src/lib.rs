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
//! Between two ranks, a `Comm` also sends typed messages with tags
//! ([`Comm::send`], [`Comm::irecv`], [`Comm::sendrecv`], ...; a source may
//! be [`Source::Any`]), run by the same engines, and has requests that own
//! their buffers ([`OwnedSend`], [`OwnedRecv`], [`OwnedRequest`]).
//!
//! See [`comm`] for requests, buffer safety and the engines' trade-offs.
//!
//! What has run where: every engine on one machine and across the nodes of a
//! Docker cluster on one machine (tcp, and libfabric's `tcp;ofi_rxm`). The
//! proxy "placed as on a DPU" has run as a process in a container standing in
//! for the DPU, never on a BlueField or over an HCA; the book's "The proxy on a
//! DPU" says what that shows and what it does not.
//!
//! # Layers
//!
//! Under this crate, [`hpc_board`]: [`Error`] and the buffer traits ([`Elem`],
//! [`Buf`], [`BufMut`]), locks and mappings, the board (rings of descriptors,
//! staging slots and doorbells in a shared file) and [`SharedBuf`]; and
//! [`hpc_proxy`], the proxy process. In this crate, from the bottom: a job (a
//! collective and its buffers); the executor of the `Inline` and `Thread`
//! engines; the proxy's clients ([`proxy`]); the engines; and [`Comm`] on top. No
//! module imports one above it (`cargo xtask modcycles` checks).

pub mod comm;
pub mod conformance;
mod engines;
mod executor;
mod job;
#[cfg(feature = "mpi")]
mod mpi_engine;
pub mod proxy;
mod regbuf;
mod spans;

#[doc(hidden)]
pub use hpc_proxy::fuzz;

pub use comm::{
    remove_boards_of, settings_problems, AgentWake, Comm, CommOptions, Engine, OwnedRecv,
    OwnedRequest, OwnedSend, RecvRequest, Request, Scope, ScopedRequest, SendRequest, Source,
    Status, Tag, ANY_TAG, DEFAULT_PROXY_MIN, DEFAULT_STAGE_MAX, MAX_SPIN,
};
pub use hpc_board::{shm, Buf, BufMut, Elem};
pub use hpc_board::{Error, Result};
/// The types of `hpc-collectives` that appear in this crate's calls.
pub use hpc_collectives::{Algorithm, Collective, CollectiveError, DataType, Options, ReduceOp};
pub use proxy::Placement;
pub use regbuf::RegisteredBuf;
pub use shm::SharedBuf;
