//! The proxies of a communicator that spans nodes, connected to each other.
//!
//! Each node's proxy carries the steps of its ranks' schedules whose peer is
//! on another node: a send reads the rank's region (eagerly, when its round
//! is posted) and goes to the peer's proxy as one `hpc-rdma` message, tagged
//! `MSG` and ending in a [`TRAILER`] that names the sending and receiving
//! ranks, the step's tag (the collective's sequence number and the
//! schedule's tag) and the collective's signature ([`Sig`]); the receiving
//! proxy checks the signature against its own parts' (another collective's
//! message fails the collective, [`Outcome::Disagree`]) and files it with the
//! messages between its own ranks, where the receive step of the same
//! (source, destination, sequence, tag) takes it. Intra-node steps do not
//! change.
//!
//! # Set-up
//!
//! The proxies are not ranks of the job, so they cannot join its `World`.
//! The node's first rank starts its proxy with standard input on one end of
//! a socket pair ([`attach`]) and sends it a [`Hello`] (its index among the
//! communicator's nodes, the node of each rank). The proxy builds an
//! `hpc_runtime::World::relayed` world of one member per node whose
//! allgathers go over that socket: the first rank of every node reads its
//! proxy's contribution, the communicator's ranks allgather the
//! contributions over their own bootstrap ([`bootstrap`]), and the first
//! ranks hand the list back. The proxies connect an `hpc_rdma::Transport` on
//! that world (whatever backend `HPC_TRANSPORT` asks for: tcp by default,
//! ofi) and report ready; the ranks' loop ends when every proxy is ready, or
//! fails on every rank alike when one is not. In a split, whose groups set
//! up on the parent's collectives, every rank of the parent takes part in
//! the rounds until every group is done.
//!
//! # Faults
//!
//! A proxy that loses another (its connection breaks: the proxy died or its
//! node is cut off) fails every collective in flight, and every later one,
//! with `NODE_LOST` naming that node. A proxy whose rank dies tells the
//! others, which fail what waits for that rank naming it. A collective that
//! fails on one node fails on the others by a message that carries how (its
//! code, the rank concerned, a size mismatch's sizes, the reason). Before it
//! exits, a proxy sends each other proxy a last message that completes the
//! receive that peer keeps posted, then says goodbye in two phases (bounded
//! by the timeout), so that no connection closes with unread data or a
//! receive pending.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::protocol::Code;
use crate::session::{Outcome, Sizes};
use hpc_board::sig::Sig;
use hpc_board::{Error, Result};

mod watch;
pub use watch::{closed, watch_accept, watch_address, watch_connect, watch_each_other};

/// The transport tag of a message between ranks.
const MSG: u64 = 1;
/// The transport tags of the two phases of the goodbye.
const BYE: u64 = 2;

/// Bytes after a message's payload: source rank (u32), destination rank
/// (u32), the proxy's message tag (sequence << 32 | schedule tag, u64), the
/// collective's signature ([`Sig`], u32; 0 for a point-to-point message),
/// all little-endian.
pub const TRAILER: usize = 20;

/// The tag of a message between proxies: the collective's sequence number
/// and the step's tag.
pub fn tag64(seq: u64, tag: u32) -> u64 {
    (seq << 32) | u64::from(tag)
}

/// The largest frame on the set-up socket.
const MAX_FRAME: usize = 64 << 20;

/// What the node's first rank tells its proxy.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    /// This proxy's index among the communicator's nodes.
    pub me: usize,
    /// The node index of each rank of the communicator.
    pub node_of: Vec<usize>,
    /// The world's node id of each node index (what errors name).
    pub node_ids: Vec<usize>,
    /// Bound on every step of the set-up and on the goodbye, in milliseconds.
    pub timeout_ms: u64,
    /// The launcher's rendezvous, if any: the proxy listens on the address
    /// that routes to it, as the ranks do.
    pub rendezvous: Option<String>,
}

/// What a proxy says on the set-up socket (first byte of a frame).
const ASK: u8 = 0;
const READY: u8 = 1;
const FAILED: u8 = 2;
/// A rank that relays for no proxy.
const NONE: u8 = 3;

/// Writes one frame: its length (u32, little-endian), then its bytes. A
/// frame longer than [`MAX_FRAME`], which the reader refuses, is refused
/// here before anything is written (its length written `as u32` was cut to
/// 32 bits beyond 4 GiB, and the reader took the rest of it for frames).
fn write_frame(mut w: &UnixStream, bytes: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(bytes.len())
        .ok()
        .filter(|_| bytes.len() <= MAX_FRAME)
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "a frame of {} bytes is more than the {MAX_FRAME} bytes the set-up link carries",
                    bytes.len()
                ),
            )
        })?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(bytes)
}

fn read_frame(mut r: &UnixStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes"),
        ));
    }
    let mut v = vec![0u8; len];
    r.read_exact(&mut v)?;
    Ok(v)
}

fn encode_parts(parts: &[Vec<u8>]) -> Vec<u8> {
    let mut v = (parts.len() as u32).to_le_bytes().to_vec();
    for p in parts {
        v.extend_from_slice(&(p.len() as u32).to_le_bytes());
        v.extend_from_slice(p);
    }
    v
}

fn decode_parts(b: &[u8]) -> Option<Vec<Vec<u8>>> {
    let word = |at: usize| -> Option<usize> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?) as usize)
    };
    let n = word(0)?;
    let mut at = 4;
    let mut parts = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let len = word(at)?;
        at += 4;
        parts.push(b.get(at..at.checked_add(len)?)?.to_vec());
        at += len;
    }
    (at == b.len()).then_some(parts)
}

/// Makes `cmd`'s standard input one end of a socket pair and tells the proxy
/// so; returns the other end, for [`bootstrap`].
pub fn attach(cmd: &mut Command) -> Result<UnixStream> {
    let (mine, theirs) =
        UnixStream::pair().map_err(|e| Error::transport_from("a socket pair for the proxy", e))?;
    let fd = theirs
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| Error::transport_from("a socket pair for the proxy", e))?;
    cmd.stdin(std::process::Stdio::from(fd))
        .env(hpc_runtime::env::COLL_PROXY_NET, "1");
    Ok(mine)
}

/// An allgather over the communicator's ranks (their bootstrap).
pub type Allgather<'a> = dyn Fn(&[u8]) -> Result<Vec<Vec<u8>>> + 'a;

/// The ranks' side of the set-up, collective over every process that takes
/// part in `allgather` (the communicator's ranks, or for a split every rank
/// of the parent, whose new communicators may need different numbers of
/// rounds, or none: each takes part until all are done). `link` and `hello`
/// are given on the first rank of each node of this rank's communicator;
/// `leaders[i]` is the index in `allgather`'s result of the first rank of its
/// node index `i` (empty where this rank's communicator has no proxies to
/// connect). Returns the name of the transport's backend between the
/// proxies (empty without).
pub fn bootstrap(
    link: Option<UnixStream>,
    hello: Option<&Hello>,
    allgather: &Allgather<'_>,
    leaders: &[usize],
    timeout: Duration,
) -> Result<String> {
    let deadline = Instant::now() + timeout;
    let mut failed: Option<String> = None;
    if let (Some(l), Some(h)) = (&link, hello) {
        let r = postcard::to_allocvec(h)
            .map_err(|e| e.to_string())
            .and_then(|b| write_frame(l, &b).map_err(|e| e.to_string()));
        if let Err(e) = r {
            failed = Some(format!("telling the proxy its place: {e}"));
        }
    }
    let mut outcome: Option<Result<String>> = leaders.is_empty().then(|| Ok(String::new()));
    loop {
        // First byte: whether this rank's communicator is done; then its frame.
        let mine = match (&outcome, &link, &failed) {
            (Some(_), _, _) => vec![1],
            (None, None, _) => vec![0, NONE],
            (None, Some(_), Some(why)) => [&[0, FAILED][..], why.as_bytes()].concat(),
            (None, Some(l), None) => {
                let left = deadline.saturating_duration_since(Instant::now());
                let _ = l.set_read_timeout(Some(left.max(Duration::from_millis(1))));
                match read_frame(l) {
                    Ok(f) if !f.is_empty() => [&[0][..], &f].concat(),
                    Ok(_) => [&[0, FAILED][..], b"an empty frame"].concat(),
                    Err(e) => {
                        let why = if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) {
                            format!("no answer within {timeout:?}")
                        } else {
                            format!("it stopped ({e})")
                        };
                        [&[0, FAILED][..], why.as_bytes()].concat()
                    }
                }
            }
        };
        let all = allgather(&mine)?;
        if all.iter().all(|p| p.first() == Some(&1)) {
            return outcome.unwrap_or_else(|| Err(Error::transport("proxy set-up ended early")));
        }
        if outcome.is_some() {
            continue;
        }
        let frames: Vec<&[u8]> = leaders
            .iter()
            .map(|&l| all.get(l).and_then(|v| v.get(1..)).unwrap_or_default())
            .collect();
        if let Some((i, f)) = frames
            .iter()
            .enumerate()
            .find(|(_, f)| f.first() != Some(&ASK) && f.first() != Some(&READY))
        {
            let why = String::from_utf8_lossy(f.get(1..).unwrap_or_default());
            outcome = Some(Err(Error::transport(format!(
                "connecting the proxies of the nodes: the proxy of node index {i} failed: {why}"
            ))));
        } else if frames.iter().all(|f| f[0] == READY) {
            outcome = Some(Ok(String::from_utf8_lossy(&frames[0][1..]).into_owned()));
        } else if frames.iter().any(|f| f[0] == READY) {
            outcome = Some(Err(Error::transport(
                "connecting the proxies of the nodes: their set-up diverged (some were \
                 ready while others still exchanged endpoints)",
            )));
        } else if let Some(l) = &link {
            let parts: Vec<Vec<u8>> = frames.iter().map(|f| f[1..].to_vec()).collect();
            if let Err(e) = write_frame(l, &encode_parts(&parts)) {
                failed = Some(format!("handing the proxy its peers' endpoints: {e}"));
            }
        }
        if outcome.is_none() && Instant::now() > deadline {
            outcome = Some(Err(Error::transport(format!(
                "connecting the proxies of the nodes took more than {timeout:?}"
            ))));
        }
    }
}

/// A proxy's half of a relayed world: its allgathers go to its node's first
/// rank over the set-up socket.
struct Link(UnixStream);

impl hpc_runtime::Relay for Link {
    fn allgather(&self, mine: &[u8]) -> hpc_runtime::Result<Vec<Vec<u8>>> {
        let io = |e: std::io::Error| {
            hpc_runtime::Error::Protocol(format!("the set-up link to the node's first rank: {e}"))
        };
        write_frame(&self.0, &[&[ASK][..], mine].concat()).map_err(io)?;
        let f = read_frame(&self.0).map_err(io)?;
        decode_parts(&f).ok_or_else(|| {
            hpc_runtime::Error::Protocol("the node's first rank sent a garbled frame".into())
        })
    }
}

/// A proxy's connections to the other nodes' proxies.
pub struct ProxyNet {
    t: hpc_rdma::Transport,
    hello: Hello,
    /// The receive posted to each other proxy (none to itself or a lost one).
    recvs: Vec<Option<hpc_rdma::OpId>>,
    /// Sends not yet completed.
    sends: Vec<hpc_rdma::OpId>,
    /// Proxies found lost.
    lost: Vec<bool>,
    /// A lost node not yet reported by [`ProxyNet::take_lost`].
    fresh_loss: bool,
    /// Ranks of other nodes that their proxy reported dead.
    dead: Vec<bool>,
    /// Collectives another proxy failed, not yet taken ([`ProxyNet::take_failed`]).
    failed: Vec<Failed>,
    /// A plain TCP connection to each other proxy that carries nothing and
    /// closes when that proxy's process ends (where set up: the DPU-placed
    /// proxies), looked at every [`WATCH_EVERY`]: over libfabric's
    /// `tcp;ofi_rxm` a dead peer fails only the operations posted to it, so a
    /// posted receive alone would not tell.
    watch: Vec<Option<std::net::TcpStream>>,
    watched: Instant,
}

/// How often a proxy looks at its watch connections.
const WATCH_EVERY: Duration = Duration::from_millis(5);

/// A collective that another node's proxy failed (and so every node's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// The communicator's id among the proxies (0: the one they were started
    /// for; see `dpu/` for its splits).
    pub comm: u64,
    /// The collective's sequence number.
    pub seq: u64,
    /// The answer code.
    pub code: u8,
    /// The rank (or node) concerned.
    pub aux: u64,
    /// A mismatch's sizes, where that proxy knew them.
    pub sizes: Option<Sizes>,
    /// Why.
    pub why: String,
}

impl Failed {
    /// How the collective failed, as that node's proxy told it.
    pub fn outcome(self) -> Outcome {
        Outcome::from_wire(Code::from_wire(u64::from(self.code)), self.aux, self.why)
            .with_sizes(self.sizes)
    }
}

/// The destination of a message that reports its source rank dead.
const DEAD: u32 = u32::MAX;
/// The destination of a proxy's last message (its source is the sending
/// proxy's index): it completes the receive its peer keeps posted.
const CLOSE: u32 = u32::MAX - 1;
/// The destination of a message that fails a collective on every node (its
/// source is the code, its tag the sequence number; the payload the rank
/// concerned, 8 bytes, the communicator's id, 8 bytes, a byte saying
/// whether a mismatch's sizes follow (1) or not (0), those sizes (sender,
/// receiver, bytes sent, bytes expected: 8 bytes each), then the reason).
const FAIL: u32 = u32::MAX - 2;

/// The bytes of a mismatch's sizes in a [`FAIL`] message.
const SIZES: usize = 32;

/// The payload and trailer of the message that fails collective `seq` of
/// communicator `comm` with outcome `o` ([`FAIL`]).
fn encode_failed(comm: u64, seq: u64, o: &Outcome) -> Vec<u8> {
    let (code, aux) = o.wire();
    let mut v = aux.to_le_bytes().to_vec();
    v.extend_from_slice(&comm.to_le_bytes());
    match o.sizes() {
        Some(s) => {
            v.push(1);
            for w in [s.sender as u64, s.receiver as u64, s.sent, s.expected] {
                v.extend_from_slice(&w.to_le_bytes());
            }
        }
        None => v.push(0),
    }
    v.extend_from_slice(o.why().as_bytes());
    v.extend_from_slice(&u32::from(code as u8).to_le_bytes());
    v.extend_from_slice(&FAIL.to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(&Sig::NONE.0.to_le_bytes());
    v
}

/// The sizes of a [`FAIL`] message's `SIZES` bytes; `None` where a rank
/// does not fit this machine's word (the reason still says them).
fn decode_sizes(b: &[u8]) -> Option<Sizes> {
    let w = |i: usize| {
        Some(u64::from_le_bytes(
            b.get(8 * i..8 * i + 8)?.try_into().ok()?,
        ))
    };
    Some(Sizes {
        sender: usize::try_from(w(0)?).ok()?,
        receiver: usize::try_from(w(1)?).ok()?,
        sent: w(2)?,
        expected: w(3)?,
    })
}

/// The local address that routes to `to`, as the ranks' transport listens on.
pub fn route(to: std::net::SocketAddr) -> Option<std::net::IpAddr> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
    let any = if to.is_ipv4() {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    };
    let u = UdpSocket::bind(SocketAddr::new(any, 0)).ok()?;
    u.connect(to).ok()?;
    Some(u.local_addr().ok()?.ip())
}

/// A message that fails a collective ([`FAIL`]), decoded.
fn parse_failed(v: &[u8]) -> Option<Failed> {
    let t = v.get(v.len().checked_sub(TRAILER)?..)?;
    if t[4..8] != FAIL.to_le_bytes() {
        return None;
    }
    let body = &v[..v.len() - TRAILER];
    let aux = u64::from_le_bytes(body.get(..8)?.try_into().ok()?);
    let comm = u64::from_le_bytes(body.get(8..16)?.try_into().ok()?);
    let (sizes, why) = match *body.get(16)? {
        0 => (None, 17),
        1 => (decode_sizes(body.get(17..17 + SIZES)?), 17 + SIZES),
        _ => return None,
    };
    Some(Failed {
        comm,
        seq: u64::from_le_bytes(t[8..16].try_into().ok()?),
        code: u8::try_from(u32::from_le_bytes(t[..4].try_into().ok()?)).ok()?,
        aux,
        sizes,
        why: String::from_utf8_lossy(&body[why..]).into_owned(),
    })
}

/// Whether `v` is a proxy's last message ([`CLOSE`]).
fn is_close(v: &[u8]) -> bool {
    v.len() == TRAILER && v[4..8] == CLOSE.to_le_bytes()
}

impl ProxyNet {
    /// Reads the [`Hello`] on standard input and connects to the other
    /// proxies (collective among them, relayed by the ranks).
    pub fn connect(size: usize) -> Result<ProxyNet> {
        let fd = std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Error::transport_from("proxy: its set-up link", e))?;
        let link = UnixStream::from(fd);
        let hello: Hello = read_frame(&link)
            .map_err(|e| e.to_string())
            .and_then(|b| postcard::from_bytes(&b).map_err(|e| e.to_string()))
            .map_err(|e| Error::transport_from("proxy: reading its place", e))?;
        let nodes = hello.node_ids.len();
        if hello.node_of.len() != size
            || hello.me >= nodes
            || hello.node_of.iter().any(|&n| n >= nodes)
        {
            return Err(Error::transport("proxy: its place does not fit its board"));
        }
        // From the link: bounded (a week, as HPC_TIMEOUT) so that no deadline
        // computed from it (`goodbye`'s) overflows an `Instant`.
        if hello.timeout_ms > 7 * 86_400_000 {
            return Err(Error::transport(format!(
                "proxy: its place's timeout of {} ms is more than a week",
                hello.timeout_ms
            )));
        }
        let timeout = Duration::from_millis(hello.timeout_ms);
        let _ = link.set_read_timeout(Some(timeout));
        let report = link
            .try_clone()
            .map_err(|e| Error::transport_from("proxy: its set-up link", e))?;
        let connected = (|| -> Result<hpc_rdma::Transport> {
            // One node each: no two proxies share memory.
            let names: Vec<String> = (0..nodes).map(|i| format!("proxy-node-{i}")).collect();
            let world =
                hpc_runtime::World::relayed(hello.me, &names, timeout, Box::new(Link(link)))?;
            let mut opts = hpc_rdma::Options::from_env()
                .map_err(|e| Error::transport_from("transport options", e))?;
            opts.timeout = Some(timeout);
            if std::env::var_os(hpc_runtime::env::TCP_ADDR).is_none() {
                opts.tcp_addr = hello
                    .rendezvous
                    .as_deref()
                    .and_then(|r| route(r.parse().ok()?));
            }
            hpc_rdma::Transport::with_options(&world, opts)
                .map_err(|e| Error::transport_from("proxy: connecting to the other nodes", e))
        })();
        let t = match connected {
            Ok(t) => t,
            Err(e) => {
                let _ = write_frame(&report, &[&[FAILED][..], e.chain().as_bytes()].concat());
                return Err(e);
            }
        };
        let net = ProxyNet::over(t, hello);
        write_frame(&report, &[&[READY][..], net.backend().as_bytes()].concat())
            .map_err(|e| Error::transport_from("proxy: reporting ready", e))?;
        Ok(net)
    }

    /// The proxies' connections over `t` (a transport among the proxies, one
    /// member per node, in node index order), placed as `hello` says.
    pub fn over(t: hpc_rdma::Transport, hello: Hello) -> ProxyNet {
        let nodes = hello.node_ids.len();
        let size = hello.node_of.len();
        let mut net = ProxyNet {
            t,
            recvs: vec![None; nodes],
            sends: Vec::new(),
            lost: vec![false; nodes],
            fresh_loss: false,
            dead: vec![false; size],
            failed: Vec::new(),
            watch: (0..nodes).map(|_| None).collect(),
            watched: Instant::now(),
            hello,
        };
        tracing::info!(
            node = net.hello.me,
            nodes,
            backend = net.backend(),
            "proxy: connected to the other nodes' proxies"
        );
        for p in 0..nodes {
            net.post_recv(p);
        }
        net
    }

    /// Watches the other proxies through `watch` (from [`watch_each_other`]).
    pub fn with_watch(mut self, watch: Vec<Option<std::net::TcpStream>>) -> ProxyNet {
        if watch.len() == self.watch.len() {
            self.watch = watch;
        }
        self
    }

    /// The name of the transport's backend to the other proxies.
    pub fn backend(&self) -> &'static str {
        (0..self.hello.node_ids.len())
            .find(|&p| p != self.hello.me)
            .and_then(|p| self.t.backend_of(p))
            .map_or("none", |b| b.name())
    }

    fn post_recv(&mut self, p: usize) {
        if p == self.hello.me || self.lost[p] {
            return;
        }
        match self.t.recv(p, MSG) {
            Ok(id) => self.recvs[p] = Some(id),
            Err(e) => self.lose(p, &e),
        }
    }

    fn lose(&mut self, p: usize, why: &dyn std::fmt::Display) {
        if !self.lost[p] {
            tracing::warn!(node = self.hello.node_ids[p], error = %why, "proxy: lost the proxy of another node");
            self.lost[p] = true;
            self.fresh_loss = true;
        }
        self.recvs[p] = None;
    }

    /// Whether rank `r` is on another node.
    pub fn is_remote(&self, r: usize) -> bool {
        self.hello.node_of.get(r) != Some(&self.hello.me)
    }

    /// The world node id of the first node found lost, if any.
    pub fn lost_node(&self) -> Option<usize> {
        self.lost
            .iter()
            .position(|&l| l)
            .map(|p| self.hello.node_ids[p])
    }

    /// How many nodes (proxies) there are.
    pub fn nodes(&self) -> usize {
        self.hello.node_ids.len()
    }

    /// The world node id of a lost node among `nodes` (node indices), if any.
    pub fn lost_among(&self, nodes: &[usize]) -> Option<usize> {
        nodes
            .iter()
            .find(|&&p| self.lost.get(p) == Some(&true))
            .map(|&p| self.hello.node_ids[p])
    }

    /// A node lost since the last call (its world id), once.
    pub fn take_lost(&mut self) -> Option<usize> {
        if std::mem::take(&mut self.fresh_loss) {
            self.lost_node()
        } else {
            None
        }
    }

    /// Sends `data` (the payload, then [`TRAILER`] bytes of room, which this
    /// fills) from rank `src` to rank `dst` under the proxy's message tag
    /// `tag`, of a collective whose signature is `sig`. `Err(node)`: the
    /// destination's node is lost.
    pub fn send(
        &mut self,
        src: usize,
        dst: usize,
        tag: u64,
        sig: Sig,
        mut data: Vec<u8>,
    ) -> Result<(), usize> {
        let p = self.hello.node_of[dst];
        if self.lost[p] {
            return Err(self.hello.node_ids[p]);
        }
        let at = data.len() - TRAILER;
        data[at..at + 4].copy_from_slice(&(src as u32).to_le_bytes());
        data[at + 4..at + 8].copy_from_slice(&(dst as u32).to_le_bytes());
        data[at + 8..at + 16].copy_from_slice(&tag.to_le_bytes());
        data[at + 16..].copy_from_slice(&sig.0.to_le_bytes());
        match self.t.send(p, MSG, data) {
            Ok(id) => {
                self.sends.push(id);
                Ok(())
            }
            Err(e) => {
                self.lose(p, &e);
                Err(self.hello.node_ids[p])
            }
        }
    }

    /// Tells the other proxies that rank `r` of this node died, so that they
    /// fail the collectives that wait for it (naming it) rather than time out.
    pub fn announce_dead(&mut self, r: usize) {
        for p in 0..self.lost.len() {
            if p == self.hello.me || self.lost[p] {
                continue;
            }
            let mut v = vec![0u8; TRAILER];
            v[..4].copy_from_slice(&(r as u32).to_le_bytes());
            v[4..8].copy_from_slice(&DEAD.to_le_bytes());
            match self.t.send(p, MSG, v) {
                Ok(id) => self.sends.push(id),
                Err(e) => self.lose(p, &e),
            }
        }
    }

    /// Tells the proxies of `nodes` (node indices: those the communicator
    /// spans) that collective `seq` of communicator `comm` failed here with
    /// outcome `o` (the edge: it becomes the wire's code, `aux` word and
    /// reason), so that their ranks fail it too rather than wait for
    /// messages that will not come.
    pub fn announce_failed(&mut self, comm: u64, seq: u64, o: &Outcome, nodes: &[usize]) {
        let v = encode_failed(comm, seq, o);
        for &p in nodes {
            if p == self.hello.me || self.lost.get(p) != Some(&false) {
                continue;
            }
            match self.t.send(p, MSG, v.clone()) {
                Ok(id) => self.sends.push(id),
                Err(e) => self.lose(p, &e),
            }
        }
    }

    /// The collectives other proxies failed since the last call.
    pub fn take_failed(&mut self) -> Vec<Failed> {
        std::mem::take(&mut self.failed)
    }

    /// Whether rank `r` (of another node) was reported dead by its proxy.
    pub fn is_dead(&self, r: usize) -> bool {
        self.dead.get(r).copied().unwrap_or(false)
    }

    /// Takes the messages that arrived (`deliver(source, destination, tag,
    /// signature, bytes)`, the bytes with their trailer, whose payload is
    /// the first `len - TRAILER`) and the sends that completed (their
    /// buffers to `reuse`); whether anything moved.
    pub fn poll(
        &mut self,
        deliver: &mut dyn FnMut(usize, usize, u64, Sig, Vec<u8>),
        reuse: &mut dyn FnMut(Vec<u8>),
    ) -> bool {
        let mut moved = false;
        if self.watched.elapsed() >= WATCH_EVERY {
            self.watched = Instant::now();
            for p in 0..self.watch.len() {
                if self.watch[p].as_ref().is_some_and(closed) {
                    self.watch[p] = None;
                    moved = true;
                    self.lose(p, &"its process ended (its watch connection closed)");
                }
            }
        }
        let mut i = 0;
        while i < self.sends.len() {
            match self.t.test(self.sends[i]) {
                Ok(None) => i += 1,
                Ok(Some(payload)) => {
                    self.sends.swap_remove(i);
                    reuse(payload.into_bytes());
                }
                Err(e) => {
                    self.sends.swap_remove(i);
                    tracing::debug!(error = %e, "proxy: a send to another node failed");
                }
            }
        }
        for p in 0..self.recvs.len() {
            let Some(id) = self.recvs[p] else { continue };
            match self.t.test(id) {
                Ok(None) => {}
                Ok(Some(payload)) => {
                    moved = true;
                    self.recvs[p] = None;
                    let v = payload.into_bytes();
                    if is_close(&v) {
                        // That proxy is done (its ranks left): nothing more comes.
                        continue;
                    }
                    self.post_recv(p);
                    if let Some(f) = parse_failed(&v) {
                        tracing::debug!(
                            seq = f.seq,
                            why = f.why,
                            "proxy: another node failed a collective"
                        );
                        self.failed.push(f);
                        continue;
                    }
                    if let Some(r) = self.parse_dead(p, &v) {
                        tracing::warn!(rank = r, "proxy: a rank of another node died");
                        self.dead[r] = true;
                        continue;
                    }
                    match self.parse(p, &v) {
                        Some((src, dst, tag, sig)) => deliver(src, dst, tag, sig, v),
                        None => tracing::warn!(
                            node = self.hello.node_ids[p],
                            "proxy: dropped a message from another node that names no rank pair of its"
                        ),
                    }
                }
                Err(e) => {
                    moved = true;
                    self.lose(p, &e);
                }
            }
        }
        moved
    }

    /// The (source, destination, tag, signature) of a message from proxy
    /// `p`, checked: from a rank of `p`'s node to a rank of this one.
    fn parse(&self, p: usize, v: &[u8]) -> Option<(usize, usize, u64, Sig)> {
        let t = v.get(v.len().checked_sub(TRAILER)?..)?;
        let src = u32::from_le_bytes(t[..4].try_into().ok()?) as usize;
        let dst = u32::from_le_bytes(t[4..8].try_into().ok()?) as usize;
        let tag = u64::from_le_bytes(t[8..16].try_into().ok()?);
        let sig = Sig(u32::from_le_bytes(t[16..].try_into().ok()?));
        let node = &self.hello.node_of;
        (node.get(src) == Some(&p) && node.get(dst) == Some(&self.hello.me))
            .then_some((src, dst, tag, sig))
    }

    /// The rank a message from proxy `p` reports dead, if it is such a
    /// report (and the rank is one of `p`'s node).
    fn parse_dead(&self, p: usize, v: &[u8]) -> Option<usize> {
        if v.len() != TRAILER || v[4..8] != DEAD.to_le_bytes() {
            return None;
        }
        let r = u32::from_le_bytes(v[..4].try_into().ok()?) as usize;
        (self.hello.node_of.get(r) == Some(&p)).then_some(r)
    }

    /// Whether sends or receives are in flight that only polling moves.
    pub fn busy(&self) -> bool {
        !self.sends.is_empty()
    }

    /// Two-phase goodbye with every other proxy that is not lost (bounded by
    /// the timeout): receiving a peer's second message means it has read
    /// everything this one sent and this one everything it sent, so no
    /// connection closes with unread data.
    pub fn goodbye(&mut self) {
        let deadline = Instant::now() + Duration::from_millis(self.hello.timeout_ms);
        let left = || deadline.saturating_duration_since(Instant::now());
        let peers: Vec<usize> = (0..self.lost.len())
            .filter(|&p| p != self.hello.me && !self.lost[p])
            .collect();
        // The last message on the message tag completes the receive each peer
        // keeps posted: no operation is left pending (and reported lost) when
        // the connections close.
        for &p in &peers {
            let mut v = vec![0u8; TRAILER];
            v[..4].copy_from_slice(&(self.hello.me as u32).to_le_bytes());
            v[4..8].copy_from_slice(&CLOSE.to_le_bytes());
            match self.t.send(p, MSG, v) {
                Ok(id) => self.sends.push(id),
                Err(e) => tracing::debug!(error = %e, "proxy: goodbye"),
            }
        }
        for &p in &peers {
            while let Some(id) = self.recvs[p].take() {
                match self.t.wait_timeout(id, left()) {
                    Ok(m) => {
                        // Anything before the close is a message no collective
                        // took (one that was cancelled).
                        if !is_close(&m.into_bytes()) {
                            self.post_recv(p);
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "proxy: goodbye"),
                }
            }
        }
        for id in std::mem::take(&mut self.sends) {
            if let Err(e) = self.t.wait_timeout(id, left()) {
                tracing::debug!(error = %e, "proxy: goodbye");
            }
        }
        for phase in 0..2 {
            let mut ops = Vec::new();
            for &p in &peers {
                ops.extend(self.t.send(p, BYE + phase, Vec::new()).ok());
                ops.extend(self.t.recv(p, BYE + phase).ok());
            }
            for op in ops {
                if let Err(e) = self.t.wait_timeout(op, left()) {
                    tracing::debug!(error = %e, "proxy: goodbye");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame beyond what the reader takes is refused before a byte is
    /// written, naming its size and the bound; the link then still carries
    /// the next frame (the relayed world's allgather over it too).
    #[test]
    fn an_oversize_frame_is_refused_before_it_is_written() {
        let (a, b) = UnixStream::pair().unwrap();
        // Without the check the write would wait for a reader: bounded.
        a.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
        let big = vec![7u8; MAX_FRAME + 1];
        let e = write_frame(&a, &big).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
        let text = e.to_string();
        assert!(
            text.contains(&(MAX_FRAME + 1).to_string()) && text.contains(&MAX_FRAME.to_string()),
            "{text}"
        );
        let link = Link(a);
        let e = hpc_runtime::Relay::allgather(&link, &big).unwrap_err();
        assert!(e.to_string().contains("more than"), "{e}");
        b.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        let nothing = (&b).read(&mut byte).unwrap_err();
        assert_eq!(nothing.kind(), std::io::ErrorKind::WouldBlock);
        write_frame(&link.0, &[1, 2, 3]).unwrap();
        b.set_nonblocking(false).unwrap();
        assert_eq!(read_frame(&b).unwrap(), vec![1, 2, 3]);
    }

    #[test]
    fn parts_round_trip_and_garbage_is_refused() {
        let parts = vec![vec![], vec![1, 2, 3], vec![9; 300]];
        assert_eq!(decode_parts(&encode_parts(&parts)), Some(parts));
        assert_eq!(decode_parts(&[]), None);
        assert_eq!(decode_parts(&[2, 0, 0, 0, 1, 0, 0, 0, 7]), None);
        assert_eq!(decode_parts(&[0, 0, 0, 0, 1]), None);
        assert_eq!(decode_parts(&[1, 0, 0, 0, 255, 255, 255, 255]), None);
    }

    /// A failure told to another node reads back as the outcome it was,
    /// a mismatch with its sizes; a cut or unknown sizes flag is refused.
    #[test]
    fn failures_round_trip_with_their_sizes() {
        let outcomes = [
            Outcome::mismatch(Sizes::new(0, 1, 16, 8)),
            Outcome::Mismatch {
                sender: 1,
                sizes: None,
                why: "sizes differ".into(),
            },
            Outcome::NodeLost { node: 3 },
            Outcome::failed("a step failed"),
        ];
        for o in outcomes {
            let v = encode_failed(5, 42, &o);
            let f = parse_failed(&v).unwrap();
            assert_eq!((f.comm, f.seq), (5, 42));
            assert_eq!(f.sizes, o.sizes());
            assert_eq!(f.outcome(), o);
        }
        let v = encode_failed(5, 42, &Outcome::mismatch(Sizes::new(0, 1, 16, 8)));
        let mut cut = v[..17 + 8].to_vec();
        cut.extend_from_slice(&v[v.len() - TRAILER..]);
        assert_eq!(parse_failed(&cut), None);
        let mut bad = v.clone();
        bad[16] = 2;
        assert_eq!(parse_failed(&bad), None);
    }
}
