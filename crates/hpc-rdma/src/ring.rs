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

/// A 64-bit word the two ends synchronize through.
pub(crate) trait Word {
    fn load(&self, order: Ordering) -> u64;
    fn store(&self, value: u64, order: Ordering);
}

impl Word for AtomicU64 {
    #[inline(always)]
    fn load(&self, order: Ordering) -> u64 {
        AtomicU64::load(self, order)
    }
    #[inline(always)]
    fn store(&self, value: u64, order: Ordering) {
        AtomicU64::store(self, value, order)
    }
}

/// The memory one ring lives in: head, salt and tail words, the stamp word at the
/// start of every 64-byte line, and the data bytes.
///
/// The ring's algorithm ([`Producer`], [`Consumer`], [`Probe`]) is written once over
/// this trait: [`ShmRing`] is the shared mapping the shm backend uses, and under
/// `cfg(loom)` the loom models run the same code over memory whose words are loom
/// atomics and whose lines are loom cells, so that every interleaving is explored
/// and every unsynchronized access to a line is reported.
pub(crate) trait RingMem: Clone {
    /// The word type.
    type Word: Word;
    /// Bytes of the data area (a power of two >= 256).
    fn cap(&self) -> usize;
    /// Bytes ever written (the producer stores it, release).
    fn head(&self) -> &Self::Word;
    /// Random salt of the stamps (written once by [`init`]).
    fn salt(&self) -> &Self::Word;
    /// Bytes ever consumed (the consumer stores it, release).
    fn tail(&self) -> &Self::Word;
    /// The stamp word of the record at `pos` (64-aligned, below `cap`).
    fn stamp(&self, pos: usize) -> &Self::Word;
    /// Copies `src` to data offset `at`.
    ///
    /// # Safety
    /// `at + src.len() <= cap`, the bytes are not a stamp word in use, and the
    /// producer owns them (they are free space).
    unsafe fn write(&self, at: usize, src: &[u8]);
    /// Copies data bytes from offset `at` into `dst`.
    ///
    /// # Safety
    /// `at + dst.len() <= cap`, and the bytes belong to a record whose stamp the
    /// consumer loaded (acquire) and has not freed yet.
    unsafe fn read(&self, at: usize, dst: &mut [u8]);
}

/// A ring in shared memory (the shm backend's). Does not own the memory.
#[derive(Clone, Copy)]
pub(crate) struct ShmRing {
    base: *mut u8,
    data: *mut u8,
    cap: usize,
}

// SAFETY: the pointers lead into a mapping that the owner keeps alive as long as the
// ring's ends and probes (see `Producer::new`); all shared state is accessed through
// atomics or under the SPSC protocol, from any thread.
unsafe impl Send for ShmRing {}
// SAFETY: as above.
unsafe impl Sync for ShmRing {}

impl ShmRing {
    /// # Safety
    /// `base` must be 64-byte aligned and valid for `CTL + cap` bytes for as long as the
    /// ring is used, and `cap` a power of two >= 256.
    unsafe fn new(base: *mut u8, cap: usize) -> ShmRing {
        debug_assert!(cap.is_power_of_two() && cap >= 256);
        debug_assert_eq!(base as usize % 64, 0);
        ShmRing {
            base,
            // SAFETY: CTL is within the block the caller vouches for.
            data: unsafe { base.add(CTL) },
            cap,
        }
    }
    fn word(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at` is one of the control-block offsets (0, 8, 64), 8-aligned and
        // inside the block valid per `ShmRing::new`'s contract.
        unsafe { &*(self.base.add(at) as *const AtomicU64) }
    }
}

impl RingMem for ShmRing {
    type Word = AtomicU64;
    fn cap(&self) -> usize {
        self.cap
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
    fn stamp(&self, pos: usize) -> &AtomicU64 {
        debug_assert!(pos % ALIGN == 0 && pos < self.cap);
        // SAFETY: pos < cap and 64-aligned, so the 8 bytes lie in the data area.
        unsafe { &*(self.data.add(pos) as *const AtomicU64) }
    }
    #[inline(always)]
    unsafe fn write(&self, at: usize, src: &[u8]) {
        // SAFETY: in the data area and free, per the caller; `src` is a distinct buffer.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.data.add(at), src.len()) }
    }
    #[inline(always)]
    unsafe fn read(&self, at: usize, dst: &mut [u8]) {
        // SAFETY: in the data area and published, per the caller.
        unsafe { std::ptr::copy_nonoverlapping(self.data.add(at), dst.as_mut_ptr(), dst.len()) }
    }
}

/// Prepares fresh (zeroed) ring memory: writes `salt` (random, from the caller).
///
/// # Safety
/// As for [`ShmRing::new`]; nobody may use the ring yet.
pub(crate) unsafe fn init(base: *mut u8, cap: usize, salt: u64) {
    // SAFETY: forwarded contract.
    let mem = unsafe { ShmRing::new(base, cap) };
    init_mem(&mem, salt);
}

fn init_mem<M: RingMem>(mem: &M, salt: u64) {
    mem.salt().store(salt | 1, Ordering::Release);
}

/// The writing end.
pub(crate) struct Producer<M: RingMem = ShmRing> {
    mem: M,
    salt: u64,
    head: u64,
    cached_tail: u64,
}

impl Producer<ShmRing> {
    /// # Safety
    /// As for the ring memory in the module docs (after [`init`]); at most one
    /// producer per ring, and the memory must outlive the producer.
    pub(crate) unsafe fn new(base: *mut u8, cap: usize) -> Producer {
        // SAFETY: forwarded contract.
        Producer::with_mem(unsafe { ShmRing::new(base, cap) })
    }
}

impl<M: RingMem> Producer<M> {
    fn with_mem(mem: M) -> Producer<M> {
        Producer {
            salt: mem.salt().load(Ordering::Acquire),
            head: mem.head().load(Ordering::Relaxed),
            cached_tail: mem.tail().load(Ordering::Acquire),
            mem,
        }
    }

    /// Largest payload one record may carry.
    pub(crate) fn max_payload(&self) -> usize {
        self.mem.cap() / 4
    }

    /// Appends one record made of `parts`; false if there is no room now.
    pub(crate) fn try_push(&mut self, kind: u32, tag: u64, parts: &[&[u8]]) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        assert!(
            len <= self.max_payload(),
            "record larger than a quarter ring"
        );
        let cap = self.mem.cap();
        let rec = record_len(len);
        let pos = (self.head as usize) & (cap - 1);
        let to_end = cap - pos;
        let need = if rec <= to_end { rec } else { to_end + rec };
        // A tail that is not behind the head by at most `cap` (a corrupt peer) leaves
        // no room rather than an overflow.
        let head = self.head;
        let free = |tail: u64| match head.wrapping_sub(tail) {
            used if used <= cap as u64 => cap - used as usize,
            _ => 0,
        };
        if free(self.cached_tail) < need {
            // Acquire: the consumer's reads of the space it freed happen before our
            // writes into it.
            self.cached_tail = self.mem.tail().load(Ordering::Acquire);
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
        self.mem.head().store(self.head, Ordering::Release);
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
            self.mem.write(pos + 8, &h);
            let mut at = pos + REC_HDR;
            for p in parts {
                self.mem.write(at, p);
                at += p.len();
            }
        }
        // Release: the header and payload writes above happen before a consumer that
        // sees this stamp (acquire) reads them.
        self.mem
            .stamp(pos)
            .store(self.head.wrapping_add(1) ^ self.salt, Ordering::Release);
    }
}

/// A record's payload, still in the ring; copy it out with [`RecordBytes::copy_to`].
pub(crate) struct RecordBytes<'a, M: RingMem = ShmRing> {
    mem: &'a M,
    at: usize,
    len: usize,
}

impl<M: RingMem> RecordBytes<'_, M> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    /// Copies `out.len()` bytes starting at `from`.
    pub(crate) fn copy_to(&self, from: usize, out: &mut [u8]) {
        assert!(from + out.len() <= self.len, "copy past the record");
        // SAFETY: within the record, which the consumer validated to lie in the ring
        // and which stays unfreed while `self` borrows it.
        unsafe { self.mem.read(self.at + from, out) };
    }
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        // SAFETY: `v` has room for `len` bytes; the read below writes all of them
        // before `set_len` (no zeroing pass first: this is the receive path of every
        // small message). The spare capacity is handed out as a byte slice only to
        // be written, never read.
        unsafe {
            let spare = std::slice::from_raw_parts_mut(v.as_mut_ptr(), self.len);
            self.mem.read(self.at, spare);
            v.set_len(self.len);
        }
        v
    }
}

/// A lock-free look at whether a ring has an unread record (for polling loops).
#[derive(Clone, Copy)]
pub(crate) struct Probe<M: RingMem = ShmRing> {
    mem: M,
    salt: u64,
}

impl<M: RingMem> Probe<M> {
    /// Whether the next record has been published.
    pub(crate) fn has_data(&self) -> bool {
        let tail = self.mem.tail().load(Ordering::Relaxed);
        let pos = (tail as usize) & (self.mem.cap() - 1);
        self.mem.stamp(pos).load(Ordering::Acquire) == tail.wrapping_add(1) ^ self.salt
    }
}

/// The reading end.
pub(crate) struct Consumer<M: RingMem = ShmRing> {
    mem: M,
    salt: u64,
    tail: u64,
}

impl Consumer<ShmRing> {
    /// # Safety
    /// As for [`Producer::new`], with at most one consumer per ring.
    pub(crate) unsafe fn new(base: *mut u8, cap: usize) -> Consumer {
        // SAFETY: forwarded contract.
        Consumer::with_mem(unsafe { ShmRing::new(base, cap) })
    }
}

impl<M: RingMem> Consumer<M> {
    fn with_mem(mem: M) -> Consumer<M> {
        Consumer {
            salt: mem.salt().load(Ordering::Acquire),
            tail: mem.tail().load(Ordering::Relaxed),
            mem,
        }
    }

    /// A probe of this ring, valid as long as the ring memory is.
    pub(crate) fn probe(&self) -> Probe<M> {
        Probe {
            mem: self.mem.clone(),
            salt: self.salt,
        }
    }

    /// Whether the next record has been published (one acquire load of its stamp).
    pub(crate) fn has_data(&mut self) -> bool {
        let pos = (self.tail as usize) & (self.mem.cap() - 1);
        self.mem.stamp(pos).load(Ordering::Acquire) == self.tail.wrapping_add(1) ^ self.salt
    }

    /// Hands the next record to `f` and frees it; `Ok(false)` if the ring is empty.
    /// A record whose header does not fit the ring is [`Error::Protocol`], never a
    /// read outside it.
    pub(crate) fn pop(&mut self, f: impl FnOnce(u32, u64, RecordBytes<'_, M>)) -> Result<bool> {
        let cap = self.mem.cap();
        let mut f = Some(f);
        loop {
            if !self.has_data() {
                return Ok(false);
            }
            let pos = (self.tail as usize) & (cap - 1);
            let mut h = [0u8; REC_HDR - 8];
            // SAFETY: pos is 64-aligned below cap, so the header lies in the ring; the
            // acquire load of the stamp ordered the producer's header writes before.
            unsafe { self.mem.read(pos + 8, &mut h) };
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
                        mem: &self.mem,
                        at: pos + REC_HDR,
                        len,
                    },
                );
            }
            self.tail = self.tail.wrapping_add(rec as u64);
            // Release: our reads of the record happen before the producer, seeing
            // this tail (acquire), overwrites the space.
            self.mem.tail().store(self.tail, Ordering::Release);
            if kind != PAD {
                return Ok(true);
            }
        }
    }
}

/// Pops one record from ring memory given as raw bytes (control block + data, as a
/// peer could have left it) and returns `(kind, tag, payload)`, `None` when no record
/// is published, or the error a corrupt ring gives. Never reads outside `bytes` and
/// never panics; the entry point for fuzzing the consumer.
///
/// `bytes` must hold `CTL + cap` bytes for a power-of-two `cap` >= 256 (the smallest
/// such length that fits is used; shorter input is [`Error::Protocol`]).
#[doc(hidden)]
pub fn pop_from_bytes(bytes: &[u8]) -> Result<Option<(u32, u64, Vec<u8>)>> {
    let mut cap = 256usize;
    while CTL + cap * 2 <= bytes.len() {
        cap *= 2;
    }
    if bytes.len() < CTL + cap {
        return Err(Error::Protocol(format!(
            "ring memory of {} bytes: at least {} needed",
            bytes.len(),
            CTL + 256
        )));
    }
    // An aligned private copy: the ring code reads words in place.
    let mut words = vec![0u64; (CTL + cap) / 8];
    let tail = u64::from_le_bytes(bytes[64..72].try_into().expect("8 bytes"));
    if tail % ALIGN as u64 != 0 {
        return Err(Error::Protocol(format!(
            "ring tail {tail} is not on a record boundary"
        )));
    }
    // SAFETY: `words` has exactly CTL + cap bytes; `bytes` has at least that many.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), words.as_mut_ptr().cast::<u8>(), CTL + cap)
    };
    // SAFETY: `words` is 8-aligned; the ring code needs 64 only for cache lines (no
    // access is wider than 8 bytes), it is valid for CTL + cap bytes and outlives `c`,
    // and nothing else uses it.
    let mut c =
        Consumer::with_mem(unsafe { ShmRing::new_unaligned(words.as_mut_ptr().cast(), cap) });
    let mut out = None;
    c.pop(|k, t, r| out = Some((k, t, r.to_vec())))?;
    Ok(out)
}

impl ShmRing {
    /// Like [`ShmRing::new`] for 8-aligned memory (only for [`pop_from_bytes`]).
    ///
    /// # Safety
    /// `base` 8-aligned and valid for `CTL + cap` bytes while the ring is used.
    unsafe fn new_unaligned(base: *mut u8, cap: usize) -> ShmRing {
        debug_assert!(cap.is_power_of_two() && cap >= 256);
        ShmRing {
            base,
            // SAFETY: CTL is within the block the caller vouches for.
            data: unsafe { base.add(CTL) },
            cap,
        }
    }
}

#[cfg(all(test, not(loom)))]
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
                init(b, cap, 0x5a17_0000_0000_0001);
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

    #[test]
    fn pop_from_bytes_reads_a_real_ring_image() {
        let cap = 256;
        let mut g = Guarded::new(cap);
        let base = g.base();
        // SAFETY: `g` outlives the producer; one producer.
        let mut p = unsafe { Producer::new(base, cap) };
        assert_eq!(pop_from_bytes(&image(base, cap)).unwrap(), None, "empty");
        assert!(p.try_push(9, 77, &[b"hello", b" ring"]));
        let got = pop_from_bytes(&image(base, cap)).unwrap();
        assert_eq!(got, Some((9, 77, b"hello ring".to_vec())));
        // Too short for any ring, and a tail off a record boundary.
        assert!(pop_from_bytes(&[0u8; 100]).is_err());
        let mut bad = image(base, cap);
        bad[64] = 3;
        assert!(pop_from_bytes(&bad).is_err());
    }

    fn image(base: *mut u8, cap: usize) -> Vec<u8> {
        // SAFETY: the ring memory is CTL + cap bytes from `base`.
        unsafe { std::slice::from_raw_parts(base, CTL + cap) }.to_vec()
    }

    proptest::proptest! {
        #[test]
        fn pop_from_random_bytes_never_panics(
            b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1200),
            tail_line in 0u64..64,
            salt: u64,
        ) {
            let _ = pop_from_bytes(&b);
            // Random rings with a plausible tail and salt reach the header checks.
            let mut b = b;
            if b.len() >= CTL + 256 {
                b[64..72].copy_from_slice(&(tail_line * 64).to_le_bytes());
                b[8..16].copy_from_slice(&salt.to_le_bytes());
                let pos = (tail_line as usize * 64) % 256;
                let stamp = (tail_line * 64 + 1) ^ salt;
                b[CTL + pos..CTL + pos + 8].copy_from_slice(&stamp.to_le_bytes());
                let _ = pop_from_bytes(&b);
            }
        }
    }
}

/// Ring memory for the loom models: loom atomics for the words and one loom cell per
/// 64-byte line, so that loom reports any read of a line that is not ordered after
/// the write it should see (and any write into a line a reader may still use).
#[cfg(all(test, loom))]
mod loom_mem {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::AtomicU64 as LoomU64;

    impl Word for LoomU64 {
        fn load(&self, order: Ordering) -> u64 {
            LoomU64::load(self, order)
        }
        fn store(&self, value: u64, order: Ordering) {
            LoomU64::store(self, value, order)
        }
    }

    struct Inner {
        head: LoomU64,
        salt: LoomU64,
        tail: LoomU64,
        stamps: Vec<LoomU64>,
        lines: Vec<UnsafeCell<[u8; ALIGN]>>,
    }

    // SAFETY: the cells are only accessed through loom's `with`/`with_mut`, which
    // check that no two threads touch a line without ordering between them.
    unsafe impl Sync for Inner {}
    // SAFETY: as above; everything in it is owned data.
    unsafe impl Send for Inner {}

    /// See the module-level comment of `loom_mem`.
    #[derive(Clone)]
    pub(crate) struct LoomMem(std::sync::Arc<Inner>);

    impl LoomMem {
        pub(crate) fn new(cap: usize) -> LoomMem {
            let lines = cap / ALIGN;
            LoomMem(std::sync::Arc::new(Inner {
                head: LoomU64::new(0),
                salt: LoomU64::new(0),
                tail: LoomU64::new(0),
                stamps: (0..lines).map(|_| LoomU64::new(0)).collect(),
                lines: (0..lines).map(|_| UnsafeCell::new([0; ALIGN])).collect(),
            }))
        }
    }

    impl RingMem for LoomMem {
        type Word = LoomU64;
        fn cap(&self) -> usize {
            self.0.lines.len() * ALIGN
        }
        fn head(&self) -> &LoomU64 {
            &self.0.head
        }
        fn salt(&self) -> &LoomU64 {
            &self.0.salt
        }
        fn tail(&self) -> &LoomU64 {
            &self.0.tail
        }
        fn stamp(&self, pos: usize) -> &LoomU64 {
            &self.0.stamps[pos / ALIGN]
        }
        unsafe fn write(&self, at: usize, src: &[u8]) {
            let mut done = 0;
            while done < src.len() {
                let (line, off) = ((at + done) / ALIGN, (at + done) % ALIGN);
                let n = (ALIGN - off).min(src.len() - done);
                self.0.lines[line].with_mut(|p| {
                    // SAFETY: loom hands out the line exclusively (and checks it).
                    unsafe { (&mut *p)[off..off + n].copy_from_slice(&src[done..done + n]) }
                });
                done += n;
            }
        }
        unsafe fn read(&self, at: usize, dst: &mut [u8]) {
            let mut done = 0;
            while done < dst.len() {
                let (line, off) = ((at + done) / ALIGN, (at + done) % ALIGN);
                let n = (ALIGN - off).min(dst.len() - done);
                self.0.lines[line].with(|p| {
                    // SAFETY: loom checks that no write to the line is concurrent.
                    dst[done..done + n].copy_from_slice(unsafe { &(&*p)[off..off + n] })
                });
                done += n;
            }
        }
    }
}

/// Loom models of the ring: every interleaving of one producer and one consumer
/// (bounded by the preemption bound), with loom checking each line's accesses.
/// Run with `RUSTFLAGS="--cfg loom" cargo test --release --lib -p hpc-rdma loom`.
#[cfg(all(test, loom))]
mod loom_models {
    use super::loom_mem::LoomMem;
    use super::*;

    fn payload(i: usize, len: usize) -> Vec<u8> {
        (0..len).map(|j| (i * 31 + j) as u8).collect()
    }

    /// Records of 1 and 2 lines through a 4-line ring: the producer must wait for
    /// the consumer's frees, wrap with a padding record, and reuse lines the consumer
    /// has just read. Every record arrives whole, in order, exactly once.
    #[test]
    fn loom_ring_spsc_wraps_and_reuses_lines() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(|| {
            let cap = 256;
            let mem = LoomMem::new(cap);
            init_mem(&mem, 0x5eed);
            let sizes = [8usize, 40, 8, 40];
            let mut prod = Producer::with_mem(mem.clone());
            let mut cons = Consumer::with_mem(mem);
            let t = loom::thread::spawn(move || {
                for (i, &len) in sizes.iter().enumerate() {
                    let data = payload(i, len);
                    while !prod.try_push(1, i as u64, &[&data[..len / 2], &data[len / 2..]]) {
                        loom::thread::yield_now();
                    }
                }
            });
            for (i, &len) in sizes.iter().enumerate() {
                loop {
                    let mut got = None;
                    if cons
                        .pop(|k, tag, r| got = Some((k, tag, r.to_vec())))
                        .unwrap()
                    {
                        assert_eq!(got, Some((1, i as u64, payload(i, len))));
                        break;
                    }
                    loom::thread::yield_now();
                }
            }
            t.join().unwrap();
            assert!(!cons.has_data());
        });
    }

    /// A probe on a third thread (the shm backend's lock-free look) sees a record
    /// only once it is fully published.
    #[test]
    fn loom_probe_never_sees_a_half_written_record() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let mem = LoomMem::new(256);
            init_mem(&mem, 7);
            let mut prod = Producer::with_mem(mem.clone());
            let mut cons = Consumer::with_mem(mem);
            let probe = cons.probe();
            let t = loom::thread::spawn(move || {
                assert!(prod.try_push(2, 9, &[&[5u8; 16]]));
            });
            if probe.has_data() {
                let mut got = None;
                assert!(cons.pop(|_, tag, r| got = Some((tag, r.to_vec()))).unwrap());
                assert_eq!(got, Some((9, vec![5u8; 16])));
            }
            t.join().unwrap();
        });
    }
}
