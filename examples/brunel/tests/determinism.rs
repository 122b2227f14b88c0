//! Bit-identical spikes for any number of ranks and threads, in-process ("virtual
//! ranks" over `LocalExchange`) and as real processes over the hpc runtime, and
//! exact resumption from checkpoints.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use brunel::params::{Model, Params, Preset};
use brunel::sim::{RankReport, RunOptions, Simulation};
use hpc_spiking::exchange::virtual_ranks;

const BRUNEL: &str = env!("CARGO_BIN_EXE_brunel");

/// A fresh directory, removed at the end of the test (and when it fails).
fn tmpdir(tag: &str) -> hpc_test_support::TmpDir {
    hpc_test_support::TmpDir::new("brunel-test", tag)
}

fn small_params() -> Params {
    Params {
        order: 100,
        t_sim: 100.0,
        ..Params::preset(Preset::Nest)
    }
}

/// Runs `ranks` virtual ranks of `threads` threads each; returns rank 0's report.
fn run_virtual(model: &Model, ranks: usize, threads: usize, opts: &RunOptions) -> RankReport {
    let mut reports = virtual_ranks(ranks, threads, |rank, mut ex, pool| {
        let mut sim = Simulation::new(model, rank, ranks, pool, opts)?;
        sim.run(pool, &mut ex, opts, None)
    })
    .unwrap();
    reports.swap_remove(0)
}

fn spikes_of(model: &Model, ranks: usize, threads: usize, overlap: bool) -> (Vec<u8>, u64) {
    let dir = tmpdir("virt");
    let path = dir.join("spikes.spk");
    let opts = RunOptions {
        overlap,
        spikes: Some(path.clone()),
        ..Default::default()
    };
    let rep = run_virtual(model, ranks, threads, &opts);
    assert!(rep.completed);
    let bytes = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (bytes, rep.stats.unwrap().spikes)
}

#[test]
fn any_ranks_and_threads_give_the_same_spikes() {
    let model = Model::new(small_params()).unwrap();
    let (reference, n) = spikes_of(&model, 1, 1, true);
    assert!(n > 1000, "too few spikes to compare: {n}");
    for (ranks, threads, overlap) in [(1, 2, true), (2, 1, true), (3, 2, true), (2, 2, false)] {
        let (got, _) = spikes_of(&model, ranks, threads, overlap);
        assert!(
            got == reference,
            "{ranks} ranks x {threads} threads (overlap {overlap}) differ from 1 x 1"
        );
    }
}

#[test]
fn checkpoint_restart_gives_the_uninterrupted_spikes() {
    let model = Model::new(small_params()).unwrap();
    let (reference, _) = spikes_of(&model, 1, 1, true);
    let dir = tmpdir("ckpt");
    let ck = dir.join("checkpoints");
    let path = dir.join("spikes.spk");
    // Interrupted at 60 ms with checkpoints every 25 ms (the last at 50 ms).
    let first = RunOptions {
        overlap: true,
        spikes: Some(path.clone()),
        checkpoint_every: Some(250),
        checkpoint_dir: Some(ck.clone()),
        stop_at: Some(600),
        ..Default::default()
    };
    let rep = run_virtual(&model, 2, 1, &first);
    assert!(!rep.completed && rep.end_step == 600);
    assert!(!path.exists() && hpc_spiking::spikes::partial_path(&path).exists());
    // Resumed with another decomposition.
    let resume = RunOptions {
        overlap: true,
        spikes: Some(path.clone()),
        restart: Some(ck.clone()),
        ..Default::default()
    };
    let rep = run_virtual(&model, 3, 2, &resume);
    assert_eq!(rep.start_step, 500);
    assert!(
        std::fs::read(&path).unwrap() == reference,
        "resumed run differs"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn brunel_args(out: &Path) -> Vec<String> {
    hpc_test_support::example::args(&common::NEST_100, out, &[])
}

fn run_processes(size: usize, out: &Path) {
    run_processes_with(size, out, &[]);
}

fn run_processes_with(size: usize, out: &Path, extra: &[&str]) {
    run_processes_on(size, 1, out, extra);
}

/// Like [`run_processes_with`] on `nodes` emulated nodes (rank r on node
/// `r % nodes`, through `HPC_NODE_NAME`).
fn run_processes_on(size: usize, nodes: usize, out: &Path, extra: &[&str]) {
    let args = hpc_test_support::example::args(&common::NEST_100, out, extra);
    let s =
        hpc_test_support::example::run_ranks(BRUNEL, &args, size, nodes, Duration::from_secs(20));
    assert!(
        s.contains("mean rate") && s.contains("bytes/synapse"),
        "{s}"
    );
}

#[test]
fn processes_under_the_runtime_give_the_same_spikes() {
    let model = Model::new(small_params()).unwrap();
    let (reference, _) = spikes_of(&model, 1, 1, true);
    // A singleton process (no launcher) first, then 2 and 3 ranks.
    let dir = tmpdir("proc1");
    let o = Command::new(BRUNEL)
        .args(brunel_args(&dir))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(dir.join("spikes.spk")).unwrap() == reference);
    let _ = std::fs::remove_dir_all(&dir);
    for size in [2, 3] {
        let dir = tmpdir("procs");
        run_processes(size, &dir);
        let got = std::fs::read(dir.join("spikes.spk")).unwrap();
        assert!(got == reference, "{size} processes differ from 1 x 1");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn every_collectives_engine_gives_the_same_spikes() {
    let model = Model::new(small_params()).unwrap();
    let (reference, _) = spikes_of(&model, 1, 1, true);
    for engine in ["inline", "thread", "proxy"] {
        let dir = tmpdir(engine);
        run_processes_with(3, &dir, &["--engine", engine]);
        let got = std::fs::read(dir.join("spikes.spk")).unwrap();
        assert!(got == reference, "engine {engine} differs from 1 x 1");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn the_proxy_engine_across_nodes_gives_the_spikes_of_one_node() {
    let model = Model::new(small_params()).unwrap();
    let (reference, _) = spikes_of(&model, 1, 1, true);
    // 3 ranks on 2 emulated nodes: each node's proxy carries its ranks'
    // exchanges with the other node.
    let dir = tmpdir("proxy-nodes");
    run_processes_on(3, 2, &dir, &["--engine", "proxy"]);
    let got = std::fs::read(dir.join("spikes.spk")).unwrap();
    assert!(
        got == reference,
        "the proxy engine on 2 nodes differs from 1 x 1"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--engine mpi` is refused with a clear error where it cannot work: in a build
/// without the `mpi` feature, and (with it) in a process no MPI launcher started.
/// The run under mpirun is `the_mpi_engine_under_mpirun_gives_the_same_spikes`.
#[test]
fn the_mpi_engine_needs_the_feature_and_an_mpi_launcher() {
    let dir = tmpdir("engine");
    let o = Command::new(BRUNEL)
        .args(brunel_args(&dir))
        .args(["--engine", "mpi"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let want = if cfg!(feature = "mpi") {
        "needs a job started by an MPI launcher"
    } else {
        "needs `--features mpi`"
    };
    assert!(err.contains(want), "expected {want:?} in: {err}");
    assert!(
        !dir.join("spikes.spk").exists(),
        "a refused run wrote spikes"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_paced_run_takes_its_time_and_keeps_its_spikes() {
    let model = Model::new(small_params()).unwrap();
    let (reference, _) = spikes_of(&model, 1, 1, true);
    let dir = tmpdir("pace");
    // 100 ms of model time at a fifth of real time: at least 0.5 s of wall clock.
    let t = std::time::Instant::now();
    let o = Command::new(BRUNEL)
        .args(brunel_args(&dir))
        .args(["--pace", "0.2"])
        .output()
        .unwrap();
    let took = t.elapsed();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(took >= Duration::from_millis(500), "{took:?}");
    assert!(std::fs::read(dir.join("spikes.spk")).unwrap() == reference);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_parameters_are_errors_not_panics() {
    let dir = tmpdir("bad");
    for bad in [
        &["--dt", "0.07"][..],
        &["--ce", "70000"],
        &["--v-reset", "30"],
        &["--pace", "0"],
        &["--pace=-1"],
    ] {
        let o = Command::new(BRUNEL)
            .args(brunel_args(&dir))
            .args(bad)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{bad:?}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("error"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_restart_can_extend_the_run() {
    let short = Model::new(small_params()).unwrap();
    let long = Model::new(Params {
        t_sim: 150.0,
        ..small_params()
    })
    .unwrap();
    let (reference, _) = spikes_of(&long, 1, 1, true);
    let dir = tmpdir("extend");
    let ck = dir.join("checkpoints");
    let path = dir.join("spikes.spk");
    let first = RunOptions {
        overlap: true,
        spikes: Some(path.clone()),
        checkpoint_every: Some(1000),
        checkpoint_dir: Some(ck.clone()),
        ..Default::default()
    };
    assert!(run_virtual(&short, 1, 1, &first).completed);
    let more = RunOptions {
        overlap: false,
        spikes: Some(path.clone()),
        restart: Some(ck),
        ..Default::default()
    };
    let rep = run_virtual(&long, 2, 1, &more);
    assert_eq!((rep.start_step, rep.end_step), (1000, 1500));
    assert!(
        std::fs::read(&path).unwrap() == reference,
        "extended run differs"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `mpi` engine under Open MPI's mpirun: MPI's own `MPI_Iallgatherv`, including
/// intervals where a rank has no spike (empty buffers must not read as MPI_IN_PLACE).
#[cfg(feature = "mpi")]
#[test]
fn the_mpi_engine_under_mpirun_gives_the_same_spikes() {
    let ok = Command::new("mpirun.openmpi")
        .arg("--version")
        .output()
        .is_ok();
    if !ok {
        assert!(
            std::env::var("HPC_REQUIRE_MPI").ok().as_deref() != Some("1"),
            "HPC_REQUIRE_MPI=1 but mpirun.openmpi is missing"
        );
        eprintln!("skipped: Open MPI's mpirun is not installed");
        return;
    }
    let model = Model::new(small_params()).unwrap();
    let (reference, _) = spikes_of(&model, 1, 1, true);
    let dir = tmpdir("mpirun");
    let o = Command::new("mpirun.openmpi")
        .args(["--oversubscribe", "--bind-to", "none", "-n", "2", BRUNEL])
        .args(brunel_args(&dir))
        .args(["--engine", "mpi"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = std::fs::read(dir.join("spikes.spk")).unwrap();
    assert!(
        got == reference,
        "mpirun -n 2 --engine mpi differs from 1 x 1"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn processes_resume_together_past_a_damaged_checkpoint() {
    let model = Model::new(small_params()).unwrap();
    let (reference, _) = spikes_of(&model, 1, 1, true);
    let dir = tmpdir("proc-ckpt");
    // Two processes write checkpoints at 25 and 50 ms and stop at 60 ms.
    run_processes_with(
        2,
        &dir,
        &[
            "--engine",
            "thread",
            "--checkpoint-every",
            "25",
            "--stop-at",
            "60",
        ],
    );
    let set = hpc_checkpoint::Checkpoints::new(dir.join("checkpoints"));
    assert_eq!(set.steps().unwrap(), vec![250, 500]);
    // Rank 1's file of the newest checkpoint is damaged: rank 0 chooses the one
    // before, and all three processes of the restart resume from it.
    let damaged = set.step_dir(500).join("rank-000001.ckpt");
    let mut b = std::fs::read(&damaged).unwrap();
    b[100] ^= 1;
    std::fs::write(&damaged, b).unwrap();
    let out = tmpdir("proc-ckpt-resumed");
    let restart = dir.join("checkpoints").display().to_string();
    run_processes_with(3, &out, &["--engine", "inline", "--restart", &restart]);
    assert!(
        std::fs::read(out.join("spikes.spk")).unwrap() == reference,
        "the resumed processes differ from the uninterrupted run"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&out);
}
