//! The shared-memory backend: peers on the same node.
//!
//! - **Regions** are memfd mappings (see [`crate::Region`]); a peer opens
//!   `/proc/<pid>/fd/<fd>` of the owner (same user, same node) once, caches the mapping,
//!   and every put/get is one `memcpy` into/out of it (single copy, zero-copy from the
//!   user's buffer). The key in the region's header page is re-checked on every access,
//!   so a deregistered region gives [`Error::BadKey`] and never a write into memory
//!   that the owner reuses.
//! - **Messages** go through one SPSC ring per ordered pair of ranks (see `ring.rs`),
//!   living in the receiver's segment (a memfd mapped by each sender). Messages up to
//!   [`EAGER_MAX`] are one record; larger ones are split into chunks that the sender
//!   pushes as room frees, pipelined with the receiver's copies.
//! - **Liveness** of a peer is read from a pidfd; before a lost peer is reported, what
//!   it already wrote into the ring is drained, so messages sent before exit arrive.

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::sync::Exclusive;

use hpc_runtime::World;

use crate::completion::{OpId, OpKind, Payload, Shared, Sink, Source};
use crate::error::{check_bounds, Error, Result};
use crate::region::{copy_in_order, Mapping, Region, RemoteKey};
use crate::ring::{Consumer, Probe, Producer, CTL};
use crate::{Backend, BackendKind};

/// Bytes of one ring's data area.
pub const RING_BYTES: usize = 1 << 20;
const SLOT: usize = CTL + RING_BYTES;
/// Largest message sent as a single ring record.
pub const EAGER_MAX: usize = 16 * 1024;
const CHUNK: usize = RING_BYTES / 8;
const MAX_MESSAGE: u64 = 1 << 36;

const EAGER: u32 = 1;
const FRAG_FIRST: u32 = 2;
const FRAG_MORE: u32 = 3;

struct OutMsg {
    op: OpId,
    tag: u64,
    data: Vec<u8>,
    sent: usize,
    started: bool,
}

struct Tx {
    prod: Producer,
    queue: VecDeque<OutMsg>,
}

struct Partial {
    tag: u64,
    data: Vec<u8>,
    total: usize,
}

struct Rx {
    cons: Consumer,
    partial: Option<Partial>,
}

struct Peer {
    rank: usize,
    pid: u32,
    pidfd: Option<OwnedFd>,
    _segment: Arc<Mapping>,
    /// The sending end: claimed with one atomic per use (see [`Exclusive`]); in the
    /// common case only the thread that sends uses it.
    tx: Exclusive<Tx>,
    /// The receiving end, claimed the same way by whichever thread polls.
    rx: Exclusive<Rx>,
    /// Lock-free check of the rx ring (kept valid by `_segment` of the transport).
    probe: Probe,
    /// Whether `tx.queue` holds messages waiting for ring space.
    backlog: AtomicBool,
}

/// The shared-memory backend (one per transport; serves the same-node peers).
pub(crate) struct Shm {
    shared: Arc<Shared>,
    peers: Vec<Option<Peer>>,
    /// Peer ranks served, for the progress loop.
    order: Vec<usize>,
    _segment: Region,
    maps: Mutex<HashMap<(u32, u32, u64), Arc<Mapping>>>,
}

fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

impl Shm {
    /// Collective: every rank of `world` calls it (with its own `peers`, possibly
    /// empty), in the same order relative to the other collectives. `lists[r]` are the
    /// shm peers of rank r, sorted.
    pub(crate) fn new(shared: Arc<Shared>, world: &World, lists: &[Vec<usize>]) -> Result<Shm> {
        let me = shared.rank;
        let mine = &lists[me];
        let segment = Region::new(me, u32::MAX, mine.len().max(1) * SLOT)?;
        for slot in 0..mine.len() {
            let salt = hpc_runtime::random_u64()?;
            // SAFETY: slot `slot` of our fresh (zeroed) segment, 64-byte aligned, not
            // shared with anyone before the allgather below.
            unsafe { crate::ring::init(segment.as_ptr().add(slot * SLOT), RING_BYTES, salt) };
        }
        let exchanged = world.allgather(&segment.remote_key().to_bytes())?;
        let mut peers: Vec<Option<Peer>> = (0..shared.size).map(|_| None).collect();
        for (my_slot, &p) in mine.iter().enumerate() {
            let key = RemoteKey::from_bytes(&exchanged[p])?;
            let map = Arc::new(Mapping::open_remote(key.pid, key.fd, key.len)?);
            if map.key_slot().load(Ordering::Acquire) != key.key {
                return Err(Error::BadKey(format!("shm segment of rank {p}")));
            }
            let their_slot = lists[p].iter().position(|&r| r == me).ok_or_else(|| {
                Error::Protocol(format!("rank {p} does not list rank {me} as an shm peer"))
            })?;
            // SAFETY: slot `their_slot` of p's segment is the ring p reads from us; the
            // mapping (64-byte aligned: page + multiple of SLOT which is a multiple of
            // 64) is kept alive by `_segment` in the Peer; we are its only producer.
            let prod = unsafe { Producer::new(map.data().add(their_slot * SLOT), RING_BYTES) };
            // SAFETY: our own segment's slot for p, kept alive by `self._segment`; we are
            // its only consumer.
            let cons = unsafe { Consumer::new(segment.as_ptr().add(my_slot * SLOT), RING_BYTES) };
            let probe = cons.probe();
            peers[p] = Some(Peer {
                probe,
                backlog: AtomicBool::new(false),
                rank: p,
                pid: key.pid,
                pidfd: pidfd_open(key.pid),
                _segment: map,
                tx: Exclusive::new(Tx {
                    prod,
                    queue: VecDeque::new(),
                }),
                rx: Exclusive::new(Rx {
                    cons,
                    partial: None,
                }),
            });
        }
        // Everyone has mapped every segment it needs: nobody needs the descriptors by
        // path any more (memfds have no name to unlink).
        world.barrier()?;
        Ok(Shm {
            shared,
            order: mine.clone(),
            peers,
            _segment: segment,
            maps: Mutex::new(HashMap::new()),
        })
    }

    fn peer(&self, rank: usize) -> Result<&Peer> {
        self.peers
            .get(rank)
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                Error::unavailable("shm", format!("rank {rank} is not a shared-memory peer"))
            })
    }

    /// The mapping of a remote region, checked against the key.
    fn map(&self, peer: &Peer, key: &RemoteKey) -> Result<Arc<Mapping>> {
        if key.pid != peer.pid {
            return Err(Error::BadKey(format!(
                "key names process {} but rank {} is process {}",
                key.pid, peer.rank, peer.pid
            )));
        }
        let id = (key.rank, key.id, key.key);
        let mut maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        let m = match maps.get(&id) {
            Some(m) => m.clone(),
            None => {
                let m = Arc::new(Mapping::open_remote(key.pid, key.fd, key.len)?);
                maps.insert(id, m.clone());
                m
            }
        };
        if m.key_slot().load(Ordering::Acquire) != key.key || m.data_capacity() < key.len as usize {
            maps.remove(&id);
            return Err(Error::BadKey(format!(
                "region {} of rank {} was deregistered (stale key)",
                key.id, key.rank
            )));
        }
        Ok(m)
    }

    fn push_pending(&self, peer: usize, tx: &mut Tx) {
        while let Some(m) = tx.queue.front_mut() {
            let max = tx.prod.max_payload().min(CHUNK);
            if m.data.len() <= EAGER_MAX {
                if !tx.prod.try_push(EAGER, m.tag, &[&m.data]) {
                    return;
                }
            } else {
                loop {
                    if m.started && m.sent == m.data.len() {
                        break;
                    }
                    let ok = if !m.started {
                        let total = (m.data.len() as u64).to_le_bytes();
                        let n = (max - 8).min(m.data.len());
                        let ok = tx.prod.try_push(FRAG_FIRST, m.tag, &[&total, &m.data[..n]]);
                        if ok {
                            m.started = true;
                            m.sent = n;
                        }
                        ok
                    } else {
                        let n = max.min(m.data.len() - m.sent);
                        let ok = tx
                            .prod
                            .try_push(FRAG_MORE, m.tag, &[&m.data[m.sent..m.sent + n]]);
                        if ok {
                            m.sent += n;
                        }
                        ok
                    };
                    if !ok {
                        return;
                    }
                }
            }
            let m = tx.queue.pop_front().expect("front exists");
            let _ = peer;
            self.shared.complete(m.op, Ok(Payload::Bytes(m.data)));
        }
    }

    fn drain_rx(&self, peer: &Peer, rx: &mut Rx) -> Result<()> {
        for _ in 0..64 {
            let mut err = None;
            let mut done: Option<(u64, Vec<u8>)> = None;
            let partial = &mut rx.partial;
            let got = rx.cons.pop(|kind, tag, rec| match kind {
                EAGER if partial.is_none() => done = Some((tag, rec.to_vec())),
                FRAG_FIRST if partial.is_none() && rec.len() >= 8 => {
                    let mut t = [0u8; 8];
                    rec.copy_to(0, &mut t);
                    let total = u64::from_le_bytes(t);
                    if total > MAX_MESSAGE || (rec.len() - 8) as u64 > total {
                        err = Some(format!("fragmented message of {total} bytes"));
                        return;
                    }
                    // Room as the peer announces it, bounded by the memory
                    // here (`MAX_MESSAGE` is 64 GiB whatever the host has).
                    let mut data = match crate::error::room_for_claim(peer.rank, total) {
                        Ok(v) => v,
                        Err(e) => {
                            err = Some(e.to_string());
                            return;
                        }
                    };
                    data.resize(rec.len() - 8, 0);
                    rec.copy_to(8, &mut data);
                    *partial = Some(Partial {
                        tag,
                        data,
                        total: total as usize,
                    });
                }
                FRAG_MORE => match partial {
                    Some(p) if p.tag == tag && p.data.len() + rec.len() <= p.total => {
                        let at = p.data.len();
                        p.data.resize(at + rec.len(), 0);
                        rec.copy_to(0, &mut p.data[at..]);
                    }
                    _ => err = Some("unexpected fragment".into()),
                },
                k => err = Some(format!("unexpected record kind {k}")),
            })?;
            if let Some(e) = err {
                return Err(Error::Protocol(format!("shm from rank {}: {e}", peer.rank)));
            }
            if let Some((tag, data)) = done {
                self.shared.deliver(peer.rank, tag, data);
            }
            if matches!(&rx.partial, Some(p) if p.data.len() == p.total) {
                let p = rx.partial.take().expect("checked");
                self.shared.deliver(peer.rank, p.tag, p.data);
            }
            if !got {
                break;
            }
        }
        Ok(())
    }

    fn progress_peer(&self, p: &Peer) -> Result<()> {
        if p.probe.has_data() {
            self.progress_rx(p)?;
        }
        if p.backlog.load(Ordering::Acquire) {
            p.tx.try_with(|tx| {
                self.push_pending(p.rank, tx);
                p.backlog.store(!tx.queue.is_empty(), Ordering::Release);
            });
        }
        Ok(())
    }

    /// A put is one copy into the peer's mapping, done before it returns.
    fn put_now(&self, src: Source, dst: &RemoteKey, offset: u64) -> Result<Payload> {
        let peer = self.peer(dst.rank())?;
        check_bounds(offset, src.len() as u64, dst.len)?;
        let m = self.map(peer, dst)?;
        // SAFETY: offset + len <= key.len <= mapping capacity (checked in `map` and
        // above); the mapping stays alive in `m`; source and destination are different
        // mappings/allocations (a put into one's own region goes through loopback).
        unsafe { copy_in_order(m.data().add(offset as usize), src.as_ptr(), src.len()) };
        Ok(src.into_payload())
    }

    fn progress_rx(&self, p: &Peer) -> Result<()> {
        match p.rx.try_with(|rx| self.drain_rx(p, rx)) {
            Some(Err(e)) => {
                self.shared
                    .fail_peer_by(p.rank, &e.to_string(), Some(e.clone()));
                Err(e)
            }
            // Drained, or another thread is draining this ring right now.
            Some(Ok(())) | None => Ok(()),
        }
    }
}

impl Backend for Shm {
    fn kind(&self) -> BackendKind {
        BackendKind::Shm
    }

    fn put(&self, op: OpId, src: Source, dst: &RemoteKey, offset: u64) -> Result<()> {
        let done = self.put_now(src, dst, offset)?;
        self.shared.complete(op, Ok(done));
        Ok(())
    }

    fn try_put_now(
        &self,
        src: Source,
        dst: &RemoteKey,
        offset: u64,
    ) -> Result<std::result::Result<Payload, Source>> {
        self.put_now(src, dst, offset).map(Ok)
    }

    fn get(&self, op: OpId, src: &RemoteKey, offset: u64, dst: Sink) -> Result<()> {
        let peer = self.peer(src.rank())?;
        check_bounds(offset, dst.len() as u64, src.len)?;
        let m = self.map(peer, src)?;
        let payload = dst.fill(|ptr, len| {
            // SAFETY: in bounds of the remote mapping (checked above) and of the sink
            // (`Sink::fill` passes its own valid pointer); distinct memory.
            unsafe { copy_in_order(ptr, m.data().add(offset as usize), len) };
            Ok(())
        })?;
        self.shared.complete(op, Ok(payload));
        Ok(())
    }

    fn send(&self, op: OpId, peer: usize, tag: u64, data: Vec<u8>) -> Result<()> {
        let p = self.peer(peer)?;
        if data.len() as u64 > MAX_MESSAGE {
            return Err(Error::InvalidArgument(format!(
                "message of {} bytes",
                data.len()
            )));
        }
        // (The transport tried `try_send_now` first: this is the queued path, whose
        // messages go out, in order, as the ring has room.)
        p.tx.with(|tx| {
            tx.queue.push_back(OutMsg {
                op,
                tag,
                data,
                sent: 0,
                started: false,
            });
            self.push_pending(peer, tx);
            p.backlog.store(!tx.queue.is_empty(), Ordering::Release);
        });
        Ok(())
    }

    fn try_send_now(&self, peer: usize, tag: u64, data: Vec<u8>) -> crate::SentNow {
        let Ok(p) = self.peer(peer) else {
            return Err(data);
        };
        if data.len() > EAGER_MAX {
            return Err(data);
        }
        // Only with nothing queued, so that messages keep their order; a sender that
        // finds the ring's end in use by another thread takes the queued path.
        let sent =
            p.tx.try_with(|tx| tx.queue.is_empty() && tx.prod.try_push(EAGER, tag, &[&data]));
        if sent == Some(true) {
            Ok(data)
        } else {
            Err(data)
        }
    }

    fn progress(&self) -> Result<()> {
        for &r in &self.order {
            if let Some(p) = &self.peers[r] {
                self.progress_peer(p)?;
            }
        }
        Ok(())
    }

    fn check_peer(&self, peer: usize) -> Result<()> {
        let p = self.peer(peer)?;
        let gone = match &p.pidfd {
            Some(fd) => {
                let mut pfd = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
                let now = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                rustix::event::poll(&mut pfd, Some(&now)).is_ok_and(|n| n > 0)
            }
            // Signal 0 only checks for existence.
            None => i32::try_from(p.pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
                .is_some_and(|pid| rustix::process::test_kill_process(pid).is_err()),
        };
        if gone {
            // Deliver what it wrote before exiting.
            self.progress_peer(p)?;
            let cause = format!("process {} exited", p.pid);
            self.shared.fail_peer(peer, &cause);
            return Err(self
                .shared
                .is_lost(peer)
                .unwrap_or_else(|| Error::lost(peer, cause, None::<Error>)));
        }
        Ok(())
    }

    fn wants_progress(&self) -> bool {
        true
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Shm>();
    let _ = OpKind::Put;
}
