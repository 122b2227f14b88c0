//! The output directory given as a symbolic link.

use std::fs;
use std::path::Path;

use super::{io, Error, Result};

/// Checks an output directory given as a symbolic link: followed (and said, at
/// `info`) when this process's user or the owner of the folder holding it made
/// it, as a user's own `--out` that points to scratch space; refused
/// ([`Error::ForeignLink`]) when another user did, as the kernel's
/// `protected_symlinks` refuses such links in sticky folders, since a link
/// planted where a run will write would send its files elsewhere unseen; and a
/// link to nothing is said to be one ("File exists" said nothing of it).
pub(super) fn check_link(dir: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(link) = fs::symlink_metadata(dir) else {
        return Ok(());
    };
    if !link.file_type().is_symlink() {
        return Ok(());
    }
    let target = fs::read_link(dir).map_err(io("read the link", dir))?;
    let folder = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let folder_owner = fs::metadata(folder).map(|m| m.uid()).ok();
    let owner = link.uid();
    if owner != rustix::process::geteuid().as_raw() && Some(owner) != folder_owner {
        return Err(Error::ForeignLink {
            path: dir.to_path_buf(),
            target,
            owner,
        });
    }
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
        dir = %dir.display(),
        target = %target.display(),
        "the output directory is a symbolic link: the run writes into its target"
    );
    Ok(())
}
