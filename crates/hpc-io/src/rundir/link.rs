//! Output directories given through symbolic links.

use std::fs;
use std::path::Path;

use super::{io, Error, Result};

/// The target of `path` when it is a symbolic link to nothing (a directory a
/// user named that is neither one to write into nor one to make: creating it
/// said only "File exists"); `None` otherwise.
///
/// ```
/// let d = std::env::temp_dir().join(format!("hpc-io-dangling-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&d).unwrap();
/// std::os::unix::fs::symlink(d.join("nowhere"), d.join("out")).unwrap();
/// assert_eq!(hpc_io::rundir::dangling_link(&d.join("out")), Some(d.join("nowhere")));
/// assert_eq!(hpc_io::rundir::dangling_link(&d), None);
/// # std::fs::remove_dir_all(&d).unwrap();
/// ```
pub fn dangling_link(path: &Path) -> Option<std::path::PathBuf> {
    match fs::metadata(path) {
        Ok(_) => None,
        Err(_) => fs::read_link(path).ok(),
    }
}

/// The first symbolic link to nothing on the way to `path`, itself included
/// (as `/lnk/out`, `/lnk` a link to nothing: making `out` said only "File
/// exists"), as the link and its target; `None` where there is none.
/// [`dangling_said`] says it.
///
/// ```
/// let d = std::env::temp_dir().join(format!("hpc-io-dangling-in-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&d).unwrap();
/// std::os::unix::fs::symlink(d.join("nowhere"), d.join("lnk")).unwrap();
/// let (link, target) = hpc_io::rundir::dangling_link_in(&d.join("lnk/a/b")).unwrap();
/// assert_eq!((link, target), (d.join("lnk"), d.join("nowhere")));
/// assert_eq!(hpc_io::rundir::dangling_link_in(&d.join("x/y")), None);
/// # std::fs::remove_dir_all(&d).unwrap();
/// ```
pub fn dangling_link_in(path: &Path) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let mut prefix = std::path::PathBuf::new();
    for c in path.components() {
        prefix.push(c);
        match fs::symlink_metadata(&prefix) {
            Ok(m) if m.file_type().is_symlink() => {
                if let Some(target) = dangling_link(&prefix) {
                    return Some((prefix, target));
                }
            }
            Ok(_) => {}
            // Nothing there: nothing below it either.
            Err(_) => return None,
        }
    }
    None
}

/// What [`dangling_link_in`] found on the way to `path`, in words: "a
/// symbolic link to T, which does not exist" where `link` is `path` itself,
/// "its folder L is a symbolic link to T, which does not exist" otherwise.
pub fn dangling_said(path: &Path, link: &Path, target: &Path) -> String {
    if link == path {
        format!(
            "a symbolic link to {}, which does not exist",
            crate::message::path(target)
        )
    } else {
        format!(
            "its folder {} is a symbolic link to {}, which does not exist",
            crate::message::path(link),
            crate::message::path(target)
        )
    }
}

/// Checks a directory a run will write into, as a user named it: an empty path
/// is refused (it named the current directory unseen), and each symbolic link
/// the path goes through, itself included, is followed only when this process's
/// user, `root` or the owner of the folder holding the link made it (a user's
/// own `--out` that points to scratch space, a site's link), and refused
/// ([`Error::ForeignLink`]) when another user did, as the kernel's
/// `protected_symlinks` refuses such links in sticky folders: a link planted
/// where a run will write sent its files elsewhere unseen. A followed link is
/// said at `info`, and a link to nothing is said to be one ("File exists" said
/// nothing of it). [`RunDir::lock`](super::RunDir::lock) checks its directory
/// with it; other writers of a user-named directory (a checkpoint directory)
/// may too.
///
/// ```
/// use hpc_io::rundir::check_dir_link;
/// assert!(check_dir_link(std::path::Path::new("")).is_err());
/// check_dir_link(&std::env::temp_dir().join("not-made-yet")).unwrap();
/// ```
pub fn check_dir_link(dir: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    if dir.as_os_str().is_empty() {
        return Err(io("create", dir)(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "an empty path names no directory",
        )));
    }
    let me = rustix::process::geteuid().as_raw();
    for path in dir.ancestors().filter(|p| !p.as_os_str().is_empty()) {
        let Ok(link) = fs::symlink_metadata(path) else {
            continue;
        };
        if !link.file_type().is_symlink() {
            continue;
        }
        let target = fs::read_link(path).map_err(io("read the link", path))?;
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let folder_owner = fs::metadata(folder).map(|m| m.uid()).ok();
        let owner = link.uid();
        if owner != me && owner != 0 && Some(owner) != folder_owner {
            return Err(Error::ForeignLink {
                path: path.to_path_buf(),
                target,
                owner,
            });
        }
        if path == dir {
            if fs::metadata(dir).is_err() {
                return Err(io("create", dir)(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!(
                        "it is a symbolic link to {}, which does not exist",
                        target.display()
                    ),
                )));
            }
            tracing::info!(
                dir = %crate::message::path(dir),
                target = %crate::message::path(&target),
                "the output directory is a symbolic link: the run writes into its target"
            );
        }
    }
    Ok(())
}
