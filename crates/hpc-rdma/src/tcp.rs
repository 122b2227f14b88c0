//! The TCP backend: any two hosts.
//!
//! One connection per peer pair (the higher rank connects to the lower one's listener,
//! authenticated by a random token exchanged through `World::allgather`), framed by
//! [`crate::wire`], `TCP_NODELAY` on. The receiving side of a connection is a state
//! machine fed by non-blocking reads ([`RxState`]): it applies puts straight from the
//! socket into the region (no staging copy), answers gets from the region's memory,
//! delivers messages and completes the initiator's puts (on the target's ack) and
//! gets (on the reply). Whoever waits on the transport reads it (its progress polls
//! every connection and reads the readable ones), so a message reaches a waiting
//! thread without a wake-up of another; a thread per connection reads when no caller
//! has progressed for 200 µs. Replies are queued to a writer thread so that a reader
//! never blocks on a write (no deadlock when both sides stream at once); the
//! initiator's own frames are written directly from the user's buffer under the
//! connection's lock.

use std::collections::HashMap;
use std::io::{IoSlice, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use hpc_runtime::World;

use crate::completion::{OpId, Payload, Shared, Sink, Source};
use crate::error::{check_bounds, room_for_claim, Error, Result};
use crate::region::{copy_in_order, Region, RemoteKey};
use crate::wire::{status, Header, Kind, HEADER_BYTES};
use crate::{Backend, BackendKind};

struct Reply {
    header: Header,
    data: Option<(Region, usize, usize)>,
}

struct Conn {
    peer: usize,
    writer: Mutex<TcpStream>,
    replies: Mutex<Option<mpsc::Sender<Reply>>>,
    /// The receiving side: read by whoever holds it (a waiting caller's progress,
    /// or the connection's thread when no caller progresses).
    rx: Mutex<RxSide>,
    /// The socket, for poll(2) (owned by `rx`'s stream).
    fd: i32,
    /// The receiving side has ended (end of stream, error, or goodbye).
    ended: AtomicBool,
}

/// A connection's receiving side and the frame it is in the middle of.
struct RxSide {
    s: TcpStream,
    st: RxState,
}

/// Where the bytes of the current frame go.
enum RxState {
    /// Reading a header.
    Header { b: [u8; HEADER_BYTES], have: usize },
    /// Reading `h.plen` payload bytes.
    Body { h: Header, dst: Body, have: usize },
}

enum Body {
    /// A message.
    Send(Vec<u8>),
    /// A put into `region` at `ptr` (the region keeps the memory alive); the last 8
    /// bytes are collected in `tail` and written last.
    Put {
        _region: Region,
        ptr: *mut u8,
        tail: [u8; 8],
    },
    /// A put that was refused: its bytes are read and dropped, then acked with `ack`
    /// (a [`refusal`]).
    Discard { ack: Header },
    /// The data of a get, into `ptr` (owned by `holder`), the last 8 bytes last.
    GetReply {
        holder: Payload,
        ptr: *mut u8,
        tail: [u8; 8],
    },
}

// SAFETY: the raw pointers lead into memory owned by the same value (a region handle
// or the payload it will become), which moves with it.
unsafe impl Send for RxSide {}

struct Inner {
    shared: Arc<Shared>,
    conns: Vec<Option<Arc<Conn>>>,
    puts: Mutex<HashMap<u64, (usize, Source)>>,
    gets: Mutex<HashMap<u64, (usize, Sink)>>,
    closing: AtomicBool,
    /// Nanoseconds since `epoch` of the last progress by a waiting caller: while
    /// callers progress, the connections' threads leave the sockets to them.
    caller_progress: AtomicU64,
    epoch: Instant,
    /// The sockets to poll, in `conns` order of their peers.
    polled: Vec<usize>,
}

/// The TCP backend.
pub(crate) struct Tcp {
    inner: Arc<Inner>,
}

/// The address to listen on: `HPC_TCP_ADDR`, else the local address that routes to
/// the launcher's rendezvous, else loopback when every peer shares this host; with
/// where it came from, for a message.
fn local_ip(explicit: Option<IpAddr>) -> (IpAddr, &'static str) {
    if let Some(ip) = explicit {
        return (ip, "the transport's options");
    }
    // An address that does not parse (or is not UTF-8) is warned about by name and
    // the default taken (it was taken without a word).
    if let Some(ip) = hpc_runtime::env::parsed(hpc_runtime::env::TCP_ADDR, parse_addr) {
        return (ip, hpc_runtime::env::TCP_ADDR);
    }
    if let Ok(r) = std::env::var(hpc_runtime::env::RENDEZVOUS) {
        if let Ok(addr) = r.parse::<SocketAddr>() {
            if let Ok(u) = UdpSocket::bind(SocketAddr::new(
                if addr.is_ipv4() {
                    IpAddr::V4(Ipv4Addr::UNSPECIFIED)
                } else {
                    IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
                },
                0,
            )) {
                if u.connect(addr).is_ok() {
                    if let Ok(a) = u.local_addr() {
                        return (a.ip(), "the address that routes to the launcher");
                    }
                }
            }
        }
    }
    use std::net::ToSocketAddrs;
    if let Ok(addrs) = (hpc_runtime::hostname().as_str(), 0).to_socket_addrs() {
        for a in addrs {
            if !a.ip().is_loopback() {
                return (a.ip(), "this host's name");
            }
        }
    }
    (IpAddr::V4(Ipv4Addr::LOCALHOST), "loopback")
}

/// `HPC_TCP_ADDR`'s value: an IP address.
pub(crate) fn parse_addr(s: &str) -> std::result::Result<IpAddr, std::net::AddrParseError> {
    s.trim().parse::<IpAddr>()
}

fn write_frame(w: &mut TcpStream, h: &Header, payload: &[u8]) -> std::io::Result<()> {
    let hb = h.encode();
    let mut bufs = [IoSlice::new(&hb), IoSlice::new(payload)];
    let mut bufs: &mut [IoSlice<'_>] = &mut bufs;
    while !bufs.is_empty() {
        let n = w.write_vectored(bufs)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut bufs, n);
    }
    Ok(())
}

/// How much more of a message's room is filled each time its bytes reach
/// the end of what is filled.
const RECV_STEP: usize = 1 << 20;

/// Connects to rank `p`'s listener at `addr`, trying again until `deadline`;
/// each try is given a second, never past the deadline (the last try, given
/// its whole second, ended up to a second after it).
fn connect_by(p: usize, addr: SocketAddr, deadline: Instant) -> Result<TcpStream> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        // At least a millisecond: a timeout of 0 is refused.
        let wait = left.clamp(Duration::from_millis(1), Duration::from_secs(1));
        match TcpStream::connect_timeout(&addr, wait) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(peer = p, %addr, error = %e, "tcp connect retry");
                std::thread::sleep(Duration::from_millis(20).min(left));
            }
            Err(e) => return Err(Error::lost(p, format!("cannot connect to {addr}"), Some(e))),
        }
    }
}

/// Accepts on `l` the connections of the ranks `missing`, each known by its
/// hello carrying `token`, into `streams`, by `deadline` (`timeout` after the
/// set-up began, for the message). A connection that says something else is
/// refused; the hellos of every connection are read at once
/// ([`hpc_runtime::greet`]): one that said nothing held every rank behind it
/// for up to 5 s, and a few made the set-up fail at its deadline.
fn accept_hellos(
    l: &TcpListener,
    token: u64,
    mut missing: Vec<usize>,
    streams: &mut [Option<TcpStream>],
    deadline: Instant,
    timeout: Duration,
) -> Result<()> {
    if missing.is_empty() {
        return Ok(());
    }
    let all_in =
        hpc_runtime::greet::accept_greetings::<HEADER_BYTES>(l, deadline, "tcp", |s, hb, from| {
            match Header::decode(&hb) {
                Ok(h) if h.kind == Kind::Hello && h.key == token => {
                    let r = h.op as usize;
                    match missing.iter().position(|&m| m == r) {
                        // The transport reads without blocking by its own
                        // calls; the descriptor itself blocks (its writes).
                        Some(i) if s.set_nonblocking(false).is_ok() => {
                            missing.swap_remove(i);
                            streams[r] = Some(s);
                        }
                        _ => tracing::warn!(%from, rank = r, "tcp: unexpected hello"),
                    }
                }
                other => tracing::warn!(%from, ?other, "tcp: refused a connection"),
            }
            missing.is_empty()
        })?;
    if !all_in {
        return Err(Error::Timeout {
            after: timeout,
            what: format!(
                "tcp connections from ranks {}",
                hpc_runtime::listed_ranks(&missing)
            ),
        });
    }
    Ok(())
}

impl Tcp {
    /// Collective: every rank calls it; `peers` are this rank's TCP peers (symmetric).
    pub(crate) fn new(
        shared: Arc<Shared>,
        world: &World,
        peers: &[usize],
        ip: Option<IpAddr>,
    ) -> Result<Tcp> {
        let me = shared.rank;
        let token = hpc_runtime::random_u64()?;
        let listener = if peers.is_empty() {
            None
        } else {
            let (ip, from) = local_ip(ip);
            // An address of another host (a stale HPC_TCP_ADDR) fails here: say
            // which address and where it came from.
            Some(
                TcpListener::bind(SocketAddr::new(ip, 0)).map_err(|e| Error::Unavailable {
                    backend: "tcp",
                    why: format!("cannot listen on {ip} (from {from}): {e}"),
                    source: Some(Arc::new(e)),
                })?,
            )
        };
        let mine = match &listener {
            Some(l) => format!("{} {token}", l.local_addr()?),
            None => String::new(),
        };
        let all = world.allgather(mine.as_bytes())?;
        let deadline = Instant::now() + world.timeout();
        let mut streams: Vec<Option<TcpStream>> = (0..shared.size).map(|_| None).collect();
        for &p in peers.iter().filter(|&&p| p < me) {
            let text = String::from_utf8_lossy(&all[p]).into_owned();
            let (addr, tok) = text
                .split_once(' ')
                .and_then(|(a, t)| Some((a.parse::<SocketAddr>().ok()?, t.parse::<u64>().ok()?)))
                .ok_or_else(|| Error::Protocol(format!("rank {p}'s tcp endpoint {text:?}")))?;
            let s = connect_by(p, addr, deadline)?;
            let mut hello = Header::new(Kind::Hello);
            hello.op = me as u64;
            hello.key = tok;
            let mut s2 = s.try_clone()?;
            write_frame(&mut s2, &hello, &[])?;
            streams[p] = Some(s);
        }
        if let Some(l) = &listener {
            let missing: Vec<usize> = peers.iter().copied().filter(|&p| p > me).collect();
            accept_hellos(l, token, missing, &mut streams, deadline, world.timeout())?;
        }
        let mut conns: Vec<Option<Arc<Conn>>> = (0..shared.size).map(|_| None).collect();
        let mut readers = Vec::new();
        let mut writers = Vec::new();
        for (p, s) in streams.into_iter().enumerate() {
            let Some(s) = s else { continue };
            s.set_nodelay(true)?;
            let (tx, rx) = mpsc::channel();
            use std::os::fd::AsRawFd;
            conns[p] = Some(Arc::new(Conn {
                peer: p,
                writer: Mutex::new(s.try_clone()?),
                replies: Mutex::new(Some(tx)),
                fd: s.as_raw_fd(),
                rx: Mutex::new(RxSide {
                    s,
                    st: RxState::Header {
                        b: [0; HEADER_BYTES],
                        have: 0,
                    },
                }),
                ended: AtomicBool::new(false),
            }));
            readers.push(p);
            writers.push((p, rx));
        }
        let inner = Arc::new(Inner {
            shared,
            conns,
            puts: Mutex::new(HashMap::new()),
            gets: Mutex::new(HashMap::new()),
            closing: AtomicBool::new(false),
            caller_progress: AtomicU64::new(0),
            epoch: Instant::now(),
            polled: readers.clone(),
        });
        for (p, rx) in writers {
            let conn = inner.conns[p].clone().expect("conn exists");
            std::thread::Builder::new()
                .name(format!("hpc-rdma-tcp-w{p}"))
                .spawn(move || writer_loop(conn, rx))?;
        }
        for p in readers {
            let inner2 = inner.clone();
            std::thread::Builder::new()
                .name(format!("hpc-rdma-tcp-r{p}"))
                .spawn(move || reader_loop(inner2, p))?;
        }
        Ok(Tcp { inner })
    }

    fn conn(&self, peer: usize) -> Result<&Arc<Conn>> {
        self.inner
            .conns
            .get(peer)
            .and_then(Option::as_ref)
            .ok_or_else(|| Error::unavailable("tcp", format!("rank {peer} is not a tcp peer")))
    }

    fn write(&self, conn: &Conn, h: &Header, payload: &[u8]) -> Result<()> {
        let mut w = conn.writer.lock().unwrap_or_else(|e| e.into_inner());
        write_frame(&mut w, h, payload).map_err(|e| {
            let cause = format!("write failed: {e}");
            self.inner.shared.fail_peer_by(conn.peer, &cause, Some(e));
            self.inner
                .shared
                .is_lost(conn.peer)
                .unwrap_or_else(|| Error::lost(conn.peer, cause, None::<Error>))
        })
    }
}

fn writer_loop(conn: Arc<Conn>, rx: mpsc::Receiver<Reply>) {
    while let Ok(r) = rx.recv() {
        let payload: &[u8] = match &r.data {
            // SAFETY: bounds were checked when the reply was made; the region handle in
            // `r` keeps the memory alive during the write.
            Some((region, off, len)) => unsafe {
                std::slice::from_raw_parts(region.as_ptr().add(*off), *len)
            },
            None => &[],
        };
        let mut w = conn.writer.lock().unwrap_or_else(|e| e.into_inner());
        if write_frame(&mut w, &r.header, payload).is_err() {
            return; // the reader sees the broken connection and reports it
        }
    }
}

fn status_of(e: &Error) -> u8 {
    match e {
        Error::OutOfBounds { .. } => status::OUT_OF_BOUNDS,
        _ => status::BAD_KEY,
    }
}

/// The answer of `kind` (a put's ack, a get's reply) by which a target refuses
/// `request` for `e`: its status, and for an access beyond the region the
/// offset asked for and the region's length (in `offset` and `tag`), so that
/// the initiator's error names them as a local one does ([`error_of`]).
pub(crate) fn refusal(request: &Header, kind: Kind, e: &Error) -> Header {
    let mut r = request.answer(kind);
    r.status = status_of(e);
    if let Error::OutOfBounds { region_len, .. } = e {
        r.offset = request.offset;
        r.tag = *region_len;
    }
    r
}

/// The header of a one-sided operation on `key`'s region at `offset`: a put
/// (`kind` = `Put`, `len` = payload bytes) or a get (`Get`, `len` = bytes asked).
pub(crate) fn one_sided_header(
    kind: Kind,
    op: OpId,
    key: &RemoteKey,
    offset: u64,
    len: usize,
) -> Header {
    let mut h = Header::new(kind);
    h.op = op.0;
    h.region = key.id as u64;
    h.key = key.key;
    h.offset = offset;
    if kind == Kind::Get {
        h.tag = len as u64;
    } else {
        h.plen = len as u64;
    }
    h
}

/// Completes a put from its acknowledgement `h`; `src` is the put's entry taken from
/// the initiator's table (none: an ack of an unknown put, a protocol error).
pub(crate) fn finish_put(shared: &Shared, h: &Header, src: Option<Source>) -> Result<()> {
    let src = src.ok_or_else(|| Error::Protocol(format!("ack of unknown put {}", h.op)))?;
    let res = if h.status == status::OK {
        Ok(src.into_payload())
    } else {
        Err(error_of(h, src.len() as u64, "put"))
    };
    shared.complete(OpId(h.op), res);
    Ok(())
}

/// Checks a get's reply `h` against the get's entry `sink`: `Ok(Some(sink))` when the
/// data (`h.plen` bytes) follows and goes into it, `Ok(None)` when the target refused
/// the get (the operation is completed with the error).
pub(crate) fn accept_get_reply(
    shared: &Shared,
    h: &Header,
    sink: Option<Sink>,
) -> Result<Option<Sink>> {
    let sink = sink.ok_or_else(|| Error::Protocol(format!("reply to unknown get {}", h.op)))?;
    if h.status != status::OK {
        shared.complete(OpId(h.op), Err(error_of(h, sink.len() as u64, "get")));
        return Ok(None);
    }
    if h.plen != sink.len() as u64 {
        return Err(Error::Protocol(format!(
            "get reply of {} bytes for {} asked",
            h.plen,
            sink.len()
        )));
    }
    Ok(Some(sink))
}

/// The error of a put's ack or a get's reply `h` that refuses an access of
/// `len` bytes (see [`refusal`]).
pub(crate) fn error_of(h: &Header, len: u64, what: &str) -> Error {
    match h.status {
        status::OUT_OF_BOUNDS => Error::OutOfBounds {
            offset: h.offset,
            len,
            region_len: h.tag,
        },
        _ => Error::BadKey(format!(
            "{what} rejected by the target (wrong or stale key)"
        )),
    }
}

/// `recv(2)` without blocking (the descriptor itself stays blocking: its writer clone
/// shares the file status flags). `WouldBlock` when nothing is there.
fn recv_now(s: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    let (n, _) = rustix::net::recv(s, buf, rustix::net::RecvFlags::DONTWAIT)?;
    Ok(n)
}

/// Whether the last progress by a waiting caller was less than 200 µs ago.
fn callers_progress(inner: &Inner) -> bool {
    let now = inner.epoch.elapsed().as_nanos() as u64;
    now.saturating_sub(inner.caller_progress.load(Ordering::Relaxed)) < 200_000
}

/// The connection's thread: reads when no caller does (a target that computes
/// still applies puts and answers gets), and notices the end of the connection.
fn reader_loop(inner: Arc<Inner>, peer: usize) {
    let conn = inner.conns[peer]
        .clone()
        .expect("reader of an existing conn");
    loop {
        if conn.ended.load(Ordering::Acquire) {
            return;
        }
        if callers_progress(&inner) {
            std::thread::sleep(Duration::from_micros(50));
            continue;
        }
        // SAFETY: the descriptor is owned by `conn.rx`'s stream, which lives as
        // long as `conn` (held here), so it stays open for the borrow.
        let fd = unsafe { BorrowedFd::borrow_raw(conn.fd) };
        let mut pfd = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
        let ten_ms = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 10_000_000,
        };
        let n = rustix::event::poll(&mut pfd, Some(&ten_ms)).unwrap_or(0);
        if n > 0 {
            let mut rx = conn.rx.lock().unwrap_or_else(|e| e.into_inner());
            pump(&inner, &conn, &mut rx);
        }
    }
}

/// Reads and handles every frame (or part of one) that has arrived, without
/// blocking; ends the connection on end of stream, an error or a goodbye.
fn pump(inner: &Inner, conn: &Conn, rx: &mut RxSide) -> bool {
    if conn.ended.load(Ordering::Acquire) {
        return false;
    }
    match read_available(inner, conn, rx) {
        Ok(progressed) => progressed,
        Err(res) => {
            conn.ended.store(true, Ordering::Release);
            let peer = conn.peer;
            if !inner.closing.load(Ordering::Acquire) {
                match res {
                    None => inner.shared.fail_peer(peer, crate::error::CLOSED_IN_ORDER),
                    Some(e) => inner.shared.fail_peer_by(peer, &e.to_string(), Some(e)),
                }
            }
            inner
                .puts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|_, (p, _)| *p != peer);
            inner
                .gets
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|_, (p, _)| *p != peer);
            true
        }
    }
}

/// `Ok(progressed)` when the socket has no more bytes now; `Err(None)` after a
/// goodbye, `Err(Some(e))` on end of stream or an error.
fn read_available(
    inner: &Inner,
    conn: &Conn,
    rx: &mut RxSide,
) -> std::result::Result<bool, Option<Error>> {
    let mut progressed = false;
    loop {
        // The bytes the current state wants next.
        let want: &mut [u8] = match &mut rx.st {
            RxState::Header { b, have } => &mut b[*have..],
            RxState::Body { h, dst, have } => {
                let len = h.plen as usize;
                let head = len - len.min(8);
                match dst {
                    Body::Send(v) => {
                        // The room was reserved, not filled: it is zeroed a
                        // step at a time as the bytes come, so that a peer
                        // that announces much and sends little fills nothing.
                        if *have == v.len() {
                            v.resize(len.min(*have + RECV_STEP), 0);
                        }
                        &mut v[*have..]
                    }
                    Body::Discard { .. } => {
                        // Read into the header buffer's worth of scratch space.
                        let mut scratch = [0u8; 8192];
                        let k = (len - *have).min(scratch.len());
                        match recv_now(&rx.s, &mut scratch[..k]) {
                            Ok(0) => return Err(Some(closed())),
                            Ok(n) => {
                                *have += n;
                                progressed = true;
                            }
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                                return Ok(progressed)
                            }
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                            Err(e) => return Err(Some(e.into())),
                        }
                        if *have == len {
                            finish_frame(inner, conn, rx)?;
                        }
                        continue;
                    }
                    Body::Put { ptr, tail, .. } | Body::GetReply { ptr, tail, .. } => {
                        if *have < head {
                            // SAFETY: `ptr` is valid for `len` bytes (checked when the
                            // frame began) and owned by this state; peers may write the
                            // same region, which RDMA semantics allow (no Rust reference
                            // to it exists elsewhere).
                            unsafe { std::slice::from_raw_parts_mut(ptr.add(*have), head - *have) }
                        } else {
                            &mut tail[*have - head..len - head]
                        }
                    }
                }
            }
        };
        if want.is_empty() {
            finish_frame(inner, conn, rx)?;
            progressed = true;
            continue;
        }
        match recv_now(&rx.s, want) {
            Ok(0) => return Err(Some(closed())),
            Ok(n) => {
                progressed = true;
                match &mut rx.st {
                    RxState::Header { have, .. } | RxState::Body { have, .. } => *have += n,
                }
                let done = match &rx.st {
                    RxState::Header { have, .. } => *have == HEADER_BYTES,
                    RxState::Body { h, have, .. } => *have as u64 == h.plen,
                };
                if done {
                    finish_frame(inner, conn, rx)?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(progressed),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Some(e.into())),
        }
    }
}

fn closed() -> Error {
    Error::Protocol("connection closed".into())
}

/// A header or a body is complete: act on it and set up what comes next.
fn finish_frame(
    inner: &Inner,
    conn: &Conn,
    rx: &mut RxSide,
) -> std::result::Result<(), Option<Error>> {
    let shared = &inner.shared;
    let peer = conn.peer;
    let reply = |r: Reply| {
        if let Some(tx) = conn
            .replies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            let _ = tx.send(r);
        }
    };
    let next = RxState::Header {
        b: [0; HEADER_BYTES],
        have: 0,
    };
    match std::mem::replace(&mut rx.st, next) {
        RxState::Header { b, .. } => {
            let h = Header::decode(&b).map_err(Some)?;
            let body = match h.kind {
                // Room for the message as its sender announces it, bounded by
                // the memory here (a claim of 1 TiB aborted this process).
                Kind::Send => Some(Body::Send(room_for_claim(peer, h.plen).map_err(Some)?)),
                Kind::Put => match shared.lookup(h.region as u32, h.key, h.offset, h.plen) {
                    Ok(region) => {
                        // SAFETY: `lookup` checked offset + plen against the region.
                        let ptr = unsafe { region.as_ptr().add(h.offset as usize) };
                        Some(Body::Put {
                            _region: region,
                            ptr,
                            tail: [0; 8],
                        })
                    }
                    Err(e) => Some(Body::Discard {
                        ack: refusal(&h, Kind::PutAck, &e),
                    }),
                },
                Kind::Get => {
                    let mut r = h.answer(Kind::GetReply);
                    match shared.lookup(h.region as u32, h.key, h.offset, h.tag) {
                        Ok(region) => {
                            r.plen = h.tag;
                            reply(Reply {
                                header: r,
                                data: Some((region, h.offset as usize, h.tag as usize)),
                            });
                        }
                        Err(e) => {
                            reply(Reply {
                                header: refusal(&h, Kind::GetReply, &e),
                                data: None,
                            });
                        }
                    }
                    None
                }
                Kind::PutAck => {
                    let src = inner
                        .puts
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&h.op);
                    finish_put(shared, &h, src.map(|(_, s)| s)).map_err(Some)?;
                    None
                }
                Kind::GetReply => {
                    let sink = inner
                        .gets
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&h.op);
                    match accept_get_reply(shared, &h, sink.map(|(_, s)| s)).map_err(Some)? {
                        None => None,
                        Some(Sink::Bytes(n)) => {
                            let mut v = vec![0u8; n];
                            let ptr = v.as_mut_ptr();
                            Some(Body::GetReply {
                                holder: Payload::Bytes(v),
                                ptr,
                                tail: [0; 8],
                            })
                        }
                        Some(Sink::Region { region, offset, .. }) => {
                            // SAFETY: `validate` checked offset + len within the region.
                            let ptr = unsafe { region.as_ptr().add(offset) };
                            Some(Body::GetReply {
                                holder: Payload::Region(region),
                                ptr,
                                tail: [0; 8],
                            })
                        }
                    }
                }
                Kind::Bye => return Err(None),
                Kind::Hello => return Err(Some(Error::Protocol("hello after setup".into()))),
            };
            if let Some(dst) = body {
                rx.st = RxState::Body { h, dst, have: 0 };
                // A body of no bytes is complete at once.
                if h.plen == 0 {
                    return finish_frame(inner, conn, rx);
                }
            }
        }
        RxState::Body { h, dst, .. } => {
            let len = h.plen as usize;
            let head = len - len.min(8);
            match dst {
                Body::Send(v) => shared.deliver(peer, h.tag, v),
                Body::Put { ptr, tail, .. } => {
                    // SAFETY: `ptr + head .. ptr + len` lies in the region (checked when
                    // the frame began), which `_region` kept alive until now.
                    unsafe { copy_in_order(ptr.add(head), tail.as_ptr(), len - head) };
                    reply(Reply {
                        header: h.answer(Kind::PutAck),
                        data: None,
                    });
                }
                Body::Discard { ack } => {
                    reply(Reply {
                        header: ack,
                        data: None,
                    });
                }
                Body::GetReply { holder, ptr, tail } => {
                    // SAFETY: as for a put: `ptr` is valid for `len` bytes, owned by
                    // `holder`.
                    unsafe { copy_in_order(ptr.add(head), tail.as_ptr(), len - head) };
                    shared.complete(OpId(h.op), Ok(holder));
                }
            }
        }
    }
    Ok(())
}

impl Backend for Tcp {
    fn kind(&self) -> BackendKind {
        BackendKind::Tcp
    }

    fn put(&self, op: OpId, src: Source, dst: &RemoteKey, offset: u64) -> Result<()> {
        let conn = self.conn(dst.rank())?;
        check_bounds(offset, src.len() as u64, dst.len)?;
        let h = one_sided_header(Kind::Put, op, dst, offset, src.len());
        let (ptr, len) = (src.as_ptr(), src.len());
        // Register before writing: the ack may arrive before `write` returns.
        self.inner
            .puts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(op.0, (conn.peer, src));
        // SAFETY: the source is owned by the `puts` table until the ack arrives (which
        // cannot happen before the frame is fully written) or the peer fails, and
        // `validate` checked its bounds.
        let data = unsafe { std::slice::from_raw_parts(ptr, len) };
        self.write(conn, &h, data)
    }

    fn get(&self, op: OpId, src: &RemoteKey, offset: u64, dst: Sink) -> Result<()> {
        let conn = self.conn(src.rank())?;
        check_bounds(offset, dst.len() as u64, src.len)?;
        let h = one_sided_header(Kind::Get, op, src, offset, dst.len());
        self.inner
            .gets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(op.0, (conn.peer, dst));
        self.write(conn, &h, &[])
    }

    fn send(&self, op: OpId, peer: usize, tag: u64, data: Vec<u8>) -> Result<()> {
        let conn = self.conn(peer)?;
        let mut h = Header::new(Kind::Send);
        h.tag = tag;
        h.plen = data.len() as u64;
        self.write(conn, &h, &data)?;
        self.inner.shared.complete(op, Ok(Payload::Bytes(data)));
        Ok(())
    }

    /// Reads whatever has arrived on the connections, in the caller's thread: a
    /// waiting caller gets its message without waking another thread (one poll(2)
    /// for all connections, then non-blocking reads of the readable ones).
    fn progress(&self) -> Result<()> {
        let inner = &self.inner;
        inner
            .caller_progress
            .store(inner.epoch.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let conns: Vec<&Arc<Conn>> = inner
            .polled
            .iter()
            .filter_map(|&p| inner.conns[p].as_ref())
            .filter(|c| !c.ended.load(Ordering::Relaxed))
            .collect();
        if conns.is_empty() {
            return Ok(());
        }
        let mut fds: Vec<PollFd> = conns
            .iter()
            .map(|c| {
                // SAFETY: each descriptor is owned by its connection's stream, and
                // the connections (in `inner`) outlive `fds`.
                let fd = unsafe { BorrowedFd::borrow_raw(c.fd) };
                PollFd::from_borrowed_fd(fd, PollFlags::IN)
            })
            .collect();
        let now = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        if !rustix::event::poll(&mut fds, Some(&now)).is_ok_and(|n| n > 0) {
            return Ok(());
        }
        for (conn, _) in conns
            .iter()
            .zip(&fds)
            .filter(|(_, f)| !f.revents().is_empty())
        {
            if let Ok(mut rx) = conn.rx.try_lock() {
                pump(inner, conn, &mut rx);
            }
        }
        Ok(())
    }

    fn check_peer(&self, peer: usize) -> Result<()> {
        match self.inner.shared.is_lost(peer) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn wants_progress(&self) -> bool {
        true
    }
}

impl Drop for Tcp {
    fn drop(&mut self) {
        self.inner.closing.store(true, Ordering::Release);
        for c in self.inner.conns.iter().flatten() {
            c.replies.lock().unwrap_or_else(|e| e.into_inner()).take();
            let mut w = c.writer.lock().unwrap_or_else(|e| e.into_inner());
            let _ = write_frame(&mut w, &Header::new(Kind::Bye), &[]);
            let _ = w.shutdown(Shutdown::Both);
        }
    }
}

#[cfg(test)]
mod refusal_tests {
    use super::*;

    /// A target's refusal of an access beyond its region reaches the initiator
    /// with the offset, the length and the region's length, as a local check
    /// says them: it said "offset 0 + length 0 exceeds the region's 0 bytes".
    #[test]
    fn a_refusal_out_of_bounds_names_the_access_and_the_region() {
        let mut put = Header::new(Kind::Put);
        put.op = 7;
        put.offset = 100;
        put.plen = 8;
        let e = Error::OutOfBounds {
            offset: 100,
            len: 8,
            region_len: 64,
        };
        for kind in [Kind::PutAck, Kind::GetReply] {
            let ack = Header::decode(&refusal(&put, kind, &e).encode()).unwrap();
            assert_eq!(ack.op, 7);
            let got = error_of(&ack, 8, "put");
            assert_eq!(got.to_string(), e.to_string());
        }
        let bad = refusal(&put, Kind::PutAck, &Error::BadKey("stale".into()));
        assert!(matches!(error_of(&bad, 8, "put"), Error::BadKey(_)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Connections that say nothing, one after another, do not hold the
    /// set-up past its deadline: each was given 5 s to speak and the deadline
    /// was looked at only while none waited (three silent connections held a
    /// set-up of 1 s for 15 s). The error names what was waited for and the
    /// timeout.
    #[test]
    fn silent_connections_do_not_hold_the_set_up_past_its_deadline() {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let at = l.local_addr().unwrap();
        let silent: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(at).unwrap()).collect();
        let mut streams: Vec<Option<TcpStream>> = (0..3).map(|_| None).collect();
        let timeout = Duration::from_millis(800);
        let t0 = Instant::now();
        let e = accept_hellos(&l, 7, vec![1, 2], &mut streams, t0 + timeout, timeout)
            .unwrap_err()
            .to_string();
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(3), "{took:?}: {e}");
        assert!(
            e.contains("800ms") && e.contains("tcp connections from ranks"),
            "{e}"
        );
        drop(silent);
    }

    /// Connecting to a listener that takes no more connections (its queue
    /// full: the kernel drops the tries) ends at the set-up's deadline: each
    /// try was given a whole second, and the last ended up to a second
    /// after the deadline (2 s for a deadline of 1.2 s). The error names
    /// the rank and the address.
    #[test]
    fn connecting_to_a_full_listener_ends_at_the_deadline() {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        // A queue of one connection, taken by the first.
        rustix::net::listen(&l, 0).unwrap();
        let at = l.local_addr().unwrap();
        let _queued = TcpStream::connect(at).unwrap();
        let t0 = Instant::now();
        let e = connect_by(3, at, t0 + Duration::from_millis(1200))
            .unwrap_err()
            .to_string();
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(1100) && took < Duration::from_millis(1600),
            "{took:?}: {e}"
        );
        assert!(
            e.contains(&format!("rank 3 is lost: cannot connect to {at}")),
            "{e}"
        );
    }

    /// A connection that says nothing does not hold a rank's that comes
    /// after it: the hellos were read one after the other, blocking up to
    /// 5 s on each, so that a silent connection (anyone who reached the
    /// port) held the set-up 5 s, and a few made it fail at its deadline.
    #[test]
    fn a_silent_connection_holds_no_rank_behind_it() {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let at = l.local_addr().unwrap();
        let silent = TcpStream::connect(at).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let mut rank1 = TcpStream::connect(at).unwrap();
        let mut hello = Header::new(Kind::Hello);
        hello.op = 1;
        hello.key = 7;
        write_frame(&mut rank1, &hello, &[]).unwrap();
        let mut streams: Vec<Option<TcpStream>> = (0..2).map(|_| None).collect();
        let timeout = Duration::from_secs(20);
        let t0 = Instant::now();
        accept_hellos(&l, 7, vec![1], &mut streams, t0 + timeout, timeout).unwrap();
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(2), "rank 1 waited {took:?}");
        let got = streams[1]
            .as_ref()
            .expect("rank 1's connection")
            .peer_addr();
        assert_eq!(got.unwrap(), rank1.local_addr().unwrap());
        drop(silent);
    }
}

#[cfg(test)]
mod claim_tests {
    use super::*;

    /// The receiving side of rank 0 of 2 for its connection to rank 1, and
    /// the raw socket that plays rank 1 (a member of the job that holds its
    /// token, and says what it likes).
    fn receiver() -> (Arc<Inner>, Arc<Conn>, TcpStream) {
        use std::os::fd::AsRawFd;
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let raw = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let conn = Arc::new(Conn {
            peer: 1,
            writer: Mutex::new(s.try_clone().unwrap()),
            replies: Mutex::new(None),
            fd: s.as_raw_fd(),
            rx: Mutex::new(RxSide {
                s,
                st: RxState::Header {
                    b: [0; HEADER_BYTES],
                    have: 0,
                },
            }),
            ended: AtomicBool::new(false),
        });
        let inner = Arc::new(Inner {
            shared: Shared::new(0, 2),
            conns: vec![None, Some(conn.clone())],
            puts: Mutex::new(HashMap::new()),
            gets: Mutex::new(HashMap::new()),
            closing: AtomicBool::new(false),
            caller_progress: AtomicU64::new(0),
            epoch: Instant::now(),
            polled: vec![1],
        });
        (inner, conn, raw)
    }

    /// Reads what arrived until `done` holds or 5 s pass.
    fn pump_until(inner: &Inner, conn: &Conn, done: impl Fn() -> bool) {
        let t0 = Instant::now();
        while !done() && t0.elapsed() < Duration::from_secs(5) {
            let mut rx = conn.rx.lock().unwrap();
            pump(inner, conn, &mut rx);
            drop(rx);
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A peer that announces a message of 1 TiB (the most the wire allows)
    /// and sends a few bytes: the receiver allocated the whole announced size
    /// before a byte of it came, and aborted where the host has not that much
    /// memory. Now the peer is lost at once, its error naming it and the size.
    #[test]
    fn a_peer_announcing_more_than_the_memory_is_lost_by_name() {
        let (inner, conn, mut raw) = receiver();
        let mut h = Header::new(Kind::Send);
        h.tag = 3;
        h.plen = crate::wire::MAX_PAYLOAD;
        raw.write_all(&h.encode()).unwrap();
        raw.write_all(b"a few bytes").unwrap();
        pump_until(&inner, &conn, || conn.ended.load(Ordering::Acquire));
        let e = inner
            .shared
            .is_lost(1)
            .expect("the peer that announced 1 TiB is lost")
            .to_string();
        assert!(
            e.contains("rank 1 announced a message of 1099511627776 bytes"),
            "{e}"
        );
        drop(raw);
    }

    /// A message longer than a step of the room's filling arrives whole and
    /// in order, as do a message of no bytes and one after it.
    #[test]
    fn a_message_of_several_steps_arrives_whole() {
        let (inner, conn, raw) = receiver();
        let big: Vec<u8> = (0..3 * RECV_STEP + 5).map(|i| (i % 251) as u8).collect();
        let writer = {
            let big = big.clone();
            let mut raw = raw.try_clone().unwrap();
            std::thread::spawn(move || {
                for (tag, data) in [(1u64, &big[..]), (2, &[][..]), (3, b"end")] {
                    let mut h = Header::new(Kind::Send);
                    h.tag = tag;
                    h.plen = data.len() as u64;
                    write_frame(&mut raw, &h, data).unwrap();
                }
            })
        };
        let recvs: Vec<OpId> = (1..=3).map(|t| inner.shared.post_recv(1, t)).collect();
        let got = |op: OpId| inner.shared.take(op).unwrap();
        pump_until(&inner, &conn, || {
            inner.shared.pending_count() == 0 || conn.ended.load(Ordering::Acquire)
        });
        writer.join().unwrap();
        let want: [&[u8]; 3] = [&big, b"", b"end"];
        for (op, want) in recvs.into_iter().zip(want) {
            let c = got(op).expect("the message arrived");
            match c.result.unwrap() {
                Payload::Bytes(v) => assert!(v == want, "{} bytes", v.len()),
                _ => panic!("a message not as bytes"),
            }
        }
        raw.shutdown(Shutdown::Both).unwrap();
    }
}
