//! `hpc run` launches real processes: ranks, sizes, failures, signals, leftovers.

use std::collections::BTreeSet;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use hpc_test_support::output;

const HPC: &str = env!("CARGO_BIN_EXE_hpc");

fn marker() -> String {
    format!(
        "hpc-test-{}",
        hpc_runtime::random_u64().expect("random bytes from the kernel")
    )
}

fn hpc(args: &[&str]) -> Output {
    Command::new(HPC).args(args).output().expect("run hpc")
}

/// `hpc run -n <n> --timeout <timeout> -- <cmd>`.
fn timed_run(n: &str, timeout: &str, cmd: &[&str]) -> Command {
    let mut c = Command::new(HPC);
    c.args(["run", "-n", n, "--timeout", timeout, "--"])
        .args(cmd);
    c
}

/// [`timed_run`], run to its end.
fn timed_output(n: &str, timeout: &str, cmd: &[&str]) -> Output {
    timed_run(n, timeout, cmd).output().expect("run hpc")
}

/// `hpc run -n <n> <run_args> -- sh -c <script>`, run to its end.
fn sh_job(n: &str, run_args: &[&str], script: &str) -> Output {
    let mut args = vec!["run", "-n", n];
    args.extend_from_slice(run_args);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    hpc(&args)
}

/// `hpc run -n <n> -x HPC_MARK=<marker> -- <cmd>`: a job whose processes
/// [`processes_with`] finds by the marker.
fn marked_run(n: &str, marker: &str, cmd: &[&str]) -> Command {
    let mut c = Command::new(HPC);
    c.args(["run", "-n", n, "-x", &format!("HPC_MARK={marker}"), "--"])
        .args(cmd);
    c
}

/// [`marked_run`] started with the given standard output and error.
fn spawn_marked(
    n: &str,
    marker: &str,
    cmd: &[&str],
    stdout: impl Into<Stdio>,
    stderr: Stdio,
) -> std::process::Child {
    marked_run(n, marker, cmd)
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// [`marked_run`] of `sh -c <script>` with a fresh marker, run to its end: the
/// marker, the output and how long it took.
fn marked_sh(n: &str, script: &str) -> (String, Output, Duration) {
    let m = marker();
    let t = Instant::now();
    let out = marked_run(n, &m, &["sh", "-c", script])
        .output()
        .expect("run hpc");
    (m, out, t.elapsed())
}

/// The standard error of `child` (piped), read to its end.
fn stderr_of(child: &mut std::process::Child) -> String {
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("a piped stderr"), &mut err)
        .expect("reading the standard error");
    err
}

/// Processes whose environment carries `marker` (ranks and anything they started).
fn processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    let me = std::process::id();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) {
            if env.windows(marker.len()).any(|w| w == marker.as_bytes()) {
                // Zombies have no environ to speak of; a readable one means alive.
                found.push(pid);
            }
        }
    }
    found
}

/// [`marked_run`] of `sh -c <script>` with a fresh marker and its standard output
/// discarded, started: returns once at least `count` processes carry the marker (10 s
/// at most, else the test fails), with the marker, the launcher and those processes.
fn started_sh(
    n: &str,
    script: &str,
    count: usize,
    stderr: Stdio,
) -> (String, std::process::Child, Vec<u32>) {
    let m = marker();
    let child = spawn_marked(n, &m, &["sh", "-c", script], Stdio::null(), stderr);
    let found = processes_started(&m, count);
    (m, child, found)
}

/// The processes that carry `marker`, once there are at least `count` of them (10 s
/// at most, else the test fails).
fn processes_started(marker: &str, count: usize) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = processes_with(marker);
        if found.len() >= count {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "the job's processes did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn assert_no_leftovers(marker: &str) {
    // Killed processes may take a moment to be reaped by init.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left = processes_with(marker);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "leftover processes: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn selftest_json(n: usize, extra: &[&str]) -> Vec<serde_json::Value> {
    selftest_json_with(n, extra, &[])
}

/// `hpc run -n N <run_args> -- hpc selftest --json <selftest_args>`: one JSON per rank.
fn selftest_json_with(
    n: usize,
    run_args: &[&str],
    selftest_args: &[&str],
) -> Vec<serde_json::Value> {
    let n_s = n.to_string();
    let mut args = vec!["run", "-n", &n_s];
    args.extend_from_slice(run_args);
    args.extend_from_slice(&["--", HPC, "selftest", "--json", "--expect-size", &n_s]);
    args.extend_from_slice(selftest_args);
    let out = hpc(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "hpc run -n {n} failed: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| {
            let (tag, json) = l.split_once("] ").expect("tagged line");
            let v: serde_json::Value = serde_json::from_str(json).expect("json line");
            let tag_rank: usize = tag.trim_start_matches('[').trim().parse().unwrap();
            assert_eq!(
                v["rank"].as_u64().unwrap() as usize,
                tag_rank,
                "tag matches rank"
            );
            v
        })
        .collect()
}

#[test]
fn ranks_are_distinct_and_sizes_right() {
    for n in [1usize, 2, 4, 7] {
        let rows = selftest_json(n, &[]);
        assert_eq!(rows.len(), n);
        let ranks: BTreeSet<u64> = rows.iter().map(|r| r["rank"].as_u64().unwrap()).collect();
        assert_eq!(ranks, (0..n as u64).collect());
        for r in &rows {
            assert_eq!(r["size"].as_u64(), Some(n as u64));
            assert_eq!(r["local_size"].as_u64(), Some(n as u64));
            assert_eq!(r["nodes"].as_u64(), Some(1));
            assert!(r["bootstrap"]
                .as_str()
                .unwrap()
                .starts_with("hpc run launcher"));
        }
    }
}

#[test]
fn emulated_nodes_split_ranks() {
    let rows = selftest_json(6, &["--nodes", "2"]);
    for r in &rows {
        let rank = r["rank"].as_u64().unwrap();
        assert_eq!(r["nodes"].as_u64(), Some(2));
        assert_eq!(r["node"].as_u64(), Some(rank / 3));
        assert_eq!(r["local_rank"].as_u64(), Some(rank % 3));
        assert_eq!(r["local_size"].as_u64(), Some(3));
        assert_eq!(
            r["node_name"].as_str().unwrap(),
            format!("node{}", rank / 3)
        );
    }
}

/// Hostile-user pass 15: blocks of `ceil(n / K)` ranks left emulated nodes
/// empty: `-n 5 --nodes 4` made 3 nodes ("3 nodes, expected 4"), `-n 7 --nodes 6`
/// made 4. Every node now has a block, the blocks' sizes differing by at most one.
#[test]
fn every_emulated_node_gets_ranks() {
    for (n, k, sizes) in [(5, 4, vec![2, 1, 1, 1]), (7, 6, vec![2, 1, 1, 1, 1, 1])] {
        let rows = selftest_json(n, &["--nodes", &k.to_string()]);
        let mut per_node = vec![0u64; k];
        for r in &rows {
            assert_eq!(r["nodes"].as_u64(), Some(k as u64), "-n {n} --nodes {k}");
            per_node[r["node"].as_u64().unwrap() as usize] += 1;
            assert_eq!(
                r["local_size"].as_u64(),
                Some(sizes[r["node"].as_u64().unwrap() as usize])
            );
        }
        assert_eq!(per_node, sizes, "-n {n} --nodes {k}");
    }
}

/// Hostile-user pass 15: a node name longer than the coordinator's hello failed
/// as "the launcher at ... is unreachable: failed to fill whole buffer during init
/// (the launcher stopped?)", naming neither the variable nor why; an empty program
/// was "program not found in PATH: " (status 125).
#[test]
fn a_node_name_too_long_and_an_empty_program_are_named() {
    let long = format!("HPC_NODE_NAME={}", "n".repeat(5000));
    let o = hpc(&["run", "-n", "2", "-x", &long, "--", HPC, "selftest"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("HPC_NODE_NAME=")
            && err.contains("is 5000 bytes long: a node name is at most 1024"),
        "{err}"
    );
    assert!(
        !err.contains("unreachable") && !err.contains("    "),
        "{err}"
    );
    let o = hpc(&["run", "-n", "1", "--", ""]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("the program to run is empty"), "{err}");
}

/// Hostile-user pass 15: `--timeout 0.001`, the least `hpc run` accepts, failed
/// every job, one rank alone too, as a lost launcher: the coordinator gave up
/// each write to a rank with under a millisecond left (half the timeout) before
/// trying it, and each rank read "the launcher at ... is unreachable: failed to
/// fill whole buffer during init (the launcher stopped?)". A rank now joins,
/// or (its answer taking more than the millisecond) its timeout says so. (With
/// more ranks a rank that times out ends the job, and who learns what first is a
/// race at this timeout: one rank is what is checked.)
#[test]
fn the_least_timeout_accepted_is_a_timeout_not_a_lost_launcher() {
    for n in ["1", "1", "1"] {
        let o = hpc(&["run", "-n", n, "--timeout", "0.001", "--", HPC, "selftest"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success() || err.contains("timed out after 1ms"),
            "-n {n}: {err}"
        );
        assert!(
            !err.contains("the launcher stopped?")
                && !err.contains("closed the connection before welcoming")
                && !err.contains("the rank does not read"),
            "-n {n}: {err}"
        );
    }
}

/// Hostile-user pass 15: a value of 100,000 characters was echoed whole: 100 kB
/// messages from `hpc run` (`HPC_TIMEOUT`, `HPC_THREADS`, `HPC_BOOTSTRAP`), 400
/// kB of warnings from two ranks (`HPC_SPIN_US`, twice per warning), and
/// `--log` the same. Each is named with its first characters.
#[test]
fn huge_values_are_named_in_a_short_line() {
    let long = "x".repeat(100_000);
    for var in ["HPC_TIMEOUT", "HPC_THREADS", "HPC_BOOTSTRAP"] {
        let o = Command::new(HPC)
            .args(["run", "-n", "1", "--", "true"])
            .env(var, &long)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{var}");
        assert!(
            err.contains(var) && err.len() < 400,
            "{var}: {} bytes",
            err.len()
        );
    }
    // `HPC_AGENT_WAKE`'s warning held the value whole in a field of its own.
    for var in ["HPC_SPIN_US", "HPC_AGENT_WAKE"] {
        let o = Command::new(HPC)
            .args([
                "run",
                "-n",
                "2",
                "--",
                HPC,
                "selftest",
                "--collectives",
                "thread",
            ])
            .env(var, &long)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{}", &err[..err.len().min(500)]);
        assert!(
            err.contains(var) && err.len() < 2000,
            "{var}: {} bytes",
            err.len()
        );
    }
    let o = hpc(&["--log", &format!("[{long}"), "doctor", "--json"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("is not a log filter") && err.len() < 1000,
        "{} bytes",
        err.len()
    );
}

#[test]
fn output_is_tagged_unless_asked_not_to() {
    let out = sh_job("2", &[], "echo out$HPC_RANK; echo err$HPC_RANK >&2");
    assert!(out.status.success());
    let so = String::from_utf8_lossy(&out.stdout);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(so.contains("[0] out0") && so.contains("[1] out1"), "{so}");
    assert!(se.contains("[0] err0") && se.contains("[1] err1"), "{se}");
    let out = sh_job("2", &["--no-tag"], "echo plain$HPC_RANK");
    let so = String::from_utf8_lossy(&out.stdout);
    let mut lines: Vec<&str> = so.lines().collect();
    lines.sort();
    assert_eq!(lines, vec!["plain0", "plain1"]);
}

/// Hostile pass 21: `--no-tag` added a newline after a rank's last line that
/// had none and inside every line longer than 64 KiB: a rank's data
/// (`hpc run -n 1 --no-tag -- ./app > out.bin`) came out changed, status 0.
/// Untagged, the bytes pass unchanged.
#[test]
fn untagged_output_is_passed_on_unchanged() {
    let out = sh_job(
        "1",
        &["--no-tag"],
        "head -c 200000 /dev/zero | tr '\\0' a; printf '\\nx\\0y'",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut want = vec![b'a'; 200_000];
    want.extend_from_slice(b"\nx\0y");
    assert_eq!(out.stdout.len(), want.len());
    assert!(out.stdout == want, "the output was changed");
    // Tagged, every piece is a line of its own, as before.
    let out = sh_job("1", &[], "printf 'no end'");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "[0] no end\n");
}

/// Hostile pass 21: once every rank had exited, `hpc run` waited 1 s for the
/// output still on its way, then exited 0 without it: a reader that paused
/// (`hpc run … | less` at a page's end) lost the end of the output (38,528
/// of the last 100,000 bytes here). Output that `hpc run`'s own output has
/// not taken yet is waited for; all of it arrives.
#[test]
fn output_a_slow_reader_has_not_taken_yet_is_not_lost() {
    use std::io::Read as _;
    let mut child = Command::new(HPC)
        .args(["run", "-n", "1", "--no-tag", "--", "sh", "-c"])
        .arg("head -c 10000000 /dev/zero")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut first = vec![0u8; 9_900_000];
    out.read_exact(&mut first).unwrap();
    // The reader pauses: the rank writes its last bytes into the pipes and ends.
    std::thread::sleep(Duration::from_secs(3));
    let mut rest = Vec::new();
    out.read_to_end(&mut rest).unwrap();
    let done = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&done.stderr);
    assert_eq!(rest.len(), 100_000, "{err}");
    assert!(done.status.success(), "{err}");
}

/// The wait above for a reader that does not read stops at
/// `--time-limit`: the job ended in time, its output not taken, `hpc run`
/// waited for its reader without end. It ends at the limit with 124.
#[test]
fn output_a_reader_never_takes_is_not_waited_for_past_the_time_limit() {
    let mut child = Command::new(HPC)
        .args(["run", "-n", "1", "--no-tag", "--time-limit", "3", "--"])
        .args(["sh", "-c", "head -c 100000 /dev/zero"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Held open, never read: the rank's 100 kB fit the pipes and the
    // forwarder's line, so the rank ends at once, the output not taken.
    let _out = child.stdout.take().unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if t.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = stderr_of(&mut child);
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(124),
        "after {:?}: {err}",
        t.elapsed()
    );
    assert!(
        err.contains("time limit reached while the ranks' output was still being written"),
        "{err}"
    );
}

/// The wait for a reader that does not read ends at a signal: Ctrl-C after
/// the job had ended, its output not taken, was ignored and `hpc run` waited on
/// (while this branch was written: the wait had no bound then). It ends with
/// 128 + SIGINT.
#[test]
fn a_signal_ends_the_wait_for_a_reader_that_does_not_read() {
    let mut child = Command::new(HPC)
        .args(["run", "-n", "1", "--no-tag", "--"])
        .args(["sh", "-c", "head -c 100000 /dev/zero"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _out = child.stdout.take().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: a signal to the child this test started and has not reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if t.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(128 + libc::SIGINT),
        "after {:?}",
        t.elapsed()
    );
}

#[test]
fn failing_rank_stops_the_job_with_its_code() {
    let (m, out, took) = marked_sh(
        "4",
        "if [ \"$HPC_RANK\" = 2 ]; then sleep 0.3; exit 3; fi; sleep 60",
    );
    assert_eq!(out.status.code(), Some(3), "exit code of the failing rank");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rank 2") && err.contains("exited with code 3"),
        "{err}"
    );
    assert_no_leftovers(&m);
}

#[test]
fn killed_rank_stops_the_job() {
    let (m, out, took) = marked_sh(
        "4",
        "if [ \"$HPC_RANK\" = 1 ]; then sleep 0.3; kill -9 $$; fi; sleep 60 & wait",
    );
    assert!(took < Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(128 + 9));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rank 1") && err.contains("SIGKILL"), "{err}");
    assert_no_leftovers(&m);
}

#[test]
fn survivors_get_an_error_naming_the_dead_rank() {
    let out = hpc(&[
        "run",
        "-n",
        "3",
        "--",
        HPC,
        "selftest",
        "--fail-rank",
        "1",
        "--exit-code",
        "5",
    ]);
    assert_eq!(out.status.code(), Some(5));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("hpc run: rank 1"), "{all}");
}

#[test]
fn hung_rank_times_out_naming_it() {
    let t = Instant::now();
    let out = timed_output(
        "3",
        "1",
        &[HPC, "selftest", "--fail-rank", "2", "--fail-mode", "hang"],
    );
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("still waiting for rank(s) 2"), "{err}");
}

#[test]
fn sigint_stops_all_ranks() {
    let (m, mut child, _) = started_sh("3", "sleep 60", 3, Stdio::piped());
    // SAFETY: plain syscall on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let t = Instant::now();
    let status = child.wait().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(status.code(), Some(130));
    assert_no_leftovers(&m);
}

#[test]
fn bad_input_is_refused_clearly() {
    for (args, needle) in [
        (vec!["run", "-n", "0", "--", "true"], "at least 1"),
        (
            vec!["run", "-n", "2", "--", "/no/such/program"],
            "program not found",
        ),
        (
            vec!["run", "-n", "2", "--", "no-such-program-in-path"],
            "not found in PATH",
        ),
        (
            vec!["run", "-n", "1000000", "--", "true"],
            "exceeds the limit",
        ),
        (
            vec!["run", "-n", "3", "--nodes", "4", "--", "true"],
            "--nodes",
        ),
        (
            vec!["run", "-n", "2", "-x", "NOEQUALS", "--", "true"],
            "KEY=VALUE",
        ),
    ] {
        let t = Instant::now();
        let out = hpc(&args);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(t.elapsed() < Duration::from_secs(5));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn core_binding_gives_disjoint_cpus() {
    let out = sh_job(
        "2",
        &["--bind", "core"],
        "grep Cpus_allowed_list /proc/self/status; echo set=$HPC_CPUSET",
    );
    assert!(out.status.success());
    let so = String::from_utf8_lossy(&out.stdout);
    let ncpu = std::thread::available_parallelism().unwrap().get();
    if ncpu >= 2 {
        let lists: BTreeSet<String> = so
            .lines()
            .filter(|l| l.contains("Cpus_allowed_list"))
            .map(|l| l.split_whitespace().last().unwrap().to_string())
            .collect();
        assert_eq!(lists.len(), 2, "{so}");
    }
    assert!(so.contains("set="), "{so}");
}

/// `--show-placement` under the default `--bind none` printed nothing, status 0:
/// the flag asked for was ignored without a word.
#[test]
fn show_placement_says_so_when_nothing_is_placed() {
    for bind in ["none", "core"] {
        let out = sh_job("2", &["--bind", bind, "--show-placement"], "true");
        let se = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{se}");
        if bind == "none" {
            assert!(se.contains("no placement table: --bind none"), "{se}");
        } else {
            assert!(se.contains("rank  cores"), "{se}");
        }
    }
}

#[test]
fn help_reads_like_a_tool() {
    let out = hpc(&["--help"]);
    let s = String::from_utf8_lossy(&out.stdout);
    for sub in ["run", "doctor", "topo", "selftest"] {
        assert!(s.contains(sub), "{s}");
    }
    let out = hpc(&["run", "--help"]);
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("--bind") && s.contains("Examples"), "{s}");
}

#[test]
fn transport_uses_shm_within_and_tcp_across_nodes() {
    let out = hpc(&[
        "run",
        "-n",
        "4",
        "--nodes",
        "2",
        "--",
        HPC,
        "selftest",
        "--json",
        "--rounds",
        "1",
        "--transport",
    ]);
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{so}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut seen = 0;
    for line in so.lines() {
        let Some((_, json)) = line.split_once("] ") else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
            continue;
        };
        let me = v["rank"].as_u64().unwrap();
        for (peer, backend) in v["transport"].as_object().expect("transport report") {
            let peer: u64 = peer.parse().unwrap();
            let want = if peer / 2 == me / 2 { "shm" } else { "tcp" };
            assert_eq!(backend.as_str(), Some(want), "rank {me} -> {peer}");
        }
        seen += 1;
    }
    assert_eq!(seen, 4);
}

#[test]
fn collectives_engines_run_under_the_launcher() {
    for engine in ["inline", "thread"] {
        let all = selftest_json_with(3, &[], &["--collectives", engine]);
        for r in &all {
            assert_eq!(r["collectives"]["engine"], engine, "{r}");
        }
    }
    // With a reserved progress core, the Thread engine's agent is pinned to it.
    let all = selftest_json_with(
        2,
        &["--bind", "core", "--progress", "1", "--oversubscribe"],
        &["--collectives", "thread"],
    );
    for r in &all {
        let note = r["collectives"]["progress"].as_str().unwrap_or_default();
        assert!(note.contains("pinned to CPUs"), "{r}");
    }
}

#[test]
fn proxy_flag_serves_the_proxy_engine_from_hpc() {
    // `hpc run --proxy` starts `hpc proxy` as the proxy (without it, `hpc` serves
    // as its own proxy: see proxy_selftest_serves_without_hpc_run_proxy_and_leaves_no_board).
    let all = selftest_json_with(3, &["--proxy"], &["--collectives", "proxy"]);
    for r in &all {
        assert_eq!(r["collectives"]["engine"], "proxy", "{r}");
    }
    // On 2 emulated nodes, `hpc proxy` serves each node and the proxies connect.
    let all = selftest_json_with(3, &["--proxy", "--nodes", "2"], &["--collectives", "proxy"]);
    for r in &all {
        assert_eq!(r["collectives"]["engine"], "proxy", "{r}");
        let note = r["collectives"]["progress"].as_str().unwrap_or_default();
        assert!(
            note.contains("other nodes through the proxies over tcp"),
            "{r}"
        );
    }
    // By hand, `hpc proxy` explains itself.
    let out = hpc(&["proxy"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("hpc run --proxy"));
}

/// `hpc selftest --every-algorithm`: the engines' conformance check (every
/// collective, every algorithm, against the simulator) under the launcher, with
/// the Proxy engine across 2 emulated nodes in both placements. A job that ends
/// normally must not make a DPU proxy believe a rank of the other node died (a
/// rank's detach racing its exit did, at the end of one run in two).
#[test]
fn every_algorithm_agrees_with_the_simulator_through_the_proxies() {
    for placement in ["host", "dpu"] {
        let out = Command::new(HPC)
            .args(["run", "-n", "4", "--nodes", "2", "--proxy", "--", HPC])
            .args([
                "selftest",
                "--json",
                "--collectives",
                "proxy",
                "--every-algorithm",
            ])
            .env("HPC_COLL_PROXY_PLACEMENT", placement)
            .env("HPC_LOG", "warn")
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{placement}: {stdout}\n{stderr}");
        let rows: Vec<serde_json::Value> = stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l.split_once("] ")?.1).ok())
            .collect();
        assert_eq!(rows.len(), 4, "{placement}: {stdout}");
        for r in &rows {
            let every = &r["collectives"]["every_algorithm"];
            assert_eq!(every["algorithms"], 9, "{placement}: {r}");
            // 11 collectives at 2 sizes by default, plus those of 8 algorithms that
            // have a schedule, plus 11 in flight at once.
            assert!(every["checks"].as_u64().unwrap() >= 40, "{placement}: {r}");
            assert_eq!(
                every["checks"],
                rows[0]["collectives"]["every_algorithm"]["checks"]
            );
        }
        assert!(
            !stderr.contains("died") && !stdout.contains("died"),
            "{placement}: {stderr}"
        );
    }
}

/// Waits for `child` at most `limit`; kills it and fails the test if it takes longer.
fn wait_bounded(
    child: &mut std::process::Child,
    limit: Duration,
    what: &str,
) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_broken_stdout_pipe_ends_the_job_with_141() {
    // `hpc run -n 2 -- yes | head -1`
    use std::io::BufRead;
    let m = marker();
    let mut child = spawn_marked("2", &m, &["yes"], Stdio::piped(), Stdio::piped());
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.ends_with("] y\n"), "{first:?}");
    // The reader goes away, as `head -1` does.
    let status = wait_bounded(&mut child, Duration::from_secs(10), "hpc run | head -1");
    assert_eq!(status.code(), Some(141));
    // As every subcommand: 141 without a message (the docs promise it).
    let err = stderr_of(&mut child);
    assert!(!err.contains("closed pipe"), "{err}");
    assert_no_leftovers(&m);
}

#[test]
fn time_values_are_checked_before_anything_starts() {
    let dir = hpc_test_support::tmpdir("hpc-time", "");
    let touched = dir.join("started");
    let touch = format!("touch {}", touched.display());
    for (flag, value, needle) in [
        ("--timeout", "1e20", "--timeout must be"),
        ("--time-limit", "1e20", "--time-limit must be"),
        ("--kill-grace", "1e20", "--kill-grace must be"),
        ("--timeout", "NaN", "--timeout must be"),
        ("--time-limit", "0", "--time-limit must be"),
        ("--kill-grace", "-1", "--kill-grace must be"),
        ("--timeout", "inf", "--timeout must be"),
        // Below the millisecond the ranks get it in: it would reach them as 0.
        (
            "--timeout",
            "1e-300",
            "--timeout must be a number of seconds of at least 0.001",
        ),
        ("--time-limit", "1e-300", "--time-limit must be"),
        ("--timeout", "0.0009", "--timeout must be"),
        ("--kill-grace", "1e20", "at most 86400 (1 day)"),
    ] {
        let t = Instant::now();
        let out = hpc(&["run", "-n", "2", flag, value, "--", "sh", "-c", &touch]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(
            err.contains(needle) && !err.contains("panicked"),
            "{flag} {value}: {err}"
        );
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(!touched.exists(), "{flag} {value}: a rank was started");
    }
    // The largest accepted values run.
    let out = hpc(&[
        "run",
        "-n",
        "1",
        "--timeout",
        "604800",
        "--time-limit",
        "31622400",
        "--kill-grace",
        "86400",
        "--",
        "true",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigkill_of_hpc_run_leaves_nothing_behind() {
    // Each rank leaves a child in its group and one in a session of its own.
    let script = "setsid sleep 60 & sleep 60 & wait";
    let (m, mut child, _) = started_sh("2", script, 6, Stdio::null());
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_no_leftovers(&m);
}

#[test]
fn a_detached_child_holding_stdout_does_not_keep_the_job_alive() {
    let (m, out, took) = marked_sh("2", "setsid sleep 60 & echo done$HPC_RANK");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(out.status.success());
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(so.contains("[0] done0") && so.contains("[1] done1"), "{so}");
    assert_no_leftovers(&m);
}

/// Waits for `child` with `wait4`: its raw wait status and its peak resident size
/// (KiB), the largest of it and of the descendants it waited for. Only this
/// child's: the test binary's other children (other tests') are not counted.
fn wait_with_rusage(child: &mut std::process::Child) -> (i32, libc::c_long) {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: `wait4` fills the zeroed `rusage` and the status we pass; `pid` is
    // our own child, not yet waited for (the `Child` is never waited for after).
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        let r = libc::wait4(pid, &mut status, 0, &mut ru);
        assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
        ru
    };
    (status, ru.ru_maxrss)
}

#[test]
fn a_line_without_newline_is_cut_not_held() {
    use std::io::Read;
    // Two ranks print 30 MB each without a newline.
    let mut child = Command::new(HPC)
        .args([
            "run",
            "-n",
            "2",
            "--",
            "sh",
            "-c",
            "head -c 30000000 /dev/zero | tr '\\0' x",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    // The launcher's own resource use with its status (`wait4` of its pid): its
    // peak and that of the processes it waited for, the ranks. (`RUSAGE_CHILDREN`
    // counted every child this test binary had waited for, other tests' too,
    // which made the test fail at random under `cargo test`.)
    let (status, peak_kib) = wait_with_rusage(&mut child);
    assert!(status == 0, "hpc run: wait status {status:#x}");
    let (mut xs, mut longest, mut continued) = (0usize, 0usize, 0usize);
    for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        longest = longest.max(line.len());
        let (tag, body) = line.split_at(4);
        assert!(tag == b"[0] " || tag == b"[1] " || tag == b"[0]+" || tag == b"[1]+");
        continued += usize::from(tag[3] == b'+');
        assert!(body.iter().all(|&b| b == b'x'));
        xs += body.len();
    }
    assert_eq!(xs, 60_000_000, "every byte is forwarded");
    assert!(longest <= 4 + 64 * 1024, "a piece of {longest} bytes");
    assert!(
        continued >= 2 * (30_000_000 / (64 * 1024) - 1),
        "{continued}"
    );
    // The largest process of the job (the launcher included) stayed small.
    eprintln!("peak RSS of the largest process of the job: {peak_kib} KiB");
    assert!(peak_kib < 40 * 1024, "{peak_kib} KiB");
}

#[test]
fn output_held_open_outside_the_job_is_waited_for_only_briefly() {
    let (_, mut child, ranks) = started_sh("1", "echo started; sleep 0.5", 1, Stdio::piped());
    let rank = ranks[0];
    // This test process, which is no part of the job, holds the rank's stdout pipe
    // open, so it never reaches end of file.
    let held = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{rank}/fd/1"))
        .unwrap();
    let t = Instant::now();
    let status = wait_bounded(&mut child, Duration::from_secs(10), "hpc run");
    assert!(status.success());
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    let err = stderr_of(&mut child);
    assert!(err.contains("not waiting for it"), "{err}");
    drop(held);
}

/// Runs `hpc run ARGS -- sh -c 'echo PID=$$; exec hpc selftest --collectives proxy'`
/// (each rank prints its pid, then becomes `hpc` under the same pid) and returns the
/// output and the ranks' pids.
fn proxy_selftest(env: &[(&str, &str)], run_args: &[&str]) -> (Output, Vec<u32>) {
    let script = format!("echo PID=$$; exec {HPC} selftest --collectives proxy");
    let mut c = Command::new(HPC);
    c.arg("run")
        .args(run_args)
        .args(["--", "sh", "-c", &script]);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run hpc");
    let text = String::from_utf8_lossy(&out.stdout);
    let pids = text
        .lines()
        .filter_map(|l| l.split("PID=").nth(1))
        .filter_map(|p| p.trim().parse().ok())
        .collect();
    (out, pids)
}

/// The collectives boards (`/dev/shm/hpc-coll-<creator pid>-*`) the given processes
/// created and left behind.
fn boards_of(pids: &[u32]) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/dev/shm").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if pids
            .iter()
            .any(|p| name.starts_with(&format!("hpc-coll-{p}-")))
        {
            found.push(name);
        }
    }
    found
}

#[test]
fn proxy_selftest_serves_without_hpc_run_proxy_and_leaves_no_board() {
    // `hpc` itself serves as the proxy it re-executes (no `--proxy`).
    let (out, pids) = proxy_selftest(&[], &["-n", "2"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert_eq!(pids.len(), 2, "{text}");
    assert_eq!(text.matches("collectives ok: rank").count(), 2, "{text}");
    assert!(text.contains("\"engine\":\"proxy\""), "{text}");
    assert_eq!(boards_of(&pids), Vec::<String>::new(), "{text}");
}

#[test]
fn a_proxy_that_fails_to_start_leaves_no_board_and_a_message() {
    let (out, pids) = proxy_selftest(&[("HPC_COLL_PROXY_CMD", "/bin/false")], &["-n", "2"]);
    let err =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(pids.len(), 2, "{err}");
    assert!(
        err.contains("exited") && err.contains("without serving"),
        "{err}"
    );
    // No error line is empty.
    assert!(
        !err.lines().any(|l| l.trim_end().ends_with("error:")),
        "{err}"
    );
    assert_eq!(boards_of(&pids), Vec::<String>::new(), "{err}");
}

#[test]
fn ranks_killed_during_proxy_set_up_leave_no_board() {
    // The proxy never serves, so rank 0 is still waiting for it, its board created and
    // named, when the time limit kills the ranks (no destructor runs): the launcher,
    // reaping them, removes what they left.
    let (out, pids) = proxy_selftest(
        &[("HPC_COLL_PROXY_CMD", "sleep 30")],
        &["-n", "2", "--time-limit", "2", "--kill-grace", "0.2"],
    );
    let err =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(pids.len(), 2, "{err}");
    assert_eq!(boards_of(&pids), Vec::<String>::new(), "{err}");
}

#[test]
fn output_to_a_full_disk_ends_the_job_with_125_naming_the_stream() {
    // `hpc run -n 2 -- yes > /dev/full`: a rank that never stops printing.
    let m = marker();
    let mut child = spawn_marked("2", &m, &["yes"], output::dev_full(), Stdio::piped());
    let status = wait_bounded(&mut child, Duration::from_secs(10), "hpc run > /dev/full");
    assert_eq!(status.code(), Some(125));
    let err = stderr_of(&mut child);
    assert!(
        err.contains("cannot write the ranks' stdout") && err.contains("No space left"),
        "{err}"
    );
    // Said once, though every rank's forwarder fails the same way.
    assert_eq!(
        err.matches("cannot write the ranks' stdout").count(),
        1,
        "{err}"
    );
    assert_no_leftovers(&m);
    // Ranks that succeed with a line each: the job is not a success either.
    let out = Command::new(HPC)
        .args(["run", "-n", "2", "--", "echo", "hello"])
        .stdout(output::dev_full())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot write the ranks' stdout"), "{err}");
    // Said once, though every rank's forwarder failed.
    assert_eq!(
        err.matches("cannot write the ranks' stdout").count(),
        1,
        "{err}"
    );
}

#[test]
fn a_rank_status_reserved_for_the_launcher_is_named_and_mapped_to_1() {
    for code in ["124", "125"] {
        let out = hpc(&["run", "-n", "2", "--", "sh", "-c", &format!("exit {code}")]);
        assert_eq!(out.status.code(), Some(1), "rank exit {code}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("exited with code {code}"))
                && err.contains(&format!("hpc run keeps {code} for itself")),
            "{err}"
        );
    }
    // Other statuses pass through unchanged.
    let out = hpc(&["run", "-n", "1", "--", "sh", "-c", "exit 123"]);
    assert_eq!(out.status.code(), Some(123));
}

/// Runs `hpc run -n 1 <args> -- sh -c 'echo "$VAR"'` with `env` added to hpc run's
/// environment; returns the rank's line and hpc run's status.
fn rank_sees(env: &[(&str, &str)], args: &[&str], var: &str) -> (String, Option<i32>) {
    let mut cmd = Command::new(HPC);
    cmd.args(["run", "-n", "1", "--no-tag"])
        .args(args)
        .args(["--", "sh", "-c", &format!("echo \"${var}\"")])
        .env_remove("HPC_TIMEOUT")
        .env_remove("HPC_THREADS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).trim().to_string()
            + &String::from_utf8_lossy(&out.stderr),
        out.status.code(),
    )
}

#[test]
fn settings_of_the_launcher_environment_reach_the_ranks() {
    // HPC_TIMEOUT of hpc run's environment, not the 30 s default.
    let (seen, code) = rank_sees(&[("HPC_TIMEOUT", "7.5")], &[], "HPC_TIMEOUT");
    assert_eq!((seen.as_str(), code), ("7.5", Some(0)));
    // -x wins over the environment, --timeout over both.
    let (seen, _) = rank_sees(
        &[("HPC_TIMEOUT", "7.5")],
        &["-x", "HPC_TIMEOUT=9"],
        "HPC_TIMEOUT",
    );
    assert_eq!(seen, "9");
    let (seen, _) = rank_sees(
        &[("HPC_TIMEOUT", "7.5")],
        &["-x", "HPC_TIMEOUT=9", "--timeout", "4"],
        "HPC_TIMEOUT",
    );
    assert_eq!(seen, "4");
    // Unset: the documented default.
    let (seen, _) = rank_sees(&[], &[], "HPC_TIMEOUT");
    assert_eq!(seen, "30");
    // A value the ranks would refuse is refused before anything starts.
    let (seen, code) = rank_sees(&[("HPC_TIMEOUT", "soon")], &[], "HPC_TIMEOUT");
    assert_eq!(code, Some(2));
    assert!(seen.contains("HPC_TIMEOUT=\"soon\""), "{seen}");
    for (env, args) in [
        (&[("HPC_TIMEOUT", "1e-300")][..], &[][..]),
        (&[][..], &["-x", "HPC_TIMEOUT=1e-300"][..]),
    ] {
        let (seen, code) = rank_sees(env, args, "HPC_TIMEOUT");
        assert_eq!(code, Some(2), "{seen}");
        // Refused by the runtime's parser (below a nanosecond) or by hpc run's
        // own bound (below the 1 ms the ranks are given it in).
        assert!(
            seen.contains("HPC_TIMEOUT=\"1e-300\" is less than a nanosecond")
                || seen.contains("HPC_TIMEOUT=\"1e-300\" is below the 1 ms"),
            "{seen}"
        );
    }
    // HPC_THREADS of the environment sizes --bind and reaches the rank.
    let (seen, code) = rank_sees(&[("HPC_THREADS", "1")], &["--bind", "core"], "HPC_THREADS");
    assert_eq!((seen.as_str(), code), ("1", Some(0)));
    let (seen, code) = rank_sees(
        &[("HPC_THREADS", "lots")],
        &["--bind", "core"],
        "HPC_THREADS",
    );
    assert_eq!(code, Some(2));
    assert!(seen.contains("HPC_THREADS=\"lots\""), "{seen}");
    // What an outer job set for its ranks does not leak into this job's.
    let (seen, code) = rank_sees(&[("HPC_CPUSET", "0-3")], &[], "HPC_CPUSET");
    assert_eq!((seen.as_str(), code), ("", Some(0)));
}

#[test]
fn a_huge_progress_cpuset_is_refused_not_allocated() {
    // HPC_PROGRESS_CPUSET is read through the CPU-list parser by the Thread engine:
    // 0-4294967295 used to grow memory until the rank was killed.
    let t = Instant::now();
    let cpuset = "HPC_PROGRESS_CPUSET=0-4294967295";
    let out = timed_output(
        "2",
        "20",
        &["env", cpuset, HPC, "selftest", "--collectives", "thread"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
}

#[test]
fn show_placement_to_a_full_stderr_is_an_error_not_a_panic() {
    let out = Command::new(HPC)
        .args([
            "run",
            "-n",
            "1",
            "--bind",
            "core",
            "--show-placement",
            "--",
            "true",
        ])
        .stderr(output::dev_full())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
}

/// `hpc run` with `env` added to its environment (bytes, not only UTF-8).
fn run_with_env(env: &[(&[u8], &[u8])], args: &[&std::ffi::OsStr]) -> Output {
    use std::os::unix::ffi::OsStrExt;
    let mut cmd = Command::new(HPC);
    cmd.arg("run").args(args);
    for (k, v) in env {
        cmd.env(
            std::ffi::OsStr::from_bytes(k),
            std::ffi::OsStr::from_bytes(v),
        );
    }
    cmd.output().unwrap()
}

#[test]
fn a_variable_that_is_not_utf8_reaches_the_ranks_untouched() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    // A foreign variable, named or valued in bytes that are not UTF-8: passed on as
    // it is (the rank prints its bytes), never a panic of hpc run.
    let script = OsStr::new("printf '%s|%s' \"$FOO\" \"$BAR\"");
    let out = run_with_env(
        &[(b"FOO", b"a\xffb"), (b"\xfe\xff", b"x"), (b"BAR", b"plain")],
        &[
            OsStr::new("-n"),
            OsStr::new("1"),
            OsStr::new("--no-tag"),
            OsStr::new("-x"),
            OsStr::from_bytes(b"BAR=b\xfe"),
            OsStr::new("--"),
            OsStr::new("sh"),
            OsStr::new("-c"),
            script,
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // Untagged, the bytes as the rank wrote them (no newline added).
    assert_eq!(out.stdout, b"a\xffb|b\xfe");
    // One of hpc run's own settings: an error naming it, status 2.
    // HPC_LOG too, which clap would call an invalid argument.
    for name in ["HPC_TIMEOUT", "HPC_THREADS", "HPC_LOG"] {
        let out = run_with_env(
            &[(name.as_bytes(), b"\xff")],
            &[OsStr::new("-n"), OsStr::new("1"), OsStr::new("true")],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(
            err.contains(&format!("{name}=")) && err.contains("not valid UTF-8"),
            "{name}: {err}"
        );
    }
}

#[test]
fn x_cannot_override_the_variables_hpc_run_sets() {
    for name in [
        "HPC_RANK",
        "HPC_SIZE",
        "HPC_LOCAL_RANK",
        "HPC_RENDEZVOUS",
        "HPC_JOB_SECRET",
    ] {
        let out = hpc(&["run", "-n", "2", "-x", &format!("{name}=5"), "--", "true"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(
            err.contains(&format!(
                "-x {name}: hpc run sets {name} for each rank itself"
            )),
            "{name}: {err}"
        );
    }
}

/// A variable a flag of the same command sets for every rank: given both
/// ways, one of them would be lost without a word (`--nodes 2` undone by
/// one node name, `-x HPC_COLL_PROXY_CMD` overwritten by `--proxy`).
#[test]
fn x_cannot_give_a_variable_a_flag_sets() {
    for (name, flag) in [
        ("HPC_NODE_NAME", &["--nodes", "2"][..]),
        ("HPC_COLL_PROXY_CMD", &["--proxy"][..]),
    ] {
        let x = format!("{name}=x");
        let mut args = vec!["run", "-n", "2", "-x", &x];
        args.extend_from_slice(flag);
        args.extend(["--", "true"]);
        let out = hpc(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(
            err.contains(&format!("-x {name} and {} both set {name}", flag[0])),
            "{name}: {err}"
        );
    }
    // Without the flag, -x gives it.
    let out = hpc(&["run", "-n", "1", "-x", "HPC_NODE_NAME=x", "--", "true"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `HPC_BOOTSTRAP=singleton` (or `mpi`), from `-x` or the environment, made
/// each rank of `hpc run -n 2` a job of its own ("rank 0 of 1" twice, status
/// 0); it is refused by name. `launcher` and `auto` are what hpc run does.
#[test]
fn a_bootstrap_that_leaves_the_launcher_is_refused() {
    for (how, value) in [("-x", "singleton"), ("env", "mpi"), ("env", "Singleton ")] {
        let mut c = Command::new(HPC);
        c.args(["run", "-n", "2"]);
        let x = format!("HPC_BOOTSTRAP={value}");
        if how == "-x" {
            c.args(["-x", &x]);
        } else {
            c.env("HPC_BOOTSTRAP", value);
        }
        let out = c.args(["--", "true"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{how} {value}: {err}");
        assert!(
            err.contains(&format!(
                "HPC_BOOTSTRAP={}: under hpc run each rank would start alone",
                value.trim().to_ascii_lowercase()
            )),
            "{how} {value}: {err}"
        );
    }
    for value in ["launcher", "auto", ""] {
        let out = Command::new(HPC)
            .args(["run", "-n", "2", "--", "true"])
            .env("HPC_BOOTSTRAP", value)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{value}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn selftest_refuses_a_fail_rank_outside_the_job() {
    let out = timed_output(
        "2",
        "20",
        &[HPC, "selftest", "--fail-rank", "5", "--exit-code", "3"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--fail-rank 5: the job has 2 rank(s)"),
        "{err}"
    );
}

/// A job started on a full `/dev/shm`: the ranks' board was a sparse file
/// whose first page touched killed rank 0 with `SIGBUS` as it made its
/// communicator; its blocks are reserved when it is made now, and the ranks
/// fail naming the board and why. Needs a `/dev/shm` of its own: run as root
/// with `unshare` (a mount namespace with a small full tmpfs), else it says
/// so and checks nothing.
#[test]
fn a_full_dev_shm_is_named_not_a_sigbus() {
    let root = rustix::process::geteuid().is_root();
    let unshare = Command::new("unshare").arg("--help").output().is_ok();
    if !root || !unshare {
        eprintln!("skipped: needs root and unshare for a /dev/shm of its own");
        return;
    }
    let script = format!(
        "mount -t tmpfs -o size=1m tmpfs /dev/shm || exit 99; \
         dd if=/dev/zero of=/dev/shm/fill bs=4k 2>/dev/null; \
         exec {HPC} run -n 2 --timeout 20 -- {HPC} selftest --collectives inline"
    );
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(99) {
        eprintln!("skipped: cannot mount a tmpfs here: {err}");
        return;
    }
    assert!(!err.contains("SIGBUS"), "{err}");
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no room for the board's") && err.contains("a full /dev/shm"),
        "{err}"
    );
    // Whichever rank ends first, its line names the cause: rank 1 said only
    // "rank 0 could not create its node's board", and when it ended first the
    // launcher stopped rank 0 before its own line (once in a full suite).
    for line in err
        .lines()
        .filter(|l| l.contains("selftest failed on rank"))
    {
        assert!(line.contains("no room for the board's"), "{line}\n{err}");
    }
}

/// A DPU service address with no address refused the job, naming the
/// variable, behind "unsupported: unsupported: " (the communicator gave the
/// error again wrapped in its own kind's text).
#[test]
fn a_dpu_service_address_that_is_no_address_is_named_once() {
    let out = timed_run("1", "20", &[HPC, "selftest", "--collectives", "proxy"])
        .env("HPC_COLL_PROXY_PLACEMENT", "dpu")
        .env("HPC_COLL_PROXY_DPU_HOST", "127.0.0.1:99999")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "could not start its node's DPU proxy: unsupported: \
             HPC_COLL_PROXY_DPU_HOST=\"127.0.0.1:99999\": no address for"
        ),
        "{err}"
    );
}

#[test]
fn malformed_tuning_settings_are_warned_about_naming_them() {
    // Each used to be ignored silently (the default applied with no word).
    let script = format!("exec env HPC_PROGRESS_CPUSET=x {HPC} selftest --collectives thread");
    let out = timed_run("2", "20", &["sh", "-c", &script])
        .env("HPC_SPIN_US", "x")
        .env("HPC_STAGE_MAX", "lots")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for needle in [
        "HPC_SPIN_US=\"x\" is not a whole number",
        "HPC_STAGE_MAX=\"lots\" is not a whole number",
        "HPC_PROGRESS_CPUSET=\"x\" is ignored",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    // A spin of 584,000 years is capped at the documented second.
    let out = timed_run("2", "20", &[HPC, "selftest"])
        .args(["--collectives", "inline"])
        .env("HPC_SPIN_US", "18446744073709551615")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("HPC_SPIN_US=\"18446744073709551615\" is above the most it may be, 1000000"),
        "{err}"
    );
    // HPC_PROXY_MIN, read by the Proxy engine.
    let (out, _) = proxy_selftest(&[("HPC_PROXY_MIN", "x")], &["-n", "2", "--timeout", "20"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("HPC_PROXY_MIN=\"x\" is not a whole number"),
        "{err}"
    );
    // A progress CPU the machine does not have: named with the CPUs it has
    // (it used to pass with no word at the default log level).
    let script = format!("exec env HPC_PROGRESS_CPUSET=99999 {HPC} selftest --collectives thread");
    let out = timed_run("2", "20", &["sh", "-c", &script])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("HPC_PROGRESS_CPUSET=99999 names CPUs 99999 that this machine does not have (its CPUs are"),
        "{err}"
    );
}

#[test]
fn topo_checks_allowed_without_ranks() {
    // Never ignored: without --ranks, --allowed (of any value) is a usage error
    // naming --ranks; with it, a bad list is named.
    let out = hpc(&["topo", "--allowed", "x"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--ranks"), "{err}");
    let out = hpc(&["topo", "--ranks", "1", "--allowed", "x"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--allowed x"), "{err}");
}
