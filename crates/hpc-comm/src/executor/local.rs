//! The ranks on this node: board descriptors, staging slots and
//! cross-memory attach, as the [`Core`] sends, lands and refuses messages.

use hpc_collectives::interp::Arrival;
use hpc_collectives::Region;

use super::{failed_on, Core, OpData, P2P_SEQ};
use hpc_board::board::{
    self, Desc, Failure, Withdrawal, DATA, FAIL_RECORDS, FIN, FREE, RTS, STAGE_SLOT, TAIL,
    WITHDRAWALS,
};
use hpc_board::sig::Sig;
use hpc_board::Error;

/// `addr` of a `FIN` that refuses a message (size mismatch).
pub(super) const REJECTED: u64 = 1;

/// A message (or part of one) announced by a peer and not yet copied.
#[derive(Debug)]
pub(super) enum Arrived {
    /// The whole message of `len` bytes, at `addr` in the sender (`RTS`),
    /// of a collective whose signature is `sig`.
    /// `serial`: the sender's number of a point-to-point message (0 for a
    /// collective's), which it records where it withdraws the message.
    Whole {
        addr: u64,
        len: u64,
        sig: u32,
        serial: u32,
    },
    /// Chunk `index` of a message of `total` bytes, in the sender's `slot`,
    /// of a collective whose signature is `sig`.
    Chunk {
        slot: usize,
        index: u64,
        total: u64,
        sig: u32,
    },
    /// What the slots did not carry of a message of `total` bytes, from
    /// `addr` in the sender (`TAIL`).
    Rest { addr: u64, total: u64, serial: u32 },
    /// A whole point-to-point message from a rank on another node, received
    /// by the transport (its header taken off).
    Bytes(Vec<u8>),
    /// A whole message of a collective from a rank on another node, received
    /// by the transport: its signature, then its bytes ([`NET_HEAD`]).
    Net { v: Vec<u8>, sig: u32 },
}

impl Arrival for Arrived {
    fn total(&self) -> usize {
        match *self {
            Arrived::Whole { len, .. } => len as usize,
            Arrived::Chunk { total, .. } | Arrived::Rest { total, .. } => total as usize,
            Arrived::Bytes(ref v) => v.len(),
            Arrived::Net { ref v, .. } => v.len() - NET_HEAD,
        }
    }
}

/// The mask of `n` (<= 64) staging slots.
pub(super) fn all_slots(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1 << n) - 1
    }
}

impl Arrived {
    /// The signature its sender sent with it, where that is not `ours`
    /// (`None` too for a piece that carries none: the rest of a message,
    /// and a message from another node).
    pub(super) fn other_sig(&self, ours: Sig) -> Option<Sig> {
        match *self {
            Arrived::Whole { sig, .. } | Arrived::Chunk { sig, .. } | Arrived::Net { sig, .. }
                if sig != ours.0 =>
            {
                Some(Sig(sig))
            }
            _ => None,
        }
    }

    /// Whether this piece starts its message.
    pub(super) fn starts(&self) -> bool {
        match *self {
            Arrived::Chunk { index, .. } => index == 0,
            Arrived::Rest { .. } => false,
            Arrived::Whole { .. } | Arrived::Bytes(_) | Arrived::Net { .. } => true,
        }
    }

    /// Whether this piece ends its message.
    fn is_last(&self) -> bool {
        match *self {
            Arrived::Chunk { index, total, .. } => (index + 1) * STAGE_SLOT as u64 >= total,
            Arrived::Whole { .. }
            | Arrived::Rest { .. }
            | Arrived::Bytes(_)
            | Arrived::Net { .. } => true,
        }
    }
}

/// A message of `got` bytes from `peer` where the schedule expects `want`.
pub(super) fn size_mismatch(peer: usize, got: usize, want: usize) -> Error {
    Error::CountMismatch {
        rank: peer,
        detail: format!("rank {peer} sent {got} bytes where {want} were expected"),
    }
}

/// Bytes of the header of a collective's message between nodes: its
/// collective's signature ([`Sig`]), little-endian, ahead of its data (a
/// copy the eager send makes anyway).
pub(super) const NET_HEAD: usize = 4;

pub(super) fn tag64(seq: u64, tag: u32) -> u64 {
    (seq << 32) | tag as u64
}

impl Core {
    /// Queues `d` for `peer`; `wake` says whether it hands the peer's agent
    /// work (the `RTS` or `TAIL` of a non-empty message, the `FIN` of one read
    /// by cross-memory attach, a refusal). See [`Core::flush_peer`].
    pub(super) fn send_desc(&mut self, peer: usize, d: Desc, wake: bool) {
        self.wake[peer] |= wake;
        self.outq[peer].push_back(d);
    }

    pub(super) fn flush(&mut self) -> bool {
        let mut any = false;
        for peer in 0..self.size {
            any |= self.flush_peer(peer);
        }
        any
    }

    /// Pushes what waits for `peer` (the slots to hand back first, as one
    /// `FREE`) and rings its doorbell if there was more than slots. Returns
    /// whether anything was pushed.
    ///
    /// The ring wakes the peer's progress agent only for work that outweighs
    /// a wake-up: a copy by cross-memory attach, the completion of one (its
    /// sender may have a next round to post), a refusal, or anything while the
    /// peer has a collective with a round still to post (`OpData::wake_until`).
    /// Staged chunks ring quietly: a thread of the peer in `wait` or `test`
    /// sees them at once, and an agent on its next pass. Waking an agent costs two context switches, several
    /// microseconds on a virtual machine, far more than copying a staged
    /// chunk; doing it for every small message made the `Thread` engine 5-7x
    /// slower than `Inline` at 1 KiB.
    pub(super) fn flush_peer(&mut self, peer: usize) -> bool {
        let mut pushed = false;
        if self.freed[peer] != 0 {
            let d = Desc {
                kind: FREE,
                sig: 0,
                tag: 0,
                addr: self.freed[peer],
                len: 0,
            };
            if self.board.push(self.me, peer, d) {
                self.freed[peer] = 0;
                pushed = true;
            }
        }
        // Slots handed back ring nobody: no send waits for a slot (it falls back
        // to the single-copy path), so the owner may see them on its next
        // drain, and a ring here (a futex wake-up if the owner sleeps in
        // `wait`) would sit on the path between a receive and its `wait`
        // returning.
        let announced = self.board.push_queued(self.me, peer, &mut self.outq[peer]);
        pushed |= announced;
        if announced {
            if self.wake[peer] {
                self.board.ring(peer);
            } else {
                self.board.ring_quietly(peer);
            }
            self.wake[peer] &= !self.outq[peer].is_empty();
        }
        pushed
    }

    /// Hands staging slot `slot` of `peer` back to it (with the next flush).
    pub(super) fn free_slot(&mut self, peer: usize, slot: usize) {
        self.freed[peer] |= 1 << slot;
    }

    pub(super) fn queue(&mut self, key: (usize, u64), a: Arrived) {
        if key.1 >> 32 == P2P_SEQ && a.starts() {
            self.p2p_order.push_back((key.0, key.1 as u32));
        }
        self.matcher.arrived(key, a);
    }

    pub(super) fn drain(&mut self) {
        for src in 0..self.size {
            while let Some(d) = self.board.pop(src, self.me) {
                let key = (src, d.tag);
                // A point-to-point message's announcement by address carries
                // its sender's 32-bit number of it in the signature's word,
                // which a point-to-point message has no other use for (its
                // number was 16 bits above its length: an announcement
                // 65,535 messages older than a withdrawn one of the same
                // number was taken for it).
                let (sig, serial) = if d.tag >> 32 == P2P_SEQ && matches!(d.kind, RTS | TAIL) {
                    (Sig::NONE.0, d.sig)
                } else {
                    (d.sig, 0)
                };
                let len = d.len;
                match d.kind {
                    RTS => self.queue(
                        key,
                        Arrived::Whole {
                            addr: d.addr,
                            len,
                            sig,
                            serial,
                        },
                    ),
                    DATA => {
                        let (slot, index) = ((d.addr & 0xffff) as usize, d.addr >> 16);
                        if slot >= self.board.slots() {
                            tracing::warn!(src, slot, "staged chunk in a slot that does not exist");
                        } else if self.discard.contains(&key) {
                            let a = Arrived::Chunk {
                                slot,
                                index,
                                total: d.len,
                                sig: d.sig,
                            };
                            if a.is_last() {
                                self.discard.remove(&key);
                            }
                            self.free_slot(src, slot);
                        } else {
                            let (total, sig) = (d.len, d.sig);
                            self.queue(
                                key,
                                Arrived::Chunk {
                                    slot,
                                    index,
                                    total,
                                    sig,
                                },
                            );
                        }
                    }
                    TAIL => {
                        if !self.discard.remove(&key) {
                            self.queue(
                                key,
                                Arrived::Rest {
                                    addr: d.addr,
                                    total: len,
                                    serial,
                                },
                            );
                        }
                    }
                    FREE => {
                        let back = d.addr & all_slots(self.board.slots());
                        if back != d.addr || back & self.free_slots != 0 {
                            tracing::warn!(
                                src,
                                mask = d.addr,
                                "staging slots handed back twice or unknown"
                            );
                        }
                        self.free_slots |= back;
                    }
                    FIN if d.addr == REJECTED => {
                        self.rejected.insert((src, d.tag), Sig(d.sig));
                    }
                    FIN => *self.fins.entry((src, d.tag)).or_default() += 1,
                    k => tracing::warn!(kind = k, src, "unknown descriptor"),
                }
            }
        }
    }

    /// Refuses the message of `key` at the head of its queue, `sent` bytes
    /// where the receive expects `expected`: its slots go back, its pieces
    /// still to come are handed back as they arrive, and the sender learns
    /// it from a refusing FIN. Returns the operation's error.
    pub(super) fn refuse(&mut self, peer: usize, tag: u64, sent: usize, expected: usize) -> Error {
        self.refuse_message(peer, tag, None, Sig::NONE);
        self.mark_count(tag, peer, self.me);
        size_mismatch(peer, sent, expected)
    }

    /// Records on the board that `sender`'s message of `tag` to `receiver`
    /// had another size than the receiver expects, where `tag` is a
    /// collective's: the other members that wait for the collective fail
    /// with a [`Error::CountMismatch`] at their next check, not by the
    /// timeout (as [`Core::mismatch`] does for another collective).
    pub(super) fn mark_count(&mut self, tag: u64, sender: usize, receiver: usize) {
        if tag >> 32 != P2P_SEQ {
            let f = Failure::Count {
                sender: sender as u32,
                receiver: receiver as u32,
            };
            self.board.mark_failed(self.me, (tag >> 32) as u32, f);
            self.notify((tag >> 32) as u32, f);
        }
    }

    /// Refuses the message of `tag` from `peer` whose signature `theirs`
    /// is not this operation's `ours` (another collective's: another type,
    /// operation or root), its first piece `held` where it was taken from
    /// the matcher already, as [`Core::refuse`] refuses a size; the refusing
    /// `FIN` carries `ours`, so that its sender names the mismatch too.
    /// Returns the operation's error.
    pub(super) fn refuse_sig(
        &mut self,
        peer: usize,
        tag: u64,
        held: Option<Arrived>,
        ours: Sig,
        theirs: Sig,
    ) -> Error {
        self.refuse_message(peer, tag, held, ours);
        self.mismatch((tag >> 32) as u32, peer, ours, theirs)
    }

    /// The error of this rank's collective `seq` (signature `ours`), which
    /// `peer` (signature `theirs`) does not match, recorded on the board
    /// first: the other members that wait for the collective fail with a
    /// mismatch too at their next check
    /// ([`Op::fail_as_elsewhere`](super::Op::fail_as_elsewhere)),
    /// not by the timeout (a rank that never hears from `peer` waits for one
    /// that has failed already).
    pub(super) fn mismatch(&mut self, seq: u32, peer: usize, ours: Sig, theirs: Sig) -> Error {
        let f = Failure::Mismatch {
            peer: peer as u32,
            ours: ours.0,
            theirs: theirs.0,
        };
        self.board.mark_failed(self.me, seq, f);
        self.notify(seq, f);
        f.error()
    }

    /// What [`Core::refuse`] and [`Core::refuse_sig`] share: the message's
    /// pieces (`held`, then the matcher's) dropped and their slots handed
    /// back, the pieces still to come discarded as they arrive, and a
    /// refusing `FIN` carrying `fin_sig` to a sender on this node.
    fn refuse_message(&mut self, peer: usize, tag: u64, held: Option<Arrived>, fin_sig: Sig) {
        let key = (peer, tag);
        if self.is_remote(peer) {
            // A whole message from another node: dropped, its sender is done.
            self.matcher.take(&key);
            return;
        }
        let mut ended = false;
        if let Some(b) = held {
            if let Arrived::Chunk { slot, .. } = b {
                self.free_slot(peer, slot);
            }
            ended = b.is_last();
        }
        while !ended {
            let Some(b) = self.matcher.take(&key) else {
                break;
            };
            if let Arrived::Chunk { slot, .. } = b {
                self.free_slot(peer, slot);
            }
            ended = b.is_last();
        }
        if !ended {
            self.discard.insert(key);
        }
        self.send_desc(
            peer,
            Desc {
                kind: FIN,
                sig: fin_sig.0,
                tag,
                addr: REJECTED,
                len: 0,
            },
            true,
        );
    }

    /// Lands `a`, a piece of the message for `region` of which `got` bytes
    /// landed before, and returns its bytes.
    pub(super) fn land(
        &mut self,
        d: &mut OpData,
        peer: usize,
        region: Region,
        got: usize,
        a: Arrived,
    ) -> Result<usize, Error> {
        let in_order = match a {
            Arrived::Whole { .. } | Arrived::Bytes(_) | Arrived::Net { .. } => got == 0,
            Arrived::Rest { .. } => got > 0,
            Arrived::Chunk { index, .. } => index * STAGE_SLOT as u64 == got as u64,
        };
        if !in_order {
            return Err(Error::transport(format!(
                "rank {peer} sent a message piece out of order ({a:?} after {got} bytes)"
            )));
        }
        let dst = d.bufs.ptr(&region);
        Ok(match a {
            Arrived::Chunk { slot, .. } => {
                let n = STAGE_SLOT.min(region.len - got);
                // SAFETY: the slot is the sender's, announced by this DATA and
                // not reused before our FREE (board protocol), STAGE_SLOT >= n
                // bytes long; `dst + got .. + n` lies in the region
                // (bounds-checked by `ptr`, got + n <= region.len).
                unsafe { self.board.stage_read(peer, slot, dst.add(got), n) };
                self.free_slot(peer, slot);
                n
            }
            Arrived::Bytes(v) => {
                // SAFETY: `dst` points at `region.len` writable bytes of this
                // operation's buffer (bounds-checked); the interpreter checked
                // that `v` is as long.
                unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), dst, v.len()) };
                v.len()
            }
            Arrived::Net { v, .. } => {
                let n = v.len() - NET_HEAD;
                // SAFETY: as for `Bytes`: the interpreter checked that the
                // message after its header is the region's length.
                unsafe { std::ptr::copy_nonoverlapping(v[NET_HEAD..].as_ptr(), dst, n) };
                n
            }
            Arrived::Whole { addr, serial, .. } | Arrived::Rest { addr, serial, .. } => {
                let n = region.len - got;
                let pid = self.pids[peer];
                // `pids[me]` is this process (no `getpid` system call per message).
                if pid == self.pids[self.me] {
                    // SAFETY: the sender is this process: `addr` is a live region of
                    // one of its operations (it waits for our FIN), `dst + got` has
                    // `n` bytes left in the bounds-checked region, and regions of
                    // different buffers never overlap.
                    unsafe { std::ptr::copy(addr as *const u8, dst.add(got), n) };
                } else {
                    // SAFETY: `dst + got` has `n` writable bytes left in this
                    // operation's buffer (bounds-checked), not aliased during the round.
                    let read = unsafe { board::cma_read(pid, addr, dst.add(got), n) };
                    // A sender whose collective failed (it recorded why, then
                    // ended the operation) may have freed or reused its buffer
                    // before this read: what was read is not its message (one
                    // word to look at, beside a system call).
                    if let Some(f) = failed_on(&self.board, self.me, peer, d.seq, d.sig) {
                        return Err(f.error());
                    }
                    // Its record may be gone: replaced by the records of its
                    // later failures.
                    if d.seq != P2P_SEQ && self.board.forgotten(peer, d.seq as u32) {
                        return Err(Error::transport(format!(
                            "rank {peer} of this communicator failed more collectives than the \
                             board keeps apart ({FAIL_RECORDS}) since this one: whether it \
                             gave this one up cannot be told, so what was read of its buffer \
                             is dropped"
                        )));
                    }
                    // So may a sender whose point-to-point send failed (timed
                    // out) and gave its buffer back: it withdrew the message
                    // first. What was read is dropped, and the receive fails
                    // (it got another allocation's bytes as the message).
                    if serial != 0 {
                        match self.board.take_withdrawal(peer, self.me, serial) {
                            Withdrawal::Kept => {}
                            Withdrawal::Withdrawn => {
                                return Err(Error::transport(format!(
                                    "rank {peer} withdrew its message (its send failed, timed \
                                     out, before this receive read it): the buffer holds no \
                                     message"
                                )))
                            }
                            Withdrawal::Unknown { .. } => {
                                return Err(Error::transport(format!(
                                    "rank {peer} withdrew more messages to this rank than the \
                                     board keeps apart ({WITHDRAWALS}, their sends failed) \
                                     before this receive read one of them: whether this one \
                                     was withdrawn cannot be told, so what was read is dropped"
                                )))
                            }
                        }
                    }
                    read.map_err(|e| {
                        // ESRCH: the sender has no memory left to read, it is
                        // exiting (its `/proc` state may not say so yet).
                        let exiting =
                            e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error());
                        if exiting || board::pid_dead(pid) {
                            Error::RankLost { rank: peer }
                        } else {
                            Error::transport_from(format!("reading from rank {peer}"), e)
                        }
                    })?;
                }
                n
            }
        })
    }

    /// A point-to-point message to this rank itself: copied whole into the
    /// matcher, as a message from another node is, and sent at once. By its
    /// descriptor it went by the caller's address, read in place by the
    /// receive: a blocking send that timed out returned and let its buffer
    /// go while the descriptor stayed queued, and the later receive copied
    /// from freed memory (a crash, or another allocation's bytes).
    pub(super) fn send_to_self(&mut self, d: &mut OpData, tag: u32, region: &Region) {
        let p = d.bufs.ptr(region);
        // SAFETY: `ptr` bounds-checked the region against its buffer, which
        // the operation keeps alive while it advances.
        let v = unsafe { std::slice::from_raw_parts(p, region.len) }.to_vec();
        self.queue((self.me, tag64(P2P_SEQ, tag)), Arrived::Bytes(v));
        d.m.sent(self.me, tag);
    }

    /// Posts a send to a rank on this node. A message of at most `stage_max`
    /// bytes goes in as many chunks as free slots take, each announced at once
    /// (so the receiver copies while this rank stages the next), with a `TAIL`
    /// for the rest; a larger one, or one that finds no free slot, as an `RTS`.
    /// Returns whether the send waits for the receiver's `FIN`: not when the
    /// message is empty or went whole into the slots, so that a small send
    /// completes at once, as an eager send does in MPI. A refusal still
    /// reaches the operation (see [`Core::advance`]).
    pub(super) fn post_local_send(
        &mut self,
        d: &mut OpData,
        peer: usize,
        region: &Region,
        tag: u32,
    ) -> bool {
        let p = d.bufs.ptr(region);
        let tag = tag64(d.seq, tag);
        let total = region.len;
        let mut off = 0;
        let mut index = 0u64;
        while off < total && total <= self.stage_max {
            if self.free_slots == 0 {
                break;
            }
            let slot = self.free_slots.trailing_zeros() as usize;
            self.free_slots &= !(1 << slot);
            let n = STAGE_SLOT.min(total - off);
            // SAFETY: `p + off .. + n` lies in the bounds-checked region; the slot
            // is this rank's and free (no reader until the DATA below), STAGE_SLOT
            // >= n bytes; shared memory and the user's buffer do not overlap.
            unsafe { self.board.stage_write(self.me, slot, p.add(off), n) };
            self.send_desc(
                peer,
                Desc {
                    kind: DATA,
                    sig: d.sig.0,
                    tag,
                    addr: slot as u64 | index << 16,
                    len: total as u64,
                },
                false,
            );
            self.flush_peer(peer);
            off += n;
            index += 1;
        }
        if off < total || total == 0 {
            let needs_fin = total > 0;
            // A point-to-point message read at its address is numbered, so
            // that a send that fails before it was read can withdraw it
            // (`Op::withdraw`).
            let len = total as u64;
            let mut sig = d.sig.0;
            if d.seq == P2P_SEQ && needs_fin {
                self.p2p_serial = self.p2p_serial.wrapping_add(1).max(1);
                sig = self.p2p_serial;
                d.announced = Some((peer, self.p2p_serial));
            }
            self.send_desc(
                peer,
                Desc {
                    kind: if off == 0 { RTS } else { TAIL },
                    sig,
                    tag,
                    // SAFETY: off <= total: at most one past the region's end.
                    addr: unsafe { p.add(off) } as u64,
                    len,
                },
                needs_fin,
            );
            return needs_fin;
        }
        false
    }
}
