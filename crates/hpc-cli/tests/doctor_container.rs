//! `hpc doctor --json` inside a real container (Podman by default, Docker with
//! `HPC_CONTAINER_ENGINE=docker`), through `containers/test/doctor-in-container.sh`.
//!
//! Runs only with `HPC_TEST_CONTAINERS=1`: it needs root, the engine and
//! mmdebstrap (or a cached root file system in `$HPC_CACHE_DIR`).

use std::path::PathBuf;
use std::process::Command;

/// Whether the container tests are on (`HPC_TEST_CONTAINERS=1`); says how to run the
/// doctor in `place` when they are not.
fn containers_on(place: &str) -> bool {
    let on = std::env::var("HPC_TEST_CONTAINERS").as_deref() == Ok("1");
    if !on {
        eprintln!("skipped: set HPC_TEST_CONTAINERS=1 to run hpc doctor in {place}");
    }
    on
}

/// `containers/test/doctor-in-container.sh --engine ENGINE [--engine-arg ARG]... HPC --
/// --json`: its exit status, standard output and standard error.
fn doctor_in_container(engine: &str, engine_args: &[&str]) -> (Option<i32>, String, String) {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut cmd = Command::new("bash");
    cmd.arg(repo.join("containers/test/doctor-in-container.sh"))
        .args(["--engine", engine]);
    for a in engine_args {
        cmd.args(["--engine-arg", a]);
    }
    let out = cmd
        .arg(env!("CARGO_BIN_EXE_hpc"))
        .args(["--", "--json"])
        .output()
        .expect("run doctor-in-container.sh");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn doctor_reports_engine_and_resources_inside_a_container() {
    if !containers_on("a real container") {
        return;
    }
    let engine = std::env::var("HPC_CONTAINER_ENGINE").unwrap_or_else(|_| "podman".into());
    let (code, stdout, stderr) = doctor_in_container(
        &engine,
        &["--shm-size=96m", "--cpuset-cpus=0", "--memory=512m"],
    );
    let code = code.unwrap_or(-1);
    assert!(
        (0..=2).contains(&code),
        "doctor-in-container.sh failed ({code}):\n{stderr}\n{stdout}"
    );
    let v: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}\n{stderr}"));
    eprintln!("{stdout}");
    let rt = &v["environment"]["runtime"];
    assert_eq!(rt["kind"], engine.as_str(), "{rt}");
    assert_eq!(rt["confidence"], "strong");
    let res = &v["environment"]["resources"];
    assert_eq!(res["shm_bytes"], 96u64 << 20, "{res}");
    assert_eq!(res["allowed_cpus"], 1, "{res}");
    assert_eq!(res["memory_limit_bytes"], 512u64 << 20, "{res}");
    assert!(v["findings"]
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f["id"] == "shm.too-small")));
}

/// The doctor inside a real Apptainer container (the bookworm tree as a sandbox
/// directory, this build's `hpc` bound in), with an InfiniBand-only `UCX_TLS` where
/// there is no RDMA device: Apptainer with its evidence, and the finding.
#[test]
fn doctor_reports_apptainer_inside_apptainer() {
    if !containers_on("a real Apptainer container") {
        return;
    }
    let (code, stdout, stderr) = doctor_in_container("apptainer", &["--env", "UCX_TLS=rc"]);
    assert_eq!(
        code,
        Some(2),
        "the doctor should exit 2 (an error finding):\n{stderr}\n{stdout}"
    );
    let v: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}\n{stderr}"));
    let rt = &v["environment"]["runtime"];
    assert_eq!(rt["kind"], "apptainer", "{rt}");
    assert_eq!(rt["confidence"], "strong", "{rt}");
    let sources: Vec<&str> = rt["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["source"].as_str())
        .collect();
    assert!(sources.contains(&"env:APPTAINER_CONTAINER"), "{sources:?}");
    assert!(sources.contains(&"mountinfo"), "{sources:?}");
    assert!(
        rt["details"]["image"]
            .as_str()
            .is_some_and(|i| i.ends_with("bookworm-minbase-sandbox")),
        "{rt}"
    );
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "net.rdma-requested-absent")
        .unwrap_or_else(|| panic!("no net.rdma-requested-absent: {}", v["findings"]));
    assert_eq!(f["severity"], "error");
    assert!(f["seen"].as_str().unwrap().contains("UCX_TLS=rc"), "{f}");
}
