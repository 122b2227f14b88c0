//! The session machine over simulated nodes: 2-4 proxies in one test, each
//! a [`Session`], whose effects' messages (a node's part of a collective,
//! a failure told) go through one queue delivered in an order drawn from a
//! seeded generator, with every fault: a rank lost mid-collective, a node
//! lost, a cancel, a part's memory refused, late and duplicate messages for
//! collectives that ended.

use std::collections::{BTreeMap, BTreeSet};

use super::{Cancel, Effect, Outcome, Session};
use hpc_board::sig::Sig;

/// A small seeded generator (xorshift64*): the same seed, the same run.
pub struct Rng(pub u64);

impl Rng {
    /// A number below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }
}

/// What goes between the simulated proxies.
#[derive(Clone, Debug, PartialEq)]
enum Msg {
    /// The sending node's schedules of collective `seq` started: its part.
    Part(u64),
    /// Collective `seq` failed there.
    Failed(u64, Outcome),
}

/// One simulated proxy.
struct Node {
    s: Session,
    /// The communicator's ranks here, by slot.
    ranks: Vec<usize>,
    /// Collectives started here, and the nodes whose part arrived.
    started: BTreeMap<u64, BTreeSet<usize>>,
    /// Parts from other nodes before this node started.
    early: BTreeMap<u64, BTreeSet<usize>>,
    /// Every answer, as (slot, seq, outcome), in order.
    answers: Vec<(usize, u64, Outcome)>,
    /// Bytes held and released through the session.
    held: u64,
    released: u64,
    /// Stopped (its proxy died).
    dead: bool,
}

struct Sim {
    nodes: Vec<Node>,
    /// Messages in flight: (from, to, message).
    net: Vec<(usize, usize, Msg)>,
    /// Every message that was delivered or dropped by a session's window.
    dropped: usize,
    /// Every failure told, as (from, seq, outcome).
    told: Vec<(usize, u64, Outcome)>,
    rng: Rng,
    cancel: Cancel,
}

/// The bytes each part holds.
const PART: u64 = 100;

impl Sim {
    /// `per_node[n]` ranks on node `n`, numbered in node order.
    fn new(per_node: &[usize], cancel: Cancel, seed: u64) -> Sim {
        let mut next = 0;
        let nodes = per_node
            .iter()
            .map(|&k| {
                let ranks: Vec<usize> = (next..next + k).collect();
                next += k;
                Node {
                    s: Session::new(ranks.clone(), cancel),
                    ranks,
                    started: BTreeMap::new(),
                    early: BTreeMap::new(),
                    answers: Vec::new(),
                    held: 0,
                    released: 0,
                    dead: false,
                }
            })
            .collect();
        Sim {
            nodes,
            net: Vec::new(),
            dropped: 0,
            told: Vec::new(),
            rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
            cancel,
        }
    }

    /// Carries out node `n`'s effects, as a server would.
    fn settle(&mut self, n: usize) {
        while let Some(e) = self.nodes[n].s.poll() {
            match e {
                Effect::Answer { seq, slot, outcome } => {
                    self.nodes[n].answers.push((slot, seq, outcome));
                }
                Effect::Tell { seq, outcome } => {
                    self.told.push((n, seq, outcome.clone()));
                    for m in 0..self.nodes.len() {
                        if m != n {
                            self.net.push((n, m, Msg::Failed(seq, outcome.clone())));
                        }
                    }
                }
                Effect::Start { seq } => {
                    let early = self.nodes[n].early.remove(&seq).unwrap_or_default();
                    self.nodes[n].started.insert(seq, early);
                    for m in 0..self.nodes.len() {
                        if m != n {
                            self.net.push((n, m, Msg::Part(seq)));
                        }
                    }
                    self.try_finish(n, seq);
                }
                Effect::Stop { seq } => {
                    self.nodes[n].started.remove(&seq);
                    self.nodes[n].early.remove(&seq);
                }
                Effect::Deliver { seq, slot } => self.nodes[n].s.done(seq, slot, Outcome::Done),
                Effect::Retire { bytes, .. } => self.nodes[n].released += bytes,
            }
        }
    }

    /// Node `n`'s collective `seq` finishes once every other node's part came.
    fn try_finish(&mut self, n: usize, seq: u64) {
        let others = self.nodes.len() - 1;
        let node = &mut self.nodes[n];
        if node.started.get(&seq).is_some_and(|f| f.len() == others) {
            node.started.remove(&seq);
            if self.cancel == Cancel::Collective {
                node.s.complete(seq);
                return;
            }
            // In host placement each rank's op ends by itself, answered by
            // the server where the session lets it take the short way.
            for slot in 0..node.ranks.len() {
                if let Some(bytes) = node.s.finished(seq, slot) {
                    node.answers.push((slot, seq, Outcome::Done));
                    node.released += bytes;
                }
            }
        }
    }

    /// Rank `slot` of node `n` submits collective `seq`.
    fn submit(&mut self, n: usize, slot: usize, seq: u64) {
        let node = &mut self.nodes[n];
        if node.s.submit(seq, slot, Sig::NONE) {
            node.s.hold(seq, PART);
            node.held += PART;
            node.s.ready(seq, slot);
        }
        self.settle(n);
    }

    /// Delivers message `i` of the queue.
    fn deliver(&mut self, i: usize) {
        let (from, to, msg) = self.net.swap_remove(i);
        if self.nodes[to].dead {
            return;
        }
        match msg {
            Msg::Part(seq) => {
                if !self.nodes[to].s.takes(seq) {
                    self.dropped += 1;
                } else if let Some(f) = self.nodes[to].started.get_mut(&seq) {
                    f.insert(from);
                    self.try_finish(to, seq);
                } else {
                    self.nodes[to].early.entry(seq).or_default().insert(from);
                }
            }
            Msg::Failed(seq, o) => self.nodes[to].s.fail(seq, o, false),
        }
        self.settle(to);
    }

    /// Node `n`'s proxy dies: every other node sees it by itself.
    fn kill(&mut self, n: usize) {
        self.nodes[n].dead = true;
        self.net.retain(|&(from, to, _)| from != n && to != n);
        for m in 0..self.nodes.len() {
            if m != n {
                self.nodes[m].s.node_lost(n);
                self.settle(m);
            }
        }
    }

    /// Runs every rank's submits of `seqs` and the messages in an order
    /// drawn from the generator, then retires what ended.
    fn run(&mut self, seqs: &[u64], skip: &BTreeSet<(usize, usize, u64)>) {
        let mut todo: Vec<(usize, usize, usize)> = Vec::new();
        for n in 0..self.nodes.len() {
            for slot in 0..self.nodes[n].ranks.len() {
                todo.push((n, slot, 0));
            }
        }
        loop {
            let live: Vec<usize> = (0..todo.len())
                .filter(|&i| todo[i].2 < seqs.len())
                .collect();
            let ways = live.len() + self.net.len();
            if ways == 0 {
                break;
            }
            let k = self.rng.below(ways);
            if k < live.len() {
                let (n, slot, at) = todo[live[k]];
                todo[live[k]].2 += 1;
                let seq = seqs[at];
                if !self.nodes[n].dead && !skip.contains(&(n, slot, seq)) {
                    self.submit(n, slot, seq);
                }
            } else {
                self.deliver(k - live.len());
            }
        }
        self.retire();
    }

    fn retire(&mut self) {
        for n in 0..self.nodes.len() {
            self.nodes[n].s.retire();
            self.settle(n);
        }
    }

    /// The outcomes answered to rank `slot` of node `n` for `seq`.
    fn answered(&self, n: usize, slot: usize, seq: u64) -> Vec<Outcome> {
        self.nodes[n]
            .answers
            .iter()
            .filter(|a| a.0 == slot && a.1 == seq)
            .map(|a| a.2.clone())
            .collect()
    }

    /// Every live node's ranks got exactly `want(node, slot)` for `seq`
    /// (`None`: no answer, for a rank that never submitted).
    fn expect(&self, seq: u64, want: impl Fn(usize, usize) -> Option<Outcome>) {
        for (n, node) in self.nodes.iter().enumerate() {
            if node.dead {
                continue;
            }
            for slot in 0..node.ranks.len() {
                let got = self.answered(n, slot, seq);
                let want: Vec<Outcome> = want(n, slot).into_iter().collect();
                assert_eq!(got, want, "node {n} slot {slot} collective {seq}");
            }
        }
    }

    /// Every live node retired every collective and released what it held.
    fn all_retired(&self) {
        for (n, node) in self.nodes.iter().enumerate() {
            if !node.dead {
                assert_eq!(node.s.in_flight(), 0, "node {n}: {:?}", node.s);
                assert_eq!(node.held, node.released, "node {n}");
            }
        }
    }
}

/// The shapes simulated: ranks per node, 2 to 4 nodes.
const SHAPES: [&[usize]; 4] = [&[1, 1], &[2, 1], &[1, 3, 2], &[2, 2, 1, 2]];

fn both() -> [Cancel; 2] {
    [Cancel::Part, Cancel::Collective]
}

/// Runs `case` on a fresh simulation of each of `shapes`, under each
/// cancel rule and 30 seeds, and checks that every live node retired all
/// and released what it held.
fn every(shapes: &[&[usize]], case: impl Fn(&mut Sim, &[usize])) {
    for &shape in shapes {
        for cancel in both() {
            for seed in 0..30 {
                let mut sim = Sim::new(shape, cancel, seed);
                case(&mut sim, shape);
                sim.all_retired();
            }
        }
    }
}

/// Without faults every collective ends `Done` once on every rank, in
/// every order the messages and submits come in, and each node retires it
/// and releases its memory.
#[test]
fn collectives_finish_on_every_node_in_any_order() {
    every(&SHAPES, |sim, _| {
        sim.run(&[0, 1, 2, 3], &BTreeSet::new());
        for seq in 0..4 {
            sim.expect(seq, |_, _| Some(Outcome::Done));
        }
        assert_eq!(sim.dropped, 0);
        assert!(sim.told.is_empty());
    });
}

/// The same seed gives the same run, answer for answer.
#[test]
fn a_seed_replays_the_same_run() {
    let trace = |seed| {
        let mut sim = Sim::new(&[2, 2, 1], Cancel::Collective, seed);
        sim.run(&[0, 1, 2], &BTreeSet::new());
        let answers: Vec<_> = sim.nodes.iter().map(|n| n.answers.clone()).collect();
        format!("{answers:?}")
    };
    assert_eq!(trace(7), trace(7));
    let orders: BTreeSet<_> = (0..20).map(trace).collect();
    assert!(orders.len() > 1, "the seeds reorder the answers");
}

/// A rank lost before it submitted a collective fails that collective on
/// every node with `Lost` naming it, told once by its node; the ranks that
/// submit it later are answered the same, and the collectives before it
/// are untouched.
#[test]
fn a_rank_lost_mid_collective_fails_it_on_every_node() {
    every(&SHAPES, |sim, _| {
        sim.run(&[0], &BTreeSet::new());
        // Rank 0 (node 0, slot 0) dies after collective 0, the others go on
        // into collective 1.
        assert!(sim.nodes[0].s.lose(0, "it died"));
        assert!(!sim.nodes[0].s.lose(0, "it died again"), "once");
        sim.settle(0);
        sim.run(&[1], &BTreeSet::from([(0, 0, 1)]));
        sim.expect(0, |_, _| Some(Outcome::Done));
        let lost = Outcome::Lost {
            rank: 0,
            why: "rank 0 is lost: it died".into(),
        };
        sim.expect(1, |n, slot| ((n, slot) != (0, 0)).then(|| lost.clone()));
        // Told by node 0 only, once.
        assert_eq!(sim.told, vec![(0, 1, lost.clone())]);
    });
}

/// A lost node fails every collective in flight on the other nodes with
/// `NodeLost` naming it, and every later one at once; nobody tells it (each
/// node sees it by itself).
#[test]
fn a_lost_node_fails_what_is_in_flight_and_what_comes_later() {
    every(&SHAPES[2..], |sim, shape| {
        // Node 0's ranks submit collective 0: it is in flight there, its
        // part on its way to the others.
        for slot in 0..shape[0] {
            sim.submit(0, slot, 0);
        }
        sim.kill(1);
        let skip = (0..shape[0]).map(|slot| (0, slot, 0)).collect();
        sim.run(&[0, 1], &skip);
        let gone = Outcome::NodeLost { node: 1 };
        sim.expect(0, |_, _| Some(gone.clone()));
        sim.expect(1, |_, _| Some(gone.clone()));
        assert!(sim.told.is_empty(), "{:?}", sim.told);
    });
}

/// A cancel in DPU placement fails the collective on every node (its
/// schedules cannot run without the part), told once.
#[test]
fn a_cancel_in_dpu_placement_fails_the_collective_everywhere() {
    // Node 0 has two ranks, so that it has not started when one cancels.
    for shape in [SHAPES[1], SHAPES[3]] {
        for seed in 0..30 {
            let mut sim = Sim::new(shape, Cancel::Collective, seed);
            sim.submit(0, 0, 0);
            sim.nodes[0].s.cancel(0, 0);
            sim.settle(0);
            sim.run(&[0, 1], &BTreeSet::from([(0, 0, 0)]));
            let why = "rank 0 gave collective 0 up (cancelled)";
            sim.expect(0, |_, _| Some(Outcome::failed(why)));
            sim.expect(1, |_, _| Some(Outcome::Done));
            assert_eq!(sim.told, vec![(0, 0, Outcome::failed(why))]);
            sim.all_retired();
        }
    }
}

/// A session of two ranks here, both of whose parts of collective `seq`
/// are in (holding [`PART`] each) and started.
fn both_in(cancel: Cancel, seq: u64) -> Session {
    let mut s = Session::new(vec![4, 5], cancel);
    for slot in 0..2 {
        assert!(s.submit(seq, slot, Sig::NONE));
        s.hold(seq, PART);
        s.ready(seq, slot);
    }
    assert_eq!(s.poll(), Some(Effect::Start { seq }));
    s
}

/// The effects `s` queued.
fn drain(s: &mut Session) -> Vec<Effect> {
    std::iter::from_fn(|| s.poll()).collect()
}

/// A cancel in host placement ends only the cancelling rank's part (the
/// server answers the cancel itself): nothing fails, nobody is told, and
/// the collective retires once the other ranks' parts ended.
#[test]
fn a_cancel_in_host_placement_ends_the_rank_alone() {
    let mut s = both_in(Cancel::Part, 0);
    s.cancel(0, 0);
    assert_eq!(s.poll(), None);
    s.retire();
    assert_eq!(s.poll(), None, "rank 1's part is still in");
    s.done(0, 1, Outcome::Done);
    let done = Effect::Answer {
        seq: 0,
        slot: 1,
        outcome: Outcome::Done,
    };
    assert_eq!(s.poll(), Some(done));
    s.retire();
    let retire = Effect::Retire {
        seq: 0,
        bytes: 2 * PART,
    };
    assert_eq!(s.poll(), Some(retire));
    assert_eq!(s.in_flight(), 0);
}

/// A finished part takes the short way only where nothing is queued and
/// its collective did not fail: answered by the server, nothing queued, the
/// collective retired at its last part with the bytes it held; otherwise the
/// core answers it through its effects, in order.
#[test]
fn a_finished_part_takes_the_short_way_only_when_nothing_failed() {
    // One rank, the common case: nothing is queued at all.
    let mut s = Session::new(vec![0], Cancel::Part);
    for seq in 0..3 {
        assert!(s.submit(seq, 0, Sig::NONE));
        s.hold(seq, PART);
    }
    assert_eq!(s.finished(1, 0), Some(PART));
    assert_eq!(s.finished(0, 0), Some(PART));
    assert_eq!(s.poll(), None);
    assert_eq!(s.in_flight(), 1);
    // The window remembers them: a second submit is answered `twice`.
    assert!(!s.submit(1, 0, Sig::NONE));
    let twice = Outcome::failed("rank 0 submitted collective 1 twice");
    let answer = |seq, slot, outcome| Effect::Answer { seq, slot, outcome };
    assert_eq!(drain(&mut s), vec![answer(1, 0, twice)]);
    // A failed collective's part is answered by the core with its failure.
    s.fail(2, Outcome::failed("x"), false);
    assert_eq!(s.finished(2, 0), None);
    s.retire();
    assert_eq!(
        drain(&mut s),
        vec![
            Effect::Stop { seq: 2 },
            answer(2, 0, Outcome::failed("x")),
            Effect::Retire {
                seq: 2,
                bytes: PART
            },
        ]
    );
    // Two ranks: the first part's end returns no bytes, the last retires;
    // with an effect queued, the long way keeps the order.
    let mut s = both_in(Cancel::Part, 0);
    assert_eq!(s.finished(0, 0), Some(0));
    assert_eq!(s.finished(0, 1), Some(2 * PART));
    assert_eq!(s.in_flight(), 0);
    let mut s = both_in(Cancel::Part, 0);
    assert!(!s.submit(0, 0, Sig::NONE), "twice");
    assert_eq!(s.finished(0, 1), None);
    assert_eq!(s.poll(), Some(Effect::Stop { seq: 0 }));
}

/// A part still being delivered is not answered by a failure; the
/// delivery's end answers it, and a cancel meanwhile waits for it.
#[test]
fn a_part_being_delivered_is_answered_by_its_delivery() {
    let mut s = both_in(Cancel::Collective, 3);
    s.complete(3);
    assert_eq!(
        drain(&mut s),
        vec![
            Effect::Deliver { seq: 3, slot: 0 },
            Effect::Deliver { seq: 3, slot: 1 },
        ]
    );
    s.busy(3, 0);
    s.cancel(3, 0);
    s.done(3, 1, Outcome::Done);
    s.fail(3, Outcome::NodeLost { node: 1 }, true);
    assert_eq!(
        drain(&mut s),
        vec![
            Effect::Answer {
                seq: 3,
                slot: 1,
                outcome: Outcome::Done
            },
            Effect::Stop { seq: 3 },
        ],
        "a lost node is not told, and the busy part waits"
    );
    s.done(3, 0, Outcome::Done);
    s.retire();
    assert_eq!(
        drain(&mut s),
        vec![
            Effect::Answer {
                seq: 3,
                slot: 0,
                outcome: Outcome::Done
            },
            Effect::Retire {
                seq: 3,
                bytes: 2 * PART
            },
        ]
    );
}

/// A part whose memory its proxy refuses fails the collective on every
/// node with the refusal's bytes, and the budget is given back.
#[test]
fn a_part_refused_for_its_memory_fails_the_collective_on_every_node() {
    every(&SHAPES, |sim, shape| {
        let over = Outcome::OverCap {
            bytes: Some(1 << 30),
            why: "rank 1's part: over the cap".into(),
        };
        let last = shape.len() - 1;
        sim.nodes[last].s.refuse(0, 0, over.clone());
        sim.settle(last);
        sim.run(&[0, 1], &BTreeSet::from([(last, 0, 0)]));
        sim.expect(0, |_, _| Some(over.clone()));
        sim.expect(1, |_, _| Some(Outcome::Done));
        assert_eq!(sim.told, vec![(last, 0, over.clone())]);
    });
}

/// What comes for a collective that ended here is dropped by the window: a
/// part from another node, a failure told late (no second answer), and a
/// rank's duplicate submit is answered `twice`, or with the failure of one
/// that failed.
#[test]
fn late_and_duplicate_parts_for_an_ended_collective_are_dropped() {
    for cancel in both() {
        let mut sim = Sim::new(&[2, 1], cancel, 3);
        sim.run(&[0], &BTreeSet::new());
        sim.nodes[0].s.refuse(1, 0, Outcome::failed("unreadable"));
        sim.settle(0);
        sim.run(&[1], &BTreeSet::from([(0, 0, 1)]));
        sim.all_retired();
        sim.dropped = 0;
        let before: Vec<usize> = sim.nodes.iter().map(|n| n.answers.len()).collect();
        // A duplicate part and a late failure for the collective that
        // finished, a part for the one that failed.
        sim.net.push((1, 0, Msg::Part(0)));
        sim.net
            .push((1, 0, Msg::Failed(0, Outcome::failed("late"))));
        sim.net.push((1, 0, Msg::Part(1)));
        while !sim.net.is_empty() {
            sim.deliver(0);
        }
        assert_eq!(sim.dropped, 2);
        let after: Vec<usize> = sim.nodes.iter().map(|n| n.answers.len()).collect();
        assert_eq!(before, after, "nothing answered again");
        sim.retire();
        assert_eq!(sim.nodes[0].s.in_flight(), 0, "nothing made anew");
        // A rank that submits again.
        sim.submit(0, 1, 0);
        sim.submit(0, 1, 1);
        let twice = Outcome::failed("rank 1 submitted collective 0 twice");
        assert_eq!(sim.answered(0, 1, 0), vec![Outcome::Done, twice]);
        let failed = Outcome::failed("unreadable");
        assert_eq!(sim.answered(0, 1, 1), vec![failed.clone(), failed]);
    }
}

/// A collective names the members here whose part has not come: all of
/// them before any part, then those still absent; never a member away, one
/// whose part is in, nor anyone once the collective ended.
#[test]
fn a_collective_names_the_members_whose_part_has_not_come() {
    let mut s = Session::new(vec![4, 5, 6, 7], Cancel::Part);
    s.away(3);
    assert_eq!(s.waiting_for(0), vec![4, 5, 6], "no part came yet");
    assert!(s.submit(0, 1, Sig::NONE));
    assert_eq!(s.waiting_for(0), vec![4, 6]);
    assert!(s.submit(0, 0, Sig::NONE));
    assert_eq!(s.waiting_for(0), vec![6]);
    assert!(s.submit(0, 2, Sig::NONE));
    assert!(s.waiting_for(0).is_empty(), "every part is in");
    for slot in 0..3 {
        s.done(0, slot, Outcome::Done);
    }
    drain(&mut s);
    s.retire();
    assert_eq!(s.in_flight(), 0);
    assert!(s.waiting_for(0).is_empty(), "it ended");
}

/// Parts that are not the same collective fail it on every part, each rank
/// answered naming one whose part differs from its own (the first part
/// being the odd one, too); a message from another node that disagrees
/// fails it too, told to the other nodes naming this node's rank.
#[test]
fn parts_and_messages_of_another_collective_fail_it() {
    use hpc_collectives::{Collective, DataType, ReduceOp};
    let sum = |dtype| {
        Sig::of(&Collective::Allreduce {
            count: 4,
            dtype,
            op: ReduceOp::Sum,
        })
    };
    let (f, u) = (sum(DataType::F64), sum(DataType::U64));
    let mut s = Session::new(vec![0, 1, 2], Cancel::Part);
    assert!(s.submit(0, 0, f));
    assert!(s.submit(0, 2, f), "the same collective");
    assert_eq!(s.sig(0), f);
    assert!(!s.submit(0, 1, u), "another type");
    let o = Outcome::Disagree {
        first: 0,
        first_sig: f,
        other: 1,
        other_sig: u,
    };
    let answer = |seq, slot, outcome| Effect::Answer { seq, slot, outcome };
    let got = drain(&mut s);
    assert_eq!(got[0], Effect::Stop { seq: 0 });
    assert!(got.contains(&answer(0, 0, o.clone())) && got.contains(&answer(0, 1, o.clone())));
    assert!(o
        .why()
        .contains("rank 0 called allreduce f64 sum where rank 1 called allreduce u64 sum"));
    // Each rank is told of the other: the rank that differs of the first.
    let told = |rank| {
        let (code, aux) = o.wire_to(rank);
        let r = Outcome::from_wire(code, aux, String::new());
        match r.into_result(0, "the proxy", &[10, 11, 12], if rank == 1 { u } else { f }) {
            Err(hpc_board::Error::CollectiveMismatch { rank, ours, theirs }) => {
                (rank, ours, theirs)
            }
            e => panic!("{e:?}"),
        }
    };
    let named = |rank, ours: &str, theirs: &str| (rank, ours.to_string(), theirs.to_string());
    assert_eq!(told(1), named(10, "allreduce u64 sum", "allreduce f64 sum"));
    assert_eq!(told(2), named(11, "allreduce f64 sum", "allreduce u64 sum"));
    // The rank that differs comes first: each rank is still told of one
    // whose collective is not its own, rank 0 (first after it) and rank 1
    // (after the failure) of rank 2, rank 2 of rank 0.
    let mut s = Session::new(vec![0, 1, 2], Cancel::Part);
    assert!(s.submit(0, 2, u));
    assert!(!s.submit(0, 0, f));
    assert!(!s.submit(0, 1, f), "a part after the failure");
    let answers: Vec<(usize, Outcome)> = drain(&mut s)
        .into_iter()
        .filter_map(|e| match e {
            Effect::Answer { slot, outcome, .. } => Some((slot, outcome)),
            _ => None,
        })
        .collect();
    for (rank, named) in [(0, 12), (1, 12), (2, 10)] {
        let ours = if rank == 2 { u } else { f };
        let (_, o) = answers.iter().find(|a| a.0 == rank).unwrap();
        let (code, aux) = o.wire_to(rank);
        let r = Outcome::from_wire(code, aux, String::new());
        match r.into_result(0, "the proxy", &[10, 11, 12], ours) {
            Err(hpc_board::Error::CollectiveMismatch {
                rank: r,
                ours: o,
                theirs,
            }) => {
                assert_eq!(r, named, "rank {rank}");
                assert_eq!(o, ours.describe(), "rank {rank}");
                assert_ne!(theirs, o, "rank {rank} told of its own collective");
            }
            e => panic!("rank {rank}: {e:?}"),
        }
    }
    // Rank 2 of another node: its message of another collective fails the
    // next one here, and the news names this node's rank.
    let mut s = Session::new(vec![0, 1, 2], Cancel::Part);
    s.away(2);
    assert!(s.submit(1, 0, f));
    assert!(s.remote(1, 2, Sig::NONE), "a message without a signature");
    assert!(s.remote(1, 2, f));
    assert!(!s.remote(1, 2, u));
    let tell = drain(&mut s)
        .into_iter()
        .find(|e| matches!(e, Effect::Tell { .. }));
    assert_eq!(
        tell,
        Some(Effect::Tell {
            seq: 1,
            outcome: Outcome::Disagree {
                first: 2,
                first_sig: u,
                other: 0,
                other_sig: f,
            }
        })
    );
}
