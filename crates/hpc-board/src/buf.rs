//! What collectives accept as buffers: element types ([`Elem`]) and the
//! containers that hold them ([`Buf`], [`BufMut`]).

use half::{bf16, f16};
use hpc_collectives::DataType;

use crate::error::{Error, Result};

/// Element types collectives move: integer and float primitives, `f16`, `bf16`.
///
/// # Safety
/// Implementors must be plain data: no padding, every bit pattern valid, and
/// [`Elem::DTYPE`] of the same size.
pub unsafe trait Elem: Copy + Send + Sync + 'static {
    /// The matching [`DataType`].
    const DTYPE: DataType;
}

macro_rules! elem {
    ($($t:ty => $d:ident),*) => {$(
        // SAFETY: a primitive numeric type: no padding, all bit patterns valid.
        unsafe impl Elem for $t { const DTYPE: DataType = DataType::$d; }
    )*};
}
elem!(i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32,
      u64 => U64, f16 => F16, bf16 => Bf16, f32 => F32, f64 => F64);

/// A buffer collectives can read: slices, `Vec`s and contiguous `ndarray` arrays.
pub trait Buf {
    /// Element type.
    type Elem: Elem;
    /// The elements, or [`Error::NotContiguous`].
    fn elems(&self) -> Result<&[Self::Elem]>;
}

/// A buffer collectives can write.
pub trait BufMut: Buf {
    /// The elements, or [`Error::NotContiguous`].
    fn elems_mut(&mut self) -> Result<&mut [Self::Elem]>;
}

impl<T: Elem> Buf for [T] {
    type Elem = T;
    fn elems(&self) -> Result<&[T]> {
        Ok(self)
    }
}
impl<T: Elem> BufMut for [T] {
    fn elems_mut(&mut self) -> Result<&mut [T]> {
        Ok(self)
    }
}

/// [`Buf`] and [`BufMut`] for containers of `T` that dereference to `[T]`:
/// `Vec`, `hpc_comm::RegisteredBuf`, [`SharedBuf`](crate::shm::SharedBuf).
#[doc(hidden)]
#[macro_export]
macro_rules! slice_buf {
    ($($t:ty),*) => {$(
        impl<T: $crate::Elem> $crate::Buf for $t {
            type Elem = T;
            fn elems(&self) -> $crate::Result<&[T]> {
                Ok(self)
            }
        }
        impl<T: $crate::Elem> $crate::BufMut for $t {
            fn elems_mut(&mut self) -> $crate::Result<&mut [T]> {
                Ok(self)
            }
        }
    )*};
}

slice_buf!(Vec<T>);
impl<T: Elem, const N: usize> Buf for [T; N] {
    type Elem = T;
    fn elems(&self) -> Result<&[T]> {
        Ok(self)
    }
}
impl<T: Elem, const N: usize> BufMut for [T; N] {
    fn elems_mut(&mut self) -> Result<&mut [T]> {
        Ok(self)
    }
}
impl<T: Elem, S: ndarray::Data<Elem = T>, D: ndarray::Dimension> Buf for ndarray::ArrayBase<S, D> {
    type Elem = T;
    fn elems(&self) -> Result<&[T]> {
        self.as_slice().ok_or(Error::NotContiguous)
    }
}
impl<T: Elem, S: ndarray::DataMut<Elem = T>, D: ndarray::Dimension> BufMut
    for ndarray::ArrayBase<S, D>
{
    fn elems_mut(&mut self) -> Result<&mut [T]> {
        self.as_slice_mut().ok_or(Error::NotContiguous)
    }
}

/// The bytes of a slice of elements.
pub fn bytes<T: Elem>(s: &[T]) -> &[u8] {
    // SAFETY: `Elem` types are plain data without padding; same memory, same lifetime.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), std::mem::size_of_val(s)) }
}

/// The bytes of a slice of elements, writable.
pub fn bytes_mut<T: Elem>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: `Elem` types accept every bit pattern; same memory, same lifetime.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast(), std::mem::size_of_val(s)) }
}
