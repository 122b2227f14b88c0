//! The algorithms: one pure function per (collective, algorithm) pair,
//! `(rank, size, sizes...) -> Schedule`.
//!
//! These functions assume valid arguments (`rank < size`, `root < size`,
//! count vectors of length `size`) and panic otherwise; the checked entry
//! point is [`Collective::schedule`](crate::Collective::schedule). Sizes are
//! in bytes for data-movement collectives and in elements (plus a
//! [`DataType`](crate::DataType)) for reductions, so that reduction chunks
//! never split an element.
//!
//! Trees and rings are built on ranks relative to the root
//! (`vr = (rank - root) mod size`); non-power-of-two rank counts are handled
//! by every algorithm (Bruck and rings natively, recursive doubling and
//! Rabenseifner by MPICH's folding of the first `2 * (size - pof2)` ranks in
//! pairs).

pub mod allgather;
pub mod allreduce;
pub mod alltoall;
pub mod barrier;
pub mod bcast;
pub mod gather;
pub mod reduce;
pub mod reduce_scatter;
pub mod scatter;

/// Largest power of two `<= n` (`n >= 1`).
pub(crate) fn pof2_floor(n: usize) -> usize {
    1 << n.ilog2()
}

/// Lowest set bit of `x` (0 for 0).
pub(crate) fn lowbit(x: usize) -> usize {
    x & x.wrapping_neg()
}

/// Prefix sums: `out[i] = sum(v[..i])`, with `out.len() == v.len() + 1`
/// (the offsets of blocks of `v[i]` elements laid end to end). A sum beyond
/// `usize::MAX` is `usize::MAX` (as [`Region::end`](crate::Region::end)), so
/// that a block past it lies beyond any buffer, never back at its start:
/// the sum panicked with "attempt to add with overflow" in a debug build
/// and wrapped to a small offset in a release one ([`Collective::schedule`]
/// refuses such counts first).
///
/// ```
/// use hpc_collectives::algo::prefix;
/// assert_eq!(prefix(&[2, 3]), vec![0, 2, 5]);
/// assert_eq!(prefix(&[usize::MAX, 1, 0]), vec![0, usize::MAX, usize::MAX, usize::MAX]);
/// ```
///
/// [`Collective::schedule`]: crate::Collective::schedule
pub fn prefix(v: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(v.len() + 1);
    let mut acc = 0usize;
    out.push(0);
    for x in v {
        acc = acc.saturating_add(*x);
        out.push(acc);
    }
    out
}

/// Splits `count` elements into `n` nearly equal parts (the first
/// `count % n` parts get one more), as MPICH does.
pub(crate) fn split(count: usize, n: usize) -> Vec<usize> {
    (0..n)
        .map(|i| count / n + usize::from(i < count % n))
        .collect()
}

/// MPICH's folding for non-powers of two: the first `2 * rem` ranks pair
/// up (even `r` hands its data to `r + 1`); returns this rank's index among
/// the `pof2` survivors, or `None` for a folded-away even rank.
pub(crate) fn fold_newrank(rank: usize, rem: usize) -> Option<usize> {
    if rank < 2 * rem {
        (rank % 2 == 1).then_some(rank / 2)
    } else {
        Some(rank - rem)
    }
}

/// Inverse of [`fold_newrank`]: the real rank of survivor `newrank`.
pub(crate) fn fold_oldrank(newrank: usize, rem: usize) -> usize {
    if newrank < rem {
        2 * newrank + 1
    } else {
        newrank + rem
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Offsets whose sum passes `usize::MAX` stay there (a block past it
    /// lies beyond any buffer): the sum panicked ("attempt to add with
    /// overflow") in a debug build and wrapped in a release one, the third
    /// block of `[usize::MAX, 1, 5]` starting at offset 0.
    #[test]
    fn prefix_sums_beyond_usize_max_stay_there() {
        assert_eq!(
            prefix(&[usize::MAX, 1, 5]),
            vec![0, usize::MAX, usize::MAX, usize::MAX]
        );
        assert_eq!(
            prefix(&[usize::MAX - 1, 1]),
            vec![0, usize::MAX - 1, usize::MAX]
        );
        assert_eq!(prefix(&[]), vec![0]);
    }

    #[test]
    fn helpers() {
        assert_eq!(pof2_floor(1), 1);
        assert_eq!(pof2_floor(6), 4);
        assert_eq!(pof2_floor(8), 8);
        assert_eq!(lowbit(12), 4);
        assert_eq!(prefix(&[1, 2, 3]), vec![0, 1, 3, 6]);
        assert_eq!(split(7, 3), vec![3, 2, 2]);
        assert_eq!(split(1, 3), vec![1, 0, 0]);
        for p in 1..40 {
            let rem = p - pof2_floor(p);
            for r in 0..p {
                if let Some(n) = fold_newrank(r, rem) {
                    assert_eq!(fold_oldrank(n, rem), r);
                }
            }
        }
    }
}
