//! The shared-memory control plane of a communicator ("board").
//!
//! One file in `/dev/shm`, mapped by every rank of a communicator (all on
//! one node). It holds, per rank, its pid, a futex *doorbell* and a waiter
//! count, and per ordered pair of ranks a single-producer single-consumer
//! ring of small descriptors (`RTS`: "a message of `len` bytes for you is at
//! `addr` in my address space", `FIN`: "I have read it").
//!
//! Data moves in one of two ways:
//!
//! - **Staged** (`DATA`): each rank owns a staging area on the board, cut into
//!   [`STAGE_SLOT`]-byte slots. The sender copies a message chunk by chunk into
//!   free slots of its own area and announces each chunk; the receiver copies
//!   it out as soon as it is announced (so the two copies run in a pipeline on
//!   two cores) and hands the slot back (`FREE`). Two `memcpy`s beat one
//!   cross-memory-attach copy wherever `process_vm_readv` is slow: it pins
//!   every page in the kernel, and on virtual machines it runs at a quarter of
//!   `memcpy` speed (12.8 against 44 GB/s for 1 MiB on the development VM).
//! - **Single copy** (`RTS`, and `TAIL` for what did not fit the free slots):
//!   the receiver copies with one `process_vm_readv` straight from the
//!   sender's buffer into its own (Linux cross-memory attach, what Open MPI's
//!   `vader` uses for large messages). A send never waits for a slot, so the
//!   staging area cannot add a dependency between ranks that the single-copy
//!   path does not have.
//!
//! A send that went whole into the slots completes at once (its buffer is no
//! longer needed); one read by cross-memory attach completes on the
//! receiver's `FIN`, after the whole message landed. A size mismatch is
//! answered with a `FIN` that rejects the message either way.
//!
//! Whoever pushes a descriptor other than `FREE` rings the receiver's doorbell
//! (a futex in shared memory), so a waiting thread or progress agent sleeps in
//! `futex_wait` until there is work and never spins for long; whether the ring
//! wakes the agent depends on the work (see `Core::flush_peer`). Why no
//! wake-up is lost, and what each remaining timeout guards against, is argued
//! in `SLEEP.md` beside this file and checked by the loom models at its end.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

// The board's words are std atomics in the shared mapping; under `cfg(loom)`
// they are loom's, in memory of the model's own (`loom_mem`), so that the loom
// models explore every interleaving of the rings, slots and doorbells.
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64};

const MAGIC: u64 = 0x6870_632d_636f_6c6c; // "hpc-coll"
/// Descriptors per ring (4 in the loom models, whose rings fill and wrap).
#[cfg(not(loom))]
pub(crate) const RING_CAP: u64 = 64;
#[cfg(loom)]
pub(crate) const RING_CAP: u64 = 4;
const HEADER: usize = 64;
const RANK_SLOT: usize = 64;
const DESC: usize = 32;
/// A ring's header: the consumer's `head` and the producer's `tail` on cache
/// lines of their own, so that neither side's write takes the line the other
/// is about to read or write.
const RING_HEADER: usize = 128;
const RING_BYTES: usize = RING_HEADER + RING_CAP as usize * DESC;

/// Descriptor kinds.
pub(crate) const RTS: u32 = 1;
pub(crate) const FIN: u32 = 2;
/// A staged chunk: `addr` = slot | chunk index << 16, `len` = message length.
pub(crate) const DATA: u32 = 3;
/// The rest of a partly staged message, by cross-memory attach: `addr` points
/// at its first byte not staged, `len` = message length.
pub(crate) const TAIL: u32 = 4;
/// Staging slots handed back to their owner: `addr` = a mask of slots.
pub(crate) const FREE: u32 = 5;

/// Bytes of one staging slot (the chunk size of staged messages).
pub(crate) const STAGE_SLOT: usize = 16 * 1024;

/// Staging slots per rank (at most 64: a `FREE` carries them as a bit mask):
/// 1 MiB each on small boards, less on large ones
/// (at most 16 MiB in all for the ranks together, at least 4 slots each), so
/// that a board for many ranks still fits a container's small `/dev/shm`
/// (only the pages in use take memory).
pub(crate) fn stage_slots(size: usize) -> usize {
    ((16 << 20) / STAGE_SLOT / size.max(1)).clamp(4, 64)
}

/// One ring entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Desc {
    pub kind: u32,
    pub tag: u64,
    pub addr: u64,
    pub len: u64,
}

/// A mapped board.
pub(crate) struct Board {
    #[cfg(not(loom))]
    base: *mut u8,
    #[cfg(loom)]
    mem: loom_mem::Mem,
    len: usize,
    size: usize,
    path: PathBuf,
}

// SAFETY: the mapping is shared memory accessed only through atomics (slots,
// ring indices) and through ring entries whose ownership the SPSC protocol
// hands over with acquire/release ordering; the pointer stays valid until
// `Drop` unmaps it.
unsafe impl Send for Board {}
// SAFETY: as above; all shared accesses are atomic or protocol-owned.
unsafe impl Sync for Board {}

fn stage_off(size: usize) -> usize {
    HEADER + size * RANK_SLOT + size * size * RING_BYTES
}

fn bytes_for(size: usize) -> usize {
    stage_off(size) + size * stage_slots(size) * STAGE_SLOT
}

impl Board {
    /// Creates and maps a new board file for `size` ranks.
    pub(crate) fn create(path: &Path, size: usize) -> io::Result<Board> {
        // Only this user's processes map a board (0600): it holds the ranks' rings.
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        f.set_len(bytes_for(size) as u64)?;
        let b = Board::map(&f, path, size)?;
        b.u64_at(8).store(size as u64, Ordering::Relaxed);
        b.u64_at(0).store(MAGIC, Ordering::Release);
        Ok(b)
    }

    /// Maps an existing board file.
    pub(crate) fn open(path: &Path, size: usize) -> io::Result<Board> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        if f.metadata()?.len() != bytes_for(size) as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("board {} is not for {size} ranks", path.display()),
            ));
        }
        let b = Board::map(&f, path, size)?;
        if b.u64_at(0).load(Ordering::Acquire) != MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "bad board magic",
            ));
        }
        Ok(b)
    }

    #[cfg(not(loom))]
    fn map(f: &std::fs::File, path: &Path, size: usize) -> io::Result<Board> {
        let len = bytes_for(size);
        let p = crate::map::map_shared(f.as_raw_fd(), len)?;
        Ok(Board {
            base: p,
            len,
            size,
            path: path.to_path_buf(),
        })
    }

    /// Under loom the file only names the board; its memory is the model's.
    #[cfg(loom)]
    fn map(f: &std::fs::File, path: &Path, size: usize) -> io::Result<Board> {
        let _ = f.as_raw_fd();
        let mut b = Board::in_memory(size);
        b.path = path.to_path_buf();
        Ok(b)
    }

    /// A board for `size` ranks in the loom model's memory.
    #[cfg(loom)]
    pub(crate) fn in_memory(size: usize) -> Board {
        let b = Board {
            mem: loom_mem::Mem::new(stage_off(size), size * stage_slots(size)),
            len: bytes_for(size),
            size,
            path: PathBuf::new(),
        };
        b.u64_at(8).store(size as u64, Ordering::Relaxed);
        b.u64_at(0).store(MAGIC, Ordering::Release);
        b
    }

    /// The file name (to unlink once every rank mapped it).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    #[cfg(not(loom))]
    fn u64_at(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= self.len);
        // SAFETY: in bounds and 8-aligned (page-aligned base, aligned offsets); the
        // mapping outlives `&self`; shared words are only accessed atomically.
        unsafe { &*self.base.add(off).cast::<AtomicU64>() }
    }

    #[cfg(not(loom))]
    fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off % 4 == 0 && off + 4 <= self.len);
        // SAFETY: as in `u64_at`.
        unsafe { &*self.base.add(off).cast::<AtomicU32>() }
    }

    #[cfg(loom)]
    fn u64_at(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= self.len);
        self.mem.u64_at(off)
    }

    #[cfg(loom)]
    fn u32_at(&self, off: usize) -> &AtomicU32 {
        self.mem.u32_at(off)
    }

    fn slot(&self, rank: usize) -> usize {
        HEADER + rank * RANK_SLOT
    }

    /// Publishes this rank's pid.
    pub(crate) fn set_pid(&self, rank: usize, pid: u32) {
        self.u32_at(self.slot(rank)).store(pid, Ordering::Release);
    }

    /// A rank's pid (0 until published).
    pub(crate) fn pid(&self, rank: usize) -> u32 {
        self.u32_at(self.slot(rank)).load(Ordering::Acquire)
    }

    /// A rank's doorbell (futex word).
    pub(crate) fn doorbell(&self, rank: usize) -> &AtomicU32 {
        self.u32_at(self.slot(rank) + 4)
    }

    fn waiters(&self, rank: usize) -> &AtomicU32 {
        self.u32_at(self.slot(rank) + 8)
    }

    /// The progress agent's own futex word: it sleeps there, not on the
    /// doorbell, so that a ring does not wake it while an application thread
    /// of its process waits (and advances the collectives itself).
    fn agent_bell(&self, rank: usize) -> &AtomicU32 {
        self.u32_at(self.slot(rank) + 12)
    }

    fn agent_sleeping(&self, rank: usize) -> &AtomicU32 {
        self.u32_at(self.slot(rank) + 16)
    }

    fn in_wait(&self, rank: usize) -> &AtomicU32 {
        self.u32_at(self.slot(rank) + 20)
    }

    /// Non-zero while `rank` has a collective with a round still to post that
    /// its agent would send (see `OpData::wake_until`): then every ring wakes
    /// an eager agent (an arrival may let it post that round).
    fn agent_wanted(&self, rank: usize) -> &AtomicU32 {
        self.u32_at(self.slot(rank) + 24)
    }

    /// Non-zero when `rank`'s agent is woken by rings at all (`AgentWake::Eager`).
    fn agent_eager(&self, rank: usize) -> &AtomicU32 {
        self.u32_at(self.slot(rank) + 28)
    }

    /// Non-zero while `rank`'s agent sleeps with nothing in flight (it no
    /// longer polls, so a collective posted then must wake it).
    fn idle_word(&self, rank: usize) -> &AtomicU32 {
        self.u32_at(self.slot(rank) + 32)
    }

    /// Marks `rank`'s agent idle or not (see [`Board::agent_idle`]).
    pub(crate) fn set_agent_idle(&self, rank: usize, idle: bool) {
        self.idle_word(rank)
            .store(u32::from(idle), Ordering::SeqCst);
    }

    /// Whether `rank`'s agent sleeps with nothing in flight: whoever posts a
    /// collective that is not finished at once wakes it.
    pub(crate) fn agent_idle(&self, rank: usize) -> bool {
        self.idle_word(rank).load(Ordering::SeqCst) != 0
    }

    /// Says whether rings may wake `rank`'s agent (`AgentWake::Eager`).
    pub(crate) fn set_agent_eager(&self, rank: usize, eager: bool) {
        self.agent_eager(rank)
            .store(u32::from(eager), Ordering::SeqCst);
    }

    /// Says whether every ring should wake `rank`'s agent (see
    /// [`Board::ring_quietly`]).
    pub(crate) fn want_agent(&self, rank: usize, wanted: bool) {
        let w = self.agent_wanted(rank);
        if (w.load(Ordering::Relaxed) != 0) != wanted {
            w.store(u32::from(wanted), Ordering::SeqCst);
        }
    }

    /// Rings `rank`'s doorbell, waking its sleeping waiters, and its agent if
    /// the agent is eager and no application thread of `rank` is in `wait`.
    pub(crate) fn ring(&self, rank: usize) {
        self.doorbell(rank).fetch_add(1, Ordering::SeqCst);
        if self.waiters(rank).load(Ordering::SeqCst) > 0 {
            self.futex_wake(self.doorbell(rank));
        }
        self.wake_idle_agent(rank);
    }

    /// Rings `rank`'s doorbell for its application threads: those sleeping in
    /// `wait` wake; its agent wakes only if `rank` asked for every ring
    /// ([`Board::want_agent`]), and otherwise sees the ring on its next pass.
    pub(crate) fn ring_quietly(&self, rank: usize) {
        self.doorbell(rank).fetch_add(1, Ordering::SeqCst);
        if self.waiters(rank).load(Ordering::SeqCst) > 0 {
            self.futex_wake(self.doorbell(rank));
        }
        if self.agent_wanted(rank).load(Ordering::SeqCst) != 0 {
            self.wake_idle_agent(rank);
        }
    }

    /// Wakes `rank`'s agent if it is eager, sleeps, and no application thread
    /// of `rank` is in `wait` (which advances the collectives itself).
    fn wake_idle_agent(&self, rank: usize) {
        if self.agent_eager(rank).load(Ordering::SeqCst) != 0
            && self.agent_sleeping(rank).load(Ordering::SeqCst) > 0
            && self.in_wait(rank).load(Ordering::SeqCst) == 0
        {
            self.wake_agent(rank);
        }
    }

    /// Wakes `rank`'s progress agent.
    pub(crate) fn wake_agent(&self, rank: usize) {
        // The doorbell too: an agent between its last look at the doorbell and
        // its sleep then does not sleep (see `agent_sleep`).
        self.doorbell(rank).fetch_add(1, Ordering::SeqCst);
        self.agent_bell(rank).fetch_add(1, Ordering::SeqCst);
        self.futex_wake(self.agent_bell(rank));
    }

    /// Whether an application thread of `rank` is in `wait`.
    pub(crate) fn someone_waits(&self, rank: usize) -> bool {
        self.in_wait(rank).load(Ordering::SeqCst) > 0
    }

    /// The agent's sleep: until the doorbell moves past `seen` while nobody
    /// waits, [`Board::wake_agent`], or `timeout`. `false` if the timeout
    /// ended it.
    pub(crate) fn agent_sleep(&self, rank: usize, seen: u32, timeout: Duration) -> bool {
        self.agent_sleeping(rank).fetch_add(1, Ordering::SeqCst);
        let bell = self.agent_bell(rank).load(Ordering::SeqCst);
        // Checked after announcing the sleep: a ring after this point bumps the bell,
        // so the futex wait below returns at once instead of missing it.
        let woken =
            if self.doorbell(rank).load(Ordering::SeqCst) == seen || self.someone_waits(rank) {
                self.futex_wait(self.agent_bell(rank), bell, timeout)
            } else {
                true
            };
        self.agent_sleeping(rank).fetch_sub(1, Ordering::SeqCst);
        woken
    }

    /// Marks an application thread of `rank` as in `wait` until the guard
    /// drops; the agent is woken when the last one leaves.
    pub(crate) fn enter_wait(&self, rank: usize) -> InWait<'_> {
        self.in_wait(rank).fetch_add(1, Ordering::SeqCst);
        InWait {
            board: self,
            rank,
            wake: true,
        }
    }

    /// Sleeps until `rank`'s doorbell differs from `seen` or `timeout` passes.
    pub(crate) fn sleep(&self, rank: usize, seen: u32, timeout: Duration) {
        self.waiters(rank).fetch_add(1, Ordering::SeqCst);
        self.futex_wait(self.doorbell(rank), seen, timeout);
        self.waiters(rank).fetch_sub(1, Ordering::SeqCst);
    }

    /// Waits until `rank`'s doorbell differs from `seen`: polls it for up to
    /// `spin` (no system call, so a peer's answer is seen within nanoseconds),
    /// then sleeps on the futex for at most `timeout`.
    pub(crate) fn wait_ring(&self, rank: usize, seen: u32, spin: Duration, timeout: Duration) {
        if !spin.is_zero() {
            let t0 = std::time::Instant::now();
            loop {
                for _ in 0..64 {
                    if self.doorbell(rank).load(Ordering::Acquire) != seen || self.incoming(rank) {
                        return;
                    }
                    std::hint::spin_loop();
                }
                if t0.elapsed() >= spin {
                    break;
                }
            }
        }
        self.sleep(rank, seen, timeout);
    }

    fn ring_off(&self, src: usize, dst: usize) -> usize {
        HEADER + self.size * RANK_SLOT + (dst * self.size + src) * RING_BYTES
    }

    /// Number of staging slots each rank owns.
    pub(crate) fn slots(&self) -> usize {
        stage_slots(self.size)
    }

    /// Offset of `rank`'s staging slot `slot` ([`STAGE_SLOT`] bytes) in the board.
    ///
    /// Only the owner writes a slot, and only while it is free; a reader
    /// touches it only between the `DATA` that announced it and the `FREE`
    /// that returns it (ordered by the rings' acquire/release).
    fn stage_at(&self, rank: usize, slot: usize, len: usize) -> usize {
        assert!(
            rank < self.size && slot < self.slots() && len <= STAGE_SLOT,
            "staging slot out of range"
        );
        stage_off(self.size) + (rank * self.slots() + slot) * STAGE_SLOT
    }

    /// Copies `len` bytes from `src` into `rank`'s staging slot `slot`.
    ///
    /// # Safety
    /// `src` is valid for `len` bytes; the caller is `rank` and the slot is free
    /// (not announced by a `DATA` that no `FREE` has answered yet).
    pub(crate) unsafe fn stage_write(&self, rank: usize, slot: usize, src: *const u8, len: usize) {
        let off = self.stage_at(rank, slot, len);
        #[cfg(not(loom))]
        // SAFETY: off + len <= bytes_for(size), the mapping's length; the slot is
        // the caller's alone (free); `src` is the caller's own memory.
        unsafe {
            std::ptr::copy_nonoverlapping(src, self.base.add(off), len)
        };
        #[cfg(loom)]
        // SAFETY: as above; loom checks that no read of the slot is concurrent.
        unsafe {
            self.mem
                .stage_write(rank * self.slots() + slot, src, len, off)
        };
    }

    /// Copies `len` bytes of `rank`'s staging slot `slot` to `dst`.
    ///
    /// # Safety
    /// `dst` is valid for `len` bytes of writes; the slot was announced to the
    /// caller by a `DATA` it popped, and it has not handed it back (`FREE`).
    pub(crate) unsafe fn stage_read(&self, rank: usize, slot: usize, dst: *mut u8, len: usize) {
        let off = self.stage_at(rank, slot, len);
        #[cfg(not(loom))]
        // SAFETY: off + len <= the mapping's length; the owner does not write the
        // slot until it gets it back; `dst` is the caller's own memory.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.add(off), dst, len)
        };
        #[cfg(loom)]
        // SAFETY: as above; loom checks that no write of the slot is concurrent.
        unsafe {
            self.mem
                .stage_read(rank * self.slots() + slot, dst, len, off)
        };
    }

    /// Pushes a descriptor on the ring `src -> dst`; `false` if it is full.
    /// Only rank `src`'s process may push on it, one thread at a time.
    ///
    /// An entry's first word holds its kind and, above, the low 32 bits of
    /// its position + 1, written last (release): the consumer reads the entry
    /// it expects next and needs neither the producer's `tail` nor its cache
    /// line, one transfer between the cores fewer per descriptor.
    pub(crate) fn push(&self, src: usize, dst: usize, d: Desc) -> bool {
        let off = self.ring_off(src, dst);
        let (head, tail) = (self.u64_at(off), self.u64_at(off + 64));
        let t = tail.load(Ordering::Relaxed);
        if t - head.load(Ordering::Acquire) >= RING_CAP {
            return false;
        }
        let e = off + RING_HEADER + (t % RING_CAP) as usize * DESC;
        self.u64_at(e + 8).store(d.tag, Ordering::Relaxed);
        self.u64_at(e + 16).store(d.addr, Ordering::Relaxed);
        self.u64_at(e + 24).store(d.len, Ordering::Relaxed);
        self.u64_at(e)
            .store(stamp(t) | d.kind as u64, Ordering::Release);
        tail.store(t + 1, Ordering::Relaxed);
        true
    }

    /// Whether a descriptor waits on any ring to `dst`: read where it will be
    /// written, so that a spinning receiver sees it one transfer between the
    /// cores earlier than the doorbell that follows it.
    fn incoming(&self, dst: usize) -> bool {
        (0..self.size).any(|src| {
            let off = self.ring_off(src, dst);
            let h = self.u64_at(off).load(Ordering::Relaxed);
            let e = off + RING_HEADER + (h % RING_CAP) as usize * DESC;
            self.u64_at(e).load(Ordering::Relaxed) & !0xffff_ffff == stamp(h)
        })
    }

    /// Pops a descriptor from the ring `src -> dst` (only rank `dst` pops).
    pub(crate) fn pop(&self, src: usize, dst: usize) -> Option<Desc> {
        let off = self.ring_off(src, dst);
        let head = self.u64_at(off);
        let h = head.load(Ordering::Relaxed);
        let e = off + RING_HEADER + (h % RING_CAP) as usize * DESC;
        let first = self.u64_at(e).load(Ordering::Acquire);
        // An entry written for an earlier lap carries an older stamp (a fresh
        // board's zeros match no position: stamps start at 1).
        if first & !0xffff_ffff != stamp(h) {
            return None;
        }
        let d = Desc {
            kind: first as u32,
            tag: self.u64_at(e + 8).load(Ordering::Relaxed),
            addr: self.u64_at(e + 16).load(Ordering::Relaxed),
            len: self.u64_at(e + 24).load(Ordering::Relaxed),
        };
        head.store(h + 1, Ordering::Release);
        Some(d)
    }
}

impl Board {
    /// Sleeps while `word` holds `seen`, for at most `timeout`; `false` if the
    /// timeout ended the sleep.
    #[cfg(not(loom))]
    fn futex_wait(&self, word: &AtomicU32, seen: u32, timeout: Duration) -> bool {
        futex_wait(word, seen, timeout)
    }

    /// Wakes every thread asleep on `word`.
    #[cfg(not(loom))]
    fn futex_wake(&self, word: &AtomicU32) {
        futex_wake(word)
    }

    /// The futex of the loom models: the word is compared under the lock that
    /// wakers take, as the kernel compares it under its hash bucket's lock;
    /// there is no timeout, so a wake-up the protocol loses leaves the sleeper
    /// asleep for good, which loom reports as a deadlock.
    #[cfg(loom)]
    fn futex_wait(&self, word: &AtomicU32, seen: u32, _timeout: Duration) -> bool {
        self.mem.futex_wait(word, seen)
    }

    #[cfg(loom)]
    fn futex_wake(&self, _word: &AtomicU32) {
        self.mem.futex_wake()
    }
}

/// The stamp of the entry at ring position `pos`: `pos + 1` (mod 2^32) in
/// the upper half of its first word. Entries of the same slot are `RING_CAP`
/// positions apart, so a stale one never carries the stamp expected next.
fn stamp(pos: u64) -> u64 {
    ((pos + 1) & 0xffff_ffff) << 32
}

#[cfg(not(loom))]
impl Drop for Board {
    fn drop(&mut self) {
        // An unmap that fails leaves the mapping in place: nothing to undo.
        // SAFETY: unmaps exactly the mapping made in `map`; no reference into it
        // outlives `self` (all accessors borrow `self`).
        let _ = unsafe { rustix::mm::munmap(self.base.cast(), self.len) };
    }
}

/// Sleeps while `word` holds `seen`, for at most `timeout`; `false` if the
/// timeout ended the sleep (`true`: woken, or the word had moved already).
#[cfg(not(loom))]
fn futex_wait(word: &AtomicU32, seen: u32, timeout: Duration) -> bool {
    use rustix::thread::futex;
    let ts = futex::Timespec {
        tv_sec: futex::Secs::try_from(timeout.as_secs()).unwrap_or(futex::Secs::MAX),
        tv_nsec: futex::Nsecs::from(timeout.subsec_nanos()),
    };
    // Not PRIVATE: the word lies in a shared mapping, other processes wake it.
    !matches!(
        futex::wait(word, futex::Flags::empty(), seen, Some(&ts)),
        Err(rustix::io::Errno::TIMEDOUT)
    )
}

/// See [`Board::enter_wait`].
pub(crate) struct InWait<'a> {
    board: &'a Board,
    rank: usize,
    /// Whether to wake the agent when the last waiter leaves: rings that
    /// arrived meanwhile may concern other collectives still in flight.
    pub wake: bool,
}

impl Drop for InWait<'_> {
    fn drop(&mut self) {
        if self.board.in_wait(self.rank).fetch_sub(1, Ordering::SeqCst) == 1 && self.wake {
            self.board.wake_agent(self.rank);
        }
    }
}

#[cfg(not(loom))]
fn futex_wake(word: &AtomicU32) {
    // Not PRIVATE (see `futex_wait`); wakes every waiter (the count is an
    // `int` to the kernel: `i32::MAX`, not `u32::MAX`, which reads as -1). A failure can only
    // mean a bad address, which a `&AtomicU32` is not.
    let _ =
        rustix::thread::futex::wake(word, rustix::thread::futex::Flags::empty(), i32::MAX as u32);
}

/// Copies `len` bytes at `remote` in process `pid` to `local` (one copy,
/// `process_vm_readv`). Loops over partial transfers.
///
/// # Safety
/// `local` must be valid for `len` bytes of writes and not aliased.
pub(crate) unsafe fn cma_read(pid: u32, remote: u64, local: *mut u8, len: usize) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let l = libc::iovec {
            // SAFETY: `done < len`, within the caller's buffer.
            iov_base: unsafe { local.add(done) }.cast(),
            iov_len: len - done,
        };
        let r = libc::iovec {
            iov_base: (remote as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: the local iovec lies in the caller's buffer (see the function's
        // contract); the remote one is only read by the kernel in the other process.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &l, 1, &r, 1, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "short CMA read",
            ));
        }
        done += n as usize;
    }
    Ok(())
}

/// Copies `len` bytes from `local` to `remote` in process `pid` (`process_vm_writev`).
///
/// # Safety
/// `local` must be valid for `len` bytes of reads. The caller vouches that the
/// remote range is memory the other process lent for this purpose.
pub(crate) unsafe fn cma_write(
    pid: u32,
    local: *const u8,
    remote: u64,
    len: usize,
) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let l = libc::iovec {
            // SAFETY: within the caller's buffer.
            iov_base: unsafe { local.add(done) } as *mut libc::c_void,
            iov_len: len - done,
        };
        let r = libc::iovec {
            iov_base: (remote as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: the kernel reads the local range (valid per contract) and writes the
        // remote one in the other process.
        let n = unsafe { libc::process_vm_writev(pid as libc::pid_t, &l, 1, &r, 1, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "short CMA write",
            ));
        }
        done += n as usize;
    }
    Ok(())
}

/// Whether process `pid` is gone (no `/proc` entry, or a zombie).
///
/// Only an answer that says so counts: a read of `/proc` that fails for
/// another reason (no file descriptor or memory left, on a loaded machine)
/// says nothing about the process, and a rank wrongly declared lost fails a
/// collective that would have finished; the kernel is then asked directly.
pub(crate) fn pid_dead(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    let gone = |e: &io::Error| {
        e.kind() == io::ErrorKind::NotFound
            || e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error())
    };
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(e) if gone(&e) => true,
        Err(_) => no_such_process(pid),
        Ok(s) => match s
            .rsplit_once(')')
            .and_then(|(_, r)| r.trim_start().chars().next())
        {
            Some(state) => matches!(state, 'Z' | 'X'),
            None => no_such_process(pid),
        },
    }
}

/// Whether the kernel says there is no process `pid` (`kill(pid, 0)`).
fn no_such_process(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    // Signal 0 sends nothing; it only checks that the process exists.
    rustix::process::test_kill_process(pid) == Err(rustix::io::Errno::SRCH)
}

/// The board's memory in the loom models: loom atomics for the control words
/// (indexed by their offset in a real board), one loom cell per staging slot,
/// and a lock and condition variable for the futexes.
#[cfg(loom)]
mod loom_mem {
    use super::{AtomicU32, AtomicU64, Ordering, HEADER, RANK_SLOT, STAGE_SLOT};
    use loom::cell::UnsafeCell;
    use loom::sync::{Condvar, Mutex};

    pub(crate) struct Mem {
        w64: Vec<AtomicU64>,
        w32: Vec<AtomicU32>,
        slots: Vec<UnsafeCell<Vec<u8>>>,
        lock: Mutex<()>,
        cv: Condvar,
    }

    // SAFETY: the cells are only accessed through loom's `with`/`with_mut`, which
    // check that no two threads touch a slot without ordering between them.
    unsafe impl Sync for Mem {}
    // SAFETY: as above; everything in it is owned data.
    unsafe impl Send for Mem {}

    impl Mem {
        /// Words for a control area of `ctl` bytes, `slots` staging slots.
        pub(crate) fn new(ctl: usize, slots: usize) -> Mem {
            let m = Mem {
                w64: (0..ctl / 8).map(|_| AtomicU64::new(0)).collect(),
                // The u32 words are the ranks' (`HEADER..`): stored densely from there.
                w32: (0..(ctl - HEADER) / 4).map(|_| AtomicU32::new(0)).collect(),
                slots: (0..slots)
                    .map(|_| UnsafeCell::new(vec![0; STAGE_SLOT]))
                    .collect(),
                lock: Mutex::new(()),
                cv: Condvar::new(),
            };
            // The ranks' words (doorbells, waiter counts, agent flags) are used in
            // store-then-load (Dekker) pairs with SeqCst on both sides. Loom lets a
            // SeqCst load read an initial value written by `new` even after a
            // later SeqCst store, which C++'s total order forbids (the initial
            // value happens before that store); writing the zeros again with
            // SeqCst puts them in that order, as they are in a real board (whose
            // file is zeroed before any rank maps it).
            for w in &m.w32 {
                w.store(0, Ordering::SeqCst);
            }
            m
        }

        pub(crate) fn u64_at(&self, off: usize) -> &AtomicU64 {
            &self.w64[off / 8]
        }

        pub(crate) fn u32_at(&self, off: usize) -> &AtomicU32 {
            debug_assert!(off >= HEADER && (off - HEADER) % RANK_SLOT < RANK_SLOT);
            &self.w32[(off - HEADER) / 4]
        }

        /// # Safety
        /// `src` is valid for `len <= STAGE_SLOT` bytes.
        pub(crate) unsafe fn stage_write(&self, i: usize, src: *const u8, len: usize, _off: usize) {
            self.slots[i].with_mut(|p| {
                // SAFETY: loom hands out the slot exclusively (and checks it); `src`
                // is valid for `len` bytes (caller).
                unsafe { (&mut *p)[..len].copy_from_slice(std::slice::from_raw_parts(src, len)) }
            });
        }

        /// # Safety
        /// `dst` is valid for `len <= STAGE_SLOT` bytes of writes.
        pub(crate) unsafe fn stage_read(&self, i: usize, dst: *mut u8, len: usize, _off: usize) {
            self.slots[i].with(|p| {
                // SAFETY: loom checks that no write of the slot is concurrent; `dst`
                // is valid for `len` bytes (caller).
                unsafe { std::slice::from_raw_parts_mut(dst, len).copy_from_slice(&(&*p)[..len]) }
            });
        }

        pub(crate) fn futex_wait(&self, word: &AtomicU32, seen: u32) -> bool {
            let g = self.lock.lock().unwrap();
            if word.load(Ordering::SeqCst) == seen {
                drop(self.cv.wait(g).unwrap());
            }
            true
        }

        pub(crate) fn futex_wake(&self) {
            let _g = self.lock.lock().unwrap();
            self.cv.notify_all();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn ring_hands_over_every_entry_between_threads_in_order() {
        use std::sync::Arc;
        let p = std::env::temp_dir().join(format!("hpc-board-spsc-{}", std::process::id()));
        let b = Arc::new(Board::create(&p, 2).unwrap());
        std::fs::remove_file(&p).unwrap();
        const N: u64 = 200_000;
        let producer = {
            let b = b.clone();
            std::thread::spawn(move || {
                for i in 0..N {
                    let d = Desc {
                        kind: DATA,
                        tag: i,
                        addr: !i,
                        len: i.wrapping_mul(0x9e37_79b9),
                    };
                    while !b.push(0, 1, d) {
                        std::hint::spin_loop();
                    }
                }
            })
        };
        let mut next = 0;
        while next < N {
            match b.pop(0, 1) {
                Some(d) => {
                    // Every field of every entry, in order: no torn or stale entry.
                    assert_eq!((d.kind, d.tag, d.addr), (DATA, next, !next));
                    assert_eq!(d.len, next.wrapping_mul(0x9e37_79b9));
                    next += 1;
                }
                None => std::hint::spin_loop(),
            }
        }
        producer.join().unwrap();
        assert!(b.pop(0, 1).is_none());
    }

    #[test]
    fn a_board_file_is_only_for_its_user() {
        use std::os::unix::fs::PermissionsExt;
        let p = std::env::temp_dir().join(format!("hpc-board-mode-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        let _b = Board::create(&p, 2).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        std::fs::remove_file(&p).unwrap();
        assert_eq!(mode, 0o600, "{mode:o}");
    }

    #[test]
    fn ring_push_pop_wraps_and_fills() {
        let p = std::env::temp_dir().join(format!("hpc-board-test-{}", std::process::id()));
        let b = Board::create(&p, 2).unwrap();
        let o = Board::open(&p, 2).unwrap();
        std::fs::remove_file(&p).unwrap();
        for round in 0..3u64 {
            for i in 0..RING_CAP {
                let d = Desc {
                    kind: RTS,
                    tag: round * 100 + i,
                    addr: i,
                    len: 7,
                };
                assert!(b.push(0, 1, d));
            }
            assert!(!b.push(
                0,
                1,
                Desc {
                    kind: FIN,
                    tag: 0,
                    addr: 0,
                    len: 0
                }
            ));
            for i in 0..RING_CAP {
                assert_eq!(o.pop(0, 1).unwrap().tag, round * 100 + i);
            }
            assert!(o.pop(0, 1).is_none());
        }
        b.set_pid(1, 42);
        assert_eq!(o.pid(1), 42);
        let seen = o.doorbell(1).load(Ordering::SeqCst);
        b.ring(1);
        // Returns at once: the doorbell moved.
        o.sleep(1, seen, Duration::from_secs(5));
    }

    #[test]
    fn agent_stands_aside_while_the_application_waits() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let p = std::env::temp_dir().join(format!("hpc-board-agent-{}", std::process::id()));
        let b = Arc::new(Board::create(&p, 1).unwrap());
        std::fs::remove_file(&p).unwrap();
        b.set_agent_eager(0, true);
        let woke = Arc::new(AtomicBool::new(false));
        let guard = b.enter_wait(0);
        let seen = b.doorbell(0).load(Ordering::SeqCst);
        let agent = {
            let (b, woke) = (b.clone(), woke.clone());
            std::thread::spawn(move || {
                let woken = b.agent_sleep(0, seen, Duration::from_secs(60));
                woke.store(true, Ordering::SeqCst);
                woken
            })
        };
        // Rings while the application waits do not wake the agent...
        for _ in 0..5 {
            b.ring(0);
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            !woke.load(Ordering::SeqCst),
            "agent woke while the application waited"
        );
        // ...leaving `wait` does.
        drop(guard);
        assert!(agent.join().unwrap(), "woken, not timed out");
        // With nobody waiting, a ring that came before the sleep is not missed.
        let seen = b.doorbell(0).load(Ordering::SeqCst);
        b.ring(0);
        assert!(b.agent_sleep(0, seen, Duration::from_secs(60)));
    }

    /// Whether an agent sleep of at most 0.6 s on `b` was woken (rather than
    /// timed out) when `ring` ran 50 ms after the agent announced it.
    fn agent_sleep_with(b: &std::sync::Arc<Board>, ring: impl FnOnce(&Board)) -> bool {
        let seen = b.doorbell(0).load(Ordering::SeqCst);
        let agent = {
            let b = b.clone();
            std::thread::spawn(move || b.agent_sleep(0, seen, Duration::from_millis(600)))
        };
        // Until the agent announced its sleep (a ring before that is seen anyway).
        while b.agent_sleeping(0).load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(50));
        ring(b);
        agent.join().unwrap()
    }

    #[test]
    fn which_rings_wake_the_agent() {
        use std::sync::Arc;
        let p = std::env::temp_dir().join(format!("hpc-board-wake-{}", std::process::id()));
        let b = Arc::new(Board::create(&p, 1).unwrap());
        std::fs::remove_file(&p).unwrap();
        // A lazy agent: no ring wakes it, though the doorbell moves.
        b.set_agent_eager(0, false);
        let before = b.doorbell(0).load(Ordering::SeqCst);
        assert!(!agent_sleep_with(&b, |b| b.ring(0)));
        assert_ne!(b.doorbell(0).load(Ordering::SeqCst), before);
        b.want_agent(0, true);
        assert!(!agent_sleep_with(&b, |b| b.ring_quietly(0)));
        // An eager one: a loud ring wakes it, a quiet one only while it is wanted.
        b.set_agent_eager(0, true);
        assert!(agent_sleep_with(&b, |b| b.ring(0)));
        assert!(agent_sleep_with(&b, |b| b.ring_quietly(0)));
        b.want_agent(0, false);
        assert!(!agent_sleep_with(&b, |b| b.ring_quietly(0)));
        // An explicit wake always does (shutdown).
        b.set_agent_eager(0, false);
        assert!(agent_sleep_with(&b, |b| b.wake_agent(0)));
    }

    #[test]
    fn cma_reads_own_memory_and_detects_dead_pids() {
        let src = vec![5u8; 1000];
        let mut dst = vec![0u8; 1000];
        // SAFETY: `dst` is a valid, unaliased buffer of 1000 bytes.
        unsafe {
            cma_read(
                std::process::id(),
                src.as_ptr() as u64,
                dst.as_mut_ptr(),
                1000,
            )
        }
        .unwrap();
        assert_eq!(src, dst);
        assert!(!pid_dead(std::process::id()));
        assert!(pid_dead(u32::MAX - 1));
    }

    #[test]
    fn the_kernel_answers_when_proc_cannot() {
        assert!(!no_such_process(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // A zombie until reaped: dead for `pid_dead`, still a process for kill.
        while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z"))
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(pid_dead(pid));
        child.wait().unwrap();
        assert!(pid_dead(pid) && no_such_process(pid));
        // A pid beyond pid_t is no process it can ask about.
        assert!(!no_such_process(u32::MAX));
    }

    #[test]
    fn futex_times_out_returns_early_and_wakes_every_waiter() {
        use std::sync::Arc;
        let word = AtomicU32::new(7);
        let t = std::time::Instant::now();
        assert!(
            !futex_wait(&word, 7, Duration::from_millis(20)),
            "a timeout says so"
        );
        assert!(t.elapsed() >= Duration::from_millis(15));
        // The word moved already: back at once, not a timeout.
        assert!(futex_wait(&word, 8, Duration::from_secs(60)));
        let word = Arc::new(AtomicU32::new(0));
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let w = word.clone();
                std::thread::spawn(move || {
                    while w.load(Ordering::SeqCst) == 0 {
                        futex_wait(&w, 0, Duration::from_secs(30));
                    }
                    std::time::Instant::now()
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        let woke_at = std::time::Instant::now();
        word.store(1, Ordering::SeqCst);
        futex_wake(&word);
        for w in waiters {
            // One wake reaches all three long before their 30 s timeout.
            assert!(w.join().unwrap() - woke_at < Duration::from_secs(5));
        }
    }
}

/// Loom models of the board: every interleaving (up to the preemption bound)
/// of its rings, staging slots and doorbells, with loom checking each slot's
/// accesses and reporting a lost wake-up as a deadlock (its futex has no
/// timeout). The argument they check is in `SLEEP.md`.
/// Run with `RUSTFLAGS="--cfg loom" cargo test --release --lib -p hpc-comm loom`.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;

    fn desc(kind: u32, tag: u64, addr: u64) -> Desc {
        Desc {
            kind,
            tag,
            addr,
            len: 8,
        }
    }

    /// Six descriptors through a ring of four: the producer finds it full and
    /// retries, the consumer sees each entry whole, in order, once.
    #[test]
    fn loom_ring_wraps_in_order() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(|| {
            let board = Arc::new(Board::in_memory(2));
            let p = board.clone();
            let t = loom::thread::spawn(move || {
                for i in 0..6u64 {
                    while !p.push(0, 1, desc(RTS, i, i * 10)) {
                        loom::thread::yield_now();
                    }
                }
            });
            for i in 0..6u64 {
                loop {
                    if let Some(d) = board.pop(0, 1) {
                        assert_eq!(d, desc(RTS, i, i * 10));
                        break;
                    }
                    loom::thread::yield_now();
                }
            }
            t.join().unwrap();
            assert!(board.pop(0, 1).is_none());
        });
    }

    /// The staging protocol with one slot: the owner writes the slot, announces
    /// it (`DATA`), and writes it again only after the reader's `FREE`; the reader
    /// copies it out between the two. Loom reports any access to the slot that
    /// these descriptors do not order.
    #[test]
    fn loom_staging_slot_is_reused_only_after_free() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let board = Arc::new(Board::in_memory(2));
            let owner = board.clone();
            let t = loom::thread::spawn(move || {
                for i in 0..2u8 {
                    if i > 0 {
                        // The slot comes back before it is written again.
                        loop {
                            match owner.pop(1, 0) {
                                Some(d) => {
                                    assert_eq!(d.kind, FREE);
                                    break;
                                }
                                None => loom::thread::yield_now(),
                            }
                        }
                    }
                    let bytes = [i + 1; 8];
                    // SAFETY: rank 0's slot 0, free (first use, or after FREE).
                    unsafe { owner.stage_write(0, 0, bytes.as_ptr(), 8) };
                    assert!(owner.push(0, 1, desc(DATA, u64::from(i), 0)));
                }
            });
            for i in 0..2u8 {
                let d = loop {
                    if let Some(d) = board.pop(0, 1) {
                        break d;
                    }
                    loom::thread::yield_now();
                };
                assert_eq!((d.kind, d.tag), (DATA, u64::from(i)));
                let mut got = [0u8; 8];
                // SAFETY: announced by the DATA just popped, not handed back yet.
                unsafe { board.stage_read(0, 0, got.as_mut_ptr(), 8) };
                assert_eq!(got, [i + 1; 8]);
                assert!(board.push(1, 0, desc(FREE, 0, 1)));
            }
            t.join().unwrap();
        });
    }

    /// A thread sleeping on its doorbell (`Board::sleep`, as `wait` does) is
    /// woken by a peer that pushes a descriptor and rings, whatever the
    /// interleaving: it looks at the ring after reading the doorbell, and sleeps
    /// only if the doorbell has not moved since.
    #[test]
    fn loom_doorbell_wakes_a_sleeping_waiter() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let board = Arc::new(Board::in_memory(2));
            let peer = board.clone();
            let t = loom::thread::spawn(move || {
                assert!(peer.push(0, 1, desc(RTS, 1, 0)));
                peer.ring(1);
            });
            loop {
                let seen = board.doorbell(1).load(Ordering::SeqCst);
                if board.pop(0, 1).is_some() {
                    break;
                }
                board.sleep(1, seen, Duration::from_secs(3600));
            }
            t.join().unwrap();
        });
    }

    /// An eager agent asleep on its own bell is woken by a peer's ring while no
    /// application thread waits, and by the last waiter leaving `wait` when the
    /// ring came while one did (it stood aside then).
    #[test]
    fn loom_agent_is_woken_by_a_ring_or_by_the_waiter_leaving() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let board = Arc::new(Board::in_memory(2));
            board.set_agent_eager(1, true);
            let app = board.clone();
            // The application is in `wait` while the peer rings, then leaves.
            let guard_taken = Arc::new(loom::sync::atomic::AtomicBool::new(false));
            let g2 = guard_taken.clone();
            let a = loom::thread::spawn(move || {
                let guard = app.enter_wait(1);
                g2.store(true, Ordering::SeqCst);
                loom::thread::yield_now();
                drop(guard);
            });
            let peer = board.clone();
            let p = loom::thread::spawn(move || {
                assert!(peer.push(0, 1, desc(RTS, 1, 0)));
                peer.ring(1);
            });
            // The agent (this thread): stands aside while someone waits, takes the
            // descriptor otherwise, sleeps on its bell in between.
            loop {
                let seen = board.doorbell(1).load(Ordering::SeqCst);
                if !board.someone_waits(1) && board.pop(0, 1).is_some() {
                    break;
                }
                board.agent_sleep(1, seen, Duration::from_secs(3600));
            }
            a.join().unwrap();
            p.join().unwrap();
            let _ = guard_taken.load(Ordering::SeqCst);
        });
    }

    /// An idle agent (`set_agent_idle`) is woken by whoever posts work after it
    /// went idle (`agent_idle` then `wake_agent`, as `Host::start` does), and
    /// looks for work after raising the flag, so work posted before is not
    /// missed either. The work queue stands for the executor's, behind its lock.
    #[test]
    fn loom_idle_agent_sees_work_posted_around_its_sleep() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let board = Arc::new(Board::in_memory(1));
            let work = Arc::new(loom::sync::Mutex::new(0u32));
            let (poster, w) = (board.clone(), work.clone());
            let t = loom::thread::spawn(move || {
                let mut q = w.lock().unwrap();
                *q += 1;
                if poster.agent_idle(0) {
                    poster.wake_agent(0);
                }
                drop(q);
            });
            loop {
                let seen = board.doorbell(0).load(Ordering::SeqCst);
                if *work.lock().unwrap() > 0 {
                    break;
                }
                board.set_agent_idle(0, true);
                if *work.lock().unwrap() > 0 {
                    board.set_agent_idle(0, false);
                    continue;
                }
                board.agent_sleep(0, seen, Duration::from_secs(3600));
                board.set_agent_idle(0, false);
            }
            t.join().unwrap();
        });
    }
}
