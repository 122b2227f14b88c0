//! Launch latency of `hpc run`: time from starting `hpc run -n N` to every rank being
//! past its first barrier, median over repeated runs, beside `mpirun` (Open MPI) when
//! it and an MPI-enabled `hpc` are available.
//!
//! ```text
//! cargo build --release -p hpc-cli --features mpi
//! cargo run --release -p hpc-benches --bin launch -- [--ranks 4] [--runs 15]
//! ```

use std::path::PathBuf;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use hpc_benches::{median, percentile};

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Runs the launch once; returns milliseconds from spawn to the last rank's first
/// barrier, or `None` if the launch failed.
fn once(launcher: &[String], hpc: &PathBuf, n: usize) -> Option<f64> {
    let t0 = now_ns();
    let out = Command::new(&launcher[0])
        .args(&launcher[1..])
        .arg(hpc)
        .args([
            "selftest",
            "--json",
            "--rounds",
            "0",
            "--expect-size",
            &n.to_string(),
        ])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!("launch failed: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    let mut last = 0u128;
    let mut seen = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let json = line.split_once("] ").map_or(line, |(_, j)| j);
        if let Some(i) = json.find("\"first_barrier_unix_ns\":\"") {
            let rest = &json[i + 25..];
            let v: u128 = rest[..rest.find('"')?].parse().ok()?;
            last = last.max(v);
            seen += 1;
        }
    }
    (seen == n).then(|| (last.saturating_sub(t0)) as f64 / 1e6)
}

fn main() {
    let mut ranks = 4usize;
    let mut runs = 15usize;
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--ranks" => ranks = args[i + 1].parse().expect("--ranks N"),
            "--runs" => runs = args[i + 1].parse().expect("--runs N"),
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    let exe = std::env::current_exe().expect("current exe");
    let hpc = exe.with_file_name("hpc");
    assert!(
        hpc.exists(),
        "build the hpc binary first (cargo build --release -p hpc-cli)"
    );
    let n = ranks.to_string();
    let mut rows: Vec<(String, Vec<String>)> = vec![(
        format!("hpc run -n {n}"),
        vec![
            hpc.display().to_string(),
            "run".into(),
            "-n".into(),
            n.clone(),
            "--".into(),
        ],
    )];
    let has_ompi = Command::new("mpirun.openmpi")
        .arg("--version")
        .output()
        .is_ok();
    if has_ompi {
        rows.push((
            format!("mpirun -n {n} (Open MPI)"),
            [
                "mpirun.openmpi",
                "--oversubscribe",
                "--bind-to",
                "none",
                "-n",
                &n,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ));
    }
    println!("launch to all {ranks} ranks past their first barrier, {runs} runs");
    println!(
        "{:<28} {:>12} {:>12} {:>12}",
        "launcher", "median[ms]", "p10[ms]", "p90[ms]"
    );
    for (name, launcher) in rows {
        let xs: Vec<f64> = (0..runs)
            .filter_map(|_| once(&launcher, &hpc, ranks))
            .collect();
        if xs.is_empty() {
            println!("{name:<28} {:>12}", "failed");
            continue;
        }
        println!(
            "{name:<28} {:>12.1} {:>12.1} {:>12.1}",
            median(&xs),
            percentile(&xs, 10.0),
            percentile(&xs, 90.0)
        );
    }
}
