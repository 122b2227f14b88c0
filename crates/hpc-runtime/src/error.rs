//! Errors of the runtime.

use std::time::Duration;

/// What can go wrong in the runtime. Every variant that concerns a peer names it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A peer is gone: its process exited or its connection broke.
    #[error("rank {rank} is lost: {cause}")]
    PeerLost {
        /// The rank that was lost.
        rank: usize,
        /// What happened to it (exit code, signal, broken connection).
        cause: String,
    },
    /// A blocking call did not complete within the configured timeout.
    #[error("{op} timed out after {after:?}: still waiting for rank(s) {}", listed_ranks(.missing))]
    Timeout {
        /// The operation that timed out (`barrier`, `allgather`, `init`, ...).
        op: String,
        /// How long it waited.
        after: Duration,
        /// The ranks it was still waiting for.
        missing: Vec<usize>,
    },
    /// The launcher (the `hpc run` coordinator) is unreachable or went away.
    /// (The address is shown cut when long: `HPC_RENDEZVOUS` of 100,000
    /// characters was echoed whole.)
    #[error("the launcher at {} is unreachable: {cause}", hpc_env::short(addr))]
    LauncherLost {
        /// The rendezvous address.
        addr: String,
        /// The underlying failure.
        cause: String,
    },
    /// Ranks called different collectives at the same point of the program.
    #[error("collective mismatch: {0}")]
    Mismatch(String),
    /// The environment names a bootstrap that cannot be used (bad variables, missing
    /// feature, MPI refused to initialise).
    #[error("bootstrap failed: {0}")]
    Bootstrap(String),
    /// A message on the bootstrap channel could not be decoded.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// An operating-system error.
    #[error("I/O error during {context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An argument was out of range (e.g. a root rank >= size), or a setting
    /// was refused before the job was joined (`hpc_rs::init`'s `HPC_TRACE`,
    /// `HPC_ENGINE`, a variable of ours that is not UTF-8, an
    /// `hpc_rs::Options` field): the text names the argument or setting and
    /// its value.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// [`World::init`](crate::World::init) (or `hpc_rs::init`, or
    /// [`World::init_with`](crate::World::init_with) for the same rank) was
    /// called again in a process that already joined a launcher's or MPI's job: the
    /// launcher has one place per rank, so the second join is refused at once
    /// (it waited the timeout and blamed the launcher).
    #[error(
        "this process already joined the job as rank {rank} of {size}: join once \
         (World::init, World::init_with, hpc_rs::init) and share the World or Context it gave \
         (a launcher has one place per rank)"
    )]
    AlreadyJoined {
        /// The rank the process joined as.
        rank: usize,
        /// The ranks of that job.
        size: usize,
    },
    /// Ranks of one job were given different values where every rank must be
    /// given the same ([`World::same_on_every_rank`](crate::World::same_on_every_rank)):
    /// every rank fails with this error, naming the lowest rank that differs
    /// from rank 0 and what differs, as `name rank0's -> its`.
    #[error(
        "rank {rank} was given other {what} than rank 0 ({}: rank 0 -> rank {rank}): every \
         rank of a job must be given the same {what}",
        .differences.join(", ")
    )]
    NotTheSame {
        /// The lowest rank whose values differ from rank 0's.
        rank: usize,
        /// What the values are (`flags`, `settings`).
        what: String,
        /// What differs, each `name rank0's -> its` (the first
        /// [`LISTED_DIFFERENCES`](crate::LISTED_DIFFERENCES), then how many more).
        differences: Vec<String>,
    },
    /// This process was started to serve as its node's collectives proxy
    /// (`hpc_rs::init` serves then), and serving failed.
    #[error("serving as the node's collectives proxy failed: {0}")]
    Proxy(String),
}

/// Result type of the runtime.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// The rank this error is about, when there is exactly one.
    pub fn rank(&self) -> Option<usize> {
        match self {
            Error::PeerLost { rank, .. } => Some(*rank),
            Error::Timeout { missing, .. } if missing.len() == 1 => Some(missing[0]),
            _ => None,
        }
    }
}

/// The most ranks a message lists; the others are counted.
pub const LISTED_RANKS: usize = 16;

/// `ranks` for a message: `0, 1, 2`, the first [`LISTED_RANKS`] of a longer
/// list followed by how many there are in all (a job of 100,000 ranks is not
/// listed whole), `(unknown)` for none.
///
/// ```
/// let many: Vec<usize> = (0..40).collect();
/// assert!(hpc_runtime::listed_ranks(&many).ends_with("15, ... (40 in all)"));
/// assert_eq!(hpc_runtime::listed_ranks(&[3]), "3");
/// ```
pub fn listed_ranks(r: &[usize]) -> String {
    let mut s: Vec<String> = r.iter().take(LISTED_RANKS).map(|x| x.to_string()).collect();
    if r.len() > LISTED_RANKS {
        s.push(format!("... ({} in all)", r.len()));
    }
    if s.is_empty() {
        "(unknown)".into()
    } else {
        s.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_message_names_ranks() {
        let e = Error::Timeout {
            op: "barrier".into(),
            after: Duration::from_secs(2),
            missing: vec![3],
        };
        assert_eq!(
            e.to_string(),
            "barrier timed out after 2s: still waiting for rank(s) 3"
        );
        assert_eq!(e.rank(), Some(3));
        let many = Error::Timeout {
            op: "init".into(),
            after: Duration::from_secs(1),
            missing: (0..40).collect(),
        };
        assert!(many.to_string().contains("(40 in all)"));
        assert_eq!(many.rank(), None);
    }
}
