//! Parsers of `/proc` and `/sys` files.
//!
//! They never panic: input that does not parse yields `None` or skips the
//! offending line, which the report shows as "unknown".

use std::collections::BTreeMap;

/// One line of `/proc/<pid>/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// Path inside the mounted file system that forms the root of this mount.
    pub root: String,
    /// Mount point, relative to the process root.
    pub mount_point: String,
    /// Per-mount options (`rw,nosuid,...`).
    pub mount_options: String,
    /// File-system type (`ext4`, `overlay`, `tmpfs`, `cgroup2`, ...).
    pub fs_type: String,
    /// Mount source (device, `overlay`, `tmpfs`, ...).
    pub source: String,
    /// Per-superblock options (`rw,size=65536k`, `lowerdir=...`).
    pub super_options: String,
}

/// Parses `/proc/<pid>/mountinfo`; malformed lines are skipped.
///
/// Octal escapes (`\040` for a space) in paths are decoded.
pub fn mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines().filter_map(mountinfo_line).collect()
}

fn mountinfo_line(line: &str) -> Option<MountEntry> {
    let (left, right) = line.split_once(" - ")?;
    let fields: Vec<&str> = left.split_whitespace().collect();
    if fields.len() < 6 {
        return None;
    }
    let mut rest = right.split_whitespace();
    let fs_type = rest.next()?;
    let source = rest.next().unwrap_or("");
    let super_options = rest.next().unwrap_or("");
    Some(MountEntry {
        root: unescape_octal(fields[3]),
        mount_point: unescape_octal(fields[4]),
        mount_options: fields[5].to_string(),
        fs_type: fs_type.to_string(),
        source: unescape_octal(source),
        super_options: super_options.to_string(),
    })
}

/// Decodes `\NNN` octal escapes as used by the kernel in mount tables.
pub fn unescape_octal(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            let oct = &bytes[i + 1..i + 4];
            if oct.len() == 3 && oct.iter().all(|b| (b'0'..=b'7').contains(b)) {
                let v = u32::from(oct[0] - b'0') * 64
                    + u32::from(oct[1] - b'0') * 8
                    + u32::from(oct[2] - b'0');
                if let Ok(b) = u8::try_from(v) {
                    out.push(b);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The value of option `key` in a comma-separated option list (`size=64m`).
pub fn option_value<'a>(options: &'a str, key: &str) -> Option<&'a str> {
    options
        .split(',')
        .find_map(|o| o.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// One line of `/proc/<pid>/cgroup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupEntry {
    /// Hierarchy id (`0` for the cgroup v2 unified hierarchy).
    pub hierarchy: u32,
    /// Controllers of a v1 hierarchy (`cpu`, `cpuacct`, `name=systemd`); empty for v2.
    pub controllers: Vec<String>,
    /// Cgroup path (`/` under a cgroup namespace).
    pub path: String,
}

/// Parses `/proc/<pid>/cgroup`; malformed lines are skipped.
pub fn cgroup(text: &str) -> Vec<CgroupEntry> {
    text.lines()
        .filter_map(|line| {
            let mut it = line.splitn(3, ':');
            let hierarchy = it.next()?.trim().parse().ok()?;
            let controllers = it.next()?;
            let path = it.next()?;
            Some(CgroupEntry {
                hierarchy,
                controllers: controllers
                    .split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect(),
                path: path.to_string(),
            })
        })
        .collect()
}

/// A resource limit value from `/proc/<pid>/limits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitValue {
    /// No limit.
    Unlimited,
    /// A finite limit (bytes, files, ...).
    Value(u64),
}

impl LimitValue {
    /// Parses `unlimited` or a decimal number.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        if s == "unlimited" || s == "infinity" {
            Some(LimitValue::Unlimited)
        } else {
            s.parse().ok().map(LimitValue::Value)
        }
    }

    /// Whether the limit is at least `n`.
    pub fn at_least(self, n: u64) -> bool {
        match self {
            LimitValue::Unlimited => true,
            LimitValue::Value(v) => v >= n,
        }
    }
}

impl serde::Serialize for LimitValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            LimitValue::Unlimited => s.serialize_str("unlimited"),
            LimitValue::Value(v) => s.serialize_u64(*v),
        }
    }
}

/// Soft and hard value of one limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Limit {
    /// Soft limit (what applies).
    pub soft: LimitValue,
    /// Hard limit (what the soft limit may be raised to).
    pub hard: LimitValue,
}

/// Parses `/proc/<pid>/limits` into a map keyed by the limit name in lower
/// case (`max locked memory`, `max open files`, ...).
pub fn limits(text: &str) -> BTreeMap<String, Limit> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with("Limit ") {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        // Name words, then soft, hard, optional unit.
        let Some(first_val) = words.iter().position(|w| LimitValue::parse(w).is_some()) else {
            continue;
        };
        if first_val == 0 || first_val + 1 >= words.len() {
            continue;
        }
        let (Some(soft), Some(hard)) = (
            LimitValue::parse(words[first_val]),
            LimitValue::parse(words[first_val + 1]),
        ) else {
            continue;
        };
        let name = words[..first_val].join(" ").to_ascii_lowercase();
        out.insert(name, Limit { soft, hard });
    }
    out
}

/// Parses `Key:\tvalue` files such as `/proc/<pid>/status`.
pub fn status(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// Largest CPU index accepted in a CPU list (guards against absurd ranges).
pub const MAX_CPU: u32 = 1 << 20;

/// Parses a CPU list such as `0-3,8,10-11` (also `0-15:2` strides).
/// Returns the sorted, deduplicated CPU indices, or `None` on malformed input
/// and on a list whose parts name more than `MAX_CPU + 1` CPUs together (as
/// no machine's list does): the parts are counted before anything is
/// collected, so a list of a thousand whole ranges costs nothing.
pub fn cpulist(text: &str) -> Option<Vec<u32>> {
    let text = text.trim();
    let mut cpus = Vec::new();
    let mut total: u64 = 0;
    if text.is_empty() {
        return Some(cpus);
    }
    for part in text.split(',') {
        let part = part.trim();
        let (range, stride) = match part.split_once(':') {
            Some((r, s)) => (r, s.trim().parse::<u32>().ok().filter(|s| *s > 0)?),
            None => (part, 1),
        };
        let (lo, hi) = match range.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let v = range.parse::<u32>().ok()?;
                (v, v)
            }
        };
        if lo > hi || hi > MAX_CPU {
            return None;
        }
        total += u64::from((hi - lo) / stride) + 1;
        if total > u64::from(MAX_CPU) + 1 {
            return None;
        }
        let mut c = lo;
        while c <= hi {
            cpus.push(c);
            c = match c.checked_add(stride) {
                Some(n) => n,
                None => break,
            };
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// Parses `key=value` lines, values optionally double-quoted
/// (`/run/.containerenv`, `/etc/os-release`).
pub fn key_values(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|x| x.strip_suffix('"'))
                .unwrap_or(v);
            (k.trim().to_string(), v.to_string())
        })
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// Parses a size with an optional binary suffix (`65536k`, `64m`, `1g`, `1048576`)
/// as used in tmpfs `size=` options.
pub fn size_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        (i, 't' | 'T') => (&s[..i], 1 << 40),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// Parses cgroup v2 `cpu.max` (`max 100000` or `200000 100000`): the quota in CPUs,
/// `Some(None)` for no quota.
pub fn cpu_max(text: &str) -> Option<Option<f64>> {
    let mut it = text.split_whitespace();
    let quota = it.next()?;
    let period: u64 = it.next().map_or(Some(100_000), |p| p.parse().ok())?;
    if quota == "max" {
        return Some(None);
    }
    let quota: u64 = quota.parse().ok()?;
    if period == 0 {
        return None;
    }
    Some(Some(quota as f64 / period as f64))
}

/// Parses a cgroup memory limit (`max`, or bytes). Values of 2^60 and more
/// (cgroup v1's "no limit" is about 2^63) mean unlimited: `Some(None)`.
pub fn memory_limit(text: &str) -> Option<Option<u64>> {
    let t = text.trim();
    if t == "max" {
        return Some(None);
    }
    let v: u64 = t.parse().ok()?;
    Some(if v >= 1 << 60 { None } else { Some(v) })
}

/// Parses a hexadecimal capability mask (`CapEff` in `/proc/<pid>/status`).
pub fn cap_mask(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

/// Parses an InfiniBand port `state` file (`4: ACTIVE`) into its name.
pub fn port_state(text: &str) -> Option<String> {
    let t = text.trim();
    let name = match t.split_once(':') {
        Some((_, n)) => n.trim(),
        None => t,
    };
    if name.is_empty() {
        None
    } else {
        Some(name.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_parses_and_unescapes() {
        let m = mountinfo(
            "25 24 0:23 / /dev/shm rw,nosuid - tmpfs shm rw,size=65536k\n\
             garbage\n\
             30 1 0:5 /a\\040b /mnt/x\\040y rw shared:1 - ext4 /dev/vda rw\n",
        );
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].mount_point, "/dev/shm");
        assert_eq!(option_value(&m[0].super_options, "size"), Some("65536k"));
        assert_eq!(m[1].root, "/a b");
        assert_eq!(m[1].mount_point, "/mnt/x y");
        assert_eq!(m[1].fs_type, "ext4");
    }

    #[test]
    fn cgroup_lines() {
        let c = cgroup("12:cpu,cpuacct:/docker/abc\n0::/\nbad\n");
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].controllers, vec!["cpu", "cpuacct"]);
        assert_eq!(c[1].hierarchy, 0);
        assert!(c[1].controllers.is_empty());
    }

    #[test]
    fn limits_table() {
        let l = limits(
            "Limit                     Soft Limit           Hard Limit           Units\n\
             Max open files            1024                 1048576              files\n\
             Max locked memory         65536                65536                bytes\n\
             Max cpu time              unlimited            unlimited            seconds\n",
        );
        assert_eq!(l["max locked memory"].soft, LimitValue::Value(65536));
        assert_eq!(l["max open files"].hard, LimitValue::Value(1_048_576));
        assert_eq!(l["max cpu time"].soft, LimitValue::Unlimited);
    }

    #[test]
    fn cpulists() {
        assert_eq!(cpulist("0-3,8,10-11"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(cpulist("0-7:2"), Some(vec![0, 2, 4, 6]));
        assert_eq!(cpulist("\n"), Some(vec![]));
        assert_eq!(cpulist("3-1"), None);
        assert_eq!(cpulist("x"), None);
        assert_eq!(cpulist("0-4294967295"), None);
        assert_eq!(cpulist("0-1048576").map(|c| c.len()), Some(1 << 20 | 1));
    }

    /// Parts that name more CPUs together than a list may hold are refused
    /// before they are collected: 2,000 whole ranges were 2 billion entries
    /// (8 GB, minutes) collected before the deduplication.
    #[test]
    fn a_list_of_many_whole_ranges_is_refused_before_it_is_collected() {
        let many = vec!["0-1048576"; 2000].join(",");
        let t = std::time::Instant::now();
        assert_eq!(cpulist(&many), None);
        assert!(
            t.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(
            cpulist("0-1048576:2,1-1048575:2").map(|c| c.len()),
            Some(1 << 20 | 1)
        );
    }

    #[test]
    fn sizes_and_quotas() {
        assert_eq!(size_bytes("65536k"), Some(64 << 20));
        assert_eq!(size_bytes("1g"), Some(1 << 30));
        assert_eq!(size_bytes("12"), Some(12));
        assert_eq!(size_bytes(""), None);
        assert_eq!(cpu_max("max 100000"), Some(None));
        assert_eq!(cpu_max("150000 100000"), Some(Some(1.5)));
        assert_eq!(cpu_max("1 0"), None);
        assert_eq!(memory_limit("9223372036854771712"), Some(None));
        assert_eq!(memory_limit("1073741824\n"), Some(Some(1 << 30)));
        assert_eq!(cap_mask("000001fffeffffff"), Some(0x1fffeffffff));
        assert_eq!(port_state("4: ACTIVE\n").as_deref(), Some("ACTIVE"));
    }
}
