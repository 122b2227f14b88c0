//! `init()` leaves an application's own `tracing` subscriber in place (and does not
//! panic), and the SDK's warnings reach it.
#![cfg(feature = "topology")]

use std::io::Write;
use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn an_application_subscriber_is_kept() {
    let buf = Buffer::default();
    let writer = buf.clone();
    tracing_subscriber::fmt()
        .with_env_filter("warn")
        .with_writer(move || writer.clone())
        .init();
    // More threads than this machine has cores: the placement warns (oversubscribed).
    let ctx = hpc_rs::init_with(hpc_rs::Options {
        threads: Some(4096),
        bind: Some(false),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(ctx.world.size(), 1);
    assert!(!ctx.bound);
    let seen = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    assert!(seen.contains("oversubscribed"), "{seen:?}");
}
