//! A run directory's manifest is written only as its reader takes it.

use hpc_io::rundir::{inspect, RunDir, RunInfo, Status};

/// A run whose details are nested deeper than the JSON reader goes wrote its
/// manifest, finished, and left a directory that `inspect` and every later
/// run refused ("out.txt that no earlier run of this program wrote"): it is
/// refused at its start, before its work, and the directory stays usable.
#[test]
fn a_manifest_its_reader_would_refuse_is_refused_at_start() {
    let dir = hpc_test_support::TmpDir::unmade("hpc-io", "deep-manifest");
    let mut details = serde_json::json!(1);
    for _ in 0..200 {
        details = serde_json::json!([details]);
    }
    let mut info = RunInfo::new("p");
    info.details = details;
    info.outputs = vec!["out.txt".into()];
    let e = RunDir::create(&dir, info)
        .expect_err("a manifest nested 200 deep")
        .to_string();
    assert!(
        e.contains("run.json") && e.contains("its readers would refuse"),
        "{e}"
    );
    assert!(inspect(&dir).is_ok(), "the directory was left unreadable");

    let mut info = RunInfo::new("p");
    info.outputs = vec!["out.txt".into()];
    let mut run = RunDir::create(&dir, info).unwrap();
    run.write_atomic("out.txt", b"result").unwrap();
    run.finish(Status::Complete).unwrap();
    assert!(inspect(&dir).unwrap().is_some());

    let mut info = RunInfo::new("p");
    info.details = serde_json::json!({ "x": "y".repeat(17 << 20) });
    let e = RunDir::create(&dir, info)
        .expect_err("a manifest of 17 MiB")
        .to_string();
    assert!(
        e.contains("bytes its readers take"),
        "{}",
        &e[..e.len().min(300)]
    );
    assert!(
        inspect(&dir).unwrap().is_some(),
        "the finished run's manifest was replaced"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
