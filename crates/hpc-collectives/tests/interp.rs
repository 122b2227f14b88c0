//! The interpreter on its own: a driver that delivers messages in pieces
//! and out of order across streams, checked against the simulator.

use std::collections::VecDeque;

use hpc_collectives::interp::{
    Action, Arrival, Buffers, InterpError, LocalError, Machine, Matcher, OutOfBounds,
};
use hpc_collectives::sim::{self, RankBuffers};
use hpc_collectives::{
    Algorithm, BufferId, Collective, CollectiveKind, DataType, Options, ReduceOp, Region, Round,
    Schedule, Step,
};

/// A piece of a message: the whole message's length and this piece's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Piece {
    total: usize,
    bytes: Vec<u8>,
}

impl Arrival for Piece {
    fn total(&self) -> usize {
        self.total
    }
}

/// xorshift64: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

type Key = (usize, usize, u32);

/// Runs `scheds` with eager sends; messages travel as pieces of at most
/// `piece` bytes, and each pass hands the matcher a random choice of the
/// pieces in flight (in order within a stream, out of order across
/// streams). Ranks progress in random order.
fn run_shuffled(
    scheds: &[Schedule],
    inputs: &[RankBuffers],
    piece: usize,
    seed: u64,
) -> Result<Vec<Vec<u8>>, InterpError<LocalError>> {
    let size = scheds.len();
    let mut rng = Rng(seed | 1);
    let mut bufs: Vec<Buffers> = inputs
        .iter()
        .zip(scheds)
        .map(|(b, s)| Buffers {
            send: b.send.clone(),
            recv: b.recv.clone(),
            scratch: vec![0xA5; s.scratch_bytes],
        })
        .collect();
    let mut machines: Vec<Machine> = scheds.iter().map(|s| Machine::new(s, false)).collect();
    let mut matcher: Matcher<Key, Piece> = Matcher::new();
    // Pieces in flight, by stream.
    let mut wire: Vec<(Key, VecDeque<Piece>)> = Vec::new();
    let mut done = 0;
    let mut idle = 0;
    while done < size {
        // Deliver some of what is in flight.
        let mut i = 0;
        while i < wire.len() {
            if rng.below(3) > 0 {
                let (k, q) = &mut wire[i];
                let p = q.pop_front().expect("queues in flight are not empty");
                matcher.arrived(*k, p);
                if q.is_empty() {
                    wire.swap_remove(i);
                    continue;
                }
            }
            i += 1;
        }
        let mut moved = false;
        let start = rng.below(size);
        for j in 0..size {
            let rank = (start + j) % size;
            loop {
                let m = &mut machines[rank];
                match m.poll(&scheds[rank], &mut bufs[rank], &mut matcher, |p, t| {
                    (p, rank, t)
                })? {
                    None => break,
                    Some(Action::Complete) => done += 1,
                    Some(Action::Send { peer, tag, region }) => {
                        let data = bufs[rank]
                            .read(region)
                            .expect("a send's region lies in its buffer");
                        let total = data.len();
                        let mut q: VecDeque<Piece> = data
                            .chunks(piece)
                            .map(|c| Piece {
                                total,
                                bytes: c.to_vec(),
                            })
                            .collect();
                        if q.is_empty() {
                            q.push_back(Piece {
                                total: 0,
                                bytes: Vec::new(),
                            });
                        }
                        let k = (rank, peer, tag);
                        match wire.iter_mut().find(|(w, _)| *w == k) {
                            Some((_, w)) => w.extend(q),
                            None => wire.push((k, q)),
                        }
                        assert!(m.sent(peer, tag));
                    }
                    Some(Action::Recv { .. }) => {}
                    Some(Action::Land {
                        region,
                        got,
                        arrival,
                        ..
                    }) => {
                        let n = arrival.bytes.len();
                        let at = region.offset + got;
                        bufs[rank].buf_mut(region.buf)[at..at + n].copy_from_slice(&arrival.bytes);
                        m.copied(n);
                    }
                }
                moved = true;
            }
        }
        idle = if moved { 0 } else { idle + 1 };
        assert!(
            idle < 1000 || !wire.is_empty(),
            "no progress: {} of {size} done",
            done
        );
    }
    assert!(wire.is_empty() && matcher.is_empty(), "messages left over");
    Ok(bufs.into_iter().map(|b| b.recv).collect())
}

fn inputs(c: &Collective, p: usize, seed: u64) -> Vec<RankBuffers> {
    let mut rng = Rng(seed | 1);
    (0..p)
        .map(|r| {
            let (s, v) = c.buffer_bytes(r, p);
            // Small integers: sums of every dtype stay exact.
            let mut fill = |n: usize| -> Vec<u8> {
                match c.dtype() {
                    Some(DataType::F32) => (0..n / 4)
                        .flat_map(|_| (rng.below(8) as f32).to_ne_bytes())
                        .collect(),
                    Some(DataType::F64) => (0..n / 8)
                        .flat_map(|_| (rng.below(8) as f64).to_ne_bytes())
                        .collect(),
                    _ => (0..n).map(|_| rng.below(8) as u8).collect(),
                }
            };
            RankBuffers {
                send: fill(s),
                recv: fill(v),
            }
        })
        .collect()
}

fn collectives(p: usize, n: usize) -> Vec<Collective> {
    use {DataType as D, ReduceOp as O};
    let root = p / 2;
    vec![
        Collective::Barrier,
        Collective::Broadcast {
            root,
            count: n,
            dtype: D::U8,
        },
        Collective::Gather {
            root,
            count: n,
            dtype: D::U8,
        },
        Collective::Scatter {
            root,
            count: n,
            dtype: D::U8,
        },
        Collective::Reduce {
            root,
            count: n,
            dtype: D::I32,
            op: O::Sum,
        },
        Collective::Allgather {
            count: n,
            dtype: D::U8,
        },
        Collective::Allgatherv {
            counts: (0..p).map(|r| (r * 7 + n) % (n + 1)).collect(),
            dtype: D::U8,
        },
        Collective::Alltoall {
            count: n,
            dtype: D::U8,
        },
        Collective::Allreduce {
            count: n,
            dtype: D::F32,
            op: O::Sum,
        },
        Collective::Allreduce {
            count: n,
            dtype: D::F64,
            op: O::Max,
        },
        Collective::ReduceScatterBlock {
            count: n,
            dtype: D::I32,
            op: O::Sum,
        },
        Collective::ReduceScatter {
            counts: (0..p).map(|r| (r * 5 + n) % (n + 1)).collect(),
            dtype: D::I32,
            op: O::Sum,
        },
    ]
}

/// A rank's buffers: `send`, a zeroed receive buffer of `recv` bytes, no scratch.
fn buffers(send: Vec<u8>, recv: usize) -> Buffers {
    Buffers {
        send,
        recv: vec![0; recv],
        scratch: vec![],
    }
}

#[test]
fn every_collective_and_algorithm_matches_the_simulator_out_of_order_and_in_pieces() {
    let mut cases = 0;
    for p in [1usize, 2, 3, 4, 5, 7, 8] {
        for n in [0usize, 1, 7, 100, 1000] {
            for c in collectives(p, n) {
                for &a in c.kind().algorithms() {
                    let scheds: Vec<Schedule> = (0..p)
                        .map(|r| c.schedule(r, p, &Options::with_algorithm(a)).unwrap())
                        .collect();
                    let seed = (p * 1000 + n) as u64;
                    let ins = inputs(&c, p, seed);
                    let want = sim::run(&scheds, ins.clone()).unwrap();
                    for piece in [5usize, 64, 1 << 20] {
                        let got = run_shuffled(&scheds, &ins, piece, seed ^ piece as u64)
                            .unwrap_or_else(|e| panic!("{c:?} {a} p {p}: {e}"));
                        assert_eq!(got, want, "{c:?} {a} p {p} n {n} piece {piece}");
                        cases += 1;
                    }
                }
            }
        }
    }
    assert!(cases > 1000, "only {cases} cases");
}

/// Rank 0 sends `len` bytes with tag 3 to rank 1, which expects `want`.
fn pair(len: usize, want: usize) -> Vec<Schedule> {
    let mk = |rank, steps| Schedule {
        kind: CollectiveKind::Barrier,
        algorithm: Algorithm::Dissemination,
        rank,
        size: 2,
        send_bytes: 8,
        recv_bytes: 8,
        scratch_bytes: 0,
        rounds: vec![Round { steps }],
    };
    vec![
        mk(
            0,
            vec![Step::Send {
                peer: 1,
                region: Region::send(0, len),
                tag: 3,
            }],
        ),
        mk(
            1,
            vec![Step::Recv {
                peer: 0,
                region: Region::recv(0, want),
                tag: 3,
            }],
        ),
    ]
}

#[test]
fn a_message_of_the_wrong_size_is_a_typed_error_and_stays_queued() {
    let s = pair(4, 5);
    let mut m = Machine::new(&s[1], false);
    let mut mem = buffers(vec![0; 8], 8);
    let mut matcher: Matcher<(usize, u32), Vec<u8>> = Matcher::new();
    let key = |p, t| (p, t);
    assert!(matches!(
        m.poll(&s[1], &mut mem, &mut matcher, key),
        Ok(Some(Action::Recv {
            peer: 0,
            tag: 3,
            ..
        }))
    ));
    assert_eq!(m.poll(&s[1], &mut mem, &mut matcher, key), Ok(None));
    matcher.arrived((0, 3), vec![9; 4]);
    assert_eq!(
        m.poll(&s[1], &mut mem, &mut matcher, key),
        Err(InterpError::SizeMismatch {
            peer: 0,
            tag: 3,
            sent: 4,
            expected: 5
        })
    );
    // Nothing landed; the driver finds the message to refuse it.
    assert_eq!(mem.recv, [0; 8]);
    assert_eq!(matcher.take(&(0, 3)), Some(vec![9; 4]));
    assert!(m.is_done());
    assert_eq!(m.poll(&s[1], &mut mem, &mut matcher, key), Ok(None));
    // The same through a driver that splits messages.
    let ins = vec![
        RankBuffers {
            send: vec![1; 8],
            recv: vec![0; 8],
        };
        2
    ];
    let e = run_shuffled(&s, &ins, 1, 7).unwrap_err();
    assert!(
        matches!(
            e,
            InterpError::SizeMismatch {
                sent: 4,
                expected: 5,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn messages_of_one_stream_land_in_order_and_pieces_resume_where_they_stopped() {
    let mut m = Machine::new(&pair(4, 4)[1], false);
    let s = pair(4, 4);
    let mut mem = buffers(vec![], 8);
    let mut matcher: Matcher<(usize, u32), Piece> = Matcher::new();
    let key = |p, t| (p, t);
    // Arrivals before the receive is posted wait in the matcher.
    for (i, b) in [[1u8, 2], [3, 4], [5, 6]].iter().enumerate() {
        matcher.arrived(
            (0, 3),
            Piece {
                total: if i < 2 { 4 } else { 6 },
                bytes: b.to_vec(),
            },
        );
    }
    matcher.arrived(
        (1, 3),
        Piece {
            total: 1,
            bytes: vec![0],
        },
    );
    let mut landed = Vec::new();
    while let Some(a) = m.poll(&s[1], &mut mem, &mut matcher, key).unwrap() {
        match a {
            Action::Land { got, arrival, .. } => {
                landed.push(got);
                mem.recv[got..got + arrival.bytes.len()].copy_from_slice(&arrival.bytes);
                m.copied(arrival.bytes.len());
            }
            Action::Recv { .. } => {}
            Action::Complete => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(landed, [0, 2]);
    assert_eq!(mem.recv[..4], [1, 2, 3, 4]);
    assert!(m.is_done());
    // The next message of the stream, and the other stream, are untouched.
    assert_eq!(matcher.peek(&(0, 3)).map(|p| p.total), Some(6));
    assert!(matcher.peek(&(1, 3)).is_some());
}

#[test]
fn a_round_waits_for_its_sends_and_says_what_it_waits_on() {
    let s = pair(4, 4);
    let mut m = Machine::new(&s[0], false);
    let mut mem = buffers(vec![7; 8], 8);
    let mut matcher: Matcher<(usize, u32), Vec<u8>> = Matcher::new();
    let key = |p, t| (p, t);
    assert!(matches!(
        m.poll(&s[0], &mut mem, &mut matcher, key),
        Ok(Some(Action::Send {
            peer: 1,
            tag: 3,
            ..
        }))
    ));
    assert_eq!(m.poll(&s[0], &mut mem, &mut matcher, key), Ok(None));
    assert_eq!(m.waiting_on(&s[0]), Some(s[0].rounds[0].steps[0]));
    assert_eq!(m.open_sends(), [(1, 3)]);
    assert!(!m.sent(1, 4), "no such send");
    assert!(m.sent(1, 3));
    assert_eq!(
        m.poll(&s[0], &mut mem, &mut matcher, key),
        Ok(Some(Action::Complete))
    );
    assert_eq!(m.waiting_on(&s[0]), None);
    assert_eq!(m.poll(&s[0], &mut mem, &mut matcher, key), Ok(None));
}

#[test]
fn local_steps_go_through_memory_and_its_errors_are_typed() {
    let c = Collective::Allgather {
        count: 3,
        dtype: DataType::U8,
    };
    let s = c.schedule(0, 1, &Options::default()).unwrap();
    let mut matcher: Matcher<(usize, u32), Vec<u8>> = Matcher::new();
    let key = |p, t| (p, t);
    for skip_own in [false, true] {
        let mut mem = buffers(vec![1, 2, 3], 3);
        let mut m = Machine::new(&s, skip_own);
        assert_eq!(
            m.poll(&s, &mut mem, &mut matcher, key),
            Ok(Some(Action::Complete))
        );
        assert_eq!(mem.recv, if skip_own { [0; 3] } else { [1, 2, 3] });
    }
    // A receive buffer too short: the memory's error, and the machine ends.
    let mut mem = buffers(vec![1, 2, 3], 2);
    let mut m = Machine::new(&s, false);
    assert_eq!(
        m.poll(&s, &mut mem, &mut matcher, key),
        Err(InterpError::Memory(LocalError::OutOfBounds(OutOfBounds(
            Region::recv(0, 3)
        ))))
    );
    assert!(m.is_done());
}

#[test]
#[should_panic(expected = "copied()")]
fn a_land_must_be_answered_before_the_next_poll() {
    let s = pair(4, 4);
    let mut m = Machine::new(&s[1], false);
    let mut mem = buffers(vec![], 8);
    let mut matcher: Matcher<(usize, u32), Vec<u8>> = Matcher::new();
    matcher.arrived((0, 3), vec![1; 4]);
    let key = |p, t| (p, t);
    let _ = m.poll(&s[1], &mut mem, &mut matcher, key); // Recv
    let _ = m.poll(&s[1], &mut mem, &mut matcher, key); // Land
    let _ = m.poll(&s[1], &mut mem, &mut matcher, key);
}

/// `Buffers::src_dst` lends both regions without a copy: across buffers, and
/// within one in either order; overlapping or out-of-bounds regions are refused.
#[test]
fn buffers_lend_a_source_and_a_destination_without_a_copy() {
    let mut b = Buffers {
        send: vec![1, 2, 3, 4],
        recv: vec![0; 4],
        scratch: vec![9; 4],
    };
    let r = |buf, offset, len| Region::new(buf, offset, len);
    let (s, d) = b
        .src_dst(r(BufferId::Send, 1, 2), r(BufferId::Recv, 0, 2))
        .unwrap();
    d.copy_from_slice(s);
    assert_eq!(b.recv, [2, 3, 0, 0]);
    let (s, d) = b
        .src_dst(r(BufferId::Recv, 0, 2), r(BufferId::Recv, 2, 2))
        .unwrap();
    d.copy_from_slice(s);
    assert_eq!(b.recv, [2, 3, 2, 3]);
    let (s, d) = b
        .src_dst(r(BufferId::Scratch, 2, 2), r(BufferId::Scratch, 0, 2))
        .unwrap();
    assert_eq!(s, [9, 9]);
    d.copy_from_slice(&[7, 7]);
    assert_eq!(b.scratch, [7, 7, 9, 9]);
    let over = r(BufferId::Recv, 1, 2);
    assert_eq!(
        b.src_dst(r(BufferId::Recv, 0, 2), over).unwrap_err(),
        OutOfBounds(over)
    );
    let outside = r(BufferId::Send, 3, 2);
    assert_eq!(
        b.src_dst(outside, r(BufferId::Recv, 0, 2)).unwrap_err(),
        OutOfBounds(outside)
    );
}

/// `Buffers::src_dst` between every pair of buffers: the source's bytes and the
/// destination's, writable, each from its own buffer (the fast tests' schedules copy
/// only send to receive; the others come from algorithms the exhaustive test runs).
#[test]
fn src_dst_pairs_every_two_buffers() {
    let ids = [BufferId::Send, BufferId::Recv, BufferId::Scratch];
    for (i, &a) in ids.iter().enumerate() {
        for (j, &b) in ids.iter().enumerate() {
            let mut bufs = Buffers {
                send: vec![10; 8],
                recv: vec![20; 8],
                scratch: vec![30; 8],
            };
            let fill = |k: usize| 10 * (k as u8 + 1);
            let (src, dst) = if a == b {
                (Region::new(a, 0, 4), Region::new(b, 4, 4))
            } else {
                (Region::new(a, 2, 4), Region::new(b, 1, 4))
            };
            let (s, d) = bufs.src_dst(src, dst).unwrap();
            assert_eq!(s, &[fill(i); 4][..], "{a:?} -> {b:?}");
            assert_eq!(d, &[fill(j); 4][..], "{a:?} -> {b:?}");
            d.copy_from_slice(&[99; 4]);
            let want: Vec<u8> = (0..8)
                .map(|k| {
                    if (dst.offset..dst.offset + 4).contains(&k) {
                        99
                    } else {
                        fill(j)
                    }
                })
                .collect();
            assert_eq!(bufs.buf(b), &want[..], "{a:?} -> {b:?}");
            if a != b {
                assert_eq!(bufs.buf(a), &[fill(i); 8][..], "{a:?} -> {b:?}");
            }
        }
    }
    // Overlapping regions of one buffer are refused.
    let mut bufs = Buffers {
        send: vec![0; 8],
        ..Default::default()
    };
    assert!(bufs
        .src_dst(
            Region::new(BufferId::Send, 0, 4),
            Region::new(BufferId::Send, 2, 4)
        )
        .is_err());
}

/// The matcher's bookkeeping that drivers use to retire a collective's unread
/// messages: `is_empty`, `keys`, `remove_where`.
#[test]
fn matcher_keys_and_remove_where() {
    use hpc_collectives::interp::Matcher;
    let mut m: Matcher<(u32, u32), Vec<u8>> = Matcher::new();
    assert!(m.is_empty());
    m.arrived((1, 7), vec![1]);
    m.arrived((1, 7), vec![2]);
    m.arrived((2, 7), vec![3]);
    m.arrived((2, 8), vec![4]);
    assert!(!m.is_empty());
    let mut keys: Vec<_> = m.keys().copied().collect();
    keys.sort();
    assert_eq!(keys, [(1, 7), (2, 7), (2, 8)]);
    let mut dropped = Vec::new();
    m.remove_where(|k| k.1 == 7, |k, a| dropped.push((*k, a)));
    dropped.sort();
    assert_eq!(
        dropped,
        [((1, 7), vec![1]), ((1, 7), vec![2]), ((2, 7), vec![3])]
    );
    assert_eq!(m.keys().copied().collect::<Vec<_>>(), [(2, 8)]);
    assert_eq!(m.take(&(2, 8)), Some(vec![4]));
    assert!(m.is_empty());
}

/// What a driver reads of a machine between events (the proxies and the
/// executor schedule their work from it): the round, whether the round is
/// posted, the open receives and sends.
#[test]
fn a_machine_reports_its_round_and_what_is_open() {
    let round = |steps| Round { steps };
    let s = Schedule {
        kind: CollectiveKind::Barrier,
        algorithm: Algorithm::Dissemination,
        rank: 0,
        size: 2,
        send_bytes: 4,
        recv_bytes: 8,
        scratch_bytes: 0,
        rounds: vec![
            round(vec![
                Step::Send {
                    peer: 1,
                    region: Region::send(0, 4),
                    tag: 1,
                },
                Step::Recv {
                    peer: 1,
                    region: Region::recv(0, 4),
                    tag: 2,
                },
            ]),
            round(vec![Step::Copy {
                src: Region::recv(0, 4),
                dst: Region::recv(4, 4),
            }]),
        ],
    };
    let mut m = Machine::new(&s, false);
    let mut mem = buffers(vec![7; 4], 8);
    let mut matcher: Matcher<(usize, u32), Vec<u8>> = Matcher::new();
    let key = |p, t| (p, t);
    assert_eq!((m.round(), m.is_posted(&s), m.is_done()), (0, false, false));
    assert!(matches!(
        m.poll(&s, &mut mem, &mut matcher, key),
        Ok(Some(Action::Send {
            peer: 1,
            tag: 1,
            ..
        }))
    ));
    assert!(!m.is_posted(&s), "the receive is not posted yet");
    assert!(
        m.open_sends().is_empty(),
        "a send counts from the next poll"
    );
    assert!(matches!(
        m.poll(&s, &mut mem, &mut matcher, key),
        Ok(Some(Action::Recv {
            peer: 1,
            tag: 2,
            ..
        }))
    ));
    assert!(m.is_posted(&s));
    let open: Vec<_> = m
        .open_recvs()
        .iter()
        .map(|r| (r.peer, r.tag, r.got))
        .collect();
    assert_eq!(open, [(1, 2, 0)]);
    assert!(matches!(m.poll(&s, &mut mem, &mut matcher, key), Ok(None)));
    assert_eq!(m.open_sends(), [(1, 1)]);
    assert!(m.sent(1, 1));
    assert!(m.open_sends().is_empty());
    assert!(!m.sent(1, 1), "no second send is open");
    matcher.arrived((1, 2), vec![5, 6, 7, 8]);
    match m.poll(&s, &mut mem, &mut matcher, key) {
        Ok(Some(Action::Land {
            region, arrival, ..
        })) => {
            mem.recv[region.offset..region.end()].copy_from_slice(&arrival);
        }
        other => panic!("{other:?}"),
    }
    assert!(m.copied(4));
    assert_eq!(m.round(), 0);
    assert!(matches!(
        m.poll(&s, &mut mem, &mut matcher, key),
        Ok(Some(Action::Complete))
    ));
    assert_eq!(m.round(), 2, "the number of rounds once done");
    assert!(m.is_done() && m.is_posted(&s));
    assert!(m.open_recvs().is_empty());
    assert_eq!(mem.recv, [5, 6, 7, 8, 5, 6, 7, 8]);
}

/// `Matcher::retain` keeps what its closure keeps, changed in place.
#[test]
fn matcher_retain_keeps_and_changes_in_place() {
    let mut m: Matcher<u32, Vec<u8>> = Matcher::new();
    m.arrived(1, vec![1]);
    m.arrived(1, vec![2]);
    m.arrived(2, vec![3]);
    m.retain(|_, a| {
        a.push(0);
        a[0] != 2
    });
    assert_eq!(m.take(&1), Some(vec![1, 0]));
    assert_eq!(m.take(&1), None);
    assert_eq!(m.take(&2), Some(vec![3, 0]));
    assert!(m.is_empty());
}

/// A copy between regions of different lengths (a forged or damaged
/// schedule; `Memory::copy`'s contract says they are equal) panicked in
/// `copy_from_slice` ("source slice length (4) does not match destination
/// slice length (8)"), where a region out of bounds is an error. It is
/// `LocalError::Lengths`, naming both, and the buffers are unchanged.
#[test]
fn a_copy_between_regions_of_different_lengths_is_an_error_not_a_panic() {
    use hpc_collectives::interp::Memory;
    let mut b = Buffers {
        send: vec![1; 8],
        recv: vec![0; 8],
        scratch: vec![],
    };
    let (src, dst) = (
        Region::new(BufferId::Send, 0, 4),
        Region::new(BufferId::Recv, 0, 8),
    );
    let e = b.copy(src, dst).unwrap_err();
    assert_eq!(e, LocalError::Lengths { src, dst });
    assert!(e.to_string().contains("their lengths differ"), "{e}");
    assert_eq!(b.recv, vec![0; 8]);
}
