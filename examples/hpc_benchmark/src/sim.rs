//! One rank of the network (a [`Shard`] per thread) and its simulation loop.
//!
//! # Time stepping
//!
//! Spikes are exchanged every `D` steps (`D`: the delay). A spike emitted in
//! step `u` (time `(u + 1) dt`, as NEST stamps it) arrives in step `u + D`.
//! After each exchange the rank takes the spikes of the interval in, sorted by
//! step and source: each excitatory source with a trace on the rank
//! ([`network::rank_traces`](crate::network::rank_traces)) has its trace `K+`
//! advanced once, and the trace before the spike is kept beside it. Then
//! every shard delivers all spikes of the interval in that order: a spike of
//! an excitatory source first updates the
//! weights of its STDP row (facilitation by the target's spikes since the
//! source's previous spike, depression by the target's trace) and adds the new
//! weights to the targets' excitatory input of the arrival step, in the row's
//! order; static synapses count spikes. The order of the `f64` additions is
//! therefore fixed by the spikes' steps and sources, whatever the
//! decomposition. Every postsynaptic spike up to the presynaptic spike's time
//! is recorded before it is delivered, and none is more than `D` steps late,
//! which is what [`hpc_spiking::plasticity`] needs.
//!
//! A step of a neuron is [`IafPscAlpha::step`](hpc_spiking::neuron::IafPscAlpha::step) with the excitatory input (STDP
//! weights, then `JE` times the count of static excitatory spikes and of the
//! Poisson drive, drawn from the neuron's stream with the step as counter) and
//! the inhibitory one (`g JE` times the count).

use std::time::Instant;

use anyhow::{bail, Result};
use hpc_spiking::checkpoint::RunCheckpoints;
use hpc_spiking::exchange::{spike_records, SpikeExchange};
use hpc_spiking::intake::Intervals;
use hpc_spiking::rng::{mix64, PoissonTable};
use hpc_spiking::spikes::SpikeWriter;
use hpc_spiking::{Block, RunOptions};
use rayon::prelude::*;

use crate::checkpoint::{self, Restart};
pub use crate::network::Shard;
use crate::network::{rank_traces, traces_before, Dyn};
use crate::params::{Model, Params};
use hpc_spiking::plasticity::{SourceTrace, SourceTraces};

/// The E->E weights of a rank at the end: moments, an order-independent digest
/// and a histogram of 0.01 pA bins.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct WeightStats {
    /// Synapses.
    pub count: u64,
    /// The weight the sums are taken from (pA): the initial one, so that
    /// weights that hardly changed give their SD without cancellation.
    pub shift: f64,
    /// Sum of the weights' differences from `shift` (pA).
    pub sum: f64,
    /// Sum of their squares.
    pub sum_sq: f64,
    /// Smallest weight.
    pub min: f64,
    /// Largest weight.
    pub max: f64,
    /// Wrapping sum of a hash of each synapse's (source, target, weight bits):
    /// the same for the same synapses in any order of storage.
    pub digest: u64,
    /// Non-empty bins `(index, count)` of width [`BIN_PA`] from 0.
    pub bins: Vec<(u32, u64)>,
}

/// Width of a weight histogram bin (pA).
pub const BIN_PA: f64 = 0.01;

/// The most bins [`weight_bins`] counts in an array (8 MiB of counts); wider
/// spreads of weights are sorted.
const DENSE_BINS: u32 = 1 << 20;

/// The histogram bin of weight `w` (pA, `>= 0`).
fn bin_of(w: f64) -> u32 {
    (w / BIN_PA).min(u32::MAX as f64) as u32
}

/// The non-empty bins `(index, count)` of `weights`, whose smallest and
/// largest are `min` and `max`, in increasing order: counted in an array over
/// the bins from `min`'s to `max`'s when there are at most 2^20 (`DENSE_BINS`) of
/// them, else by sorting the bins of the weights.
pub fn weight_bins(weights: &[f64], min: f64, max: f64) -> Vec<(u32, u64)> {
    if weights.is_empty() {
        return Vec::new();
    }
    let (lo, hi) = (bin_of(min), bin_of(max));
    if hi - lo < DENSE_BINS {
        let mut counts = vec![0u64; (hi - lo) as usize + 1];
        for &w in weights {
            counts[(bin_of(w) - lo) as usize] += 1;
        }
        return counts
            .into_iter()
            .enumerate()
            .filter(|&(_, c)| c > 0)
            .map(|(i, c)| (lo + i as u32, c))
            .collect();
    }
    let mut bins: Vec<u32> = weights.iter().map(|&w| bin_of(w)).collect();
    bins.sort_unstable();
    let mut out: Vec<(u32, u64)> = Vec::new();
    for b in bins {
        match out.last_mut() {
            Some((last, c)) if *last == b => *c += 1,
            _ => out.push((b, 1)),
        }
    }
    out
}

/// The hash of one synapse for [`WeightStats::digest`].
pub fn synapse_hash(source: u32, target: u32, w: f64) -> u64 {
    mix64(mix64(((source as u64) << 32) | target as u64) ^ w.to_bits())
}

impl WeightStats {
    /// Adds `other`'s synapses.
    pub fn merge(&mut self, other: &WeightStats) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            self.min = other.min;
            self.max = other.max;
            self.shift = other.shift;
        }
        debug_assert_eq!(self.shift, other.shift);
        self.count += other.count;
        self.sum += other.sum;
        self.sum_sq += other.sum_sq;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.digest = self.digest.wrapping_add(other.digest);
        let mut all: std::collections::BTreeMap<u32, u64> = self.bins.iter().copied().collect();
        for &(b, c) in &other.bins {
            *all.entry(b).or_default() += c;
        }
        self.bins = all.into_iter().collect();
    }

    /// Mean and standard deviation.
    pub fn mean_sd(&self) -> (f64, f64) {
        let n = self.count.max(1) as f64;
        let mean = self.sum / n;
        (
            self.shift + mean,
            (self.sum_sq / n - mean * mean).max(0.0).sqrt(),
        )
    }

    /// The `q`-quantile (0..1) at the centre of its bin.
    pub fn quantile(&self, q: f64) -> f64 {
        let want = (q * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for &(b, c) in &self.bins {
            seen += c;
            if seen >= want {
                return (b as f64 + 0.5) * BIN_PA;
            }
        }
        self.max
    }
}

/// What one rank did.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct RankReport {
    /// This rank.
    pub rank: usize,
    /// Number of ranks.
    pub size: usize,
    /// Threads (shards) of this rank.
    pub threads: usize,
    /// The rank's neurons (global ids).
    pub first: u32,
    /// Number of neurons of this rank.
    pub neurons: u32,
    /// E->E (STDP) synapses onto this rank's neurons.
    pub stdp_synapses: u64,
    /// Static synapses onto this rank's neurons.
    pub static_synapses: u64,
    /// Bytes of the synapses with their plastic state ([`Shard::synapse_bytes`]),
    /// and the rank's sources' traces ([`SourceTraces::bytes`]).
    pub synapse_bytes: u64,
    /// Bytes of the ring buffers of pending input ([`Shard::ring_bytes`]),
    /// and of the traces handed to the delivery with the spikes of an
    /// exchange (16 bytes a spike, as allocated).
    pub ring_bytes: u64,
    /// Step the run started from.
    pub start_step: u64,
    /// Step the run reached.
    pub end_step: u64,
    /// Whether the run reached its end (false when stopped early).
    pub completed: bool,
    /// Seconds building the network (and reading a checkpoint).
    pub build_s: f64,
    /// Seconds in the simulation loop.
    pub simulate_s: f64,
    /// CPU seconds of the process in the simulation loop.
    pub simulate_cpu_s: f64,
    /// Seconds exchanging spikes (waits included).
    pub communicate_s: f64,
    /// Spikes of all ranks exchanged during this run.
    pub spikes_exchanged: u64,
    /// The E->E weights at the end.
    pub weights: WeightStats,
    /// Spikes of the recorded neurons after the warm-up, and in all (rank 0).
    pub recorded: Option<(u64, u64)>,
    /// The spike file, once complete (rank 0).
    #[serde(with = "hpc_spiking::run::opt_path")]
    pub spike_file: Option<std::path::PathBuf>,
}

/// One rank of the simulation.
pub struct Simulation<'a> {
    model: &'a Model,
    rank: usize,
    size: usize,
    block: Block,
    /// The rank's shards (one per thread).
    pub shards: Vec<Shard>,
    /// The traces of the excitatory sources with a row on a shard, or a
    /// neuron on the rank, once for every shard.
    pub traces: SourceTraces,
    /// The trace before each spike of the exchange being delivered.
    before: Vec<SourceTrace>,
    pois: PoissonTable,
    step: u64,
    build_s: f64,
    restored: Option<Restart>,
}

/// Rank 0's spike file and counts.
struct Intake {
    writer: Option<SpikeWriter>,
    records: Vec<(u32, u32)>,
    after_warmup: u64,
    total: u64,
}

impl<'a> Simulation<'a> {
    /// Builds rank `rank`'s part of the network with the threads of `pool`, or
    /// restores it from the checkpoint of `opts.restart` (checked against the
    /// model and `opts` before the network is built).
    pub fn new(
        model: &'a Model,
        (rank, size): (usize, usize),
        pool: &rayon::ThreadPool,
        opts: &hpc_spiking::run::RunOptions,
    ) -> Result<Simulation<'a>> {
        let t0 = Instant::now();
        // A checkpoint of other parameters is refused before the network is built.
        let restored = checkpoint::resume(opts, model)?;
        let block = Block::part(model.n, size as u32, rank as u32);
        let threads = block.shards(pool.current_num_threads());
        let shards = pool.install(|| {
            (0..threads)
                .into_par_iter()
                .map(|t| {
                    let b = Block::part(block.len, threads, t);
                    Shard::build(model, block.first + b.first, b.len)
                })
                .collect::<Result<Vec<_>>>()
        })?;
        let traces = rank_traces(model, &shards, block.first..block.end());
        let mut sim = Simulation {
            model,
            rank,
            size,
            block,
            shards,
            traces,
            before: Vec::new(),
            pois: PoissonTable::new(model.lambda_ext),
            step: 0,
            build_s: 0.0,
            restored: None,
        };
        if let Some(r) = restored {
            sim.step = checkpoint::restore(&r, model, block, &mut sim.shards, &mut sim.traces)?;
            hpc_spiking::checkpoint::restored(&r);
            sim.restored = Some(r);
        }
        sim.build_s = t0.elapsed().as_secs_f64();
        Ok(sim)
    }

    /// The rank's neurons.
    pub fn block(&self) -> Block {
        self.block
    }

    /// Steps done.
    pub fn step(&self) -> u64 {
        self.step
    }

    fn dynp(&self) -> Dyn<'a> {
        let m = self.model;
        Dyn {
            neuron: &m.neuron,
            rule: &m.rule,
            je: m.je,
            gje: m.params.g * m.je,
            dt: m.params.dt,
            delay: m.delay_steps as u64,
            gid_bits: m.gid_bits,
            ne: m.ne,
        }
    }

    /// Runs to the end (or `opts.stop_at`), exchanging spikes through `ex`;
    /// `progress(step, steps)` after every interval.
    pub fn run<E: SpikeExchange>(
        &mut self,
        pool: &rayon::ThreadPool,
        ex: &mut E,
        opts: &RunOptions,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<RankReport> {
        let model = self.model;
        let d = self.dynp();
        let start_step = self.step;
        // Exchanged every delay and waited for (the delivery sorts what arrives).
        let iv = Intervals::new(opts, model.delay_steps, model.steps, start_step)?;
        let mut checkpoints = opts.checkpoints(&model.params);
        let mut intake = self.intake(opts)?;
        let (t0, cpu0) = (Instant::now(), hpc_spiking::run::cpu_seconds());
        let mut comm_s = 0.0;
        let mut exchanged = 0u64;
        let (mut send, mut all) = (Vec::new(), Vec::new());
        // SIGTERM, SIGINT and SIGHUP stop the loop after the interval in progress.
        let on_signal = hpc_spiking::stop::OnSignal::install(opts.stop_on_signal)?;
        while self.step < iv.end {
            let m = iv.next(self.step, None) as u64;
            let step0 = self.step;
            let pois = &self.pois;
            pool.install(|| {
                self.shards
                    .par_iter_mut()
                    .try_for_each(|sh| sh.update(step0, m as u32, &d, pois))
            })?;
            send.clear();
            for sh in &self.shards {
                send.extend_from_slice(&sh.spikes);
            }
            let tc = Instant::now();
            ex.overlap(&send, &mut all, || ())?;
            comm_s += tc.elapsed().as_secs_f64();
            exchanged += all.len() as u64;
            // Sorted: by step within the interval, then source.
            all.sort_unstable();
            let (traces, before) = (&mut self.traces, &mut self.before);
            let parts = pool.current_num_threads();
            pool.install(|| traces_before(traces, &all, step0, &d, before, parts))?;
            let before = &self.before;
            pool.install(|| {
                self.shards
                    .par_iter_mut()
                    .try_for_each(|sh| sh.deliver(&all, before, step0, &d))
            })?;
            self.record(&mut intake, &all, step0)?;
            self.step += m;
            // Every rank stops at the same step (one word each every few
            // intervals; the exchange above is complete). Looked at before the
            // checkpoint, as the other networks' loop does: it also notes the
            // step completed, which an error of the checkpoint's write names
            // (it named the interval before: "stopped after 9.0 ms: cannot
            // write …/step-0000000100/…").
            let stop = on_signal.check_among(
                self.step,
                (self.size, self.step == iv.end),
                |words, all| ex.overlap(words, all, || ()).map(|_| ()),
            )?;
            if iv.at_checkpoint(self.step) {
                if let Some(ck) = checkpoints.as_mut() {
                    self.write_checkpoint(ex, ck, &intake)?;
                }
            }
            progress(self.step, model.steps);
            if let Some(stopped) = stop {
                // The spike file holds every spike recorded so far.
                if let Some(w) = intake.writer.as_mut() {
                    w.flush()?;
                }
                return Err(stopped.into());
            }
        }
        let completed = self.step >= model.steps;
        let spike_file = match intake.writer.take() {
            Some(w) if completed => Some(w.finish()?),
            _ => None,
        };
        let (stdp, stat) = self
            .shards
            .iter()
            .map(Shard::synapses)
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        Ok(RankReport {
            rank: self.rank,
            size: self.size,
            threads: self.shards.len(),
            first: self.block.first,
            neurons: self.block.len,
            stdp_synapses: stdp,
            static_synapses: stat,
            synapse_bytes: self.shards.iter().map(Shard::synapse_bytes).sum::<u64>()
                + self.traces.bytes() as u64,
            ring_bytes: self.shards.iter().map(Shard::ring_bytes).sum::<u64>()
                + (self.before.capacity() * std::mem::size_of::<SourceTrace>()) as u64,
            start_step,
            end_step: self.step,
            completed,
            build_s: self.build_s,
            simulate_s: t0.elapsed().as_secs_f64(),
            simulate_cpu_s: hpc_spiking::run::cpu_seconds() - cpu0,
            communicate_s: comm_s,
            spikes_exchanged: exchanged,
            weights: self.weight_stats(),
            recorded: (self.rank == 0).then_some((intake.after_warmup, intake.total)),
            spike_file,
        })
    }

    /// The E->E weights of the rank now: moments and digest in one pass over
    /// the rows (in source order, as the sums always were), the histogram in
    /// another over the weights alone ([`weight_bins`]).
    pub fn weight_stats(&self) -> WeightStats {
        let mut ws = WeightStats::default();
        for sh in &self.shards {
            let mut w_sh = WeightStats {
                shift: self.model.je,
                ..WeightStats::default()
            };
            let rows = &sh.plastic;
            for (p, s) in rows.index().iter().enumerate() {
                for (t, &w) in rows.targets(p).zip(rows.weights(p)) {
                    if w_sh.count == 0 {
                        (w_sh.min, w_sh.max) = (w, w);
                    }
                    w_sh.count += 1;
                    let dw = w - w_sh.shift;
                    w_sh.sum += dw;
                    w_sh.sum_sq += dw * dw;
                    w_sh.min = w_sh.min.min(w);
                    w_sh.max = w_sh.max.max(w);
                    w_sh.digest = w_sh.digest.wrapping_add(synapse_hash(s, sh.first + t, w));
                }
            }
            w_sh.bins = weight_bins(rows.all_weights(), w_sh.min, w_sh.max);
            ws.merge(&w_sh);
        }
        ws
    }

    fn intake(&self, opts: &RunOptions) -> Result<Intake> {
        let model = self.model;
        let mut intake = Intake {
            writer: None,
            records: Vec::new(),
            after_warmup: 0,
            total: 0,
        };
        if self.rank != 0 {
            return Ok(intake);
        }
        let prefix = match &self.restored {
            Some(r) => match checkpoint::spikes(r, model)? {
                Some(p) => p,
                None if opts.spikes.is_some() => bail!(
                    "checkpoint {} has no spike file to continue",
                    hpc_io::message::path(r.dir())
                ),
                None => Vec::new(),
            },
            None => Vec::new(),
        };
        intake.count(&prefix, model.presim_steps);
        if let Some(p) = &opts.spikes {
            let mut w = SpikeWriter::with_header(p, &checkpoint::header_json(model))?;
            w.append(&prefix)?;
            intake.writer = Some(w);
        }
        Ok(intake)
    }

    /// Rank 0 keeps the recorded neurons' spikes of an exchange.
    fn record(&self, intake: &mut Intake, all: &[u32], base: u64) -> Result<()> {
        if self.rank != 0 {
            return Ok(());
        }
        spike_records(all, base, self.model.gid_bits, &mut intake.records);
        let n_rec = self.model.n_rec;
        intake.records.retain(|&(_, id)| id < n_rec);
        let recs = std::mem::take(&mut intake.records);
        intake.count(&recs, self.model.presim_steps);
        if let Some(w) = intake.writer.as_mut() {
            w.append(&recs)?;
        }
        intake.records = recs;
        Ok(())
    }

    fn write_checkpoint<E: SpikeExchange>(
        &self,
        ex: &mut E,
        checkpoints: &mut RunCheckpoints<'_, Params>,
        intake: &Intake,
    ) -> Result<()> {
        let payload = checkpoint::encode(
            self.model,
            self.step,
            self.block,
            &self.shards,
            &self.traces,
        );
        let spikes = intake.writer.as_ref().map(|w| (w.partial(), intake.total));
        checkpoints.write(
            (self.step, self.rank, self.size),
            &payload,
            spikes,
            |words, all| ex.overlap(words, all, || ()).map(|_| ()),
        )
    }
}

impl Intake {
    fn count(&mut self, records: &[(u32, u32)], presim_steps: u64) {
        self.total += records.len() as u64;
        self.after_warmup += records
            .iter()
            .filter(|&&(tick, _)| tick as u64 > presim_steps)
            .count() as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(ws: &[f64]) -> WeightStats {
        let mut s = WeightStats {
            shift: 45.0,
            ..WeightStats::default()
        };
        for (i, &w) in ws.iter().enumerate() {
            let one = WeightStats {
                count: 1,
                shift: 45.0,
                sum: w - 45.0,
                sum_sq: (w - 45.0) * (w - 45.0),
                min: w,
                max: w,
                digest: synapse_hash(i as u32, 0, w),
                bins: vec![((w / BIN_PA) as u32, 1)],
            };
            s.merge(&one);
        }
        s
    }

    #[test]
    fn weight_bins_are_the_map_s_in_either_pass() {
        let mut state = 3u64;
        let mut next = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let narrow: Vec<f64> = (0..20_000)
            .map(|_| 45.0 + 2.0 * next())
            .chain([0.0, 0.0, 45.0, 45.01, 45.02])
            .collect();
        // Spread over more bins than DENSE_BINS: sorted.
        let wide: Vec<f64> = narrow.iter().copied().chain([1e5, 1e30]).collect();
        for (ws, dense) in [(&narrow, true), (&wide, false)] {
            let (min, max) = ws
                .iter()
                .fold((f64::MAX, 0f64), |(a, b), &w| (a.min(w), b.max(w)));
            assert_eq!(bin_of(max) - bin_of(min) < DENSE_BINS, dense);
            let mut map = std::collections::BTreeMap::<u32, u64>::new();
            for &w in ws {
                *map.entry(bin_of(w)).or_default() += 1;
            }
            let want: Vec<(u32, u64)> = map.into_iter().collect();
            assert_eq!(weight_bins(ws, min, max), want, "dense {dense}");
        }
        assert!(weight_bins(&[], 0.0, 0.0).is_empty());
    }

    #[test]
    fn weight_moments_quantiles_and_digest() {
        let ws: Vec<f64> = (0..100).map(|i| 45.0 + i as f64 * 0.1).collect();
        let s = stats(&ws);
        let (mean, sd) = s.mean_sd();
        assert!((mean - 49.95).abs() < 1e-9, "{mean}");
        // The SD of 0, 0.1, ..., 9.9.
        assert!((sd - 2.886_607).abs() < 1e-5, "{sd}");
        assert!(
            (s.quantile(0.05) - 45.405).abs() < 0.011,
            "{}",
            s.quantile(0.05)
        );
        assert!(
            (s.quantile(0.95) - 54.405).abs() < 0.011,
            "{}",
            s.quantile(0.95)
        );
        assert_eq!((s.min, s.max), (45.0, ws[99]));
        // The digest does not depend on the order; a changed weight changes it.
        let mut rev = WeightStats::default();
        let half = stats(&ws[..50]);
        let mut rest = stats(&ws[50..]);
        rest.digest = ws[50..].iter().enumerate().fold(0u64, |d, (i, &w)| {
            d.wrapping_add(synapse_hash(50 + i as u32, 0, w))
        });
        rev.merge(&rest);
        rev.merge(&half);
        assert_eq!(rev.digest, s.digest);
        assert_eq!(rev.bins, s.bins);
        let mut other = ws.clone();
        other[7] = f64::from_bits(other[7].to_bits() + 1);
        assert_ne!(stats(&other).digest, s.digest);
        // Equal weights have no spread.
        assert_eq!(stats(&[45.6096; 1000]).mean_sd().1, 0.0);
    }
}
