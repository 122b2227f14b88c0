//! Typed errors of the transport.

use std::time::Duration;

/// Errors of [`crate::Transport`] and its backends.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No usable RDMA device (or the backend was built without its feature).
    #[error("no RDMA device: {0}")]
    NoDevice(String),
    /// A backend cannot serve this job or peer (e.g. shm between different nodes).
    #[error("backend {backend} is unavailable: {why}")]
    Unavailable {
        /// The backend's name.
        backend: &'static str,
        /// Why.
        why: String,
    },
    /// The peer's process exited or its connection broke.
    #[error("rank {rank} is lost: {cause}")]
    PeerLost {
        /// The lost rank.
        rank: usize,
        /// What was seen.
        cause: String,
    },
    /// An operation did not complete within the timeout.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// The timeout that expired.
        after: Duration,
        /// What was waited for.
        what: String,
    },
    /// A put/get would touch bytes outside the registered region.
    #[error(
        "out of bounds: offset {offset} + length {len} exceeds the region's {region_len} bytes"
    )]
    OutOfBounds {
        /// Offset in the region.
        offset: u64,
        /// Length of the access.
        len: u64,
        /// Length of the region.
        region_len: u64,
    },
    /// A remote key is malformed, belongs to another rank, or names a region that was
    /// deregistered (stale).
    #[error("bad remote key: {0}")]
    BadKey(String),
    /// A peer sent bytes that do not follow the wire protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// An argument is not valid (unknown rank, unknown operation id, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An operating-system call failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The runtime (endpoint exchange) failed.
    #[error(transparent)]
    Runtime(#[from] hpc_runtime::Error),
}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// A copy of this error for a second consumer (I/O errors keep kind and message).
    pub fn duplicate(&self) -> Error {
        match self {
            Error::NoDevice(s) => Error::NoDevice(s.clone()),
            Error::Unavailable { backend, why } => Error::Unavailable {
                backend,
                why: why.clone(),
            },
            Error::PeerLost { rank, cause } => Error::PeerLost {
                rank: *rank,
                cause: cause.clone(),
            },
            Error::Timeout { after, what } => Error::Timeout {
                after: *after,
                what: what.clone(),
            },
            Error::OutOfBounds {
                offset,
                len,
                region_len,
            } => Error::OutOfBounds {
                offset: *offset,
                len: *len,
                region_len: *region_len,
            },
            Error::BadKey(s) => Error::BadKey(s.clone()),
            Error::Protocol(s) => Error::Protocol(s.clone()),
            Error::InvalidArgument(s) => Error::InvalidArgument(s.clone()),
            Error::Io(e) => Error::Io(std::io::Error::new(e.kind(), e.to_string())),
            Error::Runtime(e) => Error::Protocol(format!("runtime: {e}")),
        }
    }
}

pub(crate) fn check_bounds(offset: u64, len: u64, region_len: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= region_len => Ok(()),
        _ => Err(Error::OutOfBounds {
            offset,
            len,
            region_len,
        }),
    }
}
