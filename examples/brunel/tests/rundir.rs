//! Output directories owned by one run, and writes that fail loudly, as a user meets
//! them: two runs on one directory, an earlier run's files, a run stopped early,
//! stdout on a full device and a trace that does not fit.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hpc_io::rundir::{Liveness, Status};
use hpc_test_support::example::{self, refused, succeeded as ok};
use hpc_test_support::output;

const BRUNEL: &str = env!("CARGO_BIN_EXE_brunel");

/// A fresh directory, removed at the end of the test (and when it fails).
fn tmpdir(tag: &str) -> hpc_test_support::TmpDir {
    hpc_test_support::TmpDir::new("brunel-rundir", tag)
}

/// The network of these runs.
const MODEL: &[&str] = &["--preset", "nest", "--order", "100"];

fn cmd(out: &Path, extra: &[&str]) -> Command {
    example::command(BRUNEL, MODEL, out, extra)
}

#[test]
fn a_second_run_on_the_same_directory_fails_at_once_and_the_first_is_intact() {
    let dir = tmpdir("concurrent");
    let out = dir.join("out");
    // Reference: seed 1 alone.
    ok(&cmd(&dir.join("ref"), &["--seed", "1", "--t-sim", "300"])
        .output()
        .unwrap());
    let reference = std::fs::read(dir.join("ref/spikes.spk")).unwrap();

    // Seed 1 runs long enough (paced) for a second run to meet it.
    let first = cmd(&out, &["--seed", "1", "--t-sim", "300", "--pace", "0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if hpc_io::rundir::inspect(&out)
            .ok()
            .flatten()
            .is_some_and(|m| m.liveness == Liveness::Running)
        {
            break;
        }
        assert!(Instant::now() < deadline, "the first run never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let t0 = Instant::now();
    let second = cmd(&out, &["--seed", "2", "--t-sim", "300"])
        .output()
        .unwrap();
    let err = refused(&second);
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "the second run did not fail fast"
    );
    assert!(
        err.contains("is in use by") && err.contains(&out.display().to_string()),
        "{err}"
    );
    assert!(err.contains(&format!("pid {}", first.id())), "{err}");
    let first = first.wait_with_output().unwrap();
    ok(&first);
    // The first run's spikes are its own, byte for byte.
    assert_eq!(std::fs::read(out.join("spikes.spk")).unwrap(), reference);
    let m = hpc_io::rundir::inspect(&out).unwrap().unwrap();
    assert_eq!(m.manifest.status, Status::Complete);
    assert_eq!(m.manifest.info.details["seed"], 1);
    let mut names: Vec<&str> = m.manifest.files.iter().map(|f| f.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["spikes.spk", "summary.json"]);
    hpc_io::rundir::check_file(&out.join("spikes.spk")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_early_stop_is_marked_incomplete_and_leaves_nothing_of_an_earlier_run() {
    let dir = tmpdir("stop");
    let out = dir.join("out");
    // A complete run with figures, then a run stopped early in the same directory.
    let mut full = cmd(&out, &["--t-sim", "30"]);
    let args: Vec<String> = full
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .filter(|a| a != "--no-plot")
        .collect();
    full = Command::new(BRUNEL);
    full.args(&args).env("HPC_LOG", "warn");
    ok(&full.output().unwrap());
    assert!(out.join("report.html").exists() && out.join("raster.png").exists());

    let o = cmd(&out, &["--t-sim", "30", "--stop-at", "10"])
        .output()
        .unwrap();
    ok(&o);
    let mut left: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["run.json", "run.lock", "spikes.spk.partial", "summary.json"],
        "an earlier run's files are left beside this one's"
    );
    let m = hpc_io::rundir::inspect(&out).unwrap().unwrap();
    match &m.manifest.status {
        Status::Incomplete { reason, stopped_at } => {
            assert!(reason.contains("--stop-at"), "{reason}");
            assert_eq!(stopped_at.as_deref(), Some("10.0 ms"));
        }
        s => panic!("a stopped run is marked {s:?}"),
    }
    let e = hpc_io::rundir::check_file(&out.join("summary.json"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("incomplete"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_killed_run_does_not_keep_the_directory() {
    let dir = tmpdir("killed");
    let out = dir.join("out");
    let mut first = cmd(&out, &["--t-sim", "1000", "--pace", "0.1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    // Until the run has said which files it writes.
    while !hpc_io::rundir::inspect(&out)
        .ok()
        .flatten()
        .is_some_and(|m| {
            m.liveness == Liveness::Running && m.manifest.file("spikes.spk.partial").is_some()
        })
    {
        assert!(Instant::now() < deadline, "the run never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let m = hpc_io::rundir::inspect(&out).unwrap().unwrap();
    assert_eq!(m.liveness, Liveness::Abandoned);
    let e = hpc_io::rundir::check_file(&out.join("spikes.spk.partial"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("without finishing"), "{e}");
    ok(&cmd(&out, &["--t-sim", "20"]).output().unwrap());
    assert!(!out.join("spikes.spk.partial").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGTERM (a batch system's time limit, `scancel`), SIGINT (Ctrl-C) or SIGHUP
/// (the terminal closed) in the middle of the run: the run stops after the interval in progress, marks its
/// run.json incomplete naming the signal and the time, leaves its spikes so far
/// in a valid `.partial` file and ends by the signal (143, 130 in a shell).
/// Pass 17: the process ended where it stood, its run.json said "running" with
/// nobody holding its lock (reported as abandoned: "killed, or it failed").
#[test]
fn a_run_stopped_by_sigterm_or_sigint_says_so_and_ends_by_the_signal() {
    use std::os::unix::process::ExitStatusExt as _;
    let dir = tmpdir("signalled");
    for (signal, name) in [(15, "SIGTERM"), (2, "SIGINT"), (1, "SIGHUP")] {
        let out = dir.join(name);
        let mut run = cmd(&out, &["--t-sim", "1000", "--pace", "0.1"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let partial = out.join("spikes.spk.partial");
        let deadline = Instant::now() + Duration::from_secs(60);
        // Until the loop has written spikes that a reader sees: the file's growth
        // alone was its header when the first look found it empty (a loaded
        // machine), and the signal then came before the first spike.
        loop {
            assert!(Instant::now() < deadline, "{name}: the run never started");
            if let Some(status) = run.try_wait().unwrap() {
                panic!("{name}: the run ended before the signal: {status}");
            }
            if hpc_spiking::spikes::read_spikes_partial(&partial)
                .is_ok_and(|s| !s.spikes.is_empty())
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let sent = Command::new("kill")
            .args([format!("-{signal}"), run.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let o = run.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.signal(),
            Some(signal),
            "{name}: {:?} {err}",
            o.status
        );
        assert!(err.contains(&format!("stopped by {name} at ")), "{err}");
        let m = hpc_io::rundir::inspect(&out).unwrap().unwrap();
        assert_eq!(m.liveness, Liveness::Finished, "{name}");
        match &m.manifest.status {
            Status::Incomplete { reason, stopped_at } => {
                assert_eq!(reason, &format!("stopped by {name}"));
                assert!(stopped_at.as_ref().is_some_and(|t| t.ends_with(" ms")));
            }
            s => panic!("{name}: a stopped run is marked {s:?}"),
        }
        let e = hpc_io::rundir::check_file(&partial)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("stopped by {name}")), "{e}");
        let spikes = hpc_spiking::spikes::read_spikes_partial(&partial).unwrap();
        assert!(!spikes.spikes.is_empty(), "{name}");
        assert!(!out.join("spikes.spk").exists());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGTERM to one rank of two only (`kill` of its process; a batch system
/// signals every task at about the same time, each seeing it at its own
/// interval): both ranks stop at the same step, each saying "stopped by
/// SIGTERM at" the same time, which run.json names too, and both end by
/// SIGTERM (143 in a shell). Pass 19: the signalled rank stopped after its
/// interval and the other, still exchanging, failed with "rank 1 is lost"
/// (status 1).
/// Ranks given other parameters or options than rank 0 (a launcher line
/// that differs by rank: `--seed $RANK`) are refused by every rank before
/// anything is built, naming the rank and what differs: a rank given another
/// seed built its neurons' inputs from it and the run ended 0, its run.json
/// naming rank 0's seed; another engine failed in its first exchange with
/// words about the transport's board.
#[test]
fn ranks_given_other_settings_are_refused_naming_them() {
    use hpc_test_support::Job;
    let dir = tmpdir("ranks-differ");
    let out = dir.join("out");
    for (extra, words) in [
        ("--seed 9", "params.seed 12345 -> 9"),
        ("--engine thread", "run.engine \"World\" -> \"Thread\""),
    ] {
        let args = example::args(MODEL, &out, &["--t-sim", "20"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let outs = Job::program(BRUNEL, &args, 2)
            .timeout(Duration::from_secs(20))
            .extra_args_on(1, extra)
            .run();
        for (rank, o) in outs.iter().enumerate() {
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "rank {rank}: {err}");
            assert!(
                err.contains(&format!(
                    "rank 1 was given other settings than rank 0 ({words}: rank 0 -> rank 1)"
                )),
                "rank {rank}: {err}"
            );
        }
        assert!(!out.exists(), "{extra}: the output directory was made");
    }
}

/// Ranks given checkpoint directories whose names differ in a byte that is
/// not UTF-8 (`c\xff`, `c\xfe`) are refused as given other settings: compared
/// as lossy text both were `c\u{fffd}`, the run went on, each rank wrote its
/// checkpoint file into its own directory, and the run failed at its first
/// checkpoint ("rank-000001.ckpt is listed in the manifest but missing"),
/// leaving rank 1's directory behind.
#[test]
fn ranks_given_directories_that_differ_in_a_byte_not_utf8_are_refused() {
    use hpc_test_support::Job;
    let dir = tmpdir("ranks-bytes");
    let out = dir.join("out");
    let args = example::args(MODEL, &out, &["--t-sim", "20", "--checkpoint-every", "10"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let base = dir.to_str().unwrap().to_string();
    let outs = Job::program(BRUNEL, &args, 2)
        .timeout(Duration::from_secs(20))
        .prefix(move |r| {
            // Rank 0: c\377, rank 1: c\376, made by the shell's printf.
            let script = format!(
                "exec \"$@\" --checkpoint-dir \"$(printf '{base}/c\\37{}')\"",
                7 - r
            );
            ["sh", "-c", &script, "sh"].map(String::from).to_vec()
        })
        .run();
    for (rank, o) in outs.iter().enumerate() {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "rank {rank}: {err}");
        assert!(
            err.contains("rank 1 was given other settings than rank 0 (run.checkpoint_dir"),
            "rank {rank}: {err}"
        );
    }
    let made: Vec<_> = std::fs::read_dir(&*dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(made.is_empty(), "{made:?}");
}

#[test]
fn sigterm_to_one_rank_stops_every_rank_at_the_same_step() {
    use hpc_test_support::Job;
    use std::os::unix::process::ExitStatusExt as _;
    let dir = tmpdir("signal-one-rank");
    let out = dir.join("out");
    let partial = out.join("spikes.spk.partial");
    let args = example::args(
        MODEL,
        &out,
        &["--t-sim", "2000", "--pace", "0.2", "--engine", "thread"],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Rank 1's shell signals itself (the process it becomes by `exec`) once
    // rank 0's spike file has grown past its header: in the loop.
    const SIGNAL_ONCE_RUNNING: &str = r#"f=$1; shift
(i=0; s0=; while [ $i -lt 3000 ]; do
  if [ -f "$f" ]; then
    s=$(wc -c < "$f"); [ -n "$s0" ] && [ "$s" -gt "$s0" ] && break; s0=${s0:-$s}
  fi
  i=$((i + 1)); sleep 0.02
done; kill -TERM $$) </dev/null >/dev/null 2>&1 &
exec "$@""#;
    let watched = partial.display().to_string();
    let outs = Job::program(BRUNEL, &args, 2)
        .timeout(Duration::from_secs(20))
        .prefix(move |rank| match rank {
            1 => ["sh", "-c", SIGNAL_ONCE_RUNNING, "sh", &watched]
                .map(String::from)
                .to_vec(),
            _ => Vec::new(),
        })
        .run();
    let mut at = Vec::new();
    for (rank, o) in outs.iter().enumerate() {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.signal(),
            Some(15),
            "rank {rank}: {:?} {err}",
            o.status
        );
        let said = err
            .split_once("stopped by SIGTERM at ")
            .and_then(|(_, t)| t.split_once(" ms"))
            .map(|(t, _)| t.to_string());
        assert!(said.is_some(), "rank {rank}: {err}");
        at.push(said.unwrap());
    }
    assert_eq!(at[0], at[1], "the ranks stopped at different steps");
    let m = hpc_io::rundir::inspect(&out).unwrap().unwrap();
    match &m.manifest.status {
        Status::Incomplete { reason, stopped_at } => {
            assert_eq!(reason, "stopped by SIGTERM");
            assert_eq!(
                stopped_at.as_deref(),
                Some(format!("{} ms", at[0]).as_str())
            );
        }
        s => panic!("a stopped run is marked {s:?}"),
    }
    let spikes = hpc_spiking::spikes::read_spikes_partial(&partial).unwrap();
    assert!(!spikes.spikes.is_empty());
    assert!(!out.join("spikes.spk").exists());
}

/// A signal outside the loop: while the network is built (nothing of the
/// output directory changed yet: left so) and after the loop, while the summary
/// and figures are written (run.json marked incomplete "while writing the
/// summary"), the run ends at once by the signal, saying so. Pass 18: the
/// process ended where it stood without a word, and from the summary on its
/// run.json said "running" (abandoned).
#[test]
fn a_signal_while_building_or_after_the_loop_marks_the_run_and_ends_by_it() {
    use std::os::unix::process::ExitStatusExt as _;
    let dir = tmpdir("signal-outside");
    // A network whose build and figures take a while in a debug build.
    let model = ["--preset", "nest", "--order", "2000", "--threads", "1"];
    for (when, wait_for) in [("building", "run.lock"), ("summary", "summary.json")] {
        let out = dir.join(when);
        // Not `cmd`'s `--no-plot`: the figures make the summary last.
        let mut run = Command::new(BRUNEL)
            .args(model)
            .args(["--t-sim", "10", "--out"])
            .arg(&out)
            .env("HPC_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        // The lock file once it names its holder (the build starts after it).
        let there = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.len() > 0);
        while !there(&out.join(wait_for)) {
            assert!(Instant::now() < deadline, "{when}: no {wait_for}");
            if let Some(status) = run.try_wait().unwrap() {
                panic!("{when}: the run ended before the signal: {status}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let sent = Command::new("kill")
            .args(["-15".to_string(), run.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let o = run.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.signal(), Some(15), "{when}: {:?} {err}", o.status);
        if when == "building" {
            assert!(
                err.contains("brunel: error: stopped by SIGTERM while "),
                "{err}"
            );
            assert!(err.contains("no output directory was changed"), "{err}");
            assert!(!out.join("run.json").exists());
            // The lock and the directory the run made went with it, as when a
            // run's input is refused (pass 19 left "run … (pid N on host H)"
            // in the lock file, pass 20 the directory with an empty one).
            assert!(!out.exists(), "{when}: {} is left", out.display());
        } else {
            assert!(
                err.contains("stopped by SIGTERM while writing the summary;"),
                "{err}"
            );
            assert!(err.contains("says the run is incomplete"), "{err}");
            let m = hpc_io::rundir::inspect(&out).unwrap().unwrap();
            assert_eq!(m.liveness, Liveness::Finished);
            match &m.manifest.status {
                Status::Incomplete { reason, .. } => {
                    assert_eq!(reason, "stopped by SIGTERM while writing the summary")
                }
                s => panic!("a run stopped in its summary is marked {s:?}"),
            }
            assert!(m
                .manifest
                .file("spikes.spk")
                .is_some_and(|f| f.size.is_some()));
            // The holder's name went with the lock, as at a run's finish.
            assert_eq!(std::fs::metadata(out.join("run.lock")).unwrap().len(), 0);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGTERM to a run held to a slow pace (`--pace 1e-6`: 10 ms of simulated
/// time in 10,000 s, one interval's wait about 700 s) stops it after the
/// interval it waits in, as any run: the wait slept through the signal until
/// the watchdog's 10 s grace ended the run "while blocked".
#[test]
fn a_signal_ends_a_pace_s_wait() {
    use std::os::unix::process::ExitStatusExt as _;
    let dir = tmpdir("pace-signal");
    let out = dir.join("out");
    let run = cmd(&out, &["--t-sim", "10", "--pace", "1e-6"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    // In the loop once the spike file is there (its first interval's wait).
    while !out.join("spikes.spk.partial").exists() {
        assert!(Instant::now() < deadline, "the run did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    let sent = Command::new("kill")
        .args(["-15".to_string(), run.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let o = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.signal(), Some(15), "{err}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "{:?} after the signal: {err}",
        t.elapsed()
    );
    assert!(
        err.contains("brunel: error: stopped by SIGTERM at ") && !err.contains("blocked"),
        "{err}"
    );
}

/// An output directory whose name holds a line break and a terminal's escape
/// is quoted and escaped in every line of the summary: the figures' and the
/// report's lines wrote it raw (the spike file's line quoted it), breaking
/// the line and colouring the terminal.
#[test]
fn an_output_directory_with_control_characters_is_quoted_in_the_summary() {
    let dir = tmpdir("odd-out");
    let out = dir.join("o\nx\u{1b}[31mred");
    // With the figures and the report (not `cmd`'s --no-plot).
    let o = Command::new(BRUNEL)
        .args(MODEL)
        .args(["--quiet", "--no-pin", "--t-sim", "5", "--out"])
        .arg(&out)
        .env("HPC_LOG", "warn")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{said}");
    assert!(!said.contains('\u{1b}'), "{said:?}");
    for line in said.lines() {
        assert!(!line.starts_with("x"), "a line broken by the name: {said}");
    }
}

#[test]
fn stdout_on_a_full_device_is_an_error_naming_it() {
    let dir = tmpdir("devfull");
    // An error on a full device; a reader that goes away (`| head`) is not one.
    let mut n = 0;
    output::assert_result_lines_not_lost(|| {
        n += 1;
        cmd(&dir.join(format!("out{n}")), &["--t-sim", "20"])
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_trace_that_does_not_fit_is_an_error_naming_it() {
    let dir = tmpdir("trace");
    let trace = dir.join("trace.json");
    let mut c = cmd(&dir.join("out"), &["--t-sim", "50", "--no-spikes"]);
    c.arg("--trace").arg(&trace);
    let err = refused(&example::limit_file_size(&mut c, 4096).output().unwrap());
    assert!(
        err.contains(&format!("cannot write {}", trace.display()))
            && err.contains("File too large"),
        "{err}"
    );
    // Said once, and as it is: no part file is left (the recording folder is
    // removed), the trace is not written (pass 20: "…; the trace is
    // incomplete and left unfinished (the trace is incomplete)").
    assert!(
        err.contains("(the trace was not written)")
            && !err.contains("left unfinished")
            && !err.contains("incomplete"),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(&*dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "out")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A trace whose name holds a line break (and a terminal's escape) is quoted
/// and escaped in the run's refusals and errors, as every path the run names:
/// "cannot write DIR/t⏎x.json: File too large" and "--trace c⏎x.toml is the
/// file of --config" broke the message's line (the escape was escaped by the
/// last message, the line break is not: messages have lines of their own).
#[test]
fn a_trace_whose_name_holds_a_line_break_is_quoted_in_its_messages() {
    let dir = tmpdir("trace-odd");
    let trace = dir.join("t\nx\u{1b}[31m.json");
    let mut c = cmd(&dir.join("out"), &["--t-sim", "50", "--no-spikes"]);
    c.arg("--trace").arg(&trace);
    let err = refused(&example::limit_file_size(&mut c, 4096).output().unwrap());
    assert!(
        err.contains("t\\nx\\u{1b}[31m.json\": File too large"),
        "{err:?}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err:?}");
    let config = dir.join("c\nx.toml");
    std::fs::write(&config, "t_sim = 5.0\n").unwrap();
    let mut c = cmd(&dir.join("out2"), &[]);
    c.arg("--config").arg(&config).arg("--trace").arg(&config);
    let err = refused(&c.output().unwrap());
    assert!(
        err.contains("c\\nx.toml\" is the file of --config"),
        "{err:?}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err:?}");
}

/// A signal while `--trace FILE` is written, after the run's directory was
/// finished, ended the process by the signal's default action (the run's guard
/// was dropped), leaving the trace's recording folder `FILE.tmp-PID` and its
/// claim `.FILE.lock` beside FILE (pass 19's leftover). Now the process ends
/// by the signal saying so, FILE not written (or whole, when the signal came
/// after it was), nothing else left. The signal is sent once `run.json` says
/// complete; a run that ended before it is tried again.
#[test]
fn a_signal_while_the_trace_is_written_leaves_no_part_of_it() {
    use std::os::unix::process::ExitStatusExt as _;
    let dir = tmpdir("signal-trace");
    let trace = dir.join("t.json");
    let mut signalled = 0;
    for _ in 0..5 {
        let out = dir.join("o");
        let mut c = cmd(&out, &["--t-sim", "1000"]);
        let mut run = c
            .arg("--trace")
            .arg(&trace)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        let complete = || {
            std::fs::read_to_string(out.join("run.json")).is_ok_and(|m| m.contains("\"complete\""))
        };
        while !complete() {
            assert!(Instant::now() < deadline, "the run did not complete");
            if run.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = Command::new("kill")
            .args(["-15".to_string(), run.id().to_string()])
            .status();
        let o = run.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        let left: Vec<String> = std::fs::read_dir(&*dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "o" && n != "t.json")
            .collect();
        assert!(
            left.is_empty(),
            "left beside the trace: {left:?} ({:?}: {err})",
            o.status
        );
        if trace.exists() {
            // Whole: the merged trace, which its reader takes.
            let text = std::fs::read(&trace).unwrap();
            serde_json::from_slice::<serde_json::Value>(&text).unwrap();
        }
        if o.status.signal() == Some(15) {
            assert!(
                err.contains("brunel: error: stopped by SIGTERM while "),
                "{err}"
            );
            signalled += 1;
            break;
        }
        assert!(o.status.success(), "{:?}: {err}", o.status);
        let _ = std::fs::remove_file(&trace);
    }
    assert!(signalled > 0, "no run was signalled before it ended");
}

/// `--trace FILE` under `hpc run --trace F` (which sets HPC_TRACE): both
/// ask for the rank's timeline; the flag took it and `hpc run` then said that
/// no rank recorded one, status 125, after the whole run. Refused before it.
#[test]
fn a_trace_flag_beside_the_launcher_s_trace_is_refused() {
    let dir = tmpdir("trace-both");
    let trace = dir.join("t.json");
    let folder = dir.join("hpc-trace");
    let mut c = cmd(&dir.join("out"), &["--t-sim", "5"]);
    c.arg("--trace")
        .arg(&trace)
        .env(hpc_runtime::env::TRACE, &folder);
    let err = refused(&c.output().unwrap());
    assert!(
        err.contains(&format!(
            "--trace {} and {}={} (which `hpc run --trace` sets) both ask for this rank's timeline",
            trace.display(),
            hpc_runtime::env::TRACE,
            folder.display()
        )),
        "{err}"
    );
    assert!(!trace.exists() && !dir.join("out").exists());
}

#[test]
fn a_trace_onto_a_fifo_or_a_directory_is_refused_before_the_run_and_left_alone() {
    // A rename over such a name replaced it (`--trace /dev/full` made the device a
    // plain file); a FIFO and a directory stand for it here.
    let dir = tmpdir("trace-special");
    let fifo = dir.join("fifo");
    hpc_test_support::mkfifo(&fifo);
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    for (target, kind) in [(&fifo, "a FIFO"), (&dir.join("sub"), "a directory")] {
        let t = Instant::now();
        let mut c = cmd(&dir.join("out"), &["--t-sim", "5", "--no-spikes"]);
        c.arg("--trace").arg(target);
        let err = refused(&c.output().unwrap());
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        assert!(
            err.contains("--trace") && err.contains(&format!("it is {kind}, not a regular file")),
            "{err}"
        );
        assert!(!dir.join("out").join("spikes.spk").exists());
    }
    use std::os::unix::fs::FileTypeExt as _;
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert!(dir.join("sub").is_dir());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A trace FILE that another run is writing (claimed) is refused before the run,
/// naming that run, instead of the last run to finish silently replacing the
/// other's; so is a name ending in `/` (a directory not made yet), which was made
/// and then failed at the end.
#[test]
fn a_trace_another_run_writes_or_a_directory_name_is_refused_before_the_run() {
    let dir = tmpdir("trace-claimed");
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.json");
    let claim = hpc_io::rundir::FileClaim::take(&trace, "the other run").unwrap();
    let mut c = cmd(&dir.join("out"), &["--t-sim", "5", "--no-spikes"]);
    c.arg("--trace").arg(&trace);
    let err = refused(&c.output().unwrap());
    assert!(err.contains("is being written by the other run"), "{err}");
    drop(claim);
    let mut c = cmd(&dir.join("out"), &["--t-sim", "5", "--no-spikes"]);
    c.arg("--trace").arg(format!("{}/new/", dir.display()));
    let err = refused(&c.output().unwrap());
    assert!(err.contains("names a directory"), "{err}");
    assert!(!dir.join("new").exists() && !dir.join("out").join("run.json").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A trace at the name of one of the run's own files in `--out` (`spikes.spk`,
/// `run.json`), or of its `--config` or `--reference`, is refused before the
/// run: the trace, written at the end, replaced the spike file of a run that
/// ended with status 0, the manifest (the next run into the directory was
/// refused for files no run wrote), and the parameter file (pass 15).
#[test]
fn a_trace_at_a_file_the_run_reads_or_writes_is_refused_before_the_run() {
    let dir = tmpdir("trace-collides");
    let out = dir.join("out");
    ok(&cmd(&out, &["--t-sim", "5"]).output().unwrap());
    let spikes = std::fs::read(out.join("spikes.spk")).unwrap();
    let config = dir.join("p.toml");
    std::fs::write(&config, "t_sim = 5.0\n").unwrap();
    for (trace, flag) in [
        (out.join("spikes.spk"), "--out"),
        (out.join("run.json"), "--out"),
        (dir.join("out/./summary.json"), "--out"),
        (config.clone(), "--config"),
    ] {
        let mut c = cmd(&out, &["--t-sim", "5"]);
        c.arg("--config").arg(&config).arg("--trace").arg(&trace);
        let err = refused(&c.output().unwrap());
        assert!(
            err.contains("--trace") && err.contains(flag),
            "{trace:?}: {err}"
        );
    }
    assert_eq!(std::fs::read(out.join("spikes.spk")).unwrap(), spikes);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "t_sim = 5.0\n");
    // In the checkpoint the run resumes from: its manifest was replaced, and the
    // checkpoint could not be read again.
    let ck = dir.join("ck");
    ok(&cmd(
        &dir.join("first"),
        &[
            "--t-sim",
            "5",
            "--checkpoint-every",
            "2",
            "--stop-at",
            "2",
            "--checkpoint-dir",
            ck.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap());
    let manifest = ck.join("step-0000000020").join("manifest.json");
    let before = std::fs::read(&manifest).unwrap();
    let mut c = cmd(&dir.join("second"), &["--t-sim", "5"]);
    c.arg("--restart").arg(&ck).arg("--trace").arg(&manifest);
    let err = refused(&c.output().unwrap());
    assert!(
        err.contains("--trace") && err.contains("--restart"),
        "{err}"
    );
    assert_eq!(std::fs::read(&manifest).unwrap(), before);
    // At the checkpoint directory itself, which the run makes after the check
    // (the default OUT/checkpoints, a --checkpoint-dir not made yet): pass 16
    // ran the whole run, then "cannot replace …: it is a directory".
    let third = dir.join("third");
    std::fs::create_dir_all(&third).unwrap();
    for (trace, extra) in [
        (third.join("checkpoints"), None),
        (dir.join("new-ck"), Some(dir.join("new-ck"))),
    ] {
        let mut c = cmd(&third, &["--t-sim", "5", "--checkpoint-every", "2"]);
        if let Some(d) = extra {
            c.arg("--checkpoint-dir").arg(d);
        }
        c.arg("--trace").arg(&trace);
        let err = refused(&c.output().unwrap());
        assert!(
            err.contains("--trace") && err.contains("--checkpoint-dir"),
            "{trace:?}: {err}"
        );
        assert!(!third.join("spikes.spk").exists(), "{trace:?}: the run ran");
    }
    // At --out itself, not made yet.
    let fourth = dir.join("fourth");
    let mut c = cmd(&fourth, &["--t-sim", "5"]);
    c.arg("--trace").arg(&fourth);
    let err = refused(&c.output().unwrap());
    assert!(err.contains("--trace") && err.contains("--out"), "{err}");
    assert!(!fourth.join("spikes.spk").exists(), "the run ran");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--reference` is compared with the run in report.html: with `--no-plot` or
/// `--no-spikes` no report is written, and the reference was read, checked and
/// dropped without a word (pass 15). Now it is still checked, with a warning.
#[test]
fn a_reference_with_no_report_to_compare_it_in_is_said_to_be_only_checked() {
    let dir = tmpdir("reference-no-report");
    let reference = dir.join("nest.json");
    std::fs::write(
        &reference,
        "{\"order\": 100, \"ce\": 40, \"ci\": 10, \"v_reset\": 0.0, \"t_sim_ms\": 5.0, \
         \"rate_hz\": 30.0, \"cv_isi\": 0.1}\n",
    )
    .unwrap();
    for flag in ["--no-plot", "--no-spikes"] {
        let out = dir.join(flag);
        let mut c = Command::new(BRUNEL);
        c.args(MODEL)
            .args(["--t-sim", "5", "--quiet", "--no-pin", flag, "--out"])
            .arg(&out)
            .arg("--reference")
            .arg(&reference)
            .env("HPC_LOG", "warn");
        let err = ok(&c.output().unwrap());
        assert!(
            err.contains("--reference is compared with the run in report.html")
                && err.contains(&format!("which {flag} leaves out")),
            "{flag}: {err}"
        );
        assert!(!out.join("report.html").exists(), "{flag}");
    }
    // Still checked: one of another network is refused.
    std::fs::write(&reference, "{\"order\": 7}\n").unwrap();
    let mut c = cmd(&dir.join("bad"), &["--t-sim", "5"]);
    c.arg("--reference").arg(&reference);
    let err = refused(&c.output().unwrap());
    assert!(err.contains("`order` is 7"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_checkpoint_interval_off_the_step_is_refused_naming_the_flag_and_the_step() {
    let dir = tmpdir("interval");
    let o = cmd(
        &dir.join("out"),
        &["--t-sim", "50", "--checkpoint-every", "0.01"],
    )
    .output()
    .unwrap();
    let err = refused(&o);
    assert!(
        err.contains(
            "--checkpoint-every 0.01 ms is not a positive multiple of the time step dt = 0.1 ms"
        ),
        "{err}"
    );
    assert!(!dir.join("out/checkpoints").exists());
    // So is a stop between two steps.
    let o = cmd(&dir.join("out"), &["--t-sim", "50", "--stop-at", "10.05"])
        .output()
        .unwrap();
    let err = refused(&o);
    assert!(
        err.contains("--stop-at 10.05 ms is not a positive multiple"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_restart_of_another_model_names_the_parameter_that_differs() {
    let dir = tmpdir("model");
    let out = dir.join("out");
    ok(&cmd(
        &out,
        &[
            "--t-sim",
            "30",
            "--checkpoint-every",
            "10",
            "--stop-at",
            "20",
        ],
    )
    .output()
    .unwrap());
    let ck = out.join("checkpoints");
    let manifest = std::fs::read(out.join("run.json")).unwrap();
    // Into the same directory: refused before anything of the earlier run goes.
    let o = cmd(&out, &["--t-sim", "30", "--g", "6"])
        .arg("--restart")
        .arg(&ck)
        .output()
        .unwrap();
    let err = refused(&o);
    assert!(
        err.contains("is of a different model: g 5.0 -> 6.0"),
        "{err}"
    );
    assert!(err.lines().count() <= 3, "one short message: {err}");
    // An in-degree given where the checkpoint's run took it from epsilon: what
    // that run used, not "ce null -> 50".
    let o = cmd(&out, &["--t-sim", "30", "--ce", "50"])
        .arg("--restart")
        .arg(&ck)
        .output()
        .unwrap();
    let err = refused(&o);
    assert!(
        err.contains("is of a different model: ce (not given: epsilon * NE = ")
            && err.contains(") -> 50"),
        "{err}"
    );
    assert_eq!(std::fs::read(out.join("run.json")).unwrap(), manifest);
    assert!(out.join("spikes.spk.partial").exists() && out.join("summary.json").exists());
    // The check of a checkpoint directory holding these checkpoints says what
    // a restart's says (pass 19: "ce (not given) -> 50", without what that
    // run used).
    let ck_arg = ck.to_str().unwrap();
    let args = [
        "--t-sim",
        "30",
        "--checkpoint-every",
        "10",
        "--checkpoint-dir",
        ck_arg,
    ];
    let o = cmd(&dir.join("other"), &[&args[..], &["--ce", "50"]].concat())
        .output()
        .unwrap();
    let err = refused(&o);
    assert!(
        err.contains("of a different model (ce (not given: epsilon * NE = 40) -> 50:"),
        "{err}"
    );
    // The same network with its in-degree given as epsilon gives it: no
    // other model (it was refused), in the directory's check and in a restart.
    ok(&cmd(&out, &["--t-sim", "30", "--ce", "40"])
        .arg("--restart")
        .arg(&ck)
        .output()
        .unwrap());
    ok(
        &cmd(&dir.join("same"), &[&args[..], &["--ce", "40"]].concat())
            .output()
            .unwrap(),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// An output directory that is, or lies in, a checkpoint's step directory
/// (`--restart D/step-N --out D/step-N`) is refused before anything is made
/// there: the run's files were written among the checkpoint's and went with
/// it when it was removed.
#[test]
fn an_output_directory_in_a_checkpoint_is_refused() {
    let dir = tmpdir("out-in-step");
    let out = dir.join("out");
    ok(&cmd(&out, &["--t-sim", "20", "--checkpoint-every", "10"])
        .output()
        .unwrap());
    let step = out.join("checkpoints").join("step-0000000200");
    let before: Vec<_> = std::fs::read_dir(&step)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    for (target, verb) in [(step.clone(), "is"), (step.join("sub"), "lies in")] {
        let o = cmd(&target, &["--t-sim", "30"])
            .arg("--restart")
            .arg(&step)
            .output()
            .unwrap();
        let err = refused(&o);
        assert!(
            err.contains(&format!(
                "{verb} the checkpoint {}: the run's files would be mixed",
                step.display()
            )),
            "{err}"
        );
    }
    let after: Vec<_> = std::fs::read_dir(&step)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(before, after);
}

#[test]
fn checkpoints_are_pruned_to_the_number_kept() {
    let dir = tmpdir("prune");
    let out = dir.join("out");
    ok(&cmd(&out, &["--t-sim", "60", "--checkpoint-every", "10"])
        .output()
        .unwrap());
    let set = hpc_checkpoint::Checkpoints::new(out.join("checkpoints"));
    // The default keeps the newest 3 of the 6 written.
    assert_eq!(set.steps().unwrap(), [400, 500, 600]);
    let all = dir.join("all");
    ok(&cmd(
        &all,
        &[
            "--t-sim",
            "60",
            "--checkpoint-every",
            "10",
            "--checkpoint-keep",
            "0",
        ],
    )
    .output()
    .unwrap());
    let set = hpc_checkpoint::Checkpoints::new(all.join("checkpoints"));
    assert_eq!(set.steps().unwrap(), [100, 200, 300, 400, 500, 600]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn in_a_multi_rank_run_rank_0_owns_the_directory_and_every_rank_fails_together() {
    use hpc_test_support::{exit_failures, Job};
    let dir = tmpdir("ranks");
    let out = dir.join("out");
    let args = example::args(MODEL, &out, &["--t-sim", "30", "--engine", "thread"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    // Another run holds the directory: both ranks fail, neither waits for the other.
    let holder =
        hpc_io::rundir::RunDir::create(&out, hpc_io::rundir::RunInfo::new("holder")).unwrap();
    let t0 = Instant::now();
    let outs = Job::program(BRUNEL, &args, 2)
        .timeout(Duration::from_secs(20))
        .run();
    assert!(t0.elapsed() < Duration::from_secs(20), "a rank waited");
    let err0 = String::from_utf8_lossy(&outs[0].stderr);
    let err1 = String::from_utf8_lossy(&outs[1].stderr);
    assert_eq!(outs[0].status.code(), Some(1), "{err0}");
    assert_eq!(outs[1].status.code(), Some(1), "{err1}");
    assert!(err0.contains("is in use by"), "{err0}");
    assert!(
        err1.contains("rank 0 could not take the output directory"),
        "{err1}"
    );
    holder.finish(Status::Complete).unwrap();

    // Free: the two-rank run owns it and says so.
    let outs = Job::program(BRUNEL, &args, 2)
        .timeout(Duration::from_secs(20))
        .run();
    assert!(
        exit_failures(&outs).is_empty(),
        "{}",
        exit_failures(&outs).join("\n")
    );
    let m = hpc_io::rundir::inspect(&out).unwrap().unwrap();
    assert_eq!(m.manifest.status, Status::Complete);
    assert_eq!(m.manifest.info.program, "brunel");
    assert_eq!(m.manifest.info.details["ranks"], 2);
    hpc_io::rundir::check_file(&out.join("spikes.spk")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn files_of_the_output_names_that_no_run_wrote_are_refused_and_kept() {
    let dir = tmpdir("foreign");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    for f in ["spikes.spk", "raster.png", "notes.txt"] {
        std::fs::write(out.join(f), "mine").unwrap();
    }
    let err = refused(
        &cmd(&out, &["--t-sim", "20", "--stop-at", "10"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("spikes.spk"), "{err}");
    assert!(err.contains("raster.png"), "{err}");
    assert!(err.contains("choose another output directory"), "{err}");
    for f in ["spikes.spk", "raster.png", "notes.txt"] {
        assert_eq!(std::fs::read(out.join(f)).unwrap(), b"mine", "{f}");
    }
    // A complete run's own files are removed by the next run, which says so.
    let other = dir.join("other");
    ok(&cmd(&other, &["--t-sim", "20"]).output().unwrap());
    let first = hpc_io::rundir::inspect(&other).unwrap().unwrap();
    let o = cmd(&other, &["--t-sim", "20", "--stop-at", "10"])
        .env("HPC_LOG", "info")
        .output()
        .unwrap();
    let err = ok(&o);
    assert!(
        err.contains(&format!("earlier run {}", first.manifest.run_id)),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_fifo_or_a_link_as_run_json_neither_hangs_nor_is_followed() {
    let dir = tmpdir("fifo");
    for (tag, make) in [("fifo", 0), ("zero", 1)] {
        let out = dir.join(tag);
        std::fs::create_dir_all(&out).unwrap();
        let manifest = out.join(hpc_io::rundir::MANIFEST);
        if make == 0 {
            hpc_test_support::mkfifo(&manifest);
        } else {
            std::os::unix::fs::symlink("/dev/zero", &manifest).unwrap();
        }
        let mut child = cmd(&out, &["--t-sim", "20"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("brunel hangs on a {tag} run.json");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        ok(&child.wait_with_output().unwrap());
        assert!(hpc_io::rundir::inspect(&out).unwrap().is_some());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn non_utf8_paths_bad_thread_counts_and_a_full_stderr_are_no_panics() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tmpdir("odd");
    std::fs::create_dir_all(&dir).unwrap();
    // (example::args would make the path UTF-8: the flags are given here.)
    let out = dir.join(std::ffi::OsStr::from_bytes(b"o\xff"));
    let trace = dir.join(std::ffi::OsStr::from_bytes(b"t\xff.json"));
    let o = Command::new(BRUNEL)
        .args(MODEL)
        .args(example::QUIET)
        .args(["--t-sim", "20"])
        .arg("--out")
        .arg(&out)
        .arg("--trace")
        .arg(&trace)
        .env("HPC_LOG", "warn")
        .output()
        .unwrap();
    ok(&o);
    assert!(trace.is_file());
    let m = hpc_io::rundir::inspect(&out).unwrap().unwrap();
    assert!(m.manifest.info.args.iter().any(|a| a.contains("o\u{fffd}")));
    for (threads, want) in [("0", "at least 1"), ("100000", "more than the limit")] {
        let t0 = Instant::now();
        let err = refused(
            &cmd(&dir.join("t"), &["--t-sim", "20", "--threads", threads])
                .output()
                .unwrap(),
        );
        assert!(err.contains(want), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(30));
    }
    // An error to say with stderr on a full device: status 1, no panic.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = Command::new(BRUNEL)
        .args(["--order", "0", "--no-plot", "--out"])
        .arg(dir.join("f"))
        .stderr(full)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    // Parameters finite one by one but not together.
    let err = refused(
        &cmd(&dir.join("j"), &["--t-sim", "20", "--j", "1e308"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("too large together"), "{err}");
    assert!(err.contains("1e308"), "{err}");
    let err = refused(
        &cmd(&dir.join("e"), &["--t-sim", "20", "--eta", "1e300"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("1e") && err.len() < 400, "{err}");
    // A regular file as --out is no directory.
    std::fs::write(dir.join("afile"), "x").unwrap();
    let err = refused(
        &cmd(&dir.join("afile"), &["--t-sim", "20"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("not a directory"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_checkpoint_directory_of_another_model_is_refused_and_kept() {
    let dir = tmpdir("ckown");
    let ck = dir.join("ck");
    let ck_arg = ck.display().to_string();
    let with = |seed: &str, every: &str, out: &str| {
        cmd(
            &dir.join(out),
            &[
                "--t-sim",
                "30",
                "--seed",
                seed,
                "--checkpoint-every",
                every,
                "--checkpoint-dir",
                &ck_arg,
            ],
        )
        .output()
        .unwrap()
    };
    ok(&with("1", "10", "a"));
    let steps = |d: &Path| {
        let mut s: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("step-"))
            .collect();
        s.sort();
        s
    };
    let before = steps(&ck);
    let manifest = ck.join(&before[0]).join(hpc_checkpoint::MANIFEST);
    let first = std::fs::read(&manifest).unwrap();
    // Another model (seed 2) into the same directory: refused, nothing replaced.
    let err = refused(&with("2", "5", "b"));
    assert!(err.contains("of a different model"), "{err}");
    assert!(err.contains("seed 1 -> 2"), "{err}");
    assert!(err.contains("--checkpoint-dir"), "{err}");
    assert_eq!(steps(&ck), before);
    assert_eq!(std::fs::read(&manifest).unwrap(), first);
    // The same model again may rewrite its own (identical) checkpoints.
    ok(&with("1", "10", "c"));
    // While a run writes into it, the directory is locked.
    let lock = hpc_io::rundir::try_lock_file(&ck.join(hpc_spiking::checkpoint::LOCK))
        .unwrap()
        .unwrap();
    let err = refused(&with("1", "10", "d"));
    assert!(err.contains("is in use by"), "{err}");
    drop(lock);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_trace_is_renamed_into_place_not_written_through_a_link() {
    let dir = tmpdir("tracelink");
    std::fs::create_dir_all(&dir).unwrap();
    let victim = dir.join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let trace = dir.join("trace.json");
    std::os::unix::fs::symlink(&victim, &trace).unwrap();
    let mut c = cmd(&dir.join("out"), &["--t-sim", "20"]);
    c.arg("--trace").arg(&trace);
    ok(&c.output().unwrap());
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    assert!(std::fs::symlink_metadata(&trace).unwrap().is_file());
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    assert!(v.is_array() || v.is_object());
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A usage error quoting a value of 100,000 characters is cut, and `--help`
/// on a full device is an error, not a silent 0.
#[test]
fn the_usage_text_is_cut_and_its_write_checked() {
    hpc_test_support::example::assert_usage_is_cut_and_checked(BRUNEL, &["BIG"]);
}

/// The delay rows of a network started with `--allow-oversize` where the
/// memory available cannot hold them (`MemAvailable` of 1 KiB, a copy of
/// `/proc/meminfo` mounted over it): an error naming the rows, status 1,
/// nothing of the run written; they were made by `DelayRing::new`, which
/// panicked ("hpc_spiking::ring: 16 rows … more than the 1024 bytes of memory
/// available"), status 101.
#[test]
fn delay_rows_beyond_the_memory_available_are_an_error_not_a_panic() {
    let dir = tmpdir("rings");
    let out = dir.join("out");
    let args = example::args(
        MODEL,
        &out,
        &["--t-sim", "10", "--threads", "1", "--allow-oversize"],
    );
    let argv: Vec<&str> = std::iter::once(BRUNEL)
        .chain(args.iter().map(String::as_str))
        .collect();
    let Some(o) = example::run_with_mem_available(&dir, 1, &argv) else {
        return;
    };
    let err = refused(&o);
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("16 rows (delays up to 15 steps) of 500 neurons"),
        "{err}"
    );
}
