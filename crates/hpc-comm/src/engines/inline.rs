//! The `Inline` engine: the ranks run their schedules themselves, inside
//! `test` and `wait`, with the executor ([`Core`]) over the node's board (and
//! `hpc-rdma` to other nodes). [`Host`] is that path; the `Thread` engine adds
//! a progress thread to it and the `Proxy` engine uses it for small
//! collectives.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hpc_collectives::Options;

use super::{Driver, Job, Pending, Ticket};
use crate::executor::{Buffers, Core, Op, Shared, Status};
use crate::proxy::Client;
use hpc_board::backoff::Backoff;
use hpc_board::board::{self, Board, Failure};
use hpc_board::sig::Sig;
use hpc_board::sync::lock;
use hpc_board::{Error, Result};

/// How long a rank that polls the network sleeps between passes once it has
/// spun and yielded (see [`Backoff`]).
const POLL_SLEEP: Duration = Duration::from_micros(20);

/// How often a waiting rank checks that the peers it waits for live and
/// whether the timeout passed; also the bound of its futex sleep, so that
/// these checks run although a dead peer rings no doorbell.
const CHECK_EVERY: Duration = Duration::from_millis(10);

/// The ranks' own engine for one communicator.
pub(crate) struct Host {
    pub shared: Arc<Shared>,
    pub board: Arc<Board>,
    rank: usize,
    size: usize,
    /// World rank of each member (errors name world ranks).
    world_ranks: Vec<usize>,
    opts: Options,
    timeout: Duration,
    /// How long `wait` polls the doorbell before it sleeps.
    spin: Duration,
    /// A progress thread shares the executor (the `Thread` engine): `start`
    /// wakes it where it must see a collective, `test` leaves the executor to it
    /// when it is at work.
    pub agent: bool,
    /// The `Proxy` engine's connection, whose descriptors queued behind a full
    /// ring must still go out while a rank waits here.
    flush: Option<Arc<Client>>,
}

impl Host {
    /// The ranks' path over `board`, with executor `core`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        core: Core,
        board: Arc<Board>,
        world_ranks: Vec<usize>,
        opts: Options,
        timeout: Duration,
        spin: Duration,
        agent: bool,
        flush: Option<Arc<Client>>,
    ) -> Host {
        Host {
            rank: core.me,
            size: core.size,
            shared: Arc::new(Shared::new(core)),
            board,
            world_ranks,
            opts,
            timeout,
            spin,
            agent,
            flush,
        }
    }

    /// The engine this path serves, as errors name it.
    fn engine_name(&self) -> &'static str {
        match (self.agent, self.flush.is_some()) {
            (true, _) => "thread",
            (false, true) => "proxy",
            (false, false) => "inline",
        }
    }

    /// This rank in the communicator.
    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    /// Starts `job` on the executor and posts its first round from the caller's thread.
    pub(crate) fn start(&self, mut job: Job<'_>) -> Result<Ticket> {
        let sched = job.coll.schedule(self.rank, self.size, &self.opts)?;
        let (send, send_len, recv, recv_len) = job.raw();
        let bufs = Buffers {
            send,
            send_len,
            recv,
            recv_len,
            scratch: vec![0u8; sched.scratch_bytes],
            stage: job.stage.take(),
        };
        let op = Op::new(job.seq, Sig::of(&job.coll), sched, bufs);
        self.submit(&op)?;
        Ok(op)
    }

    /// Starts a point-to-point operation: `sched` (one send or one receive,
    /// under [`P2P_SEQ`](crate::executor::P2P_SEQ)) on `bufs`; `want`: for
    /// a receive, the messages it takes (the earliest of them).
    pub(crate) fn start_p2p(
        &self,
        sched: hpc_collectives::Schedule,
        bufs: Buffers,
        want: Option<crate::executor::Want>,
    ) -> Result<Ticket> {
        let op = Op::new(crate::executor::P2P_SEQ, Sig::NONE, sched, bufs);
        if let Some(w) = want {
            op.take_first(w);
            lock(&self.shared.core).open_inbox()?;
        }
        self.submit(&op)?;
        Ok(op)
    }

    /// Hands `op` to the executor and posts its first round from the caller's thread.
    fn submit(&self, op: &Arc<Op>) -> Result<()> {
        {
            let mut core = lock(&self.shared.core);
            if core.stopped {
                return Err(Error::Stopped(self.engine_name()));
            }
            core.submit(op.clone());
            // Post the first round now, from the caller's thread: a hand-off
            // to the agent would be the largest cost of a small collective
            // (and a staged send completes right here).
            core.progress();
            if self.agent
                && (core.has_output()
                    || (self.board.agent_idle(self.rank) && !op.done.load(Ordering::Acquire)))
            {
                // A full ring (the agent retries), or an agent that has
                // stopped polling: it must see this collective.
                self.board.wake_agent(self.rank);
            }
        }
        Ok(())
    }

    fn wait_op(&self, op: &Op) {
        if op.done.load(Ordering::Acquire) {
            return;
        }
        let (shared, board, spin) = (&self.shared, &self.board, self.spin);
        let t0 = Instant::now();
        let mut last_check = t0;
        // The waiting thread has nothing else to do: it advances the collectives
        // itself (the Thread engine's agent stands aside meanwhile), which saves the
        // hand-offs to the agent once the application waits.
        let mut waiting = board.enter_wait(self.rank);
        let mut backoff = Backoff::new(spin, true);
        let mut in_flight = 1;
        while !op.done.load(Ordering::Acquire) {
            let seen = board.doorbell(self.rank).load(Ordering::SeqCst);
            if let Some(client) = &self.flush {
                // Collectives of the proxy path queued behind a full ring must
                // still reach it: the peers may wait for them.
                client.flush();
            }
            let (moved, stopped, polling) = {
                let mut core = lock(&shared.core);
                let moved = core.progress();
                in_flight = core.active();
                (moved, core.stopped, core.net_pending() || core.has_output())
            };
            if op.done.load(Ordering::Acquire) {
                break;
            }
            if stopped {
                op.fail(Error::Stopped("thread"));
                break;
            }
            if moved {
                backoff.reset();
            } else if polling {
                // Network completions ring no doorbell, nor does a peer that makes
                // room in a full ring: poll the transport, at once within the spin
                // budget, then yielding (the transport's reader thread may need this
                // core), then at a gentler pace (a sleep costs its timer slack too,
                // 50 µs by default).
                backoff.rest(|_| POLL_SLEEP);
            } else {
                // Peers ring this doorbell when they push a descriptor.
                board.wait_ring(self.rank, seen, spin, CHECK_EVERY);
            }
            if last_check.elapsed() >= CHECK_EVERY {
                last_check = Instant::now();
                let pids = {
                    let mut core = lock(&shared.core);
                    // Failures of members on other nodes, onto this node's
                    // board (`fail_as_elsewhere` below reads them there).
                    core.poll_notices();
                    core.pids.clone()
                };
                // A peer that dropped the communicator is as gone as one whose
                // process exited: everything it pushed came before its mark.
                let lost = lost_peer(
                    || op.blocked_on(),
                    |p| board.has_left(p) || board::pid_dead(pids[p]),
                    || {
                        // Until nothing moves: a message taken in may let a round
                        // end and the next take in one that is queued already.
                        for _ in 0..8 {
                            if !lock(&shared.core).progress() {
                                break;
                            }
                        }
                    },
                );
                if op.done.load(Ordering::Acquire) {
                    break;
                }
                if let Some(p) = lost {
                    let peer = p as u32;
                    let f = if board.has_left(p) {
                        Failure::Left { peer }
                    } else {
                        Failure::Lost { peer }
                    };
                    op.fail_marked(board, self.rank, f);
                } else if op.fail_as_elsewhere(board, self.rank, self.size) {
                    // Another member's collective failed (a mismatch, a rank
                    // that left or is lost): this one cannot end.
                } else if t0.elapsed() > self.timeout {
                    let mut peers = op.blocked_on();
                    peers.sort_unstable();
                    peers.dedup();
                    let e = Error::Timeout {
                        after: self.timeout,
                        waiting_for: peers.iter().map(|&p| self.world_ranks[p]).collect(),
                    };
                    let waited_for = peers.first().copied().unwrap_or(self.rank);
                    op.fail_timed_out(board, self.rank, waited_for, e);
                }
            }
        }
        // With nothing else in flight (as of the last pass) there is nothing for the
        // agent to pick up.
        waiting.wake = in_flight > 0;
    }

    /// The communicator's timeout for a blocking wait.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Advances this rank's operations on its own path once, from a thread
    /// that waits for something else (a collective in the proxy): whether
    /// anything is still in flight there, which the peers may wait for (a
    /// `FIN` for a message this rank read, a network send or receive).
    pub(crate) fn progress_aside(&self) -> bool {
        let mut core = lock(&self.shared.core);
        core.progress();
        core.active() > 0 || core.has_output() || core.net_pending()
    }

    /// Before the communicator goes: descriptors peers still wait for (a `FIN`
    /// for a message this rank read) reach their rings, the network path says
    /// goodbye, and a progress thread is told to stop.
    pub(crate) fn shutdown(&self) {
        let (shared, board) = (&self.shared, &self.board);
        let t0 = Instant::now();
        loop {
            let seen = board.doorbell(self.rank).load(Ordering::SeqCst);
            let mut core = lock(&shared.core);
            core.progress();
            if !core.has_output() || t0.elapsed() > self.timeout {
                break;
            }
            drop(core);
            board.sleep(self.rank, seen, Duration::from_millis(1));
        }
        // After everything this rank pushed: a peer that waits for it fails
        // with `RankLeft` at its next check, not by the timeout.
        board.mark_left(self.rank);
        lock(&shared.core).net_goodbye(self.timeout.min(Duration::from_secs(10)));
        shared.shutdown.store(true, Ordering::Release);
        board.wake_agent(self.rank);
        board.ring(self.rank);
    }
}

/// The peer a collective waits for that is lost, if any: one whose process
/// is gone (`dead`) and that the collective still waits for (`blocked`) after
/// everything that peer sent before it went was taken in (`drain`).
///
/// A peer that finished its part pushes its last descriptor and exits at once,
/// so "gone" alone says nothing: what it pushed may still wait in this rank's
/// ring. Each peer's process is therefore looked at once, *before* the drain,
/// and a peer counts as lost only if it was gone then and is still waited for
/// after: everything it pushed happened before it exited, so before that look
/// and that drain. A second look would find peers that exited after the
/// first, their last descriptors not taken in: on an oversubscribed node,
/// where a scan of a few dozen peers' `/proc` entries takes long enough for
/// some of them to finish and exit, a rank that merely completed was reported
/// lost. A stopped or starved process is not gone: only the communicator's
/// timeout ends a wait for it, with `Timeout` naming it.
fn lost_peer(
    mut blocked: impl FnMut() -> Vec<usize>,
    dead: impl Fn(usize) -> bool,
    drain: impl FnOnce(),
) -> Option<usize> {
    let mut peers = blocked();
    peers.sort_unstable();
    peers.dedup();
    // One look per peer: a process with a receive and a send open is read once.
    let gone: Vec<usize> = peers.into_iter().filter(|&p| dead(p)).collect();
    if gone.is_empty() {
        return None;
    }
    drain();
    blocked().into_iter().find(|p| gone.contains(p))
}

/// `detail` of a count mismatch on the ranks' own path, whose every `rank N`
/// names a rank of the communicator, with each such `N` its world rank, as
/// the error's own rank and the proxies' texts are (in a split communicator
/// it read "count mismatch with rank 3: rank 2 sent 40 bytes where 32 were
/// expected", rank 2 of the communicator being rank 3 of the world).
pub(crate) fn world_ranks_in(detail: &str, world: &[usize]) -> String {
    if world.iter().enumerate().all(|(i, &w)| i == w) {
        return detail.to_string();
    }
    let mut out = String::with_capacity(detail.len());
    let mut rest = detail;
    while let Some(at) = rest.find("rank ") {
        let (head, tail) = rest.split_at(at + "rank ".len());
        out.push_str(head);
        let digits = tail.len() - tail.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        match tail[..digits]
            .parse::<usize>()
            .ok()
            .and_then(|r| world.get(r))
        {
            Some(w) => out.push_str(&w.to_string()),
            None => out.push_str(&tail[..digits]),
        }
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}

/// The ranks' path of `engine`, which started an op of its executor.
fn host_of(engine: &dyn Driver) -> &Host {
    engine
        .host()
        .expect("an executor op is started by an engine with a ranks' path")
}

/// A collective on the ranks' own path is its own handle.
impl Pending for Op {
    fn test(&self, engine: &dyn Driver) -> bool {
        let (op, host) = (self, host_of(engine));
        if !op.done.load(Ordering::Acquire) {
            if !host.agent {
                lock(&host.shared.core).progress();
            } else if let Ok(mut core) = host.shared.core.try_lock() {
                // The Thread engine's agent is not woken for small
                // messages (see `Core::flush_peer`): a testing thread
                // moves them, unless the agent is at it already.
                core.progress();
            }
        }
        op.done.load(Ordering::Acquire)
    }

    fn wait(&self, engine: &dyn Driver, out: Option<&mut [u8]>) -> Result<()> {
        let host = host_of(engine);
        host.wait_op(self);
        let mut d = lock(&self.data);
        match std::mem::replace(&mut d.status, Status::Done) {
            Status::Failed(e) => {
                d.status = Status::Failed(Error::Stopped("(already reported)"));
                let world = &host.world_ranks;
                Err(match e {
                    Error::CountMismatch { rank, detail } => Error::CountMismatch {
                        rank: world[rank],
                        detail: world_ranks_in(&detail, world),
                    },
                    Error::CollectiveMismatch { rank, ours, theirs } => Error::CollectiveMismatch {
                        rank: world[rank],
                        ours,
                        theirs,
                    },
                    Error::PeerTimedOut { rank, waited_for }
                        if rank < host.size && waited_for < host.size =>
                    {
                        Error::PeerTimedOut {
                            rank: world[rank],
                            waited_for: world[waited_for],
                        }
                    }
                    Error::RankLost { rank } if rank < host.size => {
                        Error::RankLost { rank: world[rank] }
                    }
                    Error::RankLeft { rank } if rank < host.size => {
                        Error::RankLeft { rank: world[rank] }
                    }
                    e => e,
                })
            }
            _ => {
                if let Some(stage) = &d.bufs.stage {
                    stage.deliver(out);
                }
                Ok(())
            }
        }
    }

    fn cancel(&self, engine: &dyn Driver) {
        // A failed send gives its buffer back after this: a message of it
        // that a receiver may still read at its address is withdrawn first.
        let host = host_of(engine);
        self.withdraw(&host.board, host.rank());
        self.fail(Error::Stopped("cancelled"));
    }

    fn matched(&self) -> Option<(usize, u16)> {
        Op::matched(self)
    }
}

/// The `Inline` engine, and the `Thread` engine: the same with the progress
/// thread ([`thread::spawn`](super::thread::spawn)) it joins at shutdown.
pub(crate) struct Inline {
    pub host: Arc<Host>,
    pub agent: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Driver for Inline {
    fn start(&self, job: Job<'_>) -> Result<Ticket> {
        self.host.start(job)
    }

    fn host(&self) -> Option<&Host> {
        Some(&self.host)
    }

    fn shutdown(&self) {
        self.host.shutdown();
        if let Some(h) = lock(&self.agent).take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::lost_peer;
    use std::cell::{Cell, RefCell};

    /// A peer that pushes its last descriptor and exits while this rank
    /// looks at its peers' processes is not lost: its descriptor is taken in
    /// before it can count as lost, and the collective then no longer waits
    /// for it.
    #[test]
    fn a_peer_that_exits_after_its_last_send_is_not_lost() {
        // Waiting for peers 1, 2 and 3; peer 2's last message is in the ring.
        let blocked = RefCell::new(vec![1, 2, 3]);
        let looks = Cell::new(0);
        // Peer 2 is alive at the first look at it and gone from then on.
        let dead = |p: usize| {
            if p != 2 {
                return false;
            }
            looks.set(looks.get() + 1);
            looks.get() > 1
        };
        let drain = || blocked.borrow_mut().retain(|&p| p != 2);
        // First check: peer 2 still alive, nothing lost.
        assert_eq!(lost_peer(|| blocked.borrow().clone(), dead, drain), None);
        assert_eq!(looks.get(), 1, "each peer is looked at once per check");
        // Next check: gone, but the drain takes in its message: still not lost.
        assert_eq!(lost_peer(|| blocked.borrow().clone(), dead, drain), None);
        assert_eq!(*blocked.borrow(), vec![1, 3]);
    }

    /// A peer that is gone and still waited for after the drain is lost,
    /// at the first check that sees it gone.
    #[test]
    fn a_gone_peer_still_waited_for_is_lost() {
        let (drained, looks) = (Cell::new(false), Cell::new(0));
        // Peer 1 twice: a receive from it and a send to it are open.
        let lost = lost_peer(
            || vec![4, 1, 1],
            |p| {
                looks.set(looks.get() + 1);
                p == 1
            },
            || drained.set(true),
        );
        assert_eq!(lost, Some(1));
        assert!(drained.get(), "what it sent is taken in first");
        assert_eq!(looks.get(), 2, "one look per peer");
        // Nobody gone: no drain, nothing lost.
        let drained = Cell::new(false);
        assert_eq!(
            lost_peer(|| vec![4, 1], |_| false, || drained.set(true)),
            None
        );
        assert!(!drained.get());
    }
}
