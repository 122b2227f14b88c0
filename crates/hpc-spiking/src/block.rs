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
    pub fn part(n: u32, parts: u32, i: u32) -> Block {
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
