//! The memory a run may use, for the check of a network's estimate before it is
//! built.

/// Memory this process may still use: `MemAvailable`, or the cgroup's limit when
/// it is lower, with where the figure came from; `None` when neither is known.
pub fn available(cgroup_limit: Option<u64>) -> Option<(u64, String)> {
    let meminfo = hpc_io::read::mem_available();
    match (meminfo, cgroup_limit) {
        (Some(m), Some(c)) if c < m => Some((c, "the cgroup's memory limit".into())),
        (Some(m), _) => Some((m, "MemAvailable".into())),
        (None, Some(c)) => Some((c, "the cgroup's memory limit".into())),
        (None, None) => None,
    }
}

/// Bytes in binary units.
pub fn human(b: u64) -> String {
    let b = b as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.1} GiB", b / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    }
}
