//! Shared helpers of the hpc-rs benchmarks: robust statistics, clocks, and the
//! OSU-style harness (collectives, buffers, the compute loop) that the overlap
//! and offload benchmarks share.

use std::hint::black_box;
use std::time::Instant;

use hpc_comm::{Comm, Elem, ReduceOp, RegisteredBuf, Scope, ScopedRequest, SharedBuf};

/// The median of a sample (NaN for an empty one). Sorts a copy.
pub fn median(xs: &[f64]) -> f64 {
    percentile(xs, 50.0)
}

/// The `p`-th percentile (0..=100) by nearest rank (NaN for an empty sample).
pub fn percentile(xs: &[f64], p: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * (v.len() as f64 - 1.0)).round() as usize;
    v[rank.min(v.len() - 1)]
}

/// Seconds on `clock` (a `CLOCK_*` id: `CLOCK_THREAD_CPUTIME_ID` for the
/// calling thread's CPU time, `CLOCK_PROCESS_CPUTIME_ID` for the process's).
pub fn clock(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock ids used are
    // supported by Linux.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The calling thread's CPU time, in seconds.
pub fn thread_cpu() -> f64 {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The process's CPU time (all its threads), in seconds.
pub fn process_cpu() -> f64 {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// The collectives of the OSU non-blocking benchmarks (and MVAPICH2-DPU's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coll {
    /// `ialltoall`: the size is what a rank sends to each peer.
    Alltoall,
    /// `iallgather`: the size is each rank's contribution.
    Allgather,
    /// `ibcast` from rank 0.
    Bcast,
    /// `iallreduce` (sum of `f32`).
    Allreduce,
}

impl Coll {
    /// All four, in the benchmarks' order.
    pub const ALL: [Coll; 4] = [
        Coll::Alltoall,
        Coll::Allgather,
        Coll::Bcast,
        Coll::Allreduce,
    ];

    /// OSU's name (`ialltoall`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Coll::Alltoall => "ialltoall",
            Coll::Allgather => "iallgather",
            Coll::Bcast => "ibcast",
            Coll::Allreduce => "iallreduce",
        }
    }

    /// Parses a comma-separated list (`alltoall`, `ialltoall`, ...); `None`: all.
    pub fn parse_list(list: Option<&str>) -> Result<Vec<Coll>, String> {
        let Some(list) = list else {
            return Ok(Coll::ALL.to_vec());
        };
        list.split(',')
            .map(|n| {
                Coll::ALL
                    .into_iter()
                    .find(|c| c.name().trim_start_matches('i') == n.trim_start_matches('i'))
                    .ok_or_else(|| {
                        format!("unknown collective {n:?} (alltoall, allgather, bcast, allreduce)")
                    })
            })
            .collect()
    }

    /// Starts the collective on `b` in scope `s` (zero-copy).
    pub fn start<'s>(self, s: &'s Scope<'s, '_>, b: &'s mut Bufs) -> ScopedRequest<'s> {
        let (send, recv) = (&b.send[..], &mut b.recv[..]);
        match self {
            Coll::Alltoall => s.ialltoall(send, recv),
            Coll::Allgather => s.iallgather(send, recv),
            Coll::Bcast => s.ibcast(recv, 0),
            Coll::Allreduce => s.iallreduce(send, recv, ReduceOp::Sum),
        }
        .expect("post")
    }
}

/// A benchmark buffer: ordinary memory, a `SharedBuf` that the host proxy
/// maps, or a `RegisteredBuf` (in place for a proxy in DPU placement).
pub enum Mem<T: Elem = f32> {
    /// Heap memory (the proxy reaches it by cross-memory attach).
    Heap(Vec<T>),
    /// Shared memory that the proxy maps once.
    Shared(SharedBuf<T>),
    /// Memory from `Comm::registered_buf`.
    Registered(RegisteredBuf<T>),
}

impl Mem {
    /// `len` copies of `v`.
    pub fn new(len: usize, v: f32, shared: bool) -> Mem {
        if shared {
            let mut b = SharedBuf::new(len).expect("shared buffer");
            b.fill(v);
            Mem::Shared(b)
        } else {
            Mem::Heap(vec![v; len])
        }
    }
}

impl<T: Elem> std::ops::Deref for Mem<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Mem::Heap(v) => v,
            Mem::Shared(b) => b,
            Mem::Registered(b) => b,
        }
    }
}

impl<T: Elem> std::ops::DerefMut for Mem<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Mem::Heap(v) => v,
            Mem::Shared(b) => b,
            Mem::Registered(b) => b,
        }
    }
}

/// The send and receive buffers of one collective.
pub struct Bufs {
    /// What this rank sends.
    pub send: Mem,
    /// What it receives.
    pub recv: Mem,
}

impl Bufs {
    /// Buffers for `c` of `bytes` per rank (per peer for alltoall, as OSU counts)
    /// among `n` ranks.
    pub fn new(c: Coll, bytes: usize, n: usize, shared: bool) -> Bufs {
        let e = (bytes / 4).max(1);
        let (s, r) = match c {
            Coll::Alltoall => (e * n, e * n),
            Coll::Allgather => (e, e * n),
            Coll::Bcast => (0, e),
            Coll::Allreduce => (e, e),
        };
        Bufs {
            send: Mem::new(s, 1.0, shared),
            recv: Mem::new(r, 0.0, shared),
        }
    }
}

/// A compute loop that needs the core but little memory bandwidth.
#[inline(never)]
pub fn compute(iters: u64) -> f64 {
    let mut x = black_box(1.0f64);
    for _ in 0..iters {
        x = black_box(x * 1.000_000_1 + 1e-9);
    }
    x
}

/// The compute loop's iterations per second alone (median of short runs: the
/// machine is shared, long runs catch other processes' bursts).
pub fn compute_rate() -> f64 {
    let n = 200_000u64;
    let t: Vec<f64> = (0..30)
        .map(|_| {
            let t0 = Instant::now();
            black_box(compute(n));
            t0.elapsed().as_secs_f64()
        })
        .collect();
    n as f64 / median(&t)
}

/// Iterations of [`compute`] that last `secs` alone here, refined by timing
/// `samples` runs twice (starting from `rate`, [`compute_rate`]); returns the
/// iterations and the median time they took.
pub fn calibrate(secs: f64, rate: f64, samples: usize) -> (u64, f64) {
    let mut work = (secs * rate) as u64;
    let mut t = 0.0;
    for _ in 0..3 {
        let alone: Vec<f64> = (0..samples.max(1))
            .map(|_| {
                let t0 = Instant::now();
                black_box(compute(work));
                t0.elapsed().as_secs_f64()
            })
            .collect();
        t = median(&alone);
        work = ((work as f64) * secs / t.max(1e-9)) as u64;
    }
    (work, t)
}

/// Rank 0's `v` on every rank of `comm` (so that all compute for as long).
pub fn agree(comm: &Comm, v: f64) -> f64 {
    let mut p = [if comm.rank() == 0 { v } else { 0.0 }];
    comm.bcast(&mut p, 0).expect("bcast");
    p[0]
}

/// The value of option `key` (`--key VALUE`) in `args`.
pub fn arg(args: &[String], key: &str) -> Option<String> {
    args.iter()
        .position(|a| a == key)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// The command line that the overlap and offload benchmarks share.
pub struct Options {
    /// Every argument.
    pub args: Vec<String>,
    /// `--engine A,B,...` (see [`engines`]).
    pub engines: Vec<hpc_comm::Engine>,
    /// `--iters N`.
    pub iters: usize,
    /// `--shm auto|on|off` (see [`Shm`]).
    pub shm: Shm,
    /// `--sizes A,B,...` in bytes (see [`sizes`]).
    pub sizes: Vec<usize>,
    /// `--colls A,B,...` (see [`Coll::parse_list`]).
    pub colls: Vec<Coll>,
}

impl Options {
    /// Serves as the proxy process where the proxy engine started this
    /// binary as one (then it does not return), else reads this process's
    /// command line, with `iters` and `sizes` where it names none.
    pub fn from_env(iters: usize, sizes: &[usize]) -> Result<Options, Box<dyn std::error::Error>> {
        hpc_comm::proxy::serve_env()?;
        let args: Vec<String> = std::env::args().collect();
        Ok(Options {
            engines: engines(&args)?,
            iters: count_arg(&args, "--iters", iters)?,
            shm: Shm::from_args(&args)?,
            sizes: self::sizes(&args, sizes)?,
            colls: Coll::parse_list(arg(&args, "--colls").as_deref())?,
            args,
        })
    }
}

/// The count of option `key` (`--key N`) in `args`, `default` without it; an
/// error naming the option and its value where that is not a count.
pub fn count_arg(args: &[String], key: &str, default: usize) -> Result<usize, String> {
    arg(args, key).map_or(Ok(default), |s| {
        s.parse()
            .map_err(|e| format!("{key} {s:?} is not a count: {e}"))
    })
}

/// The engines of `--engine A,B,...` in `args`, by default `inline,thread,proxy`.
pub fn engines(args: &[String]) -> hpc_comm::Result<Vec<hpc_comm::Engine>> {
    arg(args, "--engine")
        .unwrap_or_else(|| "inline,thread,proxy".into())
        .split(',')
        .map(str::parse)
        .collect()
}

/// Where `--shm auto|on|off` puts a benchmark's buffers: in shared memory
/// (`SharedBuf`) or not; `auto` for the proxy engine only, which maps them instead
/// of copying through the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shm {
    /// Shared memory for the proxy engine only.
    Auto,
    /// Shared memory for every engine.
    On,
    /// Shared memory for none.
    Off,
}

impl Shm {
    /// `--shm` of `args`, by default `auto`.
    pub fn from_args(args: &[String]) -> Result<Shm, String> {
        match arg(args, "--shm").as_deref() {
            None | Some("auto") => Ok(Shm::Auto),
            Some("on") => Ok(Shm::On),
            Some("off") => Ok(Shm::Off),
            Some(other) => Err(format!("--shm {other:?}: auto, on or off")),
        }
    }

    /// Whether the buffers of a communicator of `engine` are in shared memory.
    pub fn shared(self, engine: hpc_comm::Engine) -> bool {
        match self {
            Shm::On => true,
            Shm::Off => false,
            Shm::Auto => engine == hpc_comm::Engine::Proxy,
        }
    }
}

/// Sizes in bytes from `--sizes A,B,...`, or `default`.
pub fn sizes(args: &[String], default: &[usize]) -> Result<Vec<usize>, String> {
    match arg(args, "--sizes") {
        Some(s) => s
            .split(',')
            .map(|x| {
                x.trim()
                    .parse()
                    .map_err(|_| format!("--sizes: {x:?} is not a size in bytes"))
            })
            .collect(),
        None => Ok(default.to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_percentiles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0, 5.0], 100.0), 5.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.0), 1.0);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn collective_lists_parse() {
        assert_eq!(Coll::parse_list(None).unwrap().len(), 4);
        assert_eq!(
            Coll::parse_list(Some("alltoall,ibcast")).unwrap(),
            vec![Coll::Alltoall, Coll::Bcast]
        );
        assert!(Coll::parse_list(Some("scan")).unwrap_err().contains("scan"));
    }

    #[test]
    fn thread_cpu_advances_with_work_only() {
        let t0 = thread_cpu();
        black_box(compute(2_000_000));
        assert!(thread_cpu() > t0);
        let p0 = process_cpu();
        assert!(process_cpu() >= p0);
    }
}
