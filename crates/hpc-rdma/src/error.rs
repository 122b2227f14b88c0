//! Typed errors of the transport.
//!
//! Errors keep what caused them: an operating-system error, a library's error code or
//! the runtime's error travels as the [`std::error::Error::source`] of ours (shared
//! behind an `Arc`, so that one loss can fail many operations), never only as text.

use std::sync::Arc;
use std::time::Duration;

/// The underlying error of one of ours, shared between every operation it failed.
pub type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Errors of [`crate::Transport`] and its backends.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Error {
    /// No usable RDMA device (or the backend was built without its feature).
    NoDevice(String),
    /// A backend cannot serve this job or peer (e.g. shm between different nodes, a
    /// libfabric provider that is not installed).
    Unavailable {
        /// The backend's name.
        backend: &'static str,
        /// Why.
        why: String,
        /// The library's or system's error behind it, if any.
        source: Option<Cause>,
    },
    /// The peer's process exited or its connection broke.
    PeerLost {
        /// The lost rank.
        rank: usize,
        /// What was seen.
        cause: String,
        /// The error that revealed the loss (a socket's, a library's), if any.
        source: Option<Cause>,
    },
    /// An operation did not complete within the timeout.
    Timeout {
        /// The timeout that expired.
        after: Duration,
        /// What was waited for.
        what: String,
    },
    /// A put/get would touch bytes outside the registered region.
    OutOfBounds {
        /// Offset in the region.
        offset: u64,
        /// Length of the access.
        len: u64,
        /// Length of the region.
        region_len: u64,
    },
    /// A remote key is malformed, belongs to another rank or job, or names a region
    /// that was deregistered (stale).
    BadKey(String),
    /// A peer sent bytes that do not follow the wire protocol.
    Protocol(String),
    /// An argument is not valid (unknown rank, unknown operation id, ...).
    InvalidArgument(String),
    /// A call into a system library (libibverbs, libfabric, MPI) failed.
    Library {
        /// The call, e.g. `fi_mr_reg`.
        call: &'static str,
        /// The library's error.
        source: Cause,
    },
    /// A peer announced a message larger than this process can hold: more
    /// than the memory available (`MemAvailable`), or more than the
    /// allocator gave. Checked before its bytes are taken: a peer's claim of
    /// 1 TiB aborted the receiver on its allocation.
    TooLarge {
        /// The rank that announced it.
        rank: usize,
        /// The bytes it announced.
        bytes: u64,
        /// The bytes of memory available here, where that was the bound
        /// (`None`: the allocator refused).
        available: Option<u64>,
    },
    /// An operating-system call failed.
    Io(Arc<std::io::Error>),
    /// The runtime (endpoint exchange) failed.
    Runtime(Arc<hpc_runtime::Error>),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NoDevice(why) => write!(f, "no RDMA device: {why}"),
            Error::Unavailable { backend, why, .. } => {
                write!(f, "backend {backend} is unavailable: {why}")
            }
            Error::PeerLost { rank, cause, .. } => write!(f, "rank {rank} is lost: {cause}"),
            Error::Timeout { after, what } => write!(f, "timed out after {after:?} waiting for {what}"),
            Error::OutOfBounds {
                offset,
                len,
                region_len,
            } => write!(
                f,
                "out of bounds: offset {offset} + length {len} exceeds the region's {region_len} bytes"
            ),
            Error::BadKey(why) => write!(f, "bad remote key: {why}"),
            Error::Protocol(why) => write!(f, "protocol error: {why}"),
            Error::InvalidArgument(why) => write!(f, "invalid argument: {why}"),
            Error::Library { call, source } => write!(f, "{call} failed: {source}"),
            Error::TooLarge {
                rank,
                bytes,
                available: Some(a),
            } => write!(
                f,
                "rank {rank} announced a message of {bytes} bytes, more than the {a} bytes \
                 of memory available here (MemAvailable)"
            ),
            Error::TooLarge {
                rank,
                bytes,
                available: None,
            } => write!(
                f,
                "rank {rank} announced a message of {bytes} bytes, more than this process \
                 could allocate"
            ),
            Error::Io(e) => write!(f, "I/O error: {e}"),
            Error::Runtime(e) => e.fmt(f),
        }
    }
}

/// The cause of [`Error::PeerLost`] for a peer whose goodbye came before its
/// connection ended: it closed its transport in order
/// ([`Error::is_closed_in_order`]).
pub const CLOSED_IN_ORDER: &str = "closed its transport";

/// The source is the underlying error itself (not the `Arc` that shares it), so that
/// `downcast_ref::<std::io::Error>()` and the like work on it.
impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Unavailable {
                source: Some(s), ..
            }
            | Error::PeerLost {
                source: Some(s), ..
            }
            | Error::Library { source: s, .. } => Some(&**s),
            Error::Io(e) => Some(&**e),
            Error::Runtime(e) => e.source(),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Io(Arc::new(e))
    }
}

impl From<hpc_runtime::Error> for Error {
    fn from(e: hpc_runtime::Error) -> Error {
        Error::Runtime(Arc::new(e))
    }
}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// [`Error::Unavailable`] without an underlying error.
    pub(crate) fn unavailable(backend: &'static str, why: impl Into<String>) -> Error {
        Error::Unavailable {
            backend,
            why: why.into(),
            source: None,
        }
    }

    /// Whether this is [`Error::PeerLost`] for a peer that closed its transport
    /// in order ([`CLOSED_IN_ORDER`]: its goodbye came, no failure was seen):
    /// it dropped the transport, or its process ended with it, rather than
    /// died or lost its connection.
    pub fn is_closed_in_order(&self) -> bool {
        matches!(self, Error::PeerLost { cause, .. } if cause == CLOSED_IN_ORDER)
    }

    /// [`Error::PeerLost`] caused by `source`.
    pub(crate) fn lost(
        rank: usize,
        cause: impl Into<String>,
        source: Option<impl std::error::Error + Send + Sync + 'static>,
    ) -> Error {
        Error::PeerLost {
            rank,
            cause: cause.into(),
            source: source.map(|s| Arc::new(s) as Cause),
        }
    }

    /// [`Error::Library`] for `call`.
    #[cfg_attr(not(any(feature = "verbs", feature = "mpi")), allow(dead_code))]
    pub(crate) fn library(
        call: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        Error::Library {
            call,
            source: Arc::new(source),
        }
    }
}

/// Announced messages up to this size are taken without looking at the
/// memory available (reading `/proc/meminfo` for each would cost more than
/// they do).
const CLAIM_UNCHECKED: u64 = 1 << 20;

/// Whether this process may hold a message of `bytes` that rank `peer`
/// announced, before any of it arrived: more than the memory available
/// (`MemAvailable`) is [`Error::TooLarge`], naming the peer and the size. The
/// one rule for every backend that sizes a buffer by a peer's word (tcp's
/// header, libfabric's announcement, shm's first fragment).
pub(crate) fn check_claim(peer: usize, bytes: u64) -> Result<()> {
    if bytes <= CLAIM_UNCHECKED {
        return Ok(());
    }
    match hpc_io::read::mem_available() {
        Some(a) if bytes > a => Err(Error::TooLarge {
            rank: peer,
            bytes,
            available: Some(a),
        }),
        _ => Ok(()),
    }
}

/// An empty vector with room for `bytes` of a message rank `peer`
/// announced ([`check_claim`]), or [`Error::TooLarge`] where the allocator
/// has not that much (it aborted the process).
pub(crate) fn room_for_claim(peer: usize, bytes: u64) -> Result<Vec<u8>> {
    check_claim(peer, bytes)?;
    let too_large = || Error::TooLarge {
        rank: peer,
        bytes,
        available: None,
    };
    let n = usize::try_from(bytes).map_err(|_| too_large())?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| too_large())?;
    Ok(v)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn sources_survive_clones() {
        let io = std::io::Error::from_raw_os_error(rustix::io::Errno::CONNRESET.raw_os_error());
        let e = Error::lost(3, "write failed", Some(io));
        let copy = e.clone();
        let src = copy.source().expect("the socket error is kept");
        let io = src
            .downcast_ref::<std::io::Error>()
            .expect("as the io::Error it was");
        assert_eq!(
            io.raw_os_error(),
            Some(rustix::io::Errno::CONNRESET.raw_os_error())
        );
        assert!(copy.to_string().contains("rank 3 is lost"));
        let e: Error = std::io::Error::from(std::io::ErrorKind::NotFound).into();
        assert_eq!(
            e.clone()
                .source()
                .and_then(|s| s.downcast_ref::<std::io::Error>())
                .map(|e| e.kind()),
            Some(std::io::ErrorKind::NotFound)
        );
    }
}
