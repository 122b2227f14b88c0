//! The distributed transform against the serial FFT of the same data, as real
//! processes under the built-in launcher: 1, 2 and 4 ranks, row, column and 2-D
//! grids, blocking and overlapped transposes, every engine on one node and across
//! two emulated nodes.

use std::process::Command;
use std::time::{Duration, Instant};

use hpc_runtime::env;
use hpc_test_support::Job;

const FFT3D: &str = env!("CARGO_BIN_EXE_fft3d");
const TIMEOUT: Duration = Duration::from_secs(60);

/// `size` ranks of `fft3d ARGS` on `nodes` emulated nodes (rank r on node
/// `r % nodes`, so a node's ranks are not contiguous), with no `HPC_ENGINE` from
/// the caller.
fn launch(size: usize, nodes: usize, args: &[&str]) -> Vec<std::process::Output> {
    Job::program(FFT3D, args, size)
        .timeout(TIMEOUT)
        .nodes(nodes)
        .env(env::ENGINE, "")
        .run()
}

/// Runs the job; returns rank 0's standard output, panicking with every failed
/// rank's error output.
fn job(size: usize, nodes: usize, args: &[&str]) -> String {
    let t = Instant::now();
    let outs = launch(size, nodes, args);
    let failed: Vec<String> = outs
        .iter()
        .enumerate()
        .filter(|(_, o)| !o.status.success())
        .map(|(r, o)| format!("rank {r}: {}", String::from_utf8_lossy(&o.stderr)))
        .collect();
    assert!(
        failed.is_empty(),
        "fft3d {args:?} on {size} ranks / {nodes} nodes failed:\n{}",
        failed.join("\n")
    );
    eprintln!("{args:?} x{size} on {nodes} node(s): {:?}", t.elapsed());
    String::from_utf8_lossy(&outs[0].stdout).into_owned()
}

/// The value of `key=` in rank 0's `result` line.
fn field(out: &str, key: &str) -> String {
    let line = out
        .lines()
        .find(|l| l.starts_with("result "))
        .unwrap_or_else(|| panic!("no result line in:\n{out}"));
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {line}"))
        .to_string()
}

/// Runs the job and checks its relative error against the serial FFT (the
/// program fails above its own tolerance too; this checks the reported figure).
fn matches_serial(size: usize, nodes: usize, args: &[&str]) -> String {
    let out = job(size, nodes, args);
    let rel: f64 = field(&out, "rel_err").parse().unwrap();
    assert!(rel < 1e-12, "{args:?}: relative error {rel}\n{out}");
    assert_eq!(field(&out, "ranks"), size.to_string());
    out
}

#[test]
fn one_rank_matches_the_serial_fft() {
    // A singleton: no launcher at all.
    let o = Command::new(FFT3D)
        .args([
            "--n", "12", "--reps", "1", "--warmup", "0", "--engine", "inline",
        ])
        .env_remove(env::ENGINE)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rel: f64 = field(&out, "rel_err").parse().unwrap();
    assert!(rel < 1e-12, "{out}");
    // One rank through the launcher too, in both modes.
    for mode in ["overlap", "blocking"] {
        matches_serial(1, 1, &["--n", "8", "--reps", "1", "--mode", mode]);
    }
}

#[test]
fn two_ranks_as_rows_columns_and_slabs_match() {
    for grid in ["2x1", "1x2"] {
        for engine in ["inline", "thread"] {
            for mode in ["overlap", "blocking"] {
                let out = matches_serial(
                    2,
                    1,
                    &[
                        "--n",
                        "12",
                        "--grid",
                        grid,
                        "--engine",
                        engine,
                        "--mode",
                        mode,
                        "--batches",
                        "5",
                        "--reps",
                        "2",
                        "--warmup",
                        "0",
                    ],
                );
                assert_eq!(field(&out, "engine"), engine);
                assert_eq!(field(&out, "grid"), grid);
            }
        }
    }
}

#[test]
fn four_ranks_on_a_2x2_grid_match_with_every_engine() {
    for engine in ["inline", "thread", "proxy"] {
        let out = matches_serial(
            4,
            1,
            &[
                "--n",
                "16",
                "--grid",
                "2x2",
                "--engine",
                engine,
                "--batches",
                "3",
                "--reps",
                "2",
                "--warmup",
                "0",
            ],
        );
        assert_eq!(field(&out, "engine"), engine);
    }
    // The default grid of 4 ranks is 2x2; uneven batches (3 over 4 planes).
    let out = matches_serial(4, 1, &["--n", "8", "--batches", "3", "--reps", "1"]);
    assert_eq!(field(&out, "grid"), "2x2");
}

#[test]
fn two_emulated_nodes_match_with_every_engine() {
    for engine in ["inline", "thread", "proxy"] {
        for mode in ["overlap", "blocking"] {
            let out = matches_serial(
                4,
                2,
                &[
                    "--n",
                    "12",
                    "--grid",
                    "2x2",
                    "--engine",
                    engine,
                    "--mode",
                    mode,
                    "--batches",
                    "2",
                    "--reps",
                    "2",
                    "--warmup",
                    "0",
                ],
            );
            assert_eq!(field(&out, "nodes"), "2");
        }
    }
}

#[test]
fn bad_input_is_refused_with_a_reason() {
    let run = |args: &[&str]| {
        let o = Command::new(FFT3D)
            .args(args)
            .env_remove(env::ENGINE)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    assert!(run(&["--grid", "2x2"]).contains("needs 4 ranks, the job has 1"));
    assert!(run(&["--grid", "2by2"]).contains("P1xP2"));
    assert!(run(&["--n", "0"]).contains("at least 1"));
    assert!(run(&["--engine", "dpu"]).contains("--engine \"dpu\""));
    // N not a multiple of the grid: every rank refuses it.
    for o in launch(2, 1, &["--n", "7", "--engine", "inline"]) {
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("N = 7 is not a multiple"), "{err}");
    }
}

/// In DPU placement on 2 emulated nodes the row and column communicators
/// (splits of the world's) share their nodes' proxies: a standing DPU
/// service, the only one that can start a proxy here, starts one per node
/// for the whole run, and the transform matches the serial FFT.
#[test]
fn dpu_placement_rows_and_columns_share_one_proxy_per_node() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let started = Arc::new(AtomicUsize::new(0));
    // A free port, found by binding it and letting it go: another test's
    // launcher may take it meanwhile, so a service that cannot bind it (and
    // returns at once) is started again on another.
    let listen = (0..20)
        .find_map(|_| {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .ok()?
                .local_addr()
                .ok()?
                .port();
            let listen: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
            let count = started.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                // Reachable only from this machine's tests: no key.
                let auth = hpc_comm::proxy::ServiceAuth::Insecure;
                let r = hpc_comm::proxy::dpu_service(listen, auth, move || {
                    count.fetch_add(1, Ordering::SeqCst);
                    Command::new(FFT3D)
                });
                let _ = tx.send(r);
            });
            match rx.recv_timeout(Duration::from_millis(300)) {
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Some(listen),
                _ => None,
            }
        })
        .expect("no port for the DPU service");
    let args = [
        "--n",
        "12",
        "--grid",
        "2x2",
        "--engine",
        "proxy",
        "--batches",
        "2",
        "--reps",
        "3",
        "--warmup",
        "1",
    ];
    let t = Instant::now();
    let outs = Job::program(FFT3D, &args, 4)
        .timeout(TIMEOUT)
        .nodes(2)
        .env(env::ENGINE, "")
        .env(env::COLL_PROXY_PLACEMENT, "dpu")
        .env(env::COLL_PROXY_DPU_HOST, &listen.to_string())
        // Not a program that serves: only the service's proxies may.
        .env(env::COLL_PROXY_CMD, "/bin/false")
        .run();
    for (r, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "rank {r}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let out = String::from_utf8_lossy(&outs[0].stdout).into_owned();
    let rel: f64 = field(&out, "rel_err").parse().unwrap();
    assert!(rel < 1e-12, "relative error {rel}\n{out}");
    assert_eq!(field(&out, "nodes"), "2");
    let proxies = started.load(Ordering::SeqCst);
    eprintln!(
        "dpu x4 on 2 nodes: {proxies} proxies, median {} ms per transform, {:?} in all",
        field(&out, "median_ms"),
        t.elapsed()
    );
    assert_eq!(proxies, 2, "the DPU services started {proxies} proxies");
}

/// Ranks given other flags than rank 0 (a launcher line that differs by
/// rank) are refused by every rank before the communicator is made, naming
/// the rank and the flag, and rank 0 prints no result line: with `--mode`
/// differing the run ended 0, its result line saying rank 0's `mode=overlap`
/// where rank 1 blocked; with `--reps` differing rank 0 printed its result
/// line of ten reps while rank 1 failed.
#[test]
fn ranks_given_other_flags_are_refused_naming_them() {
    for (extra, words) in [
        ("--mode blocking", "--mode \"overlap\" -> \"blocking\""),
        ("--reps 11", "--reps 10 -> 11"),
    ] {
        let outs = Job::program(FFT3D, &["--n", "8"], 2)
            .timeout(TIMEOUT)
            .env(env::ENGINE, "")
            .extra_args_on(1, extra)
            .run();
        for (rank, o) in outs.iter().enumerate() {
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "rank {rank}: {err}");
            assert!(
                err.contains(&format!(
                    "rank 1 was given other flags than rank 0 ({words}: rank 0 -> rank 1)"
                )),
                "rank {rank}: {err}"
            );
        }
        let out = String::from_utf8_lossy(&outs[0].stdout);
        assert!(!out.contains("result "), "{out}");
    }
}

/// The ranks' flags are compared as the run uses them, not as typed: rank 1
/// given `--grid 01x002` where rank 0 has no `--grid` (the default grid of
/// two ranks, 1x2) runs the same transform, and was refused as different
/// (`--grid None -> Some("01x002")`); a grid that differs is still refused,
/// named as the run reads it.
#[test]
fn flags_are_compared_as_parsed_not_as_typed() {
    let outs = Job::program(FFT3D, &["--n", "8", "--reps", "1", "--warmup", "0"], 2)
        .timeout(TIMEOUT)
        .env(env::ENGINE, "")
        .extra_args_on(1, "--grid 01x002")
        .run();
    for (rank, o) in outs.iter().enumerate() {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "rank {rank}: {err}");
    }
    let out = String::from_utf8_lossy(&outs[0].stdout).into_owned();
    assert_eq!(field(&out, "grid"), "1x2");
    let outs = Job::program(FFT3D, &["--n", "8"], 2)
        .timeout(TIMEOUT)
        .env(env::ENGINE, "")
        .extra_args_on(1, "--grid 2x01")
        .run();
    for (rank, o) in outs.iter().enumerate() {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "rank {rank}: {err}");
        assert!(
            err.contains("rank 1 was given other flags than rank 0 (--grid 1x2 -> 2x1"),
            "rank {rank}: {err}"
        );
    }
}
