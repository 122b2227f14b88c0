//! The board's memory in the loom models: loom atomics for the control words
//! (indexed by their offset in a real board), one loom cell per staging slot,
//! and a lock and condition variable for the futexes.

use super::{AtomicU32, AtomicU64, Ordering, HEADER, RANK_SLOT, STAGE_SLOT};
use loom::cell::UnsafeCell;
use loom::sync::{Condvar, Mutex};

pub struct Mem {
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
    pub fn new(ctl: usize, slots: usize) -> Mem {
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

    pub fn u64_at(&self, off: usize) -> &AtomicU64 {
        &self.w64[off / 8]
    }

    pub fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off >= HEADER && (off - HEADER) % RANK_SLOT < RANK_SLOT);
        &self.w32[(off - HEADER) / 4]
    }

    /// # Safety
    /// `src` is valid for `len <= STAGE_SLOT` bytes.
    pub unsafe fn stage_write(&self, i: usize, src: *const u8, len: usize, _off: usize) {
        self.slots[i].with_mut(|p| {
            // SAFETY: loom hands out the slot exclusively (and checks it); `src`
            // is valid for `len` bytes (caller).
            unsafe { (&mut *p)[..len].copy_from_slice(std::slice::from_raw_parts(src, len)) }
        });
    }

    /// # Safety
    /// `dst` is valid for `len <= STAGE_SLOT` bytes of writes.
    pub unsafe fn stage_read(&self, i: usize, dst: *mut u8, len: usize, _off: usize) {
        self.slots[i].with(|p| {
            // SAFETY: loom checks that no write of the slot is concurrent; `dst`
            // is valid for `len` bytes (caller).
            unsafe { std::slice::from_raw_parts_mut(dst, len).copy_from_slice(&(&*p)[..len]) }
        });
    }

    pub fn futex_wait(&self, word: &AtomicU32, seen: u32) -> bool {
        let g = self.lock.lock().unwrap();
        if word.load(Ordering::SeqCst) == seen {
            drop(self.cv.wait(g).unwrap());
        }
        true
    }

    pub fn futex_wake(&self) {
        let _g = self.lock.lock().unwrap();
        self.cv.notify_all();
    }
}
