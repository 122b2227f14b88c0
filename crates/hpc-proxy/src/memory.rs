//! The proxy's access to the ranks' memory: regions located in a rank's
//! process (cross-memory attach), in a mapped `SharedBuf`, or in the op's
//! scratch; copies and reductions between any two of them.

use hpc_collectives::{BufferId, Region};

use crate::protocol::Code;
use hpc_board::board;
use hpc_board::shm::ShmRef;

/// The memory of one collective in the proxy: where the rank's buffers are
/// and the op's scratch.
pub struct OpMem {
    /// The rank whose buffers these are.
    pub rank: usize,
    pub send: u64,
    pub send_len: usize,
    pub recv: u64,
    pub recv_len: usize,
    /// The proxy's mappings of the send and receive buffers, where they are
    /// [`SharedBuf`](hpc_board::shm::SharedBuf)s it could map.
    pub send_map: Option<*mut u8>,
    pub recv_map: Option<*mut u8>,
    /// The schedule's scratch (at least its `scratch_bytes` long).
    pub scratch: Vec<u8>,
}

impl OpMem {
    /// The memory of an op of this process over `send` and `recv`
    /// (cross-memory calls to one's own pid work), with `scratch` bytes of
    /// scratch (a pattern); with `mapped`, the two buffers count as mapped by
    /// the proxy (reached by pointer, as a [`SharedBuf`](hpc_board::shm::SharedBuf) is).
    #[cfg(test)]
    pub fn of_own(send: &[u8], recv: &mut [u8], scratch: usize, mapped: bool) -> OpMem {
        OpMem {
            rank: 0,
            send: send.as_ptr() as u64,
            send_len: send.len(),
            recv: recv.as_mut_ptr() as u64,
            recv_len: recv.len(),
            send_map: mapped.then_some(send.as_ptr().cast_mut()),
            recv_map: mapped.then_some(recv.as_mut_ptr()),
            scratch: vec![0xA5; scratch],
        }
    }
}

/// Bytes moved per cross-memory call when both ends lie in ranks' memory:
/// each piece goes through the proxy's cache instead of its DRAM.
pub const CHUNK: usize = 128 << 10;

/// A rank's [`SharedBuf`](hpc_board::shm::SharedBuf) mapped into the proxy (the whole
/// memfd); unmapped when dropped.
pub struct Mapping {
    pub ptr: *mut u8,
    pub len: usize,
    /// The rank's descriptor for it, to notice when the rank closed it.
    fd: i32,
}

impl Mapping {
    /// Maps descriptor `r.fd` of process `pid`, if it still is the memfd `r.ino`.
    pub fn open(pid: u32, r: &ShmRef) -> std::io::Result<Mapping> {
        use std::os::fd::AsFd;
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
        let p = hpc_board::map::map_shared(f.as_fd(), len)?;
        Ok(Mapping {
            ptr: p,
            len,
            fd: r.fd,
        })
    }

    /// Whether descriptor `fd` of `pid` still is the file `ino`.
    pub fn still_open(&self, pid: u32, ino: u64) -> bool {
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
pub struct Buf {
    pub v: Vec<u8>,
    pub len: usize,
}

impl Buf {
    pub fn bytes(&self) -> &[u8] {
        &self.v[..self.len]
    }
}

/// Where a region's bytes are.
#[derive(Clone, Copy)]
pub enum Loc {
    /// In a rank's memory, at `addr` of process `pid`.
    Rank { pid: u32, addr: u64 },
    /// In the op's scratch, at this offset.
    Scratch(usize),
    /// In a rank's [`SharedBuf`](hpc_board::shm::SharedBuf), through the proxy's own
    /// mapping of it (see `Proxy::maps` in `server.rs`).
    Mapped(*mut u8),
}

/// Where the bytes to move come from.
#[derive(Clone, Copy)]
pub enum Src<'a> {
    /// The proxy's own memory.
    Bytes(&'a [u8]),
    /// A rank's or the op's scratch.
    Loc(Loc),
}

/// Resolves `r` of `op`, checking it against the buffer's length.
pub fn locate(op: &OpMem, pids: &[u32], r: &Region) -> Result<Loc, Code> {
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
pub fn locate_dst(op: &OpMem, pids: &[u32], r: &Region) -> Result<Loc, Code> {
    if r.buf == BufferId::Send {
        return Err(Code::Failed);
    }
    locate(op, pids, r)
}

pub fn rd(pid: u32, addr: u64, dst: &mut [u8]) -> Result<(), Code> {
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
pub fn copy(bounce: &mut [u8], op: &mut OpMem, from: Src, to: Loc, len: usize) -> Result<(), Code> {
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
pub fn reduce(
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

/// `len` bytes set to `fill`, or the allocator's refusal instead of an abort: a
/// collective's size comes from its ranks, and a proxy that aborts takes every
/// collective of its node with it.
pub fn try_filled(len: usize, fill: u8) -> Result<Vec<u8>, std::collections::TryReserveError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)?;
    v.resize(len, fill);
    Ok(v)
}

/// Grows `v` to at least `len` bytes (zeros), or the allocator's refusal.
pub fn try_grow(v: &mut Vec<u8>, len: usize) -> Result<(), std::collections::TryReserveError> {
    if v.len() < len {
        v.try_reserve_exact(len - v.len())?;
        v.resize(len, 0);
    }
    Ok(())
}

/// A buffer of `len` bytes from `pool`, from one large enough where there is
/// one; the allocator's refusal rather than an abort where it must grow.
pub fn take_from(
    pool: &mut Vec<Vec<u8>>,
    len: usize,
) -> Result<Buf, std::collections::TryReserveError> {
    let mut v = match pool.iter().position(|v| v.len() >= len) {
        Some(i) => pool.swap_remove(i),
        None => pool.pop().unwrap_or_default(),
    };
    if let Err(e) = try_grow(&mut v, len) {
        give_to(pool, v);
        return Err(e);
    }
    Ok(Buf { v, len })
}

/// Returns a buffer to `pool` (at most 16 buffers and 256 MiB are kept, so a
/// run of huge collectives does not pin their memory in the proxy for good).
pub fn give_to(pool: &mut Vec<Vec<u8>>, v: Vec<u8>) {
    const MAX_BYTES: usize = 256 << 20;
    let kept: usize = pool.iter().map(Vec::len).sum();
    if pool.len() < 16 && kept + v.len() <= MAX_BYTES {
        pool.push(v);
    }
}

/// Reads the bytes at `at` (of `mem`) into `out`.
pub fn read_loc(mem: &OpMem, at: Loc, out: &mut [u8]) -> Result<(), Code> {
    match at {
        Loc::Rank { pid, addr } => rd(pid, addr, out),
        Loc::Mapped(p) => {
            // SAFETY: `locate` checked that the region lies inside the mapped buffer,
            // which the op's mapping keeps mapped while the op is in the proxy's
            // `ops` (or being retired).
            unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len()) };
            Ok(())
        }
        Loc::Scratch(o) => {
            let src = mem.scratch.get(o..o + out.len()).ok_or(Code::Failed)?;
            out.copy_from_slice(src);
            Ok(())
        }
    }
}

/// The sum of a collective's sizes in the proxy (scratch, staging), `None`
/// where it overflows.
pub fn footprint(sizes: &[usize]) -> Option<u64> {
    sizes
        .iter()
        .try_fold(0u64, |a, &b| a.checked_add(u64::try_from(b).ok()?))
}

/// Why the proxy refused a collective's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Its size overflows.
    Overflow,
    /// `bytes` beside the `held` of the collectives in flight pass the cap.
    OverCap { bytes: u64, held: u64, cap: u64 },
    /// The allocation of `bytes` failed.
    NoMemory { bytes: u64 },
}

impl Refusal {
    /// Why, in words (what a DPU proxy's answer carries).
    pub fn why(&self) -> String {
        match *self {
            Refusal::Overflow => "its size overflows".into(),
            Refusal::OverCap { bytes, held, cap } => format!(
                "{bytes} bytes beside the {held} held for the collectives in flight pass \
                 the proxy's cap of {cap} bytes"
            ),
            Refusal::NoMemory { bytes } => {
                format!("the proxy could not allocate {bytes} bytes (its host is short of memory)")
            }
        }
    }
}

/// The bytes the proxy holds for collectives in flight, against its cap
/// (`HPC_COLL_PROXY_MAX_SCRATCH`).
#[derive(Debug)]
pub struct Budget {
    cap: u64,
    held: u64,
}

impl Budget {
    pub fn new(cap: u64) -> Budget {
        Budget { cap, held: 0 }
    }

    /// The budget of this process's `HPC_COLL_PROXY_MAX_SCRATCH` (a bad value,
    /// which the ranks refuse before they start a proxy, reads as the default).
    pub fn from_env() -> Budget {
        let cap = max_scratch().unwrap_or_else(|e| {
            tracing::warn!("{e}; the proxy uses its default cap");
            default_max_scratch()
        });
        tracing::debug!(cap, "proxy: memory cap for collectives in flight");
        Budget::new(cap)
    }

    /// Takes `bytes` (a collective's memory, `None` where its size overflowed)
    /// if they fit beside what is held.
    pub fn admit(&mut self, bytes: Option<u64>) -> Result<u64, Refusal> {
        let bytes = bytes.ok_or(Refusal::Overflow)?;
        match self.held.checked_add(bytes) {
            Some(t) if t <= self.cap => {
                self.held = t;
                Ok(bytes)
            }
            _ => Err(Refusal::OverCap {
                bytes,
                held: self.held,
                cap: self.cap,
            }),
        }
    }

    /// Gives back what [`Budget::admit`] took.
    pub fn release(&mut self, bytes: u64) {
        self.held = self.held.saturating_sub(bytes);
    }

    /// The bytes held.
    #[cfg(test)]
    pub fn held(&self) -> u64 {
        self.held
    }
}

/// Why a text is not an accepted size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeError {
    /// Not digits with an optional unit.
    NotASize,
    /// A size, but of more bytes than a `u64` counts.
    TooLarge,
}

/// A size in bytes: digits with an optional suffix `K`, `M`, `G` or `T`
/// (powers of 1024, `KiB`/`KB` alike); [`SizeError::TooLarge`] for a size of
/// 2^64 bytes or more, [`SizeError::NotASize`] for anything else.
pub fn parse_bytes(s: &str) -> Result<u64, SizeError> {
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(digits);
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(SizeError::NotASize),
    };
    if n.is_empty() {
        return Err(SizeError::NotASize);
    }
    // Digits only from here: a parse failure is an overflow.
    let n: u64 = n.parse().map_err(|_| SizeError::TooLarge)?;
    n.checked_mul(1u64 << shift).ok_or(SizeError::TooLarge)
}

/// The cap of `HPC_COLL_PROXY_MAX_SCRATCH` in this process's environment, or
/// the default; an error naming the variable for a value that is no size,
/// one too large, or not UTF-8 (it was read as unset: half the memory).
pub fn max_scratch() -> Result<u64, String> {
    match hpc_runtime::env::var(hpc_runtime::env::COLL_PROXY_MAX_SCRATCH)? {
        None => Ok(default_max_scratch()),
        Some(v) => scratch_of(&v),
    }
}

/// A value of `HPC_COLL_PROXY_MAX_SCRATCH` as a cap, or an error naming the
/// variable and showing the value (cut, if long).
fn scratch_of(v: &str) -> Result<u64, String> {
    let name = hpc_runtime::env::COLL_PROXY_MAX_SCRATCH;
    let shown = hpc_runtime::env::shown(v);
    parse_bytes(v).map_err(|e| match e {
        SizeError::NotASize => {
            format!("{name}={shown} is not a size in bytes (e.g. `1073741824`, `512M`, `16G`)")
        }
        SizeError::TooLarge => format!(
            "{name}={shown} is too large: at most {} bytes (2^64 - 1) are accepted",
            u64::MAX
        ),
    })
}

/// Half of this host's memory, or of the cgroup's limit where that is lower: the
/// other half stays for the ranks (in host placement their buffers are as large
/// as the proxy's scratch) and the rest of the host (a DPU's own Linux).
pub fn default_max_scratch() -> u64 {
    let total = hpc_io::read::read_regular_to_string("/proc/meminfo", hpc_io::read::MAX_PROC_BYTES)
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            kib.checked_mul(1024)
        });
    let cgroup = hpc_io::read::read_regular_to_string(
        "/sys/fs/cgroup/memory.max",
        hpc_io::read::MAX_PROC_BYTES,
    )
    .ok()
    .and_then(|s| s.trim().parse::<u64>().ok());
    match (total, cgroup) {
        (Some(t), Some(c)) => t.min(c) / 2,
        (Some(m), None) | (None, Some(m)) => m / 2,
        // Nothing to go by: no cap but the allocator's.
        (None, None) => u64::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hpc_collectives::{DataType, ReduceOp};

    fn pattern(len: usize, salt: u32) -> Vec<u8> {
        (0..len as u32)
            .map(|i| (i.wrapping_mul(31) ^ salt) as u8)
            .collect()
    }

    #[test]
    fn a_long_scratch_value_is_refused_in_a_line() {
        // Pass 15: a value of 100,000 characters was echoed whole.
        for v in ["x".repeat(100_000), "9".repeat(100_000)] {
            let e = scratch_of(&v).unwrap_err();
            assert!(
                e.starts_with("HPC_COLL_PROXY_MAX_SCRATCH=\"xxxx") || e.contains("\"9999"),
                "{e}"
            );
            assert!(e.len() < 200, "{} bytes: {}", e.len(), &e[..200]);
        }
        assert_eq!(scratch_of("16M"), Ok(16 << 20));
    }

    #[test]
    fn copies_between_ranks_and_scratch_piece_by_piece() {
        copies_everywhere(false);
    }

    #[test]
    fn copies_between_mapped_buffers_and_scratch() {
        copies_everywhere(true);
    }

    fn copies_everywhere(mapped: bool) {
        // Longer than two pieces and not a multiple of one.
        let len = 2 * CHUNK + 4 * 1000 + 4;
        let send = pattern(len, 7);
        let mut recv = vec![0u8; 2 * len];
        let mut mem = OpMem::of_own(&send, &mut recv, 2 * len, mapped);
        assert_eq!(
            matches!(locate(&mem, &[0], &Region::send(0, 1)), Ok(Loc::Mapped(_))),
            mapped
        );
        let pids = [std::process::id()];
        let mut bounce = vec![0u8; 2 * CHUNK];
        let r = |buf, offset| Region::new(buf, offset, len);
        let at = |m: &OpMem, reg| locate(m, &pids, &reg).unwrap();
        // rank -> rank (through the bounce buffer), rank -> scratch,
        // scratch -> scratch, scratch -> rank, bytes -> scratch.
        let s0 = at(&mem, r(BufferId::Send, 0));
        let r0 = at(&mem, r(BufferId::Recv, 0));
        copy(&mut bounce, &mut mem, Src::Loc(s0), r0, len).unwrap();
        let x0 = at(&mem, r(BufferId::Scratch, 0));
        copy(&mut bounce, &mut mem, Src::Loc(r0), x0, len).unwrap();
        let x1 = at(&mem, r(BufferId::Scratch, len));
        copy(&mut bounce, &mut mem, Src::Loc(x0), x1, len).unwrap();
        let r1 = at(&mem, r(BufferId::Recv, len));
        copy(&mut bounce, &mut mem, Src::Loc(x1), r1, len).unwrap();
        let other = pattern(len, 99);
        copy(&mut bounce, &mut mem, Src::Bytes(&other), x0, len).unwrap();
        assert_eq!(&mem.scratch[..len], &other[..]);
        assert_eq!(&mem.scratch[len..], &send[..]);
        drop(mem);
        assert_eq!(&recv[..len], &send[..]);
        assert_eq!(&recv[len..], &send[..]);
    }

    #[test]
    fn reduces_wherever_the_operands_lie() {
        reduces_everywhere(false);
    }

    #[test]
    fn reduces_in_mapped_buffers() {
        reduces_everywhere(true);
    }

    fn reduces_everywhere(mapped: bool) {
        let n = (2 * CHUNK + 40) / 4; // i32 elements, over two pieces
        let len = n * 4;
        let ints = |f: &dyn Fn(usize) -> i32| -> Vec<u8> {
            (0..n).flat_map(|i| f(i).to_ne_bytes()).collect()
        };
        let send = ints(&|i| i as i32);
        let mut recv = ints(&|i| 1000 * i as i32);
        let mut mem = OpMem::of_own(&send, &mut recv, 2 * len, mapped);
        mem.scratch[..len].copy_from_slice(&ints(&|i| -(i as i32)));
        mem.scratch[len..].copy_from_slice(&ints(&|_| 5));
        let pids = [std::process::id()];
        let mut bounce = vec![0u8; 2 * CHUNK];
        let at = |m: &OpMem, buf, offset| locate(m, &pids, &Region::new(buf, offset, len)).unwrap();
        let (s, r) = (at(&mem, BufferId::Send, 0), at(&mem, BufferId::Recv, 0));
        let (x0, x1) = (
            at(&mem, BufferId::Scratch, 0),
            at(&mem, BufferId::Scratch, len),
        );
        let sum = |b: &mut [u8], m: &mut OpMem, a: Loc, d: Loc| {
            reduce(b, m, ReduceOp::Sum, DataType::I32, a, d, len)
        };
        sum(&mut bounce, &mut mem, s, r).unwrap(); // recv = 1001 i
        sum(&mut bounce, &mut mem, s, x0).unwrap(); // x0 = 0
        sum(&mut bounce, &mut mem, x1, x0).unwrap(); // x0 = 5
        sum(&mut bounce, &mut mem, x0, x1).unwrap(); // x1 = 10
        sum(&mut bounce, &mut mem, x1, r).unwrap(); // recv = 1001 i + 10
        assert_eq!(&mem.scratch[..len], &ints(&|_| 5)[..]);
        assert_eq!(&mem.scratch[len..], &ints(&|_| 10)[..]);
        // Bitwise operations are refused for floats: an error, nothing written.
        let err = reduce(
            &mut bounce,
            &mut mem,
            ReduceOp::Band,
            DataType::F32,
            x0,
            x1,
            len,
        );
        assert_eq!(err, Err(Code::Failed));
        assert_eq!(&mem.scratch[len..], &ints(&|_| 10)[..]);
        drop(mem);
        assert_eq!(recv, ints(&|i| 1001 * i as i32 + 10));
    }

    #[test]
    fn overlapping_operands_are_refused() {
        let mut recv = vec![0u8; 8];
        let mut mem = OpMem::of_own(&[], &mut recv, 64, false);
        let mut bounce = vec![0u8; 2 * CHUNK];
        let (a, b) = (Loc::Scratch(0), Loc::Scratch(16));
        let r = reduce(&mut bounce, &mut mem, ReduceOp::Sum, DataType::U8, a, b, 32);
        assert_eq!(r, Err(Code::Failed));
        assert!(reduce(&mut bounce, &mut mem, ReduceOp::Sum, DataType::U8, a, b, 16).is_ok());
    }

    #[test]
    fn regions_past_a_buffer_are_refused() {
        let send = vec![0u8; 64];
        let mut recv = vec![0u8; 64];
        let mem = OpMem::of_own(&send, &mut recv, 16, false);
        let pids = [std::process::id()];
        assert!(locate(&mem, &pids, &Region::send(0, 64)).is_ok());
        assert_eq!(
            locate(&mem, &pids, &Region::recv(1, 64)).err(),
            Some(Code::Failed)
        );
        assert_eq!(
            locate(&mem, &pids, &Region::scratch(8, 9)).err(),
            Some(Code::Failed)
        );
    }

    #[test]
    fn maps_a_shared_buffer_only_while_it_is_the_same_file() {
        let mut b = hpc_board::shm::SharedBuf::<u8>::new(3 * 4096 + 5).unwrap();
        let r = hpc_board::shm::lookup(b.as_ptr(), b.len()).unwrap();
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

    #[test]
    fn sizes_parse_with_units_and_bad_ones_are_refused() {
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes(" 16 GiB "), Ok(16 << 30));
        assert_eq!(parse_bytes("2k"), Ok(2048));
        assert_eq!(parse_bytes("3T"), Ok(3 << 40));
        assert_eq!(parse_bytes(&u64::MAX.to_string()), Ok(u64::MAX));
        for bad in ["", "M", "-1", "1.5G", "12 parsecs", "T99"] {
            assert_eq!(parse_bytes(bad), Err(SizeError::NotASize), "{bad:?}");
        }
        // A size past what a u64 counts is called too large, not "no size",
        // and is refused, not wrapped.
        for huge in [
            "99999999999999999999".to_string(),
            "99999999999T".to_string(),
            format!("{}T", u64::MAX >> 39),
        ] {
            assert_eq!(parse_bytes(&huge), Err(SizeError::TooLarge), "{huge:?}");
        }
        assert!(default_max_scratch() > 0);
    }

    #[test]
    fn footprints_that_overflow_are_refused_not_wrapped() {
        assert_eq!(footprint(&[1, 2, 3]), Some(6));
        assert_eq!(footprint(&[usize::MAX, usize::MAX]), None);
        assert_eq!(footprint(&[usize::MAX, 1]), None);
        let mut b = Budget::new(100);
        assert_eq!(b.admit(None), Err(Refusal::Overflow));
        assert_eq!(b.held(), 0);
    }

    #[test]
    fn the_budget_holds_what_collectives_in_flight_take() {
        let mut b = Budget::new(100);
        assert_eq!(b.admit(Some(60)), Ok(60));
        // Beside the first, a second of 60 passes the cap; alone it fits.
        let over = b.admit(Some(60)).unwrap_err();
        assert_eq!(
            over,
            Refusal::OverCap {
                bytes: 60,
                held: 60,
                cap: 100
            }
        );
        assert!(over.why().contains("cap of 100 bytes"), "{}", over.why());
        assert!(matches!(
            b.admit(Some(u64::MAX)),
            Err(Refusal::OverCap {
                bytes: u64::MAX,
                ..
            })
        ));
        b.release(60);
        assert_eq!(b.admit(Some(60)), Ok(60));
        assert_eq!(b.held(), 60);
    }

    #[test]
    fn an_allocation_too_large_is_an_error_not_an_abort() {
        // More than any machine has: refused by the allocator (or as a capacity
        // overflow), where `vec![0; n]` would abort the process.
        assert!(try_filled(isize::MAX as usize, 0).is_err());
        assert!(try_filled(usize::MAX, 0).is_err());
        let mut v = vec![1u8; 4];
        assert!(try_grow(&mut v, isize::MAX as usize).is_err());
        assert_eq!(v, [1; 4]);
        try_grow(&mut v, 6).unwrap();
        assert_eq!(v, [1, 1, 1, 1, 0, 0]);
        assert_eq!(try_filled(3, 0xA5).unwrap(), [0xA5; 3]);
    }
}
