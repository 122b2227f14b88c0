//! The plain, owned, serializable topology model (no hwloc types).

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::units::format_bytes;
use crate::CpuSet;

/// Where a topology came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum TopologySource {
    /// Discovered on the machine this process runs on.
    ThisMachine,
    /// Loaded from an hwloc XML file (as written by `lstopo file.xml`); a path
    /// that is not UTF-8 is serialised as its bytes ([`hpc_io::serde_path`]).
    Xml(#[serde(with = "hpc_io::serde_path")] std::path::PathBuf),
    /// Built from an hwloc synthetic description such as `"pack:2 numa:2 core:8 pu:2"`.
    Synthetic(String),
}

impl std::fmt::Display for TopologySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TopologySource::ThisMachine => f.write_str("this machine"),
            // Quoted and escaped when it holds a control character (a terminal's
            // escape in a file's name), as every path a message shows.
            TopologySource::Xml(p) => write!(f, "XML file {}", hpc_io::message::path(p)),
            // Cut when long, as the errors about it show it.
            TopologySource::Synthetic(d) => write!(f, "synthetic {}", hpc_env::shown(d)),
        }
    }
}

/// A processor package (socket).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Package {
    /// hwloc logical index (0-based, in topology order).
    pub logical_index: u32,
    /// Operating-system index, when the OS reports one.
    pub os_index: Option<u32>,
    /// The PUs of the package.
    pub cpuset: CpuSet,
    /// OS indices of the NUMA nodes local to the package.
    pub numa_nodes: Vec<u32>,
    /// Logical indices of the package's cores.
    pub cores: Vec<u32>,
}

/// A NUMA node (memory domain).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaNode {
    /// hwloc logical index.
    pub logical_index: u32,
    /// Operating-system index (what `numactl` and `/sys/devices/system/node` use).
    pub os_index: u32,
    /// Local memory in bytes (0 when unknown).
    pub memory_bytes: u64,
    /// The PUs local to the node (may be empty for CPU-less memory).
    pub cpuset: CpuSet,
}

/// A core: one or more PUs (hardware threads) sharing execution units.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Core {
    /// hwloc logical index; this is the identity used by placements.
    pub logical_index: u32,
    /// Operating-system index (not unique across packages on many machines).
    pub os_index: Option<u32>,
    /// Logical index of the enclosing package, if any.
    pub package: Option<u32>,
    /// OS index of the NUMA node local to the core, if any.
    pub numa: Option<u32>,
    /// The core's PUs (OS indices).
    pub pus: CpuSet,
}

/// Kind of a CPU cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheKind {
    /// Data and instructions.
    Unified,
    /// Data only.
    Data,
    /// Instructions only.
    Instruction,
}

/// A CPU cache.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cache {
    /// Level (1 for L1, ...).
    pub level: u8,
    /// Data, instruction or unified.
    pub kind: CacheKind,
    /// Size in bytes, when known.
    pub size_bytes: Option<u64>,
    /// The PUs sharing the cache.
    pub cpuset: CpuSet,
}

/// Kind of an operating-system device as hwloc reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OsDeviceKind {
    /// A GPU seen by the OS (DRM `card0`, `renderD128`, NVML `nvml0`, RSMI `rsmi0`).
    Gpu,
    /// A compute co-processor (CUDA `cuda0`, OpenCL `opencl0d0`, Level Zero `ze0`).
    CoProcessor,
    /// A network interface (`eth0`, `enp1s0`, `ib0`).
    Network,
    /// An OpenFabrics (verbs) device (`mlx5_0`, `hfi1_0`).
    OpenFabrics,
    /// Any other kind (storage, DMA, ...).
    Other,
}

/// An operating-system device (a name the OS or a driver library gives a device).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsDevice {
    /// Name, for example `cuda0` or `mlx5_0`.
    pub name: String,
    /// Kind.
    pub kind: OsDeviceKind,
    /// hwloc subtype, for example `CUDA`, `OpenCL`, `NVML`, `RSMI`.
    pub subtype: Option<String>,
}

/// A PCI device's identity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PciInfo {
    /// Bus id `domain:bus:device.function`, for example `0000:02:00.0`.
    pub bus_id: String,
    /// PCI class (`0x0302` is a 3D controller, `0x0207` InfiniBand, `0x0200` Ethernet).
    pub class_id: u16,
    /// PCI vendor id.
    pub vendor_id: u16,
    /// PCI device id.
    pub device_id: u16,
    /// Vendor name, when the topology has it.
    pub vendor: Option<String>,
    /// Device (model) name, when the topology has it.
    pub device: Option<String>,
}

/// A GPU or other accelerator: one PCI function (when known) with its OS devices.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// Index in [`Topology::gpus`].
    pub index: usize,
    /// Primary name: the first of the CUDA, NVML, RSMI, Level Zero, OpenCL, DRM names.
    pub name: String,
    /// Every OS device of this GPU (`cuda0`, `nvml0`, `card0`, ...).
    pub os_devices: Vec<OsDevice>,
    /// PCI identity, when the GPU sits on PCI.
    pub pci: Option<PciInfo>,
    /// Locality: the cpuset of the nearest normal (non-I/O) ancestor.
    pub cpuset: CpuSet,
    /// OS indices of the NUMA nodes of that ancestor.
    pub numa_nodes: Vec<u32>,
}

/// Kind of a network adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NicKind {
    /// A high-speed fabric adapter with an OpenFabrics (verbs) device, or an
    /// InfiniBand-class PCI device: InfiniBand, RoCE, Omni-Path.
    Fabric,
    /// An Ethernet (or other IP) interface only.
    Ethernet,
}

/// A network adapter: one PCI function (when known) with its OS devices.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nic {
    /// Index in [`Topology::nics`].
    pub index: usize,
    /// Primary name: the OpenFabrics device (`mlx5_0`) if any, else the interface (`eth0`).
    pub name: String,
    /// Fabric or Ethernet.
    pub kind: NicKind,
    /// Every OS device of this adapter (`mlx5_0`, `ib0`, ...).
    pub os_devices: Vec<OsDevice>,
    /// PCI identity, when the adapter sits on PCI.
    pub pci: Option<PciInfo>,
    /// Locality: the cpuset of the nearest normal (non-I/O) ancestor.
    pub cpuset: CpuSet,
    /// OS indices of the NUMA nodes of that ancestor.
    pub numa_nodes: Vec<u32>,
}

/// A machine's topology as plain data: what placement needs, nothing hwloc-specific.
///
/// Build one with [`Topology::load`](crate::Topology::load) (or the shortcuts
/// [`Topology::this_machine`], [`Topology::from_xml_file`],
/// [`Topology::from_synthetic`]). Serializable with serde.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// Where the topology came from.
    pub source: TopologySource,
    /// Packages, in logical order.
    pub packages: Vec<Package>,
    /// NUMA nodes, in logical order.
    pub numa_nodes: Vec<NumaNode>,
    /// Cores, in logical order (package by package).
    pub cores: Vec<Core>,
    /// All PUs of the topology.
    pub pus: CpuSet,
    /// The PUs this process may use: hwloc's allowed cpuset, and for this machine
    /// also the process affinity (`taskset`, cgroups, Slurm, a launcher's binding).
    pub allowed: CpuSet,
    /// CPU caches.
    pub caches: Vec<Cache>,
    /// GPUs and other accelerators.
    pub gpus: Vec<Gpu>,
    /// Network adapters.
    pub nics: Vec<Nic>,
}

impl Topology {
    /// The core with this logical index.
    pub fn core(&self, logical_index: u32) -> Option<&Core> {
        self.cores
            .get(logical_index as usize)
            .filter(|c| c.logical_index == logical_index)
            .or_else(|| self.cores.iter().find(|c| c.logical_index == logical_index))
    }

    /// The NUMA node with this OS index.
    pub fn numa_node(&self, os_index: u32) -> Option<&NumaNode> {
        self.numa_nodes.iter().find(|n| n.os_index == os_index)
    }

    /// Total memory of all NUMA nodes, in bytes.
    pub fn total_memory(&self) -> u64 {
        self.numa_nodes.iter().map(|n| n.memory_bytes).sum()
    }

    /// The cores with at least one PU in `allowed`, in logical order.
    pub fn allowed_cores<'a>(&'a self, allowed: &'a CpuSet) -> impl Iterator<Item = &'a Core> + 'a {
        self.cores.iter().filter(move |c| c.pus.intersects(allowed))
    }

    /// A short, lstopo-like text description: machine totals, caches, then each
    /// package with its NUMA nodes and nearby GPUs and NICs.
    ///
    /// ```
    /// let topo = hpc_topology::Topology::from_synthetic("pack:2 numa:1 core:4 pu:2").unwrap();
    /// let text = topo.summary();
    /// assert!(text.contains("2 packages, 2 NUMA nodes, 8 cores, 16 PUs"));
    /// ```
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "Topology of {}", self.source);
        let _ = writeln!(
            s,
            "Machine: {} packages, {} NUMA nodes, {} cores, {} PUs, {} memory",
            self.packages.len(),
            self.numa_nodes.len(),
            self.cores.len(),
            self.pus.len(),
            format_bytes(self.total_memory())
        );
        if self.allowed != self.pus {
            let cores = self.allowed_cores(&self.allowed).count();
            let _ = writeln!(s, "Allowed: PUs {} ({} cores)", self.allowed, cores);
        }
        let caches = self.cache_summary();
        if !caches.is_empty() {
            let _ = writeln!(s, "Caches: {caches}");
        }
        let mut shown_gpus = vec![false; self.gpus.len()];
        let mut shown_nics = vec![false; self.nics.len()];
        for p in &self.packages {
            let _ = writeln!(
                s,
                "Package {}: {} cores, PUs {}",
                p.logical_index,
                p.cores.len(),
                p.cpuset
            );
            for n in self
                .numa_nodes
                .iter()
                .filter(|n| Self::numa_in_package(n, p))
            {
                let _ = writeln!(
                    s,
                    "  NUMA {}: {}, PUs {}",
                    n.os_index,
                    format_bytes(n.memory_bytes),
                    n.cpuset
                );
            }
            for g in &self.gpus {
                if !shown_gpus[g.index] && !g.cpuset.is_empty() && g.cpuset.is_subset(&p.cpuset) {
                    shown_gpus[g.index] = true;
                    let _ = writeln!(s, "  {}", gpu_line(g));
                }
            }
            for n in &self.nics {
                if !shown_nics[n.index] && !n.cpuset.is_empty() && n.cpuset.is_subset(&p.cpuset) {
                    shown_nics[n.index] = true;
                    let _ = writeln!(s, "  {}", nic_line(n));
                }
            }
        }
        for n in self
            .numa_nodes
            .iter()
            .filter(|n| !self.packages.iter().any(|p| Self::numa_in_package(n, p)))
        {
            let pus = if n.cpuset.is_empty() {
                "no PUs".to_string()
            } else {
                format!("PUs {}", n.cpuset)
            };
            let _ = writeln!(
                s,
                "NUMA {}: {}, {pus}",
                n.os_index,
                format_bytes(n.memory_bytes)
            );
        }
        for g in self.gpus.iter().filter(|g| !shown_gpus[g.index]) {
            let _ = writeln!(s, "{} (machine-wide)", gpu_line(g));
        }
        for n in self.nics.iter().filter(|n| !shown_nics[n.index]) {
            let _ = writeln!(s, "{} (machine-wide)", nic_line(n));
        }
        if self.gpus.is_empty() && self.nics.is_empty() {
            let _ = writeln!(s, "No GPU or network adapter found");
        }
        s
    }

    fn numa_in_package(n: &NumaNode, p: &Package) -> bool {
        p.numa_nodes.contains(&n.os_index) && n.cpuset.is_subset(&p.cpuset) && !n.cpuset.is_empty()
    }

    fn cache_summary(&self) -> String {
        let mut groups: Vec<(u8, CacheKind, Option<u64>, usize)> = Vec::new();
        for c in &self.caches {
            match groups
                .iter_mut()
                .find(|g| g.0 == c.level && g.1 == c.kind && g.2 == c.size_bytes)
            {
                Some(g) => g.3 += 1,
                None => groups.push((c.level, c.kind, c.size_bytes, 1)),
            }
        }
        groups.sort_by(|a, b| b.0.cmp(&a.0).then((a.1 as u8).cmp(&(b.1 as u8))));
        groups
            .iter()
            .map(|(level, kind, size, count)| {
                let suffix = match kind {
                    CacheKind::Unified => "",
                    CacheKind::Data => "d",
                    CacheKind::Instruction => "i",
                };
                let size = size.map(format_bytes).unwrap_or_else(|| "?".into());
                format!("L{level}{suffix} {size} x{count}")
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn os_names(devs: &[OsDevice]) -> String {
    devs.iter()
        .map(|d| d.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn pci_text(pci: &Option<PciInfo>) -> String {
    match pci {
        Some(p) => {
            let model = match (&p.vendor, &p.device) {
                (Some(v), Some(d)) => format!(" {v} {d}"),
                (None, Some(d)) => format!(" {d}"),
                _ => format!(" {:04x}:{:04x}", p.vendor_id, p.device_id),
            };
            format!(" [PCI {} class {:04x}{model}]", p.bus_id, p.class_id)
        }
        None => String::new(),
    }
}

fn gpu_line(g: &Gpu) -> String {
    format!(
        "GPU {}: {}{}",
        g.index,
        os_names(&g.os_devices),
        pci_text(&g.pci)
    )
}

fn nic_line(n: &Nic) -> String {
    let kind = match n.kind {
        NicKind::Fabric => "fabric",
        NicKind::Ethernet => "ethernet",
    };
    format!(
        "NIC {} ({kind}): {}{}",
        n.index,
        os_names(&n.os_devices),
        pci_text(&n.pci)
    )
}

#[cfg(test)]
mod tests {
    use super::{format_bytes, TopologySource};

    #[test]
    fn a_path_with_a_control_character_is_shown_escaped() {
        // Pass 18 noted: `hpc topo --input` wrote such a path raw ("loading the
        // topology of XML file ..."), a terminal's escape turning the screen red.
        let source = TopologySource::Xml("/nonexistent/\u{1b}[31m.xml".into());
        assert_eq!(
            source.to_string(),
            r#"XML file "/nonexistent/\u{1b}[31m.xml""#
        );
        let plain = TopologySource::Xml("/tmp/node.xml".into());
        assert_eq!(plain.to_string(), "XML file /tmp/node.xml");
    }

    /// `hpc topo --json --input` of an XML file whose name is not UTF-8 (a
    /// name Linux allows): the topology's source did not serialise ("path
    /// contains invalid UTF-8 characters"), and `serde_json::json!` around it
    /// panicked. Such a path is written as its bytes and read back exactly; a
    /// UTF-8 path is still a string.
    #[test]
    fn an_xml_path_that_is_not_utf8_goes_through_json_exactly() {
        use std::os::unix::ffi::OsStrExt as _;
        let odd = TopologySource::Xml(std::ffi::OsStr::from_bytes(b"/tmp/n\xff.xml").into());
        let text = serde_json::to_string(&odd).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(serde_json::from_str::<TopologySource>(&text).unwrap(), odd);
        let _ = serde_json::json!({ "source": odd });
        let plain = TopologySource::Xml("/tmp/node.xml".into());
        let text = serde_json::to_string(&plain).unwrap();
        assert_eq!(text, r#"{"kind":"xml","value":"/tmp/node.xml"}"#);
        assert_eq!(
            serde_json::from_str::<TopologySource>(&text).unwrap(),
            plain
        );
    }

    #[test]
    fn bytes() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(32 * 1024), "32 KiB");
        assert_eq!(format_bytes(34_359_738_368), "32.0 GiB");
    }
}
