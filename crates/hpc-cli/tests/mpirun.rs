//! The same self-test, unchanged, under Open MPI's `mpirun` (feature `mpi`).
//!
//! Needs Open MPI's `mpirun.openmpi` (or `mpirun`). When it is missing the tests say so
//! and pass, unless `HPC_REQUIRE_MPI=1` (set by `cargo xtask test`, which installs it).
#![cfg(feature = "mpi")]

use std::process::{Command, Output};
use std::time::{Duration, Instant};

const HPC: &str = env!("CARGO_BIN_EXE_hpc");

fn mpirun() -> Option<String> {
    hpc_test_support::open_mpi_mpirun()
}

fn run(mpirun: &str, n: usize, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(mpirun)
        .args([
            "--oversubscribe",
            "--bind-to",
            "none",
            "-n",
            &n.to_string(),
            HPC,
        ])
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn selftest_under_openmpi_reports_mpi_bootstrap() {
    let Some(m) = mpirun() else { return };
    for n in [2usize, 4] {
        // The MPI library's own immediate collectives, through the Mpi engine.
        let out = run(
            &m,
            n,
            &[
                "selftest",
                "--json",
                "--expect-size",
                &n.to_string(),
                "--collectives",
                "mpi",
            ],
            &[],
        );
        let so = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{so}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows: Vec<serde_json::Value> = so
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), n);
        let mut ranks: Vec<u64> = rows.iter().map(|r| r["rank"].as_u64().unwrap()).collect();
        ranks.sort_unstable();
        assert_eq!(ranks, (0..n as u64).collect::<Vec<_>>());
        for r in &rows {
            let b = r["bootstrap"].as_str().unwrap();
            assert!(
                b.contains("MPI via Open MPI mpirun") && b.contains("threading multiple"),
                "{b}"
            );
            assert_eq!(r["local_size"].as_u64(), Some(n as u64));
            assert_eq!(r["collectives"]["engine"], "mpi", "{r}");
        }
    }
}

#[test]
fn hung_rank_under_mpi_times_out_naming_it() {
    let Some(m) = mpirun() else { return };
    let t = Instant::now();
    let out = run(
        &m,
        3,
        &["selftest", "--fail-rank", "2", "--fail-mode", "hang"],
        &[("HPC_TIMEOUT", "1.5")],
    );
    assert!(t.elapsed() < Duration::from_secs(30));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("still waiting for rank(s) 2"), "{err}");
}
