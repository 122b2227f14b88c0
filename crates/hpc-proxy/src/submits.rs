//! The host proxy's submits, read and parsed once per distinct blob.
//!
//! An iterative application posts the same collective over the same buffers
//! step after step: its `SUBMIT` blobs are the same bytes each time. Decoding
//! one and building its schedule costs more than the rest of the collective's
//! passes through the proxy for a small message, so the proxy keeps, per rank,
//! the last few distinct blobs with what they parsed to (as libNBC keeps its
//! schedules), and a blob equal byte for byte to a kept one reuses its
//! schedule. The schedule is a function of the blob, the rank and the
//! communicator's size alone ([`parse_submit`]), so a reused one is the one
//! parsing would build; refused blobs are not kept.
//!
//! Memory: at most [`KEEP`] entries per rank, each of a blob of at most
//! [`KEEP_BLOB`] bytes and its schedule (a v-collective's schedule grows with
//! the counts its blob carries, so that bound also bounds the schedule).

use std::rc::Rc;

use hpc_collectives::Schedule;

use crate::protocol::parse_submit;
use crate::protocol::{Blob, Code};
use hpc_board::sig::Sig;

/// Distinct blobs kept per rank.
pub const KEEP: usize = 4;

/// The largest blob kept (a v-collective's counts for about a hundred ranks).
pub const KEEP_BLOB: usize = 1024;

/// A submit as the proxy runs it: the blob (its buffers) and its schedule.
#[derive(Debug)]
pub struct Parsed {
    pub blob: Blob,
    pub sched: Rc<Schedule>,
    /// The collective's signature ([`Sig::of`] its blob's).
    pub sig: Sig,
}

/// A kept blob's bytes and what they parsed to.
type Kept = (Box<[u8]>, Rc<Parsed>);

/// Per rank, the latest distinct blobs and what they parsed to, most recently
/// used first; and the buffer a blob is read into.
pub struct Submits {
    kept: Vec<Vec<Kept>>,
    bytes: Vec<u8>,
}

impl Submits {
    /// For a communicator of `size` ranks.
    pub fn new(size: usize) -> Submits {
        Submits {
            kept: vec![Vec::new(); size],
            bytes: Vec::new(),
        }
    }

    /// The buffer to read a blob of `len` bytes into (reused between submits).
    pub fn buffer(&mut self, len: usize) -> &mut [u8] {
        self.bytes.resize(len, 0);
        &mut self.bytes[..]
    }

    /// What the blob last read into [`Submits::buffer`] parses to for `rank`
    /// of `size`: a kept one where its bytes are equal, else parsed (and kept
    /// where it parsed and is small).
    pub fn parse(&mut self, rank: usize, size: usize) -> Result<Rc<Parsed>, Code> {
        let kept = &mut self.kept[rank];
        if let Some(i) = kept.iter().position(|(b, _)| **b == self.bytes[..]) {
            kept[..=i].rotate_right(1);
            return Ok(Rc::clone(&kept[0].1));
        }
        let (blob, sched) = parse_submit(&self.bytes, rank, size)?;
        let parsed = Rc::new(Parsed {
            sig: Sig::of(&blob.coll),
            blob,
            sched: Rc::new(sched),
        });
        if self.bytes.len() <= KEEP_BLOB {
            kept.truncate(KEEP - 1);
            kept.insert(0, (self.bytes.as_slice().into(), Rc::clone(&parsed)));
        }
        Ok(parsed)
    }

    /// How many blobs are kept for `rank`.
    #[cfg(test)]
    fn kept(&self, rank: usize) -> usize {
        self.kept[rank].len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hpc_collectives::{Collective, DataType, Options, ReduceOp};

    fn blob_bytes(count: usize, recv: u64) -> Vec<u8> {
        let blob = Blob {
            coll: Collective::Allreduce {
                count,
                dtype: DataType::F64,
                op: ReduceOp::Sum,
            },
            opts: Options::default(),
            send: 0x1000,
            send_len: 8 * count,
            recv,
            recv_len: 8 * count,
            send_shm: None,
            recv_shm: None,
            own_copies: false,
        };
        postcard::to_allocvec(&blob).unwrap()
    }

    fn parse(s: &mut Submits, bytes: &[u8], rank: usize, size: usize) -> Result<Rc<Parsed>, Code> {
        s.buffer(bytes.len()).copy_from_slice(bytes);
        s.parse(rank, size)
    }

    /// The same bytes from the same rank reuse one parse, equal to a fresh
    /// one; another rank, other bytes or a different buffer address do not.
    #[test]
    fn equal_blobs_reuse_their_schedule_and_others_do_not() {
        let mut s = Submits::new(4);
        let a = blob_bytes(3, 0x2000);
        let first = parse(&mut s, &a, 1, 4).unwrap();
        let again = parse(&mut s, &a, 1, 4).unwrap();
        assert!(Rc::ptr_eq(&first, &again));
        let (blob, sched) = parse_submit(&a, 1, 4).unwrap();
        assert_eq!(format!("{:?}", *again.sched), format!("{sched:?}"));
        assert_eq!(again.blob.recv, blob.recv);
        // Rank 2's schedule of the same blob is its own.
        let other_rank = parse(&mut s, &a, 2, 4).unwrap();
        assert!(!Rc::ptr_eq(&first, &other_rank));
        assert_eq!(
            format!("{:?}", *other_rank.sched),
            format!("{:?}", parse_submit(&a, 2, 4).unwrap().1)
        );
        // Another receive buffer: parsed anew, with its own address.
        let b = blob_bytes(3, 0x3000);
        let moved = parse(&mut s, &b, 1, 4).unwrap();
        assert!(!Rc::ptr_eq(&first, &moved));
        assert_eq!(moved.blob.recv, 0x3000);
    }

    /// At most `KEEP` blobs per rank, the least recently used dropped; a
    /// refused blob is refused each time and not kept; a large one is
    /// parsed but not kept.
    #[test]
    fn a_rank_keeps_its_latest_blobs_only_refusals_and_large_ones_not() {
        let mut s = Submits::new(2);
        let blobs: Vec<Vec<u8>> = (0..KEEP as u64 + 1)
            .map(|i| blob_bytes(2, 0x2000 + 0x100 * i))
            .collect();
        let got: Vec<Rc<Parsed>> = blobs[..KEEP]
            .iter()
            .map(|b| parse(&mut s, b, 0, 2).unwrap())
            .collect();
        // The first is used again, so the next new one pushes out the second
        // (the least recently used) instead.
        assert!(Rc::ptr_eq(
            &got[0],
            &parse(&mut s, &blobs[0], 0, 2).unwrap()
        ));
        parse(&mut s, &blobs[KEEP], 0, 2).unwrap();
        assert_eq!(s.kept(0), KEEP);
        assert!(Rc::ptr_eq(
            &got[0],
            &parse(&mut s, &blobs[0], 0, 2).unwrap()
        ));
        assert!(Rc::ptr_eq(
            &got[2],
            &parse(&mut s, &blobs[2], 0, 2).unwrap()
        ));
        assert!(!Rc::ptr_eq(
            &got[1],
            &parse(&mut s, &blobs[1], 0, 2).unwrap()
        ));
        assert_eq!(s.kept(1), 0);

        let garbled = [0xffu8; 40];
        for _ in 0..2 {
            assert_eq!(parse(&mut s, &garbled, 1, 2).err(), Some(Code::Failed));
        }
        assert_eq!(s.kept(1), 0);

        // An allgatherv's counts make a blob over the bound.
        let v = Blob {
            coll: Collective::Allgatherv {
                counts: vec![1; 2 * KEEP_BLOB],
                dtype: DataType::U8,
            },
            opts: Options::default(),
            send: 0x1000,
            send_len: 1,
            recv: 0x2000,
            recv_len: 2 * KEEP_BLOB,
            send_shm: None,
            recv_shm: None,
            own_copies: false,
        };
        let v = postcard::to_allocvec(&v).unwrap();
        assert!(v.len() > KEEP_BLOB);
        let size = 2 * KEEP_BLOB;
        let mut s = Submits::new(size);
        parse(&mut s, &v, 1, size).unwrap();
        assert_eq!(s.kept(1), 0);
    }
}
