//! The conformance suite: the same scenarios against every available backend, with
//! real processes. Each test starts a `Coordinator`, re-executes this test binary as
//! the ranks (`HPC_RDMA_CHILD` names the scenario set and `HPC_TRANSPORT` the
//! backend), and checks that every rank passed.

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::time::{Duration, Instant};

use hpc_rdma::{Choice, Error, Options, Payload, Sink, Source, Transport};
use hpc_runtime::{Coordinator, World};
use hpc_test_support::{ok, text, Job};

const CHILD: &str = "HPC_RDMA_CHILD";

/// The job of `n` ranks of this binary running `role` over `backend`.
fn job(n: usize, role: &str, backend: &str, extra_env: &[(&str, &str)]) -> Job {
    Job::this_test("child", n)
        .timeout(Duration::from_secs(10))
        .env(CHILD, role)
        .env("HPC_TRANSPORT", backend)
        // libfabric's psm/psm2 providers (loaded while libfabric looks for a
        // provider) write a backtrace file into the working directory when
        // a rank aborts, as the death tests' ranks do.
        .env("HFI_NO_BACKTRACE", "1")
        .env("IPATH_NO_BACKTRACE", "1")
        .envs(extra_env)
}

/// Starts `n` ranks of this binary running `role`, returns their outputs.
fn launch(
    n: usize,
    role: &str,
    backend: &str,
    extra_env: &[(&str, &str)],
) -> Vec<std::process::Output> {
    job(n, role, backend, extra_env).run()
}

/// Like [`launch`] against a given coordinator, each rank's command line prefixed by
/// `prefix(rank)` (e.g. `ip netns exec NS`).
fn launch_with(
    coord: &Coordinator,
    n: usize,
    role: &str,
    backend: &str,
    extra_env: &[(&str, &str)],
    prefix: impl Fn(usize) -> Vec<String> + 'static,
) -> Vec<std::process::Output> {
    job(n, role, backend, extra_env)
        .prefix(prefix)
        .run_with(coord)
}

fn assert_all_ok(outs: &[std::process::Output], skip: &[usize]) {
    for (r, o) in outs.iter().enumerate() {
        if !skip.contains(&r) {
            assert!(ok(o), "rank {r}: {}", text(o));
        }
    }
}

/// Entry point of the child processes (a no-op in a normal test run).
#[test]
fn child() {
    let Ok(role) = std::env::var(CHILD) else {
        return;
    };
    let world = World::init().unwrap();
    if role == "mpi-unavailable" {
        let e = Transport::new(&world).unwrap_err();
        assert!(
            matches!(e, Error::Unavailable { backend: "mpi", .. }),
            "{e}"
        );
        println!("CHILD-OK rank {}", world.rank());
        return;
    }
    if role == "verbs" {
        // Only run where there is no usable device (see `verbs_matches_the_machine`).
        let e = Transport::new(&world).unwrap_err();
        assert!(matches!(e, Error::NoDevice(_)), "{e}");
        println!("CHILD-OK rank {}", world.rank());
        return;
    }
    if role == "ofi-unavailable" {
        let e = Transport::new(&world).unwrap_err();
        assert!(
            matches!(e, Error::Unavailable { backend: "ofi", .. })
                && e.to_string().contains("no-such-provider"),
            "{e}"
        );
        println!("CHILD-OK rank {}", world.rank());
        return;
    }
    if role == "bad-transport" {
        let e = Transport::new(&world).unwrap_err();
        assert!(
            e.to_string()
                .contains("HPC_TRANSPORT=\"bogus\" is not a transport"),
            "{e}"
        );
        println!("CHILD-OK rank {}", world.rank());
        return;
    }
    if role == "tcp-foreign-addr" {
        // HPC_TCP_ADDR names an address of no interface here.
        let e = Transport::new(&world).unwrap_err();
        assert!(
            matches!(e, Error::Unavailable { backend: "tcp", .. })
                && e.to_string()
                    .contains("cannot listen on 192.0.2.1 (from HPC_TCP_ADDR)"),
            "{e}"
        );
        println!("CHILD-OK rank {}", world.rank());
        return;
    }
    let t = Transport::new(&world).unwrap();
    match role.as_str() {
        "ofi-save-key" => {
            let region = t.register(4096).unwrap();
            let keys = t.exchange_keys(&world, &region).unwrap();
            if world.rank() == 0 {
                std::fs::write(std::env::var("KEY_FILE").unwrap(), keys[1].to_bytes()).unwrap();
            }
            world.barrier().unwrap();
        }
        "ofi-foreign-key" => {
            let old = std::fs::read(std::env::var("KEY_FILE").unwrap()).unwrap();
            let old = hpc_rdma::RemoteKey::from_bytes(&old).unwrap();
            if world.rank() == 0 {
                assert_eq!(old.rank(), 1, "{old:?}");
                assert_eq!(old.len(), 4096, "{old:?}");
                let res = t.put(vec![1u8; 8], &old, 0);
                assert!(
                    matches!(&res, Err(Error::BadKey(why)) if why.contains("another job")),
                    "{res:?}"
                );
                let res = t.get(&old, 0, 8);
                assert!(matches!(res, Err(Error::BadKey(_))), "{res:?}");
                // An altered key of this job is refused as well.
                let region = t.register(64).unwrap();
                let keys = t.exchange_keys(&world, &region).unwrap();
                let mut b = keys[1].to_bytes();
                b[33] ^= 0x01; // claims 320 bytes where 64 are registered
                let forged = hpc_rdma::RemoteKey::from_bytes(&b).unwrap();
                let res = t.put(vec![1u8; 8], &forged, 0);
                assert!(matches!(res, Err(Error::BadKey(_))), "{res:?}");
            } else {
                let region = t.register(64).unwrap();
                t.exchange_keys(&world, &region).unwrap();
            }
            world.barrier().unwrap();
        }
        "fallback" => {
            let peer = 1 - world.rank();
            let want = match std::env::var("EXPECT_BACKEND").as_deref() {
                Ok("verbs") => hpc_rdma::BackendKind::Verbs,
                _ => hpc_rdma::BackendKind::Tcp,
            };
            assert_eq!(t.backend_of(peer), Some(want));
            let s = t.send(peer, 1, vec![9; 10]).unwrap();
            let r = t.recv(peer, 1).unwrap();
            assert_eq!(t.wait(r).unwrap().into_bytes(), vec![9; 10]);
            t.wait(s).unwrap();
        }
        "suite" => suite(&world, &t),
        "idle-target" => idle_target(&world, &t),
        "death" => death(&world, &t),
        other => panic!("unknown role {other}"),
    }
    println!("CHILD-OK rank {}", world.rank());
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[allow(
    clippy::too_many_lines,
    reason = "one scenario, step after step, whose asserts read best in order"
)]
fn suite(world: &World, t: &Transport) {
    let me = world.rank();
    let peer = 1 - me;
    let want = std::env::var("HPC_TRANSPORT").unwrap();
    assert_eq!(t.backend_of(peer).unwrap().name(), want);
    let big = 16 << 20;
    let region = t.register(big).unwrap();
    let keys = t.exchange_keys(world, &region).unwrap();
    let pk = keys[peer];

    // Ordering of many outstanding puts and sends; the final send says "done".
    let ops: Vec<_> = (0..500u64)
        .map(|i| t.put((i + 1).to_le_bytes().to_vec(), &pk, i * 8).unwrap())
        .collect();
    let sends: Vec<_> = (0..500u64)
        .map(|i| t.send(peer, 5, i.to_le_bytes().to_vec()).unwrap())
        .collect();
    let recvs: Vec<_> = (0..500).map(|_| t.recv(peer, 5).unwrap()).collect();
    t.wait_all(&ops).unwrap();
    t.wait_all(&sends).unwrap();
    for (i, r) in recvs.into_iter().enumerate() {
        assert_eq!(t.wait(r).unwrap().into_bytes(), (i as u64).to_le_bytes());
    }
    world.barrier().unwrap();
    for i in 0..500 {
        assert_eq!(region.load_u64(i * 8).unwrap(), i as u64 + 1);
    }
    // Tags are matched independently.
    let a = t.send(peer, 1, b"one".to_vec()).unwrap();
    let b = t.send(peer, 2, b"two".to_vec()).unwrap();
    let r2 = t.recv(peer, 2).unwrap();
    let r1 = t.recv(peer, 1).unwrap();
    assert_eq!(t.wait(r2).unwrap().into_bytes(), b"two");
    assert_eq!(t.wait(r1).unwrap().into_bytes(), b"one");
    t.wait_all(&[a, b]).unwrap();

    // Large: 16 MiB message, put and get.
    let data = pattern(big, me as u8);
    let s = t.send(peer, 9, data.clone()).unwrap();
    let r = t.recv(peer, 9).unwrap();
    assert_eq!(t.wait(r).unwrap().into_bytes(), pattern(big, peer as u8));
    assert_eq!(
        t.wait(s).unwrap().into_bytes(),
        data,
        "send hands the buffer back"
    );
    world.barrier().unwrap();
    let p = t.put(data, &pk, 0).unwrap();
    t.wait(p).unwrap();
    world.barrier().unwrap();
    assert_eq!(region.to_vec(), pattern(big, peer as u8));
    let g = t.get(&pk, 0, big).unwrap();
    assert_eq!(t.wait(g).unwrap().into_bytes(), pattern(big, me as u8));
    // Get into a local region slice; put from a region slice (zero-copy paths).
    let local = t.register(1 << 20).unwrap();
    let g = t
        .get_to(
            &pk,
            4096,
            Sink::Region {
                region: local.clone(),
                offset: 8,
                len: 1000,
            },
        )
        .unwrap();
    assert!(matches!(t.wait(g).unwrap(), Payload::Region(_)));
    let mut got = vec![0u8; 1000];
    local.read(8, &mut got).unwrap();
    assert_eq!(got, pattern(big, me as u8)[4096..5096]);
    world.barrier().unwrap();

    // Zero-length message, put and get.
    let s = t.send(peer, 0, Vec::new()).unwrap();
    let r = t.recv(peer, 0).unwrap();
    assert!(t.wait(r).unwrap().into_bytes().is_empty());
    t.wait(s).unwrap();
    let p = t.put(Vec::new(), &pk, big as u64).unwrap();
    t.wait(p).unwrap();
    let g = t.get(&pk, big as u64, 0).unwrap();
    assert!(t.wait(g).unwrap().into_bytes().is_empty());

    // Many outstanding gets, completed through poll().
    let mut left: std::collections::HashSet<_> = (0..256)
        .map(|i| t.get(&pk, i * 4096, 4096).unwrap())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !left.is_empty() {
        for c in t.poll().unwrap() {
            assert!(left.remove(&c.op));
            assert_eq!(c.result.unwrap().into_bytes().len(), 4096);
        }
        assert!(Instant::now() < deadline, "gets did not complete");
    }

    // Out of bounds: rejected before anything moves.
    assert!(matches!(
        t.put(vec![1; 2], &pk, big as u64 - 1),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        t.get(&pk, u64::MAX, 2),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        t.put(
            Source::Region {
                region: local.clone(),
                offset: (1 << 20) - 1,
                len: 2
            },
            &pk,
            0
        ),
        Err(Error::OutOfBounds { .. })
    ));
    // A forged key that claims a longer region is refused by the target side.
    let mut forged = pk.to_bytes();
    forged[32..40].copy_from_slice(&(2 * big as u64).to_le_bytes());
    let forged = hpc_rdma::RemoteKey::from_bytes(&forged).unwrap();
    let res = t
        .put(vec![0xEE; 8], &forged, big as u64 + 8)
        .and_then(|op| t.wait(op));
    assert!(
        res.is_err(),
        "write past a region with a forged length: {res:?}"
    );
    // A wrong key is refused.
    let mut wrong = pk.to_bytes();
    wrong[24] ^= 0x5a;
    let wrong = hpc_rdma::RemoteKey::from_bytes(&wrong).unwrap();
    let res = t.put(vec![1; 8], &wrong, 0).and_then(|op| t.wait(op));
    assert!(matches!(res, Err(Error::BadKey(_))), "{res:?}");
    let res = t.get(&wrong, 0, 8).and_then(|op| t.wait(op));
    assert!(matches!(res, Err(Error::BadKey(_))), "{res:?}");
    // A key whose length was edited is refused before anything moves: within
    // the region's last page (a 64-byte region claimed as 4096 bytes) the
    // shared-memory backend wrote past the region, and a length near u64::MAX
    // overflowed there.
    let small = t.register(64).unwrap();
    let small_keys = t.exchange_keys(world, &small).unwrap();
    for len in [4096u64, u64::MAX] {
        let mut b = small_keys[peer].to_bytes();
        b[32..40].copy_from_slice(&len.to_le_bytes());
        let forged = hpc_rdma::RemoteKey::from_bytes(&b).unwrap();
        let res = t.put(vec![0xEE; 8], &forged, 100);
        assert!(
            matches!(&res, Err(Error::BadKey(why)) if why.contains("altered")),
            "length {len}: {res:?}"
        );
        let res = t.get(&forged, 100, 8);
        assert!(
            matches!(&res, Err(Error::BadKey(why)) if why.contains("altered")),
            "length {len}: {res:?}"
        );
    }
    world.barrier().unwrap();
    // The big region's bytes past the forged write are untouched (nothing was written
    // outside it: the mapping ends there, a write would have crashed or shown up).
    assert_eq!(region.to_vec(), pattern(big, peer as u8));

    // Borrowed receive buffers.
    let s = t.send(peer, 3, vec![4; 16]).unwrap();
    let mut buf = [0u8; 32];
    let n = t.recv_into(peer, 3, &mut buf).unwrap().wait().unwrap();
    assert_eq!(&buf[..n], &[4; 16]);
    t.wait(s).unwrap();
    let s = t.send(peer, 3, vec![4; 64]).unwrap();
    assert!(t.recv_into(peer, 3, &mut buf).unwrap().wait().is_err());
    t.wait(s).unwrap();

    // Polling the last 8 bytes of a put (the write-latency pattern).
    for round in 1..50u64 {
        if (round as usize % 2) == me {
            let mut v = pattern(64, round as u8);
            v[56..].copy_from_slice(&round.to_le_bytes());
            let p = t.put(v, &pk, 0).unwrap();
            t.wait(p).unwrap();
        } else {
            let d = Instant::now() + Duration::from_secs(10);
            while region.load_u64(56).unwrap() != round {
                assert!(Instant::now() < d);
                std::hint::spin_loop();
            }
            let mut got = vec![0u8; 56];
            region.read(0, &mut got).unwrap();
            assert_eq!(got, pattern(64, round as u8)[..56]);
        }
    }
    world.barrier().unwrap();
    // Unknown operations and ranks.
    assert!(t.send(7, 0, vec![]).is_err());
    let s = t.send(peer, 11, vec![1]).unwrap();
    t.wait(s).unwrap();
    assert!(
        matches!(t.wait(s), Err(Error::InvalidArgument(_))),
        "waited twice"
    );
    let r = t.recv(peer, 11).unwrap();
    t.wait(r).unwrap();
    world.barrier().unwrap();
    stale_key(world, t, peer, &want);
}

/// A stale key (region deregistered by its owner) is refused. Last in the suite:
/// over libfabric the target's provider refuses it the way an RDMA NIC refuses a
/// remote access error, which ends the pair's connection (`tcp;ofi_rxm`: PeerLost)
/// or stops the pair's command queue (`shm` 1.17: the operation times out); either
/// way an error and no write, but the pair is unusable afterwards.
fn stale_key(world: &World, t: &Transport, peer: usize, backend: &str) {
    let temp = t.register(4096).unwrap();
    let tk = t.exchange_keys(world, &temp).unwrap()[peer];
    let p = t.put(vec![1; 8], &tk, 0).unwrap();
    t.wait(p).unwrap();
    world.barrier().unwrap();
    t.deregister(temp);
    world.barrier().unwrap();
    let bounded = Duration::from_secs(3);
    let res = t
        .put(vec![1; 8], &tk, 0)
        .and_then(|op| t.wait_timeout(op, bounded));
    if backend == "ofi" {
        assert!(
            matches!(
                res,
                Err(Error::BadKey(_) | Error::PeerLost { .. } | Error::Timeout { .. })
            ),
            "{res:?}"
        );
        world.barrier().unwrap();
        return;
    }
    assert!(matches!(res, Err(Error::BadKey(_))), "{res:?}");
    let res = t.get(&tk, 0, 8).and_then(|op| t.wait(op));
    assert!(matches!(res, Err(Error::BadKey(_))), "{res:?}");
    world.barrier().unwrap();
}

/// Rank 1 stays away from the transport while rank 0 moves data in and out of its
/// memory (puts, gets, eager and announced messages) and finally puts a mark into
/// it. `IDLE_MODE` says how rank 1 stays away: `sleep` or `spin` (computing on every
/// core) until the mark is in its memory, which, with providers that progress data
/// only inside libfabric calls (`tcp;ofi_rxm`, `shm`), only the backend's progress
/// thread can bring about; or `stop`: the process is stopped (as a debugger or an
/// overloaded node's scheduler leaves it) for longer than the job's timeout and then
/// continued by rank 0, whose operations must wait meanwhile, never fail.
fn idle_target(world: &World, t: &Transport) {
    const MARK: u64 = 0x6d61_726b_6d61_726b;
    let me = world.rank();
    let peer = 1 - me;
    let mode = std::env::var("IDLE_MODE").unwrap();
    let len = 4 << 20;
    let region = t.register(len).unwrap();
    let keys = t.exchange_keys(world, &region).unwrap();
    let pk = keys[peer];
    let pids = world.allgather(&std::process::id().to_le_bytes()).unwrap();
    let pid1 = u32::from_le_bytes(pids[1][..4].try_into().unwrap()) as i32;
    world.barrier().unwrap();
    let idle = world.timeout() * 3 / 2;
    // Far longer than the work takes on a loaded machine: only a hang gets there.
    let give_up = Duration::from_secs(120);
    let size = |i: u64| if i % 10 == 0 { 100_000 } else { 100 };
    if me == 1 {
        let start = Instant::now();
        let marked = || region.load_u64(len - 8).unwrap() == MARK;
        match mode.as_str() {
            "spin" => {
                let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
                std::thread::scope(|s| {
                    for _ in 0..cores {
                        s.spawn(|| {
                            let mut x = 1u64;
                            while !marked() {
                                assert!(start.elapsed() < give_up, "never served");
                                for _ in 0..1000 {
                                    x = std::hint::black_box(
                                        x.wrapping_mul(6364136223846793005).wrapping_add(1),
                                    );
                                }
                            }
                        });
                    }
                });
            }
            // SAFETY: raise takes a signal number; rank 0 continues us.
            "stop" => assert_eq!(unsafe { libc::raise(libc::SIGSTOP) }, 0),
            _ => {
                while !marked() {
                    assert!(start.elapsed() < give_up, "never served");
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        // Everything rank 0 did while we were away is here.
        let r = t.recv(0, 7).unwrap();
        assert_eq!(t.wait_timeout(r, give_up).unwrap().into_bytes(), b"done");
        let mut want = pattern(len, 0);
        want[..8].copy_from_slice(&1999u64.to_le_bytes());
        want[len - 8..].copy_from_slice(&MARK.to_le_bytes());
        assert_eq!(region.to_vec(), want);
        for i in 0..200u64 {
            let r = t.recv(0, 6).unwrap();
            assert_eq!(t.wait(r).unwrap().into_bytes(), vec![i as u8; size(i)]);
        }
        let s = t.send(0, 8, b"ack".to_vec()).unwrap();
        t.wait(s).unwrap();
    } else {
        // Whatever happens here (a failed assertion too), rank 1 is continued.
        struct Continue(i32);
        impl Drop for Continue {
            fn drop(&mut self) {
                // SAFETY: kill takes a pid and a signal number.
                unsafe { libc::kill(self.0, libc::SIGCONT) };
            }
        }
        let _continue = Continue(pid1);
        let stopper = (mode == "stop").then(|| {
            // Wait until rank 1 is stopped, and continue it after `idle`.
            let stat = format!("/proc/{pid1}/stat");
            let d = Instant::now() + Duration::from_secs(10);
            while !std::fs::read_to_string(&stat)
                .unwrap()
                .rsplit(')')
                .next()
                .unwrap()
                .trim_start()
                .starts_with('T')
            {
                assert!(Instant::now() < d, "rank 1 did not stop");
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::spawn(move || {
                std::thread::sleep(idle);
                // SAFETY: kill takes a pid and a signal number.
                unsafe { libc::kill(pid1, libc::SIGCONT) };
            })
        });
        let wait = |op| t.wait_timeout(op, give_up).unwrap();
        let start = Instant::now();
        let data = pattern(len, 0);
        let p = t.put(data.clone(), &pk, 0).unwrap();
        wait(p);
        // Far more than the provider's queues hold, so posting has to wait for
        // the target.
        let ops: Vec<_> = (0..2000u64)
            .map(|i| t.put(i.to_le_bytes().to_vec(), &pk, 0).unwrap())
            .collect();
        for op in ops {
            wait(op);
        }
        let gets: Vec<_> = (0..500u64)
            .map(|i| t.get(&pk, 4096 + i * 1024, 1024).unwrap())
            .collect();
        for (i, g) in gets.into_iter().enumerate() {
            let at = 4096 + i * 1024;
            assert_eq!(wait(g).into_bytes(), data[at..at + 1024]);
        }
        let sends: Vec<_> = (0..200u64)
            .map(|i| t.send(1, 6, vec![i as u8; size(i)]).unwrap())
            .collect();
        for op in sends {
            wait(op);
        }
        let p = t
            .put(MARK.to_le_bytes().to_vec(), &pk, len as u64 - 8)
            .unwrap();
        wait(p);
        eprintln!(
            "{mode}: rank 0 moved its data in {:?} (the job's timeout: {:?})",
            start.elapsed(),
            world.timeout()
        );
        let s = t.send(1, 7, b"done".to_vec()).unwrap();
        wait(s);
        let r = t.recv(1, 8).unwrap();
        assert_eq!(wait(r).into_bytes(), b"ack");
        if let Some(s) = stopper {
            s.join().unwrap();
        }
    }
    world.barrier().unwrap();
}

fn death(world: &World, t: &Transport) {
    let me = world.rank();
    let region = t.register(1 << 20).unwrap();
    let keys = t.exchange_keys(world, &region).unwrap();
    world.barrier().unwrap();
    if me == 1 {
        // Die mid-stream, without any goodbye.
        let r = t.recv(0, 1).unwrap();
        t.wait(r).unwrap();
        std::process::abort();
    }
    let start = Instant::now();
    let mut err = None;
    for i in 0..100_000u64 {
        let res = t
            .send(1, 1, vec![i as u8; 256 << 10])
            .and_then(|op| t.wait_timeout(op, Duration::from_secs(5)))
            .and_then(|_| t.put(vec![1u8; 1 << 20], &keys[1], 0))
            .and_then(|op| t.wait_timeout(op, Duration::from_secs(5)));
        if let Err(e) = res {
            err = Some(e);
            break;
        }
    }
    let r = t.recv(1, 2).unwrap();
    let res = t.wait_timeout(r, Duration::from_secs(5));
    eprintln!(
        "first error {err:?}, recv {res:?} after {:?}",
        start.elapsed()
    );
    assert!(
        matches!(err, Some(Error::PeerLost { rank: 1, .. }))
            || matches!(err, Some(Error::BadKey(_))),
        "{err:?}"
    );
    assert!(
        matches!(res, Err(Error::PeerLost { rank: 1, .. })),
        "{res:?}"
    );
    assert!(start.elapsed() < Duration::from_secs(8));
    // Do not finalize with the launcher: the peer is gone.
    println!("CHILD-OK rank 0");
    std::process::exit(0);
}

macro_rules! conformance {
    ($suite:ident, $death:ident, $backend:literal $(, $env:expr)?) => {
        #[test]
        fn $suite() {
            let env: &[(&str, &str)] = &[$($env)?];
            // The suite moves 16 MiB messages one way and the other while the
            // peer waits in a barrier: on a loaded 2-core machine (CI runs the
            // Docker cluster tests beside it) one such put took over 10 s over
            // ofi's tcp provider. The operation timeout here only bounds a hang;
            // the death tests keep the short one, since they measure it.
            let outs = job(2, "suite", $backend, env)
                .timeout(Duration::from_secs(60))
                .run();
            assert_all_ok(&outs, &[]);
        }

        #[test]
        fn $death() {
            let env: &[(&str, &str)] = &[$($env)?];
            let t = Instant::now();
            let outs = launch(2, "death", $backend, env);
            assert_all_ok(&outs, &[1]);
            assert!(t.elapsed() < Duration::from_secs(15));
        }
    };
}

conformance!(shm_suite, shm_peer_death, "shm");
conformance!(tcp_suite, tcp_peer_death, "tcp");
// libfabric with its shared-memory provider and with tcp under the rxm utility
// provider (both in Debian's libfabric 1.17).
#[cfg(feature = "ofi")]
conformance!(
    ofi_shm_suite,
    ofi_shm_peer_death,
    "ofi",
    ("HPC_OFI_PROVIDER", "shm")
);
#[cfg(feature = "ofi")]
conformance!(
    ofi_tcp_suite,
    ofi_tcp_peer_death,
    "ofi",
    ("HPC_OFI_PROVIDER", "tcp;ofi_rxm")
);

/// A rank that stays away from the transport (sleeping or computing on every core
/// until its peer is done, or stopped for longer than the job's timeout) neither
/// stalls nor fails the puts, gets and messages of its peer, over both providers.
#[cfg(feature = "ofi")]
#[test]
fn ofi_idle_target_is_progressed() {
    for prov in ["tcp;ofi_rxm", "shm"] {
        for mode in ["stop", "sleep", "spin"] {
            let outs = launch(
                2,
                "idle-target",
                "ofi",
                &[
                    ("HPC_OFI_PROVIDER", prov),
                    ("IDLE_MODE", mode),
                    ("HPC_TIMEOUT", "2"),
                ],
            );
            eprintln!("{prov} {mode}");
            assert_all_ok(&outs, &[]);
        }
    }
}

/// The `mpi` backend: the same suite under Open MPI's mpirun (the MPI library, not
/// this backend, handles a dying peer: it aborts the job, so there is no death test).
#[cfg(feature = "mpi")]
#[test]
fn mpi_suite_under_mpirun() {
    let Some(mpirun) = ["mpirun.openmpi", "mpirun"].into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("Open MPI"))
            .unwrap_or(false)
    }) else {
        assert!(
            std::env::var("HPC_REQUIRE_MPI").ok().as_deref() != Some("1"),
            "HPC_REQUIRE_MPI=1 but Open MPI's mpirun is not installed"
        );
        eprintln!("Open MPI mpirun not found: skipping");
        return;
    };
    let exe = std::env::current_exe().unwrap();
    let t = Instant::now();
    let o = Command::new(mpirun)
        .args(["--oversubscribe", "--bind-to", "none", "-n", "2"])
        .arg(&exe)
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD, "suite")
        .env("HPC_TRANSPORT", "mpi")
        .env("HPC_TIMEOUT", "20")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{text}");
    assert_eq!(text.matches("CHILD-OK").count(), 2, "{text}");
    eprintln!("mpi suite: {:?}", t.elapsed());
}

/// Without an MPI launcher the `mpi` backend is unavailable, on every rank, with a
/// reason (and without the feature it says how to build it).
#[test]
fn mpi_backend_outside_mpirun_is_unavailable() {
    let outs = launch(2, "mpi-unavailable", "mpi", &[]);
    assert_all_ok(&outs, &[]);
}

/// Verbs is "available" only with an HCA (and the `verbs` feature). Without one, a
/// forced choice fails cleanly with `NoDevice` on every rank and `auto` between nodes
/// falls back to TCP; with one, the whole suite runs over verbs and `auto` picks it.
#[test]
fn verbs_matches_the_machine() {
    let hca = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| d.count() > 0)
        .unwrap_or(false);
    let usable = cfg!(feature = "verbs") && hca;
    let two_nodes = ("HPC_NODE_NAME", "node{rank}");
    if usable {
        assert!(hpc_rdma::verbs::probe().is_ok());
        assert_all_ok(&launch(2, "suite", "verbs", &[]), &[]);
        assert_all_ok(
            &launch(
                2,
                "fallback",
                "auto",
                &[two_nodes, ("EXPECT_BACKEND", "verbs")],
            ),
            &[],
        );
    } else {
        assert!(matches!(hpc_rdma::verbs::probe(), Err(Error::NoDevice(_))));
        assert_all_ok(&launch(2, "verbs", "verbs", &[]), &[]);
        assert_all_ok(&launch(2, "fallback", "auto", &[two_nodes]), &[]);
    }
}

/// A singleton talks to itself through the loopback backend.
/// `HPC_TCP_ADDR` naming an address of another host: the error names the
/// address and the variable (it was the bare "Cannot assign requested
/// address").
#[test]
fn a_tcp_address_of_another_host_is_named() {
    let outs = launch(
        2,
        "tcp-foreign-addr",
        "tcp",
        &[("HPC_TCP_ADDR", "192.0.2.1")],
    );
    assert_all_ok(&outs, &[]);
}

/// An `HPC_TRANSPORT` that names no transport is an error naming the
/// variable: it said `transport "bogus": expected ...`, which a user who set
/// no such argument could not place.
#[test]
fn a_transport_variable_that_names_no_transport_is_named() {
    assert_all_ok(&launch(1, "bad-transport", "bogus", &[]), &[]);
}

#[test]
fn singleton_loopback() {
    let w = World::init().unwrap();
    let t = Transport::with_options(
        &w,
        Options {
            backend: Choice::Auto,
            ..Options::default()
        },
    )
    .unwrap();
    let r = t.register(64).unwrap();
    let k = t.exchange_keys(&w, &r).unwrap();
    let p = t.put(vec![3u8; 64], &k[0], 0).unwrap();
    t.wait(p).unwrap();
    assert_eq!(r.to_vec(), vec![3u8; 64]);
    assert!(matches!(
        t.put(vec![3u8; 65], &k[0], 0),
        Err(Error::OutOfBounds { .. })
    ));
    // A length no mapping can hold is refused by name (usize::MAX overflowed
    // the page rounding); one the machine cannot give names the length.
    for len in [usize::MAX, isize::MAX as usize] {
        let e = t.register(len).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument(why) if why.contains(&len.to_string())),
            "{e}"
        );
    }
    if let Err(e) = t.register(1 << 46) {
        assert!(
            e.to_string().contains("region of 70368744177664 bytes"),
            "{e}"
        );
    }
}

/// Two network namespaces joined by a veth pair, deleted on drop.
struct Netns {
    names: [String; 2],
    subnet: u8,
}

fn sh(args: &[&str]) {
    let st = Command::new(args[0]).args(&args[1..]).status().unwrap();
    assert!(st.success(), "{args:?}");
}

impl Netns {
    fn new() -> Netns {
        let id = hpc_runtime::random_u64().expect("random bytes from the kernel") & 0xff_ffff;
        let subnet = (id % 250) as u8 + 1;
        let names = [format!("hpcr{id:06x}a"), format!("hpcr{id:06x}b")];
        let veth = [format!("hr{id:06x}a"), format!("hr{id:06x}b")];
        let ns = Netns { names, subnet };
        for n in &ns.names {
            sh(&["ip", "netns", "add", n]);
            sh(&["ip", "-n", n, "link", "set", "lo", "up"]);
        }
        sh(&[
            "ip", "link", "add", &veth[0], "type", "veth", "peer", "name", &veth[1],
        ]);
        for (i, v) in veth.iter().enumerate() {
            let n = &ns.names[i];
            sh(&["ip", "link", "set", v, "netns", n]);
            let addr = format!("{}/24", ns.addr(i));
            sh(&["ip", "-n", n, "addr", "add", &addr, "dev", v]);
            sh(&["ip", "-n", n, "link", "set", v, "up"]);
        }
        ns
    }

    fn addr(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 231, self.subnet, i as u8 + 1)
    }

    /// Starts a coordinator whose listener lives in namespace 0.
    fn coordinator(&self, n: usize, secret: u64) -> Coordinator {
        let path = format!("/run/netns/{}", self.names[0]);
        let ip = self.addr(0);
        std::thread::spawn(move || {
            let f = std::fs::File::open(path).unwrap();
            use std::os::fd::AsRawFd;
            // SAFETY: setns on a namespace file we opened; it only affects this thread,
            // which only starts the coordinator (whose threads inherit the namespace).
            assert_eq!(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
            Coordinator::start(n, secret, Duration::from_secs(10), IpAddr::V4(ip)).unwrap()
        })
        .join()
        .unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// The TCP backend between two real network stacks: each rank in its own network
/// namespace, connected only by a veth pair (needs root; `HPC_TEST_NETNS=1`).
#[test]
fn tcp_suite_across_network_namespaces() {
    if std::env::var("HPC_TEST_NETNS").as_deref() != Ok("1") {
        println!("skipped: set HPC_TEST_NETNS=1 (needs root) to run ranks in network namespaces");
        return;
    }
    let ns = Netns::new();
    let secret = hpc_runtime::random_u64().expect("random bytes from the kernel");
    let coord = ns.coordinator(2, secret);
    let names = ns.names.clone();
    let outs = launch_with(
        &coord,
        2,
        "suite",
        "tcp",
        &[("HPC_NODE_NAME", "node{rank}")],
        move |r| vec!["ip".into(), "netns".into(), "exec".into(), names[r].clone()],
    );
    assert_all_ok(&outs, &[]);
}

/// Bad input to the libfabric backend: each a clear error, at once.
#[cfg(feature = "ofi")]
mod ofi_bad_input {
    use super::*;
    use hpc_rdma::ofi;

    #[test]
    fn unknown_provider_is_named() {
        let t = Instant::now();
        let e = ofi::check_provider("no-such-provider", 0).unwrap_err();
        let text = e.to_string();
        assert!(
            matches!(e, Error::Unavailable { backend: "ofi", .. })
                && text.contains("no-such-provider")
                && text.contains("fi_info -l"),
            "{text}"
        );
        // A whole job asked for it fails on every rank with the same reason.
        let outs = launch(
            2,
            "ofi-unavailable",
            "ofi",
            &[("HPC_OFI_PROVIDER", "no-such-provider")],
        );
        assert_all_ok(&outs, &[]);
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    /// No provider here lacks RMA, so the same diagnosis is shown by asking `shm`
    /// for one more capability it lacks (triggered operations, `FI_TRIGGER`); the
    /// RMA case differs only in which requirement is named.
    #[test]
    fn a_missing_capability_is_named() {
        const FI_TRIGGER: u64 = 1 << 20;
        assert!(ofi::check_provider("shm", 0).is_ok());
        let e = ofi::check_provider("shm", FI_TRIGGER).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("provider shm lacks"), "{text}");
        assert!(
            std::error::Error::source(&e).is_some(),
            "fi_getinfo's code is kept"
        );
    }

    #[test]
    fn endpoint_names_that_do_not_resolve_are_refused() {
        for prov in ["shm", "tcp;ofi_rxm"] {
            let res = ofi::resolve(prov, &[Vec::new(), vec![0xff; 4]]).unwrap();
            assert!(res[0].is_err(), "{prov}: an empty name");
            if let Err(e) = &res[0] {
                assert!(e.to_string().contains("does not resolve"), "{e}");
            }
            let _ = &res[1]; // Providers may accept a short name as an address.
        }
    }

    /// A key saved by one job and used in another is refused before anything is
    /// sent (it names another process), and an altered key is refused too.
    #[test]
    fn a_key_from_another_job_is_refused() {
        let dir = hpc_test_support::TmpDir::new("hpc-ofi", "key");
        let file = dir.join("key.bin");
        let path = file.display().to_string();
        let env = [("HPC_OFI_PROVIDER", "shm"), ("KEY_FILE", path.as_str())];
        assert_all_ok(&launch(2, "ofi-save-key", "ofi", &env), &[]);
        assert_all_ok(&launch(2, "ofi-foreign-key", "ofi", &env), &[]);
        let _ = std::fs::remove_file(&file);
    }
}

/// A region of 64 TiB was registered on a machine of 24 GB (a memfd's pages
/// are made when touched, and its first access would have ended the
/// process): more than the memory available is refused by its size.
#[test]
fn a_region_beyond_the_memory_available_is_refused_by_its_size() {
    let Some(available) = hpc_io::read::mem_available() else {
        return;
    };
    let w = World::init().unwrap();
    let t = Transport::new(&w).unwrap();
    let len = usize::try_from(available).unwrap().saturating_add(1 << 20);
    let e = t.register(len).unwrap_err().to_string();
    assert!(
        e.contains(&format!("{len} bytes")) && e.contains("MemAvailable"),
        "{e}"
    );
    assert!(t.register(1 << 46).is_err());
    assert_eq!(t.register(4096).unwrap().len(), 4096);
}
