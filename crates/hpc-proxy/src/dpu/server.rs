//! The DPU proxy's server: its loop, the ranks' requests, the RMA of
//! their spans, the steps between nodes. The life cycle of each
//! communicator's collectives (parts, start, failures, losses, cancels,
//! retirement) is its [`Session`](crate::session::Session)'s; this
//! is the I/O that feeds it and carries out its effects.

mod messages;

use super::link::{DETACH_GRACE, WATCH_EVERY};
use super::state::{FromNet, Group, Outgoing, Served, Slot, Wait, UNOPENED_MAX};
use super::wire::{
    check_submit, decode_request, unwire, wire, Answer, Place, Request, Span, Waiting, TAG_ANSWER,
    TAG_REQUEST,
};
use crate::memory::{footprint, try_filled, Budget, Refusal};
use crate::net::{closed, tag64, ProxyNet, TRAILER};
use crate::session::{Effect, Outcome, Sizes};
use crate::steps::{Run, RunError};
use hpc_board::backoff::Backoff;
use hpc_board::sig::Sig;
use hpc_board::{Error, Result};
use hpc_collectives::{Collective, Options};
use hpc_rdma::{OpId, Payload, Transport};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The proxy in DPU placement: the link to its node's ranks, the
/// communicators it serves and their collectives, the other nodes' proxies.
pub struct Server {
    t: Transport,
    /// The node's ranks (the link's ranks but the proxy).
    size: usize,
    /// The first communicator's rank of each link rank.
    first: Vec<usize>,
    /// The node index of each rank of the first communicator.
    node_of: Vec<usize>,
    /// The communicators served, by id (0: the first).
    comms: HashMap<u64, Served>,
    /// Each link rank's communicators: its number for one, and the id.
    names: Vec<HashMap<u32, u64>>,
    /// Each link rank's numbers of communicators it could not open, and why.
    refused: Vec<HashMap<u32, String>>,
    /// Link ranks that died or left every communicator, and why.
    gone: Vec<Option<String>>,
    ops: HashMap<OpId, Wait>,
    /// The ranks' watch connections (`None` once closed).
    watch: Vec<Option<TcpStream>>,
    /// When each rank's watch connection was found closed, for a rank not yet
    /// gone: it died unless its `Detach` arrives within [`DETACH_GRACE`].
    closed_at: Vec<Option<Instant>>,
    /// The other nodes' proxies, where the communicator spans nodes.
    net: Option<ProxyNet>,
    /// What came from other nodes for communicators not opened here yet.
    unopened: HashMap<u64, Vec<FromNet>>,
    /// Communicators every member on this node left.
    closed: BTreeSet<u64>,
    /// The bytes held for the collectives in flight, of every communicator,
    /// against the cap (`HPC_COLL_PROXY_MAX_SCRATCH`), and for the
    /// point-to-point messages held.
    budget: Budget,
    /// Each link rank's point-to-point sends not routed yet, in its order.
    sending: Vec<VecDeque<Outgoing>>,
}

impl Server {
    pub fn new(
        t: Transport,
        place: Place,
        watch: Vec<Option<TcpStream>>,
        net: Option<ProxyNet>,
    ) -> Server {
        let size = place.ranks.len();
        let mut first = Served::new(
            (0..place.node_of.len()).collect(),
            &place.ranks,
            &place.node_of,
        );
        first.locals = vec![Some(0); size];
        Server {
            t,
            size,
            first: place.ranks,
            node_of: place.node_of,
            comms: HashMap::from([(0, first)]),
            names: vec![HashMap::from([(0, 0)]); size],
            refused: vec![HashMap::new(); size],
            gone: vec![None; size],
            closed_at: vec![None; size],
            ops: HashMap::new(),
            watch,
            net,
            unopened: HashMap::new(),
            closed: BTreeSet::new(),
            budget: Budget::from_env(),
            sending: (0..size).map(|_| VecDeque::new()).collect(),
        }
    }

    /// Ranks whose watch connection closed are gone: as having left, if their
    /// `Detach` arrives within [`DETACH_GRACE`] (the watch and the transport
    /// are different connections, so a rank that detached and then exited may
    /// have its watch seen closed first), else as having died.
    fn check_watch(&mut self) {
        for r in 0..self.size {
            if self.watch[r].as_ref().is_some_and(closed) {
                self.watch[r] = None;
                self.closed_at[r] = Some(Instant::now());
            }
            if self.gone[r].is_some() {
                self.closed_at[r] = None;
            } else if self.closed_at[r].is_some_and(|t| t.elapsed() >= DETACH_GRACE) {
                self.closed_at[r] = None;
                self.lose(r, "its process ended (its connection to the proxy closed)");
            }
        }
    }

    pub fn run(mut self) -> Result<()> {
        for r in 0..self.size {
            self.listen(r);
        }
        let mut backoff = Backoff::new(Duration::from_micros(50), true);
        let mut watched = Instant::now();
        while !self.gone.iter().all(Option::is_some) {
            if watched.elapsed() >= WATCH_EVERY {
                watched = Instant::now();
                self.check_watch();
            }
            let done = self
                .t
                .poll()
                .map_err(|e| Error::transport_from("DPU proxy", e))?;
            let mut moved = !done.is_empty();
            for c in done {
                if let Some(w) = self.ops.remove(&c.op) {
                    self.complete(w, c.result);
                }
            }
            moved |= self.poll_net();
            self.retire();
            if moved {
                backoff.reset();
            } else {
                // Sleeps longer the longer it is idle, up to a millisecond.
                backoff.rest(|idle| {
                    (idle / 16).clamp(Duration::from_micros(50), Duration::from_millis(1))
                });
            }
        }
        tracing::info!("DPU proxy: every rank left");
        if let Some(net) = self.net.as_mut() {
            net.goodbye();
        }
        Ok(())
    }

    /// Messages, failures and losses from the other nodes' proxies; whether
    /// anything came.
    fn poll_net(&mut self) -> bool {
        let Some(net) = self.net.as_mut() else {
            return false;
        };
        let mut got = Vec::new();
        let moved = net.poll(
            &mut |src, dst, tag, sig, mut v| {
                v.truncate(v.len().saturating_sub(TRAILER));
                got.push((src, dst, tag, sig, v));
            },
            &mut |_| {},
        );
        let lost = net.take_lost();
        let failed = net.take_failed();
        for (src, dst, tag, sig, mut v) in got {
            // The communicator's id ends the payload.
            let Some(id) = v
                .len()
                .checked_sub(8)
                .and_then(|at| v.split_off(at).try_into().ok())
                .map(u64::from_le_bytes)
            else {
                tracing::warn!(
                    src,
                    dst,
                    "DPU proxy: dropped a message without its communicator"
                );
                continue;
            };
            self.take_from_net(id, FromNet::Msg(src, dst, tag, sig, v));
        }
        for f in failed {
            self.take_from_net(f.comm, FromNet::Failed(f));
        }
        if lost.is_some() {
            // Every communicator that spans a lost node fails what it has in
            // flight, and every later collective.
            let hit: Vec<(u64, usize)> = self
                .comms
                .iter()
                .filter_map(|(&id, c)| Some((id, self.net.as_ref()?.lost_among(&c.nodes)?)))
                .collect();
            for (id, node) in hit {
                if let Some(c) = self.comms.get_mut(&id) {
                    c.session.node_lost(node);
                }
                self.settle(id);
            }
        }
        // Receives that wait for a rank another node's proxy reported dead.
        let net = self.net.as_ref();
        let hit: Vec<(u64, u64, usize)> = self
            .comms
            .iter()
            .flat_map(|(&id, c)| {
                // A failed collective's schedules are stopped.
                c.groups.iter().filter_map(move |(&seq, g)| {
                    let r = g
                        .run
                        .as_ref()?
                        .waiting_on()
                        .into_iter()
                        .find(|&r| net.is_some_and(|n| n.is_dead(c.members[r])))?;
                    Some((id, seq, r))
                })
            })
            .collect();
        for (id, seq, r) in hit {
            let why = format!("rank {r} is lost: it died");
            self.fail(id, seq, Outcome::Lost { rank: r, why }, false);
            self.settle(id);
        }
        if moved && self.comms.values().any(|c| c.mailbox.waits_for_one()) {
            // Point-to-point receives that wait for a rank reported dead, or
            // on a lost node (a collective's step costs no allocation here).
            let ids: Vec<u64> = self.comms.keys().copied().collect();
            for id in ids {
                self.fail_waiting(id);
            }
        }
        moved
    }

    /// Something from another node's proxy for communicator `id`.
    fn take_from_net(&mut self, id: u64, m: FromNet) {
        if self.closed.contains(&id) {
            tracing::debug!(
                comm = id,
                "DPU proxy: dropped a message for a closed communicator"
            );
            return;
        }
        let Some(c) = self.comms.get_mut(&id) else {
            // Its members here have not opened it yet.
            let q = self.unopened.entry(id).or_default();
            if q.len() < UNOPENED_MAX {
                q.push(m);
            } else {
                tracing::warn!(
                    comm = id,
                    "DPU proxy: too much for a communicator nobody opened"
                );
            }
            return;
        };
        match m {
            FromNet::Msg(src, dst, tag, sig, v) => {
                let (Some(&s), Some(&d)) = (c.rank_of.get(&src), c.rank_of.get(&dst)) else {
                    tracing::warn!(
                        comm = id,
                        src,
                        dst,
                        "DPU proxy: dropped a message between ranks not of its communicator"
                    );
                    return;
                };
                let seq = tag >> 32;
                if messages::is_message_tag(tag) {
                    if c.ranks.contains(&d) {
                        self.arrive_from(id, s, d, tag as u32, v);
                    } else {
                        tracing::warn!(
                            comm = id,
                            src,
                            dst,
                            "DPU proxy: dropped a message for a rank not of this node"
                        );
                    }
                } else if !c.session.remote(seq, s, sig) {
                    tracing::debug!(
                        comm = id,
                        seq,
                        src,
                        dst,
                        "DPU proxy: dropped a message for a collective that ended or failed, or another collective"
                    );
                    self.settle(id);
                } else {
                    let size = c.links.len();
                    let g = c.groups.entry(seq).or_insert_with(|| Group::new(size));
                    match g.run.as_mut() {
                        Some(run) => run.deliver(s, d, tag as u32, v),
                        None => g.early.push((s, d, tag as u32, v)),
                    }
                    self.advance(id, seq);
                }
            }
            FromNet::Failed(f) => c.session.fail(f.seq, f.outcome(), false),
        }
        self.settle(id);
    }

    fn listen(&mut self, r: usize) {
        match self.t.recv(r, TAG_REQUEST) {
            Ok(op) => {
                self.ops.insert(op, Wait::Request(r));
            }
            Err(e) => self.lose(r, &e.to_string()),
        }
    }

    fn complete(&mut self, w: Wait, res: hpc_rdma::Result<Payload>) {
        match (w, res) {
            (Wait::Request(r), Ok(p)) => self.request(r, &p.into_bytes()),
            (Wait::Request(r), Err(e)) => self.lose(r, &e.to_string()),
            (
                Wait::Get {
                    comm,
                    seq,
                    slot,
                    recv,
                },
                Ok(p),
            ) => {
                let Some(c) = self.comms.get_mut(&comm) else {
                    return;
                };
                if let Some(s) = c.groups.get_mut(&seq).and_then(|g| g.slots[slot].as_mut()) {
                    let v = p.into_bytes();
                    if recv {
                        s.recv = Some(v);
                    } else {
                        s.send = Some(v);
                    }
                    if s.send.is_some() && s.recv.is_some() {
                        c.session.ready(seq, slot);
                    }
                }
                self.settle(comm);
            }
            (
                Wait::Get {
                    comm,
                    seq,
                    slot,
                    recv,
                },
                Err(e),
            ) => {
                let what = if recv { "receive" } else { "send" };
                let Some(r) = self.comms.get(&comm).map(|c| c.ranks[slot]) else {
                    return;
                };
                let why = format!("reading rank {r}'s {what} span: {e}");
                self.fail(comm, seq, Outcome::failed(why), true);
                self.settle(comm);
            }
            (Wait::Put { comm, seq, slot }, res) => {
                let Some(c) = self.comms.get_mut(&comm) else {
                    return;
                };
                let o = match res {
                    Ok(_) => Outcome::Done,
                    Err(e) => Outcome::failed(format!(
                        "writing rank {}'s receive span: {e}",
                        c.ranks[slot]
                    )),
                };
                c.session.done(seq, slot, o);
                self.settle(comm);
            }
            (Wait::MessageGet { link, w }, res) => {
                let got = res
                    .map(Payload::into_bytes)
                    .map_err(|e| format!("reading rank {}'s message: {e}", self.first[link]));
                self.message_got(link, w, got);
            }
            (Wait::MessagePut { link, w, src, tag }, res) => {
                let ok = res.map(drop).map_err(|e| e.to_string());
                self.message_put((link, w), src, tag, ok);
            }
            (Wait::Answer, Ok(_)) => {}
            (Wait::Answer, Err(e)) => {
                tracing::debug!(error = %e, "DPU proxy: an answer was not delivered")
            }
        }
    }

    /// One request of link rank `r`.
    fn request(&mut self, r: usize, bytes: &[u8]) {
        let (w, req) = match decode_request(bytes) {
            Ok(x) => x,
            Err(why) => {
                tracing::warn!(rank = r, "DPU proxy: refused {why}");
                // The sequence number, where there is one, gets the refusal.
                if let Some(w) = bytes.first_chunk::<8>().map(|s| u64::from_le_bytes(*s)) {
                    let (local, seq) = unwire(w);
                    let c = self.first[r];
                    let why = format!("rank {c} sent {why}");
                    match self.opened(r, local) {
                        Ok((id, slot)) => {
                            if let Some(c) = self.comms.get_mut(&id) {
                                c.session.refuse(seq, slot, Outcome::failed(why));
                            }
                            self.settle(id);
                        }
                        Err(_) => self.send_answer(r, w, &Outcome::failed(why)),
                    }
                }
                self.listen(r);
                return;
            }
        };
        let (local, seq) = unwire(w);
        if let Request::Open { comm, members } = req {
            self.open(r, local, comm, members);
            self.listen(r);
            return;
        }
        let (id, slot) = match self.opened(r, local) {
            Ok(x) => x,
            Err(why) => {
                if !matches!(req, Request::Detach) {
                    self.send_answer(r, w, &Outcome::failed(why));
                } else if self.refused[r].remove(&local).is_some() && self.names[r].is_empty() {
                    // It left the last communicator it had here (one refused).
                    self.gone[r] = Some("it left the communicator".into());
                    return;
                }
                self.listen(r);
                return;
            }
        };
        match req {
            Request::Submit {
                coll,
                opts,
                send,
                recv,
            } => {
                self.submit(id, slot, seq, (&coll, &opts, &send, &recv));
                self.listen(r);
            }
            Request::Send { .. } | Request::Recv { .. } => {
                self.message(r, id, slot, w, req);
                self.listen(r);
            }
            Request::Cancel if messages::is_message(w) => {
                self.message_cancel(id, slot, r, w);
                self.listen(r);
            }
            Request::Cancel => {
                if let Some(c) = self.comms.get_mut(&id) {
                    c.session.cancel(seq, slot);
                }
                self.settle(id);
                self.listen(r);
            }
            Request::Ask { seq: asked } => {
                let ranks = self
                    .comms
                    .get(&id)
                    .map(|c| c.session.waiting_for(asked))
                    .unwrap_or_default();
                self.send_on_answer_tag(r, w, &Waiting { ranks });
                self.listen(r);
            }
            Request::Detach => {
                tracing::debug!(rank = r, comm = id, "DPU proxy: rank detached");
                self.names[r].remove(&local);
                self.lose_in(id, slot, "it left the communicator");
                if self.names[r].is_empty() {
                    // It left every communicator it had here: its link is done.
                    self.gone[r] = Some("it left the communicator".into());
                } else {
                    self.listen(r);
                }
            }
            Request::Open { .. } => unreachable!("handled above"),
        }
    }

    /// The communicator of link rank `r`'s number `local`, and its slot
    /// there; or why there is none.
    fn opened(&self, r: usize, local: u32) -> std::result::Result<(u64, usize), String> {
        if let Some(why) = self.refused[r].get(&local) {
            return Err(why.clone());
        }
        self.names[r]
            .get(&local)
            .and_then(|&id| Some((id, self.comms.get(&id)?.slot(r)?)))
            .ok_or_else(|| {
                format!(
                    "rank {} sent a request for a communicator it did not open ({local})",
                    self.first[r]
                )
            })
    }

    /// Link rank `r` joined communicator `id` (a split), its number `local`.
    fn open(&mut self, r: usize, local: u32, id: u64, members: Vec<usize>) {
        let me = self.first[r];
        let n = self.node_of.len();
        let mut sorted = members.clone();
        sorted.sort_unstable();
        sorted.dedup();
        let why = if local == 0 || self.names[r].contains_key(&local) {
            Some(format!("rank {me} opened its communicator {local} twice"))
        } else if sorted.len() != members.len() || members.iter().any(|&m| m >= n) {
            Some(format!(
                "rank {me} opened a communicator of ranks {members:?}, not distinct ranks below {n}"
            ))
        } else if !members.contains(&me) {
            Some(format!(
                "rank {me} opened a communicator of ranks {members:?}, without itself"
            ))
        } else if self.comms.get(&id).is_some_and(|c| c.members != members)
            || self.closed.contains(&id)
        {
            Some(format!(
                "rank {me} opened communicator {id:x} with other members than its other ranks \
                 did (an id used twice)"
            ))
        } else {
            None
        };
        if let Some(why) = why {
            tracing::warn!(rank = me, comm = id, "DPU proxy: refused {why}");
            self.refused[r].insert(local, why);
            return;
        }
        let fresh = !self.comms.contains_key(&id);
        let c = self
            .comms
            .entry(id)
            .or_insert_with(|| Served::new(members, &self.first, &self.node_of));
        if let Some(slot) = c.slot(r) {
            c.locals[slot] = Some(local);
        }
        self.names[r].insert(local, id);
        tracing::debug!(rank = me, comm = id, "DPU proxy: a split opened");
        if fresh {
            // Every collective fails at once where one of its nodes is lost.
            if let Some(node) = self.net.as_ref().and_then(|n| n.lost_among(&c.nodes)) {
                c.session.node_lost(node);
            }
            for m in self.unopened.remove(&id).unwrap_or_default() {
                self.take_from_net(id, m);
            }
        }
    }

    /// Link rank `r`'s part of collective `seq` of communicator `id` (its
    /// member in `slot`): the session takes it or answers it.
    fn submit(
        &mut self,
        id: u64,
        slot: usize,
        seq: u64,
        req: (&Collective, &Options, &Span, &Span),
    ) {
        let Some(c) = self.comms.get_mut(&id) else {
            return;
        };
        if c.session.submit(seq, slot, Sig::of(req.0)) {
            if let Err(o) = self.take_part(id, slot, seq, req) {
                if let Some(c) = self.comms.get_mut(&id) {
                    c.session.refuse(seq, slot, o);
                }
            }
        }
        self.settle(id);
    }

    /// Takes in a part the session accepted: checks it, admits its memory
    /// and reads its spans by RMA get; its refusal's outcome.
    fn take_part(
        &mut self,
        id: u64,
        slot: usize,
        seq: u64,
        (coll, opts, send, recv): (&Collective, &Options, &Span, &Span),
    ) -> std::result::Result<(), Outcome> {
        let c = &self.comms[&id];
        let (link, rank, size) = (c.links[slot], c.ranks[slot], c.members.len());
        let part = check_submit(coll, opts, send, recv, link, rank, size).map_err(|why| {
            tracing::warn!(rank, seq, comm = id, "DPU proxy: refused {why}");
            Outcome::failed(format!("rank {rank}'s request: {why}"))
        })?;
        let (sk, so, sl) = part.send;
        let (rk, ro, rl) = part.recv;
        let recv_input = part.recv_input;
        // Its memory here: the staging copies of its spans and its scratch, within
        // the cap; the receive staging now (the send's comes with its get, the
        // scratch when the schedules start).
        let refused = |r: Refusal| {
            tracing::warn!(rank, seq, comm = id, "DPU proxy: refused {}", r.why());
            Outcome::refused(&r, &format!("rank {rank}'s part"))
        };
        let held = self
            .budget
            .admit(footprint(&[sl, rl, part.sched.scratch_bytes]))
            .map_err(refused)?;
        let staged = if !recv_input || rl == 0 {
            Some(try_filled(rl, 0).map_err(|_| {
                self.budget.release(held);
                refused(Refusal::NoMemory { bytes: held })
            })?)
        } else {
            None
        };
        let Some(c) = self.comms.get_mut(&id) else {
            self.budget.release(held);
            return Ok(());
        };
        c.session.hold(seq, held);
        let g = c
            .groups
            .entry(seq)
            .or_insert_with(|| Group::new(c.links.len()));
        g.slots[slot] = Some(Slot {
            part: Some(part),
            send: (sl == 0).then(Vec::new),
            recv: staged,
        });
        let mut ready = true;
        for (key, off, len, recv) in [(sk, so, sl, false), (rk, ro, rl, true)] {
            if len == 0 || (recv && !recv_input) {
                continue;
            }
            ready = false;
            let op = self.t.get(&key, off, len).map_err(|e| {
                let what = if recv { "receive" } else { "send" };
                Outcome::failed(format!("reading rank {rank}'s {what} span: {e}"))
            })?;
            let w = Wait::Get {
                comm: id,
                seq,
                slot,
                recv,
            };
            self.ops.insert(op, w);
        }
        if ready {
            c.session.ready(seq, slot);
        }
        Ok(())
    }

    /// Sends link rank `r` the answer to its collective numbered `w` on the link.
    fn send_answer(&mut self, r: usize, w: u64, o: &Outcome) {
        self.send_answer_to(r, w, o, usize::MAX);
    }

    /// [`Server::send_answer`] to the communicator's rank `rank` (a
    /// disagreement names to each rank the other one).
    fn send_answer_to(&mut self, r: usize, w: u64, o: &Outcome, rank: usize) {
        // The edge: the typed outcome becomes the wire's code and word.
        let (code, aux) = o.wire_to(rank);
        let a = Answer {
            code: code as u8,
            aux,
            why: o.why(),
        };
        self.send_on_answer_tag(r, w, &a);
    }

    /// Sends link rank `r` `what` on the answer tag of its request numbered
    /// `w` on the link (a collective's answer, a message's delivery, an
    /// ask's answer); nothing to a rank that is gone.
    pub fn send_on_answer_tag<T: serde::Serialize>(&mut self, r: usize, w: u64, what: &T) {
        if self.gone[r].is_some() {
            return;
        }
        let Ok(bytes) = postcard::to_allocvec(what) else {
            return;
        };
        match self.t.send(r, TAG_ANSWER + w, bytes) {
            Ok(op) => {
                self.ops.insert(op, Wait::Answer);
            }
            Err(e) => self.lose(r, &e.to_string()),
        }
    }

    /// Link rank `r` died: every communicator it is a member of loses it,
    /// and the other nodes' proxies are told, to fail what waits for it.
    fn lose(&mut self, r: usize, cause: &str) {
        if self.gone[r].is_some() {
            return;
        }
        let first = self.first[r];
        tracing::debug!(rank = first, cause, "DPU proxy: rank gone");
        self.gone[r] = Some(cause.to_string());
        // Its sends read in flight hold no budget any more.
        let reserved: u64 = self.sending[r].iter().map(|o| o.reserved).sum();
        self.budget.release(reserved);
        self.sending[r].clear();
        if let Some(net) = self.net.as_mut() {
            net.announce_dead(first);
        }
        let mut hit: Vec<(u64, usize)> = self
            .comms
            .iter()
            .filter_map(|(&id, c)| Some((id, c.slot(r)?)))
            .collect();
        hit.sort_unstable();
        for (id, slot) in hit {
            self.lose_in(id, slot, cause);
        }
    }

    /// The member in `slot` of communicator `id` is gone (left it, or died).
    fn lose_in(&mut self, id: u64, slot: usize, cause: &str) {
        if let Some(c) = self.comms.get_mut(&id) {
            c.session.lose(slot, cause);
        }
        self.message_leave(id, slot);
        self.settle(id);
    }

    /// Fails collective `seq` of communicator `id` here (`tell`: and tells
    /// the other nodes' proxies).
    fn fail(&mut self, id: u64, seq: u64, o: Outcome, tell: bool) {
        if let Some(c) = self.comms.get_mut(&id) {
            c.session.fail(seq, o, tell);
        }
    }

    /// Every part of collective `seq` is in: its node's schedules start.
    fn start(&mut self, id: u64, seq: u64) {
        let Some(g) = self.comms.get_mut(&id).and_then(|c| c.groups.get_mut(&seq)) else {
            return;
        };
        let mut parts = Vec::with_capacity(g.slots.len());
        for s in g.slots.iter_mut().flatten() {
            let Some(part) = s.part.take() else {
                return;
            };
            g.spans.push(part.recv);
            parts.push((
                part.sched,
                s.send.take().unwrap_or_default(),
                s.recv.take().unwrap_or_default(),
            ));
        }
        let mut run = match Run::new(parts) {
            Ok(run) => run,
            Err(bytes) => {
                let why = Refusal::NoMemory { bytes }.why();
                tracing::warn!(seq, "DPU proxy: {why}");
                return self.fail(id, seq, Outcome::NoMemory { bytes, why }, true);
            }
        };
        for (src, dst, tag, v) in g.early.drain(..) {
            run.deliver(src, dst, tag, v);
        }
        g.run = Some(run);
        self.advance(id, seq);
    }

    /// Runs what can run of collective `seq`'s schedules; puts the results
    /// once they finished.
    fn advance(&mut self, id: u64, seq: u64) {
        let Some(c) = self.comms.get_mut(&id) else {
            return;
        };
        let sig = c.session.sig(seq);
        let Served {
            members,
            groups,
            ranks,
            ..
        } = c;
        let Some(run) = groups.get_mut(&seq).and_then(|g| g.run.as_mut()) else {
            return;
        };
        let net = &mut self.net;
        // Steps to other nodes go between the first communicator's ranks,
        // with the communicator's id after the payload.
        let mut remote = |src: usize, dst: usize, tag: u32, mut data: Vec<u8>| {
            let Some(net) = net.as_mut() else {
                return Err(usize::MAX);
            };
            data.extend_from_slice(&id.to_le_bytes());
            data.resize(data.len() + TRAILER, 0);
            net.send(members[src], members[dst], tag64(seq, tag), sig, data)
        };
        let _span = tracing::debug_span!("dpu-collective", comm = id, seq).entered();
        match run.advance(&mut remote) {
            Ok(true) => self.finish(id, seq),
            Ok(false) => {
                if run.waiting_on().is_empty() {
                    // Every blocked receive waits for a rank of this node.
                    let why = "the schedules deadlocked".to_string();
                    self.fail(id, seq, Outcome::failed(why), true);
                }
            }
            Err(RunError::Mismatch {
                src,
                dst,
                sent,
                expected,
            }) => {
                let sizes = Sizes::new(src, dst, sent, expected);
                let local = ranks.contains(&src);
                let other = if local { dst } else { src };
                let o = Outcome::Mismatch {
                    sender: other,
                    sizes: Some(sizes),
                    why: sizes.describe(|r| r),
                };
                self.fail(id, seq, o, true);
            }
            Err(RunError::NodeLost(node)) => {
                self.fail(id, seq, Outcome::NodeLost { node }, false);
            }
            Err(RunError::Step(why)) => self.fail(id, seq, Outcome::failed(why), true),
        }
    }

    /// Collective `seq`'s schedules finished: the session has each rank's
    /// result delivered ([`Server::deliver`]).
    fn finish(&mut self, id: u64, seq: u64) {
        let Some(c) = self.comms.get_mut(&id) else {
            return;
        };
        let Some(g) = c.groups.get_mut(&seq) else {
            return;
        };
        let Some(run) = g.run.take() else {
            return;
        };
        g.results = run.into_recvs();
        c.session.complete(seq);
    }

    /// The result of the member in `slot` goes back with RMA put (and the
    /// answer after it).
    fn deliver(&mut self, id: u64, seq: u64, slot: usize) {
        let Some(c) = self.comms.get_mut(&id) else {
            return;
        };
        let rank = c.ranks[slot];
        let Some(g) = c.groups.get_mut(&seq) else {
            return;
        };
        let (Some(data), Some(&(key, off, len))) = (g.results.get_mut(slot), g.spans.get(slot))
        else {
            return;
        };
        if len == 0 {
            return c.session.done(seq, slot, Outcome::Done);
        }
        match self.t.put(std::mem::take(data), &key, off) {
            Ok(op) => {
                let w = Wait::Put {
                    comm: id,
                    seq,
                    slot,
                };
                self.ops.insert(op, w);
                c.session.busy(seq, slot);
            }
            Err(e) => {
                let why = format!("writing rank {rank}'s receive span: {e}");
                c.session.done(seq, slot, Outcome::failed(why));
            }
        }
    }

    /// Retires the collectives every member of which is answered or gone
    /// (their sessions remember them as ended, for messages that come
    /// late), and forgets the splits every member on this node left.
    fn retire(&mut self) {
        let ids: Vec<u64> = self.comms.keys().copied().collect();
        for id in ids {
            if let Some(c) = self.comms.get_mut(&id) {
                c.session.retire();
            }
            self.settle(id);
            if id != 0 && self.comms.get(&id).is_some_and(|c| c.session.over()) {
                tracing::debug!(comm = id, "DPU proxy: every member here left a split");
                if let Some(c) = self.comms.remove(&id) {
                    self.budget.release(c.mailbox.held_bytes() as u64);
                }
                self.closed.insert(id);
            }
        }
    }

    /// Carries out what communicator `id`'s session decided.
    fn settle(&mut self, id: u64) {
        while let Some(e) = self.comms.get_mut(&id).and_then(|c| c.session.poll()) {
            let Some(c) = self.comms.get_mut(&id) else {
                return;
            };
            match e {
                Effect::Answer { seq, slot, outcome } => {
                    if let Some(local) = c.locals[slot] {
                        let link = c.links[slot];
                        let rank = c.ranks[slot];
                        self.send_answer_to(link, wire(local, seq), &outcome, rank);
                    }
                }
                Effect::Tell { seq, outcome } => {
                    if let Some(net) = self.net.as_mut() {
                        net.announce_failed(id, seq, &outcome, &c.nodes);
                    }
                }
                Effect::Start { seq } => self.start(id, seq),
                Effect::Stop { seq } => {
                    if let Some(g) = c.groups.get_mut(&seq) {
                        g.run = None;
                        g.early.clear();
                    }
                }
                Effect::Deliver { seq, slot } => self.deliver(id, seq, slot),
                Effect::Retire { seq, bytes } => {
                    c.groups.remove(&seq);
                    self.budget.release(bytes);
                }
            }
        }
    }
}
