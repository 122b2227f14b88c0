//! The spike exchange between ranks: the seam where `hpc-comm` plugs in.
//!
//! Every exchange interval each rank contributes the spikes its neurons emitted in
//! that interval and receives every rank's spikes of the interval, in rank order
//! (an allgatherv of `u32`). A spike is coded as
//! `(step within the interval) << gid_bits | global neuron id` (see
//! the model's `gid_bits`), so the payload is a flat `u32` array and the
//! receiver needs no per-rank structure.
//!
//! The simulation calls [`SpikeExchange::overlap`] with the spikes of interval `k`
//! and, as the work to overlap, the update of interval `k + 1`: by default
//! [`SpikeExchange::start`] right after updating interval `k` and
//! [`SpikeExchange::finish`] after updating interval `k + 1`, so a non-blocking
//! engine overlaps the two (the brunel example's `sim` module says why that is exact).
//!
//! # Plugging in a collectives engine
//!
//! Implement [`SpikeExchange`] for the engine, add its construction to the match
//! in the `brunel` binary (`src/main.rs`, function `make_exchange`), and let
//! [`Engine::available`] return true for it. The tests in
//! `tests/determinism.rs` check any engine: the spike file must stay
//! bit-identical to the one-process run.
//!
//! `hpc_comm::Comm::iallgatherv(send, recv, counts)` needs every rank's
//! count up front and returns a `Request<'a>` that borrows its buffers, so
//! `Pending` cannot hold it. Two ways in: (a) as [`WorldExchange`] does, own
//! the `Comm` on a helper thread that runs `allgather` of the counts then
//! `allgatherv` of the codes while the caller works; (b) override
//! [`SpikeExchange::overlap`]: exchange the counts, post `iallgatherv` on
//! `local`/`out` (sized from the counts), run `work`, wait; the request's
//! borrows end inside the call, so no `Pending` is needed (`start`/`finish` can
//! then return an error).

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Barrier, Mutex};
use std::thread::JoinHandle;

use anyhow::{anyhow, bail, Result};
use hpc_runtime::World;

/// The `(tick, neuron)` records of spike `codes` exchanged for the interval
/// that starts at step `base` (each `(step within the interval) << gid_bits |
/// neuron`), into `out` (cleared first): a spike emitted in step `base + s`
/// is recorded at tick `base + s + 1`, the end of its step, as the spike file
/// keeps it.
///
/// `gid_bits` of 32 (a model of more than 2^31 neurons) leaves no bit for
/// the step (every spike is of the interval's first step), and more than 32
/// is taken as 32: a code has 32 bits (32 panicked with "attempt to shift
/// right with overflow", and a release build read the whole code as the
/// step). A tick beyond `u32::MAX` (a spike file's ticks are `u32`) is
/// recorded as `u32::MAX`, which the spike file's writer refuses as after
/// the end of the run, not wrapped to an early tick (nor a panic for a
/// `base` near `u64::MAX`).
pub fn spike_records(codes: &[u32], base: u64, gid_bits: u32, out: &mut Vec<(u32, u32)>) {
    let gid_mask = gid_mask(gid_bits);
    out.clear();
    out.extend(codes.iter().map(|&c| {
        let step = u64::from(c.checked_shr(gid_bits).unwrap_or(0));
        let tick = base.saturating_add(step).saturating_add(1);
        (u32::try_from(tick).unwrap_or(u32::MAX), c & gid_mask)
    }));
}

/// The mask of a code's low `gid_bits` bits, the neuron's id: every bit for
/// 32 or more (a code has 32; `(1 << 64) - 1` panicked).
pub(crate) fn gid_mask(gid_bits: u32) -> u32 {
    1u64.checked_shl(gid_bits)
        .map_or(u32::MAX, |b| (b - 1) as u32)
}

/// One rank's side of the all-to-all spike exchange.
pub trait SpikeExchange {
    /// The handle of an exchange in flight.
    type Pending;

    /// Starts exchanging this rank's spikes of one interval. The caller finishes
    /// each exchange before starting the next, so at most one is in flight. `local`
    /// may be reused by the caller as soon as this returns.
    fn start(&mut self, local: &[u32]) -> Result<Self::Pending>;

    /// Waits for an exchange and writes every rank's spikes of its interval into
    /// `out` (cleared first), concatenated in rank order.
    fn finish(&mut self, pending: Self::Pending, out: &mut Vec<u32>) -> Result<()>;

    /// Exchanges `local` (into `out`, as [`SpikeExchange::finish`]) while running
    /// `work`, and returns `work`'s result and the seconds spent in `work`. This is
    /// the only call the simulation makes. The default is `start`, `work`,
    /// `finish`; an engine whose requests borrow their buffers for a scope (such
    /// as `hpc_comm::Comm::scope`) overrides it and may leave `start` and
    /// `finish` unreachable.
    fn overlap<R>(
        &mut self,
        local: &[u32],
        out: &mut Vec<u32>,
        work: impl FnOnce() -> R,
    ) -> Result<(R, f64)> {
        let pending = {
            let _s = tracing::info_span!("exchange_start", spikes = local.len()).entered();
            self.start(local)?
        };
        work_then_wait(work, || self.finish(pending, out))
    }
}

/// Runs `work` while an exchange is in flight, then waits for the exchange
/// (`wait`, in the `exchange_wait` span): `work`'s result and the seconds
/// spent in it (what [`SpikeExchange::overlap`] returns).
pub(crate) fn work_then_wait<R>(
    work: impl FnOnce() -> R,
    wait: impl FnOnce() -> Result<()>,
) -> Result<(R, f64)> {
    let t = std::time::Instant::now();
    let r = work();
    let work_s = t.elapsed().as_secs_f64();
    {
        let _s = tracing::info_span!("exchange_wait").entered();
        wait()?;
    }
    Ok((r, work_s))
}

/// An exchange taken by reference is the same exchange, so that an adapter
/// (such as [`crate::alltoallv::Gather`]) can borrow one.
impl<E: SpikeExchange> SpikeExchange for &mut E {
    type Pending = E::Pending;

    fn start(&mut self, local: &[u32]) -> Result<Self::Pending> {
        (**self).start(local)
    }

    fn finish(&mut self, pending: Self::Pending, out: &mut Vec<u32>) -> Result<()> {
        (**self).finish(pending, out)
    }

    fn overlap<R>(
        &mut self,
        local: &[u32],
        out: &mut Vec<u32>,
        work: impl FnOnce() -> R,
    ) -> Result<(R, f64)> {
        (**self).overlap(local, out, work)
    }
}

/// The exchange engines the `--engine` flag names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// `hpc-comm`, progressed inline by the caller.
    Inline,
    /// `hpc-comm`, progressed by a helper thread.
    Thread,
    /// `hpc-comm`, progressed by a proxy process/core.
    Proxy,
    /// `hpc-comm` over MPI.
    Mpi,
    /// `hpc_runtime::World::allgather` on a helper thread (available now).
    World,
}

impl Engine {
    /// Whether this build has the engine (`mpi` needs the `mpi` feature).
    pub fn available(self) -> bool {
        cfg!(feature = "mpi") || !matches!(self, Engine::Mpi)
    }

    /// The `hpc-comm` engine behind this choice (`None` for `world`).
    pub fn collectives(self) -> Option<hpc_comm::Engine> {
        match self {
            Engine::Inline => Some(hpc_comm::Engine::Inline),
            Engine::Thread => Some(hpc_comm::Engine::Thread),
            Engine::Proxy => Some(hpc_comm::Engine::Proxy),
            #[cfg(feature = "mpi")]
            Engine::Mpi => Some(hpc_comm::Engine::Mpi),
            _ => None,
        }
    }

    /// The error for an engine this build does not have.
    pub fn unavailable_error(self) -> anyhow::Error {
        anyhow!(
            "engine `{}` is not available in this build (the `mpi` engine needs \
             `--features mpi`); use --engine inline, thread, proxy or world",
            format!("{self:?}").to_lowercase()
        )
    }
}

fn encode(words: &[u32]) -> Vec<u8> {
    let mut b = Vec::with_capacity(words.len() * 4);
    for w in words {
        b.extend_from_slice(&w.to_le_bytes());
    }
    b
}

fn decode_into(parts: &[Vec<u8>], out: &mut Vec<u32>) -> Result<()> {
    out.clear();
    for p in parts {
        if p.len() % 4 != 0 {
            bail!(
                "spike message of {} bytes is not a whole number of u32",
                p.len()
            );
        }
        out.extend(
            p.chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
    }
    Ok(())
}

type Gathered = hpc_runtime::Result<Vec<Vec<u8>>>;

/// [`SpikeExchange`] over [`World::allgather`], run on a helper thread so that the
/// (blocking) allgather of interval `k` proceeds while the caller updates interval
/// `k + 1`. The caller must not use the world's collectives itself while an
/// exchange is in flight.
pub struct WorldExchange {
    tx: Option<Sender<Vec<u8>>>,
    rx: Receiver<Gathered>,
    thread: Option<JoinHandle<()>>,
}

/// The handle of a [`WorldExchange`] in flight.
#[derive(Debug)]
pub struct WorldPending(());

impl WorldExchange {
    /// Starts the helper thread.
    pub fn new(world: Arc<World>) -> Result<WorldExchange> {
        let (tx, rx_req) = channel::<Vec<u8>>();
        let (tx_res, rx) = channel::<Gathered>();
        let thread = std::thread::Builder::new()
            .name("spike-exchange".into())
            .spawn(move || {
                for msg in rx_req {
                    let res = {
                        let _s = tracing::info_span!("allgather", bytes = msg.len()).entered();
                        world.allgather(&msg)
                    };
                    let failed = res.is_err();
                    if tx_res.send(res).is_err() || failed {
                        break;
                    }
                }
            })?;
        Ok(WorldExchange {
            tx: Some(tx),
            rx,
            thread: Some(thread),
        })
    }
}

impl SpikeExchange for WorldExchange {
    type Pending = WorldPending;

    fn start(&mut self, local: &[u32]) -> Result<WorldPending> {
        self.tx
            .as_ref()
            .and_then(|tx| tx.send(encode(local)).ok())
            .ok_or_else(|| anyhow!("the spike exchange thread has stopped"))?;
        Ok(WorldPending(()))
    }

    fn finish(&mut self, _pending: WorldPending, out: &mut Vec<u32>) -> Result<()> {
        let parts = self
            .rx
            .recv()
            .map_err(|_| anyhow!("the spike exchange thread has stopped"))??;
        decode_into(&parts, out)
    }
}

impl Drop for WorldExchange {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct LocalShared {
    slots: Mutex<Vec<Vec<u32>>>,
    barrier: Barrier,
}

/// [`SpikeExchange`] between "virtual ranks" that are threads of one process (for
/// tests and for running several ranks' worth of decomposition in one process).
/// Blocking: `finish` waits for every member's `start`.
pub struct LocalExchange {
    rank: usize,
    shared: Arc<LocalShared>,
}

/// The handle of a [`LocalExchange`] in flight.
#[derive(Debug)]
pub struct LocalPending(());

impl LocalExchange {
    /// A group of `size` connected exchanges, one per virtual rank.
    pub fn group(size: usize) -> Vec<LocalExchange> {
        let shared = Arc::new(LocalShared {
            slots: Mutex::new(vec![Vec::new(); size]),
            barrier: Barrier::new(size),
        });
        (0..size)
            .map(|rank| LocalExchange {
                rank,
                shared: shared.clone(),
            })
            .collect()
    }
}

/// Runs `ranks` virtual ranks in this process: each on a thread of its own, with
/// a pool of `threads` threads and its member of one [`LocalExchange::group`];
/// `rank(r, exchange, pool)` is rank `r`'s run. Answers the ranks' results in rank
/// order, or the first rank's error; a rank that panics panics here. Every rank
/// takes part in every exchange: one that returns early leaves the others waiting
/// in theirs.
///
/// The examples' tests run their networks so to show that the spikes do not
/// depend on the decomposition; public for a network of your own to do the same
/// without processes.
///
/// ```
/// use hpc_spiking::exchange::{virtual_ranks, SpikeExchange};
///
/// // Every rank sends its rank number; every rank receives all of them.
/// let all = virtual_ranks(3, 1, |r, mut ex, _pool| {
///     let mut got = Vec::new();
///     ex.overlap(&[r as u32], &mut got, || ())?;
///     got.sort_unstable();
///     Ok(got)
/// })?;
/// assert_eq!(all, vec![vec![0, 1, 2]; 3]);
/// # Ok::<(), anyhow::Error>(())
/// ```
pub fn virtual_ranks<R: Send>(
    ranks: usize,
    threads: usize,
    rank: impl Fn(usize, LocalExchange, &rayon::ThreadPool) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let rank = &rank;
    std::thread::scope(|s| {
        let handles: Vec<_> = LocalExchange::group(ranks)
            .into_iter()
            .enumerate()
            .map(|(r, ex)| {
                s.spawn(move || {
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .build()?;
                    rank(r, ex, &pool)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

impl SpikeExchange for LocalExchange {
    type Pending = LocalPending;

    fn start(&mut self, local: &[u32]) -> Result<LocalPending> {
        // The previous interval's slots were all read before the second barrier of
        // its `finish`, so they can be overwritten.
        let mut slots = self
            .shared
            .slots
            .lock()
            .map_err(|_| anyhow!("a virtual rank panicked"))?;
        slots[self.rank].clear();
        slots[self.rank].extend_from_slice(local);
        Ok(LocalPending(()))
    }

    fn finish(&mut self, _pending: LocalPending, out: &mut Vec<u32>) -> Result<()> {
        self.shared.barrier.wait();
        out.clear();
        {
            let slots = self
                .shared
                .slots
                .lock()
                .map_err(|_| anyhow!("a virtual rank panicked"))?;
            for s in slots.iter() {
                out.extend_from_slice(s);
            }
        }
        self.shared.barrier.wait();
        Ok(())
    }
}

/// [`SpikeExchange`] through `hpc-comm`: the counts of the interval are
/// allgathered (one `u64` per rank), then the spikes go through a non-blocking
/// `iallgatherv` that the engine progresses (inline in `wait`, by a progress thread,
/// by the node's proxy process, or by MPI) while the caller updates the next interval.
pub struct CommExchange {
    comm: hpc_comm::Comm,
    counts: Vec<u64>,
    sizes: Vec<usize>,
}

impl CommExchange {
    /// Creates the communicator (collective over `world`).
    pub fn new(world: &World, engine: hpc_comm::Engine) -> Result<CommExchange> {
        let comm = hpc_comm::Comm::new(world, engine)?;
        Ok(CommExchange {
            counts: vec![0; world.size()],
            sizes: vec![0; world.size()],
            comm,
        })
    }
}

impl SpikeExchange for CommExchange {
    type Pending = std::convert::Infallible;

    fn start(&mut self, _local: &[u32]) -> Result<Self::Pending> {
        bail!("CommExchange exchanges through `overlap` only")
    }

    fn finish(&mut self, pending: Self::Pending, _out: &mut Vec<u32>) -> Result<()> {
        match pending {}
    }

    fn overlap<R>(
        &mut self,
        local: &[u32],
        out: &mut Vec<u32>,
        work: impl FnOnce() -> R,
    ) -> Result<(R, f64)> {
        let req = {
            let _s = tracing::info_span!("exchange_start", spikes = local.len()).entered();
            self.comm
                .allgather(&[local.len() as u64][..], &mut self.counts[..])?;
            for (s, &c) in self.sizes.iter_mut().zip(&self.counts) {
                *s = c as usize;
            }
            out.clear();
            out.resize(self.sizes.iter().sum(), 0);
            self.comm.iallgatherv(local, &mut out[..], &self.sizes)?
        };
        work_then_wait(work, || Ok(req.wait()?))
    }
}

/// The exchange a run uses: the world's allgather on a helper thread, or an
/// `hpc-comm` communicator.
pub enum AnyExchange {
    /// [`WorldExchange`].
    World(WorldExchange),
    /// [`CommExchange`] (boxed: the communicator is much larger than the channels).
    Comm(Box<CommExchange>),
}

impl AnyExchange {
    /// The exchange of `engine` between the ranks of `world`: the world's allgather
    /// for [`Engine::World`], else a communicator of that engine. An engine this
    /// build lacks is an error that names the feature to enable.
    pub fn new(engine: Engine, world: Arc<World>) -> Result<AnyExchange> {
        if !engine.available() {
            return Err(engine.unavailable_error());
        }
        match engine.collectives() {
            None => Ok(AnyExchange::World(WorldExchange::new(world)?)),
            Some(e) => Ok(AnyExchange::Comm(Box::new(CommExchange::new(&world, e)?))),
        }
    }
}

impl SpikeExchange for AnyExchange {
    type Pending = WorldPending;

    fn start(&mut self, local: &[u32]) -> Result<WorldPending> {
        match self {
            AnyExchange::World(w) => w.start(local),
            AnyExchange::Comm(_) => bail!("CommExchange exchanges through `overlap` only"),
        }
    }

    fn finish(&mut self, pending: WorldPending, out: &mut Vec<u32>) -> Result<()> {
        match self {
            AnyExchange::World(w) => w.finish(pending, out),
            AnyExchange::Comm(_) => bail!("CommExchange exchanges through `overlap` only"),
        }
    }

    fn overlap<R>(
        &mut self,
        local: &[u32],
        out: &mut Vec<u32>,
        work: impl FnOnce() -> R,
    ) -> Result<(R, f64)> {
        match self {
            AnyExchange::World(w) => w.overlap(local, out, work),
            AnyExchange::Comm(c) => c.overlap(local, out, work),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::spike_records;

    #[test]
    fn spike_records_decode_step_and_neuron_and_clear_what_was_there() {
        // gid_bits 4: neurons 0..16; steps 0 and 2 of the interval from step 10.
        let codes = [3u32, (2 << 4) | 15, 7];
        let mut out = vec![(99, 99)];
        spike_records(&codes, 10, 4, &mut out);
        assert_eq!(out, vec![(11, 3), (13, 15), (11, 7)]);
    }

    /// 32 bits of neuron id (a model of more than 2^31 neurons) leave no
    /// step bit, and more are taken as 32: "attempt to shift right with
    /// overflow" (a release build read the whole code as the step); a tick
    /// beyond `u32::MAX` is `u32::MAX`, not wrapped to 0 (nor a panic of
    /// `base + step`).
    #[test]
    fn every_bit_count_and_base_gives_a_record_not_a_panic() {
        let mut out = vec![];
        for bits in [32, 33, 63, 64, u32::MAX] {
            spike_records(&[0x8000_0001, 3], 10, bits, &mut out);
            assert_eq!(out, vec![(11, 0x8000_0001), (11, 3)], "{bits} bits");
        }
        spike_records(&[1 << 4], u64::from(u32::MAX) - 1, 4, &mut out);
        assert_eq!(out, vec![(u32::MAX, 0)]);
        spike_records(&[(5 << 4) | 2], u64::MAX, 4, &mut out);
        assert_eq!(out, vec![(u32::MAX, 2)]);
    }
}
