//! The algorithms: one pure function per (collective, algorithm) pair,
//! `(rank, size, sizes...) -> Schedule`.
//!
//! These functions assume valid arguments (`rank < size`, `root < size`,
//! count vectors of length `size`, buffers of at most `isize::MAX` bytes)
//! and panic otherwise, naming what was wrong (a count of `usize::MAX`
//! panicked with "attempt to multiply with overflow" in a debug build and
//! wrapped to a small buffer in a release one); the checked entry point,
//! which returns these as errors, is
//! [`Collective::schedule`](crate::Collective::schedule). Sizes are
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

/// `n * each` bytes (a buffer of `n` blocks or elements of `each` bytes),
/// which must be at most `isize::MAX`: a named panic beyond, in every build
/// (the product wrapped in a release one).
#[track_caller]
pub(crate) fn bytes(n: usize, each: usize, what: &str) -> usize {
    match n.checked_mul(each) {
        Some(b) if b <= isize::MAX as usize => b,
        _ => too_many_bytes(n, each, what),
    }
}

/// The sum of `counts`, each of `each` bytes, checked as [`bytes`] checks.
#[track_caller]
pub(crate) fn total_bytes(counts: &[usize], each: usize, what: &str) -> usize {
    let n = counts.iter().fold(0usize, |a, &c| a.saturating_add(c));
    bytes(n, each, what)
}

#[cold]
#[track_caller]
fn too_many_bytes(n: usize, each: usize, what: &str) -> ! {
    panic!(
        "hpc_collectives::algo: {what}: {n} x {each} bytes is more than isize::MAX \
         (Collective::schedule refuses this as an error)"
    )
}

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

    /// Every builder given a count whose bytes pass `usize::MAX` (part E of
    /// pass 19): gather, scatter, alltoall's Bruck, reduce, the three
    /// allreduces and reduce_scatter panicked with "attempt to multiply with
    /// overflow" in a debug build (a release one wrapped the product into a
    /// small buffer); the broadcasts, alltoallv and allgather built
    /// schedules of `usize::MAX`-byte buffers. Each panics naming the buffer
    /// now, as its module documents; sizes that fit still build.
    #[test]
    fn counts_beyond_any_buffer_panic_by_name() {
        use crate::{DataType, ReduceOp};
        let m = usize::MAX;
        let (f, sum) = (DataType::F64, ReduceOp::Sum);
        type Build = Box<dyn Fn(usize) -> crate::Schedule>;
        let builders: Vec<(&str, Build)> = vec![
            ("bcast", Box::new(|c| bcast::binomial(0, 3, 0, c))),
            (
                "bcast sa",
                Box::new(|c| bcast::scatter_allgather(0, 3, 0, c)),
            ),
            ("gather", Box::new(|c| gather::binomial(0, 3, 0, c))),
            ("scatter", Box::new(|c| scatter::binomial(0, 3, 0, c))),
            ("alltoall", Box::new(|c| alltoall::pairwise(0, 3, c))),
            ("alltoall bruck", Box::new(|c| alltoall::bruck(0, 3, c))),
            ("allgather", Box::new(|c| allgather::ring(0, 3, &[c; 3]))),
            (
                "reduce",
                Box::new(move |c| reduce::binomial(0, 3, 0, c, f, sum)),
            ),
            (
                "allreduce",
                Box::new(move |c| allreduce::ring(0, 3, c, f, sum)),
            ),
            (
                "allreduce rd",
                Box::new(move |c| allreduce::recursive_doubling(0, 3, c, f, sum)),
            ),
            (
                "allreduce rab",
                Box::new(move |c| allreduce::rabenseifner(0, 3, c, f, sum)),
            ),
            (
                "reduce_scatter",
                Box::new(move |c| reduce_scatter::ring(0, 3, &[c; 3], f, sum)),
            ),
        ];
        for (name, build) in &builders {
            let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| build(m)))
                .expect_err(name);
            let text = e.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(text.contains("is more than isize::MAX"), "{name}: {text:?}");
            assert!(!build(5).rounds.is_empty(), "{name}");
        }
    }

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
