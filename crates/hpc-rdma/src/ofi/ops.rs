//! What the backend keeps about operations: what is in flight, posts the
//! provider refused for now, puts in parts, and the endpoint's state behind its lock.

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::Weak;
use std::time::{Duration, Instant};

use super::ffi::*;
use super::provider::*;
use super::*;
use crate::completion::{OpId, Payload, Source};
use crate::region::Region;

/// Storage a provider may use for an operation (`FI_CONTEXT2`: 8 words), and our
/// key for finding the operation again.
pub(super) type Ctx = Box<[u64; 8]>;

pub(super) fn new_ctx() -> Ctx {
    Box::new([0; 8])
}

pub(super) fn ctx_key(c: &Ctx) -> usize {
    &**c as *const [u64; 8] as usize
}

/// What a posted libfabric operation holds until its completion.
pub(super) enum InFlight {
    /// A pre-posted receive buffer (its index).
    Pool(usize),
    /// An eager or announcing message: the frame sent, and the user's data to hand
    /// back (`op` None for the announcement).
    Frame {
        op: Option<OpId>,
        peer: usize,
        _frame: Vec<u8>,
        data: Option<Vec<u8>>,
    },
    /// Announced data being sent.
    Data {
        op: OpId,
        peer: usize,
        data: Vec<u8>,
    },
    /// Announced data being received.
    Incoming { peer: usize, seq: u32, buf: Vec<u8> },
    /// A part of a put (`last`: the part that completes it).
    Put { op: OpId, peer: usize },
    /// A get.
    Get {
        op: OpId,
        peer: usize,
        sink: GetSink,
    },
}

pub(super) enum GetSink {
    Bytes(Vec<u8>),
    Region(Region),
}

/// A post the provider refused with "try again", kept in order until it takes it
/// (see `Inner::later`). Receives wait in one queue, what goes to a peer in that
/// peer's queue, so a peer that does not progress holds up only its own traffic.
pub(super) enum Later {
    /// Re-post pre-posted receive buffer `i`.
    Pool(usize),
    /// Receive announced data.
    Incoming { peer: usize, seq: u32, buf: Vec<u8> },
    /// A tagged send of `len` bytes at `ptr` under libfabric tag `tag`; the memory
    /// is owned by `what` (an `InFlight::Frame` or `InFlight::Data`).
    Send {
        peer: usize,
        tag: u64,
        ptr: *const u8,
        len: usize,
        what: InFlight,
    },
    /// A write of `src[from..from + len]` to `addr + from` at `peer`: a part of put
    /// `op`, whose source `ep.puts` owns until every part completed.
    Write {
        op: OpId,
        peer: usize,
        src: *const u8,
        from: usize,
        len: usize,
        addr: u64,
        key: u64,
    },
    /// A read of `len` bytes from `addr` at `peer` into `ptr`, owned by `sink`.
    Read {
        op: OpId,
        peer: usize,
        ptr: *mut u8,
        len: usize,
        addr: u64,
        key: u64,
        sink: GetSink,
    },
}

// SAFETY: the raw pointers point into memory the entry (or `Ep::puts`) owns; entries
// live in `Ep` behind its lock, or are dropped (as a whole, outside the lock when they
// may hold a region) without being dereferenced.
unsafe impl Send for Later {}

impl Later {
    /// The peer the post goes to (`None`: a receive, queued apart).
    pub(super) fn peer(&self) -> Option<usize> {
        match self {
            Later::Pool(_) | Later::Incoming { .. } => None,
            Later::Send { peer, .. } | Later::Write { peer, .. } | Later::Read { peer, .. } => {
                Some(*peer)
            }
        }
    }
}

/// What one attempt to post gave.
pub(super) enum Posted {
    Done,
    /// The provider said "try again" (or that the peer's address is not usable
    /// yet): the post, back.
    Again(Later),
    /// The provider refused it: the post (not in flight), and why.
    Failed(Later, Error),
}

/// How the transport treats a post that the provider refused with `code`
/// (a positive `FI_E*` value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// `-FI_EAGAIN`: resources are busy; post again after reading completions.
    Again,
    /// `-FI_EADDRNOTAVAIL` on a send, write or read to a peer: the provider cannot
    /// use the peer's address *yet*. `ofi_rxm` returns it from the operation when
    /// opening the connection to the peer fails that way (the tcp provider's
    /// `connect()` gives `EADDRNOTAVAIL` when no local port is free, e.g. under
    /// many short-lived connections of parallel jobs, until sockets in TIME_WAIT
    /// expire), and it keeps the connection idle, so that the next post tries to
    /// connect again. Posted again like `Again`, until the transport's timeout.
    Unresolved,
    /// Anything else: the operation fails with the provider's error.
    Fatal,
}

/// Classifies a refused post (`to_peer`: a send, write or read to one peer).
pub(super) fn refusal(code: i32, to_peer: bool) -> Refusal {
    match code {
        FI_EAGAIN => Refusal::Again,
        FI_EADDRNOTAVAIL if to_peer => Refusal::Unresolved,
        _ => Refusal::Fatal,
    }
}

/// Since when each peer's address has been refused (`-FI_EADDRNOTAVAIL`) without a
/// post to it succeeding in between: bounds the retries by the transport's timeout.
pub(super) struct Unresolved {
    pub(super) since: Vec<Option<Instant>>,
}

impl Unresolved {
    pub(super) fn new(peers: usize) -> Unresolved {
        Unresolved {
            since: vec![None; peers],
        }
    }

    /// A post to `peer` was refused at `now`: whether to post again (false once the
    /// refusals have lasted longer than `timeout`, which also forgets them).
    pub(super) fn refused(&mut self, peer: usize, now: Instant, timeout: Duration) -> bool {
        let since = *self.since[peer].get_or_insert(now);
        if now.saturating_duration_since(since) <= timeout {
            return true;
        }
        self.since[peer] = None;
        false
    }

    /// A post to `peer` succeeded: its address works.
    pub(super) fn resolved(&mut self, peer: usize) {
        self.since[peer] = None;
    }
}

/// A put's state until its last part completed.
pub(super) struct PutState {
    pub(super) src: Source,
    pub(super) parts_left: u8,
    pub(super) error: Option<Error>,
    /// The tail write (peer, address, key), issued when the body completed (when
    /// the provider does not order writes of the body's size).
    pub(super) tail: Option<(usize, u64, u64)>,
}

/// One message in a peer's delivery order: arrived (tag, data), or announced and
/// still moving (seq, tag).
pub(super) enum Slot {
    Ready(u64, Vec<u8>),
    Waiting(u32, u64),
}

pub(super) struct Mr {
    pub(super) mr: *mut fid_mr,
    pub(super) region: Weak<crate::region::RegionInner>,
}

/// Everything that calls into libfabric, behind one lock (`FI_THREAD_DOMAIN`).
pub(super) struct Ep {
    pub(super) ep: Endpoint,
    pub(super) fi_addr: Vec<u64>,
    pub(super) inflight: HashMap<usize, (Ctx, InFlight)>,
    pub(super) pool: Vec<Vec<u8>>,
    pub(super) puts: HashMap<u64, PutState>,
    pub(super) mrs: HashMap<u32, Mr>,
    pub(super) order: Vec<VecDeque<Slot>>,
    pub(super) tx_seq: Vec<u32>,
    /// Receives the provider refused with "try again": posted, in order, on the
    /// next read of completions (by a caller or the progress thread).
    pub(super) later_rx: VecDeque<Later>,
    /// Per peer: sends, writes and reads the provider refused with "try again",
    /// posted in order on the next read of completions. Nothing waits for the
    /// provider with the lock held, so an idle peer only delays its own operations
    /// (their waits are bounded by the caller's timeout) and never makes posting
    /// fail.
    pub(super) later_tx: Vec<VecDeque<Later>>,
    /// Peers whose address the provider refuses for now (see [`Refusal::Unresolved`]).
    pub(super) unresolved: Unresolved,
    /// Reports gathered while posting (the provider said "try again" and we read
    /// completions); handed to `Inner::report` after the lock is released.
    pub(super) deferred: Vec<Done>,
}

// SAFETY: the raw pointers are libfabric objects and registrations used only under
// the `Inner::ep` lock (FI_THREAD_DOMAIN: one caller at a time), and buffers this
// struct owns.
unsafe impl Send for Ep {}

/// A completion to report once the lock is released (reporting may drop a region,
/// whose deregistration takes the lock).
pub(super) enum Done {
    Complete(OpId, Result<Payload>),
    Lost(usize, OfiError),
    /// The peer is lost for the reason given.
    LostWith(usize, String),
    Drop(Box<dyn std::any::Any + Send>),
}

pub(super) struct Peer {
    pub(super) pid: u32,
    pub(super) pidfd: Option<OwnedFd>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The provider's "address not available" on an operation to a peer is posted
    /// again (it used to fail the operation at once: a put right after the job
    /// started, under load); elsewhere it stays an error.
    #[test]
    fn address_not_available_is_retried_for_posts_to_a_peer() {
        assert_eq!(refusal(FI_EAGAIN, true), Refusal::Again);
        assert_eq!(refusal(FI_EAGAIN, false), Refusal::Again);
        assert_eq!(refusal(FI_EADDRNOTAVAIL, true), Refusal::Unresolved);
        assert_eq!(refusal(FI_EADDRNOTAVAIL, false), Refusal::Fatal);
        assert_eq!(refusal(libc::EINVAL, true), Refusal::Fatal);
        assert_eq!(refusal(libc::ECONNREFUSED, true), Refusal::Fatal);
    }

    /// Retries of an unresolved address last the timeout, counted from the first
    /// refusal since the last success, and no longer.
    #[test]
    fn unresolved_retries_are_bounded_by_the_timeout() {
        let timeout = Duration::from_secs(2);
        let t0 = Instant::now();
        let mut u = Unresolved::new(3);
        assert!(u.refused(1, t0, timeout));
        assert!(u.refused(1, t0 + Duration::from_secs(1), timeout));
        assert!(
            u.refused(2, t0 + Duration::from_secs(2), timeout),
            "per peer"
        );
        assert!(u.refused(1, t0 + timeout, timeout));
        assert!(!u.refused(1, t0 + timeout + Duration::from_millis(1), timeout));
        // After giving up, and after a success, a new refusal starts a new period.
        assert!(u.refused(1, t0 + Duration::from_secs(10), timeout));
        u.resolved(2);
        assert!(u.refused(2, t0 + Duration::from_secs(10), timeout));
        assert!(u.refused(2, t0 + Duration::from_secs(11), timeout));
    }
}
