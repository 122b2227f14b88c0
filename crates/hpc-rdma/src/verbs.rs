//! The InfiniBand/RoCE verbs backend (feature `verbs`).
//!
//! **Status: has not run on hardware.** The machines this crate is developed on have
//! no HCA and no soft-RoCE. What is tested here: the pure logic below (queue-pair
//! state machine and the attribute masks of each transition, endpoint encoding and
//! decoding, work-request building with bounds checks), the `verbs` feature
//! compiling against rdma-core, and the runtime answer without a device:
//! [`probe`] returns [`Error::NoDevice`] (`ibverbs::devices()` fails with ENOSYS on such
//! machines; an empty list gives the same error) and the transport's selector falls
//! back to TCP. Until this backend has run on a device, the documented way onto
//! InfiniBand and RoCE is libfabric's verbs provider through the [`crate::ofi`]
//! backend (`HPC_TRANSPORT=ofi HPC_OFI_PROVIDER="verbs;ofi_rxm"`; `auto` picks it
//! between nodes where every rank has it).
//!
//! Design (for when an HCA is present): one RC queue pair per remote peer, one
//! completion queue, every [`crate::Region`] registered with `ibv_reg_mr` (its rkey
//! travels in the [`crate::RemoteKey`]), endpoints ([`Endpoint`]: QP number, LID, GID,
//! PSN) exchanged through `World::allgather`, queue pairs moved
//! RESET → INIT → RTR → RTS, puts/gets posted as `IBV_WR_RDMA_WRITE`/`IBV_WR_RDMA_READ`
//! with `ibv_post_send`, completions read with `ibv_poll_cq`.

use crate::error::{check_bounds, Error, Result};
use crate::region::RemoteKey;

/// `ibv_qp_attr_mask` bits (from `<infiniband/verbs.h>`).
pub mod mask {
    /// `IBV_QP_STATE`
    pub const STATE: u32 = 1;
    /// `IBV_QP_ACCESS_FLAGS`
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    /// `IBV_QP_PKEY_INDEX`
    pub const PKEY_INDEX: u32 = 1 << 4;
    /// `IBV_QP_PORT`
    pub const PORT: u32 = 1 << 5;
    /// `IBV_QP_AV`
    pub const AV: u32 = 1 << 7;
    /// `IBV_QP_PATH_MTU`
    pub const PATH_MTU: u32 = 1 << 8;
    /// `IBV_QP_TIMEOUT`
    pub const TIMEOUT: u32 = 1 << 9;
    /// `IBV_QP_RETRY_CNT`
    pub const RETRY_CNT: u32 = 1 << 10;
    /// `IBV_QP_RNR_RETRY`
    pub const RNR_RETRY: u32 = 1 << 11;
    /// `IBV_QP_RQ_PSN`
    pub const RQ_PSN: u32 = 1 << 12;
    /// `IBV_QP_MAX_QP_RD_ATOMIC`
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    /// `IBV_QP_MIN_RNR_TIMER`
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    /// `IBV_QP_SQ_PSN`
    pub const SQ_PSN: u32 = 1 << 16;
    /// `IBV_QP_MAX_DEST_RD_ATOMIC`
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    /// `IBV_QP_DEST_QPN`
    pub const DEST_QPN: u32 = 1 << 20;
}

/// States of a reliable-connected queue pair as this backend drives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// Created.
    Reset,
    /// Port, pkey and access flags set; may post receives.
    Init,
    /// Ready to receive: knows the remote QP number, LID/GID and PSN.
    Rtr,
    /// Ready to send.
    Rts,
    /// Failed (a completion with an error status); must be reset.
    Error,
}

impl QpState {
    /// The next state when moving to `to`, with the attribute mask `ibv_modify_qp`
    /// needs for an RC queue pair; `Err(Protocol)` for a transition verbs forbid.
    pub fn transition(self, to: QpState) -> Result<(QpState, u32)> {
        use QpState::*;
        let m = match (self, to) {
            (Reset, Init) => mask::STATE | mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS,
            (Init, Rtr) => {
                mask::STATE
                    | mask::AV
                    | mask::PATH_MTU
                    | mask::DEST_QPN
                    | mask::RQ_PSN
                    | mask::MAX_DEST_RD_ATOMIC
                    | mask::MIN_RNR_TIMER
            }
            (Rtr, Rts) => {
                mask::STATE
                    | mask::TIMEOUT
                    | mask::RETRY_CNT
                    | mask::RNR_RETRY
                    | mask::SQ_PSN
                    | mask::MAX_QP_RD_ATOMIC
            }
            (_, Error) | (_, Reset) => mask::STATE,
            (from, to) => {
                return Err(crate::error::Error::Protocol(format!(
                    "queue pair cannot go from {from:?} to {to:?}"
                )))
            }
        };
        Ok((to, m))
    }

    /// Whether work requests may be posted to the send queue.
    pub fn can_send(self) -> bool {
        self == QpState::Rts
    }
}

/// Size of [`Endpoint::to_bytes`].
pub const ENDPOINT_BYTES: usize = 32;
const EP_MAGIC: u32 = u32::from_le_bytes(*b"HVE1");

/// What a peer needs to connect its queue pair to ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Queue pair number (24 bits).
    pub qpn: u32,
    /// Port LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// GID (RoCE, or InfiniBand across subnets).
    pub gid: [u8; 16],
    /// Initial packet sequence number (24 bits).
    pub psn: u32,
}

impl Endpoint {
    /// Fixed little-endian encoding.
    pub fn to_bytes(&self) -> [u8; ENDPOINT_BYTES] {
        let mut b = [0u8; ENDPOINT_BYTES];
        b[0..4].copy_from_slice(&EP_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.qpn.to_le_bytes());
        b[8..12].copy_from_slice(&self.psn.to_le_bytes());
        b[12..14].copy_from_slice(&self.lid.to_le_bytes());
        b[16..32].copy_from_slice(&self.gid);
        b
    }

    /// Decodes [`Endpoint::to_bytes`], rejecting bad sizes, magic and 24-bit overflows.
    pub fn from_bytes(b: &[u8]) -> Result<Endpoint> {
        if b.len() != ENDPOINT_BYTES {
            return Err(Error::Protocol(format!(
                "verbs endpoint of {} bytes",
                b.len()
            )));
        }
        if b[0..4] != EP_MAGIC.to_le_bytes() || b[14] != 0 || b[15] != 0 {
            return Err(Error::Protocol("verbs endpoint: bad magic".into()));
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4"));
        let e = Endpoint {
            qpn: u32_at(4),
            psn: u32_at(8),
            lid: u16::from_le_bytes([b[12], b[13]]),
            gid: b[16..32].try_into().expect("16"),
        };
        if e.qpn >= 1 << 24 || e.psn >= 1 << 24 {
            return Err(Error::Protocol(
                "verbs endpoint: QPN/PSN beyond 24 bits".into(),
            ));
        }
        Ok(e)
    }

    /// A random initial PSN.
    pub fn random_psn() -> Result<u32> {
        Ok((hpc_runtime::random_u64()? & 0x00ff_ffff) as u32)
    }
}

/// Operation of a work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opcode {
    /// `IBV_WR_RDMA_WRITE`
    RdmaWrite,
    /// `IBV_WR_RDMA_READ`
    RdmaRead,
    /// `IBV_WR_SEND`
    Send,
}

/// A send-queue work request as plain data (one scatter/gather entry), built and
/// checked before it is turned into an `ibv_send_wr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkRequest {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub opcode: Opcode,
    /// Local address.
    pub local_addr: u64,
    /// Bytes.
    pub len: u32,
    /// Local key of the registered memory.
    pub lkey: u32,
    /// Remote address (RDMA operations).
    pub remote_addr: u64,
    /// Remote key (RDMA operations).
    pub rkey: u32,
    /// Ask for a completion.
    pub signaled: bool,
}

/// Largest message of one RC work request (2^31 bytes).
pub const MAX_WR_BYTES: u64 = 1 << 31;

impl WorkRequest {
    /// An RDMA write (`remote` true) or read (`remote` false) of `len` bytes between
    /// local `local_addr` (key `lkey`) and the region of `key` at `offset`.
    pub fn rdma(
        wr_id: u64,
        write: bool,
        local_addr: u64,
        lkey: u32,
        key: &RemoteKey,
        offset: u64,
        len: u64,
    ) -> Result<WorkRequest> {
        check_bounds(offset, len, key.len)?;
        if len > MAX_WR_BYTES {
            return Err(Error::InvalidArgument(format!(
                "{len} bytes exceed one work request"
            )));
        }
        if key.rkey == 0 {
            return Err(Error::BadKey(
                "the region was not registered with an HCA".into(),
            ));
        }
        Ok(WorkRequest {
            wr_id,
            opcode: if write {
                Opcode::RdmaWrite
            } else {
                Opcode::RdmaRead
            },
            local_addr,
            len: len as u32,
            lkey,
            remote_addr: key.addr + offset,
            rkey: key.rkey,
            signaled: true,
        })
    }
}

/// Looks for a usable device: `Err(NoDevice)` when there is none, or without the
/// `verbs` feature.
pub fn probe() -> Result<DeviceInfo> {
    imp::probe()
}

/// A device found by [`probe`].
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Device name (e.g. `mlx5_0`).
    pub name: String,
}

/// Collective: exchanges endpoints and connects queue pairs to `peers`.
pub(crate) fn connect(
    shared: std::sync::Arc<crate::completion::Shared>,
    world: &hpc_runtime::World,
    peers: &[usize],
    device: Option<DeviceInfo>,
) -> Result<Option<Box<dyn crate::Backend>>> {
    #[cfg(feature = "verbs")]
    {
        imp::connect(shared, world, peers, device)
    }
    #[cfg(not(feature = "verbs"))]
    {
        let _ = (shared, device);
        crate::connect_unbuilt(world, peers, imp::off)
    }
}

#[cfg(not(feature = "verbs"))]
mod imp {
    use super::*;

    pub(super) fn off() -> Error {
        Error::NoDevice("hpc-rdma was built without the `verbs` feature".into())
    }

    pub(super) fn probe() -> Result<DeviceInfo> {
        Err(off())
    }
}

#[cfg(feature = "verbs")]
mod imp;

#[cfg(feature = "verbs")]
pub(crate) use imp::Verbs;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rc_state_machine() {
        let (s, m) = QpState::Reset.transition(QpState::Init).unwrap();
        assert_eq!(s, QpState::Init);
        assert_eq!(m, 1 | 8 | 16 | 32);
        let (s, m) = s.transition(QpState::Rtr).unwrap();
        assert_eq!(m, 1 | 128 | 256 | 4096 | 32768 | 131072 | 1048576);
        assert!(!s.can_send());
        let (s, m) = s.transition(QpState::Rts).unwrap();
        assert_eq!(m, 1 | 512 | 1024 | 2048 | 8192 | 65536);
        assert!(s.can_send());
        assert!(QpState::Reset.transition(QpState::Rts).is_err());
        assert!(QpState::Init.transition(QpState::Rts).is_err());
        assert!(QpState::Rts.transition(QpState::Rtr).is_err());
        assert_eq!(s.transition(QpState::Error).unwrap().0, QpState::Error);
        assert!(QpState::Error.transition(QpState::Rts).is_err());
        assert_eq!(
            QpState::Error.transition(QpState::Reset).unwrap(),
            (QpState::Reset, 1)
        );
    }

    fn key() -> RemoteKey {
        RemoteKey {
            rank: 1,
            id: 2,
            pid: 3,
            fd: 4,
            rkey: 0x55,
            fkey: 0,
            key: 9,
            len: 4096,
            addr: 0x1000_0000,
            check: 0,
            intact: false,
        }
    }

    #[test]
    fn work_requests_are_checked() {
        let wr = WorkRequest::rdma(7, true, 0xabc, 3, &key(), 100, 28).unwrap();
        assert_eq!(wr.opcode, Opcode::RdmaWrite);
        assert_eq!(wr.remote_addr, 0x1000_0000 + 100);
        assert_eq!((wr.rkey, wr.len, wr.lkey, wr.wr_id), (0x55, 28, 3, 7));
        let rd = WorkRequest::rdma(8, false, 0, 3, &key(), 0, 4096).unwrap();
        assert_eq!(rd.opcode, Opcode::RdmaRead);
        assert!(matches!(
            WorkRequest::rdma(7, true, 0, 3, &key(), 4000, 97),
            Err(Error::OutOfBounds { .. })
        ));
        let mut k = key();
        k.rkey = 0;
        assert!(matches!(
            WorkRequest::rdma(7, true, 0, 3, &k, 0, 1),
            Err(Error::BadKey(_))
        ));
        k.rkey = 1;
        k.len = u64::MAX;
        assert!(WorkRequest::rdma(7, true, 0, 3, &k, 0, MAX_WR_BYTES + 1).is_err());
    }

    /// Whether the kernel shows an RDMA device (what `ibv_get_device_list` reads).
    fn hca_present() -> bool {
        std::fs::read_dir("/sys/class/infiniband")
            .map(|d| d.count() > 0)
            .unwrap_or(false)
    }

    #[test]
    fn probe_finds_a_device_exactly_when_there_is_one() {
        match (cfg!(feature = "verbs"), hca_present()) {
            (true, true) => {
                let dev = probe().expect("an RDMA device is present: probe must find it");
                assert!(!dev.name.is_empty());
            }
            // No device (or built without verbs): a clean NoDevice, not a panic.
            _ => assert!(matches!(probe(), Err(Error::NoDevice(_)))),
        }
    }

    proptest! {
        #[test]
        fn endpoints_round_trip(qpn in 0u32..1 << 24, psn in 0u32..1 << 24, lid: u16, gid: [u8; 16]) {
            let e = Endpoint { qpn, lid, gid, psn };
            prop_assert_eq!(Endpoint::from_bytes(&e.to_bytes()).unwrap(), e);
        }

        #[test]
        fn endpoint_decoder_never_panics(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = Endpoint::from_bytes(&b);
        }
    }

    #[test]
    fn random_psn_is_24_bits() {
        for _ in 0..100 {
            assert!(Endpoint::random_psn().unwrap() < 1 << 24);
        }
    }
}
