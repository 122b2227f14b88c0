//! An independent reference for every reduction kernel.
//!
//! Each `(op, dtype)` pair the kernel supports is checked element by element
//! against scalar arithmetic written out here, never against
//! `apply_reduce` itself:
//!
//! * integers are widened to `i128`, combined there and truncated back with
//!   `as` (which is exactly two's-complement wrapping);
//! * `f32`/`f64` use the plain IEEE operators and a hand-written
//!   "NaN is ignored" minimum/maximum;
//! * `bf16` is decoded and rounded (to nearest, ties to even) by bit
//!   manipulation, with the arithmetic in `f32` as the documentation says;
//! * `f16` is decoded by hand and the arithmetic done in `f64`, where a sum
//!   or product of two `f16` is exact, then rounded once by
//!   `half::f16::from_f64` (computing in `f32` and rounding back, as the
//!   kernel does, is provably the same since `f32` has more than `2p + 2`
//!   bits for `f16`'s `p = 11`).
//!
//! Inputs mix edge values (extremes, zero of both signs, NaN, infinities,
//! subnormals) with seeded pseudo-random bit patterns, at odd and even
//! lengths so unrolled or vectorised tails are covered. Swapping any
//! operator of a kernel (`min` for `max`, `+` for `-`, `&` for `|`, ...)
//! makes these tests fail.

use half::f16;
use hpc_collectives::{apply_reduce, CustomOps, DataType, ReduceError, ReduceOp};

/// Lengths (in elements) around the usual vector widths and unroll factors.
const LENS: [usize; 16] = [0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 129];

/// SplitMix64: a small, seeded generator so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Input pairs for one element type: every pair of edge values (so each
/// overflow and comparison corner meets each other), then random data at
/// each length in [`LENS`].
fn cases<T: Copy>(edges: &[T], mut random: impl FnMut() -> T) -> Vec<(Vec<T>, Vec<T>)> {
    let mut out = Vec::new();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for &x in edges {
        for &y in edges {
            a.push(x);
            b.push(y);
        }
    }
    // An odd total, so the cross product also exercises a tail.
    if a.len() % 2 == 0 {
        a.push(edges[0]);
        b.push(edges[edges.len() - 1]);
    }
    out.push((a, b));
    for len in LENS {
        let a: Vec<T> = (0..len).map(|_| random()).collect();
        let b: Vec<T> = (0..len).map(|_| random()).collect();
        out.push((a, b));
    }
    out
}

/// The integer reference: both operands widened to `i128` (sign- or
/// zero-extended as their type says), combined, and the caller truncates.
fn int_reference(op: ReduceOp, a: i128, b: i128) -> i128 {
    match op {
        ReduceOp::Sum => a + b,
        ReduceOp::Prod => a.wrapping_mul(b),
        ReduceOp::Min => {
            if a <= b {
                a
            } else {
                b
            }
        }
        ReduceOp::Max => {
            if a >= b {
                a
            } else {
                b
            }
        }
        ReduceOp::Band => a & b,
        ReduceOp::Bor => a | b,
        ReduceOp::Bxor => a ^ b,
        ReduceOp::Custom(_) => unreachable!("not a built-in operation"),
    }
}

/// `dst` after `apply_reduce(op, dtype, src, dst)` (which must succeed), read back
/// element by element with `from`; there must be `len` of them.
fn reduced<T>(
    op: ReduceOp,
    dtype: DataType,
    src: &[u8],
    dst: &mut [u8],
    len: usize,
    from: impl Fn(&[u8]) -> T,
) -> Vec<T> {
    apply_reduce(op, dtype, src, dst).unwrap();
    let got: Vec<T> = dst
        .chunks_exact(std::mem::size_of::<T>())
        .map(from)
        .collect();
    assert_eq!(got.len(), len);
    got
}

macro_rules! check_int {
    ($t:ty, $dtype:expr, $seed:expr) => {{
        let dtype: DataType = $dtype;
        assert_eq!(dtype.size(), std::mem::size_of::<$t>());
        let edges: Vec<$t> = vec![
            0,
            1,
            2,
            3,
            <$t>::MAX,
            <$t>::MAX - 1,
            <$t>::MAX / 2,
            <$t>::MIN,
            <$t>::MIN.wrapping_add(1),
            <$t>::MIN.wrapping_sub(1).wrapping_div(2),
            0x55 as $t,
            (0xAAAA_AAAA_AAAA_AAAAu64 as $t),
            (-1i64) as $t,
            (-7i64) as $t,
        ];
        let mut rng = Rng($seed);
        let mut random = || {
            // Mostly full-width bit patterns, some small magnitudes.
            let r = rng.next();
            if r % 4 == 0 {
                ((r >> 8) % 7) as $t
            } else {
                (r >> 3) as $t
            }
        };
        for (a, b) in cases(&edges, &mut random) {
            let bytes = |v: &[$t]| v.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
            for op in ReduceOp::BUILTIN {
                assert!(op.supports(dtype), "{op} must be supported for {dtype}");
                let src = bytes(&b);
                let mut dst = bytes(&a);
                let got = reduced(op, dtype, &src, &mut dst, a.len(), |c| {
                    <$t>::from_ne_bytes(c.try_into().unwrap())
                });
                for i in 0..a.len() {
                    let want = int_reference(op, a[i] as i128, b[i] as i128) as $t;
                    assert_eq!(
                        got[i],
                        want,
                        "{op} {dtype}: element {i} of {}: {} ⊕ {}",
                        a.len(),
                        a[i],
                        b[i]
                    );
                }
            }
        }
    }};
}

#[test]
fn integer_kernels_match_the_i128_reference() {
    check_int!(i8, DataType::I8, 1);
    check_int!(i16, DataType::I16, 2);
    check_int!(i32, DataType::I32, 3);
    check_int!(i64, DataType::I64, 4);
    check_int!(u8, DataType::U8, 5);
    check_int!(u16, DataType::U16, 6);
    check_int!(u32, DataType::U32, 7);
    check_int!(u64, DataType::U64, 8);
}

/// The wrapping and signedness the documentation promises, as literal
/// values (not computed), for a reader who does not trust the reference.
#[test]
fn integer_overflow_wraps_and_comparisons_follow_the_sign() {
    fn one<const N: usize>(op: ReduceOp, dtype: DataType, a: [u8; N], b: [u8; N]) -> [u8; N] {
        let mut dst = a;
        apply_reduce(op, dtype, &b, &mut dst).unwrap();
        dst
    }
    let i8s = |x: i8| x.to_ne_bytes();
    assert_eq!(
        one(ReduceOp::Sum, DataType::I8, i8s(127), i8s(1)),
        i8s(-128)
    );
    assert_eq!(
        one(ReduceOp::Prod, DataType::I8, i8s(-128), i8s(-1)),
        i8s(-128)
    );
    assert_eq!(one(ReduceOp::Prod, DataType::I8, i8s(16), i8s(16)), i8s(0));
    assert_eq!(one(ReduceOp::Min, DataType::I8, i8s(-1), i8s(1)), i8s(-1));
    assert_eq!(one(ReduceOp::Max, DataType::I8, i8s(-1), i8s(1)), i8s(1));
    // The same bytes compare the other way round as u8 (0xFF = 255).
    assert_eq!(one(ReduceOp::Min, DataType::U8, [0xFF], [1]), [1]);
    assert_eq!(one(ReduceOp::Max, DataType::U8, [0xFF], [1]), [0xFF]);
    assert_eq!(one(ReduceOp::Sum, DataType::U8, [255], [2]), [1]);
    assert_eq!(one(ReduceOp::Prod, DataType::U8, [255], [2]), [254]);
    let u64s = |x: u64| x.to_ne_bytes();
    assert_eq!(
        one(ReduceOp::Sum, DataType::U64, u64s(u64::MAX), u64s(u64::MAX)),
        u64s(u64::MAX - 1)
    );
    assert_eq!(
        one(ReduceOp::Min, DataType::U64, u64s(1 << 63), u64s(1)),
        u64s(1)
    );
    let i64s = |x: i64| x.to_ne_bytes();
    assert_eq!(
        one(ReduceOp::Min, DataType::I64, i64s(i64::MIN), i64s(1)),
        i64s(i64::MIN)
    );
    assert_eq!(
        one(
            ReduceOp::Bxor,
            DataType::I16,
            0x0F0Fi16.to_ne_bytes(),
            0x00FFi16.to_ne_bytes()
        ),
        0x0FF0i16.to_ne_bytes()
    );
    assert_eq!(
        one(
            ReduceOp::Band,
            DataType::U32,
            0xF0F0u32.to_ne_bytes(),
            0xFF00u32.to_ne_bytes()
        ),
        0xF000u32.to_ne_bytes()
    );
    assert_eq!(
        one(
            ReduceOp::Bor,
            DataType::I32,
            0xF0F0i32.to_ne_bytes(),
            0x0F00i32.to_ne_bytes()
        ),
        0xFFF0i32.to_ne_bytes()
    );
}

/// Minimum with a NaN operand ignored (the documented `f32::min`
/// behaviour), written with comparisons only.
fn min_ignoring_nan<T: PartialOrd + Copy>(a: T, b: T, is_nan: impl Fn(T) -> bool) -> T {
    if is_nan(a) {
        b
    } else if is_nan(b) || a <= b {
        a
    } else {
        b
    }
}

fn max_ignoring_nan<T: PartialOrd + Copy>(a: T, b: T, is_nan: impl Fn(T) -> bool) -> T {
    if is_nan(a) {
        b
    } else if is_nan(b) || a >= b {
        a
    } else {
        b
    }
}

/// Whether a kernel result (`got_bits`) is what the reference says
/// (`want_bits`). Any NaN stands for any NaN (payloads are not specified),
/// and `min`/`max` of `-0.0` and `+0.0` may return either zero (as
/// `f32::min` may); everything else must match bit for bit, including the
/// sign of a zero sum or product.
fn float_agrees(
    op: ReduceOp,
    got_nan: bool,
    got_zero: bool,
    got_bits: u64,
    want_nan: bool,
    want_bits: u64,
    zeros_of_both_signs: bool,
) -> bool {
    if want_nan {
        return got_nan;
    }
    if matches!(op, ReduceOp::Min | ReduceOp::Max) && zeros_of_both_signs {
        return got_zero;
    }
    got_bits == want_bits
}

macro_rules! check_float {
    ($t:ty, $bits:ty, $dtype:expr, $seed:expr) => {{
        let dtype: DataType = $dtype;
        let edges: Vec<$t> = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            -2.5,
            3.0,
            <$t>::MAX,
            <$t>::MIN,
            <$t>::MIN_POSITIVE,
            <$t>::from_bits(1), // smallest subnormal
            -<$t>::from_bits(1),
            <$t>::EPSILON,
            <$t>::INFINITY,
            <$t>::NEG_INFINITY,
            <$t>::NAN,
            -<$t>::NAN,
        ];
        let mut rng = Rng($seed);
        let mut random = || {
            let r = rng.next();
            match r % 4 {
                // Arbitrary bit patterns: every exponent, NaNs included.
                0 => <$t>::from_bits(r as $bits),
                // Ordinary values of both signs, some equal to each other.
                1 => ((r >> 16) % 9) as $t - 4.0,
                _ => ((r >> 11) as $t / (1u64 << 53) as $t - 0.5) * 1000.0,
            }
        };
        for (a, b) in cases(&edges, &mut random) {
            let bytes = |v: &[$t]| v.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
            for op in ReduceOp::BUILTIN {
                let src = bytes(&b);
                let mut dst = bytes(&a);
                if op.is_bitwise() {
                    assert!(!op.supports(dtype));
                    let before = dst.clone();
                    assert_eq!(
                        apply_reduce(op, dtype, &src, &mut dst),
                        Err(ReduceError::Unsupported { op, dtype })
                    );
                    assert_eq!(dst, before, "{op} {dtype}: rejected call changed dst");
                    continue;
                }
                let got = reduced(op, dtype, &src, &mut dst, a.len(), |c| {
                    <$t>::from_ne_bytes(c.try_into().unwrap())
                });
                for i in 0..a.len() {
                    let (x, y) = (a[i], b[i]);
                    let want = match op {
                        ReduceOp::Sum => x + y,
                        ReduceOp::Prod => x * y,
                        ReduceOp::Min => min_ignoring_nan(x, y, <$t>::is_nan),
                        ReduceOp::Max => max_ignoring_nan(x, y, <$t>::is_nan),
                        _ => unreachable!(),
                    };
                    let both_zero = x == 0.0 && y == 0.0 && x.to_bits() != y.to_bits();
                    assert!(
                        float_agrees(
                            op,
                            got[i].is_nan(),
                            got[i] == 0.0,
                            got[i].to_bits() as u64,
                            want.is_nan(),
                            want.to_bits() as u64,
                            both_zero,
                        ),
                        "{op} {dtype}: element {i} of {}: {x:e} ⊕ {y:e} gave {:e}, expected {want:e}",
                        a.len(),
                        got[i]
                    );
                }
            }
        }
    }};
}

#[test]
fn f32_kernels_match_scalar_ieee() {
    check_float!(f32, u32, DataType::F32, 11);
}

#[test]
fn f64_kernels_match_scalar_ieee() {
    check_float!(f64, u64, DataType::F64, 12);
}

/// `f32::min`/`max` semantics, spelled out for the 32- and 64-bit kernels:
/// a NaN operand is ignored, two NaNs give NaN, infinities order normally.
#[test]
fn float_min_max_ignore_nan_and_order_infinities() {
    let run32 = |op, a: f32, b: f32| {
        let mut d = a.to_ne_bytes();
        apply_reduce(op, DataType::F32, &b.to_ne_bytes(), &mut d).unwrap();
        f32::from_ne_bytes(d)
    };
    assert_eq!(run32(ReduceOp::Min, f32::NAN, 2.0), 2.0);
    assert_eq!(run32(ReduceOp::Min, 2.0, f32::NAN), 2.0);
    assert_eq!(run32(ReduceOp::Max, f32::NAN, -2.0), -2.0);
    assert!(run32(ReduceOp::Max, f32::NAN, f32::NAN).is_nan());
    assert_eq!(
        run32(ReduceOp::Min, f32::NEG_INFINITY, -1e38),
        f32::NEG_INFINITY
    );
    assert_eq!(run32(ReduceOp::Max, f32::INFINITY, 1e38), f32::INFINITY);
    assert_eq!(run32(ReduceOp::Min, -1.0, 1.0), -1.0);
    assert_eq!(run32(ReduceOp::Max, -1.0, 1.0), 1.0);
    assert!(run32(ReduceOp::Sum, f32::INFINITY, f32::NEG_INFINITY).is_nan());
    assert_eq!(
        run32(ReduceOp::Sum, -0.0, -0.0).to_bits(),
        (-0.0f32).to_bits()
    );
    assert_eq!(run32(ReduceOp::Sum, -0.0, 0.0).to_bits(), 0.0f32.to_bits());
    assert_eq!(
        run32(ReduceOp::Prod, -0.0, 5.0).to_bits(),
        (-0.0f32).to_bits()
    );
    let run64 = |op, a: f64, b: f64| {
        let mut d = a.to_ne_bytes();
        apply_reduce(op, DataType::F64, &b.to_ne_bytes(), &mut d).unwrap();
        f64::from_ne_bytes(d)
    };
    assert_eq!(run64(ReduceOp::Min, 3.0, f64::NAN), 3.0);
    assert_eq!(run64(ReduceOp::Max, f64::NAN, -3.0), -3.0);
    assert_eq!(run64(ReduceOp::Min, 1e-300, -1e-300), -1e-300);
    assert_eq!(run64(ReduceOp::Max, 1e-300, -1e-300), 1e-300);
    assert_eq!(run64(ReduceOp::Sum, 1.0, f64::EPSILON / 2.0), 1.0); // ties to even
}

// ---------------------------------------------------------------------------
// bf16: decoded and rounded by hand, arithmetic in f32.

fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// Round an `f32` to bf16, to nearest with ties to even; NaN stays NaN.
fn f32_to_bf16(x: f32) -> u16 {
    if x.is_nan() {
        return 0x7FC0;
    }
    let bits = x.to_bits();
    let lsb = (bits >> 16) & 1;
    ((bits + 0x7FFF + lsb) >> 16) as u16
}

fn bf16_is_nan(bits: u16) -> bool {
    bits & 0x7F80 == 0x7F80 && bits & 0x007F != 0
}

// ---------------------------------------------------------------------------
// f16: decoded by hand into f64 (exact), rounded once by `half`.

fn f16_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((bits >> 10) & 0x1F);
    let man = f64::from(bits & 0x3FF);
    let magnitude = match exp {
        0 => man * 2f64.powi(-24),
        31 if man == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        _ => (1024.0 + man) * 2f64.powi(exp - 25),
    };
    sign * magnitude
}

fn f16_is_nan(bits: u16) -> bool {
    bits & 0x7C00 == 0x7C00 && bits & 0x03FF != 0
}

/// One 16-bit float kind: how the reference decodes, rounds and detects NaN.
struct Half {
    dtype: DataType,
    reference: fn(ReduceOp, u16, u16) -> u16,
    is_nan: fn(u16) -> bool,
}

fn bf16_reference(op: ReduceOp, a: u16, b: u16) -> u16 {
    let (x, y) = (bf16_to_f32(a), bf16_to_f32(b));
    f32_to_bf16(match op {
        ReduceOp::Sum => x + y,
        ReduceOp::Prod => x * y,
        ReduceOp::Min => min_ignoring_nan(x, y, f32::is_nan),
        ReduceOp::Max => max_ignoring_nan(x, y, f32::is_nan),
        _ => unreachable!(),
    })
}

fn f16_reference(op: ReduceOp, a: u16, b: u16) -> u16 {
    let (x, y) = (f16_to_f64(a), f16_to_f64(b));
    let exact = match op {
        ReduceOp::Sum => x + y,
        ReduceOp::Prod => x * y,
        ReduceOp::Min => min_ignoring_nan(x, y, f64::is_nan),
        ReduceOp::Max => max_ignoring_nan(x, y, f64::is_nan),
        _ => unreachable!(),
    };
    f16::from_f64(exact).to_bits()
}

fn check_half(kind: &Half, seed: u64) {
    let dtype = kind.dtype;
    assert_eq!(dtype.size(), 2);
    // Shared encodings: sign bit, zero, smallest subnormal; the rest are
    // per format (one, max, infinities, NaN, values near the rounding
    // boundaries of each format).
    let edges: Vec<u16> = if dtype == DataType::F16 {
        vec![
            0x0000, 0x8000, 0x3C00, 0xBC00, 0x3C01, 0x1400, 0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x0400,
            0x03FF, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x4248, 0x5A00,
        ]
    } else {
        vec![
            0x0000, 0x8000, 0x3F80, 0xBF80, 0x3F81, 0x3B80, 0x7F7F, 0xFF7F, 0x0001, 0x8001, 0x0080,
            0x007F, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x4049, 0x4300,
        ]
    };
    let mut rng = Rng(seed);
    let mut random = || rng.next() as u16;
    let mut all = cases(&edges, &mut random);
    // Many random pairs in one long, odd-length buffer.
    let n = 4099;
    all.push((
        (0..n).map(|_| rng.next() as u16).collect(),
        (0..n).map(|_| rng.next() as u16).collect(),
    ));
    for (a, b) in all {
        let bytes = |v: &[u16]| v.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
        for op in ReduceOp::BUILTIN {
            let src = bytes(&b);
            let mut dst = bytes(&a);
            if op.is_bitwise() {
                let before = dst.clone();
                assert_eq!(
                    apply_reduce(op, dtype, &src, &mut dst),
                    Err(ReduceError::Unsupported { op, dtype })
                );
                assert_eq!(dst, before);
                continue;
            }
            apply_reduce(op, dtype, &src, &mut dst).unwrap();
            for (i, c) in dst.chunks_exact(2).enumerate() {
                let got = u16::from_ne_bytes([c[0], c[1]]);
                let want = (kind.reference)(op, a[i], b[i]);
                let zeros = (a[i] | b[i]) & 0x7FFF == 0 && a[i] != b[i];
                assert!(
                    float_agrees(
                        op,
                        (kind.is_nan)(got),
                        got & 0x7FFF == 0,
                        u64::from(got),
                        (kind.is_nan)(want),
                        u64::from(want),
                        zeros
                    ),
                    "{op} {dtype}: element {i}: {:#06x} ⊕ {:#06x} gave {got:#06x}, expected {want:#06x}",
                    a[i],
                    b[i]
                );
            }
        }
    }
}

#[test]
fn bf16_kernels_match_the_hand_rounded_reference() {
    check_half(
        &Half {
            dtype: DataType::Bf16,
            reference: bf16_reference,
            is_nan: bf16_is_nan,
        },
        21,
    );
}

#[test]
fn f16_kernels_match_the_exact_reference() {
    check_half(
        &Half {
            dtype: DataType::F16,
            reference: f16_reference,
            is_nan: f16_is_nan,
        },
        22,
    );
}

/// The hand-written decoders agree with the format on known encodings, so
/// a reference bug cannot hide a kernel bug.
#[test]
fn reference_decoders_know_the_formats() {
    assert_eq!(f16_to_f64(0x3C00), 1.0);
    assert_eq!(f16_to_f64(0xC000), -2.0);
    assert_eq!(f16_to_f64(0x7BFF), 65504.0);
    assert_eq!(f16_to_f64(0x0001), 2f64.powi(-24));
    assert_eq!(f16_to_f64(0x0400), 2f64.powi(-14));
    assert_eq!(f16_to_f64(0x7C00), f64::INFINITY);
    assert!(f16_to_f64(0x7E00).is_nan());
    assert_eq!(bf16_to_f32(0x3F80), 1.0);
    assert_eq!(bf16_to_f32(0xC040), -3.0);
    assert_eq!(f32_to_bf16(1.0), 0x3F80);
    // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even.
    assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8)), 0x3F80);
    assert_eq!(f32_to_bf16(1.0 + 3.0 * 2f32.powi(-8)), 0x3F82);
    assert_eq!(f32_to_bf16(f32::MAX), 0x7F80); // rounds up to infinity
    assert!(bf16_is_nan(f32_to_bf16(f32::NAN)));
    // f16 rounding: 1 + 2^-11 ties to even (1.0), 2049 rounds to 2048.
    assert_eq!(f16_reference(ReduceOp::Sum, 0x3C00, 0x1000), 0x3C00);
    assert_eq!(f16_reference(ReduceOp::Sum, 0x6800, 0x3C00), 0x6800);
}

/// Spot values for the 16-bit kernels, as literal encodings.
#[test]
fn half_kernels_spot_values() {
    let run = |op, dtype, a: u16, b: u16| {
        let mut d = a.to_ne_bytes();
        apply_reduce(op, dtype, &b.to_ne_bytes(), &mut d).unwrap();
        u16::from_ne_bytes(d)
    };
    // f16: 1 + 2 = 3, 2 * -3 = -6, min(1, -1) = -1, max(1, -1) = 1.
    assert_eq!(run(ReduceOp::Sum, DataType::F16, 0x3C00, 0x4000), 0x4200);
    assert_eq!(run(ReduceOp::Prod, DataType::F16, 0x4000, 0xC200), 0xC600);
    assert_eq!(run(ReduceOp::Min, DataType::F16, 0x3C00, 0xBC00), 0xBC00);
    assert_eq!(run(ReduceOp::Max, DataType::F16, 0x3C00, 0xBC00), 0x3C00);
    assert_eq!(run(ReduceOp::Min, DataType::F16, 0x7E00, 0x4000), 0x4000);
    // 65504 + 65504 overflows to +inf.
    assert_eq!(run(ReduceOp::Sum, DataType::F16, 0x7BFF, 0x7BFF), 0x7C00);
    // bf16: the same small values.
    assert_eq!(run(ReduceOp::Sum, DataType::Bf16, 0x3F80, 0x4000), 0x4040);
    assert_eq!(run(ReduceOp::Prod, DataType::Bf16, 0x4000, 0xC040), 0xC0C0);
    assert_eq!(run(ReduceOp::Min, DataType::Bf16, 0x3F80, 0xBF80), 0xBF80);
    assert_eq!(run(ReduceOp::Max, DataType::Bf16, 0x3F80, 0xBF80), 0x3F80);
    assert_eq!(run(ReduceOp::Max, DataType::Bf16, 0xFFC0, 0xC000), 0xC000);
}

// ---------------------------------------------------------------------------
// The type and operation tables, and argument checks.

#[test]
fn data_type_table() {
    let table = [
        (DataType::I8, 1, false, "i8"),
        (DataType::I16, 2, false, "i16"),
        (DataType::I32, 4, false, "i32"),
        (DataType::I64, 8, false, "i64"),
        (DataType::U8, 1, false, "u8"),
        (DataType::U16, 2, false, "u16"),
        (DataType::U32, 4, false, "u32"),
        (DataType::U64, 8, false, "u64"),
        (DataType::F16, 2, true, "f16"),
        (DataType::Bf16, 2, true, "bf16"),
        (DataType::F32, 4, true, "f32"),
        (DataType::F64, 8, true, "f64"),
    ];
    assert_eq!(DataType::ALL.len(), table.len());
    for (dtype, (want, size, float, name)) in DataType::ALL.into_iter().zip(table) {
        assert_eq!(dtype, want);
        assert_eq!(dtype.size(), size, "{dtype}");
        assert_eq!(dtype.is_float(), float, "{dtype}");
        assert_eq!(dtype.is_integer(), !float, "{dtype}");
        assert_eq!(dtype.name(), name);
        assert_eq!(dtype.to_string(), name);
    }
}

#[test]
fn reduce_op_table() {
    let table = [
        (ReduceOp::Sum, "sum", false),
        (ReduceOp::Prod, "prod", false),
        (ReduceOp::Min, "min", false),
        (ReduceOp::Max, "max", false),
        (ReduceOp::Band, "band", true),
        (ReduceOp::Bor, "bor", true),
        (ReduceOp::Bxor, "bxor", true),
    ];
    assert_eq!(ReduceOp::BUILTIN.len(), table.len());
    for (op, (want, name, bitwise)) in ReduceOp::BUILTIN.into_iter().zip(table) {
        assert_eq!(op, want);
        assert_eq!(op.to_string(), name);
        assert_eq!(op.is_bitwise(), bitwise, "{op}");
        for dtype in DataType::ALL {
            assert_eq!(
                op.supports(dtype),
                !bitwise || dtype.is_integer(),
                "{op} {dtype}"
            );
        }
    }
    assert_eq!(ReduceOp::Custom(7).to_string(), "custom#7");
    assert!(!ReduceOp::Custom(7).is_bitwise());
    assert!(DataType::ALL
        .iter()
        .all(|&d| ReduceOp::Custom(7).supports(d)));
}

/// Every rejected call names the problem and leaves `dst` as it was.
#[test]
fn bad_arguments_are_rejected_and_change_nothing() {
    for dtype in DataType::ALL {
        for op in ReduceOp::BUILTIN {
            let size = dtype.size();
            let src = vec![0x5Au8; 3 * size];
            // Length mismatch, in both directions.
            for dlen in [2 * size, 4 * size] {
                let mut dst = vec![0xA5u8; dlen];
                assert_eq!(
                    apply_reduce(op, dtype, &src, &mut dst),
                    Err(ReduceError::LengthMismatch {
                        src: 3 * size,
                        dst: dlen
                    })
                );
                assert!(dst.iter().all(|&b| b == 0xA5));
            }
            // Not a whole number of elements (only possible above 1 byte).
            if size > 1 {
                let mut dst = vec![0xA5u8; 3 * size + 1];
                assert_eq!(
                    apply_reduce(op, dtype, &vec![0u8; 3 * size + 1], &mut dst),
                    Err(ReduceError::NotMultiple {
                        len: 3 * size + 1,
                        dtype
                    })
                );
                assert!(dst.iter().all(|&b| b == 0xA5));
            }
        }
        // Custom operations are the engine's; the kernel refuses them.
        let mut dst = vec![0xA5u8; dtype.size()];
        assert_eq!(
            apply_reduce(
                ReduceOp::Custom(9),
                dtype,
                &vec![0u8; dtype.size()],
                &mut dst
            ),
            Err(ReduceError::UnknownCustom(9))
        );
        assert!(dst.iter().all(|&b| b == 0xA5));
    }
}

#[test]
fn custom_ops_registry() {
    // A fresh registry hands out 0, 1, 2, ...
    let mut fresh = CustomOps::new();
    let ids: Vec<u32> = (0..3).map(|_| fresh.register(|_, _, _| {})).collect();
    assert_eq!(ids, [0, 1, 2]);

    let mut ops = CustomOps::new();
    // A caller-chosen id is skipped by later registrations.
    ops.insert(0, |_, _, dst| dst.fill(0));
    let first = ops.register(|_, src, dst| {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = d.wrapping_sub(*s);
        }
    });
    let second = ops.register(|_, _, dst| dst.fill(7));
    assert_eq!(first, 1);
    assert_eq!(second, 2);

    let mut dst = vec![10u8, 20];
    ops.apply(ReduceOp::Custom(first), DataType::U8, &[1, 2], &mut dst)
        .unwrap();
    assert_eq!(dst, [9, 18]);
    ops.apply(ReduceOp::Custom(0), DataType::U8, &[1, 2], &mut dst)
        .unwrap();
    assert_eq!(dst, [0, 0]);

    // Replacing an id replaces the function.
    ops.insert(first, |_, _, dst| dst.fill(1));
    ops.apply(ReduceOp::Custom(first), DataType::U8, &[1, 2], &mut dst)
        .unwrap();
    assert_eq!(dst, [1, 1]);

    // The registry checks lengths before calling the closure.
    let mut dst = vec![3u8; 4];
    assert_eq!(
        ops.apply(ReduceOp::Custom(second), DataType::I16, &[0u8; 2], &mut dst),
        Err(ReduceError::LengthMismatch { src: 2, dst: 4 })
    );
    assert_eq!(
        ops.apply(
            ReduceOp::Custom(second),
            DataType::I32,
            &[0u8; 3],
            &mut dst[..3]
        ),
        Err(ReduceError::NotMultiple {
            len: 3,
            dtype: DataType::I32
        })
    );
    assert_eq!(dst, [3, 3, 3, 3]);
    assert_eq!(
        ops.apply(ReduceOp::Custom(99), DataType::U8, &[0u8; 4], &mut dst),
        Err(ReduceError::UnknownCustom(99))
    );

    // Built-in operations go to the kernel.
    let mut dst = 5i32.to_ne_bytes();
    ops.apply(ReduceOp::Max, DataType::I32, &9i32.to_ne_bytes(), &mut dst)
        .unwrap();
    assert_eq!(i32::from_ne_bytes(dst), 9);
    assert!(format!("{ops:?}").contains("[0, 1, 2]"));
}
