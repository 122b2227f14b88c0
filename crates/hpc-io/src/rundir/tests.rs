use super::*;
use crate::message::said;

/// A run directory's path, not made, in a fresh test folder that is removed
/// with all it holds when dropped (what a test makes beside the run directory
/// too: `run.victim`).
struct Tmp(PathBuf, #[allow(dead_code)] crate::test_util::TmpDir);
impl Tmp {
    fn new(tag: &str) -> Tmp {
        let base = crate::test_util::scratch("rundir", tag);
        Tmp(base.join("run"), base)
    }
}

fn info() -> RunInfo {
    let mut i = RunInfo::new("test");
    i.outputs = vec!["spikes.spk".into(), "summary.json".into()];
    i
}

/// An output directory that is a symbolic link is followed when this user
/// made it, refused when another user did (a link planted in a shared folder
/// sent the run's manifest, lock and outputs where it pointed, unseen), and
/// a link to nothing is said to be one ("cannot create out: File exists").
#[test]
fn a_link_as_the_directory_is_followed_only_when_this_user_made_it() {
    use rustix::fs::{chownat, AtFlags, Gid, Uid, CWD};
    let t = Tmp::new("dir-link");
    let target = t.0.join("target");
    fs::create_dir_all(&target).unwrap();
    let out = t.0.join("out");
    std::os::unix::fs::symlink(&target, &out).unwrap();
    RunDir::create(&out, info())
        .unwrap()
        .finish(Status::Complete)
        .unwrap();
    assert!(target.join(MANIFEST).is_file());
    fs::remove_dir_all(&target).unwrap();
    fs::create_dir(&target).unwrap();

    let nobody = (Uid::from_raw(65534), Gid::from_raw(65534));
    match chownat(
        CWD,
        &out,
        Some(nobody.0),
        Some(nobody.1),
        AtFlags::SYMLINK_NOFOLLOW,
    ) {
        Ok(()) => {
            let e = RunDir::create(&out, info()).unwrap_err();
            assert!(matches!(e, Error::ForeignLink { owner: 65534, .. }), "{e}");
            let msg = e.to_string();
            assert!(
                msg.contains("out is a symbolic link to") && msg.contains("user 65534"),
                "{msg}"
            );
            assert_eq!(fs::read_dir(&target).unwrap().count(), 0);
        }
        // Only root may give a link away.
        Err(e) => eprintln!("the link's owner kept ({e}): the planted case not run"),
    }

    // Through a planted link further up, and an empty path (the current
    // directory, unseen).
    let lnk = t.0.join("lnk");
    std::os::unix::fs::symlink(&target, &lnk).unwrap();
    let e = RunDir::create("", info()).unwrap_err().to_string();
    assert!(e.contains("empty path"), "{e}");
    if chownat(
        CWD,
        &lnk,
        Some(nobody.0),
        Some(nobody.1),
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .is_ok()
    {
        let e = RunDir::create(lnk.join("out"), info()).unwrap_err();
        assert!(matches!(e, Error::ForeignLink { .. }), "{e}");
        assert!(!target.join("out").exists());
        // A claimed file whose folder is a planted link: refused too.
        let e = FileClaim::take(&lnk.join("trace.json"), "a run").unwrap_err();
        assert!(matches!(e, Error::ForeignLink { .. }), "{e}");
        assert!(!target.join(".trace.json.lock").exists());
    }

    let dangling = t.0.join("dangling");
    std::os::unix::fs::symlink(t.0.join("nowhere"), &dangling).unwrap();
    let e = RunDir::create(&dangling, info()).unwrap_err().to_string();
    assert!(
        e.contains("symbolic link to") && e.contains("nowhere, which does not exist"),
        "{e}"
    );
    assert!(!t.0.join("nowhere").exists());
}

/// Pass 15: a claim in a folder not made yet was said of the lock file no
/// user named ("cannot open N/.summary.json.lock").
#[test]
fn a_claim_in_a_missing_folder_names_the_file_and_its_folder() {
    let t = Tmp::new("claim-missing");
    let out = t.0.join("not-made").join("trace.json");
    let e = FileClaim::take(&out, "a run").unwrap_err().to_string();
    assert!(
        e.contains("not-made/trace.json") && e.contains("does not exist") && !e.contains(".lock"),
        "{e}"
    );
    assert!(!t.0.join("not-made").exists());
}

/// A hand-edited run.json whose words are 100,000 characters long: the
/// messages cut them (they were echoed whole, twice over 100 KB).
#[test]
fn a_manifests_long_words_are_cut_in_the_messages() {
    let t = Tmp::new("long-words");
    let mut a = RunDir::create(&t.0, info()).unwrap();
    let spikes = a.record("spikes.spk").unwrap();
    fs::write(&spikes, b"x").unwrap();
    a.finish(Status::Complete).unwrap();
    let path = t.0.join(MANIFEST);
    let edit = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut m: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        f(&mut m);
        fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    };
    let long = "x".repeat(100_000);
    edit(&|m| {
        m["program"] = long.clone().into();
        m["run_id"] = long.clone().into();
    });
    let msg = RunDir::create(&t.0, info()).unwrap_err().to_string();
    assert!(
        msg.len() < 1000 && msg.contains("more characters"),
        "{}",
        &msg[..300]
    );
    edit(&|m| {
        m["program"] = "test".into();
        m["status"] = "incomplete".into();
        m["reason"] = long.clone().into();
    });
    let msg = check_file(&spikes).unwrap_err().to_string();
    assert!(
        msg.len() < 1000 && msg.contains("more characters"),
        "{}",
        &msg[..300]
    );
    edit(&|m| m["format"] = long.clone().into());
    let msg = check_file(&spikes).unwrap_err().to_string();
    assert!(
        msg.len() < 1000 && msg.contains("more characters"),
        "{}",
        &msg[..300]
    );
}

/// A directory that another program's run wrote is refused, its files kept
/// (`microcircuit --out brunel-out` removed brunel's results and exited 0);
/// the same program replaces its own earlier run as before.
#[test]
fn another_programs_results_are_refused_not_removed() {
    let t = Tmp::new("other-program");
    let mut a = RunDir::create(&t.0, info()).unwrap();
    let spikes = a.record("spikes.spk").unwrap();
    fs::write(&spikes, b"brunel's").unwrap();
    a.finish(Status::Complete).unwrap();
    let mut other = info();
    other.program = "other".into();
    let e = RunDir::create(&t.0, other).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::OtherProgram { .. }), "{msg}");
    assert!(msg.contains("a run of test"), "{msg}");
    assert_eq!(fs::read(&spikes).unwrap(), b"brunel's");
    // The same program takes the directory over.
    let b = RunDir::create(&t.0, info()).unwrap();
    assert!(!spikes.exists());
    b.finish(Status::Complete).unwrap();
}

#[test]
fn a_second_run_is_refused_at_once_and_the_first_keeps_its_files() {
    let t = Tmp::new("busy");
    let mut a = RunDir::create(&t.0, info()).unwrap();
    a.write_atomic("spikes.spk", b"first run").unwrap();
    let t0 = std::time::Instant::now();
    let err = RunDir::create(&t.0, info()).unwrap_err();
    assert!(t0.elapsed() < std::time::Duration::from_secs(2));
    let msg = err.to_string();
    assert!(matches!(err, Error::Busy { .. }), "{msg}");
    assert!(msg.contains(&t.0.display().to_string()), "{msg}");
    assert!(
        msg.contains(&format!("pid {}", std::process::id())),
        "{msg}"
    );
    assert_eq!(fs::read(t.0.join("spikes.spk")).unwrap(), b"first run");
    let m = a.finish(Status::Complete).unwrap();
    assert_eq!(
        m.files,
        vec![RunFile {
            name: "spikes.spk".into(),
            size: Some(9)
        }]
    );
    assert_eq!(
        fs::read(t.0.join(LOCK)).unwrap(),
        b"",
        "the lock names no ended run"
    );
    // Released: the next run may start, and removes the earlier run's file.
    let b = RunDir::create(&t.0, info()).unwrap();
    assert!(!t.0.join("spikes.spk").exists());
    drop(b);
}

#[test]
fn an_earlier_runs_files_do_not_stay_beside_a_new_runs() {
    let t = Tmp::new("stale");
    fs::create_dir_all(t.0.join("checkpoints")).unwrap();
    // A file the user put there: no run's, so kept.
    fs::write(t.0.join("notes.txt"), "mine").unwrap();
    let mut a = RunDir::create(&t.0, info()).unwrap();
    a.write_atomic("report.html", b"<p>a</p>").unwrap();
    a.write_atomic("spikes.spk", b"aaaa").unwrap();
    a.finish(Status::Complete).unwrap();
    // The next run writes only a summary: nothing of the first is left.
    let mut b = RunDir::create(&t.0, info()).unwrap();
    assert!(!t.0.join("report.html").exists());
    assert!(!t.0.join("spikes.spk").exists());
    b.write_atomic("summary.json", b"{}").unwrap();
    let m = b.finish(Status::Complete).unwrap();
    assert_eq!(m.files.len(), 1);
    assert_eq!(fs::read(t.0.join("notes.txt")).unwrap(), b"mine");
    assert!(t.0.join("checkpoints").is_dir());
    check_file(&t.0.join("summary.json")).unwrap();
    let e = check_file(&t.0.join("notes.txt")).unwrap_err().to_string();
    assert!(e.contains("older or foreign"), "{e}");
}

#[test]
fn files_of_output_names_that_no_run_wrote_are_refused_not_removed() {
    let t = Tmp::new("foreign");
    fs::create_dir_all(&t.0).unwrap();
    fs::write(t.0.join("spikes.spk"), "mine").unwrap();
    fs::write(t.0.join("summary.json"), "mine too").unwrap();
    let e = RunDir::create(&t.0, info()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Foreign { .. }), "{msg}");
    assert!(msg.contains("spikes.spk, summary.json"), "{msg}");
    assert!(msg.contains("choose another output directory"), "{msg}");
    assert_eq!(fs::read(t.0.join("spikes.spk")).unwrap(), b"mine");
    assert_eq!(fs::read(t.0.join("summary.json")).unwrap(), b"mine too");
    assert!(!t.0.join(MANIFEST).exists());
    // Beside an earlier run's manifest, an unlisted file of an output name is
    // just as foreign.
    fs::remove_file(t.0.join("summary.json")).unwrap();
    fs::remove_file(t.0.join("spikes.spk")).unwrap();
    let mut a = RunDir::create(&t.0, info()).unwrap();
    a.write_atomic("summary.json", b"{}").unwrap();
    a.finish(Status::Complete).unwrap();
    fs::write(t.0.join("spikes.spk"), "mine").unwrap();
    let e = RunDir::create(&t.0, info()).unwrap_err().to_string();
    assert!(e.contains("holds spikes.spk that no earlier run"), "{e}");
    assert_eq!(fs::read(t.0.join("summary.json")).unwrap(), b"{}");
}

/// `hpc_benchmark --out D` with a directory `D/summary.json` ran the whole
/// simulation, failed at its end ("cannot replace D/summary.json: it is a
/// directory"), and its run.json listed that directory as a file it wrote
/// (size 4096), so that the next run took it for its own and failed the
/// same way: a directory of an output name is refused before the run, and
/// never listed.
/// Another output of a run (a trace, a checkpoint directory) at the name of one
/// of its files, however the directory is spelt, is found; other names and
/// other directories are not (pass 15).
#[test]
fn the_files_a_run_owns_are_found_by_any_spelling_of_its_directory() {
    let t = Tmp::new("owns");
    let outputs = info().outputs;
    let owned = |p: &Path| is_run_file(&t.0, &outputs, p);
    assert!(owned(&t.0.join("spikes.spk")));
    assert!(owned(&t.0.join("run.json")));
    assert!(owned(&t.0.join("run.lock")));
    assert!(owned(&t.0.join(".").join("summary.json")));
    assert!(!owned(&t.0.join("trace.json")));
    assert!(!owned(&t.0.join("sub").join("spikes.spk")));
    assert!(!owned(Path::new("/")));
    let run = RunDir::lock(&t.0, info()).unwrap();
    assert!(run.owns_path(&t.0.join("summary.json")));
    assert!(!run.owns_path(&t.0.join("checkpoints")));
}

#[test]
fn a_directory_of_an_output_name_is_refused_first_and_never_listed() {
    let t = Tmp::new("dir-output");
    fs::create_dir_all(t.0.join("summary.json")).unwrap();
    let e = RunDir::create(&t.0, info()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Foreign { .. }), "{msg}");
    assert!(
        msg.contains("holds summary.json that no earlier run"),
        "{msg}"
    );
    assert!(t.0.join("summary.json").is_dir());
    assert!(!t.0.join(MANIFEST).exists());
    // A run whose recorded name became a directory: not listed at its end,
    // and its directory is refused again by the next run.
    fs::remove_dir(t.0.join("summary.json")).unwrap();
    let mut a = RunDir::create(&t.0, info()).unwrap();
    a.record("summary.json").unwrap();
    fs::create_dir(t.0.join("summary.json")).unwrap();
    let m = a.finish(Status::Complete).unwrap();
    assert!(m.file("summary.json").is_none(), "{:?}", m.files);
    let e = RunDir::create(&t.0, info()).unwrap_err();
    assert!(matches!(e, Error::Foreign { .. }), "{e}");
}

#[test]
fn a_manifest_or_lock_that_is_not_a_regular_file_is_not_read_or_followed() {
    let t = Tmp::new("fifo");
    fs::create_dir_all(&t.0).unwrap();
    let victim = t.0.with_extension("victim");
    fs::write(&victim, "keep").unwrap();
    let fifo = |p: &Path| {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            p,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap()
    };
    // A FIFO run.json: refused at once (no writer ever comes), then replaced
    // (the run's own name in the directory it holds).
    fifo(&t.0.join(MANIFEST));
    let t0 = std::time::Instant::now();
    let e = inspect(&t.0).unwrap_err().to_string();
    assert!(e.contains("is a FIFO, not a regular file"), "{e}");
    RunDir::create(&t.0, info())
        .unwrap()
        .finish(Status::Complete)
        .unwrap();
    assert!(t0.elapsed() < std::time::Duration::from_secs(5));
    // A symlink run.json (to /dev/zero, to a file elsewhere) is not followed.
    for target in [Path::new("/dev/zero"), victim.as_path()] {
        fs::remove_file(t.0.join(MANIFEST)).unwrap();
        std::os::unix::fs::symlink(target, t.0.join(MANIFEST)).unwrap();
        let e = inspect(&t.0).unwrap_err().to_string();
        assert!(e.contains("is a symbolic link, not a regular file"), "{e}");
        RunDir::create(&t.0, info())
            .unwrap()
            .finish(Status::Complete)
            .unwrap();
        assert!(inspect(&t.0).unwrap().is_some());
    }
    assert_eq!(fs::read(&victim).unwrap(), b"keep");
    // A run.lock that is a FIFO or a symlink: refused, naming what it is.
    fs::remove_file(t.0.join(LOCK)).unwrap();
    fifo(&t.0.join(LOCK));
    let e = RunDir::create(&t.0, info()).unwrap_err().to_string();
    assert!(e.contains("run.lock is a FIFO, not a regular file"), "{e}");
    fs::remove_file(t.0.join(LOCK)).unwrap();
    std::os::unix::fs::symlink(&victim, t.0.join(LOCK)).unwrap();
    let e = RunDir::create(&t.0, info()).unwrap_err().to_string();
    assert!(e.contains("run.lock is a symbolic link"), "{e}");
    assert_eq!(fs::read(&victim).unwrap(), b"keep");
    let _ = fs::remove_file(&victim);
    // A regular file as the directory: said so.
    let f = t.0.join("afile");
    fs::write(&f, "x").unwrap();
    let e = RunDir::create(&f, info()).unwrap_err().to_string();
    assert!(e.contains("is a regular file, not a directory"), "{e}");
    // A device: named as one.
    let e = RunDir::create("/dev/null", info()).unwrap_err().to_string();
    assert_eq!(e.matches("not a directory").count(), 1, "{e}");
    assert!(
        e.contains("/dev/null is a character device, not a directory"),
        "{e}"
    );
    // Nobody is told to remove a device to make room for a run.
    assert!(!e.contains("remove it"), "{e}");
    assert!(e.contains("choose another output directory"), "{e}");
    // A file that can be removed is still offered both choices.
    let e = RunDir::create(&f, info()).unwrap_err().to_string();
    assert!(e.contains("remove it or choose another"), "{e}");
}

#[test]
fn an_early_stop_is_marked_incomplete_and_readers_are_told() {
    let t = Tmp::new("stop");
    let mut a = RunDir::create(&t.0, info()).unwrap();
    let partial = a.record("spikes.spk.partial").unwrap();
    fs::write(&partial, b"1234").unwrap();
    a.record("spikes.spk").unwrap();
    let m = a
        .finish(Status::Incomplete {
            reason: "--stop-at".into(),
            stopped_at: Some("50.0 ms".into()),
        })
        .unwrap();
    // The final name was never written: only the partial file is listed.
    assert_eq!(
        m.files,
        vec![RunFile {
            name: "spikes.spk.partial".into(),
            size: Some(4)
        }]
    );
    let text = fs::read_to_string(t.0.join(MANIFEST)).unwrap();
    assert!(text.contains("\"status\": \"incomplete\""), "{text}");
    let e = check_file(&partial).unwrap_err().to_string();
    assert!(
        e.contains("incomplete: --stop-at (stopped at 50.0 ms)"),
        "{e}"
    );
    // A run that errors out (dropped) says so too.
    let b = RunDir::create(&t.0, info()).unwrap();
    drop(b);
    let m = inspect(&t.0).unwrap().unwrap();
    assert!(matches!(m.manifest.status, Status::Incomplete { .. }));
    assert!(
        !partial.exists(),
        "the earlier run's partial file was removed"
    );
}

/// A reason, a stop time or a run id of a forged `run.json` holding a line
/// break or a terminal escape was written into `check_file`'s message as it
/// is (pass 17 quoted them in the Python reader only): quoted and escaped.
#[test]
fn a_forged_reason_is_quoted_not_written_as_it_is() {
    let t = Tmp::new("forged-reason");
    let mut a = RunDir::create(&t.0, info()).unwrap();
    let partial = a.record("spikes.spk.partial").unwrap();
    fs::write(&partial, b"1234").unwrap();
    a.finish(Status::Incomplete {
        reason: "a\nb\u{1b}[31mred".into(),
        stopped_at: Some("1\r2".into()),
    })
    .unwrap();
    let e = check_file(&partial).unwrap_err().to_string();
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(!e.contains('\u{1b}'), "{e}");
    assert!(
        e.contains("incomplete: \"a\\nb\\u{1b}[31mred\" (stopped at \"1\\r2\")"),
        "{e}"
    );
    // A plain reason is written as it is.
    assert_eq!(said("--stop-at"), "--stop-at");
    assert_eq!(said("x\ty"), "\"x\\ty\"");
}

#[test]
fn a_killed_runs_lock_goes_away() {
    let t = Tmp::new("killed");
    fs::create_dir_all(&t.0).unwrap();
    // A child process takes the lock with flock(1), says so, and is killed.
    // (`-o`: the lock stays with the flock process, which is the one killed.)
    let mut child = std::process::Command::new("flock")
        .arg("-o")
        .arg(t.0.join(LOCK))
        .args(["sh", "-c", "echo locked; read line"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("flock(1) is needed for this test");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    let e = RunDir::create(&t.0, info()).unwrap_err();
    assert!(matches!(e, Error::Busy { .. }), "{e}");
    child.kill().unwrap();
    child.wait().unwrap();
    // Its shell ends with its input.
    drop(child.stdin.take());
    let r = RunDir::create(&t.0, info()).unwrap();
    assert_eq!(inspect(&t.0).unwrap().unwrap().liveness, Liveness::Running);
    r.finish(Status::Complete).unwrap();
    // A manifest still saying `running` with nobody holding the lock is what a
    // killed run leaves: readers are told it was abandoned.
    let text = fs::read_to_string(t.0.join(MANIFEST)).unwrap();
    fs::write(
        t.0.join(MANIFEST),
        text.replace("\"complete\"", "\"running\""),
    )
    .unwrap();
    assert_eq!(
        inspect(&t.0).unwrap().unwrap().liveness,
        Liveness::Abandoned
    );
}

#[test]
fn a_run_that_stops_before_it_starts_changes_nothing() {
    let t = Tmp::new("lockonly");
    let mut a = RunDir::create(&t.0, info()).unwrap();
    a.write_atomic("spikes.spk", b"kept").unwrap();
    a.finish(Status::Complete).unwrap();
    let before = fs::read(t.0.join(MANIFEST)).unwrap();
    let b = RunDir::lock(&t.0, info()).unwrap();
    assert!(matches!(
        RunDir::create(&t.0, info()),
        Err(Error::Busy { .. })
    ));
    drop(b); // bad input found before start
    assert_eq!(fs::read(t.0.join("spikes.spk")).unwrap(), b"kept");
    assert_eq!(fs::read(t.0.join(MANIFEST)).unwrap(), before);
    check_file(&t.0.join("spikes.spk")).unwrap();
}

#[test]
fn names_are_plain_and_manifests_are_checked() {
    let t = Tmp::new("names");
    let mut a = RunDir::create(&t.0, info()).unwrap();
    for bad in ["", "..", "a/b", MANIFEST, LOCK] {
        assert!(a.record(bad).is_err(), "{bad:?}");
    }
    assert!(a.record_path(Path::new("/elsewhere/x")).is_err());
    a.record_path(&t.0.join("x")).unwrap();
    a.finish(Status::Complete).unwrap();
    fs::write(t.0.join(MANIFEST), "{ not json").unwrap();
    let e = inspect(&t.0).unwrap_err().to_string();
    assert!(e.contains("not a valid run manifest"), "{e}");
}

/// A run that locks a directory and is dropped before it starts (its input
/// refused: a `--restart` of another program's checkpoint) removes the
/// directory when `lock` made it: it left a folder holding only an empty
/// `run.lock`. A directory that was there keeps what it held.
#[test]
fn a_directory_lock_made_goes_when_the_run_never_starts() {
    let t = Tmp::new("made");
    let fresh = t.0.join("fresh");
    fs::create_dir_all(&t.0).unwrap();
    drop(RunDir::lock(&fresh, info()).unwrap());
    assert!(!fresh.exists(), "{} is left", fresh.display());
    let there = t.0.join("there");
    fs::create_dir_all(&there).unwrap();
    fs::write(there.join("notes.txt"), "mine").unwrap();
    drop(RunDir::lock(&there, info()).unwrap());
    assert_eq!(fs::read_to_string(there.join("notes.txt")).unwrap(), "mine");
    // Started, it stays (marked incomplete).
    let started = t.0.join("started");
    let mut run = RunDir::lock(&started, info()).unwrap();
    run.start().unwrap();
    drop(run);
    assert!(started.join(MANIFEST).is_file());
}
