//! `hpc doctor` on fixture trees: exit codes, JSON, text.

use std::path::PathBuf;
use std::process::Command;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../hpc-container/tests/fixtures")
}

fn doctor(fixture: &str, json: bool) -> (i32, String) {
    let dir = fixtures().join(fixture);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hpc"));
    cmd.arg("doctor")
        .arg("--root")
        .arg(dir.join("root"))
        .arg("--env-file")
        .arg(dir.join("env"));
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().expect("run hpc");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn exit_codes_follow_severity() {
    assert_eq!(doctor("enroot", false).0, 0);
    assert_eq!(doctor("docker", false).0, 1);
    assert_eq!(doctor("docker-ib-missing", false).0, 2);
}

#[test]
fn json_report() {
    let (code, out) = doctor("podman-in-kubernetes", true);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["environment"]["runtime"]["kind"], "podman");
    assert_eq!(
        v["environment"]["runtime"]["outer"][0]["kind"],
        "kubernetes"
    );
}

#[test]
fn text_report_without_colour_when_piped() {
    let (code, out) = doctor("apptainer", false);
    assert_eq!(code, 2);
    assert!(out.contains("Apptainer"));
    assert!(out.contains("[gpu.not-visible]"));
    assert!(out.contains("--nv"));
    assert!(!out.contains('\x1b'), "stdout is a pipe: no colour");
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    let out = Command::new(env!("CARGO_BIN_EXE_hpc"))
        .args(["doctor", "--env-file", "/nonexistent/env"])
        .output()
        .expect("run hpc");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--env-file"));
    let out = Command::new(env!("CARGO_BIN_EXE_hpc"))
        .args(["doctor", "--root", "/nonexistent/root"])
        .output()
        .expect("run hpc");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn live_run_is_valid_json() {
    let out = Command::new(env!("CARGO_BIN_EXE_hpc"))
        .args(["doctor", "--json"])
        .output()
        .expect("run hpc");
    let code = out.status.code().unwrap_or(-1);
    assert!((0..=2).contains(&code), "exit code {code}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(v["exit_code"], code);
}

#[test]
fn an_empty_or_hostile_root_says_it_cannot_judge() {
    use std::time::{Duration, Instant};
    let root = hpc_test_support::TmpDir::unmade("hpc-doctor", "root");
    std::fs::create_dir_all(root.join("proc/self")).unwrap();
    let doctor = |root: &std::path::Path| {
        let t = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_hpc"))
            .args(["doctor", "--root"])
            .arg(root)
            .output()
            .unwrap();
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        out
    };
    // Empty: not "no problems found".
    let out = doctor(&root);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("too little to judge"), "{text}");
    assert!(
        !text.contains("no problems found") && !text.contains("vunknown"),
        "{text}"
    );
    // A FIFO where a file should be, and a link into the host: neither hangs nor is
    // read from the host.
    let c = std::ffi::CString::new(root.join("proc/self/status").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path we pass.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    std::os::unix::fs::symlink("/proc/self/mountinfo", root.join("proc/self/mountinfo")).unwrap();
    let out = doctor(&root);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("too little to judge"), "{text}");
    let _ = std::fs::remove_dir_all(&root);
}

/// The open-files limit is a count of files: 1024, not "1 KiB"; the locked-memory
/// limit stays in bytes.
#[test]
fn open_files_limit_is_a_count_not_bytes() {
    let dir = hpc_test_support::tmpdir("hpc-doctor-nofile", "");
    std::fs::create_dir_all(dir.join("root/proc/self")).unwrap();
    std::fs::write(
        dir.join("root/proc/self/limits"),
        "Limit                     Soft Limit           Hard Limit           Units\n\
         Max open files            1024                 1048576              files\n\
         Max locked memory         65536                65536                bytes\n",
    )
    .unwrap();
    std::fs::write(dir.join("env"), "PATH=/usr/bin\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hpc"))
        .arg("doctor")
        .arg("--root")
        .arg(dir.join("root"))
        .arg("--env-file")
        .arg(dir.join("env"))
        .output()
        .expect("run hpc");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(text.contains("open-files limit is 1024"), "{text}");
    assert!(!text.contains("open-files limit is 1 KiB"), "{text}");
}

#[test]
fn env_file_that_never_ends_is_refused_before_reading() {
    let t = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_hpc"))
        .args(["doctor", "--env-file", "/dev/zero"])
        .output()
        .expect("run hpc");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--env-file")
            && err.contains("/dev/zero is a character device, not a regular file"),
        "{err}"
    );
    assert!(t.elapsed() < std::time::Duration::from_secs(10));
}

/// `--env-file` is read by hpc-io's bounded read alone: a FIFO is refused at once,
/// named as a FIFO, and a file above hpc-io's bound for environments is refused
/// with that bound (the command once checked a bound of its own, 64 times larger).
#[test]
fn env_file_fifo_and_oversize_are_refused_by_the_one_bounded_read() {
    let dir = hpc_test_support::tmpdir("hpc-doctor-envfile", "");
    let fifo = dir.join("fifo");
    hpc_test_support::mkfifo(&fifo);
    let big = dir.join("big.env");
    let line = format!("X={}\n", "a".repeat(1023));
    std::fs::write(&big, line.repeat(2048)).unwrap();
    let run = |file: &std::path::Path| {
        let t = std::time::Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_hpc"))
            .arg("doctor")
            .arg("--env-file")
            .arg(file)
            .output()
            .expect("run hpc");
        assert!(t.elapsed() < std::time::Duration::from_secs(10));
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&fifo);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--env-file") && err.contains("is a FIFO"),
        "{err}"
    );
    let (code, err) = run(&big);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, Some(2), "{err}");
    let max = hpc_io::read::MAX_ENV_FILE_BYTES;
    assert!(
        err.contains("--env-file") && err.contains(&format!("more than the {max} bytes")),
        "{err}"
    );
}

/// Values of 100,000 characters in the diagnosed environment were written
/// whole into the text report (200 kB for two of them); its lines are cut, the
/// JSON report keeps them.
#[test]
fn long_values_of_the_environment_are_cut_in_the_text_report() {
    let d = hpc_test_support::TmpDir::new("hpc-doctor", "long");
    let env = d.join("env");
    let long = "7".repeat(100_000);
    std::fs::write(
        &env,
        format!("CUDA_VISIBLE_DEVICES={long}\nSLURM_JOB_ID={long}\nOMPI_MCA_btl={long}\n"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hpc"))
        .args(["doctor", "--root"])
        .arg(fixtures().join("docker/root"))
        .arg("--env-file")
        .arg(&env)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("more characters") && text.len() < 20_000,
        "{} bytes",
        text.len()
    );
    let _ = std::fs::remove_dir_all(&d);
}
