//! CPU binding for `hpc run --bind`.

/// How `hpc run` binds ranks to CPUs.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindPolicy {
    /// Each rank gets a contiguous block of the allowed cores.
    Core,
    /// Each rank gets the allowed CPUs of one NUMA node (round robin over nodes).
    Numa,
    /// No binding (the OS scheduler places ranks).
    None,
}

/// The CPUs of each rank (empty: unbound).
#[derive(Debug, Default)]
pub struct Plan {
    /// CPU list per rank.
    pub cpus: Vec<Vec<usize>>,
    /// More ranks than CPUs: some share.
    pub oversubscribed: bool,
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: we pass the size of the set we own.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        return (0..n).collect();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: i < CPU_SETSIZE, within the set.
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect()
}

/// Parses a Linux cpulist (`0-3,8,10-11`). Garbage gives `None`.
pub fn parse_cpulist(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    Some(out)
}

/// Formats CPUs as a cpulist.
pub fn format_cpulist(cpus: &[usize]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

fn numa_nodes() -> Vec<Vec<usize>> {
    let mut nodes = Vec::new();
    let Ok(dir) = std::fs::read_dir("/sys/devices/system/node") else {
        return nodes;
    };
    let mut ids: Vec<usize> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
        .collect();
    ids.sort_unstable();
    for id in ids {
        if let Ok(s) = std::fs::read_to_string(format!("/sys/devices/system/node/node{id}/cpulist"))
        {
            if let Some(c) = parse_cpulist(&s) {
                nodes.push(c);
            }
        }
    }
    nodes
}

/// Computes the CPUs of each of `n` ranks.
pub fn plan(policy: BindPolicy, n: usize, allowed: &[usize]) -> anyhow::Result<Plan> {
    let oversubscribed = n > allowed.len();
    let cpus = match policy {
        BindPolicy::None => vec![Vec::new(); n],
        BindPolicy::Core => {
            if allowed.is_empty() {
                anyhow::bail!("no allowed CPUs to bind to");
            }
            if oversubscribed {
                (0..n).map(|r| vec![allowed[r % allowed.len()]]).collect()
            } else {
                let (base, extra) = (allowed.len() / n, allowed.len() % n);
                let mut start = 0;
                (0..n)
                    .map(|r| {
                        let len = base + usize::from(r < extra);
                        let block = allowed[start..start + len].to_vec();
                        start += len;
                        block
                    })
                    .collect()
            }
        }
        BindPolicy::Numa => {
            let mut nodes: Vec<Vec<usize>> = numa_nodes()
                .into_iter()
                .map(|c| {
                    c.into_iter()
                        .filter(|x| allowed.contains(x))
                        .collect::<Vec<_>>()
                })
                .filter(|c| !c.is_empty())
                .collect();
            if nodes.is_empty() {
                nodes.push(allowed.to_vec());
            }
            (0..n).map(|r| nodes[r % nodes.len()].clone()).collect()
        }
    };
    Ok(Plan {
        cpus,
        oversubscribed,
    })
}

/// A CPU set prepared before `fork`, applied in the child.
pub struct CpuSet {
    set: Option<libc::cpu_set_t>,
}

impl CpuSet {
    /// A set of these CPUs; empty means "leave the affinity alone".
    pub fn new(cpus: &[usize]) -> CpuSet {
        if cpus.is_empty() {
            return CpuSet { set: None };
        }
        // SAFETY: zeroed cpu_set_t is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            // SAFETY: c < CPU_SETSIZE.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        CpuSet { set: Some(set) }
    }

    /// Applies the set to the calling process. Async-signal-safe (one syscall).
    pub fn apply(&mut self) -> std::io::Result<()> {
        if let Some(set) = &self.set {
            // SAFETY: the set is owned and its size is passed.
            let rc =
                unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulist_roundtrip() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(format_cpulist(&[11, 0, 1, 2, 3, 8, 10]), "0-3,8,10-11");
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("x"), None);
        assert_eq!(parse_cpulist(""), Some(vec![]));
    }

    #[test]
    fn core_blocks_are_disjoint_and_cover() {
        let allowed: Vec<usize> = (0..10).collect();
        let p = plan(BindPolicy::Core, 3, &allowed).unwrap();
        assert!(!p.oversubscribed);
        assert_eq!(p.cpus, vec![vec![0, 1, 2, 3], vec![4, 5, 6], vec![7, 8, 9]]);
        let p = plan(BindPolicy::Core, 5, &[2, 3]).unwrap();
        assert!(p.oversubscribed);
        assert_eq!(p.cpus, vec![vec![2], vec![3], vec![2], vec![3], vec![2]]);
    }
}
