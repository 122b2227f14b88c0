//! What the checkpoint tests share: fresh directories and what `tracing` logs.

use std::sync::{Arc, Mutex};

use hpc_checkpoint::{Checkpoint, Checkpoints, Rejected};

/// A path under the system's temporary directory, unique to this process and call,
/// with nothing there, removed with what the test made there when dropped (also
/// when the test fails).
pub fn tmpdir(tag: &str) -> hpc_test_support::TmpDir {
    hpc_test_support::TmpDir::unmade("hpc-ckpt-test", tag)
}

/// Captures what `tracing` logs.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Log {
    type Writer = Log;
    fn make_writer(&'a self) -> Log {
        self.clone()
    }
}

/// What `f` returns, with what it logged on this thread meanwhile.
pub fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    let log = Log::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(log.clone())
        .with_ansi(false)
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    (out, text)
}

/// `set.latest_with_rejections()` (which must succeed), with what it logged on this
/// thread meanwhile.
pub fn latest_logged(set: &Checkpoints) -> (Checkpoint, Vec<Rejected>, String) {
    let ((ck, rejected), text) = logged(|| set.latest_with_rejections().unwrap());
    (ck, rejected, text)
}
