//! `tools/validate.py` and `tools/plot.py` given hostile arguments: each refused
//! by name before anything runs (validate.py ran NEST's reference first, minutes
//! with NEST installed, then the binary on values it refuses; the microcircuit's
//! validate.py already checked), never a traceback, never written over their input.
//!
//! Without `python3` the tests say so and pass, unless `HPC_REQUIRE_PYTHON=1`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tools() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools")
}

/// A fresh directory, removed at the end of the test (and when it fails).
fn scratch(tag: &str) -> hpc_test_support::TmpDir {
    hpc_test_support::TmpDir::new("brunel-tools", tag)
}

fn python(args: &[&std::ffi::OsStr], pythonpath: Option<&Path>) -> Output {
    let mut c = Command::new("python3");
    c.args(args).env("PYTHONDONTWRITEBYTECODE", "1");
    if let Some(p) = pythonpath {
        c.env("PYTHONPATH", p);
    }
    c.output().unwrap()
}

#[test]
fn bad_arguments_are_refused_before_any_run() {
    if !hpc_test_support::have_python("brunel's validate.py test") {
        return;
    }
    let tool = tools().join("validate.py");
    let bin = env!("CARGO_BIN_EXE_brunel");
    let dir = scratch("validate");
    let fifo = dir.join("fifo");
    hpc_test_support::mkfifo(&fifo);
    let fifo = fifo.to_str().unwrap();
    for (args, words) in [
        (
            &["--brunel", bin, "--t-sim", "nan"][..],
            "--t-sim nan: must be a finite number above 0 ms",
        ),
        (&["--brunel", bin, "--t-sim", "-1"][..], "--t-sim -1.0:"),
        (&["--brunel", bin, "--t-sim", "inf"][..], "--t-sim inf:"),
        (&["--brunel", bin, "--t-sim", "0"][..], "--t-sim 0.0:"),
        (
            &["--brunel", bin, "--keep", "/dev/null"][..],
            "--keep /dev/null: exists and is not a directory",
        ),
        (
            &["--brunel", "/dev/zero"][..],
            "--brunel /dev/zero: not an executable file",
        ),
        (&["--brunel", fifo][..], "not an executable file"),
    ] {
        hpc_test_support::python_tool_refuses(&tool, args, words, "nest");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `plot.py` without numpy ended in a ModuleNotFoundError traceback (its missing
/// matplotlib was one line); `--out` naming the spike file it reads would replace
/// it by the figure. A stand-in numpy on `PYTHONPATH` makes both the same with
/// or without numpy installed.
#[test]
fn the_plot_tool_says_what_it_needs_and_keeps_its_input() {
    if !hpc_test_support::have_python("brunel's plot.py test") {
        return;
    }
    let dir = scratch("plot");
    let spikes = dir.join("s.spk");
    std::fs::write(&spikes, b"keep").unwrap();
    let plot = tools().join("plot.py");
    let (absent, present) = hpc_test_support::stand_in_numpy(&dir);
    let o = python(&[plot.as_os_str(), spikes.as_os_str()], Some(&absent));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("plot.py needs numpy") && !err.contains("Traceback"),
        "{err}"
    );
    let o = python(
        &[
            plot.as_os_str(),
            spikes.as_os_str(),
            "--out".as_ref(),
            spikes.as_os_str(),
        ],
        Some(&present),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("is the input") && !err.contains("Traceback"),
        "{err}"
    );
    assert_eq!(std::fs::read(&spikes).unwrap(), b"keep");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The NEST scripts of the three networks (`nest_brunel.py`,
/// `nest_microcircuit.py`, `nest_hpc_benchmark.py`) where NEST or numpy cannot
/// be imported: one line naming what is missing and status 1, not Python's
/// traceback of a `ModuleNotFoundError` (pass 15). Modules that refuse to import
/// stand in for missing ones, so the test is the same where NEST is installed.
#[test]
fn the_nest_scripts_name_a_missing_module_in_one_line() {
    if !hpc_test_support::have_python("the NEST scripts' test") {
        return;
    }
    let dir = scratch("nest-missing");
    for missing in ["nest", "numpy"] {
        let m = dir.join(missing);
        std::fs::create_dir_all(&m).unwrap();
        std::fs::write(
            m.join("__init__.py"),
            format!("raise ImportError(\"No module named '{missing}'\")\n"),
        )
        .unwrap();
    }
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (script, args) in [
        ("brunel/tools/nest_brunel.py", vec![]),
        ("microcircuit/tools/nest_microcircuit.py", vec![]),
        (
            "hpc_benchmark/tools/nest_hpc_benchmark.py",
            vec!["--json", "/dev/null"],
        ),
    ] {
        let path = examples.join(script);
        let mut a: Vec<&std::ffi::OsStr> = vec![path.as_os_str()];
        a.extend(args.iter().map(|s| std::ffi::OsStr::new(*s)));
        let o = python(&a, Some(&dir));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{script}: {err}");
        assert!(!err.contains("Traceback"), "{script}: {err}");
        assert!(err.contains("needs"), "{script}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{script}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A stand-in for the microcircuit's binary in `dir`: a script that writes a
/// spike file of its eight populations (no spike) and a summary into `--out`.
fn microcircuit_stand_in(dir: &Path) -> PathBuf {
    let pops: Vec<String> = ["L23E", "L23I", "L4E", "L4I", "L5E", "L5I", "L6E", "L6I"]
        .iter()
        .enumerate()
        .map(|(i, p)| format!(r#"{{"name": "{p}", "first": {i}, "count": 1}}"#))
        .collect();
    let header = format!(
        r#"{{"dt_ms": 0.1, "n_neurons": 8, "t_sim_ms": 10.0, "t_presim_ms": 0.0, "populations": [{}]}}"#,
        pops.join(", ")
    );
    hpc_test_support::example::stand_in_binary(dir, "microcircuit-stand-in", &header)
}

/// brunel's and the microcircuit's `validate.py` given a binary that writes no
/// run (`/bin/true`): one line naming the flag and the binary, status 1. Pass 16:
/// the `FileNotFoundError` traceback of the spike file after NEST's run (minutes
/// with NEST). A stand-in for the NEST script (a tree of links to the tools,
/// beside a script that prints NEST's line at once) makes the test the same
/// where NEST is not installed.
#[test]
fn validate_names_a_binary_that_writes_no_run() {
    if !hpc_test_support::have_python("validate.py's binary test") {
        return;
    }
    use std::os::unix::fs::symlink;
    let dir = scratch("no-run");
    let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python_dir = dir.join("crates/hpc-spiking");
    std::fs::create_dir_all(&python_dir).unwrap();
    symlink(
        real.join("crates/hpc-spiking/python"),
        python_dir.join("python"),
    )
    .unwrap();
    let line = r#"{"rate_hz": 5.0, "cv_isi": 0.5, "spikes": 10, "simulate_cpu_s": 1.0, "simulate_s": 1.0, "populations": []}"#;
    for (example, nest, flag) in [
        ("brunel", "nest_brunel.py", "--brunel"),
        ("microcircuit", "nest_microcircuit.py", "--microcircuit"),
    ] {
        let tools = dir.join("examples").join(example).join("tools");
        std::fs::create_dir_all(&tools).unwrap();
        symlink(
            real.join("examples")
                .join(example)
                .join("tools/validate.py"),
            tools.join("validate.py"),
        )
        .unwrap();
        std::fs::write(tools.join(nest), format!("print('{line}')\n")).unwrap();
        let validate = tools.join("validate.py");
        let more: &[&str] = if example == "brunel" {
            &["--quick"]
        } else {
            &["--seeds", "1"]
        };
        let given = [flag, "/bin/true", "--t-sim", "10"];
        let mut args: Vec<&std::ffi::OsStr> = vec![validate.as_os_str()];
        args.extend(given.iter().chain(more).map(std::ffi::OsStr::new));
        // The microcircuit's tool asks for numpy before any run (its binary
        // runs before NEST's script now): a stand-in, with or without numpy.
        let numpy = (example == "microcircuit").then(|| hpc_test_support::stand_in_numpy(&dir).1);
        let o = python(&args, numpy.as_deref());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{example}: {err}");
        assert!(!err.contains("Traceback"), "{example}: {err}");
        assert!(
            err.contains(&format!("{flag} /bin/true wrote no run's spikes.spk")),
            "{example}: {err}"
        );
        if example == "brunel" {
            // --keep DIR: NEST's line went into DIR/case-1/nest.json through a
            // link planted there.
            let keep = dir.join("keep");
            std::fs::create_dir_all(keep.join("case-1")).unwrap();
            let victim = dir.join("victim");
            std::fs::write(&victim, "precious").unwrap();
            symlink(&victim, keep.join("case-1/nest.json")).unwrap();
            let mut with_keep = args.clone();
            with_keep.extend(["--keep".as_ref(), keep.as_os_str()]);
            let o = python(&with_keep, None);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{err}");
            assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
            let nest_json = std::fs::symlink_metadata(keep.join("case-1/nest.json")).unwrap();
            assert!(nest_json.is_file(), "{err}");
        }
        // NEST's script printing no result line (another last line, none, a
        // field missing) was a traceback of json or a KeyError.
        for (printed, said) in [
            (
                "'NEST -- done'",
                "its last line is not a JSON object): NEST -- done",
            ),
            ("''", "its last line is not a JSON object): (nothing)"),
            ("'{\"spikes\": 10}'", "no finite number"),
        ] {
            std::fs::write(tools.join(nest), format!("print({printed})\n")).unwrap();
            // The microcircuit's binary runs first: one that writes its run.
            let stand_in = microcircuit_stand_in(&dir);
            let mut args = args.clone();
            if example == "microcircuit" {
                args[2] = stand_in.as_os_str();
            }
            let o = python(&args, numpy.as_deref());
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{example}: {err}");
            assert!(!err.contains("Traceback"), "{example}: {err}");
            assert!(
                err.contains(&format!("{nest} printed no result line ({said}")),
                "{example}: {err}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// brunel's and the microcircuit's `validate.py --keep DIR` where DIR holds an
/// earlier invocation's run and the binary now writes nothing (`/bin/true`):
/// the earlier run's `spikes.spk` and `summary.json` were read as this
/// binary's, and compared with NEST as its result. Now one line says the
/// file is the one an earlier run left, status 1.
#[test]
fn validate_never_takes_an_earlier_runs_files_for_this_runs() {
    if !hpc_test_support::have_python("validate.py's --keep test") {
        return;
    }
    use std::os::unix::fs::symlink;
    let dir = scratch("stale");
    let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python_dir = dir.join("crates/hpc-spiking");
    std::fs::create_dir_all(&python_dir).unwrap();
    symlink(
        real.join("crates/hpc-spiking/python"),
        python_dir.join("python"),
    )
    .unwrap();
    let line = r#"{"rate_hz": 5.0, "cv_isi": 0.5, "spikes": 10, "simulate_cpu_s": 1.0, "simulate_s": 1.0, "populations": []}"#;
    let numpy = hpc_test_support::stand_in_numpy(&dir).1;
    for (example, nest, flag, case) in [
        ("brunel", "nest_brunel.py", "--brunel", "case-1"),
        (
            "microcircuit",
            "nest_microcircuit.py",
            "--microcircuit",
            "seed-1",
        ),
    ] {
        let tools = dir.join("examples").join(example).join("tools");
        std::fs::create_dir_all(&tools).unwrap();
        symlink(
            real.join("examples")
                .join(example)
                .join("tools/validate.py"),
            tools.join("validate.py"),
        )
        .unwrap();
        std::fs::write(tools.join(nest), format!("print('{line}')\n")).unwrap();
        // The earlier invocation's run in KEEP/CASE: brunel's own, a stand-in
        // of the microcircuit.
        let keep = dir.join(format!("keep-{example}"));
        let earlier = keep.join(case);
        let o = if example == "brunel" {
            Command::new(env!("CARGO_BIN_EXE_brunel"))
                .args([
                    "--order",
                    "20",
                    "--t-sim",
                    "10",
                    "--quiet",
                    "--no-plot",
                    "--out",
                ])
                .arg(&earlier)
                .env("HPC_BOOTSTRAP", "singleton")
                .output()
                .unwrap()
        } else {
            Command::new(microcircuit_stand_in(&dir))
                .arg("--out")
                .arg(&earlier)
                .output()
                .unwrap()
        };
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(earlier.join("spikes.spk").is_file());
        let validate = tools.join("validate.py");
        let more: &[&str] = if example == "brunel" {
            &["--quick"]
        } else {
            &["--seeds", "1"]
        };
        let given = [flag, "/bin/true", "--t-sim", "10"];
        let mut args: Vec<&std::ffi::OsStr> = vec![validate.as_os_str()];
        args.extend(given.iter().chain(more).map(std::ffi::OsStr::new));
        args.extend(["--keep".as_ref(), keep.as_os_str()]);
        let o = python(&args, Some(&numpy));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{example}: {err}");
        assert!(!err.contains("Traceback"), "{example}: {err}");
        assert!(
            err.contains(&format!("{flag} /bin/true wrote no run's spikes.spk"))
                && err.contains("spikes.spk is the file an earlier run left there"),
            "{example}: {err}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `validate.sh` (through `benches/validate-example.sh`) with a relative
/// `CARGO_TARGET_DIR`, as its comment says the variable is honoured: cargo,
/// run from the repository's root, built into ROOT/DIR, and validate.py was
/// given DIR/release/brunel under the caller's directory, where there is none
/// ("not an executable file"). Stand-ins for cargo (it makes the binary where
/// cargo would) and for NEST's Python (it says whether the binary it is given
/// exists) make the test take seconds, without NEST and without a release build.
#[test]
fn validate_sh_finds_the_binary_of_a_relative_cargo_target_dir() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = scratch("target-dir");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = |name: &str, text: &str| {
        let p = bin.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    };
    script(
        "cargo",
        "#!/bin/sh\nt=${CARGO_TARGET_DIR:-target}\nmkdir -p \"$t/release\" && \
         printf '#!/bin/sh\\n' > \"$t/release/brunel\" && chmod +x \"$t/release/brunel\"\n",
    );
    let py = script(
        "python",
        "#!/bin/sh\n[ \"$1\" = -c ] && exit 0\n[ -x \"$3\" ] && echo \"found $3\" && exit 0\n\
         echo \"no binary at $3\" >&2; exit 1\n",
    );
    let user = dir.join("user");
    std::fs::create_dir_all(&user).unwrap();
    let validate = Path::new(env!("CARGO_MANIFEST_DIR")).join("validate.sh");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let name = format!("target-of-test-{}", std::process::id());
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = Command::new("bash")
        .arg(&validate)
        .arg("--quick")
        .current_dir(&user)
        .env("PATH", path)
        .env("PYTHON", &py)
        .env("CARGO_TARGET_DIR", &name)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    let stray = root.join(&name);
    let built_at_root = stray.exists();
    let _ = std::fs::remove_dir_all(&stray);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains(&format!("found {}", user.join(&name).display())),
        "{out}"
    );
    assert!(!built_at_root, "built into {}", stray.display());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `benches/nest-python.sh` (every `validate.sh`'s Python) given a `PYTHON` it
/// cannot use (a typo, a Python without NEST): it went on to the virtual
/// environment, which it makes from PyPI the first time, without a word of the
/// setting it passed over. A stand-in virtual environment makes the test take
/// no network.
#[test]
fn nest_python_says_when_it_passes_over_the_python_given() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = scratch("nest-python");
    let venv = dir.join("venv");
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    let py = venv.join("bin/python");
    std::fs::write(&py, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/nest-python.sh");
    let o = Command::new("bash")
        .arg(&script)
        .env("PYTHON", dir.join("no-such-python"))
        .env("BRUNEL_VENV", &venv)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        py.to_str().unwrap()
    );
    assert!(
        err.contains("no-such-python does not import nest and numpy")
            && err.contains("using the virtual environment"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every script that builds with cargo from the repository's root and then
/// looks for the binary under `$CARGO_TARGET_DIR` makes a relative one
/// absolute (the caller's) first, as `validate-example.sh` does since pass 18:
/// `benches/microcircuit.sh`, `microcircuit-profile.sh`,
/// `microcircuit-scaling.sh`, `device.sh` and `brunel/run.sh` built into
/// ROOT/DIR and looked for the binary in the caller's DIR.
#[test]
fn every_script_building_from_the_root_makes_a_relative_target_dir_absolute() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut scripts = Vec::new();
    for dir in ["benches", "benches/brunel", "crates/hpc-spiking/validate"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "sh") {
                scripts.push(p);
            }
        }
    }
    assert!(scripts.len() > 10, "{scripts:?}");
    let mut wrong = Vec::new();
    for p in &scripts {
        let text = std::fs::read_to_string(p).unwrap();
        if !text.contains("cd \"$root\" && cargo build") {
            continue;
        }
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if l.contains("target=${CARGO_TARGET_DIR:-") {
                let next = lines.get(i + 1).map_or("", |n| n.trim());
                if !next.starts_with("case $target in /*)") {
                    wrong.push(format!("{}:{}", p.display(), i + 1));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "a relative CARGO_TARGET_DIR taken as it is: {wrong:?}"
    );
}

/// A bench script's flag given last, without its value: named, status 2,
/// before anything is built or run (it was bash's "line 25: $2: unbound
/// variable", status 1).
#[test]
fn a_bench_script_flag_without_its_value_is_named() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (script, flag) in [
        ("benches/microcircuit-scaling.sh", "--t-sim"),
        ("benches/microcircuit.sh", "--reps"),
        ("benches/hpc-benchmark-cluster.sh", "--nodes"),
        ("benches/microcircuit-cluster.sh", "--rounds"),
        ("benches/offload-cluster.sh", "--fft-n"),
    ] {
        let o = Command::new("bash")
            .arg(root.join(script))
            .arg(flag)
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{script}: {err}");
        assert!(
            err.contains(&format!("{flag} needs a value")),
            "{script}: {err}"
        );
    }
}

/// `benches/brunel/ab.sh` given 0, -1 or `x` rounds, or a binary that is not
/// there: named, status 2, before any run (0 rounds ran nothing and ended in
/// the table's Python traceback, "No such file or directory: '/tmp/tmp.…/all'").
#[test]
fn the_ab_script_names_its_rounds_and_binaries() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let ab = root.join("benches/brunel/ab.sh");
    let bin = env!("CARGO_BIN_EXE_brunel");
    for (args, want) in [
        (
            vec![bin, bin, "0"],
            "rounds 0: give a whole number of rounds",
        ),
        (
            vec![bin, bin, "-1"],
            "rounds -1: give a whole number of rounds",
        ),
        (
            vec![bin, bin, "x"],
            "rounds x: give a whole number of rounds",
        ),
        (
            vec!["/nonexistent", bin, "1"],
            "/nonexistent: not an executable file",
        ),
    ] {
        let o = Command::new("bash")
            .arg(&ab)
            .args(&args)
            .env("BRUNEL_AB_NEST", "0")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("Traceback"), "{args:?}: {err}");
    }
}

/// `benches/collcost-abba.sh` given 0, -1 or `x` rounds: named, status 2,
/// before any run (0 ran nothing, then the table's Python failed). Stand-in
/// builds (`hpc` and `collcost` that do nothing) make it take no build.
#[test]
fn the_collcost_abba_script_names_its_rounds() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = scratch("collcost-abba");
    for side in ["a", "b"] {
        std::fs::create_dir_all(dir.join(side)).unwrap();
        for b in ["hpc", "collcost"] {
            let p = dir.join(side).join(b);
            std::fs::write(&p, "#!/bin/sh\nexit 0\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/collcost-abba.sh");
    for r in ["0", "-1", "x"] {
        let o = Command::new("bash")
            .arg(&script)
            .arg(dir.join("a"))
            .arg(dir.join("b"))
            .arg(r)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{r}: {err}");
        assert!(
            err.contains(&format!("rounds {r}: give a whole number of rounds")),
            "{r}: {err}"
        );
    }
}
