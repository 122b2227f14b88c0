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
