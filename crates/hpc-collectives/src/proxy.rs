//! The `Proxy` engine: one progress process per node runs the schedules of
//! all local ranks — the role MVAPICH2-DPU gives to a BlueField's Arm cores.
//!
//! # Protocol
//!
//! The ranks and the proxy share the communicator's board (see
//! `board.rs`), with one extra slot for the proxy. A rank posts a collective
//! by pushing a `SUBMIT` descriptor on its ring to the proxy; the descriptor
//! points at a small JSON blob in the rank's memory (the [`Collective`], the
//! addresses and lengths of its send and receive buffers). The proxy reads
//! the blob and the buffers with cross-memory attach (`process_vm_readv`),
//! builds the rank's schedule, runs it together with the other ranks'
//! schedules (matching messages in its own memory, keeping every scratch
//! buffer in its own memory), writes results back with `process_vm_writev`,
//! and answers `DONE` (with an error code) on the ring to the rank, ringing
//! the rank's doorbell. The ranks' CPUs do nothing between post and wait.
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
//! here: this proxy serves one node, over cross-memory attach.
//!
//! What it lacks today: more than one node, pipelining of large messages
//! (each is copied whole through the proxy's memory: two copies per
//! message, where a DPU does the same through its own DRAM), and a
//! registration cache.

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
use crate::schedule::{BufferId, Region, Schedule, Step};

const SUBMIT: u32 = 10;
const CANCEL: u32 = 11;
const DETACH: u32 = 12;
const DONE: u32 = 20;
const CANCELLED: u32 = 21;

const OK: u64 = 0;
const LOST: u64 = 1;
const MISMATCH: u64 = 2;
const FAILED: u64 = 3;

#[derive(Serialize, Deserialize)]
struct Blob {
    coll: Collective,
    opts: Options,
    send: u64,
    send_len: usize,
    recv: u64,
    recv_len: usize,
}

/// A collective posted to the proxy.
pub(crate) struct Pending {
    seq: u64,
    _blob: Vec<u8>,
    stage: Option<(Vec<u8>, Vec<u8>)>,
    direct: bool,
    finished: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct ClientState {
    done: HashMap<u64, (u64, u64)>,
    cancelled: HashSet<u64>,
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
    state: Mutex<ClientState>,
    /// Set once the proxy was found dead: later submits fail at once.
    proxy_gone: std::sync::atomic::AtomicBool,
}

/// How often a waiting rank asks the kernel whether the proxy still lives
/// (reading `/proc/PID/stat` costs several microseconds, as much as a small
/// collective, so not on every pass).
const LIVENESS_EVERY: Duration = Duration::from_millis(5);

/// The variable naming the program a communicator's first rank starts as the proxy
/// (split at white space; `hpc run --proxy` sets it to `hpc proxy`).
pub const PROXY_CMD: &str = "HPC_COLL_PROXY_CMD";

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
        _pids: Vec<u32>,
        opts: &Options,
        timeout: Duration,
        spin: Duration,
    ) -> Result<Client> {
        if me == 0 {
            if std::env::var_os("HPC_COLL_PROXY_BOARD").is_some() {
                // This process was started to be a proxy but went on as an application:
                // starting a proxy of its own would recurse.
                return Err(Error::Unsupported(
                    "this process was started as a collectives proxy but did not call \
                     hpc_collectives::proxy::serve_env(); call it first thing in main, \
                     or run the job with `hpc run --proxy`"
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
            cmd.env("HPC_COLL_PROXY_BOARD", board.path())
                .env("HPC_COLL_PROXY_SLOTS", (size + 1).to_string());
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
                         hpc_collectives::proxy::serve_env() first thing in main, run the \
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
                    st.done.insert(d.tag, (d.addr, d.len));
                }
                CANCELLED => {
                    st.cancelled.insert(d.tag);
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
        let stage = (!direct).then(|| (send.to_vec(), recv.to_vec()));
        let (sp, rp) = match &stage {
            Some((s, r)) => (s.as_ptr() as u64, r.as_ptr() as u64),
            None => (send.as_ptr() as u64, recv.as_mut_ptr() as u64),
        };
        let blob = serde_json::to_vec(&Blob {
            coll: coll.clone(),
            opts: self.opts,
            send: sp,
            send_len: send.len(),
            recv: rp,
            recv_len: recv.len(),
        })
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

    pub(crate) fn poll(&self, p: &Pending) -> bool {
        if p.finished.load(Ordering::Acquire) {
            return true;
        }
        let mut st = lock(&self.state);
        self.drain(&mut st);
        st.done.contains_key(&p.seq)
    }

    pub(crate) fn wait(&self, p: &Pending, out: Option<&mut [u8]>) -> Result<()> {
        let t0 = Instant::now();
        let mut last_check = t0;
        loop {
            let seen = self.board.doorbell(self.me).load(Ordering::SeqCst);
            {
                let mut st = lock(&self.state);
                self.drain(&mut st);
                if let Some((code, aux)) = st.done.remove(&p.seq) {
                    p.finished.store(true, Ordering::Release);
                    return match code {
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
                    };
                }
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
            self.board
                .wait_ring(self.me, seen, self.spin, Duration::from_millis(10));
        }
    }

    /// Makes sure the proxy no longer touches `p`'s buffers.
    pub(crate) fn cancel(&self, p: &Pending) {
        if p.finished.load(Ordering::Acquire) || lock(&self.state).done.contains_key(&p.seq) {
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
            if st.cancelled.remove(&p.seq) || st.done.remove(&p.seq).is_some() {
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
    let Ok(path) = std::env::var("HPC_COLL_PROXY_BOARD") else {
        return Ok(false);
    };
    let slots: usize = std::env::var("HPC_COLL_PROXY_SLOTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::Unsupported("HPC_COLL_PROXY_SLOTS is not set".into()))?;
    serve(std::path::Path::new(&path), slots)?;
    std::process::exit(0);
}

struct VOp {
    rank: usize,
    seq: u64,
    sched: Schedule,
    blob: Blob,
    scratch: Vec<u8>,
    round: usize,
    posted: bool,
    recvs: Vec<(usize, u32, Region)>,
}

struct Proxy {
    board: Board,
    size: usize,
    pids: Vec<u32>,
    ops: Vec<VOp>,
    msgs: HashMap<(usize, usize, u64), VecDeque<Buf>>,
    out: Vec<VecDeque<Desc>>,
    /// Message buffers for reuse: a fresh megabyte-sized allocation costs a
    /// page fault per page on every message, more than copying it.
    pool: Vec<Vec<u8>>,
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
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.v[..self.len]
    }
}

fn tag64(seq: u64, tag: u32) -> u64 {
    (seq << 32) | tag as u64
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
    fn give(&mut self, b: Buf) {
        const MAX_BYTES: usize = 256 << 20;
        let kept: usize = self.pool.iter().map(Vec::len).sum();
        if self.pool.len() < 16 && kept + b.v.len() <= MAX_BYTES {
            self.pool.push(b.v);
        }
    }

    fn read(&mut self, op: &VOp, r: &Region) -> Result<Buf, u64> {
        let mut b = self.take(r.len);
        let (base, len) = match r.buf {
            BufferId::Scratch => {
                b.bytes_mut()
                    .copy_from_slice(&op.scratch[r.offset..r.end()]);
                return Ok(b);
            }
            BufferId::Send => (op.blob.send, op.blob.send_len),
            BufferId::Recv => (op.blob.recv, op.blob.recv_len),
        };
        if r.end() > len {
            self.give(b);
            return Err(FAILED);
        }
        let dst = b.bytes_mut();
        // SAFETY: `dst` is an initialised buffer of `r.len` bytes owned here.
        let res = unsafe {
            board::cma_read(
                self.pids[op.rank],
                base + r.offset as u64,
                dst.as_mut_ptr(),
                r.len,
            )
        };
        match res {
            Ok(()) => Ok(b),
            Err(_) => {
                self.give(b);
                Err(FAILED)
            }
        }
    }

    fn write(&self, op: &mut VOp, r: &Region, data: &[u8]) -> Result<(), u64> {
        let (base, len) = match r.buf {
            BufferId::Scratch => {
                op.scratch[r.offset..r.end()].copy_from_slice(data);
                return Ok(());
            }
            BufferId::Send => return Err(FAILED),
            BufferId::Recv => (op.blob.recv, op.blob.recv_len),
        };
        if r.end() > len {
            return Err(FAILED);
        }
        // SAFETY: `data` is valid for its length; the rank lent its receive buffer for
        // this collective (it waits for DONE or CANCELLED before reusing it).
        unsafe {
            board::cma_write(
                self.pids[op.rank],
                data.as_ptr(),
                base + r.offset as u64,
                data.len(),
            )
        }
        .map_err(|_| FAILED)
    }

    /// Advances one op; `Ok(true)` when finished.
    fn advance(&mut self, op: &mut VOp) -> Result<bool, (u64, u64)> {
        loop {
            if !op.posted {
                let _span = tracing::debug_span!(
                    "proxy-round",
                    rank = op.rank,
                    seq = op.seq,
                    round = op.round
                )
                .entered();
                for step in op.sched.rounds[op.round].steps.clone() {
                    match step {
                        Step::Send { peer, region, tag } => {
                            let data = self.read(op, &region).map_err(|c| (c, 0))?;
                            self.msgs
                                .entry((op.rank, peer, tag64(op.seq, tag)))
                                .or_default()
                                .push_back(data);
                        }
                        Step::Recv { peer, region, tag } => op.recvs.push((peer, tag, region)),
                        Step::Copy { src, dst } => {
                            let data = self.read(op, &src).map_err(|c| (c, 0))?;
                            let res = self.write(op, &dst, data.bytes());
                            self.give(data);
                            res.map_err(|c| (c, 0))?;
                        }
                        Step::Reduce {
                            src,
                            dst,
                            op: rop,
                            dtype,
                        } => {
                            let a = self.read(op, &src).map_err(|c| (c, 0))?;
                            let mut b = self.read(op, &dst).map_err(|c| (c, 0))?;
                            let res = crate::op::apply_reduce(rop, dtype, a.bytes(), b.bytes_mut())
                                .map_err(|_| FAILED)
                                .and_then(|()| self.write(op, &dst, b.bytes()));
                            self.give(a);
                            self.give(b);
                            res.map_err(|c| (c, 0))?;
                        }
                    }
                }
                op.posted = true;
            }
            let mut i = 0;
            while i < op.recvs.len() {
                let (peer, tag, region) = op.recvs[i];
                let key = (peer, op.rank, tag64(op.seq, tag));
                if let Some(data) = self.msgs.get_mut(&key).and_then(|q| q.pop_front()) {
                    if self.msgs.get(&key).is_some_and(|q| q.is_empty()) {
                        self.msgs.remove(&key);
                    }
                    if data.len != region.len {
                        self.give(data);
                        return Err((MISMATCH, peer as u64));
                    }
                    let res = self.write(op, &region, data.bytes());
                    self.give(data);
                    res.map_err(|c| (c, 0))?;
                    op.recvs.swap_remove(i);
                } else {
                    i += 1;
                }
            }
            if !op.recvs.is_empty() {
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
/// until every rank detached or died.
#[allow(clippy::needless_range_loop)]
pub fn serve(path: &std::path::Path, slots: usize) -> Result<()> {
    let board = Board::open(path, slots).map_err(|e| Error::Transport(format!("proxy: {e}")))?;
    let size = slots - 1;
    board.set_pid(size, std::process::id());
    let mut p = Proxy {
        board,
        size,
        pids: vec![0; size],
        ops: Vec::new(),
        msgs: HashMap::new(),
        out: vec![VecDeque::new(); size],
        pool: Vec::new(),
    };
    let mut gone = vec![false; size];
    let mut last_check = Instant::now();
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
                            .and_then(|_| serde_json::from_slice::<Blob>(&blob).ok());
                        let sched = parsed
                            .as_ref()
                            .and_then(|b| b.coll.schedule(r, size, &b.opts).ok());
                        match (parsed, sched) {
                            (Some(blob), Some(sched)) => p.ops.push(VOp {
                                rank: r,
                                seq: d.tag,
                                scratch: vec![0; sched.scratch_bytes],
                                sched,
                                blob,
                                round: 0,
                                posted: false,
                                recvs: Vec::new(),
                            }),
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
                        p.ops.retain(|o| !(o.rank == r && o.seq == d.tag));
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
                    let o = ops.swap_remove(i);
                    p.reply(
                        o.rank,
                        Desc {
                            kind: DONE,
                            tag: o.seq,
                            addr: OK,
                            len: 0,
                        },
                    );
                    moved = true;
                }
                Err((code, aux)) => {
                    let o = ops.swap_remove(i);
                    p.reply(
                        o.rank,
                        Desc {
                            kind: DONE,
                            tag: o.seq,
                            addr: code,
                            len: aux,
                        },
                    );
                    moved = true;
                }
            }
        }
        ops.sort_by_key(|o| (o.seq, o.rank));
        p.ops = ops;
        p.flush();
        if last_check.elapsed() > Duration::from_millis(20) {
            last_check = Instant::now();
            for r in 0..size {
                if !gone[r] && p.pids[r] != 0 && board::pid_dead(p.pids[r]) {
                    gone[r] = true;
                    tracing::warn!(rank = r, "proxy: rank lost");
                    p.ops.retain(|o| o.rank != r);
                }
            }
            // Fail collectives that wait for a lost rank.
            let lost: Vec<usize> = (0..size)
                .filter(|&r| gone[r] && board::pid_dead(p.pids[r]))
                .collect();
            if !lost.is_empty() {
                let mut keep = Vec::new();
                for o in std::mem::take(&mut p.ops) {
                    match o.recvs.iter().find(|r| lost.contains(&r.0)) {
                        Some(&(peer, ..)) => p.reply(
                            o.rank,
                            Desc {
                                kind: DONE,
                                tag: o.seq,
                                addr: LOST,
                                len: peer as u64,
                            },
                        ),
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
        if !moved {
            p.board.sleep(size, seen, Duration::from_millis(20));
        }
    }
    Ok(())
}
