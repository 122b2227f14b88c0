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
//! From the bottom: [`Error`] and the buffer traits ([`Elem`], [`Buf`],
//! [`BufMut`]); locks and mappings; the board (rings of descriptors, staging
//! slots and doorbells in a shared file); the executor of the `Inline` and
//! `Thread` engines; the proxy; `SharedBuf`; and [`Comm`] on top. No module
//! imports one above it (`cargo xtask modcycles` checks).

mod backoff;
mod board;
mod buf;
mod busy;
pub mod comm;
pub mod conformance;
mod engines;
mod error;
mod executor;
mod job;
mod map;
#[cfg(feature = "mpi")]
mod mpi_engine;
pub mod proxy;
mod regbuf;
pub mod shm;
mod sig;
mod spans;
mod sync;
mod tag;

/// Entry points for fuzzing what the proxy reads from a rank's memory: each
/// takes arbitrary bytes and returns a `Result`, never panicking.
#[doc(hidden)]
pub mod fuzz {
    use hpc_collectives::{BufferId, Step};

    /// What the proxy makes of a `SUBMIT` descriptor's blob from rank `rank`
    /// of `size`: `Ok` with the schedule's step count if it would run it. A blob
    /// it accepts yields a schedule whose every region lies inside the buffer
    /// lengths the blob claims or the schedule's scratch (the proxy checks each
    /// region again before touching memory; this says the two agree).
    pub fn proxy_submit(bytes: &[u8], rank: usize, size: usize) -> Result<usize, String> {
        let (blob, sched) =
            crate::proxy::parse_submit(bytes, rank, size).map_err(|c| format!("refused: {c:?}"))?;
        let mut steps = 0;
        for round in &sched.rounds {
            for step in &round.steps {
                steps += 1;
                let regions = match *step {
                    Step::Send { region, .. } | Step::Recv { region, .. } => vec![region],
                    Step::Copy { src, dst } | Step::Reduce { src, dst, .. } => vec![src, dst],
                };
                for r in regions {
                    let len = match r.buf {
                        BufferId::Send => blob.send_len,
                        BufferId::Recv => blob.recv_len,
                        BufferId::Scratch => sched.scratch_bytes,
                    };
                    assert!(
                        r.offset.checked_add(r.len).is_some_and(|end| end <= len),
                        "region {r} outside its buffer of {len} bytes in an accepted blob"
                    );
                }
            }
        }
        Ok(steps)
    }

    /// The kind of a descriptor word and the code of an answer, as the proxy
    /// and the ranks read them: `Ok` for a known kind.
    pub fn proxy_words(kind: u32, code: u64) -> Result<(), String> {
        let _ = crate::proxy::protocol::Code::from_wire(code);
        crate::proxy::protocol::Kind::from_wire(kind)
            .map(|_| ())
            .ok_or_else(|| format!("unknown kind {kind}"))
    }

    /// What the proxy in DPU placement makes of a request message from rank
    /// `rank` of `size`: `Ok` with the schedule's step count for a submit it
    /// would run (`Ok(0)` for a cancel, a detach, an open or a point-to-point
    /// message whose span checks pass, or that has none). An accepted
    /// submit's schedule lies inside the spans it claims (checked here again).
    pub fn dpu_request(bytes: &[u8], rank: usize, size: usize) -> Result<usize, String> {
        crate::proxy::dpu::fuzz_request(bytes, rank, size)
    }

    /// What a rank makes of its DPU-placed proxy's answer to an ask (which
    /// ranks' parts of a collective it has not received): the ranks named,
    /// or why the bytes are none.
    pub fn dpu_waiting(bytes: &[u8]) -> Result<Vec<usize>, String> {
        crate::proxy::dpu::fuzz_waiting(bytes)
    }

    /// A blob as a rank encodes it (for seeding the corpus).
    pub fn encode_submit(
        coll: &hpc_collectives::Collective,
        send_len: usize,
        recv_len: usize,
    ) -> Vec<u8> {
        crate::proxy::encode_blob(coll, send_len, recv_len)
    }
}

pub use buf::{Buf, BufMut, Elem};
pub use comm::{
    remove_boards_of, AgentWake, Comm, CommOptions, Engine, OwnedRecv, OwnedRequest, OwnedSend,
    RecvRequest, Request, Scope, ScopedRequest, SendRequest, Source, Status, Tag, ANY_TAG,
    DEFAULT_PROXY_MIN, DEFAULT_STAGE_MAX,
};
pub use error::{Error, Result};
/// The types of `hpc-collectives` that appear in this crate's calls.
pub use hpc_collectives::{Algorithm, Collective, CollectiveError, DataType, Options, ReduceOp};
pub use proxy::Placement;
pub use regbuf::RegisteredBuf;
pub use shm::SharedBuf;
