//! The `hpc doctor` report: text and JSON.
//!
//! # JSON schema (version 1)
//!
//! `hpc doctor --json` prints one object. Fields are only ever added within a
//! schema version; a removal or change of meaning increments `schema_version`.
//!
//! ```text
//! {
//!   "schema_version": 1,
//!   "tool": "hpc-container",
//!   "tool_version": "0.1.0",
//!   "root": "/",                      // probed root directory
//!   "status": "ok" | "warning" | "error",
//!   "exit_code": 0 | 1 | 2,
//!   "summary": { "errors": n, "warnings": n, "infos": n },
//!   "findings": [ { "id": "ib.devices-missing", "severity": "error"|"warning"|"info",
//!                   "seen": "...", "why": "...", "fix": "..." } ],
//!   "environment": {
//!     "runtime": { "kind": "podman"|"docker"|"apptainer"|"singularity"|"kubernetes"|
//!                          "enroot"|"charliecloud"|"shifter"|"sarus"|"lxc"|
//!                          "systemd-nspawn"|"none",
//!                  "version": string|null, "confidence": "strong"|"medium"|"weak"|null,
//!                  "evidence": [ { "source": "/.dockerenv"|"env:NAME"|"mountinfo"|...,
//!                                  "detail": "...", "strength": "strong"|"medium"|"weak" } ],
//!                  "details": { "name": "...", "id": "...", ... },
//!                  "outer": [ { "kind", "version", "confidence", "evidence", "details" } ],
//!                  "hints": [ same shape: weak-only detections ],
//!                  "virtualization": string|null },
//!     "resources": { "online_cpus", "allowed_cpu_list", "allowed_cpus", "cgroup_version",
//!                    "cpu_quota" (CPUs, float), "memory_limit_bytes", "shm_bytes",
//!                    "memlock": { "soft", "hard" }, "nofile": { "soft", "hard" } },
//!                    // numbers or null; limits are numbers or "unlimited"
//!     "devices": { "infiniband": { "dev_dir", "uverbs": [..], "rdma_cm", "umad": [..],
//!                                  "adapters": [ { "name", "provider",
//!                                                  "ports": [ { "number", "state", "link_layer" } ] } ],
//!                                  "provider_dir", "providers": [..] },
//!                  "gpu": { "nvidia_devices": [..], "nvidiactl", "driver_version", "libcuda",
//!                           "cuda_visible_devices", "nvidia_visible_devices",
//!                           "pci": [ { "address", "vendor", "class" } ], "amd_kfd",
//!                           "apptainer_nv": bool|null, "image_wants_gpu" } },
//!     "launcher": { "kinds": ["slurm"|"pmix"|"open-mpi"|"hydra"|"hpc-run"], "rank", "size",
//!                   "local_size", "slurm": { "job_id", "step_id", "mpi_type", "cpu_bind" }|null,
//!                   "mpi_libraries": ["open-mpi"|"mpich"],
//!                   "pmix_server_tmpdir": string|null, "pmix_server_tmpdir_visible": bool|null },
//!     "mpi": { "ucx_tls", "ucx_net_devices", "ompi_mca": { "btl": "tcp,self", ... }, "fi_provider",
//!             "hpc_transport" },
//!     "cma": { "ptrace_scope", "cap_sys_ptrace", "seccomp", "self_test", "works" },
//!     "coverage": { "missing": ["/proc/self/mountinfo", ...] }   // key files not read
//!   }
//! }
//! ```

use crate::findings::{Finding, Severity};
use crate::parse::{Limit, LimitValue};
use crate::runtime::RuntimeKind;
use crate::Environment;
use serde::Serialize;
use std::fmt::Write as _;

/// Version of the JSON schema emitted by [`Report::to_json`].
pub const SCHEMA_VERSION: u32 = 1;

/// Counts of findings per severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Errors.
    pub errors: usize,
    /// Warnings.
    pub warnings: usize,
    /// Informational findings.
    pub infos: usize,
}

/// An environment with its findings, as printed by `hpc doctor`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Always [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `hpc-container`.
    pub tool: &'static str,
    /// Version of this crate.
    pub tool_version: &'static str,
    /// The probed root directory.
    pub root: String,
    /// `ok`, `warning` or `error`.
    pub status: &'static str,
    /// 0 healthy, 1 warnings, 2 errors.
    pub exit_code: i32,
    /// Counts per severity.
    pub summary: Summary,
    /// The findings, errors first.
    pub findings: Vec<Finding>,
    /// What was detected.
    pub environment: Environment,
}

impl Report {
    /// Builds the report of `environment` probed under `root`.
    pub fn new(root: &str, environment: Environment) -> Self {
        let findings = environment.diagnose();
        let count = |s| findings.iter().filter(|f| f.severity == s).count();
        let summary = Summary {
            errors: count(Severity::Error),
            warnings: count(Severity::Warning),
            infos: count(Severity::Info),
        };
        let (status, exit_code) = if summary.errors > 0 {
            ("error", 2)
        } else if summary.warnings > 0 {
            ("warning", 1)
        } else {
            ("ok", 0)
        };
        Report {
            schema_version: SCHEMA_VERSION,
            tool: "hpc-container",
            tool_version: env!("CARGO_PKG_VERSION"),
            root: root.to_string(),
            status,
            exit_code,
            summary,
            findings,
            environment,
        }
    }

    /// Pretty-printed JSON (see the module docs for the schema).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| {
            tracing::error!(error = %e, "report serialisation failed");
            String::from("{}")
        })
    }

    /// Human-readable text; ANSI colours when `color` is true.
    pub fn to_text(&self, color: bool) -> String {
        let paint = |code: &str, s: &str| {
            if color {
                format!("\x1b[{code}m{s}\x1b[0m")
            } else {
                s.to_string()
            }
        };
        let mut o = String::new();
        self.text_runtime(&mut o, &paint);
        self.text_resources(&mut o, &paint);
        self.text_devices(&mut o, &paint);
        self.text_launcher(&mut o, &paint);
        self.text_findings(&mut o, &paint);
        o
    }

    /// Runtime: kind, version, evidence, outer runtimes and weak hints.
    fn text_runtime(&self, o: &mut String, paint: &dyn Fn(&str, &str) -> String) {
        let e = &self.environment;
        let rt = &e.runtime;
        let _ = writeln!(o, "{}", paint("1", "Runtime"));
        let mut line = format!("  {}", rt.kind.name());
        if let Some(v) = &rt.version {
            let _ = write!(line, " {v}");
        }
        if let Some(c) = rt.confidence {
            let _ = write!(line, " ({c:?} evidence)");
        }
        put(o, &line.to_lowercase_evidence());
        for ev in &rt.evidence {
            put(o, &format!("    - {}: {}", ev.source, ev.detail));
        }
        for (k, v) in &rt.details {
            put(o, &format!("    {k}: {v}"));
        }
        for d in &rt.outer {
            put(o, &format!("  inside {}", d.kind.name()));
            for ev in &d.evidence {
                put(o, &format!("    - {}: {}", ev.source, ev.detail));
            }
        }
        if rt.kind == RuntimeKind::Host {
            if let Some(v) = &rt.virtualization {
                put(o, &format!("  virtual machine: {v}"));
            }
        }
        for h in &rt.hints {
            put(
                o,
                &format!(
                    "  hint (weak): {} ({})",
                    h.kind.name(),
                    h.evidence
                        .iter()
                        .map(|e| e.source.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
    }

    /// Resources: CPUs, memory, /dev/shm, locked memory and open files.
    fn text_resources(&self, o: &mut String, paint: &dyn Fn(&str, &str) -> String) {
        let e = &self.environment;
        let r = &e.resources;
        let _ = writeln!(o, "{}", paint("1", "Resources"));
        put(
            o,
            &format!(
                "  CPUs: {} allowed ({}) of {} online; quota {}",
                opt(r.allowed_cpus),
                r.allowed_cpu_list.as_deref().unwrap_or("unknown"),
                opt(r.online_cpus),
                r.cpu_quota
                    .map_or("none".to_string(), |q| format!("{q:.2} CPUs"))
            ),
        );
        put(
            o,
            &format!(
                "  memory limit: {}; /dev/shm: {}; cgroup: {}",
                r.memory_limit_bytes.map_or("none".to_string(), bytes),
                r.shm_bytes.map_or("unknown".to_string(), bytes),
                r.cgroup_version
                    .map_or("unknown".to_string(), |v| format!("v{v}"))
            ),
        );
        put(
            o,
            &format!(
                "  memlock: {}; open files: {}",
                limit(r.memlock, true),
                limit(r.nofile, false)
            ),
        );
    }

    /// Devices: InfiniBand adapters and device files, GPUs.
    fn text_devices(&self, o: &mut String, paint: &dyn Fn(&str, &str) -> String) {
        let e = &self.environment;
        let d = &e.devices;
        let _ = writeln!(o, "{}", paint("1", "Devices"));
        let ib = &d.infiniband;
        put(
            o,
            &format!(
                "  InfiniBand: {} adapter(s) [{}]; /dev/infiniband: {}; providers: {}",
                ib.adapters.len(),
                ib.adapters
                    .iter()
                    .map(|a| {
                        let ports: Vec<String> = a
                            .ports
                            .iter()
                            .map(|p| format!("{}:{}", p.number, p.state.as_deref().unwrap_or("?")))
                            .collect();
                        format!("{} {}", a.name, ports.join(","))
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
                if ib.dev_dir {
                    let mut v = ib.uverbs.clone();
                    if ib.rdma_cm {
                        v.push("rdma_cm".into());
                    }
                    v.extend(ib.umad.iter().cloned());
                    if v.is_empty() {
                        "empty".to_string()
                    } else {
                        v.join(" ")
                    }
                } else {
                    "absent".to_string()
                },
                if ib.providers.is_empty() {
                    "none".to_string()
                } else {
                    ib.providers.join(" ")
                }
            ),
        );
        let g = &d.gpu;
        put(
            o,
            &format!(
                "  GPUs: {} device node(s) [{}]; {} on the PCI bus; driver: {}",
                g.nvidia_devices.len(),
                g.nvidia_devices.join(" "),
                g.pci.len(),
                g.driver_version.as_deref().unwrap_or("not visible")
            ),
        );
        if let Some(v) = &g.cuda_visible_devices {
            put(o, &format!("  CUDA_VISIBLE_DEVICES={v}"));
        }
    }

    /// Launcher: kind, ranks, Slurm, PMIx, MPI transports, cross-memory attach.
    fn text_launcher(&self, o: &mut String, paint: &dyn Fn(&str, &str) -> String) {
        let e = &self.environment;
        let l = &e.launcher;
        let _ = writeln!(o, "{}", paint("1", "Launcher"));
        let kinds: Vec<String> = l
            .kinds
            .iter()
            .map(|k| format!("{k:?}").to_lowercase())
            .collect();
        if kinds.is_empty() {
            put(o, "  no launcher (a single process)");
        } else {
            put(
                o,
                &format!(
                    "  {}; rank {} of {}; {} rank(s) on this node",
                    kinds.join(", "),
                    opt(l.rank),
                    opt(l.size),
                    opt(l.local_size)
                ),
            );
        }
        if let Some(s) = &l.slurm {
            put(
                o,
                &format!(
                    "  Slurm job {} step {} mpi {}",
                    s.job_id.as_deref().unwrap_or("?"),
                    s.step_id.as_deref().unwrap_or("-"),
                    s.mpi_type.as_deref().unwrap_or("<unset>")
                ),
            );
        }
        if let Some(d) = &l.pmix_server_tmpdir {
            put(
                o,
                &format!(
                    "  PMIx server directory: {d} ({})",
                    if l.pmix_server_tmpdir_visible == Some(true) {
                        "visible"
                    } else {
                        "NOT visible here"
                    }
                ),
            );
        }
        if let Some(t) = &e.mpi.ucx_tls {
            put(o, &format!("  UCX_TLS={t}"));
        }
        for (k, v) in &e.mpi.ompi_mca {
            put(o, &format!("  OMPI_MCA_{k}={v}"));
        }
        put(
            o,
            &format!(
                "  cross-memory attach: {}",
                match e.cma.works {
                    Some(true) => "works",
                    Some(false) => "blocked",
                    None => "unknown",
                }
            ),
        );
    }

    /// Findings, worst first, and the count of each severity.
    fn text_findings(&self, o: &mut String, paint: &dyn Fn(&str, &str) -> String) {
        let e = &self.environment;
        let _ = writeln!(o, "{}", paint("1", "Findings"));
        if e.coverage.nothing_to_judge() {
            let _ = writeln!(
                o,
                "  {}",
                paint(
                    "1;31",
                    "too little to judge: the files the diagnosis rests on are missing"
                )
            );
        } else if self.findings.is_empty() {
            let _ = writeln!(o, "  {}", paint("32", "no problems found"));
        }
        for f in &self.findings {
            let tag = match f.severity {
                Severity::Error => paint("1;31", "error"),
                Severity::Warning => paint("1;33", "warning"),
                Severity::Info => paint("36", "info"),
            };
            o.push_str("  ");
            o.push_str(&tag);
            put(o, &format!(" [{}] {}", f.id, f.seen));
            put(o, &format!("      why: {}", f.why));
            put(o, &format!("      fix: {}", f.fix));
        }
        put(
            o,
            &format!(
                "{} error(s), {} warning(s), {} info",
                self.summary.errors, self.summary.warnings, self.summary.infos
            ),
        );
    }
}

/// Appends `line` and a newline to `o`, its control characters (an escape
/// sequence, a newline, a carriage return) and bidirectional controls (a
/// right-to-left override: `hpc_env::needs_escape`) written as escapes: the values come
/// from the probed system (its environment, a captured tree's files), and would
/// otherwise act on the reader's terminal (clear it, recolour, retitle) or forge
/// lines of the report. A line is cut after [`MAX_LINE_CHARS`] characters,
/// saying how many more there were: a value of the probed environment can be
/// of any length (a `CUDA_VISIBLE_DEVICES` of 200,000 characters was one line
/// of the report).
fn put(o: &mut String, line: &str) {
    let mut chars = line.chars();
    for c in chars.by_ref().take(MAX_LINE_CHARS) {
        if hpc_env::needs_escape(c) {
            o.extend(c.escape_debug());
        } else {
            o.push(c);
        }
    }
    let more = chars.count();
    if more > 0 {
        let _ = write!(o, "... ({more} more characters)");
    }
    o.push('\n');
}

/// The most characters of a line of the text report ([`put`]).
const MAX_LINE_CHARS: usize = 400;

trait Lower {
    fn to_lowercase_evidence(&self) -> String;
}

impl Lower for String {
    /// `(Strong evidence)` reads better in lower case.
    fn to_lowercase_evidence(&self) -> String {
        self.replace("(Strong", "(strong")
            .replace("(Medium", "(medium")
            .replace("(Weak", "(weak")
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("unknown".to_string(), |v| v.to_string())
}

fn bytes(n: u64) -> String {
    if n >= 1 << 30 {
        format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64)
    } else if n >= 1 << 20 {
        format!("{:.0} MiB", n as f64 / (1u64 << 20) as f64)
    } else if n >= 1 << 10 {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

fn limit(l: Option<Limit>, is_bytes: bool) -> String {
    match l.map(|l| l.soft) {
        None => "unknown".into(),
        Some(LimitValue::Unlimited) => "unlimited".into(),
        Some(LimitValue::Value(v)) if is_bytes => bytes(v),
        Some(LimitValue::Value(v)) => v.to_string(),
    }
}
