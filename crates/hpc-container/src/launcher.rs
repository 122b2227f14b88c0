//! Launchers, process-management interfaces, MPI/UCX settings and
//! cross-memory attach.

use crate::parse;
use crate::probe::Probe;
use serde::Serialize;
use std::collections::BTreeMap;

/// A launcher or process-management interface seen in the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LauncherKind {
    /// Slurm (`SLURM_JOB_ID`).
    Slurm,
    /// PMIx server reachable (`PMIX_RANK`, `PMIX_NAMESPACE`).
    Pmix,
    /// Open MPI's `mpirun`/`prterun` (`OMPI_COMM_WORLD_*`).
    OpenMpi,
    /// MPICH's Hydra / PMI-1 (`PMI_RANK`, `HYDRA_*`).
    Hydra,
    /// hpc-rs `hpc run` (`HPC_RANK`, `HPC_SIZE`, `HPC_RENDEZVOUS`).
    HpcRun,
}

/// Slurm job and step facts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlurmInfo {
    /// `SLURM_JOB_ID`.
    pub job_id: Option<String>,
    /// `SLURM_STEP_ID`: set inside an `srun` step only.
    pub step_id: Option<String>,
    /// `SLURM_MPI_TYPE` (`pmix`, `pmi2`, `none`).
    pub mpi_type: Option<String>,
    /// `SLURM_CPU_BIND` / `SLURM_CPU_BIND_TYPE`.
    pub cpu_bind: Option<String>,
}

/// Which MPI library the image carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MpiLibrary {
    /// Open MPI.
    OpenMpi,
    /// MPICH or a derivative (Intel MPI, MVAPICH, Cray MPICH).
    Mpich,
}

/// Launcher and rank facts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Launcher {
    /// Every launcher/PMI seen, in a fixed order.
    pub kinds: Vec<LauncherKind>,
    /// This process's rank, where a launcher says.
    pub rank: Option<u64>,
    /// World size.
    pub size: Option<u64>,
    /// Ranks on this node, from the launcher variables.
    pub local_size: Option<u64>,
    /// Slurm details, when under Slurm.
    pub slurm: Option<SlurmInfo>,
    /// MPI libraries found in the image or the environment.
    pub mpi_libraries: Vec<MpiLibrary>,
    /// `PMIX_SERVER_TMPDIR`: where the PMIx server (slurmd, prterun) keeps its shared
    /// data store and rendezvous files, which its clients open.
    pub pmix_server_tmpdir: Option<String>,
    /// Whether that directory exists in the probed file system (`None` when unset).
    pub pmix_server_tmpdir_visible: Option<bool>,
    /// The launcher's rank and size variables set to something that is not a
    /// number (`SLURM_PROCID=-5`), as name and value: read as unknown, and the
    /// next variable looked at.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_numbers: Vec<(String, String)>,
}

/// MPI and UCX tuning variables.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MpiSettings {
    /// `UCX_TLS`.
    pub ucx_tls: Option<String>,
    /// `UCX_NET_DEVICES`.
    pub ucx_net_devices: Option<String>,
    /// All `OMPI_MCA_*` variables, without the prefix (`btl` → `tcp,self`).
    pub ompi_mca: BTreeMap<String, String>,
    /// `FI_PROVIDER` (libfabric).
    pub fi_provider: Option<String>,
    /// `HPC_TRANSPORT` (hpc-rdma's backend choice).
    pub hpc_transport: Option<String>,
}

/// Whether cross-memory attach (`process_vm_readv`) works: Open MPI's
/// shared-memory transport (vader/sm) uses it for single-copy transfers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CrossMemoryAttach {
    /// `/proc/sys/kernel/yama/ptrace_scope` (0-3), if Yama is present.
    pub ptrace_scope: Option<u8>,
    /// Whether `CAP_SYS_PTRACE` is in the effective capability set.
    pub cap_sys_ptrace: Option<bool>,
    /// `Seccomp` mode from `/proc/self/status` (0 off, 2 filter).
    pub seccomp: Option<u8>,
    /// Result of calling `process_vm_readv` on the own process (live runs only).
    pub self_test: Option<bool>,
    /// Verdict: `Some(true)` works, `Some(false)` blocked, `None` unknown.
    pub works: Option<bool>,
}

const CAP_SYS_PTRACE: u32 = 19;

/// Reads launcher facts from `probe`.
pub fn detect(p: &Probe) -> Launcher {
    let mut kinds = Vec::new();
    let slurm = p
        .var("SLURM_JOB_ID")
        .or(p.var("SLURM_JOBID"))
        .map(|job| SlurmInfo {
            job_id: Some(job.to_string()),
            step_id: p
                .var("SLURM_STEP_ID")
                .or(p.var("SLURM_STEPID"))
                .map(str::to_string),
            mpi_type: p.var("SLURM_MPI_TYPE").map(str::to_string),
            cpu_bind: p
                .var("SLURM_CPU_BIND")
                .or(p.var("SLURM_CPU_BIND_TYPE"))
                .map(str::to_string),
        });
    if slurm.is_some() {
        kinds.push(LauncherKind::Slurm);
    }
    if p.var("PMIX_RANK").is_some() || p.var("PMIX_NAMESPACE").is_some() {
        kinds.push(LauncherKind::Pmix);
    }
    if p.var("OMPI_COMM_WORLD_RANK").is_some() || p.var("OMPI_COMM_WORLD_SIZE").is_some() {
        kinds.push(LauncherKind::OpenMpi);
    }
    if p.var("PMI_RANK").is_some()
        || p.var("PMI_SIZE").is_some()
        || p.vars_with_prefix("HYDRA_").next().is_some()
    {
        kinds.push(LauncherKind::Hydra);
    }
    if p.var(hpc_env::RANK).is_some() || p.var(hpc_env::RENDEZVOUS).is_some() {
        kinds.push(LauncherKind::HpcRun);
    }
    let not_numbers = std::cell::RefCell::new(Vec::new());
    let num = |keys: &[&str]| {
        // Every variable is looked at, so that one that is not a number is
        // told (hostile pass 20: read as unknown without a word).
        let mut found = None;
        for k in keys {
            let Some(v) = p.var(k) else { continue };
            match v.trim().parse::<u64>() {
                Ok(n) => {
                    found.get_or_insert(n);
                }
                Err(_) => {
                    let mut seen = not_numbers.borrow_mut();
                    if !seen.iter().any(|(name, _)| name == k) {
                        seen.push((k.to_string(), v.to_string()));
                    }
                }
            }
        }
        found
    };
    let rank = num(&[
        hpc_env::RANK,
        "OMPI_COMM_WORLD_RANK",
        "PMIX_RANK",
        "PMI_RANK",
        "SLURM_PROCID",
    ]);
    let size = num(&[
        hpc_env::SIZE,
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "SLURM_NTASKS",
    ]);
    let local_size = num(&[
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "PMIX_LOCAL_SIZE",
        "MPI_LOCALNRANKS",
        "PMI_LOCAL_SIZE",
        "SLURM_NTASKS_PER_NODE",
    ])
    .or_else(|| slurm_tasks_on_node(p, &mut not_numbers.borrow_mut()))
    // `hpc run` starts all ranks on this machine.
    .or_else(|| {
        if kinds.contains(&LauncherKind::HpcRun) {
            num(&[hpc_env::SIZE])
        } else {
            None
        }
    });
    let pmix_server_tmpdir = p
        .var("PMIX_SERVER_TMPDIR")
        .filter(|d| !d.trim().is_empty())
        .map(str::to_string);
    let pmix_server_tmpdir_visible = pmix_server_tmpdir.as_deref().map(|d| p.is_dir(d));
    Launcher {
        kinds,
        rank,
        size,
        local_size,
        slurm,
        mpi_libraries: mpi_libraries(p),
        pmix_server_tmpdir,
        pmix_server_tmpdir_visible,
        not_numbers: not_numbers.into_inner(),
    }
}

/// Tasks on this node from `SLURM_STEP_TASKS_PER_NODE` / `SLURM_TASKS_PER_NODE`
/// (`4(x2),3`): the count of the node at `SLURM_NODEID`, else the first.
/// A variable that cannot be read (`SLURM_NODEID=x`, `SLURM_TASKS_PER_NODE=4(x-1)`)
/// is put in `unread` (hostile pass 20: read as unknown, or as node 0, without
/// a word).
fn slurm_tasks_on_node(p: &Probe, unread: &mut Vec<(String, String)>) -> Option<u64> {
    let name = if p.var("SLURM_STEP_TASKS_PER_NODE").is_some() {
        "SLURM_STEP_TASKS_PER_NODE"
    } else {
        "SLURM_TASKS_PER_NODE"
    };
    let spec = p.var(name)?;
    let mut unread_as = |name: &str, v: &str| {
        unread.push((name.to_string(), v.to_string()));
        None
    };
    let node: u64 = match p.var("SLURM_NODEID") {
        None => 0,
        Some(v) => match v.trim().parse() {
            Ok(n) => n,
            Err(_) => return unread_as("SLURM_NODEID", v),
        },
    };
    let mut index = 0u64;
    for part in spec.split(',') {
        let parsed = match part.split_once("(x") {
            Some((c, r)) => c
                .trim()
                .parse::<u64>()
                .ok()
                .zip(r.strip_suffix(')').and_then(|r| r.parse::<u64>().ok())),
            None => part.trim().parse::<u64>().ok().map(|c| (c, 1)),
        };
        let Some((count, repeat)) = parsed else {
            return unread_as(name, spec);
        };
        if node < index.saturating_add(repeat) {
            return Some(count);
        }
        index = index.saturating_add(repeat);
    }
    None
}

const OPENMPI_MARKERS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libmpi.so.40",
    "/usr/lib/aarch64-linux-gnu/libmpi.so.40",
    "/usr/lib64/openmpi/lib/libmpi.so.40",
    "/usr/lib/x86_64-linux-gnu/openmpi",
    "/usr/lib64/openmpi",
    "/etc/openmpi",
    "/opt/openmpi",
    "/usr/local/lib/libmpi.so.40",
];
const MPICH_MARKERS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libmpich.so.12",
    "/usr/lib/aarch64-linux-gnu/libmpich.so.12",
    "/usr/lib64/mpich/lib/libmpi.so.12",
    "/usr/local/lib/libmpi.so.12",
    "/opt/mpich",
];

fn mpi_libraries(p: &Probe) -> Vec<MpiLibrary> {
    let mut out = Vec::new();
    let ompi_env = p.vars_with_prefix("OMPI_").next().is_some();
    if ompi_env || OPENMPI_MARKERS.iter().any(|m| p.exists(m)) {
        out.push(MpiLibrary::OpenMpi);
    }
    if MPICH_MARKERS.iter().any(|m| p.exists(m)) || p.var("MPICH_VERSION").is_some() {
        out.push(MpiLibrary::Mpich);
    }
    out
}

/// Reads MPI/UCX settings from `probe`.
pub fn mpi_settings(p: &Probe) -> MpiSettings {
    MpiSettings {
        ucx_tls: p.var("UCX_TLS").map(str::to_string),
        ucx_net_devices: p.var("UCX_NET_DEVICES").map(str::to_string),
        ompi_mca: p
            .vars_with_prefix("OMPI_MCA_")
            .map(|(k, v)| (k["OMPI_MCA_".len()..].to_string(), v.to_string()))
            .collect(),
        fi_provider: p.var("FI_PROVIDER").map(str::to_string),
        hpc_transport: p.var(hpc_env::TRANSPORT).map(str::to_string),
    }
}

/// Checks cross-memory attach.
pub fn cross_memory_attach(p: &Probe) -> CrossMemoryAttach {
    let ptrace_scope = p
        .read("/proc/sys/kernel/yama/ptrace_scope")
        .and_then(|t| t.trim().parse::<u8>().ok());
    let status = p
        .read("/proc/self/status")
        .map(|t| parse::status(&t))
        .unwrap_or_default();
    let cap_sys_ptrace = status
        .get("CapEff")
        .and_then(|v| parse::cap_mask(v))
        .map(|m| m & (1u64 << CAP_SYS_PTRACE) != 0);
    let seccomp = status.get("Seccomp").and_then(|v| v.parse().ok());
    let self_test = if p.is_live() { Some(self_test()) } else { None };
    let works = match (self_test, ptrace_scope, cap_sys_ptrace) {
        (Some(false), _, _) => Some(false),
        (_, Some(3), _) => Some(false),
        (_, Some(2), Some(false)) => Some(false),
        (_, Some(2), Some(true)) => Some(true),
        (Some(true), _, _) => Some(true),
        (None, Some(0 | 1), _) => Some(true),
        (None, None, Some(true)) => Some(true),
        _ => None,
    };
    CrossMemoryAttach {
        ptrace_scope,
        cap_sys_ptrace,
        seccomp,
        self_test,
        works,
    }
}

/// Reads a few bytes of the own process with `process_vm_readv`: fails when a
/// seccomp filter blocks the call (Docker's default profile does on some kernels).
fn self_test() -> bool {
    let src = [0x5au8; 16];
    let mut dst = [0u8; 16];
    let local = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    let remote = libc::iovec {
        iov_base: src.as_ptr() as *mut libc::c_void,
        iov_len: src.len(),
    };
    // SAFETY: both iovecs describe live buffers of the stated length in this
    // process; the kernel only writes into `dst`.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n < 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "process_vm_readv failed");
    }
    n == 16 && dst == src
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_tasks_per_node() {
        let mut env = BTreeMap::new();
        env.insert("SLURM_TASKS_PER_NODE".to_string(), "4(x2),3".to_string());
        env.insert("SLURM_NODEID".to_string(), "2".to_string());
        let p = Probe::new("/nonexistent", env);
        assert_eq!(slurm_tasks_on_node(&p, &mut Vec::new()), Some(3));
    }

    /// The self-test reads this process's own memory, which only a seccomp filter
    /// (or a kernel without cross-memory attach) can forbid: with no filter it must
    /// succeed, and the live check must report its result and derive its verdict
    /// from it.
    #[test]
    fn self_test_succeeds_without_a_seccomp_filter_and_decides_the_verdict() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let seccomp: Option<u8> = parse::status(&status)
            .get("Seccomp")
            .and_then(|v| v.parse().ok());
        let got = self_test();
        if seccomp == Some(0) {
            assert!(
                got,
                "process_vm_readv on the own process failed with no seccomp filter: {}",
                std::io::Error::last_os_error()
            );
        }
        let cma = cross_memory_attach(&Probe::live());
        assert_eq!(cma.seccomp, seccomp);
        assert_eq!(cma.self_test, Some(got));
        match (got, cma.ptrace_scope) {
            (false, _) => assert_eq!(cma.works, Some(false), "{cma:?}"),
            (true, Some(2 | 3)) => {}
            (true, _) => assert_eq!(cma.works, Some(true), "{cma:?}"),
        }
        // A probe of a captured tree (not this process) must not run it.
        let captured = cross_memory_attach(&Probe::new("/nonexistent", BTreeMap::new()));
        assert_eq!(captured.self_test, None);
    }
}
