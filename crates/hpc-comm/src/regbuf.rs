//! [`RegisteredBuf`]: an application buffer the engine reaches without a copy
//! of the rank's: memory registered with the link to a DPU-placed proxy.

use std::sync::Arc;

use hpc_rdma::Region;

use hpc_board::Elem;

/// A buffer of `T`s from [`Comm::registered_buf`](crate::Comm::registered_buf),
/// zeroed, dereferencing to `[T]` and accepted by every engine.
///
/// With the `Proxy` engine in DPU placement it lies in memory registered with
/// the transport to the proxy, which reads it with RMA get and writes results
/// into it with RMA put in place; a collective on other buffers is first
/// copied into registered memory by the rank and its result copied out (as
/// an RDMA application registers its buffers once and keeps the registration,
/// rather than copying through a registered bounce buffer). In place only
/// where the collective works on the caller's buffers (blocking collectives
/// and [`Comm::scope`](crate::Comm::scope)); a plain non-blocking request works
/// on copies, whatever the buffer. With every other engine it is an ordinary
/// allocation.
pub struct RegisteredBuf<T: Elem> {
    mem: Mem<T>,
    len: usize,
}

enum Mem<T> {
    Region(Arc<Region>),
    Heap(Vec<T>),
}

impl<T: Elem> RegisteredBuf<T> {
    /// `len` elements at the start of `region` (zeroed, at least that long).
    pub(crate) fn in_region(region: Arc<Region>, len: usize) -> RegisteredBuf<T> {
        assert!(region.len() >= len * std::mem::size_of::<T>());
        RegisteredBuf {
            mem: Mem::Region(region),
            len,
        }
    }

    /// `len` zeroed elements of ordinary memory.
    pub(crate) fn on_heap(len: usize) -> RegisteredBuf<T> {
        // SAFETY: `Elem` types are plain data for which every bit pattern, all
        // zeros included, is a value.
        let zero: T = unsafe { std::mem::zeroed() };
        RegisteredBuf {
            mem: Mem::Heap(vec![zero; len]),
            len,
        }
    }

    /// Whether it lies in registered memory (DPU placement) rather than on the
    /// heap.
    pub fn is_registered(&self) -> bool {
        matches!(self.mem, Mem::Region(_))
    }
}

impl<T: Elem> std::ops::Deref for RegisteredBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.mem {
            // SAFETY: the region holds `len` elements (checked in `in_region`), is
            // page-aligned (so aligned for `T`) and lives as long as `self`. Only
            // this rank's proxy writes into it, and only during a collective
            // that borrows this buffer mutably (the borrow excludes this shared
            // one), or after one was cancelled without the proxy's confirmation,
            // which aborts the process (`Client::cancel`).
            Mem::Region(r) => unsafe { std::slice::from_raw_parts(r.as_ptr().cast(), self.len) },
            Mem::Heap(v) => v,
        }
    }
}

impl<T: Elem> std::ops::DerefMut for RegisteredBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.mem {
            // SAFETY: as for `deref`; `&mut self` is the only access.
            Mem::Region(r) => unsafe {
                std::slice::from_raw_parts_mut(r.as_ptr().cast(), self.len)
            },
            Mem::Heap(v) => v,
        }
    }
}

hpc_board::slice_buf!(RegisteredBuf<T>);

impl<T: Elem> std::fmt::Debug for RegisteredBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredBuf")
            .field("len", &self.len)
            .field("registered", &self.is_registered())
            .finish()
    }
}
