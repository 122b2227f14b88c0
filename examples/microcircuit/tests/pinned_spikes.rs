//! The spike files of fixed seeds, pinned by their SHA-256: a change to the code
//! that moves a single spike (or a byte of the file format) fails here, whatever
//! the ranks, threads, exchange and engine of the run.

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_microcircuit");

/// `spikes.spk` of [`common::small_model`] with 60 ms and the thalamic input, for
/// each seed.
const PINNED: [(u64, &str); 2] = [
    (
        55,
        "f15158f1d016c621be057488d70be5c78388243c3286dc12d9b1507f5b1749ab",
    ),
    (
        3,
        "2145ea8be35a552374f2699f8f16c25a2491908c447f5cc31f553edcf94b56da",
    ),
];

#[test]
fn spike_files_of_fixed_seeds_keep_their_digests() {
    let mut model = common::small_model("60").to_vec();
    model.push("--thalamic");
    hpc_test_support::example::assert_pinned_spikes(
        BIN,
        &model,
        &PINNED,
        &[
            (1, 2, &[]),
            (2, 1, &["--exchange", "allgather", "--engine", "world"]),
            (2, 2, &["--exchange", "allgather", "--engine", "inline"]),
            (2, 1, &["--exchange", "alltoallv", "--engine", "inline"]),
            (2, 2, &["--exchange", "alltoallv", "--engine", "thread"]),
        ],
    );
}
