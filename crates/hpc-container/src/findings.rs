//! Diagnosis: turns an [`Environment`] into [`Finding`]s.

use crate::launcher::{LauncherKind, MpiLibrary};
use crate::parse::LimitValue;
use crate::runtime::RuntimeKind;
use crate::Environment;
use serde::Serialize;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; nothing is wrong.
    Info,
    /// Works, but slowly or fragilely.
    Warning,
    /// Will fail.
    Error,
}

impl Severity {
    /// Lower-case name (`error`, `warning`, `info`).
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// One diagnosis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Stable identifier (`ib.devices-missing`); see the crate docs for the list.
    pub id: &'static str,
    /// Severity.
    pub severity: Severity,
    /// What was seen.
    pub seen: String,
    /// Why it matters.
    pub why: String,
    /// How to fix it, phrased for the runtime in use.
    pub fix: String,
}

/// Size below which `/dev/shm` is reported as too small (256 MiB).
pub const SHM_MIN_BYTES: u64 = 256 << 20;
/// Locked-memory limit below which RDMA registration is at risk (1 GiB).
pub const MEMLOCK_MIN_BYTES: u64 = 1 << 30;
/// Open-files soft limit below which large jobs may run out of descriptors.
pub const NOFILE_MIN: u64 = 4096;

const MIB: f64 = 1048576.0;

/// Diagnoses `env`; findings come sorted by severity (errors first), then id.
pub fn diagnose(env: &Environment) -> Vec<Finding> {
    let mut out = Findings(Vec::new());
    coverage(env, &mut out);
    launcher(env, &mut out);
    gpus(env, &mut out);
    infiniband(env, &mut out);
    transports(env, &mut out);
    resources(env, &mut out);
    cma(env, &mut out);
    let mut out = out.0;
    out.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.id.cmp(b.id)));
    out
}

/// The findings of [`diagnose`] as its groups add them.
struct Findings(Vec<Finding>);

impl Findings {
    fn push(&mut self, id: &'static str, severity: Severity, seen: String, why: &str, fix: String) {
        self.0.push(Finding {
            id,
            severity,
            seen,
            why: why.to_string(),
            fix,
        })
    }
}

/// What the probe could read: findings about the files it could not.
fn coverage(env: &Environment, out: &mut Findings) {
    let missing = &env.coverage.missing;
    if !missing.is_empty() {
        let capture = "diagnose a live process (run `hpc doctor` inside the container or job), \
             or capture the files from one: `mkdir -p T/proc/self T/sys/devices/system/cpu; \
             for f in mountinfo cgroup status limits; do cat /proc/self/$f > T/proc/self/$f; done; \
             cat /sys/devices/system/cpu/online > T/sys/devices/system/cpu/online` \
             (copy them with cat: /proc files report a size of 0, so tar and cp -r store them empty)";
        if env.coverage.nothing_to_judge() {
            out.push(
                "probe.incomplete",
                Severity::Error,
                format!(
                    "too little to judge: none of {} could be read",
                    missing.join(", ")
                ),
                "the runtime, the cgroup's CPU and memory limits, the allowed CPUs and the \
                 ulimits are read from these files; without any of them this report cannot \
                 tell a healthy environment from a broken one",
                capture.to_string(),
            );
        } else {
            out.push(
                "probe.incomplete",
                Severity::Warning,
                format!("could not read {}", missing.join(", ")),
                "what is read from these files (runtime evidence, cgroup limits, allowed \
                 CPUs, ulimits) is reported as unknown and not checked",
                capture.to_string(),
            );
        }
    }
}

/// The launcher and PMI: Slurm without PMIx for Open MPI, an invisible PMIx server directory.
fn launcher(env: &Environment, out: &mut Findings) {
    let rt = env.runtime.kind;
    let l = &env.launcher;
    if let Some(s) = &l.slurm {
        let in_step = s.step_id.is_some();
        let mpi_type = s.mpi_type.as_deref().unwrap_or("");
        let open_mpi = l.mpi_libraries.contains(&MpiLibrary::OpenMpi);
        let has_pmix = l.kinds.contains(&LauncherKind::Pmix);
        if in_step && open_mpi && !has_pmix && (mpi_type.is_empty() || mpi_type == "none") {
            out.push(
                "launch.slurm-no-pmix",
                Severity::Error,
                format!(
                    "Slurm step {} with SLURM_MPI_TYPE={} and no PMIX_* variables; the image has Open MPI",
                    s.step_id.as_deref().unwrap_or("?"),
                    if mpi_type.is_empty() { "<unset>" } else { mpi_type }
                ),
                "Open MPI started by srun finds its peers through a PMIx server run by slurmd; \
                 without it MPI_Init hangs or every rank starts as a separate one-rank job",
                format!(
                    "launch with `srun --mpi=pmix` (or set MpiDefault=pmix in slurm.conf){}",
                    pass_env_hint(rt)
                ),
            );
        } else if in_step && open_mpi && mpi_type.starts_with("pmi2") {
            out.push(
                "launch.slurm-pmi2-openmpi",
                Severity::Warning,
                "Slurm step uses SLURM_MPI_TYPE=pmi2 with an Open MPI image".into(),
                "many Open MPI builds (Debian's among them) have no PMI-2 support and hang in MPI_Init",
                "launch with `srun --mpi=pmix`".into(),
            );
        }
        if !in_step && l.size.is_none() && l.kinds.len() == 1 {
            out.push(
                "launch.slurm-batch-step",
                Severity::Info,
                format!(
                    "inside Slurm job {} but not in an srun step (SLURM_STEP_ID unset)",
                    s.job_id.as_deref().unwrap_or("?")
                ),
                "this is the batch script; ranks only exist inside `srun` steps",
                "start the ranks with `srun --mpi=pmix ...`".into(),
            );
        }
    }

    // A rank or size variable that is not a number (`SLURM_PROCID=-5`): read as
    // unknown and the next looked at, without a word (hostile pass 20).
    for (name, value) in &l.not_numbers {
        out.push(
            "launch.not-a-number",
            Severity::Warning,
            format!(
                "{name}={} is not {}: it was read as unknown",
                hpc_io::message::cut(value),
                if name.ends_with("TASKS_PER_NODE") {
                    "a list of counts (4(x2),3)"
                } else {
                    "a number"
                }
            ),
            "a launcher sets its rank and size variables to whole numbers from 0; another \
             value was set by hand or left over, and the rank or size shown comes from \
             another variable, or is unknown",
            format!("unset {name}, or give it the number the launcher would"),
        );
    }

    // A rank at or past the job's size: the launcher's variables disagree (a
    // script that set one by hand, a stale one inherited); the report showed
    // "rank 7 of 4" without a word.
    if let (Some(rank), Some(size)) = (l.rank, l.size) {
        if rank >= size {
            out.push(
                "launch.rank-outside-size",
                Severity::Error,
                format!(
                    "rank {rank} of a job of {size} rank(s): the launcher's variables disagree"
                ),
                "a rank numbers 0 to size - 1: the program would take a rank no other process \
                 knows of, and wait for it, or fail to join",
                "check the rank and size variables this process was given (SLURM_PROCID and \
                 SLURM_NTASKS, OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE, PMI_RANK and \
                 PMI_SIZE): one left over from another job, or set by hand"
                    .into(),
            );
        }
    }

    if let (Some(dir), Some(false)) = (&l.pmix_server_tmpdir, l.pmix_server_tmpdir_visible) {
        let spool = dir
            .trim_end_matches('/')
            .rsplit_once('/')
            .map(|(parent, _)| if parent.is_empty() { "/" } else { parent })
            .unwrap_or(dir.as_str());
        out.push(
            "launch.pmix-dir-hidden",
            Severity::Error,
            format!("PMIX_SERVER_TMPDIR={dir} does not exist in this file system"),
            "the PMIx server (slurmd's, or prterun's) keeps its shared data store and rendezvous \
             files there; a rank that cannot open them fails in PMIx (`PMIX ERROR ... gds_ds12_lock`) \
             and Open MPI's shared-memory set-up fails with it",
            match rt {
                RuntimeKind::Apptainer | RuntimeKind::Singularity => format!(
                    "bind the slurmd spool directory: `apptainer exec --bind {spool} ...` (Apptainer \
                     binds /tmp but not /var/spool), and leave out --contain/--containall under srun"
                ),
                RuntimeKind::Docker | RuntimeKind::Podman => format!(
                    "bind the slurmd spool directory at the same path: `-v {spool}:{spool}`"
                ),
                _ => format!("make {spool} visible at the same path inside the container"),
            },
        );
    }
}

/// GPUs: devices the host has and the container does not see, the driver library, `CUDA_VISIBLE_DEVICES`.
fn gpus(env: &Environment, out: &mut Findings) {
    let rt = env.runtime.kind;
    let g = &env.devices.gpu;
    let host_nvidia = g.pci_nvidia();
    if host_nvidia > 0 && g.nvidia_devices.is_empty() {
        out.push(
            "gpu.not-visible",
            Severity::Error,
            format!(
                "{host_nvidia} NVIDIA GPU(s) on the PCI bus ({}) but no /dev/nvidia[0-9]* device node",
                g.pci
                    .iter()
                    .filter(|x| x.vendor == "0x10de")
                    .map(|x| x.address.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "the GPUs exist on this host but were not passed into the container: CUDA reports no device",
            gpu_fix(rt),
        );
    } else if g.apptainer_nv == Some(false)
        && g.image_wants_gpu
        && (host_nvidia > 0 || !g.nvidia_devices.is_empty())
    {
        // On a node without GPUs `--nv` binds nothing, so its absence shows only here.
        out.push(
            "gpu.apptainer-without-nv",
            Severity::Error,
            format!(
                "the image is built for GPUs (io.hpc-rs.gpu=true) and this node has {} NVIDIA GPU(s), \
                 but Apptainer was started without --nv: no driver libraries in /.singularity.d/libs",
                g.nvidia_devices.len().max(host_nvidia)
            ),
            "Apptainer shares the host's /dev but not its NVIDIA driver: without --nv CUDA finds no \
             libcuda.so.1 and the program runs without its GPUs or fails",
            "start it with `apptainer exec --nv image.sif ...` (the slurm-apptainer.sbatch that \
             `cargo xtask image --gpu` writes does)"
                .into(),
        );
    } else if !g.nvidia_devices.is_empty() && !g.libcuda {
        out.push(
            "gpu.driver-libs-missing",
            Severity::Warning,
            format!(
                "{} GPU device node(s) but no libcuda.so.1 in the usual places",
                g.nvidia_devices.len()
            ),
            "the CUDA driver library must match the host kernel driver and is injected by the runtime, not the image",
            gpu_fix(rt),
        );
    }
    if let Some(v) = g.cuda_visible_devices.as_deref() {
        let hidden = v.is_empty() || v == "-1" || v.eq_ignore_ascii_case("NoDevFiles");
        if hidden && (!g.nvidia_devices.is_empty() || host_nvidia > 0) {
            out.push(
                "gpu.hidden-by-env",
                Severity::Warning,
                format!("CUDA_VISIBLE_DEVICES={v:?} while GPUs are present"),
                "CUDA sees no device when CUDA_VISIBLE_DEVICES is empty or -1",
                "unset CUDA_VISIBLE_DEVICES or request GPUs from the scheduler (`--gpus`, `--gres=gpu:N`)".into(),
            );
        }
    }
}

/// InfiniBand and RDMA: device files, `rdma_cm`, locked memory and what insists on RDMA.
fn infiniband(env: &Environment, out: &mut Findings) {
    let rt = env.runtime.kind;
    let ib = &env.devices.infiniband;
    if !ib.adapters.is_empty() && ib.uverbs.is_empty() {
        out.push(
            "ib.devices-missing",
            Severity::Error,
            format!(
                "RDMA adapter(s) {} in /sys/class/infiniband but {}",
                adapter_names(env),
                if ib.dev_dir {
                    "no uverbs device in /dev/infiniband"
                } else {
                    "no /dev/infiniband"
                }
            ),
            "verbs, UCX and libfabric open /dev/infiniband/uverbsN; without it MPI falls back to TCP or fails",
            ib_devices_fix(rt),
        );
    }
    if !ib.uverbs.is_empty() && !ib.rdma_cm {
        out.push(
            "ib.rdma-cm-missing",
            Severity::Warning,
            "uverbs device(s) visible but no /dev/infiniband/rdma_cm".into(),
            "RDMA connection manager is needed for RoCE and by UCX/libfabric connection setup",
            ib_devices_fix(rt),
        );
    }
    if !ib.adapters.is_empty() || !ib.uverbs.is_empty() {
        let mut missing: Vec<String> = ib
            .adapters
            .iter()
            .map(|a| a.provider.clone())
            .filter(|prov| {
                // hfi1 and ipath ship as `hfi1verbs.driver`, `ipathverbs.driver`.
                !ib.providers
                    .iter()
                    .any(|x| x == prov || x.strip_suffix("verbs") == Some(prov.as_str()))
            })
            .collect();
        missing.sort();
        missing.dedup();
        if !ib.provider_dir {
            out.push(
                "ib.provider-missing",
                Severity::Error,
                "/etc/libibverbs.d does not exist: no verbs provider drivers in this image".into(),
                "libibverbs finds no driver for the adapter (\"no userspace device-specific driver found\") and lists no devices",
                "install the providers in the image: `apt-get install ibverbs-providers libibverbs1` (Debian/Ubuntu) or `dnf install rdma-core libibverbs` (RHEL)".into(),
            );
        } else if !missing.is_empty() {
            out.push(
                "ib.provider-missing",
                Severity::Error,
                format!(
                    "no provider driver for {} in /etc/libibverbs.d (has: {})",
                    missing
                        .iter()
                        .map(|m| format!("{m}.driver"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    if ib.providers.is_empty() {
                        "none".to_string()
                    } else {
                        ib.providers.join(", ")
                    }
                ),
                "libibverbs skips adapters without a userspace provider (\"no userspace device-specific driver found\")",
                format!(
                    "install the provider in the image: `apt-get install ibverbs-providers` (Debian/Ubuntu) or `dnf install rdma-core libibverbs` (RHEL){}",
                    if missing.iter().any(|m| m == "mlx4") {
                        "; older distributions ship mlx4 as `libmlx4`"
                    } else {
                        ""
                    }
                ),
            );
        }
        let ports: Vec<(&str, u32, &str)> = ib
            .adapters
            .iter()
            .flat_map(|a| {
                a.ports.iter().map(move |p| {
                    (
                        a.name.as_str(),
                        p.number,
                        p.state.as_deref().unwrap_or("unknown"),
                    )
                })
            })
            .collect();
        let down: Vec<String> = ports
            .iter()
            .filter(|(_, _, s)| *s != "ACTIVE")
            .map(|(n, p, s)| format!("{n} port {p}: {s}"))
            .collect();
        if !down.is_empty() {
            let none_active = down.len() == ports.len();
            out.push(
                "ib.port-down",
                if none_active { Severity::Error } else { Severity::Warning },
                down.join("; "),
                if none_active {
                    "no RDMA port is ACTIVE: inter-node traffic cannot use the fabric"
                } else {
                    "some RDMA ports are not ACTIVE: traffic on them fails or is rerouted"
                },
                "check the cable and the subnet manager on the host (`ibstat`, `opensm` running?); \
                 set UCX_NET_DEVICES to an active port meanwhile"
                    .into(),
            );
        }
    }
    let rdma_present = !ib.uverbs.is_empty() || !ib.adapters.is_empty();
    if rdma_present {
        if let Some(ml) = env.resources.memlock {
            if !ml.soft.at_least(MEMLOCK_MIN_BYTES) {
                out.push(
                    "limits.memlock-low",
                    Severity::Warning,
                    format!("locked-memory limit is {}", limit_text(ml.soft, true)),
                    "RDMA registers (pins) communication buffers; a low memlock limit makes \
                     registration fail (\"cannot allocate memory\") or caps performance",
                    memlock_fix(rt),
                );
            }
        }
    }
}

/// Transports: `UCX_TLS`, Open MPI's `btl` and `pml` against the devices there are.
fn transports(env: &Environment, out: &mut Findings) {
    let ib = &env.devices.infiniband;
    let rdma_present = !ib.uverbs.is_empty() || !ib.adapters.is_empty();
    let rt = env.runtime.kind;
    if let Some(tls) = env.mpi.ucx_tls.as_deref() {
        let (shm, rdma) = ucx_tls_classes(tls);
        let mut missing = Vec::new();
        if !shm {
            missing.push("shared memory (sm/shm/cma/posix)");
        }
        if !rdma && rdma_present {
            missing.push("RDMA (rc/ud/dc)");
        }
        if !missing.is_empty() {
            out.push(
                "net.ucx-tls-slow",
                Severity::Warning,
                format!("UCX_TLS={tls} excludes {}", missing.join(" and ")),
                "UCX then moves data over slower transports (tcp), multiplying latency",
                if rdma_present {
                    "unset UCX_TLS, or use UCX_TLS=rc,ud,sm,self (dc for large jobs)".into()
                } else {
                    "unset UCX_TLS, or include sm,self (e.g. UCX_TLS=sm,self,tcp)".into()
                },
            );
        }
    }
    if ib.uverbs.is_empty() {
        if let Some(asked) = rdma_requested(env) {
            let adapters = !ib.adapters.is_empty();
            out.push(
                "net.rdma-requested-absent",
                Severity::Error,
                format!(
                    "{asked}, but this process sees no RDMA device (no /dev/infiniband/uverbs*{})",
                    if adapters {
                        ""
                    } else {
                        ", no adapter in /sys/class/infiniband"
                    }
                ),
                "the transport named cannot open a device: UCX fails to create its endpoints \
                 and MPI_Init aborts (or the transport refuses to start), instead of falling back",
                if adapters {
                    ib_devices_fix(rt)
                } else {
                    format!(
                        "this node has no InfiniBand: leave UCX_TLS unset (or add tcp,sm,self) and \
                         do not force {}=verbs or FI_PROVIDER=verbs; on an InfiniBand node pass \
                         the devices in (`--bind /dev/infiniband` for Apptainer with --contain, \
                         `--device` for Docker/Podman)",
                        hpc_env::TRANSPORT
                    )
                },
            );
        }
    }
    let btl = env.mpi.ompi_mca.get("btl").map(String::as_str);
    let pml = env.mpi.ompi_mca.get("pml").map(String::as_str);
    if let Some(btl) = btl {
        let list: Vec<&str> = btl.split(',').map(str::trim).collect();
        let excluded = btl.starts_with('^');
        let no_shm = if excluded {
            list.iter()
                .any(|x| matches!(x.trim_start_matches('^'), "vader" | "sm"))
        } else {
            !list.iter().any(|x| matches!(*x, "vader" | "sm"))
        };
        let tcp_only =
            !excluded && list.contains(&"tcp") && list.iter().all(|x| matches!(*x, "tcp" | "self"));
        if tcp_only || no_shm {
            out.push(
                "net.ompi-tcp-only",
                Severity::Warning,
                format!(
                    "OMPI_MCA_btl={btl}{}",
                    pml.map(|p| format!(", OMPI_MCA_pml={p}")).unwrap_or_default()
                ),
                "Open MPI is forced onto TCP even between ranks of one node (no vader/sm shared memory)",
                "unset OMPI_MCA_btl, or use OMPI_MCA_btl=self,vader,tcp (Open MPI 5: self,sm,tcp); \
                 with InfiniBand prefer OMPI_MCA_pml=ucx"
                    .into(),
            );
        }
    }
    if pml == Some("ob1")
        && !ib.uverbs.is_empty()
        && btl.is_some_and(|b| !b.contains("openib") && !b.contains("uct"))
    {
        out.push(
            "net.ompi-ob1-with-rdma",
            Severity::Info,
            "OMPI_MCA_pml=ob1 with RDMA devices present".into(),
            "ob1 with these BTLs does not use InfiniBand",
            "use OMPI_MCA_pml=ucx to let Open MPI use the fabric".into(),
        );
    }
}

/// Resources: `/dev/shm`, open files, ranks against CPUs, the CPU quota.
fn resources(env: &Environment, out: &mut Findings) {
    let rt = env.runtime.kind;
    let l = &env.launcher;
    let r = &env.resources;
    if let Some(shm) = r.shm_bytes {
        if shm < SHM_MIN_BYTES {
            out.push(
                "shm.too-small",
                if shm <= 64 << 20 && l.local_size.unwrap_or(0) > 1 {
                    Severity::Error
                } else {
                    Severity::Warning
                },
                format!("/dev/shm is {:.0} MiB", shm as f64 / MIB),
                "MPI shared-memory transports, UCX and NCCL place their segments in /dev/shm; \
                 a small one fails with bus errors or \"no space left\" as ranks grow",
                shm_fix(rt),
            );
        }
    }
    if let Some(nf) = r.nofile {
        if !nf.soft.at_least(NOFILE_MIN) {
            out.push(
                "limits.nofile-low",
                Severity::Info,
                format!("open-files limit is {}", limit_text(nf.soft, false)),
                "every peer connection and shared-memory segment takes a descriptor",
                match rt {
                    RuntimeKind::Docker | RuntimeKind::Podman => {
                        "run with `--ulimit nofile=65536:65536`".into()
                    }
                    _ => {
                        "raise it with `ulimit -n` (hard limit permitting) or in limits.conf".into()
                    }
                },
            );
        }
    }
    if let (Some(local), Some(cpus)) = (l.local_size, r.effective_cpus()) {
        if local as f64 > cpus + 1e-9 {
            out.push(
                "cpu.oversubscribed",
                Severity::Warning,
                format!(
                    "{local} ranks on this node but only {} CPU(s) usable{}",
                    fmt_cpus(cpus),
                    r.cpu_quota
                        .map(|q| format!(" (CPU quota {})", fmt_cpus(q)))
                        .unwrap_or_default()
                ),
                "ranks share cores and busy-polling MPI progress slows everyone down",
                cpu_fix(rt),
            );
        }
    }
    if let (Some(q), Some(allowed)) = (r.cpu_quota, r.allowed_cpus) {
        if q + 1e-9 < f64::from(allowed) {
            out.push(
                "cpu.quota-below-cpus",
                Severity::Info,
                format!("CPU quota {} is below the {allowed} allowed CPUs", fmt_cpus(q)),
                "threads on all allowed CPUs are throttled by the quota: thread pools sized by CPU count oversubscribe",
                "size thread pools to the quota, or match --cpus to --cpuset-cpus".into(),
            );
        }
    }
    if let (Some(local), Some(allowed), Some(online)) =
        (l.local_size, r.allowed_cpus, r.online_cpus)
    {
        if local > 1 && allowed == online && online > 1 {
            out.push(
                "cpu.ranks-unbound",
                Severity::Info,
                format!("{local} ranks on this node and this rank may run on all {online} CPUs"),
                "unbound ranks migrate between cores and lose cache and NUMA locality",
                "bind ranks: `srun --cpu-bind=cores`, `mpirun --bind-to core`, or `hpc run` placement".into(),
            );
        }
    }
}

/// Cross-memory attach (single-copy shared memory between ranks).
fn cma(env: &Environment, out: &mut Findings) {
    let rt = env.runtime.kind;
    let l = &env.launcher;
    if env.cma.works == Some(false) {
        let relevant = l.mpi_libraries.contains(&MpiLibrary::OpenMpi) || !l.kinds.is_empty();
        out.push(
            "cma.blocked",
            if relevant { Severity::Warning } else { Severity::Info },
            format!(
                "process_vm_readv is blocked (ptrace_scope={}, CAP_SYS_PTRACE {}{})",
                env.cma
                    .ptrace_scope
                    .map_or("unknown".to_string(), |s| s.to_string()),
                match env.cma.cap_sys_ptrace {
                    Some(true) => "present",
                    Some(false) => "absent",
                    None => "unknown",
                },
                match env.cma.self_test {
                    Some(false) => ", self-test failed",
                    _ => "",
                }
            ),
            "Open MPI's vader/sm transport uses cross-memory attach for single-copy transfers; \
             blocked, it prints errors or falls back to slower copies, and hpc-collectives' \
             communicators with several ranks on a node refuse to start",
            match rt {
                RuntimeKind::Docker | RuntimeKind::Podman => {
                    "run with `--cap-add SYS_PTRACE`, or set OMPI_MCA_btl_vader_single_copy_mechanism=none".into()
                }
                _ => "set kernel.yama.ptrace_scope=0 or 1 on the host, or OMPI_MCA_btl_vader_single_copy_mechanism=none".into(),
            },
        );
    }
}

/// What in the environment insists on RDMA, if anything: a `UCX_TLS` whose only
/// inter-process transports are RDMA ones, `HPC_TRANSPORT=verbs`, or a libfabric
/// provider that needs verbs.
fn rdma_requested(env: &Environment) -> Option<String> {
    if let Some(tls) = env.mpi.ucx_tls.as_deref() {
        let (shm, rdma) = ucx_tls_classes(tls);
        let tcp = tls
            .split(',')
            .any(|x| x.trim() == "tcp" || x.trim() == "all");
        if rdma && !shm && !tcp && !tls.trim().starts_with('^') {
            return Some(format!("UCX_TLS={tls} names only RDMA transports"));
        }
    }
    if env.mpi.hpc_transport.as_deref() == Some("verbs") {
        return Some(format!("{}=verbs", hpc_env::TRANSPORT));
    }
    if let Some(p) = env.mpi.fi_provider.as_deref() {
        if p.split(['.', ';', ','])
            .any(|x| matches!(x.trim(), "verbs" | "mlx" | "psm3" | "efa"))
        {
            return Some(format!("FI_PROVIDER={p} needs an RDMA device"));
        }
    }
    None
}

/// Classifies a UCX_TLS value: (has shared memory, has RDMA).
pub fn ucx_tls_classes(tls: &str) -> (bool, bool) {
    let shm_names = ["sm", "shm", "cma", "knem", "xpmem", "posix", "sysv", "mm"];
    let rdma_names = [
        "rc", "ud", "dc", "ib", "rc_x", "rc_v", "rc_verbs", "rc_mlx5", "ud_x", "ud_v", "ud_verbs",
        "ud_mlx5", "dc_x", "dc_mlx5",
    ];
    let t = tls.trim();
    if let Some(excl) = t.strip_prefix('^') {
        let ex: Vec<&str> = excl.split(',').map(str::trim).collect();
        let shm = shm_names.iter().any(|n| !ex.contains(n))
            && !ex.contains(&"sm")
            && !ex.contains(&"shm");
        let rdma = !(ex.contains(&"ib")
            || (ex.contains(&"rc") && ex.contains(&"ud") && ex.contains(&"dc")));
        return (shm, rdma);
    }
    let list: Vec<&str> = t.split(',').map(str::trim).collect();
    if list.contains(&"all") {
        return (true, true);
    }
    let shm = list.iter().any(|x| shm_names.contains(x));
    let rdma = list.iter().any(|x| rdma_names.contains(x));
    (shm, rdma)
}

fn adapter_names(env: &Environment) -> String {
    env.devices
        .infiniband
        .adapters
        .iter()
        .map(|a| a.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A limit's value in words: bytes in KiB or MiB when `bytes` (the locked-memory
/// limit), else a plain count (the open-files limit: 1024 files, not "1 KiB").
fn limit_text(v: LimitValue, bytes: bool) -> String {
    match v {
        LimitValue::Unlimited => "unlimited".into(),
        LimitValue::Value(n) if bytes && n >= 1 << 20 => format!("{} MiB", n >> 20),
        LimitValue::Value(n) if bytes && n >= 1 << 10 => format!("{} KiB", n >> 10),
        LimitValue::Value(n) if bytes => format!("{n} bytes"),
        LimitValue::Value(n) => n.to_string(),
    }
}

fn fmt_cpus(c: f64) -> String {
    if (c - c.round()).abs() < 1e-9 {
        format!("{}", c.round() as i64)
    } else {
        format!("{c:.2}")
    }
}

fn pass_env_hint(rt: RuntimeKind) -> &'static str {
    match rt {
        RuntimeKind::Podman | RuntimeKind::Docker => {
            "; run each rank's container with `--network host --ipc host --pid host`, pass the PMIX_*, SLURM_* and OMPI_* variables and bind the slurmd spool directory"
        }
        RuntimeKind::Apptainer | RuntimeKind::Singularity => {
            "; Apptainer passes the PMIx variables through (hybrid model): the image's Open MPI must be built with PMIx"
        }
        _ => "",
    }
}

fn gpu_fix(rt: RuntimeKind) -> String {
    match rt {
        RuntimeKind::Apptainer | RuntimeKind::Singularity => {
            "run the container with `--nv` (`apptainer exec --nv image.sif ...`)".into()
        }
        RuntimeKind::Docker => {
            "run with `--gpus all` (needs the NVIDIA Container Toolkit on the host)".into()
        }
        RuntimeKind::Podman => {
            "run with `--device nvidia.com/gpu=all` (CDI spec from `nvidia-ctk cdi generate`)".into()
        }
        RuntimeKind::Kubernetes => {
            "request GPUs in the pod spec: `resources.limits: nvidia.com/gpu: N` (NVIDIA device plugin)".into()
        }
        RuntimeKind::Enroot => {
            "keep NVIDIA_VISIBLE_DEVICES set (Pyxis: `srun --container-image ... --gpus N`); enroot's 98-nvidia hook injects the GPUs".into()
        }
        RuntimeKind::Charliecloud => {
            "inject the driver with `ch-fromhost --nvidia IMAGE` and make sure /dev/nvidia* is visible".into()
        }
        RuntimeKind::Shifter => "enable the GPU module: `shifter --module=gpu ...`".into(),
        RuntimeKind::Sarus => "use a GPU-enabled Sarus (NVIDIA hook) and set CUDA_VISIBLE_DEVICES".into(),
        RuntimeKind::Lxc => "add the GPU devices to the container config (`lxc config device add c gpu gpu`)".into(),
        RuntimeKind::SystemdNspawn => "bind the devices: `--bind=/dev/nvidia0 --bind=/dev/nvidiactl --bind=/dev/nvidia-uvm`".into(),
        RuntimeKind::Host => "load the NVIDIA kernel driver on the host (`nvidia-smi` should list the GPUs)".into(),
    }
}

fn ib_devices_fix(rt: RuntimeKind) -> String {
    match rt {
        RuntimeKind::Apptainer | RuntimeKind::Singularity => {
            "bind the devices: `apptainer exec --bind /dev/infiniband image.sif ...` (needed with --contain/--containall)".into()
        }
        RuntimeKind::Docker | RuntimeKind::Podman => format!(
            "run with `--device /dev/infiniband/uverbs0 --device /dev/infiniband/rdma_cm --device /dev/infiniband/umad0 --ulimit memlock=-1`{}",
            if rt == RuntimeKind::Podman { " (rootful, or rootless with the devices readable by the user)" } else { "" }
        ),
        RuntimeKind::Kubernetes => {
            "expose the HCA with the RDMA shared device plugin (`rdma/hca` resource) or SR-IOV, and set the IPC_LOCK capability".into()
        }
        RuntimeKind::Charliecloud | RuntimeKind::Enroot | RuntimeKind::Shifter | RuntimeKind::Sarus => {
            "this runtime shares the host /dev: make sure the host has /dev/infiniband (rdma-core, ib_uverbs and rdma_ucm modules loaded)".into()
        }
        RuntimeKind::Lxc => "add the devices: `lxc config device add c ib unix-char path=/dev/infiniband/uverbs0` (and rdma_cm)".into(),
        RuntimeKind::SystemdNspawn => "bind the devices: `--bind=/dev/infiniband`".into(),
        RuntimeKind::Host => "load the ib_uverbs and rdma_ucm kernel modules (`modprobe ib_uverbs rdma_ucm`)".into(),
    }
}

fn memlock_fix(rt: RuntimeKind) -> String {
    match rt {
        RuntimeKind::Docker | RuntimeKind::Podman => "run with `--ulimit memlock=-1:-1`".into(),
        RuntimeKind::Kubernetes => "raise the container runtime's default memlock (containerd `LimitMEMLOCK=infinity`) and grant IPC_LOCK".into(),
        RuntimeKind::Host => "set `* - memlock unlimited` in /etc/security/limits.conf (and PropagateResourceLimits/--propagate=NONE under Slurm)".into(),
        _ => "the container inherits the limit of its parent: set `memlock unlimited` on the host (limits.conf, slurmd's LimitMEMLOCK=infinity)".into(),
    }
}

fn shm_fix(rt: RuntimeKind) -> String {
    match rt {
        RuntimeKind::Docker | RuntimeKind::Podman => {
            "run with `--shm-size=1g` (Docker's default is 64 MiB) or `--ipc=host`".into()
        }
        RuntimeKind::Kubernetes => {
            "mount an `emptyDir: {medium: Memory, sizeLimit: 1Gi}` volume at /dev/shm".into()
        }
        RuntimeKind::Apptainer | RuntimeKind::Singularity => {
            "Apptainer shares the host's /dev/shm unless --contain or a --bind over /dev/shm replaces it: \
             drop that bind, or enlarge the host's (`mount -o remount,size=50% /dev/shm`)".into()
        }
        _ => "enlarge /dev/shm (`mount -o remount,size=1g /dev/shm`) or share the host's".into(),
    }
}

fn cpu_fix(rt: RuntimeKind) -> String {
    match rt {
        RuntimeKind::Docker | RuntimeKind::Podman => {
            "start fewer ranks per node, or give the container more CPUs (`--cpus`, `--cpuset-cpus`)".into()
        }
        RuntimeKind::Kubernetes => "raise the pod's CPU limit or start fewer ranks per pod".into(),
        _ => "start fewer ranks per node (`srun --ntasks-per-node`, `mpirun -npernode`) or request more CPUs".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::ucx_tls_classes;

    /// Hostile pass 20: `SLURM_PROCID=7 SLURM_NTASKS=4` was reported as
    /// "rank 7 of 4" without a finding; it is an error now, and a rank within
    /// the size is none.
    #[test]
    fn a_rank_outside_the_size_is_an_error() {
        use crate::{Environment, Probe};
        let finds = |procid: &str| {
            let env: std::collections::BTreeMap<String, String> = [
                ("SLURM_JOB_ID", "1"),
                ("SLURM_STEP_ID", "0"),
                ("SLURM_MPI_TYPE", "pmix"),
                ("SLURM_PROCID", procid),
                ("SLURM_NTASKS", "4"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            let e = Environment::detect_from(&Probe::new("/nonexistent-root", env));
            e.diagnose()
                .into_iter()
                .filter(|f| f.id == "launch.rank-outside-size")
                .map(|f| f.seen)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            finds("7"),
            ["rank 7 of a job of 4 rank(s): the launcher's variables disagree"]
        );
        assert!(finds("4").len() == 1 && finds("3").is_empty());
    }

    /// Hostile pass 20: `SLURM_PROCID=-5` was read as an unknown rank without
    /// a word. It is a warning naming the variable.
    #[test]
    fn a_launcher_variable_that_is_not_a_number_is_told() {
        use crate::{Environment, Probe};
        let env: std::collections::BTreeMap<String, String> = [
            ("SLURM_JOB_ID", "1"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "-5"),
            ("SLURM_NTASKS", "4"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let e = Environment::detect_from(&Probe::new("/nonexistent-root", env));
        let f: Vec<_> = e
            .diagnose()
            .into_iter()
            .filter(|f| f.id == "launch.not-a-number")
            .collect();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].severity, crate::Severity::Warning);
        assert_eq!(
            f[0].seen,
            "SLURM_PROCID=-5 is not a number: it was read as unknown"
        );
        // Neighbours: the node's number and the tasks per node (the node's
        // count was the first node's for a node number not a number).
        for (k, v, seen) in [
            ("SLURM_NODEID", "zz", "SLURM_NODEID=zz is not a number"),
            (
                "SLURM_TASKS_PER_NODE",
                "4(x-1)",
                "SLURM_TASKS_PER_NODE=4(x-1) is not a list of counts (4(x2),3)",
            ),
        ] {
            let mut env: std::collections::BTreeMap<String, String> = [
                ("SLURM_JOB_ID", "1"),
                ("SLURM_STEP_ID", "0"),
                ("SLURM_PROCID", "1"),
                ("SLURM_NTASKS", "4"),
                ("SLURM_TASKS_PER_NODE", "2(x2)"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            env.insert(k.into(), v.into());
            let e = Environment::detect_from(&Probe::new("/nonexistent-root", env));
            assert_eq!(e.launcher.local_size, None, "{k}");
            let f: Vec<_> = e
                .diagnose()
                .into_iter()
                .filter(|f| f.id == "launch.not-a-number")
                .map(|f| f.seen)
                .collect();
            assert!(f.len() == 1 && f[0].starts_with(seen), "{f:?}");
        }
    }

    #[test]
    fn ucx_tls() {
        assert_eq!(ucx_tls_classes("tcp"), (false, false));
        assert_eq!(ucx_tls_classes("tcp,self"), (false, false));
        assert_eq!(ucx_tls_classes("rc,sm,self"), (true, true));
        assert_eq!(ucx_tls_classes("all"), (true, true));
        assert_eq!(ucx_tls_classes("^ib"), (true, false));
        assert_eq!(ucx_tls_classes("^sm"), (false, true));
        assert_eq!(ucx_tls_classes("ud_x,shm"), (true, true));
    }
}
