//! The proxy's access to the ranks' memory: regions located in a rank's
//! process (cross-memory attach), in a mapped `SharedBuf`, or in the op's
//! scratch; copies and reductions between any two of them.

use hpc_collectives::{BufferId, Region};

use super::protocol::Code;
use crate::board;
use crate::shm::ShmRef;

/// The memory of one collective in the proxy: where the rank's buffers are
/// and the op's scratch.
pub(super) struct OpMem {
    /// The rank whose buffers these are.
    pub rank: usize,
    pub send: u64,
    pub send_len: usize,
    pub recv: u64,
    pub recv_len: usize,
    /// The proxy's mappings of the send and receive buffers, where they are
    /// [`SharedBuf`](crate::SharedBuf)s it could map.
    pub send_map: Option<*mut u8>,
    pub recv_map: Option<*mut u8>,
    /// The schedule's scratch (at least its `scratch_bytes` long).
    pub scratch: Vec<u8>,
}

/// Bytes moved per cross-memory call when both ends lie in ranks' memory:
/// each piece goes through the proxy's cache instead of its DRAM.
pub(super) const CHUNK: usize = 128 << 10;

/// A rank's [`SharedBuf`](crate::SharedBuf) mapped into the proxy (the whole
/// memfd); unmapped when dropped.
pub(super) struct Mapping {
    pub ptr: *mut u8,
    pub len: usize,
    /// The rank's descriptor for it, to notice when the rank closed it.
    fd: i32,
}

impl Mapping {
    /// Maps descriptor `r.fd` of process `pid`, if it still is the memfd `r.ino`.
    pub(super) fn open(pid: u32, r: &ShmRef) -> std::io::Result<Mapping> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        // Non-blocking and never a controlling terminal: should the number name
        // something else by now (a FIFO, a device), opening it has no effect.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(format!("/proc/{pid}/fd/{}", r.fd))?;
        let md = f.metadata()?;
        if !md.is_file() || md.ino() != r.ino || md.len() == 0 {
            return Err(std::io::Error::other("the descriptor names another file"));
        }
        let len = md.len() as usize;
        let p = crate::map::map_shared(f.as_raw_fd(), len)?;
        Ok(Mapping {
            ptr: p,
            len,
            fd: r.fd,
        })
    }

    /// Whether descriptor `fd` of `pid` still is the file `ino`.
    pub(super) fn still_open(&self, pid: u32, ino: u64) -> bool {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/{pid}/fd/{}", self.fd)).is_ok_and(|m| m.ino() == ino)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping, made in `open`; dropped only when no op in
        // flight points into it (see `Proxy::unmap_closed`).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Bytes in the proxy's memory: the first `len` of `v` (`v` is initialised
/// throughout and may be longer, from an earlier, larger message).
pub(super) struct Buf {
    pub v: Vec<u8>,
    pub len: usize,
}

impl Buf {
    pub(super) fn bytes(&self) -> &[u8] {
        &self.v[..self.len]
    }
}

/// Where a region's bytes are.
#[derive(Clone, Copy)]
pub(super) enum Loc {
    /// In a rank's memory, at `addr` of process `pid`.
    Rank { pid: u32, addr: u64 },
    /// In the op's scratch, at this offset.
    Scratch(usize),
    /// In a rank's [`SharedBuf`](crate::SharedBuf), through the proxy's own
    /// mapping of it (see [`Proxy::maps`]).
    Mapped(*mut u8),
}

/// Where the bytes to move come from.
#[derive(Clone, Copy)]
pub(super) enum Src<'a> {
    /// The proxy's own memory.
    Bytes(&'a [u8]),
    /// A rank's or the op's scratch.
    Loc(Loc),
}

/// Resolves `r` of `op`, checking it against the buffer's length.
pub(super) fn locate(op: &OpMem, pids: &[u32], r: &Region) -> Result<Loc, Code> {
    let (base, len, map) = match r.buf {
        BufferId::Scratch => {
            return if r.end() <= op.scratch.len() {
                Ok(Loc::Scratch(r.offset))
            } else {
                Err(Code::Failed)
            };
        }
        BufferId::Send => (op.send, op.send_len, op.send_map),
        BufferId::Recv => (op.recv, op.recv_len, op.recv_map),
    };
    if r.end() > len {
        return Err(Code::Failed);
    }
    Ok(match map {
        // Inside the mapping: it holds the whole buffer (checked in `Proxy::map`)
        // and `r` lies inside the buffer (checked above).
        Some(m) => Loc::Mapped(m.wrapping_add(r.offset)),
        None => Loc::Rank {
            pid: pids[op.rank],
            addr: base + r.offset as u64,
        },
    })
}

/// Like [`locate`] for a region to write: the send buffer is only ever read.
pub(super) fn locate_dst(op: &OpMem, pids: &[u32], r: &Region) -> Result<Loc, Code> {
    if r.buf == BufferId::Send {
        return Err(Code::Failed);
    }
    locate(op, pids, r)
}

pub(super) fn rd(pid: u32, addr: u64, dst: &mut [u8]) -> Result<(), Code> {
    // SAFETY: `dst` is a live, initialised buffer of the proxy for the call.
    unsafe { board::cma_read(pid, addr, dst.as_mut_ptr(), dst.len()) }.map_err(|_| Code::Failed)
}

fn wr(pid: u32, src: &[u8], addr: u64) -> Result<(), Code> {
    // SAFETY: `src` is valid for its length; the rank lent its receive buffer for
    // this collective (it waits for DONE or CANCELLED before reusing it).
    unsafe { board::cma_write(pid, src.as_ptr(), addr, src.len()) }.map_err(|_| Code::Failed)
}

/// The address in the proxy's memory of a location that has one (scratch or
/// a mapping); `None` for a rank's memory, reached by cross-memory calls.
fn local(op: &mut OpMem, at: Loc) -> Option<*mut u8> {
    match at {
        // `locate` checked the region against the scratch.
        Loc::Scratch(o) => Some(op.scratch.as_mut_ptr().wrapping_add(o)),
        Loc::Mapped(p) => Some(p),
        Loc::Rank { .. } => None,
    }
}

/// Whether `[a, a + n)` and `[b, b + n)` overlap.
fn overlaps(a: *const u8, b: *const u8, n: usize) -> bool {
    n > 0 && (a as usize) < b as usize + n && (b as usize) < a as usize + n
}

/// Copies `len` bytes from `from` to `to` (the op's receive buffer or scratch):
/// `memcpy` within the proxy's memory, one cross-memory call between it and a
/// rank's, two through `bounce` (piece by piece) from rank to rank.
pub(super) fn copy(
    bounce: &mut [u8],
    op: &mut OpMem,
    from: Src,
    to: Loc,
    len: usize,
) -> Result<(), Code> {
    let src: Option<*const u8> = match from {
        Src::Bytes(b) => Some(b[..len].as_ptr()),
        Src::Loc(at) => local(op, at).map(|p| p as *const u8),
    };
    // In every arm, `locate`/`locate_dst` checked each region against its
    // buffer, scratch or mapping, so each pointer is valid for `len` bytes; a
    // rank does not touch a buffer it lent until the proxy answers.
    match (src, from, local(op, to), to) {
        // SAFETY: see above; `copy` allows overlap.
        (Some(s), _, Some(d), _) => unsafe { std::ptr::copy(s, d, len) },
        (Some(s), _, None, Loc::Rank { pid, addr }) => {
            // SAFETY: see above.
            wr(pid, unsafe { std::slice::from_raw_parts(s, len) }, addr)?
        }
        (None, Src::Loc(Loc::Rank { pid, addr }), Some(d), _) => {
            // SAFETY: see above; the source is in another process.
            rd(pid, addr, unsafe { std::slice::from_raw_parts_mut(d, len) })?
        }
        (
            None,
            Src::Loc(Loc::Rank { pid: sp, addr: sa }),
            None,
            Loc::Rank { pid: dp, addr: da },
        ) => {
            let mut done = 0;
            while done < len {
                let n = (len - done).min(CHUNK);
                let piece = &mut bounce[..n];
                rd(sp, sa + done as u64, piece)?;
                wr(dp, piece, da + done as u64)?;
                done += n;
            }
        }
        _ => unreachable!("a location without an address is a rank's"),
    }
    Ok(())
}

fn apply(
    rop: hpc_collectives::ReduceOp,
    dtype: hpc_collectives::DataType,
    a: &[u8],
    b: &mut [u8],
) -> Result<(), Code> {
    hpc_collectives::apply_reduce(rop, dtype, a, b).map_err(|_| Code::Failed)
}

/// `dst = src ⊕ dst` over `len` bytes, where either may lie in a rank's memory
/// (read and written back piece by piece through `bounce`) or in the proxy's
/// (scratch, a mapping: reduced in place).
pub(super) fn reduce(
    bounce: &mut [u8],
    op: &mut OpMem,
    rop: hpc_collectives::ReduceOp,
    dtype: hpc_collectives::DataType,
    src: Loc,
    dst: Loc,
    len: usize,
) -> Result<(), Code> {
    let (ba, bb) = bounce.split_at_mut(CHUNK);
    let (sp, dp) = (local(op, src), local(op, dst));
    if let (Some(s), Some(d)) = (sp, dp) {
        // Regions of one step never overlap; a schedule where they do is refused
        // rather than reduced through aliased slices.
        if overlaps(s, d, len) {
            return Err(Code::Failed);
        }
    }
    let mut done = 0;
    while done < len {
        let n = (len - done).min(CHUNK);
        // The slices below: `locate`/`locate_dst` checked both regions against
        // their buffers, and they do not overlap (checked above).
        let a: &[u8] = match (sp, src) {
            // SAFETY: see above.
            (Some(s), _) => unsafe { std::slice::from_raw_parts(s.add(done), n) },
            (None, Loc::Rank { pid, addr }) => {
                rd(pid, addr + done as u64, &mut ba[..n])?;
                &ba[..n]
            }
            _ => unreachable!("a location without an address is a rank's"),
        };
        match (dp, dst) {
            // SAFETY: see above.
            (Some(d), _) => apply(rop, dtype, a, unsafe {
                std::slice::from_raw_parts_mut(d.add(done), n)
            })?,
            (None, Loc::Rank { pid, addr }) => {
                let b = &mut bb[..n];
                rd(pid, addr + done as u64, b)?;
                apply(rop, dtype, a, b)?;
                wr(pid, b, addr + done as u64)?;
            }
            _ => unreachable!("a location without an address is a rank's"),
        }
        done += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_a_shared_buffer_only_while_it_is_the_same_file() {
        let mut b = crate::SharedBuf::<u8>::new(3 * 4096 + 5).unwrap();
        let r = crate::shm::lookup(b.as_ptr(), b.len()).unwrap();
        let pid = std::process::id();
        let m = Mapping::open(pid, &r).unwrap();
        assert!(m.len >= b.len());
        // Both mappings show the same pages.
        b[4096] = 42;
        // SAFETY: inside the mapping, which this test owns.
        assert_eq!(unsafe { *m.ptr.add(4096) }, 42);
        // SAFETY: as above.
        unsafe { *m.ptr.add(3 * 4096 + 4) = 7 };
        assert_eq!(b[3 * 4096 + 4], 7);
        assert!(m.still_open(pid, r.ino));
        // A descriptor that names another file is not mapped.
        let wrong = ShmRef {
            ino: r.ino + 1,
            ..r
        };
        assert!(Mapping::open(pid, &wrong).is_err());
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        use std::os::fd::AsRawFd;
        let other = ShmRef {
            fd: f.as_raw_fd(),
            ..r
        };
        assert!(Mapping::open(pid, &other).is_err());
        // Once the rank closed it, the proxy notices; its own mapping stays valid.
        drop(b);
        assert!(!m.still_open(pid, r.ino));
        // SAFETY: the proxy's mapping keeps the pages.
        assert_eq!(unsafe { *m.ptr.add(4096) }, 42);
    }
}
