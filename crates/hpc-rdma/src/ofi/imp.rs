//! The libfabric runtime of the `ofi` backend: the calls into `shim.c` and the
//! `Backend` built on them.

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_void, CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hpc_runtime::World;

use super::*;
use crate::completion::{OpId, Payload, Shared, Sink, Source};
use crate::error::check_bounds;
use crate::region::{Region, RemoteKey};
use crate::{Backend, BackendKind};

#[allow(non_camel_case_types)]
type fi_info = c_void;
#[allow(non_camel_case_types)]
type hpc_ofi_ep = c_void;
#[allow(non_camel_case_types)]
type fid_mr = c_void;

#[repr(C)]
#[derive(Clone, Copy)]
struct Cqe {
    ctx: *mut c_void,
    flags: u64,
    len: u64,
    tag: u64,
}

extern "C" {
    fn hpc_ofi_load(err: *mut c_char, errlen: usize) -> i32;
    fn hpc_ofi_strerror(err: i32) -> *const c_char;
    fn hpc_ofi_getinfo(prov: *const c_char, caps: u64, dc: i32, out: *mut *mut fi_info) -> i32;
    fn hpc_ofi_info_next(i: *mut fi_info) -> *mut fi_info;
    fn hpc_ofi_info_prov(i: *mut fi_info) -> *const c_char;
    fn hpc_ofi_info_fabric(i: *mut fi_info) -> *const c_char;
    fn hpc_ofi_info_domain(i: *mut fi_info) -> *const c_char;
    fn hpc_ofi_info_mr_mode(i: *mut fi_info) -> u64;
    fn hpc_ofi_info_inject(i: *mut fi_info) -> u64;
    fn hpc_ofi_info_max_msg(i: *mut fi_info) -> u64;
    fn hpc_ofi_info_key_size(i: *mut fi_info) -> u64;
    fn hpc_ofi_info_waw_size(i: *mut fi_info) -> u64;
    fn hpc_ofi_info_manual_progress(i: *mut fi_info) -> i32;
    fn hpc_ofi_freeinfo(i: *mut fi_info);
    fn hpc_ofi_open(info: *mut fi_info, out: *mut *mut hpc_ofi_ep, what: *mut *const c_char)
        -> i32;
    fn hpc_ofi_close(e: *mut hpc_ofi_ep);
    fn hpc_ofi_getname(e: *mut hpc_ofi_ep, addr: *mut c_void, len: *mut usize) -> i32;
    fn hpc_ofi_av_insert(e: *mut hpc_ofi_ep, addr: *const c_void, fi_addr: *mut u64) -> i32;
    fn hpc_ofi_mr_reg(
        e: *mut hpc_ofi_ep,
        buf: *mut c_void,
        len: usize,
        requested_key: u64,
        mr: *mut *mut fid_mr,
        key: *mut u64,
        what: *mut *const c_char,
    ) -> i32;
    fn hpc_ofi_mr_close(mr: *mut fid_mr) -> i32;
    fn hpc_ofi_tinject(
        e: *mut hpc_ofi_ep,
        buf: *const c_void,
        len: usize,
        dest: u64,
        tag: u64,
    ) -> isize;
    fn hpc_ofi_tsend(
        e: *mut hpc_ofi_ep,
        buf: *const c_void,
        len: usize,
        dest: u64,
        tag: u64,
        ctx: *mut c_void,
    ) -> isize;
    fn hpc_ofi_trecv(
        e: *mut hpc_ofi_ep,
        buf: *mut c_void,
        len: usize,
        src: u64,
        tag: u64,
        ignore: u64,
        ctx: *mut c_void,
    ) -> isize;
    fn hpc_ofi_write(
        e: *mut hpc_ofi_ep,
        buf: *const c_void,
        len: usize,
        dest: u64,
        addr: u64,
        key: u64,
        ctx: *mut c_void,
    ) -> isize;
    fn hpc_ofi_read(
        e: *mut hpc_ofi_ep,
        buf: *mut c_void,
        len: usize,
        src: u64,
        addr: u64,
        key: u64,
        ctx: *mut c_void,
    ) -> isize;
    fn hpc_ofi_cq_read(e: *mut hpc_ofi_ep, out: *mut Cqe, n: usize) -> isize;
    fn hpc_ofi_cq_readerr(
        e: *mut hpc_ofi_ep,
        ctx: *mut *mut c_void,
        err: *mut i32,
        prov_errno: *mut i32,
        msg: *mut c_char,
        msglen: usize,
    ) -> isize;
}

// libfabric constants (<rdma/fabric.h>, <rdma/fi_errno.h>); checked by `shim.c`'s
// compilation against the same headers in `constants_match_the_headers`.
const FI_MSG: u64 = 1 << 1;
const FI_RMA: u64 = 1 << 2;
const FI_TAGGED: u64 = 1 << 3;
const FI_READ: u64 = 1 << 8;
const FI_WRITE: u64 = 1 << 9;
const FI_RECV: u64 = 1 << 10;
const FI_SEND: u64 = 1 << 11;
const FI_REMOTE_READ: u64 = 1 << 12;
const FI_REMOTE_WRITE: u64 = 1 << 13;
const FI_MR_VIRT_ADDR: u64 = 1 << 4;
const FI_MR_PROV_KEY: u64 = 1 << 6;
const FI_EAGAIN: i32 = libc::EAGAIN;
const FI_EADDRNOTAVAIL: i32 = libc::EADDRNOTAVAIL;
const FI_ENODATA: i32 = libc::ENODATA;
const FI_EAVAIL: i32 = 259;
const FI_ECANCELED: i32 = libc::ECANCELED;

/// What the transport needs of a provider.
const CAPS: u64 = FI_MSG
    | FI_TAGGED
    | FI_RMA
    | FI_READ
    | FI_WRITE
    | FI_RECV
    | FI_SEND
    | FI_REMOTE_READ
    | FI_REMOTE_WRITE;

fn strerror(code: i32) -> String {
    // SAFETY: libfabric is loaded (every caller checked `load`); fi_strerror returns a
    // static string.
    unsafe { CStr::from_ptr(hpc_ofi_strerror(code)) }
        .to_string_lossy()
        .into_owned()
}

fn ofi_error(call: &'static str, rc: i64) -> OfiError {
    let code = rc.unsigned_abs() as i32;
    OfiError {
        call,
        code,
        text: strerror(code),
    }
}

fn unavailable(why: impl Into<String>, source: Option<OfiError>) -> Error {
    Error::Unavailable {
        backend: "ofi",
        why: why.into(),
        source: source.map(|s| Arc::new(s) as crate::error::Cause),
    }
}

/// Loads libfabric (once per process).
fn load() -> Result<()> {
    static LOADED: Mutex<Option<std::result::Result<(), String>>> = Mutex::new(None);
    let mut l = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if l.is_none() {
        let mut err = [0 as c_char; 256];
        // SAFETY: `err` is writable for its length; the call is serialized by `LOADED`.
        let rc = unsafe { hpc_ofi_load(err.as_mut_ptr(), err.len()) };
        *l = Some(if rc == 0 {
            Ok(())
        } else {
            // SAFETY: the shim wrote a NUL-terminated message (snprintf).
            Err(unsafe { CStr::from_ptr(err.as_ptr()) }
                .to_string_lossy()
                .into_owned())
        });
    }
    match l.as_ref().expect("set above") {
        Ok(()) => Ok(()),
        Err(why) => Err(unavailable(why.clone(), None)),
    }
}

/// A list of `fi_info` from `fi_getinfo` (freed on drop).
struct InfoList(*mut fi_info);

impl Drop for InfoList {
    fn drop(&mut self) {
        // SAFETY: the list came from fi_getinfo and is freed once.
        unsafe { hpc_ofi_freeinfo(self.0) }
    }
}

impl InfoList {
    fn get(
        prov: Option<&str>,
        caps: u64,
        delivery_complete: bool,
    ) -> std::result::Result<Self, i32> {
        let name = prov.map(|p| CString::new(p).unwrap_or_default());
        let mut out = std::ptr::null_mut();
        // SAFETY: libfabric is loaded; `name` outlives the call; `out` receives the list.
        let rc = unsafe {
            hpc_ofi_getinfo(
                name.as_ref().map_or(std::ptr::null(), |n| n.as_ptr()),
                caps,
                delivery_complete as i32,
                &mut out,
            )
        };
        if rc != 0 || out.is_null() {
            return Err(if rc != 0 { -rc } else { FI_ENODATA });
        }
        Ok(InfoList(out))
    }

    fn iter(&self) -> impl Iterator<Item = *mut fi_info> + '_ {
        let mut cur = self.0;
        std::iter::from_fn(move || {
            if cur.is_null() {
                return None;
            }
            let now = cur;
            // SAFETY: `cur` is an entry of the live list.
            cur = unsafe { hpc_ofi_info_next(cur) };
            Some(now)
        })
    }
}

fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: libfabric's names are NUL-terminated strings owned by the info.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn describe(i: *mut fi_info) -> ProviderInfo {
    // SAFETY: `i` is an entry of a live list.
    unsafe {
        ProviderInfo {
            provider: cstr(hpc_ofi_info_prov(i)),
            fabric: cstr(hpc_ofi_info_fabric(i)),
            domain: cstr(hpc_ofi_info_domain(i)),
        }
    }
}

/// An open endpoint (closed on drop).
struct Endpoint(*mut hpc_ofi_ep);

// SAFETY: the endpoint's libfabric objects are used by one owner at a time (the
// `PROBED` lock, then the `Inner::ep` lock: FI_THREAD_DOMAIN); moving the handle to
// another thread moves that ownership with it.
unsafe impl Send for Endpoint {}

/// The endpoint that [`probe`] opened to check that the named provider opens one,
/// with the provider it is of: [`connect`] serves through it rather than open a
/// second (opening one costs 0.1-0.2 s with `tcp;ofi_rxm` here, on top of
/// libfabric's own start-up, see the book's transport chapter). Taken by the next
/// `connect`, which drops one that does not match its provider.
static PROBED: Mutex<Option<(ProviderInfo, Endpoint)>> = Mutex::new(None);

impl Drop for Endpoint {
    fn drop(&mut self) {
        // SAFETY: opened by hpc_ofi_open, closed once; memory registrations were
        // closed before (see `Ofi`'s drop).
        unsafe { hpc_ofi_close(self.0) }
    }
}

fn open(i: *mut fi_info) -> Result<Endpoint> {
    let mut ep = std::ptr::null_mut();
    let mut what: *const c_char = std::ptr::null();
    // SAFETY: `i` is an entry of a live list (copied by the shim); out-pointers valid.
    let rc = unsafe { hpc_ofi_open(i, &mut ep, &mut what) };
    if rc != 0 {
        let call = match cstr(what).as_str() {
            "fi_fabric" => "fi_fabric",
            "fi_domain" => "fi_domain",
            "fi_cq_open" => "fi_cq_open",
            "fi_av_open" => "fi_av_open",
            "fi_endpoint" => "fi_endpoint",
            "fi_enable" => "fi_enable",
            _ => "fi_ep_bind",
        };
        let p = describe(i).provider;
        return Err(unavailable(
            format!("provider {p} does not open an endpoint here"),
            Some(ofi_error(call, rc as i64)),
        ));
    }
    Ok(Endpoint(ep))
}

/// The name of the required capability that `name` lacks, found by asking again
/// without each in turn.
fn diagnose(name: &str, caps: u64) -> String {
    if InfoList::get(Some(name), 0, false).is_err() {
        return format!(
            "no libfabric provider named {name:?} offers reliable-datagram endpoints here \
             (`fi_info -l` lists the installed ones)"
        );
    }
    let parts: [(&str, u64, bool); 3] = [
        ("tagged messages (FI_TAGGED)", FI_TAGGED, true),
        (
            "RMA (FI_RMA, FI_READ/FI_WRITE and their remote sides)",
            FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
            true,
        ),
        ("delivery-complete completions", 0, false),
    ];
    for (what, bits, dc) in parts {
        if InfoList::get(Some(name), caps & !bits, dc).is_ok() {
            return format!("provider {name} has no {what}, which the transport needs");
        }
    }
    let extra = caps & !CAPS;
    if extra != 0 && InfoList::get(Some(name), CAPS, true).is_ok() {
        return format!("provider {name} lacks the capability bits {extra:#x} asked for");
    }
    format!(
        "provider {name} does not offer reliable-datagram endpoints with tagged messages, \
         RMA and delivery-complete completions together"
    )
}

pub(super) fn check_provider(name: &str, extra: u64) -> Result<ProviderInfo> {
    load()?;
    let caps = CAPS | extra;
    match InfoList::get(Some(name), caps, true) {
        Ok(list) => Ok(describe(list.0)),
        Err(code) => Err(unavailable(
            diagnose(name, caps),
            Some(ofi_error("fi_getinfo", code as i64)),
        )),
    }
}

pub(super) fn probe(named: Option<&str>, fabric_only: bool) -> Result<ProviderInfo> {
    load()?;
    if let Some(name) = named {
        let found = check_provider(name, 0)?;
        let list = InfoList::get(Some(name), CAPS, true).map_err(|c| {
            unavailable(
                diagnose(name, CAPS),
                Some(ofi_error("fi_getinfo", c as i64)),
            )
        })?;
        let ep = open(list.0)?;
        *PROBED.lock().unwrap_or_else(|e| e.into_inner()) = Some((found.clone(), ep));
        return Ok(found);
    }
    let list = InfoList::get(None, CAPS, true).map_err(|c| {
        unavailable(
            "no libfabric provider offers reliable-datagram endpoints with tagged \
             messages, RMA and delivery-complete completions",
            Some(ofi_error("fi_getinfo", c as i64)),
        )
    })?;
    let mut last = None;
    for i in list.iter() {
        let d = describe(i);
        if fabric_only && !drives_a_fabric(&d.provider) {
            continue;
        }
        // Listed is not usable (psm2 is listed without its hardware): open it.
        match open(i) {
            Ok(ep) => {
                drop(ep);
                return Ok(d);
            }
            Err(e) => {
                tracing::debug!(provider = d.provider, error = %e, "ofi: provider does not open");
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| {
        unavailable(
            if fabric_only {
                "no libfabric provider that drives a fabric (verbs, cxi, efa, psm2, ...) is usable here"
            } else {
                "no libfabric provider is usable here"
            },
            None,
        )
    }))
}

/// Finds the `fi_info` entry for `p` (its provider, fabric and domain).
fn info_for(p: &ProviderInfo) -> Result<(InfoList, *mut fi_info)> {
    let list = InfoList::get(Some(&p.provider), CAPS, true).map_err(|c| {
        unavailable(
            diagnose(&p.provider, CAPS),
            Some(ofi_error("fi_getinfo", c as i64)),
        )
    })?;
    let i = list
        .iter()
        .find(|&i| {
            let d = describe(i);
            d.fabric == p.fabric && d.domain == p.domain
        })
        .unwrap_or(list.0);
    Ok((list, i))
}

fn getname(ep: &Endpoint) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; 1024];
    let mut len = buf.len();
    // SAFETY: `buf` is writable for `len` bytes; the endpoint is open.
    let rc = unsafe { hpc_ofi_getname(ep.0, buf.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return Err(Error::library(
            "fi_getname",
            ofi_error("fi_getname", rc as i64),
        ));
    }
    buf.truncate(len);
    Ok(buf)
}

fn av_insert(ep: &Endpoint, addr: &[u8]) -> std::result::Result<u64, String> {
    if addr.is_empty() {
        return Err("empty endpoint name".into());
    }
    let mut fi_addr = u64::MAX;
    // SAFETY: `addr` is readable for the provider's name size: the shim inserts one
    // name, which the provider reads up to its own address length; names shorter
    // than that are padded below.
    let n = unsafe { hpc_ofi_av_insert(ep.0, addr.as_ptr().cast(), &mut fi_addr) };
    if n == 1 && fi_addr != u64::MAX {
        Ok(fi_addr)
    } else if n < 0 {
        Err(format!("fi_av_insert: {}", strerror(-n)))
    } else {
        Err("fi_av_insert did not resolve it".into())
    }
}

/// Pads a peer's name to the length of ours: providers read names of their own size.
fn padded(addr: &[u8], own_len: usize) -> Vec<u8> {
    let mut v = addr.to_vec();
    if v.len() < own_len {
        v.resize(own_len, 0);
    }
    v
}

pub(super) fn resolve(provider: &str, addrs: &[Vec<u8>]) -> Result<Vec<Result<()>>> {
    load()?;
    let p = check_provider(provider, 0)?;
    let (_list, i) = info_for(&p)?;
    let ep = open(i)?;
    let own = getname(&ep)?.len();
    Ok(addrs
        .iter()
        .enumerate()
        .map(|(n, a)| {
            av_insert(&ep, &padded(a, own)).map(|_| ()).map_err(|why| {
                unavailable(format!("endpoint name {n} does not resolve: {why}"), None)
            })
        })
        .collect())
}

/// Storage a provider may use for an operation (`FI_CONTEXT2`: 8 words), and our
/// key for finding the operation again.
type Ctx = Box<[u64; 8]>;

fn new_ctx() -> Ctx {
    Box::new([0; 8])
}

fn ctx_key(c: &Ctx) -> usize {
    &**c as *const [u64; 8] as usize
}

/// What a posted libfabric operation holds until its completion.
enum InFlight {
    /// A pre-posted receive buffer (its index).
    Pool(usize),
    /// An eager or announcing message: the frame sent, and the user's data to hand
    /// back (`op` None for the announcement).
    Frame {
        op: Option<OpId>,
        peer: usize,
        _frame: Vec<u8>,
        data: Option<Vec<u8>>,
    },
    /// Announced data being sent.
    Data {
        op: OpId,
        peer: usize,
        data: Vec<u8>,
    },
    /// Announced data being received.
    Incoming { peer: usize, seq: u32, buf: Vec<u8> },
    /// A part of a put (`last`: the part that completes it).
    Put { op: OpId, peer: usize },
    /// A get.
    Get {
        op: OpId,
        peer: usize,
        sink: GetSink,
    },
}

enum GetSink {
    Bytes(Vec<u8>),
    Region(Region),
}

/// A post the provider refused with "try again", kept in order until it takes it
/// (see `Inner::later`). Receives wait in one queue, what goes to a peer in that
/// peer's queue, so a peer that does not progress holds up only its own traffic.
enum Later {
    /// Re-post pre-posted receive buffer `i`.
    Pool(usize),
    /// Receive announced data.
    Incoming { peer: usize, seq: u32, buf: Vec<u8> },
    /// A tagged send of `len` bytes at `ptr` under libfabric tag `tag`; the memory
    /// is owned by `what` (an `InFlight::Frame` or `InFlight::Data`).
    Send {
        peer: usize,
        tag: u64,
        ptr: *const u8,
        len: usize,
        what: InFlight,
    },
    /// A write of `src[from..from + len]` to `addr + from` at `peer`: a part of put
    /// `op`, whose source `ep.puts` owns until every part completed.
    Write {
        op: OpId,
        peer: usize,
        src: *const u8,
        from: usize,
        len: usize,
        addr: u64,
        key: u64,
    },
    /// A read of `len` bytes from `addr` at `peer` into `ptr`, owned by `sink`.
    Read {
        op: OpId,
        peer: usize,
        ptr: *mut u8,
        len: usize,
        addr: u64,
        key: u64,
        sink: GetSink,
    },
}

// SAFETY: the raw pointers point into memory the entry (or `Ep::puts`) owns; entries
// live in `Ep` behind its lock, or are dropped (as a whole, outside the lock when they
// may hold a region) without being dereferenced.
unsafe impl Send for Later {}

impl Later {
    /// The peer the post goes to (`None`: a receive, queued apart).
    fn peer(&self) -> Option<usize> {
        match self {
            Later::Pool(_) | Later::Incoming { .. } => None,
            Later::Send { peer, .. } | Later::Write { peer, .. } | Later::Read { peer, .. } => {
                Some(*peer)
            }
        }
    }
}

/// What one attempt to post gave.
enum Posted {
    Done,
    /// The provider said "try again" (or that the peer's address is not usable
    /// yet): the post, back.
    Again(Later),
    /// The provider refused it: the post (not in flight), and why.
    Failed(Later, Error),
}

/// How the transport treats a post that the provider refused with `code`
/// (a positive `FI_E*` value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// `-FI_EAGAIN`: resources are busy; post again after reading completions.
    Again,
    /// `-FI_EADDRNOTAVAIL` on a send, write or read to a peer: the provider cannot
    /// use the peer's address *yet*. `ofi_rxm` returns it from the operation when
    /// opening the connection to the peer fails that way (the tcp provider's
    /// `connect()` gives `EADDRNOTAVAIL` when no local port is free, e.g. under
    /// many short-lived connections of parallel jobs, until sockets in TIME_WAIT
    /// expire), and it keeps the connection idle, so that the next post tries to
    /// connect again. Posted again like `Again`, until the transport's timeout.
    Unresolved,
    /// Anything else: the operation fails with the provider's error.
    Fatal,
}

/// Classifies a refused post (`to_peer`: a send, write or read to one peer).
fn refusal(code: i32, to_peer: bool) -> Refusal {
    match code {
        FI_EAGAIN => Refusal::Again,
        FI_EADDRNOTAVAIL if to_peer => Refusal::Unresolved,
        _ => Refusal::Fatal,
    }
}

/// Since when each peer's address has been refused (`-FI_EADDRNOTAVAIL`) without a
/// post to it succeeding in between: bounds the retries by the transport's timeout.
struct Unresolved {
    since: Vec<Option<Instant>>,
}

impl Unresolved {
    fn new(peers: usize) -> Unresolved {
        Unresolved {
            since: vec![None; peers],
        }
    }

    /// A post to `peer` was refused at `now`: whether to post again (false once the
    /// refusals have lasted longer than `timeout`, which also forgets them).
    fn refused(&mut self, peer: usize, now: Instant, timeout: Duration) -> bool {
        let since = *self.since[peer].get_or_insert(now);
        if now.saturating_duration_since(since) <= timeout {
            return true;
        }
        self.since[peer] = None;
        false
    }

    /// A post to `peer` succeeded: its address works.
    fn resolved(&mut self, peer: usize) {
        self.since[peer] = None;
    }
}

/// A put's state until its last part completed.
struct PutState {
    src: Source,
    parts_left: u8,
    error: Option<Error>,
    /// The tail write (peer, address, key), issued when the body completed (when
    /// the provider does not order writes of the body's size).
    tail: Option<(usize, u64, u64)>,
}

/// One message in a peer's delivery order: arrived (tag, data), or announced and
/// still moving (seq, tag).
enum Slot {
    Ready(u64, Vec<u8>),
    Waiting(u32, u64),
}

struct Mr {
    mr: *mut fid_mr,
    region: Weak<crate::region::RegionInner>,
}

/// Everything that calls into libfabric, behind one lock (`FI_THREAD_DOMAIN`).
struct Ep {
    ep: Endpoint,
    fi_addr: Vec<u64>,
    inflight: HashMap<usize, (Ctx, InFlight)>,
    pool: Vec<Vec<u8>>,
    puts: HashMap<u64, PutState>,
    mrs: HashMap<u32, Mr>,
    order: Vec<VecDeque<Slot>>,
    tx_seq: Vec<u32>,
    /// Receives the provider refused with "try again": posted, in order, on the
    /// next read of completions (by a caller or the progress thread).
    later_rx: VecDeque<Later>,
    /// Per peer: sends, writes and reads the provider refused with "try again",
    /// posted in order on the next read of completions. Nothing waits for the
    /// provider with the lock held, so an idle peer only delays its own operations
    /// (their waits are bounded by the caller's timeout) and never makes posting
    /// fail.
    later_tx: Vec<VecDeque<Later>>,
    /// Peers whose address the provider refuses for now (see [`Refusal::Unresolved`]).
    unresolved: Unresolved,
    /// Reports gathered while posting (the provider said "try again" and we read
    /// completions); handed to `Inner::report` after the lock is released.
    deferred: Vec<Done>,
}

// SAFETY: the raw pointers are libfabric objects and registrations used only under
// the `Inner::ep` lock (FI_THREAD_DOMAIN: one caller at a time), and buffers this
// struct owns.
unsafe impl Send for Ep {}

/// A completion to report once the lock is released (reporting may drop a region,
/// whose deregistration takes the lock).
enum Done {
    Complete(OpId, Result<Payload>),
    Lost(usize, OfiError),
    /// The peer is lost for the reason given.
    LostWith(usize, String),
    Drop(Box<dyn std::any::Any + Send>),
}

struct Peer {
    pid: u32,
    pidfd: Option<OwnedFd>,
}

struct Inner {
    shared: Arc<Shared>,
    provider: String,
    ep: Mutex<Ep>,
    peers: Vec<Option<Peer>>,
    me: usize,
    inject: usize,
    max_msg: u64,
    virt_addr: bool,
    prov_key: bool,
    key_mask: u64,
    waw_size: u64,
    closing: AtomicBool,
    /// The job's timeout (bounds a provider that keeps saying "try again").
    timeout: Duration,
    /// Nanoseconds (since `epoch`) of the last progress by a caller.
    caller_progress: AtomicU64,
    epoch: Instant,
}

/// The libfabric backend.
pub(crate) struct Ofi {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
}

fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether a completion error means the peer (or the path to it) is gone.
fn is_connection_error(code: i32) -> bool {
    matches!(
        code,
        libc::ECONNRESET
            | libc::ECONNREFUSED
            | libc::ECONNABORTED
            | libc::EHOSTUNREACH
            | libc::ENOTCONN
            | libc::ETIMEDOUT
            | libc::EPIPE
            | libc::EIO
    )
}

pub(super) fn connect(
    shared: Arc<Shared>,
    world: &World,
    peers: &[usize],
    provider: Option<ProviderInfo>,
) -> Result<Option<Box<dyn Backend>>> {
    let me = shared.rank;
    let probed = PROBED.lock().unwrap_or_else(|e| e.into_inner()).take();
    // Everyone publishes an entry (empty without peers), so the allgather matches.
    type Setup = (ProviderInfo, InfoList, *mut fi_info, Endpoint, Vec<u8>);
    let setup: Result<Option<Setup>> = if peers.is_empty() {
        Ok(None)
    } else {
        (|| {
            load()?;
            let p = match provider {
                Some(p) => p,
                None => probe(provider_from(|k| std::env::var(k).ok()).as_deref(), false)?,
            };
            let (list, i) = info_for(&p)?;
            // The probe's endpoint where it is of this provider, fabric and domain.
            let same = |q: &ProviderInfo| {
                (&q.provider, &q.fabric, &q.domain) == (&p.provider, &p.fabric, &p.domain)
            };
            let ep = match probed {
                Some((q, ep)) if same(&q) => ep,
                _ => open(i)?,
            };
            let name = getname(&ep)?;
            Ok(Some((p, list, i, ep, name)))
        })()
    };
    let entry = match &setup {
        Ok(Some((p, _, _, _, name))) => PeerEntry {
            pid: std::process::id(),
            provider: p.provider.clone(),
            addr: name.clone(),
        },
        _ => PeerEntry {
            pid: std::process::id(),
            provider: String::new(),
            addr: Vec::new(),
        },
    };
    let all = world.allgather(&entry.encode())?;
    let Some((p, list, info, ep, name)) = setup? else {
        return Ok(None);
    };
    let mut fi_addr = vec![u64::MAX; shared.size];
    let mut pinfo: Vec<Option<Peer>> = (0..shared.size).map(|_| None).collect();
    for &r in peers.iter().chain(std::iter::once(&me)) {
        let e = PeerEntry::decode(&all[r])
            .map_err(|e| unavailable(format!("rank {r}'s endpoint entry is corrupt: {e}"), None))?;
        if e.addr.is_empty() {
            return Err(unavailable(
                format!("rank {r} has no libfabric endpoint"),
                None,
            ));
        }
        if e.provider != p.provider {
            return Err(unavailable(
                format!(
                    "rank {r} uses provider {} and rank {me} {}: set HPC_OFI_PROVIDER alike on every rank",
                    e.provider, p.provider
                ),
                None,
            ));
        }
        fi_addr[r] = av_insert(&ep, &padded(&e.addr, name.len())).map_err(|why| {
            unavailable(
                format!("rank {r}'s endpoint name does not resolve: {why}"),
                None,
            )
        })?;
        if r != me {
            pinfo[r] = Some(Peer {
                pid: e.pid,
                pidfd: if world.same_node(me, r) {
                    pidfd_open(e.pid)
                } else {
                    None
                },
            });
        }
    }
    // SAFETY: `info` is an entry of the live `list`.
    let (mr_mode, inject, max_msg, key_size, waw_size, manual) = unsafe {
        (
            hpc_ofi_info_mr_mode(info),
            hpc_ofi_info_inject(info) as usize,
            hpc_ofi_info_max_msg(info),
            hpc_ofi_info_key_size(info),
            hpc_ofi_info_waw_size(info),
            hpc_ofi_info_manual_progress(info),
        )
    };
    drop(list);
    let inner = Arc::new(Inner {
        shared: shared.clone(),
        provider: p.provider.clone(),
        ep: Mutex::new(Ep {
            ep,
            fi_addr,
            inflight: HashMap::new(),
            pool: Vec::new(),
            puts: HashMap::new(),
            mrs: HashMap::new(),
            order: (0..shared.size).map(|_| VecDeque::new()).collect(),
            tx_seq: vec![0; shared.size],
            deferred: Vec::new(),
            later_rx: VecDeque::new(),
            later_tx: (0..shared.size).map(|_| VecDeque::new()).collect(),
            unresolved: Unresolved::new(shared.size),
        }),
        peers: pinfo,
        me,
        // libfabric 1.17's shm provider loses or reorders injected tagged messages
        // that arrive before their receive is posted (seen in the conformance
        // suite with few pre-posted buffers): no inject there.
        inject: if p.provider.split(';').next() == Some("shm") {
            0
        } else {
            inject
        },
        max_msg,
        virt_addr: mr_mode & FI_MR_VIRT_ADDR != 0,
        prov_key: mr_mode & FI_MR_PROV_KEY != 0,
        key_mask: if key_size >= 8 {
            u64::MAX
        } else {
            (1u64 << (8 * key_size)) - 1
        },
        waw_size,
        closing: AtomicBool::new(false),
        timeout: world.timeout(),
        caller_progress: AtomicU64::new(0),
        epoch: Instant::now(),
    });
    {
        let mut ep = inner.lock();
        for i in 0..POOL {
            ep.pool.push(vec![0u8; HEADER_BYTES + EAGER_MAX]);
            inner.post_pool(&mut ep, i)?;
        }
    }
    tracing::info!(
        rank = me,
        provider = p.provider,
        fabric = p.fabric,
        domain = p.domain,
        manual_data_progress = manual & 1 != 0,
        manual_control_progress = manual & 2 != 0,
        "ofi endpoint"
    );
    // A provider with manual progress moves a peer's puts and gets into our memory
    // only while we call into it: a thread does when no caller does. One that
    // progresses by itself (hardware offload) needs none.
    let thread = if manual != 0 {
        let weak = Arc::downgrade(&inner);
        Some(
            std::thread::Builder::new()
                .name("hpc-rdma-ofi".into())
                .spawn(move || progress_thread(weak))?,
        )
    } else {
        None
    };
    Ok(Some(Box::new(Ofi { inner, thread })))
}

/// Reads completions when no caller does: polls while there is traffic, then naps
/// (up to 100 µs), and leaves the endpoint to callers that progress themselves.
fn progress_thread(weak: Weak<Inner>) {
    let mut idle = 0u32;
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if inner.closing.load(Ordering::Acquire) {
            return;
        }
        let now = inner.epoch.elapsed().as_nanos() as u64;
        let busy_caller =
            now.saturating_sub(inner.caller_progress.load(Ordering::Relaxed)) < 200_000;
        let mut got = 0;
        if !busy_caller {
            if let Ok(mut ep) = inner.ep.try_lock() {
                let mut done = Vec::new();
                got = inner.drain(&mut ep, &mut done);
                done.append(&mut ep.deferred);
                drop(ep);
                inner.report(done);
            }
        }
        drop(inner);
        if got > 0 {
            idle = 0;
            continue;
        }
        idle = idle.saturating_add(1);
        if idle < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros((idle as u64).min(100)));
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Ep> {
        self.ep.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn post_pool(&self, ep: &mut Ep, i: usize) -> Result<()> {
        let ctx = new_ctx();
        let key = ctx_key(&ctx);
        let buf = ep.pool[i].as_mut_ptr();
        let len = ep.pool[i].len();
        let e = ep.ep.0;
        // SAFETY: the buffer lives in `ep.pool` (never resized) until the endpoint is
        // closed; the context box is kept in `inflight` until the completion.
        let post = || unsafe {
            hpc_ofi_trecv(
                e,
                buf.cast(),
                len,
                u64::MAX, // FI_ADDR_UNSPEC: any source
                0,
                EAGER_IGNORE,
                key as *mut c_void,
            )
        };
        ep.inflight.insert(key, (ctx, InFlight::Pool(i)));
        self.retry(ep, "fi_trecv", None, post).inspect_err(|_| {
            ep.inflight.remove(&key);
        })
    }

    /// Calls `post` until the provider takes it, reading completions while it says
    /// "try again" (their reports are deferred to when the lock is released). Gives
    /// up when `peer` is found gone (checked every millisecond) or after the job's
    /// timeout.
    fn retry(
        &self,
        ep: &mut Ep,
        call: &'static str,
        peer: Option<usize>,
        mut post: impl FnMut() -> isize,
    ) -> Result<()> {
        let start = Instant::now();
        let mut checked = start;
        loop {
            let rc = post();
            if rc == 0 {
                return Ok(());
            }
            if rc as i32 != -FI_EAGAIN {
                return Err(Error::library(call, ofi_error(call, rc as i64)));
            }
            let mut done = Vec::new();
            self.drain(ep, &mut done);
            ep.deferred.append(&mut done);
            if checked.elapsed() >= Duration::from_millis(1) {
                checked = Instant::now();
                if let Some(p) = peer {
                    if let Some(e) = self.gone(p) {
                        return Err(e);
                    }
                }
                if start.elapsed() > self.timeout {
                    return Err(Error::Timeout {
                        after: self.timeout,
                        what: format!(
                            "{call}: the {} provider kept refusing{}",
                            self.provider,
                            peer.map(|p| format!(" (to rank {p})")).unwrap_or_default()
                        ),
                    });
                }
            }
        }
    }

    /// `PeerLost` if `peer` is known lost or its process (on this node) exited.
    fn gone(&self, peer: usize) -> Option<Error> {
        if let Some(e) = self.shared.is_lost(peer) {
            return Some(e);
        }
        let p = self.peers.get(peer)?.as_ref()?;
        let fd = p.pidfd.as_ref()?;
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        if unsafe { libc::poll(&mut pfd, 1, 0) } > 0 {
            let cause = format!("process {} exited", p.pid);
            self.shared.fail_peer(peer, &cause);
            return Some(
                self.shared
                    .is_lost(peer)
                    .unwrap_or_else(|| Error::lost(peer, cause, None::<Error>)),
            );
        }
        None
    }

    /// Reads every available completion (success and error) into `done`; returns
    /// how many there were.
    fn drain(&self, ep: &mut Ep, done: &mut Vec<Done>) -> usize {
        let mut total = 0;
        loop {
            self.flush_later(ep, done);
            let mut cqe = [Cqe {
                ctx: std::ptr::null_mut(),
                flags: 0,
                len: 0,
                tag: 0,
            }; 16];
            // SAFETY: `cqe` has room for 16 entries; the endpoint is open.
            let n = unsafe { hpc_ofi_cq_read(ep.ep.0, cqe.as_mut_ptr(), cqe.len()) };
            if n == -(FI_EAVAIL as isize) {
                total += 1;
                self.read_error(ep, done);
                continue;
            }
            if n <= 0 {
                if n < 0 {
                    tracing::warn!(error = %strerror(-n as i32), "ofi: fi_cq_read");
                }
                return total;
            }
            total += n as usize;
            for c in &cqe[..n as usize] {
                self.completed(ep, c, done);
            }
        }
    }

    fn read_error(&self, ep: &mut Ep, done: &mut Vec<Done>) {
        let mut ctx = std::ptr::null_mut();
        let (mut err, mut perr) = (0i32, 0i32);
        let mut msg = [0 as c_char; 256];
        // SAFETY: out-pointers valid, `msg` writable for its length.
        let n = unsafe {
            hpc_ofi_cq_readerr(
                ep.ep.0,
                &mut ctx,
                &mut err,
                &mut perr,
                msg.as_mut_ptr(),
                msg.len(),
            )
        };
        if n != 1 {
            return;
        }
        // SAFETY: NUL-terminated by the shim.
        let text = unsafe { CStr::from_ptr(msg.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let Some((_ctx, what)) = ep.inflight.remove(&(ctx as usize)) else {
            tracing::warn!(err, text, "ofi: error completion of an unknown operation");
            return;
        };
        let e = OfiError {
            call: "completion",
            code: err,
            text: if text.is_empty() { strerror(err) } else { text },
        };
        let peer_of = |p: usize| {
            if is_connection_error(err) {
                Some(p)
            } else {
                None
            }
        };
        match what {
            InFlight::Pool(i) => {
                if err != FI_ECANCELED && !self.closing.load(Ordering::Acquire) {
                    tracing::warn!(error = %e, "ofi: pre-posted receive failed; reposting");
                    self.later(ep, Later::Pool(i), done);
                }
            }
            InFlight::Frame { op, peer, data, .. } => {
                if let Some(p) = peer_of(peer) {
                    done.push(Done::Lost(p, e.clone()));
                }
                if let Some(op) = op {
                    done.push(Done::Complete(op, Err(Error::library("fi_tsend", e))));
                }
                if let Some(d) = data {
                    done.push(Done::Drop(Box::new(d)));
                }
            }
            InFlight::Data { op, peer, data } => {
                if let Some(p) = peer_of(peer) {
                    done.push(Done::Lost(p, e.clone()));
                }
                done.push(Done::Complete(op, Err(Error::library("fi_tsend", e))));
                done.push(Done::Drop(Box::new(data)));
            }
            InFlight::Incoming { peer, .. } => {
                done.push(Done::Lost(peer, e));
            }
            InFlight::Put { op, peer } => {
                if let Some(p) = peer_of(peer) {
                    done.push(Done::Lost(p, e.clone()));
                }
                let err = if is_connection_error(err) {
                    Error::library("fi_write", e)
                } else {
                    Error::BadKey(format!("put rejected by rank {peer}'s provider: {e}"))
                };
                self.put_part_done(ep, op, Some(err), done);
            }
            InFlight::Get { op, peer, sink } => {
                if let Some(p) = peer_of(peer) {
                    done.push(Done::Lost(p, e.clone()));
                }
                let err = if is_connection_error(err) {
                    Error::library("fi_read", e)
                } else {
                    Error::BadKey(format!("get rejected by rank {peer}'s provider: {e}"))
                };
                done.push(Done::Complete(op, Err(err)));
                if let GetSink::Region(r) = sink {
                    done.push(Done::Drop(Box::new(r)));
                }
            }
        }
    }

    fn completed(&self, ep: &mut Ep, c: &Cqe, done: &mut Vec<Done>) {
        let Some((_ctx, what)) = ep.inflight.remove(&(c.ctx as usize)) else {
            tracing::warn!("ofi: completion of an unknown operation");
            return;
        };
        match what {
            InFlight::Pool(i) => {
                let peer = tag_source(c.tag);
                let len = (c.len as usize).min(ep.pool[i].len());
                let msg = MsgHeader::decode(&ep.pool[i][..len]);
                match msg {
                    Ok(h) if peer < self.shared.size && self.peers[peer].is_some() => {
                        if h.kind == EAGER {
                            let data = ep.pool[i][HEADER_BYTES..len].to_vec();
                            ep.order[peer].push_back(Slot::Ready(h.tag, data));
                        } else {
                            self.post_incoming(ep, peer, h, done);
                        }
                        self.deliver_ready(ep, peer);
                    }
                    Ok(_) => tracing::warn!(peer, "ofi: message from a rank that is not a peer"),
                    Err(e) => {
                        tracing::warn!(peer, error = %e, "ofi: malformed message");
                        if peer < self.shared.size {
                            done.push(Done::Lost(
                                peer,
                                OfiError {
                                    call: "receive",
                                    code: libc::EPROTO,
                                    text: e.to_string(),
                                },
                            ));
                        }
                    }
                }
                self.later(ep, Later::Pool(i), done);
            }
            InFlight::Frame { op, data, .. } => {
                if let (Some(op), Some(d)) = (op, data) {
                    done.push(Done::Complete(op, Ok(Payload::Bytes(d))));
                }
            }
            InFlight::Data { op, data, .. } => {
                done.push(Done::Complete(op, Ok(Payload::Bytes(data))));
            }
            InFlight::Incoming { peer, seq, buf } => {
                if let Some(slot) = ep.order[peer]
                    .iter_mut()
                    .find(|s| matches!(s, Slot::Waiting(q, _) if *q == seq))
                {
                    if let Slot::Waiting(_, tag) = *slot {
                        *slot = Slot::Ready(tag, buf);
                    }
                }
                self.deliver_ready(ep, peer);
            }
            InFlight::Put { op, .. } => self.put_part_done(ep, op, None, done),
            InFlight::Get { op, sink, .. } => {
                let payload = match sink {
                    GetSink::Bytes(v) => Payload::Bytes(v),
                    GetSink::Region(r) => Payload::Region(r),
                };
                done.push(Done::Complete(op, Ok(payload)));
            }
        }
    }

    /// An announcement arrived: post the receive of its data (its place in the
    /// delivery order is taken now).
    fn post_incoming(&self, ep: &mut Ep, peer: usize, h: MsgHeader, done: &mut Vec<Done>) {
        ep.order[peer].push_back(Slot::Waiting(h.seq, h.tag));
        let buf = vec![0u8; h.len as usize];
        self.later(
            ep,
            Later::Incoming {
                peer,
                seq: h.seq,
                buf,
            },
            done,
        );
    }

    /// The queue `l` waits in when the provider refuses it.
    fn queue_of<'a>(ep: &'a mut Ep, l: &Later) -> &'a mut VecDeque<Later> {
        match l.peer() {
            None => &mut ep.later_rx,
            Some(p) => &mut ep.later_tx[p],
        }
    }

    /// Posts `l` now if nothing waits before it in its queue and the provider takes
    /// it; else queues it (in order) for the next read of completions. A refusal is
    /// reported into `done` as the operation's failure.
    fn later(&self, ep: &mut Ep, l: Later, done: &mut Vec<Done>) {
        if let Err((l, e)) = self.submit(ep, l) {
            self.fail_later(ep, l, e, done);
        }
    }

    /// Like [`Inner::later`], handing a refusal back (the post is not in flight) so
    /// that the call that posts it can fail instead.
    #[allow(clippy::result_large_err)]
    fn submit(&self, ep: &mut Ep, l: Later) -> std::result::Result<(), (Later, Error)> {
        if !Self::queue_of(ep, &l).is_empty() {
            Self::queue_of(ep, &l).push_back(l);
            return Ok(());
        }
        match self.post_once(ep, l) {
            Posted::Done => Ok(()),
            Posted::Again(l) => {
                Self::queue_of(ep, &l).push_back(l);
                Ok(())
            }
            Posted::Failed(l, e) => Err((l, e)),
        }
    }

    /// Posts what waits, in order per queue, until the provider says "try again".
    /// What waits for a lost peer fails with its `PeerLost`.
    fn flush_later(&self, ep: &mut Ep, done: &mut Vec<Done>) {
        while let Some(l) = ep.later_rx.pop_front() {
            match self.post_once(ep, l) {
                Posted::Done => {}
                Posted::Again(l) => {
                    ep.later_rx.push_front(l);
                    break;
                }
                Posted::Failed(l, e) => self.fail_later(ep, l, e, done),
            }
        }
        for peer in 0..ep.later_tx.len() {
            if ep.later_tx[peer].is_empty() {
                continue;
            }
            if let Some(lost) = self.shared.is_lost(peer) {
                for l in std::mem::take(&mut ep.later_tx[peer]) {
                    self.fail_later(ep, l, lost.clone(), done);
                }
                continue;
            }
            while let Some(l) = ep.later_tx[peer].pop_front() {
                match self.post_once(ep, l) {
                    Posted::Done => {}
                    Posted::Again(l) => {
                        ep.later_tx[peer].push_front(l);
                        break;
                    }
                    Posted::Failed(l, e) => self.fail_later(ep, l, e, done),
                }
            }
        }
    }

    /// Ends the operation of a post that will not be made, with `err`.
    fn fail_later(&self, ep: &mut Ep, l: Later, err: Error, done: &mut Vec<Done>) {
        match l {
            Later::Pool(_) => tracing::warn!(error = %err, "ofi: cannot repost a receive buffer"),
            Later::Incoming { peer, .. } => {
                let cause = format!("the receive of announced data failed: {err}");
                done.push(Done::LostWith(peer, cause));
            }
            Later::Send { what, .. } => match what {
                InFlight::Frame { op, data, .. } => {
                    if let Some(op) = op {
                        done.push(Done::Complete(op, Err(err)));
                    }
                    if let Some(d) = data {
                        done.push(Done::Drop(Box::new(d)));
                    }
                }
                InFlight::Data { op, data, .. } => {
                    done.push(Done::Complete(op, Err(err)));
                    done.push(Done::Drop(Box::new(data)));
                }
                _ => {}
            },
            Later::Write { op, .. } => self.put_part_done(ep, op, Some(err), done),
            Later::Read { op, sink, .. } => {
                done.push(Done::Complete(op, Err(err)));
                if let GetSink::Region(r) = sink {
                    done.push(Done::Drop(Box::new(r)));
                }
            }
        }
    }

    /// One attempt to post `l`; once posted, it is in `inflight` until its
    /// completion.
    fn post_once(&self, ep: &mut Ep, l: Later) -> Posted {
        let e = ep.ep.0;
        let ctx = new_ctx();
        let key = ctx_key(&ctx);
        let (rc, call) = match &l {
            Later::Pool(i) => {
                let b = &mut ep.pool[*i];
                // SAFETY: the buffer lives in `ep.pool` (never resized) until the
                // endpoint is closed; the context is kept in `inflight` if posted.
                let rc = unsafe {
                    hpc_ofi_trecv(
                        e,
                        b.as_mut_ptr().cast(),
                        b.len(),
                        u64::MAX,
                        0,
                        EAGER_IGNORE,
                        key as *mut c_void,
                    )
                };
                (rc, "fi_trecv")
            }
            Later::Incoming { peer, seq, buf } => {
                let tag = data_tag(*peer, *seq);
                // SAFETY: the vector's heap memory moves into `inflight` with it (its
                // data does not move) and stays there until the completion.
                let rc = unsafe {
                    hpc_ofi_trecv(
                        e,
                        buf.as_ptr() as *mut c_void,
                        buf.len(),
                        ep.fi_addr[*peer],
                        tag,
                        0,
                        key as *mut c_void,
                    )
                };
                (rc, "fi_trecv")
            }
            Later::Send {
                peer,
                tag,
                ptr,
                len,
                ..
            } => {
                // SAFETY: `ptr` points into the vector owned by `what`, which moves
                // into `inflight` (its heap memory does not move) until the completion.
                let rc = unsafe {
                    hpc_ofi_tsend(
                        e,
                        ptr.cast(),
                        *len,
                        ep.fi_addr[*peer],
                        *tag,
                        key as *mut c_void,
                    )
                };
                (rc, "fi_tsend")
            }
            Later::Write {
                peer,
                src,
                from,
                len,
                addr,
                key: mr_key,
                ..
            } => {
                // SAFETY: `src` points into the put's source, owned by `ep.puts` until
                // every part completed; `from + len` is within it (checked by `put`).
                let rc = unsafe {
                    hpc_ofi_write(
                        e,
                        src.add(*from).cast(),
                        *len,
                        ep.fi_addr[*peer],
                        addr + *from as u64,
                        *mr_key,
                        key as *mut c_void,
                    )
                };
                (rc, "fi_write")
            }
            Later::Read {
                peer,
                ptr,
                len,
                addr,
                key: mr_key,
                ..
            } => {
                // SAFETY: the destination (vector or region) is owned by `sink`, which
                // moves into `inflight` until the completion, valid for `len` bytes.
                let rc = unsafe {
                    hpc_ofi_read(
                        e,
                        ptr.cast(),
                        *len,
                        ep.fi_addr[*peer],
                        *addr,
                        *mr_key,
                        key as *mut c_void,
                    )
                };
                (rc, "fi_read")
            }
        };
        if rc != 0 {
            return self.refused(ep, l, call, rc as i64);
        }
        if let Some(peer) = l.peer() {
            ep.unresolved.resolved(peer);
        }
        let what = match l {
            Later::Pool(i) => InFlight::Pool(i),
            Later::Incoming { peer, seq, buf } => InFlight::Incoming { peer, seq, buf },
            Later::Send { what, .. } => what,
            Later::Write { op, peer, .. } => InFlight::Put { op, peer },
            Later::Read { op, peer, sink, .. } => InFlight::Get { op, peer, sink },
        };
        ep.inflight.insert(key, (ctx, what));
        Posted::Done
    }

    /// What to do with a post the provider refused with `rc` (see [`Refusal`]).
    fn refused(&self, ep: &mut Ep, l: Later, call: &'static str, rc: i64) -> Posted {
        let e = ofi_error(call, rc);
        match (refusal(e.code, l.peer().is_some()), l.peer()) {
            (Refusal::Again, _) => Posted::Again(l),
            (Refusal::Unresolved, Some(peer)) => {
                if ep.unresolved.since[peer].is_none() {
                    tracing::debug!(peer, call, error = %e, "ofi: peer's address not usable yet; posting again");
                }
                if ep.unresolved.refused(peer, Instant::now(), self.timeout) {
                    return Posted::Again(l);
                }
                let why = format!(
                    "the {} provider could not use rank {peer}'s address for {:?} ({call} kept \
                     answering \"{}\")",
                    self.provider, self.timeout, e.text
                );
                Posted::Failed(l, unavailable(why, Some(e)))
            }
            _ => Posted::Failed(l, Error::library(call, e)),
        }
    }

    /// Delivers, in arrival order, the messages of `peer` that are complete. Only
    /// vectors move here, so it runs under the lock (which keeps the order).
    fn deliver_ready(&self, ep: &mut Ep, peer: usize) {
        while matches!(ep.order[peer].front(), Some(Slot::Ready(..))) {
            if let Some(Slot::Ready(tag, data)) = ep.order[peer].pop_front() {
                self.shared.deliver(peer, tag, data);
            }
        }
    }

    /// One part of a put completed (with `error`, if it failed).
    fn put_part_done(&self, ep: &mut Ep, op: OpId, error: Option<Error>, done: &mut Vec<Done>) {
        let Some(st) = ep.puts.get_mut(&op.0) else {
            return;
        };
        st.parts_left -= 1;
        if st.error.is_none() {
            st.error = error;
        }
        if st.parts_left == 1 && st.error.is_none() {
            if let Some((peer, addr, key)) = st.tail.take() {
                // The body is in place: now the last 8 bytes.
                let (src, from) = (st.src.as_ptr(), st.src.len() - 8);
                let l = Later::Write {
                    op,
                    peer,
                    src,
                    from,
                    len: 8,
                    addr,
                    key,
                };
                self.later(ep, l, done);
            }
        }
        let st = ep.puts.get_mut(&op.0).expect("present");
        if st.parts_left == 0 {
            let st = ep.puts.remove(&op.0).expect("present");
            let res = match st.error {
                Some(e) => {
                    done.push(Done::Drop(Box::new(st.src)));
                    Err(e)
                }
                None => Ok(st.src.into_payload()),
            };
            done.push(Done::Complete(op, res));
        }
    }

    /// Posts (or queues) `fi_write` of `src[from..from + len]` to `addr + from` at
    /// the target; a refusal comes back as the error and nothing is in flight.
    #[allow(clippy::too_many_arguments)]
    fn post_write(
        &self,
        ep: &mut Ep,
        op: OpId,
        peer: usize,
        src: *const u8,
        from: usize,
        len: usize,
        addr: u64,
        key: u64,
    ) -> Result<()> {
        let l = Later::Write {
            op,
            peer,
            src,
            from,
            len,
            addr,
            key,
        };
        self.submit(ep, l).map_err(|(_, e)| e)
    }

    /// Hands completions to the transport (outside the lock).
    fn report(&self, done: Vec<Done>) {
        for d in done {
            match d {
                Done::Complete(op, res) => self.shared.complete(op, res),
                Done::Lost(peer, e) => {
                    let cause = format!("libfabric ({}) reported {e}", self.provider);
                    self.shared.fail_peer_by(peer, &cause, Some(e));
                }
                Done::LostWith(peer, cause) => self.shared.fail_peer(peer, &cause),
                Done::Drop(x) => drop(x),
            }
        }
    }

    /// Reads completions, then reports them (the caller's progress).
    fn progress(&self) {
        let mut ep = self.lock();
        let mut done = Vec::new();
        self.drain(&mut ep, &mut done);
        done.append(&mut ep.deferred);
        drop(ep);
        self.report(done);
    }

    /// Runs `f` under the lock and reports whatever it deferred.
    fn with_ep<T>(&self, f: impl FnOnce(&mut Ep) -> T) -> T {
        let mut ep = self.lock();
        let out = f(&mut ep);
        let done = std::mem::take(&mut ep.deferred);
        drop(ep);
        self.report(done);
        out
    }

    fn check_key(&self, key: &RemoteKey) -> Result<&Peer> {
        let r = key.rank();
        let p = self
            .peers
            .get(r)
            .and_then(Option::as_ref)
            .ok_or_else(|| Error::unavailable("ofi", format!("rank {r} is not an ofi peer")))?;
        if !key.is_intact() {
            return Err(Error::BadKey(format!(
                "the key of region {} of rank {r} was altered (its checksum does not match)",
                key.id
            )));
        }
        if key.pid != p.pid {
            return Err(Error::BadKey(format!(
                "the key names process {} but rank {r} is process {} (a key of another job?)",
                key.pid, p.pid
            )));
        }
        if key.fkey == 0 {
            return Err(Error::BadKey(format!(
                "region {} of rank {r} is not registered with libfabric",
                key.id
            )));
        }
        Ok(p)
    }

    /// The target address of `offset` in `key`'s region.
    fn remote_addr(&self, key: &RemoteKey, offset: u64) -> u64 {
        if self.virt_addr {
            key.addr + offset
        } else {
            offset
        }
    }

    /// Posts (or queues behind what waits for `peer`) a tagged send of `frame`;
    /// `data`, the user's buffer, is handed back when it completes.
    fn send_frame(
        &self,
        ep: &mut Ep,
        peer: usize,
        frame: Vec<u8>,
        op: Option<OpId>,
        data: Option<Vec<u8>>,
    ) -> Result<()> {
        let (ptr, len) = (frame.as_ptr(), frame.len());
        let l = Later::Send {
            peer,
            tag: eager_tag(self.me),
            ptr,
            len,
            what: InFlight::Frame {
                op,
                peer,
                _frame: frame,
                data,
            },
        };
        self.submit(ep, l).map_err(|(_, e)| e)
    }
}

fn frame(h: MsgHeader, data: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(HEADER_BYTES + data.len());
    f.extend_from_slice(&h.encode());
    f.extend_from_slice(data);
    f
}

impl Backend for Ofi {
    fn kind(&self) -> BackendKind {
        BackendKind::Ofi
    }

    fn register(&self, region: &Region) -> Result<()> {
        let inner = &self.inner;
        let requested = region.inner.key & inner.key_mask;
        let (mr, key) = inner.with_ep(|ep| {
            let mut mr = std::ptr::null_mut();
            let mut key = 0u64;
            let mut what: *const c_char = std::ptr::null();
            // SAFETY: the region's memory is mapped for `len` bytes as long as the
            // registration lives: it is closed before the memory is unmapped (the
            // region's drop hook below, or `deregister`, or this backend's drop).
            let rc = unsafe {
                hpc_ofi_mr_reg(
                    ep.ep.0,
                    region.as_ptr().cast(),
                    region.len().max(1),
                    requested,
                    &mut mr,
                    &mut key,
                    &mut what,
                )
            };
            if rc != 0 {
                let call = if cstr(what) == "fi_mr_reg" {
                    "fi_mr_reg"
                } else {
                    "fi_mr_bind"
                };
                return Err(Error::library(call, ofi_error(call, rc as i64)));
            }
            ep.mrs.retain(|_, m| m.region.strong_count() > 0);
            ep.mrs.insert(
                region.id(),
                Mr {
                    mr,
                    region: Arc::downgrade(&region.inner),
                },
            );
            Ok((mr, key))
        })?;
        let _ = mr;
        if !inner.prov_key && key != requested {
            tracing::debug!(requested, key, "ofi: the provider chose another key");
        }
        region.inner.fkey.store(key.max(1), Ordering::Relaxed);
        let weak = Arc::downgrade(inner);
        let id = region.id();
        region
            .inner
            .on_drop
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Box::new(move || {
                if let Some(inner) = weak.upgrade() {
                    inner.close_mr(id);
                }
            }));
        Ok(())
    }

    fn deregister(&self, region: &Region) {
        self.inner.close_mr(region.id());
    }

    fn put(&self, op: OpId, src: Source, dst: &RemoteKey, offset: u64) -> Result<()> {
        let inner = &self.inner;
        check_bounds(offset, src.len() as u64, dst.len)?;
        inner.check_key(dst)?;
        let len = src.len();
        if len as u64 > inner.max_msg {
            return Err(Error::InvalidArgument(format!(
                "a put of {len} bytes exceeds the {} provider's {} bytes",
                inner.provider, inner.max_msg
            )));
        }
        if len == 0 {
            inner.shared.complete(op, Ok(src.into_payload()));
            return Ok(());
        }
        let addr = inner.remote_addr(dst, offset);
        let key = dst.fkey;
        let peer = dst.rank();
        // The last 8 bytes go last when they are 8-aligned at the target.
        let split = len >= 16 && (dst.addr + offset + len as u64 - 8) % 8 == 0;
        let ordered = (len - 8) as u64 <= inner.waw_size;
        inner.with_ep(|ep| {
            let ptr = src.as_ptr();
            ep.puts.insert(
                op.0,
                PutState {
                    src,
                    parts_left: if split { 2 } else { 1 },
                    error: None,
                    tail: (split && !ordered).then_some((peer, addr, key)),
                },
            );
            let body = if split { len - 8 } else { len };
            if let Err(e) = inner.post_write(ep, op, peer, ptr, 0, body, addr, key) {
                // Nothing of it is in flight.
                if let Some(st) = ep.puts.remove(&op.0) {
                    ep.deferred.push(Done::Drop(Box::new(st.src)));
                }
                return Err(e);
            }
            if split && ordered {
                if let Err(e) = inner.post_write(ep, op, peer, ptr, len - 8, 8, addr, key) {
                    // The body is in flight: its completion ends the put with this error.
                    if let Some(st) = ep.puts.get_mut(&op.0) {
                        st.parts_left -= 1;
                        st.error = Some(e);
                    }
                }
            }
            Ok(())
        })
    }

    fn get(&self, op: OpId, src: &RemoteKey, offset: u64, dst: Sink) -> Result<()> {
        let inner = &self.inner;
        check_bounds(offset, dst.len() as u64, src.len)?;
        inner.check_key(src)?;
        let len = dst.len();
        if len == 0 {
            let payload = dst.fill(|_, _| Ok(()))?;
            inner.shared.complete(op, Ok(payload));
            return Ok(());
        }
        let (sink, ptr) = match dst {
            Sink::Bytes(n) => {
                let mut v = vec![0u8; n];
                let p = v.as_mut_ptr();
                (GetSink::Bytes(v), p)
            }
            Sink::Region {
                region,
                offset: at,
                len: _,
            } => {
                // SAFETY: `validate` checked at + len <= region length.
                let p = unsafe { region.as_ptr().add(at) };
                (GetSink::Region(region), p)
            }
        };
        let addr = inner.remote_addr(src, offset);
        let key = src.fkey;
        let peer = src.rank();
        inner.with_ep(|ep| {
            let l = Later::Read {
                op,
                peer,
                ptr,
                len,
                addr,
                key,
                sink,
            };
            inner.submit(ep, l).map_err(|(l, e)| {
                // Nothing of it is in flight; a region it holds is dropped outside
                // the lock.
                ep.deferred.push(Done::Drop(Box::new(l)));
                e
            })
        })
    }

    fn send(&self, op: OpId, peer: usize, tag: u64, data: Vec<u8>) -> Result<()> {
        let inner = &self.inner;
        if inner.peers.get(peer).and_then(Option::as_ref).is_none() {
            return Err(Error::unavailable(
                "ofi",
                format!("rank {peer} is not an ofi peer"),
            ));
        }
        if data.len() as u64 > MAX_MESSAGE.min(inner.max_msg) {
            return Err(Error::InvalidArgument(format!(
                "message of {} bytes",
                data.len()
            )));
        }
        inner.with_ep(|ep| {
            if data.len() <= EAGER_MAX {
                let h = MsgHeader {
                    kind: EAGER,
                    seq: 0,
                    tag,
                    len: data.len() as u64,
                };
                let f = frame(h, &data);
                return inner.send_frame(ep, peer, f, Some(op), Some(data));
            }
            let seq = ep.tx_seq[peer];
            ep.tx_seq[peer] = seq.wrapping_add(1) & 0x7fff_ffff;
            let h = MsgHeader {
                kind: RTS,
                seq,
                tag,
                len: data.len() as u64,
            };
            inner.send_frame(ep, peer, h.encode().to_vec(), None, None)?;
            let (ptr, len) = (data.as_ptr(), data.len());
            let l = Later::Send {
                peer,
                tag: data_tag(inner.me, seq),
                ptr,
                len,
                what: InFlight::Data { op, peer, data },
            };
            // The announcement is posted or queued before it, so it cannot fail
            // alone: a refusal here fails the operation as a completion.
            let mut done = Vec::new();
            inner.later(ep, l, &mut done);
            ep.deferred.append(&mut done);
            Ok(())
        })
    }

    fn try_send_now(
        &self,
        peer: usize,
        tag: u64,
        data: Vec<u8>,
    ) -> std::result::Result<Vec<u8>, Vec<u8>> {
        let inner = &self.inner;
        if HEADER_BYTES + data.len() > inner.inject
            || inner.peers.get(peer).and_then(Option::as_ref).is_none()
            || inner.shared.is_lost(peer).is_some()
        {
            return Err(data);
        }
        let h = MsgHeader {
            kind: EAGER,
            seq: 0,
            tag,
            len: data.len() as u64,
        };
        let mut f = [0u8; 256];
        let n = HEADER_BYTES + data.len();
        if n > f.len() {
            return Err(data);
        }
        f[..HEADER_BYTES].copy_from_slice(&h.encode());
        f[HEADER_BYTES..n].copy_from_slice(&data);
        let mut ep = inner.lock();
        if !ep.later_tx[peer].is_empty() {
            // Earlier sends to this peer wait: this one goes behind them.
            drop(ep);
            return Err(data);
        }
        let dest = ep.fi_addr[peer];
        // SAFETY: `f` is readable for `n` bytes; inject copies it before returning.
        let rc =
            unsafe { hpc_ofi_tinject(ep.ep.0, f.as_ptr().cast(), n, dest, eager_tag(inner.me)) };
        let done = std::mem::take(&mut ep.deferred);
        drop(ep);
        inner.report(done);
        if rc == 0 {
            Ok(data)
        } else {
            Err(data)
        }
    }

    fn progress(&self) -> Result<()> {
        let inner = &self.inner;
        inner
            .caller_progress
            .store(inner.epoch.elapsed().as_nanos() as u64, Ordering::Relaxed);
        inner.progress();
        Ok(())
    }

    fn check_peer(&self, peer: usize) -> Result<()> {
        if self.inner.shared.is_lost(peer).is_none() {
            // Deliver what it sent before it went, then look.
            self.inner.progress();
        }
        match self.inner.gone(peer) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn wants_progress(&self) -> bool {
        true
    }
}

impl Inner {
    /// Closes the registration of region `id` (now: its key is stale at once).
    fn close_mr(&self, id: u32) {
        let mr = self.lock().mrs.remove(&id);
        if let Some(m) = mr {
            // SAFETY: a registration made by `register`, closed once (removed above).
            let rc = unsafe { hpc_ofi_mr_close(m.mr) };
            if rc != 0 {
                tracing::warn!(error = %strerror(-rc), "ofi: fi_close(mr)");
            }
        }
    }
}

impl Drop for Ofi {
    fn drop(&mut self) {
        self.inner.closing.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let mut ep = self.inner.lock();
        for (_, m) in ep.mrs.drain() {
            // SAFETY: registrations made by `register`, each closed once; the
            // regions' drop hooks find them gone.
            unsafe { hpc_ofi_mr_close(m.mr) };
        }
        // Close the endpoint before the buffers it may still write into are freed.
        let endpoint = std::mem::replace(&mut ep.ep, Endpoint(std::ptr::null_mut()));
        drop(endpoint);
        let inflight = std::mem::take(&mut ep.inflight);
        let puts = std::mem::take(&mut ep.puts);
        let deferred = std::mem::take(&mut ep.deferred);
        let later = (
            std::mem::take(&mut ep.later_rx),
            std::mem::take(&mut ep.later_tx),
        );
        drop(ep);
        // Buffers (and any regions they hold) go after the lock is released.
        drop(inflight);
        drop(later);
        drop(puts);
        self.inner.report(deferred);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The provider's "address not available" on an operation to a peer is posted
    /// again (it used to fail the operation at once: a put right after the job
    /// started, under load); elsewhere it stays an error.
    #[test]
    fn address_not_available_is_retried_for_posts_to_a_peer() {
        assert_eq!(refusal(FI_EAGAIN, true), Refusal::Again);
        assert_eq!(refusal(FI_EAGAIN, false), Refusal::Again);
        assert_eq!(refusal(FI_EADDRNOTAVAIL, true), Refusal::Unresolved);
        assert_eq!(refusal(FI_EADDRNOTAVAIL, false), Refusal::Fatal);
        assert_eq!(refusal(libc::EINVAL, true), Refusal::Fatal);
        assert_eq!(refusal(libc::ECONNREFUSED, true), Refusal::Fatal);
    }

    /// Retries of an unresolved address last the timeout, counted from the first
    /// refusal since the last success, and no longer.
    #[test]
    fn unresolved_retries_are_bounded_by_the_timeout() {
        let timeout = Duration::from_secs(2);
        let t0 = Instant::now();
        let mut u = Unresolved::new(3);
        assert!(u.refused(1, t0, timeout));
        assert!(u.refused(1, t0 + Duration::from_secs(1), timeout));
        assert!(
            u.refused(2, t0 + Duration::from_secs(2), timeout),
            "per peer"
        );
        assert!(u.refused(1, t0 + timeout, timeout));
        assert!(!u.refused(1, t0 + timeout + Duration::from_millis(1), timeout));
        // After giving up, and after a success, a new refusal starts a new period.
        assert!(u.refused(1, t0 + Duration::from_secs(10), timeout));
        u.resolved(2);
        assert!(u.refused(2, t0 + Duration::from_secs(10), timeout));
        assert!(u.refused(2, t0 + Duration::from_secs(11), timeout));
    }
}
