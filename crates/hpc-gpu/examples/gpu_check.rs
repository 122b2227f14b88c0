//! GPU verification of hpc-gpu: correctness against a float64 CPU
//! reference, bandwidth (nccl-tests' busbw) and the reduction kernel beside
//! a device-to-device copy. Run one process per rank, e.g.
//! `hpc run -n 4 -- gpu_check --backend native`; see benches/gpu/check.sh.
//!
//! Options: `--backend auto|nccl|native`, `--max-log2 N` (largest allreduce
//! is 2^N elements, 4 to 34, default 28; below 24 only the sizes around the
//! kernels' edges are checked, as the device script's dry run does), `--no-bench`.

use std::time::Instant;

use half::{bf16, f16};
use hpc_gpu::bandwidth::{bandwidth, CollKind};
use hpc_gpu::cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut};
use hpc_gpu::{BackendChoice, GpuComm, GpuElement, GpuOp, Options};
use rand::{Rng, SeedableRng};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Conversion to and from f64 for the reference.
trait Val: GpuElement + PartialEq {
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    /// Relative tolerance of one rounding.
    const EPS: f64;
}
impl Val for f32 {
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    const EPS: f64 = 1.2e-7;
}
impl Val for f64 {
    fn from_f64(x: f64) -> Self {
        x
    }
    fn to_f64(self) -> f64 {
        self
    }
    const EPS: f64 = 2.3e-16;
}
impl Val for f16 {
    fn from_f64(x: f64) -> Self {
        f16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    const EPS: f64 = 9.8e-4;
}
impl Val for bf16 {
    fn from_f64(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    const EPS: f64 = 7.9e-3;
}
impl Val for i32 {
    fn from_f64(x: f64) -> Self {
        x as i32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    const EPS: f64 = 0.0;
}

/// Rank `r`'s input for case `case`: random, never zero.
fn input<T: Val>(r: usize, case: u64, n: usize, op: GpuOp) -> Vec<T> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(case * 1000 + r as u64);
    let int = T::EPS == 0.0;
    (0..n)
        .map(|_| {
            let sign = if rng.random() { 1.0 } else { -1.0 };
            let x = match (op, int) {
                (GpuOp::Prod, true) => [1.0, 2.0, 3.0][rng.random_range(0..3)],
                (GpuOp::Prod, false) => rng.random_range(0.5..1.5),
                (_, true) => f64::from(rng.random_range(1..1000)),
                (_, false) => rng.random_range(0.01..1.0),
            };
            T::from_f64(sign * x)
        })
        .collect()
}

fn combine(op: GpuOp, a: f64, b: f64, int: bool) -> f64 {
    let v = match op {
        GpuOp::Sum => a + b,
        GpuOp::Prod => a * b,
        GpuOp::Min => a.min(b),
        GpuOp::Max => a.max(b),
    };
    if int {
        f64::from((v as i64) as i32)
    } else {
        v
    }
}

/// Checks `got` against the reduction of `inputs` at element offset `base`.
fn verify<T: Val>(what: &str, got: &[T], inputs: &[Vec<T>], base: usize, op: GpuOp) -> Res<()> {
    let int = T::EPS == 0.0;
    let n = inputs.len() as f64;
    for (i, g) in got.iter().enumerate() {
        let x0 = inputs[0][base + i].to_f64();
        let want = inputs[1..]
            .iter()
            .fold(x0, |a, v| combine(op, a, v[base + i].to_f64(), int));
        let g = g.to_f64();
        if g.is_nan() {
            return Err(format!("{what}: element {i} not written (NaN sentinel left)").into());
        }
        let scale: f64 = match op {
            GpuOp::Sum => inputs.iter().map(|v| v[base + i].to_f64().abs()).sum(),
            GpuOp::Prod => want.abs(),
            _ => 0.0,
        };
        let tol = 2.0 * n * T::EPS * scale;
        if (g - want).abs() > tol {
            return Err(format!("{what}: element {i}: got {g}, want {want} (tol {tol})").into());
        }
    }
    Ok(())
}

fn poison<T: GpuElement>(buf: &mut CudaSlice<T>, stream: &CudaStream) -> Res<()> {
    let bytes = buf.len() * std::mem::size_of::<T>();
    let (p, _g) = buf.device_ptr_mut(stream);
    // SAFETY: `p` is `bytes` bytes of device memory owned by `buf`.
    unsafe {
        hpc_gpu::cudarc::driver::result::memset_d8_async(p, 0xFF, bytes, stream.cu_stream())
    }?;
    Ok(())
}

/// A device buffer filled with the 0xFF sentinel (NaN for every float type).
fn alloc<T: GpuElement>(s: &std::sync::Arc<CudaStream>, n: usize) -> Res<CudaSlice<T>> {
    // SAFETY: the contents are set by `poison` before anything reads them.
    let mut b = unsafe { s.alloc::<T>(n) }?;
    poison(&mut b, s)?;
    Ok(b)
}

fn check_type<T: Val>(
    comm: &GpuComm<'_>,
    sizes: &[usize],
    ops: &[GpuOp],
    case: &mut u64,
) -> Res<usize> {
    let s = comm.stream();
    let (k, me) = (comm.size(), comm.rank());
    let mut checks = 0;
    for &n in sizes {
        for &op in ops {
            *case += 1;
            let ins: Vec<Vec<T>> = (0..k).map(|r| input::<T>(r, *case, n, op)).collect();
            let send = s.clone_htod(&ins[me])?;
            let mut recv = alloc::<T>(&s, n)?;
            poison(&mut recv, &s)?;
            comm.all_reduce(&send, &mut recv, op, &s)?;
            verify(
                &format!("all_reduce {} {op} n={n}", std::any::type_name::<T>()),
                &s.clone_dtoh(&recv)?,
                &ins,
                0,
                op,
            )?;
            let mut inplace = s.clone_htod(&ins[me])?;
            comm.all_reduce_in_place(&mut inplace, op, &s)?;
            verify(
                &format!("all_reduce in place {op} n={n}"),
                &s.clone_dtoh(&inplace)?,
                &ins,
                0,
                op,
            )?;
            checks += 2;
            if n <= 1 << 20 {
                // Reduce-scatter of k blocks of n elements, allgather, broadcast.
                let big: Vec<Vec<T>> = (0..k)
                    .map(|r| input::<T>(r, *case + 7_000_000, n * k, op))
                    .collect();
                let send = s.clone_htod(&big[me])?;
                let mut out = alloc::<T>(&s, n)?;
                poison(&mut out, &s)?;
                comm.reduce_scatter(&send, &mut out, op, &s)?;
                verify(
                    &format!("reduce_scatter {op} n={n}"),
                    &s.clone_dtoh(&out)?,
                    &big,
                    me * n,
                    op,
                )?;
                let mine = s.clone_htod(&ins[me])?;
                let mut all = alloc::<T>(&s, n * k)?;
                poison(&mut all, &s)?;
                comm.all_gather(&mine, &mut all, &s)?;
                let got = s.clone_dtoh(&all)?;
                for r in 0..k {
                    if got[r * n..(r + 1) * n]
                        .iter()
                        .zip(&ins[r])
                        .any(|(a, b)| a.to_f64() != b.to_f64())
                    {
                        return Err(format!("all_gather n={n}: block {r} differs").into());
                    }
                }
                let root = *case as usize % k;
                let mut b = s.clone_htod(&ins[me])?;
                comm.broadcast_in_place(root, &mut b, &s)?;
                if s.clone_dtoh(&b)?
                    .iter()
                    .zip(&ins[root])
                    .any(|(a, b)| a.to_f64() != b.to_f64())
                {
                    return Err(format!("broadcast n={n} root {root} differs").into());
                }
                checks += 3;
            }
        }
    }
    Ok(checks)
}

fn time_it(
    comm: &GpuComm<'_>,
    s: &CudaStream,
    iters: usize,
    mut f: impl FnMut() -> Res<()>,
) -> Res<std::time::Duration> {
    f()?;
    s.synchronize()?;
    let t = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    s.synchronize()?;
    let _ = comm.rank();
    Ok(t.elapsed() / iters as u32)
}

/// Every reduction of every element type against a float64 reference, on
/// sizes around the kernels' edges, then f32 sums up to `2^max_log2`
/// elements; returns the number of checks.
fn check_all(comm: &GpuComm<'_>, max_log2: u32) -> Res<usize> {
    let mut sizes = vec![
        1usize,
        2,
        3,
        7,
        8,
        9,
        15,
        16,
        17,
        31,
        1000,
        4097,
        65_537,
        (1 << 20) + 3,
    ];
    let mut case = 0;
    let mut checks = 0;
    checks += check_type::<f32>(comm, &sizes, &GpuOp::ALL, &mut case)?;
    checks += check_type::<f64>(comm, &sizes, &GpuOp::ALL, &mut case)?;
    checks += check_type::<f16>(comm, &sizes, &GpuOp::ALL, &mut case)?;
    checks += check_type::<bf16>(comm, &sizes, &GpuOp::ALL, &mut case)?;
    checks += check_type::<i32>(comm, &sizes, &GpuOp::ALL, &mut case)?;
    // Large vectors (up to 2^max_log2 elements): f32 sum only, to keep the
    // CPU reference within the time budget.
    sizes = (24..=max_log2).step_by(2).map(|l| 1usize << l).collect();
    checks += check_type::<f32>(comm, &sizes, &[GpuOp::Sum], &mut case)?;
    Ok(checks)
}

/// Bus bandwidth of each collective, nccl-tests style (f32 sum); rank 0 prints it.
fn bench_collectives(comm: &GpuComm<'_>) -> Res<()> {
    let s = comm.stream();
    let (k, me) = (comm.size(), comm.rank());
    if me == 0 {
        println!(
            "{:>14} {:>14} {:>10} {:>10} {:>10}",
            "collective", "bytes", "time_us", "algbw", "busbw"
        );
    }
    for kind in CollKind::ALL {
        for l in [10u32, 14, 18, 22, 26, 28] {
            let n = 1usize << l;
            let bytes = n * 4;
            let iters = if l >= 26 { 5 } else { 20 };
            let send = s.alloc_zeros::<f32>(n)?;
            let mut recv = s.alloc_zeros::<f32>(n)?;
            let small = s.alloc_zeros::<f32>((n / k).max(1))?;
            let t = match kind {
                CollKind::AllReduce => time_it(comm, &s, iters, || {
                    Ok(comm.all_reduce(&send, &mut recv, GpuOp::Sum, &s)?)
                })?,
                CollKind::ReduceScatter => {
                    let mut out = s.alloc_zeros::<f32>(n / k)?;
                    let send = s.alloc_zeros::<f32>(n / k * k)?;
                    time_it(comm, &s, iters, || {
                        Ok(comm.reduce_scatter(&send, &mut out, GpuOp::Sum, &s)?)
                    })?
                }
                CollKind::AllGather => {
                    let mut out = s.alloc_zeros::<f32>(small.len() * k)?;
                    time_it(comm, &s, iters, || {
                        Ok(comm.all_gather(&small, &mut out, &s)?)
                    })?
                }
                CollKind::Broadcast => time_it(comm, &s, iters, || {
                    Ok(comm.broadcast(0, &send, &mut recv, &s)?)
                })?,
            };
            let b = bandwidth(kind, k, bytes, t);
            if me == 0 {
                println!(
                    "{:>14} {:>14} {:>10.1} {:>10.2} {:>10.2}",
                    kind.name(),
                    bytes,
                    t.as_secs_f64() * 1e6,
                    b.algbw,
                    b.busbw
                );
            }
        }
    }
    Ok(())
}

/// The reduction kernel beside a device-to-device copy (run on rank 0).
fn bench_reduce_kernel(comm: &GpuComm<'_>) -> Res<()> {
    let s = comm.stream();
    println!(
        "{:>10} {:>8} {:>12} {:>12} {:>8}",
        "bytes", "type", "copy GB/s", "reduce GB/s", "ratio"
    );
    for mib in [256usize, 1024] {
        let n = mib << 18; // f32 elements
        let src = s.alloc_zeros::<f32>(n)?;
        let mut dst = s.alloc_zeros::<f32>(n)?;
        let tc = time_it(comm, &s, 10, || Ok(s.memcpy_dtod(&src, &mut dst)?))?;
        let tr = time_it(comm, &s, 10, || {
            Ok(comm.reduce_local(&mut dst, &src, GpuOp::Sum, &s)?)
        })?;
        // Copy moves 2 bytes per byte (read + write), the reduction 3.
        let bytes = (n * 4) as f64;
        let (c, r) = (
            2.0 * bytes / tc.as_secs_f64() / 1e9,
            3.0 * bytes / tr.as_secs_f64() / 1e9,
        );
        println!(
            "{:>10} {:>8} {:>12.1} {:>12.1} {:>8.2}{}",
            n * 4,
            "f32",
            c,
            r,
            r / c,
            if r / c >= 0.8 {
                ""
            } else {
                "  (below the 0.80 target)"
            }
        );
    }
    Ok(())
}

fn main() -> Res<()> {
    // Every argument is checked: one that is not UTF-8, an unknown flag or a value
    // out of its set is an error naming it (never a panic, never the default).
    let args = std::env::args_os()
        .skip(1)
        .map(|a| {
            a.into_string()
                .map_err(|a| format!("argument {a:?} is not UTF-8 text"))
        })
        .collect::<Result<Vec<String>, _>>()?;
    let (mut backend, mut max_log2, mut bench) = (BackendChoice::Auto, 28u32, true);
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let mut value = || rest.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--backend" => {
                backend = match value()?.as_str() {
                    "auto" => BackendChoice::Auto,
                    "nccl" => BackendChoice::Nccl,
                    "native" => BackendChoice::Native,
                    v => return Err(format!("--backend {v}: auto, nccl or native").into()),
                }
            }
            "--max-log2" => {
                let v = value()?;
                max_log2 = v
                    .parse()
                    .ok()
                    .filter(|n| (4..=34).contains(n))
                    .ok_or_else(|| format!("--max-log2 {v}: a whole number from 4 to 34"))?;
            }
            "--no-bench" => bench = false,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let world = hpc_runtime::World::init()?;
    let comm = match GpuComm::with_options(
        &world,
        Options {
            backend,
            device: None,
        },
    ) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gpu_check: rank {}: {e}", world.rank());
            std::process::exit(2);
        }
    };
    let (k, me) = (comm.size(), comm.rank());
    if me == 0 {
        let (name, drv, cc) = comm.device_info()?;
        println!(
            "device: {name} (sm_{}{}), driver CUDA version {}.{}, ranks {k}, backend {:?}",
            cc.0,
            cc.1,
            drv / 1000,
            (drv % 1000) / 10,
            comm.backend()
        );
    }
    let checks = check_all(&comm, max_log2)?;
    world.barrier()?;
    if me == 0 {
        println!("correctness: {checks} checks passed on every rank (float64 reference, NaN-poisoned outputs)");
    }
    if !bench {
        return Ok(());
    }
    bench_collectives(&comm)?;
    if me == 0 {
        bench_reduce_kernel(&comm)?;
    }
    world.barrier()?;
    Ok(())
}
