//! Damaged checkpoints and spike files, a full disk and oversized networks, as a
//! user meets them: each is a clear refusal naming the file and the problem (or a
//! fallback with a warning), never a panic, a wrong result or a partial file.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use hpc_checkpoint::{Checkpoint, Checkpoints, FileEntry};
use hpc_test_support::example::{self, refused, succeeded as ok};

const BRUNEL: &str = env!("CARGO_BIN_EXE_brunel");

/// A fresh directory, removed at the end of the test (and when it fails).
fn tmpdir(tag: &str) -> hpc_test_support::TmpDir {
    hpc_test_support::TmpDir::new("brunel-hostile", tag)
}

/// The network of these runs.
const MODEL: &[&str] = &["--preset", "nest", "--order", "100"];

fn brunel(out: &Path, extra: &[&str]) -> Output {
    example::command(BRUNEL, MODEL, out, extra)
        .output()
        .unwrap()
}

/// The uninterrupted run's spikes, and a run interrupted at 35 ms with checkpoints
/// at 10, 20 and 30 ms (in `dir/checkpoints`).
fn reference_and_checkpoints(dir: &Path) -> Vec<u8> {
    ok(&brunel(&dir.join("ref"), &["--t-sim", "50"]));
    let reference = std::fs::read(dir.join("ref/spikes.spk")).unwrap();
    ok(&brunel(
        dir,
        &[
            "--t-sim",
            "50",
            "--checkpoint-every",
            "10",
            "--stop-at",
            "35",
        ],
    ));
    reference
}

fn flip(path: &Path, at: usize) {
    let mut b = std::fs::read(path).unwrap();
    b[at] ^= 0x40;
    std::fs::write(path, b).unwrap();
}

#[test]
fn a_damaged_checkpoint_is_refused_or_skipped_with_a_warning() {
    let dir = tmpdir("flip");
    let reference = reference_and_checkpoints(&dir);
    let set = Checkpoints::new(dir.join("checkpoints"));
    assert_eq!(set.steps().unwrap(), vec![100, 200, 300]);
    // A flipped byte among the potentials of the newest checkpoint.
    let rank0 = set.step_dir(300).join("rank-000000.ckpt");
    flip(&rank0, 40 + 28 + 8 * 17 + 3);
    // Named, it is refused with the file and the problem.
    let named = set.step_dir(300);
    let err = refused(&brunel(
        &dir.join("named"),
        &["--t-sim", "50", "--restart", named.to_str().unwrap()],
    ));
    assert!(
        err.contains("rank-000000.ckpt") && err.contains("damaged") && err.contains("CRC-32C"),
        "{err}"
    );
    // Given the directory, the run resumes from 20 ms with a warning, and its spikes
    // are exactly those of the uninterrupted run.
    let out = dir.join("resumed");
    let err = ok(&brunel(
        &out,
        &[
            "--t-sim",
            "50",
            "--restart",
            dir.join("checkpoints").to_str().unwrap(),
        ],
    ));
    assert!(
        err.contains("WARN") && err.contains("rank-000000.ckpt") && err.contains("previous"),
        "{err}"
    );
    assert!(std::fs::read(out.join("spikes.spk")).unwrap() == reference);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_truncated_spike_record_is_caught() {
    let dir = tmpdir("trunc");
    reference_and_checkpoints(&dir);
    let set = Checkpoints::new(dir.join("checkpoints"));
    let spikes = set.step_dir(300).join("spikes.ckpt");
    let b = std::fs::read(&spikes).unwrap();
    std::fs::write(&spikes, &b[..b.len() - b.len() / 3 - 3]).unwrap();
    let err = refused(&brunel(
        &dir.join("named"),
        &[
            "--t-sim",
            "50",
            "--restart",
            set.step_dir(300).to_str().unwrap(),
        ],
    ));
    assert!(
        err.contains("spikes.ckpt") && err.contains("truncated"),
        "{err}"
    );
    // A truncated rank file says which file and how many bytes are missing.
    let rank = set.step_dir(200).join("rank-000000.ckpt");
    let b = std::fs::read(&rank).unwrap();
    std::fs::write(&rank, &b[..b.len() - 100]).unwrap();
    let err = refused(&brunel(
        &dir.join("named"),
        &[
            "--t-sim",
            "50",
            "--restart",
            set.step_dir(200).to_str().unwrap(),
        ],
    ));
    assert!(
        err.contains("rank-000000.ckpt")
            && err.contains(&format!(
                "is {} bytes but the manifest says {}",
                b.len() - 100,
                b.len()
            ))
            && !err.contains("does not match the model"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rank_files_of_another_step_are_caught() {
    // The manifest of step 200 lists rank files that hold step 300 (with their sizes
    // and checksums): resuming at 200 would duplicate spikes.
    let dir = tmpdir("steps");
    reference_and_checkpoints(&dir);
    let set = Checkpoints::new(dir.join("checkpoints"));
    let old = Checkpoint::open(set.step_dir(200)).unwrap();
    let new = Checkpoint::open(set.step_dir(300)).unwrap();
    let rank = &new.manifest().files[0];
    std::fs::copy(
        set.step_dir(300).join(&rank.name),
        set.step_dir(200).join(&rank.name),
    )
    .unwrap();
    let mut files: Vec<FileEntry> = old.manifest().files.clone();
    files[0] = rank.clone();
    set.commit(200, 1, files, old.metadata().clone()).unwrap();
    let err = refused(&brunel(
        &dir.join("named"),
        &[
            "--t-sim",
            "50",
            "--restart",
            set.step_dir(200).to_str().unwrap(),
        ],
    ));
    assert!(
        err.contains("rank-000000.ckpt") && err.contains("step 300") && err.contains("step 200"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Replaces the spike file of checkpoint `step` by `f(payload)`, with a manifest
/// whose checksums match: what the spike-file reader itself must catch.
fn rewrite_spikes(set: &Checkpoints, step: u64, f: impl FnOnce(&mut Vec<u8>)) {
    let ck = Checkpoint::open(set.step_dir(step)).unwrap();
    let mut payload = ck.read_file("spikes").unwrap().unwrap();
    f(&mut payload);
    let mut files: Vec<FileEntry> = ck
        .manifest()
        .files
        .iter()
        .filter(|e| e.rank.is_some())
        .cloned()
        .collect();
    files.push(set.write_file(step, "spikes", &payload).unwrap());
    set.commit(step, ck.ranks(), files, ck.metadata().clone())
        .unwrap();
}

#[test]
fn a_damaged_spike_file_is_an_error_not_a_panic() {
    let dir = tmpdir("ids");
    reference_and_checkpoints(&dir);
    let set = Checkpoints::new(dir.join("checkpoints"));
    let restart = |step: u64| {
        refused(&brunel(
            &dir.join("named"),
            &[
                "--t-sim",
                "50",
                "--restart",
                set.step_dir(step).to_str().unwrap(),
            ],
        ))
    };
    // A neuron id with its top bit flipped.
    rewrite_spikes(&set, 300, |p| {
        let last = p.len() - 1;
        p[last] ^= 0x80;
    });
    let err = restart(300);
    assert!(
        err.contains("spikes.ckpt") && err.contains("names neuron") && err.contains("500 neurons"),
        "{err}"
    );
    // A header length running past the end of the file.
    rewrite_spikes(&set, 200, |p| p[15] = 0x40);
    let err = restart(200);
    assert!(
        err.contains("spikes.ckpt") && err.contains("the header claims"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn t_sim_before_the_checkpoint_is_refused() {
    let dir = tmpdir("tsim");
    reference_and_checkpoints(&dir);
    let out = dir.join("short");
    let err = refused(&brunel(
        &out,
        &[
            "--t-sim",
            "20",
            "--restart",
            dir.join("checkpoints").to_str().unwrap(),
        ],
    ));
    assert!(
        err.contains("30.0 ms") && err.contains("--t-sim 30.0 or more"),
        "{err}"
    );
    assert!(!out.join("spikes.spk").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs brunel with every file it writes limited to `limit` bytes: past it a write
/// fails (EFBIG, "File too large") exactly as on a full disk.
fn brunel_with_file_limit(out: &Path, limit: u64, extra: &[&str]) -> Output {
    let mut cmd = Command::new(BRUNEL);
    cmd.args([
        "--preset", "nest", "--order", "100", "--t-sim", "50", "--quiet", "--no-pin", "--out",
    ])
    .arg(out)
    .args(extra);
    example::limit_file_size(&mut cmd, limit).output().unwrap()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn a_full_disk_names_the_file_and_leaves_no_partial_output() {
    let dir = tmpdir("full");
    let full = dir.join("unlimited");
    ok(&brunel_with_file_limit(&full, u64::MAX / 2, &[]));
    let size = |n: &str| std::fs::metadata(full.join(n)).unwrap().len();
    let (spikes, summary) = (size("spikes.spk"), size("summary.json"));
    let plot = size("overview.png");
    assert!(
        plot > spikes.max(summary) + 100,
        "the overview figure must be larger than the spikes and the summary for this test: {:?}",
        files_in(&full)
    );

    // summary.json does not fit.
    let out = dir.join("summary");
    let err = refused(&brunel_with_file_limit(&out, summary / 2, &["--no-spikes"]));
    assert!(
        err.contains("summary.json") && err.contains("File too large"),
        "{err}"
    );
    // Only the run's manifest (which says the run did not finish) and its lock.
    assert_eq!(files_in(&out), ["run.json", "run.lock"]);
    let m = hpc_io::rundir::inspect(&out).unwrap().unwrap();
    assert!(
        matches!(m.manifest.status, hpc_io::rundir::Status::Incomplete { .. }),
        "{:?}",
        m.manifest.status
    );

    // The spikes and the summary fit, the overview figure does not.
    let out = dir.join("plot");
    let limit = spikes.max(summary) + (plot - spikes.max(summary)) / 2;
    let err = refused(&brunel_with_file_limit(&out, limit, &[]));
    assert!(
        err.contains(".png") && err.contains("File too large"),
        "{err}"
    );
    assert_eq!(
        err.matches("File too large").count(),
        1,
        "the cause is said once: {err}"
    );
    assert!(!err.contains("BackendError"), "{err}");
    // Figures that fit are complete; nothing partial or temporary is left.
    let left = files_in(&out);
    assert!(left.contains(&"spikes.spk".to_string()) && left.contains(&"summary.json".to_string()));
    for f in &left {
        assert!(
            !f.starts_with('.') && !f.contains("tmp"),
            "a temporary file is left: {left:?}"
        );
        let bytes = std::fs::read(out.join(f)).unwrap();
        let complete = if f.ends_with(".png") {
            bytes.ends_with(&[0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82])
        } else if f.ends_with(".svg") {
            String::from_utf8_lossy(&bytes)
                .trim_end()
                .ends_with("</svg>")
        } else if f.ends_with(".json") {
            serde_json::from_slice::<serde_json::Value>(&bytes).is_ok()
        } else if f.ends_with(".html") {
            String::from_utf8_lossy(&bytes)
                .trim_end()
                .ends_with("</html>")
        } else {
            true
        };
        assert!(complete, "{f} is not complete: {left:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_oversized_network_is_refused_at_once_with_the_estimate() {
    let dir = tmpdir("size");
    for args in [
        // The most neurons a spike's code takes with the delay of 15 steps.
        &["--order", "50000000", "--ce", "1000", "--ci", "250"][..],
        &["--order", "100000"],
    ] {
        let t = Instant::now();
        let o = Command::new(BRUNEL)
            .args(args)
            .args(["--quiet", "--no-pin", "--out"])
            .arg(&dir)
            .output()
            .unwrap();
        let err = refused(&o);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert!(
            err.contains("needs about")
                && err.contains("GiB")
                && err.contains("available")
                && err.contains("--allow-oversize"),
            "{args:?}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_file_names_its_cause_once() {
    // `cannot open c: No such file or directory (os error 2)`, not followed by the
    // same cause a second time (the error's message holds it and is its source).
    let dir = tmpdir("cause-once");
    let os = std::io::Error::from_raw_os_error(2).to_string();
    for flag in ["--config", "--reference"] {
        let o = Command::new(BRUNEL)
            .args(MODEL)
            .args(["--quiet", "--no-pin", "--t-sim", "1", flag])
            .arg(dir.join("missing\u{fffd}.txt"))
            .arg("--out")
            .arg(dir.join("out"))
            .output()
            .unwrap();
        let err = refused(&o);
        assert!(err.contains("missing"), "{flag}: {err}");
        assert_eq!(err.matches(&os).count(), 1, "{flag}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The last message is one write: `hpc run` stopping a rank between the pieces of
/// `writeln!` left `brunel: error: ` cut short.
#[test]
fn the_last_message_is_written_whole() {
    let out = std::env::temp_dir().join(format!("brunel-last-words-{}", std::process::id()));
    let mut c = Command::new(BRUNEL);
    c.args(["--order", "50", "--t-sim", "10", "--j", "NaN", "--out"])
        .arg(&out);
    hpc_test_support::output::assert_last_words_whole(
        &mut c,
        "brunel",
        1,
        "j must be a finite number",
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// Settings that would change nothing are refused, not ignored: `--checkpoint-dir`
/// and `--checkpoint-keep` without `--checkpoint-every` (a usage error), and a
/// `--stop-at` or `--checkpoint-every` beyond the end of the run (which went to its
/// end, or wrote no checkpoint, with status 0); nothing is written for them.
#[test]
fn settings_that_would_change_nothing_are_refused() {
    let dir = tmpdir("no-effect");
    for (extra, code, needle) in [
        (&["--checkpoint-keep", "2"][..], 2, "--checkpoint-every"),
        (&["--checkpoint-dir", "ck"][..], 2, "--checkpoint-every"),
        (
            &["--stop-at", "30"][..],
            1,
            "--stop-at 30 ms is beyond the end of the run (20 ms",
        ),
        (
            &["--checkpoint-every", "25"][..],
            1,
            "--checkpoint-every 25 ms is beyond the end of the run (20 ms",
        ),
    ] {
        let out = dir.join("out");
        let mut args = vec!["--t-sim", "20"];
        args.extend_from_slice(extra);
        let o = brunel(&out, &args);
        let err = example::stderr(&o);
        assert_eq!(o.status.code(), Some(code), "{extra:?}: {err}");
        assert!(err.contains(needle), "{extra:?}: {err}");
        assert!(!out.exists(), "{extra:?} wrote {}", out.display());
    }
    // At the end itself, both still take effect.
    ok(&brunel(
        &dir.join("end"),
        &[
            "--t-sim",
            "20",
            "--stop-at",
            "20",
            "--checkpoint-every",
            "20",
        ],
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// An `HPC_LOG` that is not a log filter is warned about by name (it was dropped
/// without a word, and only warnings were logged); the run goes on.
#[test]
fn a_log_filter_that_is_not_one_is_named() {
    let dir = tmpdir("log-filter");
    let o = example::command(BRUNEL, MODEL, &dir.join("out"), &["--t-sim", "5"])
        .env(hpc_runtime::env::LOG, "[[[")
        .output()
        .unwrap();
    let err = ok(&o);
    assert!(err.contains("HPC_LOG=\"[[[\" is not a log filter"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An `HPC_LOG` that is not UTF-8 is refused naming it, without a warning first that
/// the run goes on logging warnings (the refusal overruled it a line later).
#[test]
fn a_log_variable_that_is_not_utf8_is_refused_without_a_warning_first() {
    use std::os::unix::ffi::OsStrExt as _;
    let dir = tmpdir("log-not-utf8");
    let o = example::command(BRUNEL, MODEL, &dir.join("out"), &["--t-sim", "5"])
        .env(hpc_runtime::env::LOG, std::ffi::OsStr::from_bytes(b"\xff"))
        .output()
        .unwrap();
    let err = refused(&o);
    let named = err.contains("HPC_LOG=") && err.contains("is not valid UTF-8");
    assert!(named && !err.contains("using warn"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--restart` of a path that does not exist says so; it read "no checkpoint in X
/// (no step-* directory)", as if X were an empty checkpoint directory.
#[test]
fn a_restart_from_a_missing_path_says_it_does_not_exist() {
    let dir = tmpdir("restart-missing");
    let missing = dir.join("no-such-checkpoints");
    let o = brunel(
        &dir.join("out"),
        &["--t-sim", "5", "--restart", missing.to_str().unwrap()],
    );
    let err = refused(&o);
    assert!(
        err.contains(&format!(
            "--restart {}: No such file or directory",
            missing.display()
        )),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `hpc run --threads 2 -- brunel` ran 1 thread per rank: `--threads` defaulted
/// to 1 and the `HPC_THREADS` the launcher sets was never read. It is the
/// default now; the flag still decides.
#[test]
fn the_launcher_s_threads_are_the_default_and_the_flag_decides() {
    let dir = tmpdir("threads");
    for (var, extra, want) in [
        (Some("2"), &[][..], "1 rank(s) x 2 thread(s)"),
        (
            Some("2"),
            &["--threads", "3"][..],
            "1 rank(s) x 3 thread(s)",
        ),
        (None, &[][..], "1 rank(s) x 1 thread(s)"),
    ] {
        let out_dir = dir.join(format!("{var:?}{}", extra.len()));
        let mut c = example::command(BRUNEL, &["--order", "20"], &out_dir, extra);
        c.args(["--t-sim", "10"]);
        c.env_remove(hpc_runtime::env::THREADS);
        if let Some(v) = var {
            c.env(hpc_runtime::env::THREADS, v);
        }
        let out = c.output().unwrap();
        ok(&out);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(want), "{var:?} {extra:?}: {text}");
    }
}

/// An `HPC_THREADS` that is not a number of threads was taken as 1 thread without
/// a word (`abc`, `-1`), or refused naming `--threads`, a flag not given (`0`,
/// `99999`). It is refused naming the variable; `--threads` beside it decides.
#[test]
fn a_thread_count_from_the_variable_that_is_not_one_is_named() {
    let dir = tmpdir("threads-var");
    let long = "7".repeat(100_000);
    for (i, v) in ["abc", "-1", "0", "99999", "2.5", "", long.as_str()]
        .into_iter()
        .enumerate()
    {
        let mut c = example::command(BRUNEL, &["--order", "20"], &dir.join(format!("o{i}")), &[]);
        c.args(["--t-sim", "5"]).env(hpc_runtime::env::THREADS, v);
        let err = refused(&c.output().unwrap());
        let shown: String = v.chars().take(40).collect();
        assert!(
            err.contains(&format!("HPC_THREADS={shown:?}"))
                && err.contains("(the default of --threads, which `hpc run --threads` sets) is not a number of threads"),
            "{v:.40}: {err}"
        );
        assert!(
            !err.contains("--threads must") && err.len() < 400,
            "{v:.40}: {err}"
        );
    }
    let mut c = example::command(BRUNEL, &["--order", "20"], &dir.join("flag"), &[]);
    c.args(["--t-sim", "5", "--threads", "2"])
        .env(hpc_runtime::env::THREADS, "abc");
    let o = c.output().unwrap();
    ok(&o);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("1 rank(s) x 2 thread(s)"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--trace` on a full disk: refused naming the flag, and the claim's lock file
/// beside the trace is not left behind (pass 16: `.t.json.lock` stayed).
#[test]
fn a_trace_on_a_full_disk_leaves_no_lock_file() {
    let dir = tmpdir("trace-full");
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("t.json");
    let err = refused(&brunel_with_file_limit(
        &dir.join("out"),
        1,
        &["--trace", trace.to_str().unwrap()],
    ));
    assert!(
        err.contains("--trace") && err.contains("File too large"),
        "{err}"
    );
    assert!(!dir.join(".t.json.lock").exists(), "{:?}", files_in(&dir));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A restart from a checkpoint directory that a running run writes into is
/// refused at once naming that run, whether the directory or one of its steps
/// is named: the writer removed (`--checkpoint-keep`) or was still writing the
/// step being read, and the restart failed at random, as "listed in the
/// manifest but missing" or calling the step being written interrupted.
#[test]
fn a_restart_from_checkpoints_a_running_run_writes_is_refused_naming_it() {
    let dir = tmpdir("restart-busy");
    ok(&brunel(
        &dir,
        &[
            "--t-sim",
            "20",
            "--checkpoint-every",
            "10",
            "--stop-at",
            "10",
        ],
    ));
    let ck = dir.join("checkpoints");
    let lock = ck.join("checkpoints.lock");
    // The writer's lock, held here as the running run holds it.
    let held = hpc_io::rundir::try_lock_file(&lock).unwrap().unwrap();
    std::fs::write(&lock, "the run of pid 4242").unwrap();
    for from in [ck.clone(), ck.join("step-0000000100")] {
        let o = brunel(
            &dir.join("b"),
            &["--t-sim", "20", "--restart", from.to_str().unwrap()],
        );
        let e = refused(&o);
        assert!(
            e.contains("is in use by the run of pid 4242") && e.contains("a copy"),
            "{e}"
        );
    }
    drop(held);
    ok(&brunel(
        &dir.join("b"),
        &["--t-sim", "20", "--restart", ck.to_str().unwrap()],
    ));
}

/// `--trace DIR/run.lock` onto a lock file no run held at the run's start, which
/// a run then took (`--out DIR` started meanwhile): written at the end, the trace
/// replaced that run's lock file, and a third run took DIR while the second still
/// ran (pass 17's noticed 63). The name is looked at again before it is
/// replaced: refused, named, the lock file kept.
#[test]
fn a_trace_onto_a_lock_taken_since_the_start_is_not_written_over_it() {
    use std::os::unix::fs::MetadataExt as _;
    use std::process::Stdio;
    let dir = tmpdir("trace-late-lock");
    let w = dir.join("w");
    std::fs::create_dir_all(&w).unwrap();
    let lock = w.join("run.lock");
    std::fs::write(&lock, "").unwrap();
    let out = dir.join("out");
    let mut run = example::command(
        BRUNEL,
        MODEL,
        &out,
        &[
            "--t-sim",
            "300",
            "--pace",
            "0.1",
            "--trace",
            lock.to_str().unwrap(),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Once the run has started (its claim of the name made), a run takes w.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !out.join("spikes.spk.partial").exists() {
        assert!(Instant::now() < deadline, "the run never started");
        assert!(run.try_wait().unwrap().is_none(), "the run ended at once");
        std::thread::sleep(Duration::from_millis(20));
    }
    let held = hpc_io::rundir::try_lock_file(&lock).unwrap().unwrap();
    std::fs::write(&lock, "the run of pid 4242").unwrap();
    let ino = std::fs::metadata(&lock).unwrap().ino();
    let o = run.wait_with_output().unwrap();
    let e = refused(&o);
    assert!(
        e.contains("has become a lock file that a running process holds")
            && e.contains("the run of pid 4242"),
        "{e}"
    );
    assert_eq!(std::fs::metadata(&lock).unwrap().ino(), ino);
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap(),
        "the run of pid 4242"
    );
    drop(held);
    let _ = std::fs::remove_dir_all(&dir);
}
