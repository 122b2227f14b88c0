//! Progress: reading completions (by callers or the progress thread), posting
//! what the provider refused before, and reporting completions.

use std::collections::VecDeque;
use std::ffi::{c_char, c_void, CStr};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::{MutexGuard, Weak};
use std::time::{Duration, Instant};

use super::backend::*;
use super::ffi::*;
use super::ops::*;
use super::*;
use crate::completion::{OpId, Payload};
use crate::region::RemoteKey;

/// Whether a completion error means the peer (or the path to it) is gone.
pub(super) fn is_connection_error(code: i32) -> bool {
    matches!(
        code,
        libc::ECONNRESET
            | libc::ECONNREFUSED
            | libc::ECONNABORTED
            | libc::EHOSTUNREACH
            | libc::ENOTCONN
            | libc::ETIMEDOUT
            | libc::EPIPE
            | libc::EIO
    )
}

/// Reads completions when no caller does: polls while there is traffic, then naps
/// (up to 100 µs), and leaves the endpoint to callers that progress themselves.
pub(super) fn progress_thread(weak: Weak<Inner>) {
    let mut idle = 0u32;
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if inner.closing.load(Ordering::Acquire) {
            return;
        }
        let now = inner.epoch.elapsed().as_nanos() as u64;
        let busy_caller =
            now.saturating_sub(inner.caller_progress.load(Ordering::Relaxed)) < 200_000;
        let mut got = 0;
        if !busy_caller {
            if let Ok(mut ep) = inner.ep.try_lock() {
                let mut done = Vec::new();
                got = inner.drain(&mut ep, &mut done);
                done.append(&mut ep.deferred);
                drop(ep);
                inner.report(done);
            }
        }
        drop(inner);
        if got > 0 {
            idle = 0;
            continue;
        }
        idle = idle.saturating_add(1);
        if idle < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros((idle as u64).min(100)));
        }
    }
}

impl Inner {
    pub(super) fn lock(&self) -> MutexGuard<'_, Ep> {
        self.ep.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn post_pool(&self, ep: &mut Ep, i: usize) -> Result<()> {
        let ctx = new_ctx();
        let key = ctx_key(&ctx);
        let buf = ep.pool[i].as_mut_ptr();
        let len = ep.pool[i].len();
        let e = ep.ep.0;
        // SAFETY: the buffer lives in `ep.pool` (never resized) until the endpoint is
        // closed; the context box is kept in `inflight` until the completion.
        let post = || unsafe {
            hpc_ofi_trecv(
                e,
                buf.cast(),
                len,
                u64::MAX, // FI_ADDR_UNSPEC: any source
                0,
                EAGER_IGNORE,
                key as *mut c_void,
            )
        };
        ep.inflight.insert(key, (ctx, InFlight::Pool(i)));
        self.retry(ep, "fi_trecv", None, post).inspect_err(|_| {
            ep.inflight.remove(&key);
        })
    }

    /// Calls `post` until the provider takes it, reading completions while it says
    /// "try again" (their reports are deferred to when the lock is released). Gives
    /// up when `peer` is found gone (checked every millisecond) or after the job's
    /// timeout.
    pub(super) fn retry(
        &self,
        ep: &mut Ep,
        call: &'static str,
        peer: Option<usize>,
        mut post: impl FnMut() -> isize,
    ) -> Result<()> {
        let start = Instant::now();
        let mut checked = start;
        loop {
            let rc = post();
            if rc == 0 {
                return Ok(());
            }
            if rc as i32 != -FI_EAGAIN {
                return Err(Error::library(call, ofi_error(call, rc as i64)));
            }
            let mut done = Vec::new();
            self.drain(ep, &mut done);
            ep.deferred.append(&mut done);
            if checked.elapsed() >= Duration::from_millis(1) {
                checked = Instant::now();
                if let Some(p) = peer {
                    if let Some(e) = self.gone(p) {
                        return Err(e);
                    }
                }
                if start.elapsed() > self.timeout {
                    return Err(Error::Timeout {
                        after: self.timeout,
                        what: format!(
                            "{call}: the {} provider kept refusing{}",
                            self.provider,
                            peer.map(|p| format!(" (to rank {p})")).unwrap_or_default()
                        ),
                    });
                }
            }
        }
    }

    /// `PeerLost` if `peer` is known lost or its process (on this node) exited.
    pub(super) fn gone(&self, peer: usize) -> Option<Error> {
        if let Some(e) = self.shared.is_lost(peer) {
            return Some(e);
        }
        let p = self.peers.get(peer)?.as_ref()?;
        let fd = p.pidfd.as_ref()?;
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        if unsafe { libc::poll(&mut pfd, 1, 0) } > 0 {
            let cause = format!("process {} exited", p.pid);
            self.shared.fail_peer(peer, &cause);
            return Some(
                self.shared
                    .is_lost(peer)
                    .unwrap_or_else(|| Error::lost(peer, cause, None::<Error>)),
            );
        }
        None
    }

    /// Reads every available completion (success and error) into `done`; returns
    /// how many there were.
    pub(super) fn drain(&self, ep: &mut Ep, done: &mut Vec<Done>) -> usize {
        let mut total = 0;
        loop {
            self.flush_later(ep, done);
            let mut cqe = [Cqe {
                ctx: std::ptr::null_mut(),
                flags: 0,
                len: 0,
                tag: 0,
            }; 16];
            // SAFETY: `cqe` has room for 16 entries; the endpoint is open.
            let n = unsafe { hpc_ofi_cq_read(ep.ep.0, cqe.as_mut_ptr(), cqe.len()) };
            if n == -(FI_EAVAIL as isize) {
                total += 1;
                self.read_error(ep, done);
                continue;
            }
            if n <= 0 {
                if n < 0 {
                    tracing::warn!(error = %strerror(-n as i32), "ofi: fi_cq_read");
                }
                return total;
            }
            total += n as usize;
            for c in &cqe[..n as usize] {
                self.completed(ep, c, done);
            }
        }
    }

    pub(super) fn read_error(&self, ep: &mut Ep, done: &mut Vec<Done>) {
        let mut ctx = std::ptr::null_mut();
        let (mut err, mut perr) = (0i32, 0i32);
        let mut msg = [0 as c_char; 256];
        // SAFETY: out-pointers valid, `msg` writable for its length.
        let n = unsafe {
            hpc_ofi_cq_readerr(
                ep.ep.0,
                &mut ctx,
                &mut err,
                &mut perr,
                msg.as_mut_ptr(),
                msg.len(),
            )
        };
        if n != 1 {
            return;
        }
        // SAFETY: NUL-terminated by the shim.
        let text = unsafe { CStr::from_ptr(msg.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let Some((_ctx, what)) = ep.inflight.remove(&(ctx as usize)) else {
            tracing::warn!(err, text, "ofi: error completion of an unknown operation");
            return;
        };
        let e = OfiError {
            call: "completion",
            code: err,
            text: if text.is_empty() { strerror(err) } else { text },
        };
        let peer_of = |p: usize| {
            if is_connection_error(err) {
                Some(p)
            } else {
                None
            }
        };
        match what {
            InFlight::Pool(i) => {
                if err != FI_ECANCELED && !self.closing.load(Ordering::Acquire) {
                    tracing::warn!(error = %e, "ofi: pre-posted receive failed; reposting");
                    self.later(ep, Later::Pool(i), done);
                }
            }
            InFlight::Frame { op, peer, data, .. } => {
                if let Some(p) = peer_of(peer) {
                    done.push(Done::Lost(p, e.clone()));
                }
                if let Some(op) = op {
                    done.push(Done::Complete(op, Err(Error::library("fi_tsend", e))));
                }
                if let Some(d) = data {
                    done.push(Done::Drop(Box::new(d)));
                }
            }
            InFlight::Data { op, peer, data } => {
                if let Some(p) = peer_of(peer) {
                    done.push(Done::Lost(p, e.clone()));
                }
                done.push(Done::Complete(op, Err(Error::library("fi_tsend", e))));
                done.push(Done::Drop(Box::new(data)));
            }
            InFlight::Incoming { peer, .. } => {
                done.push(Done::Lost(peer, e));
            }
            InFlight::Put { op, peer } => {
                if let Some(p) = peer_of(peer) {
                    done.push(Done::Lost(p, e.clone()));
                }
                let err = if is_connection_error(err) {
                    Error::library("fi_write", e)
                } else {
                    Error::BadKey(format!("put rejected by rank {peer}'s provider: {e}"))
                };
                self.put_part_done(ep, op, Some(err), done);
            }
            InFlight::Get { op, peer, sink } => {
                if let Some(p) = peer_of(peer) {
                    done.push(Done::Lost(p, e.clone()));
                }
                let err = if is_connection_error(err) {
                    Error::library("fi_read", e)
                } else {
                    Error::BadKey(format!("get rejected by rank {peer}'s provider: {e}"))
                };
                done.push(Done::Complete(op, Err(err)));
                if let GetSink::Region(r) = sink {
                    done.push(Done::Drop(Box::new(r)));
                }
            }
        }
    }

    pub(super) fn completed(&self, ep: &mut Ep, c: &Cqe, done: &mut Vec<Done>) {
        let Some((_ctx, what)) = ep.inflight.remove(&(c.ctx as usize)) else {
            tracing::warn!("ofi: completion of an unknown operation");
            return;
        };
        match what {
            InFlight::Pool(i) => {
                let peer = tag_source(c.tag);
                let len = (c.len as usize).min(ep.pool[i].len());
                let msg = MsgHeader::decode(&ep.pool[i][..len]);
                match msg {
                    Ok(h) if peer < self.shared.size && self.peers[peer].is_some() => {
                        if h.kind == EAGER {
                            let data = ep.pool[i][HEADER_BYTES..len].to_vec();
                            ep.order[peer].push_back(Slot::Ready(h.tag, data));
                        } else {
                            self.post_incoming(ep, peer, h, done);
                        }
                        self.deliver_ready(ep, peer);
                    }
                    Ok(_) => tracing::warn!(peer, "ofi: message from a rank that is not a peer"),
                    Err(e) => {
                        tracing::warn!(peer, error = %e, "ofi: malformed message");
                        if peer < self.shared.size {
                            done.push(Done::Lost(
                                peer,
                                OfiError {
                                    call: "receive",
                                    code: libc::EPROTO,
                                    text: e.to_string(),
                                },
                            ));
                        }
                    }
                }
                self.later(ep, Later::Pool(i), done);
            }
            InFlight::Frame { op, data, .. } => {
                if let (Some(op), Some(d)) = (op, data) {
                    done.push(Done::Complete(op, Ok(Payload::Bytes(d))));
                }
            }
            InFlight::Data { op, data, .. } => {
                done.push(Done::Complete(op, Ok(Payload::Bytes(data))));
            }
            InFlight::Incoming { peer, seq, buf } => {
                if let Some(slot) = ep.order[peer]
                    .iter_mut()
                    .find(|s| matches!(s, Slot::Waiting(q, _) if *q == seq))
                {
                    if let Slot::Waiting(_, tag) = *slot {
                        *slot = Slot::Ready(tag, buf);
                    }
                }
                self.deliver_ready(ep, peer);
            }
            InFlight::Put { op, .. } => self.put_part_done(ep, op, None, done),
            InFlight::Get { op, sink, .. } => {
                let payload = match sink {
                    GetSink::Bytes(v) => Payload::Bytes(v),
                    GetSink::Region(r) => Payload::Region(r),
                };
                done.push(Done::Complete(op, Ok(payload)));
            }
        }
    }

    /// An announcement arrived: post the receive of its data (its place in the
    /// delivery order is taken now).
    pub(super) fn post_incoming(
        &self,
        ep: &mut Ep,
        peer: usize,
        h: MsgHeader,
        done: &mut Vec<Done>,
    ) {
        // Room for what the peer announces, bounded by the memory here: up
        // to `MAX_MESSAGE` (64 GiB) was allocated whatever the host had, and
        // an allocation it could not give aborted the process.
        if let Err(e) = crate::error::check_claim(peer, h.len) {
            done.push(Done::LostWith(peer, e.to_string()));
            return;
        }
        ep.order[peer].push_back(Slot::Waiting(h.seq, h.tag));
        let buf = vec![0u8; h.len as usize];
        self.later(
            ep,
            Later::Incoming {
                peer,
                seq: h.seq,
                buf,
            },
            done,
        );
    }

    /// The queue `l` waits in when the provider refuses it.
    pub(super) fn queue_of<'a>(ep: &'a mut Ep, l: &Later) -> &'a mut VecDeque<Later> {
        match l.peer() {
            None => &mut ep.later_rx,
            Some(p) => &mut ep.later_tx[p],
        }
    }

    /// Posts `l` now if nothing waits before it in its queue and the provider takes
    /// it; else queues it (in order) for the next read of completions. A refusal is
    /// reported into `done` as the operation's failure.
    pub(super) fn later(&self, ep: &mut Ep, l: Later, done: &mut Vec<Done>) {
        if let Err((l, e)) = self.submit(ep, l) {
            self.fail_later(ep, l, e, done);
        }
    }

    /// Like [`Inner::later`], handing a refusal back (the post is not in flight) so
    /// that the call that posts it can fail instead.
    #[allow(clippy::result_large_err)]
    pub(super) fn submit(&self, ep: &mut Ep, l: Later) -> std::result::Result<(), (Later, Error)> {
        if !Self::queue_of(ep, &l).is_empty() {
            Self::queue_of(ep, &l).push_back(l);
            return Ok(());
        }
        match self.post_once(ep, l) {
            Posted::Done => Ok(()),
            Posted::Again(l) => {
                Self::queue_of(ep, &l).push_back(l);
                Ok(())
            }
            Posted::Failed(l, e) => Err((l, e)),
        }
    }

    /// Posts what waits, in order per queue, until the provider says "try again".
    /// What waits for a lost peer fails with its `PeerLost`.
    pub(super) fn flush_later(&self, ep: &mut Ep, done: &mut Vec<Done>) {
        while let Some(l) = ep.later_rx.pop_front() {
            match self.post_once(ep, l) {
                Posted::Done => {}
                Posted::Again(l) => {
                    ep.later_rx.push_front(l);
                    break;
                }
                Posted::Failed(l, e) => self.fail_later(ep, l, e, done),
            }
        }
        for peer in 0..ep.later_tx.len() {
            if ep.later_tx[peer].is_empty() {
                continue;
            }
            if let Some(lost) = self.shared.is_lost(peer) {
                for l in std::mem::take(&mut ep.later_tx[peer]) {
                    self.fail_later(ep, l, lost.clone(), done);
                }
                continue;
            }
            while let Some(l) = ep.later_tx[peer].pop_front() {
                match self.post_once(ep, l) {
                    Posted::Done => {}
                    Posted::Again(l) => {
                        ep.later_tx[peer].push_front(l);
                        break;
                    }
                    Posted::Failed(l, e) => self.fail_later(ep, l, e, done),
                }
            }
        }
    }

    /// Ends the operation of a post that will not be made, with `err`.
    pub(super) fn fail_later(&self, ep: &mut Ep, l: Later, err: Error, done: &mut Vec<Done>) {
        match l {
            Later::Pool(_) => tracing::warn!(error = %err, "ofi: cannot repost a receive buffer"),
            Later::Incoming { peer, .. } => {
                let cause = format!("the receive of announced data failed: {err}");
                done.push(Done::LostWith(peer, cause));
            }
            Later::Send { what, .. } => match what {
                InFlight::Frame { op, data, .. } => {
                    if let Some(op) = op {
                        done.push(Done::Complete(op, Err(err)));
                    }
                    if let Some(d) = data {
                        done.push(Done::Drop(Box::new(d)));
                    }
                }
                InFlight::Data { op, data, .. } => {
                    done.push(Done::Complete(op, Err(err)));
                    done.push(Done::Drop(Box::new(data)));
                }
                _ => {}
            },
            Later::Write { op, .. } => self.put_part_done(ep, op, Some(err), done),
            Later::Read { op, sink, .. } => {
                done.push(Done::Complete(op, Err(err)));
                if let GetSink::Region(r) = sink {
                    done.push(Done::Drop(Box::new(r)));
                }
            }
        }
    }

    /// One attempt to post `l`; once posted, it is in `inflight` until its
    /// completion.
    pub(super) fn post_once(&self, ep: &mut Ep, l: Later) -> Posted {
        let e = ep.ep.0;
        let ctx = new_ctx();
        let key = ctx_key(&ctx);
        let (rc, call) = match &l {
            Later::Pool(i) => {
                let b = &mut ep.pool[*i];
                // SAFETY: the buffer lives in `ep.pool` (never resized) until the
                // endpoint is closed; the context is kept in `inflight` if posted.
                let rc = unsafe {
                    hpc_ofi_trecv(
                        e,
                        b.as_mut_ptr().cast(),
                        b.len(),
                        u64::MAX,
                        0,
                        EAGER_IGNORE,
                        key as *mut c_void,
                    )
                };
                (rc, "fi_trecv")
            }
            Later::Incoming { peer, seq, buf } => {
                let tag = data_tag(*peer, *seq);
                // SAFETY: the vector's heap memory moves into `inflight` with it (its
                // data does not move) and stays there until the completion.
                let rc = unsafe {
                    hpc_ofi_trecv(
                        e,
                        buf.as_ptr() as *mut c_void,
                        buf.len(),
                        ep.fi_addr[*peer],
                        tag,
                        0,
                        key as *mut c_void,
                    )
                };
                (rc, "fi_trecv")
            }
            Later::Send {
                peer,
                tag,
                ptr,
                len,
                ..
            } => {
                // SAFETY: `ptr` points into the vector owned by `what`, which moves
                // into `inflight` (its heap memory does not move) until the completion.
                let rc = unsafe {
                    hpc_ofi_tsend(
                        e,
                        ptr.cast(),
                        *len,
                        ep.fi_addr[*peer],
                        *tag,
                        key as *mut c_void,
                    )
                };
                (rc, "fi_tsend")
            }
            Later::Write {
                peer,
                src,
                from,
                len,
                addr,
                key: mr_key,
                ..
            } => {
                // SAFETY: `src` points into the put's source, owned by `ep.puts` until
                // every part completed; `from + len` is within it (checked by `put`).
                let rc = unsafe {
                    hpc_ofi_write(
                        e,
                        src.add(*from).cast(),
                        *len,
                        ep.fi_addr[*peer],
                        addr + *from as u64,
                        *mr_key,
                        key as *mut c_void,
                    )
                };
                (rc, "fi_write")
            }
            Later::Read {
                peer,
                ptr,
                len,
                addr,
                key: mr_key,
                ..
            } => {
                // SAFETY: the destination (vector or region) is owned by `sink`, which
                // moves into `inflight` until the completion, valid for `len` bytes.
                let rc = unsafe {
                    hpc_ofi_read(
                        e,
                        ptr.cast(),
                        *len,
                        ep.fi_addr[*peer],
                        *addr,
                        *mr_key,
                        key as *mut c_void,
                    )
                };
                (rc, "fi_read")
            }
        };
        if rc != 0 {
            return self.refused(ep, l, call, rc as i64);
        }
        if let Some(peer) = l.peer() {
            ep.unresolved.resolved(peer);
        }
        let what = match l {
            Later::Pool(i) => InFlight::Pool(i),
            Later::Incoming { peer, seq, buf } => InFlight::Incoming { peer, seq, buf },
            Later::Send { what, .. } => what,
            Later::Write { op, peer, .. } => InFlight::Put { op, peer },
            Later::Read { op, peer, sink, .. } => InFlight::Get { op, peer, sink },
        };
        ep.inflight.insert(key, (ctx, what));
        Posted::Done
    }

    /// What to do with a post the provider refused with `rc` (see [`Refusal`]).
    pub(super) fn refused(&self, ep: &mut Ep, l: Later, call: &'static str, rc: i64) -> Posted {
        let e = ofi_error(call, rc);
        match (refusal(e.code, l.peer().is_some()), l.peer()) {
            (Refusal::Again, _) => Posted::Again(l),
            (Refusal::Unresolved, Some(peer)) => {
                if ep.unresolved.since[peer].is_none() {
                    tracing::debug!(peer, call, error = %e, "ofi: peer's address not usable yet; posting again");
                }
                if ep.unresolved.refused(peer, Instant::now(), self.timeout) {
                    return Posted::Again(l);
                }
                let why = format!(
                    "the {} provider could not use rank {peer}'s address for {:?} ({call} kept \
                     answering \"{}\")",
                    self.provider, self.timeout, e.text
                );
                Posted::Failed(l, unavailable(why, Some(e)))
            }
            _ => Posted::Failed(l, Error::library(call, e)),
        }
    }

    /// Delivers, in arrival order, the messages of `peer` that are complete. Only
    /// vectors move here, so it runs under the lock (which keeps the order).
    pub(super) fn deliver_ready(&self, ep: &mut Ep, peer: usize) {
        while matches!(ep.order[peer].front(), Some(Slot::Ready(..))) {
            if let Some(Slot::Ready(tag, data)) = ep.order[peer].pop_front() {
                self.shared.deliver(peer, tag, data);
            }
        }
    }

    /// One part of a put completed (with `error`, if it failed).
    pub(super) fn put_part_done(
        &self,
        ep: &mut Ep,
        op: OpId,
        error: Option<Error>,
        done: &mut Vec<Done>,
    ) {
        let Some(st) = ep.puts.get_mut(&op.0) else {
            return;
        };
        st.parts_left -= 1;
        if st.error.is_none() {
            st.error = error;
        }
        if st.parts_left == 1 && st.error.is_none() {
            if let Some((peer, addr, key)) = st.tail.take() {
                // The body is in place: now the last 8 bytes.
                let (src, from) = (st.src.as_ptr(), st.src.len() - 8);
                let l = Later::Write {
                    op,
                    peer,
                    src,
                    from,
                    len: 8,
                    addr,
                    key,
                };
                self.later(ep, l, done);
            }
        }
        let st = ep.puts.get_mut(&op.0).expect("present");
        if st.parts_left == 0 {
            let st = ep.puts.remove(&op.0).expect("present");
            let res = match st.error {
                Some(e) => {
                    done.push(Done::Drop(Box::new(st.src)));
                    Err(e)
                }
                None => Ok(st.src.into_payload()),
            };
            done.push(Done::Complete(op, res));
        }
    }

    /// Posts (or queues) `l`, a part of a put ([`Later::Write`]); a refusal comes
    /// back as the error and nothing is in flight.
    pub(super) fn post_write(&self, ep: &mut Ep, l: Later) -> Result<()> {
        self.submit(ep, l).map_err(|(_, e)| e)
    }

    /// Hands completions to the transport (outside the lock).
    pub(super) fn report(&self, done: Vec<Done>) {
        for d in done {
            match d {
                Done::Complete(op, res) => self.shared.complete(op, res),
                Done::Lost(peer, e) => {
                    let cause = format!("libfabric ({}) reported {e}", self.provider);
                    self.shared.fail_peer_by(peer, &cause, Some(e));
                }
                Done::LostWith(peer, cause) => self.shared.fail_peer(peer, &cause),
                Done::Drop(x) => drop(x),
            }
        }
    }

    /// Reads completions, then reports them (the caller's progress).
    pub(super) fn progress(&self) {
        let mut ep = self.lock();
        let mut done = Vec::new();
        self.drain(&mut ep, &mut done);
        done.append(&mut ep.deferred);
        drop(ep);
        self.report(done);
    }

    /// Runs `f` under the lock and reports whatever it deferred.
    pub(super) fn with_ep<T>(&self, f: impl FnOnce(&mut Ep) -> T) -> T {
        let mut ep = self.lock();
        let out = f(&mut ep);
        let done = std::mem::take(&mut ep.deferred);
        drop(ep);
        self.report(done);
        out
    }

    pub(super) fn check_key(&self, key: &RemoteKey) -> Result<&Peer> {
        let r = key.rank();
        let p = self
            .peers
            .get(r)
            .and_then(Option::as_ref)
            .ok_or_else(|| Error::unavailable("ofi", format!("rank {r} is not an ofi peer")))?;
        if !key.is_intact() {
            return Err(Error::BadKey(format!(
                "the key of region {} of rank {r} was altered (its checksum does not match)",
                key.id
            )));
        }
        if key.pid != p.pid {
            return Err(Error::BadKey(format!(
                "the key names process {} but rank {r} is process {} (a key of another job?)",
                key.pid, p.pid
            )));
        }
        if key.fkey == 0 {
            return Err(Error::BadKey(format!(
                "region {} of rank {r} is not registered with libfabric",
                key.id
            )));
        }
        Ok(p)
    }

    /// The target address of `offset` in `key`'s region.
    pub(super) fn remote_addr(&self, key: &RemoteKey, offset: u64) -> u64 {
        if self.virt_addr {
            key.addr + offset
        } else {
            offset
        }
    }

    /// Posts (or queues behind what waits for `peer`) a tagged send of `frame`;
    /// `data`, the user's buffer, is handed back when it completes.
    pub(super) fn send_frame(
        &self,
        ep: &mut Ep,
        peer: usize,
        frame: Vec<u8>,
        op: Option<OpId>,
        data: Option<Vec<u8>>,
    ) -> Result<()> {
        let (ptr, len) = (frame.as_ptr(), frame.len());
        let l = Later::Send {
            peer,
            tag: eager_tag(self.me),
            ptr,
            len,
            what: InFlight::Frame {
                op,
                peer,
                _frame: frame,
                data,
            },
        };
        self.submit(ep, l).map_err(|(_, e)| e)
    }
}

pub(super) fn frame(h: MsgHeader, data: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(HEADER_BYTES + data.len());
    f.extend_from_slice(&h.encode());
    f.extend_from_slice(data);
    f
}
