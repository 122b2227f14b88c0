//! Decomposition of the neurons into blocks and the connectivity of one rank.
//!
//! Each rank draws the presynaptic sources of its own neurons (fixed in-degree, with
//! autapses and multapses, as NEST's `fixed_indegree` defaults), keyed by the target
//! neuron's id, so the network does not depend on the decomposition. It stores them
//! by source for delivery: for every neuron of the network, the sorted list of its
//! local targets (CSR: `offsets` + `targets`, local `u32` indices). Weight and delay
//! are per population and global, so a synapse costs 4 bytes.

use rayon::prelude::*;

pub use hpc_spiking::Block;

use crate::params::Model;
use hpc_spiking::rng::{below, draw, stream_key, Purpose};

/// Calls `f` with each presynaptic source of neuron `target`, excitatory first.
#[inline]
pub fn sources_of(model: &Model, target: u32, mut f: impl FnMut(u32)) {
    let key = stream_key(model.params.seed, Purpose::Connect, target);
    for j in 0..model.ce {
        f(below(draw(key, j as u64), model.ne));
    }
    for j in 0..model.ci {
        f(model.ne + below(draw(key, (model.ce + j) as u64), model.ni));
    }
}

/// The synapses onto one rank's neurons, by source.
#[derive(Clone, Debug)]
pub struct Connectivity {
    /// `targets[offsets[s]..offsets[s + 1]]` are the local targets of source `s`.
    offsets: Vec<u64>,
    /// Local target indices, sorted within each source.
    targets: Vec<u32>,
}

/// A pointer that may be shared by threads that write disjoint elements.
#[derive(Clone, Copy)]
struct SharedMut(*mut u32);
// SAFETY: used only to write elements that no other thread touches (see `build`).
unsafe impl Send for SharedMut {}
// SAFETY: as above.
unsafe impl Sync for SharedMut {}

impl SharedMut {
    fn get(self) -> *mut u32 {
        self.0
    }
}

impl Connectivity {
    /// Draws the sources of the neurons of `local` and stores them by source, in
    /// two passes (count, then fill) over the same counter-based streams so that no
    /// temporary list of synapses is needed. Uses the threads of the current rayon
    /// pool; the result does not depend on their number.
    pub fn build(model: &Model, local: Block) -> Connectivity {
        let n = model.n as usize;
        let chunks = (rayon::current_num_threads() as u32).clamp(1, local.len.max(1));
        let parts: Vec<Block> = (0..chunks)
            .map(|c| {
                let b = Block::part(local.len, chunks, c);
                Block {
                    first: local.first + b.first,
                    len: b.len,
                }
            })
            .collect();
        // Pass 1: per-chunk counts of targets per source.
        let counts: Vec<Vec<u32>> = parts
            .par_iter()
            .map(|b| {
                let mut c = vec![0u32; n];
                for t in b.first..b.end() {
                    sources_of(model, t, |s| c[s as usize] += 1);
                }
                c
            })
            .collect();
        // Offsets, and each chunk's write cursor per source: chunks are ascending
        // target ranges, so every row ends up sorted by target.
        let mut offsets = vec![0u64; n + 1];
        let mut cursors: Vec<Vec<u64>> = vec![vec![0u64; n]; counts.len()];
        let mut total = 0u64;
        for s in 0..n {
            offsets[s] = total;
            for (c, cnt) in counts.iter().enumerate() {
                cursors[c][s] = total;
                total += cnt[s] as u64;
            }
        }
        offsets[n] = total;
        drop(counts);
        let mut targets = vec![0u32; total as usize];
        let ptr = SharedMut(targets.as_mut_ptr());
        parts
            .par_iter()
            .zip(cursors.par_iter_mut())
            .for_each(|(b, cur)| {
                for t in b.first..b.end() {
                    let li = t - local.first;
                    sources_of(model, t, |s| {
                        let pos = &mut cur[s as usize];
                        // SAFETY: `pos` runs through this chunk's own slots of row
                        // `s`, [cursor, cursor + its count), which lie inside
                        // `targets` and are disjoint from every other chunk's.
                        unsafe { *ptr.get().add(*pos as usize) = li };
                        *pos += 1;
                    });
                }
            });
        Connectivity { offsets, targets }
    }

    /// The sorted local targets of source neuron `s`.
    #[inline(always)]
    pub fn row(&self, s: u32) -> &[u32] {
        let a = self.offsets[s as usize] as usize;
        let b = self.offsets[s as usize + 1] as usize;
        &self.targets[a..b]
    }

    /// Number of synapses stored.
    pub fn synapses(&self) -> u64 {
        self.targets.len() as u64
    }

    /// Bytes of memory the connectivity takes.
    pub fn bytes(&self) -> u64 {
        (self.targets.capacity() * 4 + self.offsets.capacity() * 8) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::{Params, Preset};

    #[test]
    fn blocks_cover() {
        for n in [1, 7, 100] {
            for p in 1..5 {
                let mut next = 0;
                for i in 0..p {
                    let b = Block::part(n, p, i);
                    assert_eq!(b.first, next);
                    next = b.end();
                }
                assert_eq!(next, n);
            }
        }
    }

    #[test]
    fn same_synapses_for_any_split() {
        let model = Model::new(Params {
            order: 20,
            ..Params::preset(Preset::Nest)
        })
        .unwrap();
        let whole = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| {
                Connectivity::build(
                    &model,
                    Block {
                        first: 0,
                        len: model.n,
                    },
                )
            });
        assert_eq!(whole.synapses(), model.synapses());
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for parts in 1..4 {
            for r in 0..parts {
                let b = Block::part(model.n, parts, r);
                let c = pool.install(|| Connectivity::build(&model, b));
                for s in 0..model.n {
                    let expect: Vec<u32> = whole
                        .row(s)
                        .iter()
                        .filter(|&&t| t >= b.first && t < b.end())
                        .map(|&t| t - b.first)
                        .collect();
                    assert_eq!(c.row(s), &expect[..]);
                }
            }
        }
    }
}
