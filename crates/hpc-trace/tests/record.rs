//! Recording spans into a process file and merging files: what the files hold, how
//! clocks are aligned, and the errors for files that cannot be merged.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::Layer as _;

fn scratch(name: &str) -> hpc_test_support::TmpDir {
    hpc_test_support::TmpDir::unmade("hpc-trace", name)
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
    let sink = layer.clone();
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(subscriber, || {
        drop(tracing::info_span!("s").entered());
    });
    // Held open by this process, it is still being written (pass 18).
    let e = hpc_trace::merge::merge_dir(&dir).unwrap_err().to_string();
    assert!(
        e.contains(&format!("pid-{}.json.part", std::process::id()))
            && e.contains("is not finished yet"),
        "{e}"
    );
    // The same file left by a process that is gone: a copy no process holds.
    let killed = scratch("part-killed");
    std::fs::create_dir_all(&killed).unwrap();
    let gone = u32::MAX - 1;
    std::fs::copy(
        dir.join(format!("pid-{}.json.part", std::process::id())),
        killed.join(format!("pid-{gone}.json.part")),
    )
    .unwrap();
    let e = hpc_trace::merge::merge_dir(&killed)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("pid-{gone}.json.part")) && e.contains("never finished"),
        "{e}"
    );
    std::fs::remove_dir_all(&killed).unwrap();
    // Finished before its directory goes: this process would otherwise end 1 at
    // exit, its trace lost.
    sink.finish().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A file whose end names a rank no job has (here the largest `usize`, whose
/// successor overflowed where the merge numbers the other processes after the
/// ranks) is refused, naming it, not merged under a wrapped number.
#[test]
fn a_file_naming_an_impossible_rank_is_refused() {
    let dir = scratch("rank-max");
    let file = record(&dir, 0, || drop(tracing::info_span!("s").entered()));
    let mut proxy: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    proxy["hpcEnd"]["rank"] = Value::Null;
    proxy["hpcEnd"]["label"] = "proxy".into();
    std::fs::write(dir.join("proc-1.json"), proxy.to_string()).unwrap();
    let mut v: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    for rank in [u64::MAX, 1 << 31] {
        v["hpcEnd"]["rank"] = rank.into();
        std::fs::write(&file, v.to_string()).unwrap();
        let e = hpc_trace::merge::merge_dir(&dir).unwrap_err().to_string();
        assert!(
            e.contains("rank-0.json") && e.contains(&format!("rank {rank} is beyond")),
            "{e}"
        );
    }
    v["hpcEnd"]["rank"] = hpc_trace::merge::MAX_RANK.into();
    std::fs::write(&file, v.to_string()).unwrap();
    let merged = hpc_trace::merge::merge_dir(&dir).unwrap();
    assert_eq!(merged.rank_ids, [hpc_trace::merge::MAX_RANK]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `set_rank` of a rank the merge refuses (`usize::MAX`, anything beyond
/// `MAX_RANK`) wrote `rank-18446744073709551615.json`, which the library's own
/// merge then refused, and with it every other file of the folder. The rank is
/// not taken: the file is a process's that is no rank, and the folder merges.
#[test]
fn a_rank_the_merge_refuses_is_not_written_as_a_rank_file() {
    let dir = scratch("set-rank-max");
    record_of(&dir, 0, 1);
    for rank in [usize::MAX, hpc_trace::merge::MAX_RANK + 1] {
        let layer = hpc_trace::TraceLayer::create(&dir).unwrap();
        layer.set_rank(rank);
        let file = layer.finish().unwrap().expect("a finished file");
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("proc-"), "{name}");
        let merged = hpc_trace::merge::merge_dir(&dir).unwrap();
        assert_eq!(merged.rank_ids, [0]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `set_size(0)`, and `set_rank(5)` with `set_size(2)` (in either order),
/// wrote a rank file the library's own merge refused ("… is rank 5 of a job
/// of 2 ranks: the directory holds the files of more than one job", of a
/// folder of one file). The value that makes the pair one no job has is not
/// taken: the folder merges.
#[test]
fn a_size_the_merge_refuses_is_not_written() {
    for (tag, first_rank) in [
        ("size-0", None),
        ("rank-then-size", Some(5)),
        ("size-then-rank", Some(5)),
    ] {
        let dir = scratch(tag);
        let layer = hpc_trace::TraceLayer::create(&dir).unwrap();
        match (tag, first_rank) {
            ("size-0", _) => {
                layer.set_rank(0);
                layer.set_size(0);
            }
            ("rank-then-size", Some(r)) => {
                layer.set_rank(r);
                layer.set_size(2);
            }
            (_, Some(r)) => {
                layer.set_size(2);
                layer.set_rank(r);
            }
            _ => unreachable!(),
        }
        layer.finish().unwrap().expect("a finished file");
        hpc_trace::merge::merge_dir(&dir).unwrap_or_else(|e| panic!("{tag}: {e}"));
    }
}

/// Records an empty trace into `dir` as rank `rank` of a job of `size` ranks.
fn record_of(dir: &Path, rank: usize, size: usize) -> PathBuf {
    let layer = hpc_trace::TraceLayer::create(dir).unwrap();
    layer.set_rank(rank);
    layer.set_size(size);
    layer.finish().unwrap().expect("a finished file")
}

/// Sets a finished file's job as another launcher would have named it.
fn set_job(file: &Path, job: Option<&str>) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    v["hpcEnd"]["job"] = job.into();
    std::fs::write(file, serde_json::to_vec(&v).unwrap()).unwrap();
}

/// A directory that two jobs wrote into (`HPC_TRACE=d` for a job of 4 ranks, then
/// for one of 2, whose files replaced ranks 0 and 1 only) is refused naming a file
/// of the other job, not merged into a timeline of four ranks of two runs; so are
/// files of two jobs of the same size.
#[test]
fn files_of_two_jobs_in_one_directory_are_refused() {
    let dir = scratch("two-jobs");
    for r in 0..4 {
        record_of(&dir, r, 4);
    }
    for r in 0..2 {
        record_of(&dir, r, 2);
    }
    let e = hpc_trace::merge::merge_dir(&dir).unwrap_err().to_string();
    assert!(
        e.contains("rank-2.json is a rank of a job of 4 ranks")
            && e.contains("rank-0.json one of 2")
            && e.contains("more than one job"),
        "{e}"
    );
    for r in 2..4 {
        std::fs::remove_file(dir.join(format!("rank-{r}.json"))).unwrap();
    }
    let (a, b) = (dir.join("rank-0.json"), dir.join("rank-1.json"));
    set_job(&a, Some("hpc run one"));
    set_job(&b, Some("hpc run two"));
    let e = hpc_trace::merge::merge_dir(&dir).unwrap_err().to_string();
    assert!(
        e.contains("rank-1.json is of the job \"hpc run two\"")
            && e.contains("rank-0.json of the job \"hpc run one\""),
        "{e}"
    );
    // One job's files merge; so do files that name no job (a process started alone).
    set_job(&b, Some("hpc run one"));
    assert_eq!(hpc_trace::merge::merge_dir(&dir).unwrap().rank_ids, [0, 1]);
    set_job(&a, None);
    set_job(&b, None);
    assert_eq!(hpc_trace::merge::merge_dir(&dir).unwrap().rank_ids, [0, 1]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A proxy's file left by another job (a job with the proxy engine, then one
/// without it, in one directory: the second's rank files replaced the first's,
/// its proxy's stayed) is refused, not merged as the second job's proxy; and a
/// process started alone (no launcher) records a job of its own, so that two such
/// runs are told apart too.
#[test]
fn a_proxy_file_of_another_job_is_refused_and_a_lone_process_names_its_job() {
    let dir = scratch("proxy-job");
    let rank = record_of(&dir, 0, 1);
    let own: Value = serde_json::from_slice(&std::fs::read(&rank).unwrap()).unwrap();
    let job = own["hpcEnd"]["job"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(job.starts_with("alone: pid "), "{own}");
    // A proxy's file: a finished file made a process that is no rank.
    let other = record_of(&dir.join("other"), 0, 1);
    let mut v: Value = serde_json::from_slice(&std::fs::read(&other).unwrap()).unwrap();
    v["hpcEnd"]["rank"] = Value::Null;
    v["hpcEnd"]["label"] = "proxy".into();
    let proxy = dir.join("proc-1.json");
    std::fs::write(&proxy, serde_json::to_vec(&v).unwrap()).unwrap();
    std::fs::remove_dir_all(dir.join("other")).unwrap();
    // The same job (a proxy started by this rank would inherit it): merged.
    set_job(&proxy, Some(&job));
    assert_eq!(hpc_trace::merge::merge_dir(&dir).unwrap().rank_ids, [0]);
    set_job(&proxy, Some("hpc run earlier"));
    let e = hpc_trace::merge::merge_dir(&dir).unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "{} is of the job \"hpc run earlier\"",
            proxy.display()
        )) && e.contains("more than one job"),
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
    // A window from no number is not called empty (it was "the window from
    // NaN µs to 5 µs is empty").
    for (from, to) in [(f64::NAN, 5.0), (1.0, f64::NAN), (f64::NEG_INFINITY, 5.0)] {
        let opts = hpc_trace::svg::Options {
            from_us: Some(from),
            to_us: Some(to),
            ..Default::default()
        };
        let e = hpc_trace::svg::render(&trace, &opts)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not a finite time") && !e.contains("is empty"),
            "{from} {to}: {e}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Control characters in a span's name or the title, which XML 1.0 allows neither
/// as they are nor as references (a picture holding one does not open), are
/// replaced; markup is escaped.
#[test]
fn the_picture_holds_no_character_xml_refuses() {
    let trace = serde_json::json!({"traceEvents": [
        {"ph": "X", "name": "a\u{1}b\u{0}<c>", "ts": 1.0, "dur": 2.0, "pid": 0, "tid": 0},
    ]});
    let opts = hpc_trace::svg::Options {
        title: "x\u{7}y\u{1b}[31m".into(),
        ..Default::default()
    };
    let svg = hpc_trace::svg::render(&trace, &opts).unwrap();
    let bad: Vec<char> = svg
        .chars()
        .filter(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
        .collect();
    assert!(bad.is_empty(), "{bad:?} in {svg}");
    assert!(svg.contains("a\u{fffd}b\u{fffd}&lt;c&gt;"), "{svg}");
    assert!(svg.contains("x\u{fffd}y\u{fffd}[31m"), "{svg}");
}

/// Times whose end or window overflows the finite numbers (`ts` 1e308 plus `dur`
/// 1e308) are refused naming the span: before, the picture was written with NaN
/// for every coordinate and status 0. A huge window is named in exponent form,
/// not in hundreds of digits.
#[test]
fn times_beyond_the_finite_numbers_are_refused_not_drawn_as_nan() {
    let span = |name: &str, ts: f64, dur: f64| serde_json::json!({"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 0});
    let draw = |events: Vec<Value>, opts: &hpc_trace::svg::Options| {
        hpc_trace::svg::render(&serde_json::json!({ "traceEvents": events }), opts)
    };
    let plain = hpc_trace::svg::Options::default();
    let e = draw(vec![span("far", 1e308, 1e308)], &plain)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"far\"") && e.contains("1e308") && e.contains("finite"),
        "{e}"
    );
    let e = draw(vec![span("a", -1e308, 1.0), span("b", 1e308, 1.0)], &plain)
        .unwrap_err()
        .to_string();
    assert!(e.contains("-1e308") && e.contains("finite"), "{e}");
    let far = hpc_trace::svg::Options {
        from_us: Some(1e303),
        ..Default::default()
    };
    let e = draw(vec![span("a", 1.0, 2.0)], &far)
        .unwrap_err()
        .to_string();
    assert!(e.contains("1e303 µs") && e.len() < 200, "{e}");
    // Ordinary times are drawn, with no NaN anywhere.
    let svg = draw(vec![span("a", 1.0, 2.0)], &plain).unwrap();
    assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
    // A span of no duration is drawn around (it was "the window from 5 µs to
    // 5 µs is empty").
    let around = hpc_trace::svg::Options {
        around: Some("z".into()),
        ..Default::default()
    };
    let svg = draw(vec![span("z", 5.0, 0.0)], &around).unwrap();
    assert!(svg.contains(">z<") || svg.contains("z</"), "{svg}");
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
    // A device or a file where the directory should be: said so, with what to do
    // (it was "HPC_TRACE= /dev/null: File exists").
    let d = scratch("trace-is-a-file");
    std::fs::create_dir_all(&d).unwrap();
    let file = d.join("f");
    std::fs::write(&file, "x").unwrap();
    for (path, kind) in [
        (Path::new("/dev/null"), "a character device"),
        (file.as_path(), "a file"),
    ] {
        std::env::set_var(hpc_env::TRACE, path);
        let e = hpc_trace::layer_from_env().unwrap_err().to_string();
        assert!(
            e.contains(&path.display().to_string())
                && e.contains(&format!("it is {kind}, not a directory"))
                && e.contains("name a directory")
                && !e.contains("File exists"),
            "{e}"
        );
    }
    // Hostile pass 20: a folder of the system (as root, each process wrote its
    // `proc-<PID>.json` into `/`, `/etc`, `/usr/bin`) is refused, naming it.
    // Should the check be taken away, what this process began there is removed.
    for system in ["/", "/etc", "/usr/bin"] {
        std::env::set_var(hpc_env::TRACE, system);
        let r = hpc_trace::layer_from_env().map(|_| ());
        if r.is_ok() {
            let mine = format!("-{}.json", std::process::id());
            for e in std::fs::read_dir(system).unwrap().flatten() {
                if e.file_name().to_string_lossy().contains(&mine) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains(&format!("{}={system}: it is", hpc_env::TRACE))
                && e.contains("not a folder for the processes' timelines"),
            "{e}"
        );
    }
    // A value longer than any path is refused with the value cut: the error
    // of making it ("File name too long") echoed all 100,000 characters.
    std::env::set_var(hpc_env::TRACE, "x".repeat(100_000));
    let e = hpc_trace::layer_from_env().unwrap_err().to_string();
    assert!(
        e.len() < 300 && e.contains("longer than any path") && e.contains("100000 bytes"),
        "{} bytes",
        e.len()
    );
    // A directory that is a link another user planted: refused, no trace
    // written where it points (one was).
    let target = d.join("target");
    std::fs::create_dir_all(&target).unwrap();
    let link = d.join("trace");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    if std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).is_ok() {
        std::env::set_var(hpc_env::TRACE, &link);
        let e = hpc_trace::layer_from_env()
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(hpc_env::TRACE) && e.contains("user 65534"),
            "{e}"
        );
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
    }
    std::env::remove_var(hpc_env::TRACE);
    std::fs::remove_dir_all(&d).unwrap();
}

/// A trace directory that is a link to a missing directory (`HPC_TRACE=LINK`)
/// was refused as "LINK: File exists", which said neither what it is nor what
/// to do; nothing is made at the link's target.
#[test]
fn a_directory_that_is_a_dangling_link_is_named_so() {
    let d = scratch("dangling");
    std::fs::create_dir_all(&d).unwrap();
    let link = d.join("link");
    std::os::unix::fs::symlink(d.join("missing"), &link).unwrap();
    let e = hpc_trace::TraceLayer::create(&link).expect_err("created");
    let msg = format!("{e}");
    assert!(
        msg.contains("symbolic link") && msg.contains("does not exist"),
        "{msg}"
    );
    assert!(!d.join("missing").exists());
    let _ = std::fs::remove_dir_all(&d);
}

/// A span's or an event's field that is not a finite number (a residual that
/// became NaN, a rate that became infinite: what a timeline is read for)
/// was recorded as `null`, as a field with no value, and the NaN was told
/// apart from nothing. It is recorded as the string `"NaN"`, `"inf"` or
/// `"-inf"`; a finite number stays a number.
#[test]
fn a_field_that_is_not_a_finite_number_is_recorded_as_such_not_as_null() {
    let dir = scratch("nan");
    let file = record(&dir, 0, || {
        let _s = tracing::info_span!(
            "solve",
            residual = f64::NAN,
            up = f64::INFINITY,
            down = f64::NEG_INFINITY,
            ok = 1.5f64
        )
        .entered();
        tracing::info!(rate = f64::NAN, "step");
    });
    let own: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let events = own["traceEvents"].as_array().unwrap();
    let solve = events
        .iter()
        .find(|e| e["name"] == "solve" && e["ph"] == "X")
        .unwrap();
    assert_eq!(solve["args"]["residual"], "NaN", "{solve}");
    assert_eq!(solve["args"]["up"], "inf", "{solve}");
    assert_eq!(solve["args"]["down"], "-inf", "{solve}");
    assert_eq!(solve["args"]["ok"], 1.5, "{solve}");
    let step = events
        .iter()
        .find(|e| e["args"]["rate"] != Value::Null)
        .unwrap_or_else(|| panic!("no event with its rate: {events:?}"));
    assert_eq!(step["args"]["rate"], "NaN", "{step}");
}
