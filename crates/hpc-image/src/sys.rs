//! Running programs: the tools the image builder drives (cargo, ldd, dpkg,
//! mmdebstrap, apptainer) and installing missing ones on Debian/Ubuntu.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Debian packages of the container tool chain (`--setup-tools`): `mmdebstrap` for
/// the base file system and the engines and tools that load, inspect and run the
/// images.
pub const TOOL_PACKAGES: &[&str] = &[
    "mmdebstrap",
    "podman",
    "skopeo",
    "umoci",
    "runc",
    "uidmap",
    "fuse-overlayfs",
];

/// The cargo that runs us (`CARGO`), else `cargo` from the PATH.
pub fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Runs a command, echoing it, failing on a non-zero exit.
pub fn run(cmd: &mut Command) -> Result<()> {
    run_echoed(cmd, None)
}

/// [`run`] in the folder `dir` (which the echo leaves out).
pub fn run_in(dir: &std::path::Path, cmd: &mut Command) -> Result<()> {
    run_echoed(cmd, Some(dir))
}

fn run_echoed(cmd: &mut Command, dir: Option<&std::path::Path>) -> Result<()> {
    let shown = format!("{cmd:?}").replace('"', "");
    say!("\n==> {shown}");
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    let t = Instant::now();
    let status = status_guarded(cmd).with_context(|| format!("cannot run {shown}"))?;
    say!("    ({:.1}s)", t.elapsed().as_secs_f64());
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

/// The signal that stopped a build while one of its tools ran: the tool's process
/// group was stopped first (see [`status_guarded`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted(pub i32);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stopped by signal {}", self.0)
    }
}

impl std::error::Error for Interrupted {}

/// The process group of the tool running now (0: none; [`STARTING`]).
static RUNNING: AtomicI32 = AtomicI32::new(0);
/// [`RUNNING`] while a tool is being started.
const STARTING: i32 = -1;
/// The stopping signal that came while a tool ran (0: none).
static STOPPED_BY: AtomicI32 = AtomicI32::new(0);
/// The signals that stop a build.
const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Whether a stopping signal that comes while no tool runs is held for the
/// build's next [`stop_point`] (see [`defer_stops`]) rather than taken at once.
static DEFERRED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_stop_signal(sig: libc::c_int) {
    let held = DEFERRED.load(Ordering::SeqCst) && STOPPED_BY.load(Ordering::SeqCst) == 0;
    if RUNNING.load(Ordering::SeqCst) == 0 && !held {
        // No tool runs, and the build does not hold the signal (or was already
        // told once): stop as if no handler were installed.
        // SAFETY: signal and raise are async-signal-safe.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    } else {
        STOPPED_BY.store(sig, Ordering::SeqCst);
    }
}

fn install_stop_handlers() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for sig in STOP_SIGNALS {
            let handler: extern "C" fn(libc::c_int) = on_stop_signal;
            // SAFETY: the handler only makes async-signal-safe calls (atomics,
            // signal, raise); the cast is the documented way to pass its address.
            unsafe {
                libc::signal(sig, handler as libc::sighandler_t);
            }
        }
    });
}

/// Held while a build writes its output folder ([`defer_stops`]): a SIGINT,
/// SIGTERM or SIGHUP that comes while no tool runs is held until the build's
/// next [`stop_point`], which ends it with [`Interrupted`] so that it removes
/// what it had begun; a second such signal stops the process at once.
pub struct StopsDeferred(());

impl Drop for StopsDeferred {
    fn drop(&mut self) {
        DEFERRED.store(false, Ordering::SeqCst);
    }
}

/// Holds the stopping signals that come between the build's tools for its next
/// [`stop_point`] while the guard lives: such a signal ended the build at once,
/// leaving `.image.json.lock`, `app-layer.tmp` and a part of `oci/` in `--out`.
pub fn defer_stops() -> StopsDeferred {
    install_stop_handlers();
    DEFERRED.store(true, Ordering::SeqCst);
    StopsDeferred(())
}

/// [`Interrupted`] when a stopping signal came since the last look (see
/// [`defer_stops`]): the build calls it between its stages.
pub fn stop_point() -> Result<()> {
    match STOPPED_BY.swap(0, Ordering::SeqCst) {
        0 => Ok(()),
        sig => Err(anyhow::Error::new(Interrupted(sig)).context(
            "stopped between the build's stages; what it began in the output folder is removed",
        )),
    }
}

/// Starts `cmd` as a tool of the build that does not outlive it: the tool leads a
/// process group of its own (its children with it), its standard input is
/// empty, and it gets SIGTERM when this process ends, even by SIGKILL (the
/// spawning thread ending counts as this process ending, so call it from the
/// thread that lives as long as the build); its group then gets SIGTERM and
/// SIGKILL from its [`Guardian`], which the caller keeps until the tool was
/// waited for.
fn spawn_guarded(cmd: &mut Command) -> std::io::Result<(Child, Option<Guardian>)> {
    let parent = rustix::process::getpid();
    // SAFETY: the closure runs between fork and exec and makes only
    // async-signal-safe system calls (setpgid, prctl, getppid, _exit).
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::setpgid(None, None)?;
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM))?;
            // The parent may have ended before the death signal was set.
            if rustix::process::getppid() != Some(parent) {
                libc::_exit(143);
            }
            Ok(())
        });
    }
    cmd.stdin(Stdio::null());
    install_stop_handlers();
    // From here a stopping signal is held for the wait (a tool that has started
    // has no group in RUNNING yet), not taken at once.
    RUNNING.store(STARTING, Ordering::SeqCst);
    let child = cmd.spawn();
    if child.is_err() {
        RUNNING.store(0, Ordering::SeqCst);
    }
    let child = child?;
    // The tool leads its group from its first instruction (setpgid before exec).
    let guardian = Guardian::start(child.id() as libc::pid_t);
    Ok((child, guardian))
}

/// A process that stops a tool's process group if this process ends while the
/// tool runs, by SIGKILL too: the tool's death signal (see [`spawn_guarded`])
/// reaches the tool alone, and cargo, stopped so, leaves a running rustc to
/// finish its crate. Forked from this process, it waits on a pipe whose only
/// write end this process holds: a byte means the tool was waited for (it exits
/// quietly); the end of the pipe means this process ended first (it sends
/// SIGTERM to the group, then SIGKILL after 5 s). Dropping it sends the byte
/// and reaps it.
struct Guardian {
    pid: libc::pid_t,
    done: libc::c_int,
}

impl Guardian {
    /// Starts the guardian of the process group `pgid`; `None` (with a warning)
    /// where the pipe or the fork fails: the tool then has its death signal only.
    fn start(pgid: libc::pid_t) -> Option<Guardian> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            let e = std::io::Error::last_os_error();
            say!("warning: no guardian for the tool's process group: cannot make its pipe: {e}");
            return None;
        }
        let (rd, wr) = (fds[0], fds[1]);
        // SAFETY: the child is a fork of a process that may run other threads, so
        // it makes only async-signal-safe calls ([`guard`]) and never returns.
        match unsafe { libc::fork() } {
            // SAFETY: this is the forked child, `rd` the pipe's read end.
            0 => unsafe { guard(rd, pgid) },
            -1 => {
                let e = std::io::Error::last_os_error();
                say!("warning: no guardian for the tool's process group: cannot fork: {e}");
                // SAFETY: both descriptors are ours and closed once.
                unsafe {
                    libc::close(rd);
                    libc::close(wr);
                }
                None
            }
            pid => {
                // SAFETY: the read end is the guardian's alone from here.
                unsafe { libc::close(rd) };
                Some(Guardian { pid, done: wr })
            }
        }
    }
}

impl Drop for Guardian {
    fn drop(&mut self) {
        // SAFETY: the write end is ours, written once and closed once; the
        // guardian is our child, reaped once.
        unsafe {
            libc::write(self.done, [1u8].as_ptr().cast(), 1);
            libc::close(self.done);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// The guardian's life: alone in a process group of its own (a terminal's
/// signals to the build's group pass it by), with no descriptor but its pipe's
/// read end (a reader of the build's output sees its end when the build ends).
///
/// # Safety
///
/// Called only in the child of `fork`, with `rd` the read end of the pipe.
unsafe fn guard(rd: libc::c_int, pgid: libc::pid_t) -> ! {
    // SAFETY: every call is async-signal-safe (setpgid, dup2, close_range,
    // close, read, kill, nanosleep, _exit) and touches only this process's
    // descriptors and the stack, as the child of a fork must.
    unsafe {
        libc::setpgid(0, 0);
        if rd != 0 {
            libc::dup2(rd, 0);
        }
        if libc::syscall(libc::SYS_close_range, 1u32, u32::MAX, 0u32) != 0 {
            for fd in 1..1024 {
                libc::close(fd);
            }
        }
        let mut b = 0u8;
        let n = loop {
            let n = libc::read(0, (&mut b as *mut u8).cast(), 1);
            if n >= 0 || *libc::__errno_location() != libc::EINTR {
                break n;
            }
        };
        if n == 0 {
            // The build ended while its tool ran.
            libc::kill(-pgid, libc::SIGTERM);
            let nap = libc::timespec {
                tv_sec: 0,
                tv_nsec: 50_000_000,
            };
            for _ in 0..100 {
                if libc::kill(-pgid, 0) != 0 {
                    libc::_exit(0);
                }
                libc::nanosleep(&nap, std::ptr::null_mut());
            }
            libc::kill(-pgid, libc::SIGKILL);
        }
        libc::_exit(0)
    }
}

/// Sends `sig` to the process group `pgid` (the tool's own); a group already
/// gone, or a signal rustix does not name, is no error: there is nothing left to stop.
fn signal_group(pgid: i32, sig: libc::c_int) {
    if let (Some(group), Some(sig)) = (
        rustix::process::Pid::from_raw(pgid),
        rustix::process::Signal::from_named_raw(sig),
    ) {
        let _ = rustix::process::kill_process_group(group, sig);
    }
}

/// Waits for a tool started by [`spawn_guarded`]; a SIGINT, SIGTERM or SIGHUP to
/// this process meanwhile is passed to the tool's whole process group (SIGKILL
/// after 10 s), and the wait ends with [`Interrupted`]. With a `deadline`, a tool
/// still running then gets the same stop (SIGTERM to its group, SIGKILL after
/// 10 s), and the wait returns `None`.
fn wait_guarded(child: &mut Child, deadline: Option<Instant>) -> Result<Option<ExitStatus>> {
    let pgid = child.id() as i32;
    RUNNING.store(pgid, Ordering::SeqCst);
    let result = (|| loop {
        if let Some(status) = child.try_wait()? {
            break Ok(Some(status));
        }
        let sig = STOPPED_BY.load(Ordering::SeqCst);
        if sig != 0 {
            stop_group(child, pgid, sig)?;
            break Err(tool_stopped(sig));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            stop_group(child, pgid, libc::SIGTERM)?;
            break Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    })();
    RUNNING.store(0, Ordering::SeqCst);
    // Kept for the build's next stage and its next tools, not taken here: a
    // caller that reads a failed tool as an answer (`dpkg -S`: "no package")
    // went on, and a stop during its tools ended the build with status 0.
    let sig = STOPPED_BY.load(Ordering::SeqCst);
    if result.is_ok() && sig != 0 {
        return Err(tool_stopped(sig));
    }
    result
}

/// [`Interrupted`] by `sig` while a tool ran, which was stopped.
fn tool_stopped(sig: i32) -> anyhow::Error {
    anyhow::Error::new(Interrupted(sig))
        .context("the running tool and its process group were stopped")
}

/// Stops the tool `child`, leader of the process group `pgid`: `sig` to the
/// group, SIGKILL after 10 s, and SIGKILL to what is left of the group (its
/// children, had they left its leader behind).
fn stop_group(child: &mut Child, pgid: i32, sig: libc::c_int) -> std::io::Result<()> {
    signal_group(pgid, sig);
    let t = Instant::now();
    while child.try_wait()?.is_none() {
        if t.elapsed() > Duration::from_secs(10) {
            signal_group(pgid, libc::SIGKILL);
            child.wait()?;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    signal_group(pgid, libc::SIGKILL);
    Ok(())
}

/// A tool that did not end within its time limit ([`output_within`]): it and its
/// process group were stopped (shared with the `hpc` tool's own tools).
pub use hpc_io::tool::TimedOut;

use hpc_io::tool::shown_command;

/// The most bytes of a tool's standard output, and of its standard error, that
/// [`output_guarded`] keeps.
pub const MAX_TOOL_OUTPUT: u64 = 8 << 20;

/// Runs a tool of the build with its standard output and error inherited, as
/// [`Command::status`] does, but so that it does not outlive the build (the
/// rules of [`output_guarded`]).
pub fn status_guarded(cmd: &mut Command) -> Result<ExitStatus> {
    let (mut child, _guardian) = spawn_guarded(cmd)?;
    wait_guarded(&mut child, None)?
        .ok_or_else(|| anyhow::anyhow!("{} was stopped", shown_command(cmd)))
}

/// Runs a tool of the build and collects its output, as [`Command::output`]
/// does, but so that it does not outlive the build: the tool leads its own
/// process group; a SIGINT, SIGTERM or SIGHUP to this process stops that group
/// and ends the run with [`Interrupted`] (the caller then removes what the tool
/// was writing); the tool gets SIGTERM if this process is killed outright
/// (SIGKILL), and its whole group, a running rustc under cargo too, from a
/// guardian process that outlives this one. Of each stream the first
/// [`MAX_TOOL_OUTPUT`] bytes are kept and the rest read and dropped (an
/// `apptainer` that never stopped printing was read into memory without end).
pub fn output_guarded(cmd: &mut Command) -> Result<Output> {
    output_until(cmd, None)
}

/// [`output_guarded`] for a tool that should end within `limit` (an `apptainer
/// inspect`): one still running then, or whose output is still held open by a
/// process it started, is stopped (its process group: SIGTERM, SIGKILL after 10
/// s), and the run ends with [`TimedOut`], naming the command (a hanging
/// `apptainer` hung the build without a word).
pub fn output_within(cmd: &mut Command, limit: Duration) -> Result<Output> {
    output_until(cmd, Some(limit))
}

fn output_until(cmd: &mut Command, limit: Option<Duration>) -> Result<Output> {
    // `Instant + Duration::MAX` panicked: a limit no clock reaches is none
    // (as `hpc_io::tool::output_within` takes it).
    let deadline = limit.and_then(|l| Instant::now().checked_add(l));
    let shown = shown_command(cmd);
    let timed_out = || -> anyhow::Error {
        TimedOut {
            command: shown.clone(),
            limit: limit.unwrap_or_default(),
        }
        .into()
    };
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let (mut child, _guardian) = spawn_guarded(cmd)?;
    let out = hpc_io::tool::drain(child.stdout.take(), MAX_TOOL_OUTPUT);
    let err = hpc_io::tool::drain(child.stderr.take(), MAX_TOOL_OUTPUT);
    let Some(status) = wait_guarded(&mut child, deadline)? else {
        return Err(timed_out());
    };
    // A process the tool started outside its group may hold its output open:
    // waited for until the deadline, not without end.
    let (Some(stdout), Some(stderr)) = (
        hpc_io::tool::collect(&out, deadline),
        hpc_io::tool::collect(&err, deadline),
    ) else {
        return Err(timed_out());
    };
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// The path of a program on the PATH.
pub fn which(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Whether a program is on the PATH.
pub fn has(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn dpkg_installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

/// Whether this process runs as root (its effective user).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Installs missing Debian packages (as root), or says exactly what to run: the
/// one installer of the workspace (`cargo xtask setup` uses it too).
pub fn apt(packages: &[&str]) -> Result<()> {
    if !has("dpkg-query") {
        say!(
            "note: not a Debian/Ubuntu system; make sure these are installed: {}",
            packages.join(" ")
        );
        return Ok(());
    }
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| !dpkg_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let cmd = format!(
        "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {}",
        missing.join(" ")
    );
    if !is_root() {
        bail!(
            "missing system packages: {}\nrun as root:\n  sudo sh -c '{cmd}'",
            missing.join(" ")
        );
    }
    say!("==> installing {}", missing.join(" "));
    run(Command::new("sh").args(["-c", &cmd]))
}

/// An exclusive lock on a directory (an `flock` on `DIR/.lock`), held until dropped.
pub struct DirLock {
    _file: std::fs::File,
}

/// Takes the exclusive lock of `dir` (created if missing), waiting for another
/// holder and saying so.
pub fn lock_dir(dir: &std::path::Path) -> Result<DirLock> {
    use rustix::fs::{flock, FlockOperation};
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating {}", hpc_io::message::path(dir)))?;
    let path = dir.join(".lock");
    // Never through a link, never blocking: a FIFO there was opened for
    // writing and waited for a reader for ever (a stop held for the next
    // stage could not end it), and a link there had its target made.
    // Its refusal gives a cache's advice, not an output directory's (hostile
    // pass 20: "remove it or choose another output directory").
    let (file, _) = hpc_io::rundir::open_own(&path, true)
        .map_err(|e| match e {
            hpc_io::rundir::Error::WrongType { path, kind, wanted } => anyhow::anyhow!(
                "{} is {kind}, not {wanted}: it is the cache's lock, which image builds \
                 share; remove it (the next build makes it anew) or choose another cache \
                 folder (--cache)",
                hpc_io::message::path(&path)
            ),
            e => anyhow::Error::new(e),
        })
        .with_context(|| format!("locking the folder {}", hpc_io::message::path(dir)))?
        .with_context(|| format!("opening {}", hpc_io::message::path(&path)))?;
    let mut said = false;
    loop {
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(DirLock { _file: file }),
            Err(rustix::io::Errno::WOULDBLOCK) => {}
            Err(e) => {
                return Err(std::io::Error::from(e))
                    .with_context(|| format!("locking {}", hpc_io::message::path(&path)))
            }
        }
        if !said {
            say!(
                "    waiting for {}: another image build uses this cache",
                hpc_io::message::path(&path)
            );
            said = true;
        }
        // Polled, not blocked on: a stop that comes meanwhile is taken here.
        stop_point()?;
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    /// Hostile pass 20: a FIFO at the cache's `.lock` was opened for writing
    /// and waited for a reader for ever (`timeout`'s SIGTERM was held for the
    /// next stage: 10 minutes, then SIGKILL), and a link there to nothing had
    /// its target made. Both are refused at once, naming the file.
    #[test]
    fn a_lock_that_is_a_fifo_or_a_link_is_refused_at_once() {
        let d = hpc_test_support::TmpDir::new("hpc-image", "lock-fifo");
        let fifo = d.join("fifo");
        std::fs::create_dir_all(&fifo).unwrap();
        hpc_test_support::mkfifo(&fifo.join(".lock"));
        let (tx, rx) = std::sync::mpsc::channel();
        let dir = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send(
                super::lock_dir(&dir)
                    .map(|_| ())
                    .map_err(|e| format!("{e:#}")),
            );
        });
        let e = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("lock_dir waited on a FIFO")
            .unwrap_err();
        assert!(e.contains(".lock") && e.contains("a FIFO"), "{e}");
        // Hostile pass 20: the advice was an output directory's.
        assert!(
            e.contains("choose another cache folder (--cache)") && !e.contains("output directory"),
            "{e}"
        );
        let link = d.join("link");
        std::fs::create_dir_all(&link).unwrap();
        std::os::unix::fs::symlink(d.join("made"), link.join(".lock")).unwrap();
        let e = format!("{:#}", super::lock_dir(&link).map(|_| ()).unwrap_err());
        assert!(e.contains("a symbolic link"), "{e}");
        assert!(!d.join("made").exists());
    }

    use super::*;

    #[test]
    fn a_second_lock_waits_for_the_first() {
        let dir = hpc_test_support::TmpDir::unmade("hpc-image", "lock");
        let first = lock_dir(&dir).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let d = dir.to_path_buf();
        let t = std::thread::spawn(move || {
            let _second = lock_dir(&d).unwrap();
            tx.send(()).unwrap();
        });
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(200))
            .is_err());
        drop(first);
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        t.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A tool that prints more than is kept is read to its end, its output kept
    /// bounded: all of it was held in memory (an `apptainer inspect` printing
    /// without end grew the build by gigabytes).
    #[test]
    fn a_tool_printing_without_bound_is_kept_bounded() {
        let n = 3 * MAX_TOOL_OUTPUT;
        let out = output_guarded(
            Command::new("sh")
                .arg("-c")
                .arg(format!("head -c {n} /dev/zero; echo done >&2")),
        )
        .unwrap();
        assert!(out.status.success());
        assert_eq!(out.stdout.len() as u64, MAX_TOOL_OUTPUT);
        assert_eq!(out.stderr, b"done\n");
    }

    /// A tool that never ends (an `apptainer inspect` that hangs) is stopped at
    /// its time limit, and the error names the command: the build waited for it
    /// without end. So is one that ended leaving a process of its own (outside
    /// its group) holding its output open.
    #[test]
    fn a_tool_that_never_ends_is_stopped_at_its_limit_and_named() {
        let t = Instant::now();
        let e = output_within(
            Command::new("sh").args(["-c", "echo started; exec sleep 60"]),
            Duration::from_millis(500),
        )
        .unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
        let timed_out = e.downcast_ref::<TimedOut>().expect("a TimedOut");
        assert_eq!(timed_out.command, "sh -c echo started; exec sleep 60");
        assert!(
            e.to_string()
                .contains("did not end within 0.5 s: it and its process group were stopped"),
            "{e}"
        );
        let t = Instant::now();
        let e = output_within(
            Command::new("sh").args(["-c", "setsid sleep 3 & echo left"]),
            Duration::from_millis(500),
        )
        .unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
        assert!(e.to_string().contains("setsid sleep 3"), "{e}");
        // A tool that ends in time is read as before.
        let out = output_within(
            Command::new("sh").args(["-c", "echo ok"]),
            Duration::from_secs(30),
        )
        .unwrap();
        assert_eq!(out.stdout, b"ok\n");
    }

    /// Hostile pass 20: a limit of `Duration::MAX` (no limit) panicked with
    /// "overflow when adding duration to instant"; it is none, as
    /// `hpc_io::tool::output_within` takes it.
    #[test]
    fn a_limit_beyond_any_instant_is_no_limit() {
        let out = output_within(Command::new("sh").args(["-c", "echo ok"]), Duration::MAX).unwrap();
        assert_eq!(out.stdout, b"ok\n");
    }

    /// Hostile-user pass 18 noted: a SIGINT between the build's tools ended it
    /// at once, leaving `.image.json.lock`, `app-layer.tmp` and a part of
    /// `oci/` in `--out`. While the build holds its stops, such a signal is
    /// kept for its next stage's start, which ends it as [`Interrupted`] (it
    /// then removes what it had begun); a tool started meanwhile is stopped at
    /// once; without the hold, the signal is taken as before.
    #[test]
    fn a_stop_between_the_tools_is_held_for_the_next_stage() {
        let held = defer_stops();
        assert!(stop_point().is_ok());
        // SAFETY: raise sends a signal to this thread; its handler is ours.
        unsafe { libc::raise(libc::SIGINT) };
        let e = stop_point().unwrap_err();
        assert_eq!(
            e.downcast_ref::<Interrupted>(),
            Some(&Interrupted(libc::SIGINT))
        );
        assert_eq!(crate::exit_status(&e), 130);
        assert!(stop_point().is_ok(), "taken once");
        // SAFETY: as above.
        unsafe { libc::raise(libc::SIGTERM) };
        let t = Instant::now();
        let e = output_guarded(Command::new("sh").args(["-c", "exec sleep 60"])).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
        assert_eq!(
            e.downcast_ref::<Interrupted>(),
            Some(&Interrupted(libc::SIGTERM))
        );
        // Kept for the next stage, should the tool's caller take its failure as
        // an answer (`dpkg -S`: "no package"): the build went on and ended 0.
        let e = stop_point().unwrap_err();
        assert_eq!(
            e.downcast_ref::<Interrupted>(),
            Some(&Interrupted(libc::SIGTERM))
        );
        drop(held);
        assert!(!DEFERRED.load(Ordering::SeqCst));
    }

    #[test]
    fn which_finds_sh() {
        assert!(which("sh").is_some());
        assert!(which("no-such-program-hpc-image").is_none());
    }
}
