//! The libfabric (OFI) backend (feature `ofi`, `HPC_TRANSPORT=ofi`): the transport
//! over whatever fabric libfabric drives: Slingshot (`cxi`), EFA (`efa`), Omni-Path
//! (`psm2`), InfiniBand and RoCE (`verbs;ofi_rxm`), and on any machine `shm` and
//! `tcp;ofi_rxm`.
//!
//! - **Endpoints**: one reliable-datagram (`FI_EP_RDM`) endpoint per rank with a
//!   tagged completion queue and a table address vector; endpoint names, with each
//!   rank's pid and provider, are exchanged through `World::allgather`
//!   ([`PeerEntry`]) and inserted in rank order.
//! - **Messages** are tagged sends. A message of up to [`EAGER_MAX`] bytes travels
//!   whole with a 24-byte [`MsgHeader`] into one of the receiver's pre-posted
//!   buffers (`fi_tinject` when it fits the provider's inject size: the send is done
//!   as it is posted). A larger one sends a header announcing it (`RTS`) and then
//!   the data under a tag of its own (bit 63 set, a sequence number, the sender);
//!   the receiver posts a receive of
//!   exactly that size and tag when the header arrives, and the provider moves the
//!   data (rendezvous in `ofi_rxm`, single copy in `shm`). Messages are delivered in
//!   the order their headers arrived, so the ordering per sender holds.
//! - **Memory**: every [`crate::Region`] is registered (`fi_mr_reg`, bound to the
//!   endpoint where the provider wants `FI_MR_ENDPOINT`); its key travels in the
//!   [`crate::RemoteKey`]. Where the provider lets us choose keys, the key is the
//!   region's random 64-bit key, so a stale key or one from another job matches no
//!   registration; keys are also checked against the owner's pid before use.
//!   `put` is `fi_write`, `get` `fi_read`, both asking for delivery completion (a
//!   put completes when its data is in the target's memory). A put's last 8 bytes
//!   are written by a second write ordered after the first (`FI_ORDER_WAW` within
//!   the provider's `max_order_waw_size`, else issued when the first completed),
//!   so the target may poll them.
//! - **Progress**: libfabric says per provider whether it moves data by itself
//!   (`data_progress`/`control_progress` = `FI_PROGRESS_AUTO`, as offloading NICs
//!   do) or only inside libfabric calls (`FI_PROGRESS_MANUAL`: `tcp;ofi_rxm` and
//!   `shm` here, both for data). With manual progress, a put or get into a rank
//!   moves only while that rank calls into libfabric, and the initiator's provider
//!   refuses new operations ("try again") once its queues hold what the target has
//!   not taken. Two things keep that from stalling or failing anything:
//!   - *a progress thread per endpoint*, started only where the provider needs
//!     manual progress, reads completions when no caller has for 200 µs (polling
//!     while there is traffic, napping up to 100 µs when there is none), so a rank
//!     that computes, sleeps or waits in a collective of the runtime still serves
//!     its peers' puts, gets and messages. Callers waiting on the transport read
//!     completions themselves (no thread hand-off on the latency path).
//!   - *no waiting inside a post*: an operation the provider refuses with "try
//!     again" is queued, in order, per peer (receive re-posts apart), and posted by
//!     the next read of completions, whoever makes it. Posting never fails because
//!     a peer is slow: a peer that is stopped, descheduled on an overloaded node or
//!     not progressing only delays its own operations, whose waits stay bounded by
//!     the caller's timeout ([`Error::Timeout`]); a queued operation to a peer
//!     found lost fails with [`Error::PeerLost`]. (Retrying the post with the
//!     endpoint's lock held, bounded by the job's timeout, made a put fail with
//!     "kept refusing" whenever the target was away longer than that.)
//!
//!   A polling thread rather than one blocked in libfabric's wait objects
//!   (`fi_cq_sread`): wait objects are optional per provider and per completion
//!   queue, and a blocked reader would still have to be woken for our own queued
//!   posts; the polling thread behaves alike on every provider. A thread that is
//!   itself starved of CPU (every core busy with the rank's computation) serves
//!   later, not never.
//! - **Choice of provider**: `HPC_OFI_PROVIDER`, else `FI_PROVIDER`, else the first
//!   provider libfabric offers with what the transport needs. With `HPC_TRANSPORT=
//!   auto` the backend serves ranks on different nodes only where a provider that
//!   drives a fabric (not `tcp`, `udp`, `sockets` or `shm`) opens an endpoint on
//!   every rank; it then comes before the native verbs backend and tcp.
//! - **Loss**: a peer on the same node is watched through a pidfd; an operation that
//!   fails with a connection error fails the peer. Either gives [`Error::PeerLost`].
//!
//! libfabric is loaded at run time (`libfabric.so.1`): a program built with the
//! feature runs where libfabric is missing and gets [`Error::Unavailable`].
//!
//! What ran where: the conformance suite runs against `shm` and `tcp;ofi_rxm` (Debian's
//! libfabric 1.17); no fabric provider (verbs, cxi, efa, psm2) has run, as these
//! machines have no such hardware.

use crate::error::{Error, Result};

/// Largest message sent whole into a pre-posted buffer.
pub const EAGER_MAX: usize = 16 * 1024;
/// Bytes of [`MsgHeader`].
pub const HEADER_BYTES: usize = 24;
/// Pre-posted receive buffers per rank.
#[cfg_attr(not(feature = "ofi"), allow(dead_code))]
pub(crate) const POOL: usize = 64;

const MAGIC: u8 = 0xA7;
/// Kind of a message that carries its data.
pub(crate) const EAGER: u8 = 1;
/// Kind of a header announcing data sent under [`data_tag`].
pub(crate) const RTS: u8 = 2;

/// The header at the start of every message into a pre-posted buffer.
///
/// ```text
/// offset size field
///  0      1   magic 0xA7
///  1      1   kind (1 = data follows, 2 = announces `len` bytes under data_tag(seq))
///  2      2   zero
///  4      4   seq (kind 2)
///  8      8   the user's tag
/// 16      8   len: bytes that follow (kind 1) or that are announced (kind 2)
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsgHeader {
    /// 1: the data follows; 2: it is announced (sent under a tag of its own).
    pub kind: u8,
    /// Sequence number of an announced message (per sender and receiver).
    pub seq: u32,
    /// The user's tag.
    pub tag: u64,
    /// Length of the message.
    pub len: u64,
}

impl MsgHeader {
    /// Encodes the header.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0] = MAGIC;
        b[1] = self.kind;
        b[4..8].copy_from_slice(&self.seq.to_le_bytes());
        b[8..16].copy_from_slice(&self.tag.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Decodes a received message: the header and the length of the data that
    /// follows it in `b` (checked against the header's `len` when the data follows).
    pub fn decode(b: &[u8]) -> Result<MsgHeader> {
        if b.len() < HEADER_BYTES {
            return Err(Error::Protocol(format!("ofi message of {} bytes", b.len())));
        }
        if b[0] != MAGIC || b[2] != 0 || b[3] != 0 {
            return Err(Error::Protocol("ofi message: bad magic".into()));
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8"));
        let h = MsgHeader {
            kind: b[1],
            seq: u32::from_le_bytes(b[4..8].try_into().expect("4")),
            tag: u64_at(8),
            len: u64_at(16),
        };
        match h.kind {
            EAGER if h.len == (b.len() - HEADER_BYTES) as u64 && h.seq == 0 => Ok(h),
            EAGER => Err(Error::Protocol(format!(
                "ofi message says {} bytes but carries {}",
                h.len,
                b.len() - HEADER_BYTES
            ))),
            RTS if b.len() == HEADER_BYTES && h.len > EAGER_MAX as u64 && h.len <= MAX_MESSAGE => {
                Ok(h)
            }
            RTS => Err(Error::Protocol(format!(
                "ofi announcement of {} bytes in a message of {}",
                h.len,
                b.len()
            ))),
            k => Err(Error::Protocol(format!("ofi message of kind {k}"))),
        }
    }
}

/// Largest message: 64 GiB.
pub const MAX_MESSAGE: u64 = 1 << 36;

/// The libfabric tag of a message into pre-posted buffers: bit 63 clear, the
/// sender's rank in the low 32 bits.
#[cfg_attr(not(feature = "ofi"), allow(dead_code))]
pub(crate) fn eager_tag(src: usize) -> u64 {
    src as u64 & 0xffff_ffff
}

/// The bits a pre-posted receive ignores (everything but bit 63).
#[cfg_attr(not(feature = "ofi"), allow(dead_code))]
pub(crate) const EAGER_IGNORE: u64 = !(1 << 63);

/// The libfabric tag of announced data: bit 63 set, the sequence number in bits
/// 32..63, the sender's rank in the low 32 bits.
#[cfg_attr(not(feature = "ofi"), allow(dead_code))]
pub(crate) fn data_tag(src: usize, seq: u32) -> u64 {
    1 << 63 | ((seq as u64 & 0x7fff_ffff) << 32) | (src as u64 & 0xffff_ffff)
}

/// The sender's rank in a received tag.
#[cfg_attr(not(feature = "ofi"), allow(dead_code))]
pub(crate) fn tag_source(tag: u64) -> usize {
    (tag & 0xffff_ffff) as usize
}

/// Size limit of an endpoint name (libfabric's are tens of bytes; `shm`'s a path).
const MAX_NAME: usize = 1024;
const ENTRY_MAGIC: u32 = u32::from_le_bytes(*b"HOF1");

/// What each rank publishes through the world: whether it has an endpoint, its pid,
/// the provider and the endpoint's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerEntry {
    /// The process id (keys are checked against it).
    pub pid: u32,
    /// The provider, e.g. `tcp;ofi_rxm`.
    pub provider: String,
    /// The endpoint name (`fi_getname`), empty when the rank has none.
    pub addr: Vec<u8>,
}

impl PeerEntry {
    /// Encodes the entry.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(12 + self.provider.len() + self.addr.len());
        b.extend_from_slice(&ENTRY_MAGIC.to_le_bytes());
        b.extend_from_slice(&self.pid.to_le_bytes());
        b.extend_from_slice(&(self.provider.len() as u16).to_le_bytes());
        b.extend_from_slice(&(self.addr.len() as u16).to_le_bytes());
        b.extend_from_slice(self.provider.as_bytes());
        b.extend_from_slice(&self.addr);
        b
    }

    /// Decodes [`PeerEntry::encode`], rejecting anything else.
    pub fn decode(b: &[u8]) -> Result<PeerEntry> {
        let bad = |why: &str| Error::Protocol(format!("ofi endpoint entry: {why}"));
        if b.len() < 12 {
            return Err(bad("too short"));
        }
        if b[0..4] != ENTRY_MAGIC.to_le_bytes() {
            return Err(bad("bad magic"));
        }
        let pid = u32::from_le_bytes(b[4..8].try_into().expect("4"));
        let plen = u16::from_le_bytes([b[8], b[9]]) as usize;
        let alen = u16::from_le_bytes([b[10], b[11]]) as usize;
        if alen > MAX_NAME || 12 + plen + alen != b.len() {
            return Err(bad("lengths do not match"));
        }
        let provider = std::str::from_utf8(&b[12..12 + plen])
            .map_err(|_| bad("provider name is not UTF-8"))?
            .to_string();
        Ok(PeerEntry {
            pid,
            provider,
            addr: b[12 + plen..].to_vec(),
        })
    }
}

/// Whether `provider` (e.g. `verbs;ofi_rxm`) drives a fabric, rather than the
/// sockets or shared memory that the native backends already cover: what makes
/// `auto` prefer it.
pub fn drives_a_fabric(provider: &str) -> bool {
    let core = provider.split(';').next().unwrap_or("").trim();
    !core.is_empty() && !matches!(core, "tcp" | "udp" | "sockets" | "net" | "shm" | "sm2")
}

/// The provider asked for: `HPC_OFI_PROVIDER`, else `FI_PROVIDER` (libfabric's own
/// filter), else none.
pub fn provider_from(env: impl Fn(&str) -> Option<String>) -> Option<String> {
    [hpc_runtime::env::OFI_PROVIDER, "FI_PROVIDER"]
        .into_iter()
        .filter_map(env)
        .map(|v| v.trim().to_string())
        .find(|v| !v.is_empty())
}

/// A libfabric error: the call, its return code and the library's text.
#[derive(Clone, Debug)]
pub struct OfiError {
    /// The call (e.g. `fi_getinfo`).
    pub call: &'static str,
    /// The (positive) libfabric error code.
    pub code: i32,
    /// `fi_strerror`'s text, or the provider's for a completion error.
    pub text: String,
}

impl std::fmt::Display for OfiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} returned {} ({})", self.call, -self.code, self.text)
    }
}

impl std::error::Error for OfiError {}

/// The provider chosen by [`probe`], and how.
#[derive(Clone, Debug)]
pub struct ProviderInfo {
    /// The provider's name as libfabric gives it (e.g. `tcp;ofi_rxm`).
    pub provider: String,
    /// The fabric's name.
    pub fabric: String,
    /// The domain's name.
    pub domain: String,
}

/// Finds the provider the backend would use: the one named in `HPC_OFI_PROVIDER` or
/// `FI_PROVIDER`, else (with `fabric_only`) the first that drives a fabric and opens
/// an endpoint, else the first offered. [`Error::Unavailable`] names what is missing:
/// libfabric itself, an unknown provider, or the capability a provider lacks.
pub fn probe(fabric_only: bool) -> Result<ProviderInfo> {
    let named = provider_from(|k| std::env::var(k).ok());
    imp::probe(named.as_deref(), fabric_only)
}

/// Checks that the provider `name` offers what the backend needs, plus `extra`
/// capability bits (libfabric's `FI_*` values): the diagnosis [`probe`] gives.
#[doc(hidden)]
pub fn check_provider(name: &str, extra: u64) -> Result<ProviderInfo> {
    imp::check_provider(name, extra)
}

/// Opens an endpoint of `provider` and inserts `addrs` into its address vector:
/// which entries resolve (a test of how bad endpoint names are reported).
#[doc(hidden)]
pub fn resolve(provider: &str, addrs: &[Vec<u8>]) -> Result<Vec<Result<()>>> {
    imp::resolve(provider, addrs)
}

/// Collective: exchanges endpoints and serves `peers` through libfabric.
pub(crate) fn connect(
    shared: std::sync::Arc<crate::completion::Shared>,
    world: &hpc_runtime::World,
    peers: &[usize],
    provider: Option<ProviderInfo>,
) -> Result<Option<Box<dyn crate::Backend>>> {
    #[cfg(feature = "ofi")]
    {
        imp::connect(shared, world, peers, provider)
    }
    #[cfg(not(feature = "ofi"))]
    {
        let _ = (shared, provider);
        crate::connect_unbuilt(world, peers, imp::off)
    }
}

#[cfg(not(feature = "ofi"))]
mod imp {
    use super::*;

    pub(super) fn off() -> Error {
        Error::unavailable(
            "ofi",
            "hpc-rdma was built without the `ofi` feature (libfabric)",
        )
    }

    pub(super) fn probe(_named: Option<&str>, _fabric_only: bool) -> Result<ProviderInfo> {
        Err(off())
    }

    pub(super) fn check_provider(_name: &str, _extra: u64) -> Result<ProviderInfo> {
        Err(off())
    }

    pub(super) fn resolve(_provider: &str, _addrs: &[Vec<u8>]) -> Result<Vec<Result<()>>> {
        Err(off())
    }
}

#[cfg(feature = "ofi")]
mod backend;
#[cfg(feature = "ofi")]
mod connect;
#[cfg(feature = "ofi")]
mod ffi;
#[cfg(feature = "ofi")]
mod ops;
#[cfg(feature = "ofi")]
mod progress;
#[cfg(feature = "ofi")]
mod provider;

/// The libfabric runtime: the calls into `shim.c` ([`ffi`]), finding a provider
/// ([`provider`]), connecting ([`connect`]), the state of operations ([`ops`]),
/// progress ([`progress`]) and the [`crate::Backend`] on top ([`backend`]).
#[cfg(feature = "ofi")]
mod imp {
    pub(super) use super::connect::connect;
    pub(super) use super::provider::{check_provider, probe, resolve};
}

#[cfg(feature = "ofi")]
pub(crate) use backend::Ofi;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn headers_round_trip_and_are_checked() {
        let h = MsgHeader {
            kind: EAGER,
            seq: 0,
            tag: 77,
            len: 3,
        };
        let mut m = h.encode().to_vec();
        m.extend_from_slice(b"abc");
        assert_eq!(MsgHeader::decode(&m).unwrap(), h);
        assert!(MsgHeader::decode(&m[..HEADER_BYTES + 2]).is_err(), "short");
        let rts = MsgHeader {
            kind: RTS,
            seq: 9,
            tag: 1,
            len: EAGER_MAX as u64 + 1,
        };
        assert_eq!(MsgHeader::decode(&rts.encode()).unwrap(), rts);
        let small = MsgHeader { len: 10, ..rts };
        assert!(
            MsgHeader::decode(&small.encode()).is_err(),
            "announced but eager-sized"
        );
        let huge = MsgHeader {
            len: MAX_MESSAGE + 1,
            ..rts
        };
        assert!(MsgHeader::decode(&huge.encode()).is_err());
        let mut b = h.encode();
        b[0] = 0;
        assert!(MsgHeader::decode(&b).is_err());
    }

    #[test]
    fn tags_keep_source_and_sequence_apart() {
        assert_eq!(tag_source(eager_tag(12345)), 12345);
        assert_eq!(tag_source(data_tag(7, 99)), 7);
        assert_ne!(data_tag(7, 99), data_tag(7, 100));
        assert_eq!(eager_tag(3) & !EAGER_IGNORE, 0, "pre-posted receives match");
        assert_ne!(
            data_tag(3, 0) & !EAGER_IGNORE,
            0,
            "data never lands in them"
        );
    }

    #[test]
    fn only_fabric_providers_are_preferred() {
        for p in ["verbs;ofi_rxm", "cxi", "efa", "psm2", "psm3", "opx"] {
            assert!(drives_a_fabric(p), "{p}");
        }
        for p in [
            "tcp;ofi_rxm",
            "tcp",
            "udp;ofi_rxd",
            "sockets",
            "net",
            "shm",
            "sm2",
            "",
        ] {
            assert!(!drives_a_fabric(p), "{p}");
        }
    }

    #[test]
    fn provider_comes_from_our_variable_first() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(a, _)| *a == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            provider_from(env(&[
                (hpc_runtime::env::OFI_PROVIDER, "shm"),
                ("FI_PROVIDER", "tcp")
            ])),
            Some("shm".into())
        );
        assert_eq!(
            provider_from(env(&[("FI_PROVIDER", "tcp")])),
            Some("tcp".into())
        );
        assert_eq!(
            provider_from(env(&[(hpc_runtime::env::OFI_PROVIDER, " ")])),
            None
        );
    }

    proptest! {
        #[test]
        fn entries_round_trip(pid: u32, provider in "[a-z0-9;_]{0,20}", addr in proptest::collection::vec(any::<u8>(), 0..200)) {
            let e = PeerEntry { pid, provider, addr };
            prop_assert_eq!(PeerEntry::decode(&e.encode()).unwrap(), e);
        }

        #[test]
        fn decoders_never_panic(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = PeerEntry::decode(&b);
            let _ = MsgHeader::decode(&b);
        }
    }
}
