//! [`StdpRows`]: the STDP synapses of many sources onto one set of targets,
//! held only for the sources with a synapse here.

use crate::model::{positive, ModelError};
use crate::targets::{Decode, ListCounter, ListFiller, SourceIndex, SourceLists};

use super::{
    check_weights, register, update_synapses, Memo, PostArchive, SourceTrace, StdpPlHom,
    DELIVERY_MEMO_BYTES,
};

/// The STDP synapses of one delay from many sources onto one set of targets
/// (a shard's neurons), as one [`StdpRow`](super::StdpRow) per source would
/// hold them, but only for the sources that have a synapse here: a
/// [`SourceIndex`] finds a source's row, and a present source takes a `u32`
/// offset into the targets and another into the weights (8 bytes), an absent
/// one nothing but its bit in the index. The targets are [`crate::targets`]'
/// `u16` steps and the weights `f64`, in one array each; the memo of `exp` of
/// the lags that a delivery keeps is kept across deliveries
/// ([`DELIVERY_MEMO_BYTES`]), which changes no value.
///
/// The sources' traces `K+` and last spike times are not here: they depend on
/// the source's spikes only, so a process keeps them once
/// ([`SourceTraces`](super::SourceTraces)), whatever number of `StdpRows`
/// (threads) hold rows of the source, and each delivery is given the trace
/// before the spike.
///
/// Built in three passes over the synapses ([`crate::targets::IndexBuilder`]
/// and [`ListCounter`] as for any lists, or the two of them in one with
/// [`crate::targets::DenseCounter`], then [`StdpRowsFiller::connect`]);
/// a delivery ([`deliver_into`](Self::deliver_into)) does what
/// [`StdpRow::deliver_into`](super::StdpRow::deliver_into) does, in the same
/// order, so the weights are the same doubles.
///
/// ```
/// use hpc_spiking::plasticity::{PostArchive, SourceTraces, StdpPlHom, StdpPlParams, StdpRowsFiller};
/// use hpc_spiking::targets::{IndexBuilder, ListCounter};
///
/// let rule = StdpPlHom::new(StdpPlParams { tau_plus: 15.0, lambda: 0.1, alpha: 0.0513, mu: 0.4 })?;
/// let mut post: Vec<PostArchive> =
///     (0..3).map(|_| PostArchive::new(30.0, 0.1)).collect::<Result<_, _>>()?;
/// // Of 10,000 sources, 7 projects onto targets 0 and 2, 9,000 onto 1.
/// let synapses = [(7, 0), (9_000, 1), (7, 2)];
/// let mut marks = IndexBuilder::new(10_000);
/// synapses.iter().for_each(|&(s, _)| marks.mark(s));
/// let mut counter = ListCounter::new(marks.finish());
/// synapses.iter().for_each(|&(s, t)| counter.count(s, t));
/// let mut filler = StdpRowsFiller::new(1.5, counter)?;
/// for &(s, t) in &synapses {
///     filler.connect(s, t, 45.0, &mut post)?;
/// }
/// let mut rows = filler.finish();
/// // The traces of the sources with a row, kept once for every `StdpRows`.
/// let mut traces = SourceTraces::new(rows.index().clone());
/// let mut input = vec![0.0; 3];
/// let before = traces.spike(7, &rule, 5.0)?.expect("source 7 has a trace");
/// assert!(rows.deliver_into(7, &rule, &before, 5.0, &mut post, &mut input)?);
/// // Source 8 has no synapse here: nothing to do.
/// assert_eq!(traces.spike(8, &rule, 5.0)?, None);
/// assert!(!rows.deliver_into(8, &rule, &before, 5.0, &mut post, &mut input)?);
/// assert_eq!(input, [45.0, 0.0, 45.0]);
/// assert_eq!(traces.get(7).map(|t| t.k_plus()), Some(1.0));
/// # Ok::<(), hpc_spiking::model::ModelError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct StdpRows {
    delay: f64,
    lists: SourceLists,
    /// Per present source, where its weights start, and the end.
    synapse_starts: Vec<u32>,
    weights: Vec<f64>,
    /// One past the largest target, so that one comparison checks them all.
    span: usize,
    /// `exp` of the lags, kept across deliveries (a row of one or two
    /// synapses, as most are on a shard of a large network, would not pay
    /// for clearing one), for the rule of `tau_plus_inv` (its bits; NaN's
    /// before the first delivery); none without rows.
    decay: Option<Box<Memo>>,
    decay_of: u64,
}

/// Bytes a present source's row takes beside its synapses: the offsets of
/// its targets and weights (the index apart, [`SourceIndex::bytes_for`]; the
/// trace apart, [`SourceTraces`](super::SourceTraces)).
pub const ROW_HEAD_BYTES: usize = 4 + 4;

impl StdpRows {
    /// The delay of every synapse (ms).
    pub fn delay(&self) -> f64 {
        self.delay
    }

    /// The sources with a synapse here, numbered as the rows.
    pub fn index(&self) -> &SourceIndex {
        self.lists.index()
    }

    /// Source `source` spiked at `t_spike` (ms), its trace `before` the spike
    /// being `before` (what [`SourceTraces::spike`](super::SourceTraces::spike)
    /// answers): as [`StdpRow::deliver_into`](super::StdpRow::deliver_into)
    /// for its row, adding each synapse's new weight to `input[target]`;
    /// answers whether the source has a row here (nothing changes when it
    /// has none). A `t_spike` not after `before`'s last spike is refused.
    #[inline]
    pub fn deliver_into(
        &mut self,
        source: u32,
        rule: &StdpPlHom,
        before: &SourceTrace,
        t_spike: f64,
        archives: &mut [PostArchive],
        input: &mut [f64],
    ) -> Result<bool, ModelError> {
        let Some(p) = self.lists.index().get(source) else {
            return Ok(false);
        };
        let len = archives.len().min(input.len());
        if self.span > len {
            let target = (0..self.lists.index().len())
                .flat_map(|p| self.lists.row(p))
                .max()
                .unwrap_or(0);
            return Err(ModelError::Target { target, len });
        }
        before.check(t_spike)?;
        let (w0, w1) = (
            self.synapse_starts[p] as usize,
            self.synapse_starts[p + 1] as usize,
        );
        let input = &mut input[..self.span];
        let decay = self.decay.get_or_insert_with(Box::default);
        if self.decay_of != rule.tau_plus_inv.to_bits() {
            **decay = Memo::new();
            self.decay_of = rule.tau_plus_inv.to_bits();
        }
        update_synapses(
            rule,
            self.delay,
            before,
            t_spike,
            self.lists.row(p),
            &mut self.weights[w0..w1],
            &mut archives[..self.span],
            decay,
            |target, w| input[target as usize] += w,
        )?;
        Ok(true)
    }

    /// Row `p`'s (the `p`-th present source's) targets, in the order of
    /// connection.
    ///
    /// # Panics
    ///
    /// When `p` is not below the number of rows.
    pub fn targets(&self, p: usize) -> Decode<'_> {
        self.lists.row(p)
    }

    /// Row `p`'s weights, in the order of connection.
    ///
    /// # Panics
    ///
    /// When `p` is not below the number of rows.
    pub fn weights(&self, p: usize) -> &[f64] {
        &self.weights[self.synapse_starts[p] as usize..self.synapse_starts[p + 1] as usize]
    }

    /// Every weight, the rows in source order.
    pub fn all_weights(&self) -> &[f64] {
        &self.weights
    }

    /// Where row `p`'s weights start in [`all_weights`](Self::all_weights).
    ///
    /// # Panics
    ///
    /// When `p` is above the number of rows.
    pub fn weights_start(&self, p: usize) -> usize {
        self.synapse_starts[p] as usize
    }

    /// Puts back a checkpoint's weights, all of them in the order of
    /// [`all_weights`](Self::all_weights). Refused, changing nothing, for a
    /// negative or non-finite weight or another count.
    pub fn restore_weights(&mut self, weights: &[f64]) -> Result<(), ModelError> {
        check_weights(weights, self.weights.len())?;
        self.weights.copy_from_slice(weights);
        Ok(())
    }

    /// Number of synapses.
    pub fn len(&self) -> usize {
        self.weights.len()
    }

    /// Whether there is no synapse.
    pub fn is_empty(&self) -> bool {
        self.weights.is_empty()
    }

    /// Bytes as allocated: the index, the targets with their offsets, the
    /// weights with theirs, and the delivery's memo
    /// ([`DELIVERY_MEMO_BYTES`], where there is a row).
    pub fn bytes(&self) -> usize {
        self.decay.as_ref().map_or(0, |_| DELIVERY_MEMO_BYTES)
            + self.lists.bytes()
            + self.synapse_starts.capacity() * 4
            + self.weights.capacity() * std::mem::size_of::<f64>()
    }
}

/// The last pass of building [`StdpRows`]: connects the synapses counted.
#[derive(Debug)]
pub struct StdpRowsFiller {
    delay: f64,
    lists: ListFiller,
    weights: Vec<f64>,
    span: usize,
}

impl StdpRowsFiller {
    /// Rows of delay `delay` (ms, `> 0`) for the synapses `counter` counted;
    /// refused for a bad delay or more than `u32::MAX` target units.
    pub fn new(delay: f64, counter: ListCounter) -> Result<Self, ModelError> {
        positive("delay", delay)?;
        let lists = counter.filler()?;
        Ok(StdpRowsFiller {
            delay,
            weights: vec![0.0; lists.synapses()],
            lists,
            span: 0,
        })
    }

    /// Adds a synapse of `source` onto `archives[target]` of initial weight
    /// `weight` (finite, `>= 0`) and registers it with that archive, as
    /// [`StdpRow::connect`](super::StdpRow::connect) does.
    ///
    /// # Panics
    ///
    /// When `source` was not counted, or has more synapses than counted.
    pub fn connect(
        &mut self,
        source: u32,
        target: u32,
        weight: f64,
        archives: &mut [PostArchive],
    ) -> Result<(), ModelError> {
        // No spike before the rows are built: the trace's last spike is 0.
        register(archives, target, weight, 0.0, self.delay)?;
        let (_, at) = self.lists.push(source, target);
        self.weights[at] = weight;
        self.span = self.span.max(target as usize + 1);
        Ok(())
    }

    /// The rows.
    pub fn finish(self) -> StdpRows {
        let (lists, synapse_starts) = self.lists.finish_with_synapses();
        let decay = (!self.weights.is_empty()).then(Box::default);
        StdpRows {
            delay: self.delay,
            lists,
            synapse_starts,
            weights: self.weights,
            span: self.span,
            decay,
            decay_of: u64::MAX,
        }
    }
}
