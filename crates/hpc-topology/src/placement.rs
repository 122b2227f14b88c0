//! Placement of ranks, threads, progress cores, GPUs and NICs on one node.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::model::{Gpu, NicKind, PciInfo, Topology};
use crate::{CpuSet, Result, TopologyError};

/// Version of the JSON document written by [`PlacementPlan::to_json`]
/// (`"schema_version"`); bumped on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

/// How ranks are laid out over the node's cores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// Ranks take consecutive blocks of cores in topology order (rank 0 on the first
    /// cores of package 0). Neighbouring ranks share caches and NUMA nodes.
    #[default]
    Compact,
    /// Ranks are dealt round-robin over the NUMA nodes (or packages, whichever is
    /// finer), each rank a block of cores inside one domain when it fits. Spreads
    /// memory bandwidth and caches over the machine.
    Spread,
    /// One rank per NUMA node: rank `r` goes to NUMA domain `r` (modulo the number of
    /// domains, with a warning when ranks outnumber them).
    NumaPerRank,
    /// One rank per package, like [`Policy::NumaPerRank`] with packages.
    PackagePerRank,
}

impl FromStr for Policy {
    type Err = TopologyError;

    /// Parses `compact`, `spread`, `numa` (or `numa-per-rank`) and `package`
    /// (or `package-per-rank`, `socket`).
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "compact" | "core" => Ok(Policy::Compact),
            "spread" | "scatter" => Ok(Policy::Spread),
            "numa" | "numa-per-rank" => Ok(Policy::NumaPerRank),
            "package" | "package-per-rank" | "socket" => Ok(Policy::PackagePerRank),
            _ => Err(TopologyError::BadPolicy(s.to_string())),
        }
    }
}

/// Whether progress cores are reserved for each rank or once for the whole node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgressScope {
    /// Each rank gets its own `progress` cores next to its compute cores.
    #[default]
    PerRank,
    /// `progress` cores are reserved once for the node, spread over its NUMA nodes;
    /// each rank is given the reserved core nearest to it (shared by design).
    PerNode,
}

/// What to place: `ranks` ranks on this node with `threads` compute threads each and
/// `progress` reserved progress cores.
///
/// ```
/// use hpc_topology::{PlacementRequest, Policy};
/// let req = PlacementRequest::new(4, 2).progress(1).policy(Policy::Spread);
/// assert_eq!(req.ranks, 4);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementRequest {
    /// Ranks on this node (`local_size`).
    pub ranks: usize,
    /// Compute threads per rank; each gets its own core.
    pub threads: usize,
    /// Reserved progress cores (per rank or per node, see `progress_scope`).
    pub progress: usize,
    /// Per rank or per node.
    pub progress_scope: ProgressScope,
    /// Layout policy.
    pub policy: Policy,
    /// PUs that may be used, further restricting [`Topology::allowed`]; `None` uses
    /// the topology's allowed set as is.
    pub allowed: Option<CpuSet>,
}

impl PlacementRequest {
    /// `ranks` ranks with `threads` threads each, no progress cores, [`Policy::Compact`].
    pub fn new(ranks: usize, threads: usize) -> Self {
        Self {
            ranks,
            threads,
            progress: 0,
            progress_scope: ProgressScope::PerRank,
            policy: Policy::Compact,
            allowed: None,
        }
    }

    /// Sets the number of progress cores per rank.
    pub fn progress(mut self, cores: usize) -> Self {
        self.progress = cores;
        self
    }

    /// Sets the number of progress cores reserved for the whole node.
    pub fn per_node_progress(mut self, cores: usize) -> Self {
        self.progress = cores;
        self.progress_scope = ProgressScope::PerNode;
        self
    }

    /// Sets the layout policy.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Restricts the PUs that may be used.
    pub fn allowed(mut self, allowed: CpuSet) -> Self {
        self.allowed = Some(allowed);
        self
    }
}

/// The device (GPU or NIC) chosen for a rank.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceAssignment {
    /// Index in [`Topology::gpus`] or [`Topology::nics`].
    pub index: usize,
    /// Primary name (`cuda0`, `mlx5_0`, `eth0`).
    pub name: String,
    /// PCI bus id, when known.
    pub pci_bus_id: Option<String>,
    /// Whether the device's locality intersects the rank's cpuset.
    pub local: bool,
    /// Whether another rank of the node was given the same device.
    pub shared: bool,
}

impl DeviceAssignment {
    /// Device `index` (`name`, at `pci`, near the CPUs `cpuset`) for the rank of
    /// `placement`, `used[index]` ranks of the node having it.
    fn of(
        index: usize,
        name: &str,
        pci: Option<&PciInfo>,
        cpuset: &CpuSet,
        placement: &Placement,
        used: &[usize],
    ) -> DeviceAssignment {
        DeviceAssignment {
            index,
            name: name.to_string(),
            pci_bus_id: pci.map(|x| x.bus_id.clone()),
            local: cpuset.intersects(&placement.compute_cpuset),
            shared: used[index] > 1,
        }
    }
}

/// Where one rank runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Local rank (0-based).
    pub rank: usize,
    /// Every PU the rank may run on: its compute and progress cores' allowed PUs.
    /// Bind the process to this.
    pub cpuset: CpuSet,
    /// Logical indices of the compute cores, one per thread (thread `i` runs on
    /// `compute_cores[i]`); a core repeats only when oversubscribed.
    pub compute_cores: Vec<u32>,
    /// Allowed PUs of each compute core: what thread `i` is pinned to.
    pub thread_cpusets: Vec<CpuSet>,
    /// Union of `thread_cpusets`.
    pub compute_cpuset: CpuSet,
    /// Logical indices of the rank's progress cores.
    pub progress_cores: Vec<u32>,
    /// Allowed PUs of the progress cores.
    pub progress_cpuset: CpuSet,
    /// OS index of the home NUMA node (where most compute cores are), if any.
    pub numa: Option<u32>,
    /// Logical index of the package where most compute cores are, if any.
    pub package: Option<u32>,
    /// The GPU for this rank.
    pub gpu: Option<DeviceAssignment>,
    /// The network adapter for this rank.
    pub nic: Option<DeviceAssignment>,
    /// Whether a compute or per-rank progress core of this rank is shared with other
    /// work (more threads than allowed cores).
    pub oversubscribed: bool,
}

/// Short counts of the topology a plan was made for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyBrief {
    /// Where the topology came from (display form).
    pub source: String,
    /// Packages.
    pub packages: usize,
    /// NUMA nodes.
    pub numa_nodes: usize,
    /// Cores.
    pub cores: usize,
    /// PUs.
    pub pus: usize,
    /// GPUs.
    pub gpus: usize,
    /// Network adapters.
    pub nics: usize,
}

/// The placement of every rank of a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementPlan {
    /// Always [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The topology planned for.
    pub topology: TopologyBrief,
    /// The request.
    pub request: PlacementRequest,
    /// The PUs that were allowed.
    pub allowed: CpuSet,
    /// Number of allowed cores.
    pub allowed_cores: usize,
    /// Logical indices of the node-wide progress cores ([`ProgressScope::PerNode`]).
    pub node_progress_cores: Vec<u32>,
    /// Whether some core is used by more than one thread.
    pub oversubscribed: bool,
    /// Human-readable warnings (oversubscription, more ranks than NUMA nodes, ...).
    pub warnings: Vec<String>,
    /// One placement per rank, in rank order.
    pub ranks: Vec<Placement>,
}

#[derive(Clone)]
struct Slot {
    logical: u32,
    pus: CpuSet,
    numa: Option<u32>,
    package: Option<u32>,
}

/// Groups slot indices by a key, keeping first-appearance order.
fn domains_by<K: PartialEq>(slots: &[Slot], key: impl Fn(&Slot) -> K) -> Vec<Vec<usize>> {
    let mut keys: Vec<K> = Vec::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, s) in slots.iter().enumerate() {
        let k = key(s);
        match keys.iter().position(|x| *x == k) {
            Some(p) => groups[p].push(i),
            None => {
                keys.push(k);
                groups.push(vec![i]);
            }
        }
    }
    groups
}

struct Allocator {
    load: Vec<usize>,
}

impl Allocator {
    /// Takes the first free slot in `order`, else the least-loaded one (earliest in
    /// `order` on ties). Returns the slot and whether it was already in use.
    fn take(&mut self, order: &[usize]) -> (usize, bool) {
        let pick = order
            .iter()
            .copied()
            .find(|&i| self.load[i] == 0)
            .unwrap_or_else(|| {
                order
                    .iter()
                    .copied()
                    .min_by_key(|&i| self.load[i])
                    .expect("non-empty order")
            });
        let shared = self.load[pick] > 0;
        self.load[pick] += 1;
        (pick, shared)
    }
}

/// Preference order for a rank homed in domain `d`: its own cores, then the other
/// domains' cores cyclically after it.
fn order_from(domains: &[Vec<usize>], d: usize) -> Vec<usize> {
    (0..domains.len())
        .flat_map(|k| domains[(d + k) % domains.len()].iter().copied())
        .collect()
}

fn most_common<T: Copy + Ord>(items: impl Iterator<Item = T>) -> Option<T> {
    let mut counts: BTreeMap<T, usize> = BTreeMap::new();
    let mut order = Vec::new();
    for it in items {
        let c = counts.entry(it).or_insert(0);
        if *c == 0 {
            order.push(it);
        }
        *c += 1;
    }
    order
        .into_iter()
        .max_by(|a, b| counts[a].cmp(&counts[b]).then(b.cmp(a)))
}

fn gpu_preference(g: &Gpu) -> u8 {
    let best = g
        .os_devices
        .iter()
        .map(
            |d| match d.subtype.as_deref().map(str::to_ascii_lowercase).as_deref() {
                Some("cuda" | "nvml" | "rsmi" | "levelzero") => 0,
                Some("opencl") => 1,
                _ => 2,
            },
        )
        .min();
    best.unwrap_or(3)
}

/// The error of a request whose allowed CPUs (`allowed`, the request's and the
/// topology's in common) hold no core: it names both sets.
fn no_allowed_cores(topo: &Topology, req: &PlacementRequest, allowed: &CpuSet) -> TopologyError {
    let list = |c: &CpuSet| {
        if c.is_empty() {
            "none".to_string()
        } else {
            hpc_env::shown(&c.to_string())
        }
    };
    TopologyError::NoAllowedCores {
        allowed: allowed.to_string(),
        asked: req.allowed.as_ref().map_or_else(|| "any".to_string(), list),
        usable: list(&topo.allowed),
    }
}

/// Computes the placement of every rank of a node.
///
/// Deterministic: the same topology and request always give the same plan. Ranks
/// never share a core unless there are more threads (plus progress cores) than
/// allowed cores; then the plan is still usable, `oversubscribed` is set and a
/// warning is added to [`PlacementPlan::warnings`] (logged by
/// [`PlacementPlan::log_warnings`], not here: every rank of a node plans the whole
/// node, and one of them should say it).
///
/// ```
/// use hpc_topology::{plan, PlacementRequest, Policy, Topology};
/// let topo = Topology::from_synthetic("pack:2 numa:1 core:8 pu:2").unwrap();
/// let plan = plan(&topo, &PlacementRequest::new(2, 7).progress(1).policy(Policy::Spread)).unwrap();
/// assert_eq!(plan.ranks[0].numa, Some(0));
/// assert_eq!(plan.ranks[1].numa, Some(1));
/// assert_eq!(plan.ranks[1].compute_cores, vec![8, 9, 10, 11, 12, 13, 14]);
/// assert_eq!(plan.ranks[1].progress_cores, vec![15]);
/// assert!(!plan.oversubscribed);
/// ```
pub fn plan(topo: &Topology, req: &PlacementRequest) -> Result<PlacementPlan> {
    if req.ranks == 0 {
        return Err(TopologyError::ZeroRanks);
    }
    if req.threads == 0 {
        return Err(TopologyError::ZeroThreads);
    }
    crate::budget::check(
        format!(
            "a placement of {} ranks x {} threads (+{} progress)",
            req.ranks, req.threads, req.progress
        ),
        crate::budget::plan_bytes(req.ranks, req.threads, req.progress),
    )?;
    let allowed = match &req.allowed {
        Some(a) => a.intersection(&topo.allowed),
        None => topo.allowed.clone(),
    };
    let slots: Vec<Slot> = topo
        .allowed_cores(&allowed)
        .map(|c| Slot {
            logical: c.logical_index,
            pus: c.pus.intersection(&allowed),
            numa: c.numa,
            package: c.package,
        })
        .collect();
    if slots.is_empty() {
        return Err(no_allowed_cores(topo, req, &allowed));
    }
    let mut warnings = Vec::new();
    let mut alloc = Allocator {
        load: vec![0; slots.len()],
    };
    let all: Vec<usize> = (0..slots.len()).collect();
    let fine = domains_by(&slots, |s| (s.package, s.numa));
    let numa_domains = domains_by(&slots, |s| s.numa);
    let package_domains = domains_by(&slots, |s| s.package);

    let node_progress = node_progress_cores(req, &fine, slots.len(), &mut alloc, &mut warnings);
    let per_rank_progress = if req.progress_scope == ProgressScope::PerRank {
        req.progress
    } else {
        0
    };

    let (domains, fixed) = match req.policy {
        Policy::Compact => (vec![all.clone()], false),
        Policy::Spread => (fine.clone(), false),
        Policy::NumaPerRank => (numa_domains, true),
        Policy::PackagePerRank => (package_domains, true),
    };
    if fixed && req.ranks > domains.len() {
        let what = if req.policy == Policy::NumaPerRank {
            "NUMA nodes"
        } else {
            "packages"
        };
        warnings.push(format!(
            "{} ranks but only {} {what} with allowed cores: ranks share {what}",
            req.ranks,
            domains.len()
        ));
    }
    let mut ranks_in_domain = vec![0usize; domains.len()];
    let mut raw: Vec<(Vec<usize>, Vec<usize>)> = Vec::with_capacity(req.ranks);
    for r in 0..req.ranks {
        let d = if fixed {
            r % domains.len()
        } else {
            // The domain with the most free cores, then the fewest ranks, then first.
            (0..domains.len())
                .max_by(|&a, &b| {
                    let free =
                        |d: usize| domains[d].iter().filter(|&&i| alloc.load[i] == 0).count();
                    free(a)
                        .cmp(&free(b))
                        .then(ranks_in_domain[b].cmp(&ranks_in_domain[a]))
                        .then(b.cmp(&a))
                })
                .unwrap_or(0)
        };
        ranks_in_domain[d] += 1;
        let order = order_from(&domains, d);
        let compute: Vec<usize> = (0..req.threads).map(|_| alloc.take(&order).0).collect();
        let progress: Vec<usize> = (0..per_rank_progress)
            .map(|_| alloc.take(&order).0)
            .collect();
        raw.push((compute, progress));
    }

    let mut ranks: Vec<Placement> = Vec::with_capacity(req.ranks);
    let mut numa_rank_count: BTreeMap<Option<u32>, usize> = BTreeMap::new();
    for (r, (compute, progress)) in raw.into_iter().enumerate() {
        let p = rank_placement(
            r,
            compute,
            progress,
            &slots,
            &alloc,
            &node_progress,
            &mut numa_rank_count,
        );
        ranks.push(p);
    }
    let oversubscribed = ranks.iter().any(|p| p.oversubscribed);
    if oversubscribed {
        let need = req.ranks * (req.threads + per_rank_progress)
            + if req.progress_scope == ProgressScope::PerNode {
                req.progress
            } else {
                0
            };
        let progress = match (per_rank_progress, req.progress_scope) {
            (0, ProgressScope::PerRank) => String::new(),
            (n, ProgressScope::PerRank) => format!(" + {n} progress per rank"),
            (_, ProgressScope::PerNode) => format!(" + {} progress per node", req.progress),
        };
        warnings.push(format!(
            "oversubscribed: {need} cores needed ({} ranks x {} threads{progress}) but {} are allowed; ranks share cores",
            req.ranks,
            req.threads,
            slots.len()
        ));
    }
    assign_gpus(topo, &mut ranks);
    assign_nics(topo, &mut ranks);

    Ok(PlacementPlan {
        schema_version: SCHEMA_VERSION,
        topology: TopologyBrief {
            source: topo.source.to_string(),
            packages: topo.packages.len(),
            numa_nodes: topo.numa_nodes.len(),
            cores: topo.cores.len(),
            pus: topo.pus.len(),
            gpus: topo.gpus.len(),
            nics: topo.nics.len(),
        },
        request: req.clone(),
        allowed,
        allowed_cores: slots.len(),
        node_progress_cores: node_progress.iter().map(|&i| slots[i].logical).collect(),
        oversubscribed,
        warnings,
        ranks,
    })
}

/// Node-wide progress cores: the last free core of each fine domain in turn, so
/// that every NUMA node has one when there are enough (none unless the request
/// asks for them per node).
fn node_progress_cores(
    req: &PlacementRequest,
    fine: &[Vec<usize>],
    cores: usize,
    alloc: &mut Allocator,
    warnings: &mut Vec<String>,
) -> Vec<usize> {
    let mut node_progress: Vec<usize> = Vec::new();
    if req.progress_scope == ProgressScope::PerNode && req.progress > 0 {
        let mut remaining: Vec<Vec<usize>> = fine.to_vec();
        let mut d = 0;
        while node_progress.len() < req.progress.min(cores) {
            if let Some(i) = remaining[d].pop() {
                alloc.load[i] += 1;
                node_progress.push(i);
            }
            d = (d + 1) % remaining.len();
        }
        node_progress.sort_unstable();
        if req.progress > cores {
            warnings.push(format!(
                "{} node progress cores requested but only {} cores are allowed",
                req.progress, cores
            ));
        }
    }
    node_progress
}

/// Rank `r`'s placement on the slots `compute` and `progress` it was given
/// (with node-wide progress cores, one of its NUMA node's in turn).
fn rank_placement(
    r: usize,
    compute: Vec<usize>,
    progress: Vec<usize>,
    slots: &[Slot],
    alloc: &Allocator,
    node_progress: &[usize],
    numa_rank_count: &mut BTreeMap<Option<u32>, usize>,
) -> Placement {
    let numa = most_common(compute.iter().filter_map(|&i| slots[i].numa));
    let package = most_common(compute.iter().filter_map(|&i| slots[i].package));
    let oversubscribed = compute.iter().chain(&progress).any(|&i| alloc.load[i] > 1);
    let mut progress = progress;
    if !node_progress.is_empty() {
        let nth = numa_rank_count.entry(numa).or_insert(0);
        let local: Vec<usize> = node_progress
            .iter()
            .copied()
            .filter(|&i| numa.is_some() && slots[i].numa == numa)
            .collect();
        let pick = if local.is_empty() {
            node_progress[r % node_progress.len()]
        } else {
            local[*nth % local.len()]
        };
        *nth += 1;
        progress = vec![pick];
    }
    let thread_cpusets: Vec<CpuSet> = compute.iter().map(|&i| slots[i].pus.clone()).collect();
    let mut compute_cpuset = CpuSet::new();
    thread_cpusets
        .iter()
        .for_each(|s| compute_cpuset.extend_from(s));
    let mut progress_cpuset = CpuSet::new();
    progress
        .iter()
        .for_each(|&i| progress_cpuset.extend_from(&slots[i].pus));
    Placement {
        rank: r,
        cpuset: compute_cpuset.union(&progress_cpuset),
        compute_cores: compute.iter().map(|&i| slots[i].logical).collect(),
        thread_cpusets,
        compute_cpuset,
        progress_cores: progress.iter().map(|&i| slots[i].logical).collect(),
        progress_cpuset,
        numa,
        package,
        gpu: None,
        nic: None,
        oversubscribed,
    }
}

/// GPUs: first every rank gets a free GPU local to it (most overlap, then compute
/// capable, then index); then ranks without one get any free GPU; only then are GPUs
/// shared (least used, local first).
fn assign_gpus(topo: &Topology, ranks: &mut [Placement]) {
    if topo.gpus.is_empty() {
        return;
    }
    let mut used = vec![0usize; topo.gpus.len()];
    let mut choice: Vec<Option<usize>> = vec![None; ranks.len()];
    let overlap = |p: &Placement, g: &Gpu| g.cpuset.intersection_len(&p.compute_cpuset);
    for (r, p) in ranks.iter().enumerate() {
        let best = topo
            .gpus
            .iter()
            .filter(|g| used[g.index] == 0 && overlap(p, g) > 0)
            .min_by_key(|g| (std::cmp::Reverse(overlap(p, g)), gpu_preference(g), g.index));
        if let Some(g) = best {
            used[g.index] += 1;
            choice[r] = Some(g.index);
        }
    }
    for slot in choice.iter_mut().filter(|c| c.is_none()) {
        if let Some(g) = topo
            .gpus
            .iter()
            .filter(|g| used[g.index] == 0)
            .min_by_key(|g| (gpu_preference(g), g.index))
        {
            used[g.index] += 1;
            *slot = Some(g.index);
        }
    }
    for (r, p) in ranks.iter().enumerate() {
        if choice[r].is_none() {
            let g = topo
                .gpus
                .iter()
                .min_by_key(|g| {
                    (
                        overlap(p, g) == 0,
                        used[g.index],
                        gpu_preference(g),
                        g.index,
                    )
                })
                .expect("gpus not empty");
            used[g.index] += 1;
            choice[r] = Some(g.index);
        }
    }
    for (r, p) in ranks.iter_mut().enumerate() {
        let g = &topo.gpus[choice[r].expect("assigned above")];
        let a = DeviceAssignment::of(g.index, &g.name, g.pci.as_ref(), &g.cpuset, p, &used);
        p.gpu = Some(a);
    }
}

/// NICs: fabric adapters (InfiniBand, RoCE, Omni-Path) when the node has any, else
/// Ethernet. Local adapters first (least used so far, then most overlap), else the
/// least used of all.
fn assign_nics(topo: &Topology, ranks: &mut [Placement]) {
    let has_fabric = topo.nics.iter().any(|n| n.kind == NicKind::Fabric);
    let candidates: Vec<_> = topo
        .nics
        .iter()
        .filter(|n| !has_fabric || n.kind == NicKind::Fabric)
        .collect();
    if candidates.is_empty() {
        return;
    }
    let mut used = vec![0usize; topo.nics.len()];
    let mut choice = vec![0usize; ranks.len()];
    for (r, p) in ranks.iter().enumerate() {
        let n = candidates
            .iter()
            .min_by_key(|n| {
                let ov = n.cpuset.intersection_len(&p.compute_cpuset);
                (ov == 0, used[n.index], std::cmp::Reverse(ov), n.index)
            })
            .expect("candidates not empty");
        used[n.index] += 1;
        choice[r] = n.index;
    }
    for (r, p) in ranks.iter_mut().enumerate() {
        let n = &topo.nics[choice[r]];
        let a = DeviceAssignment::of(n.index, &n.name, n.pci.as_ref(), &n.cpuset, p, &used);
        p.nic = Some(a);
    }
}

/// Formats logical core indices as ranges (`0-3,8`).
fn core_list(cores: &[u32]) -> String {
    let set: CpuSet = cores.iter().copied().collect();
    if set.len() == cores.len() {
        set.to_string()
    } else {
        // Repeated cores (oversubscription): list them as they are.
        cores
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl PlacementPlan {
    /// Logs the plan's [`warnings`](Self::warnings) through `tracing`: at `warn`
    /// level when `loud` (one rank of the node, so that a node of 32 ranks says
    /// it once), else at `debug`. [`plan`] itself logs nothing.
    pub fn log_warnings(&self, loud: bool) {
        for w in &self.warnings {
            if loud {
                tracing::warn!("{w}");
            } else {
                tracing::debug!("{w}");
            }
        }
    }

    /// The plan as pretty-printed JSON (see the crate documentation for the schema).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a plan always serializes")
    }

    /// The placement of `local_rank`.
    pub fn rank(&self, local_rank: usize) -> Option<&Placement> {
        self.ranks.get(local_rank)
    }

    /// A text table: rank, compute cores, PUs, progress cores, NUMA node, GPU, NIC.
    pub fn table(&self) -> String {
        let dev = |d: &Option<DeviceAssignment>| match d {
            None => "-".to_string(),
            Some(d) => {
                let mut s = d.name.clone();
                if let Some(b) = &d.pci_bus_id {
                    let _ = write!(s, " ({b})");
                }
                if !d.local {
                    s.push_str(" remote");
                }
                if d.shared {
                    s.push_str(" shared");
                }
                s
            }
        };
        let header = ["rank", "cores", "pus", "progress", "numa", "gpu", "nic"];
        let rows: Vec<[String; 7]> = self
            .ranks
            .iter()
            .map(|p| {
                [
                    format!("{}{}", p.rank, if p.oversubscribed { "*" } else { "" }),
                    core_list(&p.compute_cores),
                    p.cpuset.to_string(),
                    if p.progress_cores.is_empty() {
                        "-".into()
                    } else {
                        core_list(&p.progress_cores)
                    },
                    p.numa.map_or("-".into(), |n| n.to_string()),
                    dev(&p.gpu),
                    dev(&p.nic),
                ]
            })
            .collect();
        let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        let mut s = String::new();
        let line = |s: &mut String, cells: &[&str]| {
            let text: Vec<String> = cells
                .iter()
                .zip(&widths)
                // Padded by hand: `{c:<w$}` panics for a width above 65535 (a
                // rank of 100000 threads lists that many characters of cores).
                .map(|(c, w)| format!("{c}{}", " ".repeat(w.saturating_sub(c.len()))))
                .collect();
            let _ = writeln!(s, "{}", text.join("  ").trim_end());
        };
        let _ = writeln!(
            s,
            "{} ranks x {} threads, {} progress core(s) {}, policy {:?}, {} allowed cores (PUs {})",
            self.request.ranks,
            self.request.threads,
            self.request.progress,
            match self.request.progress_scope {
                ProgressScope::PerRank => "per rank",
                ProgressScope::PerNode => "per node",
            },
            self.request.policy,
            self.allowed_cores,
            self.allowed
        );
        line(&mut s, &header);
        for row in &rows {
            let cells: Vec<&str> = row.iter().map(String::as_str).collect();
            line(&mut s, &cells);
        }
        if !self.node_progress_cores.is_empty() {
            let _ = writeln!(
                s,
                "node progress cores: {}",
                core_list(&self.node_progress_cores)
            );
        }
        if self.oversubscribed {
            let _ = writeln!(s, "* oversubscribed: this rank shares cores");
        }
        for w in &self.warnings {
            let _ = writeln!(s, "warning: {w}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_with_cells_wider_than_65535_characters_is_drawn() {
        // 2 ranks of 40000 threads on 2 PUs: oversubscribed, and each rank's core
        // list is longer than the widest padding `format!` accepts.
        let topo = Topology::from_synthetic("pack:1 core:2 pu:1").unwrap();
        let plan = plan(&topo, &PlacementRequest::new(2, 40000)).unwrap();
        let table = plan.table();
        let widest = table.lines().map(str::len).max().unwrap();
        assert!(widest > 65535, "{widest}");
        assert!(table.lines().count() >= 3);
    }
}
