//! An application outside this repository, made the way README.md tells a user to
//! before the crates are on crates.io: the commands of its "Start an application"
//! block run literally, with the two that need the registry (`cargo install hpc-cli`
//! and `hpc new my-sim`) replaced by those of the block that follows "Before the
//! crates are on crates.io" (`cargo install --path hpc-rs/crates/hpc-cli`, `hpc new
//! my-sim --sdk ~/src/hpc-rs`), as the README says: the checkout is this repository
//! (linked as `~/src/hpc-rs`, the commands running in `~/src`). Each command must
//! succeed, and the lines the README shows must be printed (up to the host name and
//! the address, which differ from machine to machine). So a README whose commands
//! stop working breaks this test.
//!
//! After the README's commands: the application's `cargo xtask` refuses a binary it
//! does not have; the launcher installed `--features mpi` (as the README's comment
//! says) runs the MPI build; and with `HPC_TEST_CONTAINERS=1` the README's image and
//! one with the launcher inside (`--with-hpc`) run in Podman; with `HPC_TEST_CLUSTER=1`
//! the application's own README's cluster block (`hpc cluster up`, `srun` across two
//! Docker nodes, `down`) runs with that launcher.
//!
//! The environment, not the commands, is the test's: `HOME` is a work directory
//! (cargo's and rustup's homes stay where they are), `cargo install` installs under
//! it, every build shares one target directory (the application's `target` links
//! to it), builds are offline (third-party crates come from cargo's cache), release
//! builds are not optimised (`CARGO_PROFILE_RELEASE_*`: the optimiser's time is not
//! what this checks), `mpirun` is Open MPI's, and Open MPI may run as root. What
//! `cargo package` writes for crates.io is checked by `cargo xtask publish`.
//!
//! Slow (it builds the CLI twice and the application three times), so it runs only
//! with `HPC_TEST_OUTSIDE=1` (`cargo xtask test` runs it as a step of its own); the
//! image and Podman part also needs `HPC_TEST_CONTAINERS=1`. The work directory,
//! under the system's temporary directory, has a name stable for this checkout and
//! keeps the builds' target directory for a second run; the image's Debian base comes
//! from `target/hpc-image-cache/`, shared with the image tests.

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

/// The user's world: the work directory's layout and the environment every command
/// of the test runs in.
struct User {
    /// `HOME`; the checkout is `~/src/hpc-rs`, a link to this repository.
    home: PathBuf,
    /// `cargo install`'s root (`--features mpi` installs under `root-mpi`).
    root: PathBuf,
    /// `mpirun`, linked to Open MPI's (Debian's alternatives may name MPICH's).
    shim: PathBuf,
    /// Every build's target directory (`CARGO_TARGET_DIR`; the application's
    /// `target` links to it): the installs and the application's release build share
    /// their dependencies, and a second run reuses them.
    target: PathBuf,
}

impl User {
    fn new(work: &Path) -> User {
        let home = work.join("home");
        std::fs::create_dir_all(home.join("src")).unwrap();
        std::os::unix::fs::symlink(repo(), home.join("src/hpc-rs")).unwrap();
        let shim = work.join("shim");
        std::fs::create_dir_all(&shim).unwrap();
        if let Some(m) = which("mpirun.openmpi") {
            std::os::unix::fs::symlink(m, shim.join("mpirun")).unwrap();
        }
        User {
            home,
            root: work.join("root"),
            shim,
            target: work.join("target"),
        }
    }

    /// `program` in the user's environment: nothing of the cargo that runs this test
    /// (its package variables, its target directory) leaks in.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>, root: &Path) -> Command {
        let mut c = Command::new(program);
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy().to_string();
            if (k.starts_with("CARGO_") && k != "CARGO_HOME") || k.starts_with("NEXTEST") {
                c.env_remove(&k);
            }
        }
        let real_home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
        let cargo_home =
            std::env::var_os("CARGO_HOME").map_or(real_home.join(".cargo"), PathBuf::from);
        let rustup_home =
            std::env::var_os("RUSTUP_HOME").map_or(real_home.join(".rustup"), PathBuf::from);
        let cargo_dir = std::env::var_os("CARGO")
            .and_then(|c| Path::new(&c).parent().map(Path::to_path_buf))
            .unwrap_or_else(|| cargo_home.join("bin"));
        let path = std::env::join_paths(
            [root.join("bin"), self.shim.clone(), cargo_dir]
                .into_iter()
                .chain(std::env::split_paths(
                    &std::env::var_os("PATH").unwrap_or_default(),
                )),
        )
        .unwrap();
        c.env("HOME", &self.home)
            .env("CARGO_HOME", cargo_home)
            .env("RUSTUP_HOME", rustup_home)
            .env("CARGO_INSTALL_ROOT", root)
            .env("CARGO_TARGET_DIR", &self.target)
            .env("CARGO_NET_OFFLINE", "true")
            .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0")
            .env("CARGO_PROFILE_RELEASE_LTO", "false")
            .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
            .env("HPC_IMAGE_CACHE", repo().join("target/hpc-image-cache"))
            .env("PATH", path);
        c
    }

    /// `bash -c line` in `dir`, as the user.
    fn shell(&self, dir: &Path, line: &str, root: &Path) -> Command {
        let mut c = self.command("bash", root);
        c.current_dir(dir).args(["-c", line]);
        c
    }
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// The commands (without their `# comments`) of README.md's first console block
/// after the line starting with `marker`, each with the lines the README shows for it.
fn readme_block(marker: &str) -> Vec<(String, Vec<String>)> {
    console_block(&repo().join("README.md"), marker)
}

/// The commands of the first console block of the Markdown file `path` after the
/// line starting with `marker` (see [`readme_block`]).
fn console_block(path: &Path, marker: &str) -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(path).unwrap();
    let at = text
        .lines()
        .position(|l| l.starts_with(marker))
        .unwrap_or_else(|| panic!("{} has no line starting with {marker:?}", path.display()));
    let mut lines = text.lines().skip(at).skip_while(|l| *l != "```console");
    assert!(lines.next().is_some(), "no console block after {marker:?}");
    let mut cmds: Vec<(String, Vec<String>)> = Vec::new();
    for l in lines.take_while(|l| !l.starts_with("```")) {
        if let Some(c) = l.strip_prefix("$ ") {
            let c = c.split(" #").next().unwrap_or(c).trim();
            cmds.push((c.to_string(), Vec::new()));
        } else if let Some(last) = cmds.last_mut() {
            last.1.push(l.to_string());
        }
    }
    cmds
}

/// The README's path before the crates are on crates.io: the "Start an application"
/// block with its registry install and its `hpc new` replaced by the `--sdk` block's.
fn documented_path() -> Vec<(String, Vec<String>)> {
    let sdk = readme_block("**Before the crates are on crates.io**");
    let mut start = readme_block("## Start an application");
    let [(install, _), (new, _)] = &sdk[..] else {
        panic!("the --sdk block has two commands (install, hpc new): {sdk:?}");
    };
    assert!(install.starts_with("cargo install --path "), "{install}");
    assert!(new.starts_with("hpc new my-sim --sdk "), "{new}");
    assert_eq!(start[0].0, "cargo install hpc-cli", "{start:?}");
    start[0].0.clone_from(install);
    let rest = start[1]
        .0
        .strip_prefix("hpc new my-sim")
        .unwrap_or_else(|| panic!("the second command is hpc new my-sim: {start:?}"))
        .to_string();
    start[1].0 = format!("{new}{rest}");
    start
}

/// The shown lines must be printed, up to what differs from machine to machine: the
/// host after ` on ` and the launcher's address in parentheses.
fn check_shown(cmd: &str, shown: &[String], out: &str) {
    for want in shown.iter().filter(|w| w.as_str() != "...") {
        let stable = want
            .split(" on ")
            .next()
            .and_then(|w| w.split(" (").next())
            .unwrap_or(want);
        assert!(
            out.lines().any(|l| l.starts_with(stable)),
            "`{cmd}`: the README shows {want:?}; printed:\n{out}"
        );
    }
}

/// What a command of the path printed, checked beyond the README's lines.
fn check_output(cmd: &str, out: &str) {
    if cmd.starts_with("hpc run -n 4") {
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
    } else if cmd.starts_with("mpirun -n 2") {
        for r in 0..2 {
            assert!(out.contains(&format!("rank {r} of 2 on ")), "{out}");
        }
        assert!(out.contains("sum of 1..=2 over the ranks: 3 (MPI"), "{out}");
    } else if cmd.starts_with("cargo xtask image") {
        assert!(out.trim().starts_with("sha256:"), "{out}");
    }
}

/// Runs the documented path; returns the application's directory.
fn follow_the_readme(user: &User) -> PathBuf {
    let mut cwd = user.home.join("src");
    let app = cwd.join("my-sim");
    for (line, shown) in documented_path() {
        let pieces: Vec<&str> = line.split(" && ").collect();
        for (i, cmd) in pieces.iter().enumerate() {
            if let Some(dir) = cmd.strip_prefix("cd ") {
                cwd = cwd.join(dir.trim());
                continue;
            }
            if cmd.starts_with("cargo xtask image") && !on("HPC_TEST_CONTAINERS") {
                let _ = writeln!(
                    std::io::stderr(),
                    "`{cmd}` skipped: set HPC_TEST_CONTAINERS=1 (it makes a Debian base with mmdebstrap)"
                );
                continue;
            }
            let out = ok(cmd, &mut user.shell(&cwd, cmd, &user.root), BUILD);
            if cmd.starts_with("hpc new ") {
                // `target/...` in the README's commands, where cargo builds.
                std::os::unix::fs::symlink(&user.target, app.join("target")).unwrap();
            }
            check_output(cmd, &out);
            // The README's lines are the output of the line's last command.
            if i + 1 == pieces.len() {
                check_shown(cmd, &shown, &out);
            }
        }
    }
    assert_eq!(cwd, app, "the README's commands end in the application");
    app
}

/// The application's own `cargo xtask` refuses a binary it does not have (status 2).
fn xtask_refuses_a_missing_binary(user: &User, app: &Path) {
    let o = run(
        "cargo xtask image no-such-binary",
        &mut user.shell(app, "cargo xtask image no-such-binary", &user.root),
        BUILD,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no binary or example named `no-such-binary`") && err.contains("my-sim"),
        "{err}"
    );
}

/// The launcher installed as the README's comment says (`--features mpi`) runs the
/// MPI build of the application; the one installed without says it has none.
fn mpi_launcher_runs_the_mpi_build(user: &User, work: &Path, app: &Path) {
    let v = ok(
        "hpc --version",
        &mut user.shell(app, "hpc --version", &user.root),
        RUN,
    );
    assert!(v.contains("features: none"), "{v}");
    let root_mpi = work.join("root-mpi");
    let install = documented_path()[0].0.clone() + " --features mpi";
    ok(
        &install,
        &mut user.shell(&user.home.join("src"), &install, &root_mpi),
        BUILD,
    );
    let v = ok(
        "hpc --version (mpi)",
        &mut user.shell(app, "hpc --version", &root_mpi),
        RUN,
    );
    assert!(v.contains("features: mpi"), "{v}");
    let out = ok(
        "hpc run -n 2 (hpc built with mpi)",
        &mut user.shell(
            app,
            "hpc run -n 2 --time-limit 60 -- target/release/my-sim",
            &root_mpi,
        ),
        RUN,
    );
    assert!(out.contains("[0] sum of 1..=2 over the ranks: 3"), "{out}");
}

/// The application's own README (the one `hpc new` wrote): its cluster block runs
/// literally, with the installed `hpc --features mpi`: `hpc cluster up` mounts the
/// MPI release build on two Docker nodes, `srun --mpi=pmix -N 2 -n 4` runs the job
/// across them (each rank names its node, rank 0 the sum), and `down` ends it (also
/// when the test fails half-way). The cluster has a name and folder of its own
/// (beside the repository's cluster tests); the node file system's cache is the
/// repository's.
fn app_runs_on_the_docker_cluster(user: &User, work: &Path, app: &Path) {
    let block = console_block(
        &app.join("README.md"),
        "## On a Slurm cluster of containers",
    );
    let cmds: Vec<&str> = block.iter().map(|(c, _)| c.as_str()).collect();
    assert!(
        cmds.iter().any(|c| c.starts_with("hpc cluster up"))
            && cmds
                .iter()
                .any(|c| c.contains("srun --mpi=pmix -N 2 -n 4 my-sim"))
            && cmds.last() == Some(&"hpc cluster down"),
        "{cmds:?}"
    );
    let root_mpi = work.join("root-mpi");
    let shell = |line: &str| {
        let mut c = user.shell(app, line, &root_mpi);
        c.env(hpc_runtime::env::CLUSTER_NAME, "hpc-outside")
            .env(hpc_runtime::env::CLUSTER_DIR, work.join("cluster"))
            .env(
                hpc_runtime::env::CACHE_DIR,
                repo().join("target/cluster-cache"),
            );
        c
    };
    struct Down<'a>(&'a dyn Fn(&str) -> Command);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            let _ = run("hpc cluster down", &mut (self.0)("hpc cluster down"), RUN);
        }
    }
    let _down = Down(&shell);
    for cmd in cmds {
        let limit = if cmd.starts_with("hpc cluster up") || cmd.starts_with("cargo build") {
            BUILD
        } else {
            RUN
        };
        let out = ok(cmd, &mut shell(cmd), limit);
        if cmd.contains("srun") {
            for node in ["node1", "node2"] {
                assert!(out.contains(&format!(" of 4 on {node} ")), "{node}:\n{out}");
            }
            assert!(out.contains("sum of 1..=4 over the ranks: 10"), "{out}");
        }
    }
}

/// The README's image (`--features mpi`) runs as a singleton in Podman; an image of
/// the debug build with the installed launcher inside (`--with-hpc`, from the PATH)
/// runs as one rank and under `hpc run -n 2`.
fn images_run_in_podman(user: &User, work: &Path, app: &Path) {
    let img = app.join("target/image/my-sim");
    for f in [
        "my-sim-oci.tar",
        "my-sim.def",
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
    assert_eq!(summary["binary"], "my-sim");
    assert_eq!(summary["package"], "my-sim");
    let env = format!(
        ". {} {} && podman load -q -i {} >/dev/null",
        repo().join("containers/test/podman-env.sh").display(),
        work.join("podman").display(),
        img.join("my-sim-oci.tar").display(),
    );
    let out = ok(
        "podman load + podman run (the README's image)",
        &mut user.shell(
            app,
            &format!("{env} && podman run --rm localhost/my-sim:latest"),
            &user.root,
        ),
        Duration::from_secs(300),
    );
    assert!(out.contains("rank 0 of 1 on "), "{out}");
    assert!(out.contains("sum of 1..=1 over the ranks: 1 ("), "{out}");

    let digest = ok(
        "cargo xtask image --profile dev --with-hpc",
        &mut user.shell(
            app,
            "cargo xtask image --profile dev --with-hpc",
            &user.root,
        ),
        BUILD,
    );
    assert!(digest.trim().starts_with("sha256:"), "{digest}");
    let out = ok(
        "podman load + podman run (singleton and hpc run -n 2)",
        &mut user.shell(
            app,
            &format!(
                "{env} && podman run --rm localhost/my-sim:latest && \
                 podman run --rm localhost/my-sim:latest hpc run -n 2 --time-limit 60 -- my-sim"
            ),
            &user.root,
        ),
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

#[test]
fn the_readmes_path_before_publication_is_followed_literally() {
    // The README keeps the shape this test follows, with or without the slow part.
    let path = documented_path();
    assert!(path.iter().any(|(c, _)| c.starts_with("hpc run -n 4")));
    assert!(path.iter().any(|(c, _)| c.contains("mpirun -n 2")));
    assert!(path.iter().any(|(c, _)| c.starts_with("cargo xtask image")));
    if !on("HPC_TEST_OUTSIDE") {
        let _ = writeln!(
            std::io::stderr(),
            "the outside application skipped: set HPC_TEST_OUTSIDE=1 (cargo xtask test does) \
             to follow the README's commands in a temporary directory"
        );
        return;
    }
    assert!(
        which("mpirun.openmpi").is_some() || !on("HPC_REQUIRE_MPI"),
        "HPC_REQUIRE_MPI=1 but Open MPI's mpirun (mpirun.openmpi) is not installed"
    );
    let t0 = Instant::now();
    // Outside the repository, under a name that is stable for this checkout, so that
    // a second run reuses the application's build.
    let work = std::env::temp_dir().join(format!("hpc-outside-{:016x}", {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        repo().hash(&mut h);
        h.finish()
    }));
    // Everything but the builds (work/target) starts afresh.
    for d in ["home", "shim", "root", "root-mpi"] {
        let _ = std::fs::remove_dir_all(work.join(d));
    }
    std::fs::create_dir_all(&work).unwrap();
    let user = User::new(&work);
    assert!(
        !work.starts_with(repo()),
        "the application must live outside the repository"
    );

    let app = follow_the_readme(&user);
    xtask_refuses_a_missing_binary(&user, &app);
    mpi_launcher_runs_the_mpi_build(&user, &work, &app);
    if on("HPC_TEST_CLUSTER") {
        app_runs_on_the_docker_cluster(&user, &work, &app);
    } else {
        let _ = writeln!(
            std::io::stderr(),
            "cluster part skipped: set HPC_TEST_CLUSTER=1 to run the application on the Docker cluster"
        );
    }
    if on("HPC_TEST_CONTAINERS") {
        images_run_in_podman(&user, &work, &app);
    } else {
        let _ = writeln!(
            std::io::stderr(),
            "image part skipped: set HPC_TEST_CONTAINERS=1 to run the application's images in Podman"
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "outside application: {:.0}s in all (work dir {})",
        t0.elapsed().as_secs_f64(),
        work.display()
    );
}
