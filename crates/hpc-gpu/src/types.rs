//! Element types and reduction operations.

use hpc_collectives::{DataType, ReduceOp};

/// Element type of a GPU buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    /// `f32` (`float`).
    F32,
    /// `f64` (`double`).
    F64,
    /// IEEE half precision, [`half::f16`].
    F16,
    /// bfloat16, [`half::bf16`].
    Bf16,
    /// `i32` (`int`).
    I32,
}

impl Dtype {
    /// Every supported element type.
    pub const ALL: [Dtype; 5] = [Dtype::F32, Dtype::F64, Dtype::F16, Dtype::Bf16, Dtype::I32];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F64 => 8,
        }
    }

    /// Elements per 16-byte vector (the unit of the reduction kernels).
    pub const fn per_vector(self) -> usize {
        16 / self.size()
    }

    /// Lower-case name (`f32`, `bf16`, ...), also used in kernel names.
    pub const fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F64 => "f64",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
            Dtype::I32 => "i32",
        }
    }

    /// The matching `hpc-collectives` data type.
    pub const fn data_type(self) -> DataType {
        match self {
            Dtype::F32 => DataType::F32,
            Dtype::F64 => DataType::F64,
            Dtype::F16 => DataType::F16,
            Dtype::Bf16 => DataType::Bf16,
            Dtype::I32 => DataType::I32,
        }
    }
}

hpc_collectives::display_by_name!(Dtype);

/// A reduction operation of [`GpuComm`](crate::GpuComm) collectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GpuOp {
    /// Sum (integers wrap on overflow).
    Sum,
    /// Product (integers wrap on overflow).
    Prod,
    /// Minimum (a NaN operand is ignored, as `fminf`).
    Min,
    /// Maximum (a NaN operand is ignored, as `fmaxf`).
    Max,
}

impl GpuOp {
    /// Every operation.
    pub const ALL: [GpuOp; 4] = [GpuOp::Sum, GpuOp::Prod, GpuOp::Min, GpuOp::Max];

    /// Lower-case name, also used in kernel names.
    pub const fn name(self) -> &'static str {
        match self {
            GpuOp::Sum => "sum",
            GpuOp::Prod => "prod",
            GpuOp::Min => "min",
            GpuOp::Max => "max",
        }
    }

    /// The matching `hpc-collectives` operation.
    pub const fn reduce_op(self) -> ReduceOp {
        match self {
            GpuOp::Sum => ReduceOp::Sum,
            GpuOp::Prod => ReduceOp::Prod,
            GpuOp::Min => ReduceOp::Min,
            GpuOp::Max => ReduceOp::Max,
        }
    }
}

hpc_collectives::display_by_name!(GpuOp);

mod sealed {
    pub trait Sealed {}
}

/// A Rust element type that GPU collectives accept: `f32`, `f64`,
/// [`half::f16`], [`half::bf16`], `i32`. Sealed.
pub trait Element: Copy + Send + Sync + 'static + sealed::Sealed {
    /// The element type tag.
    const DTYPE: Dtype;
}

macro_rules! element {
    ($t:ty, $d:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: Dtype = $d;
        }
    };
}

element!(f32, Dtype::F32);
element!(f64, Dtype::F64);
element!(half::f16, Dtype::F16);
element!(half::bf16, Dtype::Bf16);
element!(i32, Dtype::I32);
