//! Decomposition of the neurons into blocks and the connectivity of one rank.
//!
//! Each rank draws the presynaptic sources of its own neurons (fixed in-degree, with
//! autapses and multapses, as NEST's `fixed_indegree` defaults), keyed by the target
//! neuron's id, so the network does not depend on the decomposition. It stores them
//! by source for delivery: for every neuron of the network, the sorted list of its
//! local targets (CSR: `offsets` + `targets`, local indices: `u16` where the rank
//! has at most 65,536 neurons, else `u32`). Weight and delay are per population and
//! global, so a synapse costs 2 bytes (4 on a rank of more neurons): half the
//! memory that delivery streams through for every spike.

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
    targets: Targets,
}

/// The local target indices of a rank, in the narrowest width that holds its
/// neurons.
#[derive(Clone, Debug)]
enum Targets {
    /// A rank of at most 65,536 neurons.
    Narrow(Vec<u16>),
    /// A rank of more.
    Wide(Vec<u32>),
}

/// The rows of a [`Connectivity`] in the width it stores: what delivery reads.
#[derive(Clone, Copy, Debug)]
pub enum Rows<'a> {
    /// Targets as `u16` (a rank of at most 65,536 neurons).
    Narrow(Csr<'a, u16>),
    /// Targets as `u32`.
    Wide(Csr<'a, u32>),
}

/// Rows of local targets of one width, by source.
#[derive(Clone, Copy, Debug)]
pub struct Csr<'a, T> {
    offsets: &'a [u64],
    targets: &'a [T],
}

impl<'a, T> Csr<'a, T> {
    /// The local targets of source `s`, sorted.
    #[inline(always)]
    pub fn row(&self, s: u32) -> &'a [T] {
        let a = self.offsets[s as usize] as usize;
        let b = self.offsets[s as usize + 1] as usize;
        &self.targets[a..b]
    }
}

/// A local target index as stored: `u16` or `u32`.
pub trait Local: Copy + Default + Send + Sync + 'static {
    /// The index `i`, which the caller has checked to fit.
    fn from_index(i: u32) -> Self;
    /// The index.
    fn index(self) -> u32;
}

impl Local for u16 {
    #[inline(always)]
    fn from_index(i: u32) -> u16 {
        debug_assert!(i <= u16::MAX as u32);
        i as u16
    }
    #[inline(always)]
    fn index(self) -> u32 {
        self as u32
    }
}

impl Local for u32 {
    #[inline(always)]
    fn from_index(i: u32) -> u32 {
        i
    }
    #[inline(always)]
    fn index(self) -> u32 {
        self
    }
}

/// Whether every local index of `local` (`0..len`) fits a `u16`.
fn fits_u16(local: Block) -> bool {
    local.len <= 1 << 16
}

/// A pointer that may be shared by threads that write disjoint elements.
#[derive(Clone, Copy)]
struct SharedMut<T>(*mut T);
// SAFETY: used only to write elements that no other thread touches (see `build`).
unsafe impl<T> Send for SharedMut<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    /// The pointer (a method, so that closures capture the whole `Send` wrapper).
    fn get(self) -> *mut T {
        self.0
    }
}

impl Connectivity {
    /// Draws the sources of the neurons of `local` and stores them by source, in
    /// two passes (count, then fill) over the same counter-based streams so that no
    /// temporary list of synapses is needed; targets as `u16` where `local` has at
    /// most 65,536 neurons. Uses the threads of the current rayon pool; the result
    /// does not depend on their number.
    pub fn build(model: &Model, local: Block) -> Connectivity {
        if fits_u16(local) {
            let (offsets, t) = Self::build_as::<u16>(model, local);
            Connectivity {
                offsets,
                targets: Targets::Narrow(t),
            }
        } else {
            let (offsets, t) = Self::build_as::<u32>(model, local);
            Connectivity {
                offsets,
                targets: Targets::Wide(t),
            }
        }
    }

    /// The offsets and the targets in width `T`, which holds every local index
    /// of `local`.
    fn build_as<T: Local>(model: &Model, local: Block) -> (Vec<u64>, Vec<T>) {
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
        let mut targets = vec![T::default(); total as usize];
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
                        unsafe { *ptr.get().add(*pos as usize) = T::from_index(li) };
                        *pos += 1;
                    });
                }
            });
        (offsets, targets)
    }

    /// The rows, for delivery.
    #[inline(always)]
    pub fn rows(&self) -> Rows<'_> {
        let offsets = &self.offsets;
        match &self.targets {
            Targets::Narrow(targets) => Rows::Narrow(Csr { offsets, targets }),
            Targets::Wide(targets) => Rows::Wide(Csr { offsets, targets }),
        }
    }

    /// The local targets of source `s`, sorted (for the tests: delivery reads
    /// [`Connectivity::rows`]).
    #[cfg(test)]
    fn row(&self, s: u32) -> Vec<u32> {
        match self.rows() {
            Rows::Narrow(c) => c.row(s).iter().map(|&t| t as u32).collect(),
            Rows::Wide(c) => c.row(s).to_vec(),
        }
    }

    /// Number of synapses stored.
    pub fn synapses(&self) -> u64 {
        match &self.targets {
            Targets::Narrow(t) => t.len() as u64,
            Targets::Wide(t) => t.len() as u64,
        }
    }

    /// Bytes of memory the connectivity takes.
    pub fn bytes(&self) -> u64 {
        let targets = match &self.targets {
            Targets::Narrow(t) => t.capacity() * 2,
            Targets::Wide(t) => t.capacity() * 4,
        };
        (targets + self.offsets.capacity() * 8) as u64
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

    /// NEST's Brunel network of order `order`.
    fn nest_model(order: u32) -> Model {
        Model::new(Params {
            order,
            ..Params::preset(Preset::Nest)
        })
        .unwrap()
    }

    #[test]
    fn both_widths_store_the_same_rows() {
        let model = nest_model(20);
        let b = Block::part(model.n, 2, 1);
        let (o16, t16) = Connectivity::build_as::<u16>(&model, b);
        let (o32, t32) = Connectivity::build_as::<u32>(&model, b);
        assert_eq!(o16, o32);
        assert_eq!(t16.iter().map(|&t| t as u32).collect::<Vec<_>>(), t32);
        assert!(t32.iter().any(|&t| t > 0) && t32.iter().all(|&t| t < b.len));
        assert!(matches!(
            Connectivity::build(&model, b).rows(),
            Rows::Narrow(_)
        ));
        let c = Connectivity {
            offsets: o32,
            targets: Targets::Wide(t32),
        };
        assert!(matches!(c.rows(), Rows::Wide(_)));
        assert_eq!(
            c.bytes(),
            Connectivity {
                offsets: o16,
                targets: Targets::Narrow(t16)
            }
            .bytes()
                + 2 * c.synapses()
        );
        let block = |len| Block { first: 7, len };
        assert!(fits_u16(block(1 << 16)) && !fits_u16(block((1 << 16) + 1)));
    }

    #[test]
    fn same_synapses_for_any_split() {
        let model = nest_model(20);
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
                    assert_eq!(c.row(s), expect);
                }
            }
        }
    }
}
