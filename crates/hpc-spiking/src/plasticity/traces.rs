//! [`SourceTraces`]: the presynaptic traces of many sources, kept once for
//! every set of rows that reads them.

use rayon::prelude::*;

use crate::model::ModelError;
use crate::targets::SourceIndex;

use super::{SourceTrace, StdpPlHom};

/// The fewest spikes of a step that [`SourceTraces::spike_step`] splits into
/// parts (fewer are taken in by the calling thread: a part costs a task).
pub const PARALLEL_SPIKES: usize = 4096;

/// One part of [`SourceTraces::spike_step`]: `traces` are those of the
/// present sources numbered from `first`, which hold every source of
/// `spikes` present here.
#[allow(clippy::too_many_arguments)]
fn take_in(
    index: &SourceIndex,
    first: usize,
    traces: &mut [SourceTrace],
    rule: &StdpPlHom,
    t_spike: f64,
    spikes: &[u32],
    source_of: &(impl Fn(u32) -> u32 + Sync),
    before: &mut [SourceTrace],
) -> Result<(), ModelError> {
    for (&spike, out) in spikes.iter().zip(before) {
        *out = match index.get(source_of(spike)) {
            Some(p) => {
                let trace = &mut traces[p - first];
                trace.check(t_spike)?;
                let was = *trace;
                trace.advance(rule, t_spike);
                was
            }
            None => SourceTrace::default(),
        };
    }
    Ok(())
}

/// The trace `K+` and last spike time of each source of a [`SourceIndex`],
/// kept once for a process however many [`StdpRows`](super::StdpRows) (one
/// per thread) hold synapses of the source.
///
/// A source's trace depends on nothing but its own spike times, so the value
/// that every row of the source would keep is the same double: the process
/// takes in each spike once ([`spike`](Self::spike), which answers the trace
/// *before* the spike and advances it), and hands that value to every row's
/// delivery. A present source takes 16 bytes here instead of 16 bytes in
/// each set of rows that holds it; an absent one its bit in the index.
///
/// ```
/// use hpc_spiking::plasticity::{SourceTraces, StdpPlHom, StdpPlParams};
/// use hpc_spiking::targets::IndexBuilder;
///
/// let rule = StdpPlHom::new(StdpPlParams { tau_plus: 15.0, ..StdpPlParams::default() })?;
/// let mut marks = IndexBuilder::new(100);
/// marks.mark(42);
/// let mut traces = SourceTraces::new(marks.finish());
/// // Before the first spike: K+ 0 and t_last 0, as NEST's.
/// let first = traces.spike(42, &rule, 10.0)?.expect("42 is present");
/// assert_eq!((first.k_plus(), first.t_last()), (0.0, 0.0));
/// let second = traces.spike(42, &rule, 25.0)?.expect("42 is present");
/// assert_eq!((second.k_plus(), second.t_last()), (1.0, 10.0));
/// let now = traces.get(42).expect("42 is present");
/// assert!((now.k_plus() - (1.0 + (-1.0f64).exp())).abs() < 1e-15);
/// // An absent source has no trace here; a spike out of order is refused.
/// assert_eq!(traces.spike(7, &rule, 30.0)?, None);
/// assert!(traces.spike(42, &rule, 25.0).is_err());
/// # Ok::<(), hpc_spiking::model::ModelError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SourceTraces {
    index: SourceIndex,
    traces: Vec<SourceTrace>,
}

impl SourceTraces {
    /// Bytes a present source's trace takes (`K+` and the last spike time).
    pub const BYTES_PER_SOURCE: usize = std::mem::size_of::<SourceTrace>();

    /// The traces of the sources present in `index`, each 0 with its last
    /// spike at 0 (before any spike, as NEST's).
    pub fn new(index: SourceIndex) -> Self {
        SourceTraces {
            traces: vec![SourceTrace::default(); index.len()],
            index,
        }
    }

    /// The sources with a trace here.
    pub fn index(&self) -> &SourceIndex {
        &self.index
    }

    /// Source `source`'s trace now, `None` when it has none here.
    pub fn get(&self, source: u32) -> Option<SourceTrace> {
        self.index.get(source).map(|p| self.traces[p])
    }

    /// Source `source` spiked at `t_spike` (ms): answers its trace before the
    /// spike (what every row of the source delivers with) and advances it
    /// (`K+ <- K+ exp(-(t_spike - t_last) / tau_plus) + 1`, `t_last <-
    /// t_spike`); `None`, changing nothing, for a source without a trace
    /// here. A spike not after the source's previous one (or not a number) is
    /// refused, changing nothing.
    #[inline]
    pub fn spike(
        &mut self,
        source: u32,
        rule: &StdpPlHom,
        t_spike: f64,
    ) -> Result<Option<SourceTrace>, ModelError> {
        let Some(p) = self.index.get(source) else {
            return Ok(None);
        };
        let trace = &mut self.traces[p];
        trace.check(t_spike)?;
        let before = *trace;
        trace.advance(rule, t_spike);
        Ok(Some(before))
    }

    /// The spikes of one time step, all at `t_spike` (ms), taken in as
    /// [`spike`](Self::spike) takes each, in up to `parts` parts in parallel
    /// (on the current rayon pool; serially below [`PARALLEL_SPIKES`]
    /// spikes): `source_of(spikes[i])` is the source of spike `i`, strictly
    /// increasing with `i` (a source spikes at most once a step), and
    /// `before[i]` gets its trace before the spike, or a zero trace where it
    /// has none here. Each part holds a contiguous range of sources, so the
    /// parts touch disjoint traces and every value is the one the serial
    /// order gives. Sources not increasing, or a `before` of another length,
    /// are refused before anything changes; a spike not after its source's
    /// previous one is refused too, after the other parts' spikes (and the
    /// earlier ones of its part) were taken in.
    pub fn spike_step(
        &mut self,
        rule: &StdpPlHom,
        t_spike: f64,
        spikes: &[u32],
        source_of: impl Fn(u32) -> u32 + Sync,
        before: &mut [SourceTrace],
        parts: usize,
    ) -> Result<(), ModelError> {
        if before.len() != spikes.len() {
            return Err(ModelError::Param {
                name: "before",
                value: before.len() as f64,
                must: "as long as the spikes",
            });
        }
        if let Some(w) = spikes
            .windows(2)
            .find(|w| source_of(w[0]) >= source_of(w[1]))
        {
            return Err(ModelError::Param {
                name: "spikes",
                value: source_of(w[1]) as f64,
                must: "of sources strictly increasing within a step",
            });
        }
        let parts = parts.clamp(1, spikes.len().div_ceil(PARALLEL_SPIKES / 2).max(1));
        if parts == 1 || spikes.len() < PARALLEL_SPIKES {
            return take_in(
                &self.index,
                0,
                &mut self.traces,
                rule,
                t_spike,
                spikes,
                &source_of,
                before,
            );
        }
        // Part k: the spikes from k len / parts on, whose sources are the
        // present ones from the first of them on (numbered from `first`).
        let len = spikes.len();
        let bounds: Vec<usize> = (0..=parts).map(|k| k * len / parts).collect();
        let mut jobs = Vec::with_capacity(parts);
        let (mut traces, mut before, mut first) = (&mut self.traces[..], before, 0);
        for k in 0..parts {
            let (lo, hi) = (bounds[k], bounds[k + 1]);
            let end = match spikes.get(hi) {
                Some(&s) => self.index.present_below(source_of(s)),
                None => self.index.len(),
            };
            let (mine, rest) = std::mem::take(&mut traces).split_at_mut(end - first);
            let (out, more) = std::mem::take(&mut before).split_at_mut(hi - lo);
            jobs.push((first, mine, &spikes[lo..hi], out));
            (traces, before, first) = (rest, more, end);
        }
        let index = &self.index;
        jobs.into_par_iter()
            .try_for_each(|(first, traces, spikes, before)| {
                take_in(
                    index, first, traces, rule, t_spike, spikes, &source_of, before,
                )
            })
    }

    /// Puts back a checkpoint's trace of source `source` (see
    /// [`SourceTrace::restore`]); answers whether the source has a trace here
    /// (one without is skipped).
    pub fn restore(&mut self, source: u32, trace: SourceTrace) -> bool {
        match self.index.get(source) {
            Some(p) => {
                self.traces[p] = trace;
                true
            }
            None => false,
        }
    }

    /// Number of sources with a trace.
    pub fn len(&self) -> usize {
        self.traces.len()
    }

    /// Whether no source has a trace here.
    pub fn is_empty(&self) -> bool {
        self.traces.is_empty()
    }

    /// Bytes as allocated: the index and the traces.
    pub fn bytes(&self) -> usize {
        self.index.bytes() + self.traces.capacity() * Self::BYTES_PER_SOURCE
    }
}
