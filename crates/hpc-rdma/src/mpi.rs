//! The `mpi` backend (feature `mpi`, `HPC_TRANSPORT=mpi`): the transport over the MPI
//! library's point-to-point messages, so that any fabric the MPI library drives
//! (Slingshot, Omni-Path, EFA, InfiniBand through UCX) carries it.
//!
//! Every operation is one frame: the payload, then the TCP backend's 56-byte header
//! from `wire.rs` (last, so that a received message is delivered without moving it).
//! Frames go with `MPI_Isend` on a private duplicate of the job's communicator under
//! one tag, so frames between a pair arrive in order (MPI's
//! non-overtaking rule) and put/send ordering is the TCP backend's. One-sided
//! operations are emulated: a put is a frame the target copies into its region and
//! acknowledges, a get a request the target answers. The target applies them in its
//! progress: a thread of this backend (`MPI_Improbe` + `MPI_Mrecv`, backing off from
//! polling to 200 µs naps when idle) and every caller waiting on the transport, so a
//! target that computes or sits in a barrier still serves puts.
//!
//! Needs `MPI_THREAD_MULTIPLE` (the runtime asks for it) and a job started by an MPI
//! launcher; otherwise [`Error::Unavailable`]. The payload is copied into the frame
//! (one extra copy against `shm`'s single copy). A rank that dies is the MPI
//! library's business: Open MPI and MPICH abort the job by default, so the peer-death
//! tests of the other backends do not apply.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mpi::ffi;
use mpi::raw::AsRaw;

use crate::completion::{OpId, Payload, Shared, Sink, Source};
use crate::error::{check_bounds, Error, Result};
use crate::region::{copy_in_order, RemoteKey};
use crate::tcp::{accept_get_reply, finish_put, one_sided_header, refusal};
use crate::wire::{status, Header, Kind, HEADER_BYTES};
use crate::{Backend, BackendKind};

/// The MPI tag of every frame on the private communicator.
const TAG: i32 = 0x6872;

struct State {
    /// `MPI_Isend`s in flight with the frames they read.
    sends: Vec<(ffi::MPI_Request, Vec<u8>)>,
    puts: HashMap<u64, Source>,
    gets: HashMap<u64, Sink>,
}

struct Inner {
    shared: Arc<Shared>,
    comm: ffi::MPI_Comm,
    state: Mutex<State>,
    closing: AtomicBool,
}

// SAFETY: the communicator is a plain handle; the library runs with
// MPI_THREAD_MULTIPLE (checked in `Mpi::new`), and this backend's calls are made
// under `state`'s lock. Request handles and frames live in `State`, behind the lock.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

/// The MPI backend.
pub(crate) struct Mpi {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
}

fn unavailable(why: impl Into<String>) -> Error {
    Error::unavailable("mpi", why)
}

/// An MPI error code, as the source of [`Error::Library`].
#[derive(Debug)]
struct MpiCode(i32);

impl std::fmt::Display for MpiCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MPI error {}", self.0)
    }
}

impl std::error::Error for MpiCode {}

fn check(rc: i32, call: &'static str) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::library(call, MpiCode(rc)))
    }
}

fn finalized() -> bool {
    let mut flag = 0;
    // SAFETY: MPI_Finalized may be called at any time, even after MPI_Finalize.
    unsafe { ffi::MPI_Finalized(&mut flag) };
    flag != 0
}

impl Mpi {
    /// Duplicates the job's MPI communicator (collective over the world) and starts
    /// the progress thread.
    pub(crate) fn new(shared: Arc<Shared>, world: &hpc_runtime::World) -> Result<Mpi> {
        let Some(c) = world.mpi_communicator() else {
            return Err(unavailable(
                "the job was not started by an MPI launcher (mpirun, srun --mpi=pmix)",
            ));
        };
        let mut provided = 0;
        // SAFETY: MPI is initialised (the world holds it); writes one int.
        unsafe { ffi::MPI_Query_thread(&mut provided) };
        // SAFETY: reading a constant exported by the MPI shim.
        if provided != unsafe { ffi::RSMPI_THREAD_MULTIPLE } {
            return Err(unavailable(
                "the MPI library did not grant MPI_THREAD_MULTIPLE",
            ));
        }
        let mut comm = std::mem::MaybeUninit::<ffi::MPI_Comm>::uninit();
        // SAFETY: a valid communicator; MPI writes the duplicate into `comm`.
        let rc = unsafe { ffi::MPI_Comm_dup(c.as_raw(), comm.as_mut_ptr()) };
        check(rc, "MPI_Comm_dup")?;
        let inner = Arc::new(Inner {
            shared,
            // SAFETY: initialised by the successful MPI_Comm_dup.
            comm: unsafe { comm.assume_init() },
            state: Mutex::new(State {
                sends: Vec::new(),
                puts: HashMap::new(),
                gets: HashMap::new(),
            }),
            closing: AtomicBool::new(false),
        });
        let i = inner.clone();
        let thread = std::thread::Builder::new()
            .name("hpc-rdma-mpi".into())
            .spawn(move || progress_loop(&i))
            .map_err(|e| Error::Protocol(format!("spawning the MPI progress thread: {e}")))?;
        Ok(Mpi {
            inner,
            thread: Some(thread),
        })
    }
}

fn progress_loop(inner: &Inner) {
    let mut idle = 0u32;
    while !inner.closing.load(Ordering::Acquire) {
        match inner.progress_once() {
            Ok(true) => idle = 0,
            Ok(false) => idle = idle.saturating_add(1),
            Err(e) => {
                tracing::warn!(error = %e, "mpi backend progress");
                idle = idle.saturating_add(1);
            }
        }
        if idle < 64 {
            std::thread::yield_now();
        } else if idle < 2048 {
            std::thread::sleep(Duration::from_micros(20));
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends one frame (header + payload) to `peer`.
    fn isend(&self, st: &mut State, peer: usize, h: &Header, payload: &[u8]) -> Result<()> {
        // Payload first, header last: the receiver truncates the header off and
        // delivers the vector as it came, without moving the payload.
        let mut frame = Vec::with_capacity(payload.len() + HEADER_BYTES);
        frame.extend_from_slice(payload);
        frame.extend_from_slice(&h.encode());
        let len = i32::try_from(frame.len()).map_err(|_| {
            Error::InvalidArgument(format!(
                "{} bytes exceed the mpi backend's 2 GiB frame",
                payload.len()
            ))
        })?;
        let mut req = std::mem::MaybeUninit::<ffi::MPI_Request>::uninit();
        // SAFETY: `frame` stays alive (moved into `st.sends`, its heap buffer does not
        // move) until MPI_Test reports the send complete; the rank is in the
        // communicator (routing only sends to ranks of the world).
        let rc = unsafe {
            ffi::MPI_Isend(
                frame.as_ptr().cast(),
                len,
                ffi::RSMPI_UINT8_T,
                peer as i32,
                TAG,
                self.comm,
                req.as_mut_ptr(),
            )
        };
        check(rc, "MPI_Isend")?;
        // SAFETY: initialised by the successful MPI_Isend.
        st.sends.push((unsafe { req.assume_init() }, frame));
        Ok(())
    }

    /// Retires finished sends and handles every frame that has arrived. Returns
    /// whether anything happened.
    fn progress_once(&self) -> Result<bool> {
        let mut st = self.lock();
        let mut moved = false;
        st.sends.retain_mut(|(req, _)| {
            let mut flag = 0;
            // SAFETY: a live request; MPI_Test frees it when it reports completion.
            unsafe { ffi::MPI_Test(req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
            if flag != 0 {
                moved = true;
            }
            flag == 0
        });
        loop {
            let mut flag = 0;
            let mut msg = std::mem::MaybeUninit::<ffi::MPI_Message>::uninit();
            let mut status = std::mem::MaybeUninit::<ffi::MPI_Status>::uninit();
            // SAFETY: valid communicator; MPI writes the flag, and the message and
            // status when the flag is set.
            let rc = unsafe {
                ffi::MPI_Improbe(
                    ffi::RSMPI_ANY_SOURCE,
                    TAG,
                    self.comm,
                    &mut flag,
                    msg.as_mut_ptr(),
                    status.as_mut_ptr(),
                )
            };
            check(rc, "MPI_Improbe")?;
            if flag == 0 {
                break;
            }
            // SAFETY: set by the matched probe.
            let (mut msg, status) = unsafe { (msg.assume_init(), status.assume_init()) };
            let mut count = 0;
            // SAFETY: a status filled by MPI_Improbe.
            unsafe { ffi::MPI_Get_count(&status, ffi::RSMPI_UINT8_T, &mut count) };
            let mut buf = vec![0u8; count.max(0) as usize];
            // SAFETY: `buf` holds `count` bytes; the matched message is received once.
            let rc = unsafe {
                ffi::MPI_Mrecv(
                    buf.as_mut_ptr().cast(),
                    count,
                    ffi::RSMPI_UINT8_T,
                    &mut msg,
                    ffi::RSMPI_STATUS_IGNORE,
                )
            };
            check(rc, "MPI_Mrecv")?;
            moved = true;
            self.handle(&mut st, status.MPI_SOURCE as usize, buf)?;
        }
        Ok(moved)
    }

    /// Applies one frame from `peer` (the TCP backend's reader, on a byte buffer).
    fn handle(&self, st: &mut State, peer: usize, mut buf: Vec<u8>) -> Result<()> {
        if buf.len() < HEADER_BYTES {
            return Err(Error::Protocol(format!(
                "a {}-byte frame from rank {peer}",
                buf.len()
            )));
        }
        let payload_len = buf.len() - HEADER_BYTES;
        let h = Header::decode(&buf[payload_len..])?;
        let carries = matches!(h.kind, Kind::Send | Kind::Put | Kind::GetReply);
        if carries && h.status == status::OK && payload_len as u64 != h.plen {
            return Err(Error::Protocol(format!(
                "frame from rank {peer} says {} bytes, carries {payload_len}",
                h.plen
            )));
        }
        let shared = &self.shared;
        match h.kind {
            Kind::Send => {
                buf.truncate(payload_len);
                shared.deliver(peer, h.tag, buf);
            }
            Kind::Put => {
                let mut ack = h.answer(Kind::PutAck);
                match shared.lookup(h.region as u32, h.key, h.offset, h.plen) {
                    // SAFETY: `lookup` checked offset + plen against the region, which
                    // it keeps alive; the payload is `plen` bytes (checked above) in a
                    // buffer of ours, which cannot overlap the region. The last 8
                    // bytes go last, as the put guarantee says.
                    Ok(region) => unsafe {
                        copy_in_order(
                            region.as_ptr().add(h.offset as usize),
                            buf.as_ptr(),
                            payload_len,
                        );
                    },
                    Err(e) => ack = refusal(&h, Kind::PutAck, &e),
                }
                self.isend(st, peer, &ack, &[])?;
            }
            Kind::Get => {
                let mut r = h.answer(Kind::GetReply);
                match shared.lookup(h.region as u32, h.key, h.offset, h.tag) {
                    Ok(region) => {
                        r.plen = h.tag;
                        // SAFETY: bounds checked by `lookup`; the region stays alive.
                        let data = unsafe {
                            std::slice::from_raw_parts(
                                region.as_ptr().add(h.offset as usize),
                                h.tag as usize,
                            )
                        };
                        self.isend(st, peer, &r, data)?;
                    }
                    Err(e) => {
                        self.isend(st, peer, &refusal(&h, Kind::GetReply, &e), &[])?;
                    }
                }
            }
            Kind::PutAck => finish_put(shared, &h, st.puts.remove(&h.op))?,
            Kind::GetReply => {
                let Some(sink) = accept_get_reply(shared, &h, st.gets.remove(&h.op))? else {
                    return Ok(());
                };
                // `h.plen` is the sink's length and the payload's (checked above).
                let data = &buf[..payload_len];
                let payload = sink.fill(|ptr, len| {
                    // SAFETY: `Sink::fill` passes a pointer valid for `len` bytes, and
                    // `data` holds exactly `len` (checked above).
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, len) };
                    Ok(())
                })?;
                shared.complete(OpId(h.op), Ok(payload));
            }
            Kind::Bye | Kind::Hello => {
                return Err(Error::Protocol(format!(
                    "unexpected {:?} frame from rank {peer}",
                    h.kind
                )))
            }
        }
        Ok(())
    }
}

impl Backend for Mpi {
    fn kind(&self) -> BackendKind {
        BackendKind::Mpi
    }

    fn put(&self, op: OpId, src: Source, dst: &RemoteKey, offset: u64) -> Result<()> {
        check_bounds(offset, src.len() as u64, dst.len)?;
        let h = one_sided_header(Kind::Put, op, dst, offset, src.len());
        let mut st = self.inner.lock();
        // SAFETY: `src` validated its pointer and length; it is read here, before it
        // moves into the table that keeps it until the ack.
        let data = unsafe { std::slice::from_raw_parts(src.as_ptr(), src.len()) };
        self.inner.isend(&mut st, dst.rank(), &h, data)?;
        st.puts.insert(op.0, src);
        Ok(())
    }

    fn get(&self, op: OpId, src: &RemoteKey, offset: u64, dst: Sink) -> Result<()> {
        check_bounds(offset, dst.len() as u64, src.len)?;
        let h = one_sided_header(Kind::Get, op, src, offset, dst.len());
        let mut st = self.inner.lock();
        self.inner.isend(&mut st, src.rank(), &h, &[])?;
        st.gets.insert(op.0, dst);
        Ok(())
    }

    fn send(&self, op: OpId, peer: usize, tag: u64, data: Vec<u8>) -> Result<()> {
        let mut h = Header::new(Kind::Send);
        h.tag = tag;
        h.plen = data.len() as u64;
        {
            let mut st = self.inner.lock();
            self.inner.isend(&mut st, peer, &h, &data)?;
        }
        // The frame holds a copy: the caller's vector is free again.
        self.inner.shared.complete(op, Ok(Payload::Bytes(data)));
        Ok(())
    }

    fn progress(&self) -> Result<()> {
        self.inner.progress_once().map(|_| ())
    }

    fn check_peer(&self, _peer: usize) -> Result<()> {
        // The MPI library reports (or aborts on) a lost peer itself.
        Ok(())
    }

    fn wants_progress(&self) -> bool {
        true
    }
}

impl Drop for Mpi {
    fn drop(&mut self) {
        self.inner.closing.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if finalized() {
            // MPI is gone: the requests can never be completed; keep their frames.
            std::mem::forget(std::mem::take(&mut self.inner.lock().sends));
            return;
        }
        // Let the frames already handed to MPI go out (bounded), then free the
        // communicator.
        let t0 = Instant::now();
        while !self.inner.lock().sends.is_empty() && t0.elapsed() < Duration::from_secs(5) {
            let _ = self.inner.progress_once();
            std::thread::yield_now();
        }
        let mut st = self.inner.lock();
        if !st.sends.is_empty() {
            tracing::warn!(
                pending = st.sends.len(),
                "mpi backend closed with sends in flight"
            );
            std::mem::forget(std::mem::take(&mut st.sends));
            return;
        }
        drop(st);
        let mut comm = self.inner.comm;
        // SAFETY: the duplicate made in `new`, no longer used by anyone (the thread
        // joined, no sends in flight).
        unsafe { ffi::MPI_Comm_free(&mut comm) };
    }
}
