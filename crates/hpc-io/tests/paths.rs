//! A path in a refusal is shown whole unless no call could use it.

use hpc_io::rundir::{FileClaim, RunDir, RunInfo};

/// A path of 100,000 characters, which the system refuses (ENAMETOOLONG), was
/// echoed whole in every refusal of it: opening it, writing it, claiming it,
/// making a run directory of it.
#[test]
fn a_path_longer_than_any_is_cut_in_the_refusal() {
    let dir = std::env::temp_dir().join(format!("hpc-io-long-path-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let long = dir.join("q".repeat(100_000));
    let errors = [
        hpc_io::read::read_regular(&long, 10)
            .unwrap_err()
            .to_string(),
        hpc_io::atomic::write(&long, &dir.join("tmp"), b"x")
            .unwrap_err()
            .to_string(),
        FileClaim::take(&long, "me").unwrap_err().to_string(),
        RunDir::create(&long, RunInfo::new("p"))
            .unwrap_err()
            .to_string(),
    ];
    for e in errors {
        assert!(
            e.len() < 1000 && e.contains("more characters"),
            "{} bytes: {}",
            e.len(),
            &e[..200]
        );
    }
    // A path the system takes is shown whole.
    let short = dir.join("missing");
    let e = hpc_io::read::read_regular(&short, 10)
        .unwrap_err()
        .to_string();
    assert!(e.contains(&short.display().to_string()), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
