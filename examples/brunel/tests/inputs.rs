//! Files and numbers from the user that cannot be used: a parameter or reference
//! file that is a FIFO or a device, a pace or a parameter that is not a finite
//! number. Each is refused at once with a message naming it, never a hang or a panic.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use hpc_test_support::example::{self, refused};

const BRUNEL: &str = env!("CARGO_BIN_EXE_brunel");

/// A fresh directory, removed at the end of the test (and when it fails).
fn tmpdir(tag: &str) -> hpc_test_support::TmpDir {
    hpc_test_support::TmpDir::new("brunel-inputs", tag)
}

/// A small brunel run with `extra` flags; it must end within 60 s.
fn brunel(out: &Path, extra: &[&str]) -> Output {
    let t = Instant::now();
    let o = example::command(BRUNEL, &["--order", "20", "--t-sim", "10"], out, extra)
        .env("HPC_BOOTSTRAP", "singleton")
        .output()
        .unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "took {:?}",
        t.elapsed()
    );
    o
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

#[test]
fn a_config_or_reference_file_that_is_a_fifo_or_dev_zero_is_refused_at_once() {
    let dir = tmpdir("fifo");
    let fifo = dir.join("in.fifo");
    mkfifo(&fifo);
    let out = dir.join("out");
    let fifo_s = fifo.to_str().unwrap();
    for flags in [
        vec!["--config", fifo_s],
        vec!["--config", fifo_s, "--preset", "nest"],
        vec!["--reference", fifo_s],
    ] {
        let e = refused(&brunel(&out, &flags));
        assert!(
            e.contains("in.fifo is a FIFO, not a regular file"),
            "{flags:?}: {e}"
        );
    }
    for flags in [
        vec!["--config", "/dev/zero"],
        vec!["--reference", "/dev/zero"],
    ] {
        let e = refused(&brunel(&out, &flags));
        assert!(
            e.contains("/dev/zero is a character device"),
            "{flags:?}: {e}"
        );
    }
}

#[test]
fn a_pace_or_parameter_that_is_not_a_usable_number_is_refused_by_name() {
    let dir = tmpdir("numbers");
    let out = dir.join("out");
    let e = refused(&brunel(&out, &["--pace", "1e-300"]));
    assert!(
        e.contains("--pace 1e-300 would stretch") && e.contains("more than a year"),
        "{e}"
    );
    for pace in ["NaN", "inf", "0", "-1"] {
        let e = refused(&brunel(&out, &[&format!("--pace={pace}")]));
        assert!(
            e.contains("--pace must be a finite number above 0"),
            "{pace}: {e}"
        );
    }
    // Pass 16: written out in 301 digits.
    let e = refused(&brunel(&out, &["--pace=-1e300"]));
    assert!(
        e.contains("--pace must be a finite number above 0, got -1e300") && e.len() < 200,
        "{e}"
    );
    let e = refused(&brunel(&out, &["--j", "NaN"]));
    assert!(e.contains("j must be a finite number, got NaN"), "{e}");
    let e = refused(&brunel(&out, &["--delay", "inf"]));
    assert!(e.contains("delay must be a finite number, got inf"), "{e}");
    let e = refused(&brunel(&out, &["--checkpoint-every", "inf"]));
    assert!(
        e.contains("--checkpoint-every inf ms is not a positive multiple of the time step"),
        "{e}"
    );
}
