//! The synapses onto one shard (a thread's contiguous range of neurons), drawn as
//! NEST's `fixed_total_number` rule draws them and stored compactly by source.
//!
//! # Drawing (independent of the decomposition)
//!
//! A projection of `N` synapses onto a population of `n` neurons gives each target
//! a multinomial in-degree. It is drawn as a binary tree of binomial splits over
//! the population's ids (`N` into `Binomial(N, left/n)` and the rest, recursively),
//! each split from a stream keyed by (projection, node): a shard evaluates only the
//! nodes that cover its own targets. Each target then draws its sources (uniform
//! in the source population) and delays from the stream keyed by (projection,
//! target), and its weights from another; weights and delays are normal,
//! redrawn outside `[0, inf)` (`(-inf, 0]` for inhibitory sources) and
//! `[dt/2, inf)` as NEST's `nest.math.redraw`, delays rounded to steps.
//!
//! # Storage (about 4.3 bytes per synapse at full scale)
//!
//! For every target population in the shard (a *segment*) and every source
//! neuron, a row of synapses grouped by delay:
//!
//! * `row[s]..row[s+1]`: the row's synapses in `syn`, one `u32` each: target index
//!   in the segment (16 bits) and weight in quanta of [`Model::q_exc`] or
//!   [`Model::q_inh`] (16 bits);
//! * `grp[s]..grp[s+1]`: the row's delay groups in `groups`, one `u32` each:
//!   delay in steps (8 bits) and the number of synapses (24 bits) that follow in
//!   the row with that delay, in increasing delay, targets ascending within a group.
//!
//! Delivering a spike touches one ring-buffer slot per delay group.

use rand_distr::{Binomial, Distribution};

use crate::params::{Model, NPOP};
use crate::rng::{below, key, normal_redraw, Purpose, Stream};

/// The synapses onto one target population's neurons in a shard.
#[derive(Clone, Debug, Default)]
pub struct Segment {
    /// Target population.
    pub pop: usize,
    /// Global id of the first target.
    pub first: u32,
    /// Number of targets.
    pub len: u32,
    /// Index of the first target in the shard.
    pub local0: u32,
    /// Per source: offsets into `syn` (`n + n_th + 1` entries).
    pub row: Vec<u32>,
    /// Per source: offsets into `groups`.
    pub grp: Vec<u32>,
    /// Delay groups: `delay << 24 | count`.
    pub groups: Vec<u32>,
    /// Synapses: `weight_quanta << 16 | target`.
    pub syn: Vec<u32>,
}

impl Segment {
    /// Bytes of memory the segment takes.
    pub fn bytes(&self) -> u64 {
        ((self.row.capacity() + self.grp.capacity() + self.groups.capacity() + self.syn.capacity())
            * 4) as u64
    }
}

/// The in-degrees of targets `a..b` (indices in the population of `n`) of a
/// projection of `total` synapses, keyed by `proj`.
pub fn indegrees(seed: u64, proj: u64, n: u32, total: u64, a: u32, b: u32) -> Vec<u32> {
    let mut out = vec![0u32; (b - a) as usize];
    #[allow(clippy::too_many_arguments)]
    fn split(seed: u64, proj: u64, lo: u32, hi: u32, total: u64, a: u32, b: u32, out: &mut [u32]) {
        if total == 0 || hi <= a || lo >= b {
            return;
        }
        if hi - lo == 1 {
            out[(lo - a) as usize] = total as u32;
            return;
        }
        let mid = lo + (hi - lo) / 2;
        let p = (mid - lo) as f64 / (hi - lo) as f64;
        let mut rng = Stream::new(key(
            seed,
            Purpose::Indegree,
            proj,
            (lo as u64) << 32 | hi as u64,
        ));
        let left = Binomial::new(total, p)
            .map(|d| d.sample(&mut rng))
            .unwrap_or(0);
        split(seed, proj, lo, mid, left, a, b, out);
        split(seed, proj, mid, hi, total - left, a, b, out);
    }
    split(seed, proj, 0, n, total, a, b, &mut out);
    out
}

/// The key of projection (target population, source population).
pub fn proj_key(target: usize, source: usize) -> u64 {
    (target * 16 + source) as u64
}

/// Calls `f(source gid, delay steps, weight quanta)` for every synapse onto global
/// target `t` from projection `q` (with its in-degree `k`), in a fixed order.
/// Without `weights` the weight stream is not drawn and `f` gets 0.
#[inline]
fn synapses_of(
    model: &Model,
    q: &crate::params::Projection,
    t: u32,
    k: u32,
    weights: bool,
    mut f: impl FnMut(u32, u32, u32),
) {
    let p = &model.params;
    let pk = proj_key(q.target, q.source);
    let mut wiring = Stream::new(key(p.seed, Purpose::Wiring, pk, t as u64));
    let mut wst = Stream::new(key(p.seed, Purpose::Weight, pk, t as u64));
    let (src0, nsrc) = if q.source == NPOP {
        (model.n, model.n_th)
    } else {
        (model.first[q.source], model.sizes[q.source])
    };
    let (wlo, whi, quantum) = if q.w_mean >= 0.0 {
        (0.0, f64::INFINITY, model.q_exc)
    } else {
        (f64::NEG_INFINITY, 0.0, model.q_inh)
    };
    let steps_per_ms = 1.0 / p.dt;
    let dmax = model.max_delay;
    for _ in 0..k {
        let s = src0 + below(wiring.next_u64_(), nsrc);
        let d = normal_redraw(&mut wiring, q.d_mean, q.d_std, 0.5 * p.dt, f64::INFINITY);
        let d = ((d * steps_per_ms + 0.5).floor() as u32).clamp(1, dmax);
        let w = if weights {
            let w = normal_redraw(&mut wst, q.w_mean, q.w_std, wlo, whi);
            ((w.abs() / quantum + 0.5).floor()).min(65535.0) as u32
        } else {
            0
        };
        f(s, d, w);
    }
}

trait Next {
    fn next_u64_(&mut self) -> u64;
}
impl Next for Stream {
    #[inline]
    fn next_u64_(&mut self) -> u64 {
        rand::RngCore::next_u64(self)
    }
}

/// Builds the segment of population `pop`'s targets `first..first + len` (global
/// ids), whose first target is the shard's `local0`-th neuron.
pub fn build_segment(model: &Model, pop: usize, first: u32, len: u32, local0: u32) -> Segment {
    let nsrc = (model.n + model.n_th) as usize;
    let nd = model.max_delay as usize + 1;
    let a = first - model.first[pop];
    let projs: Vec<&crate::params::Projection> = model
        .projections
        .iter()
        .filter(|q| q.target == pop)
        .collect();
    let indeg: Vec<Vec<u32>> = projs
        .iter()
        .map(|q| {
            indegrees(
                model.params.seed,
                proj_key(q.target, q.source),
                model.sizes[pop],
                q.synapses,
                a,
                a + len,
            )
        })
        .collect();
    // Pass 1: synapses per (source, delay).
    let mut count = vec![0u32; nsrc * nd];
    for (q, deg) in projs.iter().zip(&indeg) {
        for (i, &k) in deg.iter().enumerate() {
            synapses_of(model, q, first + i as u32, k, false, |s, d, _| {
                count[s as usize * nd + d as usize] += 1;
            });
        }
    }
    let mut row = Vec::with_capacity(nsrc + 1);
    let mut grp = Vec::with_capacity(nsrc + 1);
    let mut groups = Vec::new();
    let mut total = 0u32;
    for s in 0..nsrc {
        row.push(total);
        grp.push(groups.len() as u32);
        for d in 0..nd {
            let c = &mut count[s * nd + d];
            if *c > 0 {
                groups.push((d as u32) << 24 | *c);
                let start = total;
                total += *c;
                *c = start;
            }
        }
    }
    row.push(total);
    grp.push(groups.len() as u32);
    groups.shrink_to_fit();
    // Pass 2: the same draws, with weights, into place.
    let mut syn = vec![0u32; total as usize];
    for (q, deg) in projs.iter().zip(&indeg) {
        for (i, &k) in deg.iter().enumerate() {
            synapses_of(model, q, first + i as u32, k, true, |s, d, w| {
                let c = &mut count[s as usize * nd + d as usize];
                syn[*c as usize] = w << 16 | i as u32;
                *c += 1;
            });
        }
    }
    Segment {
        pop,
        first,
        len,
        local0,
        row,
        grp,
        groups,
        syn,
    }
}

/// The segments of the neurons `first..first + len` (global ids): one per
/// population they cover.
pub fn build_shard(model: &Model, first: u32, len: u32) -> Vec<Segment> {
    let end = first + len;
    (0..NPOP)
        .filter_map(|pop| {
            let lo = first.max(model.first[pop]);
            let hi = end.min(model.first[pop + 1]);
            (lo < hi).then(|| build_segment(model, pop, lo, hi - lo, lo - first))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Params;

    #[test]
    fn indegrees_sum_and_do_not_depend_on_the_range() {
        let whole = indegrees(7, 3, 1000, 123_456, 0, 1000);
        assert_eq!(whole.iter().map(|&x| x as u64).sum::<u64>(), 123_456);
        let mean = 123.456;
        let var = whole
            .iter()
            .map(|&x| (x as f64 - mean).powi(2))
            .sum::<f64>()
            / 1000.0;
        // Multinomial: variance N p (1 - p) ~ 123.3.
        assert!((var - 123.3).abs() < 25.0, "{var}");
        for (a, b) in [(0, 1), (17, 400), (999, 1000), (500, 1000)] {
            assert_eq!(
                indegrees(7, 3, 1000, 123_456, a, b),
                whole[a as usize..b as usize]
            );
        }
    }

    #[test]
    fn shards_hold_the_projection_totals_and_split_cleanly() {
        let m = Model::new(Params {
            n_scaling: 0.02,
            k_scaling: 0.05,
            ..Params::default()
        })
        .unwrap();
        let whole = build_shard(&m, 0, m.n);
        let n: u64 = whole.iter().map(|s| s.syn.len() as u64).sum();
        assert_eq!(n, m.synapses());
        // Split in two at an arbitrary id: the same synapses, rows by source.
        let cut = m.n / 3 + 5;
        let parts = [build_shard(&m, 0, cut), build_shard(&m, cut, m.n - cut)];
        let mut a: Vec<(u32, u32, u32, u32)> = Vec::new();
        let collect = |segs: &[Segment], out: &mut Vec<(u32, u32, u32, u32)>| {
            for sg in segs {
                for s in 0..(m.n as usize) {
                    let mut pos = sg.row[s] as usize;
                    for &g in &sg.groups[sg.grp[s] as usize..sg.grp[s + 1] as usize] {
                        let (d, c) = (g >> 24, g & 0xFF_FFFF);
                        for &x in &sg.syn[pos..pos + c as usize] {
                            out.push((s as u32, sg.first + (x & 0xFFFF), d, x >> 16));
                        }
                        pos += c as usize;
                    }
                    assert_eq!(pos, sg.row[s + 1] as usize);
                }
            }
        };
        collect(&whole, &mut a);
        let mut b = Vec::new();
        for p in &parts {
            collect(p, &mut b);
        }
        a.sort_unstable();
        b.sort_unstable();
        assert!(a == b);
        // Delays at least one step, weights near their means.
        assert!(a.iter().all(|x| x.2 >= 1 && x.2 <= m.max_delay));
        let exc: Vec<f64> = a
            .iter()
            .filter(|x| x.0 < m.first[1] && x.1 >= m.first[1] && x.1 < m.first[2])
            .map(|x| x.3 as f64 * m.q_exc)
            .collect();
        let mean = exc.iter().sum::<f64>() / exc.len() as f64;
        assert!(
            (mean - m.w_ext).abs() < 0.02 * m.w_ext,
            "{mean} vs {}",
            m.w_ext
        );
    }
}
