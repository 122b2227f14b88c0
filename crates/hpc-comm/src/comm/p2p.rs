//! Point-to-point messages between two ranks of a communicator, and the
//! requests that own their buffers.
//!
//! A message is one step of a schedule of its own (one send, or one
//! receive), run by the engine's executor as the collectives' steps are:
//! over the node's board and, across nodes, the ranks' network transport
//! (under the `Proxy` engine too, whose proxies carry only collectives
//! between nodes: a message is one step with nothing to offload, and
//! through two proxies it would take two more hops). In the DPU placement,
//! whose ranks reach nothing but their proxy, and under `Mpi`, the engine
//! carries them ([`Driver::message`]): the proxies match them with the
//! rules below (`proxy/mailbox.rs`). Every
//! point-to-point message carries one sequence number that no collective
//! takes ([`P2P_SEQ`](crate::executor::P2P_SEQ)), so a user's tag never
//! matches a collective's message, and its element type beside its tag
//! ([`p2p_tag`](crate::executor::p2p_tag)). A receive takes the earliest
//! announced message that fits its source and tag (either may be a
//! wildcard), so messages of one sender are received in the order they
//! were sent (MPI's non-overtaking rule, across tags too); a message of
//! another element type than the receive's is an [`Error::MessageType`].

use std::marker::PhantomData;

use hpc_collectives::{Algorithm, CollectiveKind, DataType, Region, Round, Schedule, Step};

use super::gone::Gone;
use super::owned::Owned;
use super::Comm;
use crate::engines::{Driver, Message, Ticket};
use crate::executor::{p2p_tag, Buffers, Want};
use crate::job::Stage;
use hpc_board::{bytes, bytes_mut, Buf, BufMut, Elem};
use hpc_board::{Error, Result};

pub use hpc_board::{Tag, ANY_TAG};

/// Where a receive takes its message from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// From this rank of the communicator only.
    Rank(usize),
    /// From whichever rank's message that fits the tag is there first.
    Any,
}

impl From<usize> for Source {
    fn from(r: usize) -> Source {
        Source::Rank(r)
    }
}

/// What a finished receive got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The rank that sent it (rank in the communicator).
    pub source: usize,
    /// Its tag (the message's, also for a receive of [`ANY_TAG`]).
    pub tag: Tag,
    /// Elements received (the receive's length: a message of another
    /// length is an [`Error::MessageLength`]).
    pub count: usize,
}

/// One side of a message, as its errors name it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Msg {
    pub(super) what: &'static str,
    /// The peer; `None`: a receive from any source.
    peer: Option<usize>,
    /// [`ANY_TAG`]: a receive of any tag.
    tag: Tag,
    /// The buffer's element type.
    dtype: DataType,
    /// Elements of the buffer.
    count: usize,
}

impl Msg {
    /// The engine's error as this message's.
    fn error(&self, e: Error) -> Error {
        match e {
            Error::Timeout { after, .. } => Error::MessageTimeout {
                what: self.what,
                peer: self.peer,
                tag: self.tag,
                after,
            },
            Error::MessageLength {
                rank,
                tag,
                sent,
                expected,
            } => {
                let elem = self.dtype.size().max(1);
                if sent % elem != 0 {
                    // No whole number of the receive's elements (a message of
                    // another type): counted in elements it would read as a
                    // length that may even equal the receive's.
                    return Error::CountMismatch {
                        rank,
                        detail: format!(
                            "message with tag {tag} has {sent} bytes, not a whole number of \
                             the receive's {elem}-byte elements (it holds {} bytes, {} elements)",
                            expected,
                            expected / elem
                        ),
                    };
                }
                Error::MessageLength {
                    rank,
                    tag,
                    sent: sent / elem,
                    expected: expected / elem,
                }
            }
            e => e,
        }
    }

    /// Waits for `t` (a staged result goes to `out`), and says what a
    /// receive got.
    /// An error that names a member gone is noted in `gone`.
    pub(super) fn finish(
        &self,
        e: &dyn Driver,
        gone: &Gone,
        t: &Ticket,
        out: Option<&mut [u8]>,
    ) -> Result<Status> {
        if let Err(err) = t.wait(e, out) {
            t.cancel(e);
            return gone.note(Err(self.error(err)));
        }
        let (source, tag) = t.matched().unwrap_or((self.peer.unwrap_or(0), self.tag));
        Ok(Status {
            source,
            tag,
            count: self.count,
        })
    }
}

/// A schedule of one step, under the point-to-point sequence number.
fn one_step(comm: &Comm, step: Step, send_bytes: usize, recv_bytes: usize) -> Schedule {
    Schedule {
        // What kind the schedule says is for display only: none fits a
        // single message, and the executor does not read it.
        kind: CollectiveKind::Barrier,
        algorithm: Algorithm::Auto,
        rank: comm.rank,
        size: comm.size,
        send_bytes,
        recv_bytes,
        scratch_bytes: 0,
        rounds: vec![Round { steps: vec![step] }],
    }
}

impl Comm {
    fn peer_arg(&self, what: &str, r: usize) -> Result<usize> {
        if r >= self.size {
            return Err(Error::Argument(format!(
                "{what} {r} is not a rank of this communicator of {} ranks",
                self.size
            )));
        }
        Ok(r)
    }

    /// Posts one point-to-point step on the engine's own path: `send` to
    /// `dest`, or a receive into `recv` (staged: on copies the engine owns).
    fn post(&self, msg: &Msg, send: &[u8], recv: &mut [u8], staged: bool) -> Result<Ticket> {
        let mut stage = staged.then(|| Stage::copies(send, recv));
        let raw = match &mut stage {
            Some(st) => st.raw(),
            None => (send.as_ptr(), send.len(), recv.as_mut_ptr(), recv.len()),
        };
        let send_side = msg.what == "send";
        let any_tag = msg.tag == ANY_TAG;
        let Some(host) = self.driver.host() else {
            // MPI's own messages, or the DPU-placed proxy's, which carries them
            // (its ranks reach nothing but their proxy).
            let m = Message {
                send: send_side,
                peer: msg.peer,
                tag: (!any_tag).then_some(msg.tag),
                dtype: msg.dtype,
                timeout: self.timeout,
            };
            let _span = tracing::debug_span!("message", what = msg.what, peer = ?msg.peer, tag = msg.tag, rank = self.rank).entered();
            return match self.driver.message(&m, raw, stage) {
                Some(t) => t,
                None => Err(Error::Unsupported(format!(
                    "point-to-point messages on this {:?} engine (it has neither the ranks' own \
                     path nor messages of its own)",
                    self.opts.engine
                ))),
            };
        };
        let tag = p2p_tag(msg.tag, msg.dtype);
        let (step, want) = if send_side {
            let peer = msg.peer.unwrap_or(0);
            let step = Step::Send {
                peer,
                region: Region::send(0, send.len()),
                tag,
            };
            (step, None)
        } else {
            let step = Step::Recv {
                peer: msg.peer.unwrap_or(0),
                region: Region::recv(0, recv.len()),
                tag,
            };
            let want = Want::new(msg.peer, (!any_tag).then_some(msg.tag), tag);
            (step, Some(want))
        };
        let sched = one_step(self, step, send.len(), recv.len());
        let (s, sl, r, rl) = raw;
        let bufs = Buffers {
            send: s,
            send_len: sl,
            recv: r,
            recv_len: rl,
            scratch: Vec::new(),
            stage,
        };
        let _span = tracing::debug_span!("message", what = msg.what, peer = ?msg.peer, tag = msg.tag, rank = self.rank).entered();
        host.start_p2p(sched, bufs, want)
    }

    fn send_msg<T: Elem>(&self, buf: &[T], dest: usize, tag: Tag) -> Result<Msg> {
        if tag == ANY_TAG {
            return Err(Error::Argument(format!(
                "tag {tag} is ANY_TAG, for receives: a message's tag is below it"
            )));
        }
        Ok(Msg {
            what: "send",
            peer: Some(self.gone_dest(self.peer_arg("dest", dest)?)?),
            tag,
            dtype: T::DTYPE,
            count: buf.len(),
        })
    }

    /// `dest`, unless it is known gone: a message to it would never be
    /// received (see `gone.rs`).
    fn gone_dest(&self, dest: usize) -> Result<usize> {
        self.gone.send_to(dest).map(|()| dest)
    }

    fn recv_msg<T: Elem>(&self, buf: &[T], source: Source, tag: Tag) -> Result<Msg> {
        let peer = match source {
            Source::Rank(r) => Some(self.peer_arg("source", r)?),
            Source::Any => None,
        };
        Ok(Msg {
            what: "receive",
            peer,
            tag,
            dtype: T::DTYPE,
            count: buf.len(),
        })
    }

    /// Runs a posted step to its end on the caller's buffers.
    fn blocking(&self, msg: &Msg, send: &[u8], recv: &mut [u8]) -> Result<Status> {
        let t = self.post(msg, send, recv, false)?;
        let r = msg.finish(&*self.driver, &self.gone, &t, None);
        if r.is_err() {
            self.abandon(&t);
        }
        r
    }

    /// Sends `buf` to rank `dest` with `tag` (blocking until `buf` may be
    /// reused: a small message is copied out at once, a large one waits for
    /// the receiver to read it). Bounded by the communicator's timeout
    /// (`HPC_TIMEOUT`), as collectives are.
    ///
    /// A send to a rank this rank knows to be gone (an earlier operation
    /// failed with [`Error::RankLost`] or [`Error::RankLeft`] naming it)
    /// fails at once with that error; a small send to a rank that is gone
    /// but not known to be is copied out and returns `Ok`, as MPI's eager
    /// send does, and the loss is reported by the next operation that waits
    /// for that rank. After such a loss every collective of the
    /// communicator fails at once too, on every engine.
    pub fn send<S: Buf + ?Sized>(&self, buf: &S, dest: usize, tag: Tag) -> Result<()> {
        let buf = buf.elems()?;
        let msg = self.send_msg(buf, dest, tag)?;
        self.blocking(&msg, bytes(buf), &mut []).map(|_| ())
    }

    /// Receives a message with `tag` ([`ANY_TAG`]: any) from `source` into
    /// `buf`, whose length must be the message's (else
    /// [`Error::MessageLength`], naming both; nothing is truncated) and
    /// whose element type must be the message's (else
    /// [`Error::MessageType`], naming both: an `f32` message does not land
    /// in an `i32` buffer, though their sizes agree; under the `Mpi` engine
    /// MPI matches, which does not check types). Bounded by the
    /// communicator's timeout: a message that never comes is an
    /// [`Error::MessageTimeout`] naming source and tag. The [`Status`] says
    /// which source and tag came.
    pub fn recv<R: BufMut + ?Sized>(
        &self,
        buf: &mut R,
        source: impl Into<Source>,
        tag: Tag,
    ) -> Result<Status> {
        let buf = buf.elems_mut()?;
        let msg = self.recv_msg(buf, source.into(), tag)?;
        self.blocking(&msg, &[], bytes_mut(buf))
    }

    /// Non-blocking [`Comm::send`]: the request borrows `buf` until it is
    /// waited for (the engine sends a copy, so a leaked request is safe).
    pub fn isend<'a, S: Buf + ?Sized>(
        &'a self,
        buf: &'a S,
        dest: usize,
        tag: Tag,
    ) -> Result<SendRequest<'a>> {
        let buf = buf.elems()?;
        let msg = self.send_msg(buf, dest, tag)?;
        let t = self.post(&msg, bytes(buf), &mut [], true)?;
        Ok(SendRequest {
            comm: self,
            ticket: Some(t),
            msg,
            _p: PhantomData,
        })
    }

    /// Non-blocking [`Comm::recv`]: the request borrows `buf` until it is
    /// waited for, and the message lands in it in `test`/`wait`.
    ///
    /// A receive takes, of the messages that fit its source and tag, the
    /// one announced first; so messages of one sender are taken in the
    /// order it sent them, also by a receive of [`ANY_TAG`] (MPI's
    /// non-overtaking rule), and receives are matched in the order they
    /// were posted. `Source::Any` and [`ANY_TAG`] are MPI's
    /// `MPI_ANY_SOURCE` and `MPI_ANY_TAG` under the `Mpi` engine. On the
    /// `Proxy` engine the ranks' own path carries messages, across nodes
    /// over their network path (the proxies carry the collectives only); in
    /// the DPU placement, whose ranks reach nothing but their proxy, the
    /// proxies carry them, with the same matching (a message the proxy
    /// cannot hold within its memory cap fails the receive that takes it
    /// with [`Error::ProxyMemory`]).
    pub fn irecv<'a, R: BufMut + ?Sized>(
        &'a self,
        buf: &'a mut R,
        source: impl Into<Source>,
        tag: Tag,
    ) -> Result<RecvRequest<'a>> {
        let buf = buf.elems_mut()?;
        let msg = self.recv_msg(buf, source.into(), tag)?;
        let out = bytes_mut(buf);
        let t = self.post(&msg, &[], out, true)?;
        Ok(RecvRequest {
            comm: self,
            ticket: Some(t),
            out: Some(out),
            msg,
        })
    }

    /// Sends `send` to `dest` and receives `recv` from `source` at once (no
    /// deadlock when every rank of a ring calls it). The two element types
    /// may differ.
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv<S: Buf + ?Sized, R: BufMut + ?Sized>(
        &self,
        send: &S,
        dest: usize,
        send_tag: Tag,
        recv: &mut R,
        source: impl Into<Source>,
        recv_tag: Tag,
    ) -> Result<Status> {
        let rreq = self.irecv(recv, source, recv_tag)?;
        let sreq = self.isend(send, dest, send_tag)?;
        let sent = sreq.wait();
        let got = rreq.wait();
        sent?;
        got
    }

    /// Non-blocking send of a buffer the request owns: `wait` hands it back.
    /// The request borrows nothing (`'static`), so it can be kept in a
    /// struct and waited for later; the engine reads the `Vec` in place.
    pub fn isend_owned<T: Elem>(&self, buf: Vec<T>, dest: usize, tag: Tag) -> Result<OwnedSend<T>> {
        let msg = self.send_msg(&buf, dest, tag)?;
        let t = self.post(&msg, bytes(&buf), &mut [], false)?;
        Ok(OwnedSend {
            inner: Owned::new(self, t, Some(msg), buf),
        })
    }

    /// Non-blocking receive into a buffer the request owns: `wait` hands it
    /// back filled, with the [`Status`]. `'static` like [`OwnedSend`]; the
    /// message lands in the `Vec` in place.
    pub fn irecv_owned<T: Elem>(
        &self,
        mut buf: Vec<T>,
        source: impl Into<Source>,
        tag: Tag,
    ) -> Result<OwnedRecv<T>> {
        let msg = self.recv_msg(&buf, source.into(), tag)?;
        let t = self.post(&msg, &[], bytes_mut(&mut buf), false)?;
        Ok(OwnedRecv {
            inner: Owned::new(self, t, Some(msg), buf),
        })
    }
}

/// A non-blocking send ([`Comm::isend`]); borrows its buffer until
/// [`SendRequest::wait`]. Dropping it unfinished waits for it.
#[must_use = "a send is known to be done only in test/wait"]
pub struct SendRequest<'a> {
    comm: &'a Comm,
    ticket: Option<Ticket>,
    msg: Msg,
    _p: PhantomData<&'a [u8]>,
}

/// A non-blocking receive ([`Comm::irecv`]); borrows its buffer until
/// [`RecvRequest::wait`], where the message lands. Dropping it unfinished
/// waits for it.
#[must_use = "a received message lands in its buffer only in test/wait"]
pub struct RecvRequest<'a> {
    comm: &'a Comm,
    ticket: Option<Ticket>,
    out: Option<&'a mut [u8]>,
    msg: Msg,
}

macro_rules! debug_by_message {
    ($($t:ident $(<$l:lifetime>)? $(<$g:ident>)?: $($f:ident).+),*) => {$(
        impl$(<$l>)?$(<$g: Elem>)? std::fmt::Debug for $t$(<$l>)?$(<$g>)? {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($t)).field("message", &self.$($f).+).finish()
            }
        }
    )*};
}
debug_by_message!(
    SendRequest<'a>: msg,
    RecvRequest<'a>: msg,
    OwnedSend<T>: inner.msg,
    OwnedRecv<T>: inner.msg
);

impl SendRequest<'_> {
    /// Whether the send finished (the engine progresses here, as in
    /// [`Request::test`](crate::Request::test)).
    pub fn test(&mut self) -> bool {
        self.comm.finished(self.ticket.as_ref())
    }

    /// Waits for the send.
    pub fn wait(mut self) -> Result<()> {
        match self.ticket.take() {
            Some(t) => self
                .msg
                .finish(&*self.comm.driver, &self.comm.gone, &t, None)
                .map(|_| ()),
            None => Ok(()),
        }
    }
}

impl Drop for SendRequest<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            if let Err(e) = self
                .msg
                .finish(&*self.comm.driver, &self.comm.gone, &t, None)
            {
                tracing::warn!(error = %e.chain(), "an unwaited send failed");
            }
        }
    }
}

impl RecvRequest<'_> {
    /// Whether the message arrived (it lands in the buffer in `wait`).
    pub fn test(&mut self) -> bool {
        self.comm.finished(self.ticket.as_ref())
    }

    /// Waits for the message, lands it in the buffer and says where it came from.
    pub fn wait(mut self) -> Result<Status> {
        let t = self.ticket.take().expect("a receive is waited for once");
        self.msg
            .finish(&*self.comm.driver, &self.comm.gone, &t, self.out.take())
    }
}

impl Drop for RecvRequest<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            if let Err(e) =
                self.msg
                    .finish(&*self.comm.driver, &self.comm.gone, &t, self.out.take())
            {
                tracing::warn!(error = %e.chain(), "an unwaited receive failed");
            }
        }
    }
}

/// A send that owns its buffer ([`Comm::isend_owned`]): `'static`, so it can
/// be kept in a struct and outlive the frame (and the borrow of the
/// communicator) that started it; not the communicator itself, whose engine
/// stops when it is dropped: wait for it first (a request still in flight
/// then ends with an error, or with the message if it came; never a hang).
/// Dropped unfinished, it waits for the send (until the communicator's
/// timeout), then cancels it, before the buffer is freed.
#[must_use = "wait hands the buffer back"]
pub struct OwnedSend<T: Elem> {
    inner: Owned<Vec<T>>,
}

impl<T: Elem> OwnedSend<T> {
    /// Whether the send finished.
    pub fn test(&mut self) -> bool {
        self.inner.test()
    }

    /// Waits for the send and hands the buffer back.
    pub fn wait(self) -> Result<Vec<T>> {
        self.inner.wait().map(|(b, _)| b)
    }
}

/// A receive that owns its buffer ([`Comm::irecv_owned`]): `'static` like
/// [`OwnedSend`], with the same rule when dropped unfinished.
#[must_use = "wait hands the buffer back with the message in it"]
pub struct OwnedRecv<T: Elem> {
    inner: Owned<Vec<T>>,
}

impl<T: Elem> OwnedRecv<T> {
    /// Whether the message arrived (and landed in the buffer).
    pub fn test(&mut self) -> bool {
        self.inner.test()
    }

    /// Waits for the message and hands the buffer back with it, and the status.
    pub fn wait(self) -> Result<(Vec<T>, Status)> {
        let (buf, status) = self.inner.wait()?;
        Ok((buf, status.expect("a message's request has its status")))
    }
}
