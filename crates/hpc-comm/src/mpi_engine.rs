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

use crate::error::{Error, Result};
use crate::job::{Job, Stage};
use crate::sync::lock;

/// An MPI communicator handle.
pub(crate) struct MpiComm {
    comm: ffi::MPI_Comm,
    owned: bool,
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
        Ok(MpiComm { comm, owned: true })
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
        })
    }
}

impl Pending {
    /// Whether the request completed (`MPI_Test`).
    pub(crate) fn test(&self) -> bool {
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

    /// Waits for the request (`MPI_Wait`) and delivers a staged result.
    pub(crate) fn wait(&self, out: Option<&mut [u8]>) -> Result<()> {
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

impl Drop for MpiComm {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: a communicator created by MPI_Comm_split and owned here.
            unsafe { ffi::MPI_Comm_free(&mut self.comm) };
        }
    }
}
