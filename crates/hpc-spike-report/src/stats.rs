//! Statistics of a recording: spike counts, firing rates and the coefficient of
//! variation of inter-spike intervals, per neuron and per population.
//!
//! Definitions (the same as the examples' summaries and NEST's examples):
//! the rate of a neuron is its spike count in the window over the window's
//! length; the CV of a neuron is `sd(ISI) / mean(ISI)` (population standard
//! deviation) over its intervals, for neurons with at least 2 intervals; a
//! population's CV is the mean over those neurons.

use std::borrow::Cow;

use crate::{Population, Recording, Result};

/// Finds the population of a neuron id (binary search over the id ranges).
#[derive(Clone, Debug)]
pub struct IdIndex {
    /// `(first, end, population index, offset of its first neuron)`, by `first`.
    ranges: Vec<(u32, u64, usize, usize)>,
}

impl IdIndex {
    /// The index of `populations` (which must not overlap).
    pub fn new(populations: &[Population]) -> IdIndex {
        let mut offset = 0usize;
        let mut ranges: Vec<_> = populations
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let r = (p.first, p.first as u64 + p.count as u64, i, offset);
                offset += p.count as usize;
                r
            })
            .collect();
        ranges.sort_unstable();
        IdIndex { ranges }
    }

    /// The population of `id`, if any.
    pub fn of(&self, id: u32) -> Option<usize> {
        self.slot(id).map(|(p, _)| p)
    }

    /// `(population, dense neuron index)`: neurons numbered population by
    /// population in the order given.
    pub fn slot(&self, id: u32) -> Option<(usize, usize)> {
        let k = self.ranges.partition_point(|r| r.0 <= id);
        let &(first, end, pop, offset) = self.ranges.get(k.checked_sub(1)?)?;
        ((id as u64) < end).then(|| (pop, offset + (id - first) as usize))
    }
}

/// The statistics of one population.
#[derive(Clone, Debug, PartialEq)]
pub struct PopulationStats {
    /// Its name.
    pub name: String,
    /// Its neurons.
    pub neurons: u32,
    /// Spikes in the window.
    pub spikes: u64,
    /// Mean firing rate over its neurons (Hz).
    pub rate_hz: f64,
    /// Standard deviation of the neurons' rates (Hz).
    pub rate_sd_hz: f64,
    /// Mean CV of ISIs over the neurons with at least 2 intervals.
    pub cv_mean: Option<f64>,
    /// The CV of every neuron with at least 2 intervals.
    pub cvs: Vec<f64>,
}

/// The statistics of a recording.
#[derive(Clone, Debug, PartialEq)]
pub struct Analysis {
    /// Per population, in the recording's order.
    pub populations: Vec<PopulationStats>,
    /// Spikes in the window.
    pub spikes: u64,
    /// Mean rate over all neurons (Hz).
    pub rate_hz: f64,
    /// Mean CV over all neurons with at least 2 intervals.
    pub cv_mean: Option<f64>,
    /// Neurons that have a CV.
    pub cv_neurons: u64,
}

/// The spikes inside the window, sorted by time (borrowed when already so).
pub(crate) fn windowed(rec: &Recording) -> Cow<'_, [(u32, u32)]> {
    let (lo, hi) = tick_window(rec);
    let inside = |t: u32| t >= lo && t <= hi;
    let sorted = rec.spikes.windows(2).all(|w| w[0].0 <= w[1].0);
    if sorted && rec.spikes.iter().all(|s| inside(s.0)) {
        return Cow::Borrowed(&rec.spikes);
    }
    let mut v: Vec<(u32, u32)> = rec.spikes.iter().copied().filter(|s| inside(s.0)).collect();
    v.sort_by_key(|s| s.0);
    Cow::Owned(v)
}

/// The first and last tick inside the window.
pub(crate) fn tick_window(rec: &Recording) -> (u32, u32) {
    // Half a tick of slack: window edges given in ms land on the tick they name.
    let lo = (rec.t_start_ms / rec.dt_ms - 0.5).ceil().max(0.0);
    let hi = (rec.t_stop_ms / rec.dt_ms + 0.5)
        .floor()
        .min(u32::MAX as f64);
    (lo as u32, hi as u32)
}

/// Bytes [`analyse`] holds per neuron: its spike count, last spike and number of
/// intervals (4 bytes each) and the sums of its intervals and their squares (8
/// bytes each).
pub const BYTES_PER_NEURON: u64 = 28;

/// Refuses the statistics of `neurons` neurons when they need more than
/// `available` bytes ([`BYTES_PER_NEURON`] each; `None`: not known, not refused).
fn check_memory(neurons: u64, available: Option<u64>) -> Result<()> {
    let need = neurons.saturating_mul(BYTES_PER_NEURON);
    if let Some(available) = available.filter(|&a| need > a) {
        // Populations of 2^32 neurons aborted the process on the allocation.
        return Err(crate::Error::Input(format!(
            "the populations hold {neurons} neurons, whose statistics need {need} bytes, \
             more than the {available} bytes of memory available (MemAvailable)"
        )));
    }
    Ok(())
}

/// Computes the statistics of `rec` (validated first). It holds
/// [`BYTES_PER_NEURON`] bytes per neuron of the populations: populations that
/// need more than the memory available (`MemAvailable`) are refused
/// ([`Error::Input`](crate::Error::Input), naming the neurons) before anything
/// is allocated.
pub fn analyse(rec: &Recording) -> Result<Analysis> {
    rec.validate()?;
    let neurons = rec.neurons();
    check_memory(neurons, hpc_io::read::mem_available())?;
    let index = IdIndex::new(&rec.populations);
    let n = neurons as usize;
    let mut count = vec![0u32; n];
    let mut last = vec![u32::MAX; n];
    let mut isi_n = vec![0u32; n];
    let mut isi_sum = vec![0f64; n];
    let mut isi_sum2 = vec![0f64; n];
    let spikes = windowed(rec);
    for &(t, id) in spikes.iter() {
        let Some((_, i)) = index.slot(id) else {
            continue;
        };
        count[i] += 1;
        if last[i] != u32::MAX {
            let d = (t - last[i]) as f64;
            isi_n[i] += 1;
            isi_sum[i] += d;
            isi_sum2[i] += d * d;
        }
        last[i] = t;
    }
    let secs = rec.duration_ms() / 1000.0;
    let mut offset = 0usize;
    let mut pops = Vec::with_capacity(rec.populations.len());
    for p in &rec.populations {
        let r = offset..offset + p.count as usize;
        offset = r.end;
        let spikes: u64 = count[r.clone()].iter().map(|&c| c as u64).sum();
        let rate = spikes as f64 / p.count as f64 / secs;
        let var = count[r.clone()]
            .iter()
            .map(|&c| (c as f64 / secs - rate).powi(2))
            .sum::<f64>()
            / p.count as f64;
        let cvs: Vec<f64> = r
            .filter(|&i| isi_n[i] >= 2)
            .map(|i| {
                let m = isi_n[i] as f64;
                let mean = isi_sum[i] / m;
                (isi_sum2[i] / m - mean * mean).max(0.0).sqrt() / mean
            })
            .collect();
        pops.push(PopulationStats {
            name: p.name.clone(),
            neurons: p.count,
            spikes,
            rate_hz: rate,
            rate_sd_hz: var.sqrt(),
            cv_mean: mean(&cvs),
            cvs,
        });
    }
    let spikes: u64 = pops.iter().map(|p| p.spikes).sum();
    let cv_neurons: u64 = pops.iter().map(|p| p.cvs.len() as u64).sum();
    let cv_sum: f64 = pops.iter().flat_map(|p| p.cvs.iter()).sum();
    Ok(Analysis {
        rate_hz: spikes as f64 / n as f64 / secs,
        cv_mean: (cv_neurons > 0).then(|| cv_sum / cv_neurons as f64),
        cv_neurons,
        spikes,
        populations: pops,
    })
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The most bins of the population rate [`population_rate`] makes and a figure
/// draws (`PlotOptions::rate_bin_ms` over the window): a smaller bin over a long
/// window is refused (a bin of 0.1 ms over 10^6 ms made a 183 MB raster, one of
/// 1e-300 ms a panic).
pub const MAX_RATE_BINS: usize = 100_000;

/// The rate of all neurons in bins of `bin_ms` from the window's start (Hz).
/// The last bin may be shorter; its rate is scaled to its length.
///
/// It allocates a bin per `bin_ms` of the window: a `bin_ms` that is not a
/// positive number, or one that makes more than
/// [`MAX_RATE_BINS`] bins, is refused
/// ([`Error::Input`](crate::Error::Input), naming `rate_bin_ms`) before
/// anything is allocated.
pub fn population_rate(rec: &Recording, bin_ms: f64) -> crate::Result<Vec<f64>> {
    use hpc_io::message::num;
    let dur = rec.duration_ms();
    if !(bin_ms.is_finite() && bin_ms > 0.0) {
        return Err(crate::Error::Input(format!(
            "rate_bin_ms must be > 0, got {}",
            num(bin_ms)
        )));
    }
    let bins = ((dur / bin_ms) - 1e-9).ceil().max(1.0);
    if bins.is_nan() || bins > MAX_RATE_BINS as f64 {
        return Err(crate::Error::Input(format!(
            "rate_bin_ms = {} ms over the window of {} ms makes {} bins of the population rate, \
             more than the {MAX_RATE_BINS} a figure draws: give at least {} ms",
            num(bin_ms),
            num(dur),
            num(bins),
            num(dur / MAX_RATE_BINS as f64)
        )));
    }
    let bins = bins as usize;
    let mut c = vec![0u64; bins];
    for &(t, _) in windowed(rec).iter() {
        // A spike is stamped at the end of its step: the bin is the one whose
        // interval (start, end] holds it, so a spike at exactly `bin_ms` is in the first.
        let x = (t as f64 * rec.dt_ms - rec.t_start_ms) / bin_ms;
        let i = (x.ceil() as usize).saturating_sub(1).min(bins - 1);
        c[i] += 1;
    }
    let n = rec.neurons() as f64;
    Ok(c.iter()
        .enumerate()
        .map(|(i, &k)| {
            let len = (dur - i as f64 * bin_ms).min(bin_ms);
            k as f64 / n / (len / 1000.0)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Populations of more neurons than memory holds the statistics of are
    /// refused by name before anything is allocated (2^32 - 1 neurons aborted
    /// the process on an allocation of 16 GiB, also through the figures, whose
    /// test is in `plot`).
    #[test]
    fn populations_beyond_memory_are_refused_before_allocating() {
        let big = u64::from(u32::MAX);
        let e = check_memory(big, Some(16 << 30)).unwrap_err().to_string();
        assert!(
            e.contains("4294967295 neurons") && e.contains("120259084260 bytes"),
            "{e}"
        );
        assert!(e.contains("17179869184 bytes of memory available"), "{e}");
        check_memory(big, None).unwrap();
        check_memory(1000, Some(28_000)).unwrap();
        assert!(check_memory(1001, Some(28_000)).is_err());
    }
    use crate::palette;

    fn rec(spikes: Vec<(u32, u32)>) -> Recording {
        Recording {
            populations: vec![
                Population::new("E", 0, 4, palette::EXCITATORY),
                Population::new("I", 10, 2, palette::INHIBITORY),
            ],
            spikes,
            dt_ms: 1.0,
            t_start_ms: 0.0,
            t_stop_ms: 1000.0,
            group_title: None,
        }
    }

    #[test]
    fn rates_and_cvs_follow_their_definitions() {
        // Neuron 0: ISIs 10, 10, 10 (CV 0); neuron 1: ISIs 10, 30 (mean 20, sd 10, CV 0.5);
        // neuron 11: 2 spikes, one ISI (no CV).
        let a = analyse(&rec(vec![
            (10, 0),
            (10, 1),
            (20, 0),
            (20, 1),
            (30, 0),
            (40, 0),
            (50, 1),
            (60, 11),
            (70, 11),
        ]))
        .unwrap();
        assert_eq!(a.spikes, 9);
        let e = &a.populations[0];
        assert_eq!((e.spikes, e.neurons), (7, 4));
        assert!((e.rate_hz - 7.0 / 4.0).abs() < 1e-12);
        // Rates 4, 3, 0, 0 Hz: mean 1.75, sd sqrt(((2.25)^2 + 1.25^2 + 2*1.75^2)/4).
        let sd = ((2.25f64.powi(2) + 1.25f64.powi(2) + 2.0 * 1.75f64.powi(2)) / 4.0).sqrt();
        assert!((e.rate_sd_hz - sd).abs() < 1e-12);
        assert_eq!(e.cvs.len(), 2);
        assert!((e.cvs[0] - 0.0).abs() < 1e-12 && (e.cvs[1] - 0.5).abs() < 1e-12);
        assert_eq!(e.cv_mean, Some(0.25));
        let i = &a.populations[1];
        assert_eq!((i.spikes, i.cv_mean), (2, None));
        assert_eq!(a.cv_neurons, 2);
        assert!((a.rate_hz - 9.0 / 6.0).abs() < 1e-12);
    }

    #[test]
    fn the_window_limits_what_is_counted_and_order_does_not_matter() {
        let mut r = rec(vec![(900, 1), (100, 1), (500, 1), (1001, 1)]);
        r.t_start_ms = 200.0;
        let a = analyse(&r).unwrap();
        assert_eq!(a.spikes, 2);
        assert!((a.populations[0].rate_hz - 2.0 / 4.0 / 0.8).abs() < 1e-12);
    }

    /// Pass 15: a bin of 0, NaN or one that makes more bins than memory holds
    /// panicked ("capacity overflow") in this public function; the figures
    /// bounded it, a library caller did not.
    #[test]
    fn a_bin_that_is_no_length_or_too_short_is_refused() {
        let r = rec(vec![(1, 0), (1000, 2)]);
        for bin in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-300, 1e-3] {
            match population_rate(&r, bin) {
                Err(crate::Error::Input(why)) => assert!(why.contains("rate_bin_ms"), "{why}"),
                other => panic!("bin {bin}: {other:?}"),
            }
        }
        assert_eq!(population_rate(&r, 1e300).unwrap().len(), 1);
    }

    #[test]
    fn the_population_rate_puts_a_spike_at_a_bin_edge_in_the_earlier_bin() {
        let r = rec(vec![(1, 0), (2, 0), (3, 1), (1000, 2)]);
        let v = population_rate(&r, 2.0).unwrap();
        assert_eq!(v.len(), 500);
        // 2 spikes of 6 neurons in 2 ms.
        assert!((v[0] - 2.0 / 6.0 / 0.002).abs() < 1e-9);
        assert!((v[1] - 1.0 / 6.0 / 0.002).abs() < 1e-9);
        assert!((v[499] - 1.0 / 6.0 / 0.002).abs() < 1e-9);
        let v = population_rate(&r, 3.0).unwrap();
        assert_eq!(v.len(), 334);
        // The last bin is 1 ms long.
        assert!((v[333] - 1.0 / 6.0 / 0.001).abs() < 1e-9);
    }

    #[test]
    fn ids_map_to_populations() {
        let r = rec(vec![]);
        let ix = IdIndex::new(&r.populations);
        assert_eq!(ix.slot(0), Some((0, 0)));
        assert_eq!(ix.slot(3), Some((0, 3)));
        assert_eq!(ix.slot(4), None);
        assert_eq!(ix.slot(10), Some((1, 4)));
        assert_eq!(ix.slot(11), Some((1, 5)));
        assert_eq!(ix.slot(12), None);
        assert_eq!(ix.slot(u32::MAX), None);
    }
}
