//! CPU, memory, shared-memory and ulimit resources.

use crate::parse::{self, CgroupEntry, Limit, MountEntry};
use crate::probe::Probe;
use serde::Serialize;

/// Resources available to the process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resources {
    /// CPUs online on the machine (`/sys/devices/system/cpu/online`).
    pub online_cpus: Option<u32>,
    /// CPUs the process may run on (`Cpus_allowed_list`), as a list string.
    pub allowed_cpu_list: Option<String>,
    /// Number of CPUs the process may run on.
    pub allowed_cpus: Option<u32>,
    /// Cgroup version in use (1 or 2).
    pub cgroup_version: Option<u8>,
    /// CPU bandwidth quota in CPUs (`cpu.max` or `cfs_quota_us/cfs_period_us`);
    /// `None` when unlimited or unknown.
    pub cpu_quota: Option<f64>,
    /// Memory limit of the cgroup in bytes; `None` when unlimited or unknown.
    pub memory_limit_bytes: Option<u64>,
    /// Size of `/dev/shm` in bytes.
    pub shm_bytes: Option<u64>,
    /// Locked-memory limit (`ulimit -l`), in bytes.
    pub memlock: Option<Limit>,
    /// Open-files limit (`ulimit -n`).
    pub nofile: Option<Limit>,
}

impl Resources {
    /// CPUs usable at full speed: allowed CPUs, reduced by a CPU quota.
    pub fn effective_cpus(&self) -> Option<f64> {
        let allowed = self.allowed_cpus.or(self.online_cpus).map(f64::from);
        match (allowed, self.cpu_quota) {
            (Some(a), Some(q)) => Some(a.min(q)),
            (Some(a), None) => Some(a),
            (None, q) => q,
        }
    }
}

/// Reads the resources from `probe`.
pub fn detect(probe: &Probe, mounts: &[MountEntry]) -> Resources {
    let status = probe
        .read("/proc/self/status")
        .map(|t| parse::status(&t))
        .unwrap_or_default();
    let allowed_cpu_list = status.get("Cpus_allowed_list").cloned();
    let allowed_cpus = allowed_cpu_list
        .as_deref()
        .and_then(parse::cpulist)
        .and_then(|v| u32::try_from(v.len()).ok())
        .filter(|n| *n > 0);
    let online_cpus = probe
        .read("/sys/devices/system/cpu/online")
        .and_then(|t| parse::cpulist(&t))
        .and_then(|v| u32::try_from(v.len()).ok())
        .filter(|n| *n > 0);
    let limits = probe
        .read("/proc/self/limits")
        .map(|t| parse::limits(&t))
        .unwrap_or_default();
    let cgroups = probe
        .read("/proc/self/cgroup")
        .map(|t| parse::cgroup(&t))
        .unwrap_or_default();
    let cg = Cgroups {
        probe,
        mounts,
        entries: &cgroups,
    };
    let v2_only = !cgroups.is_empty() && cgroups.iter().all(|e| e.hierarchy == 0);
    let has_v1_cpu = cgroups
        .iter()
        .any(|e| e.controllers.iter().any(|c| c == "cpu"));
    let cgroup_version = if cgroups.is_empty() {
        None
    } else if v2_only || !has_v1_cpu {
        Some(2)
    } else {
        Some(1)
    };
    let (cpu_quota, memory_limit_bytes) = if cgroup_version == Some(2) {
        (cg.v2_cpu_quota(), cg.v2_memory())
    } else {
        (cg.v1_cpu_quota(), cg.v1_memory())
    };
    Resources {
        online_cpus,
        allowed_cpu_list,
        allowed_cpus,
        cgroup_version,
        cpu_quota,
        memory_limit_bytes,
        shm_bytes: shm_size(probe, mounts),
        memlock: limits.get("max locked memory").copied(),
        nofile: limits.get("max open files").copied(),
    }
}

fn shm_size(probe: &Probe, mounts: &[MountEntry]) -> Option<u64> {
    if probe.is_live() {
        if let Some(sz) = statvfs_size("/dev/shm") {
            return Some(sz);
        }
    }
    let m = mounts.iter().rev().find(|m| m.mount_point == "/dev/shm")?;
    if let Some(s) = parse::option_value(&m.super_options, "size") {
        return parse::size_bytes(s);
    }
    None
}

/// Total size of the file system holding `path`, by `statvfs(2)`.
fn statvfs_size(path: &str) -> Option<u64> {
    let c = std::ffi::CString::new(path).ok()?;
    // SAFETY: `statvfs` is plain old data; an all-zero value is valid.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated string and `st` a valid out pointer.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return None;
    }
    #[allow(clippy::useless_conversion)] // the field types differ between targets
    u64::from(st.f_blocks).checked_mul(u64::from(st.f_frsize))
}

struct Cgroups<'a> {
    probe: &'a Probe,
    mounts: &'a [MountEntry],
    entries: &'a [CgroupEntry],
}

impl Cgroups<'_> {
    /// Directories of the process's cgroup for a v1 controller, innermost first
    /// (the process cgroup, then its parents up to the mount root).
    fn v1_dirs(&self, controller: &str) -> Vec<String> {
        let mount = self
            .mounts
            .iter()
            .find(|m| m.fs_type == "cgroup" && m.super_options.split(',').any(|o| o == controller));
        self.dirs(
            |e| e.controllers.iter().any(|c| c == controller),
            mount,
            format!("/sys/fs/cgroup/{controller}"),
        )
    }

    fn v2_dirs(&self) -> Vec<String> {
        let mount = self.mounts.iter().find(|m| m.fs_type == "cgroup2");
        self.dirs(|e| e.hierarchy == 0, mount, "/sys/fs/cgroup".into())
    }

    /// The directories from a hierarchy's mount down to this process's cgroup
    /// in it ([`ancestors`]): the cgroup of the first entry `ours` picks (else
    /// the root), under `mount` (else mounted whole at `unmounted`).
    fn dirs(
        &self,
        ours: impl Fn(&CgroupEntry) -> bool,
        mount: Option<&MountEntry>,
        unmounted: String,
    ) -> Vec<String> {
        let path = self
            .entries
            .iter()
            .find(|e| ours(e))
            .map(|e| e.path.clone())
            .unwrap_or_else(|| "/".into());
        let (mount_point, mount_root) = match mount {
            Some(m) => (m.mount_point.clone(), m.root.clone()),
            None => (unmounted, "/".into()),
        };
        let rel = path
            .strip_prefix(mount_root.as_str())
            .unwrap_or(path.as_str())
            .trim_start_matches('/');
        ancestors(&mount_point, rel)
    }

    fn v1_cpu_quota(&self) -> Option<f64> {
        let mut best: Option<f64> = None;
        for dir in self.v1_dirs("cpu") {
            let quota = self.read_i64(&format!("{dir}/cpu.cfs_quota_us"));
            let period = self.read_i64(&format!("{dir}/cpu.cfs_period_us"));
            if let (Some(q), Some(p)) = (quota, period) {
                if q > 0 && p > 0 {
                    let cpus = q as f64 / p as f64;
                    best = Some(best.map_or(cpus, |b| b.min(cpus)));
                }
            }
        }
        best
    }

    fn v1_memory(&self) -> Option<u64> {
        self.v1_dirs("memory")
            .iter()
            .filter_map(|d| self.probe.read(&format!("{d}/memory.limit_in_bytes")))
            .filter_map(|t| parse::memory_limit(&t).flatten())
            .min()
    }

    fn v2_cpu_quota(&self) -> Option<f64> {
        self.v2_dirs()
            .iter()
            .filter_map(|d| self.probe.read(&format!("{d}/cpu.max")))
            .filter_map(|t| parse::cpu_max(&t).flatten())
            .reduce(f64::min)
    }

    fn v2_memory(&self) -> Option<u64> {
        self.v2_dirs()
            .iter()
            .filter_map(|d| self.probe.read(&format!("{d}/memory.max")))
            .filter_map(|t| parse::memory_limit(&t).flatten())
            .min()
    }

    fn read_i64(&self, path: &str) -> Option<i64> {
        self.probe.read(path)?.trim().parse().ok()
    }
}

/// `base/rel`, then each parent of it down to `base`.
fn ancestors(base: &str, rel: &str) -> Vec<String> {
    let base = base.trim_end_matches('/');
    let parts: Vec<&str> = rel
        .split('/')
        .filter(|s| !s.is_empty() && *s != "." && *s != "..")
        .collect();
    (0..=parts.len())
        .rev()
        .take(32)
        .map(|n| {
            if n == 0 {
                base.to_string()
            } else {
                format!("{base}/{}", parts[..n].join("/"))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::ancestors;

    #[test]
    fn ancestor_dirs() {
        assert_eq!(
            ancestors("/sys/fs/cgroup/cpu", "docker/abc"),
            vec![
                "/sys/fs/cgroup/cpu/docker/abc",
                "/sys/fs/cgroup/cpu/docker",
                "/sys/fs/cgroup/cpu"
            ]
        );
        assert_eq!(ancestors("/sys/fs/cgroup", ""), vec!["/sys/fs/cgroup"]);
    }
}
