//! `hpc run --trace` and `hpc trace`: real ranks record their timelines, the launcher
//! merges them; files and flags that cannot be used are refused, naming them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const HPC: &str = env!("CARGO_BIN_EXE_hpc");

fn hpc(args: &[&str]) -> Output {
    Command::new(HPC).args(args).output().expect("run hpc")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `hpc` with `args`, which must succeed.
fn succeeds(args: &[&str]) {
    let out = hpc(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
}

/// `hpc trace SUB INPUT -o OUTPUT`, which must succeed.
fn trace_cmd(sub: &str, input: &Path, output: &Path) {
    let (i, o) = (input.to_str().unwrap(), output.to_str().unwrap());
    succeeds(&["trace", sub, i, "-o", o]);
}

/// `HPC_TRACE=DIR/ranks hpc run -n 2 -- hpc selftest`, as under another launcher:
/// the ranks' directory, unmerged.
fn traced_selftest(dir: &Path) -> std::path::PathBuf {
    let ranks = dir.join("ranks");
    let out = Command::new(HPC)
        .args(["run", "-n", "2", "--", HPC, "selftest"])
        .env(hpc_env::TRACE, &ranks)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    ranks
}

fn realtime_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Checks that the spans of each thread nest (none starts inside another and ends
/// after it), with non-negative durations.
fn assert_nested(spans: &[&Value]) {
    let mut lanes: BTreeMap<(u64, u64), Vec<(f64, f64)>> = BTreeMap::new();
    for s in spans {
        let (ts, dur) = (s["ts"].as_f64().unwrap(), s["dur"].as_f64().unwrap());
        assert!(dur >= 0.0, "negative duration: {s}");
        let key = (s["pid"].as_u64().unwrap(), s["tid"].as_u64().unwrap());
        lanes.entry(key).or_default().push((ts, ts + dur));
    }
    for (lane, mut v) in lanes {
        v.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut open: Vec<f64> = Vec::new();
        for (start, end) in v {
            while open.last().is_some_and(|&e| e <= start) {
                open.pop();
            }
            if let Some(&outer) = open.last() {
                // A microsecond of slack for the float timestamps.
                assert!(
                    end <= outer + 1e-3,
                    "lane {lane:?}: {start}..{end} overlaps its parent ending at {outer}"
                );
            }
            open.push(end);
        }
    }
}

#[test]
fn a_traced_job_merges_every_rank_s_collectives_on_one_clock() {
    let dir = hpc_test_support::tmpdir("hpc-trace", "job");
    let file = dir.join("job.json");
    let before = realtime_ns();
    let out = hpc(&[
        "run",
        "-n",
        "3",
        "--timeout",
        "60",
        "--trace",
        file.to_str().unwrap(),
        "--",
        HPC,
        "selftest",
        "--collectives",
        "thread",
    ]);
    let after = realtime_ns();
    assert!(out.status.success(), "{:?}\n{}", out.status, stderr(&out));
    let trace: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    // The ranks' directory is gone; only the merged file is left.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, [std::ffi::OsString::from("job.json")]);

    let meta = &trace["otherData"];
    assert_eq!(meta["ranks"], 3);
    assert!(meta["clock_alignment"]
        .as_str()
        .unwrap()
        .contains("CLOCK_MONOTONIC"));
    let events = trace["traceEvents"].as_array().unwrap();
    let named: BTreeSet<u64> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(named, BTreeSet::from([0, 1, 2]), "one process per rank");
    let spans: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    for rank in 0..3u64 {
        let of = |name: &str| {
            spans
                .iter()
                .filter(|s| s["pid"] == rank && s["name"] == name)
                .count()
        };
        // The selftest's collectives: each posted and waited for on every rank.
        assert!(
            of("post") >= 4,
            "rank {rank} posted {} collectives",
            of("post")
        );
        assert!(of("wait") >= of("post"), "rank {rank}");
        let ops: BTreeSet<&str> = spans
            .iter()
            .filter(|s| s["pid"] == rank && s["name"] == "post")
            .map(|s| s["args"]["op"].as_str().unwrap())
            .collect();
        assert!(
            ops.contains("allreduce") && ops.contains("alltoall"),
            "{ops:?}"
        );
    }
    assert_nested(&spans);
    // On the job's clock: every span lies between the launch and the end.
    let t0: u128 = meta["t0_realtime_ns"].as_str().unwrap().parse().unwrap();
    let end_us = spans
        .iter()
        .map(|s| s["ts"].as_f64().unwrap() + s["dur"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(spans.iter().all(|s| s["ts"].as_f64().unwrap() >= 0.0));
    assert!(
        t0 >= before,
        "the trace starts {} ns before the launch",
        before - t0
    );
    let end = t0 + (end_us * 1000.0) as u128;
    assert!(
        end <= after,
        "the trace ends {} ns after the job",
        end - after
    );

    // The same files, merged by hand (as after mpirun), and drawn.
    let ranks_dir = traced_selftest(&dir);
    let merged = dir.join("merged.json");
    trace_cmd("merge", &ranks_dir, &merged);
    let merged: Value = serde_json::from_slice(&std::fs::read(&merged).unwrap()).unwrap();
    assert_eq!(merged["otherData"]["ranks"], 2);
    let svg = dir.join("job.svg");
    trace_cmd("svg", &file, &svg);
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("rank 2") && svg.contains("post"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs `hpc` with `args`, expecting exit status 2 and a message with every one of
/// `words`; nothing is written into `dir` but what was there.
fn refused(args: &[&str], words: &[&str], dir: &Path) {
    let there: BTreeSet<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    let out = hpc(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    for w in words {
        assert!(err.contains(w), "{args:?}: {w:?} not in {err}");
    }
    let now: BTreeSet<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(there, now, "{args:?} wrote into {}", dir.display());
}

#[test]
fn bad_trace_input_is_refused_naming_it() {
    let dir = hpc_test_support::tmpdir("hpc-trace", "bad");
    let d = dir.to_str().unwrap();
    let missing = format!("{d}/no/such/dir/t.json");
    refused(
        &["run", "-n", "1", "--trace", &missing, "--", "true"],
        &["--trace", "does not exist"],
        &dir,
    );
    refused(
        &["run", "-n", "1", "--trace", d, "--", "true"],
        &["--trace", "names a directory"],
        &dir,
    );
    refused(
        &["run", "-n", "1", "--trace", "/dev/full", "--", "true"],
        &["--trace", "/dev/full", "not a regular file"],
        &dir,
    );
    let both = format!("{}={d}/x", hpc_env::TRACE);
    let t = format!("{d}/t.json");
    refused(
        &["run", "-n", "1", "--trace", &t, "-x", &both, "--", "true"],
        &["--trace", hpc_env::TRACE],
        &dir,
    );
    refused(
        &["trace", "merge", &format!("{d}/none"), "-o", &t],
        &["cannot read the trace directory", "none"],
        &dir,
    );
    refused(
        &["trace", "merge", d, "-o", &t],
        &["holds no trace file"],
        &dir,
    );

    // A rank file cut short.
    let ranks = traced_selftest(&dir);
    let one = ranks.join("rank-1.json");
    let bytes = std::fs::read(&one).unwrap();
    std::fs::write(&one, &bytes[..bytes.len() / 2]).unwrap();
    refused(
        &["trace", "merge", ranks.to_str().unwrap(), "-o", &t],
        &["rank-1.json", "ends early"],
        &dir,
    );
    refused(
        &["trace", "svg", &format!("{d}/absent.json"), "-o", &t],
        &["absent.json"],
        &dir,
    );
    // An output named as a directory not made yet (`new/`, `new/.`) is refused
    // before the merge or the job, not after them.
    std::fs::remove_file(&one).unwrap();
    let r = ranks.to_str().unwrap();
    for out in [format!("{d}/new/"), format!("{d}/new/.")] {
        refused(
            &["trace", "merge", r, "-o", &out],
            &["-o", "names a directory"],
            &dir,
        );
        refused(
            &["run", "-n", "1", "--trace", &out, "--", "true"],
            &["--trace", "names a directory"],
            &dir,
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Pass 9: `-o` naming one of the files the merge reads used to replace that
/// rank's trace with the merge (status 0; the directory could not be merged
/// again), and `--width 1e300` printed its 301 digits.
#[test]
fn an_output_over_an_input_and_a_huge_width_are_refused_in_a_line() {
    let dir = hpc_test_support::tmpdir("hpc-trace", "output-input");
    let ranks = traced_selftest(&dir);
    let r = ranks.to_str().unwrap();
    let rank0 = ranks.join("rank-0.json");
    let before = std::fs::read(&rank0).unwrap();
    for out in [
        rank0.to_str().unwrap().to_string(),
        format!("{}/../ranks/rank-1.json", r),
    ] {
        refused(
            &["trace", "merge", r, "-o", &out],
            &["-o", "is one of the files it merges"],
            &ranks,
        );
    }
    assert_eq!(
        std::fs::read(&rank0).unwrap(),
        before,
        "rank 0's trace kept"
    );
    // Another name in the directory is not a rank's: written.
    let job = ranks.join("job.json");
    let out = hpc(&["trace", "merge", r, "-o", job.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let svg = dir.join("t.svg");
    let (j, s) = (job.to_str().unwrap(), svg.to_str().unwrap());
    let out = hpc(&["trace", "svg", j, "-o", s, "--width", "1e300"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("got 1e300"), "{err}");
    assert!(err.len() < 200, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Two jobs given the same `--trace FILE` at once: the second is refused at its
/// start, naming the job holding FILE, instead of both writing it and the last
/// to finish silently winning; the lock is gone after the first job.
/// A traced job of programs that record nothing (`true`) failed with 125 and
/// left an empty `.FILE.ranks-PID` directory, naming it for `hpc trace merge`
/// (which refuses it as holding no trace file).
#[test]
fn a_traced_job_that_records_nothing_leaves_nothing() {
    let dir = hpc_test_support::tmpdir("hpc-trace", "nothing");
    let file = dir.join("t.json");
    let f = file.to_str().unwrap();
    let out = hpc(&["run", "-n", "2", "--trace", f, "--", "true"]);
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{e}");
    assert!(
        e.contains("none of the 2 rank(s) recorded a timeline"),
        "{e}"
    );
    assert!(!e.contains("hpc trace merge"), "{e}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    // Its own folder is not left in the temporary directory either.
    let _ = std::fs::remove_dir_all(&dir);
    assert!(left.is_empty(), "{left:?}");
}

/// Pass 19's leftover: a job stopped before any rank recorded an event or
/// finished its file (each rank a process that began its `.part` and was
/// stopped) left `.t.json.ranks-N` holding those empty files, offered to a
/// merge that had nothing to merge. Nothing is left, the note says so, and
/// the job's status is kept.
#[test]
fn a_job_stopped_before_any_rank_recorded_leaves_no_folder() {
    let dir = hpc_test_support::TmpDir::new("hpc-trace", "stopped-empty");
    let file = dir.join("t.json");
    let out = hpc(&[
        "run",
        "-n",
        "2",
        "--trace",
        file.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        ": > \"$HPC_TRACE/pid-$$.json.part\"; exit 3",
    ]);
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{e}");
    assert!(
        e.contains("before any of its 2 rank(s) wrote an event or a finished timeline into its file; nothing was written"),
        "{e}"
    );
    assert!(!e.contains("hpc trace merge"), "{e}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
    // Ranks that recorded their events but could write none of them (a full
    // disk: no byte may be written, SIGXFSZ ignored) were said to have
    // recorded none; each says why, and the note speaks of their files.
    let out = hpc(&[
        "run",
        "-n",
        "2",
        "--trace",
        file.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        r#"trap "" XFSZ; ulimit -f 0; exec "$0" selftest"#,
        HPC,
    ]);
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(e.contains("File too large"), "{e}");
    assert!(
        e.contains("wrote an event or a finished timeline into its file; nothing was written")
            && !e.contains("recorded an event"),
        "{e}"
    );
}

#[test]
fn a_second_job_with_the_same_trace_file_is_refused() {
    let dir = hpc_test_support::tmpdir("hpc-trace", "same-file");
    let t = dir.join("t.json");
    let ts = t.to_str().unwrap();
    let mut first = Command::new(HPC)
        .args(["run", "-n", "1", "--trace", ts, "--", "sleep", "3"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lock = dir.join(".t.json.lock");
    let t0 = std::time::Instant::now();
    while !lock.exists() && t0.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = hpc(&["run", "-n", "1", "--trace", ts, "--", "true"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is being written by hpc run, pid"), "{err}");
    first.wait().unwrap();
    assert!(!lock.exists(), "the lock file is left");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `hpc trace merge -o FILE` (and `svg -o FILE`) while a job of `hpc run --trace
/// FILE` runs: the merge was written, then replaced by the job's trace at its
/// end, both ending 0. The merge is refused naming the job; nothing written.
#[test]
fn a_merge_into_the_file_a_running_job_claimed_is_refused() {
    let dir = hpc_test_support::tmpdir("hpc-trace", "merge-claimed");
    let ranks = traced_selftest(&dir);
    let t = dir.join("t.json");
    let ts = t.to_str().unwrap();
    let mut job = Command::new(HPC)
        .args(["run", "-n", "1", "--trace", ts, "--", "sleep", "3"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lock = dir.join(".t.json.lock");
    let t0 = std::time::Instant::now();
    while !lock.exists() && t0.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let svg_in = dir.join("in.json");
    trace_cmd("merge", &ranks, &svg_in);
    for args in [
        ["trace", "merge", ranks.to_str().unwrap(), "-o", ts],
        ["trace", "svg", svg_in.to_str().unwrap(), "-o", ts],
    ] {
        let out = hpc(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("is being written by hpc run, pid"), "{err}");
        assert!(!t.exists(), "{args:?} wrote the claimed file");
    }
    job.wait().unwrap();
    // Free again: merged, and no lock file of the merge's own left.
    trace_cmd("merge", &ranks, &t);
    assert!(!lock.exists(), "the lock file is left");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_rank_whose_trace_cannot_be_written_says_so_and_the_merge_names_it() {
    let dir = hpc_test_support::tmpdir("hpc-trace", "full");
    let file = dir.join("job.json");
    // Rank 1 may write no byte to a file, as on a full disk (SIGXFSZ ignored:
    // EFBIG). It ends (with its selftest's status) once rank 0's timeline is
    // finished (its `rank-0.json`): ended first, under load, it had the launcher stop rank 0
    // before rank 0 had written its file, and nothing was left to merge or to
    // name (this test failed 7 times in 40 beside two busy loops, hostile pass 21).
    let script = r#"if [ "$HPC_RANK" = 1 ]; then
        trap "" XFSZ; ulimit -f 0
        "$0" selftest; st=$?
        i=0
        while [ $i -lt 400 ] && [ ! -e "$HPC_TRACE/rank-0.json" ]; do
            sleep 0.05; i=$((i + 1))
        done
        exit $st
    fi
    exec "$0" selftest"#;
    let out = hpc(&[
        "run",
        "-n",
        "2",
        "--trace",
        file.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        script,
        HPC,
    ]);
    let err = stderr(&out);
    // The rank whose trace was lost ends 1 (its timeline lost at exit), which is
    // the job's status; the merge then names the file.
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("rank 1 (pid") && err.contains("exited with code 1"),
        "{err}"
    );
    assert!(
        err.contains("cannot write the trace") && err.contains("File too large"),
        "{err}"
    );
    assert!(
        err.contains("never finished") && err.contains("are left in"),
        "{err}"
    );
    assert!(!file.exists(), "no merged trace without every rank's");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `HPC_TRACE=DIR` given to a job of four ranks, then to one of two: the second
/// job's files replace ranks 0 and 1 only, and the merge refuses the directory,
/// naming a file of the first job, instead of a timeline of four ranks of two jobs.
#[test]
fn a_directory_two_jobs_wrote_into_is_refused_not_merged() {
    let dir = hpc_test_support::tmpdir("hpc-trace", "two-jobs");
    let ranks = dir.join("ranks");
    for n in ["4", "2"] {
        let out = Command::new(HPC)
            .args(["run", "-n", n, "--", HPC, "selftest"])
            .env(hpc_env::TRACE, &ranks)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let t = dir.join("t.json");
    let (r, t) = (ranks.to_str().unwrap(), t.to_str().unwrap());
    let merge_refused = |words: &[&str]| refused(&["trace", "merge", r, "-o", t], words, &dir);
    merge_refused(&[
        "rank-2.json is a rank of a job of 4 ranks",
        "more than one job",
    ]);
    // Two jobs of the same size are told apart by their job: rank 1's file of the
    // first job left beside rank 0's of the second.
    std::fs::remove_dir_all(&ranks).unwrap();
    traced_selftest(&dir);
    let first = dir.join("rank-1-of-the-first-job");
    std::fs::rename(ranks.join("rank-1.json"), &first).unwrap();
    traced_selftest(&dir);
    std::fs::rename(&first, ranks.join("rank-1.json")).unwrap();
    merge_refused(&["rank-1.json is of the job \"hpc run ", "more than one job"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A directory holding some of a job's rank files (rank 0's removed, as by a rank
/// killed before its trace was finished) was merged with status 0 and no word; a
/// trace of a whole job was all a reader could take it for. It is merged and the
/// missing ranks are named; a whole job's merge says nothing.
#[test]
fn a_merge_missing_ranks_of_the_job_names_them() {
    let dir = hpc_test_support::tmpdir("hpc-trace", "missing-ranks");
    let ranks = traced_selftest(&dir);
    let t = dir.join("t.json");
    let (r, t_s) = (ranks.to_str().unwrap(), t.to_str().unwrap());
    let whole = hpc(&["trace", "merge", r, "-o", t_s]);
    assert!(whole.status.success(), "{}", stderr(&whole));
    assert!(stderr(&whole).is_empty(), "{}", stderr(&whole));
    std::fs::remove_file(ranks.join("rank-0.json")).unwrap();
    let part = hpc(&["trace", "merge", r, "-o", t_s]);
    let err = stderr(&part);
    assert!(part.status.success(), "{err}");
    assert!(
        err.contains("holds no trace of rank(s) 0 of its job of 2 ranks")
            && err.contains("has the other 1"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A process whose trace cannot be finished at exit (a full disk: every write past
/// a file size of 0 fails; or its final name taken by a directory) does not end 0:
/// the timeline is lost, and the message names the file.
#[test]
fn a_trace_lost_at_exit_ends_the_process_non_zero_naming_the_file() {
    let dir = hpc_test_support::tmpdir("hpc-trace", "lost");
    let full = dir.join("full");
    let mut cmd = Command::new(HPC);
    cmd.arg("selftest").env(hpc_env::TRACE, &full);
    hpc_test_support::example::limit_file_size(&mut cmd, 0);
    let out = cmd.output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("pid-") && err.contains(".json.part"),
        "the file is named: {err}"
    );
    // The final name a directory: the rename fails, under the launcher too.
    let ranks = dir.join("ranks");
    std::fs::create_dir_all(ranks.join("rank-0.json")).unwrap();
    let out = Command::new(HPC)
        .args(["run", "-n", "1", "--", HPC, "selftest"])
        .env(hpc_env::TRACE, &ranks)
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("rank-0.json"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A process that was ending with a status of its own (a failure, 7) whose trace
/// is lost at exit keeps that status: the exit handler ended it with 1, which
/// hid the failure the process had chosen to report. One that was to end 0
/// still ends 1.
#[test]
fn a_trace_lost_at_exit_keeps_the_status_the_process_was_ending_with() {
    let dir = hpc_test_support::tmpdir("hpc-trace", "lost-status");
    let full = dir.join("full");
    let mut cmd = Command::new(HPC);
    cmd.args(["selftest", "--fail-rank", "0", "--exit-code", "7"])
        .env(hpc_env::TRACE, &full);
    hpc_test_support::example::limit_file_size(&mut cmd, 0);
    let out = cmd.output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(7), "{err}");
    assert!(err.contains(".json.part"), "the file is named: {err}");
    // Under the launcher (the final name a directory: the rename fails), the
    // failing rank's own status is the job's.
    let ranks = dir.join("ranks");
    std::fs::create_dir_all(ranks.join("rank-0.json")).unwrap();
    let out = Command::new(HPC)
        .args(["run", "-n", "1", "--", HPC, "selftest", "--fail-rank", "0"])
        .args(["--exit-code", "9"])
        .env(hpc_env::TRACE, &ranks)
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(9), "{err}");
    assert!(err.contains("rank-0.json"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A path holding a terminal's escape was written as it is into the refusal
/// (`--trace`, `trace merge DIR`): the terminal's colours changed. It is shown
/// quoted and escaped.
#[test]
fn a_path_with_a_control_character_is_shown_escaped() {
    let odd = "/nonexistent/d\u{1b}[31m";
    for args in [
        vec!["trace", "merge", odd, "-o", "x.json"],
        vec![
            "run",
            "-n",
            "1",
            "--trace",
            "/nonexistent/t\u{1b}[31m.json",
            "--",
            "true",
        ],
    ] {
        let out = hpc(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            !err.contains('\u{1b}') && err.contains("\\u{1b}[31m"),
            "{args:?}: {err}"
        );
    }
}

/// `--trace FILE` in a folder whose path is not UTF-8: the job ran, and every rank
/// refused the `HPC_TRACE` it was given ("is not valid UTF-8", a variable the user
/// never set). It is refused before the job, naming `--trace`.
#[test]
fn a_trace_in_a_folder_whose_path_is_not_utf8_is_refused_before_the_job() {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = hpc_test_support::tmpdir("hpc-trace", "non-utf8");
    let odd = dir.join(std::ffi::OsStr::from_bytes(b"d\xff"));
    std::fs::create_dir(&odd).unwrap();
    let out = Command::new(HPC)
        .args(["run", "-n", "1", "--trace"])
        .arg(odd.join("t.json"))
        .args(["--", HPC, "selftest"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--trace") && err.contains("not valid UTF-8"),
        "{err}"
    );
    assert!(!err.contains("[0]"), "the job ran: {err}");
    assert_eq!(std::fs::read_dir(&odd).unwrap().count(), 0, "left behind");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Two jobs given one `HPC_TRACE` folder at once, the first's ranks starting
/// their timelines after the second ended (pass 18's row 10, left noted): the
/// first job's files replaced the second's without a word, and the merge made
/// a whole trace of one job. Each rank of the first now finds another job's
/// file written while its job ran, keeps it, writes its own beside it and
/// says so; the merge refuses the mixture. A rerun into the folder still
/// replaces the earlier run's files.
#[test]
fn two_jobs_in_one_trace_folder_at_once_are_told_not_mixed_silently() {
    let root = hpc_test_support::TmpDir::new("hpc-cli", "two-jobs");
    let dir = root.join("SH");
    let env = format!("HPC_TRACE={}", dir.display());
    let late = Command::new(HPC)
        .args(["run", "-n", "2", "-x", &env, "--", "sh", "-c"])
        .arg(format!("sleep 1.5; exec {HPC} selftest"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let first = std::thread::spawn(move || late.wait_with_output().unwrap());
    std::thread::sleep(std::time::Duration::from_millis(300));
    succeeds(&["run", "-n", "2", "-x", &env, "--", HPC, "selftest"]);
    let late = first.join().unwrap();
    assert!(late.status.success(), "{}", stderr(&late));
    let said = stderr(&late);
    assert!(
        said.contains("rank-0.json is another job's, written while this one ran")
            && said.contains("rank-0-1.json"),
        "{said}"
    );
    let merged = hpc(&[
        "trace",
        "merge",
        dir.to_str().unwrap(),
        "-o",
        root.join("m.json").to_str().unwrap(),
    ]);
    assert_eq!(merged.status.code(), Some(2), "{}", stderr(&merged));
    assert!(
        stderr(&merged).contains("traces of two jobs in one directory"),
        "{}",
        stderr(&merged)
    );
    // A rerun replaces.
    let again = root.join("again");
    let env = format!("HPC_TRACE={}", again.display());
    succeeds(&["run", "-n", "2", "-x", &env, "--", HPC, "selftest"]);
    let rerun = hpc(&["run", "-n", "2", "-x", &env, "--", HPC, "selftest"]);
    assert!(
        rerun.status.success() && !stderr(&rerun).contains("another job's"),
        "{}",
        stderr(&rerun)
    );
    let mut names: Vec<_> = std::fs::read_dir(&again)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["rank-0.json", "rank-1.json"]);
    std::fs::remove_dir_all(&root).unwrap();
}

/// Hostile pass 20: `hpc run --trace -` wrote a file named `-` in the current
/// folder (the output is a file renamed into place, never the standard
/// output). `-` is refused naming the flag, nothing written; so is `-o -`.
#[test]
fn a_dash_as_the_trace_file_is_refused() {
    let dir = hpc_test_support::TmpDir::new("hpc-trace", "dash");
    let traces = dir.join("t");
    std::fs::create_dir(&traces).unwrap();
    let t = traces.to_str().unwrap();
    for args in [
        vec!["run", "-n", "1", "--trace", "-", "--", "true"],
        vec!["trace", "merge", t, "-o", "-"],
        vec!["trace", "svg", "x.json", "-o", "-"],
    ] {
        let out = Command::new(HPC)
            .args(&args)
            .current_dir(&dir)
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        let flag = if args[0] == "run" { "--trace" } else { "-o" };
        assert!(
            err.contains(&format!("{flag} -: the output is a file")),
            "{args:?}: {err}"
        );
        let left: Vec<_> = std::fs::read_dir(&*dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n != "t")
            .collect();
        assert!(left.is_empty(), "{args:?}: {left:?}");
    }
}

/// Hostile pass 20: `hpc trace svg T -o T` (or `-o ./T`, or through a link to
/// T's folder) replaced the merged trace by its picture, 0. The trace itself
/// as the output is refused, the trace kept; a link named as the output is
/// replaced, its target (the trace) kept.
#[test]
fn a_picture_over_its_own_trace_is_refused() {
    let dir = hpc_test_support::TmpDir::new("hpc-trace", "svg-over-trace");
    let trace = br#"{"traceEvents":[{"ph":"X","name":"a","pid":1,"tid":1,"ts":0,"dur":10}]}"#;
    std::fs::write(dir.join("t.json"), trace).unwrap();
    std::os::unix::fs::symlink(&*dir, dir.join("here")).unwrap();
    for out in ["t.json", "./t.json", "here/t.json"] {
        let o = Command::new(HPC)
            .args(["trace", "svg", "t.json", "-o", out])
            .current_dir(&dir)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{out}: {err}");
        assert!(
            err.contains(&format!("-o {out}: it is the trace t.json it draws")),
            "{out}: {err}"
        );
        assert_eq!(std::fs::read(dir.join("t.json")).unwrap(), trace, "{out}");
    }
    std::os::unix::fs::symlink("t.json", dir.join("l.json")).unwrap();
    let o = Command::new(HPC)
        .args(["trace", "svg", "t.json", "-o", "l.json"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::read(dir.join("t.json")).unwrap(), trace);
    assert!(std::fs::read_to_string(dir.join("l.json"))
        .unwrap()
        .starts_with("<svg"));
}

/// Hostile pass 20: `hpc trace svg --from 1e308` was refused as "the window
/// from inf µs to … µs is empty", naming neither the flag nor its value. It
/// is refused naming both.
#[test]
fn a_window_beyond_the_finite_times_names_its_flag() {
    let dir = hpc_test_support::TmpDir::new("hpc-trace", "svg-window");
    let trace = br#"{"traceEvents":[{"ph":"X","name":"a","pid":1,"tid":1,"ts":0,"dur":10}]}"#;
    std::fs::write(dir.join("t.json"), trace).unwrap();
    for flag in ["--from", "--to"] {
        let o = Command::new(HPC)
            .args(["trace", "svg", "t.json", "-o", "t.svg", flag, "1e308"])
            .current_dir(&dir)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{flag}: {err}");
        assert!(
            err.contains(&format!("{flag} 1e308 ms is beyond")),
            "{flag}: {err}"
        );
    }
}

/// Hostile pass 20: `--trace NAME` (or `-o NAME`) with a NAME of 250 bytes
/// was refused as "cannot open .NAME.lock: File name too long", naming a file
/// the user never named. The name's length is refused naming the flag.
#[test]
fn a_name_too_long_for_the_files_beside_it_is_refused() {
    let dir = hpc_test_support::TmpDir::new("hpc-trace", "long-name");
    let name = format!("{}.json", "a".repeat(245));
    for args in [
        vec!["run", "-n", "1", "--trace", &name, "--", "true"],
        vec!["trace", "merge", ".", "-o", &name],
    ] {
        let o = Command::new(HPC)
            .args(&args)
            .current_dir(&dir)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("its name is 250 bytes; at most 239 leave room"),
            "{args:?}: {err}"
        );
    }
}

/// Hostile pass 21: the files of a trace folder (up to a GiB each) were read
/// and parsed whole whatever their sum, about 12 bytes of memory a byte: more
/// than the machine has ended the merge killed for its memory, without a word.
/// Files (sparse: no disk) whose sum needs more than `MemAvailable` are
/// refused before one is read, the folder, the sum and the memory named.
#[test]
fn trace_files_larger_than_the_memory_are_refused_before_they_are_read() {
    let dir = hpc_test_support::TmpDir::new("hpc-trace", "too-big");
    let ranks = dir.join("ranks");
    std::fs::create_dir_all(&ranks).unwrap();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let available: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .map(|kib: u64| kib * 1024)
        .unwrap();
    let gib = 1u64 << 30;
    // 16 bytes of memory a byte of trace, the check's estimate: more files of a
    // GiB than that leaves room for.
    let n = available / gib / 16 + 2;
    for r in 0..n {
        std::fs::File::create(ranks.join(format!("rank-{r}.json")))
            .unwrap()
            .set_len(gib)
            .unwrap();
    }
    let t = dir.join("t.json");
    refused(
        &[
            "trace",
            "merge",
            ranks.to_str().unwrap(),
            "-o",
            t.to_str().unwrap(),
        ],
        &[
            &format!("merging the {n} trace file(s) of "),
            &format!("({n}.0 GiB) would need about"),
            "of memory, but",
            "MemAvailable",
        ],
        &dir,
    );
}
