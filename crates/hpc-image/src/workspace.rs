//! The cargo workspace an image is made from: its binaries, as `cargo metadata`
//! gives them, and the one a command names or defaults to.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::Value;

use crate::UsageError;

/// A binary target of the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinTarget {
    /// Owning package.
    pub package: String,
    /// Target name.
    pub name: String,
    /// An example rather than a `[[bin]]`.
    pub example: bool,
    /// Package version.
    pub version: String,
    /// Package repository URL, if any.
    pub repository: Option<String>,
    /// The package's feature names.
    pub features: Vec<String>,
}

/// `org.opencontainers.image.source`: the package's `repository` field when it
/// is an http(s) URL, else nothing (a label must not name a source that is not
/// one; an image without the label is honest about not knowing).
pub fn source_label(repository: Option<&str>) -> Option<String> {
    let r = repository?.trim();
    let rest = r
        .strip_prefix("https://")
        .or_else(|| r.strip_prefix("http://"))?;
    let host = rest.split('/').next().unwrap_or_default();
    (!host.is_empty() && !r.chars().any(char::is_whitespace)).then(|| r.to_string())
}

/// `cargo metadata` facts the command needs.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Every binary and example target.
    pub bins: Vec<BinTarget>,
    /// The target directory (honours `CARGO_TARGET_DIR`).
    pub target_dir: PathBuf,
    /// The workspace root (where `git` is asked for the revision).
    pub root: PathBuf,
    /// The workspace's packages, for messages.
    pub packages: Vec<String>,
}

/// Reads `cargo metadata --format-version 1 --no-deps` output.
pub fn parse_metadata(v: &Value) -> Result<Workspace> {
    let mut bins = Vec::new();
    let mut packages = Vec::new();
    for p in v["packages"]
        .as_array()
        .context("metadata has no packages")?
    {
        let package = p["name"].as_str().unwrap_or_default().to_string();
        packages.push(package.clone());
        let features: Vec<String> = p["features"]
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        for t in p["targets"].as_array().into_iter().flatten() {
            let kinds: Vec<&str> = t["kind"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let example = kinds.contains(&"example");
            if !(kinds.contains(&"bin") || example) {
                continue;
            }
            bins.push(BinTarget {
                package: package.clone(),
                name: t["name"].as_str().unwrap_or_default().to_string(),
                example,
                version: p["version"].as_str().unwrap_or_default().to_string(),
                repository: p["repository"].as_str().map(String::from),
                features: features.clone(),
            });
        }
    }
    bins.sort_by(|a, b| (a.example, &a.name).cmp(&(b.example, &b.name)));
    packages.sort();
    Ok(Workspace {
        bins,
        target_dir: PathBuf::from(
            v["target_directory"]
                .as_str()
                .context("no target_directory")?,
        ),
        root: PathBuf::from(v["workspace_root"].as_str().unwrap_or(".")),
        packages,
    })
}

/// Reads the metadata of the workspace around the current directory, or of
/// `manifest_path`.
pub fn metadata(manifest_path: Option<&Path>) -> Result<Workspace> {
    let mut cmd = crate::sys::cargo();
    cmd.args(["metadata", "--format-version", "1", "--no-deps"]);
    // cargo reads every `Cargo.toml` from the manifest's folder up to the
    // workspace's root: a FIFO there kept `cargo metadata` (and this command)
    // waiting for ever.
    let start = std::env::current_dir().unwrap_or_default().join(
        manifest_path
            .and_then(Path::parent)
            .unwrap_or(Path::new("")),
    );
    for dir in start.ancestors() {
        let toml = dir.join("Cargo.toml");
        if std::fs::metadata(&toml).is_ok_and(|md| !md.is_file() && !md.is_dir()) {
            usage!(
                "{}: not a regular file, and cargo reads it as a manifest of this workspace \
                 (it would wait on it or fail); remove it or run elsewhere",
                hpc_io::message::path(&toml)
            );
        }
    }
    // And the members' below it (`members = ["m"]` with a FIFO `m/Cargo.toml`
    // kept it waiting the same way).
    if let Some(toml) = odd_manifest_below(&start) {
        usage!(
            "{}: not a regular file, and cargo reads it as a manifest if it is a member \
             of this workspace (it would wait on it or fail); remove it or run elsewhere",
            hpc_io::message::path(&toml)
        );
    }
    if let Some(m) = manifest_path {
        match std::fs::metadata(m) {
            Err(e) => usage!("--manifest-path {}: {e}", hpc_io::message::path(m)),
            // Said so: a device or a directory was reported as "no such file".
            Ok(md) if !md.is_file() => usage!(
                "--manifest-path {}: not a regular file (give the workspace's Cargo.toml)",
                hpc_io::message::path(m)
            ),
            Ok(_) => {}
        }
        cmd.arg("--manifest-path").arg(m);
    }
    let out = cmd.output().context("cannot run cargo metadata")?;
    if !out.status.success() {
        usage!(
            "cargo metadata failed (is this a cargo workspace?):\n{}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_metadata(&serde_json::from_slice(&out.stdout)?)
}

/// How deep, and over how many entries, [`odd_manifest_below`] looks.
const MANIFEST_WALK: (usize, usize) = (8, 100_000);

/// The first `Cargo.toml` in the folders below `dir` (where a workspace's
/// members and path dependencies lie) that is neither a regular file nor a
/// folder: a FIFO there is opened by `cargo metadata`, which then waits for
/// ever. Build output (`target`) and hidden folders are skipped; the walk stops
/// after [`MANIFEST_WALK`] (depth, entries) and follows no link to a folder.
fn odd_manifest_below(dir: &Path) -> Option<PathBuf> {
    let (max_depth, max_entries) = MANIFEST_WALK;
    let mut stack = vec![(dir.to_path_buf(), 0)];
    let mut seen = 0;
    while let Some((d, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            seen += 1;
            if seen > max_entries {
                return None;
            }
            let name = e.file_name();
            if name == "Cargo.toml" {
                if std::fs::metadata(e.path()).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
                    return Some(e.path());
                }
            } else if depth < max_depth
                && e.file_type().is_ok_and(|t| t.is_dir())
                && name != "target"
                && !name.to_string_lossy().starts_with('.')
            {
                stack.push((e.path(), depth + 1));
            }
        }
    }
    None
}

/// The binary to package when none is named: the workspace's only `[[bin]]` outside
/// the `xtask` package.
pub fn default_bin(ws: &Workspace) -> Result<&BinTarget> {
    let bins: Vec<&BinTarget> = ws
        .bins
        .iter()
        .filter(|b| !b.example && b.package != "xtask")
        .collect();
    match bins.as_slice() {
        [one] => Ok(one),
        [] => usage!(
            "the workspace has no binary to package (packages: {}): a package needs \
             src/main.rs or a [[bin]] target",
            ws.packages.join(", ")
        ),
        many => usage!(
            "the workspace has {} binaries: name one: cargo xtask image <{}>",
            many.len(),
            many.iter()
                .map(|b| b.name.as_str())
                .collect::<Vec<_>>()
                .join("|")
        ),
    }
}

/// Finds the target named `name` (a `[[bin]]` before an example), or says which exist.
pub fn find_bin<'a>(ws: &'a Workspace, name: &str) -> Result<&'a BinTarget> {
    if let Some(b) = ws
        .bins
        .iter()
        .find(|b| b.name == name && !b.example)
        .or_else(|| ws.bins.iter().find(|b| b.name == name))
    {
        return Ok(b);
    }
    // Cut when long: a name of 100,000 characters was echoed whole.
    let mut msg = format!(
        "no binary or example named `{}` in the workspace.",
        hpc_env::short(name)
    );
    if ws.bins.is_empty() {
        let _ = write!(
            msg,
            "\nit has no binary at all (packages: {}): a package needs src/main.rs or a \
             [[bin]] target",
            ws.packages.join(", ")
        );
        usage!("{msg}");
    }
    msg.push_str("\navailable binaries:");
    for b in ws.bins.iter().filter(|b| !b.example) {
        let _ = write!(msg, "\n  {:<16} (package {})", b.name, b.package);
    }
    let ex: Vec<&BinTarget> = ws.bins.iter().filter(|b| b.example).collect();
    if !ex.is_empty() {
        msg.push_str("\navailable examples:");
        for b in ex {
            let _ = write!(msg, "\n  {:<16} (package {})", b.name, b.package);
        }
    }
    usage!("{msg}")
}
