//! The members this rank knows to be gone, and what that means for the
//! operations it starts next.
//!
//! A rank learns that a member is gone when one of its operations on the
//! communicator fails with [`Error::RankLost`] or [`Error::RankLeft`]
//! naming it (a collective that waited for it, a receive from it). From
//! then on, as MPI's fault-tolerance proposal (ULFM) has it for a failure
//! a process knows of, on every engine alike:
//!
//! * a send to that member fails at once with the same error, naming it:
//!   nobody will ever receive the message (before, a small send was copied
//!   out and returned `Ok`, the message lost without a word);
//! * every collective of the communicator fails at once with the same
//!   error, whether or not its data would have needed that member (before,
//!   a `bcast` whose root and receivers were alive succeeded under
//!   `Inline` and `Thread` and failed under `Proxy`, whose collectives
//!   need every member); on the ranks' own path the failure is recorded on
//!   the node's board for the collective's number, so the node's members
//!   that did not know yet fail it too rather than wait for this rank;
//! * receives are not refused: a message the member sent before it went
//!   may still be there to take (a receive from it alone fails once none
//!   fits, as before).
//!
//! A failure not known yet is not reported early: a small send to a member
//! that is gone but not known to be is copied out and returns `Ok` (an
//! eager send, as in MPI; the loss is reported by the next operation that
//! waits for the member), and a collective that does not wait for it may
//! succeed on some members (ULFM's rule too: failures are reported where
//! they are known, not necessarily everywhere at once).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use hpc_board::sync::lock;
use hpc_board::{Error, Result};

/// One member known gone.
#[derive(Debug, Clone, Copy)]
struct Member {
    /// Its rank in the communicator (`None` for a rank the error named
    /// that is no member's world rank).
    rank: Option<usize>,
    /// The rank as the error named it: its rank in the world, on every
    /// engine.
    named: usize,
    /// Whether it left in order ([`Error::RankLeft`]) rather than was lost.
    left: bool,
}

impl Member {
    fn error(&self) -> Error {
        if self.left {
            Error::RankLeft { rank: self.named }
        } else {
            Error::RankLost { rank: self.named }
        }
    }
}

/// The members this rank knows to be gone (see the module's text).
#[derive(Debug)]
pub(crate) struct Gone {
    /// Whether any is: the one load a send or a collective pays while none is.
    any: AtomicBool,
    members: Mutex<Vec<Member>>,
    /// The world rank of each member: an error names a member by its rank
    /// in the world on every engine (the `Proxy` engine on the host named
    /// its rank in the communicator, the others the world's, so that in a
    /// split communicator a send to the member lost was `Ok` and one to
    /// the member whose communicator rank was the lost one's world rank
    /// was refused).
    world: Vec<usize>,
}

impl Gone {
    /// None known gone, in a communicator of `world_ranks` (the world rank
    /// of each member).
    pub(crate) fn new(world_ranks: &[usize]) -> Gone {
        Gone {
            any: AtomicBool::new(false),
            members: Mutex::new(Vec::new()),
            world: world_ranks.to_vec(),
        }
    }

    /// Notes what `r` says of a member (an error naming a lost or departed
    /// rank). Returns `r` as it was. Inlined, the look at an `Ok` is one
    /// branch (every wait passes here).
    #[inline]
    pub(crate) fn note<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            self.saw(e);
        }
        r
    }

    #[cold]
    #[inline(never)]
    fn saw(&self, e: &Error) {
        let (named, left) = match e {
            Error::RankLost { rank } => (*rank, false),
            Error::RankLeft { rank } => (*rank, true),
            _ => return,
        };
        let rank = self.world.iter().position(|&w| w == named);
        let mut m = lock(&self.members);
        if !m.iter().any(|g| g.named == named) {
            m.push(Member { rank, named, left });
        }
        self.any.store(true, Ordering::Release);
    }

    /// The error of a send to communicator rank `dest`, if it is known gone.
    #[inline]
    pub(crate) fn send_to(&self, dest: usize) -> Result<()> {
        if !self.any.load(Ordering::Acquire) {
            return Ok(());
        }
        self.sent_to(dest)
    }

    #[cold]
    #[inline(never)]
    fn sent_to(&self, dest: usize) -> Result<()> {
        match lock(&self.members).iter().find(|g| g.rank == Some(dest)) {
            Some(g) => Err(g.error()),
            None => Ok(()),
        }
    }

    /// The first member known gone, as a collective's error (with the
    /// member's communicator rank where it is known surely), if any is.
    #[inline]
    pub(crate) fn collective(&self) -> Option<(Option<usize>, Error)> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        self.first()
    }

    #[cold]
    #[inline(never)]
    fn first(&self) -> Option<(Option<usize>, Error)> {
        lock(&self.members).first().map(|g| (g.rank, g.error()))
    }
}
