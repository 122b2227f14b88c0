//! The error type of this crate.

use crate::types::Dtype;

/// What can go wrong in a GPU collective. No operation of this crate panics
/// on a machine without a GPU or a driver: it returns one of these.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    /// The CUDA driver library (`libcuda.so`) could not be loaded, or it
    /// failed to initialise.
    #[error("no CUDA driver: {0}")]
    NoDriver(String),
    /// The driver loaded but there is no usable device.
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    /// NCCL is missing, failed, or refused the communicator.
    #[error("NCCL: {0}")]
    Nccl(String),
    /// A CUDA driver call failed.
    #[error("CUDA driver: {0}")]
    Driver(String),
    /// NVRTC is missing or failed to compile the reduction kernels.
    #[error("NVRTC: {0}")]
    Nvrtc(String),
    /// Buffers or arguments disagree (lengths, ranks, roots).
    #[error("mismatch in {what}: expected {expected}, got {got}")]
    Mismatch {
        /// Which argument.
        what: &'static str,
        /// What was expected.
        expected: usize,
        /// What was given.
        got: usize,
    },
    /// The element type does not support the operation (reserved: every
    /// built-in pair is supported today).
    #[error("{op} is not supported for {dtype}")]
    Unsupported {
        /// The operation.
        op: &'static str,
        /// The element type.
        dtype: Dtype,
    },
    /// The plan of a native collective could not be built (a schedule whose
    /// rounds do not line up across ranks; an internal error).
    #[error("plan: {0}")]
    Plan(String),
    /// Bootstrap exchange through the `World` failed.
    #[error("runtime: {0}")]
    Runtime(#[from] hpc_runtime::Error),
    /// The host transport (cross-node path) failed.
    #[error("transport: {0}")]
    Transport(#[from] hpc_rdma::Error),
    /// Topology discovery failed.
    #[error("topology: {0}")]
    Topology(#[from] hpc_topology::TopologyError),
}

/// `Result` with [`GpuError`].
pub type Result<T, E = GpuError> = std::result::Result<T, E>;
