//! A standing DPU service (`hpc proxy --dpu-service`) killed while the
//! proxies it started serve a job. This test binary re-executes itself as
//! the service (`service_entry`), as the ranks (`child_entry`) and as the
//! proxies (`proxy_entry`); each entry does nothing in a normal run.

// This binary uses part of what the test binaries share.
#[allow(dead_code)]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hpc_comm::{Comm, CommOptions, Engine, Placement, ReduceOp};

/// The address the service listens on (set for `service_entry` only).
const SERVICE_AT: &str = "DPU_SERVICE_TEST_AT";
/// The service's key file.
const SERVICE_KEY: &str = "DPU_SERVICE_TEST_KEY";
/// The folder where the ranks and the test leave their marks.
const MARKS: &str = "DPU_SERVICE_TEST_MARKS";

#[test]
fn proxy_entry() {
    // In a normal run the variable is unset and this returns at once.
    hpc_comm::proxy::serve_env().unwrap();
}

#[test]
fn service_entry() {
    let Ok(at) = std::env::var(SERVICE_AT) else {
        return;
    };
    let key = std::env::var(SERVICE_KEY).unwrap();
    let auth = hpc_comm::proxy::ServiceAuth::Key(
        hpc_comm::proxy::DpuKey::from_file(Path::new(&key)).unwrap(),
    );
    let exe = std::env::current_exe().unwrap();
    hpc_comm::proxy::dpu_service(at.parse().unwrap(), auth, move || {
        let mut c = Command::new(&exe);
        c.args(["proxy_entry", "--exact", "--nocapture", "--test-threads=1"]);
        c
    })
    .unwrap();
}

/// Waits up to `within` for `what` to hold.
fn wait_for(within: Duration, what: impl Fn() -> bool) -> bool {
    let t0 = Instant::now();
    while !what() {
        if t0.elapsed() > within {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// A rank: a communicator whose proxies the service started, an allreduce
/// checked; rank 0 marks `ready`; once the test marks `killed` (the
/// service is gone), five more allreduces, each checked. Says `SURVIVED`,
/// or how long it took to fail and why.
#[test]
fn child_entry() {
    let Some((scenario, world)) = common::rank_scenario() else {
        return;
    };
    assert_eq!(scenario, "service_killed");
    let marks = PathBuf::from(std::env::var(MARKS).unwrap());
    let mut opts = CommOptions::new(Engine::Proxy);
    opts.placement = Some(Placement::Dpu);
    opts.timeout = Some(Duration::from_secs(10));
    let comm = Comm::with_options(&world, opts).unwrap();
    let (me, n) = (comm.rank(), comm.size());
    let check = |round: usize| -> hpc_comm::Result<()> {
        let send = vec![(me + round) as u64; 1000];
        let mut sum = vec![0u64; 1000];
        comm.iallreduce(&send, &mut sum, ReduceOp::Sum)?.wait()?;
        let want: u64 = (0..n).map(|r| (r + round) as u64).sum();
        assert!(sum.iter().all(|&x| x == want), "round {round}: {}", sum[0]);
        Ok(())
    };
    check(0).unwrap();
    world.barrier().unwrap();
    if me == 0 {
        std::fs::write(marks.join("ready"), b"").unwrap();
    }
    assert!(
        wait_for(Duration::from_secs(30), || marks.join("killed").exists()),
        "the test did not kill the service"
    );
    let t = Instant::now();
    match (1..=5).try_for_each(check) {
        Ok(()) => eprintln!("SURVIVED"),
        Err(e) => eprintln!("FAILED after {:?}: {e}", t.elapsed()),
    }
    eprintln!("{}", common::CHILD_OK);
}

/// The proxies a process started (its children).
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
                .flat_map(|c| {
                    c.split_whitespace()
                        .filter_map(|p| p.parse().ok())
                        .collect::<Vec<u32>>()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether process `pid` has ended (gone, or a zombie not yet reaped).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

/// The service that started the proxies of a job on 2 nodes is killed
/// (SIGKILL) while the job runs: its communicators go on (the proxies and
/// the ranks' links to them do not depend on the service once they are up),
/// every later collective right, and the proxies end with the job, none
/// left behind. Whether they did was not checked.
#[test]
fn communicators_outlive_the_dpu_service_that_started_their_proxies() {
    use std::os::unix::fs::PermissionsExt;
    let dir = hpc_test_support::TmpDir::new("hpc-dpu", "service-killed");
    let key = dir.join("key");
    std::fs::write(&key, [7u8; 32]).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let marks = dir.join("marks");
    std::fs::create_dir(&marks).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let at = format!("127.0.0.1:{port}");
    let mut service = Command::new(std::env::current_exe().unwrap())
        .args([
            "service_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SERVICE_AT, &at)
        .env(SERVICE_KEY, &key)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let listening = wait_for(Duration::from_secs(20), || {
        std::net::TcpStream::connect(&at).is_ok()
    });
    let job = {
        let (at, key, marks) = (at.clone(), key.clone(), marks.clone());
        std::thread::spawn(move || {
            common::job("service_killed", 4)
                .nodes(2)
                .timeout(Duration::from_secs(20))
                .env("HPC_COLL_PROXY_PLACEMENT", "dpu")
                .env("HPC_COLL_PROXY_DPU_HOST", &at)
                .env("HPC_COLL_PROXY_DPU_KEY_FILE", key.to_str().unwrap())
                // Only the service's proxies may serve.
                .env("HPC_COLL_PROXY_CMD", "/bin/false")
                .env(MARKS, marks.to_str().unwrap())
                .run()
        })
    };
    let ready = listening && wait_for(Duration::from_secs(60), || marks.join("ready").exists());
    let proxies = children_of(service.id());
    let _ = service.kill();
    let _ = service.wait();
    std::fs::write(marks.join("killed"), b"").unwrap();
    let outs = job.join().unwrap();
    assert!(
        ready,
        "the job did not start: {:?}",
        hpc_test_support::failures(&outs)
    );
    assert_eq!(proxies.len(), 2, "the service ran proxies {proxies:?}");
    for (r, o) in outs.iter().enumerate() {
        let text = hpc_test_support::text(o);
        assert!(
            hpc_test_support::ok(o) && text.contains("SURVIVED"),
            "rank {r}: {text}"
        );
    }
    // Reparented when the service died, they still end with their ranks.
    let gone = wait_for(Duration::from_secs(20), || {
        proxies.iter().all(|&p| ended(p))
    });
    assert!(gone, "proxies left running: {proxies:?}");
}
