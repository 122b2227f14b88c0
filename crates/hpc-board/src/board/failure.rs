//! Why a collective failed on a rank, in the words a failure record on the
//! board holds, and the error the other members fail with.

use crate::Error;

/// Why a collective failed on a rank, as it records it on the board for the
/// other members ([`Board::mark_failed`](super::Board::mark_failed)): those that still wait for it
/// fail with the error it names rather than wait for the timeout. `peer` is
/// a rank of the communicator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// `peer` called another collective: the recording rank's signature is
    /// `ours`, the peer's `theirs` ([`Sig`](crate::sig::Sig)'s words).
    Mismatch {
        /// The rank that called another collective.
        peer: u32,
        /// The recording rank's signature word.
        ours: u32,
        /// The peer's signature word.
        theirs: u32,
    },
    /// `peer` dropped the communicator.
    Left {
        /// The rank that left.
        peer: u32,
    },
    /// `peer`'s process is gone.
    Lost {
        /// The rank that is gone.
        peer: u32,
    },
    /// `sender`'s message to `receiver` was not of the size the receiver's
    /// schedule expects (the two called the collective with other counts).
    Count {
        /// The rank whose message had the other size.
        sender: u32,
        /// The rank that received it.
        receiver: u32,
    },
    /// `peer`'s part timed out waiting for `waited_for` (among others) and
    /// ended: its buffers may be reused at once, so a member that reads
    /// them after its part ended fails rather than take them for its part.
    TimedOut {
        /// The rank whose part timed out.
        peer: u32,
        /// A rank it was still waiting for.
        waited_for: u32,
    },
}

impl Failure {
    /// Its kind (non-zero) and its three words, as a record on the board
    /// holds it (and a notice to another node carries it).
    pub fn words(self) -> (u32, [u32; 3]) {
        match self {
            Failure::Mismatch { peer, ours, theirs } => (1, [peer, ours, theirs]),
            Failure::Left { peer } => (2, [peer, 0, 0]),
            Failure::Lost { peer } => (3, [peer, 0, 0]),
            Failure::Count { sender, receiver } => (4, [sender, receiver, 0]),
            Failure::TimedOut { peer, waited_for } => (5, [peer, waited_for, 0]),
        }
    }

    /// The failure of [`Failure::words`]; `None` for an unknown kind.
    pub fn from_words(kind: u32, [peer, ours, theirs]: [u32; 3]) -> Option<Failure> {
        match kind {
            1 => Some(Failure::Mismatch { peer, ours, theirs }),
            2 => Some(Failure::Left { peer }),
            3 => Some(Failure::Lost { peer }),
            4 => Some(Failure::Count {
                sender: peer,
                receiver: ours,
            }),
            5 => Some(Failure::TimedOut {
                peer,
                waited_for: ours,
            }),
            _ => None,
        }
    }
}

impl Failure {
    /// The error of a collective that failed so on this rank (`ours`, for a
    /// mismatch, being this rank's signature).
    pub fn error(self) -> Error {
        match self {
            Failure::Mismatch { peer, ours, theirs } => Error::CollectiveMismatch {
                rank: peer as usize,
                ours: crate::sig::Sig(ours).describe(),
                theirs: crate::sig::Sig(theirs).describe(),
            },
            Failure::Left { peer } => Error::RankLeft {
                rank: peer as usize,
            },
            Failure::Lost { peer } => Error::RankLost {
                rank: peer as usize,
            },
            Failure::Count { sender, receiver } => Error::CountMismatch {
                rank: sender as usize,
                detail: format!(
                    "rank {sender}'s message to rank {receiver} was not of the size rank \
                     {receiver} expects (the ranks called the collective with other counts)"
                ),
            },
            Failure::TimedOut { peer, waited_for } => Error::PeerTimedOut {
                rank: peer as usize,
                waited_for: waited_for as usize,
            },
        }
    }
}
