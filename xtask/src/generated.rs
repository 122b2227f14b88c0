//! Blocks of the repository's documents that are generated from the code (README's
//! tables, ARCHITECTURE.md's crate graph): the splice between markers and the
//! write-or-check step that `cargo xtask readme` and `cargo xtask crate-graph` share.

use std::path::Path;

use anyhow::{bail, Context, Result};

/// `text` with the block between `begin` and `end` (both kept) replaced by `block`,
/// which includes the markers; `file` names the file in errors.
pub fn splice(text: &str, begin: &str, end: &str, block: &str, file: &str) -> Result<String> {
    let (Some(b), Some(e)) = (text.find(begin), text.find(end)) else {
        bail!("{file} has no generated block ({begin} ... {end})");
    };
    if e < b {
        bail!("{file}: the end marker {end} comes before its start");
    }
    Ok(format!("{}{block}{}", &text[..b], &text[e + end.len()..]))
}

/// Writes `want` to `path` when it differs from `have`; with `check`, fails instead
/// (naming `what` and the `cargo xtask` task that rewrites it).
pub fn update(
    path: &Path,
    have: &str,
    want: &str,
    check: bool,
    what: &str,
    task: &str,
) -> Result<()> {
    let file = path.file_name().unwrap_or_default().to_string_lossy();
    if check {
        if have != want {
            bail!("{file}: {what} out of date: run `cargo xtask {task}`");
        }
        eprintln!("{file}: {what} up to date");
        return Ok(());
    }
    std::fs::write(path, want).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("{file}: wrote {what}");
    Ok(())
}
