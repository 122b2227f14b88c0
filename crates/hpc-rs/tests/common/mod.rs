//! What the test binaries that read the SDK's log back share.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// An in-memory log: the writer of a global `tracing` subscriber that a test
/// reads back.
#[derive(Clone, Default)]
pub struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Buffer {
    /// Installs a global subscriber of the warnings (as an application of its
    /// own would, before `init`) writing into a new buffer, and returns it.
    pub fn install_warn() -> Buffer {
        let buf = Buffer::default();
        let writer = buf.clone();
        tracing_subscriber::fmt()
            .with_env_filter("warn")
            .with_writer(move || writer.clone())
            .init();
        buf
    }

    /// What was logged so far.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl Write for Buffer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
