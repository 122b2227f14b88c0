//! Container runtime detection.
//!
//! Every runtime is recognised by markers of three strengths:
//!
//! * **strong**: files the runtime itself creates for the container
//!   (`/.dockerenv`, `/run/.containerenv`, `/.singularity.d`,
//!   `/run/systemd/container`), mount-table entries that point into the
//!   runtime's storage (`/var/lib/docker/containers/...`), and variables the
//!   runtime sets (`container=podman`, `APPTAINER_CONTAINER`, `CH_RUNNING`,
//!   `KUBERNETES_SERVICE_HOST`);
//! * **medium**: conventions that usually, but not always, come from the runtime
//!   (Enroot's `/etc/rc` + `/etc/fstab` + `/etc/environment` triple);
//! * **weak**: `/proc/1/cgroup` paths, which read `/` under cgroup namespaces
//!   and are the host's under Apptainer.
//!
//! Containers nest (Podman in a Kubernetes pod, Apptainer started inside a
//! Docker container that passes its variables on), so all runtimes with at
//! least medium evidence are kept and ordered by how deep they usually sit:
//! HPC runtimes (Apptainer, Charliecloud, Enroot, Sarus, Shifter) inside
//! engine containers (Docker, Podman), those inside system containers (LXC,
//! systemd-nspawn), those inside a Kubernetes pod. The deepest is the runtime
//! the process runs in; the others are reported as outer layers.

use crate::parse::{self, MountEntry};
use crate::probe::Probe;
use serde::Serialize;
use std::collections::BTreeMap;

/// A container runtime (or none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuntimeKind {
    /// Apptainer (the Linux Foundation fork of Singularity).
    Apptainer,
    /// Singularity / SingularityCE.
    Singularity,
    /// NVIDIA Enroot (also under Slurm's Pyxis plugin).
    Enroot,
    /// Charliecloud (`ch-run`).
    Charliecloud,
    /// NERSC Shifter.
    Shifter,
    /// CSCS Sarus.
    Sarus,
    /// Docker Engine.
    Docker,
    /// Podman.
    Podman,
    /// LXC / LXD / Incus system container.
    Lxc,
    /// systemd-nspawn.
    SystemdNspawn,
    /// A Kubernetes pod (containerd, CRI-O, ...).
    Kubernetes,
    /// No container: bare metal or a virtual machine (`"none"` in JSON).
    #[serde(rename = "none")]
    Host,
}

impl RuntimeKind {
    /// Human-readable name.
    pub fn name(self) -> &'static str {
        match self {
            RuntimeKind::Apptainer => "Apptainer",
            RuntimeKind::Singularity => "Singularity",
            RuntimeKind::Enroot => "Enroot",
            RuntimeKind::Charliecloud => "Charliecloud",
            RuntimeKind::Shifter => "Shifter",
            RuntimeKind::Sarus => "Sarus",
            RuntimeKind::Docker => "Docker",
            RuntimeKind::Podman => "Podman",
            RuntimeKind::Lxc => "LXC",
            RuntimeKind::SystemdNspawn => "systemd-nspawn",
            RuntimeKind::Kubernetes => "Kubernetes",
            RuntimeKind::Host => "none (bare metal or VM)",
        }
    }

    /// Nesting depth: higher sits further inside.
    fn depth(self) -> u8 {
        match self {
            RuntimeKind::Kubernetes => 1,
            RuntimeKind::Lxc | RuntimeKind::SystemdNspawn => 2,
            RuntimeKind::Docker | RuntimeKind::Podman => 3,
            RuntimeKind::Sarus | RuntimeKind::Shifter | RuntimeKind::Enroot => 4,
            RuntimeKind::Charliecloud => 5,
            RuntimeKind::Apptainer | RuntimeKind::Singularity => 6,
            RuntimeKind::Host => 0,
        }
    }
}

/// How much a marker proves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Strength {
    /// A hint only (`/proc/1/cgroup` paths).
    Weak,
    /// Usually the runtime's doing.
    Medium,
    /// Created or set by the runtime itself.
    Strong,
}

/// One marker that was seen.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    /// Where it was seen: a path (`/.dockerenv`), `env:NAME` or `mountinfo`.
    pub source: String,
    /// What was seen.
    pub detail: String,
    /// How much it proves.
    pub strength: Strength,
}

/// One detected runtime layer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Detection {
    /// The runtime.
    pub kind: RuntimeKind,
    /// Its version, where visible.
    pub version: Option<String>,
    /// Strongest evidence strength.
    pub confidence: Strength,
    /// Everything that pointed at it.
    pub evidence: Vec<Evidence>,
    /// Extra facts (container name/id, image, rootless, ...).
    pub details: BTreeMap<String, String>,
}

/// The runtime the process runs in, plus outer layers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuntimeInfo {
    /// Innermost runtime ([`RuntimeKind::Host`] when not in a container).
    pub kind: RuntimeKind,
    /// Version of the innermost runtime, where visible.
    pub version: Option<String>,
    /// Confidence in the innermost runtime.
    pub confidence: Option<Strength>,
    /// Evidence for the innermost runtime.
    pub evidence: Vec<Evidence>,
    /// Details of the innermost runtime.
    pub details: BTreeMap<String, String>,
    /// Outer layers, innermost first (e.g. the Kubernetes pod around Podman).
    pub outer: Vec<Detection>,
    /// Runtimes hinted at by weak evidence only.
    pub hints: Vec<Detection>,
    /// Hypervisor seen when not in a container (`kvm`, `vmware`, ...), if any.
    pub virtualization: Option<String>,
}

impl RuntimeInfo {
    /// Whether any layer is `kind`.
    pub fn has_layer(&self, kind: RuntimeKind) -> bool {
        self.kind == kind || self.outer.iter().any(|d| d.kind == kind)
    }
}

#[derive(Default)]
struct Collector {
    found: BTreeMap<RuntimeKind, Detection>,
}

impl Collector {
    fn add(&mut self, kind: RuntimeKind, source: &str, detail: String, strength: Strength) {
        let d = self.found.entry(kind).or_insert_with(|| Detection {
            kind,
            version: None,
            confidence: strength,
            evidence: Vec::new(),
            details: BTreeMap::new(),
        });
        d.confidence = d.confidence.max(strength);
        if !d
            .evidence
            .iter()
            .any(|e| e.source == source && e.detail == detail)
        {
            d.evidence.push(Evidence {
                source: source.to_string(),
                detail,
                strength,
            });
        }
    }

    fn detail(&mut self, kind: RuntimeKind, key: &str, value: &str) {
        if let Some(d) = self.found.get_mut(&kind) {
            d.details
                .entry(key.to_string())
                .or_insert_with(|| value.to_string());
        }
    }

    fn version(&mut self, kind: RuntimeKind, v: &str) {
        if let Some(d) = self.found.get_mut(&kind) {
            if d.version.is_none() && !v.trim().is_empty() {
                d.version = Some(v.trim().to_string());
            }
        }
    }
}

/// Detects the runtime layers from `probe` and the parsed mount table.
pub fn detect(probe: &Probe, mounts: &[MountEntry]) -> RuntimeInfo {
    let mut c = Collector::default();
    env_markers(probe, &mut c);
    file_markers(probe, &mut c);
    mount_markers(mounts, &mut c);
    cgroup_hints(probe, &mut c);

    let (mut solid, hints): (Vec<Detection>, Vec<Detection>) = c
        .found
        .into_values()
        .partition(|d| d.confidence >= Strength::Medium);
    solid.sort_by(|a, b| {
        b.kind
            .depth()
            .cmp(&a.kind.depth())
            .then(b.confidence.cmp(&a.confidence))
    });
    // Apptainer and Singularity are one runtime under two names: keep one.
    if solid.iter().any(|d| d.kind == RuntimeKind::Apptainer) {
        if let Some(pos) = solid
            .iter()
            .position(|d| d.kind == RuntimeKind::Singularity)
        {
            let s = solid.remove(pos);
            if let Some(a) = solid.iter_mut().find(|d| d.kind == RuntimeKind::Apptainer) {
                a.evidence.extend(s.evidence);
                if a.version.is_none() {
                    a.version = s.version;
                }
            }
        }
    }
    let virtualization = if solid.is_empty() {
        detect_virtualization(probe)
    } else {
        None
    };
    let mut iter = solid.into_iter();
    match iter.next() {
        Some(inner) => RuntimeInfo {
            kind: inner.kind,
            version: inner.version,
            confidence: Some(inner.confidence),
            evidence: inner.evidence,
            details: inner.details,
            outer: iter.collect(),
            hints,
            virtualization,
        },
        None => RuntimeInfo {
            kind: RuntimeKind::Host,
            version: None,
            confidence: None,
            evidence: Vec::new(),
            details: BTreeMap::new(),
            outer: Vec::new(),
            hints,
            virtualization,
        },
    }
}

fn env_markers(p: &Probe, c: &mut Collector) {
    use RuntimeKind::*;
    use Strength::*;
    let env_ev = |c: &mut Collector, kind, key: &str, strength| {
        if let Some(v) = p.var(key) {
            c.add(kind, &format!("env:{key}"), format!("{key}={v}"), strength);
            true
        } else {
            false
        }
    };
    // Apptainer sets APPTAINER_* and, for compatibility, SINGULARITY_*.
    for key in ["APPTAINER_CONTAINER", "APPTAINER_NAME", "APPTAINER_COMMAND"] {
        env_ev(c, Apptainer, key, Strong);
    }
    if let Some(v) = p.var("APPTAINER_VERSION") {
        env_ev(c, Apptainer, "APPTAINER_VERSION", Medium);
        c.version(Apptainer, v);
    }
    for key in [
        "SINGULARITY_CONTAINER",
        "SINGULARITY_NAME",
        "SINGULARITY_COMMAND",
    ] {
        env_ev(c, Singularity, key, Strong);
    }
    if let Some(v) = p.var("SINGULARITY_VERSION") {
        env_ev(c, Singularity, "SINGULARITY_VERSION", Medium);
        c.version(Singularity, v);
    }
    for (kind, key) in [
        (Apptainer, "APPTAINER_CONTAINER"),
        (Singularity, "SINGULARITY_CONTAINER"),
    ] {
        if let Some(v) = p.var(key) {
            c.detail(kind, "image", v);
        }
    }

    match p.var("container") {
        Some("podman") => {
            env_ev(c, Podman, "container", Strong);
        }
        Some("docker") => {
            env_ev(c, Docker, "container", Strong);
        }
        Some("lxc" | "lxc-libvirt") => {
            env_ev(c, Lxc, "container", Strong);
        }
        Some("systemd-nspawn") => {
            env_ev(c, SystemdNspawn, "container", Strong);
        }
        // Set by runc-based engines such as CRI-O; says "a container" only.
        Some("oci") if p.var("KUBERNETES_SERVICE_HOST").is_some() => {
            env_ev(c, Kubernetes, "container", Medium);
        }
        _ => {}
    }
    if env_ev(c, Kubernetes, "KUBERNETES_SERVICE_HOST", Strong) {
        env_ev(c, Kubernetes, "KUBERNETES_PORT", Strong);
    }
    if env_ev(c, Charliecloud, "CH_RUNNING", Strong) {
        env_ev(c, Charliecloud, "CH_VERSION", Medium);
    }
    let shifter: Vec<(String, String)> = p
        .vars_with_prefix("SHIFTER_")
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for (k, v) in shifter.iter().take(3) {
        let strength = if k == "SHIFTER_RUNTIME" || k == "SHIFTER_IMAGEREQUEST" {
            Strong
        } else {
            Medium
        };
        c.add(Shifter, &format!("env:{k}"), format!("{k}={v}"), strength);
        if k == "SHIFTER_IMAGEREQUEST" {
            c.detail(Shifter, "image", v);
        }
    }
    for (k, v) in p.vars_with_prefix("SARUS_").take(3) {
        c.add(Sarus, &format!("env:{k}"), format!("{k}={v}"), Medium);
    }
    for (k, v) in p.vars_with_prefix("ENROOT_").take(3) {
        c.add(Enroot, &format!("env:{k}"), format!("{k}={v}"), Medium);
    }
    if let Some(v) = p.var("PYXIS_VERSION") {
        c.add(
            Enroot,
            "env:PYXIS_VERSION",
            format!("PYXIS_VERSION={v}"),
            Medium,
        );
        c.detail(Enroot, "pyxis", v);
    }
}

fn file_markers(p: &Probe, c: &mut Collector) {
    use RuntimeKind::*;
    use Strength::*;
    if p.exists("/.dockerenv") {
        c.add(Docker, "/.dockerenv", "file exists".into(), Strong);
    }
    if let Some(text) = p.read("/run/.containerenv") {
        let kv = parse::key_values(&text);
        let engine = kv.get("engine").cloned().unwrap_or_default();
        if engine.is_empty() || engine.starts_with("podman") || engine.starts_with("buildah") {
            let detail = if engine.is_empty() {
                "file exists".to_string()
            } else {
                format!("engine=\"{engine}\"")
            };
            c.add(Podman, "/run/.containerenv", detail, Strong);
            if let Some(v) = engine.strip_prefix("podman-") {
                c.version(Podman, v);
            }
            for key in ["name", "id", "image", "imageid", "rootless"] {
                if let Some(v) = kv.get(key) {
                    c.detail(Podman, key, v);
                }
            }
        }
    }
    if p.is_dir("/.singularity.d") {
        let labels = p.read("/.singularity.d/labels.json").unwrap_or_default();
        // Images built by Apptainer carry an apptainer version label.
        let apptainer_label = label(&labels, "org.label-schema.usage.apptainer.version");
        let singularity_label = label(&labels, "org.label-schema.usage.singularity.version");
        let kind = if apptainer_label.is_some()
            || p.var("APPTAINER_CONTAINER").is_some()
            || p.exists("/.singularity.d/env/99-runtimevars.sh")
                && p.read("/.singularity.d/env/99-runtimevars.sh")
                    .is_some_and(|t| t.contains("APPTAINER"))
        {
            Apptainer
        } else {
            Singularity
        };
        c.add(kind, "/.singularity.d", "directory exists".into(), Strong);
        if let Some(v) = apptainer_label.or(singularity_label) {
            c.add(
                kind,
                "/.singularity.d/labels.json",
                format!("built with version {v}"),
                Medium,
            );
            c.detail(kind, "built_with", &v);
        }
    }
    if let Some(text) = p.read("/run/systemd/container") {
        let name = text.trim();
        let kind = match name {
            "systemd-nspawn" => Some(SystemdNspawn),
            "lxc" | "lxc-libvirt" => Some(Lxc),
            "docker" => Some(Docker),
            "podman" => Some(Podman),
            _ => None,
        };
        if let Some(kind) = kind {
            c.add(kind, "/run/systemd/container", name.to_string(), Strong);
        }
    }
    if let Some(text) = p.read("/run/host/container-manager") {
        let name = text.trim();
        let kind = match name {
            "systemd-nspawn" => Some(SystemdNspawn),
            "podman" => Some(Podman),
            "docker" => Some(Docker),
            "lxc" => Some(Lxc),
            _ => None,
        };
        if let Some(kind) = kind {
            c.add(
                kind,
                "/run/host/container-manager",
                name.to_string(),
                Strong,
            );
        }
    }
    // PID 1's environment: how systemd detects LXC (root only).
    if let Some(text) = p.read("/proc/1/environ") {
        let env = crate::probe::parse_env_file(&text);
        match env.get("container").map(String::as_str) {
            Some("lxc" | "lxc-libvirt") => {
                c.add(Lxc, "/proc/1/environ", "container=lxc".into(), Strong)
            }
            Some("systemd-nspawn") => c.add(
                SystemdNspawn,
                "/proc/1/environ",
                "container=systemd-nspawn".into(),
                Strong,
            ),
            Some("podman") => c.add(Podman, "/proc/1/environ", "container=podman".into(), Strong),
            _ => {}
        }
    }
    if p.exists("/dev/.lxc-boot-id") || p.is_dir("/dev/.lxc") {
        c.add(Lxc, "/dev/.lxc", "LXC runtime files".into(), Strong);
    }
    if p.is_dir("/var/run/secrets/kubernetes.io") || p.is_dir("/run/secrets/kubernetes.io") {
        c.add(
            Kubernetes,
            "/var/run/secrets/kubernetes.io",
            "service account mounted".into(),
            Strong,
        );
        if let Some(ns) = p.read("/var/run/secrets/kubernetes.io/serviceaccount/namespace") {
            c.detail(Kubernetes, "namespace", ns.trim());
        }
    }
    if p.is_dir("/ch") && (p.exists("/ch/environment") || p.exists("/ch/metadata.json")) {
        c.add(
            Charliecloud,
            "/ch",
            "image metadata directory".into(),
            Medium,
        );
    }
    if p.is_dir("/etc/shifter") {
        c.add(Shifter, "/etc/shifter", "directory exists".into(), Medium);
    }
    if p.is_dir("/etc/enroot") {
        c.add(Enroot, "/etc/enroot", "directory exists".into(), Medium);
    }
    // Enroot images carry these three files; /etc/rc is not found on plain distributions.
    if p.exists("/etc/rc") && p.exists("/etc/fstab") && p.exists("/etc/environment") {
        if let Some(rc) = p.read("/etc/rc") {
            if rc.contains("exec") {
                c.add(Enroot, "/etc/rc", "Enroot entrypoint script".into(), Medium);
            }
        }
    }
}

fn label(json: &str, key: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    v.get(key)?.as_str().map(str::to_string)
}

fn mount_markers(mounts: &[MountEntry], c: &mut Collector) {
    use RuntimeKind::*;
    use Strength::*;
    for m in mounts {
        let hay = format!("{} {} {}", m.root, m.source, m.super_options);
        let what = format!(
            "{} mounted from {}",
            m.mount_point,
            short(&m.root, &m.source)
        );
        if let Some(id) = after(&hay, "/docker/containers/") {
            c.add(Docker, "mountinfo", what.clone(), Strong);
            c.detail(Docker, "id", &id);
        } else if hay.contains("/docker/overlay2/") || hay.contains("/docker/fuse-overlayfs/") {
            c.add(
                Docker,
                "mountinfo",
                format!("{} on Docker storage", m.mount_point),
                Strong,
            );
        }
        if let Some(id) = after(&hay, "/overlay-containers/") {
            c.add(Podman, "mountinfo", what.clone(), Strong);
            c.detail(Podman, "id", &id);
        } else if hay.contains("/userdata/") && hay.contains("-containers/") {
            c.add(Podman, "mountinfo", what.clone(), Strong);
            if let Some(id) = after(&hay, "-containers/") {
                c.detail(Podman, "id", &id);
            }
        } else if hay.contains("/containers/storage/") {
            c.add(
                Podman,
                "mountinfo",
                format!("{} on containers/storage", m.mount_point),
                Strong,
            );
        }
        if let Some(uid) = after(&hay, "/kubelet/pods/") {
            c.add(Kubernetes, "mountinfo", what.clone(), Strong);
            c.detail(Kubernetes, "pod_uid", &uid);
        }
        if hay.contains("/apptainer/mnt/session") {
            c.add(Apptainer, "mountinfo", what.clone(), Strong);
        } else if hay.contains("/singularity/mnt/session") {
            c.add(Singularity, "mountinfo", what.clone(), Strong);
        }
        if hay.contains("/enroot/") || hay.contains("/enroot-data/") {
            c.add(Enroot, "mountinfo", what.clone(), Strong);
        }
        if hay.contains("udiMount") || hay.contains("/shifter/") {
            c.add(Shifter, "mountinfo", what.clone(), Medium);
        }
        if hay.contains("/sarus/") || hay.contains("/.sarus/") {
            c.add(Sarus, "mountinfo", what.clone(), Strong);
        }
        if m.source == "lxcfs" || m.fs_type == "fuse.lxcfs" {
            c.add(
                Lxc,
                "mountinfo",
                format!("lxcfs on {}", m.mount_point),
                Medium,
            );
        }
        if hay.contains("/var/lib/machines/") {
            c.add(SystemdNspawn, "mountinfo", what, Medium);
        }
    }
}

fn short(root: &str, source: &str) -> String {
    if root == "/" {
        source.to_string()
    } else {
        root.to_string()
    }
}

/// The path component following `marker` in `hay`, if any.
fn after(hay: &str, marker: &str) -> Option<String> {
    let i = hay.find(marker)?;
    let rest = &hay[i + marker.len()..];
    let id: String = rest
        .chars()
        .take_while(|ch| !matches!(ch, '/' | ' ' | ',' | ':'))
        .collect();
    if id.is_empty() {
        None
    } else {
        Some(id)
    }
}

fn cgroup_hints(p: &Probe, c: &mut Collector) {
    use RuntimeKind::*;
    let Some(text) = p.read("/proc/1/cgroup") else {
        return;
    };
    for e in parse::cgroup(&text) {
        let path = e.path.as_str();
        let kind = if path.contains("kubepods") {
            Some(Kubernetes)
        } else if path.contains("libpod") {
            Some(Podman)
        } else if path.contains("/docker") {
            Some(Docker)
        } else if path.contains("/lxc") {
            Some(Lxc)
        } else if path.contains("machine.slice/machine-") {
            Some(SystemdNspawn)
        } else {
            None
        };
        if let Some(kind) = kind {
            c.add(kind, "/proc/1/cgroup", path.to_string(), Strength::Weak);
        }
    }
}

fn detect_virtualization(p: &Probe) -> Option<String> {
    let vendor = p
        .read("/sys/class/dmi/id/sys_vendor")
        .unwrap_or_default()
        .to_ascii_lowercase();
    let product = p
        .read("/sys/class/dmi/id/product_name")
        .unwrap_or_default()
        .to_ascii_lowercase();
    let both = format!("{vendor} {product}");
    for (needle, name) in [
        ("qemu", "qemu"),
        ("kvm", "kvm"),
        ("vmware", "vmware"),
        ("virtualbox", "virtualbox"),
        ("microsoft", "hyper-v"),
        ("amazon ec2", "amazon"),
        ("google", "google"),
        ("xen", "xen"),
    ] {
        if both.contains(needle) {
            return Some(name.to_string());
        }
    }
    let cpuinfo = p.read("/proc/cpuinfo")?;
    let flags = cpuinfo.lines().find(|l| l.starts_with("flags"))?;
    if flags.split_whitespace().any(|f| f == "hypervisor") {
        Some("unknown hypervisor".to_string())
    } else {
        None
    }
}
