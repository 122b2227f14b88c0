//! The DPU proxy's executor for a collective whose ranks span nodes: the
//! schedules of this node's ranks run step by step in the proxy's memory,
//! and the steps whose peer is on another node become messages to and from
//! that node's proxy.
//!
//! It keeps the simulator's semantics (`hpc_collectives::sim`): a rank posts
//! all steps of its round at once, a send's data is taken when it is posted,
//! messages match by (source, destination, tag) in posting order, and a
//! round completes when all its receives have their messages; then they
//! land and the round's copies and reductions run. Sends are eager (they
//! complete when posted): a schedule that completes under the simulator's
//! rendezvous sends completes under eager ones with the same results, since
//! in both a send's data is what its region held when it was posted.

use std::collections::HashMap;

use hpc_collectives::{apply_reduce, BufferId, Region, Schedule, Step};

/// A channel: (source, destination, tag).
type Chan = (usize, usize, u32);

#[derive(Default)]
struct Channel {
    /// Messages in arrival order (taken when they land).
    msgs: Vec<Option<Vec<u8>>>,
    /// Receives posted on it so far.
    claimed: usize,
}

struct RankRun {
    sched: Schedule,
    send: Vec<u8>,
    recv: Vec<u8>,
    scratch: Vec<u8>,
    round: usize,
    posted: bool,
    /// (channel, message index, region) of the current round's receives.
    recvs: Vec<(Chan, usize, Region)>,
}

impl RankRun {
    fn buf(&self, b: BufferId) -> &[u8] {
        match b {
            BufferId::Send => &self.send,
            BufferId::Recv => &self.recv,
            BufferId::Scratch => &self.scratch,
        }
    }

    fn buf_mut(&mut self, b: BufferId) -> &mut [u8] {
        match b {
            BufferId::Send => &mut self.send,
            BufferId::Recv => &mut self.recv,
            BufferId::Scratch => &mut self.scratch,
        }
    }

    fn read(&self, r: Region) -> &[u8] {
        &self.buf(r.buf)[r.offset..r.end()]
    }

    fn done(&self) -> bool {
        self.round >= self.sched.rounds.len()
    }
}

/// Why a run failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RunError {
    /// A message's length differs from its receive's region.
    Mismatch {
        src: usize,
        dst: usize,
        sent: usize,
        expected: usize,
    },
    /// A reduction failed (or another step could not run).
    Step(String),
    /// A message to another node could not go: that node (world id) is lost.
    NodeLost(usize),
}

/// One collective's schedules of this node's ranks, in progress.
pub(super) struct Run {
    ranks: Vec<RankRun>,
    /// Local index of each rank of the communicator on this node.
    local: HashMap<usize, usize>,
    chans: HashMap<Chan, Channel>,
}

/// Where a remote step's message goes: `send(source, destination, tag,
/// data)`; `Err(node)` when that node is lost.
pub(super) type Remote<'a> = dyn FnMut(usize, usize, u32, Vec<u8>) -> Result<(), usize> + 'a;

impl Run {
    /// A run of `parts`: (schedule, send span, receive span) of each of this
    /// node's ranks (checked with `sim::check` against these lengths).
    pub(super) fn new(parts: Vec<(Schedule, Vec<u8>, Vec<u8>)>) -> Run {
        let local = parts
            .iter()
            .enumerate()
            .map(|(i, p)| (p.0.rank, i))
            .collect();
        let ranks = parts
            .into_iter()
            .map(|(sched, send, recv)| RankRun {
                scratch: vec![0xA5; sched.scratch_bytes],
                sched,
                send,
                recv,
                round: 0,
                posted: false,
                recvs: Vec::new(),
            })
            .collect();
        Run {
            ranks,
            local,
            chans: HashMap::new(),
        }
    }

    /// A message from another node's rank `src` to this node's `dst`.
    pub(super) fn deliver(&mut self, src: usize, dst: usize, tag: u32, data: Vec<u8>) {
        self.chans
            .entry((src, dst, tag))
            .or_default()
            .msgs
            .push(Some(data));
    }

    /// Whether every local rank finished its schedule.
    pub(super) fn done(&self) -> bool {
        self.ranks.iter().all(RankRun::done)
    }

    /// The ranks of other nodes whose messages a blocked receive waits for.
    pub(super) fn waiting_on(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .ranks
            .iter()
            .flat_map(|r| r.recvs.iter())
            .filter(|(c, at, _)| {
                !self.local.contains_key(&c.0)
                    && self.chans.get(c).is_none_or(|ch| ch.msgs.len() <= *at)
            })
            .map(|(c, _, _)| c.0)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Runs every step that can run; sends to other nodes go to `remote`.
    /// Returns whether every local rank finished.
    pub(super) fn advance(&mut self, remote: &mut Remote<'_>) -> Result<bool, RunError> {
        let mut progress = true;
        while progress {
            progress = false;
            for i in 0..self.ranks.len() {
                while self.step(i, remote)? {
                    progress = true;
                }
            }
        }
        Ok(self.done())
    }

    /// Posts rank `i`'s round or completes it; whether it moved.
    fn step(&mut self, i: usize, remote: &mut Remote<'_>) -> Result<bool, RunError> {
        let me = &mut self.ranks[i];
        if me.done() {
            return Ok(false);
        }
        let rank = me.sched.rank;
        if !me.posted {
            me.posted = true;
            let round = me.round;
            for s in 0..self.ranks[i].sched.rounds[round].steps.len() {
                match self.ranks[i].sched.rounds[round].steps[s] {
                    Step::Send { peer, region, tag } => {
                        let data = self.ranks[i].read(region).to_vec();
                        if self.local.contains_key(&peer) {
                            self.chans
                                .entry((rank, peer, tag))
                                .or_default()
                                .msgs
                                .push(Some(data));
                        } else {
                            remote(rank, peer, tag, data).map_err(RunError::NodeLost)?;
                        }
                    }
                    Step::Recv { peer, region, tag } => {
                        let ch = self.chans.entry((peer, rank, tag)).or_default();
                        let at = ch.claimed;
                        ch.claimed += 1;
                        self.ranks[i].recvs.push(((peer, rank, tag), at, region));
                    }
                    _ => {}
                }
            }
            return Ok(true);
        }
        let ready = self.ranks[i]
            .recvs
            .iter()
            .all(|(c, at, _)| self.chans.get(c).is_some_and(|ch| ch.msgs.len() > *at));
        if !ready {
            return Ok(false);
        }
        let me = &mut self.ranks[i];
        for (c, at, region) in std::mem::take(&mut me.recvs) {
            let data = self
                .chans
                .get_mut(&c)
                .and_then(|ch| ch.msgs[at].take())
                .unwrap_or_default();
            if data.len() != region.len {
                return Err(RunError::Mismatch {
                    src: c.0,
                    dst: c.1,
                    sent: data.len(),
                    expected: region.len,
                });
            }
            me.buf_mut(region.buf)[region.offset..region.end()].copy_from_slice(&data);
        }
        let round = me.round;
        for s in 0..me.sched.rounds[round].steps.len() {
            match me.sched.rounds[round].steps[s] {
                Step::Copy { src, dst } => {
                    let data = me.read(src).to_vec();
                    me.buf_mut(dst.buf)[dst.offset..dst.end()].copy_from_slice(&data);
                }
                Step::Reduce {
                    src,
                    dst,
                    op,
                    dtype,
                } => {
                    let data = me.read(src).to_vec();
                    apply_reduce(
                        op,
                        dtype,
                        &data,
                        &mut me.buf_mut(dst.buf)[dst.offset..dst.end()],
                    )
                    .map_err(|e| RunError::Step(format!("rank {rank} round {round}: {e}")))?;
                }
                _ => {}
            }
        }
        me.round += 1;
        me.posted = false;
        Ok(true)
    }

    /// The receive buffers of this node's ranks, in the order of `new`'s parts.
    pub(super) fn into_recvs(self) -> Vec<Vec<u8>> {
        self.ranks.into_iter().map(|r| r.recv).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hpc_collectives::{sim, Collective, DataType, Options, ReduceOp};

    /// Every rank's input for `coll`: a pattern by rank and byte.
    fn input(coll: &Collective, r: usize, n: usize) -> (Vec<u8>, Vec<u8>) {
        let (s, rv) = coll.buffer_bytes(r, n);
        let send = (0..s).map(|i| (r * 31 + i * 7) as u8 & 0x3f).collect();
        (send, vec![0; rv])
    }

    /// The collective split over `nodes` runs (rank r on node r % nodes), the
    /// messages between them carried by hand, against the simulator.
    fn split_matches_the_simulator(coll: Collective, n: usize, nodes: usize) {
        let opts = Options::default();
        let scheds: Vec<_> = (0..n)
            .map(|r| coll.schedule(r, n, &opts).unwrap())
            .collect();
        let ins: Vec<_> = (0..n).map(|r| input(&coll, r, n)).collect();
        let want = sim::run(
            &scheds,
            ins.iter()
                .map(|(s, r)| sim::RankBuffers {
                    send: s.clone(),
                    recv: r.clone(),
                })
                .collect(),
        )
        .unwrap();
        let mut runs: Vec<Run> = (0..nodes)
            .map(|k| {
                Run::new(
                    (0..n)
                        .filter(|r| r % nodes == k)
                        .map(|r| (scheds[r].clone(), ins[r].0.clone(), ins[r].1.clone()))
                        .collect(),
                )
            })
            .collect();
        let mut wire: Vec<(usize, usize, u32, Vec<u8>)> = Vec::new();
        for _ in 0..10_000 {
            let mut all = true;
            for run in runs.iter_mut() {
                let mut out = |s, d, t, v| {
                    wire.push((s, d, t, v));
                    Ok(())
                };
                all &= run.advance(&mut out).unwrap();
            }
            if all {
                break;
            }
            for (s, d, t, v) in wire.drain(..) {
                runs[d % nodes].deliver(s, d, t, v);
            }
        }
        for (k, run) in runs.into_iter().enumerate() {
            assert!(run.done(), "{coll:?} on {n} ranks, node {k} did not finish");
            for (r, got) in (0..n).filter(|r| r % nodes == k).zip(run.into_recvs()) {
                assert_eq!(got, want[r], "{coll:?} rank {r} of {n} on {nodes} nodes");
            }
        }
    }

    #[test]
    fn runs_split_over_nodes_give_the_simulators_results() {
        let d = DataType::I32;
        for (n, nodes) in [(2, 2), (3, 2), (5, 3), (8, 4)] {
            for coll in [
                Collective::Alltoall { count: 3, dtype: d },
                Collective::Allgather { count: 2, dtype: d },
                Collective::Allreduce {
                    count: 5,
                    dtype: d,
                    op: ReduceOp::Max,
                },
                Collective::Broadcast {
                    root: n - 1,
                    count: 4,
                    dtype: d,
                },
                Collective::Barrier,
            ] {
                split_matches_the_simulator(coll, n, nodes);
            }
        }
    }

    #[test]
    fn a_message_of_the_wrong_length_is_a_mismatch() {
        let coll = Collective::Allgather {
            count: 1,
            dtype: DataType::I32,
        };
        let opts = Options::default();
        let s = coll.schedule(0, 2, &opts).unwrap();
        let mut run = Run::new(vec![(s, vec![1; 4], vec![0; 8])]);
        let mut sent = 0;
        let mut out = |_, _, _, _| {
            sent += 1;
            Ok(())
        };
        assert!(!run.advance(&mut out).unwrap());
        assert_eq!(run.waiting_on(), vec![1]);
        run.deliver(1, 0, step_tag(&run), vec![9; 5]);
        let e = run.advance(&mut |_, _, _, _| Ok(())).unwrap_err();
        assert!(
            matches!(
                e,
                RunError::Mismatch {
                    src: 1,
                    dst: 0,
                    sent: 5,
                    expected: 4
                }
            ),
            "{e:?}"
        );
        assert_eq!(sent, 1);
    }

    /// The tag of the receive rank 0 waits on.
    fn step_tag(run: &Run) -> u32 {
        run.ranks[0].recvs[0].0 .2
    }
}
