//! Compact lists of synapse targets: `u16` steps from the previous target,
//! with an escape for the rest.
//!
//! A network built target by target in increasing order (every example here)
//! gives each source a list of ascending targets whose steps are about the
//! network's size over the source's out-degree (the `scale` of NEST's
//! `hpc_benchmark`, 1 to 100): far below 65,535. Such a list takes 2 bytes a
//! target instead of a `u32`'s 4, and decodes with an addition.
//!
//! # Encoding
//!
//! A list is a sequence of `u16` *units*, decoded from a previous target of 0:
//!
//! * a unit `s < 0xFFFF` is the target `previous + s` (a repeated target, a
//!   multapse, is a step of 0);
//! * the unit `0xFFFF` ([`ESCAPE`]) is followed by two units, the high and the
//!   low half of the target itself: a step of 65,535 or more, or a target below
//!   the previous one, costs 6 bytes and decodes exactly.
//!
//! So any sequence of `u32` targets is stored, in its order, and read back
//! unchanged; only the bytes depend on the order. [`Targets`] is one growable
//! list; [`units`], [`write`](fn@write) and [`decode`] serve many lists laid out in one
//! array (a source's list at its offset), counted in a first pass and filled in
//! a second. [`SourceLists`] are such lists held only for the sources that
//! have a target (found through a [`SourceIndex`]), for a shard of a network
//! much larger than the targets it holds.
//!
//! ```
//! use hpc_spiking::targets::{decode, units, write, Targets};
//!
//! let mut list = Targets::new();
//! for t in [3, 3, 10, 70_000, 5] {
//!     list.push(t);
//! }
//! assert_eq!(list.iter().collect::<Vec<_>>(), [3, 3, 10, 70_000, 5]);
//! // 3, 3 and 10 take a unit each; 70,000 (a step of 69,990) and 5 (a step
//! // back) take three.
//! assert_eq!(list.units(), 9);
//!
//! // Two lists in one array: count, then fill at the offsets.
//! let lists = [vec![1u32, 2, 900], vec![7, 100_000]];
//! let sizes: Vec<usize> = lists
//!     .iter()
//!     .map(|l| l.iter().scan(0, |prev, &t| Some(units(std::mem::replace(prev, t), t))).sum())
//!     .collect();
//! assert_eq!(sizes, [3, 4]);
//! let mut all = vec![0u16; sizes.iter().sum()];
//! let mut at = 0;
//! for l in &lists {
//!     let mut prev = 0;
//!     for &t in l {
//!         at += write(&mut all[at..], prev, t);
//!         prev = t;
//!     }
//! }
//! assert_eq!(decode(&all[3..]).collect::<Vec<_>>(), [7, 100_000]);
//! ```

pub mod present;
pub use present::{DenseCounter, IndexBuilder, ListCounter, ListFiller, SourceIndex, SourceLists};

/// The unit that announces a target written out in the next two units.
pub const ESCAPE: u16 = u16::MAX;

/// How many units `target` takes after `prev`: 1, or 3 for an escape.
#[inline]
pub fn units(prev: u32, target: u32) -> usize {
    match target.checked_sub(prev) {
        Some(step) if step < ESCAPE as u32 => 1,
        _ => 3,
    }
}

/// Writes `target` after `prev` at the start of `out` and answers how many
/// units it took ([`units`]`(prev, target)`).
///
/// # Panics
///
/// When `out` is shorter than that: the caller counted the units first.
#[inline]
pub fn write(out: &mut [u16], prev: u32, target: u32) -> usize {
    match target.checked_sub(prev) {
        Some(step) if step < ESCAPE as u32 => {
            out[0] = step as u16;
            1
        }
        _ => {
            out[..3].copy_from_slice(&[ESCAPE, (target >> 16) as u16, target as u16]);
            3
        }
    }
}

/// The targets of a list of units, in order (see the [module](self) docs).
pub fn decode(units: &[u16]) -> Decode<'_> {
    Decode { units, prev: 0 }
}

/// The iterator of [`decode`]. A list cut inside an escape (which [`write`](fn@write)
/// never leaves) ends before the cut target.
#[derive(Clone, Debug)]
pub struct Decode<'a> {
    units: &'a [u16],
    prev: u32,
}

impl Iterator for Decode<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        let (&u, rest) = self.units.split_first()?;
        if u != ESCAPE {
            self.units = rest;
            self.prev = self.prev.wrapping_add(u as u32);
        } else {
            let [hi, lo, ..] = *rest else {
                self.units = &[];
                return None;
            };
            self.units = &rest[2..];
            self.prev = ((hi as u32) << 16) | lo as u32;
        }
        Some(self.prev)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.units.len().div_ceil(3), Some(self.units.len()))
    }
}

/// One growable list of targets (see the [module](self) docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Targets {
    units: Vec<u16>,
    len: usize,
    last: u32,
}

impl Targets {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `target`.
    #[inline]
    pub fn push(&mut self, target: u32) {
        match target.checked_sub(self.last) {
            Some(step) if step < ESCAPE as u32 => self.units.push(step as u16),
            _ => self
                .units
                .extend_from_slice(&[ESCAPE, (target >> 16) as u16, target as u16]),
        }
        self.last = target;
        self.len += 1;
    }

    /// The targets, in the order they were pushed.
    #[inline]
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            inner: decode(&self.units),
            left: self.len,
        }
    }

    /// Number of targets.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list has no target.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of units the targets take (one a target but for escapes).
    pub fn units(&self) -> usize {
        self.units.len()
    }

    /// Reserves room for `additional` more targets of one unit each.
    pub fn reserve(&mut self, additional: usize) {
        self.units.reserve_exact(additional);
    }

    /// Gives back the room reserved beyond the units held.
    pub fn shrink_to_fit(&mut self) {
        self.units.shrink_to_fit();
    }

    /// Bytes of the list's heap allocation (its capacity, not only the units held).
    pub fn heap_bytes(&self) -> usize {
        self.units.capacity() * std::mem::size_of::<u16>()
    }
}

/// The iterator of [`Targets::iter`], which knows how many targets remain.
#[derive(Clone, Debug)]
pub struct Iter<'a> {
    inner: Decode<'a>,
    left: usize,
}

impl Iterator for Iter<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        let t = self.inner.next()?;
        self.left = self.left.saturating_sub(1);
        Some(t)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Targets {
    type Item = u32;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (no dependency for a test).
    pub(super) fn lcg(state: &mut u64) -> u32 {
        *state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (*state >> 33) as u32
    }

    #[test]
    fn any_sequence_reads_back_in_its_order() {
        let mut state = 7;
        for case in 0..200 {
            let n = (lcg(&mut state) % 300) as usize;
            let span = match case % 4 {
                0 => 10,
                1 => 70_000,
                2 => 1 << 24,
                _ => u32::MAX,
            };
            let mut want: Vec<u32> = (0..n).map(|_| lcg(&mut state) % span.max(1)).collect();
            if case % 2 == 0 {
                want.sort_unstable();
            }
            let mut list = Targets::new();
            want.iter().for_each(|&t| list.push(t));
            assert_eq!(list.len(), n);
            let it = list.iter();
            assert_eq!(it.len(), n);
            assert_eq!(it.collect::<Vec<_>>(), want, "case {case}");
            assert_eq!(decode(&list.units).collect::<Vec<_>>(), want);
            let counted: usize = want
                .iter()
                .scan(0, |prev, &t| Some(units(std::mem::replace(prev, t), t)))
                .sum();
            assert_eq!(list.units(), counted);
        }
    }

    #[test]
    fn the_edges_of_a_step() {
        // 65,534 is the largest step of one unit; 65,535 is the escape's value.
        for (prev, t, n) in [
            (0, 0, 1),
            (0, 65_534, 1),
            (0, 65_535, 3),
            (5, 5, 1),
            (5, 4, 3),
            (u32::MAX - 1, u32::MAX, 1),
            (0, u32::MAX, 3),
            (u32::MAX, 0, 3),
        ] {
            assert_eq!(units(prev, t), n, "{prev} -> {t}");
            let mut list = Targets::new();
            list.push(prev);
            list.push(t);
            assert_eq!(list.iter().collect::<Vec<_>>(), [prev, t]);
            assert_eq!(list.units(), units(0, prev) + n);
        }
    }

    #[test]
    fn ascending_targets_take_two_bytes_each() {
        let mut list = Targets::new();
        list.reserve(10_000);
        (0..10_000u32).for_each(|i| list.push(i * 37));
        assert_eq!(list.units(), 10_000);
        assert_eq!(list.heap_bytes(), 20_000);
        assert_eq!(list.iter().nth(9_999), Some(9_999 * 37));
    }

    #[test]
    fn a_cut_escape_ends_the_list() {
        assert_eq!(decode(&[4, ESCAPE, 1]).collect::<Vec<_>>(), [4]);
        assert_eq!(decode(&[]).count(), 0);
    }
}
