//! Buffers in shared memory that the `Proxy` engine maps into its own address
//! space: the "registered memory" of the proxy.
//!
//! The proxy reaches an ordinary buffer (a `Vec`, a slice, an `ndarray`
//! array) with cross-memory attach: one `process_vm_readv`/`process_vm_writev`
//! system call per piece, at the kernel's copy rate, and a rank-to-rank byte
//! crosses the proxy twice (read into its cache, written out). A
//! [`SharedBuf`] lives in a `memfd` that the proxy maps once (the first
//! collective that uses it) and keeps mapped, as an RDMA library keeps a
//! registration cache: from then on the proxy moves its bytes with `memcpy`
//! and reduces them in place, and a byte from one `SharedBuf` to another
//! crosses once. Every engine accepts a `SharedBuf` like any other buffer; only
//! the proxy treats it differently, and only where the collective works on the
//! caller's buffers: the blocking collectives and `Comm::scope` (in `hpc-comm`)
//! (the plain non-blocking requests work on staged copies).
//!
//! An application names it `hpc_comm::SharedBuf` (a re-export):
//!
//! ```
//! use hpc_board::shm::SharedBuf;
//! let mut b = SharedBuf::<f32>::new(1024)?;
//! b[3] = 1.5;
//! assert_eq!(b.iter().sum::<f32>(), 1.5);
//! # Ok::<(), hpc_board::Error>(())
//! ```
//!
//! The proxy finds the memfd through `/proc/PID/fd/FD` of the rank and checks
//! that it is the same file (its inode) before it maps it, so a descriptor
//! number reused for another file is never mapped in its place; a buffer it
//! cannot map (another user's proxy, a hardened `/proc`) is reached with
//! cross-memory attach as before. It drops its mapping once the rank closed
//! the memfd (checked every 20 ms) and no collective in flight uses it. Since
//! the proxy keeps its own mapping, the pages outlive a `SharedBuf` that was
//! dropped while the proxy still wrote to it.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsFd, AsRawFd};
use std::ptr::NonNull;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::buf::Elem;
use crate::error::{Error, Result};
use crate::map::map_shared;

/// A region of a [`SharedBuf`] as the proxy needs it: the rank's descriptor
/// number, the file's inode, and the offset of the buffer in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShmRef {
    /// The file's descriptor number in the rank's process.
    pub fd: i32,
    /// The file's inode (a check that the descriptor is still that file).
    pub ino: u64,
    /// The buffer's offset in the file.
    pub off: u64,
}

struct Registered {
    len: usize,
    fd: i32,
    ino: u64,
}

/// The live `SharedBuf`s of this process, by start address.
static REGISTRY: Mutex<BTreeMap<usize, Registered>> = Mutex::new(BTreeMap::new());

fn registry() -> std::sync::MutexGuard<'static, BTreeMap<usize, Registered>> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// The `SharedBuf` region holding `len` bytes at `addr`, if there is one.
pub fn lookup(addr: *const u8, len: usize) -> Option<ShmRef> {
    if len == 0 {
        return None;
    }
    let addr = addr as usize;
    let reg = registry();
    let (&base, r) = reg.range(..=addr).next_back()?;
    (addr + len <= base + r.len).then(|| ShmRef {
        fd: r.fd,
        ino: r.ino,
        off: (addr - base) as u64,
    })
}

/// A zero-initialised buffer of `T` in shared memory, which the `Proxy`
/// engine maps instead of copying through the kernel (see the
/// [module documentation](self)). It dereferences to `[T]` and is accepted
/// wherever a buffer is.
pub struct SharedBuf<T: Elem> {
    ptr: NonNull<T>,
    len: usize,
    /// The memfd; `None` for an empty buffer (nothing mapped).
    file: Option<std::fs::File>,
}

// SAFETY: a SharedBuf owns its mapping like a Vec owns its allocation; access
// goes through &self/&mut self.
unsafe impl<T: Elem + Send> Send for SharedBuf<T> {}
// SAFETY: as above; shared references only read.
unsafe impl<T: Elem + Sync> Sync for SharedBuf<T> {}

impl<T: Elem> SharedBuf<T> {
    /// `len` zeroed elements in a new memfd. More bytes than the memory
    /// available (`MemAvailable`) are refused, naming the size, as
    /// `Comm::registered_buf` refuses them: the memfd's pages are made only
    /// when touched, so a buffer of 64 TiB was made on a machine of 24 GB,
    /// and its first copy would have ended the process.
    pub fn new(len: usize) -> Result<SharedBuf<T>> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::transport(format!("{len} elements overflow")))?;
        if let Some(available) = hpc_io::read::mem_available().filter(|&a| bytes as u64 > a) {
            return Err(Error::Unsupported(format!(
                "a shared buffer of {len} elements ({bytes} bytes) is more than the \
                 {available} bytes of memory available (MemAvailable)"
            )));
        }
        if bytes == 0 {
            return Ok(SharedBuf {
                ptr: NonNull::dangling(),
                len,
                file: None,
            });
        }
        let err = |what: &'static str| move |e: std::io::Error| Error::transport_from(what, e);
        let file = std::fs::File::from(
            rustix::fs::memfd_create(c"hpc-coll-buf", rustix::fs::MemfdFlags::CLOEXEC)
                .map_err(|e| err("memfd_create")(e.into()))?,
        );
        file.set_len(bytes as u64)
            .map_err(err("sizing the shared buffer"))?;
        let ino = std::os::unix::fs::MetadataExt::ino(
            &file.metadata().map_err(err("fstat of the shared buffer"))?,
        );
        let p = map_shared(file.as_fd(), bytes).map_err(err("mapping the shared buffer"))?;
        registry().insert(
            p as usize,
            Registered {
                len: bytes,
                fd: file.as_raw_fd(),
                ino,
            },
        );
        Ok(SharedBuf {
            // mmap returns page-aligned memory, aligned for any primitive T.
            ptr: NonNull::new(p.cast()).expect("mmap returned a null mapping"),
            len,
            file: Some(file),
        })
    }

    /// A copy of `s` in shared memory.
    pub fn from_slice(s: &[T]) -> Result<SharedBuf<T>> {
        let mut b = SharedBuf::new(s.len())?;
        b.copy_from_slice(s);
        Ok(b)
    }
}

impl<T: Elem> Drop for SharedBuf<T> {
    fn drop(&mut self) {
        if self.file.is_some() {
            registry().remove(&(self.ptr.as_ptr() as usize));
            // SAFETY: our own mapping of `len` elements, made in `new`; no
            // reference into it outlives `self`.
            // An unmap that fails leaves the mapping in place: nothing to undo.
            let _ = unsafe {
                rustix::mm::munmap(
                    self.ptr.as_ptr().cast(),
                    self.len * std::mem::size_of::<T>(),
                )
            };
        }
    }
}

impl<T: Elem> Deref for SharedBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` is valid for `len` initialised elements (zeroed memory is
        // a valid `T`, an `Elem`), or dangling with `len == 0`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Elem> DerefMut for SharedBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Elem + std::fmt::Debug> std::fmt::Debug for SharedBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

crate::slice_buf!(SharedBuf<T>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_writable_and_registered_while_alive() {
        let mut b = SharedBuf::<u64>::new(1000).unwrap();
        assert!(b.iter().all(|&x| x == 0));
        b[999] = 7;
        assert_eq!(b[999], 7);
        let p = b.as_ptr() as *const u8;
        let r = lookup(p, 8000).expect("registered");
        assert_eq!(r.off, 0);
        // A sub-slice is found with its offset; one that runs past the end is not.
        // SAFETY: inside the buffer.
        let r2 = lookup(unsafe { p.add(80) }, 800).expect("inside");
        assert_eq!((r2.fd, r2.ino, r2.off), (r.fd, r.ino, 80));
        // SAFETY: as above (the pointer only, not dereferenced).
        assert!(lookup(unsafe { p.add(80) }, 8000).is_none());
        assert!(lookup(p, 0).is_none());
        let v = [0u8; 64];
        assert!(lookup(v.as_ptr(), 64).is_none());
        drop(b);
        assert!(
            lookup(p, 8).is_none(),
            "a dropped buffer is no longer registered"
        );
    }

    #[test]
    fn empty_and_copied_buffers() {
        let e = SharedBuf::<f32>::new(0).unwrap();
        assert!(e.is_empty());
        let b = SharedBuf::from_slice(&[1.0f64, 2.0, 3.0]).unwrap();
        assert_eq!(&b[..], &[1.0, 2.0, 3.0]);
        assert_eq!(format!("{b:?}"), "[1.0, 2.0, 3.0]");
        assert!(SharedBuf::<u64>::new(usize::MAX / 4).is_err());
    }

    /// A buffer of 64 TiB was made on a machine of 24 GB (the memfd's pages
    /// are made when touched), where `Comm::registered_buf` refuses one.
    #[test]
    fn a_buffer_beyond_the_memory_available_is_refused_by_its_size() {
        let Some(available) = hpc_io::read::mem_available() else {
            return;
        };
        let len = usize::try_from(available).unwrap().saturating_add(1 << 20);
        let e = SharedBuf::<u8>::new(len).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{len} elements")) && e.contains("MemAvailable"),
            "{e}"
        );
        assert!(SharedBuf::<u8>::new(1 << 46).is_err());
    }
}
