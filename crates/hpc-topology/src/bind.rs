//! Binding the process, threads and memory, pinned rayon pools, and checking a
//! launcher's binding.

use std::fmt;
use std::sync::Arc;

use rustix::process::Pid;
use rustix::thread::CpuSet as RawCpuSet;
use serde::{Deserialize, Serialize};

use crate::model::Topology;
use crate::placement::Placement;
use crate::{CpuSet, Result, TopologyError};

fn to_cpu_set_t(set: &CpuSet) -> Result<RawCpuSet> {
    let mut raw = RawCpuSet::new();
    let max = RawCpuSet::MAX_CPU as u32;
    for cpu in set.iter() {
        if cpu >= max {
            return Err(TopologyError::Bind {
                cpuset: set.to_string(),
                reason: format!(
                    "PU {cpu} is beyond PU {}, the highest the system call can name",
                    max - 1
                ),
            });
        }
        raw.set(cpu as usize);
    }
    Ok(raw)
}

fn affinity_of(pid: Option<Pid>) -> Result<CpuSet> {
    let raw = rustix::thread::sched_getaffinity(pid).map_err(|e| TopologyError::Bind {
        cpuset: String::new(),
        reason: format!("sched_getaffinity: {e}"),
    })?;
    Ok((0..RawCpuSet::MAX_CPU)
        .filter(|&i| raw.is_set(i))
        .map(|i| i as u32)
        .collect())
}

/// The PUs the calling thread may run on (`sched_getaffinity(0)`).
pub fn thread_affinity() -> Result<CpuSet> {
    affinity_of(None)
}

/// The current binding of this process: the affinity of its main thread, which is
/// what `taskset`, cgroups, Slurm or `mpirun` gave it at start.
pub fn current_binding() -> Result<CpuSet> {
    affinity_of(Some(rustix::process::getpid()))
}

/// The PU the calling thread runs on right now (`sched_getcpu`).
pub fn current_cpu() -> Option<u32> {
    u32::try_from(rustix::thread::sched_getcpu()).ok()
}

/// Binds the calling thread to `cpuset` (`sched_setaffinity(0)`).
pub fn bind_current_thread(cpuset: &CpuSet) -> Result<()> {
    if cpuset.is_empty() {
        return Err(TopologyError::Bind {
            cpuset: String::new(),
            reason: "empty cpuset".into(),
        });
    }
    let raw = to_cpu_set_t(cpuset)?;
    if let Err(e) = rustix::thread::sched_setaffinity(None, &raw) {
        return Err(TopologyError::Bind {
            cpuset: cpuset.to_string(),
            reason: format!("sched_setaffinity: {e}"),
        });
    }
    tracing::debug!(cpuset = %cpuset, "thread bound");
    Ok(())
}

/// `set` as hwloc's bitmap, refusing a PU beyond [`crate::MAX_CPU_ID`] (as
/// [`CpuSet::parse_list`] does): hwlocality panicked on one beyond `c_int::MAX`
/// ("Bitmap index is out of the accepted 0..=c_int::MAX range"), and one far
/// past any machine was a bitmap of that many bits, made before the system
/// refused it.
fn hwloc_cpuset(set: &CpuSet) -> Result<hwlocality::cpu::cpuset::CpuSet> {
    if let Some(pu) = set.last().filter(|&pu| pu > crate::MAX_CPU_ID) {
        return Err(TopologyError::Bind {
            cpuset: set.to_string(),
            reason: format!(
                "PU {pu} is beyond PU {}, the highest a machine is taken to have",
                crate::MAX_CPU_ID
            ),
        });
    }
    let mut out = hwlocality::cpu::cpuset::CpuSet::new();
    for i in set.iter() {
        out.set(i as usize);
    }
    Ok(out)
}

fn local_hwloc() -> Result<hwlocality::topology::Topology> {
    hwlocality::topology::Topology::new().map_err(|e| TopologyError::Hwloc(e.to_string()))
}

/// Binds every thread of the current process to `cpuset` (hwloc `set_cpubind`
/// with `HWLOC_CPUBIND_PROCESS`). Threads started later inherit the binding of the
/// thread that starts them.
pub fn bind_current_process(cpuset: &CpuSet) -> Result<()> {
    if cpuset.is_empty() {
        return Err(TopologyError::Bind {
            cpuset: String::new(),
            reason: "empty cpuset".into(),
        });
    }
    let hw = local_hwloc()?;
    hw.bind_cpu(
        &hwloc_cpuset(cpuset)?,
        hwlocality::cpu::binding::CpuBindingFlags::PROCESS,
    )
    .map_err(|e| TopologyError::Bind {
        cpuset: cpuset.to_string(),
        reason: e.to_string(),
    })?;
    tracing::debug!(cpuset = %cpuset, "process bound");
    Ok(())
}

/// Outcome of a memory binding request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", content = "reason", rename_all = "snake_case")]
pub enum MemoryBinding {
    /// Memory allocations now come from the requested NUMA node.
    Bound,
    /// The system does not support it (or forbids it); allocations follow the
    /// default policy. Not an error: placement still works without it.
    NotApplied(String),
}

/// Whether a memory binding applies to the calling thread or the whole process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryBindScope {
    /// The calling thread only.
    Thread,
    /// Every thread of the process.
    Process,
}

fn bind_memory_with(
    hw: &hwlocality::topology::Topology,
    numa_os_index: u32,
    scope: MemoryBindScope,
) -> MemoryBinding {
    use hwlocality::memory::binding::{MemoryBindingFlags, MemoryBindingPolicy};
    // hwloc's bitmaps index by a C int: a larger node panicked in hwlocality
    // ("Bitmap index is out of the accepted 0..=c_int::MAX range").
    if i32::try_from(numa_os_index).is_err() {
        return MemoryBinding::NotApplied(format!(
            "NUMA node {numa_os_index} is beyond the largest node index hwloc takes ({})",
            i32::MAX
        ));
    }
    let mut nodes = hwlocality::memory::nodeset::NodeSet::new();
    nodes.set(numa_os_index as usize);
    let flags = match scope {
        MemoryBindScope::Thread => MemoryBindingFlags::THREAD,
        MemoryBindScope::Process => MemoryBindingFlags::PROCESS,
    };
    match hw.bind_memory(&nodes, MemoryBindingPolicy::Bind, flags) {
        Ok(()) => {
            tracing::debug!(numa = numa_os_index, ?scope, "memory bound");
            MemoryBinding::Bound
        }
        Err(e) => {
            tracing::info!(numa = numa_os_index, error = %e, "memory binding not applied");
            MemoryBinding::NotApplied(e.to_string())
        }
    }
}

/// Binds memory allocations to NUMA node `numa_os_index` (hwloc `set_membind`,
/// policy `Bind`). Unsupported systems, containers that forbid `set_mempolicy` and
/// unknown nodes give [`MemoryBinding::NotApplied`], never an error.
pub fn bind_memory_to_numa(numa_os_index: u32, scope: MemoryBindScope) -> MemoryBinding {
    match local_hwloc() {
        Ok(hw) => bind_memory_with(&hw, numa_os_index, scope),
        Err(e) => MemoryBinding::NotApplied(e.to_string()),
    }
}

/// Builds a rayon [`ThreadPool`](rayon::ThreadPool) whose worker `i` is pinned to
/// compute core `i` of a [`Placement`] (its `thread_cpusets[i]`), optionally with
/// memory bound to the rank's home NUMA node.
///
/// ```
/// use hpc_topology::{plan, PinnedPoolBuilder, PlacementRequest, Topology};
/// // Plan on this machine with one thread so the example runs anywhere.
/// let topo = Topology::this_machine().unwrap();
/// let plan = plan(&topo, &PlacementRequest::new(1, 1)).unwrap();
/// let pool = PinnedPoolBuilder::new(&plan.ranks[0]).build().unwrap();
/// assert_eq!(pool.current_num_threads(), 1);
/// ```
#[derive(Clone, Debug)]
pub struct PinnedPoolBuilder {
    cpusets: Vec<CpuSet>,
    numa: Option<u32>,
    bind_memory: bool,
    name: String,
}

impl PinnedPoolBuilder {
    /// One worker per compute core of `placement`.
    pub fn new(placement: &Placement) -> Self {
        Self::from_cpusets(placement.thread_cpusets.clone()).numa(placement.numa)
    }

    /// One worker per cpuset, worker `i` pinned to `cpusets[i]`.
    pub fn from_cpusets(cpusets: Vec<CpuSet>) -> Self {
        Self {
            cpusets,
            numa: None,
            bind_memory: false,
            name: "hpc-worker".into(),
        }
    }

    fn numa(mut self, numa: Option<u32>) -> Self {
        self.numa = numa;
        self
    }

    /// Also binds each worker's memory allocations to the home NUMA node (ignored
    /// gracefully when unsupported or when the placement has no NUMA node).
    pub fn bind_memory(mut self, yes: bool) -> Self {
        self.bind_memory = yes;
        self
    }

    /// Worker thread name prefix (`hpc-worker-0`, ...). A NUL character, which
    /// no thread's name may hold, is written `\0` (it made [`build`](Self::build)
    /// panic with "thread name may not contain interior null bytes" instead of
    /// returning).
    pub fn thread_name(mut self, prefix: impl Into<String>) -> Self {
        self.name = prefix.into().replace('\0', "\\0");
        self
    }

    /// The configured rayon builder, for further settings (stack size, ...).
    /// A worker that cannot be pinned is warned about and runs unpinned (see
    /// [`PinnedPoolBuilder::build`], which refuses it).
    pub fn into_rayon_builder(self) -> rayon::ThreadPoolBuilder {
        self.rayon_builder(None)
    }

    /// [`PinnedPoolBuilder::into_rayon_builder`], recording the first worker
    /// that could not be pinned into `failed` where given.
    #[allow(clippy::type_complexity)]
    fn rayon_builder(
        self,
        failed: Option<Arc<std::sync::Mutex<Option<(usize, TopologyError)>>>>,
    ) -> rayon::ThreadPoolBuilder {
        let cpusets = Arc::new(self.cpusets);
        let n = cpusets.len().max(1);
        let membind = match (self.bind_memory, self.numa) {
            (true, Some(numa)) => match local_hwloc() {
                Ok(hw) => Some((Arc::new(hw), numa)),
                Err(e) => {
                    tracing::info!(error = %e, "memory binding not applied");
                    None
                }
            },
            _ => None,
        };
        let name = self.name;
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(move |i| format!("{name}-{i}"))
            .start_handler(move |i| {
                if let Some(set) = cpusets.get(i) {
                    if let Err(e) = bind_current_thread(set) {
                        match &failed {
                            Some(f) => {
                                let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
                                if f.is_none() {
                                    *f = Some((i, e));
                                }
                            }
                            None => {
                                tracing::warn!(worker = i, error = %e, "cannot pin worker thread")
                            }
                        }
                    }
                }
                if let Some((hw, numa)) = &membind {
                    bind_memory_with(hw, *numa, MemoryBindScope::Thread);
                }
            })
    }

    /// Builds the pool, every worker pinned. No cpuset
    /// ([`TopologyError::ZeroThreads`]), and a worker that cannot be pinned to
    /// its cpuset (empty, or with no CPU of the machine or of the process's
    /// allowed CPUs: [`TopologyError::Bind`] naming the worker), are errors:
    /// the pool was built `Ok` with such a worker unpinned, behind a warning a
    /// program without a subscriber never saw (no cpuset: one worker,
    /// unpinned).
    pub fn build(self) -> Result<rayon::ThreadPool> {
        if self.cpusets.is_empty() {
            return Err(TopologyError::ZeroThreads);
        }
        let failed = Arc::new(std::sync::Mutex::new(None));
        let pool = self.rayon_builder(Some(failed.clone())).build()?;
        // Every worker has run its start handler once it runs a job.
        pool.broadcast(|_| ());
        let first = failed.lock().unwrap_or_else(|p| p.into_inner()).take();
        match first {
            Some((i, TopologyError::Bind { cpuset, reason })) => Err(TopologyError::Bind {
                cpuset: if cpuset.is_empty() {
                    "(none)".into()
                } else {
                    cpuset
                },
                reason: format!("worker {i} of the pinned pool: {reason}"),
            }),
            Some((_, e)) => Err(e),
            None => Ok(pool),
        }
    }
}

/// Which launcher started this process, from its environment variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Launcher {
    /// Open MPI's `mpirun` / `prterun` (`OMPI_COMM_WORLD_SIZE`).
    OpenMpi,
    /// Slurm's `srun` (`SLURM_STEP_ID`).
    Slurm,
    /// MPICH's Hydra (`PMI_RANK`).
    Hydra,
    /// `hpc run` (`HPC_LOCAL_RANK`).
    Hpc,
    /// None recognised.
    Unknown,
}

impl Launcher {
    /// Detects the launcher from this process's environment.
    pub fn detect() -> Launcher {
        Self::from_env(|k| std::env::var_os(k).is_some())
    }

    /// Detects the launcher given a "variable is set" predicate.
    pub fn from_env(has: impl Fn(&str) -> bool) -> Launcher {
        if has("OMPI_COMM_WORLD_SIZE") {
            Launcher::OpenMpi
        } else if has("SLURM_STEP_ID") {
            Launcher::Slurm
        } else if has(hpc_env::LOCAL_RANK) {
            Launcher::Hpc
        } else if has("PMI_RANK") {
            Launcher::Hydra
        } else {
            Launcher::Unknown
        }
    }

    fn advice(self) -> &'static str {
        match self {
            Launcher::OpenMpi => {
                "Open MPI binds each rank to one core by default: launch with `mpirun --bind-to none` (or `--map-by slot:PE=<threads>`), or use `hpc run --bind core`"
            }
            Launcher::Slurm => "launch with `srun --cpus-per-task=<threads>` (or `--cpu-bind=none`), or use `hpc run --bind core`",
            _ => "launch without CPU binding (e.g. `mpirun --bind-to none`) or use `hpc run --bind core`",
        }
    }
}

/// A problem found in the current binding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BindingDiagnostic {
    /// The process is bound to a single core but more threads were requested: they
    /// would all time-share that core.
    SingleCore {
        /// The binding.
        cpuset: CpuSet,
        /// Threads requested.
        threads: usize,
        /// The launcher that probably bound it.
        launcher: Launcher,
    },
    /// The process is bound to fewer cores than requested threads.
    TooFewCores {
        /// The binding.
        cpuset: CpuSet,
        /// Cores in the binding.
        cores: usize,
        /// Threads requested.
        threads: usize,
        /// The launcher that probably bound it.
        launcher: Launcher,
    },
    /// More threads were requested than the machine has cores, every one of which
    /// the process may use: no binding to widen (the advice of
    /// [`BindingDiagnostic::TooFewCores`] would be wrong); the threads share cores.
    MoreThreadsThanCores {
        /// Cores of the machine.
        cores: usize,
        /// Threads requested.
        threads: usize,
    },
}

impl fmt::Display for BindingDiagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindingDiagnostic::SingleCore { cpuset, threads, launcher } => write!(
                f,
                "this process is bound to a single core (PUs {cpuset}) but {threads} threads were requested; {}",
                launcher.advice()
            ),
            BindingDiagnostic::TooFewCores { cpuset, cores, threads, launcher } => write!(
                f,
                "this process is bound to {cores} cores (PUs {cpuset}) but {threads} threads were requested; {}",
                launcher.advice()
            ),
            BindingDiagnostic::MoreThreadsThanCores { cores, threads } => write!(
                f,
                "{threads} threads were requested but the machine has {cores} cores, all of \
                 which this process may use: the threads share cores"
            ),
        }
    }
}

/// The current binding of this process and what is wrong with it, if anything.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindingReport {
    /// The PUs the process may run on.
    pub cpuset: CpuSet,
    /// Cores of the topology with a PU in `cpuset`.
    pub cores: usize,
    /// The launcher detected from the environment.
    pub launcher: Launcher,
    /// A problem, if the binding cannot hold the requested threads.
    pub diagnostic: Option<BindingDiagnostic>,
}

/// Diagnoses a binding without looking at the process: `cpuset` against `threads`
/// on `topo`.
///
/// ```
/// use hpc_topology::{diagnose_binding, BindingDiagnostic, CpuSet, Launcher, Topology};
/// let topo = Topology::from_synthetic("pack:1 core:4 pu:2").unwrap();
/// let one_core = CpuSet::parse_list("0-1").unwrap();
/// let report = diagnose_binding(&topo, &one_core, 4, Launcher::OpenMpi);
/// assert!(matches!(report.diagnostic, Some(BindingDiagnostic::SingleCore { .. })));
/// assert!(report.diagnostic.unwrap().to_string().contains("--bind-to none"));
/// ```
pub fn diagnose_binding(
    topo: &Topology,
    cpuset: &CpuSet,
    threads: usize,
    launcher: Launcher,
) -> BindingReport {
    let cores = topo.allowed_cores(cpuset).count();
    let diagnostic = if threads > 1 && cores == 1 {
        Some(BindingDiagnostic::SingleCore {
            cpuset: cpuset.clone(),
            threads,
            launcher,
        })
    } else if threads > cores && cores > 0 && cores >= topo.cores.len() {
        // Nothing bound the process: every core of the machine is in its set.
        Some(BindingDiagnostic::MoreThreadsThanCores { cores, threads })
    } else if threads > cores && cores > 0 {
        Some(BindingDiagnostic::TooFewCores {
            cpuset: cpuset.clone(),
            cores,
            threads,
            launcher,
        })
    } else {
        None
    };
    BindingReport {
        cpuset: cpuset.clone(),
        cores,
        launcher,
        diagnostic,
    }
}

/// Reads this process's binding and diagnoses it against `threads` requested
/// threads on `topo` (normally [`Topology::this_machine`]); logs a
/// `tracing::warn!` when the binding is too narrow (for example Open MPI's default
/// one-core binding under `mpirun`).
pub fn check_binding(topo: &Topology, threads: usize) -> Result<BindingReport> {
    let report = diagnose_binding(topo, &current_binding()?, threads, Launcher::detect());
    if let Some(d) = &report.diagnostic {
        tracing::warn!("{d}");
    }
    Ok(report)
}
