//! A postsynaptic neuron's archive of its spikes and its trace `K-`, as
//! NEST's `ArchivingNode` keeps them for STDP synapses, with the view of the
//! step a delivery reads.

use super::*;

/// The archived spikes of one neuron, oldest first, in one contiguous
/// slice: a `Vec` whose first `head` entries are dropped ones, so that a
/// window is found by scanning a slice (a `VecDeque` maps every index
/// through its ring). The dropped prefix is moved out only when a push
/// would grow the `Vec`, so the capacity is at most twice the spikes kept.
#[derive(Clone, Debug, Default)]
pub(super) struct History {
    pub(super) entries: Vec<Entry>,
    pub(super) head: usize,
}

impl History {
    /// The spikes kept.
    #[inline(always)]
    pub(super) fn live(&self) -> &[Entry] {
        &self.entries[self.head..]
    }

    /// The spikes kept, to mark them read.
    #[inline(always)]
    pub(super) fn live_mut(&mut self) -> &mut [Entry] {
        &mut self.entries[self.head..]
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len() - self.head
    }

    /// Drops the oldest spike (there is one).
    pub(super) fn pop_front(&mut self) {
        debug_assert!(self.head < self.entries.len());
        self.head += 1;
    }

    pub(super) fn push_back(&mut self, e: Entry) {
        if self.head > 0 && self.entries.len() == self.entries.capacity() {
            self.entries.drain(..self.head);
            self.head = 0;
        }
        self.entries.push(e);
    }
}

/// One archived postsynaptic spike.
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    /// Its time (ms).
    pub(super) t: f64,
    /// `K-` just after it (its own 1 included).
    pub(super) k_minus: f64,
    /// How many synapses' windows have covered it.
    pub(super) reads: u32,
}

/// The spike archive of one postsynaptic neuron (NEST's `ArchivingNode`): its
/// trace `K-` and the spikes its incoming STDP synapses have still to read. See
/// the [module](super) docs for what it keeps.
///
/// Every row delivering a spike of one step asks for the same end of the
/// window, `t - d`: what depends on it alone is kept for that time (the
/// step's view), so that most synapses read
/// nothing but the first cache line of their target's archive (the struct
/// is aligned to 64 bytes and the view comes first): `K-` before it, the
/// times of the two newest archived spikes before it, and the reads of the
/// newest one not yet added to its count (added when the step or the
/// archive changes, and counted by [`archived_spikes`](Self::archived_spikes)).
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct PostArchive {
    /// The end `t - d` of the step's view (NaN: none).
    pub(super) cached_t: f64,
    /// [`k_minus_before`](Self::k_minus_before)`(cached_t)`.
    pub(super) cached_k: f64,
    /// The time of the newest archived spike of the view (before
    /// `cached_t + eps`; `-inf`: none), and of the one before it.
    pub(super) newest_t: f64,
    pub(super) second_t: f64,
    pub(super) tau_minus_inv: f64,
    /// One past the newest spike of the view, in `history.entries`.
    pub(super) cached_end: u32,
    /// Reads of that spike not yet added to its count.
    pub(super) pending: u32,
    pub(super) history: History,
    pub(super) last_spike: f64,
    pub(super) tau_minus: f64,
    pub(super) min_delay: f64,
    pub(super) k_minus: f64,
    pub(super) max_delay: f64,
    pub(super) incoming: u32,
}

// What a delivery reads of an archive is in its first cache line.
const _: () = assert!(
    std::mem::offset_of!(PostArchive, pending) + 4 <= 64
        && std::mem::align_of::<PostArchive>() == 64
);

impl PostArchive {
    /// An archive for a neuron of trace time constant `tau_minus` (ms, `> 0`) in
    /// a network whose shortest delay is `min_delay` (ms, `>= 0`; it only widens
    /// what is kept, as NEST's kernel `min_delay` does).
    pub fn new(tau_minus: f64, min_delay: f64) -> Result<Self, ModelError> {
        positive("tau_minus", tau_minus)?;
        non_negative("min_delay", min_delay)?;
        Ok(PostArchive {
            tau_minus,
            tau_minus_inv: 1.0 / tau_minus,
            min_delay,
            k_minus: 0.0,
            last_spike: f64::NEG_INFINITY,
            incoming: 0,
            max_delay: 0.0,
            history: History::default(),
            cached_t: f64::NAN,
            cached_k: 0.0,
            newest_t: f64::NEG_INFINITY,
            second_t: f64::NEG_INFINITY,
            cached_end: 0,
            pending: 0,
        })
    }

    /// The trace's time constant (ms).
    pub fn tau_minus(&self) -> f64 {
        self.tau_minus
    }

    /// The time of the latest recorded spike (ms; `-inf` before the first).
    pub fn last_spike(&self) -> f64 {
        self.last_spike
    }

    /// How many STDP synapses read this archive.
    pub fn incoming(&self) -> u32 {
        self.incoming
    }

    /// How many spikes are archived now.
    pub fn archived(&self) -> usize {
        self.history.len()
    }

    /// Records a spike of this neuron at `t` (ms), after every earlier one; an
    /// earlier or equal `t` (or a NaN) is refused and changes nothing.
    pub fn record_post_spike(&mut self, t: f64) -> Result<(), ModelError> {
        // NaN is not finite: refused too.
        if !t.is_finite() || t <= self.last_spike {
            return Err(ModelError::TimeOrder {
                what: "postsynaptic spike",
                t,
                last: self.last_spike,
            });
        }
        self.leave_step();
        if self.incoming == 0 {
            self.last_spike = t;
            return Ok(());
        }
        let keep = self.max_delay + self.min_delay + STDP_EPS_MS;
        while self.history.len() > 1 {
            let h = self.history.live();
            let read_by_all = h[0].reads >= self.incoming;
            if read_by_all && t - h[1].t > keep {
                self.history.pop_front();
            } else {
                break;
            }
        }
        // Before the first spike `k_minus` is 0 and the product stays 0.
        let decay = if self.k_minus == 0.0 {
            0.0
        } else {
            ((self.last_spike - t) * self.tau_minus_inv).exp()
        };
        self.k_minus = self.k_minus * decay + 1.0;
        self.last_spike = t;
        self.history.push_back(Entry {
            t,
            k_minus: self.k_minus,
            reads: 0,
        });
        Ok(())
    }

    /// The trace `K-` just after the latest recorded spike (0 before the first).
    pub fn trace(&self) -> f64 {
        self.k_minus
    }

    /// The archived spikes, oldest first, for a checkpoint.
    pub fn archived_spikes(&self) -> impl ExactSizeIterator<Item = ArchivedSpike> + '_ {
        let (head, end, pending) = (self.history.head, self.cached_end as usize, self.pending);
        let live = self.history.live().iter().enumerate();
        live.map(move |(i, e)| ArchivedSpike {
            t: e.t,
            k_minus: e.k_minus,
            reads: e.reads + if head + i + 1 == end { pending } else { 0 },
        })
    }

    /// Puts back what [`trace`](Self::trace), [`last_spike`](Self::last_spike)
    /// and [`archived_spikes`](Self::archived_spikes) gave, into an archive whose
    /// synapses are connected again. Refused, changing nothing, when a value is
    /// not a number, a trace is negative, the spikes are not in increasing time
    /// up to `last_spike`, or a spike was read by more synapses than there are.
    pub fn restore(
        &mut self,
        trace: f64,
        last_spike: f64,
        spikes: &[ArchivedSpike],
    ) -> Result<(), ModelError> {
        non_negative("K-", trace)?;
        if last_spike.is_nan() || last_spike == f64::INFINITY {
            return Err(ModelError::Param {
                name: "last_spike",
                value: last_spike,
                must: "a number below +inf",
            });
        }
        let mut last = f64::NEG_INFINITY;
        for e in spikes {
            non_negative("K-", e.k_minus)?;
            if !e.t.is_finite() || e.t <= last || e.t > last_spike {
                return Err(ModelError::TimeOrder {
                    what: "archived postsynaptic spike",
                    t: e.t,
                    last,
                });
            }
            if e.reads > self.incoming {
                return Err(ModelError::Param {
                    name: "reads",
                    value: e.reads as f64,
                    must: "at most the number of incoming synapses",
                });
            }
            last = e.t;
        }
        self.k_minus = trace;
        self.last_spike = last_spike;
        (self.cached_t, self.pending) = (f64::NAN, 0);
        self.history = History {
            entries: spikes
                .iter()
                .map(|e| Entry {
                    t: e.t,
                    k_minus: e.k_minus,
                    reads: e.reads,
                })
                .collect(),
            head: 0,
        };
        Ok(())
    }

    /// `K-` just before `t` (ms): from the latest archived spike more than
    /// [`STDP_EPS_MS`] before `t`, 0 when there is none.
    pub fn k_minus_before(&self, t: f64) -> f64 {
        match self
            .history
            .live()
            .iter()
            .rev()
            .find(|e| t - e.t > STDP_EPS_MS)
        {
            Some(e) => e.k_minus * ((e.t - t) * self.tau_minus_inv).exp(),
            None => 0.0,
        }
    }

    /// [`k_minus_before`](Self::k_minus_before)`(t)`, computed once for
    /// the same `t` until the archive changes.
    #[cfg(test)]
    pub(super) fn k_minus_before_cached(&mut self, t: f64) -> f64 {
        self.at_step(t);
        self.cached_k
    }

    /// Makes the step's view the one of window end `t` (ms).
    #[inline(always)]
    pub(super) fn at_step(&mut self, t: f64) {
        // NaN (no view) equals nothing.
        if self.cached_t != t {
            self.new_step(t);
        }
    }

    /// The view of window end `t`, after adding the reads of the last one.
    #[inline(never)]
    pub(super) fn new_step(&mut self, t: f64) {
        self.leave_step();
        self.cached_k = self.k_minus_before(t);
        let lim2 = t + STDP_EPS_MS;
        let h = self.history.live();
        let mut end = h.len();
        while end > 0 && h[end - 1].t >= lim2 {
            end -= 1;
        }
        let time = |i: usize| h.get(i).map_or(f64::NEG_INFINITY, |e| e.t);
        self.newest_t = time(end.wrapping_sub(1));
        self.second_t = time(end.wrapping_sub(2));
        self.cached_end = (self.history.head + end) as u32;
        self.cached_t = t;
    }

    /// Adds the view's pending reads to its spike and drops the view.
    #[inline]
    pub(super) fn leave_step(&mut self) {
        if self.pending > 0 {
            self.history.entries[self.cached_end as usize - 1].reads += self.pending;
            self.pending = 0;
        }
        self.cached_t = f64::NAN;
    }

    /// The archived spikes of the window `[lim1, cached_t + eps)` but its
    /// newest (which the view holds), marked as read once more, oldest first.
    #[inline(never)]
    pub(super) fn older_window(&mut self, lim1: f64) -> &[Entry] {
        let h = &mut self.history.entries[self.history.head..self.cached_end as usize - 1];
        let mut start = h.len();
        while start > 0 && h[start - 1].t >= lim1 {
            start -= 1;
            h[start].reads += 1;
        }
        &h[start..]
    }

    /// A new synapse of delay `delay` whose next window starts after
    /// `first_read`: the spikes at or before it count as read by it.
    pub(super) fn register(&mut self, first_read: f64, delay: f64) {
        self.leave_step();
        for e in self.history.live_mut() {
            if first_read - e.t > -STDP_EPS_MS {
                e.reads += 1;
            } else {
                break;
            }
        }
        self.incoming += 1;
        self.max_delay = self.max_delay.max(delay);
    }
}

/// One archived postsynaptic spike as a checkpoint keeps it
/// ([`PostArchive::archived_spikes`], [`PostArchive::restore`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ArchivedSpike {
    /// Its time (ms).
    pub t: f64,
    /// `K-` just after it (its own 1 included).
    pub k_minus: f64,
    /// How many synapses' windows have covered it.
    pub reads: u32,
}
