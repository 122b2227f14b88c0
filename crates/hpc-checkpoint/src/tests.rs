use super::*;
use crate::file::{check_name, is_temporary, Header};
use crate::manifest::parse_manifest;
use hpc_test_support::TmpDir;
use proptest::prelude::*;
use std::fs;
use std::path::Path;

/// A checkpoint set in a fresh, empty `ckpt-<pid>-<n>-<tag>` under the
/// temporary directory, removed with everything in it when the guard is
/// dropped, also when the test fails.
fn fresh_set(tag: &str) -> (TmpDir, Checkpoints) {
    let root = TmpDir::new("ckpt", tag);
    let set = Checkpoints::new(root.to_path_buf());
    (root, set)
}

/// Writes and commits step `step` of a one-rank run, its payload `payload`.
fn commit_one(set: &Checkpoints, step: u64, payload: &[u8]) {
    let e = set.write_rank(step, 0, 1, payload).unwrap();
    set.commit(step, 1, [e], serde_json::json!({})).unwrap();
}

#[test]
fn header_roundtrips() {
    let h = Header {
        kind: KIND_RANK,
        step: 3000,
        rank: 7,
        ranks: 9,
        payload_len: 12345,
    };
    assert_eq!(Header::decode(&h.encode()), Ok(h));
    assert!(Header::decode(&h.encode()[..39]).is_err());
}

#[test]
fn only_canonical_step_names_are_steps() {
    // `step-10` is not the directory of step 10 (`step-0000000010`): listing it
    // as step 10 then failed with "No such file" for a directory that exists.
    let (root, set) = fresh_set("names");
    for name in [
        "step-10",
        "step-00000000020",
        "step-",
        "step-x",
        "step-0000000030",
    ] {
        fs::create_dir_all(root.join(name)).unwrap();
    }
    fs::create_dir_all(set.step_dir(12345678901)).unwrap();
    assert_eq!(set.steps().unwrap(), vec![30, 12345678901]);
}

#[test]
fn temporaries_of_interrupted_writes_are_removed_at_the_next_commit() {
    let (_root, set) = fresh_set("tmp");
    // An interrupted checkpoint of step 10: a rank file and the manifest's
    // temporary, no manifest.
    let e = set.write_rank(10, 0, 1, b"ten").unwrap();
    let left = [
        set.step_dir(10).join("manifest.json.tmp4242"),
        set.step_dir(10).join("rank-000000.ckpt.tmp17"),
    ];
    for p in &left {
        fs::write(p, b"partial").unwrap();
    }
    let later = set.step_dir(30).join("rank-000000.ckpt.tmp99");
    fs::create_dir_all(set.step_dir(30)).unwrap();
    fs::write(&later, b"another step's write").unwrap();
    drop(e);
    let e = set.write_rank(20, 0, 1, b"twenty").unwrap();
    set.commit(20, 1, [e], serde_json::json!({})).unwrap();
    for p in &left {
        assert!(!p.exists(), "{} is left", p.display());
    }
    // A later step's write may be under way: left alone.
    assert!(later.exists());
    assert!(set.step_dir(10).join("rank-000000.ckpt").exists());
    assert!(is_temporary("manifest.json.tmp1") && !is_temporary("a.tmp") && !is_temporary(".tmp1"));
}

#[test]
fn pruning_keeps_the_newest_of_this_runs_checkpoints_only() {
    let (_root, set) = fresh_set("prune");
    let write = |step: u64| commit_one(&set, step, b"x");
    // Another run's checkpoint, newer than all of this run's.
    write(9000);
    let mut written = Vec::new();
    for step in (100..=600).step_by(100) {
        write(step);
        written.push(step);
        set.prune(&mut written, 3).unwrap();
        assert!(written.len() <= 3);
    }
    assert_eq!(written, [400, 500, 600]);
    assert_eq!(set.steps().unwrap(), [400, 500, 600, 9000]);
    // keep 0 is taken as 1: the newest is never removed.
    assert_eq!(set.prune(&mut written, 0).unwrap(), [400, 500]);
    assert_eq!(set.steps().unwrap(), [600, 9000]);
}

#[test]
fn names_are_checked() {
    for bad in ["", ".hidden", "a/b", "rank-1", "manifest", "x y"] {
        assert!(check_name(bad).is_err(), "{bad:?}");
    }
    check_name("spikes.spk").unwrap();
    // A long name is shown cut (100,000 characters were echoed whole).
    let e = check_name(&"n".repeat(100_000)).unwrap_err().to_string();
    assert!(e.len() < 300 && e.contains("more characters"), "{e}");
}

/// The newest checkpoint is kept whatever the order of the list (`[5, 1, 1, 3]`
/// keeping one removed 5, the newest, and counted 1 twice).
#[test]
fn pruning_keeps_the_newest_whatever_the_order_of_the_list() {
    let (_root, set) = fresh_set("prune-order");
    for step in [1, 3, 5] {
        commit_one(&set, step, b"x");
    }
    let mut written = vec![5, 1, 1, 3];
    assert_eq!(set.prune(&mut written, 1).unwrap(), [1, 3]);
    assert_eq!(written, [5]);
    assert_eq!(set.steps().unwrap(), [5]);
}

/// A header whose payload length is near `u64::MAX` is refused as damaged
/// (the sum with the header's length overflowed: a panic in debug builds).
#[test]
fn a_payload_length_near_u64_max_is_a_damaged_header() {
    let (_root, set) = fresh_set("payload-max");
    commit_one(&set, 1, b"abcdef");
    let path = set.step_dir(1).join(crate::file::rank_file_name(0));
    let mut bytes = fs::read(&path).unwrap();
    let mut h = Header::decode(&bytes[..HEADER_LEN]).unwrap();
    h.payload_len = u64::MAX;
    bytes[..HEADER_LEN].copy_from_slice(&h.encode());
    fs::write(&path, &bytes).unwrap();
    let e = Checkpoint::open(set.step_dir(1))
        .unwrap()
        .read_rank(0)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("announces 18446744073709551615 payload bytes"),
        "{e}"
    );
}

proptest! {
    #[test]
    fn manifest_parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_manifest(Path::new("m.json"), &bytes);
    }

    #[test]
    fn header_decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = Header::decode(&bytes);
    }
}

/// A write that fails (here its source; on a full disk, the file system) leaves no
/// empty step directory behind, and none of another rank's files is touched.
#[test]
fn a_failed_write_leaves_no_empty_step_directory() {
    struct Failing;
    impl std::io::Read for Failing {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("the device is full"))
        }
    }
    let (_root, set) = fresh_set("fail");
    assert!(set.write_rank_from(5, 0, 2, 8, &mut Failing).is_err());
    assert!(set.write_file_from(5, "spikes", 8, &mut Failing).is_err());
    assert!(!set.step_dir(5).exists(), "an empty step-* is left");
    let other = set.write_rank(6, 1, 2, b"rank one").unwrap();
    assert!(set.write_rank_from(6, 0, 2, 8, &mut Failing).is_err());
    assert!(set.step_dir(6).join(&other.name).exists());
}

/// A symbolic link planted at a step directory's name is refused, naming it, and
/// nothing is written into the directory it points to (the checkpoint was written
/// through it).
#[test]
fn a_link_planted_at_a_step_directory_is_not_followed() {
    let base = TmpDir::new("ckpt", "link");
    let (root, elsewhere) = (base.join("set"), base.join("elsewhere"));
    fs::create_dir_all(&root).unwrap();
    fs::create_dir_all(&elsewhere).unwrap();
    let set = Checkpoints::new(&root);
    std::os::unix::fs::symlink(&elsewhere, set.step_dir(7)).unwrap();
    for r in [
        set.write_rank(7, 0, 1, b"payload").map(|_| ()),
        set.write_file(7, "spikes", b"payload").map(|_| ()),
    ] {
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("symbolic link") && e.contains("step-0000000007"),
            "{e}"
        );
    }
    assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
}

/// A checkpoint root that is a link another user planted is refused, nothing
/// written where it points (a run's checkpoints went there unseen); the user's
/// own link is followed.
#[test]
fn a_root_that_is_a_link_of_another_user_is_refused() {
    use rustix::fs::{chownat, AtFlags, Gid, Uid, CWD};
    let (base, _) = fresh_set("root-link");
    let target = base.join("target");
    fs::create_dir_all(&target).unwrap();
    let root = base.join("ck");
    std::os::unix::fs::symlink(&target, &root).unwrap();
    let set = Checkpoints::new(&root);
    commit_one(&set, 1, b"x");
    assert!(target.join("step-0000000001").is_dir());
    fs::remove_dir_all(&target).unwrap();
    fs::create_dir(&target).unwrap();
    let nobody = (Some(Uid::from_raw(65534)), Some(Gid::from_raw(65534)));
    match chownat(CWD, &root, nobody.0, nobody.1, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(()) => {
            let e = set.write_rank(2, 0, 1, b"x").unwrap_err().to_string();
            assert!(
                e.contains("symbolic link") && e.contains("user 65534"),
                "{e}"
            );
            assert_eq!(fs::read_dir(&target).unwrap().count(), 0);
        }
        Err(e) => eprintln!("the link's owner kept ({e}): the planted case not run"),
    }
}

#[test]
fn a_manifest_that_cannot_be_opened_is_no_incomplete_checkpoint() {
    // A loop of links where the manifest should be: not "incomplete" (which
    // says that the manifest is missing) but the error of opening it.
    let (_root, set) = fresh_set("loop");
    let dir = set.step_dir(5);
    fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink("manifest.json", dir.join("manifest.json")).unwrap();
    let err = Checkpoint::open(&dir).unwrap_err();
    assert!(!matches!(err, Error::Incomplete { .. }), "{err}");
    assert!(err.to_string().contains("manifest.json"), "{err}");
}

#[test]
fn only_a_name_of_digits_is_compared_with_the_manifests_step() {
    // `step-+7` is no step's name (a sign is not a digit, though `u64`'s
    // parser takes it): it may hold any step; `step-0000000007` must hold 7.
    let (root, set) = fresh_set("plus");
    commit_one(&set, 5, b"five");
    let plus = root.join("step-+7");
    fs::rename(set.step_dir(5), &plus).unwrap();
    assert_eq!(Checkpoint::open(&plus).unwrap().step(), 5);
    fs::rename(&plus, set.step_dir(7)).unwrap();
    assert!(Checkpoint::open(set.step_dir(7)).is_err());
}

#[test]
fn pruning_passes_over_a_directory_gone_and_reports_one_it_cannot_remove() {
    let (_root, set) = fresh_set("prune-gone");
    let write = |step: u64| commit_one(&set, step, b"x");
    for step in [100, 200, 300] {
        write(step);
    }
    // Removed by hand meanwhile: nothing left to do for it.
    fs::remove_dir_all(set.step_dir(100)).unwrap();
    let mut written = vec![100, 200, 300];
    assert_eq!(set.prune(&mut written, 2).unwrap(), [100]);
    // A file where step 200's directory was: not removed, and said so.
    fs::remove_dir_all(set.step_dir(200)).unwrap();
    fs::write(set.step_dir(200), b"not a directory").unwrap();
    write(400);
    written.push(400);
    let err = set.prune(&mut written, 2).unwrap_err();
    assert!(err.to_string().contains("step-"), "{err}");
    assert!(set.step_dir(200).is_file());
}

#[test]
fn the_temporaries_removed_are_counted() {
    let (_root, set) = fresh_set("tmp-count");
    let dir = set.step_dir(10);
    fs::create_dir_all(&dir).unwrap();
    for name in [
        "manifest.json.tmp1",
        "rank-000000.ckpt.tmp2",
        "rank-000001.ckpt.tmp3",
    ] {
        fs::write(dir.join(name), b"partial").unwrap();
    }
    fs::write(dir.join("rank-000000.ckpt"), b"kept").unwrap();
    assert_eq!(set.remove_temporaries(10), 3);
    assert_eq!(set.remove_temporaries(10), 0, "none left");
    assert!(dir.join("rank-000000.ckpt").exists());
}

/// A manifest edited by hand with its checksum recomputed, a field 100,000
/// characters long (the format, a file's name or checksum): the message and the
/// warning cut it (they were over 100 KB each).
#[test]
fn a_forged_manifests_long_fields_are_cut_in_the_message() {
    let (root, set) = fresh_set("long-fields");
    commit_one(&set, 7, b"payload");
    let dir = root.join("step-0000000007");
    let path = dir.join(MANIFEST);
    let long = "x".repeat(100_000);
    let original = parse_manifest(&path, &fs::read(&path).unwrap()).unwrap();
    for edit in [
        &(|m: &mut Manifest| m.format = long.clone()) as &dyn Fn(&mut Manifest),
        &|m: &mut Manifest| m.files[0].name = long.clone(),
    ] {
        let mut m = original.clone();
        edit(&mut m);
        m.manifest_crc32c = "00000000".into();
        fs::write(&path, crate::manifest::manifest_text(&m)).unwrap();
        let e = Checkpoint::open(&dir).unwrap_err().to_string();
        assert!(
            e.len() < 1000 && e.contains("more characters"),
            "{}",
            &e[..300]
        );
    }
}

/// A payload longer than announced was read to its end before its length was
/// checked: one that never ends (a pipe, `/dev/zero`) filled the disk. At most
/// a byte more than announced is read, and no file is left.
#[test]
fn a_payload_longer_than_announced_is_refused_without_reading_it_all() {
    struct Endless(u64);
    impl std::io::Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            assert!(
                self.0 < 64 << 20,
                "read {} bytes of a 10-byte payload",
                self.0
            );
            buf.fill(7);
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
    }
    let (_root, set) = fresh_set("endless");
    let mut endless = Endless(0);
    let e = set
        .write_rank_from(1, 0, 1, 10, &mut endless)
        .unwrap_err()
        .to_string();
    assert!(e.contains("longer than the 10 bytes announced"), "{e}");
    assert!(endless.0 <= 11, "read {} bytes", endless.0);
    let e = set
        .write_rank_from(1, 0, 1, 10, &mut &[1u8; 4][..])
        .unwrap_err()
        .to_string();
    assert!(e.contains("the payload was 4 bytes, announced 10"), "{e}");
    assert!(set.steps().unwrap().is_empty(), "a step directory was left");
}
