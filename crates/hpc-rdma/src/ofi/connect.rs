//! Connecting: opening this rank's endpoint, exchanging endpoint names through the
//! runtime, inserting them, and building the backend on them. [`connect`] runs
//! these steps in order; each is a function of its own.

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hpc_runtime::World;

use super::backend::{Inner, Ofi};
use super::ffi::*;
use super::ops::{Ep, Peer, Unresolved};
use super::progress::progress_thread;
use super::provider::{av_insert, getname, info_for, open, padded, probe, Endpoint, PROBED};
use super::{provider_from, PeerEntry, ProviderInfo, EAGER_MAX, HEADER_BYTES, POOL};
use crate::completion::Shared;
use crate::error::Result;
use crate::Backend;

/// A pidfd of a peer on this node (None where the kernel has no pidfd_open, or the
/// process is gone already).
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

/// This rank's side before the exchange: the provider, its `fi_info` (an entry of
/// the list), the open endpoint and its name.
struct Local {
    provider: ProviderInfo,
    list: InfoList,
    info: *mut fi_info,
    ep: Endpoint,
    name: Vec<u8>,
}

/// What the provider's `fi_info` says that the backend uses.
struct Attrs {
    mr_mode: u64,
    inject: usize,
    max_msg: u64,
    key_size: u64,
    waw_size: u64,
    /// Bit 0: manual data progress; bit 1: manual control progress.
    manual: i32,
}

/// Where each rank's endpoint is, and what is known of each peer.
struct Addressed {
    fi_addr: Vec<u64>,
    peers: Vec<Option<Peer>>,
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
    let local = if peers.is_empty() {
        Ok(None)
    } else {
        open_local(provider, probed).map(Some)
    };
    let all = world.allgather(&own_entry(&local).encode())?;
    let Some(local) = local? else {
        return Ok(None);
    };
    let addressed = insert_peers(world, me, shared.size, peers, &all, &local)?;
    // SAFETY: `info` is an entry of the live `list`.
    let attrs = unsafe { read_attrs(local.info) };
    let Local {
        provider: p,
        list,
        ep,
        ..
    } = local;
    drop(list);
    let inner = Arc::new(new_inner(shared, world, &p, ep, addressed, &attrs));
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
        manual_data_progress = attrs.manual & 1 != 0,
        manual_control_progress = attrs.manual & 2 != 0,
        "ofi endpoint"
    );
    // A provider with manual progress moves a peer's puts and gets into our memory
    // only while we call into it: a thread does when no caller does. One that
    // progresses by itself (hardware offload) needs none.
    let thread = if attrs.manual != 0 {
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

/// Loads libfabric, picks the provider (`provider`, else the environment's, else
/// the first that fits) and opens this rank's endpoint: the probe's where it is of
/// the same provider, fabric and domain.
fn open_local(
    provider: Option<ProviderInfo>,
    probed: Option<(ProviderInfo, Endpoint)>,
) -> Result<Local> {
    load()?;
    let p = match provider {
        Some(p) => p,
        None => probe(provider_from(|k| std::env::var(k).ok()).as_deref(), false)?,
    };
    let (list, info) = info_for(&p)?;
    let same = |q: &ProviderInfo| {
        (&q.provider, &q.fabric, &q.domain) == (&p.provider, &p.fabric, &p.domain)
    };
    let ep = match probed {
        Some((q, ep)) if same(&q) => ep,
        _ => open(info)?,
    };
    let name = getname(&ep)?;
    Ok(Local {
        provider: p,
        list,
        info,
        ep,
        name,
    })
}

/// The entry this rank publishes: its endpoint, or an empty one where it has none
/// (no peers, or setting up failed: the error is returned after the exchange).
fn own_entry(local: &Result<Option<Local>>) -> PeerEntry {
    match local {
        Ok(Some(l)) => PeerEntry {
            pid: std::process::id(),
            provider: l.provider.provider.clone(),
            addr: l.name.clone(),
        },
        _ => PeerEntry {
            pid: std::process::id(),
            provider: String::new(),
            addr: Vec::new(),
        },
    }
}

/// Checks every peer's entry (and this rank's own) and inserts it into the address
/// vector; a peer on this node is watched through a pidfd.
fn insert_peers(
    world: &World,
    me: usize,
    size: usize,
    peers: &[usize],
    all: &[Vec<u8>],
    local: &Local,
) -> Result<Addressed> {
    let p = &local.provider;
    let mut fi_addr = vec![u64::MAX; size];
    let mut pinfo: Vec<Option<Peer>> = (0..size).map(|_| None).collect();
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
                    "rank {r} uses provider {} and rank {me} {}: set {} alike on every rank",
                    e.provider,
                    p.provider,
                    hpc_runtime::env::OFI_PROVIDER
                ),
                None,
            ));
        }
        fi_addr[r] = av_insert(&local.ep, &padded(&e.addr, local.name.len())).map_err(|why| {
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
    Ok(Addressed {
        fi_addr,
        peers: pinfo,
    })
}

/// Reads the provider's attributes.
///
/// # Safety
/// `info` is an entry of a live `fi_info` list.
unsafe fn read_attrs(info: *mut fi_info) -> Attrs {
    // SAFETY: the caller's promise.
    unsafe {
        Attrs {
            mr_mode: hpc_ofi_info_mr_mode(info),
            inject: hpc_ofi_info_inject(info) as usize,
            max_msg: hpc_ofi_info_max_msg(info),
            key_size: hpc_ofi_info_key_size(info),
            waw_size: hpc_ofi_info_waw_size(info),
            manual: hpc_ofi_info_manual_progress(info),
        }
    }
}

/// The backend's state on the connected endpoint (no receive posted yet).
fn new_inner(
    shared: Arc<Shared>,
    world: &World,
    p: &ProviderInfo,
    ep: Endpoint,
    addressed: Addressed,
    attrs: &Attrs,
) -> Inner {
    let size = shared.size;
    Inner {
        provider: p.provider.clone(),
        ep: Mutex::new(Ep {
            ep,
            fi_addr: addressed.fi_addr,
            inflight: HashMap::new(),
            pool: Vec::new(),
            puts: HashMap::new(),
            mrs: HashMap::new(),
            order: (0..size).map(|_| VecDeque::new()).collect(),
            tx_seq: vec![0; size],
            deferred: Vec::new(),
            later_rx: VecDeque::new(),
            later_tx: (0..size).map(|_| VecDeque::new()).collect(),
            unresolved: Unresolved::new(size),
        }),
        peers: addressed.peers,
        me: shared.rank,
        // libfabric 1.17's shm provider loses or reorders injected tagged messages
        // that arrive before their receive is posted (seen in the conformance
        // suite with few pre-posted buffers): no inject there.
        inject: if p.provider.split(';').next() == Some("shm") {
            0
        } else {
            attrs.inject
        },
        max_msg: attrs.max_msg,
        virt_addr: attrs.mr_mode & FI_MR_VIRT_ADDR != 0,
        prov_key: attrs.mr_mode & FI_MR_PROV_KEY != 0,
        key_mask: if attrs.key_size >= 8 {
            u64::MAX
        } else {
            (1u64 << (8 * attrs.key_size)) - 1
        },
        waw_size: attrs.waw_size,
        closing: AtomicBool::new(false),
        timeout: world.timeout(),
        caller_progress: AtomicU64::new(0),
        epoch: Instant::now(),
        shared,
    }
}
