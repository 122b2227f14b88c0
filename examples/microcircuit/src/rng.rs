//! Counter-based random streams keyed by what they are for, so that every draw
//! depends on (seed, purpose, ids, counter) and never on which rank or thread
//! makes it: the network and the spikes are the same for any decomposition, and
//! a checkpoint needs no generator state (the background uses the step as
//! counter).
//!
//! The mixing function is SplitMix64's, as in the brunel example
//! ([`hpc_spiking::rng`]).

use hpc_spiking::rng::{mix64, GOLDEN};
use rand::RngCore;

pub use hpc_spiking::rng::{below, draw, PoissonTable};

/// What a stream is for; part of its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Purpose {
    /// The split of a projection's synapses over its targets (key: projection, tree node).
    Indegree = 11,
    /// Sources of a target's synapses (key: projection, target).
    Wiring = 12,
    /// Delays of a target's synapses (key: projection, target).
    Delay = 17,
    /// Weights of a target's synapses (key: projection, target).
    Weight = 13,
    /// Initial membrane potential (key: neuron).
    V0 = 14,
    /// Background Poisson input (key: neuron; counter: step).
    Background = 15,
    /// Thalamic spikes (key: thalamic neuron; counter: step).
    Thalamus = 16,
}

/// The key of the stream of `purpose` for the ids `a`, `b`.
#[inline]
pub fn key(seed: u64, purpose: Purpose, a: u64, b: u64) -> u64 {
    let s = mix64(seed ^ (purpose as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93));
    let s = mix64(s ^ mix64(a.wrapping_add(GOLDEN)));
    mix64(s ^ mix64(b.wrapping_add(GOLDEN.wrapping_mul(3))))
}

/// A stream as a `rand` generator: draw `i` is [`draw`]`(key, i)`.
#[derive(Clone, Debug)]
pub struct Stream {
    key: u64,
    counter: u64,
}

impl Stream {
    /// The stream `key`, from its first draw.
    #[inline]
    pub fn new(key: u64) -> Stream {
        Stream { key, counter: 0 }
    }
}

impl RngCore for Stream {
    #[inline]
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    #[inline]
    fn next_u64(&mut self) -> u64 {
        let x = draw(self.key, self.counter);
        self.counter += 1;
        x
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for c in dst.chunks_mut(8) {
            let x = self.next_u64().to_le_bytes();
            c.copy_from_slice(&x[..c.len()]);
        }
    }
}

/// Poisson sampling from a 32-bit uniform by inversion of the tabulated CDF (the
/// same table as [`PoissonTable`]: for `x` it returns what `PoissonTable` returns
/// for `x << 32`). A 4096-entry guide answers directly for every uniform except
/// those in the few guide cells that a CDF step crosses.
#[derive(Clone, Debug)]
pub struct Poisson32 {
    /// `thresholds[k]`: the smallest `x` with `P(X <= k) * 2^64 <= x << 32`.
    thresholds: Vec<u64>,
    /// Per cell of 2^20 uniforms: the answer, or 0x80 | the smallest candidate
    /// (32 bits each, so that a vector gather reads it).
    guide: Box<[u32; 4096]>,
}

impl Poisson32 {
    /// The table for mean `lambda` (0 <= lambda <= 50; the model refuses more).
    pub fn new(lambda: f64) -> Poisson32 {
        // The CDF exactly as `PoissonTable::new` computes it.
        let t64 = hpc_spiking::rng::poisson_cdf_2_64(lambda);
        let thresholds: Vec<u64> = t64
            .iter()
            .map(|&t| ((t as u128 + (1u128 << 32) - 1) >> 32) as u64)
            .collect();
        let count = |x: u64| thresholds.partition_point(|&t| t <= x);
        let mut guide = Box::new([0u32; 4096]);
        for (b, g) in guide.iter_mut().enumerate() {
            let lo = (b as u64) << 20;
            let hi = lo + (1 << 20) - 1;
            let (k0, k1) = (count(lo), count(hi));
            assert!(k1 < 0x80, "Poisson32 supports means up to about 100");
            *g = if k0 == k1 {
                k0 as u32
            } else {
                0x80 | k0 as u32
            };
        }
        Poisson32 { thresholds, guide }
    }

    /// The samples for the uniforms `x`, as `f64`, into `out` (as long as `x`):
    /// the same as [`Poisson32::sample`] of each. A pass without branches over
    /// the guide (with `gather`, eight lookups per AVX2 gather; the caller
    /// says whether the processor has AVX2), then
    /// [`Poisson32::sample`] for the few uniforms in a cell that a CDF step
    /// crosses (a guide entry of 0x80 or more stands for one).
    #[inline(always)]
    pub fn fill(&self, x: &[u32], out: &mut [f64], gather: bool) {
        let out = &mut out[..x.len()];
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if gather {
            // SAFETY: the caller has checked that the processor has AVX2.
            done = unsafe { self.fill_avx2(x, out) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = gather;
        let (out, x) = (&mut out[done..], &x[done..]);
        let mut crossed = 0u32;
        for (o, &x) in out.iter_mut().zip(x) {
            let g = self.guide[(x >> 20) as usize];
            crossed |= g;
            // Below 256: as i32, the conversion every vector width has.
            *o = g as i32 as f64;
        }
        if crossed & 0x80 != 0 {
            for (o, &x) in out.iter_mut().zip(x) {
                if *o >= 128.0 {
                    *o = self.sample(x) as f64;
                }
            }
        }
    }

    /// The samples for the first multiple of 8 of `x` into `out`, as `f64`:
    /// how many it did. Eight guide entries per gather; the few octets with
    /// an entry of a crossed cell (a branch taken for about 3 % of them at a
    /// mean of 1.6) take [`Poisson32::sample`] for those entries.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn fill_avx2(&self, x: &[u32], out: &mut [f64]) -> usize {
        use std::arch::x86_64::*;
        let n = x.len().min(out.len()) / 8 * 8;
        let guide = self.guide.as_ptr() as *const i32;
        for i in (0..n).step_by(8) {
            // SAFETY: i + 8 <= n, within both slices; every index (x >> 20) is
            // below the guide's 4096 entries.
            let crossed = unsafe {
                let v = _mm256_loadu_si256(x.as_ptr().add(i) as *const __m256i);
                let g = _mm256_i32gather_epi32::<4>(guide, _mm256_srli_epi32::<20>(v));
                let o = out.as_mut_ptr().add(i);
                _mm256_storeu_pd(o, _mm256_cvtepi32_pd(_mm256_castsi256_si128(g)));
                _mm256_storeu_pd(
                    o.add(4),
                    _mm256_cvtepi32_pd(_mm256_extracti128_si256::<1>(g)),
                );
                // Bit 7 of each entry (0x80: a crossed cell) to the sign.
                _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_slli_epi32::<24>(g)))
            };
            if crossed != 0 {
                for j in 0..8 {
                    if crossed & (1 << j) != 0 {
                        out[i + j] = self.sample(x[i + j]) as f64;
                    }
                }
            }
        }
        n
    }

    /// The sample for the 32-bit uniform `x`.
    #[inline(always)]
    pub fn sample(&self, x: u32) -> u32 {
        let g = self.guide[(x >> 20) as usize];
        if g & 0x80 == 0 {
            return g;
        }
        let mut k = (g & 0x7F) as usize;
        while k < self.thresholds.len() && self.thresholds[k] <= x as u64 {
            k += 1;
        }
        k as u32
    }
}

/// Draws `c0..c0 + out.len() / 2` of the stream `key`, each as two 32-bit
/// uniforms, its low half first: `out[2k]` and `out[2k + 1]` are the low and
/// high halves of [`draw`]`(key, c0 + k)` (`out.len()` must be even). The
/// counter's multiple of the increment is carried from one draw to the next,
/// and the loop has no dependence between draws, so the compiler turns it into
/// vector instructions (the 64-bit multiplies too, where the processor has
/// them).
#[inline(always)]
pub fn uniforms32(key: u64, c0: u64, out: &mut [u32]) {
    assert!(out.len() % 2 == 0, "uniforms32 fills pairs of uniforms");
    let base = key.wrapping_add(c0.wrapping_add(1).wrapping_mul(GOLDEN));
    for (k, w) in out.chunks_exact_mut(2).enumerate() {
        let h = mix64(base.wrapping_add((k as u64).wrapping_mul(GOLDEN)));
        w[0] = h as u32;
        w[1] = (h >> 32) as u32;
    }
}

/// A normal sample from `rng`, redrawn until it lies in `[lo, hi]` (NEST's
/// `nest.math.redraw`).
#[inline]
pub fn normal_redraw(rng: &mut Stream, mean: f64, std: f64, lo: f64, hi: f64) -> f64 {
    if std == 0.0 {
        return mean.clamp(lo, hi);
    }
    loop {
        let z: f64 = rand::Rng::sample(rng, rand_distr::StandardNormal);
        let x = mean + std * z;
        if x >= lo && x <= hi {
            return x;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redraw_stays_in_bounds_and_keeps_the_mean_above() {
        let mut s = Stream::new(key(1, Purpose::Weight, 2, 3));
        let n = 100_000;
        let mut sum = 0.0;
        for _ in 0..n {
            let x = normal_redraw(&mut s, 1.5, 0.75, 0.05, f64::INFINITY);
            assert!(x >= 0.05);
            sum += x;
        }
        // Truncated normal at -1.93 sd: mean 1.5 + 0.75 * phi(1.93)/Phi(1.93) ~ 1.546.
        let mean = sum / n as f64;
        assert!((mean - 1.546).abs() < 0.01, "{mean}");
    }

    #[test]
    fn poisson32_answers_as_the_64_bit_table() {
        for lambda in [0.0, 0.16, 1.28, 2.32, 9.5] {
            let (a, b) = (PoissonTable::new(lambda), Poisson32::new(lambda));
            let mut s = Stream::new(key(3, Purpose::Background, 1, 2));
            for _ in 0..200_000 {
                let x = rand::RngCore::next_u32(&mut s);
                assert_eq!(
                    b.sample(x),
                    a.sample((x as u64) << 32),
                    "lambda {lambda}, x {x}"
                );
            }
            // Both sides of every threshold.
            for &t in &b.thresholds {
                for x in [t.saturating_sub(1), t, t + 1] {
                    if x <= u32::MAX as u64 {
                        let x = x as u32;
                        assert_eq!(b.sample(x), a.sample((x as u64) << 32));
                    }
                }
            }
        }
    }

    #[test]
    fn uniforms32_are_the_halves_of_the_draws() {
        let k = key(9, Purpose::Background, 4, 0);
        for c0 in [0u64, 1, 1 << 40, u64::MAX - 3] {
            let mut u = [0u32; 10];
            uniforms32(k, c0, &mut u);
            for j in 0..5 {
                let h = draw(k, c0.wrapping_add(j as u64));
                assert_eq!((u[2 * j], u[2 * j + 1]), (h as u32, (h >> 32) as u32));
            }
        }
    }

    #[test]
    fn fill_answers_as_sample() {
        for lambda in [0.0, 0.16, 1.28, 2.32, 9.5, 40.0] {
            let t = Poisson32::new(lambda);
            let mut x = vec![0u32; 4096];
            uniforms32(key(5, Purpose::Background, 7, 0), 0, &mut x);
            // Both sides of every threshold, among random uniforms.
            for (i, &th) in t.thresholds.iter().enumerate() {
                for (j, d) in [-1i64, 0, 1].into_iter().enumerate() {
                    let y = (th as i64 + d).clamp(0, u32::MAX as i64) as u32;
                    x[(7 * (3 * i + j)) % 4096] = y;
                }
            }
            #[cfg(target_arch = "x86_64")]
            let wide = std::arch::is_x86_feature_detected!("avx2");
            #[cfg(not(target_arch = "x86_64"))]
            let wide = false;
            for (len, gather) in [0, 1, 7, 17, 512, 4096]
                .into_iter()
                .flat_map(|l| [(l, false), (l, wide)])
            {
                let mut out = vec![-1.0f64; len + 1];
                t.fill(&x[..len], &mut out, gather);
                for i in 0..len {
                    assert_eq!(out[i], t.sample(x[i]) as f64, "lambda {lambda}, x {}", x[i]);
                }
                assert_eq!(out[len], -1.0, "fill wrote past its uniforms");
            }
        }
    }

    #[test]
    fn keys_differ_by_every_part() {
        let k = key(1, Purpose::Wiring, 2, 3);
        assert_ne!(k, key(2, Purpose::Wiring, 2, 3));
        assert_ne!(k, key(1, Purpose::Weight, 2, 3));
        assert_ne!(k, key(1, Purpose::Wiring, 3, 2));
        assert_ne!(k, key(1, Purpose::Wiring, 2, 4));
    }
}
