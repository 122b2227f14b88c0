//! GPU collectives for hpc-rs.
//!
//! [`GpuComm`] runs allreduce, reduce-scatter, allgather and broadcast on
//! CUDA device buffers ([`cudarc::driver::CudaSlice`]) across the ranks of
//! an [`hpc_runtime::World`], enqueued on a given [`cudarc::driver::CudaStream`],
//! for `f32`, `f64`, [`half::f16`], [`half::bf16`] and `i32` with
//! [`GpuOp::Sum`], [`GpuOp::Prod`], [`GpuOp::Min`] and [`GpuOp::Max`],
//! in place and out of place, blocking or as a [`GpuRequest`] with
//! `test()`/`wait()`.
//!
//! # Backends
//!
//! * **NCCL** (through `cudarc::nccl`): rank 0 creates the unique id, the
//!   [`World`](hpc_runtime::World) broadcasts it, every rank joins one
//!   communicator on its own device. Used whenever NCCL loads and every
//!   rank has a GPU of its own.
//! * **Native**: the ring reduce-scatter and ring allgather schedules of
//!   `hpc-collectives`, turned into [`plan::Plan`]s of device copies and
//!   reduction-kernel launches (CUDA C++ from [`kernel::source`], compiled
//!   at run time by NVRTC; 16-byte vector loads, grid-stride loops). Data
//!   moves device to device through CUDA IPC between ranks of one node, and
//!   through pinned host buffers over `hpc-rdma` between nodes. Used when
//!   NCCL is absent or refuses, notably with several ranks on one GPU
//!   (NCCL rejects duplicate devices in a communicator).
//!
//! # Device choice
//!
//! With `CUDA_VISIBLE_DEVICES` set, local rank `r` takes visible device
//! `r % count`; otherwise the GPU nearest to the rank's cores, never two
//! ranks on one GPU while a free one exists ([`device::assign`]).
//!
//! # Without a GPU
//!
//! Everything compiles without CUDA installed (the driver, NVRTC and NCCL
//! are loaded at run time). On a machine without a driver,
//! [`GpuComm::new`] returns [`GpuError::NoDriver`]; without a device,
//! [`GpuError::NoDevice`]. Nothing panics: the driver's presence is checked
//! before cudarc is touched, and cudarc calls that could still panic run
//! under `catch_unwind`.
//!
//! # What has run where
//!
//! Nothing of the CUDA path has run on a GPU yet: not NCCL, not the NVRTC kernels,
//! not CUDA IPC, not the pinned host buffers across nodes. What has run, on machines
//! without a GPU, is the CPU side: chunking, plans executed on host memory, device
//! choice, the kernel source and the bandwidth arithmetic, and the typed errors above
//! ([`GpuError::NoDriver`]). `benches/gpu/check.sh` (part of `benches/device.sh`) is
//! the check to run on a GPU machine; until it has run, treat the device code as
//! unverified (the book's chapter "GPU collectives" says the same).
//!
//! # Cargo features
//!
//! * `cuda` (default): [`GpuComm`] and the CUDA code. cudarc is built with
//!   `dynamic-loading`, so this needs no CUDA toolkit at build time, which
//!   is why it is on by default. Without it, the pure planning layer
//!   remains ([`chunk`], [`plan`], [`device`], [`kernel`], [`bandwidth`]),
//!   for tools that only reason about GPU collectives.
//!
//! # Example
//!
//! ```no_run
//! # #[cfg(feature = "cuda")] {
//! use hpc_gpu::{GpuComm, GpuOp};
//!
//! let world = hpc_runtime::World::init()?;
//! let comm = GpuComm::new(&world)?;
//! let stream = comm.stream();
//! let mut x = stream.clone_htod(&vec![world.rank() as f32; 1 << 20]).unwrap();
//! comm.all_reduce_in_place(&mut x, GpuOp::Sum, &stream)?;
//! stream.synchronize().unwrap();
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod bandwidth;
pub mod chunk;
pub mod device;
mod error;
pub mod kernel;
pub mod plan;
mod types;

#[cfg(feature = "cuda")]
mod cuda;

pub use error::{GpuError, Result};
pub use types::{Dtype, Element, GpuOp};

#[cfg(feature = "cuda")]
pub use cuda::{Backend, BackendChoice, GpuComm, GpuElement, GpuRequest, Options};

/// The cudarc crate this crate is built against, re-exported so that
/// applications use the same types.
#[cfg(feature = "cuda")]
pub use cudarc;

#[cfg(test)]
mod plan_tests;
