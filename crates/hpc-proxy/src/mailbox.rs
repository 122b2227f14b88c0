//! The point-to-point messages a DPU-placed proxy carries for its node's
//! ranks: the receives they posted and the messages no receive took yet,
//! matched as the ranks' own path matches them (MPI's rules). No I/O: the
//! server feeds it requests and arrivals and carries out what it answers,
//! as it does for a collective's [`Session`](crate::session::Session).
//!
//! A message from a rank of this node or of another node's proxy is matched
//! by the earliest posted receive of its destination that fits its source
//! and tag ([`Want`], the executor's); a receive posted takes the earliest
//! held message of its destination that fits. So receives are matched in
//! the order they were posted, and one sender's messages in the order they
//! arrived, which is the order it sent them (its proxy forwards them in
//! order, and the transport keeps one pair's order). A message of another
//! element type or length than the receive that takes it fails that
//! receive, by name, and is dropped, as on the ranks' own path. What is held
//! is admitted against the proxy's memory budget: a message it cannot hold
//! is remembered by its size only, and fails the receive that takes it with
//! the proxy's memory error, so that its sender's later messages are not
//! taken out of order.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use hpc_board::p2p::Want;

/// A receive posted by a rank of this node and not matched yet.
struct Posted<K> {
    dest: usize,
    key: K,
    want: Want,
    len: usize,
}

/// A message for a rank of this node that no receive took yet.
struct Held {
    src: usize,
    dest: usize,
    /// Its schedule tag: the user's tag and its element type
    /// ([`p2p_tag`](hpc_board::p2p::p2p_tag)).
    tag: u32,
    /// Its bytes, or the size of those the proxy could not hold and why.
    body: Result<Vec<u8>, (usize, String)>,
}

/// Why a receive failed (ranks are the communicator's; a tag is the
/// message's schedule tag).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Failure {
    /// The message it took is of another element type (its schedule tag).
    Type {
        /// The sending rank.
        src: usize,
        /// The message's schedule tag.
        tag: u32,
    },
    /// The message it took has `sent` bytes, not the receive's.
    Length {
        /// The sending rank.
        src: usize,
        /// The message's schedule tag.
        tag: u32,
        /// The message's length in bytes.
        sent: usize,
    },
    /// The proxy could not hold the message it took, of `bytes`.
    Memory {
        /// The sending rank.
        src: usize,
        /// The message's schedule tag.
        tag: u32,
        /// The message's length in bytes.
        bytes: usize,
        /// Why the proxy could not hold it.
        why: String,
    },
    /// The one rank it takes messages from is lost.
    Lost {
        /// The rank that is lost.
        rank: usize,
    },
    /// The node of the one rank it takes messages from is lost (the
    /// world's id of the node).
    Node {
        /// The world's id of the node.
        node: usize,
    },
}

/// What a match asks the proxy to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Matched<K> {
    /// Write `data` into receive `key` of rank `dest`, which took the
    /// message of `src` with schedule tag `tag`; `held` bytes of the budget
    /// are free again.
    Deliver {
        dest: usize,
        key: K,
        src: usize,
        tag: u32,
        data: Vec<u8>,
        held: usize,
    },
    /// Receive `key` of rank `dest` failed; `held` bytes are free again.
    Fail {
        dest: usize,
        key: K,
        why: Failure,
        held: usize,
    },
}

/// The receives posted and the messages held for one communicator's ranks
/// on this node; `K` names a receive to its rank (its number on the link).
pub struct Mailbox<K> {
    posted: VecDeque<Posted<K>>,
    held: VecDeque<Held>,
    /// Bytes held, admitted against the budget.
    bytes: usize,
}

impl<K: Copy + PartialEq> Default for Mailbox<K> {
    fn default() -> Self {
        Mailbox {
            posted: VecDeque::new(),
            held: VecDeque::new(),
            bytes: 0,
        }
    }
}

/// Matches receive `p` with message `m`: its delivery, or the failure
/// that the type, length or a message not held give.
fn pair<K>(p: Posted<K>, m: Held) -> Matched<K> {
    let (src, tag) = (m.src, m.tag);
    let (held, why) = match m.body {
        Err((bytes, why)) => (
            0,
            Some(Failure::Memory {
                src,
                tag,
                bytes,
                why,
            }),
        ),
        Ok(data) => {
            let n = data.len();
            if !p.want.same_type(tag) {
                (n, Some(Failure::Type { src, tag }))
            } else if n != p.len {
                (n, Some(Failure::Length { src, tag, sent: n }))
            } else {
                return Matched::Deliver {
                    dest: p.dest,
                    key: p.key,
                    src,
                    tag,
                    data,
                    held: n,
                };
            }
        }
    };
    Matched::Fail {
        dest: p.dest,
        key: p.key,
        why: why.expect("a failure when not delivered"),
        held,
    }
}

impl<K: Copy + PartialEq> Mailbox<K> {
    /// Rank `dest` posts receive `key` of `len` bytes taking what `want`
    /// takes: matched at once with the earliest held message that fits.
    pub fn post(&mut self, dest: usize, key: K, want: Want, len: usize) -> Option<Matched<K>> {
        let p = Posted {
            dest,
            key,
            want,
            len,
        };
        let Some(i) = self
            .held
            .iter()
            .position(|m| m.dest == dest && want.fits(m.src, m.tag))
        else {
            self.posted.push_back(p);
            return None;
        };
        let m = self.held.remove(i)?;
        self.bytes -= m.body.as_ref().map_or(0, Vec::len);
        Some(pair(p, m))
    }

    /// A message of `src` for rank `dest` with schedule tag `tag` arrived:
    /// the earliest posted receive of `dest` that fits takes it; else it is
    /// held, if `admit` grants its bytes (else only its size, and why not).
    pub fn arrive(
        &mut self,
        src: usize,
        dest: usize,
        tag: u32,
        data: Vec<u8>,
        admit: impl FnOnce(usize) -> Result<(), String>,
    ) -> Option<Matched<K>> {
        self.arrive_body(src, dest, tag, Ok(data), admit)
    }

    /// A message of `src` for rank `dest` of `bytes` that the proxy did not
    /// read (`why`): the receive that takes it, now or when posted, fails
    /// with the memory error, as for a message it could not hold.
    pub fn arrive_unheld(
        &mut self,
        src: usize,
        dest: usize,
        tag: u32,
        bytes: usize,
        why: String,
    ) -> Option<Matched<K>> {
        self.arrive_body(src, dest, tag, Err((bytes, why)), |_| Ok(()))
    }

    fn arrive_body(
        &mut self,
        src: usize,
        dest: usize,
        tag: u32,
        body: Result<Vec<u8>, (usize, String)>,
        admit: impl FnOnce(usize) -> Result<(), String>,
    ) -> Option<Matched<K>> {
        let m = Held {
            src,
            dest,
            tag,
            body,
        };
        if let Some(i) = self
            .posted
            .iter()
            .position(|p| p.dest == dest && p.want.fits(src, tag))
        {
            let p = self.posted.remove(i)?;
            let mut got = pair(p, m);
            // It was never held.
            let (Matched::Deliver { held, .. } | Matched::Fail { held, .. }) = &mut got;
            *held = 0;
            return Some(got);
        }
        let body = match m.body {
            Ok(data) => {
                let n = data.len();
                match admit(n) {
                    Ok(()) => Ok(data),
                    Err(why) => Err((n, why)),
                }
            }
            unheld => unheld,
        };
        let n = body.as_ref().map_or(0, Vec::len);
        if body.is_ok() {
            self.bytes += n;
        }
        self.held.push_back(Held { body, ..m });
        None
    }

    /// Rank `dest` gave receive `key` up: whether it was still posted.
    pub fn cancel(&mut self, dest: usize, key: K) -> bool {
        let before = self.posted.len();
        self.posted.retain(|p| !(p.dest == dest && p.key == key));
        self.posted.len() < before
    }

    /// Rank `dest` of this node is gone: its receives and the messages held
    /// for it go; the bytes freed.
    pub fn leave(&mut self, dest: usize) -> usize {
        self.posted.retain(|p| p.dest != dest);
        let mut freed = 0;
        self.held.retain(|m| {
            let keep = m.dest != dest;
            if !keep {
                freed += m.body.as_ref().map_or(0, Vec::len);
            }
            keep
        });
        self.bytes -= freed;
        freed
    }

    /// The receives that take messages from one rank only, for which `lost`
    /// says why that rank is lost, fail (a message it sent before, held
    /// here, was taken when they were posted).
    pub fn fail_waiting(&mut self, lost: impl Fn(usize) -> Option<Failure>) -> Vec<Matched<K>> {
        let mut failed = Vec::new();
        let mut i = 0;
        while i < self.posted.len() {
            let why = self.posted[i].want.source().and_then(&lost);
            match why.and_then(|why| Some((why, self.posted.remove(i)?))) {
                Some((why, p)) => failed.push(Matched::Fail {
                    dest: p.dest,
                    key: p.key,
                    why,
                    held: 0,
                }),
                None => i += 1,
            }
        }
        failed
    }

    /// Whether a posted receive waits for one rank alone.
    pub fn waits_for_one(&self) -> bool {
        self.posted.iter().any(|p| p.want.source().is_some())
    }

    /// The ranks that posted receives wait for alone, each once.
    pub fn sources(&self) -> Vec<usize> {
        let mut s: Vec<usize> = self.posted.iter().filter_map(|p| p.want.source()).collect();
        s.sort_unstable();
        s.dedup();
        s
    }

    /// Bytes of the messages held.
    pub fn held_bytes(&self) -> usize {
        self.bytes
    }

    /// Whether nothing is posted or held.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.posted.is_empty() && self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hpc_board::p2p::p2p_tag;
    use hpc_collectives::DataType;

    fn want(src: Option<usize>, tag: Option<u16>, dtype: DataType) -> Want {
        Want::new(src, tag, p2p_tag(0, dtype))
    }

    fn delivered(m: Option<Matched<u64>>) -> (u64, usize, u32, Vec<u8>) {
        match m {
            Some(Matched::Deliver {
                key,
                src,
                tag,
                data,
                ..
            }) => (key, src, tag, data),
            o => panic!("not a delivery: {o:?}"),
        }
    }

    const F64: DataType = DataType::F64;

    #[test]
    fn receives_take_messages_in_post_and_arrival_order() {
        let mut mb = Mailbox::<u64>::default();
        let t = |tag| p2p_tag(tag, F64);
        // Two receives of any source and tag of rank 0, posted before anything came.
        assert!(mb.post(0, 1, want(None, None, F64), 8).is_none());
        assert!(mb.post(0, 2, want(None, None, F64), 8).is_none());
        // A message for rank 1 is nobody's here yet.
        assert!(mb.arrive(2, 1, t(5), vec![9; 8], |_| Ok(())).is_none());
        assert_eq!(mb.held_bytes(), 8);
        // Rank 0's messages go to its receives in the order they were posted.
        assert_eq!(
            delivered(mb.arrive(3, 0, t(7), vec![1; 8], |_| Ok(()))).0,
            1
        );
        assert_eq!(
            delivered(mb.arrive(2, 0, t(8), vec![2; 8], |_| Ok(()))).0,
            2
        );
        // Held messages of one sender go out in their order, to the receives that fit.
        assert!(mb.arrive(2, 1, t(6), vec![8; 8], |_| Ok(())).is_none());
        assert!(mb.arrive(2, 1, t(5), vec![7; 8], |_| Ok(())).is_none());
        let (_, src, tag, data) = delivered(mb.post(1, 3, want(Some(2), Some(5), F64), 8));
        assert_eq!((src, tag, data), (2, t(5), vec![9; 8]));
        let (_, _, tag, _) = delivered(mb.post(1, 4, want(Some(2), None, F64), 8));
        assert_eq!(tag, t(6), "any tag: the earliest of the sender's");
        let (_, _, tag, data) = delivered(mb.post(1, 5, want(None, Some(5), F64), 8));
        assert_eq!((tag, data), (t(5), vec![7; 8]));
        assert!(mb.is_empty());
        assert_eq!(mb.held_bytes(), 0);
    }

    #[test]
    fn type_length_and_memory_fail_the_receive_that_takes_the_message() {
        let mut mb = Mailbox::<u64>::default();
        let f32_tag = p2p_tag(4, DataType::F32);
        mb.arrive(1, 0, f32_tag, vec![0; 16], |_| Ok(()));
        match mb.post(0, 1, want(Some(1), Some(4), DataType::I32), 16) {
            Some(Matched::Fail {
                why: Failure::Type { src: 1, tag },
                held: 16,
                ..
            }) => assert_eq!(tag, f32_tag),
            o => panic!("{o:?}"),
        }
        // Dropped: the next receive waits.
        assert!(mb
            .post(0, 2, want(Some(1), Some(4), DataType::F32), 12)
            .is_none());
        match mb.arrive(1, 0, f32_tag, vec![0; 16], |_| Ok(())) {
            Some(Matched::Fail {
                key: 2,
                why: Failure::Length { sent: 16, .. },
                held: 0,
                ..
            }) => {}
            o => panic!("{o:?}"),
        }
        // Not admitted: held by its size, failing the receive that takes it,
        // in its sender's order.
        let room = |n: usize| {
            if n < 100 {
                Ok(())
            } else {
                Err(format!("{n} bytes over the cap"))
            }
        };
        mb.arrive(1, 0, f32_tag, vec![0; 1000], room);
        mb.arrive(1, 0, f32_tag, vec![5; 8], room);
        assert_eq!(mb.held_bytes(), 8);
        match mb.post(0, 3, want(Some(1), None, DataType::F32), 8) {
            Some(Matched::Fail {
                why: Failure::Memory {
                    bytes: 1000, why, ..
                },
                held: 0,
                ..
            }) => assert!(why.contains("1000 bytes"), "{why}"),
            o => panic!("{o:?}"),
        }
        let (_, _, _, data) = delivered(mb.post(0, 4, want(Some(1), None, DataType::F32), 8));
        assert_eq!(data, vec![5; 8]);
        // One the proxy would not read (known by its size only) fails the
        // receive posted before it, and one posted after, with its size and why.
        assert!(mb
            .post(0, 5, want(Some(1), None, DataType::F32), 8)
            .is_none());
        for key in [5, 6] {
            let got = match key {
                5 => mb.arrive_unheld(1, 0, f32_tag, 4096, "4096 bytes: no room".into()),
                _ => {
                    mb.arrive_unheld(1, 0, f32_tag, 4096, "4096 bytes: no room".into());
                    mb.post(0, 6, want(Some(1), None, DataType::F32), 8)
                }
            };
            match got {
                Some(Matched::Fail {
                    key: k,
                    why:
                        Failure::Memory {
                            bytes: 4096, why, ..
                        },
                    held: 0,
                    ..
                }) => assert!(k == key && why.contains("no room"), "{why}"),
                o => panic!("{o:?}"),
            }
        }
        assert_eq!(mb.held_bytes(), 0);
    }

    /// Seeded random arrivals, receives and cancels among 3 ranks, against
    /// MPI's rule written out: an arrival goes to the earliest posted
    /// receive of its destination that fits it, a receive takes the earliest
    /// held message that fits it, else each waits.
    #[test]
    fn random_traffic_is_matched_by_the_earliest_that_fits() {
        use crate::session::sim::Rng;
        for seed in 1..=300u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut mb = Mailbox::<u64>::default();
            // Messages held (number, source, destination, tag), in arrival
            // order; receives posted (key, rank, want), in post order.
            let mut held: Vec<(u64, usize, usize, u32)> = Vec::new();
            let mut posted: Vec<(u64, usize, Want)> = Vec::new();
            let mut n = 0u64;
            for step in 0..200 {
                n += 1;
                let at = format!("seed {seed}, step {step}");
                // What the rule expects (receive, message, source, tag), and what came.
                let (expected, got) = match rng.below(5) {
                    0 | 1 => {
                        let (src, dest) = (rng.below(3), rng.below(3));
                        let tag = p2p_tag(rng.below(3) as u16, F64);
                        let got = mb.arrive(src, dest, tag, n.to_le_bytes().to_vec(), |_| Ok(()));
                        let first = posted
                            .iter()
                            .position(|(_, d, w)| *d == dest && w.fits(src, tag));
                        let expected = match first {
                            Some(i) => Some((posted.remove(i).0, n, src, tag)),
                            None => {
                                held.push((n, src, dest, tag));
                                None
                            }
                        };
                        (expected, got)
                    }
                    2 | 3 => {
                        let dest = rng.below(3);
                        let src = (rng.below(4) < 3).then(|| rng.below(3));
                        let tag = (rng.below(4) < 3).then(|| rng.below(3) as u16);
                        let want = Want::new(src, tag, p2p_tag(0, F64));
                        let got = mb.post(dest, n, want, 8);
                        let first = held
                            .iter()
                            .position(|(_, s, d, t)| *d == dest && want.fits(*s, *t));
                        let expected = match first {
                            Some(i) => {
                                let (m, s, _, t) = held.remove(i);
                                Some((n, m, s, t))
                            }
                            None => {
                                posted.push((n, dest, want));
                                None
                            }
                        };
                        (expected, got)
                    }
                    _ if !posted.is_empty() => {
                        let (key, dest, _) = posted.remove(rng.below(posted.len()));
                        assert!(mb.cancel(dest, key), "{at}");
                        continue;
                    }
                    _ => continue,
                };
                match expected {
                    Some((key, m, src, tag)) => {
                        let (k, s, t, data) = delivered(got);
                        assert_eq!((k, s, t), (key, src, tag), "{at}");
                        assert_eq!(data, m.to_le_bytes(), "{at}: message {m}");
                    }
                    None => assert!(got.is_none(), "{at}: {got:?}"),
                }
            }
            assert_eq!(mb.held_bytes(), 8 * held.len(), "seed {seed}");
        }
    }

    #[test]
    fn a_lost_rank_fails_the_receives_that_wait_for_it_alone() {
        let mut mb = Mailbox::<u64>::default();
        let t = p2p_tag(1, F64);
        assert!(mb.post(0, 1, want(Some(2), Some(1), F64), 8).is_none());
        assert!(mb.post(0, 2, want(None, Some(1), F64), 8).is_none());
        assert!(mb.post(0, 3, want(Some(3), Some(1), F64), 8).is_none());
        // Rank 3 sent one (tag 2) before it went: taken by a receive posted later.
        assert!(mb
            .arrive(3, 0, p2p_tag(2, F64), vec![1; 8], |_| Ok(()))
            .is_none());
        assert!(mb.post(0, 4, want(Some(3), Some(2), F64), 8).is_some());
        // Rank 2 has a receive, and a message held for it.
        assert!(mb.post(2, 5, want(Some(0), Some(9), F64), 8).is_none());
        assert!(mb.arrive(0, 2, t, vec![1; 8], |_| Ok(())).is_none());
        assert!(mb.cancel(0, 1) && !mb.cancel(0, 1));
        assert_eq!(
            mb.sources(),
            vec![0, 3],
            "rank 2's receive from 0, rank 0's from 3"
        );
        assert!(mb.waits_for_one());
        let lost = |r: usize| (r == 3).then_some(Failure::Lost { rank: 3 });
        let keys: Vec<u64> = mb
            .fail_waiting(lost)
            .iter()
            .map(|m| match m {
                Matched::Fail {
                    key,
                    why: Failure::Lost { rank: 3 },
                    ..
                } => *key,
                o => panic!("{o:?}"),
            })
            .collect();
        assert_eq!(keys, vec![3], "a receive of any source waits on");
        assert!(mb.fail_waiting(lost).is_empty(), "failed once");
        // Rank 2's receive and held message go with it.
        assert_eq!(mb.held_bytes(), 8);
        assert_eq!(mb.leave(2), 8);
        assert_eq!(mb.held_bytes(), 0);
        assert!(!mb.cancel(2, 5));
        // The receive of any source is still posted: it waits for no one rank.
        assert!(!mb.waits_for_one());
        assert!(mb.cancel(0, 2));
        assert!(mb.is_empty());
    }
}
