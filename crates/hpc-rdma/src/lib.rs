//! # hpc-rdma: one RDMA-style transport, several backends
//!
//! A [`Transport`] connects every pair of ranks of a [`hpc_runtime::World`] through the
//! best backend for that pair and offers one API for all of them:
//!
//! - **registered memory**: [`Transport::register`] gives a [`Region`]; its
//!   [`RemoteKey`] (serializable with [`RemoteKey::to_bytes`]) is what peers need;
//!   [`Transport::exchange_keys`] swaps keys through `World::allgather`;
//! - **one-sided** [`Transport::put`] / [`Transport::get`] into/from a peer's region at
//!   an offset;
//! - **two-sided** tagged [`Transport::send`] / [`Transport::recv`];
//! - **completion**: every posting call returns an [`OpId`] at once;
//!   [`Transport::poll`] returns what completed, [`Transport::test`] checks one
//!   operation, [`Transport::wait`] blocks for one with a timeout.
//!
//! | pair of ranks | backend | how |
//! |---|---|---|
//! | same rank | loopback | `memcpy` in the process |
//! | same node | [`BackendKind::Shm`] | memfd regions mapped by peers (put/get = one `memcpy`); SPSC rings for messages |
//! | other node, same libfabric fabric provider on both | [`BackendKind::Ofi`] (feature `ofi`) | RDM endpoint, tagged messages, `fi_write`/`fi_read` |
//! | other node, both with an HCA | [`BackendKind::Verbs`] (feature `verbs`) | RC queue pairs, RDMA write/read |
//! | otherwise | [`BackendKind::Tcp`] | one connection per pair, progress threads |
//! | any pair, when asked | [`BackendKind::Mpi`] (feature `mpi`) | frames over `MPI_Isend` on a private communicator, applied by the target's progress |
//! | any pair, when asked | [`BackendKind::Ofi`] (feature `ofi`) | any libfabric provider, `HPC_OFI_PROVIDER` (e.g. `shm`, `tcp;ofi_rxm`) |
//!
//! The choice can be forced with `HPC_TRANSPORT=shm|tcp|ofi|verbs|mpi|auto` or
//! [`Options::backend`]; it is reported per peer by a `tracing` event at `info` level.
//!
//! ## Example
//!
//! ```
//! use hpc_rdma::{Transport, Source};
//! let world = hpc_runtime::World::init()?;
//! let t = Transport::new(&world)?;
//! let region = t.register(4096)?;
//! let keys = t.exchange_keys(&world, &region)?;
//! let right = (world.rank() + 1) % world.size();
//! // Write 8 bytes into the right neighbour's region, then tell it.
//! let op = t.put(vec![7u8; 8], &keys[right], 0)?;
//! t.wait(op)?;
//! let op = t.send(right, 1, b"done".to_vec())?;
//! let left = (world.rank() + world.size() - 1) % world.size();
//! let msg = t.recv(left, 1)?;
//! assert_eq!(t.wait(msg)?.into_bytes(), b"done");
//! t.wait(op)?;
//! let mut first = [0u8; 8];
//! region.read(0, &mut first)?;
//! assert_eq!(first, [7u8; 8]);
//! # Ok::<(), hpc_rdma::Error>(())
//! ```
//!
//! ## Completion and ordering guarantees
//!
//! - A **put** completes when its data is in the target's region (shm: the copy is
//!   done; tcp and mpi: the target acknowledged it; verbs: the RC completion, which the HCA
//!   gives after the target's acknowledgement). After `wait(put)` returns, any later
//!   message or put from anyone that the target observes is ordered after that data.
//! - Puts from one initiator to one target become visible **in the order posted**,
//!   and within one put the last 8 bytes (when 8-aligned at the target) are written
//!   last with release ordering: a target may poll them with [`Region::load_u64`] to
//!   learn that the whole put arrived (the `ib_write_lat` pattern).
//! - A **get** completes when the data is in the destination.
//! - A **send** completes when the transport no longer needs the buffer (it is handed
//!   back in the completion); that does *not* mean the receiver matched it. Messages
//!   from one sender with the same tag are received in the order sent.
//! - A **recv** completes with the whole message (any length, including 0).
//! - No operation is ever "lost": each completes with its data or an error
//!   ([`Error::PeerLost`] when the peer dies, [`Error::BadKey`] for a stale key, ...),
//!   and [`Transport::wait`] gives [`Error::Timeout`] after its timeout.
//!
//! ## Memory safety of in-flight operations
//!
//! Asynchronous operations take **owned** buffers: a `Vec<u8>` or a [`Region`] handle
//! (a registered, reference-counted mapping), which the transport holds until the
//! operation completes and hands back in the completion's [`Payload`]. Forgetting an
//! [`OpId`] or leaking anything therefore cannot make the transport touch freed memory.
//! A buffer handed over cannot be used meanwhile:
//!
//! ```compile_fail,E0382
//! # let world = hpc_runtime::World::init().unwrap();
//! # let t = hpc_rdma::Transport::new(&world).unwrap();
//! let mut v = vec![1u8; 8];
//! let op = t.send(0, 1, v).unwrap();
//! v[0] = 2; // error[E0382]: `v` was moved into the send
//! ```
//!
//! Borrowed destinations go through a request that borrows the buffer until it is
//! waited for; the data is copied in only inside [`RecvInto::wait`], so leaking the
//! request never lets the transport write into the buffer later:
//!
//! ```compile_fail,E0506
//! # let world = hpc_runtime::World::init().unwrap();
//! # let t = hpc_rdma::Transport::new(&world).unwrap();
//! let mut buf = [0u8; 8];
//! let req = t.recv_into(0, 1, &mut buf).unwrap();
//! buf[0] = 1; // error[E0506]: `buf` is mutably borrowed by `req`
//! req.wait().unwrap();
//! ```
//!
//! Out-of-bounds accesses return [`Error::OutOfBounds`] before anything is written,
//! and keys of deregistered regions give [`Error::BadKey`].
//!
//! ## What has run where
//!
//! The shm and tcp backends are tested with real processes (and TCP across network
//! namespaces with `HPC_TEST_NETNS=1`); the mpi backend (feature `mpi`) runs the same
//! conformance suite under Open MPI's `mpirun`; the ofi backend (feature `ofi`) runs
//! it against libfabric 1.17's `shm` and `tcp;ofi_rxm` providers. No fabric provider
//! (verbs, cxi, efa, psm2) has run: the machines this is developed on have no such
//! hardware. The native verbs backend has **not run on hardware** either: it
//! compiles against rdma-core, its pure logic (queue-pair state machine, endpoint
//! encoding, work-request building) is unit-tested, and without an HCA it reports
//! [`Error::NoDevice`] and the selector falls back. On InfiniBand and RoCE, the
//! documented way is libfabric's verbs provider (`HPC_TRANSPORT=ofi
//! HPC_OFI_PROVIDER="verbs;ofi_rxm"`, chosen by `auto` between nodes) until the
//! native backend has run on a device.

mod completion;
mod error;
#[cfg(feature = "mpi")]
mod mpi;
pub mod ofi;
mod region;
mod ring;
pub mod shm;
mod sync;
mod tcp;
pub mod verbs;
pub mod wire;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hpc_runtime::World;

/// Entry points for fuzzing the decoders that read bytes a peer controls: each takes
/// arbitrary bytes and returns a `Result`, never panicking and never reading outside
/// its input.
#[doc(hidden)]
pub mod fuzz {
    pub use crate::ring::pop_from_bytes as ring_pop;

    /// Decodes a TCP/MPI frame header ([`crate::wire::Header::decode`]).
    pub fn wire_header(bytes: &[u8]) -> crate::Result<crate::wire::Header> {
        crate::wire::Header::decode(bytes)
    }

    /// Decodes a remote key ([`crate::RemoteKey::from_bytes`]).
    pub fn remote_key(bytes: &[u8]) -> crate::Result<crate::RemoteKey> {
        crate::RemoteKey::from_bytes(bytes)
    }

    /// Decodes a verbs endpoint ([`crate::verbs::Endpoint::from_bytes`]).
    pub fn verbs_endpoint(bytes: &[u8]) -> crate::Result<crate::verbs::Endpoint> {
        crate::verbs::Endpoint::from_bytes(bytes)
    }
}

pub use crate::completion::{Completion, OpId, OpKind, Payload, Sink, Source};
pub use crate::error::{Error, Result, CLOSED_IN_ORDER};
pub use crate::region::{Region, RemoteKey, REMOTE_KEY_BYTES};

use crate::completion::Shared;
use crate::error::check_bounds;

/// Which backend serves a pair of ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// A rank talking to itself.
    Loopback,
    /// Shared memory (same node).
    Shm,
    /// TCP sockets.
    Tcp,
    /// InfiniBand/RoCE verbs.
    Verbs,
    /// The MPI library's point-to-point messages (feature `mpi`).
    Mpi,
    /// libfabric (feature `ofi`).
    Ofi,
}

impl BackendKind {
    /// Lower-case name.
    pub fn name(&self) -> &'static str {
        match self {
            BackendKind::Loopback => "loopback",
            BackendKind::Shm => "shm",
            BackendKind::Tcp => "tcp",
            BackendKind::Verbs => "verbs",
            BackendKind::Mpi => "mpi",
            BackendKind::Ofi => "ofi",
        }
    }
}

/// The backend selection policy (`HPC_TRANSPORT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Choice {
    /// Same node → shm, else ofi where both ends have the same libfabric provider
    /// that drives a fabric (verbs, cxi, efa, psm2, ...), else verbs if both ends
    /// have a device, else tcp.
    #[default]
    Auto,
    /// Shared memory for every pair (fails if ranks are on different nodes).
    Shm,
    /// TCP for every pair.
    Tcp,
    /// Verbs for every pair (fails with [`Error::NoDevice`] without an HCA).
    Verbs,
    /// MPI point-to-point for every pair (feature `mpi`, a job started by an MPI
    /// launcher; [`Error::Unavailable`] otherwise).
    Mpi,
    /// libfabric for every pair (feature `ofi`; the provider from `HPC_OFI_PROVIDER`
    /// or `FI_PROVIDER`, else the first usable one; [`Error::Unavailable`] without
    /// one).
    Ofi,
}

impl std::str::FromStr for Choice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Choice> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Choice::Auto),
            "shm" => Ok(Choice::Shm),
            "tcp" => Ok(Choice::Tcp),
            "verbs" | "ib" | "rdma" => Ok(Choice::Verbs),
            "mpi" => Ok(Choice::Mpi),
            "ofi" | "libfabric" => Ok(Choice::Ofi),
            _ => Err(Error::InvalidArgument(format!(
                "transport {}: expected shm, tcp, ofi, verbs, mpi or auto",
                hpc_runtime::env::shown(s)
            ))),
        }
    }
}

/// Settings of [`Transport::with_options`].
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Backend policy.
    pub backend: Choice,
    /// Default timeout of [`Transport::wait`] (default: the world's timeout).
    pub timeout: Option<Duration>,
    /// Address the TCP backend listens on (default: `HPC_TCP_ADDR`, else the address
    /// that routes to the launcher, else the host name's address).
    pub tcp_addr: Option<IpAddr>,
}

impl Options {
    /// Reads `HPC_TRANSPORT` (and leaves the rest default); a value that names
    /// no transport, or is not UTF-8 (it was read as unset: `auto`), is an
    /// error naming the variable.
    pub fn from_env() -> Result<Options> {
        let name = hpc_runtime::env::TRANSPORT;
        let backend = match hpc_runtime::env::var(name).map_err(Error::InvalidArgument)? {
            Some(s) => s.parse().map_err(|_| {
                Error::InvalidArgument(format!(
                    "{name}={} is not a transport: expected shm, tcp, ofi, verbs, mpi or auto",
                    hpc_runtime::env::shown(&s)
                ))
            })?,
            None => Choice::Auto,
        };
        Ok(Options {
            backend,
            ..Options::default()
        })
    }
}

/// What is wrong with this process's settings of the transport, read as the
/// transport reads them: `HPC_TRANSPORT` naming no transport (an error when
/// a transport is made), and an `HPC_TCP_ADDR` that is no address (warned
/// about, and the default taken). For a launch check (`hpc selftest`).
pub fn settings_problems() -> Vec<String> {
    let mut out = Vec::new();
    if let Err(e) = Options::from_env() {
        out.push(e.to_string());
    }
    out.extend(hpc_runtime::env::parsed_problem(
        hpc_runtime::env::TCP_ADDR,
        tcp::parse_addr,
    ));
    out
}

mod sealed {
    pub trait Sealed {}
}

/// One backend of the transport: moves bytes to the peers it serves.
///
/// What [`Backend::try_send_now`] gives: `Ok(data)`, sent, the buffer handed back;
/// `Err(data)`, not sent ("use [`Backend::send`]"), the buffer untouched.
pub type SentNow = std::result::Result<Vec<u8>, Vec<u8>>;

/// Implemented by this crate's backends (the trait is sealed); [`Transport`] routes
/// each operation to the backend of its peer. Posting methods start an operation and
/// report its end through the transport's completion table (possibly before they
/// return); an `Err` means the operation was not started.
pub trait Backend: Send + Sync + sealed::Sealed {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;
    /// Makes a new region accessible through this backend (e.g. `ibv_reg_mr`).
    fn register(&self, _region: &Region) -> Result<()> {
        Ok(())
    }
    /// Makes a region inaccessible at once (its key goes stale for peers).
    fn deregister(&self, _region: &Region) {}
    /// Starts writing `src` into the region of `dst` at `offset`.
    fn put(&self, op: OpId, src: Source, dst: &RemoteKey, offset: u64) -> Result<()>;
    /// Starts reading `dst.len()` bytes of the region of `src` at `offset`.
    fn get(&self, op: OpId, src: &RemoteKey, offset: u64, dst: Sink) -> Result<()>;
    /// Starts sending a tagged message.
    fn send(&self, op: OpId, peer: usize, tag: u64, data: Vec<u8>) -> Result<()>;
    /// Sends a message at once if that needs no operation record (a small message
    /// with room in the ring): `Ok(data)` hands the buffer back, done; `Err(data)`
    /// means "use [`Backend::send`]". Saves the completion table a round trip on the
    /// latency-critical path.
    fn try_send_now(&self, _peer: usize, _tag: u64, data: Vec<u8>) -> SentNow {
        Err(data)
    }
    /// Performs a put at once where the backend completes puts as they are posted
    /// (shm): `Ok(Ok(payload))` is the finished put, `Ok(Err(src))` means "use
    /// [`Backend::put`]".
    fn try_put_now(
        &self,
        src: Source,
        _dst: &RemoteKey,
        _offset: u64,
    ) -> Result<std::result::Result<Payload, Source>> {
        Ok(Err(src))
    }
    /// Advances operations that need the caller's thread (no-op for threaded backends).
    fn progress(&self) -> Result<()>;
    /// `Err(PeerLost)` if the peer is known dead (after delivering what it sent).
    fn check_peer(&self, peer: usize) -> Result<()>;
    /// Whether [`Backend::progress`] does anything.
    fn wants_progress(&self) -> bool;
}

impl sealed::Sealed for shm::Shm {}
impl sealed::Sealed for tcp::Tcp {}
impl sealed::Sealed for Loopback {}
#[cfg(feature = "mpi")]
impl sealed::Sealed for mpi::Mpi {}
#[cfg(feature = "verbs")]
impl sealed::Sealed for verbs::Verbs {}
#[cfg(feature = "ofi")]
impl sealed::Sealed for ofi::Ofi {}

/// A rank's operations on itself.
struct Loopback {
    shared: Arc<Shared>,
}

impl Backend for Loopback {
    fn kind(&self) -> BackendKind {
        BackendKind::Loopback
    }
    fn put(&self, op: OpId, src: Source, dst: &RemoteKey, offset: u64) -> Result<()> {
        let region = self
            .shared
            .lookup(dst.id, dst.key, offset, src.len() as u64)?;
        // SAFETY: `lookup` checked the bounds; `src` is valid for its length; the regions
        // may be the same, so use an overlapping copy.
        unsafe {
            std::ptr::copy(
                src.as_ptr(),
                region.as_ptr().add(offset as usize),
                src.len(),
            )
        };
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        self.shared.complete(op, Ok(src.into_payload()));
        Ok(())
    }
    fn get(&self, op: OpId, src: &RemoteKey, offset: u64, dst: Sink) -> Result<()> {
        let region = self
            .shared
            .lookup(src.id, src.key, offset, dst.len() as u64)?;
        let payload = dst.fill(|ptr, len| {
            // SAFETY: both ranges checked; possibly the same region, so overlapping copy.
            unsafe { std::ptr::copy(region.as_ptr().add(offset as usize), ptr, len) };
            Ok(())
        })?;
        self.shared.complete(op, Ok(payload));
        Ok(())
    }
    fn send(&self, op: OpId, peer: usize, tag: u64, data: Vec<u8>) -> Result<()> {
        self.shared.deliver(peer, tag, data.clone());
        self.shared.complete(op, Ok(Payload::Bytes(data)));
        Ok(())
    }
    fn progress(&self) -> Result<()> {
        Ok(())
    }
    fn check_peer(&self, _peer: usize) -> Result<()> {
        Ok(())
    }
    fn wants_progress(&self) -> bool {
        false
    }
}

/// `Err(BadKey)` for a key whose fields are not as its owner made them (its
/// checksum, [`RemoteKey::is_intact`]): every backend then trusts the length
/// and addressing of a key only from its owner. An edited length reached the
/// shared-memory backend, which wrote past the region into its page (and a
/// length near `u64::MAX` overflowed there).
fn check_intact(key: &RemoteKey) -> Result<()> {
    if key.is_intact() {
        return Ok(());
    }
    Err(Error::BadKey(format!(
        "the key of region {} of rank {} (length {}) was altered: its checksum does not \
         match; a key must come from the region's owner (Transport::exchange_keys, or \
         RemoteKey::to_bytes sent in a message)",
        key.id,
        key.rank(),
        key.len()
    )))
}

/// Polls before yielding the CPU in [`Transport::wait`] (a few tens of microseconds:
/// long enough for a peer on another core, short enough not to starve a peer that
/// shares ours).
const SPIN: u32 = 2_000;

/// The transport of one rank: every peer reachable through one API.
///
/// Created collectively (every rank calls [`Transport::new`] in the same order with
/// the other collectives of the world). `Transport` is `Send + Sync`; operations may
/// be posted and waited for from several threads.
pub struct Transport {
    shared: Arc<Shared>,
    backends: Vec<Box<dyn Backend>>,
    route: Vec<usize>,
    /// Backend of two-sided messages per peer (tcp for verbs peers).
    send_route: Vec<usize>,
    progress: Vec<usize>,
    timeout: Duration,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("rank", &self.shared.rank)
            .field("size", &self.shared.size)
            .field(
                "routes",
                &(0..self.size())
                    .map(|p| self.backend_of(p))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Which backend serves ranks `a` and `b` (symmetric, computable by every rank).
#[cfg(feature = "mpi")]
fn mpi_backend(shared: Arc<Shared>, world: &World) -> Result<Box<dyn Backend>> {
    Ok(Box::new(mpi::Mpi::new(shared, world)?))
}

#[cfg(not(feature = "mpi"))]
fn mpi_backend(_shared: Arc<Shared>, _world: &World) -> Result<Box<dyn Backend>> {
    Err(Error::unavailable(
        "mpi",
        "this build has no MPI: build with the `mpi` feature",
    ))
}

/// The connect of a backend this build lacks (`off` says which): the
/// exchange of endpoints still takes place, since every rank takes part in
/// it, and only a rank with peers for that backend fails.
#[cfg(any(not(feature = "ofi"), not(feature = "verbs")))]
fn connect_unbuilt(
    world: &World,
    peers: &[usize],
    off: fn() -> Error,
) -> Result<Option<Box<dyn Backend>>> {
    world.allgather(&[])?;
    if peers.is_empty() {
        Ok(None)
    } else {
        Err(off())
    }
}

/// What each rank found: a native verbs device, a libfabric provider.
struct Found {
    verbs: Vec<bool>,
    ofi: Vec<Option<String>>,
}

fn route(world: &World, choice: Choice, found: &Found, a: usize, b: usize) -> Result<BackendKind> {
    if a == b {
        return Ok(BackendKind::Loopback);
    }
    let ofi_pair = matches!((&found.ofi[a], &found.ofi[b]), (Some(x), Some(y)) if x == y);
    Ok(match choice {
        Choice::Shm if !world.same_node(a, b) => {
            return Err(Error::unavailable(
                "shm",
                format!("ranks {a} and {b} are on different nodes"),
            ))
        }
        Choice::Shm => BackendKind::Shm,
        Choice::Tcp => BackendKind::Tcp,
        Choice::Verbs => BackendKind::Verbs,
        Choice::Mpi => BackendKind::Mpi,
        Choice::Ofi => BackendKind::Ofi,
        Choice::Auto if world.same_node(a, b) => BackendKind::Shm,
        Choice::Auto if ofi_pair => BackendKind::Ofi,
        Choice::Auto if found.verbs[a] && found.verbs[b] => BackendKind::Verbs,
        Choice::Auto => BackendKind::Tcp,
    })
}

impl Transport {
    /// Connects this rank to every other (collective), with [`Options::from_env`].
    pub fn new(world: &World) -> Result<Transport> {
        Transport::with_options(world, Options::from_env()?)
    }

    /// Connects this rank to every other (collective) with explicit options.
    pub fn with_options(world: &World, opts: Options) -> Result<Transport> {
        let (me, size) = (world.rank(), world.size());
        let shared = Shared::new(me, size);
        let probe = match opts.backend {
            Choice::Auto | Choice::Verbs if size > 1 => verbs::probe(),
            _ => Err(Error::NoDevice("not probed".into())),
        };
        if let Err(e) = &probe {
            tracing::debug!(error = %e, "verbs unusable here");
        }
        // libfabric: by name when asked for, and for `auto` only between nodes and
        // only a provider that drives a fabric.
        let ofi_probe = match opts.backend {
            Choice::Ofi if size > 1 => ofi::probe(false),
            Choice::Auto if size > 1 && world.node_count() > 1 => ofi::probe(true),
            _ => Err(Error::unavailable("ofi", "not probed")),
        };
        if let Err(e) = &ofi_probe {
            tracing::debug!(error = %e, "libfabric unusable here");
        }
        let mine = {
            let mut v = vec![probe.is_ok() as u8];
            if let Ok(p) = &ofi_probe {
                v.extend_from_slice(p.provider.as_bytes());
            }
            v
        };
        let all = world.allgather(&mine)?;
        let found = Found {
            verbs: all.iter().map(|b| b.first() == Some(&1)).collect(),
            ofi: all
                .iter()
                .map(|b| match b.get(1..) {
                    Some(p) if !p.is_empty() => Some(String::from_utf8_lossy(p).into_owned()),
                    _ => None,
                })
                .collect(),
        };
        // A forced backend that some rank cannot use fails on every rank alike.
        match (opts.backend, &probe, &ofi_probe) {
            (Choice::Verbs, Err(e), _) | (Choice::Ofi, _, Err(e)) => return Err(e.clone()),
            (Choice::Verbs, Ok(_), _) if found.verbs.iter().any(|&v| !v) => {
                let r = found.verbs.iter().position(|&v| !v).unwrap_or(0);
                return Err(Error::NoDevice(format!(
                    "rank {r} has no usable RDMA device"
                )));
            }
            (Choice::Ofi, _, Ok(_)) if found.ofi.iter().any(Option::is_none) => {
                let r = found.ofi.iter().position(Option::is_none).unwrap_or(0);
                return Err(Error::unavailable(
                    "ofi",
                    format!("rank {r} has no usable libfabric provider"),
                ));
            }
            _ => {}
        }
        let mut lists = vec![Vec::new(); size];
        let mut tcp_peers = Vec::new();
        let mut verbs_peers = Vec::new();
        let mut ofi_peers = Vec::new();
        let mut route_kind = Vec::with_capacity(size);
        for (a, list) in lists.iter_mut().enumerate() {
            for b in 0..size {
                let k = route(world, opts.backend, &found, a, b)?;
                if k == BackendKind::Shm {
                    list.push(b);
                }
                if a == me {
                    route_kind.push(k);
                    match k {
                        BackendKind::Tcp => tcp_peers.push(b),
                        BackendKind::Verbs => {
                            // One-sided over verbs; two-sided and liveness over tcp.
                            verbs_peers.push(b);
                            tcp_peers.push(b);
                        }
                        BackendKind::Ofi => ofi_peers.push(b),
                        _ => {}
                    }
                }
            }
        }
        let mut backends: Vec<Box<dyn Backend>> = vec![Box::new(Loopback {
            shared: shared.clone(),
        })];
        let shm = shm::Shm::new(shared.clone(), world, &lists)?;
        backends.push(Box::new(shm));
        if let Some(v) = verbs::connect(shared.clone(), world, &verbs_peers, probe.ok())? {
            backends.push(v);
        }
        if let Some(o) = ofi::connect(shared.clone(), world, &ofi_peers, ofi_probe.ok())? {
            backends.push(o);
        }
        let tcp = tcp::Tcp::new(shared.clone(), world, &tcp_peers, opts.tcp_addr)?;
        backends.push(Box::new(tcp));
        if route_kind.contains(&BackendKind::Mpi) {
            backends.push(mpi_backend(shared.clone(), world)?);
        }
        let route: Vec<usize> = route_kind
            .iter()
            .map(|k| {
                backends
                    .iter()
                    .position(|b| b.kind() == *k)
                    .expect("every routed backend exists")
            })
            .collect();
        let tcp_index = backends
            .iter()
            .position(|b| b.kind() == BackendKind::Tcp)
            .expect("tcp backend exists");
        let send_route = route_kind
            .iter()
            .zip(&route)
            .map(|(k, &i)| {
                if *k == BackendKind::Verbs {
                    tcp_index
                } else {
                    i
                }
            })
            .collect();
        for (p, k) in route_kind.iter().enumerate() {
            if p != me {
                tracing::info!(rank = me, peer = p, backend = k.name(), "transport route");
            }
        }
        let progress = (0..backends.len())
            .filter(|&i| backends[i].wants_progress() && route.contains(&i))
            .collect();
        world.barrier()?;
        Ok(Transport {
            shared,
            backends,
            route,
            send_route,
            progress,
            timeout: opts.timeout.unwrap_or_else(|| world.timeout()),
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.shared.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.shared.size
    }

    /// The default timeout of [`Transport::wait`].
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The backend serving `peer`.
    pub fn backend_of(&self, peer: usize) -> Option<BackendKind> {
        self.route.get(peer).map(|&i| self.backends[i].kind())
    }

    fn backend(&self, peer: usize) -> Result<&dyn Backend> {
        self.route
            .get(peer)
            .map(|&i| &*self.backends[i])
            .ok_or_else(|| {
                Error::InvalidArgument(format!("rank {peer} is not in a job of {}", self.size()))
            })
    }

    /// Allocates `len` bytes of zeroed memory registered with every backend.
    pub fn register(&self, len: usize) -> Result<Region> {
        let region = self.shared.new_region(len)?;
        for b in &self.backends {
            b.register(&region)?;
        }
        Ok(region)
    }

    /// Deregisters a region now: its key is stale for peers at once, even if other
    /// handles to it live on (the memory is freed with the last handle).
    pub fn deregister(&self, region: Region) {
        for b in &self.backends {
            b.deregister(&region);
        }
        self.shared.forget_region(region.id());
        region
            .inner
            .map
            .key_slot()
            .store(0, std::sync::atomic::Ordering::Release);
    }

    /// Collective: every rank contributes the key of its `region` and receives
    /// everyone's, indexed by rank.
    pub fn exchange_keys(&self, world: &World, region: &Region) -> Result<Vec<RemoteKey>> {
        let parts = world.allgather(&region.remote_key().to_bytes())?;
        parts
            .iter()
            .enumerate()
            .map(|(r, b)| {
                let k = RemoteKey::from_bytes(b)?;
                if k.rank() != r {
                    return Err(Error::BadKey(format!(
                        "rank {r} sent a key of rank {}",
                        k.rank()
                    )));
                }
                Ok(k)
            })
            .collect()
    }

    fn post(
        &self,
        peer: usize,
        kind: OpKind,
        f: impl FnOnce(&dyn Backend, OpId) -> Result<()>,
    ) -> Result<OpId> {
        let backend = self.backend(peer)?;
        let op = self.shared.begin(peer, kind)?;
        if let Err(e) = f(backend, op) {
            self.shared.abort(op);
            return Err(e);
        }
        Ok(op)
    }

    /// Writes `src` into the region of `dst` (owned by rank `dst.rank()`) at `offset`.
    ///
    /// `src` is a `Vec<u8>` or a [`Source::Region`] slice (zero-copy where the backend
    /// allows); it is handed back in the completion. Errors: [`Error::OutOfBounds`]
    /// before anything is written; [`Error::BadKey`] (at once or in the completion) for
    /// a wrong or stale key.
    pub fn put(&self, src: impl Into<Source>, dst: &RemoteKey, offset: u64) -> Result<OpId> {
        let src = src.into();
        let _span = tracing::trace_span!("put", peer = dst.rank(), bytes = src.len()).entered();
        src.validate()?;
        check_intact(dst)?;
        check_bounds(offset, src.len() as u64, dst.len())?;
        let backend = self.backend(dst.rank())?;
        let src = match backend.try_put_now(src, dst, offset)? {
            Ok(done) => return self.shared.ready_now(dst.rank(), OpKind::Put, done),
            Err(src) => src,
        };
        self.post(dst.rank(), OpKind::Put, |b, op| b.put(op, src, dst, offset))
    }

    /// Reads `len` bytes of the region of `src` at `offset` into a new vector
    /// (returned as [`Payload::Bytes`]).
    pub fn get(&self, src: &RemoteKey, offset: u64, len: usize) -> Result<OpId> {
        self.get_to(src, offset, Sink::Bytes(len))
    }

    /// Reads from the region of `src` at `offset` into `dst` (a vector or a slice of a
    /// local region).
    pub fn get_to(&self, src: &RemoteKey, offset: u64, dst: Sink) -> Result<OpId> {
        let _span = tracing::trace_span!("get", peer = src.rank(), bytes = dst.len()).entered();
        dst.validate()?;
        check_intact(src)?;
        check_bounds(offset, dst.len() as u64, src.len())?;
        self.post(src.rank(), OpKind::Get, |b, op| b.get(op, src, offset, dst))
    }

    /// Sends a tagged message to `peer`; the vector comes back in the completion.
    pub fn send(&self, peer: usize, tag: u64, data: Vec<u8>) -> Result<OpId> {
        let _span = tracing::trace_span!("send", peer, tag, bytes = data.len()).entered();
        self.backend(peer)?;
        let backend = &*self.backends[self.send_route[peer]];
        let data = match backend.try_send_now(peer, tag, data) {
            Ok(data) => {
                return self
                    .shared
                    .ready_now(peer, OpKind::Send, Payload::Bytes(data))
            }
            Err(data) => data,
        };
        let op = self.shared.begin(peer, OpKind::Send)?;
        if let Err(e) = backend.send(op, peer, tag, data) {
            self.shared.abort(op);
            return Err(e);
        }
        Ok(op)
    }

    /// Receives the next message from `peer` with `tag` (as [`Payload::Bytes`]).
    pub fn recv(&self, peer: usize, tag: u64) -> Result<OpId> {
        let _span = tracing::trace_span!("recv", peer, tag).entered();
        self.backend(peer)?;
        Ok(self.shared.post_recv(peer, tag))
    }

    /// Receives into a borrowed buffer: the returned request borrows `buf` until
    /// [`RecvInto::wait`] copies the message in.
    pub fn recv_into<'t, 'b>(
        &'t self,
        peer: usize,
        tag: u64,
        buf: &'b mut [u8],
    ) -> Result<RecvInto<'t, 'b>> {
        let op = self.recv(peer, tag)?;
        Ok(RecvInto { t: self, op, buf })
    }

    /// Advances backends that progress in the caller's thread and returns every
    /// completion that is ready (in operation order).
    pub fn poll(&self) -> Result<Vec<Completion>> {
        self.progress_once();
        let done = self.shared.drain();
        if !done.is_empty() {
            // An instant on the timeline (`HPC_TRACE`) for polls that found work.
            tracing::trace!(completions = done.len(), "poll");
        }
        Ok(done)
    }

    fn progress_once(&self) {
        for &i in &self.progress {
            if let Err(e) = self.backends[i].progress() {
                tracing::debug!(error = %e, "progress");
            }
        }
    }

    /// The result of `op` if it completed (`Ok(None)` if not yet).
    pub fn test(&self, op: OpId) -> Result<Option<Payload>> {
        self.progress_once();
        match self.shared.take(op)? {
            Some(c) => c.result.map(Some),
            None => Ok(None),
        }
    }

    /// Number of posted operations not yet completed.
    pub fn pending(&self) -> usize {
        self.shared.pending_count()
    }

    /// Waits for `op` with the transport's timeout.
    pub fn wait(&self, op: OpId) -> Result<Payload> {
        self.wait_timeout(op, self.timeout)
    }

    /// Waits for `op`: spins on progress, then yields the CPU, then sleeps briefly;
    /// checks the peer's liveness about every millisecond. [`Error::Timeout`] after
    /// `timeout` (the operation stays posted and may still complete later).
    pub fn wait_timeout(&self, op: OpId, timeout: Duration) -> Result<Payload> {
        let mut start: Option<Instant> = None;
        let mut last_check = 0u128;
        let mut spins = 0u32;
        // The table (and its lock) is consulted again only when the completion
        // generation moved (see `Shared::wait_poll`).
        let (first, mut seen) = self.shared.wait_begin(op)?;
        if let Some(c) = first {
            return c.result;
        }
        loop {
            if let Some(c) = self
                .shared
                .wait_poll(op, &mut seen, || self.progress_once())?
            {
                return c.result;
            }
            spins = spins.saturating_add(1);
            if spins < SPIN {
                std::hint::spin_loop();
                continue;
            }
            let t0 = *start.get_or_insert_with(Instant::now);
            let waited = t0.elapsed();
            if waited > timeout {
                return Err(Error::Timeout {
                    after: timeout,
                    what: format!("operation {}", op.0),
                });
            }
            let ms = waited.as_millis();
            if ms > last_check {
                last_check = ms;
                if let Some(peer) = self.shared.peer_of(op) {
                    if let Ok(b) = self.backend(peer) {
                        let _ = b.check_peer(peer);
                    }
                }
            }
            if waited < Duration::from_millis(5) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Waits for every operation in order; the first error is returned.
    pub fn wait_all(&self, ops: &[OpId]) -> Result<Vec<Payload>> {
        ops.iter().map(|&op| self.wait(op)).collect()
    }
}

/// A receive into a borrowed buffer (see [`Transport::recv_into`]).
///
/// The message lands in transport-owned memory and is copied into the buffer only in
/// [`RecvInto::wait`], so dropping or leaking the request is safe (the message is then
/// discarded when it arrives).
#[must_use = "the message is only copied into the buffer by `wait`"]
pub struct RecvInto<'t, 'b> {
    t: &'t Transport,
    op: OpId,
    buf: &'b mut [u8],
}

impl RecvInto<'_, '_> {
    /// Waits for the message, copies it into the buffer and returns its length;
    /// [`Error::InvalidArgument`] if it does not fit (it is then dropped).
    pub fn wait(self) -> Result<usize> {
        let data = self.t.wait(self.op)?.into_bytes();
        let (n, cap) = (data.len(), self.buf.len());
        let dst = self.buf.get_mut(..n).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "message of {n} bytes does not fit a buffer of {cap}"
            ))
        })?;
        dst.copy_from_slice(&data);
        Ok(n)
    }

    /// The operation id.
    pub fn op(&self) -> OpId {
        self.op
    }
}
