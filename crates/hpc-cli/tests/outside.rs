//! An application outside this repository, as a user makes it: the crates as
//! `cargo package` writes them for crates.io, `cargo install hpc-cli` (and with
//! `--features mpi`) from them, `hpc new`, `cargo build`, `hpc run -n 4`, a build with
//! `--features mpi` under `mpirun -n 2`, and the application's own
//! `cargo xtask image` whose image runs in Podman. Nothing of this repository runs but
//! `cargo package` and the Podman settings script.
//!
//! The packaged crates reach the application through `[patch.crates-io]` (in the
//! application's `.cargo/config.toml`, and `--config` for `cargo install`), and every
//! build is offline: third-party crates come from cargo's cache, as the workspace's
//! own build left them.
//!
//! Slow (it builds the CLI twice and the application twice), so it runs only with
//! `HPC_TEST_OUTSIDE=1` (`cargo xtask test` runs it as a step of its own); the image
//! and Podman part also needs `HPC_TEST_CONTAINERS=1`. The builds share
//! `target/outside/` of this repository as their target directory, so a second run
//! rebuilds only what changed (the work directory, under the system's temporary
//! directory, is kept for the same reason); the image's Debian base comes from
//! `target/hpc-image-cache/`, shared with the image tests.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

fn on(var: &str) -> bool {
    std::env::var(var).as_deref() == Ok("1")
}

/// A command with a clean cargo environment: nothing of the cargo that runs this test
/// (its package variables, its target directory) leaks into the user's builds.
fn clean(program: impl AsRef<std::ffi::OsStr>, target: &Path) -> Command {
    let mut c = Command::new(program);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().to_string();
        if (k.starts_with("CARGO_") && k != "CARGO_HOME") || k.starts_with("NEXTEST") {
            c.env_remove(&k);
        }
    }
    c.env("CARGO_TARGET_DIR", target);
    c
}

fn cargo(target: &Path) -> Command {
    clean(
        std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()),
        target,
    )
}

/// Runs a command to completion within `limit`, echoing it and its time; returns its
/// output (stdout captured, stderr captured).
fn run(what: &str, cmd: &mut Command, limit: Duration) -> Output {
    let t = Instant::now();
    let _ = writeln!(std::io::stderr(), "==> {what}");
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let out = std::thread::scope(|s| {
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        s.spawn(move || {
            if rx.recv_timeout(limit).is_err() {
                // SAFETY: kill(2) on the child's pid, which we have not waited for yet.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
        });
        let out = child.wait_with_output().expect("wait");
        let _ = tx.send(());
        out
    });
    let _ = writeln!(
        std::io::stderr(),
        "    {:.1}s {}",
        t.elapsed().as_secs_f64(),
        out.status
    );
    assert!(
        t.elapsed() < limit,
        "{what}: did not finish within {limit:?}\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn ok(what: &str, cmd: &mut Command, limit: Duration) -> String {
    let out = run(what, cmd, limit);
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const BUILD: Duration = Duration::from_secs(1200);
const RUN: Duration = Duration::from_secs(120);

/// `cargo package` of every crate under `crates/`, unpacked into `work/crates/`, and
/// the `[patch.crates-io]` table that points at them.
fn packaged_crates(work: &Path, target: &Path) -> String {
    let mut c = cargo(target);
    c.current_dir(repo()).args([
        "package",
        "--no-verify",
        "--allow-dirty",
        "--offline",
        "--target-dir",
    ]);
    c.arg(work.join("pkg"));
    let mut names: Vec<String> = std::fs::read_dir(repo().join("crates"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("Cargo.toml").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for n in &names {
        c.args(["-p", n]);
    }
    ok(
        "cargo package (the crates as crates.io gets them)",
        &mut c,
        BUILD,
    );
    let unpacked = work.join("crates");
    std::fs::create_dir_all(&unpacked).unwrap();
    let mut patch = String::from("[patch.crates-io]\n");
    for n in &names {
        let file = format!("{n}-{}.crate", env!("CARGO_PKG_VERSION"));
        let krate = work.join("pkg/package").join(&file);
        assert!(krate.exists(), "{file} was not packaged");
        ok(
            &format!("unpack {file}"),
            Command::new("tar")
                .arg("xzf")
                .arg(&krate)
                .arg("-C")
                .arg(&unpacked),
            RUN,
        );
        let dir = unpacked.join(format!("{n}-{}", env!("CARGO_PKG_VERSION")));
        patch.push_str(&format!(
            "{n} = {{ path = {:?} }}\n",
            dir.display().to_string()
        ));
    }
    patch
}

/// `cargo install hpc-cli` from the packaged crates into `root`.
fn install_cli(work: &Path, target: &Path, root: &Path, features: &[&str]) -> PathBuf {
    let mut c = cargo(target);
    c.current_dir(work)
        .args(["install", "--offline", "--debug", "--path"])
        .arg(work.join(format!("crates/hpc-cli-{}", env!("CARGO_PKG_VERSION"))))
        .arg("--root")
        .arg(root)
        .arg("--config")
        .arg(work.join("patch.toml"));
    for f in features {
        c.args(["--features", f]);
    }
    ok(
        &format!("cargo install hpc-cli {}", features.join(" ")),
        &mut c,
        BUILD,
    );
    let hpc = root.join("bin/hpc");
    let v = ok("hpc --version", Command::new(&hpc).arg("--version"), RUN);
    let want = if features.is_empty() {
        "features: none"
    } else {
        "features: mpi"
    };
    assert!(v.contains(want), "{v}");
    hpc
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one scenario, step after step, whose asserts read best in order"
)]
fn outside_application_end_to_end() {
    if !on("HPC_TEST_OUTSIDE") {
        let _ = writeln!(
            std::io::stderr(),
            "outside_application_end_to_end skipped: set HPC_TEST_OUTSIDE=1 (cargo xtask test does) \
             to install hpc-cli from the packaged crates and build, run and image an application \
             made by `hpc new`"
        );
        return;
    }
    let t0 = Instant::now();
    let target = repo().join("target/outside");
    // Outside the repository, under a name that is stable for this checkout: the
    // unpacked crates keep their paths (and the archive's mtimes), so a second run
    // reuses the builds in the shared target directory.
    let work = std::env::temp_dir().join(format!("hpc-outside-{:016x}", {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        repo().hash(&mut h);
        h.finish()
    }));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    assert!(
        !work.starts_with(repo()),
        "the application must live outside the repository"
    );

    let patch = packaged_crates(&work, &target);
    std::fs::write(work.join("patch.toml"), &patch).unwrap();
    let hpc = install_cli(&work, &target, &work.join("root"), &[]);
    let hpc_mpi = install_cli(&work, &target, &work.join("root-mpi"), &["mpi"]);

    // The scaffold, wired to the packaged crates.
    let app = work.join("apps/outside-demo");
    std::fs::create_dir_all(app.parent().unwrap()).unwrap();
    ok(
        "hpc new outside-demo",
        Command::new(&hpc)
            .arg("new")
            .arg(&app)
            .args(["--vcs", "none"]),
        RUN,
    );
    let config = app.join(".cargo/config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push('\n');
    text.push_str(&patch);
    std::fs::write(&config, text).unwrap();

    // Default features, 4 ranks under the installed launcher.
    let mut c = cargo(&target);
    c.current_dir(&app).args(["build", "--offline"]);
    ok("cargo build (default features)", &mut c, BUILD);
    let bin = target.join("debug/outside-demo");
    let out = ok(
        "hpc run -n 4",
        clean(&hpc, &target)
            .current_dir(&app)
            .args(["run", "-n", "4", "--time-limit", "60", "--"])
            .arg(&bin),
        RUN,
    );
    for r in 0..4 {
        assert!(
            out.contains(&format!("[{r}] rank {r} of 4 on ")),
            "rank {r} missing:\n{out}"
        );
    }
    assert!(
        out.contains("[0] sum of 1..=4 over the ranks: 10 (hpc run launcher"),
        "{out}"
    );

    // The application's own xtask refuses bad input with status 2.
    let mut c = cargo(&target);
    c.current_dir(&app)
        .args(["--offline", "xtask", "image", "no-such-binary"]);
    let o = run("cargo xtask image no-such-binary", &mut c, BUILD);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no binary or example named `no-such-binary`") && err.contains("outside-demo"),
        "{err}"
    );

    // With MPI, under mpirun.
    let mut c = cargo(&target);
    c.current_dir(&app)
        .args(["build", "--offline", "--features", "mpi"]);
    ok("cargo build --features mpi", &mut c, BUILD);
    let mpirun = ["mpirun.openmpi", "mpirun"].into_iter().find(|m| {
        Command::new(m)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    match mpirun {
        Some(m) => {
            let out = ok(
                "mpirun -n 2",
                clean(m, &target)
                    .args(["-n", "2", "--oversubscribe"])
                    .arg(&bin)
                    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
                    .env("OMPI_MCA_rmaps_base_oversubscribe", "1"),
                RUN,
            );
            for r in 0..2 {
                assert!(out.contains(&format!("rank {r} of 2 on ")), "{out}");
            }
            assert!(out.contains("sum of 1..=2 over the ranks: 3 (MPI"), "{out}");
            // The MPI build of the launcher runs the MPI build of the application too.
            let out = ok(
                "hpc run -n 2 (hpc built with mpi)",
                clean(&hpc_mpi, &target)
                    .args(["run", "-n", "2", "--time-limit", "60", "--"])
                    .arg(&bin),
                RUN,
            );
            assert!(out.contains("[0] sum of 1..=2 over the ranks: 3"), "{out}");
        }
        None => {
            assert!(
                !on("HPC_REQUIRE_MPI"),
                "HPC_REQUIRE_MPI=1 but no mpirun is installed"
            );
            let _ = writeln!(std::io::stderr(), "mpirun part skipped: no mpirun");
        }
    }

    if !on("HPC_TEST_CONTAINERS") {
        let _ = writeln!(
            std::io::stderr(),
            "image part skipped: set HPC_TEST_CONTAINERS=1 to build the application's image \
             with its own `cargo xtask image` and run it in Podman"
        );
    } else {
        // Its own `cargo xtask image`, default features, with the installed `hpc`
        // (from the PATH) beside it. The dev profile reuses the build above.
        let path = format!(
            "{}:{}",
            work.join("root/bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut c = cargo(&target);
        c.current_dir(&app)
            .args([
                "--offline",
                "xtask",
                "image",
                "--profile",
                "dev",
                "--with-hpc",
            ])
            .env("PATH", &path)
            .env("HPC_IMAGE_CACHE", repo().join("target/hpc-image-cache"));
        let digest = ok("cargo xtask image (the application's own)", &mut c, BUILD);
        assert!(digest.trim().starts_with("sha256:"), "{digest}");
        let img = target.join("image/outside-demo");
        for f in [
            "outside-demo-oci.tar",
            "outside-demo.def",
            "slurm-apptainer.sbatch",
            "slurm-podman.sbatch",
            "podman-run.sh",
            "image.json",
            "oci/index.json",
        ] {
            assert!(img.join(f).exists(), "{f} missing in {}", img.display());
        }
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(img.join("image.json")).unwrap()).unwrap();
        assert_eq!(summary["binary"], "outside-demo");
        assert_eq!(summary["package"], "outside-demo");

        let script = format!(
            ". {env} {pdir} && podman load -q -i {tar} >/dev/null && \
             podman run --rm localhost/outside-demo:latest && \
             podman run --rm localhost/outside-demo:latest hpc run -n 2 --time-limit 60 -- outside-demo",
            env = repo().join("containers/test/podman-env.sh").display(),
            pdir = work.join("podman").display(),
            tar = img.join("outside-demo-oci.tar").display(),
        );
        let out = ok(
            "podman load + podman run (singleton and hpc run -n 2)",
            clean("bash", &target).args(["-c", &script]),
            Duration::from_secs(300),
        );
        assert!(out.contains("rank 0 of 1 on "), "{out}");
        assert!(
            out.contains("sum of 1..=1 over the ranks: 1 (singleton)"),
            "{out}"
        );
        assert!(out.contains("[1] rank 1 of 2 on "), "{out}");
        assert!(
            out.contains("[0] sum of 1..=2 over the ranks: 3 (hpc run"),
            "{out}"
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "outside application: {:.0}s in all (target dir {})",
        t0.elapsed().as_secs_f64(),
        target.display()
    );
}
