//! `hpc doctor --json` inside a real container (Podman by default, Docker with
//! `HPC_CONTAINER_ENGINE=docker`), through `containers/test/doctor-in-container.sh`.
//!
//! Runs only with `HPC_TEST_CONTAINERS=1`: it needs root, the engine and
//! mmdebstrap (or a cached root file system in `$HPC_CACHE_DIR`).

use std::path::PathBuf;
use std::process::Command;

#[test]
fn doctor_reports_engine_and_resources_inside_a_container() {
    if std::env::var("HPC_TEST_CONTAINERS").as_deref() != Ok("1") {
        eprintln!("skipped: set HPC_TEST_CONTAINERS=1 to run hpc doctor in a real container");
        return;
    }
    let engine = std::env::var("HPC_CONTAINER_ENGINE").unwrap_or_else(|_| "podman".into());
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = repo.join("containers/test/doctor-in-container.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(["--engine", &engine])
        .args(["--engine-arg", "--shm-size=96m"])
        .args(["--engine-arg", "--cpuset-cpus=0"])
        .args(["--engine-arg", "--memory=512m"])
        .arg(env!("CARGO_BIN_EXE_hpc"))
        .args(["--", "--json"])
        .output()
        .expect("run doctor-in-container.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code().unwrap_or(-1);
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
    if std::env::var("HPC_TEST_CONTAINERS").as_deref() != Ok("1") {
        eprintln!(
            "skipped: set HPC_TEST_CONTAINERS=1 to run hpc doctor in a real Apptainer container"
        );
        return;
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("bash")
        .arg(repo.join("containers/test/doctor-in-container.sh"))
        .args(["--engine", "apptainer"])
        .args(["--engine-arg", "--env", "--engine-arg", "UCX_TLS=rc"])
        .arg(env!("CARGO_BIN_EXE_hpc"))
        .args(["--", "--json"])
        .output()
        .expect("run doctor-in-container.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
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
