//! The calls into `shim.c` (libfabric loaded at run time), libfabric's constants,
//! and the owners of what libfabric hands out (`fi_info` lists).

use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::{Arc, Mutex};

use super::*;

#[allow(non_camel_case_types)]
pub(super) type fi_info = c_void;
#[allow(non_camel_case_types)]
pub(super) type hpc_ofi_ep = c_void;
#[allow(non_camel_case_types)]
pub(super) type fid_mr = c_void;

#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct Cqe {
    pub(super) ctx: *mut c_void,
    pub(super) flags: u64,
    pub(super) len: u64,
    pub(super) tag: u64,
}

extern "C" {
    pub(super) fn hpc_ofi_load(err: *mut c_char, errlen: usize) -> i32;
    pub(super) fn hpc_ofi_strerror(err: i32) -> *const c_char;
    pub(super) fn hpc_ofi_getinfo(
        prov: *const c_char,
        caps: u64,
        dc: i32,
        out: *mut *mut fi_info,
    ) -> i32;
    pub(super) fn hpc_ofi_info_next(i: *mut fi_info) -> *mut fi_info;
    pub(super) fn hpc_ofi_info_prov(i: *mut fi_info) -> *const c_char;
    pub(super) fn hpc_ofi_info_fabric(i: *mut fi_info) -> *const c_char;
    pub(super) fn hpc_ofi_info_domain(i: *mut fi_info) -> *const c_char;
    pub(super) fn hpc_ofi_info_mr_mode(i: *mut fi_info) -> u64;
    pub(super) fn hpc_ofi_info_inject(i: *mut fi_info) -> u64;
    pub(super) fn hpc_ofi_info_max_msg(i: *mut fi_info) -> u64;
    pub(super) fn hpc_ofi_info_key_size(i: *mut fi_info) -> u64;
    pub(super) fn hpc_ofi_info_waw_size(i: *mut fi_info) -> u64;
    pub(super) fn hpc_ofi_info_manual_progress(i: *mut fi_info) -> i32;
    pub(super) fn hpc_ofi_freeinfo(i: *mut fi_info);
    pub(super) fn hpc_ofi_open(
        info: *mut fi_info,
        out: *mut *mut hpc_ofi_ep,
        what: *mut *const c_char,
    ) -> i32;
    pub(super) fn hpc_ofi_close(e: *mut hpc_ofi_ep);
    pub(super) fn hpc_ofi_getname(e: *mut hpc_ofi_ep, addr: *mut c_void, len: *mut usize) -> i32;
    pub(super) fn hpc_ofi_av_insert(
        e: *mut hpc_ofi_ep,
        addr: *const c_void,
        fi_addr: *mut u64,
    ) -> i32;
    pub(super) fn hpc_ofi_mr_reg(
        e: *mut hpc_ofi_ep,
        buf: *mut c_void,
        len: usize,
        requested_key: u64,
        mr: *mut *mut fid_mr,
        key: *mut u64,
        what: *mut *const c_char,
    ) -> i32;
    pub(super) fn hpc_ofi_mr_close(mr: *mut fid_mr) -> i32;
    pub(super) fn hpc_ofi_tinject(
        e: *mut hpc_ofi_ep,
        buf: *const c_void,
        len: usize,
        dest: u64,
        tag: u64,
    ) -> isize;
    pub(super) fn hpc_ofi_tsend(
        e: *mut hpc_ofi_ep,
        buf: *const c_void,
        len: usize,
        dest: u64,
        tag: u64,
        ctx: *mut c_void,
    ) -> isize;
    pub(super) fn hpc_ofi_trecv(
        e: *mut hpc_ofi_ep,
        buf: *mut c_void,
        len: usize,
        src: u64,
        tag: u64,
        ignore: u64,
        ctx: *mut c_void,
    ) -> isize;
    pub(super) fn hpc_ofi_write(
        e: *mut hpc_ofi_ep,
        buf: *const c_void,
        len: usize,
        dest: u64,
        addr: u64,
        key: u64,
        ctx: *mut c_void,
    ) -> isize;
    pub(super) fn hpc_ofi_read(
        e: *mut hpc_ofi_ep,
        buf: *mut c_void,
        len: usize,
        src: u64,
        addr: u64,
        key: u64,
        ctx: *mut c_void,
    ) -> isize;
    pub(super) fn hpc_ofi_cq_read(e: *mut hpc_ofi_ep, out: *mut Cqe, n: usize) -> isize;
    pub(super) fn hpc_ofi_cq_readerr(
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
pub(super) const FI_MSG: u64 = 1 << 1;
pub(super) const FI_RMA: u64 = 1 << 2;
pub(super) const FI_TAGGED: u64 = 1 << 3;
pub(super) const FI_READ: u64 = 1 << 8;
pub(super) const FI_WRITE: u64 = 1 << 9;
pub(super) const FI_RECV: u64 = 1 << 10;
pub(super) const FI_SEND: u64 = 1 << 11;
pub(super) const FI_REMOTE_READ: u64 = 1 << 12;
pub(super) const FI_REMOTE_WRITE: u64 = 1 << 13;
pub(super) const FI_MR_VIRT_ADDR: u64 = 1 << 4;
pub(super) const FI_MR_PROV_KEY: u64 = 1 << 6;
pub(super) const FI_EAGAIN: i32 = libc::EAGAIN;
pub(super) const FI_EADDRNOTAVAIL: i32 = libc::EADDRNOTAVAIL;
pub(super) const FI_ENODATA: i32 = libc::ENODATA;
pub(super) const FI_EAVAIL: i32 = 259;
pub(super) const FI_ECANCELED: i32 = libc::ECANCELED;

/// What the transport needs of a provider.
pub(super) const CAPS: u64 = FI_MSG
    | FI_TAGGED
    | FI_RMA
    | FI_READ
    | FI_WRITE
    | FI_RECV
    | FI_SEND
    | FI_REMOTE_READ
    | FI_REMOTE_WRITE;

pub(super) fn strerror(code: i32) -> String {
    // SAFETY: libfabric is loaded (every caller checked `load`); fi_strerror returns a
    // static string.
    unsafe { CStr::from_ptr(hpc_ofi_strerror(code)) }
        .to_string_lossy()
        .into_owned()
}

pub(super) fn ofi_error(call: &'static str, rc: i64) -> OfiError {
    let code = rc.unsigned_abs() as i32;
    OfiError {
        call,
        code,
        text: strerror(code),
    }
}

pub(super) fn unavailable(why: impl Into<String>, source: Option<OfiError>) -> Error {
    Error::Unavailable {
        backend: "ofi",
        why: why.into(),
        source: source.map(|s| Arc::new(s) as crate::error::Cause),
    }
}

/// Loads libfabric (once per process).
pub(super) fn load() -> Result<()> {
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
pub(super) struct InfoList(pub(super) *mut fi_info);

impl Drop for InfoList {
    fn drop(&mut self) {
        // SAFETY: the list came from fi_getinfo and is freed once.
        unsafe { hpc_ofi_freeinfo(self.0) }
    }
}

impl InfoList {
    pub(super) fn get(
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

    pub(super) fn iter(&self) -> impl Iterator<Item = *mut fi_info> + '_ {
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

pub(super) fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: libfabric's names are NUL-terminated strings owned by the info.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}
