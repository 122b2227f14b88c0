//! A shard: one thread's neurons, their state, calendar and update.

use crate::network::{Conn, COUNT_BITS, COUNT_MAX};
use crate::params::NPOP;
use crate::rng::{key, uniforms32, Poisson32, Purpose};

/// Constants of the update.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dyn {
    pub(super) p22: f64,
    pub(super) p21: f64,
    pub(super) p20: f64,
    pub(super) p11: f64,
    pub(super) theta: f64,
    pub(super) v_reset: f64,
    pub(super) ref_steps: u32,
    pub(super) q_syn: f64,
    pub(super) w_ext: f64,
    pub(super) dc: [f64; NPOP],
    /// Whether each population has a Poisson background.
    pub(super) bg: [bool; NPOP],
    /// Key of the background streams (one per step, counter = neuron).
    pub(super) bg_key: u64,
    pub(super) gid_bits: u32,
    pub(super) gid_mask: u32,
}

/// Whether [`Shard::update`] runs its portable build on every processor.
static PORTABLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes the neuron update run its portable build (`true`) even where the
/// processor has AVX2 or AVX-512, for which it is also compiled and chosen at
/// run time (the default, `false`). Both give the same spikes: Rust fuses no
/// multiply with an add unless asked, so the wider instructions compute the
/// same bits; a test checks it.
pub fn set_portable_update(portable: bool) {
    PORTABLE.store(portable, std::sync::atomic::Ordering::Relaxed);
}

/// A spike whose synapses onto the shard are not all delivered yet, waiting in
/// the calendar slot of the step its next group is due.
#[derive(Clone, Copy, Debug)]
pub(super) struct Active {
    /// Next group of its row.
    pub(super) g: u32,
    /// End of its row's groups.
    pub(super) gend: u32,
    /// Position in `syn` of the next group's synapses.
    pub(super) pos: u32,
    /// Inhibitory source.
    pub(super) neg: bool,
    /// Step it was emitted in.
    pub(super) t0: u64,
}

pub(super) struct Shard {
    pub(super) first: u32,
    pub(super) len: u32,
    pub(super) conn: Conn,
    pub(super) v: Vec<f64>,
    pub(super) isyn: Vec<f64>,
    pub(super) refr: Vec<u32>,
    /// Input arriving in the current step, in weight quanta.
    pub(super) input: Vec<i32>,
    /// Calendar of spikes in flight: slot `u & mask` holds those with a group due
    /// in step `u` (every delay is below the number of slots).
    pub(super) calendar: Vec<Vec<Active>>,
    /// A spare slot, swapped with the one being delivered.
    pub(super) spare: Vec<Active>,
    pub(super) spikes: Vec<u32>,
    pub(super) events: u64,
    /// The update's buffers.
    pub(super) scratch: Scratch,
}

impl Shard {
    /// Starts delivering the spike of `gid` emitted in step `t0`; groups due
    /// before step `now` (delivered before a checkpoint) are skipped.
    #[inline]
    pub(super) fn activate(&mut self, gid: u32, t0: u64, now: u64, neg: bool) {
        let c = &self.conn;
        let s = gid as usize;
        let (mut g, gend) = (c.grp[s], c.grp[s + 1]);
        let mut pos = c.row[s];
        while g < gend && t0 + (c.groups[g as usize] >> 24) as u64 <= now.saturating_sub(1) {
            pos += c.groups[g as usize] & COUNT_MAX;
            g += 1;
        }
        if g < gend {
            let due = t0 + (c.groups[g as usize] >> 24) as u64;
            let mask = self.calendar.len() - 1;
            self.calendar[due as usize & mask].push(Active {
                g,
                gend,
                pos,
                neg,
                t0,
            });
        }
    }

    /// Adds the input of every group due in step `u` to `input`, and files each
    /// spike under the step of its next group.
    pub(super) fn deliver(&mut self, u: u64) {
        let (groups, syn, base) = (&self.conn.groups, &self.conn.syn, &self.conn.syn_base);
        let input = &mut self.input[..];
        let mask = self.calendar.len() - 1;
        // The next step's spikes: fetch their groups and first synapses into cache
        // while this step delivers and updates.
        for a in &self.calendar[(u + 1) as usize & mask] {
            prefetch::<L2, _>(&groups[a.g as usize]);
            prefetch::<L2, _>(&syn[a.pos as usize]);
        }
        let mut due = std::mem::take(&mut self.spare);
        std::mem::swap(&mut due, &mut self.calendar[u as usize & mask]);
        let mut events = 0u64;
        for i in 0..due.len() {
            // A few spikes ahead: their group word and first synapses into L1
            // while this one's adds run (the step-ahead prefetch above brought
            // them nearer, and the update since may have pushed them out of L2).
            if let Some(f) = due.get(i + AHEAD) {
                prefetch::<L1, _>(&groups[f.g as usize]);
                prefetch::<L1, _>(&syn[f.pos as usize]);
            }
            let mut a = due[i];
            let age = (u - a.t0) as u32;
            while a.g < a.gend {
                let gr = groups[a.g as usize];
                let d = gr >> 24;
                if d > age {
                    break;
                }
                debug_assert_eq!(d, age, "a group was not delivered in its step");
                let cnt = gr & COUNT_MAX;
                let b = base[((gr >> COUNT_BITS) & 7) as usize] as usize;
                let tg = &mut input[b..];
                let ws = &syn[a.pos as usize..(a.pos + cnt) as usize];
                if a.neg {
                    for &w in ws {
                        tg[(w & 0xFFFF) as usize] -= (w >> 16) as i32;
                    }
                } else {
                    for &w in ws {
                        tg[(w & 0xFFFF) as usize] += (w >> 16) as i32;
                    }
                }
                events += cnt as u64;
                a.pos += cnt;
                a.g += 1;
            }
            if a.g < a.gend {
                let next = a.t0 + (groups[a.g as usize] >> 24) as u64;
                self.calendar[next as usize & mask].push(a);
            }
        }
        due.clear();
        self.spare = due;
        self.events += events;
    }

    /// Updates step `u` (`s`-th of its interval), appending spike codes to `spikes`.
    ///
    /// Per chunk of a population's neurons that fits L1, two loops without
    /// branches that the compiler turns into vector instructions: the
    /// background counts (one hash per pair of neurons, then a guide-table
    /// lookup per neuron, [`background`]), then the neurons' exact update,
    /// which also counts the chunk's spikes; only a chunk with a spike is
    /// scanned for them, in the refractory counters that were just set.
    pub(super) fn update(&mut self, u: u64, s: u32, d: &Dyn, pois: &[Poisson32; NPOP]) {
        #[cfg(target_arch = "x86_64")]
        if !PORTABLE.load(std::sync::atomic::Ordering::Relaxed) {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx512dq") && has!("avx512vl") {
                // SAFETY: the processor has the features the function is compiled for.
                return unsafe { self.update_avx512(u, s, d, pois) };
            }
            if has!("avx2") {
                // SAFETY: as above.
                return unsafe { self.update_avx2(u, s, d, pois) };
            }
        }
        self.update_body(u, s, d, pois, false)
    }

    /// [`Shard::update`] compiled for AVX-512 (4 to 8 neurons per instruction,
    /// and the background's 64-bit multiplies vectorised). Rust never fuses a
    /// multiply and an add on its own, so every variant computes the same bits.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,avx512f,avx512dq,avx512vl")]
    unsafe fn update_avx512(&mut self, u: u64, s: u32, d: &Dyn, pois: &[Poisson32; NPOP]) {
        self.update_body(u, s, d, pois, true)
    }

    /// [`Shard::update`] compiled for AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn update_avx2(&mut self, u: u64, s: u32, d: &Dyn, pois: &[Poisson32; NPOP]) {
        self.update_body(u, s, d, pois, true)
    }

    #[inline(always)]
    /// The update; `avx2`: compiled for AVX2 or wider, whose gathers the
    /// background's lookups use.
    fn update_body(&mut self, u: u64, s: u32, d: &Dyn, pois: &[Poisson32; NPOP], avx2: bool) {
        let code0 = s << d.gid_bits;
        let bg_key = key(d.bg_key, Purpose::Background, u, 0);
        for pop in 0..NPOP {
            let a = self.conn.pop_base[pop] as usize;
            let b = if pop + 1 < NPOP {
                self.conn.pop_base[pop + 1] as usize
            } else {
                self.len as usize
            };
            if a >= b {
                continue;
            }
            let dc = d.dc[pop] * d.p20;
            let (p22, p21, p11, q, w_ext) = (d.p22, d.p21, d.p11, d.q_syn, d.w_ext);
            let (theta, v_reset, ref_steps) = (d.theta, d.v_reset, d.ref_steps);
            // In chunks that stay in L1: the background counts of a chunk, then
            // its neurons.
            let mut c0 = a;
            while c0 < b {
                let c1 = (c0 + CHUNK).min(b);
                let n = c1 - c0;
                let ext = &mut self.scratch.ext[..n];
                if d.bg[pop] {
                    let gid = (self.first as usize + c0) as u64;
                    background(&pois[pop], bg_key, gid, &mut self.scratch.u, ext, avx2);
                } else {
                    ext.fill(0.0);
                }
                let (v, isyn, refr, input) = (
                    &mut self.v[c0..c1],
                    &mut self.isyn[c0..c1],
                    &mut self.refr[c0..c1],
                    &mut self.input[c0..c1],
                );
                let mut fired = 0u32;
                for i in 0..n {
                    let inp = input[i] as f64 * q + ext[i] * w_ext;
                    input[i] = 0;
                    let r = refr[i];
                    let x = if r == 0 {
                        v[i] * p22 + isyn[i] * p21 + dc
                    } else {
                        v[i]
                    };
                    isyn[i] = isyn[i] * p11 + inp;
                    let spike = x >= theta;
                    fired += spike as u32;
                    v[i] = if spike { v_reset } else { x };
                    refr[i] = if spike {
                        ref_steps
                    } else {
                        r.saturating_sub(1)
                    };
                }
                if fired > 0 {
                    // A counter at its full value was set in this step (t_ref is
                    // at least one step, so a counter set before has counted
                    // down): a spike.
                    let gid0 = self.first + c0 as u32;
                    for (i, &r) in refr.iter().enumerate() {
                        if r == ref_steps {
                            self.spikes.push(code0 | (gid0 + i as u32));
                        }
                    }
                }
                c0 = c1;
            }
        }
    }
}

/// Neurons per chunk of the update: their state, input and background counts
/// stay in L1 between the chunk's two loops.
const CHUNK: usize = 512;

/// The update's buffers for one chunk, kept from step to step (they need no
/// clearing: every chunk writes what it reads).
pub(super) struct Scratch {
    /// The chunk's uniforms, two per draw (one more pair when the chunk starts
    /// on an odd neuron).
    u: Box<[u32; CHUNK + 2]>,
    /// The chunk's background counts.
    ext: Box<[f64; CHUNK]>,
}

impl Default for Scratch {
    fn default() -> Scratch {
        Scratch {
            u: Box::new([0; CHUNK + 2]),
            ext: Box::new([0.0; CHUNK]),
        }
    }
}

/// The background counts of the neurons `gid0..gid0 + out.len()` (at most
/// [`CHUNK`]) in step key `bg_key`: one 64-bit draw per pair of neurons (2k,
/// 2k + 1), the even one taking the low 32 bits and the odd one the high 32, as
/// uniforms of 32-bit resolution for the table's inverse. The draws of the
/// chunk first, then the lookups: two loops the compiler vectorises.
#[inline(always)]
pub(super) fn background(
    table: &Poisson32,
    bg_key: u64,
    gid0: u64,
    u: &mut [u32; CHUNK + 2],
    out: &mut [f64],
    gather: bool,
) {
    let n = out.len();
    let off = (gid0 & 1) as usize;
    let pairs = (off + n).div_ceil(2);
    uniforms32(bg_key, gid0 >> 1, &mut u[..2 * pairs]);
    table.fill(&u[off..off + n], out, gather);
}

/// Spikes ahead of the one delivering whose groups [`Shard::deliver`]
/// prefetches into L1.
const AHEAD: usize = 4;

/// Cache levels for [`prefetch`]: x86's `_MM_HINT_T0` (into L1) and
/// `_MM_HINT_T1` (into L2).
const L1: i32 = 3;
const L2: i32 = 2;

/// Hints the processor to bring `x`'s cache line into cache level `LEVEL`
/// ([`L1`] or [`L2`]).
#[inline(always)]
fn prefetch<const LEVEL: i32, T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it reads nothing architecturally and cannot
    // fault, and `x` is a valid reference besides.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<LEVEL>(x as *const T as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::draw;

    /// The count of neuron `gid` in step key `k`, one neuron at a time: the
    /// stream [`background`] draws from.
    fn one(table: &Poisson32, k: u64, gid: u64) -> f64 {
        let h = draw(k, gid >> 1);
        table.sample((h >> (32 * (gid & 1))) as u32) as f64
    }

    #[test]
    fn background_draws_the_stream_of_each_neuron() {
        let table = Poisson32::new(1.6);
        for step in 0..20u64 {
            let k = key(55, Purpose::Background, step, 0);
            for (gid0, n) in [
                (0u64, CHUNK),
                (1, CHUNK),
                (7, 1),
                (8, 0),
                (77_168, 1),
                (3, 130),
            ] {
                #[cfg(target_arch = "x86_64")]
                let wide = std::arch::is_x86_feature_detected!("avx2");
                #[cfg(not(target_arch = "x86_64"))]
                let wide = false;
                let mut out = vec![-1.0; n];
                background(&table, k, gid0, &mut Scratch::default().u, &mut out, wide);
                for (i, &o) in out.iter().enumerate() {
                    assert_eq!(
                        o,
                        one(&table, k, gid0 + i as u64),
                        "step {step}, neuron {}",
                        gid0 + i as u64
                    );
                }
            }
        }
    }

    /// The chi-square statistic of the counts `hist` against Poisson(`lambda`),
    /// neighbouring bins merged until each expects at least 5 (the tail beyond
    /// the last one too), and its degrees of freedom.
    fn chi_square(hist: &[u64], lambda: f64) -> (f64, usize) {
        let n = hist.iter().sum::<u64>() as f64;
        let mut pmf = (-lambda).exp();
        let (mut stat, mut bins) = (0.0, 0);
        let (mut rest_p, mut rest_o) = (1.0, n);
        let (mut acc_p, mut acc_o) = (0.0, 0.0);
        for (k, &o) in hist.iter().enumerate() {
            (acc_p, acc_o) = (acc_p + pmf, acc_o + o as f64);
            (rest_p, rest_o) = (rest_p - pmf, rest_o - o as f64);
            pmf *= lambda / (k + 1) as f64;
            if n * rest_p < 5.0 {
                break;
            }
            if n * acc_p >= 5.0 {
                stat += (acc_o - n * acc_p).powi(2) / (n * acc_p);
                bins += 1;
                (acc_p, acc_o) = (0.0, 0.0);
            }
        }
        let e = n * (rest_p + acc_p);
        stat += (rest_o + acc_o - e).powi(2) / e;
        (stat, bins)
    }

    /// The chi-square's value that `df` degrees of freedom exceed with
    /// probability 0.001 (Wilson and Hilferty's approximation).
    fn critical(df: usize) -> f64 {
        let d = df as f64;
        let a = 2.0 / (9.0 * d);
        d * (1.0 - a + 3.09 * a.sqrt()).powi(3)
    }

    #[test]
    fn background_counts_are_poisson_per_neuron_and_independent_of_the_neighbour() {
        for lambda in [0.16, 1.6, 9.5] {
            let table = Poisson32::new(lambda);
            // Across a chunk (odd start: pairs split between chunks) over steps.
            let (mut hist, mut even_odd) = (vec![0u64; 64], Vec::new());
            let mut scratch = Scratch::default();
            for step in 0..400u64 {
                let k = key(56, Purpose::Background, step, 0);
                let mut out = vec![0.0; CHUNK - 1];
                background(&table, k, 1001, &mut scratch.u, &mut out, false);
                for (i, &c) in out.iter().enumerate() {
                    hist[c as usize] += 1;
                    // Neurons 1002 + 2j and 1003 + 2j share a draw.
                    if i % 2 == 1 && i + 1 < out.len() {
                        even_odd.push((c, out[i + 1]));
                    }
                }
            }
            let (stat, df) = chi_square(&hist, lambda);
            assert!(
                stat < critical(df),
                "lambda {lambda}: chi-square {stat:.1} with {df} degrees of freedom"
            );
            // Neighbours that share a draw are uncorrelated.
            let m = even_odd.len() as f64;
            let (ma, mb) = even_odd
                .iter()
                .fold((0.0, 0.0), |(x, y), &(a, b)| (x + a / m, y + b / m));
            let cov = even_odd
                .iter()
                .map(|&(a, b)| (a - ma) * (b - mb))
                .sum::<f64>()
                / m;
            let r = cov / lambda;
            assert!(
                r.abs() < 4.0 / m.sqrt(),
                "lambda {lambda}: correlation {r:.4} of neighbours"
            );
            // One neuron over many steps: mean and variance lambda.
            let (mut s, mut s2) = (0.0, 0.0);
            let steps = 50_000u64;
            let mut one_hist = vec![0u64; 64];
            for step in 0..steps {
                let mut out = [0.0; 1];
                let k = key(57, Purpose::Background, step, 0);
                background(&table, k, 4243, &mut scratch.u, &mut out, false);
                (s, s2) = (s + out[0], s2 + out[0] * out[0]);
                one_hist[out[0] as usize] += 1;
            }
            let mean = s / steps as f64;
            let var = s2 / steps as f64 - mean * mean;
            let tol = 5.0 * (lambda / steps as f64).sqrt();
            assert!((mean - lambda).abs() < tol, "lambda {lambda}: mean {mean}");
            assert!(
                (var - lambda).abs() < 0.05 * lambda + tol,
                "lambda {lambda}: variance {var}"
            );
            let (stat, df) = chi_square(&one_hist, lambda);
            assert!(
                stat < critical(df),
                "lambda {lambda}, one neuron: chi-square {stat:.1} with {df} degrees of freedom"
            );
        }
    }
}
