//! Element types, reduction operations and the local reduction kernel.
//!
//! [`apply_reduce`] is what an engine calls for every
//! [`Step::Reduce`](crate::Step::Reduce): it combines `src` into `dst`
//! element-wise (`dst[i] = dst[i] ⊕ src[i]`).
//!
//! The kernel dispatches on `(op, dtype)` **once per call** and then runs a
//! monomorphised tight loop over fixed-size chunks (`chunks_exact` +
//! `from_ne_bytes`/`to_ne_bytes`), which the compiler turns into vector code
//! for the 32/64-bit types. It is entirely safe code and works for any
//! alignment of the byte slices; there is no per-element dispatch.
//!
//! Semantics of the built-in operations:
//!
//! * integers: `Sum` and `Prod` wrap on overflow (two's complement), `Min`,
//!   `Max` compare as the signed/unsigned type, `Band`/`Bor`/`Bxor` are
//!   bitwise;
//! * floats (`f16`, `bf16`, `f32`, `f64`): IEEE arithmetic; `Min`/`Max`
//!   follow [`f32::min`]/[`f32::max`] (a NaN operand is ignored); `f16` and
//!   `bf16` compute in `f32` and round back once per operation; bitwise
//!   operations are rejected with [`ReduceError::Unsupported`].
//!
//! **Floating-point determinism.** Every schedule fixes which rank combines
//! which partial results in which order, so the same collective with the
//! same rank count, counts and algorithm produces bit-identical results on
//! every run, and every rank of an allreduce receives the same bits. Results
//! may differ (in the last bits) between algorithms or rank counts.
//!
//! ```
//! use hpc_collectives::{apply_reduce, DataType, ReduceOp};
//!
//! let src: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|x| x.to_ne_bytes()).collect();
//! let mut dst: Vec<u8> = [10.0f32, 20.0].iter().flat_map(|x| x.to_ne_bytes()).collect();
//! apply_reduce(ReduceOp::Sum, DataType::F32, &src, &mut dst).unwrap();
//! assert_eq!(f32::from_ne_bytes(dst[4..8].try_into().unwrap()), 22.0);
//! ```

use std::collections::HashMap;
use std::fmt;

use half::{bf16, f16};
use serde::{Deserialize, Serialize};

/// Element type of the data being reduced (or, for data-movement
/// collectives, the unit in which counts are given).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DataType {
    /// `i8`.
    I8,
    /// `i16`.
    I16,
    /// `i32`.
    I32,
    /// `i64`.
    I64,
    /// `u8`.
    U8,
    /// `u16`.
    U16,
    /// `u32`.
    U32,
    /// `u64`.
    U64,
    /// IEEE 754 half precision ([`half::f16`]).
    F16,
    /// bfloat16 ([`half::bf16`]).
    Bf16,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
}

impl DataType {
    /// Every supported element type.
    pub const ALL: [DataType; 12] = [
        DataType::I8,
        DataType::I16,
        DataType::I32,
        DataType::I64,
        DataType::U8,
        DataType::U16,
        DataType::U32,
        DataType::U64,
        DataType::F16,
        DataType::Bf16,
        DataType::F32,
        DataType::F64,
    ];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DataType::I8 | DataType::U8 => 1,
            DataType::I16 | DataType::U16 | DataType::F16 | DataType::Bf16 => 2,
            DataType::I32 | DataType::U32 | DataType::F32 => 4,
            DataType::I64 | DataType::U64 | DataType::F64 => 8,
        }
    }

    /// Whether this is an integer type (bitwise operations allowed).
    pub const fn is_integer(self) -> bool {
        !self.is_float()
    }

    /// Whether this is a floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::F16 | DataType::Bf16 | DataType::F32 | DataType::F64
        )
    }

    /// Lower-case name, as used by [`Display`](fmt::Display) (`"f32"`, `"bf16"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DataType::I8 => "i8",
            DataType::I16 => "i16",
            DataType::I32 => "i32",
            DataType::I64 => "i64",
            DataType::U8 => "u8",
            DataType::U16 => "u16",
            DataType::U32 => "u32",
            DataType::U64 => "u64",
            DataType::F16 => "f16",
            DataType::Bf16 => "bf16",
            DataType::F32 => "f32",
            DataType::F64 => "f64",
        }
    }
}

crate::display_by_name!(DataType);

/// A reduction operation.
///
/// All operations, including custom ones, are assumed to be associative and
/// commutative (like MPI's built-in operations); the schedules combine
/// partial results in an order that depends on the algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReduceOp {
    /// Sum (wrapping for integers).
    Sum,
    /// Product (wrapping for integers).
    Prod,
    /// Minimum. For floats, a NaN operand is ignored (as `f64::min`), and
    /// `-0` is below `+0`, so that every rank gets the same bits whatever
    /// order its algorithm combines them in.
    Min,
    /// Maximum. For floats, a NaN operand is ignored (as `f64::max`), and
    /// `+0` is above `-0`.
    Max,
    /// Bitwise and (integers only).
    Band,
    /// Bitwise or (integers only).
    Bor,
    /// Bitwise exclusive or (integers only).
    Bxor,
    /// A user-defined operation, identified by an engine-local id. The
    /// schedule only carries the id; the engine applies it, for example
    /// through a [`CustomOps`] registry of closures.
    Custom(u32),
}

impl ReduceOp {
    /// The built-in operations.
    pub const BUILTIN: [ReduceOp; 7] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Band,
        ReduceOp::Bor,
        ReduceOp::Bxor,
    ];

    /// Whether this is a bitwise operation.
    pub const fn is_bitwise(self) -> bool {
        matches!(self, ReduceOp::Band | ReduceOp::Bor | ReduceOp::Bxor)
    }

    /// Whether `self` may be applied to elements of type `dtype`
    /// (bitwise operations need an integer type; custom operations are
    /// accepted for every type).
    pub const fn supports(self, dtype: DataType) -> bool {
        !self.is_bitwise() || dtype.is_integer()
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReduceOp::Sum => f.write_str("sum"),
            ReduceOp::Prod => f.write_str("prod"),
            ReduceOp::Min => f.write_str("min"),
            ReduceOp::Max => f.write_str("max"),
            ReduceOp::Band => f.write_str("band"),
            ReduceOp::Bor => f.write_str("bor"),
            ReduceOp::Bxor => f.write_str("bxor"),
            ReduceOp::Custom(id) => write!(f, "custom#{id}"),
        }
    }
}

/// Errors of the reduction kernel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReduceError {
    /// `src` and `dst` differ in length.
    #[error("reduce: source is {src} bytes but destination is {dst} bytes")]
    LengthMismatch {
        /// Source length in bytes.
        src: usize,
        /// Destination length in bytes.
        dst: usize,
    },
    /// The length is not a multiple of the element size.
    #[error("reduce: {len} bytes is not a multiple of the {dtype} element size")]
    NotMultiple {
        /// Length in bytes.
        len: usize,
        /// Element type.
        dtype: DataType,
    },
    /// The operation is not defined for the element type (bitwise on floats).
    #[error("reduce: operation {op} is not supported for {dtype}")]
    Unsupported {
        /// Operation.
        op: ReduceOp,
        /// Element type.
        dtype: DataType,
    },
    /// A custom operation that the kernel (or registry) does not know.
    #[error("reduce: custom operation {0} is not registered")]
    UnknownCustom(u32),
}

/// A plain-old-data element that can be loaded from / stored to native
/// endian bytes.
trait Elem: Copy {
    const N: usize;
    fn load(b: &[u8]) -> Self;
    fn store(self, b: &mut [u8]);
}

macro_rules! elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const N: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn load(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_ne_bytes(a)
            }
            #[inline(always)]
            fn store(self, b: &mut [u8]) {
                b.copy_from_slice(&self.to_ne_bytes());
            }
        }
    )*};
}
elem!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64, f16, bf16);

/// The monomorphised inner loop: `dst[i] = f(dst[i], src[i])`.
#[inline(always)]
fn zip_apply<T: Elem>(src: &[u8], dst: &mut [u8], f: impl Fn(T, T) -> T) {
    for (d, s) in dst.chunks_exact_mut(T::N).zip(src.chunks_exact(T::N)) {
        f(T::load(d), T::load(s)).store(d);
    }
}

macro_rules! int_kernel {
    ($t:ty, $op:expr, $src:expr, $dst:expr) => {
        match $op {
            ReduceOp::Sum => zip_apply::<$t>($src, $dst, |a, b| a.wrapping_add(b)),
            ReduceOp::Prod => zip_apply::<$t>($src, $dst, |a, b| a.wrapping_mul(b)),
            ReduceOp::Min => zip_apply::<$t>($src, $dst, |a, b| a.min(b)),
            ReduceOp::Max => zip_apply::<$t>($src, $dst, |a, b| a.max(b)),
            ReduceOp::Band => zip_apply::<$t>($src, $dst, |a, b| a & b),
            ReduceOp::Bor => zip_apply::<$t>($src, $dst, |a, b| a | b),
            ReduceOp::Bxor => zip_apply::<$t>($src, $dst, |a, b| a ^ b),
            ReduceOp::Custom(id) => return Err(ReduceError::UnknownCustom(id)),
        }
    };
}

/// The smaller (`min`, `-0` wins a tie of zeros) or the larger (`max`, `+0`
/// wins) of two floats as `f32::min` and `f32::max` give them (a NaN operand
/// ignored), whatever the order of the operands: `f32::min` returns either
/// zero by that order, so the ranks of an allreduce that combine them in other
/// orders got zeros of different signs.
macro_rules! float_pick {
    ($a:expr, $b:expr, $pick:ident, $negative_wins:expr) => {{
        let (a, b) = ($a, $b);
        if a == b {
            if a.is_sign_negative() == $negative_wins {
                a
            } else {
                b
            }
        } else {
            a.$pick(b)
        }
    }};
}

/// `dst[i] = f(dst[i], src[i])` for a float type, where a NaN result is made
/// `nan`, the type's one quiet NaN: which operand's payload a NaN result
/// carries depends on the order of the operands (and on the compiler), so the
/// ranks of an allreduce that combine NaNs of different payloads in other
/// orders got NaNs of different bits, where every rank's result is to be the
/// same bits. In blocks of 256 elements, each noting whether it made a NaN as
/// it computes and rewritten only then: a select per element made the
/// kernels 1.5 times slower on data in cache, this costs what
/// [`zip_apply`] does.
#[inline(always)]
fn zip_apply_float<T: Elem>(
    src: &[u8],
    dst: &mut [u8],
    f: impl Fn(T, T) -> T,
    is_nan: impl Fn(T) -> bool,
    nan: T,
) {
    const BLOCK: usize = 256;
    for (db, sb) in dst.chunks_mut(BLOCK * T::N).zip(src.chunks(BLOCK * T::N)) {
        let mut any = false;
        for (d, s) in db.chunks_exact_mut(T::N).zip(sb.chunks_exact(T::N)) {
            let x = f(T::load(d), T::load(s));
            any |= is_nan(x);
            x.store(d);
        }
        if any {
            for d in db.chunks_exact_mut(T::N) {
                if is_nan(T::load(d)) {
                    nan.store(d);
                }
            }
        }
    }
}

macro_rules! float_kernel {
    ($t:ty, $dtype:expr, $op:expr, $src:expr, $dst:expr) => {
        match $op {
            ReduceOp::Sum => {
                zip_apply_float::<$t>($src, $dst, |a, b| a + b, <$t>::is_nan, <$t>::NAN)
            }
            ReduceOp::Prod => {
                zip_apply_float::<$t>($src, $dst, |a, b| a * b, <$t>::is_nan, <$t>::NAN)
            }
            ReduceOp::Min => zip_apply_float::<$t>(
                $src,
                $dst,
                |a, b| float_pick!(a, b, min, true),
                <$t>::is_nan,
                <$t>::NAN,
            ),
            ReduceOp::Max => zip_apply_float::<$t>(
                $src,
                $dst,
                |a, b| float_pick!(a, b, max, false),
                <$t>::is_nan,
                <$t>::NAN,
            ),
            ReduceOp::Custom(id) => return Err(ReduceError::UnknownCustom(id)),
            op => return Err(ReduceError::Unsupported { op, dtype: $dtype }),
        }
    };
}

macro_rules! half_kernel {
    ($t:ty, $dtype:expr, $op:expr, $src:expr, $dst:expr) => {
        match $op {
            ReduceOp::Sum => zip_apply_float::<$t>(
                $src,
                $dst,
                |a, b| <$t>::from_f32(a.to_f32() + b.to_f32()),
                |x: $t| x.is_nan(),
                <$t>::NAN,
            ),
            ReduceOp::Prod => zip_apply_float::<$t>(
                $src,
                $dst,
                |a, b| <$t>::from_f32(a.to_f32() * b.to_f32()),
                |x: $t| x.is_nan(),
                <$t>::NAN,
            ),
            ReduceOp::Min => zip_apply_float::<$t>(
                $src,
                $dst,
                |a, b| <$t>::from_f32(float_pick!(a.to_f32(), b.to_f32(), min, true)),
                |x: $t| x.is_nan(),
                <$t>::NAN,
            ),
            ReduceOp::Max => zip_apply_float::<$t>(
                $src,
                $dst,
                |a, b| <$t>::from_f32(float_pick!(a.to_f32(), b.to_f32(), max, false)),
                |x: $t| x.is_nan(),
                <$t>::NAN,
            ),
            ReduceOp::Custom(id) => return Err(ReduceError::UnknownCustom(id)),
            op => return Err(ReduceError::Unsupported { op, dtype: $dtype }),
        }
    };
}

/// Checks the arguments of a reduction without touching the data.
fn check(op: ReduceOp, dtype: DataType, src: &[u8], dst: &[u8]) -> Result<(), ReduceError> {
    if src.len() != dst.len() {
        return Err(ReduceError::LengthMismatch {
            src: src.len(),
            dst: dst.len(),
        });
    }
    if src.len() % dtype.size() != 0 {
        return Err(ReduceError::NotMultiple {
            len: src.len(),
            dtype,
        });
    }
    if !op.supports(dtype) {
        return Err(ReduceError::Unsupported { op, dtype });
    }
    Ok(())
}

/// Combines `src` into `dst` element-wise: `dst[i] = dst[i] ⊕ src[i]`.
///
/// Both slices hold native-endian elements of type `dtype`; they may have
/// any alignment. Errors if the lengths differ or are not a multiple of the
/// element size, if `op` is bitwise and `dtype` is a float, or if `op` is
/// [`ReduceOp::Custom`] (custom operations are applied by the engine, see
/// [`CustomOps`]). On error `dst` is left unchanged. A float result that is
/// a NaN is the type's one quiet NaN (`f64::NAN`, ...), whatever the
/// operands' payloads, so that every rank of an allreduce gets the same bits.
pub fn apply_reduce(
    op: ReduceOp,
    dtype: DataType,
    src: &[u8],
    dst: &mut [u8],
) -> Result<(), ReduceError> {
    check(op, dtype, src, dst)?;
    match dtype {
        DataType::I8 => int_kernel!(i8, op, src, dst),
        DataType::I16 => int_kernel!(i16, op, src, dst),
        DataType::I32 => int_kernel!(i32, op, src, dst),
        DataType::I64 => int_kernel!(i64, op, src, dst),
        DataType::U8 => int_kernel!(u8, op, src, dst),
        DataType::U16 => int_kernel!(u16, op, src, dst),
        DataType::U32 => int_kernel!(u32, op, src, dst),
        DataType::U64 => int_kernel!(u64, op, src, dst),
        DataType::F16 => half_kernel!(f16, dtype, op, src, dst),
        DataType::Bf16 => half_kernel!(bf16, dtype, op, src, dst),
        DataType::F32 => float_kernel!(f32, dtype, op, src, dst),
        DataType::F64 => float_kernel!(f64, dtype, op, src, dst),
    }
    Ok(())
}

/// A user-supplied reduction: `f(dtype, src, dst)` must compute
/// `dst[i] = dst[i] ⊕ src[i]` for the elements in the byte slices.
pub type CustomFn = Box<dyn Fn(DataType, &[u8], &mut [u8]) + Send + Sync>;

/// A registry of user-defined reductions for in-process engines.
///
/// Schedules carry only [`ReduceOp::Custom`]`(id)`; an engine running in
/// the user's process keeps the closures here and calls
/// [`CustomOps::apply`] instead of [`apply_reduce`].
///
/// ```
/// use hpc_collectives::{CustomOps, DataType, ReduceOp};
///
/// let mut ops = CustomOps::new();
/// // "keep the larger absolute value" on i32
/// let id = ops.register(|_dtype, src, dst| {
///     for (d, s) in dst.chunks_exact_mut(4).zip(src.chunks_exact(4)) {
///         let a = i32::from_ne_bytes(d.try_into().unwrap());
///         let b = i32::from_ne_bytes(s.try_into().unwrap());
///         if b.unsigned_abs() > a.unsigned_abs() {
///             d.copy_from_slice(&b.to_ne_bytes());
///         }
///     }
/// });
/// let src = (-7i32).to_ne_bytes();
/// let mut dst = 3i32.to_ne_bytes();
/// ops.apply(ReduceOp::Custom(id), DataType::I32, &src, &mut dst).unwrap();
/// assert_eq!(i32::from_ne_bytes(dst), -7);
/// ```
#[derive(Default)]
pub struct CustomOps {
    ops: HashMap<u32, CustomFn>,
    next: u32,
}

impl fmt::Debug for CustomOps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ids: Vec<_> = self.ops.keys().copied().collect();
        ids.sort_unstable();
        f.debug_struct("CustomOps").field("ids", &ids).finish()
    }
}

impl CustomOps {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `f` and returns its id for [`ReduceOp::Custom`].
    pub fn register(
        &mut self,
        f: impl Fn(DataType, &[u8], &mut [u8]) + Send + Sync + 'static,
    ) -> u32 {
        while self.ops.contains_key(&self.next) {
            self.next += 1;
        }
        let id = self.next;
        self.ops.insert(id, Box::new(f));
        self.next += 1;
        id
    }

    /// Registers `f` under a caller-chosen id, replacing any previous one.
    pub fn insert(
        &mut self,
        id: u32,
        f: impl Fn(DataType, &[u8], &mut [u8]) + Send + Sync + 'static,
    ) {
        self.ops.insert(id, Box::new(f));
    }

    /// Applies `op`: built-in operations go to [`apply_reduce`], custom ones
    /// to the registered closure (after the same length checks).
    pub fn apply(
        &self,
        op: ReduceOp,
        dtype: DataType,
        src: &[u8],
        dst: &mut [u8],
    ) -> Result<(), ReduceError> {
        match op {
            ReduceOp::Custom(id) => {
                let f = self.ops.get(&id).ok_or(ReduceError::UnknownCustom(id))?;
                check(op, dtype, src, dst)?;
                f(dtype, src, dst);
                Ok(())
            }
            _ => apply_reduce(op, dtype, src, dst),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T: Elem>(v: &[T]) -> Vec<u8> {
        let mut out = vec![0u8; v.len() * T::N];
        for (c, x) in out.chunks_exact_mut(T::N).zip(v) {
            x.store(c);
        }
        out
    }

    fn vals<T: Elem>(b: &[u8]) -> Vec<T> {
        b.chunks_exact(T::N).map(T::load).collect()
    }

    /// `dst` reduced with `src` by `op` over `dtype`, as values.
    fn reduced<T: Elem>(op: ReduceOp, dtype: DataType, dst: &[T], src: &[T]) -> Vec<T> {
        let mut d = bytes(dst);
        apply_reduce(op, dtype, &bytes(src), &mut d).unwrap();
        vals(&d)
    }

    /// A NaN with a payload at either end of a block of the float kernels
    /// (and in a last, short block) comes out as the one quiet NaN, and
    /// every other element as the plain operation gives it.
    #[test]
    fn a_nan_anywhere_in_a_block_is_the_one_nan_and_the_rest_is_untouched() {
        let payload = f64::from_bits(0x7ff8_0000_dead_beef);
        let n = 700;
        for at in [0usize, 1, 255, 256, 511, 512, 699] {
            let dst: Vec<f64> = (0..n).map(|i| i as f64 * 0.25).collect();
            let mut src: Vec<f64> = (0..n).map(|i| 1.0 - i as f64).collect();
            src[at] = payload;
            for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max] {
                let got = reduced(op, DataType::F64, &dst, &src);
                for i in 0..n {
                    if i == at {
                        // Min and Max ignore a NaN operand.
                        if matches!(op, ReduceOp::Sum | ReduceOp::Prod) {
                            assert_eq!(got[i].to_bits(), f64::NAN.to_bits(), "{op:?} at {at}");
                        }
                        continue;
                    }
                    let want = match op {
                        ReduceOp::Sum => dst[i] + src[i],
                        ReduceOp::Prod => dst[i] * src[i],
                        ReduceOp::Min => dst[i].min(src[i]),
                        _ => dst[i].max(src[i]),
                    };
                    assert_eq!(
                        got[i].to_bits(),
                        want.to_bits(),
                        "{op:?}, NaN at {at}, element {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn integer_ops() {
        let run = |op| reduced(op, DataType::I32, &[1, -2, i32::MAX, 12], &[3, 5, 1, 10]);
        assert_eq!(run(ReduceOp::Sum), vec![4, 3, i32::MIN, 22]);
        assert_eq!(run(ReduceOp::Prod), vec![3, -10, i32::MAX, 120]);
        assert_eq!(run(ReduceOp::Min), vec![1, -2, 1, 10]);
        assert_eq!(run(ReduceOp::Max), vec![3, 5, i32::MAX, 12]);
        assert_eq!(run(ReduceOp::Band), vec![1, 4, 1, 8]);
        assert_eq!(run(ReduceOp::Bor), vec![3, -1, i32::MAX, 14]);
        assert_eq!(run(ReduceOp::Bxor), vec![2, -5, i32::MAX - 1, 6]);
    }

    #[test]
    fn unsigned_min_is_unsigned() {
        assert_eq!(
            reduced::<u8>(ReduceOp::Min, DataType::U8, &[200, 1], &[100, 255]),
            vec![100, 1]
        );
    }

    #[test]
    fn float_and_half_ops() {
        assert_eq!(
            reduced::<f64>(ReduceOp::Sum, DataType::F64, &[1.5, -2.0], &[0.25, 4.0]),
            vec![1.75, 2.0]
        );

        let h = |x: f32| f16::from_f32(x);
        assert_eq!(
            reduced::<f16>(
                ReduceOp::Max,
                DataType::F16,
                &[h(1.0), h(3.0)],
                &[h(2.0), h(-1.0)]
            ),
            vec![h(2.0), h(3.0)]
        );

        let b = |x: f32| bf16::from_f32(x);
        assert_eq!(
            reduced::<bf16>(
                ReduceOp::Prod,
                DataType::Bf16,
                &[b(1.0), b(3.0)],
                &[b(2.0), b(-1.0)]
            ),
            vec![b(2.0), b(-3.0)]
        );
    }

    #[test]
    fn errors() {
        let mut d = vec![0u8; 8];
        assert_eq!(
            apply_reduce(ReduceOp::Bxor, DataType::F32, &[0u8; 8], &mut d),
            Err(ReduceError::Unsupported {
                op: ReduceOp::Bxor,
                dtype: DataType::F32
            })
        );
        assert!(matches!(
            apply_reduce(ReduceOp::Sum, DataType::F32, &[0u8; 4], &mut d),
            Err(ReduceError::LengthMismatch { .. })
        ));
        assert!(matches!(
            apply_reduce(ReduceOp::Sum, DataType::F32, &[0u8; 6], &mut d[..6]),
            Err(ReduceError::NotMultiple { .. })
        ));
        assert_eq!(
            apply_reduce(ReduceOp::Custom(3), DataType::U8, &[0u8; 8], &mut d),
            Err(ReduceError::UnknownCustom(3))
        );
        let ops = CustomOps::new();
        assert_eq!(
            ops.apply(ReduceOp::Custom(3), DataType::U8, &[0u8; 8], &mut d),
            Err(ReduceError::UnknownCustom(3))
        );
    }

    /// The kernel must give the same result for every alignment of its
    /// inputs (it reads through byte chunks, never typed references).
    #[test]
    fn misaligned_inputs() {
        for dtype in DataType::ALL {
            for op in ReduceOp::BUILTIN.into_iter().filter(|o| o.supports(dtype)) {
                let n = 37 * dtype.size();
                let src: Vec<u8> = (0..n + 8).map(|i| (i * 7 + 3) as u8).collect();
                let dst: Vec<u8> = (0..n + 8).map(|i| (i * 13 + 1) as u8).collect();
                let mut reference = dst[..n].to_vec();
                apply_reduce(op, dtype, &src[..n], &mut reference).unwrap();
                for so in 0..8 {
                    for d_off in 0..8 {
                        let mut d = dst.clone();
                        d.copy_within(0..n, d_off);
                        let mut s = src.clone();
                        s.copy_within(0..n, so);
                        apply_reduce(op, dtype, &s[so..so + n], &mut d[d_off..d_off + n]).unwrap();
                        let same = d[d_off..d_off + n]
                            .chunks_exact(dtype.size())
                            .zip(reference.chunks_exact(dtype.size()))
                            // NaN payloads may compare unequal as floats; compare bits
                            .all(|(x, y)| x == y);
                        assert!(same, "{op} {dtype} src+{so} dst+{d_off}");
                    }
                }
            }
        }
    }
}
