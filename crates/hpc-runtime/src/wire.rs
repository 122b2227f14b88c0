//! The bootstrap protocol between ranks and the `hpc run` coordinator.
//!
//! Frames are `u32` little-endian length, then the body: a one-byte kind and its fields
//! (integers little-endian, byte strings as `u32` length + bytes). Decoding never
//! panics: a short, oversized or unknown frame is a [`Error::Protocol`].

use std::io::{Read, Write};

use crate::error::{Error, Result};

/// The most ranks a job has, and a [`Coordinator`](crate::Coordinator)
/// takes: a rank is a 32-bit signed number on the wire and in MPI
/// (`i32::MAX`).
pub const MAX_JOB_RANKS: usize = i32::MAX as usize;

/// Largest frame accepted (the bootstrap channel carries endpoints, not bulk data).
pub const MAX_FRAME: usize = 256 << 20;

/// The most bytes a collective of the coordinator carries: a rank's
/// contribution, and the parts of its result together (a frame less room for
/// its fields). A rank refuses a larger contribution before sending it, and
/// the coordinator a result larger than this ([`Msg::Mismatch`] to every
/// rank): a contribution of 300 MB was sent and refused by the coordinator,
/// which the ranks read as the launcher or a rank lost, a result of 400 MB was
/// refused by every rank, whose next read then took the frame's body as
/// messages, and a length beyond `u32::MAX` was written cut to 32 bits.
pub const MAX_DATA: usize = MAX_FRAME - 64;

/// The bytes of a [`Msg::Result`] of `parts` (as [`frame`] counts them, without
/// its length prefix), saturating.
pub fn result_bytes<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> usize {
    parts.into_iter().fold(1 + 8 + 4, |n: usize, p| {
        n.saturating_add(4).saturating_add(p.len())
    })
}

/// A collective operation as named on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Everyone contributes, everyone receives every contribution.
    Allgather,
    /// Only the root's contribution is delivered.
    Broadcast {
        /// The root rank.
        root: u32,
    },
    /// No data.
    Barrier,
}

impl Op {
    /// Human name for messages.
    pub fn name(&self) -> String {
        match self {
            Op::Allgather => "allgather".into(),
            Op::Broadcast { root } => format!("broadcast(root={root})"),
            Op::Barrier => "barrier".into(),
        }
    }
}

/// One protocol message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// Rank → coordinator: first message on a connection.
    Hello {
        /// The rank connecting.
        rank: u32,
        /// The job size it believes in.
        size: u32,
        /// The job secret handed out by the launcher.
        secret: u64,
        /// Node (host) name of the rank.
        node: String,
        /// OS process id.
        pid: u32,
    },
    /// Coordinator → rank: everyone has joined; the node name of each rank.
    Welcome {
        /// Node name per rank.
        nodes: Vec<String>,
    },
    /// Rank → coordinator: its part of collective number `seq`.
    Contribute {
        /// Collective sequence number (1, 2, ...), equal on all ranks.
        seq: u64,
        /// Which collective.
        op: Op,
        /// The rank's bytes.
        data: Vec<u8>,
    },
    /// Coordinator → rank: the result of collective `seq`.
    Result {
        /// Collective sequence number.
        seq: u64,
        /// One part per rank (allgather), one part (broadcast) or none (barrier).
        parts: Vec<Vec<u8>>,
    },
    /// Coordinator → rank: a rank is lost; the job cannot go on.
    Abort {
        /// The lost rank.
        rank: u32,
        /// What happened.
        cause: String,
    },
    /// Coordinator → rank: a collective timed out.
    Timeout {
        /// The operation's name.
        op: String,
        /// How long the coordinator waited, in milliseconds.
        after_ms: u64,
        /// Ranks that never contributed.
        missing: Vec<u32>,
    },
    /// Coordinator → rank: ranks called different collectives, a rank
    /// contributed twice, or the result is more than a frame carries
    /// ([`MAX_DATA`]).
    Mismatch {
        /// Explanation naming the ranks and the calls.
        detail: String,
    },
    /// Rank → coordinator: the rank finalizes; its connection will close.
    Goodbye,
}

struct Enc(Vec<u8>);
impl Enc {
    fn u8(&mut self, v: u8) {
        self.0.push(v)
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes())
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes())
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b)
    }
}

struct Dec<'a>(&'a [u8]);
impl<'a> Dec<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(Error::Protocol(format!(
                "truncated frame: wanted {n} more bytes, {} left",
                self.0.len()
            )));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn bytes(&mut self) -> Result<Vec<u8>> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn string(&mut self) -> Result<String> {
        String::from_utf8(self.bytes()?).map_err(|_| Error::Protocol("string is not UTF-8".into()))
    }
    /// A count of items each at least `min` bytes long: bounded by what is left.
    fn count(&mut self, min: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min.max(1)) > self.0.len() {
            return Err(Error::Protocol(format!("count {n} exceeds the frame")));
        }
        Ok(n)
    }
}

impl Msg {
    /// Encodes the message body (without the length prefix).
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc(Vec::with_capacity(32));
        match self {
            Msg::Hello {
                rank,
                size,
                secret,
                node,
                pid,
            } => {
                e.u8(1);
                e.u32(*rank);
                e.u32(*size);
                e.u64(*secret);
                e.bytes(node.as_bytes());
                e.u32(*pid);
            }
            Msg::Welcome { nodes } => {
                e.u8(2);
                e.u32(nodes.len() as u32);
                for n in nodes {
                    e.bytes(n.as_bytes());
                }
            }
            Msg::Contribute { seq, op, data } => {
                e.u8(3);
                e.u64(*seq);
                match op {
                    Op::Allgather => e.u8(0),
                    Op::Broadcast { root } => {
                        e.u8(1);
                        e.u32(*root)
                    }
                    Op::Barrier => e.u8(2),
                }
                e.bytes(data);
            }
            Msg::Result { seq, parts } => {
                e.u8(4);
                e.u64(*seq);
                e.u32(parts.len() as u32);
                for p in parts {
                    e.bytes(p);
                }
            }
            Msg::Abort { rank, cause } => {
                e.u8(5);
                e.u32(*rank);
                e.bytes(cause.as_bytes());
            }
            Msg::Timeout {
                op,
                after_ms,
                missing,
            } => {
                e.u8(6);
                e.bytes(op.as_bytes());
                e.u64(*after_ms);
                e.u32(missing.len() as u32);
                for m in missing {
                    e.u32(*m);
                }
            }
            Msg::Mismatch { detail } => {
                e.u8(7);
                e.bytes(detail.as_bytes());
            }
            Msg::Goodbye => e.u8(8),
        }
        e.0
    }

    /// Decodes a message body. Never panics; trailing bytes are an error.
    pub fn decode(body: &[u8]) -> Result<Msg> {
        let mut d = Dec(body);
        let msg = match d.u8()? {
            1 => Msg::Hello {
                rank: d.u32()?,
                size: d.u32()?,
                secret: d.u64()?,
                node: d.string()?,
                pid: d.u32()?,
            },
            2 => {
                let n = d.count(4)?;
                let mut nodes = Vec::with_capacity(n);
                for _ in 0..n {
                    nodes.push(d.string()?);
                }
                Msg::Welcome { nodes }
            }
            3 => {
                let seq = d.u64()?;
                let op = match d.u8()? {
                    0 => Op::Allgather,
                    1 => Op::Broadcast { root: d.u32()? },
                    2 => Op::Barrier,
                    k => return Err(Error::Protocol(format!("unknown collective kind {k}"))),
                };
                Msg::Contribute {
                    seq,
                    op,
                    data: d.bytes()?,
                }
            }
            4 => {
                let seq = d.u64()?;
                let n = d.count(4)?;
                let mut parts = Vec::with_capacity(n);
                for _ in 0..n {
                    parts.push(d.bytes()?);
                }
                Msg::Result { seq, parts }
            }
            5 => Msg::Abort {
                rank: d.u32()?,
                cause: d.string()?,
            },
            6 => {
                let op = d.string()?;
                let after_ms = d.u64()?;
                let n = d.count(4)?;
                let mut missing = Vec::with_capacity(n);
                for _ in 0..n {
                    missing.push(d.u32()?);
                }
                Msg::Timeout {
                    op,
                    after_ms,
                    missing,
                }
            }
            7 => Msg::Mismatch {
                detail: d.string()?,
            },
            8 => Msg::Goodbye,
            k => return Err(Error::Protocol(format!("unknown message kind {k}"))),
        };
        if !d.0.is_empty() {
            return Err(Error::Protocol(format!(
                "{} trailing bytes after message",
                d.0.len()
            )));
        }
        Ok(msg)
    }
}

/// A message whose body is more than [`MAX_FRAME`] bytes: [`frame`] and
/// [`write_msg`] refuse it before anything is written (its length was
/// written `as u32`, cut to 32 bits beyond 4 GiB, and a body beyond
/// [`MAX_FRAME`] was sent whole for the reader to refuse, with its bytes still
/// on the connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "a message of {bytes} bytes is more than the {max} bytes a frame of the launcher's \
     protocol carries"
)]
pub struct FrameTooLarge {
    /// The message's encoded bytes.
    pub bytes: usize,
    /// The most a frame carries ([`MAX_FRAME`]).
    pub max: usize,
}

/// One framed message as it goes on the wire: its length, then its encoding;
/// a message beyond [`MAX_FRAME`] is refused.
pub fn frame(msg: &Msg) -> std::result::Result<Vec<u8>, FrameTooLarge> {
    let body = msg.encode();
    if body.len() > MAX_FRAME {
        return Err(FrameTooLarge {
            bytes: body.len(),
            max: MAX_FRAME,
        });
    }
    let mut frame = Vec::with_capacity(body.len() + 4);
    // At most MAX_FRAME (256 MiB), checked above: the length fits 32 bits.
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Writes one framed message. A message beyond [`MAX_FRAME`] is an
/// [`std::io::ErrorKind::InvalidInput`] error whose inner error is a
/// [`FrameTooLarge`], and nothing is written.
pub fn write_msg(w: &mut impl Write, msg: &Msg) -> std::io::Result<()> {
    let frame = frame(msg).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    w.write_all(&frame)?;
    w.flush()
}

/// Reads one framed message. I/O errors (including timeouts) come back as
/// `Err(Ok(io_error))`, malformed frames as `Err(Err(protocol_error))`.
pub fn read_msg(r: &mut impl Read) -> std::result::Result<Msg, ReadError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).map_err(ReadError::Io)?;
    let len = u32::from_le_bytes(len) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(ReadError::Protocol(Error::Protocol(format!(
            "frame length {len} out of range"
        ))));
    }
    // The buffer grows with the bytes that really arrive, so a length prefix alone
    // (a peer that announces a large frame and stalls) costs no memory.
    let mut body = Vec::with_capacity(len.min(64 << 10));
    r.take(len as u64)
        .read_to_end(&mut body)
        .map_err(ReadError::Io)?;
    if body.len() < len {
        return Err(ReadError::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("frame of {len} bytes ended after {}", body.len()),
        )));
    }
    Msg::decode(&body).map_err(ReadError::Protocol)
}

/// Why a frame could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The connection failed or timed out.
    Io(std::io::Error),
    /// The bytes were not a valid message.
    Protocol(Error),
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn samples() -> Vec<Msg> {
        vec![
            Msg::Hello {
                rank: 3,
                size: 7,
                secret: 0xdead_beef,
                node: "node-ä".into(),
                pid: 42,
            },
            Msg::Welcome {
                nodes: vec!["a".into(), "b".into(), String::new()],
            },
            Msg::Contribute {
                seq: 9,
                op: Op::Broadcast { root: 2 },
                data: vec![1, 2, 3],
            },
            Msg::Contribute {
                seq: 1,
                op: Op::Barrier,
                data: vec![],
            },
            Msg::Result {
                seq: 9,
                parts: vec![vec![], vec![5; 100]],
            },
            Msg::Abort {
                rank: 1,
                cause: "killed by signal 9".into(),
            },
            Msg::Timeout {
                op: "barrier".into(),
                after_ms: 1500,
                missing: vec![0, 5],
            },
            Msg::Mismatch { detail: "x".into() },
            Msg::Goodbye,
        ]
    }

    #[test]
    fn roundtrip_every_kind() {
        for m in samples() {
            let mut buf = Vec::new();
            write_msg(&mut buf, &m).unwrap();
            let back = read_msg(&mut buf.as_slice()).unwrap();
            assert_eq!(back, m);
        }
    }

    #[test]
    fn rejects_truncation_and_trailing_bytes() {
        for m in samples() {
            let body = m.encode();
            for cut in 0..body.len() {
                assert!(Msg::decode(&body[..cut]).is_err(), "{m:?} cut at {cut}");
            }
            let mut long = body.clone();
            long.push(0);
            assert!(Msg::decode(&long).is_err());
        }
    }

    /// `frame` and `write_msg` wrote a body's length `as u32` unchecked (their
    /// callers checked first): a message beyond the frame is refused, typed,
    /// and nothing is written.
    #[test]
    fn a_message_beyond_the_frame_is_refused_before_it_is_written() {
        let big = Msg::Contribute {
            seq: 1,
            op: Op::Allgather,
            data: vec![0; MAX_FRAME],
        };
        let bytes = big.encode().len();
        let want = FrameTooLarge {
            bytes,
            max: MAX_FRAME,
        };
        // (`.err()`: a frame made would be printed whole.)
        assert_eq!(frame(&big).err(), Some(want));
        let mut written = Vec::new();
        let e = write_msg(&mut written, &big).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert_eq!(
            e.get_ref().and_then(|e| e.downcast_ref::<FrameTooLarge>()),
            Some(&want)
        );
        assert!(
            e.to_string()
                .contains(&format!("a message of {bytes} bytes")),
            "{e}"
        );
        assert!(written.is_empty(), "{} bytes written", written.len());
        // The largest that fits is framed.
        let fits = Msg::Contribute {
            seq: 1,
            op: Op::Allgather,
            data: vec![0; MAX_DATA],
        };
        assert_eq!(frame(&fits).unwrap().len(), fits.encode().len() + 4);
    }

    #[test]
    fn rejects_huge_counts_without_allocating() {
        // kind 2 (Welcome) claiming 4 billion names in a 5-byte frame.
        let body = [2u8, 0xff, 0xff, 0xff, 0xff];
        assert!(Msg::decode(&body).is_err());
        let frame = [0xffu8, 0xff, 0xff, 0x7f];
        assert!(matches!(
            read_msg(&mut frame.as_slice()),
            Err(ReadError::Protocol(_))
        ));
    }

    proptest! {
        #[test]
        fn decode_never_panics(body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Msg::decode(&body);
        }

        #[test]
        fn contribute_roundtrips(seq in any::<u64>(), root in any::<u32>(),
                                 data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let m = Msg::Contribute { seq, op: Op::Broadcast { root }, data };
            prop_assert_eq!(Msg::decode(&m.encode()).unwrap(), m);
        }
    }
}
