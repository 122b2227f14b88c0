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
//! in the source population), delays and weights from three streams keyed by
//! (projection, target); weights and delays are normal,
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

use crate::params::{Model, Projection, NPOP};
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

/// The draws of one target's synapses from one projection.
struct Draws<'m> {
    model: &'m Model,
    sources: Stream,
    delays: Stream,
    weights: Stream,
    src0: u32,
    nsrc: u32,
    q: &'m Projection,
    wlo: f64,
    whi: f64,
    quantum: f64,
}

impl<'m> Draws<'m> {
    fn new(model: &'m Model, q: &'m Projection, t: u32) -> Draws<'m> {
        let seed = model.params.seed;
        let pk = proj_key(q.target, q.source);
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
        Draws {
            model,
            sources: Stream::new(key(seed, Purpose::Wiring, pk, t as u64)),
            delays: Stream::new(key(seed, Purpose::Delay, pk, t as u64)),
            weights: Stream::new(key(seed, Purpose::Weight, pk, t as u64)),
            src0,
            nsrc,
            q,
            wlo,
            whi,
            quantum,
        }
    }

    /// The next synapse's source (global id).
    #[inline]
    fn source(&mut self) -> u32 {
        self.src0 + below(rand::RngCore::next_u64(&mut self.sources), self.nsrc)
    }

    /// The next synapse's delay in steps: redrawn below dt/2, rounded as NEST
    /// rounds a delay to steps, cut at [`Model::max_delay`].
    #[inline]
    fn delay(&mut self) -> u32 {
        let dt = self.model.params.dt;
        let d = normal_redraw(
            &mut self.delays,
            self.q.d_mean,
            self.q.d_std,
            0.5 * dt,
            f64::INFINITY,
        );
        // d / dt + 0.5 > 0: truncation is the floor.
        ((d / dt + 0.5) as u32).clamp(1, self.model.max_delay)
    }

    /// The next synapse's weight in quanta.
    #[inline]
    fn weight(&mut self) -> u32 {
        let w = normal_redraw(
            &mut self.weights,
            self.q.w_mean,
            self.q.w_std,
            self.wlo,
            self.whi,
        );
        ((w.abs() / self.quantum + 0.5) as u32).min(65535)
    }
}

/// Builds the segment of population `pop`'s targets `first..first + len` (global
/// ids), whose first target is the shard's `local0`-th neuron.
///
/// Three passes keep every random access in a small table: count the synapses of
/// each source (sources only), scatter each synapse to its source's row in target
/// order with its delay beside it, then sort each row by delay (stably, so targets
/// stay ascending within a delay) and cut it into delay groups.
pub fn build_segment(model: &Model, pop: usize, first: u32, len: u32, local0: u32) -> Segment {
    let nsrc = (model.n + model.n_th) as usize;
    let nd = model.max_delay as usize + 1;
    let a = first - model.first[pop];
    let projs: Vec<&Projection> = model
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
    // Pass 1: synapses per source.
    let mut row = vec![0u32; nsrc + 1];
    for (q, deg) in projs.iter().zip(&indeg) {
        for (i, &k) in deg.iter().enumerate() {
            let mut dr = Draws::new(model, q, first + i as u32);
            for _ in 0..k {
                row[dr.source() as usize + 1] += 1;
            }
        }
    }
    for s in 0..nsrc {
        row[s + 1] += row[s];
    }
    let total = row[nsrc] as usize;
    // Pass 2: every synapse into its row, targets ascending, delays beside.
    let mut cursor: Vec<u32> = row[..nsrc].to_vec();
    let mut syn = vec![0u32; total];
    let mut delay = vec![0u8; total];
    for (q, deg) in projs.iter().zip(&indeg) {
        for (i, &k) in deg.iter().enumerate() {
            let mut dr = Draws::new(model, q, first + i as u32);
            for _ in 0..k {
                let s = dr.source() as usize;
                let d = dr.delay();
                let w = dr.weight();
                let c = cursor[s] as usize;
                cursor[s] += 1;
                syn[c] = w << 16 | i as u32;
                delay[c] = d as u8;
            }
        }
    }
    drop(cursor);
    // Pass 3: each row sorted by delay (counting sort) and cut into groups.
    let mut grp = Vec::with_capacity(nsrc + 1);
    let mut groups = Vec::new();
    let mut hist = vec![0u32; nd];
    let mut scratch: Vec<u32> = Vec::new();
    for s in 0..nsrc {
        grp.push(groups.len() as u32);
        let (r0, r1) = (row[s] as usize, row[s + 1] as usize);
        if r0 == r1 {
            continue;
        }
        hist.iter_mut().for_each(|h| *h = 0);
        for &d in &delay[r0..r1] {
            hist[d as usize] += 1;
        }
        let mut pos = 0u32;
        for (d, h) in hist.iter_mut().enumerate() {
            if *h > 0 {
                groups.push((d as u32) << 24 | *h);
                let start = pos;
                pos += *h;
                *h = start;
            }
        }
        scratch.clear();
        scratch.resize(r1 - r0, 0);
        for (x, &d) in syn[r0..r1].iter().zip(&delay[r0..r1]) {
            let h = &mut hist[d as usize];
            scratch[*h as usize] = *x;
            *h += 1;
        }
        syn[r0..r1].copy_from_slice(&scratch);
    }
    grp.push(groups.len() as u32);
    groups.shrink_to_fit();
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
