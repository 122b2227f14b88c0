//! `hpc perftest`: the transport measured like InfiniBand's perftest (`ib_write_bw`,
//! `ib_send_lat`, ...), between ranks 0 and 1 of a 2-rank job:
//!
//! ```text
//! hpc run -n 2 -- hpc perftest write_lat --backend shm --all
//! ```
//!
//! Rank 0 prints perftest's columns. Bandwidth: `#bytes #iterations BW peak[MB/sec]
//! BW average[MB/sec] MsgRate[Mpps]` (MB = 2^20 bytes; peak over windows of posted
//! operations). Latency: `#bytes #iterations t_min t_max t_typical t_avg t_stdev
//! 99% percentile` in microseconds; write and send latencies are half round trips
//! (ping-pong), read latency is one get. Write latency polls the last 8 bytes of the
//! put at the target, so sizes below 8 are measured as 8.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hpc_rdma::{Options, Payload, RemoteKey, Transport};
use hpc_runtime::World;

/// Which test.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// One-sided write bandwidth.
    #[value(name = "write_bw")]
    WriteBw,
    /// One-sided write latency (ping-pong, polling the target memory).
    #[value(name = "write_lat")]
    WriteLat,
    /// One-sided read bandwidth.
    #[value(name = "read_bw")]
    ReadBw,
    /// One-sided read latency.
    #[value(name = "read_lat")]
    ReadLat,
    /// Two-sided send bandwidth.
    #[value(name = "send_bw")]
    SendBw,
    /// Two-sided send latency (ping-pong).
    #[value(name = "send_lat")]
    SendLat,
}

impl Test {
    fn is_bw(self) -> bool {
        matches!(self, Test::WriteBw | Test::ReadBw | Test::SendBw)
    }
    fn title(self) -> &'static str {
        match self {
            Test::WriteBw => "RDMA_Write BW Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::ReadBw => "RDMA_Read BW Test",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::SendBw => "Send BW Test",
            Test::SendLat => "Send Latency Test",
        }
    }
}

/// Arguments of `hpc perftest`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    hpc run -n 2 -- hpc perftest write_lat --backend shm --all\n  \
    hpc run -n 2 -- hpc perftest send_bw --backend tcp -s 1048576\n  \
    srun -N 2 -n 2 hpc perftest write_bw --backend verbs --all   (two nodes with HCAs)")]
pub struct Args {
    /// The test to run.
    #[arg(value_enum)]
    pub test: Test,
    /// Transport backend (default: `HPC_TRANSPORT`, else auto); with ofi,
    /// `HPC_OFI_PROVIDER` picks the libfabric provider.
    #[arg(long, value_enum)]
    pub backend: Option<super::values::Backend>,
    /// Message size in bytes (default 65536 for bandwidth, 2 for latency tests;
    /// refused when the buffers it needs exceed the available memory).
    #[arg(long, short = 's')]
    pub size: Option<usize>,
    /// Run sizes 2, 4, ..., 8 MiB.
    #[arg(long, short = 'a', conflicts_with = "size")]
    pub all: bool,
    /// Iterations per size (default 5000 for bandwidth, 1000 for latency tests;
    /// reduced for large sizes; 1 to 2^30).
    #[arg(long, short = 'n')]
    pub iters: Option<usize>,
    /// Operations in flight for bandwidth tests (1 to 65536; default 64). A
    /// latency test has one in flight: it refuses the flag.
    #[arg(long)]
    pub window: Option<usize>,
    /// Do not pin rank r to the r-th CPU it may run on (as perftest is run under
    /// `taskset`); pinning keeps the two spinning ranks off each other's core.
    #[arg(long)]
    pub no_pin: bool,
}

impl Args {
    /// Operations in flight of a bandwidth test: `--window`, else 64.
    fn window(&self) -> usize {
        self.window.unwrap_or(DEFAULT_WINDOW)
    }
}

/// `--window` of a bandwidth test when not given.
pub const DEFAULT_WINDOW: usize = 64;

/// Pins this thread to the `nth` CPU of its current affinity mask, if it has more
/// than one.
fn pin_to_nth_allowed(nth: usize) {
    use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};
    let Ok(set) = sched_getaffinity(None) else {
        return;
    };
    let allowed: Vec<usize> = (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect();
    if allowed.len() < 2 {
        return;
    }
    let mut one = CpuSet::new();
    one.set(allowed[nth % allowed.len()]);
    // Pinning is best effort: unpinned, the test still measures.
    let _ = sched_setaffinity(None, &one);
}

const MB: f64 = (1 << 20) as f64;
const TAG_DATA: u64 = 1;
const TAG_ACK: u64 = 2;

/// The most `--iters`: a latency test keeps one time per iteration.
pub const MAX_ITERS: usize = 1 << 30;
/// The most `--window` operations in flight.
pub const MAX_WINDOW: usize = 1 << 16;

/// Checks the sizes of the flags before anything is allocated: the numbers, and the
/// memory this rank would hold at once (its registered region, a buffer per
/// operation in flight, a time per latency iteration).
fn check_sizes(args: &Args) -> Result<(), super::UsageError> {
    if let Some(n) = args.iters {
        super::check_between("--iters", n, 1, MAX_ITERS)?;
    }
    if let Some(w) = args.window {
        if !args.test.is_bw() {
            // It changed nothing, without a word.
            return Err(super::UsageError(format!(
                "--window {w}: a latency test has one operation in flight; --window is \
                 for the bandwidth tests (write_bw, read_bw, send_bw)"
            )));
        }
        super::check_between("--window", w, 1, MAX_WINDOW)?;
    }
    // The largest size measured: `--all`'s and the default's are checked too
    // (`--all --window 65536` skipped the check and aborted in an allocation of
    // 65,536 buffers of 8 MiB; `--all --iters 1073741824` in 8 GiB of times).
    let size = largest_size(args) as u128;
    let buffers = if args.test.is_bw() {
        args.window() as u128 + 1
    } else {
        1
    };
    let times = if args.test.is_bw() {
        0
    } else {
        8 * args.iters.unwrap_or(1000) as u128
    };
    // The flags that set the memory: a latency test has no window (naming
    // `--window 64` there sent the user to a flag that changes nothing).
    let sizes = match (args.size, args.all) {
        (Some(_), _) => format!("--size {size}"),
        (None, true) => format!("--all (up to {size} bytes)"),
        (None, false) => format!("the default size of {size} bytes"),
    };
    let what = if args.test.is_bw() {
        format!("{sizes} with --window {}", args.window())
    } else {
        format!("{sizes} with --iters {}", args.iters.unwrap_or(1000))
    };
    super::check_memory(&what, size.max(8) + 16 + size * buffers + times)
}

/// The sizes `--all` measures: 2 to 8 MiB, by powers of 2.
fn all_sizes() -> impl Iterator<Item = usize> {
    (1..=23).map(|e| 1usize << e)
}

/// The size measured when neither `--size` nor `--all` is given.
fn default_size(test: Test) -> usize {
    if test.is_bw() {
        65536
    } else {
        2
    }
}

/// The largest size this test measures.
fn largest_size(args: &Args) -> usize {
    match (args.size, args.all) {
        (Some(s), _) => s,
        (None, true) => all_sizes().max().unwrap_or(0),
        (None, false) => default_size(args.test),
    }
}

/// Runs the test on this rank.
pub fn exec(args: Args) -> anyhow::Result<i32> {
    check_sizes(&args)?;
    let world = World::init().context("joining the world")?;
    hpc_trace::set_rank(world.rank());
    hpc_trace::set_size(world.size());
    match measure(&args, &world) {
        Ok(code) => Ok(code),
        // Said while this rank is still in the world: once it has left, the other
        // rank ends the job, and `hpc run` may stop this one before its message is
        // out (a full stdout on rank 0 was then reported by rank 1 alone).
        Err(e) if super::is_broken_pipe(&e) => Ok(super::EXIT_BROKEN_PIPE),
        Err(e) => {
            // In one write: `writeln!` wrote `hpc: error: ` on its own, and a
            // rank that `hpc run` stopped between the pieces (the other rank
            // failed first) left that alone on its line.
            hpc_io::message::last_words("hpc", &hpc_io::message::chain(e.as_ref()));
            Ok(super::EXIT_ERROR)
        }
    }
}

/// The measurement of [`exec`], on a world that outlives it.
fn measure(args: &Args, world: &World) -> anyhow::Result<i32> {
    if world.size() != 2 {
        bail!(
            "perftest needs exactly 2 ranks (got {}): hpc run -n 2 -- hpc perftest ...",
            world.size()
        );
    }
    // Two ranks given different tests (send_bw on one, send_lat on the other)
    // waited for each other until the job's timeout, then said "timed out after
    // 30s waiting for operation 6", naming neither test.
    let mine = spelled(args);
    let all = world
        .allgather(mine.as_bytes())
        .context("comparing the two ranks' tests")?;
    let each: Vec<String> = all
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    if each.iter().any(|t| *t != mine) {
        bail!(
            "the two ranks were given different tests: rank 0 `hpc perftest {}`, rank 1 \
             `hpc perftest {}`; give both the same test and flags",
            hpc_io::message::cut(&each[0]),
            hpc_io::message::cut(each.get(1).map_or("", String::as_str))
        );
    }
    let mut opts = Options::from_env()?;
    if let Some(b) = args.backend {
        opts.backend = b.name().parse()?;
    }
    let t = Transport::with_options(world, opts).context("creating the transport")?;
    let me = world.rank();
    if !args.no_pin {
        pin_to_nth_allowed(me);
    }
    let peer = 1 - me;
    let sizes: Vec<usize> = match (args.all, args.size) {
        (true, _) => all_sizes().collect(),
        (false, Some(s)) => vec![s],
        (false, None) => vec![default_size(args.test)],
    };
    let max = sizes.iter().copied().max().unwrap_or(8).max(8);
    let region = t.register(max + 16)?;
    let keys = t.exchange_keys(world, &region)?;
    let backend = t.backend_of(peer).map(|k| k.name()).unwrap_or("?");
    if me == 0 {
        let line = "-".repeat(95);
        super::say(&line)?;
        super::say(&format!("                    {}", args.test.title()))?;
        super::say(&format!(" Transport: hpc-rdma {backend}    Ranks: 0 <-> 1"))?;
        super::say(&line)?;
        if args.test.is_bw() {
            super::say(&format!(
                " {:<10} {:<14} {:<18} {:<20} {:<14}",
                "#bytes", "#iterations", "BW peak[MB/sec]", "BW average[MB/sec]", "MsgRate[Mpps]"
            ))?;
        } else {
            super::say(&format!(
                " {:<10} {:<14} {:<14} {:<14} {:<17} {:<14} {:<16} 99% percentile[usec]",
                "#bytes",
                "#iterations",
                "t_min[usec]",
                "t_max[usec]",
                "t_typical[usec]",
                "t_avg[usec]",
                "t_stdev[usec]"
            ))?;
        }
    }
    for &size in &sizes {
        let base = if args.test.is_bw() { 5000 } else { 1000 };
        let mut iters = args.iters.unwrap_or(base);
        if args.iters.is_none() && size > 65536 {
            iters = (iters * 65536 / size).max(if args.test.is_bw() { 200 } else { 100 });
        }
        wait_for_peer(world, size, iters)?;
        let k = keys[peer];
        match args.test {
            Test::WriteLat => write_lat(&t, &region, &k, me, size, iters)?,
            Test::SendLat => send_lat(&t, me, peer, size, iters)?,
            Test::ReadLat => read_lat(&t, &k, me, size, iters)?,
            Test::WriteBw | Test::ReadBw | Test::SendBw => {
                bw(&t, args.test, &k, me, peer, size, iters, args.window())?
            }
        }
        wait_for_peer(world, size, iters)?;
    }
    if me == 0 {
        super::say(&"-".repeat(95))?;
    }
    Ok(0)
}

/// The test and the flags that both ranks must be given alike, as they are
/// written on the command line.
fn spelled(args: &Args) -> String {
    use clap::ValueEnum as _;
    let mut s = args
        .test
        .to_possible_value()
        .map(|v| v.get_name().to_string())
        .unwrap_or_default();
    if let Some(b) = args.backend {
        s += &format!(" --backend {}", b.name());
    }
    if args.all {
        s += " --all";
    }
    for (flag, v) in [
        ("--size", args.size),
        ("--iters", args.iters),
        ("--window", args.window),
    ] {
        if let Some(v) = v {
            s += &format!(" {flag} {v}");
        }
    }
    s
}

/// The barrier around each size's measurement. The rank that only waits (the
/// target of a one-sided test) waits there while the other measures; a
/// measurement longer than the job's timeout failed there with "barrier timed out
/// after 30s: still waiting for rank(s) 0" alone, so the error says what to change.
fn wait_for_peer(world: &World, size: usize, iters: usize) -> anyhow::Result<()> {
    world.barrier().map_err(|e| match e {
        hpc_runtime::Error::Timeout { .. } => anyhow::anyhow!(
            "{e}: the measurement of {size} bytes x {iters} iterations did not end within \
             the job's timeout; give fewer --iters or a longer timeout (hpc run --timeout, \
             {})",
            hpc_env::TIMEOUT
        ),
        e => e.into(),
    })
}

fn print_lat(size: usize, mut us: Vec<f64>) -> anyhow::Result<()> {
    if us.is_empty() {
        return Ok(());
    }
    let n = us.len();
    us.sort_by(|a, b| a.total_cmp(b));
    let avg = us.iter().sum::<f64>() / n as f64;
    let var = us.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
    let p = |q: f64| us[((q * (n - 1) as f64).round() as usize).min(n - 1)];
    super::say(&format!(
        " {:<10} {:<14} {:<14.2} {:<14.2} {:<17.2} {:<14.2} {:<16.2} {:.2}",
        size,
        n,
        us[0],
        us[n - 1],
        p(0.5),
        avg,
        var.sqrt(),
        p(0.99)
    ))
}

/// Runs `round(i)` for the warm-up rounds (a tenth of `iters`, plus 10),
/// then `iters` times more, and gives the microseconds each timed round took,
/// divided by `legs` (2 for a ping-pong: the one-way latency).
fn timed_rounds(
    iters: usize,
    legs: f64,
    mut round: impl FnMut(u64) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<f64>> {
    let warmup = (iters / 10 + 10) as u64;
    let mut times = Vec::with_capacity(iters);
    for i in 0..warmup + iters as u64 {
        let t0 = Instant::now();
        round(i)?;
        if i >= warmup {
            times.push(t0.elapsed().as_secs_f64() * 1e6 / legs);
        }
    }
    Ok(times)
}

fn write_lat(
    t: &Transport,
    region: &hpc_rdma::Region,
    peer_key: &RemoteKey,
    me: usize,
    size: usize,
    iters: usize,
) -> anyhow::Result<()> {
    let size = size.max(8);
    // Place the message so that its last 8 bytes are 8-aligned at the target.
    let off = (8 - size % 8) % 8;
    let flag = off + size - 8;
    let mut msg = vec![0xA5u8; size];
    let deadline = t.timeout();
    let wait_flag = |seq: u64| -> anyhow::Result<()> {
        let start = Instant::now();
        let mut spins = 0u32;
        while region.load_u64(flag)? != seq {
            spins += 1;
            if spins % 4096 == 0 && start.elapsed() > deadline {
                bail!("peer did not write round {seq} within {deadline:?}");
            }
            if spins > 2_000 {
                // Leave the CPU to a progress thread (tcp) or another process.
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        Ok(())
    };
    let times = timed_rounds(iters, 2.0, |i| {
        let seq = i + 1;
        msg[size - 8..].copy_from_slice(&seq.to_le_bytes());
        if me == 0 {
            let op = t.put(std::mem::take(&mut msg), peer_key, off as u64)?;
            wait_flag(seq)?;
            msg = t.wait(op)?.into_bytes();
        } else {
            wait_flag(seq)?;
            let op = t.put(std::mem::take(&mut msg), peer_key, off as u64)?;
            msg = t.wait(op)?.into_bytes();
        }
        Ok(())
    })?;
    if me == 0 {
        print_lat(size, times)?;
    }
    Ok(())
}

fn send_lat(
    t: &Transport,
    me: usize,
    peer: usize,
    size: usize,
    iters: usize,
) -> anyhow::Result<()> {
    let mut msg = vec![0x5Au8; size];
    let times = timed_rounds(iters, 2.0, |_| {
        if me == 0 {
            let s = t.send(peer, TAG_DATA, std::mem::take(&mut msg))?;
            let r = t.recv(peer, TAG_DATA)?;
            msg = t.wait(s)?.into_bytes();
            t.wait(r)?;
        } else {
            let r = t.recv(peer, TAG_DATA)?;
            msg = t.wait(r)?.into_bytes();
            let s = t.send(peer, TAG_DATA, std::mem::take(&mut msg))?;
            msg = t.wait(s)?.into_bytes();
        }
        Ok(())
    })?;
    if me == 0 {
        print_lat(size, times)?;
    }
    Ok(())
}

fn read_lat(
    t: &Transport,
    peer_key: &RemoteKey,
    me: usize,
    size: usize,
    iters: usize,
) -> anyhow::Result<()> {
    if me != 0 {
        return Ok(());
    }
    let times = timed_rounds(iters, 1.0, |_| {
        let g = t.get(peer_key, 0, size)?;
        t.wait(g)?;
        Ok(())
    })?;
    print_lat(size, times)
}

#[allow(clippy::too_many_arguments)]
fn bw(
    t: &Transport,
    test: Test,
    peer_key: &RemoteKey,
    me: usize,
    peer: usize,
    size: usize,
    iters: usize,
    window: usize,
) -> anyhow::Result<()> {
    if test == Test::SendBw && me == 1 {
        // The receiver keeps `window` receives posted, then acknowledges.
        let mut posted = std::collections::VecDeque::new();
        for _ in 0..window.min(iters) {
            posted.push_back(t.recv(peer, TAG_DATA)?);
        }
        let mut next = posted.len();
        while let Some(r) = posted.pop_front() {
            t.wait(r)?;
            if next < iters {
                posted.push_back(t.recv(peer, TAG_DATA)?);
                next += 1;
            }
        }
        let a = t.send(peer, TAG_ACK, Vec::new())?;
        t.wait(a)?;
        return Ok(());
    }
    if me == 1 {
        return Ok(()); // one-sided: the target's progress needs no help from us
    }
    let mut bufs: Vec<Vec<u8>> = (0..window).map(|_| vec![0x3Cu8; size]).collect();
    let mut inflight = std::collections::VecDeque::new();
    let mut peak: f64 = 0.0;
    let start = Instant::now();
    let mut win_start = start;
    let mut done_in_win = 0usize;
    let post = |buf: Vec<u8>| -> hpc_rdma::Result<hpc_rdma::OpId> {
        match test {
            Test::WriteBw => t.put(buf, peer_key, 0),
            Test::ReadBw => t.get(peer_key, 0, size),
            _ => t.send(peer, TAG_DATA, buf),
        }
    };
    for _ in 0..iters {
        if inflight.len() == window {
            let op = inflight.pop_front().expect("window is full");
            if let Payload::Bytes(b) = t.wait(op)? {
                if b.len() == size {
                    bufs.push(b);
                }
            }
            done_in_win += 1;
            if done_in_win == window {
                let dt = win_start.elapsed().as_secs_f64();
                if dt > 0.0 {
                    peak = peak.max((window * size) as f64 / dt / MB);
                }
                win_start = Instant::now();
                done_in_win = 0;
            }
        }
        let buf = bufs.pop().unwrap_or_else(|| vec![0x3Cu8; size]);
        inflight.push_back(post(buf)?);
    }
    for op in inflight {
        t.wait(op)?;
    }
    if test == Test::SendBw {
        let a = t.recv(peer, TAG_ACK)?;
        t.wait_timeout(a, t.timeout().max(Duration::from_secs(1)))?;
    }
    let dt = start.elapsed().as_secs_f64();
    let avg = (iters * size) as f64 / dt / MB;
    super::say(&format!(
        " {:<10} {:<14} {:<18.2} {:<20.2} {:<14.6}",
        size,
        iters,
        peak.max(avg),
        avg,
        iters as f64 / dt / 1e6
    ))?;
    Ok(())
}
