//! The cross-node path: "move these host bytes to peer p", over `hpc-rdma`.
//!
//! Kept behind a two-method trait so that the native backend does not depend
//! on the transport's full API.

use std::sync::Arc;
use std::sync::Mutex;

use cudarc::driver::{sys, CudaContext};
use hpc_rdma::{OpId, Transport};

use super::{driver_err, GpuError, Result};

/// Host bytes to and from a peer rank.
pub(crate) trait HostLink: Send {
    /// Starts sending `data` to `peer` with `tag`.
    fn send(&self, peer: usize, tag: u64, data: Vec<u8>) -> Result<()>;
    /// Receives the message `peer` sent with `tag`.
    fn recv(&self, peer: usize, tag: u64) -> Result<Vec<u8>>;
    /// Waits until every send has been handed off.
    fn flush(&self) -> Result<()>;
}

/// [`HostLink`] over an `hpc-rdma` transport.
pub(crate) struct RdmaLink {
    t: Transport,
    pending: Mutex<Vec<OpId>>,
}

impl RdmaLink {
    pub(crate) fn new(t: Transport) -> Self {
        Self {
            t,
            pending: Mutex::new(Vec::new()),
        }
    }
}

impl HostLink for RdmaLink {
    fn send(&self, peer: usize, tag: u64, data: Vec<u8>) -> Result<()> {
        let op = self.t.send(peer, tag, data)?;
        self.pending
            .lock()
            .map_err(|_| GpuError::Plan("poisoned lock".into()))?
            .push(op);
        Ok(())
    }

    fn recv(&self, peer: usize, tag: u64) -> Result<Vec<u8>> {
        let op = self.t.recv(peer, tag)?;
        Ok(self.t.wait(op)?.into_bytes())
    }

    fn flush(&self) -> Result<()> {
        let ops = std::mem::take(
            &mut *self
                .pending
                .lock()
                .map_err(|_| GpuError::Plan("poisoned lock".into()))?,
        );
        self.t.wait_all(&ops)?;
        Ok(())
    }
}

/// Copies `len` device bytes at `src` into a new host vector, through a
/// page-locked staging buffer.
pub(crate) fn download(
    ctx: &Arc<CudaContext>,
    src: sys::CUdeviceptr,
    len: usize,
) -> Result<Vec<u8>> {
    let stream = ctx.default_stream();
    // SAFETY: pinned host memory of `len` bytes; fully written by the copy below
    // before it is read.
    let mut pinned = unsafe { ctx.alloc_pinned::<u8>(len) }.map_err(driver_err)?;
    let host = pinned.as_mut_ptr().map_err(driver_err)?;
    // SAFETY: `src` is `len` readable device bytes (a plan range); `host` is `len`
    // writable pinned bytes; the copy is synchronous.
    unsafe { sys::cuMemcpyDtoH_v2(host.cast(), src, len) }
        .result()
        .map_err(driver_err)?;
    drop(stream);
    Ok(pinned.as_slice().map_err(driver_err)?.to_vec())
}

/// Copies host `data` to device bytes at `dst` through a page-locked buffer.
pub(crate) fn upload(ctx: &Arc<CudaContext>, dst: sys::CUdeviceptr, data: &[u8]) -> Result<()> {
    // SAFETY: pinned host memory of `data.len()` bytes, written before it is read.
    let mut pinned = unsafe { ctx.alloc_pinned::<u8>(data.len()) }.map_err(driver_err)?;
    pinned
        .as_mut_slice()
        .map_err(driver_err)?
        .copy_from_slice(data);
    let host = pinned.as_ptr().map_err(driver_err)?;
    // SAFETY: `dst` is `data.len()` writable device bytes of this context (a plan
    // range of the window); the copy is synchronous.
    unsafe { sys::cuMemcpyHtoD_v2(dst, host.cast(), data.len()) }
        .result()
        .map_err(driver_err)?;
    Ok(())
}
