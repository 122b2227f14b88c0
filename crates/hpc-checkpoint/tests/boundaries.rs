//! The checkpoint format at its edges: which names and directories count, manifests
//! that are well sealed but list bad files, files that cannot be opened, and when a
//! warning is (and is not) logged.

mod common;

use std::path::Path;

use common::tmpdir;
use hpc_checkpoint::{rank_file_name, Checkpoint, Checkpoints, Error, MANIFEST};

/// Two ranks and two named files at `step`, committed.
fn write(set: &Checkpoints, step: u64) -> Checkpoint {
    let mut entries = vec![
        set.write_rank(step, 0, 2, format!("r0@{step}").as_bytes())
            .unwrap(),
        set.write_rank(step, 1, 2, format!("r1@{step}").as_bytes())
            .unwrap(),
    ];
    entries.push(set.write_file(step, "a", b"file a").unwrap());
    entries.push(set.write_file(step, "b", b"file b!").unwrap());
    set.commit(step, 2, entries, serde_json::json!({ "dt": 0.5 }))
        .unwrap()
}

/// Rewrites `dir`'s manifest after `edit`, with a correct checksum, so only the
/// edit can make it invalid.
fn reseal(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join(MANIFEST);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut v);
    v["manifest_crc32c"] = "00000000".into();
    let mut text = serde_json::to_string_pretty(&v).unwrap();
    text.push('\n');
    let crc = crc32c::crc32c(text.as_bytes());
    let field = "\"manifest_crc32c\": \"00000000\"";
    let at = text.rfind(field).unwrap();
    text.replace_range(
        at..at + field.len(),
        &format!("\"manifest_crc32c\": \"{crc:08x}\""),
    );
    std::fs::write(path, text).unwrap();
}

#[test]
fn names_of_named_files() {
    let root = tmpdir("names");
    let set = Checkpoints::new(&root);
    let long = "x".repeat(128);
    for ok in ["a", "ok-name_1.v2", "Z9", long.as_str()] {
        let e = set.write_file(1, ok, b"p").unwrap();
        assert_eq!(e.name, format!("{ok}.ckpt"));
        assert_eq!(e.rank, None);
        assert!(set.step_dir(1).join(&e.name).is_file());
    }
    let too_long = "x".repeat(129);
    for bad in [
        "",
        too_long.as_str(),
        ".hidden",
        "rank-7",
        "manifest",
        "a/b",
        "..",
        "a b",
        "é",
        "a:b",
    ] {
        assert!(
            matches!(set.write_file(1, bad, b"p"), Err(Error::InvalidArgument(_))),
            "{bad:?} was accepted"
        );
    }
}

#[test]
fn names_paths_and_accessors() {
    let root = tmpdir("paths");
    let set = Checkpoints::new(&root);
    assert_eq!(set.root(), &*root);
    assert_eq!(set.step_dir(42), root.join("step-0000000042"));
    assert_eq!(rank_file_name(3), "rank-000003.ckpt");
    assert_eq!(rank_file_name(1234567), "rank-1234567.ckpt");
    let e = set.write_rank(42, 1, 3, b"xyz").unwrap();
    assert_eq!(e.name, "rank-000001.ckpt");
    assert_eq!(e.rank, Some(1));
    assert_eq!(e.size, 40 + 3);
    assert_eq!(
        e.crc32c,
        crc32c::crc32c(&std::fs::read(set.step_dir(42).join(&e.name)).unwrap())
    );

    let ck = write(&set, 7);
    for c in [ck, Checkpoint::open(set.step_dir(7)).unwrap()] {
        assert_eq!(c.dir(), set.step_dir(7));
        assert_eq!(c.step(), 7);
        assert_eq!(c.ranks(), 2);
        assert_eq!(c.metadata()["dt"], 0.5);
        let names: Vec<&str> = c.manifest().files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            ["rank-000000.ckpt", "rank-000001.ckpt", "a.ckpt", "b.ckpt"]
        );
        assert_eq!(c.manifest().rank_file(1).unwrap().name, "rank-000001.ckpt");
        assert_eq!(c.manifest().named_file("b").unwrap().name, "b.ckpt");
        assert!(c.manifest().named_file("c").is_none());
        assert!(c.manifest().rank_file(2).is_none());
    }
}

/// Named files are found by name, not by position, among rank files.
#[test]
fn each_file_reads_back_its_own_bytes() {
    let root = tmpdir("read");
    let set = Checkpoints::new(&root);
    let ck = write(&set, 3);
    assert_eq!(ck.read_rank(0).unwrap(), b"r0@3");
    assert_eq!(ck.read_rank(1).unwrap(), b"r1@3");
    assert_eq!(ck.read_file("a").unwrap().unwrap(), b"file a");
    assert_eq!(ck.read_file("b").unwrap().unwrap(), b"file b!");
    assert_eq!(ck.read_file("c").unwrap(), None);
    assert_eq!(ck.read_file("rank-000000").unwrap(), None);
    assert!(matches!(ck.read_rank(2), Err(Error::InvalidArgument(_))));
}

#[test]
fn steps_are_the_step_directories_only() {
    let root = tmpdir("steps");
    let set = Checkpoints::new(&root);
    assert_eq!(set.steps().unwrap(), Vec::<u64>::new(), "no root yet");
    for d in [
        "step-007",
        "step-0000000003",
        "step-",
        "step-+5",
        "step-12a",
        "step--1",
        "other",
        "step-99999999999999999999999",
    ] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    // `step-007` is not step 7's directory (`step-0000000007`, which every read
    // of step 7 opens): not a step.
    assert_eq!(set.steps().unwrap(), vec![3]);
    // A root that is not a directory is an error, not an empty set.
    let file = root.join("plain-file");
    std::fs::write(&file, b"x").unwrap();
    let e = Checkpoints::new(&file).steps().unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    assert!(matches!(
        Checkpoints::new(&file).latest(),
        Err(Error::Io { .. })
    ));
}

/// A payload reader interrupted by a signal is read again, not failed.
#[test]
fn an_interrupted_payload_read_is_retried() {
    struct Interrupting {
        data: &'static [u8],
        interrupt: bool,
    }
    impl std::io::Read for Interrupting {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            self.interrupt = !self.interrupt;
            if self.interrupt {
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            let n = b.len().min(self.data.len()).min(3);
            b[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }
    let root = tmpdir("eintr");
    let set = Checkpoints::new(&root);
    let data = b"interrupted state";
    let e = set
        .write_rank_from(
            1,
            0,
            1,
            data.len() as u64,
            &mut Interrupting {
                data,
                interrupt: false,
            },
        )
        .unwrap();
    let ck = set.commit(1, 1, vec![e], serde_json::json!(null)).unwrap();
    assert_eq!(ck.read_rank(0).unwrap(), data);
}

#[test]
fn commit_checks_sizes_duplicates_and_the_rank_range() {
    let root = tmpdir("commit");
    let set = Checkpoints::new(&root);
    let e0 = set.write_rank(5, 0, 2, b"zero").unwrap();
    let e1 = set.write_rank(5, 1, 2, b"one").unwrap();
    let mut wrong = e1.clone();
    wrong.size += 1;
    assert!(matches!(
        set.commit(5, 2, vec![e0.clone(), wrong], serde_json::json!({})),
        Err(Error::Size {
            expected: 44,
            found: 43,
            ..
        })
    ));
    assert!(matches!(
        set.commit(
            5,
            2,
            vec![e0.clone(), e1.clone(), e1.clone()],
            serde_json::json!({})
        ),
        Err(Error::InvalidArgument(_))
    ));
    let beyond = set.write_rank(5, 2, 3, b"two").unwrap();
    let e = set
        .commit(
            5,
            2,
            vec![e0.clone(), e1.clone(), beyond],
            serde_json::json!({}),
        )
        .unwrap_err();
    assert!(e.to_string().contains("beyond the rank count"), "{e}");
    assert!(matches!(
        Checkpoint::open(set.step_dir(5)),
        Err(Error::Incomplete { .. })
    ));
    set.commit(5, 2, vec![e1, e0], serde_json::json!({}))
        .unwrap();
}

/// A manifest with a valid checksum that lists files wrongly is refused when
/// opened, before any file is read.
#[test]
fn sealed_manifests_listing_bad_files_are_refused() {
    let root = tmpdir("manifest");
    let set = Checkpoints::new(&root);
    write(&set, 9);
    let dir = set.step_dir(9);
    let good = std::fs::read(dir.join(MANIFEST)).unwrap();
    // The resealing itself keeps a manifest valid.
    reseal(&dir, |_| {});
    Checkpoint::open(&dir).unwrap().verify().unwrap();

    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let named =
        |name: &'static str| -> Edit { Box::new(move |v| v["files"][2]["name"] = name.into()) };
    let edits: Vec<(&str, Edit)> = vec![
        ("a slash", named("x/a.ckpt")),
        ("a parent", named("../a.ckpt")),
        ("a dot file", named(".a.ckpt")),
        ("no .ckpt", named("a.txt")),
        ("the manifest", named("manifest.json")),
        (
            "rank 0 under rank 1's name",
            Box::new(|v| v["files"][0]["name"] = "rank-000001.ckpt".into()),
        ),
        (
            "a rank beyond the count",
            Box::new(|v| v["files"][2]["rank"] = 2.into()),
        ),
        (
            "a rank listed twice",
            Box::new(|v| v["files"][1]["rank"] = 0.into()),
        ),
        ("fewer ranks", Box::new(|v| v["ranks"] = 3.into())),
        ("another format", Box::new(|v| v["format"] = "other".into())),
        ("another version", Box::new(|v| v["version"] = 2.into())),
    ];
    for (what, edit) in edits {
        std::fs::write(dir.join(MANIFEST), &good).unwrap();
        reseal(&dir, edit);
        assert!(
            matches!(Checkpoint::open(&dir), Err(Error::Manifest { .. })),
            "{what}: {:?}",
            Checkpoint::open(&dir)
        );
    }
}

/// A manifest damaged inside its own checksum field is refused, not a panic.
#[test]
fn a_damaged_checksum_field_is_refused() {
    let root = tmpdir("crcfield");
    let set = Checkpoints::new(&root);
    write(&set, 2);
    let path = set.step_dir(2).join(MANIFEST);
    let text = std::fs::read_to_string(&path).unwrap();
    let field = "\"manifest_crc32c\": \"";
    let at = text.rfind(field).unwrap() + field.len();
    let cut = |s: &str| {
        std::fs::write(&path, s).unwrap();
        Checkpoint::open(set.step_dir(2))
    };
    // Cut inside the digits.
    assert!(matches!(cut(&text[..at + 4]), Err(Error::Manifest { .. })));
    // Seven digits and a two-byte character: byte 8 is inside the character.
    let mut odd = text.clone();
    odd.replace_range(at..at + 8, "abcdefgé");
    assert!(matches!(cut(&odd), Err(Error::Manifest { .. })));
    // Not hex.
    let mut odd = text.clone();
    odd.replace_range(at..at + 8, "xyzw1234");
    assert!(matches!(cut(&odd), Err(Error::Manifest { .. })));
    std::fs::write(&path, &text).unwrap();
    Checkpoint::open(set.step_dir(2)).unwrap();
}

#[test]
fn open_tells_absent_incomplete_and_unreadable_apart() {
    let root = tmpdir("open");
    let set = Checkpoints::new(&root);
    assert!(matches!(
        Checkpoint::open(set.step_dir(1)),
        Err(Error::Io { .. })
    ));
    std::fs::create_dir_all(set.step_dir(1)).unwrap();
    assert!(matches!(
        Checkpoint::open(set.step_dir(1)),
        Err(Error::Incomplete { .. })
    ));
    // A manifest that exists but cannot be read (here a directory) is not
    // "incomplete": it is named as what it is.
    std::fs::create_dir_all(set.step_dir(1).join(MANIFEST)).unwrap();
    match Checkpoint::open(set.step_dir(1)) {
        Err(Error::Manifest { reason, .. }) => {
            assert!(reason.contains("not a regular file"), "{reason}")
        }
        other => panic!("a directory as manifest gave {other:?}"),
    }
}

/// A listed file that exists but cannot be opened, or is not a regular file, is
/// named as such, not reported missing.
#[test]
fn files_that_cannot_be_read_are_not_called_missing() {
    let root = tmpdir("unopenable");
    let set = Checkpoints::new(&root);
    write(&set, 4);
    let dir = set.step_dir(4);
    let f = dir.join("rank-000000.ckpt");
    std::fs::remove_file(&f).unwrap();
    std::os::unix::fs::symlink(&f, &f).unwrap(); // a loop: open fails with ELOOP
    let e = Checkpoint::open(&dir).unwrap().verify().unwrap_err();
    assert!(matches!(e, Error::Io { op: "open", .. }), "{e}");
    std::fs::remove_file(&f).unwrap();
    std::fs::create_dir(&f).unwrap();
    let e = Checkpoint::open(&dir).unwrap().verify().unwrap_err();
    assert!(
        matches!(&e, Error::Header { reason, .. } if reason.contains("not a regular file")),
        "{e}"
    );
    std::fs::remove_dir(&f).unwrap();
    let e = Checkpoint::open(&dir).unwrap().verify().unwrap_err();
    assert!(matches!(e, Error::Missing { .. }), "{e}");
}

fn latest_logged(set: &Checkpoints) -> (u64, Vec<u64>, String) {
    let (ck, rejected, text) = common::latest_logged(set);
    (ck.step(), rejected.iter().map(|r| r.step).collect(), text)
}

/// A clean resume logs nothing; a fallback says it resumes from an older one.
/// A checkpoint copied into another step's directory is skipped.
#[test]
fn warnings_come_with_fallbacks_only() {
    let root = tmpdir("warn");
    let set = Checkpoints::new(&root);
    write(&set, 100);
    let (step, rejected, text) = latest_logged(&set);
    assert_eq!((step, rejected), (100, vec![]));
    assert!(!text.contains("WARN"), "{text}");

    std::fs::create_dir_all(set.step_dir(200)).unwrap();
    for e in std::fs::read_dir(set.step_dir(100)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), set.step_dir(200).join(e.file_name())).unwrap();
    }
    let (step, rejected, text) = latest_logged(&set);
    assert_eq!((step, rejected), (100, vec![200]));
    assert!(text.contains("step-0000000200"), "{text}");
    assert!(text.contains("resuming from an older checkpoint"), "{text}");
    let (_, rejected) = set.latest_with_rejections().unwrap();
    assert!(
        matches!(&*rejected[0].error, Error::Manifest { reason, .. } if reason.contains("step 100")),
        "{}",
        rejected[0].error
    );
}

/// A rejected checkpoint's warning says "trying the previous one" only where
/// an older one is left: the oldest one's says none is left.
#[test]
fn the_last_rejected_checkpoint_says_none_is_left() {
    let root = tmpdir("none-left");
    let set = Checkpoints::new(&root);
    write(&set, 100);
    write(&set, 200);
    // Both fail: each one's manifest names the other's step.
    let (m100, m200) = (
        set.step_dir(100).join(MANIFEST),
        set.step_dir(200).join(MANIFEST),
    );
    let (a, b) = (std::fs::read(&m100).unwrap(), std::fs::read(&m200).unwrap());
    std::fs::write(&m100, &b).unwrap();
    std::fs::write(&m200, &a).unwrap();
    let (r, text) = common::logged(|| set.latest_with_rejections());
    assert!(matches!(r, Err(Error::NoneValid { .. })), "{r:?}");
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].contains("step-0000000200") && lines[0].contains("trying the previous one"),
        "{text}"
    );
    assert!(
        lines[1].contains("step-0000000100")
            && lines[1].contains("no older one is left")
            && !lines[1].contains("previous"),
        "{text}"
    );
}

/// Every header field uses all its bytes: a rank and a rank count above 255 and a
/// step above 2^56 survive the round trip (a header field read from a shifted
/// offset would still pass for ranks below 256 and small steps).
#[test]
fn wide_header_fields_round_trip() {
    let root = tmpdir("wide");
    let set = Checkpoints::new(&root);
    let step = (5u64 << 56) + 0x0102_0304;
    let ranks = 257u32;
    let entries: Vec<_> = (0..ranks)
        .map(|r| set.write_rank(step, r, ranks, &r.to_le_bytes()).unwrap())
        .collect();
    let ck = set
        .commit(step, ranks, entries, serde_json::json!({}))
        .unwrap();
    ck.verify().unwrap();
    assert_eq!(ck.read_rank(256).unwrap(), 256u32.to_le_bytes());
    let ck = set.latest().unwrap();
    assert_eq!((ck.step(), ck.ranks()), (step, ranks));
}

/// A commit of a step nothing was written for (no files, 0 ranks) said
/// "cannot create …/manifest.json.tmp123: No such file or directory", a
/// file the caller never named; it names the checkpoint and what to do,
/// and makes nothing. A commit of 0 ranks with a named file still works.
#[test]
fn a_commit_of_a_step_never_written_says_so() {
    let root = tmpdir("never-written");
    let set = Checkpoints::new(&root);
    let e = set
        .commit(3, 0, [], serde_json::json!({}))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("step-0000000003: no file of it was written") && !e.contains(".tmp"),
        "{e}"
    );
    assert!(!set.step_dir(3).exists());
    let named = set.write_file(4, "state", b"x").unwrap();
    let k = set.commit(4, 0, [named], serde_json::json!({})).unwrap();
    assert_eq!(k.read_file("state").unwrap().unwrap(), b"x");
}

/// A metadata of 65 MiB made a manifest larger than a checkpoint's reader
/// takes (`MAX_MANIFEST_BYTES`): the commit said `Ok`, and every later open
/// refused the step ("it is 68157693 bytes, more than the 67108864
/// accepted"), a checkpoint written that nothing could restore (part E of
/// pass 19). The commit refuses it, naming the sizes, and writes no
/// manifest; the step can still be committed with smaller metadata.
#[test]
fn a_manifest_larger_than_its_reader_takes_is_not_committed() {
    let root = tmpdir("huge-metadata");
    let set = Checkpoints::new(&root);
    let entry = set.write_rank(1, 0, 1, b"abc").unwrap();
    let huge = serde_json::Value::String("x".repeat(hpc_checkpoint::MAX_MANIFEST_BYTES as usize));
    let e = set
        .commit(1, 1, [entry.clone()], huge)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("more than the 67108864 bytes a checkpoint's reader accepts"),
        "{e}"
    );
    assert!(!set.step_dir(1).join(MANIFEST).exists());
    let k = set
        .commit(1, 1, [entry], serde_json::json!({"n": 1}))
        .unwrap();
    assert_eq!(set.latest().unwrap().step(), k.step());
}

/// A payload that arrives slowly: `len` bytes of `byte`, 1,000 a read, each
/// after `pause`.
struct Slow {
    left: usize,
    byte: u8,
    pause: std::time::Duration,
}

impl std::io::Read for Slow {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        std::thread::sleep(self.pause);
        let n = buf.len().min(self.left).min(1000);
        buf[..n].fill(self.byte);
        self.left -= n;
        Ok(n)
    }
}

/// Two writers of one rank file at once in one process (two threads: their
/// temporaries have one name, `<file>.tmp<PID>`): the second removed the
/// first's temporary and made its own, and the first renamed that one, half
/// written, as its own: `Ok` with its size and checksum, a commit `Ok`, then
/// "… is damaged: its CRC-32C is … but the manifest says …" at restart (the
/// second failed, "cannot rename …: No such file"). The first is refused now,
/// naming its temporary; the second's file is whole and committed.
#[test]
fn two_writers_of_one_file_at_once_take_nothing_of_each_other() {
    let root = tmpdir("two-writers");
    let pause = std::time::Duration::from_millis(150);
    let (a_set, b_set) = (Checkpoints::new(&*root), Checkpoints::new(&*root));
    let a = std::thread::spawn(move || {
        let mut payload = Slow {
            left: 3000,
            byte: b'a',
            pause,
        };
        a_set.write_rank_from(1, 0, 1, 3000, &mut payload)
    });
    std::thread::sleep(pause / 3);
    let b = std::thread::spawn(move || {
        let mut payload = Slow {
            left: 3000,
            byte: b'b',
            pause,
        };
        b_set.write_rank_from(1, 0, 1, 3000, &mut payload)
    });
    let e = a.join().unwrap().unwrap_err().to_string();
    assert!(e.contains("is no longer the file written here"), "{e}");
    let entry = b.join().unwrap().unwrap();
    let set = Checkpoints::new(&*root);
    set.commit(1, 1, [entry], serde_json::json!({})).unwrap();
    assert_eq!(
        set.latest().unwrap().read_rank(0).unwrap(),
        vec![b'b'; 3000]
    );
}
