//! A rank's side: its link to the node's DPU proxy, its registration cache
//! and its collectives in flight.

mod launch;
mod message;

pub(super) use hpc_proxy::dpu::wire::P2P_FIRST;
pub(crate) use message::Carried;

use crate::job::Job;
use crate::proxy::ProxyClient;
use hpc_board::backoff::Backoff;
use hpc_board::sig::Sig;
use hpc_board::sync::lock;
use hpc_board::{Error, Result};
use hpc_collectives::{Collective, Options};
use hpc_proxy::closed;
use hpc_proxy::dpu::link::{
    backend_name, host_addr, join, link_backend, route_to, Link, Watch, WATCH_EVERY,
};
use hpc_proxy::dpu::wire::{
    decode_waiting, encode_request, places, recv_is_input, split_id, wire, Answer, Offer, Place,
    Request, Span, Waiting, MAX_LOCAL, TAG_ANSWER, TAG_PLACE, TAG_READY, TAG_REQUEST,
};
use hpc_proxy::protocol::Code;
use hpc_proxy::Outcome;
use hpc_rdma::{OpId, Payload, Region, Transport};
use hpc_runtime::Coordinator;
use std::net::{IpAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// A rank's side.

/// The bootstrap allgather of a communicator being created.
pub(crate) type Allgather<'a> = &'a dyn Fn(&[u8]) -> Result<Vec<Vec<u8>>>;

/// A rank's link to its node's DPU-placed proxy, shared by the communicator
/// it was made for and every split of it.
pub(super) struct Conn {
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
    /// Point-to-point messages posted (their numbers on the link follow
    /// [`P2P_FIRST`]).
    messages: std::sync::atomic::AtomicU64,
}

/// How long a rank's `Detach` may take to leave it.
pub(super) const DETACH_SEND_FOR: Duration = Duration::from_secs(1);

/// Regions the cache keeps (at most), and bytes.
pub(super) const CACHE_REGIONS: usize = 16;
pub(super) const CACHE_BYTES: usize = 256 << 20;

/// Decodes a coordinator's (address, secret) offer.
pub(super) fn offered(
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
    /// Over a rank's new link to its node's proxy (link rank `proxy`): tells
    /// the proxy its `place` (the node's first rank), then waits for the
    /// proxy's word that it is connected (to the other nodes' proxies too).
    fn greet(
        t: &Transport,
        proxy: usize,
        place: Option<Place>,
        node: usize,
        timeout: Duration,
    ) -> Result<()> {
        if let Some(place) = place {
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
                "the DPU proxy of node {node}: {}",
                String::from_utf8_lossy(&word)
            )));
        }
        Ok(())
    }

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
        hpc_proxy::max_scratch().map_err(Error::Unsupported)?;
        let size = world.len();
        let (node_of, node_ids) = places(nodes);
        let mine = node_of[me];
        let local: Vec<usize> = (0..size).filter(|&r| node_of[r] == mine).collect();
        let link_me = local.iter().position(|&r| r == me).unwrap_or(0);
        let spans = node_ids.len() > 1;
        let backend = link_backend();
        let ip = host_addr();
        let (mut coord, mut net_coord) = (None, None);
        // A coordinator started here is kept in `keep`; the others learn its
        // address and secret, or why it did not start.
        type Offered = std::result::Result<(String, u64), String>;
        let offer = |started: Result<(Arc<Coordinator>, u64)>, keep: &mut Option<_>| -> Offered {
            let (c, secret) = started.map_err(|e| e.chain())?;
            let o = (c.addr().to_string(), secret);
            *keep = Some(c);
            Ok(o)
        };
        let offer = Offer {
            link: (link_me == 0)
                .then(|| offer(Conn::launch(local.len(), timeout, backend, &ip), &mut coord)),
            net: (me == 0 && spans)
                .then(|| offer(Self::meeting(node_ids.len(), timeout, &ip), &mut net_coord)),
        };
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
                // The node's first rank tells the proxy its place.
                let place = (link_me == 0).then(|| Place {
                    ranks: local.clone(),
                    node_of: node_of.clone(),
                    node_ids: node_ids.clone(),
                    me: mine,
                    net: net.clone(),
                });
                Self::greet(&t, local.len(), place, node_ids[mine], timeout)?;
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
            messages: 0.into(),
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
            messages: 0.into(),
        })
    }

    /// The communicator's first rank, across nodes: the coordinator the
    /// nodes' proxies meet at, on an address the other nodes reach (the one
    /// that routes to the launcher's rendezvous, else the link's address).
    fn meeting(
        nodes: usize,
        timeout: Duration,
        ip: &Result<IpAddr>,
    ) -> Result<(Arc<Coordinator>, u64)> {
        use std::net::ToSocketAddrs;
        let ip = listen_ip(ip)?;
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
        Ok((Arc::new(coord), secret))
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
    /// The world's ranks whose parts of collective `seq` the proxy has not
    /// received, as it answers a [`Request::Ask`] within
    /// [`ASK_FOR`](crate::proxy::client::ASK_FOR) (empty where it does not:
    /// a proxy that is gone or stuck names nobody). The ask takes a number
    /// on the link of its own, as a message does, so that its answer's tag
    /// is no collective's.
    fn waiting_for(&self, seq: u64) -> Vec<usize> {
        let n = P2P_FIRST + self.messages.fetch_add(1, Ordering::Relaxed) % P2P_FIRST;
        let w = wire(self.local, n);
        let asked = encode_request::<Collective>(w, &Request::Ask { seq }).and_then(|bytes| {
            let op = self
                .link
                .t
                .recv(self.link.proxy(), TAG_ANSWER + w)
                .map_err(|e| self.link.link_error(e))?;
            self.link.send(bytes)?;
            Ok(op)
        });
        let op = match asked {
            Ok(op) => op,
            Err(e) => {
                tracing::debug!(seq, error = %e, "DPU proxy: could not ask whom it waits for");
                return Vec::new();
            }
        };
        let t0 = Instant::now();
        while t0.elapsed() < crate::proxy::client::ASK_FOR && !self.link.proxy_gone() {
            match self.link.t.test(op) {
                Ok(None) => std::thread::sleep(Duration::from_micros(200)),
                Ok(Some(payload)) => {
                    return match decode_waiting(&payload.into_bytes()) {
                        Ok(Waiting { ranks }) => ranks
                            .into_iter()
                            .map(|r| self.world.get(r).copied().unwrap_or(r))
                            .collect(),
                        Err(why) => {
                            tracing::debug!(seq, "DPU proxy: {why}");
                            Vec::new()
                        }
                    };
                }
                Err(_) => break,
            }
        }
        Vec::new()
    }

    fn outcome(&self, seq: u64, sig: Sig, payload: Payload) -> Result<()> {
        let bytes = payload.into_bytes();
        let a: Answer = postcard::from_bytes(&bytes).map_err(|e| {
            Error::transport(format!(
                "an undecodable answer from the proxy to collective {seq}: {e}"
            ))
        })?;
        let code = Code::from_wire(u64::from(a.code));
        Outcome::from_wire(code, a.aux, a.why).into_result(seq, "the DPU proxy", &self.world, sig)
    }
}

impl ProxyClient for Client {
    type Posted = Posted;

    fn submit(&self, mut job: Job<'_>) -> Result<Posted> {
        if self.link.proxy_gone() {
            return Err(Error::Stopped("proxy"));
        }
        let seq = job.seq;
        let direct = job.direct();
        let (coll, send, recv) = job.parts();
        let sig = Sig::of(coll);
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
            sig,
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
    fn poll(&self, p: &Posted) -> bool {
        let mut st = lock(&p.state);
        if st.outcome.is_some() {
            return true;
        }
        let res = match self.link.t.test(p.answer) {
            Ok(None) if self.link.proxy_gone() => Err(Error::Stopped("proxy")),
            Ok(None) => return false,
            Ok(Some(payload)) => self.outcome(p.seq, p.sig, payload),
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

    fn wait(&self, p: &Posted, out: Option<&mut [u8]>) -> Result<()> {
        let t0 = Instant::now();
        let backoff = Backoff::new(self.spin, true);
        while !self.poll(p) {
            if t0.elapsed() > self.timeout {
                return Err(Error::Timeout {
                    after: self.timeout,
                    waiting_for: self.waiting_for(p.seq),
                });
            }
            // Sleeps longer the longer the wait (a sixteenth of it, 50-500 µs):
            // a large collective's answer comes milliseconds later, and every
            // look at the transport costs the rank's CPU.
            backoff.rest(|idle| {
                (idle / 16).clamp(Duration::from_micros(50), Duration::from_micros(500))
            });
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
    fn discard(&self, p: &Posted) {
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
    fn cancel(&self, p: &Posted) {
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
                        crate::proxy::abort_unconfirmed_cancel("the DPU proxy", self.timeout);
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
    fn detach(&self) {
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
pub(super) fn clone_error(e: &Error) -> Error {
    match e {
        Error::RankLost { rank } => Error::RankLost { rank: *rank },
        Error::NodeLost { node } => Error::NodeLost { node: *node },
        Error::CountMismatch { rank, detail } => Error::CountMismatch {
            rank: *rank,
            detail: detail.clone(),
        },
        Error::CollectiveMismatch { rank, ours, theirs } => Error::CollectiveMismatch {
            rank: *rank,
            ours: ours.clone(),
            theirs: theirs.clone(),
        },
        Error::Stopped(s) => Error::Stopped(s),
        Error::ProxyMemory { bytes, why } => Error::ProxyMemory {
            bytes: *bytes,
            why: why.clone(),
        },
        Error::PeerTimedOut { rank, waited_for } => Error::PeerTimedOut {
            rank: *rank,
            waited_for: *waited_for,
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
pub(super) struct Out(*mut u8);

// SAFETY: the pointer is only written through in `Client::poll`, under the
// posted collective's lock, while the job's borrow of the buffer lasts (see there).
unsafe impl Send for Out {}
// SAFETY: as above.
unsafe impl Sync for Out {}

pub(super) struct State {
    /// The registered memory the proxy reads and writes (until the outcome
    /// was delivered).
    region: Option<Region>,
    outcome: Option<Result<()>>,
}

/// A collective posted to the DPU proxy.
pub(crate) struct Posted {
    seq: u64,
    /// Its collective's signature (what the proxy's answer of a
    /// disagreement names as this rank's).
    sig: Sig,
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

/// The address the first rank listens on for the proxy, worked out once for
/// the communicator (`link::host_addr`), or its error again: an error that
/// says it is unsupported is given again as it was (its text was wrapped in
/// a second "unsupported: ", "unsupported: unsupported: HPC_COLL_PROXY_DPU_HOST=…").
fn listen_ip(ip: &Result<IpAddr>) -> Result<IpAddr> {
    match ip {
        Ok(ip) => Ok(*ip),
        Err(Error::Unsupported(why)) => Err(Error::Unsupported(why.clone())),
        Err(e) => Err(Error::Unsupported(e.to_string())),
    }
}
