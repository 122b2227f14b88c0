//! A path in a refusal is shown whole unless no call could use it.

use hpc_io::rundir::{FileClaim, RunDir, RunInfo};

/// A path of 100,000 characters, which the system refuses (ENAMETOOLONG), was
/// echoed whole in every refusal of it: opening it, writing it, claiming it,
/// making a run directory of it.
#[test]
fn a_path_longer_than_any_is_cut_in_the_refusal() {
    let dir = hpc_test_support::TmpDir::new("hpc-io", "long-path");
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

/// A path holding a control character (a line break, a terminal's escape: a
/// file may be named so) is quoted and escaped in a refusal, as
/// `hpc_env::short` shows a value: it was written as it is, breaking the
/// message's line or clearing the terminal.
#[test]
fn a_path_with_a_control_character_is_quoted_escaped() {
    let dir = hpc_test_support::TmpDir::unmade("hpc-io", "control");
    let odd = dir.join("a\nb\u{1b}[2J");
    let e = hpc_io::read::read_regular(&odd, 10)
        .unwrap_err()
        .to_string();
    assert!(!e.chars().any(char::is_control), "{e:?}");
    assert!(e.contains("a\\nb\\u{1b}[2J\""), "{e}");
    assert_eq!(
        hpc_io::message::path(std::path::Path::new("/tmp/plain")),
        "/tmp/plain"
    );
}

/// The run directory's refusals show their paths as every refusal does: a
/// directory held by another run, and a link another user planted whose
/// target holds a line break and a terminal's escape, were written as they
/// are (`Busy`, `ForeignLink`, and `LockFile`, `Foreign`, `OtherProgram`
/// alike).
#[test]
fn run_directory_refusals_show_paths_quoted_escaped() {
    let base = hpc_test_support::TmpDir::new("hpc-io", "odd-run");
    let odd = base.join("run\n\u{1b}[2J");
    let first = RunDir::create(&odd, RunInfo::new("p")).unwrap();
    let e = RunDir::create(&odd, RunInfo::new("p"))
        .unwrap_err()
        .to_string();
    assert!(!e.chars().any(char::is_control), "{e:?}");
    assert!(e.contains("run\\n\\u{1b}[2J\""), "{e}");
    drop(first);
    // A link planted by another user (as root: its owner changed to 65534).
    if rustix::process::geteuid().is_root() {
        let link = base.join("planted");
        std::os::unix::fs::symlink("/tmp/\u{1b}[2J\nelsewhere", &link).unwrap();
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
        let e = RunDir::create(&link, RunInfo::new("p"))
            .unwrap_err()
            .to_string();
        assert!(!e.chars().any(char::is_control), "{e:?}");
        assert!(e.contains("made by user 65534"), "{e}");
    }
    std::fs::remove_dir_all(&base).unwrap();
}
