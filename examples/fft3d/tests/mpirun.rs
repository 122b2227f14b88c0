//! The transform on Open MPI's own `MPI_Ialltoall` (the `Mpi` engine) under
//! `mpirun`, against the serial FFT (feature `mpi`). Needs Open MPI's
//! `mpirun.openmpi` (or `mpirun`); when it is missing the test says so and passes,
//! unless `HPC_REQUIRE_MPI=1`.
#![cfg(feature = "mpi")]

use std::process::Command;

const FFT3D: &str = env!("CARGO_BIN_EXE_fft3d");

fn mpirun() -> Option<String> {
    hpc_test_support::open_mpi_mpirun()
}

#[test]
fn the_mpi_engine_matches_the_serial_fft() {
    let Some(m) = mpirun() else { return };
    for (n, grid, mode) in [
        (2, "1x2", "overlap"),
        (4, "2x2", "overlap"),
        (2, "2x1", "blocking"),
    ] {
        let o = Command::new(&m)
            .args(["-n", &n.to_string(), "--oversubscribe", "--bind-to", "none"])
            .args([
                FFT3D, "--n", "12", "--grid", grid, "--engine", "mpi", "--mode", mode,
            ])
            .args(["--reps", "2", "--warmup", "0"])
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env_remove(hpc_runtime::env::ENGINE)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{grid} {mode}: {out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let line = out
            .lines()
            .find(|l| l.contains("result "))
            .unwrap_or_else(|| panic!("no result line: {out}"));
        assert!(line.contains("engine=mpi"), "{line}");
        let rel: f64 = line
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix("rel_err="))
            .unwrap()
            .parse()
            .unwrap();
        assert!(rel < 1e-12, "{grid} {mode}: {line}");
    }
}
