//! An owned set of processing units (PUs), identified by their operating-system index.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::TopologyError;

/// A set of processing units (hardware threads), by operating-system index — the
/// numbers `taskset`, `sched_setaffinity` and `/proc/cpuinfo` use.
///
/// Serialized as a sorted JSON array of integers. [`Display`](fmt::Display) and
/// [`CpuSet::parse_list`] use the Linux "cpulist" syntax (`0-3,8,10-11`).
///
/// ```
/// use hpc_topology::CpuSet;
/// let set = CpuSet::parse_list("0-3,8").unwrap();
/// assert_eq!(set.len(), 5);
/// assert!(set.contains(8));
/// assert_eq!(set.to_string(), "0-3,8");
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CpuSet(BTreeSet<u32>);

impl CpuSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The set `0..n`.
    pub fn first_n(n: u32) -> Self {
        (0..n).collect()
    }

    /// Parses the Linux cpulist syntax: comma-separated indices and inclusive ranges
    /// (`"0-3,8"`). An empty string is the empty set.
    pub fn parse_list(text: &str) -> Result<Self, TopologyError> {
        let bad = || TopologyError::BadCpuList(text.to_string());
        let mut set = Self::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.split_once('-') {
                Some((a, b)) => {
                    let a: u32 = a.trim().parse().map_err(|_| bad())?;
                    let b: u32 = b.trim().parse().map_err(|_| bad())?;
                    if a > b {
                        return Err(bad());
                    }
                    set.0.extend(a..=b);
                }
                None => {
                    set.0.insert(part.parse().map_err(|_| bad())?);
                }
            }
        }
        Ok(set)
    }

    /// Number of PUs in the set.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether PU `os_index` is in the set.
    pub fn contains(&self, os_index: u32) -> bool {
        self.0.contains(&os_index)
    }

    /// Adds PU `os_index`; returns whether it was new.
    pub fn insert(&mut self, os_index: u32) -> bool {
        self.0.insert(os_index)
    }

    /// Removes PU `os_index`; returns whether it was present.
    pub fn remove(&mut self, os_index: u32) -> bool {
        self.0.remove(&os_index)
    }

    /// The PUs in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    /// The lowest PU, if any.
    pub fn first(&self) -> Option<u32> {
        self.0.first().copied()
    }

    /// The highest PU, if any.
    pub fn last(&self) -> Option<u32> {
        self.0.last().copied()
    }

    /// PUs in both sets.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        self.0.intersection(&other.0).copied().collect()
    }

    /// PUs in either set.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        self.0.union(&other.0).copied().collect()
    }

    /// PUs in `self` but not in `other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        self.0.difference(&other.0).copied().collect()
    }

    /// Whether the sets share at least one PU.
    pub fn intersects(&self, other: &CpuSet) -> bool {
        // Iterate over the smaller set.
        let (small, big) = if self.len() <= other.len() {
            (self, other)
        } else {
            (other, self)
        };
        small.iter().any(|i| big.contains(i))
    }

    /// Number of PUs in both sets.
    pub fn intersection_len(&self, other: &CpuSet) -> usize {
        let (small, big) = if self.len() <= other.len() {
            (self, other)
        } else {
            (other, self)
        };
        small.iter().filter(|&i| big.contains(i)).count()
    }

    /// Whether every PU of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.is_subset(&other.0)
    }

    /// Adds every PU of `other`.
    pub fn extend_from(&mut self, other: &CpuSet) {
        self.0.extend(other.iter());
    }

    /// The PUs as a sorted vector.
    pub fn to_vec(&self) -> Vec<u32> {
        self.iter().collect()
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl Extend<u32> for CpuSet {
    fn extend<I: IntoIterator<Item = u32>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

impl fmt::Display for CpuSet {
    /// Linux cpulist syntax, for example `0-3,8`; the empty set prints as nothing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut iter = self.iter().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end += 1;
                iter.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if end == start {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulist_round_trip() {
        for text in ["", "0", "0-3", "0-3,8", "1,3,5-7,100"] {
            assert_eq!(CpuSet::parse_list(text).unwrap().to_string(), text);
        }
        assert!(CpuSet::parse_list("3-1").is_err());
        assert!(CpuSet::parse_list("a").is_err());
    }

    #[test]
    fn set_operations() {
        let a = CpuSet::parse_list("0-3").unwrap();
        let b = CpuSet::parse_list("2-5").unwrap();
        assert_eq!(a.intersection(&b).to_string(), "2-3");
        assert_eq!(a.union(&b).to_string(), "0-5");
        assert_eq!(a.difference(&b).to_string(), "0-1");
        assert!(a.intersects(&b));
        assert_eq!(a.intersection_len(&b), 2);
        assert!(!a.is_subset(&b));
    }
}
