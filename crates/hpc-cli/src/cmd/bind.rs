//! CPU binding for `hpc run --bind`.

/// How `hpc run` binds ranks to CPUs.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindPolicy {
    /// Each rank gets its own block of cores (hwloc placement, compact order, ranks
    /// never share a core unless oversubscribed), sized for `--threads` and `--progress`.
    Core,
    /// One rank per NUMA node (round robin when ranks outnumber NUMA nodes).
    Numa,
    /// No binding (the OS scheduler places ranks).
    None,
}

/// The CPUs of each rank (empty: unbound).
#[derive(Debug, Default)]
pub struct Plan {
    /// CPU list per rank.
    pub cpus: Vec<Vec<usize>>,
    /// The rank's progress CPUs (within `cpus`; empty without `--progress`).
    pub progress: Vec<Vec<usize>>,
    /// The placement table, for `--verbose` reporting.
    pub table: Option<String>,
}

/// Computes the CPUs of each of `n` ranks with `threads` compute threads and
/// `progress` progress cores each, through the machine's hwloc topology.
pub fn plan(policy: BindPolicy, n: usize, threads: usize, progress: usize) -> anyhow::Result<Plan> {
    use hpc_topology::{PlacementRequest, Policy, Topology};
    let topo_policy = match policy {
        BindPolicy::None => {
            return Ok(Plan {
                cpus: vec![Vec::new(); n],
                progress: vec![Vec::new(); n],
                ..Plan::default()
            })
        }
        BindPolicy::Core => Policy::Compact,
        BindPolicy::Numa => Policy::NumaPerRank,
    };
    let topo = Topology::this_machine()?;
    let req = PlacementRequest::new(n, threads.max(1))
        .progress(progress)
        .policy(topo_policy);
    let plan = hpc_topology::plan(&topo, &req)?;
    // Oversubscription and the like, once for the node (the ranks keep theirs at debug).
    plan.log_warnings(true);
    Ok(Plan {
        cpus: plan
            .ranks
            .iter()
            .map(|p| p.cpuset.iter().map(|c| c as usize).collect())
            .collect(),
        progress: plan
            .ranks
            .iter()
            .map(|p| p.progress_cpuset.iter().map(|c| c as usize).collect())
            .collect(),
        table: Some(plan.table()),
    })
}

/// A CPU set prepared before `fork`, applied in the child.
pub struct CpuSet {
    set: Option<rustix::thread::CpuSet>,
}

impl CpuSet {
    /// A set of these CPUs; empty means "leave the affinity alone".
    pub fn new(cpus: &[usize]) -> CpuSet {
        if cpus.is_empty() {
            return CpuSet { set: None };
        }
        let mut set = rustix::thread::CpuSet::new();
        for &c in cpus
            .iter()
            .filter(|&&c| c < rustix::thread::CpuSet::MAX_CPU)
        {
            set.set(c);
        }
        CpuSet { set: Some(set) }
    }

    /// Applies the set to the calling process. Async-signal-safe (one syscall).
    pub fn apply(&mut self) -> std::io::Result<()> {
        if let Some(set) = &self.set {
            rustix::thread::sched_setaffinity(None, set)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_plan_is_disjoint_on_this_machine() {
        let topo = hpc_topology::Topology::this_machine().unwrap();
        let ncores = topo.allowed_cores(&topo.allowed).count();
        let n = ncores.max(1);
        let p = plan(BindPolicy::Core, n, 1, 0).unwrap();
        assert_eq!(p.cpus.len(), n);
        let mut seen = std::collections::BTreeSet::new();
        for c in &p.cpus {
            assert!(!c.is_empty());
            for x in c {
                assert!(seen.insert(*x), "cpu {x} given twice");
            }
        }
        let none = plan(BindPolicy::None, 3, 1, 0).unwrap();
        assert!(none.cpus.iter().all(|c| c.is_empty()));
    }
}
