//! The proxy in DPU placement: it reaches the ranks only through the
//! transport, as a BlueField's Arm cores reach the host.
//!
//! No board, no cross-memory attach, no mapped file: a rank copies the part
//! of its send buffer the collective reads into registered memory (a
//! [`Region`] from its registration cache), sends the proxy a [`Request`]
//! message naming the collective and the remote keys of its send and receive
//! spans, and waits for an [`Answer`] message. The proxy reads each rank's
//! send span with RMA get into its own memory, runs the node's schedules
//! there once every rank's span arrived, writes each receive span back with
//! RMA put and answers when the put completed (after which the rank copies
//! its result out of the region). The proxy itself runs under a seccomp
//! filter that denies `process_vm_readv`/`process_vm_writev`, `pidfd_getfd`
//! and `ptrace` ([`forbid_host_memory`]).
//!
//! # Finding each other
//!
//! The first rank of each node of the communicator starts a [`Coordinator`]
//! for a job of the node's ranks plus one (the proxy is the last rank), on
//! `HPC_COLL_PROXY_ADDR`, and starts the proxy with its address and secret in
//! `HPC_COLL_PROXY_DPU`; the other ranks learn it through the communicator's
//! bootstrap. All of them join that small job and build a [`Transport`] over
//! it (`tcp`, or `ofi`/`verbs` when `HPC_TRANSPORT` names one), then leave
//! the job: from then on ranks and proxy talk only over the transport's
//! connections. The node's first rank then tells the proxy its [`Place`]:
//! the communicator's rank of each of its ranks, the node of every rank and,
//! where the communicator spans nodes, a second coordinator (started by the
//! communicator's first rank, on the address that routes to the launcher)
//! where the nodes' proxies meet to build a transport of their own
//! (`net.rs`'s `ProxyNet`). Each proxy then tells each of its ranks that it
//! is ready, or why not, and the ranks agree on the outcome.
//!
//! # Across nodes
//!
//! A collective starts on a node once every part of that node's ranks
//! arrived; its schedules run step by step (`steps.rs`), the steps whose
//! peer is on another node as messages to that node's proxy, tagged (source,
//! destination, sequence, schedule tag) as between host-placed proxies.
//! Messages that come before the collective started here wait with it; one
//! that comes after it finished here is dropped. A collective that fails on
//! one node (a refusal, a mismatch, a rank lost, a rank that cancelled it
//! before it finished there) fails on all: its proxy tells the others, which
//! drop what they hold of it. A proxy that loses another fails every collective in
//! flight and every later one with `NodeLost` naming that node.
//!
//! # Splits
//!
//! A split of a communicator in DPU placement starts no proxy: the group's
//! ranks keep their links, and each tells its proxy the group's id and
//! members once ([`Request::Open`]). The proxy serves each communicator with
//! its own collectives, keyed on the link by the rank's number for the
//! communicator beside the sequence number ([`wire`]), and between nodes by
//! the group's id after the payload, with ranks named as ranks of the first
//! communicator. A killed proxy fails every communicator that uses it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hpc_collectives::{sim, Collective, Options, Schedule};
use hpc_rdma::{Choice, OpId, Payload, Region, RemoteKey, Transport};
use hpc_runtime::{Coordinator, World};
use serde::{Deserialize, Serialize};

use super::memory::{footprint, try_filled, Budget, Refusal};
use super::net::{closed, read_name, watch_each_other, Failed, Hello, ProxyNet, TRAILER};
use super::protocol::Code;
use super::steps::{Run, RunError};
use crate::backoff::{Backoff, Pause};
use crate::error::{Error, Result};
use crate::job::Job;
use crate::sync::lock;

/// Where the `Proxy` engine's proxy runs, and so how it reaches the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Placement {
    /// Beside the ranks on the host: a shared-memory board, cross-memory
    /// attach and mapped [`SharedBuf`](crate::SharedBuf)s.
    #[default]
    Host,
    /// As on a DPU: only through the transport (registered memory, RMA get and
    /// put, messages); see the module `proxy::dpu`.
    Dpu,
}

impl Placement {
    /// `host` or `dpu`.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Host => "host",
            Placement::Dpu => "dpu",
        }
    }

    /// `HPC_COLL_PROXY_PLACEMENT`, else [`Placement::Host`]; a value that is
    /// neither is an error naming it.
    pub fn from_env() -> Result<Placement> {
        match std::env::var(hpc_runtime::env::COLL_PROXY_PLACEMENT) {
            Ok(v) => v.parse(),
            Err(_) => Ok(Placement::Host),
        }
    }
}

impl std::str::FromStr for Placement {
    type Err = Error;
    fn from_str(s: &str) -> Result<Placement> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "host" => Ok(Placement::Host),
            "dpu" => Ok(Placement::Dpu),
            o => Err(Error::Unsupported(format!(
                "proxy placement {o:?}: expected host or dpu ({})",
                hpc_runtime::env::COLL_PROXY_PLACEMENT
            ))),
        }
    }
}

/// Tag of the ranks' requests to the proxy.
const TAG_REQUEST: u64 = 1;
/// Tag of the node's first rank's [`Place`] message to its proxy.
const TAG_PLACE: u64 = 2;
/// Tag of the proxy's word to each rank that it is ready (empty) or why not.
const TAG_READY: u64 = 3;
/// Tag of the answer to collective `seq`: this plus the collective's number
/// on the link ([`wire`]).
const TAG_ANSWER: u64 = 1 << 32;
/// Bits of a collective's sequence number in its number on the link; the
/// bits above are the communicator's number on the rank's link (0 for the
/// communicator the link was made for, then one per split, [`MAX_LOCAL`] at
/// most).
const SEQ_BITS: u32 = 40;
/// The most communicators one rank has on its link to the proxy.
const MAX_LOCAL: u32 = (1 << 23) - 1;

/// The number on the link of collective `seq` of the rank's communicator
/// `local` (what its request starts with, and its answer's tag adds).
fn wire(local: u32, seq: u64) -> u64 {
    (u64::from(local) << SEQ_BITS) | (seq & ((1 << SEQ_BITS) - 1))
}

/// The communicator's number and the sequence number of a number on the link.
fn unwire(w: u64) -> (u32, u64) {
    ((w >> SEQ_BITS) as u32, w & ((1 << SEQ_BITS) - 1))
}

/// The id among the proxies of the group of colour `color` of split `index`
/// of communicator `parent`: every member computes the same, from what every
/// rank of the parent knows alike, and no two groups of one first
/// communicator share it but by a 64-bit hash collision (which the proxy
/// refuses: the same id with other members).
fn split_id(parent: u64, index: u64, color: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parent
        .to_le_bytes()
        .into_iter()
        .chain(index.to_le_bytes())
        .chain(color.to_le_bytes())
    {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    // 0 is the first communicator's.
    h.max(1)
}
/// The largest request the proxy decodes (a v-collective's counts for a
/// million ranks fit).
pub(crate) const MAX_REQUEST: usize = 64 << 20;

/// A span of a rank's registered memory: the key of its region (as
/// [`RemoteKey::to_bytes`] writes it), an offset and a length.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Span {
    pub key: Vec<u8>,
    pub offset: u64,
    pub len: u64,
}

/// What a rank says to the proxy (after the collective's sequence number,
/// 8 bytes little-endian, so that even an undecodable request is answered).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Request<C = Collective> {
    /// Run collective `seq` over these spans.
    Submit {
        coll: C,
        opts: Options,
        send: Span,
        recv: Span,
    },
    /// The rank gave collective `seq` up: neither put nor answer it.
    Cancel,
    /// The rank is gone.
    Detach,
    /// The rank is a member of communicator `comm` (its id among the
    /// proxies), a split of the one the link was made for: its collectives
    /// come with this request's communicator number. `members`: the first
    /// communicator's rank of each of its ranks, in rank order.
    Open { comm: u64, members: Vec<usize> },
}

/// What the proxy answers to collective `seq` (on tag `TAG_ANSWER + seq`).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Answer {
    pub code: u8,
    /// For `Lost` and `Mismatch`: the rank concerned.
    pub aux: u64,
    /// Why, for anything but `Ok`.
    pub why: String,
}

/// What the node's first rank tells its proxy once the link is up: where
/// it is among the communicator's nodes and how to reach the other proxies.
#[derive(Debug, Serialize, Deserialize)]
struct Place {
    /// The communicator's rank of each of the link's ranks (the node's ranks).
    ranks: Vec<usize>,
    /// The node index of each rank of the communicator.
    node_of: Vec<usize>,
    /// The world's node id of each node index (what errors name).
    node_ids: Vec<usize>,
    /// This proxy's node index.
    me: usize,
    /// The coordinator the nodes' proxies meet at (address, secret), where
    /// the communicator spans nodes.
    net: Option<(String, u64)>,
}

/// What each rank contributes to the first allgather of the set-up: a
/// node's first rank its link's coordinator (address and secret) or why it
/// has none; the communicator's first rank also the proxies' coordinator.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Offer {
    link: Option<std::result::Result<(String, u64), String>>,
    net: Option<std::result::Result<(String, u64), String>>,
}

/// The nodes of a communicator: the node index of each rank, and the world
/// node id of each index, in the order of their first ranks.
fn places(nodes: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let mut ids: Vec<usize> = Vec::new();
    let node_of = nodes
        .iter()
        .map(|n| match ids.iter().position(|i| i == n) {
            Some(k) => k,
            None => {
                ids.push(*n);
                ids.len() - 1
            }
        })
        .collect();
    (node_of, ids)
}

fn encode_request<C: Serialize>(seq: u64, req: &Request<C>) -> Result<Vec<u8>> {
    postcard::to_extend(req, seq.to_le_bytes().to_vec())
        .map_err(|e| Error::transport_from("encoding a request to the proxy", e))
}

/// Splits a request message into its sequence number and request.
pub(crate) fn decode_request(bytes: &[u8]) -> std::result::Result<(u64, Request), String> {
    if bytes.len() > MAX_REQUEST {
        return Err(format!("a request of {} bytes", bytes.len()));
    }
    let Some((seq, body)) = bytes.split_first_chunk::<8>() else {
        return Err(format!(
            "a request of {} bytes, shorter than its header",
            bytes.len()
        ));
    };
    let seq = u64::from_le_bytes(*seq);
    let req = postcard::from_bytes::<Request>(body)
        .map_err(|e| format!("collective {seq}: an undecodable request ({e})"))?;
    Ok((seq, req))
}

/// One rank's part of a collective, as the proxy checked it.
pub(crate) struct Part {
    pub sched: Schedule,
    pub send: (RemoteKey, u64, usize),
    pub recv: (RemoteKey, u64, usize),
    /// The receive span is an input too (the broadcast root's buffer).
    pub recv_input: bool,
}

fn span_key(
    what: &str,
    rank: usize,
    s: &Span,
) -> std::result::Result<(RemoteKey, u64, usize), String> {
    let key = RemoteKey::from_bytes(&s.key).map_err(|e| format!("the {what} key: {e}"))?;
    if key.rank() != rank {
        return Err(format!(
            "the {what} key is rank {}'s, not the sender's (rank {rank})",
            key.rank()
        ));
    }
    let end = s.offset.checked_add(s.len);
    if end.is_none_or(|e| e > key.len()) {
        return Err(format!(
            "the {what} span ({} bytes at {}) exceeds its region of {} bytes",
            s.len,
            s.offset,
            key.len()
        ));
    }
    let len = usize::try_from(s.len).map_err(|_| format!("the {what} span is too long"))?;
    Ok((key, s.offset, len))
}

/// Checks rank `rank`'s submit against a communicator of `size` and builds its
/// schedule: everything the proxy believes of a rank's message.
/// `link` is the sender's rank on the link (whose keys it may name), `rank`
/// its rank in the communicator.
pub(crate) fn check_submit(
    coll: &Collective,
    opts: &Options,
    send: &Span,
    recv: &Span,
    link: usize,
    rank: usize,
    size: usize,
) -> std::result::Result<Part, String> {
    let send = span_key("send", link, send)?;
    let recv = span_key("receive", link, recv)?;
    coll.check_buffers(rank, size, send.2, recv.2)
        .map_err(|e| format!("{}: {e}", coll.kind()))?;
    let sched = coll
        .schedule(rank, size, opts)
        .map_err(|e| format!("{}: {e}", coll.kind()))?;
    sim::check(&sched, send.2, recv.2).map_err(|e| format!("{}: {e}", coll.kind()))?;
    Ok(Part {
        sched,
        send,
        recv,
        recv_input: recv_is_input(coll, rank),
    })
}

/// Whether rank `rank`'s receive buffer holds input of `coll` (only the
/// broadcast's root's does: MPI's single buffer).
fn recv_is_input(coll: &Collective, rank: usize) -> bool {
    matches!(coll, Collective::Broadcast { root, .. } if *root == rank)
}

// ---------------------------------------------------------------------------
// Finding each other.

/// The backend of the link between ranks and proxy: `HPC_TRANSPORT` where it
/// names a network backend, else tcp (never shared memory).
fn link_backend() -> Choice {
    match std::env::var(hpc_runtime::env::TRANSPORT)
        .ok()
        .and_then(|v| v.parse::<Choice>().ok())
    {
        Some(c @ (Choice::Ofi | Choice::Verbs)) => c,
        _ => Choice::Tcp,
    }
}

fn backend_name(c: Choice) -> &'static str {
    match c {
        Choice::Ofi => "ofi",
        Choice::Verbs => "verbs",
        _ => "tcp",
    }
}

/// The address the first rank listens on for its proxy: `HPC_COLL_PROXY_ADDR`,
/// else the one that routes to the node's DPU (`HPC_COLL_PROXY_DPU_HOST`),
/// else loopback.
fn host_addr() -> Result<IpAddr> {
    match std::env::var(hpc_runtime::env::COLL_PROXY_ADDR) {
        Ok(v) => v.trim().parse().map_err(|_| {
            Error::Unsupported(format!(
                "{}={v:?} is not an IP address",
                hpc_runtime::env::COLL_PROXY_ADDR
            ))
        }),
        Err(_) => match dpu_service_addr() {
            Some(at) => Ok(route_to(at?)),
            None => Ok(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        },
    }
}

/// The default port of the standing DPU service ([`dpu_service`](super::dpu_service)).
pub const DPU_SERVICE_PORT: u16 = 7471;

/// The address of this node's DPU service, from `HPC_COLL_PROXY_DPU_HOST`
/// (`host[:port]`, `{host}` replaced by this host's name); `None` if unset.
fn dpu_service_addr() -> Option<Result<SocketAddr>> {
    use std::net::ToSocketAddrs;
    let v = std::env::var(hpc_runtime::env::COLL_PROXY_DPU_HOST).ok()?;
    let at = v.trim().replace("{host}", &hpc_runtime::hostname());
    let with_port = if at.contains(':') {
        at.clone()
    } else {
        format!("{at}:{DPU_SERVICE_PORT}")
    };
    Some(
        with_port
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| {
                Error::Unsupported(format!(
                    "{}={v:?}: no address for {with_port}",
                    hpc_runtime::env::COLL_PROXY_DPU_HOST
                ))
            }),
    )
}

/// The local address that routes to `to`.
fn route_to(to: SocketAddr) -> IpAddr {
    let any = if to.is_ipv4() {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
    };
    UdpSocket::bind(SocketAddr::new(any, 0))
        .and_then(|u| u.connect(to).and_then(|_| u.local_addr()))
        .map(|a| a.ip())
        .unwrap_or(to.ip())
}

/// The small job that ranks and proxy meet in: its coordinator, members
/// (the ranks, then the proxy), timeout and the transport's backend.
struct Link {
    rendezvous: String,
    secret: u64,
    members: usize,
    timeout: Duration,
    backend: Choice,
}

/// The other side's liveness, whatever the transport: a plain TCP
/// connection between each rank and the proxy that carries nothing and
/// closes when its process ends (the kernel closes it), so that a waiting
/// side learns of the other's death even where the transport reports a lost
/// peer only when an operation to it fails (libfabric's `tcp;ofi_rxm`).
pub(crate) enum Watch {
    /// A rank's connection to the proxy.
    Proxy(TcpStream),
    /// The proxy's connections from the ranks, by rank (`None` once closed).
    Ranks(Vec<Option<TcpStream>>),
}

/// The watch connections: the proxy (the last member) listens on `ip`, every
/// rank connects and names itself.
fn watch(side: &World, rank: usize, ip: IpAddr, timeout: Duration) -> Result<Watch> {
    let io = |what: &str, e: std::io::Error| Error::transport_from(what, e);
    let size = side.size();
    let listener = if rank == size - 1 {
        Some(TcpListener::bind(SocketAddr::new(ip, 0)).map_err(|e| io("listening", e))?)
    } else {
        None
    };
    let mine = match &listener {
        Some(l) => l.local_addr().map_err(|e| io("listening", e))?.to_string(),
        None => String::new(),
    };
    let all = side.allgather(mine.as_bytes())?;
    let Some(l) = listener else {
        let at = String::from_utf8_lossy(&all[size - 1]).into_owned();
        let addr: SocketAddr = at
            .parse()
            .map_err(|_| Error::transport(format!("the proxy's watch address {at:?}")))?;
        let mut s = TcpStream::connect_timeout(&addr, timeout)
            .map_err(|e| io(&format!("connecting to the proxy at {addr}"), e))?;
        s.write_all(&(rank as u64).to_le_bytes())
            .map_err(|e| io("greeting the proxy", e))?;
        s.set_nonblocking(true).map_err(|e| io("watch", e))?;
        return Ok(Watch::Proxy(s));
    };
    let mut ranks: Vec<Option<TcpStream>> = (0..size - 1).map(|_| None).collect();
    let deadline = Instant::now() + timeout;
    l.set_nonblocking(true).map_err(|e| io("watch", e))?;
    while ranks.iter().any(Option::is_none) {
        match l.accept() {
            Ok((mut s, from)) => match read_name(&mut s) {
                Ok(r) if r < ranks.len() && ranks[r].is_none() => ranks[r] = Some(s),
                _ => tracing::warn!(%from, "DPU proxy: refused a watch connection"),
            },
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    let missing: Vec<usize> =
                        (0..ranks.len()).filter(|&r| ranks[r].is_none()).collect();
                    return Err(Error::transport(format!(
                        "ranks {missing:?} did not connect to the proxy within {timeout:?}"
                    )));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(io("accepting a rank", e)),
        }
    }
    Ok(Watch::Ranks(ranks))
}

/// Joins the link's job as `rank` and builds the transport over it,
/// listening on `ip`; then the watch connections.
fn join(link: &Link, rank: usize, ip: IpAddr, node: &str) -> Result<(Transport, Watch)> {
    let Link {
        ref rendezvous,
        secret,
        members: size,
        timeout,
        backend,
    } = *link;
    let env = hpc_runtime::env::NODE_NAME;
    let map: HashMap<String, String> = [
        (hpc_runtime::env::RANK, rank.to_string()),
        (hpc_runtime::env::SIZE, size.to_string()),
        (hpc_runtime::env::RENDEZVOUS, rendezvous.to_string()),
        (hpc_runtime::env::SECRET, format!("{secret:x}")),
        (hpc_runtime::env::TIMEOUT, timeout.as_secs_f64().to_string()),
        (env, node.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let config = hpc_runtime::Config::from_map(map)?;
    let side = World::init_with(config)?;
    let t = Transport::with_options(
        &side,
        hpc_rdma::Options {
            backend,
            timeout: Some(timeout),
            tcp_addr: Some(ip),
        },
    )
    .map_err(|e| Error::transport_from("the link between ranks and DPU proxy", e))?;
    let w = watch(&side, rank, ip, timeout)?;
    side.barrier()?;
    Ok((t, w))
}

// ---------------------------------------------------------------------------
// A rank's side.

/// The bootstrap allgather of a communicator being created.
pub(crate) type Allgather<'a> = &'a dyn Fn(&[u8]) -> Result<Vec<Vec<u8>>>;

/// A rank's link to its node's DPU-placed proxy, shared by the communicator
/// it was made for and every split of it.
struct Conn {
    t: Transport,
    /// This rank in the first communicator (for the logs).
    me: usize,
    /// The proxy's rank on the link (after the node's ranks).
    proxy_at: usize,
    /// Registered regions not in use: the registration cache.
    cache: Mutex<Vec<Region>>,
    /// Requests sent whose completion was not taken yet.
    sends: Mutex<Vec<OpId>>,
    /// Set once the proxy was found gone.
    gone: AtomicBool,
    /// The watch connection to the proxy, and when it was last looked at.
    watch: TcpStream,
    watched: Mutex<Instant>,
    /// The application's registered buffers ([`RegisteredBuf`](crate::RegisteredBuf)):
    /// (address, length, region); a collective on one needs no staging.
    registered: Mutex<Vec<(usize, usize, std::sync::Weak<Region>)>>,
    /// The number the next split gets on this link.
    next_local: std::sync::atomic::AtomicU32,
}

/// A rank's side of one communicator served by its DPU-placed proxy: the
/// communicator the link was made for, or a split of it, which sends its
/// collectives to the same proxy (no proxy process per split).
pub(crate) struct Client {
    link: Arc<Conn>,
    /// This rank in the communicator, and the communicator's size.
    me: usize,
    size: usize,
    /// World rank of each member.
    world: Vec<usize>,
    /// The first communicator's rank of each member (what the proxies know).
    first: Vec<usize>,
    /// The communicator's id among the proxies (0: the first).
    id: u64,
    /// Its number on this rank's link (0: the first).
    local: u32,
    opts: Options,
    timeout: Duration,
    spin: Duration,
    detached: AtomicBool,
}

/// How often a waiting rank looks at its watch connection, and the proxy at
/// its ranks'.
const WATCH_EVERY: Duration = Duration::from_millis(5);

/// How long the DPU proxy waits, after a rank's watch connection closed, for
/// that rank's `Detach` still in flight on the transport, before it counts
/// the rank as dead (and tells the other nodes so). A rank that ends normally
/// has sent its `Detach`, and waited for the send to complete, before it
/// exits ([`Client::detach`]).
const DETACH_GRACE: Duration = Duration::from_millis(100);

/// How long a rank's `Detach` may take to leave it.
const DETACH_SEND_FOR: Duration = Duration::from_secs(1);

/// Regions the cache keeps (at most), and bytes.
const CACHE_REGIONS: usize = 16;
const CACHE_BYTES: usize = 256 << 20;

/// Decodes a coordinator's (address, secret) offer.
fn offered(
    what: &str,
    rank: usize,
    o: Option<&std::result::Result<(String, u64), String>>,
) -> Result<(String, u64)> {
    match o {
        Some(Ok(x)) => Ok(x.clone()),
        Some(Err(e)) => Err(Error::transport(format!(
            "rank {rank} could not start {what}: {e}"
        ))),
        None => Err(Error::transport(format!("rank {rank} offered no {what}"))),
    }
}

impl Client {
    /// Collective over the communicator's ranks (`allgather` is its
    /// bootstrap; `nodes` the world node id of each rank): the first rank of
    /// each node starts its node's proxy, every rank connects to its node's,
    /// and where the communicator spans nodes the proxies connect to each
    /// other (at a coordinator in the communicator's first rank).
    pub(crate) fn start(
        me: usize,
        world: Vec<usize>,
        nodes: &[usize],
        opts: &Options,
        timeout: Duration,
        spin: Duration,
        allgather: Allgather<'_>,
    ) -> Result<Client> {
        // A bad cap would only be seen by the proxy: refuse it here, by name.
        super::memory::max_scratch().map_err(Error::Unsupported)?;
        let size = world.len();
        let (node_of, node_ids) = places(nodes);
        let mine = node_of[me];
        let local: Vec<usize> = (0..size).filter(|&r| node_of[r] == mine).collect();
        let link_me = local.iter().position(|&r| r == me).unwrap_or(0);
        let spans = node_ids.len() > 1;
        let backend = link_backend();
        let ip = host_addr();
        let mut coord = None;
        let mut net_coord = None;
        let mut offer = Offer::default();
        if link_me == 0 {
            offer.link = Some(match Conn::launch(local.len(), timeout, backend, &ip) {
                Ok((c, secret)) => {
                    let o = (c.addr().to_string(), secret);
                    coord = Some(c);
                    Ok(o)
                }
                Err(e) => Err(e.chain()),
            });
        }
        if me == 0 && spans {
            offer.net = Some(match Self::meeting(node_ids.len(), timeout, &ip) {
                Ok((c, secret)) => {
                    let o = (c.addr().to_string(), secret);
                    net_coord = Some(c);
                    Ok(o)
                }
                Err(e) => Err(e.chain()),
            });
        }
        let bytes = postcard::to_allocvec(&offer)
            .map_err(|e| Error::transport_from("encoding the proxy's address", e))?;
        let offers: Vec<Offer> = allgather(&bytes)?
            .iter()
            .map(|b| postcard::from_bytes(b).unwrap_or_default())
            .collect();
        // Every rank fails alike when any node has no proxy.
        let mut link_at = None;
        for k in 0..node_ids.len() {
            let first = node_of.iter().position(|&n| n == k).unwrap_or(0);
            let o = offered("its node's DPU proxy", first, offers[first].link.as_ref())?;
            if k == mine {
                link_at = Some(o);
            }
        }
        let net = if spans {
            Some(offered(
                "the meeting point of the nodes' DPU proxies",
                0,
                offers[0].net.as_ref(),
            )?)
        } else {
            None
        };
        let (addr, secret) = link_at.ok_or_else(|| Error::transport("no proxy for this node"))?;
        let link = Link {
            rendezvous: addr.clone(),
            secret,
            members: local.len() + 1,
            timeout,
            backend,
        };
        let t = ip
            .and_then(|ip| join(&link, link_me, ip, "host"))
            .and_then(|(t, w)| {
                // The node's first rank tells the proxy its place; every rank then
                // waits for the proxy's word that it is connected (to the other
                // nodes' proxies too).
                let proxy = local.len();
                if link_me == 0 {
                    let place = Place {
                        ranks: local.clone(),
                        node_of: node_of.clone(),
                        node_ids: node_ids.clone(),
                        me: mine,
                        net: net.clone(),
                    };
                    let b = postcard::to_allocvec(&place)
                        .map_err(|e| Error::transport_from("encoding the proxy's place", e))?;
                    let op = t
                        .send(proxy, TAG_PLACE, b)
                        .map_err(|e| Error::transport_from("telling the proxy its place", e))?;
                    t.wait_timeout(op, timeout)
                        .map_err(|e| Error::transport_from("telling the proxy its place", e))?;
                }
                let op = t
                    .recv(proxy, TAG_READY)
                    .map_err(|e| Error::transport_from("waiting for the proxy", e))?;
                let word = t
                    .wait_timeout(op, timeout)
                    .map_err(|e| Error::transport_from("waiting for the proxy to connect", e))?
                    .into_bytes();
                if !word.is_empty() {
                    return Err(Error::transport(format!(
                        "the DPU proxy of node {}: {}",
                        node_ids[mine],
                        String::from_utf8_lossy(&word)
                    )));
                }
                Ok((t, w))
            });
        // Every rank says how its join went, so that all fail alike, with the
        // first reason; until then the coordinators stay, for ranks that come
        // late to learn it (a proxy that did not serve is reported there).
        let mine_outcome = match &t {
            Ok(_) => String::new(),
            Err(e) => e.chain(),
        };
        let all = allgather(mine_outcome.as_bytes());
        drop(coord);
        drop(net_coord);
        let failed = all?
            .iter()
            .enumerate()
            .find(|(_, b)| !b.is_empty())
            .map(|(r, b)| (r, String::from_utf8_lossy(b).into_owned()));
        if let Some((r, why)) = failed {
            return Err(Error::transport(format!(
                "connecting to the DPU proxy (link job at {addr}), rank {r}: {why}"
            )));
        }
        let (t, watch) = t?;
        let Watch::Proxy(watch) = watch else {
            unreachable!("a rank's watch is its connection to the proxy");
        };
        tracing::info!(
            rank = me,
            backend = backend_name(backend),
            nodes = node_ids.len(),
            "connected to the DPU proxy"
        );
        let link = Arc::new(Conn {
            t,
            me,
            proxy_at: local.len(),
            cache: Mutex::new(Vec::new()),
            sends: Mutex::new(Vec::new()),
            gone: false.into(),
            watch,
            watched: Mutex::new(Instant::now()),
            registered: Mutex::new(Vec::new()),
            next_local: 1.into(),
        });
        Ok(Client {
            link,
            me,
            size,
            world,
            first: (0..size).collect(),
            id: 0,
            local: 0,
            opts: *opts,
            timeout,
            spin,
            detached: false.into(),
        })
    }

    /// This rank's side of the group `s` of a split of this communicator: a
    /// communicator served by the same proxies as this one, over the same
    /// link (no set-up: the rank tells its proxy the group's members, and
    /// its collectives carry the group's number).
    pub(crate) fn split(&self, s: &crate::job::Split<'_>) -> Result<Client> {
        if self.link.proxy_gone() {
            return Err(Error::Stopped("proxy"));
        }
        let local = self
            .link
            .next_local
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n <= MAX_LOCAL).then_some(n + 1)
            })
            .map_err(|_| {
                Error::Unsupported(format!(
                    "more than {MAX_LOCAL} communicators on one rank's link to its DPU proxy"
                ))
            })?;
        let id = split_id(self.id, s.index, s.color);
        let first: Vec<usize> = s.members.iter().map(|&m| self.first[m]).collect();
        let world: Vec<usize> = s.members.iter().map(|&m| self.world[m]).collect();
        tracing::debug!(
            rank = self.me,
            comm = id,
            local,
            size = first.len(),
            "a split served by the node's DPU proxy"
        );
        let open = Request::<Collective>::Open {
            comm: id,
            members: first.clone(),
        };
        self.link.send(encode_request(wire(local, 0), &open)?)?;
        Ok(Client {
            link: self.link.clone(),
            me: s.rank,
            size: first.len(),
            world,
            first,
            id,
            local,
            opts: self.opts,
            timeout: self.timeout,
            spin: self.spin,
            detached: false.into(),
        })
    }

    /// The communicator's first rank, across nodes: the coordinator the
    /// nodes' proxies meet at, on an address the other nodes reach (the one
    /// that routes to the launcher's rendezvous, else the link's address).
    fn meeting(nodes: usize, timeout: Duration, ip: &Result<IpAddr>) -> Result<(Coordinator, u64)> {
        use std::net::ToSocketAddrs;
        let ip = match ip {
            Ok(ip) => *ip,
            Err(e) => return Err(Error::Unsupported(e.to_string())),
        };
        let routed = std::env::var(hpc_runtime::env::RENDEZVOUS)
            .ok()
            .and_then(|r| r.to_socket_addrs().ok()?.next())
            .map(route_to);
        // Without a launcher's rendezvous (e.g. under Slurm's PMIx), the
        // address of this host's name where the link's is loopback.
        let named = || {
            (hpc_runtime::hostname(), 0u16)
                .to_socket_addrs()
                .ok()?
                .map(|a| a.ip())
                .find(|i| !i.is_loopback())
        };
        let ip = routed
            .or_else(|| if ip.is_loopback() { named() } else { None })
            .unwrap_or(ip);
        let secret = hpc_runtime::random_u64()?;
        let coord = Coordinator::start(nodes, secret, timeout, ip).map_err(|e| {
            Error::transport_from(format!("listening for the nodes' proxies on {ip}"), e)
        })?;
        Ok((coord, secret))
    }

    /// A region of `bytes` for the application's own buffer: the proxy reads
    /// and writes it in place (for any communicator on this link).
    pub(crate) fn register_buf(&self, bytes: usize) -> Result<Arc<Region>> {
        self.link.register_buf(bytes)
    }
}

impl Conn {
    fn register_buf(&self, bytes: usize) -> Result<Arc<Region>> {
        let r = Arc::new(
            self.t
                .register(bytes.max(1))
                .map_err(|e| Error::transport_from(format!("registering {bytes} bytes"), e))?,
        );
        let mut reg = lock(&self.registered);
        reg.retain(|(_, _, w)| w.strong_count() > 0);
        reg.push((r.as_ptr() as usize, bytes, Arc::downgrade(&r)));
        Ok(r)
    }

    /// The registered buffer that holds `[at, at + len)`, and the offset in it.
    fn lookup(&self, at: usize, len: usize) -> Option<(Arc<Region>, u64)> {
        if len == 0 {
            return None;
        }
        let end = at.checked_add(len)?;
        let reg = lock(&self.registered);
        reg.iter().find_map(|(base, n, w)| {
            (at >= *base && end <= base + n)
                .then(|| w.upgrade().map(|r| (r, (at - base) as u64)))
                .flatten()
        })
    }

    /// Whether the proxy is known gone: its connection broke, or (looked at
    /// every [`WATCH_EVERY`]) its watch connection closed.
    fn proxy_gone(&self) -> bool {
        if self.gone.load(Ordering::Acquire) {
            return true;
        }
        {
            let mut last = lock(&self.watched);
            if last.elapsed() < WATCH_EVERY {
                return false;
            }
            *last = Instant::now();
        }
        if closed(&self.watch) {
            tracing::warn!(
                rank = self.me,
                "the DPU proxy closed its watch connection: it is gone"
            );
            self.gone.store(true, Ordering::Release);
        }
        self.gone.load(Ordering::Acquire)
    }

    /// Rank 0: the link's coordinator and the proxy process.
    fn launch(
        size: usize,
        timeout: Duration,
        backend: Choice,
        ip: &Result<IpAddr>,
    ) -> Result<(Arc<Coordinator>, u64)> {
        if std::env::var_os(hpc_runtime::env::COLL_PROXY_DPU).is_some() {
            return Err(Error::Unsupported(
                "this process was started as a collectives proxy but did not call \
                 hpc_rs::init() or hpc_comm::proxy::serve_env(); call one first thing in \
                 main, or run the job with `hpc run --proxy`"
                    .into(),
            ));
        }
        let ip = match ip {
            Ok(ip) => *ip,
            Err(e) => return Err(Error::Unsupported(e.to_string())),
        };
        let secret = hpc_runtime::random_u64()?;
        let coord = Coordinator::start(size + 1, secret, timeout, ip)
            .map_err(|e| Error::transport_from(format!("listening for the proxy on {ip}"), e))?;
        let spec = format!(
            "{} {secret:x} {} {} {}",
            coord.addr(),
            size + 1,
            timeout.as_secs_f64(),
            backend_name(backend)
        );
        let mut cmd = super::client::proxy_command();
        cmd.stdin(std::process::Stdio::null());
        // Its own process group, as in host placement: it serves every rank.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        // The launcher's variables go (so that the program serves rather than
        // joins the job); the libfabric provider stays, for `HPC_TRANSPORT=ofi`,
        // and so does the proxy's memory cap.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("HPC_")
                && k != super::PROXY_CMD
                && k != hpc_runtime::env::OFI_PROVIDER
                && k != hpc_runtime::env::COLL_PROXY_MAX_SCRATCH
            {
                cmd.env_remove(&k);
            }
        }
        if let Some(at) = dpu_service_addr() {
            let at = at?;
            let key = super::service::DpuKey::from_env()?;
            let coord = Arc::new(coord);
            launch_remote(
                at,
                key.as_ref(),
                &spec,
                timeout,
                Arc::downgrade(&coord),
                size,
            )?;
            return Ok((coord, secret));
        }
        cmd.env(hpc_runtime::env::COLL_PROXY_DPU, spec);
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::transport_from(format!("starting the proxy ({cmd:?})"), e))?;
        let coord = Arc::new(coord);
        let weak = Arc::downgrade(&coord);
        // Until the link is up, a proxy that exits fails the link's job at once
        // (the coordinator tells every member) rather than by its timeout; then
        // the thread only reaps it.
        std::thread::spawn(move || loop {
            match child.try_wait() {
                Ok(Some(st)) => {
                    if let Some(c) = weak.upgrade() {
                        c.rank_exited(
                            size,
                            false,
                            format!(
                                "the proxy process exited ({st}) without serving: call \
                                 hpc_rs::init() or hpc_comm::proxy::serve_env() first thing \
                                 in main, run the job with `hpc run --proxy`, or set \
                                 HPC_COLL_PROXY_CMD to a program that serves"
                            ),
                        );
                    }
                    return;
                }
                Ok(None) if weak.strong_count() == 0 => {
                    let _ = child.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => return,
            }
        });
        Ok((coord, secret))
    }

    fn proxy(&self) -> usize {
        self.proxy_at
    }

    /// A transport error of the link, as the communicator reports it.
    fn link_error(&self, e: hpc_rdma::Error) -> Error {
        match e {
            hpc_rdma::Error::PeerLost { .. } => {
                self.gone.store(true, Ordering::Release);
                Error::Stopped("proxy")
            }
            e => Error::transport_from("the link to the DPU proxy", e),
        }
    }

    /// A registered region of at least `len` bytes from the cache.
    fn region(&self, len: usize) -> Result<Region> {
        {
            let mut c = lock(&self.cache);
            let best = c
                .iter()
                .enumerate()
                .filter(|(_, r)| r.len() >= len)
                .min_by_key(|(_, r)| r.len())
                .map(|(i, _)| i);
            if let Some(i) = best {
                return Ok(c.swap_remove(i));
            }
        }
        let cap = len.max(4096).next_power_of_two();
        tracing::debug!(
            rank = self.me,
            bytes = cap,
            "registering a region for the proxy"
        );
        self.t
            .register(cap)
            .map_err(|e| Error::transport_from(format!("registering {cap} bytes"), e))
    }

    /// Returns a region to the cache (or deregisters it beyond the cache's bounds).
    fn give(&self, r: Region) {
        let mut c = lock(&self.cache);
        let bytes: usize = c.iter().map(Region::len).sum();
        if c.len() < CACHE_REGIONS && bytes + r.len() <= CACHE_BYTES {
            c.push(r);
        } else {
            drop(c);
            self.t.deregister(r);
        }
    }

    fn send(&self, bytes: Vec<u8>) -> Result<()> {
        let op = self
            .t
            .send(self.proxy(), TAG_REQUEST, bytes)
            .map_err(|e| self.link_error(e))?;
        let mut sends = lock(&self.sends);
        sends.push(op);
        self.take_sent(&mut sends).map(drop)
    }

    /// Takes the completions of the sends that went out; `Ok(true)` once
    /// none is left in flight.
    fn take_sent(&self, sends: &mut Vec<OpId>) -> Result<bool> {
        let mut failed = None;
        sends.retain(|&op| match self.t.test(op) {
            Ok(None) => true,
            Ok(Some(_)) => false,
            Err(e) => {
                failed = Some(e);
                false
            }
        });
        match failed {
            Some(e) => Err(self.link_error(e)),
            None => Ok(sends.is_empty()),
        }
    }
}

impl Client {
    pub(crate) fn submit(&self, mut job: Job<'_>) -> Result<Posted> {
        if self.link.proxy_gone() {
            return Err(Error::Stopped("proxy"));
        }
        let seq = job.seq;
        let direct = job.direct();
        let (coll, send, recv) = job.parts();
        let (need_s, need_r) = coll.buffer_bytes(self.me, self.size);
        // The application's registered buffers are read and written in place
        // (only a direct job works on them; a staged one on its copies).
        let user_s = self.link.lookup(send.as_ptr() as usize, need_s);
        let user_r = self.link.lookup(recv.as_ptr() as usize, need_r);
        let stage_s = if user_s.is_some() { 0 } else { need_s };
        let stage_r = if user_r.is_some() { 0 } else { need_r };
        let recv_at = stage_s.div_ceil(64) * 64;
        // A region even for nothing to stage: its key names this rank's spans.
        let region = if user_s.is_none() || user_r.is_none() {
            Some(self.link.region(recv_at + stage_r)?)
        } else {
            None
        };
        let put = |off: usize, b: &[u8]| match &region {
            Some(r) => r
                .write(off, b)
                .map_err(|e| Error::transport_from("staging into registered memory", e)),
            None => Ok(()),
        };
        if user_s.is_none() {
            put(0, &send[..need_s])?;
        }
        if user_r.is_none() && recv_is_input(coll, self.me) {
            put(recv_at, &recv[..need_r])?;
        }
        let staged_key = region
            .as_ref()
            .map(|r| r.remote_key().to_bytes().to_vec())
            .unwrap_or_default();
        let span = |user: &Option<(Arc<Region>, u64)>, at: usize, len: usize| match user {
            Some((r, off)) => Span {
                key: r.remote_key().to_bytes().to_vec(),
                offset: *off,
                len: len as u64,
            },
            None => Span {
                key: staged_key.clone(),
                offset: at as u64,
                len: len as u64,
            },
        };
        let req = Request::Submit {
            coll,
            opts: self.opts,
            send: span(&user_s, 0, need_s),
            recv: span(&user_r, recv_at, need_r),
        };
        let bytes = encode_request(wire(self.local, seq), &req)?;
        // A result staged in the region is copied out to a direct job's buffer.
        let out = (direct && user_r.is_none()).then_some(Out(recv.as_mut_ptr()));
        let in_place = user_s.is_some() || user_r.is_some();
        let recv_len = if user_r.is_some() { 0 } else { need_r };
        let mut users: Vec<Arc<Region>> = Vec::new();
        users.extend(user_s.map(|u| u.0));
        users.extend(user_r.map(|u| u.0));
        // The proxy works on the region only: a staged job's copies can go.
        drop(job.stage.take());
        // The answer's receive is posted before the request goes out.
        let answer = self
            .link
            .t
            .recv(self.link.proxy(), TAG_ANSWER + wire(self.local, seq))
            .map_err(|e| self.link.link_error(e))?;
        if let Err(e) = self.link.send(bytes) {
            if let Some(r) = region {
                self.link.give(r);
            }
            return Err(e);
        }
        Ok(Posted {
            seq,
            answer,
            state: Mutex::new(State {
                region,
                outcome: None,
            }),
            recv_at,
            recv_len,
            out,
            in_place,
            _users: users,
        })
    }

    /// Takes `p`'s answer if it came; whether `p` has an outcome.
    pub(crate) fn poll(&self, p: &Posted) -> bool {
        let mut st = lock(&p.state);
        if st.outcome.is_some() {
            return true;
        }
        let res = match self.link.t.test(p.answer) {
            Ok(None) if self.link.proxy_gone() => Err(Error::Stopped("proxy")),
            Ok(None) => return false,
            Ok(Some(payload)) => self.outcome(p.seq, payload),
            Err(e) => Err(self.link.link_error(e)),
        };
        if res.is_ok() {
            if let (Some(out), Some(region)) = (p.out, &st.region) {
                // SAFETY: a direct job's receive buffer is borrowed by its request
                // or scope until this collective is finished (waited for or
                // cancelled), for `recv_len` bytes at least (`check_buffers`); the
                // region holds the result at `recv_at` (the proxy's put completed
                // before it answered), and the two do not overlap (the region is
                // the transport's own mapping).
                let dst = unsafe { std::slice::from_raw_parts_mut(out.0, p.recv_len) };
                if let Err(e) = region.read(p.recv_at, dst) {
                    st.outcome = Some(Err(Error::transport_from(
                        "reading the result from registered memory",
                        e,
                    )));
                    return true;
                }
            }
        }
        st.outcome = Some(res);
        true
    }

    fn outcome(&self, seq: u64, payload: Payload) -> Result<()> {
        let bytes = payload.into_bytes();
        let a: Answer = postcard::from_bytes(&bytes).map_err(|e| {
            Error::transport(format!(
                "an undecodable answer from the proxy to collective {seq}: {e}"
            ))
        })?;
        let world = |r: u64| self.world.get(r as usize).copied().unwrap_or(r as usize);
        match Code::from_wire(a.code as u64) {
            Code::Ok => Ok(()),
            Code::Lost => Err(Error::RankLost { rank: world(a.aux) }),
            Code::Mismatch => Err(Error::CountMismatch {
                rank: world(a.aux),
                detail: a.why,
            }),
            // Another node's proxy is gone: that node is named, as the
            // host-placed proxies name it.
            Code::NodeLost => Err(Error::NodeLost {
                node: a.aux as usize,
            }),
            Code::Failed => Err(Error::transport(format!(
                "the DPU proxy refused collective {seq}: {}",
                a.why
            ))),
            Code::OverCap | Code::NoMemory => Err(Error::ProxyMemory {
                bytes: (a.aux != u64::MAX).then_some(a.aux),
                why: format!("the DPU proxy refused collective {seq}: {}", a.why),
            }),
        }
    }

    pub(crate) fn wait(&self, p: &Posted, out: Option<&mut [u8]>) -> Result<()> {
        let t0 = Instant::now();
        let backoff = Backoff::new(self.spin, true);
        while !self.poll(p) {
            if t0.elapsed() > self.timeout {
                return Err(Error::Timeout {
                    after: self.timeout,
                    waiting_for: Vec::new(),
                });
            }
            match backoff.pause() {
                Pause::Spin => std::hint::spin_loop(),
                Pause::Yield => std::thread::yield_now(),
                // Longer the longer the wait (a sixteenth of it, 50-500 µs): a
                // large collective's answer comes milliseconds later, and every
                // look at the transport costs the rank's CPU.
                Pause::Sleep => std::thread::sleep(
                    (backoff.idle() / 16)
                        .clamp(Duration::from_micros(50), Duration::from_micros(500)),
                ),
            }
        }
        let mut st = lock(&p.state);
        let res = match st.outcome.as_ref() {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(clone_error(e)),
            None => unreachable!("poll returned true"),
        };
        if res.is_ok() {
            if let (Some(out), Some(region)) = (out, &st.region) {
                region
                    .read(p.recv_at, &mut out[..p.recv_len])
                    .map_err(|e| {
                        Error::transport_from("reading the result from registered memory", e)
                    })?;
            }
        }
        if let Some(r) = st.region.take() {
            self.link.give(r);
        }
        res
    }

    /// Finished, nobody takes the outcome: the region goes back.
    pub(crate) fn discard(&self, p: &Posted) {
        let region = lock(&p.state).region.take();
        if let Some(r) = region {
            self.link.give(r);
        }
    }

    /// The proxy must no longer write `p`'s buffers. A staged collective's are
    /// the region's only: deregistering it makes any later put of the proxy
    /// fail there. One on the application's registered buffers waits for the
    /// proxy's answer to the cancellation (given once no put of it is in
    /// flight), and aborts the process if none comes within the timeout,
    /// rather than let a late put write into a buffer in use again.
    pub(crate) fn cancel(&self, p: &Posted) {
        let pending = lock(&p.state).outcome.is_none();
        if pending {
            if let Ok(bytes) =
                encode_request::<Collective>(wire(self.local, p.seq), &Request::Cancel)
            {
                let _ = self.link.send(bytes);
            }
            if p.in_place {
                let t0 = Instant::now();
                while !self.poll(p) {
                    if t0.elapsed() > self.timeout {
                        eprintln!(
                            "hpc-collectives: the DPU proxy did not confirm a cancellation; \
                             aborting rather than risk its writes into a buffer in use"
                        );
                        std::process::abort();
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
        let mut st = lock(&p.state);
        if st.outcome.is_none() {
            st.outcome = Some(Err(Error::Stopped("proxy")));
        }
        if let Some(r) = st.region.take() {
            drop(st);
            if pending {
                self.link.t.deregister(r);
            } else {
                self.link.give(r);
            }
        }
    }

    /// Tells the proxy that this rank is gone (once).
    pub(crate) fn detach(&self) {
        if self.detached.swap(true, Ordering::AcqRel) || self.link.gone.load(Ordering::Acquire) {
            return;
        }
        if let Ok(bytes) = encode_request::<Collective>(wire(self.local, 0), &Request::Detach) {
            if self.link.send(bytes).is_err() {
                return;
            }
        }
        // Until the sends went out (the `Detach` last): a process that exits at
        // once must not take its `Detach` along, or the proxy counts it as dead
        // and tells the other nodes so.
        let t0 = Instant::now();
        while matches!(self.link.take_sent(&mut lock(&self.link.sends)), Ok(false))
            && t0.elapsed() < DETACH_SEND_FOR
        {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.detach();
    }
}

/// The errors an outcome holds, given out again on every `wait`.
fn clone_error(e: &Error) -> Error {
    match e {
        Error::RankLost { rank } => Error::RankLost { rank: *rank },
        Error::NodeLost { node } => Error::NodeLost { node: *node },
        Error::CountMismatch { rank, detail } => Error::CountMismatch {
            rank: *rank,
            detail: detail.clone(),
        },
        Error::Stopped(s) => Error::Stopped(s),
        Error::ProxyMemory { bytes, why } => Error::ProxyMemory {
            bytes: *bytes,
            why: why.clone(),
        },
        Error::Timeout { after, waiting_for } => Error::Timeout {
            after: *after,
            waiting_for: waiting_for.clone(),
        },
        e => Error::transport(e.chain()),
    }
}

/// A direct job's receive buffer.
#[derive(Clone, Copy)]
struct Out(*mut u8);

// SAFETY: the pointer is only written through in `Client::poll`, under the
// posted collective's lock, while the job's borrow of the buffer lasts (see there).
unsafe impl Send for Out {}
// SAFETY: as above.
unsafe impl Sync for Out {}

struct State {
    /// The registered memory the proxy reads and writes (until the outcome
    /// was delivered).
    region: Option<Region>,
    outcome: Option<Result<()>>,
}

/// A collective posted to the DPU proxy.
pub(crate) struct Posted {
    seq: u64,
    answer: OpId,
    state: Mutex<State>,
    recv_at: usize,
    recv_len: usize,
    out: Option<Out>,
    /// It reads or writes the application's registered buffers in place.
    in_place: bool,
    /// Those buffers' regions, kept registered until it ends.
    _users: Vec<Arc<Region>>,
}

/// Asks the DPU service at `at` to start this node's proxy with `spec`,
/// proving `key` where the service asks for it (`service.rs`); until the
/// link is up, a proxy that exits (or a service that goes) fails the link's
/// job at once, as a proxy started here does.
fn launch_remote(
    at: SocketAddr,
    key: Option<&super::service::DpuKey>,
    spec: &str,
    timeout: Duration,
    coord: std::sync::Weak<Coordinator>,
    size: usize,
) -> Result<()> {
    use std::io::BufRead;
    let io = |e: std::io::Error| Error::transport_from(format!("the DPU service at {at}"), e);
    let s = TcpStream::connect_timeout(&at, timeout).map_err(io)?;
    // The libfabric provider the ranks use (`HPC_TRANSPORT=ofi`), for the link.
    let provider = std::env::var(hpc_runtime::env::OFI_PROVIDER)
        .ok()
        .filter(|p| !p.is_empty() && !p.contains(char::is_whitespace))
        .map(|p| format!(" {p}"))
        .unwrap_or_default();
    let (pid, mut r) = super::service::ask(&s, at, key, &format!("{spec}{provider}"), timeout)?;
    let mut line = String::new();
    tracing::info!(%at, pid, "the DPU service started the proxy");
    let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
    std::thread::spawn(move || loop {
        line.clear();
        let why = match r.read_line(&mut line) {
            Ok(0) => format!("the DPU service at {at} went away"),
            Ok(_) => format!("the proxy on the DPU {at} {} without serving", line.trim()),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if coord.strong_count() == 0 {
                    return;
                }
                continue;
            }
            Err(e) => format!("the DPU service at {at}: {e}"),
        };
        if let Some(c) = coord.upgrade() {
            c.rank_exited(size, false, why);
        }
        return;
    });
    Ok(())
}

// ---------------------------------------------------------------------------
// The proxy's side.

/// Makes the calls that reach another process's memory fail with `EPERM` in
/// every thread of this process: `process_vm_readv`, `process_vm_writev`,
/// `pidfd_getfd` (taking a rank's descriptors, e.g. a memfd) and `ptrace`.
/// What a proxy in DPU placement must do without, enforced (a guard of the
/// design, not a security boundary: it does not check the architecture).
pub fn forbid_host_memory() -> Result<()> {
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let denied = [
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_ptrace,
    ];
    // The system call number (offset 0 of `seccomp_data`), then one test per call.
    let mut filter = vec![stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0)];
    for (i, nr) in denied.iter().enumerate() {
        // Equal: jump to the EPERM return after the remaining tests and ALLOW.
        let to_deny = (denied.len() - i) as u8;
        filter.push(libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: to_deny,
            jf: 0,
            k: *nr as u32,
        });
    }
    filter.push(stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW));
    filter.push(stmt(
        libc::BPF_RET | libc::BPF_K,
        libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
    ));
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: prctl and seccomp(2) with a valid filter program that lives across
    // the call; the filter only answers four system calls with EPERM.
    let rc = unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            -1
        } else {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_TSYNC,
                &prog as *const libc::sock_fprog,
            ) as i32
        }
    };
    if rc != 0 {
        return Err(Error::Unsupported(format!(
            "the DPU proxy could not forbid itself cross-memory access (seccomp): {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// The longest timeout a DPU proxy's spec may give, in seconds (a week, as
/// `HPC_TIMEOUT`).
const MAX_SPEC_TIMEOUT_S: f64 = 7.0 * 86400.0;

/// Serves as the proxy in DPU placement, from `HPC_COLL_PROXY_DPU`
/// (`ADDRESS SECRET MEMBERS TIMEOUT_S BACKEND`), until every rank detached or
/// died.
pub(crate) fn serve_spec(spec: &str) -> Result<()> {
    let bad = || {
        Error::Unsupported(format!(
            "{}={spec:?} is malformed",
            hpc_runtime::env::COLL_PROXY_DPU
        ))
    };
    let f: Vec<&str> = spec.split_whitespace().collect();
    let [addr, secret, members, timeout, backend] = f[..] else {
        return Err(bad());
    };
    let to: SocketAddr = addr.parse().map_err(|_| bad())?;
    let secret = u64::from_str_radix(secret, 16).map_err(|_| bad())?;
    let members: usize = members.parse().map_err(|_| bad())?;
    // From a request (through the DPU service): a number of seconds that
    // `Duration` cannot hold (1e300) is refused, not a panic.
    let timeout = timeout
        .parse::<f64>()
        .ok()
        .filter(|t| t.is_finite() && *t > 0.0 && *t <= MAX_SPEC_TIMEOUT_S)
        .and_then(|t| Duration::try_from_secs_f64(t).ok())
        .ok_or_else(|| {
            Error::Unsupported(format!(
                "{}={spec:?}: its timeout {timeout:?} is not a number of seconds above 0 and at \
                 most {MAX_SPEC_TIMEOUT_S} (a week)",
                hpc_runtime::env::COLL_PROXY_DPU
            ))
        })?;
    let backend: Choice = backend.parse().map_err(|_| bad())?;
    if members < 2 {
        return Err(bad());
    }
    forbid_host_memory()?;
    let link = Link {
        rendezvous: addr.to_string(),
        secret,
        members,
        timeout,
        backend,
    };
    let (t, watch) = join(&link, members - 1, route_to(to), "dpu")?;
    let Watch::Ranks(watch) = watch else {
        unreachable!("the proxy's watch is its ranks' connections");
    };
    let ranks = members - 1;
    // Its place, from the node's first rank; then the other nodes' proxies.
    let placed = (|| -> Result<(Place, Option<ProxyNet>)> {
        let op = t
            .recv(0, TAG_PLACE)
            .map_err(|e| Error::transport_from("waiting for its place", e))?;
        let b = t
            .wait_timeout(op, timeout)
            .map_err(|e| Error::transport_from("waiting for its place", e))?
            .into_bytes();
        let place: Place = postcard::from_bytes(&b)
            .map_err(|e| Error::transport_from("an undecodable place", e))?;
        let nodes = place.node_ids.len();
        let size = place.node_of.len();
        if place.ranks.len() != ranks
            || place.me >= nodes
            || place.node_of.iter().any(|&n| n >= nodes)
            || place
                .ranks
                .iter()
                .any(|&r| place.node_of.get(r) != Some(&place.me))
            || (nodes > 1) != place.net.is_some()
        {
            return Err(Error::transport(format!(
                "a place that does not fit its {ranks} ranks ({size} in all)"
            )));
        }
        let net = match &place.net {
            None => None,
            Some((at, secret)) => Some(meet(&place, at, *secret, timeout, backend)?),
        };
        Ok((place, net))
    })();
    let word = match &placed {
        Ok(_) => String::new(),
        Err(e) => e.chain(),
    };
    for r in 0..ranks {
        if let Ok(op) = t.send(r, TAG_READY, word.clone().into_bytes()) {
            let _ = t.wait_timeout(op, timeout);
        }
    }
    let (place, net) = placed?;
    tracing::info!(
        ranks,
        node = place.me,
        nodes = place.node_ids.len(),
        backend = backend_name(backend),
        "DPU proxy serving"
    );
    Server::new(t, place, watch, net).run()
}

/// Joins the other nodes' proxies at the coordinator `at` and connects to them.
fn meet(
    place: &Place,
    at: &str,
    secret: u64,
    timeout: Duration,
    backend: Choice,
) -> Result<ProxyNet> {
    let to: SocketAddr = at
        .parse()
        .map_err(|_| Error::transport(format!("the proxies' meeting point {at:?}")))?;
    let nodes = place.node_ids.len();
    let map: HashMap<String, String> = [
        (hpc_runtime::env::RANK, place.me.to_string()),
        (hpc_runtime::env::SIZE, nodes.to_string()),
        (hpc_runtime::env::RENDEZVOUS, at.to_string()),
        (hpc_runtime::env::SECRET, format!("{secret:x}")),
        (hpc_runtime::env::TIMEOUT, timeout.as_secs_f64().to_string()),
        // One node each: no two proxies share memory.
        (
            hpc_runtime::env::NODE_NAME,
            format!("dpu-node-{}", place.me),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let world = World::init_with(hpc_runtime::Config::from_map(map)?)?;
    let t = Transport::with_options(
        &world,
        hpc_rdma::Options {
            backend,
            timeout: Some(timeout),
            tcp_addr: Some(route_to(to)),
        },
    )
    .map_err(|e| Error::transport_from("connecting to the other nodes' DPU proxies", e))?;
    let watch = watch_each_other(&world, route_to(to), timeout)?;
    world.barrier()?;
    let hello = Hello {
        me: place.me,
        node_of: place.node_of.clone(),
        node_ids: place.node_ids.clone(),
        timeout_ms: timeout.as_millis() as u64,
        rendezvous: None,
    };
    Ok(ProxyNet::over(t, hello).with_watch(watch))
}

/// What an operation of the proxy's transport was for.
enum Wait {
    /// The next request of this link rank.
    Request(usize),
    /// Reading the send (or receive, `recv`) span of collective `seq` of
    /// communicator `comm` of its member in `slot`.
    Get {
        comm: u64,
        seq: u64,
        slot: usize,
        recv: bool,
    },
    /// Writing the receive span of that member.
    Put { comm: u64, seq: u64, slot: usize },
    /// An answer going out.
    Answer,
}

/// One rank's part of a collective in the proxy.
struct Slot {
    /// `None` for a part that was refused (its rank is answered all the same).
    part: Option<Part>,
    send: Option<Vec<u8>>,
    recv: Option<Vec<u8>>,
    /// Answered, or given up by its rank: nothing more goes to it.
    done: bool,
    /// Its rank cancelled it: no put, and an answer once none is in flight.
    cancelled: bool,
    /// A put of its result is in flight.
    putting: bool,
}

impl Slot {
    fn refused() -> Slot {
        Slot {
            part: None,
            send: None,
            recv: None,
            done: false,
            cancelled: false,
            putting: false,
        }
    }
}

#[derive(Default)]
struct Group {
    /// The parts of the communicator's members on this node, by slot.
    slots: Vec<Option<Slot>>,
    /// Why it failed: (code, aux, why).
    failed: Option<(Code, u64, String)>,
    /// Its schedules started (every part of this node's ranks arrived).
    ran: bool,
    /// The schedules in progress, until they finished or failed.
    run: Option<Run>,
    /// The receive span of each of the node's members, once started.
    spans: Vec<(RemoteKey, u64, usize)>,
    /// Messages from other nodes that came before the schedules started.
    early: Vec<(usize, usize, u32, Vec<u8>)>,
    /// The bytes of [`Server::budget`] its parts hold (staging and scratch).
    held: u64,
}

/// How many finished collectives the proxy remembers, to drop the messages
/// from other nodes that come for them afterwards (a collective failed or
/// cancelled here while another node went on).
const REMEMBER: usize = 4096;

/// A communicator the proxy serves: the one its link was made for (id 0),
/// or a split of it, whose members tell the proxy they joined
/// ([`Request::Open`]). Its collectives run here with its own ranks, and
/// go between nodes tagged with its id.
struct Served {
    /// The first communicator's rank of each of its ranks.
    members: Vec<usize>,
    /// Its rank of each member, by first-communicator rank.
    rank_of: HashMap<usize, usize>,
    /// The link rank of each member on this node (its slot), in rank order.
    links: Vec<usize>,
    /// Its rank of each slot.
    ranks: Vec<usize>,
    /// Each slot's number for it on its link, once it opened it.
    locals: Vec<Option<u32>>,
    /// The node indices of its ranks.
    nodes: Vec<usize>,
    /// Slots that left it or were lost, and why.
    gone: Vec<Option<String>>,
    groups: BTreeMap<u64, Group>,
    /// Collectives finished here (the latest [`REMEMBER`]).
    finished: BTreeSet<u64>,
}

impl Served {
    /// A communicator of `members`; `first` is the first communicator's rank
    /// of each link rank and `node_of` the node of each of its ranks.
    fn new(members: Vec<usize>, first: &[usize], node_of: &[usize]) -> Served {
        let rank_of: HashMap<usize, usize> =
            members.iter().enumerate().map(|(i, &m)| (m, i)).collect();
        let (links, ranks): (Vec<usize>, Vec<usize>) = members
            .iter()
            .enumerate()
            .filter_map(|(i, m)| Some((first.iter().position(|f| f == m)?, i)))
            .unzip();
        let mut nodes: Vec<usize> = members.iter().map(|&m| node_of[m]).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let n = links.len();
        Served {
            members,
            rank_of,
            links,
            ranks,
            locals: vec![None; n],
            nodes,
            gone: vec![None; n],
            groups: BTreeMap::new(),
            finished: BTreeSet::new(),
        }
    }

    fn slot(&self, link: usize) -> Option<usize> {
        self.links.iter().position(|&l| l == link)
    }
}

/// What came from another node's proxy for a communicator.
enum FromNet {
    /// A step's message: (source, destination) as first-communicator
    /// ranks, the proxy's message tag, the payload.
    Msg(usize, usize, u64, Vec<u8>),
    /// A collective failed there.
    Failed(Failed),
}

/// What a proxy keeps at most for a communicator not opened here yet.
const UNOPENED_MAX: usize = 1 << 16;

struct Server {
    t: Transport,
    /// The node's ranks (the link's ranks but the proxy).
    size: usize,
    /// The first communicator's rank of each link rank.
    first: Vec<usize>,
    /// The node index of each rank of the first communicator.
    node_of: Vec<usize>,
    /// The communicators served, by id (0: the first).
    comms: HashMap<u64, Served>,
    /// Each link rank's communicators: its number for one, and the id.
    names: Vec<HashMap<u32, u64>>,
    /// Each link rank's numbers of communicators it could not open, and why.
    refused: Vec<HashMap<u32, String>>,
    /// Link ranks that died or left every communicator, and why.
    gone: Vec<Option<String>>,
    ops: HashMap<OpId, Wait>,
    /// The ranks' watch connections (`None` once closed).
    watch: Vec<Option<TcpStream>>,
    /// When each rank's watch connection was found closed, for a rank not yet
    /// gone: it died unless its `Detach` arrives within [`DETACH_GRACE`].
    closed_at: Vec<Option<Instant>>,
    /// The other nodes' proxies, where the communicator spans nodes.
    net: Option<ProxyNet>,
    /// What came from other nodes for communicators not opened here yet.
    unopened: HashMap<u64, Vec<FromNet>>,
    /// Communicators every member on this node left.
    closed: BTreeSet<u64>,
    /// The bytes held for the collectives in flight, of every communicator,
    /// against the cap (`HPC_COLL_PROXY_MAX_SCRATCH`).
    budget: Budget,
}

/// The tag of a message between proxies: the collective and the step's tag.
fn tag64(seq: u64, tag: u32) -> u64 {
    (seq << 32) | u64::from(tag)
}

impl Server {
    fn new(
        t: Transport,
        place: Place,
        watch: Vec<Option<TcpStream>>,
        net: Option<ProxyNet>,
    ) -> Server {
        let size = place.ranks.len();
        let mut first = Served::new(
            (0..place.node_of.len()).collect(),
            &place.ranks,
            &place.node_of,
        );
        first.locals = vec![Some(0); size];
        Server {
            t,
            size,
            first: place.ranks,
            node_of: place.node_of,
            comms: HashMap::from([(0, first)]),
            names: vec![HashMap::from([(0, 0)]); size],
            refused: vec![HashMap::new(); size],
            gone: vec![None; size],
            closed_at: vec![None; size],
            ops: HashMap::new(),
            watch,
            net,
            unopened: HashMap::new(),
            closed: BTreeSet::new(),
            budget: Budget::from_env(),
        }
    }

    /// Ranks whose watch connection closed are gone: as having left, if their
    /// `Detach` arrives within [`DETACH_GRACE`] (the watch and the transport
    /// are different connections, so a rank that detached and then exited may
    /// have its watch seen closed first), else as having died.
    fn check_watch(&mut self) {
        for r in 0..self.size {
            if self.watch[r].as_ref().is_some_and(closed) {
                self.watch[r] = None;
                self.closed_at[r] = Some(Instant::now());
            }
            if self.gone[r].is_some() {
                self.closed_at[r] = None;
            } else if self.closed_at[r].is_some_and(|t| t.elapsed() >= DETACH_GRACE) {
                self.closed_at[r] = None;
                self.lose(r, "its process ended (its connection to the proxy closed)");
            }
        }
    }

    fn run(mut self) -> Result<()> {
        for r in 0..self.size {
            self.listen(r);
        }
        let mut backoff = Backoff::new(Duration::from_micros(50), true);
        let mut watched = Instant::now();
        while !self.gone.iter().all(Option::is_some) {
            if watched.elapsed() >= WATCH_EVERY {
                watched = Instant::now();
                self.check_watch();
            }
            let done = self
                .t
                .poll()
                .map_err(|e| Error::transport_from("DPU proxy", e))?;
            let mut moved = !done.is_empty();
            for c in done {
                if let Some(w) = self.ops.remove(&c.op) {
                    self.complete(w, c.result);
                }
            }
            moved |= self.poll_net();
            self.run_ready();
            self.retire();
            if moved {
                backoff.reset();
            } else {
                match backoff.pause() {
                    Pause::Spin => std::hint::spin_loop(),
                    Pause::Yield => std::thread::yield_now(),
                    // Longer the longer it is idle, up to a millisecond.
                    Pause::Sleep => std::thread::sleep(
                        (backoff.idle() / 16)
                            .clamp(Duration::from_micros(50), Duration::from_millis(1)),
                    ),
                }
            }
        }
        tracing::info!("DPU proxy: every rank left");
        if let Some(net) = self.net.as_mut() {
            net.goodbye();
        }
        Ok(())
    }

    /// Messages, failures and losses from the other nodes' proxies; whether
    /// anything came.
    fn poll_net(&mut self) -> bool {
        let Some(net) = self.net.as_mut() else {
            return false;
        };
        let mut got = Vec::new();
        let moved = net.poll(
            &mut |src, dst, tag, mut v| {
                v.truncate(v.len().saturating_sub(TRAILER));
                got.push((src, dst, tag, v));
            },
            &mut |_| {},
        );
        let lost = net.take_lost();
        let failed = net.take_failed();
        for (src, dst, tag, mut v) in got {
            // The communicator's id ends the payload.
            let Some(id) = v
                .len()
                .checked_sub(8)
                .and_then(|at| v.split_off(at).try_into().ok())
                .map(u64::from_le_bytes)
            else {
                tracing::warn!(
                    src,
                    dst,
                    "DPU proxy: dropped a message without its communicator"
                );
                continue;
            };
            self.take_from_net(id, FromNet::Msg(src, dst, tag, v));
        }
        for f in failed {
            self.take_from_net(f.comm, FromNet::Failed(f));
        }
        if lost.is_some() {
            // Every communicator that spans a lost node fails what it has in
            // flight (and, by `group`, every later collective).
            let hit: Vec<(u64, usize, Vec<u64>)> = self
                .comms
                .iter()
                .filter_map(|(&id, c)| {
                    let node = self.net.as_ref()?.lost_among(&c.nodes)?;
                    Some((id, node, c.groups.keys().copied().collect()))
                })
                .collect();
            for (id, node, seqs) in hit {
                for seq in seqs {
                    let why = format!("node {node} is lost");
                    self.fail_as(id, seq, Code::NodeLost, node as u64, why, false);
                }
            }
        }
        // Receives that wait for a rank another node's proxy reported dead.
        let net = self.net.as_ref();
        let hit: Vec<(u64, u64, usize)> = self
            .comms
            .iter()
            .flat_map(|(&id, c)| {
                c.groups
                    .iter()
                    .filter(|(_, g)| g.failed.is_none())
                    .filter_map(move |(&seq, g)| {
                        let r = g
                            .run
                            .as_ref()?
                            .waiting_on()
                            .into_iter()
                            .find(|&r| net.is_some_and(|n| n.is_dead(c.members[r])))?;
                        Some((id, seq, r))
                    })
            })
            .collect();
        for (id, seq, r) in hit {
            self.fail_as(
                id,
                seq,
                Code::Lost,
                r as u64,
                format!("rank {r} is lost: it died"),
                false,
            );
        }
        moved
    }

    /// Something from another node's proxy for communicator `id`.
    fn take_from_net(&mut self, id: u64, m: FromNet) {
        if self.closed.contains(&id) {
            tracing::debug!(
                comm = id,
                "DPU proxy: dropped a message for a closed communicator"
            );
            return;
        }
        let Some(c) = self.comms.get(&id) else {
            // Its members here have not opened it yet.
            let q = self.unopened.entry(id).or_default();
            if q.len() < UNOPENED_MAX {
                q.push(m);
            } else {
                tracing::warn!(
                    comm = id,
                    "DPU proxy: too much for a communicator nobody opened"
                );
            }
            return;
        };
        match m {
            FromNet::Msg(src, dst, tag, v) => {
                let (Some(&s), Some(&d)) = (c.rank_of.get(&src), c.rank_of.get(&dst)) else {
                    tracing::warn!(
                        comm = id,
                        src,
                        dst,
                        "DPU proxy: dropped a message between ranks not of its communicator"
                    );
                    return;
                };
                let seq = tag >> 32;
                if c.finished.contains(&seq) {
                    tracing::debug!(
                        comm = id,
                        seq,
                        src,
                        dst,
                        "DPU proxy: dropped a message for a finished collective"
                    );
                    return;
                }
                let Some(g) = self.group(id, seq) else {
                    return;
                };
                if g.failed.is_some() {
                    return;
                }
                match g.run.as_mut() {
                    Some(run) => run.deliver(s, d, tag as u32, v),
                    None => g.early.push((s, d, tag as u32, v)),
                }
                self.advance(id, seq);
            }
            FromNet::Failed(f) => {
                if !c.finished.contains(&f.seq) {
                    let code = Code::from_wire(u64::from(f.code));
                    self.fail_as(id, f.seq, code, f.aux, f.why, false);
                }
            }
        }
    }

    fn group(&mut self, id: u64, seq: u64) -> Option<&mut Group> {
        let c = self.comms.get_mut(&id)?;
        let lost = self.net.as_ref().and_then(|n| n.lost_among(&c.nodes));
        let size = c.links.len();
        Some(c.groups.entry(seq).or_insert_with(|| Group {
            slots: (0..size).map(|_| None).collect(),
            // Every later collective fails at once once one of its nodes is lost.
            failed: lost.map(|n| (Code::NodeLost, n as u64, format!("node {n} is lost"))),
            ..Group::default()
        }))
    }

    fn listen(&mut self, r: usize) {
        match self.t.recv(r, TAG_REQUEST) {
            Ok(op) => {
                self.ops.insert(op, Wait::Request(r));
            }
            Err(e) => self.lose(r, &e.to_string()),
        }
    }

    fn complete(&mut self, w: Wait, res: hpc_rdma::Result<Payload>) {
        match (w, res) {
            (Wait::Request(r), Ok(p)) => self.request(r, &p.into_bytes()),
            (Wait::Request(r), Err(e)) => self.lose(r, &e.to_string()),
            (
                Wait::Get {
                    comm,
                    seq,
                    slot,
                    recv,
                },
                Ok(p),
            ) => {
                if let Some(s) = self
                    .comms
                    .get_mut(&comm)
                    .and_then(|c| c.groups.get_mut(&seq))
                    .and_then(|g| g.slots[slot].as_mut())
                {
                    let v = p.into_bytes();
                    if recv {
                        s.recv = Some(v);
                    } else {
                        s.send = Some(v);
                    }
                }
            }
            (
                Wait::Get {
                    comm,
                    seq,
                    slot,
                    recv,
                },
                Err(e),
            ) => {
                let what = if recv { "receive" } else { "send" };
                let Some(r) = self.comms.get(&comm).map(|c| c.ranks[slot]) else {
                    return;
                };
                let why = format!("reading rank {r}'s {what} span: {e}");
                self.fail(comm, seq, Code::Failed, r as u64, why);
            }
            (Wait::Put { comm, seq, slot }, res) => {
                let Some(c) = self.comms.get_mut(&comm) else {
                    return;
                };
                if let Some(s) = c.groups.get_mut(&seq).and_then(|g| g.slots[slot].as_mut()) {
                    s.putting = false;
                }
                let (code, why) = match res {
                    Ok(_) => (Code::Ok, String::new()),
                    Err(e) => (
                        Code::Failed,
                        format!("writing rank {}'s receive span: {e}", c.ranks[slot]),
                    ),
                };
                self.answer(comm, slot, seq, code, 0, why);
            }
            (Wait::Answer, Ok(_)) => {}
            (Wait::Answer, Err(e)) => {
                tracing::debug!(error = %e, "DPU proxy: an answer was not delivered")
            }
        }
    }

    /// One request of link rank `r`.
    fn request(&mut self, r: usize, bytes: &[u8]) {
        let (w, req) = match decode_request(bytes) {
            Ok(x) => x,
            Err(why) => {
                tracing::warn!(rank = r, "DPU proxy: refused {why}");
                // The sequence number, where there is one, gets the refusal.
                if let Some(w) = bytes.first_chunk::<8>().map(|s| u64::from_le_bytes(*s)) {
                    let (local, seq) = unwire(w);
                    let c = self.first[r];
                    let why = format!("rank {c} sent {why}");
                    match self.opened(r, local) {
                        Ok((id, slot)) => {
                            if let Some(g) = self.group(id, seq) {
                                if g.slots[slot].is_none() {
                                    g.slots[slot] = Some(Slot::refused());
                                }
                            }
                            let c = self.comms.get(&id).map_or(c, |s| s.ranks[slot]);
                            self.fail(id, seq, Code::Failed, c as u64, why);
                        }
                        Err(_) => self.send_answer(r, w, Code::Failed, c as u64, why),
                    }
                }
                self.listen(r);
                return;
            }
        };
        let (local, seq) = unwire(w);
        if let Request::Open { comm, members } = req {
            self.open(r, local, comm, members);
            self.listen(r);
            return;
        }
        let (id, slot) = match self.opened(r, local) {
            Ok(x) => x,
            Err(why) => {
                if !matches!(req, Request::Detach) {
                    self.send_answer(r, w, Code::Failed, 0, why);
                } else if self.refused[r].remove(&local).is_some() && self.names[r].is_empty() {
                    // It left the last communicator it had here (one refused).
                    self.gone[r] = Some("it left the communicator".into());
                    return;
                }
                self.listen(r);
                return;
            }
        };
        match req {
            Request::Submit {
                coll,
                opts,
                send,
                recv,
            } => {
                self.submit(id, slot, seq, &coll, &opts, &send, &recv);
                self.listen(r);
            }
            Request::Cancel => {
                let Some(c) = self.comms.get_mut(&id) else {
                    return self.listen(r);
                };
                let rank = c.ranks[slot];
                let g = c.groups.get_mut(&seq);
                // Its schedules not finished here: without this rank's part the
                // collective cannot be trusted anywhere. It fails on every node,
                // which drops the messages other nodes sent for it (they would
                // stay until the proxy exits) and answers the ranks still in it.
                let unfinished = g.as_ref().is_some_and(|g| g.run.is_some() || !g.ran);
                let s = g.and_then(|g| g.slots[slot].as_mut());
                let answer_now = s.is_some_and(|s| {
                    s.cancelled = true;
                    !s.done && !s.putting
                });
                if answer_now && unfinished {
                    let why = format!("rank {rank} gave collective {seq} up (cancelled)");
                    self.fail(id, seq, Code::Failed, rank as u64, why);
                } else if answer_now {
                    let why = "cancelled by its rank".to_string();
                    self.answer(id, slot, seq, Code::Failed, 0, why);
                }
                self.listen(r);
            }
            Request::Detach => {
                tracing::debug!(rank = r, comm = id, "DPU proxy: rank detached");
                self.names[r].remove(&local);
                self.lose_in(id, slot, "it left the communicator");
                if self.names[r].is_empty() {
                    // It left every communicator it had here: its link is done.
                    self.gone[r] = Some("it left the communicator".into());
                } else {
                    self.listen(r);
                }
            }
            Request::Open { .. } => unreachable!("handled above"),
        }
    }

    /// The communicator of link rank `r`'s number `local`, and its slot
    /// there; or why there is none.
    fn opened(&self, r: usize, local: u32) -> std::result::Result<(u64, usize), String> {
        if let Some(why) = self.refused[r].get(&local) {
            return Err(why.clone());
        }
        self.names[r]
            .get(&local)
            .and_then(|&id| Some((id, self.comms.get(&id)?.slot(r)?)))
            .ok_or_else(|| {
                format!(
                    "rank {} sent a request for a communicator it did not open ({local})",
                    self.first[r]
                )
            })
    }

    /// Link rank `r` joined communicator `id` (a split), its number `local`.
    fn open(&mut self, r: usize, local: u32, id: u64, members: Vec<usize>) {
        let me = self.first[r];
        let n = self.node_of.len();
        let mut sorted = members.clone();
        sorted.sort_unstable();
        sorted.dedup();
        let why = if local == 0 || self.names[r].contains_key(&local) {
            Some(format!("rank {me} opened its communicator {local} twice"))
        } else if sorted.len() != members.len() || members.iter().any(|&m| m >= n) {
            Some(format!(
                "rank {me} opened a communicator of ranks {members:?}, not distinct ranks below {n}"
            ))
        } else if !members.contains(&me) {
            Some(format!(
                "rank {me} opened a communicator of ranks {members:?}, without itself"
            ))
        } else if self.comms.get(&id).is_some_and(|c| c.members != members)
            || self.closed.contains(&id)
        {
            Some(format!(
                "rank {me} opened communicator {id:x} with other members than its other ranks \
                 did (an id used twice)"
            ))
        } else {
            None
        };
        if let Some(why) = why {
            tracing::warn!(rank = me, comm = id, "DPU proxy: refused {why}");
            self.refused[r].insert(local, why);
            return;
        }
        let fresh = !self.comms.contains_key(&id);
        let c = self
            .comms
            .entry(id)
            .or_insert_with(|| Served::new(members, &self.first, &self.node_of));
        if let Some(slot) = c.slot(r) {
            c.locals[slot] = Some(local);
        }
        self.names[r].insert(local, id);
        tracing::debug!(rank = me, comm = id, "DPU proxy: a split opened");
        if fresh {
            for m in self.unopened.remove(&id).unwrap_or_default() {
                self.take_from_net(id, m);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn submit(
        &mut self,
        id: u64,
        slot: usize,
        seq: u64,
        coll: &Collective,
        opts: &Options,
        send: &Span,
        recv: &Span,
    ) {
        let Some(c) = self.comms.get(&id) else {
            return;
        };
        let (link, rank, size) = (c.links[slot], c.ranks[slot], c.members.len());
        let gone: Vec<Option<String>> = c.gone.clone();
        if c.finished.contains(&seq) {
            let why = format!("rank {rank} submitted collective {seq} twice");
            return self.answer(id, slot, seq, Code::Failed, rank as u64, why);
        }
        let Some(g) = self.group(id, seq) else {
            return;
        };
        if g.slots[slot].is_some() || g.ran {
            let why = format!("rank {rank} submitted collective {seq} twice");
            return self.fail(id, seq, Code::Failed, rank as u64, why);
        }
        let part = match check_submit(coll, opts, send, recv, link, rank, size) {
            Ok(p) => p,
            Err(why) => {
                tracing::warn!(rank, seq, comm = id, "DPU proxy: refused {why}");
                g.slots[slot] = Some(Slot::refused());
                let why = format!("rank {rank}'s request: {why}");
                return self.fail(id, seq, Code::Failed, rank as u64, why);
            }
        };
        let (sk, so, sl) = part.send;
        let (rk, ro, rl) = part.recv;
        let recv_input = part.recv_input;
        let scratch = part.sched.scratch_bytes;
        // Its memory here: the staging copies of its spans and its scratch, within
        // the cap; the receive staging now (the send's comes with its get, the
        // scratch when the schedules start).
        let admitted = if g.failed.is_some() {
            Err(None)
        } else {
            self.budget
                .admit(footprint(&[sl, rl, scratch]))
                .map_err(Some)
                .and_then(|held| {
                    let recv = if !recv_input || rl == 0 {
                        Some(try_filled(rl, 0).map_err(|_| {
                            self.budget.release(held);
                            Some(Refusal::NoMemory { bytes: held })
                        })?)
                    } else {
                        None
                    };
                    Ok((held, recv))
                })
        };
        let Some(g) = self.group(id, seq) else {
            return;
        };
        let (held, recv) = match admitted {
            Ok(x) => x,
            Err(refusal) => {
                g.slots[slot] = Some(Slot::refused());
                if let Some(refusal) = refusal {
                    let why = refusal.why();
                    tracing::warn!(rank, seq, comm = id, "DPU proxy: refused {why}");
                    let (code, aux) = refusal.code();
                    let why = format!("rank {rank}'s part: {why}");
                    return self.fail(id, seq, code, aux, why);
                }
                let (code, aux, why) = g.failed.clone().unwrap_or((Code::Failed, 0, String::new()));
                return self.answer(id, slot, seq, code, aux, why);
            }
        };
        g.held += held;
        g.slots[slot] = Some(Slot {
            part: Some(part),
            send: (sl == 0).then(Vec::new),
            recv,
            done: false,
            cancelled: false,
            putting: false,
        });
        if let Some((code, aux, why)) = g.failed.clone() {
            return self.answer(id, slot, seq, code, aux, why);
        }
        // A rank that left cannot take part any more.
        let missing = (0..gone.len()).find(|&p| g.slots[p].is_none() && gone[p].is_some());
        if let Some(p) = missing {
            let c = &self.comms[&id];
            let lost = c.ranks[p];
            let why = format!(
                "rank {lost} is lost: {}",
                gone[p].clone().unwrap_or_default()
            );
            return self.fail(id, seq, Code::Lost, lost as u64, why);
        }
        for (key, off, len, recv) in [(sk, so, sl, false), (rk, ro, rl, true)] {
            if len == 0 || (recv && !recv_input) {
                continue;
            }
            match self.t.get(&key, off, len) {
                Ok(op) => {
                    let w = Wait::Get {
                        comm: id,
                        seq,
                        slot,
                        recv,
                    };
                    self.ops.insert(op, w);
                }
                Err(e) => {
                    let what = if recv { "receive" } else { "send" };
                    let why = format!("reading rank {rank}'s {what} span: {e}");
                    return self.fail(id, seq, Code::Failed, rank as u64, why);
                }
            }
        }
    }

    /// Fails collective `seq` of communicator `id` here and tells the other
    /// nodes' proxies.
    fn fail(&mut self, id: u64, seq: u64, code: Code, aux: u64, why: String) {
        self.fail_as(id, seq, code, aux, why, true);
    }

    /// Fails collective `seq` of communicator `id`: answers every rank of the
    /// node that submitted it and is not answered (or whose put is in
    /// flight), and, when they submit, the others; its schedules stop.
    /// `tell`: the failure is this node's news, for the proxies of the other
    /// nodes the communicator spans too.
    fn fail_as(&mut self, id: u64, seq: u64, code: Code, aux: u64, why: String, tell: bool) {
        let Some(g) = self.group(id, seq) else {
            return;
        };
        let first = g.failed.is_none();
        if first {
            g.failed = Some((code, aux, why));
        }
        g.run = None;
        g.early.clear();
        let (code, aux, why) = g.failed.clone().unwrap_or((Code::Failed, 0, String::new()));
        let waiting: Vec<usize> = (0..g.slots.len())
            .filter(|&r| g.slots[r].as_ref().is_some_and(|s| !s.done && !s.putting))
            .collect();
        if first && tell && code != Code::NodeLost {
            let nodes = &self.comms[&id].nodes;
            if let Some(net) = self.net.as_mut() {
                net.announce_failed(id, seq, code as u8, aux, &why, nodes);
            }
        }
        for slot in waiting {
            self.answer(id, slot, seq, code, aux, why.clone());
        }
    }

    /// Answers collective `seq` of communicator `id` to its member in `slot`
    /// (once).
    fn answer(&mut self, id: u64, slot: usize, seq: u64, code: Code, aux: u64, why: String) {
        let Some(c) = self.comms.get_mut(&id) else {
            return;
        };
        if let Some(s) = c.groups.get_mut(&seq).and_then(|g| g.slots[slot].as_mut()) {
            if s.done {
                return;
            }
            s.done = true;
        }
        let (Some(local), None) = (c.locals[slot], &c.gone[slot]) else {
            return;
        };
        let link = c.links[slot];
        self.send_answer(link, wire(local, seq), code, aux, why);
    }

    /// Sends link rank `r` the answer to its collective numbered `w` on the link.
    fn send_answer(&mut self, r: usize, w: u64, code: Code, aux: u64, why: String) {
        if self.gone[r].is_some() {
            return;
        }
        let a = Answer {
            code: code as u8,
            aux,
            why,
        };
        let Ok(bytes) = postcard::to_allocvec(&a) else {
            return;
        };
        match self.t.send(r, TAG_ANSWER + w, bytes) {
            Ok(op) => {
                self.ops.insert(op, Wait::Answer);
            }
            Err(e) => self.lose(r, &e.to_string()),
        }
    }

    /// Link rank `r` died: every communicator it is a member of loses it,
    /// and the other nodes' proxies are told, to fail what waits for it.
    fn lose(&mut self, r: usize, cause: &str) {
        if self.gone[r].is_some() {
            return;
        }
        let first = self.first[r];
        tracing::debug!(rank = first, cause, "DPU proxy: rank gone");
        self.gone[r] = Some(cause.to_string());
        if let Some(net) = self.net.as_mut() {
            net.announce_dead(first);
        }
        let mut hit: Vec<(u64, usize)> = self
            .comms
            .iter()
            .filter_map(|(&id, c)| Some((id, c.slot(r)?)))
            .collect();
        hit.sort_unstable();
        for (id, slot) in hit {
            self.lose_in(id, slot, cause);
        }
    }

    /// The member in `slot` of communicator `id` is gone (left it, or died):
    /// the collectives that still need its part fail, here and (told by this
    /// proxy) on the other nodes.
    fn lose_in(&mut self, id: u64, slot: usize, cause: &str) {
        let Some(c) = self.comms.get_mut(&id) else {
            return;
        };
        if c.gone[slot].is_some() {
            return;
        }
        c.gone[slot] = Some(cause.to_string());
        let rank = c.ranks[slot];
        let hit: Vec<u64> = c
            .groups
            .iter()
            .filter(|(_, g)| !g.ran && g.failed.is_none() && g.slots[slot].is_none())
            .map(|(&s, _)| s)
            .collect();
        for seq in hit {
            let why = format!("rank {rank} is lost: {cause}");
            self.fail(id, seq, Code::Lost, rank as u64, why);
        }
    }

    /// Starts every collective whose parts all arrived, with their data.
    fn run_ready(&mut self) {
        let ready: Vec<(u64, u64)> = self
            .comms
            .iter()
            .flat_map(|(&id, c)| {
                c.groups
                    .iter()
                    .filter(|(_, g)| {
                        !g.ran
                            && g.failed.is_none()
                            && g.slots.iter().all(|s| {
                                s.as_ref().is_some_and(|s| {
                                    s.part.is_some() && s.send.is_some() && s.recv.is_some()
                                })
                            })
                    })
                    .map(move |(&s, _)| (id, s))
            })
            .collect();
        for (id, seq) in ready {
            self.start(id, seq);
        }
    }

    fn start(&mut self, id: u64, seq: u64) {
        let Some(g) = self.comms.get_mut(&id).and_then(|c| c.groups.get_mut(&seq)) else {
            return;
        };
        g.ran = true;
        let mut parts = Vec::with_capacity(g.slots.len());
        for s in g.slots.iter_mut().flatten() {
            let Some(part) = s.part.take() else {
                return;
            };
            g.spans.push(part.recv);
            parts.push((
                part.sched,
                s.send.take().unwrap_or_default(),
                s.recv.take().unwrap_or_default(),
            ));
        }
        let mut run = match Run::new(parts) {
            Ok(run) => run,
            Err(bytes) => {
                let why = Refusal::NoMemory { bytes }.why();
                tracing::warn!(seq, "DPU proxy: {why}");
                return self.fail(id, seq, Code::NoMemory, bytes, why);
            }
        };
        for (src, dst, tag, v) in g.early.drain(..) {
            run.deliver(src, dst, tag, v);
        }
        g.run = Some(run);
        self.advance(id, seq);
    }

    /// Runs what can run of collective `seq`'s schedules; puts the results
    /// once they finished.
    fn advance(&mut self, id: u64, seq: u64) {
        let Some(c) = self.comms.get_mut(&id) else {
            return;
        };
        let Served {
            members,
            groups,
            ranks,
            ..
        } = c;
        let Some(run) = groups.get_mut(&seq).and_then(|g| g.run.as_mut()) else {
            return;
        };
        let net = &mut self.net;
        // Steps to other nodes go between the first communicator's ranks,
        // with the communicator's id after the payload.
        let mut remote = |src: usize, dst: usize, tag: u32, mut data: Vec<u8>| {
            let Some(net) = net.as_mut() else {
                return Err(usize::MAX);
            };
            data.extend_from_slice(&id.to_le_bytes());
            data.resize(data.len() + TRAILER, 0);
            net.send(members[src], members[dst], tag64(seq, tag), data)
        };
        let _span = tracing::debug_span!("dpu-collective", comm = id, seq).entered();
        match run.advance(&mut remote) {
            Ok(true) => self.finish(id, seq),
            Ok(false) => {
                if run.waiting_on().is_empty() {
                    // Every blocked receive waits for a rank of this node.
                    let why = "the schedules deadlocked".to_string();
                    self.fail(id, seq, Code::Failed, 0, why);
                }
            }
            Err(RunError::Mismatch {
                src,
                dst,
                sent,
                expected,
            }) => {
                let why =
                    format!("rank {src} sent {sent} bytes where rank {dst} expected {expected}");
                let local = ranks.contains(&src);
                let other = if local { dst } else { src };
                self.fail(id, seq, Code::Mismatch, other as u64, why);
            }
            Err(RunError::NodeLost(node)) => {
                let why = format!("node {node} is lost");
                self.fail_as(id, seq, Code::NodeLost, node as u64, why, false);
            }
            Err(RunError::Step(why)) => self.fail(id, seq, Code::Failed, 0, why),
        }
    }

    /// Collective `seq`'s schedules finished: each rank's result goes back
    /// with RMA put (and the answer after it).
    fn finish(&mut self, id: u64, seq: u64) {
        let Some(g) = self.comms.get_mut(&id).and_then(|c| c.groups.get_mut(&seq)) else {
            return;
        };
        let Some(run) = g.run.take() else {
            return;
        };
        let spans = std::mem::take(&mut g.spans);
        for (slot, (data, (key, off, len))) in run.into_recvs().into_iter().zip(spans).enumerate() {
            let Some(c) = self.comms.get(&id) else {
                return;
            };
            let (done, cancelled) = c
                .groups
                .get(&seq)
                .and_then(|g| g.slots[slot].as_ref())
                .map_or((true, false), |s| (s.done, s.cancelled));
            if done || c.gone[slot].is_some() {
                continue;
            }
            let rank = c.ranks[slot];
            if cancelled {
                let why = "cancelled by its rank".to_string();
                self.answer(id, slot, seq, Code::Failed, 0, why);
                continue;
            }
            if len == 0 {
                self.answer(id, slot, seq, Code::Ok, 0, String::new());
                continue;
            }
            match self.t.put(data, &key, off) {
                Ok(op) => {
                    self.ops.insert(
                        op,
                        Wait::Put {
                            comm: id,
                            seq,
                            slot,
                        },
                    );
                    if let Some(s) = self
                        .comms
                        .get_mut(&id)
                        .and_then(|c| c.groups.get_mut(&seq))
                        .and_then(|g| g.slots[slot].as_mut())
                    {
                        s.putting = true;
                    }
                }
                Err(e) => {
                    let why = format!("writing rank {rank}'s receive span: {e}");
                    self.answer(id, slot, seq, Code::Failed, 0, why);
                }
            }
        }
    }

    /// Forgets the collectives every member of which is answered or gone (and
    /// remembers them as finished, for messages that come late), and the
    /// splits every member on this node left.
    fn retire(&mut self) {
        let mut closing = Vec::new();
        let budget = &mut self.budget;
        for (&id, c) in self.comms.iter_mut() {
            let gone = &c.gone;
            let finished = &mut c.finished;
            c.groups.retain(|&seq, g| {
                let over = g.slots.iter().enumerate().all(|(r, s)| {
                    gone[r].is_some() || s.as_ref().is_some_and(|s| s.done && !s.putting)
                });
                if over {
                    finished.insert(seq);
                    budget.release(g.held);
                }
                !over
            });
            while c.finished.len() > REMEMBER {
                c.finished.pop_first();
            }
            if id != 0 && c.groups.is_empty() && c.gone.iter().all(Option::is_some) {
                closing.push(id);
            }
        }
        for id in closing {
            tracing::debug!(comm = id, "DPU proxy: every member here left a split");
            self.comms.remove(&id);
            self.closed.insert(id);
        }
    }
}

/// The fuzz entry: decodes and checks a request as [`Server::request`] does.
pub(crate) fn fuzz_request(
    bytes: &[u8],
    rank: usize,
    size: usize,
) -> std::result::Result<usize, String> {
    let (_, req) = decode_request(bytes)?;
    let Request::Submit {
        coll,
        opts,
        send,
        recv,
    } = req
    else {
        return Ok(0);
    };
    let part = check_submit(&coll, &opts, &send, &recv, rank, rank, size)?;
    let mut steps = 0;
    for round in &part.sched.rounds {
        for step in &round.steps {
            steps += 1;
            for r in step.read().chain(step.written()) {
                let len = match r.buf {
                    hpc_collectives::BufferId::Send => part.send.2,
                    hpc_collectives::BufferId::Recv => part.recv.2,
                    hpc_collectives::BufferId::Scratch => part.sched.scratch_bytes,
                };
                assert!(
                    r.offset.checked_add(r.len).is_some_and(|end| end <= len),
                    "region {r} outside its span of {len} bytes in an accepted request"
                );
            }
        }
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hpc_collectives::DataType;

    /// A spec whose timeout `Duration` cannot hold (reachable by an authenticated
    /// request to the DPU service) is an error naming the timeout, not a panic.
    #[test]
    fn a_spec_timeout_out_of_range_is_an_error() {
        for t in ["1e300", "inf", "NaN", "-1", "0", "604801"] {
            let e = serve_spec(&format!("127.0.0.1:9 00ff 2 {t} auto"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("timeout") && e.contains(t), "{t}: {e}");
        }
    }

    #[test]
    fn requests_round_trip_and_garbage_is_refused() {
        let coll = Collective::Allgather {
            count: 4,
            dtype: DataType::F32,
        };
        let span = |len| Span {
            key: vec![0; 8],
            offset: 0,
            len,
        };
        let req = Request::Submit {
            coll: &coll,
            opts: Options::default(),
            send: span(16),
            recv: span(32),
        };
        let bytes = encode_request(7, &req).unwrap();
        let (seq, back) = decode_request(&bytes).unwrap();
        assert_eq!(seq, 7);
        assert!(
            matches!(back, Request::Submit { ref coll, .. } if *coll == Collective::Allgather { count: 4, dtype: DataType::F32 })
        );
        assert!(decode_request(&bytes[..5])
            .unwrap_err()
            .contains("shorter than its header"));
        let e = decode_request(&bytes[..bytes.len() - 3]).unwrap_err();
        assert!(
            e.contains("collective 7") && e.contains("undecodable"),
            "{e}"
        );
    }

    #[test]
    fn submits_with_bad_keys_or_spans_are_refused_by_reason() {
        let world =
            World::init_with(hpc_runtime::Config::from_map(HashMap::new()).unwrap()).unwrap();
        let t = Transport::with_options(
            &world,
            hpc_rdma::Options {
                backend: Choice::Tcp,
                ..Default::default()
            },
        )
        .unwrap();
        let region = t.register(4096).unwrap();
        let key = region.remote_key().to_bytes().to_vec();
        let sp = |offset, len| Span {
            key: key.clone(),
            offset,
            len,
        };
        let coll = Collective::Allreduce {
            count: 8,
            dtype: DataType::I64,
            op: hpc_collectives::ReduceOp::Sum,
        };
        let o = Options::default();
        let part = check_submit(&coll, &o, &sp(0, 64), &sp(64, 64), 0, 0, 1).unwrap();
        assert_eq!((part.send.2, part.recv.1, part.recv.2), (64, 64, 64));
        let why = |s: &Span, r: &Span, rank, size| {
            check_submit(&coll, &o, s, r, rank, rank, size)
                .err()
                .unwrap()
        };
        let e = why(&sp(4090, 64), &sp(0, 64), 0, 1);
        assert!(
            e.contains("send span") && e.contains("exceeds its region of 4096"),
            "{e}"
        );
        let e = why(&sp(0, 64), &sp(u64::MAX, 2), 0, 1);
        assert!(e.contains("receive span"), "{e}");
        // A key of rank 0 in rank 1's request: refused, whatever the spans.
        let e = why(&sp(0, 64), &sp(64, 64), 1, 2);
        assert!(e.contains("rank 0's, not the sender's (rank 1)"), "{e}");
        let e = why(&sp(0, 64), &sp(64, 63), 0, 1);
        assert!(e.contains("allreduce") && e.contains("63"), "{e}");
        let garbled = Span {
            key: vec![7; 10],
            offset: 0,
            len: 0,
        };
        let e = why(&garbled, &sp(64, 64), 0, 1);
        assert!(e.starts_with("the send key"), "{e}");
        // The fuzz entry agrees: a submit it accepts, and a garbled one.
        let req = Request::Submit {
            coll: &coll,
            opts: o,
            send: sp(0, 64),
            recv: sp(64, 64),
        };
        let bytes = encode_request(3, &req).unwrap();
        assert!(fuzz_request(&bytes, 0, 1).unwrap() > 0);
        // Rank 1 of 3 sending rank 0's key.
        assert!(fuzz_request(&bytes, 1, 3).is_err());
    }

    #[test]
    fn mangled_requests_are_refused_not_panicked_on() {
        // Every truncation and every single-byte change of a valid request
        // (keys of no region: the checks refuse them, the decoder must not panic).
        let coll = Collective::Alltoallv {
            send_counts: vec![1, 2, 3],
            recv_counts: vec![3, 2, 1],
            dtype: DataType::U16,
        };
        let span = |len| Span {
            key: vec![0x5a; hpc_rdma::REMOTE_KEY_BYTES],
            offset: 8,
            len,
        };
        let req = Request::Submit {
            coll: &coll,
            opts: Options::default(),
            send: span(12),
            recv: span(12),
        };
        let bytes = encode_request(9, &req).unwrap();
        for n in 0..bytes.len() {
            assert!(fuzz_request(&bytes[..n], 1, 3).is_err(), "truncated to {n}");
        }
        for i in 0..bytes.len() {
            for x in [0x01u8, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[i] ^= x;
                let _ = fuzz_request(&b, 1, 3);
            }
        }
    }

    #[test]
    fn communicators_on_a_link_never_share_an_answer_tag() {
        // Every (communicator, sequence) pair its own number on the link, and
        // back; none of them a request, place or ready tag.
        let locals = [0, 1, 2, 77, MAX_LOCAL];
        let seqs = [0, 1, 2, 1 << 32, (1 << SEQ_BITS) - 1];
        let mut tags = std::collections::HashSet::new();
        for &l in &locals {
            for &q in &seqs {
                assert_eq!(unwire(wire(l, q)), (l, q));
                let tag = TAG_ANSWER.checked_add(wire(l, q)).unwrap();
                assert!(tag > TAG_READY);
                assert!(tags.insert(tag), "({l}, {q}) shares a tag");
            }
        }
        // The first communicator's answers keep their tags.
        assert_eq!(TAG_ANSWER + wire(0, 5), TAG_ANSWER + 5);
    }

    #[test]
    fn split_ids_differ_by_parent_split_and_colour() {
        let mut ids = std::collections::HashSet::new();
        for parent in [0, split_id(0, 0, 0), split_id(0, 3, 1)] {
            for index in 0..50 {
                for color in [0, 1, 2, u32::MAX] {
                    let id = split_id(parent, index, color);
                    assert_ne!(id, 0, "0 is the first communicator's");
                    assert_eq!(id, split_id(parent, index, color));
                    assert!(
                        ids.insert(id),
                        "({parent:x}, {index}, {color}) repeats an id"
                    );
                }
            }
        }
    }

    #[test]
    fn placements_parse_and_bad_ones_are_named() {
        assert_eq!("dpu".parse::<Placement>().unwrap(), Placement::Dpu);
        assert_eq!(" Host ".parse::<Placement>().unwrap(), Placement::Host);
        let e = "nic".parse::<Placement>().unwrap_err().to_string();
        assert!(e.contains("\"nic\"") && e.contains("host or dpu"), "{e}");
    }
}
