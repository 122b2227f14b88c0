//! Finding a provider: probing, the diagnosis of one that lacks what the
//! transport needs, opening endpoints and resolving endpoint names.

use std::ffi::c_char;
use std::sync::Mutex;

use super::ffi::*;
use super::*;

pub(super) fn describe(i: *mut fi_info) -> ProviderInfo {
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
pub(super) struct Endpoint(pub(super) *mut hpc_ofi_ep);

// SAFETY: the endpoint's libfabric objects are used by one owner at a time (the
// `PROBED` lock, then the `Inner::ep` lock: FI_THREAD_DOMAIN); moving the handle to
// another thread moves that ownership with it.
unsafe impl Send for Endpoint {}

/// The endpoint that [`probe`] opened to check that the named provider opens one,
/// with the provider it is of: [`connect`] serves through it rather than open a
/// second (opening one costs 0.1-0.2 s with `tcp;ofi_rxm` here, on top of
/// libfabric's own start-up, see the book's transport chapter). Taken by the next
/// `connect`, which drops one that does not match its provider.
pub(super) static PROBED: Mutex<Option<(ProviderInfo, Endpoint)>> = Mutex::new(None);

impl Drop for Endpoint {
    fn drop(&mut self) {
        // SAFETY: opened by hpc_ofi_open, closed once; memory registrations were
        // closed before (see `Ofi`'s drop).
        unsafe { hpc_ofi_close(self.0) }
    }
}

pub(super) fn open(i: *mut fi_info) -> Result<Endpoint> {
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
pub(super) fn diagnose(name: &str, caps: u64) -> String {
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
pub(super) fn info_for(p: &ProviderInfo) -> Result<(InfoList, *mut fi_info)> {
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

pub(super) fn getname(ep: &Endpoint) -> Result<Vec<u8>> {
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

pub(super) fn av_insert(ep: &Endpoint, addr: &[u8]) -> std::result::Result<u64, String> {
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
pub(super) fn padded(addr: &[u8], own_len: usize) -> Vec<u8> {
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
