//! Schedules: a collective as plain data.
//!
//! A [`Schedule`] is the per-rank program of one collective: a list of
//! [`Round`]s, each a set of independent [`Step`]s over [`Region`]s of the
//! user's send buffer, receive buffer, and a scratch buffer whose size is
//! part of the schedule.
//!
//! Execution contract for engines:
//!
//! * Rounds run in order. All steps of a round may be started at once (post
//!   every send and receive, run the local copies and reductions); the round
//!   is complete when all its steps are complete. A send is complete when its
//!   data has been handed off (the region may then be reused).
//! * Steps of one round never conflict: no region written by a step (a
//!   receive, the destination of a copy or reduce) overlaps any other region
//!   of the same round. Local steps that consume received data are always in
//!   a later round than the receive.
//! * The send buffer is only ever read.
//! * Messages match by `(source, destination, tag)` in posting order, like
//!   MPI's non-overtaking rule. Tags are small schedule-local numbers; an
//!   engine combines them with its own per-communicator collective sequence
//!   number so that concurrent collectives do not mix.
//! * A receive's region length equals the matching send's region length.
//!
//! Schedules are `serde`-serialisable and contain no closures or references,
//! so a progress thread or a proxy process can run them.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::kind::{Algorithm, CollectiveKind};
use crate::op::{DataType, ReduceOp};

/// Which buffer a [`Region`] lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BufferId {
    /// The user's send (input) buffer; read-only.
    Send,
    /// The user's receive (output) buffer.
    Recv,
    /// Engine-allocated scratch of [`Schedule::scratch_bytes`] bytes.
    Scratch,
}

impl BufferId {
    fn short(self) -> &'static str {
        match self {
            BufferId::Send => "send",
            BufferId::Recv => "recv",
            BufferId::Scratch => "scratch",
        }
    }
}

/// A byte range of one buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Region {
    /// The buffer.
    pub buf: BufferId,
    /// Offset in bytes from the start of the buffer.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

impl Region {
    /// A region of `buf` covering `offset..offset + len`.
    pub const fn new(buf: BufferId, offset: usize, len: usize) -> Self {
        Self { buf, offset, len }
    }

    /// Region of the send buffer.
    pub const fn send(offset: usize, len: usize) -> Self {
        Self::new(BufferId::Send, offset, len)
    }

    /// Region of the receive buffer.
    pub const fn recv(offset: usize, len: usize) -> Self {
        Self::new(BufferId::Recv, offset, len)
    }

    /// Region of the scratch buffer.
    pub const fn scratch(offset: usize, len: usize) -> Self {
        Self::new(BufferId::Scratch, offset, len)
    }

    /// One past the last byte; `usize::MAX` where `offset + len` is beyond it
    /// (no buffer holds such a region: a check of it against a buffer refuses
    /// it, where the sum panicked with "attempt to add with overflow").
    pub const fn end(&self) -> usize {
        self.offset.saturating_add(self.len)
    }

    /// Whether two regions share at least one byte.
    pub fn overlaps(&self, other: &Region) -> bool {
        self.buf == other.buf
            && self.len > 0
            && other.len > 0
            && self.offset < other.end()
            && other.offset < self.end()
    }

    /// The sub-region `offset..offset + len` relative to this region's start.
    pub const fn sub(&self, offset: usize, len: usize) -> Region {
        Region::new(self.buf, self.offset + offset, len)
    }
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}..{}]", self.buf.short(), self.offset, self.end())
    }
}

/// One operation of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Step {
    /// Send `region` to rank `peer` with `tag`.
    Send {
        /// Destination rank.
        peer: usize,
        /// Data to send.
        region: Region,
        /// Schedule-local tag.
        tag: u32,
    },
    /// Receive a message from rank `peer` with `tag` into `region`.
    Recv {
        /// Source rank.
        peer: usize,
        /// Where the data lands; its length is the expected message size.
        region: Region,
        /// Schedule-local tag.
        tag: u32,
    },
    /// Local copy `dst = src` (same length, non-overlapping).
    Copy {
        /// Source.
        src: Region,
        /// Destination.
        dst: Region,
    },
    /// Local reduction `dst[i] = dst[i] ⊕ src[i]` (see
    /// [`apply_reduce`](crate::apply_reduce)).
    Reduce {
        /// Operand read.
        src: Region,
        /// Operand read and written.
        dst: Region,
        /// Operation.
        op: ReduceOp,
        /// Element type.
        dtype: DataType,
    },
}

impl Step {
    /// The region this step writes, if any.
    pub fn written(&self) -> Option<Region> {
        match *self {
            Step::Send { .. } => None,
            Step::Recv { region, .. } => Some(region),
            Step::Copy { dst, .. } | Step::Reduce { dst, .. } => Some(dst),
        }
    }

    /// The regions this step reads (a reduce reads both operands).
    pub fn read(&self) -> impl Iterator<Item = Region> {
        let (a, b) = match *self {
            Step::Send { region, .. } => (Some(region), None),
            Step::Recv { .. } => (None, None),
            Step::Copy { src, .. } => (Some(src), None),
            Step::Reduce { src, dst, .. } => (Some(src), Some(dst)),
        };
        a.into_iter().chain(b)
    }

    /// Whether this step communicates (send or receive).
    pub fn is_comm(&self) -> bool {
        matches!(self, Step::Send { .. } | Step::Recv { .. })
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Send { peer, region, tag } => {
                write!(f, "send   -> {peer:<3} {region} {} B tag {tag}", region.len)
            }
            Step::Recv { peer, region, tag } => {
                write!(f, "recv   <- {peer:<3} {region} {} B tag {tag}", region.len)
            }
            Step::Copy { src, dst } => write!(f, "copy   {src} -> {dst} {} B", src.len),
            Step::Reduce {
                src,
                dst,
                op,
                dtype,
            } => {
                write!(f, "reduce {src} into {dst} {} B {op} {dtype}", src.len)
            }
        }
    }
}

/// A set of independent steps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Round {
    /// The steps; their order carries no meaning except the posting order of
    /// messages to/from the same peer with the same tag.
    pub steps: Vec<Step>,
}

/// The per-rank program of one collective operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// Which collective this is.
    pub kind: CollectiveKind,
    /// The algorithm that generated it (never [`Algorithm::Auto`]).
    pub algorithm: Algorithm,
    /// This rank.
    pub rank: usize,
    /// Number of ranks.
    pub size: usize,
    /// Minimum send-buffer size in bytes this schedule reads.
    pub send_bytes: usize,
    /// Minimum receive-buffer size in bytes this schedule touches.
    pub recv_bytes: usize,
    /// Scratch the engine must provide, in bytes (contents need not be
    /// initialised; the schedule writes before it reads).
    pub scratch_bytes: usize,
    /// The rounds, executed in order.
    pub rounds: Vec<Round>,
}

impl Schedule {
    /// Iterates over all steps of all rounds.
    pub fn steps(&self) -> impl Iterator<Item = &Step> {
        self.rounds.iter().flat_map(|r| r.steps.iter())
    }

    /// Total number of bytes this rank sends.
    pub fn bytes_sent(&self) -> usize {
        self.steps()
            .map(|s| match s {
                Step::Send { region, .. } => region.len,
                _ => 0,
            })
            .sum()
    }

    /// Number of messages this rank sends.
    pub fn messages_sent(&self) -> usize {
        self.steps()
            .filter(|s| matches!(s, Step::Send { .. }))
            .count()
    }

    /// Whether the schedule does nothing.
    pub fn is_empty(&self) -> bool {
        self.rounds.is_empty()
    }
}

/// A copy between the calling rank's own buffers: from its send or receive
/// buffer into its receive buffer, no scratch (a rank's own block of an
/// allgather or alltoall, the first copy of an allreduce). Where such a copy
/// is in the first round, the rank may make it itself when it posts the
/// collective (see [`Schedule::run_own_copies`]).
pub fn own_copy(step: &Step) -> Option<(Region, Region)> {
    match *step {
        Step::Copy { src, dst } if src.buf != BufferId::Scratch && dst.buf == BufferId::Recv => {
            Some((src, dst))
        }
        _ => None,
    }
}

impl Schedule {
    /// Makes the first round's [`own_copy`] steps on `send` and `recv`, and
    /// says whether it did: `false`, with nothing written, where a region
    /// lies outside its buffer or two of them overlap. An engine that runs
    /// the schedule afterwards skips exactly these steps. By the schedule
    /// contract no other step of the first round touches what they write,
    /// and every later round sees them done.
    pub fn run_own_copies(&self, send: &[u8], recv: &mut [u8]) -> bool {
        let Some(first) = self.rounds.first() else {
            return true;
        };
        let copies: Vec<(Region, Region)> = first.steps.iter().filter_map(own_copy).collect();
        let fits = |r: &Region| {
            let len = if r.buf == BufferId::Send {
                send.len()
            } else {
                recv.len()
            };
            r.offset.checked_add(r.len).is_some_and(|end| end <= len)
        };
        let sound = copies.iter().enumerate().all(|(i, (src, dst))| {
            src.len == dst.len
                && fits(src)
                && fits(dst)
                && copies[i + 1..]
                    .iter()
                    .all(|(s2, d2)| !dst.overlaps(d2) && !dst.overlaps(s2) && !d2.overlaps(src))
                && !dst.overlaps(src)
        });
        if !sound {
            return false;
        }
        for (src, dst) in copies {
            match src.buf {
                BufferId::Send => {
                    recv[dst.offset..dst.end()].copy_from_slice(&send[src.offset..src.end()])
                }
                _ => recv.copy_within(src.offset..src.end(), dst.offset),
            }
        }
        true
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} / {}: rank {} of {}, send {} B, recv {} B, scratch {} B, {} round{}",
            self.kind,
            self.algorithm,
            self.rank,
            self.size,
            self.send_bytes,
            self.recv_bytes,
            self.scratch_bytes,
            self.rounds.len(),
            if self.rounds.len() == 1 { "" } else { "s" }
        )?;
        for (i, round) in self.rounds.iter().enumerate() {
            writeln!(f, "  round {i}:")?;
            for step in &round.steps {
                writeln!(f, "    {step}")?;
            }
        }
        Ok(())
    }
}

/// Incremental construction of a [`Schedule`] (crate-internal).
#[derive(Debug)]
pub(crate) struct Builder {
    sched: Schedule,
    cur: Vec<Step>,
}

impl Builder {
    pub(crate) fn new(
        kind: CollectiveKind,
        algorithm: Algorithm,
        rank: usize,
        size: usize,
    ) -> Self {
        assert!(size > 0, "communicator size must be positive");
        assert!(rank < size, "rank {rank} out of range for size {size}");
        Self {
            sched: Schedule {
                kind,
                algorithm,
                rank,
                size,
                send_bytes: 0,
                recv_bytes: 0,
                scratch_bytes: 0,
                rounds: Vec::new(),
            },
            cur: Vec::new(),
        }
    }

    /// Declares the user buffer sizes.
    pub(crate) fn buffers(&mut self, send: usize, recv: usize) {
        self.sched.send_bytes = send;
        self.sched.recv_bytes = recv;
    }

    /// Reserves `len` bytes of scratch (64-byte aligned) and returns it. A
    /// total past what a `usize` counts saturates at `usize::MAX`, which
    /// [`Collective::schedule`](crate::Collective::schedule) refuses
    /// (several scratch blocks of a collective just under `isize::MAX` bytes
    /// would otherwise wrap).
    pub(crate) fn alloc(&mut self, len: usize) -> Region {
        let off = self
            .sched
            .scratch_bytes
            .checked_next_multiple_of(64)
            .unwrap_or(usize::MAX);
        self.sched.scratch_bytes = off.saturating_add(len);
        Region::scratch(off, len)
    }

    pub(crate) fn send(&mut self, peer: usize, region: Region, tag: u32) {
        self.cur.push(Step::Send { peer, region, tag });
    }

    pub(crate) fn recv(&mut self, peer: usize, region: Region, tag: u32) {
        self.cur.push(Step::Recv { peer, region, tag });
    }

    /// A local copy; zero-length copies and self-copies are dropped.
    pub(crate) fn copy(&mut self, src: Region, dst: Region) {
        debug_assert_eq!(src.len, dst.len);
        if src.len > 0 && src != dst {
            self.cur.push(Step::Copy { src, dst });
        }
    }

    /// A local reduction; zero-length ones are dropped.
    pub(crate) fn reduce(&mut self, src: Region, dst: Region, op: ReduceOp, dtype: DataType) {
        debug_assert_eq!(src.len, dst.len);
        if src.len > 0 {
            self.cur.push(Step::Reduce {
                src,
                dst,
                op,
                dtype,
            });
        }
    }

    /// Closes the current round (empty rounds are dropped).
    pub(crate) fn next_round(&mut self) {
        if !self.cur.is_empty() {
            self.sched.rounds.push(Round {
                steps: std::mem::take(&mut self.cur),
            });
        }
    }

    pub(crate) fn finish(mut self) -> Schedule {
        self.next_round();
        self.sched
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_overlap() {
        let a = Region::recv(0, 8);
        assert!(a.overlaps(&Region::recv(7, 1)));
        assert!(!a.overlaps(&Region::recv(8, 1)));
        assert!(!a.overlaps(&Region::send(0, 8)));
        assert!(!a.overlaps(&Region::recv(3, 0)));
        assert_eq!(a.sub(2, 3), Region::recv(2, 3));
        assert_eq!(a.to_string(), "recv[0..8]");
    }

    #[test]
    fn builder_drops_empty() {
        let mut b = Builder::new(CollectiveKind::Barrier, Algorithm::Dissemination, 0, 2);
        b.next_round();
        b.copy(Region::send(0, 0), Region::recv(0, 0));
        b.next_round();
        b.send(1, Region::recv(0, 0), 0);
        let s = b.finish();
        assert_eq!(s.rounds.len(), 1);
        assert_eq!(b_alloc_check(), (64, 70));
    }

    #[test]
    fn a_rank_makes_only_its_first_rounds_copies_between_its_own_buffers() {
        let mut b = Builder::new(CollectiveKind::Allgather, Algorithm::Ring, 0, 2);
        b.copy(Region::send(0, 2), Region::recv(4, 2));
        b.copy(Region::recv(0, 1), Region::recv(7, 1));
        let t = b.alloc(2);
        b.copy(t, Region::recv(2, 2));
        b.send(1, Region::send(0, 2), 0);
        b.next_round();
        b.copy(Region::send(0, 2), Region::recv(0, 2));
        let s = b.finish();
        let own: Vec<_> = s.rounds[0].steps.iter().filter_map(own_copy).collect();
        assert_eq!(own.len(), 2, "{s}");
        let mut recv = [9u8; 8];
        assert!(s.run_own_copies(&[1, 2], &mut recv));
        assert_eq!(recv, [9, 9, 9, 9, 1, 2, 9, 9]);
        // Out of bounds: nothing is written, the engine makes them.
        let mut short = [9u8; 5];
        assert!(!s.run_own_copies(&[1, 2], &mut short));
        assert_eq!(short, [9; 5]);
        let mut recv = [9u8; 8];
        assert!(!s.run_own_copies(&[1], &mut recv));
        assert_eq!(recv, [9; 8]);
    }

    #[test]
    fn overlapping_own_copies_are_left_to_the_engine() {
        let mut b = Builder::new(CollectiveKind::Allgather, Algorithm::Ring, 0, 2);
        b.copy(Region::recv(0, 4), Region::recv(2, 4));
        let s = b.finish();
        let mut recv = [1u8, 2, 3, 4, 5, 6];
        assert!(!s.run_own_copies(&[], &mut recv));
        assert_eq!(recv, [1, 2, 3, 4, 5, 6]);
        let mut b = Builder::new(CollectiveKind::Allgather, Algorithm::Ring, 0, 2);
        b.copy(Region::recv(0, 2), Region::recv(4, 2));
        let s = b.finish();
        assert!(s.run_own_copies(&[], &mut recv));
        assert_eq!(recv, [1, 2, 3, 4, 1, 2]);
    }

    #[test]
    fn an_empty_region_overlaps_nothing_from_either_side() {
        let a = Region::recv(0, 8);
        let empty = Region::recv(3, 0);
        assert!(!a.overlaps(&empty));
        assert!(!empty.overlaps(&a), "an empty region inside another");
        assert!(!empty.overlaps(&empty));
    }

    #[test]
    fn only_sends_and_receives_communicate() {
        let (r, s) = (Region::recv(0, 4), Region::send(0, 4));
        assert!(Step::Send {
            peer: 1,
            region: s,
            tag: 0
        }
        .is_comm());
        assert!(Step::Recv {
            peer: 1,
            region: r,
            tag: 0
        }
        .is_comm());
        assert!(!Step::Copy { src: s, dst: r }.is_comm());
        let reduce = Step::Reduce {
            src: s,
            dst: r,
            op: ReduceOp::Sum,
            dtype: DataType::U8,
        };
        assert!(!reduce.is_comm());
    }

    #[test]
    fn a_schedule_counts_its_messages_and_knows_when_it_is_empty() {
        let b = Builder::new(CollectiveKind::Allgather, Algorithm::Ring, 0, 4);
        assert!(b.finish().is_empty(), "no step");
        let mut b = Builder::new(CollectiveKind::Allgather, Algorithm::Ring, 0, 4);
        for peer in 1..4 {
            b.send(peer, Region::send(0, 2), 0);
            b.recv(peer, Region::recv(2 * peer, 2), 0);
            b.next_round();
        }
        let s = b.finish();
        assert!(!s.is_empty());
        assert_eq!(s.messages_sent(), 3, "{s}");
        assert_eq!(s.bytes_sent(), 6);
    }

    #[test]
    fn a_zero_length_reduce_is_dropped() {
        let mut b = Builder::new(CollectiveKind::Allreduce, Algorithm::Ring, 0, 2);
        b.reduce(
            Region::recv(0, 0),
            Region::recv(4, 0),
            ReduceOp::Sum,
            DataType::U8,
        );
        assert!(b.finish().is_empty());
    }

    #[test]
    fn own_copies_that_overlap_another_copys_regions_are_left_to_the_engine() {
        // The first copy writes what the second reads.
        let mut b = Builder::new(CollectiveKind::Allgather, Algorithm::Ring, 0, 2);
        b.copy(Region::send(0, 4), Region::recv(0, 4));
        b.copy(Region::recv(2, 4), Region::recv(8, 4));
        let s = b.finish();
        let mut recv = [7u8; 12];
        assert!(!s.run_own_copies(&[1, 2, 3, 4], &mut recv));
        assert_eq!(recv, [7; 12]);
        // The second copy writes what the first reads.
        let mut b = Builder::new(CollectiveKind::Allgather, Algorithm::Ring, 0, 2);
        b.copy(Region::recv(0, 4), Region::recv(8, 4));
        b.copy(Region::send(0, 4), Region::recv(2, 4));
        let s = b.finish();
        assert!(!s.run_own_copies(&[1, 2, 3, 4], &mut recv));
        assert_eq!(recv, [7; 12]);
    }

    fn b_alloc_check() -> (usize, usize) {
        let mut b = Builder::new(CollectiveKind::Barrier, Algorithm::Dissemination, 0, 1);
        let _ = b.alloc(3);
        let r = b.alloc(6);
        (r.offset, b.finish().scratch_bytes)
    }
}
