//! [`GpuComm`]: the CUDA side (feature `cuda`).

mod host_link;
mod native;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr,
};
use cudarc::nccl;
use hpc_runtime::World;
use hpc_topology::{CpuSet, Topology};

use crate::device;
use crate::error::{GpuError, Result};
use crate::plan::{self, Plan};
use crate::types::{Element, GpuOp};

use self::native::Native;

pub(crate) fn driver_err(e: cudarc::driver::DriverError) -> GpuError {
    GpuError::Driver(e.to_string())
}

fn nccl_err(e: nccl::result::NcclError) -> GpuError {
    GpuError::Nccl(format!("{e:?}"))
}

/// An element type usable on the device and with NCCL: `f32`, `f64`,
/// [`half::f16`], [`half::bf16`], `i32`.
pub trait GpuElement: Element + DeviceRepr + nccl::NcclType {}
impl GpuElement for f32 {}
impl GpuElement for f64 {}
impl GpuElement for half::f16 {}
impl GpuElement for half::bf16 {}
impl GpuElement for i32 {}

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// NCCL when it loads on every rank and no two ranks share a GPU,
    /// else native.
    #[default]
    Auto,
    /// NCCL or an error.
    Nccl,
    /// The native path.
    Native,
}

/// The backend a [`GpuComm`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// NCCL.
    Nccl,
    /// Ring schedules, NVRTC kernels, CUDA IPC / host transport.
    Native,
}

/// Settings of [`GpuComm::with_options`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Backend selection.
    pub backend: BackendChoice,
    /// Force this CUDA ordinal instead of the automatic choice.
    pub device: Option<usize>,
}

/// Collectives on CUDA device buffers over the ranks of a [`World`].
///
/// Every rank must call the same collectives in the same order with
/// matching lengths, as in MPI.
pub struct GpuComm<'w> {
    world: &'w World,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    backend: Backend,
    nccl: Option<nccl::Comm>,
    native: std::sync::Mutex<Native>,
}

impl std::fmt::Debug for GpuComm<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuComm")
            .field("rank", &self.world.rank())
            .field("size", &self.world.size())
            .field("ordinal", &self.ctx.ordinal())
            .field("backend", &self.backend)
            .finish()
    }
}

/// Checks that the driver library loads and returns the device count.
fn device_count() -> Result<usize> {
    // SAFETY: only tries to dlopen libcuda; no CUDA call is made.
    if !unsafe { sys::is_culib_present() } {
        return Err(GpuError::NoDriver("libcuda could not be loaded".into()));
    }
    let n = catch_unwind(CudaContext::device_count)
        .map_err(|_| GpuError::NoDriver("the CUDA driver panicked on initialisation".into()))?
        .map_err(|e| GpuError::NoDriver(e.to_string()))?;
    if n <= 0 {
        return Err(GpuError::NoDevice("the driver reports no device".into()));
    }
    Ok(n as usize)
}

fn encode_set(s: &CpuSet) -> Vec<u8> {
    s.iter().flat_map(u32::to_le_bytes).collect()
}

fn decode_set(b: &[u8]) -> CpuSet {
    let mut s = CpuSet::new();
    for c in b.chunks_exact(4) {
        s.insert(u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    }
    s
}

/// Chooses this rank's ordinal (collective: one allgather).
fn choose_ordinal(world: &World, count: usize) -> Result<usize> {
    let topo = Topology::this_machine().ok();
    let mine = topo
        .as_ref()
        .map(|t| encode_set(&t.allowed))
        .unwrap_or_default();
    let all = world.allgather(&mine)?;
    if let Some(v) = device::parse_visible(std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref()) {
        let _ = v;
        return device::visible_choice(world.local_rank(), count)
            .ok_or_else(|| GpuError::NoDevice("CUDA_VISIBLE_DEVICES hides every device".into()));
    }
    let Some(topo) = topo else {
        return Ok(world.local_rank() % count);
    };
    // GPU locality by CUDA ordinal (unknown ones get an empty set).
    let mut gpus = vec![CpuSet::new(); count];
    for g in &topo.gpus {
        for d in &g.os_devices {
            if let Some(o) = device::cuda_ordinal(&d.name).filter(|&o| o < count) {
                gpus[o] = g.cpuset.clone();
            }
        }
    }
    let me = world.rank();
    let local: Vec<usize> = (0..world.size())
        .filter(|&r| world.same_node(r, me))
        .collect();
    let sets: Vec<CpuSet> = local.iter().map(|&r| decode_set(&all[r])).collect();
    let pos = local.iter().position(|&r| r == me).unwrap_or(0);
    Ok(device::assign(&gpus, &sets)[pos])
}

impl<'w> GpuComm<'w> {
    /// A communicator over every rank of `world` with default [`Options`].
    /// Collective.
    ///
    /// Errors: [`GpuError::NoDriver`] without a CUDA driver,
    /// [`GpuError::NoDevice`] without a device, [`GpuError::Nccl`] when
    /// NCCL was demanded and cannot be used.
    pub fn new(world: &'w World) -> Result<Self> {
        Self::with_options(world, Options::default())
    }

    /// Like [`GpuComm::new`] with explicit options. Collective.
    pub fn with_options(world: &'w World, opts: Options) -> Result<Self> {
        // Every rank takes part in every exchange below even when it fails
        // locally, so that no rank is left waiting.
        let count = device_count();
        let ordinal = match (&count, opts.device) {
            (Ok(n), Some(d)) if d < *n => Ok(d),
            (Ok(n), Some(d)) => Err(GpuError::NoDevice(format!("device {d} of {n} requested"))),
            (Ok(n), None) => choose_ordinal(world, *n),
            (Err(_), _) => {
                let _ = world.allgather(&[])?;
                Err(GpuError::NoDevice(String::new()))
            }
        };
        let setup = count.and(ordinal).and_then(|o| {
            let ctx = catch_unwind(|| CudaContext::new(o))
                .map_err(|_| GpuError::NoDriver("context creation panicked".into()))?
                .map_err(|e| GpuError::NoDevice(e.to_string()))?;
            let stream = ctx.new_stream().map_err(driver_err)?;
            let uuid = ctx.uuid().map_err(driver_err)?;
            Ok((
                ctx,
                stream,
                uuid.bytes.iter().map(|&b| b as u8).collect::<Vec<u8>>(),
            ))
        });
        // Agree: everyone has a device; who shares a GPU; who has NCCL.
        // SAFETY: only tries to dlopen libnccl.
        let has_nccl = setup.is_ok() && unsafe { nccl::sys::is_culib_present() };
        let mut mine = vec![u8::from(setup.is_ok()), u8::from(has_nccl)];
        if let Ok((_, _, uuid)) = &setup {
            mine.extend_from_slice(uuid);
        }
        let all = world.allgather(&mine)?;
        let (ctx, stream, _) = setup?;
        if let Some(bad) = all.iter().position(|v| v.first() != Some(&1)) {
            return Err(GpuError::NoDevice(format!("rank {bad} has no usable GPU")));
        }
        let all_nccl = all.iter().all(|v| v.get(1) == Some(&1));
        let mut uuids: Vec<&[u8]> = all.iter().map(|v| &v[2..]).collect();
        uuids.sort();
        uuids.dedup();
        let shared = uuids.len() < world.size();
        let want_nccl = match opts.backend {
            BackendChoice::Native => false,
            BackendChoice::Nccl if !all_nccl => {
                return Err(GpuError::Nccl("libnccl is missing on some rank".into()))
            }
            BackendChoice::Nccl if shared => {
                return Err(GpuError::Nccl("several ranks share a GPU".into()))
            }
            BackendChoice::Nccl | BackendChoice::Auto => all_nccl && !shared,
        };
        let nccl = if want_nccl {
            let comm = init_nccl(world, &stream);
            let ok = world.allgather(&[u8::from(comm.is_ok())])?;
            match comm {
                Ok(c) if ok.iter().all(|v| v == &[1]) => Some(c),
                Err(e) if opts.backend == BackendChoice::Nccl => return Err(e),
                _ if opts.backend == BackendChoice::Nccl => {
                    return Err(GpuError::Nccl("NCCL failed on another rank".into()))
                }
                _ => None,
            }
        } else {
            None
        };
        let link: Option<Box<dyn host_link::HostLink>> = if world.node_count() > 1 {
            let t = hpc_rdma::Transport::new(world)?;
            Some(Box::new(host_link::RdmaLink::new(t)))
        } else {
            None
        };
        let native = Native::new(ctx.clone(), link)?;
        Ok(Self {
            world,
            ctx,
            stream,
            backend: if nccl.is_some() {
                Backend::Nccl
            } else {
                Backend::Native
            },
            nccl,
            native: std::sync::Mutex::new(native),
        })
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.world.rank()
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.world.size()
    }

    /// The device context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The communicator's own stream (any stream of [`GpuComm::context`]
    /// may be passed to the collectives).
    pub fn stream(&self) -> Arc<CudaStream> {
        self.stream.clone()
    }

    fn native(&self) -> Result<std::sync::MutexGuard<'_, Native>> {
        self.native
            .lock()
            .map_err(|_| GpuError::Plan("native state poisoned by a panic".into()))
    }

    fn run_native(
        &self,
        plans: Vec<Plan>,
        stream: &CudaStream,
        input: sys::CUdeviceptr,
        output: sys::CUdeviceptr,
    ) -> Result<()> {
        let plan = plans
            .into_iter()
            .nth(self.rank())
            .ok_or_else(|| GpuError::Plan("no plan for this rank".into()))?;
        self.native()?
            .execute(self.world, stream, &plan, input, output)
    }

    /// [`Self::run_native`] from `send` into `recv`, both held for `stream` while the
    /// plan is enqueued.
    fn run_native_between<T: GpuElement>(
        &self,
        plans: Vec<Plan>,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        stream: &CudaStream,
    ) -> Result<()> {
        let (s, _gs) = send.device_ptr(stream);
        let (r, _gr) = recv.device_ptr_mut(stream);
        self.run_native(plans, stream, s, r)
    }

    fn check_len(what: &'static str, expected: usize, got: usize) -> Result<()> {
        if expected == got {
            Ok(())
        } else {
            Err(GpuError::Mismatch {
                what,
                expected,
                got,
            })
        }
    }

    /// `recv = send[0] ⊕ … ⊕ send[size-1]` element-wise; `send.len() ==
    /// recv.len()`. Enqueued on `stream`.
    pub fn all_reduce<T: GpuElement>(
        &self,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        op: GpuOp,
        stream: &CudaStream,
    ) -> Result<()> {
        Self::check_len("all_reduce receive length", send.len(), recv.len())?;
        if let Some(c) = &self.nccl {
            return nccl_on(c, stream, |c| c.all_reduce(send, recv, &nccl_op(op)));
        }
        self.run_native_between(
            plan::allreduce(self.size(), send.len(), T::DTYPE, op)?,
            send,
            recv,
            stream,
        )
    }

    /// In-place [`GpuComm::all_reduce`].
    pub fn all_reduce_in_place<T: GpuElement>(
        &self,
        buf: &mut CudaSlice<T>,
        op: GpuOp,
        stream: &CudaStream,
    ) -> Result<()> {
        if let Some(c) = &self.nccl {
            return nccl_on(c, stream, |c| c.all_reduce_in_place(buf, &nccl_op(op)));
        }
        let n = buf.len();
        let (p, _g) = buf.device_ptr_mut(stream);
        self.run_native(plan::allreduce(self.size(), n, T::DTYPE, op)?, stream, p, p)
    }

    /// Rank `r` gets the reduction of block `r` of every rank's `send`
    /// (`send.len() == size * recv.len()`).
    pub fn reduce_scatter<T: GpuElement>(
        &self,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        op: GpuOp,
        stream: &CudaStream,
    ) -> Result<()> {
        Self::check_len(
            "reduce_scatter send length",
            recv.len() * self.size(),
            send.len(),
        )?;
        if let Some(c) = &self.nccl {
            return nccl_on(c, stream, |c| c.reduce_scatter(send, recv, &nccl_op(op)));
        }
        let n = recv.len();
        self.run_native_between(
            plan::reduce_scatter(self.size(), n, T::DTYPE, op)?,
            send,
            recv,
            stream,
        )
    }

    /// In-place reduce-scatter: `buf` holds `size` blocks; this rank's
    /// result is left in its own block `rank` (as NCCL's in-place form).
    pub fn reduce_scatter_in_place<T: GpuElement>(
        &self,
        buf: &mut CudaSlice<T>,
        op: GpuOp,
        stream: &CudaStream,
    ) -> Result<()> {
        let n = buf.len() / self.size();
        Self::check_len("reduce_scatter buffer length", n * self.size(), buf.len())?;
        if let Some(c) = &self.nccl {
            let own = c.stream();
            own.join(stream).map_err(driver_err)?;
            let tmp = own.clone_dtod(buf).map_err(driver_err)?;
            let mut mine = buf.slice_mut(self.rank() * n..(self.rank() + 1) * n);
            return nccl_on(c, stream, |c| {
                c.reduce_scatter(&tmp, &mut mine, &nccl_op(op))
            });
        }
        let (p, _g) = buf.device_ptr_mut(stream);
        let e = std::mem::size_of::<T>() as u64;
        let out = p + (self.rank() * n) as u64 * e;
        self.run_native(
            plan::reduce_scatter(self.size(), n, T::DTYPE, op)?,
            stream,
            p,
            out,
        )
    }

    /// Every rank's `send` concatenated in rank order into every `recv`
    /// (`recv.len() == size * send.len()`).
    pub fn all_gather<T: GpuElement>(
        &self,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        stream: &CudaStream,
    ) -> Result<()> {
        Self::check_len(
            "all_gather receive length",
            send.len() * self.size(),
            recv.len(),
        )?;
        if let Some(c) = &self.nccl {
            return nccl_on(c, stream, |c| c.all_gather(send, recv));
        }
        let n = send.len();
        self.run_native_between(
            plan::allgather(self.size(), n, T::DTYPE)?,
            send,
            recv,
            stream,
        )
    }

    /// In-place allgather: this rank's contribution is block `rank` of `buf`.
    pub fn all_gather_in_place<T: GpuElement>(
        &self,
        buf: &mut CudaSlice<T>,
        stream: &CudaStream,
    ) -> Result<()> {
        let n = buf.len() / self.size();
        Self::check_len("all_gather buffer length", n * self.size(), buf.len())?;
        if let Some(c) = &self.nccl {
            let own = c.stream();
            own.join(stream).map_err(driver_err)?;
            let mine = own
                .clone_dtod(&buf.slice(self.rank() * n..(self.rank() + 1) * n))
                .map_err(driver_err)?;
            return nccl_on(c, stream, |c| c.all_gather(&mine, buf));
        }
        let (p, _g) = buf.device_ptr_mut(stream);
        let e = std::mem::size_of::<T>() as u64;
        let mine = p + (self.rank() * n) as u64 * e;
        self.run_native(plan::allgather(self.size(), n, T::DTYPE)?, stream, mine, p)
    }

    /// The root's `send` into every rank's `recv` (`send` is read on the
    /// root only; lengths must match).
    pub fn broadcast<T: GpuElement>(
        &self,
        root: usize,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        stream: &CudaStream,
    ) -> Result<()> {
        Self::check_len("broadcast receive length", send.len(), recv.len())?;
        if root >= self.size() {
            return Err(GpuError::Mismatch {
                what: "broadcast root",
                expected: self.size(),
                got: root,
            });
        }
        if let Some(c) = &self.nccl {
            return nccl_on(c, stream, |c| c.broadcast(Some(send), recv, root as i32));
        }
        let n = recv.len();
        self.run_native_between(
            plan::broadcast(self.size(), root, n, T::DTYPE)?,
            send,
            recv,
            stream,
        )
    }

    /// In-place broadcast of the root's `buf`.
    pub fn broadcast_in_place<T: GpuElement>(
        &self,
        root: usize,
        buf: &mut CudaSlice<T>,
        stream: &CudaStream,
    ) -> Result<()> {
        if root >= self.size() {
            return Err(GpuError::Mismatch {
                what: "broadcast root",
                expected: self.size(),
                got: root,
            });
        }
        if let Some(c) = &self.nccl {
            return nccl_on(c, stream, |c| c.broadcast_in_place(buf, root as i32));
        }
        let n = buf.len();
        let (p, _g) = buf.device_ptr_mut(stream);
        self.run_native(
            plan::broadcast(self.size(), root, n, T::DTYPE)?,
            stream,
            p,
            p,
        )
    }

    /// Local `dst[i] = dst[i] ⊕ src[i]` with the native reduction kernel,
    /// enqueued on `stream` (no communication; any backend). The kernel is
    /// compiled by NVRTC on first use.
    pub fn reduce_local<T: GpuElement>(
        &self,
        dst: &mut CudaSlice<T>,
        src: &CudaSlice<T>,
        op: GpuOp,
        stream: &CudaStream,
    ) -> Result<()> {
        Self::check_len("reduce_local source length", dst.len(), src.len())?;
        let n = dst.len();
        let (s, _gs) = src.device_ptr(stream);
        let (d, _gd) = dst.device_ptr_mut(stream);
        self.native()?.reduce_raw(stream, op, T::DTYPE, d, s, n)
    }

    /// The device name, the driver's CUDA version (`12080` is 12.8) and the
    /// compute capability, for reports.
    pub fn device_info(&self) -> Result<(String, i32, (i32, i32))> {
        let name = self.ctx.name().map_err(driver_err)?;
        let mut v = 0;
        // SAFETY: writes one int; the driver is loaded (a context exists).
        unsafe { sys::cuDriverGetVersion(&mut v) }
            .result()
            .map_err(driver_err)?;
        let cc = self.ctx.compute_capability().map_err(driver_err)?;
        Ok((name, v, cc))
    }

    /// Non-blocking [`GpuComm::all_reduce`]: see [`GpuRequest`].
    pub fn all_reduce_start<'a, T: GpuElement>(
        &'a self,
        send: &'a CudaSlice<T>,
        recv: &'a mut CudaSlice<T>,
        op: GpuOp,
        stream: &'a CudaStream,
    ) -> Result<GpuRequest<'a>> {
        if self.nccl.is_some() {
            self.all_reduce(send, recv, op, stream)?;
            return GpuRequest::after(stream);
        }
        Ok(GpuRequest::deferred(move || {
            self.all_reduce(send, recv, op, stream)
        }))
    }

    /// Non-blocking [`GpuComm::all_reduce_in_place`]: see [`GpuRequest`].
    pub fn all_reduce_in_place_start<'a, T: GpuElement>(
        &'a self,
        buf: &'a mut CudaSlice<T>,
        op: GpuOp,
        stream: &'a CudaStream,
    ) -> Result<GpuRequest<'a>> {
        if self.nccl.is_some() {
            self.all_reduce_in_place(buf, op, stream)?;
            return GpuRequest::after(stream);
        }
        Ok(GpuRequest::deferred(move || {
            self.all_reduce_in_place(buf, op, stream)
        }))
    }
}

/// Runs an NCCL call on `stream` (the comm's own stream is used when they
/// are the same; otherwise `stream` is joined around the call).
fn nccl_on(
    c: &nccl::Comm,
    stream: &CudaStream,
    f: impl FnOnce(
        &nccl::Comm,
    ) -> std::result::Result<nccl::result::NcclStatus, nccl::result::NcclError>,
) -> Result<()> {
    let own = c.stream();
    if own.cu_stream() != stream.cu_stream() {
        own.join(stream).map_err(driver_err)?;
    }
    f(c).map_err(nccl_err)?;
    if own.cu_stream() != stream.cu_stream() {
        stream.join(&own).map_err(driver_err)?;
    }
    Ok(())
}

fn nccl_op(op: GpuOp) -> nccl::ReduceOp {
    match op {
        GpuOp::Sum => nccl::ReduceOp::Sum,
        GpuOp::Prod => nccl::ReduceOp::Prod,
        GpuOp::Min => nccl::ReduceOp::Min,
        GpuOp::Max => nccl::ReduceOp::Max,
    }
}

/// Rank 0 creates the NCCL id, the world broadcasts it, every rank joins.
fn init_nccl(world: &World, stream: &Arc<CudaStream>) -> Result<nccl::Comm> {
    let id = if world.rank() == 0 {
        let id = catch_unwind(nccl::Id::new)
            .map_err(|_| GpuError::Nccl("ncclGetUniqueId panicked".into()))?
            .map_err(nccl_err)?;
        Some(id)
    } else {
        None
    };
    let bytes: Vec<u8> = id
        .as_ref()
        .map(|id| id.internal().iter().map(|&c| c as u8).collect())
        .unwrap_or_default();
    let bytes = world.broadcast(0, &bytes)?;
    if bytes.len() != 128 {
        return Err(GpuError::Mismatch {
            what: "NCCL unique id length",
            expected: 128,
            got: bytes.len(),
        });
    }
    let mut internal = [0 as std::ffi::c_char; 128];
    for (d, s) in internal.iter_mut().zip(&bytes) {
        *d = *s as std::ffi::c_char;
    }
    let id = nccl::Id::uninit(internal);
    let stream = stream.clone();
    let (rank, size) = (world.rank(), world.size());
    catch_unwind(AssertUnwindSafe(|| {
        nccl::Comm::from_rank(stream, rank, size, id)
    }))
    .map_err(|_| GpuError::Nccl("ncclCommInitRank panicked".into()))?
    .map_err(nccl_err)
}

/// A collective in flight.
///
/// * NCCL backend: the collective is enqueued when the request is made;
///   [`GpuRequest::test`] queries an event recorded after it, without
///   blocking, and [`GpuRequest::wait`] synchronises on that event.
/// * Native backend: its phases need inter-rank barriers driven by the
///   host, so the work runs inside the first [`GpuRequest::test`] or
///   [`GpuRequest::wait`] (which then blocks until it is complete on the
///   stream); every rank must call one of them.
#[must_use = "a request must be tested or waited for"]
pub struct GpuRequest<'a> {
    state: ReqState<'a>,
}

enum ReqState<'a> {
    Event(CudaEvent),
    Deferred(Box<dyn FnOnce() -> Result<()> + 'a>),
    Done,
}

impl std::fmt::Debug for GpuRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self.state {
            ReqState::Event(_) => "event",
            ReqState::Deferred(_) => "deferred",
            ReqState::Done => "done",
        };
        f.debug_struct("GpuRequest").field("state", &s).finish()
    }
}

impl<'a> GpuRequest<'a> {
    fn after(stream: &CudaStream) -> Result<Self> {
        let ev = stream.record_event(None).map_err(driver_err)?;
        Ok(Self {
            state: ReqState::Event(ev),
        })
    }

    fn deferred(f: impl FnOnce() -> Result<()> + 'a) -> Self {
        Self {
            state: ReqState::Deferred(Box::new(f)),
        }
    }

    /// Whether the collective has completed on the device.
    pub fn test(&mut self) -> Result<bool> {
        match std::mem::replace(&mut self.state, ReqState::Done) {
            ReqState::Event(ev) => {
                if ev.try_is_complete().map_err(driver_err)? {
                    Ok(true)
                } else {
                    self.state = ReqState::Event(ev);
                    Ok(false)
                }
            }
            ReqState::Deferred(f) => f().map(|_| true),
            ReqState::Done => Ok(true),
        }
    }

    /// Blocks until the collective has completed on the device.
    pub fn wait(mut self) -> Result<()> {
        match std::mem::replace(&mut self.state, ReqState::Done) {
            ReqState::Event(ev) => ev.synchronize().map_err(driver_err),
            ReqState::Deferred(f) => f(),
            ReqState::Done => Ok(()),
        }
    }
}
