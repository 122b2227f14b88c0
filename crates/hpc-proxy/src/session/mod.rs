//! The life cycle of a collective in a proxy, written once for both
//! placements (host, `server.rs`; DPU, `dpu/server.rs`) and doing no I/O:
//! the state machine of one communicator's collectives ([`Session`], in
//! `life.rs`: events in, [`Effect`]s out), how a collective ended
//! ([`Outcome`], the typed form of the wire's code and `aux` word, with a
//! size mismatch's [`Sizes`]) and the window of collectives that ended,
//! which drops what comes for them afterwards ([`Ended`]). `sim.rs` tests
//! the machine over simulated nodes.
//!
//! The wire's `(Code, aux)` pair is made only at the I/O edge
//! ([`Outcome::wire`]) and read back only there ([`Outcome::from_wire`]):
//! inside a proxy a failure is an [`Outcome`], each variant carrying exactly
//! what it means.

use std::collections::HashMap;

mod life;
#[cfg(test)]
pub mod sim;

pub use life::{Cancel, Effect, Session};

use super::memory::Refusal;
use super::protocol::{Code, Kind};
use hpc_board::board::Desc;
use hpc_board::sig::Sig;
use hpc_board::{Error, Result};

/// How a collective ended in a proxy, as its ranks are told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It finished.
    Done,
    /// A rank it waited for is lost: `rank`, the communicator's rank.
    Lost {
        /// The rank that is lost.
        rank: usize,
        /// Why, in words.
        why: String,
    },
    /// A message's size differed from its receive's: `sender`, the
    /// communicator's rank that the ranks are told of (in host placement
    /// the one that sent it, which that rank reads as the one that refused
    /// it, [`Outcome::read_by`]; in DPU placement the rank on the other side
    /// of this node), and the message's sizes where they are known.
    Mismatch {
        /// The rank that the error names.
        sender: usize,
        /// Who sent how many bytes where who expected how many; `None`
        /// where the answer that brought the outcome could not carry them.
        sizes: Option<Sizes>,
        /// Why, in words.
        why: String,
    },
    /// The parts are not the same collective (another kind, element type,
    /// reduction or root): `first`'s part (the communicator's rank) was
    /// `first_sig`, `other`'s `other_sig`. Read off the wire, both name the
    /// one rank the answer or news named.
    Disagree {
        /// The rank whose part came first.
        first: usize,
        /// Its collective's signature.
        first_sig: Sig,
        /// The rank whose part differs from it.
        other: usize,
        /// Its collective's signature.
        other_sig: Sig,
    },
    /// Another node of the communicator is lost (its proxy stopped or cannot
    /// be reached): `node`, the world's index of that node.
    NodeLost {
        /// The node that is lost.
        node: usize,
    },
    /// Its memory in the proxy would pass the proxy's cap beside the
    /// collectives in flight; `bytes` is `None` where its size overflows.
    OverCap {
        /// The bytes it asked for.
        bytes: Option<u64>,
        /// Why, in words.
        why: String,
    },
    /// The proxy could not allocate its `bytes`.
    NoMemory {
        /// The bytes it asked for.
        bytes: u64,
        /// Why, in words.
        why: String,
    },
    /// Anything else: an unreadable request or buffer, a region outside its
    /// buffer, a step that failed.
    Failed {
        /// Why, in words.
        why: String,
    },
}

/// The message that failed a collective for its size: `sender`'s message
/// of `sent` bytes where `receiver`'s receive holds `expected` (ranks of
/// the communicator).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// The rank that sent the message.
    pub sender: usize,
    /// The rank whose receive refused it.
    pub receiver: usize,
    /// The bytes it sent.
    pub sent: u64,
    /// The bytes the receive expected.
    pub expected: u64,
}

impl Sizes {
    /// The sizes of a message of `sent` bytes from `sender` that `receiver`
    /// expected `expected` of.
    pub fn new(sender: usize, receiver: usize, sent: usize, expected: usize) -> Sizes {
        Sizes {
            sender,
            receiver,
            sent: sent as u64,
            expected: expected as u64,
        }
    }

    /// The `SIZES` descriptor of collective `seq` that says these sizes to
    /// a rank, right before the `DONE` that names the sender; `None` where
    /// the receiving rank does not fit its 32-bit word (never cut short).
    pub fn desc(&self, seq: u64) -> Option<Desc> {
        let receiver = u32::try_from(self.receiver).ok()?;
        Some(Desc {
            sig: receiver,
            ..Kind::Sizes.desc(seq, self.sent, self.expected)
        })
    }

    /// The sizes that a `SIZES` descriptor `d` says, before the `DONE`
    /// naming `sender`.
    pub fn from_desc(d: &Desc, sender: usize) -> Sizes {
        Sizes {
            sender,
            receiver: d.sig as usize,
            sent: d.addr,
            expected: d.len,
        }
    }

    /// In words, `name` giving a rank as the reader knows it (the world's
    /// rank of a communicator's): "rank 0 sent 16 bytes where rank 1
    /// expected 8", as the other engines say it.
    pub fn describe(&self, name: impl Fn(usize) -> usize) -> String {
        format!(
            "rank {} sent {} bytes where rank {} expected {}",
            name(self.sender),
            self.sent,
            name(self.receiver),
            self.expected
        )
    }
}

/// The proxy's memory cap as this process's environment sets it, for a
/// refusal without a reason of its own (the host proxy's answers carry
/// none, and the proxy takes its node's first rank's environment): the
/// value, or that it is unset.
fn cap_setting() -> String {
    let name = hpc_runtime::env::COLL_PROXY_MAX_SCRATCH;
    match hpc_runtime::env::var(name) {
        Ok(Some(v)) => format!("{name}={}", hpc_runtime::env::shown(&v)),
        Ok(None) => format!("{name} unset: half the proxy's memory"),
        Err(e) => e,
    }
}

impl Outcome {
    /// A size mismatch of the message `sizes` tells, its sender named.
    pub fn mismatch(sizes: Sizes) -> Outcome {
        Outcome::Mismatch {
            sender: sizes.sender,
            sizes: Some(sizes),
            why: sizes.describe(|r| r),
        }
    }

    /// The sizes of a mismatch, where it knows them.
    pub fn sizes(&self) -> Option<Sizes> {
        match self {
            Outcome::Mismatch { sizes, .. } => *sizes,
            _ => None,
        }
    }

    /// The `SIZES` descriptor that goes before this outcome's `DONE` of
    /// collective `seq` to `rank`: only for a mismatch whose sizes are
    /// known and whose `DONE` names their sender.
    pub fn sizes_desc(&self, seq: u64, rank: usize) -> Option<Desc> {
        let s = self.sizes()?;
        match self.wire_to(rank) {
            (Code::Mismatch, aux) if aux == s.sender as u64 => s.desc(seq),
            _ => None,
        }
    }

    /// This outcome with the `sizes` that came beside its code and word
    /// (only a mismatch has any: another outcome stays as it is).
    pub fn with_sizes(self, sizes: Option<Sizes>) -> Outcome {
        match self {
            Outcome::Mismatch { sender, why, .. } if sizes.is_some() => {
                Outcome::Mismatch { sender, sizes, why }
            }
            o => o,
        }
    }

    /// This outcome as the communicator's rank `me` reads it: a mismatch
    /// of a message that `me` sent names the rank whose receive refused it
    /// (the other side, as the other engines name it to a sender).
    pub fn read_by(self, me: usize) -> Outcome {
        match self {
            Outcome::Mismatch {
                sizes: Some(s),
                why,
                ..
            } if s.sender == me => Outcome::Mismatch {
                sender: s.receiver,
                sizes: Some(s),
                why,
            },
            o => o,
        }
    }

    /// A failure for anything else, `why`.
    pub fn failed(why: impl Into<String>) -> Outcome {
        Outcome::Failed { why: why.into() }
    }

    /// The outcome of a refusal of a collective's memory, `what` naming whose
    /// part it was (`rank 3's part`).
    pub fn refused(r: &Refusal, what: &str) -> Outcome {
        let why = format!("{what}: {}", r.why());
        match *r {
            Refusal::Overflow => Outcome::OverCap { bytes: None, why },
            Refusal::OverCap { bytes, .. } => Outcome::OverCap {
                bytes: Some(bytes),
                why,
            },
            Refusal::NoMemory { bytes } => Outcome::NoMemory { bytes, why },
        }
    }

    /// The wire's code and `aux` word of this outcome (what a `DONE`
    /// descriptor, an answer message and a failure between proxies carry).
    pub fn wire(&self) -> (Code, u64) {
        match self {
            Outcome::Done => (Code::Ok, 0),
            Outcome::Lost { rank, .. } => (Code::Lost, *rank as u64),
            Outcome::Mismatch { sender, .. } => (Code::Mismatch, *sender as u64),
            Outcome::Disagree {
                other, other_sig, ..
            } => (Code::Disagree, disagree_word(*other, *other_sig)),
            Outcome::NodeLost { node } => (Code::NodeLost, *node as u64),
            Outcome::OverCap { bytes, .. } => (Code::OverCap, bytes.unwrap_or(u64::MAX)),
            Outcome::NoMemory { bytes, .. } => (Code::NoMemory, *bytes),
            Outcome::Failed { .. } => (Code::Failed, 0),
        }
    }

    /// This outcome as answered to a part of signature `sig` that came after
    /// the collective failed: a disagreement whose `other` part is the same
    /// collective as this one names the `first` part to it instead (with
    /// three ranks or more, the rank that differs may have come first),
    /// so that a rank is never told of a rank that called its own collective.
    pub fn facing(self, sig: Sig) -> Outcome {
        match self {
            Outcome::Disagree {
                first,
                first_sig,
                other,
                other_sig,
            } if sig == other_sig && sig != first_sig => Outcome::Disagree {
                first: other,
                first_sig: other_sig,
                other: first,
                other_sig: first_sig,
            },
            o => o,
        }
    }

    /// [`Outcome::wire`] as answered to the communicator's rank `rank`: a
    /// disagreement names to each rank the other one (to the rank whose part
    /// differs, the first part's).
    pub fn wire_to(&self, rank: usize) -> (Code, u64) {
        match *self {
            Outcome::Disagree {
                first,
                first_sig,
                other,
                ..
            } if rank == other => (Code::Disagree, disagree_word(first, first_sig)),
            _ => self.wire(),
        }
    }

    /// The outcome that a code, `aux` word and reason from the wire mean
    /// (what another node's proxy told); an `aux` that names no rank or node
    /// of this machine's word size is a [`Outcome::Failed`] naming it. A
    /// mismatch's sizes travel beside them ([`Outcome::with_sizes`]).
    pub fn from_wire(code: Code, aux: u64, why: String) -> Outcome {
        let index = |what: &str| {
            usize::try_from(aux)
                .map_err(|_| Outcome::failed(format!("{why} ({what} {aux} is out of range)")))
        };
        let got = match code {
            Code::Ok => Ok(Outcome::Done),
            Code::Lost => index("rank").map(|rank| Outcome::Lost {
                rank,
                why: why.clone(),
            }),
            Code::Mismatch => index("rank").map(|sender| Outcome::Mismatch {
                sender,
                sizes: None,
                why: why.clone(),
            }),
            Code::NodeLost => index("node").map(|node| Outcome::NodeLost { node }),
            Code::Disagree => {
                let (rank, sig) = ((aux >> 32) as usize, Sig(aux as u32));
                Ok(Outcome::Disagree {
                    first: rank,
                    first_sig: sig,
                    other: rank,
                    other_sig: sig,
                })
            }
            Code::OverCap => Ok(Outcome::OverCap {
                bytes: (aux != u64::MAX).then_some(aux),
                why: why.clone(),
            }),
            Code::NoMemory => Ok(Outcome::NoMemory {
                bytes: aux,
                why: why.clone(),
            }),
            Code::Failed => Ok(Outcome::Failed { why: why.clone() }),
        };
        got.unwrap_or_else(|e| e)
    }

    /// Why, in words (empty for [`Outcome::Done`]).
    pub fn why(&self) -> String {
        match self {
            Outcome::Done => String::new(),
            Outcome::NodeLost { node } => format!("node {node} is lost"),
            Outcome::Disagree {
                first,
                first_sig,
                other,
                other_sig,
            } => format!(
                "rank {first} called {} where rank {other} called {}",
                first_sig.describe(),
                other_sig.describe()
            ),
            Outcome::Lost { why, .. }
            | Outcome::Mismatch { why, .. }
            | Outcome::OverCap { why, .. }
            | Outcome::NoMemory { why, .. }
            | Outcome::Failed { why } => why.clone(),
        }
    }

    /// What a rank's wait returns for this outcome of its collective `seq`,
    /// as a rank reads it off the wire: `world` maps a communicator's rank to
    /// the world's (an index it does not know stays as it is). `proxy` names
    /// the proxy (`the DPU proxy`); an outcome without a reason (the host
    /// proxy's answers carry none) gets the general one of its kind, but a
    /// mismatch whose sizes came names them (its ranks as the world's). `ours`
    /// is the signature of this rank's collective, which a disagreement
    /// names beside the other rank's.
    pub fn into_result(self, seq: u64, proxy: &str, world: &[usize], ours: Sig) -> Result<()> {
        let world = |r: usize| world.get(r).copied().unwrap_or(r);
        let refused = |why: String, general: &str| {
            if why.is_empty() {
                general.to_string()
            } else {
                format!("{proxy} refused collective {seq}: {why}")
            }
        };
        Err(match self {
            Outcome::Done => return Ok(()),
            Outcome::Lost { rank, .. } => Error::RankLost { rank: world(rank) },
            Outcome::Mismatch { sender, sizes, why } => Error::CountMismatch {
                rank: world(sender),
                detail: match sizes {
                    Some(s) => s.describe(world),
                    None if why.is_empty() => "message sizes differ".into(),
                    None => why,
                },
            },
            Outcome::NodeLost { node } => Error::NodeLost { node },
            Outcome::Disagree {
                other, other_sig, ..
            } => Error::CollectiveMismatch {
                rank: world(other),
                ours: ours.describe(),
                theirs: other_sig.describe(),
            },
            Outcome::Failed { why } => {
                Error::transport(refused(why, &format!("{proxy} failed the collective")))
            }
            Outcome::OverCap { bytes, why } => Error::ProxyMemory {
                bytes,
                why: refused(
                    why,
                    &format!(
                        "more than the proxy's cap allows beside the collectives in flight \
                         (set here: {})",
                        cap_setting()
                    ),
                ),
            },
            Outcome::NoMemory { bytes, why } => Error::ProxyMemory {
                bytes: Some(bytes),
                why: refused(
                    why,
                    "the proxy could not allocate it (its node is short of memory)",
                ),
            },
        })
    }

    /// Whether every node already learns of it by itself (a lost node is
    /// seen by each proxy), so that no proxy tells the others.
    pub fn seen_by_all(&self) -> bool {
        matches!(self, Outcome::NodeLost { .. })
    }
}

/// The `aux` word of a disagreement naming `rank`, whose collective is `sig`.
fn disagree_word(rank: usize, sig: Sig) -> u64 {
    (rank as u64) << 32 | u64::from(sig.0)
}

/// How many ended collectives a proxy remembers, to drop what comes for them
/// afterwards from the other nodes (a collective failed or cancelled here
/// while another node went on) and to answer a rank that submits a failed
/// one late.
pub const REMEMBER: usize = 4096;

/// The window of collectives that ended here, by sequence number, with
/// their outcome: the latest [`REMEMBER`] at most. A place per sequence
/// number modulo [`REMEMBER`] (the latest of each), so that a collective's
/// end costs no allocation, and the outcomes of those that did not finish
/// beside it (a finished one's is [`Outcome::Done`]).
#[derive(Debug, Default)]
pub struct Ended {
    /// By `seq % REMEMBER`, the latest collective that ended (as long as
    /// the highest place reached, rounded up to a power of two).
    places: Vec<Option<u64>>,
    /// The outcomes of the collectives in `places` that failed.
    failed: HashMap<u64, Outcome>,
}

/// What [`Ended::get`] answers for a collective that finished.
static DONE: Outcome = Outcome::Done;

impl Ended {
    #[inline]
    fn place(seq: u64) -> usize {
        (seq % REMEMBER as u64) as usize
    }

    /// Records that collective `seq` ended with `outcome`; `false` (and the
    /// first outcome kept) if it had ended already. It takes the place of
    /// the one [`REMEMBER`] collectives older; one older than the collective
    /// in its place is not kept.
    #[inline]
    pub fn end(&mut self, seq: u64, outcome: Outcome) -> bool {
        let at = Self::place(seq);
        if at >= self.places.len() {
            // Grown as the sequence numbers reach it (doubling, so that it
            // grows a few times in all), so that a communicator of a few
            // collectives does not clear the whole window.
            let len = (at + 1).next_power_of_two().clamp(64, REMEMBER);
            self.places.resize(len, None);
        }
        let place = &mut self.places[at];
        match *place {
            Some(s) if s == seq => return false,
            Some(s) if s > seq => return true,
            // A failure is rare: no hash of the common collective's end.
            Some(s) if !self.failed.is_empty() => {
                self.failed.remove(&s);
            }
            Some(_) => {}
            None => {}
        }
        *place = Some(seq);
        if !matches!(outcome, Outcome::Done) {
            self.failed.insert(seq, outcome);
        }
        true
    }

    /// How collective `seq` ended, if it did (within the window).
    #[inline]
    pub fn get(&self, seq: u64) -> Option<&Outcome> {
        self.contains(seq)
            .then(|| self.failed.get(&seq).unwrap_or(&DONE))
    }

    /// Whether collective `seq` ended (within the window).
    #[inline]
    pub fn contains(&self, seq: u64) -> bool {
        self.places.get(Self::place(seq)) == Some(&Some(seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every() -> Vec<Outcome> {
        vec![
            Outcome::Done,
            Outcome::Lost {
                rank: 3,
                why: "rank 3 is lost: it died".into(),
            },
            Outcome::Mismatch {
                sender: 1,
                sizes: None,
                why: "size".into(),
            },
            Outcome::mismatch(Sizes::new(0, 1, 16, 8)),
            Outcome::NodeLost { node: 2 },
            Outcome::OverCap {
                bytes: Some(1 << 30),
                why: "cap".into(),
            },
            Outcome::OverCap {
                bytes: None,
                why: "overflow".into(),
            },
            Outcome::NoMemory {
                bytes: 4096,
                why: "short".into(),
            },
            Outcome::failed("a step failed"),
        ]
    }

    /// What another node reads back from the wire is the outcome this node
    /// sent, for every variant (the node's reason is carried in words, a
    /// mismatch's sizes beside them).
    #[test]
    fn outcomes_cross_the_wire_unchanged() {
        for o in every() {
            let (code, aux) = o.wire();
            assert_eq!(Code::from_wire(code as u64), code, "{o:?}");
            assert_eq!(
                Outcome::from_wire(code, aux, o.why()).with_sizes(o.sizes()),
                o
            );
        }
    }

    /// Each outcome has its own code, `aux` word and sizes: no two variants
    /// (nor two values of one) read alike on the wire.
    #[test]
    fn outcomes_differ_on_the_wire() {
        let wires: Vec<_> = every().iter().map(|o| (o.wire(), o.sizes())).collect();
        for (i, a) in wires.iter().enumerate() {
            for b in &wires[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    /// A rank or node from the wire that this machine cannot index is a
    /// failure naming it, not a truncated number.
    #[cfg(target_pointer_width = "32")]
    #[test]
    fn an_index_out_of_range_is_named() {
        let o = Outcome::from_wire(Code::Lost, u64::MAX - 1, "gone".into());
        assert!(matches!(&o, Outcome::Failed { why } if why.contains("out of range")));
    }

    #[test]
    fn refusals_keep_their_bytes_and_reason() {
        let o = Outcome::refused(
            &Refusal::OverCap {
                bytes: 10,
                held: 5,
                cap: 12,
            },
            "rank 2's part",
        );
        assert_eq!(o.wire(), (Code::OverCap, 10));
        assert!(o.why().starts_with("rank 2's part: 10 bytes"), "{o:?}");
        assert_eq!(
            Outcome::refused(&Refusal::Overflow, "x").wire(),
            (Code::OverCap, u64::MAX)
        );
        assert_eq!(
            Outcome::refused(&Refusal::NoMemory { bytes: 7 }, "x").wire(),
            (Code::NoMemory, 7)
        );
    }

    /// A rank's wait gets the error of each outcome, its ranks as the
    /// world's, and a reason where the answer carried none.
    #[test]
    fn outcomes_become_the_ranks_errors() {
        let world: &[usize] = &[10, 11, 12];
        assert!(Outcome::Done
            .into_result(1, "the proxy", world, Sig::NONE)
            .is_ok());
        let lost = Outcome::Lost {
            rank: 2,
            why: String::new(),
        };
        assert!(matches!(
            lost.into_result(1, "the proxy", world, Sig::NONE),
            Err(Error::RankLost { rank: 12 })
        ));
        // The host proxy's answer: the code, the sender, and the sizes in
        // a descriptor of their own, its ranks named as the world's.
        let e = Outcome::from_wire(Code::Mismatch, 1, String::new())
            .with_sizes(Some(Sizes::new(1, 2, 16, 8)))
            .into_result(1, "the proxy", world, Sig::NONE);
        assert!(
            matches!(&e, Err(Error::CountMismatch { rank: 11, detail })
                if detail == "rank 11 sent 16 bytes where rank 12 expected 8"),
            "{e:?}"
        );
        // Where the sizes could not come, the general reason.
        let e = Outcome::Mismatch {
            sender: 1,
            sizes: None,
            why: String::new(),
        }
        .into_result(1, "the proxy", world, Sig::NONE);
        assert!(
            matches!(&e, Err(Error::CountMismatch { rank: 11, detail }) if detail == "message sizes differ"),
            "{e:?}"
        );
        let e = Outcome::failed("a step failed").into_result(7, "the DPU proxy", world, Sig::NONE);
        let e = e.unwrap_err().to_string();
        assert!(
            e.contains("the DPU proxy refused collective 7: a step failed"),
            "{e}"
        );
        let e = Outcome::OverCap {
            bytes: None,
            why: String::new(),
        }
        .into_result(7, "the proxy", world, Sig::NONE);
        assert!(
            matches!(&e, Err(Error::ProxyMemory { bytes: None, why }) if why.contains("cap")),
            "{e:?}"
        );
    }

    /// A mismatch's sizes go to a rank in a `SIZES` descriptor before the
    /// `DONE` naming their sender and read back whole; a receiving rank
    /// past the descriptor's 32-bit word goes as no descriptor, not cut.
    #[test]
    fn sizes_go_before_the_done_that_names_their_sender() {
        let o = Outcome::mismatch(Sizes::new(3, 1, 16, 8));
        for rank in [1, 3] {
            let d = o.sizes_desc(7, rank).unwrap();
            assert_eq!((Kind::from_wire(d.kind), d.tag), (Some(Kind::Sizes), 7));
            let (code, aux) = o.wire_to(rank);
            let back = Outcome::from_wire(code, aux, String::new())
                .with_sizes(Some(Sizes::from_desc(&d, aux as usize)));
            assert_eq!(back.sizes(), o.sizes());
        }
        assert_eq!(o.why(), "rank 3 sent 16 bytes where rank 1 expected 8");
        // Each side is told of the other.
        assert_eq!(o.clone().read_by(1).wire(), (Code::Mismatch, 3));
        assert_eq!(o.clone().read_by(3).wire(), (Code::Mismatch, 1));
        assert_eq!(o.clone().read_by(3).sizes(), o.sizes());
        assert!(Outcome::failed("x").sizes_desc(7, 1).is_none());
        let named_other = Outcome::Mismatch {
            sender: 2,
            sizes: o.sizes(),
            why: String::new(),
        };
        assert!(named_other.sizes_desc(7, 1).is_none());
        #[cfg(target_pointer_width = "64")]
        assert!(Outcome::mismatch(Sizes::new(3, 1 << 32, 16, 8))
            .sizes_desc(7, 1)
            .is_none());
    }

    /// The window keeps the first outcome of a collective, and the latest
    /// [`REMEMBER`] collectives only.
    #[test]
    fn the_window_keeps_the_first_outcome_and_the_latest_collectives() {
        let mut e = Ended::default();
        assert!(e.end(0, Outcome::failed("first")));
        assert!(!e.end(0, Outcome::Done));
        assert_eq!(e.get(0), Some(&Outcome::failed("first")));
        for seq in 1..=REMEMBER as u64 {
            assert!(e.end(seq, Outcome::Done));
        }
        assert!(!e.contains(0), "the oldest went");
        assert!((1..=REMEMBER as u64).all(|s| e.contains(s)));
        assert!(e.failed.is_empty(), "the failure went with its collective");
        // One older than the collective in its place is not kept.
        assert!(e.end(0, Outcome::failed("late")));
        assert!(!e.contains(0) && e.contains(REMEMBER as u64));
    }
}
