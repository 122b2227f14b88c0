//! The TCP backend's framing: a fixed 56-byte little-endian header, then `plen`
//! payload bytes.
//!
//! ```text
//! offset size field
//!  0      4   magic "HRT1"
//!  4      1   kind (HELLO, SEND, PUT, PUT_ACK, GET, GET_REPLY, BYE)
//!  5      1   status (PUT_ACK / GET_REPLY: 0 ok, else an error code)
//!  6      2   reserved, zero
//!  8      8   plen: payload bytes after the header
//! 16      8   op: the initiator's operation id (HELLO: the sender's rank)
//! 24      8   tag (SEND) / length (GET)
//! 32      8   region id
//! 40      8   region key (HELLO: the listener's token)
//! 48      8   offset in the region
//! ```
//!
//! [`Header::decode`] rejects anything else with [`Error::Protocol`]; it is
//! property-tested never to panic.

use crate::error::{Error, Result};

/// Header size.
pub const HEADER_BYTES: usize = 56;
const MAGIC: u32 = u32::from_le_bytes(*b"HRT1");
/// Largest payload one frame may announce.
pub const MAX_PAYLOAD: u64 = 1 << 40;

/// Frame kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// First frame of a connection: `op` = sender's rank, `key` = listener's token.
    Hello = 1,
    /// Tagged message; payload = message.
    Send = 2,
    /// One-sided write; payload = data.
    Put = 3,
    /// Acknowledges a put once its data is in the target's region (`status`); a
    /// refusal out of bounds carries the offset asked for in `offset` and the
    /// region's length in `tag`.
    PutAck = 4,
    /// One-sided read request of `tag` bytes.
    Get = 5,
    /// Data of a get (status 0) or its error (status != 0, no payload; out of
    /// bounds: the offset asked for in `offset`, the region's length in `tag`).
    GetReply = 6,
    /// The sender closes its transport.
    Bye = 7,
}

/// Status codes of acks and replies.
pub mod status {
    /// Success.
    pub const OK: u8 = 0;
    /// Region not registered, wrong or stale key.
    pub const BAD_KEY: u8 = 1;
    /// Offset + length outside the region.
    pub const OUT_OF_BOUNDS: u8 = 2;
}

/// A decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Frame kind.
    pub kind: Kind,
    /// Status (acks and replies).
    pub status: u8,
    /// Payload length.
    pub plen: u64,
    /// Operation id.
    pub op: u64,
    /// Tag or length.
    pub tag: u64,
    /// Region id.
    pub region: u64,
    /// Region key or token.
    pub key: u64,
    /// Offset.
    pub offset: u64,
}

impl Header {
    /// A header of `kind` with every other field zero.
    pub fn new(kind: Kind) -> Header {
        Header {
            kind,
            status: 0,
            plen: 0,
            op: 0,
            tag: 0,
            region: 0,
            key: 0,
            offset: 0,
        }
    }

    /// A header of `kind` that answers this one (a put's ack, a get's reply): the
    /// same operation id, every other field zero.
    pub fn answer(&self, kind: Kind) -> Header {
        Header {
            op: self.op,
            ..Header::new(kind)
        }
    }

    /// Encodes the header.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = self.kind as u8;
        b[5] = self.status;
        for (i, v) in [
            self.plen,
            self.op,
            self.tag,
            self.region,
            self.key,
            self.offset,
        ]
        .iter()
        .enumerate()
        {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// Decodes and validates a header.
    pub fn decode(b: &[u8]) -> Result<Header> {
        if b.len() != HEADER_BYTES {
            return Err(Error::Protocol(format!("header of {} bytes", b.len())));
        }
        if b[0..4] != MAGIC.to_le_bytes() {
            return Err(Error::Protocol("bad magic".into()));
        }
        let kind = match b[4] {
            1 => Kind::Hello,
            2 => Kind::Send,
            3 => Kind::Put,
            4 => Kind::PutAck,
            5 => Kind::Get,
            6 => Kind::GetReply,
            7 => Kind::Bye,
            k => return Err(Error::Protocol(format!("unknown frame kind {k}"))),
        };
        if b[6] != 0 || b[7] != 0 {
            return Err(Error::Protocol("reserved bytes not zero".into()));
        }
        let f = |i: usize| u64::from_le_bytes(b[8 + 8 * i..16 + 8 * i].try_into().expect("8"));
        let h = Header {
            kind,
            status: b[5],
            plen: f(0),
            op: f(1),
            tag: f(2),
            region: f(3),
            key: f(4),
            offset: f(5),
        };
        if h.plen > MAX_PAYLOAD {
            return Err(Error::Protocol(format!("payload of {} bytes", h.plen)));
        }
        let carries = matches!(kind, Kind::Send | Kind::Put)
            || (kind == Kind::GetReply && h.status == status::OK);
        if !carries && h.plen != 0 {
            return Err(Error::Protocol(format!("{kind:?} frame with a payload")));
        }
        if h.region > u32::MAX as u64 {
            return Err(Error::Protocol("region id beyond 32 bits".into()));
        }
        if kind == Kind::Get && h.tag > MAX_PAYLOAD {
            return Err(Error::Protocol(format!("get of {} bytes", h.tag)));
        }
        if h.status != 0 && !matches!(kind, Kind::PutAck | Kind::GetReply) {
            return Err(Error::Protocol(format!("{kind:?} frame with a status")));
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![
            Just(Kind::Hello),
            Just(Kind::Send),
            Just(Kind::Put),
            Just(Kind::PutAck),
            Just(Kind::Get),
            Just(Kind::GetReply),
            Just(Kind::Bye)
        ]
    }

    proptest! {
        #[test]
        fn decoder_never_panics(b in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = Header::decode(&b);
        }

        #[test]
        fn corrupted_headers_never_panic(
            k in kind(), plen in 0u64..1000, op: u64, flip in 0usize..HEADER_BYTES, bit in 0u8..8
        ) {
            let mut h = Header::new(k);
            h.plen = if matches!(k, Kind::Send | Kind::Put | Kind::GetReply) { plen } else { 0 };
            h.op = op;
            let mut b = h.encode();
            prop_assert_eq!(Header::decode(&b).unwrap(), h);
            b[flip] ^= 1 << bit;
            let _ = Header::decode(&b);
        }

        #[test]
        fn valid_headers_round_trip(
            k in kind(), plen in 0u64..=MAX_PAYLOAD, op: u64, tag in 0u64..=MAX_PAYLOAD,
            region in 0u64..=u32::MAX as u64, key: u64, offset: u64
        ) {
            let mut h = Header { kind: k, status: 0, plen, op, tag, region, key, offset };
            if !matches!(k, Kind::Send | Kind::Put | Kind::GetReply) { h.plen = 0; }
            prop_assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        }
    }

    #[test]
    fn malformed_headers_are_rejected() {
        let good = Header::new(Kind::Send).encode();
        assert!(Header::decode(&good[..55]).is_err());
        let mut b = good;
        b[0] = b'X';
        assert!(Header::decode(&b).is_err());
        let mut b = good;
        b[4] = 99;
        assert!(Header::decode(&b).is_err());
        let mut b = good;
        b[6] = 1;
        assert!(Header::decode(&b).is_err());
        let mut h = Header::new(Kind::Bye);
        h.plen = 1;
        assert!(Header::decode(&h.encode()).is_err());
        let mut h = Header::new(Kind::Send);
        h.plen = MAX_PAYLOAD + 1;
        assert!(Header::decode(&h.encode()).is_err());
        let mut h = Header::new(Kind::Put);
        h.region = 1 << 33;
        assert!(Header::decode(&h.encode()).is_err());
    }
}
