//! Splitting a vector into per-rank chunks aligned to 16 bytes.
//!
//! The ring allreduce cuts the vector into one chunk per rank. Every chunk
//! but the last starts on a 16-byte boundary (relative to the buffer start)
//! so that the reduction kernel can use 16-byte vector loads on every chunk
//! of a buffer that is itself 16-byte aligned (every `cudaMalloc`
//! allocation is 256-byte aligned).

/// Alignment of chunk starts, in bytes.
pub const CHUNK_ALIGN: usize = 16;

/// Splits `count` elements of `elem_size` bytes into `parts` chunks: returns
/// `parts` element counts that add up to `count`, as even as possible in
/// units of `16 / elem_size` elements (whole 16-byte vectors); the leftover
/// that does not fill a vector goes to the last chunk. Chunk `i` starts at
/// `sum(counts[..i])`, a multiple of 16 bytes for every `i`.
///
/// `elem_size` must divide 16 (1, 2, 4, 8 or 16) and `parts` must be
/// positive.
///
/// ```
/// let c = hpc_gpu::chunk::split_aligned(10, 4, 3);
/// assert_eq!(c.iter().sum::<usize>(), 10);
/// assert_eq!(c, vec![4, 4, 2]);
/// ```
pub fn split_aligned(count: usize, elem_size: usize, parts: usize) -> Vec<usize> {
    assert!(parts > 0, "parts must be positive");
    assert!(
        elem_size > 0 && CHUNK_ALIGN % elem_size == 0,
        "element size {elem_size} must divide {CHUNK_ALIGN}"
    );
    let per = CHUNK_ALIGN / elem_size;
    let vectors = count / per;
    let tail = count % per;
    let mut out: Vec<usize> = (0..parts)
        .map(|i| (vectors / parts + usize::from(i < vectors % parts)) * per)
        .collect();
    out[parts - 1] += tail;
    out
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
        let c = split_aligned(count, e, parts);
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
