//! The spike files of the spiking examples (`hpc_spiking::spikes`: `spikes.spk`,
//! and the copy inside a checkpoint): any bytes, complete or as a partial file of
//! an interrupted run.
//!
//! Properties: decoding never panics, and what it accepts is consistent: every
//! neuron id is below the header's neuron count and the records are sorted by tick,
//! then id, each spike once.

#![no_main]

use hpc_spiking::spikes::decode_spikes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for partial_ok in [false, true] {
        if let Ok(f) = decode_spikes(data, partial_ok) {
            assert!(f.spikes.iter().all(|&(_, id)| id < f.n_neurons));
            assert!(
                f.spikes.windows(2).all(|w| w[0] < w[1]),
                "records sorted by tick, then id, each once"
            );
        }
    }
});
