//! A collective to start and the buffers its engine works on: where the
//! staging policy is decided, once, for every engine; and a split as the
//! engines see it.

use hpc_collectives::Collective;

/// Engine-owned copies of a collective's buffers: the engine works on these and
/// the result is copied into the caller's receive buffer in `wait`.
pub(crate) struct Stage {
    send: Vec<u8>,
    recv: Vec<u8>,
}

impl Stage {
    /// Engine-owned copies of `send` and `recv`.
    pub(crate) fn copies(send: &[u8], recv: &[u8]) -> Stage {
        Stage {
            send: send.to_vec(),
            recv: recv.to_vec(),
        }
    }

    /// Raw addresses and lengths of the two copies (stable while the stage
    /// moves: a `Vec`'s heap block does not).
    pub(crate) fn raw(&mut self) -> (*const u8, usize, *mut u8, usize) {
        let (s, r) = (&self.send, &mut self.recv);
        (s.as_ptr(), s.len(), r.as_mut_ptr(), r.len())
    }

    /// Copies the result into `out` (if given).
    pub(crate) fn deliver(&self, out: Option<&mut [u8]>) {
        if let Some(out) = out {
            out.copy_from_slice(&self.recv);
        }
    }
}

/// A collective to start and the buffers its engine works on.
pub(crate) struct Job<'a> {
    /// The communicator's sequence number of this collective.
    pub seq: u64,
    /// What to run.
    pub coll: Collective,
    send: &'a [u8],
    recv: &'a mut [u8],
    /// Engine-owned copies, for a staged request.
    pub stage: Option<Stage>,
}

impl<'a> Job<'a> {
    /// The staging policy, decided here once for every engine: a staged job
    /// (plain non-blocking requests, which may be leaked) works on copies that
    /// the engine owns; a direct one (blocking collectives, scopes, which
    /// finish every collective before the buffers go) on the buffers themselves.
    pub(crate) fn new(
        seq: u64,
        coll: Collective,
        send: &'a [u8],
        recv: &'a mut [u8],
        staged: bool,
    ) -> Job<'a> {
        let stage = staged.then(|| Stage::copies(send, recv));
        Job {
            seq,
            coll,
            send,
            recv,
            stage,
        }
    }

    /// Whether the engine works on the caller's buffers.
    pub(crate) fn direct(&self) -> bool {
        self.stage.is_none()
    }

    /// The buffers the engine works on: the stage's, or the caller's. Their
    /// addresses stay valid when the stage moves (a `Vec`'s heap block does not).
    pub(crate) fn buffers(&mut self) -> (&[u8], &mut [u8]) {
        match &mut self.stage {
            Some(s) => (&s.send, &mut s.recv),
            None => (self.send, self.recv),
        }
    }

    /// What to run and [`Job::buffers`].
    pub(crate) fn parts(&mut self) -> (&Collective, &[u8], &mut [u8]) {
        let coll = &self.coll;
        let (send, recv) = match &mut self.stage {
            Some(s) => (&s.send[..], &mut s.recv[..]),
            None => (self.send, &mut *self.recv),
        };
        (coll, send, recv)
    }

    /// Raw addresses and lengths of [`Job::buffers`].
    pub(crate) fn raw(&mut self) -> (*const u8, usize, *mut u8, usize) {
        let (s, r) = self.buffers();
        (s.as_ptr(), s.len(), r.as_mut_ptr(), r.len())
    }
}

/// A split as its engine sees it (every rank of the parent calls
/// `Driver::split` with the same `members` for its own colour).
pub(crate) struct Split<'a> {
    /// This rank's colour and key (the key is for engines that split
    /// themselves: MPI's).
    pub color: u32,
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub key: i64,
    /// The parent's rank of each member of the new group, in its rank order.
    pub members: &'a [usize],
    /// This rank in the new group.
    pub rank: usize,
    /// How many splits of the parent came before this one (the same on
    /// every rank of the parent: splits are collective).
    pub index: u64,
}

/// A point-to-point message as an engine without the ranks' own path
/// starts it ([`Driver::message`](crate::engines::Driver::message)).
pub(crate) struct Message {
    /// A send (else a receive).
    pub send: bool,
    /// The peer; `None`: a receive from any source.
    pub peer: Option<usize>,
    /// The tag; `None`: a receive of any tag (`MPI_ANY_TAG`).
    pub tag: Option<u16>,
    /// The element type (MPI sends it as its datatype and does not check
    /// that a receive's type is the message's; the DPU proxy checks it).
    pub dtype: hpc_collectives::DataType,
    /// How long `wait` waits for it before it cancels a receive.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub timeout: std::time::Duration,
}
