//! InfiniBand/RDMA and GPU devices.

use crate::parse;
use crate::probe::Probe;
use serde::Serialize;

/// Devices the process can see.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Devices {
    /// InfiniBand / RDMA.
    pub infiniband: InfiniBand,
    /// GPUs.
    pub gpu: Gpus,
}

/// InfiniBand / RDMA state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InfiniBand {
    /// Whether `/dev/infiniband` exists.
    pub dev_dir: bool,
    /// Verbs device nodes (`uverbs0`, ...).
    pub uverbs: Vec<String>,
    /// Whether `/dev/infiniband/rdma_cm` exists.
    pub rdma_cm: bool,
    /// Management device nodes (`umad0`, ...).
    pub umad: Vec<String>,
    /// Adapters listed in `/sys/class/infiniband` (visible even when the device
    /// nodes are not passed into the container).
    pub adapters: Vec<Adapter>,
    /// Whether `/etc/libibverbs.d` exists (rdma-core installed in the image).
    pub provider_dir: bool,
    /// Provider drivers configured in `/etc/libibverbs.d/*.driver` (`mlx5`, `rxe`, ...).
    pub providers: Vec<String>,
}

/// One RDMA adapter from sysfs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Adapter {
    /// Device name (`mlx5_0`).
    pub name: String,
    /// The libibverbs provider it needs (`mlx5`), derived from the name.
    pub provider: String,
    /// Its ports.
    pub ports: Vec<Port>,
}

/// One adapter port.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Port {
    /// Port number.
    pub number: u32,
    /// Logical state (`ACTIVE`, `DOWN`, `INIT`, ...); `None` when unreadable.
    pub state: Option<String>,
    /// Link layer (`InfiniBand`, `Ethernet`).
    pub link_layer: Option<String>,
}

impl Port {
    /// Whether the port is active.
    pub fn is_active(&self) -> bool {
        self.state.as_deref() == Some("ACTIVE")
    }
}

/// GPU state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gpus {
    /// NVIDIA GPU device nodes (`nvidia0`, ...), without control nodes.
    pub nvidia_devices: Vec<String>,
    /// Whether `/dev/nvidiactl` exists.
    pub nvidiactl: bool,
    /// First line of `/proc/driver/nvidia/version`.
    pub driver_version: Option<String>,
    /// Whether the CUDA driver library (`libcuda.so.1`) is in a usual place.
    pub libcuda: bool,
    /// `CUDA_VISIBLE_DEVICES`.
    pub cuda_visible_devices: Option<String>,
    /// `NVIDIA_VISIBLE_DEVICES`.
    pub nvidia_visible_devices: Option<String>,
    /// GPUs on the PCI bus (sysfs shows the host's bus inside most containers).
    pub pci: Vec<PciGpu>,
    /// Whether `/dev/kfd` (AMD ROCm) exists.
    pub amd_kfd: bool,
    /// Inside Apptainer/Singularity (`/.singularity.d` exists): whether `--nv` put
    /// the host's NVIDIA driver libraries into `/.singularity.d/libs`; `None`
    /// elsewhere.
    pub apptainer_nv: Option<bool>,
    /// Whether the image says it is built for GPUs: the label `io.hpc-rs.gpu` is
    /// `true` in `/.singularity.d/labels.json` (what `cargo xtask image --gpu`
    /// writes), or the image sets `NVIDIA_VISIBLE_DEVICES` in its environment file.
    pub image_wants_gpu: bool,
}

/// A display/3D controller on the PCI bus.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PciGpu {
    /// PCI address (`0000:3b:00.0`).
    pub address: String,
    /// Vendor id (`0x10de` NVIDIA, `0x1002` AMD).
    pub vendor: String,
    /// Class code (`0x030200`).
    pub class: String,
}

const LIBCUDA_PATHS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
    "/usr/lib64/libcuda.so.1",
    "/usr/lib/libcuda.so.1",
    "/usr/local/nvidia/lib64/libcuda.so.1",
    "/.singularity.d/libs/libcuda.so.1",
    "/usr/local/cuda/compat/libcuda.so.1",
];

/// Reads the devices from `probe`.
pub fn detect(probe: &Probe) -> Devices {
    Devices {
        infiniband: infiniband(probe),
        gpu: gpus(probe),
    }
}

fn infiniband(p: &Probe) -> InfiniBand {
    let dev = p.list("/dev/infiniband");
    let uverbs = dev
        .iter()
        .filter(|n| n.starts_with("uverbs"))
        .cloned()
        .collect();
    let umad = dev
        .iter()
        .filter(|n| n.starts_with("umad"))
        .cloned()
        .collect();
    let adapters = p
        .list("/sys/class/infiniband")
        .into_iter()
        .take(64)
        .map(|name| {
            let ports = p
                .list(&format!("/sys/class/infiniband/{name}/ports"))
                .into_iter()
                .take(16)
                .filter_map(|n| {
                    let number = n.parse().ok()?;
                    let base = format!("/sys/class/infiniband/{name}/ports/{n}");
                    Some(Port {
                        number,
                        state: p
                            .read(&format!("{base}/state"))
                            .and_then(|t| parse::port_state(&t)),
                        link_layer: p
                            .read(&format!("{base}/link_layer"))
                            .map(|t| t.trim().to_string())
                            .filter(|t| !t.is_empty()),
                    })
                })
                .collect();
            Adapter {
                provider: provider_for(&name),
                name,
                ports,
            }
        })
        .collect();
    let providers = p
        .list("/etc/libibverbs.d")
        .into_iter()
        .filter_map(|f| {
            let stem = f.strip_suffix(".driver")?.to_string();
            // The file says `driver NAME`; fall back to the file name.
            let named = p
                .read(&format!("/etc/libibverbs.d/{f}"))
                .and_then(|t| {
                    t.lines().find_map(|l| {
                        l.trim()
                            .strip_prefix("driver ")
                            .map(|s| s.trim().to_string())
                    })
                })
                .filter(|s| !s.is_empty());
            Some(named.unwrap_or(stem))
        })
        .collect();
    InfiniBand {
        dev_dir: p.is_dir("/dev/infiniband"),
        uverbs,
        rdma_cm: p.exists("/dev/infiniband/rdma_cm"),
        umad,
        adapters,
        provider_dir: p.is_dir("/etc/libibverbs.d"),
        providers,
    }
}

/// The libibverbs provider for an adapter name: `mlx5_0` → `mlx5`,
/// `rxe0` → `rxe`, `bnxt_re1` → `bnxt_re`, `hfi1_0` → `hfi1`.
pub fn provider_for(name: &str) -> String {
    let known = [
        "mlx5",
        "mlx4",
        "bnxt_re",
        "hfi1",
        "qedr",
        "efa",
        "irdma",
        "i40iw",
        "rxe",
        "siw",
        "vmw_pvrdma",
        "hns",
        "cxgb4",
        "ocrdma",
        "mana",
        "erdma",
        "ipath",
        "qib",
        "mthca",
    ];
    if let Some(k) = known.iter().find(|k| name.starts_with(*k)) {
        return (*k).to_string();
    }
    let trimmed = name.trim_end_matches(|c: char| c.is_ascii_digit());
    trimmed.trim_end_matches('_').to_string()
}

fn gpus(p: &Probe) -> Gpus {
    let dev = p.list("/dev");
    let nvidia_devices = dev
        .iter()
        .filter(|n| {
            n.strip_prefix("nvidia")
                .is_some_and(|r| !r.is_empty() && r.chars().all(|c| c.is_ascii_digit()))
        })
        .cloned()
        .collect();
    let pci = p
        .list("/sys/bus/pci/devices")
        .into_iter()
        .take(4096)
        .filter_map(|addr| {
            let base = format!("/sys/bus/pci/devices/{addr}");
            let class = p
                .read(&format!("{base}/class"))?
                .trim()
                .to_ascii_lowercase();
            // 0x0300 VGA, 0x0302 3D controller.
            if !(class.starts_with("0x0300") || class.starts_with("0x0302")) {
                return None;
            }
            let vendor = p
                .read(&format!("{base}/vendor"))?
                .trim()
                .to_ascii_lowercase();
            if vendor != "0x10de" && vendor != "0x1002" {
                return None;
            }
            Some(PciGpu {
                address: addr,
                vendor,
                class,
            })
        })
        .collect();
    Gpus {
        nvidia_devices,
        nvidiactl: p.exists("/dev/nvidiactl"),
        driver_version: p
            .read("/proc/driver/nvidia/version")
            .and_then(|t| t.lines().next().map(|l| l.trim().to_string()))
            .filter(|l| !l.is_empty()),
        libcuda: LIBCUDA_PATHS.iter().any(|x| p.exists(x)),
        cuda_visible_devices: p.var("CUDA_VISIBLE_DEVICES").map(str::to_string),
        nvidia_visible_devices: p.var("NVIDIA_VISIBLE_DEVICES").map(str::to_string),
        pci,
        amd_kfd: p.exists("/dev/kfd"),
        apptainer_nv: p.is_dir("/.singularity.d").then(|| {
            p.exists("/.singularity.d/libs/libcuda.so.1")
                || p.exists("/.singularity.d/libs/nvidia-smi")
        }),
        image_wants_gpu: image_wants_gpu(p),
    }
}

/// The image's own word that it is built for GPUs (see [`Gpus::image_wants_gpu`]).
fn image_wants_gpu(p: &Probe) -> bool {
    let label = p
        .read("/.singularity.d/labels.json")
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("io.hpc-rs.gpu")?.as_str().map(|s| s == "true"));
    if let Some(l) = label {
        return l;
    }
    p.list("/.singularity.d/env").iter().any(|f| {
        p.read(&format!("/.singularity.d/env/{f}"))
            .is_some_and(|t| t.contains("NVIDIA_VISIBLE_DEVICES="))
    })
}

impl Gpus {
    /// NVIDIA GPUs on the PCI bus.
    pub fn pci_nvidia(&self) -> usize {
        self.pci.iter().filter(|g| g.vendor == "0x10de").count()
    }
}

#[cfg(test)]
mod tests {
    use super::provider_for;

    #[test]
    fn providers() {
        assert_eq!(provider_for("mlx5_0"), "mlx5");
        assert_eq!(provider_for("mlx4_1"), "mlx4");
        assert_eq!(provider_for("rxe0"), "rxe");
        assert_eq!(provider_for("bnxt_re0"), "bnxt_re");
        assert_eq!(provider_for("hfi1_0"), "hfi1");
        assert_eq!(provider_for("foo_3"), "foo");
    }
}
