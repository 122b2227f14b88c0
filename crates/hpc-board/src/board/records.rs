//! What a rank records on the board of what it gave up, for the members
//! that still wait for it or read its buffers at their address: its failed
//! collectives ([`FAIL_RECORDS`] records and the number of the latest one
//! replaced, [`Board::mark_failed`], [`Board::forgotten`]) and, per ordered
//! pair of ranks, the point-to-point messages it withdrew
//! ([`WITHDRAWALS`] records and a doubt word, [`Board::withdraw`]).

use super::*;

/// What [`Board::take_withdrawal`] found of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withdrawal {
    /// Not withdrawn: what was read is the message.
    Kept,
    /// Withdrawn by its sender: what was read is not the message.
    Withdrawn,
    /// Its sender withdrew a message of number up to `up_to` that it had no
    /// record left for (more than the board keeps apart were withdrawn and
    /// not taken): whether this one is among them cannot be told.
    Unknown {
        /// The doubt word: the last number withdrawn without a record.
        up_to: u32,
    },
}

/// Whether message number `a` was given after `b` (numbers wrap at 2^32;
/// two messages that both wait for their receiver are fewer than 2^31 apart).
fn later(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

impl Board {
    /// The count of failures `rank` recorded: the next one goes to record
    /// `count % FAIL_RECORDS`, each writer (a thread of `rank`) claiming its
    /// own.
    fn failures(&self, rank: usize) -> &AtomicU32 {
        self.u32_at(self.slot(rank) + 40)
    }

    /// The sequence number (low 32 bits) of the latest collective whose
    /// failure record `rank` replaced with a later one (0: none), so that a
    /// rank that reads `rank`'s buffer after can tell "no failure" from "a
    /// failure no longer kept" ([`Board::forgotten`]).
    /// ([`FAILED`] | the number; 0: none.)
    fn forgotten_word(&self, rank: usize) -> &AtomicU64 {
        self.u64_at(self.slot(rank) + 48 + 24 * FAIL_RECORDS)
    }

    /// The first word of `rank`'s failure record `i` ([`Board::mark_failed`]):
    /// 0 while it is written, else [`FAILED`] | the collective's sequence
    /// number (its low 32 bits) | the kind of failure `<< 40`. Its other
    /// words: the peer to blame, then two signatures.
    fn failed_word(&self, rank: usize, i: usize) -> &AtomicU64 {
        self.u64_at(self.slot(rank) + 48 + 24 * i)
    }

    fn failed_field(&self, rank: usize, i: usize, j: usize) -> &AtomicU32 {
        self.u32_at(self.slot(rank) + 56 + 24 * i + 4 * j)
    }

    /// Records, in `rank`'s slot, that its collective `seq` failed and why,
    /// for the other members that still wait for it ([`Board::failed`]).
    /// Only `rank`'s threads write its records, each in a record of its own
    /// (the oldest of the [`FAIL_RECORDS`]), and, for a rank on another
    /// node, the ranks of this node that its failure notice reached. A reader never takes half of one
    /// record and half of another: a record's first word is 0 while the
    /// others change (a sequence lock).
    pub fn mark_failed(&self, rank: usize, seq: u32, f: Failure) {
        let (kind, fields) = f.words();
        let i = self.failures(rank).fetch_add(1, Ordering::Relaxed) as usize % FAIL_RECORDS;
        let first = self.failed_word(rank, i);
        let replaced = first.swap(0, Ordering::Relaxed);
        if replaced & FAILED != 0 {
            let old = replaced as u32;
            let _ =
                self.forgotten_word(rank)
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| {
                        (d & FAILED == 0 || later(old, d as u32)).then_some(FAILED | u64::from(old))
                    });
        }
        fence(Ordering::Release);
        for (j, w) in fields.into_iter().enumerate() {
            self.failed_field(rank, i, j).store(w, Ordering::Relaxed);
        }
        first.store(
            FAILED | u64::from(seq) | u64::from(kind) << 40,
            Ordering::Release,
        );
        // Before whatever `rank` does once the collective ended, such as
        // reusing a buffer that a peer still reads by cross-memory attach
        // (that peer looks at the records after its read).
        fence(Ordering::SeqCst);
    }

    /// What `rank` recorded of its collective `seq`'s failure, if that is
    /// among the last [`FAIL_RECORDS`] it recorded.
    pub fn failed(&self, rank: usize, seq: u32) -> Option<Failure> {
        (0..FAIL_RECORDS).find_map(|i| self.failed_in(rank, i, seq))
    }

    /// The doubt word of the ring `sender -> receiver`: 0, or the number of
    /// the last message `sender` withdrew without a record of its own (every
    /// record it could go to held an earlier withdrawal not taken yet).
    fn withdrawal_doubt(&self, sender: usize, receiver: usize) -> &AtomicU32 {
        self.u32_at(self.ring_off(sender, receiver) + WITHDRAWAL_LINE)
    }

    /// Withdrawal record `i` of the ring `sender -> receiver`: 0, or the
    /// number of a withdrawn message its receiver has not taken yet.
    fn withdrawal(&self, sender: usize, receiver: usize, i: usize) -> &AtomicU32 {
        self.u32_at(self.ring_off(sender, receiver) + WITHDRAWAL_LINE + 4 + 4 * i)
    }

    /// Records that `sender` withdrew its point-to-point message `serial`
    /// (non-zero) to `receiver`: its send failed (timed out) and gives its
    /// buffer back while the message, announced by its address, may not be
    /// read yet. A receiver that reads it after asks
    /// [`Board::take_withdrawal`] and drops what it read.
    ///
    /// Withdrawals have records of their own, per ordered pair of ranks, apart
    /// from the failure records: they shared a rank's [`FAIL_RECORDS`] with its
    /// failed collectives, and four more failures before the receiver looked
    /// overwrote one, so that the receiver took the sender's reused memory as
    /// the message (`Ok`, and wrong). The record `serial % WITHDRAWALS` is
    /// claimed; if it holds an earlier withdrawal its receiver has not taken,
    /// nothing is overwritten: the ring's doubt word is raised to `serial`
    /// instead, and the receiver fails every message of number up to it that
    /// it reads after and finds no record of (it cannot tell them apart).
    /// Only `sender`'s threads call it. Returns before the caller may give the
    /// buffer back: a receiver that reads after sees the record.
    pub fn withdraw(&self, sender: usize, receiver: usize, serial: u32) {
        debug_assert!(serial != 0, "message numbers start at 1");
        let rec = self.withdrawal(sender, receiver, serial as usize % WITHDRAWALS);
        if rec
            .compare_exchange(0, serial, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            let doubt = self.withdrawal_doubt(sender, receiver);
            let _ = doubt.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |d| {
                (d == 0 || later(serial, d)).then_some(serial)
            });
        }
        // Before the caller reuses the buffer a receiver may still read.
        fence(Ordering::SeqCst);
    }

    /// Whether `sender` withdrew its message `serial` to `receiver`
    /// ([`Board::withdraw`]), asked by `receiver` after it read the message
    /// at its address; a withdrawal found is taken (its record freed for
    /// later ones), so each message is asked about once.
    pub fn take_withdrawal(&self, sender: usize, receiver: usize, serial: u32) -> Withdrawal {
        // After the read: a withdrawal made before the sender reused its
        // buffer is seen.
        fence(Ordering::SeqCst);
        let rec = self.withdrawal(sender, receiver, serial as usize % WITHDRAWALS);
        if serial != 0
            && rec
                .compare_exchange(serial, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            return Withdrawal::Withdrawn;
        }
        let doubt = self
            .withdrawal_doubt(sender, receiver)
            .load(Ordering::SeqCst);
        if doubt != 0 && !later(serial, doubt) {
            return Withdrawal::Unknown { up_to: doubt };
        }
        Withdrawal::Kept
    }

    /// Whether `rank` may have failed its collective `seq` with no record of
    /// it left: it replaced the record of a collective numbered `seq` or
    /// later (in the order numbers are given, which wraps) since. Asked by a
    /// rank that read `rank`'s buffer at its address and found no record
    /// ([`Board::failed`]): `rank` may have reused that buffer, so what was
    /// read is not kept (four more failures of `rank` before the read hid its
    /// first one, and the read's bytes were taken).
    pub fn forgotten(&self, rank: usize, seq: u32) -> bool {
        // After the read: a failure recorded before `rank` reused its buffer
        // is seen.
        fence(Ordering::SeqCst);
        let d = self.forgotten_word(rank).load(Ordering::Acquire);
        d & FAILED != 0 && !later(seq, d as u32)
    }

    /// Record `i` of `rank`, if it is whole and of collective `seq`.
    fn failed_in(&self, rank: usize, i: usize, seq: u32) -> Option<Failure> {
        let first = self.failed_word(rank, i);
        let w = first.load(Ordering::Acquire);
        if w & (FAILED | 0xffff_ffff) != FAILED | u64::from(seq) {
            return None;
        }
        let fields = [0, 1, 2].map(|j| self.failed_field(rank, i, j).load(Ordering::Relaxed));
        fence(Ordering::Acquire);
        // Rewritten meanwhile: the record read may be torn (a later look reads
        // the record that replaced it).
        if first.load(Ordering::Relaxed) != w {
            return None;
        }
        Failure::from_words((w >> 40) as u32, fields)
    }
}
