//! The [`Backend`] built on the endpoint: registration, put, get and messages.

use std::ffi::c_char;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::ffi::*;
use super::ops::*;
use super::progress::*;
use super::provider::*;
use super::*;
use crate::completion::{OpId, Shared, Sink, Source};
use crate::error::check_bounds;
use crate::region::{Region, RemoteKey};
use crate::{Backend, BackendKind};

pub(super) struct Inner {
    pub(super) shared: Arc<Shared>,
    pub(super) provider: String,
    pub(super) ep: Mutex<Ep>,
    pub(super) peers: Vec<Option<Peer>>,
    pub(super) me: usize,
    pub(super) inject: usize,
    pub(super) max_msg: u64,
    pub(super) virt_addr: bool,
    pub(super) prov_key: bool,
    pub(super) key_mask: u64,
    pub(super) waw_size: u64,
    pub(super) closing: AtomicBool,
    /// The job's timeout (bounds a provider that keeps saying "try again").
    pub(super) timeout: Duration,
    /// Nanoseconds (since `epoch`) of the last progress by a caller.
    pub(super) caller_progress: AtomicU64,
    pub(super) epoch: Instant,
}

/// The libfabric backend.
pub(crate) struct Ofi {
    pub(super) inner: Arc<Inner>,
    pub(super) thread: Option<JoinHandle<()>>,
}

impl Backend for Ofi {
    fn kind(&self) -> BackendKind {
        BackendKind::Ofi
    }

    fn register(&self, region: &Region) -> Result<()> {
        let inner = &self.inner;
        let requested = region.inner.key & inner.key_mask;
        let (mr, key) = inner.with_ep(|ep| {
            let mut mr = std::ptr::null_mut();
            let mut key = 0u64;
            let mut what: *const c_char = std::ptr::null();
            // SAFETY: the region's memory is mapped for `len` bytes as long as the
            // registration lives: it is closed before the memory is unmapped (the
            // region's drop hook below, or `deregister`, or this backend's drop).
            let rc = unsafe {
                hpc_ofi_mr_reg(
                    ep.ep.0,
                    region.as_ptr().cast(),
                    region.len().max(1),
                    requested,
                    &mut mr,
                    &mut key,
                    &mut what,
                )
            };
            if rc != 0 {
                let call = if cstr(what) == "fi_mr_reg" {
                    "fi_mr_reg"
                } else {
                    "fi_mr_bind"
                };
                return Err(Error::library(call, ofi_error(call, rc as i64)));
            }
            ep.mrs.retain(|_, m| m.region.strong_count() > 0);
            ep.mrs.insert(
                region.id(),
                Mr {
                    mr,
                    region: Arc::downgrade(&region.inner),
                },
            );
            Ok((mr, key))
        })?;
        let _ = mr;
        if !inner.prov_key && key != requested {
            tracing::debug!(requested, key, "ofi: the provider chose another key");
        }
        region.inner.fkey.store(key.max(1), Ordering::Relaxed);
        let weak = Arc::downgrade(inner);
        let id = region.id();
        region
            .inner
            .on_drop
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Box::new(move || {
                if let Some(inner) = weak.upgrade() {
                    inner.close_mr(id);
                }
            }));
        Ok(())
    }

    fn deregister(&self, region: &Region) {
        self.inner.close_mr(region.id());
    }

    fn put(&self, op: OpId, src: Source, dst: &RemoteKey, offset: u64) -> Result<()> {
        let inner = &self.inner;
        check_bounds(offset, src.len() as u64, dst.len)?;
        inner.check_key(dst)?;
        let len = src.len();
        if len as u64 > inner.max_msg {
            return Err(Error::InvalidArgument(format!(
                "a put of {len} bytes exceeds the {} provider's {} bytes",
                inner.provider, inner.max_msg
            )));
        }
        if len == 0 {
            inner.shared.complete(op, Ok(src.into_payload()));
            return Ok(());
        }
        let addr = inner.remote_addr(dst, offset);
        let key = dst.fkey;
        let peer = dst.rank();
        // The last 8 bytes go last when they are 8-aligned at the target.
        let split = len >= 16 && (dst.addr + offset + len as u64 - 8) % 8 == 0;
        let ordered = (len - 8) as u64 <= inner.waw_size;
        inner.with_ep(|ep| {
            let ptr = src.as_ptr();
            ep.puts.insert(
                op.0,
                PutState {
                    src,
                    parts_left: if split { 2 } else { 1 },
                    error: None,
                    tail: (split && !ordered).then_some((peer, addr, key)),
                },
            );
            // `ptr[from..from + len]` to `addr + from` at the target.
            let part = |from, len| Later::Write {
                op,
                peer,
                src: ptr,
                from,
                len,
                addr,
                key,
            };
            let body = if split { len - 8 } else { len };
            if let Err(e) = inner.post_write(ep, part(0, body)) {
                // Nothing of it is in flight.
                if let Some(st) = ep.puts.remove(&op.0) {
                    ep.deferred.push(Done::Drop(Box::new(st.src)));
                }
                return Err(e);
            }
            if split && ordered {
                if let Err(e) = inner.post_write(ep, part(len - 8, 8)) {
                    // The body is in flight: its completion ends the put with this error.
                    if let Some(st) = ep.puts.get_mut(&op.0) {
                        st.parts_left -= 1;
                        st.error = Some(e);
                    }
                }
            }
            Ok(())
        })
    }

    fn get(&self, op: OpId, src: &RemoteKey, offset: u64, dst: Sink) -> Result<()> {
        let inner = &self.inner;
        check_bounds(offset, dst.len() as u64, src.len)?;
        inner.check_key(src)?;
        let len = dst.len();
        if len == 0 {
            let payload = dst.fill(|_, _| Ok(()))?;
            inner.shared.complete(op, Ok(payload));
            return Ok(());
        }
        let (sink, ptr) = match dst {
            Sink::Bytes(n) => {
                let mut v = vec![0u8; n];
                let p = v.as_mut_ptr();
                (GetSink::Bytes(v), p)
            }
            Sink::Region {
                region,
                offset: at,
                len: _,
            } => {
                // SAFETY: `validate` checked at + len <= region length.
                let p = unsafe { region.as_ptr().add(at) };
                (GetSink::Region(region), p)
            }
        };
        let addr = inner.remote_addr(src, offset);
        let key = src.fkey;
        let peer = src.rank();
        inner.with_ep(|ep| {
            let l = Later::Read {
                op,
                peer,
                ptr,
                len,
                addr,
                key,
                sink,
            };
            inner.submit(ep, l).map_err(|(l, e)| {
                // Nothing of it is in flight; a region it holds is dropped outside
                // the lock.
                ep.deferred.push(Done::Drop(Box::new(l)));
                e
            })
        })
    }

    fn send(&self, op: OpId, peer: usize, tag: u64, data: Vec<u8>) -> Result<()> {
        let inner = &self.inner;
        if inner.peers.get(peer).and_then(Option::as_ref).is_none() {
            return Err(Error::unavailable(
                "ofi",
                format!("rank {peer} is not an ofi peer"),
            ));
        }
        if data.len() as u64 > MAX_MESSAGE.min(inner.max_msg) {
            return Err(Error::InvalidArgument(format!(
                "message of {} bytes",
                data.len()
            )));
        }
        inner.with_ep(|ep| {
            if data.len() <= EAGER_MAX {
                let h = MsgHeader {
                    kind: EAGER,
                    seq: 0,
                    tag,
                    len: data.len() as u64,
                };
                let f = frame(h, &data);
                return inner.send_frame(ep, peer, f, Some(op), Some(data));
            }
            let seq = ep.tx_seq[peer];
            ep.tx_seq[peer] = seq.wrapping_add(1) & 0x7fff_ffff;
            let h = MsgHeader {
                kind: RTS,
                seq,
                tag,
                len: data.len() as u64,
            };
            inner.send_frame(ep, peer, h.encode().to_vec(), None, None)?;
            let (ptr, len) = (data.as_ptr(), data.len());
            let l = Later::Send {
                peer,
                tag: data_tag(inner.me, seq),
                ptr,
                len,
                what: InFlight::Data { op, peer, data },
            };
            // The announcement is posted or queued before it, so it cannot fail
            // alone: a refusal here fails the operation as a completion.
            let mut done = Vec::new();
            inner.later(ep, l, &mut done);
            ep.deferred.append(&mut done);
            Ok(())
        })
    }

    fn try_send_now(&self, peer: usize, tag: u64, data: Vec<u8>) -> crate::SentNow {
        let inner = &self.inner;
        if HEADER_BYTES + data.len() > inner.inject
            || inner.peers.get(peer).and_then(Option::as_ref).is_none()
            || inner.shared.is_lost(peer).is_some()
        {
            return Err(data);
        }
        let h = MsgHeader {
            kind: EAGER,
            seq: 0,
            tag,
            len: data.len() as u64,
        };
        let mut f = [0u8; 256];
        let n = HEADER_BYTES + data.len();
        if n > f.len() {
            return Err(data);
        }
        f[..HEADER_BYTES].copy_from_slice(&h.encode());
        f[HEADER_BYTES..n].copy_from_slice(&data);
        let mut ep = inner.lock();
        if !ep.later_tx[peer].is_empty() {
            // Earlier sends to this peer wait: this one goes behind them.
            drop(ep);
            return Err(data);
        }
        let dest = ep.fi_addr[peer];
        // SAFETY: `f` is readable for `n` bytes; inject copies it before returning.
        let rc =
            unsafe { hpc_ofi_tinject(ep.ep.0, f.as_ptr().cast(), n, dest, eager_tag(inner.me)) };
        let done = std::mem::take(&mut ep.deferred);
        drop(ep);
        inner.report(done);
        if rc == 0 {
            Ok(data)
        } else {
            Err(data)
        }
    }

    fn progress(&self) -> Result<()> {
        let inner = &self.inner;
        inner
            .caller_progress
            .store(inner.epoch.elapsed().as_nanos() as u64, Ordering::Relaxed);
        inner.progress();
        Ok(())
    }

    fn check_peer(&self, peer: usize) -> Result<()> {
        if self.inner.shared.is_lost(peer).is_none() {
            // Deliver what it sent before it went, then look.
            self.inner.progress();
        }
        match self.inner.gone(peer) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn wants_progress(&self) -> bool {
        true
    }
}

impl Inner {
    /// Closes the registration of region `id` (now: its key is stale at once).
    pub(super) fn close_mr(&self, id: u32) {
        let mr = self.lock().mrs.remove(&id);
        if let Some(m) = mr {
            // SAFETY: a registration made by `register`, closed once (removed above).
            let rc = unsafe { hpc_ofi_mr_close(m.mr) };
            if rc != 0 {
                tracing::warn!(error = %strerror(-rc), "ofi: fi_close(mr)");
            }
        }
    }
}

impl Drop for Ofi {
    fn drop(&mut self) {
        self.inner.closing.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let mut ep = self.inner.lock();
        for (_, m) in ep.mrs.drain() {
            // SAFETY: registrations made by `register`, each closed once; the
            // regions' drop hooks find them gone.
            unsafe { hpc_ofi_mr_close(m.mr) };
        }
        // Close the endpoint before the buffers it may still write into are freed.
        let endpoint = std::mem::replace(&mut ep.ep, Endpoint(std::ptr::null_mut()));
        drop(endpoint);
        let inflight = std::mem::take(&mut ep.inflight);
        let puts = std::mem::take(&mut ep.puts);
        let deferred = std::mem::take(&mut ep.deferred);
        let later = (
            std::mem::take(&mut ep.later_rx),
            std::mem::take(&mut ep.later_tx),
        );
        drop(ep);
        // Buffers (and any regions they hold) go after the lock is released.
        drop(inflight);
        drop(later);
        drop(puts);
        self.inner.report(deferred);
    }
}
