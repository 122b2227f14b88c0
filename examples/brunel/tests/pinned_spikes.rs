//! The spike files of fixed seeds, pinned by their SHA-256: a change to the code
//! that moves a single spike (or a byte of the file format) fails here, whatever
//! the ranks, threads and exchange engine of the run.

mod common;

const BRUNEL: &str = env!("CARGO_BIN_EXE_brunel");

/// `spikes.spk` of [`common::NEST_100`] for each seed.
const PINNED: [(u64, &str); 2] = [
    (
        1,
        "318d8428b50448e3515283e0a6865932302cc90b4b44ec5796083f3968fb89bc",
    ),
    (
        7,
        "7938f8cb76b9928ab72a3e8eb3ac7e20803213d8a40408c3bbee040abff2b305",
    ),
];

#[test]
fn spike_files_of_fixed_seeds_keep_their_digests() {
    hpc_test_support::example::assert_pinned_spikes(
        BRUNEL,
        &common::NEST_100,
        &PINNED,
        &[
            (1, 2, &[]),
            (2, 1, &["--engine", "world"]),
            (2, 2, &["--engine", "inline"]),
            (2, 1, &["--engine", "thread"]),
        ],
    );
}
