//! Bookkeeping shared by the transport and its backends: operation ids, completions,
//! tag matching and the table of local regions.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};

use crate::error::{check_bounds, Error, Result};
use crate::region::{Region, RegionInner};
use crate::sync::{AtomicU32, AtomicU64, Mutex, MutexGuard, Ordering};

/// Identifies one posted operation; returned by the posting call and used to test or
/// wait for its completion. Ids are never reused within a transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub(crate) u64);

impl OpId {
    /// The numeric id (for logs).
    pub fn get(&self) -> u64 {
        self.0
    }
}

/// What kind of operation completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// One-sided write into a peer's region.
    Put,
    /// One-sided read from a peer's region.
    Get,
    /// Tagged two-sided send.
    Send,
    /// Tagged two-sided receive.
    Recv,
}

/// Source bytes of a put: owned by the transport until the put completes, then handed
/// back in the completion's [`Payload`].
#[derive(Debug)]
pub enum Source {
    /// An owned vector (returned as [`Payload::Bytes`]).
    Bytes(Vec<u8>),
    /// A slice of a registered region (the handle is returned as [`Payload::Region`]).
    Region {
        /// The region.
        region: Region,
        /// First byte.
        offset: usize,
        /// Number of bytes.
        len: usize,
    },
}

impl From<Vec<u8>> for Source {
    fn from(v: Vec<u8>) -> Source {
        Source::Bytes(v)
    }
}

/// The length and bounds check of [`Source`] and [`Sink`], whose `Region` variants
/// are the same: `len`, `is_empty` and `validate` (the slice lies within its region),
/// `$bytes => $len` giving the length of the `Bytes` variant.
macro_rules! bytes_or_region {
    ($ty:ident, $bytes:ident => $len:expr) => {
        impl $ty {
            /// Number of bytes to transfer.
            pub fn len(&self) -> usize {
                match self {
                    $ty::Bytes($bytes) => $len,
                    $ty::Region { len, .. } => *len,
                }
            }

            /// Whether there are no bytes.
            pub fn is_empty(&self) -> bool {
                self.len() == 0
            }

            pub(crate) fn validate(&self) -> Result<()> {
                if let $ty::Region {
                    region,
                    offset,
                    len,
                } = self
                {
                    check_bounds(*offset as u64, *len as u64, region.len() as u64)?;
                }
                Ok(())
            }
        }
    };
}

bytes_or_region!(Source, v => v.len());
bytes_or_region!(Sink, n => *n);

impl Source {
    /// Pointer to the first byte (valid while `self` lives).
    pub(crate) fn as_ptr(&self) -> *const u8 {
        match self {
            Source::Bytes(v) => v.as_ptr(),
            // SAFETY: `validate` checked offset <= region length.
            Source::Region { region, offset, .. } => unsafe { region.as_ptr().add(*offset) },
        }
    }

    pub(crate) fn into_payload(self) -> Payload {
        match self {
            Source::Bytes(v) => Payload::Bytes(v),
            Source::Region { region, .. } => Payload::Region(region),
        }
    }
}

/// Destination of a get: a new vector of `len` bytes or a slice of a local region.
#[derive(Debug)]
pub enum Sink {
    /// A new vector of this many bytes (returned as [`Payload::Bytes`]).
    Bytes(usize),
    /// A slice of a registered region (the handle is returned as [`Payload::Region`]).
    Region {
        /// The region.
        region: Region,
        /// First byte.
        offset: usize,
        /// Number of bytes.
        len: usize,
    },
}

impl Sink {
    /// Fills the sink by `fill(ptr, len)` and returns the payload.
    pub(crate) fn fill(self, fill: impl FnOnce(*mut u8, usize) -> Result<()>) -> Result<Payload> {
        match self {
            Sink::Bytes(n) => {
                let mut v = vec![0u8; n];
                fill(v.as_mut_ptr(), n)?;
                Ok(Payload::Bytes(v))
            }
            Sink::Region {
                region,
                offset,
                len,
            } => {
                // SAFETY: `validate` checked offset + len <= region length.
                fill(unsafe { region.as_ptr().add(offset) }, len)?;
                Ok(Payload::Region(region))
            }
        }
    }
}

/// What a completed operation hands back.
#[derive(Debug)]
pub enum Payload {
    /// Nothing (a put/get whose buffer was a region slice returns the region instead).
    None,
    /// Bytes: the received message, the data of a get, or the vector a send/put
    /// borrowed.
    Bytes(Vec<u8>),
    /// The region handle an operation held.
    Region(Region),
}

impl Payload {
    /// The bytes, or an empty vector for the other variants.
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Payload::Bytes(v) => v,
            _ => Vec::new(),
        }
    }
}

/// One completed operation, as returned by [`crate::Transport::poll`].
#[derive(Debug)]
pub struct Completion {
    /// The operation.
    pub op: OpId,
    /// The peer it involved.
    pub peer: usize,
    /// What it was.
    pub kind: OpKind,
    /// Its result.
    pub result: Result<Payload>,
}

/// A fast hasher for the small integer keys of the operation tables (ids, ranks and
/// tags are not attacker-chosen in a way that matters: a peer can only slow its own
/// messages down).
#[derive(Default, Clone, Copy)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
}

type Fast = std::hash::BuildHasherDefault<IdHasher>;

#[cfg(not(loom))]
thread_local! {
    /// (transport identity, op) this thread is waiting for inside
    /// [`Shared::progress_for`]; (0, 0) outside it.
    static HANDOFF_WANT: std::cell::Cell<(usize, u64)> = const { std::cell::Cell::new((0, 0)) };
    /// (transport identity, op, generation) of the receive this thread posted last
    /// that went pending (see [`Shared::surely_pending`]).
    static LAST_PENDING: std::cell::Cell<(usize, u64, u64)> = const { std::cell::Cell::new((0, 0, 0)) };
    /// The awaited receive, completed by `deliver` during that progress call.
    static HANDOFF_GOT: std::cell::Cell<Option<Completion>> = const { std::cell::Cell::new(None) };
}

// The same thread-locals, one per loom thread.
#[cfg(loom)]
loom::thread_local! {
    static HANDOFF_WANT: std::cell::Cell<(usize, u64)> = std::cell::Cell::new((0, 0));
    static LAST_PENDING: std::cell::Cell<(usize, u64, u64)> = std::cell::Cell::new((0, 0, 0));
    static HANDOFF_GOT: std::cell::Cell<Option<Completion>> = std::cell::Cell::new(None);
}

#[derive(Default)]
struct State {
    ready: HashMap<u64, Completion, Fast>,
    pending: HashMap<u64, (usize, OpKind), Fast>,
    posted: HashMap<(usize, u64), VecDeque<u64>, Fast>,
    unexpected: HashMap<(usize, u64), VecDeque<Vec<u8>>, Fast>,
    /// Lost peers, with the `PeerLost` error their operations fail with.
    dead: HashMap<usize, Error, Fast>,
    /// Receives that were put into a peer's [`Slot`], by id: the peer. An entry
    /// whose slot no longer holds the id is stale (the receive completed without
    /// the lock) and is dropped when next seen, or when the slot is filled again.
    slotted: HashMap<u64, usize, Fast>,
    /// Per peer, the receive last put into its slot (the `slotted` entry to drop
    /// when the slot is filled again).
    slot_last: HashMap<usize, u64, Fast>,
}

impl State {
    /// `Err(PeerLost)` if `peer` is known lost.
    fn alive(&self, peer: usize) -> Result<()> {
        match self.dead.get(&peer) {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

/// A peer's receive slot: the receive posted first while no other receive from that
/// peer waits in the slot and none of its tag waits in the table, so that the thread
/// awaiting it can complete it without the table's lock.
///
/// Protocol: the slot is *filled* only under the table's lock, when `op` is 0
/// (`tag` first, then `op` with release). It is *emptied* by whoever swaps `op` from
/// the receive's id to 0 (compare-and-swap, so exactly one of them completes it):
/// a delivery by the thread that awaits that receive (no lock: it hands the message
/// straight back), a delivery by any other thread (under the lock: into the ready
/// table), or the loss of the peer (under the lock: an error). Messages from one
/// peer are delivered one at a time and in order by its backend, so the slot's
/// receive, being older than any receive of its tag in the table, is matched first.
#[derive(Default)]
struct Slot {
    op: AtomicU64,
    tag: AtomicU64,
}

/// State shared by the transport and its backends.
pub(crate) struct Shared {
    pub(crate) rank: usize,
    pub(crate) size: usize,
    next_op: AtomicU64,
    next_region: AtomicU32,
    /// Bumped whenever a completion becomes ready, so waiters can poll one atomic.
    generation: AtomicU64,
    st: Mutex<State>,
    regions: Mutex<HashMap<u32, Weak<RegionInner>>>,
    /// One receive slot per peer (see [`Slot`]).
    slots: Box<[Slot]>,
}

impl Shared {
    pub(crate) fn new(rank: usize, size: usize) -> Arc<Shared> {
        Arc::new(Shared {
            rank,
            size,
            next_op: AtomicU64::new(1),
            next_region: AtomicU32::new(1),
            generation: AtomicU64::new(0),
            st: Mutex::new(State::default()),
            regions: Mutex::new(HashMap::new()),
            slots: (0..size).map(|_| Slot::default()).collect(),
        })
    }

    /// The completion generation (see [`Shared::take`]).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Marks a new ready completion. Taking `&State` proves the caller holds the
    /// table's lock, so a plain store does (no read-modify-write on the hot path).
    fn bump(&self, _locked: &State) {
        #[cfg(not(loom))]
        {
            let g = self.generation.load(Ordering::Relaxed);
            self.generation.store(g.wrapping_add(1), Ordering::Release);
        }
        // Equivalent under the lock; loom's exploration misses the interleavings of
        // a load-then-store by one thread against another's loads (checked: it never
        // lets another thread see the value before the store), so the models use
        // the single read-modify-write.
        #[cfg(loom)]
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Runs `progress` with `op` marked as awaited by this thread: a receive that
    /// `progress` completes for `op` is handed back here directly instead of passing
    /// through the ready table (one lock round trip less per message on the latency
    /// path). Any other completion goes to the table as usual.
    pub(crate) fn progress_for(&self, op: OpId, progress: impl FnOnce()) -> Option<Completion> {
        struct Clear;
        impl Drop for Clear {
            fn drop(&mut self) {
                HANDOFF_WANT.with(|w| w.set((0, 0)));
            }
        }
        HANDOFF_WANT.with(|w| w.set((self as *const Shared as usize, op.0)));
        let clear = Clear;
        progress();
        drop(clear);
        HANDOFF_GOT.with(|g| g.take())
    }

    /// True only if `op` is certainly still pending: it is the receive this thread
    /// posted last, which went pending, and no completion happened since (every way
    /// to complete it bumps the generation, or hands it to this thread inside
    /// [`Shared::progress_for`], which forgets this record). Lets a wait that
    /// follows its post skip one look at the table. Forgets the record.
    pub(crate) fn surely_pending(&self, op: OpId) -> bool {
        let (who, id, g) = LAST_PENDING.with(|l| l.replace((0, 0, 0)));
        who == self as *const Shared as usize && id == op.0 && g == self.generation()
    }

    /// The first look of a wait for `op`: its completion if it is ready, and the
    /// completion generation that [`Shared::wait_poll`] compares against. Skips the
    /// table when `op` is [surely pending](Shared::surely_pending).
    pub(crate) fn wait_begin(&self, op: OpId) -> Result<(Option<Completion>, u64)> {
        // Loaded before looking: any completion made ready after this load moves the
        // generation, so `wait_poll` will look at the table again.
        let seen = self.generation();
        if !self.surely_pending(op) {
            if let Some(c) = self.take(op)? {
                return Ok((Some(c), seen));
            }
        }
        Ok((None, seen))
    }

    /// One round of a wait for `op`: runs `progress` (a receive it completes for
    /// `op` is handed straight back), then looks at the table only if some
    /// completion became ready since `seen`.
    ///
    /// No completion is missed: every path that makes one ready either hands it to
    /// this thread inside `progress_for` or inserts it into the table and then
    /// moves the generation (both under the table's lock), and `seen` is only
    /// advanced to a generation value read *before* the table is searched.
    pub(crate) fn wait_poll(
        &self,
        op: OpId,
        seen: &mut u64,
        progress: impl FnOnce(),
    ) -> Result<Option<Completion>> {
        if let Some(c) = self.progress_for(op, progress) {
            return Ok(Some(c));
        }
        let now = self.generation();
        if now != *seen {
            *seen = now;
            return self.take(op);
        }
        Ok(None)
    }

    /// Whether this thread, inside [`Shared::progress_for`], awaits `op`.
    fn awaited(&self, op: u64) -> bool {
        HANDOFF_WANT.with(|w| w.get() == (self as *const Shared as usize, op))
    }

    fn st(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent maps (no multi-step
        // invariants span an unwind), so recover the guard.
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts an operation with `peer`, failing at once if the peer is known lost.
    pub(crate) fn begin(&self, peer: usize, kind: OpKind) -> Result<OpId> {
        let id = self.next_op.fetch_add(1, Ordering::Relaxed);
        let mut st = self.st();
        st.alive(peer)?;
        st.pending.insert(id, (peer, kind));
        Ok(OpId(id))
    }

    /// Records an operation that completed as it was posted (one pass through the
    /// table instead of `begin` + `complete`); fails like `begin` for a lost peer.
    pub(crate) fn ready_now(&self, peer: usize, kind: OpKind, payload: Payload) -> Result<OpId> {
        let id = self.next_op.fetch_add(1, Ordering::Relaxed);
        let mut st = self.st();
        st.alive(peer)?;
        st.ready.insert(
            id,
            Completion {
                op: OpId(id),
                peer,
                kind,
                result: Ok(payload),
            },
        );
        self.bump(&st);
        Ok(OpId(id))
    }

    /// Forgets an operation whose posting failed.
    pub(crate) fn abort(&self, op: OpId) {
        self.st().pending.remove(&op.0);
    }

    /// Records the completion of a pending operation (ignored if it already failed).
    pub(crate) fn complete(&self, op: OpId, result: Result<Payload>) {
        let mut st = self.st();
        if let Some((peer, kind)) = st.pending.remove(&op.0) {
            st.ready.insert(
                op.0,
                Completion {
                    op,
                    peer,
                    kind,
                    result,
                },
            );
            self.bump(&st);
        }
    }

    /// A message arrived from `peer`.
    pub(crate) fn deliver(&self, peer: usize, tag: u64, data: Vec<u8>) {
        let slot = self.slots.get(peer);
        // Fast path, without the lock: this thread awaits the receive in `peer`'s
        // slot, and the message is for it.
        let (who, want) = HANDOFF_WANT.with(|w| w.get());
        let fast = match slot {
            Some(slot) if who == self as *const Shared as usize && want != 0 => {
                // Acquire: pairs with the fill's release, so `tag` is the receive's.
                slot.op.load(Ordering::Acquire) == want
                    && slot.tag.load(Ordering::Relaxed) == tag
                    && slot
                        .op
                        .compare_exchange(want, 0, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
            }
            _ => false,
        };
        if fast {
            LAST_PENDING.with(|l| l.set((0, 0, 0)));
            HANDOFF_GOT.with(|g| {
                g.set(Some(Completion {
                    op: OpId(want),
                    peer,
                    kind: OpKind::Recv,
                    result: Ok(Payload::Bytes(data)),
                }))
            });
            return;
        }
        let mut st = self.st();
        let in_slot = slot.map_or(0, |s| s.op.load(Ordering::Acquire));
        let took = match slot {
            Some(s) if in_slot != 0 => {
                s.tag.load(Ordering::Relaxed) == tag
                    && s.op
                        .compare_exchange(in_slot, 0, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
            }
            _ => false,
        };
        let posted = if took {
            st.slotted.remove(&in_slot);
            Some(in_slot)
        } else {
            let op = st.posted.get_mut(&(peer, tag)).and_then(|q| q.pop_front());
            if let Some(op) = op {
                st.pending.remove(&op);
            }
            op
        };
        match posted {
            Some(op) => {
                let c = Completion {
                    op: OpId(op),
                    peer,
                    kind: OpKind::Recv,
                    result: Ok(Payload::Bytes(data)),
                };
                if self.awaited(op) {
                    LAST_PENDING.with(|l| l.set((0, 0, 0)));
                    HANDOFF_GOT.with(|g| g.set(Some(c)));
                } else {
                    st.ready.insert(op, c);
                    self.bump(&st);
                }
            }
            None => st
                .unexpected
                .entry((peer, tag))
                .or_default()
                .push_back(data),
        }
    }

    /// Posts a receive; it completes at once if a matching message is waiting.
    pub(crate) fn post_recv(&self, peer: usize, tag: u64) -> OpId {
        let id = self.next_op.fetch_add(1, Ordering::Relaxed);
        let mut st = self.st();
        let early = st
            .unexpected
            .get_mut(&(peer, tag))
            .and_then(|q| q.pop_front());
        let result = match early {
            Some(data) => Some(Ok(Payload::Bytes(data))),
            None => st.dead.get(&peer).map(|e| Err(e.clone())),
        };
        match result {
            Some(result) => {
                st.ready.insert(
                    id,
                    Completion {
                        op: OpId(id),
                        peer,
                        kind: OpKind::Recv,
                        result,
                    },
                );
                self.bump(&st);
            }
            None => {
                let slot = self.slots.get(peer);
                let free = slot.is_some_and(|s| s.op.load(Ordering::Relaxed) == 0)
                    && st.posted.get(&(peer, tag)).is_none_or(VecDeque::is_empty);
                match slot {
                    // The slot is free and no older receive of this tag waits: the
                    // thread awaiting this one can complete it without the lock.
                    Some(slot) if free => {
                        if let Some(old) = st.slot_last.insert(peer, id) {
                            st.slotted.remove(&old);
                        }
                        st.slotted.insert(id, peer);
                        slot.tag.store(tag, Ordering::Relaxed);
                        // Release: a thread that sees this id in the slot sees its tag.
                        slot.op.store(id, Ordering::Release);
                    }
                    _ => {
                        st.pending.insert(id, (peer, OpKind::Recv));
                        st.posted.entry((peer, tag)).or_default().push_back(id);
                    }
                }
                let g = self.generation.load(Ordering::Relaxed);
                LAST_PENDING.with(|l| l.set((self as *const Shared as usize, id, g)));
            }
        }
        OpId(id)
    }

    /// Marks `peer` lost: its pending operations fail, later ones fail at once.
    pub(crate) fn fail_peer(&self, peer: usize, cause: &str) {
        self.fail_peer_by(peer, cause, None::<Error>);
    }

    /// Like [`Shared::fail_peer`], keeping the error that revealed the loss as the
    /// source of every `PeerLost` it causes.
    pub(crate) fn fail_peer_by(
        &self,
        peer: usize,
        cause: &str,
        source: Option<impl std::error::Error + Send + Sync + 'static>,
    ) {
        let mut st = self.st();
        if st.dead.contains_key(&peer) {
            return;
        }
        let lost_error = Error::lost(peer, cause, source);
        st.dead.insert(peer, lost_error.clone());
        let mut lost: Vec<(u64, OpKind)> = st
            .pending
            .iter()
            .filter(|(_, (p, _))| *p == peer)
            .map(|(op, (_, k))| (*op, *k))
            .collect();
        if let Some(slot) = self.slots.get(peer) {
            let op = slot.op.load(Ordering::Acquire);
            if op != 0
                && slot
                    .op
                    .compare_exchange(op, 0, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                st.slotted.remove(&op);
                lost.push((op, OpKind::Recv));
            }
        }
        // A peer that closes with nothing in flight is a normal end of job (it finished
        // first); only a loss that fails operations deserves a warning.
        if lost.is_empty() {
            tracing::debug!(peer, cause, "transport: peer gone");
        } else {
            tracing::warn!(peer, cause, pending = lost.len(), "transport: peer lost");
        }
        for (op, kind) in lost {
            st.pending.remove(&op);
            st.ready.insert(
                op,
                Completion {
                    op: OpId(op),
                    peer,
                    kind,
                    result: Err(lost_error.clone()),
                },
            );
            self.bump(&st);
        }
        st.posted.retain(|(p, _), _| *p != peer);
    }

    /// The `PeerLost` error of `peer` if it is known lost.
    pub(crate) fn is_lost(&self, peer: usize) -> Option<Error> {
        self.st().dead.get(&peer).cloned()
    }

    /// Takes the completion of `op` if it is ready. `Err` for an unknown id.
    pub(crate) fn take(&self, op: OpId) -> Result<Option<Completion>> {
        let mut st = self.st();
        if let Some(c) = st.ready.remove(&op.0) {
            return Ok(Some(c));
        }
        if st.pending.contains_key(&op.0) || self.in_slot(&mut st, op.0).is_some() {
            Ok(None)
        } else {
            Err(Error::InvalidArgument(format!(
                "operation {} is unknown or was already completed",
                op.0
            )))
        }
    }

    /// The peer of `op` if it is a receive still waiting in a peer's slot (forgets
    /// the record of one that completed without the lock).
    fn in_slot(&self, st: &mut State, op: u64) -> Option<usize> {
        let peer = *st.slotted.get(&op)?;
        if self.slots[peer].op.load(Ordering::Acquire) == op {
            return Some(peer);
        }
        st.slotted.remove(&op);
        None
    }

    /// The peer an unfinished operation involves.
    pub(crate) fn peer_of(&self, op: OpId) -> Option<usize> {
        let mut st = self.st();
        match st.pending.get(&op.0) {
            Some((p, _)) => Some(*p),
            None => self.in_slot(&mut st, op.0),
        }
    }

    /// Takes every ready completion.
    pub(crate) fn drain(&self) -> Vec<Completion> {
        let mut v: Vec<Completion> = self.st().ready.drain().map(|(_, c)| c).collect();
        v.sort_by_key(|c| c.op);
        v
    }

    /// Number of operations not yet completed.
    pub(crate) fn pending_count(&self) -> usize {
        let st = self.st();
        let in_slots = st
            .slotted
            .iter()
            .filter(|(&op, &p)| self.slots[p].op.load(Ordering::Acquire) == op)
            .count();
        st.pending.len() + in_slots
    }

    /// Allocates and registers a new region.
    pub(crate) fn new_region(&self, len: usize) -> Result<Region> {
        let id = self.next_region.fetch_add(1, Ordering::Relaxed);
        let region = Region::new(self.rank, id, len)?;
        let mut t = self.regions.lock().unwrap_or_else(|e| e.into_inner());
        t.retain(|_, w| w.strong_count() > 0);
        t.insert(id, Arc::downgrade(&region.inner));
        Ok(region)
    }

    /// Forgets a region (its key goes stale for remote lookups at once).
    pub(crate) fn forget_region(&self, id: u32) {
        self.regions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    /// Finds a live local region by id and key, checking `offset + len` against it.
    pub(crate) fn lookup(&self, id: u32, key: u64, offset: u64, len: u64) -> Result<Region> {
        let inner = self
            .regions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .and_then(Weak::upgrade)
            .ok_or_else(|| Error::BadKey(format!("region {id} is not registered (stale key?)")))?;
        if inner.key != key {
            return Err(Error::BadKey(format!("wrong key for region {id}")));
        }
        check_bounds(offset, len, inner.len as u64)?;
        Ok(Region { inner })
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

// The completion hand-off under loom (see the module).
#[cfg(all(test, loom))]
mod loom_models;
