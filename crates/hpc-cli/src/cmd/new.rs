//! `hpc new`: writes an application workspace that uses the SDK: the program
//! (`src/main.rs` on the `hpc-rs` facade), `xtask/` with `cargo xtask image` (the
//! `hpc-image` library), the cargo alias, a Slurm batch script and a README.
//!
//! Nothing is written unless everything can be: the name and the destination are
//! checked first. An existing empty directory is written into as `cargo init` does:
//! it keeps its inode, owner and permissions (a shell inside it stays there). One
//! that holds anything is refused, naming what is there, unless `--force` is given;
//! even then it is refused, naming them, when it holds any of the files `hpc new`
//! writes, and no git repository is made in it. Every file
//! is created new (`O_CREAT | O_EXCL`: a symlink planted at its path is never
//! followed), and a failure removes what was created, the directory too when it was
//! created.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;

use super::UsageError;

/// Arguments of `hpc new`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    hpc new my-sim                       ./my-sim, package my-sim\n  \
    hpc new ~/src/lif --name lif-model   package lif-model in ~/src/lif\n  \
    hpc new my-sim --vcs none            no git repository\n\n\
    Then:\n  \
    cd my-sim && cargo build && hpc run -n 4 target/debug/my-sim\n  \
    cargo xtask image --features mpi     container image, Apptainer and Slurm files\n  \
    hpc cluster up --bin target/release  a Slurm cluster of containers (README.md)\n\n\
    Exit status: 0 written; 2 bad name or destination (nothing written), or the\n  \
    report could not be printed (the project was written: the message says so).")]
pub struct Args {
    /// Directory to create (it may exist if it is empty).
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
    /// Write into an existing directory that is not empty (never overwriting a file
    /// in it; no git repository is made there); a folder of the system (`/`,
    /// `/tmp`, `/srv`, anything in `/etc` or `/usr`) is refused even so.
    #[arg(long)]
    pub force: bool,
    /// Package name (default: the directory's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Version control to set up.
    #[arg(long, value_enum, default_value_t = Vcs::Git)]
    pub vcs: Vcs,
    /// Where the hpc crates come from until they are on crates.io: a checkout of the
    /// SDK (a directory) or its git URL. Writes a `[patch.crates-io]` table for
    /// `hpc-rs` and `hpc-image` into the new `Cargo.toml` (their own hpc
    /// dependencies then come from the same source); delete it to use the
    /// published crates.
    #[arg(long, value_name = "PATH|GIT-URL")]
    pub sdk: Option<String>,
}

/// Where the hpc crates of a new workspace come from (`--sdk`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sdk {
    /// crates.io (no `--sdk`).
    Registry,
    /// A checkout of the SDK, by its absolute path, and its version.
    Path(PathBuf, String),
    /// A git repository of the SDK.
    Git(String),
}

/// The crates the scaffold depends on directly; the patch names these only (their
/// own hpc dependencies are path dependencies inside the SDK's workspace, so they
/// come from the same checkout, and a patch of a crate the graph does not use would
/// make cargo warn on every build).
const PATCHED: &[&str] = &["hpc-rs", "hpc-image"];

/// The URL schemes cargo's git dependencies take.
const GIT_SCHEMES: &[&str] = &["https://", "http://", "ssh://", "git://", "file://"];

/// Checks a git URL as cargo will need it: a scheme cargo knows and something after
/// it (`git@host:path` for scp-like ssh), nothing that would break the TOML string.
fn git_url(src: &str) -> Result<String, UsageError> {
    let bad = |why: &str| UsageError(format!("--sdk {}: {why}", hpc_env::shown(src)));
    if src
        .chars()
        .any(|c| matches!(c, '"' | '\\') || c.is_whitespace() || c.is_control())
    {
        return Err(bad("not a usable git URL"));
    }
    let rest = if let Some(scp) = src.strip_prefix("git@") {
        match scp.split_once(':') {
            Some((host, path)) if !host.is_empty() && !path.is_empty() => return Ok(src.into()),
            _ => return Err(bad("an scp-like git URL is git@HOST:PATH")),
        }
    } else {
        match GIT_SCHEMES.iter().find_map(|s| src.strip_prefix(s)) {
            Some(rest) => rest,
            None => {
                return Err(bad(&format!(
                    "cargo takes git URLs beginning with {} or git@HOST:PATH",
                    GIT_SCHEMES.join(", ")
                )))
            }
        }
    };
    if rest.trim_matches('/').is_empty() {
        return Err(bad("the URL names no host or path"));
    }
    Ok(src.into())
}

impl Sdk {
    /// Reads `--sdk`: a URL (`https://`, `ssh://`, `git://`, `file://`, `git@host:`)
    /// is a git repository; anything else must be a directory holding the SDK's
    /// workspace (its `crates/hpc-rs` and `crates/hpc-image`).
    pub fn parse(source: Option<&str>) -> Result<Sdk, UsageError> {
        let Some(src) = source.map(str::trim) else {
            return Ok(Sdk::Registry);
        };
        if src.is_empty() {
            return Err(UsageError(
                "--sdk is empty: give a checkout's path or a git URL".into(),
            ));
        }
        if src.contains("://") || (src.starts_with("git@") && src.contains(':')) {
            return git_url(src).map(Sdk::Git);
        }
        let root = Path::new(src).canonicalize().map_err(|e| {
            UsageError(format!(
                "--sdk {}: {e} (give a checkout of the SDK or a git URL such as https://...)",
                hpc_env::short(src)
            ))
        })?;
        for c in PATCHED {
            let m = root.join("crates").join(c).join("Cargo.toml");
            // One that is there but no file (a link to a device, a folder) is said
            // to be so: "no … there" named a file the user could see.
            let what = match std::fs::metadata(&m) {
                Ok(md) if md.is_file() => continue,
                Ok(md) if md.is_dir() => "is a directory, not a manifest",
                Ok(_) => "is not a regular file (a device, a FIFO, a socket)",
                Err(_) => "is not there",
            };
            return Err(UsageError(format!(
                "--sdk {}: {} {what}: not a checkout of the hpc-rs SDK (its root, the \
                 directory with crates/)",
                hpc_io::message::path(&root),
                hpc_io::message::path(&Path::new("crates").join(c).join("Cargo.toml"))
            )));
        }
        let version = workspace_version(&root.join("Cargo.toml"))
            .map_err(|why| UsageError(format!("--sdk {}: {why}", hpc_io::message::path(&root))))?;
        // The version goes into the new workspace's manifests as a requirement.
        if !is_semver(&version) {
            return Err(UsageError(format!(
                "--sdk {}: its [workspace.package] version {} is not a version",
                hpc_io::message::path(&root),
                hpc_env::shown(&version)
            )));
        }
        if root.to_str().is_none_or(|r| !toml_plain(r)) {
            return Err(UsageError(format!(
                "--sdk {}: a path cargo's TOML cannot hold as written; move or link the \
                 checkout to a plain path",
                hpc_io::message::path(&root)
            )));
        }
        Ok(Sdk::Path(root, version))
    }

    /// The version the new workspace asks for: the checkout's own, else this
    /// launcher's (the version it was released with).
    fn version(&self) -> &str {
        match self {
            Sdk::Path(_, v) => v,
            _ => env!("CARGO_PKG_VERSION"),
        }
    }

    /// The `[patch.crates-io]` table for the root `Cargo.toml`, empty for crates.io.
    fn patch(&self) -> String {
        let what = match self {
            Sdk::Registry => return String::new(),
            Sdk::Path(root, _) => format!("the SDK checkout {}", hpc_io::message::path(root)),
            Sdk::Git(url) => format!("the SDK's git repository {url}"),
        };
        let mut t = format!(
            "\n# Until the hpc crates are on crates.io they come from {what}\n\
             # (written by `hpc new --sdk`). Delete this table to use the published crates.\n\
             [patch.crates-io]\n"
        );
        for c in PATCHED {
            let source = match self {
                Sdk::Path(root, _) => {
                    format!("path = \"{}\"", root.join("crates").join(c).display())
                }
                Sdk::Git(url) => format!("git = \"{url}\""),
                Sdk::Registry => unreachable!("returned above"),
            };
            t.push_str(&format!("{c} = {{ {source} }}\n"));
        }
        t
    }

    /// How to install the launcher from the same source.
    fn install(&self) -> String {
        match self {
            Sdk::Registry => "cargo install hpc-cli".into(),
            Sdk::Path(root, _) => {
                format!(
                    "cargo install --path {}",
                    root.join("crates/hpc-cli").display()
                )
            }
            Sdk::Git(url) => format!("cargo install --git {url} hpc-cli"),
        }
    }
}

/// Whether `v` is a version cargo takes as written: `MAJOR.MINOR.PATCH` (numbers of
/// at most 20 digits, no leading zero) and an optional `-pre` and `+build` of
/// letters, digits, `.` and `-` (at most 200 bytes in all). A version of other
/// characters would break the new manifests, and one that is no version (`1111…`,
/// `1.0`) was written into them for cargo to refuse at the first build.
fn is_semver(v: &str) -> bool {
    let label = |s: &str| {
        !s.is_empty()
            && s.split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    };
    let (rest, build) = match v.split_once('+') {
        Some((r, b)) => (r, Some(b)),
        None => (v, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (rest, None),
    };
    let number = |p: &str| {
        (1..=20).contains(&p.len())
            && p.bytes().all(|b| b.is_ascii_digit())
            && (p == "0" || !p.starts_with('0'))
    };
    let parts: Vec<&str> = core.split('.').collect();
    v.len() <= 200
        && parts.len() == 3
        && parts.iter().all(|p| number(p))
        && pre.is_none_or(label)
        && build.is_none_or(label)
}

/// Whether `s` can stand between the quotes of a TOML basic string as written: no
/// quote, no backslash, no control character but a tab.
fn toml_plain(s: &str) -> bool {
    !s.chars()
        .any(|c| matches!(c, '"' | '\\') || (c.is_control() && c != '\t'))
}

/// `[workspace.package] version = "..."` of a workspace manifest.
/// An error says why: the file cannot be read (a FIFO, a device: named as such,
/// not read), is not TOML, or holds no such version.
fn workspace_version(manifest: &Path) -> Result<String, String> {
    let text =
        hpc_io::read::read_regular_to_string(manifest, 1 << 20).map_err(|e| e.to_string())?;
    let doc: toml::Table = text
        .parse()
        .map_err(|e| format!("{} is not TOML: {e}", hpc_io::message::path(manifest)))?;
    doc.get("workspace")
        .and_then(|w| w.get("package"))
        .and_then(|p| p.get("version"))
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .ok_or_else(|| "its Cargo.toml has no [workspace.package] version".into())
}

/// Version control for the new workspace.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vcs {
    /// `git init` (skipped inside an existing git work tree, as `cargo new` does).
    Git,
    /// None.
    None,
}

/// One file of the scaffold: its path in the workspace, its template, whether it is
/// executable.
struct File {
    path: &'static str,
    text: &'static str,
    executable: bool,
}

/// A [`File`] made from `templates/app/TEMPLATE`: `template!(PATH, TEMPLATE)`, or
/// `template!(PATH, TEMPLATE, executable)`.
macro_rules! template {
    ($path:literal, $template:literal) => {
        template!($path, $template, false)
    };
    ($path:literal, $template:literal, executable) => {
        template!($path, $template, true)
    };
    ($path:literal, $template:literal, $executable:literal) => {
        File {
            path: $path,
            text: include_str!(concat!("../../templates/app/", $template)),
            executable: $executable,
        }
    };
}

const FILES: &[File] = &[
    template!("Cargo.toml", "app.Cargo.toml"),
    template!("src/main.rs", "app.main.rs"),
    template!("xtask/Cargo.toml", "xtask.Cargo.toml"),
    template!("xtask/src/main.rs", "xtask.main.rs"),
    template!(".cargo/config.toml", "config.toml"),
    template!(".gitignore", "gitignore"),
    template!("slurm/{{name}}.sbatch", "sbatch", executable),
    template!("README.md", "README.md"),
];

/// Names a package of the new workspace cannot have: Rust keywords, names the
/// compiler or cargo reserve, and the crates and binaries the scaffold itself uses.
const RESERVED: &[&str] = &[
    // Keywords (2021 edition, strict and reserved).
    "as",
    "async",
    "await",
    "break",
    "const",
    "continue",
    "crate",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "fn",
    "for",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "match",
    "mod",
    "move",
    "mut",
    "pub",
    "ref",
    "return",
    "self",
    "Self",
    "static",
    "struct",
    "super",
    "trait",
    "true",
    "type",
    "unsafe",
    "use",
    "where",
    "while",
    "abstract",
    "become",
    "box",
    "do",
    "final",
    "macro",
    "override",
    "priv",
    "try",
    "typeof",
    "unsized",
    "virtual",
    "yield",
    // The standard library's crates, and names cargo refuses.
    "std",
    "core",
    "alloc",
    "proc_macro",
    "proc-macro",
    "test",
    "build",
    "deps",
    "examples",
    "incremental",
    "target",
    // What the scaffold depends on or creates.
    "xtask",
    "hpc",
    "hpc-rs",
    "hpc_rs",
    "hpc-image",
    "hpc_image",
    "anyhow",
    "clap",
];

/// Checks a package name the way cargo does (ASCII letters, digits, `-` and `_`, not
/// starting with a digit or `-`, at most 64 characters, no keyword or reserved name)
/// and refuses the names the scaffold uses itself.
pub fn check_name(name: &str) -> Result<(), UsageError> {
    let bad = |why: &str| {
        Err(UsageError(format!(
            "invalid package name {}: {why}",
            hpc_env::shown(name)
        )))
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > 64 {
        return bad("it is longer than 64 characters (the registry's limit)");
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return bad(&format!(
            "{c:?} is not allowed (use ASCII letters, digits, `-` and `_`)"
        ));
    }
    let first = name.chars().next().expect("not empty");
    if first.is_ascii_digit() || first == '-' {
        return bad("it must start with a letter or `_`");
    }
    if RESERVED.contains(&name) {
        return bad("it is a Rust keyword, a reserved name, or a name the new workspace itself uses (xtask, hpc, hpc-rs, hpc-image, anyhow, clap)");
    }
    // Device names Windows refuses as file names: refused by cargo everywhere.
    let lower = name.to_ascii_lowercase();
    if ["con", "prn", "aux", "nul"].contains(&lower.as_str())
        || ((lower.starts_with("com") || lower.starts_with("lpt"))
            && lower.len() == 4
            && lower.as_bytes()[3].is_ascii_digit())
    {
        return bad("it is a reserved device name on Windows, which cargo refuses");
    }
    Ok(())
}

/// The container image's name of package `name`: the name itself where it is
/// an image reference's name (lowercase letters and digits, joined by `.`, `_`,
/// `__` or dashes, as `cargo xtask image` checks it), else that name made one
/// (lowercase, each run of other separators a dash, none at the ends).
/// `Brunel2` and `trail-` are package names cargo takes but no image's.
fn image_name(name: &str) -> String {
    let b = name.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let runs_ok = name
        .split(|c: char| c.is_ascii_alphanumeric())
        .all(|sep| sep.is_empty() || sep == "_" || sep == "__" || sep.bytes().all(|c| c == b'-'));
    if !b.is_empty()
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter().all(|&c| alnum(c) || c == b'-' || c == b'_')
        && runs_ok
    {
        return name.to_string();
    }
    let lower = name.to_ascii_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    if words.is_empty() {
        "app".into()
    } else {
        words.join("-")
    }
}

/// The `--name` that `cargo xtask image` needs for package `name` (with a
/// leading blank), or nothing where its name is the image's ([`image_name`]).
fn image_flag(name: &str) -> String {
    let image = image_name(name);
    if image == name {
        String::new()
    } else {
        format!(" --name {image}")
    }
}

/// Replaces `{{name}}`, `{{image}}`, `{{image_flag}}`, `{{sdk_version}}`,
/// `{{sdk_patch}}` and `{{install_hpc}}`.
fn fill(text: &str, name: &str, sdk: &Sdk) -> String {
    text.replace("{{name}}", name)
        .replace("{{image}}", &image_name(name))
        .replace("{{image_flag}}", &image_flag(name))
        .replace("{{sdk_version}}", sdk.version())
        .replace("{{sdk_patch}}", &sdk.patch())
        .replace("{{install_hpc}}", &sdk.install())
}

/// Where to write and under which name, checked: the destination is missing or an
/// empty directory, its parent exists, the name is valid.
fn plan(args: &Args) -> Result<(PathBuf, String), UsageError> {
    // An existing (empty) directory by its real path, so that `.` has a name.
    let path = &match args.path.canonicalize() {
        Ok(p) if args.path.is_dir() => p,
        _ => args.path.clone(),
    };
    let name = match &args.name {
        Some(n) => n.clone(),
        None => match path.file_name() {
            Some(n) => n.to_string_lossy().into_owned(),
            None => {
                return Err(UsageError(format!(
                    "{} has no last component to name the package after: give --name",
                    hpc_io::message::path(path)
                )))
            }
        },
    };
    check_name(&name)?;
    // A dangling link is neither a directory to write into nor one to create:
    // it was taken as missing, and the first file failed as "creating
    // LINK/Cargo.toml: No such file or directory".
    if let Some((link, target)) = hpc_io::rundir::dangling_link_in(path) {
        let said = hpc_io::rundir::dangling_said(path, &link, &target);
        return Err(UsageError(format!(
            "{}{} {said}: create that directory, or give another path (nothing was written)",
            hpc_io::message::path(path),
            if link.as_path() == path { " is" } else { ":" }
        )));
    }
    // `/`, `/srv`, `/usr/local/bin`: refused even with --force, which the
    // refusal of a non-empty folder offered (the workspace's Cargo.toml, src/
    // and scripts were written among the system's files as root). Said after
    // what the path itself is (`/dev/full/x`: its folder is no directory).
    let system = |path: &Path| match hpc_io::system::system_folder(path) {
        Some(why) => Err(UsageError(format!(
            "{}: {why}, not a folder for a new workspace: give a folder of your own \
             (nothing was written)",
            hpc_io::message::path(path)
        ))),
        None => Ok(()),
    };
    if path.exists() {
        if !path.is_dir() {
            return Err(UsageError(format!(
                "{} exists and is not a directory",
                hpc_io::message::path(path)
            )));
        }
        system(path)?;
        let mut entries: Vec<String> = std::fs::read_dir(path)
            .and_then(|d| {
                d.map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                    .collect()
            })
            .map_err(|e| UsageError(format!("cannot read {}: {e}", hpc_io::message::path(path))))?;
        if !entries.is_empty() && !args.force {
            entries.sort();
            let n = entries.len();
            let mut shown = entries.into_iter().take(5).collect::<Vec<_>>().join(", ");
            if n > 5 {
                shown.push_str(&format!(" and {} more", n - 5));
            }
            return Err(UsageError(format!(
                "{} is not empty (it holds {shown}): give a new directory, or --force to \
                 write into it (nothing was written)",
                hpc_io::message::path(path)
            )));
        }
        let taken = taken_paths(path, &name);
        if !taken.is_empty() {
            return Err(UsageError(format!(
                "{} already holds {}: hpc new would overwrite them (nothing was written)",
                hpc_io::message::path(path),
                taken.join(", ")
            )));
        }
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // A parent that is there but no directory (`hpc new /dev/full/x`) was said
    // not to exist.
    match std::fs::metadata(&parent) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(UsageError(format!(
                "{} is not a directory: the new one cannot be made in it",
                hpc_io::message::path(&parent)
            )))
        }
        Err(_) => {
            return Err(UsageError(format!(
                "{} does not exist: create it first",
                hpc_io::message::path(&parent)
            )))
        }
    }
    system(path)?;
    Ok((path.clone(), name))
}

/// Writes the scaffold into `dir` (which must not exist yet).
/// The paths (relative to `dir`) of what `hpc new` writes that are already there:
/// any file of [`FILES`], and a directory of theirs that is not a real directory
/// (a symlink, a file).
fn taken_paths(dir: &Path, name: &str) -> Vec<String> {
    let mut taken = Vec::new();
    for f in FILES {
        let rel = PathBuf::from(fill(f.path, name, &Sdk::Registry));
        for a in rel
            .ancestors()
            .skip(1)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            if a.as_os_str().is_empty() {
                continue;
            }
            let shown = hpc_io::message::path(a);
            if std::fs::symlink_metadata(dir.join(a)).is_ok_and(|m| !m.is_dir())
                && !taken.contains(&shown)
            {
                taken.push(shown);
            }
        }
        if std::fs::symlink_metadata(dir.join(&rel)).is_ok() {
            taken.push(hpc_io::message::path(&rel));
        }
    }
    taken
}

/// Writes the files into `dir`, creating each file and missing directory new, and
/// records what it created in `created`, in order.
fn write_files(
    dir: &Path,
    name: &str,
    sdk: &Sdk,
    created: &mut Vec<PathBuf>,
) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    for f in FILES {
        let rel = PathBuf::from(fill(f.path, name, &Sdk::Registry));
        let mut parents: Vec<&Path> = rel.ancestors().skip(1).collect();
        parents.reverse();
        for a in parents.into_iter().filter(|a| !a.as_os_str().is_empty()) {
            let d = dir.join(a);
            match std::fs::symlink_metadata(&d) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => anyhow::bail!("{} is not a directory", hpc_io::message::path(&d)),
                Err(_) => {
                    std::fs::create_dir(&d)
                        .with_context(|| format!("creating {}", hpc_io::message::path(&d)))?;
                    created.push(d);
                }
            }
        }
        let p = dir.join(&rel);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if f.executable { 0o755 } else { 0o644 })
            .open(&p)
            .with_context(|| format!("creating {}", hpc_io::message::path(&p)))?;
        created.push(p.clone());
        if f.executable {
            // As `chmod 755`, whatever the umask (through the open file: no path).
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("making {} executable", hpc_io::message::path(&p)))?;
        }
        file.write_all(fill(f.text, name, sdk).as_bytes())
            .and_then(|()| file.sync_all())
            .with_context(|| format!("writing {}", hpc_io::message::path(&p)))?;
    }
    Ok(())
}

/// How long one `git` call of `hpc new` may take: a `git` that hangs (a
/// wrapper waiting on a network file system, a hook) stopped the command
/// without a word.
const GIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The most bytes of a `git` call's output kept (its answer is one word).
const GIT_OUTPUT: u64 = 64 << 10;

/// `git args` run in `dir`, bounded in time and output ([`hpc_io::tool`]).
fn git(
    program: &std::ffi::OsStr,
    dir: &Path,
    args: &[&str],
    limit: std::time::Duration,
) -> Result<std::process::Output, hpc_io::tool::ToolError> {
    hpc_io::tool::output_within(
        Command::new(program).args(args).current_dir(dir),
        limit,
        GIT_OUTPUT,
    )
}

/// Whether `dir` lies inside a git work tree; false without git; an error
/// for a `git` that did not end in time.
fn in_git_work_tree(
    program: &std::ffi::OsStr,
    dir: &Path,
    limit: std::time::Duration,
) -> Result<bool, hpc_io::tool::ToolError> {
    match git(program, dir, &["rev-parse", "--is-inside-work-tree"], limit) {
        Ok(o) => Ok(o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "true"),
        Err(e @ hpc_io::tool::ToolError::TimedOut(_)) => Err(e),
        Err(_) => Ok(false),
    }
}

/// The note `hpc new` gives about the repository it made in `dir` (empty
/// before), or why it made none.
fn git_repository(
    program: &std::ffi::OsStr,
    dir: &Path,
    empty: bool,
    limit: std::time::Duration,
) -> String {
    match in_git_work_tree(program, dir, limit) {
        Err(e) => format!(" (no git repository: {e})"),
        Ok(true) => " (inside an existing git work tree: no new repository)".into(),
        Ok(false) if !empty => " (the directory held other entries: no new repository)".into(),
        Ok(false) => match git(program, dir, &["init", "--quiet"], limit) {
            Ok(o) if o.status.success() => ", git repository".into(),
            Ok(o) => format!(
                " (git init failed with {}: {})",
                o.status,
                hpc_io::message::said(&hpc_io::message::cut(
                    String::from_utf8_lossy(&o.stderr).trim()
                ))
            ),
            Err(e) => format!(" (no git repository: {e})"),
        },
    }
}

/// Runs `hpc new`.
pub fn exec(args: Args) -> anyhow::Result<i32> {
    let (path, name) = plan(&args)?;
    let sdk = Sdk::parse(args.sdk.as_deref())?;
    // An existing directory is written into (its inode and mode stay); a new one is
    // created, and removed again if writing fails.
    let mut created = Vec::new();
    // Empty (or missing): only then may a repository be made there.
    let empty = std::fs::read_dir(&path).map_or(true, |mut d| d.next().is_none());
    if std::fs::symlink_metadata(&path).is_err() {
        std::fs::create_dir(&path)
            .with_context(|| format!("creating {}", hpc_io::message::path(&path)))?;
        created.push(path.clone());
    }
    if let Err(e) = write_files(&path, &name, &sdk, &mut created) {
        for p in created.iter().rev() {
            let _ = if p.is_dir() {
                std::fs::remove_dir(p)
            } else {
                std::fs::remove_file(p)
            };
        }
        return Err(e);
    }
    let git_note = if args.vcs == Vcs::Git {
        git_repository("git".as_ref(), &path, empty, GIT_LIMIT)
    } else {
        String::new()
    };
    super::say(&format!(
        "created {name} in {}{git_note}\n\n  cd {}\n  cargo build\n  hpc run -n 4 target/debug/{name}\n  \
         cargo xtask image{}            # container image, Apptainer and Slurm files\n  \
         hpc cluster up --bin target/release   # Slurm in containers here: see README.md\n\n\
         The launcher `hpc` comes from `{}` (`--features mpi` for mpirun/srun).",
        hpc_io::message::path(&path),
        hpc_io::message::path(&path),
        image_flag(&name),
        sdk.install()
    ))
    .with_context(|| {
        format!(
            "the project {name} was written in {}, but its report was not",
            hpc_io::message::path(&path)
        )
    })?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `git` that hangs is stopped at its limit and named in the report:
    /// `hpc new` waited for it without end (pass 18's noticed list).
    #[test]
    fn a_git_that_hangs_is_stopped_and_named() {
        use std::os::unix::fs::PermissionsExt;
        let d = hpc_test_support::TmpDir::unmade("hpc-new", "git-hang");
        std::fs::create_dir_all(d.join("w")).unwrap();
        let git = d.join("git");
        std::fs::write(&git, "#!/bin/sh\nexec sleep 60\n").unwrap();
        std::fs::set_permissions(&git, std::fs::Permissions::from_mode(0o755)).unwrap();
        let t = std::time::Instant::now();
        let note = git_repository(
            git.as_os_str(),
            &d.join("w"),
            true,
            std::time::Duration::from_millis(300),
        );
        let took = t.elapsed();
        let _ = std::fs::remove_dir_all(&d);
        assert!(took < std::time::Duration::from_secs(10), "{took:?}");
        assert!(
            note.starts_with(" (no git repository: ")
                && note.contains("git rev-parse --is-inside-work-tree did not end within 0.3 s"),
            "{note}"
        );
    }

    #[test]
    fn names_are_checked_like_cargo() {
        for ok in ["my-sim", "lif_model", "_x", "a1", "Brunel2"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "1abc",
            "-x",
            "my sim",
            "é",
            "a/b",
            "fn",
            "self",
            "test",
            "std",
            "xtask",
            "hpc",
            "hpc-rs",
            "con",
            "COM1",
            &"x".repeat(65),
        ] {
            let e = check_name(bad).unwrap_err().0;
            assert!(e.contains("invalid package name"), "{bad:?}: {e}");
        }
    }

    fn sdks() -> Vec<Sdk> {
        vec![
            Sdk::Registry,
            Sdk::Path("/opt/hpc-rs".into(), "0.7.1".into()),
            Sdk::Git("https://example.org/hpc-rs.git".into()),
        ]
    }

    #[test]
    fn templates_have_no_unfilled_placeholders() {
        for sdk in sdks() {
            for f in FILES {
                let t = fill(f.text, "demo-app", &sdk);
                assert!(!t.contains("{{"), "{}: {t}", f.path);
                assert!(!fill(f.path, "demo-app", &sdk).contains("{{"));
            }
        }
        let cargo = fill(FILES[0].text, "demo-app", &Sdk::Registry);
        assert!(cargo.contains("name = \"demo-app\""));
        assert!(cargo.contains(&format!("hpc-rs = \"{}\"", env!("CARGO_PKG_VERSION"))));
        assert!(cargo.contains("mpi = [\"hpc-rs/mpi\"]"));
        assert!(!cargo.contains("patch"));
    }

    #[test]
    fn an_sdk_source_becomes_a_patch_table_that_parses() {
        for sdk in sdks().into_iter().skip(1) {
            let cargo: toml::Table = fill(FILES[0].text, "demo-app", &sdk).parse().unwrap();
            let patch = cargo["patch"]["crates-io"].as_table().unwrap();
            assert_eq!(patch.len(), PATCHED.len(), "{patch:?}");
            match &sdk {
                Sdk::Path(root, v) => {
                    assert_eq!(
                        patch["hpc-image"]["path"].as_str().unwrap(),
                        root.join("crates/hpc-image").to_str().unwrap()
                    );
                    assert_eq!(cargo["dependencies"]["hpc-rs"].as_str(), Some(v.as_str()));
                }
                Sdk::Git(url) => {
                    assert_eq!(patch["hpc-rs"]["git"].as_str(), Some(url.as_str()));
                }
                Sdk::Registry => unreachable!(),
            }
            let x: toml::Table = fill(FILES[2].text, "demo-app", &sdk).parse().unwrap();
            assert_eq!(x["dependencies"]["hpc-image"].as_str(), Some(sdk.version()));
        }
    }

    #[test]
    fn sdk_sources_are_checked() {
        assert_eq!(Sdk::parse(None).unwrap(), Sdk::Registry);
        for url in [
            "https://h/x.git",
            "ssh://git@h/x",
            "git@github.com:o/x.git",
            "file:///x",
        ] {
            assert_eq!(Sdk::parse(Some(url)).unwrap(), Sdk::Git(url.into()));
        }
        assert!(Sdk::parse(Some(" ")).unwrap_err().0.contains("empty"));
        for (url, why) in [
            ("git+://x", "cargo takes git URLs beginning with https://"),
            ("https://", "no host or path"),
            ("git@:x", "git@HOST:PATH"),
            ("git@h:", "git@HOST:PATH"),
            ("https://h/a b", "not a usable git URL"),
            // A control character would make the new Cargo.toml unreadable.
            ("https://h/a\u{1}b", "not a usable git URL"),
            ("https://h/a\rb", "not a usable git URL"),
            ("https://h/a\u{7f}b", "not a usable git URL"),
        ] {
            let e = Sdk::parse(Some(url)).unwrap_err().0;
            assert!(e.contains(why), "{url}: {e}");
        }
        assert!(Sdk::parse(Some("/no/such/dir"))
            .unwrap_err()
            .0
            .contains("git URL"));
        let not = tempfile_dir();
        let e = Sdk::parse(Some(not.to_str().unwrap())).unwrap_err().0;
        assert!(e.contains("not a checkout of the hpc-rs SDK"), "{e}");
        assert!(e.contains("crates/hpc-rs/Cargo.toml is not there"), "{e}");
        // A manifest that is there but no file was said not to be there.
        for c in PATCHED {
            std::fs::create_dir_all(not.join("crates").join(c)).unwrap();
        }
        std::os::unix::fs::symlink("/dev/zero", not.join("crates/hpc-rs/Cargo.toml")).unwrap();
        let e = Sdk::parse(Some(not.to_str().unwrap())).unwrap_err().0;
        assert!(
            e.contains("crates/hpc-rs/Cargo.toml is not a regular file"),
            "{e}"
        );
        std::fs::remove_dir_all(not.join("crates")).unwrap();
        // This repository is one.
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        match Sdk::parse(Some(repo.to_str().unwrap())).unwrap() {
            Sdk::Path(root, v) => {
                assert!(root.join("crates/hpc-rs/Cargo.toml").is_file());
                assert_eq!(v, env!("CARGO_PKG_VERSION"));
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir(not).unwrap();
    }

    /// A checkout whose path or version the new manifests cannot hold as written
    /// (a control character in its path, a quote in its version) is refused: the
    /// workspace written would not parse.
    #[test]
    fn an_sdk_checkout_the_new_manifests_cannot_hold_is_refused() {
        let base = hpc_test_support::TmpDir::unmade("hpc-new", "sdk-odd");
        let fake = |name: &str, version: &str| {
            let root = base.join(name);
            for c in PATCHED {
                let d = root.join("crates").join(c);
                std::fs::create_dir_all(&d).unwrap();
                std::fs::write(d.join("Cargo.toml"), "[package]\n").unwrap();
            }
            let version = toml::Value::String(version.into());
            let manifest = format!("[workspace.package]\nversion = {version}\n");
            std::fs::write(root.join("Cargo.toml"), manifest).unwrap();
            root
        };
        let ok = fake("plain\ttab", "0.3.0-rc.1+b");
        assert!(matches!(Sdk::parse(ok.to_str()), Ok(Sdk::Path(_, v)) if v == "0.3.0-rc.1+b"));
        for name in ["a\rb", "a\u{1}b", "a\u{7f}b"] {
            let e = Sdk::parse(fake(name, "0.3.0").to_str()).unwrap_err().0;
            assert!(e.contains("TOML cannot hold"), "{name:?}: {e}");
        }
        let long = "1".repeat(100_000);
        for version in [
            "1.0\"x",
            "",
            "1 0",
            "1.0\n",
            "1.0",
            &long,
            "01.2.3",
            "1.2.3-",
            "1.2.3+a+b",
        ] {
            let e = Sdk::parse(fake("v", version).to_str()).unwrap_err().0;
            assert!(e.contains("is not a version"), "{version:?}: {e}");
        }
        // A manifest that is a FIFO is named as one (not read: no hang), not taken
        // for a manifest without a version.
        let fifo = fake("fifo", "0.3.0");
        std::fs::remove_file(fifo.join("Cargo.toml")).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(fifo.join("Cargo.toml"))
            .status()
            .expect("mkfifo");
        assert!(made.success());
        let e = Sdk::parse(fifo.to_str()).unwrap_err().0;
        assert!(e.contains("Cargo.toml is a FIFO"), "{e}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// A fresh empty directory.
    fn tempfile_dir() -> hpc_test_support::TmpDir {
        hpc_test_support::TmpDir::new("hpc-new", "sdk")
    }
}
