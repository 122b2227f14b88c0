//! The spans of a collective's own path (its post and its wait), for the
//! timeline (`HPC_TRACE`) and debug logs.
//!
//! Each is built out of line, behind one check of the level in force: with
//! tracing off, a collective pays that check and a branch, and the code that
//! builds a span stays out of the functions it would otherwise bloat (measured
//! with `benches/collcost-abba.sh`: spans built in line cost a one-rank
//! collective of 0.2 us several percent with tracing off).

use hpc_collectives::Collective;
use tracing::span::EnteredSpan;
use tracing::Level;

/// What a collective's post span says besides the collective.
pub(crate) struct Post {
    /// Its sequence number.
    pub(crate) seq: u64,
    /// The posting rank.
    pub(crate) rank: usize,
    /// The larger of its send and receive buffers.
    pub(crate) bytes: usize,
    /// The engine's name.
    pub(crate) engine: &'static str,
}

/// The span of a collective's post (`debug`), entered; `None` when nothing
/// records it (then `p` is not called).
#[inline]
pub(crate) fn post(coll: &Collective, p: impl FnOnce() -> Post) -> Option<EnteredSpan> {
    tracing::enabled!(target: "hpc_comm::comm", Level::DEBUG).then(|| post_span(coll, p()))
}

#[cold]
#[inline(never)]
fn post_span(coll: &Collective, p: Post) -> EnteredSpan {
    tracing::debug_span!(
        target: "hpc_comm::comm",
        "post",
        op = %coll.kind(),
        seq = p.seq,
        rank = p.rank,
        bytes = p.bytes,
        engine = p.engine
    )
    .entered()
}

/// The span of a wait for a collective (`trace`), entered; `dropped`: the
/// wait of a request dropped unwaited. `None` when nothing records it.
#[inline]
pub(crate) fn wait(dropped: bool) -> Option<EnteredSpan> {
    tracing::enabled!(target: "hpc_comm::comm", Level::TRACE).then(|| wait_span(dropped))
}

#[cold]
#[inline(never)]
fn wait_span(dropped: bool) -> EnteredSpan {
    if dropped {
        tracing::trace_span!(target: "hpc_comm::comm", "wait", dropped = true).entered()
    } else {
        tracing::trace_span!(target: "hpc_comm::comm", "wait").entered()
    }
}
