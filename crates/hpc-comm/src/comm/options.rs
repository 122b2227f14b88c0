//! The options of a communicator and how they resolve against the node.

use std::time::Duration;

use hpc_collectives::Options;

use hpc_board::{Error, Result};

/// Who advances collectives. See the [crate docs](crate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Engine {
    /// Progress only inside `test`/`wait` (the MPI baseline).
    Inline,
    /// A sleeping progress thread per process, pinned to the reserved
    /// progress core when there is one.
    Thread,
    /// A separate progress process per node (the DPU's role).
    Proxy,
    /// The MPI library's immediate collectives (feature `mpi`; the job must be
    /// started by an MPI launcher).
    #[cfg(feature = "mpi")]
    Mpi,
}

impl Engine {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Inline => "inline",
            Engine::Thread => "thread",
            Engine::Proxy => "proxy",
            #[cfg(feature = "mpi")]
            Engine::Mpi => "mpi",
        }
    }
}

impl Engine {
    /// Every engine of this build, in the order of the docs.
    pub const ALL: &'static [Engine] = &[
        Engine::Inline,
        Engine::Thread,
        Engine::Proxy,
        #[cfg(feature = "mpi")]
        Engine::Mpi,
    ];
}

/// Parses an engine's name, in any case (`thread`, `Thread`, `THREAD`), as
/// `HPC_ENGINE` is read; an unknown name is an error that lists the valid ones.
///
/// ```
/// use hpc_comm::Engine;
/// assert_eq!("Thread".parse::<Engine>().unwrap(), Engine::Thread);
/// assert!("fast".parse::<Engine>().unwrap_err().to_string().contains("inline, thread, proxy"));
/// ```
impl std::str::FromStr for Engine {
    type Err = Error;
    fn from_str(s: &str) -> Result<Engine> {
        let name = s.trim();
        if let Some(e) = Engine::ALL
            .iter()
            .find(|e| e.name().eq_ignore_ascii_case(name))
        {
            return Ok(*e);
        }
        let valid: Vec<&str> = Engine::ALL.iter().map(|e| e.name()).collect();
        Err(Error::Unsupported(format!(
            "engine {}: the engines of this build are {}{}",
            hpc_runtime::env::shown(s),
            valid.join(", "),
            if cfg!(feature = "mpi") {
                ""
            } else if name.eq_ignore_ascii_case("mpi") {
                " (mpi needs the `mpi` feature)"
            } else {
                ""
            }
        )))
    }
}

/// Settings of [`Comm::with_options`](crate::Comm::with_options).
#[derive(Debug, Clone)]
pub struct CommOptions {
    /// The engine.
    pub engine: Engine,
    /// How long `wait` waits before [`Error::Timeout`] (default: the world's):
    /// above 0 and at most a week
    /// ([`MAX_TIMEOUT`](hpc_runtime::env::MAX_TIMEOUT)), else
    /// [`Comm::with_options`](crate::Comm::with_options) is
    /// [`Error::Argument`](crate::Error::Argument).
    pub timeout: Option<Duration>,
    /// CPUs the `Thread` engine's progress thread is pinned to (default:
    /// `HPC_PROGRESS_CPUSET`, e.g. the progress core of an `hpc-topology`
    /// placement; unpinned if neither is set).
    pub progress_cpus: Option<hpc_topology::CpuSet>,
    /// How long `wait` polls for the peers' signals before it sleeps on a futex
    /// (default: `HPC_SPIN_US` microseconds; else 50 µs when this node has a
    /// core for each of its ranks, and 0 when it is oversubscribed, where
    /// spinning would take the core from the rank that has the work). Polling
    /// saves the futex wake-up, tens of microseconds on virtual machines. At
    /// most [`MAX_SPIN`] (a second, as `HPC_SPIN_US`), else
    /// [`Comm::with_options`](crate::Comm::with_options) is
    /// [`Error::Argument`](crate::Error::Argument).
    pub spin: Option<Duration>,
    /// Largest message (bytes) that the `Inline` and `Thread` engines pass
    /// to a rank on the same node through the board's staging slots (copied in
    /// by the sender, out by the receiver) rather than with one cross-memory
    /// read (default: `HPC_STAGE_MAX`, else [`DEFAULT_STAGE_MAX`]). Staging
    /// saves the system call of small messages; for large ones it depends on
    /// the machine (see the book's chapter on collectives).
    pub stage_max: Option<usize>,
    /// When the `Thread` engine's progress thread is woken (default:
    /// `HPC_AGENT_WAKE` = `eager` or `lazy`; else see [`AgentWake`]).
    pub agent_wake: Option<AgentWake>,
    /// The `Proxy` engine hands a collective to the proxy only if its per-rank
    /// block ([`Collective::block_bytes`](hpc_collectives::Collective::block_bytes)) is at least this many bytes;
    /// smaller ones run on the ranks themselves, progressed in `test`/`wait`
    /// as with `Inline` (default: `HPC_PROXY_MIN`; else
    /// [`DEFAULT_PROXY_MIN`] where the node has no core for the proxy, and 0,
    /// everything to the proxy, where it has). Alltoallv always goes to the
    /// proxy. Every rank must use the same value.
    pub proxy_min: Option<usize>,
    /// The `Proxy` engine: each rank makes the first round's copies between
    /// its own buffers (its own block of an allgather or alltoall, the first
    /// copy of an allreduce) itself when it posts the collective, and the
    /// proxy skips them (default: `HPC_PROXY_OWN_COPIES` = 0 or 1; else
    /// where the node has no core for the proxy). Without a spare core the
    /// ranks copy in parallel where the proxy would copy one block after the
    /// other on a core it takes from a rank; with one, the proxy's copy
    /// overlaps the ranks' computation and the post returns at once.
    pub own_copies: Option<bool>,
    /// The `Proxy` engine: where its proxy runs, and so how it reaches the
    /// ranks' memory (default: `HPC_COLL_PROXY_PLACEMENT`, else
    /// [`Placement::Host`](crate::Placement::Host)). In
    /// [`Placement::Dpu`](crate::Placement::Dpu) every collective goes to the
    /// proxy ([`CommOptions::proxy_min`] and [`CommOptions::own_copies`] do
    /// not apply) over the transport only, as on a BlueField.
    pub placement: Option<crate::Placement>,
    /// Algorithm selection.
    pub schedule: Options,
}

impl CommOptions {
    /// Defaults for `engine`.
    pub fn new(engine: Engine) -> CommOptions {
        CommOptions {
            engine,
            timeout: None,
            progress_cpus: None,
            spin: None,
            stage_max: None,
            agent_wake: None,
            proxy_min: None,
            own_copies: None,
            placement: None,
            schedule: Options::default(),
        }
    }
}

/// When the `Thread` engine's progress thread runs.
///
/// Offloading only pays where the progress thread has a core of its own.
/// Without one it takes its time from a computing rank: a copy it makes
/// while the rank computes delays the computation by as long as the copy
/// would have taken in `wait`, and every wake-up adds two context switches
/// (several microseconds on a virtual machine). On the 2-core development VM
/// with 2 ranks, an eager agent made a 64 KiB allreduce 1.6x slower than
/// progress in `wait` and left the computation 0.5-0.7 of its speed, with no
/// overlap gained; see the book's chapter on overlapping communication.
///
/// The default is [`AgentWake::Eager`] when a progress core is reserved
/// ([`CommOptions::progress_cpus`] or `HPC_PROGRESS_CPUSET`) or the node has
/// at least two cores per local rank, and [`AgentWake::Lazy`] otherwise.
/// Either way, small (staged) messages never wake the agent: they move when
/// the application tests or waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentWake {
    /// Woken for every message too large to stage (it makes the copy) and,
    /// while a collective has a round still to post, for every arrival (it
    /// posts that round).
    Eager,
    /// Never woken by messages: progress happens in `test` and `wait`, and
    /// the agent only makes sure that it does not stall while the
    /// application does neither (a pass every millisecond while collectives
    /// are in flight).
    Lazy,
}

impl AgentWake {
    /// `eager` or `lazy`.
    pub fn name(self) -> &'static str {
        match self {
            AgentWake::Eager => "eager",
            AgentWake::Lazy => "lazy",
        }
    }

    /// `HPC_AGENT_WAKE`'s value: `eager` or `lazy`.
    fn parse(v: &str) -> std::result::Result<AgentWake, &'static str> {
        match v.trim() {
            "eager" => Ok(AgentWake::Eager),
            "lazy" => Ok(AgentWake::Lazy),
            _ => Err("neither eager nor lazy"),
        }
    }

    /// The default for a node with `local` ranks of this job (see the type).
    fn default_for(local: usize, pinned: bool) -> AgentWake {
        // Warned about once, its value cut (it was written whole into every
        // rank's log, in a field of the warning).
        let asked = hpc_runtime::env::parsed(hpc_runtime::env::AGENT_WAKE, AgentWake::parse);
        if let Some(wake) = asked {
            return wake;
        }
        if pinned || online_cores() >= 2 * local {
            AgentWake::Eager
        } else {
            AgentWake::Lazy
        }
    }
}

/// The default of [`CommOptions::stage_max`] (without `HPC_STAGE_MAX`).
///
/// Measured on the 2-core development VM (2 ranks): staging took a 1 KiB
/// alltoall from 3.3 to 1.1 µs, but a 256 KiB one from 28 to 34 µs (a
/// staged chunk crosses between the cores' caches dirty), and a 1 MiB one
/// from 104 to 82 µs. Between 8 and 16 KiB the single copy wins again: with
/// 8 KiB instead of 16 KiB, 16 KiB collectives took 3.9-4.1 against
/// 6.3-6.6 µs (broadcast), 5.8-6.6 against 6.8-7.0 (alltoall) and 6.1-6.7
/// against 6.7-7.7 (allgather), while at 8 KiB staging still beat the single
/// copy for alltoall (3.9-4.7 against 6.2-6.9 µs).
pub const DEFAULT_STAGE_MAX: usize = 8 * 1024;

/// The default of [`CommOptions::proxy_min`] where the node has no core for
/// the proxy (without `HPC_PROXY_MIN`).
///
/// There every collective handed to the proxy costs a round trip through the
/// scheduler of the busy cores: 13-41 µs for a 1 KiB collective on the 2-core
/// development VM (2 ranks), against 1-3 µs on the ranks themselves. With
/// [`SharedBuf`](crate::SharedBuf) buffers and the ranks' own blocks copied by
/// the ranks ([`CommOptions::own_copies`]), pure time on 2 ranks, in µs, ranks
/// against proxy, measured alternately in one session:
///
/// | block | allgather | alltoall | allreduce | broadcast |
/// |---|---|---|---|---|
/// | 64 KiB | 9 / 16-41 | 9 / 16-41 | 17-23 / 18-44 | 8-9 / 13-19 |
/// | 256 KiB | 28-30 / 32-49 | 28-36 / 32-56 | 47-48 / 39-51 | 20-21 / 17-41 |
/// | 512 KiB | 52-57 / 62-66 | 53-67 / 62-68 | 79-82 / 68-69 | 40 / 23-41 |
/// | 1 MiB | 103 / 82-83 | 102-104 / 82-123 | 135 / 113-118 | 101 / 37 |
///
/// The proxy copies on one core what the ranks copy on two, and pays the
/// round trip, so it wins only where it saves copies: a single copy from a
/// mapped `SharedBuf` where the ranks stage or read through the kernel.
pub const DEFAULT_PROXY_MIN: usize = 512 * 1024;

impl CommOptions {
    /// Every default decided for a node running `local` ranks of this job, in
    /// one place: what the engines get, and what a split passes on.
    pub(super) fn resolve(mut self, local: usize, world_timeout: Duration) -> CommOptions {
        self.timeout = Some(self.timeout.unwrap_or(world_timeout));
        // The proxy process needs a core of its own too.
        let busy = local + usize::from(self.engine == Engine::Proxy);
        self.spin = Some(self.spin.unwrap_or_else(|| default_spin(busy)));
        self.stage_max = Some(stage_max(&self));
        if self.engine == Engine::Proxy {
            self.placement = Some(self.placement.unwrap_or_default());
            self.proxy_min = Some(proxy_min(&self, local));
            self.own_copies = Some(own_copies(&self, local));
        }
        self.agent_wake = Some(
            self.agent_wake
                .unwrap_or_else(|| AgentWake::default_for(local, progress_cpus(&self).is_some())),
        );
        self
    }
}

fn proxy_min(opts: &CommOptions, local: usize) -> usize {
    opts.proxy_min.unwrap_or_else(|| {
        match hpc_runtime::env::number(hpc_runtime::env::PROXY_MIN, usize::MAX) {
            Some(v) => v,
            None if local + 1 > online_cores() => DEFAULT_PROXY_MIN,
            None => 0,
        }
    })
}

fn stage_max(opts: &CommOptions) -> usize {
    opts.stage_max.unwrap_or_else(|| {
        hpc_runtime::env::number(hpc_runtime::env::STAGE_MAX, usize::MAX)
            .unwrap_or(DEFAULT_STAGE_MAX)
    })
}

/// The resolved [`CommOptions::own_copies`] for a node running `local` ranks.
fn own_copies(opts: &CommOptions, local: usize) -> bool {
    opts.own_copies.unwrap_or_else(|| {
        // `1` or `0`; anything else (`yes`, `false`) is warned about by name and
        // the default applies (it was taken for the default without a word).
        hpc_runtime::env::parsed(hpc_runtime::env::PROXY_OWN_COPIES, hpc_runtime::env::flag)
            .unwrap_or_else(|| local + 1 > online_cores())
    })
}

/// The CPUs online on this node.
fn online_cores() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize
}

/// What is wrong with this process's settings of communicators, read as a
/// communicator reads them: one line for each that it would warn about and
/// not take as given (a default, or the most it may be, applies instead),
/// the placement's refusal, and the transport's
/// ([`hpc_rdma::settings_problems`]). A communicator goes on with a warning (a
/// rank refusing to start over a tuning knob would lose the job); a launch
/// check (`hpc selftest`) says what those warnings pass by.
pub fn settings_problems() -> Vec<String> {
    use hpc_runtime::env::{self as env, number_problem, parsed_problem};
    let mut out: Vec<String> = [
        number_problem::<u64>(env::SPIN_US, env::MAX_SPIN_US),
        number_problem::<usize>(env::STAGE_MAX, usize::MAX),
        number_problem::<usize>(env::PROXY_MIN, usize::MAX),
        parsed_problem(env::AGENT_WAKE, AgentWake::parse),
        parsed_problem(env::PROXY_OWN_COPIES, env::flag),
        parsed_problem(env::PROGRESS_CPUSET, hpc_topology::CpuSet::parse_list),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let Err(e) = crate::Placement::from_env() {
        out.push(e.to_string());
    }
    out.extend(hpc_rdma::settings_problems());
    out
}

/// Refuses, on every rank, ranks given different settings that every rank
/// of a communicator must share (a collective of `world`, before anything
/// is built from them): whether the engine is the `Proxy` engine, its
/// placement and its resolved [`CommOptions::proxy_min`] where it applies
/// (a communicator within one node, host placement). Ranks of another
/// `proxy_min` (documented as the same on every rank, never checked) each
/// waited for the other until the timeout, "waiting for ranks [1]" naming
/// no setting; ranks of another placement took each other's bytes for a
/// board's name, or the launcher for unreachable.
pub(super) fn same_on_every_rank(world: &hpc_runtime::World, opts: &CommOptions) -> Result<()> {
    use hpc_runtime::env::{COLL_PROXY_PLACEMENT, PROXY_MIN};
    let none = || "(none)".to_string();
    let proxy = opts.engine == Engine::Proxy;
    let placement = opts.placement.unwrap_or_default();
    // Across nodes every collective goes to the proxies whatever it says
    // (the engine's `min` is 0 there), and its default differs by node.
    let spans = (0..world.size()).any(|r| !world.same_node(0, r));
    let engine = match opts.engine {
        Engine::Proxy => "proxy",
        #[cfg(feature = "mpi")]
        Engine::Mpi => "mpi",
        // These two may be mixed.
        _ => "inline or thread",
    };
    let names = [
        format!("placement ({COLL_PROXY_PLACEMENT})"),
        format!("proxy_min ({PROXY_MIN})"),
    ];
    let values = [
        ("engine", engine.to_string()),
        (
            names[0].as_str(),
            if proxy {
                placement.name().to_string()
            } else {
                none()
            },
        ),
        (
            names[1].as_str(),
            match opts.proxy_min {
                Some(m) if proxy && placement == crate::Placement::Host && !spans => m.to_string(),
                _ => none(),
            },
        ),
    ];
    world.same_on_every_rank("communicator settings", &values)?;
    Ok(())
}

/// The longest [`CommOptions::spin`]: [`hpc_runtime::env::MAX_SPIN_US`]
/// microseconds, a second, the most `HPC_SPIN_US` may say. Polling longer
/// before sleeping only burns a core.
pub const MAX_SPIN: Duration = Duration::from_micros(hpc_runtime::env::MAX_SPIN_US);

/// Refuses a [`CommOptions::spin`] beyond [`MAX_SPIN`], naming it: any
/// `Duration` was taken (`Duration::MAX` polled for ever where the ranks
/// wait, and the proxy, given it in microseconds, refused it at its start).
pub(super) fn check_spin(spin: Duration) -> Result<()> {
    if spin > MAX_SPIN {
        return Err(Error::Argument(format!(
            "hpc_comm::CommOptions::spin = {spin:?}: at most {MAX_SPIN:?} (as {} is)",
            hpc_runtime::env::SPIN_US
        )));
    }
    Ok(())
}

/// The default of [`CommOptions::spin`] for a node running `local` busy
/// processes: `HPC_SPIN_US` (at most [`hpc_runtime::env::MAX_SPIN_US`]) when set.
pub(super) fn default_spin(local: usize) -> Duration {
    use hpc_runtime::env::{number, MAX_SPIN_US, SPIN_US};
    if let Some(us) = number(SPIN_US, MAX_SPIN_US) {
        return Duration::from_micros(us);
    }
    if local <= online_cores() {
        Duration::from_micros(50)
    } else {
        Duration::ZERO
    }
}

pub(super) fn progress_cpus(opts: &CommOptions) -> Option<hpc_topology::CpuSet> {
    opts.progress_cpus.clone().or_else(|| {
        hpc_runtime::env::parsed(
            hpc_runtime::env::PROGRESS_CPUSET,
            hpc_topology::CpuSet::parse_list,
        )
    })
}

/// The CPUs online on this machine (`/sys/devices/system/cpu/online`), where
/// it can be read.
pub(super) fn online_cpus() -> Option<hpc_topology::CpuSet> {
    let text = hpc_io::read::read_regular_to_string(
        "/sys/devices/system/cpu/online",
        hpc_io::read::MAX_PROC_BYTES,
    )
    .ok()?;
    hpc_topology::CpuSet::parse_list(text.trim()).ok()
}

/// The progress CPUs `asked` (by `source`, the variable or option that named
/// them) that this machine has, and a warning naming `source` and the CPUs
/// online when some of them are not there (`online`: `None` where unknown).
/// `None` for the CPUs when none of them is there: the thread runs unpinned.
pub(super) fn usable_progress_cpus(
    asked: hpc_topology::CpuSet,
    online: Option<&hpc_topology::CpuSet>,
    source: &str,
) -> (Option<hpc_topology::CpuSet>, Option<String>) {
    let Some(online) = online.filter(|o| !o.is_empty()) else {
        return (Some(asked), None);
    };
    let missing = asked.difference(online);
    if missing.is_empty() {
        return (Some(asked), None);
    }
    let kept = asked.intersection(online);
    let then = if kept.is_empty() {
        "the progress thread runs unpinned".to_string()
    } else {
        format!("the progress thread is pinned to CPUs {kept} only")
    };
    let warning = format!(
        "{source}={asked} names CPUs {missing} that this machine does not have \
         (its CPUs are {online}): {then}"
    );
    (Some(kept).filter(|k| !k.is_empty()), Some(warning))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hpc_topology::CpuSet;

    #[test]
    fn progress_cpus_that_do_not_exist_are_named_with_those_that_do() {
        let online = CpuSet::parse_list("0-1").unwrap();
        let set = |s| CpuSet::parse_list(s).unwrap();
        assert_eq!(
            usable_progress_cpus(set("1"), Some(&online), "THE_SOURCE"),
            (Some(set("1")), None)
        );
        // No CPU 99999: used to be taken as it was, the pinning then failing
        // in the progress thread with no word at the default log level.
        let (cpus, warning) = usable_progress_cpus(set("99999"), Some(&online), "THE_SOURCE");
        assert_eq!(cpus, None);
        let warning = warning.unwrap();
        assert!(warning.contains("THE_SOURCE=99999"), "{warning}");
        assert!(warning.contains("its CPUs are 0-1"), "{warning}");
        assert!(warning.contains("unpinned"), "{warning}");
        let (cpus, warning) = usable_progress_cpus(set("1,7"), Some(&online), "THE_SOURCE");
        assert_eq!(cpus, Some(set("1")));
        assert!(warning.unwrap().contains("names CPUs 7"));
        // Unknown online CPUs: the set as asked.
        assert_eq!(
            usable_progress_cpus(set("5"), None, "THE_SOURCE"),
            (Some(set("5")), None)
        );
        assert!(online_cpus().is_some_and(|o| !o.is_empty()));
    }
}
