//! What the checkpoint tests share: fresh directories and what `tracing` logs.

use hpc_checkpoint::{Checkpoint, Checkpoints, Rejected};

/// A path under the system's temporary directory, unique to this process and call,
/// with nothing there, removed with what the test made there when dropped (also
/// when the test fails).
pub fn tmpdir(tag: &str) -> hpc_test_support::TmpDir {
    hpc_test_support::TmpDir::unmade("hpc-ckpt-test", tag)
}

pub use hpc_test_support::log::logged;

/// `set.latest_with_rejections()` (which must succeed), with what it logged on this
/// thread meanwhile.
pub fn latest_logged(set: &Checkpoints) -> (Checkpoint, Vec<Rejected>, String) {
    let ((ck, rejected), text) = logged(|| set.latest_with_rejections().unwrap());
    (ck, rejected, text)
}
