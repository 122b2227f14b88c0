//! Knows what an HPC process runs under, and what in it breaks MPI, RDMA and GPUs.
//!
//! `hpc-container` looks at one input, a [`Probe`] (a root directory plus an
//! environment map), and works out
//!
//! * the **container runtime** (Apptainer/Singularity, Docker, Podman,
//!   Kubernetes, Enroot, Charliecloud, Shifter, Sarus, LXC, systemd-nspawn, or
//!   none), with the evidence that decided it and any outer layers
//!   ([`runtime`]);
//! * the **resources**: allowed CPUs, CPU quota, memory limit, `/dev/shm`,
//!   locked-memory and open-file limits ([`resources`]);
//! * the **devices**: InfiniBand/RDMA device nodes, adapters, ports and
//!   provider drivers; NVIDIA GPUs and whether the host has GPUs that are
//!   missing inside ([`devices`]);
//! * the **launcher**: Slurm, PMIx, Open MPI, MPICH/Hydra, `hpc run`; MPI and
//!   UCX settings; whether cross-memory attach works ([`launcher`]).
//!
//! [`Environment::diagnose`] turns this into [`Finding`]s with a stable id, a
//! severity, what was seen, why it matters and a fix phrased for the runtime
//! in use. [`Report`] bundles both for the `hpc doctor` command (text and JSON).
//!
//! Because every file is read under the probe's root, a tree captured on
//! another machine diagnoses exactly like the live system. Links in such a tree are
//! resolved inside its root (never into the host's files), only regular files are
//! opened (a FIFO would block), and a tree that lacks the files the diagnosis rests
//! on says so (`probe.incomplete`) instead of reporting a healthy machine:
//!
//! ```
//! use hpc_container::{Environment, Probe};
//! use std::collections::BTreeMap;
//!
//! let mut env = BTreeMap::new();
//! env.insert("container".to_string(), "podman".to_string());
//! let probe = Probe::new("/nonexistent-root", env);
//! let e = Environment::detect_from(&probe);
//! assert_eq!(e.runtime.kind, hpc_container::RuntimeKind::Podman);
//! for f in e.diagnose() {
//!     println!("{} {}: {}", f.severity.as_str(), f.id, f.seen);
//! }
//! ```
//!
//! # Finding ids
//!
//! | id | severity | meaning |
//! |----|----------|---------|
//! | `launch.slurm-no-pmix` | error | Open MPI under `srun` without PMIx: `MPI_Init` hangs |
//! | `launch.slurm-pmi2-openmpi` | warning | Open MPI under `srun --mpi=pmi2` |
//! | `launch.slurm-batch-step` | info | in a Slurm job but outside an `srun` step |
//! | `launch.rank-outside-size` | error | a rank at or past the job's size: the launcher's variables disagree |
//! | `launch.not-a-number` | warning | a launcher's rank or size variable that is not a number (`SLURM_PROCID=-5`) |
//! | `launch.pmix-dir-hidden` | error | `PMIX_SERVER_TMPDIR` not visible (e.g. Apptainer `--contain`) |
//! | `gpu.not-visible` | error | host GPUs on the PCI bus, no `/dev/nvidia*` inside |
//! | `gpu.apptainer-without-nv` | error | a GPU image in Apptainer without `--nv` on a node with GPUs |
//! | `gpu.driver-libs-missing` | warning | GPU nodes present, no `libcuda.so.1` |
//! | `gpu.hidden-by-env` | warning | `CUDA_VISIBLE_DEVICES` empty or `-1` |
//! | `ib.devices-missing` | error | adapters in sysfs, no `/dev/infiniband/uverbs*` |
//! | `ib.rdma-cm-missing` | warning | no `/dev/infiniband/rdma_cm` |
//! | `ib.provider-missing` | error | no `/etc/libibverbs.d/<provider>.driver` |
//! | `ib.port-down` | error/warning | no port / some ports not `ACTIVE` |
//! | `limits.memlock-low` | warning | memlock below 1 GiB with RDMA present |
//! | `limits.nofile-low` | info | open files below 4096 |
//! | `net.rdma-requested-absent` | error | `UCX_TLS` (RDMA only), `HPC_TRANSPORT=verbs` or `FI_PROVIDER=verbs` without an RDMA device |
//! | `net.ucx-tls-slow` | warning | `UCX_TLS` excludes shared memory or RDMA |
//! | `net.ompi-tcp-only` | warning | `OMPI_MCA_btl` forces TCP / excludes vader |
//! | `net.ompi-ob1-with-rdma` | info | `OMPI_MCA_pml=ob1` with RDMA devices |
//! | `shm.too-small` | warning/error | `/dev/shm` below 256 MiB |
//! | `cpu.oversubscribed` | warning | more ranks on the node than usable CPUs |
//! | `cpu.quota-below-cpus` | info | CPU quota below the allowed CPUs |
//! | `cpu.ranks-unbound` | info | several ranks, each may run on every CPU |
//! | `cma.blocked` | warning/info | `process_vm_readv` blocked |
//! | `probe.incomplete` | error/warning | none / some of [`KEY_FILES`] could be read |
//!
//! The JSON form of [`Report`] is described in [`report`].

pub mod devices;
pub mod findings;
pub mod launcher;
pub mod parse;
pub mod probe;
pub mod report;
pub mod resources;
pub mod runtime;

pub use devices::Devices;
pub use findings::{Finding, Severity};
pub use launcher::{CrossMemoryAttach, Launcher, LauncherKind, MpiSettings};
pub use probe::{parse_env_file, Probe, ProbeError};
pub use report::Report;
pub use resources::Resources;
pub use runtime::{Evidence, RuntimeInfo, RuntimeKind, Strength};

use serde::Serialize;

/// Everything detected about the environment of a process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Environment {
    /// Container runtime layers.
    pub runtime: RuntimeInfo,
    /// CPU, memory and limits.
    pub resources: Resources,
    /// RDMA and GPU devices.
    pub devices: Devices,
    /// Launcher and rank facts.
    pub launcher: Launcher,
    /// MPI/UCX tuning variables.
    pub mpi: MpiSettings,
    /// Cross-memory attach.
    pub cma: CrossMemoryAttach,
    /// Which of the files detection relies on could be read.
    pub coverage: Coverage,
}

/// The files most of the diagnosis rests on: the mount table, the cgroup, the
/// process status (allowed CPUs, capabilities), the ulimits and the online CPUs.
pub const KEY_FILES: [&str; 5] = [
    "/proc/self/mountinfo",
    "/proc/self/cgroup",
    "/proc/self/status",
    "/proc/self/limits",
    "/sys/devices/system/cpu/online",
];

/// What the probe could see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Coverage {
    /// [`KEY_FILES`] that could not be read (absent, not a regular file, a link
    /// leading outside what the tree holds).
    pub missing: Vec<String>,
}

impl Coverage {
    /// Whether none of [`KEY_FILES`] could be read: too little to judge.
    pub fn nothing_to_judge(&self) -> bool {
        self.missing.len() == KEY_FILES.len()
    }
}

impl Environment {
    /// Detects the environment of the running process (root `/`, own environment).
    pub fn detect() -> Self {
        Self::detect_from(&Probe::live())
    }

    /// Detects the environment described by `probe`.
    pub fn detect_from(probe: &Probe) -> Self {
        let mounts = probe
            .read("/proc/self/mountinfo")
            .map(|t| parse::mountinfo(&t))
            .unwrap_or_default();
        let env = Environment {
            runtime: runtime::detect(probe, &mounts),
            resources: resources::detect(probe, &mounts),
            devices: devices::detect(probe),
            launcher: launcher::detect(probe),
            mpi: launcher::mpi_settings(probe),
            cma: launcher::cross_memory_attach(probe),
            coverage: Coverage {
                missing: KEY_FILES
                    .iter()
                    .filter(|f| probe.read(f).is_none())
                    .map(|f| f.to_string())
                    .collect(),
            },
        };
        tracing::debug!(runtime = ?env.runtime.kind, "environment detected");
        env
    }

    /// Diagnoses the environment: findings sorted by severity, errors first.
    pub fn diagnose(&self) -> Vec<Finding> {
        findings::diagnose(self)
    }
}
