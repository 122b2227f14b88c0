//! The verbs runtime (feature `verbs`).
//!
//! **Not run on hardware** (no HCA where this was written): it compiles against
//! rdma-core through `ibverbs-sys`, and only [`probe`]'s `NoDevice` answer has run.
//! Raw `ibverbs-sys` calls are used throughout because the `ibverbs` crate's safe
//! `QueuePair` offers send/receive only and keeps its raw pointer private, so RDMA
//! write/read work requests cannot be posted through it.

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::{Arc, Mutex, Weak};

use ibverbs_sys as ffi;

use super::*;
use crate::completion::{OpId, Payload, Shared, Sink, Source};
use crate::region::{Region, RegionInner};
use crate::{Backend, BackendKind};

pub(super) fn probe() -> Result<DeviceInfo> {
    let list = ibverbs::devices()
        .map_err(|e| Error::NoDevice(format!("listing RDMA devices failed: {e}")))?;
    let dev = list
        .iter()
        .next()
        .ok_or_else(|| Error::NoDevice("no RDMA devices".into()))?;
    let name = dev
        .name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "unknown".into());
    Ok(DeviceInfo { name })
}

const PORT: u8 = 1;
const CQ_DEPTH: i32 = 4096;
const SQ_DEPTH: u32 = 1024;

fn access() -> i32 {
    (ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
        | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
        | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0) as i32
}

fn os_err(call: &'static str) -> Error {
    Error::library(call, std::io::Error::last_os_error())
}

struct Qp {
    qp: *mut ffi::ibv_qp,
    state: QpState,
    psn: u32,
}

/// What an in-flight work request holds until its completion.
enum Held {
    Put(Source, Option<*mut ffi::ibv_mr>),
    Get(Sink, Option<*mut ffi::ibv_mr>),
}

struct Mr(*mut ffi::ibv_mr, Weak<RegionInner>);

/// The verbs backend: one RC queue pair per peer, one completion queue.
pub(crate) struct Verbs {
    shared: Arc<Shared>,
    ctx: *mut ffi::ibv_context,
    pd: *mut ffi::ibv_pd,
    cq: *mut ffi::ibv_cq,
    qps: Vec<Option<Mutex<Qp>>>,
    mrs: Mutex<HashMap<u32, Mr>>,
    held: Mutex<HashMap<u64, (usize, Held)>>,
}

// SAFETY: the verbs objects are thread-safe in libibverbs (posting and polling may be
// called concurrently); our own state is behind mutexes.
unsafe impl Send for Verbs {}
// SAFETY: see `Send`.
unsafe impl Sync for Verbs {}

impl Verbs {
    fn open(shared: Arc<Shared>, device: &DeviceInfo) -> Result<Verbs> {
        let mut n = 0i32;
        // SAFETY: `n` receives the count; the list is freed below.
        let list = unsafe { ffi::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(Error::NoDevice("ibv_get_device_list failed".into()));
        }
        let mut ctx = std::ptr::null_mut();
        for i in 0..n.max(0) as usize {
            // SAFETY: `i < n` entries of the list are valid device pointers.
            let dev = unsafe { *list.add(i) };
            // SAFETY: the device pointer is valid; the name is a C string it owns.
            let name = unsafe { CStr::from_ptr(ffi::ibv_get_device_name(dev)) };
            if name.to_string_lossy() == device.name {
                // SAFETY: a valid device from the list.
                ctx = unsafe { ffi::ibv_open_device(dev) };
                break;
            }
        }
        // SAFETY: the list came from ibv_get_device_list; the opened context stays
        // valid after freeing it.
        unsafe { ffi::ibv_free_device_list(list) };
        if ctx.is_null() {
            return Err(Error::NoDevice(format!("cannot open {}", device.name)));
        }
        // SAFETY: `ctx` is an open context.
        let pd = unsafe { ffi::ibv_alloc_pd(ctx) };
        // SAFETY: as above; no completion channel.
        let cq = unsafe {
            ffi::ibv_create_cq(ctx, CQ_DEPTH, std::ptr::null_mut(), std::ptr::null_mut(), 0)
        };
        if pd.is_null() || cq.is_null() {
            return Err(os_err("ibv_alloc_pd/ibv_create_cq"));
        }
        Ok(Verbs {
            qps: (0..shared.size).map(|_| None).collect(),
            shared,
            ctx,
            pd,
            cq,
            mrs: Mutex::new(HashMap::new()),
            held: Mutex::new(HashMap::new()),
        })
    }

    fn port(&self) -> Result<(u16, ffi::ibv_mtu, [u8; 16])> {
        // SAFETY: ibv_port_attr is plain data; zeroed is a valid value. The library's
        // ibv_query_port writes at most the (older, smaller) compat layout into it.
        let mut attr: ffi::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: valid context and out-pointer.
        let rc = unsafe {
            ffi::ibv_query_port(
                self.ctx,
                PORT,
                (&mut attr as *mut ffi::ibv_port_attr).cast(),
            )
        };
        if rc != 0 {
            return Err(os_err("ibv_query_port"));
        }
        // SAFETY: ibv_gid is plain data.
        let mut gid: ffi::ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: valid context and out-pointer; GID index 0.
        if unsafe { ffi::ibv_query_gid(self.ctx, PORT, 0, &mut gid) } != 0 {
            return Err(os_err("ibv_query_gid"));
        }
        // SAFETY: reading the raw bytes of the union.
        Ok((attr.lid, attr.active_mtu, unsafe { gid.raw }))
    }

    fn create_qp(&self) -> Result<Qp> {
        // SAFETY: plain data, zero is valid for every field (null pointers).
        let mut init: ffi::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = self.cq;
        init.recv_cq = self.cq;
        init.qp_type = ffi::ibv_qp_type::IBV_QPT_RC;
        init.cap.max_send_wr = SQ_DEPTH;
        init.cap.max_recv_wr = 1;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        // SAFETY: valid PD and attributes.
        let qp = unsafe { ffi::ibv_create_qp(self.pd, &mut init) };
        if qp.is_null() {
            return Err(os_err("ibv_create_qp"));
        }
        let mut q = Qp {
            qp,
            state: QpState::Reset,
            psn: Endpoint::random_psn()?,
        };
        // SAFETY: plain data.
        let mut a: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.port_num = PORT;
        a.pkey_index = 0;
        a.qp_access_flags = access() as u32;
        self.modify(&mut q, QpState::Init, a)?;
        Ok(q)
    }

    fn modify(&self, q: &mut Qp, to: QpState, mut a: ffi::ibv_qp_attr) -> Result<()> {
        let (next, mask) = q.state.transition(to)?;
        a.qp_state = match next {
            QpState::Reset => ffi::ibv_qp_state::IBV_QPS_RESET,
            QpState::Init => ffi::ibv_qp_state::IBV_QPS_INIT,
            QpState::Rtr => ffi::ibv_qp_state::IBV_QPS_RTR,
            QpState::Rts => ffi::ibv_qp_state::IBV_QPS_RTS,
            QpState::Error => ffi::ibv_qp_state::IBV_QPS_ERR,
        };
        // SAFETY: valid QP; the mask names exactly the attributes set for this
        // transition (see `QpState::transition`).
        let rc = unsafe { ffi::ibv_modify_qp(q.qp, &mut a, mask as i32) };
        if rc != 0 {
            return Err(Error::library(
                "ibv_modify_qp",
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        q.state = next;
        Ok(())
    }

    fn connect_qp(&self, q: &mut Qp, remote: &Endpoint, mtu: ffi::ibv_mtu) -> Result<()> {
        // SAFETY: plain data.
        let mut a: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.path_mtu = mtu;
        a.dest_qp_num = remote.qpn;
        a.rq_psn = remote.psn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.dlid = remote.lid;
        a.ah_attr.port_num = PORT;
        if remote.lid == 0 {
            // RoCE: route by GID.
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid.raw = remote.gid;
            a.ah_attr.grh.hop_limit = 1;
        }
        self.modify(q, QpState::Rtr, a)?;
        // SAFETY: plain data.
        let mut a: ffi::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = q.psn;
        a.max_rd_atomic = 1;
        self.modify(q, QpState::Rts, a)
    }

    fn reg(&self, ptr: *mut u8, len: usize) -> Result<*mut ffi::ibv_mr> {
        // SAFETY: the caller keeps `ptr..ptr+len` alive until `ibv_dereg_mr`.
        let mr = unsafe { ffi::ibv_reg_mr(self.pd, ptr.cast(), len.max(1), access()) };
        if mr.is_null() {
            return Err(os_err("ibv_reg_mr"));
        }
        Ok(mr)
    }

    fn lkey_of_region(&self, region: &Region) -> Option<u32> {
        let mrs = self.mrs.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: registered MRs stay valid until deregistered in `Drop`/cleanup.
        mrs.get(&region.id()).map(|m| unsafe { (*m.0).lkey })
    }

    fn post(&self, peer: usize, wr: &WorkRequest) -> Result<()> {
        let q = self.qps[peer]
            .as_ref()
            .ok_or_else(|| Error::unavailable("verbs", format!("rank {peer} is not a verbs peer")))?
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !q.state.can_send() {
            return Err(Error::lost(
                peer,
                format!("queue pair in state {:?}", q.state),
                None::<Error>,
            ));
        }
        let mut sge = ffi::ibv_sge {
            addr: wr.local_addr,
            length: wr.len,
            lkey: wr.lkey,
        };
        // SAFETY: plain data; every field is set below or zero (no chaining).
        let mut swr: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
        swr.wr_id = wr.wr_id;
        swr.sg_list = &mut sge;
        swr.num_sge = 1;
        swr.opcode = match wr.opcode {
            Opcode::RdmaWrite => ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE,
            Opcode::RdmaRead => ffi::ibv_wr_opcode::IBV_WR_RDMA_READ,
            Opcode::Send => ffi::ibv_wr_opcode::IBV_WR_SEND,
        };
        swr.send_flags = if wr.signaled {
            ffi::ibv_send_flags::IBV_SEND_SIGNALED.0
        } else {
            0
        };
        swr.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
            remote_addr: wr.remote_addr,
            rkey: wr.rkey,
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: `q.qp` is a valid QP in RTS; its context's ops table is filled by the
        // provider; `swr` and `sge` outlive the call (the HCA copies the WR); the local
        // memory stays registered and alive in `held` until the completion.
        let rc = unsafe {
            let ctx = (*q.qp).context;
            match (*ctx).ops.post_send {
                Some(post) => post(q.qp, &mut swr, &mut bad),
                None => libc::ENOSYS,
            }
        };
        if rc != 0 {
            return Err(Error::library(
                "ibv_post_send",
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        Ok(())
    }

    /// Holds what the one-sided operation `op` to `peer` works on until it completes,
    /// and posts its work request; when the post fails, lets go of it again (its
    /// memory registration too).
    fn post_held(&self, op: OpId, peer: usize, wr: &WorkRequest, held: Held) -> Result<()> {
        let held_now = || self.held.lock().unwrap_or_else(|e| e.into_inner());
        held_now().insert(op.0, (peer, held));
        if let Err(e) = self.post(peer, wr) {
            if let Some((_, Held::Put(_, mr) | Held::Get(_, mr))) = held_now().remove(&op.0) {
                Verbs::dereg(mr);
            }
            return Err(e);
        }
        Ok(())
    }

    fn dereg(mr: Option<*mut ffi::ibv_mr>) {
        if let Some(mr) = mr {
            // SAFETY: an MR we registered for one operation, which has completed.
            unsafe { ffi::ibv_dereg_mr(mr) };
        }
    }
}

impl Backend for Verbs {
    fn kind(&self) -> BackendKind {
        BackendKind::Verbs
    }

    fn register(&self, region: &Region) -> Result<()> {
        let mr = self.reg(region.as_ptr(), region.len())?;
        // SAFETY: a freshly registered MR.
        let rkey = unsafe { (*mr).rkey };
        region
            .inner
            .rkey
            .store(rkey, std::sync::atomic::Ordering::Relaxed);
        let mut mrs = self.mrs.lock().unwrap_or_else(|e| e.into_inner());
        // Deregister the MRs of regions that are gone.
        mrs.retain(|_, m| {
            let live = m.1.strong_count() > 0;
            if !live {
                // SAFETY: the region is gone, so no operation uses this MR.
                unsafe { ffi::ibv_dereg_mr(m.0) };
            }
            live
        });
        mrs.insert(region.id(), Mr(mr, Arc::downgrade(&region.inner)));
        Ok(())
    }

    fn put(&self, op: OpId, src: Source, dst: &RemoteKey, offset: u64) -> Result<()> {
        let peer = dst.rank();
        if src.is_empty() {
            self.shared.complete(op, Ok(src.into_payload()));
            return Ok(());
        }
        let (lkey, own) = match &src {
            Source::Region { region, .. } => match self.lkey_of_region(region) {
                Some(k) => (k, None),
                None => return Err(Error::BadKey("source region not registered".into())),
            },
            Source::Bytes(v) => {
                let mr = self.reg(v.as_ptr() as *mut u8, v.len())?;
                // SAFETY: fresh MR.
                (unsafe { (*mr).lkey }, Some(mr))
            }
        };
        let wr = WorkRequest::rdma(
            op.0,
            true,
            src.as_ptr() as u64,
            lkey,
            dst,
            offset,
            src.len() as u64,
        )?;
        self.post_held(op, peer, &wr, Held::Put(src, own))
    }

    fn get(&self, op: OpId, src: &RemoteKey, offset: u64, dst: Sink) -> Result<()> {
        let peer = src.rank();
        if dst.is_empty() {
            let p = dst.fill(|_, _| Ok(()))?;
            self.shared.complete(op, Ok(p));
            return Ok(());
        }
        // Gets land in a registered staging vector or directly in a region.
        let (dst, addr, lkey, own) = match dst {
            Sink::Region {
                region,
                offset: o,
                len,
            } => {
                let k = self
                    .lkey_of_region(&region)
                    .ok_or_else(|| Error::BadKey("destination region not registered".into()))?;
                // SAFETY: `validate` checked o + len against the region.
                let addr = unsafe { region.as_ptr().add(o) } as u64;
                (
                    Sink::Region {
                        region,
                        offset: o,
                        len,
                    },
                    addr,
                    k,
                    None,
                )
            }
            Sink::Bytes(n) => {
                let staging = self.shared.new_region(n)?;
                let mr = self.reg(staging.as_ptr(), n)?;
                // SAFETY: fresh MR.
                let k = unsafe { (*mr).lkey };
                let addr = staging.as_ptr() as u64;
                (
                    Sink::Region {
                        region: staging,
                        offset: 0,
                        len: n,
                    },
                    addr,
                    k,
                    Some(mr),
                )
            }
        };
        let wr = WorkRequest::rdma(op.0, false, addr, lkey, src, offset, dst.len() as u64)?;
        self.post_held(op, peer, &wr, Held::Get(dst, own))
    }

    fn send(&self, _op: OpId, peer: usize, _tag: u64, _data: Vec<u8>) -> Result<()> {
        // Two-sided messages to verbs peers travel over the TCP backend (see the
        // transport's routing); this backend only does one-sided operations.
        Err(Error::unavailable(
            "verbs",
            format!("two-sided messages to rank {peer} go through tcp"),
        ))
    }

    fn progress(&self) -> Result<()> {
        let mut wcs = [ffi::ibv_wc::default(); 16];
        // SAFETY: valid CQ; the provider's poll_cq writes at most `len` entries.
        let n = unsafe {
            let ctx = (*self.cq).context;
            match (*ctx).ops.poll_cq {
                Some(poll) => poll(self.cq, wcs.len() as i32, wcs.as_mut_ptr()),
                None => -1,
            }
        };
        if n < 0 {
            return Err(Error::Protocol("ibv_poll_cq failed".into()));
        }
        for wc in &wcs[..n as usize] {
            let id = wc.wr_id();
            let held = self
                .held
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
            let Some((peer, held)) = held else { continue };
            let ok = wc.is_valid();
            let res = match held {
                Held::Put(src, mr) => {
                    Verbs::dereg(mr);
                    Ok(src.into_payload())
                }
                Held::Get(sink, mr) => {
                    Verbs::dereg(mr);
                    match (sink, mr.is_some()) {
                        (Sink::Region { region, .. }, true) => Ok(Payload::Bytes(region.to_vec())),
                        (Sink::Region { region, .. }, false) => Ok(Payload::Region(region)),
                        (Sink::Bytes(_), _) => Err(Error::Protocol("unstaged get".into())),
                    }
                }
            };
            if ok {
                self.shared.complete(OpId(id), res);
            } else {
                if let Some(q) = &self.qps[peer] {
                    q.lock().unwrap_or_else(|e| e.into_inner()).state = QpState::Error;
                }
                self.shared.complete(
                    OpId(id),
                    Err(Error::BadKey(format!(
                        "work request to rank {peer} failed (remote access error or lost peer)"
                    ))),
                );
            }
        }
        Ok(())
    }

    fn check_peer(&self, peer: usize) -> Result<()> {
        match self.shared.is_lost(peer) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn wants_progress(&self) -> bool {
        true
    }
}

impl Drop for Verbs {
    fn drop(&mut self) {
        // SAFETY: we own these objects; no operation can be posted any more (we are
        // being dropped) and MRs/QPs are destroyed before the CQ, PD and context.
        unsafe {
            for (_, m) in self.mrs.lock().unwrap_or_else(|e| e.into_inner()).drain() {
                ffi::ibv_dereg_mr(m.0);
            }
            for q in self.qps.iter().flatten() {
                ffi::ibv_destroy_qp(q.lock().unwrap_or_else(|e| e.into_inner()).qp);
            }
            ffi::ibv_destroy_cq(self.cq);
            ffi::ibv_dealloc_pd(self.pd);
            ffi::ibv_close_device(self.ctx);
        }
    }
}

pub(super) fn connect(
    shared: Arc<Shared>,
    world: &hpc_runtime::World,
    peers: &[usize],
    device: Option<DeviceInfo>,
) -> Result<Option<Box<dyn Backend>>> {
    let size = shared.size;
    let me = shared.rank;
    let setup = match (peers.is_empty(), device) {
        (true, _) => Ok(None),
        (false, None) => Err(Error::NoDevice("no RDMA device".into())),
        (false, Some(dev)) => (|| {
            let mut v = Verbs::open(shared.clone(), &dev)?;
            let (lid, mtu, gid) = v.port()?;
            let mut blob = vec![0u8; size * ENDPOINT_BYTES];
            for &p in peers {
                let q = v.create_qp()?;
                // SAFETY: a valid QP we just created.
                let qpn = unsafe { (*q.qp).qp_num };
                let ep = Endpoint {
                    qpn,
                    lid,
                    gid,
                    psn: q.psn,
                };
                blob[p * ENDPOINT_BYTES..(p + 1) * ENDPOINT_BYTES].copy_from_slice(&ep.to_bytes());
                v.qps[p] = Some(Mutex::new(q));
            }
            Ok(Some((v, mtu, blob)))
        })(),
    };
    // Everyone takes part in the exchange, even when setup failed here (an empty blob
    // tells the peers).
    let mine = match &setup {
        Ok(Some((_, _, blob))) => blob.clone(),
        _ => Vec::new(),
    };
    let all = world.allgather(&mine)?;
    let Some((v, mtu, _)) = setup? else {
        return Ok(None);
    };
    for &p in peers {
        let theirs = all[p]
            .get(me * ENDPOINT_BYTES..(me + 1) * ENDPOINT_BYTES)
            .ok_or_else(|| Error::NoDevice(format!("rank {p} could not set up verbs")))?;
        let ep = Endpoint::from_bytes(theirs)?;
        let q = v.qps[p].as_ref().expect("created above");
        let mut q = q.lock().unwrap_or_else(|e| e.into_inner());
        v.connect_qp(&mut q, &ep, mtu)?;
    }
    Ok(Some(Box::new(v)))
}
