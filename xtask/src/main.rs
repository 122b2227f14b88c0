//! Project automation for hpc-rs: `cargo xtask <task>`.
//!
//! - `demo`: set up the machine, build, and run the main demo under `hpc run`.
//! - `test`: set up the machine and run every check CI runs (fmt, clippy, tests, docs,
//!   book, packaging).
//! - `setup`: only the set-up step (system packages, toolchain components, cargo-nextest,
//!   mdbook, cargo-fuzz).
//! - `image`: a container image of a binary (the `hpc-image` library).
//! - `man`: the manual pages and shell completions of `hpc`.
//! - `loom`: the loom models of the concurrent code (a step of `test`).
//! - `modcycles`: fail if a crate has an import cycle between its modules.
//! - `env-table`: the book's table of every `HPC_*` variable, from crates/hpc-env.
//! - `crate-graph`: ARCHITECTURE.md's crate graph, from `cargo metadata`.
//! - `readme`: README.md's crate, command and feature tables.
//! - `cluster`: `hpc cluster` (the Docker cluster of Slurm + PMIx nodes) with this
//!   workspace's release build.
//!
//! Set-up installs what is missing: Debian packages through `apt-get` when running as
//! root (otherwise it prints the exact command and stops), rustup components, and
//! `cargo-nextest`, `mdbook` and `cargo-fuzz` through `cargo install`. It is idempotent and
//! quick when nothing is missing. `test` fails when cargo-nextest cannot be had rather than
//! run the tests without its timeouts and retries.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use cargo_metadata::Package;
use clap::{Parser, Subcommand};
use hpc_image::sys::cargo;

mod crategraph;
#[cfg(test)]
mod fixtures;
mod fuzz;
mod generated;
mod hwloc;
mod modcycles;
mod readme;
mod setup;

/// hpc-rs project automation.
#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Set up, build, and run the main demo on 2 and 4 ranks.
    Demo {
        /// Skip installing missing system packages and tools.
        #[arg(long)]
        no_setup: bool,
    },
    /// Set up and run every check CI runs.
    Test {
        /// Skip installing missing system packages and tools.
        #[arg(long)]
        no_setup: bool,
        /// Skip the slow checks (docs, book, packaging); for a quick local loop.
        #[arg(long)]
        quick: bool,
    },
    /// Only install what the other tasks need.
    Setup,
    /// `hpc cluster` of this workspace's release build (built first, with `mpi`):
    /// `up [--nodes N] [--bin DIR]` (default --bin: the release folder), `down`,
    /// `status`, `exec CMD...`; the work folder and node cache default to
    /// `target/cluster` and `target/cluster-cache`, as for the cluster tests.
    Cluster {
        /// Arguments for `hpc cluster`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        args: Vec<String>,
    },
    /// Run every fuzz target (or the named ones) from its checked-in corpus for a
    /// bounded time (cargo-fuzz on the nightly toolchain).
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// Targets to run (default: all of fuzz/Cargo.toml).
        targets: Vec<String>,
    },
    /// Build a binary in release mode and write its container image (OCI layout,
    /// oci-archive/docker-archive, SIF) plus Apptainer/Slurm/Podman run files.
    Image(Box<hpc_image::Args>),
    /// Run a cargo command whose vendored hwloc build cannot download its source
    /// (open-mpi.org out of reach): Debian's hwloc source is placed where the build
    /// looks and the command runs again, e.g.
    /// `cargo xtask hwloc-source clippy --workspace --all-targets --all-features`.
    HwlocSource {
        /// The cargo command and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        args: Vec<String>,
    },
    /// Fail if any crate of the workspace has an import cycle between its top-level
    /// modules (`use crate::...` and inline `crate::` paths).
    Modcycles,
    /// Run the loom models (tests named `loom*` under `cfg(loom)`) of every crate that
    /// has them, or of the named crates; a crate where none ran is an error.
    Loom {
        /// Crates to check (default: every crate with loom models).
        crates: Vec<String>,
    },
    /// Write the manual pages of `hpc` (hpc.1, hpc-run.1, ...) and its bash, zsh and
    /// fish completions, generated from its clap definition.
    Man {
        /// Output directory (pages in `man1/`, completions in `completions/`).
        #[arg(long, default_value = "target/man")]
        out: PathBuf,
    },
    /// Write the book's table of every `HPC_*` environment variable
    /// (book/src/reference/environment.md) from the list in crates/hpc-env.
    EnvTable {
        /// Only check that the committed table is up to date (exit 1 if not).
        #[arg(long)]
        check: bool,
    },
    /// Write ARCHITECTURE.md's crate graph (the workspace's members and their
    /// dependencies on each other, by level) from `cargo metadata`.
    CrateGraph {
        /// Only check that the committed graph is up to date (exit 1 if not).
        #[arg(long)]
        check: bool,
    },
    /// Write README.md's crate table (Cargo.toml descriptions), command table (`hpc
    /// --help`) and feature table (`cargo metadata` and the `##` comments of each
    /// crate's features).
    Readme {
        /// Only check that the committed tables are up to date (exit 1 if not).
        #[arg(long)]
        check: bool,
    },
    /// Publish the SDK's crates to crates.io in dependency order (`cargo publish
    /// --workspace`: the crates not marked `publish = false`), as a dry run unless
    /// `--execute`: each crate is packaged, and built against the ones before it.
    Publish {
        /// Really upload (needs `cargo login`); without it nothing leaves this machine.
        #[arg(long)]
        execute: bool,
        /// Package only, without building each packaged crate (minutes faster).
        #[arg(long)]
        no_verify: bool,
    },
}

/// `cargo publish --workspace` of the publishable crates: a dry run unless `execute`.
fn publish(execute: bool, no_verify: bool, allow_dirty: bool) -> Result<()> {
    let mut c = cargo();
    c.args(["publish", "--workspace"]);
    if !execute {
        c.arg("--dry-run");
    }
    if no_verify {
        c.arg("--no-verify");
    }
    if allow_dirty {
        c.arg("--allow-dirty");
    }
    eprintln!("crates to publish: {}", publishable()?.join(", "));
    run(&mut c)
}

/// The book's reference table of environment variables, relative to the root.
const ENV_TABLE: &str = "book/src/reference/environment.md";

/// Writes (or with `check`, compares) the environment table.
fn env_table(check: bool) -> Result<()> {
    let path = root().join(ENV_TABLE);
    let want = hpc_env::markdown_table();
    if check {
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if have != want {
            bail!("{ENV_TABLE} is out of date: run `cargo xtask env-table`");
        }
        eprintln!("{ENV_TABLE} is up to date");
        return Ok(());
    }
    std::fs::create_dir_all(path.parent().expect("a folder"))?;
    std::fs::write(&path, want).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {ENV_TABLE} ({} variables)", hpc_env::ALL.len());
    Ok(())
}

/// The workspace root (the parent of this crate's folder).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Runs a command in the workspace root, echoing it, failing on a non-zero exit
/// (hpc-image's runner, which `cargo xtask image` uses too).
fn run(cmd: &mut Command) -> Result<()> {
    hpc_image::sys::run_in(&root(), cmd)
}

fn demo() -> Result<()> {
    run(cargo().args([
        "build",
        "--release",
        "-p",
        "hpc-cli",
        "-p",
        "hpc-example-hello",
        "-p",
        "hpc-example-brunel",
    ]))?;
    let bin = root().join("target/release");
    let hpc = bin.join("hpc");
    for n in ["2", "4"] {
        run(Command::new(&hpc)
            .args(["run", "-n", n, "--"])
            .arg(bin.join("hello")))?;
    }
    // The main demo: Brunel's balanced network (12,500 neurons, 15.6 M synapses, 1 s
    // of biological time) on 2 ranks, spikes exchanged every interval.
    let out = root().join("target/demo/brunel");
    run(Command::new(&hpc)
        .args(["run", "-n", "2", "--bind", "core", "--"])
        .arg(bin.join("brunel"))
        .arg("--out")
        .arg(&out))?;
    eprintln!(
        "\ndemo finished: hello + allreduce on 2 and 4 ranks; Brunel network on 2 ranks \
         (spikes, summary and figures in {})",
        out.display()
    );
    let report = out.join("report.html");
    if !report.is_file() {
        bail!("the Brunel run wrote no report at {}", report.display());
    }
    eprintln!("report: {}", report.display());
    Ok(())
}

/// The crates whose default build differs from `--all-features` in what users meet
/// first: the facade and the CLI as `cargo add` and `cargo install` give them, and the
/// crates under them whose code changes with `mpi` or `vendored`.
const DEFAULT_FEATURE_CRATES: &[&str] = &["hpc-rs", "hpc-cli", "hpc-runtime", "hpc-topology"];

fn test(quick: bool) -> Result<()> {
    // The tests run under cargo-nextest (per-test timeouts, retries, test groups, the
    // JUnit report): without it they would silently lose all of that, so its absence
    // is an error (set-up installs it).
    if !setup::cargo_has("nextest") {
        bail!(
            "cargo-nextest is missing: run `cargo xtask setup` (or \
             `cargo install cargo-nextest --locked`)"
        );
    }
    let junit = target_dir()?.join("nextest/default/junit.xml");
    // "All features" is every feature of every crate except the ones that build hwloc
    // from source (`vendored`, `vendored-hwloc`): those get a step of their own below,
    // so that everything else is tested against the system's hwloc, as users build it.
    let all = all_features()?;
    let mut steps = Steps::new(junit);
    let mut step = |name: &str, f: &mut dyn FnMut() -> Result<()>| steps.run(name, f);
    step("fmt", &mut || {
        run(cargo().args(["fmt", "--all", "--", "--check"]))
    })?;
    step("module cycles", &mut || modcycles::run(&root()))?;
    step("clippy, all features", &mut || {
        run(cargo()
            .args(["clippy", "--workspace", "--all-targets", "--features", &all])
            .args(["--", "-D", "warnings"]))
    })?;
    // Default features: what `cargo add hpc-rs` and `cargo install hpc-cli` build
    // (system hwloc through pkg-config, no MPI).
    step("clippy, default features", &mut || {
        run(cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))
    })?;
    // Docs with every public item documented and every link resolved: a minute,
    // so before the tests (it once failed after 27 minutes of them).
    step("docs", &mut || {
        run(cargo()
            .args(["doc", "--workspace", "--no-deps", "--features", &all])
            .env("RUSTDOCFLAGS", "-D warnings -D missing_docs"))
    })?;
    // Integration tests that need MPI, the browser or Python (set-up installs them)
    // fail loudly instead of skipping.
    std::env::set_var(hpc_env::REQUIRE_MPI, "1");
    std::env::set_var(hpc_env::REQUIRE_BROWSER, "1");
    std::env::set_var(hpc_env::REQUIRE_PYTHON, "1");
    step("tests, all features", &mut || {
        run(cargo()
            .args(["nextest", "run", "--workspace", "--features", &all])
            .arg("--no-fail-fast"))
    })?;
    step("doctests, all features", &mut || {
        run(cargo().args(["test", "--workspace", "--features", &all, "--doc"]))
    })?;
    step("tests, default features", &mut || {
        let mut c = cargo();
        c.args(["nextest", "run", "--no-fail-fast"]);
        for p in DEFAULT_FEATURE_CRATES {
            c.args(["-p", p]);
        }
        run(&mut c)
    })?;
    // hwloc built from source (hwlocality's `vendored-extra`) and the topology tests
    // against it; hwloc::run_seeding supplies the source where open-mpi.org is out of
    // reach, as in CI.
    step("vendored hwloc: build and topology tests", &mut || {
        hwloc::run_seeding(|| {
            let mut c = cargo();
            c.args(["test", "-p", "hpc-topology", "--features", "vendored"]);
            c
        })
    })?;
    // Every Rust snippet of the book compiled and run as a doc-test of hpc-book; the
    // environment table generated from hpc-env's list; ARCHITECTURE.md's crate graph;
    // README.md's crate, command and feature tables.
    step("book, env table, crate graph, README tables", &mut || {
        run(cargo().args(["test", "-p", "hpc-book"]))?;
        env_table(true)?;
        let packages = workspace_packages()?;
        crategraph::run(&root(), &packages, true)?;
        readme::run(&root(), &packages, true)
    })?;
    step("loom models", &mut || loom(LOOM_CRATES))?;
    if !quick {
        // An application outside this repository, made by following the README's
        // commands for a checkout before the crates are published (`cargo install
        // --path`, `hpc new --sdk`, hpc run, mpirun, its own `cargo xtask image`),
        // then podman (crates/hpc-cli/tests/outside.rs).
        step("outside application", &mut || {
            run(cargo()
                .args(["nextest", "run", "-p", "hpc-cli", "--all-features"])
                .args(["--test", "outside", "--no-fail-fast"])
                .env(hpc_env::TEST_OUTSIDE, "1"))
        })?;
        // The book's quick start followed literally in a temporary directory, with
        // the checkout patched in as its section 1 says (book/tests/quickstart.rs).
        step("book quick start, followed literally", &mut || {
            run(cargo()
                .args(["test", "-p", "hpc-book", "--test", "quickstart"])
                .env(hpc_env::TEST_OUTSIDE, "1"))
        })?;
        // The device script (GPU check, overlap with spare cores, scaling) packs its
        // bundle and runs every part in miniature, so it is known to work before a
        // GPU machine is at hand. Its binaries are the dev-profile ones that the
        // all-features test step built (the same features, so no build of its own).
        step("device script, dry run", &mut || {
            run(Command::new("bash").args(["benches/device.sh", "dry", "--features", &all]))
        })?;
        // Every decoder and file reader, from its corpus, 10 s each: the build (the
        // nightly sanitizer build of every target at once) is most of the step, about
        // 365 of its 505 s on CI's cold run at 20 s each. Longer runs: `cargo xtask
        // fuzz --seconds N`.
        step("fuzzing", &mut || fuzz::run(&root(), 10, &[]))?;
        // The book's Rust snippets are tested by the hpc-book crate (below), against
        // the workspace's crates; `mdbook test` cannot link them.
        step("book", &mut || {
            run(Command::new("mdbook").args(["build", "book"]))
        })?;
        // The crates users get from the registry (every member not marked `publish =
        // false`), packaged in the order a release publishes them, each resolved
        // against the ones before it (`cargo xtask publish` without `--execute`).
        step("publish dry run", &mut || publish(false, true, true))?;
    }
    eprintln!("{}", steps.table());
    eprintln!("all checks passed");
    Ok(())
}

/// The steps of `cargo xtask test` so far, with their times, and the slowest tests
/// of the nextest runs among them (from nextest's JUnit report).
struct Steps {
    start: Instant,
    /// Name, seconds, whether it passed.
    done: Vec<(String, f64, bool)>,
    /// Where nextest writes its JUnit report (`[profile.default.junit]`).
    junit: PathBuf,
    /// Every test case of the nextest runs so far: name and seconds.
    tests: Vec<(String, f64)>,
}

impl Steps {
    fn new(junit: PathBuf) -> Steps {
        Steps {
            start: Instant::now(),
            done: Vec::new(),
            junit,
            tests: Vec::new(),
        }
    }

    /// Runs one step and records its time; a failed step prints the table so far
    /// (with the failure marked) before its error is returned.
    fn run(&mut self, name: &str, f: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        // A report left by an earlier run must not be read as this step's.
        let _ = std::fs::remove_file(&self.junit);
        let t = Instant::now();
        let result = f();
        self.done
            .push((name.to_string(), t.elapsed().as_secs_f64(), result.is_ok()));
        if let Ok(xml) = std::fs::read_to_string(&self.junit) {
            self.tests.extend(junit_times(&xml));
        }
        if let Err(e) = result {
            eprintln!("{}", self.table());
            return Err(e.context(format!("step `{name}` failed")));
        }
        Ok(())
    }

    /// The table of steps and their times, the total, and the slowest tests.
    fn table(&self) -> String {
        self.render(self.start.elapsed().as_secs_f64())
    }

    fn render(&self, total: f64) -> String {
        use std::fmt::Write;
        let mut s = String::from("\nsteps:\n");
        for (name, secs, ok) in &self.done {
            let mark = if *ok { "" } else { "  FAILED" };
            let _ = writeln!(s, "  {secs:>7.1}s  {name}{mark}");
        }
        let _ = writeln!(s, "  {total:>7.1}s  total");
        if let Some((name, _, false)) = self.done.last() {
            let _ = writeln!(s, "stopped at the failed step `{name}`");
        }
        if !self.tests.is_empty() {
            let mut slow = self.tests.clone();
            slow.sort_by(|a, b| b.1.total_cmp(&a.1));
            let _ = writeln!(s, "\nslowest tests (of {} run by nextest):", slow.len());
            for (name, secs) in slow.iter().take(10) {
                let _ = writeln!(s, "  {secs:>7.1}s  {name}");
            }
        }
        s
    }
}

/// Every `<testcase>` of a JUnit report as nextest writes it: `classname name` (the
/// binary and the test) and its seconds.
fn junit_times(xml: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for case in xml.split("<testcase ").skip(1) {
        let tag = case.split('>').next().unwrap_or_default();
        let attr = |key: &str| -> Option<String> {
            let start = tag
                .find(&format!(" {key}=\""))
                .or_else(|| tag.starts_with(&format!("{key}=\"")).then_some(0))?;
            let rest = &tag[start..];
            let rest = &rest[rest.find('"')? + 1..];
            Some(xml_unescape(&rest[..rest.find('"')?]))
        };
        let (Some(name), Some(secs)) = (attr("name"), attr("time")) else {
            continue;
        };
        let Ok(secs) = secs.parse::<f64>() else {
            continue;
        };
        let name = match attr("classname") {
            Some(class) if !class.is_empty() => format!("{class} {name}"),
            _ => name,
        };
        out.push((name, secs));
    }
    out
}

fn xml_unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// What `cargo metadata --no-deps` says about the workspace (run with the cargo
/// that runs us, `CARGO`, as [`cargo`] is).
fn metadata() -> Result<cargo_metadata::Metadata> {
    cargo_metadata::MetadataCommand::new()
        .no_deps()
        .current_dir(root())
        .exec()
        .context("running cargo metadata")
}

/// Cargo's target folder (`CARGO_TARGET_DIR` or the workspace's `target`), as
/// `cargo metadata` reports it.
fn target_dir() -> Result<PathBuf> {
    Ok(metadata()?.target_directory.into_std_path_buf())
}

/// The workspace's packages as `cargo metadata --no-deps` describes them.
fn workspace_packages() -> Result<Vec<Package>> {
    Ok(metadata()?.packages)
}

/// Whether a package may be published: its `publish` is not `false` (which
/// cargo reports as an empty list of registries).
pub(crate) fn published(p: &Package) -> bool {
    !p.publish.as_ref().is_some_and(Vec::is_empty)
}

/// The workspace members that may be published (`publish` not `false`).
fn publishable() -> Result<Vec<String>> {
    let names: Vec<String> = workspace_packages()?
        .into_iter()
        .filter(published)
        .map(|p| p.name)
        .collect();
    if names.is_empty() {
        bail!("no publishable package in the workspace");
    }
    Ok(names)
}

/// Every feature of every workspace crate, as `--features` takes them
/// (`crate/feature,...`), except those that build hwloc from source.
fn all_features() -> Result<String> {
    let mut list = Vec::new();
    for p in workspace_packages()? {
        for f in p.features.keys() {
            if f != "default" && !f.starts_with("vendored") {
                list.push(format!("{}/{f}", p.name));
            }
        }
    }
    Ok(list.join(","))
}

/// Crates with loom models (tests named `loom_*` under `cfg(loom)`).
const LOOM_CRATES: &[&str] = &["hpc-rdma", "hpc-board", "hpc-comm", "hpc-spiking"];

/// Runs every crate's loom models: `RUSTFLAGS="--cfg loom"` switches the modelled
/// primitives to loom's, in a target directory of its own so that the normal build
/// is not invalidated. Each model bounds its own exploration (preemption bound).
/// Optimised (the models run many thousands of interleavings), but without the
/// release profile's thin LTO and debug info, which only lengthen this build.
fn loom<S: AsRef<str>>(crates: &[S]) -> Result<()> {
    let dir = root().join("target/loom");
    for krate in crates {
        let krate = krate.as_ref();
        let out = run_capturing(
            cargo()
                .args(["test", "--release", "--lib", "-p", krate, "loom"])
                .env("RUSTFLAGS", "--cfg loom")
                .env("CARGO_PROFILE_RELEASE_LTO", "false")
                .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
                .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16")
                .env("CARGO_TARGET_DIR", &dir),
        )?;
        // A filter that matches nothing passes too: a renamed model or a lost
        // `cfg(loom)` would silently check nothing.
        match libtest_passed(&out) {
            Some(n) if n > 0 => eprintln!("    {krate}: {n} loom models passed"),
            _ => bail!("{krate}: no loom model ran (no test named `loom*` under cfg(loom))"),
        }
    }
    Ok(())
}

/// Like [`run`], with the command's standard output also returned (it is shown as it
/// comes).
fn run_capturing(cmd: &mut Command) -> Result<String> {
    use std::io::{BufRead, BufReader};
    let shown = format!("{cmd:?}").replace('"', "");
    eprintln!("\n==> {shown}");
    let t = Instant::now();
    let mut child = cmd
        .current_dir(root())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {shown}"))?;
    let mut out = String::new();
    let stdout = child.stdout.take().expect("piped");
    for line in BufReader::new(stdout).lines() {
        let line = line.with_context(|| format!("reading the output of {shown}"))?;
        println!("{line}");
        out.push_str(&line);
        out.push('\n');
    }
    let status = child.wait()?;
    eprintln!("    ({:.1}s)", t.elapsed().as_secs_f64());
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(out)
}

/// The tests libtest ran and passed, summed over its `test result:` lines; `None`
/// without any.
fn libtest_passed(out: &str) -> Option<usize> {
    let counts: Vec<usize> = out
        .lines()
        .filter_map(|l| l.trim().strip_prefix("test result: "))
        .filter_map(|l| {
            l.split(';').find_map(|part| {
                let words: Vec<&str> = part.split_whitespace().collect();
                match words[..] {
                    [.., n, "passed"] => n.parse().ok(),
                    _ => None,
                }
            })
        })
        .collect();
    (!counts.is_empty()).then(|| counts.iter().sum())
}

/// `cargo xtask man`: builds `hpc` and has it write its pages and completions.
fn man(out: &Path) -> Result<()> {
    let out = root().join(out);
    let hpc = readme::build_hpc(&root())?;
    run(Command::new(&hpc)
        .args(["man", "--dir"])
        .arg(out.join("man1")))?;
    std::fs::create_dir_all(out.join("completions"))?;
    for (shell, file) in [("bash", "hpc"), ("zsh", "_hpc"), ("fish", "hpc.fish")] {
        let o = Command::new(&hpc).args(["completions", shell]).output()?;
        if !o.status.success() {
            bail!("hpc completions {shell} failed with {}", o.status);
        }
        std::fs::write(out.join("completions").join(file), o.stdout)?;
    }
    eprintln!(
        "manual pages in {0}/man1 (man -l {0}/man1/hpc.1), completions in {0}/completions",
        out.display()
    );
    Ok(())
}

/// `cargo xtask cluster ARGS`: `hpc cluster ARGS` with the MPI-enabled release
/// build of this workspace (which `up` mounts on the nodes unless `--bin` says
/// otherwise); exits with its status (`exec` passes the command's through).
fn cluster(args: &[String]) -> Result<()> {
    run(cargo().args(["build", "--release", "-p", "hpc-cli", "--features", "mpi"]))?;
    let target = target_dir()?;
    let release = target.join("release");
    let mut hpc = Command::new(release.join("hpc"));
    hpc.arg("cluster").args(args);
    if args.first().map(String::as_str) == Some("up") && !args.iter().any(|a| a == "--bin") {
        hpc.arg("--bin").arg(&release);
    }
    for (var, dir) in [
        (hpc_env::CLUSTER_DIR, "cluster"),
        (hpc_env::CACHE_DIR, "cluster-cache"),
    ] {
        if std::env::var_os(var).is_none() {
            hpc.env(var, target.join(dir));
        }
    }
    let status = hpc
        .status()
        .with_context(|| format!("cannot start {}", release.join("hpc").display()))?;
    std::process::exit(status.code().unwrap_or(1));
}

fn main() -> Result<()> {
    let cli = Cli::try_parse().unwrap_or_else(|e| {
        hpc_io::message::usage_exit(
            "cargo xtask",
            &e.render().to_string(),
            e.use_stderr(),
            e.exit_code(),
        )
    });
    match cli.task {
        Task::Setup => setup::all(),
        Task::Cluster { args } => cluster(&args),
        Task::Image(args) => {
            // This workspace's tests also need Slurm, munge and PMIx besides the
            // image tools that hpc-image installs.
            if args.setup_tools {
                setup::apt(&setup::container_packages())?;
                setup::container_runtimes()?;
            }
            if let Err(e) = hpc_image::run(*args) {
                eprintln!("error: {}", hpc_io::message::chain(e.as_ref()));
                std::process::exit(hpc_image::exit_status(&e).into());
            }
            Ok(())
        }
        Task::Man { out } => man(&out),
        Task::Modcycles => modcycles::run(&root()),
        Task::Loom { crates } if crates.is_empty() => loom(LOOM_CRATES),
        Task::Loom { crates } => loom(&crates),
        Task::EnvTable { check } => env_table(check),
        Task::CrateGraph { check } => crategraph::run(&root(), &workspace_packages()?, check),
        Task::Readme { check } => readme::run(&root(), &workspace_packages()?, check),
        Task::Publish { execute, no_verify } => publish(execute, no_verify, false),
        Task::Fuzz { seconds, targets } => fuzz::run(&root(), seconds, &targets),
        Task::HwlocSource { args } => hwloc::run_seeding(|| {
            let mut c = cargo();
            c.args(&args);
            c
        }),
        Task::Demo { no_setup } => {
            if !no_setup {
                setup::all()?;
            }
            demo()
        }
        Task::Test { no_setup, quick } => {
            if !no_setup {
                setup::all()?;
            }
            test(quick)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtest_summaries_are_summed_and_their_absence_seen() {
        let out = "running 3 tests\ntest a::loom_x ... ok\n\n\
                   test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 41 filtered out; finished in 2.1s\n\
                   test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.1s\n";
        assert_eq!(libtest_passed(out), Some(5));
        let none = "running 0 tests\n\n\
                    test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 44 filtered out; finished in 0.00s\n";
        assert_eq!(libtest_passed(none), Some(0));
        assert_eq!(libtest_passed("error: could not compile\n"), None);
    }

    #[test]
    fn junit_test_cases_are_read_with_their_times() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="3" failures="1" errors="0" uuid="x" timestamp="t" time="9.5">
    <testsuite name="hpc-rdma::conformance" tests="2" disabled="0" errors="0" failures="1">
        <testcase name="a_&quot;quoted&quot;_test" classname="hpc-rdma::conformance" timestamp="t" time="7.25">
            <failure type="test failure">boom</failure>
        </testcase>
        <testcase name="quick" classname="hpc-rdma::conformance" timestamp="t" time="0.004">
        </testcase>
    </testsuite>
    <testsuite name="xtask" tests="1"><testcase name="alone" classname="" time="1.5"/></testsuite>
</testsuites>"#;
        assert_eq!(
            junit_times(xml),
            vec![
                ("hpc-rdma::conformance a_\"quoted\"_test".to_string(), 7.25),
                ("hpc-rdma::conformance quick".to_string(), 0.004),
                ("alone".to_string(), 1.5),
            ]
        );
        assert!(junit_times("not xml <testcase broken").is_empty());
    }

    #[test]
    fn the_step_table_has_the_total_the_failed_step_and_the_slowest_tests() {
        let mut steps = Steps::new(PathBuf::from("/nonexistent/junit.xml"));
        steps.done = vec![
            ("fmt".into(), 1.0, true),
            ("tests, all features".into(), 60.0, false),
        ];
        steps.tests = (0..12).map(|i| (format!("t{i}"), i as f64)).collect();
        let t = steps.render(61.5);
        assert!(t.contains("    1.0s  fmt\n"), "{t}");
        assert!(t.contains("   60.0s  tests, all features  FAILED\n"), "{t}");
        assert!(t.contains("   61.5s  total\n"), "{t}");
        assert!(
            t.contains("stopped at the failed step `tests, all features`"),
            "{t}"
        );
        assert!(t.contains("slowest tests (of 12 run by nextest)"), "{t}");
        // The 10 slowest, slowest first: t11 .. t2.
        assert!(t.find("t11").unwrap() < t.find("t10").unwrap(), "{t}");
        assert!(t.contains("  t2\n") && !t.contains("  t1\n"), "{t}");
    }

    #[test]
    fn a_failed_step_is_recorded_and_its_error_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let junit = dir.path().join("junit.xml");
        let mut steps = Steps::new(junit.clone());
        steps.run("ok", &mut || Ok(())).unwrap();
        // A stale report of an earlier run is not counted as this step's.
        std::fs::write(&junit, r#"<testcase name="old" classname="c" time="9"/>"#).unwrap();
        let e = steps
            .run("broken", &mut || bail!("exit status 1"))
            .unwrap_err();
        assert!(
            format!("{e:#}").contains("step `broken` failed: exit status 1"),
            "{e:#}"
        );
        assert_eq!(steps.done.len(), 2);
        assert!(steps.done[0].2 && !steps.done[1].2);
        assert!(steps.tests.is_empty(), "{:?}", steps.tests);
        // A report the step writes is read.
        steps
            .run("nextest", &mut || {
                std::fs::write(&junit, r#"<testcase name="new" classname="c" time="2.5"/>"#)?;
                Ok(())
            })
            .unwrap();
        assert_eq!(steps.tests, vec![("c new".to_string(), 2.5)]);
    }
}
