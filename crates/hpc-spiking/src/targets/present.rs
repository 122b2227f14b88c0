//! Target lists of many sources, held only for the sources that have a
//! target here.
//!
//! A shard of a large network receives the spikes of every source but holds
//! synapses from only some of them: in NEST's `hpc_benchmark` at 10⁴ ranks of
//! 11,250 neurons, a source has one or two synapses on a rank of excitatory
//! neurons, or none. Whatever a shard keeps per source *of the network* grows
//! with the network under weak scaling; what it keeps per *present* source
//! does not.
//!
//! [`SourceIndex`] numbers the present sources `0..len` in id order: a bitmap
//! of every source with, for each word of 64, the number of present sources
//! before it. A lookup ([`SourceIndex::get`]) is one aligned 16-byte load, a
//! mask and a population count (a rank query), and the index takes a quarter
//! of a byte per source of the network, however many are present.
//! [`SourceLists`] holds the present sources' target lists (the `u16` steps of
//! [`crate::targets`], one array) and one `u32` offset each.
//!
//! Nothing is held per source of the network but the bitmap, while building
//! either: the synapses are given three times, in the same order, to
//! [`IndexBuilder::mark`] (which sources are present), [`ListCounter::count`]
//! (how many units each list takes) and [`ListFiller::push`] (the lists).
//! Where a shard's synapses outweigh its sources, [`DenseCounter`] does the
//! first two passes in one, counting every source for a while (12 bytes a
//! source), and the synapses are given twice.
//!
//! ```
//! use hpc_spiking::targets::{IndexBuilder, ListCounter};
//!
//! // Of 1,000 sources, 3 and 700 project here (onto targets 0, 2 and 5).
//! let synapses = [(3, 0), (700, 2), (3, 5)];
//! let mut marks = IndexBuilder::new(1000);
//! synapses.iter().for_each(|&(s, _)| marks.mark(s));
//! let mut counter = ListCounter::new(marks.finish());
//! synapses.iter().for_each(|&(s, t)| counter.count(s, t));
//! let mut filler = counter.filler()?;
//! for &(s, t) in &synapses {
//!     filler.push(s, t);
//! }
//! let lists = filler.finish();
//! assert_eq!(lists.get(3).collect::<Vec<_>>(), [0, 5]);
//! assert_eq!(lists.get(700).collect::<Vec<_>>(), [2]);
//! assert_eq!(lists.get(4).count(), 0);
//! assert_eq!(lists.index().get(700), Some(1));
//! assert_eq!(lists.index().len(), 2);
//! # Ok::<(), hpc_spiking::model::ModelError>(())
//! ```

use crate::model::ModelError;

use super::{decode, units, write, Decode};

/// 64 sources of a [`SourceIndex`]: which are present, and how many present
/// sources come before them. 16 bytes, aligned, so a lookup is one load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, align(16))]
struct Word {
    bits: u64,
    before: u32,
}

/// The present sources of a shard, numbered `0..len` in id order (see the
/// [module](self) docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceIndex {
    words: Vec<Word>,
    sources: u32,
    present: u32,
}

impl SourceIndex {
    /// Bytes of the index of `sources` sources, however many are present.
    pub const fn bytes_for(sources: u32) -> usize {
        sources.div_ceil(64) as usize * std::mem::size_of::<Word>()
    }

    /// The number of present source `source` (`None`: absent, or not below
    /// [`sources`](Self::sources)).
    #[inline]
    pub fn get(&self, source: u32) -> Option<usize> {
        let w = self.words.get((source >> 6) as usize)?;
        let bit = 1u64 << (source & 63);
        if w.bits & bit == 0 {
            return None;
        }
        Some((w.before + (w.bits & (bit - 1)).count_ones()) as usize)
    }

    /// How many present sources have an id below `source` (all of them for a
    /// `source` at or beyond [`sources`](Self::sources)): the number a
    /// present `source` has ([`get`](Self::get)), and where the sources from
    /// `source` on start in anything numbered as the index.
    #[inline]
    pub fn present_below(&self, source: u32) -> usize {
        match self.words.get((source >> 6) as usize) {
            Some(w) => (w.before + (w.bits & ((1u64 << (source & 63)) - 1)).count_ones()) as usize,
            None => self.present as usize,
        }
    }

    /// Sources indexed (ids `0..sources`), present or not.
    pub fn sources(&self) -> u32 {
        self.sources
    }

    /// Number of present sources.
    pub fn len(&self) -> usize {
        self.present as usize
    }

    /// Whether no source is present.
    pub fn is_empty(&self) -> bool {
        self.present == 0
    }

    /// The present sources in increasing id order (the `i`-th is number `i`).
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, w)| {
            let mut bits = w.bits;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros();
                    bits &= bits - 1;
                    ((i as u32) << 6) | b
                })
            })
        })
    }

    /// Bytes of the index as allocated.
    pub fn bytes(&self) -> usize {
        self.words.capacity() * std::mem::size_of::<Word>()
    }
}

/// The first pass of building a [`SourceIndex`]: marks the present sources.
#[derive(Clone, Debug)]
pub struct IndexBuilder {
    words: Vec<Word>,
    sources: u32,
}

impl IndexBuilder {
    /// No source of `0..sources` present yet.
    pub fn new(sources: u32) -> Self {
        IndexBuilder {
            words: vec![Word::default(); sources.div_ceil(64) as usize],
            sources,
        }
    }

    /// Marks `source` present (again, or for the first time).
    ///
    /// # Panics
    ///
    /// When `source` is not below the `sources` given to [`new`](Self::new).
    #[inline]
    pub fn mark(&mut self, source: u32) {
        assert!(
            source < self.sources,
            "source {source} is outside the {} sources of the index",
            self.sources
        );
        self.words[(source >> 6) as usize].bits |= 1u64 << (source & 63);
    }

    /// The index of the sources marked.
    pub fn finish(mut self) -> SourceIndex {
        let mut present = 0u32;
        for w in &mut self.words {
            w.before = present;
            // At most 2^32 - 1 sources: no overflow.
            present += w.bits.count_ones();
        }
        SourceIndex {
            words: self.words,
            sources: self.sources,
            present,
        }
    }
}

/// The first two passes in one, for a shard whose synapses outweigh its
/// sources: counts every source's units densely (12 bytes a source of the
/// network, while counting only), then keeps the present ones
/// ([`finish`](Self::finish)), so the synapses are given twice instead of
/// three times. The lists are the same as through [`IndexBuilder`].
#[derive(Clone, Debug)]
pub struct DenseCounter {
    units: Vec<u32>,
    synapses: Vec<u32>,
    prev: Vec<u32>,
}

impl DenseCounter {
    /// Bytes the counter takes per source of the network.
    pub const BYTES_PER_SOURCE: usize = 12;

    /// Counts the lists of sources `0..sources`.
    pub fn new(sources: u32) -> Self {
        let n = sources as usize;
        DenseCounter {
            units: vec![0; n],
            synapses: vec![0; n],
            prev: vec![0; n],
        }
    }

    /// Counts a synapse of `source` onto `target`, after the source's
    /// previous one.
    ///
    /// # Panics
    ///
    /// When `source` is not below the `sources` given to [`new`](Self::new).
    #[inline]
    pub fn count(&mut self, source: u32, target: u32) {
        let s = source as usize;
        assert!(
            s < self.units.len(),
            "source {source} is outside the {} sources counted",
            self.units.len()
        );
        let prev = std::mem::replace(&mut self.prev[s], target);
        self.units[s] = self.units[s].saturating_add(units(prev, target) as u32);
        self.synapses[s] = self.synapses[s].saturating_add(1);
    }

    /// The counts of the sources with a synapse, as [`ListCounter`] would
    /// have them after its pass.
    pub fn finish(self) -> ListCounter {
        let mut marks = IndexBuilder::new(self.units.len() as u32);
        for (s, &c) in self.synapses.iter().enumerate() {
            if c > 0 {
                marks.mark(s as u32);
            }
        }
        let index = marks.finish();
        let keep = |v: &[u32]| -> Vec<u32> {
            let mut out = Vec::with_capacity(index.len());
            out.extend(
                v.iter()
                    .zip(&self.synapses)
                    .filter(|&(_, &c)| c > 0)
                    .map(|(&x, _)| x),
            );
            out
        };
        ListCounter {
            units: keep(&self.units),
            synapses: keep(&self.synapses),
            prev: vec![0; index.len()],
            index,
        }
    }
}

/// The second pass: how many units each present source's list takes.
#[derive(Clone, Debug)]
pub struct ListCounter {
    index: SourceIndex,
    /// Per present source: units and synapses so far (saturating: a total
    /// beyond `u32` is refused by [`filler`](Self::filler) anyway), and the
    /// previous target.
    units: Vec<u32>,
    synapses: Vec<u32>,
    prev: Vec<u32>,
}

impl ListCounter {
    /// Counts the lists of the sources present in `index`.
    pub fn new(index: SourceIndex) -> Self {
        let n = index.len();
        ListCounter {
            index,
            units: vec![0; n],
            synapses: vec![0; n],
            prev: vec![0; n],
        }
    }

    /// Counts a synapse of `source` onto `target`, after the source's
    /// previous one.
    ///
    /// # Panics
    ///
    /// When `source` is not present in the index.
    #[inline]
    pub fn count(&mut self, source: u32, target: u32) {
        let p = self.row(source);
        let prev = std::mem::replace(&mut self.prev[p], target);
        self.units[p] = self.units[p].saturating_add(units(prev, target) as u32);
        self.synapses[p] = self.synapses[p].saturating_add(1);
    }

    fn row(&self, source: u32) -> usize {
        match self.index.get(source) {
            Some(p) => p,
            None => panic!("source {source} was not marked present"),
        }
    }

    /// The third pass, for the lists counted; refused when they take more
    /// than `u32::MAX` units or synapses in all (the offsets are `u32`: a
    /// shard that large is split over more threads).
    pub fn filler(self) -> Result<ListFiller, ModelError> {
        let n = self.index.len();
        let mut starts = Vec::with_capacity(n + 1);
        let mut synapse_starts = Vec::with_capacity(n + 1);
        let (mut units, mut synapses) = (0u64, 0u64);
        for p in 0..n {
            starts.push(units as u32);
            synapse_starts.push(synapses as u32);
            units += self.units[p] as u64;
            synapses += self.synapses[p] as u64;
            if units > u32::MAX as u64 {
                return Err(ModelError::Param {
                    name: "target units of a shard",
                    value: units as f64,
                    must:
                        "at most 4,294,967,295 (u32 offsets): split the network over more threads",
                });
            }
        }
        starts.push(units as u32);
        synapse_starts.push(synapses as u32);
        drop(self.units);
        drop(self.synapses);
        let mut prev = self.prev;
        prev.fill(0);
        Ok(ListFiller {
            index: self.index,
            starts,
            synapse_starts,
            prev,
            units: vec![0; units as usize],
        })
    }
}

/// The third pass: the lists, filled in the order counted.
#[derive(Clone, Debug)]
pub struct ListFiller {
    index: SourceIndex,
    /// Per present source, while filling: where its next unit goes (then,
    /// after [`finish`](Self::finish), where its list starts), and the end.
    starts: Vec<u32>,
    /// The same for synapses.
    synapse_starts: Vec<u32>,
    prev: Vec<u32>,
    units: Vec<u16>,
}

impl ListFiller {
    /// Number of synapses counted.
    pub fn synapses(&self) -> usize {
        *self.synapse_starts.last().unwrap_or(&0) as usize
    }

    /// Appends `target` to `source`'s list; answers the source's number and
    /// the synapse's position among all the lists' synapses (the lists in
    /// source order).
    ///
    /// # Panics
    ///
    /// When `source` is not present, or its list is already as long as
    /// counted (the passes gave other synapses).
    #[inline]
    pub fn push(&mut self, source: u32, target: u32) -> (usize, usize) {
        let p = match self.index.get(source) {
            Some(p) => p,
            None => panic!("source {source} was not marked present"),
        };
        let prev = std::mem::replace(&mut self.prev[p], target);
        let at = self.starts[p] as usize;
        self.starts[p] += write(&mut self.units[at..], prev, target) as u32;
        let s = self.synapse_starts[p];
        self.synapse_starts[p] += 1;
        (p, s as usize)
    }

    /// The lists and, per present source and one past the last, where its
    /// synapses start among all.
    pub(crate) fn finish_with_synapses(mut self) -> (SourceLists, Vec<u32>) {
        // Each cursor now stands at the start of the next list.
        for v in [&mut self.starts, &mut self.synapse_starts] {
            let n = v.len() - 1;
            debug_assert!(n == 0 || v[n - 1] == v[n], "lists filled as counted");
            for p in (1..=n).rev() {
                v[p] = v[p - 1];
            }
            v[0] = 0;
        }
        let synapses = *self.synapse_starts.last().unwrap_or(&0) as u64;
        (
            SourceLists {
                index: self.index,
                starts: self.starts,
                units: self.units,
                synapses,
            },
            self.synapse_starts,
        )
    }

    /// The lists.
    pub fn finish(self) -> SourceLists {
        self.finish_with_synapses().0
    }
}

/// The target lists of the present sources (see the [module](self) docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceLists {
    index: SourceIndex,
    /// Per present source, where its units start, and the end.
    starts: Vec<u32>,
    units: Vec<u16>,
    synapses: u64,
}

impl SourceLists {
    /// `source`'s targets, in the order pushed (none for an absent source).
    #[inline]
    pub fn get(&self, source: u32) -> Decode<'_> {
        match self.index.get(source) {
            Some(p) => self.row(p),
            None => decode(&[]),
        }
    }

    /// The targets of present source number `p` ([`SourceIndex::get`]).
    ///
    /// # Panics
    ///
    /// When `p` is not below the number of present sources.
    #[inline]
    pub fn row(&self, p: usize) -> Decode<'_> {
        decode(&self.units[self.starts[p] as usize..self.starts[p + 1] as usize])
    }

    /// The present sources.
    pub fn index(&self) -> &SourceIndex {
        &self.index
    }

    /// Number of synapses (targets) in all lists.
    pub fn synapses(&self) -> u64 {
        self.synapses
    }

    /// Bytes as allocated: the index, the offsets and the units.
    pub fn bytes(&self) -> usize {
        self.index.bytes() + self.starts.capacity() * 4 + self.units.capacity() * 2
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::lcg;
    use super::*;

    fn build(sources: u32, synapses: &[(u32, u32)]) -> (SourceLists, Vec<u32>) {
        let mut marks = IndexBuilder::new(sources);
        synapses.iter().for_each(|&(s, _)| marks.mark(s));
        let mut counter = ListCounter::new(marks.finish());
        synapses.iter().for_each(|&(s, t)| counter.count(s, t));
        // Counted densely in one pass, the same counts.
        let mut dense = DenseCounter::new(sources);
        synapses.iter().for_each(|&(s, t)| dense.count(s, t));
        let dense = dense.finish();
        assert_eq!(dense.index, counter.index);
        assert_eq!(
            (&dense.units, &dense.synapses, &dense.prev),
            (
                &counter.units,
                &counter.synapses,
                &vec![0; counter.index.len()]
            )
        );
        let mut filler = counter.filler().unwrap();
        for (k, &(s, t)) in synapses.iter().enumerate() {
            let (p, at) = filler.push(s, t);
            // The position is the synapse's among all, the lists in source order.
            let before = synapses.iter().filter(|&&(o, _)| o < s).count()
                + synapses[..k].iter().filter(|&&(o, _)| o == s).count();
            assert_eq!(at, before, "synapse {k}");
            assert_eq!(Some(p), filler.index.get(s));
        }
        filler.finish_with_synapses()
    }

    #[test]
    fn lists_read_back_as_pushed_for_any_sparsity() {
        let mut state = 11;
        for case in 0..60u32 {
            let sources = [1, 63, 64, 65, 1000, 100_000][case as usize % 6];
            let n = (lcg(&mut state) % 500) as usize;
            // Dense, sparse and very sparse sets of present sources; targets
            // ascending per source, and some far apart or going back.
            let pool = 1 + lcg(&mut state) % sources;
            let picks: Vec<u32> = (0..pool).map(|_| lcg(&mut state) % sources).collect();
            let synapses: Vec<(u32, u32)> = (0..n)
                .map(|i| {
                    let s = picks[lcg(&mut state) as usize % picks.len()];
                    let t = match case % 3 {
                        0 => i as u32,
                        1 => i as u32 * 40_000,
                        _ => lcg(&mut state),
                    };
                    (s, t)
                })
                .collect();
            let (lists, syn) = build(sources, &synapses);
            let mut want: Vec<Vec<u32>> = vec![Vec::new(); sources as usize];
            for &(s, t) in &synapses {
                want[s as usize].push(t);
            }
            let present: Vec<u32> = (0..sources)
                .filter(|&s| !want[s as usize].is_empty())
                .collect();
            assert_eq!(lists.index().iter().collect::<Vec<_>>(), present);
            assert_eq!(lists.index().len(), present.len());
            assert_eq!(lists.synapses(), n as u64);
            // Every present source, and the absent ones around each (all of
            // them in the smaller cases).
            let mut check: Vec<u32> = present
                .iter()
                .flat_map(|&s| [s.saturating_sub(1), s, s + 1])
                .filter(|&s| s < sources)
                .chain((0..sources).step_by(1 + sources as usize / 1000))
                .collect();
            check.sort_unstable();
            check.dedup();
            for s in check {
                assert_eq!(
                    lists.get(s).collect::<Vec<_>>(),
                    want[s as usize],
                    "case {case} source {s}"
                );
                let p = lists.index().get(s);
                assert_eq!(p, present.binary_search(&s).ok(), "case {case} source {s}");
                if let Some(p) = p {
                    assert_eq!((syn[p + 1] - syn[p]) as usize, want[s as usize].len());
                }
            }
            assert_eq!(lists.get(sources).count(), 0);
            assert_eq!(lists.get(u32::MAX).count(), 0);
            // Allocated exactly: the index, one offset a present source and one
            // more, the units.
            let units: usize = (0..sources)
                .map(|s| {
                    want[s as usize]
                        .iter()
                        .scan(0, |prev, &t| Some(units(std::mem::replace(prev, t), t)))
                        .sum::<usize>()
                })
                .sum();
            assert_eq!(
                lists.bytes(),
                SourceIndex::bytes_for(sources) + (present.len() + 1) * 4 + units * 2
            );
        }
    }

    #[test]
    fn the_index_counts_across_words() {
        let mut marks = IndexBuilder::new(200);
        for s in [0, 63, 64, 127, 128, 199] {
            marks.mark(s);
        }
        marks.mark(64);
        let index = marks.finish();
        assert_eq!(index.len(), 6);
        let got: Vec<Option<usize>> = [0, 1, 63, 64, 65, 127, 128, 198, 199, 200]
            .iter()
            .map(|&s| index.get(s))
            .collect();
        assert_eq!(
            got,
            [
                Some(0),
                None,
                Some(1),
                Some(2),
                None,
                Some(3),
                Some(4),
                None,
                Some(5),
                None
            ]
        );
        // Present below: the number of a present source, across words too.
        let below: Vec<usize> = [0, 1, 63, 64, 65, 127, 128, 199, 200, 1_000]
            .iter()
            .map(|&s| index.present_below(s))
            .collect();
        assert_eq!(below, [0, 1, 1, 2, 3, 3, 4, 5, 6, 6]);
        for s in 0..200 {
            if let Some(p) = index.get(s) {
                assert_eq!(index.present_below(s), p);
            }
        }
        assert_eq!(index.bytes(), 4 * 16);
        assert_eq!(SourceIndex::bytes_for(200), 4 * 16);
        assert!(IndexBuilder::new(0).finish().is_empty());
    }

    #[test]
    #[should_panic(expected = "outside the 10 sources")]
    fn a_source_beyond_the_index_is_refused() {
        IndexBuilder::new(10).mark(10);
    }
}
