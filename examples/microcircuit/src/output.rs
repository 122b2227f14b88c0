//! The spike file, and the per-population statistics rank 0 keeps while writing it.
//!
//! # Format (`.spk`, the brunel example's format, version 1)
//!
//! ```text
//! offset  size  content
//! 0       8     magic "HPCSPIKE"
//! 8       4     format version, u32 little-endian (1)
//! 12      4     header length H, u32 little-endian
//! 16      H     header: UTF-8 JSON (dt_ms, n_neurons, t_presim_ms, t_sim_ms,
//!               populations [{name, first, count}], params)
//! 16+H    8*k   k records (tick: u32 LE, node_id: u32 LE), sorted by tick then id
//! ```
//!
//! A spike at `tick` happened at `tick * dt_ms` ms (NEST's spike time, the end of
//! the step in which the threshold was crossed); ids are 0-based and contiguous per
//! population in the order L2/3E, L2/3I, L4E, L4I, L5E, L5I, L6E, L6I. Every spike
//! is written, the warm-up's too; statistics count ticks after `t_presim_ms / dt_ms`.
//! The file is written as `<name>.partial`, flushed after every exchange, and
//! renamed when the run completes. `hpc-spiking`'s `python/read_spikes.py` reads it;
//! `tools/to_sonata.py` converts it to SONATA's HDF5 spike layout.

use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

pub use hpc_spiking::spikes::{
    decode_spikes, partial_path, read_spikes, SpikeWriter, MAGIC, VERSION,
};

use crate::params::{Model, NPOP, POPULATIONS};

/// The header JSON of a model's spike file.
pub fn header_json(model: &Model) -> String {
    let pops: Vec<_> = (0..NPOP)
        .map(|i| serde_json::json!({"name": POPULATIONS[i], "first": model.first[i], "count": model.sizes[i]}))
        .collect();
    serde_json::json!({
        "format": "hpc-rs spikes",
        "version": VERSION,
        "record": "tick u32 LE, node_id u32 LE; time_ms = tick * dt_ms",
        "dt_ms": model.params.dt,
        "t_presim_ms": model.params.t_presim,
        "t_sim_ms": model.params.t_presim + model.params.t_sim,
        "t_record_ms": model.params.t_sim,
        "n_neurons": model.n,
        "populations": pops,
        "params": model.params,
        "model": "Potjans & Diesmann (2014) cortical microcircuit, NEST Potjans_2014 (hpc-example-microcircuit)",
    })
    .to_string()
}

/// Creates the spike file `<path>.partial` (rank 0) with `model`'s header; spikes
/// go in with [`SpikeWriter::write`] and reach the file at [`SpikeWriter::flush`].
pub fn spike_writer(path: &Path, model: &Model) -> Result<SpikeWriter> {
    SpikeWriter::with_header(path, &header_json(model))
}

/// Statistics of one population over the recorded time.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PopStats {
    /// Population name.
    pub name: String,
    /// Neurons.
    pub neurons: u32,
    /// Spikes after the warm-up.
    pub spikes: u64,
    /// Mean rate over its neurons (Hz).
    pub rate_hz: f64,
    /// Mean CV of the inter-spike intervals over neurons with at least 2 ISIs.
    pub cv_isi: f64,
    /// Neurons that contributed to `cv_isi`.
    pub cv_neurons: u32,
}

/// Statistics of a run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Stats {
    /// Every spike, the warm-up's too.
    pub spikes_total: u64,
    /// Per population, after the warm-up.
    pub populations: Vec<PopStats>,
    /// Mean rate of all neurons after the warm-up (Hz).
    pub rate_hz: f64,
    /// Recorded time (ms) the rates are over.
    pub window_ms: f64,
}

/// Running statistics (rank 0): per neuron, the spikes and ISIs after the
/// warm-up ([`Recorder::after`]).
pub use hpc_spiking::spikes::Recorder;

/// The statistics of a run of `model` from its recorder, with the recorded
/// time `window_ms`.
pub fn stats(rec: &Recorder, model: &Model, window_ms: f64) -> Stats {
    let mut pops = Vec::new();
    let mut all = 0u64;
    for p in 0..NPOP {
        let (a, b) = (model.first[p] as usize, model.first[p + 1] as usize);
        let spikes = rec.spikes_of(a..b);
        all += spikes;
        let (cv_isi, k) = rec.cv_of(a..b);
        pops.push(PopStats {
            name: POPULATIONS[p].to_string(),
            neurons: (b - a) as u32,
            spikes,
            rate_hz: if window_ms > 0.0 {
                spikes as f64 / (b - a) as f64 / (window_ms / 1000.0)
            } else {
                0.0
            },
            cv_isi,
            cv_neurons: k,
        });
    }
    Stats {
        spikes_total: rec.spikes,
        populations: pops,
        rate_hz: if window_ms > 0.0 {
            all as f64 / model.n as f64 / (window_ms / 1000.0)
        } else {
            0.0
        },
        window_ms,
    }
}
