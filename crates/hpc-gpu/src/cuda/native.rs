//! The native backend: plans executed with device copies, NVRTC kernels,
//! CUDA IPC windows (same node) and pinned host transfers over `hpc-rdma`
//! (other nodes).

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{
    sys, CudaContext, CudaFunction, CudaModule, CudaStream, LaunchConfig, PushKernelArg,
};
use hpc_runtime::World;

use super::host_link::HostLink;
use super::{driver_err, GpuError, Result};
use crate::kernel::{self, BLOCK};
use crate::plan::{Buf, Loc, Op, Plan};
use crate::types::{Dtype, GpuOp};

/// A device allocation made with `cuMemAlloc` (IPC-shareable, unlike
/// stream-ordered allocations) and a peer's window mapped through IPC.
struct Window {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
    bytes: usize,
    /// Peer windows mapped into this process, by rank (`None`: self or
    /// another node).
    peers: Vec<Option<sys::CUdeviceptr>>,
}

impl Window {
    fn close(&mut self) {
        if self.ctx.bind_to_thread().is_err() {
            return;
        }
        for p in self.peers.iter_mut() {
            if let Some(ptr) = p.take() {
                // SAFETY: `ptr` came from cuIpcOpenMemHandle in this context and is
                // closed once (taken out of the option).
                let _ = unsafe { sys::cuIpcCloseMemHandle(ptr) };
            }
        }
        if self.ptr != 0 {
            // SAFETY: `ptr` was allocated by cuMemAlloc in this context and is freed
            // once (zeroed right after); peers closed their mappings before the
            // barrier that precedes every free (see `Native::ensure_window`).
            let _ = unsafe { sys::cuMemFree_v2(self.ptr) };
            self.ptr = 0;
        }
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        self.close();
    }
}

/// State of the native backend of one rank.
pub(crate) struct Native {
    ctx: Arc<CudaContext>,
    window: Option<Window>,
    module: Option<Arc<CudaModule>>,
    functions: HashMap<String, CudaFunction>,
    max_blocks: u32,
    link: Option<Box<dyn HostLink>>,
    /// Per-collective sequence number (tags of host messages).
    seq: u64,
}

impl Native {
    pub(crate) fn new(ctx: Arc<CudaContext>, link: Option<Box<dyn HostLink>>) -> Result<Self> {
        let sms = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(driver_err)?;
        Ok(Self {
            ctx,
            window: None,
            module: None,
            functions: HashMap::new(),
            max_blocks: (sms.max(1) as u32) * 8,
            link,
            seq: 0,
        })
    }

    /// Compiles the kernels (once) and returns the one for `op` on `dtype`.
    pub(crate) fn function(
        &mut self,
        op: GpuOp,
        dtype: Dtype,
        vector: bool,
    ) -> Result<CudaFunction> {
        let name = kernel::kernel_name(op, dtype, vector);
        if let Some(f) = self.functions.get(&name) {
            return Ok(f.clone());
        }
        if self.module.is_none() {
            // SAFETY: only loads the NVRTC library to see whether it exists.
            if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
                return Err(GpuError::Nvrtc("libnvrtc could not be loaded".into()));
            }
            let (major, minor) = self.ctx.compute_capability().map_err(driver_err)?;
            let arch: &'static str = Box::leak(format!("compute_{major}{minor}").into_boxed_str());
            let opts = cudarc::nvrtc::CompileOptions {
                arch: Some(arch),
                ..Default::default()
            };
            let src = kernel::source();
            let ptx = std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(src, opts))
                .map_err(|_| GpuError::Nvrtc("NVRTC panicked".into()))?
                .map_err(|e| GpuError::Nvrtc(format!("{e:?}")))?;
            self.module = Some(self.ctx.load_module(ptx).map_err(driver_err)?);
        }
        let module = self.module.as_ref().expect("module loaded above");
        let f = module.load_function(&name).map_err(driver_err)?;
        self.functions.insert(name, f.clone());
        Ok(f)
    }

    /// Enqueues `dst = dst ⊕ src` for `n` elements at raw device pointers.
    pub(crate) fn reduce_raw(
        &mut self,
        stream: &CudaStream,
        op: GpuOp,
        dtype: Dtype,
        dst: sys::CUdeviceptr,
        src: sys::CUdeviceptr,
        n: usize,
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let vector = (dst | src) % 16 == 0;
        let f = self.function(op, dtype, vector)?;
        let per = if vector { dtype.per_vector() } else { 1 };
        let cfg = LaunchConfig {
            grid_dim: (kernel::grid_for(n, per, self.max_blocks), 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let n64 = n as u64;
        let mut b = stream.launch_builder(&f);
        b.arg(&dst).arg(&src).arg(&n64);
        // SAFETY: the kernel takes (T*, const T*, unsigned long long); `dst` and
        // `src` point to at least `n` elements of `dtype` in this context (the
        // plan's ranges lie within buffers checked by the caller), `n` fits.
        unsafe { b.launch(cfg) }.map_err(driver_err)?;
        Ok(())
    }

    /// Makes the window at least `bytes` long on every rank (collective:
    /// every rank calls it with the same `bytes`) and maps the peers' windows.
    fn ensure_window(&mut self, world: &World, bytes: usize) -> Result<()> {
        if self.window.as_ref().is_some_and(|w| w.bytes >= bytes) || bytes == 0 {
            return Ok(());
        }
        if let Some(mut old) = self.window.take() {
            // Close peer mappings everywhere before anyone frees.
            for p in old.peers.iter_mut() {
                if let Some(ptr) = p.take() {
                    // SAFETY: opened by cuIpcOpenMemHandle in this context, closed once.
                    let _ = unsafe { sys::cuIpcCloseMemHandle(ptr) };
                }
            }
            world.barrier()?;
            old.close();
        }
        let alloc = bytes.next_power_of_two().max(1 << 20);
        self.ctx.bind_to_thread().map_err(driver_err)?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: cuMemAlloc writes one device pointer into `ptr`; the context is
        // bound to this thread.
        unsafe { sys::cuMemAlloc_v2(&mut ptr, alloc) }
            .result()
            .map_err(driver_err)?;
        let mut window = Window {
            ctx: self.ctx.clone(),
            ptr,
            bytes: alloc,
            peers: vec![None; world.size()],
        };
        let mut handle = sys::CUipcMemHandle_st { reserved: [0; 64] };
        // SAFETY: `ptr` is the base of a cuMemAlloc allocation of this context;
        // the driver fills the 64-byte handle.
        unsafe { sys::cuIpcGetMemHandle(&mut handle, ptr) }
            .result()
            .map_err(driver_err)?;
        let mine: Vec<u8> = handle.reserved.iter().map(|&c| c as u8).collect();
        let all = world.allgather(&mine)?;
        for (p, h) in all.iter().enumerate() {
            if p == world.rank() || !world.same_node(p, world.rank()) {
                continue;
            }
            if h.len() != 64 {
                return Err(GpuError::Mismatch {
                    what: "IPC handle length",
                    expected: 64,
                    got: h.len(),
                });
            }
            let mut ph = sys::CUipcMemHandle_st { reserved: [0; 64] };
            for (d, s) in ph.reserved.iter_mut().zip(h) {
                *d = *s as _;
            }
            let mut peer: sys::CUdeviceptr = 0;
            // SAFETY: `ph` is a handle another process of this node got from
            // cuIpcGetMemHandle for a live allocation (it frees only after the
            // barrier that follows everyone's close); the driver writes the mapping.
            unsafe {
                sys::cuIpcOpenMemHandle_v2(
                    &mut peer,
                    ph,
                    sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
                )
            }
            .result()
            .map_err(driver_err)?;
            window.peers[p] = Some(peer);
        }
        self.window = Some(window);
        world.barrier()?;
        Ok(())
    }

    /// Runs `plan` with the given input and output base pointers (bytes
    /// ranges checked by the caller) on `stream`; returns when the plan is
    /// complete on every rank.
    pub(crate) fn execute(
        &mut self,
        world: &World,
        stream: &CudaStream,
        plan: &Plan,
        input: sys::CUdeviceptr,
        output: sys::CUdeviceptr,
    ) -> Result<()> {
        self.ensure_window(world, plan.window_bytes)?;
        self.seq += 1;
        let win = self.window.as_ref().map_or(0, |w| w.ptr);
        let peers: Vec<Option<sys::CUdeviceptr>> = self
            .window
            .as_ref()
            .map_or_else(|| vec![None; world.size()], |w| w.peers.clone());
        let at = |l: Loc| -> sys::CUdeviceptr {
            let base = match l.buf {
                Buf::Input => input,
                Buf::Output => output,
                Buf::Window => win,
            };
            base + l.offset as u64
        };
        let cu_stream = stream.cu_stream();
        for (j, phase) in plan.phases.iter().enumerate() {
            let mut lands = Vec::new();
            for op in &phase.ops {
                match *op {
                    Op::Copy { src, dst } => {
                        if at(src) != at(dst) {
                            copy(at(dst), at(src), src.len, cu_stream)?;
                        }
                    }
                    Op::Reduce { src, dst } => {
                        let gop = plan
                            .op
                            .ok_or_else(|| GpuError::Plan("reduce without op".into()))?;
                        self.reduce_raw(
                            stream,
                            gop,
                            plan.dtype,
                            at(dst),
                            at(src),
                            src.len / plan.dtype.size(),
                        )?;
                    }
                    Op::Put { peer, src, dst } => match peers[peer] {
                        Some(base) => copy(base + dst.offset as u64, at(src), src.len, cu_stream)?,
                        None => {
                            let link = self.link.as_ref().ok_or_else(|| {
                                GpuError::Plan(format!(
                                    "rank {peer} is neither on this node nor reachable"
                                ))
                            })?;
                            stream.synchronize().map_err(driver_err)?;
                            let data = super::host_link::download(&self.ctx, at(src), src.len)?;
                            link.send(peer, tag(self.seq, j, dst), data)?;
                        }
                    },
                    Op::Land { peer, dst } => {
                        if peers[peer].is_none() {
                            lands.push((peer, dst));
                        }
                    }
                }
            }
            if !lands.is_empty() {
                let link = self
                    .link
                    .as_ref()
                    .ok_or_else(|| GpuError::Plan("host transport missing".into()))?;
                for (peer, dst) in lands {
                    let data = link.recv(peer, tag(self.seq, j, dst))?;
                    if data.len() != dst.len {
                        return Err(GpuError::Mismatch {
                            what: "bytes received from a peer",
                            expected: dst.len,
                            got: data.len(),
                        });
                    }
                    super::host_link::upload(&self.ctx, at(dst), &data)?;
                }
            }
            stream.synchronize().map_err(driver_err)?;
            if let Some(link) = &self.link {
                link.flush()?;
            }
            world.barrier()?;
        }
        Ok(())
    }
}

fn tag(seq: u64, phase: usize, dst: Loc) -> u64 {
    (seq << 40) ^ ((phase as u64) << 32) ^ dst.offset as u64
}

/// `cuMemcpyDtoDAsync` of `len` bytes (peer windows included: IPC mappings
/// are device pointers of this context).
fn copy(
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    len: usize,
    stream: sys::CUstream,
) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: both ranges are `len` bytes inside live device allocations of this
    // context (user buffers checked by the caller, windows sized by the plan);
    // the ranges of one plan step never overlap.
    unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, len, stream) }.map_err(driver_err)
}
