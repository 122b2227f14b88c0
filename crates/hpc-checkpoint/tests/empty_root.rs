//! A checkpoint set at an empty path, alone in its test binary: it changes the
//! process's current directory, which an empty root was taken to mean.

use hpc_checkpoint::{Checkpoints, Error, FileEntry};

/// `Checkpoints::new("")` pruned and committed the `step-*` directories of the
/// current directory (`"".join("step-…")` is a relative path), while its reads
/// and writes refuse an empty root: pruning removed a directory of that name
/// wherever the program ran, and a commit wrote a manifest there. Both are
/// refused, naming the empty path, and nothing in the current directory is
/// touched.
#[test]
fn an_empty_root_prunes_and_commits_nothing_in_the_current_directory() {
    let here = hpc_test_support::tmppath("hpc-ckpt-empty-root", "cwd");
    let step1 = here.join("step-0000000001");
    let step2 = here.join("step-0000000002");
    std::fs::create_dir_all(&step1).unwrap();
    std::fs::create_dir_all(&step2).unwrap();
    std::fs::write(step1.join("precious"), b"x").unwrap();
    std::fs::write(step2.join("rank-000000.ckpt"), b"state").unwrap();
    std::env::set_current_dir(&here).unwrap();
    let set = Checkpoints::new("");
    let mut written = vec![1, 2];
    let e = set.prune(&mut written, 1).unwrap_err().to_string();
    assert!(e.contains("\"\"") && e.contains("an empty path"), "{e}");
    assert!(step1.join("precious").exists());
    let entry = FileEntry {
        name: "rank-000000.ckpt".into(),
        rank: Some(0),
        size: 5,
        crc32c: 0,
    };
    let e = set
        .commit(2, 1, [entry], serde_json::json!({}))
        .unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    assert!(e.to_string().contains("an empty path"), "{e}");
    assert!(!step2.join("manifest.json").exists());
    assert_eq!(set.remove_temporaries(2), 0);
    std::env::set_current_dir("/").unwrap();
    std::fs::remove_dir_all(&here).unwrap();
}
