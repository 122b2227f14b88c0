//! Names a run directory refuses, as an application gives them.

use hpc_io::rundir::{FileClaim, RunDir, RunInfo};
use std::path::Path;

/// A refused output name of 100,000 characters was echoed whole in the error
/// (`record`, `write_atomic`, `record_path`, `FileClaim::take` of a path with no
/// file name).
#[test]
fn a_long_refused_name_is_cut_in_the_error() {
    let d = hpc_test_support::TmpDir::new("hpc-io", "long-name");
    let mut run = RunDir::create(d.join("out"), RunInfo::new("p")).unwrap();
    let slashes = "x/".repeat(50_000);
    let outside = format!("/{}", "z".repeat(100_000));
    let dots = format!("{}/..", "d".repeat(100_000));
    let errors = [
        run.record(&slashes).unwrap_err(),
        run.write_atomic(&slashes, b"x").unwrap_err(),
        run.record_path(Path::new(&outside)).unwrap_err(),
        FileClaim::take(Path::new(&dots), "h").unwrap_err(),
    ];
    for e in errors {
        let e = e.to_string();
        assert!(
            e.len() < 500
                && e.contains("is not a plain file name")
                && e.contains("more characters"),
            "{} bytes: {}",
            e.len(),
            &e[..200.min(e.len())]
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// A file named as the directory's temporaries are (`.NAME.tmp-PID`) is
/// refused: `.run.json.tmp-PID` written by the caller was taken by the next
/// manifest write (renamed to `run.json`, the caller's bytes gone), and
/// `.OUT.tmp-PID` of an output `OUT` was removed by the start as a leftover
/// temporary. Names that only look alike stay (`.x.tmp-`, `.x.tmp-12a`,
/// `x.tmp-1`).
#[test]
fn a_name_of_the_directory_s_temporaries_is_refused() {
    let d = hpc_test_support::TmpDir::new("hpc-io", "tmp-name");
    let mut info = RunInfo::new("p");
    info.outputs = vec!["spikes.spk".into()];
    let mut run = RunDir::create(d.join("out"), info).unwrap();
    let pid = std::process::id();
    for name in [
        format!(".run.json.tmp-{pid}"),
        format!(".spikes.spk.tmp-{pid}"),
        ".a.tmp-1".to_string(),
    ] {
        let e = run.write_atomic(&name, b"mine").unwrap_err().to_string();
        assert!(e.contains("is not a plain file name"), "{name}: {e}");
        assert!(e.contains("temporar"), "{name}: {e}");
        assert!(!d.join("out").join(&name).exists(), "{name}");
    }
    for name in [".x.tmp-", ".x.tmp-12a", "x.tmp-1"] {
        run.write_atomic(name, b"mine").unwrap();
        run.write_atomic("other", b"o").unwrap();
        assert_eq!(
            std::fs::read(d.join("out").join(name)).unwrap(),
            b"mine",
            "{name}"
        );
    }
    run.finish(hpc_io::rundir::Status::Complete).unwrap();
}
