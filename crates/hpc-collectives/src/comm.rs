//! Communicators and non-blocking collectives run by an engine.
//!
//! A [`Comm`] runs the [`Schedule`](crate::Schedule)s of this crate over
//! shared memory between the ranks of a node and, for `Inline` and `Thread`,
//! over `hpc-rdma` (TCP, or verbs where present) to ranks on other nodes, with
//! one of four [`Engine`]s:
//!
//! | engine | who advances a collective | data path |
//! |---|---|---|
//! | [`Engine::Inline`] | the application, inside `test`/`wait` (what MPI libraries do) | small messages through the board's staging slots, large ones by one `process_vm_readv`, receiver-driven |
//! | [`Engine::Thread`] | a progress thread per process, pinned to the progress core that `hpc-topology` reserved, and the application in `test`/`wait`; the thread sleeps on a futex until a large copy or a round to post needs it, or polls every millisecond while collectives are in flight ([`AgentWake`]) | same |
//! | [`Engine::Proxy`] | a separate process per node that runs the schedules of all local ranks (the role of a DPU); where the node has no core for it, collectives with blocks under [`CommOptions::proxy_min`] run on the ranks as with `Inline` | the proxy maps the ranks' [`SharedBuf`](crate::SharedBuf)s and reaches other buffers by cross-memory attach, keeps scratch in its own memory |
//! | `Engine::Mpi` (feature `mpi`) | the MPI library's own `MPI_I*` collectives | the MPI library's |
//!
//! # Requests and buffer safety
//!
//! `comm.ialltoall(&send, &mut recv)` returns a [`Request`] that borrows both
//! buffers until it is waited for, so they cannot be touched early:
//!
//! ```compile_fail
//! # fn f(comm: &hpc_collectives::Comm) -> Result<(), hpc_collectives::Error> {
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
//! use hpc_collectives::{Comm, Engine};
//! let world = hpc_runtime::World::init()?;
//! let comm = Comm::new(&world, Engine::Thread)?;
//! let send = vec![1.0f32; 1024 * comm.size()];
//! let mut recv = vec![0.0f32; 1024 * comm.size()];
//! comm.scope(|s| -> Result<(), hpc_collectives::Error> {
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
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use half::{bf16, f16};
use hpc_runtime::World;

use crate::board::{self, Board};
use crate::collective::{Collective, CollectiveError, Options};
use crate::engine::{self, lock, Buffers, Core, Op, Shared, Status};
use crate::op::{DataType, ReduceOp};
use crate::proxy;

/// Errors of communicators and their collectives.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Invalid arguments: buffer too small, counts of the wrong length, ...
    #[error(transparent)]
    Invalid(#[from] CollectiveError),
    /// Another rank sent a message of a different size than this rank
    /// expects (the ranks called the collective with different counts).
    #[error("count mismatch with rank {rank}: {detail}")]
    CountMismatch {
        /// The other rank (rank in the world).
        rank: usize,
        /// What differed.
        detail: String,
    },
    /// A rank the collective waits for is gone.
    #[error("rank {rank} is lost (its process exited) during a collective")]
    RankLost {
        /// The lost rank (rank in the world).
        rank: usize,
    },
    /// The collective did not finish within the communicator's timeout.
    #[error("collective timed out after {after:?}, waiting for ranks {waiting_for:?}")]
    Timeout {
        /// The timeout.
        after: Duration,
        /// World ranks the collective was still waiting for.
        waiting_for: Vec<usize>,
    },
    /// The engine stopped (its progress thread or proxy process is gone).
    #[error("the {0} engine stopped")]
    Stopped(&'static str),
    /// An `ndarray` view is not contiguous in standard order.
    #[error("array is not contiguous in standard (row-major) order; use `.as_standard_layout()`")]
    NotContiguous,
    /// The engine cannot serve this job (e.g. ranks on several nodes).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Failure of the underlying data movement or setup.
    #[error("transport: {0}")]
    Transport(String),
    /// Failure of the runtime used to set the communicator up.
    #[error(transparent)]
    Runtime(#[from] hpc_runtime::Error),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

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

impl std::str::FromStr for Engine {
    type Err = Error;
    fn from_str(s: &str) -> Result<Engine> {
        match s {
            "inline" => Ok(Engine::Inline),
            "thread" => Ok(Engine::Thread),
            "proxy" => Ok(Engine::Proxy),
            #[cfg(feature = "mpi")]
            "mpi" => Ok(Engine::Mpi),
            o => Err(Error::Unsupported(format!("engine {o:?}"))),
        }
    }
}

/// Element types collectives move: integer and float primitives, `f16`, `bf16`.
///
/// # Safety
/// Implementors must be plain data: no padding, every bit pattern valid, and
/// [`Elem::DTYPE`] of the same size.
pub unsafe trait Elem: Copy + Send + Sync + 'static {
    /// The matching [`DataType`].
    const DTYPE: DataType;
}

macro_rules! elem {
    ($($t:ty => $d:ident),*) => {$(
        // SAFETY: a primitive numeric type: no padding, all bit patterns valid.
        unsafe impl Elem for $t { const DTYPE: DataType = DataType::$d; }
    )*};
}
elem!(i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32,
      u64 => U64, f16 => F16, bf16 => Bf16, f32 => F32, f64 => F64);

/// A buffer collectives can read: slices, `Vec`s and contiguous `ndarray` arrays.
pub trait Buf {
    /// Element type.
    type Elem: Elem;
    /// The elements, or [`Error::NotContiguous`].
    fn elems(&self) -> Result<&[Self::Elem]>;
}

/// A buffer collectives can write.
pub trait BufMut: Buf {
    /// The elements, or [`Error::NotContiguous`].
    fn elems_mut(&mut self) -> Result<&mut [Self::Elem]>;
}

impl<T: Elem> Buf for [T] {
    type Elem = T;
    fn elems(&self) -> Result<&[T]> {
        Ok(self)
    }
}
impl<T: Elem> BufMut for [T] {
    fn elems_mut(&mut self) -> Result<&mut [T]> {
        Ok(self)
    }
}
impl<T: Elem> Buf for Vec<T> {
    type Elem = T;
    fn elems(&self) -> Result<&[T]> {
        Ok(self)
    }
}
impl<T: Elem> BufMut for Vec<T> {
    fn elems_mut(&mut self) -> Result<&mut [T]> {
        Ok(self)
    }
}
impl<T: Elem, const N: usize> Buf for [T; N] {
    type Elem = T;
    fn elems(&self) -> Result<&[T]> {
        Ok(self)
    }
}
impl<T: Elem, const N: usize> BufMut for [T; N] {
    fn elems_mut(&mut self) -> Result<&mut [T]> {
        Ok(self)
    }
}
impl<T: Elem, S: ndarray::Data<Elem = T>, D: ndarray::Dimension> Buf for ndarray::ArrayBase<S, D> {
    type Elem = T;
    fn elems(&self) -> Result<&[T]> {
        self.as_slice().ok_or(Error::NotContiguous)
    }
}
impl<T: Elem, S: ndarray::DataMut<Elem = T>, D: ndarray::Dimension> BufMut
    for ndarray::ArrayBase<S, D>
{
    fn elems_mut(&mut self) -> Result<&mut [T]> {
        self.as_slice_mut().ok_or(Error::NotContiguous)
    }
}

fn bytes<T: Elem>(s: &[T]) -> &[u8] {
    // SAFETY: `Elem` types are plain data without padding; same memory, same lifetime.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), std::mem::size_of_val(s)) }
}

fn bytes_mut<T: Elem>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: `Elem` types accept every bit pattern; same memory, same lifetime.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast(), std::mem::size_of_val(s)) }
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

fn proxy_min(opts: &CommOptions, local: usize) -> usize {
    opts.proxy_min.unwrap_or_else(|| {
        match std::env::var(hpc_runtime::env::PROXY_MIN)
            .ok()
            .and_then(|v| v.trim().parse().ok())
        {
            Some(v) => v,
            None if local + 1 > online_cores() => DEFAULT_PROXY_MIN,
            None => 0,
        }
    })
}

fn stage_max(opts: &CommOptions) -> usize {
    opts.stage_max.unwrap_or_else(|| {
        std::env::var(hpc_runtime::env::STAGE_MAX)
            .ok()
            .and_then(|v| v.trim().parse().ok())
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
/// processes.
fn default_spin(local: usize) -> Duration {
    if let Some(us) = std::env::var(hpc_runtime::env::SPIN_US)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        return Duration::from_micros(us);
    }
    if local <= online_cores() {
        Duration::from_micros(50)
    } else {
        Duration::ZERO
    }
}

enum Backend {
    Local {
        shared: Arc<Shared>,
        board: Arc<Board>,
        agent: Option<JoinHandle<()>>,
    },
    Proxy {
        client: Box<proxy::Client>,
        /// The ranks' own engine for collectives below `proxy_min`.
        host: Option<Host>,
    },
    #[cfg(feature = "mpi")]
    Mpi(crate::mpi_engine::MpiComm),
}

/// The `Proxy` engine's host path: collectives whose blocks are smaller than
/// `min` bytes run on the ranks, as with `Inline`, over the same board.
struct Host {
    shared: Arc<Shared>,
    board: Arc<Board>,
    min: usize,
    /// How long `wait` polls on this path: the proxy sleeps meanwhile, so the
    /// node has a core per rank again if it has one per rank.
    spin: Duration,
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
    engine: Engine,
    timeout: Duration,
    spin: Duration,
    stage_max: Option<usize>,
    agent_wake: Option<AgentWake>,
    proxy_min: Option<usize>,
    own_copies: Option<bool>,
    opts: Options,
    seq: AtomicU64,
    backend: Backend,
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
            .field("engine", &self.engine)
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
}

/// The lowest rank on `r`'s node: it creates the node's board.
fn node_leader(boot: &dyn Boot, r: usize) -> usize {
    let node = boot.node_of(r);
    (0..boot.size())
        .find(|&q| boot.node_of(q) == node)
        .unwrap_or(r)
}

/// Creates the boards of a new communicator, one per node: the node's lowest
/// rank creates it, the node's ranks map it and publish their pids, then that
/// rank removes the file. Ranks on other nodes get pid 0 (never "dead").
fn make_board(boot: &dyn Boot, extra: usize) -> Result<(Arc<Board>, Vec<u32>)> {
    let (me, size) = (boot.rank(), boot.size());
    let leader = node_leader(boot, me);
    let mut path = Vec::new();
    let mut created = None;
    if me == leader {
        let p = PathBuf::from(format!(
            "/dev/shm/hpc-coll-{}-{}-{:x}",
            std::process::id(),
            BOARDS.fetch_add(1, Ordering::Relaxed),
            hpc_runtime::random_u64()
        ));
        let b = Board::create(&p, size + extra)
            .map_err(|e| Error::Transport(format!("creating the board {}: {e}", p.display())));
        match b {
            Ok(b) => {
                path = p.to_string_lossy().into_owned().into_bytes();
                created = Some(b);
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
        return Err(Error::Transport(format!(
            "rank {r} could not create its node's board"
        )));
    }
    let p = PathBuf::from(String::from_utf8_lossy(&parts[leader]).into_owned());
    let board = match created {
        Some(b) => b,
        None => Board::open(&p, size + extra)
            .map_err(|e| Error::Transport(format!("mapping the board {}: {e}", p.display())))?,
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
    Ok((Arc::new(board), pids))
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

/// The refusal of a Proxy communicator whose ranks are on several nodes.
fn proxy_spans_nodes() -> Error {
    Error::Unsupported(
        "the proxy engine runs within one node (its proxy reaches the ranks through their \
         memory); across nodes use the inline or thread engine"
            .into(),
    )
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
        std::env::var(hpc_runtime::env::PROGRESS_CPUSET)
            .ok()
            .and_then(|s| hpc_topology::CpuSet::parse_list(&s).ok())
    })
}

impl Comm {
    /// A communicator of every rank of `world` with `engine` (collective).
    pub fn new(world: &World, engine: Engine) -> Result<Comm> {
        Comm::with_options(world, CommOptions::new(engine))
    }

    /// Like [`Comm::new`] with explicit options (collective).
    pub fn with_options(world: &World, mut opts: CommOptions) -> Result<Comm> {
        let timeout = opts.timeout.unwrap_or_else(|| world.timeout());
        // The proxy process needs a core of its own too.
        let busy = world.local_size() + usize::from(opts.engine == Engine::Proxy);
        opts.spin = Some(opts.spin.unwrap_or_else(|| default_spin(busy)));
        if opts.engine == Engine::Proxy {
            opts.proxy_min = Some(proxy_min(&opts, world.local_size()));
            opts.own_copies = Some(own_copies(&opts, world.local_size()));
        }
        opts.agent_wake = Some(opts.agent_wake.unwrap_or_else(|| {
            AgentWake::default_for(world.local_size(), progress_cpus(&opts).is_some())
        }));
        #[cfg(feature = "mpi")]
        if opts.engine == Engine::Mpi {
            let backend = Backend::Mpi(crate::mpi_engine::MpiComm::new(world)?);
            return Ok(Comm::assemble(
                world.rank(),
                (0..world.size()).collect(),
                opts,
                timeout,
                backend,
                "the MPI library progresses".into(),
            ));
        }
        let net = if (0..world.size()).any(|r| !world.same_node(0, r)) {
            if opts.engine == Engine::Proxy {
                return Err(proxy_spans_nodes());
            }
            let t = hpc_rdma::Transport::new(world)
                .map_err(|e| Error::Transport(format!("the network path across nodes: {e}")))?;
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
        if spans && opts.engine == Engine::Proxy {
            return Err(proxy_spans_nodes());
        }
        let transport = if spans { transport } else { None };
        if spans && transport.is_none() {
            return Err(Error::Unsupported(
                "a communicator across nodes needs its parent's network path".into(),
            ));
        }
        let net = match &transport {
            Some(t) => {
                // One id per communicator on a transport, agreed by its members.
                let all = boot.allgather(&NET_IDS.load(Ordering::Relaxed).to_le_bytes())?;
                let id = all
                    .iter()
                    .map(|b| u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])))
                    .max()
                    .unwrap_or(0);
                NET_IDS.store(id + 1, Ordering::Relaxed);
                Some(engine::Net {
                    t: t.clone(),
                    world: world_ranks.clone(),
                    local: nodes.iter().map(|&n| n == nodes[me]).collect(),
                    id: (id & 0xffff) as u16,
                })
            }
            None => None,
        };
        let extra = usize::from(opts.engine == Engine::Proxy);
        let (board, pids) = make_board(boot, extra)?;
        let (backend, note) = match opts.engine {
            Engine::Proxy => {
                let spin = opts.spin.unwrap_or_default();
                let min = opts.proxy_min.unwrap_or(0);
                let host = (min > 0).then(|| {
                    let mut core = Core::new(board.clone(), me, size, pids.clone(), None);
                    core.stage_max = stage_max(&opts);
                    let local = nodes.iter().filter(|&&n| n == nodes[me]).count();
                    Host {
                        shared: Arc::new(Shared::new(core)),
                        board: board.clone(),
                        min,
                        spin: default_spin(local),
                    }
                });
                let c = proxy::Client::start(
                    board.clone(),
                    me,
                    size,
                    &opts.schedule,
                    timeout,
                    spin,
                    opts.own_copies.unwrap_or(false),
                )?;
                let mut note = if min > 0 {
                    format!(
                        "progress in the node's proxy process for blocks of {min} bytes \
                         and more, inside test/wait below"
                    )
                } else {
                    "progress in the node's proxy process".to_string()
                };
                if opts.own_copies == Some(true) {
                    note.push_str("; each rank copies its own block when it posts");
                }
                (
                    Backend::Proxy {
                        client: Box::new(c),
                        host,
                    },
                    note,
                )
            }
            _ => {
                let mut core = Core::new(board.clone(), me, size, pids, net);
                core.stage_max = stage_max(&opts);
                let wake = opts.agent_wake.unwrap_or(AgentWake::Eager);
                core.agent_core = opts.engine == Engine::Thread && wake == AgentWake::Eager;
                let shared = Arc::new(Shared::new(core));
                let (agent, note) = if opts.engine == Engine::Thread {
                    let cpus = progress_cpus(&opts);
                    let note = match &cpus {
                        Some(c) => format!("progress thread pinned to CPUs {c}"),
                        None => "progress thread unpinned: no progress core reserved \
                                 (set HPC_PROGRESS_CPUSET or CommOptions::progress_cpus)"
                            .to_string(),
                    };
                    let note = format!("{note}; woken {}", wake.name());
                    board.set_agent_eager(me, wake == AgentWake::Eager);
                    let (s, b) = (shared.clone(), board.clone());
                    let h = std::thread::Builder::new()
                        .name(format!("hpc-progress-{me}"))
                        .spawn(move || {
                            if let Some(c) = cpus {
                                if let Err(e) = hpc_topology::bind_current_thread(&c) {
                                    tracing::warn!(error = %e, "could not pin the progress thread");
                                }
                            }
                            engine::raise_priority();
                            engine::agent_loop(s, b, me)
                        })
                        .map_err(|e| {
                            Error::Transport(format!("spawning the progress thread: {e}"))
                        })?;
                    tracing::info!(rank = me, "{note}");
                    (Some(h), note)
                } else {
                    (None, "progress inside test/wait".to_string())
                };
                (
                    Backend::Local {
                        shared,
                        board: board.clone(),
                        agent,
                    },
                    note,
                )
            }
        };
        // Everyone mapped the board: its name can go.
        boot.allgather(&[])?;
        if me == node_leader(boot, me) {
            let _ = std::fs::remove_file(board.path());
        }
        let note = if spans {
            format!(
                "{note}; other nodes over {}",
                net_backend(&transport, &world_ranks, &nodes, me)
            )
        } else {
            note
        };
        let mut comm = Comm::assemble(me, world_ranks, opts, timeout, backend, note);
        comm.nodes = nodes;
        comm.net = transport;
        Ok(comm)
    }

    fn assemble(
        rank: usize,
        world_ranks: Vec<usize>,
        opts: CommOptions,
        timeout: Duration,
        backend: Backend,
        progress_note: String,
    ) -> Comm {
        let world_ranks_len = world_ranks.len();
        Comm {
            rank,
            size: world_ranks.len(),
            world_ranks,
            engine: opts.engine,
            timeout,
            spin: opts.spin.unwrap_or_default(),
            stage_max: opts.stage_max,
            agent_wake: opts.agent_wake,
            proxy_min: opts.proxy_min,
            own_copies: opts.own_copies,
            opts: opts.schedule,
            seq: AtomicU64::new(1),
            backend,
            progress_note,
            splits: AtomicU64::new(0),
            nodes: vec![0; world_ranks_len],
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
        self.engine
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
        self.splits.fetch_add(1, Ordering::Relaxed);
        let world_ranks = members.iter().map(|&m| self.world_ranks[m]).collect();
        #[cfg(feature = "mpi")]
        if let Backend::Mpi(m) = &self.backend {
            let sub = m.split(color, key)?;
            let mut opts = CommOptions::new(Engine::Mpi);
            opts.schedule = self.opts;
            opts.spin = Some(self.spin);
            return Ok(Comm::assemble(
                rank,
                world_ranks,
                opts,
                self.timeout,
                Backend::Mpi(sub),
                self.progress_note.clone(),
            ));
        }
        let boot = SubBoot {
            parent: self,
            members,
            rank,
        };
        let mut opts = CommOptions::new(self.engine);
        opts.schedule = self.opts;
        opts.spin = Some(self.spin);
        opts.stage_max = self.stage_max;
        opts.agent_wake = self.agent_wake;
        opts.proxy_min = self.proxy_min;
        opts.own_copies = self.own_copies;
        opts.progress_cpus = None;
        Comm::build(&boot, world_ranks, opts, self.timeout, self.net.clone())
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

    /// Starts a collective on raw byte buffers.
    fn start(
        &self,
        coll: Collective,
        send: &[u8],
        recv: &mut [u8],
        direct: bool,
    ) -> Result<Ticket> {
        coll.check_buffers(self.rank, self.size, send.len(), recv.len())?;
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let _span = tracing::debug_span!("collective", kind = %coll.kind(), seq, rank = self.rank)
            .entered();
        let host = match &self.backend {
            Backend::Local { shared, board, .. } => Some((shared, board)),
            Backend::Proxy {
                host: Some(h),
                client,
            } if coll.block_bytes().is_some_and(|b| b < h.min) => {
                // Descriptors queued for a full ring go out while this one runs.
                client.flush();
                Some((&h.shared, &h.board))
            }
            _ => None,
        };
        match (&self.backend, host) {
            (_, Some((shared, board))) => {
                let sched = coll.schedule(self.rank, self.size, &self.opts)?;
                let (send_p, recv_p, stage) = if direct {
                    (send.as_ptr(), recv.as_mut_ptr(), None)
                } else {
                    let s = send.to_vec();
                    let mut r = recv.to_vec();
                    let rp = r.as_mut_ptr();
                    (s.as_ptr(), rp, Some((s, r)))
                };
                let bufs = Buffers {
                    send: send_p,
                    send_len: send.len(),
                    recv: recv_p,
                    recv_len: recv.len(),
                    scratch: vec![0u8; sched.scratch_bytes],
                    _stage: stage,
                };
                let op = Op::new(seq, sched, bufs);
                {
                    let mut core = lock(&shared.core);
                    if core.stopped {
                        return Err(Error::Stopped(self.engine.name()));
                    }
                    core.submit(op.clone());
                    // Post the first round now, from the caller's thread: a hand-off
                    // to the agent would be the largest cost of a small collective
                    // (and a staged send completes right here).
                    core.progress();
                    if self.engine == Engine::Thread
                        && (core.has_output()
                            || (board.agent_idle(self.rank) && !op.done.load(Ordering::Acquire)))
                    {
                        // A full ring (the agent retries), or an agent that has
                        // stopped polling: it must see this collective.
                        board.wake_agent(self.rank);
                    }
                }
                Ok(Ticket::Local(op))
            }
            (Backend::Proxy { client, .. }, None) => Ok(Ticket::Proxy(Arc::new(
                client.submit(seq, &coll, send, recv, direct)?,
            ))),
            #[cfg(feature = "mpi")]
            (Backend::Mpi(m), None) => {
                Ok(Ticket::Mpi(Arc::new(m.start(&coll, send, recv, direct)?)))
            }
            (Backend::Local { .. }, None) => unreachable!("the local backend is its own host"),
        }
    }

    /// The ranks' own engine: the `Inline`/`Thread` backend, or the `Proxy`
    /// engine's host path for small collectives; with the `wait` spin for it.
    fn host(&self) -> Option<(&Arc<Shared>, &Arc<Board>, Duration)> {
        match &self.backend {
            Backend::Local { shared, board, .. } => Some((shared, board, self.spin)),
            Backend::Proxy { host: Some(h), .. } => Some((&h.shared, &h.board, h.spin)),
            _ => None,
        }
    }

    /// Whether `t` finished (advancing it with the `Inline` engine).
    fn poll(&self, t: &Ticket) -> bool {
        match (t, &self.backend, self.host()) {
            (Ticket::Local(op), _, Some((shared, _, _))) => {
                if !op.done.load(Ordering::Acquire) {
                    if self.engine != Engine::Thread {
                        lock(&shared.core).progress();
                    } else if let Ok(mut core) = shared.core.try_lock() {
                        // The Thread engine's agent is not woken for small
                        // messages (see `Core::flush_peer`): a testing thread
                        // moves them, unless the agent is at it already.
                        core.progress();
                    }
                }
                op.done.load(Ordering::Acquire)
            }
            (Ticket::Proxy(p), Backend::Proxy { client, .. }, _) => client.poll(p),
            #[cfg(feature = "mpi")]
            (Ticket::Mpi(p), Backend::Mpi(m), _) => m.test(p),
            #[allow(unreachable_patterns)]
            _ => true,
        }
    }

    /// Waits for `t` to finish or fail, then takes its outcome; `out` receives
    /// the staged result.
    fn finish(&self, t: &Ticket, out: Option<&mut [u8]>) -> Result<()> {
        match (t, &self.backend, self.host()) {
            (Ticket::Local(op), _, Some((shared, board, spin))) => {
                self.wait_local(op, shared, board, spin);
                let mut d = lock(&op.data);
                match std::mem::replace(&mut d.status, Status::Done) {
                    Status::Failed(e) => {
                        d.status = Status::Failed(Error::Stopped("(already reported)"));
                        Err(match e {
                            Error::CountMismatch { rank, detail } => Error::CountMismatch {
                                rank: self.world_ranks[rank],
                                detail,
                            },
                            Error::RankLost { rank } if rank < self.size => Error::RankLost {
                                rank: self.world_ranks[rank],
                            },
                            e => e,
                        })
                    }
                    _ => {
                        if let (Some(out), Some((_, r))) = (out, &d.bufs._stage) {
                            out.copy_from_slice(r);
                        }
                        Ok(())
                    }
                }
            }
            (Ticket::Proxy(p), Backend::Proxy { client, .. }, _) => client.wait(p, out),
            #[cfg(feature = "mpi")]
            (Ticket::Mpi(p), Backend::Mpi(m), _) => m.wait(p, out),
            #[allow(unreachable_patterns)]
            _ => Err(Error::Stopped("mismatched")),
        }
    }

    fn wait_local(&self, op: &Arc<Op>, shared: &Shared, board: &Board, spin: Duration) {
        if op.done.load(Ordering::Acquire) {
            return;
        }
        let t0 = Instant::now();
        let mut last_check = t0;
        // The waiting thread has nothing else to do: it advances the collectives
        // itself (the Thread engine's agent stands aside meanwhile), which saves the
        // hand-offs to the agent once the application waits.
        let mut waiting = board.enter_wait(self.rank);
        let mut idle_since = Instant::now();
        let mut in_flight = 1;
        while !op.done.load(Ordering::Acquire) {
            let seen = board.doorbell(self.rank).load(Ordering::SeqCst);
            if let Backend::Proxy { client, .. } = &self.backend {
                // Collectives of the proxy path queued behind a full ring must
                // still reach it: the peers may wait for them.
                client.flush();
            }
            let (moved, stopped, polling) = {
                let mut core = lock(&shared.core);
                let moved = core.progress();
                in_flight = core.active();
                (moved, core.stopped, core.net_pending() || core.has_output())
            };
            if op.done.load(Ordering::Acquire) {
                break;
            }
            if stopped {
                op.fail(Error::Stopped("thread"));
                break;
            }
            if moved {
                idle_since = Instant::now();
            } else if polling {
                // Network completions ring no doorbell, nor does a peer that makes
                // room in a full ring: poll the transport, at once
                // within the spin budget, then yielding (the transport's reader thread
                // may need this core) for a millisecond, then at a gentler pace (a
                // sleep costs its timer slack too, 50 µs by default).
                let idle = idle_since.elapsed();
                if idle < spin {
                    std::hint::spin_loop();
                } else if idle < Duration::from_millis(1) {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(20));
                }
            } else {
                // Peers ring this doorbell when they push a descriptor.
                board.wait_ring(self.rank, seen, spin, Duration::from_millis(10));
            }
            if last_check.elapsed() >= Duration::from_millis(10) {
                last_check = Instant::now();
                let pids = lock(&shared.core).pids.clone();
                let mut peers = op.blocked_on();
                if peers.iter().any(|&p| board::pid_dead(pids[p])) {
                    // What a peer pushed before it exited still counts: drain first.
                    lock(&shared.core).progress();
                    peers = op.blocked_on();
                }
                if op.done.load(Ordering::Acquire) {
                    break;
                }
                if let Some(&p) = peers.iter().find(|&&p| board::pid_dead(pids[p])) {
                    op.fail(Error::RankLost { rank: p });
                } else if t0.elapsed() > self.timeout {
                    op.fail(Error::Timeout {
                        after: self.timeout,
                        waiting_for: peers.iter().map(|&p| self.world_ranks[p]).collect(),
                    });
                }
            }
        }
        // With nothing else in flight (as of the last pass) there is nothing for the
        // agent to pick up.
        waiting.wake = in_flight > 0;
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
        if self.poll(t) {
            if let (Ticket::Proxy(p), Backend::Proxy { client, .. }) = (t, &self.backend) {
                // Its answer, if nobody took it, would stay in the rank's list.
                client.discard(p);
            }
            return;
        }
        let _ = self.finish(t, None);
        match (t, &self.backend) {
            (Ticket::Local(op), _) => op.fail(Error::Stopped("cancelled")),
            (Ticket::Proxy(p), Backend::Proxy { client, .. }) => client.cancel(p),
            #[cfg(feature = "mpi")]
            (Ticket::Mpi(p), Backend::Mpi(m)) => m.cancel(p),
            #[allow(unreachable_patterns)]
            _ => {}
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        let (shared, board, agent) = match &mut self.backend {
            Backend::Local {
                shared,
                board,
                agent,
            } => (shared, board, agent.take()),
            Backend::Proxy { host: Some(h), .. } => (&mut h.shared, &mut h.board, None),
            _ => return,
        };
        {
            // Descriptors peers still wait for (a FIN for a message we read) must
            // reach their rings before this rank goes.
            let t0 = Instant::now();
            loop {
                let seen = board.doorbell(self.rank).load(Ordering::SeqCst);
                let mut core = lock(&shared.core);
                core.progress();
                if !core.has_output() || t0.elapsed() > self.timeout {
                    break;
                }
                drop(core);
                board.sleep(self.rank, seen, Duration::from_millis(1));
            }
            lock(&shared.core).net_goodbye(self.timeout.min(Duration::from_secs(10)));
            shared.shutdown.store(true, Ordering::Release);
            board.wake_agent(self.rank);
            board.ring(self.rank);
            if let Some(h) = agent {
                let _ = h.join();
            }
        }
    }
}

/// An engine's handle on one collective.
#[derive(Clone)]
pub(crate) enum Ticket {
    Local(Arc<Op>),
    Proxy(Arc<proxy::Pending>),
    #[cfg(feature = "mpi")]
    Mpi(Arc<crate::mpi_engine::Pending>),
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
            .field("engine", &self.comm.engine)
            .finish()
    }
}

impl Request<'_> {
    /// Whether the collective finished (then [`Request::wait`] returns at
    /// once). With the `Inline` engine this is where progress happens; with
    /// `Thread` it happens here too unless the progress thread is at it.
    pub fn test(&mut self) -> bool {
        self.ticket.as_ref().is_none_or(|t| self.comm.poll(t))
    }

    /// Waits for the collective and copies a staged result into the buffer.
    pub fn wait(mut self) -> Result<()> {
        match self.ticket.take() {
            Some(t) => self.comm.finish(&t, self.out.take()),
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
            if let Err(e) = self.comm.finish(&t, self.out.take()) {
                tracing::warn!(error = %e, "an unwaited collective failed");
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
        self.ticket.as_ref().is_none_or(|t| self.comm.poll(t))
    }

    /// Waits for the collective.
    pub fn wait(mut self) -> Result<()> {
        match self.ticket.take() {
            Some(t) => self.comm.finish(&t, None),
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
                let t = self.start(coll, send, recv, false)?;
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
                let t = self.start(coll, send, recv, true)?;
                let r = self.finish(&t, None);
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
                let t = self.comm.start(coll, send, recv, true)?;
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
