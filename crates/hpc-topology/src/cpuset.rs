//! An owned set of processing units (PUs), identified by their operating-system index.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::TopologyError;

/// The highest PU index [`CpuSet::parse_list`] accepts: 2^20 - 1, far above any
/// Linux build (`NR_CPUS` is at most 8192), so that a typo cannot make a set of
/// billions of PUs.
pub const MAX_CPU_ID: u32 = (1 << 20) - 1;

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

    /// The set `0..n`; more than [`MAX_CPU_ID`] + 1 PUs, as [`CpuSet::parse_list`]
    /// refuses, are refused with [`TopologyError::CpuListTooLarge`] before anything
    /// is allocated (`first_n(u32::MAX)` aborted the process on an allocation of
    /// 16 GiB).
    ///
    /// ```
    /// use hpc_topology::CpuSet;
    /// assert_eq!(CpuSet::first_n(4).unwrap().to_string(), "0-3");
    /// assert!(CpuSet::first_n(u32::MAX).is_err());
    /// ```
    pub fn first_n(n: u32) -> Result<Self, TopologyError> {
        if n > MAX_CPU_ID + 1 {
            return Err(TopologyError::CpuListTooLarge {
                list: format!("0-{}", n - 1),
                what: format!("lists {n} CPUs"),
                max: MAX_CPU_ID,
            });
        }
        Ok((0..n).collect())
    }

    /// Parses the Linux cpulist syntax: comma-separated indices and inclusive ranges
    /// (`"0-3,8"`). An empty string is the empty set.
    ///
    /// A PU above [`MAX_CPU_ID`], or ranges that add up to more than `MAX_CPU_ID` PUs, are
    /// refused with [`TopologyError::CpuListTooLarge`] before anything is allocated,
    /// so a typo such as `0-4294967295` costs nothing.
    ///
    /// ```
    /// use hpc_topology::CpuSet;
    /// assert!(CpuSet::parse_list("0-4294967295").is_err());
    /// ```
    pub fn parse_list(text: &str) -> Result<Self, TopologyError> {
        let bad = || TopologyError::BadCpuList(text.to_string());
        let too_large = |what: String| TopologyError::CpuListTooLarge {
            list: text.to_string(),
            what,
            max: MAX_CPU_ID,
        };
        let id = |s: &str| -> Result<u32, TopologyError> {
            let v: u64 = s.trim().parse().map_err(|_| bad())?;
            match u32::try_from(v) {
                Ok(v) if v <= MAX_CPU_ID => Ok(v),
                _ => Err(too_large(format!("names CPU {v}"))),
            }
        };
        let mut ranges = Vec::new();
        let mut total: u64 = 0;
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (id(a)?, id(b)?),
                None => {
                    let a = id(part)?;
                    (a, a)
                }
            };
            if a > b {
                return Err(bad());
            }
            total += u64::from(b - a) + 1;
            if total > u64::from(MAX_CPU_ID) + 1 {
                return Err(too_large(format!(
                    "lists more than {} CPUs",
                    MAX_CPU_ID + 1
                )));
            }
            ranges.push(a..=b);
        }
        let mut set = Self::new();
        for r in ranges {
            set.0.extend(r);
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
            // `end + 1` overflowed at CPU u32::MAX, which a deserialized set can
            // hold (a panic in debug builds).
            while end
                .checked_add(1)
                .is_some_and(|next| iter.peek() == Some(&next))
            {
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

    /// `first_n` of more PUs than a list may name is refused as `parse_list`
    /// refuses it (`u32::MAX` aborted on an allocation of 16 GiB), and a set
    /// holding CPU `u32::MAX` (deserialized) is written without overflowing.
    #[test]
    fn first_n_is_bounded_and_the_last_cpu_is_written() {
        assert_eq!(CpuSet::first_n(0).unwrap(), CpuSet::new());
        assert_eq!(
            CpuSet::first_n(MAX_CPU_ID + 1).unwrap().len(),
            MAX_CPU_ID as usize + 1
        );
        for n in [MAX_CPU_ID + 2, u32::MAX] {
            let e = CpuSet::first_n(n).unwrap_err();
            assert!(
                matches!(e, TopologyError::CpuListTooLarge { .. }),
                "{n}: {e}"
            );
        }
        let set: CpuSet = serde_json::from_str("[4294967294, 4294967295, 0]").unwrap();
        assert_eq!(set.to_string(), "0,4294967294-4294967295");
    }

    #[test]
    fn huge_lists_are_refused_before_allocating() {
        let t = std::time::Instant::now();
        for text in [
            "0-4294967295",
            "4294967296",
            "1048576",
            "0-1048576",
            "99999999999999",
        ] {
            let e = CpuSet::parse_list(text).unwrap_err();
            assert!(
                matches!(
                    e,
                    TopologyError::CpuListTooLarge {
                        max: MAX_CPU_ID,
                        ..
                    }
                ),
                "{text}: {e}"
            );
            assert!(e.to_string().contains("1048575"), "{e}");
        }
        // Overlapping ranges that add up to too many PUs, each one allowed alone.
        let many = vec!["0-1048575"; 64].join(",");
        let e = CpuSet::parse_list(&many).unwrap_err();
        assert!(e.to_string().contains("more than 1048576 CPUs"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(
            CpuSet::parse_list("1048575").unwrap().last(),
            Some(MAX_CPU_ID)
        );
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
