//! Contiguous blocks of neurons: a rank's share of the network, a thread's share
//! of a rank's.

/// A contiguous range of neurons.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// First neuron (global id, or local index for a block within a rank).
    pub first: u32,
    /// Number of neurons.
    pub len: u32,
}

impl Block {
    /// Part `i` of `parts` near-equal contiguous parts of `0..n`.
    ///
    /// # Panics
    ///
    /// Unless `i < parts` (no parts divided by zero; a part beyond the last
    /// was a block past `n`, such as part 5 of 2 of 10 neurons: `25..30`).
    pub fn part(n: u32, parts: u32, i: u32) -> Block {
        assert!(
            i < parts,
            "Block::part: part {i} of {parts} parts (of {n} neurons) does not exist"
        );
        let base = n / parts;
        let rem = n % parts;
        Block {
            first: i * base + i.min(rem),
            len: base + u32::from(i < rem),
        }
    }

    /// One past the last neuron.
    pub fn end(&self) -> u32 {
        self.first + self.len
    }

    /// How many shards a rank splits this block into with `threads` threads:
    /// one per thread, at least one, at most one per neuron.
    pub fn shards(&self, threads: usize) -> u32 {
        threads.clamp(1, self.len.max(1) as usize) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_the_neurons() {
        let parts: Vec<Block> = (0..3).map(|i| Block::part(10, 3, i)).collect();
        assert_eq!(
            parts.iter().map(|b| (b.first, b.len)).collect::<Vec<_>>(),
            [(0, 4), (4, 3), (7, 3)]
        );
    }

    /// `Block::part(10, 0, 0)` panicked with "attempt to divide by zero", and
    /// `Block::part(10, 2, 5)` answered `25..30`, past the 10 neurons: a part
    /// that does not exist is refused by name.
    #[test]
    fn a_part_that_does_not_exist_is_refused_by_name() {
        for (parts, i) in [(0, 0), (2, 5), (3, u32::MAX)] {
            let e = std::panic::catch_unwind(|| Block::part(10, parts, i)).unwrap_err();
            let text = e.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(
                text.contains(&format!("part {i} of {parts} parts")),
                "{parts} {i}: {text:?}"
            );
        }
    }
}
