//! Brunel's spike file: the workspace's format ([`hpc_spiking::spikes`]) with this
//! model's header.

use std::path::Path;

use anyhow::Result;

pub use hpc_spiking::spikes::{read_spikes, Recorder, SpikeWriter, Stats};

use crate::params::Model;

/// The header JSON of a model's spike file.
pub fn header_json(model: &Model) -> String {
    let h = serde_json::json!({
        "format": "hpc-rs spikes",
        "version": hpc_spiking::spikes::VERSION,
        "record": "tick u32 LE, node_id u32 LE; time_ms = tick * dt_ms",
        "dt_ms": model.params.dt,
        "t_sim_ms": model.params.t_sim,
        "n_neurons": model.n,
        "populations": [
            {"name": "excitatory", "first": 0, "count": model.ne},
            {"name": "inhibitory", "first": model.ne, "count": model.ni},
        ],
        "params": model.params,
        "model": "Brunel (2000) delta-synapse LIF network (hpc-example-brunel)",
    });
    h.to_string()
}

/// Creates the spike file `<path>.partial` (rank 0) with `model`'s header.
pub fn spike_writer(path: &Path, model: &Model) -> Result<SpikeWriter> {
    SpikeWriter::with_header(path, &header_json(model))
}
