//! Splitting a vector into per-rank chunks aligned to 16 bytes.
//!
//! The ring allreduce cuts the vector into one chunk per rank. Every chunk
//! but the last starts on a 16-byte boundary (relative to the buffer start)
//! so that the reduction kernel can use 16-byte vector loads on every chunk
//! of a buffer that is itself 16-byte aligned (every `cudaMalloc`
//! allocation is 256-byte aligned).

/// Alignment of chunk starts, in bytes.
pub const CHUNK_ALIGN: usize = 16;

use crate::error::{GpuError, Result};

/// The most ranks a native plan is built for (one chunk per rank; re-exported
/// by [`plan`](crate::plan), whose plans check it). The plans of every rank are
/// built together and hold about `size²` operations (16 million at this
/// size), so a larger size, such as a rank count computed wrongly, would be an
/// allocation sized by it.
pub const MAX_PLAN_RANKS: usize = 4096;

/// Splits `count` elements of `elem_size` bytes into `parts` chunks: returns
/// `parts` element counts that add up to `count`, as even as possible in
/// units of `16 / elem_size` elements (whole 16-byte vectors); the leftover
/// that does not fill a vector goes to the last chunk. Chunk `i` starts at
/// `sum(counts[..i])`, a multiple of 16 bytes for every `i`.
///
/// `elem_size` must divide 16 (1, 2, 4, 8 or 16) and `parts` must be
/// 1 to [`MAX_PLAN_RANKS`] (one chunk per rank): other arguments are refused
/// with [`GpuError::Plan`] naming them, before anything is allocated (a
/// `parts` of 0 or an element size of 3 panicked, and `usize::MAX` parts
/// asked for a vector larger than memory).
///
/// ```
/// let c = hpc_gpu::chunk::split_aligned(10, 4, 3).unwrap();
/// assert_eq!(c.iter().sum::<usize>(), 10);
/// assert_eq!(c, vec![4, 4, 2]);
/// assert!(hpc_gpu::chunk::split_aligned(10, 4, 0).is_err());
/// ```
pub fn split_aligned(count: usize, elem_size: usize, parts: usize) -> Result<Vec<usize>> {
    if parts == 0 || parts > MAX_PLAN_RANKS {
        return Err(GpuError::Plan(format!(
            "cannot split {count} elements into {parts} chunks: 1 to {MAX_PLAN_RANKS} chunks \
             (one per rank)"
        )));
    }
    if elem_size == 0 || CHUNK_ALIGN % elem_size != 0 {
        return Err(GpuError::Plan(format!(
            "cannot split elements of {elem_size} bytes into {CHUNK_ALIGN}-byte-aligned chunks: \
             the element size must divide {CHUNK_ALIGN}"
        )));
    }
    let per = CHUNK_ALIGN / elem_size;
    let vectors = count / per;
    let tail = count % per;
    let mut out: Vec<usize> = (0..parts)
        .map(|i| (vectors / parts + usize::from(i < vectors % parts)) * per)
        .collect();
    out[parts - 1] += tail;
    Ok(out)
}

/// Prefix offsets of `counts` (in elements): `out[i] = sum(counts[..i])`,
/// `out.len() == counts.len() + 1`.
pub fn offsets(counts: &[usize]) -> Vec<usize> {
    hpc_collectives::algo::prefix(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(count: usize, e: usize, parts: usize) {
        let c = split_aligned(count, e, parts).unwrap();
        assert_eq!(c.len(), parts);
        assert_eq!(
            c.iter().sum::<usize>(),
            count,
            "count {count} e {e} parts {parts}"
        );
        let off = offsets(&c);
        for (i, o) in off.iter().enumerate().take(parts) {
            assert_eq!(
                o * e % CHUNK_ALIGN,
                0,
                "chunk {i} of {count}x{e}/{parts} at {o}"
            );
        }
        // Every element covered exactly once: chunks are contiguous and
        // ordered (checked element by element for small counts).
        assert!(off.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!((off[0], off[parts]), (0, count));
        if count <= 4096 {
            let mut seen = vec![0u8; count];
            for i in 0..parts {
                for s in &mut seen[off[i]..off[i + 1]] {
                    *s += 1;
                }
            }
            assert!(seen.iter().all(|&s| s == 1));
        }
        // Balanced: chunk sizes differ by at most one vector, plus the tail.
        let per = CHUNK_ALIGN / e;
        let body: Vec<usize> = c
            .iter()
            .enumerate()
            .map(|(i, &x)| if i + 1 == parts { x - count % per } else { x })
            .collect();
        let (lo, hi) = (body.iter().min().unwrap(), body.iter().max().unwrap());
        assert!(hi - lo <= per);
    }

    #[test]
    fn every_type_every_small_size() {
        for e in [2, 4, 8] {
            for parts in 1..=8 {
                for count in 0..=1000 {
                    check(count, e, parts);
                }
            }
        }
    }

    /// No parts, more parts than ranks a plan has, and element sizes that do
    /// not divide 16 are refused by name: `parts` 0 and an element size of 3
    /// panicked, and `usize::MAX` parts asked for a vector larger than memory.
    #[test]
    fn arguments_no_split_can_have_are_refused_by_name() {
        for (count, e, parts, says) in [
            (10, 4, 0, "into 0 chunks"),
            (10, 4, usize::MAX, "1 to 4096 chunks"),
            (10, 4, MAX_PLAN_RANKS + 1, "into 4097 chunks"),
            (10, 3, 2, "elements of 3 bytes"),
            (10, 0, 2, "elements of 0 bytes"),
            (10, 32, 2, "must divide 16"),
        ] {
            let err = split_aligned(count, e, parts).unwrap_err().to_string();
            assert!(err.contains(says), "{count} {e} {parts}: {err}");
        }
        assert_eq!(split_aligned(usize::MAX, 16, 1).unwrap(), [usize::MAX]);
        assert_eq!(
            split_aligned(0, 1, MAX_PLAN_RANKS).unwrap().len(),
            MAX_PLAN_RANKS
        );
    }

    #[test]
    fn large_sizes() {
        for e in [2, 4, 8] {
            for parts in [1, 2, 3, 4, 7, 8, 64] {
                for count in [1 << 20, (1 << 28) + 3, (1 << 28) - 1, 1_000_000_007] {
                    check(count, e, parts);
                }
            }
        }
    }
}
