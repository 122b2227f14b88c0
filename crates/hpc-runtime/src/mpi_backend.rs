//! Bootstrap through an MPI library (feature `mpi`).
//!
//! The byte-level collectives are built from non-blocking point-to-point messages on a
//! private duplicate of `MPI_COMM_WORLD`, polled against a deadline, so that a peer that
//! died or hangs gives an [`Error::Timeout`] naming it instead of blocking forever (a
//! blocking `MPI_Allgather` cannot be interrupted). They carry bootstrap data only, so
//! the O(size) messages per rank do not matter.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mpi::environment::{Threading, Universe};
use mpi::point_to_point::{Destination, Source};
use mpi::request::{Request, StaticScope};
use mpi::topology::{Communicator, SimpleCommunicator};

use crate::error::{Error, Result};

const TAG_LEN: i32 = 0x4850; // "HP"
const TAG_DATA: i32 = 0x4851;

pub(crate) struct MpiBackend {
    world: ManuallyDrop<SimpleCommunicator>,
    boot: ManuallyDrop<SimpleCommunicator>,
    /// A collective failed: a peer is lost, so `MPI_Finalize` (which synchronises with
    /// every rank) would block forever. Drop then skips it and leaves the job's end to
    /// the launcher, which sees this rank exit without finalizing.
    failed: AtomicBool,
    /// Serialises our own calls on `boot`.
    lock: Mutex<()>,
    rank: usize,
    size: usize,
    timeout: Duration,
    library: String,
    threading: Threading,
    // Dropped last: finalizes MPI after the communicators are freed.
    universe: ManuallyDrop<Universe>,
}

impl Drop for MpiBackend {
    fn drop(&mut self) {
        if self.failed.load(Ordering::SeqCst) {
            tracing::warn!(
                "skipping MPI_Finalize after a failed collective (it would wait for the lost \
                 rank forever); the launcher ends the job when this rank exits"
            );
            return;
        }
        // MPI_Finalize synchronises with every rank: a rank lost after the last
        // collective (killed, or failed outside MPI) would leave it waiting forever
        // where the launcher does not end the job. Bounded like MPI_Init.
        let done = watchdog("MPI_Finalize", FINALIZE_STUCK, init_limit(self.timeout));
        // SAFETY: each field is dropped exactly once, here, communicators before the
        // universe (MPI_Comm_free must precede MPI_Finalize), and never used again.
        unsafe {
            ManuallyDrop::drop(&mut self.boot);
            ManuallyDrop::drop(&mut self.world);
            ManuallyDrop::drop(&mut self.universe);
        }
        let _ = done.send(());
    }
}

// SAFETY: MPI handles are plain process-wide identifiers. MPI was initialised with the
// highest thread level it grants (we ask for `Multiple`; a lower grant is logged), and
// every call this type makes on its private communicator is serialised by `lock`, which
// satisfies `MPI_THREAD_SERIALIZED`. The world communicator handed to users through
// `World::mpi_communicator` follows the thread level that MPI reported.
unsafe impl Send for MpiBackend {}
// SAFETY: see `Send`; shared access goes through `lock`.
unsafe impl Sync for MpiBackend {}

/// A heap buffer whose ownership is lent to MPI for one non-blocking operation.
///
/// Invariant: `ptr` comes from `Box::into_raw` and is referenced by at most one
/// outstanding MPI request. It is freed only after that request completed; if the
/// request is abandoned (timeout), the buffer is leaked on purpose, because MPI may
/// still write into it.
struct Lent {
    ptr: *mut [u8],
}

impl Lent {
    fn new(bytes: Vec<u8>) -> Lent {
        Lent {
            ptr: Box::into_raw(bytes.into_boxed_slice()),
        }
    }
    fn zeroed(len: usize) -> Lent {
        Lent::new(vec![0u8; len])
    }
    /// The buffer as MPI sees it.
    ///
    /// # Safety
    /// Call at most once per `Lent`, and do not call `take` while the request built on
    /// the returned reference is outstanding.
    unsafe fn as_static(&mut self) -> &'static mut [u8] {
        // SAFETY: `ptr` is a live allocation from `Box::into_raw` (invariant), and the
        // caller promises this is the only reference handed out.
        unsafe { &mut *self.ptr }
    }
    /// Reclaims the bytes.
    ///
    /// # Safety
    /// The request that used the buffer (if any) has completed.
    unsafe fn take(self) -> Vec<u8> {
        // SAFETY: completed request => no one else references the allocation.
        unsafe { Box::from_raw(self.ptr) }.into_vec()
    }
}

type Req = Request<'static, [u8], StaticScope>;

/// How long MPI_Init may take before the process gives up: twice the runtime's
/// timeout, at least a minute (large jobs start slowly; raise `HPC_TIMEOUT` for them).
fn init_limit(timeout: Duration) -> Duration {
    timeout.saturating_mul(2).max(Duration::from_secs(60))
}

/// Why MPI_Init may not return, for the watchdog's message.
const INIT_STUCK: &str = "the launcher's process-management server is probably unreachable \
     from this process (srun without --mpi=pmix, or a container that hides the PMIx \
     server's files, e.g. apptainer --contain); `hpc doctor` run the same way names the cause";

/// Why MPI_Finalize may not return, for the watchdog's message.
const FINALIZE_STUCK: &str = "MPI_Finalize waits for every rank, so a rank of this job \
     probably ended without finalizing (it failed or was killed) and the launcher did not \
     end the job";

/// Starts a watchdog over a blocking MPI call (`call`, e.g. "MPI_Init"): unless the
/// returned sender is used (or dropped) within `limit`, it writes `why` to stderr and
/// ends the process with exit status 70 (`EX_SOFTWARE`). `_exit`, not `exit`: the
/// thread stuck in MPI may hold locks that the MPI library's exit handlers would wait
/// for.
fn watchdog(call: &'static str, why: &'static str, limit: Duration) -> std::sync::mpsc::Sender<()> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("hpc-mpi-watchdog".into())
        .spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                let msg = format!(
                    "hpc-runtime: {call} did not return within {limit:?}: {why}. \
                     {} raises the limit (twice its value, at least 60 s).",
                    crate::env::TIMEOUT
                );
                tracing::error!("{msg}");
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "{msg}");
                // SAFETY: `_exit` ends the process at once; nothing of this process is
                // used afterwards.
                unsafe { libc::_exit(70) };
            }
        });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "no watchdog for {call}");
    }
    tx
}

impl MpiBackend {
    pub(crate) fn init(timeout: Duration) -> Result<MpiBackend> {
        // MPI_Init cannot be interrupted, and where the launcher's process-management
        // server is unreachable it may wait forever (Open MPI under `srun` with the
        // PMIx files hidden by a container's --contain, say). A watchdog ends such a
        // process with a message instead of a silent hang.
        // The watchdog also covers the first collective, MPI_Comm_dup below: where the
        // PMIx server's shared memory is hidden, MPI_Init can return after printing
        // its errors and the duplicate then spins for ever (seen under
        // `srun --mpi=pmix apptainer exec --contain`).
        let done = watchdog(
            "MPI_Init (or MPI_Comm_dup after it)",
            INIT_STUCK,
            init_limit(timeout),
        );
        let init = mpi::initialize_with_threading(Threading::Multiple);
        let (universe, threading) = init
            .ok_or_else(|| Error::Bootstrap("MPI is already initialised in this process".into()))?;
        if threading != Threading::Multiple {
            tracing::warn!(
                granted = ?threading,
                "MPI refused MPI_THREAD_MULTIPLE; calls from several threads will be serialised"
            );
        }
        let world = universe.world();
        let boot = world.duplicate();
        let _ = done.send(());
        let library = mpi::environment::library_version()
            .ok()
            .and_then(|v| {
                v.lines()
                    .next()
                    .and_then(|l| l.split(',').next())
                    .map(|l| l.trim().to_string())
            })
            .unwrap_or_else(|| "unknown MPI".into());
        Ok(MpiBackend {
            rank: world.rank() as usize,
            size: world.size() as usize,
            world: ManuallyDrop::new(world),
            boot: ManuallyDrop::new(boot),
            failed: AtomicBool::new(false),
            lock: Mutex::new(()),
            timeout,
            library,
            threading,
            universe: ManuallyDrop::new(universe),
        })
    }

    pub(crate) fn rank(&self) -> usize {
        self.rank
    }
    pub(crate) fn size(&self) -> usize {
        self.size
    }
    pub(crate) fn library(&self) -> &str {
        &self.library
    }
    pub(crate) fn threading(&self) -> &'static str {
        match self.threading {
            Threading::Single => "single",
            Threading::Funneled => "funneled",
            Threading::Serialized => "serialized",
            Threading::Multiple => "multiple",
        }
    }
    pub(crate) fn world(&self) -> &SimpleCommunicator {
        &self.world
    }

    /// Polls requests until all complete or the deadline passes. `owner[i]` is the peer
    /// of request `i`. On timeout the unfinished requests are abandoned (their buffers
    /// leaked) and the missing peers returned.
    fn wait_all(
        &self,
        mut reqs: Vec<Option<Req>>,
        owner: &[usize],
        deadline: Instant,
    ) -> Vec<usize> {
        let mut spins = 0u32;
        loop {
            let mut left = 0;
            for slot in reqs.iter_mut() {
                if let Some(r) = slot.take() {
                    match r.test() {
                        Ok(_) => {}
                        Err(r) => {
                            *slot = Some(r);
                            left += 1;
                        }
                    }
                }
            }
            if left == 0 {
                return Vec::new();
            }
            if Instant::now() >= deadline {
                let mut missing = Vec::new();
                for (i, slot) in reqs.into_iter().enumerate() {
                    if let Some(r) = slot {
                        missing.push(owner[i]);
                        // Abandon: dropping an unfinished request would abort the process.
                        std::mem::forget(r);
                    }
                }
                missing.sort_unstable();
                missing.dedup();
                return missing;
            }
            spins += 1;
            if spins < 1000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Sends `send` to every peer in `to` and receives `recv_lens[i]` bytes from each
    /// peer in `from` (same order), with one tag.
    #[allow(clippy::too_many_arguments)]
    fn exchange(
        &self,
        send: &[u8],
        to: &[usize],
        from: &[usize],
        recv_lens: &[usize],
        tag: i32,
        deadline: Instant,
        op: &str,
    ) -> Result<Vec<Vec<u8>>> {
        let mut sendbuf = Lent::new(send.to_vec());
        // SAFETY: the one reference to `sendbuf`; it is shared (read-only) by the sends.
        let shared: &'static [u8] = unsafe { sendbuf.as_static() };
        let mut reqs: Vec<Option<Req>> = Vec::new();
        let mut owner = Vec::new();
        let mut recvbufs: Vec<Lent> = recv_lens.iter().map(|&l| Lent::zeroed(l)).collect();
        for (i, &p) in from.iter().enumerate() {
            // SAFETY: each receive buffer is lent exactly once.
            let buf = unsafe { recvbufs[i].as_static() };
            let r = self
                .boot
                .process_at_rank(p as i32)
                .immediate_receive_into_with_tag(StaticScope, buf, tag);
            reqs.push(Some(r));
            owner.push(p);
        }
        for &p in to {
            let r = self.boot.process_at_rank(p as i32).immediate_send_with_tag(
                StaticScope,
                shared,
                tag,
            );
            reqs.push(Some(r));
            owner.push(p);
        }
        let missing = self.wait_all(reqs, &owner, deadline);
        if !missing.is_empty() {
            self.failed.store(true, Ordering::SeqCst);
            // `Lent` has no destructor: not calling `take` leaks the buffers, which MPI
            // may still write into.
            let _ = (sendbuf, recvbufs);
            return Err(Error::Timeout {
                op: op.to_string(),
                after: self.timeout,
                missing,
            });
        }
        // SAFETY: every request completed (wait_all returned no missing peer).
        drop(unsafe { sendbuf.take() });
        // SAFETY: as above.
        Ok(recvbufs.into_iter().map(|b| unsafe { b.take() }).collect())
    }

    pub(crate) fn allgather(&self, mine: &[u8], op: &str) -> Result<Vec<Vec<u8>>> {
        let _g = self
            .lock
            .lock()
            .map_err(|_| Error::Protocol("a previous MPI call panicked".into()))?;
        let deadline = Instant::now() + self.timeout;
        let peers: Vec<usize> = (0..self.size).filter(|&p| p != self.rank).collect();
        let lens = self.exchange(
            &(mine.len() as u64).to_le_bytes(),
            &peers,
            &peers,
            &vec![8; peers.len()],
            TAG_LEN,
            deadline,
            op,
        )?;
        let lens: Vec<usize> = lens
            .iter()
            .map(|b| {
                let mut a = [0u8; 8];
                a.copy_from_slice(&b[..8]);
                u64::from_le_bytes(a) as usize
            })
            .collect();
        let mut got = self
            .exchange(mine, &peers, &peers, &lens, TAG_DATA, deadline, op)?
            .into_iter();
        Ok((0..self.size)
            .map(|r| {
                if r == self.rank {
                    mine.to_vec()
                } else {
                    got.next().unwrap_or_default()
                }
            })
            .collect())
    }

    pub(crate) fn broadcast(&self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        let _g = self
            .lock
            .lock()
            .map_err(|_| Error::Protocol("a previous MPI call panicked".into()))?;
        let deadline = Instant::now() + self.timeout;
        let op = format!("broadcast(root={root})");
        if self.rank == root {
            let peers: Vec<usize> = (0..self.size).filter(|&p| p != root).collect();
            self.exchange(
                &(data.len() as u64).to_le_bytes(),
                &peers,
                &[],
                &[],
                TAG_LEN,
                deadline,
                &op,
            )?;
            self.exchange(data, &peers, &[], &[], TAG_DATA, deadline, &op)?;
            Ok(data.to_vec())
        } else {
            let len = self.exchange(&[], &[], &[root], &[8], TAG_LEN, deadline, &op)?;
            let mut a = [0u8; 8];
            a.copy_from_slice(&len[0][..8]);
            let n = u64::from_le_bytes(a) as usize;
            let mut got = self.exchange(&[], &[], &[root], &[n], TAG_DATA, deadline, &op)?;
            Ok(got.pop().unwrap_or_default())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_limit_is_twice_the_timeout_and_at_least_a_minute() {
        assert_eq!(init_limit(Duration::from_secs(5)), Duration::from_secs(60));
        assert_eq!(
            init_limit(Duration::from_secs(300)),
            Duration::from_secs(600)
        );
        assert_eq!(init_limit(Duration::MAX), Duration::MAX);
    }

    /// The watchdog ends a process whose MPI_Init or MPI_Finalize does not return,
    /// with a message and status 70; one that returns in time lives on. Runs itself
    /// as the child.
    #[test]
    fn the_watchdog_ends_a_stuck_process_and_spares_a_quick_one() {
        const CHILD: &str = crate::env::TEST_WATCHDOG_CHILD;
        match std::env::var(CHILD).as_deref() {
            Ok("stuck") => {
                let _done = watchdog("MPI_Init", INIT_STUCK, Duration::from_millis(100));
                std::thread::sleep(Duration::from_secs(20));
                return;
            }
            Ok("stuck-finalize") => {
                let _done = watchdog("MPI_Finalize", FINALIZE_STUCK, Duration::from_millis(100));
                std::thread::sleep(Duration::from_secs(20));
                return;
            }
            Ok("quick") => {
                let done = watchdog("MPI_Finalize", FINALIZE_STUCK, Duration::from_millis(300));
                let _ = done.send(());
                std::thread::sleep(Duration::from_millis(600));
                return;
            }
            _ => {}
        }
        let me = std::env::current_exe().unwrap();
        let name = "mpi_backend::tests::the_watchdog_ends_a_stuck_process_and_spares_a_quick_one";
        let run = |mode: &str| {
            std::process::Command::new(&me)
                .args(["--exact", name, "--nocapture"])
                .env(CHILD, mode)
                .output()
                .unwrap()
        };
        let t = Instant::now();
        let out = run("stuck");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(70), "{err}");
        assert!(err.contains("MPI_Init did not return within"), "{err}");
        assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
        let out = run("stuck-finalize");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(70), "{err}");
        assert!(
            err.contains("MPI_Finalize did not return within")
                && err.contains("ended without finalizing"),
            "{err}"
        );
        let out = run("quick");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
