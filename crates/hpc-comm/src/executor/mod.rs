//! The schedule executor shared by the `Inline` and `Thread` engines.
//!
//! A [`Core`] holds the collectives of one communicator that are in flight
//! in this process and drives them. The schedule logic is not here: each
//! collective is an [`interp::Machine`](hpc_collectives::interp), the
//! interpreter without I/O that the simulator runs too, and arrivals wait in
//! its [`Matcher`] by `(source, tag)`. The `Core` is the I/O around it: it
//! carries out the machine's actions (a send staged through the board's
//! slots, with an `RTS`/`TAIL` for what does not fit, or over the network;
//! a message landed from the sender's slots or with one `process_vm_readv`
//! from the sender's buffer, answered by `FIN`) and feeds it the board's
//! descriptors and the network's completions as events. Tags are
//! `(collective sequence number << 32) | schedule tag`. See `board.rs` for
//! the two ways data moves.
//!
//! The `Inline` engine calls [`Core::progress`] from `test`/`wait` on the
//! application's thread; the `Thread` engine's agent calls it when its
//! doorbell rings and sleeps in between.

mod agent;
mod local;
mod notice;

pub(crate) use agent::{agent_loop, raise_priority, Shared};
pub(crate) use hpc_board::p2p::{p2p_tag, p2p_type_name, Want, P2P_SEQ};
use local::{all_slots, tag64, Arrived, NET_HEAD};

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hpc_collectives::interp::{Action, Arrival, InterpError, Machine, Matcher, Memory};
use hpc_collectives::{BufferId, DataType, ReduceOp, Region, Schedule, Step};

use crate::job::Stage;
use hpc_board::board::{Board, Desc, Failure, FIN};
use hpc_board::sig::Sig;
use hpc_board::sync::lock;
use hpc_board::Error;

/// The network path of a communicator that spans nodes: messages to ranks on
/// other nodes go through `hpc-rdma` (TCP, or verbs where built and present),
/// eagerly (the bytes are copied into the message when the round is posted),
/// while ranks on this node keep the board and its single-copy reads.
pub(crate) struct Net {
    pub t: Arc<hpc_rdma::Transport>,
    /// Transport (world) rank of each communicator rank.
    pub world: Vec<usize>,
    /// Whether each communicator rank is on this node (reached through the board).
    pub local: Vec<bool>,
    /// Tells this communicator's messages from its relatives' on a shared transport.
    pub id: u16,
}

impl Net {
    /// The transport tag: communicator id, the low 32 bits of the sequence
    /// number (messages of one pair and tag are matched in order, so a wrap
    /// after 4 billion collectives is harmless), the schedule's tag (< 65536).
    fn tag(&self, seq: u64, tag: u32) -> u64 {
        debug_assert!(tag < 1 << 16);
        ((self.id as u64) << 48) | ((seq & 0xffff_ffff) << 16) | (tag as u64 & 0xffff)
    }

    /// The transport tag of the failure notices of this communicator
    /// ([`Core::notify`]): beyond every collective's (their sequence numbers
    /// stay below [`P2P_SEQ`]) and the goodbye's (tags `0xfffe` and `0xffff`).
    fn notice_tag(&self) -> u64 {
        self.tag(u64::from(u32::MAX), 0xfffd)
    }

    /// The transport tag of every point-to-point message of this
    /// communicator: one, so that a receive of any source or tag can be
    /// matched here (each message carries its schedule tag in a header of
    /// [`P2P_HEAD`] bytes), and the transport keeps each sender's order.
    fn p2p_tag(&self) -> u64 {
        self.tag(P2P_SEQ, 0)
    }

    fn error(&self, e: hpc_rdma::Error) -> Error {
        match e {
            hpc_rdma::Error::PeerLost { rank, .. } => {
                match self.world.iter().position(|&w| w == rank) {
                    Some(r) if e.is_closed_in_order() => Error::RankLeft { rank: r },
                    Some(r) => Error::RankLost { rank: r },
                    None => Error::transport_from("a peer of the collective", e),
                }
            }
            e => Error::transport_from("moving a collective's data", e),
        }
    }
}

/// Bytes of the header of a point-to-point message between nodes: its
/// schedule tag ([`p2p_tag`]), little-endian (as long as a collective's
/// message's header, [`NET_HEAD`]).
const P2P_HEAD: usize = NET_HEAD;

/// Where an operation's buffers live in this process.
pub(crate) struct Buffers {
    pub send: *const u8,
    pub send_len: usize,
    pub recv: *mut u8,
    pub recv_len: usize,
    /// Engine-owned scratch.
    pub scratch: Vec<u8>,
    /// Engine-owned staging copies that `send`/`recv` point into (staged
    /// requests), kept alive as long as the operation.
    pub stage: Option<Stage>,
}

// SAFETY: the raw pointers point either into `stage` (owned here) or into
// user buffers that a `Scope` keeps borrowed until the operation is finished
// or cancelled; they are only dereferenced under the operation's lock.
unsafe impl Send for Buffers {}

impl Buffers {
    fn ptr(&mut self, r: &Region) -> *mut u8 {
        let (base, len) = match r.buf {
            BufferId::Send => (self.send as *mut u8, self.send_len),
            BufferId::Recv => (self.recv, self.recv_len),
            BufferId::Scratch => (self.scratch.as_mut_ptr(), self.scratch.len()),
        };
        assert!(
            r.end() <= len,
            "schedule region {r} outside its buffer of {len} bytes"
        );
        // SAFETY: bounds checked just above.
        unsafe { base.add(r.offset) }
    }
}

/// An operation's buffers are the interpreter's memory for local steps.
impl Memory for Buffers {
    type Error = Error;

    fn copy(&mut self, src: Region, dst: Region) -> Result<(), Error> {
        let (s, t) = (self.ptr(&src), self.ptr(&dst));
        // SAFETY: both regions were bounds-checked by `ptr`; the schedule
        // guarantees a copy's regions do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(s as *const u8, t, src.len) };
        Ok(())
    }

    fn reduce(
        &mut self,
        op: ReduceOp,
        dtype: DataType,
        src: Region,
        dst: Region,
    ) -> Result<(), Error> {
        let (s, t) = (self.ptr(&src), self.ptr(&dst));
        // SAFETY: bounds-checked regions of live buffers; source and
        // destination do not overlap (schedule invariant).
        let (s, t) = unsafe {
            (
                std::slice::from_raw_parts(s as *const u8, src.len),
                std::slice::from_raw_parts_mut(t, dst.len),
            )
        };
        hpc_collectives::apply_reduce(op, dtype, s, t)
            .map_err(|e| Error::transport_from("reduction", e))
    }
}

/// Status of an operation.
#[derive(Debug)]
pub(crate) enum Status {
    Running,
    Done,
    Failed(Error),
}

/// The mutable part of an operation.
pub(crate) struct OpData {
    pub seq: u64,
    /// What its peers must agree on ([`Sig::NONE`] for a point-to-point
    /// message): its messages carry it, and one that arrives with another
    /// fails it.
    pub sig: Sig,
    pub sched: Schedule,
    pub bufs: Buffers,
    /// The schedule's interpreter: the round, its open sends and receives.
    m: Machine,
    /// Rounds before this one still have a message that an eager agent posts
    /// (any message when it has a core of its own, else one too large to
    /// stage): while one of them is to come, an arrival is worth waking the
    /// agent for. Set by [`Core::submit`].
    wake_until: usize,
    /// Receives and sends in flight on the network (ranks on other nodes):
    /// peer, transport operation, schedule tag.
    net_recvs: Vec<(usize, hpc_rdma::OpId, u32)>,
    net_sends: Vec<(usize, hpc_rdma::OpId, u32)>,
    /// A point-to-point receive not matched to a message yet: its machine
    /// is not polled until a message it takes waits ([`Core::bind_p2p`]).
    want: Option<Want>,
    /// A point-to-point send announced by its address to a rank of this
    /// node: the peer and the message's number ([`Op::withdraw`]).
    announced: Option<(usize, u32)>,
    pub status: Status,
}

/// One collective in flight, shared by the request and the engine.
///
/// It is also the request's handle ([`Ticket`](crate::engines::Ticket)),
/// which finds its executor through the engine passed to its calls: a
/// collective costs one allocation and no reference count of the engine, as
/// before the engines had a trait. A wrapper holding the op and an `Arc` of
/// its engine cost 35-40 ns more per collective (1 rank, a 0.19 µs broadcast;
/// `benches/collcost-abba.sh`), half of it the second allocation, half the
/// reference count.
pub(crate) struct Op {
    pub data: Mutex<OpData>,
    pub done: AtomicBool,
}

impl Op {
    pub(crate) fn new(seq: u64, sig: Sig, sched: Schedule, bufs: Buffers) -> Arc<Op> {
        let empty = sched.rounds.is_empty();
        let m = Machine::new(&sched, false);
        Arc::new(Op {
            data: Mutex::new(OpData {
                seq,
                sig,
                sched,
                bufs,
                m,
                wake_until: 0,
                net_recvs: Vec::new(),
                net_sends: Vec::new(),
                want: None,
                announced: None,
                status: if empty { Status::Done } else { Status::Running },
            }),
            done: AtomicBool::new(empty),
        })
    }

    /// Makes this operation (a point-to-point receive) wait for a message
    /// that `want` takes, and take the earliest of them.
    pub(crate) fn take_first(&self, want: Want) {
        lock(&self.data).want = Some(want);
    }

    /// The source and tag of the message a point-to-point receive matched
    /// (`None` before it matched one).
    pub(crate) fn matched(&self) -> Option<(usize, u16)> {
        let d = lock(&self.data);
        if d.want.is_some() {
            return None;
        }
        let m = d.sched.steps().find_map(|s| match s {
            Step::Recv { peer, tag, .. } => Some((*peer, *tag as u16)),
            _ => None,
        });
        m
    }

    /// Peers this operation waits for now.
    pub(crate) fn blocked_on(&self) -> Vec<usize> {
        let d = lock(&self.data);
        d.m.open_recvs()
            .iter()
            .map(|r| r.peer)
            .chain(d.m.open_sends().iter().map(|s| s.0))
            // A receive of one source that matched nothing yet waits for it.
            .chain(d.want.and_then(|w| w.source()))
            .collect()
    }

    /// Fails this collective where another of the `size` members (this
    /// rank is `me`) recorded on `board` that it failed there
    /// ([`Board::mark_failed`]), with the error that record means here
    /// ([`failed_on`]), recorded in this rank's slot in turn: a rank that
    /// reads this rank's buffer, or waits for it, learns of it too. Whether
    /// it failed so; never for a point-to-point operation.
    pub(crate) fn fail_as_elsewhere(&self, board: &Board, me: usize, size: usize) -> bool {
        let (seq, ours) = {
            let d = lock(&self.data);
            (d.seq, d.sig)
        };
        if seq == P2P_SEQ {
            return false;
        }
        let Some(f) = (0..size)
            .filter(|&r| r != me)
            .find_map(|r| failed_on(board, me, r, seq, ours))
        else {
            return false;
        };
        self.fail_marked(board, me, f);
        true
    }

    /// Fails this operation with `f` (as [`Failure::error`] names it),
    /// recorded first on `board` in rank `me`'s slot for the other members
    /// ([`Board::mark_failed`]; not for a point-to-point operation), so that
    /// those that wait for this collective and not for the peer it names
    /// (they wait for this rank) fail too.
    pub(crate) fn fail_marked(&self, board: &Board, me: usize, f: Failure) {
        let seq = lock(&self.data).seq;
        if seq != P2P_SEQ {
            board.mark_failed(me, seq as u32, f);
        }
        self.fail(f.error());
    }

    /// Before a point-to-point send that failed gives its buffer back: where
    /// it announced its message by address to a rank of this node, it
    /// records on `board` (rank `me`'s slot) that it withdrew it, so that a
    /// receive that reads it later drops what it read (the caller may free
    /// or reuse the buffer at once).
    pub(crate) fn withdraw(&self, board: &Board, me: usize) {
        let Some((peer, serial)) = lock(&self.data).announced.take() else {
            return;
        };
        board.withdraw(me, peer, serial);
    }

    /// Fails this operation with `e`, its own timeout, recorded first on
    /// `board` in rank `me`'s slot ([`Failure::TimedOut`], not for a
    /// point-to-point operation): its buffers go back to the caller, who may
    /// reuse them at once, and a member that reads them at their address
    /// after must not take them for its part (a member late to a broadcast
    /// whose root had timed out took the root's reused buffer as the
    /// broadcast, `Ok`); the members waiting for this rank fail at their
    /// next check, not at their own timeout.
    pub(crate) fn fail_timed_out(&self, board: &Board, me: usize, waited_for: usize, e: Error) {
        let seq = lock(&self.data).seq;
        if seq != P2P_SEQ {
            let f = Failure::TimedOut {
                peer: me as u32,
                waited_for: waited_for as u32,
            };
            board.mark_failed(me, seq as u32, f);
        }
        self.fail(e);
    }

    /// Marks the operation failed (the engine then drops it without touching
    /// its buffers again).
    pub(crate) fn fail(&self, e: Error) {
        let mut d = lock(&self.data);
        if matches!(d.status, Status::Running) {
            d.status = Status::Failed(e);
        }
        self.done.store(true, Ordering::Release);
    }
}

/// Why this rank's (`me`) collective `seq`, of signature `ours`, failed,
/// where rank `r` recorded on `board` that it failed there
/// ([`Board::mark_failed`]), as this rank records it in turn: a mismatch
/// names a rank whose collective is not this rank's (`r`'s peer where this
/// rank called `r`'s collective, else `r`), with this rank's signature as
/// its own. `None` where `r` recorded no failure of `seq` (and for a
/// point-to-point operation).
fn failed_on(board: &Board, me: usize, r: usize, seq: u64, ours: Sig) -> Option<Failure> {
    if seq == P2P_SEQ {
        return None;
    }
    Some(match board.failed(r, seq as u32)? {
        Failure::Mismatch { peer, ours: o, .. } if o != ours.0 || peer as usize == me => {
            Failure::Mismatch {
                peer: r as u32,
                ours: ours.0,
                theirs: o,
            }
        }
        Failure::Mismatch { peer, theirs, .. } => Failure::Mismatch {
            peer,
            ours: ours.0,
            theirs,
        },
        f => f,
    })
}

/// The per-communicator progress state of this process.
pub(crate) struct Core {
    pub board: Arc<Board>,
    pub me: usize,
    pub size: usize,
    pub pids: Vec<u32>,
    /// Map from communicator rank to board slot (identity here).
    ops: VecDeque<Arc<Op>>,
    /// What arrived and no receive took yet, by (source, tag).
    matcher: Matcher<(usize, u64), Arrived>,
    /// The point-to-point messages announced and not matched by a receive
    /// yet, in the order they were announced: source and schedule tag (a
    /// receive of any tag, or of another element type, needs the order
    /// across the matcher's keys).
    p2p_order: VecDeque<(usize, u32)>,
    /// This rank's free staging slots on the board (a bit per slot).
    free_slots: u64,
    /// Per peer, a mask of its slots this rank is done with (sent as one `FREE`).
    freed: Vec<u64>,
    /// Messages up to this many bytes are staged (see `CommOptions::stage_max`).
    pub stage_max: usize,
    /// Whether the progress agent has a core of its own (`AgentWake::Eager`):
    /// then waking it for a round to post is worth it whatever the size.
    pub agent_core: bool,
    /// Staged messages refused for their size: their chunks still to come are
    /// handed back as they arrive.
    discard: std::collections::HashSet<(usize, u64)>,
    fins: HashMap<(usize, u64), usize>,
    /// Messages of this rank that their receiver refused, by (receiver,
    /// tag): with the receiver's signature where it refused another
    /// collective's message ([`Sig::NONE`] for a size or type refusal).
    rejected: HashMap<(usize, u64), Sig>,
    outq: Vec<VecDeque<Desc>>,
    /// Per peer: whether what waits in `outq` is worth waking its progress
    /// agent for (see [`Core::flush_peer`]).
    wake: Vec<bool>,
    /// Ranks on other nodes, when the communicator spans nodes.
    net: Option<Net>,
    /// Standing receives of point-to-point messages from the ranks on other
    /// nodes (one per such rank, opened by the first point-to-point receive):
    /// each message goes to the matcher as it arrives, as the board's do.
    inbox: Vec<(usize, hpc_rdma::OpId)>,
    /// Whether the inbox was opened (it shrinks as its ranks' messages end).
    inbox_open: bool,
    /// Ranks on other nodes whose messages ended (their connection broke or
    /// closed), each with whether it closed in order (it left): a receive
    /// from one of them alone that no message they sent before fits fails
    /// with `RankLeft` or `RankLost` rather than wait for the timeout.
    ended: Vec<(usize, bool)>,
    /// Standing receives of failure notices from the ranks on other nodes
    /// (one per such rank while its connection lasts; [`Core::notify`]).
    notices_in: Vec<(usize, hpc_rdma::OpId)>,
    /// Failure notices sent, not yet completed.
    notices_out: Vec<hpc_rdma::OpId>,
    /// The number of the last point-to-point message announced by address
    /// (`Core::post_local_send`; 0 is none), carried in its announcement's
    /// signature word.
    p2p_serial: u32,
    /// Network operations in flight (completions arrive without a doorbell ring,
    /// so whoever progresses polls while this is non-zero).
    net_inflight: usize,
    /// Set when the engine stopped (its thread died or the comm was dropped).
    pub stopped: bool,
}

impl Core {
    pub(crate) fn new(
        board: Arc<Board>,
        me: usize,
        size: usize,
        pids: Vec<u32>,
        net: Option<Net>,
        stage_max: usize,
    ) -> Core {
        let free_slots = all_slots(board.slots());
        let mut notices_in = Vec::new();
        if let Some(net) = &net {
            for p in (0..size).filter(|&p| !net.local[p]) {
                match net.t.recv(net.world[p], net.notice_tag()) {
                    Ok(id) => notices_in.push((p, id)),
                    Err(e) => {
                        tracing::debug!(error = %e, rank = p, "no failure notices from a rank")
                    }
                }
            }
        }
        Core {
            board,
            me,
            size,
            pids,
            ops: VecDeque::new(),
            matcher: Matcher::new(),
            p2p_order: VecDeque::new(),
            free_slots,
            freed: vec![0; size],
            stage_max,
            agent_core: false,
            discard: std::collections::HashSet::new(),
            fins: HashMap::new(),
            rejected: HashMap::new(),
            outq: vec![VecDeque::new(); size],
            wake: vec![false; size],
            net,
            inbox: Vec::new(),
            inbox_open: false,
            ended: Vec::new(),
            notices_in,
            notices_out: Vec::new(),
            p2p_serial: 0,
            net_inflight: 0,
            stopped: false,
        }
    }

    /// Before the transport may close: a two-phase goodbye with every rank on
    /// another node. Receiving a peer's second message means it has read
    /// everything this rank sent, and this rank has read everything it sent,
    /// so no socket closes with unread data (a close with unread data resets
    /// the connection, and the peer loses what it had not read yet). Bounded
    /// by `timeout` in all; a lost peer ends its part at once.
    pub(crate) fn net_goodbye(&mut self, timeout: Duration) {
        let Some(net) = &self.net else { return };
        let deadline = std::time::Instant::now() + timeout;
        let peers: Vec<usize> = (0..self.size).filter(|&p| !net.local[p]).collect();
        for phase in 0..2u32 {
            // Beyond any schedule's tags (which stay below the communicator size).
            let tag = net.tag(u64::from(u32::MAX), 0xfffe + phase);
            let mut ops = Vec::new();
            for &p in &peers {
                ops.extend(net.t.send(net.world[p], tag, Vec::new()).ok());
                ops.extend(net.t.recv(net.world[p], tag).ok());
            }
            for op in ops {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if let Err(e) = net.t.wait_timeout(op, left) {
                    tracing::debug!(error = %e, "communicator goodbye");
                }
            }
        }
    }

    /// Opens the standing receives of point-to-point messages from the ranks
    /// on other nodes, once (a communicator that receives none never has them).
    pub(crate) fn open_inbox(&mut self) -> Result<(), Error> {
        let Some(net) = &self.net else { return Ok(()) };
        if self.inbox_open {
            return Ok(());
        }
        self.inbox_open = true;
        for p in (0..self.size).filter(|&p| !net.local[p]) {
            match net.t.recv(net.world[p], net.p2p_tag()) {
                Ok(id) => self.inbox.push((p, id)),
                Err(e) => {
                    // Only a receive from it fails (`Core::advance`).
                    tracing::debug!(error = %e, rank = p, "point-to-point messages from a rank end");
                    self.ended.push((p, e.is_closed_in_order()));
                }
            }
        }
        Ok(())
    }

    /// Moves the point-to-point messages that arrived from other nodes into
    /// the matcher, each sender's in the order it sent them.
    fn poll_inbox(&mut self) {
        let Some(net) = &self.net else { return };
        let mut inbox = std::mem::take(&mut self.inbox);
        let mut got = Vec::new();
        let mut i = 0;
        while i < inbox.len() {
            let (p, id) = inbox[i];
            match net.t.test(id) {
                Ok(None) => i += 1,
                Ok(Some(payload)) => {
                    got.push((p, payload.into_bytes()));
                    // The next one from the same rank, at once.
                    match net.t.recv(net.world[p], net.p2p_tag()) {
                        Ok(id) => inbox[i].1 = id,
                        Err(e) => {
                            tracing::debug!(error = %e, rank = p, "point-to-point messages from a rank end");
                            inbox.swap_remove(i);
                            self.ended.push((p, e.is_closed_in_order()));
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, rank = p, "point-to-point messages from a rank end");
                    inbox.swap_remove(i);
                    self.ended.push((p, e.is_closed_in_order()));
                }
            }
        }
        self.inbox = inbox;
        for (p, mut bytes) in got {
            if bytes.len() < P2P_HEAD {
                tracing::warn!(
                    rank = p,
                    len = bytes.len(),
                    "a point-to-point message without its header"
                );
                continue;
            }
            let mut head = [0u8; P2P_HEAD];
            head.copy_from_slice(&bytes[..P2P_HEAD]);
            bytes.drain(..P2P_HEAD);
            let tag = u32::from_le_bytes(head);
            self.queue((p, tag64(P2P_SEQ, tag)), Arrived::Bytes(bytes));
        }
    }

    /// Whether network operations are in flight (they need polling).
    pub(crate) fn net_pending(&self) -> bool {
        self.net_inflight > 0
    }

    pub(crate) fn submit(&mut self, op: Arc<Op>) {
        if !op.done.load(Ordering::Acquire) {
            let mut d = lock(&op.data);
            let max = if self.agent_core { 0 } else { self.stage_max };
            d.wake_until = d
                .sched
                .rounds
                .iter()
                .rposition(|r| {
                    r.steps.iter().any(|s| {
                        matches!(s, Step::Send { region, .. } | Step::Recv { region, .. }
                            if region.len > max)
                    })
                })
                .unwrap_or(0);
            if d.wake_until > 0 {
                self.board.want_agent(self.me, true);
            }
            drop(d);
            self.ops.push_back(op);
        }
    }

    /// Whether descriptors (or slots to hand back) wait for room in a peer's
    /// ring: whoever progresses must come back soon rather than sleep, since
    /// the peer that makes room rings no doorbell for it.
    pub(crate) fn has_output(&self) -> bool {
        self.outq.iter().any(|q| !q.is_empty()) || self.freed.iter().any(|&m| m != 0)
    }

    /// Number of operations in flight.
    pub(crate) fn active(&self) -> usize {
        self.ops.len()
    }

    /// Advances every operation as far as it goes without blocking. Returns
    /// whether anything happened.
    pub(crate) fn progress(&mut self) -> bool {
        self.drain();
        if !self.inbox.is_empty() {
            self.poll_inbox();
        }
        let mut moved = false;
        // Taken out while they advance (`advance` needs `&mut self`) rather than
        // cloned: this runs on every pass of a waiting thread's loop.
        let ops = std::mem::take(&mut self.ops);
        let mut inflight = 0;
        let mut rounds_left = false;
        for op in &ops {
            let mut d = lock(&op.data);
            if !matches!(d.status, Status::Running) {
                continue;
            }
            match self.advance(&mut d) {
                Ok(m) => moved |= m,
                Err(e) => d.status = Status::Failed(e),
            }
            if matches!(d.status, Status::Running) {
                inflight += d.net_recvs.len() + d.net_sends.len();
                rounds_left |= d.m.round() < d.wake_until;
            } else {
                op.done.store(true, Ordering::Release);
            }
        }
        // The standing receives need polling while anything is in flight (a
        // receive may wait for them).
        self.net_inflight = inflight + if ops.is_empty() { 0 } else { self.inbox.len() };
        // An arrival for an operation with a round still to post lets the agent
        // post it (with a core of its own, else only for a large message);
        // otherwise only large copies are worth a wake-up (small messages move
        // when the application tests or waits).
        self.board.want_agent(self.me, rounds_left);
        debug_assert!(
            self.ops.is_empty(),
            "no collective is submitted while one advances"
        );
        self.ops = ops;
        self.ops.retain(|o| !o.done.load(Ordering::Acquire));
        if self.ops.is_empty() {
            // Refusals of operations that ended anyway (their sends were staged).
            self.rejected.clear();
        } else {
            // Refusals of point-to-point sends that no open send took this
            // pass: they completed before (staged), the receiver reports it.
            self.rejected.retain(|k, _| k.1 >> 32 != P2P_SEQ);
        }
        moved |= self.flush();
        moved
    }

    /// The error of a receive from `rank` alone once its messages ended
    /// ([`Core::ended`]): it left in order, or it is lost; `None` while they
    /// have not.
    fn ended_error(&self, rank: usize) -> Option<Error> {
        let &(rank, left) = self.ended.iter().find(|e| e.0 == rank)?;
        Some(if left {
            Error::RankLeft { rank }
        } else {
            Error::RankLost { rank }
        })
    }

    /// Feeds `d`'s machine what happened since the last pass (sends read,
    /// network completions), then carries out its actions until it waits.
    fn advance(&mut self, d: &mut OpData) -> Result<bool, Error> {
        // A peer refused a message of this operation, maybe one whose send
        // already completed (staged): the operation fails here, not in a
        // later round that waits for the refusing rank.
        if let Some(key) = self.refused(d) {
            let theirs = self.rejected.remove(&key).unwrap_or(Sig::NONE);
            if theirs != Sig::NONE && theirs != d.sig {
                return Err(self.mismatch(d.seq as u32, key.0, d.sig, theirs));
            }
            self.mark_count(key.1, self.me, key.0);
            return Err(Error::CountMismatch {
                rank: key.0,
                detail: format!(
                    "rank {} refused the message (it expected another size or element type)",
                    key.0
                ),
            });
        }
        if let Some(want) = d.want {
            if !self.bind_p2p(d, want)? {
                // From one rank alone, whose messages ended: none will come.
                return match want.source().and_then(|s| self.ended_error(s)) {
                    Some(e) => Err(e),
                    None => Ok(false),
                };
            }
        }
        let mut moved = false;
        // Sends that their receiver read (FIN).
        if !self.fins.is_empty() {
            let mut i = 0;
            while let Some(&(peer, tag)) = d.m.open_sends().get(i) {
                let key = (peer, tag64(d.seq, tag));
                match self.fins.get_mut(&key) {
                    Some(n) if *n > 0 => {
                        *n -= 1;
                        if *n == 0 {
                            self.fins.remove(&key);
                        }
                        d.m.sent(peer, tag);
                        moved = true;
                    }
                    _ => i += 1,
                }
            }
        }
        moved |= self.poll_net(d)?;
        let seq = d.seq;
        loop {
            let action = d.m.poll(&d.sched, &mut d.bufs, &mut self.matcher, |p, t| {
                (p, tag64(seq, t))
            });
            let action = match action {
                Ok(Some(a)) => a,
                Ok(None) => return Ok(moved),
                Err(InterpError::SizeMismatch {
                    peer,
                    tag,
                    sent,
                    expected,
                }) => {
                    // Another collective's message (another type's, say) is
                    // named as that rather than by its size.
                    let key = (peer, tag64(seq, tag));
                    if let Some(theirs) = self.matcher.peek(&key).and_then(|a| a.other_sig(d.sig)) {
                        return Err(self.refuse_sig(peer, key.1, None, d.sig, theirs));
                    }
                    let e = self.refuse(peer, tag64(seq, tag), sent, expected);
                    return Err(if seq == P2P_SEQ {
                        Error::MessageLength {
                            rank: peer,
                            // A point-to-point tag is a `u16` (`comm::Tag`).
                            tag: tag as u16,
                            sent,
                            expected,
                        }
                    } else {
                        e
                    });
                }
                Err(InterpError::Memory(e)) => return Err(e),
            };
            moved = true;
            match action {
                Action::Complete => {
                    d.status = Status::Done;
                    return Ok(true);
                }
                Action::Send { peer, tag, region } if self.is_remote(peer) => {
                    let p = d.bufs.ptr(&region);
                    // SAFETY: bounds-checked region of a live buffer, read before the
                    // round's receives can write into it (eager copy).
                    let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, region.len) };
                    let net = self.net.as_ref().expect("is_remote implies net");
                    // A header of four bytes: a message's schedule tag, a
                    // collective's signature.
                    let (ntag, head) = if seq == P2P_SEQ {
                        (net.p2p_tag(), tag)
                    } else {
                        (net.tag(seq, tag), d.sig.0)
                    };
                    let mut data = Vec::with_capacity(NET_HEAD + bytes.len());
                    data.extend_from_slice(&head.to_le_bytes());
                    data.extend_from_slice(bytes);
                    let id = net
                        .t
                        .send(net.world[peer], ntag, data)
                        .map_err(|e| net.error(e))?;
                    d.net_sends.push((peer, id, tag));
                }
                // A point-to-point message from another node comes through the
                // inbox ([`Core::open_inbox`]).
                Action::Recv { peer, .. } if seq == P2P_SEQ && self.is_remote(peer) => {}
                Action::Recv { peer, tag, .. } if self.is_remote(peer) => {
                    let net = self.net.as_ref().expect("is_remote implies net");
                    let id = net
                        .t
                        .recv(net.world[peer], net.tag(d.seq, tag))
                        .map_err(|e| net.error(e))?;
                    d.net_recvs.push((peer, id, tag));
                }
                Action::Send { peer, tag, region } if seq == P2P_SEQ && peer == self.me => {
                    self.send_to_self(d, tag, &region);
                }
                Action::Send { peer, tag, region } => {
                    if !self.post_local_send(d, peer, &region, tag) {
                        d.m.sent(peer, tag);
                    }
                }
                // Arrivals from this node come by the board: nothing to ask for.
                Action::Recv { .. } => {}
                Action::Land {
                    peer,
                    tag,
                    region,
                    got,
                    arrival,
                } => {
                    // A message of a collective that its sender's signature
                    // says is another: refused whole, none of it landed.
                    if let Some(theirs) = arrival.other_sig(d.sig) {
                        return Err(self.refuse_sig(
                            peer,
                            tag64(seq, tag),
                            Some(arrival),
                            d.sig,
                            theirs,
                        ));
                    }
                    // Whether the piece came by cross-memory attach (then the sender
                    // waits for a FIN before it may reuse its buffer).
                    let by_cma = matches!(arrival, Arrived::Whole { .. } | Arrived::Rest { .. })
                        && region.len > 0;
                    let n = self.land(d, peer, region, got, arrival)?;
                    // A staged (or empty) message needs no FIN: its sender was done
                    // with its buffer once the chunks were in the slots, which come
                    // back by FREE.
                    if d.m.copied(n) && by_cma {
                        self.send_desc(
                            peer,
                            Desc {
                                kind: FIN,
                                sig: 0,
                                tag: tag64(seq, tag),
                                addr: 0,
                                len: 0,
                            },
                            true,
                        );
                    }
                }
            }
        }
    }

    /// Network completions of `d`: messages received go to the matcher, sends
    /// done to the machine. Whether any completed.
    fn poll_net(&mut self, d: &mut OpData) -> Result<bool, Error> {
        let Some(net) = &self.net else {
            return Ok(false);
        };
        let mut moved = false;
        let mut i = 0;
        while i < d.net_recvs.len() {
            let (peer, id, tag) = d.net_recvs[i];
            match net.t.test(id).map_err(|e| net.error(e))? {
                Some(p) => {
                    d.net_recvs.swap_remove(i);
                    let v = p.into_bytes();
                    let Some(head) = v.first_chunk::<NET_HEAD>() else {
                        return Err(Error::transport(format!(
                            "rank {peer} sent a collective's message of {} bytes, shorter than its header",
                            v.len()
                        )));
                    };
                    let sig = u32::from_le_bytes(*head);
                    self.matcher
                        .arrived((peer, tag64(d.seq, tag)), Arrived::Net { v, sig });
                    moved = true;
                }
                None => i += 1,
            }
        }
        let mut i = 0;
        while i < d.net_sends.len() {
            let (peer, id, tag) = d.net_sends[i];
            match net.t.test(id).map_err(|e| net.error(e))? {
                Some(_) => {
                    d.net_sends.swap_remove(i);
                    d.m.sent(peer, tag);
                    moved = true;
                }
                None => i += 1,
            }
        }
        Ok(moved)
    }

    /// A refusal that fails `d`: for a collective, any of its sequence
    /// number; for a point-to-point operation, one of a send it has open (a
    /// refused send that completed already was the receiver's error).
    fn refused(&self, d: &OpData) -> Option<(usize, u64)> {
        if d.seq != P2P_SEQ {
            return self.rejected.keys().find(|k| k.1 >> 32 == d.seq).copied();
        }
        d.m.open_sends()
            .iter()
            .map(|&(p, t)| (p, tag64(P2P_SEQ, t)))
            .find(|k| self.rejected.contains_key(k))
    }

    /// Binds a point-to-point receive to the earliest announced message
    /// that `want` takes: its step's source and tag become the message's.
    /// Whether one waits; a message of another element type is refused (its
    /// sender told, as for a size mismatch) and fails the receive.
    fn bind_p2p(&mut self, d: &mut OpData, want: Want) -> Result<bool, Error> {
        let Some(i) = self.p2p_order.iter().position(|&(p, t)| want.fits(p, t)) else {
            return Ok(false);
        };
        let Some((src, tag)) = self.p2p_order.remove(i) else {
            return Ok(false);
        };
        for step in d.sched.rounds.iter_mut().flat_map(|r| r.steps.iter_mut()) {
            if let Step::Recv { peer, tag: t, .. } = step {
                (*peer, *t) = (src, tag);
            }
        }
        d.want = None;
        if !want.same_type(tag) {
            let key = (src, tag64(P2P_SEQ, tag));
            let sent = self.matcher.peek(&key).map_or(0, |a| a.total());
            self.refuse(src, key.1, sent, d.sched.recv_bytes);
            return Err(Error::MessageType {
                rank: src,
                tag: tag as u16,
                sent: p2p_type_name(tag),
                expected: p2p_type_name(want.kind()),
            });
        }
        Ok(true)
    }

    fn is_remote(&self, peer: usize) -> bool {
        self.net.as_ref().is_some_and(|n| !n.local[peer])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receive_matches_by_source_tag_and_type() {
        let f32_tag = p2p_tag(7, DataType::F32);
        let i32_tag = p2p_tag(7, DataType::I32);
        assert_ne!(f32_tag, i32_tag, "same size, other type");
        assert_eq!(
            (p2p_type_name(f32_tag), p2p_type_name(i32_tag)),
            ("f32", "i32")
        );
        assert_eq!(p2p_type_name(7), "?");
        let w = Want::new(Some(2), Some(7), i32_tag);
        assert!(w.fits(2, f32_tag) && w.fits(2, i32_tag));
        assert!(!w.fits(1, i32_tag) && !w.fits(2, p2p_tag(8, DataType::I32)));
        assert!(w.same_type(i32_tag) && !w.same_type(f32_tag));
        assert_eq!(w.source(), Some(2));
        let any = Want::new(None, None, i32_tag);
        assert!(any.fits(0, p2p_tag(65534, DataType::U8)) && any.source().is_none());
        // Every operation carries one: it stays small.
        assert_eq!(std::mem::size_of::<Option<Want>>(), 12);
    }
}
