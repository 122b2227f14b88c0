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
//! One table per shard, by source neuron:
//!
//!
//! * `row[s]..row[s+1]`: the source's synapses in `syn`, one `u32` each: target
//!   index (16 bits) and weight in quanta of [`Model::q_syn`] (16 bits, the sign
//!   is the source's);
//! * `grp[s]..grp[s+1]`: the row's groups in `groups`, one `u32` each: delay in
//!   steps (8 bits), base (3 bits: an index into [`Conn::syn_base`]) and the
//!   number of synapses (21 bits) that follow in the row, by increasing delay,
//!   targets ascending within a group.
//!
//! A shard of at most 65,536 neurons (every shard of a run with two threads or
//! more at full scale) numbers its targets from its own first neuron, so that
//! a source's synapses of one delay are one group whatever their populations:
//! one group per spike and step to deliver, about 50 synapses at full scale,
//! where a group per population held 6 on average, each group costing a read
//! of its word and a mispredicted loop exit. A larger shard numbers its
//! targets from their population's first neuron in the shard (every
//! population has fewer than 65,536 neurons) and has a group per delay and
//! population.
//!
//! A spike's groups are delivered one delay at a time, each in the step it
//! arrives ([`crate::sim`]), so every write goes to the one input buffer of the
//! current step.

use rand_distr::{Binomial, Distribution};

use crate::params::{Model, Projection, NPOP};
use crate::rng::{below, key, normal_redraw, Purpose, Stream};

/// Bits of a delay group's count.
pub const COUNT_BITS: u32 = 21;
/// Largest count of one delay group (longer runs take several groups).
pub const COUNT_MAX: u32 = (1 << COUNT_BITS) - 1;

/// The synapses onto a shard's neurons, by source.
#[derive(Clone, Debug, Default)]
pub struct Conn {
    /// Index in the shard of the first neuron of each population (the shard's
    /// first neuron for populations that start before it).
    pub pop_base: [u32; NPOP],
    /// Per source: offsets into `syn` (`n + n_th + 1` entries).
    pub row: Vec<u32>,
    /// Index in the shard that a group's target indices count from, by the
    /// group's base bits: every entry 0 where the shard numbers its targets
    /// from its first neuron (at most 65,536 neurons), else [`Conn::pop_base`].
    pub syn_base: [u32; NPOP],
    /// Per source: offsets into `groups`.
    pub grp: Vec<u32>,
    /// Delay groups: `delay << 24 | base << 21 | count`, by increasing delay,
    /// then base (the target population where a shard has more than 65,536
    /// neurons, 0 otherwise).
    pub groups: Vec<u32>,
    /// Synapses: `weight_quanta << 16 | target index from the group's base`.
    pub syn: Vec<u32>,
}

impl Conn {
    /// Bytes of memory the connectivity takes.
    pub fn bytes(&self) -> u64 {
        ((self.row.capacity() + self.grp.capacity() + self.groups.capacity() + self.syn.capacity())
            * 4) as u64
    }

    /// Synapses stored.
    pub fn synapses(&self) -> u64 {
        self.syn.len() as u64
    }
}

/// Asks the kernel to back `v`'s memory with transparent huge pages (where the
/// kernel offers them on request; a no-op elsewhere and for small vectors).
pub fn huge_pages<T>(v: &[T]) {
    const HUGE: usize = 2 << 20;
    let start = v.as_ptr() as usize;
    let end = start + std::mem::size_of_val(v);
    let a = start.next_multiple_of(HUGE);
    let b = end / HUGE * HUGE;
    if b > a {
        // Refused advice leaves small pages: nothing to undo.
        // SAFETY: [a, b) lies inside `v`'s allocation, which stays mapped while the
        // borrow lasts; MADV_HUGEPAGE is advice that changes no contents.
        let _ = unsafe {
            rustix::mm::madvise(
                a as *mut std::ffi::c_void,
                b - a,
                rustix::mm::Advice::LinuxHugepage,
            )
        };
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
            (0.0, f64::INFINITY, model.q_syn)
        } else {
            (f64::NEG_INFINITY, 0.0, model.q_syn)
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

/// Most neurons a shard numbers from its own first neuron in 16 bits, with one
/// group per delay (see the module's documentation).
pub const ONE_BASE_MAX: u32 = 1 << 16;

/// Builds the synapses onto the neurons `first..first + len` (global ids).
///
/// Three passes keep every random access in a small table: count the synapses of
/// each source (sources only), scatter each synapse to its source's row in target
/// order with its delay and base beside it, then sort each row by (delay, base)
/// in cache, stably so that targets stay ascending within a group, and cut it
/// into groups.
pub fn build_shard(model: &Model, first: u32, len: u32) -> Conn {
    let nsrc = (model.n + model.n_th) as usize;
    let nd = model.max_delay as usize + 1;
    let end = first + len;
    let one_base = len <= ONE_BASE_MAX;
    let mut pop_base = [0u32; NPOP];
    // (population, its first target, its targets in the shard, in-degrees per projection).
    let mut parts = Vec::new();
    for pop in 0..NPOP {
        let lo = first.max(model.first[pop]);
        let hi = end.min(model.first[pop + 1]);
        pop_base[pop] = lo.min(end).saturating_sub(first);
        if lo >= hi {
            continue;
        }
        let a = lo - model.first[pop];
        let projs: Vec<(&Projection, Vec<u32>)> = model
            .projections
            .iter()
            .filter(|q| q.target == pop)
            .map(|q| {
                let deg = indegrees(
                    model.params.seed,
                    proj_key(q.target, q.source),
                    model.sizes[pop],
                    q.synapses,
                    a,
                    a + (hi - lo),
                );
                (q, deg)
            })
            .collect();
        parts.push((pop, lo, projs));
    }
    // Pass 1: synapses per source.
    let mut row = vec![0u32; nsrc + 1];
    for (_, lo, projs) in &parts {
        for (q, deg) in projs {
            for (i, &k) in deg.iter().enumerate() {
                let mut dr = Draws::new(model, q, lo + i as u32);
                for _ in 0..k {
                    row[dr.source() as usize + 1] += 1;
                }
            }
        }
    }
    for s in 0..nsrc {
        row[s + 1] += row[s];
    }
    let total = row[nsrc] as usize;
    // Pass 2: every synapse into its row, targets ascending, (delay, base) beside.
    let mut cursor: Vec<u32> = row[..nsrc].to_vec();
    let mut syn = vec![0u32; total];
    let mut tag = vec![0u16; total];
    // Scattered writes over gigabytes: huge pages spare most TLB misses (and the
    // delivery's reads of `syn` later).
    huge_pages(&syn);
    huge_pages(&tag);
    for (pop, lo, projs) in &parts {
        for (q, deg) in projs {
            for (i, &k) in deg.iter().enumerate() {
                let (t, b) = if one_base {
                    (lo + i as u32 - first, 0)
                } else {
                    (lo + i as u32 - model.first[*pop].max(first), *pop as u32)
                };
                let mut dr = Draws::new(model, q, lo + i as u32);
                for _ in 0..k {
                    let s = dr.source() as usize;
                    let d = dr.delay();
                    let w = dr.weight();
                    let c = cursor[s] as usize;
                    cursor[s] += 1;
                    syn[c] = w << 16 | t;
                    tag[c] = (d * NPOP as u32 + b) as u16;
                }
            }
        }
    }
    drop(cursor);
    // Pass 3: each row sorted by (delay, base) and cut into groups.
    let mut grp = Vec::with_capacity(nsrc + 1);
    let mut groups = Vec::new();
    let mut hist = vec![0u32; nd * NPOP];
    let mut scratch: Vec<u32> = Vec::new();
    for s in 0..nsrc {
        grp.push(groups.len() as u32);
        let (r0, r1) = (row[s] as usize, row[s + 1] as usize);
        if r0 == r1 {
            continue;
        }
        hist.iter_mut().for_each(|h| *h = 0);
        for &k in &tag[r0..r1] {
            hist[k as usize] += 1;
        }
        let mut pos = 0u32;
        for (k, h) in hist.iter_mut().enumerate() {
            if *h > 0 {
                let (d, b) = ((k / NPOP) as u32, (k % NPOP) as u32);
                let mut left = *h;
                while left > 0 {
                    let c = left.min(COUNT_MAX);
                    groups.push(d << 24 | b << COUNT_BITS | c);
                    left -= c;
                }
                let start = pos;
                pos += *h;
                *h = start;
            }
        }
        scratch.clear();
        scratch.resize(r1 - r0, 0);
        for (x, &k) in syn[r0..r1].iter().zip(&tag[r0..r1]) {
            let h = &mut hist[k as usize];
            scratch[*h as usize] = *x;
            *h += 1;
        }
        syn[r0..r1].copy_from_slice(&scratch);
    }
    grp.push(groups.len() as u32);
    groups.shrink_to_fit();
    Conn {
        pop_base,
        syn_base: if one_base { [0; NPOP] } else { pop_base },
        row,
        grp,
        groups,
        syn,
    }
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

    /// Every synapse of shard `c` (first neuron `first`) as (source, target,
    /// delay, weight quanta), checking the groups' order and, where the shard
    /// numbers targets by population, each target's population.
    fn collect(m: &Model, first: u32, c: &Conn, out: &mut Vec<(u32, u32, u32, u32)>) {
        let by_pop = c.syn_base != [0; NPOP];
        for s in 0..(m.n as usize) {
            let mut pos = c.row[s] as usize;
            let mut last = (0, 0);
            for &g in &c.groups[c.grp[s] as usize..c.grp[s + 1] as usize] {
                let (d, b, n) = (g >> 24, (g >> COUNT_BITS) & 7, g & COUNT_MAX);
                assert!((d, b) > last, "groups out of order");
                last = (d, b);
                let base = first + c.syn_base[b as usize];
                for &x in &c.syn[pos..pos + n as usize] {
                    let t = base + (x & 0xFFFF);
                    if by_pop {
                        assert_eq!(m.pop_of(t), b as usize);
                    }
                    out.push((s as u32, t, d, x >> 16));
                }
                pos += n as usize;
            }
            assert_eq!(pos, c.row[s + 1] as usize);
        }
    }

    #[test]
    fn a_shard_beyond_16_bits_groups_by_population_and_holds_the_same_synapses() {
        // Full scale's 77,169 neurons, few synapses: one shard numbers its
        // targets by population (more than 65,536 neurons), two number them
        // from their first neuron, one group per delay.
        let m = Model::new(Params {
            n_scaling: 1.0,
            k_scaling: 0.002,
            ..Params::default()
        })
        .unwrap();
        assert!(m.n > ONE_BASE_MAX);
        let (whole, parts, a) = split_in_two(&m, m.n / 2 + 3);
        assert_eq!(whole.syn_base, whole.pop_base);
        assert_ne!(whole.syn_base, [0; NPOP]);
        for (_, p) in &parts {
            assert_eq!(p.syn_base, [0; NPOP]);
            // One group per delay of a source (no run reaches COUNT_MAX here).
            for s in 0..m.n as usize {
                let gs = &p.groups[p.grp[s] as usize..p.grp[s + 1] as usize];
                assert!(gs.windows(2).all(|w| w[0] >> 24 < w[1] >> 24));
            }
        }
        assert_eq!(a.len() as u64, m.synapses());
    }

    /// The whole network as one shard and as two split at `cut`, and the
    /// whole's synapses sorted, checked to be the two parts' synapses.
    #[allow(clippy::type_complexity)]
    fn split_in_two(m: &Model, cut: u32) -> (Conn, [(u32, Conn); 2], Vec<(u32, u32, u32, u32)>) {
        let whole = build_shard(m, 0, m.n);
        let parts = [
            (0, build_shard(m, 0, cut)),
            (cut, build_shard(m, cut, m.n - cut)),
        ];
        let mut a = Vec::new();
        collect(m, 0, &whole, &mut a);
        let mut b = Vec::new();
        for (f, p) in &parts {
            collect(m, *f, p, &mut b);
        }
        a.sort_unstable();
        b.sort_unstable();
        assert!(a == b, "the parts hold other synapses than the whole");
        (whole, parts, a)
    }

    #[test]
    fn shards_hold_the_projection_totals_and_split_cleanly() {
        let m = Model::new(Params {
            n_scaling: 0.02,
            k_scaling: 0.05,
            ..Params::default()
        })
        .unwrap();
        // Split in two at an arbitrary id: the same synapses.
        let (whole, _, a) = split_in_two(&m, m.n / 3 + 5);
        assert_eq!(whole.synapses(), m.synapses());
        assert!(a.iter().all(|x| x.2 >= 1 && x.2 <= m.max_delay));
        // Excitatory weights onto L2/3I from L2/3E: mean near the external weight.
        let exc: Vec<f64> = a
            .iter()
            .filter(|x| x.0 < m.first[1] && x.1 >= m.first[1] && x.1 < m.first[2])
            .map(|x| x.3 as f64 * m.q_syn)
            .collect();
        let mean = exc.iter().sum::<f64>() / exc.len() as f64;
        assert!(
            (mean - m.w_ext).abs() < 0.02 * m.w_ext,
            "{mean} vs {}",
            m.w_ext
        );
    }
}
