//! `hpc perftest` under `hpc run -n 2`: every test on every local backend prints
//! perftest's header and one row of numbers per size.

use std::process::Command;

const HPC: &str = env!("CARGO_BIN_EXE_hpc");

fn perftest(args: &[&str]) -> String {
    perftest_env(args, &[])
}

fn perftest_env(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(HPC)
        .args(["run", "--no-tag", "-n", "2", "--", HPC, "perftest"])
        .args(args)
        .env("HPC_TIMEOUT", "20")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // The environment names the provider of the ofi runs: a failure must say which.
    assert!(
        out.status.success(),
        "{args:?} {env:?}: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn rows(text: &str) -> Vec<Vec<f64>> {
    text.lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect())
        .collect()
}

#[test]
fn every_test_on_shm_and_tcp() {
    for backend in ["shm", "tcp"] {
        for test in ["write_bw", "read_bw", "send_bw"] {
            let out = perftest(&[
                test,
                "--backend",
                backend,
                "--size",
                "4096",
                "--iters",
                "200",
            ]);
            assert!(
                out.contains("BW peak[MB/sec]") && out.contains("MsgRate[Mpps]"),
                "{out}"
            );
            assert!(out.contains(&format!("hpc-rdma {backend}")), "{out}");
            let r = rows(&out);
            assert_eq!(r.len(), 1, "{out}");
            assert_eq!(r[0][0], 4096.0);
            assert_eq!(r[0][1], 200.0);
            assert!(r[0][3] > 0.0, "{out}");
        }
        for test in ["write_lat", "read_lat", "send_lat"] {
            let out = perftest(&[test, "--backend", backend, "--size", "64", "--iters", "200"]);
            assert!(
                out.contains("t_typical[usec]") && out.contains("99% percentile[usec]"),
                "{out}"
            );
            let r = rows(&out);
            assert_eq!(r.len(), 1, "{out}");
            assert_eq!(r[0].len(), 8, "{out}");
            assert!(r[0][2] > 0.0 && r[0][2] <= r[0][3], "min <= max: {out}");
        }
    }
}

/// The libfabric backend over both providers Debian ships: every test, one row each.
#[cfg(feature = "ofi")]
#[test]
fn every_test_on_ofi() {
    for provider in ["shm", "tcp;ofi_rxm"] {
        let env = [("HPC_OFI_PROVIDER", provider)];
        for test in [
            "write_bw",
            "read_bw",
            "send_bw",
            "write_lat",
            "read_lat",
            "send_lat",
        ] {
            let out = perftest_env(
                &[
                    test,
                    "--backend",
                    "ofi",
                    "--size",
                    "65536",
                    "--iters",
                    "100",
                ],
                &env,
            );
            assert!(out.contains("hpc-rdma ofi"), "{provider} {test}: {out}");
            let r = rows(&out);
            assert_eq!(r.len(), 1, "{provider} {test}: {out}");
            assert_eq!(r[0][0], 65536.0);
            assert!(r[0][2] > 0.0 && r[0][3] > 0.0, "{provider} {test}: {out}");
        }
    }
}

#[test]
fn all_sizes_sweep() {
    let out = perftest(&["write_lat", "--all", "--iters", "20", "--backend", "shm"]);
    let r = rows(&out);
    assert_eq!(r.len(), 23, "{out}");
    assert_eq!(r[22][0], (8 << 20) as f64);
}

#[test]
fn one_rank_is_refused() {
    let out = Command::new(HPC)
        .args(["perftest", "write_bw"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("exactly 2 ranks"));
}

/// A measurement longer than the job's timeout (an `--iters` within its limits)
/// failed on the waiting rank with "barrier timed out after 1s: still waiting for
/// rank(s) 0" alone; the error now says what to change.
#[test]
fn a_measurement_longer_than_the_timeout_names_what_to_change() {
    let out = Command::new(HPC)
        .args([
            "run",
            "--no-tag",
            "-n",
            "2",
            "--timeout",
            "1",
            "--",
            HPC,
            "perftest",
        ])
        .args([
            "write_bw",
            "--backend",
            "shm",
            "-s",
            "1",
            "-n",
            "1073741824",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("the measurement of 1 bytes x 1073741824 iterations did not end")
            && err.contains("give fewer --iters or a longer timeout"),
        "{err}"
    );
}
