//! The `Mpi` engine: the same calls on the MPI library's own immediate
//! collectives (`MPI_Ialltoall(v)`, `MPI_Iallgather(v)`, `MPI_Ibcast`,
//! `MPI_Iallreduce`, `MPI_Ireduce_scatter(_block)`, ...: every collective of
//! this crate), so that benchmarks compare like with like. The
//! MPI library decides where progress happens (Open MPI: inside
//! `MPI_Test`/`MPI_Wait`, like the `Inline` engine).

use std::sync::Mutex;

use mpi::collective::SystemOperation;
use mpi::datatype::Equivalence;
use mpi::ffi;
use mpi::raw::AsRaw;

use hpc_collectives::{Collective, DataType, ReduceOp};

use crate::job::{Job, Message, Stage};
use hpc_board::sync::lock;
use hpc_board::{Error, Result};

/// An MPI communicator handle.
pub(crate) struct MpiComm {
    comm: ffi::MPI_Comm,
    owned: bool,
    /// A duplicate for point-to-point messages: a context of their own, so
    /// that no other user of the communicator matches their tags; errors
    /// return rather than abort (a truncated message is the caller's error).
    p2p: ffi::MPI_Comm,
}

/// What a point-to-point request learns: its source, tag and element count.
struct P2pState {
    recv: bool,
    /// Bytes the receive holds.
    expected: usize,
    /// The element type's datatype and size.
    dtype: ffi::MPI_Datatype,
    elem: usize,
    timeout: std::time::Duration,
    source: Option<usize>,
    tag: Option<u16>,
}

/// MPI's datatype of a message's elements: the type's own, or for `f16`
/// and `bf16` (which MPI lacks) 16-bit integers of the same size.
fn message_type(d: DataType) -> ffi::MPI_Datatype {
    match d {
        DataType::F16 | DataType::Bf16 => u16::equivalent_datatype().as_raw(),
        d => dt(d).unwrap_or_else(|_| u8::equivalent_datatype().as_raw()),
    }
}

// SAFETY: MPI communicator handles are plain values; the job initialises MPI with
// `Threading::Multiple` or uses one thread per communicator.
unsafe impl Send for MpiComm {}
// SAFETY: as above.
unsafe impl Sync for MpiComm {}

// SAFETY: an MPI request handle is a plain value used under the `Mutex`; the staged
// buffers are owned data.
unsafe impl Send for Pending {}
// SAFETY: as above: all access to the handle goes through the `Mutex`.
unsafe impl Sync for Pending {}

/// An MPI request with what it must keep alive.
pub(crate) struct Pending {
    req: Mutex<Option<ffi::MPI_Request>>,
    _counts: Vec<Vec<i32>>,
    stage: Option<Stage>,
    /// A point-to-point message's state (`None`: a collective).
    p2p: Option<Mutex<P2pState>>,
}

fn dt(d: DataType) -> Result<ffi::MPI_Datatype> {
    Ok(match d {
        DataType::I8 => i8::equivalent_datatype().as_raw(),
        DataType::I16 => i16::equivalent_datatype().as_raw(),
        DataType::I32 => i32::equivalent_datatype().as_raw(),
        DataType::I64 => i64::equivalent_datatype().as_raw(),
        DataType::U8 => u8::equivalent_datatype().as_raw(),
        DataType::U16 => u16::equivalent_datatype().as_raw(),
        DataType::U32 => u32::equivalent_datatype().as_raw(),
        DataType::U64 => u64::equivalent_datatype().as_raw(),
        DataType::F32 => f32::equivalent_datatype().as_raw(),
        DataType::F64 => f64::equivalent_datatype().as_raw(),
        DataType::F16 | DataType::Bf16 => {
            return Err(Error::Unsupported(format!("MPI has no {d} reductions")))
        }
    })
}

fn mop(o: ReduceOp) -> Result<ffi::MPI_Op> {
    Ok(match o {
        ReduceOp::Sum => SystemOperation::sum().as_raw(),
        ReduceOp::Prod => SystemOperation::product().as_raw(),
        ReduceOp::Min => SystemOperation::min().as_raw(),
        ReduceOp::Max => SystemOperation::max().as_raw(),
        ReduceOp::Band => SystemOperation::bitwise_and().as_raw(),
        ReduceOp::Bor => SystemOperation::bitwise_or().as_raw(),
        ReduceOp::Bxor => SystemOperation::bitwise_xor().as_raw(),
        ReduceOp::Custom(_) => {
            return Err(Error::Unsupported("custom ops on the MPI engine".into()))
        }
    })
}

fn int(n: usize) -> Result<i32> {
    i32::try_from(n).map_err(|_| Error::Unsupported(format!("count {n} exceeds MPI's int")))
}

/// Byte counts and displacements (packed, in rank order) for the v-variants.
fn counts_displs(counts: &[usize], elem: usize) -> Result<(Vec<i32>, Vec<i32>)> {
    let c: Vec<i32> = counts
        .iter()
        .map(|&x| int(x * elem))
        .collect::<Result<_>>()?;
    let mut d = Vec::with_capacity(c.len());
    let mut acc = 0usize;
    for &x in &c {
        d.push(int(acc)?);
        acc += x as usize;
    }
    Ok((c, d))
}

fn check(rc: i32, what: &str) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::transport(format!("{what} returned MPI error {rc}")))
    }
}

impl MpiComm {
    pub(crate) fn new(world: &hpc_runtime::World) -> Result<MpiComm> {
        let c = world.mpi_communicator().ok_or_else(|| {
            Error::Unsupported("the MPI engine needs a job started by an MPI launcher".into())
        })?;
        Ok(MpiComm {
            comm: c.as_raw(),
            owned: false,
            p2p: dup_for_messages(c.as_raw())?,
        })
    }

    pub(crate) fn split(&self, color: u32, key: i64) -> Result<MpiComm> {
        let mut out = std::mem::MaybeUninit::<ffi::MPI_Comm>::uninit();
        // SAFETY: valid communicator; MPI writes the new handle into `out`.
        let rc = unsafe {
            ffi::MPI_Comm_split(
                self.comm,
                (color & 0x7fff_ffff) as i32,
                key as i32,
                out.as_mut_ptr(),
            )
        };
        check(rc, "MPI_Comm_split")?;
        // SAFETY: initialised by a successful MPI_Comm_split.
        let comm = unsafe { out.assume_init() };
        Ok(MpiComm {
            comm,
            owned: true,
            p2p: dup_for_messages(comm)?,
        })
    }

    /// Starts a point-to-point message (`MPI_Isend`/`MPI_Irecv` on the
    /// duplicate) on `bufs` (send and receive: pointer and length), which
    /// stay valid until it completes (`stage` owns them where given).
    pub(crate) fn message(
        &self,
        m: &Message,
        bufs: (*const u8, usize, *mut u8, usize),
        stage: Option<Stage>,
    ) -> Result<Pending> {
        let (sp, sl, rp, rl) = bufs;
        static EMPTY: [u64; 1] = [0];
        let dummy = EMPTY.as_ptr().cast::<u8>();
        let dtype = message_type(m.dtype);
        let elem = m.dtype.size();
        let mut req = std::mem::MaybeUninit::<ffi::MPI_Request>::uninit();
        let tag = match m.tag {
            Some(t) => i32::from(t),
            // SAFETY: a constant MPI's library defines, read only.
            None => unsafe { ffi::RSMPI_ANY_TAG },
        };
        // SAFETY: the buffers are valid for their lengths until the request
        // completes (staged copies are owned by the `Pending`; a direct
        // buffer by a caller that waits, or an owned request that does).
        let rc = unsafe {
            if m.send {
                let sp = if sl == 0 { dummy } else { sp };
                let peer = int(m.peer.unwrap_or(0))?;
                ffi::MPI_Isend(
                    sp.cast(),
                    int(sl / elem)?,
                    dtype,
                    peer,
                    tag,
                    self.p2p,
                    req.as_mut_ptr(),
                )
            } else {
                let rp = if rl == 0 { dummy.cast_mut() } else { rp };
                let peer = match m.peer {
                    Some(p) => int(p)?,
                    None => ffi::RSMPI_ANY_SOURCE,
                };
                ffi::MPI_Irecv(
                    rp.cast(),
                    int(rl / elem)?,
                    dtype,
                    peer,
                    tag,
                    self.p2p,
                    req.as_mut_ptr(),
                )
            }
        };
        check(rc, if m.send { "MPI_Isend" } else { "MPI_Irecv" })?;
        // SAFETY: initialised by the successful call above.
        let req = unsafe { req.assume_init() };
        Ok(Pending {
            req: Mutex::new(Some(req)),
            _counts: Vec::new(),
            stage,
            p2p: Some(Mutex::new(P2pState {
                recv: !m.send,
                expected: rl,
                dtype,
                elem,
                timeout: m.timeout,
                source: m.peer,
                tag: m.tag,
            })),
        })
    }

    pub(crate) fn start(&self, mut job: Job<'_>) -> Result<Pending> {
        let (sp, send_len, rp, recv_len) = job.raw();
        let coll = &job.coll;
        // An empty Vec<u8> or slice points at address 1, which is Open MPI's
        // MPI_IN_PLACE: hand MPI a harmless real address instead (never accessed for a
        // zero count).
        static EMPTY: [u64; 1] = [0];
        let dummy = EMPTY.as_ptr().cast::<u8>();
        let sp = if send_len == 0 { dummy } else { sp };
        let rp = if recv_len == 0 { dummy.cast_mut() } else { rp };
        let (sp, rp) = (sp.cast::<std::ffi::c_void>(), rp.cast::<std::ffi::c_void>());
        let byte = u8::equivalent_datatype().as_raw();
        let mut counts = Vec::new();
        let mut req = std::mem::MaybeUninit::<ffi::MPI_Request>::uninit();
        let r = req.as_mut_ptr();
        let c = self.comm;
        let e = coll.dtype().map_or(1, DataType::size);
        // SAFETY: (all calls below) the buffers are valid for the lengths checked by
        // `check_buffers` and stay alive until the request completes (staged copies are
        // owned by the `Pending`; direct buffers are borrowed by a scope that waits);
        // count arrays are moved into the `Pending` too.
        let rc = unsafe {
            match coll {
                Collective::Barrier => ffi::MPI_Ibarrier(c, r),
                Collective::Broadcast { root, count, .. } => {
                    ffi::MPI_Ibcast(rp, int(count * e)?, byte, int(*root)?, c, r)
                }
                Collective::Allgather { count, .. } => {
                    let n = int(count * e)?;
                    ffi::MPI_Iallgather(sp, n, byte, rp, n, byte, c, r)
                }
                Collective::Alltoall { count, .. } => {
                    let n = int(count * e)?;
                    ffi::MPI_Ialltoall(sp, n, byte, rp, n, byte, c, r)
                }
                Collective::Allgatherv { counts: cs, .. } => {
                    let b: Vec<i32> = cs.iter().map(|&x| int(x * e)).collect::<Result<_>>()?;
                    let mut d = Vec::with_capacity(b.len());
                    let mut acc = 0i32;
                    for &x in &b {
                        d.push(acc);
                        acc += x;
                    }
                    let me = {
                        let mut rank = 0;
                        ffi::MPI_Comm_rank(c, &mut rank);
                        rank as usize
                    };
                    let (bp, dp) = (b.as_ptr(), d.as_ptr());
                    let mine = b[me];
                    counts.push(b);
                    counts.push(d);
                    ffi::MPI_Iallgatherv(sp, mine, byte, rp, bp, dp, byte, c, r)
                }
                Collective::Allreduce { count, dtype, op } => {
                    ffi::MPI_Iallreduce(sp, rp, int(*count)?, dt(*dtype)?, mop(*op)?, c, r)
                }
                Collective::Reduce {
                    root,
                    count,
                    dtype,
                    op,
                } => ffi::MPI_Ireduce(
                    sp,
                    rp,
                    int(*count)?,
                    dt(*dtype)?,
                    mop(*op)?,
                    int(*root)?,
                    c,
                    r,
                ),
                Collective::Gather { root, count, .. } => {
                    let n = int(count * e)?;
                    ffi::MPI_Igather(sp, n, byte, rp, n, byte, int(*root)?, c, r)
                }
                Collective::Scatter { root, count, .. } => {
                    let n = int(count * e)?;
                    ffi::MPI_Iscatter(sp, n, byte, rp, n, byte, int(*root)?, c, r)
                }
                Collective::Alltoallv {
                    send_counts,
                    recv_counts,
                    ..
                } => {
                    let (sc, sd) = counts_displs(send_counts, e)?;
                    let (rc, rd) = counts_displs(recv_counts, e)?;
                    let ptrs = (sc.as_ptr(), sd.as_ptr(), rc.as_ptr(), rd.as_ptr());
                    counts.extend([sc, sd, rc, rd]);
                    ffi::MPI_Ialltoallv(sp, ptrs.0, ptrs.1, byte, rp, ptrs.2, ptrs.3, byte, c, r)
                }
                Collective::ReduceScatterBlock { count, dtype, op } => {
                    ffi::MPI_Ireduce_scatter_block(
                        sp,
                        rp,
                        int(*count)?,
                        dt(*dtype)?,
                        mop(*op)?,
                        c,
                        r,
                    )
                }
                Collective::ReduceScatter {
                    counts: cs,
                    dtype,
                    op,
                } => {
                    let rc: Vec<i32> = cs.iter().map(|&x| int(x)).collect::<Result<_>>()?;
                    let p = rc.as_ptr();
                    counts.push(rc);
                    ffi::MPI_Ireduce_scatter(sp, rp, p, dt(*dtype)?, mop(*op)?, c, r)
                }
            }
        };
        check(rc, "MPI immediate collective")?;
        // SAFETY: initialised by the successful call above.
        let req = unsafe { req.assume_init() };
        Ok(Pending {
            req: Mutex::new(Some(req)),
            _counts: counts,
            stage: job.stage,
            p2p: None,
        })
    }
}

impl Pending {
    /// Whether the request completed (`MPI_Test`).
    pub(crate) fn test(&self) -> bool {
        if self.p2p.is_some() {
            return !matches!(self.test_message(), Ok(false));
        }
        let mut g = lock(&self.req);
        let Some(r) = g.as_mut() else { return true };
        let mut flag = 0;
        // SAFETY: a live request handle; MPI_Test frees it when complete.
        unsafe { ffi::MPI_Test(r, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
        if flag != 0 {
            *g = None;
        }
        flag != 0
    }

    /// The source and tag of a point-to-point receive's message, once known.
    pub(crate) fn matched(&self) -> Option<(usize, u16)> {
        self.p2p.as_ref().and_then(|p| {
            let p = lock(p);
            p.source.zip(p.tag)
        })
    }

    /// `MPI_Test` of a point-to-point message with its status: whether it
    /// completed, or the error it completed with.
    fn test_message(&self) -> Result<bool> {
        let mut g = lock(&self.req);
        let Some(r) = g.as_mut() else { return Ok(true) };
        let mut flag = 0;
        // SAFETY: zeroed is a valid MPI_Status (plain integers).
        let mut st: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: a live request handle; MPI_Test frees it when complete.
        let rc = unsafe { ffi::MPI_Test(r, &mut flag, &mut st) };
        if flag == 0 && rc == 0 {
            return Ok(false);
        }
        *g = None;
        let Some(p) = &self.p2p else { return Ok(true) };
        let mut p = lock(p);
        if !p.recv {
            return check(rc, "MPI_Isend").map(|()| true);
        }
        let source = usize::try_from(st.MPI_SOURCE).unwrap_or(0);
        p.source = Some(source);
        p.tag = u16::try_from(st.MPI_TAG).ok();
        let mut count = 0;
        // SAFETY: the status of a completed receive.
        unsafe { ffi::MPI_Get_count(&st, p.dtype, &mut count) };
        // (MPI_UNDEFINED, negative, where the bytes are not whole elements.)
        let got = usize::try_from(count).ok().map(|c| c * p.elem);
        if rc != 0 || st.MPI_ERROR == ffi::MPI_ERR_TRUNCATE as i32 {
            // MPI lands what fits and tells no more: the length is a bound.
            return Err(Error::CountMismatch {
                rank: source,
                detail: format!(
                    "rank {source} sent a message longer than the {} bytes the receive holds",
                    p.expected
                ),
            });
        }
        let Some(got) = got else {
            return Err(Error::CountMismatch {
                rank: source,
                detail: format!(
                    "rank {source} sent a message that is not whole elements of the receive's type"
                ),
            });
        };
        if got != p.expected {
            return Err(Error::MessageLength {
                rank: source,
                tag: u16::try_from(st.MPI_TAG).unwrap_or(u16::MAX),
                sent: got,
                expected: p.expected,
            });
        }
        Ok(true)
    }

    /// Waits for a point-to-point message (testing, as the engines' own
    /// `wait` does, until the communicator's timeout; a receive that timed
    /// out is cancelled).
    fn wait_message(&self) -> Result<()> {
        let timeout = self
            .p2p
            .as_ref()
            .map_or_else(Default::default, |p| lock(p).timeout);
        let t0 = std::time::Instant::now();
        let backoff = hpc_board::backoff::Backoff::new(std::time::Duration::from_micros(50), true);
        while !self.test_message()? {
            if t0.elapsed() > timeout {
                let recv = self.p2p.as_ref().is_some_and(|p| lock(p).recv);
                let mut g = lock(&self.req);
                if let (true, Some(r)) = (recv, g.as_mut()) {
                    // SAFETY: a live receive request: cancelled, then completed
                    // and freed by MPI_Wait, after which MPI holds no buffer of it.
                    unsafe {
                        ffi::MPI_Cancel(r);
                        ffi::MPI_Wait(r, ffi::RSMPI_STATUS_IGNORE);
                    }
                    *g = None;
                }
                return Err(Error::Timeout {
                    after: timeout,
                    waiting_for: Vec::new(),
                });
            }
            backoff.rest(|_| std::time::Duration::from_micros(20));
        }
        Ok(())
    }

    /// Waits for the request (`MPI_Wait`) and delivers a staged result.
    pub(crate) fn wait(&self, out: Option<&mut [u8]>) -> Result<()> {
        if self.p2p.is_some() {
            self.wait_message()?;
        }
        let mut g = lock(&self.req);
        if let Some(r) = g.as_mut() {
            // SAFETY: a live request handle; MPI_Wait completes and frees it.
            let rc = unsafe { ffi::MPI_Wait(r, ffi::RSMPI_STATUS_IGNORE) };
            *g = None;
            check(rc, "MPI_Wait")?;
        }
        if let Some(stage) = &self.stage {
            stage.deliver(out);
        }
        Ok(())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // A staged collective still in MPI's hands: keep its memory.
        if lock(&self.req).is_some() {
            if let Some(s) = self.stage.take() {
                std::mem::forget(s);
            }
        }
    }
}

/// A duplicate of `comm` for point-to-point messages, whose errors return.
fn dup_for_messages(comm: ffi::MPI_Comm) -> Result<ffi::MPI_Comm> {
    let mut out = std::mem::MaybeUninit::<ffi::MPI_Comm>::uninit();
    // SAFETY: a valid communicator; MPI writes the duplicate into `out`.
    let rc = unsafe { ffi::MPI_Comm_dup(comm, out.as_mut_ptr()) };
    check(rc, "MPI_Comm_dup")?;
    // SAFETY: initialised by the successful MPI_Comm_dup.
    let dup = unsafe { out.assume_init() };
    // SAFETY: a valid communicator and MPI's predefined handler.
    let rc = unsafe { ffi::MPI_Comm_set_errhandler(dup, ffi::RSMPI_ERRORS_RETURN) };
    check(rc, "MPI_Comm_set_errhandler")?;
    Ok(dup)
}

impl Drop for MpiComm {
    fn drop(&mut self) {
        let mut finalized = 0;
        // SAFETY: callable at any time, before or after MPI_Finalize.
        unsafe { ffi::MPI_Finalized(&mut finalized) };
        if finalized == 0 {
            // SAFETY: the duplicate made for this communicator, owned here.
            unsafe { ffi::MPI_Comm_free(&mut self.p2p) };
        }
        if self.owned {
            // SAFETY: a communicator created by MPI_Comm_split and owned here.
            unsafe { ffi::MPI_Comm_free(&mut self.comm) };
        }
    }
}
