//! A rank's side of the proxy: starting the proxy process, posting
//! collectives, taking answers, cancelling.

use std::collections::VecDeque;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hpc_collectives::Options;

use crate::job::{Job, Stage};
use crate::proxy::ProxyClient;
#[cfg(not(loom))]
use hpc_board::backoff::YIELD_FOR;
use hpc_board::board::{self, Board, Desc};
use hpc_board::sig::Sig;
use hpc_board::sync::lock;
use hpc_board::{Error, Result};
use hpc_proxy::protocol::{Blob, Code, Kind, PROXY_CMD};
use hpc_proxy::{Outcome, Sizes};

/// How long a rank whose wait timed out waits for its proxy to say which
/// ranks' parts it has not received.
pub(super) const ASK_FOR: Duration = Duration::from_millis(500);

/// A collective posted to the proxy.
pub(crate) struct Pending {
    pub(super) seq: u64,
    /// Its collective's signature (what the proxy's answer of a
    /// disagreement names as this rank's).
    sig: Sig,
    _blob: Vec<u8>,
    stage: Option<Stage>,
    direct: bool,
    finished: std::sync::atomic::AtomicBool,
}

impl ClientState {
    fn has_done(&self, seq: u64) -> bool {
        self.done.iter().any(|d| d.0 == seq)
    }

    /// Takes the answer to collective `seq`: (code, aux, the `SIZES`
    /// that came before it, if any).
    fn take_done(&mut self, seq: u64) -> Option<(u64, u64, Option<Desc>)> {
        let i = self.done.iter().position(|d| d.0 == seq)?;
        let (_, code, aux) = self.done.swap_remove(i);
        let sizes = self
            .sizes
            .iter()
            .position(|d| d.tag == seq)
            .map(|i| self.sizes.swap_remove(i));
        Some((code, aux, sizes))
    }
}

#[derive(Default)]
struct ClientState {
    /// Answers not yet taken: (seq, code, aux). A few at most: a short list
    /// beats hashing on the path of every collective.
    done: Vec<(u64, u64, u64)>,
    /// The sizes of mismatches (`SIZES`), each taken with the answer that
    /// follows it.
    sizes: Vec<Desc>,
    cancelled: Vec<u64>,
    outq: VecDeque<Desc>,
    /// The proxy's answers to `ASK`s: (seq, a rank whose part has not come).
    waiting: Vec<(u64, usize)>,
    /// The collectives whose `ASK` the proxy answered in full.
    asked: Vec<u64>,
}

/// A rank's connection to its node's proxy.
pub(crate) struct Client {
    board: Arc<Board>,
    me: usize,
    proxy: usize,
    world: Vec<usize>,
    opts: Options,
    timeout: Duration,
    spin: Duration,
    /// Make the first round's copies between the rank's own buffers here,
    /// when posting, rather than in the proxy (see [`Client::start`]).
    own_copies: bool,
    state: Mutex<ClientState>,
    /// Set once the proxy was found dead: later submits fail at once.
    proxy_gone: std::sync::atomic::AtomicBool,
    /// Set once this rank told the proxy it is gone.
    detached: std::sync::atomic::AtomicBool,
    /// The set-up link to the proxy this rank started for a communicator that
    /// spans nodes (taken by [`Client::take_link`]).
    link: Mutex<Option<std::os::unix::net::UnixStream>>,
    /// A pidfd of the proxy, opened at the first liveness check (`None` inside:
    /// none could be opened; `/proc` is read instead). See [`Client::proxy_dead`].
    pidfd: std::sync::OnceLock<Option<std::os::fd::OwnedFd>>,
}

/// How often a waiting rank asks the kernel whether the proxy still lives
/// (reading `/proc/PID/stat` costs several microseconds, as much as a small
/// collective, so not on every pass), and so the longest it sleeps on its
/// doorbell at a time: a dead proxy rings nothing.
const LIVENESS_EVERY: Duration = Duration::from_millis(5);

/// The command that starts a proxy process, in either placement: `HPC_COLL_PROXY_CMD`,
/// else the application itself (which calls `serve_env` first thing in `main`).
/// Its standard input is closed, and it runs in a process group of its own: the
/// proxy serves every rank of the communicator, so it must outlive the rank that
/// starts it. A launcher that cleans up after a rank by killing the rank's group
/// (hpc run does) would otherwise take it along when that rank finishes first,
/// and the others' collectives would fail. It exits by itself once every rank
/// has detached or died. The launcher's `HPC_*` variables go, but for
/// `HPC_COLL_PROXY_CMD` and those in `keep`: should the program not serve as
/// the proxy, it must not join the job.
pub(super) fn proxy_command(keep: &[&str]) -> Command {
    let mut c = match std::env::var(PROXY_CMD) {
        Ok(cmd) => {
            let mut parts = cmd.split_whitespace();
            let mut c = Command::new(parts.next().unwrap_or("hpc"));
            c.args(parts);
            c
        }
        Err(_) => {
            let exe = std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into());
            let mut c = Command::new(exe);
            c.args(std::env::args_os().skip(1));
            c
        }
    };
    c.stdin(std::process::Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut c, 0);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("HPC_")
            && k != PROXY_CMD
            && !keep.iter().any(|&n| k == n)
        {
            c.env_remove(&k);
        }
    }
    c
}

/// Refuses to start a proxy from a process that was started to be one (`var`
/// is set) but went on as an application: starting a proxy of its own would
/// recurse.
pub(super) fn refuse_recursion(var: &str) -> Result<()> {
    if std::env::var_os(var).is_none() {
        return Ok(());
    }
    Err(Error::Unsupported(
        "this process was started as a collectives proxy but did not call \
         hpc_rs::init() or hpc_comm::proxy::serve_env(); call one \
         first thing in main, or run the job with `hpc run --proxy`"
            .into(),
    ))
}

/// What a rank says of a proxy process that `did` (exited, or did not start)
/// without serving.
pub(super) fn did_not_serve(did: &str) -> String {
    format!(
        "the proxy process {did}: call hpc_rs::init() or hpc_comm::proxy::serve_env() \
         first thing in main, run the job with `hpc run --proxy`, or set {} to a \
         program that serves",
        hpc_runtime::env::COLL_PROXY_CMD
    )
}

impl Client {
    /// The client of a communicator whose members' world ranks are `world`:
    /// the proxy's answers name a member by its rank in the communicator, a
    /// rank's error by its rank in the world, as every engine's errors do
    /// (without it the host proxy's named the communicator's: another rank
    /// than the other engines' in a split communicator).
    pub(crate) fn with_world(mut self, world: Vec<usize>) -> Client {
        self.world = world;
        self
    }

    /// Called by every rank while the board file still exists; the node's
    /// first rank (`starter`) starts the proxy and waits until it mapped the
    /// board. With `net` (a communicator that spans nodes) the proxy gets a
    /// set-up link ([`attach`](hpc_proxy::attach)), for
    /// [`Client::take_link`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        board: Arc<Board>,
        me: usize,
        size: usize,
        opts: &Options,
        timeout: Duration,
        spin: Duration,
        own_copies: bool,
        (starter, net): (bool, bool),
    ) -> Result<Client> {
        let mut link = None;
        // A bad cap would only be seen by the proxy: refuse it here, by name.
        hpc_proxy::max_scratch().map_err(Error::Unsupported)?;
        if starter {
            refuse_recursion(hpc_runtime::env::COLL_PROXY_BOARD)?;
            // What chooses and addresses the network between proxies stays, and
            // the proxy records its timeline beside the ranks', as a process of
            // their job (the merge refuses a proxy's file of another job).
            let mut cmd = proxy_command(&[
                hpc_runtime::env::COLL_PROXY_MAX_SCRATCH,
                hpc_runtime::env::TRANSPORT,
                hpc_runtime::env::OFI_PROVIDER,
                hpc_runtime::env::TCP_ADDR,
                hpc_runtime::env::TRACE,
                hpc_runtime::env::JOB_ID,
            ]);
            if net {
                link = Some(hpc_proxy::attach(&mut cmd)?);
            }
            cmd.env(hpc_runtime::env::COLL_PROXY_BOARD, board.path())
                .env(hpc_runtime::env::COLL_PROXY_SLOTS, (size + 1).to_string())
                .env(
                    hpc_runtime::env::COLL_PROXY_SPIN_US,
                    spin.as_micros().to_string(),
                );
            let mut child = cmd
                .spawn()
                .map_err(|e| Error::transport_from(super::starting_the_proxy(&cmd), e))?;
            let t0 = Instant::now();
            // Half the communicator's timeout, and never more than 10 s: the
            // other ranks wait for this one the whole timeout, and with the
            // whole of it here they gave up first ("allgather timed out after
            // 3s: still waiting for rank(s) 0"), the launcher stopped this
            // rank, and no line named the proxy.
            let limit = (timeout / 2).min(Duration::from_secs(10));
            while board.pid(size) == 0 {
                let exited = matches!(child.try_wait(), Ok(Some(_)));
                if exited || t0.elapsed() > limit {
                    let _ = child.kill();
                    let status = child.wait();
                    let how = match (exited, status) {
                        (true, Ok(st)) => format!("exited ({st}) without serving"),
                        // The limit waited for: a communicator's timeout below
                        // 10 s was said as 10 s.
                        _ => format!(
                            "did not start serving within {limit:?} (half the \
                             communicator's timeout, at most 10 s)"
                        ),
                    };
                    return Err(Error::Unsupported(did_not_serve(&how)));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            // Reap it in the background so that it never lingers as a zombie.
            std::thread::spawn(move || {
                let _ = child.wait();
            });
        }
        Ok(Client {
            board,
            me,
            proxy: size,
            world: (0..size).collect(),
            opts: *opts,
            timeout,
            spin,
            own_copies,
            state: Mutex::new(ClientState::default()),
            proxy_gone: false.into(),
            detached: false.into(),
            link: Mutex::new(link),
            pidfd: std::sync::OnceLock::new(),
        })
    }

    /// The set-up link to the proxy, on the rank that started it for a
    /// communicator that spans nodes (once).
    pub(crate) fn take_link(&self) -> Option<std::os::unix::net::UnixStream> {
        lock(&self.link).take()
    }

    fn push(&self, st: &mut ClientState, d: Desc) {
        st.outq.push_back(d);
        while let Some(d) = st.outq.front().copied() {
            if !self.board.push(self.me, self.proxy, d) {
                break;
            }
            st.outq.pop_front();
        }
        self.board.ring(self.proxy);
    }

    fn drain(&self, st: &mut ClientState) {
        while let Some(d) = self.board.pop(self.proxy, self.me) {
            match Kind::from_wire(d.kind) {
                Some(Kind::Done) => {
                    st.done.push((d.tag, d.addr, d.len));
                }
                Some(Kind::Sizes) => {
                    st.sizes.push(d);
                }
                Some(Kind::Cancelled) => {
                    st.cancelled.push(d.tag);
                }
                Some(Kind::Waiting) => {
                    st.waiting.push((d.tag, d.addr as usize));
                }
                Some(Kind::Asked) => {
                    st.asked.push(d.tag);
                }
                _ => {}
            }
        }
        if !st.outq.is_empty() {
            let d = st.outq.pop_front().expect("not empty");
            self.push(st, d);
        }
    }

    /// Takes the proxy's answers and pushes descriptors that found the ring
    /// to the proxy full (as `poll` and `wait` do), while the rank waits for
    /// something else.
    pub(crate) fn flush(&self) {
        self.drain(&mut lock(&self.state));
    }

    /// The answer to `p`, if the proxy gave it: the collective's result.
    fn answer(&self, p: &Pending, out: Option<&mut [u8]>) -> Option<Result<()>> {
        let (code, aux, sizes) = {
            let mut st = lock(&self.state);
            self.drain(&mut st);
            st.take_done(p.seq)?
        };
        p.finished.store(true, Ordering::Release);
        let o = Outcome::from_wire(Code::from_wire(code), aux, String::new())
            .with_sizes(sizes.map(|d| Sizes::from_desc(&d, aux as usize)))
            .read_by(self.me);
        if o == Outcome::Done {
            if let Some(stage) = &p.stage {
                stage.deliver(out);
            }
        }
        Some(o.into_result(p.seq, "the proxy", &self.world, p.sig))
    }

    /// The world's ranks whose parts of collective `seq` the proxy has not
    /// received, as it answers an `ASK` within [`ASK_FOR`] (empty where it
    /// does not: a proxy that is gone or stuck names nobody).
    fn waiting_for(&self, seq: u64) -> Vec<usize> {
        if self.proxy_gone.load(Ordering::Acquire) {
            return Vec::new();
        }
        self.push(&mut lock(&self.state), Kind::Ask.desc(seq, 0, 0));
        let t0 = Instant::now();
        loop {
            {
                let mut st = lock(&self.state);
                self.drain(&mut st);
                if let Some(i) = st.asked.iter().position(|&s| s == seq) {
                    st.asked.swap_remove(i);
                    let mut ranks = Vec::new();
                    st.waiting.retain(|&(s, r)| {
                        if s == seq {
                            ranks.push(self.world.get(r).copied().unwrap_or(r));
                        }
                        s != seq
                    });
                    return ranks;
                }
            }
            if t0.elapsed() > ASK_FOR {
                tracing::debug!(seq, "proxy: no answer to which ranks it waits for");
                // A late answer must not stay in the lists.
                let mut st = lock(&self.state);
                st.waiting.retain(|&(s, _)| s != seq);
                return Vec::new();
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Whether the proxy process is gone: a non-blocking `poll` of its pidfd
    /// (readable once it has exited, reaped or not), a system call of well
    /// under a microsecond where a read of `/proc/PID/stat` costs several,
    /// paid by a waiting rank at every [`LIVENESS_EVERY`]; `/proc` where no
    /// pidfd could be opened (an old kernel, a filter).
    fn proxy_dead(&self) -> bool {
        let pid = self.board.pid(self.proxy);
        if pid == 0 {
            return false;
        }
        match self.pidfd.get_or_init(|| open_pidfd(pid)) {
            Some(fd) => {
                let mut p = libc::pollfd {
                    fd: std::os::fd::AsRawFd::as_raw_fd(fd),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd, a timeout of 0: poll only reads and
                // writes `p` and returns at once.
                let n = unsafe { libc::poll(&mut p, 1, 0) };
                n > 0 && p.revents & (libc::POLLIN | libc::POLLHUP) != 0
            }
            None => board::pid_dead(pid),
        }
    }
}

/// A pidfd for process `pid`, if the kernel gives one (`None` also when the
/// process is gone already: `/proc` then says so).
fn open_pidfd(pid: u32) -> Option<std::os::fd::OwnedFd> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = std::os::fd::RawFd::try_from(fd)
        .ok()
        .filter(|&fd| fd >= 0)?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Some(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

impl ProxyClient for Client {
    type Posted = Pending;

    fn submit(&self, mut job: Job<'_>) -> Result<Pending> {
        let (direct, seq) = (job.direct(), job.seq);
        let (coll, send, recv) = job.parts();
        let sig = Sig::of(coll);
        // Where the node has no core for the proxy, the rank's own block is
        // copied here, on the rank's core, in parallel with the other ranks,
        // instead of one after the other in the proxy.
        let own_copies = self.own_copies
            && coll
                .schedule(self.me, self.world.len(), &self.opts)
                .is_ok_and(|sched| sched.run_own_copies(send, recv));
        // Shared buffers the proxy maps where it works on the caller's buffers;
        // staged copies it reads through the kernel.
        let shm = |b: &[u8]| {
            if direct {
                hpc_board::shm::lookup(b.as_ptr(), b.len())
            } else {
                None
            }
        };
        let (sp, rp) = (send.as_ptr() as u64, recv.as_mut_ptr() as u64);
        let (send_shm, recv_shm) = (shm(send), shm(recv));
        let (send_len, recv_len) = (send.len(), recv.len());
        // Sized for the fixed collectives in one allocation; the v-variants grow it.
        let blob = postcard::to_extend(
            &Blob {
                coll,
                opts: self.opts,
                send: sp,
                send_len,
                recv: rp,
                recv_len,
                send_shm,
                recv_shm,
                own_copies,
            },
            Vec::with_capacity(128),
        )
        .map_err(|e| Error::transport_from("encoding a request to the proxy", e))?;
        let mut d = Kind::Submit.desc(seq, blob.as_ptr() as u64, blob.len() as u64);
        d.sig = sig.0;
        let mut st = lock(&self.state);
        // A proxy that died since is found by `wait` (within LIVENESS_EVERY).
        if self.proxy_gone.load(Ordering::Acquire) {
            return Err(Error::Stopped("proxy"));
        }
        self.push(&mut st, d);
        Ok(Pending {
            seq,
            sig,
            _blob: blob,
            stage: job.stage,
            direct,
            finished: false.into(),
        })
    }

    fn poll(&self, p: &Pending) -> bool {
        if p.finished.load(Ordering::Acquire) {
            return true;
        }
        let mut st = lock(&self.state);
        self.drain(&mut st);
        st.has_done(p.seq)
    }

    /// Waits for the proxy's answer to `p`: the collective's result.
    ///
    /// Where the node has a core for the proxy, a waiting rank polls its
    /// doorbell for its `spin`, then blocks in the kernel on the doorbell's
    /// futex until the proxy, answering, rings it (`SLEEP.md`, "A rank waiting
    /// for the proxy"). Where it has none (spin 0), the rank first yields its
    /// core to the proxy for up to [`YIELD_FOR`], so that a short collective's
    /// answer needs no wake-up, then blocks the same way. The futex wait is
    /// bounded by [`LIVENESS_EVERY`] only so that a dead proxy (which rings
    /// nothing) and the communicator's timeout are noticed.
    fn wait(&self, p: &Pending, mut out: Option<&mut [u8]>) -> Result<()> {
        // An answer that is there already costs no clock reading.
        if let Some(r) = self.answer(p, out.as_deref_mut()) {
            return r;
        }
        let t0 = Instant::now();
        let mut last_check = t0;
        loop {
            // Read before looking: a ring after this read moves the doorbell, and
            // the futex wait below then returns at once.
            let seen = self.board.doorbell(self.me).load(Ordering::SeqCst);
            if let Some(r) = self.answer(p, out.as_deref_mut()) {
                return r;
            }
            let now = Instant::now();
            // Not under loom: there the wall clock would decide whether the
            // board's atomics are read, and a model must be deterministic (the
            // models' proxy never dies).
            if !cfg!(loom) && now.duration_since(last_check) >= LIVENESS_EVERY {
                last_check = now;
                if self.proxy_dead() {
                    self.proxy_gone.store(true, Ordering::Release);
                }
            }
            if self.proxy_gone.load(Ordering::Acquire) {
                return Err(Error::Stopped("proxy"));
            }
            let waited = now.duration_since(t0);
            if waited > self.timeout {
                return Err(Error::Timeout {
                    after: self.timeout,
                    waiting_for: self.waiting_for(p.seq),
                });
            }
            // Where the node has no core for the proxy (spin 0), yield to it
            // for up to YIELD_FOR first: the proxy then runs on this core at
            // once and the answer needs no wake-up. Blocking at once made the
            // Proxy engine's pure time 1.1-1.6x longer at 1 MiB on 2 cores
            // (overlap table, alternated builds), for CPU the rank had no other
            // use for. Past YIELD_FOR the rank sleeps on its doorbell.
            #[cfg(not(loom))]
            if self.spin.is_zero() && waited < YIELD_FOR {
                if self.board.doorbell(self.me).load(Ordering::Acquire) == seen {
                    std::thread::yield_now();
                }
                continue;
            }
            let nap = LIVENESS_EVERY.min(self.timeout - waited);
            self.board
                .wait_ring(self.me, seen, self.spin.saturating_sub(waited), nap);
        }
    }

    /// Drops the answer to a finished `p` that nobody will take.
    fn discard(&self, p: &Pending) {
        if !p.finished.load(Ordering::Acquire) && lock(&self.state).take_done(p.seq).is_some() {
            p.finished.store(true, Ordering::Release);
        }
    }

    /// Makes sure the proxy no longer touches `p`'s buffers.
    fn cancel(&self, p: &Pending) {
        // An answer that came meanwhile is dropped with the collective: nothing
        // takes it later, and it must not stay in the list.
        if p.finished.load(Ordering::Acquire) || lock(&self.state).take_done(p.seq).is_some() {
            p.finished.store(true, Ordering::Release);
            return;
        }
        {
            let mut st = lock(&self.state);
            self.push(&mut st, Kind::Cancel.desc(p.seq, 0, 0));
        }
        let t0 = Instant::now();
        while t0.elapsed() < self.timeout {
            let mut st = lock(&self.state);
            self.drain(&mut st);
            let cancelled = st.cancelled.iter().position(|&s| s == p.seq);
            if let Some(i) = cancelled {
                st.cancelled.swap_remove(i);
            }
            if cancelled.is_some() || st.take_done(p.seq).is_some() {
                p.finished.store(true, Ordering::Release);
                return;
            }
            drop(st);
            if board::pid_dead(self.board.pid(self.proxy)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if p.direct {
            super::abort_unconfirmed_cancel("the proxy", self.timeout);
        }
    }

    /// Tells the proxy that this rank is gone (once; the proxy exits when every
    /// rank has detached or died).
    fn detach(&self) {
        if self.detached.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut st = lock(&self.state);
        self.push(&mut st, Kind::Detach.desc(0, 0, 0));
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.detach();
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // A staged collective the proxy may still write into: keep its memory.
        if let Some(stage) = self.stage.take() {
            std::mem::forget(stage);
        }
    }
}

#[cfg(test)]
/// A client that starts no proxy: rank `me` of `size`, no spin, no own
/// copies, on the host path.
fn non_starter(board: Arc<Board>, me: usize, size: usize, timeout: Duration) -> Client {
    Client::start(
        board,
        me,
        size,
        &Options::default(),
        timeout,
        Duration::ZERO,
        false,
        (false, false),
    )
    .unwrap()
}

#[cfg(test)]
/// Collective `seq` posted on the direct path, with nothing to keep.
fn posted(seq: u64) -> Pending {
    Pending {
        seq,
        sig: Sig::NONE,
        _blob: Vec::new(),
        stage: None,
        direct: true,
        finished: false.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_taken_once_and_dropped_with_their_collective() {
        let board = Arc::new(Board::unlinked("proxy-answers", 3));
        // Rank 1 of 2: starts no proxy.
        let c = non_starter(board, 1, 2, Duration::from_secs(5));
        let (a, b, d) = (posted(7), posted(8), posted(9));
        lock(&c.state).done.extend([
            (7, Code::Ok as u64, 0),
            (8, Code::Mismatch as u64, 0),
            (9, Code::Ok as u64, 0),
        ]);
        assert!(c.poll(&a) && c.poll(&b) && c.poll(&d));
        assert!(c.wait(&a, None).is_ok());
        assert!(matches!(
            c.wait(&b, None),
            Err(Error::CountMismatch { rank: 0, .. })
        ));
        // A mismatch whose sizes come before its answer, through the board
        // (seq, sender, receiver, bytes sent and expected): the error names
        // them, and both go with the answer; a rank whose own message was
        // refused is told of the rank that refused it.
        let mismatch = |seq: u64, sender: u64, receiver: u32, sent: u64, expected: u64| {
            let sizes = Desc {
                sig: receiver,
                ..Kind::Sizes.desc(seq, sent, expected)
            };
            let done = Kind::Done.desc(seq, Code::Mismatch as u64, sender);
            assert!(c.board.push(c.proxy, c.me, sizes) && c.board.push(c.proxy, c.me, done));
            match c.wait(&posted(seq), None) {
                Err(Error::CountMismatch { rank, detail }) => (rank, detail),
                res => panic!("{res:?}"),
            }
        };
        let told = |rank: usize, detail: &str| (rank, detail.to_string());
        assert_eq!(
            mismatch(10, 0, 1, 16, 8),
            told(0, "rank 0 sent 16 bytes where rank 1 expected 8")
        );
        assert_eq!(
            mismatch(11, 1, 0, 4, 12),
            told(0, "rank 1 sent 4 bytes where rank 0 expected 12")
        );
        assert!(lock(&c.state).sizes.is_empty());
        // Finished, never waited for: its answer goes with it.
        c.discard(&d);
        assert!(d.finished.load(Ordering::Acquire));
        assert!(lock(&c.state).done.is_empty());
        c.discard(&a);
        assert!(lock(&c.state).done.is_empty());
    }

    /// The proxy's death is seen through its pidfd, whether or not its parent
    /// has reaped it yet.
    #[test]
    fn a_dead_proxy_is_seen_through_its_pidfd() {
        let board = Arc::new(Board::unlinked("proxy-pidfd", 2));
        let c = non_starter(board.clone(), 0, 1, Duration::from_secs(5));
        assert!(!c.proxy_dead(), "no proxy published yet");
        let mut child = Command::new("sleep").arg("60").spawn().unwrap();
        board.set_pid(1, child.id());
        assert!(!c.proxy_dead());
        assert!(
            c.pidfd.get().is_some_and(Option::is_some),
            "a pidfd was opened"
        );
        child.kill().unwrap();
        // Not reaped yet: a zombie counts as dead.
        let t0 = Instant::now();
        while !c.proxy_dead() {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "the death was not seen"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        child.wait().unwrap();
        assert!(c.proxy_dead());
    }
}

/// Loom model of a rank waiting for the proxy's answer (the argument is in
/// `SLEEP.md`, "A rank waiting for the proxy"): the real [`Client::wait`], with
/// no spin, against a proxy thread that pushes the answer and rings. Loom's
/// futex has no timeout, so a lost wake-up is reported as a deadlock.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;

    #[test]
    fn loom_waiting_rank_is_woken_by_the_proxys_answer() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            // Rank 0 of 1; slot 1 is the proxy's (its pid stays 0: never found dead).
            let board = Arc::new(Board::in_memory(2));
            let c = non_starter(board.clone(), 0, 1, Duration::from_secs(3600));
            let p = posted(7);
            let proxy = board.clone();
            let t = loom::thread::spawn(move || {
                assert!(proxy.push(1, 0, Kind::Done.desc(7, Code::Ok as u64, 0)));
                proxy.ring(0);
            });
            assert!(c.wait(&p, None).is_ok());
            t.join().unwrap();
        });
    }
}
