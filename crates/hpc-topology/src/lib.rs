//! Hardware topology and placement of ranks, threads, progress cores, GPUs and NICs
//! for hpc-rs applications.
//!
//! # What it does
//!
//! 1. **Load** a topology through hwloc 2.x — from this machine, from an hwloc XML
//!    file (`lstopo machine.xml`), or from a synthetic description such as
//!    `"pack:2 numa:2 core:8 pu:2"` — with I/O discovery enabled, and convert it
//!    into a plain, owned, serde-serializable [`Topology`]: packages, NUMA nodes
//!    with memory sizes, cores, PUs (OS indices), caches, GPUs and network adapters
//!    with their PCI bus ids and locality.
//! 2. **Plan** where each rank of a node runs ([`plan`]): its cpuset, one compute
//!    core per thread, progress cores (per rank or per node), home NUMA node,
//!    nearest GPU and NIC, under a [`Policy`] (compact, spread, one rank per NUMA
//!    node or per package), only on allowed PUs.
//! 3. **Bind** the process or a thread ([`bind_current_process`],
//!    [`bind_current_thread`]), build a rayon pool whose workers are pinned to the
//!    rank's cores ([`PinnedPoolBuilder`]), bind memory to the home NUMA node
//!    ([`bind_memory_to_numa`]), and detect launcher bindings that are too narrow
//!    ([`check_binding`]).
//!
//! ```
//! use hpc_topology::{plan, PlacementRequest, Policy, Topology};
//!
//! let topo = Topology::from_synthetic("pack:2 numa:2 core:8 pu:2")?;
//! let req = PlacementRequest::new(4, 6).progress(2).policy(Policy::NumaPerRank);
//! let plan = plan(&topo, &req)?;
//! for p in &plan.ranks {
//!     assert_eq!(p.compute_cores.len(), 6);
//!     assert_eq!(p.numa, Some(p.rank as u32));
//! }
//! assert_eq!(plan.ranks[1].cpuset.to_string(), "16-31");
//! println!("{}", plan.table());
//! # Ok::<(), hpc_topology::TopologyError>(())
//! ```
//!
//! # Model
//!
//! PUs are identified by their OS index (what `taskset` uses), cores by their hwloc
//! logical index (OS core numbers repeat across packages), NUMA nodes by their OS
//! index (what `numactl` uses). A device's locality ([`Gpu::cpuset`],
//! [`Nic::cpuset`]) is the cpuset of its nearest normal (non-I/O) ancestor.
//!
//! * **GPUs** are the PCI functions of display class (`0x03xx`: VGA, 3D controller,
//!   display controller) that carry a GPU or co-processor OS device (CUDA `cuda0`,
//!   NVML `nvml0`, OpenCL `opencl0d0`, RSMI `rsmi0`, Level Zero `ze0`, DRM `card0`),
//!   grouped so `cuda0` and `card0` of one board are one GPU; GPU OS devices without
//!   a PCI parent count alone. A board with no OS device (driver not loaded) is not
//!   counted.
//! * **NICs** are the PCI functions carrying a network (`eth0`, `enp1s0`, `ib0`) or
//!   OpenFabrics (`mlx5_0`) OS device. They are [`NicKind::Fabric`] when they have an
//!   OpenFabrics device or are InfiniBand-class (`0x0207`), else
//!   [`NicKind::Ethernet`].
//!
//! # Placement rules
//!
//! * Each thread gets a whole core (all its allowed PUs); ranks never share a core
//!   unless `ranks x (threads + progress)` exceeds the allowed cores. Then the plan
//!   is still complete: cores are reused least-loaded first,
//!   [`PlacementPlan::oversubscribed`] and [`Placement::oversubscribed`] are set and
//!   a `tracing::warn!` is logged.
//! * Only cores with a PU in the allowed set are used: [`Topology::allowed`]
//!   (hwloc's allowed cpuset; for this machine also the thread's affinity, so
//!   cgroups, Slurm and `taskset` restrictions apply), further restricted by
//!   [`PlacementRequest::allowed`].
//! * Per-rank progress cores follow the rank's compute cores. Per-node progress
//!   cores are reserved first, one per NUMA domain in turn from the end of each
//!   domain; each rank is then given one of them, in its home NUMA node if possible.
//! * GPUs: every rank first gets a free GPU local to its cores; ranks left over get
//!   any free GPU; only when none is free are GPUs shared (least used, local first).
//! * NICs: fabric adapters when the node has one, else Ethernet; a local adapter
//!   when there is one (least used first), else the least used.
//!
//! # JSON schema (`schema_version` 1)
//!
//! [`PlacementPlan::to_json`] (and `hpc topo --ranks N --json`) writes:
//!
//! ```text
//! {
//!   "schema_version": 1,
//!   "topology": { "source": "XML file m.xml", "packages": 2, "numa_nodes": 2,
//!                 "cores": 16, "pus": 32, "gpus": 2, "nics": 3 },
//!   "request": { "ranks": 2, "threads": 7, "progress": 1,
//!                "progress_scope": "per_rank" | "per_node",
//!                "policy": "compact" | "spread" | "numa_per_rank" | "package_per_rank",
//!                "allowed": null | [0, 1, ...] },
//!   "allowed": [0, 1, ...],            // PU OS indices that could be used
//!   "allowed_cores": 16,
//!   "node_progress_cores": [],         // core logical indices (per-node progress)
//!   "oversubscribed": false,
//!   "warnings": ["..."],
//!   "ranks": [ {
//!       "rank": 0,
//!       "cpuset": [0, 1, ...],         // PU OS indices: compute + progress
//!       "compute_cores": [0, 1, ...],  // core logical indices, thread i on entry i
//!       "thread_cpusets": [[0, 16], ...],
//!       "compute_cpuset": [...],
//!       "progress_cores": [7],
//!       "progress_cpuset": [7, 23],
//!       "numa": 0 | null,              // NUMA node OS index
//!       "package": 0 | null,           // package logical index
//!       "gpu": null | { "index": 0, "name": "cuda0", "pci_bus_id": "0000:84:00.0" | null,
//!                       "local": true, "shared": false },
//!       "nic": null | { same fields as gpu },
//!       "oversubscribed": false
//!   } ]
//! }
//! ```
//!
//! `hpc topo --json` without `--ranks` writes `{"schema_version": 1, "topology": T}`
//! where `T` is the serialized [`Topology`]. Fields may be added within version 1;
//! removals or changes of meaning bump the version.
//!
//! # Why hwlocality and not hwloc2
//!
//! Two Rust bindings to hwloc exist. `hwloc2` (2.2.0) has not been released since
//! 2020 and still uses hwloc 1.x depth conventions, so NUMA-node queries panic on
//! hwloc 2.x, where NUMA nodes are memory children at a special depth.
//! `hwlocality` (1.0.0-alpha.13) is maintained, models hwloc 2.x (memory and I/O
//! children, type filters, allowed sets) and has safe bindings. Both declare
//! `links = "hwloc"`, so a workspace can hold only one of them: this crate uses
//! `hwlocality`, and no hwloc type appears in its public API.
//!
//! # Which hwloc
//!
//! Linux only. The crate is compiled against hwloc's **2.0 API** (hwlocality without a
//! `hwloc-2_*` feature level), so it builds against any hwloc 2.x that `pkg-config`
//! finds: Ubuntu 22.04 (2.7), RHEL 8 (2.2), RHEL 9 (2.4), Debian 12 (2.9). A call
//! newer than 2.0 cannot slip in: hwlocality leaves it out at this level and the
//! build fails. A binary built against one 2.x runs with another (they share the
//! `libhwloc.so.15` ABI); [`Topology::load`] checks the loaded library's API version
//! at run time ([`hwloc_api_version`]) and refuses anything but 2.x with
//! [`TopologyError::HwlocVersion`].
//!
//! Build prerequisites: a C toolchain, `pkg-config`, and hwloc >= 2.0 with headers
//! (`libhwloc-dev` plus `libudev-dev` on Debian/Ubuntu, whose hwloc's `pkg-config
//! --static` line names libudev; `hwloc-devel` on RHEL). Where there is none, the
//! **`vendored`** feature builds hwloc from source and links it statically: it needs a
//! C compiler, `make`, autoconf, automake and libtool, and hwlocality's build script
//! downloads the hwloc release tarball (checked against a SHA3 digest) from
//! open-mpi.org, so the build machine needs that web site. The feature selects
//! hwlocality's `vendored-extra`, because its plain `vendored` configures hwloc with
//! `--disable-io`, and a topology without PCI devices has no GPUs or NICs to place
//! ranks near; with `vendored-extra` hwloc's own configure decides, and links
//! libxml2 where its headers are installed.

mod bind;
pub mod budget;
mod cpuset;
mod error;
mod load;
mod model;
mod placement;
mod units;
mod xml_check;

pub use bind::{
    bind_current_process, bind_current_thread, bind_memory_to_numa, check_binding, current_binding,
    current_cpu, diagnose_binding, thread_affinity, BindingDiagnostic, BindingReport, Launcher,
    MemoryBindScope, MemoryBinding, PinnedPoolBuilder,
};
pub use cpuset::{CpuSet, MAX_CPU_ID};
pub use error::{Result, TopologyError};
pub use load::{hwloc_api_version, MAX_XML_BYTES};
pub use model::{
    Cache, CacheKind, Core, Gpu, Nic, NicKind, NumaNode, OsDevice, OsDeviceKind, Package, PciInfo,
    Topology, TopologySource,
};
pub use placement::{
    plan, DeviceAssignment, Placement, PlacementPlan, PlacementRequest, Policy, ProgressScope,
    TopologyBrief, SCHEMA_VERSION,
};
pub use units::format_bytes;

/// The placement of one rank on the machine this process runs on: discovers the
/// topology (allowed set: cgroups and this thread's affinity), plans `local_size`
/// ranks with `threads` threads and `progress` progress cores each (or per node),
/// and returns rank `local_rank`'s [`Placement`].
///
/// Every rank of a node computes the same plan as long as they see the same
/// allowed set, so no communication is needed. Call it before binding (in the
/// launcher, or in a rank started without a launcher binding): under `mpirun`'s
/// default one-core binding the allowed set is that one core ([`check_binding`]
/// reports it).
///
/// ```
/// use hpc_topology::{plan_for_env, Policy, ProgressScope};
/// let p = plan_for_env(0, 1, 1, 0, ProgressScope::PerRank, Policy::Compact).unwrap();
/// assert_eq!(p.compute_cores.len(), 1);
/// ```
pub fn plan_for_env(
    local_rank: usize,
    local_size: usize,
    threads: usize,
    progress: usize,
    scope: ProgressScope,
    policy: Policy,
) -> Result<Placement> {
    let topo = Topology::this_machine()?;
    plan_for_rank(
        &topo, local_rank, local_size, threads, progress, scope, policy,
    )
}

/// Like [`plan_for_env`] on a given topology.
pub fn plan_for_rank(
    topo: &Topology,
    local_rank: usize,
    local_size: usize,
    threads: usize,
    progress: usize,
    scope: ProgressScope,
    policy: Policy,
) -> Result<Placement> {
    if local_size > 0 && local_rank >= local_size {
        return Err(TopologyError::RankOutOfRange {
            local_rank,
            local_size,
        });
    }
    let mut req = PlacementRequest::new(local_size, threads).policy(policy);
    req.progress = progress;
    req.progress_scope = scope;
    let mut plan = plan(topo, &req)?;
    // Every rank of the node plans the whole node; the first one says what is wrong.
    plan.log_warnings(local_rank == 0);
    Ok(plan.ranks.swap_remove(local_rank))
}
