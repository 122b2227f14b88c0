//! The coordinator under hostile connections: peers that never authenticate, that
//! announce huge frames, or that hold many connections open must cost neither memory
//! nor threads, and must not keep the job's own ranks out.

use std::collections::HashMap;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

use hpc_runtime::{Config, Coordinator, World};

/// `(VmRSS bytes, threads)` of this process.
fn rss_and_threads() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> u64 {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    (field("VmRSS:") * 1024, field("Threads:"))
}

fn join(coord: &Coordinator, secret: u64, rank: usize) -> World {
    let mut env: HashMap<String, String> = coord
        .rank_env(rank)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    env.insert("HPC_JOB_SECRET".into(), format!("{secret:x}"));
    World::init_with(Config::from_map(env).unwrap()).unwrap()
}

#[test]
fn unauthenticated_connections_cost_neither_memory_nor_threads() {
    let secret = hpc_runtime::random_u64().expect("random bytes from the kernel");
    let coord = Coordinator::start(
        2,
        secret,
        Duration::from_secs(20),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
    )
    .unwrap();
    // Let the coordinator's own threads start.
    std::thread::sleep(Duration::from_millis(100));
    let (rss0, threads0) = rss_and_threads();

    // Three peers announce a 256 MiB frame and send 48 MiB of it: a coordinator that
    // reads before it authenticates holds all of it.
    let chunk = vec![0x5au8; 1 << 20];
    let mut big = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(coord.addr()).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(&(256u32 << 20).to_le_bytes());
        for _ in 0..48 {
            if s.write_all(&chunk).is_err() {
                break; // refused: the coordinator closed the connection
            }
        }
        big.push(s);
    }
    // Three hundred peers connect and say nothing (or half a hello): more than the
    // coordinator holds unauthenticated, so the oldest are closed.
    let mut idle = Vec::new();
    for i in 0..300 {
        let mut s = TcpStream::connect(coord.addr()).unwrap();
        if i % 2 == 0 {
            let _ = s.write_all(&[40, 0, 0, 0, 1, 0]);
        }
        idle.push(s);
    }
    std::thread::sleep(Duration::from_millis(500));
    let (rss1, threads1) = rss_and_threads();
    eprintln!(
        "coordinator with 3 x 48 MiB unauthenticated frames and 300 idle connections: \
         VmRSS {:.1} -> {:.1} MiB, threads {threads0} -> {threads1}",
        rss0 as f64 / (1 << 20) as f64,
        rss1 as f64 / (1 << 20) as f64,
    );

    // The job's own ranks still get in while all that is open.
    let t = Instant::now();
    let coord_ref = &coord;
    let worlds: Vec<World> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| s.spawn(move || join(coord_ref, secret, r)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    std::thread::scope(|s| {
        for w in &worlds {
            s.spawn(move || {
                let all = w.allgather(&[w.rank() as u8]).unwrap();
                assert_eq!(all, vec![vec![0], vec![1]]);
            });
        }
    });

    assert!(
        rss1.saturating_sub(rss0) < 16 << 20,
        "unauthenticated peers grew the coordinator by {} MiB",
        rss1.saturating_sub(rss0) >> 20
    );
    assert!(
        threads1 <= threads0 + 2,
        "unauthenticated peers cost {} threads",
        threads1 - threads0
    );
    drop(big);
    drop(idle);
}

/// A rank that stops reading its connection (stopped, or stuck outside the runtime)
/// while the coordinator sends it a large result must not stop the coordinator,
/// which serves every rank from one thread: the other ranks' next collective still
/// ends with a timeout that names the silent rank, instead of waiting for ever.
#[test]
fn a_rank_that_stops_reading_does_not_stop_the_coordinator() {
    use hpc_runtime::wire::{read_msg, write_msg, Msg, Op};
    let secret = hpc_runtime::random_u64().expect("random bytes from the kernel");
    let timeout = Duration::from_secs(4);
    let coord = Coordinator::start(2, secret, timeout, IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();

    // Rank 1 speaks the protocol by hand: it joins, contributes 16 MiB to the first
    // allgather, and then reads nothing more.
    let mut silent = TcpStream::connect(coord.addr()).unwrap();
    write_msg(
        &mut silent,
        &Msg::Hello {
            rank: 1,
            size: 2,
            secret,
            node: hpc_runtime::hostname(),
            pid: std::process::id(),
        },
    )
    .unwrap();
    let rank0 = std::thread::spawn({
        let env = coord.rank_env(0);
        move || {
            let mut env: HashMap<String, String> =
                env.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            env.insert("HPC_JOB_SECRET".into(), format!("{secret:x}"));
            World::init_with(Config::from_map(env).unwrap()).unwrap()
        }
    });
    // The welcome, read so that the join completes.
    assert!(matches!(read_msg(&mut silent), Ok(Msg::Welcome { .. })));
    let world = rank0.join().unwrap();
    let big = vec![7u8; 16 << 20];
    write_msg(
        &mut silent,
        &Msg::Contribute {
            seq: 1,
            op: Op::Allgather,
            data: big.clone(),
        },
    )
    .unwrap();
    // Rank 0's allgather completes: 2 x 16 MiB go back to each rank, far more than
    // a socket buffers for the rank that does not read.
    let all = world.allgather(&big).unwrap();
    assert_eq!(all.len(), 2);

    // Rank 0's next collective: rank 1 never contributes, and the coordinator,
    // blocked on rank 1's full socket for at most the job timeout, still names it.
    let t = Instant::now();
    let err = world.barrier().unwrap_err().to_string();
    let took = t.elapsed();
    // The coordinator's answer, not the rank's own guard against a hung launcher
    // (which gives up at about twice the timeout and can only blame the launcher).
    assert!(
        err.contains("still waiting for rank(s) 1"),
        "{took:?}: {err}"
    );
    assert!(took < Duration::from_secs(8), "{took:?}: {err}");
    eprintln!("barrier with a rank that stopped reading failed after {took:?}: {err}");
    drop(silent);
}

/// A rendezvous address at which something else answers (a web server at a
/// stale `HPC_RENDEZVOUS`): the rank's error names the address and the
/// variable, not only a frame length read from the server's bytes.
#[test]
fn a_rendezvous_that_is_not_a_coordinator_is_named() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        // As a web server answers a request it cannot parse.
        let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        std::thread::sleep(Duration::from_millis(200));
    });
    let env: HashMap<String, String> = [
        ("HPC_RENDEZVOUS", addr.as_str()),
        ("HPC_RANK", "0"),
        ("HPC_SIZE", "1"),
        ("HPC_JOB_SECRET", "ff"),
        ("HPC_TIMEOUT", "5"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let t0 = Instant::now();
    let e =
        World::init_with(Config::from_map(env).unwrap()).expect_err("no world from a web server");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!(
            "{addr} (HPC_RENDEZVOUS) does not answer as hpc run's coordinator"
        )),
        "{msg}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    server.join().unwrap();
}

/// A rank whose job secret is not the coordinator's is refused; it reads why it
/// may have been (its secret, size or rank), where it read "failed to fill
/// whole buffer ... (the launcher stopped?)".
#[test]
fn a_rank_the_coordinator_refuses_is_told_what_it_refuses() {
    let secret = hpc_runtime::random_u64().expect("random bytes from the kernel");
    let timeout = Duration::from_secs(5);
    let coord = Coordinator::start(1, secret, timeout, IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
    let mut env: HashMap<String, String> = coord
        .rank_env(0)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    env.insert(hpc_env::SECRET.into(), format!("{:x}", secret ^ 1));
    let e = World::init_with(Config::from_map(env).unwrap()).expect_err("a wrong secret joined");
    let msg = e.to_string();
    assert!(
        msg.contains("closed the connection before welcoming this rank")
            && msg.contains(hpc_env::SECRET),
        "{msg}"
    );
}

/// The coordinator's collectives carry at most a frame: a rank's
/// contribution beyond `wire::MAX_DATA` is refused by the rank before
/// anything is sent (300 MB were sent, the coordinator refused the frame,
/// and the ranks read "the launcher ... is unreachable" and "rank 0 is
/// lost"), and a result beyond a frame (two contributions of 130 MiB) is
/// refused by the coordinator to every rank (each rank refused the frame
/// and its next call read the frame's body as messages: "unknown message
/// kind 0"); the job goes on after both.
#[test]
fn a_collective_beyond_a_frame_is_refused_and_the_job_goes_on() {
    use hpc_runtime::wire::{MAX_DATA, MAX_FRAME};
    let secret = hpc_runtime::random_u64().expect("random bytes from the kernel");
    let coord = Coordinator::start(
        2,
        secret,
        Duration::from_secs(10),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
    )
    .unwrap();
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            let env = coord.rank_env(rank);
            std::thread::spawn(move || {
                let mut env: HashMap<String, String> =
                    env.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
                env.insert("HPC_JOB_SECRET".into(), format!("{secret:x}"));
                let world = World::init_with(Config::from_map(env).unwrap()).unwrap();
                if rank == 0 {
                    let e = world.allgather(&vec![1u8; MAX_DATA + 1]).unwrap_err();
                    let e = e.to_string();
                    assert!(
                        e.contains(&format!("{} bytes", MAX_DATA + 1))
                            && e.contains(&MAX_DATA.to_string()),
                        "{e}"
                    );
                }
                world.barrier().unwrap();
                let half = MAX_FRAME / 2 + 1;
                let e = world.allgather(&vec![2u8; half]).unwrap_err().to_string();
                assert!(
                    e.contains("its result of") && e.contains(&MAX_FRAME.to_string()),
                    "rank {rank}: {e}"
                );
                world.barrier().unwrap();
                let all = world.allgather(&[rank as u8]).unwrap();
                assert_eq!(all, [[0u8], [1]]);
            })
        })
        .collect();
    for r in ranks {
        r.join().unwrap();
    }
}

/// Two processes given one rank (`HPC_RANK` set by hand): the second to
/// join is told at once why it is refused (it waited for the init's
/// timeout, told nothing), and its end is not taken for the first one's:
/// the job of the first and the real other rank goes on.
#[test]
fn a_rank_that_joins_twice_is_told_at_once_and_the_first_goes_on() {
    let secret = hpc_runtime::random_u64().expect("random bytes from the kernel");
    let coord = Coordinator::start(
        2,
        secret,
        Duration::from_secs(10),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
    )
    .unwrap();
    let env = |rank: usize| -> HashMap<String, String> {
        let mut env: HashMap<String, String> = coord
            .rank_env(rank)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        env.insert("HPC_JOB_SECRET".into(), format!("{secret:x}"));
        env
    };
    let first = {
        let e = env(1);
        std::thread::spawn(move || {
            let world = World::init_with(Config::from_map(e).unwrap()).unwrap();
            world.barrier().unwrap();
            world.allgather(&[1u8]).unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    // The second rank 1 is another process: this one's second join is
    // refused by the process itself (`Error::AlreadyJoined`, `init_twice.rs`).
    let t0 = Instant::now();
    let o = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "second_rank_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_clear()
        .envs(env(1))
        .env(CHILD, "1")
        .output()
        .unwrap();
    let took = t0.elapsed();
    let out = String::from_utf8_lossy(&o.stdout);
    let e = out
        .lines()
        .find_map(|l| l.split_once("CHILD-REFUSED ").map(|(_, e)| e))
        .unwrap_or_else(|| panic!("a second rank 1 is refused: {out}"));
    // Its own message: it is no collective's mismatch (it read "collective
    // mismatch: another process …").
    assert!(
        e.starts_with("Bootstrap: bootstrap failed: the launcher refused this rank: another process of this job joined as rank 1 first"),
        "{e}"
    );
    assert!(took < Duration::from_secs(3), "told after {took:?}");
    // The refused connection's end is not the first rank 1's.
    std::thread::sleep(Duration::from_millis(200));
    let zero = World::init_with(Config::from_map(env(0)).unwrap()).unwrap();
    zero.barrier().unwrap();
    let all = zero.allgather(&[0u8]).unwrap();
    assert_eq!(all, [[0u8], [1]]);
    assert_eq!(first.join().unwrap(), [[0u8], [1]]);
}

/// Ranks that join after the coordinator's wait for them ended are each
/// told which ranks had not joined by then: the last of them was told
/// "still waiting for rank(s) (unknown)", the list being counted when it
/// joined, when none was missing any more.
#[test]
fn ranks_that_join_too_late_are_told_who_was_missing() {
    let secret = hpc_runtime::random_u64().expect("random bytes from the kernel");
    let coord = Coordinator::start(
        2,
        secret,
        Duration::from_millis(200),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(600));
    for rank in 0..2 {
        let mut env: HashMap<String, String> = coord
            .rank_env(rank)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        env.insert("HPC_JOB_SECRET".into(), format!("{secret:x}"));
        env.insert("HPC_TIMEOUT".into(), "5".into());
        let err = World::init_with(Config::from_map(env).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("timed out after 200ms: still waiting for rank(s) 0, 1"),
            "rank {rank}: {err}"
        );
    }
}

/// Set for [`second_rank_child`] by the test that starts it.
const CHILD: &str = "COORDINATOR_HOSTILE_CHILD";

/// The second process of
/// [`a_rank_that_joins_twice_is_told_at_once_and_the_first_goes_on`]: joins
/// with the environment it was given and prints how it was refused (nothing
/// when run as a test of its own).
#[test]
fn second_rank_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    match World::init() {
        Ok(_) => println!("CHILD-JOINED"),
        Err(e) => {
            let kind = match e {
                hpc_runtime::Error::Bootstrap(_) => "Bootstrap",
                _ => "other",
            };
            println!("CHILD-REFUSED {kind}: {e}");
        }
    }
}
