//! Errors of this crate.

use std::path::PathBuf;

/// Everything that can go wrong when loading a topology, planning a placement or
/// binding.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TopologyError {
    /// A placement was asked for zero ranks.
    #[error("the number of ranks on the node must be at least 1")]
    ZeroRanks,
    /// A placement was asked for zero threads per rank.
    #[error("the number of threads per rank must be at least 1")]
    ZeroThreads,
    /// `local_rank` is not below `local_size`.
    #[error("local rank {local_rank} is out of range for {local_size} ranks on the node")]
    RankOutOfRange {
        /// The rank asked for.
        local_rank: usize,
        /// The number of ranks on the node.
        local_size: usize,
    },
    /// The synthetic description was rejected.
    #[error(
        "malformed synthetic topology description {}: {reason}",
        hpc_env::shown(description)
    )]
    BadSynthetic {
        /// The description as given.
        description: String,
        /// Why it was rejected.
        reason: String,
    },
    /// The XML file does not exist or cannot be read.
    #[error("topology XML file {} cannot be read", hpc_io::message::path(path))]
    XmlFile {
        /// The path as given.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The XML input is not a regular file (a directory, a FIFO, a device).
    #[error(
        "topology XML file {} is {kind}, not a regular file",
        hpc_io::message::path(path)
    )]
    XmlNotAFile {
        /// The path as given.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// A synthetic description with more PUs than any machine has.
    #[error(
        "synthetic topology {} has {pus} PUs, more than the {max} accepted \
         (Linux machines have at most 8192 CPUs); it would need about {} of memory",
        hpc_env::shown(description),
        crate::format_bytes(*estimate)
    )]
    SyntheticTooLarge {
        /// The description as given.
        description: String,
        /// Its PUs.
        pus: u64,
        /// The most PUs accepted ([`MAX_SYNTHETIC_PUS`](crate::budget::MAX_SYNTHETIC_PUS)).
        max: u64,
        /// Estimated bytes of loading it.
        estimate: u64,
    },
    /// The request would need more memory than the machine has available.
    #[error(
        "{what} would need about {} of memory, but {} is available (MemAvailable)",
        crate::format_bytes(*estimate),
        crate::format_bytes(*available)
    )]
    TooLarge {
        /// What was asked for.
        what: String,
        /// Estimated bytes.
        estimate: u64,
        /// Bytes available.
        available: u64,
    },
    /// The XML file is larger than any topology
    /// ([`MAX_XML_BYTES`](crate::MAX_XML_BYTES)): refused before it is
    /// read (a file of 2 GB was read whole, and then again by hwloc, before
    /// hwloc refused it).
    #[error(
        "topology XML file {} is {size} bytes, more than the {max} bytes accepted \
         (a machine of 8192 CPUs is described in about 14 MB)",
        hpc_io::message::path(path)
    )]
    XmlTooLarge {
        /// The path as given.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The bound.
        max: u64,
    },
    /// hwloc could not parse the XML file.
    #[error(
        "topology XML file {} is not a valid hwloc XML topology: {}",
        hpc_io::message::path(path),
        hpc_io::message::said(&hpc_io::message::cut(reason))
    )]
    XmlParse {
        /// The path as given.
        path: PathBuf,
        /// hwloc's complaint (the message shows it escaped where it holds a
        /// control character, and cut).
        reason: String,
    },
    /// The hwloc library loaded at run time is not a 2.x release.
    #[error(
        "the hwloc library loaded at run time has API version {found}; hpc-topology needs \
         hwloc 2.x (2.0 or newer, below 3.0): install libhwloc15 / hwloc-libs 2.x, or \
         build with the `vendored` feature"
    )]
    HwlocVersion {
        /// The API version the library reports, `major.minor.patch`.
        found: String,
    },
    /// hwloc failed to discover or build the topology.
    #[error("hwloc failed to build the topology: {0}")]
    Hwloc(String),
    /// A cpulist string (`0-3,8`) is malformed. The message shows the list cut
    /// as `hpc_env::shown` cuts a variable's value (the field holds it whole).
    #[error("malformed CPU list {} (expected e.g. \"0-3,8\")", hpc_env::shown(.0))]
    BadCpuList(String),
    /// A cpulist names a PU above [`crate::MAX_CPU_ID`], or more PUs than that
    /// in all (refused before anything is allocated for it).
    #[error("CPU list {} {what}: the limit is {max}", hpc_env::shown(list))]
    CpuListTooLarge {
        /// The list as given (the message shows it cut, as `hpc_env::shown` does).
        list: String,
        /// What is too large (`names CPU 4294967295`).
        what: String,
        /// The limit.
        max: u32,
    },
    /// None of the topology's cores is in the allowed cpuset: the CPUs a
    /// placement request allowed ([`crate::PlacementRequest::allowed`]) and
    /// those this process may use have no core in common.
    #[error(
        "no core of the topology is in the allowed cpuset: the request allows CPUs {asked} \
         and the topology allows CPUs {usable}"
    )]
    NoAllowedCores {
        /// The allowed set, in cpulist syntax: the request's and the topology's
        /// in common.
        allowed: String,
        /// The request's allowed set (`any` when it gave none; `none` when empty).
        asked: String,
        /// The topology's allowed set ([`crate::Topology::allowed`]; `none` when
        /// empty).
        usable: String,
    },
    /// A policy name could not be parsed.
    #[error(
        "unknown placement policy {} (expected compact, spread, numa or package)",
        hpc_env::shown(.0)
    )]
    BadPolicy(String),
    /// Binding the process or a thread failed.
    #[error("binding to cpuset {cpuset} failed: {reason}")]
    Bind {
        /// The cpuset, in cpulist syntax.
        cpuset: String,
        /// The operating system's or hwloc's complaint.
        reason: String,
    },
    /// Building the rayon thread pool failed.
    #[error("building the pinned thread pool failed: {0}")]
    ThreadPool(#[from] rayon::ThreadPoolBuildError),
}

/// Result type of this crate.
pub type Result<T, E = TopologyError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::TopologyError;

    #[test]
    fn a_parse_reason_with_a_control_character_is_shown_escaped() {
        // Pass 18 noted: hwloc's reason was cut but written raw, so a file's
        // terminal escape quoted in it reached the terminal.
        let e = TopologyError::XmlParse {
            path: "/tmp/node.xml".into(),
            reason: "bad object \u{1b}[31m here".into(),
        };
        let text = e.to_string();
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(
            text.ends_with(r#": "bad object \u{1b}[31m here""#),
            "{text}"
        );
        let plain = TopologyError::XmlParse {
            path: "/tmp/node.xml".into(),
            reason: "no topology element".into(),
        };
        assert!(plain.to_string().ends_with(": no topology element"));
    }
}
