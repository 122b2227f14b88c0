//! Recording spans into a process file and merging files: what the files hold, how
//! clocks are aligned, and the errors for files that cannot be merged.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::Layer as _;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hpc-trace-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Records `work` into `dir` as rank `rank`; the finished file.
fn record(dir: &Path, rank: usize, work: impl FnOnce()) -> PathBuf {
    let layer = hpc_trace::TraceLayer::create(dir).unwrap();
    let sink = layer.clone();
    let subscriber =
        tracing_subscriber::registry().with(layer.with_filter(hpc_trace::default_filter()));
    tracing::subscriber::with_default(subscriber, work);
    sink.set_rank(rank);
    sink.finish().unwrap().expect("a finished file")
}

fn spans(events: &[Value]) -> Vec<&Value> {
    events.iter().filter(|e| e["ph"] == "X").collect()
}

#[test]
fn spans_nest_with_their_fields_and_levels_are_filtered() {
    let dir = scratch("nest");
    let file = record(&dir, 3, || {
        let _outer = hpc_trace::region("step");
        {
            let _inner = tracing::info_span!("exchange", bytes = 4096u64, peer = 2).entered();
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        // An application's debug span is not recorded; an SDK target's trace span is.
        let _quiet = tracing::debug_span!("quiet").entered();
        let _sdk = tracing::trace_span!(target: "hpc_comm::x", "post", op = "allreduce").entered();
    });
    assert_eq!(file, dir.join("rank-3.json"));
    // A finished file is a Chrome trace of its own.
    let own: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert!(own["traceEvents"].as_array().unwrap().len() >= 4);
    assert_eq!(own["hpcEnd"]["rank"], 3);

    let merged = hpc_trace::merge::merge_dir(&dir).unwrap();
    assert_eq!(merged.ranks, 1);
    let x = spans(&merged.events);
    let names: Vec<&str> = x.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert!(
        names.contains(&"step") && names.contains(&"exchange"),
        "{names:?}"
    );
    assert!(names.contains(&"post"), "{names:?}");
    assert!(!names.contains(&"quiet"), "{names:?}");
    let get = |n: &str| *x.iter().find(|e| e["name"] == n).unwrap();
    let (outer, inner) = (get("step"), get("exchange"));
    assert_eq!(inner["args"]["bytes"], 4096);
    assert_eq!(inner["args"]["peer"], 2);
    assert_eq!(get("post")["cat"], "hpc_comm::x");
    let (ots, odur) = (
        outer["ts"].as_f64().unwrap(),
        outer["dur"].as_f64().unwrap(),
    );
    let (its, idur) = (
        inner["ts"].as_f64().unwrap(),
        inner["dur"].as_f64().unwrap(),
    );
    assert!(idur >= 2000.0, "the inner span lasted its sleep: {idur} µs");
    assert!(
        ots <= its && its + idur <= ots + odur,
        "nested: {outer} {inner}"
    );
    assert!(x.iter().all(|e| e["pid"] == 3));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn events_are_instants_and_threads_are_named() {
    let dir = scratch("instants");
    record(&dir, 0, || {
        // The subscriber is this thread's: the worker is given it.
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        std::thread::Builder::new()
            .name("worker".into())
            .spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    tracing::info!(n = 5, "checkpoint written");
                });
            })
            .unwrap()
            .join()
            .unwrap();
    });
    let merged = hpc_trace::merge::merge_dir(&dir).unwrap();
    let inst = merged
        .events
        .iter()
        .find(|e| e["ph"] == "i")
        .expect("an instant");
    assert_eq!(inst["name"], "checkpoint written");
    assert_eq!(inst["args"]["n"], 5);
    let named = merged.events.iter().any(|e| {
        e["name"] == "thread_name" && e["args"]["name"] == "worker" && e["tid"] == inst["tid"]
    });
    assert!(named, "{:?}", merged.events);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Rewrites a finished file's clock base (as another process or host would have).
fn set_base(file: &Path, realtime_ns: u64, monotonic_ns: u64, boot: &str) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    v["hpcTrace"]["realtime_ns"] = realtime_ns.into();
    v["hpcTrace"]["monotonic_ns"] = monotonic_ns.into();
    v["hpcTrace"]["boot_id"] = boot.into();
    std::fs::write(file, serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn clocks_align_on_the_monotonic_clock_within_a_boot_and_realtime_between() {
    let dir = scratch("align");
    let span = || drop(tracing::info_span!("s").entered());
    let (a, b, c) = (
        record(&dir, 0, span),
        record(&dir, 1, span),
        record(&dir, 2, span),
    );
    // Ranks 0 and 1 share a boot: rank 1 started 5 ms after rank 0 by the monotonic
    // clock, whatever its realtime clock said (it is 1 s off). Rank 2 is on another
    // machine whose realtime start was 20 ms after rank 0's.
    set_base(&a, 1_000_000_000_000, 50_000_000, "boot-a");
    set_base(&b, 1_001_000_000_000, 55_000_000, "boot-a");
    set_base(&c, 1_000_020_000_000, 7_000_000, "boot-b");
    let merged = hpc_trace::merge::merge_dir(&dir).unwrap();
    let offsets: Vec<f64> = merged.meta["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["offset_us"].as_f64().unwrap())
        .collect();
    assert_eq!(offsets, [0.0, 5000.0, 20000.0]);
    assert!(merged.meta["clock_alignment"]
        .as_str()
        .unwrap()
        .contains("assumed synchronised"));
    for (pid, offset) in offsets.iter().enumerate() {
        let s = merged
            .events
            .iter()
            .find(|e| e["pid"] == pid && e["ph"] == "X");
        let ts = s.expect("a span of every rank")["ts"].as_f64().unwrap();
        assert!(ts >= *offset, "rank {pid}'s span at {ts} µs");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn files_that_cannot_be_merged_are_named() {
    // A directory that is not there.
    let missing = scratch("missing");
    let e = hpc_trace::merge::merge_dir(&missing)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cannot read the trace directory") && e.contains(&*missing.to_string_lossy()),
        "{e}"
    );
    // One without a trace.
    std::fs::create_dir_all(&missing).unwrap();
    let e = hpc_trace::merge::merge_dir(&missing)
        .unwrap_err()
        .to_string();
    assert!(e.contains("holds no trace file"), "{e}");
    std::fs::remove_dir_all(&missing).unwrap();

    // A file cut short.
    let dir = scratch("short");
    let file = record(&dir, 0, || drop(tracing::info_span!("s").entered()));
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 20]).unwrap();
    let e = hpc_trace::merge::merge_dir(&dir).unwrap_err().to_string();
    assert!(e.contains("rank-0.json") && e.contains("ends early"), "{e}");
    // Not a trace.
    std::fs::write(&file, b"{\"traceEvents\":[]}").unwrap();
    let e = hpc_trace::merge::merge_dir(&dir).unwrap_err().to_string();
    assert!(
        e.contains("rank-0.json") && e.contains("not a trace file of hpc-trace"),
        "{e}"
    );
    // Two files of one rank.
    record(&dir, 1, || {});
    std::fs::copy(dir.join("rank-1.json"), &file).unwrap();
    let e = hpc_trace::merge::merge_dir(&dir).unwrap_err().to_string();
    assert!(e.contains("both rank 1's"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();

    // A process that never finished (killed): its .part file.
    let dir = scratch("part");
    let layer = hpc_trace::TraceLayer::create(&dir).unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(subscriber, || {
        drop(tracing::info_span!("s").entered());
    });
    let e = hpc_trace::merge::merge_dir(&dir).unwrap_err().to_string();
    assert!(
        e.contains(&format!("pid-{}.json.part", std::process::id()))
            && e.contains("never finished"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_directory_that_cannot_be_made_is_an_error_naming_it() {
    let e = hpc_trace::TraceLayer::create(Path::new("/proc/hpc-trace-no/dir"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("/proc/hpc-trace-no/dir"), "{e}");
}

#[test]
fn the_picture_has_a_lane_per_thread_and_a_box_per_span() {
    let dir = scratch("svg");
    record(&dir, 0, || {
        let _a = hpc_trace::region("transform");
        let _b = tracing::info_span!("transpose").entered();
    });
    let merged = hpc_trace::merge::merge_dir(&dir).unwrap();
    let trace: Value = serde_json::from_slice(&merged.to_json()).unwrap();
    let svg = hpc_trace::svg::render(&trace, &hpc_trace::svg::Options::default()).unwrap();
    assert_eq!(
        svg.matches("<rect x=").count(),
        2 + 2,
        "two spans and their legend"
    );
    assert!(svg.contains("rank 0") && svg.contains("transpose"));
    let opts = hpc_trace::svg::Options {
        from_us: Some(5.0),
        to_us: Some(1.0),
        ..Default::default()
    };
    let e = hpc_trace::svg::render(&trace, &opts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("is empty"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hpc_trace_unset_records_nothing_and_a_bad_one_is_named() {
    // The only test of this binary that touches the variable.
    std::env::remove_var(hpc_env::TRACE);
    assert!(hpc_trace::layer_from_env().unwrap().is_none());
    std::env::set_var(hpc_env::TRACE, "");
    let e = hpc_trace::layer_from_env().unwrap_err().to_string();
    assert!(e.contains(hpc_env::TRACE) && e.contains("empty"), "{e}");
    std::env::set_var(hpc_env::TRACE, "/proc/hpc-trace-no/dir");
    let e = hpc_trace::layer_from_env().unwrap_err().to_string();
    assert!(
        e.contains(&format!("{}=", hpc_env::TRACE)) && e.contains("/proc/hpc-trace-no/dir"),
        "{e}"
    );
    std::env::remove_var(hpc_env::TRACE);
}
