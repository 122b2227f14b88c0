//! Every runtime and every finding, from fixture trees under `tests/fixtures/<name>/`
//! (`root/` is the file system, `env` the environment).

use hpc_container::{Environment, Finding, Probe, Report, RuntimeKind, Severity, Strength};
use std::path::PathBuf;

fn fixture(name: &str) -> (Environment, Vec<Finding>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let probe = Probe::from_env_file(dir.join("root"), &dir.join("env")).expect("fixture env");
    let env = Environment::detect_from(&probe);
    let findings = env.diagnose();
    (env, findings)
}

fn ids(f: &[Finding]) -> Vec<(&'static str, Severity)> {
    f.iter().map(|f| (f.id, f.severity)).collect()
}

fn finding<'a>(f: &'a [Finding], id: &str) -> &'a Finding {
    f.iter()
        .find(|x| x.id == id)
        .unwrap_or_else(|| panic!("no finding {id} in {:?}", ids(f)))
}

fn has_evidence(e: &Environment, source: &str) -> bool {
    e.runtime.evidence.iter().any(|x| x.source == source)
}

fn evidence_sources(e: &Environment) -> Vec<&str> {
    e.runtime
        .evidence
        .iter()
        .map(|x| x.source.as_str())
        .collect()
}

#[test]
fn docker_real_capture() {
    let (e, f) = fixture("docker");
    assert_eq!(e.runtime.kind, RuntimeKind::Docker);
    assert_eq!(e.runtime.confidence, Some(Strength::Strong));
    assert!(
        has_evidence(&e, "/.dockerenv"),
        "{:?}",
        evidence_sources(&e)
    );
    assert!(has_evidence(&e, "mountinfo"));
    assert!(e.runtime.details["id"].starts_with("af6cadb9") || e.runtime.details["id"].len() == 64);
    assert!(e.runtime.outer.is_empty());
    let r = &e.resources;
    assert_eq!(r.cgroup_version, Some(1));
    assert_eq!(r.allowed_cpus, Some(2));
    assert_eq!(r.shm_bytes, Some(64 << 20));
    assert_eq!(r.memory_limit_bytes, None);
    assert_eq!(r.cpu_quota, None);
    assert_eq!(e.cma.cap_sys_ptrace, Some(false));
    assert_eq!(ids(&f), vec![("shm.too-small", Severity::Warning)]);
    assert!(finding(&f, "shm.too-small").fix.contains("--shm-size"));
}

#[test]
fn podman_real_capture() {
    let (e, f) = fixture("podman");
    assert_eq!(e.runtime.kind, RuntimeKind::Podman);
    let src = evidence_sources(&e);
    assert!(src.contains(&"env:container"), "{src:?}");
    assert!(src.contains(&"/run/.containerenv"));
    assert!(src.contains(&"mountinfo"));
    assert_eq!(e.runtime.details["id"].len(), 64);
    assert!(
        e.runtime.hints.is_empty(),
        "libpod cgroup is folded into Podman"
    );
    assert_eq!(e.resources.shm_bytes, Some(64 << 20));
    assert_eq!(e.resources.allowed_cpus, Some(2));
    assert_eq!(ids(&f), vec![("shm.too-small", Severity::Warning)]);
    assert!(finding(&f, "shm.too-small").fix.contains("--shm-size"));
}

#[test]
fn charliecloud_real_capture() {
    let (e, f) = fixture("charliecloud");
    assert_eq!(e.runtime.kind, RuntimeKind::Charliecloud);
    assert!(has_evidence(&e, "env:CH_RUNNING"));
    assert!(e.runtime.outer.is_empty());
    assert!(
        f.iter().all(|x| x.severity == Severity::Info),
        "{:?}",
        ids(&f)
    );
}

#[test]
fn apptainer_without_nv() {
    let (e, f) = fixture("apptainer");
    assert_eq!(e.runtime.kind, RuntimeKind::Apptainer);
    assert!(has_evidence(&e, "/.singularity.d"));
    assert!(has_evidence(&e, "env:APPTAINER_CONTAINER"));
    assert_eq!(e.runtime.details["built_with"], "1.3.4");
    assert_eq!(e.runtime.details["image"], "/home/alice/lammps.sif");
    assert!(
        e.runtime.outer.is_empty(),
        "SINGULARITY_* is Apptainer's compat alias"
    );
    assert_eq!(e.devices.gpu.pci.len(), 1);
    let g = finding(&f, "gpu.not-visible");
    assert_eq!(g.severity, Severity::Error);
    assert!(g.fix.contains("--nv"));
    assert!(g.seen.contains("0000:3b:00.0"));
    assert_eq!(Report::new("x", e).exit_code, 2);
}

/// Captured inside a real `srun --mpi=pmix apptainer exec hpc.sif` (Apptainer 1.4.5,
/// Slurm 22.05 with PMIx 4.2): the image, launcher and PMIx server directory.
#[test]
fn apptainer_under_srun_real_capture() {
    let (e, f) = fixture("apptainer-srun");
    assert_eq!(e.runtime.kind, RuntimeKind::Apptainer);
    assert_eq!(e.runtime.confidence, Some(Strength::Strong));
    for source in ["/.singularity.d", "env:APPTAINER_CONTAINER", "mountinfo"] {
        assert!(has_evidence(&e, source), "{:?}", evidence_sources(&e));
    }
    assert_eq!(e.runtime.details["built_with"], "1.4.5");
    assert_eq!(e.runtime.details["image"], "/scratch/alice/images/hpc.sif");
    assert!(e.runtime.outer.is_empty());
    let l = &e.launcher;
    assert!(l.kinds.contains(&hpc_container::LauncherKind::Slurm));
    assert!(l.kinds.contains(&hpc_container::LauncherKind::Pmix));
    assert_eq!(
        l.slurm.as_ref().and_then(|s| s.mpi_type.as_deref()),
        Some("pmix")
    );
    assert_eq!(
        l.pmix_server_tmpdir.as_deref(),
        Some("/var/spool/slurmd/pmix.11.0/")
    );
    assert_eq!(l.pmix_server_tmpdir_visible, Some(true));
    assert!(
        !f.iter().any(|x| x.severity == Severity::Error),
        "{:?}",
        ids(&f)
    );
}

/// The same step with `apptainer exec --contain`: /tmp and the slurmd spool are no
/// longer the host's, so PMIx cannot open its server's data store.
#[test]
fn apptainer_contain_hides_the_pmix_directory() {
    let (e, f) = fixture("apptainer-contain-srun");
    assert_eq!(e.launcher.pmix_server_tmpdir_visible, Some(false));
    let x = finding(&f, "launch.pmix-dir-hidden");
    assert_eq!(x.severity, Severity::Error);
    assert!(
        x.seen.contains("/var/spool/slurmd/pmix.11.0/"),
        "{}",
        x.seen
    );
    assert!(x.fix.contains("--contain"), "{}", x.fix);
    assert!(x.fix.contains("--bind /var/spool/slurmd"), "{}", x.fix);
}

/// A `cargo xtask image --gpu` image (label io.hpc-rs.gpu=true) on a GPU node:
/// Apptainer shares /dev, so the device nodes are there, but without `--nv` the
/// driver libraries are not.
#[test]
fn gpu_image_in_apptainer_without_nv() {
    let (e, f) = fixture("apptainer-gpu-no-nv");
    assert!(e.devices.gpu.image_wants_gpu);
    assert_eq!(e.devices.gpu.apptainer_nv, Some(false));
    let x = finding(&f, "gpu.apptainer-without-nv");
    assert_eq!(x.severity, Severity::Error);
    assert!(x.fix.contains("--nv"), "{}", x.fix);
    assert!(x.seen.contains("1 NVIDIA GPU"), "{}", x.seen);
    assert!(!f.iter().any(|x| x.id == "gpu.driver-libs-missing"));

    let (e, f) = fixture("apptainer-gpu-nv");
    assert_eq!(e.devices.gpu.apptainer_nv, Some(true));
    assert!(e.devices.gpu.libcuda);
    assert!(!f.iter().any(|x| x.id.starts_with("gpu.")), "{:?}", ids(&f));
    // A CPU image in the same place says nothing about GPUs.
    let (e, f) = fixture("apptainer-srun");
    assert!(!e.devices.gpu.image_wants_gpu);
    assert!(!f.iter().any(|x| x.id.starts_with("gpu.")));
}

#[test]
fn singularity_version_from_env() {
    let (e, f) = fixture("singularity");
    assert_eq!(e.runtime.kind, RuntimeKind::Singularity);
    assert_eq!(e.runtime.version.as_deref(), Some("3.8.7"));
    assert!(has_evidence(&e, "env:SINGULARITY_CONTAINER"));
    assert!(has_evidence(&e, "/.singularity.d"));
    assert!(f.is_empty(), "{:?}", ids(&f));
}

#[test]
fn kubernetes_pod_cgroup_v2() {
    let (e, f) = fixture("kubernetes");
    assert_eq!(e.runtime.kind, RuntimeKind::Kubernetes);
    let src = evidence_sources(&e);
    assert!(src.contains(&"env:KUBERNETES_SERVICE_HOST"), "{src:?}");
    assert!(src.contains(&"/var/run/secrets/kubernetes.io"));
    assert!(src.contains(&"mountinfo"));
    assert_eq!(e.runtime.details["namespace"], "hpc-jobs");
    assert_eq!(
        e.runtime.details["pod_uid"],
        "6f1c2d2e-8a44-4b7e-9a53-0e4b2c1d9f10"
    );
    assert_eq!(e.resources.cgroup_version, Some(2));
    assert_eq!(e.resources.cpu_quota, Some(2.0));
    assert_eq!(e.resources.memory_limit_bytes, Some(4 << 30));
    assert_eq!(e.resources.effective_cpus(), Some(2.0));
    assert_eq!(ids(&f), vec![("cpu.quota-below-cpus", Severity::Info)]);
}

#[test]
fn podman_nested_in_kubernetes() {
    let (e, f) = fixture("podman-in-kubernetes");
    assert_eq!(e.runtime.kind, RuntimeKind::Podman);
    assert_eq!(e.runtime.version.as_deref(), Some("4.9.4"));
    assert_eq!(e.runtime.details["rootless"], "1");
    assert_eq!(e.runtime.details["name"], "inner");
    let outer: Vec<_> = e.runtime.outer.iter().map(|d| d.kind).collect();
    assert_eq!(outer, vec![RuntimeKind::Kubernetes]);
    assert!(e.runtime.has_layer(RuntimeKind::Kubernetes));
    assert!(f.is_empty(), "{:?}", ids(&f));
}

#[test]
fn apptainer_nested_in_podman_inherits_env() {
    let (e, _) = fixture("apptainer-in-podman");
    assert_eq!(e.runtime.kind, RuntimeKind::Apptainer);
    let outer: Vec<_> = e.runtime.outer.iter().map(|d| d.kind).collect();
    assert_eq!(outer, vec![RuntimeKind::Podman]);
    assert_eq!(e.runtime.outer[0].evidence[0].source, "env:container");
}

#[test]
fn enroot_under_slurm_pmix_healthy_infiniband() {
    let (e, f) = fixture("enroot");
    assert_eq!(e.runtime.kind, RuntimeKind::Enroot);
    let src = evidence_sources(&e);
    assert!(src.contains(&"mountinfo"), "{src:?}");
    assert!(src.contains(&"/etc/rc"));
    assert!(src.contains(&"env:ENROOT_ROOTFS"));
    let ib = &e.devices.infiniband;
    assert_eq!(ib.adapters[0].name, "mlx5_0");
    assert!(ib.adapters[0].ports[0].is_active());
    assert_eq!(ib.providers, vec!["mlx5"]);
    assert_eq!(e.launcher.local_size, Some(8));
    assert_eq!(e.launcher.rank, Some(3));
    assert_eq!(e.resources.allowed_cpus, Some(8));
    assert!(f.is_empty(), "{:?}", ids(&f));
    assert_eq!(Report::new("x", e).exit_code, 0);
}

#[test]
fn shifter_sarus_lxc_nspawn() {
    let (e, _) = fixture("shifter");
    assert_eq!(e.runtime.kind, RuntimeKind::Shifter);
    assert!(has_evidence(&e, "env:SHIFTER_RUNTIME"));
    assert!(has_evidence(&e, "/etc/shifter"));
    assert_eq!(e.runtime.details["image"], "docker:nersc/lammps:2023");

    let (e, _) = fixture("sarus");
    assert_eq!(e.runtime.kind, RuntimeKind::Sarus);
    assert!(has_evidence(&e, "mountinfo"));

    let (e, _) = fixture("lxc");
    assert_eq!(e.runtime.kind, RuntimeKind::Lxc);
    let src = evidence_sources(&e);
    assert!(src.contains(&"/proc/1/environ"), "{src:?}");
    assert!(src.contains(&"mountinfo"));

    let (e, _) = fixture("systemd-nspawn");
    assert_eq!(e.runtime.kind, RuntimeKind::SystemdNspawn);
    let src = evidence_sources(&e);
    assert!(src.contains(&"/run/systemd/container"), "{src:?}");
    assert!(src.contains(&"env:container"));
}

#[test]
fn bare_metal_and_vm() {
    let (e, f) = fixture("bare-metal");
    assert_eq!(e.runtime.kind, RuntimeKind::Host);
    assert!(e.runtime.evidence.is_empty());
    assert!(e.runtime.hints.is_empty());
    assert_eq!(e.runtime.virtualization, None);
    assert_eq!(e.cma.works, Some(true));
    assert!(f.is_empty(), "{:?}", ids(&f));

    let (e, _) = fixture("vm");
    assert_eq!(e.runtime.kind, RuntimeKind::Host);
    assert_eq!(e.runtime.virtualization.as_deref(), Some("qemu"));
}

#[test]
fn docker_infiniband_missing() {
    let (e, f) = fixture("docker-ib-missing");
    assert_eq!(e.runtime.kind, RuntimeKind::Docker);
    assert_eq!(
        ids(&f),
        vec![
            ("ib.devices-missing", Severity::Error),
            ("ib.provider-missing", Severity::Error),
            ("limits.memlock-low", Severity::Warning),
        ]
    );
    let d = finding(&f, "ib.devices-missing");
    assert!(d.fix.contains("--device /dev/infiniband/uverbs0"));
    assert!(d.fix.contains("--ulimit memlock=-1"));
    let p = finding(&f, "ib.provider-missing");
    assert!(p.seen.contains("mlx4.driver"), "{}", p.seen);
    assert!(p.fix.contains("ibverbs-providers"));
    assert!(p.fix.contains("rdma-core"));
    assert!(finding(&f, "limits.memlock-low").seen.contains("64 KiB"));
}

#[test]
fn podman_port_down_no_rdma_core() {
    let (e, f) = fixture("podman-ib-port-down");
    assert_eq!(e.runtime.kind, RuntimeKind::Podman);
    assert_eq!(
        ids(&f),
        vec![
            ("ib.port-down", Severity::Error),
            ("ib.provider-missing", Severity::Error),
            ("ib.rdma-cm-missing", Severity::Warning),
        ]
    );
    assert!(finding(&f, "ib.port-down")
        .seen
        .contains("mlx5_0 port 1: DOWN"));
    assert!(finding(&f, "ib.rdma-cm-missing").fix.contains("rdma_cm"));
}

#[test]
fn slurm_without_pmix_and_oversubscribed() {
    let (e, f) = fixture("slurm-no-pmix");
    assert_eq!(e.runtime.kind, RuntimeKind::Host);
    assert_eq!(e.launcher.local_size, Some(8));
    assert_eq!(
        ids(&f),
        vec![
            ("launch.slurm-no-pmix", Severity::Error),
            ("cpu.oversubscribed", Severity::Warning),
            ("cpu.ranks-unbound", Severity::Info),
        ]
    );
    assert!(finding(&f, "launch.slurm-no-pmix")
        .fix
        .contains("srun --mpi=pmix"));
    assert!(finding(&f, "cpu.oversubscribed").seen.contains("8 ranks"));
}

#[test]
fn gpus_missing_per_runtime() {
    let (e, f) = fixture("docker-gpu-missing");
    assert_eq!(e.runtime.kind, RuntimeKind::Docker);
    let g = finding(&f, "gpu.not-visible");
    assert_eq!(g.severity, Severity::Error);
    assert!(g.fix.contains("--gpus all"));

    let (e, f) = fixture("podman-gpu-missing");
    assert_eq!(e.runtime.kind, RuntimeKind::Podman);
    assert_eq!(e.runtime.version.as_deref(), Some("4.3.1"));
    assert!(finding(&f, "gpu.not-visible")
        .fix
        .contains("--device nvidia.com/gpu=all"));

    let (e, f) = fixture("docker-gpu");
    assert_eq!(e.devices.gpu.nvidia_devices, vec!["nvidia0"]);
    assert!(e
        .devices
        .gpu
        .driver_version
        .as_deref()
        .unwrap_or("")
        .contains("550.54.15"));
    assert!(e.devices.gpu.libcuda);
    assert!(f.is_empty(), "{:?}", ids(&f));
}

#[test]
fn slow_transports_and_cma() {
    let (e, f) = fixture("slow-transports");
    assert_eq!(e.launcher.local_size, Some(4));
    assert_eq!(e.cma.ptrace_scope, Some(2));
    assert_eq!(e.cma.works, Some(false));
    assert_eq!(
        ids(&f),
        vec![
            ("cma.blocked", Severity::Warning),
            ("net.ompi-tcp-only", Severity::Warning),
            ("net.ucx-tls-slow", Severity::Warning),
            ("cpu.ranks-unbound", Severity::Info),
        ]
    );
    let c = finding(&f, "cma.blocked");
    assert!(c.fix.contains("--cap-add SYS_PTRACE"));
    assert!(c
        .fix
        .contains("OMPI_MCA_btl_vader_single_copy_mechanism=none"));
    assert_eq!(Report::new("x", e).exit_code, 1);
}

#[test]
fn garbage_reads_as_unknown() {
    let (e, _) = fixture("garbage");
    assert_eq!(e.runtime.kind, RuntimeKind::Host);
    assert_eq!(e.resources.allowed_cpus, None);
    assert_eq!(e.resources.online_cpus, None);
    assert_eq!(e.resources.memlock, None);
    assert_eq!(e.resources.cpu_quota, None);
    assert_eq!(e.cma.cap_sys_ptrace, None);
    let text = Report::new("garbage", e).to_text(false);
    assert!(text.contains("unknown"));
}

#[test]
fn missing_root_is_all_unknown_and_says_so() {
    let probe = Probe::new("/nonexistent/hpc-container-root", Default::default());
    let e = Environment::detect_from(&probe);
    assert_eq!(e.runtime.kind, RuntimeKind::Host);
    assert!(e.coverage.nothing_to_judge());
    let ids: Vec<&str> = e.diagnose().iter().map(|f| f.id).collect();
    assert_eq!(ids, vec!["probe.incomplete"]);
    let report = Report::new("/nonexistent", e);
    assert_eq!(report.exit_code, 2);
    let text = report.to_text(false);
    assert!(text.contains("too little to judge"), "{text}");
    assert!(!text.contains("no problems found"), "{text}");
    assert!(
        text.contains("cgroup: unknown") && !text.contains("vunknown"),
        "{text}"
    );
}

/// A scratch tree for one test.
fn scratch(tag: &str) -> hpc_test_support::TmpDir {
    let d = hpc_test_support::TmpDir::new("hpc-container", tag);
    std::fs::create_dir_all(d.join("proc/self")).unwrap();
    d
}

#[test]
fn links_in_a_captured_tree_resolve_inside_it() {
    use std::os::unix::fs::symlink;
    let root = scratch("links");
    // An absolute link to /proc/self/mountinfo must not reach the host's file (this
    // test process may well run in a container the host file would reveal).
    symlink("/proc/self/mountinfo", root.join("proc/self/mountinfo")).unwrap();
    // An absolute link that means the tree's own file, and a relative one climbing
    // above the root.
    std::fs::create_dir_all(root.join("captured")).unwrap();
    std::fs::write(root.join("captured/status"), "Cpus_allowed_list:\t0-3\n").unwrap();
    symlink("/captured/status", root.join("proc/self/status")).unwrap();
    symlink(
        "../../../../../../captured/status",
        root.join("proc/self/limits"),
    )
    .unwrap();
    std::fs::write(root.join("proc/self/cgroup"), "0::/\n").unwrap();
    let probe = Probe::new(&root, Default::default());
    assert_eq!(
        probe.read("/proc/self/mountinfo"),
        None,
        "a link loop inside the tree"
    );
    assert!(probe.read("/proc/self/status").unwrap().contains("0-3"));
    assert!(probe.read("/proc/self/limits").unwrap().contains("0-3"));
    let e = Environment::detect_from(&probe);
    assert_eq!(e.runtime.kind, RuntimeKind::Host, "{:?}", e.runtime);
    assert_eq!(e.resources.allowed_cpus, Some(4));
    assert!(e
        .coverage
        .missing
        .contains(&"/proc/self/mountinfo".to_string()));
    let f = e.diagnose();
    let inc = f.iter().find(|f| f.id == "probe.incomplete").unwrap();
    assert_eq!(inc.severity, Severity::Warning);
    assert!(inc.seen.contains("/proc/self/mountinfo"), "{}", inc.seen);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_fifo_in_a_captured_tree_is_not_opened() {
    let root = scratch("fifo");
    for f in ["status", "mountinfo"] {
        let c = std::ffi::CString::new(root.join("proc/self").join(f).to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path we pass.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }
    let probe = Probe::new(&root, Default::default());
    let t = std::time::Instant::now();
    assert_eq!(probe.read("/proc/self/status"), None);
    let e = Environment::detect_from(&probe);
    assert!(t.elapsed() < std::time::Duration::from_secs(2));
    assert!(e.coverage.nothing_to_judge());
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn json_schema_is_stable() {
    let (e, _) = fixture("docker-ib-missing");
    let v: serde_json::Value = serde_json::from_str(&Report::new("/fx", e).to_json()).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["status"], "error");
    assert_eq!(v["exit_code"], 2);
    assert_eq!(v["summary"]["errors"], 2);
    assert_eq!(v["environment"]["runtime"]["kind"], "docker");
    assert_eq!(
        v["environment"]["runtime"]["evidence"][0]["strength"],
        "strong"
    );
    assert_eq!(v["environment"]["resources"]["memlock"]["soft"], 65536);
    assert_eq!(v["environment"]["resources"]["nofile"]["soft"], 65536);
    assert_eq!(v["findings"][0]["id"], "ib.devices-missing");
    assert_eq!(v["findings"][0]["severity"], "error");
    for key in ["seen", "why", "fix"] {
        assert!(v["findings"][0][key].is_string());
    }
    let (e, _) = fixture("bare-metal");
    let v: serde_json::Value = serde_json::from_str(&Report::new("/", e).to_json()).unwrap();
    assert_eq!(v["environment"]["runtime"]["kind"], "none");
    assert_eq!(
        v["environment"]["resources"]["memlock"]["soft"],
        "unlimited"
    );
}

#[test]
fn text_report_colours_only_when_asked() {
    let (e, _) = fixture("docker-gpu-missing");
    let r = Report::new("/", e);
    assert!(!r.to_text(false).contains('\x1b'));
    assert!(r.to_text(true).contains("\x1b[1;31merror"));
    assert!(r.to_text(false).contains("[gpu.not-visible]"));
}

/// Values of the probed system (a captured environment here) reach the text report
/// with their control characters escaped: an escape sequence would clear or
/// recolour the reader's terminal, a newline would forge a line of the report.
#[test]
fn control_characters_of_the_probed_system_are_escaped_in_the_text() {
    let dir = hpc_test_support::TmpDir::unmade("hpc-container", "ctrl");
    std::fs::create_dir_all(dir.join("root")).unwrap();
    let env = dir.join("env");
    std::fs::write(
        &env,
        b"APPTAINER_NAME=a\x1b[2J\nerror [forged] line\0SLURM_JOB_ID=1\x1b]0;title\x07\0",
    )
    .unwrap();
    let probe = Probe::from_env_file(dir.join("root"), &env).unwrap();
    let text = Report::new("root", Environment::detect_from(&probe)).to_text(false);
    assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text}");
    assert!(text.contains("a\\u{1b}[2J\\nerror [forged] line"), "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with("error [forged]")),
        "{text}"
    );
    assert!(text.contains("Slurm job 1\\u{1b}]0;title\\u{7}"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A value of the probed system holding a bidirectional control (a
/// right-to-left override, an isolate) or a line separator is escaped in the
/// text report as a control character is: written as it is, a terminal
/// showed the rest of the line reordered (a job id that reads as another).
#[test]
fn bidirectional_controls_of_the_probed_system_are_escaped_in_the_text() {
    let dir = hpc_test_support::TmpDir::new("hpc-container", "bidi");
    let mut env = std::collections::BTreeMap::new();
    env.insert(
        "SLURM_JOB_ID".to_string(),
        "12\u{202e}34\u{2066}5\u{2028}6".to_string(),
    );
    let probe = Probe::new(&dir, env);
    let text = Report::new("root", Environment::detect_from(&probe)).to_text(false);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        !text.contains(['\u{202e}', '\u{2066}', '\u{2028}']),
        "{text:?}"
    );
    assert!(
        text.contains("Slurm job 12\\u{202e}34\\u{2066}5\\u{2028}6"),
        "{text}"
    );
}

/// A captured tree whose root is named with a line break, a terminal's
/// escape and a right-to-left override, read by the probe: its debug log
/// names the file it skips quoted and escaped (it wrote `%path.display()`,
/// the line break and the escape raw, as pass 18's C36 found in four other
/// crates).
#[test]
fn the_probes_log_shows_an_odd_root_quoted_escaped() {
    let dir = hpc_test_support::TmpDir::unmade("hpc-container", "oddlog");
    let root = dir.join("r\n\u{1b}[2J\u{202e}");
    std::fs::create_dir_all(root.join("proc/self/cgroup")).unwrap();
    let probe = Probe::new(&root, Default::default());
    let (read, text) =
        hpc_test_support::log::logged_at(tracing::Level::DEBUG, || probe.read("/proc/self/cgroup"));
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(read, None);
    assert!(text.contains("not a regular file"), "{text:?}");
    assert!(
        text.contains(r"r\n\u{1b}[2J\u{202e}/proc/self/cgroup"),
        "{text:?}"
    );
    assert!(!text.contains(['\u{1b}', '\u{202e}']), "{text:?}");
    assert_eq!(text.lines().count(), 1, "{text:?}");
}

/// A value of the probed environment of any length is cut in the text report,
/// saying how much more it held (a `CUDA_VISIBLE_DEVICES` of 200,000
/// characters, a Slurm job id of 100,000, were lines of the report as long).
#[test]
fn long_values_of_the_probed_system_are_cut_in_the_text() {
    let dir = hpc_test_support::TmpDir::new("hpc-container", "long");
    let mut env = std::collections::BTreeMap::new();
    env.insert("CUDA_VISIBLE_DEVICES".to_string(), "0,".repeat(100_000));
    env.insert("SLURM_JOB_ID".to_string(), "x".repeat(100_000));
    let probe = Probe::new(&dir, env);
    let text = Report::new("root", Environment::detect_from(&probe)).to_text(false);
    let longest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(longest < 1100, "a line of {longest} characters");
    assert!(text.contains("CUDA_VISIBLE_DEVICES=0,0,") && text.contains("more characters)"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Live detection on this machine stays fast (generous bound for debug builds).
#[test]
fn live_detect_and_diagnose_is_fast() {
    let start = std::time::Instant::now();
    let n = 10;
    for _ in 0..n {
        let e = Environment::detect();
        let _ = e.diagnose();
    }
    let each = start.elapsed() / n;
    assert!(each.as_millis() < 500, "detect+diagnose took {each:?}");
}

/// A transport that can only run over RDMA, asked for where no RDMA device is: the
/// UCX_TLS of an image built for InfiniBand, `HPC_TRANSPORT=verbs`, a verbs provider.
#[test]
fn rdma_transport_asked_for_where_there_is_none() {
    use std::collections::BTreeMap;
    for (key, value, error) in [
        ("UCX_TLS", "rc", true),
        ("UCX_TLS", "rc_x,ud_x", true),
        ("UCX_TLS", "rc,sm,self", false),
        ("UCX_TLS", "tcp,self", false),
        ("UCX_TLS", "^tcp", false),
        ("HPC_TRANSPORT", "verbs", true),
        ("HPC_TRANSPORT", "tcp", false),
        ("FI_PROVIDER", "verbs;ofi_rxm", true),
        ("FI_PROVIDER", "tcp", false),
    ] {
        let env: BTreeMap<String, String> = [(key.to_string(), value.to_string())].into();
        let f = Environment::detect_from(&Probe::new("/nonexistent-root", env)).diagnose();
        let hit = f.iter().find(|x| x.id == "net.rdma-requested-absent");
        assert_eq!(hit.is_some(), error, "{key}={value}: {:?}", ids(&f));
        if let Some(x) = hit {
            assert_eq!(x.severity, Severity::Error);
            assert!(x.seen.contains(value), "{}", x.seen);
            assert!(x.fix.contains("/dev/infiniband"), "{}", x.fix);
        }
    }
    // With the adapter visible in sysfs but its devices not passed in, the fix names
    // the runtime's way of passing them.
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/docker-ib-missing");
    let mut probe = Probe::from_env_file(dir.join("root"), &dir.join("env")).unwrap();
    probe.env.insert("UCX_TLS".into(), "rc".into());
    let f = Environment::detect_from(&probe).diagnose();
    let x = finding(&f, "net.rdma-requested-absent");
    assert!(
        x.fix.contains("--device /dev/infiniband/uverbs0"),
        "{}",
        x.fix
    );
    assert!(f.iter().any(|x| x.id == "ib.devices-missing"));
}
