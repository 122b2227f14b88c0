//! The life cycle of the collectives of one communicator in one proxy, with
//! no I/O: [`Session`] takes events (a rank's part, its readiness, a part's
//! end, a failure here or on another node, a lost rank or node, a cancel,
//! a refusal of memory) and queues [`Effect`]s for the server to carry out
//! (answer a rank, tell the other nodes, start, stop, deliver, retire).
//!
//! Both placements drive it: the host proxy (`server.rs`, one session for
//! its communicator, whose slots are the communicator's ranks, those of
//! other nodes [`Session::away`]) and the DPU proxy (`dpu/server.rs`, one per
//! communicator it serves, whose slots are its members on the node). What
//! differs between them for a reason is a parameter ([`Cancel`]) or stays in
//! their I/O: how a part is read and run, and which step failed.
//!
//! One short way through it: a part that finished where nothing is queued
//! and its collective did not fail ([`Session::finished`]) is answered by
//! the server itself, and the collective retires at its last part, without
//! an effect queued. The session decides it, and takes the long way on
//! anything else: failures, losses and the window stay its own.

use std::collections::VecDeque;

use super::{Ended, Outcome};
use hpc_board::sig::Sig;

/// What a rank's cancel of its collective does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancel {
    /// Only that rank's part ends, and the server answers the cancel itself
    /// (host placement: each rank's schedule runs on its own interpreter,
    /// and the messages it already filed stay matched by its peers as if
    /// sent eagerly, so the others can finish without it).
    Part,
    /// The collective fails on every node unless its schedules finished here
    /// (DPU placement: the node's schedules run together from every local
    /// part, and cannot be trusted without one of them).
    Collective,
}

/// What the server must do, in the order the session queued it.
/// `seq` is always the collective's sequence number and `slot` the member's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Answer the member in `slot` that collective `seq` ended with
    /// `outcome` (once per part; never to a member that is gone).
    Answer {
        seq: u64,
        slot: usize,
        outcome: Outcome,
    },
    /// Tell the other nodes' proxies that collective `seq` failed here with
    /// `outcome`.
    Tell { seq: u64, outcome: Outcome },
    /// Every member's part of collective `seq` is ready ([`Session::ready`]:
    /// the DPU placement, whose node's schedules run together): start it.
    Start { seq: u64 },
    /// Collective `seq` failed: stop what runs for it and drop its messages
    /// (its members are answered by the [`Effect::Answer`]s that follow).
    Stop { seq: u64 },
    /// Collective `seq`'s schedules finished: deliver the result of the
    /// member in `slot`, then report its end ([`Session::done`]).
    Deliver { seq: u64, slot: usize },
    /// Collective `seq` ended for every member here: release the `bytes` of
    /// the budget its parts held and forget what the server keeps of it.
    Retire { seq: u64, bytes: u64 },
}

/// A slot of the session: a member here, not here, or gone.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Member {
    Here,
    /// A rank of another node (host placement): never waited for.
    Away,
    /// It left or died, and why.
    Gone(String),
}

/// A member's part of one collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    /// Not submitted.
    Absent,
    /// Submitted and not answered: `ready` once its data is in, `cancelled`
    /// by its rank, `busy` while its result is delivered (a failure does not
    /// answer it then; the delivery's end does).
    In {
        ready: bool,
        cancelled: bool,
        busy: bool,
    },
    /// Answered (or given up by its rank): nothing more goes to it.
    Answered,
}

const IN: Part = Part::In {
    ready: false,
    cancelled: false,
    busy: false,
};

/// The members' parts of one collective, by slot: in place for a session of
/// one member (the one-rank communicator's collective allocates nothing),
/// else a vector reused from retired collectives.
#[derive(Debug)]
enum Parts {
    One([Part; 1]),
    Many(Vec<Part>),
}

impl std::ops::Deref for Parts {
    type Target = [Part];

    #[inline]
    fn deref(&self) -> &[Part] {
        match self {
            Parts::One(p) => p,
            Parts::Many(v) => v,
        }
    }
}

impl std::ops::DerefMut for Parts {
    #[inline]
    fn deref_mut(&mut self) -> &mut [Part] {
        match self {
            Parts::One(p) => p,
            Parts::Many(v) => v,
        }
    }
}

/// One collective in flight here.
#[derive(Debug)]
struct Coll {
    /// Its sequence number.
    seq: u64,
    parts: Parts,
    /// How it failed, once it did (the first failure stays); boxed, so that
    /// the common collective, which does not fail, is small to move.
    failed: Option<Box<Outcome>>,
    /// Every member's part was ready and it started.
    started: bool,
    /// Its schedules finished here (results delivered or being delivered).
    finished: bool,
    /// The bytes of the server's budget its parts hold.
    held: u64,
    /// The communicator's rank of the first part submitted here or message
    /// from another node, and its collective's signature, which every other
    /// part's and message's must equal.
    sig: Option<(usize, Sig)>,
}

/// The collectives in flight, in the order of their sequence numbers: a
/// double-ended queue, as they are few and made nearly always in order, so
/// that finding one is a look at either end (or a binary search), making one
/// a push at the back and retiring the oldest a pop at the front, where a
/// tree searched and rebalanced nodes on every event.
#[derive(Debug, Default)]
struct Colls(VecDeque<Coll>);

impl Colls {
    /// Where collective `seq` is, or where it belongs.
    #[inline]
    fn index(&self, seq: u64) -> std::result::Result<usize, usize> {
        match self.0.back() {
            None => Err(0),
            Some(c) if c.seq == seq => Ok(self.0.len() - 1),
            Some(c) if c.seq < seq => Err(self.0.len()),
            _ if self.0[0].seq == seq => Ok(0),
            _ => self.0.binary_search_by_key(&seq, |c| c.seq),
        }
    }

    #[inline]
    fn get_mut(&mut self, seq: u64) -> Option<&mut Coll> {
        let i = self.index(seq).ok()?;
        Some(&mut self.0[i])
    }

    /// The sequence numbers in flight, in order.
    fn seqs(&self) -> Vec<u64> {
        self.0.iter().map(|c| c.seq).collect()
    }
}

/// The collectives of one communicator in one proxy.
#[derive(Debug)]
pub struct Session {
    /// The communicator's rank of each slot.
    ranks: Vec<usize>,
    members: Vec<Member>,
    colls: Colls,
    ended: Ended,
    /// The first node found lost: every collective fails with it.
    lost: Option<usize>,
    /// A member is gone (the collectives made from then on fail with it).
    gone: bool,
    cancel: Cancel,
    out: VecDeque<Effect>,
    /// A part was answered or a member left since the last [`Session::retire`]
    /// (else no collective can have become over, and it has nothing to do).
    settled: bool,
    /// The parts of retired collectives, kept for the next ones (a
    /// collective's start then allocates nothing).
    spare: Vec<Vec<Part>>,
}

/// How many retired collectives' parts a session keeps for reuse.
const SPARE: usize = 64;

impl Session {
    /// A session whose slots are the communicator's ranks `ranks`, all
    /// members here.
    pub fn new(ranks: Vec<usize>, cancel: Cancel) -> Session {
        Session {
            members: vec![Member::Here; ranks.len()],
            ranks,
            colls: Colls::default(),
            ended: Ended::default(),
            lost: None,
            gone: false,
            cancel,
            out: VecDeque::new(),
            settled: false,
            spare: Vec::new(),
        }
    }

    /// The member in `slot` is on another node: nothing waits for it here.
    pub fn away(&mut self, slot: usize) {
        self.members[slot] = Member::Away;
        self.settled = true;
    }

    /// The next effect to carry out.
    #[inline]
    pub fn poll(&mut self) -> Option<Effect> {
        self.out.pop_front()
    }

    /// Whether an effect is queued (the servers look before they poll: the
    /// common pass has none).
    #[inline]
    pub fn pending(&self) -> bool {
        !self.out.is_empty()
    }

    /// Whether the member in `slot` is here (not away, not gone).
    pub fn here(&self, slot: usize) -> bool {
        self.members[slot] == Member::Here
    }

    /// Whether every member is gone or away.
    pub fn all_left(&self) -> bool {
        !self.members.contains(&Member::Here)
    }

    /// Whether every member is gone or away and no collective is in flight.
    pub fn over(&self) -> bool {
        self.colls.0.is_empty() && self.all_left()
    }

    /// Collective `seq`, made where it is new: failed at once where a node
    /// is lost, or where a member is gone (it cannot take part any more).
    #[inline]
    fn coll(&mut self, seq: u64) -> &mut Coll {
        match self.colls.index(seq) {
            Ok(i) => &mut self.colls.0[i],
            Err(at) => self.make(seq, at),
        }
    }

    /// Makes collective `seq` at place `at` of the collectives in flight
    /// (see [`Session::coll`]).
    fn make(&mut self, seq: u64, at: usize) -> &mut Coll {
        let parts = match self.ranks.len() {
            1 => Parts::One([Part::Absent]),
            n => {
                let mut v = self.spare.pop().unwrap_or_default();
                v.resize(n, Part::Absent);
                Parts::Many(v)
            }
        };
        let c = Coll {
            seq,
            parts,
            failed: None,
            started: false,
            finished: false,
            held: 0,
            sig: None,
        };
        if at == self.colls.0.len() {
            // Made in order, the common case.
            self.colls.0.push_back(c);
        } else {
            self.colls.0.insert(at, c);
        }
        if self.lost.is_none() && !self.gone {
            // Nothing fails it: the common case, with no look at the members.
            return &mut self.colls.0[at];
        }
        let gone = self.members.iter().enumerate().find_map(|(p, m)| match m {
            Member::Gone(why) => Some((self.ranks[p], why.clone())),
            _ => None,
        });
        if let Some(node) = self.lost {
            self.fail(seq, Outcome::NodeLost { node }, false);
        } else if let Some((rank, cause)) = gone {
            let why = format!("rank {rank} is lost: {cause}");
            self.fail(seq, Outcome::Lost { rank, why }, true);
        } else {
            return &mut self.colls.0[at];
        }
        self.colls.get_mut(seq).expect("made above")
    }

    /// How many collectives are in flight (made and not retired).
    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        self.colls.0.len()
    }

    /// The part in `slot` of `seq` finished: [`Session::done`] with
    /// [`Outcome::Done`], the short way where nothing calls for the long one.
    /// Where no effect is queued, the member is here, its part is in and its
    /// collective did not fail, the session queues nothing: the server
    /// answers the member `Done` itself and releases the bytes returned (the
    /// collective's, where this was its last part here and it retired here
    /// and now; else 0). `None`: the core took the long way (its effects are
    /// queued, in order).
    #[inline]
    pub fn finished(&mut self, seq: u64, slot: usize) -> Option<u64> {
        let short = !self.pending() && self.members[slot] == Member::Here;
        let i = self.colls.index(seq).ok().filter(|_| short);
        let Some(i) = i.filter(|&i| {
            let c = &self.colls.0[i];
            c.failed.is_none()
                && matches!(
                    c.parts[slot],
                    Part::In {
                        cancelled: false,
                        ..
                    }
                )
        }) else {
            self.done(seq, slot, Outcome::Done);
            return None;
        };
        let c = &mut self.colls.0[i];
        c.parts[slot] = Part::Answered;
        if !over(c, &self.members) {
            return Some(0);
        }
        let mut c = self.colls.0.remove(i).expect("found above");
        Some(end(&mut self.ended, &mut self.spare, &mut c))
    }

    /// The part in `slot` of `seq` ended with `outcome` (its op finished or
    /// failed alone, its delivery completed, or the collective failed): its
    /// member is answered, once, unless it is gone.
    #[inline]
    pub fn done(&mut self, seq: u64, slot: usize, outcome: Outcome) {
        let Some(c) = self.colls.get_mut(seq) else {
            return;
        };
        if c.parts[slot] == Part::Answered {
            return;
        }
        c.parts[slot] = Part::Answered;
        self.settled = true;
        if self.members[slot] == Member::Here {
            self.out.push_back(Effect::Answer { seq, slot, outcome });
        }
    }

    /// The communicator's ranks, in slot order, whose part of collective
    /// `seq` has not come: the members here that did not submit it (all of
    /// them where no part of it came yet). Empty for a collective that ended
    /// (within the window). Members away (other nodes' ranks) and gone are
    /// not named: nothing here waits for them, or the collective failed.
    pub fn waiting_for(&self, seq: u64) -> Vec<usize> {
        if self.ended.contains(seq) {
            return Vec::new();
        }
        let parts = self.colls.index(seq).ok().map(|i| &self.colls.0[i].parts);
        (0..self.ranks.len())
            .filter(|&slot| self.members[slot] == Member::Here)
            .filter(|&slot| parts.is_none_or(|p| p[slot] == Part::Absent))
            .map(|slot| self.ranks[slot])
            .collect()
    }

    /// The member in `slot` submitted its part of collective `seq`; whether
    /// the server should take it in. Where not, it is answered already: a
    /// collective that ended or failed, a node lost, a part submitted twice
    /// (which fails the collective), a member gone whose part is missing, a
    /// part whose signature `sig` is not the first part's (which fails the
    /// collective with [`Outcome::Disagree`]).
    #[inline]
    pub fn submit(&mut self, seq: u64, slot: usize, sig: Sig) -> bool {
        let rank = self.ranks[slot];
        let twice = || Outcome::failed(format!("rank {rank} submitted collective {seq} twice"));
        if let Some(o) = self.ended.get(seq) {
            // A failed one late gets its failure; one that finished, twice.
            let outcome = match o {
                Outcome::Done => twice(),
                o => o.clone().facing(sig),
            };
            self.out.push_back(Effect::Answer { seq, slot, outcome });
            return false;
        }
        let c = self.coll(seq);
        let twice_now = c.parts[slot] != Part::Absent || c.started;
        if !twice_now {
            c.parts[slot] = IN;
        }
        let failed = c.failed.as_deref().cloned();
        if twice_now {
            self.fail(seq, twice(), true);
            return false;
        }
        // `agree`, on the collective in hand (the common case: the first
        // part's signature, or one equal to it).
        let (first, first_sig) = *c.sig.get_or_insert((rank, sig));
        if let Some(o) = failed {
            // A part after the failure: a disagreement names to it a rank
            // whose part differs from its own.
            self.done(seq, slot, o.facing(sig));
            return false;
        }
        if first_sig != sig {
            self.disagree(seq, (first, first_sig), (rank, sig));
            return false;
        }
        true
    }

    /// Whether `sig`, the signature of rank `rank`'s part of collective
    /// `seq` or of its message from another node, is the first's; where not,
    /// the collective fails here and on every node ([`Outcome::Disagree`]).
    #[inline]
    fn agree(&mut self, seq: u64, rank: usize, sig: Sig) -> bool {
        let c = self.coll(seq);
        let (first, first_sig) = *c.sig.get_or_insert((rank, sig));
        if first_sig == sig {
            return true;
        }
        self.disagree(seq, (first, first_sig), (rank, sig));
        false
    }

    /// Collective `seq` fails here and on every node: its `first` part or
    /// message and an `other` one (each a rank and its signature) disagree.
    fn disagree(&mut self, seq: u64, first: (usize, Sig), other: (usize, Sig)) {
        let o = Outcome::Disagree {
            first: first.0,
            first_sig: first.1,
            other: other.0,
            other_sig: other.1,
        };
        self.fail(seq, o, true);
    }

    /// A message of collective `seq` from rank `rank` of another node came,
    /// its collective's signature `sig`: whether the server should file it
    /// (not when the collective ended or failed here, or when `sig` is not
    /// what the parts here and the messages before said, which fails it).
    pub fn remote(&mut self, seq: u64, rank: usize, sig: Sig) -> bool {
        self.takes(seq) && (sig == Sig::NONE || self.agree(seq, rank, sig))
    }

    /// The signature of collective `seq` as its first part or message here
    /// said ([`Sig::NONE`] before either).
    pub fn sig(&self, seq: u64) -> Sig {
        let i = self.colls.index(seq).ok();
        i.and_then(|i| self.colls.0[i].sig)
            .map_or(Sig::NONE, |s| s.1)
    }

    /// Whether the communicator's rank `rank` is a member on this node.
    fn local(&self, rank: usize) -> bool {
        (self.ranks.iter())
            .position(|&r| r == rank)
            .is_some_and(|s| self.members[s] != Member::Away)
    }

    /// The part in `slot` of collective `seq` was refused (unreadable, or
    /// its memory refused): the collective fails here and on every node.
    pub fn refuse(&mut self, seq: u64, slot: usize, outcome: Outcome) {
        if self.ended.contains(seq) {
            return;
        }
        let c = self.coll(seq);
        if c.parts[slot] == Part::Absent {
            c.parts[slot] = IN;
        }
        self.fail(seq, outcome, true);
    }

    /// Collective `seq` holds `bytes` more of the server's budget, released
    /// when it retires.
    #[inline]
    pub fn hold(&mut self, seq: u64, bytes: u64) {
        if let Some(c) = self.colls.get_mut(seq) {
            c.held += bytes;
        } else {
            // Nothing will retire it: give it back at once.
            self.out.push_back(Effect::Retire { seq, bytes });
        }
    }

    /// The data of the part in `slot` of `seq` is in: the collective starts
    /// once every member's is.
    #[inline]
    pub fn ready(&mut self, seq: u64, slot: usize) {
        let Some(c) = self.colls.get_mut(seq) else {
            return;
        };
        if let Part::In { ready, .. } = &mut c.parts[slot] {
            *ready = true;
        }
        let all = c
            .parts
            .iter()
            .zip(&self.members)
            .all(|(p, m)| *m == Member::Away || matches!(p, Part::In { ready: true, .. }));
        if all && !c.started && c.failed.is_none() {
            c.started = true;
            self.out.push_back(Effect::Start { seq });
        }
    }

    /// The result of the part in `slot` of `seq` is being delivered: a
    /// failure meanwhile does not answer it, [`Session::done`] does.
    pub fn busy(&mut self, seq: u64, slot: usize) {
        if let Some(Part::In { busy, .. }) = self.colls.get_mut(seq).map(|c| &mut c.parts[slot]) {
            *busy = true;
        }
    }

    /// The node's schedules of collective `seq` finished: each part still
    /// waiting is delivered, or answered where its rank cancelled it.
    pub fn complete(&mut self, seq: u64) {
        let Some(c) = self.colls.get_mut(seq) else {
            return;
        };
        c.finished = true;
        for slot in 0..self.ranks.len() {
            let Some(Part::In {
                cancelled,
                busy: false,
                ..
            }) = self.colls.get_mut(seq).map(|c| c.parts[slot])
            else {
                continue;
            };
            if self.members[slot] != Member::Here {
                continue;
            }
            if cancelled {
                self.done(seq, slot, Outcome::failed("cancelled by its rank"));
            } else {
                self.out.push_back(Effect::Deliver { seq, slot });
            }
        }
    }

    /// Collective `seq` failed with `outcome` (the first failure stays): what
    /// runs stops, every part not answered is (but one being delivered), and
    /// so is every part submitted later. `tell`: the failure is this node's
    /// news, for the other nodes' proxies too (a lost node, which each sees
    /// by itself, is never told).
    pub fn fail(&mut self, seq: u64, outcome: Outcome, tell: bool) {
        if self.ended.contains(seq) {
            return;
        }
        let c = self.coll(seq);
        let first = c.failed.is_none();
        let o = Outcome::clone(c.failed.get_or_insert_with(|| Box::new(outcome)));
        let waiting: Vec<usize> = (0..c.parts.len())
            .filter(|&p| matches!(c.parts[p], Part::In { busy: false, .. }))
            .collect();
        if first {
            self.out.push_back(Effect::Stop { seq });
            if tell && !o.seen_by_all() {
                // A disagreement is told naming a rank of this node: the
                // other nodes answer their ranks naming it.
                let outcome = match o {
                    Outcome::Disagree {
                        first,
                        first_sig,
                        other,
                        other_sig,
                    } if !self.local(other) && self.local(first) => Outcome::Disagree {
                        first: other,
                        first_sig: other_sig,
                        other: first,
                        other_sig: first_sig,
                    },
                    ref o => o.clone(),
                };
                self.out.push_back(Effect::Tell { seq, outcome });
            }
        }
        for slot in waiting {
            self.done(seq, slot, o.clone());
        }
    }

    /// Whether a message from another node for collective `seq` is wanted:
    /// not for one that ended or failed here (dropped by the window).
    pub fn takes(&mut self, seq: u64) -> bool {
        !self.ended.contains(seq) && self.coll(seq).failed.is_none()
    }

    /// Node `node` is lost: every collective in flight fails with it, and
    /// every later one at once.
    pub fn node_lost(&mut self, node: usize) {
        let node = *self.lost.get_or_insert(node);
        let seqs = self.colls.seqs();
        for seq in seqs {
            self.fail(seq, Outcome::NodeLost { node }, false);
        }
    }

    /// The member in `slot` is gone (`cause`: it left, or died): the
    /// collectives that still need its part fail, here and on every node.
    /// Whether it was here until now.
    pub fn lose(&mut self, slot: usize, cause: &str) -> bool {
        if self.members[slot] != Member::Here {
            return false;
        }
        self.members[slot] = Member::Gone(cause.to_string());
        self.gone = true;
        self.settled = true;
        let rank = self.ranks[slot];
        let hit: Vec<u64> = self
            .colls
            .0
            .iter()
            .filter(|c| !c.started && c.failed.is_none() && c.parts[slot] == Part::Absent)
            .map(|c| c.seq)
            .collect();
        for seq in hit {
            let why = format!("rank {rank} is lost: {cause}");
            self.fail(seq, Outcome::Lost { rank, why }, true);
        }
        true
    }

    /// The member in `slot` cancelled its collective `seq` (see [`Cancel`]).
    pub fn cancel(&mut self, seq: u64, slot: usize) {
        if self.ended.contains(seq) {
            return;
        }
        let rank = self.ranks[slot];
        if self.cancel == Cancel::Part {
            let c = self.coll(seq);
            c.parts[slot] = Part::Answered;
            self.settled = true;
            return;
        }
        let Some(c) = self.colls.get_mut(seq) else {
            return;
        };
        let unfinished = !c.finished;
        let Part::In {
            cancelled, busy, ..
        } = &mut c.parts[slot]
        else {
            return;
        };
        *cancelled = true;
        if *busy {
            // Answered when its delivery ends.
        } else if unfinished {
            let why = format!("rank {rank} gave collective {seq} up (cancelled)");
            self.fail(seq, Outcome::failed(why), true);
        } else {
            self.done(seq, slot, Outcome::failed("cancelled by its rank"));
        }
    }

    /// Forgets the collectives every member here of which is answered or
    /// gone, remembering how they ended (the window drops what comes for
    /// them later). Nothing to look at unless a part was answered or a
    /// member left since the last call: the servers call it on every pass.
    #[inline]
    pub fn retire(&mut self) {
        if std::mem::take(&mut self.settled) {
            self.retire_over();
        }
    }

    /// [`Session::retire`]'s look at the collectives in flight.
    fn retire_over(&mut self) {
        let (members, ended, out) = (&self.members, &mut self.ended, &mut self.out);
        let spare = &mut self.spare;
        self.colls.0.retain_mut(|c| {
            let over = over(c, members);
            if over {
                let bytes = end(ended, spare, c);
                out.push_back(Effect::Retire { seq: c.seq, bytes });
            }
            !over
        });
    }
}

/// Whether every member here of collective `c` is answered.
#[inline]
fn over(c: &Coll, members: &[Member]) -> bool {
    c.parts
        .iter()
        .zip(members)
        .all(|(p, m)| *m != Member::Here || *p == Part::Answered)
}

/// Ends collective `c`, which is over: the window remembers how it ended,
/// its parts are kept for the next collectives; the bytes it held.
#[inline]
fn end(ended: &mut Ended, spare: &mut Vec<Vec<Part>>, c: &mut Coll) -> u64 {
    ended.end(c.seq, c.failed.take().map_or(Outcome::Done, |o| *o));
    if let Parts::Many(v) = &mut c.parts {
        if spare.len() < SPARE {
            let mut parts = std::mem::take(v);
            parts.clear();
            spare.push(parts);
        }
    }
    c.held
}
