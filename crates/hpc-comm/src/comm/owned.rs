//! Requests that own their buffers: moved in when the operation starts,
//! handed back by `wait`. They borrow nothing (`'static`), so they can be
//! kept in a struct and outlive the frame, and the borrow of the
//! communicator, that started them; the engine works on the `Vec`s in place
//! (a `Vec`'s heap block does not move with it). They do not outlive the
//! communicator's engine, which stops when the communicator is dropped: a
//! request still in flight then ends with an error (or the message, if it
//! came), never a hang and never a write into a freed buffer.

use std::sync::Arc;

use hpc_collectives::{Collective, ReduceOp};

use super::gone::Gone;
use super::p2p::{Msg, Status};
use super::request::per_rank;
use super::{abandon, Comm};
use crate::engines::{Driver, Ticket};
use hpc_board::Result;
use hpc_board::{bytes, bytes_mut, Elem};

/// What every owned request holds: the engine (kept alive by the request),
/// the ticket, the buffers `B` the engine works on, and for a message what
/// its errors name.
pub(super) struct Owned<B> {
    driver: Arc<dyn Driver>,
    gone: Arc<Gone>,
    ticket: Option<Ticket>,
    pub(super) msg: Option<Msg>,
    buf: Option<B>,
}

impl<B> Owned<B> {
    pub(super) fn new(comm: &Comm, t: Ticket, msg: Option<Msg>, buf: B) -> Owned<B> {
        Owned {
            driver: comm.driver.clone(),
            gone: comm.gone.clone(),
            ticket: Some(t),
            msg,
            buf: Some(buf),
        }
    }

    pub(super) fn test(&mut self) -> bool {
        let e = &*self.driver;
        self.ticket.as_ref().is_none_or(|t| t.test(e))
    }

    /// Waits for `t`: a message's status, or `None` for a collective.
    fn finish(&self, t: &Ticket) -> Result<Option<Status>> {
        match &self.msg {
            Some(m) => m.finish(&*self.driver, &self.gone, t, None).map(Some),
            None => self.gone.note(t.wait(&*self.driver, None)).map(|()| None),
        }
    }

    /// Waits for the operation and hands the buffers back (with a message's status).
    pub(super) fn wait(mut self) -> Result<(B, Option<Status>)> {
        let t = self
            .ticket
            .take()
            .expect("an owned request is waited for once");
        let r = self.finish(&t);
        if r.is_err() {
            // The engine lets go of the buffers before they are handed back or freed.
            abandon(&*self.driver, &t);
        }
        let status = r?;
        let buf = self.buf.take().expect("the buffers are handed back once");
        Ok((buf, status))
    }
}

impl<B> Drop for Owned<B> {
    /// An owned request dropped unfinished is waited for (until the
    /// communicator's timeout), then cancelled, before its buffers are freed:
    /// the engine never touches freed memory. (A leaked one leaks its
    /// buffers too, which the engine may then still use.)
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            if let Err(e) = self.finish(&t) {
                tracing::warn!(error = %e.chain(), "an unwaited owned request failed");
            }
            abandon(&*self.driver, &t);
        }
    }
}

/// A collective that owns its send and receive buffers
/// ([`Comm::iallreduce_owned`], [`Comm::ialltoall_owned`]): `'static`, so it
/// can be kept in a struct and waited for later; `wait` hands both back.
/// Dropped unfinished, it waits for the collective (until the
/// communicator's timeout), then cancels it, before the buffers are freed.
#[must_use = "wait hands the buffers back, the result in the receive buffer"]
pub struct OwnedRequest<T: Elem> {
    inner: Owned<(Vec<T>, Vec<T>)>,
}

impl<T: Elem> std::fmt::Debug for OwnedRequest<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedRequest").finish_non_exhaustive()
    }
}

impl<T: Elem> OwnedRequest<T> {
    /// Whether the collective finished.
    pub fn test(&mut self) -> bool {
        self.inner.test()
    }

    /// Waits for the collective and hands back `(send, recv)`, the result
    /// in `recv`.
    pub fn wait(self) -> Result<(Vec<T>, Vec<T>)> {
        self.inner.wait().map(|(b, _)| b)
    }
}

impl Comm {
    /// Starts `coll` on the buffers themselves, which the request then owns.
    fn start_owned<T: Elem>(
        &self,
        coll: Collective,
        send: Vec<T>,
        mut recv: Vec<T>,
    ) -> Result<OwnedRequest<T>> {
        let t = self.start(coll, bytes(&send), bytes_mut(&mut recv), false)?;
        Ok(OwnedRequest {
            inner: Owned::new(self, t, None, (send, recv)),
        })
    }

    /// [`Comm::iallreduce`] on buffers moved into the request (no copy, no
    /// borrow): `wait` hands back `send` and `recv`, the reduction in `recv`.
    pub fn iallreduce_owned<T: Elem>(
        &self,
        send: Vec<T>,
        recv: Vec<T>,
        op: ReduceOp,
    ) -> Result<OwnedRequest<T>> {
        let coll = Collective::Allreduce {
            count: send.len(),
            dtype: T::DTYPE,
            op,
        };
        self.start_owned(coll, send, recv)
    }

    /// [`Comm::ialltoall`] on buffers moved into the request (no copy, no
    /// borrow): `wait` hands back `send` and `recv`, block `j` of `recv`
    /// from rank `j`.
    pub fn ialltoall_owned<T: Elem>(&self, send: Vec<T>, recv: Vec<T>) -> Result<OwnedRequest<T>> {
        let count = per_rank(
            send.len(),
            self.size,
            "alltoall send length (a multiple of the size)",
        )?;
        let coll = Collective::Alltoall {
            count,
            dtype: T::DTYPE,
        };
        self.start_owned(coll, send, recv)
    }
}
