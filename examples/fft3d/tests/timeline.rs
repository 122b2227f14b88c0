//! The transform's timeline (`HPC_TRACE`) as real ranks record it: the regions the
//! example marks, the SDK's collective spans, the proxy as a process of its own.

use std::time::Duration;

use hpc_runtime::env;
use hpc_test_support::Job;

const FFT3D: &str = env!("CARGO_BIN_EXE_fft3d");

#[test]
fn two_ranks_and_their_proxy_record_the_overlapped_transposes() {
    let dir = hpc_test_support::TmpDir::new("fft3d-timeline", "proxy");
    let traces = dir.join("trace");
    let args = [
        "--n",
        "16",
        "--grid",
        "1x2",
        "--engine",
        "proxy",
        "--reps",
        "1",
        "--warmup",
        "0",
        "--batches",
        "4",
        "--no-check",
    ];
    let outs = Job::program(FFT3D, &args, 2)
        .timeout(Duration::from_secs(60))
        .env(env::ENGINE, "")
        // Every collective to the proxy, however small.
        .env(env::PROXY_MIN, "0")
        .env(env::TRACE, traces.to_str().unwrap())
        .run();
    let failed = hpc_test_support::exit_failures(&outs);
    assert!(failed.is_empty(), "{failed:?}");
    let merged = hpc_trace::merge::merge_dir(&traces).unwrap();
    assert_eq!(merged.rank_ids, [0, 1]);
    let spans: Vec<_> = merged.events.iter().filter(|e| e["ph"] == "X").collect();
    let of = |pid: u64, name: &str| -> Vec<(f64, f64, u64)> {
        spans
            .iter()
            .filter(|s| s["pid"] == pid && s["name"] == name)
            .map(|s| {
                let ts = s["ts"].as_f64().unwrap();
                (
                    ts,
                    ts + s["dur"].as_f64().unwrap(),
                    s["tid"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    for rank in [0, 1] {
        // Two transposes of 4 batches each, per transform (one, and the check's none).
        assert_eq!(of(rank, "forward").len(), 1, "rank {rank}");
        let transposes = of(rank, "transpose");
        assert_eq!(transposes.len(), 8, "rank {rank}");
        assert!(
            of(rank, "post").len() >= 8 && of(rank, "wait").len() >= 8,
            "rank {rank}"
        );
        // Overlap: some batch's FFTs run inside another batch's transpose.
        let work: Vec<_> = [of(rank, "fft + pack"), of(rank, "unpack + fft")].concat();
        let inside = work.iter().any(|&(s, e, t)| {
            transposes
                .iter()
                .any(|&(ts, te, tt)| tt == t && ts <= s && e <= te)
        });
        assert!(inside, "rank {rank}: no FFT inside a transpose");
    }
    // The proxy processes (one per communicator), after the ranks, at work.
    let proxies: Vec<u64> = merged.meta["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"].as_str().unwrap().starts_with("collectives proxy"))
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    assert!(!proxies.is_empty(), "{}", merged.meta);
    assert!(proxies.iter().all(|&p| p >= 2));
    assert!(proxies.iter().any(|&p| !of(p, "proxy work").is_empty()));
    std::fs::remove_dir_all(&dir).unwrap();
}
