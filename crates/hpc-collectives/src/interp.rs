//! The schedule interpreter: one rank's run of one [`Schedule`], without I/O.
//!
//! Every engine runs schedules the same way (see the contract in
//! [`crate::schedule`]): post a round, match arrived messages with its
//! receives by `(peer, tag)` in posting order, land them, wait for its
//! sends to be taken, move on. This module is that logic, once, as a state
//! machine in the manner of `quinn-proto`: it is fed events and answers with
//! actions, and never touches a socket, a futex, a clock or another
//! process's memory. The drivers (the simulator in [`crate::sim`], the
//! engines of `hpc-comm`) do that.
//!
//! * A [`Machine`] is one rank's collective. [`Machine::poll`] returns the
//!   next [`Action`]: [`Action::Send`] and [`Action::Recv`] as the round is
//!   posted, [`Action::Land`] when a message for one of its receives has
//!   arrived, [`Action::Complete`] after the last round. The round's local
//!   steps (copies and reductions) are made during `poll` through the
//!   driver's [`Memory`], the one place where the interpreter touches bytes.
//! * A [`Matcher`] holds the messages that arrived and were not taken yet,
//!   by key (the driver's: peer and tag, often with a collective sequence
//!   number). One matcher serves every machine of a driver; messages of one
//!   key are taken in the order they arrived ([`Matcher::arrived`]).
//! * Events: [`Machine::new`] (the collective is posted), [`Matcher::arrived`]
//!   (a message, or a piece of one, came in), [`Machine::copied`] (the driver
//!   landed bytes of the message handed out by an [`Action::Land`]),
//!   [`Machine::sent`] (a send completed: its region may be reused).
//!
//! # Invariant
//!
//! A machine is in exactly one round; it posts every step of that round
//! before it lands anything, and it leaves the round only when each of its
//! receives got exactly the region's length in bytes and each of its sends
//! was reported [`sent`](Machine::sent). A message whose length differs
//! from its receive's region is never landed: `poll` fails with
//! [`InterpError::SizeMismatch`] and leaves the message at the head of its
//! queue, where the driver finds it to refuse it. After `Complete` or an
//! error the machine does nothing more.
//!
//! Messages may be split into pieces (a driver that stages through
//! fixed-size slots): every piece reports the whole message's length
//! ([`Arrival::total`]); the receive stays open until the driver reported
//! (by [`Machine::copied`]) as many bytes as its region holds, and takes the
//! next piece of the same key for the rest.
//!
//! Time is not an event of the machine: a machine that waits has nothing to
//! do until a message or a completion comes, so the drivers keep their own
//! deadlines (and say what is blocked with [`Machine::waiting_on`]).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use crate::op::{CustomOps, DataType, ReduceError, ReduceOp};
use crate::schedule::{own_copy, BufferId, Region, Schedule, Step};

/// What a message (or a piece of one) tells the interpreter.
pub trait Arrival {
    /// Length in bytes of the whole message this arrival is (part of).
    fn total(&self) -> usize;
}

impl Arrival for Vec<u8> {
    fn total(&self) -> usize {
        self.len()
    }
}

/// A rank's three buffers held in the driver's own memory: the simulator's
/// ranks, and the DPU proxy's copy of a rank's buffers after it fetched them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Buffers {
    /// The send (input) buffer.
    pub send: Vec<u8>,
    /// The receive (output) buffer.
    pub recv: Vec<u8>,
    /// The schedule's scratch.
    pub scratch: Vec<u8>,
}

/// A region that does not lie inside its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("region {0} outside its buffer")]
pub struct OutOfBounds(pub Region);

impl Buffers {
    /// The whole of buffer `b`.
    pub fn buf(&self, b: BufferId) -> &[u8] {
        match b {
            BufferId::Send => &self.send,
            BufferId::Recv => &self.recv,
            BufferId::Scratch => &self.scratch,
        }
    }

    /// The whole of buffer `b`, writable.
    pub fn buf_mut(&mut self, b: BufferId) -> &mut [u8] {
        match b {
            BufferId::Send => &mut self.send,
            BufferId::Recv => &mut self.recv,
            BufferId::Scratch => &mut self.scratch,
        }
    }

    /// The bytes of `r`.
    pub fn read(&self, r: Region) -> Result<&[u8], OutOfBounds> {
        self.buf(r.buf).get(r.offset..r.end()).ok_or(OutOfBounds(r))
    }

    /// The bytes of `r`, writable.
    pub fn write(&mut self, r: Region) -> Result<&mut [u8], OutOfBounds> {
        self.buf_mut(r.buf)
            .get_mut(r.offset..r.end())
            .ok_or(OutOfBounds(r))
    }

    /// The bytes of `src` and, writable, those of `dst`, without a copy: what
    /// a copy or a reduction between two regions needs. Two regions of one
    /// buffer must not overlap (the schedule contract); `dst` is refused if
    /// they do.
    pub fn src_dst(&mut self, src: Region, dst: Region) -> Result<(&[u8], &mut [u8]), OutOfBounds> {
        self.read(src)?;
        self.write(dst)?;
        let (s, d) = (src.offset..src.end(), dst.offset..dst.end());
        if src.buf == dst.buf {
            let buf = self.buf_mut(src.buf);
            return if s.end <= d.start {
                let (lo, hi) = buf.split_at_mut(d.start);
                Ok((&lo[s], &mut hi[..d.len()]))
            } else if d.end <= s.start {
                let (lo, hi) = buf.split_at_mut(s.start);
                Ok((&hi[..s.len()], &mut lo[d]))
            } else {
                Err(OutOfBounds(dst))
            };
        }
        let Buffers {
            send,
            recv,
            scratch,
        } = self;
        let (a, b): (&[u8], &mut [u8]) = match (src.buf, dst.buf) {
            (BufferId::Send, BufferId::Recv) => (send, recv),
            (BufferId::Send, BufferId::Scratch) => (send, scratch),
            (BufferId::Recv, BufferId::Send) => (recv, send),
            (BufferId::Recv, BufferId::Scratch) => (recv, scratch),
            (BufferId::Scratch, BufferId::Send) => (scratch, send),
            (BufferId::Scratch, BufferId::Recv) => (scratch, recv),
            _ => unreachable!("the same buffer is handled above"),
        };
        Ok((&a[s], &mut b[d]))
    }
}

/// Why a local step on [`Buffers`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocalError {
    /// A region outside its buffer (or a copy's destination overlapping its
    /// source, against the schedule contract).
    #[error(transparent)]
    OutOfBounds(#[from] OutOfBounds),
    /// The reduction refused its operands.
    #[error(transparent)]
    Reduce(#[from] ReduceError),
    /// A copy between regions of different lengths (against the schedule
    /// contract: a forged or damaged schedule). It panicked in
    /// `copy_from_slice` ("source slice length (4) does not match destination
    /// slice length (8)").
    #[error("copy of region {src} into region {dst}: their lengths differ")]
    Lengths {
        /// The source region.
        src: Region,
        /// The destination region.
        dst: Region,
    },
}

/// A rank's [`Buffers`] as the interpreter's [`Memory`], reducing with the
/// built-in operations and the custom ones of `custom`: the one memory of
/// the drivers that hold the buffers themselves (the simulator, the DPU
/// proxy's copies, the interpreter's tests). [`Buffers`] is this with no
/// custom operation.
#[derive(Debug)]
pub struct Local<'a> {
    /// The rank's buffers.
    pub bufs: &'a mut Buffers,
    /// The custom operations a reduction may name.
    pub custom: &'a CustomOps,
}

impl Memory for Local<'_> {
    type Error = LocalError;

    fn copy(&mut self, src: Region, dst: Region) -> Result<(), LocalError> {
        self.bufs.copy(src, dst)
    }

    fn reduce(
        &mut self,
        op: ReduceOp,
        dtype: DataType,
        src: Region,
        dst: Region,
    ) -> Result<(), LocalError> {
        let (from, to) = self.bufs.src_dst(src, dst)?;
        Ok(self.custom.apply(op, dtype, from, to)?)
    }
}

impl Memory for Buffers {
    type Error = LocalError;

    fn copy(&mut self, src: Region, dst: Region) -> Result<(), LocalError> {
        if src.len != dst.len {
            return Err(LocalError::Lengths { src, dst });
        }
        let (from, to) = self.src_dst(src, dst)?;
        to.copy_from_slice(from);
        Ok(())
    }

    fn reduce(
        &mut self,
        op: ReduceOp,
        dtype: DataType,
        src: Region,
        dst: Region,
    ) -> Result<(), LocalError> {
        let (from, to) = self.src_dst(src, dst)?;
        Ok(crate::op::apply_reduce(op, dtype, from, to)?)
    }
}

/// The driver's access to one operation's buffers: the local steps of a
/// schedule go through it. Regions come straight from the schedule; an
/// implementation checks them against its buffers.
pub trait Memory {
    /// The driver's error (a region out of bounds, a failed read of another
    /// process's memory, a reduction refused).
    type Error;
    /// `dst = src`; the two do not overlap (schedule contract) and have the
    /// same length.
    fn copy(&mut self, src: Region, dst: Region) -> Result<(), Self::Error>;
    /// `dst[i] = dst[i] op src[i]` over `dtype` elements.
    fn reduce(
        &mut self,
        op: ReduceOp,
        dtype: DataType,
        src: Region,
        dst: Region,
    ) -> Result<(), Self::Error>;
}

/// What the driver does next for a [`Machine`].
#[derive(Debug, PartialEq, Eq)]
pub enum Action<A> {
    /// Send `region` to `peer` with schedule tag `tag`; report its completion
    /// with [`Machine::sent`] (at once for an eager send).
    Send {
        /// Destination rank.
        peer: usize,
        /// Schedule-local tag.
        tag: u32,
        /// Data to send.
        region: Region,
    },
    /// A receive from `peer` with `tag` into `region` was posted: a driver
    /// that must ask its transport for each message does it now; the data is
    /// matched through the [`Matcher`] all the same.
    Recv {
        /// Source rank.
        peer: usize,
        /// Schedule-local tag.
        tag: u32,
        /// Where the data lands.
        region: Region,
    },
    /// `arrival`, the next piece of a message for the receive from `peer`
    /// with `tag`, lands in `region` at offset `got` (bytes of the message
    /// landed before it). The driver copies it, then reports the bytes with
    /// [`Machine::copied`] before it polls again.
    Land {
        /// Source rank.
        peer: usize,
        /// Schedule-local tag.
        tag: u32,
        /// The receive's whole region.
        region: Region,
        /// Bytes of this message already landed.
        got: usize,
        /// What arrived, as the driver filed it.
        arrival: A,
    },
    /// The last round ended: the collective is done.
    Complete,
}

/// Why a [`Machine`] cannot go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InterpError<E> {
    /// A message's size differs from its receive's region. The message is
    /// left at the head of its queue in the [`Matcher`].
    #[error("message from rank {peer} tag {tag}: sent {sent} bytes, receive expects {expected}")]
    SizeMismatch {
        /// Sender.
        peer: usize,
        /// Schedule-local tag.
        tag: u32,
        /// Bytes sent.
        sent: usize,
        /// Bytes the receive's region holds.
        expected: usize,
    },
    /// The driver's memory refused a local step.
    #[error("local step: {0}")]
    Memory(E),
}

/// Messages that arrived and were not taken yet, by key, in arrival order.
#[derive(Debug)]
pub struct Matcher<K, A> {
    queues: HashMap<K, VecDeque<A>>,
}

impl<K, A> Default for Matcher<K, A> {
    fn default() -> Self {
        Self {
            queues: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq, A> Matcher<K, A> {
    /// An empty matcher.
    pub fn new() -> Self {
        Self::default()
    }

    /// Event: `arrival` came in for `key`; it is taken after every earlier
    /// arrival of the same key.
    pub fn arrived(&mut self, key: K, arrival: A) {
        self.queues.entry(key).or_default().push_back(arrival);
    }

    /// Takes the oldest arrival of `key`.
    pub fn take(&mut self, key: &K) -> Option<A> {
        let q = self.queues.get_mut(key)?;
        let a = q.pop_front();
        if q.is_empty() {
            self.queues.remove(key);
        }
        a
    }

    /// Puts `arrival` back at the head of `key`'s queue (it was taken and
    /// not used).
    pub fn put_back(&mut self, key: K, arrival: A) {
        match self.queues.entry(key) {
            Entry::Occupied(mut e) => e.get_mut().push_front(arrival),
            Entry::Vacant(e) => {
                e.insert(VecDeque::from([arrival]));
            }
        }
    }

    /// The oldest arrival of `key`, left in place.
    pub fn peek(&self, key: &K) -> Option<&A> {
        self.queues.get(key).and_then(VecDeque::front)
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Removes every queue whose key `drop` selects, handing its arrivals
    /// to `each` (a driver that retires a collective's unread messages).
    pub fn remove_where(&mut self, mut drop: impl FnMut(&K) -> bool, mut each: impl FnMut(&K, A))
    where
        K: Clone,
    {
        let keys: Vec<K> = self.queues.keys().filter(|k| drop(k)).cloned().collect();
        for k in keys {
            if let Some(q) = self.queues.remove(&k) {
                for a in q {
                    each(&k, a);
                }
            }
        }
    }

    /// Every key with arrivals waiting.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.queues.keys()
    }

    /// Keeps the arrivals for which `keep` holds (it may change them in
    /// place, as a driver that turns borrowed data into owned data does).
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut A) -> bool) {
        self.queues.retain(|k, q| {
            q.retain_mut(|a| keep(k, a));
            !q.is_empty()
        });
    }
}

/// A receive of the current round not yet complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenRecv {
    /// Source rank.
    pub peer: usize,
    /// Schedule-local tag.
    pub tag: u32,
    /// Where the data lands.
    pub region: Region,
    /// Bytes landed so far.
    pub got: usize,
}

/// One rank's run of one schedule (see the [module docs](self)).
#[derive(Debug, Clone, Default)]
pub struct Machine {
    round: usize,
    rounds: usize,
    /// Next step of the round to post.
    cursor: usize,
    /// Next receive to try to land in this pass.
    scan: usize,
    /// The receive an `Action::Land` was handed out for, until `copied`.
    landing: Option<usize>,
    /// Skip the first round's copies between the rank's own buffers (the rank
    /// made them when it posted, see [`Schedule::run_own_copies`]).
    skip_own: bool,
    recvs: Vec<OpenRecv>,
    sends: Vec<(usize, u32)>,
    /// The send of the last `Action::Send`, until the next `poll`: a driver
    /// that completes it at once (an eager send) reports it before then, and
    /// it never costs a place in `sends` (nor, for a round of eager sends
    /// only, an allocation).
    just_sent: Option<(usize, u32)>,
    ended: bool,
}

impl Machine {
    /// Event: the collective of `sched` is posted. With `skip_own`, the
    /// first round's [`own_copy`] steps are not made (the rank made them).
    pub fn new(sched: &Schedule, skip_own: bool) -> Machine {
        Machine {
            rounds: sched.rounds.len(),
            skip_own,
            ..Machine::default()
        }
    }

    /// The current round (the number of rounds once done).
    pub fn round(&self) -> usize {
        self.round
    }

    /// Whether the collective completed (or failed).
    pub fn is_done(&self) -> bool {
        self.ended
    }

    /// Whether every step of the current round is posted.
    pub fn is_posted(&self, sched: &Schedule) -> bool {
        self.ended || self.cursor >= sched.rounds[self.round].steps.len()
    }

    /// The receives of the current round still open.
    pub fn open_recvs(&self) -> &[OpenRecv] {
        &self.recvs
    }

    /// The sends (peer, tag) of the current round not reported sent (as of
    /// the last `poll`: a send it just handed out counts from the next).
    pub fn open_sends(&self) -> &[(usize, u32)] {
        &self.sends
    }

    /// A step of the current round that keeps it open, if any: an unsent
    /// send first, else an incomplete receive.
    pub fn waiting_on(&self, sched: &Schedule) -> Option<Step> {
        if self.ended {
            return None;
        }
        let steps = &sched.rounds[self.round].steps;
        let send = self.sends.first().and_then(|&(p, t)| {
            steps
                .iter()
                .find(|s| matches!(**s, Step::Send { peer, tag, .. } if peer == p && tag == t))
                .copied()
        });
        send.or_else(|| {
            self.recvs.first().map(|r| Step::Recv {
                peer: r.peer,
                region: r.region,
                tag: r.tag,
            })
        })
    }

    /// Event: the send to `peer` with `tag` (the oldest open one of that pair)
    /// completed. Returns whether such a send was open.
    pub fn sent(&mut self, peer: usize, tag: u32) -> bool {
        if self.just_sent == Some((peer, tag)) && !self.sends.contains(&(peer, tag)) {
            self.just_sent = None;
            return true;
        }
        match self.sends.iter().position(|&s| s == (peer, tag)) {
            Some(i) => {
                self.sends.remove(i);
                true
            }
            None => false,
        }
    }

    /// Event: the driver landed `n` more bytes of the message handed out by
    /// the last [`Action::Land`]. Returns whether the receive is complete.
    ///
    /// # Panics
    ///
    /// If no `Land` is outstanding, or `n` takes the receive past its region.
    pub fn copied(&mut self, n: usize) -> bool {
        let i = self
            .landing
            .take()
            .expect("copied() without an Action::Land");
        let r = &mut self.recvs[i];
        r.got += n;
        assert!(r.got <= r.region.len, "landed past the receive's region");
        if r.got == r.region.len {
            self.recvs.swap_remove(i);
            true
        } else {
            false
        }
    }

    /// The next action, or `None` when the machine waits for an event. Local
    /// steps are made on the way through `mem`. Keys of the `matcher` are
    /// made by `key(peer, tag)`.
    ///
    /// # Panics
    ///
    /// If the last [`Action::Land`] was not answered with [`Machine::copied`].
    pub fn poll<K, A, M>(
        &mut self,
        sched: &Schedule,
        mem: &mut M,
        matcher: &mut Matcher<K, A>,
        key: impl Fn(usize, u32) -> K,
    ) -> Result<Option<Action<A>>, InterpError<M::Error>>
    where
        K: Hash + Eq,
        A: Arrival,
        M: Memory + ?Sized,
    {
        assert!(
            self.landing.is_none(),
            "poll() before copied() answered the last Action::Land"
        );
        if let Some(s) = self.just_sent.take() {
            self.sends.push(s);
        }
        loop {
            if self.ended {
                return Ok(None);
            }
            if self.round >= self.rounds {
                self.ended = true;
                return Ok(Some(Action::Complete));
            }
            let steps = &sched.rounds[self.round].steps;
            // Post the round.
            while let Some(&step) = steps.get(self.cursor) {
                self.cursor += 1;
                match step {
                    Step::Send { peer, region, tag } => {
                        self.just_sent = Some((peer, tag));
                        return Ok(Some(Action::Send { peer, tag, region }));
                    }
                    Step::Recv { peer, region, tag } => {
                        self.recvs.push(OpenRecv {
                            peer,
                            tag,
                            region,
                            got: 0,
                        });
                        return Ok(Some(Action::Recv { peer, tag, region }));
                    }
                    Step::Copy { src, dst } => {
                        if self.skip_own && self.round == 0 && own_copy(&step).is_some() {
                            continue;
                        }
                        mem.copy(src, dst).map_err(|e| self.fail(e))?;
                    }
                    Step::Reduce {
                        src,
                        dst,
                        op,
                        dtype,
                    } => mem.reduce(op, dtype, src, dst).map_err(|e| self.fail(e))?,
                }
            }
            // Land what arrived.
            while let Some(r) = self.recvs.get(self.scan) {
                let k = key(r.peer, r.tag);
                let Some(a) = matcher.take(&k) else {
                    self.scan += 1;
                    continue;
                };
                let sent = a.total();
                if sent != r.region.len {
                    let e = InterpError::SizeMismatch {
                        peer: r.peer,
                        tag: r.tag,
                        sent,
                        expected: r.region.len,
                    };
                    matcher.put_back(k, a);
                    self.ended = true;
                    return Err(e);
                }
                self.landing = Some(self.scan);
                return Ok(Some(Action::Land {
                    peer: r.peer,
                    tag: r.tag,
                    region: r.region,
                    got: r.got,
                    arrival: a,
                }));
            }
            self.scan = 0;
            if !self.recvs.is_empty() || !self.sends.is_empty() {
                return Ok(None);
            }
            self.round += 1;
            self.cursor = 0;
        }
    }

    fn fail<E>(&mut self, e: E) -> InterpError<E> {
        self.ended = true;
        InterpError::Memory(e)
    }
}
