//! The folders of the system, where no program of hpc-rs writes an output
//! folder of its own (`cargo xtask image --out`, `--cache`, `hpc new`): `/`
//! and the folders the system's files live in.

use std::path::{Path, PathBuf};

/// Folders of the system whose whole tree is refused, with the subtrees of
/// theirs that are the users' (strictly below them).
const SYSTEM_TREES: &[(&str, &[&str])] = &[
    ("/bin", &[]),
    ("/boot", &[]),
    ("/dev", &[]),
    ("/etc", &[]),
    ("/lib", &[]),
    ("/lib32", &[]),
    ("/lib64", &[]),
    ("/libx32", &[]),
    ("/proc", &[]),
    ("/run", &["/run/user"]),
    ("/sbin", &[]),
    ("/sys", &[]),
    ("/usr", &[]),
    ("/var", &["/var/tmp"]),
];

/// Folders of the system refused themselves (a folder below them is a user's or
/// a site's own).
const SYSTEM_FOLDERS: &[&str] = &["/", "/home", "/media", "/mnt", "/opt", "/srv", "/tmp"];

/// `dir` (made or not) as resolved: the nearest folder of it that exists,
/// resolved (its links followed, `..` taken), and the rest put back by name
/// (`..` of a folder not made yet included); `None` where not even `/` can be
/// resolved. Two folders compared so (an output and a cache inside it) are
/// compared as the system will find them.
///
/// ```
/// use std::path::Path;
/// let r = hpc_io::system::resolved(Path::new("/nonexistent/a/../b")).unwrap();
/// assert_eq!(r, Path::new("/nonexistent/b"));
/// ```
pub fn resolved(dir: &Path) -> Option<PathBuf> {
    let abs = std::path::absolute(dir).ok()?;
    use std::path::Component;
    let comps: Vec<Component> = abs.components().collect();
    let mut n = comps.len();
    let mut path = loop {
        let prefix: PathBuf = comps[..n].iter().collect();
        if let Ok(r) = std::fs::canonicalize(&prefix) {
            break r;
        }
        n = n.checked_sub(1).filter(|&n| n > 0)?;
    };
    for c in &comps[n..] {
        match c {
            Component::ParentDir => {
                path.pop();
            }
            Component::Normal(name) => path.push(name),
            _ => {}
        }
    }
    Some(path)
}

/// Why the folder `dir` (made or not) is a folder of the system, where a
/// program's output folder (an image's layout and scripts, a cache, a new
/// workspace) has no place:
/// `/` and the folders the system's files live in, as resolved (a link to one
/// of them, or `/tmp/..`, is one of them), and a folder whose making would
/// make a new folder directly in `/` (`/man1`, `/nonexistent/out`: as root,
/// `hpc man --dir /man1` made `/man1`). `None` for any other folder.
pub fn system_folder(dir: &Path) -> Option<String> {
    let path = resolved(dir)?;
    if let Some(why) = new_in_root(&path) {
        return Some(why);
    }
    if SYSTEM_FOLDERS.iter().any(|f| path == Path::new(f)) {
        return Some(if path == Path::new("/") {
            "it is / itself, the root of the system's files".to_string()
        } else {
            format!("it is {}, a folder of the system", path.display())
        });
    }
    for (top, users) in SYSTEM_TREES {
        if path.starts_with(top)
            && !users
                .iter()
                .any(|u| path.starts_with(u) && path != Path::new(u))
        {
            return Some(if path == Path::new(top) {
                format!("it is {top}, a folder of the system's files")
            } else {
                format!(
                    "it is {}, in {top}, a folder of the system's files",
                    path.display()
                )
            });
        }
    }
    None
}

/// Why making the folder `dir` would make a new folder directly in `/` (its
/// first folder below `/`, as resolved, does not exist: `/man1`,
/// `/nonexistent/out`), where no output has a place; `None` otherwise. Part of
/// [`system_folder`]; apart for a caller that takes some folders of the
/// system's trees (a manual section) but never a new one in `/`.
pub fn new_in_root(dir: &Path) -> Option<String> {
    let path = resolved(dir)?;
    let Some(std::path::Component::Normal(top)) = path.components().nth(1) else {
        return None;
    };
    let top = Path::new("/").join(top);
    std::fs::symlink_metadata(&top).is_err().then(|| {
        format!(
            "it would make {}, a new folder directly in /, the root of the system's files",
            crate::message::path(&top)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The system's folders, as resolved, are refused; the users' folders below
    /// some of them are not.
    #[test]
    fn system_folders_are_told_from_the_users() {
        for d in [
            "/",
            "/tmp/..",
            "/./",
            "/etc",
            "/etc/x/y",
            "/usr/bin",
            "/lib64",
            "/var",
            "/var/lib/x",
            "/var/tmp",
            "/run",
            "/run/user",
            "/home",
            "/tmp",
            "/opt",
            "/nonexistent/..",
            "/proc/self",
            // Hostile pass 20: not made yet, directly in `/` or below such.
            "/hpc-io-not-made-yet",
            "/hpc-io-not-made-yet/a/b",
            "/tmp/../hpc-io-not-made-yet",
        ] {
            assert!(system_folder(Path::new(d)).is_some(), "{d}");
        }
        let guard = crate::test_util::TmpDir::unmade("hpc-io", "system");
        let dir = guard.to_path_buf();
        for d in [
            dir.clone(),
            dir.join("not/made/yet"),
            PathBuf::from("/var/tmp/img"),
            PathBuf::from("/run/user/1000/img"),
            PathBuf::from("/home/someone/img"),
            PathBuf::from("/opt/images/app"),
            PathBuf::from("/tmp/img"),
            PathBuf::from("relative/out"),
        ] {
            assert_eq!(system_folder(&d), None, "{}", d.display());
        }
    }
}
