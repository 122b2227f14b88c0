//! Damaged, mixed-up and interrupted checkpoints, made by the tests: each is refused
//! with the file and the problem named, and `latest` falls back past it with a
//! warning.

mod common;

use std::path::Path;

use common::tmpdir;
use hpc_checkpoint::{Checkpoint, Checkpoints, Error, FileEntry};

/// A checkpoint of `ranks` ranks at `step` with a named file; payloads differ per
/// rank and step.
fn write(set: &Checkpoints, step: u64, ranks: u32) -> Vec<FileEntry> {
    let mut entries: Vec<FileEntry> = (0..ranks)
        .map(|r| {
            let payload: Vec<u8> = (0..1000 + r * 10)
                .map(|i| (i as u64 * 31 + step + r as u64) as u8)
                .collect();
            set.write_rank(step, r, ranks, &payload).unwrap()
        })
        .collect();
    entries.push(
        set.write_file(step, "spikes", format!("spikes up to {step}").as_bytes())
            .unwrap(),
    );
    set.commit(
        step,
        ranks,
        entries.clone(),
        serde_json::json!({ "step": step, "t_ms": step as f64 * 0.1 }),
    )
    .unwrap();
    entries
}

fn flip(path: &Path, at: usize) {
    let mut b = std::fs::read(path).unwrap();
    let i = at.min(b.len() - 1);
    b[i] ^= 0x10;
    std::fs::write(path, b).unwrap();
}

fn verify_err(dir: &Path) -> Error {
    Checkpoint::open(dir)
        .and_then(|c| c.verify())
        .expect_err("verification should fail")
}

#[test]
fn a_checkpoint_reads_back_what_was_written() {
    let root = tmpdir("roundtrip");
    let set = Checkpoints::new(&root);
    write(&set, 3000, 3);
    let ck = set.latest().unwrap();
    assert_eq!((ck.step(), ck.ranks()), (3000, 3));
    assert_eq!(ck.metadata()["t_ms"], 300.0);
    for r in 0..3u32 {
        let p = ck.read_rank(r).unwrap();
        assert_eq!(p.len(), 1000 + r as usize * 10);
        assert_eq!(p[1], (31 + 3000 + r as u64) as u8);
    }
    assert_eq!(
        ck.read_file("spikes").unwrap().unwrap(),
        b"spikes up to 3000"
    );
    assert_eq!(ck.read_file("other").unwrap(), None);
    assert!(ck.read_rank(3).is_err());
    // Nothing temporary is left behind.
    let names: Vec<String> = std::fs::read_dir(set.step_dir(3000))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains(".tmp")), "{names:?}");
    assert_eq!(names.len(), 5, "{names:?}");
}

#[test]
fn a_flipped_byte_is_caught_and_named() {
    let root = tmpdir("flip");
    let set = Checkpoints::new(&root);
    write(&set, 100, 2);
    let file = set.step_dir(100).join("rank-000001.ckpt");
    flip(&file, 500);
    let e = verify_err(&set.step_dir(100));
    assert!(matches!(e, Error::Checksum { .. }), "{e}");
    assert!(e.to_string().contains("rank-000001.ckpt"), "{e}");
    // Reading only rank 0 is fine; reading rank 1 is refused.
    let ck = Checkpoint::open(set.step_dir(100)).unwrap();
    ck.read_rank(0).unwrap();
    assert!(matches!(ck.read_rank(1), Err(Error::Checksum { .. })));
}

#[test]
fn a_truncated_file_is_caught_and_named() {
    let root = tmpdir("trunc");
    let set = Checkpoints::new(&root);
    write(&set, 100, 2);
    let file = set.step_dir(100).join("spikes.ckpt");
    let b = std::fs::read(&file).unwrap();
    std::fs::write(&file, &b[..b.len() - 5]).unwrap();
    let e = verify_err(&set.step_dir(100));
    assert!(matches!(e, Error::Size { .. }), "{e}");
    let s = e.to_string();
    assert!(s.contains("spikes.ckpt") && s.contains("truncated"), "{s}");
}

#[test]
fn rank_files_of_another_step_are_caught() {
    // The manifest of step 2000 lists files that hold step 3000 (copied over from the
    // later checkpoint, sizes and checksums and all).
    let root = tmpdir("steps");
    let set = Checkpoints::new(&root);
    let later = write(&set, 3000, 2);
    let dir = set.step_dir(2000);
    std::fs::create_dir_all(&dir).unwrap();
    for f in &later {
        std::fs::copy(set.step_dir(3000).join(&f.name), dir.join(&f.name)).unwrap();
    }
    set.commit(2000, 2, later, serde_json::json!({})).unwrap();
    let e = verify_err(&dir);
    let s = e.to_string();
    assert!(matches!(e, Error::Header { .. }), "{s}");
    assert!(
        s.contains("step 3000") && s.contains("step 2000") && s.contains(".ckpt"),
        "{s}"
    );
}

#[test]
fn a_rank_file_under_another_ranks_name_is_caught() {
    let root = tmpdir("swap");
    let set = Checkpoints::new(&root);
    let mut entries = write(&set, 100, 2);
    let dir = set.step_dir(100);
    // Rank 1's bytes under rank 0's name, with a manifest that believes it.
    std::fs::copy(dir.join("rank-000001.ckpt"), dir.join("rank-000000.ckpt")).unwrap();
    let one = entries[1].clone();
    entries[0].size = one.size;
    entries[0].crc32c = one.crc32c;
    set.commit(100, 2, entries, serde_json::json!({})).unwrap();
    let s = verify_err(&dir).to_string();
    assert!(
        s.contains("rank-000000.ckpt") && s.contains("holds rank 1"),
        "{s}"
    );
}

#[test]
fn a_missing_rank_file_is_caught() {
    let root = tmpdir("missing");
    let set = Checkpoints::new(&root);
    write(&set, 100, 3);
    std::fs::remove_file(set.step_dir(100).join("rank-000002.ckpt")).unwrap();
    let e = verify_err(&set.step_dir(100));
    assert!(matches!(e, Error::Missing { .. }), "{e}");
    assert!(e.to_string().contains("rank-000002.ckpt"));
}

#[test]
fn an_edited_manifest_is_caught() {
    let root = tmpdir("edit");
    let set = Checkpoints::new(&root);
    write(&set, 3000, 2);
    let m = set.step_dir(3000).join("manifest.json");
    let text = std::fs::read_to_string(&m).unwrap();
    std::fs::write(&m, text.replace("\"step\": 3000", "\"step\": 2000")).unwrap();
    let e = Checkpoint::open(set.step_dir(3000)).unwrap_err();
    let s = e.to_string();
    assert!(matches!(e, Error::Manifest { .. }), "{s}");
    assert!(
        s.contains("manifest.json") && s.contains("edited or damaged"),
        "{s}"
    );
    std::fs::write(&m, "{ not json").unwrap();
    assert!(matches!(
        Checkpoint::open(set.step_dir(3000)),
        Err(Error::Manifest { .. })
    ));
}

/// Pass 9: a step directory holding another step's checkpoint (moved, or a
/// manifest forged with its checksum) was opened as that other step, and the
/// application then advised a `--t-sim` for a step no run reaches.
#[test]
fn a_manifest_of_another_step_than_its_directory_is_caught() {
    let root = tmpdir("moved");
    let set = Checkpoints::new(&root);
    write(&set, 3000, 1);
    std::fs::rename(set.step_dir(3000), set.step_dir(4000)).unwrap();
    let e = Checkpoint::open(set.step_dir(4000)).unwrap_err();
    let s = e.to_string();
    assert!(matches!(e, Error::Manifest { .. }), "{s}");
    assert!(
        s.contains("step 3000") && s.contains("step-0000004000"),
        "{s}"
    );
    // A directory of another name is the caller's: opened.
    let other = root.join("kept");
    std::fs::rename(set.step_dir(4000), &other).unwrap();
    assert_eq!(Checkpoint::open(&other).unwrap().step(), 3000);
}

#[test]
fn commit_needs_every_rank() {
    let root = tmpdir("commit");
    let set = Checkpoints::new(&root);
    let e0 = set.write_rank(10, 0, 2, b"zero").unwrap();
    let e = set
        .commit(10, 2, vec![e0.clone()], serde_json::json!({}))
        .unwrap_err();
    assert!(e.to_string().contains("rank 1"), "{e}");
    assert!(matches!(
        Checkpoint::open(set.step_dir(10)),
        Err(Error::Incomplete { .. })
    ));
    assert!(set.write_rank(10, 2, 2, b"x").is_err());
    assert!(set.write_file(10, "../escape", b"x").is_err());
}

#[test]
fn latest_falls_back_with_a_warning() {
    let root = tmpdir("fallback");
    let set = Checkpoints::new(&root);
    write(&set, 1000, 2);
    write(&set, 2000, 2);
    write(&set, 3000, 2);
    // 3000: damaged; 2000: fine. A half-written 4000 (no manifest) is newer still.
    flip(&set.step_dir(3000).join("rank-000000.ckpt"), 100);
    set.write_rank(4000, 0, 2, b"half").unwrap();
    let (ck, rejected, text) = common::latest_logged(&set);
    assert_eq!(ck.step(), 2000);
    assert_eq!(
        rejected.iter().map(|r| r.step).collect::<Vec<_>>(),
        vec![4000, 3000]
    );
    assert!(matches!(*rejected[0].error, Error::Incomplete { .. }));
    assert!(matches!(*rejected[1].error, Error::Checksum { .. }));
    assert!(
        text.contains("WARN")
            && text.contains("rank-000000.ckpt")
            && text.contains("step-0000004000"),
        "{text}"
    );
    // When nothing verifies, the error says why for each.
    flip(&set.step_dir(2000).join("spikes.ckpt"), 45);
    flip(&set.step_dir(1000).join("rank-000001.ckpt"), 45);
    let e = set.latest().unwrap_err();
    let s = e.to_string();
    assert!(matches!(e, Error::NoneValid { .. }), "{s}");
    for needle in [
        "step 4000",
        "step 3000",
        "step 2000",
        "step 1000",
        "spikes.ckpt",
    ] {
        assert!(s.contains(needle), "{needle}: {s}");
    }
    std::fs::remove_dir_all(&root).unwrap();
    assert!(matches!(set.latest(), Err(Error::NotFound { .. })));
}

/// An empty root (a path from an empty setting) is named as one: the message
/// said "no checkpoint in  (no step-* directory)", naming nothing. A checkpoint
/// at an empty path is not the one in the current directory, and writing
/// into an empty root is refused naming it.
#[test]
fn an_empty_root_is_named_as_one() {
    let set = Checkpoints::new("");
    let e = set.latest().unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "no checkpoint in \"\": an empty path names no directory"
    );
    let root = tmpdir("named-root");
    let e = Checkpoints::new(&root).latest().unwrap_err().to_string();
    assert_eq!(
        e,
        format!("no checkpoint in {} (no step-* directory)", root.display())
    );
    let e = Checkpoint::open("").unwrap_err().to_string();
    assert_eq!(
        e,
        "cannot open the checkpoint directory \"\": an empty path names no directory"
    );
    let e = set.write_rank(5, 0, 1, b"state").unwrap_err().to_string();
    assert!(e.contains("\"\"") && e.contains("an empty path"), "{e}");
}

#[test]
fn a_write_that_fails_leaves_no_file_and_names_it() {
    let root = tmpdir("fail");
    let set = Checkpoints::new(&root);
    // The step directory's place is taken by a file: nothing can be created in it.
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(set.step_dir(5), b"not a directory").unwrap();
    let e = set.write_rank(5, 0, 1, b"state").unwrap_err();
    assert!(e.to_string().contains("step-0000000005"), "{e}");
    // A payload reader that fails half-way: the temporary file is removed.
    struct Broken(usize);
    impl std::io::Read for Broken {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            if self.0 == 0 {
                return Err(std::io::Error::other("source went away"));
            }
            let n = b.len().min(self.0);
            self.0 -= n;
            Ok(n)
        }
    }
    let e = set
        .write_file_from(6, "big", 1 << 20, &mut Broken(1000))
        .unwrap_err();
    assert!(e.to_string().contains("big.ckpt"), "{e}");
    // Nothing is left: neither the temporary file nor the step directory the
    // failed write created (an empty step would read as a checkpoint in progress).
    assert!(!set.step_dir(6).exists(), "{:?}", set.step_dir(6));
}

/// The log names a checkpoint's files as its refusals do: a root named with
/// a line break and a terminal's escape reached the log as it is (the
/// removal of an interrupted write's temporary file, of an older checkpoint).
#[test]
fn the_log_shows_odd_paths_quoted_escaped() {
    let dir = common::tmpdir("odd");
    let root = dir.join("ck\n\u{1b}[2J");
    let set = Checkpoints::new(&root);
    let e = set.write_rank(1, 0, 1, b"x").unwrap();
    set.commit(1, 1, vec![e], serde_json::json!({})).unwrap();
    std::fs::write(set.step_dir(1).join("rank-000000.ckpt.tmp123"), b"left").unwrap();
    let (removed, log) = common::logged(|| set.remove_temporaries(1));
    assert_eq!(removed, 1);
    assert!(log.contains("ck\\n\\u{1b}[2J"), "{log:?}");
    assert!(!log.contains('\u{1b}'), "{log:?}");
}
