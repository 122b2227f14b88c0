//! The DPU proxy's point-to-point messages: a rank's sends and receives,
//! their matching in each communicator's [`Mailbox`](crate::mailbox::Mailbox),
//! the RMA of their bytes, and the messages to and from the other nodes'
//! proxies (under the point-to-point sequence number, [`P2P_SEQ`], beside the
//! collectives' steps).

use super::Server;
use crate::dpu::state::{Outgoing, RecvKey, Wait};
use crate::dpu::wire::{span_key, unwire, Body, Delivery, Request};
use crate::dpu::P2P_FIRST;
use crate::mailbox::{Failure, Matched};
use crate::net::{tag64, TRAILER};
use hpc_board::p2p::{Want, P2P_SEQ};

/// A bit of the schedule tag of a point-to-point message between proxies
/// (above the element type's): the payload is the size of a message its
/// sender's proxy would not read, and why, not its bytes.
pub const UNHELD: u32 = 1 << 31;

/// Whether a number on the link is a point-to-point request's.
pub fn is_message(w: u64) -> bool {
    unwire(w).1 >= P2P_FIRST
}

/// Whether a message between proxies is a point-to-point message (by its tag).
pub fn is_message_tag(tag: u64) -> bool {
    tag >> 32 == P2P_SEQ
}

impl Server {
    /// Link rank `r`'s point-to-point request `w` (its number on the link),
    /// a [`Request::Send`] or [`Request::Recv`], as the member in `slot` of
    /// communicator `id`.
    pub fn message(&mut self, r: usize, id: u64, slot: usize, w: u64, req: Request) {
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
                let (mut reserved, mut unheld) = (0, None);
                let data = match body {
                    Body::Inline(v) => Some(Ok(v)),
                    Body::Span(s) => match span_key("message", r, &s) {
                        Err(why) => Some(Err(format!("reading rank {me}'s message: {why}"))),
                        // Admitted against the budget before a byte is read:
                        // what is read in flight counts with what is held.
                        Ok((key, off, len)) => match self.budget.admit(Some(len as u64)) {
                            Err(refusal) => {
                                let why = format!(
                                    "reading rank {me}'s message of {len} bytes for rank {dest}: {}",
                                    refusal.why()
                                );
                                unheld = Some((len, why));
                                Some(Ok(Vec::new()))
                            }
                            Ok(bytes) => match self.t.get(&key, off, len) {
                                Ok(op) => {
                                    reserved = bytes;
                                    self.ops.insert(op, Wait::MessageGet { link: r, w });
                                    None
                                }
                                Err(e) => {
                                    self.budget.release(bytes);
                                    Some(Err(format!("reading rank {me}'s message: {e}")))
                                }
                            },
                        },
                    },
                };
                self.sending[r].push_back(Outgoing {
                    comm: id,
                    w,
                    src: me,
                    dest,
                    tag,
                    data,
                    reserved,
                    unheld,
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
    pub fn message_got(&mut self, link: usize, w: u64, got: Result<Vec<u8>, String>) {
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
            // Read: what it holds from here on is admitted where it is held.
            self.budget.release(o.reserved);
            let d = match (o.data, o.unheld) {
                (Some(Ok(_)), Some(unheld)) => {
                    self.route_unheld(o.comm, o.src, o.dest, o.tag, unheld)
                }
                (Some(Ok(v)), None) => self.route(o.comm, o.src, o.dest, o.tag, v),
                (Some(Err(why)), _) => Delivery::Failed(why),
                (None, _) => continue,
            };
            self.answer_message(r, o.w, &d);
        }
    }

    /// A received message's put completed (or failed): its receive is answered.
    pub fn message_put(
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
        self.forward(id, src, dest, tag, data)
    }

    /// Sends rank `src`'s message for rank `dest` of another node to its
    /// node's proxy: sent, or why not.
    fn forward(&mut self, id: u64, src: usize, dest: usize, tag: u32, data: Vec<u8>) -> Delivery {
        let Some(c) = self.comms.get(&id) else {
            return Delivery::Failed("the communicator is closed here".into());
        };
        let (from, to) = (c.members[src], c.members[dest]);
        let Some(net) = self.net.as_mut() else {
            return Delivery::Failed(format!("rank {dest} is on no node this proxy reaches"));
        };
        // The communicator's id ends the payload, as for a collective's step.
        let mut data = data;
        data.extend_from_slice(&id.to_le_bytes());
        data.resize(data.len() + TRAILER, 0);
        match net.send(
            from,
            to,
            tag64(P2P_SEQ, tag),
            hpc_board::sig::Sig::NONE,
            data,
        ) {
            Ok(()) => Delivery::Sent,
            Err(node) => Delivery::Refused(Failure::Node { node }),
        }
    }

    /// Rank `src`'s message for rank `dest` of communicator `id` that the
    /// proxy would not read (its budget refused it), known by its size and
    /// why: held so for a rank of this node, to fail the receive that takes
    /// it with the memory error (its sender's later messages keep their
    /// order); refused to its sender for a rank of another node.
    fn route_unheld(
        &mut self,
        id: u64,
        src: usize,
        dest: usize,
        tag: u32,
        (bytes, why): (usize, String),
    ) -> Delivery {
        let Some(c) = self.comms.get(&id) else {
            return Delivery::Failed("the communicator is closed here".into());
        };
        if !c.ranks.contains(&dest) {
            // Its size and why, to the destination's proxy, which holds it so.
            let mut notice = (bytes as u64).to_le_bytes().to_vec();
            notice.extend_from_slice(why.as_bytes());
            return self.forward(id, src, dest, tag | UNHELD, notice);
        }
        self.arrive_unheld(id, src, dest, tag, bytes, why);
        Delivery::Sent
    }

    /// A message from another node's proxy for rank `dest` of this node:
    /// its bytes, or (under [`UNHELD`]) the size and why of one its sender's
    /// proxy would not read.
    pub fn arrive_from(&mut self, id: u64, src: usize, dest: usize, tag: u32, data: Vec<u8>) {
        if tag & UNHELD == 0 {
            return self.arrive(id, src, dest, tag, data);
        }
        let (bytes, why) = match data.split_first_chunk::<8>() {
            Some((n, why)) => (
                usize::try_from(u64::from_le_bytes(*n)).unwrap_or(usize::MAX),
                String::from_utf8_lossy(why).into_owned(),
            ),
            None => (0, "its sender's proxy could not read it".to_string()),
        };
        self.arrive_unheld(id, src, dest, tag & !UNHELD, bytes, why);
    }

    /// A message of this node's rank `dest` known by its size only.
    fn arrive_unheld(
        &mut self,
        id: u64,
        src: usize,
        dest: usize,
        tag: u32,
        bytes: usize,
        why: String,
    ) {
        if !self.dest_gone(id, dest) {
            let Some(c) = self.comms.get_mut(&id) else {
                return;
            };
            let got = c.mailbox.arrive_unheld(src, dest, tag, bytes, why);
            self.carry(id, got.into_iter().collect());
        }
    }

    /// Whether rank `dest` of communicator `id` (of this node) is gone, so
    /// that nobody will take a message for it.
    fn dest_gone(&self, id: u64, dest: usize) -> bool {
        let Some(c) = self.comms.get(&id) else {
            return true;
        };
        let link = c.ranks.iter().position(|&r| r == dest).map(|s| c.links[s]);
        let gone = link.is_none_or(|l| self.gone[l].is_some());
        if gone {
            // Nobody will take it.
            tracing::debug!(
                comm = id,
                dest,
                "DPU proxy: dropped a message for a rank gone"
            );
        }
        gone
    }

    /// A message for rank `dest` of this node: to the receive that takes
    /// it, or held (within the proxy's memory budget).
    pub fn arrive(&mut self, id: u64, src: usize, dest: usize, tag: u32, data: Vec<u8>) {
        if self.dest_gone(id, dest) {
            return;
        }
        let Some(c) = self.comms.get_mut(&id) else {
            return;
        };
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
    pub fn message_cancel(&mut self, id: u64, slot: usize, r: usize, w: u64) {
        if let Some(c) = self.comms.get_mut(&id) {
            c.mailbox.cancel(c.ranks[slot], (r, w));
            c.recvs.remove(&(r, w));
        }
    }

    /// The member in `slot` of communicator `id` is gone (it left it, or
    /// died): its receives and the messages held for it go, and the
    /// receives that wait for it alone fail.
    pub fn message_leave(&mut self, id: u64, slot: usize) {
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
    pub fn fail_waiting(&mut self, id: u64) {
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
        self.send_on_answer_tag(r, w, d);
    }
}
