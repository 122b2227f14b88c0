//! Process supervision for `hpc run`: the split into a front process and a
//! supervisor, the supervisor's reaping of everything the job starts, and the
//! forwarding of the ranks' output.
//!
//! # Nothing outlives the job
//!
//! `hpc run` forks before it starts anything. The *front* (the process the user and
//! the shell see) only forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to the
//! *supervisor* and exits with its exit code. The supervisor is a child subreaper
//! (`PR_SET_CHILD_SUBREAPER`): whatever a rank starts and leaves behind (a
//! daemonised or `setsid` child) is re-parented to it, so it knows every process of
//! the job. It asks for a signal when the front dies (`PR_SET_PDEATHSIG`) and also
//! watches `getppid()`: if the front is killed, even by SIGKILL, the supervisor kills
//! every process of the job and exits. When every rank has exited, it kills what is
//! left of the job, then waits for the ranks' streams to end at most
//! [`OUTPUT_GRACE`], and for what they hold to be written to its own output, which
//! a slow reader takes when it takes it (unless a signal or `--time-limit` stopped
//! the job).
//!
//! # Output
//!
//! Each rank's stdout and stderr are forwarded line by line with the rank's tag. A
//! line longer than [`MAX_LINE`] is cut: each piece after the first is tagged
//! `[R]+`, so a rank that prints without newlines costs at most that much memory.
//! Without tags (`--no-tag`) the bytes are forwarded unchanged, no newline added
//! (a piece of a longer line may then have another rank's line written after it).
//! When `hpc run`'s own stdout or stderr is a broken pipe (`hpc run ... | head`),
//! the job ends as Open MPI's `mpirun` ends it: the ranks are stopped (SIGTERM, then
//! SIGKILL after the grace) and `hpc run` exits with 141 (128 + SIGPIPE), the status
//! a shell pipeline reports for a program killed by SIGPIPE. Passing the broken pipe
//! on to the ranks instead would let a rank that ignores SIGPIPE and write errors
//! (as Rust programs do by default) run on for ever. Any other failed write (a full
//! disk) stops the job the same way, with a message naming the stream and the
//! error, and `hpc run` exits with 125: the launcher itself failed.

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest piece of a line forwarded at once; longer lines are cut.
pub const MAX_LINE: usize = 64 << 10;

/// How long `hpc run` waits for the ranks' streams to end once every rank has
/// exited and every process of the job has been killed (a stream held open by a
/// process outside the job), counted from the last write to its own output.
pub const OUTPUT_GRACE: Duration = Duration::from_secs(1);

/// Writes a line to stderr; a closed stderr is not an error (nor a panic).
macro_rules! note {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}
pub(crate) use note;

/// Where the front forwards the signals it receives.
static SUPERVISOR: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward_signal(sig: libc::c_int) {
    let pid = SUPERVISOR.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe; pid is the supervisor we forked.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Set when the front died (the supervisor's parent-death signal).
pub static FRONT_GONE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_front_gone(_: libc::c_int) {
    FRONT_GONE.store(true, Ordering::SeqCst);
}

/// The signal the supervisor gets when the front dies.
const FRONT_DEATH_SIGNAL: libc::c_int = libc::SIGUSR2;

fn install(sig: libc::c_int, handler: extern "C" fn(libc::c_int)) {
    // SAFETY: installs a handler that only touches atomics or calls kill (both
    // async-signal-safe); the cast is the documented way to pass its address.
    unsafe {
        libc::signal(sig, handler as libc::sighandler_t);
    }
}

/// Threads of this process (from `/proc/self/stat`).
fn threads() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Field 20 (num_threads); the command name (field 2) may hold spaces, so count
    // from its closing parenthesis.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(17)?
        .parse()
        .ok()
}

/// What [`split`] made of this process.
pub enum Role {
    /// The front: wait for the supervisor and exit with this code.
    Front(i32),
    /// The supervisor: run the job; `front` is the front's pid (`None` when the
    /// process could not be split and runs the job alone).
    Supervisor { front: Option<libc::pid_t> },
}

/// Splits `hpc run` into the front and the supervisor. Must be called while the
/// process has a single thread (before the coordinator starts); if it has more, or
/// fork fails, the job runs in this one process (ranks still die with it, their
/// leftovers are still killed when the job ends, but a SIGKILL of `hpc run` leaves
/// the ranks' children behind).
pub fn split() -> Role {
    if threads() != Some(1) {
        tracing::warn!("hpc run has several threads; running without a separate supervisor");
        return Role::Supervisor { front: None };
    }
    let front = std::process::id() as libc::pid_t;
    // SAFETY: the process has one thread (checked above), so the child may go on
    // running Rust code; nothing is shared with the child but copies.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        tracing::warn!(
            error = %std::io::Error::last_os_error(),
            "cannot fork the supervisor; running the job in one process"
        );
        return Role::Supervisor { front: None };
    }
    if pid > 0 {
        return Role::Front(front_wait(pid));
    }
    // The supervisor. Its own process group: a Ctrl-C at the terminal reaches the
    // front, which forwards it once (the ranks have groups of their own as well).
    // Each step is best effort: without it the job still runs, less guarded.
    let _ = rustix::process::setpgid(None, None);
    // Writing to the terminal from a background group must not stop us.
    // SAFETY: ignoring a signal installs no handler; rustix has no signal API.
    unsafe {
        libc::signal(libc::SIGTTOU, libc::SIG_IGN);
    }
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    // `ps -o comm` and `top` tell it from the front.
    let _ = rustix::thread::set_name(c"hpc-supervisor");
    let _ = rustix::process::set_parent_process_death_signal(
        rustix::process::Signal::from_named_raw(FRONT_DEATH_SIGNAL),
    );
    install(FRONT_DEATH_SIGNAL, on_front_gone);
    if parent() != front {
        FRONT_GONE.store(true, Ordering::SeqCst);
    }
    Role::Supervisor { front: Some(front) }
}

/// The front: forwards signals to the supervisor and returns its exit code.
fn front_wait(supervisor: libc::pid_t) -> i32 {
    SUPERVISOR.store(supervisor, Ordering::SeqCst);
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        install(sig, forward_signal);
    }
    loop {
        let mut status = 0;
        // SAFETY: waits for our own child; `status` is a valid out pointer.
        let rc = unsafe { libc::waitpid(supervisor, &mut status, 0) };
        if rc == supervisor {
            if libc::WIFEXITED(status) {
                return libc::WEXITSTATUS(status);
            }
            if libc::WIFSIGNALED(status) {
                return 128 + libc::WTERMSIG(status);
            }
            continue;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            note!("hpc run: lost the job's supervisor: {e}");
            return 1;
        }
    }
}

/// This process's parent (0: none, as for a process whose parent is outside
/// its pid namespace).
fn parent() -> libc::pid_t {
    rustix::process::Pid::as_raw(rustix::process::getppid())
}

/// Whether the front this supervisor belongs to is gone.
pub fn front_gone(front: Option<libc::pid_t>) -> bool {
    FRONT_GONE.load(Ordering::SeqCst) || front.is_some_and(|f| parent() != f)
}

/// A child that exited: `(pid, raw wait status)`, or `None` when none has. The
/// supervisor reaps every process of the job (it is their subreaper), so this is
/// also where what a killed process left in `/dev/shm` is removed: the collectives
/// board of a rank killed while it set a communicator up.
pub fn reap_one() -> Option<(libc::pid_t, i32)> {
    let mut status = 0;
    // SAFETY: WNOHANG wait for any child; `status` is a valid out pointer.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    if pid > 0 {
        hpc_comm::remove_boards_of(pid as u32);
    }
    (pid > 0).then_some((pid, status))
}

/// Every live descendant of this process (children, their children, ...), read from
/// `/proc`. Zombies are included (they are reaped, not killed).
pub fn descendants() -> Vec<libc::pid_t> {
    let me = std::process::id() as libc::pid_t;
    let mut parent: Vec<(libc::pid_t, libc::pid_t)> = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(pid) = e
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<libc::pid_t>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<libc::pid_t>().ok());
            if let Some(ppid) = ppid {
                parent.push((pid, ppid));
            }
        }
    }
    let mut found = vec![me];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

/// Kills every process of the job (all descendants of this supervisor) with SIGKILL
/// and reaps them, until none is left or `within` has passed; `on_exit` hears of
/// each reaped child.
pub fn kill_everything(within: Duration, mut on_exit: impl FnMut(libc::pid_t, i32)) {
    let deadline = Instant::now() + within;
    loop {
        while let Some((pid, st)) = reap_one() {
            on_exit(pid, st);
        }
        let left = descendants();
        if left.is_empty() || Instant::now() >= deadline {
            if !left.is_empty() {
                tracing::warn!(?left, "processes of the job would not die");
            }
            return;
        }
        // Our own descendants; one gone meanwhile is what we want.
        for pid in left.into_iter().filter_map(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Events from the forwarding threads.
pub enum Output {
    /// `hpc run`'s own stdout or stderr is a broken pipe.
    Closed(&'static str),
    /// Writing to `hpc run`'s own stdout or stderr failed otherwise (a full disk):
    /// the stream and the error.
    Failed(&'static str, String),
    /// A forwarding thread finished (its rank's stream ended).
    Done,
}

/// Copies one output stream of a rank with the rank's tag, cutting lines longer
/// than [`MAX_LINE`]. `name` is `stdout` or `stderr` (for the broken-pipe report).
/// A thread that cannot be started (the process or thread limit reached) is the
/// error, for the caller to stop the job: never a panic with the ranks left running.
/// `writing` counts the forwarders in a write to `dst` (waiting for its reader,
/// `hpc run … | less`), which the end of the job waits for ([`OUTPUT_GRACE`]
/// bounds only the wait for a rank's stream to end).
pub fn forward<R: Read + Send + 'static, W: Write + Send + 'static>(
    src: R,
    dst: Arc<Mutex<W>>,
    tag: Option<(String, String)>,
    name: &'static str,
    events: Sender<Output>,
    writing: Arc<std::sync::atomic::AtomicUsize>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("forward-{name}"))
        .spawn(move || {
            let mut r = BufReader::with_capacity(MAX_LINE, src);
            let mut line: Vec<u8> = Vec::with_capacity(256);
            let mut continued = false;
            let mut closed = false;
            let mut emit = |line: &mut Vec<u8>, continued: bool| {
                // A tagged piece is a line of its own. Untagged (`--no-tag`), the
                // rank's bytes go on as they are: a newline added after its last
                // unterminated line and in every line longer than the piece
                // changed the output (a rank's data file, `> out.bin`), status 0.
                if tag.is_some() && line.last() != Some(&b'\n') {
                    line.push(b'\n');
                }
                if closed {
                    return;
                }
                // Counted from before the lock: a forwarder waiting for another's
                // write to a reader that does not read yet waits for it too.
                writing.fetch_add(1, Ordering::SeqCst);
                let Ok(mut out) = dst.lock() else {
                    writing.fetch_sub(1, Ordering::SeqCst);
                    closed = true;
                    return;
                };
                let result = (|| {
                    if let Some((first, more)) = &tag {
                        out.write_all(if continued { more } else { first }.as_bytes())?;
                    }
                    out.write_all(line)?;
                    out.flush()
                })();
                drop(out);
                writing.fetch_sub(1, Ordering::SeqCst);
                if let Err(e) = result {
                    // Keep draining the rank's pipe so that it never blocks on a full one,
                    // but write nothing more.
                    closed = true;
                    let _ = events.send(if e.kind() == std::io::ErrorKind::BrokenPipe {
                        Output::Closed(name)
                    } else {
                        Output::Failed(name, e.to_string())
                    });
                }
            };
            loop {
                let buf = match r.fill_buf() {
                    Ok(b) => b,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                if buf.is_empty() {
                    if !line.is_empty() {
                        emit(&mut line, continued);
                    }
                    break;
                }
                let room = MAX_LINE - line.len();
                let window = &buf[..buf.len().min(room)];
                match window.iter().position(|&b| b == b'\n') {
                    Some(i) => {
                        line.extend_from_slice(&window[..=i]);
                        r.consume(i + 1);
                        emit(&mut line, continued);
                        line.clear();
                        continued = false;
                    }
                    None => {
                        let n = window.len();
                        line.extend_from_slice(window);
                        r.consume(n);
                        if line.len() >= MAX_LINE {
                            // Cut before a character that the piece would split:
                            // both pieces were left invalid UTF-8.
                            let rest = line.split_off(line.len() - incomplete_tail(&line));
                            emit(&mut line, continued);
                            line = rest;
                            continued = true;
                        }
                    }
                }
            }
            let _ = events.send(Output::Done);
        })
}

/// How many bytes at the end of `b` begin a UTF-8 character that does not end
/// there (0 to 3; 0 for bytes that are no UTF-8).
fn incomplete_tail(b: &[u8]) -> usize {
    for k in 1..=b.len().min(3) {
        let c = b[b.len() - k];
        if c & 0xC0 == 0x80 {
            continue;
        }
        let need = match c {
            0xF0.. => 4,
            0xE0.. => 3,
            0xC0.. => 2,
            _ => 1,
        };
        return if k < need { k } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line longer than [`MAX_LINE`] is cut between characters: a cut inside a
    /// two-byte character left both pieces invalid UTF-8.
    #[test]
    fn a_long_line_is_cut_between_characters() {
        let text = format!("a{}\n", "é".repeat(MAX_LINE));
        let dst = Arc::new(Mutex::new(Vec::<u8>::new()));
        let (tx, _rx) = std::sync::mpsc::channel();
        let tag = Some(("[0] ".to_string(), "[0]+".to_string()));
        forward(
            std::io::Cursor::new(text.clone().into_bytes()),
            dst.clone(),
            tag,
            "stdout",
            tx,
            Arc::default(),
        )
        .unwrap()
        .join()
        .unwrap();
        let out = String::from_utf8(dst.lock().unwrap().clone()).expect("UTF-8 pieces");
        let joined: String = out
            .lines()
            .map(|l| {
                l.strip_prefix("[0] ")
                    .or_else(|| l.strip_prefix("[0]+"))
                    .unwrap()
            })
            .collect();
        assert_eq!(format!("{joined}\n"), text);
        assert!(out.lines().count() >= 3, "cut into pieces");
        assert_eq!(incomplete_tail("aé".as_bytes()), 0);
        assert_eq!(incomplete_tail(&"é€".as_bytes()[..4]), 2);
        assert_eq!(incomplete_tail(&[0x80, 0x80, 0x80, 0x80]), 0);
    }
}
