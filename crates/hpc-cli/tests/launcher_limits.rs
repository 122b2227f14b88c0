//! `hpc run` at the limits of the machine it runs on: what it cannot start stops
//! the job with the launcher's own status and a message, never a panic.

use std::process::Command;

const HPC: &str = env!("CARGO_BIN_EXE_hpc");

/// With too little address space for a forwarding thread per rank's stream, the
/// launcher stops the ranks it started and ends 125 naming what failed: it
/// panicked ("failed to spawn thread", 101).
#[test]
fn a_forwarding_thread_that_cannot_start_stops_the_job_with_125() {
    let script = format!("ulimit -v 250000; exec {HPC} run -n 300 --oversubscribe -- sleep 30");
    let t = std::time::Instant::now();
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("cannot start a thread to forward rank") || err.contains("cannot start rank"),
        "{err}"
    );
    // The ranks started were stopped, not left to sleep out their 30 s.
    assert!(
        t.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        t.elapsed()
    );
}
