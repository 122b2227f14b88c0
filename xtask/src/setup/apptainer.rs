//! Apptainer for the container tests, the benchmarks and the generated scripts.
//!
//! Where the distribution packages Apptainer (`apt-cache policy apptainer` has a
//! candidate), the package is installed. Debian 12 has none, and Apptainer's Debian
//! package needs a newer C library, so instead a Debian root file system with
//! Apptainer is made with `mmdebstrap` and entered by a thin `apptainer` wrapper
//! (`containers/apptainer/apptainer-wrapper.sh`): a private mount namespace whose
//! root holds that tree's `/usr`, `/etc` and `/var` and the host's data folders at
//! their own paths. The tree is cached under `~/.cache/hpc-rs/apptainer/<key>/`
//! (`HPC_APPTAINER_CACHE` overrides the folder), where the key is a hash of the
//! recipe (suite, packages, configuration edits), so a changed recipe makes a new
//! tree and an unchanged one costs nothing; `/usr/local/bin/apptainer` links to the
//! wrapper.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

/// Debian suite the tree is made from: the first one that packages Apptainer.
pub const SUITE: &str = "sid";

/// Packages of the tree (`squashfs-tools`, `uidmap` come as Apptainer's dependencies).
pub const PACKAGES: &[&str] = &["apptainer", "squashfs-tools"];

/// Edits of `/etc/apptainer/apptainer.conf` in the tree, as (setting, value).
/// Root in a user namespace-less mount namespace keeps only the capabilities of the
/// container's file: Apptainer's default (`full`) fails here to drop the bounding set.
pub const CONF_EDITS: &[(&str, &str)] = &[("root default capabilities", "file")];

/// Bump when the way the tree is made changes in a way the other inputs do not show.
const RECIPE_VERSION: u32 = 1;

/// The wrapper that enters the tree.
pub const WRAPPER: &str = include_str!("../../../containers/apptainer/apptainer-wrapper.sh");

/// Where `apptainer` is linked for every user and for Slurm's tasks.
pub const LINK: &str = "/usr/local/bin/apptainer";

/// The cache key of the recipe.
pub fn key() -> String {
    let mut h = Sha256::new();
    h.update(format!("suite={SUITE}\n"));
    for p in PACKAGES {
        h.update(format!("package={p}\n"));
    }
    for (k, v) in CONF_EDITS {
        h.update(format!("conf={k}={v}\n"));
    }
    h.update(format!("recipe={RECIPE_VERSION}\n"));
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("{SUITE}-{}", &hex[..16])
}

/// The cache folder holding one subfolder per recipe key.
pub fn cache_root() -> PathBuf {
    if let Some(d) = std::env::var_os(hpc_env::APPTAINER_CACHE) {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/var/cache"));
    base.join("hpc-rs").join("apptainer")
}

/// The folder of the current recipe: `rootfs/`, `bin/apptainer`, `mnt/`, `ready`.
pub fn dir() -> PathBuf {
    cache_root().join(key())
}

/// Rewrites `setting = value` lines of an apptainer.conf text; a setting that is
/// missing is appended.
pub fn edit_conf(text: &str, edits: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    let mut done = vec![false; edits.len()];
    for line in text.lines() {
        let key = line.split('=').next().unwrap_or("").trim();
        match edits
            .iter()
            .position(|(k, _)| !line.starts_with('#') && *k == key)
        {
            Some(i) => {
                out.push_str(&format!("{} = {}\n", edits[i].0, edits[i].1));
                done[i] = true;
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    for (i, (k, v)) in edits.iter().enumerate() {
        if !done[i] {
            out.push_str(&format!("{k} = {v}\n"));
        }
    }
    out
}

/// Whether the distribution's package manager offers an `apptainer` package.
fn packaged() -> bool {
    Command::new("apt-cache")
        .args(["policy", "apptainer"])
        .output()
        .map(|o| {
            let t = String::from_utf8_lossy(&o.stdout);
            t.lines().any(|l| {
                l.trim()
                    .strip_prefix("Candidate:")
                    .is_some_and(|c| c.trim() != "(none)")
            })
        })
        .unwrap_or(false)
}

/// Whether `apptainer --version` runs.
fn works(program: &Path) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .map(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("apptainer"))
        .unwrap_or(false)
}

fn is_our_link(link: &Path) -> bool {
    fs::read_link(link).is_ok_and(|t| t.starts_with(cache_root()))
}

/// Makes the tree (when the recipe's is not cached yet), writes the wrapper and
/// links it at [`LINK`]. Prints what it did and how long it took.
pub fn ensure() -> Result<()> {
    let link = Path::new(LINK);
    if crate::setup::has("apptainer") && !is_our_link(link) {
        // A real installation (a package, a site build): use it.
        return Ok(());
    }
    if !crate::setup::is_root() {
        bail!(
            "Apptainer is not installed and setting it up needs root (mmdebstrap, mount namespaces): \
             run `cargo xtask setup` as root"
        );
    }
    if packaged() {
        eprintln!("==> apptainer: installing the distribution's package");
        crate::setup::apt(&["apptainer"])?;
        return Ok(());
    }
    crate::setup::apt(&["mmdebstrap"])?;
    let d = dir();
    let rootfs = d.join("rootfs");
    if !d.join("ready").exists() {
        make_tree(&d)?;
    }
    let bin = d.join("bin");
    fs::create_dir_all(&bin)?;
    fs::create_dir_all(d.join("mnt"))?;
    let wrapper = bin.join("apptainer");
    if fs::read_to_string(&wrapper).ok().as_deref() != Some(WRAPPER) {
        fs::write(&wrapper, WRAPPER).with_context(|| format!("writing {}", wrapper.display()))?;
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755))?;
    }
    if fs::read_link(link).ok().as_deref() != Some(wrapper.as_path()) {
        if link.symlink_metadata().is_ok() {
            fs::remove_file(link).with_context(|| format!("replacing {LINK}"))?;
        }
        std::os::unix::fs::symlink(&wrapper, link)
            .with_context(|| format!("linking {LINK} -> {}", wrapper.display()))?;
    }
    if !works(link) {
        bail!(
            "{LINK} (the wrapper around {}) does not run `apptainer --version`; \
             remove {} to make the tree again",
            rootfs.display(),
            d.display()
        );
    }
    prune_other_keys(&d);
    Ok(())
}

fn make_tree(d: &Path) -> Result<()> {
    let t = Instant::now();
    if d.exists() {
        fs::remove_dir_all(d)
            .with_context(|| format!("removing the unfinished {}", d.display()))?;
    }
    fs::create_dir_all(d)?;
    let part = d.join("rootfs.part");
    eprintln!(
        "==> apptainer: making a Debian {SUITE} root file system with [{}] in {} (about 1-2 minutes, once)",
        PACKAGES.join(" "),
        d.display()
    );
    crate::run(
        Command::new("mmdebstrap")
            .args(["--quiet", "--variant=minbase"])
            .arg(format!("--include={}", PACKAGES.join(",")))
            // sid's Release files expire within days; an old mirror snapshot is fine.
            .arg("--aptopt=Acquire::Check-Valid-Until \"false\"")
            .arg(SUITE)
            .arg(&part),
    )
    .context("mmdebstrap could not make the Apptainer tree (is the Debian mirror reachable?)")?;
    let conf = part.join("etc/apptainer/apptainer.conf");
    let text = fs::read_to_string(&conf).with_context(|| format!("reading {}", conf.display()))?;
    fs::write(&conf, edit_conf(&text, CONF_EDITS))?;
    // Mount points for the host's files that the wrapper binds over the tree's.
    for f in ["etc/hosts", "etc/resolv.conf", "etc/hostname"] {
        let p = part.join(f);
        if p.symlink_metadata().is_err() {
            fs::write(&p, "")?;
        }
    }
    for dir in ["var/tmp", "var/spool"] {
        fs::create_dir_all(part.join(dir))?;
    }
    fs::rename(&part, d.join("rootfs"))?;
    let secs = t.elapsed().as_secs_f64();
    fs::write(
        d.join("ready"),
        format!(
            "suite={SUITE}\npackages={}\nconf={:?}\nmade_in_s={secs:.0}\n",
            PACKAGES.join(","),
            CONF_EDITS
        ),
    )?;
    eprintln!("==> apptainer: root file system ready in {secs:.0}s");
    Ok(())
}

/// Removes trees of older recipes (a few hundred MB each).
fn prune_other_keys(current: &Path) {
    let Ok(rd) = fs::read_dir(cache_root()) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p != current && p.join("ready").exists() {
            eprintln!(
                "==> apptainer: removing the tree of an older recipe {}",
                p.display()
            );
            let _ = fs::remove_dir_all(&p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conf_edits_replace_and_append() {
        let text = "# root default capabilities = full\nroot default capabilities = full\nmount proc = yes\n";
        let out = edit_conf(text, &[("root default capabilities", "file"), ("x", "y")]);
        assert_eq!(
            out,
            "# root default capabilities = full\nroot default capabilities = file\nmount proc = yes\nx = y\n"
        );
    }

    #[test]
    fn key_names_the_suite_and_changes_with_the_recipe() {
        let k = key();
        assert!(k.starts_with("sid-") && k.len() == 4 + 16, "{k}");
        assert_eq!(k, key());
    }

    #[test]
    fn wrapper_rewrites_binds_of_system_folders() {
        // The wrapper's rewrite rule, driven through bash with its functions only.
        let funcs: String = WRAPPER
            .split("\nargs=()")
            .next()
            .and_then(|s| s.split("# The folders").nth(1))
            .map(|s| format!("# The folders{s}"))
            .expect("wrapper has the rewrite functions");
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "{funcs}\nrewrite_list /usr/lib/libmpi.so.40,/etc/openmpi:/etc/openmpi:ro,/tmp/x,/work/a:/b,rel"
            ))
            .output()
            .expect("bash runs");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "/.host/usr/lib/libmpi.so.40:/usr/lib/libmpi.so.40,/.host/etc/openmpi:/etc/openmpi:ro,/tmp/x,/work/a:/b,rel"
        );
    }
}
