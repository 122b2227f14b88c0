//! Communicators and non-blocking collectives run by an engine.
//!
//! A [`Comm`] runs the [`Schedule`](hpc_collectives::Schedule)s of `hpc-collectives` over
//! shared memory between the ranks of a node and over `hpc-rdma` (TCP, or
//! verbs or libfabric where present) to ranks on other nodes (for `Proxy`,
//! between the nodes' proxies), with one of four [`Engine`]s:
//!
//! | engine | who advances a collective | data path |
//! |---|---|---|
//! | [`Engine::Inline`] | the application, inside `test`/`wait` (what MPI libraries do) | small messages through the board's staging slots, large ones by one `process_vm_readv`, receiver-driven |
//! | [`Engine::Thread`] | a progress thread per process, pinned to the progress core that `hpc-topology` reserved, and the application in `test`/`wait`; the thread sleeps on a futex until a large copy or a round to post needs it, or polls every millisecond while collectives are in flight ([`AgentWake`]) | same |
//! | [`Engine::Proxy`] | a separate process per node that runs the schedules of all local ranks (the role of a DPU); where the node has no core for it, collectives with blocks under [`CommOptions::proxy_min`] run on the ranks as with `Inline` | the proxy maps the ranks' [`SharedBuf`](crate::SharedBuf)s and reaches other buffers by cross-memory attach, keeps scratch in its own memory; across nodes the proxies send each other the steps between nodes over `hpc-rdma` |
//! | `Engine::Mpi` (feature `mpi`) | the MPI library's own `MPI_I*` collectives | the MPI library's |
//!
//! # Requests and buffer safety
//!
//! `comm.ialltoall(&send, &mut recv)` returns a [`Request`] that borrows both
//! buffers until it is waited for, so they cannot be touched early:
//!
//! ```compile_fail,E0506
//! # fn f(comm: &hpc_comm::Comm) -> Result<(), hpc_comm::Error> {
//! let send = vec![1.0f64; 8];
//! let mut recv = vec![0.0f64; 8];
//! let req = comm.ialltoall(&send, &mut recv)?;
//! recv[0] = 2.0; // error: `recv` is borrowed by `req`
//! req.wait()?;
//! # Ok(()) }
//! ```
//!
//! These requests are **staged**: the engine works on engine-owned copies
//! and the result is copied into the user's buffer inside `test`/`wait` on
//! the caller's thread, so leaking a request (`std::mem::forget`) can never
//! let the engine write into freed memory. The zero-copy path is
//! [`Comm::scope`]: requests made in a scope read and write the user's
//! buffers directly, and the scope waits for every collective started in it
//! before it returns (as `std::thread::scope` joins its threads), leaked
//! requests included.
//!
//! ```no_run
//! use hpc_comm::{Comm, Engine};
//! let world = hpc_runtime::World::init()?;
//! let comm = Comm::new(&world, Engine::Thread)?;
//! let send = vec![1.0f32; 1024 * comm.size()];
//! let mut recv = vec![0.0f32; 1024 * comm.size()];
//! comm.scope(|s| -> Result<(), hpc_comm::Error> {
//!     let req = s.ialltoall(&send, &mut recv)?;
//!     // ... compute while the progress thread moves the data ...
//!     req.wait()
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hpc_collectives::{Collective, CollectiveError, Options, ReduceOp};
use hpc_runtime::World;

use crate::board::{self, Board};
use crate::buf::{bytes, bytes_mut, Buf, BufMut, Elem};
use crate::engines::{self, inline::Host, Driver, Job, Ticket};
pub use crate::error::{Error, Result};
use crate::executor::{self, Core};
use crate::proxy;
use crate::sync::lock;

/// Who advances collectives. See the [module docs](self).
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
            "engine {s:?}: the engines of this build are {}{}",
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

/// Settings of [`Comm::with_options`].
#[derive(Debug, Clone)]
pub struct CommOptions {
    /// The engine.
    pub engine: Engine,
    /// How long `wait` waits before [`Error::Timeout`] (default: the world's).
    pub timeout: Option<Duration>,
    /// CPUs the `Thread` engine's progress thread is pinned to (default:
    /// `HPC_PROGRESS_CPUSET`, e.g. the progress core of an `hpc-topology`
    /// placement; unpinned if neither is set).
    pub progress_cpus: Option<hpc_topology::CpuSet>,
    /// How long `wait` polls for the peers' signals before it sleeps on a futex
    /// (default: `HPC_SPIN_US` microseconds; else 50 µs when this node has a
    /// core for each of its ranks, and 0 when it is oversubscribed, where
    /// spinning would take the core from the rank that has the work). Polling
    /// saves the futex wake-up, tens of microseconds on virtual machines.
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
    /// block ([`Collective::block_bytes`]) is at least this many bytes;
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

    /// The default for a node with `local` ranks of this job (see the type).
    fn default_for(local: usize, pinned: bool) -> AgentWake {
        match std::env::var(hpc_runtime::env::AGENT_WAKE)
            .as_deref()
            .map(str::trim)
        {
            Ok("eager") => return AgentWake::Eager,
            Ok("lazy") => return AgentWake::Lazy,
            Ok(other) => {
                tracing::warn!(
                    value = other,
                    "HPC_AGENT_WAKE is neither eager nor lazy: ignored"
                )
            }
            Err(_) => {}
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
    fn resolve(mut self, local: usize, world_timeout: Duration) -> CommOptions {
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
        match std::env::var(hpc_runtime::env::PROXY_OWN_COPIES)
            .ok()
            .as_deref()
            .map(str::trim)
        {
            Some("1") => true,
            Some("0") => false,
            _ => local + 1 > online_cores(),
        }
    })
}

/// The CPUs online on this node.
fn online_cores() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize
}

/// The default of [`CommOptions::spin`] for a node running `local` busy
/// processes: `HPC_SPIN_US` (at most [`hpc_runtime::env::MAX_SPIN_US`]) when set.
fn default_spin(local: usize) -> Duration {
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

/// A communicator: a group of ranks running collectives with one engine.
///
/// Created collectively by every rank of the world ([`Comm::new`]) or of a
/// parent communicator ([`Comm::split`]). Collectives must be called in the
/// same order on every rank of a communicator; several may be outstanding.
pub struct Comm {
    rank: usize,
    size: usize,
    /// World rank of each member.
    world_ranks: Vec<usize>,
    /// The options, resolved (every `Option` set, the timeout included), as a
    /// split passes them on.
    opts: CommOptions,
    timeout: Duration,
    seq: AtomicU64,
    driver: Box<dyn Driver>,
    progress_note: String,
    splits: AtomicU64,
    /// Node of each member (as the world numbers nodes).
    nodes: Vec<usize>,
    /// The network transport of a communicator that spans nodes (shared with
    /// its sub-communicators).
    net: Option<Arc<hpc_rdma::Transport>>,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("engine", &self.opts.engine)
            .finish()
    }
}

static BOARDS: AtomicU64 = AtomicU64::new(0);
/// Next id of a communicator on a shared network transport (agreed by its members).
static NET_IDS: AtomicU64 = AtomicU64::new(0);

/// Something that can run an allgather of bytes among the future members.
trait Boot {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    fn node_of(&self, r: usize) -> usize;
    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// The allgather among every process that takes part (the parent's ranks of a
    /// split: the members of every new group), each part at [`Boot::index_of`].
    fn allgather_all(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.allgather(mine)
    }
    /// Where member `r`'s part is in [`Boot::allgather_all`]'s result.
    fn index_of(&self, r: usize) -> usize {
        r
    }
    /// Whether every process that takes part is a member (not a split, whose
    /// groups may take different steps).
    fn uniform(&self) -> bool {
        true
    }
}

impl Boot for World {
    fn rank(&self) -> usize {
        World::rank(self)
    }
    fn size(&self) -> usize {
        World::size(self)
    }
    fn node_of(&self, r: usize) -> usize {
        World::node_of(self, r)
    }
    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(World::allgather(self, mine)?)
    }
}

/// A subgroup bootstrapped through its parent communicator (every parent
/// rank takes part in each exchange; members only use their group's parts).
struct SubBoot<'a> {
    parent: &'a Comm,
    members: Vec<usize>,
    rank: usize,
}

impl Boot for SubBoot<'_> {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.members.len()
    }
    fn node_of(&self, r: usize) -> usize {
        self.parent.nodes[self.members[r]]
    }
    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let all = self.parent.allgather_bytes(mine)?;
        Ok(self.members.iter().map(|&m| all[m].clone()).collect())
    }
    fn allgather_all(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.parent.allgather_bytes(mine)
    }
    fn index_of(&self, r: usize) -> usize {
        self.members[r]
    }
    fn uniform(&self) -> bool {
        false
    }
}

/// The lowest rank on `r`'s node: it creates the node's board.
fn node_leader(boot: &dyn Boot, r: usize) -> usize {
    let node = boot.node_of(r);
    (0..boot.size())
        .find(|&q| boot.node_of(q) == node)
        .unwrap_or(r)
}

/// Board files are `/dev/shm/hpc-coll-<creator pid>-<n>-<random>`.
const BOARD_PREFIX: &str = "hpc-coll-";

/// Removes the board files in `/dev/shm` that process `pid` created and did not
/// remove, and returns how many: a launcher calls it for each process it reaps, so
/// that a rank killed while it set a communicator up (before the name could go)
/// leaves nothing behind. Call it only for a process that has exited.
pub fn remove_boards_of(pid: u32) -> usize {
    let prefix = format!("{BOARD_PREFIX}{pid}-");
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return 0;
    };
    let mut n = 0;
    for e in dir.flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix)
            && std::fs::remove_file(e.path()).is_ok()
        {
            tracing::debug!(path = %e.path().display(), pid, "removed a dead process's board");
            n += 1;
        }
    }
    n
}

/// The name of a board file in `/dev/shm`, removed when dropped: the rank that
/// created the file holds it until every process that opens the file by name has
/// done so, and every error path of the set-up drops it, so that no set-up that
/// fails leaves a board behind.
struct BoardName(Option<PathBuf>);

impl BoardName {
    /// Removes the name now (the mappings stay).
    fn unlink(&mut self) {
        if let Some(p) = self.0.take() {
            if let Err(e) = std::fs::remove_file(&p) {
                tracing::debug!(path = %p.display(), error = %e, "removing a board file");
            }
        }
    }
}

impl Drop for BoardName {
    fn drop(&mut self) {
        self.unlink();
    }
}

/// Creates the boards of a new communicator, one per node: the node's lowest
/// rank creates it (mode 0600), the node's ranks map it and publish their pids.
/// Without a proxy the name is removed as soon as every rank mapped the board;
/// with one, the returned [`BoardName`] keeps it until the proxy mapped it too.
/// Ranks on other nodes get pid 0 (never "dead").
fn make_board(boot: &dyn Boot, extra: usize) -> Result<(Arc<Board>, Vec<u32>, BoardName)> {
    let (me, size) = (boot.rank(), boot.size());
    let leader = node_leader(boot, me);
    let mut path = Vec::new();
    let mut created = None;
    let mut name = BoardName(None);
    if me == leader {
        let p = PathBuf::from(format!(
            "/dev/shm/{BOARD_PREFIX}{}-{}-{:x}",
            std::process::id(),
            BOARDS.fetch_add(1, Ordering::Relaxed),
            hpc_runtime::random_u64()?
        ));
        let b = Board::create(&p, size + extra)
            .map_err(|e| Error::transport_from(format!("creating the board {}", p.display()), e));
        match b {
            Ok(b) => {
                path = p.to_string_lossy().into_owned().into_bytes();
                created = Some(b);
                name = BoardName(Some(p));
            }
            Err(e) => {
                // Tell the others before failing so that nobody waits for us.
                let _ = boot.allgather(&[]);
                return Err(e);
            }
        }
    }
    let parts = boot.allgather(&path)?;
    if let Some(r) = (0..size).find(|&r| node_leader(boot, r) == r && parts[r].is_empty()) {
        return Err(Error::transport(format!(
            "rank {r} could not create its node's board"
        )));
    }
    let p = PathBuf::from(String::from_utf8_lossy(&parts[leader]).into_owned());
    let board = match created {
        Some(b) => b,
        None => Board::open(&p, size + extra)
            .map_err(|e| Error::transport_from(format!("mapping the board {}", p.display()), e))?,
    };
    board.set_pid(me, std::process::id());
    let my_node = boot.node_of(me);
    // Only where another process will read this one's memory: a rank on this
    // node, or the proxy.
    if extra > 0 || (0..size).any(|r| r != me && boot.node_of(r) == my_node) {
        allow_peer_reads();
    }
    let mut mine = std::process::id().to_le_bytes().to_vec();
    mine.extend_from_slice(&(std::ptr::addr_of!(CMA_PROBE) as u64).to_le_bytes());
    let all = boot.allgather(&mine)?;
    // Every rank of the node opened the file before it took part in that allgather:
    // without a proxy to come, nobody needs the name any more.
    if extra == 0 {
        name.unlink();
    }
    let word = |b: &[u8], at: usize| {
        b.get(at..at + 8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
    };
    let pids: Vec<u32> = all
        .iter()
        .enumerate()
        .map(|(r, b)| {
            if boot.node_of(r) == my_node {
                u32::from_le_bytes(b.get(..4).and_then(|w| w.try_into().ok()).unwrap_or([0; 4]))
            } else {
                0
            }
        })
        .collect();
    // Every rank reads a word of the next rank on its node that is another
    // process, and all learn the outcome: a blocked cross-memory attach fails
    // here, on every rank alike, rather than in the first large collective.
    let next = (1..size)
        .map(|i| (me + i) % size)
        .find(|&r| pids[r] != 0 && pids[r] != pids[me]);
    let probe: i32 = match next.map(|r| (r, word(&all[r], 4))) {
        Some((r, Some(addr))) => {
            let mut got = 0u64;
            // SAFETY: `got` is 8 writable bytes of this process.
            match unsafe { board::cma_read(pids[r], addr, std::ptr::addr_of_mut!(got).cast(), 8) } {
                Ok(()) if got == CMA_PROBE => 0,
                Ok(()) => -1,
                Err(e) => e.raw_os_error().unwrap_or(-1),
            }
        }
        _ => 0,
    };
    let mut verdict = probe.to_le_bytes().to_vec();
    verdict.extend_from_slice(&(next.unwrap_or(me) as u32).to_le_bytes());
    let verdicts = boot.allgather(&verdict)?;
    for (r, v) in verdicts.iter().enumerate() {
        let code = i32::from_le_bytes(v.get(..4).and_then(|w| w.try_into().ok()).unwrap_or([0; 4]));
        if code != 0 {
            let peer = u32::from_le_bytes(
                v.get(4..8)
                    .and_then(|w| w.try_into().ok())
                    .unwrap_or([0; 4]),
            );
            return Err(cma_blocked(r, peer as usize, code));
        }
    }
    Ok((Arc::new(board), pids, name))
}

/// A word whose address each rank publishes when it joins a communicator, for
/// its peers to read by cross-memory attach (see `make_board`).
static CMA_PROBE: u64 = 0x6870_632d_636d_6121;

/// Lets processes of this user read this one's memory by cross-memory attach
/// where Yama's `ptrace_scope` is 1 (Ubuntu's default), under which only a
/// process's ancestors may: the peer ranks are its siblings, the proxy is a
/// child of rank 0. Open MPI's shared-memory transport does the same. Fails
/// harmlessly (`EINVAL`) where Yama is absent.
fn allow_peer_reads() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: prctl with integer arguments only.
        let r = unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
        tracing::debug!(
            ok = r == 0,
            "PR_SET_PTRACER_ANY for peer ranks and the proxy"
        );
    });
}

/// The refusal of a communicator whose ranks may not read each other's memory.
fn cma_blocked(rank: usize, peer: usize, code: i32) -> Error {
    let why = if code > 0 {
        std::io::Error::from_raw_os_error(code).to_string()
    } else {
        "it read something other than the word the peer published".to_string()
    };
    Error::Unsupported(format!(
        "cross-memory attach between the ranks of this node is blocked: rank {rank} could not \
         read rank {peer}'s memory with process_vm_readv ({why}). Messages over stage_max bytes \
         move that way, and the proxy reaches buffers other than SharedBufs that way. Allow it: \
         kernel.yama.ptrace_scope 0 or 1 (each rank already sets PR_SET_PTRACER for 1), or \
         CAP_SYS_PTRACE for the ranks (containers: --cap-add SYS_PTRACE), and no seccomp filter \
         that blocks process_vm_readv/process_vm_writev; `hpc doctor` checks this"
    ))
}

/// Where the proxies of a `Proxy` communicator are: one per node, numbered
/// in the order of the nodes' first ranks.
struct ProxyPlaces {
    /// The first rank of each node index.
    leaders: Vec<usize>,
    /// The node index of each rank.
    index: Vec<usize>,
}

impl ProxyPlaces {
    fn of(nodes: &[usize]) -> ProxyPlaces {
        let mut leaders: Vec<usize> = Vec::new();
        let index = (0..nodes.len())
            .map(
                |r| match leaders.iter().position(|&l| nodes[l] == nodes[r]) {
                    Some(i) => i,
                    None => {
                        leaders.push(r);
                        leaders.len() - 1
                    }
                },
            )
            .collect();
        ProxyPlaces { leaders, index }
    }

    /// Whether rank `r` starts its node's proxy.
    fn leads(&self, r: usize) -> bool {
        self.leaders[self.index[r]] == r
    }

    /// Connects the proxies of a communicator that spans nodes (`net`;
    /// collective over every process of `boot`, which takes part without
    /// `net` too): returns the name of the transport between them.
    fn connect(
        &self,
        boot: &dyn Boot,
        client: &proxy::Client,
        me: usize,
        nodes: &[usize],
        timeout: Duration,
        net: bool,
    ) -> Result<String> {
        let link = client.take_link();
        let hello = link.as_ref().map(|_| proxy::net::Hello {
            me: self.index[me],
            node_of: self.index.clone(),
            node_ids: self.leaders.iter().map(|&l| nodes[l]).collect(),
            timeout_ms: timeout.as_millis().min(u64::MAX as u128) as u64,
            rendezvous: std::env::var(hpc_runtime::env::RENDEZVOUS).ok(),
        });
        let leaders: Vec<usize> = if net {
            self.leaders.iter().map(|&l| boot.index_of(l)).collect()
        } else {
            Vec::new()
        };
        proxy::net::bootstrap(
            link,
            hello.as_ref(),
            &|b: &[u8]| boot.allgather_all(b),
            &leaders,
            timeout,
        )
    }
}

/// The transport backend that reaches the first rank on another node.
fn net_backend(
    t: &Option<Arc<hpc_rdma::Transport>>,
    world_ranks: &[usize],
    nodes: &[usize],
    me: usize,
) -> &'static str {
    let remote = (0..nodes.len()).find(|&r| nodes[r] != nodes[me]);
    match (t, remote) {
        (Some(t), Some(r)) => t.backend_of(world_ranks[r]).map_or("none", |b| b.name()),
        _ => "none",
    }
}

fn progress_cpus(opts: &CommOptions) -> Option<hpc_topology::CpuSet> {
    opts.progress_cpus.clone().or_else(|| {
        hpc_runtime::env::parsed(
            hpc_runtime::env::PROGRESS_CPUSET,
            hpc_topology::CpuSet::parse_list,
        )
    })
}

impl Comm {
    /// A communicator of every rank of `world` with `engine` (collective).
    pub fn new(world: &World, engine: Engine) -> Result<Comm> {
        Comm::with_options(world, CommOptions::new(engine))
    }

    /// Like [`Comm::new`] with explicit options (collective).
    pub fn with_options(world: &World, mut opts: CommOptions) -> Result<Comm> {
        if opts.engine == Engine::Proxy && opts.placement.is_none() {
            opts.placement = Some(crate::Placement::from_env()?);
        }
        let opts = opts.resolve(world.local_size(), world.timeout());
        let timeout = opts.timeout.unwrap_or_default();
        #[cfg(feature = "mpi")]
        if opts.engine == Engine::Mpi {
            let driver = Box::new(crate::engines::mpi::Mpi {
                comm: crate::mpi_engine::MpiComm::new(world)?,
            });
            return Ok(Comm::assemble(
                world.rank(),
                (0..world.size()).collect(),
                opts,
                timeout,
                driver,
                "the MPI library progresses".into(),
            ));
        }
        // The Proxy engine's ranks have no network path of their own: their
        // proxies connect to each other (see `proxy/net.rs`).
        let net =
            if (0..world.size()).any(|r| !world.same_node(0, r)) && opts.engine != Engine::Proxy {
                let t = hpc_rdma::Transport::new(world)
                    .map_err(|e| Error::transport_from("the network path across nodes", e))?;
                Some(Arc::new(t))
            } else {
                None
            };
        Comm::build(world, (0..world.size()).collect(), opts, timeout, net)
    }

    fn build(
        boot: &dyn Boot,
        world_ranks: Vec<usize>,
        opts: CommOptions,
        timeout: Duration,
        transport: Option<Arc<hpc_rdma::Transport>>,
    ) -> Result<Comm> {
        let (me, size) = (boot.rank(), boot.size());
        let nodes: Vec<usize> = (0..size).map(|r| boot.node_of(r)).collect();
        let spans = nodes.iter().any(|&n| n != nodes[me]);
        if opts.engine == Engine::Proxy && opts.placement == Some(crate::Placement::Dpu) {
            // No board: the proxy reaches the ranks over the transport only;
            // across nodes the proxies carry the steps between nodes.
            let client = proxy::dpu::Client::start(
                me,
                world_ranks.clone(),
                &nodes,
                &opts.schedule,
                timeout,
                opts.spin.unwrap_or_default(),
                &|b| boot.allgather(b),
            )?;
            let driver = Box::new(engines::dpu::Dpu {
                client: Arc::new(client),
            });
            let mut note = "progress in the node's proxy, placed as on a DPU (registered memory, \
                            RMA and messages only)"
                .to_string();
            if spans {
                note.push_str("; other nodes through the nodes' DPU proxies");
            }
            let mut comm = Comm::assemble(me, world_ranks, opts, timeout, driver, note);
            comm.nodes = nodes;
            return Ok(comm);
        }
        let proxy_net = spans && opts.engine == Engine::Proxy;
        // Whether the parent has a network path is the same on all its ranks, whether
        // this rank's group spans nodes is not: what every rank of the parent must do
        // alike (the id allgather below) goes by the first.
        let parent_net = transport.is_some();
        let transport = if spans && !proxy_net { transport } else { None };
        if spans && !proxy_net && transport.is_none() {
            return Err(Error::Unsupported(
                "a communicator across nodes needs its parent's network path".into(),
            ));
        }
        // One id per communicator on a transport, agreed by its members (and taken
        // by a group of a split within one node too, so that every rank of the
        // parent takes part in the same allgathers).
        let id = if parent_net {
            let all = boot.allgather(&NET_IDS.load(Ordering::Relaxed).to_le_bytes())?;
            let id = all
                .iter()
                .map(|b| u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])))
                .max()
                .unwrap_or(0);
            NET_IDS.store(id + 1, Ordering::Relaxed);
            id
        } else {
            0
        };
        let net = transport.as_ref().map(|t| executor::Net {
            t: t.clone(),
            world: world_ranks.clone(),
            local: nodes.iter().map(|&n| n == nodes[me]).collect(),
            id: (id & 0xffff) as u16,
        });
        let extra = usize::from(opts.engine == Engine::Proxy);
        let (board, pids, mut board_name) = make_board(boot, extra)?;
        let stage_max = opts.stage_max.unwrap_or(DEFAULT_STAGE_MAX);
        let host = |core: Core, spin: Duration, agent: bool, flush: Option<Arc<proxy::Client>>| {
            Arc::new(Host::new(
                core,
                board.clone(),
                world_ranks.clone(),
                opts.schedule,
                timeout,
                spin,
                agent,
                flush,
            ))
        };
        let spin = opts.spin.unwrap_or_default();
        let mut proxy_backend = None;
        let (driver, note): (Box<dyn Driver>, String) = match opts.engine {
            Engine::Proxy => {
                // Across nodes every collective goes to the proxies: the ranks'
                // own path has no network.
                let min = if proxy_net {
                    0
                } else {
                    opts.proxy_min.unwrap_or(0)
                };
                let own_copies = opts.own_copies.unwrap_or(false);
                let places = ProxyPlaces::of(&nodes);
                let client = Arc::new(proxy::Client::start(
                    board.clone(),
                    me,
                    size,
                    &opts.schedule,
                    timeout,
                    spin,
                    own_copies,
                    (places.leads(me), proxy_net),
                )?);
                // Every rank of a split takes part, whether its group spans nodes
                // or not: the groups' set-ups run on the parent's collectives.
                if proxy_net || !boot.uniform() {
                    let backend = places.connect(boot, &client, me, &nodes, timeout, proxy_net)?;
                    proxy_backend = proxy_net.then_some(backend);
                }
                let host = (min > 0).then(|| {
                    let core = Core::new(board.clone(), me, size, pids.clone(), None, stage_max);
                    // How long `wait` polls on this path: the proxy sleeps meanwhile,
                    // so the node has a core per rank again if it has one per rank.
                    let local = nodes.iter().filter(|&&n| n == nodes[me]).count();
                    (
                        host(core, default_spin(local), false, Some(client.clone())),
                        min,
                    )
                });
                let mut note = if min > 0 {
                    format!(
                        "progress in the node's proxy process for blocks of {min} bytes \
                         and more, inside test/wait below"
                    )
                } else {
                    "progress in the node's proxy process".to_string()
                };
                if own_copies {
                    note.push_str("; each rank copies its own block when it posts");
                }
                (Box::new(engines::proxy::Proxy { client, host }), note)
            }
            Engine::Thread => {
                let mut core = Core::new(board.clone(), me, size, pids, net, stage_max);
                let wake = opts.agent_wake.unwrap_or(AgentWake::Eager);
                core.agent_core = wake == AgentWake::Eager;
                let cpus = progress_cpus(&opts);
                let note = match &cpus {
                    Some(c) => format!("progress thread pinned to CPUs {c}"),
                    None => "progress thread unpinned: no progress core reserved \
                             (set HPC_PROGRESS_CPUSET or CommOptions::progress_cpus)"
                        .to_string(),
                };
                let note = format!("{note}; woken {}", wake.name());
                let driver = engines::thread::Thread::spawn(
                    host(core, spin, true, None),
                    cpus,
                    wake == AgentWake::Eager,
                )?;
                tracing::info!(rank = me, "{note}");
                (Box::new(driver), note)
            }
            _ => {
                let core = Core::new(board.clone(), me, size, pids, net, stage_max);
                let driver = engines::inline::Inline {
                    host: host(core, spin, false, None),
                };
                (Box::new(driver), "progress inside test/wait".to_string())
            }
        };
        // Everyone, the proxy included, mapped the board: its name can go (on an
        // error above, dropping `board_name` removed it).
        boot.allgather(&[])?;
        board_name.unlink();
        let note = match (&proxy_backend, spans) {
            (Some(b), _) => format!("{note}; other nodes through the proxies over {b}"),
            (None, true) => format!(
                "{note}; other nodes over {}",
                net_backend(&transport, &world_ranks, &nodes, me)
            ),
            (None, false) => note,
        };
        let mut comm = Comm::assemble(me, world_ranks, opts, timeout, driver, note);
        comm.nodes = nodes;
        comm.net = transport;
        Ok(comm)
    }

    fn assemble(
        rank: usize,
        world_ranks: Vec<usize>,
        opts: CommOptions,
        timeout: Duration,
        driver: Box<dyn Driver>,
        progress_note: String,
    ) -> Comm {
        let size = world_ranks.len();
        Comm {
            rank,
            size,
            world_ranks,
            opts,
            timeout,
            seq: AtomicU64::new(1),
            driver,
            progress_note,
            splits: AtomicU64::new(0),
            nodes: vec![0; size],
            net: None,
        }
    }

    /// This rank in the communicator.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The engine.
    pub fn engine(&self) -> Engine {
        self.opts.engine
    }

    /// The world rank of communicator rank `r`.
    pub fn world_rank(&self, r: usize) -> usize {
        self.world_ranks[r]
    }

    /// Where progress happens (e.g. "progress thread pinned to CPUs 1").
    pub fn progress_note(&self) -> &str {
        &self.progress_note
    }

    /// Splits the communicator by `color` (collective, like `MPI_Comm_split`):
    /// ranks with the same colour form a new communicator, ordered by `key`
    /// then by rank. The new communicator uses the same engine.
    pub fn split(&self, color: u32, key: i64) -> Result<Comm> {
        let mut mine = color.to_le_bytes().to_vec();
        mine.extend_from_slice(&key.to_le_bytes());
        let all = self.allgather_bytes(&mine)?;
        let mut members: Vec<(i64, usize)> = all
            .iter()
            .enumerate()
            .filter(|(_, b)| b[..4] == color.to_le_bytes())
            .map(|(r, b)| (i64::from_le_bytes(b[4..12].try_into().unwrap_or([0; 8])), r))
            .collect();
        members.sort();
        let members: Vec<usize> = members.into_iter().map(|(_, r)| r).collect();
        let rank = members.iter().position(|&r| r == self.rank).unwrap_or(0);
        let index = self.splits.fetch_add(1, Ordering::Relaxed);
        let world_ranks = members.iter().map(|&m| self.world_ranks[m]).collect();
        let split = engines::Split {
            color,
            key,
            members: &members,
            rank,
            index,
        };
        if let Some(driver) = self.driver.split(&split) {
            let mut comm = Comm::assemble(
                rank,
                world_ranks,
                self.opts.clone(),
                self.timeout,
                driver?,
                self.progress_note.clone(),
            );
            comm.nodes = members.iter().map(|&m| self.nodes[m]).collect();
            return Ok(comm);
        }
        let boot = SubBoot {
            parent: self,
            members,
            rank,
        };
        let mut opts = self.opts.clone();
        opts.progress_cpus = None;
        Comm::build(&boot, world_ranks, opts, self.timeout, self.net.clone())
    }

    /// A buffer of `len` zeroed elements that this communicator's engine reaches
    /// without a copy on the rank: in DPU placement of the `Proxy` engine,
    /// memory registered with the link to the proxy, which gets and puts it in
    /// place; with every other engine an ordinary allocation. See
    /// [`RegisteredBuf`](crate::RegisteredBuf).
    pub fn registered_buf<T: Elem>(&self, len: usize) -> Result<crate::RegisteredBuf<T>> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            Error::Unsupported(format!("a buffer of {len} elements does not fit in memory"))
        })?;
        Ok(match self.driver.register(bytes) {
            Some(r) => crate::RegisteredBuf::in_region(r?, len),
            None => crate::RegisteredBuf::on_heap(len),
        })
    }

    /// Allgather of byte strings of any length (blocking; used for setup).
    fn allgather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let n = self.size;
        let lens_in = [mine.len() as u64];
        let mut lens = vec![0u64; n];
        self.allgather(&lens_in, &mut lens)?;
        let counts: Vec<usize> = lens.iter().map(|&l| l as usize).collect();
        let mut all = vec![0u8; counts.iter().sum()];
        self.allgatherv(mine, &mut all, &counts)?;
        let mut out = Vec::with_capacity(n);
        let mut off = 0;
        for c in counts {
            out.push(all[off..off + c].to_vec());
            off += c;
        }
        Ok(out)
    }

    /// Starts a collective on raw byte buffers: on engine-owned copies
    /// (`staged`) or on the buffers themselves.
    fn start(
        &self,
        coll: Collective,
        send: &[u8],
        recv: &mut [u8],
        staged: bool,
    ) -> Result<Ticket> {
        coll.check_buffers(self.rank, self.size, send.len(), recv.len())?;
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let _span = tracing::debug_span!("collective", kind = %coll.kind(), seq, rank = self.rank)
            .entered();
        self.driver.start(Job::new(seq, coll, send, recv, staged))
    }

    fn req<'a>(&'a self, t: Ticket, out: Option<&'a mut [u8]>) -> Request<'a> {
        Request {
            comm: self,
            ticket: Some(t),
            out,
            _p: PhantomData,
        }
    }

    /// A scope whose requests use the caller's buffers directly (zero-copy);
    /// every collective started in it is finished before `scope` returns.
    pub fn scope<'env, F, R>(&'env self, f: F) -> R
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
    {
        let scope = Scope {
            comm: self,
            tickets: Mutex::new(Vec::new()),
            _p: PhantomData,
        };
        struct Guard<'s, 'e>(&'s Scope<'s, 'e>);
        impl Drop for Guard<'_, '_> {
            fn drop(&mut self) {
                let tickets = std::mem::take(&mut *lock(&self.0.tickets));
                for t in tickets {
                    self.0.comm.abandon(&t);
                }
            }
        }
        let _guard = Guard(&scope);
        f(&scope)
    }

    /// Makes sure a ticket's engine no longer touches its buffers: waits for it
    /// (until the timeout), then cancels it.
    fn abandon(&self, t: &Ticket) {
        let e = &*self.driver;
        if t.test(e) {
            t.discard(e);
            return;
        }
        let _ = t.wait(e, None);
        t.cancel(e);
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        self.driver.shutdown();
    }
}

/// A non-blocking collective in flight; borrows its buffers until
/// [`Request::wait`]. Dropping an unfinished request waits for it.
#[must_use = "a collective finishes (and its result is copied) only in test/wait"]
pub struct Request<'a> {
    comm: &'a Comm,
    ticket: Option<Ticket>,
    out: Option<&'a mut [u8]>,
    _p: PhantomData<&'a mut [u8]>,
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("engine", &self.comm.engine())
            .finish()
    }
}

impl Request<'_> {
    /// Whether the collective finished (then [`Request::wait`] returns at
    /// once). With the `Inline` engine this is where progress happens; with
    /// `Thread` it happens here too unless the progress thread is at it.
    pub fn test(&mut self) -> bool {
        self.ticket
            .as_ref()
            .is_none_or(|t| t.test(&*self.comm.driver))
    }

    /// Waits for the collective and copies a staged result into the buffer.
    pub fn wait(mut self) -> Result<()> {
        match self.ticket.take() {
            Some(t) => t.wait(&*self.comm.driver, self.out.take()),
            None => Ok(()),
        }
    }

    /// Waits for every request; the first error is returned (all are waited for).
    pub fn wait_all(reqs: impl IntoIterator<Item = Self>) -> Result<()> {
        let mut first = Ok(());
        for r in reqs {
            let res = r.wait();
            if first.is_ok() {
                first = res;
            }
        }
        first
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            if let Err(e) = t.wait(&*self.comm.driver, self.out.take()) {
                tracing::warn!(error = %e.chain(), "an unwaited collective failed");
            }
        }
    }
}

/// A region in which requests use the caller's buffers directly (see
/// [`Comm::scope`]).
pub struct Scope<'scope, 'env: 'scope> {
    comm: &'env Comm,
    tickets: Mutex<Vec<Ticket>>,
    _p: PhantomData<&'scope mut &'scope ()>,
}

impl std::fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope").field("comm", &self.comm).finish()
    }
}

/// A request of a [`Scope`] (zero-copy; the scope finishes it if leaked).
pub struct ScopedRequest<'scope> {
    comm: &'scope Comm,
    ticket: Option<Ticket>,
}

impl std::fmt::Debug for ScopedRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopedRequest").finish()
    }
}

impl ScopedRequest<'_> {
    /// Whether the collective finished.
    pub fn test(&mut self) -> bool {
        self.ticket
            .as_ref()
            .is_none_or(|t| t.test(&*self.comm.driver))
    }

    /// Waits for the collective.
    pub fn wait(mut self) -> Result<()> {
        match self.ticket.take() {
            Some(t) => t.wait(&*self.comm.driver, None),
            None => Ok(()),
        }
    }
}

impl Drop for ScopedRequest<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            self.comm.abandon(&t);
        }
    }
}

macro_rules! collectives {
    ($(
        $(#[$doc:meta])*
        fn $name:ident / $blocking:ident <$($g:ident: $b:ident),*>
            ($($arg:ident: $ty:ty),*) => |$comm:ident| ($coll:expr, $send:expr, $recv:expr);
    )*) => {
        impl Comm {$(
            $(#[$doc])*
            ///
            /// Staged (the engine works on its own copies; the result is copied
            /// into the receive buffer in `test`/`wait`).
            pub fn $name<'a, $($g: $b + ?Sized),*>(&'a self, $($arg: $ty),*) -> Result<Request<'a>> {
                let $comm = self;
                let _ = $comm;
                let coll = $coll;
                let send: &[u8] = $send;
                let recv: &'a mut [u8] = $recv;
                let t = self.start(coll, send, recv, true)?;
                Ok(self.req(t, Some(recv)))
            }

            /// Blocking form of the non-blocking collective of the same name.
            #[allow(clippy::extra_unused_lifetimes)]
            pub fn $blocking<'a, $($g: $b + ?Sized),*>(&self, $($arg: $ty),*) -> Result<()> {
                let $comm = self;
                let _ = $comm;
                let coll = $coll;
                let send: &[u8] = $send;
                let recv: &mut [u8] = $recv;
                let t = self.start(coll, send, recv, false)?;
                let r = t.wait(&*self.driver, None);
                if r.is_err() {
                    self.abandon(&t);
                }
                r
            }
        )*}

        impl<'scope, 'env> Scope<'scope, 'env> {$(
            $(#[$doc])*
            ///
            /// Zero-copy: the engine reads and writes the buffers themselves.
            pub fn $name<'a: 'scope, $($g: $b + ?Sized),*>(&'scope self, $($arg: $ty),*) -> Result<ScopedRequest<'scope>> {
                let $comm = self.comm;
                let _ = $comm;
                let coll = $coll;
                let send: &[u8] = $send;
                let recv: &mut [u8] = $recv;
                let t = self.comm.start(coll, send, recv, false)?;
                lock(&self.tickets).push(t.clone());
                Ok(ScopedRequest { comm: self.comm, ticket: Some(t) })
            }
        )*}
    };
}

fn empty_mut() -> &'static mut [u8] {
    &mut []
}

fn per_rank(total: usize, size: usize, what: &'static str) -> Result<usize> {
    if total % size != 0 {
        return Err(Error::Invalid(CollectiveError::CountMismatch {
            what,
            expected: total.next_multiple_of(size),
            got: total,
        }));
    }
    Ok(total / size)
}

collectives! {
    /// Barrier.
    fn ibarrier / barrier <>() => |c| (Collective::Barrier, &[], empty_mut());
    /// Broadcast of `buf` from `root` to every rank.
    fn ibcast / bcast <B: BufMut>(buf: &'a mut B, root: usize) => |c| (
        Collective::Broadcast { root, count: buf.elems()?.len(), dtype: B::Elem::DTYPE },
        &[], bytes_mut(buf.elems_mut()?));
    /// Allgather: `send` of every rank lands in block `rank` of `recv`.
    fn iallgather / allgather <S: Buf, R: BufMut>(send: &'a S, recv: &'a mut R) => |c| (
        Collective::Allgather { count: send.elems()?.len(), dtype: S::Elem::DTYPE },
        bytes(send.elems()?), bytes_mut(recv.elems_mut()?));
    /// Allgatherv: rank `r` contributes `counts[r]` elements, packed in rank order.
    fn iallgatherv / allgatherv <S: Buf, R: BufMut>(send: &'a S, recv: &'a mut R, counts: &[usize]) => |c| (
        Collective::Allgatherv { counts: counts.to_vec(), dtype: S::Elem::DTYPE },
        bytes(send.elems()?), bytes_mut(recv.elems_mut()?));
    /// Alltoall: block `j` of `send` goes to rank `j` (buffers hold `size` blocks).
    fn ialltoall / alltoall <S: Buf, R: BufMut>(send: &'a S, recv: &'a mut R) => |c| (
        Collective::Alltoall { count: per_rank(send.elems()?.len(), c.size, "alltoall send length (a multiple of the size)")?, dtype: S::Elem::DTYPE },
        bytes(send.elems()?), bytes_mut(recv.elems_mut()?));
    /// Alltoallv with per-peer element counts.
    fn ialltoallv / alltoallv <S: Buf, R: BufMut>(send: &'a S, send_counts: &[usize], recv: &'a mut R, recv_counts: &[usize]) => |c| (
        Collective::Alltoallv { send_counts: send_counts.to_vec(), recv_counts: recv_counts.to_vec(), dtype: S::Elem::DTYPE },
        bytes(send.elems()?), bytes_mut(recv.elems_mut()?));
    /// Allreduce of `send` into `recv` on every rank.
    fn iallreduce / allreduce <S: Buf, R: BufMut>(send: &'a S, recv: &'a mut R, op: ReduceOp) => |c| (
        Collective::Allreduce { count: send.elems()?.len(), dtype: S::Elem::DTYPE, op },
        bytes(send.elems()?), bytes_mut(recv.elems_mut()?));
    /// Reduce of `send` into `recv` of `root` (other ranks' `recv` may be empty).
    fn ireduce / reduce <S: Buf, R: BufMut>(send: &'a S, recv: &'a mut R, op: ReduceOp, root: usize) => |c| (
        Collective::Reduce { root, count: send.elems()?.len(), dtype: S::Elem::DTYPE, op },
        bytes(send.elems()?), bytes_mut(recv.elems_mut()?));
    /// Reduce-scatter: block `r` (of `counts[r]` elements) of the reduction lands on rank `r`.
    fn ireduce_scatter / reduce_scatter <S: Buf, R: BufMut>(send: &'a S, recv: &'a mut R, counts: &[usize], op: ReduceOp) => |c| (
        Collective::ReduceScatter { counts: counts.to_vec(), dtype: S::Elem::DTYPE, op },
        bytes(send.elems()?), bytes_mut(recv.elems_mut()?));
    /// Gather of every `send` into `recv` of `root`.
    fn igather / gather <S: Buf, R: BufMut>(send: &'a S, recv: &'a mut R, root: usize) => |c| (
        Collective::Gather { root, count: send.elems()?.len(), dtype: S::Elem::DTYPE },
        bytes(send.elems()?), bytes_mut(recv.elems_mut()?));
    /// Scatter of `root`'s `send` (`size` blocks of `recv.len()`) to every `recv`.
    fn iscatter / scatter <S: Buf, R: BufMut>(send: &'a S, recv: &'a mut R, root: usize) => |c| (
        Collective::Scatter { root, count: recv.elems()?.len(), dtype: S::Elem::DTYPE },
        bytes(send.elems()?), bytes_mut(recv.elems_mut()?));
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn engine_names_parse_in_any_case_and_errors_list_the_engines() {
        for e in Engine::ALL {
            let upper = e.name().to_ascii_uppercase();
            let title = format!("{}{}", &upper[..1], &e.name()[1..]);
            for text in [
                e.name().to_string(),
                upper,
                title,
                format!(" {} ", e.name()),
            ] {
                assert_eq!(text.parse::<Engine>().unwrap(), *e, "{text:?}");
            }
        }
        let msg = "fast".parse::<Engine>().unwrap_err().to_string();
        assert!(msg.contains("\"fast\""), "{msg}");
        assert!(msg.contains("inline, thread, proxy"), "{msg}");
        assert!("".parse::<Engine>().is_err());
        assert!("threads".parse::<Engine>().is_err());
    }

    #[test]
    fn remove_boards_of_removes_that_process_s_boards_only() {
        // Pids that no process has (above the kernel's pid_max).
        let (dead, other) = (429_496_729u32, 4_294_967_293u32);
        let mine = [
            format!("/dev/shm/{BOARD_PREFIX}{dead}-0-1"),
            format!("/dev/shm/{BOARD_PREFIX}{dead}-3-ff"),
        ];
        // A pid whose digits start the same, and an unrelated file.
        let keep = [
            format!("/dev/shm/{BOARD_PREFIX}{dead}4-0-1"),
            format!("/dev/shm/{BOARD_PREFIX}{other}-0-1"),
        ];
        for f in mine.iter().chain(&keep) {
            std::fs::write(f, b"x").unwrap();
        }
        assert_eq!(remove_boards_of(dead), 2);
        for f in &mine {
            assert!(!std::path::Path::new(f).exists(), "{f}");
        }
        for f in &keep {
            assert!(std::path::Path::new(f).exists(), "{f}");
            std::fs::remove_file(f).unwrap();
        }
        assert_eq!(remove_boards_of(dead), 0);
    }

    #[test]
    fn a_board_name_is_removed_when_dropped_or_unlinked() {
        let p = std::env::temp_dir().join(format!("hpc-board-name-{}", std::process::id()));
        std::fs::write(&p, b"x").unwrap();
        drop(BoardName(Some(p.clone())));
        assert!(!p.exists());
        std::fs::write(&p, b"x").unwrap();
        let mut n = BoardName(Some(p.clone()));
        n.unlink();
        assert!(!p.exists());
        std::fs::write(&p, b"y").unwrap();
        drop(n); // already unlinked: a file of the same name made later stays
        assert!(p.exists());
        std::fs::remove_file(&p).unwrap();
    }
}
