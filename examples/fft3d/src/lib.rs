//! A distributed 3-D complex FFT with a pencil decomposition, as P3DFFT does
//! it, on hpc-rs collectives.
//!
//! The N × N × N grid of complex numbers is divided over a P1 × P2 process grid
//! ([`Grid`]). Rank `p1 + P1 * p2` starts with an *X pencil*: every x, the
//! p1-th block of y and the p2-th block of z. The forward transform is three
//! rounds of 1-D FFTs (`rustfft`) separated by two transposes:
//!
//! 1. FFTs along x; transpose x ↔ y among the P1 ranks of a row (same p2) →
//!    *Y pencils* (every y, x block p1, z block p2); FFTs along y;
//! 2. transpose y ↔ z among the P2 ranks of a column (same p1) → *Z pencils*
//!    (every z, x block p1, y block p2); FFTs along z.
//!
//! Rows and columns are sub-communicators made with
//! [`Comm::split`](hpc_comm::Comm::split). Each transpose is an `alltoall`,
//! cut into batches (planes of z for the first, of x for the second). With
//! [`Mode::Overlap`] batch k+1's `ialltoall` is posted, then the rank unpacks
//! and transforms batch k and packs batch k+2 while the engine moves batch
//! k+1, then waits for it: the engine's progress (a thread, the node's proxy,
//! MPI) overlaps the rank's FFTs. [`Mode::Blocking`] does the same work with a
//! blocking `alltoall` per batch.
//!
//! Every 1-D FFT works on contiguous rows; the strided work is in packing and
//! unpacking the transposes. The input is a deterministic function of the seed
//! and the global index ([`value`]), so each rank makes its own part, and
//! [`serial_fft3d`] of the whole grid is the reference the distributed result is
//! checked against ([`Fft3d::check`]).

use std::ops::Range;
use std::sync::Arc;

use hpc_comm::{Comm, ReduceOp, SharedBuf};
use num_complex::Complex;
use rustfft::{Fft, FftPlanner};

/// A complex number of two `f64`.
pub type C64 = Complex<f64>;

/// The P1 × P2 process grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    /// Ranks in a row (the first transpose's communicator).
    pub p1: usize,
    /// Ranks in a column (the second transpose's communicator).
    pub p2: usize,
}

impl Grid {
    /// `P1xP2`, e.g. `2x2` (`1xP` is a slab decomposition).
    pub fn parse(s: &str) -> Result<Grid, String> {
        // A value of 100,000 digits is not echoed whole.
        let quoted = |t: &str| format!("{:?}", hpc_io::message::cut(t));
        let (a, b) = s
            .split_once(['x', 'X'])
            .ok_or_else(|| format!("process grid {}: expected P1xP2, e.g. 2x2", quoted(s)))?;
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| {
                    format!(
                        "process grid {}: {} is not a positive integer",
                        quoted(s),
                        quoted(t)
                    )
                })
        };
        let (p1, p2) = (num(a)?, num(b)?);
        // Its size is a product taken everywhere: one that overflows is refused here.
        if p1.checked_mul(p2).is_none() {
            return Err(format!(
                "process grid {}: {p1} x {p2} ranks is too many",
                quoted(s)
            ));
        }
        Ok(Grid { p1, p2 })
    }

    /// The most square grid of `p` ranks with P1 ≤ P2 (as `MPI_Dims_create`).
    pub fn for_ranks(p: usize) -> Grid {
        let p = p.max(1);
        let p1 = (1..=p)
            .filter(|d| p % d == 0 && d * d <= p)
            .max()
            .unwrap_or(1);
        Grid { p1, p2: p / p1 }
    }

    /// Number of ranks.
    pub fn size(self) -> usize {
        self.p1 * self.p2
    }
}

impl std::fmt::Display for Grid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.p1, self.p2)
    }
}

/// One rank's share of the N³ grid: its grid coordinates and block sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decomp {
    /// Points per dimension.
    pub n: usize,
    /// The process grid.
    pub grid: Grid,
    /// This rank's row coordinate (`rank % P1`).
    pub c1: usize,
    /// This rank's column coordinate (`rank / P1`).
    pub c2: usize,
}

impl Decomp {
    /// Rank `rank`'s share; `n` must be a multiple of P1 and of P2.
    pub fn new(n: usize, grid: Grid, rank: usize) -> Result<Decomp, String> {
        if n == 0 {
            return Err("the grid needs at least one point per dimension".into());
        }
        if rank >= grid.size() {
            return Err(format!(
                "rank {rank} is outside the {grid} process grid ({} ranks)",
                grid.size()
            ));
        }
        if n % grid.p1 != 0 || n % grid.p2 != 0 {
            return Err(format!(
                "N = {n} is not a multiple of both dimensions of the {grid} process grid \
                 (each pencil holds N/P1 x N/P2 lines)"
            ));
        }
        Ok(Decomp {
            n,
            grid,
            c1: rank % grid.p1,
            c2: rank / grid.p1,
        })
    }

    /// Points per rank along a dimension split over P1.
    pub fn b1(&self) -> usize {
        self.n / self.grid.p1
    }

    /// Points per rank along a dimension split over P2.
    pub fn b2(&self) -> usize {
        self.n / self.grid.p2
    }

    /// Length of every pencil (the same for X, Y and Z pencils).
    pub fn len(&self) -> usize {
        self.b1() * self.b2() * self.n
    }

    /// Whether the pencils are empty (never: `n` ≥ 1).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// This rank's X pencil of the input: `[z][y][x]`, z in block `c2`, y in
    /// block `c1`, every x.
    pub fn input(&self, seed: u64) -> Vec<C64> {
        let (n, b1, b2) = (self.n, self.b1(), self.b2());
        let mut v = Vec::with_capacity(self.len());
        for iz in 0..b2 {
            for iy in 0..b1 {
                for x in 0..n {
                    v.push(value(seed, n, x, self.c1 * b1 + iy, self.c2 * b2 + iz));
                }
            }
        }
        v
    }

    /// Global `(x, y, z)` of index `i` of the output Z pencil (`[x][y][z]`, x in
    /// block `c1`, y in block `c2`, every z).
    pub fn output_point(&self, i: usize) -> (usize, usize, usize) {
        let (n, b2) = (self.n, self.b2());
        let z = i % n;
        let iy = (i / n) % b2;
        let ix = i / (n * b2);
        (self.c1 * self.b1() + ix, self.c2 * b2 + iy, z)
    }
}

/// The input's value at global point `(x, y, z)` of an N³ grid: real and
/// imaginary parts uniform in [-1, 1), from a hash of the seed and the index.
pub fn value(seed: u64, n: usize, x: usize, y: usize, z: usize) -> C64 {
    let i = ((z * n + y) * n + x) as u64;
    let a = splitmix64(seed ^ splitmix64(2 * i));
    let b = splitmix64(seed ^ splitmix64(2 * i + 1));
    let unit = |h: u64| (h >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
    C64::new(unit(a), unit(b))
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The whole input grid, `[z][y][x]`.
pub fn whole_input(seed: u64, n: usize) -> Vec<C64> {
    let mut v = Vec::with_capacity(n * n * n);
    for z in 0..n {
        for y in 0..n {
            for x in 0..n {
                v.push(value(seed, n, x, y, z));
            }
        }
    }
    v
}

/// The forward 3-D FFT of an N³ grid `[z][y][x]` on one core, in place
/// (unnormalised, as `rustfft`): the reference of the distributed transform.
/// It goes along z, then y, then x (the distributed transform goes x, y, z), so
/// the two agree to rounding, not bit for bit by construction.
pub fn serial_fft3d(n: usize, data: &mut [C64]) {
    assert_eq!(data.len(), n * n * n, "serial_fft3d: N^3 points expected");
    let fft = FftPlanner::new().plan_fft_forward(n);
    let mut scratch = vec![C64::default(); fft.get_inplace_scratch_len()];
    let mut line = vec![C64::default(); n];
    // Along z (stride N²), then y (stride N): gather each line, transform, scatter.
    for stride in [n * n, n] {
        for a in 0..n {
            for b in 0..n {
                let base = if stride == n {
                    a * n * n + b
                } else {
                    a * n + b
                };
                for (k, l) in line.iter_mut().enumerate() {
                    *l = data[base + k * stride];
                }
                fft.process_with_scratch(&mut line, &mut scratch);
                for (k, l) in line.iter().enumerate() {
                    data[base + k * stride] = *l;
                }
            }
        }
    }
    // Along x: contiguous rows.
    fft.process_with_scratch(data, &mut scratch);
}

/// How the transposes run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A blocking `alltoall` per batch, then that batch's FFTs (no overlap).
    Blocking,
    /// Batch k+1's `ialltoall` in flight while the rank transforms batch k.
    Overlap,
}

impl Mode {
    /// `blocking` or `overlap`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Blocking => "blocking",
            Mode::Overlap => "overlap",
        }
    }
}

/// A transpose buffer: ordinary memory, or a [`SharedBuf`] that the `Proxy`
/// engine maps once instead of reaching it by cross-memory attach.
enum Mem {
    Heap(Vec<f64>),
    Shared(SharedBuf<f64>),
}

impl Mem {
    fn new(len: usize, shared: bool) -> hpc_comm::Result<Mem> {
        Ok(if shared {
            let mut b = SharedBuf::new(len)?;
            b.fill(0.0);
            Mem::Shared(b)
        } else {
            Mem::Heap(vec![0.0; len])
        })
    }

    fn f64s(&self) -> &[f64] {
        match self {
            Mem::Heap(v) => v,
            Mem::Shared(b) => b,
        }
    }

    fn f64s_mut(&mut self) -> &mut [f64] {
        match self {
            Mem::Heap(v) => v,
            Mem::Shared(b) => b,
        }
    }

    fn c(&self) -> &[C64] {
        bytemuck::cast_slice(self.f64s())
    }

    fn c_mut(&mut self) -> &mut [C64] {
        bytemuck::cast_slice_mut(self.f64s_mut())
    }
}

/// Batch `k` of `nb` over `total` planes (sizes differ by at most one).
fn batch(total: usize, nb: usize, k: usize) -> Range<usize> {
    k * total / nb..(k + 1) * total / nb
}

/// Bytes one rank holds for an `n`^3 transform over `size` ranks: its share of the
/// grid (16-byte complex numbers) eight times (input, its pristine copy, output,
/// the Y pencils and the send and receive buffers of both transposes), plus the
/// whole grid for the check against the serial transform when `check`. Computed in
/// `u128`, so a grid too large for memory (or for `usize`) is measured, not
/// overflowed.
pub fn bytes_per_rank(n: usize, size: usize, check: bool) -> u128 {
    let points = (n as u128).checked_pow(3).unwrap_or(u128::MAX);
    let share = points.div_ceil(size.max(1) as u128);
    share
        .saturating_mul(8)
        .saturating_add(if check { points } else { 0 })
        .saturating_mul(16)
}

/// Refuses a run whose `ranks_here` ranks on this node would need more than
/// `available` bytes (`None`: unknown, not checked), before anything is allocated;
/// the message names `--n`, the bytes needed and the bytes available.
pub fn check_memory(
    n: usize,
    size: usize,
    ranks_here: usize,
    check: bool,
    available: Option<u64>,
) -> Result<(), String> {
    let Some(available) = available else {
        return Ok(());
    };
    let per_rank = bytes_per_rank(n, size, check);
    let need = per_rank.saturating_mul(ranks_here.max(1) as u128);
    if need <= available as u128 {
        return Ok(());
    }
    // A count that saturated is no measure: it is said to be beyond the largest.
    let about = |b: u128| {
        if b == u128::MAX {
            format!("more than {}", hpc_io::message::num(u128::MAX as f64))
        } else {
            format!("about {b}")
        }
    };
    Err(format!(
        "--n {n} needs {} bytes on this node ({ranks_here} rank(s) of {} \
         bytes: the {n}^3 grid of 16-byte complex numbers split over {size} rank(s), 8 \
         copies of each share{}), but {available} bytes are available (MemAvailable){}",
        about(need),
        about(per_rank),
        if check {
            ", plus the whole grid on every rank for the check"
        } else {
            ""
        },
        if check {
            "; --no-check leaves out the whole grid, more ranks or nodes share the rest"
        } else {
            "; more ranks or nodes share the grid"
        }
    ))
}

/// Settings of [`Fft3d::new`].
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    /// Points per dimension.
    pub n: usize,
    /// The process grid (its size must be the communicator's).
    pub grid: Grid,
    /// Batches per transpose (at most the planes a rank holds; at least 1).
    pub batches: usize,
    /// Blocking or overlapped transposes.
    pub mode: Mode,
    /// Transpose buffers in shared memory ([`SharedBuf`]).
    pub shared: bool,
}

/// A planned distributed forward transform: sub-communicators, FFT plan and the
/// transpose buffers of every batch.
pub struct Fft3d {
    d: Decomp,
    mode: Mode,
    comm: Comm,
    row: Comm,
    col: Comm,
    fft: Arc<dyn Fft<f64>>,
    scratch: Vec<C64>,
    /// The Y pencils, `[z][x][y]`.
    mid: Vec<C64>,
    a: (Vec<Mem>, Vec<Mem>),
    b: (Vec<Mem>, Vec<Mem>),
}

impl Fft3d {
    /// Plans the transform on `comm` (collective: every rank calls it; it splits
    /// `comm` into rows and columns).
    pub fn new(comm: Comm, s: Setup) -> Result<Fft3d, String> {
        if s.grid.size() != comm.size() {
            return Err(format!(
                "the {} process grid needs {} ranks, the job has {}",
                s.grid,
                s.grid.size(),
                comm.size()
            ));
        }
        let d = Decomp::new(s.n, s.grid, comm.rank())?;
        if s.batches == 0 {
            return Err("--batches must be at least 1".into());
        }
        let e = |e: hpc_comm::Error| e.to_string();
        let row = comm.split(d.c2 as u32, d.c1 as i64).map_err(e)?;
        let col = comm.split(d.c1 as u32, d.c2 as i64).map_err(e)?;
        let fft = FftPlanner::new().plan_fft_forward(s.n);
        let scratch = vec![C64::default(); fft.get_inplace_scratch_len()];
        let (n, b1, b2) = (d.n, d.b1(), d.b2());
        // First transpose: batches of z planes, each `b1 * b1 * nz` points per peer
        // (x block of the peer, y block of this rank); second: batches of x planes,
        // `b2 * b2 * nx` per peer.
        let nba = s.batches.min(b2);
        let nbb = s.batches.min(b1);
        let bufs =
            |nb: usize, total: usize, per_plane: usize| -> Result<(Vec<Mem>, Vec<Mem>), String> {
                let mut send = Vec::new();
                let mut recv = Vec::new();
                for k in 0..nb {
                    let len = 2 * batch(total, nb, k).len() * per_plane;
                    send.push(Mem::new(len, s.shared).map_err(e)?);
                    recv.push(Mem::new(len, s.shared).map_err(e)?);
                }
                Ok((send, recv))
            };
        let a = bufs(nba, b2, b1 * n)?;
        let b = bufs(nbb, b1, b2 * n)?;
        Ok(Fft3d {
            d,
            mode: s.mode,
            comm,
            row,
            col,
            fft,
            scratch,
            mid: vec![C64::default(); d.len()],
            a,
            b,
        })
    }

    /// This rank's decomposition.
    pub fn decomp(&self) -> Decomp {
        self.d
    }

    /// The batches each transpose runs in: `--batches`, at most one per plane of
    /// the transpose (the same on every rank), so what ran and not what was asked.
    pub fn batches(&self) -> (usize, usize) {
        (self.a.0.len(), self.b.0.len())
    }

    /// The communicator of every rank.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// The forward transform of this rank's X pencil `input` (`[z][y][x]`, see
    /// [`Decomp::input`]; overwritten) into its Z pencil `out` (`[x][y][z]`, see
    /// [`Decomp::output_point`]).
    pub fn forward(&mut self, input: &mut [C64], out: &mut [C64]) -> hpc_comm::Result<()> {
        let d = self.d;
        let (n, b1, b2) = (d.n, d.b1(), d.b2());
        assert_eq!(input.len(), d.len(), "input pencil length");
        assert_eq!(out.len(), d.len(), "output pencil length");
        let (p1, p2) = (d.grid.p1, d.grid.p2);
        let fft = &*self.fft;
        let scratch = &mut self.scratch;
        let mid = &mut self.mid;
        // The transform on the timeline (`HPC_TRACE`, `hpc run --trace`).
        let _span = tracing::info_span!("forward").entered();

        // Transpose 1 (rows): z planes in batches. Pack for peer q: [q][z][y][x in q's block].
        let nba = self.a.0.len();
        run(
            &self.row,
            self.mode,
            &mut self.a,
            |k, send: &mut [C64], scratch: &mut Vec<C64>| {
                let zs = batch(b2, nba, k);
                let nz = zs.len();
                fft.process_with_scratch(&mut input[zs.start * b1 * n..zs.end * b1 * n], scratch);
                for q in 0..p1 {
                    for iz in 0..nz {
                        for iy in 0..b1 {
                            let src = ((zs.start + iz) * b1 + iy) * n + q * b1;
                            let dst = ((q * nz + iz) * b1 + iy) * b1;
                            send[dst..dst + b1].copy_from_slice(&input[src..src + b1]);
                        }
                    }
                }
            },
            |k, recv: &[C64], scratch: &mut Vec<C64>| {
                // From peer q: [q][z][y in q's block][x in this rank's block] -> mid [z][x][y].
                let zs = batch(b2, nba, k);
                let nz = zs.len();
                for q in 0..p1 {
                    for iz in 0..nz {
                        for iy in 0..b1 {
                            let src = ((q * nz + iz) * b1 + iy) * b1;
                            for (ix, v) in recv[src..src + b1].iter().enumerate() {
                                mid[((zs.start + iz) * b1 + ix) * n + q * b1 + iy] = *v;
                            }
                        }
                    }
                }
                fft.process_with_scratch(&mut mid[zs.start * b1 * n..zs.end * b1 * n], scratch);
            },
            scratch,
        )?;

        // Transpose 2 (columns): x planes in batches. Pack for peer q:
        // [q][x][y in q's block][z in this rank's block].
        let nbb = self.b.0.len();
        let mid = &self.mid;
        run(
            &self.col,
            self.mode,
            &mut self.b,
            |k, send: &mut [C64], _: &mut Vec<C64>| {
                let xs = batch(b1, nbb, k);
                let nx = xs.len();
                for q in 0..p2 {
                    for ix in 0..nx {
                        for iy in 0..b2 {
                            let dst = ((q * nx + ix) * b2 + iy) * b2;
                            let y = q * b2 + iy;
                            for (iz, s) in send[dst..dst + b2].iter_mut().enumerate() {
                                *s = mid[(iz * b1 + xs.start + ix) * n + y];
                            }
                        }
                    }
                }
            },
            |k, recv: &[C64], scratch: &mut Vec<C64>| {
                // From peer q: [q][x][y in this rank's block][z in q's block] -> out [x][y][z].
                let xs = batch(b1, nbb, k);
                let nx = xs.len();
                for q in 0..p2 {
                    for ix in 0..nx {
                        for iy in 0..b2 {
                            let src = ((q * nx + ix) * b2 + iy) * b2;
                            let dst = ((xs.start + ix) * b2 + iy) * n + q * b2;
                            out[dst..dst + b2].copy_from_slice(&recv[src..src + b2]);
                        }
                    }
                }
                fft.process_with_scratch(&mut out[xs.start * b2 * n..xs.end * b2 * n], scratch);
            },
            scratch,
        )
    }

    /// Compares this rank's output pencil with the serial transform of the whole
    /// grid (`reference`, `[z][y][x]`, from [`serial_fft3d`]) and returns the
    /// relative L2 error over all ranks and the largest absolute error
    /// (collective).
    pub fn check(&self, out: &[C64], reference: &[C64]) -> hpc_comm::Result<(f64, f64)> {
        let n = self.d.n;
        let (mut err2, mut ref2, mut max) = (0.0f64, 0.0f64, 0.0f64);
        for (i, v) in out.iter().enumerate() {
            let (x, y, z) = self.d.output_point(i);
            let r = reference[(z * n + y) * n + x];
            let e = (v - r).norm();
            err2 += e * e;
            ref2 += r.norm_sqr();
            max = max.max(e);
        }
        let mut sums = [0.0f64; 2];
        self.comm
            .allreduce(&[err2, ref2], &mut sums, ReduceOp::Sum)?;
        let mut m = [0.0f64];
        self.comm.allreduce(&[max], &mut m, ReduceOp::Max)?;
        Ok(((sums[0] / sums[1].max(f64::MIN_POSITIVE)).sqrt(), m[0]))
    }
}

/// Runs one transpose in `bufs.0.len()` batches: `produce(k, send)` fills batch
/// k's send buffer (after its FFTs), the alltoall moves it, `consume(k, recv)`
/// unpacks and transforms it. In [`Mode::Overlap`] batch k's `ialltoall` is in
/// flight while batch k-1 is consumed and batch k+1 produced.
fn run<P, Q>(
    comm: &Comm,
    mode: Mode,
    bufs: &mut (Vec<Mem>, Vec<Mem>),
    mut produce: P,
    mut consume: Q,
    scratch: &mut Vec<C64>,
) -> hpc_comm::Result<()>
where
    P: FnMut(usize, &mut [C64], &mut Vec<C64>),
    Q: FnMut(usize, &[C64], &mut Vec<C64>),
{
    let (send, recv) = (&mut bufs.0, &mut bufs.1);
    let nb = send.len();
    // Each batch's work and transpose as spans of the timeline (`HPC_TRACE`).
    let mut produce = |k: usize, send: &mut [C64], scratch: &mut Vec<C64>| {
        let _span = tracing::info_span!("fft + pack", batch = k).entered();
        produce(k, send, scratch);
    };
    let mut consume = |k: usize, recv: &[C64], scratch: &mut Vec<C64>| {
        let _span = tracing::info_span!("unpack + fft", batch = k).entered();
        consume(k, recv, scratch);
    };
    match mode {
        Mode::Blocking => {
            for k in 0..nb {
                produce(k, send[k].c_mut(), scratch);
                let span = tracing::info_span!("transpose", batch = k).entered();
                comm.alltoall(send[k].f64s(), recv[k].f64s_mut())?;
                drop(span);
                consume(k, recv[k].c(), scratch);
            }
        }
        Mode::Overlap => {
            produce(0, send[0].c_mut(), scratch);
            for k in 0..nb {
                // From the post of batch k's ialltoall to its end: the FFTs of its
                // neighbours run inside it.
                let _span = tracing::info_span!("transpose", batch = k).entered();
                let (s_done, s_next) = send.split_at_mut(k + 1);
                let (r_done, r_next) = recv.split_at_mut(k);
                let sk: &Mem = &s_done[k];
                let rk: &mut Mem = &mut r_next[0];
                let (produce, consume, scratch) = (&mut produce, &mut consume, &mut *scratch);
                comm.scope(move |s| -> hpc_comm::Result<()> {
                    let req = s.ialltoall(sk.f64s(), rk.f64s_mut())?;
                    if k > 0 {
                        consume(k - 1, r_done[k - 1].c(), scratch);
                    }
                    if k + 1 < nb {
                        produce(k + 1, s_next[0].c_mut(), scratch);
                    }
                    req.wait()
                })?;
            }
            consume(nb - 1, recv[nb - 1].c(), scratch);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_checked_before_allocating() {
        // 64^3 points over 4 ranks: 8 shares of 65536 points, plus the whole grid.
        assert_eq!(bytes_per_rank(64, 4, false), 16 * 8 * 65536);
        assert_eq!(bytes_per_rank(64, 4, true), 16 * (8 * 65536 + 262_144));
        assert!(check_memory(64, 4, 4, true, Some(1 << 30)).is_ok());
        assert!(check_memory(64, 4, 4, true, None).is_ok());
        // --n 100000: about 1.6e16 bytes per rank; the message has the numbers.
        let e = check_memory(100_000, 1, 1, true, Some(8 << 30)).unwrap_err();
        assert!(
            e.contains("--n 100000 needs about 144000000000000000 bytes")
                && e.contains("but 8589934592 bytes are available"),
            "{e}"
        );
        // Beyond usize: measured, not overflowed.
        // Pass 15: a count beyond u128 was given as u128::MAX, "about 3402823…455
        // bytes", a figure no grid needs.
        let e = check_memory(usize::MAX, 1, 1, false, Some(1 << 40)).unwrap_err();
        assert!(
            e.contains("needs more than 3.402823669209385e38 bytes")
                && !e.contains("340282366920938463463374607431768211455"),
            "{e}"
        );
    }

    /// The 3-D DFT by its definition.
    fn dft3(n: usize, a: &[C64]) -> Vec<C64> {
        let w = |k: usize, j: usize| {
            let t = -2.0 * std::f64::consts::PI * ((k * j) % n) as f64 / n as f64;
            C64::new(t.cos(), t.sin())
        };
        let mut out = vec![C64::default(); n * n * n];
        for kz in 0..n {
            for ky in 0..n {
                for kx in 0..n {
                    let mut s = C64::default();
                    for z in 0..n {
                        for y in 0..n {
                            for x in 0..n {
                                s += a[(z * n + y) * n + x] * w(kx, x) * w(ky, y) * w(kz, z);
                            }
                        }
                    }
                    out[(kz * n + ky) * n + kx] = s;
                }
            }
        }
        out
    }

    #[test]
    fn serial_fft_is_the_dft() {
        for n in [1, 2, 3, 4, 6] {
            let a = whole_input(7, n);
            let want = dft3(n, &a);
            let mut got = a.clone();
            serial_fft3d(n, &mut got);
            let err = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (g - w).norm())
                .fold(0.0, f64::max);
            assert!(err < 1e-10 * (n * n * n) as f64, "n={n}: {err}");
        }
    }

    #[test]
    fn grids_parse_and_default() {
        assert_eq!(Grid::parse("2x3").unwrap(), Grid { p1: 2, p2: 3 });
        assert!(Grid::parse("2").unwrap_err().contains("P1xP2"));
        assert!(Grid::parse("0x2").unwrap_err().contains("positive"));
        assert_eq!(Grid::for_ranks(1), Grid { p1: 1, p2: 1 });
        assert_eq!(Grid::for_ranks(4), Grid { p1: 2, p2: 2 });
        assert_eq!(Grid::for_ranks(6), Grid { p1: 2, p2: 3 });
        assert_eq!(Grid::for_ranks(7), Grid { p1: 1, p2: 7 });
    }

    #[test]
    fn decompositions_cover_the_grid_once() {
        let n = 6;
        for grid in [
            Grid { p1: 2, p2: 3 },
            Grid { p1: 3, p2: 1 },
            Grid { p1: 1, p2: 2 },
        ] {
            let mut seen = vec![0u8; n * n * n];
            for r in 0..grid.size() {
                let d = Decomp::new(n, grid, r).unwrap();
                for i in 0..d.len() {
                    let (x, y, z) = d.output_point(i);
                    seen[(z * n + y) * n + x] += 1;
                }
            }
            assert!(seen.iter().all(|&s| s == 1), "{grid}");
        }
        assert!(Decomp::new(5, Grid { p1: 2, p2: 1 }, 0)
            .unwrap_err()
            .contains("multiple"));
        assert!(Decomp::new(4, Grid { p1: 2, p2: 1 }, 2)
            .unwrap_err()
            .contains("outside"));
    }

    #[test]
    fn a_grid_of_100000_digits_is_not_echoed_whole() {
        for g in [format!("{}x1", "1".repeat(100_000)), "x".repeat(100_000)] {
            let e = Grid::parse(&g).unwrap_err();
            assert!(
                e.len() < 1000 && e.contains("more characters"),
                "{}",
                &e[..200]
            );
        }
        assert_eq!(
            Grid::parse("0x1").unwrap_err(),
            "process grid \"0x1\": \"0\" is not a positive integer"
        );
    }

    #[test]
    fn a_grid_whose_size_overflows_is_refused() {
        let e = Grid::parse("4294967296x4294967296").unwrap_err();
        assert!(e.contains("is too many"), "{e}");
        assert_eq!(Grid::parse("2x3").unwrap().size(), 6);
    }

    #[test]
    fn batches_split_evenly() {
        let all: Vec<usize> = (0..3).flat_map(|k| batch(8, 3, k)).collect();
        assert_eq!(all, (0..8).collect::<Vec<_>>());
    }
}
