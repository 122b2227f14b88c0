//! Counter-based random streams keyed by (seed, purpose, neuron).
//!
//! Draw `i` of a stream is `mix64(key + (i + 1) * GOLDEN)`: SplitMix64 started at
//! `key`, where `key` hashes the seed, the purpose and the neuron id. A stream has no
//! state beyond its key and a counter, so
//!
//! * the result of a draw depends only on (seed, purpose, neuron, counter), never on
//!   which rank or thread asks for it: runs are bit-identical for any decomposition;
//! * the external drive uses the time step as counter, so a checkpoint needs no RNG
//!   state: the step is the stream position.

/// The golden-ratio increment of SplitMix64.
pub const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// What a stream is used for; part of its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Purpose {
    /// Drawing the presynaptic sources of a neuron.
    Connect = 1,
    /// The Poisson drive of a neuron (counter = time step).
    External = 2,
    /// The initial state of a neuron (such as a membrane potential drawn from
    /// a normal distribution).
    Init = 3,
}

/// The SplitMix64 output function (Stafford's mix 13).
#[inline(always)]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The key of the stream of `purpose` for neuron `id`.
pub fn stream_key(seed: u64, purpose: Purpose, id: u32) -> u64 {
    let s = mix64(seed ^ (purpose as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93));
    mix64(s ^ mix64((id as u64).wrapping_add(GOLDEN)))
}

/// Draw number `counter` of the stream `key`: 64 uniform bits.
#[inline(always)]
pub fn draw(key: u64, counter: u64) -> u64 {
    mix64(key.wrapping_add(counter.wrapping_add(1).wrapping_mul(GOLDEN)))
}

/// A uniform integer in `0..n` from 64 uniform bits (Lemire's multiply-shift; the
/// bias is below `n / 2^64`).
///
/// # Panics
///
/// If `n` is 0: `0..0` holds no integer to return.
#[inline(always)]
pub fn below(bits: u64, n: u32) -> u32 {
    if n == 0 {
        below_nothing();
    }
    ((bits as u128 * n as u128) >> 64) as u32
}

#[cold]
#[inline(never)]
fn below_nothing() -> ! {
    panic!("hpc_spiking::rng::below: n = 0 is invalid: there is no integer in 0..0 to draw")
}

/// A standard normal sample from two draws of 64 uniform bits (Box-Muller's
/// cosine branch, with the first draw mapped into `(0, 1]` so that its log is
/// finite).
#[inline]
pub fn standard_normal(bits1: u64, bits2: u64) -> f64 {
    let u1 = ((bits1 >> 11) + 1) as f64 / (1u64 << 53) as f64;
    let u2 = (bits2 >> 11) as f64 / (1u64 << 53) as f64;
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

const GUIDE_BITS: u32 = 10;

/// The largest mean a [`PoissonTable`] (and [`poisson_cdf_2_64`]) takes.
pub const MAX_POISSON_MEAN: f64 = 500.0;

/// The Poisson CDF of mean `lambda` scaled to 2^64: entry `k` is P(X <= k) * 2^64,
/// summed in double precision up to the first `k` whose CDF reaches 1 - 1e-17
/// (empty for `lambda <= 0`). [`PoissonTable`] inverts it; any other table that must
/// give the same samples starts from it.
///
/// # Panics
///
/// For a `lambda` that is NaN or above [`MAX_POISSON_MEAN`]: beyond about 745,
/// `exp(-lambda)` is 0 and the sum never reaches 1, so the table grew without
/// end (an infinite mean filled the memory).
pub fn poisson_cdf_2_64(lambda: f64) -> Vec<u64> {
    assert!(
        lambda <= MAX_POISSON_MEAN,
        "the Poisson mean {} is not a number <= {MAX_POISSON_MEAN}",
        hpc_io::message::num(lambda)
    );
    let mut thresholds = Vec::new();
    if lambda > 0.0 {
        let mut pmf = (-lambda).exp();
        let mut cdf = 0.0f64;
        let kmax = (lambda + 40.0 * lambda.sqrt() + 60.0) as u64;
        for k in 0..kmax {
            cdf += pmf;
            if cdf >= 1.0 - 1e-17 {
                break;
            }
            thresholds.push((cdf * 18_446_744_073_709_551_616.0) as u64);
            pmf *= lambda / (k + 1) as f64;
        }
    }
    thresholds
}

/// Poisson sampling by inversion of a tabulated CDF: one 64-bit draw per sample,
/// exact to the table's double precision. A guide table indexed by the top bits of
/// the draw starts the search close to the answer.
#[derive(Clone, Debug)]
pub struct PoissonTable {
    /// `thresholds[k]` = P(X <= k) scaled to 2^64; the last entry is `u64::MAX`.
    thresholds: Vec<u64>,
    guide: Vec<u32>,
    /// Per cell of 2^52 draws (the top 12 bits): the sample of every draw in
    /// it, or [`CROSSED`] where a CDF step falls inside the cell (32 bits
    /// each, so that a vector gather reads it; 16 KiB).
    cells: Box<[u32; 1 << CELL_BITS]>,
}

const CELL_BITS: u32 = 12;

/// A [`PoissonTable`] cell whose draws do not all give the same sample.
const CROSSED: u32 = 1 << 31;

impl PoissonTable {
    /// The table for mean `lambda` (0 <= lambda <= 500; one of 0 or below
    /// always samples 0).
    ///
    /// # Panics
    ///
    /// For a `lambda` that is NaN or above [`MAX_POISSON_MEAN`]
    /// ([`poisson_cdf_2_64`]).
    pub fn new(lambda: f64) -> PoissonTable {
        let mut thresholds = poisson_cdf_2_64(lambda);
        thresholds.push(u64::MAX);
        let guide = (0..1u64 << GUIDE_BITS)
            .map(|b| {
                let lo = b << (64 - GUIDE_BITS);
                thresholds.partition_point(|&t| t <= lo) as u32
            })
            .collect();
        let mut table = PoissonTable {
            thresholds,
            guide,
            cells: Box::new([0; 1 << CELL_BITS]),
        };
        let mut cells = Box::new([0u32; 1 << CELL_BITS]);
        for (b, c) in cells.iter_mut().enumerate() {
            // The sample is monotone in the draw: equal at both ends of the
            // cell, it is the same for every draw inside.
            let lo = (b as u64) << (64 - CELL_BITS);
            let hi = lo | (u64::MAX >> CELL_BITS);
            let k = table.sample(lo);
            *c = if k == table.sample(hi) && k < CROSSED {
                k
            } else {
                CROSSED
            };
        }
        table.cells = cells;
        table
    }

    /// The sample for the uniform draw `bits`.
    #[inline(always)]
    pub fn sample(&self, bits: u64) -> u32 {
        let mut k = self.guide[(bits >> (64 - GUIDE_BITS)) as usize] as usize;
        let last = self.thresholds.len() - 1;
        while k < last && bits >= self.thresholds[k] {
            k += 1;
        }
        k as u32
    }

    /// The samples of draw `counter` of each stream of `keys`, into `out` (as
    /// long as `keys`): `out[i]` is `self.sample(draw(keys[i], counter))`, the
    /// same bits. By blocks of 64 streams: a loop without branches
    /// hashes them and takes each draw's cell (vector instructions where the
    /// caller is compiled for them: it is inlined), then each cell's sample
    /// from a 16 KiB table, by AVX2 gathers where the processor has them,
    /// eight at a time; the few draws in a cell that a CDF step crosses
    /// (about 0.5 % at a mean of 2) are sampled one by one.
    ///
    /// # Panics
    ///
    /// Where `out` is shorter than `keys`, naming both lengths (as
    /// `copy_from_slice` refuses slices of different lengths: a caller's
    /// mistake of sizes, checked once per call, not per stream). A longer
    /// `out` keeps its elements beyond `keys.len()`.
    #[inline(always)]
    pub fn sample_streams(&self, keys: &[u64], counter: u64, out: &mut [u32]) {
        #[cfg(target_arch = "x86_64")]
        let gather = std::arch::is_x86_feature_detected!("avx2");
        #[cfg(not(target_arch = "x86_64"))]
        let gather = false;
        self.sample_streams_with(keys, counter, out, gather);
    }

    /// [`PoissonTable::sample_streams`], with AVX2 gathers or without
    /// (`gather`: the caller has checked that the processor has AVX2).
    #[inline(always)]
    fn sample_streams_with(&self, keys: &[u64], counter: u64, out: &mut [u32], gather: bool) {
        assert!(
            out.len() >= keys.len(),
            "PoissonTable::sample_streams: an out of {} samples for {} keys",
            out.len(),
            keys.len()
        );
        let out = &mut out[..keys.len()];
        let c = counter.wrapping_add(1).wrapping_mul(GOLDEN);
        let mut bits = [0u64; BLOCK];
        let mut cell = [0u32; BLOCK];
        for (keys, out) in keys.chunks(BLOCK).zip(out.chunks_mut(BLOCK)) {
            let n = keys.len();
            for i in 0..n {
                bits[i] = mix64(keys[i].wrapping_add(c));
                cell[i] = (bits[i] >> (64 - CELL_BITS)) as u32;
            }
            let mut done = 0;
            #[cfg(target_arch = "x86_64")]
            if gather {
                // SAFETY: the caller has checked that the processor has AVX2.
                done = unsafe { self.lookup_avx2(&cell[..n], &bits[..n], out) };
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = gather;
            for i in done..n {
                let g = self.cells[cell[i] as usize & ((1 << CELL_BITS) - 1)];
                out[i] = if g & CROSSED == 0 {
                    g
                } else {
                    self.sample(bits[i])
                };
            }
        }
    }

    /// The samples of the first multiple of 8 of the draws `bits`, whose
    /// cells are `cell`, into `out`: how many it did. Eight table entries per
    /// gather; an octet with a crossed cell (the entry's sign bit) takes
    /// [`PoissonTable::sample`] for those.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn lookup_avx2(&self, cell: &[u32], bits: &[u64], out: &mut [u32]) -> usize {
        use std::arch::x86_64::*;
        let n = cell.len().min(bits.len()).min(out.len()) / 8 * 8;
        let table = self.cells.as_ptr() as *const i32;
        for i in (0..n).step_by(8) {
            // SAFETY: i + 8 <= n, within the three slices; every cell is below
            // 2^CELL_BITS, the table's length (the top bits of a u64).
            let crossed = unsafe {
                let v = _mm256_loadu_si256(cell.as_ptr().add(i) as *const __m256i);
                let g = _mm256_i32gather_epi32::<4>(table, v);
                _mm256_storeu_si256(out.as_mut_ptr().add(i) as *mut __m256i, g);
                _mm256_movemask_ps(_mm256_castsi256_ps(g))
            };
            if crossed != 0 {
                for j in 0..8 {
                    if crossed & (1 << j) != 0 {
                        out[i + j] = self.sample(bits[i + j]);
                    }
                }
            }
        }
        n
    }
}

/// Streams per block of [`PoissonTable::sample_streams`]: their draws and cells
/// stay in L1 between its two loops.
const BLOCK: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    /// `below(bits, 0)` returned 0, outside the `0..n` its text promised (part E
    /// of pass 19): it panics by name now, as its `# Panics` says, and `n = 1`
    /// and `u32::MAX` still give values in range.
    #[test]
    fn below_zero_is_refused_by_name_not_answered_zero() {
        for bits in [0, 1, u64::MAX] {
            let e = std::panic::catch_unwind(|| below(bits, 0)).unwrap_err();
            let text = e
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| e.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            assert!(text.contains("n = 0 is invalid"), "{bits}: {text:?}");
            assert_eq!(below(bits, 1), 0);
            assert!(below(bits, u32::MAX) < u32::MAX);
        }
        assert_eq!(below(u64::MAX, u32::MAX), u32::MAX - 1);
    }

    /// `PoissonTable::new(f64::INFINITY)` summed a CDF that never reaches 1
    /// (`exp(-inf)` is 0) into a table without end, until the memory ran out
    /// (1 GB in 1.3 s here), and a NaN mean sampled 0 without a word: both are
    /// refused by name, as is a mean above the documented 500; the largest
    /// still makes its table.
    #[test]
    fn a_mean_beyond_the_table_is_refused_by_name() {
        for lambda in [f64::INFINITY, f64::NAN, 1e300, 500.5] {
            let e = std::panic::catch_unwind(|| PoissonTable::new(lambda)).unwrap_err();
            let text = e.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(
                text.contains("the Poisson mean") && text.contains("<= 500"),
                "{lambda}: {text:?}"
            );
        }
        assert!(PoissonTable::new(MAX_POISSON_MEAN).sample(u64::MAX / 2) > 400);
        assert_eq!(PoissonTable::new(-1.0).sample(u64::MAX), 0);
    }

    #[test]
    fn poisson_moments() {
        for &lambda in &[0.0, 0.3, 2.0, 37.5] {
            let t = PoissonTable::new(lambda);
            let n = 200_000u64;
            let (mut s, mut s2) = (0.0, 0.0);
            for i in 0..n {
                let k = t.sample(draw(stream_key(7, Purpose::External, 3), i)) as f64;
                s += k;
                s2 += k * k;
            }
            let mean = s / n as f64;
            let var = s2 / n as f64 - mean * mean;
            let tol = 5.0 * (lambda.max(0.01) / n as f64).sqrt();
            assert!((mean - lambda).abs() < tol, "lambda {lambda}: mean {mean}");
            assert!(
                (var - lambda).abs() < 0.03 * lambda.max(0.01) + tol,
                "var {var}"
            );
        }
    }

    /// An `out` shorter than `keys` is the documented panic naming both
    /// lengths (it was a slice's "range end index 4 out of range for slice
    /// of length 3", with no `# Panics` section: pass 18's C29); a longer
    /// one keeps its tail, and no keys take nothing.
    #[test]
    fn sample_streams_names_an_out_shorter_than_the_keys() {
        let t = PoissonTable::new(2.0);
        let keys = [1u64, 2, 3, 4];
        let mut out = [u32::MAX; 6];
        t.sample_streams(&keys, 5, &mut out);
        assert_eq!(out[4..], [u32::MAX; 2]);
        t.sample_streams(&[], 5, &mut []);
        let short = std::panic::catch_unwind(|| {
            t.sample_streams(&keys, 5, &mut [0u32; 3]);
        })
        .expect_err("a short out is refused");
        let said = short.downcast_ref::<String>().expect("a message");
        assert_eq!(
            said,
            "PoissonTable::sample_streams: an out of 3 samples for 4 keys"
        );
    }

    #[test]
    fn sample_streams_gives_each_streams_own_sample() {
        // Means whose CDF steps fall inside cells, one with a step exactly
        // at a cell's edge (P(X = 0) = 1/2 at ln 2), and none (0).
        for &lambda in &[0.0, 0.05, std::f64::consts::LN_2, 2.0, 37.5, 400.0] {
            let t = PoissonTable::new(lambda);
            let keys: Vec<u64> = (0..4099)
                .map(|i| stream_key(11, Purpose::External, i))
                .collect();
            let mut out = vec![u32::MAX; keys.len()];
            let mut crossed = 0;
            #[cfg(target_arch = "x86_64")]
            let avx2 = std::arch::is_x86_feature_detected!("avx2");
            #[cfg(not(target_arch = "x86_64"))]
            let avx2 = false;
            for counter in [0u64, 1, 17, 1 << 40, u64::MAX] {
                // The portable lookups and the gathers, where there are.
                for gather in [false, avx2] {
                    out.fill(u32::MAX);
                    t.sample_streams_with(&keys, counter, &mut out, gather);
                    for (i, &k) in keys.iter().enumerate() {
                        let want = t.sample(draw(k, counter));
                        assert_eq!(out[i], want, "lambda {lambda}, key {i}, gather {gather}");
                    }
                }
                t.sample_streams(&keys, counter, &mut out);
                for (i, &k) in keys.iter().enumerate() {
                    let bits = draw(k, counter);
                    assert_eq!(
                        out[i],
                        t.sample(bits),
                        "lambda {lambda}, key {i}, counter {counter}"
                    );
                    crossed += (t.cells[(bits >> (64 - CELL_BITS)) as usize] == CROSSED) as u32;
                }
            }
            // The slow path ran where the table has steps inside cells.
            assert_eq!(
                crossed > 0,
                lambda > 0.0,
                "lambda {lambda}: {crossed} crossed draws"
            );
        }
        // A cell that answers directly answers for its inside too.
        let t = PoissonTable::new(2.0);
        for b in 0..1u64 << CELL_BITS {
            let c = t.cells[b as usize];
            for i in 0..8 {
                let bits = (b << (64 - CELL_BITS)) | (draw(b, i) >> CELL_BITS);
                assert!(c == CROSSED || c == t.sample(bits), "cell {b}");
            }
        }
    }

    #[test]
    fn standard_normal_moments() {
        let key = stream_key(5, Purpose::Init, 0);
        let n = 100_000u64;
        let (mut s, mut s2) = (0.0, 0.0);
        for i in 0..n {
            let x = standard_normal(draw(key, 2 * i), draw(key, 2 * i + 1));
            assert!(x.is_finite());
            s += x;
            s2 += x * x;
        }
        let mean = s / n as f64;
        let var = s2 / n as f64 - mean * mean;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "var {var}");
        assert!(standard_normal(u64::MAX, 0).is_finite() && standard_normal(0, 0).is_finite());
    }

    #[test]
    fn below_is_in_range_and_uniform() {
        let mut hist = [0u32; 7];
        for i in 0..70_000 {
            hist[below(draw(99, i), 7) as usize] += 1;
        }
        assert!(
            hist.iter().all(|&h| (9_500..10_500).contains(&h)),
            "{hist:?}"
        );
    }
}
