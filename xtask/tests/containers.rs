//! Tests of `cargo xtask image` (this workspace's use of hpc-image).
//!
//! The end-to-end test (real images, skopeo, Podman, Docker, a single-node Slurm
//! cluster with PMIx) runs only with `HPC_TEST_CONTAINERS=1` (CI sets it); it installs
//! the container tool chain first (`cargo xtask image --setup-tools`) and then runs
//! `containers/test/image-e2e.sh`. Without the switch it prints "skipped".

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
    assert!(
        st.success(),
        "containers/test/image-e2e.sh failed (work dir {})",
        work.display()
    );
    let _ = std::fs::remove_dir_all(&work);
}
