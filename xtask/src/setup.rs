//! Installs what the project needs on a fresh Debian/Ubuntu machine.

use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

mod apptainer;

/// Debian packages: compilers and the C libraries the crates bind (MPI, hwloc, verbs,
/// libfabric), the MPI launchers used by the tests, and the tools the test suite
/// drives.
pub const APT_PACKAGES: &[&str] = &[
    "build-essential",
    "pkg-config",
    "ca-certificates",
    "cmake",
    "clang",
    "libclang-dev",
    "libopenmpi-dev",
    "openmpi-bin",
    "libhwloc-dev",
    "hwloc",
    // hwlocality's `vendored` build of hwloc (in every --all-features build).
    "autoconf",
    "automake",
    "libtool",
    "libudev-dev",
    "libibverbs-dev",
    "libnl-3-dev",
    "libnl-route-3-dev",
    // The transport's `ofi` backend: headers to build, providers (shm, tcp;ofi_rxm)
    // and fi_info/fi_pingpong for its tests and benchmark.
    "libfabric-dev",
    "libfabric-bin",
    "iproute2",
    "procps",
    "python3",
    // The spike tools' summaries, plots and SONATA export (and their tests, which
    // skip those cases without it).
    "python3-numpy",
    // The report test opens every run's report.html in headless Chromium (about
    // 90 s and 650 MB on a fresh Debian 12 with the packages above).
    "chromium",
];

/// Debian packages for the container tests and `cargo xtask image` beyond hpc-image's
/// [`TOOL_PACKAGES`] (the engines and tools that read the images, `mmdebstrap` for the
/// base file system): a single-node Slurm with munge and PMIx.
pub const CLUSTER_PACKAGES: &[&str] = &["slurm-wlm", "munge", "libpmix2", "openmpi-bin"];

/// Every Debian package of the container tests and `cargo xtask image`: hpc-image's
/// tool chain and [`CLUSTER_PACKAGES`], installed in one go.
pub fn container_packages() -> Vec<&'static str> {
    TOOL_PACKAGES
        .iter()
        .chain(CLUSTER_PACKAGES)
        .copied()
        .collect()
}

/// mdbook version the book is built with.
pub const MDBOOK_VERSION: &str = "0.5.4";

// The Debian installer and its checks are hpc-image's (`cargo xtask image
// --setup-tools` installs with it too): one copy for both commands.
pub use hpc_image::sys::{apt, has, is_root, TOOL_PACKAGES};

fn rust_components() -> Result<()> {
    if !has("rustup") {
        return Ok(());
    }
    let out = Command::new("rustup")
        .args(["component", "list", "--installed"])
        .output()?;
    let installed = String::from_utf8_lossy(&out.stdout).to_string();
    for c in ["rustfmt", "clippy"] {
        if !installed.lines().any(|l| l.starts_with(c)) {
            crate::run(Command::new("rustup").args(["component", "add", c]))?;
        }
    }
    Ok(())
}

fn mdbook() -> Result<()> {
    // The server and file watcher are not needed to build and test the book; leaving
    // them out halves the build.
    let extra = ["--no-default-features", "--features", "search"];
    pinned(
        Command::new("mdbook").arg("--version"),
        "mdbook",
        MDBOOK_VERSION,
        &extra,
    )
}

/// `cargo install`s `krate` at `version` (with `extra` flags) unless `probe`, the
/// tool's version command, already prints that version.
fn pinned(probe: &mut Command, krate: &str, version: &str, extra: &[&str]) -> Result<()> {
    let ok = probe
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains(version))
        .unwrap_or(false);
    if ok {
        return Ok(());
    }
    crate::run(
        crate::cargo()
            .args(["install", krate, "--locked", "--version", version])
            .args(extra),
    )
}

/// cargo-fuzz version the fuzz targets are run with.
pub const CARGO_FUZZ_VERSION: &str = "0.13.2";

/// cargo-fuzz for `cargo xtask fuzz` (it runs on the nightly toolchain).
fn cargo_fuzz() -> Result<()> {
    let probe = ["fuzz", "--version"];
    pinned(
        Command::new("cargo").args(probe),
        "cargo-fuzz",
        CARGO_FUZZ_VERSION,
        &[],
    )
}

/// Whether `cargo SUBCOMMAND --version` runs (a cargo tool such as `nextest`).
pub fn cargo_has(subcommand: &str) -> bool {
    has_with(&crate::cargo, subcommand)
}

fn has_with(cargo: &dyn Fn() -> Command, subcommand: &str) -> bool {
    cargo()
        .args([subcommand, "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Installs a cargo tool (run as `cargo SUBCOMMAND`) with `cargo install INSTALL...`
/// unless it is already there, timed; an error if it cannot be installed or is still
/// not found afterwards (cargo's bin folder not on the PATH).
pub fn cargo_tool(subcommand: &str, install: &[&str]) -> Result<()> {
    tool_with(&crate::cargo, subcommand, install)
}

/// [`cargo_tool`] with the `cargo` commands made by `cargo` (the tests give theirs
/// a PATH of their own).
fn tool_with(cargo: &dyn Fn() -> Command, subcommand: &str, install: &[&str]) -> Result<()> {
    if has_with(cargo, subcommand) {
        return Ok(());
    }
    let shown = install.join(" ");
    let t = std::time::Instant::now();
    crate::run(cargo().arg("install").args(install)).with_context(|| {
        format!("`cargo {subcommand}` is missing and `cargo install {shown}` failed")
    })?;
    if !has_with(cargo, subcommand) {
        bail!(
            "`cargo install {shown}` finished but `cargo {subcommand}` is still not found: \
             is cargo's bin folder (~/.cargo/bin) on the PATH?"
        );
    }
    eprintln!(
        "==> cargo {subcommand} installed ({:.0}s)",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// cargo-nextest, which runs the tests with the per-test timeouts, retries and test
/// groups of `.config/nextest.toml` and writes the JUnit report whose slowest tests
/// `cargo xtask test` prints. Its build takes a while: 28 minutes on a busy
/// 2-core machine (`cargo install cargo-nextest --locked`, version 0.9.151).
pub fn nextest() -> Result<()> {
    cargo_tool("nextest", &["cargo-nextest", "--locked"])
}

/// Container runtimes beyond the Debian packages: Apptainer (the distribution's
/// package where there is one, else a Debian root file system behind a wrapper, see
/// `apptainer.rs`), timed so that CI's log shows what it costs.
pub fn container_runtimes() -> Result<()> {
    let t = std::time::Instant::now();
    apptainer::ensure()?;
    eprintln!("==> apptainer ready ({:.1}s)", t.elapsed().as_secs_f64());
    Ok(())
}

/// Everything `demo` and `test` need.
pub fn all() -> Result<()> {
    apt(APT_PACKAGES)?;
    // The slow system tests (switched on by .ci/run) drive podman, Slurm and
    // mmdebstrap-made file systems.
    let on = |k: &str| std::env::var(k).ok().as_deref() == Some("1");
    if on(hpc_env::TEST_CONTAINERS) || on(hpc_env::TEST_CLUSTER) {
        apt(&container_packages())?;
        container_runtimes()?;
    }
    rust_components()?;
    nextest()?;
    mdbook()?;
    cargo_fuzz()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_tools_are_found_by_their_subcommand() {
        // `cargo fmt` is there (set-up adds rustfmt); a made-up subcommand never is.
        assert!(cargo_has("fmt"));
        assert!(!cargo_has("no-such-tool-of-hpc-rs"));
    }

    #[test]
    fn a_missing_tool_is_installed_and_a_failed_install_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // An installed tool is left alone: nothing is built.
        cargo_tool("fmt", &["--path", "/nonexistent"]).unwrap();
        // A failed install (here: no crate at the path, no network needed) is an
        // error that names the missing tool, not a skipped step.
        let e = cargo_tool("hpc-xtask-probe", &["--path", "/nonexistent"]).unwrap_err();
        assert!(
            format!("{e:#}").contains("`cargo hpc-xtask-probe` is missing"),
            "{e:#}"
        );
        // A missing tool is installed (a local crate without dependencies, into a
        // folder of its own on the PATH of the cargo commands) and then found.
        let krate = d.join("probe");
        std::fs::create_dir_all(krate.join("src")).unwrap();
        std::fs::write(
            krate.join("Cargo.toml"),
            "[package]\nname = \"cargo-hpc-xtask-probe\"\nversion = \"0.1.0\"\n\
             edition = \"2021\"\n\n[workspace]\n",
        )
        .unwrap();
        std::fs::write(krate.join("src/main.rs"), "fn main() {}\n").unwrap();
        let root = d.join("root");
        let path = format!(
            "{}:{}",
            root.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let cargo = move || {
            let mut c = crate::cargo();
            c.env("PATH", &path);
            c
        };
        assert!(!has_with(&cargo, "hpc-xtask-probe"));
        let krate = krate.display().to_string();
        let root = root.display().to_string();
        // A target folder of its own: the one of this test may be locked by cargo.
        let target = d.join("target").display().to_string();
        tool_with(
            &cargo,
            "hpc-xtask-probe",
            &["--path", &krate, "--root", &root, "--target-dir", &target],
        )
        .unwrap();
        assert!(has_with(&cargo, "hpc-xtask-probe"));
        // Found on that PATH only: the machine's own is untouched.
        assert!(!cargo_has("hpc-xtask-probe"));
    }
}
