//! What the ranks and the proxy say to each other over the board.
//!
//! A rank pushes descriptors ([`Desc`]) on its ring to the proxy, the proxy
//! answers on its ring to the rank. A descriptor's `kind` is a [`Kind`]; a
//! `SUBMIT` points (`addr`, `len`) at a [`Blob`] in the rank's memory, which
//! the proxy reads by cross-memory attach; a `DONE` carries a [`Code`] in
//! `addr` and, for `Lost` and `Mismatch`, the rank concerned in `len` (for
//! `NodeLost`, the node; for `OverCap` and `NoMemory`, the bytes asked for;
//! for `Disagree`, the other rank and its collective's signature). A
//! `SUBMIT` carries its collective's signature in the descriptor's `sig`.
//! A `DONE` of a `Mismatch` whose sizes the proxy knows comes right after a
//! `SIZES` of the same tag: the receiving rank in `sig`, the bytes sent in
//! `addr`, the bytes its receive expected in `len` (the sender being the
//! rank the `DONE` names), so that the rank's error names them as the other
//! engines' do.
//! Tags are the communicator's sequence numbers of the collectives. A rank
//! whose wait timed out asks (`ASK`) which ranks' parts the proxy has not
//! received; the proxy answers one `WAITING` per rank (the rank in `addr`),
//! then `ASKED` (the count in `addr`).

use serde::{Deserialize, Serialize};

use hpc_collectives::{Collective, Options};

use hpc_board::board::Desc;
use hpc_board::shm::ShmRef;

/// What a descriptor says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// Rank to proxy: run the collective whose [`Blob`] is at `addr`, `len` bytes.
    Submit = 10,
    /// Rank to proxy: drop collective `tag` (answered `Cancelled`, or `Done`
    /// if it finished first).
    Cancel = 11,
    /// Rank to proxy: this rank is gone.
    Detach = 12,
    /// Rank to proxy: which ranks' parts of collective `tag` have not come?
    /// (Answered by `Waiting`s, then `Asked`.)
    Ask = 13,
    /// Proxy to rank: collective `tag` ended with the [`Code`] in `addr`.
    Done = 20,
    /// Proxy to rank: collective `tag` was dropped; the proxy no longer
    /// touches its buffers.
    Cancelled = 21,
    /// Proxy to rank, answering `Ask`: rank `addr`'s part of collective `tag`
    /// has not come.
    Waiting = 22,
    /// Proxy to rank: the end of its answer to `Ask` for collective `tag`,
    /// `addr` ranks named.
    Asked = 23,
    /// Proxy to rank, right before the `Done` of collective `tag` that
    /// failed for a message's size (`Mismatch`): that message's receiving
    /// rank in `sig`, its bytes in `addr`, the bytes its receive expected in
    /// `len`; its sender is the rank the `Done` names. Not sent where the
    /// receiving rank does not fit `sig`: the rank's error then says only
    /// that the sizes differ.
    Sizes = 24,
}

impl Kind {
    /// The kind of a descriptor's `kind` word; `None` for anything else.
    pub fn from_wire(k: u32) -> Option<Kind> {
        Some(match k {
            10 => Kind::Submit,
            11 => Kind::Cancel,
            12 => Kind::Detach,
            13 => Kind::Ask,
            20 => Kind::Done,
            21 => Kind::Cancelled,
            22 => Kind::Waiting,
            23 => Kind::Asked,
            24 => Kind::Sizes,
            _ => return None,
        })
    }

    /// A descriptor of this kind.
    pub fn desc(self, tag: u64, addr: u64, len: u64) -> Desc {
        Desc {
            kind: self as u32,
            sig: 0,
            tag,
            addr,
            len,
        }
    }
}

/// How a collective ended, as the proxy answers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Code {
    /// Finished.
    Ok = 0,
    /// A rank it waited for died (`len`: that rank).
    Lost = 1,
    /// A message's size differed from its receive's (`len`: the sender).
    Mismatch = 2,
    /// Anything else: an unreadable blob or buffer, a region outside its
    /// buffer, a reduction the data type does not have.
    Failed = 3,
    /// Another node of the communicator is lost: its proxy stopped or cannot
    /// be reached (`len`: the world's id of that node).
    NodeLost = 4,
    /// The collective's memory in the proxy (scratch, staging) would pass the
    /// proxy's cap (`HPC_COLL_PROXY_MAX_SCRATCH`) beside the collectives in
    /// flight, or its size overflows (`len`: the bytes; `u64::MAX` for an
    /// overflow). Only this collective fails.
    OverCap = 5,
    /// The proxy could not allocate the collective's memory (`len`: the bytes).
    NoMemory = 6,
    /// The ranks' parts are not the same collective: another kind, element
    /// type, reduction or root (`len`: the other rank in the high 32 bits,
    /// its collective's signature, [`Sig`](hpc_board::sig::Sig), in the low 32).
    Disagree = 7,
}

impl Code {
    /// The code of a `DONE`'s `addr` word (an unknown one reads as `Failed`).
    pub fn from_wire(c: u64) -> Code {
        match c {
            0 => Code::Ok,
            1 => Code::Lost,
            2 => Code::Mismatch,
            4 => Code::NodeLost,
            5 => Code::OverCap,
            6 => Code::NoMemory,
            7 => Code::Disagree,
            _ => Code::Failed,
        }
    }
}

/// The variable naming the program a communicator's first rank starts as the proxy
/// (split at white space; `hpc run --proxy` sets it to `hpc proxy`).
pub const PROXY_CMD: &str = hpc_runtime::env::COLL_PROXY_CMD;

/// What a rank posts: the collective (owned in the proxy, borrowed by the
/// rank that encodes it), where its buffers are, and how to run it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Blob<C = Collective> {
    /// The collective.
    pub coll: C,
    /// How to run it.
    pub opts: Options,
    /// The send buffer's address in the rank's memory.
    pub send: u64,
    /// The send buffer's length in bytes.
    pub send_len: usize,
    /// The receive buffer's address in the rank's memory.
    pub recv: u64,
    /// The receive buffer's length in bytes.
    pub recv_len: usize,
    /// Where the send buffer is a [`SharedBuf`](hpc_board::shm::SharedBuf).
    pub send_shm: Option<ShmRef>,
    /// Where the receive buffer is a `SharedBuf`.
    pub recv_shm: Option<ShmRef>,
    /// The rank made the first round's copies between its own buffers
    /// ([`own_copy`](hpc_collectives::own_copy)) before it posted: the proxy skips them.
    pub own_copies: bool,
}

/// The largest blob the proxy reads: a v-collective's counts for a million
/// ranks fit; a descriptor that claims more is refused before any allocation.
pub const MAX_BLOB: u64 = 64 << 20;

/// Decodes a blob read from a rank; `None` for anything that is not one.
pub fn decode_blob(bytes: &[u8]) -> Option<Blob> {
    postcard::from_bytes::<Blob>(bytes).ok()
}

/// Decodes a `SUBMIT`'s blob from rank `rank` of `size` and builds its
/// schedule: the whole of what the proxy believes of a rank's bytes. Fails
/// for anything that does not decode, does not validate (`Collective::check_buffers`)
/// or has no schedule.
pub fn parse_submit(
    bytes: &[u8],
    rank: usize,
    size: usize,
) -> std::result::Result<(Blob, hpc_collectives::Schedule), Code> {
    let blob = decode_blob(bytes).ok_or(Code::Failed)?;
    blob.coll
        .check_buffers(rank, size, blob.send_len, blob.recv_len)
        .map_err(|_| Code::Failed)?;
    let sched = blob
        .coll
        .schedule(rank, size, &blob.opts)
        .map_err(|_| Code::Failed)?;
    Ok((blob, sched))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind reads back from its wire word, in a descriptor as made;
    /// the words around them read as none.
    #[test]
    fn kinds_round_trip_and_others_are_none() {
        let all = [
            Kind::Submit,
            Kind::Cancel,
            Kind::Detach,
            Kind::Ask,
            Kind::Done,
            Kind::Cancelled,
            Kind::Waiting,
            Kind::Asked,
            Kind::Sizes,
        ];
        for k in all {
            let d = k.desc(7, 3, 1);
            assert_eq!(Kind::from_wire(d.kind), Some(k));
            assert_eq!((d.tag, d.addr, d.len), (7, 3, 1));
        }
        let known: Vec<u32> = all.iter().map(|&k| k as u32).collect();
        for w in (0..40).chain([u32::MAX]) {
            if !known.contains(&w) {
                assert_eq!(Kind::from_wire(w), None, "{w}");
            }
        }
    }
}
