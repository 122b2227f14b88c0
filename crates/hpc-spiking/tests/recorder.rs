//! The statistics of a run's spikes as an application makes them.

use hpc_spiking::spikes::{Recorder, RECORDER_BYTES_PER_NEURON};

/// `Recorder::new(u32::MAX)` aborted the process on its allocation of 120 GB
/// (as `hpc_spike_report::stats::analyse` did before it checked): refused by
/// name where the memory is not there.
#[test]
fn a_recorder_beyond_the_memory_available_is_refused() {
    let need = u64::from(u32::MAX) * RECORDER_BYTES_PER_NEURON;
    if hpc_io::read::mem_available().is_none_or(|a| a >= need) {
        eprintln!("skipped: {need} bytes are available here");
        return;
    }
    let e = Recorder::new(u32::MAX).unwrap_err().to_string();
    assert!(
        e.contains("4294967295 neurons") && e.contains("MemAvailable"),
        "{e}"
    );
    let e = Recorder::after(u32::MAX, 7).unwrap_err().to_string();
    assert!(e.contains("4294967295 neurons"), "{e}");
    // What fits is made as before.
    let mut r = Recorder::new(3).unwrap();
    r.add(&[(1, 0), (4, 0), (9, 0)]).unwrap();
    assert_eq!(r.stats(1.0).spikes, 3);
}
