//! An in-memory executor for verifying schedules.
//!
//! [`run`] executes one schedule per rank against per-rank buffers, with
//! the semantics an engine must provide (see [`crate::schedule`]):
//!
//! * a rank posts all steps of its current round at once; a send's data is
//!   captured when posted;
//! * messages match by `(source, destination, tag)` in posting order;
//! * **rendezvous**: a send completes only once the matching receive has
//!   been posted, and a receive once the matching send has (its data lands
//!   then); a round completes when all its sends and receives have; its
//!   local copies and reductions run when it is posted;
//! * each rank's schedule runs on an [`interp::Machine`](crate::interp),
//!   the interpreter that the engines of `hpc-comm` drive too;
//! * if a full pass over the ranks makes no progress, the run fails with
//!   [`SimError::Deadlock`].
//!
//! Before running, every schedule is checked statically: peers in range
//! and not the rank itself, regions inside their buffers, the send buffer
//! never written, and no conflicting regions within a round (a region
//! written by one step overlapping any other region of the round).
//! Scratch buffers start filled with `0xA5` so that reading scratch before
//! writing it shows up as wrong results.

use std::collections::HashMap;

use crate::interp::{
    Action, Buffers, InterpError, Local, LocalError, Machine, Matcher, OutOfBounds,
};
use crate::op::{CustomOps, ReduceError};
use crate::schedule::{BufferId, Region, Schedule, Step};

/// One rank's user buffers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankBuffers {
    /// Send (input) buffer; never modified.
    pub send: Vec<u8>,
    /// Receive (output) buffer, with its initial contents.
    pub recv: Vec<u8>,
}

/// Counters of a simulated run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages sent, all ranks.
    pub messages: usize,
    /// Bytes sent, all ranks.
    pub bytes: usize,
    /// Largest number of rounds of any rank.
    pub max_rounds: usize,
    /// Largest number of bytes sent by one rank.
    pub max_bytes_per_rank: usize,
}

/// The result of [`run_with`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Final receive buffers, by rank.
    pub recv: Vec<Vec<u8>>,
    /// Counters.
    pub stats: Stats,
}

/// Where a deadlocked rank is stuck.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// The rank.
    pub rank: usize,
    /// Its current round.
    pub round: usize,
    /// A step of that round that cannot complete.
    pub waiting_on: Step,
}

/// Why a simulated run failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// The number of schedules and of buffers differ.
    #[error("{schedules} schedules but {inputs} buffer sets")]
    WrongCount {
        /// Schedules given.
        schedules: usize,
        /// Buffer sets given.
        inputs: usize,
    },
    /// Schedule `index` is not for rank `index` of `schedules.len()` ranks.
    #[error("schedule {index} is for rank {rank} of {size}")]
    WrongRank {
        /// Position in the slice.
        index: usize,
        /// Rank in the schedule.
        rank: usize,
        /// Size in the schedule.
        size: usize,
    },
    /// A peer is out of range or the rank itself.
    #[error("rank {rank} round {round}: invalid peer {peer}")]
    BadPeer {
        /// The rank.
        rank: usize,
        /// The round.
        round: usize,
        /// The peer.
        peer: usize,
    },
    /// A region does not fit its buffer.
    #[error("rank {rank} round {round}: region {region} exceeds its buffer of {buf_len} bytes")]
    OutOfBounds {
        /// The rank.
        rank: usize,
        /// The round.
        round: usize,
        /// The region.
        region: Region,
        /// The buffer's length.
        buf_len: usize,
    },
    /// A step writes the send buffer.
    #[error("rank {rank} round {round}: writes the send buffer at {region}")]
    WriteToSendBuffer {
        /// The rank.
        rank: usize,
        /// The round.
        round: usize,
        /// The region.
        region: Region,
    },
    /// Two steps of one round conflict (or a step's source and destination
    /// overlap).
    #[error("rank {rank} round {round}: {written} is written while {other} is accessed")]
    Conflict {
        /// The rank.
        rank: usize,
        /// The round.
        round: usize,
        /// The written region.
        written: Region,
        /// The overlapping region.
        other: Region,
    },
    /// A copy or reduce whose regions differ in length.
    #[error("rank {rank} round {round}: local step with regions of different length")]
    LengthMismatch {
        /// The rank.
        rank: usize,
        /// The round.
        round: usize,
    },
    /// A message's size differs from the receive's region.
    #[error("message {src} -> {dst} tag {tag}: sent {sent} bytes, receive expects {expected}")]
    SizeMismatch {
        /// Sender.
        src: usize,
        /// Receiver.
        dst: usize,
        /// Tag.
        tag: u32,
        /// Bytes sent.
        sent: usize,
        /// Bytes the receive region holds.
        expected: usize,
    },
    /// No rank can make progress. The message names the first blocked rank's
    /// round and step in words (it was Rust's debug form: "first
    /// Some(Blocked { rank: 0, … })").
    #[error(
        "deadlock: {} rank(s) blocked{}",
        blocked.len(),
        blocked.first().map_or(String::new(), |b| format!(
            ", first rank {} in round {} at `{}`",
            b.rank, b.round, b.waiting_on
        ))
    )]
    Deadlock {
        /// The blocked ranks.
        blocked: Vec<Blocked>,
    },
    /// A schedule's scratch buffer cannot be allocated (a schedule's fields
    /// are public: a forged `scratch_bytes` of `usize::MAX` panicked with
    /// "capacity overflow", one of 64 TiB aborted the process).
    #[error("rank {rank}: its scratch buffer of {bytes} bytes cannot be allocated")]
    Scratch {
        /// The rank.
        rank: usize,
        /// Its schedule's `scratch_bytes`.
        bytes: usize,
    },
    /// A reduction failed.
    #[error("rank {rank} round {round}: {source}")]
    Reduce {
        /// The rank.
        rank: usize,
        /// The round.
        round: usize,
        /// The kernel's error.
        source: ReduceError,
    },
}

/// Runs `schedules[r]` on rank `r` with `inputs[r]`, built-in operations
/// only, and returns the final receive buffers.
///
/// ```
/// use hpc_collectives::{algo, sim};
///
/// let size = 5;
/// let schedules: Vec<_> = (0..size).map(|r| algo::bcast::binomial(r, size, 2, 3)).collect();
/// let inputs = (0..size)
///     .map(|r| sim::RankBuffers { send: vec![], recv: if r == 2 { vec![7, 8, 9] } else { vec![0; 3] } })
///     .collect();
/// let out = sim::run(&schedules, inputs).unwrap();
/// assert!(out.iter().all(|b| b == &[7, 8, 9]));
/// ```
pub fn run(schedules: &[Schedule], inputs: Vec<RankBuffers>) -> Result<Vec<Vec<u8>>, SimError> {
    run_with(schedules, inputs, &CustomOps::new()).map(|o| o.recv)
}

/// Checks one schedule statically against buffer lengths (see the module
/// docs for the rules).
pub fn check(sched: &Schedule, send_len: usize, recv_len: usize) -> Result<(), SimError> {
    let rank = sched.rank;
    let len_of = |b: BufferId| match b {
        BufferId::Send => send_len,
        BufferId::Recv => recv_len,
        BufferId::Scratch => sched.scratch_bytes,
    };
    for (round, r) in sched.rounds.iter().enumerate() {
        let mut accesses: Vec<(Region, bool, usize)> = Vec::new();
        for (i, step) in r.steps.iter().enumerate() {
            if let Step::Send { peer, .. } | Step::Recv { peer, .. } = *step {
                if peer >= sched.size || peer == rank {
                    return Err(SimError::BadPeer { rank, round, peer });
                }
            }
            if let Step::Copy { src, dst } | Step::Reduce { src, dst, .. } = *step {
                if src.len != dst.len {
                    return Err(SimError::LengthMismatch { rank, round });
                }
                if src.overlaps(&dst) {
                    return Err(SimError::Conflict {
                        rank,
                        round,
                        written: dst,
                        other: src,
                    });
                }
            }
            let written = step.written();
            for region in step.read().chain(written) {
                let buf_len = len_of(region.buf);
                if region.end() > buf_len {
                    return Err(SimError::OutOfBounds {
                        rank,
                        round,
                        region,
                        buf_len,
                    });
                }
            }
            if let Some(w) = written {
                if w.buf == BufferId::Send {
                    return Err(SimError::WriteToSendBuffer {
                        rank,
                        round,
                        region: w,
                    });
                }
                accesses.push((w, true, i));
            }
            for rd in step.read() {
                if Some(rd) != written {
                    accesses.push((rd, false, i));
                }
            }
        }
        // Sweep the accesses in address order; only neighbours that start
        // before the current one ends can overlap it.
        let key = |b: BufferId| match b {
            BufferId::Send => 0u8,
            BufferId::Recv => 1,
            BufferId::Scratch => 2,
        };
        accesses.retain(|(r, _, _)| r.len > 0);
        accesses.sort_unstable_by_key(|(r, _, _)| (key(r.buf), r.offset));
        for (a, (ra, wa, ia)) in accesses.iter().enumerate() {
            for (rb, wb, ib) in &accesses[a + 1..] {
                if !ra.overlaps(rb) {
                    break;
                }
                if ia != ib && (*wa || *wb) {
                    let (written, other) = if *wa { (*ra, *rb) } else { (*rb, *ra) };
                    return Err(SimError::Conflict {
                        rank,
                        round,
                        written,
                        other,
                    });
                }
            }
        }
    }
    Ok(())
}

/// A message stream: (source, destination, tag).
type Chan = (usize, usize, u32);

/// Posting counts of one stream, for the rendezvous rule.
#[derive(Default)]
struct Channel {
    sends: usize,
    recvs: usize,
}

/// Every region of a schedule lies in its buffer: [`check`] ran first.
const CHECKED: &str = "regions were checked before the run";

/// Like [`run`], with a registry for [`ReduceOp::Custom`](crate::ReduceOp::Custom)
/// operations, and returning [`Stats`].
///
/// Each rank's schedule runs on an [`interp::Machine`](crate::interp::Machine),
/// the interpreter the engines run; this driver adds the rendezvous rule and
/// the deadlock check.
pub fn run_with(
    schedules: &[Schedule],
    inputs: Vec<RankBuffers>,
    custom: &CustomOps,
) -> Result<Outcome, SimError> {
    let size = schedules.len();
    if inputs.len() != size {
        return Err(SimError::WrongCount {
            schedules: size,
            inputs: inputs.len(),
        });
    }
    let mut stats = Stats::default();
    for (index, (s, input)) in schedules.iter().zip(&inputs).enumerate() {
        if s.rank != index || s.size != size {
            return Err(SimError::WrongRank {
                index,
                rank: s.rank,
                size: s.size,
            });
        }
        check(s, input.send.len(), input.recv.len())?;
        stats.max_rounds = stats.max_rounds.max(s.rounds.len());
        stats.messages += s.messages_sent();
        stats.bytes += s.bytes_sent();
        stats.max_bytes_per_rank = stats.max_bytes_per_rank.max(s.bytes_sent());
    }

    let mut ranks: Vec<Buffers> = Vec::with_capacity(size);
    for (b, s) in inputs.into_iter().zip(schedules) {
        let mut scratch = Vec::new();
        scratch
            .try_reserve_exact(s.scratch_bytes)
            .map_err(|_| SimError::Scratch {
                rank: s.rank,
                bytes: s.scratch_bytes,
            })?;
        scratch.resize(s.scratch_bytes, 0xA5);
        ranks.push(Buffers {
            send: b.send,
            recv: b.recv,
            scratch,
        });
    }
    let mut machines: Vec<Machine> = schedules.iter().map(|s| Machine::new(s, false)).collect();
    // Messages sent and not received yet (a send's data is captured when posted).
    let mut matcher: Matcher<Chan, Vec<u8>> = Matcher::new();
    let mut chans: HashMap<Chan, Channel> = HashMap::new();
    let mut remaining = size;
    // Ranks that may be able to move, and whether each is in the list.
    let mut work: Vec<usize> = (0..size).rev().collect();
    let mut queued = vec![true; size];

    while let Some(rank) = work.pop() {
        queued[rank] = false;
        let mut wake = |r: usize, work: &mut Vec<usize>| {
            if !queued[r] {
                queued[r] = true;
                work.push(r);
            }
        };
        loop {
            let sched = &schedules[rank];
            let mut mem = Local {
                bufs: &mut ranks[rank],
                custom,
            };
            let m = &mut machines[rank];
            let action = m
                .poll(sched, &mut mem, &mut matcher, |peer, tag| (peer, rank, tag))
                .map_err(|e| match e {
                    InterpError::SizeMismatch {
                        peer,
                        tag,
                        sent,
                        expected,
                    } => SimError::SizeMismatch {
                        src: peer,
                        dst: rank,
                        tag,
                        sent,
                        expected,
                    },
                    InterpError::Memory(LocalError::Reduce(source)) => SimError::Reduce {
                        rank,
                        round: m.round(),
                        source,
                    },
                    // Not after `check`; named all the same.
                    InterpError::Memory(
                        LocalError::OutOfBounds(OutOfBounds(region))
                        | LocalError::Lengths { dst: region, .. },
                    ) => SimError::OutOfBounds {
                        rank,
                        round: m.round(),
                        region,
                        buf_len: ranks[rank].buf(region.buf).len(),
                    },
                })?;
            match action {
                None => break,
                Some(Action::Complete) => remaining -= 1,
                Some(Action::Send { peer, tag, region }) => {
                    matcher.arrived(
                        (rank, peer, tag),
                        ranks[rank].read(region).expect(CHECKED).to_vec(),
                    );
                    let ch = chans.entry((rank, peer, tag)).or_default();
                    let seq = ch.sends;
                    ch.sends += 1;
                    // Rendezvous: done once the matching receive is posted.
                    if ch.recvs > seq {
                        machines[rank].sent(peer, tag);
                    }
                    wake(peer, &mut work);
                }
                Some(Action::Recv { peer, tag, .. }) => {
                    let ch = chans.entry((peer, rank, tag)).or_default();
                    let seq = ch.recvs;
                    ch.recvs += 1;
                    if ch.sends > seq {
                        // The sender was waiting for this receive.
                        machines[peer].sent(rank, tag);
                        wake(peer, &mut work);
                    }
                }
                Some(Action::Land {
                    region, arrival, ..
                }) => {
                    ranks[rank]
                        .write(region)
                        .expect(CHECKED)
                        .copy_from_slice(&arrival);
                    machines[rank].copied(arrival.len());
                }
            }
        }
    }

    if remaining > 0 {
        let blocked = schedules
            .iter()
            .zip(&machines)
            .filter(|(_, m)| !m.is_done())
            .map(|(s, m)| Blocked {
                rank: s.rank,
                round: m.round(),
                waiting_on: m.waiting_on(s).expect("a blocked rank waits on something"),
            })
            .collect();
        return Err(SimError::Deadlock { blocked });
    }
    Ok(Outcome {
        recv: ranks.into_iter().map(|r| r.recv).collect(),
        stats,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::{Algorithm, CollectiveKind};
    use crate::schedule::Round;

    fn sched(rank: usize, size: usize, rounds: Vec<Vec<Step>>) -> Schedule {
        Schedule {
            kind: CollectiveKind::Barrier,
            algorithm: Algorithm::Dissemination,
            rank,
            size,
            send_bytes: 0,
            recv_bytes: 0,
            scratch_bytes: 8,
            rounds: rounds.into_iter().map(|steps| Round { steps }).collect(),
        }
    }

    fn send(peer: usize, region: Region, tag: u32) -> Step {
        Step::Send { peer, region, tag }
    }

    fn recv(peer: usize, region: Region, tag: u32) -> Step {
        Step::Recv { peer, region, tag }
    }

    fn copy(src: Region, dst: Region) -> Step {
        Step::Copy { src, dst }
    }

    fn bufs(n: usize) -> Vec<RankBuffers> {
        (0..n)
            .map(|_| RankBuffers {
                send: vec![1; 8],
                recv: vec![0; 8],
            })
            .collect()
    }

    /// Two ranks, each with a round of `first` steps towards the other, then
    /// a round of `then`.
    fn exchange(
        first: impl Fn(usize) -> Vec<Step>,
        then: impl Fn(usize) -> Vec<Step>,
    ) -> Vec<Schedule> {
        (0..2)
            .map(|r| sched(r, 2, vec![first(1 - r), then(1 - r)]))
            .collect()
    }

    #[test]
    fn detects_deadlock() {
        // Both ranks receive first, then send: classic deadlock.
        let s = exchange(
            |peer| vec![recv(peer, Region::recv(0, 4), 0)],
            |peer| vec![send(peer, Region::send(0, 4), 0)],
        );
        let err = run(&s, bufs(2)).unwrap_err();
        assert!(
            matches!(err, SimError::Deadlock { ref blocked } if blocked.len() == 2),
            "{err}"
        );
    }

    /// A deadlock is said in words: the first blocked rank, its round and
    /// step as a schedule prints it (it was Rust's debug form, "first
    /// Some(Blocked { rank: 0, round: 0, waiting_on: Recv { … } })").
    #[test]
    fn a_deadlock_is_said_in_words() {
        let s = exchange(
            |peer| vec![recv(peer, Region::recv(0, 4), 0)],
            |peer| vec![send(peer, Region::send(0, 4), 0)],
        );
        let e = run(&s, bufs(2)).unwrap_err().to_string();
        assert!(!e.contains("Some(") && !e.contains("Blocked {"), "{e}");
        assert!(
            e.starts_with("deadlock: 2 rank(s) blocked, first rank 0 in round 0 at `recv"),
            "{e}"
        );
        assert!(e.contains("recv[0..4] 4 B tag 0`"), "{e}");
    }

    /// A schedule whose scratch cannot be allocated (its fields are public:
    /// forged) is a typed error: `usize::MAX` bytes panicked with "capacity
    /// overflow" and 64 TiB aborted the process ("memory allocation of
    /// 70368744177664 bytes failed").
    #[test]
    fn a_scratch_no_machine_holds_is_an_error_not_an_abort() {
        for bytes in [usize::MAX, 1 << 46] {
            let mut s = exchange(
                |peer| vec![send(peer, Region::send(0, 4), 0)],
                |peer| vec![recv(peer, Region::recv(0, 4), 0)],
            );
            s[1].scratch_bytes = bytes;
            assert_eq!(
                run(&s, bufs(2)).unwrap_err(),
                SimError::Scratch { rank: 1, bytes }
            );
        }
    }

    #[test]
    fn rendezvous_send_waits_for_recv() {
        // Both send first (separate round), then receive: deadlocks under
        // rendezvous semantics.
        let s = exchange(
            |peer| vec![send(peer, Region::send(0, 4), 0)],
            |peer| vec![recv(peer, Region::recv(0, 4), 0)],
        );
        assert!(matches!(run(&s, bufs(2)), Err(SimError::Deadlock { .. })));
    }

    #[test]
    fn detects_size_mismatch_and_tags() {
        let s = vec![
            sched(0, 2, vec![vec![send(1, Region::send(0, 4), 3)]]),
            sched(1, 2, vec![vec![recv(0, Region::recv(0, 5), 3)]]),
        ];
        assert_eq!(
            run(&s, bufs(2)).unwrap_err(),
            SimError::SizeMismatch {
                src: 0,
                dst: 1,
                tag: 3,
                sent: 4,
                expected: 5
            }
        );
        // A different tag never matches.
        let s = vec![
            sched(0, 2, vec![vec![send(1, Region::send(0, 4), 3)]]),
            sched(1, 2, vec![vec![recv(0, Region::recv(0, 4), 4)]]),
        ];
        assert!(matches!(run(&s, bufs(2)), Err(SimError::Deadlock { .. })));
    }

    #[test]
    fn static_checks() {
        // Rank 0 of two runs `steps` in one round; rank 1 nothing.
        let one = |steps| run(&[sched(0, 2, vec![steps]), sched(1, 2, vec![])], bufs(2));
        let e = one(vec![send(0, Region::send(0, 1), 0)]);
        assert!(matches!(e, Err(SimError::BadPeer { .. })));
        let e = one(vec![copy(Region::recv(0, 4), Region::send(0, 4))]);
        assert!(matches!(e, Err(SimError::WriteToSendBuffer { .. })));
        let e = one(vec![copy(Region::send(0, 9), Region::recv(0, 9))]);
        assert!(matches!(e, Err(SimError::OutOfBounds { .. })));
        let e = one(vec![
            copy(Region::send(0, 4), Region::recv(0, 4)),
            copy(Region::recv(2, 4), Region::scratch(0, 4)),
        ]);
        assert!(matches!(e, Err(SimError::Conflict { .. })));
        let e = one(vec![copy(Region::recv(0, 4), Region::recv(2, 4))]);
        assert!(matches!(e, Err(SimError::Conflict { .. })));
        let e = run(&[sched(1, 2, vec![])], bufs(1));
        assert!(matches!(e, Err(SimError::WrongRank { .. })));
        let e = run(&[sched(0, 1, vec![])], bufs(2));
        assert!(matches!(e, Err(SimError::WrongCount { .. })));
    }

    #[test]
    fn fifo_matching() {
        let s = vec![
            sched(
                0,
                2,
                vec![vec![
                    send(1, Region::send(0, 2), 0),
                    send(1, Region::recv(0, 2), 0),
                ]],
            ),
            sched(
                1,
                2,
                vec![vec![
                    recv(0, Region::recv(0, 2), 0),
                    recv(0, Region::recv(2, 2), 0),
                ]],
            ),
        ];
        let out = run(&s, bufs(2)).unwrap();
        assert_eq!(out[1][..4], [1, 1, 0, 0]);
    }
}
