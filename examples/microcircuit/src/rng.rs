//! Counter-based random streams keyed by what they are for, so that every draw
//! depends on (seed, purpose, ids, counter) and never on which rank or thread
//! makes it: the network and the spikes are the same for any decomposition, and
//! a checkpoint needs no generator state (the background uses the step as
//! counter).
//!
//! The mixing function is SplitMix64's, as in the brunel example
//! ([`brunel::rng`]).

use brunel::rng::{mix64, GOLDEN};
use rand::RngCore;

pub use brunel::rng::{below, draw, PoissonTable};

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
    fn keys_differ_by_every_part() {
        let k = key(1, Purpose::Wiring, 2, 3);
        assert_ne!(k, key(2, Purpose::Wiring, 2, 3));
        assert_ne!(k, key(1, Purpose::Weight, 2, 3));
        assert_ne!(k, key(1, Purpose::Wiring, 3, 2));
        assert_ne!(k, key(1, Purpose::Wiring, 2, 4));
    }
}
