//! Side-by-side transport benchmark: hpc-rdma against references measured in the
//! same run, printed as one table (size, ours, reference, ratio).
//!
//! - shm 8-byte half round trip (put ping-pong polling the target memory, send/recv
//!   ping-pong, and send/recv ping-pong receiving into a reused buffer with
//!   `recv_into`), and send/recv at 64 B, 4 KiB and 64 KiB, vs Open MPI's shared
//!   memory (`mpi_pingpong`, if given) at the same sizes, alternating round by round;
//!   each figure is the median of the rounds' medians, with their range;
//! - shm 1 MiB put bandwidth vs a one-thread 1 MiB `memcpy` in the same process;
//! - tcp 1 MiB put bandwidth between two network namespaces vs a plain socket stream
//!   between the same namespaces (needs root; skipped otherwise).
//!
//! Usage: `transport [--mpi-pingpong PATH] [--iters N] [--rounds N] [--latency-only]` (the last
//! skips the bandwidth rows); `benches/transport.sh` builds
//! everything and runs it. Ranks are this binary re-executed (`BENCH_ROLE`), joined
//! through an `hpc_runtime::Coordinator`.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hpc_benches::median;
use hpc_rdma::{Choice, Options, Source, Transport};
use hpc_runtime::{Coordinator, World};

const MIB: usize = 1 << 20;

/// Message sizes of the send/recv rows (the first is the 8-byte latency row).
const SIZES: [usize; 4] = [8, 64, 4096, 65536];

/// Round trips at `size`: fewer for large messages, so that every size takes about
/// as long.
fn iters_for(size: usize, iters: usize) -> usize {
    if size > 16384 {
        (iters / 20).max(1000)
    } else {
        iters
    }
}

fn label(size: usize) -> String {
    match size {
        s if s >= 1024 => format!("{} KiB", s / 1024),
        s => format!("{s} B"),
    }
}

/// Median, minimum and maximum of the rounds' figures.
fn spread(xs: &[f64]) -> (f64, f64, f64) {
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (median(xs), lo, hi)
}

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn transport(world: &World, choice: Choice) -> Transport {
    Transport::with_options(
        world,
        Options {
            backend: choice,
            ..Options::default()
        },
    )
    .expect("transport")
}

/// Put ping-pong polling the last 8 bytes; returns median half round trip (us).
fn put_pingpong(world: &World, t: &Transport, iters: usize) -> f64 {
    let me = world.rank();
    let region = t.register(64).unwrap();
    let keys = t.exchange_keys(world, &region).unwrap();
    let pk = keys[1 - me];
    world.barrier().unwrap();
    let mut times = Vec::with_capacity(iters);
    for i in 1..=(iters + iters / 10) as u64 {
        let t0 = Instant::now();
        let wait = |seq: u64| {
            let mut spins = 0u32;
            while region.load_u64(0).unwrap() != seq {
                spins += 1;
                if spins > 2_000 {
                    std::thread::yield_now();
                }
            }
        };
        if me == 0 {
            let op = t.put(i.to_le_bytes().to_vec(), &pk, 0).unwrap();
            wait(i);
            t.wait(op).unwrap();
        } else {
            wait(i);
            let op = t.put(i.to_le_bytes().to_vec(), &pk, 0).unwrap();
            t.wait(op).unwrap();
        }
        if i as usize > iters / 10 {
            times.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    median(&times)
}

/// Send/recv ping-pong of `size` bytes; median half round trip (us).
fn send_pingpong(world: &World, t: &Transport, size: usize, iters: usize) -> f64 {
    let me = world.rank();
    let peer = 1 - me;
    world.barrier().unwrap();
    let mut times = Vec::with_capacity(iters);
    let mut msg = vec![0u8; size];
    for i in 0..iters + iters / 10 {
        let t0 = Instant::now();
        if me == 0 {
            let s = t.send(peer, 1, std::mem::take(&mut msg)).unwrap();
            let r = t.recv(peer, 1).unwrap();
            msg = t.wait(s).unwrap().into_bytes();
            t.wait(r).unwrap();
        } else {
            let r = t.recv(peer, 1).unwrap();
            msg = t.wait(r).unwrap().into_bytes();
            let s = t.send(peer, 1, std::mem::take(&mut msg)).unwrap();
            msg = t.wait(s).unwrap().into_bytes();
        }
        if i >= iters / 10 {
            times.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    median(&times)
}

/// Send/recv ping-pong of 8 bytes receiving into one reused buffer (`recv_into`,
/// as the Open MPI reference receives into its buffer); median half round trip (us).
fn send_into_pingpong(world: &World, t: &Transport, iters: usize) -> f64 {
    let me = world.rank();
    let peer = 1 - me;
    world.barrier().unwrap();
    let mut times = Vec::with_capacity(iters);
    let mut msg = vec![0u8; 8];
    let mut buf = [0u8; 8];
    for i in 0..iters + iters / 10 {
        let t0 = Instant::now();
        if me == 0 {
            let s = t.send(peer, 1, std::mem::take(&mut msg)).unwrap();
            let r = t.recv_into(peer, 1, &mut buf).unwrap();
            msg = t.wait(s).unwrap().into_bytes();
            r.wait().unwrap();
        } else {
            let n = t.recv_into(peer, 1, &mut buf).unwrap().wait().unwrap();
            msg.copy_from_slice(&buf[..n]);
            let s = t.send(peer, 1, std::mem::take(&mut msg)).unwrap();
            msg = t.wait(s).unwrap().into_bytes();
        }
        if i >= iters / 10 {
            times.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    median(&times)
}

/// Rank 0 puts `size` bytes `iters` times (window 16, zero-copy from one registered
/// source) into rank 1, in 5 repetitions interleaved with 5 repetitions of the
/// reference `reference(rep)` (run on both ranks); best MB/s (2^20) of each.
fn put_bw_vs(
    world: &World,
    t: &Transport,
    size: usize,
    iters: usize,
    mut reference: impl FnMut() -> f64,
) -> (f64, f64) {
    let me = world.rank();
    let region = t.register(size).unwrap();
    let keys = t.exchange_keys(world, &region).unwrap();
    let pk = keys[1 - me];
    let src = t.register(size).unwrap();
    src.fill(1);
    let (mut ours, mut theirs) = (0f64, 0f64);
    for _rep in 0..5 {
        world.barrier().unwrap();
        if me == 0 {
            let start = Instant::now();
            let mut inflight = std::collections::VecDeque::new();
            for _ in 0..iters {
                if inflight.len() == 16 {
                    t.wait(inflight.pop_front().unwrap()).unwrap();
                }
                let s = Source::Region {
                    region: src.clone(),
                    offset: 0,
                    len: size,
                };
                inflight.push_back(t.put(s, &pk, 0).unwrap());
            }
            for op in inflight {
                t.wait(op).unwrap();
            }
            ours = ours.max((size * iters) as f64 / start.elapsed().as_secs_f64() / MIB as f64);
        }
        world.barrier().unwrap();
        theirs = theirs.max(reference());
    }
    (ours, theirs)
}

/// One-thread memcpy of `size` bytes `iters` times; MB/s (2^20).
fn memcpy_bw(src: &[u8], dst: &mut [u8], iters: usize) -> f64 {
    let start = Instant::now();
    for i in 0..iters {
        dst.copy_from_slice(src);
        std::hint::black_box(&mut dst[i % src.len()]);
    }
    (src.len() * iters) as f64 / start.elapsed().as_secs_f64() / MIB as f64
}

/// A plain TCP connection between ranks 0 and 1.
fn plain_tcp(world: &World) -> TcpStream {
    let ip: IpAddr = std::env::var("BENCH_IP")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let listener = TcpListener::bind((ip, 0)).unwrap();
    let addrs = world
        .allgather(listener.local_addr().unwrap().to_string().as_bytes())
        .unwrap();
    // Rank 1 connects to rank 0, as the transport's higher rank does.
    let s = if world.rank() == 1 {
        let addr: std::net::SocketAddr = String::from_utf8_lossy(&addrs[0]).parse().unwrap();
        TcpStream::connect(addr).unwrap()
    } else {
        listener.accept().unwrap().0
    };
    s.set_nodelay(true).unwrap();
    s
}

/// Streams `iters` writes of `size` bytes from rank 0 to rank 1 over `s`; MB/s.
fn plain_tcp_bw(me: usize, s: &mut TcpStream, size: usize, iters: usize) -> f64 {
    let mut buf = vec![1u8; size];
    let start = Instant::now();
    if me == 0 {
        for _ in 0..iters {
            s.write_all(&buf).unwrap();
        }
        let mut ack = [0u8; 1];
        s.read_exact(&mut ack).unwrap();
    } else {
        for _ in 0..iters {
            s.read_exact(&mut buf).unwrap();
        }
        s.write_all(&[1]).unwrap();
    }
    (size * iters) as f64 / start.elapsed().as_secs_f64() / MIB as f64
}

fn child(role: &str) {
    let world = World::init().unwrap();
    pin(world.rank() % 2);
    let iters: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let out = match role {
        "shm-lat" => {
            let t = transport(&world, Choice::Shm);
            let put = put_pingpong(&world, &t, iters);
            let send = send_pingpong(&world, &t, 8, iters);
            let into = send_into_pingpong(&world, &t, iters);
            let mut out = format!("{put} {send} {into}");
            for &size in &SIZES[1..] {
                let v = send_pingpong(&world, &t, size, iters_for(size, iters));
                out.push_str(&format!(" {v}"));
            }
            out
        }
        "shm-bw" => {
            let t = transport(&world, Choice::Shm);
            let src = vec![1u8; MIB];
            let mut dst = vec![0u8; MIB];
            let me = world.rank();
            let (ours, copy) = put_bw_vs(&world, &t, MIB, 2000, || {
                if me == 0 {
                    memcpy_bw(&src, &mut dst, 2000)
                } else {
                    0.0
                }
            });
            format!("{ours} {copy}")
        }
        "tcp-bw" => {
            let t = transport(&world, Choice::Tcp);
            let mut s = plain_tcp(&world);
            let me = world.rank();
            let (ours, plain) = put_bw_vs(&world, &t, MIB, 1000, || {
                plain_tcp_bw(me, &mut s, MIB, 1000)
            });
            format!("{ours} {plain}")
        }
        other => panic!("unknown role {other}"),
    };
    if world.rank() == 0 {
        println!("RESULT {out}");
    }
}

/// Runs 2 ranks of this binary in `role`; `netns[r]` optionally names rank r's
/// namespace. Returns rank 0's RESULT numbers.
fn run_ranks(
    role: &str,
    coord: &Coordinator,
    netns: Option<&[String; 2]>,
    ips: [Option<Ipv4Addr>; 2],
) -> Vec<f64> {
    let exe = std::env::current_exe().unwrap();
    let kids: Vec<_> = (0..2)
        .map(|r| {
            let mut c = match netns {
                Some(ns) => {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", &ns[r]]).arg(&exe);
                    c
                }
                None => Command::new(&exe),
            };
            c.env("BENCH_ROLE", role)
                .env(
                    hpc_runtime::env::NODE_NAME,
                    if netns.is_some() {
                        format!("node{r}")
                    } else {
                        "node".into()
                    },
                )
                .envs(coord.rank_env(r))
                .env(hpc_runtime::env::TIMEOUT, "60")
                .stdout(Stdio::piped());
            if let Some(ip) = ips[r] {
                c.env("BENCH_IP", ip.to_string());
            }
            c.spawn().unwrap()
        })
        .collect();
    let outs: Vec<_> = kids
        .into_iter()
        .map(|k| k.wait_with_output().unwrap())
        .collect();
    let text = String::from_utf8_lossy(&outs[0].stdout).into_owned();
    assert!(
        outs.iter().all(|o| o.status.success()),
        "{role} failed: {text}"
    );
    text.lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("{role}: no result in {text}"))
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect()
}

fn local_job(role: &str) -> Vec<f64> {
    let secret = hpc_runtime::random_u64().expect("random bytes from the kernel");
    let coord = Coordinator::start(
        2,
        secret,
        Duration::from_secs(60),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
    )
    .unwrap();
    run_ranks(role, &coord, None, [None, None])
}

fn sh(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// tcp in two network namespaces joined by a veth pair (10.231.x.{1,2}/24).
fn netns_job() -> Option<Vec<f64>> {
    let id = hpc_runtime::random_u64().expect("random bytes from the kernel") & 0xff_ffff;
    let sub = (id % 250) as u8 + 1;
    let ns = [format!("hpcb{id:06x}a"), format!("hpcb{id:06x}b")];
    let veth = [format!("hb{id:06x}a"), format!("hb{id:06x}b")];
    let ips = [
        Ipv4Addr::new(10, 231, sub, 1),
        Ipv4Addr::new(10, 231, sub, 2),
    ];
    let mut ok = sh(&[
        "ip", "link", "add", &veth[0], "type", "veth", "peer", "name", &veth[1],
    ]);
    for i in 0..2 {
        let cidr = format!("{}/24", ips[i]);
        ok = ok
            && sh(&["ip", "netns", "add", &ns[i]])
            && sh(&["ip", "-n", &ns[i], "link", "set", "lo", "up"])
            && sh(&["ip", "link", "set", &veth[i], "netns", &ns[i]])
            && sh(&["ip", "-n", &ns[i], "addr", "add", &cidr, "dev", &veth[i]])
            && sh(&["ip", "-n", &ns[i], "link", "set", &veth[i], "up"]);
    }
    let result = if ok {
        let secret = hpc_runtime::random_u64().expect("random bytes from the kernel");
        let path = format!("/run/netns/{}", ns[0]);
        let ip0 = ips[0];
        let coord = std::thread::spawn(move || {
            let f = std::fs::File::open(path).unwrap();
            use std::os::fd::AsRawFd;
            // SAFETY: setns on an open namespace file; affects only this thread, which
            // starts the coordinator so that its listener lives in namespace 0.
            assert_eq!(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
            Coordinator::start(2, secret, Duration::from_secs(60), IpAddr::V4(ip0)).unwrap()
        })
        .join()
        .unwrap();
        Some(run_ranks(
            "tcp-bw",
            &coord,
            Some(&ns),
            [Some(ips[0]), Some(ips[1])],
        ))
    } else {
        None
    };
    for n in &ns {
        sh(&["ip", "netns", "del", n]);
    }
    result
}

fn mpi_ref(path: &str, size: usize, iters: usize) -> Option<f64> {
    let mpirun = ["mpirun.openmpi", "mpirun"]
        .into_iter()
        .find(|m| sh(&["sh", "-c", &format!("command -v {m} >/dev/null")]))?;
    let out = Command::new(mpirun)
        .args([
            "--oversubscribe",
            "-np",
            "2",
            "--mca",
            "btl",
            "self,vader",
            path,
        ])
        .arg(size.to_string())
        .arg(iters.to_string())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("mpi_half_rtt_us "))
        .and_then(|v| v.trim().parse().ok())
}

fn main() {
    if let Ok(role) = std::env::var("BENCH_ROLE") {
        child(&role);
        return;
    }
    let mut args = std::env::args().skip(1);
    let mut mpi = None;
    let mut iters = 100_000usize;
    let mut latency_only = false;
    let mut rounds = 5usize;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--mpi-pingpong" => mpi = args.next(),
            "--rounds" => rounds = args.next().and_then(|s| s.parse().ok()).unwrap_or(rounds),
            "--latency-only" => latency_only = true,
            "--iters" => iters = args.next().and_then(|s| s.parse().ok()).unwrap_or(iters),
            other => {
                eprintln!(
                    "usage: transport [--mpi-pingpong PATH] [--iters N] [--rounds N] \
                     [--latency-only] (got {other})"
                );
                std::process::exit(2);
            }
        }
    }
    // SAFETY: single-threaded at this point; the children read it.
    unsafe { std::env::set_var("BENCH_ITERS", iters.to_string()) };
    // Latencies: ours and Open MPI's alternately, `rounds` rounds; each figure is
    // the median of one round's round trips, and the table gives the median of the
    // rounds with their range. On a VM the two vCPUs' placement on the host changes
    // (siblings of one core or not) and moves both figures; alternating keeps the
    // comparison within one placement.
    // ours[i]: put 8 B, send 8 B, send_into 8 B, send at SIZES[1..].
    let mut ours: Vec<Vec<f64>> = vec![Vec::new(); 3 + SIZES.len() - 1];
    let mut theirs: Vec<Vec<f64>> = vec![Vec::new(); SIZES.len()];
    for _ in 0..rounds {
        for (all, now) in ours.iter_mut().zip(local_job("shm-lat")) {
            all.push(now);
        }
        if let Some(p) = mpi.as_deref() {
            for (i, &size) in SIZES.iter().enumerate() {
                if let Some(m) = mpi_ref(p, size, iters_for(size, iters)) {
                    theirs[i].push(m);
                }
            }
        }
    }
    let (bw, tcp) = if latency_only {
        (None, None)
    } else {
        (Some(local_job("shm-bw")), netns_job())
    };

    println!(
        "{:<40} {:>7} {:>22} {:>22} {:>6}",
        "measurement (median of rounds [min-max])", "size", "ours", "reference", "ratio"
    );
    let lat_row = |what: &str, size: usize, ours: &[f64], reference: &[f64]| {
        let (m, lo, hi) = spread(ours);
        let ours = format!("{m:.3} [{lo:.3}-{hi:.3}] us");
        if reference.is_empty() {
            println!(
                "{what:<40} {:>7} {ours:>22} {:>22} {:>6}",
                label(size),
                "n/a",
                "-"
            );
        } else {
            let (r, rlo, rhi) = spread(reference);
            let theirs = format!("{r:.3} [{rlo:.3}-{rhi:.3}] us");
            println!(
                "{what:<40} {:>7} {ours:>22} {theirs:>22} {:>6.3}",
                label(size),
                m / r
            );
        }
    };
    println!("{rounds} rounds, ours and Open MPI's (btl self,vader) alternating");
    lat_row(
        "shm put half RTT vs Open MPI send/recv",
        8,
        &ours[0],
        &theirs[0],
    );
    lat_row(
        "shm send/recv half RTT vs Open MPI",
        8,
        &ours[1],
        &theirs[0],
    );
    lat_row(
        "shm send/recv_into half RTT vs Open MPI",
        8,
        &ours[2],
        &theirs[0],
    );
    for (i, &size) in SIZES.iter().enumerate().skip(1) {
        lat_row(
            "shm send/recv half RTT vs Open MPI",
            size,
            &ours[2 + i],
            &theirs[i],
        );
    }
    let Some(bw) = bw else { return };
    let row =
        |what: &str, size: &str, ours: f64, reference: Option<f64>, unit: &str| match reference {
            Some(r) => println!(
                "{what:<40} {size:>7} {:>19.3} {unit} {:>19.3} {unit} {:>6.3}",
                ours,
                r,
                ours / r
            ),
            None => println!(
                "{what:<40} {size:>7} {:>19.3} {unit} {:>22} {:>6}",
                ours, "n/a", "-"
            ),
        };
    row(
        "shm put bw vs 1-thread memcpy (MB/s)",
        "1 MiB",
        bw[0],
        Some(bw[1]),
        "  ",
    );
    match tcp {
        Some(t) => row(
            "tcp put bw (netns) vs plain socket (MB/s)",
            "1 MiB",
            t[0],
            Some(t[1]),
            "  ",
        ),
        None => println!(
            "{:<40} {:>7} {:>22}",
            "tcp across network namespaces", "1 MiB", "skipped (needs root)"
        ),
    }
}
