//! Registered memory: [`Region`] (local) and [`RemoteKey`] (what peers receive).
//!
//! Every region is a shared-memory mapping of its own `memfd` (mode 0600, never in
//! any file system), so that a peer on the same node can map it and put/get with one
//! `memcpy`, and so that the TCP and verbs backends can write into it from their
//! progress threads or the HCA. The first page of the mapping is a header holding the
//! region's 64-bit random key; dropping the last handle to a region zeroes the key, so
//! peers that still map it see their key go stale and get [`Error::BadKey`].

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{check_bounds, Error, Result};

/// Bytes before the data of every region mapping (holds the key).
pub(crate) const HEADER: usize = 4096;
const MEMFD_NAME: &str = "hpc-rdma";

/// One shared mapping of a memfd: header page + data.
/// The bytes mapped for a region of `data_len` bytes: the header page and
/// the data rounded up to pages; `None` beyond what a mapping may hold
/// (`isize::MAX` bytes).
fn mapped_bytes(data_len: u64) -> Option<usize> {
    let total = data_len
        .checked_next_multiple_of(4096)?
        .checked_add(HEADER as u64)?;
    usize::try_from(total)
        .ok()
        .filter(|&t| t <= isize::MAX as usize)
}

pub(crate) struct Mapping {
    base: *mut u8,
    total: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is plain shared memory owned by this value; all access goes through
// raw pointers with bounds checked by the callers, and concurrent access from other
// threads/processes is the documented RDMA model (no Rust references are formed over it
// except in `Region::as_slice`, which is `unsafe`).
unsafe impl Send for Mapping {}
// SAFETY: see `Send`; `&Mapping` only gives out raw pointers and atomics.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// A new zeroed mapping with `data_len` usable bytes.
    pub(crate) fn create(data_len: usize) -> Result<Mapping> {
        let total = mapped_bytes(data_len as u64).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "a region of {data_len} bytes: more than the address space holds"
            ))
        })?;
        // More than the memory available is refused by its size, as
        // `SharedBuf::new` and `Comm::registered_buf` refuse it: the memfd's
        // pages are made only when touched, so a region of 64 TiB was
        // registered on a machine of 24 GB, and its first access would have
        // ended the process (or a peer's put into it).
        if let Some(available) = hpc_io::read::mem_available().filter(|&a| total as u64 > a) {
            return Err(Error::InvalidArgument(format!(
                "a region of {data_len} bytes is more than the {available} bytes of memory \
                 available (MemAvailable)"
            )));
        }
        // A failure says which region could not be made ("Cannot allocate
        // memory" alone does not name the length asked for).
        let what = |e: rustix::io::Errno| {
            let e = std::io::Error::from(e);
            Error::from(std::io::Error::new(
                e.kind(),
                format!("registering a region of {data_len} bytes: {e}"),
            ))
        };
        let fd =
            rustix::fs::memfd_create(MEMFD_NAME, rustix::fs::MemfdFlags::CLOEXEC).map_err(what)?;
        rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o600))
            .and_then(|()| rustix::fs::ftruncate(&fd, total as u64))
            .map_err(what)?;
        Mapping::map(fd, total).map_err(|e| match e {
            Error::Io(e) => Error::from(std::io::Error::new(
                e.kind(),
                format!("mapping a region of {data_len} bytes: {e}"),
            )),
            e => e,
        })
    }

    /// Maps the region `fd` of process `pid` (same node, same user), checking that it is
    /// one of ours and has the expected size.
    pub(crate) fn open_remote(pid: u32, fd: i32, data_len: u64) -> Result<Mapping> {
        let path = format!("/proc/{pid}/fd/{fd}");
        let link = std::fs::read_link(&path)
            .map_err(|e| Error::BadKey(format!("{path}: {e} (region gone?)")))?;
        if !link.to_string_lossy().starts_with("/memfd:hpc-rdma") {
            return Err(Error::BadKey(format!(
                "{path} is {} and not a registered region (stale key?)",
                hpc_io::message::path(&link)
            )));
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| Error::BadKey(format!("{path}: {e}")))?;
        let total = file.metadata()?.len();
        let want = mapped_bytes(data_len).ok_or_else(|| {
            Error::BadKey(format!(
                "{path}: the key says {data_len} bytes, more than a region may hold"
            ))
        })? as u64;
        if total != want {
            return Err(Error::BadKey(format!(
                "{path} has {total} bytes, the key says {want} (stale key?)"
            )));
        }
        Mapping::map(OwnedFd::from(file), total as usize)
    }

    fn map(fd: OwnedFd, total: usize) -> Result<Mapping> {
        // SAFETY: a new mapping of a descriptor we own, where the kernel chooses (so
        // it aliases nothing), length = its size, shared read/write.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                total,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                &fd,
                0,
            )
        }
        .map_err(std::io::Error::from)?;
        Ok(Mapping {
            base: p.cast(),
            total,
            fd,
        })
    }

    /// The key slot in the header page.
    pub(crate) fn key_slot(&self) -> &AtomicU64 {
        // SAFETY: `base` is page aligned and the header page is mapped for the lifetime of
        // `self`; AtomicU64 has the size and alignment of u64.
        unsafe { &*(self.base as *const AtomicU64) }
    }

    /// Start of the data bytes.
    pub(crate) fn data(&self) -> *mut u8 {
        // SAFETY: HEADER <= total, so the result is within (or one past) the mapping.
        unsafe { self.base.add(HEADER) }
    }

    /// Usable data bytes (rounded up to pages).
    pub(crate) fn data_capacity(&self) -> usize {
        self.total - HEADER
    }

    pub(crate) fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // An unmap that fails leaves the mapping in place: nothing to undo.
        // SAFETY: `base`/`total` are exactly what mmap returned; nothing refers to the
        // mapping any more (we are its only owner).
        let _ = unsafe { rustix::mm::munmap(self.base.cast(), self.total) };
    }
}

/// Copies `len` bytes so that, when the destination's last 8 bytes are 8-aligned, they
/// are written last with a release store: a reader that sees them (with
/// [`Region::load_u64`]) sees the whole copy. Ends with a release fence, so copies made
/// one after the other by one thread become visible in that order.
///
/// # Safety
/// `src` must be readable and `dst` writable for `len` bytes, and they must not overlap.
pub(crate) unsafe fn copy_in_order(dst: *mut u8, src: *const u8, len: usize) {
    if len == 0 {
        fence(Ordering::Release);
        return;
    }
    // SAFETY: the caller guarantees both ranges are valid for `len` bytes and disjoint;
    // `last` is 8-aligned when used as an AtomicU64 (checked) and lies in `dst`.
    unsafe {
        let last = dst.add(len - 8.min(len));
        if len >= 8 && (last as usize) % 8 == 0 {
            std::ptr::copy_nonoverlapping(src, dst, len - 8);
            let tail = std::ptr::read_unaligned(src.add(len - 8) as *const u64);
            fence(Ordering::Release);
            (*(last as *const AtomicU64)).store(tail, Ordering::Release);
        } else {
            std::ptr::copy_nonoverlapping(src, dst, len);
            fence(Ordering::Release);
        }
    }
}

pub(crate) struct RegionInner {
    pub(crate) id: u32,
    pub(crate) key: u64,
    pub(crate) rank: usize,
    pub(crate) len: usize,
    pub(crate) map: Mapping,
    /// The verbs rkey once registered with an HCA (0 otherwise).
    pub(crate) rkey: AtomicU32,
    /// The libfabric memory key once registered with a provider (0 otherwise).
    pub(crate) fkey: AtomicU64,
    /// Run before the memory is unmapped: backends that registered the region with a
    /// device or library deregister it here, so nothing can write into the memory
    /// once it is gone.
    pub(crate) on_drop: std::sync::Mutex<Vec<Box<dyn FnOnce() + Send>>>,
}

impl Drop for RegionInner {
    fn drop(&mut self) {
        // Peers holding the key see it go stale.
        self.map.key_slot().store(0, Ordering::Release);
        let hooks = std::mem::take(self.on_drop.get_mut().unwrap_or_else(|e| e.into_inner()));
        for hook in hooks {
            hook();
        }
    }
}

/// Memory registered with a [`crate::Transport`]: peers may put into it and get from
/// it through its [`RemoteKey`].
///
/// A `Region` is a cheap handle (`Clone` shares the same memory). The memory lives as
/// long as any handle does, including the handles that in-flight operations hold, so
/// dropping your handle (or leaking an operation) can never let the transport write
/// into freed memory. When the last handle is dropped the region is deregistered:
/// its key goes stale and peers' put/get fail with [`Error::BadKey`].
///
/// Peers write into the region at any time, so the region does not hand out `&[u8]`
/// safely: read and write through [`Region::read`], [`Region::write`],
/// [`Region::load_u64`] and [`Region::to_vec`], or use the `unsafe`
/// [`Region::as_slice`] when the protocol guarantees quiet memory.
#[derive(Clone)]
pub struct Region {
    pub(crate) inner: Arc<RegionInner>,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("rank", &self.inner.rank)
            .field("id", &self.inner.id)
            .field("len", &self.inner.len)
            .finish()
    }
}

impl Region {
    pub(crate) fn new(rank: usize, id: u32, len: usize) -> Result<Region> {
        let map = Mapping::create(len)?;
        let mut key = hpc_runtime::random_u64()?;
        if key == 0 {
            key = 1;
        }
        map.key_slot().store(key, Ordering::Release);
        Ok(Region {
            inner: Arc::new(RegionInner {
                id,
                key,
                rank,
                len,
                map,
                rkey: AtomicU32::new(0),
                fkey: AtomicU64::new(0),
                on_drop: std::sync::Mutex::new(Vec::new()),
            }),
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The key peers need to put into or get from this region; send its
    /// [`RemoteKey::to_bytes`] to them (e.g. through `World::allgather`).
    pub fn remote_key(&self) -> RemoteKey {
        let mut k = RemoteKey {
            rank: self.inner.rank as u32,
            id: self.inner.id,
            pid: std::process::id(),
            fd: self.inner.map.raw_fd(),
            rkey: self.inner.rkey.load(Ordering::Relaxed),
            fkey: self.inner.fkey.load(Ordering::Relaxed),
            key: self.inner.key,
            len: self.inner.len as u64,
            addr: self.inner.map.data() as u64,
            check: 0,
            intact: true,
        };
        k.check = k.checksum();
        k
    }

    /// Raw pointer to the first byte (for backends and for zero-copy users).
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.map.data()
    }

    /// Copies bytes out of the region.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        check_bounds(offset as u64, out.len() as u64, self.len() as u64)?;
        // SAFETY: bounds checked above; the mapping lives as long as `self`; `out` is a
        // distinct Rust buffer so they do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(self.as_ptr().add(offset), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    /// Copies bytes into the region (last 8 bytes last, as a put does).
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        check_bounds(offset as u64, data.len() as u64, self.len() as u64)?;
        // SAFETY: bounds checked above; `data` is a distinct Rust buffer.
        unsafe { copy_in_order(self.as_ptr().add(offset), data.as_ptr(), data.len()) };
        Ok(())
    }

    /// The whole region as a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len()];
        self.read(0, &mut v).expect("whole region is in bounds");
        v
    }

    /// Fills the region with `byte`.
    pub fn fill(&self, byte: u8) {
        // SAFETY: the data area is writable for `len` bytes.
        unsafe { std::ptr::write_bytes(self.as_ptr(), byte, self.len()) };
        fence(Ordering::Release);
    }

    fn atomic_at(&self, offset: usize) -> Result<&AtomicU64> {
        check_bounds(offset as u64, 8, self.len() as u64)?;
        if offset % 8 != 0 {
            return Err(Error::InvalidArgument(format!(
                "offset {offset} is not 8-byte aligned"
            )));
        }
        // SAFETY: in bounds and 8-aligned (the data area is page aligned); the memory
        // lives as long as `self`, and all concurrent writers use atomic or byte copies.
        Ok(unsafe { &*(self.as_ptr().add(offset) as *const AtomicU64) })
    }

    /// Atomically reads the 8 bytes at `offset` (8-aligned) with acquire ordering:
    /// the way to poll for the last 8 bytes of a put (see [`crate::Transport::put`]).
    pub fn load_u64(&self, offset: usize) -> Result<u64> {
        Ok(u64::from_le(
            self.atomic_at(offset)?.load(Ordering::Acquire),
        ))
    }

    /// Atomically writes the 8 bytes at `offset` (8-aligned) with release ordering.
    pub fn store_u64(&self, offset: usize, value: u64) -> Result<()> {
        self.atomic_at(offset)?
            .store(value.to_le(), Ordering::Release);
        Ok(())
    }

    /// The region's bytes as a slice.
    ///
    /// # Safety
    /// No peer and no in-flight operation may write into the region while the slice
    /// lives (e.g. the protocol's last message from every writer has been received).
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the caller guarantees the memory is quiet; pointer/len are valid.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len()) }
    }

    pub(crate) fn id(&self) -> u32 {
        self.inner.id
    }
}

/// Size of [`RemoteKey::to_bytes`].
pub const REMOTE_KEY_BYTES: usize = 64;
const KEY_MAGIC: u32 = 0x4b52_4831; // "1HRK"

/// What a peer needs to access a [`Region`]: owner rank, region id, length, the random
/// key that proves it was handed out by the owner, and backend addressing (pid and fd
/// for shared memory, address and rkey for verbs, address and memory key for
/// libfabric). Serialize with
/// [`RemoteKey::to_bytes`] and exchange through `World::allgather` or a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteKey {
    pub(crate) rank: u32,
    pub(crate) id: u32,
    pub(crate) pid: u32,
    pub(crate) fd: i32,
    pub(crate) rkey: u32,
    pub(crate) fkey: u64,
    pub(crate) key: u64,
    /// Checksum of the other fields (see [`RemoteKey::is_intact`]).
    pub(crate) check: u32,
    pub(crate) len: u64,
    pub(crate) addr: u64,
    /// Whether `check` matched the other fields when the key was made or
    /// decoded: the checksum is computed once per key, not on every access
    /// (a put or get checks this word).
    pub(crate) intact: bool,
}

impl RemoteKey {
    /// The rank owning the region.
    pub fn rank(&self) -> usize {
        self.rank as usize
    }

    /// The region's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the key's fields are as its owner made them (a checksum over them):
    /// false for a key that was edited or corrupted on the way. Backends whose
    /// hardware or library cannot refuse a bad key without breaking the connection
    /// (libfabric, like an RDMA NIC's remote access error) check it before use.
    pub fn is_intact(&self) -> bool {
        self.intact
    }

    fn checksum(&self) -> u32 {
        let b = self.to_bytes();
        // FNV-1a over every field but the checksum itself.
        b[..56].iter().fold(0x811c_9dc5u32, |h, &x| {
            (h ^ x as u32).wrapping_mul(0x0100_0193)
        })
    }

    /// Fixed-size little-endian encoding.
    pub fn to_bytes(&self) -> [u8; REMOTE_KEY_BYTES] {
        let mut b = [0u8; REMOTE_KEY_BYTES];
        b[0..4].copy_from_slice(&KEY_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.rank.to_le_bytes());
        b[8..12].copy_from_slice(&self.id.to_le_bytes());
        b[12..16].copy_from_slice(&self.pid.to_le_bytes());
        b[16..20].copy_from_slice(&self.fd.to_le_bytes());
        b[20..24].copy_from_slice(&self.rkey.to_le_bytes());
        b[24..32].copy_from_slice(&self.key.to_le_bytes());
        b[32..40].copy_from_slice(&self.len.to_le_bytes());
        b[40..48].copy_from_slice(&self.addr.to_le_bytes());
        b[48..56].copy_from_slice(&self.fkey.to_le_bytes());
        b[56..60].copy_from_slice(&self.check.to_le_bytes());
        b
    }

    /// Decodes [`RemoteKey::to_bytes`]; rejects wrong sizes, magic and zero keys.
    pub fn from_bytes(b: &[u8]) -> Result<RemoteKey> {
        if b.len() != REMOTE_KEY_BYTES {
            return Err(Error::BadKey(format!(
                "{} bytes, expected {REMOTE_KEY_BYTES}",
                b.len()
            )));
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if u32_at(0) != KEY_MAGIC {
            return Err(Error::BadKey("wrong magic".into()));
        }
        let mut k = RemoteKey {
            rank: u32_at(4),
            id: u32_at(8),
            pid: u32_at(12),
            fd: u32_at(16) as i32,
            rkey: u32_at(20),
            key: u64_at(24),
            len: u64_at(32),
            addr: u64_at(40),
            fkey: u64_at(48),
            check: u32_at(56),
            intact: false,
        };
        k.intact = k.check == k.checksum();
        if k.key == 0 {
            return Err(Error::BadKey("zero key".into()));
        }
        Ok(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn region_read_write_bounds() {
        let r = Region::new(0, 1, 100).unwrap();
        r.write(90, &[7u8; 10]).unwrap();
        assert!(matches!(
            r.write(91, &[7u8; 10]),
            Err(Error::OutOfBounds { .. })
        ));
        assert!(matches!(
            r.read(usize::MAX, &mut [0u8; 2]),
            Err(Error::OutOfBounds { .. })
        ));
        let mut out = [0u8; 10];
        r.read(90, &mut out).unwrap();
        assert_eq!(out, [7u8; 10]);
        assert!(r.load_u64(3).is_err());
        assert!(r.load_u64(96).is_err());
        r.store_u64(88, 0xfeed).unwrap();
        assert_eq!(r.load_u64(88).unwrap(), 0xfeed);
    }

    #[test]
    fn copy_in_order_copies_everything() {
        for len in 0..40 {
            for off in 0..9 {
                let src: Vec<u8> = (0..len as u8).map(|x| x.wrapping_mul(3) + 1).collect();
                let mut dst = vec![0u64; 8]; // aligned backing
                let d = dst.as_mut_ptr() as *mut u8;
                let guard = 64 - off - len.min(64 - off);
                if off + len > 64 {
                    continue;
                }
                // SAFETY: off+len <= 64 bytes of `dst`; src has len bytes.
                unsafe { copy_in_order(d.add(off), src.as_ptr(), len) };
                // SAFETY: reading the 64 bytes of `dst`.
                let bytes = unsafe { std::slice::from_raw_parts(d, 64) };
                assert_eq!(&bytes[off..off + len], &src[..]);
                assert!(bytes[..off].iter().all(|&b| b == 0));
                assert!(bytes[off + len..].iter().all(|&b| b == 0), "{guard}");
            }
        }
    }

    #[test]
    fn dropped_region_key_goes_stale_for_mappers() {
        let r = Region::new(0, 1, 10).unwrap();
        let k = r.remote_key();
        let m = Mapping::open_remote(k.pid, k.fd, k.len).unwrap();
        assert_eq!(m.key_slot().load(Ordering::Acquire), k.key);
        drop(r);
        assert_eq!(m.key_slot().load(Ordering::Acquire), 0);
    }

    #[test]
    fn open_remote_rejects_non_regions() {
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert!(matches!(
            Mapping::open_remote(std::process::id(), f.as_raw_fd(), 10),
            Err(Error::BadKey(_))
        ));
        assert!(Mapping::open_remote(std::process::id(), 9999, 10).is_err());
    }

    proptest! {
        #[test]
        fn remote_key_round_trips(rank: u32, id: u32, pid: u32, fd: i32, rkey: u32, fkey: u64, key in 1u64.., len: u64, addr: u64) {
            let mut k = RemoteKey { rank, id, pid, fd, rkey, fkey, key, len, addr, check: 0, intact: true };
            k.check = k.checksum();
            let back = RemoteKey::from_bytes(&k.to_bytes()).unwrap();
            prop_assert_eq!(back, k);
            prop_assert!(back.is_intact());
            let mut edited = k.to_bytes();
            edited[32] ^= 1;
            prop_assert!(!RemoteKey::from_bytes(&edited).unwrap().is_intact());
        }

        #[test]
        fn remote_key_decoder_never_panics(b in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = RemoteKey::from_bytes(&b);
        }
    }
}
