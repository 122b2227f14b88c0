//! The DPU's standing service (`hpc proxy --dpu-service`) and a rank's
//! request to it: who may make the service start a proxy.
//!
//! # The exchange
//!
//! On each connection the service speaks first, with a greeting line:
//! `hpc-dpu-service 1 nonce HEX` (32 fresh random bytes) when it holds a
//! key, `hpc-dpu-service 1 open` when it was started without one
//! (`--insecure`). The client answers one line, `MAC REQUEST`: `REQUEST` is
//! the proxy's `HPC_COLL_PROXY_DPU` value (and the ranks' libfabric
//! provider), `MAC` the hex of HMAC-SHA256(key, nonce || REQUEST), or `-`
//! to an open service. The service checks the MAC in constant time and
//! answers `started PID` (later `exited STATUS`) or `refused: WHY`. The key
//! never crosses the wire, and an answer recorded on one connection is
//! worth nothing on the next: its nonce differs.
//!
//! What is not done: the exchange is authenticated, not encrypted (the
//! request names the link's coordinator and its secret, which an observer
//! of the management network can read; the data path is the transport's),
//! and the client does not authenticate the service.
//!
//! # Bounds
//!
//! Each connection has a thread of its own, so a stuck client blocks no
//! other; at most [`MAX_PENDING`] connections may be waiting for their
//! request at once (the next are refused at once), a request line is at
//! most [`MAX_LINE`] bytes and must arrive within [`REQUEST_WAIT`] of the
//! greeting, however slowly its bytes trickle in.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use hpc_board::{Error, Result};

/// The longest line either side reads of the other (greeting, request,
/// answer), in bytes without the newline.
pub const MAX_LINE: usize = 4096;
/// How long the service waits for a client's request after its greeting.
pub const REQUEST_WAIT: Duration = Duration::from_secs(10);
/// How many connections may be waiting for their request at once.
pub const MAX_PENDING: usize = 64;
/// The shortest key the service and the ranks accept, in bytes.
pub const MIN_KEY: usize = 16;
/// The longest key file read, in bytes.
const MAX_KEY: u64 = hpc_io::read::MAX_KEY_BYTES;
/// At most one warning of refused connections per this long: an unauthenticated
/// client that connects in a loop must not flood the log.
pub const REFUSAL_WARN_EVERY: Duration = Duration::from_secs(10);
/// The nonce's length, in bytes.
const NONCE: usize = 32;
/// The greeting's words before the nonce (or `open`).
const GREETING: &str = "hpc-dpu-service 1";

type HmacSha256 = Hmac<Sha256>;

/// The key a DPU service and the ranks that ask it share: the bytes of a
/// file (less one trailing line ending). `Debug` shows its length only.
#[derive(Clone)]
pub struct DpuKey(Vec<u8>);

impl std::fmt::Debug for DpuKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DpuKey({} bytes)", self.0.len())
    }
}

impl DpuKey {
    /// A key of these bytes; at least 16 of them.
    pub fn from_bytes(bytes: &[u8]) -> Result<DpuKey> {
        if bytes.len() < MIN_KEY {
            return Err(Error::Auth(format!(
                "a DPU service key of {} bytes: at least {MIN_KEY} are needed \
                 (e.g. `head -c 32 /dev/urandom > FILE`)",
                bytes.len()
            )));
        }
        Ok(DpuKey(bytes.to_vec()))
    }

    /// The service's key from `path`, which must be a regular file of at
    /// least 16 bytes that neither its group nor others may read or
    /// write (mode `0600` or `0400`).
    pub fn from_file(path: &Path) -> Result<DpuKey> {
        read_key(path, 0o077, "its group or others")
    }

    /// The ranks' key: the file `HPC_COLL_PROXY_DPU_KEY_FILE` names, which
    /// others (outside its owner and group) must not read or write; `None`
    /// where the variable is unset or empty.
    pub fn from_env() -> Result<Option<DpuKey>> {
        let var = hpc_runtime::env::COLL_PROXY_DPU_KEY_FILE;
        match std::env::var_os(var) {
            Some(p) if !p.is_empty() => read_key(Path::new(&p), 0o007, "others")
                .map(Some)
                .map_err(|e| Error::Auth(format!("{var}: {e}"))),
            _ => Ok(None),
        }
    }

    /// The MAC of `request` under this key for the greeting's `nonce`.
    fn mac(&self, nonce: &[u8], request: &[u8]) -> HmacSha256 {
        // HMAC takes a key of any length: `new_from_slice` cannot fail.
        let mut m = <HmacSha256 as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        m.update(nonce);
        m.update(request);
        m
    }

    /// The hex of the MAC of `request` for `nonce` (what a client sends).
    fn sign(&self, nonce: &[u8], request: &str) -> String {
        hex(&self.mac(nonce, request.as_bytes()).finalize().into_bytes())
    }

    /// Whether `tag` (hex) is the MAC of `request` for `nonce`, compared in
    /// constant time.
    fn verify(&self, nonce: &[u8], request: &str, tag: &str) -> bool {
        unhex(tag).is_some_and(|t| self.mac(nonce, request.as_bytes()).verify_slice(&t).is_ok())
    }
}

/// Reads a key file, refusing one whose mode grants anything of `forbidden`
/// (`who` names those it would grant it to).
fn read_key(path: &Path, forbidden: u32, who: &str) -> Result<DpuKey> {
    use std::os::unix::fs::PermissionsExt;
    // Shown as every refusal shows a path (a name with a line break or a
    // terminal's escape quoted and escaped, one longer than any cut).
    let p = hpc_io::message::path(path);
    let bad = |why: String| Error::Auth(format!("the key file {p}: {why}"));
    // Opened without blocking (a FIFO would wait for a writer for ever) and refused
    // unless it is a regular file; its mode is looked at on the open file.
    let (f, size) = hpc_io::read::open_regular(path).map_err(|e| Error::Auth(e.to_string()))?;
    let meta = f.metadata().map_err(|e| bad(e.to_string()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & forbidden != 0 {
        // A name shown escaped is not the file's name to a shell: the hint
        // offered it as a command to paste.
        let hint = match hpc_io::message::shell_word(path) {
            Some(w) => format!("`chmod 600 {w}`"),
            None => "chmod 600 the file (its name holds a character shown escaped here, \
                     not as a word to paste into a shell)"
                .to_string(),
        };
        return Err(bad(format!(
            "mode {mode:04o} lets {who} read or write it: {hint}"
        )));
    }
    let mut bytes = hpc_io::read::read_open(path, f, size, MAX_KEY)
        .map_err(|e| Error::Auth(format!("the key file: {e}")))?;
    if bytes.is_empty() {
        return Err(bad(
            "it is empty (make one: `head -c 32 /dev/urandom > FILE`)".into(),
        ));
    }
    // One line ending, so that a key written by an editor or `echo` is the
    // same key as one written without.
    if bytes.ends_with(b"\n") {
        bytes.pop();
        if bytes.ends_with(b"\r") {
            bytes.pop();
        }
    }
    DpuKey::from_bytes(&bytes).map_err(|e| bad(e.to_string()))
}

/// Who may make the service start a proxy.
#[derive(Clone, Debug)]
pub enum ServiceAuth {
    /// Only a client that proves it holds this key.
    Key(DpuKey),
    /// Anyone who reaches the port (`hpc proxy --dpu-service --insecure`):
    /// for a network where only the ranks can reach it.
    Insecure,
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// A fresh random nonce from the kernel.
fn nonce() -> std::io::Result<[u8; NONCE]> {
    let mut buf = [0u8; NONCE];
    let mut filled = 0;
    while filled < NONCE {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`.
        let n = unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), NONCE - filled, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        } else {
            filled += n as usize;
        }
    }
    Ok(buf)
}

/// Why a line could not be read.
#[derive(Debug)]
enum LineError {
    TooLong,
    Timeout,
    Closed,
    /// Not UTF-8 text: the offset of its first byte that is not (a request
    /// read lossily was refused as "authentication failed", which it is
    /// not: no client signs bytes that are not text).
    NotUtf8(usize),
    Io(std::io::Error),
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LineError::TooLong => write!(f, "a line longer than {MAX_LINE} bytes"),
            LineError::Timeout => write!(f, "no complete line in time"),
            LineError::Closed => write!(f, "the connection closed"),
            LineError::NotUtf8(at) => write!(f, "a line that is not UTF-8 text (at byte {at})"),
            LineError::Io(e) => e.fmt(f),
        }
    }
}

/// Reads one line (without its `\n`) of at most [`MAX_LINE`] bytes, all of
/// it before `deadline`, however its bytes arrive.
fn read_line(
    r: &mut BufReader<TcpStream>,
    deadline: Instant,
) -> std::result::Result<String, LineError> {
    let mut line = Vec::new();
    read_line_into(r, deadline, &mut line)?;
    String::from_utf8(line).map_err(|e| LineError::NotUtf8(e.utf8_error().valid_up_to()))
}

/// [`read_line`]'s reading: the line's bytes go to `line`, which keeps those
/// that came before a [`LineError::Timeout`], for the next call to go on.
fn read_line_into(
    r: &mut BufReader<TcpStream>,
    deadline: Instant,
    line: &mut Vec<u8>,
) -> std::result::Result<(), LineError> {
    use std::io::ErrorKind;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(LineError::Timeout);
        }
        r.get_ref()
            .set_read_timeout(Some(left))
            .map_err(LineError::Io)?;
        let got = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(LineError::Timeout)
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(LineError::Io(e)),
        };
        if got.is_empty() {
            return Err(LineError::Closed);
        }
        let (n, end) = match got.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (got.len(), false),
        };
        if line.len() + n > MAX_LINE {
            return Err(LineError::TooLong);
        }
        line.extend_from_slice(&got[..n]);
        r.consume(if end { n + 1 } else { n });
        if end {
            return Ok(());
        }
    }
}

/// The refusal of one connection: what the client is told, after `refused: `.
struct Refusal(String);

/// Warnings of one kind at most once per interval: the first is logged, those
/// within the interval after it are counted, and the next one logged after the
/// interval says how many were not.
struct RateLimited {
    every: Duration,
    /// When a warning was last logged, and how many were not since.
    state: std::sync::Mutex<(Option<Instant>, u64)>,
}

impl RateLimited {
    fn new(every: Duration) -> RateLimited {
        RateLimited {
            every,
            state: std::sync::Mutex::new((None, 0)),
        }
    }

    /// Whether a warning at `now` is logged: `Some(n)` with the number of those not
    /// logged since the last one, or `None` (counted) when one was logged less than
    /// the interval ago.
    fn admit(&self, now: Instant) -> Option<u64> {
        // A poisoned lock only means a thread panicked while counting; the count is
        // still usable.
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match st.0 {
            Some(last) if now.saturating_duration_since(last) < self.every => {
                st.1 += 1;
                None
            }
            _ => {
                let skipped = st.1;
                *st = (Some(now), 0);
                Some(skipped)
            }
        }
    }
}

/// Serves as a DPU's standing service on `listen`: each connection (a
/// node's first rank) is greeted, answers with its request (the
/// `HPC_COLL_PROXY_DPU` value of a proxy and the ranks' `HPC_OFI_PROVIDER`,
/// if any, as a sixth field), authenticated as `auth` says (see the module
/// `proxy::service`); the service starts `program()` with them (a proxy that
/// then joins the ranks' link job) and answers `started PID`, later `exited
/// STATUS`, or `refused: WHY` (logged as a warning) and starts nothing. It
/// starts only its own program, whatever the ranks run; runs until killed.
pub fn dpu_service(
    listen: SocketAddr,
    auth: ServiceAuth,
    program: impl Fn() -> std::process::Command + Send + Sync + 'static,
) -> Result<()> {
    let l = TcpListener::bind(listen)
        .map_err(|e| Error::transport_from(format!("the DPU service on {listen}"), e))?;
    serve(l, auth, REQUEST_WAIT, MAX_PENDING, spawn_thread, program)
}

/// How the service starts the thread of a connection ([`spawn_thread`]; a
/// test's stand-in that fails).
type Spawn = fn(Box<dyn FnOnce() + Send + 'static>) -> std::io::Result<()>;

/// Starts `f` on a thread of its own, or says why it cannot (a limit of
/// threads or of memory).
fn spawn_thread(f: Box<dyn FnOnce() + Send + 'static>) -> std::io::Result<()> {
    std::thread::Builder::new().spawn(f).map(drop)
}

/// [`dpu_service`] on a bound listener, with its bounds and its way of
/// starting threads.
fn serve(
    l: TcpListener,
    auth: ServiceAuth,
    wait: Duration,
    max_pending: usize,
    spawn: Spawn,
    program: impl Fn() -> std::process::Command + Send + Sync + 'static,
) -> Result<()> {
    let at = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
    match &auth {
        ServiceAuth::Key(_) => {
            tracing::info!(addr = %at, "DPU service: listening; requests must prove the key")
        }
        ServiceAuth::Insecure => tracing::warn!(
            addr = %at,
            "DPU service: listening WITHOUT authentication (--insecure): anyone who reaches \
             this port can start proxies"
        ),
    }
    let auth = Arc::new(auth);
    let program = Arc::new(program);
    let pending = Arc::new(AtomicUsize::new(0));
    let refusals = Arc::new(RateLimited::new(REFUSAL_WARN_EVERY));
    let busy = RateLimited::new(REFUSAL_WARN_EVERY);
    for s in l.incoming() {
        let mut s = match s {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "DPU service: accept");
                continue;
            }
        };
        let from = s.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        // A client that does not read cannot hold a thread on a write.
        let _ = s.set_write_timeout(Some(wait));
        if pending.fetch_add(1, Ordering::AcqRel) >= max_pending {
            pending.fetch_sub(1, Ordering::AcqRel);
            match busy.admit(Instant::now()) {
                Some(skipped) => tracing::warn!(
                    %from,
                    "DPU service: refused a connection: {max_pending} are waiting for their \
                     request ({skipped} more since the last warning)"
                ),
                None => tracing::debug!(%from, "DPU service: refused a connection (busy)"),
            }
            let _ = s.write_all(
                format!("refused: busy ({max_pending} requests waiting), try again\n").as_bytes(),
            );
            continue;
        }
        let (auth, program, pending_here) = (auth.clone(), program.clone(), pending.clone());
        let refusals = refusals.clone();
        // Kept to answer the client when no thread can be started for it.
        let (back, peer) = (s.try_clone(), from.clone());
        let spawned = spawn(Box::new(move || {
            let pending = pending_here;
            let asked = request(&mut s, &auth, wait);
            pending.fetch_sub(1, Ordering::AcqRel);
            let fields = match asked {
                Ok(f) => f,
                Err(Refusal(why)) => {
                    // Anyone who reaches the port can be refused: one warning per
                    // interval, with the count of those not logged.
                    match refusals.admit(Instant::now()) {
                        Some(skipped) => tracing::warn!(
                            %from,
                            "DPU service: refused a request: {why} ({skipped} more refused \
                             since the last warning, which are logged at most every {} s)",
                            REFUSAL_WARN_EVERY.as_secs()
                        ),
                        None => tracing::debug!(%from, "DPU service: refused a request: {why}"),
                    }
                    let _ = s.write_all(format!("refused: {why}\n").as_bytes());
                    return;
                }
            };
            let mut cmd = program();
            cmd.env(hpc_runtime::env::COLL_PROXY_DPU, fields[..5].join(" "))
                .stdin(std::process::Stdio::null());
            if let Some(p) = fields.get(5) {
                cmd.env(hpc_runtime::env::OFI_PROVIDER, p);
            }
            match cmd.spawn() {
                Ok(mut child) => {
                    tracing::info!(%from, pid = child.id(), "DPU service: started a proxy");
                    let _ = s.write_all(format!("started {}\n", child.id()).as_bytes());
                    let st = child.wait();
                    tracing::info!(%from, status = ?st, "DPU service: a proxy exited");
                    let st = st.map_or_else(|e| e.to_string(), |st| st.to_string());
                    let _ = s.write_all(format!("exited ({st})\n").as_bytes());
                }
                Err(e) => {
                    tracing::warn!(%from, error = %e, "DPU service: could not start a proxy");
                    let _ = s.write_all(format!("failed: {e}\n").as_bytes());
                }
            }
        }));
        // No thread for this connection (a limit of threads or of memory): the
        // client is refused as when the service is busy, and the service goes
        // on. A connection that anyone could open ended the service in a panic.
        if let Err(e) = spawned {
            pending.fetch_sub(1, Ordering::AcqRel);
            let from = peer;
            match busy.admit(Instant::now()) {
                Some(skipped) => tracing::warn!(
                    %from,
                    error = %e,
                    "DPU service: refused a connection: cannot start a thread for it \
                     ({skipped} more refused since the last warning)"
                ),
                None => tracing::debug!(%from, error = %e, "DPU service: refused a connection"),
            }
            if let Ok(mut back) = back {
                let _ = back.write_all(
                    format!("refused: busy (cannot start a thread: {e}), try again\n").as_bytes(),
                );
            }
        }
    }
    Ok(())
}

/// The service's side of one connection up to the request: greets, reads
/// the request within `wait`, checks it; its fields, or why not.
fn request(
    s: &mut TcpStream,
    auth: &ServiceAuth,
    wait: Duration,
) -> std::result::Result<Vec<String>, Refusal> {
    let nonce = match auth {
        ServiceAuth::Key(_) => Some(nonce().map_err(|e| Refusal(format!("no nonce: {e}")))?),
        ServiceAuth::Insecure => None,
    };
    let greeting = match &nonce {
        Some(n) => format!("{GREETING} nonce {}\n", hex(n)),
        None => format!("{GREETING} open\n"),
    };
    s.write_all(greeting.as_bytes())
        .map_err(|e| Refusal(format!("greeting: {e}")))?;
    let deadline = Instant::now() + wait;
    let mut r = BufReader::new(
        s.try_clone()
            .map_err(|e| Refusal(format!("the connection: {e}")))?,
    );
    let line = read_line(&mut r, deadline).map_err(|e| {
        Refusal(match e {
            LineError::TooLong => format!("a request line longer than {MAX_LINE} bytes"),
            LineError::Timeout => format!("no request within {} s", wait.as_secs_f64()),
            LineError::Closed => "the connection closed before a request".into(),
            LineError::NotUtf8(at) => format!("a request that is not UTF-8 text (at byte {at})"),
            LineError::Io(e) => format!("reading the request: {e}"),
        })
    })?;
    let (tag, req) = line.split_once(' ').unwrap_or((line.as_str(), ""));
    if let (ServiceAuth::Key(key), Some(n)) = (auth, &nonce) {
        if !key.verify(n, req, tag) {
            return Err(Refusal("authentication failed".into()));
        }
    }
    // The proxy's `HPC_COLL_PROXY_DPU` value, then the ranks' libfabric
    // provider if they name one.
    let fields: Vec<String> = req.split_whitespace().map(str::to_string).collect();
    if !(5..=6).contains(&fields.len()) {
        return Err(Refusal("a malformed request".into()));
    }
    Ok(fields)
}

/// How the service's connection ended after it started the proxy
/// ([`wait_end`]).
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// Its last line (`exited with status 7`), its control characters
    /// escaped.
    Said(String),
    /// It closed the connection without a line.
    Closed,
    /// It could not be read: why (a line longer than [`MAX_LINE`] bytes,
    /// not UTF-8, an I/O error).
    Failed(String),
}

/// Waits on `r` (the rest of [`ask`]'s connection) for the service's word
/// that the proxy it started ended, looking at `go_on` every `every`:
/// `None` once it says to stop. The line is read as every line of the
/// protocol is, at most [`MAX_LINE`] bytes, and kept across the looks (it
/// was read without a bound, so a service that sent bytes without an end
/// of line took the rank's memory until its allocation aborted it, and
/// a line that came in two parts lost its first: "the proxy on the DPU …
/// with status 7").
pub fn wait_end(
    r: &mut BufReader<TcpStream>,
    every: Duration,
    mut go_on: impl FnMut() -> bool,
) -> Option<End> {
    let mut line = Vec::new();
    loop {
        return Some(match read_line_into(r, Instant::now() + every, &mut line) {
            Ok(()) => match String::from_utf8(line) {
                Ok(l) => End::Said(hpc_io::message::escape_controls(l.trim()).into_owned()),
                Err(e) => End::Failed(LineError::NotUtf8(e.utf8_error().valid_up_to()).to_string()),
            },
            Err(LineError::Timeout) if go_on() => continue,
            Err(LineError::Timeout) => return None,
            Err(LineError::Closed) => End::Closed,
            Err(e) => End::Failed(e.to_string()),
        });
    }
}

/// A rank's side: asks the service on `s` (at `at`) to start a proxy with
/// `request`, proving `key` if the service asks for it; `timeout` bounds
/// each line it waits for. The PID the service reports and the reader of
/// the rest of the connection (where `exited STATUS` comes).
pub fn ask(
    s: &TcpStream,
    at: SocketAddr,
    key: Option<&DpuKey>,
    request: &str,
    timeout: Duration,
) -> Result<(String, BufReader<TcpStream>)> {
    let var = hpc_runtime::env::COLL_PROXY_DPU_KEY_FILE;
    let io = |e: std::io::Error| Error::transport_from(format!("the DPU service at {at}"), e);
    let line_err = |what: &str, e: LineError| match e {
        LineError::Io(e) => io(e),
        LineError::Timeout => Error::transport(format!(
            "the DPU service at {at}: {what}: none within {timeout:?}"
        )),
        e => Error::transport(format!("the DPU service at {at}: {what}: {e}")),
    };
    // One deadline for the whole exchange: the greeting and the answer were
    // each given the timeout, so a service slow to greet held a rank twice it.
    let deadline = Instant::now() + timeout;
    let mut r = BufReader::new(s.try_clone().map_err(io)?);
    let greeting = read_line(&mut r, deadline).map_err(|e| line_err("its greeting", e))?;
    let words: Vec<&str> = greeting
        .strip_prefix(GREETING)
        .map(|g| g.split_whitespace().collect())
        .unwrap_or_default();
    let tag = match (words.as_slice(), key) {
        (["nonce", n], Some(key)) => match unhex(n) {
            Some(n) if n.len() == NONCE => key.sign(&n, request),
            _ => {
                return Err(Error::transport(format!(
                    "the DPU service at {at} sent a malformed nonce"
                )))
            }
        },
        (["nonce", _], None) => {
            return Err(Error::Auth(format!(
                "the DPU service at {at} requires an authenticated request and this rank \
                 has no key: set {var} to a file holding the service's key"
            )))
        }
        (["open"], k) => {
            if k.is_some() {
                tracing::warn!(
                    %at,
                    "the DPU service does not authenticate requests (started with --insecure)"
                );
            }
            "-".to_string()
        }
        _ => {
            return Err(Error::transport(format!(
                "the DPU service at {at} greeted with {:?}, not as an hpc DPU service \
                 (an older version?)",
                greeting.chars().take(80).collect::<String>()
            )))
        }
    };
    let mut w = r.get_ref();
    w.write_all(format!("{tag} {request}\n").as_bytes())
        .map_err(io)?;
    let answer = read_line(&mut r, deadline).map_err(|e| line_err("its answer", e))?;
    // The service's words go into the rank's log and errors: their control
    // characters escaped (a terminal's escape in a refusal cleared the
    // terminal where the rank's error was shown).
    let answer = hpc_io::message::escape_controls(&answer);
    if let Some(pid) = answer.strip_prefix("started ") {
        return Ok((pid.trim().to_string(), r));
    }
    let why = answer.strip_prefix("refused: ").unwrap_or(&answer).trim();
    if why == "authentication failed" {
        return Err(Error::Auth(format!(
            "the DPU service at {at} refused the request: authentication failed; is {var} \
             the same key as the service's?"
        )));
    }
    Err(Error::transport(format!(
        "the DPU service at {at} did not start the proxy: {why}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    const SPEC: &str = "127.0.0.1:1 1f 3 2 tcp";

    fn key(b: u8) -> DpuKey {
        DpuKey::from_bytes(&[b; 32]).unwrap()
    }

    /// A service in this process (starting `true`), its address and how many
    /// proxies it started.
    fn service(auth: ServiceAuth, wait: Duration, max: usize) -> (SocketAddr, Arc<AtomicUsize>) {
        service_spawning(auth, wait, max, spawn_thread)
    }

    /// [`service`] starting its connections' threads with `spawn`.
    fn service_spawning(
        auth: ServiceAuth,
        wait: Duration,
        max: usize,
        spawn: Spawn,
    ) -> (SocketAddr, Arc<AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let started = Arc::new(AtomicUsize::new(0));
        let n = started.clone();
        std::thread::spawn(move || {
            serve(l, auth, wait, max, spawn, move || {
                n.fetch_add(1, Ordering::SeqCst);
                std::process::Command::new("true")
            })
        });
        (at, started)
    }

    fn ask_at(at: SocketAddr, key: Option<&DpuKey>) -> Result<String> {
        let s = TcpStream::connect(at).unwrap();
        ask(&s, at, key, SPEC, Duration::from_secs(10)).map(|(pid, _)| pid)
    }

    /// A raw connection: its reader, and the greeting's nonce.
    fn raw(at: SocketAddr) -> (TcpStream, BufReader<TcpStream>, Vec<u8>) {
        let s = TcpStream::connect(at).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let g = read_line(&mut r, Instant::now() + Duration::from_secs(10)).unwrap();
        let n = g.rsplit(' ').next().and_then(unhex).unwrap();
        assert_eq!(n.len(), NONCE, "{g}");
        (s, r, n)
    }

    fn answer(r: &mut BufReader<TcpStream>) -> String {
        read_line(r, Instant::now() + Duration::from_secs(10)).unwrap()
    }

    #[test]
    fn the_right_key_is_accepted_and_a_wrong_or_missing_one_starts_nothing() {
        let (at, started) = service(ServiceAuth::Key(key(1)), REQUEST_WAIT, MAX_PENDING);
        assert!(ask_at(at, Some(&key(1))).unwrap().parse::<u32>().is_ok());
        assert_eq!(started.load(Ordering::SeqCst), 1);
        let e = ask_at(at, Some(&key(2))).unwrap_err().to_string();
        assert!(
            e.contains(&format!("the DPU service at {at} refused the request"))
                && e.contains("authentication failed")
                && e.contains("HPC_COLL_PROXY_DPU_KEY_FILE the same key"),
            "{e}"
        );
        let e = ask_at(at, None).unwrap_err();
        assert!(matches!(e, Error::Auth(_)), "{e}");
        let e = e.to_string();
        assert!(
            e.contains("requires an authenticated request")
                && e.contains("set HPC_COLL_PROXY_DPU_KEY_FILE"),
            "{e}"
        );
        // A request without a MAC, as an older client sends it.
        let (mut s, mut r, _) = raw(at);
        s.write_all(format!("{SPEC}\n").as_bytes()).unwrap();
        assert_eq!(answer(&mut r), "refused: authentication failed");
        assert_eq!(
            started.load(Ordering::SeqCst),
            1,
            "a refused request started a proxy"
        );
    }

    #[test]
    fn a_recorded_answer_cannot_be_replayed() {
        let k = key(3);
        let (at, started) = service(ServiceAuth::Key(k.clone()), REQUEST_WAIT, MAX_PENDING);
        let (mut s, mut r, n) = raw(at);
        let line = format!("{} {SPEC}\n", k.sign(&n, SPEC));
        s.write_all(line.as_bytes()).unwrap();
        assert!(answer(&mut r).starts_with("started "));
        let (mut s2, mut r2, n2) = raw(at);
        assert_ne!(n, n2, "two connections got the same nonce");
        s2.write_all(line.as_bytes()).unwrap();
        assert_eq!(answer(&mut r2), "refused: authentication failed");
        // Nor is the MAC good for another request on the same nonce.
        let (mut s3, mut r3, n3) = raw(at);
        let other = "127.0.0.1:2 1f 3 2 tcp";
        s3.write_all(format!("{} {other}\n", k.sign(&n3, SPEC)).as_bytes())
            .unwrap();
        assert_eq!(answer(&mut r3), "refused: authentication failed");
        assert_eq!(started.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_silent_or_oversized_client_is_refused_and_blocks_no_other() {
        let k = key(4);
        let wait = Duration::from_millis(500);
        let (at, started) = service(ServiceAuth::Key(k.clone()), wait, MAX_PENDING);
        // Silent: says nothing after the greeting.
        let (_s, mut silent, _) = raw(at);
        // Slow: a byte now and then, never a whole line.
        let (mut slow, mut slow_r, _) = raw(at);
        slow.write_all(b"ab").unwrap();
        // Meanwhile a client with the key is served at once.
        let t = Instant::now();
        assert!(ask_at(at, Some(&k)).is_ok());
        assert!(t.elapsed() < wait, "served after {:?}", t.elapsed());
        std::thread::sleep(wait / 2);
        let _ = slow.write_all(b"cd");
        assert_eq!(answer(&mut silent), "refused: no request within 0.5 s");
        assert_eq!(answer(&mut slow_r), "refused: no request within 0.5 s");
        // Oversized: a line longer than the limit, with or without its end.
        let (mut s, mut r, _) = raw(at);
        s.write_all(&vec![b'x'; MAX_LINE + 1]).unwrap();
        assert_eq!(
            answer(&mut r),
            format!("refused: a request line longer than {MAX_LINE} bytes")
        );
        assert_eq!(started.load(Ordering::SeqCst), 1);
    }

    /// A request that is not UTF-8 was read lossily and refused as
    /// "authentication failed" (with the key, and without one, where no MAC is
    /// checked, as "a malformed request"): it is refused as what it is, the
    /// offset of its first byte that is not text named; the service goes on.
    #[test]
    fn a_request_that_is_not_text_is_refused_as_such() {
        let k = key(8);
        for auth in [ServiceAuth::Key(k.clone()), ServiceAuth::Insecure] {
            let (at, started) = service(auth, REQUEST_WAIT, MAX_PENDING);
            let s = TcpStream::connect(at).unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            answer(&mut r);
            let mut line = format!("{} 127.0.0.1:1 1f 3 2 tc", "0".repeat(64)).into_bytes();
            line.extend_from_slice(b"\xff\n");
            (&s).write_all(&line).unwrap();
            assert_eq!(
                answer(&mut r),
                format!(
                    "refused: a request that is not UTF-8 text (at byte {})",
                    line.len() - 2
                )
            );
            assert_eq!(started.load(Ordering::SeqCst), 0);
            assert!(ask_at(at, Some(&k)).is_ok(), "the service ended");
        }
    }

    /// A service that says `started`, then `then` (each part after a pause).
    fn saying(then: Vec<Vec<u8>>) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.write_all(format!("{GREETING} open\n").as_bytes())
                .unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            read_line(&mut r, Instant::now() + Duration::from_secs(10)).unwrap();
            s.write_all(b"started 4242\n").unwrap();
            for part in then {
                std::thread::sleep(Duration::from_millis(150));
                if s.write_all(&part).is_err() {
                    return;
                }
            }
            std::thread::sleep(Duration::from_secs(2));
        });
        at
    }

    /// A service's refusal with a terminal's escapes and a carriage return
    /// was passed into the rank's error as it came (shown raw, it cleared
    /// the terminal): escaped.
    #[test]
    fn a_services_refusal_is_escaped() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.write_all(format!("{GREETING} open\n").as_bytes())
                .unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            read_line(&mut r, Instant::now() + Duration::from_secs(10)).unwrap();
            s.write_all(b"refused: \x1b[2Jcleared\r\x1b[31mred\n")
                .unwrap();
        });
        let s = TcpStream::connect(at).unwrap();
        let e = ask(&s, at, None, SPEC, Duration::from_secs(10))
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with("did not start the proxy: \\u{1b}[2Jcleared\\r\\u{1b}[31mred"),
            "{e:?}"
        );
    }

    /// The rank's wait for the service's last word read it without a bound
    /// (a service that sent bytes without an end of line took the rank's
    /// memory until an allocation aborted it) and lost the first part of a
    /// line that came in two ("the proxy on the DPU … with status 7").
    #[test]
    fn the_services_last_word_is_read_bounded_and_whole() {
        let every = Duration::from_millis(20);
        let end = |then: Vec<Vec<u8>>, go_on: fn() -> bool| {
            let at = saying(then);
            let s = TcpStream::connect(at).unwrap();
            let (pid, mut r) = ask(&s, at, None, SPEC, Duration::from_secs(10)).unwrap();
            assert_eq!(pid, "4242");
            wait_end(&mut r, every, go_on)
        };
        let two = vec![b"exited".to_vec(), b" with status 7\x1b[2J\n".to_vec()];
        assert_eq!(
            end(two, || true),
            Some(End::Said("exited with status 7\\u{1b}[2J".into()))
        );
        let endless = vec![vec![b'x'; MAX_LINE / 2]; 4];
        assert_eq!(
            end(endless, || true),
            Some(End::Failed(format!("a line longer than {MAX_LINE} bytes")))
        );
        assert_eq!(end(vec![], || false), None);
        assert_eq!(end(vec![b"exi".to_vec()], || true), Some(End::Closed));
    }

    #[test]
    fn connections_beyond_the_pending_limit_are_refused_at_once() {
        let (at, started) = service(ServiceAuth::Key(key(5)), Duration::from_secs(5), 2);
        let _a = raw(at);
        let _b = raw(at);
        let s = TcpStream::connect(at).unwrap();
        let mut r = BufReader::new(s);
        assert_eq!(
            answer(&mut r),
            "refused: busy (2 requests waiting), try again"
        );
        assert_eq!(started.load(Ordering::SeqCst), 0);
    }

    /// A connection for which no thread can be started (a limit of threads, as
    /// `ulimit -u` sets) ended the whole service in a panic ("failed to spawn
    /// thread"): anyone who reaches the port could stop it. The client is
    /// refused as busy, and the service serves the next.
    #[test]
    fn a_connection_without_a_thread_is_refused_and_the_service_goes_on() {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        fn first_fails(f: Box<dyn FnOnce() + Send + 'static>) -> std::io::Result<()> {
            if CALLS.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            spawn_thread(f)
        }
        let (at, started) = service_spawning(
            ServiceAuth::Insecure,
            REQUEST_WAIT,
            MAX_PENDING,
            first_fails,
        );
        let mut r = BufReader::new(TcpStream::connect(at).unwrap());
        let refused = answer(&mut r);
        assert!(
            refused.starts_with("refused: busy (cannot start a thread: "),
            "{refused}"
        );
        assert!(ask_at(at, None).is_ok(), "the service ended");
        assert_eq!(started.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn an_insecure_service_serves_anyone() {
        let (at, started) = service(ServiceAuth::Insecure, REQUEST_WAIT, MAX_PENDING);
        assert!(ask_at(at, None).is_ok());
        assert!(ask_at(at, Some(&key(6))).is_ok());
        let s = TcpStream::connect(at).unwrap();
        let e = ask(&s, at, None, "too few fields", Duration::from_secs(10)).unwrap_err();
        assert!(e.to_string().contains("a malformed request"), "{e}");
        assert_eq!(started.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_client_waits_for_a_silent_service_only_until_its_timeout() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let s = TcpStream::connect(at).unwrap();
        let t = Instant::now();
        let e = ask(&s, at, Some(&key(7)), SPEC, Duration::from_millis(300)).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(
            e.to_string().contains("its greeting: none within 300ms"),
            "{e}"
        );
    }

    /// Pass 19's leftover: the `chmod 600` hint of a key file whose name holds
    /// a control character showed the escaped name, which is not the file's
    /// name to a shell. A name that needs quoting is quoted as a shell word; one
    /// shown escaped is said not to be one.
    #[test]
    fn the_chmod_hint_is_a_shell_word_or_says_it_is_not() {
        use std::os::unix::fs::PermissionsExt;
        let dir = hpc_test_support::TmpDir::new("hpc-dpu-key", "hint");
        let err = |name: &str| {
            let p = dir.join(name);
            std::fs::write(&p, [9; 32]).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
            DpuKey::from_file(&p).unwrap_err().to_string()
        };
        let e = err("my key's");
        let quoted = format!("`chmod 600 '{}/my key'\\''s'`", dir.display());
        assert!(e.contains(&quoted), "{e}");
        let e = err("k\u{1b}[31m");
        assert!(!e.contains("`chmod 600"), "{e}");
        assert!(
            e.contains("chmod 600 the file (its name holds a character shown escaped here, not as a word to paste into a shell)"),
            "{e}"
        );
        assert!(!e.contains('\u{1b}'), "{e}");
    }

    #[test]
    fn key_files_must_be_private_and_long_enough() {
        use std::os::unix::fs::PermissionsExt;
        let dir = hpc_test_support::TmpDir::new("hpc-dpu", "key");
        let file = |name: &str, bytes: &[u8], mode: u32| {
            let p = dir.join(name);
            std::fs::write(&p, bytes).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            p
        };
        let good = file("good", &[9; 32], 0o600);
        assert_eq!(DpuKey::from_file(&good).unwrap().0, vec![9; 32]);
        // One line ending is not part of the key.
        let nl = file("nl", b"0123456789abcdef0123\n", 0o400);
        assert_eq!(DpuKey::from_file(&nl).unwrap().0, b"0123456789abcdef0123");
        let err = |p: &Path| DpuKey::from_file(p).unwrap_err().to_string();
        let e = err(&dir.join("missing"));
        assert!(e.contains("missing") && e.contains("No such file"), "{e}");
        let e = err(&file("empty", b"", 0o600));
        assert!(e.contains("it is empty"), "{e}");
        let e = err(&file("short", b"abc", 0o600));
        assert!(e.contains("at least 16"), "{e}");
        let group = file("group", &[9; 32], 0o640);
        let e = err(&group);
        assert!(
            e.contains("mode 0640 lets its group or others read") && e.contains("chmod 600"),
            "{e}"
        );
        let e = err(&file("world", &[9; 32], 0o604));
        assert!(e.contains("mode 0604"), "{e}");
        // The ranks' copy may be their group's, not everyone's.
        assert!(read_key(&group, 0o007, "others").is_ok());
        let e = read_key(&file("world2", &[9; 32], 0o644), 0o007, "others")
            .unwrap_err()
            .to_string();
        assert!(e.contains("lets others read"), "{e}");
        assert!(err(&dir).contains("not a regular file"));
        assert_eq!(format!("{:?}", key(1)), "DpuKey(32 bytes)");
        let e = err(&file("long", &[9; 5000], 0o600));
        assert!(e.contains("5000 bytes, more than the 4096"), "{e}");
        // A key file named with a line break and a terminal's escape is named
        // quoted and escaped (it broke the refusal's line and cleared the
        // terminal, in the `chmod` it suggests too).
        let e = err(&file("odd\n\u{1b}[2J", &[9; 32], 0o644));
        assert!(!e.chars().any(char::is_control), "{e:?}");
        assert!(e.contains("odd\\n\\u{1b}[2J\""), "{e}");
    }

    /// Refusals are warned of once per interval, and the next warning counts those
    /// that were not.
    #[test]
    fn refusal_warnings_are_rate_limited_with_a_count() {
        let r = RateLimited::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(r.admit(t0), Some(0));
        for i in 1..=1000 {
            assert_eq!(r.admit(t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(r.admit(t0 + Duration::from_secs(10)), Some(1000));
        assert_eq!(r.admit(t0 + Duration::from_secs(11)), None);
        assert_eq!(r.admit(t0 + Duration::from_secs(25)), Some(1));
        // A clock read before the last warning (threads racing) is within it.
        assert_eq!(r.admit(t0), None);
    }

    /// A key file that is a FIFO (no writer) or `/dev/zero` is refused at once,
    /// naming what it is, instead of waiting for a writer or reading for ever.
    #[test]
    fn key_files_that_are_fifos_or_devices_are_refused_at_once() {
        let dir = hpc_test_support::TmpDir::new("hpc-dpu", "key-fifo");
        let fifo = dir.join("key");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t = Instant::now();
        let e = DpuKey::from_file(&fifo).unwrap_err().to_string();
        assert!(
            e.contains("is a FIFO, not a regular file") && e.contains("key"),
            "{e}"
        );
        let e = DpuKey::from_file(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/dev/zero is a character device"), "{e}");
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "took {:?}",
            t.elapsed()
        );
    }

    /// A service that greets late and then says nothing holds a client for
    /// the timeout, not twice it: the greeting and the answer were each
    /// given the whole timeout (a greeting just before it, then silence,
    /// held a rank 1.8 times its timeout). The error says what did not come
    /// and the wait.
    #[test]
    fn a_slow_then_silent_service_holds_a_client_one_timeout() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            std::thread::sleep(Duration::from_millis(800));
            s.write_all(format!("{GREETING} open\n").as_bytes())
                .unwrap();
            // Reads the request, answers nothing.
            let mut b = [0u8; 256];
            let _ = std::io::Read::read(&mut s, &mut b);
            std::thread::sleep(Duration::from_secs(3));
        });
        let s = TcpStream::connect(at).unwrap();
        let t0 = Instant::now();
        let e = ask(&s, at, None, SPEC, Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        let took = t0.elapsed();
        assert!(took < Duration::from_millis(1500), "held {took:?}: {e}");
        assert!(e.contains("its answer: none within 1s"), "{e}");
        drop(s);
        server.join().unwrap();
    }
}
