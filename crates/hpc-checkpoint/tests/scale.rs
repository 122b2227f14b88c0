//! Checkpoints at the sizes of large jobs, and commits refused before they
//! write: what the reader would refuse is not written.

use hpc_checkpoint::{
    rank_file_name, Checkpoint, Checkpoints, Error, FileEntry, FORMAT, FORMAT_VERSION,
    LISTED_REJECTIONS, MANIFEST,
};

/// A path under the system's temporary directory, unique to this process and
/// call, with nothing there, removed with what the test made there when dropped
/// (also when the test fails).
fn tmpdir(tag: &str) -> hpc_test_support::TmpDir {
    hpc_test_support::TmpDir::unmade("hpc-ckpt-test", tag)
}

/// A sealed manifest of step 1 listing `ranks` rank files, in `dir`.
fn manifest_of(dir: &std::path::Path, ranks: u32) {
    std::fs::create_dir_all(dir).unwrap();
    let files: Vec<String> = (0..ranks)
        .map(|r| {
            format!(
                r#"{{"name":"{}","rank":{r},"size":40,"crc32c":"00000000"}}"#,
                rank_file_name(r)
            )
        })
        .collect();
    let field = "\"manifest_crc32c\": \"00000000\"";
    let text = format!(
        "{{\"format\":\"{FORMAT}\",\"version\":{FORMAT_VERSION},\"step\":1,\"ranks\":{ranks},\
         \"files\":[{}],\"metadata\":null,{field}}}\n",
        files.join(",")
    );
    let crc = crc32c::crc32c(text.as_bytes());
    let text = text.replace(field, &format!("\"manifest_crc32c\": \"{crc:08x}\""));
    std::fs::write(dir.join(MANIFEST), text).unwrap();
}

/// The manifest of 40,000 ranks took 20 s to open (each rank counted over the
/// whole list), 100,000 ranks minutes: the square of the job's size.
#[test]
fn a_manifest_of_many_ranks_opens_in_time_linear_in_them() {
    let root = tmpdir("many-ranks");
    let dir = root.join("step-0000000001");
    manifest_of(&dir, 60_000);
    let t0 = std::time::Instant::now();
    let c = Checkpoint::open(&dir).unwrap();
    assert_eq!(c.ranks(), 60_000);
    assert!(t0.elapsed().as_secs() < 5, "{:?}", t0.elapsed());
    // Two files for one rank, and one rank missing, are still named.
    let path = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&path).unwrap();
    for (from, to, said) in [
        (
            "rank-000007.ckpt\",\"rank\":7",
            "rank-000006.ckpt\",\"rank\":6",
            "2 files for rank 6",
        ),
        (
            "rank-000007.ckpt\",\"rank\":7",
            "rank-000008.ckpt\",\"rank\":8",
            "0 files for rank 7",
        ),
    ] {
        let edited = text.replace(from, to);
        std::fs::remove_dir_all(&dir).unwrap();
        manifest_of(&dir, 1);
        // Resealed by hand: the edit alone is wrong.
        let field_at = edited.rfind("\"manifest_crc32c\": \"").unwrap() + 20;
        let mut zeroed = edited.clone();
        zeroed.replace_range(field_at..field_at + 8, "00000000");
        let crc = crc32c::crc32c(zeroed.as_bytes());
        zeroed.replace_range(field_at..field_at + 8, &format!("{crc:08x}"));
        std::fs::write(&path, zeroed).unwrap();
        let e = Checkpoint::open(&dir).unwrap_err().to_string();
        assert!(e.contains(said), "{e}");
    }
}

/// `commit` wrote a manifest its reader refuses, then failed: metadata nested
/// deeper than the parser reads replaced the step's good manifest. An entry's
/// name of 100,000 characters was echoed whole.
#[test]
fn commit_refuses_what_its_reader_would_before_writing() {
    let root = tmpdir("commit-checked");
    let set = Checkpoints::new(&root);
    let e0 = set.write_rank(1, 0, 1, b"state").unwrap();
    set.commit(1, 1, vec![e0.clone()], serde_json::json!({ "ok": 1 }))
        .unwrap();
    let before = std::fs::read(set.step_dir(1).join(MANIFEST)).unwrap();
    let mut deep = serde_json::json!(1);
    for _ in 0..200 {
        deep = serde_json::json!([deep]);
    }
    let e = set.commit(1, 1, vec![e0.clone()], deep).unwrap_err();
    assert!(e.to_string().contains("recursion limit"), "{e}");
    assert_eq!(
        std::fs::read(set.step_dir(1).join(MANIFEST)).unwrap(),
        before
    );
    assert_eq!(set.latest().unwrap().step(), 1);
    for entry in [
        FileEntry {
            name: "n".repeat(100_000),
            rank: Some(5),
            size: 1,
            crc32c: 0,
        },
        FileEntry {
            name: "m".repeat(100_000),
            rank: None,
            size: 1,
            crc32c: 0,
        },
        FileEntry {
            name: "../../evil.ckpt".into(),
            rank: None,
            size: 1,
            crc32c: 0,
        },
    ] {
        let e = set
            .commit(1, 1, vec![e0.clone(), entry], serde_json::json!({}))
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        assert!(e.to_string().len() < 500, "{} bytes", e.to_string().len());
    }
    assert_eq!(
        std::fs::read(set.step_dir(1).join(MANIFEST)).unwrap(),
        before
    );
}

/// A root of 5,000 interrupted steps gave a message of 5,000 lines.
#[test]
fn no_valid_checkpoint_lists_the_newest_rejections_and_counts_the_rest() {
    let root = tmpdir("none-valid");
    let set = Checkpoints::new(&root);
    for s in 0..30 {
        std::fs::create_dir_all(set.step_dir(s)).unwrap();
    }
    let e = set.latest().unwrap_err();
    let Error::NoneValid { rejected, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(rejected.len(), 30);
    let text = e.to_string();
    assert_eq!(text.lines().count(), LISTED_REJECTIONS + 2, "{text}");
    assert!(
        text.contains("step 29:") && !text.contains("step 19:"),
        "{text}"
    );
    assert!(text.ends_with("and 20 older ones"), "{text}");
}
