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

/// A refusal of `--config` or `--reference` names the flag as well as the
/// file, and a value the model refuses names the file (and the flags over
/// it) when a file set it: they said "/tmp is a directory, not a regular
/// file" and "dt must be > 0, got -1", the flag or the file unnamed.
#[test]
fn config_refusals_name_the_flag_and_the_file() {
    let dir = tmpdir("flag");
    let out = dir.join("out");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "dt = -1\n").unwrap();
    let broken = dir.join("broken.toml");
    std::fs::write(&broken, "dt = [\n").unwrap();
    let d = dir.to_str().unwrap();
    let (b, br) = (bad.to_str().unwrap(), broken.to_str().unwrap());
    for (flags, want) in [
        (
            vec!["--config", d],
            format!("--config {d}: {d} is a directory, not a regular file"),
        ),
        (
            vec!["--reference", d],
            format!("--reference {d}: {d} is a directory"),
        ),
        (
            vec!["--config", b],
            format!("--config {b} with --order, --t-sim: dt must be > 0, got -1"),
        ),
        (
            vec!["--config", b, "--seed", "3"],
            format!("--config {b} with --order, --t-sim, --seed: dt must be > 0"),
        ),
        (
            vec!["--config", br, "--preset", "nest"],
            format!("--config {br}: parsing TOML"),
        ),
        (vec!["--config", br], format!("--config {br}: parsing TOML")),
    ] {
        let e = refused(&brunel(&out, &flags));
        assert!(e.contains(&want), "{flags:?}: {want:?} not in {e}");
    }
    // Without --config the parameter is named as its flag would be, alone.
    let e = refused(&brunel(&out, &["--dt=-1"]));
    assert!(e.contains("error: dt must be > 0, got -1"), "{e}");
    assert!(!out.exists());
}

/// A negative number given as a flag's value is refused by the flag's own
/// check, naming it: `--dt -1` and `--stop-at -5` were clap's "unexpected
/// argument '-1' found", naming the value and not the flag (the
/// microcircuit's flags took them; `--dt=-1` did too).
#[test]
fn a_negative_value_is_refused_naming_its_flag() {
    let dir = tmpdir("negative");
    let out = dir.join("out");
    for (flags, want) in [
        (&["--dt", "-1"][..], "dt must be > 0, got -1"),
        (&["--j", "-0.5"][..], "j must be > 0, got -0.5"),
        (&["--stop-at", "-5"][..], "--stop-at"),
    ] {
        let e = refused(&brunel(&out, flags));
        assert!(e.contains(want), "{flags:?}: {e}");
        assert!(!e.contains("unexpected argument"), "{flags:?}: {e}");
    }
}
