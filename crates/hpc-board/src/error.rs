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
    /// Every rank of the collective fails with it: on one node the rank
    /// that found it records it on the board (Inline, Thread) or the proxy
    /// fails every part (Proxy), so that ranks which never receive the odd
    /// rank's message are told within about 10 ms, not by the timeout.
    #[error("count mismatch with rank {rank}: {detail}")]
    CountMismatch {
        /// The other rank (rank in the world).
        rank: usize,
        /// What differed: who sent how many bytes where who expected how
        /// many, where the engine knows it.
        detail: String,
    },
    /// Another rank called a different collective at the same point of the
    /// communicator's order: another kind, element type, reduction operation
    /// or root (their counts may differ: a v-collective's do, and a size
    /// that differs is a [`Error::CountMismatch`]). Nothing of the other
    /// rank's data is landed or reduced: the collective fails on this rank
    /// (and, where the engine tells a sender of a refusal, on the other).
    /// With three ranks or more, a rank that never receives the other
    /// collective's data fails too, not by the timeout: on one node the
    /// rank that found the mismatch records it on the board, where the
    /// others look within about 10 ms (the `Proxy` engine's proxy answers
    /// every part still waiting; one whose part of a broadcast or reduction
    /// had ended before the other part came may have succeeded, nothing of
    /// the other rank's having reached it); `rank` is then one whose
    /// collective is not this rank's.
    /// The communicator goes on: a matching collective afterwards works.
    /// Under the `Mpi` engine the MPI library does the matching, and it does
    /// not check this: there such a call is MPI's undefined behaviour.
    #[error("collective mismatch with rank {rank}: this rank called {ours} where rank {rank} called {theirs}")]
    CollectiveMismatch {
        /// The other rank (rank in the world).
        rank: usize,
        /// This rank's collective in words (`"allreduce f64 sum"`,
        /// `"broadcast u8 root 0"`).
        ours: String,
        /// The other rank's.
        theirs: String,
    },
    /// A rank the operation waits for is gone, or no message will come from it
    /// on this communicator.
    ///
    /// What the engine knows differs by where the rank is. A rank on this
    /// node is lost when its process has exited (its pid is checked). A rank on
    /// another node is lost when its connection ended: its process exited or
    /// was killed, the network broke, or, on a transport that cannot tell an
    /// orderly close from a broken one, it dropped this communicator while its
    /// process goes on (where the tcp transport saw its goodbye first, the
    /// error is [`Error::RankLeft`]). A receive from
    /// that rank alone then fails with this error once no message it sent
    /// before the end fits, rather than wait for the timeout: read it as "no
    /// message will come from that rank", not as proof that its process exited.
    /// The receiving rank's own communicator being dropped is
    /// [`Error::Stopped`], not this.
    #[error("rank {rank} is lost (its process exited, or, on another node, its connection ended: it may have dropped the communicator) during the operation")]
    RankLost {
        /// The lost rank (rank in the world, on every engine and in every
        /// communicator: `Comm::world_rank` gives a member's).
        rank: usize,
    },
    /// A rank that the operation waits for left this communicator: it
    /// dropped it (or, on another node, its process ended and closed it), and
    /// no message it sent before fits. Its process may go on; no message will
    /// come from it on this communicator. A rank on this node marks the
    /// communicator's board when it drops it, after everything it sent, and
    /// a waiting rank sees the mark within about 10 ms; one on another node
    /// is seen to leave when its goodbye comes before its connection ends.
    /// With the `Inline` and `Thread` engines, the ranks on this node whose
    /// collective waits for a rank that failed so get this error too.
    #[error("rank {rank} left the communicator (it dropped it, or its process ended) during the operation: no message will come from it")]
    RankLeft {
        /// The rank that left (rank in the world, as [`Error::RankLost`]'s).
        rank: usize,
    },
    /// A node of the communicator is lost during a collective: the `Proxy`
    /// engine's proxy on that node stopped, or the network to it broke.
    #[error("node {node} is lost (its collectives proxy stopped or cannot be reached) during a collective")]
    NodeLost {
        /// The lost node (node id in the world).
        node: usize,
    },
    /// The `Proxy` engine's proxy cannot hold the memory this collective needs
    /// in it (its scratch and, in DPU placement, the staging copies of the ranks'
    /// spans): more than its cap `HPC_COLL_PROXY_MAX_SCRATCH` allows beside the
    /// collectives in flight, more than it could allocate, or a size that
    /// overflows. Only this collective fails, on every rank; the proxy goes on
    /// serving the communicator's other collectives.
    #[error("the collectives proxy cannot hold {} for this collective: {why} (the proxy's cap is {})", bytes_phrase(*.bytes), hpc_runtime::env::COLL_PROXY_MAX_SCRATCH)]
    ProxyMemory {
        /// The bytes the collective asked of the proxy; `None` where that size
        /// overflows.
        bytes: Option<u64>,
        /// Why it could not: over the cap (and what the cap is, where known), or
        /// the allocation failed.
        why: String,
    },
    /// The collective did not finish within the communicator's timeout. The
    /// message lists the first [`LISTED_RANKS`] ranks and counts them all
    /// (a node's proxy waiting for thousands of ranks listed every one).
    #[error(
        "collective timed out after {after:?}, waiting for ranks {}",
        listed_ranks(waiting_for)
    )]
    Timeout {
        /// The timeout.
        after: Duration,
        /// World ranks the collective was still waiting for.
        waiting_for: Vec<usize>,
    },
    /// Another member, `rank`, gave this collective up: its part timed out
    /// (it waited longer than its communicator's timeout, for `waited_for`
    /// among others) and ended, so this rank's part cannot end either, and
    /// what it read of `rank`'s buffer may already be other data: nothing of
    /// it is kept as the result. With the `Inline` and `Thread` engines, the
    /// members on `rank`'s node that come to the collective late get this
    /// error, where they took the reused buffer of a root that had timed out
    /// as its broadcast (`Ok`, and wrong) before hostile pass 21.
    #[error("rank {rank} gave this collective up (its part timed out waiting for rank {waited_for}): it cannot complete, and nothing read of rank {rank}'s part is kept")]
    PeerTimedOut {
        /// The rank whose part timed out (rank in the world, as
        /// [`Error::RankLost`]'s).
        rank: usize,
        /// A rank it was still waiting for then (rank in the world).
        waited_for: usize,
    },
    /// A point-to-point message and the receive it matched differ in length
    /// (in elements of the receive's type): nothing is landed, no truncation.
    #[error("message from rank {rank} with tag {tag} has {sent} elements where the receive holds {expected}")]
    MessageLength {
        /// The sending rank (rank in the communicator).
        rank: usize,
        /// The message's tag.
        tag: u16,
        /// Elements sent.
        sent: usize,
        /// Elements the receive holds.
        expected: usize,
    },
    /// A point-to-point message and the receive it matched differ in element
    /// type (MPI's type-signature rule): nothing is landed, and the sender of
    /// a message not yet copied out is told ([`Error::CountMismatch`]).
    /// Under the `Mpi` engine the MPI library does the matching, and it does
    /// not check types: there a mismatch of the same size lands unchecked.
    #[error("message from rank {rank} with tag {tag} has elements of type {sent} where the receive holds {expected}")]
    MessageType {
        /// The sending rank (rank in the communicator).
        rank: usize,
        /// The message's tag.
        tag: u16,
        /// The sent element type (`"f32"`, ...).
        sent: &'static str,
        /// The receive's element type.
        expected: &'static str,
    },
    /// A point-to-point send or receive did not finish within the
    /// communicator's timeout (`HPC_TIMEOUT`): no matching receive or send.
    #[error("{what} {peer_phrase} with {tag_phrase} timed out after {after:?}: no matching message", peer_phrase = peer_phrase(.what, *.peer), tag_phrase = tag_phrase(*.tag))]
    MessageTimeout {
        /// `"send"` or `"receive"`.
        what: &'static str,
        /// The peer (rank in the communicator); `None`: a receive from any source.
        peer: Option<usize>,
        /// The tag ([`ANY_TAG`](crate::ANY_TAG): a receive of any tag).
        tag: u16,
        /// The timeout.
        after: Duration,
    },
    /// The engine stopped (its progress thread or proxy process is gone, or
    /// the communicator was dropped while a request it started was in flight).
    #[error(
        "the {0} engine stopped (its communicator was dropped, or its progress thread or \
         proxy process ended)"
    )]
    Stopped(&'static str),
    /// An `ndarray` view is not contiguous in standard order.
    #[error("array is not contiguous in standard (row-major) order; use `.as_standard_layout()`")]
    NotContiguous,
    /// An argument out of its range; the text names the parameter.
    #[error("invalid argument: {0}")]
    Argument(String),
    /// The engine cannot serve this job (e.g. ranks on several nodes).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Failure of the underlying data movement or setup. `context` says
    /// what was being done; the cause, where there is one (an
    /// [`hpc_rdma::Error`], an [`std::io::Error`], ...), is kept whole as
    /// the error's [`source`](std::error::Error::source), so a caller can
    /// downcast it. `Display` shows the context only, as the Rust API
    /// guidelines ask: print the chain (`anyhow`'s `{:#}`, or a loop over
    /// `source()`) to see the cause.
    #[error("transport: {context}")]
    Transport {
        /// What was being done.
        context: String,
        /// The cause, if any.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },
    /// Failure of the runtime used to set the communicator up.
    #[error(transparent)]
    Runtime(#[from] hpc_runtime::Error),
    /// A request to the DPU service (`hpc proxy --dpu-service`) was not
    /// authenticated: the service refused its key, or this side has no key,
    /// or a key file that may not be used (missing, empty, too short, readable
    /// by others). The text says which, and what to set.
    #[error("{0}")]
    Auth(String),
}

impl Error {
    /// A transport error without an underlying cause.
    pub fn transport(context: impl Into<String>) -> Error {
        Error::Transport {
            context: context.into(),
            source: None,
        }
    }

    /// A transport error caused by `source`, which is kept whole.
    pub fn transport_from(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Error {
        Error::Transport {
            context: context.into(),
            source: Some(source.into()),
        }
    }

    /// This error and its causes, joined by `": "`: what `{}` shows,
    /// followed by every [`source`](std::error::Error::source) that it does not
    /// already end with ([`hpc_io::message::chain`]).
    pub fn chain(&self) -> String {
        hpc_io::message::chain(self)
    }
}

/// "to rank 3", "from rank 3", "from any rank".
fn peer_phrase(what: &str, peer: Option<usize>) -> String {
    match (what, peer) {
        ("send", Some(p)) => format!("to rank {p}"),
        (_, Some(p)) => format!("from rank {p}"),
        (_, None) => "from any rank".into(),
    }
}

/// "tag 7", "any tag".
fn tag_phrase(tag: u16) -> String {
    if tag == crate::tag::ANY_TAG {
        "any tag".into()
    } else {
        format!("tag {tag}")
    }
}

/// "N bytes", or what an overflowing size is called.
fn bytes_phrase(bytes: Option<u64>) -> String {
    match bytes {
        Some(b) => format!("{b} bytes"),
        None => "more bytes than a size can count".into(),
    }
}

/// Result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub use hpc_runtime::LISTED_RANKS;

/// `ranks` as `[0, 1, 2]`, the first [`LISTED_RANKS`] of a longer list
/// followed by how many there are in all.
fn listed_ranks(ranks: &[usize]) -> String {
    if ranks.is_empty() {
        return "[]".into();
    }
    format!("[{}]", hpc_runtime::listed_ranks(ranks))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timeout waiting for 100,000 ranks listed every one of them.
    #[test]
    fn a_timeout_lists_a_few_ranks_and_counts_them_all() {
        let t = |waiting_for: Vec<usize>| {
            Error::Timeout {
                after: Duration::from_secs(3),
                waiting_for,
            }
            .to_string()
        };
        assert_eq!(
            t(vec![1]),
            "collective timed out after 3s, waiting for ranks [1]"
        );
        assert_eq!(
            t(vec![]),
            "collective timed out after 3s, waiting for ranks []"
        );
        let many = t((0..100_000).collect());
        assert!(many.len() < 200, "{} bytes", many.len());
        assert!(many.ends_with("14, 15, ... (100000 in all)]"), "{many}");
    }

    #[test]
    fn message_errors_name_peer_tag_and_lengths() {
        let t = |what, peer| Error::MessageTimeout {
            what,
            peer,
            tag: 7,
            after: Duration::from_secs(2),
        };
        assert_eq!(
            t("receive", None).to_string(),
            "receive from any rank with tag 7 timed out after 2s: no matching message"
        );
        assert!(t("receive", Some(3))
            .to_string()
            .contains("receive from rank 3 with tag 7"));
        assert!(t("send", Some(3))
            .to_string()
            .contains("send to rank 3 with tag 7"));
        let e = Error::MessageLength {
            rank: 1,
            tag: 9,
            sent: 4,
            expected: 6,
        };
        assert_eq!(
            e.to_string(),
            "message from rank 1 with tag 9 has 4 elements where the receive holds 6"
        );
        let any = Error::MessageTimeout {
            what: "receive",
            peer: None,
            tag: crate::tag::ANY_TAG,
            after: Duration::from_secs(2),
        };
        assert!(
            any.to_string().contains("from any rank with any tag"),
            "{any}"
        );
        let e = Error::MessageType {
            rank: 2,
            tag: 5,
            sent: "f32",
            expected: "i32",
        };
        assert_eq!(
            e.to_string(),
            "message from rank 2 with tag 5 has elements of type f32 where the receive holds i32"
        );
    }

    #[test]
    fn a_transport_error_keeps_its_cause_whole() {
        let cause = hpc_rdma::Error::PeerLost {
            rank: 3,
            cause: "connection reset".into(),
            source: None,
        };
        let e = Error::transport_from("moving a collective's data", cause);
        assert_eq!(e.to_string(), "transport: moving a collective's data");
        let src = std::error::Error::source(&e).expect("the cause is kept");
        match src.downcast_ref::<hpc_rdma::Error>() {
            Some(hpc_rdma::Error::PeerLost { rank: 3, .. }) => {}
            other => panic!("the cause is not the transport's error: {other:?}"),
        }
        assert!(e.chain().ends_with("connection reset"), "{}", e.chain());
        assert!(std::error::Error::source(&Error::transport("x")).is_none());
    }
}
