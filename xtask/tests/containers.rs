//! Tests of `cargo xtask image` (this workspace's use of hpc-image) and of the container
//! workflows it packages.
//!
//! The end-to-end test (real images and SIFs, skopeo, Podman, Docker, Apptainer, a
//! single-node Slurm cluster with PMIx, the hybrid and bind MPI models, the
//! troubleshooting table's broken runs, and with `HPC_TEST_CLUSTER=1` the Docker
//! cluster across nodes) runs only with `HPC_TEST_CONTAINERS=1` (CI sets it); it
//! installs the container tool chain first (`cargo xtask image --setup-tools`, which
//! sets up Apptainer too) and then runs `containers/test/image-e2e.sh`. It checks that
//! every stage ran, not only the script's exit status, and the diagnosis of every
//! troubleshooting row. Without the switch it prints "skipped".

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

fn xtask() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xtask"));
    c.current_dir(repo());
    c
}

#[test]
fn unknown_binary_lists_the_available_ones() {
    let out = xtask()
        .args(["image", "no-such-binary"])
        .output()
        .expect("xtask runs");
    assert_eq!(out.status.code(), Some(2), "bad input: status 2");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no binary or example named `no-such-binary`"),
        "{err}"
    );
    assert!(err.contains("available binaries"), "{err}");
    assert!(err.contains("hello") && err.contains("hpc"), "{err}");
}

/// The stages `image-e2e.sh` must report, in order.
fn expected_stages(cluster: bool) -> Vec<&'static str> {
    let mut v = vec![
        "build",
        "skopeo",
        "podman",
        "docker",
        "slurm_podman",
        "apptainer_srun",
        "sbatch",
        "bind",
    ];
    if cluster {
        v.push("cluster_apptainer");
    }
    v.push("troubleshoot");
    v
}

/// The doctor's report of one troubleshooting row.
fn row_report(rows: &Path, name: &str) -> serde_json::Value {
    let p = rows.join(format!("{name}.doctor.json"));
    let text = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("row {name}: no doctor report {} ({e})", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("row {name}: {e}"))
}

fn row_text(rows: &Path, name: &str, ext: &str) -> String {
    std::fs::read_to_string(rows.join(format!("{name}.{ext}"))).unwrap_or_default()
}

/// Asserts that the doctor inside the broken container reports `id` with `severity`,
/// in the runtime it really ran in, and returns the finding.
fn diagnosed(rows: &Path, name: &str, id: &str, severity: &str) -> serde_json::Value {
    let d = row_report(rows, name);
    assert_eq!(
        d["environment"]["runtime"]["kind"], "apptainer",
        "row {name}: the doctor did not run inside Apptainer"
    );
    let found = d["findings"]
        .as_array()
        .and_then(|f| {
            f.iter()
                .find(|f| f["id"] == id && f["severity"] == severity)
        })
        .cloned();
    found.unwrap_or_else(|| {
        panic!(
            "row {name}: no {severity} {id}; findings: {}",
            d["findings"]
        )
    })
}

/// The troubleshooting rows: each a real broken run with its symptom and diagnosis.
fn check_rows(rows: &Path) {
    let failed = |name: &str| {
        let rc = row_text(rows, name, "rc");
        assert!(
            rc.trim() != "0" && !rc.trim().is_empty(),
            "row {name}: the broken run exited {rc:?}"
        );
    };
    let symptom = |name: &str, text: &str| {
        let log = row_text(rows, name, "log");
        assert!(
            log.contains(text),
            "row {name}: the ranks did not say {text:?}:\n{log}"
        );
    };

    // srun without PMIx: Open MPI inside cannot start; the doctor names the flag.
    failed("no-pmix");
    symptom("no-pmix", "OMPI was not built with SLURM's PMI support");
    let f = diagnosed(rows, "no-pmix", "launch.slurm-no-pmix", "error");
    assert!(
        f["fix"].as_str().unwrap().contains("srun --mpi=pmix"),
        "{f}"
    );

    // --contain hides the PMIx server's files.
    symptom("contain-pmix", "PMIX ERROR");
    let f = diagnosed(rows, "contain-pmix", "launch.pmix-dir-hidden", "error");
    assert!(f["fix"].as_str().unwrap().contains("--bind"), "{f}");

    // Bind model without the host's MPI: the loader names the library.
    failed("bind-no-host-mpi");
    symptom(
        "bind-no-host-mpi",
        "libmpi.so.40: cannot open shared object file",
    );

    // A 1 MiB /dev/shm: Open MPI's segment does not fit; the doctor says why.
    symptom("tiny-shm", "not enough space for /dev/shm");
    let f = diagnosed(rows, "tiny-shm", "shm.too-small", "error");
    assert!(f["seen"].as_str().unwrap().contains("1 MiB"), "{f}");

    // UCX_TLS names rc where there is no RDMA device.
    failed("ucx-tls-absent");
    symptom("ucx-tls-absent", "transport 'rc' is not available");
    let f = diagnosed(rows, "ucx-tls-absent", "net.rdma-requested-absent", "error");
    assert!(f["seen"].as_str().unwrap().contains("UCX_TLS=rc"), "{f}");

    // Verbs asked for without /dev/infiniband.
    failed("ib-missing");
    symptom("ib-missing", "no RDMA device");
    let f = diagnosed(rows, "ib-missing", "net.rdma-requested-absent", "error");
    assert!(
        f["seen"].as_str().unwrap().contains("HPC_TRANSPORT=verbs"),
        "{f}"
    );

    // Open MPI forced onto TCP: runs, slower; the doctor warns.
    assert_eq!(row_text(rows, "tcp-only", "rc").trim(), "0", "row tcp-only");
    diagnosed(rows, "tcp-only", "net.ompi-tcp-only", "warning");
}

#[test]
fn image_end_to_end() {
    if std::env::var("HPC_TEST_CONTAINERS").as_deref() != Ok("1") {
        // Written to the stream directly, so that it shows even when output is captured.
        let _ = writeln!(
            std::io::stderr(),
            "image_end_to_end skipped: set HPC_TEST_CONTAINERS=1 to build images and run them in Podman, Docker and Slurm"
        );
        return;
    }
    let st = xtask()
        .args(["image", "--setup-tools"])
        .status()
        .expect("xtask runs");
    assert!(st.success(), "installing the container tool chain failed");
    let work = std::env::temp_dir().join(format!("hpc-image-e2e-{}", std::process::id()));
    let st = Command::new("bash")
        .arg(repo().join("containers/test/image-e2e.sh"))
        .arg(&work)
        .env("XTASK", env!("CARGO_BIN_EXE_xtask"))
        .current_dir(repo())
        .status()
        .expect("bash runs");
    let results = std::fs::read_to_string(work.join("results.txt")).unwrap_or_default();
    assert!(
        st.success(),
        "containers/test/image-e2e.sh failed (work dir {}):\n{results}",
        work.display()
    );
    // Every stage ran: a stage skipped or lost shows here, whatever the exit status.
    let ran: Vec<&str> = results
        .lines()
        .filter_map(|l| l.strip_prefix("stage_")?.strip_suffix("=ok"))
        .collect();
    let cluster = std::env::var("HPC_TEST_CLUSTER").as_deref() == Ok("1");
    assert_eq!(
        ran,
        expected_stages(cluster),
        "image-e2e.sh stages (work dir {})",
        work.display()
    );
    check_rows(&work.join("rows"));
    let _ = std::fs::remove_dir_all(&work);
}
