//! What `tracing` logs while a test's call runs, as text.

use std::sync::{Arc, Mutex};

/// What `f` returns, with what it logged on this thread meanwhile at `level`
/// and above (plain text, no colours).
pub fn logged_at<T>(level: tracing::Level, f: impl FnOnce() -> T) -> (T, String) {
    let log = Log::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(log.clone())
        .with_ansi(false)
        .with_max_level(level)
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text =
        String::from_utf8_lossy(&log.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned();
    (out, text)
}

/// [`logged_at`] `INFO` and above, `tracing_subscriber`'s default.
pub fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    logged_at(tracing::Level::INFO, f)
}

/// The bytes a subscriber writes, kept.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(b);
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

#[cfg(test)]
mod tests {
    #[test]
    fn what_is_logged_at_the_level_and_above_is_kept() {
        let ((), text) = super::logged_at(tracing::Level::DEBUG, || {
            tracing::debug!("kept");
            tracing::trace!("not kept");
        });
        assert!(
            text.contains("kept") && !text.contains("not kept"),
            "{text}"
        );
        let (v, text) = super::logged(|| {
            tracing::debug!("below");
            7
        });
        assert_eq!((v, text.as_str()), (7, ""));
    }
}
