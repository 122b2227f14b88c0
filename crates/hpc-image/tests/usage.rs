//! Bad input to `run`: found from the workspace's own `cargo metadata`, reported as a
//! `UsageError` (exit status 2), and nothing is built or written.

use std::path::Path;

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
fn lib_only(test: &str) -> hpc_test_support::TmpDir {
    workspace(test, false)
}

/// A one-package workspace outside this repository, with or without a binary.
fn workspace(test: &str, with_bin: bool) -> hpc_test_support::TmpDir {
    let d = hpc_test_support::TmpDir::new("hpc-image", test);
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

/// A new empty folder for the files a test makes besides its workspace.
fn scratch(test: &str) -> hpc_test_support::TmpDir {
    hpc_test_support::TmpDir::new("hpc-image", &format!("{test}-scratch"))
}

/// Runs the image command with `a` in workspace `ws` and checks that it is
/// refused as bad input (status 2) with a message holding `want`, before
/// anything was built (the workspace's entries unchanged). Returns the message.
fn refused_before_the_build(ws: &Path, a: &[&str], want: &str) -> String {
    let before = entries(ws);
    let e = hpc_image::run(args(a)).unwrap_err();
    let msg = format!("{e:#}");
    assert_eq!(hpc_image::exit_status(&e), 2, "{a:?}: {msg}");
    assert!(msg.contains(want), "{a:?}: {msg}");
    assert_eq!(entries(ws), before, "{a:?}: built: {msg}");
    msg
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
    for (flag, value, why) in [
        ("--out", "/dev/null", "is not a directory"),
        ("--out", f, "is not a directory"),
        ("--cache", "/dev/null", "is not a directory"),
        ("--base", "/dev/zero", "not a directory or a regular file"),
    ] {
        // Nothing built: no target/.
        let msg = refused_before_the_build(&ws, &["--manifest-path", m, flag, value], why);
        assert!(msg.contains(&format!("{flag} {value}")), "{msg}");
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

/// Hostile-user pass 15: a `--base` that is no image (an empty folder, an empty
/// file, a text file) was found only after the release build, by the import,
/// with status 1; it is refused naming the flag, before anything is built.
#[test]
fn a_base_that_is_no_image_is_refused_before_the_build() {
    let ws = workspace("no-image", true);
    let m = ws.join("Cargo.toml");
    let m = m.to_str().unwrap();
    let scratch = scratch("no-image");
    std::fs::create_dir_all(scratch.join("empty-dir")).unwrap();
    std::fs::write(scratch.join("empty-file"), "").unwrap();
    std::fs::write(scratch.join("text"), "not an archive\n".repeat(100)).unwrap();
    for (name, why) in [
        ("empty-dir", "neither an OCI layout"),
        ("empty-file", "not a tar archive"),
        ("text", "not a tar archive"),
    ] {
        let base = scratch.join(name);
        let base = base.to_str().unwrap();
        let msg = refused_before_the_build(&ws, &["--manifest-path", m, "--base", base], why);
        assert!(msg.contains(&format!("--base {base}")), "{msg}");
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::remove_dir_all(&ws);
}

/// Hostile-user pass 15: the image replaces `--out`'s `oci/`, scripts and
/// `image.json`. A folder holding another binary's image got this one's scripts
/// beside the other's archive, a user's own `oci/` folder was removed whole, and a
/// `--base` inside that `oci/` was removed before it was read (status 1, the base
/// lost). Each is refused naming the flag before the build, nothing touched.
#[test]
fn an_output_folder_the_image_would_wreck_is_refused_before_the_build() {
    let ws = workspace("wreck", true);
    let m = ws.join("Cargo.toml");
    let m = m.to_str().unwrap();
    let scratch = scratch("wreck");
    // A user's own folder called oci.
    let users = scratch.join("users");
    std::fs::create_dir_all(users.join("oci")).unwrap();
    std::fs::write(users.join("oci/notes.txt"), "keep").unwrap();
    // A user's own file called oci (hostile pass 20: once the layout was
    // written beside it, the rename over it failed at the end of the build).
    let file = scratch.join("file");
    std::fs::create_dir_all(&file).unwrap();
    std::fs::write(file.join("oci"), "keep").unwrap();
    // Another binary's image.
    let other = scratch.join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("image.json"), r#"{"binary": "someone-else"}"#).unwrap();
    // A base that is the output's own layout.
    let own = scratch.join("own");
    std::fs::create_dir_all(own.join("oci/blobs/sha256")).unwrap();
    std::fs::write(
        own.join("oci/oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    std::fs::write(own.join("oci/index.json"), r#"{"manifests": []}"#).unwrap();
    let own_base = own.join("oci");
    // A base elsewhere (of the shape checked before the build) for the other
    // cases: never mmdebstrap, which as root would be installed with apt-get.
    let elsewhere = scratch.join("base");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("index.json"), r#"{"manifests": []}"#).unwrap();
    for (out, base, why) in [
        (&users, &elsewhere, "is not an image layout"),
        (&file, &elsewhere, "its oci is not a directory"),
        (&other, &elsewhere, "holds the image of `someone-else`"),
        (&own, &own_base, "the layout this image replaces"),
    ] {
        let (out, base) = (out.to_str().unwrap(), base.to_str().unwrap());
        refused_before_the_build(
            &ws,
            &["--manifest-path", m, "--out", out, "--base", base],
            why,
        );
    }
    assert_eq!(
        std::fs::read_to_string(users.join("oci/notes.txt")).unwrap(),
        "keep"
    );
    assert!(own.join("oci/index.json").is_file());
    assert_eq!(std::fs::read_to_string(file.join("oci")).unwrap(), "keep");
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::remove_dir_all(&ws);
}

/// Hostile-user pass 18: `--out /` as root wrote the image's `oci/`, scripts
/// and `image.json` into `/` (and `--out /usr/local/bin` its run scripts onto
/// every user's PATH); `--cache /etc` its lock and blobs into `/etc`. A folder
/// of the system, as resolved (`/tmp/..` is `/`), is refused naming the flag,
/// before the build.
#[test]
fn a_system_folder_is_refused_as_the_output_or_the_cache() {
    let ws = workspace("system", true);
    let m = ws.join("Cargo.toml");
    let m = m.to_str().unwrap();
    let scratch = scratch("system");
    std::fs::write(scratch.join("index.json"), r#"{"manifests": []}"#).unwrap();
    let base = scratch.to_str().unwrap();
    for (flag, dir, why) in [
        ("--out", "/", "it is / itself"),
        ("--out", "/tmp/..", "it is / itself"),
        (
            "--out",
            "/etc",
            "it is /etc, a folder of the system's files",
        ),
        (
            "--out",
            "/usr/local/bin/img",
            "in /usr, a folder of the system's files",
        ),
        ("--out", "/var/lib/img", "in /var, a folder"),
        ("--out", "/tmp", "it is /tmp, a folder of the system"),
        ("--cache", "/", "it is / itself"),
        ("--cache", "/etc/hpc-cache", "in /etc"),
    ] {
        let msg =
            refused_before_the_build(&ws, &["--manifest-path", m, flag, dir, "--base", base], why);
        assert!(msg.contains(&format!("{flag} {dir}: ")), "{msg}");
    }
    assert!(!Path::new("/usr/local/bin/img").exists());
    assert!(!Path::new("/etc/hpc-cache").exists());
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::remove_dir_all(&ws);
}

/// Hostile-user pass 15: cargo reads every `Cargo.toml` from the workspace up
/// to its root; one that is a FIFO kept `cargo metadata`, and the image command,
/// waiting for ever. It is refused at once, naming it.
#[test]
fn a_manifest_that_is_a_fifo_is_refused_not_waited_on() {
    let top = hpc_test_support::TmpDir::new("hpc-image", "fifo-toml");
    let fifo = top.join("Cargo.toml");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let inner = top.join("inner");
    std::fs::create_dir_all(inner.join("src")).unwrap();
    std::fs::write(
        inner.join("Cargo.toml"),
        "[package]\nname = \"inner\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(inner.join("src/main.rs"), "fn main() {}\n").unwrap();
    let m = inner.join("Cargo.toml").to_str().unwrap().to_string();
    assert_fifo_refused(m, &fifo, "[workspace]\n");
    let _ = std::fs::remove_dir_all(&top);
}

/// Hostile-user pass 15: `HPC_IMAGE_CACHE=` (set, empty) was taken by clap as an
/// empty `--cache`: "a value is required for '--cache <DIR>' but none was
/// supplied", a flag not given. It is refused naming the variable. The variable
/// is set in a child process of this test binary only (the other tests share
/// this process's environment).
#[test]
fn an_empty_cache_variable_is_named_not_taken_for_the_flag() {
    const INNER: &str = "IMAGE_TEST_INNER_EMPTY_CACHE";
    if std::env::var_os(INNER).is_some() {
        let ws = workspace("empty-cache", true);
        let m = ws.join("Cargo.toml");
        let cli = Cli::try_parse_from(["image", "--manifest-path", m.to_str().unwrap()])
            .unwrap_or_else(|e| panic!("clap refused it: {e}"));
        let e = hpc_image::run(cli.args).unwrap_err();
        let msg = format!("{e:#}");
        assert_eq!(hpc_image::exit_status(&e), 2, "{msg}");
        assert!(msg.contains("HPC_IMAGE_CACHE is set but empty"), "{msg}");
        assert!(!ws.join("target").exists(), "built: {msg}");
        let _ = std::fs::remove_dir_all(&ws);
        return;
    }
    let o = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "an_empty_cache_variable_is_named_not_taken_for_the_flag",
            "--nocapture",
        ])
        .env(INNER, "1")
        .env(hpc_env::IMAGE_CACHE, "")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Cargo also reads the manifests of a workspace's members: `members = ["m"]`
/// with `m/Cargo.toml` a FIFO kept `cargo metadata`, and the image command,
/// waiting for ever, as a FIFO above the workspace did. It is refused at once,
/// naming it.
#[test]
fn a_member_manifest_that_is_a_fifo_is_refused_not_waited_on() {
    let ws = workspace("fifo-member", true);
    let toml = ws.join("Cargo.toml");
    std::fs::write(
        &toml,
        "[package]\nname = \"just-a-lib\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [workspace]\nmembers = [\"m\"]\n",
    )
    .unwrap();
    std::fs::create_dir_all(ws.join("m")).unwrap();
    let fifo = ws.join("m/Cargo.toml");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let m = toml.to_str().unwrap().to_string();
    assert_fifo_refused(m, &fifo, "[package]\nname = \"m\"\n");
    let _ = std::fs::remove_dir_all(&ws);
}

/// A binary name, `--name` or `--tag` of 100,000 characters was echoed whole
/// into the message refusing it (100 kB, the binary's twice).
#[test]
fn long_names_are_refused_in_a_short_line() {
    let ws = workspace("long-names", true);
    let m = ws.join("Cargo.toml");
    let m = m.to_str().unwrap();
    let long = "x".repeat(100_000);
    let base_dir = scratch("long-names-base");
    std::fs::write(base_dir.join("index.json"), "{}").unwrap();
    let base = base_dir.to_str().unwrap();
    for (a, want) in [
        (vec![long.as_str()], "no binary or example named"),
        (vec!["--name", &long], "is not an image reference's name"),
        (vec!["--tag", &long], "is not a tag"),
    ] {
        let mut a = a.clone();
        a.extend(["--manifest-path", m, "--base", base]);
        let msg = refused_before_the_build(&ws, &a, want);
        assert!(msg.len() < 600, "{} bytes: {}", msg.len(), &msg[..200]);
    }
    let _ = std::fs::remove_dir_all(&ws);
    let _ = std::fs::remove_dir_all(&base_dir);
}

/// An `--out` or `--cache` that is a link to a missing folder passed the checks
/// before the build and failed after it (status 1) as "creating D: File
/// exists". It is refused before the build, saying what it is.
#[test]
fn an_output_folder_that_is_a_dangling_link_is_refused_before_the_build() {
    let ws = workspace("dangling-out", true);
    let m = ws.join("Cargo.toml");
    let m = m.to_str().unwrap();
    let s = scratch("dangling-out");
    std::fs::write(s.join("index.json"), "{}").unwrap();
    let link = s.join("link");
    std::os::unix::fs::symlink(s.join("missing"), &link).unwrap();
    let (base, link) = (s.to_str().unwrap(), link.to_str().unwrap());
    for flag in ["--out", "--cache"] {
        let msg = refused_before_the_build(
            &ws,
            &["--manifest-path", m, "--base", base, flag, link],
            "which does not exist",
        );
        assert!(msg.contains(flag) && msg.contains("symbolic link"), "{msg}");
    }
    let _ = std::fs::remove_dir_all(&ws);
    let _ = std::fs::remove_dir_all(&s);
}

/// Standard error on a full device (`2>/dev/full`): the first progress line
/// panicked (status 101, nothing said, nothing checked). The command now runs
/// as it would, its status saying how it went: here 2, bad input. Run in a
/// child of this test binary, whose standard error is the full device.
#[test]
fn a_full_standard_error_is_no_panic() {
    const INNER: &str = "IMAGE_TEST_INNER_FULL_STDERR";
    if std::env::var_os(INNER).is_some() {
        let ws = lib_only("full-stderr");
        let m = ws.join("Cargo.toml");
        let r = hpc_image::run(args(&["--manifest-path", m.to_str().unwrap()]));
        let code = match &r {
            Ok(()) => 0,
            Err(e) => hpc_image::exit_status(e),
        };
        let _ = hpc_image::exit(r);
        let _ = std::fs::remove_dir_all(&ws);
        std::process::exit(i32::from(code));
    }
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "a_full_standard_error_is_no_panic",
            "--exact",
            "--nocapture",
        ])
        .env(INNER, "1")
        .stderr(full)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
}

/// Two image builds into one `--out` at once (each with a cache of its own)
/// wrote over each other's files, and one failed with "No such file or
/// directory", naming none. The second is refused, naming the first, before it
/// writes into the folder.
#[test]
fn an_output_folder_another_build_is_writing_is_refused() {
    let ws = workspace("out-claimed", true);
    let m = ws.join("Cargo.toml");
    let s = scratch("out-claimed");
    std::fs::write(s.join("index.json"), "{}").unwrap();
    let out = s.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let claim =
        hpc_io::rundir::FileClaim::take(&out.join("image.json"), "another image build").unwrap();
    let e = hpc_image::run(args(&[
        "--manifest-path",
        m.to_str().unwrap(),
        "--base",
        s.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--cache",
        s.join("cache").to_str().unwrap(),
    ]))
    .unwrap_err();
    let msg = format!("{e:#}");
    assert_eq!(hpc_image::exit_status(&e), 2, "{msg}");
    assert!(
        msg.contains("--out") && msg.contains("is being written by another image build"),
        "{msg}"
    );
    assert_eq!(entries(&out), vec![".image.json.lock".to_string()]);
    drop(claim);
    let _ = std::fs::remove_dir_all(&ws);
    let _ = std::fs::remove_dir_all(&s);
}

/// Runs the image command on the manifest `m` in a thread and checks that it is
/// refused within 30 s (status 2) naming `fifo` as no regular file; if it still
/// waits, `unblock` is written into the FIFO to let the waiting cargo go before
/// the test fails.
fn assert_fifo_refused(m: String, fifo: &std::path::Path, unblock: &str) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = hpc_image::run(args(&["--manifest-path", &m]));
        let _ = tx.send(r.map_err(|e| (hpc_image::exit_status(&e), format!("{e:#}"))));
    });
    let got = rx.recv_timeout(std::time::Duration::from_secs(30));
    if got.is_err() {
        let _ = std::fs::write(fifo, unblock);
    }
    let (status, msg) = got
        .expect("still waiting on the FIFO after 30 s")
        .unwrap_err();
    assert_eq!(status, 2, "{msg}");
    assert!(
        msg.contains(&fifo.display().to_string()) && msg.contains("not a regular file"),
        "{msg}"
    );
}

/// An `--out` whose path is not UTF-8: the build ran to its end and panicked
/// writing `image.json` (status 101). It is refused before the build.
#[test]
fn an_output_folder_whose_path_is_not_utf8_is_refused_before_the_build() {
    use std::os::unix::ffi::OsStrExt as _;
    let ws = workspace("non-utf8-out", true);
    let s = scratch("non-utf8-out");
    std::fs::write(s.join("index.json"), "{}").unwrap();
    let out = s.join(std::ffi::OsStr::from_bytes(b"out\xff"));
    let before = entries(&ws);
    let a: Vec<std::ffi::OsString> = vec![
        "image".into(),
        "--manifest-path".into(),
        ws.join("Cargo.toml").into(),
        "--base".into(),
        s.to_path_buf().into(),
        "--out".into(),
        out.clone().into(),
    ];
    let e = hpc_image::run(Cli::parse_from(a).args).unwrap_err();
    let msg = format!("{e:#}");
    assert_eq!(hpc_image::exit_status(&e), 2, "{msg}");
    assert!(
        msg.contains("--out") && msg.contains("not valid UTF-8"),
        "{msg}"
    );
    assert_eq!(entries(&ws), before, "built: {msg}");
    assert!(!out.exists());
    let _ = std::fs::remove_dir_all(&ws);
    let _ = std::fs::remove_dir_all(&s);
}

/// Hostile-user pass 18 noted: `--cache O/oci/cache` with `--out O` was made,
/// then removed with the layout it lies in, every build. Refused before the
/// build, naming both flags; a cache beside `oci/` is not.
#[test]
fn a_cache_inside_the_outputs_layout_is_refused_naming_both_flags() {
    let ws = workspace("cache-in-oci", true);
    let m = ws.join("Cargo.toml");
    let m = m.to_str().unwrap();
    let scratch = scratch("cache-in-oci");
    let out = scratch.join("out");
    let base = scratch.join("base");
    std::fs::create_dir_all(&base).unwrap();
    std::fs::write(base.join("index.json"), r#"{"manifests": []}"#).unwrap();
    let base = base.to_str().unwrap();
    // Made or not, through `..` too.
    for cache in [
        out.join("oci/cache"),
        out.join("oci"),
        out.join("x/../oci/blobs"),
    ] {
        let msg = refused_before_the_build(
            &ws,
            &[
                "--manifest-path",
                m,
                "--out",
                out.to_str().unwrap(),
                "--cache",
                cache.to_str().unwrap(),
                "--base",
                base,
            ],
            "the layout this image removes and writes anew",
        );
        assert!(
            msg.contains(&format!("--cache {}", cache.display()))
                && msg.contains(&format!("--out {}", out.display())),
            "{msg}"
        );
        assert!(!out.exists(), "{msg}");
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::remove_dir_all(&ws);
}

/// Hostile-user pass 19: `--out`, `--cache` and `--base` holding a terminal's
/// escape were written raw in the refusals (the terminal turned red). Quoted
/// and escaped.
#[test]
fn a_path_with_a_control_character_is_shown_escaped() {
    let ws = workspace("escape", true);
    let m = ws.join("Cargo.toml");
    let m = m.to_str().unwrap();
    let scratch = scratch("escape");
    let file = scratch.join("f\u{1b}[31m");
    std::fs::write(&file, "x").unwrap();
    let base = scratch.join("base");
    std::fs::create_dir_all(&base).unwrap();
    std::fs::write(base.join("index.json"), r#"{"manifests": []}"#).unwrap();
    let (file, base) = (file.to_str().unwrap(), base.to_str().unwrap());
    let out = scratch.join("out");
    let out = out.to_str().unwrap();
    let missing = "/nonexistent/b\u{1b}[31m";
    let mut said = Vec::new();
    for a in [
        vec!["--manifest-path", m, "--out", file, "--base", base],
        vec![
            "--manifest-path",
            m,
            "--out",
            out,
            "--cache",
            file,
            "--base",
            base,
        ],
        vec!["--manifest-path", m, "--out", out, "--base", missing],
    ] {
        said.push(refused_before_the_build(&ws, &a, "\\u{1b}[31m"));
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::remove_dir_all(&ws);
    for e in said {
        assert!(!e.contains('\u{1b}'), "{e}");
    }
}
