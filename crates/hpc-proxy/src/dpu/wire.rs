//! The messages between a rank and its node's DPU proxy: tags, numbers on
//! the link, requests, answers and the checks of a submitted part.

use hpc_board::{Error, Result};
use hpc_collectives::{sim, Collective, Options, Schedule};
use hpc_rdma::RemoteKey;
use serde::{Deserialize, Serialize};

/// Tag of the ranks' requests to the proxy.
pub const TAG_REQUEST: u64 = 1;
/// Tag of the node's first rank's [`Place`] message to its proxy.
pub const TAG_PLACE: u64 = 2;
/// Tag of the proxy's word to each rank that it is ready (empty) or why not.
pub const TAG_READY: u64 = 3;
/// Tag of the answer to collective `seq`: this plus the collective's number
/// on the link ([`wire`]).
pub const TAG_ANSWER: u64 = 1 << 32;
/// Bits of a collective's sequence number in its number on the link; the
/// bits above are the communicator's number on the rank's link (0 for the
/// communicator the link was made for, then one per split, [`MAX_LOCAL`] at
/// most).
pub const SEQ_BITS: u32 = 40;
/// The most communicators one rank has on its link to the proxy.
pub const MAX_LOCAL: u32 = (1 << 23) - 1;

/// The number on the link of collective `seq` of the rank's communicator
/// `local` (what its request starts with, and its answer's tag adds).
pub fn wire(local: u32, seq: u64) -> u64 {
    (u64::from(local) << SEQ_BITS) | (seq & ((1 << SEQ_BITS) - 1))
}

/// The communicator's number and the sequence number of a number on the link.
pub fn unwire(w: u64) -> (u32, u64) {
    ((w >> SEQ_BITS) as u32, w & ((1 << SEQ_BITS) - 1))
}

/// The id among the proxies of the group of colour `color` of split `index`
/// of communicator `parent`: every member computes the same, from what every
/// rank of the parent knows alike, and no two groups of one first
/// communicator share it but by a 64-bit hash collision (which the proxy
/// refuses: the same id with other members).
pub fn split_id(parent: u64, index: u64, color: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parent
        .to_le_bytes()
        .into_iter()
        .chain(index.to_le_bytes())
        .chain(color.to_le_bytes())
    {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    // 0 is the first communicator's.
    h.max(1)
}
/// The largest request the proxy decodes (a v-collective's counts for a
/// million ranks fit).
pub const MAX_REQUEST: usize = 64 << 20;

/// A span of a rank's registered memory: the key of its region (as
/// [`RemoteKey::to_bytes`] writes it), an offset and a length.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Span {
    /// The region's remote key, as its owner wrote it.
    pub key: Vec<u8>,
    /// The span's first byte in the region.
    pub offset: u64,
    /// The span's length in bytes.
    pub len: u64,
}

/// What a rank says to the proxy (after the collective's sequence number,
/// 8 bytes little-endian, so that even an undecodable request is answered).
#[derive(Debug, Serialize, Deserialize)]
pub enum Request<C = Collective> {
    /// Run collective `seq` over these spans.
    Submit {
        /// The collective.
        coll: C,
        /// How to run it.
        opts: Options,
        /// What the rank sends.
        send: Span,
        /// Where the rank receives.
        recv: Span,
    },
    /// The rank gave collective `seq` up: neither put nor answer it.
    Cancel,
    /// The rank is gone.
    Detach,
    /// The rank's wait for collective `seq` of this request's communicator
    /// timed out: which ranks' parts of it has the proxy not received?
    /// Answered with a [`Waiting`] on this request's answer tag (its own
    /// number on the link, not the collective's).
    Ask {
        /// The collective's sequence number.
        seq: u64,
    },
    /// The rank is a member of communicator `comm` (its id among the
    /// proxies), a split of the one the link was made for: its collectives
    /// come with this request's communicator number. `members`: the first
    /// communicator's rank of each of its ranks, in rank order.
    Open {
        /// The communicator's id among the proxies.
        comm: u64,
        /// The first communicator's rank of each of its ranks.
        members: Vec<usize>,
    },
    /// A point-to-point message to rank `dest` of the communicator with
    /// schedule tag `tag` (the user's tag and the element type,
    /// [`p2p_tag`](hpc_board::p2p::p2p_tag)). Answered with a [`Delivery`]
    /// once the proxy has its bytes.
    Send {
        /// The receiving rank.
        dest: usize,
        /// The schedule tag.
        tag: u32,
        /// The message's bytes, or where they are.
        body: Body,
    },
    /// A receive of the earliest message from `source` (`None`: any rank)
    /// with `tag` (`None`: any), whose element type's schedule tag is
    /// `kind`, into `into`. Answered with a [`Delivery`] once the message
    /// was put there (or why not).
    Recv {
        /// The rank it takes messages from (`None`: any).
        source: Option<usize>,
        /// The tag it takes (`None`: any).
        tag: Option<u16>,
        /// Its element type's schedule tag.
        kind: u32,
        /// Where the message goes.
        into: Span,
    },
}

/// A point-to-point message's bytes as its request carries them.
#[derive(Debug, Serialize, Deserialize)]
pub enum Body {
    /// In the request (a small message).
    Inline(Vec<u8>),
    /// In the sender's registered memory, which the proxy reads with RMA get.
    Span(Span),
}

/// What the proxy answers to a point-to-point request (on its answer tag).
#[derive(Debug, Serialize, Deserialize)]
pub enum Delivery {
    /// The send's bytes are with the proxy (held, or on their way).
    Sent,
    /// The receive's message, from `source` with schedule tag `tag`, is in
    /// its span.
    Received {
        /// The sending rank.
        source: usize,
        /// The message's schedule tag.
        tag: u32,
    },
    /// The receive failed: the message it took, or the rank it waits for.
    Refused(crate::mailbox::Failure),
    /// The request could not be served (a bad span or rank, a failed RMA).
    Failed(String),
}

/// What the proxy answers to collective `seq` (on tag `TAG_ANSWER + seq`).
#[derive(Debug, Serialize, Deserialize)]
pub struct Answer {
    /// The answer's code ([`Code`](crate::protocol::Code) on the wire).
    pub code: u8,
    /// For `Lost` and `Mismatch`: the rank concerned; for `Disagree`, the
    /// other rank in the high 32 bits and its collective's signature in the
    /// low 32.
    pub aux: u64,
    /// Why, for anything but `Ok`.
    pub why: String,
}

/// What the proxy answers to [`Request::Ask`]: the communicator's ranks
/// whose parts of the collective it has not received.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    /// The ranks whose parts did not come.
    pub ranks: Vec<usize>,
}

/// Decodes the proxy's answer to [`Request::Ask`].
pub fn decode_waiting(bytes: &[u8]) -> std::result::Result<Waiting, String> {
    postcard::from_bytes(bytes).map_err(|e| format!("an undecodable answer to an ask ({e})"))
}

/// What the node's first rank tells its proxy once the link is up: where
/// it is among the communicator's nodes and how to reach the other proxies.
#[derive(Debug, Serialize, Deserialize)]
pub struct Place {
    /// The communicator's rank of each of the link's ranks (the node's ranks).
    pub ranks: Vec<usize>,
    /// The node index of each rank of the communicator.
    pub node_of: Vec<usize>,
    /// The world's node id of each node index (what errors name).
    pub node_ids: Vec<usize>,
    /// This proxy's node index.
    pub me: usize,
    /// The coordinator the nodes' proxies meet at (address, secret), where
    /// the communicator spans nodes.
    pub net: Option<(String, u64)>,
}

/// What each rank contributes to the first allgather of the set-up: a
/// node's first rank its link's coordinator (address and secret) or why it
/// has none; the communicator's first rank also the proxies' coordinator.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Offer {
    /// A node's first rank: its link's coordinator (address, secret), or why none.
    pub link: Option<std::result::Result<(String, u64), String>>,
    /// The communicator's first rank: the proxies' coordinator, or why none.
    pub net: Option<std::result::Result<(String, u64), String>>,
}

/// The nodes of a communicator: the node index of each rank, and the world
/// node id of each index, in the order of their first ranks.
pub fn places(nodes: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let mut ids: Vec<usize> = Vec::new();
    let node_of = nodes
        .iter()
        .map(|n| match ids.iter().position(|i| i == n) {
            Some(k) => k,
            None => {
                ids.push(*n);
                ids.len() - 1
            }
        })
        .collect();
    (node_of, ids)
}

/// A request message: the sequence number `seq`, then the request.
pub fn encode_request<C: Serialize>(seq: u64, req: &Request<C>) -> Result<Vec<u8>> {
    postcard::to_extend(req, seq.to_le_bytes().to_vec())
        .map_err(|e| Error::transport_from("encoding a request to the proxy", e))
}

/// Splits a request message into its sequence number and request.
pub fn decode_request(bytes: &[u8]) -> std::result::Result<(u64, Request), String> {
    if bytes.len() > MAX_REQUEST {
        return Err(format!("a request of {} bytes", bytes.len()));
    }
    let Some((seq, body)) = bytes.split_first_chunk::<8>() else {
        return Err(format!(
            "a request of {} bytes, shorter than its header",
            bytes.len()
        ));
    };
    let seq = u64::from_le_bytes(*seq);
    let req = postcard::from_bytes::<Request>(body)
        .map_err(|e| format!("collective {seq}: an undecodable request ({e})"))?;
    Ok((seq, req))
}

/// One rank's part of a collective, as the proxy checked it.
pub struct Part {
    /// The rank's schedule.
    pub sched: Schedule,
    /// Its send span: key, offset, length.
    pub send: (RemoteKey, u64, usize),
    /// Its receive span: key, offset, length.
    pub recv: (RemoteKey, u64, usize),
    /// The receive span is an input too (the broadcast root's buffer).
    pub recv_input: bool,
}

/// The key, offset and length of span `s` of `rank` (`what`: send or
/// receive, for the error), or why it cannot be read.
pub fn span_key(
    what: &str,
    rank: usize,
    s: &Span,
) -> std::result::Result<(RemoteKey, u64, usize), String> {
    let key = RemoteKey::from_bytes(&s.key).map_err(|e| format!("the {what} key: {e}"))?;
    if key.rank() != rank {
        return Err(format!(
            "the {what} key is rank {}'s, not the sender's (rank {rank})",
            key.rank()
        ));
    }
    let end = s.offset.checked_add(s.len);
    if end.is_none_or(|e| e > key.len()) {
        return Err(format!(
            "the {what} span ({} bytes at {}) exceeds its region of {} bytes",
            s.len,
            s.offset,
            key.len()
        ));
    }
    let len = usize::try_from(s.len).map_err(|_| format!("the {what} span is too long"))?;
    Ok((key, s.offset, len))
}

/// Checks rank `rank`'s submit against a communicator of `size` and builds its
/// schedule: everything the proxy believes of a rank's message.
/// `link` is the sender's rank on the link (whose keys it may name), `rank`
/// its rank in the communicator.
pub fn check_submit(
    coll: &Collective,
    opts: &Options,
    send: &Span,
    recv: &Span,
    link: usize,
    rank: usize,
    size: usize,
) -> std::result::Result<Part, String> {
    let send = span_key("send", link, send)?;
    let recv = span_key("receive", link, recv)?;
    coll.check_buffers(rank, size, send.2, recv.2)
        .map_err(|e| format!("{}: {e}", coll.kind()))?;
    let sched = coll
        .schedule(rank, size, opts)
        .map_err(|e| format!("{}: {e}", coll.kind()))?;
    sim::check(&sched, send.2, recv.2).map_err(|e| format!("{}: {e}", coll.kind()))?;
    Ok(Part {
        sched,
        send,
        recv,
        recv_input: recv_is_input(coll, rank),
    })
}

/// Whether rank `rank`'s receive buffer holds input of `coll` (only the
/// broadcast's root's does: MPI's single buffer).
pub fn recv_is_input(coll: &Collective, rank: usize) -> bool {
    matches!(coll, Collective::Broadcast { root, .. } if *root == rank)
}

/// The fuzz entry: decodes and checks a request as the DPU proxy's
/// `Server` does.
pub fn fuzz_request(bytes: &[u8], rank: usize, size: usize) -> std::result::Result<usize, String> {
    let (_, req) = decode_request(bytes)?;
    let (coll, opts, send, recv) = match req {
        Request::Submit {
            coll,
            opts,
            send,
            recv,
        } => (coll, opts, send, recv),
        // A message's spans are checked as the proxy checks them.
        Request::Send {
            body: Body::Span(s),
            ..
        } => return span_key("message", rank, &s).map(|_| 0),
        Request::Recv { into, .. } => return span_key("receive", rank, &into).map(|_| 0),
        _ => return Ok(0),
    };
    let part = check_submit(&coll, &opts, &send, &recv, rank, rank, size)?;
    let mut steps = 0;
    for round in &part.sched.rounds {
        for step in &round.steps {
            steps += 1;
            for r in step.read().chain(step.written()) {
                let len = match r.buf {
                    hpc_collectives::BufferId::Send => part.send.2,
                    hpc_collectives::BufferId::Recv => part.recv.2,
                    hpc_collectives::BufferId::Scratch => part.sched.scratch_bytes,
                };
                assert!(
                    r.offset.checked_add(r.len).is_some_and(|end| end <= len),
                    "region {r} outside its span of {len} bytes in an accepted request"
                );
            }
        }
    }
    Ok(steps)
}

/// The fuzz entry: decodes a proxy's answer to an ask as a rank does.
pub fn fuzz_waiting(bytes: &[u8]) -> std::result::Result<Vec<usize>, String> {
    decode_waiting(bytes).map(|w| w.ranks)
}

/// The first number on the link of a point-to-point request: above every
/// collective's sequence number (they count from 1), within the bits of a
/// number on the link ([`SEQ_BITS`]).
pub const P2P_FIRST: u64 = 1 << 39;

#[cfg(test)]
mod tests {
    use super::*;
    use hpc_collectives::DataType;
    use hpc_rdma::{Choice, Transport};
    use hpc_runtime::World;
    use std::collections::HashMap;

    #[test]
    fn requests_round_trip_and_garbage_is_refused() {
        let coll = Collective::Allgather {
            count: 4,
            dtype: DataType::F32,
        };
        let span = |len| Span {
            key: vec![0; 8],
            offset: 0,
            len,
        };
        let req = Request::Submit {
            coll: &coll,
            opts: Options::default(),
            send: span(16),
            recv: span(32),
        };
        let bytes = encode_request(7, &req).unwrap();
        let (seq, back) = decode_request(&bytes).unwrap();
        assert_eq!(seq, 7);
        assert!(
            matches!(back, Request::Submit { ref coll, .. } if *coll == Collective::Allgather { count: 4, dtype: DataType::F32 })
        );
        assert!(decode_request(&bytes[..5])
            .unwrap_err()
            .contains("shorter than its header"));
        let e = decode_request(&bytes[..bytes.len() - 3]).unwrap_err();
        assert!(
            e.contains("collective 7") && e.contains("undecodable"),
            "{e}"
        );
    }

    #[test]
    fn submits_with_bad_keys_or_spans_are_refused_by_reason() {
        let world =
            World::init_with(hpc_runtime::Config::from_map(HashMap::new()).unwrap()).unwrap();
        let t = Transport::with_options(
            &world,
            hpc_rdma::Options {
                backend: Choice::Tcp,
                ..Default::default()
            },
        )
        .unwrap();
        let region = t.register(4096).unwrap();
        let key = region.remote_key().to_bytes().to_vec();
        let sp = |offset, len| Span {
            key: key.clone(),
            offset,
            len,
        };
        let coll = Collective::Allreduce {
            count: 8,
            dtype: DataType::I64,
            op: hpc_collectives::ReduceOp::Sum,
        };
        let o = Options::default();
        let part = check_submit(&coll, &o, &sp(0, 64), &sp(64, 64), 0, 0, 1).unwrap();
        assert_eq!((part.send.2, part.recv.1, part.recv.2), (64, 64, 64));
        let why = |s: &Span, r: &Span, rank, size| {
            check_submit(&coll, &o, s, r, rank, rank, size)
                .err()
                .unwrap()
        };
        let e = why(&sp(4090, 64), &sp(0, 64), 0, 1);
        assert!(
            e.contains("send span") && e.contains("exceeds its region of 4096"),
            "{e}"
        );
        let e = why(&sp(0, 64), &sp(u64::MAX, 2), 0, 1);
        assert!(e.contains("receive span"), "{e}");
        // A key of rank 0 in rank 1's request: refused, whatever the spans.
        let e = why(&sp(0, 64), &sp(64, 64), 1, 2);
        assert!(e.contains("rank 0's, not the sender's (rank 1)"), "{e}");
        let e = why(&sp(0, 64), &sp(64, 63), 0, 1);
        assert!(e.contains("allreduce") && e.contains("63"), "{e}");
        let garbled = Span {
            key: vec![7; 10],
            offset: 0,
            len: 0,
        };
        let e = why(&garbled, &sp(64, 64), 0, 1);
        assert!(e.starts_with("the send key"), "{e}");
        // The fuzz entry agrees: a submit it accepts, and a garbled one.
        let req = Request::Submit {
            coll: &coll,
            opts: o,
            send: sp(0, 64),
            recv: sp(64, 64),
        };
        let bytes = encode_request(3, &req).unwrap();
        assert!(fuzz_request(&bytes, 0, 1).unwrap() > 0);
        // Rank 1 of 3 sending rank 0's key.
        assert!(fuzz_request(&bytes, 1, 3).is_err());
    }

    #[test]
    fn messages_round_trip_and_their_spans_are_checked() {
        let span = |len| Span {
            key: vec![0x5a; hpc_rdma::REMOTE_KEY_BYTES],
            offset: 8,
            len,
        };
        let recv = Request::<Collective>::Recv {
            source: None,
            tag: Some(4),
            kind: 7 << 16,
            into: span(16),
        };
        let bytes = encode_request(wire(2, 9), &recv).unwrap();
        let (w, back) = decode_request(&bytes).unwrap();
        assert_eq!(unwire(w), (2, 9));
        assert!(matches!(
            back,
            Request::Recv {
                source: None,
                tag: Some(4),
                kind: 0x70000,
                ..
            }
        ));
        // A key of no region: refused by the check the proxy makes.
        let e = fuzz_request(&bytes, 0, 1).unwrap_err();
        assert!(e.starts_with("the receive key"), "{e}");
        let send = Request::<Collective>::Send {
            dest: 1,
            tag: 3,
            body: Body::Inline(vec![1, 2, 3]),
        };
        let bytes = encode_request(5, &send).unwrap();
        assert!(matches!(
            decode_request(&bytes).unwrap().1,
            Request::Send { dest: 1, tag: 3, body: Body::Inline(ref b) } if b == &[1, 2, 3]
        ));
        assert_eq!(fuzz_request(&bytes, 0, 2), Ok(0));
        let ask = Request::<Collective>::Ask { seq: 12 };
        let bytes = encode_request(wire(1, (1 << 39) + 3), &ask).unwrap();
        let (w, back) = decode_request(&bytes).unwrap();
        assert_eq!(unwire(w), (1, (1 << 39) + 3));
        assert!(matches!(back, Request::Ask { seq: 12 }));
        assert_eq!(fuzz_request(&bytes, 0, 2), Ok(0));
        let waiting = Waiting {
            ranks: vec![0, 7, 1 << 20],
        };
        let b = postcard::to_allocvec(&waiting).unwrap();
        assert_eq!(decode_waiting(&b), Ok(waiting));
        assert!(decode_waiting(&b[..b.len() - 1])
            .unwrap_err()
            .contains("undecodable"));
        let d = postcard::to_allocvec(&Delivery::Received { source: 3, tag: 9 }).unwrap();
        assert!(matches!(
            postcard::from_bytes::<Delivery>(&d).unwrap(),
            Delivery::Received { source: 3, tag: 9 }
        ));
    }

    #[test]
    fn mangled_requests_are_refused_not_panicked_on() {
        // Every truncation and every single-byte change of a valid request
        // (keys of no region: the checks refuse them, the decoder must not panic).
        let coll = Collective::Alltoallv {
            send_counts: vec![1, 2, 3],
            recv_counts: vec![3, 2, 1],
            dtype: DataType::U16,
        };
        let span = |len| Span {
            key: vec![0x5a; hpc_rdma::REMOTE_KEY_BYTES],
            offset: 8,
            len,
        };
        let req = Request::Submit {
            coll: &coll,
            opts: Options::default(),
            send: span(12),
            recv: span(12),
        };
        let bytes = encode_request(9, &req).unwrap();
        for n in 0..bytes.len() {
            assert!(fuzz_request(&bytes[..n], 1, 3).is_err(), "truncated to {n}");
        }
        for i in 0..bytes.len() {
            for x in [0x01u8, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[i] ^= x;
                let _ = fuzz_request(&b, 1, 3);
            }
        }
    }

    #[test]
    fn communicators_on_a_link_never_share_an_answer_tag() {
        // Every (communicator, sequence) pair its own number on the link, and
        // back; none of them a request, place or ready tag.
        let locals = [0, 1, 2, 77, MAX_LOCAL];
        let seqs = [0, 1, 2, 1 << 32, (1 << SEQ_BITS) - 1];
        let mut tags = std::collections::HashSet::new();
        for &l in &locals {
            for &q in &seqs {
                assert_eq!(unwire(wire(l, q)), (l, q));
                let tag = TAG_ANSWER.checked_add(wire(l, q)).unwrap();
                assert!(tag > TAG_READY);
                assert!(tags.insert(tag), "({l}, {q}) shares a tag");
            }
        }
        // The first communicator's answers keep their tags.
        assert_eq!(TAG_ANSWER + wire(0, 5), TAG_ANSWER + 5);
    }

    #[test]
    fn split_ids_differ_by_parent_split_and_colour() {
        let mut ids = std::collections::HashSet::new();
        for parent in [0, split_id(0, 0, 0), split_id(0, 3, 1)] {
            for index in 0..50 {
                for color in [0, 1, 2, u32::MAX] {
                    let id = split_id(parent, index, color);
                    assert_ne!(id, 0, "0 is the first communicator's");
                    assert_eq!(id, split_id(parent, index, color));
                    assert!(
                        ids.insert(id),
                        "({parent:x}, {index}, {color}) repeats an id"
                    );
                }
            }
        }
    }
}
