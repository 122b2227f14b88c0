//! The proxy placed as on a DPU, on a real multi-node cluster (Slurm + PMIx across
//! Docker containers, `hpc cluster up --dpus`): beside each compute
//! node a `dpu` container, the DPU's own Linux (the network and the binaries only),
//! whose standing service starts the node's proxy. On one cluster, brought up once:
//! the dpu containers share no file system or /dev/shm with their nodes; Brunel with
//! `--engine proxy` in DPU placement on 2 nodes gives the one-node spikes byte for
//! byte, with the proxies on the dpu containers (each started for a request that
//! proved the cluster's key; one without it is refused); the fft3d example passes its
//! self-check the same way; a dpu container killed mid-run makes its node's ranks fail
//! naming the proxy and the other node's name the lost node, well within the job's
//! timeout.
//!
//! Runs only with `HPC_TEST_CLUSTER=1` (set by `.ci/run`) and the `mpi` feature; the
//! fft3d binary must be built beside brunel's (the workspace's tests build it).
#![cfg(feature = "mpi")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use hpc_test_support::Cluster;

const BRUNEL: &str = env!("CARGO_BIN_EXE_brunel");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// This test's cluster: its own name (beside the other cluster tests'), and
/// work directory.
fn names() -> (String, PathBuf) {
    let name = std::env::var("HPC_CLUSTER_NAME").unwrap_or_else(|_| "hpc-cluster".into());
    let name = format!("{name}-dpu");
    let dir = repo().join("target").join(&name);
    (name, dir)
}

fn cluster() -> Cluster {
    let (name, dir) = names();
    Cluster::named(&name, &dir)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `docker exec` in one of this cluster's containers (`node1`, `node1-dpu`).
fn docker(container: &str, args: &[&str]) -> Output {
    let (name, _) = names();
    Command::new("docker")
        .arg("exec")
        .arg(format!("{name}-{container}"))
        .args(args)
        .output()
        .unwrap()
}

/// The DPU placement's variables for a job (the nodes have
/// `HPC_COLL_PROXY_DPU_HOST={host}-dpu` from `up --dpus`).
const DPU: &str = "HPC_COLL_PROXY_PLACEMENT=dpu";

/// `srun` on the controller: `env VARS srun --mpi=pmix -N nodes -n ranks PROGRAM ARGS`.
fn srun(vars: &[&str], nodes: &str, ranks: &str, program: &[&str]) -> Output {
    let mut a = Cluster::srun_args(&[&["env"][..], vars].concat(), nodes, ranks);
    a.extend_from_slice(program);
    cluster().run(&a)
}

fn spikes(dir: &str) -> Vec<u8> {
    std::fs::read(names().1.join("shared").join(dir).join("spikes.spk")).unwrap_or_default()
}

/// How many proxies the dpu container's service started so far.
fn proxies_started(dpu: &str) -> usize {
    let (name, _) = names();
    let o = Command::new("docker")
        .args(["logs", &format!("{name}-{dpu}")])
        .output()
        .unwrap();
    text(&o).matches("DPU service: started a proxy").count()
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one scenario, step after step, whose asserts read best in order"
)]
fn brunel_and_fft3d_with_the_proxy_on_dpu_containers() {
    if !hpc_test_support::cluster_tests_on() {
        return;
    }
    let bin = Path::new(BRUNEL).parent().unwrap();
    assert!(
        bin.join("fft3d").exists() && bin.join("hpc").exists(),
        "fft3d and hpc must be built beside brunel in {} (cargo build -p hpc-cli -p \
         hpc-example-fft3d with the same profile and the mpi feature)",
        bin.display()
    );
    let (_down, up) = cluster().up(2, &["--dpus"], &Cluster::bin_dir(BRUNEL));
    assert!(up.status.success());
    let shared = names().1.join("shared");
    for d in ["dpu-ref", "dpu-n2", "dpu-killed"] {
        let _ = std::fs::remove_dir_all(shared.join(d));
    }

    // The DPU's own Linux: no /shared or /cluster, and a /dev/shm of its own.
    let o = docker(
        "node1-dpu",
        &["sh", "-c", "test ! -e /shared && test ! -e /cluster"],
    );
    assert!(o.status.success(), "node1-dpu sees the nodes' files");
    let mark = format!("hpc-dpu-test-{}", std::process::id());
    assert!(docker("node1", &["touch", &format!("/dev/shm/{mark}")])
        .status
        .success());
    let o = docker("node1-dpu", &["test", "-e", &format!("/dev/shm/{mark}")]);
    assert!(!o.status.success(), "node1-dpu shares node1's /dev/shm");
    let _ = docker("node1", &["rm", "-f", &format!("/dev/shm/{mark}")]);

    // The service asks for its key: a request from the node without it is
    // refused and starts nothing.
    let before = proxies_started("node1-dpu");
    let o = docker(
        "node1",
        &[
            "bash",
            "-c",
            "exec 3<>/dev/tcp/node1-dpu/7471 && read -r g <&3 && \
             echo '- 127.0.0.1:1 1f 3 2 tcp' >&3 && read -r a <&3 && echo \"$g|$a\"",
        ],
    );
    let out = text(&o);
    assert!(
        out.starts_with("hpc-dpu-service 1 nonce ")
            && out.trim_end().ends_with("|refused: authentication failed"),
        "an unauthenticated request to node1-dpu: {out}"
    );
    assert_eq!(proxies_started("node1-dpu"), before);

    // Brunel: the spikes of one node (the default engine) from 2 nodes x 2 ranks
    // with the proxy engine in DPU placement, the proxies on the dpu containers.
    fn brunel<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        let mut v = vec!["brunel", "--order", "500", "--t-sim", "200"];
        v.extend_from_slice(extra);
        v
    }
    let o = srun(&[], "1", "2", &brunel(&["--out", "/shared/dpu-ref"]));
    assert!(o.status.success(), "{}", text(&o));
    let before = (proxies_started("node1-dpu"), proxies_started("node2-dpu"));
    let o = srun(
        &[DPU],
        "2",
        "4",
        &brunel(&["--engine", "proxy", "--out", "/shared/dpu-n2"]),
    );
    assert!(o.status.success(), "brunel, dpu placement: {}", text(&o));
    assert!(!spikes("dpu-ref").is_empty());
    assert!(
        spikes("dpu-ref") == spikes("dpu-n2"),
        "2 nodes (proxy engine on the dpus) differ from 1 node"
    );
    let after = (proxies_started("node1-dpu"), proxies_started("node2-dpu"));
    assert!(
        after.0 > before.0 && after.1 > before.1,
        "the dpu containers started no proxy: {before:?} -> {after:?}"
    );

    // fft3d: its self-check against the serial FFT, across the 2 nodes; its row
    // and column communicators (splits) share the world's proxy on each dpu.
    let before = (proxies_started("node1-dpu"), proxies_started("node2-dpu"));
    let o = srun(
        &[DPU],
        "2",
        "4",
        &[
            "fft3d",
            "--n",
            "16",
            "--grid",
            "2x2",
            "--engine",
            "proxy",
            "--batches",
            "2",
            "--reps",
            "2",
        ],
    );
    let out = text(&o);
    assert!(o.status.success(), "fft3d, dpu placement: {out}");
    let after = (proxies_started("node1-dpu"), proxies_started("node2-dpu"));
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (1, 1),
        "fft3d: proxies started by each dpu's service, {before:?} -> {after:?}"
    );
    let result = out
        .lines()
        .find(|l| l.starts_with("result "))
        .unwrap_or_else(|| panic!("no result line: {out}"));
    let rel: f64 = result
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("rel_err="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no rel_err in {result}"));
    assert!(rel < 1e-12, "relative error {rel}: {result}");
    assert!(result.contains("nodes=2"), "{result}");

    // The engines' conformance check (every collective with every algorithm,
    // against the simulator) through the proxies on the dpu containers, then
    // through proxies on the nodes themselves (host placement).
    for vars in [&[DPU][..], &[]] {
        let o = srun(
            vars,
            "2",
            "4",
            &[
                "hpc",
                "selftest",
                "--json",
                "--expect-nodes",
                "2",
                "--collectives",
                "proxy",
                "--every-algorithm",
            ],
        );
        let out = text(&o);
        assert!(o.status.success(), "selftest {vars:?}: {out}");
        let rows: Vec<serde_json::Value> = out
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        assert_eq!(rows.len(), 4, "selftest {vars:?}: {out}");
        for r in &rows {
            let every = &r["collectives"]["every_algorithm"];
            assert_eq!(every["algorithms"], 9, "{vars:?}: {r}");
            assert!(every["checks"].as_u64().unwrap_or(0) >= 40, "{vars:?}: {r}");
        }
        assert!(!out.contains("died"), "selftest {vars:?}: {out}");
    }

    // node2's dpu killed mid-run: node2's ranks fail naming the proxy, node1's
    // naming the lost node, well within the job's timeout; nothing hangs.
    let started = proxies_started("node2-dpu");
    let mut job = cluster()
        .command()
        .args(Cluster::srun_args(
            &["env", DPU, "HPC_TIMEOUT=20"],
            "2",
            "4",
        ))
        .args(["brunel", "--order", "500"])
        .args(["--t-sim", "6000", "--pace", "0.2", "--engine", "proxy"])
        .args(["--out", "/shared/dpu-killed"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Running: its proxies started and a few seconds of model time went by.
    let deadline = Instant::now() + Duration::from_secs(60);
    while proxies_started("node2-dpu") <= started {
        assert!(
            Instant::now() < deadline,
            "no proxy on node2-dpu within 60 s"
        );
        assert!(job.try_wait().unwrap().is_none(), "the run ended early");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        job.try_wait().unwrap().is_none(),
        "the run ended before the fault"
    );
    let t = Instant::now();
    assert!(cluster().run(&["kill-node", "node2-dpu"]).status.success());
    let out = job.wait_with_output().unwrap();
    let took = t.elapsed();
    let all = text(&out);
    eprintln!("node2-dpu killed -> job ended in {took:?}");
    assert!(!out.status.success(), "the job must fail: {all}");
    assert!(took < Duration::from_secs(60), "{took:?}: {all}");
    assert!(
        all.contains("the proxy engine stopped"),
        "node2's ranks do not name the proxy: {all}"
    );
    assert!(
        all.contains("node 1 is lost"),
        "node1's ranks do not name the lost node: {all}"
    );
}
