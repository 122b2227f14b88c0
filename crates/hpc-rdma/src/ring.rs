//! Single-producer single-consumer byte ring in shared memory.
//!
//! Layout of one ring (`CTL + cap` bytes, `cap` a power of two >= 256):
//!
//! ```text
//! [0..8)      head: u64, bytes ever written (producer stores, release)
//! [8..16)     salt: u64, random, written once by `init` before the ring is shared
//! [64..72)    tail: u64, bytes ever consumed (consumer stores, release)
//! [128..)     data: records, each starting on a 64-byte boundary:
//!             [0..8)   stamp = (absolute position + 1) ^ salt  (stored last, release)
//!             [8..12)  payload length
//!             [12..16) kind (0 = padding to the end of the buffer)
//!             [16..24) tag
//!             [24..32) zero
//!             [32..)   payload, then padding to the next 64-byte boundary
//! ```
//!
//! The consumer detects a record by its stamp alone, so an 8-byte message costs the
//! consumer one cache line (the record) rather than two (head + record). The salt
//! makes a stale payload word in reused ring memory unable to pass for a stamp.
//! Head and tail sit on separate cache lines. The consumer never trusts the
//! producer's bytes: every header is checked so that a corrupt ring gives
//! [`Error::Protocol`], never a read outside the ring.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Bytes of the control block before the data.
pub(crate) const CTL: usize = 128;
/// Record header size.
pub(crate) const REC_HDR: usize = 32;
/// Records start on this boundary (one cache line).
const ALIGN: usize = 64;
/// Kind of a padding record.
pub(crate) const PAD: u32 = 0;

fn record_len(payload: usize) -> usize {
    (REC_HDR + payload + ALIGN - 1) & !(ALIGN - 1)
}

/// Pointers to one ring. Does not own the memory.
#[derive(Clone, Copy)]
struct Raw {
    base: *mut u8,
    data: *mut u8,
    cap: usize,
}

impl Raw {
    /// # Safety
    /// `base` must be 64-byte aligned and valid for `CTL + cap` bytes for as long as the
    /// ring is used, and `cap` a power of two >= 256.
    unsafe fn new(base: *mut u8, cap: usize) -> Raw {
        debug_assert!(cap.is_power_of_two() && cap >= 256);
        debug_assert_eq!(base as usize % 64, 0);
        Raw {
            base,
            // SAFETY: CTL is within the block the caller vouches for.
            data: unsafe { base.add(CTL) },
            cap,
        }
    }
    fn word(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at` is one of the control-block offsets (0, 8, 64), 8-aligned and
        // inside the block valid per `Raw::new`'s contract.
        unsafe { &*(self.base.add(at) as *const AtomicU64) }
    }
    fn head(&self) -> &AtomicU64 {
        self.word(0)
    }
    fn salt(&self) -> &AtomicU64 {
        self.word(8)
    }
    fn tail(&self) -> &AtomicU64 {
        self.word(64)
    }
    /// The stamp word of the record at `pos` (a multiple of ALIGN below cap).
    fn stamp(&self, pos: usize) -> &AtomicU64 {
        debug_assert!(pos % ALIGN == 0 && pos < self.cap);
        // SAFETY: pos < cap and 64-aligned, so the 8 bytes lie in the data area.
        unsafe { &*(self.data.add(pos) as *const AtomicU64) }
    }
}

/// Prepares fresh (zeroed) ring memory: writes a random salt.
///
/// # Safety
/// As for [`Raw::new`]; nobody may use the ring yet.
pub(crate) unsafe fn init(base: *mut u8, cap: usize) {
    // SAFETY: forwarded contract.
    let raw = unsafe { Raw::new(base, cap) };
    raw.salt()
        .store(hpc_runtime::random_u64() | 1, Ordering::Release);
}

/// The writing end.
pub(crate) struct Producer {
    raw: Raw,
    salt: u64,
    head: u64,
    cached_tail: u64,
}

// SAFETY: the producer only touches the ring through raw pointers into memory that the
// owner keeps mapped; exactly one producer exists per ring (SPSC), guarded by a Mutex.
unsafe impl Send for Producer {}

impl Producer {
    /// # Safety
    /// As for the ring memory in the module docs (after [`init`]); at most one
    /// producer per ring, and the memory must outlive the producer.
    pub(crate) unsafe fn new(base: *mut u8, cap: usize) -> Producer {
        // SAFETY: forwarded contract.
        let raw = unsafe { Raw::new(base, cap) };
        Producer {
            salt: raw.salt().load(Ordering::Acquire),
            head: raw.head().load(Ordering::Relaxed),
            cached_tail: raw.tail().load(Ordering::Acquire),
            raw,
        }
    }

    /// Largest payload one record may carry.
    pub(crate) fn max_payload(&self) -> usize {
        self.raw.cap / 4
    }

    /// Appends one record made of `parts`; false if there is no room now.
    pub(crate) fn try_push(&mut self, kind: u32, tag: u64, parts: &[&[u8]]) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        assert!(
            len <= self.max_payload(),
            "record larger than a quarter ring"
        );
        let cap = self.raw.cap;
        let rec = record_len(len);
        let pos = (self.head as usize) & (cap - 1);
        let to_end = cap - pos;
        let need = if rec <= to_end { rec } else { to_end + rec };
        let free = |tail: u64| cap - (self.head - tail) as usize;
        if free(self.cached_tail) < need {
            self.cached_tail = self.raw.tail().load(Ordering::Acquire);
            if free(self.cached_tail) < need {
                return false;
            }
        }
        let mut pos = pos;
        if rec > to_end {
            // SAFETY: pos is 64-aligned and to_end >= 64 >= REC_HDR; the space is free.
            unsafe { self.publish(pos, (to_end - REC_HDR) as u32, PAD, 0, &[]) };
            self.head += to_end as u64;
            pos = 0;
        }
        // SAFETY: pos + rec <= cap (the record fits before the end) and the space
        // between head and tail + cap is free (the consumer is done with it).
        unsafe { self.publish(pos, len as u32, kind, tag, parts) };
        self.head += rec as u64;
        self.raw.head().store(self.head, Ordering::Release);
        true
    }

    /// Writes a record at `pos` (absolute position `self.head`), stamp last.
    ///
    /// # Safety
    /// `pos + REC_HDR + payload <= cap`, `pos` 64-aligned, and the bytes are free.
    unsafe fn publish(&self, pos: usize, len: u32, kind: u32, tag: u64, parts: &[&[u8]]) {
        let mut h = [0u8; REC_HDR - 8];
        h[0..4].copy_from_slice(&len.to_le_bytes());
        h[4..8].copy_from_slice(&kind.to_le_bytes());
        h[8..16].copy_from_slice(&tag.to_le_bytes());
        // SAFETY: guaranteed by the caller: header and payload lie within the free
        // space of the ring.
        unsafe {
            std::ptr::copy_nonoverlapping(h.as_ptr(), self.raw.data.add(pos + 8), h.len());
            let mut at = self.raw.data.add(pos + REC_HDR);
            for p in parts {
                std::ptr::copy_nonoverlapping(p.as_ptr(), at, p.len());
                at = at.add(p.len());
            }
        }
        self.raw
            .stamp(pos)
            .store((self.head + 1) ^ self.salt, Ordering::Release);
    }
}

/// A record's payload, still in the ring; copy it out with [`RecordBytes::copy_to`].
pub(crate) struct RecordBytes {
    ptr: *const u8,
    len: usize,
}

impl RecordBytes {
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    /// Copies `out.len()` bytes starting at `from`.
    pub(crate) fn copy_to(&self, from: usize, out: &mut [u8]) {
        assert!(from + out.len() <= self.len, "copy past the record");
        // SAFETY: within the record, which the consumer validated to lie in the ring.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(from), out.as_mut_ptr(), out.len()) };
    }
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        // SAFETY: the record's `len` bytes lie in the ring (validated by the
        // consumer); `v` has room for `len` bytes, all written here before `set_len`
        // (no zeroing pass first: this is the receive path of every small message).
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr, v.as_mut_ptr(), self.len);
            v.set_len(self.len);
        }
        v
    }
}

/// A lock-free look at whether a ring has an unread record (for polling loops).
#[derive(Clone, Copy)]
pub(crate) struct Probe {
    raw: Raw,
    salt: u64,
}

// SAFETY: only atomics in memory that the owner of the consumer keeps mapped are read.
unsafe impl Send for Probe {}
// SAFETY: as above; loads only.
unsafe impl Sync for Probe {}

impl Probe {
    /// Whether the next record has been published.
    pub(crate) fn has_data(&self) -> bool {
        let tail = self.raw.tail().load(Ordering::Relaxed);
        let pos = (tail as usize) & (self.raw.cap - 1);
        self.raw.stamp(pos).load(Ordering::Acquire) == (tail + 1) ^ self.salt
    }
}

/// The reading end.
pub(crate) struct Consumer {
    raw: Raw,
    salt: u64,
    tail: u64,
}

// SAFETY: as for `Producer`: one consumer per ring, raw access to memory kept mapped.
unsafe impl Send for Consumer {}

impl Consumer {
    /// # Safety
    /// As for [`Producer::new`], with at most one consumer per ring.
    pub(crate) unsafe fn new(base: *mut u8, cap: usize) -> Consumer {
        // SAFETY: forwarded contract.
        let raw = unsafe { Raw::new(base, cap) };
        Consumer {
            salt: raw.salt().load(Ordering::Acquire),
            tail: raw.tail().load(Ordering::Relaxed),
            raw,
        }
    }

    /// A probe of this ring, valid as long as the ring memory is.
    pub(crate) fn probe(&self) -> Probe {
        Probe {
            raw: self.raw,
            salt: self.salt,
        }
    }

    /// Whether the next record has been published (one acquire load of its stamp).
    pub(crate) fn has_data(&mut self) -> bool {
        let pos = (self.tail as usize) & (self.raw.cap - 1);
        self.raw.stamp(pos).load(Ordering::Acquire) == (self.tail + 1) ^ self.salt
    }

    /// Hands the next record to `f` and frees it; `Ok(false)` if the ring is empty.
    pub(crate) fn pop(&mut self, f: impl FnOnce(u32, u64, RecordBytes)) -> Result<bool> {
        let cap = self.raw.cap;
        let mut f = Some(f);
        loop {
            if !self.has_data() {
                return Ok(false);
            }
            let pos = (self.tail as usize) & (cap - 1);
            let mut h = [0u8; REC_HDR - 8];
            // SAFETY: pos is 64-aligned below cap, so the header lies in the ring; the
            // acquire load of the stamp ordered the producer's header writes before.
            unsafe {
                std::ptr::copy_nonoverlapping(self.raw.data.add(pos + 8), h.as_mut_ptr(), h.len())
            };
            let len = u32::from_le_bytes(h[0..4].try_into().expect("4")) as usize;
            let kind = u32::from_le_bytes(h[4..8].try_into().expect("4"));
            let tag = u64::from_le_bytes(h[8..16].try_into().expect("8"));
            if len > cap || pos + REC_HDR + len > cap {
                return Err(Error::Protocol(format!(
                    "corrupt shm ring record: len {len} kind {kind} at {pos}"
                )));
            }
            let rec = record_len(len).min(cap - pos);
            if kind != PAD {
                (f.take().expect("called once"))(
                    kind,
                    tag,
                    RecordBytes {
                        // SAFETY: pos + REC_HDR + len <= cap, checked above.
                        ptr: unsafe { self.raw.data.add(pos + REC_HDR) },
                        len,
                    },
                );
            }
            self.tail += rec as u64;
            self.raw.tail().store(self.tail, Ordering::Release);
            if kind != PAD {
                return Ok(true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ring memory with guard bytes on both sides, 64-byte aligned.
    struct Guarded {
        buf: Vec<u64>,
        cap: usize,
    }
    const GUARD: usize = 256;
    impl Guarded {
        fn new(cap: usize) -> Guarded {
            let words = (GUARD * 2 + CTL + cap) / 8 + 8;
            let buf = vec![0xA5A5_A5A5_A5A5_A5A5u64; words];
            let mut g = Guarded { buf, cap };
            let b = g.base();
            // SAFETY: zero the control block and data inside the buffer, then init.
            unsafe {
                std::ptr::write_bytes(b, 0, CTL + cap);
                init(b, cap);
            }
            g
        }
        fn base(&mut self) -> *mut u8 {
            let p = self.buf.as_mut_ptr() as *mut u8;
            let off = (64 - (p as usize % 64)) % 64;
            // SAFETY: within the vector (GUARD + alignment slack were allocated).
            unsafe { p.add(off + GUARD) }
        }
        fn guards_intact(&mut self) -> bool {
            let base = self.base();
            let all = self.buf.as_ptr() as *const u8;
            let total = self.buf.len() * 8;
            // SAFETY: reading the whole vector's bytes.
            let bytes = unsafe { std::slice::from_raw_parts(all, total) };
            let start = base as usize - all as usize;
            let end = start + CTL + self.cap;
            bytes[start - GUARD..start].iter().all(|&b| b == 0xA5)
                && bytes[end..end + GUARD].iter().all(|&b| b == 0xA5)
        }
    }

    #[test]
    fn records_round_trip_with_wraparound_and_no_overrun() {
        let cap = 1024;
        let mut g = Guarded::new(cap);
        // SAFETY: `g` outlives both ends; one producer, one consumer.
        let (mut p, mut c) =
            unsafe { (Producer::new(g.base(), cap), Consumer::new(g.base(), cap)) };
        let mut expect = std::collections::VecDeque::new();
        let mut seed = 12345u64;
        for i in 0..5000u64 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = (seed >> 33) as usize % (p.max_payload() + 1);
            let data: Vec<u8> = (0..len).map(|j| (i as usize + j) as u8).collect();
            let (a, b) = data.split_at(len / 3);
            if p.try_push(7, i, &[a, b]) {
                expect.push_back((i, data));
            }
            if seed % 3 == 0 || !expect.is_empty() && seed % 5 == 0 {
                while let Some((tag, want)) = expect.pop_front() {
                    let mut got = None;
                    assert!(c.pop(|k, t, r| got = Some((k, t, r.to_vec()))).unwrap());
                    assert_eq!(got, Some((7, tag, want)));
                    if seed % 2 == 0 {
                        break;
                    }
                }
            }
        }
        while let Some((tag, want)) = expect.pop_front() {
            let mut got = None;
            assert!(c.pop(|_, t, r| got = Some((t, r.to_vec()))).unwrap());
            assert_eq!(got, Some((tag, want)));
        }
        assert!(!c.pop(|_, _, _| ()).unwrap());
        assert!(g.guards_intact(), "ring wrote outside its memory");
    }

    #[test]
    fn full_ring_refuses_then_accepts() {
        let cap = 256;
        let mut g = Guarded::new(cap);
        // SAFETY: as above.
        let (mut p, mut c) =
            unsafe { (Producer::new(g.base(), cap), Consumer::new(g.base(), cap)) };
        let mut n = 0;
        while p.try_push(1, n, &[&[1u8; 32]]) {
            n += 1;
        }
        assert_eq!(n, 4, "4 records of 64 bytes fill 256");
        assert!(c.pop(|_, t, _| assert_eq!(t, 0)).unwrap());
        assert!(p.try_push(1, 99, &[&[2u8; 32]]));
        assert!(g.guards_intact());
    }

    #[test]
    fn corrupt_headers_are_rejected_not_followed() {
        let cap = 256;
        let mut g = Guarded::new(cap);
        let base = g.base();
        // SAFETY: as above.
        let mut p = unsafe { Producer::new(base, cap) };
        assert!(p.try_push(1, 0, &[&[0u8; 8]]));
        // Corrupt the length field to a huge value.
        // SAFETY: the first record's length field is at data offset 8.
        unsafe { std::ptr::write_unaligned(base.add(CTL + 8) as *mut u32, 0xffff_fff0) };
        // SAFETY: as above.
        let mut c = unsafe { Consumer::new(base, cap) };
        assert!(matches!(c.pop(|_, _, _| ()), Err(Error::Protocol(_))));
        // A length that runs past the end of the buffer is rejected too.
        // SAFETY: as above.
        unsafe { std::ptr::write_unaligned(base.add(CTL + 8) as *mut u32, 250) };
        assert!(matches!(c.pop(|_, _, _| ()), Err(Error::Protocol(_))));
        // A payload word that equals a future stamp without the salt is not a record.
        // SAFETY: as above; zeroing the stamp of record 0 and writing an unsalted one.
        unsafe { std::ptr::write_unaligned(base.add(CTL) as *mut u64, 1) };
        assert!(!c.has_data());
        assert!(g.guards_intact());
    }

    #[test]
    fn threads_stream_through_the_ring() {
        let cap = 4096;
        let mut g = Guarded::new(cap);
        let base = g.base() as usize;
        let n = 20_000u64;
        let prod = std::thread::spawn(move || {
            // SAFETY: `g` is kept alive until both threads are joined.
            let mut p = unsafe { Producer::new(base as *mut u8, cap) };
            for i in 0..n {
                let len = (i % 300) as usize;
                let data = vec![(i % 251) as u8; len];
                while !p.try_push(3, i, &[&data]) {
                    std::hint::spin_loop();
                }
            }
        });
        // SAFETY: as above.
        let mut c = unsafe { Consumer::new(base as *mut u8, cap) };
        let mut i = 0;
        while i < n {
            let mut ok = true;
            if c.pop(|_, t, r| {
                ok = t == i
                    && r.len() == (i % 300) as usize
                    && r.to_vec().iter().all(|&b| b == (i % 251) as u8)
            })
            .unwrap()
            {
                assert!(ok, "record {i}");
                i += 1;
            }
        }
        prod.join().unwrap();
        assert!(g.guards_intact());
    }
}
