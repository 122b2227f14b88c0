//! # hpc-env: every `HPC_*` environment variable of hpc-rs, in one list
//!
//! Each variable is a constant holding its name (`hpc_env::LOG == "HPC_LOG"`), and
//! [`ALL`] lists them with their meaning, default and who sets them. Every crate of the
//! SDK reads its variables through these constants, so a name is spelt once; the
//! book's reference table is generated from [`ALL`] (`cargo xtask env-table`), so the
//! documentation cannot drift from the code.
//!
//! ```
//! // Read a setting, with its documented default where it is unset.
//! let timeout = std::env::var(hpc_env::TIMEOUT).unwrap_or_else(|_| "30".into());
//! assert!(timeout.parse::<f64>().is_ok());
//! assert_eq!(hpc_env::var("HPC_TIMEOUT").unwrap().default, "`30`");
//! // Every variable is listed once, with a meaning.
//! assert!(hpc_env::ALL.iter().all(|v| v.name.starts_with("HPC_") && !v.meaning().is_empty()));
//! ```

use std::fmt;

/// Who sets a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A setting for users: set it in the job's environment to change a default.
    Setting,
    /// Set by `hpc run` for each rank (read by the runtime); other launchers have
    /// their own variables, which the runtime reads as well.
    Launcher,
    /// Passed between the SDK's own processes (a rank and the collectives proxy it
    /// starts); never set by hand.
    Internal,
    /// Read by this repository's tests, benchmarks and container scripts only.
    Development,
}

impl Kind {
    /// A heading for the reference table.
    pub fn title(self) -> &'static str {
        match self {
            Kind::Setting => "Settings",
            Kind::Launcher => "Set by `hpc run` for each rank",
            Kind::Internal => "Internal (between the SDK's own processes)",
            Kind::Development => "Development (this repository's tests, benchmarks and scripts)",
        }
    }
}

/// One environment variable: its name, meaning, default and who sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Var {
    /// The name, `HPC_...`.
    pub name: &'static str,
    /// The constant holding the name (`LOG` for `HPC_LOG`).
    pub constant: &'static str,
    /// The meaning as written in the constant's documentation (one line per doc
    /// line); [`Var::meaning`] joins it into one paragraph.
    pub doc: &'static str,
    /// The value that applies when it is unset, in words (empty: none, unset means
    /// off or not given).
    pub default: &'static str,
    /// Who sets it.
    pub kind: Kind,
}

impl Var {
    /// The meaning, one paragraph.
    pub fn meaning(&self) -> String {
        self.doc
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl fmt::Display for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// The entry of [`ALL`] named `name`, if any.
pub fn var(name: &str) -> Option<&'static Var> {
    ALL.iter().find(|v| v.name == name)
}

/// The most characters of a variable's value that a message shows.
pub const SHOWN_CHARS: usize = 40;

/// A variable's value as a message shows it: quoted as `{:?}` quotes it, cut
/// after [`SHOWN_CHARS`] characters with the count of those left out, so that a
/// value of 100,000 characters is not echoed whole into every rank's log.
///
/// ```
/// assert_eq!(hpc_env::shown("abc"), "\"abc\"");
/// let long = "x".repeat(100_000);
/// let s = hpc_env::shown(&long);
/// assert!(s.len() < 100 && s.ends_with("... (99960 more characters)"), "{s}");
/// ```
pub fn shown(value: &str) -> String {
    let mut chars = value.chars();
    let head: String = chars.by_ref().take(SHOWN_CHARS).collect();
    match chars.count() {
        0 => format!("{head:?}"),
        more => format!("{head:?}... ({more} more characters)"),
    }
}

/// Whether [`short`] quotes a value for `c` and writes it escaped: a control
/// character (`char::is_control`), a bidirectional control (U+061C, U+200E,
/// U+200F, U+202A to U+202E, U+2066 to U+2069, which make a terminal show the
/// text around them in another order) or a line or paragraph separator
/// (U+2028, U+2029). `hpc_io::message` re-exports it for paths and values
/// from files; [`shown`] escapes each of them (`{:?}`).
///
/// ```
/// assert!(hpc_env::needs_escape('\u{202e}') && hpc_env::needs_escape('\n'));
/// assert!(!hpc_env::needs_escape('é'));
/// ```
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{2028}'
                | '\u{2029}'
        )
}

/// A value as a message writes it without quotes where it is short (a flag's
/// value, a path, a name): whole up to [`SHOWN_CHARS`] characters, else cut as
/// [`shown`] cuts it (then quoted, so that the cut is seen). A value holding a
/// control character (a line break, a terminal's escape) or a bidirectional
/// control (a right-to-left override, U+202E: [`needs_escape`]) is quoted and
/// escaped as [`shown`] does, so that it cannot break the message's line, move
/// the terminal's cursor or make the terminal show the value reordered. An empty value is written `""`, as `shown` writes it
/// (written as nothing, "HPC_TRACE= : ..." named no value).
///
/// ```
/// assert_eq!(hpc_env::short("my-sim"), "my-sim");
/// assert_eq!(hpc_env::short(""), "\"\"");
/// let s = hpc_env::short(&"x".repeat(100_000));
/// assert!(s.len() < 100 && s.ends_with("... (99960 more characters)"), "{s}");
/// assert_eq!(hpc_env::short("a\nb"), "\"a\\nb\"");
/// assert_eq!(hpc_env::short("\u{1b}[2J"), "\"\\u{1b}[2J\"");
/// assert_eq!(hpc_env::short("abc\u{202e}def"), r#""abc\u{202e}def""#);
/// ```
pub fn short(value: &str) -> String {
    if value.is_empty() || value.chars().count() > SHOWN_CHARS || value.chars().any(needs_escape) {
        shown(value)
    } else {
        value.to_string()
    }
}

macro_rules! vars {
    ($( $(#[doc = $doc:literal])+ $kind:ident $id:ident = $name:literal, default $default:literal; )*) => {
        $(
            $(#[doc = $doc])+
            #[doc = ""]
            #[doc = concat!("Default: ", $default)]
            pub const $id: &str = $name;
        )*
        /// Every `HPC_*` variable, in the order of the reference table.
        pub const ALL: &[Var] = &[
            $( Var { name: $name, constant: stringify!($id), doc: concat!($($doc, "\n"),+), default: $default, kind: Kind::$kind } ),*
        ];
    };
}

vars! {
    // --- Settings -------------------------------------------------------------------
    /// Log filter of `hpc_rs::init()`'s subscriber and of the `hpc` command (tracing
    /// `EnvFilter` syntax, e.g. `info`, `hpc_collectives=debug`). `init()` installs no
    /// subscriber when the application installed one.
    Setting LOG = "HPC_LOG", default "`warn`";
    /// Directory into which `hpc_rs::init()` records each process's timeline (the
    /// SDK's collective, proxy and transport spans, the application's spans at `INFO`
    /// and above) as `rank-<R>.json`, a Chrome trace; `hpc trace merge DIR -o FILE`
    /// makes them one, with the clocks aligned. `hpc run --trace FILE` sets it for the
    /// ranks and merges after the job.
    Setting TRACE = "HPC_TRACE", default "unset: nothing is recorded";
    /// Compute threads per rank that `hpc_rs::init()` plans the placement for (`hpc run
    /// --threads` sets it); more than the cores a launcher bound the rank to gives a
    /// warning. The spiking binaries (brunel, hpc_benchmark, microcircuit) take it as
    /// their `--threads` default (1 without it).
    Setting THREADS = "HPC_THREADS", default "the allowed cores divided among the node's ranks";
    /// Collectives engine of `Context::comm()`: `inline`, `thread`, `proxy` or `mpi`.
    Setting ENGINE = "HPC_ENGINE", default "`thread` with a progress core, `proxy` under `hpc run --proxy`, else `inline`";
    /// Whether `hpc_rs::init()` binds the rank to its placement's CPUs: `1` or `0`.
    Setting BIND = "HPC_BIND", default "`1` (within any binding a launcher made)";
    /// Timeout of blocking runtime calls, in seconds (fractions allowed); every
    /// collective, barrier and wait ends with an error naming the rank waited for.
    /// `MPI_Init` and `MPI_Finalize` are bounded by twice this value (at least
    /// 60 s): a process whose MPI library cannot reach the launcher, or whose
    /// finalize waits for a rank that is gone, ends with a message and status 70.
    Setting TIMEOUT = "HPC_TIMEOUT", default "`30`";
    /// Forces a bootstrap: `mpi`, `launcher` or `singleton`.
    Setting BOOTSTRAP = "HPC_BOOTSTRAP", default "detected from the launcher's variables";
    /// Overrides the node name of this rank; `hpc run --nodes` sets it to place ranks
    /// on emulated nodes.
    Setting NODE_NAME = "HPC_NODE_NAME", default "the host name";
    /// Transport backend between ranks: `shm`, `tcp`, `ofi`, `verbs`, `mpi` or `auto`.
    Setting TRANSPORT = "HPC_TRANSPORT", default "`auto` (shm on a node, the fabric or tcp between nodes)";
    /// libfabric provider of the `ofi` backend (e.g. `shm`, `tcp;ofi_rxm`,
    /// `verbs;ofi_rxm`, `cxi`); `FI_PROVIDER` is read when it is unset.
    Setting OFI_PROVIDER = "HPC_OFI_PROVIDER", default "`FI_PROVIDER`, else the first suitable provider";
    /// Address the tcp backend listens on.
    Setting TCP_ADDR = "HPC_TCP_ADDR", default "the local address that routes to the coordinator";
    /// How long collectives poll before sleeping on a futex, in microseconds (at
    /// most `1000000`, a second: a larger value is used as that, with a warning; one
    /// that is not a whole number is warned about and the default applies).
    Setting SPIN_US = "HPC_SPIN_US", default "`50`, `0` where the node has fewer cores than busy processes";
    /// Largest message (bytes) passed between ranks of a node through the staging
    /// slots rather than one cross-memory read (a value that is not a whole number is
    /// warned about and the default applies).
    Setting STAGE_MAX = "HPC_STAGE_MAX", default "`DEFAULT_STAGE_MAX` of the collectives";
    /// When the `Thread` engine's progress thread is woken: `eager` or `lazy`.
    Setting AGENT_WAKE = "HPC_AGENT_WAKE", default "`eager` with a progress core or two cores per rank, else `lazy`";
    /// Scheduling of the progress thread: `nice` (nice -20), `fifo` (`SCHED_FIFO`,
    /// needs `CAP_SYS_NICE`) or `none`.
    Setting PROGRESS_SCHED = "HPC_PROGRESS_SCHED", default "`nice`";
    /// Smallest per-rank block (bytes) the `Proxy` engine hands to the proxy; smaller
    /// collectives run on the ranks. Every rank must use the same value (one that is
    /// not a whole number is warned about and the default applies).
    Setting PROXY_MIN = "HPC_PROXY_MIN", default "`0` where the node has a core for the proxy, else `DEFAULT_PROXY_MIN`";
    /// `1`: with the `Proxy` engine each rank makes the first round's copies between
    /// its own buffers itself; `0`: the proxy makes them.
    Setting PROXY_OWN_COPIES = "HPC_PROXY_OWN_COPIES", default "`1` where the node has no core for the proxy, else `0`";
    /// Program a communicator's first rank starts as the collectives proxy (split at
    /// white space); `hpc run --proxy` sets it to `hpc proxy`.
    Setting COLL_PROXY_CMD = "HPC_COLL_PROXY_CMD", default "the application's own executable";
    /// Where the `Proxy` engine's proxy reaches the ranks from: `host` (a process
    /// beside them: shared-memory board, cross-memory attach) or `dpu` (as on a
    /// BlueField: only through the transport, registered memory and messages).
    Setting COLL_PROXY_PLACEMENT = "HPC_COLL_PROXY_PLACEMENT", default "`host`";
    /// Address a node's first rank listens on for its proxy in `dpu`
    /// placement (the host's address on the link to the DPU).
    Setting COLL_PROXY_ADDR = "HPC_COLL_PROXY_ADDR", default "`127.0.0.1`, or the address that routes to `HPC_COLL_PROXY_DPU_HOST`";
    /// In `dpu` placement, the DPU whose standing service (`hpc proxy --dpu-service`)
    /// starts each node's proxy, as `host[:port]`; `{host}` becomes this host's name
    /// (e.g. `{host}-dpu`). Unset: the node's first rank starts the proxy itself.
    Setting COLL_PROXY_DPU_HOST = "HPC_COLL_PROXY_DPU_HOST", default "unset (port `7471`)";
    /// File holding the key the DPU service and the ranks share: a node's first rank
    /// proves it holds it (HMAC-SHA256 of the service's nonce and the request), and
    /// `hpc proxy --dpu-service` reads it when `--key-file` is not given. The ranks' copy
    /// must not be readable by others, the service's not by its group either.
    Setting COLL_PROXY_DPU_KEY_FILE = "HPC_COLL_PROXY_DPU_KEY_FILE", default "unset: no key (a service that requires one refuses the request)";
    /// Cap on the bytes the `Proxy` engine's proxy holds for the collectives in
    /// flight: their scratch and, in `dpu` placement, the staging copies of the ranks'
    /// spans. A number of bytes, with an optional suffix `K`, `M`, `G` or `T` (powers
    /// of 1024). A collective that would pass it, or whose memory the proxy fails to
    /// allocate, fails on every rank with `Error::ProxyMemory` (the bytes it asked
    /// for); the proxy goes on serving the other collectives. The proxy reads it from
    /// its own environment (a standing DPU service passes its own on).
    Setting COLL_PROXY_MAX_SCRATCH = "HPC_COLL_PROXY_MAX_SCRATCH", default "half the proxy's memory (its host's, or its cgroup's limit where lower)";
    /// Cache of base image layers of `cargo xtask image` (several workspaces can share
    /// one).
    Setting IMAGE_CACHE = "HPC_IMAGE_CACHE", default "`<target>/hpc-image-cache`";
    /// `--ulimit` options of the generated `podman-run.sh` and `slurm-podman.sbatch`;
    /// set it empty where the engine may not raise limits.
    Setting ULIMITS = "HPC_ULIMITS", default "`--ulimit memlock=-1:-1`";

    // --- Set by hpc run -------------------------------------------------------------
    /// Rank of this process.
    Launcher RANK = "HPC_RANK", default "";
    /// Number of ranks.
    Launcher SIZE = "HPC_SIZE", default "";
    /// Rank among the ranks of this node.
    Launcher LOCAL_RANK = "HPC_LOCAL_RANK", default "";
    /// Number of ranks on this node.
    Launcher LOCAL_SIZE = "HPC_LOCAL_SIZE", default "";
    /// `host:port` of the launcher's coordinator.
    Launcher RENDEZVOUS = "HPC_RENDEZVOUS", default "";
    /// Job secret, hex; a connection to the coordinator without it is refused.
    Launcher SECRET = "HPC_JOB_SECRET", default "";
    /// Job identifier.
    Launcher JOB_ID = "HPC_JOB_ID", default "";
    /// CPUs `hpc run --bind` bound this rank to (a cpulist such as `0-3,8`).
    Launcher CPUSET = "HPC_CPUSET", default "";
    /// The rank's progress CPUs (cpulist), set by `hpc run --progress K`; the `Thread`
    /// engine pins its progress thread there (a value that is not a cpulist is warned
    /// about and ignored).
    Launcher PROGRESS_CPUSET = "HPC_PROGRESS_CPUSET", default "";

    // --- Internal -------------------------------------------------------------------
    /// Board file of the collectives proxy: a process started with it serves as the
    /// proxy (`hpc_rs::init()` does that) instead of running the application.
    Internal COLL_PROXY_BOARD = "HPC_COLL_PROXY_BOARD", default "";
    /// Slots of the proxy's board (ranks + 1).
    Internal COLL_PROXY_SLOTS = "HPC_COLL_PROXY_SLOTS", default "";
    /// How long the proxy polls before it sleeps, in microseconds (at most
    /// `1000000`, as `HPC_SPIN_US`).
    Internal COLL_PROXY_SPIN_US = "HPC_COLL_PROXY_SPIN_US", default "`0`";
    /// `1`: the proxy's standard input is a socket to its node's first rank, which
    /// relays the set-up of the network between the proxies of a communicator that
    /// spans nodes.
    Internal COLL_PROXY_NET = "HPC_COLL_PROXY_NET", default "";
    /// Where a proxy in `dpu` placement joins its ranks: `ADDRESS SECRET RANKS
    /// TIMEOUT_S BACKEND`, given by the rank that starts it.
    Internal COLL_PROXY_DPU = "HPC_COLL_PROXY_DPU", default "";

    // --- Development ----------------------------------------------------------------
    /// `1`: tests that need Open MPI's `mpirun` fail when it is missing instead of
    /// skipping (`cargo xtask test` sets it).
    Development REQUIRE_MPI = "HPC_REQUIRE_MPI", default "";
    /// `1`: tests that need a headless browser fail when it is missing.
    Development REQUIRE_BROWSER = "HPC_REQUIRE_BROWSER", default "";
    /// `1`: tests that run the examples' Python tools fail when `python3` is missing.
    Development REQUIRE_PYTHON = "HPC_REQUIRE_PYTHON", default "";
    /// `1`: run the container tests (Podman, Docker, Apptainer).
    Development TEST_CONTAINERS = "HPC_TEST_CONTAINERS", default "";
    /// `1`: run the tests on the Docker cluster of Slurm nodes.
    Development TEST_CLUSTER = "HPC_TEST_CLUSTER", default "";
    /// `1`: run the outside-application test (the README's `cargo install --path`, `hpc new --sdk`).
    Development TEST_OUTSIDE = "HPC_TEST_OUTSIDE", default "";
    /// `1`: run transport tests in network namespaces (needs root).
    Development TEST_NETNS = "HPC_TEST_NETNS", default "";
    /// Network namespace the collectives engine tests put a DPU-placed proxy in.
    Development COLL_TEST_NETNS = "HPC_COLL_TEST_NETNS", default "";
    /// Engine of the collectives engine tests' failure scenarios.
    Development COLL_TEST_ENGINE = "HPC_COLL_TEST_ENGINE", default "";
    /// Scenario a collectives test rank runs.
    Development COLL_TEST_SCENARIO = "HPC_COLL_TEST_SCENARIO", default "";
    /// Scenario set a transport conformance test rank runs.
    Development RDMA_CHILD = "HPC_RDMA_CHILD", default "";
    /// A marker the launcher tests put in the ranks' environment to find their
    /// processes.
    Development MARK = "HPC_MARK", default "";
    /// Container engine of the container scripts and tests: `podman` or `docker`.
    Development CONTAINER_ENGINE = "HPC_CONTAINER_ENGINE", default "`podman`";
    /// Work folder of `hpc cluster` (the Docker cluster of Slurm nodes): its
    /// configuration, keys, and `shared/`, which the nodes see as `/shared`.
    /// `cargo xtask cluster` and this repository's tests use `target/cluster`.
    Setting CLUSTER_DIR = "HPC_CLUSTER_DIR", default "`$XDG_CACHE_HOME/hpc-rs/cluster/NAME` (else `~/.cache/...`)";
    /// Container and network name prefix of `hpc cluster`: clusters of different
    /// names run side by side.
    Setting CLUSTER_NAME = "HPC_CLUSTER_NAME", default "`hpc-cluster`";
    /// Cache of the node file system of `hpc cluster` (made once by mmdebstrap),
    /// and of the container scripts' root file systems (`target/cluster-cache` for
    /// these scripts, `cargo xtask cluster` and this repository's tests).
    Setting CACHE_DIR = "HPC_CACHE_DIR", default "`$XDG_CACHE_HOME/hpc-rs/cluster-cache` (else `~/.cache/...`)";
    /// Cache of the Apptainer tree for hosts without Apptainer.
    Development APPTAINER_CACHE = "HPC_APPTAINER_CACHE", default "under `target/`";
    /// Root file system the Apptainer wrapper enters.
    Development APPTAINER_ROOTFS = "HPC_APPTAINER_ROOTFS", default "the cache's `rootfs`";
    /// Metrics of the container benchmark.
    Development BENCH_ONLY = "HPC_BENCH_ONLY", default "`shm_lat shm_bw tcp_lat tcp_bw brunel`";
    /// Runtimes of the container benchmark.
    Development BENCH_RUNTIMES = "HPC_BENCH_RUNTIMES", default "`native podman docker apptainer`";
    /// Work folder of the container benchmark.
    Development BENCH_WORK = "HPC_BENCH_WORK", default "`target/bench-containers`";
    /// Binary the image end-to-end test packages.
    Development E2E_APP = "HPC_E2E_APP", default "`hpc`";
    /// slurmctld port of the single-node Slurm test.
    Development SLURMCTLD_PORT = "HPC_SLURMCTLD_PORT", default "a free port";
    /// `1`: the proxy-descriptor corpus test rewrites `fuzz/corpus/proxy_descriptor`
    /// after a change of the descriptor's encoding.
    Development WRITE_CORPUS = "HPC_WRITE_CORPUS", default "";
    /// Role of a child process in hpc-runtime's test of the MPI watchdog.
    Development TEST_WATCHDOG_CHILD = "HPC_TEST_WATCHDOG_CHILD", default "";
    /// slurmd port of the single-node Slurm test.
    Development SLURMD_PORT = "HPC_SLURMD_PORT", default "the slurmctld port + 1";
}

/// The reference table of every variable, as Markdown (the book's
/// `reference/environment.md` is this text).
pub fn markdown_table() -> String {
    let mut s = String::from(
        "# Environment variables\n\n\
         <!-- Generated by `cargo xtask env-table` from the list in crates/hpc-env; \
         do not edit. -->\n\n\
         Every `HPC_*` variable that hpc-rs reads, from one list in the code \
         (`hpc_env::ALL`). Other launchers' variables (`OMPI_*`, `PMI_*`, `PMIX_*`, \
         `SLURM_*`) are read as well; `hpc doctor` shows what it found. A variable whose \
         value is not UTF-8 is skipped, unless it is one of these or a launcher's variable \
         that hpc-rs reads: then `hpc_rs::init()` fails with a message naming it.\n",
    );
    for kind in [
        Kind::Setting,
        Kind::Launcher,
        Kind::Internal,
        Kind::Development,
    ] {
        s.push_str(&format!(
            "\n## {}\n\n| variable | meaning | default |\n|---|---|---|\n",
            kind.title()
        ));
        for v in ALL.iter().filter(|v| v.kind == kind) {
            let default = if v.default.is_empty() { "" } else { v.default };
            s.push_str(&format!(
                "| `{}` | {} | {} |\n",
                v.name,
                v.meaning().replace('|', "\\|"),
                default.replace('|', "\\|")
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_prefixed_and_documented() {
        let mut seen = std::collections::HashSet::new();
        for v in ALL {
            assert!(v.name.starts_with("HPC_"), "{}", v.name);
            assert!(
                v.name[4..]
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'),
                "{}",
                v.name
            );
            assert!(seen.insert(v.name), "{} is listed twice", v.name);
            assert!(!v.meaning().is_empty(), "{} has no meaning", v.name);
            assert!(!v.meaning().contains('\n'));
        }
        assert_eq!(var("HPC_LOG").unwrap().kind, Kind::Setting);
        assert_eq!(var(concat!("HPC", "_NOT_A_VARIABLE")), None);
    }

    #[test]
    fn table_lists_every_variable_once() {
        let t = markdown_table();
        for v in ALL {
            assert_eq!(
                t.matches(&format!("| `{}` |", v.name)).count(),
                1,
                "{}",
                v.name
            );
        }
    }

    /// Every bidirectional control and line separator is escaped by
    /// [`short`] and [`shown`] (a right-to-left override was written as it
    /// is, so a terminal showed the value after it reversed: pass 18's C35),
    /// and a value of ordinary letters, accents and spaces is not quoted.
    #[test]
    fn bidirectional_controls_are_quoted_escaped() {
        let bidi = ('\u{202a}'..='\u{202e}')
            .chain('\u{2066}'..='\u{2069}')
            .chain(['\u{200e}', '\u{200f}', '\u{061c}', '\u{2028}', '\u{2029}']);
        for c in bidi {
            let value = format!("run{c}txt.exe");
            for s in [short(&value), shown(&value)] {
                assert!(!s.contains(c), "{:x}: {s:?}", c as u32);
                assert_eq!(s, format!("\"run\\u{{{:x}}}txt.exe\"", c as u32));
            }
        }
        assert_eq!(short("café au lait"), "café au lait");
    }
}
