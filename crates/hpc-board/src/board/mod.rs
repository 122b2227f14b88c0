//! The shared-memory control plane of a communicator ("board").
//!
//! One file in `/dev/shm`, mapped by every rank of a communicator (all on
//! one node). It holds, per rank, its pid, a futex *doorbell* and a waiter
//! count, whether it dropped the communicator, and the last collectives
//! that failed on it and why (another rank's mismatch of collective or
//! count, a rank that left or is lost), so that the members still waiting for that collective fail
//! with the same cause at their next check rather than wait for the
//! timeout; and per ordered pair of ranks a single-producer single-consumer
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
//! in `src/SLEEP.md` and checked by the loom models in `loom_models.rs`.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

// The board's words are std atomics in the shared mapping; under `cfg(loom)`
// they are loom's, in memory of the model's own (`loom_mem`), so that the loom
// models explore every interleaving of the rings, slots and doorbells.
#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicU32, AtomicU64};
#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicU32, AtomicU64};

mod failure;
#[cfg(loom)]
mod loom_mem;
#[cfg(all(test, loom))]
mod loom_models;
mod records;
mod sys;
#[cfg(all(test, not(loom)))]
mod tests;

pub use failure::Failure;
pub use records::Withdrawal;
pub use sys::{cma_read, cma_write, pid_dead};
#[cfg(not(loom))]
use sys::{futex_wait, futex_wake};

/// `e` with the board's path in front (`board PATH: e`, the path cut as
/// [`hpc_io::message::path`] cuts one longer than any the system takes), of
/// the same kind: a board that could not be made or opened was named only by
/// some of the errors (`File exists` and `File too large` named nothing), and
/// a path of 100,000 characters was quoted whole.
fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("board {}: {e}", hpc_io::message::path(path)),
    )
}

const MAGIC: u64 = 0x6870_632d_636f_6c6c; // "hpc-coll"
/// Descriptors per ring (4 in the loom models, whose rings fill and wrap).
#[cfg(not(loom))]
pub const RING_CAP: u64 = 64;
/// Descriptors per ring under loom: 4, so that the models' rings fill and wrap.
#[cfg(loom)]
pub const RING_CAP: u64 = 4;
const HEADER: usize = 64;
/// A rank's words: its pid, doorbell and agent's words on the first cache
/// line, then whether it left, its [`FAIL_RECORDS`] failure records and the
/// number of the latest failure it no longer keeps.
const RANK_SLOT: usize = 192;
/// Failure records per rank ([`Board::mark_failed`]): the last this many
/// collectives that failed on it, so that a peer still waiting for one of
/// them finds it although the rank failed later ones meanwhile.
pub const FAIL_RECORDS: usize = 4;
const DESC: usize = 32;
/// A ring's header: the consumer's `head` and the producer's `tail` on cache
/// lines of their own, so that neither side's write takes the line the other
/// is about to read or write; then, on a third line, the producer's
/// withdrawals of messages it announced by address ([`Board::withdraw`]).
const RING_HEADER: usize = 192;
/// Where a ring's withdrawal words begin in its header: first the doubt
/// word, then [`WITHDRAWALS`] records.
const WITHDRAWAL_LINE: usize = 128;
/// Withdrawn messages a sender keeps apart for one receiver
/// ([`Board::withdraw`]): record `serial % WITHDRAWALS` holds a withdrawn
/// message's number until the receiver that reads it takes it
/// ([`Board::take_withdrawal`]).
pub const WITHDRAWALS: usize = 15;
const RING_BYTES: usize = RING_HEADER + RING_CAP as usize * DESC;

/// Descriptor kind: a message of `len` bytes at `addr` in the sender's memory.
pub const RTS: u32 = 1;
/// Descriptor kind: the receiver has read the message its `tag` names.
pub const FIN: u32 = 2;
/// A staged chunk: `addr` = slot | chunk index << 16, `len` = message length.
pub const DATA: u32 = 3;
/// The rest of a partly staged message, by cross-memory attach: `addr` points
/// at its first byte not staged, `len` = message length.
pub const TAIL: u32 = 4;
/// Staging slots handed back to their owner: `addr` = a mask of slots.
pub const FREE: u32 = 5;

/// Bytes of one staging slot (the chunk size of staged messages).
pub const STAGE_SLOT: usize = 16 * 1024;

/// Staging slots per rank (at most 64: a `FREE` carries them as a bit mask):
/// 1 MiB each on small boards, less on large ones
/// (at most 16 MiB in all for the ranks together, at least 4 slots each), so
/// that a board for many ranks still fits a container's small `/dev/shm`
/// (its file's blocks are reserved when it is made, [`Board::create`]).
pub fn stage_slots(size: usize) -> usize {
    ((16 << 20) / STAGE_SLOT / size.max(1)).clamp(4, 64)
}

/// The bit of a failure record's first word that says it holds one.
const FAILED: u64 = 1 << 32;

/// One ring entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Desc {
    /// What it says (below 256).
    pub kind: u32,
    /// The signature of the collective whose message it announces
    /// ([`Sig`](crate::sig::Sig)'s word; 0 for the board's other
    /// descriptors, the kind's own word for a few of the proxy's; for a
    /// point-to-point message's `RTS` or `TAIL`, its sender's 32-bit
    /// number of it (never 0), which a withdrawal names, [`Board::withdraw`]).
    pub sig: u32,
    /// The message's tag: `(collective sequence number << 32) | schedule tag`.
    pub tag: u64,
    /// An address in the sender's memory, or the kind's own word (see the kinds).
    pub addr: u64,
    /// The message's length in bytes, or the kind's own word.
    pub len: u64,
}

/// A mapped board.
pub struct Board {
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

/// The panic of a board word asked for outside the board: out of line, so that
/// the check costs the accessors one compare and a branch never taken.
#[cfg(not(loom))]
#[cold]
#[inline(never)]
#[track_caller]
fn outside(off: usize, len: usize) -> ! {
    panic!("board word at {off} outside the board's {len} bytes (a rank past its size?)")
}

fn stage_off(size: usize) -> usize {
    HEADER + size * RANK_SLOT + size * size * RING_BYTES
}

fn bytes_for(size: usize) -> usize {
    stage_off(size) + size * stage_slots(size) * STAGE_SLOT
}

/// [`bytes_for`], `None` where it overflows: a size that comes from outside
/// (the proxy's `HPC_COLL_PROXY_SLOTS`) is checked with it before any
/// arithmetic on it.
fn checked_bytes_for(size: usize) -> Option<usize> {
    let rings = size.checked_mul(size)?.checked_mul(RING_BYTES)?;
    let stage = size
        .checked_mul(stage_slots(size))?
        .checked_mul(STAGE_SLOT)?;
    HEADER
        .checked_add(size.checked_mul(RANK_SLOT)?)?
        .checked_add(rings)?
        .checked_add(stage)
}

/// Reserves the blocks of a board's file of `bytes`, so that a file system
/// without room for it (a full `/dev/shm`) refuses the board when it is made:
/// a sparse file's page that the file system cannot give when it is first
/// touched kills the process with `SIGBUS` (a rank of a job started on a full
/// `/dev/shm` was killed so as it made its communicator). A file system that
/// cannot reserve blocks keeps the file sparse, as before.
fn reserve(f: &std::fs::File, bytes: usize) -> io::Result<()> {
    use rustix::io::Errno;
    match rustix::fs::fallocate(f, rustix::fs::FallocateFlags::empty(), 0, bytes as u64) {
        Ok(()) => Ok(()),
        Err(e) if e == Errno::NOSPC => Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!(
                "no room for the board's {bytes} bytes in its file system (a full /dev/shm: \
                 free some, or give the container a larger one)"
            ),
        )),
        Err(e) if e == Errno::OPNOTSUPP || e == Errno::NOSYS || e == Errno::INVAL => Ok(()),
        Err(e) => Err(e.into()),
    }
}

impl Board {
    /// A board of `size` slots for a test of this process, its file
    /// already removed (`name` tells the tests' files apart). For the tests
    /// of this crate and the crates above it.
    #[doc(hidden)]
    pub fn unlinked(name: &str, size: usize) -> Board {
        let p = std::env::temp_dir().join(format!("hpc-{name}-{}", std::process::id()));
        let b = Board::create(&p, size).unwrap();
        std::fs::remove_file(&p).unwrap();
        b
    }

    /// Creates and maps a new board file for `size` ranks.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a `size` whose board's bytes overflow (checked
    /// before the file is made: it panicked on the overflow, leaving the
    /// file), and the system's error where the file cannot be made, sized or
    /// mapped; then no file is left behind (a failed sizing or mapping left an
    /// empty board file in `/dev/shm`). Every error names the board's path,
    /// cut as [`hpc_io::message::path`] cuts one.
    pub fn create(path: &Path, size: usize) -> io::Result<Board> {
        if checked_bytes_for(size).is_none() {
            return Err(named(
                path,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{size} ranks are too many for a board"),
                ),
            ));
        }
        // Only this user's processes map a board (0600): it holds the ranks' rings.
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| named(path, e))?;
        let made = f
            .set_len(bytes_for(size) as u64)
            .and_then(|()| reserve(&f, bytes_for(size)))
            .and_then(|()| Board::map(&f, path, size));
        let b = match made {
            Ok(b) => b,
            Err(e) => {
                // This call made the file (`create_new`): nobody else maps it.
                let _ = std::fs::remove_file(path);
                return Err(named(path, e));
            }
        };
        b.u64_at(8).store(size as u64, Ordering::Relaxed);
        b.u64_at(0).store(MAGIC, Ordering::Release);
        Ok(b)
    }

    /// Maps an existing board file. Every error names the board's path, cut
    /// as [`hpc_io::message::path`] cuts one.
    pub fn open(path: &Path, size: usize) -> io::Result<Board> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| named(path, e))?;
        // A size too large to compute a board for is no board's either.
        let len = f.metadata().map_err(|e| named(path, e))?.len();
        if checked_bytes_for(size).is_none_or(|want| len != want as u64) {
            return Err(named(
                path,
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("it is not for {size} ranks"),
                ),
            ));
        }
        let b = Board::map(&f, path, size).map_err(|e| named(path, e))?;
        if b.u64_at(0).load(Ordering::Acquire) != MAGIC {
            return Err(named(
                path,
                io::Error::new(io::ErrorKind::InvalidData, "bad board magic"),
            ));
        }
        Ok(b)
    }

    #[cfg(not(loom))]
    fn map(f: &std::fs::File, path: &Path, size: usize) -> io::Result<Board> {
        let len = bytes_for(size);
        let p = crate::map::map_shared(f.as_fd(), len)?;
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
        let _ = f.as_fd();
        let mut b = Board::in_memory(size);
        b.path = path.to_path_buf();
        Ok(b)
    }

    /// A board for `size` ranks in the loom model's memory.
    #[cfg(loom)]
    pub fn in_memory(size: usize) -> Board {
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
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The word at `off`. Every public method reaches the mapping through this or
    /// [`Board::u32_at`], with offsets made of a caller's rank numbers: the bounds
    /// are checked here in every build (one compare), so that a rank number past
    /// the board's size panics instead of touching memory outside the mapping.
    #[cfg(not(loom))]
    #[inline]
    fn u64_at(&self, off: usize) -> &AtomicU64 {
        // (`len` is at least the header's bytes: no underflow.)
        if off > self.len - 8 {
            outside(off, self.len);
        }
        debug_assert!(off % 8 == 0);
        // SAFETY: in bounds (checked above) and 8-aligned (page-aligned base,
        // offsets made of multiples of 8); the mapping outlives `&self`; shared
        // words are only accessed atomically.
        unsafe { &*self.base.add(off).cast::<AtomicU64>() }
    }

    /// The 32-bit word at `off`, bounds checked as in [`Board::u64_at`].
    #[cfg(not(loom))]
    #[inline]
    fn u32_at(&self, off: usize) -> &AtomicU32 {
        if off > self.len - 4 {
            outside(off, self.len);
        }
        debug_assert!(off % 4 == 0);
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
    pub fn set_pid(&self, rank: usize, pid: u32) {
        self.u32_at(self.slot(rank)).store(pid, Ordering::Release);
    }

    /// A rank's pid (0 until published).
    pub fn pid(&self, rank: usize) -> u32 {
        self.u32_at(self.slot(rank)).load(Ordering::Acquire)
    }

    /// A rank's doorbell (futex word).
    pub fn doorbell(&self, rank: usize) -> &AtomicU32 {
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

    /// Non-zero once `rank` dropped the communicator ([`Board::mark_left`]).
    fn left_word(&self, rank: usize) -> &AtomicU32 {
        self.u32_at(self.slot(rank) + 36)
    }

    /// Says that `rank` dropped the communicator, after everything it pushed:
    /// a peer that sees the mark (acquire) sees those descriptors in its rings.
    pub fn mark_left(&self, rank: usize) {
        self.left_word(rank).store(1, Ordering::Release);
    }

    /// Whether `rank` dropped the communicator ([`Board::mark_left`]).
    pub fn has_left(&self, rank: usize) -> bool {
        self.left_word(rank).load(Ordering::Acquire) != 0
    }

    /// Marks `rank`'s agent idle or not (see [`Board::agent_idle`]).
    pub fn set_agent_idle(&self, rank: usize, idle: bool) {
        self.idle_word(rank)
            .store(u32::from(idle), Ordering::SeqCst);
    }

    /// Whether `rank`'s agent sleeps with nothing in flight: whoever posts a
    /// collective that is not finished at once wakes it.
    pub fn agent_idle(&self, rank: usize) -> bool {
        self.idle_word(rank).load(Ordering::SeqCst) != 0
    }

    /// Says whether rings may wake `rank`'s agent (`AgentWake::Eager`).
    pub fn set_agent_eager(&self, rank: usize, eager: bool) {
        self.agent_eager(rank)
            .store(u32::from(eager), Ordering::SeqCst);
    }

    /// Says whether every ring should wake `rank`'s agent (see
    /// [`Board::ring_quietly`]).
    pub fn want_agent(&self, rank: usize, wanted: bool) {
        let w = self.agent_wanted(rank);
        if (w.load(Ordering::Relaxed) != 0) != wanted {
            w.store(u32::from(wanted), Ordering::SeqCst);
        }
    }

    /// Rings `rank`'s doorbell, waking its sleeping waiters, and its agent if
    /// the agent is eager and no application thread of `rank` is in `wait`.
    pub fn ring(&self, rank: usize) {
        self.doorbell(rank).fetch_add(1, Ordering::SeqCst);
        if self.waiters(rank).load(Ordering::SeqCst) > 0 {
            self.futex_wake(self.doorbell(rank));
        }
        self.wake_idle_agent(rank);
    }

    /// Rings `rank`'s doorbell for its application threads: those sleeping in
    /// `wait` wake; its agent wakes only if `rank` asked for every ring
    /// ([`Board::want_agent`]), and otherwise sees the ring on its next pass.
    pub fn ring_quietly(&self, rank: usize) {
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
    pub fn wake_agent(&self, rank: usize) {
        // The doorbell too: an agent between its last look at the doorbell and
        // its sleep then does not sleep (see `agent_sleep`).
        self.doorbell(rank).fetch_add(1, Ordering::SeqCst);
        self.agent_bell(rank).fetch_add(1, Ordering::SeqCst);
        self.futex_wake(self.agent_bell(rank));
    }

    /// Whether an application thread of `rank` is in `wait`.
    pub fn someone_waits(&self, rank: usize) -> bool {
        self.in_wait(rank).load(Ordering::SeqCst) > 0
    }

    /// The agent's sleep: until the doorbell moves past `seen` while nobody
    /// waits, [`Board::wake_agent`], or `timeout`. `false` if the timeout
    /// ended it.
    pub fn agent_sleep(&self, rank: usize, seen: u32, timeout: Duration) -> bool {
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
    pub fn enter_wait(&self, rank: usize) -> InWait<'_> {
        self.in_wait(rank).fetch_add(1, Ordering::SeqCst);
        InWait {
            board: self,
            rank,
            wake: true,
        }
    }

    /// Sleeps until `rank`'s doorbell differs from `seen` or `timeout` passes.
    pub fn sleep(&self, rank: usize, seen: u32, timeout: Duration) {
        self.waiters(rank).fetch_add(1, Ordering::SeqCst);
        self.futex_wait(self.doorbell(rank), seen, timeout);
        self.waiters(rank).fetch_sub(1, Ordering::SeqCst);
    }

    /// Waits until `rank`'s doorbell differs from `seen`: polls it for up to
    /// `spin` (no system call, so a peer's answer is seen within nanoseconds),
    /// then sleeps on the futex for at most `timeout`.
    pub fn wait_ring(&self, rank: usize, seen: u32, spin: Duration, timeout: Duration) {
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
    pub fn slots(&self) -> usize {
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
    pub unsafe fn stage_write(&self, rank: usize, slot: usize, src: *const u8, len: usize) {
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
    pub unsafe fn stage_read(&self, rank: usize, slot: usize, dst: *mut u8, len: usize) {
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

    /// Pushes the descriptors queued in `q` from `src` to `dst`, in order,
    /// as many as the ring takes (the rest stay queued); whether any went.
    #[inline]
    pub fn push_queued(
        &self,
        src: usize,
        dst: usize,
        q: &mut std::collections::VecDeque<Desc>,
    ) -> bool {
        let mut any = false;
        while let Some(&d) = q.front() {
            if !self.push(src, dst, d) {
                break;
            }
            q.pop_front();
            any = true;
        }
        any
    }

    /// Pushes a descriptor on the ring `src -> dst`; `false` if it is full.
    /// Only rank `src`'s process may push on it, one thread at a time.
    ///
    /// An entry's first word holds its kind (8 bits), above it its signature
    /// (32 bits) and above that the low 24 bits of its position + 1 (the
    /// stamp), written last (release): the consumer reads the entry
    /// it expects next and needs neither the producer's `tail` nor its cache
    /// line, one transfer between the cores fewer per descriptor.
    pub fn push(&self, src: usize, dst: usize, d: Desc) -> bool {
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
            .store(stamp(t) | first_word(d.kind, d.sig), Ordering::Release);
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
            self.u64_at(e).load(Ordering::Relaxed) & STAMP == stamp(h)
        })
    }

    /// Pops a descriptor from the ring `src -> dst` (only rank `dst` pops).
    pub fn pop(&self, src: usize, dst: usize) -> Option<Desc> {
        let off = self.ring_off(src, dst);
        let head = self.u64_at(off);
        let h = head.load(Ordering::Relaxed);
        let e = off + RING_HEADER + (h % RING_CAP) as usize * DESC;
        let first = self.u64_at(e).load(Ordering::Acquire);
        // An entry written for an earlier lap carries an older stamp (a fresh
        // board's zeros match no position: stamps start at 1).
        if first & STAMP != stamp(h) {
            return None;
        }
        let d = Desc {
            kind: first as u32 & 0xff,
            sig: (first >> 8) as u32,
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

/// The bits of an entry's first word that hold its stamp.
const STAMP: u64 = !((1 << 40) - 1);

/// The stamp of the entry at ring position `pos`: `pos + 1` (mod 2^24) in
/// the top 24 bits of its first word. Entries of the same slot are
/// `RING_CAP` (< 2^24) positions apart, so a stale one never carries the
/// stamp expected next (and a fresh board's zeros only match where every
/// entry was written long before).
fn stamp(pos: u64) -> u64 {
    ((pos + 1) & 0xff_ffff) << 40
}

/// An entry's first word but its stamp: the kind (a byte) and the signature.
fn first_word(kind: u32, sig: u32) -> u64 {
    debug_assert!(kind < 256, "descriptor kind {kind}");
    u64::from(kind & 0xff) | u64::from(sig) << 8
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

/// See [`Board::enter_wait`].
pub struct InWait<'a> {
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
