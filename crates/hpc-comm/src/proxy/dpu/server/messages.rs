//! The DPU proxy's point-to-point messages: a rank's sends and receives,
//! their matching in each communicator's [`Mailbox`](crate::proxy::mailbox::Mailbox),
//! the RMA of their bytes, and the messages to and from the other nodes'
//! proxies (under the point-to-point sequence number, [`P2P_SEQ`], beside the
//! collectives' steps).

use super::Server;
use crate::executor::{Want, P2P_SEQ};
use crate::proxy::dpu::state::{Outgoing, RecvKey, Wait};
use crate::proxy::dpu::wire::{span_key, unwire, Body, Delivery, Request, TAG_ANSWER};
use crate::proxy::dpu::P2P_FIRST;
use crate::proxy::mailbox::{Failure, Matched};
use crate::proxy::net::{tag64, TRAILER};

/// Whether a number on the link is a point-to-point request's.
pub(super) fn is_message(w: u64) -> bool {
    unwire(w).1 >= P2P_FIRST
}

/// Whether a message between proxies is a point-to-point message (by its tag).
pub(super) fn is_message_tag(tag: u64) -> bool {
    tag >> 32 == P2P_SEQ
}

impl Server {
    /// Link rank `r`'s point-to-point request `w` (its number on the link),
    /// a [`Request::Send`] or [`Request::Recv`], as the member in `slot` of
    /// communicator `id`.
    pub(super) fn message(&mut self, r: usize, id: u64, slot: usize, w: u64, req: Request) {
        let Some(c) = self.comms.get(&id) else {
            return;
        };
        let (me, size) = (c.ranks[slot], c.members.len());
        let peer = match &req {
            Request::Send { dest, .. } => Some(*dest),
            Request::Recv { source, .. } => *source,
            _ => return,
        };
        if let Some(p) = peer.filter(|&p| p >= size) {
            let why = format!("rank {me} named rank {p}, in a communicator of {size} ranks");
            return self.answer_message(r, w, &Delivery::Failed(why));
        }
        match req {
            Request::Send { dest, tag, body } => {
                let data = match body {
                    Body::Inline(v) => Some(Ok(v)),
                    Body::Span(s) => {
                        let got = span_key("message", r, &s).and_then(|(key, off, len)| {
                            self.t.get(&key, off, len).map_err(|e| e.to_string())
                        });
                        match got {
                            Ok(op) => {
                                self.ops.insert(op, Wait::MessageGet { link: r, w });
                                None
                            }
                            Err(why) => Some(Err(format!("reading rank {me}'s message: {why}"))),
                        }
                    }
                };
                self.sending[r].push_back(Outgoing {
                    comm: id,
                    w,
                    src: me,
                    dest,
                    tag,
                    data,
                });
                self.flush_sends(r);
            }
            Request::Recv {
                source,
                tag,
                kind,
                into,
            } => {
                let span = match span_key("receive", r, &into) {
                    Ok(s) => s,
                    Err(why) => {
                        let why = format!("rank {me}'s receive: {why}");
                        return self.answer_message(r, w, &Delivery::Failed(why));
                    }
                };
                let Some(c) = self.comms.get_mut(&id) else {
                    return;
                };
                let len = span.2;
                c.recvs.insert((r, w), span);
                let got = c
                    .mailbox
                    .post(me, (r, w), Want::new(source, tag, kind), len);
                if got.is_some() {
                    return self.carry(id, got.into_iter().collect());
                }
                // One that waits for a rank lost already fails at once.
                if let Some(why) = source.and_then(|s| self.lost(id, s)) {
                    if let Some(c) = self.comms.get_mut(&id) {
                        c.mailbox.cancel(me, (r, w));
                        c.recvs.remove(&(r, w));
                    }
                    self.answer_message(r, w, &Delivery::Refused(why));
                }
            }
            _ => {}
        }
    }

    /// The bytes of link rank `link`'s send `w`, read from its region.
    pub(super) fn message_got(&mut self, link: usize, w: u64, got: Result<Vec<u8>, String>) {
        if let Some(o) = self.sending[link].iter_mut().find(|o| o.w == w) {
            o.data = Some(got);
        }
        self.flush_sends(link);
    }

    /// Routes link rank `r`'s sends whose bytes are here, in the order it
    /// sent them, and answers each.
    fn flush_sends(&mut self, r: usize) {
        while self.sending[r].front().is_some_and(|o| o.data.is_some()) {
            let Some(o) = self.sending[r].pop_front() else {
                return;
            };
            let d = match o.data {
                Some(Ok(v)) => self.route(o.comm, o.src, o.dest, o.tag, v),
                Some(Err(why)) => Delivery::Failed(why),
                None => continue,
            };
            self.answer_message(r, o.w, &d);
        }
    }

    /// A received message's put completed (or failed): its receive is answered.
    pub(super) fn message_put(
        &mut self,
        (link, w): RecvKey,
        src: usize,
        tag: u32,
        ok: Result<(), String>,
    ) {
        let d = match ok {
            Ok(()) => Delivery::Received { source: src, tag },
            Err(e) => Delivery::Failed(format!("writing the message into the receive: {e}")),
        };
        self.answer_message(link, w, &d);
    }

    /// Rank `src`'s message for rank `dest` of communicator `id`: matched
    /// here if `dest` is on this node, else sent to its node's proxy. The
    /// sender's answer: sent, or why not.
    fn route(&mut self, id: u64, src: usize, dest: usize, tag: u32, data: Vec<u8>) -> Delivery {
        let Some(c) = self.comms.get(&id) else {
            return Delivery::Failed("the communicator is closed here".into());
        };
        if c.ranks.contains(&dest) {
            self.arrive(id, src, dest, tag, data);
            return Delivery::Sent;
        }
        let (from, to) = (c.members[src], c.members[dest]);
        let Some(net) = self.net.as_mut() else {
            return Delivery::Failed(format!("rank {dest} is on no node this proxy reaches"));
        };
        // The communicator's id ends the payload, as for a collective's step.
        let mut data = data;
        data.extend_from_slice(&id.to_le_bytes());
        data.resize(data.len() + TRAILER, 0);
        match net.send(from, to, tag64(P2P_SEQ, tag), data) {
            Ok(()) => Delivery::Sent,
            Err(node) => Delivery::Refused(Failure::Node { node }),
        }
    }

    /// A message for rank `dest` of this node: to the receive that takes
    /// it, or held (within the proxy's memory budget).
    pub(super) fn arrive(&mut self, id: u64, src: usize, dest: usize, tag: u32, data: Vec<u8>) {
        let Some(c) = self.comms.get_mut(&id) else {
            return;
        };
        let link = c.ranks.iter().position(|&r| r == dest).map(|s| c.links[s]);
        if link.is_none_or(|l| self.gone[l].is_some()) {
            // Its rank is gone: nobody will take it.
            tracing::debug!(
                comm = id,
                src,
                dest,
                "DPU proxy: dropped a message for a rank gone"
            );
            return;
        }
        let budget = &mut self.budget;
        let got = c.mailbox.arrive(src, dest, tag, data, |n| {
            budget.admit(Some(n as u64)).map(drop).map_err(|r| {
                format!(
                    "holding rank {src}'s message of {n} bytes for rank {dest}: {}",
                    r.why()
                )
            })
        });
        self.carry(id, got.into_iter().collect());
    }

    /// Carries out matches: a message put into its receive's span, or the
    /// receive answered with its failure.
    fn carry(&mut self, id: u64, matched: Vec<Matched<RecvKey>>) {
        for m in matched {
            let Some(c) = self.comms.get_mut(&id) else {
                return;
            };
            match m {
                Matched::Deliver {
                    key: (link, w),
                    src,
                    tag,
                    data,
                    held,
                    ..
                } => {
                    self.budget.release(held as u64);
                    let Some((key, off, _)) = c.recvs.remove(&(link, w)) else {
                        continue;
                    };
                    if data.is_empty() {
                        self.answer_message(link, w, &Delivery::Received { source: src, tag });
                        continue;
                    }
                    match self.t.put(data, &key, off) {
                        Ok(op) => {
                            self.ops.insert(op, Wait::MessagePut { link, w, src, tag });
                        }
                        Err(e) => {
                            let why = format!("writing the message into the receive: {e}");
                            self.answer_message(link, w, &Delivery::Failed(why));
                        }
                    }
                }
                Matched::Fail {
                    key: (link, w),
                    why,
                    held,
                    ..
                } => {
                    self.budget.release(held as u64);
                    c.recvs.remove(&(link, w));
                    self.answer_message(link, w, &Delivery::Refused(why));
                }
            }
        }
    }

    /// Link rank `r` gave its receive `w` up (a send is the proxy's already).
    pub(super) fn message_cancel(&mut self, id: u64, slot: usize, r: usize, w: u64) {
        if let Some(c) = self.comms.get_mut(&id) {
            c.mailbox.cancel(c.ranks[slot], (r, w));
            c.recvs.remove(&(r, w));
        }
    }

    /// The member in `slot` of communicator `id` is gone (it left it, or
    /// died): its receives and the messages held for it go, and the
    /// receives that wait for it alone fail.
    pub(super) fn message_leave(&mut self, id: u64, slot: usize) {
        let Some(c) = self.comms.get_mut(&id) else {
            return;
        };
        let (rank, link) = (c.ranks[slot], c.links[slot]);
        let freed = c.mailbox.leave(rank);
        c.recvs.retain(|&(l, _), _| l != link);
        let failed = c
            .mailbox
            .fail_waiting(|r| (r == rank).then_some(Failure::Lost { rank }));
        self.budget.release(freed as u64);
        self.carry(id, failed);
    }

    /// Why rank `rank` of communicator `id` is lost, if it is: gone from
    /// this node, dead on another, or on a lost node.
    fn lost(&self, id: u64, rank: usize) -> Option<Failure> {
        let m = *self.comms.get(&id)?.members.get(rank)?;
        if let Some(l) = self.first.iter().position(|&f| f == m) {
            return self.gone[l].is_some().then_some(Failure::Lost { rank });
        }
        let net = self.net.as_ref()?;
        if let Some(node) = net.lost_among(&[self.node_of[m]]) {
            return Some(Failure::Node { node });
        }
        net.is_dead(m).then_some(Failure::Lost { rank })
    }

    /// The receives of communicator `id` that wait for one rank, lost, fail.
    pub(super) fn fail_waiting(&mut self, id: u64) {
        let Some(c) = self.comms.get(&id) else {
            return;
        };
        let lost: Vec<(usize, Failure)> = c
            .mailbox
            .sources()
            .into_iter()
            .filter_map(|s| Some((s, self.lost(id, s)?)))
            .collect();
        if lost.is_empty() {
            return;
        }
        let Some(c) = self.comms.get_mut(&id) else {
            return;
        };
        let failed = c.mailbox.fail_waiting(|s| {
            lost.iter()
                .find(|(l, _)| *l == s)
                .map(|(_, why)| why.clone())
        });
        self.carry(id, failed);
    }

    /// Sends link rank `r` the answer to its message numbered `w` on the link.
    fn answer_message(&mut self, r: usize, w: u64, d: &Delivery) {
        if self.gone[r].is_some() {
            return;
        }
        let Ok(bytes) = postcard::to_allocvec(d) else {
            return;
        };
        match self.t.send(r, TAG_ANSWER + w, bytes) {
            Ok(op) => {
                self.ops.insert(op, Wait::Answer);
            }
            Err(e) => self.lose(r, &e.to_string()),
        }
    }
}
