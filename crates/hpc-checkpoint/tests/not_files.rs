//! A checkpoint whose manifest or rank file was replaced by a FIFO or a device: each
//! is refused at once, naming the file, instead of waiting for a writer for ever.

use std::time::{Duration, Instant};

use hpc_checkpoint::{Checkpoint, Checkpoints, Error, MANIFEST};
use hpc_test_support::mkfifo;

/// A checkpoint of two ranks at step 7 in a fresh root, removed with the
/// returned guard (at the end of the test, and when it fails).
fn written(tag: &str) -> (hpc_test_support::TmpDir, Checkpoints) {
    let root = hpc_test_support::TmpDir::new("ckpt-notfile", tag);
    let set = Checkpoints::new(root.to_path_buf());
    let entries = (0..2u32)
        .map(|r| set.write_rank(7, r, 2, b"payload"))
        .collect::<Result<Vec<_>, Error>>()
        .unwrap();
    set.commit(7, 2, entries, serde_json::json!({})).unwrap();
    (root, set)
}

#[test]
fn a_rank_file_that_is_a_fifo_is_refused_at_once() {
    let (_root, set) = written("rank");
    let ck = Checkpoint::open(set.step_dir(7)).unwrap();
    mkfifo(&set.step_dir(7).join("rank-000001.ckpt"));
    let t = Instant::now();
    let e = ck.read_rank(1).unwrap_err().to_string();
    assert!(
        e.contains("rank-000001.ckpt") && e.contains("a FIFO, not a regular file"),
        "{e}"
    );
    let e = ck.verify().unwrap_err().to_string();
    assert!(e.contains("a FIFO"), "{e}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(ck.read_rank(0).unwrap(), b"payload");
}

#[test]
fn a_manifest_that_is_a_fifo_or_a_link_to_dev_zero_is_refused_at_once() {
    let (_root, set) = written("manifest");
    let manifest = set.step_dir(7).join(MANIFEST);
    mkfifo(&manifest);
    let t = Instant::now();
    let e = Checkpoint::open(set.step_dir(7)).unwrap_err().to_string();
    assert!(
        e.contains(MANIFEST) && e.contains("a FIFO, not a regular file"),
        "{e}"
    );
    std::fs::remove_file(&manifest).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &manifest).unwrap();
    let e = Checkpoint::open(set.step_dir(7)).unwrap_err().to_string();
    assert!(e.contains("a character device"), "{e}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    // The set skips it rather than hanging.
    assert!(set.latest().is_err());
}

/// A step whose manifest cannot be written (here its temporary name is taken by a
/// directory; a full disk fails the same write) is removed with its rank files:
/// no reader takes a step without a manifest, and nothing else removed them.
/// A step that was committed before keeps its files and manifest.
#[test]
fn a_step_whose_manifest_cannot_be_written_is_removed() {
    let root = hpc_test_support::TmpDir::unmade("ckpt", "nomanifest");
    let set = Checkpoints::new(&root);
    let entries: Vec<_> = (0..2u32)
        .map(|r| set.write_rank(3, r, 2, b"payload").unwrap())
        .collect();
    let blocker = |set: &Checkpoints, step: u64| {
        let mut name = set.step_dir(step).join(MANIFEST).into_os_string();
        name.push(format!(".tmp{}", std::process::id()));
        std::fs::create_dir_all(std::path::PathBuf::from(name)).unwrap();
    };
    blocker(&set, 3);
    assert!(set
        .commit(3, 2, entries.clone(), serde_json::json!({}))
        .is_err());
    assert!(!set.step_dir(3).exists(), "the uncommitted step was kept");
    let (_root, set) = written("recommit");
    let entries: Vec<_> = (0..2u32)
        .map(|r| set.write_rank(7, r, 2, b"payload").unwrap())
        .collect();
    blocker(&set, 7);
    assert!(set.commit(7, 2, entries, serde_json::json!({})).is_err());
    assert!(
        set.step_dir(7).join(MANIFEST).is_file(),
        "a committed step lost its manifest"
    );
}

/// A root whose path is longer than any the system takes is refused by every
/// call with the path cut (`hpc_io::message::path`): each quoted it whole,
/// a message of 100 KB.
#[test]
fn a_root_longer_than_any_path_is_cut_in_the_refusals() {
    let root = std::env::temp_dir().join("x".repeat(100_000));
    let set = Checkpoints::new(&root);
    let errors = [
        set.write_rank(1, 0, 1, b"x").unwrap_err(),
        set.latest().unwrap_err(),
        Checkpoint::open(&root).unwrap_err(),
        Checkpoint::open(set.step_dir(1)).unwrap_err(),
    ];
    for e in errors {
        let e = e.to_string();
        assert!(
            e.len() < 1000 && e.contains("more characters"),
            "{} bytes: {e:.300}",
            e.len()
        );
    }
}

/// A step's directory name taken by a regular file or a FIFO, and a root that
/// is a file or a device: the write said "cannot create …/step-0000000001: File
/// exists (os error 17)" or "…: Not a directory", not what is in the way. It
/// names the path and what it is, and nothing is written.
#[test]
fn a_step_or_root_that_is_not_a_directory_is_named_with_what_it_is() {
    let root = hpc_test_support::TmpDir::new("ckpt-notfile", "notdir");
    let set = Checkpoints::new(root.to_path_buf());
    std::fs::write(set.step_dir(1), "a file").unwrap();
    mkfifo(&set.step_dir(2));
    for (step, kind) in [(1, "a regular file"), (2, "a FIFO")] {
        let e = set.write_rank(step, 0, 1, b"x").unwrap_err().to_string();
        let dir = set.step_dir(step);
        assert!(
            e.contains(&format!("{} is {kind}, not a directory", dir.display())),
            "{e}"
        );
        let e = set.write_file(step, "extra", b"x").unwrap_err().to_string();
        assert!(e.contains(&format!("is {kind}, not a directory")), "{e}");
    }
    std::fs::write(root.join("afile"), "x").unwrap();
    for (path, kind) in [
        (root.join("afile"), "a regular file"),
        ("/dev/null".into(), "a character device"),
    ] {
        let e = Checkpoints::new(&path)
            .write_rank(1, 0, 1, b"x")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("{} is {kind}, not a directory", path.display())),
            "{e}"
        );
    }
}
