//! CUDA C++ source of the reduction kernels, compiled at run time by NVRTC.
//!
//! One kernel per (operation, element type) and layout: `dst[i] = dst[i] ⊕
//! src[i]` for `i < n`. The vector variant (`hpc_reduce_<op>_<type>`) needs
//! both pointers 16-byte aligned and reads/writes whole 16-byte vectors
//! (`float4`, `double2`, `int4`; for `f16`/`bf16` a `uint4` holding four
//! pairs), then finishes the `n % per_vector` tail element by element; the
//! scalar variant (`..._scalar`) works for any alignment. Both use
//! grid-stride loops, so any grid size covers any `n`.
//!
//! The source needs no header: `f16` is converted with the PTX `cvt`
//! instructions and `bf16` with integer arithmetic (round to nearest even,
//! NaN kept quiet), both computed in `float` and rounded once per operation
//! exactly as `hpc-collectives`' host kernel does, so host and device
//! results agree bit for bit. Integer sums and products wrap (computed in
//! `unsigned`).

use std::fmt::Write as _;

use crate::types::{Dtype, GpuOp};

/// Threads per block the kernels are launched with.
pub const BLOCK: u32 = 256;

/// The kernel's name for `op` on `dtype`; `vector` selects the 16-byte
/// variant.
///
/// ```
/// use hpc_gpu::{kernel::kernel_name, Dtype, GpuOp};
/// assert_eq!(kernel_name(GpuOp::Sum, Dtype::Bf16, true), "hpc_reduce_sum_bf16");
/// assert_eq!(kernel_name(GpuOp::Max, Dtype::F64, false), "hpc_reduce_max_f64_scalar");
/// ```
pub fn kernel_name(op: GpuOp, dtype: Dtype, vector: bool) -> String {
    format!(
        "hpc_reduce_{}_{}{}",
        op.name(),
        dtype.name(),
        if vector { "" } else { "_scalar" }
    )
}

/// Every kernel name the source of [`source`] defines.
pub fn all_kernel_names() -> Vec<String> {
    let mut v = Vec::new();
    for d in Dtype::ALL {
        for op in GpuOp::ALL {
            v.push(kernel_name(op, d, true));
            v.push(kernel_name(op, d, false));
        }
    }
    v
}

const PRELUDE: &str = r#"
// hpc-gpu reduction kernels (generated; compiled by NVRTC at run time).
typedef unsigned short hpc_u16;

__device__ __forceinline__ float hpc_f16_to_f32(hpc_u16 h) {
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ hpc_u16 hpc_f32_to_f16(float f) {
    hpc_u16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
__device__ __forceinline__ float hpc_bf16_to_f32(hpc_u16 h) {
    return __uint_as_float(((unsigned)h) << 16);
}
__device__ __forceinline__ hpc_u16 hpc_f32_to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) { return (hpc_u16)((u >> 16) | 0x40u); }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (hpc_u16)(u >> 16);
}

__device__ __forceinline__ float hpc_op_sum_f32(float a, float b) { return a + b; }
__device__ __forceinline__ float hpc_op_prod_f32(float a, float b) { return a * b; }
__device__ __forceinline__ float hpc_op_min_f32(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ float hpc_op_max_f32(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double hpc_op_sum_f64(double a, double b) { return a + b; }
__device__ __forceinline__ double hpc_op_prod_f64(double a, double b) { return a * b; }
__device__ __forceinline__ double hpc_op_min_f64(double a, double b) { return fmin(a, b); }
__device__ __forceinline__ double hpc_op_max_f64(double a, double b) { return fmax(a, b); }
__device__ __forceinline__ int hpc_op_sum_i32(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
__device__ __forceinline__ int hpc_op_prod_i32(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
__device__ __forceinline__ int hpc_op_min_i32(int a, int b) { return min(a, b); }
__device__ __forceinline__ int hpc_op_max_i32(int a, int b) { return max(a, b); }
"#;

/// Element-level C++ pieces of one type: storage type, vector type,
/// elements per vector, and the expression combining `a` and `b` with `op`.
fn scalar_expr(op: GpuOp, d: Dtype) -> String {
    let o = op.name();
    match d {
        Dtype::F32 => format!("hpc_op_{o}_f32(a, b)"),
        Dtype::F64 => format!("hpc_op_{o}_f64(a, b)"),
        Dtype::I32 => format!("hpc_op_{o}_i32(a, b)"),
        Dtype::F16 => {
            format!("hpc_f32_to_f16(hpc_op_{o}_f32(hpc_f16_to_f32(a), hpc_f16_to_f32(b)))")
        }
        Dtype::Bf16 => {
            format!("hpc_f32_to_bf16(hpc_op_{o}_f32(hpc_bf16_to_f32(a), hpc_bf16_to_f32(b)))")
        }
    }
}

fn storage(d: Dtype) -> &'static str {
    match d {
        Dtype::F32 => "float",
        Dtype::F64 => "double",
        Dtype::I32 => "int",
        Dtype::F16 | Dtype::Bf16 => "hpc_u16",
    }
}

fn vector_type(d: Dtype) -> &'static str {
    match d {
        Dtype::F32 => "float4",
        Dtype::F64 => "double2",
        Dtype::I32 => "int4",
        Dtype::F16 | Dtype::Bf16 => "uint4",
    }
}

/// The body combining vector `x` (from dst) with `y` (from src) into `x`.
fn vector_body(op: GpuOp, d: Dtype) -> String {
    let t = storage(d);
    let e = scalar_expr(op, d);
    let lane =
        |field: &str| format!("{{ {t} a = x.{field}; {t} b = y.{field}; x.{field} = {e}; }}");
    match d {
        Dtype::F32 | Dtype::I32 => ["x", "y", "z", "w"].map(lane).join(" "),
        Dtype::F64 => ["x", "y"].map(lane).join(" "),
        // Four 32-bit words, each a pair of 16-bit values (low half first).
        Dtype::F16 | Dtype::Bf16 => ["x", "y", "z", "w"]
            .map(|f| {
                format!(
                    "{{ unsigned p = x.{f}, q = y.{f}; \
                     {t} a = (hpc_u16)(p & 0xffffu); {t} b = (hpc_u16)(q & 0xffffu); {t} lo = {e}; \
                     a = (hpc_u16)(p >> 16); b = (hpc_u16)(q >> 16); {t} hi = {e}; \
                     x.{f} = (unsigned)lo | ((unsigned)hi << 16); }}"
                )
            })
            .join(" "),
    }
}

/// The complete CUDA C++ source: every operation on every element type, in
/// a vector and a scalar variant (names from [`kernel_name`]).
pub fn source() -> String {
    let mut s = String::from(PRELUDE);
    for d in Dtype::ALL {
        for op in GpuOp::ALL {
            let t = storage(d);
            let v = vector_type(d);
            let per = d.per_vector();
            let e = scalar_expr(op, d);
            let body = vector_body(op, d);
            let vname = kernel_name(op, d, true);
            let sname = kernel_name(op, d, false);
            let _ = write!(
                s,
                r#"
extern "C" __global__ void {vname}({t}* __restrict__ dst, const {t}* __restrict__ src, unsigned long long n) {{
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long nv = n / {per}ull;
    {v}* dv = reinterpret_cast<{v}*>(dst);
    const {v}* sv = reinterpret_cast<const {v}*>(src);
    for (unsigned long long i = tid; i < nv; i += stride) {{
        {v} x = dv[i]; const {v} y = sv[i];
        {body}
        dv[i] = x;
    }}
    for (unsigned long long i = nv * {per}ull + tid; i < n; i += stride) {{
        {t} a = dst[i]; {t} b = src[i]; dst[i] = {e};
    }}
}}
extern "C" __global__ void {sname}({t}* __restrict__ dst, const {t}* __restrict__ src, unsigned long long n) {{
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {{
        {t} a = dst[i]; {t} b = src[i]; dst[i] = {e};
    }}
}}
"#
            );
        }
    }
    s
}

/// Grid size for `n` elements: enough blocks for one vector (or element)
/// per thread, capped at `max_blocks` (a few waves of the device's
/// multiprocessors); the grid-stride loop covers the rest.
pub fn grid_for(n: usize, per_thread: usize, max_blocks: u32) -> u32 {
    let units = n.div_ceil(per_thread.max(1));
    let blocks = units.div_ceil(BLOCK as usize).max(1);
    blocks.min(max_blocks.max(1) as usize) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_defines_every_kernel_once() {
        let src = source();
        for name in all_kernel_names() {
            let decl = format!("void {name}(");
            assert_eq!(src.matches(&decl).count(), 1, "{name}");
        }
        assert_eq!(all_kernel_names().len(), 40);
    }

    #[test]
    fn kernels_use_the_right_types_and_ops() {
        let src = source();
        let body = |name: &str| {
            let start = src.find(&format!("void {name}(")).unwrap();
            let end = src[start..].find("\n}\n").unwrap() + start;
            src[start..end].to_string()
        };
        let k = body("hpc_reduce_sum_f32");
        assert!(k.contains("float4") && k.contains("hpc_op_sum_f32") && k.contains("n / 4ull"));
        let k = body("hpc_reduce_min_f64");
        assert!(k.contains("double2") && k.contains("hpc_op_min_f64") && k.contains("n / 2ull"));
        let k = body("hpc_reduce_prod_i32");
        assert!(k.contains("int4") && k.contains("hpc_op_prod_i32"));
        let k = body("hpc_reduce_max_f16");
        assert!(k.contains("uint4") && k.contains("hpc_f16_to_f32") && k.contains("n / 8ull"));
        assert!(k.contains("hpc_op_max_f32"));
        let k = body("hpc_reduce_sum_bf16");
        assert!(k.contains("hpc_f32_to_bf16") && !k.contains("hpc_f16_to_f32"));
        let k = body("hpc_reduce_sum_f32_scalar");
        assert!(!k.contains("float4") && k.contains("const float* __restrict__ src"));
        // Grid-stride loops everywhere, and no headers needed.
        assert_eq!(src.matches("i += stride").count(), 60);
        assert!(!src.contains("#include"));
    }

    #[test]
    fn braces_balance() {
        let src = source();
        assert_eq!(src.matches('{').count(), src.matches('}').count());
        assert_eq!(src.matches('(').count(), src.matches(')').count());
    }

    #[test]
    fn grid_sizes() {
        assert_eq!(grid_for(0, 4, 1000), 1);
        assert_eq!(grid_for(1024, 4, 1000), 1);
        assert_eq!(grid_for(1025 * 4, 4, 1000), 5);
        assert_eq!(grid_for(1 << 30, 4, 528), 528);
    }
}
