//! Requests, scopes and the collectives' calls.

use std::marker::PhantomData;
use std::sync::Mutex;

use hpc_collectives::{Collective, CollectiveError, ReduceOp};

use super::Comm;
use crate::engines::Ticket;
use hpc_board::sync::lock;
use hpc_board::{bytes, bytes_mut, Buf, BufMut, Elem};
use hpc_board::{Error, Result};

/// A non-blocking collective in flight; borrows its buffers until
/// [`Request::wait`]. Dropping an unfinished request waits for it.
#[must_use = "a collective finishes (and its result is copied) only in test/wait"]
pub struct Request<'a> {
    pub(super) comm: &'a Comm,
    pub(super) ticket: Option<Ticket>,
    pub(super) out: Option<&'a mut [u8]>,
    pub(super) _p: PhantomData<&'a mut [u8]>,
}

impl Comm {
    /// Whether the collective of `t` finished (none: there is nothing to finish).
    pub(super) fn finished(&self, t: Option<&Ticket>) -> bool {
        t.is_none_or(|t| t.test(&*self.driver))
    }

    /// Waits for the collective of `t`; `out` receives a staged result.
    fn finish(&self, t: Option<Ticket>, out: Option<&mut [u8]>) -> Result<()> {
        let _span = crate::spans::wait(false);
        self.gone
            .note(t.map_or(Ok(()), |t| t.wait(&*self.driver, out)))
    }
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("engine", &self.comm.engine())
            .finish()
    }
}

impl Request<'_> {
    /// Whether the collective finished (then [`Request::wait`] returns at
    /// once). With the `Inline` engine this is where progress happens; with
    /// `Thread` it happens here too unless the progress thread is at it.
    pub fn test(&mut self) -> bool {
        self.comm.finished(self.ticket.as_ref())
    }

    /// Waits for the collective and copies a staged result into the buffer.
    pub fn wait(mut self) -> Result<()> {
        self.comm.finish(self.ticket.take(), self.out.take())
    }

    /// Waits for every request; the first error is returned (all are waited for).
    pub fn wait_all(reqs: impl IntoIterator<Item = Self>) -> Result<()> {
        let mut first = Ok(());
        for r in reqs {
            let res = r.wait();
            if first.is_ok() {
                first = res;
            }
        }
        first
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            let _span = crate::spans::wait(true);
            if let Err(e) = self
                .comm
                .gone
                .note(t.wait(&*self.comm.driver, self.out.take()))
            {
                tracing::warn!(error = %e.chain(), "an unwaited collective failed");
            }
        }
    }
}

/// A region in which requests use the caller's buffers directly (see
/// [`Comm::scope`]).
pub struct Scope<'scope, 'env: 'scope> {
    pub(super) comm: &'env Comm,
    pub(super) tickets: Mutex<Vec<Ticket>>,
    pub(super) _p: PhantomData<&'scope mut &'scope ()>,
}

impl std::fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope").field("comm", &self.comm).finish()
    }
}

/// A request of a [`Scope`] (zero-copy; the scope finishes it if leaked).
pub struct ScopedRequest<'scope> {
    pub(super) comm: &'scope Comm,
    pub(super) ticket: Option<Ticket>,
}

impl std::fmt::Debug for ScopedRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopedRequest").finish()
    }
}

impl ScopedRequest<'_> {
    /// Whether the collective finished.
    pub fn test(&mut self) -> bool {
        self.comm.finished(self.ticket.as_ref())
    }

    /// Waits for the collective.
    pub fn wait(mut self) -> Result<()> {
        self.comm.finish(self.ticket.take(), None)
    }
}

impl Drop for ScopedRequest<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            self.comm.abandon(&t);
        }
    }
}

macro_rules! collectives {
    ($(
        $(#[$doc:meta])*
        fn $name:ident / $blocking:ident <$($g:ident: $b:ident),*>
            ($($arg:ident: $ty:ty),*) => |$comm:ident| ($coll:expr, $send:expr, $recv:expr);
    )*) => {
        impl Comm {$(
            $(#[$doc])*
            ///
            /// Staged (the engine works on its own copies; the result is copied
            /// into the receive buffer in `test`/`wait`).
            pub fn $name<'a, $($g: $b + ?Sized),*>(&'a self, $($arg: $ty),*) -> Result<Request<'a>> {
                let $comm = self;
                let _ = $comm;
                let coll = $coll;
                let send: &[u8] = $send;
                let recv: &'a mut [u8] = $recv;
                let t = self.start(coll, send, recv, true)?;
                Ok(self.req(t, Some(recv)))
            }

            /// Blocking form of the non-blocking collective of the same name.
            #[allow(clippy::extra_unused_lifetimes)]
            pub fn $blocking<'a, $($g: $b + ?Sized),*>(&self, $($arg: $ty),*) -> Result<()> {
                let $comm = self;
                let _ = $comm;
                let coll = $coll;
                let send: &[u8] = $send;
                let recv: &mut [u8] = $recv;
                let t = self.start(coll, send, recv, false)?;
                let r = self.gone.note(t.wait(&*self.driver, None));
                if r.is_err() {
                    self.abandon(&t);
                }
                r
            }
        )*}

        impl<'scope, 'env> Scope<'scope, 'env> {$(
            $(#[$doc])*
            ///
            /// Zero-copy: the engine reads and writes the buffers themselves.
            #[inline]
            pub fn $name<'a: 'scope, $($g: $b + ?Sized),*>(&'scope self, $($arg: $ty),*) -> Result<ScopedRequest<'scope>> {
                let $comm = self.comm;
                let _ = $comm;
                let coll = $coll;
                let send: &[u8] = $send;
                let recv: &mut [u8] = $recv;
                let t = self.comm.start(coll, send, recv, false)?;
                lock(&self.tickets).push(t.clone());
                Ok(ScopedRequest { comm: self.comm, ticket: Some(t) })
            }
        )*}
    };
}

fn empty_mut() -> &'static mut [u8] {
    &mut []
}

pub(super) fn per_rank(total: usize, size: usize, what: &'static str) -> Result<usize> {
    if total % size != 0 {
        return Err(Error::Invalid(CollectiveError::CountMismatch {
            what,
            expected: total.next_multiple_of(size),
            got: total,
        }));
    }
    Ok(total / size)
}

collectives! {
    /// Barrier.
    fn ibarrier / barrier <>() => |c| (Collective::Barrier, &[], empty_mut());
    /// Broadcast of `buf` from `root` to every rank.
    fn ibcast / bcast <B: BufMut>(buf: &'a mut B, root: usize) => |c| (
        Collective::Broadcast { root, count: buf.elems()?.len(), dtype: B::Elem::DTYPE },
        &[], bytes_mut(buf.elems_mut()?));
    /// Allgather: `send` of every rank lands in block `rank` of `recv`.
    fn iallgather / allgather <S: Buf, R: BufMut>(send: &'a S, recv: &'a mut R) => |c| (
        Collective::Allgather { count: send.elems()?.len(), dtype: S::Elem::DTYPE },
        bytes(send.elems()?), bytes_mut(recv.elems_mut()?));
    /// Allgatherv: rank `r` contributes `counts[r]` elements, packed in rank order.
    fn iallgatherv / allgatherv <S: Buf, R: BufMut>(send: &'a S, recv: &'a mut R, counts: &[usize]) => |c| (
        Collective::Allgatherv { counts: counts.to_vec(), dtype: S::Elem::DTYPE },
        bytes(send.elems()?), bytes_mut(recv.elems_mut()?));
    /// Alltoall: block `j` of `send` goes to rank `j` (buffers hold `size` blocks).
    fn ialltoall / alltoall <S: Buf, R: BufMut>(send: &'a S, recv: &'a mut R) => |c| (
        Collective::Alltoall { count: per_rank(send.elems()?.len(), c.size, "alltoall send length (a multiple of the size)")?, dtype: S::Elem::DTYPE },
        bytes(send.elems()?), bytes_mut(recv.elems_mut()?));
    /// Alltoallv with per-peer element counts.
    fn ialltoallv / alltoallv <S: Buf, R: BufMut>(send: &'a S, send_counts: &[usize], recv: &'a mut R, recv_counts: &[usize]) => |c| (
        Collective::Alltoallv { send_counts: send_counts.to_vec(), recv_counts: recv_counts.to_vec(), dtype: S::Elem::DTYPE },
        bytes(send.elems()?), bytes_mut(recv.elems_mut()?));
    /// Allreduce of `send` into `recv` on every rank.
    fn iallreduce / allreduce <S: Buf, R: BufMut>(send: &'a S, recv: &'a mut R, op: ReduceOp) => |c| (
        Collective::Allreduce { count: send.elems()?.len(), dtype: S::Elem::DTYPE, op },
        bytes(send.elems()?), bytes_mut(recv.elems_mut()?));
    /// Reduce of `send` into `recv` of `root` (other ranks' `recv` may be empty).
    fn ireduce / reduce <S: Buf, R: BufMut>(send: &'a S, recv: &'a mut R, op: ReduceOp, root: usize) => |c| (
        Collective::Reduce { root, count: send.elems()?.len(), dtype: S::Elem::DTYPE, op },
        bytes(send.elems()?), bytes_mut(recv.elems_mut()?));
    /// Reduce-scatter: block `r` (of `counts[r]` elements) of the reduction lands on rank `r`.
    fn ireduce_scatter / reduce_scatter <S: Buf, R: BufMut>(send: &'a S, recv: &'a mut R, counts: &[usize], op: ReduceOp) => |c| (
        Collective::ReduceScatter { counts: counts.to_vec(), dtype: S::Elem::DTYPE, op },
        bytes(send.elems()?), bytes_mut(recv.elems_mut()?));
    /// Gather of every `send` into `recv` of `root`.
    fn igather / gather <S: Buf, R: BufMut>(send: &'a S, recv: &'a mut R, root: usize) => |c| (
        Collective::Gather { root, count: send.elems()?.len(), dtype: S::Elem::DTYPE },
        bytes(send.elems()?), bytes_mut(recv.elems_mut()?));
    /// Scatter of `root`'s `send` (`size` blocks of `recv.len()`) to every `recv`.
    fn iscatter / scatter <S: Buf, R: BufMut>(send: &'a S, recv: &'a mut R, root: usize) => |c| (
        Collective::Scatter { root, count: recv.elems()?.len(), dtype: S::Elem::DTYPE },
        bytes(send.elems()?), bytes_mut(recv.elems_mut()?));
}
