//! Reduce-scatter (block and per-rank counts).
//!
//! Both algorithms take `counts[r]`, the number of result elements for
//! rank `r`; the send buffer holds `sum(counts)` elements, packed. The
//! schedules report [`CollectiveKind::ReduceScatter`];
//! [`Collective::schedule`](crate::Collective::schedule) relabels the
//! equal-count case.

use crate::kind::{Algorithm, CollectiveKind};
use crate::op::{DataType, ReduceOp};
use crate::schedule::{Builder, Region, Schedule};

use super::prefix;

/// Dispatches to [`ring`] or [`pairwise`].
///
/// # Panics
/// If `algorithm` is not one of those two.
pub fn reduce_scatter(
    algorithm: Algorithm,
    rank: usize,
    size: usize,
    counts: &[usize],
    dtype: DataType,
    op: ReduceOp,
) -> Schedule {
    match algorithm {
        Algorithm::Ring => ring(rank, size, counts, dtype, op),
        Algorithm::Pairwise => pairwise(rank, size, counts, dtype, op),
        other => panic!("{other} is not a reduce-scatter algorithm"),
    }
}

fn setup(
    algorithm: Algorithm,
    rank: usize,
    size: usize,
    counts: &[usize],
    dtype: DataType,
) -> (Builder, Vec<usize>, usize) {
    assert_eq!(counts.len(), size, "one count per rank");
    let e = dtype.size();
    super::total_bytes(
        counts,
        e,
        "reduce_scatter's send buffer (sum of counts x element)",
    );
    let mut b = Builder::new(CollectiveKind::ReduceScatter, algorithm, rank, size);
    let off: Vec<usize> = prefix(counts).into_iter().map(|x| x * e).collect();
    let max = counts.iter().max().copied().unwrap_or(0) * e;
    b.buffers(off[size], counts[rank] * e);
    (b, off, max)
}

/// Ring reduce-scatter: `size - 1` steps; in step `s` rank `r` sends its
/// partial result for block `r - s - 1` to `r + 1` and receives the partial
/// for block `r - s - 2` from `r - 1`, then adds its own contribution
/// (`partial = received ⊕ own`). The last step lands in the receive
/// buffer. Two scratch buffers of the largest block alternate.
pub fn ring(rank: usize, size: usize, counts: &[usize], dtype: DataType, op: ReduceOp) -> Schedule {
    let (mut b, off, max) = setup(Algorithm::Ring, rank, size, counts, dtype);
    let own = |c: usize| Region::send(off[c], off[c + 1] - off[c]);
    let result = Region::recv(0, off[rank + 1] - off[rank]);
    if size == 1 {
        b.copy(own(0), result);
        return b.finish();
    }
    let tmp = [b.alloc(max), b.alloc(max)];
    let right = (rank + 1) % size;
    let left = (rank + size - 1) % size;
    let mut prev = own((rank + size - 1) % size);
    for s in 0..size - 1 {
        let rc = (rank + 2 * size - s - 2) % size;
        let len = off[rc + 1] - off[rc];
        let landing = if s == size - 2 {
            result
        } else {
            tmp[s % 2].sub(0, len)
        };
        b.send(right, prev, 0);
        b.recv(left, landing, 0);
        b.next_round();
        b.reduce(own(rc), landing, op, dtype);
        b.next_round();
        prev = landing;
    }
    b.finish()
}

/// Pairwise-exchange reduce-scatter (MPICH's long-message algorithm):
/// `size - 1` rounds; in round `i` rank `r` sends its contribution to block
/// `r + i` straight to its owner and receives block `r`'s contribution of
/// rank `r - i`, which is reduced into the result one round later (two
/// scratch buffers alternate). Each element is reduced exactly once, at
/// its owner, in the order own, `r - 1`, `r - 2`, ...
pub fn pairwise(
    rank: usize,
    size: usize,
    counts: &[usize],
    dtype: DataType,
    op: ReduceOp,
) -> Schedule {
    let (mut b, off, _) = setup(Algorithm::Pairwise, rank, size, counts, dtype);
    let own = |c: usize| Region::send(off[c], off[c + 1] - off[c]);
    let len = off[rank + 1] - off[rank];
    let result = Region::recv(0, len);
    b.copy(own(rank), result);
    if size == 1 {
        return b.finish();
    }
    let tmp = [b.alloc(len), b.alloc(len)];
    for i in 1..size {
        let to = (rank + i) % size;
        let from = (rank + size - i) % size;
        b.send(to, own(to), 0);
        b.recv(from, tmp[i % 2], 0);
        if i >= 2 {
            b.reduce(tmp[(i - 1) % 2], result, op, dtype);
        }
        b.next_round();
    }
    b.reduce(tmp[(size - 1) % 2], result, op, dtype);
    b.finish()
}
