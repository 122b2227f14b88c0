//! `tools/validate.py` given hostile arguments: each refused by name with
//! status 2 before anything runs (it used to run NEST's reference first,
//! minutes with NEST installed, and then the binary on values it refuses).
//!
//! Without `python3` the test says so and passes, unless `HPC_REQUIRE_PYTHON=1`.

use std::path::Path;
use std::process::Command;

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
        let args: Vec<&str> = ["--microcircuit", bin]
            .into_iter()
            .chain(rest.iter().copied())
            .collect();
        hpc_test_support::python_tool_refuses(&tool, &args, words, "nest");
    }
    std::fs::remove_file(fifo).unwrap();
}

/// `to_sonata.py` without numpy ended in a ModuleNotFoundError traceback (its
/// missing h5py was one line); an output naming the spike file it reads (or, when
/// it wrote through `OUT.tmp`, that name) replaced the spike file by the HDF5 file; `--single ""` was taken as
/// no `--single` and `--single a/b` made nested groups. A stand-in numpy on
/// `PYTHONPATH` makes the cases the same with or without numpy installed.
#[test]
fn the_sonata_tool_says_what_it_needs_and_keeps_its_input() {
    if !hpc_test_support::have_python("to_sonata.py's test") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("microcircuit-sonata-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (absent, present) = hpc_test_support::stand_in_numpy(&dir);
    let spikes = dir.join("s.spk");
    std::fs::write(&spikes, b"keep").unwrap();
    let tmp_input = dir.join("t.tmp");
    std::fs::write(&tmp_input, b"keep").unwrap();
    let tool = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/to_sonata.py");
    let s = spikes.to_str().unwrap();
    let t = tmp_input.to_str().unwrap();
    let t_out = dir.join("t");
    for (path, args, code, words) in [
        (&absent, &[s, "o.h5"][..], 1, "to_sonata.py needs numpy"),
        (&present, &[s, s][..], 1, "is the input"),
        // OUT.tmp, the name of the input: read, never replaced (the tool
        // writes through a temporary file of its own now).
        (
            &present,
            &[t, t_out.to_str().unwrap()][..],
            1,
            "t.tmp is not a valid spike file",
        ),
        (
            &present,
            &[s, "o.h5", "--single", ""][..],
            2,
            "--single '': a population name",
        ),
        (
            &present,
            &[s, "o.h5", "--single", "a/b"][..],
            2,
            "--single 'a/b'",
        ),
    ] {
        let o = Command::new("python3")
            .arg(&tool)
            .args(args)
            .current_dir(&dir)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONPATH", path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert!(
            err.contains(words) && !err.contains("Traceback"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(std::fs::read(&spikes).unwrap(), b"keep");
    assert_eq!(std::fs::read(&tmp_input).unwrap(), b"keep");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A binary that writes other populations than the microcircuit's (or none)
/// is named in one line, before NEST runs: `validate.py` indexed our
/// populations by NEST's and ended in an `IndexError` traceback after NEST's
/// run (pass 19's leftover). A stand-in numpy makes it the same with or
/// without numpy installed (the tool needs it for its statistics, and says so
/// before any run).
#[test]
fn a_binary_writing_other_populations_is_refused_by_name() {
    if !hpc_test_support::have_python("the microcircuit's validate.py test") {
        return;
    }
    let dir = hpc_test_support::TmpDir::new("microcircuit-validate", "pops");
    let (absent, present) = hpc_test_support::stand_in_numpy(&dir);
    let tool = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/validate.py");
    let other = r#"[{"name": "A", "first": 0, "count": 2}]"#;
    for (tag, pops, n, words) in [
        (
            "other",
            other,
            2,
            "wrote the populations A, not the microcircuit's L23E",
        ),
        (
            "none",
            "[]",
            0,
            "wrote the populations none, not the microcircuit's",
        ),
    ] {
        let header = format!(
            r#"{{"dt_ms": 0.1, "n_neurons": {n}, "t_sim_ms": 10.0, "t_presim_ms": 0.0, "populations": {pops}}}"#
        );
        // Writes its spike file and a summary into --out, as the binary does.
        let bin = hpc_test_support::example::stand_in_binary(&dir, tag, &header);
        for (numpy, code, words) in [
            (&present, 1, words),
            (&absent, 1, "validate.py needs numpy"),
        ] {
            let o = Command::new("python3")
                .arg(&tool)
                .args(["--microcircuit", bin.to_str().unwrap(), "--seeds", "1"])
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .env("PYTHONPATH", numpy)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(code), "{tag}: {err}");
            assert!(
                err.contains(words) && !err.contains("Traceback") && !err.contains("nest_"),
                "{tag}: {err}"
            );
        }
    }
}
