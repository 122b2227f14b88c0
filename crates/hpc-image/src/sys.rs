//! Running programs: the tools the image builder drives (cargo, ldd, dpkg,
//! mmdebstrap, apptainer) and installing missing ones on Debian/Ubuntu.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

/// Debian packages of the container tool chain: the engines and tools that read the
/// images, `mmdebstrap` for the base file system, and a single-node Slurm with munge
/// and PMIx to run the batch scripts.
pub const CONTAINER_PACKAGES: &[&str] = &[
    "podman",
    "skopeo",
    "umoci",
    "runc",
    "uidmap",
    "fuse-overlayfs",
    "mmdebstrap",
    "slurm-wlm",
    "munge",
    "libpmix2",
    "openmpi-bin",
];

/// The directory `cargo metadata` is run in: the current one (cargo finds the
/// workspace above it).
pub fn root() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."))
}

/// The cargo that runs us (`CARGO`), else `cargo` from the PATH.
pub fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Runs a command, echoing it, failing on a non-zero exit.
pub fn run(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}").replace('"', "");
    eprintln!("\n==> {shown}");
    let t = Instant::now();
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {shown}"))?;
    eprintln!("    ({:.1}s)", t.elapsed().as_secs_f64());
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

/// Whether a program is on the PATH.
pub fn has(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn dpkg_installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Installs missing Debian packages (as root), or says exactly what to run.
pub fn apt(packages: &[&str]) -> Result<()> {
    if !has("dpkg-query") {
        eprintln!(
            "note: not a Debian/Ubuntu system; make sure these are installed: {}",
            packages.join(" ")
        );
        return Ok(());
    }
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| !dpkg_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let cmd = format!(
        "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {}",
        missing.join(" ")
    );
    if !is_root() {
        bail!(
            "missing system packages: {}\nrun as root:\n  sudo sh -c '{cmd}'",
            missing.join(" ")
        );
    }
    eprintln!("==> installing {}", missing.join(" "));
    run(Command::new("sh").args(["-c", &cmd]))
}
