//! The coordinator of the built-in launcher: a small TCP server that every rank of an
//! `hpc run` job connects to. It carries the bootstrap collectives (allgather,
//! broadcast, barrier) and, because it sees every rank's connection and hears from the
//! launcher when a process exits, it is also the job's failure detector: a lost rank
//! turns every pending and later collective into an error that names it.
//!
//! It is a library type so that tests and other launchers can host it.
//!
//! A connection proves it belongs to the job with the secret in its first frame
//! (hello) before the coordinator reads anything else from it: until then it is one of
//! at most [`MAX_PENDING`] sockets watched by the accept thread, may send at most
//! [`HELLO_MAX`] bytes and must do so within 10 s (or the job timeout). Only an
//! authenticated rank gets a reader thread, and frames are buffered as their bytes
//! arrive, never by their announced length.

use std::collections::{BTreeMap, HashMap};
use std::io::BufReader;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use crate::env;
use crate::error::{Error, Result};
use crate::wire::{frame, read_msg, Msg, Op, ReadError, MAX_JOB_RANKS};

/// How long the coordinator waits, after a connection closes without `Goodbye`, for the
/// launcher to report the process's exit status (which makes a better message).
const EXIT_GRACE: Duration = Duration::from_millis(300);

enum Event {
    Joined {
        rank: usize,
        node: String,
        pid: u32,
        stream: TcpStream,
        /// Whether the coordinator took the connection as `rank`'s: its
        /// reader goes on only then (a refused second connection of a rank
        /// must not report its messages and its end as the rank's).
        verdict: Sender<bool>,
    },
    Msg {
        rank: usize,
        msg: Msg,
    },
    Closed {
        rank: usize,
        error: Option<String>,
    },
    Exited {
        rank: usize,
        cause: String,
        success: bool,
    },
    Shutdown,
}

/// A running coordinator. Dropping it (or [`Coordinator::shutdown`]) stops it.
pub struct Coordinator {
    addr: SocketAddr,
    size: usize,
    secret: u64,
    timeout: Duration,
    events: Sender<Event>,
    main: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl Coordinator {
    /// Starts a coordinator for `size` ranks on `bind` (port chosen by the OS).
    ///
    /// `timeout` bounds how long the job waits for all ranks to join and for every
    /// collective once its first rank arrived.
    ///
    /// A `size` beyond [`MAX_JOB_RANKS`], or whose ranks' records this
    /// machine cannot hold, and a `timeout` of 0 or beyond
    /// [`env::MAX_TIMEOUT`](crate::env::MAX_TIMEOUT) (which its ranks refuse),
    /// are [`Error::InvalidArgument`].
    pub fn start(size: usize, secret: u64, timeout: Duration, bind: IpAddr) -> Result<Coordinator> {
        if size == 0 {
            return Err(Error::InvalidArgument(
                "a job needs at least one rank".into(),
            ));
        }
        // The ranks' records were made in the coordinator's thread, unchecked:
        // `usize::MAX` ranks panicked there ("capacity overflow", the start
        // said `Ok`), 2^40 aborted the process ("memory allocation of
        // 4398046511104 bytes failed").
        if size > MAX_JOB_RANKS {
            return Err(Error::InvalidArgument(format!(
                "a job of {size} ranks: the most a job has is {MAX_JOB_RANKS} (a rank \
                 is a 32-bit number, as in MPI)"
            )));
        }
        // `Duration::MAX` panicked in the coordinator's thread (the start said
        // `Ok`), and its ranks were given an `HPC_TIMEOUT` they refuse.
        env::check_timeout("the coordinator's timeout", timeout).map_err(Error::InvalidArgument)?;
        let state = State::new(size, timeout)?;
        let listener = TcpListener::bind(SocketAddr::new(bind, 0))
            .map_err(|e| Error::io("binding the coordinator", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("reading the coordinator address", e))?;
        let (tx, rx) = mpsc::channel();
        let accept_tx = tx.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let accept_stop = stop.clone();
        std::thread::Builder::new()
            .name("hpc-coord-accept".into())
            .spawn(move || accept_loop(listener, size, secret, timeout, accept_tx, accept_stop))
            .map_err(|e| Error::io("spawning the coordinator", e))?;
        let main = std::thread::Builder::new()
            .name("hpc-coord".into())
            .spawn(move || state.run(rx))
            .map_err(|e| Error::io("spawning the coordinator", e))?;
        tracing::debug!(%addr, size, "coordinator listening");
        Ok(Coordinator {
            addr,
            size,
            secret,
            timeout,
            events: tx,
            main: Some(main),
            stop,
        })
    }

    /// The address ranks connect to (`HPC_RENDEZVOUS`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The variables a process needs to join this job as `rank`: `HPC_RANK`,
    /// `HPC_SIZE`, `HPC_RENDEZVOUS`, `HPC_JOB_SECRET` and `HPC_TIMEOUT`. For launchers
    /// (and tests) that start ranks themselves:
    ///
    /// ```no_run
    /// # use std::net::{IpAddr, Ipv4Addr};
    /// # use std::time::Duration;
    /// let coord = hpc_runtime::Coordinator::start(
    ///     2, hpc_runtime::random_u64()?, Duration::from_secs(10), IpAddr::V4(Ipv4Addr::LOCALHOST))?;
    /// for rank in 0..2 {
    ///     std::process::Command::new("./app").envs(coord.rank_env(rank)).spawn()?;
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rank_env(&self, rank: usize) -> Vec<(&'static str, String)> {
        use crate::env;
        vec![
            (env::RANK, rank.to_string()),
            (env::SIZE, self.size.to_string()),
            (env::RENDEZVOUS, self.addr.to_string()),
            (env::SECRET, format!("{:x}", self.secret)),
            (env::TIMEOUT, self.timeout.as_secs_f64().to_string()),
        ]
    }

    /// Tells the coordinator that the process of `rank` exited; `success` is true for
    /// exit code 0. A failed rank aborts the job's collectives with `cause`.
    pub fn rank_exited(&self, rank: usize, success: bool, cause: impl Into<String>) {
        let _ = self.events.send(Event::Exited {
            rank,
            cause: cause.into(),
            success,
        });
    }

    /// Stops the coordinator and waits for it.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.events.send(Event::Shutdown);
        if let Some(h) = self.main.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Largest hello frame accepted before a connection has proved it knows the job's
/// secret. A hello carries a node name and a few integers; anything larger is refused
/// without being read.
pub const HELLO_MAX: usize = 4096;

/// Connections that have not yet sent a valid hello are held at most this many at a
/// time; when a new one arrives beyond it, the oldest is closed. Ranks send their
/// hello at once, so only idle or hostile peers ever get old.
pub const MAX_PENDING: usize = 256;

/// How many refused connections the coordinator names in the log, each in a line,
/// the last followed by a line saying that the next are not logged (a peer that
/// connects again and again, a port scanner, filled the job's standard error with
/// a line per connection).
pub const MAX_REFUSALS_LOGGED: u64 = 8;

/// The least time a connection is given to send its hello.
const MIN_HELLO_TIMEOUT: Duration = Duration::from_millis(100);

/// How long a connection may take to send its hello (at most the job timeout).
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection that has not authenticated yet: its bytes so far (at most a hello).
struct Unauthenticated {
    stream: TcpStream,
    buf: Vec<u8>,
    since: Instant,
}

enum Step {
    /// Keep waiting for more bytes.
    Wait,
    /// Close it; say why (`None`: quietly).
    Drop(Option<String>),
    /// A valid hello: rank, node, pid, and any bytes that followed it.
    Hello(usize, String, u32, Vec<u8>),
}

/// Reads what `c` has sent so far, without blocking, and judges it.
fn advance(c: &mut Unauthenticated, size: usize, secret: u64) -> Step {
    use std::io::Read;
    let mut chunk = [0u8; 1024];
    loop {
        match c.stream.read(&mut chunk) {
            Ok(0) => return Step::Drop(None),
            Ok(n) => c.buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Step::Drop(None),
        }
        if c.buf.len() >= 4 + HELLO_MAX {
            break;
        }
    }
    if c.buf.len() < 4 {
        return Step::Wait;
    }
    let len = u32::from_le_bytes([c.buf[0], c.buf[1], c.buf[2], c.buf[3]]) as usize;
    let peer = c.stream.peer_addr().ok();
    if len == 0 || len > HELLO_MAX {
        return Step::Drop(Some(format!(
            "connection from {peer:?} announced a frame of {len} bytes before \
             authenticating (a hello is at most {HELLO_MAX})"
        )));
    }
    if c.buf.len() < 4 + len {
        return Step::Wait;
    }
    match Msg::decode(&c.buf[4..4 + len]) {
        Ok(Msg::Hello {
            rank,
            size: s,
            secret: k,
            node,
            pid,
        }) => {
            if k != secret {
                return Step::Drop(Some(format!(
                    "connection from {peer:?} with a wrong job secret"
                )));
            }
            if s as usize != size || rank as usize >= size {
                return Step::Drop(Some(format!(
                    "rank {rank} of {s} does not fit a job of {size} ranks"
                )));
            }
            Step::Hello(rank as usize, node, pid, c.buf[4 + len..].to_vec())
        }
        other => Step::Drop(Some(format!(
            "connection from {peer:?} did not start with hello: {other:?}"
        ))),
    }
}

/// Accepts connections and authenticates them on this one thread: a connection gets
/// a thread of its own only once its hello carried the job's secret. Until then it
/// costs a socket and at most [`HELLO_MAX`] bytes, there are at most [`MAX_PENDING`]
/// of them, and each has [`HELLO_TIMEOUT`] (or the job timeout if shorter) to
/// authenticate.
fn accept_loop(
    listener: TcpListener,
    size: usize,
    secret: u64,
    timeout: Duration,
    tx: Sender<Event>,
    stop: Arc<AtomicBool>,
) {
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::error!(error = %e, "coordinator cannot poll its socket");
        return;
    }
    // At least a tenth of a second: with the job's timeout of a millisecond
    // (`hpc run --timeout 0.001`) a rank's hello under load came too late, and its
    // connection was closed: the rank read "the launcher stopped?" where a late
    // hello is answered with the init's timeout, which names it.
    let hello_timeout = HELLO_TIMEOUT.min(timeout).max(MIN_HELLO_TIMEOUT);
    let mut pending: std::collections::VecDeque<Unauthenticated> = Default::default();
    let mut evicted = 0u64;
    let mut refused = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let wait = pending
            .iter()
            .map(|c| (c.since + hello_timeout).saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::MAX)
            .min(Duration::from_millis(200));
        let mut fds: Vec<PollFd> = std::iter::once(PollFd::new(&listener, PollFlags::IN))
            .chain(
                pending
                    .iter()
                    .map(|c| PollFd::new(&c.stream, PollFlags::IN)),
            )
            .collect();
        let wait = wait.max(Duration::from_millis(1));
        let timeout = rustix::event::Timespec {
            tv_sec: wait.as_secs() as i64,
            tv_nsec: i64::from(wait.subsec_nanos()),
        };
        if let Err(e) = rustix::event::poll(&mut fds, Some(&timeout)) {
            if e != rustix::io::Errno::INTR {
                tracing::error!(error = %e, "coordinator cannot poll its connections");
                std::thread::sleep(Duration::from_millis(50));
            }
            continue;
        }
        // Which descriptors spoke (or hung up); `fds` borrows `pending` and ends here.
        let ready: Vec<bool> = fds.iter().map(|f| !f.revents().is_empty()).collect();
        drop(fds);
        // Judge the connections that have something to say (or hung up).
        let mut keep = std::collections::VecDeque::with_capacity(pending.len());
        for (c, &spoke) in pending.drain(..).zip(&ready[1..]) {
            let mut c = c;
            if !spoke {
                if c.since.elapsed() >= hello_timeout {
                    tracing::debug!(
                        peer = ?c.stream.peer_addr().ok(),
                        "coordinator closed a connection that did not authenticate in time"
                    );
                } else {
                    keep.push_back(c);
                }
                continue;
            }
            match advance(&mut c, size, secret) {
                Step::Wait => keep.push_back(c),
                Step::Drop(None) => {}
                Step::Drop(Some(why)) => {
                    refused += 1;
                    if refused <= MAX_REFUSALS_LOGGED {
                        tracing::warn!("coordinator refused a connection: {why}");
                    }
                    if refused == MAX_REFUSALS_LOGGED {
                        tracing::warn!(
                            "the coordinator refused {MAX_REFUSALS_LOGGED} connections; \
                             the next are not logged"
                        );
                    }
                }
                Step::Hello(rank, node, pid, rest) => {
                    let tx = tx.clone();
                    let spawned = std::thread::Builder::new()
                        .name("hpc-coord-conn".into())
                        .spawn(move || serve_rank(c.stream, rest, rank, node, pid, tx));
                    if spawned.is_err() {
                        tracing::error!(rank, "coordinator cannot spawn a connection thread");
                    }
                }
            }
        }
        pending = keep;
        // New connections.
        if ready[0] {
            loop {
                match listener.accept() {
                    Ok((stream, _)) => {
                        if stream.set_nonblocking(true).is_err() {
                            continue;
                        }
                        if pending.len() >= MAX_PENDING {
                            pending.pop_front();
                            evicted += 1;
                            if evicted == 1 {
                                tracing::warn!(
                                    "more than {MAX_PENDING} connections to the coordinator \
                                     have not authenticated; closing the oldest"
                                );
                            }
                        }
                        pending.push_back(Unauthenticated {
                            stream,
                            buf: Vec::new(),
                            since: Instant::now(),
                        });
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        // Out of descriptors, for instance: back off, do not spin.
                        tracing::warn!(error = %e, "coordinator cannot accept a connection");
                        std::thread::sleep(Duration::from_millis(20));
                        break;
                    }
                }
            }
        }
    }
}

/// Reads an authenticated rank's messages until it says goodbye or its connection ends.
fn serve_rank(
    stream: TcpStream,
    rest: Vec<u8>,
    rank: usize,
    node: String,
    pid: u32,
    tx: Sender<Event>,
) {
    use std::io::Read;
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    let _ = stream.set_nodelay(true);
    let Ok(reader) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(std::io::Cursor::new(rest).chain(reader));
    let (verdict, taken) = std::sync::mpsc::channel();
    if tx
        .send(Event::Joined {
            rank,
            node,
            pid,
            stream,
            verdict,
        })
        .is_err()
    {
        return;
    }
    if taken.recv() != Ok(true) {
        return;
    }
    loop {
        match read_msg(&mut reader) {
            Ok(msg) => {
                let bye = msg == Msg::Goodbye;
                if tx.send(Event::Msg { rank, msg }).is_err() || bye {
                    return;
                }
            }
            Err(ReadError::Io(e)) => {
                let error = if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    None
                } else {
                    Some(e.to_string())
                };
                let _ = tx.send(Event::Closed { rank, error });
                return;
            }
            Err(ReadError::Protocol(e)) => {
                let _ = tx.send(Event::Closed {
                    rank,
                    error: Some(e.to_string()),
                });
                return;
            }
        }
    }
}

/// The least time [`write_within`] is given for a message to a rank.
const MIN_WRITE_LIMIT: Duration = Duration::from_millis(10);

/// Writes `msg` to a rank's connection within `limit`, or fails. A rank that stops
/// reading (stopped, or stuck outside the runtime) must not stop the coordinator,
/// which serves every rank from one thread: half the job timeout leaves it time to
/// answer the other ranks' next collective with a timeout that names that rank,
/// before their own guard gives up on the coordinator.
fn write_within(s: &mut TcpStream, msg: &Msg, limit: Duration) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind, Write};
    let frame = frame(msg).map_err(|e| Error::new(ErrorKind::InvalidInput, e))?;
    let deadline = Instant::now() + limit;
    let mut done = 0;
    while done < frame.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        // A zero timeout means none to the socket: stop before that. (Stopping below
        // a millisecond failed every write of a job whose timeout is under 2 ms,
        // which `hpc run --timeout 0.001` accepts: each rank's init then read "the
        // launcher stopped?"; the socket takes any timeout above zero.)
        if left.is_zero() {
            return Err(Error::new(
                ErrorKind::TimedOut,
                format!(
                    "{done} of {} bytes written in {limit:?}: the rank does not read",
                    frame.len()
                ),
            ));
        }
        s.set_write_timeout(Some(left))?;
        match s.write(&frame[done..]) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // The socket's timeout: the deadline check above names it.
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

struct Pending {
    op: Op,
    first: Op,
    first_rank: usize,
    parts: Vec<Option<Vec<u8>>>,
    arrived: usize,
    deadline: Instant,
}

#[derive(Clone)]
enum Gone {
    /// Finalized (said goodbye) or exited with code 0.
    Clean(String),
    /// Failed: non-zero exit, signal, broken connection (the cause is in `aborted`).
    Failed,
}

struct State {
    size: usize,
    timeout: Duration,
    started: Instant,
    conns: Vec<Option<TcpStream>>,
    nodes: Vec<Option<String>>,
    joined: usize,
    welcomed: bool,
    init_failed: bool,
    /// The ranks that had not joined when the wait for them ended: what
    /// every rank that joins later is told it waited for.
    init_missing: Vec<u32>,
    gone: Vec<Option<Gone>>,
    /// Ranks whose connection closed unexpectedly, awaiting an exit status.
    closing: HashMap<usize, (Instant, Option<String>)>,
    aborted: Option<(usize, String)>,
    pending: BTreeMap<u64, Pending>,
}

impl State {
    /// The records of `size` ranks, or an error where this machine cannot
    /// hold them.
    fn new(size: usize, timeout: Duration) -> Result<State> {
        fn none<T>(size: usize) -> Option<Vec<Option<T>>> {
            let mut v = Vec::new();
            v.try_reserve_exact(size).ok()?;
            v.resize_with(size, || None);
            Some(v)
        }
        let per_rank = std::mem::size_of::<Option<TcpStream>>()
            + std::mem::size_of::<Option<String>>()
            + std::mem::size_of::<Option<Gone>>();
        let refused = || {
            Error::InvalidArgument(format!(
                "a job of {size} ranks: the coordinator cannot hold their records \
                 ({per_rank} bytes a rank) in this machine's memory"
            ))
        };
        // A reservation the kernel grants on credit (overcommit) is still
        // written whole here: bounded by the machine's memory first.
        let info = rustix::system::sysinfo();
        // `c_ulong`: 32 bits on some targets.
        #[allow(clippy::useless_conversion)]
        let ram = u64::from(info.totalram).saturating_mul(u64::from(info.mem_unit));
        if (size as u64).saturating_mul(per_rank as u64) > ram {
            return Err(refused());
        }
        let (Some(conns), Some(nodes), Some(gone)) = (none(size), none(size), none(size)) else {
            return Err(refused());
        };
        Ok(State {
            size,
            timeout,
            started: Instant::now(),
            conns,
            nodes,
            joined: 0,
            welcomed: false,
            init_failed: false,
            init_missing: Vec::new(),
            gone,
            closing: HashMap::new(),
            aborted: None,
            pending: BTreeMap::new(),
        })
    }

    fn send(&mut self, rank: usize, msg: &Msg) {
        if let Some(s) = self.conns[rank].as_mut() {
            // At least `MIN_WRITE_LIMIT`: half of a timeout of a millisecond or
            // two (`hpc run --timeout 0.001`) was over before a write under load.
            if let Err(e) = write_within(s, msg, (self.timeout / 2).max(MIN_WRITE_LIMIT)) {
                tracing::warn!(
                    rank,
                    error = %e,
                    "coordinator cannot write to rank; it gets nothing more from the coordinator"
                );
                // The message may be cut short: end the stream, so that the rank
                // reads an end instead of waiting for the rest of it.
                let _ = s.shutdown(std::net::Shutdown::Write);
                self.conns[rank] = None;
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let mut d: Option<Instant> = None;
        let mut consider = |t: Instant| d = Some(d.map_or(t, |x| x.min(t)));
        if !self.welcomed && !self.init_failed {
            consider(self.started + self.timeout);
        }
        for p in self.pending.values() {
            consider(p.deadline);
        }
        for (t, _) in self.closing.values() {
            consider(*t);
        }
        d
    }

    fn run(mut self, rx: Receiver<Event>) {
        loop {
            let ev = match self.next_deadline() {
                Some(d) => match rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
                    Ok(ev) => Some(ev),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return,
                },
                None => match rx.recv() {
                    Ok(ev) => Some(ev),
                    Err(_) => return,
                },
            };
            match ev {
                Some(Event::Shutdown) => {
                    for c in self.conns.iter().flatten() {
                        let _ = c.shutdown(std::net::Shutdown::Both);
                    }
                    return;
                }
                Some(ev) => self.handle(ev),
                None => {}
            }
            self.check_deadlines();
        }
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Joined {
                rank,
                node,
                pid,
                mut stream,
                verdict,
            } => {
                if self.conns[rank].is_some() || self.nodes[rank].is_some() {
                    tracing::warn!(rank, "rank joined twice; refusing the second connection");
                    // It proved the job's secret: it is told why, at once, and
                    // its connection ends (it waited for the init's timeout,
                    // and its end was taken for the first one's).
                    let msg = Msg::Mismatch {
                        detail: format!(
                            "another process of this job joined as rank {rank} first: two \
                             processes were given {}={rank} (set by hand, or a rank \
                             started twice)",
                            crate::env::RANK
                        ),
                    };
                    let _ =
                        write_within(&mut stream, &msg, (self.timeout / 2).max(MIN_WRITE_LIMIT));
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                    let _ = verdict.send(false);
                    return;
                }
                let _ = verdict.send(true);
                tracing::debug!(rank, %node, pid, "rank joined");
                self.conns[rank] = Some(stream);
                self.nodes[rank] = Some(node);
                self.joined += 1;
                if self.tell_aborted(rank) {
                    return;
                }
                // Those missing when the wait ended: counted now, the last
                // rank to join late was told "still waiting for rank(s)
                // (unknown)", every rank having joined by then.
                if self.init_failed {
                    self.send(rank, &self.init_timeout_msg(self.init_missing.clone()));
                    return;
                }
                if self.joined == self.size {
                    let nodes: Vec<String> = self
                        .nodes
                        .iter()
                        .map(|n| n.clone().unwrap_or_default())
                        .collect();
                    let msg = Msg::Welcome { nodes };
                    for r in 0..self.size {
                        self.send(r, &msg);
                    }
                    self.welcomed = true;
                    tracing::debug!(after = ?self.started.elapsed(), "all ranks joined");
                }
            }
            Event::Msg { rank, msg } => match msg {
                Msg::Goodbye => {
                    self.gone[rank] = Some(Gone::Clean(format!("rank {rank} finalized")));
                    self.conns[rank] = None;
                    self.fail_pending_needing(rank);
                }
                Msg::Contribute { seq, op, data } => self.contribute(rank, seq, op, data),
                other => tracing::warn!(rank, ?other, "unexpected message from rank"),
            },
            Event::Closed { rank, error } => {
                self.conns[rank] = None;
                if self.gone[rank].is_none() {
                    self.closing
                        .insert(rank, (Instant::now() + EXIT_GRACE, error));
                }
            }
            Event::Exited {
                rank,
                cause,
                success,
            } => {
                if rank >= self.size {
                    return;
                }
                self.closing.remove(&rank);
                match (&self.gone[rank], success) {
                    (Some(Gone::Clean(_)), true) => {}
                    (_, true) => {
                        self.gone[rank] = Some(Gone::Clean(cause));
                        self.fail_pending_needing(rank);
                    }
                    (_, false) => self.abort(rank, cause),
                }
            }
            Event::Shutdown => {}
        }
    }

    fn abort(&mut self, rank: usize, cause: String) {
        self.gone[rank] = Some(Gone::Failed);
        if self.aborted.is_some() {
            return;
        }
        tracing::debug!(rank, %cause, "rank lost; aborting the job's collectives");
        self.aborted = Some((rank, cause.clone()));
        self.pending.clear();
        let msg = Msg::Abort {
            rank: rank as u32,
            cause,
        };
        for r in 0..self.size {
            if r != rank {
                self.send(r, &msg);
            }
        }
    }

    /// A rank left cleanly: collectives that still wait for it can never finish.
    fn fail_pending_needing(&mut self, gone: usize) {
        let Some(Gone::Clean(cause)) = self.gone[gone].clone() else {
            return;
        };
        let seqs: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.parts[gone].is_none())
            .map(|(s, _)| *s)
            .collect();
        for seq in seqs {
            if let Some(p) = self.pending.remove(&seq) {
                let msg = Msg::Abort {
                    rank: gone as u32,
                    cause: format!("{cause} before joining {}", p.op.name()),
                };
                for r in 0..self.size {
                    if p.parts[r].is_some() {
                        self.send(r, &msg);
                    }
                }
            }
        }
    }

    /// Once the job aborted, tells `rank` why (the rank that failed and its
    /// cause) and returns `true`: nothing it sends is taken any more.
    fn tell_aborted(&mut self, rank: usize) -> bool {
        let Some((r, cause)) = self.aborted.clone() else {
            return false;
        };
        self.send(
            rank,
            &Msg::Abort {
                rank: r as u32,
                cause,
            },
        );
        true
    }

    fn contribute(&mut self, rank: usize, seq: u64, op: Op, data: Vec<u8>) {
        if self.tell_aborted(rank) {
            return;
        }
        // A clean-gone rank that this collective needs.
        if let Some(g) = (0..self.size).find(|&r| matches!(self.gone[r], Some(Gone::Clean(_)))) {
            if let Some(Gone::Clean(cause)) = self.gone[g].clone() {
                self.send(
                    rank,
                    &Msg::Abort {
                        rank: g as u32,
                        cause: format!("{cause} before joining {}", op.name()),
                    },
                );
                return;
            }
        }
        let size = self.size;
        let timeout = self.timeout;
        let p = self.pending.entry(seq).or_insert_with(|| Pending {
            op,
            first: op,
            first_rank: rank,
            parts: vec![None; size],
            arrived: 0,
            deadline: Instant::now() + timeout,
        });
        if p.first != op {
            let detail = format!(
                "collective #{seq}: rank {} called {} but rank {rank} called {}",
                p.first_rank,
                p.first.name(),
                op.name()
            );
            let parts = self
                .pending
                .remove(&seq)
                .map(|p| p.parts)
                .unwrap_or_default();
            let msg = Msg::Mismatch { detail };
            for (r, part) in parts.iter().enumerate() {
                if part.is_some() {
                    self.send(r, &msg);
                }
            }
            self.send(rank, &msg);
            return;
        }
        if p.parts[rank].is_some() {
            let msg = Msg::Mismatch {
                detail: format!("rank {rank} contributed twice to collective #{seq}"),
            };
            self.send(rank, &msg);
            return;
        }
        p.parts[rank] = Some(data);
        p.arrived += 1;
        if p.arrived < size {
            return;
        }
        let Some(p) = self.pending.remove(&seq) else {
            return;
        };
        let parts: Vec<Vec<u8>> = match p.op {
            Op::Allgather => p.parts.into_iter().map(|x| x.unwrap_or_default()).collect(),
            Op::Broadcast { root } => {
                vec![p
                    .parts
                    .into_iter()
                    .nth(root as usize)
                    .flatten()
                    .unwrap_or_default()]
            }
            Op::Barrier => Vec::new(),
        };
        let bytes = crate::wire::result_bytes(parts.iter().map(Vec::as_slice));
        let msg = if bytes > crate::wire::MAX_FRAME {
            Msg::Mismatch {
                detail: format!(
                    "collective #{seq} ({}): its result of {bytes} bytes is more than the {} \
                     bytes a frame of the launcher carries (its collectives are for endpoints \
                     and small data; bulk data goes through hpc-comm)",
                    op.name(),
                    crate::wire::MAX_FRAME
                ),
            }
        } else {
            Msg::Result { seq, parts }
        };
        for r in 0..size {
            self.send(r, &msg);
        }
    }

    fn missing_joins(&self) -> Vec<u32> {
        (0..self.size)
            .filter(|&r| self.nodes[r].is_none())
            .map(|r| r as u32)
            .collect()
    }

    fn init_timeout_msg(&self, missing: Vec<u32>) -> Msg {
        Msg::Timeout {
            op: "init (waiting for all ranks to join)".into(),
            after_ms: self.timeout.as_millis() as u64,
            missing,
        }
    }

    fn check_deadlines(&mut self) {
        let now = Instant::now();
        if !self.welcomed && !self.init_failed && now >= self.started + self.timeout {
            self.init_failed = true;
            let missing = self.missing_joins();
            self.init_missing = missing.clone();
            tracing::debug!(?missing, "ranks never joined");
            let msg = self.init_timeout_msg(missing);
            for r in 0..self.size {
                self.send(r, &msg);
            }
        }
        let expired: Vec<usize> = self
            .closing
            .iter()
            .filter(|(_, (t, _))| *t <= now)
            .map(|(r, _)| *r)
            .collect();
        for rank in expired {
            if let Some((_, err)) = self.closing.remove(&rank) {
                let cause = match err {
                    Some(e) => format!("its connection to the launcher failed ({e})"),
                    None => "its connection closed without finalizing (process gone?)".into(),
                };
                self.abort(rank, cause);
            }
        }
        let late: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(s, _)| *s)
            .collect();
        for seq in late {
            if let Some(p) = self.pending.remove(&seq) {
                let missing: Vec<u32> = (0..self.size)
                    .filter(|&r| p.parts[r].is_none())
                    .map(|r| r as u32)
                    .collect();
                let msg = Msg::Timeout {
                    op: p.op.name(),
                    after_ms: self.timeout.as_millis() as u64,
                    missing,
                };
                for r in 0..self.size {
                    if p.parts[r].is_some() {
                        self.send(r, &msg);
                    }
                }
            }
        }
    }
}
