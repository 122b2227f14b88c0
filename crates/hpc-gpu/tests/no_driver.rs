//! Without a CUDA driver, constructing a communicator is a typed error.

#![cfg(feature = "cuda")]

use hpc_gpu::{GpuComm, GpuError};

#[test]
fn no_driver_gives_no_driver_error() {
    // SAFETY: only tries to dlopen libcuda.
    if unsafe { hpc_gpu::cudarc::driver::sys::is_culib_present() } {
        eprintln!("a CUDA driver is present; this test is for machines without one");
        return;
    }
    let world = hpc_runtime::World::init().expect("singleton world");
    match GpuComm::new(&world) {
        Err(GpuError::NoDriver(msg)) => assert!(!msg.is_empty()),
        other => panic!("expected NoDriver, got {other:?}"),
    }
}
