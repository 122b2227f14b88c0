//! A setting that is wrong is warned about once, however many parts of the SDK
//! read it.
#![cfg(all(feature = "collectives", feature = "topology"))]

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

/// `HPC_PROGRESS_CPUSET` naming CPUs no list may hold: the placement, the
/// choice of engine and the communicator each read it, and each warned (three
/// identical warnings, each echoing the value).
#[test]
fn a_wrong_setting_read_in_several_places_is_warned_about_once() {
    for v in hpc_env::ALL {
        std::env::remove_var(v.name);
    }
    std::env::set_var(hpc_env::PROGRESS_CPUSET, "0-4294967295");
    let buf = Buffer::default();
    let writer = buf.clone();
    tracing_subscriber::fmt()
        .with_env_filter("warn")
        .with_writer(move || writer.clone())
        .init();
    let ctx = hpc_rs::init_with(hpc_rs::Options {
        bind: Some(false),
        ..Default::default()
    })
    .unwrap();
    ctx.comm_options().unwrap();
    ctx.comm().unwrap();
    let seen = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let said = seen
        .matches("HPC_PROGRESS_CPUSET=\"0-4294967295\" is ignored")
        .count();
    assert_eq!(said, 1, "{seen}");
}
