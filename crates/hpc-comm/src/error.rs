//! The error of communicators and their collectives, below every module
//! that reports one.

use std::time::Duration;

/// Errors of communicators and their collectives.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Invalid arguments: buffer too small, counts of the wrong length, ...
    #[error(transparent)]
    Invalid(#[from] hpc_collectives::CollectiveError),
    /// Another rank sent a message of a different size than this rank
    /// expects (the ranks called the collective with different counts).
    #[error("count mismatch with rank {rank}: {detail}")]
    CountMismatch {
        /// The other rank (rank in the world).
        rank: usize,
        /// What differed.
        detail: String,
    },
    /// A rank the collective waits for is gone.
    #[error("rank {rank} is lost (its process exited) during a collective")]
    RankLost {
        /// The lost rank (rank in the world).
        rank: usize,
    },
    /// A node of the communicator is lost during a collective: the `Proxy`
    /// engine's proxy on that node stopped, or the network to it broke.
    #[error("node {node} is lost (its collectives proxy stopped or cannot be reached) during a collective")]
    NodeLost {
        /// The lost node (node id in the world).
        node: usize,
    },
    /// The collective did not finish within the communicator's timeout.
    #[error("collective timed out after {after:?}, waiting for ranks {waiting_for:?}")]
    Timeout {
        /// The timeout.
        after: Duration,
        /// World ranks the collective was still waiting for.
        waiting_for: Vec<usize>,
    },
    /// The engine stopped (its progress thread or proxy process is gone).
    #[error("the {0} engine stopped")]
    Stopped(&'static str),
    /// An `ndarray` view is not contiguous in standard order.
    #[error("array is not contiguous in standard (row-major) order; use `.as_standard_layout()`")]
    NotContiguous,
    /// The engine cannot serve this job (e.g. ranks on several nodes).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Failure of the underlying data movement or setup.
    #[error("transport: {0}")]
    Transport(String),
    /// Failure of the runtime used to set the communicator up.
    #[error(transparent)]
    Runtime(#[from] hpc_runtime::Error),
}

/// Result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
