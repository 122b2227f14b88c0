//! The TCP backend: any two hosts.
//!
//! One connection per peer pair (the higher rank connects to the lower one's listener,
//! authenticated by a random token exchanged through `World::allgather`), framed by
//! [`crate::wire`], `TCP_NODELAY` on. Each connection has a reader thread that is
//! the target-side progress: it applies puts straight from the socket into the
//! region (no staging copy), answers gets from the region's memory, delivers
//! messages and completes the initiator's puts (on the target's ack) and gets (on
//! the reply). Replies are queued to a writer thread so that a reader never blocks on
//! a write (no deadlock when both sides stream at once); the initiator's own frames
//! are written directly from the user's buffer under the connection's lock.

use std::collections::HashMap;
use std::io::{IoSlice, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hpc_runtime::World;

use crate::completion::{OpId, Payload, Shared, Sink, Source};
use crate::error::{check_bounds, Error, Result};
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
}

struct Inner {
    shared: Arc<Shared>,
    conns: Vec<Option<Arc<Conn>>>,
    puts: Mutex<HashMap<u64, (usize, Source)>>,
    gets: Mutex<HashMap<u64, (usize, Sink)>>,
    closing: AtomicBool,
}

/// The TCP backend.
pub(crate) struct Tcp {
    inner: Arc<Inner>,
}

/// The address to listen on: `HPC_TCP_ADDR`, else the local address that routes to
/// the launcher's rendezvous, else loopback when every peer shares this host.
fn local_ip(explicit: Option<IpAddr>) -> IpAddr {
    if let Some(ip) = explicit {
        return ip;
    }
    if let Ok(Some(ip)) = std::env::var("HPC_TCP_ADDR").map(|s| s.parse().ok()) {
        return ip;
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
                        return a.ip();
                    }
                }
            }
        }
    }
    use std::net::ToSocketAddrs;
    if let Ok(addrs) = (hpc_runtime::hostname().as_str(), 0).to_socket_addrs() {
        for a in addrs {
            if !a.ip().is_loopback() {
                return a.ip();
            }
        }
    }
    IpAddr::V4(Ipv4Addr::LOCALHOST)
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

impl Tcp {
    /// Collective: every rank calls it; `peers` are this rank's TCP peers (symmetric).
    pub(crate) fn new(
        shared: Arc<Shared>,
        world: &World,
        peers: &[usize],
        ip: Option<IpAddr>,
    ) -> Result<Tcp> {
        let me = shared.rank;
        let token = hpc_runtime::random_u64();
        let listener = if peers.is_empty() {
            None
        } else {
            Some(TcpListener::bind(SocketAddr::new(local_ip(ip), 0))?)
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
            let s = loop {
                match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                    Ok(s) => break s,
                    Err(e) if Instant::now() < deadline => {
                        tracing::debug!(peer = p, %addr, error = %e, "tcp connect retry");
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => {
                        return Err(Error::lost(p, format!("cannot connect to {addr}"), Some(e)))
                    }
                }
            };
            let mut hello = Header::new(Kind::Hello);
            hello.op = me as u64;
            hello.key = tok;
            let mut s2 = s.try_clone()?;
            write_frame(&mut s2, &hello, &[])?;
            streams[p] = Some(s);
        }
        if let Some(l) = &listener {
            l.set_nonblocking(true)?;
            let mut missing: Vec<usize> = peers.iter().copied().filter(|&p| p > me).collect();
            while !missing.is_empty() {
                match l.accept() {
                    Ok((mut s, from)) => {
                        s.set_nonblocking(false)?;
                        s.set_read_timeout(Some(Duration::from_secs(5)))?;
                        let mut hb = [0u8; HEADER_BYTES];
                        let hello = s
                            .read_exact(&mut hb)
                            .map_err(Error::from)
                            .and_then(|_| Header::decode(&hb));
                        match hello {
                            Ok(h) if h.kind == Kind::Hello && h.key == token => {
                                let r = h.op as usize;
                                if let Some(i) = missing.iter().position(|&m| m == r) {
                                    missing.swap_remove(i);
                                    s.set_read_timeout(None)?;
                                    streams[r] = Some(s);
                                } else {
                                    tracing::warn!(%from, rank = r, "tcp: unexpected hello");
                                }
                            }
                            other => tracing::warn!(%from, ?other, "tcp: refused a connection"),
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if Instant::now() > deadline {
                            return Err(Error::Timeout {
                                after: world.timeout(),
                                what: format!("tcp connections from ranks {missing:?}"),
                            });
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let mut conns: Vec<Option<Arc<Conn>>> = (0..shared.size).map(|_| None).collect();
        let mut readers = Vec::new();
        let mut writers = Vec::new();
        for (p, s) in streams.into_iter().enumerate() {
            let Some(s) = s else { continue };
            s.set_nodelay(true)?;
            let (tx, rx) = mpsc::channel();
            conns[p] = Some(Arc::new(Conn {
                peer: p,
                writer: Mutex::new(s.try_clone()?),
                replies: Mutex::new(Some(tx)),
            }));
            readers.push((p, s));
            writers.push((p, rx));
        }
        let inner = Arc::new(Inner {
            shared,
            conns,
            puts: Mutex::new(HashMap::new()),
            gets: Mutex::new(HashMap::new()),
            closing: AtomicBool::new(false),
        });
        for (p, rx) in writers {
            let conn = inner.conns[p].clone().expect("conn exists");
            std::thread::Builder::new()
                .name(format!("hpc-rdma-tcp-w{p}"))
                .spawn(move || writer_loop(conn, rx))?;
        }
        for (p, s) in readers {
            let inner2 = inner.clone();
            std::thread::Builder::new()
                .name(format!("hpc-rdma-tcp-r{p}"))
                .spawn(move || reader_loop(inner2, p, s))?;
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

pub(crate) fn status_of(e: &Error) -> u8 {
    match e {
        Error::OutOfBounds { .. } => status::OUT_OF_BOUNDS,
        _ => status::BAD_KEY,
    }
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
        Err(error_of(h.status, "put"))
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
        shared.complete(OpId(h.op), Err(error_of(h.status, "get")));
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

pub(crate) fn error_of(code: u8, what: &str) -> Error {
    match code {
        status::OUT_OF_BOUNDS => Error::OutOfBounds {
            offset: 0,
            len: 0,
            region_len: 0,
        },
        _ => Error::BadKey(format!(
            "{what} rejected by the target (wrong or stale key)"
        )),
    }
}

fn discard(s: &mut TcpStream, mut n: u64) -> std::io::Result<()> {
    let mut buf = [0u8; 8192];
    while n > 0 {
        let k = n.min(buf.len() as u64) as usize;
        s.read_exact(&mut buf[..k])?;
        n -= k as u64;
    }
    Ok(())
}

/// Reads `len` bytes from the socket into `dst` with the last 8 written last.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes and stay so during the call.
unsafe fn read_into(s: &mut TcpStream, dst: *mut u8, len: usize) -> std::io::Result<()> {
    let head = len.saturating_sub(8);
    // SAFETY: `dst` is valid for `len` >= `head` bytes (caller's contract). The memory is
    // a registered region that peers may also write: a racy overwrite gives unspecified
    // bytes, which is the documented RDMA semantics, not a Rust aliasing hazard because
    // no other Rust reference to it exists.
    let first = unsafe { std::slice::from_raw_parts_mut(dst, head) };
    s.read_exact(first)?;
    let mut tail = [0u8; 8];
    let t = &mut tail[..len - head];
    s.read_exact(t)?;
    // SAFETY: `dst + head .. dst + len` is valid per the caller; `t` is a local buffer.
    unsafe { copy_in_order(dst.add(head), t.as_ptr(), t.len()) };
    Ok(())
}

fn reader_loop(inner: Arc<Inner>, peer: usize, mut s: TcpStream) {
    let res = read_frames(&inner, peer, &mut s);
    if !inner.closing.load(Ordering::Acquire) {
        match res {
            Ok(()) => inner.shared.fail_peer(peer, "closed its transport"),
            Err(e) => inner.shared.fail_peer_by(peer, &e.to_string(), Some(e)),
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
}

fn read_frames(inner: &Inner, peer: usize, s: &mut TcpStream) -> Result<()> {
    let shared = &inner.shared;
    let conn = inner.conns[peer]
        .clone()
        .expect("reader of an existing conn");
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
    loop {
        let mut hb = [0u8; HEADER_BYTES];
        match s.read_exact(&mut hb) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(Error::Protocol("connection closed".into()))
            }
            Err(e) => return Err(e.into()),
        }
        let h = Header::decode(&hb)?;
        match h.kind {
            Kind::Send => {
                let mut v = vec![0u8; h.plen as usize];
                s.read_exact(&mut v)?;
                shared.deliver(peer, h.tag, v);
            }
            Kind::Put => {
                let mut ack = Header::new(Kind::PutAck);
                ack.op = h.op;
                match shared.lookup(h.region as u32, h.key, h.offset, h.plen) {
                    Ok(region) => {
                        // SAFETY: `lookup` checked offset + plen against the region and
                        // `region` keeps the memory alive during the read.
                        unsafe {
                            read_into(s, region.as_ptr().add(h.offset as usize), h.plen as usize)?
                        };
                    }
                    Err(e) => {
                        discard(s, h.plen)?;
                        ack.status = status_of(&e);
                    }
                }
                reply(Reply {
                    header: ack,
                    data: None,
                });
            }
            Kind::Get => {
                let mut r = Header::new(Kind::GetReply);
                r.op = h.op;
                match shared.lookup(h.region as u32, h.key, h.offset, h.tag) {
                    Ok(region) => {
                        r.plen = h.tag;
                        reply(Reply {
                            header: r,
                            data: Some((region, h.offset as usize, h.tag as usize)),
                        });
                    }
                    Err(e) => {
                        r.status = status_of(&e);
                        reply(Reply {
                            header: r,
                            data: None,
                        });
                    }
                }
            }
            Kind::PutAck => {
                let src = inner
                    .puts
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&h.op);
                finish_put(shared, &h, src.map(|(_, s)| s))?;
            }
            Kind::GetReply => {
                let sink = inner
                    .gets
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&h.op);
                let Some(sink) = accept_get_reply(shared, &h, sink.map(|(_, s)| s))? else {
                    continue;
                };
                let mut io = Ok(());
                let payload = sink.fill(|ptr, len| {
                    // SAFETY: `Sink::fill` passes a pointer valid for `len` bytes.
                    io = unsafe { read_into(s, ptr, len) };
                    Ok(())
                })?;
                io?;
                shared.complete(OpId(h.op), Ok(payload));
            }
            Kind::Bye => return Ok(()),
            Kind::Hello => return Err(Error::Protocol("hello after setup".into())),
        }
    }
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

    fn progress(&self) -> Result<()> {
        Ok(())
    }

    fn check_peer(&self, peer: usize) -> Result<()> {
        match self.inner.shared.is_lost(peer) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn wants_progress(&self) -> bool {
        false
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
