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
//! # Point-to-point messages
//!
//! [`Comm::send`], [`Comm::recv`], [`Comm::isend`], [`Comm::irecv`] and
//! [`Comm::sendrecv`] move typed messages between two ranks, matched by
//! source ([`Source`]) and [`Tag`] (a receive may take any of either:
//! `Source::Any`, [`ANY_TAG`]); a receive's buffer holds exactly the
//! message, of the same element type ([`Error::MessageLength`],
//! [`Error::MessageType`] otherwise) and a message that never comes is an
//! [`Error::MessageTimeout`]. Their tags never match a collective's
//! messages, and one sender's messages are received in the order it sent
//! them. Every engine carries them: `Inline`, `Thread` and `Proxy` on the
//! ranks' own path (the board, and the ranks' network transport across
//! nodes), `Mpi` as MPI's messages, and the `Proxy` engine in DPU placement
//! through the proxies, whose ranks reach nothing else (see [`Comm::irecv`]).
//! [`Comm::isend_owned`], [`Comm::irecv_owned`],
//! [`Comm::iallreduce_owned`] and [`Comm::ialltoall_owned`] take their
//! buffers by value and hand them back from `wait`: their requests borrow
//! nothing, so they can be stored and waited for later.
//!
//! ```no_run
//! use hpc_comm::{Comm, Engine, OwnedRecv};
//! struct Pending {
//!     halo: OwnedRecv<f64>,
//! }
//! let world = hpc_runtime::World::init()?;
//! let comm = Comm::new(&world, Engine::Inline)?;
//! let left = (comm.rank() + comm.size() - 1) % comm.size();
//! let right = (comm.rank() + 1) % comm.size();
//! let p = Pending { halo: comm.irecv_owned(vec![0.0; 16], left, 3)? };
//! comm.send(&vec![1.0f64; 16], right, 3)?;
//! let (halo, status) = p.halo.wait()?;
//! assert_eq!((status.source, halo.len()), (left, 16));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A borrowing receive holds its buffer until `wait`, and only plain
//! [`Elem`] types travel:
//!
//! ```compile_fail,E0506
//! # fn f(comm: &hpc_comm::Comm) -> Result<(), hpc_comm::Error> {
//! let mut buf = vec![0u32; 4];
//! let req = comm.irecv(&mut buf, 0, 1)?;
//! buf[0] = 2; // error: `buf` is borrowed by `req`
//! req.wait()?;
//! # Ok(()) }
//! ```
//!
//! ```compile_fail,E0277
//! # fn f(comm: &hpc_comm::Comm) -> Result<(), hpc_comm::Error> {
//! comm.send(&vec![String::from("no")], 0, 1)?; // error: `String` is not `Elem`
//! # Ok(()) }
//! ```
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

mod board_file;
mod boot;
mod build;
mod gone;
mod options;
mod owned;
mod p2p;
mod places;
mod request;
#[cfg(all(test, not(loom)))]
mod tests;

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hpc_runtime::World;

use crate::engines::{self, Driver, Job, Ticket};
use hpc_board::sync::lock;
use hpc_board::Elem;
pub use hpc_board::{Error, Result};
use hpc_collectives::Collective;

pub use board_file::remove_boards_of;
use boot::SubBoot;
pub use options::{
    settings_problems, AgentWake, CommOptions, Engine, DEFAULT_PROXY_MIN, DEFAULT_STAGE_MAX,
    MAX_SPIN,
};
pub use owned::OwnedRequest;
pub use p2p::{OwnedRecv, OwnedSend, RecvRequest, SendRequest, Source, Status, Tag, ANY_TAG};
pub use request::{Request, Scope, ScopedRequest};

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
    /// Shared with the owned requests, which outlive a borrow of the communicator.
    driver: Arc<dyn Driver>,
    progress_note: String,
    splits: AtomicU64,
    /// Node of each member (as the world numbers nodes).
    nodes: Vec<usize>,
    /// The network transport of a communicator that spans nodes (shared with
    /// its sub-communicators).
    net: Option<Arc<hpc_rdma::Transport>>,
    /// The members this rank knows to be gone (shared with the owned
    /// requests, whose errors may say so).
    gone: Arc<gone::Gone>,
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

impl Comm {
    /// A communicator of every rank of `world` with `engine` (collective).
    pub fn new(world: &World, engine: Engine) -> Result<Comm> {
        Comm::with_options(world, CommOptions::new(engine))
    }

    /// Like [`Comm::new`] with explicit options (collective).
    pub fn with_options(world: &World, mut opts: CommOptions) -> Result<Comm> {
        // A timeout of no time, or beyond any clock: `Duration::MAX` panicked
        // in the proxy engine's set-up ("overflow when adding duration to
        // instant"), 0 failed every wait that did not end at once.
        if let Some(t) = opts.timeout {
            hpc_runtime::env::check_timeout("hpc_comm::CommOptions::timeout", t)
                .map_err(Error::Argument)?;
        }
        if let Some(spin) = opts.spin {
            options::check_spin(spin)?;
        }
        if opts.engine == Engine::Proxy && opts.placement.is_none() {
            opts.placement = Some(crate::Placement::from_env()?);
        }
        let opts = opts.resolve(world.local_size(), world.timeout());
        options::same_on_every_rank(world, &opts)?;
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
        // The ranks' network path across nodes: the Inline and Thread engines'
        // for everything, the host-placed Proxy engine's for point-to-point
        // messages only (its collectives go between the proxies, `proxy/net.rs`).
        // In DPU placement the ranks reach nothing but their proxy.
        let dpu = opts.engine == Engine::Proxy && opts.placement == Some(crate::Placement::Dpu);
        let net = if (0..world.size()).any(|r| !world.same_node(0, r)) && !dpu {
            let t = hpc_rdma::Transport::new(world)
                .map_err(|e| Error::transport_from("the network path across nodes", e))?;
            Some(Arc::new(t))
        } else {
            None
        };
        Comm::build(world, (0..world.size()).collect(), opts, timeout, net)
    }

    fn assemble(
        rank: usize,
        world_ranks: Vec<usize>,
        opts: CommOptions,
        timeout: Duration,
        driver: Box<dyn Driver>,
        progress_note: String,
    ) -> Comm {
        let driver: Arc<dyn Driver> = Arc::from(driver);
        let size = world_ranks.len();
        Comm {
            rank,
            size,
            timeout,
            seq: AtomicU64::new(1),
            driver,
            progress_note,
            splits: AtomicU64::new(0),
            nodes: vec![0; size],
            net: None,
            gone: Arc::new(gone::Gone::new(&world_ranks)),
            world_ranks,
            opts,
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
    ///
    /// # Panics
    ///
    /// When `r` is not a rank of the communicator (not below
    /// [`Comm::size`]), as a slice index does, naming `r` and the size (it
    /// said "index out of bounds: the len is 1 but the index is 5").
    pub fn world_rank(&self, r: usize) -> usize {
        match self.world_ranks.get(r) {
            Some(&w) => w,
            None => panic!(
                "world_rank({r}): {r} is not a rank of this communicator of {} ranks",
                self.size()
            ),
        }
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
    /// [`RegisteredBuf`](crate::RegisteredBuf). A buffer larger than the memory
    /// available (`MemAvailable`) is refused, naming its size, before anything is
    /// allocated.
    pub fn registered_buf<T: Elem>(&self, len: usize) -> Result<crate::RegisteredBuf<T>> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            Error::Unsupported(format!("a buffer of {len} elements does not fit in memory"))
        })?;
        // `isize::MAX` bytes aborted the process on the heap's allocation.
        if let Some(available) = hpc_io::read::mem_available().filter(|&a| bytes as u64 > a) {
            return Err(Error::Unsupported(format!(
                "a buffer of {len} elements ({bytes} bytes) is more than the {available} \
                 bytes of memory available (MemAvailable)"
            )));
        }
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
        // The engines apply only the built-in operations: a custom one was
        // found out after the ranks had moved their data, as an error at the
        // reduction whose cause the proxy engine did not even name.
        if let Some(hpc_collectives::ReduceOp::Custom(id)) = coll.op() {
            return Err(Error::Unsupported(format!(
                "reduce operation custom#{id}: a communicator applies only the built-in \
                 operations (sum, prod, min, max, band, bor, bxor); apply a custom one with \
                 hpc_collectives::CustomOps on the gathered data"
            )));
        }
        let mut seq = self.seq.fetch_add(1, Ordering::Relaxed);
        while seq & 0xffff_ffff >= crate::executor::P2P_SEQ {
            // Point-to-point messages' number and the goodbye's: never a collective's.
            seq = self.seq.fetch_add(1, Ordering::Relaxed);
        }
        if let Some((peer, e)) = self.gone.collective() {
            // A member is known gone: the collective cannot be the same on
            // every member; it fails here at once, recorded on the node's
            // board for its number so that the node's members that did not
            // know fail it too rather than wait for this rank.
            if let (Some(host), Some(peer)) = (self.driver.host(), peer) {
                let peer = peer as u32;
                let f = match e {
                    Error::RankLeft { .. } => hpc_board::board::Failure::Left { peer },
                    _ => hpc_board::board::Failure::Lost { peer },
                };
                host.board.mark_failed(self.rank, seq as u32, f);
            }
            return Err(e);
        }
        // The post, on the timeline (`HPC_TRACE`) and in debug logs.
        let _span = crate::spans::post(&coll, || crate::spans::Post {
            seq,
            rank: self.rank,
            bytes: send.len().max(recv.len()),
            engine: self.engine().name(),
        });
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
        abandon(&*self.driver, t);
    }
}

/// Makes sure `t`'s engine `e` no longer touches its buffers: waits for it
/// (until the timeout), then cancels it.
fn abandon(e: &dyn Driver, t: &Ticket) {
    if t.test(e) {
        t.discard(e);
        return;
    }
    let _ = t.wait(e, None);
    t.cancel(e);
}

impl Drop for Comm {
    fn drop(&mut self) {
        self.driver.shutdown();
    }
}
