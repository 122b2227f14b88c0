//! Bad input to `run`: found from the workspace's own `cargo metadata`, reported as a
//! `UsageError` (exit status 2), and nothing is built or written.

use std::path::{Path, PathBuf};

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: hpc_image::Args,
}

fn args(list: &[&str]) -> hpc_image::Args {
    Cli::parse_from(std::iter::once("image").chain(list.iter().copied())).args
}

/// A workspace outside this repository with one library crate and no binary.
fn lib_only(test: &str) -> PathBuf {
    workspace(test, false)
}

/// A one-package workspace outside this repository, with or without a binary.
fn workspace(test: &str, with_bin: bool) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hpc-image-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("src")).unwrap();
    std::fs::write(
        d.join("Cargo.toml"),
        "[package]\nname = \"just-a-lib\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(d.join("src/lib.rs"), "//! A library.\n").unwrap();
    if with_bin {
        std::fs::write(d.join("src/main.rs"), "fn main() {}\n").unwrap();
    }
    d
}

fn entries(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_crate_without_a_binary_is_bad_input_and_nothing_is_written() {
    let ws = lib_only("nobin");
    let manifest = ws.join("Cargo.toml");
    let out = ws.join("image-out");
    let before = entries(&ws);
    for a in [
        vec!["--manifest-path", manifest.to_str().unwrap()],
        vec!["just-a-lib", "--manifest-path", manifest.to_str().unwrap()],
    ] {
        let mut a = a.clone();
        a.extend(["--out", out.to_str().unwrap()]);
        let e = hpc_image::run(args(&a)).unwrap_err();
        let msg = format!("{e:#}");
        assert_eq!(hpc_image::exit_status(&e), 2, "{msg}");
        assert!(e.downcast_ref::<hpc_image::UsageError>().is_some(), "{msg}");
        assert!(msg.contains("no binary"), "{msg}");
        assert!(msg.contains("just-a-lib"), "{msg}");
        // No target/, no output directory, no cache.
        assert_eq!(entries(&ws), before, "{msg}");
    }
    let _ = std::fs::remove_dir_all(&ws);
}

#[test]
fn other_bad_input_is_refused_before_anything_is_written() {
    let ws = workspace("bad", true);
    let manifest = ws.join("Cargo.toml");
    let before = entries(&ws);
    let missing = ws.join("no-such/Cargo.toml");
    for a in [
        vec!["--manifest-path", missing.to_str().unwrap()],
        vec![
            "--manifest-path",
            manifest.to_str().unwrap(),
            "--base",
            "/nonexistent/base.tar",
        ],
    ] {
        let e = hpc_image::run(args(&a)).unwrap_err();
        assert_eq!(hpc_image::exit_status(&e), 2, "{e:#}");
        assert_eq!(entries(&ws), before);
    }
    let _ = std::fs::remove_dir_all(&ws);
}

/// `--out` and `--cache` that are a device or a file, and a `--base` that is a
/// device (read without end), are refused naming the flag before the binary is
/// built: before, the release build ran first (minutes) and `--out /dev/null`
/// then failed with "creating /dev/null: File exists".
#[test]
fn folders_and_a_base_of_the_wrong_type_are_refused_before_the_build() {
    let ws = workspace("wrong-type", true);
    let manifest = ws.join("Cargo.toml");
    let m = manifest.to_str().unwrap();
    let file = ws.join("src/main.rs");
    let f = file.to_str().unwrap();
    let before = entries(&ws);
    for (flag, value, why) in [
        ("--out", "/dev/null", "is not a directory"),
        ("--out", f, "is not a directory"),
        ("--cache", "/dev/null", "is not a directory"),
        ("--base", "/dev/zero", "not a directory or a regular file"),
    ] {
        let e = hpc_image::run(args(&["--manifest-path", m, flag, value])).unwrap_err();
        let msg = format!("{e:#}");
        assert_eq!(hpc_image::exit_status(&e), 2, "{msg}");
        assert!(
            msg.contains(&format!("{flag} {value}")) && msg.contains(why),
            "{msg}"
        );
        // Nothing built: no target/.
        assert_eq!(entries(&ws), before, "{flag} {value}: {msg}");
    }
    // A manifest that exists but is no file is not "no such file".
    let e = hpc_image::run(args(&["--manifest-path", "/dev/zero"])).unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains("not a regular file") && !msg.contains("no such file"),
        "{msg}"
    );
    let _ = std::fs::remove_dir_all(&ws);
}

#[test]
fn a_failure_that_is_not_bad_input_is_status_1() {
    let e = anyhow::anyhow!("mmdebstrap failed");
    assert_eq!(hpc_image::exit_status(&e), 1);
    let e = anyhow::Error::new(hpc_image::UsageError("no binary".into())).context("image");
    assert_eq!(hpc_image::exit_status(&e), 2);
}
