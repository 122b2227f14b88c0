//! Bit-identical spikes for any number of ranks and threads, in-process ("virtual
//! ranks" over `LocalExchange`) and as processes under the hpc runtime, and exact
//! resumption from checkpoints.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use hpc_spiking::alltoallv::Gather;
use hpc_spiking::exchange::virtual_ranks;
use hpc_test_support::example;
use microcircuit::params::{Model, Params};
use microcircuit::sim::{RankReport, RunOptions, Simulation};

const BIN: &str = env!("CARGO_BIN_EXE_microcircuit");

/// A fresh directory, removed at the end of the test (and when it fails).
fn tmpdir(tag: &str) -> hpc_test_support::TmpDir {
    hpc_test_support::TmpDir::new("microcircuit-test", tag)
}

/// 1.5 % of the neurons and 5 % of the in-degrees, with the thalamic pulse early.
fn small_params() -> Params {
    let mut p = Params {
        n_scaling: 0.015,
        k_scaling: 0.05,
        t_presim: 20.0,
        t_sim: 60.0,
        ..Params::default()
    };
    p.thalamus.enabled = true;
    p.thalamus.start = 30.0;
    p
}

fn run_virtual(model: &Model, ranks: usize, threads: usize, opts: &RunOptions) -> RankReport {
    let mut reports = virtual_ranks(ranks, threads, |rank, ex, pool| {
        let mut sim = Simulation::new(model, rank, ranks, pool, opts)?;
        sim.run(pool, &mut Gather(ex), opts, None)
    })
    .unwrap();
    reports.swap_remove(0)
}

fn spikes_of(model: &Model, ranks: usize, threads: usize) -> (Vec<u8>, u64) {
    let (bytes, rep) = spikes_with(model, (ranks, threads), true);
    (bytes, rep.stats.unwrap().spikes_total)
}

/// The spike file of a run on `ranks` x `threads`, the exchange overlapped with the
/// next update when `overlap` (and the minimum delay allows it), with rank 0's report.
fn spikes_with(
    model: &Model,
    (ranks, threads): (usize, usize),
    overlap: bool,
) -> (Vec<u8>, RankReport) {
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
    (bytes, rep)
}

/// Without a deviation of the delays the shortest is several steps, and the
/// exchange of an interval (half of it) overlaps the next update: the spikes
/// received meanwhile are delivered all the same, as by the run that exchanges
/// every shortest delay and waits for it.
#[test]
fn the_overlapped_exchange_gives_the_spikes_of_the_waiting_one() {
    let mut p = Params {
        delay_rel_std: 0.0,
        ..small_params()
    };
    p.thalamus.delay_rel_std = 0.0;
    let model = Model::new(p).unwrap();
    assert!(model.min_delay >= 2, "min delay {}", model.min_delay);
    let (waiting, w) = spikes_with(&model, (1, 1), false);
    assert!(w.stats.as_ref().unwrap().spikes_total > 200);
    for (ranks, threads) in [(1, 1), (2, 2)] {
        let (overlapped, o) = spikes_with(&model, (ranks, threads), true);
        assert!(o.interval_steps < w.interval_steps);
        assert!(
            overlapped == waiting,
            "{ranks} x {threads}, exchanging every {} steps overlapped: other spikes than \
             every {} steps waiting",
            o.interval_steps,
            w.interval_steps
        );
    }
}

#[test]
fn any_ranks_and_threads_give_the_same_spikes() {
    let model = Model::new(small_params()).unwrap();
    let (reference, n) = spikes_of(&model, 1, 1);
    assert!(n > 200, "too few spikes to compare: {n}");
    for (ranks, threads) in [(1, 2), (2, 1), (3, 2)] {
        let (got, _) = spikes_of(&model, ranks, threads);
        assert!(
            got == reference,
            "{ranks} ranks x {threads} threads differ from 1 x 1"
        );
    }
}

#[test]
fn another_seed_gives_other_spikes() {
    let model = Model::new(small_params()).unwrap();
    let other = Model::new(Params {
        seed: 56,
        ..small_params()
    })
    .unwrap();
    assert!(spikes_of(&model, 1, 1).0 != spikes_of(&other, 1, 1).0);
}

#[test]
fn checkpoint_restart_gives_the_uninterrupted_spikes() {
    let model = Model::new(small_params()).unwrap();
    let (reference, _) = spikes_of(&model, 1, 1);
    let dir = tmpdir("ckpt");
    let ck = dir.join("checkpoints");
    let path = dir.join("spikes.spk");
    // Interrupted at 55 ms (inside the thalamic pulse) with checkpoints every 25 ms.
    let first = RunOptions {
        overlap: true,
        spikes: Some(path.clone()),
        checkpoint_every: Some(250),
        checkpoint_dir: Some(ck.clone()),
        stop_at: Some(550),
        ..Default::default()
    };
    let rep = run_virtual(&model, 2, 1, &first);
    assert!(!rep.completed && rep.end_step == 550);
    assert!(!path.exists());
    // Resumed from the newest (50 ms) with another decomposition.
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

/// [`small_params`] on the command line.
fn cli_args(out: &Path) -> Vec<String> {
    example::args(&common::small_model("60"), out, &[])
}

fn run_processes(size: usize, out: &Path, extra: &[&str]) {
    let args = example::args(&common::small_model("60"), out, extra);
    let s = example::run_ranks(BIN, &args, size, 1, Duration::from_secs(30));
    assert!(s.contains("L23E") && s.contains("bytes/synapse"), "{s}");
}

/// The spike file of [`small_params`] run as one process (no launcher) into a
/// fresh directory `tag`, and that directory.
fn one_process(tag: &str) -> (hpc_test_support::TmpDir, Vec<u8>) {
    let dir = tmpdir(tag);
    example::succeeded(&Command::new(BIN).args(cli_args(&dir)).output().unwrap());
    let spikes = std::fs::read(dir.join("spikes.spk")).unwrap();
    (dir, spikes)
}

#[test]
fn one_and_two_processes_give_the_same_spikes() {
    // A singleton process (no launcher), then two ranks under the runtime.
    let (one, reference) = one_process("proc1");
    let two = tmpdir("proc2");
    run_processes(2, &two, &[]);
    assert!(
        std::fs::read(two.join("spikes.spk")).unwrap() == reference,
        "2 processes differ from 1"
    );
    let _ = std::fs::remove_dir_all(&one);
    let _ = std::fs::remove_dir_all(&two);
}

#[test]
fn the_portable_and_the_vector_updates_give_the_same_spikes() {
    // Where the processor has AVX2 or AVX-512 the default run takes that build
    // of the neuron update; elsewhere both runs take the portable one.
    let mut spikes = Vec::new();
    for extra in [&[][..], &["--portable-update"][..]] {
        let dir = tmpdir("isa");
        let o = Command::new(BIN)
            .args(cli_args(&dir))
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        spikes.push(std::fs::read(dir.join("spikes.spk")).unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(
        spikes[0].len() > 1000,
        "too few spikes to compare: {} bytes",
        spikes[0].len()
    );
    assert!(
        spikes[0] == spikes[1],
        "the vector update changed the spikes"
    );
}

#[test]
fn the_targeted_exchange_gives_the_allgather_spikes_and_receives_less() {
    let (one, reference) = one_process("a2a1");
    let gather = tmpdir("a2a-gather");
    run_processes(3, &gather, &[]);
    let targeted = tmpdir("a2a-targeted");
    run_processes(
        3,
        &targeted,
        &["--exchange", "alltoallv", "--engine", "inline"],
    );
    assert!(
        std::fs::read(targeted.join("spikes.spk")).unwrap() == reference,
        "alltoallv over 3 processes differs from 1 process"
    );
    // Ranks other than 0 receive only the spikes of sources with targets on them.
    let recv = |dir: &Path| hpc_test_support::example::received_per_rank(dir);
    let (g, t) = (recv(&gather), recv(&targeted));
    assert_eq!(g[0], t[0], "rank 0 receives every spike either way");
    assert!(
        (1..3).all(|r| t[r] <= g[r]) && t[1] + t[2] < g[1] + g[2],
        "allgather {g:?}, alltoallv {t:?}"
    );
    for d in [one, gather, targeted] {
        let _ = std::fs::remove_dir_all(d);
    }
}
