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

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hpc_collectives::interp::{Action, Arrival, InterpError, Machine, Matcher, Memory};
use hpc_collectives::{BufferId, DataType, ReduceOp, Region, Schedule, Step};

use crate::board::{self, Board, Desc, DATA, FIN, FREE, RTS, STAGE_SLOT, TAIL};
use crate::error::Error;
use crate::job::Stage;
use crate::sync::lock;

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

    fn error(&self, e: hpc_rdma::Error) -> Error {
        match e {
            hpc_rdma::Error::PeerLost { rank, .. } => {
                match self.world.iter().position(|&w| w == rank) {
                    Some(r) => Error::RankLost { rank: r },
                    None => Error::transport_from("a peer of the collective", e),
                }
            }
            e => Error::transport_from("moving a collective's data", e),
        }
    }
}

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
    pub(crate) fn new(seq: u64, sched: Schedule, bufs: Buffers) -> Arc<Op> {
        let empty = sched.rounds.is_empty();
        let m = Machine::new(&sched, false);
        Arc::new(Op {
            data: Mutex::new(OpData {
                seq,
                sched,
                bufs,
                m,
                wake_until: 0,
                net_recvs: Vec::new(),
                net_sends: Vec::new(),
                status: if empty { Status::Done } else { Status::Running },
            }),
            done: AtomicBool::new(empty),
        })
    }

    /// Peers this operation waits for now.
    pub(crate) fn blocked_on(&self) -> Vec<usize> {
        let d = lock(&self.data);
        d.m.open_recvs()
            .iter()
            .map(|r| r.peer)
            .chain(d.m.open_sends().iter().map(|s| s.0))
            .collect()
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

/// `addr` of a `FIN` that refuses a message (size mismatch).
const REJECTED: u64 = 1;

/// A message (or part of one) announced by a peer and not yet copied.
#[derive(Debug)]
enum Arrived {
    /// The whole message of `len` bytes, at `addr` in the sender (`RTS`).
    Whole { addr: u64, len: u64 },
    /// Chunk `index` of a message of `total` bytes, in the sender's `slot`.
    Chunk { slot: usize, index: u64, total: u64 },
    /// What the slots did not carry of a message of `total` bytes, from
    /// `addr` in the sender (`TAIL`).
    Rest { addr: u64, total: u64 },
    /// A whole message from a rank on another node, received by the transport.
    Bytes(Vec<u8>),
}

impl Arrival for Arrived {
    fn total(&self) -> usize {
        match *self {
            Arrived::Whole { len, .. } => len as usize,
            Arrived::Chunk { total, .. } | Arrived::Rest { total, .. } => total as usize,
            Arrived::Bytes(ref v) => v.len(),
        }
    }
}

/// The mask of `n` (<= 64) staging slots.
fn all_slots(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1 << n) - 1
    }
}

impl Arrived {
    /// Whether this piece ends its message.
    fn is_last(&self) -> bool {
        match *self {
            Arrived::Chunk { index, total, .. } => (index + 1) * STAGE_SLOT as u64 >= total,
            Arrived::Whole { .. } | Arrived::Rest { .. } | Arrived::Bytes(_) => true,
        }
    }
}

/// A message of `got` bytes from `peer` where the schedule expects `want`.
fn size_mismatch(peer: usize, got: usize, want: usize) -> Error {
    Error::CountMismatch {
        rank: peer,
        detail: format!("rank {peer} sent {got} bytes where {want} were expected"),
    }
}

fn tag64(seq: u64, tag: u32) -> u64 {
    (seq << 32) | tag as u64
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
    rejected: std::collections::HashSet<(usize, u64)>,
    outq: Vec<VecDeque<Desc>>,
    /// Per peer: whether what waits in `outq` is worth waking its progress
    /// agent for (see [`Core::flush_peer`]).
    wake: Vec<bool>,
    /// Ranks on other nodes, when the communicator spans nodes.
    net: Option<Net>,
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
        Core {
            board,
            me,
            size,
            pids,
            ops: VecDeque::new(),
            matcher: Matcher::new(),
            free_slots,
            freed: vec![0; size],
            stage_max,
            agent_core: false,
            discard: std::collections::HashSet::new(),
            fins: HashMap::new(),
            rejected: std::collections::HashSet::new(),
            outq: vec![VecDeque::new(); size],
            wake: vec![false; size],
            net,
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

    /// Queues `d` for `peer`; `wake` says whether it hands the peer's agent
    /// work (the `RTS` or `TAIL` of a non-empty message, the `FIN` of one read
    /// by cross-memory attach, a refusal). See [`Core::flush_peer`].
    fn send_desc(&mut self, peer: usize, d: Desc, wake: bool) {
        self.wake[peer] |= wake;
        self.outq[peer].push_back(d);
    }

    fn flush(&mut self) -> bool {
        let mut any = false;
        for peer in 0..self.size {
            any |= self.flush_peer(peer);
        }
        any
    }

    /// Pushes what waits for `peer` (the slots to hand back first, as one
    /// `FREE`) and rings its doorbell if there was more than slots. Returns
    /// whether anything was pushed.
    ///
    /// The ring wakes the peer's progress agent only for work that outweighs
    /// a wake-up: a copy by cross-memory attach, the completion of one (its
    /// sender may have a next round to post), a refusal, or anything while the
    /// peer has a collective with a round still to post (`OpData::wake_until`).
    /// Staged chunks ring quietly: a thread of the peer in `wait` or `test`
    /// sees them at once, and an agent on its next pass. Waking an agent costs two context switches, several
    /// microseconds on a virtual machine, far more than copying a staged
    /// chunk; doing it for every small message made the `Thread` engine 5-7x
    /// slower than `Inline` at 1 KiB.
    fn flush_peer(&mut self, peer: usize) -> bool {
        let mut pushed = false;
        if self.freed[peer] != 0 {
            let d = Desc {
                kind: FREE,
                tag: 0,
                addr: self.freed[peer],
                len: 0,
            };
            if self.board.push(self.me, peer, d) {
                self.freed[peer] = 0;
                pushed = true;
            }
        }
        // Slots handed back ring nobody: no send waits for a slot (it falls back
        // to the single-copy path), so the owner may see them on its next
        // drain, and a ring here (a futex wake-up if the owner sleeps in
        // `wait`) would sit on the path between a receive and its `wait`
        // returning.
        let mut announced = false;
        while let Some(d) = self.outq[peer].front().copied() {
            if !self.board.push(self.me, peer, d) {
                break;
            }
            self.outq[peer].pop_front();
            announced = true;
        }
        pushed |= announced;
        if announced {
            if self.wake[peer] {
                self.board.ring(peer);
            } else {
                self.board.ring_quietly(peer);
            }
            self.wake[peer] &= !self.outq[peer].is_empty();
        }
        pushed
    }

    /// Hands staging slot `slot` of `peer` back to it (with the next flush).
    fn free_slot(&mut self, peer: usize, slot: usize) {
        self.freed[peer] |= 1 << slot;
    }

    fn queue(&mut self, key: (usize, u64), a: Arrived) {
        self.matcher.arrived(key, a);
    }

    fn drain(&mut self) {
        for src in 0..self.size {
            while let Some(d) = self.board.pop(src, self.me) {
                let key = (src, d.tag);
                match d.kind {
                    RTS => self.queue(
                        key,
                        Arrived::Whole {
                            addr: d.addr,
                            len: d.len,
                        },
                    ),
                    DATA => {
                        let (slot, index) = ((d.addr & 0xffff) as usize, d.addr >> 16);
                        if slot >= self.board.slots() {
                            tracing::warn!(src, slot, "staged chunk in a slot that does not exist");
                        } else if self.discard.contains(&key) {
                            let a = Arrived::Chunk {
                                slot,
                                index,
                                total: d.len,
                            };
                            if a.is_last() {
                                self.discard.remove(&key);
                            }
                            self.free_slot(src, slot);
                        } else {
                            let total = d.len;
                            self.queue(key, Arrived::Chunk { slot, index, total });
                        }
                    }
                    TAIL => {
                        if !self.discard.remove(&key) {
                            self.queue(
                                key,
                                Arrived::Rest {
                                    addr: d.addr,
                                    total: d.len,
                                },
                            );
                        }
                    }
                    FREE => {
                        let back = d.addr & all_slots(self.board.slots());
                        if back != d.addr || back & self.free_slots != 0 {
                            tracing::warn!(
                                src,
                                mask = d.addr,
                                "staging slots handed back twice or unknown"
                            );
                        }
                        self.free_slots |= back;
                    }
                    FIN if d.addr == REJECTED => {
                        self.rejected.insert((src, d.tag));
                    }
                    FIN => *self.fins.entry((src, d.tag)).or_default() += 1,
                    k => tracing::warn!(kind = k, src, "unknown descriptor"),
                }
            }
        }
    }

    /// Advances every operation as far as it goes without blocking. Returns
    /// whether anything happened.
    pub(crate) fn progress(&mut self) -> bool {
        self.drain();
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
        self.net_inflight = inflight;
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
        }
        moved |= self.flush();
        moved
    }

    /// Feeds `d`'s machine what happened since the last pass (sends read,
    /// network completions), then carries out its actions until it waits.
    fn advance(&mut self, d: &mut OpData) -> Result<bool, Error> {
        // A peer refused a message of this operation, maybe one whose send
        // already completed (staged): the operation fails here, not in a
        // later round that waits for the refusing rank.
        if let Some(&key) = self.rejected.iter().find(|k| k.1 >> 32 == d.seq) {
            self.rejected.remove(&key);
            return Err(Error::CountMismatch {
                rank: key.0,
                detail: format!("rank {} expected a message of a different size", key.0),
            });
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
                }) => return Err(self.refuse(peer, tag64(seq, tag), sent, expected)),
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
                    let id = net
                        .t
                        .send(net.world[peer], net.tag(d.seq, tag), bytes.to_vec())
                        .map_err(|e| net.error(e))?;
                    d.net_sends.push((peer, id, tag));
                }
                Action::Recv { peer, tag, .. } if self.is_remote(peer) => {
                    let net = self.net.as_ref().expect("is_remote implies net");
                    let id = net
                        .t
                        .recv(net.world[peer], net.tag(d.seq, tag))
                        .map_err(|e| net.error(e))?;
                    d.net_recvs.push((peer, id, tag));
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
                    self.matcher
                        .arrived((peer, tag64(d.seq, tag)), Arrived::Bytes(p.into_bytes()));
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

    /// Refuses the message of `key` at the head of its queue, `sent` bytes
    /// where the receive expects `expected`: its slots go back, its pieces
    /// still to come are handed back as they arrive, and the sender learns
    /// it from a refusing FIN. Returns the operation's error.
    fn refuse(&mut self, peer: usize, tag: u64, sent: usize, expected: usize) -> Error {
        let key = (peer, tag);
        if self.is_remote(peer) {
            // A whole message from another node: dropped, its sender is done.
            self.matcher.take(&key);
            return size_mismatch(peer, sent, expected);
        }
        let mut ended = false;
        while !ended {
            let Some(b) = self.matcher.take(&key) else {
                break;
            };
            if let Arrived::Chunk { slot, .. } = b {
                self.free_slot(peer, slot);
            }
            ended = b.is_last();
        }
        if !ended {
            self.discard.insert(key);
        }
        self.send_desc(
            peer,
            Desc {
                kind: FIN,
                tag,
                addr: REJECTED,
                len: 0,
            },
            true,
        );
        size_mismatch(peer, sent, expected)
    }

    /// Lands `a`, a piece of the message for `region` of which `got` bytes
    /// landed before, and returns its bytes.
    fn land(
        &mut self,
        d: &mut OpData,
        peer: usize,
        region: Region,
        got: usize,
        a: Arrived,
    ) -> Result<usize, Error> {
        let in_order = match a {
            Arrived::Whole { .. } | Arrived::Bytes(_) => got == 0,
            Arrived::Rest { .. } => got > 0,
            Arrived::Chunk { index, .. } => index * STAGE_SLOT as u64 == got as u64,
        };
        if !in_order {
            return Err(Error::transport(format!(
                "rank {peer} sent a message piece out of order ({a:?} after {got} bytes)"
            )));
        }
        let dst = d.bufs.ptr(&region);
        Ok(match a {
            Arrived::Chunk { slot, .. } => {
                let n = STAGE_SLOT.min(region.len - got);
                // SAFETY: the slot is the sender's, announced by this DATA and
                // not reused before our FREE (board protocol), STAGE_SLOT >= n
                // bytes long; `dst + got .. + n` lies in the region
                // (bounds-checked by `ptr`, got + n <= region.len).
                unsafe { self.board.stage_read(peer, slot, dst.add(got), n) };
                self.free_slot(peer, slot);
                n
            }
            Arrived::Bytes(v) => {
                // SAFETY: `dst` points at `region.len` writable bytes of this
                // operation's buffer (bounds-checked); the interpreter checked
                // that `v` is as long.
                unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), dst, v.len()) };
                v.len()
            }
            Arrived::Whole { addr, .. } | Arrived::Rest { addr, .. } => {
                let n = region.len - got;
                let pid = self.pids[peer];
                // `pids[me]` is this process (no `getpid` system call per message).
                if pid == self.pids[self.me] {
                    // SAFETY: the sender is this process: `addr` is a live region of
                    // one of its operations (it waits for our FIN), `dst + got` has
                    // `n` bytes left in the bounds-checked region, and regions of
                    // different buffers never overlap.
                    unsafe { std::ptr::copy(addr as *const u8, dst.add(got), n) };
                } else {
                    // SAFETY: `dst + got` has `n` writable bytes left in this
                    // operation's buffer (bounds-checked), not aliased during the round.
                    unsafe { board::cma_read(pid, addr, dst.add(got), n) }.map_err(|e| {
                        if board::pid_dead(pid) {
                            Error::RankLost { rank: peer }
                        } else {
                            Error::transport_from(format!("reading from rank {peer}"), e)
                        }
                    })?;
                }
                n
            }
        })
    }

    /// Posts a send to a rank on this node. A message of at most `stage_max`
    /// bytes goes in as many chunks as free slots take, each announced at once
    /// (so the receiver copies while this rank stages the next), with a `TAIL`
    /// for the rest; a larger one, or one that finds no free slot, as an `RTS`.
    /// Returns whether the send waits for the receiver's `FIN`: not when the
    /// message is empty or went whole into the slots, so that a small send
    /// completes at once, as an eager send does in MPI. A refusal still
    /// reaches the operation (see [`Core::advance`]).
    fn post_local_send(&mut self, d: &mut OpData, peer: usize, region: &Region, tag: u32) -> bool {
        let p = d.bufs.ptr(region);
        let tag = tag64(d.seq, tag);
        let total = region.len;
        let mut off = 0;
        let mut index = 0u64;
        while off < total && total <= self.stage_max {
            if self.free_slots == 0 {
                break;
            }
            let slot = self.free_slots.trailing_zeros() as usize;
            self.free_slots &= !(1 << slot);
            let n = STAGE_SLOT.min(total - off);
            // SAFETY: `p + off .. + n` lies in the bounds-checked region; the slot
            // is this rank's and free (no reader until the DATA below), STAGE_SLOT
            // >= n bytes; shared memory and the user's buffer do not overlap.
            unsafe { self.board.stage_write(self.me, slot, p.add(off), n) };
            self.send_desc(
                peer,
                Desc {
                    kind: DATA,
                    tag,
                    addr: slot as u64 | index << 16,
                    len: total as u64,
                },
                false,
            );
            self.flush_peer(peer);
            off += n;
            index += 1;
        }
        if off < total || total == 0 {
            let needs_fin = total > 0;
            self.send_desc(
                peer,
                Desc {
                    kind: if off == 0 { RTS } else { TAIL },
                    tag,
                    // SAFETY: off <= total: at most one past the region's end.
                    addr: unsafe { p.add(off) } as u64,
                    len: total as u64,
                },
                needs_fin,
            );
            return needs_fin;
        }
        false
    }

    fn is_remote(&self, peer: usize) -> bool {
        self.net.as_ref().is_some_and(|n| !n.local[peer])
    }
}

/// State shared by a communicator's users and its progress agent.
pub(crate) struct Shared {
    pub core: Mutex<Core>,
    pub shutdown: AtomicBool,
}

impl Shared {
    pub(crate) fn new(core: Core) -> Shared {
        Shared {
            core: Mutex::new(core),
            shutdown: AtomicBool::new(false),
        }
    }
}

/// Raises the calling (agent) thread's scheduling priority so that a wake-up
/// preempts the computing thread at once instead of after a time slice.
/// The agent only runs in short bursts and sleeps otherwise, so it cannot
/// starve the application. `HPC_PROGRESS_SCHED`: `nice` (default: nice -20
/// for this thread), `fifo` (`SCHED_FIFO` priority 1, root or
/// `CAP_SYS_NICE`), `none`. Failures are logged, not fatal.
pub(crate) fn raise_priority() {
    let how = std::env::var(hpc_runtime::env::PROGRESS_SCHED).unwrap_or_else(|_| "nice".into());
    let result = match how.as_str() {
        "fifo" => {
            // rustix has no `sched_setscheduler`.
            let p = libc::sched_param { sched_priority: 1 };
            // SAFETY: a valid `sched_param` for the calling thread (pid 0).
            let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) };
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        }
        "none" => Ok(()),
        _ => {
            // On Linux a thread id names one thread to `setpriority`.
            let r = rustix::process::setpriority_process(Some(rustix::thread::gettid()), -20);
            if r.is_ok() {
                short_slice();
            }
            r.map_err(std::io::Error::from)
        }
    };
    if let Err(error) = result {
        tracing::info!(how, %error, "progress thread keeps its priority");
    }
}

/// `struct sched_attr` of `sched_setattr(2)` (version 1, 56 bytes).
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
    util_min: u32,
    util_max: u32,
}

/// Asks the EEVDF scheduler (Linux 6.6+) for a short time slice (0.1 ms, its
/// minimum) for this thread. EEVDF lets a waking thread preempt the running
/// one only if its deadline is earlier, and with the default slice a woken
/// agent waits for the computing thread's slice to end (up to 3 ms) however
/// high its nice priority: the agent then never runs while the application
/// computes. A short slice makes the wake-up preempt at once. Older kernels
/// ignore the runtime of a `SCHED_OTHER` thread; failures are logged.
fn short_slice() {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        flags: 0,
        nice: -20,
        priority: 0,
        runtime: 100_000,
        deadline: 0,
        period: 0,
        util_min: 0,
        util_max: 0,
    };
    // SAFETY: `attr` is a valid, initialised `sched_attr` whose `size` field
    // says how much of it the kernel may read; pid 0 is the calling thread.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "no short scheduler slice");
    }
}

/// The `Thread` engine's agent: sleeps on its bell until a ring wakes it (an
/// eager agent) or a millisecond passes while collectives are in flight,
/// runs the schedules, wakes waiters when operations finish.
pub(crate) fn agent_loop(shared: Arc<Shared>, board: Arc<Board>, me: usize) {
    let _span = tracing::debug_span!("progress-agent", rank = me).entered();
    // The agent polls every millisecond from its last collective in flight
    // until `LINGER` later, and only then sleeps until woken: an application
    // that runs collectives back to back does not pay a wake-up for each.
    const LINGER: Duration = Duration::from_millis(100);
    let mut last_active = std::time::Instant::now();
    loop {
        let seen = board.doorbell(me).load(Ordering::SeqCst);
        if shared.shutdown.load(Ordering::Acquire) {
            break;
        }
        if board.someone_waits(me) {
            // The waiting application thread advances the collectives itself; stand
            // aside rather than take turns with it (woken when it leaves `wait`).
            board.agent_sleep(me, seen, Duration::from_millis(50));
            continue;
        }
        let (active, moved, polling) = {
            let mut core = lock(&shared.core);
            let before = core.active();
            let moved = core.progress();
            let after = core.active();
            if after < before {
                // Wake an application thread sleeping in `wait`.
                board.ring(me);
            }
            (after, moved, core.net_pending() || core.has_output())
        };
        if moved {
            continue;
        }
        if active > 0 {
            last_active = std::time::Instant::now();
        }
        // Sleep until a peer or the application rings (bounded so that shutdown and
        // the liveness checks of waiters are never stuck behind a lost wake-up).
        let nap = if polling {
            // Network completions ring no doorbell, nor does a peer that makes room
            // in a full ring: poll.
            Duration::from_micros(50)
        } else if active > 0 || last_active.elapsed() < LINGER {
            // No ring wakes a lazy agent, nor an eager one for a small message
            // in the last round: a pass every millisecond keeps the collectives
            // moving while the application neither tests nor waits.
            Duration::from_millis(1)
        } else {
            // Idle: the next collective posted wakes the agent (`Board::agent_idle`).
            board.set_agent_idle(me, true);
            // A collective posted before the flag was up found no idle agent to
            // wake: look again under the lock that `submit` holds.
            if lock(&shared.core).active() > 0 {
                board.set_agent_idle(me, false);
                continue;
            }
            board.agent_sleep(me, seen, Duration::from_millis(200));
            board.set_agent_idle(me, false);
            continue;
        };
        board.agent_sleep(me, seen, nap);
    }
    lock(&shared.core).stopped = true;
    board.ring(me);
}
