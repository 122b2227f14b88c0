//! The DPU proxy's executor for a collective whose ranks span nodes: the
//! schedules of this node's ranks run in the proxy's memory, and the steps
//! whose peer is on another node become messages to and from that node's
//! proxy.
//!
//! Each rank's schedule runs on an [`interp::Machine`](hpc_collectives::interp),
//! the interpreter the simulator and the other engines run; messages wait in
//! one [`Matcher`] by (source, destination, tag) and are taken in arrival
//! order. Sends are eager (they complete when posted): a schedule that
//! completes under the simulator's rendezvous sends completes under eager
//! ones with the same results, since in both a send's data is what its
//! region held when it was posted.

use std::collections::HashMap;

use hpc_collectives::interp::{Action, Buffers, InterpError, Machine, Matcher};
use hpc_collectives::Schedule;

/// A channel: (source, destination, tag).
type Chan = (usize, usize, u32);

struct RankRun {
    sched: Schedule,
    /// Its buffers in the proxy's memory, the interpreter's memory.
    mem: Buffers,
    m: Machine,
}

impl RankRun {
    fn done(&self) -> bool {
        self.sched.rounds.is_empty() || self.m.is_done()
    }
}

/// Why a run failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
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
pub struct Run {
    ranks: Vec<RankRun>,
    /// Local index of each rank of the communicator on this node.
    local: HashMap<usize, usize>,
    /// Messages sent (by this node's ranks or delivered from other nodes)
    /// and not received yet.
    msgs: Matcher<Chan, Vec<u8>>,
}

/// Where a remote step's message goes: `send(source, destination, tag,
/// data)`; `Err(node)` when that node is lost.
pub type Remote<'a> = dyn FnMut(usize, usize, u32, Vec<u8>) -> Result<(), usize> + 'a;

impl Run {
    /// A run of `parts`: (schedule, send span, receive span) of each of this
    /// node's ranks (checked with `sim::check` against these lengths). Fails
    /// with the bytes asked for where a rank's scratch cannot be allocated.
    pub fn new(parts: Vec<(Schedule, Vec<u8>, Vec<u8>)>) -> Result<Run, u64> {
        let local = parts
            .iter()
            .enumerate()
            .map(|(i, p)| (p.0.rank, i))
            .collect();
        let ranks = parts
            .into_iter()
            .map(|(sched, send, recv)| {
                let n = sched.scratch_bytes;
                let scratch = crate::memory::try_filled(n, 0xA5).map_err(|_| n as u64)?;
                Ok(RankRun {
                    mem: Buffers {
                        send,
                        recv,
                        scratch,
                    },
                    m: Machine::new(&sched, false),
                    sched,
                })
            })
            .collect::<Result<_, u64>>()?;
        Ok(Run {
            ranks,
            local,
            msgs: Matcher::new(),
        })
    }

    /// A message from another node's rank `src` to this node's `dst`.
    pub fn deliver(&mut self, src: usize, dst: usize, tag: u32, data: Vec<u8>) {
        self.msgs.arrived((src, dst, tag), data);
    }

    /// Whether every local rank finished its schedule.
    pub fn done(&self) -> bool {
        self.ranks.iter().all(RankRun::done)
    }

    /// The ranks of other nodes whose messages a blocked receive waits for.
    pub fn waiting_on(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .ranks
            .iter()
            .flat_map(|r| {
                let rank = r.sched.rank;
                r.m.open_recvs().iter().map(move |o| (o.peer, rank, o.tag))
            })
            .filter(|c| !self.local.contains_key(&c.0) && self.msgs.peek(c).is_none())
            .map(|c| c.0)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Runs every step that can run; sends to other nodes go to `remote`.
    /// Returns whether every local rank finished.
    pub fn advance(&mut self, remote: &mut Remote<'_>) -> Result<bool, RunError> {
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

    /// Carries out rank `i`'s next action; whether there was one.
    fn step(&mut self, i: usize, remote: &mut Remote<'_>) -> Result<bool, RunError> {
        let me = &mut self.ranks[i];
        let rank = me.sched.rank;
        let action =
            me.m.poll(&me.sched, &mut me.mem, &mut self.msgs, |peer, tag| {
                (peer, rank, tag)
            })
            .map_err(|e| match e {
                InterpError::SizeMismatch {
                    peer,
                    sent,
                    expected,
                    ..
                } => RunError::Mismatch {
                    src: peer,
                    dst: rank,
                    sent,
                    expected,
                },
                InterpError::Memory(why) => {
                    RunError::Step(format!("rank {rank} round {}: {why}", me.m.round()))
                }
            })?;
        match action {
            None => return Ok(false),
            Some(Action::Complete | Action::Recv { .. }) => {}
            Some(Action::Send { peer, tag, region }) => {
                let data = me
                    .mem
                    .read(region)
                    .map_err(|e| RunError::Step(e.to_string()))?
                    .to_vec();
                if self.local.contains_key(&peer) {
                    self.msgs.arrived((rank, peer, tag), data);
                } else {
                    remote(rank, peer, tag, data).map_err(RunError::NodeLost)?;
                }
                me.m.sent(peer, tag);
            }
            Some(Action::Land {
                region, arrival, ..
            }) => {
                me.mem
                    .write(region)
                    .map_err(|e| RunError::Step(e.to_string()))?
                    .copy_from_slice(&arrival);
                me.m.copied(arrival.len());
            }
        }
        Ok(true)
    }

    /// The receive buffers of this node's ranks, in the order of `new`'s parts.
    pub fn into_recvs(self) -> Vec<Vec<u8>> {
        self.ranks.into_iter().map(|r| r.mem.recv).collect()
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
                .unwrap()
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
        let mut run = Run::new(vec![(s, vec![1; 4], vec![0; 8])]).unwrap();
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
        run.ranks[0].m.open_recvs()[0].tag
    }
}
