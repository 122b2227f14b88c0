//! `hpc run` at the limits of the machine it runs on and of its flags: what it
//! cannot start stops the job with the launcher's own status and a message, never
//! a panic; what it would not do is refused, not ignored.

use std::process::Command;

const HPC: &str = env!("CARGO_BIN_EXE_hpc");

/// With too little address space for a forwarding thread per rank's stream, the
/// launcher stops the ranks it started and ends 125 naming what failed: it
/// panicked ("failed to spawn thread", 101).
///
/// One malloc arena (`MALLOC_ARENA_MAX=1`): by default glibc reserves an arena
/// of 64 MiB for a new thread at its first allocation, so a thread that did
/// start could find no room for that and glibc's fallback fail a small
/// allocation, which aborts any Rust process (134: seen once in a cold CI
/// run). That is the limit of memory the operator set, not the thread that
/// cannot start which this test is about; with one arena the limit is met
/// where a thread's stack is mapped.
#[test]
fn a_forwarding_thread_that_cannot_start_stops_the_job_with_125() {
    let script = format!("ulimit -v 250000; exec {HPC} run -n 300 --oversubscribe -- sleep 30");
    let t = std::time::Instant::now();
    let out = Command::new("sh")
        .args(["-c", &script])
        .env("MALLOC_ARENA_MAX", "1")
        .output()
        .unwrap();
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

/// A peer that connects to the job's coordinator again and again with what is no
/// hello is refused each time, and named in the log a few times, not once per
/// connection: 200 refusals wrote 200 lines.
#[test]
fn refused_connections_to_the_coordinator_do_not_flood_the_log() {
    use std::io::{BufRead as _, Write as _};
    let script = format!(
        "[ ${rank} = 0 ] && echo ${rv}; sleep 3; exec {HPC} selftest",
        rank = hpc_env::RANK,
        rv = hpc_env::RENDEZVOUS
    );
    let mut child = Command::new(HPC)
        .args(["run", "-n", "2", "--no-tag", "--", "sh", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first.trim().to_string();
    // Held open until the job ends: a peer that closes at once may be gone before
    // its bytes are judged.
    let mut peers = Vec::new();
    for _ in 0..200 {
        if let Ok(mut s) = std::net::TcpStream::connect(&addr) {
            let _ = s.write_all(b"GET / HTTP/1.1\r\n\r\n");
            peers.push(s);
        }
    }
    let out = child.wait_with_output().unwrap();
    drop(peers);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let refusals = err.matches("coordinator refused a connection").count();
    assert!((1..=10).contains(&refusals), "{refusals} lines: {err}");
    assert!(err.contains("the next are not logged"), "{err}");
}

/// `--progress` reserves cores through `--bind`: under `--bind none` (the default)
/// the ranks got no progress core and the job ran as if it had not been given.
/// `hpc run ARGS -- true`: its status and standard error.
fn run_true(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(HPC)
        .arg("run")
        .args(args)
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), err)
}

#[test]
fn progress_cores_without_a_binding_are_refused_not_ignored() {
    let (code, err) = run_true(&["-n", "2", "--progress", "1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--progress 1") && err.contains("--bind"),
        "{err}"
    );
    let args = [
        "-n",
        "1",
        "--bind",
        "core",
        "--progress",
        "1",
        "--oversubscribe",
    ];
    let (code, err) = run_true(&args);
    assert_eq!(code, Some(0), "{err}");
}

/// A misspelt setting given with `-x` is warned about by name (the ranks would
/// ignore it without a word); one the reference lists is not.
#[test]
fn a_setting_the_reference_does_not_list_is_warned_about() {
    let misspelt = format!("{}S=2", hpc_env::THREADS);
    let (code, err) = run_true(&["-n", "1", "-x", &misspelt]);
    assert_eq!(code, Some(0), "{err}");
    let warning = format!("-x {}S: no setting of hpc-rs", hpc_env::THREADS);
    assert!(err.contains(&warning), "{err}");
    let listed = format!("{}=1", hpc_env::THREADS);
    let (_, err) = run_true(&["-n", "1", "-x", &listed]);
    assert!(!err.contains("no setting of hpc-rs"), "{err}");
}
