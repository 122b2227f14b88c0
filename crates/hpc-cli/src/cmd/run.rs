//! `hpc run`: the built-in launcher.
//!
//! Starts N processes of a program on this machine, each in its own process group, with
//! the variables `hpc_runtime` reads (`HPC_RANK`, `HPC_SIZE`, `HPC_RENDEZVOUS`, ...),
//! hosts the coordinator they bootstrap through, prefixes their output with their rank,
//! forwards signals, and stops the whole job when one rank fails.

use std::ffi::OsString;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hpc_runtime::{env as henv, Coordinator};

use crate::cmd::bind::{self, BindPolicy};

mod program;
mod supervision;
use crate::cmd::job::{self, note};
use program::{missing_loader, resolve_program};
use supervision::Supervision;

/// Hard upper bound on ranks per `hpc run` (a typo guard; one machine cannot host more).
pub const MAX_RANKS: usize = 4096;
/// Without `--oversubscribe`, at most this many ranks per allowed CPU.
pub const MAX_RANKS_PER_CPU: usize = 64;

/// Arguments of `hpc run`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Launch N ranks of a program on this machine",
    long_about = "Launch N ranks of a program on this machine.\n\n\
        Each rank gets HPC_RANK, HPC_SIZE and a rendezvous (HPC_RENDEZVOUS) through which \
        hpc_runtime::World bootstraps. Output lines are prefixed with the rank. Ctrl-C stops \
        all ranks. If a rank exits non-zero or is killed, the others are stopped and hpc run \
        exits with that rank's status (128+signal for a signal; 1 for a rank's 124 or 125, \
        which hpc run keeps for itself). HPC_TIMEOUT and HPC_THREADS of the environment \
        (or -x) reach the ranks and the coordinator unless --timeout or --threads are given. \
        Output that cannot be written (a full disk) stops the job with exit status 125; \
        a closed pipe stops it with 141, without a message. The ranks' standard input is \
        empty (/dev/null): hpc run does not hand its own to any rank (a file redirected \
        to it is warned about). -x cannot give the \
        variables hpc run sets for each rank (HPC_RANK, HPC_SIZE, ...), nor one that a \
        flag given sets (HPC_NODE_NAME with --nodes, HPC_TRACE with --trace, \
        HPC_COLL_PROXY_CMD with --proxy).",
    after_help = "Examples:\n  hpc run -n 4 -- ./my_sim --steps 100\n  hpc run -n 2 --bind core -- hpc selftest\n  hpc run -n 8 --nodes 2 --no-tag -- ./app"
)]
pub struct Args {
    /// Number of ranks to start.
    #[arg(short = 'n', long = "np", value_name = "N")]
    pub np: usize,

    /// Bind each rank to CPUs: a block of cores, a NUMA node, or not at all.
    #[arg(long, value_enum, default_value_t = BindPolicy::None)]
    pub bind: BindPolicy,

    /// Compute threads per rank that `--bind` sizes each rank's cores for (sets
    /// HPC_THREADS; default: HPC_THREADS from the environment or `-x`, else 1).
    #[arg(long, value_name = "T")]
    pub threads: Option<usize>,

    /// Progress cores reserved per rank by `--bind` (for offloaded collectives);
    /// refused under `--bind none`, which reserves nothing.
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub progress: usize,

    /// Serve the `Proxy` engine of hpc-comm from `hpc proxy` (pinned to the
    /// node's progress cores when `--progress` reserved some) instead of the
    /// application re-executing itself; sets HPC_COLL_PROXY_CMD for the ranks.
    #[arg(long)]
    pub proxy: bool,

    /// Print the placement table before starting (under `--bind none`, which
    /// places nothing, a line that says so).
    #[arg(long)]
    pub show_placement: bool,

    /// Do not prefix output lines with the rank: the ranks' bytes are forwarded
    /// unchanged (lines of several ranks are kept whole up to 64 KiB).
    #[arg(long)]
    pub no_tag: bool,

    /// Timeout of the ranks' blocking runtime calls, in seconds (sets HPC_TIMEOUT;
    /// default: HPC_TIMEOUT from `-x` or the environment, else 30).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,

    /// Seconds between asking ranks to stop (SIGTERM) and killing them (SIGKILL).
    #[arg(long, value_name = "SECS", default_value_t = 2.0)]
    pub kill_grace: f64,

    /// Stop the job after this many seconds (exit code 124).
    #[arg(long, value_name = "SECS")]
    pub time_limit: Option<f64>,

    /// Emulate K nodes: ranks are split into K contiguous blocks, each with its own node
    /// name (HPC_NODE_NAME=node0, node1, ...), so node-aware code can be tested here.
    #[arg(long, value_name = "K", default_value_t = 1)]
    pub nodes: usize,

    /// Allow more than 64 ranks per allowed CPU.
    #[arg(long)]
    pub oversubscribe: bool,

    /// Extra environment for the ranks, `KEY=VALUE` (repeatable; the value may be
    /// any bytes). The variables `hpc run` sets for each rank (`HPC_RANK`,
    /// `HPC_SIZE`, ...) cannot be given.
    #[arg(short = 'x', long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<OsString>,

    /// Record the job's timeline and merge it into FILE, a Chrome/Perfetto trace
    /// (open it in ui.perfetto.dev): the ranks get HPC_TRACE, a directory beside
    /// FILE, whose files are merged after the job with the clocks aligned.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,

    /// The program and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    pub command: Vec<OsString>,
}

/// What `--show-placement` prints under `--bind none`, which places nothing.
const NO_PLACEMENT: &str = "no placement table: --bind none leaves the ranks to the OS scheduler \
                            (give --bind core or --bind numa to place them)\n";

static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    SIGNAL.store(sig, Ordering::SeqCst);
}

fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        let handler: extern "C" fn(libc::c_int) = on_signal;
        // SAFETY: installs a handler that only stores into an atomic, which is
        // async-signal-safe; the cast is the documented way to pass a handler address.
        unsafe {
            libc::signal(sig, handler as libc::sighandler_t);
        }
    }
}

fn validate(args: &Args, allowed_cpus: usize) -> anyhow::Result<()> {
    if args.np == 0 {
        bail!("-n must be at least 1");
    }
    if args.command[0].is_empty() {
        // "program not found in PATH: " named nothing, with status 125.
        bail!("the program to run is empty: give its name or path after --");
    }
    if args.np > MAX_RANKS {
        bail!(
            "-n {} exceeds the limit of {MAX_RANKS} ranks on one machine",
            args.np
        );
    }
    let cap = MAX_RANKS_PER_CPU * allowed_cpus.max(1);
    if args.np > cap && !args.oversubscribe {
        bail!(
            "-n {} is more than {MAX_RANKS_PER_CPU} ranks per allowed CPU ({allowed_cpus} CPUs); \
             pass --oversubscribe if you mean it",
            args.np
        );
    }
    if let Some(t) = args.threads {
        if !(1..=MAX_THREADS).contains(&t) {
            bail!("--threads must be between 1 and {MAX_THREADS}, got {t}");
        }
    }
    if args.progress > MAX_THREADS {
        bail!(
            "--progress must be at most {MAX_THREADS}, got {}",
            args.progress
        );
    }
    // Progress cores are reserved by a binding: under `--bind none` the flag
    // would be ignored (the ranks got no progress core, without a word).
    if args.progress > 0 && args.bind == BindPolicy::None {
        bail!(
            "--progress {} reserves progress cores through --bind, which is none: give \
             --bind core (or numa) with it",
            args.progress
        );
    }
    if args.nodes == 0 || args.nodes > args.np {
        bail!("--nodes must be between 1 and -n ({})", args.np);
    }
    check_seconds("--kill-grace", Some(args.kill_grace), 0.0, MAX_KILL_GRACE)?;
    check_seconds("--timeout", args.timeout, MIN_SECONDS, MAX_TIMEOUT)?;
    check_seconds("--time-limit", args.time_limit, MIN_SECONDS, MAX_TIME_LIMIT)?;
    for kv in &args.env {
        let Some((k, _)) = split_env(kv) else {
            bail!(
                "--env expects KEY=VALUE, got {}",
                henv::shown(&kv.to_string_lossy())
            );
        };
        if let Some(v) = henv::ALL
            .iter()
            .find(|v| v.kind == henv::Kind::Launcher && k == v.name)
        {
            bail!(
                "-x {}: hpc run sets {} for each rank itself; it cannot be given",
                v.name,
                v.name
            );
        }
        // Variables a flag sets for every rank: one given both ways would lose
        // one of them without a word (`--trace` refuses `-x HPC_TRACE` itself).
        let flagged = [
            (henv::NODE_NAME, "--nodes", args.nodes > 1),
            (hpc_comm::proxy::PROXY_CMD, "--proxy", args.proxy),
        ];
        if let Some((name, flag, _)) = flagged.iter().find(|(name, _, on)| *on && k == *name) {
            bail!("-x {name} and {flag} both set {name} for the ranks: give one of them");
        }
        // A name of hpc-rs's own form that its reference does not list is most
        // likely a misspelt one, which the ranks would ignore without a word.
        let name = k.to_string_lossy();
        if name.starts_with("HPC_") && !henv::ALL.iter().any(|v| v.name == name) {
            tracing::warn!(
                "-x {}: no setting of hpc-rs has this name (the book's reference lists them); \
                 passed to the ranks as it is",
                henv::short(&name)
            );
        }
    }
    // Three descriptors per rank in this process (two pipes and a socket) plus slack.
    // `None`: no limit.
    if let Some(limit) = rustix::process::getrlimit(rustix::process::Resource::Nofile).current {
        let need = 3 * args.np as u64 + 64;
        if limit < need {
            bail!(
                "-n {} needs about {need} open files but the limit is {} (raise it with `ulimit -n`)",
                args.np,
                limit
            );
        }
    }
    Ok(())
}

/// `KEY=VALUE` of `-x` split at the first `=`: `None` without one or with an
/// empty key. The value is any bytes, as the environment allows.
fn split_env(kv: &std::ffi::OsStr) -> Option<(&std::ffi::OsStr, &std::ffi::OsStr)> {
    use std::os::unix::ffi::OsStrExt;
    let b = kv.as_bytes();
    let eq = b.iter().position(|&c| c == b'=')?;
    (eq > 0).then(|| {
        (
            std::ffi::OsStr::from_bytes(&b[..eq]),
            std::ffi::OsStr::from_bytes(&b[eq + 1..]),
        )
    })
}

/// What `hpc run` takes from the settings (`HPC_*`) of its environment and `-x`.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The ranks' and the coordinator's timeout (`--timeout`, else `HPC_TIMEOUT`).
    pub timeout: Duration,
    /// Compute threads per rank (`--threads`, else `HPC_THREADS`, else 1).
    pub threads: usize,
    /// The ranks' `HPC_TRACE` (`--trace`), set by [`exec`].
    pub trace_dir: Option<PathBuf>,
}

/// Reads [`Settings`]: a flag wins over `-x KEY=VALUE`, which wins over `env` (the
/// launcher's environment, as [`std::env::vars_os`] gives it). A setting that the
/// runtime would refuse is refused here, naming the variable, before anything
/// starts. Only `HPC_TIMEOUT`, `HPC_THREADS` and `HPC_BOOTSTRAP` (which must leave
/// the ranks to the launcher) are read; every other variable, UTF-8 or not, is left
/// to reach the ranks untouched.
pub fn settings(
    args: &Args,
    env: impl IntoIterator<Item = (OsString, OsString)>,
) -> anyhow::Result<Settings> {
    let ours =
        |k: &std::ffi::OsStr| k == henv::TIMEOUT || k == henv::THREADS || k == henv::BOOTSTRAP;
    let mut raw: Vec<(OsString, OsString)> = env.into_iter().filter(|(k, _)| ours(k)).collect();
    for kv in &args.env {
        if let Some((k, v)) = split_env(kv) {
            if ours(k) {
                raw.push((k.to_owned(), v.to_owned()));
            }
        }
    }
    // Later entries (`-x`) win over earlier ones (the environment).
    let mut vars = std::collections::HashMap::new();
    for (k, v) in raw {
        let k = k.to_string_lossy().into_owned();
        let v = v.into_string().map_err(|v| {
            anyhow::anyhow!(
                "{k}={} is not valid UTF-8 (shown with U+FFFD for the invalid bytes)",
                henv::shown(&v.to_string_lossy())
            )
        })?;
        vars.insert(k, v);
    }
    let timeout = match args.timeout {
        Some(s) => Duration::from_secs_f64(s),
        None => {
            let t = henv::timeout_from(&vars).map_err(anyhow::Error::msg)?;
            if t.as_secs_f64() < MIN_SECONDS {
                bail!(
                    "{}={} is below the {} ms the ranks are given it in",
                    henv::TIMEOUT,
                    henv::shown(&vars[henv::TIMEOUT]),
                    MIN_SECONDS * 1e3
                );
            }
            t
        }
    };
    let threads = match (args.threads, vars.get(henv::THREADS)) {
        (Some(t), _) => t,
        (None, None) => 1,
        (None, Some(v)) => match v.trim().parse::<usize>() {
            Ok(t) if (1..=MAX_THREADS).contains(&t) => t,
            _ => bail!(
                "{}={} is not a number of threads between 1 and {MAX_THREADS}",
                henv::THREADS,
                henv::shown(v)
            ),
        },
    };
    // Another bootstrap would make each rank a job of its own (rank 0 of 1),
    // the job of -n ranks run as that many singletons without a word.
    if let Some(b) = vars.get(henv::BOOTSTRAP) {
        let b = b.trim().to_ascii_lowercase();
        if !matches!(b.as_str(), "" | "auto" | "launcher") {
            bail!(
                "{}={}: under hpc run each rank would start alone instead of joining \
                 the job of -n {}; unset it, or give launcher",
                henv::BOOTSTRAP,
                // As given (trimmed, lowercase) unless too long for a line.
                henv::short(&b),
                args.np
            );
        }
    }
    Ok(Settings {
        timeout,
        threads,
        trace_dir: None,
    })
}

/// The most compute threads per rank `--threads` or `HPC_THREADS` may ask for.
pub const MAX_THREADS: usize = 1 << 16;

/// The shortest `--timeout`, `--time-limit` or `HPC_TIMEOUT`: a millisecond, the
/// resolution the timeout reaches the ranks in (a shorter one would reach them as 0).
pub const MIN_SECONDS: f64 = 1e-3;

/// The longest `--timeout`: what the ranks' runtime accepts in `HPC_TIMEOUT`.
pub const MAX_TIMEOUT: f64 = 7.0 * 86400.0;
/// The longest `--time-limit` (a year).
pub const MAX_TIME_LIMIT: f64 = 366.0 * 86400.0;
/// The longest `--kill-grace` (a day).
pub const MAX_KILL_GRACE: f64 = 86400.0;

/// Checks a flag in seconds: a number in `[min, max]`.
fn check_seconds(name: &str, v: Option<f64>, min: f64, max: f64) -> anyhow::Result<()> {
    let Some(v) = v else { return Ok(()) };
    if !(v.is_finite() && v >= min && v <= max) || Duration::try_from_secs_f64(v).is_err() {
        let low = if min > 0.0 {
            format!("of at least {min}")
        } else {
            "of at least 0".to_string()
        };
        let got = if v.is_finite() && (v.abs() >= 1e9 || (v != 0.0 && v.abs() < 1e-3)) {
            format!("{v:e}")
        } else {
            v.to_string()
        };
        bail!(
            "{name} must be a number of seconds {low} and at most {max} ({}), got {got}",
            human(max)
        );
    }
    Ok(())
}

fn human(secs: f64) -> String {
    match secs as u64 {
        86400 => "1 day".to_string(),
        s if s % 86400 == 0 && s >= 86400 => format!("{} days", s / 86400),
        s => format!("{s} s"),
    }
}

fn describe(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(s)) => format!("was killed by signal {s} ({})", signal_name(s)),
        _ => "ended in an unknown way".into(),
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGPIPE => "SIGPIPE",
        _ => "signal",
    }
}

fn exit_code_of(status: &ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    }
}

/// The status `hpc run` exits with for a rank's exit status `code` that the
/// launcher keeps for itself (124: `--time-limit`, 125: `hpc run` failed), or `None`
/// when the rank's status passes through.
pub fn reserved_status(code: i32) -> Option<i32> {
    matches!(code, 124 | super::EXIT_RUN_FAILED).then_some(super::EXIT_RANK_RESERVED)
}

fn kill_group(pid: u32, sig: i32) {
    // The process group the rank leads; a rank already gone is no error here.
    let group = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    if let (Some(group), Some(sig)) = (group, rustix::process::Signal::from_named_raw(sig)) {
        let _ = rustix::process::kill_process_group(group, sig);
    }
}

/// The `HPC_COLL_PROXY_CMD` of a node's ranks: this `hpc` binary's `proxy` subcommand,
/// pinned to the progress CPUs of the node's ranks when `--bind` reserved some.
fn proxy_command(plan: &bind::Plan, node_ranks: &[usize]) -> anyhow::Result<String> {
    let exe = std::env::current_exe().context("locating the hpc binary for --proxy")?;
    let exe = exe.to_string_lossy().into_owned();
    if exe.contains(char::is_whitespace) {
        bail!("--proxy: the path of the hpc binary contains white space ({exe}); move it");
    }
    let cpus: hpc_topology::CpuSet = node_ranks
        .iter()
        .filter_map(|&r| plan.progress.get(r))
        .flatten()
        .map(|&c| c as u32)
        .collect();
    Ok(if cpus.is_empty() {
        format!("{exe} proxy")
    } else {
        format!("{exe} proxy --cpus {cpus}")
    })
}

/// Warns when `stdin` (this process's standard input) is a file with something in
/// it: every rank's standard input is `/dev/null`, so `hpc run -n 4 -- ./app <
/// input` (where `mpirun` hands the file to rank 0) would run on no input without
/// a word. Returns whether it warned.
fn warn_if_input_is_lost(stdin: &Path) -> bool {
    let lost = std::fs::metadata(stdin).is_ok_and(|m| m.is_file() && m.len() > 0);
    if lost {
        note!(
            "hpc run: warning: standard input is a file of bytes that no rank reads \
             (every rank's standard input is /dev/null); pass the file's name to the program"
        );
    }
    lost
}

/// Runs `hpc run`.
pub fn exec(args: Args) -> anyhow::Result<i32> {
    // The CPUs this process may run on (cgroups, taskset, an outer launcher).
    let allowed = hpc_topology::current_binding()
        .map(|set| set.len())
        .unwrap_or_else(|_| std::thread::available_parallelism().map_or(1, |n| n.get()));
    // Bad arguments are the user's input, exit status 2 as for every subcommand; 125
    // is kept for a launcher that failed once its arguments were accepted.
    validate(&args, allowed).map_err(|e| super::UsageError(hpc_io::message::chain(e.as_ref())))?;
    let mut settings = settings(&args, std::env::vars_os())
        .map_err(|e| super::UsageError(hpc_io::message::chain(e.as_ref())))?;
    let program = resolve_program(Path::new(&args.command[0]))?;
    warn_if_input_is_lost(Path::new("/proc/self/fd/0"));
    let n = args.np;
    let plan = bind::plan(args.bind, n, settings.threads, args.progress)
        .context("computing the placement for --bind")?;
    if args.show_placement {
        // Asked for: a failed write is an error (eprint! would panic).
        let table = plan.table.as_deref().unwrap_or(NO_PLACEMENT);
        std::io::stderr()
            .write_all(table.as_bytes())
            .context("writing the placement to standard error")?;
    }

    // Every flag is checked and every input read: from here on the job runs.
    let trace = match &args.trace {
        Some(file) => Some(super::trace::RunTrace::prepare(file, &args.env)?),
        None => None,
    };
    settings.trace_dir = trace.as_ref().map(|t| t.dir.clone());
    let supervisor_of = match job::split() {
        job::Role::Front(code) => return Ok(code),
        job::Role::Supervisor { front } => front,
    };
    let code = run_job(&args, &settings, &program, &plan, supervisor_of);
    match (trace, code) {
        (Some(t), Ok(code)) => Ok(t.finish(code, args.np)),
        (Some(t), Err(e)) => {
            t.discard();
            Err(e)
        }
        (None, code) => code,
    }
}

/// The emulated node of `rank` among `n` ranks split into `nodes` contiguous
/// blocks whose sizes differ by at most one, and the ranks of that node. Blocks
/// of `ceil(n / nodes)` ranks left nodes empty (`-n 5 --nodes 4` made 3 nodes).
pub fn node_block(n: usize, nodes: usize, rank: usize) -> (usize, std::ops::Range<usize>) {
    let (small, big) = (n / nodes, n % nodes);
    // The first `big` nodes hold one rank more.
    let start = |node: usize| node * small + node.min(big);
    let node = if rank < big * (small + 1) {
        rank / (small + 1)
    } else {
        big + (rank - big * (small + 1)) / small
    };
    (node, start(node)..start(node + 1))
}

/// The command that starts rank `rank`: its program and arguments, its
/// environment (the coordinator's, its node's, the binding's, `--env`), its
/// pipes, and what it does between fork and exec (binding, death with the
/// launcher).
fn rank_command(
    args: &Args,
    settings: &Settings,
    program: &Path,
    plan: &bind::Plan,
    coord: &Coordinator,
    job_id: &str,
    rank: usize,
) -> anyhow::Result<Command> {
    let timeout = settings.timeout;
    let (node, block) = node_block(args.np, args.nodes, rank);
    let node_ranks: Vec<usize> = block.collect();
    let mut cmd = Command::new(program);
    cmd.args(&args.command[1..]);
    // What an outer job set for its own ranks is not this job's.
    for var in henv::ALL.iter().filter(|v| v.kind == henv::Kind::Launcher) {
        cmd.env_remove(var.name);
    }
    cmd.envs(coord.rank_env(rank))
        .env(
            hpc_runtime::env::LOCAL_RANK,
            (rank - node_ranks[0]).to_string(),
        )
        .env(hpc_runtime::env::LOCAL_SIZE, node_ranks.len().to_string())
        .env(henv::JOB_ID, job_id)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if args.nodes > 1 {
        cmd.env(henv::NODE_NAME, format!("node{node}"));
    }
    for kv in &args.env {
        if let Some((k, v)) = split_env(kv) {
            cmd.env(k, v);
        }
    }
    // The timeout the coordinator was given, whichever way it came (at least
    // MIN_SECONDS, so never written as 0).
    cmd.env(henv::TIMEOUT, timeout.as_secs_f64().to_string());
    if let Some(dir) = &settings.trace_dir {
        cmd.env(henv::TRACE, dir);
    }
    let cpus = plan.cpus.get(rank).cloned().unwrap_or_default();
    if args.bind != BindPolicy::None || args.threads.is_some() {
        cmd.env(hpc_runtime::env::THREADS, settings.threads.to_string());
    }
    if !cpus.is_empty() {
        let set: hpc_topology::CpuSet = cpus.iter().map(|&c| c as u32).collect();
        cmd.env(henv::CPUSET, set.to_string());
    }
    let progress = plan.progress.get(rank).cloned().unwrap_or_default();
    if !progress.is_empty() {
        let set: hpc_topology::CpuSet = progress.iter().map(|&c| c as u32).collect();
        // Where the Thread engine pins its progress thread.
        cmd.env(henv::PROGRESS_CPUSET, set.to_string());
    }
    if args.proxy {
        cmd.env(
            hpc_comm::proxy::PROXY_CMD,
            proxy_command(plan, &node_ranks)?,
        );
    }
    let mut set = bind::CpuSet::new(&cpus);
    // SAFETY: the closure runs in the child between fork and exec and only makes
    // async-signal-safe system calls (prctl, signal, sched_setaffinity) on data
    // prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            // Die with the launcher, even if it is killed with SIGKILL.
            let _ = rustix::process::set_parent_process_death_signal(Some(
                rustix::process::Signal::KILL,
            ));
            // The supervisor ignores SIGTTOU; the ranks get the default back.
            libc::signal(libc::SIGTTOU, libc::SIG_DFL);
            set.apply()
        });
    }
    Ok(cmd)
}

/// The supervisor's part of `hpc run`: starts the ranks and sees the job through.
fn run_job(
    args: &Args,
    settings: &Settings,
    program: &Path,
    plan: &bind::Plan,
    front: Option<libc::pid_t>,
) -> anyhow::Result<i32> {
    let n = args.np;
    let timeout = settings.timeout;
    // From the kernel, or no job: never a secret made from the clock.
    let secret = hpc_runtime::random_u64().context("making the job's secret")?;
    let job_id = format!("{:08x}", hpc_runtime::random_u64()? as u32);
    let coord = Coordinator::start(n, secret, timeout, IpAddr::V4(Ipv4Addr::LOCALHOST))
        .context("starting the launcher's coordinator")?;
    let rendezvous = coord.addr().to_string();
    let width = (n - 1).to_string().len();

    install_signal_handlers();
    // A standard output closed when `hpc run` started fails the first line
    // written there (the runtime had put `/dev/null` in its place).
    let stdout = Arc::new(Mutex::new(super::stdout::Stdout));
    let stderr = Arc::new(Mutex::new(super::stdout::Stderr));
    let (out_tx, out_rx) = mpsc::channel::<job::Output>();
    // The forwarders in a write to hpc run's own output ([`job::forward`]).
    let writing = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut pids: Vec<u32> = Vec::with_capacity(n);
    let mut forwarders = 0usize;
    let started = Instant::now();

    for rank in 0..n {
        let mut cmd = rank_command(args, settings, program, plan, &coord, &job_id, rank)?;
        // What cannot be started stops the ranks started before it.
        let abandon = |pids: &[u32]| {
            for &pid in pids {
                kill_group(pid, libc::SIGKILL);
            }
            job::kill_everything(Duration::from_secs(2), |_, _| {});
        };
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                abandon(&pids);
                bail!(
                    "cannot start rank {rank} ({}): {e}{}",
                    hpc_io::message::path(program),
                    missing_loader(program, &e)
                );
            }
        };
        pids.push(child.id());
        let tag =
            (!args.no_tag).then(|| (format!("[{rank:>width$}] "), format!("[{rank:>width$}]+")));
        let mut streams = Vec::with_capacity(2);
        if let Some(o) = child.stdout.take() {
            streams.push(job::forward(
                o,
                stdout.clone(),
                tag.clone(),
                "stdout",
                out_tx.clone(),
                writing.clone(),
            ));
        }
        if let Some(e) = child.stderr.take() {
            streams.push(job::forward(
                e,
                stderr.clone(),
                tag,
                "stderr",
                out_tx.clone(),
                writing.clone(),
            ));
        }
        for s in streams {
            match s {
                Ok(_) => forwarders += 1,
                Err(e) => {
                    abandon(&pids);
                    bail!("cannot start a thread to forward rank {rank}'s output: {e}");
                }
            }
        }
        // The child is reaped by `job::reap_one` below, never through `child`.
        drop(child);
    }
    drop(out_tx);
    tracing::info!(ranks = n, job = %job_id, %rendezvous, "job started");

    let time_limit = args
        .time_limit
        .map(|s| started + Duration::from_secs_f64(s));
    let mut sv = Supervision {
        pids: &pids,
        alive: vec![true; n],
        remaining: n,
        first_failure: None,
        kill_at: None,
        interrupted: None,
        out_of_time: false,
        forwarders_done: 0,
        failed_streams: Vec::new(),
        grace: Duration::from_secs_f64(args.kill_grace),
    };
    let rank_of = |pid: libc::pid_t| pids.iter().position(|&p| p as libc::pid_t == pid);

    while sv.remaining > 0 {
        if job::front_gone(front) {
            // `hpc run` itself was killed: nothing of the job may outlive it.
            sv.stop_all(libc::SIGKILL);
            job::kill_everything(Duration::from_secs(5), |_, _| {});
            return Ok(128 + libc::SIGKILL);
        }
        if let Ok(o) = out_rx.recv_timeout(Duration::from_millis(20)) {
            sv.output(o);
        }
        while let Some((pid, raw)) = job::reap_one() {
            // None: a process a rank left behind, re-parented to us and now ended.
            if let Some(rank) = rank_of(pid) {
                sv.exited(&coord, rank, ExitStatus::from_raw(raw));
            }
        }
        let sig = SIGNAL.swap(0, Ordering::SeqCst);
        if sig != 0 {
            sv.signal(sig);
        }
        sv.deadlines(time_limit);
    }
    // Every rank has exited: nothing they started may outlive the job (a `setsid`
    // child holding a pipe open, say). Then their output is drained, bounded.
    job::kill_everything(Duration::from_secs(5), |_, _| {});
    sv.drain(&out_rx, forwarders, &writing, time_limit, front);
    coord.shutdown();
    tracing::info!(elapsed = ?started.elapsed(), "job finished");
    if let Some(sig) = sv.interrupted {
        return Ok(128 + sig);
    }
    Ok(match sv.first_failure {
        Some((_, _, code)) => {
            if code == 0 {
                1
            } else {
                code
            }
        }
        None => 0,
    })
}
