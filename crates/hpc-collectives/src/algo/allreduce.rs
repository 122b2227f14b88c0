//! Allreduce.
//!
//! All three algorithms work in the receive buffer (`acc`, initialised from
//! the send buffer) plus one `count`-element scratch buffer for incoming
//! data, and handle any `size`. Recursive doubling and Rabenseifner fold a
//! non-power-of-two `size` the MPICH way: among the first
//! `2 * rem` ranks (`rem = size - pof2`), each even rank sends its vector
//! to the odd rank above it, which reduces it and takes part in the
//! power-of-two algorithm as `newrank = rank / 2`; the other ranks become
//! `rank - rem`. At the end each odd rank sends the result back.

use crate::kind::{Algorithm, CollectiveKind};
use crate::op::{DataType, ReduceOp};
use crate::schedule::{Builder, Region, Schedule};

use super::{fold_newrank, fold_oldrank, pof2_floor, prefix, split};

struct Setup {
    b: Builder,
    acc: Region,
    tmp: Region,
    bytes: usize,
}

fn setup(
    algorithm: Algorithm,
    rank: usize,
    size: usize,
    count: usize,
    dtype: DataType,
    tmp_bytes: Option<usize>,
) -> Setup {
    let mut b = Builder::new(CollectiveKind::Allreduce, algorithm, rank, size);
    let bytes = super::bytes(count, dtype.size(), "allreduce's buffers (count x element)");
    b.buffers(bytes, bytes);
    let acc = Region::recv(0, bytes);
    let tmp = match tmp_bytes {
        Some(n) => b.alloc(n),
        None => Region::scratch(0, 0),
    };
    Setup { b, acc, tmp, bytes }
}

/// The set-up of the algorithms over `pof2` ranks with the others folded in
/// ([`fold_in`], [`fold_out`]): a vector's scratch where this rank survives
/// the fold. Returns it with `pof2` and `rem = size - pof2`.
#[inline]
fn folded_setup(
    algorithm: Algorithm,
    rank: usize,
    size: usize,
    count: usize,
    dtype: DataType,
) -> (Setup, usize, usize) {
    let pof2 = pof2_floor(size);
    let rem = size - pof2;
    // A folded-away rank only sends its input and receives the result.
    let needs_tmp = size > 1 && fold_newrank(rank, rem).is_some();
    let tmp = needs_tmp
        .then(|| super::bytes(count, dtype.size(), "allreduce's buffers (count x element)"));
    (setup(algorithm, rank, size, count, dtype, tmp), pof2, rem)
}

/// The fold prologue: returns this rank's new rank, if it survives.
fn fold_in(s: &mut Setup, rank: usize, rem: usize, op: ReduceOp, dtype: DataType) -> Option<usize> {
    let input = Region::send(0, s.bytes);
    let newrank = fold_newrank(rank, rem);
    if newrank.is_some() {
        s.b.copy(input, s.acc);
    }
    if rank < 2 * rem {
        if rank % 2 == 0 {
            s.b.send(rank + 1, input, 0);
        } else {
            s.b.recv(rank - 1, s.tmp, 0);
            s.b.next_round();
            s.b.reduce(s.tmp, s.acc, op, dtype);
        }
    }
    s.b.next_round();
    newrank
}

/// Where a survivor that folded nothing in sends from in its first exchange:
/// the send buffer, which holds what `acc` does. `acc` was just written by
/// the copy, and a peer reading those lines from this core's cache pays a
/// cross-core transfer of every one of them.
fn fresh(s: &Setup) -> Region {
    Region::send(0, s.bytes)
}

/// The fold epilogue: odd ranks hand the result back to the even ones.
fn fold_out(s: &mut Setup, rank: usize, rem: usize) {
    if rank < 2 * rem {
        if rank % 2 == 1 {
            s.b.send(rank - 1, s.acc, 3);
        } else {
            s.b.recv(rank + 1, s.acc, 3);
        }
    }
}

/// Recursive-doubling allreduce: `log2 pof2` rounds in which partners
/// `newrank ^ 2^k` exchange their full vectors and reduce (plus the fold
/// rounds for a non-power-of-two `size`). Latency-optimal; moves
/// `count * log2 pof2` elements per rank, so it is used for short vectors.
pub fn recursive_doubling(
    rank: usize,
    size: usize,
    count: usize,
    dtype: DataType,
    op: ReduceOp,
) -> Schedule {
    let (mut s, pof2, rem) = folded_setup(Algorithm::RecursiveDoubling, rank, size, count, dtype);
    if let Some(nr) = fold_in(&mut s, rank, rem, op, dtype) {
        let mut mask = 1;
        while mask < pof2 {
            let peer = fold_oldrank(nr ^ mask, rem);
            let src = if mask == 1 && rank >= 2 * rem {
                fresh(&s)
            } else {
                s.acc
            };
            s.b.send(peer, src, 1);
            s.b.recv(peer, s.tmp, 1);
            s.b.next_round();
            s.b.reduce(s.tmp, s.acc, op, dtype);
            s.b.next_round();
            mask *= 2;
        }
    }
    fold_out(&mut s, rank, rem);
    s.b.finish()
}

/// Rabenseifner allreduce: a recursive-halving reduce-scatter over `pof2`
/// element-aligned chunks (`newrank` ends owning chunk `newrank`), then a
/// recursive-doubling allgather of the chunks; plus the fold rounds for a
/// non-power-of-two `size`. Moves about `2 * count` elements per rank in
/// `2 * log2 pof2` steps: the choice for medium and long vectors.
pub fn rabenseifner(
    rank: usize,
    size: usize,
    count: usize,
    dtype: DataType,
    op: ReduceOp,
) -> Schedule {
    let (mut s, pof2, rem) = folded_setup(Algorithm::Rabenseifner, rank, size, count, dtype);
    let e = dtype.size();
    let off: Vec<usize> = prefix(&split(count, pof2))
        .into_iter()
        .map(|x| x * e)
        .collect();
    let acc = s.acc;
    let tmp = s.tmp;
    let chunks = |r: Region, a: usize, z: usize| r.sub(off[a], off[z] - off[a]);

    if let Some(nr) = fold_in(&mut s, rank, rem, op, dtype) {
        // Reduce-scatter by recursive halving, highest bit first.
        let (mut lo, mut hi) = (0, pof2);
        let mut mask = pof2 / 2;
        while mask > 0 {
            let peer = fold_oldrank(nr ^ mask, rem);
            let mid = (lo + hi) / 2;
            let (keep, give) = if nr & mask == 0 {
                ((lo, mid), (mid, hi))
            } else {
                ((mid, hi), (lo, mid))
            };
            let src = if mask == pof2 / 2 && rank >= 2 * rem {
                fresh(&s)
            } else {
                acc
            };
            s.b.send(peer, chunks(src, give.0, give.1), 1);
            s.b.recv(peer, chunks(tmp, keep.0, keep.1), 1);
            s.b.next_round();
            s.b.reduce(
                chunks(tmp, keep.0, keep.1),
                chunks(acc, keep.0, keep.1),
                op,
                dtype,
            );
            s.b.next_round();
            (lo, hi) = keep;
            mask /= 2;
        }
        debug_assert_eq!((lo, hi), (nr, nr + 1));
        // Allgather by recursive doubling, lowest bit first.
        let mut mask = 1;
        while mask < pof2 {
            let partner = nr ^ mask;
            let peer = fold_oldrank(partner, rem);
            let mine = nr & !(mask - 1);
            let theirs = partner & !(mask - 1);
            s.b.send(peer, chunks(acc, mine, mine + mask), 2);
            s.b.recv(peer, chunks(acc, theirs, theirs + mask), 2);
            s.b.next_round();
            mask *= 2;
        }
    }
    fold_out(&mut s, rank, rem);
    s.b.finish()
}

/// Ring allreduce: the vector is cut into `size` element-aligned chunks; a
/// ring reduce-scatter (`size - 1` steps, each a send/receive round and a
/// reduce round) leaves chunk `rank + 1` fully reduced on `rank`, and a
/// ring allgather (`size - 1` rounds) distributes the chunks. Moves
/// `2 * count * (size - 1) / size` elements per rank over neighbour links
/// only; latency linear in `size`.
pub fn ring(rank: usize, size: usize, count: usize, dtype: DataType, op: ReduceOp) -> Schedule {
    // Incoming chunks land in a buffer of the largest chunk.
    let bytes = super::bytes(count, dtype.size(), "allreduce's buffers (count x element)");
    let tmp = (size > 1).then_some(count.div_ceil(size) * dtype.size());
    debug_assert!(tmp.is_none_or(|t| t <= bytes));
    let mut s = setup(Algorithm::Ring, rank, size, count, dtype, tmp);
    let e = dtype.size();
    let off: Vec<usize> = prefix(&split(count, size))
        .into_iter()
        .map(|x| x * e)
        .collect();
    let chunk = |r: Region, c: usize| r.sub(off[c], off[c + 1] - off[c]);
    let tmp0 = s.tmp.sub(0, 0);
    let right = (rank + 1) % size;
    let left = (rank + size - 1) % size;
    let input = Region::send(0, s.bytes);

    s.b.copy(input, s.acc);
    for st in 0..size - 1 {
        let sc = (rank + size - st) % size;
        let rc = (rank + 2 * size - st - 1) % size;
        let src = if st == 0 {
            chunk(input, sc)
        } else {
            chunk(s.acc, sc)
        };
        let landing = tmp0.sub(0, off[rc + 1] - off[rc]);
        s.b.send(right, src, 0);
        s.b.recv(left, landing, 0);
        s.b.next_round();
        s.b.reduce(landing, chunk(s.acc, rc), op, dtype);
        s.b.next_round();
    }
    for st in 0..size - 1 {
        let sc = (rank + 1 + size - st) % size;
        let rc = (rank + size - st) % size;
        s.b.send(right, chunk(s.acc, sc), 1);
        s.b.recv(left, chunk(s.acc, rc), 1);
        s.b.next_round();
    }
    s.b.finish()
}
