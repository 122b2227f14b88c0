//! The life cycle of a collective in a proxy, written once for both
//! placements (host, `server.rs`; DPU, `dpu/server.rs`) and doing no I/O:
//! the state machine of one communicator's collectives ([`Session`], in
//! `life.rs`: events in, [`Effect`]s out), how a collective ended
//! ([`Outcome`], the typed form of the wire's code and `aux` word) and the
//! window of collectives that ended, which drops what comes for them
//! afterwards ([`Ended`]). `sim.rs` tests the machine over simulated nodes.
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
use super::protocol::Code;
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
    /// communicator's rank that sent it.
    Mismatch {
        /// The rank whose message was refused.
        sender: usize,
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

impl Outcome {
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
    /// of this machine's word size is a [`Outcome::Failed`] naming it.
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
    /// proxy's answers carry none) gets the general one of its kind. `ours`
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
            Outcome::Mismatch { sender, why } => Error::CountMismatch {
                rank: world(sender),
                detail: if why.is_empty() {
                    "message sizes differ".into()
                } else {
                    why
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
                    "more than the proxy's cap allows beside the collectives in flight",
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
                why: "size".into(),
            },
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
    /// sent, for every variant (the node's reason is carried in words).
    #[test]
    fn outcomes_cross_the_wire_unchanged() {
        for o in every() {
            let (code, aux) = o.wire();
            assert_eq!(Code::from_wire(code as u64), code, "{o:?}");
            assert_eq!(Outcome::from_wire(code, aux, o.why()), o);
        }
    }

    /// Each outcome has its own code and `aux` word: no two variants (nor
    /// two values of one) read alike on the wire.
    #[test]
    fn outcomes_differ_on_the_wire() {
        let wires: Vec<(Code, u64)> = every().iter().map(Outcome::wire).collect();
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
        let e = Outcome::Mismatch {
            sender: 1,
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
