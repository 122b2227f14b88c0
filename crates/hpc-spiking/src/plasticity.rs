//! Spike-timing-dependent plasticity: NEST's `stdp_pl_synapse_hom`, the power-law
//! STDP synapse with homogeneous parameters (Morrison, Aertsen & Diesmann 2007),
//! with the postsynaptic spike archive it reads.
//!
//! # The rule
//!
//! All synapses share `tau_plus` (ms), `lambda`, `alpha` and `mu`
//! ([`StdpPlParams`]); the postsynaptic neuron has `tau_minus` (ms). A synapse of
//! delay `d` (NEST's convention: the whole delay is dendritic) has a weight `w`;
//! its source has a presynaptic trace `K+` and the time `t_last` of its previous
//! spike (both start at 0). The postsynaptic neuron has a trace `K-` that jumps
//! by 1 at each of its spikes and decays with `tau_minus`. When the source spikes
//! at `t`:
//!
//! 1. **facilitation**, for every postsynaptic spike `t_post` in the window
//!    `(t_last - d, t - d]`, in order:
//!    `w <- w + lambda * w^mu * K+ * exp(-(t_post + d - t_last) / tau_plus)`;
//! 2. **depression** with the postsynaptic trace just before `t - d`:
//!    `w <- max(0, w - alpha * lambda * w * K-(t - d))`, where
//!    `K-(s) = sum over t_post < s of exp(-(s - t_post) / tau_minus)`;
//! 3. the new `w` is the weight the spike carries to the target;
//! 4. `K+ <- K+ * exp(-(t - t_last) / tau_plus) + 1`, `t_last <- t`.
//!
//! So a postsynaptic spike pairs with every earlier presynaptic spike
//! (facilitation, through `K+`) and every later one (depression, through `K-`):
//! all-to-all pairing. `mu = 0` makes facilitation additive, `mu = 1`
//! multiplicative; depression is always multiplicative.
//!
//! # NEST's semantics matched (3.10, `models/stdp_pl_synapse_hom.h`,
//! `nestkernel/archiving_node.cpp`)
//!
//! * Times are in ms; comparisons use NEST's `stdp_eps` of 1e-6 ms
//!   ([`STDP_EPS_MS`]): the facilitation window holds the spikes with
//!   `t_last - d + eps <= t_post < t - d + eps`, and `K-(t - d)` is read from the
//!   latest archived spike with `t_post < t - d - eps`. On a time grid this means:
//!   a postsynaptic spike at exactly `t - d` facilitates (with `K+` before this
//!   presynaptic spike's increment) and does not depress; a postsynaptic spike at
//!   exactly `t_last - d` belongs to the window of `t_last`, not to this one.
//!   Hence the coincident pair (`t_post + d = t`) changes nothing by itself.
//! * Floating-point order: every expression is evaluated in NEST's order
//!   (`exp(minus_dt * tau_plus_inv)`, `lambda * w^mu * K+`,
//!   `lambda * alpha * w * K-`, the same `exp`), and `w^mu` is within a few ulps
//!   of `pow` (tables and a short series, a pure function of `w`: the same
//!   bits in every decomposition), so the weights are NEST's to rounding: the
//!   crate's `validate/stdp_vs_nest.sh` finds all 15,954 weights of 894
//!   synapses within 3.2e-14 relative of NEST's (the book's plasticity chapter).
//! * The archive ([`PostArchive`], NEST's `ArchivingNode`) keeps `K-` at each
//!   postsynaptic spike and a read count per spike. A spike is archived only once
//!   the neuron has an incoming STDP synapse (before that only its time is
//!   remembered, as in NEST). When a new spike is recorded, the oldest archived
//!   spike is dropped while (a) every incoming synapse has read it and (b) the spike
//!   after it is more than `max_delay + min_delay + eps` before the new one
//!   (`max_delay`: the longest delay of the synapses onto this neuron;
//!   `min_delay`: the network's shortest delay, given to [`PostArchive::new`]).
//!   The history is therefore bounded while every source keeps firing; a source
//!   that never fires keeps the spikes it has not read, as in NEST.
//! * The weight after a presynaptic spike is what [`StdpRow::deliver`] returns;
//!   it is what NEST's `weight_recorder` records.
//!
//! What is not matched: NEST's per-synapse `K+` and `t_last` are kept per row
//! (a source's synapses of one delay), which is the same value, since every
//! synapse of a source sees the same spikes; `weight`s that NEST accepts but that
//! make the rule undefined (negative, where `w^mu` is NaN) are refused, and so is
//! `mu < 0` (the power of a weight clipped to 0 would be infinite); precise
//! (off-grid) spike times are taken as given, where NEST drops their offset; the
//! triplet and nearest-neighbour traces of other NEST synapses are not kept;
//! changing parameters during a run (NEST's `SetDefaults`) has no counterpart.
//!
//! # Order of calls
//!
//! Record a neuron's spikes in increasing time with
//! [`PostArchive::record_post_spike`], and deliver a source's spikes in
//! increasing time with [`StdpRow::deliver`], with every postsynaptic spike at or
//! before `t - d` recorded before the presynaptic spike of time `t` is delivered.
//! (Delivering a spike in the step it arrives at its target, `t + d`, after the
//! neurons of earlier steps have recorded their spikes, satisfies it.)
//!
//! # Storage
//!
//! A synapse is a target and an `f64` weight in two arrays. The targets are
//! [`Targets`]: a `u16` step from the previous target, so a row connected in
//! increasing target order (steps below 65,535) takes 2 bytes a target and 10
//! bytes a synapse ([`StdpRow::BYTES_PER_SYNAPSE`]); a target below the
//! previous one or 65,535 beyond it takes 6 bytes, in any order, and is read
//! back as connected. Weights are `f64` because an `f32` weight rounds each
//! update to 6e-8 relative, far from the 1e-12 agreement with NEST that the
//! validation checks. The trace `K+` and `t_last` are per [`StdpRow`] (16
//! bytes); [`StdpRows`], which hold the rows of many sources (a thread's),
//! keep none: a process keeps each source's trace once in a
//! [`SourceTraces`], takes each spike in there once, and hands the trace
//! before the spike to every `StdpRows` that delivers it. An archived
//! postsynaptic spike is 24 bytes.
//!
//! # Cost of a delivery
//!
//! [`StdpRow::deliver`] computes no value twice where it can tell that the
//! argument is the same, and computes each by the same expression as above
//! (so the memos change no bit). Every row of delay `d` delivering a spike of
//! one step asks a target for the same window end `t - d`, so the target's
//! archive keeps a view of the last end asked, until a spike is recorded:
//! `K-(t - d)`, the times of the two newest archived spikes before it, and
//! the reads of the newest one, added to its count when the view changes. A
//! synapse whose window holds no spike or only the newest (most of them)
//! reads nothing but that view, the first 64 bytes of its target's archive
//! (which is aligned to 64), and only a longer window reads the history (one
//! contiguous slice, oldest first). `exp` of a lag and
//! `w^mu` are looked up by their argument's bits in a memo of the delivery ([`StdpRows`] keeps the one of `exp` across deliveries; lags
//! repeat because postsynaptic spikes fall on the steps of a grid; weights
//! repeat while they are still the initial weight, and always with `lambda` 0).
//! A `w^mu` that is not repeated costs two table loads and a degree-6
//! polynomial instead of `pow` (2.8 times fewer instructions under callgrind).
//!
//! # Example: a small network with STDP
//!
//! ```
//! use hpc_spiking::plasticity::{PostArchive, StdpPlHom, StdpPlParams, StdpRow};
//!
//! // NEST's hpc_benchmark: tau_plus 15 ms, lambda 0.1, alpha 0.0513, mu 0.4,
//! // tau_minus 30 ms, delay 1.5 ms, on a 0.1 ms grid.
//! let rule = StdpPlHom::new(StdpPlParams { tau_plus: 15.0, lambda: 0.1, alpha: 0.0513, mu: 0.4 })?;
//! let mut post: Vec<PostArchive> =
//!     (0..3).map(|_| PostArchive::new(30.0, 0.1)).collect::<Result<_, _>>()?;
//! // Source 0 projects to targets 0 and 2, source 1 to targets 1 and 2.
//! let mut rows = vec![StdpRow::new(1.5)?, StdpRow::new(1.5)?];
//! for (target, weight) in [(0, 45.0), (2, 45.0)] {
//!     rows[0].connect(target, weight, &mut post)?;
//! }
//! for (target, weight) in [(1, 45.0), (2, 45.0)] {
//!     rows[1].connect(target, weight, &mut post)?;
//! }
//! // Source 0 fires at 5 ms, target 2 at 10 ms, source 0 again at 20 ms; each
//! // spike delivers its row's weights into the targets' input.
//! let mut input = vec![0.0; 3];
//! for (target, weight) in rows[0].deliver(&rule, 5.0, &mut post)? {
//!     input[target as usize] += weight;
//! }
//! post[2].record_post_spike(10.0)?;
//! for (target, weight) in rows[0].deliver(&rule, 20.0, &mut post)? {
//!     input[target as usize] += weight;
//! }
//! // Source 0 fired 6.5 ms before target 2's spike reached the synapse
//! // (10 + 1.5 - 5): facilitated; then depressed by the spike 8.5 ms before
//! // 20 - 1.5.
//! let w = rows[0].weights()[1];
//! let f = 45.0 + 0.1 * 45f64.powf(0.4) * (-6.5f64 / 15.0).exp();
//! let expected = f - 0.1 * 0.0513 * f * (-8.5f64 / 30.0).exp();
//! assert!((w - expected).abs() < 1e-12 * expected, "{w} {expected}");
//! // Target 0 never fired: its synapse kept its weight.
//! assert_eq!(rows[0].weights()[0], 45.0);
//! # Ok::<(), hpc_spiking::model::ModelError>(())
//! ```

use crate::model::{non_negative, positive, ModelError};
use crate::targets::{self, Targets};

mod archive;
mod pow;
mod rows;
mod traces;
pub use archive::{ArchivedSpike, PostArchive};
use pow::PowMu;
pub use rows::{StdpRows, StdpRowsFiller, ROW_HEAD_BYTES};
pub use traces::{SourceTraces, PARALLEL_SPIKES};

/// NEST's `stdp_eps` (ms): the tolerance of every spike-time comparison of the
/// rule (its default, which NEST requires to be below the resolution).
pub const STDP_EPS_MS: f64 = 1e-6;

/// The parameters shared by every synapse of the rule (NEST's names).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StdpPlParams {
    /// Time constant of the presynaptic trace `K+` (ms), `> 0`.
    pub tau_plus: f64,
    /// Learning rate, `>= 0` (0 leaves every weight unchanged).
    pub lambda: f64,
    /// Asymmetry: depression steps are `alpha * lambda`, `>= 0`.
    pub alpha: f64,
    /// Weight dependence exponent of facilitation, `>= 0`.
    pub mu: f64,
}

impl Default for StdpPlParams {
    /// NEST's defaults: `tau_plus` 20 ms, `lambda` 0.1, `alpha` 1, `mu` 0.4.
    fn default() -> Self {
        StdpPlParams {
            tau_plus: 20.0,
            lambda: 0.1,
            alpha: 1.0,
            mu: 0.4,
        }
    }
}

/// The checked rule, with what it derives from its parameters.
///
/// Cloning is cheap: the `w^mu` tables are shared by every rule of the same
/// `mu` and freed with the last one.
#[derive(Clone, Debug, PartialEq)]
pub struct StdpPlHom {
    params: StdpPlParams,
    tau_plus_inv: f64,
    /// `w^mu` by tables shared by every rule of this `mu` alive.
    pow_mu: std::sync::Arc<PowMu>,
}

impl StdpPlHom {
    /// Checks the parameters; an error names the first one out of its domain.
    pub fn new(params: StdpPlParams) -> Result<Self, ModelError> {
        positive("tau_plus", params.tau_plus)?;
        non_negative("lambda", params.lambda)?;
        non_negative("alpha", params.alpha)?;
        non_negative("mu", params.mu)?;
        Ok(StdpPlHom {
            params,
            tau_plus_inv: 1.0 / params.tau_plus,
            pow_mu: PowMu::shared(params.mu),
        })
    }

    /// The parameters.
    pub fn params(&self) -> &StdpPlParams {
        &self.params
    }

    /// Facilitation of `w`, given `w^mu` (NEST's `facilitate_`).
    #[inline]
    fn facilitate(&self, w: f64, w_pow_mu: f64, k_plus: f64) -> f64 {
        w + self.params.lambda * w_pow_mu * k_plus
    }

    #[inline]
    fn depress(&self, w: f64, k_minus: f64) -> f64 {
        let w = w - self.params.lambda * self.params.alpha * w * k_minus;
        if w > 0.0 {
            w
        } else {
            0.0
        }
    }
}

/// Slots of [`Memo`]: about as many as the distinct postsynaptic spike times
/// that one row's windows hold (a row of 9,000 synapses of targets firing at
/// 10 Hz sees about one spike a target in a window of about 100 ms, 1,000
/// steps of 0.1 ms).
const MEMO_SLOTS: usize = 2048;

/// Bytes of the memo of `exp` of the lags that [`StdpRows`] keeps across
/// deliveries (a [`StdpRow`] clears one on its stack for each).
pub const DELIVERY_MEMO_BYTES: usize = MEMO_SLOTS * 16;

/// A direct-mapped memo of a function of an `f64`, keyed by its argument's
/// bits: a hit answers exactly what the function answered, so a memo kept
/// for the same function (the same `tau_plus`) across deliveries changes no
/// value.
#[derive(Clone)]
struct Memo {
    slots: [(u64, f64); MEMO_SLOTS],
}

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Memo")
    }
}

impl Default for Memo {
    fn default() -> Self {
        Memo::new()
    }
}

impl Memo {
    /// Empty: every key is a NaN's bits (no argument here is NaN).
    #[inline]
    fn new() -> Memo {
        Memo {
            slots: [(u64::MAX, 0.0); MEMO_SLOTS],
        }
    }

    /// `f(x)`, computed once while its slot keeps it.
    #[inline(always)]
    fn get(&mut self, x: f64, f: impl FnOnce(f64) -> f64) -> f64 {
        let key = x.to_bits();
        let slot = &mut self.slots[(key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 53) as usize];
        if slot.0 != key {
            *slot = (key, f(x));
        }
        slot.1
    }
}
/// A source's trace `K+` and the time of its latest spike, which all its
/// synapses share: 0 and 0 before its first spike, as NEST's.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SourceTrace {
    k_plus: f64,
    t_last: f64,
}

impl SourceTrace {
    /// A checkpoint's trace `K+` and last spike time ([`k_plus`](Self::k_plus),
    /// [`t_last`](Self::t_last)); refused for a negative or non-finite value.
    pub fn restore(k_plus: f64, t_last: f64) -> Result<Self, ModelError> {
        non_negative("K+", k_plus)?;
        non_negative("t_last", t_last)?;
        Ok(SourceTrace { k_plus, t_last })
    }

    /// The trace `K+` just after the latest spike.
    pub fn k_plus(&self) -> f64 {
        self.k_plus
    }

    /// The time of the latest spike (ms; 0 before the first, as NEST).
    pub fn t_last(&self) -> f64 {
        self.t_last
    }

    /// The source spiked at `t_spike` (ms, after its previous spike and after
    /// 0): `K+ <- K+ exp(-(t_spike - t_last) / tau_plus) + 1`, `t_last <-
    /// t_spike`, the value every synapse of the source keeps (for a source
    /// whose synapses are elsewhere).
    pub fn spike(&mut self, rule: &StdpPlHom, t_spike: f64) -> Result<(), ModelError> {
        self.check(t_spike)?;
        self.advance(rule, t_spike);
        Ok(())
    }

    /// Refuses a spike not after the previous one (or not a number).
    #[inline]
    fn check(&self, t_spike: f64) -> Result<(), ModelError> {
        if !t_spike.is_finite() || t_spike <= self.t_last {
            return Err(ModelError::TimeOrder {
                what: "presynaptic spike",
                t: t_spike,
                last: self.t_last,
            });
        }
        Ok(())
    }

    #[inline(always)]
    fn advance(&mut self, rule: &StdpPlHom, t_spike: f64) {
        self.k_plus = self.k_plus * ((self.t_last - t_spike) * rule.tau_plus_inv).exp() + 1.0;
        self.t_last = t_spike;
    }
}

/// The STDP synapses of one source with one delay: targets and weights, with the
/// source's trace `K+` and last spike time that all of them share.
#[derive(Clone, Debug)]
pub struct StdpRow {
    delay: f64,
    trace: SourceTrace,
    targets: Targets,
    weights: Vec<f64>,
    /// One past the largest target, so that one comparison checks them all.
    span: usize,
}

impl StdpRow {
    /// Bytes a synapse takes in a row connected in increasing target order
    /// with steps below 65,535: a `u16` target step and an `f64` weight
    /// ([`bytes`](Self::bytes) counts a row as it is).
    pub const BYTES_PER_SYNAPSE: usize = 10;

    /// An empty row of synapses of delay `delay` (ms, `> 0`).
    pub fn new(delay: f64) -> Result<Self, ModelError> {
        positive("delay", delay)?;
        Ok(StdpRow {
            delay,
            trace: SourceTrace::default(),
            targets: Targets::new(),
            weights: Vec::new(),
            span: 0,
        })
    }

    /// Reserves room for `additional` more synapses (of one-unit target
    /// steps, see [`Targets`]).
    pub fn reserve(&mut self, additional: usize) {
        self.targets.reserve(additional);
        self.weights.reserve_exact(additional);
    }

    /// Gives back the room reserved beyond the synapses held (after the last
    /// [`connect`](Self::connect)).
    pub fn shrink_to_fit(&mut self) {
        self.targets.shrink_to_fit();
        self.weights.shrink_to_fit();
    }

    /// Bytes the row takes: the struct and its allocations as reserved.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.targets.heap_bytes()
            + self.weights.capacity() * std::mem::size_of::<f64>()
    }

    /// Puts back a checkpoint's state of the row: the source's trace `K+`
    /// ([`k_plus`](Self::k_plus)), its last spike time ([`t_last`](Self::t_last))
    /// and the weights in the order of connection. Refused, changing nothing,
    /// for a negative or non-finite value or a count other than [`len`](Self::len).
    pub fn restore(&mut self, k_plus: f64, t_last: f64, weights: &[f64]) -> Result<(), ModelError> {
        let trace = SourceTrace::restore(k_plus, t_last)?;
        check_weights(weights, self.weights.len())?;
        self.trace = trace;
        self.weights.copy_from_slice(weights);
        Ok(())
    }

    /// Adds a synapse onto `archives[target]` of initial weight `weight`
    /// (finite, `>= 0`) and registers it with that archive.
    pub fn connect(
        &mut self,
        target: u32,
        weight: f64,
        archives: &mut [PostArchive],
    ) -> Result<(), ModelError> {
        register(archives, target, weight, self.trace.t_last, self.delay)?;
        self.targets.push(target);
        self.weights.push(weight);
        self.span = self.span.max(target as usize + 1);
        Ok(())
    }

    /// The source spiked at `t_spike` (ms, after its previous spike and after
    /// 0): updates every weight of the row (see the [module](self) docs), then
    /// the trace, and answers each synapse's `(target, new weight)`, the weight
    /// that this spike carries. `archives` are the ones the synapses were
    /// connected to, with every spike at or before `t_spike - delay` recorded.
    pub fn deliver<'a>(
        &'a mut self,
        rule: &StdpPlHom,
        t_spike: f64,
        archives: &mut [PostArchive],
    ) -> Result<impl ExactSizeIterator<Item = (u32, f64)> + 'a, ModelError> {
        self.check(t_spike, archives.len(), usize::MAX)?;
        self.update(rule, t_spike, archives, |_, _| ())?;
        Ok(self.targets.iter().zip(self.weights.iter().copied()))
    }

    /// [`deliver`](Self::deliver), adding each synapse's new weight to
    /// `input[target]` as it is computed (in the row's order, as a loop over
    /// `deliver`'s answer would) instead of answering them. `input` must
    /// cover every target, as `archives` must.
    pub fn deliver_into(
        &mut self,
        rule: &StdpPlHom,
        t_spike: f64,
        archives: &mut [PostArchive],
        input: &mut [f64],
    ) -> Result<(), ModelError> {
        self.check(t_spike, archives.len(), input.len())?;
        let input = &mut input[..self.span];
        self.update(rule, t_spike, archives, |target, w| {
            input[target as usize] += w
        })
    }

    /// Refuses a spike out of order, or archives (or an input) too short for
    /// the targets.
    fn check(&self, t_spike: f64, archives: usize, input: usize) -> Result<(), ModelError> {
        self.trace.check(t_spike)?;
        let len = archives.min(input);
        if self.span > len {
            let target = self.targets.iter().max().unwrap_or(0);
            return Err(ModelError::Target { target, len });
        }
        Ok(())
    }

    /// The update of [`deliver`](Self::deliver), after [`check`](Self::check)
    /// ([`update_synapses`]).
    #[inline(always)]
    fn update(
        &mut self,
        rule: &StdpPlHom,
        t_spike: f64,
        archives: &mut [PostArchive],
        each: impl FnMut(u32, f64),
    ) -> Result<(), ModelError> {
        update_synapses(
            rule,
            self.delay,
            &self.trace,
            t_spike,
            self.targets.iter(),
            &mut self.weights,
            &mut archives[..self.span],
            &mut Memo::new(),
            each,
        )?;
        self.trace.advance(rule, t_spike);
        Ok(())
    }

    /// The delay (ms).
    pub fn delay(&self) -> f64 {
        self.delay
    }

    /// The source's trace `K+` just after its latest spike.
    pub fn k_plus(&self) -> f64 {
        self.trace.k_plus
    }

    /// The time of the source's latest spike (ms; 0 before the first, as NEST).
    pub fn t_last(&self) -> f64 {
        self.trace.t_last
    }

    /// The targets, in the order of connection.
    pub fn targets(&self) -> targets::Iter<'_> {
        self.targets.iter()
    }

    /// The weights, in the order of connection.
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }

    /// Number of synapses.
    pub fn len(&self) -> usize {
        self.targets.len()
    }

    /// Whether the row has no synapse.
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }
}

/// Registers a new synapse of initial weight `weight` (finite, `>= 0`) and
/// delay `delay` with `archives[target]`, from a source whose last spike was
/// at `t_last`.
fn register(
    archives: &mut [PostArchive],
    target: u32,
    weight: f64,
    t_last: f64,
    delay: f64,
) -> Result<(), ModelError> {
    non_negative("weight", weight)?;
    let len = archives.len();
    let archive = archives
        .get_mut(target as usize)
        .ok_or(ModelError::Target { target, len })?;
    archive.register(t_last - delay, delay);
    Ok(())
}

/// Refuses a checkpoint's weights unless there are `len` of them, each
/// finite and `>= 0`.
fn check_weights(weights: &[f64], len: usize) -> Result<(), ModelError> {
    if weights.len() != len {
        return Err(ModelError::Param {
            name: "weights",
            value: weights.len() as f64,
            must: "as many as the synapses",
        });
    }
    for &w in weights {
        non_negative("weight", w)?;
    }
    Ok(())
}

/// The error of a weight `from` that became `weight` (not finite) at `t`:
/// out of the delivery's loop, which it ends.
#[cold]
#[inline(never)]
fn overflow(rule: &StdpPlHom, weight: f64, from: f64, t: f64) -> ModelError {
    ModelError::WeightOverflow {
        weight,
        from,
        t,
        lambda: rule.params.lambda,
        mu: rule.params.mu,
    }
}

/// The facilitation of the synapses of one row by one presynaptic spike,
/// with the memos of `exp` of the lags and of `w^mu` of the last weight.
struct Facilitation<'a> {
    rule: &'a StdpPlHom,
    decay: &'a mut Memo,
    t_last: f64,
    d: f64,
    k_plus: f64,
    pow_of: u64,
    pow: f64,
}

impl Facilitation<'_> {
    /// `v` facilitated by the postsynaptic spike at `t_post`.
    #[inline(always)]
    fn apply(&mut self, v: f64, t_post: f64) -> f64 {
        let minus_dt = self.t_last - (t_post + self.d);
        let tau_plus_inv = self.rule.tau_plus_inv;
        let e = self.decay.get(minus_dt, |x| (x * tau_plus_inv).exp());
        if v.to_bits() != self.pow_of {
            (self.pow_of, self.pow) = (v.to_bits(), self.rule.pow_mu.pow(v));
        }
        self.rule.facilitate(v, self.pow, self.k_plus * e)
    }
}

/// The update of one source's synapses of delay `d` when it spikes at
/// `t_spike`, given the source's trace `before` the spike (after
/// [`SourceTrace::check`]), calling `each(target, new weight)` for every
/// synapse in order; a weight that leaves the finite numbers stops it
/// ([`ModelError::WeightOverflow`]). The trace is not advanced here: the
/// caller does it once, however many rows read it. `archives` covers every
/// target; `decay` memoises `exp` of the lags for this rule. [`StdpRow`] and
/// [`StdpRows`] both deliver through it, so their weights are the same
/// doubles.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn update_synapses(
    rule: &StdpPlHom,
    d: f64,
    before: &SourceTrace,
    t_spike: f64,
    targets: impl Iterator<Item = u32>,
    weights: &mut [f64],
    archives: &mut [PostArchive],
    decay: &mut Memo,
    mut each: impl FnMut(u32, f64),
) -> Result<(), ModelError> {
    let (t_last, k_plus) = (before.t_last, before.k_plus);
    let (t1, t2) = (t_last - d, t_spike - d);
    // The window of a target is its archived spikes in `[lim1, t2 + eps)`:
    // the target's view of the step (`at_step`, once a step for all rows)
    // holds the newest two before `t2 + eps`, so one comparison shows most
    // windows empty or of one spike without reading the history.
    let lim1 = t1 + STDP_EPS_MS;
    // `exp` of the lags and `w^mu` of the weights are computed once for
    // a repeated argument: the spikes of a step are at one time, and
    // weights that have not changed since they were connected are equal.
    // `w^mu` is the rule's tables' (a pure function of `w`).
    let mut f = Facilitation {
        rule,
        decay,
        t_last,
        d,
        k_plus,
        pow_of: u64::MAX,
        pow: 0.0,
    };
    for (target, w) in targets.zip(weights.iter_mut()) {
        let archive = &mut archives[target as usize];
        archive.at_step(t2);
        let mut v = *w;
        if archive.newest_t >= lim1 {
            // Oldest first: the older spikes of the window, then the newest.
            if archive.second_t >= lim1 {
                for e in archive.older_window(lim1) {
                    v = f.apply(v, e.t);
                }
            }
            v = f.apply(v, archive.newest_t);
            archive.pending += 1;
            // Only facilitation can leave the finite numbers: a weight is
            // finite when stored, and depression keeps it in `[0, w]`.
            if !v.is_finite() {
                return Err(overflow(rule, v, *w, t_spike));
            }
        }
        v = rule.depress(v, archive.cached_k);
        *w = v;
        each(target, v);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
