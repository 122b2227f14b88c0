//! The `Proxy` engine: one progress process per node runs the schedules of
//! all local ranks — the role MVAPICH2-DPU gives to a BlueField's Arm cores.
//!
//! # Protocol
//!
//! The ranks and the proxy share the communicator's board (see
//! `board.rs`), with one extra slot for the proxy. A rank posts a collective
//! by pushing a `SUBMIT` descriptor on its ring to the proxy; the descriptor
//! points at a small `postcard`-encoded blob in the rank's memory (the
//! [`Collective`], the addresses and lengths of its send and receive
//! buffers). The proxy reads the blob with cross-memory attach
//! (`process_vm_readv`), builds the rank's schedule and runs it together with the other ranks' schedules, keeping
//! every scratch buffer in its own memory. A send from a rank's buffer is not
//! read when it is posted: the matching receive copies it straight to its
//! destination (`process_vm_readv` into scratch, or through a 128 KiB piece
//! of the proxy's cache and `process_vm_writev` into the receiver), and the
//! sender's round stays open until then, as a rendezvous send would. The
//! proxy then answers `DONE` (with an error code) on the ring to the rank,
//! ringing the rank's doorbell. The ranks' CPUs do nothing between post and
//! wait. After its last work the proxy polls its doorbell for the ranks'
//! spin time (nonzero only where the node has a core for it) before it
//! sleeps, so a busy loop of collectives pays no wake-up. Where the node has
//! no core for it, waiting ranks and the proxy (while collectives are in
//! flight) yield the CPU for up to a millisecond instead, so that each runs
//! as soon as the other waits.
//!
//! Buffers that are [`SharedBuf`](crate::SharedBuf)s the proxy maps into its
//! own memory (once, then kept: a registration cache) and copies with
//! `memcpy`, one copy per byte from rank to rank; see [`crate::shm`].
//!
//! # Starting it
//!
//! The first rank of the communicator starts the proxy when the
//! communicator is created, by running `HPC_COLL_PROXY_CMD` (split at
//! whitespace) if set (`hpc run --proxy` sets it to `hpc proxy`, pinned to
//! the node's progress cores), else the application's own executable, with
//! `HPC_COLL_PROXY_BOARD` and `HPC_COLL_PROXY_SLOTS` in its environment and
//! the launcher's `HPC_*` variables removed. A program that may use the
//! proxy engine therefore calls [`serve_env`] first thing in `main` (it
//! returns at once in a normal run):
//!
//! ```no_run
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     hpc_collectives::proxy::serve_env()?; // becomes the proxy when asked to
//!     let world = hpc_runtime::World::init()?;
//!     let comm = hpc_collectives::Comm::new(&world, hpc_collectives::Engine::Proxy)?;
//!     # let _ = comm;
//!     Ok(())
//! }
//! ```
//!
//! If the proxy does not publish its pid in time, creating the communicator
//! fails with a message saying this. The proxy exits when every rank
//! detached (dropped its communicator) or died.
//!
//! # On a DPU
//!
//! The proxy's only contact with the ranks is (1) a descriptor queue in
//! shared memory and (2) reading/writing their buffers. On a BlueField both
//! become verbs operations: the queue is a registered host buffer the DPU
//! polls with RDMA reads (or the host writes descriptors into DPU memory),
//! and buffer access is RDMA read/write with the ranks' memory keys
//! (exchanged once per buffer, cached like MVAPICH2-DPU's registration
//! cache), using cross-GVMI keys so the DPU can post on the host's behalf.
//! Doorbells become a completion-queue event. Inter-node messages would go
//! through `hpc-rdma`'s verbs transport from the DPU. None of that is done
//! here: this proxy serves one node, over cross-memory attach and the
//! memfds of [`SharedBuf`](crate::SharedBuf)s it maps (the host-side
//! counterpart of registered memory).
//!
//! What it lacks today: more than one node and more than one copying
//! thread. Between ordinary buffers, rank-to-rank bytes cross the proxy twice
//! (read, then write; a DPU does the same through its own DRAM), all on the
//! proxy's one core, so for large messages the proxy is bound by its copy
//! rate where the ranks of an MPI library copy in parallel, each once.
//! Between [`SharedBuf`](crate::SharedBuf)s each byte is copied once, by
//! `memcpy`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::board::{self, Board, Desc};
use crate::collective::{Collective, Options};
use crate::comm::{Error, Result};
use crate::engine::lock;
use crate::schedule::{own_copy, BufferId, Region, Schedule, Step};
use crate::shm::ShmRef;

const SUBMIT: u32 = 10;
const CANCEL: u32 = 11;
const DETACH: u32 = 12;
const DONE: u32 = 20;
const CANCELLED: u32 = 21;

const OK: u64 = 0;
const LOST: u64 = 1;
const MISMATCH: u64 = 2;
const FAILED: u64 = 3;

/// What a rank posts: the collective (owned in the proxy, borrowed by the
/// rank that encodes it), where its buffers are, and how to run it.
#[derive(Serialize, Deserialize)]
struct Blob<C = Collective> {
    coll: C,
    opts: Options,
    send: u64,
    send_len: usize,
    recv: u64,
    recv_len: usize,
    /// Where the send and receive buffers are [`SharedBuf`](crate::SharedBuf)s.
    send_shm: Option<ShmRef>,
    recv_shm: Option<ShmRef>,
    /// The rank made the first round's copies between its own buffers
    /// ([`own_copy`]) before it posted: the proxy skips them.
    own_copies: bool,
}

/// A collective posted to the proxy.
pub(crate) struct Pending {
    seq: u64,
    _blob: Vec<u8>,
    stage: Option<(Vec<u8>, Vec<u8>)>,
    direct: bool,
    finished: std::sync::atomic::AtomicBool,
}

impl ClientState {
    fn has_done(&self, seq: u64) -> bool {
        self.done.iter().any(|d| d.0 == seq)
    }

    /// Takes the answer to collective `seq`: (code, aux).
    fn take_done(&mut self, seq: u64) -> Option<(u64, u64)> {
        let i = self.done.iter().position(|d| d.0 == seq)?;
        let (_, code, aux) = self.done.swap_remove(i);
        Some((code, aux))
    }
}

#[derive(Default)]
struct ClientState {
    /// Answers not yet taken: (seq, code, aux). A few at most: a short list
    /// beats hashing on the path of every collective.
    done: Vec<(u64, u64, u64)>,
    cancelled: Vec<u64>,
    outq: VecDeque<Desc>,
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
}

/// How often a waiting rank asks the kernel whether the proxy still lives
/// (reading `/proc/PID/stat` costs several microseconds, as much as a small
/// collective, so not on every pass).
const LIVENESS_EVERY: Duration = Duration::from_millis(5);

/// How long a waiting rank, and the proxy with collectives in flight, yield
/// the core before they sleep, where the node has no core for the proxy
/// (spin 0). The proxy then runs on the cores of the waiting ranks: a rank
/// that yields hands its core to the proxy at once and sees the answer
/// without a wake-up of its own, where a rank asleep on the futex costs the
/// proxy a wake-up system call and itself a reschedule; the same holds the
/// other way round for the proxy waiting for the other ranks' posts. On 2
/// ranks and 2 cores, blocking 1 KiB collectives went from 93–153 µs to
/// 35–85 µs when the ranks yielded, and pure 1 KiB times from 15–41 µs to
/// 16–32 µs (allreduce 27–32 → 18–21) when the proxy yielded too. A
/// yielding process that nobody waits for costs the others a context switch
/// per time slice.
const YIELD_FOR: Duration = Duration::from_millis(1);

/// The variable naming the program a communicator's first rank starts as the proxy
/// (split at white space; `hpc run --proxy` sets it to `hpc proxy`).
pub const PROXY_CMD: &str = hpc_runtime::env::COLL_PROXY_CMD;

fn proxy_command() -> Command {
    if let Ok(cmd) = std::env::var(PROXY_CMD) {
        let mut parts = cmd.split_whitespace();
        let mut c = Command::new(parts.next().unwrap_or("hpc"));
        c.args(parts);
        return c;
    }
    // The application itself, which calls `serve_env` first thing in `main`.
    let mut c = Command::new(std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into()));
    c.args(std::env::args_os().skip(1));
    c
}

impl Client {
    /// Called by every rank while the board file still exists; rank 0 starts
    /// the proxy and waits until it mapped the board.
    pub(crate) fn start(
        board: Arc<Board>,
        me: usize,
        size: usize,
        opts: &Options,
        timeout: Duration,
        spin: Duration,
        own_copies: bool,
    ) -> Result<Client> {
        if me == 0 {
            if std::env::var_os(hpc_runtime::env::COLL_PROXY_BOARD).is_some() {
                // This process was started to be a proxy but went on as an application:
                // starting a proxy of its own would recurse.
                return Err(Error::Unsupported(
                    "this process was started as a collectives proxy but did not call \
                     hpc_rs::init() or hpc_collectives::proxy::serve_env(); call one \
                     first thing in main, or run the job with `hpc run --proxy`"
                        .into(),
                ));
            }
            let mut cmd = proxy_command();
            cmd.stdin(std::process::Stdio::null());
            // Its own process group: the proxy serves every rank of the communicator,
            // so it must outlive this one. A launcher that cleans up after a rank by
            // killing the rank's group (hpc run does) would otherwise take it along
            // when this rank finishes first, and the others' collectives would fail.
            // It exits by itself once every rank has detached or died.
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
            // Should the program not serve as the proxy, it must not join the job.
            for (k, _) in std::env::vars_os() {
                if k.to_string_lossy().starts_with("HPC_") && k != PROXY_CMD {
                    cmd.env_remove(&k);
                }
            }
            cmd.env(hpc_runtime::env::COLL_PROXY_BOARD, board.path())
                .env(hpc_runtime::env::COLL_PROXY_SLOTS, (size + 1).to_string())
                .env(
                    hpc_runtime::env::COLL_PROXY_SPIN_US,
                    spin.as_micros().to_string(),
                );
            let mut child = cmd
                .spawn()
                .map_err(|e| Error::Transport(format!("starting the proxy ({cmd:?}): {e}")))?;
            let t0 = Instant::now();
            while board.pid(size) == 0 {
                let exited = matches!(child.try_wait(), Ok(Some(_)));
                if exited || t0.elapsed() > timeout.min(Duration::from_secs(10)) {
                    let _ = child.kill();
                    let status = child.wait();
                    let how = match (exited, status) {
                        (true, Ok(st)) => format!("exited ({st}) without serving"),
                        _ => "did not start serving within 10 s".to_string(),
                    };
                    return Err(Error::Unsupported(format!(
                        "the proxy process {how}: call \
                         hpc_rs::init() or hpc_collectives::proxy::serve_env() first thing \
                         in main, run the \
                         job with `hpc run --proxy`, or set HPC_COLL_PROXY_CMD to a \
                         program that serves"
                    )));
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
        })
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
            match d.kind {
                DONE => {
                    st.done.push((d.tag, d.addr, d.len));
                }
                CANCELLED => {
                    st.cancelled.push(d.tag);
                }
                _ => {}
            }
        }
        if !st.outq.is_empty() {
            let d = st.outq.pop_front().expect("not empty");
            self.push(st, d);
        }
    }

    pub(crate) fn submit(
        &self,
        seq: u64,
        coll: &Collective,
        send: &[u8],
        recv: &mut [u8],
        direct: bool,
    ) -> Result<Pending> {
        let mut stage = (!direct).then(|| (send.to_vec(), recv.to_vec()));
        // Where the node has no core for the proxy, the rank's own block is
        // copied here, on the rank's core, in parallel with the other ranks,
        // instead of one after the other in the proxy.
        let own_copies = self.own_copies
            && coll
                .schedule(self.me, self.world.len(), &self.opts)
                .is_ok_and(|sched| match &mut stage {
                    Some((s, r)) => sched.run_own_copies(s, r),
                    None => sched.run_own_copies(send, recv),
                });
        // Shared buffers the proxy maps where it works on the caller's buffers;
        // staged copies it reads through the kernel.
        let shm = |b: &[u8]| {
            if direct {
                crate::shm::lookup(b.as_ptr(), b.len())
            } else {
                None
            }
        };
        let (sp, rp) = match &stage {
            Some((s, r)) => (s.as_ptr() as u64, r.as_ptr() as u64),
            None => (send.as_ptr() as u64, recv.as_mut_ptr() as u64),
        };
        // Sized for the fixed collectives in one allocation; the v-variants grow it.
        let blob = postcard::to_extend(
            &Blob {
                coll,
                opts: self.opts,
                send: sp,
                send_len: send.len(),
                recv: rp,
                recv_len: recv.len(),
                send_shm: shm(send),
                recv_shm: shm(recv),
                own_copies,
            },
            Vec::with_capacity(128),
        )
        .map_err(|e| Error::Transport(e.to_string()))?;
        let d = Desc {
            kind: SUBMIT,
            tag: seq,
            addr: blob.as_ptr() as u64,
            len: blob.len() as u64,
        };
        let mut st = lock(&self.state);
        // A proxy that died since is found by `wait` (within LIVENESS_EVERY).
        if self.proxy_gone.load(Ordering::Acquire) {
            return Err(Error::Stopped("proxy"));
        }
        self.push(&mut st, d);
        Ok(Pending {
            seq,
            _blob: blob,
            stage,
            direct,
            finished: false.into(),
        })
    }

    /// Takes the proxy's answers and pushes descriptors that found the ring
    /// to the proxy full (as `poll` and `wait` do), while the rank waits for
    /// something else.
    pub(crate) fn flush(&self) {
        self.drain(&mut lock(&self.state));
    }

    pub(crate) fn poll(&self, p: &Pending) -> bool {
        if p.finished.load(Ordering::Acquire) {
            return true;
        }
        let mut st = lock(&self.state);
        self.drain(&mut st);
        st.has_done(p.seq)
    }

    /// The answer to `p`, if the proxy gave it: the collective's result.
    fn answer(&self, p: &Pending, out: Option<&mut [u8]>) -> Option<Result<()>> {
        let (code, aux) = {
            let mut st = lock(&self.state);
            self.drain(&mut st);
            st.take_done(p.seq)?
        };
        p.finished.store(true, Ordering::Release);
        Some(match code {
            OK => {
                if let (Some(out), Some((_, r))) = (out, &p.stage) {
                    out.copy_from_slice(r);
                }
                Ok(())
            }
            LOST => Err(Error::RankLost {
                rank: self.world[aux as usize],
            }),
            MISMATCH => Err(Error::CountMismatch {
                rank: self.world[aux as usize],
                detail: "message sizes differ".into(),
            }),
            _ => Err(Error::Transport("the proxy failed the collective".into())),
        })
    }

    pub(crate) fn wait(&self, p: &Pending, mut out: Option<&mut [u8]>) -> Result<()> {
        // An answer that is there already costs no clock reading.
        if let Some(r) = self.answer(p, out.as_deref_mut()) {
            return r;
        }
        let t0 = Instant::now();
        let mut last_check = t0;
        loop {
            let seen = self.board.doorbell(self.me).load(Ordering::SeqCst);
            if let Some(r) = self.answer(p, out.as_deref_mut()) {
                return r;
            }
            if last_check.elapsed() >= LIVENESS_EVERY {
                last_check = Instant::now();
                if board::pid_dead(self.board.pid(self.proxy)) {
                    self.proxy_gone.store(true, Ordering::Release);
                }
            }
            if self.proxy_gone.load(Ordering::Acquire) {
                return Err(Error::Stopped("proxy"));
            }
            if t0.elapsed() > self.timeout {
                return Err(Error::Timeout {
                    after: self.timeout,
                    waiting_for: Vec::new(),
                });
            }
            if self.spin.is_zero() && t0.elapsed() < YIELD_FOR {
                if self.board.doorbell(self.me).load(Ordering::Acquire) == seen {
                    std::thread::yield_now();
                }
                continue;
            }
            self.board
                .wait_ring(self.me, seen, self.spin, Duration::from_millis(10));
        }
    }

    /// Drops the answer to a finished `p` that nobody will take.
    pub(crate) fn discard(&self, p: &Pending) {
        if !p.finished.load(Ordering::Acquire) && lock(&self.state).take_done(p.seq).is_some() {
            p.finished.store(true, Ordering::Release);
        }
    }

    /// Makes sure the proxy no longer touches `p`'s buffers.
    pub(crate) fn cancel(&self, p: &Pending) {
        // An answer that came meanwhile is dropped with the collective: nothing
        // takes it later, and it must not stay in the list.
        if p.finished.load(Ordering::Acquire) || lock(&self.state).take_done(p.seq).is_some() {
            p.finished.store(true, Ordering::Release);
            return;
        }
        {
            let mut st = lock(&self.state);
            self.push(
                &mut st,
                Desc {
                    kind: CANCEL,
                    tag: p.seq,
                    addr: 0,
                    len: 0,
                },
            );
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
            eprintln!("hpc-collectives: the proxy did not confirm a cancellation; aborting rather than risk writes into freed memory");
            std::process::abort();
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let mut st = lock(&self.state);
        self.push(
            &mut st,
            Desc {
                kind: DETACH,
                tag: 0,
                addr: 0,
                len: 0,
            },
        );
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

/// Serves as the proxy if `HPC_COLL_PROXY_BOARD` is set (then never returns
/// normally: exits the process when done). Returns `Ok(false)` otherwise.
pub fn serve_env() -> Result<bool> {
    let Ok(path) = std::env::var(hpc_runtime::env::COLL_PROXY_BOARD) else {
        return Ok(false);
    };
    let slots: usize = std::env::var(hpc_runtime::env::COLL_PROXY_SLOTS)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::Unsupported("HPC_COLL_PROXY_SLOTS is not set".into()))?;
    let spin = std::env::var(hpc_runtime::env::COLL_PROXY_SPIN_US)
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::ZERO, Duration::from_micros);
    serve(std::path::Path::new(&path), slots, spin)?;
    std::process::exit(0);
}

struct VOp {
    rank: usize,
    seq: u64,
    sched: Schedule,
    blob: Blob,
    /// The schedule's scratch (at least `sched.scratch_bytes` long), from the pool.
    scratch: Vec<u8>,
    round: usize,
    posted: bool,
    recvs: Vec<(usize, u32, Region)>,
    /// The proxy's mappings of the send and receive buffers, where they are
    /// [`SharedBuf`](crate::SharedBuf)s it could map (keys of [`Proxy::maps`] in `maps`).
    send_map: Option<*mut u8>,
    recv_map: Option<*mut u8>,
    maps: Vec<(usize, u64)>,
}

/// A message waiting for its receive.
enum Payload {
    /// Bytes copied into the proxy's memory (a send from scratch).
    Owned(Buf),
    /// A region of the sending rank's buffer (in its memory or mapped), not
    /// read yet: the receive copies it straight to its destination. Until then
    /// the sender's round stays open (see [`Proxy::inflight`]), so the region
    /// cannot change under it.
    Remote { at: Loc, len: usize },
}

impl Payload {
    fn len(&self) -> usize {
        match self {
            Payload::Owned(b) => b.len,
            Payload::Remote { len, .. } => *len,
        }
    }
}

/// Bytes moved per cross-memory call when both ends lie in ranks' memory:
/// each piece goes through the proxy's cache instead of its DRAM.
const CHUNK: usize = 128 << 10;

struct Proxy {
    board: Board,
    size: usize,
    pids: Vec<u32>,
    ops: Vec<VOp>,
    msgs: HashMap<(usize, usize, u64), VecDeque<Payload>>,
    /// Unreceived `Remote` messages per sending `(rank, seq)`.
    inflight: HashMap<(usize, u64), usize>,
    /// A `Remote` message was received in this pass (its sender may go on).
    consumed: bool,
    out: Vec<VecDeque<Desc>>,
    /// Message and scratch buffers for reuse: a fresh megabyte-sized allocation
    /// costs a page fault per page on every collective, more than copying it.
    pool: Vec<Vec<u8>>,
    /// Two `CHUNK`s for copies and reductions between ranks.
    bounce: Vec<u8>,
    /// The proxy's mappings of ranks' [`SharedBuf`](crate::SharedBuf)s, by
    /// (rank, inode): its registration cache.
    maps: HashMap<(usize, u64), Mapping>,
}

/// A rank's [`SharedBuf`](crate::SharedBuf) mapped into the proxy (the whole
/// memfd); unmapped when dropped.
struct Mapping {
    ptr: *mut u8,
    len: usize,
    /// The rank's descriptor for it, to notice when the rank closed it.
    fd: i32,
}

impl Mapping {
    /// Maps descriptor `r.fd` of process `pid`, if it still is the memfd `r.ino`.
    fn open(pid: u32, r: &ShmRef) -> std::io::Result<Mapping> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        // Non-blocking and never a controlling terminal: should the number name
        // something else by now (a FIFO, a device), opening it has no effect.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(format!("/proc/{pid}/fd/{}", r.fd))?;
        let md = f.metadata()?;
        if !md.is_file() || md.ino() != r.ino || md.len() == 0 {
            return Err(std::io::Error::other("the descriptor names another file"));
        }
        let len = md.len() as usize;
        let p = crate::shm::map_shared(f.as_raw_fd(), len)?;
        Ok(Mapping {
            ptr: p,
            len,
            fd: r.fd,
        })
    }

    /// Whether descriptor `fd` of `pid` still is the file `ino`.
    fn still_open(&self, pid: u32, ino: u64) -> bool {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/{pid}/fd/{}", self.fd)).is_ok_and(|m| m.ino() == ino)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping, made in `open`; dropped only when no op in
        // flight points into it (see `Proxy::unmap_closed`).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Bytes in the proxy's memory: the first `len` of `v` (`v` is initialised
/// throughout and may be longer, from an earlier, larger message).
struct Buf {
    v: Vec<u8>,
    len: usize,
}

impl Buf {
    fn bytes(&self) -> &[u8] {
        &self.v[..self.len]
    }
}

fn tag64(seq: u64, tag: u32) -> u64 {
    (seq << 32) | tag as u64
}

/// Whether the message key `k` (source, destination, tag) belongs to `rank`'s
/// collective `seq`.
fn sent_by(k: &(usize, usize, u64), rank: usize, seq: u64) -> bool {
    k.0 == rank && k.2 >> 32 == tag64(seq, 0) >> 32
}

/// Where a region's bytes are.
#[derive(Clone, Copy)]
enum Loc {
    /// In a rank's memory, at `addr` of process `pid`.
    Rank { pid: u32, addr: u64 },
    /// In the op's scratch, at this offset.
    Scratch(usize),
    /// In a rank's [`SharedBuf`](crate::SharedBuf), through the proxy's own
    /// mapping of it (see [`Proxy::maps`]).
    Mapped(*mut u8),
}

/// Where the bytes to move come from.
#[derive(Clone, Copy)]
enum Src<'a> {
    /// The proxy's own memory.
    Bytes(&'a [u8]),
    /// A rank's or the op's scratch.
    Loc(Loc),
}

/// Resolves `r` of `op`, checking it against the buffer's length.
fn locate(op: &VOp, pids: &[u32], r: &Region) -> Result<Loc, u64> {
    let (base, len, map) = match r.buf {
        BufferId::Scratch => {
            return if r.end() <= op.scratch.len() {
                Ok(Loc::Scratch(r.offset))
            } else {
                Err(FAILED)
            };
        }
        BufferId::Send => (op.blob.send, op.blob.send_len, op.send_map),
        BufferId::Recv => (op.blob.recv, op.blob.recv_len, op.recv_map),
    };
    if r.end() > len {
        return Err(FAILED);
    }
    Ok(match map {
        // Inside the mapping: it holds the whole buffer (checked in `Proxy::map`)
        // and `r` lies inside the buffer (checked above).
        Some(m) => Loc::Mapped(m.wrapping_add(r.offset)),
        None => Loc::Rank {
            pid: pids[op.rank],
            addr: base + r.offset as u64,
        },
    })
}

/// Like [`locate`] for a region to write: the send buffer is only ever read.
fn locate_dst(op: &VOp, pids: &[u32], r: &Region) -> Result<Loc, u64> {
    if r.buf == BufferId::Send {
        return Err(FAILED);
    }
    locate(op, pids, r)
}

fn rd(pid: u32, addr: u64, dst: &mut [u8]) -> Result<(), u64> {
    // SAFETY: `dst` is a live, initialised buffer of the proxy for the call.
    unsafe { board::cma_read(pid, addr, dst.as_mut_ptr(), dst.len()) }.map_err(|_| FAILED)
}

fn wr(pid: u32, src: &[u8], addr: u64) -> Result<(), u64> {
    // SAFETY: `src` is valid for its length; the rank lent its receive buffer for
    // this collective (it waits for DONE or CANCELLED before reusing it).
    unsafe { board::cma_write(pid, src.as_ptr(), addr, src.len()) }.map_err(|_| FAILED)
}

/// The address in the proxy's memory of a location that has one (scratch or
/// a mapping); `None` for a rank's memory, reached by cross-memory calls.
fn local(op: &mut VOp, at: Loc) -> Option<*mut u8> {
    match at {
        // `locate` checked the region against the scratch.
        Loc::Scratch(o) => Some(op.scratch.as_mut_ptr().wrapping_add(o)),
        Loc::Mapped(p) => Some(p),
        Loc::Rank { .. } => None,
    }
}

/// Whether `[a, a + n)` and `[b, b + n)` overlap.
fn overlaps(a: *const u8, b: *const u8, n: usize) -> bool {
    n > 0 && (a as usize) < b as usize + n && (b as usize) < a as usize + n
}

/// Copies `len` bytes from `from` to `to` (the op's receive buffer or scratch):
/// `memcpy` within the proxy's memory, one cross-memory call between it and a
/// rank's, two through `bounce` (piece by piece) from rank to rank.
fn copy(bounce: &mut [u8], op: &mut VOp, from: Src, to: Loc, len: usize) -> Result<(), u64> {
    let src: Option<*const u8> = match from {
        Src::Bytes(b) => Some(b[..len].as_ptr()),
        Src::Loc(at) => local(op, at).map(|p| p as *const u8),
    };
    // In every arm, `locate`/`locate_dst` checked each region against its
    // buffer, scratch or mapping, so each pointer is valid for `len` bytes; a
    // rank does not touch a buffer it lent until the proxy answers.
    match (src, from, local(op, to), to) {
        // SAFETY: see above; `copy` allows overlap.
        (Some(s), _, Some(d), _) => unsafe { std::ptr::copy(s, d, len) },
        (Some(s), _, None, Loc::Rank { pid, addr }) => {
            // SAFETY: see above.
            wr(pid, unsafe { std::slice::from_raw_parts(s, len) }, addr)?
        }
        (None, Src::Loc(Loc::Rank { pid, addr }), Some(d), _) => {
            // SAFETY: see above; the source is in another process.
            rd(pid, addr, unsafe { std::slice::from_raw_parts_mut(d, len) })?
        }
        (
            None,
            Src::Loc(Loc::Rank { pid: sp, addr: sa }),
            None,
            Loc::Rank { pid: dp, addr: da },
        ) => {
            let mut done = 0;
            while done < len {
                let n = (len - done).min(CHUNK);
                let piece = &mut bounce[..n];
                rd(sp, sa + done as u64, piece)?;
                wr(dp, piece, da + done as u64)?;
                done += n;
            }
        }
        _ => unreachable!("a location without an address is a rank's"),
    }
    Ok(())
}

fn apply(
    rop: crate::op::ReduceOp,
    dtype: crate::op::DataType,
    a: &[u8],
    b: &mut [u8],
) -> Result<(), u64> {
    crate::op::apply_reduce(rop, dtype, a, b).map_err(|_| FAILED)
}

/// `dst = src ⊕ dst` over `len` bytes, where either may lie in a rank's memory
/// (read and written back piece by piece through `bounce`) or in the proxy's
/// (scratch, a mapping: reduced in place).
fn reduce(
    bounce: &mut [u8],
    op: &mut VOp,
    rop: crate::op::ReduceOp,
    dtype: crate::op::DataType,
    src: Loc,
    dst: Loc,
    len: usize,
) -> Result<(), u64> {
    let (ba, bb) = bounce.split_at_mut(CHUNK);
    let (sp, dp) = (local(op, src), local(op, dst));
    if let (Some(s), Some(d)) = (sp, dp) {
        // Regions of one step never overlap; a schedule where they do is refused
        // rather than reduced through aliased slices.
        if overlaps(s, d, len) {
            return Err(FAILED);
        }
    }
    let mut done = 0;
    while done < len {
        let n = (len - done).min(CHUNK);
        // The slices below: `locate`/`locate_dst` checked both regions against
        // their buffers, and they do not overlap (checked above).
        let a: &[u8] = match (sp, src) {
            // SAFETY: see above.
            (Some(s), _) => unsafe { std::slice::from_raw_parts(s.add(done), n) },
            (None, Loc::Rank { pid, addr }) => {
                rd(pid, addr + done as u64, &mut ba[..n])?;
                &ba[..n]
            }
            _ => unreachable!("a location without an address is a rank's"),
        };
        match (dp, dst) {
            // SAFETY: see above.
            (Some(d), _) => apply(rop, dtype, a, unsafe {
                std::slice::from_raw_parts_mut(d.add(done), n)
            })?,
            (None, Loc::Rank { pid, addr }) => {
                let b = &mut bb[..n];
                rd(pid, addr + done as u64, b)?;
                apply(rop, dtype, a, b)?;
                wr(pid, b, addr + done as u64)?;
            }
            _ => unreachable!("a location without an address is a rank's"),
        }
        done += n;
    }
    Ok(())
}

impl Proxy {
    /// A buffer of `len` bytes, from the pool when one is large enough.
    fn take(&mut self, len: usize) -> Buf {
        let mut v = match self.pool.iter().position(|v| v.len() >= len) {
            Some(i) => self.pool.swap_remove(i),
            None => self.pool.pop().unwrap_or_default(),
        };
        if v.len() < len {
            v.resize(len, 0);
        }
        Buf { v, len }
    }

    /// Returns a buffer to the pool (at most 16 buffers and 256 MiB are kept, so a
    /// run of huge collectives does not pin their memory in the proxy for good).
    fn give(&mut self, v: Vec<u8>) {
        const MAX_BYTES: usize = 256 << 20;
        let kept: usize = self.pool.iter().map(Vec::len).sum();
        if self.pool.len() < 16 && kept + v.len() <= MAX_BYTES {
            self.pool.push(v);
        }
    }

    /// A new op for rank `rank`'s collective `seq`.
    fn op(&mut self, rank: usize, seq: u64, sched: Schedule, blob: Blob) -> VOp {
        // Scratch from the pool is not zeroed: schedules write scratch before they
        // read it (the simulator checks this by filling scratch with a pattern).
        let scratch = self.take(sched.scratch_bytes).v;
        let mut maps = Vec::new();
        let mut map = |p: &mut Proxy, r: Option<ShmRef>, len: usize| {
            let r = r?;
            let at = p.map(rank, &r, len)?;
            maps.push((rank, r.ino));
            Some(at)
        };
        let send_map = map(self, blob.send_shm, blob.send_len);
        let recv_map = map(self, blob.recv_shm, blob.recv_len);
        VOp {
            rank,
            seq,
            scratch,
            sched,
            blob,
            round: 0,
            posted: false,
            recvs: Vec::new(),
            send_map,
            recv_map,
            maps,
        }
    }

    /// Where the `len` bytes of rank `rank`'s shared buffer `r` are in the
    /// proxy, mapping the buffer on its first use; `None` (cross-memory attach
    /// instead) where it cannot be mapped.
    fn map(&mut self, rank: usize, r: &ShmRef, len: usize) -> Option<*mut u8> {
        let key = (rank, r.ino);
        if !self.maps.contains_key(&key) {
            match Mapping::open(self.pids[rank], r) {
                Ok(m) => {
                    tracing::debug!(
                        rank,
                        ino = r.ino,
                        bytes = m.len,
                        "proxy: mapped a shared buffer"
                    );
                    self.maps.insert(key, m);
                }
                Err(e) => {
                    tracing::debug!(rank, error = %e, "proxy: shared buffer not mapped, using cross-memory attach");
                    return None;
                }
            }
        }
        let m = &self.maps[&key];
        let end = (r.off as usize).checked_add(len)?;
        // Within the mapping: `r.off + len <= m.len`.
        (end <= m.len).then(|| m.ptr.wrapping_add(r.off as usize))
    }

    /// Drops the mappings of shared buffers that their rank closed (or whose rank
    /// is gone) and that no op in flight uses.
    fn unmap_closed(&mut self, gone: &[bool]) {
        if self.maps.is_empty() {
            return;
        }
        let used: HashSet<(usize, u64)> = self
            .ops
            .iter()
            .flat_map(|o| o.maps.iter().copied())
            .collect();
        let pids = &self.pids;
        self.maps.retain(|&(rank, ino), m| {
            used.contains(&(rank, ino)) || (!gone[rank] && m.still_open(pids[rank], ino))
        });
    }

    /// Ends `op` and returns its scratch to the pool. Its messages that no
    /// receive took yet are copied into the proxy's memory first: the rank may
    /// reuse its buffers once it has the answer (an error, a cancellation), and
    /// its peers still match them as if they had been sent eagerly. Those of a
    /// rank that died are dropped (its peers learn of it from the liveness check).
    fn retire(&mut self, op: VOp) {
        if self.inflight.remove(&(op.rank, op.seq)).is_some() {
            let keys: Vec<_> = self
                .msgs
                .keys()
                .filter(|k| sent_by(k, op.rank, op.seq))
                .copied()
                .collect();
            for k in keys {
                let q = self.msgs.remove(&k).unwrap_or_default();
                let mut kept = VecDeque::with_capacity(q.len());
                for m in q {
                    match m {
                        Payload::Remote { at, len } => {
                            let mut b = self.take(len);
                            let read = match at {
                                Loc::Rank { pid, addr } => rd(pid, addr, &mut b.v[..len]),
                                Loc::Mapped(p) => {
                                    // SAFETY: the op's mapping is still held (maps are
                                    // only dropped when no op in `ops` uses them, and
                                    // this one's op is retired right here).
                                    unsafe {
                                        std::ptr::copy_nonoverlapping(p, b.v.as_mut_ptr(), len)
                                    };
                                    Ok(())
                                }
                                Loc::Scratch(_) => Err(FAILED),
                            };
                            if read.is_ok() {
                                kept.push_back(Payload::Owned(b));
                            } else {
                                self.give(b.v);
                            }
                        }
                        owned => kept.push_back(owned),
                    }
                }
                if !kept.is_empty() {
                    self.msgs.insert(k, kept);
                }
            }
        }
        self.give(op.scratch);
    }

    /// Retires `op` and answers its rank `DONE` with `code` and `aux`.
    fn finish(&mut self, op: VOp, code: u64, aux: u64) {
        let (rank, seq) = (op.rank, op.seq);
        self.retire(op);
        self.reply(
            rank,
            Desc {
                kind: DONE,
                tag: seq,
                addr: code,
                len: aux,
            },
        );
    }

    /// Retires the ops for which `which` holds (cancelled, or their rank died).
    fn drop_ops(&mut self, which: impl Fn(&VOp) -> bool) {
        let (gone, keep) = std::mem::take(&mut self.ops).into_iter().partition(which);
        self.ops = keep;
        for o in gone {
            self.retire(o);
        }
    }

    /// Posts the steps of `op`'s current round.
    fn post(&mut self, op: &mut VOp) -> Result<(), u64> {
        let _span = tracing::debug_span!(
            "proxy-round",
            rank = op.rank,
            seq = op.seq,
            round = op.round
        )
        .entered();
        let steps = std::mem::take(&mut op.sched.rounds[op.round].steps);
        let skip_own = op.round == 0 && op.blob.own_copies;
        let res = self.post_steps(op, &steps, skip_own);
        op.sched.rounds[op.round].steps = steps;
        res
    }

    /// Posts `steps`; without those the rank made itself (`skip_own`).
    fn post_steps(&mut self, op: &mut VOp, steps: &[Step], skip_own: bool) -> Result<(), u64> {
        for step in steps {
            if skip_own && own_copy(step).is_some() {
                continue;
            }
            match *step {
                Step::Send { peer, region, tag } => {
                    let payload = match locate(op, &self.pids, &region)? {
                        at @ (Loc::Rank { .. } | Loc::Mapped(_)) => {
                            *self.inflight.entry((op.rank, op.seq)).or_default() += 1;
                            Payload::Remote {
                                at,
                                len: region.len,
                            }
                        }
                        Loc::Scratch(o) => {
                            let mut b = self.take(region.len);
                            b.v[..region.len].copy_from_slice(&op.scratch[o..o + region.len]);
                            Payload::Owned(b)
                        }
                    };
                    self.msgs
                        .entry((op.rank, peer, tag64(op.seq, tag)))
                        .or_default()
                        .push_back(payload);
                }
                Step::Recv { peer, region, tag } => op.recvs.push((peer, tag, region)),
                Step::Copy { src, dst } => {
                    let from = locate(op, &self.pids, &src)?;
                    let to = locate_dst(op, &self.pids, &dst)?;
                    copy(&mut self.bounce, op, Src::Loc(from), to, src.len)?;
                }
                Step::Reduce {
                    src,
                    dst,
                    op: rop,
                    dtype,
                } => {
                    let from = locate(op, &self.pids, &src)?;
                    let to = locate_dst(op, &self.pids, &dst)?;
                    reduce(&mut self.bounce, op, rop, dtype, from, to, src.len)?;
                }
            }
        }
        Ok(())
    }

    /// Advances one op; `Ok(true)` when finished.
    fn advance(&mut self, op: &mut VOp) -> Result<bool, (u64, u64)> {
        loop {
            if !op.posted {
                self.post(op).map_err(|c| (c, 0))?;
                op.posted = true;
            }
            let mut i = 0;
            while i < op.recvs.len() {
                let (peer, tag, region) = op.recvs[i];
                let key = (peer, op.rank, tag64(op.seq, tag));
                let Some(q) = self.msgs.get_mut(&key) else {
                    i += 1;
                    continue;
                };
                let data = q.pop_front().expect("queues in the map are not empty");
                if q.is_empty() {
                    self.msgs.remove(&key);
                }
                if let Payload::Remote { .. } = data {
                    let k = (peer, op.seq);
                    if let Some(n) = self.inflight.get_mut(&k) {
                        *n -= 1;
                        if *n == 0 {
                            self.inflight.remove(&k);
                        }
                    }
                    self.consumed = true;
                }
                if data.len() != region.len {
                    if let Payload::Owned(b) = data {
                        self.give(b.v);
                    }
                    return Err((MISMATCH, peer as u64));
                }
                let to = locate_dst(op, &self.pids, &region).map_err(|c| (c, 0))?;
                let from = match &data {
                    Payload::Owned(b) => Src::Bytes(b.bytes()),
                    &Payload::Remote { at, .. } => Src::Loc(at),
                };
                let res = copy(&mut self.bounce, op, from, to, region.len);
                if let Payload::Owned(b) = data {
                    self.give(b.v);
                }
                res.map_err(|c| (c, 0))?;
                op.recvs.swap_remove(i);
            }
            // A round ends when its receives arrived and its peers took its sends.
            if !op.recvs.is_empty() || self.inflight.contains_key(&(op.rank, op.seq)) {
                return Ok(false);
            }
            op.round += 1;
            op.posted = false;
            if op.round >= op.sched.rounds.len() {
                return Ok(true);
            }
        }
    }

    fn reply(&mut self, rank: usize, d: Desc) {
        self.out[rank].push_back(d);
    }

    fn flush(&mut self) {
        for r in 0..self.size {
            let mut any = false;
            while let Some(d) = self.out[r].front().copied() {
                if !self.board.push(self.size, r, d) {
                    break;
                }
                self.out[r].pop_front();
                any = true;
            }
            if any {
                self.board.ring(r);
            }
        }
    }
}

/// Runs the proxy on the board at `path` with `slots` slots (ranks + 1)
/// until every rank detached or died. After the last work it polls its
/// doorbell for `spin` before it sleeps on it (the ranks' own
/// [`CommOptions::spin`](crate::CommOptions::spin): nonzero where the node
/// has a core for the proxy), so that the next collective of a busy loop
/// costs no wake-up.
#[allow(clippy::needless_range_loop)]
pub fn serve(path: &std::path::Path, slots: usize, spin: Duration) -> Result<()> {
    let board = Board::open(path, slots).map_err(|e| Error::Transport(format!("proxy: {e}")))?;
    let size = slots - 1;
    board.set_pid(size, std::process::id());
    let mut p = Proxy {
        board,
        size,
        pids: vec![0; size],
        ops: Vec::new(),
        msgs: HashMap::new(),
        inflight: HashMap::new(),
        consumed: false,
        out: vec![VecDeque::new(); size],
        pool: Vec::new(),
        bounce: vec![0; 2 * CHUNK],
        maps: HashMap::new(),
    };
    let mut gone = vec![false; size];
    let mut last_check = Instant::now();
    let mut last_work = Instant::now();
    loop {
        let seen = p.board.doorbell(size).load(Ordering::SeqCst);
        let mut moved = false;
        for r in 0..size {
            if p.pids[r] == 0 {
                p.pids[r] = p.board.pid(r);
            }
            while let Some(d) = p.board.pop(r, size) {
                moved = true;
                match d.kind {
                    SUBMIT => {
                        let mut blob = vec![0u8; d.len as usize];
                        // SAFETY: fresh buffer of the descriptor's length.
                        let read = unsafe {
                            board::cma_read(p.pids[r], d.addr, blob.as_mut_ptr(), blob.len())
                        };
                        let parsed = read
                            .ok()
                            .and_then(|_| postcard::from_bytes::<Blob>(&blob).ok());
                        let sched = parsed
                            .as_ref()
                            .and_then(|b| b.coll.schedule(r, size, &b.opts).ok());
                        match (parsed, sched) {
                            (Some(blob), Some(sched)) => {
                                let op = p.op(r, d.tag, sched, blob);
                                p.ops.push(op);
                            }
                            _ => p.reply(
                                r,
                                Desc {
                                    kind: DONE,
                                    tag: d.tag,
                                    addr: FAILED,
                                    len: 0,
                                },
                            ),
                        }
                    }
                    CANCEL => {
                        p.drop_ops(|o| o.rank == r && o.seq == d.tag);
                        p.reply(
                            r,
                            Desc {
                                kind: CANCELLED,
                                tag: d.tag,
                                addr: 0,
                                len: 0,
                            },
                        );
                    }
                    DETACH => gone[r] = true,
                    _ => {}
                }
            }
        }
        let mut ops = std::mem::take(&mut p.ops);
        p.consumed = false;
        let mut i = 0;
        while i < ops.len() {
            let res = if ops[i].sched.rounds.is_empty() {
                Ok(true)
            } else {
                p.advance(&mut ops[i])
            };
            match res {
                Ok(false) => i += 1,
                Ok(true) => {
                    p.finish(ops.swap_remove(i), OK, 0);
                    moved = true;
                }
                Err((code, aux)) => {
                    p.finish(ops.swap_remove(i), code, aux);
                    moved = true;
                }
            }
        }
        ops.sort_by_key(|o| (o.seq, o.rank));
        p.ops = ops;
        // A receive let its sender's round end: go round again before sleeping.
        moved |= p.consumed;
        p.flush();
        if last_check.elapsed() > Duration::from_millis(20) {
            last_check = Instant::now();
            p.unmap_closed(&gone);
            for r in 0..size {
                if !gone[r] && p.pids[r] != 0 && board::pid_dead(p.pids[r]) {
                    gone[r] = true;
                    tracing::warn!(rank = r, "proxy: rank lost");
                    p.drop_ops(|o| o.rank == r);
                }
            }
            // Fail collectives that wait for a lost rank.
            let lost: Vec<usize> = (0..size)
                .filter(|&r| gone[r] && board::pid_dead(p.pids[r]))
                .collect();
            if !lost.is_empty() {
                let mut keep = Vec::new();
                for o in std::mem::take(&mut p.ops) {
                    // Waiting for a message from a lost rank, or for one to take ours.
                    let from = o.recvs.iter().map(|r| r.0).find(|r| lost.contains(r));
                    let to = || {
                        p.msgs
                            .keys()
                            .find(|k| sent_by(k, o.rank, o.seq) && lost.contains(&k.1))
                            .map(|k| k.1)
                    };
                    match from.or_else(to) {
                        Some(peer) => p.finish(o, LOST, peer as u64),
                        None => keep.push(o),
                    }
                }
                p.ops = keep;
                p.flush();
            }
        }
        if gone.iter().all(|&g| g) {
            break;
        }
        if moved {
            last_work = Instant::now();
        } else if spin.is_zero() && !p.ops.is_empty() && last_work.elapsed() < YIELD_FOR {
            // No core of its own, collectives in flight: the ranks' next posts or
            // answers are near. Yielding hands the core back at once and costs
            // neither side a wake-up (see `YIELD_FOR`).
            if p.board.doorbell(size).load(Ordering::Acquire) == seen {
                std::thread::yield_now();
            }
        } else {
            let poll = spin.saturating_sub(last_work.elapsed());
            p.board
                .wait_ring(size, seen, poll, Duration::from_millis(20));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{DataType, ReduceOp};

    /// An op of this process (cross-memory calls to one's own pid work) over
    /// `send` and `recv`, with `scratch` bytes of scratch.
    fn op(send: &[u8], recv: &mut [u8], scratch: usize) -> VOp {
        op_at(send, recv, scratch, false)
    }

    /// Like [`op`]; with `mapped`, the two buffers count as mapped by the proxy
    /// (reached by pointer, as a [`SharedBuf`](crate::SharedBuf) is).
    fn op_at(send: &[u8], recv: &mut [u8], scratch: usize, mapped: bool) -> VOp {
        let coll = Collective::Barrier;
        VOp {
            rank: 0,
            seq: 1,
            sched: coll.schedule(0, 1, &Options::default()).unwrap(),
            blob: Blob {
                coll,
                opts: Options::default(),
                send: send.as_ptr() as u64,
                send_len: send.len(),
                recv: recv.as_mut_ptr() as u64,
                recv_len: recv.len(),
                send_shm: None,
                recv_shm: None,
                own_copies: false,
            },
            scratch: vec![0xA5; scratch],
            round: 0,
            posted: false,
            recvs: Vec::new(),
            send_map: mapped.then_some(send.as_ptr().cast_mut()),
            recv_map: mapped.then_some(recv.as_mut_ptr()),
            maps: Vec::new(),
        }
    }

    fn pattern(len: usize, salt: u32) -> Vec<u8> {
        (0..len as u32)
            .map(|i| (i.wrapping_mul(31) ^ salt) as u8)
            .collect()
    }

    #[test]
    fn answers_are_taken_once_and_dropped_with_their_collective() {
        let path = std::env::temp_dir().join(format!("hpc-proxy-answers-{}", std::process::id()));
        let board = Arc::new(Board::create(&path, 3).unwrap());
        std::fs::remove_file(&path).unwrap();
        // Rank 1 of 2: starts no proxy.
        let c = Client::start(
            board,
            1,
            2,
            &Options::default(),
            Duration::from_secs(5),
            Duration::ZERO,
            false,
        )
        .unwrap();
        let pending = |seq| Pending {
            seq,
            _blob: Vec::new(),
            stage: None,
            direct: true,
            finished: false.into(),
        };
        let (a, b, d) = (pending(7), pending(8), pending(9));
        lock(&c.state)
            .done
            .extend([(7, OK, 0), (8, MISMATCH, 0), (9, OK, 0)]);
        assert!(c.poll(&a) && c.poll(&b) && c.poll(&d));
        assert!(c.wait(&a, None).is_ok());
        assert!(matches!(
            c.wait(&b, None),
            Err(Error::CountMismatch { rank: 0, .. })
        ));
        // Finished, never waited for: its answer goes with it.
        c.discard(&d);
        assert!(d.finished.load(Ordering::Acquire));
        assert!(lock(&c.state).done.is_empty());
        c.discard(&a);
        assert!(lock(&c.state).done.is_empty());
    }

    #[test]
    fn skips_the_copies_a_rank_made_itself() {
        let path = std::env::temp_dir().join(format!("hpc-proxy-own-{}", std::process::id()));
        let board = Board::create(&path, 2).unwrap();
        std::fs::remove_file(&path).unwrap();
        let mut p = Proxy {
            board,
            size: 1,
            pids: vec![std::process::id()],
            ops: Vec::new(),
            msgs: HashMap::new(),
            inflight: HashMap::new(),
            consumed: false,
            out: vec![VecDeque::new()],
            pool: Vec::new(),
            bounce: vec![0u8; 2 * CHUNK],
            maps: HashMap::new(),
        };
        // One rank: an allgather is the copy of its own block, in round 0.
        let coll = Collective::Allgather {
            count: 3,
            dtype: DataType::U8,
        };
        for own in [false, true] {
            let send = [1u8, 2, 3];
            let mut recv = [0u8; 3];
            let mut o = op(&send, &mut recv, 0);
            o.sched = coll.schedule(0, 1, &Options::default()).unwrap();
            o.blob.coll = coll.clone();
            o.blob.own_copies = own;
            assert!(matches!(p.advance(&mut o), Ok(true)));
            drop(o);
            // Made by the proxy, or left to the rank (which made it before it posted).
            assert_eq!(recv, if own { [0; 3] } else { send }, "own_copies {own}");
        }
    }

    #[test]
    fn copies_between_ranks_and_scratch_piece_by_piece() {
        copies_everywhere(false);
    }

    #[test]
    fn copies_between_mapped_buffers_and_scratch() {
        copies_everywhere(true);
    }

    fn copies_everywhere(mapped: bool) {
        // Longer than two pieces and not a multiple of one.
        let len = 2 * CHUNK + 4 * 1000 + 4;
        let send = pattern(len, 7);
        let mut recv = vec![0u8; 2 * len];
        let mut o = op_at(&send, &mut recv, 2 * len, mapped);
        assert_eq!(
            matches!(locate(&o, &[0], &Region::send(0, 1)), Ok(Loc::Mapped(_))),
            mapped
        );
        let pids = [std::process::id()];
        let mut bounce = vec![0u8; 2 * CHUNK];
        let r = |buf, offset| Region::new(buf, offset, len);
        let at = |o: &VOp, reg| locate(o, &pids, &reg).unwrap();
        // rank -> rank (through the bounce buffer), rank -> scratch,
        // scratch -> scratch, scratch -> rank, bytes -> scratch.
        let s0 = at(&o, r(BufferId::Send, 0));
        let r0 = at(&o, r(BufferId::Recv, 0));
        copy(&mut bounce, &mut o, Src::Loc(s0), r0, len).unwrap();
        let x0 = at(&o, r(BufferId::Scratch, 0));
        copy(&mut bounce, &mut o, Src::Loc(r0), x0, len).unwrap();
        let x1 = at(&o, r(BufferId::Scratch, len));
        copy(&mut bounce, &mut o, Src::Loc(x0), x1, len).unwrap();
        let r1 = at(&o, r(BufferId::Recv, len));
        copy(&mut bounce, &mut o, Src::Loc(x1), r1, len).unwrap();
        let other = pattern(len, 99);
        copy(&mut bounce, &mut o, Src::Bytes(&other), x0, len).unwrap();
        assert_eq!(&o.scratch[..len], &other[..]);
        assert_eq!(&o.scratch[len..], &send[..]);
        drop(o);
        assert_eq!(&recv[..len], &send[..]);
        assert_eq!(&recv[len..], &send[..]);
    }

    #[test]
    fn reduces_wherever_the_operands_lie() {
        reduces_everywhere(false);
    }

    #[test]
    fn reduces_in_mapped_buffers() {
        reduces_everywhere(true);
    }

    fn reduces_everywhere(mapped: bool) {
        let n = (2 * CHUNK + 40) / 4; // i32 elements, over two pieces
        let len = n * 4;
        let ints = |f: &dyn Fn(usize) -> i32| -> Vec<u8> {
            (0..n).flat_map(|i| f(i).to_ne_bytes()).collect()
        };
        let send = ints(&|i| i as i32);
        let mut recv = ints(&|i| 1000 * i as i32);
        let mut o = op_at(&send, &mut recv, 2 * len, mapped);
        o.scratch[..len].copy_from_slice(&ints(&|i| -(i as i32)));
        o.scratch[len..].copy_from_slice(&ints(&|_| 5));
        let pids = [std::process::id()];
        let mut bounce = vec![0u8; 2 * CHUNK];
        let at = |o: &VOp, buf, offset| locate(o, &pids, &Region::new(buf, offset, len)).unwrap();
        let (s, r) = (at(&o, BufferId::Send, 0), at(&o, BufferId::Recv, 0));
        let (x0, x1) = (at(&o, BufferId::Scratch, 0), at(&o, BufferId::Scratch, len));
        let sum = |b: &mut [u8], o: &mut VOp, a: Loc, d: Loc| {
            reduce(b, o, ReduceOp::Sum, DataType::I32, a, d, len)
        };
        sum(&mut bounce, &mut o, s, r).unwrap(); // recv = 1001 i
        sum(&mut bounce, &mut o, s, x0).unwrap(); // x0 = 0
        sum(&mut bounce, &mut o, x1, x0).unwrap(); // x0 = 5
        sum(&mut bounce, &mut o, x0, x1).unwrap(); // x1 = 10
        sum(&mut bounce, &mut o, x1, r).unwrap(); // recv = 1001 i + 10
        assert_eq!(&o.scratch[..len], &ints(&|_| 5)[..]);
        assert_eq!(&o.scratch[len..], &ints(&|_| 10)[..]);
        // Bitwise operations are refused for floats: an error, nothing written.
        let err = reduce(
            &mut bounce,
            &mut o,
            ReduceOp::Band,
            DataType::F32,
            x0,
            x1,
            len,
        );
        assert_eq!(err, Err(FAILED));
        assert_eq!(&o.scratch[len..], &ints(&|_| 10)[..]);
        drop(o);
        assert_eq!(recv, ints(&|i| 1001 * i as i32 + 10));
    }

    #[test]
    fn overlapping_operands_are_refused() {
        let mut recv = vec![0u8; 8];
        let mut o = op(&[], &mut recv, 64);
        let mut bounce = vec![0u8; 2 * CHUNK];
        let (a, b) = (Loc::Scratch(0), Loc::Scratch(16));
        let r = reduce(&mut bounce, &mut o, ReduceOp::Sum, DataType::U8, a, b, 32);
        assert_eq!(r, Err(FAILED));
        assert!(reduce(&mut bounce, &mut o, ReduceOp::Sum, DataType::U8, a, b, 16).is_ok());
    }

    #[test]
    fn maps_a_shared_buffer_only_while_it_is_the_same_file() {
        let mut b = crate::SharedBuf::<u8>::new(3 * 4096 + 5).unwrap();
        let r = crate::shm::lookup(b.as_ptr(), b.len()).unwrap();
        let pid = std::process::id();
        let m = Mapping::open(pid, &r).unwrap();
        assert!(m.len >= b.len());
        // Both mappings show the same pages.
        b[4096] = 42;
        // SAFETY: inside the mapping, which this test owns.
        assert_eq!(unsafe { *m.ptr.add(4096) }, 42);
        // SAFETY: as above.
        unsafe { *m.ptr.add(3 * 4096 + 4) = 7 };
        assert_eq!(b[3 * 4096 + 4], 7);
        assert!(m.still_open(pid, r.ino));
        // A descriptor that names another file is not mapped.
        let wrong = ShmRef {
            ino: r.ino + 1,
            ..r
        };
        assert!(Mapping::open(pid, &wrong).is_err());
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        use std::os::fd::AsRawFd;
        let other = ShmRef {
            fd: f.as_raw_fd(),
            ..r
        };
        assert!(Mapping::open(pid, &other).is_err());
        // Once the rank closed it, the proxy notices; its own mapping stays valid.
        drop(b);
        assert!(!m.still_open(pid, r.ino));
        // SAFETY: the proxy's mapping keeps the pages.
        assert_eq!(unsafe { *m.ptr.add(4096) }, 42);
    }

    #[test]
    fn regions_past_a_buffer_are_refused() {
        let send = vec![0u8; 64];
        let mut recv = vec![0u8; 64];
        let o = op(&send, &mut recv, 16);
        let pids = [std::process::id()];
        assert!(locate(&o, &pids, &Region::send(0, 64)).is_ok());
        assert_eq!(locate(&o, &pids, &Region::recv(1, 64)).err(), Some(FAILED));
        assert_eq!(
            locate(&o, &pids, &Region::scratch(8, 9)).err(),
            Some(FAILED)
        );
    }
}
