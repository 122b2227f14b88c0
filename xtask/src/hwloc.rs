//! hwloc's source for hwlocality's `vendored` build where its download host is out
//! of reach.
//!
//! `hpc-topology`'s `vendored` feature (`cargo xtask test` builds it in a step of its own) lets
//! hwlocality-sys's build script download hwloc's release tarball from open-mpi.org
//! into its `OUT_DIR` and build it with autotools; a directory already extracted
//! there is reused. Machines that cannot reach open-mpi.org (CI's among them) get
//! Debian's hwloc source instead: `apt-get source hwloc` (signed, through apt's own
//! client, with a private sources list so that the system's apt set-up is left
//! alone) is extracted into every hwlocality-sys `OUT_DIR` whose build script failed,
//! under the directory name the script looks for, and the cargo command is run again.
//! The autotools build, static linking and the tests then run exactly as with the
//! download; only the hwloc release differs (the distribution's instead of the one
//! hwlocality pins), and this module says so when it does it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The directory hwlocality-sys 0.7 extracts its download into (`OUT_DIR/<this>`).
pub const EXPECTED_DIR: &str = "hwloc-2.15.0";

/// Runs a cargo command; when it fails because a vendored hwloc build could not
/// download its source, places Debian's source where the build looks and runs the
/// command again.
pub fn run_seeding(make: impl Fn() -> Command) -> Result<()> {
    for _ in 0..3 {
        match crate::run(&mut make()) {
            Ok(()) => return Ok(()),
            Err(e) => {
                let failed = failed_runs(&crate::root().join("target"));
                if failed.is_empty() {
                    return Err(e);
                }
                let tarball = debian_source()?;
                for out in &failed {
                    seed(&tarball, out)?;
                }
            }
        }
    }
    bail!("the vendored hwloc build still fails after placing its source")
}

/// `OUT_DIR`s of hwlocality-sys build scripts that ran and failed (no `output` file
/// beside them) and have no source yet.
pub fn failed_runs(target: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(profiles) = fs::read_dir(target) else {
        return found;
    };
    for p in profiles.flatten() {
        let Ok(builds) = fs::read_dir(p.path().join("build")) else {
            continue;
        };
        for b in builds.flatten() {
            let dir = b.path();
            let name = b.file_name().to_string_lossy().to_string();
            if name.starts_with("hwlocality-sys-")
                && dir.join("out").is_dir()
                && !dir.join("output").exists()
                && !dir.join("out").join(EXPECTED_DIR).exists()
            {
                found.push(dir.join("out"));
            }
        }
    }
    found.sort();
    found
}

/// Extracts the tarball into `out` under [`EXPECTED_DIR`].
fn seed(tarball: &Path, out: &Path) -> Result<()> {
    let tmp = out.join("debian-src.tmp");
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp)?;
    crate::run(
        Command::new("tar")
            .arg("xf")
            .arg(tarball)
            .arg("-C")
            .arg(&tmp),
    )?;
    let top = fs::read_dir(&tmp)?
        .flatten()
        .find(|e| e.path().is_dir())
        .context("the hwloc tarball has no top directory")?;
    fs::rename(top.path(), out.join(EXPECTED_DIR))?;
    fs::remove_dir_all(&tmp)?;
    eprintln!(
        "note: open-mpi.org is out of reach: hwlocality's vendored build uses {} in {}",
        tarball
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default(),
        out.display()
    );
    Ok(())
}

/// Debian's hwloc source tarball (`hwloc_X.Y.Z.orig.tar.*`), fetched once into
/// `target/hwloc-src/` with `apt-get source`.
pub fn debian_source() -> Result<PathBuf> {
    let dir = crate::root().join("target/hwloc-src");
    if let Some(t) = find_orig(&dir.join("dl")) {
        return Ok(t);
    }
    let release = fs::read_to_string("/etc/os-release").unwrap_or_default();
    let field = |k: &str| {
        release
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .map(|v| v.trim_matches('"').to_string())
    };
    let (Some("debian"), Some(codename)) = (field("ID").as_deref(), field("VERSION_CODENAME"))
    else {
        bail!(
            "hwlocality's vendored build cannot download hwloc's source and this is not \
             Debian (apt-get source hwloc): build on a machine that reaches open-mpi.org, \
             or without the `vendored` feature"
        );
    };
    for d in ["lists/partial", "cache/archives/partial", "dl"] {
        fs::create_dir_all(dir.join(d))?;
    }
    let list = dir.join("sources.list");
    fs::write(
        &list,
        format!(
            "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] \
             http://deb.debian.org/debian {codename} main\n"
        ),
    )?;
    let opts = |c: &mut Command| {
        c.arg("-o")
            .arg(format!("Dir::Etc::SourceList={}", list.display()))
            .arg("-o")
            .arg("Dir::Etc::SourceParts=/nonexistent")
            .arg("-o")
            .arg(format!("Dir::State::Lists={}", dir.join("lists").display()))
            .arg("-o")
            .arg(format!("Dir::Cache={}", dir.join("cache").display()))
            .arg("-o")
            .arg("Debug::NoLocking=1")
            .arg("-q");
    };
    let mut update = Command::new("apt-get");
    opts(&mut update);
    crate::run(update.arg("update"))?;
    let mut source = Command::new("apt-get");
    opts(&mut source);
    eprintln!(
        "\n==> apt-get source --download-only hwloc (into {})",
        dir.join("dl").display()
    );
    let st = source
        .args(["source", "--download-only", "hwloc"])
        .current_dir(dir.join("dl"))
        .status()
        .context("cannot run apt-get")?;
    if !st.success() {
        bail!("apt-get source hwloc failed with {st}");
    }
    find_orig(&dir.join("dl")).context("apt-get source hwloc left no hwloc_*.orig.tar.* file")
}

fn find_orig(dir: &Path) -> Option<PathBuf> {
    fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy())
                .is_some_and(|n| n.starts_with("hwloc_") && n.contains(".orig.tar."))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_failed_runs_without_source_are_seeded() {
        let t = std::env::temp_dir().join(format!("xtask-hwloc-{}", std::process::id()));
        let b = t.join("debug/build");
        for (name, output, source) in [
            ("hwlocality-sys-aaa", false, false), // failed: seed
            ("hwlocality-sys-bbb", true, false),  // succeeded (system hwloc)
            ("hwlocality-sys-ccc", false, true),  // already seeded
            ("other-sys-ddd", false, false),      // another crate
        ] {
            fs::create_dir_all(b.join(name).join("out")).unwrap();
            if output {
                fs::write(b.join(name).join("output"), "").unwrap();
            }
            if source {
                fs::create_dir_all(b.join(name).join("out").join(EXPECTED_DIR)).unwrap();
            }
        }
        assert_eq!(
            failed_runs(&t),
            vec![b.join("hwlocality-sys-aaa").join("out")]
        );
        let _ = fs::remove_dir_all(&t);
    }
}
