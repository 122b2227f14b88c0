//! The DPU proxy's server: its loop, the ranks' requests, the RMA of
//! their spans, the steps between nodes and failures.

use super::client::{DETACH_GRACE, WATCH_EVERY};
use super::state::{FromNet, Group, Served, Slot, Wait, UNOPENED_MAX};
use super::wire::{
    check_submit, decode_request, unwire, wire, Answer, Place, Request, Span, TAG_ANSWER,
    TAG_REQUEST,
};
use crate::backoff::{Backoff, Pause};
use crate::error::{Error, Result};
use crate::proxy::memory::{footprint, try_filled, Budget, Refusal};
use crate::proxy::net::{closed, ProxyNet, TRAILER};
use crate::proxy::protocol::Code;
use crate::proxy::session::Outcome;
use crate::proxy::steps::{Run, RunError};
use hpc_collectives::{Collective, Options};
use hpc_rdma::{OpId, Payload, Transport};
use std::collections::{BTreeSet, HashMap};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The proxy in DPU placement: the link to its node's ranks, the
/// communicators it serves and their collectives, the other nodes' proxies.
pub(super) struct Server {
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
    /// against the cap (`HPC_COLL_PROXY_MAX_SCRATCH`).
    budget: Budget,
}

/// The tag of a message between proxies: the collective and the step's tag.
pub(super) fn tag64(seq: u64, tag: u32) -> u64 {
    (seq << 32) | u64::from(tag)
}

impl Server {
    pub(super) fn new(
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

    pub(super) fn run(mut self) -> Result<()> {
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
            self.run_ready();
            self.retire();
            if moved {
                backoff.reset();
            } else {
                match backoff.pause() {
                    Pause::Spin => std::hint::spin_loop(),
                    Pause::Yield => std::thread::yield_now(),
                    // Longer the longer it is idle, up to a millisecond.
                    Pause::Sleep => std::thread::sleep(
                        (backoff.idle() / 16)
                            .clamp(Duration::from_micros(50), Duration::from_millis(1)),
                    ),
                }
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
            &mut |src, dst, tag, mut v| {
                v.truncate(v.len().saturating_sub(TRAILER));
                got.push((src, dst, tag, v));
            },
            &mut |_| {},
        );
        let lost = net.take_lost();
        let failed = net.take_failed();
        for (src, dst, tag, mut v) in got {
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
            self.take_from_net(id, FromNet::Msg(src, dst, tag, v));
        }
        for f in failed {
            self.take_from_net(f.comm, FromNet::Failed(f));
        }
        if lost.is_some() {
            // Every communicator that spans a lost node fails what it has in
            // flight (and, by `group`, every later collective).
            let hit: Vec<(u64, usize, Vec<u64>)> = self
                .comms
                .iter()
                .filter_map(|(&id, c)| {
                    let node = self.net.as_ref()?.lost_among(&c.nodes)?;
                    Some((id, node, c.groups.keys().copied().collect()))
                })
                .collect();
            for (id, node, seqs) in hit {
                for seq in seqs {
                    self.fail_as(id, seq, Outcome::NodeLost { node }, false);
                }
            }
        }
        // Receives that wait for a rank another node's proxy reported dead.
        let net = self.net.as_ref();
        let hit: Vec<(u64, u64, usize)> = self
            .comms
            .iter()
            .flat_map(|(&id, c)| {
                c.groups
                    .iter()
                    .filter(|(_, g)| g.failed.is_none())
                    .filter_map(move |(&seq, g)| {
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
            self.fail_as(id, seq, Outcome::Lost { rank: r, why }, false);
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
        let Some(c) = self.comms.get(&id) else {
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
            FromNet::Msg(src, dst, tag, v) => {
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
                if c.finished.contains(seq) {
                    tracing::debug!(
                        comm = id,
                        seq,
                        src,
                        dst,
                        "DPU proxy: dropped a message for a finished collective"
                    );
                    return;
                }
                let Some(g) = self.group(id, seq) else {
                    return;
                };
                if g.failed.is_some() {
                    return;
                }
                match g.run.as_mut() {
                    Some(run) => run.deliver(s, d, tag as u32, v),
                    None => g.early.push((s, d, tag as u32, v)),
                }
                self.advance(id, seq);
            }
            FromNet::Failed(f) => {
                if !c.finished.contains(f.seq) {
                    let code = Code::from_wire(u64::from(f.code));
                    self.fail_as(id, f.seq, Outcome::from_wire(code, f.aux, f.why), false);
                }
            }
        }
    }

    fn group(&mut self, id: u64, seq: u64) -> Option<&mut Group> {
        let c = self.comms.get_mut(&id)?;
        let lost = self.net.as_ref().and_then(|n| n.lost_among(&c.nodes));
        let size = c.links.len();
        Some(c.groups.entry(seq).or_insert_with(|| Group {
            slots: (0..size).map(|_| None).collect(),
            // Every later collective fails at once once one of its nodes is lost.
            failed: lost.map(|node| Outcome::NodeLost { node }),
            ..Group::default()
        }))
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
                if let Some(s) = self
                    .comms
                    .get_mut(&comm)
                    .and_then(|c| c.groups.get_mut(&seq))
                    .and_then(|g| g.slots[slot].as_mut())
                {
                    let v = p.into_bytes();
                    if recv {
                        s.recv = Some(v);
                    } else {
                        s.send = Some(v);
                    }
                }
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
                self.fail(comm, seq, Outcome::failed(why));
            }
            (Wait::Put { comm, seq, slot }, res) => {
                let Some(c) = self.comms.get_mut(&comm) else {
                    return;
                };
                if let Some(s) = c.groups.get_mut(&seq).and_then(|g| g.slots[slot].as_mut()) {
                    s.putting = false;
                }
                let o = match res {
                    Ok(_) => Outcome::Done,
                    Err(e) => Outcome::failed(format!(
                        "writing rank {}'s receive span: {e}",
                        c.ranks[slot]
                    )),
                };
                self.answer(comm, slot, seq, o);
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
                            if let Some(g) = self.group(id, seq) {
                                if g.slots[slot].is_none() {
                                    g.slots[slot] = Some(Slot::refused());
                                }
                            }
                            self.fail(id, seq, Outcome::failed(why));
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
                self.submit(id, slot, seq, &coll, &opts, &send, &recv);
                self.listen(r);
            }
            Request::Cancel => {
                let Some(c) = self.comms.get_mut(&id) else {
                    return self.listen(r);
                };
                let rank = c.ranks[slot];
                let g = c.groups.get_mut(&seq);
                // Its schedules not finished here: without this rank's part the
                // collective cannot be trusted anywhere. It fails on every node,
                // which drops the messages other nodes sent for it (they would
                // stay until the proxy exits) and answers the ranks still in it.
                let unfinished = g.as_ref().is_some_and(|g| g.run.is_some() || !g.ran);
                let s = g.and_then(|g| g.slots[slot].as_mut());
                let answer_now = s.is_some_and(|s| {
                    s.cancelled = true;
                    !s.done && !s.putting
                });
                if answer_now && unfinished {
                    let why = format!("rank {rank} gave collective {seq} up (cancelled)");
                    self.fail(id, seq, Outcome::failed(why));
                } else if answer_now {
                    let why = "cancelled by its rank".to_string();
                    self.answer(id, slot, seq, Outcome::failed(why));
                }
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
            for m in self.unopened.remove(&id).unwrap_or_default() {
                self.take_from_net(id, m);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn submit(
        &mut self,
        id: u64,
        slot: usize,
        seq: u64,
        coll: &Collective,
        opts: &Options,
        send: &Span,
        recv: &Span,
    ) {
        let Some(c) = self.comms.get(&id) else {
            return;
        };
        let (link, rank, size) = (c.links[slot], c.ranks[slot], c.members.len());
        let gone: Vec<Option<String>> = c.gone.clone();
        if c.finished.contains(seq) {
            let why = format!("rank {rank} submitted collective {seq} twice");
            return self.answer(id, slot, seq, Outcome::failed(why));
        }
        let Some(g) = self.group(id, seq) else {
            return;
        };
        if g.slots[slot].is_some() || g.ran {
            let why = format!("rank {rank} submitted collective {seq} twice");
            return self.fail(id, seq, Outcome::failed(why));
        }
        let part = match check_submit(coll, opts, send, recv, link, rank, size) {
            Ok(p) => p,
            Err(why) => {
                tracing::warn!(rank, seq, comm = id, "DPU proxy: refused {why}");
                g.slots[slot] = Some(Slot::refused());
                let why = format!("rank {rank}'s request: {why}");
                return self.fail(id, seq, Outcome::failed(why));
            }
        };
        let (sk, so, sl) = part.send;
        let (rk, ro, rl) = part.recv;
        let recv_input = part.recv_input;
        let scratch = part.sched.scratch_bytes;
        // Its memory here: the staging copies of its spans and its scratch, within
        // the cap; the receive staging now (the send's comes with its get, the
        // scratch when the schedules start).
        let admitted = if g.failed.is_some() {
            Err(None)
        } else {
            self.budget
                .admit(footprint(&[sl, rl, scratch]))
                .map_err(Some)
                .and_then(|held| {
                    let recv = if !recv_input || rl == 0 {
                        Some(try_filled(rl, 0).map_err(|_| {
                            self.budget.release(held);
                            Some(Refusal::NoMemory { bytes: held })
                        })?)
                    } else {
                        None
                    };
                    Ok((held, recv))
                })
        };
        let Some(g) = self.group(id, seq) else {
            return;
        };
        let (held, recv) = match admitted {
            Ok(x) => x,
            Err(refusal) => {
                g.slots[slot] = Some(Slot::refused());
                if let Some(refusal) = refusal {
                    let why = refusal.why();
                    tracing::warn!(rank, seq, comm = id, "DPU proxy: refused {why}");
                    let o = Outcome::refused(&refusal, &format!("rank {rank}'s part"));
                    return self.fail(id, seq, o);
                }
                let o = g.failed.clone().unwrap_or_else(|| Outcome::failed(""));
                return self.answer(id, slot, seq, o);
            }
        };
        g.held += held;
        g.slots[slot] = Some(Slot {
            part: Some(part),
            send: (sl == 0).then(Vec::new),
            recv,
            done: false,
            cancelled: false,
            putting: false,
        });
        if let Some(o) = g.failed.clone() {
            return self.answer(id, slot, seq, o);
        }
        // A rank that left cannot take part any more.
        let missing = (0..gone.len()).find(|&p| g.slots[p].is_none() && gone[p].is_some());
        if let Some(p) = missing {
            let c = &self.comms[&id];
            let lost = c.ranks[p];
            let why = format!(
                "rank {lost} is lost: {}",
                gone[p].clone().unwrap_or_default()
            );
            return self.fail(id, seq, Outcome::Lost { rank: lost, why });
        }
        for (key, off, len, recv) in [(sk, so, sl, false), (rk, ro, rl, true)] {
            if len == 0 || (recv && !recv_input) {
                continue;
            }
            match self.t.get(&key, off, len) {
                Ok(op) => {
                    let w = Wait::Get {
                        comm: id,
                        seq,
                        slot,
                        recv,
                    };
                    self.ops.insert(op, w);
                }
                Err(e) => {
                    let what = if recv { "receive" } else { "send" };
                    let why = format!("reading rank {rank}'s {what} span: {e}");
                    return self.fail(id, seq, Outcome::failed(why));
                }
            }
        }
    }

    /// Fails collective `seq` of communicator `id` here and tells the other
    /// nodes' proxies.
    fn fail(&mut self, id: u64, seq: u64, o: Outcome) {
        self.fail_as(id, seq, o, true);
    }

    /// Fails collective `seq` of communicator `id`: answers every rank of the
    /// node that submitted it and is not answered (or whose put is in
    /// flight), and, when they submit, the others; its schedules stop.
    /// `tell`: the failure is this node's news, for the proxies of the other
    /// nodes the communicator spans too.
    fn fail_as(&mut self, id: u64, seq: u64, o: Outcome, tell: bool) {
        let Some(g) = self.group(id, seq) else {
            return;
        };
        let first = g.failed.is_none();
        let o = g.failed.get_or_insert(o).clone();
        g.run = None;
        g.early.clear();
        let waiting: Vec<usize> = (0..g.slots.len())
            .filter(|&r| g.slots[r].as_ref().is_some_and(|s| !s.done && !s.putting))
            .collect();
        if first && tell && !o.seen_by_all() {
            let nodes = &self.comms[&id].nodes;
            if let Some(net) = self.net.as_mut() {
                let (code, aux) = o.wire();
                net.announce_failed(id, seq, code as u8, aux, &o.why(), nodes);
            }
        }
        for slot in waiting {
            self.answer(id, slot, seq, o.clone());
        }
    }

    /// Answers collective `seq` of communicator `id` to its member in `slot`
    /// (once).
    fn answer(&mut self, id: u64, slot: usize, seq: u64, o: Outcome) {
        let Some(c) = self.comms.get_mut(&id) else {
            return;
        };
        if let Some(s) = c.groups.get_mut(&seq).and_then(|g| g.slots[slot].as_mut()) {
            if s.done {
                return;
            }
            s.done = true;
        }
        let (Some(local), None) = (c.locals[slot], &c.gone[slot]) else {
            return;
        };
        let link = c.links[slot];
        self.send_answer(link, wire(local, seq), &o);
    }

    /// Sends link rank `r` the answer to its collective numbered `w` on the link.
    fn send_answer(&mut self, r: usize, w: u64, o: &Outcome) {
        if self.gone[r].is_some() {
            return;
        }
        // The edge: the typed outcome becomes the wire's code and word.
        let (code, aux) = o.wire();
        let a = Answer {
            code: code as u8,
            aux,
            why: o.why(),
        };
        let Ok(bytes) = postcard::to_allocvec(&a) else {
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

    /// The member in `slot` of communicator `id` is gone (left it, or died):
    /// the collectives that still need its part fail, here and (told by this
    /// proxy) on the other nodes.
    fn lose_in(&mut self, id: u64, slot: usize, cause: &str) {
        let Some(c) = self.comms.get_mut(&id) else {
            return;
        };
        if c.gone[slot].is_some() {
            return;
        }
        c.gone[slot] = Some(cause.to_string());
        let rank = c.ranks[slot];
        let hit: Vec<u64> = c
            .groups
            .iter()
            .filter(|(_, g)| !g.ran && g.failed.is_none() && g.slots[slot].is_none())
            .map(|(&s, _)| s)
            .collect();
        for seq in hit {
            let why = format!("rank {rank} is lost: {cause}");
            self.fail(id, seq, Outcome::Lost { rank, why });
        }
    }

    /// Starts every collective whose parts all arrived, with their data.
    fn run_ready(&mut self) {
        let ready: Vec<(u64, u64)> = self
            .comms
            .iter()
            .flat_map(|(&id, c)| {
                c.groups
                    .iter()
                    .filter(|(_, g)| {
                        !g.ran
                            && g.failed.is_none()
                            && g.slots.iter().all(|s| {
                                s.as_ref().is_some_and(|s| {
                                    s.part.is_some() && s.send.is_some() && s.recv.is_some()
                                })
                            })
                    })
                    .map(move |(&s, _)| (id, s))
            })
            .collect();
        for (id, seq) in ready {
            self.start(id, seq);
        }
    }

    fn start(&mut self, id: u64, seq: u64) {
        let Some(g) = self.comms.get_mut(&id).and_then(|c| c.groups.get_mut(&seq)) else {
            return;
        };
        g.ran = true;
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
                return self.fail(id, seq, Outcome::NoMemory { bytes, why });
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
            net.send(members[src], members[dst], tag64(seq, tag), data)
        };
        let _span = tracing::debug_span!("dpu-collective", comm = id, seq).entered();
        match run.advance(&mut remote) {
            Ok(true) => self.finish(id, seq),
            Ok(false) => {
                if run.waiting_on().is_empty() {
                    // Every blocked receive waits for a rank of this node.
                    let why = "the schedules deadlocked".to_string();
                    self.fail(id, seq, Outcome::failed(why));
                }
            }
            Err(RunError::Mismatch {
                src,
                dst,
                sent,
                expected,
            }) => {
                let why =
                    format!("rank {src} sent {sent} bytes where rank {dst} expected {expected}");
                let local = ranks.contains(&src);
                let other = if local { dst } else { src };
                self.fail(id, seq, Outcome::Mismatch { sender: other, why });
            }
            Err(RunError::NodeLost(node)) => {
                self.fail_as(id, seq, Outcome::NodeLost { node }, false);
            }
            Err(RunError::Step(why)) => self.fail(id, seq, Outcome::failed(why)),
        }
    }

    /// Collective `seq`'s schedules finished: each rank's result goes back
    /// with RMA put (and the answer after it).
    fn finish(&mut self, id: u64, seq: u64) {
        let Some(g) = self.comms.get_mut(&id).and_then(|c| c.groups.get_mut(&seq)) else {
            return;
        };
        let Some(run) = g.run.take() else {
            return;
        };
        let spans = std::mem::take(&mut g.spans);
        for (slot, (data, (key, off, len))) in run.into_recvs().into_iter().zip(spans).enumerate() {
            let Some(c) = self.comms.get(&id) else {
                return;
            };
            let (done, cancelled) = c
                .groups
                .get(&seq)
                .and_then(|g| g.slots[slot].as_ref())
                .map_or((true, false), |s| (s.done, s.cancelled));
            if done || c.gone[slot].is_some() {
                continue;
            }
            let rank = c.ranks[slot];
            if cancelled {
                let why = "cancelled by its rank".to_string();
                self.answer(id, slot, seq, Outcome::failed(why));
                continue;
            }
            if len == 0 {
                self.answer(id, slot, seq, Outcome::Done);
                continue;
            }
            match self.t.put(data, &key, off) {
                Ok(op) => {
                    self.ops.insert(
                        op,
                        Wait::Put {
                            comm: id,
                            seq,
                            slot,
                        },
                    );
                    if let Some(s) = self
                        .comms
                        .get_mut(&id)
                        .and_then(|c| c.groups.get_mut(&seq))
                        .and_then(|g| g.slots[slot].as_mut())
                    {
                        s.putting = true;
                    }
                }
                Err(e) => {
                    let why = format!("writing rank {rank}'s receive span: {e}");
                    self.answer(id, slot, seq, Outcome::failed(why));
                }
            }
        }
    }

    /// Forgets the collectives every member of which is answered or gone (and
    /// remembers them as finished, for messages that come late), and the
    /// splits every member on this node left.
    fn retire(&mut self) {
        let mut closing = Vec::new();
        let budget = &mut self.budget;
        for (&id, c) in self.comms.iter_mut() {
            let gone = &c.gone;
            let finished = &mut c.finished;
            c.groups.retain(|&seq, g| {
                let over = g.slots.iter().enumerate().all(|(r, s)| {
                    gone[r].is_some() || s.as_ref().is_some_and(|s| s.done && !s.putting)
                });
                if over {
                    finished.end(seq, g.failed.take().unwrap_or(Outcome::Done));
                    budget.release(g.held);
                }
                !over
            });
            if id != 0 && c.groups.is_empty() && c.gone.iter().all(Option::is_some) {
                closing.push(id);
            }
        }
        for id in closing {
            tracing::debug!(comm = id, "DPU proxy: every member here left a split");
            self.comms.remove(&id);
            self.closed.insert(id);
        }
    }
}
