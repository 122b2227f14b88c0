//! `tools/validate.py` given hostile arguments: each refused by name with
//! status 2 before anything runs (it used to run NEST's reference first,
//! minutes with NEST installed, and then the binary on values it refuses).
//!
//! Without `python3` the test says so and passes, unless `HPC_REQUIRE_PYTHON=1`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn bad_arguments_are_refused_before_any_run() {
    if !hpc_test_support::have_python("the microcircuit's validate.py test") {
        return;
    }
    let tool = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/validate.py");
    let bin = env!("CARGO_BIN_EXE_microcircuit");
    let fifo = std::env::temp_dir().join(format!("microcircuit-validate-{}", std::process::id()));
    hpc_test_support::mkfifo(&fifo);
    let fifo = fifo.to_str().unwrap();
    for (args, words) in [
        (
            &[bin, "--n-scaling", "nan"][..],
            "--n-scaling nan: must be a finite number",
        ),
        (
            &[bin, "--k-scaling", "2"][..],
            "--k-scaling 2.0: must be a finite number in (0, 1]",
        ),
        (&[bin, "--t-sim", "inf"][..], "--t-sim inf"),
        (&[bin, "--rate-tol", "-1"][..], "--rate-tol -1.0"),
        (&[bin, "--cv-tol", "nan"][..], "--cv-tol nan"),
        (
            &[bin, "--seeds", "1", "99999999999999999999999"][..],
            "--seeds 99999999999999999999999",
        ),
        (
            &[bin, "--keep", "/dev/null"][..],
            "--keep /dev/null: exists and is not a directory",
        ),
        (
            &["/dev/zero"][..],
            "--microcircuit /dev/zero: not an executable file",
        ),
        (&[fifo][..], "not an executable file"),
    ] {
        let (bin, rest) = args.split_first().unwrap();
        let t = Instant::now();
        let out = Command::new("python3")
            .arg(&tool)
            .args(["--microcircuit", bin])
            .args(rest)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(words), "{args:?}: {words:?} not in {err}");
        assert!(
            !err.contains("Traceback") && !err.contains("nest"),
            "{args:?}: {err}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{args:?}: {:?}",
            t.elapsed()
        );
    }
    std::fs::remove_file(fifo).unwrap();
}
