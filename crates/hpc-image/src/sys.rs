//! Running programs: the tools the image builder drives (cargo, ldd, dpkg,
//! mmdebstrap, apptainer) and installing missing ones on Debian/Ubuntu.

use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

/// Debian packages of the container tool chain (`--setup-tools`): `mmdebstrap` for
/// the base file system and the engines and tools that load, inspect and run the
/// images.
pub const TOOL_PACKAGES: &[&str] = &[
    "mmdebstrap",
    "podman",
    "skopeo",
    "umoci",
    "runc",
    "uidmap",
    "fuse-overlayfs",
];

/// The cargo that runs us (`CARGO`), else `cargo` from the PATH.
pub fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Runs a command, echoing it, failing on a non-zero exit.
pub fn run(cmd: &mut Command) -> Result<()> {
    run_echoed(cmd, None)
}

/// [`run`] in the folder `dir` (which the echo leaves out).
pub fn run_in(dir: &std::path::Path, cmd: &mut Command) -> Result<()> {
    run_echoed(cmd, Some(dir))
}

fn run_echoed(cmd: &mut Command, dir: Option<&std::path::Path>) -> Result<()> {
    let shown = format!("{cmd:?}").replace('"', "");
    eprintln!("\n==> {shown}");
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
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

/// The path of a program on the PATH.
pub fn which(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
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

/// Whether this process runs as root (its effective user).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Installs missing Debian packages (as root), or says exactly what to run: the
/// one installer of the workspace (`cargo xtask setup` uses it too).
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

/// An exclusive lock on a directory (an `flock` on `DIR/.lock`), held until dropped.
pub struct DirLock {
    _file: std::fs::File,
}

/// Takes the exclusive lock of `dir` (created if missing), waiting for another
/// holder and saying so.
pub fn lock_dir(dir: &std::path::Path) -> Result<DirLock> {
    use rustix::fs::{flock, FlockOperation};
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        eprintln!(
            "    waiting for {}: another image build uses this cache",
            path.display()
        );
        // Blocks until the other holder closes its descriptor.
        flock(&file, FlockOperation::LockExclusive)
            .map_err(std::io::Error::from)
            .with_context(|| format!("locking {}", path.display()))?;
    }
    Ok(DirLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_waits_for_the_first() {
        let dir = std::env::temp_dir().join(format!("hpc-image-lock-{}", std::process::id()));
        let first = lock_dir(&dir).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let d = dir.clone();
        let t = std::thread::spawn(move || {
            let _second = lock_dir(&d).unwrap();
            tx.send(()).unwrap();
        });
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(200))
            .is_err());
        drop(first);
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        t.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn which_finds_sh() {
        assert!(which("sh").is_some());
        assert!(which("no-such-program-hpc-image").is_none());
    }
}
