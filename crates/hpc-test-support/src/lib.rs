//! The launch harness shared by hpc-rs's multi-process tests.
//!
//! A test that needs several ranks starts real processes: an
//! [`hpc_runtime::Coordinator`] (what `hpc run` starts), then one process per
//! rank with the coordinator's variables, each either a program under test (an
//! example's binary) or the test binary itself re-executed at one entry test
//! that plays a rank ([`Job::this_test`]). [`Job::run`] returns every rank's
//! output once all have ended, and never waits forever: ranks still running
//! at the job's deadline are killed, and their output says so
//! ([`KILLED_MARK`]).
//!
//! A rank that ran its scenario to the end prints [`CHILD_OK`]; [`ok`]
//! requires it besides exit status 0, so that a renamed entry point or a
//! filter that matches nothing (both exit with 0) fails the test.
//!
//! Besides, [`output`] checks a program's standard streams (a full device, a
//! closed pipe) and [`example`] runs an example's binary as a user does, for the
//! tests that several crates share.
//!
//! ```no_run
//! use hpc_test_support::{Job, failures};
//!
//! // Three ranks of this test binary, each running the test `child_entry`
//! // with `MY_SCENARIO=ring`, on two emulated nodes.
//! let outs = Job::this_test("child_entry", 3)
//!     .nodes(2)
//!     .env("MY_SCENARIO", "ring")
//!     .run();
//! assert!(failures(&outs).is_empty(), "{}", failures(&outs).join("\n"));
//! ```

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hpc_runtime::{env, Coordinator};

pub mod example;
pub mod log;
pub mod output;

/// What a rank prints (to stdout or stderr) when its scenario ran to its end.
pub const CHILD_OK: &str = "CHILD-OK";

/// What [`Job::run`] appends to the standard error of a rank it had to kill
/// at the job's deadline.
pub const KILLED_MARK: &str = "[killed by the test harness at the job's deadline]";

/// A job of `size` rank processes to start (see the crate documentation).
pub struct Job {
    argv: Vec<String>,
    size: usize,
    timeout: Duration,
    deadline: Option<Duration>,
    nodes: usize,
    env: Vec<(String, String)>,
    prefix: Option<Box<dyn Fn(usize) -> Vec<String>>>,
    stdout: bool,
}

impl Job {
    /// `size` ranks of `program` with `args`.
    pub fn program(program: impl AsRef<Path>, args: &[&str], size: usize) -> Job {
        let mut argv = vec![program.as_ref().display().to_string()];
        argv.extend(args.iter().map(|a| a.to_string()));
        Job {
            argv,
            size,
            timeout: Duration::from_secs(20),
            deadline: None,
            nodes: 1,
            env: Vec::new(),
            prefix: None,
            stdout: true,
        }
    }

    /// `size` ranks of the running test binary, each running only the test
    /// named `entry` (exactly, single-threaded, its output not captured).
    pub fn this_test(entry: &str, size: usize) -> Job {
        let exe = std::env::current_exe().expect("the test binary's path");
        Job::program(
            exe,
            &[entry, "--exact", "--nocapture", "--test-threads=1"],
            size,
        )
    }

    /// The ranks' `HPC_TIMEOUT` and the coordinator's (20 s unless set).
    pub fn timeout(mut self, t: Duration) -> Job {
        self.timeout = t;
        self
    }

    /// Kills ranks still running this long after the start (default: three
    /// times the timeout plus 30 s, time for a rank to notice a failure and
    /// report it).
    pub fn deadline(mut self, d: Duration) -> Job {
        self.deadline = Some(d);
        self
    }

    /// Places the ranks on `n` emulated nodes, rank r on node `r % n`
    /// (interleaved, so that a node's ranks are not contiguous), through
    /// `HPC_NODE_NAME`: ranks on different nodes reach each other only
    /// through the network path.
    pub fn nodes(mut self, n: usize) -> Job {
        self.nodes = n.max(1);
        self
    }

    /// Sets a variable for every rank; `{rank}` in the value becomes the rank.
    pub fn env(mut self, key: &str, value: &str) -> Job {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Sets several variables (see [`Job::env`]).
    pub fn envs<'a>(mut self, vars: impl IntoIterator<Item = &'a (&'a str, &'a str)>) -> Job {
        for (k, v) in vars {
            self = self.env(k, v);
        }
        self
    }

    /// Prefixes rank r's command line with `prefix(r)` (e.g. `ip netns exec NS`).
    pub fn prefix(mut self, prefix: impl Fn(usize) -> Vec<String> + 'static) -> Job {
        self.prefix = Some(Box::new(prefix));
        self
    }

    /// Appends `extra` (words split by the shell) to rank `rank`'s command
    /// line only, through `sh -c 'exec "$@" EXTRA'`: a launcher line that
    /// differs by rank (`--seed $RANK`). Replaces any [`Job::prefix`].
    pub fn extra_args_on(self, rank: usize, extra: &str) -> Job {
        let script = format!("exec \"$@\" {extra}");
        self.prefix(move |r| {
            if r == rank {
                ["sh", "-c", &script, "sh"].map(String::from).to_vec()
            } else {
                Vec::new()
            }
        })
    }

    /// Discards the ranks' standard output (kept by default).
    pub fn quiet_stdout(mut self) -> Job {
        self.stdout = false;
        self
    }

    /// Starts a coordinator on the loopback interface and runs the job
    /// against it (see [`Job::run_with`]).
    pub fn run(self) -> Vec<Output> {
        let coord = Coordinator::start(
            self.size,
            hpc_runtime::random_u64().expect("random bytes from the kernel"),
            self.timeout,
            IpAddr::V4(Ipv4Addr::LOCALHOST),
        )
        .expect("starting the coordinator");
        let out = self.run_with(&coord);
        coord.shutdown();
        out
    }

    /// Runs the job against `coord` (which must be for `size` ranks) and
    /// returns every rank's output, in rank order, once all have ended or
    /// been killed at the deadline.
    pub fn run_with(self, coord: &Coordinator) -> Vec<Output> {
        let deadline = self
            .deadline
            .unwrap_or(self.timeout * 3 + Duration::from_secs(30));
        let kids: Vec<Child> = (0..self.size).map(|r| self.spawn(coord, r)).collect();
        wait_all(kids, deadline)
    }

    fn spawn(&self, coord: &Coordinator, r: usize) -> Child {
        let mut argv = self.prefix.as_ref().map_or_else(Vec::new, |p| p(r));
        argv.extend(self.argv.iter().cloned());
        let mut c = Command::new(&argv[0]);
        for name in not_inherited() {
            c.env_remove(name);
        }
        c.args(&argv[1..])
            .envs(coord.rank_env(r))
            .env(env::TIMEOUT, self.timeout.as_secs_f64().to_string())
            .stdin(Stdio::null())
            .stdout(if self.stdout {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::piped());
        if self.nodes > 1 {
            c.env(env::NODE_NAME, format!("node{}", r % self.nodes));
        }
        for (k, v) in &self.env {
            c.env(k, v.replace("{rank}", &r.to_string()));
        }
        c.spawn()
            .unwrap_or_else(|e| panic!("starting rank {r} ({}): {e}", argv[0]))
    }
}

/// The variables of ours a rank does not take from the tests' environment:
/// every setting, launcher's and internal variable but the log filter. A
/// developer's tuning (`HPC_SPIN_US`, `HPC_PROXY_MIN`, `HPC_TRANSPORT`), or
/// the variables of a job the tests run in, changed what the tests ran, and
/// each was cleared by hand where a test had failed over it; a test sets
/// what it wants with [`Job::env`]. The development variables (which tests
/// run) pass.
fn not_inherited() -> impl Iterator<Item = &'static str> {
    env::ALL
        .iter()
        .filter(|v| v.kind != env::Kind::Development && v.name != env::LOG)
        .map(|v| v.name)
}

/// Waits for every child, reading its pipes meanwhile (a rank that fills a
/// pipe must not stall); kills those still running after `deadline`.
fn wait_all(mut kids: Vec<Child>, deadline: Duration) -> Vec<Output> {
    let readers: Vec<_> = kids
        .iter_mut()
        .map(|k| (reader(k.stdout.take()), reader(k.stderr.take())))
        .collect();
    let t0 = Instant::now();
    let mut status: Vec<Option<ExitStatus>> = vec![None; kids.len()];
    let mut killed = vec![false; kids.len()];
    while status.iter().any(Option::is_none) {
        for (r, k) in kids.iter_mut().enumerate() {
            if status[r].is_none() {
                status[r] = k.try_wait().expect("waiting for a rank");
            }
        }
        if status.iter().all(Option::is_some) {
            break;
        }
        if t0.elapsed() > deadline {
            for (r, k) in kids.iter_mut().enumerate() {
                if status[r].is_none() {
                    let _ = k.kill();
                    status[r] = Some(k.wait().expect("reaping a killed rank"));
                    killed[r] = true;
                }
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    readers
        .into_iter()
        .zip(status)
        .zip(killed)
        .map(|(((out, err), status), killed)| {
            let mut stderr = err.join().unwrap_or_default();
            if killed {
                stderr
                    .extend_from_slice(format!("\n{KILLED_MARK} after {deadline:?}\n").as_bytes());
            }
            Output {
                status: status.expect("every rank has a status"),
                stdout: out.join().unwrap_or_default(),
                stderr,
            }
        })
        .collect()
}

fn reader(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    })
}

/// Whether a rank succeeded: exit status 0 and [`CHILD_OK`] in its output.
pub fn ok(o: &Output) -> bool {
    o.status.success() && text(o).contains(CHILD_OK)
}

/// A rank's standard output and standard error, as text.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every failed rank's output (not [`ok`]), labelled with its rank: the
/// first rank to fail is not always the first rank.
pub fn failures(outs: &[Output]) -> Vec<String> {
    failed(outs, ok)
}

/// Every rank's output whose exit status is not 0, labelled with its rank: for a
/// program that prints no [`CHILD_OK`] (an example's binary).
pub fn exit_failures(outs: &[Output]) -> Vec<String> {
    failed(outs, |o| o.status.success())
}

fn failed(outs: &[Output], good: impl Fn(&Output) -> bool) -> Vec<String> {
    outs.iter()
        .enumerate()
        .filter(|(_, o)| !good(o))
        .map(|(r, o)| format!("rank {r} failed ({}):\n{}", o.status, text(o)))
        .collect()
}

/// Runs `program` with `args` as `ranks` processes (one: a singleton, without a
/// launcher; more: a [`Job`] with the deadline `timeout`) and returns the SHA-256
/// of the file `output` it wrote, in hex: a digest to pin a program's output by.
/// Panics with the output of the first rank that failed, or naming `output` when
/// it cannot be read.
pub fn digest_of_run(
    program: &str,
    args: &[String],
    ranks: usize,
    timeout: Duration,
    output: &Path,
) -> String {
    use sha2::Digest as _;
    if ranks == 1 {
        let o = Command::new(program).args(args).output().unwrap();
        assert!(o.status.success(), "{program} failed: {}", text(&o));
    } else {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let outs = Job::program(program, &a, ranks).timeout(timeout).run();
        for (r, o) in outs.iter().enumerate() {
            assert!(
                o.status.success(),
                "rank {r} of {ranks} failed: {}",
                text(o)
            );
        }
    }
    let bytes = std::fs::read(output).unwrap_or_else(|e| panic!("{}: {e}", output.display()));
    sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A fresh, empty directory under the system's temporary directory, unique
/// to this process and call (`<prefix>-<pid>-<n>-<tag>`).
pub fn tmpdir(prefix: &str, tag: &str) -> PathBuf {
    let d = tmppath(prefix, tag);
    std::fs::create_dir_all(&d).expect("creating a temporary directory");
    d
}

/// A fresh, empty directory under the system's temporary directory
/// ([`tmpdir`]'s name), removed with everything in it (FIFOs included) when
/// dropped: at the end of the test, and when it fails (a panic unwinds through
/// the drop), so that the tests leave nothing in `/tmp`.
///
/// ```
/// let d = hpc_test_support::TmpDir::new("doc", "guard");
/// std::fs::write(d.join("x"), b"1").unwrap();
/// let kept = d.to_path_buf();
/// drop(d);
/// assert!(!kept.exists());
/// ```
#[derive(Debug)]
pub struct TmpDir(PathBuf);

impl TmpDir {
    /// Makes `<tmp>/<prefix>-<pid>-<n>-<tag>` (see [`tmpdir`]).
    pub fn new(prefix: &str, tag: &str) -> TmpDir {
        TmpDir(tmpdir(prefix, tag))
    }

    /// A guard of [`tmppath`]'s path, with nothing there: for a test whose
    /// code under test makes the directory. Whatever is made there is removed
    /// when the guard is dropped, as [`TmpDir::new`]'s is.
    pub fn unmade(prefix: &str, tag: &str) -> TmpDir {
        TmpDir(tmppath(prefix, tag))
    }
}

impl std::ops::Deref for TmpDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TmpDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for TmpDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Makes a FIFO at `path` (replacing a file there) with the `mkfifo` command.
pub fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let made = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("running mkfifo");
    assert!(made.success(), "mkfifo {} failed", path.display());
}

/// A path under the system's temporary directory, unique to this process and
/// call (`<prefix>-<pid>-<n>-<tag>`), with nothing there: [`tmpdir`] for a test
/// whose code under test makes the directory.
pub fn tmppath(prefix: &str, tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "{prefix}-{}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Whether `python3` runs, for a test of `what` (a Python tool): without it the
/// test says so and skips, unless `HPC_REQUIRE_PYTHON=1` (set by `cargo xtask
/// test`; set-up installs Python), where it panics.
pub fn have_python(what: &str) -> bool {
    let ok = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var(hpc_runtime::env::REQUIRE_PYTHON)
                .ok()
                .as_deref()
                != Some("1"),
            "{}=1 but python3 is not installed",
            hpc_runtime::env::REQUIRE_PYTHON
        );
        eprintln!("python3 not found: SKIPPING {what}");
    }
    ok
}

/// Runs `python3 TOOL ARGS` and checks that it refuses the arguments before it
/// runs anything: status 2, `words` in its standard error, no traceback, none of
/// `not_run` (what a run would have printed), within 20 s. Gives the standard
/// error.
pub fn python_tool_refuses(tool: &Path, args: &[&str], words: &str, not_run: &str) -> String {
    let t = Instant::now();
    let out = Command::new("python3")
        .arg(tool)
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("running python3");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(words), "{args:?}: {words:?} not in {err}");
    assert!(
        !err.contains("Traceback") && !err.contains(not_run),
        "{args:?}: {err}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "{args:?}: {:?}",
        t.elapsed()
    );
    err
}

/// Two stand-in numpy packages under `dir`, for `PYTHONPATH`: the first fails to
/// import (numpy absent), the second imports as an empty module (numpy present,
/// for a tool's checks that come before it uses numpy), whether or not numpy is
/// installed.
pub fn stand_in_numpy(dir: &Path) -> (PathBuf, PathBuf) {
    let (absent, present) = (dir.join("numpy-absent"), dir.join("numpy-present"));
    for (d, body) in [
        (&absent, "raise ImportError('no numpy here')\n"),
        (&present, ""),
    ] {
        std::fs::create_dir_all(d.join("numpy")).expect("a stand-in numpy's directory");
        std::fs::write(d.join("numpy/__init__.py"), body).expect("a stand-in numpy");
    }
    (absent, present)
}

/// Open MPI's `mpirun` (`mpirun.openmpi`, else an `mpirun` that says it is
/// Open MPI's), or `None` with a line saying the test skips. Panics instead
/// where `HPC_REQUIRE_MPI=1` (CI, which installs it).
pub fn open_mpi_mpirun() -> Option<String> {
    for cand in ["mpirun.openmpi", "mpirun"] {
        let ok = Command::new(cand)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("Open MPI"))
            .unwrap_or(false);
        if ok {
            return Some(cand.to_string());
        }
    }
    assert!(
        std::env::var(env::REQUIRE_MPI).ok().as_deref() != Some("1"),
        "{}=1 but Open MPI's mpirun is not installed",
        env::REQUIRE_MPI
    );
    eprintln!("Open MPI mpirun not found: skipping");
    None
}

/// The Docker cluster of `hpc cluster` (Slurm and PMIx across containers), which
/// the cluster tests bring up, use and take down through the `hpc` binary of the
/// build they belong to ([`hpc_binary`]). Its work folder and node cache are the
/// repository's `target/cluster` and `target/cluster-cache` unless
/// `HPC_CLUSTER_DIR` and `HPC_CACHE_DIR` (or [`Cluster::named`]) say otherwise.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// `HPC_CLUSTER_NAME` and `HPC_CLUSTER_DIR`, where a test wants a cluster
    /// of its own beside the others.
    env: Vec<(&'static str, String)>,
}

/// The build's target folder (`target/`): two levels above a test executable
/// (`target/debug/deps/TEST-HASH`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    exe.ancestors()
        .nth(3)
        .expect("a test executable under target/PROFILE/deps")
        .to_path_buf()
}

/// The `hpc` binary of the build the running test belongs to
/// (`target/PROFILE/hpc`). Panics, saying how to build it, when it is missing.
pub fn hpc_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let hpc = exe
        .ancestors()
        .nth(2)
        .expect("a test executable under target/PROFILE/deps")
        .join("hpc");
    assert!(
        hpc.is_file(),
        "no hpc binary at {} (the cluster tests run `hpc cluster`): build it with \
         cargo build -p hpc-cli --features mpi",
        hpc.display()
    );
    hpc
}

/// Whether the Docker cluster tests run (`HPC_TEST_CLUSTER=1`); says how to run
/// them when they do not.
pub fn cluster_tests_on() -> bool {
    let on = std::env::var(env::TEST_CLUSTER).ok().as_deref() == Some("1");
    if !on {
        eprintln!(
            "skipped: set {}=1 to run the Docker cluster test",
            env::TEST_CLUSTER
        );
    }
    on
}

impl Cluster {
    /// The folder that `binary` (a test's `CARGO_BIN_EXE_*`) lies in, as
    /// `hpc cluster up --bin` takes it.
    pub fn bin_dir(binary: &str) -> String {
        Path::new(binary)
            .parent()
            .and_then(Path::to_str)
            .expect("a binary in a folder with a UTF-8 name")
            .to_string()
    }

    /// `hpc cluster up --nodes NODES [EXTRA...] --bin BIN` ([`Cluster::run`]),
    /// with the guard that takes the cluster down when dropped, set before `up` so
    /// that a cluster half brought up is taken down too.
    pub fn up(&self, nodes: usize, extra: &[&str], bin: &str) -> (Down, Output) {
        let down = self.clone().down_on_drop();
        let n = nodes.to_string();
        let mut args = vec!["up", "--nodes", &n];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--bin", bin]);
        let out = self.run(&args);
        (down, out)
    }

    /// The arguments of `hpc cluster` that run `srun --mpi=pmix -N NODES -n RANKS`
    /// on the controller, `before` standing between `exec` and `srun` (`exec`'s own
    /// flags, `env VAR=VALUE...`); the job's program and its arguments go after.
    pub fn srun_args<'a>(before: &[&'a str], nodes: &'a str, ranks: &'a str) -> Vec<&'a str> {
        let mut a = vec!["exec"];
        a.extend_from_slice(before);
        a.extend_from_slice(&["srun", "--mpi=pmix", "-N", nodes, "-n", ranks]);
        a
    }

    /// A cluster of its own: `name` for its containers and network, `dir` for
    /// its work directory.
    pub fn named(name: &str, dir: &Path) -> Cluster {
        Cluster {
            env: vec![
                (env::CLUSTER_NAME, name.to_string()),
                (env::CLUSTER_DIR, dir.display().to_string()),
            ],
        }
    }

    /// The work folder: the one [`Cluster::named`] gave, else `HPC_CLUSTER_DIR`,
    /// else `target/cluster`.
    pub fn work_dir(&self) -> PathBuf {
        self.env
            .iter()
            .find(|(k, _)| *k == env::CLUSTER_DIR)
            .map(|(_, v)| PathBuf::from(v))
            .or_else(|| std::env::var_os(env::CLUSTER_DIR).map(PathBuf::from))
            .unwrap_or_else(|| target_dir().join("cluster"))
    }

    /// The folder the nodes see as `/shared`.
    pub fn shared(&self) -> PathBuf {
        self.work_dir().join("shared")
    }

    /// Runs `hpc cluster` with `args` (`up`, `exec ...`, `kill-node`, `down`);
    /// prints the status and standard error, and standard output too on a
    /// failure.
    pub fn run(&self, args: &[&str]) -> Output {
        let out = self.command().args(args).output().expect("run hpc cluster");
        eprintln!(
            "hpc cluster {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            eprintln!("{}", String::from_utf8_lossy(&out.stdout));
        }
        out
    }

    /// `hpc cluster` as a command to add arguments to (for a job whose output
    /// is read while it runs).
    pub fn command(&self) -> Command {
        let mut c = Command::new(hpc_binary());
        c.arg("cluster").env(env::CLUSTER_DIR, self.work_dir());
        if std::env::var_os(env::CACHE_DIR).is_none() {
            c.env(env::CACHE_DIR, target_dir().join("cluster-cache"));
        }
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    /// Takes the cluster down when the returned guard is dropped, even if the
    /// test fails half-way.
    pub fn down_on_drop(self) -> Down {
        Down(self)
    }
}

/// Takes its cluster down when dropped (see [`Cluster::down_on_drop`]).
pub struct Down(Cluster);

impl Drop for Down {
    fn drop(&mut self) {
        self.0.run(&["down"]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_past_the_deadline_is_killed_and_says_so() {
        let t = Instant::now();
        let outs = Job::program("/bin/sleep", &["30"], 2)
            .deadline(Duration::from_millis(300))
            .run();
        assert!(t.elapsed() < Duration::from_secs(10));
        assert_eq!(outs.len(), 2);
        for o in &outs {
            assert!(!o.status.success());
            assert!(text(o).contains(KILLED_MARK), "{}", text(o));
        }
        assert_eq!(failures(&outs).len(), 2);
        assert_eq!(exit_failures(&outs).len(), 2);
    }

    #[test]
    fn ranks_see_their_rank_node_and_variables_and_need_the_marker() {
        let script = "echo rank=$HPC_RANK node=$HPC_NODE_NAME x=$X; \
                      [ \"$HPC_RANK\" = 1 ] || echo CHILD-OK";
        let outs = Job::program("/bin/sh", &["-c", script], 3)
            .nodes(2)
            .env("X", "v{rank}")
            .run();
        for (r, o) in outs.iter().enumerate() {
            let t = text(o);
            assert!(
                t.contains(&format!("rank={r} node=node{} x=v{r}", r % 2)),
                "{t}"
            );
        }
        // Rank 1 exits with 0 but never printed the marker.
        assert!(ok(&outs[0]) && !ok(&outs[1]) && ok(&outs[2]));
        assert_eq!(failures(&outs).len(), 1);
        assert!(failures(&outs)[0].starts_with("rank 1 failed"));
        // By status alone, every rank succeeded.
        assert!(exit_failures(&outs).is_empty());
    }

    /// The settings in the tests' own environment do not reach the ranks
    /// (the log filter does, and what the job sets): a developer's
    /// `HPC_SPIN_US` or `HPC_PROXY_MIN` reached every test job of hpc-comm,
    /// and `HPC_STAGE_MAX=0` failed two of them. Runs itself again with
    /// them set.
    #[test]
    fn the_settings_of_the_tests_environment_do_not_reach_the_ranks() {
        const AGAIN: &str = "TEST_SUPPORT_SETTINGS_SET";
        let shown = [
            env::SPIN_US,
            env::STAGE_MAX,
            env::LOG,
            env::COLL_PROXY_BOARD,
        ];
        if std::env::var_os(AGAIN).is_some() {
            let script: String = shown
                .iter()
                .map(|v| format!("echo {v}=${{{v}-unset}}; "))
                .chain(["echo CHILD-OK".to_string()])
                .collect();
            let outs = Job::program("/bin/sh", &["-c", &script], 1)
                .env(env::STAGE_MAX, "7")
                .run();
            let t = text(&outs[0]);
            let want = [("unset", 0), ("7", 1), ("debug", 2), ("unset", 3)];
            for (value, i) in want {
                assert!(t.contains(&format!("{}={value}\n", shown[i])), "{t}");
            }
            return;
        }
        let o = Command::new(std::env::current_exe().unwrap())
            .args([
                "tests::the_settings_of_the_tests_environment_do_not_reach_the_ranks",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(AGAIN, "1")
            .envs(shown.map(|v| (v, "0")))
            .env(env::LOG, "debug")
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && out.contains("1 passed"),
            "{out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    #[test]
    fn a_full_pipe_does_not_stall_a_rank() {
        // 1 MiB on each stream, more than a pipe holds.
        let outs = Job::program(
            "/bin/sh",
            &[
                "-c",
                "head -c 1048576 /dev/zero; head -c 1048576 /dev/zero >&2",
            ],
            1,
        )
        .deadline(Duration::from_secs(30))
        .run();
        assert!(outs[0].status.success());
        assert_eq!(outs[0].stdout.len(), 1 << 20);
        assert_eq!(outs[0].stderr.len(), 1 << 20);
    }

    #[test]
    fn tmpdirs_are_fresh_and_distinct() {
        let (a, b) = (tmpdir("hpc-ts", "x"), tmpdir("hpc-ts", "x"));
        assert_ne!(a, b);
        assert!(a.is_dir() && std::fs::read_dir(&a).unwrap().next().is_none());
        let _ = std::fs::remove_dir_all(a);
        let _ = std::fs::remove_dir_all(b);
    }

    /// A `TmpDir` goes with everything in it (a FIFO, a subfolder), also when
    /// its test fails: the example tests left `brunel-hostile-*`,
    /// `brunel-inputs-*`, `brunel-report-*` (some with FIFOs) in `/tmp`
    /// (pass 18's noted list).
    #[test]
    fn a_tmp_dir_is_removed_with_its_fifos_also_when_the_test_fails() {
        let kept = std::panic::catch_unwind(|| {
            let d = TmpDir::new("hpc-test-support", "guard");
            super::mkfifo(&d.join("fifo"));
            std::fs::create_dir_all(d.join("sub/deeper")).unwrap();
            let kept = d.to_path_buf();
            assert!(kept.join("fifo").exists());
            std::panic::panic_any(kept)
        })
        .unwrap_err();
        let kept = kept.downcast::<std::path::PathBuf>().unwrap();
        assert!(!kept.exists(), "{} left", kept.display());
    }
}
