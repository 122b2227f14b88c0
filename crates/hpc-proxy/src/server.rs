//! The proxy process: takes the ranks' descriptors, runs every local rank's
//! schedule, answers.
//!
//! Each rank's collective runs on an [`interp::Machine`](hpc_collectives::interp),
//! the interpreter the simulator and the `Inline` and `Thread` engines run;
//! messages between the proxy's ranks wait in one [`Matcher`] by (source,
//! destination, tag). This module is the I/O around it: descriptors, the
//! ranks' memory (cross-memory attach or mappings), the network, liveness.
//! The life cycle of the collectives (parts, failures and the news of them,
//! losses, cancels, retirement) is the [`Session`]'s.

use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hpc_collectives::interp::{Action, Arrival, InterpError, Machine, Matcher, Memory};
use hpc_collectives::{DataType, ReduceOp, Region, Schedule};

use crate::memory::{
    copy, footprint, give_to, locate, locate_dst, rd, read_loc, reduce, take_from, Budget, Buf,
    Loc, Mapping, OpMem, Refusal, Src, CHUNK,
};
use crate::net::{tag64, ProxyNet, TRAILER};
use crate::protocol::{Code, Kind, MAX_BLOB};
use crate::session::{Cancel, Effect, Outcome, Session, Sizes};
use crate::submits::{Parsed, Submits};
use hpc_board::backoff::{Backoff, Pause};
use hpc_board::board::{self, Board, Desc};
use hpc_board::shm::ShmRef;
use hpc_board::sig::Sig;
use hpc_board::{Error, Result};

/// One rank's collective in the proxy.
struct VOp {
    rank: usize,
    seq: u64,
    /// Its schedule (shared with the blob's other ops, see `submits`).
    sched: Rc<Schedule>,
    /// Its buffers and its scratch (from the pool).
    mem: OpMem,
    /// The schedule's interpreter. Its open sends are the messages of the
    /// rank's buffers that no receive took yet: the round stays open until
    /// they are read, so the regions cannot change under them.
    m: Machine,
    /// The shared buffers it uses (keys of [`Proxy::maps`]).
    maps: Vec<(usize, u64)>,
    /// Its collective's signature, which its messages to other nodes carry.
    sig: Sig,
}

/// A message waiting for its receive.
enum Payload {
    /// Bytes copied into the proxy's memory (a send from scratch).
    Owned(Buf),
    /// A region of the sending rank's buffer (in its memory or mapped), not
    /// read yet: the receive copies it straight to its destination. Until then
    /// the sender's round stays open (see [`VOp::m`]), so the region
    /// cannot change under it.
    Remote { at: Loc, len: usize },
}

impl Arrival for Payload {
    fn total(&self) -> usize {
        match self {
            Payload::Owned(b) => b.len,
            Payload::Remote { len, .. } => *len,
        }
    }
}

/// An op's memory, as the interpreter sees it: local steps between the
/// rank's buffers (wherever they are) and the scratch, through the bounce
/// buffer.
struct ProxyMem<'a> {
    bounce: &'a mut Vec<u8>,
    mem: &'a mut OpMem,
    pids: &'a [u32],
}

impl Memory for ProxyMem<'_> {
    type Error = Code;

    fn copy(&mut self, src: Region, dst: Region) -> std::result::Result<(), Code> {
        let from = locate(self.mem, self.pids, &src)?;
        let to = locate_dst(self.mem, self.pids, &dst)?;
        copy(self.bounce, self.mem, Src::Loc(from), to, src.len)
    }

    fn reduce(
        &mut self,
        op: ReduceOp,
        dtype: DataType,
        src: Region,
        dst: Region,
    ) -> std::result::Result<(), Code> {
        let from = locate(self.mem, self.pids, &src)?;
        let to = locate_dst(self.mem, self.pids, &dst)?;
        reduce(self.bounce, self.mem, op, dtype, from, to, src.len)
    }
}

/// A message key: source, destination, tag (`tag64`).
type Key = (usize, usize, u64);

struct Proxy {
    board: Board,
    size: usize,
    pids: Vec<u32>,
    ops: Vec<VOp>,
    /// Messages sent and not received yet.
    msgs: Matcher<Key, Payload>,
    /// `Remote` messages that a receive took, as (sending rank, its seq,
    /// destination, schedule tag): sends to report to the sender's machine.
    taken: Vec<(usize, u64, usize, u32)>,
    /// A `Remote` message was received in this pass (its sender may go on).
    consumed: bool,
    out: Vec<VecDeque<Desc>>,
    /// Message and scratch buffers for reuse: a fresh megabyte-sized allocation
    /// costs a page fault per page on every collective, more than copying it.
    pool: Vec<Vec<u8>>,
    /// Two `CHUNK`s for copies and reductions between ranks.
    bounce: Vec<u8>,
    /// The proxy's mappings of ranks' [`SharedBuf`](hpc_board::shm::SharedBuf)s, by
    /// (rank, inode): its registration cache.
    maps: HashMap<(usize, u64), Mapping>,
    /// The other nodes' proxies, where the communicator spans nodes.
    net: Option<ProxyNet>,
    /// The bytes held for the collectives in flight, against the cap
    /// (`HPC_COLL_PROXY_MAX_SCRATCH`).
    budget: Budget,
    /// The life cycle of the communicator's collectives (its slots are the
    /// communicator's ranks; those of other nodes are away).
    session: Session,
    /// The ranks' latest distinct submits, parsed.
    submits: Submits,
}

/// Whether the message key `k` (source, destination, tag) belongs to `rank`'s
/// collective `seq`.
fn sent_by(k: &(usize, usize, u64), rank: usize, seq: u64) -> bool {
    k.0 == rank && k.2 >> 32 == tag64(seq, 0) >> 32
}

/// How collective `seq` failed on rank `rank`'s interpreter: a message
/// that its receive refused for its size names the sizes.
fn interp_failed(rank: usize, seq: u64, e: InterpError<Code>) -> Outcome {
    match e {
        InterpError::SizeMismatch {
            peer,
            sent,
            expected,
            ..
        } => Outcome::mismatch(Sizes::new(peer, rank, sent, expected)),
        InterpError::Memory(c) => Outcome::from_wire(c, 0, format!("collective {seq}")),
    }
}

impl Proxy {
    /// A buffer of `len` bytes, from the pool when one is large enough; an
    /// allocation that fails is the op's `NoMemory`.
    fn take(&mut self, len: usize) -> Result<Buf, (Code, u64)> {
        take_from(&mut self.pool, len).map_err(|_| (Code::NoMemory, len as u64))
    }

    /// Returns a buffer to the pool.
    fn give(&mut self, v: Vec<u8>) {
        give_to(&mut self.pool, v);
    }

    /// A new op for rank `rank`'s collective `seq`, its scratch held by the
    /// collective in the session; refused where its scratch passes the
    /// budget or cannot be allocated.
    fn op(&mut self, rank: usize, seq: u64, parsed: &Parsed) -> Result<VOp, Refusal> {
        let (blob, sched) = (&parsed.blob, Rc::clone(&parsed.sched));
        let held = self.budget.admit(footprint(&[sched.scratch_bytes]))?;
        // Scratch from the pool is not zeroed: schedules write scratch before they
        // read it (the simulator checks this by filling scratch with a pattern).
        let scratch = match take_from(&mut self.pool, sched.scratch_bytes) {
            Ok(b) => b.v,
            Err(_) => {
                self.budget.release(held);
                return Err(Refusal::NoMemory { bytes: held });
            }
        };
        let mut maps = Vec::new();
        let mut map = |p: &mut Proxy, r: Option<ShmRef>, len: usize| {
            let r = r?;
            let at = p.map(rank, &r, len)?;
            maps.push((rank, r.ino));
            Some(at)
        };
        let send_map = map(self, blob.send_shm, blob.send_len);
        let recv_map = map(self, blob.recv_shm, blob.recv_len);
        let mem = OpMem {
            rank,
            send: blob.send,
            send_len: blob.send_len,
            recv: blob.recv,
            recv_len: blob.recv_len,
            send_map,
            recv_map,
            scratch,
        };
        let m = Machine::new(&sched, blob.own_copies);
        self.session.hold(seq, held);
        Ok(VOp {
            rank,
            seq,
            sched,
            mem,
            m,
            maps,
            sig: parsed.sig,
        })
    }

    /// Where the `len` bytes of rank `rank`'s shared buffer `r` are in the
    /// proxy, mapping the buffer on its first use; `None` (cross-memory attach
    /// instead) where it cannot be mapped.
    fn map(&mut self, rank: usize, r: &ShmRef, len: usize) -> Option<*mut u8> {
        let key = (rank, r.ino);
        if !self.maps.contains_key(&key) {
            match Mapping::open(self.pids[rank], r) {
                Ok(m) => {
                    tracing::debug!(
                        rank,
                        ino = r.ino,
                        bytes = m.len,
                        "proxy: mapped a shared buffer"
                    );
                    self.maps.insert(key, m);
                }
                Err(e) => {
                    tracing::debug!(rank, error = %e, "proxy: shared buffer not mapped, using cross-memory attach");
                    return None;
                }
            }
        }
        let m = &self.maps[&key];
        let end = (r.off as usize).checked_add(len)?;
        // Within the mapping: `r.off + len <= m.len`.
        (end <= m.len).then(|| m.ptr.wrapping_add(r.off as usize))
    }

    /// Drops the mappings of shared buffers that their rank closed (or whose rank
    /// is gone) and that no op in flight uses.
    fn unmap_closed(&mut self) {
        if self.maps.is_empty() {
            return;
        }
        let used: HashSet<(usize, u64)> = self
            .ops
            .iter()
            .flat_map(|o| o.maps.iter().copied())
            .collect();
        let (pids, session) = (&self.pids, &self.session);
        self.maps.retain(|&(rank, ino), m| {
            used.contains(&(rank, ino)) || (session.here(rank) && m.still_open(pids[rank], ino))
        });
    }

    /// Ends `op` and returns its scratch to the pool. Its messages that no
    /// receive took yet are copied into the proxy's memory first: the rank may
    /// reuse its buffers once it has the answer (an error, a cancellation), and
    /// its peers still match them as if they had been sent eagerly. Those of a
    /// rank that died are dropped (its peers learn of it from the liveness check).
    fn retire(&mut self, op: VOp) {
        self.taken.retain(|t| (t.0, t.1) != (op.rank, op.seq));
        if !op.m.open_sends().is_empty() {
            let mut pool = std::mem::take(&mut self.pool);
            self.msgs.retain(|k, m| {
                let Payload::Remote { at, len } = *m else {
                    return true;
                };
                if !sent_by(k, op.rank, op.seq) {
                    return true;
                }
                // Where it cannot be kept, it goes as an unreadable one does.
                let Ok(mut b) = take_from(&mut pool, len) else {
                    return false;
                };
                // The op's mapping is still held (maps are only dropped when no
                // op in `ops` uses them, and this one's op is retired right here).
                if read_loc(&op.mem, at, &mut b.v[..len]).is_err() {
                    give_to(&mut pool, b.v);
                    return false;
                }
                *m = Payload::Owned(b);
                true
            });
            self.pool = pool;
        }
        self.give(op.mem.scratch);
    }

    /// Collective `seq` failed (the session answers its ranks): its messages
    /// go, then its ops retire, unanswered here.
    fn stop(&mut self, seq: u64) {
        // Dropped first, so that retiring its ops copies none of them.
        let mut pool = std::mem::take(&mut self.pool);
        self.msgs.remove_where(
            |k| k.2 >> 32 == seq,
            |_, m| {
                if let Payload::Owned(b) = m {
                    give_to(&mut pool, b.v);
                }
            },
        );
        self.pool = pool;
        self.drop_ops(|o| o.seq == seq);
    }

    /// Retires `op`; its rank is answered with outcome `o`: by the server at
    /// once where the session lets a finished part take the short way
    /// ([`Session::finished`]), else through the session's effects.
    fn finish(&mut self, op: VOp, o: Outcome) {
        let (rank, seq) = (op.rank, op.seq);
        self.retire(op);
        if o != Outcome::Done {
            return self.session.done(seq, rank, o);
        }
        if let Some(bytes) = self.session.finished(seq, rank) {
            self.answer(seq, rank, &Outcome::Done);
            self.budget.release(bytes);
        }
    }

    /// Answers rank `rank` that its collective `seq` ended with `outcome`
    /// (the edge: the typed outcome becomes the `DONE` descriptor's code and
    /// word).
    fn answer(&mut self, seq: u64, rank: usize, outcome: &Outcome) {
        let (code, aux) = outcome.wire_to(rank);
        // A mismatch's sizes right before it, in the same ring.
        if let Some(d) = outcome.sizes_desc(seq, rank) {
            self.reply(rank, d);
        }
        self.reply(rank, Kind::Done.desc(seq, code as u64, aux));
    }

    /// Carries out what the session decided: answers, news for the other
    /// nodes, stops, and the memory of the collectives that retired.
    fn settle(&mut self) {
        if !self.session.pending() {
            return;
        }
        while let Some(e) = self.session.poll() {
            match e {
                Effect::Answer { seq, slot, outcome } => self.answer(seq, slot, &outcome),
                Effect::Tell { seq, outcome } => {
                    if let Some(net) = self.net.as_mut() {
                        // Host placement: one communicator per proxy (0), on every node.
                        let nodes: Vec<usize> = (0..net.nodes()).collect();
                        net.announce_failed(0, seq, &outcome, &nodes);
                    }
                }
                Effect::Stop { seq } => self.stop(seq),
                Effect::Retire { bytes, .. } => self.budget.release(bytes),
                // Each rank's op runs from its submit on, on its own
                // interpreter, and answers as it finishes: its readiness is
                // not reported, so neither is queued here.
                Effect::Start { .. } | Effect::Deliver { .. } => {}
            }
        }
    }

    /// Retires the ops for which `which` holds (cancelled, or their rank died).
    fn drop_ops(&mut self, which: impl Fn(&VOp) -> bool) {
        let (gone, keep) = std::mem::take(&mut self.ops).into_iter().partition(which);
        self.ops = keep;
        for o in gone {
            self.retire(o);
        }
    }

    /// Advances one op; `Ok(true)` when finished, `Err` with how it failed.
    fn advance(&mut self, op: &mut VOp) -> Result<bool, Outcome> {
        let seq = op.seq;
        let wire = |(c, aux): (Code, u64)| Outcome::from_wire(c, aux, format!("collective {seq}"));
        let c0 = |c: Code| wire((c, 0));
        // Its messages that receives took since the last pass.
        if !self.taken.is_empty() {
            self.taken.retain(|&(r, s, dst, tag)| {
                let mine = r == op.rank && s == op.seq;
                if mine {
                    op.m.sent(dst, tag);
                }
                !mine
            });
        }
        let rank = op.rank;
        loop {
            let mut mem = ProxyMem {
                bounce: &mut self.bounce,
                mem: &mut op.mem,
                pids: &self.pids,
            };
            let action = op.m.poll(&op.sched, &mut mem, &mut self.msgs, |peer, tag| {
                (peer, rank, tag64(seq, tag))
            });
            let action = match action {
                Ok(Some(a)) => a,
                Ok(None) => return Ok(false),
                Err(e) => {
                    if let InterpError::SizeMismatch { peer, tag, .. } = e {
                        // The message is refused: it goes, and its sender may go on.
                        if let Some(data) = self.msgs.take(&(peer, rank, tag64(seq, tag))) {
                            self.consume(peer, seq, rank, tag, data);
                        }
                    }
                    return Err(interp_failed(rank, seq, e));
                }
            };
            match action {
                Action::Complete => return Ok(true),
                Action::Send { peer, tag, region } if self.net_peer(peer) => {
                    let _span = tracing::debug_span!("proxy-send", rank, seq, peer).entered();
                    // To another node: read now (eagerly), through the transport.
                    let at = locate(&op.mem, &self.pids, &region).map_err(c0)?;
                    // From the pool: a fresh large buffer costs a page fault per page.
                    let mut data = self.take(region.len + TRAILER).map_err(wire)?.v;
                    data.truncate(region.len + TRAILER);
                    read_loc(&op.mem, at, &mut data[..region.len]).map_err(c0)?;
                    let net = self.net.as_mut().expect("net_peer implies net");
                    net.send(rank, peer, tag64(seq, tag), op.sig, data)
                        .map_err(|node| Outcome::NodeLost { node })?;
                    op.m.sent(peer, tag);
                }
                Action::Send { peer, tag, region } => {
                    let payload = match locate(&op.mem, &self.pids, &region).map_err(c0)? {
                        // Read by the receive, straight to its destination: the send
                        // stays open until then.
                        at @ (Loc::Rank { .. } | Loc::Mapped(_)) => Payload::Remote {
                            at,
                            len: region.len,
                        },
                        Loc::Scratch(o) => {
                            let mut b = self.take(region.len).map_err(wire)?;
                            b.v[..region.len].copy_from_slice(&op.mem.scratch[o..o + region.len]);
                            op.m.sent(peer, tag);
                            Payload::Owned(b)
                        }
                    };
                    self.msgs.arrived((rank, peer, tag64(seq, tag)), payload);
                }
                // Messages from ranks on this node and from other nodes alike are
                // filed in `msgs`: nothing to ask for.
                Action::Recv { .. } => {}
                Action::Land {
                    peer,
                    tag,
                    region,
                    arrival,
                    ..
                } => {
                    let res = locate_dst(&op.mem, &self.pids, &region).and_then(|to| {
                        let from = match &arrival {
                            Payload::Owned(b) => Src::Bytes(b.bytes()),
                            &Payload::Remote { at, .. } => Src::Loc(at),
                        };
                        copy(&mut self.bounce, &mut op.mem, from, to, region.len)
                    });
                    self.consume(peer, seq, rank, tag, arrival);
                    res.map_err(c0)?;
                    op.m.copied(region.len);
                }
            }
        }
    }

    /// A receive of `dst` took (or refused) `data`, the message of `src`'s
    /// collective `seq` with schedule tag `tag`: an owned buffer goes back to
    /// the pool, a region of the sender is reported read to its machine.
    fn consume(&mut self, src: usize, seq: u64, dst: usize, tag: u32, data: Payload) {
        match data {
            Payload::Owned(b) => self.give(b.v),
            Payload::Remote { .. } => {
                self.taken.push((src, seq, dst, tag));
                self.consumed = true;
            }
        }
    }

    fn reply(&mut self, rank: usize, d: Desc) {
        self.out[rank].push_back(d);
    }

    fn flush(&mut self) {
        for r in 0..self.size {
            if self.board.push_queued(self.size, r, &mut self.out[r]) {
                self.board.ring(r);
            }
        }
    }
}

/// How often the proxy checks that its ranks live and drops the mappings of
/// shared buffers their ranks closed.
const LIVENESS_EVERY: Duration = Duration::from_millis(20);

/// The longest futex wait of a proxy whose collectives wait for other nodes.
const NET_WAIT: Duration = Duration::from_micros(50);

/// The futex wait of an idle proxy is bounded so that the liveness checks
/// run: a rank that dies rings no doorbell.
const IDLE_WAIT: Duration = Duration::from_millis(20);

impl Proxy {
    fn new(board: Board, size: usize) -> Proxy {
        Proxy {
            board,
            size,
            pids: vec![0; size],
            ops: Vec::new(),
            msgs: Matcher::new(),
            taken: Vec::new(),
            consumed: false,
            out: vec![VecDeque::new(); size],
            pool: Vec::new(),
            bounce: vec![0; 2 * CHUNK],
            maps: HashMap::new(),
            net: None,
            budget: Budget::from_env(),
            session: Session::new((0..size).collect(), Cancel::Part),
            submits: Submits::new(size),
        }
    }

    /// Whether rank `r` is on another node (reached through the other proxies).
    fn net_peer(&self, r: usize) -> bool {
        self.net.as_ref().is_some_and(|n| n.is_remote(r))
    }

    /// Moves the network: files the messages from other nodes with the local
    /// ones (as bytes owned by the proxy, matched by the receives as any), and
    /// fails every collective in flight when another node is found lost;
    /// whether anything moved.
    fn pump(&mut self) -> bool {
        let Some(net) = self.net.as_mut() else {
            return false;
        };
        let mut arrived = Vec::new();
        let mut sent = Vec::new();
        let mut moved = net.poll(
            &mut |src: usize, dst: usize, tag: u64, sig: Sig, v: Vec<u8>| {
                arrived.push((src, dst, tag, sig, v))
            },
            &mut |v: Vec<u8>| sent.push(v),
        );
        let lost = net.take_lost();
        let failed = net.take_failed();
        for v in sent {
            self.give(v);
        }
        for (src, dst, tag, sig, v) in arrived {
            // For a collective that ended or failed here, or another
            // collective than this node's parts (which fails it): no receive
            // will take it.
            if !self.session.remote(tag >> 32, src, sig) {
                moved = true;
                self.give(v);
                continue;
            }
            let len = v.len() - TRAILER;
            self.msgs
                .arrived((src, dst, tag), Payload::Owned(Buf { v, len }));
        }
        for f in failed {
            self.session.fail(f.seq, f.outcome(), false);
            moved = true;
        }
        if let Some(node) = lost {
            // A collective spans every node of its communicator: none in flight can
            // finish now.
            self.session.node_lost(node);
            moved = true;
        }
        self.settle();
        moved
    }

    /// Decoding: takes every descriptor the ranks posted; whether there was one.
    fn intake(&mut self) -> bool {
        let mut moved = false;
        for r in 0..self.size {
            if self.pids[r] == 0 {
                self.pids[r] = self.board.pid(r);
            }
            while let Some(d) = self.board.pop(r, self.size) {
                moved = true;
                self.handle(r, d);
            }
        }
        moved
    }

    /// One descriptor from rank `r`.
    fn handle(&mut self, r: usize, d: Desc) {
        match Kind::from_wire(d.kind) {
            Some(Kind::Submit) if !self.session.submit(d.tag, r, Sig(d.sig)) => {}
            Some(Kind::Submit) => match self.read_submit(r, &d) {
                Some(parsed) => match self.op(r, d.tag, &parsed) {
                    // It runs from here on (no `ready`: see `settle`).
                    Ok(op) => self.ops.push(op),
                    Err(refusal) => {
                        let why = refusal.why();
                        tracing::warn!(rank = r, seq = d.tag, "proxy: refused a collective: {why}");
                        // Its other ranks' ops cannot finish without this one.
                        let o = Outcome::refused(&refusal, &format!("rank {r}'s part"));
                        self.session.refuse(d.tag, r, o);
                    }
                },
                None => {
                    let o = Outcome::failed(format!("rank {r}'s submit is unreadable"));
                    self.session.refuse(d.tag, r, o);
                }
            },
            Some(Kind::Cancel) => {
                self.drop_ops(|o| o.rank == r && o.seq == d.tag);
                self.session.cancel(d.tag, r);
                self.reply(r, Kind::Cancelled.desc(d.tag, 0, 0));
            }
            Some(Kind::Detach) => {
                self.session.lose(r, "it left the communicator");
            }
            Some(Kind::Ask) => {
                let mut waiting = self.session.waiting_for(d.tag);
                waiting.extend(self.awaited_away(d.tag));
                for &w in &waiting {
                    self.reply(r, Kind::Waiting.desc(d.tag, w as u64, 0));
                }
                self.reply(r, Kind::Asked.desc(d.tag, waiting.len() as u64, 0));
            }
            // Answers are the proxy's to send, not to receive; unknown kinds are ignored.
            _ => {}
        }
        self.settle();
    }

    /// The ranks of other nodes whose messages this node's parts of collective
    /// `seq` wait for (an open receive with nothing landed), in order: the
    /// session knows the parts of this node's ranks only, and a collective
    /// that a rank of another node never entered waits here on its message.
    fn awaited_away(&self, seq: u64) -> Vec<usize> {
        let mut away: Vec<usize> = self
            .ops
            .iter()
            .filter(|o| o.seq == seq)
            .flat_map(|o| o.m.open_recvs())
            .filter(|r| r.got == 0 && self.net_peer(r.peer))
            .map(|r| r.peer)
            .collect();
        away.sort_unstable();
        away.dedup();
        away
    }

    /// The blob and schedule of rank `r`'s `SUBMIT`, read from its memory
    /// (parsed once per distinct blob: see `submits`).
    fn read_submit(&mut self, r: usize, d: &Desc) -> Option<Rc<Parsed>> {
        if d.len > MAX_BLOB {
            return None;
        }
        rd(self.pids[r], d.addr, self.submits.buffer(d.len as usize)).ok()?;
        self.submits.parse(r, self.size).ok()
    }

    /// The state machine: advances every op, answers those that ended; whether
    /// any did, or a receive let its sender's round end (go round again before
    /// sleeping).
    fn run_ops(&mut self) -> bool {
        let mut moved = false;
        let mut ops = std::mem::take(&mut self.ops);
        self.consumed = false;
        let mut short = Vec::new();
        let mut sizes = Vec::new();
        let mut i = 0;
        while i < ops.len() {
            let res = if ops[i].sched.rounds.is_empty() {
                Ok(true)
            } else {
                self.advance(&mut ops[i])
            };
            match res {
                Ok(false) => i += 1,
                Ok(true) => {
                    self.finish(ops.swap_remove(i), Outcome::Done);
                    moved = true;
                }
                Err(o) => {
                    let op = ops.swap_remove(i);
                    match o {
                        Outcome::NoMemory { bytes, .. } => short.push((op.seq, bytes)),
                        // The other ranks' parts wait for this one's messages,
                        // or its sender for the receive: all fail with it.
                        Outcome::Mismatch { .. } => sizes.push((op.seq, o.clone())),
                        _ => {}
                    }
                    self.finish(op, o);
                    moved = true;
                }
            }
        }
        ops.sort_by_key(|o| (o.seq, o.rank));
        self.ops = ops;
        // A message buffer that could not be allocated fails the whole collective.
        for (seq, bytes) in short {
            let why = Refusal::NoMemory { bytes }.why();
            self.session
                .fail(seq, Outcome::NoMemory { bytes, why }, true);
        }
        // A message of another size than its receive fails the whole
        // collective, on every rank and node, as the DPU proxy's does.
        for (seq, o) in sizes {
            self.session.fail(seq, o, true);
        }
        self.session.retire();
        self.settle();
        moved || self.consumed
    }

    /// Liveness: drops what belongs to ranks that died (their ops, the
    /// mappings of closed buffers) and fails the collectives that wait for them.
    ///
    /// Each rank's process is looked at once, before what the ranks posted is
    /// taken in and the ops run on it: a rank that completed posts its
    /// `Detach` (and may leave messages filed for others) and exits at once,
    /// so its ring and the filed messages are read after it was seen gone,
    /// and it is neither announced dead nor counted lost for what it already
    /// delivered (see "Deciding that a peer is lost" in `SLEEP.md`).
    fn check_liveness(&mut self) {
        self.unmap_closed();
        let dead: Vec<bool> = (0..self.size)
            .map(|r| self.pids[r] != 0 && board::pid_dead(self.pids[r]))
            .collect();
        if dead.iter().any(|&d| d) {
            self.intake();
            // Ops sorted before a sender's match its messages on a later pass.
            for _ in 0..=self.size {
                if !self.run_ops() {
                    break;
                }
            }
            self.flush();
        }
        for (r, &is_dead) in dead.iter().enumerate() {
            if is_dead && self.session.lose(r, "it died") {
                tracing::warn!(rank = r, "proxy: rank lost");
                self.drop_ops(|o| o.rank == r);
                if let Some(net) = self.net.as_mut() {
                    net.announce_dead(r);
                }
            }
        }
        let net = self.net.as_ref();
        let lost: Vec<usize> = (0..self.size)
            .filter(|&r| (!self.session.here(r) && dead[r]) || net.is_some_and(|n| n.is_dead(r)))
            .collect();
        if lost.is_empty() {
            self.settle();
            return;
        }
        let mut keep = Vec::new();
        for o in std::mem::take(&mut self.ops) {
            // Waiting for a message from a lost rank, or for one to take ours.
            let from =
                o.m.open_recvs()
                    .iter()
                    .map(|r| r.peer)
                    .find(|r| lost.contains(r));
            let to = || {
                self.msgs
                    .keys()
                    .find(|k| sent_by(k, o.rank, o.seq) && lost.contains(&k.1))
                    .map(|k| k.1)
            };
            match from.or_else(to) {
                Some(peer) => {
                    let why = format!("rank {peer} is lost: it died");
                    self.finish(o, Outcome::Lost { rank: peer, why });
                }
                None => keep.push(o),
            }
        }
        self.ops = keep;
        self.session.retire();
        self.settle();
        self.flush();
    }

    /// Backoff: nothing moved on this pass.
    fn rest(&self, backoff: &Backoff, seen: u32, spin: Duration) {
        match backoff.pause() {
            // No core of its own, collectives in flight: the ranks' next posts or
            // answers are near. Yielding hands the core back at once and costs
            // neither side a wake-up (see `YIELD_FOR`).
            Pause::Spin | Pause::Yield if !self.ops.is_empty() => {
                if self.board.doorbell(self.size).load(Ordering::Acquire) == seen {
                    std::thread::yield_now();
                }
            }
            // Messages from other nodes ring no doorbell: while collectives (or
            // sends) are in flight, the proxy looks at the network this often.
            _ if self.net.is_some()
                && (!self.ops.is_empty() || self.net.as_ref().is_some_and(ProxyNet::busy)) =>
            {
                self.board
                    .wait_ring(self.size, seen, Duration::ZERO, NET_WAIT);
            }
            _ => {
                let poll = spin.saturating_sub(backoff.idle());
                self.board.wait_ring(self.size, seen, poll, IDLE_WAIT);
            }
        }
    }
}

/// Runs the proxy on the board at `path` with `slots` slots (ranks + 1)
/// until every rank detached or died. After the last work it polls its
/// doorbell for `spin` before it sleeps on it (the ranks' own
/// `CommOptions::spin` (hpc-comm): nonzero where the node
/// has a core for the proxy), so that the next collective of a busy loop
/// costs no wake-up.
pub fn serve(path: &std::path::Path, slots: usize, spin: Duration) -> Result<()> {
    serve_with(path, slots, spin, false)
}

/// Like [`serve`]; with `net`, the communicator spans nodes: the proxy first
/// connects to the other nodes' proxies through the set-up link on its
/// standard input (see `net.rs`), and carries its ranks' steps to and from
/// ranks on other nodes.
pub fn serve_with(path: &std::path::Path, slots: usize, spin: Duration, net: bool) -> Result<()> {
    let board = Board::open(path, slots).map_err(|e| Error::transport_from("proxy", e))?;
    let size = slots - 1;
    board.set_pid(size, std::process::id());
    let mut p = Proxy::new(board, size);
    if net {
        let n = ProxyNet::connect(size)?;
        // Ranks on other nodes are not this proxy's to wait for.
        for r in 0..size {
            if n.is_remote(r) {
                p.session.away(r);
            }
        }
        p.net = Some(n);
    }
    let mut last_check = Instant::now();
    // Where the node has no core for the proxy, it yields before it sleeps.
    let mut backoff = Backoff::new(Duration::ZERO, spin.is_zero());
    let mut busy = hpc_board::busy::Busy::default();
    loop {
        let seen = p.board.doorbell(size).load(Ordering::SeqCst);
        let mut moved = p.intake();
        busy.track(p.ops.len(), || {
            tracing::trace_span!("proxy work", placement = "host", ranks = size)
        });
        moved |= p.pump();
        moved |= p.run_ops();
        busy.track(p.ops.len(), tracing::Span::none);
        p.flush();
        if last_check.elapsed() > LIVENESS_EVERY {
            last_check = Instant::now();
            p.check_liveness();
        }
        if p.session.all_left() {
            if let Some(net) = p.net.as_mut() {
                net.goodbye();
            }
            break;
        }
        if moved {
            backoff.reset();
        } else {
            p.rest(&backoff, seen, spin);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{parse_submit, Blob};
    use hpc_collectives::{Collective, DataType, Options};

    /// An op of this process (cross-memory calls to one's own pid work) over
    /// `send` and `recv`.
    fn op(send: &[u8], recv: &mut [u8]) -> VOp {
        let sched = Collective::Barrier
            .schedule(0, 1, &Options::default())
            .unwrap();
        VOp {
            rank: 0,
            seq: 1,
            m: Machine::new(&sched, false),
            sched: Rc::new(sched),
            mem: OpMem::of_own(send, recv, 0, false),
            maps: Vec::new(),
            sig: Sig::NONE,
        }
    }

    #[test]
    fn skips_the_copies_a_rank_made_itself() {
        let board = Board::unlinked("proxy-own", 2);
        let mut p = Proxy::new(board, 1);
        p.pids = vec![std::process::id()];
        // One rank: an allgather is the copy of its own block, in round 0.
        let coll = Collective::Allgather {
            count: 3,
            dtype: DataType::U8,
        };
        for own in [false, true] {
            let send = [1u8, 2, 3];
            let mut recv = [0u8; 3];
            let mut o = op(&send, &mut recv);
            o.sched = Rc::new(coll.schedule(0, 1, &Options::default()).unwrap());
            o.m = Machine::new(&o.sched, own);
            assert!(matches!(p.advance(&mut o), Ok(true)));
            drop(o);
            // Made by the proxy, or left to the rank (which made it before it posted).
            assert_eq!(recv, if own { [0; 3] } else { send }, "own_copies {own}");
        }
    }

    #[test]
    fn submits_that_are_not_one_are_refused() {
        let blob = Blob {
            coll: Collective::Allgather {
                count: 4,
                dtype: DataType::F32,
            },
            opts: Options::default(),
            send: 0x1000,
            send_len: 16,
            recv: 0x2000,
            recv_len: 32,
            send_shm: None,
            recv_shm: None,
            own_copies: false,
        };
        let bytes = postcard::to_allocvec(&blob).unwrap();
        let (got, sched) = parse_submit(&bytes, 1, 2).unwrap();
        assert_eq!(got.recv_len, 32);
        assert!(!sched.rounds.is_empty());
        // A receive buffer too small for the collective, a rank out of range,
        // a truncated or garbled blob: refused, not scheduled.
        let short = Blob {
            recv_len: 31,
            ..blob
        };
        let short = postcard::to_allocvec(&short).unwrap();
        assert_eq!(parse_submit(&short, 1, 2).err(), Some(Code::Failed));
        assert_eq!(parse_submit(&bytes, 2, 2).err(), Some(Code::Failed));
        assert_eq!(
            parse_submit(&bytes[..bytes.len() / 2], 1, 2).err(),
            Some(Code::Failed)
        );
        assert_eq!(parse_submit(&[0xff; 40], 1, 2).err(), Some(Code::Failed));
    }

    #[test]
    fn submits_whose_scratch_would_overflow_are_refused_not_panicked_on() {
        // Valid counts (just under isize::MAX bytes per buffer) whose schedule's
        // scratch blocks together pass what a usize counts: the proxy building
        // it overflowed and panicked; now it is a refusal of that collective.
        let blob = Blob {
            coll: Collective::Alltoall {
                count: isize::MAX as usize / 2,
                dtype: DataType::U8,
            },
            opts: Options::with_algorithm(hpc_collectives::Algorithm::Bruck),
            send: 0x1000,
            send_len: usize::MAX,
            recv: 0x2000,
            recv_len: usize::MAX,
            send_shm: None,
            recv_shm: None,
            own_copies: false,
        };
        let bytes = postcard::to_allocvec(&blob).unwrap();
        for rank in 0..2 {
            assert_eq!(parse_submit(&bytes, rank, 2).err(), Some(Code::Failed));
        }
    }
}
