//! Container images of a cargo binary, for HPC clusters, without a daemon.
//!
//! `hpc-image` builds a binary of a cargo workspace in release mode and writes a
//! container image for it: an OCI image layout, `oci-archive` and/or `docker-archive`
//! tarballs, optionally a SIF (when Apptainer is installed), and the files a user runs
//! it with (Apptainer definition, Slurm batch scripts, a Podman/Docker run script, a
//! Containerfile), filled from the crate's `templates/`. It needs no container engine
//! to build: `mmdebstrap` makes the Debian base once, everything else is written by
//! this crate.
//!
//! The image has two layers: a Debian base made by `mmdebstrap` (cached under
//! `<target>/hpc-image-cache/`, or `HPC_IMAGE_CACHE`, shared by every build) and a thin
//! app layer with the binary and the shared libraries it links that the base lacks.
//! Both are written deterministically, so the same inputs give the same manifest
//! digest.
//!
//! # `cargo xtask image` in your own workspace
//!
//! It is a library so that any workspace gets the command through the
//! [`cargo xtask`](https://github.com/matklad/cargo-xtask) pattern (`hpc new` writes
//! this for you). A member crate `xtask/` with
//!
//! ```toml
//! [package]
//! name = "xtask"
//! version = "0.1.0"
//! edition = "2021"
//! publish = false
//!
//! [dependencies]
//! clap = { version = "4", features = ["derive"] }
//! hpc-image = "0.1"
//! ```
//!
//! and this `xtask/src/main.rs`:
//!
//! ```no_run
//! use clap::Parser;
//!
//! /// Automation of this workspace.
//! #[derive(Parser)]
//! #[command(name = "cargo xtask")]
//! enum Task {
//!     /// Build a container image of a binary of this workspace.
//!     Image(hpc_image::Args),
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     match Task::parse() {
//!         Task::Image(args) => hpc_image::exit(hpc_image::run(args)),
//!     }
//! }
//! ```
//!
//! plus the alias `xtask = "run --quiet --package xtask --"` under `[alias]` in
//! `.cargo/config.toml` gives `cargo xtask image [BINARY] [--features mpi] ...`. The
//! binary is looked up in the `cargo metadata` of the workspace that the command is
//! run in (or `--manifest-path`); without a name, the workspace's only binary outside
//! the `xtask` package is taken.
//!
//! # Exit status
//!
//! [`exit`] maps a result to the process status: 0 on success, 2 for bad input
//! ([`UsageError`]: no such binary, a workspace without one, an unreadable
//! `--base`), detected before anything is written, and 1 for a failure while building
//! (cargo, mmdebstrap, I/O).
//!
//! # Requirements
//!
//! Linux with `ldd` (glibc) and, for the base layer, `mmdebstrap` and a reachable
//! Debian mirror (or `--base` with an existing image). The images are Debian 12
//! (bookworm) based; the binary must have been built against a glibc no newer than
//! bookworm's (2.36), which holds when it is built on Debian 12, Ubuntu 22.04 or
//! RHEL 8/9.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

/// `eprintln!` without its panic: a line of progress, or of an error, to
/// standard error, where a failed write (`2>/dev/full`) is let go, as every
/// `hpc` command lets it go (the status still says how the build went);
/// `eprintln!` panicked (status 101) before anything was built.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($t)*);
    }};
}

pub mod base;
pub mod oci;
pub mod sif;
pub mod sys;
pub mod tar;
pub mod templates;

/// Image formats `--format` accepts.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `<app>-oci.tar`: the OCI layout as an `oci-archive`, with Docker's `manifest.json`
    /// beside it (podman load, docker load, skopeo, Apptainer).
    Oci,
    /// `<app>-docker.tar`: `docker save` format (docker load, podman load).
    Docker,
    /// `<app>.sif`: built with `apptainer build` when Apptainer is on the PATH.
    Sif,
}

/// How MPI gets into the container.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MpiModel {
    /// Open MPI, PMIx and UCX inside the image; the host's Slurm starts the ranks
    /// through PMIx.
    Hybrid,
    /// No MPI inside the image: the host's MPI libraries are bound in at run time.
    Bind,
}

impl MpiModel {
    fn name(self) -> &'static str {
        match self {
            MpiModel::Hybrid => "hybrid",
            MpiModel::Bind => "bind",
        }
    }
}

/// Arguments of `cargo xtask image`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    cargo xtask image                        the workspace's only binary, hybrid MPI model\n  \
    cargo xtask image my-sim --features mpi --format oci,docker\n  \
    cargo xtask image my-sim --features mpi --mpi bind --gpu --out /scratch/images/my-sim\n  \
    cargo xtask image --setup-tools          install podman, skopeo, mmdebstrap (Debian, as root)\n\n\
    Exit status: 0 done, 2 bad input (nothing written), 1 the build failed.")]
pub struct Args {
    /// Binary or example of the workspace to package (default: the workspace's only
    /// binary outside the `xtask` package).
    pub binary: Option<String>,
    /// The workspace's `Cargo.toml` (default: cargo's search from the current
    /// directory).
    #[arg(long, value_name = "PATH")]
    pub manifest_path: Option<PathBuf>,
    /// Cargo profile to build the binary with.
    #[arg(long, default_value = "release", value_name = "NAME")]
    pub profile: String,
    /// Archive formats to write (comma-separated); the OCI layout directory is always
    /// written.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "oci")]
    pub format: Vec<Format>,
    /// MPI model: MPI inside the image (hybrid) or bound in from the host (bind).
    #[arg(long, value_enum, default_value_t = MpiModel::Hybrid)]
    pub mpi: MpiModel,
    /// Add GPU access to the run scripts (--nv, --gpus all, CDI device).
    #[arg(long)]
    pub gpu: bool,
    /// Output directory (default: `<target>/image/<binary>`); a folder of the
    /// system (`/`, `/tmp`, `/etc`, `/usr/...`) is refused.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Where base layers are cached (default: `HPC_IMAGE_CACHE`, else
    /// `<target>/hpc-image-cache`); several workspaces can share one. A folder of
    /// the system is refused, as for --out.
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// Existing base image instead of mmdebstrap: OCI layout dir, oci-archive or
    /// docker-archive.
    #[arg(long)]
    pub base: Option<PathBuf>,
    /// Cargo features for the binary's package (e.g. `mpi`).
    #[arg(long, short = 'F')]
    pub features: Option<String>,
    /// Also put the `hpc` command (launcher, doctor, selftest) into the image: built
    /// from the workspace when it has it (with the `mpi` feature when --features has
    /// it), else the `hpc` on the PATH (`cargo install hpc-cli`).
    #[arg(long)]
    pub with_hpc: bool,
    /// Image name (default: the binary's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Image tag.
    #[arg(long, default_value = "latest")]
    pub tag: String,
    /// Make the binary the image's entrypoint (default: it is the default command, so
    /// that `podman run IMAGE other-command` works as with `apptainer exec`).
    #[arg(long)]
    pub entrypoint: bool,
    /// Install the container tool chain (podman, skopeo, umoci, mmdebstrap) with
    /// apt-get as root; alone, only that.
    #[arg(long)]
    pub setup_tools: bool,
}

/// Step lines with timings.
struct Progress {
    n: usize,
    t: Instant,
    total: Instant,
}

impl Progress {
    fn new() -> Self {
        Self {
            n: 0,
            t: Instant::now(),
            total: Instant::now(),
        }
    }

    fn step(&mut self, what: &str) {
        self.n += 1;
        self.t = Instant::now();
        say!("[{}] {what}", self.n);
    }

    fn done(&self, note: &str) {
        say!("    {note} ({:.1}s)", self.t.elapsed().as_secs_f64());
    }
}

/// Bad input, found before anything is written: [`exit`] turns it into status 2.
pub use hpc_io::message::UsageError;

/// Fails with a [`UsageError`].
macro_rules! usage {
    ($($t:tt)*) => { return Err(anyhow::Error::new(UsageError(format!($($t)*)))) };
}

mod stage;
mod workspace;

pub use workspace::{
    default_bin, find_bin, metadata, parse_metadata, source_label, BinTarget, Workspace,
};

/// Creates `path` in the output folder as a new file: whatever is at that name
/// (an earlier build's file, a symbolic link or a FIFO put there) is removed,
/// never followed or opened ([`hpc_io::atomic::create_fresh`]), so that no
/// archive, script or summary is written through a link into another file. The
/// error names the file.
pub(crate) fn create_new(path: &Path) -> Result<fs::File> {
    Ok(hpc_io::atomic::create_fresh(path)?)
}

/// Writes `bytes` into the new file `path` ([`create_new`]) with permissions
/// `mode`, set on the open file.
pub(crate) fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt as _;
    let mut f = create_new(path)?;
    f.write_all(bytes)
        .and_then(|()| f.set_permissions(fs::Permissions::from_mode(mode)))
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", hpc_io::message::path(path)))
}

/// Checks an image's name and tag as an image reference takes them (the OCI
/// distribution grammar): a name of lowercase letters and digits in components
/// joined by `.`, `_`, `__` or dashes, components separated by `/`; a tag of at
/// most 128 letters, digits, `_`, `.` and `-`, not beginning with `.` or `-`. The
/// error says which is wrong and why. Anything else would make an archive that
/// `podman load` or `docker load` refuses, and would be pasted as written into
/// the generated run scripts.
///
/// ```
/// assert!(hpc_image::check_reference("my-sim", "v1.2").is_ok());
/// assert!(hpc_image::check_reference("lab/my_sim", "latest").is_ok());
/// assert!(hpc_image::check_reference("MySim", "latest").is_err());
/// assert!(hpc_image::check_reference("sim", "a b").is_err());
/// assert!(hpc_image::check_reference("sim", "x;reboot").is_err());
/// ```
pub fn check_reference(name: &str, tag: &str) -> std::result::Result<(), String> {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let component_ok = |c: &str| {
        let b = c.as_bytes();
        if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
            return false;
        }
        // Separators between alphanumerics: one `.`, one or two `_`, or dashes.
        let mut i = 0;
        while i < b.len() {
            if alnum(b[i]) {
                i += 1;
                continue;
            }
            let start = i;
            while i < b.len() && !alnum(b[i]) {
                i += 1;
            }
            let sep = &c[start..i];
            let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-');
            if !ok {
                return false;
            }
        }
        true
    };
    if name.is_empty() || name.len() > 255 || !name.split('/').all(component_ok) {
        return Err(format!(
            "image name {} is not an image reference's name: lowercase letters and \
             digits, joined by '.', '_', '__' or '-', in components separated by '/' (give \
             --name)",
            hpc_env::shown(name)
        ));
    }
    let t = tag.as_bytes();
    let tag_char = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-');
    if t.is_empty() || t.len() > 128 || matches!(t[0], b'.' | b'-') || !t.iter().all(tag_char) {
        return Err(format!(
            "image tag {} is not a tag: 1 to 128 letters, digits, '_', '.' and '-', \
             not beginning with '.' or '-'",
            hpc_env::shown(tag)
        ));
    }
    Ok(())
}

/// The process status for a result of [`run`]: 0 for success, 2 for a
/// [`UsageError`], 1 for any other failure. Prints the error (with its causes) to
/// standard error.
pub fn exit(result: Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            say!("error: {}", hpc_io::message::chain(e.as_ref()));
            std::process::ExitCode::from(exit_status(&e))
        }
    }
}

/// 2 when the error is (or wraps) a [`UsageError`], else 1.
pub fn exit_status(e: &anyhow::Error) -> u8 {
    if e.chain().any(|c| c.is::<UsageError>()) {
        2
    } else if let Some(sys::Interrupted(sig)) = e.chain().find_map(|c| c.downcast_ref()) {
        // As a shell reports a program that a signal stopped.
        (128 + sig).clamp(0, 255) as u8
    } else {
        1
    }
}

/// One line of `ldd` output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LddLib {
    /// The name the binary asks for (`libhwloc.so.15`).
    pub soname: String,
    /// Where the host's loader found it (`None`: virtual, like linux-vdso).
    pub path: Option<String>,
}

/// Parses `ldd` output; fails on `not found` libraries.
pub fn parse_ldd(text: &str) -> Result<Vec<LddLib>> {
    let mut out = Vec::new();
    let mut missing = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.contains("statically linked") || line.starts_with("not a dynamic") {
            continue;
        }
        let strip_addr = |s: &str| -> String {
            match s.rfind(" (0x") {
                Some(i) => s[..i].trim().to_string(),
                None => s.trim().to_string(),
            }
        };
        if let Some((name, rest)) = line.split_once(" => ") {
            let rest = rest.trim();
            if rest.starts_with("not found") {
                missing.push(name.trim().to_string());
                continue;
            }
            let path = strip_addr(rest);
            out.push(LddLib {
                soname: name.trim().to_string(),
                path: (!path.is_empty()).then_some(path),
            });
        } else {
            let p = strip_addr(line);
            if p.starts_with('/') {
                let soname = p.rsplit('/').next().unwrap_or(&p).to_string();
                out.push(LddLib {
                    soname,
                    path: Some(p),
                });
            } else {
                out.push(LddLib {
                    soname: p,
                    path: None,
                });
            }
        }
    }
    if !missing.is_empty() {
        bail!(
            "the host's loader cannot find: {} (install the libraries the binary links)",
            missing.join(", ")
        );
    }
    Ok(out)
}

/// Shared objects under `dir` (recursively), sorted.
fn shared_objects(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    let mut v: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    v.sort();
    for p in v {
        if p.is_dir() && !p.is_symlink() {
            shared_objects(&p, out);
        } else if p.extension().is_some_and(|e| e == "so") {
            out.push(p);
        }
    }
}

/// The libraries the MPI library and its plugins (Open MPI MCA components, PMIx
/// plugins, verbs providers) load: what the bind model takes from the host. Plugins
/// are opened with `dlopen`, so `ldd` of the binary alone does not show their needs.
fn mpi_stack(libmpi: &str) -> Result<BTreeSet<String>> {
    let mut set: BTreeSet<String> = [libmpi.to_string()].into();
    let mut objs = vec![PathBuf::from(libmpi)];
    for d in BIND_EXTRA_PATHS {
        shared_objects(Path::new(d), &mut objs);
    }
    for o in objs {
        let out = ldd_output(&mut Command::new("ldd"), &o, QUERY_LIMIT)?;
        let text = String::from_utf8_lossy(&out.stdout);
        // Plugins for hardware or libraries the host lacks have unresolved needs: skip
        // those lines, the plugin would not load on the host either.
        let ok: String = text
            .lines()
            .filter(|l| !l.contains("not found"))
            .map(|l| format!("{l}\n"))
            .collect();
        for l in parse_ldd(&ok)? {
            if let Some(p) = l.path {
                set.insert(p);
            }
        }
    }
    Ok(set)
}

fn ldd(path: &Path) -> Result<Vec<LddLib>> {
    let out = ldd_output(&mut Command::new("ldd"), path, QUERY_LIMIT)?;
    parse_ldd(&String::from_utf8_lossy(&out.stdout))
}

/// The time a tool that only looks (`ldd` of a binary or a library) is given.
const QUERY_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// `ldd` (the program `ldd`) of `path`, bounded in memory and in time: an `ldd`
/// that printed without end was read into memory without bound (gigabytes in
/// seconds), and one that hung hung the build. Output beyond what is kept is
/// refused, not parsed in part (a library list cut short).
fn ldd_output(
    ldd: &mut Command,
    path: &Path,
    limit: std::time::Duration,
) -> Result<std::process::Output> {
    let out = crate::sys::output_within(ldd.arg(path), limit).with_context(|| {
        format!(
            "cannot run ldd of {} (install libc-bin)",
            hpc_io::message::path(path)
        )
    })?;
    if out.stdout.len() as u64 >= crate::sys::MAX_TOOL_OUTPUT {
        bail!(
            "ldd of {} printed {} bytes or more, more than any list of libraries: not read",
            hpc_io::message::path(path),
            crate::sys::MAX_TOOL_OUTPUT
        );
    }
    Ok(out)
}

/// The path a host library gets inside a merged-`/usr` Debian image.
pub fn usr_merged(path: &str) -> String {
    let p = path.trim_start_matches('/');
    for d in ["lib/", "lib64/", "bin/", "sbin/"] {
        if p.starts_with(d) {
            return format!("usr/{p}");
        }
    }
    p.to_string()
}

/// Whether the base already has a library the host found at `path`.
pub fn base_has(files: &BTreeSet<String>, path: &str) -> bool {
    let p = path.trim_start_matches('/');
    files.contains(p) || files.contains(&usr_merged(p))
}

/// Host paths, besides the libraries themselves, that the bind model binds in: Open
/// MPI's plugins and configuration, PMIx's plugins, the verbs providers.
pub const BIND_EXTRA_PATHS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/openmpi",
    "/usr/lib/x86_64-linux-gnu/pmix2",
    "/usr/lib/x86_64-linux-gnu/libibverbs",
    "/usr/share/openmpi",
    "/usr/share/pmix",
    "/etc/openmpi",
    "/etc/libibverbs.d",
];

/// The placeholder names [`templates::fill`] is given values for.
pub fn template_keys() -> &'static [&'static str] {
    &[
        "app",
        "apptainer_flags",
        "archive",
        "bind_paths",
        "bootstrap",
        "def",
        "docker_gpu",
        "env_dockerfile",
        "env_sh",
        "features",
        "image",
        "labels_def",
        "labels_dockerfile",
        "mpi",
        "packages",
        "podman_binds",
        "podman_gpu",
        "revision",
        "sif",
        "suite",
    ]
}

fn git(root: &Path, args: &[&str]) -> Option<String> {
    // Bounded as `ldd` is: a git that hangs (a workspace on a file system that
    // stopped answering) is stopped and said, the revision then unknown.
    let out = match crate::sys::output_within(
        Command::new("git").args(args).current_dir(root),
        QUERY_LIMIT,
    ) {
        Ok(out) => out,
        Err(e) => {
            if e.is::<crate::sys::TimedOut>() {
                say!("    warning: {e}");
            }
            return None;
        }
    };
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Where an image's date came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dated {
    /// `SOURCE_DATE_EPOCH` was set.
    Env,
    /// The time of the workspace's last commit.
    Commit,
    /// The time of the build: the workspace has no commit (or is not in git),
    /// so the image is not reproducible.
    Now,
}

/// The image's date: `SOURCE_DATE_EPOCH` when set, else the last commit's time,
/// else (no commit yet) the time of the build, never 1970.
fn source_date_epoch(root: &Path) -> Result<(u64, Dated)> {
    source_date_epoch_from(std::env::var_os("SOURCE_DATE_EPOCH"), root)
}

/// [`source_date_epoch`] with `SOURCE_DATE_EPOCH`'s value given: one that is
/// not UTF-8 is refused, not taken as unset (the image would be dated
/// otherwise without a word).
fn source_date_epoch_from(var: Option<std::ffi::OsString>, root: &Path) -> Result<(u64, Dated)> {
    if let Some(v) = var {
        let s = v.into_string().map_err(|v| {
            anyhow::anyhow!(
                "SOURCE_DATE_EPOCH={} is not valid UTF-8 (shown with U+FFFD for the invalid \
                 bytes): give a number of seconds",
                hpc_env::shown(&v.to_string_lossy())
            )
        })?;
        // Named cut when long (100,000 digits were echoed whole).
        let shown = hpc_env::short(&s);
        let e: u64 = s
            .trim()
            .parse()
            .with_context(|| format!("SOURCE_DATE_EPOCH={shown} is not a number of seconds"))?;
        // The image's `created` is an RFC 3339 date, whose year has four digits: a
        // later one was written as `584554051223-11-09T…`, which no tool reads.
        if e > LAST_RFC3339_SECOND {
            bail!(
                "SOURCE_DATE_EPOCH={shown} is after 9999-12-31 ({LAST_RFC3339_SECOND}), the last \
                 date an image's creation time can hold"
            );
        }
        return Ok((e, Dated::Env));
    }
    if let Some(e) = git(root, &["log", "-1", "--format=%ct", "HEAD"]).and_then(|s| s.parse().ok())
    {
        // As for the variable: a commit dated later (git takes any date) made
        // `11476-08-15T05:20:00Z`, which no tool reads.
        if e > LAST_RFC3339_SECOND {
            bail!(
                "the workspace's last commit is dated {e} seconds, after 9999-12-31 \
                 ({LAST_RFC3339_SECOND}), the last date an image's creation time can hold: \
                 set SOURCE_DATE_EPOCH to the image's date"
            );
        }
        return Ok((e, Dated::Commit));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Ok((now, Dated::Now))
}

/// 9999-12-31T23:59:59Z: the last second [`rfc3339`] writes with a four-digit
/// year, as RFC 3339 requires.
pub const LAST_RFC3339_SECOND: u64 = 253_402_300_799;

/// RFC 3339 UTC time of a Unix timestamp.
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn dpkg_owner(path: &str) -> Option<String> {
    for p in [path.to_string(), format!("/{}", usr_merged(path))] {
        let out =
            crate::sys::output_within(Command::new("dpkg").args(["-S", &p]), QUERY_LIMIT).ok()?;
        if out.status.success() {
            let s = String::from_utf8_lossy(&out.stdout);
            let pkg = s.split(':').next()?.trim().to_string();
            return Some(pkg);
        }
    }
    None
}

use hpc_io::message::shell_quote;

/// The folder of `<target>` that cargo puts a profile's output in.
pub fn profile_dir(profile: &str) -> &str {
    match profile {
        "dev" | "test" => "debug",
        "bench" => "release",
        p => p,
    }
}

/// Cargo's arguments for a profile: `--release` for the release profile (as the
/// command has always recorded it), else `--profile NAME`.
fn profile_args(profile: &str) -> Vec<String> {
    if profile == "release" {
        vec!["--release".into()]
    } else {
        vec!["--profile".into(), profile.into()]
    }
}

/// Whether a `--features` list asks for `mpi` (or `dep/mpi`).
fn wants_mpi(features: &str) -> bool {
    features
        .split([',', ' '])
        .any(|f| f == "mpi" || f.ends_with("/mpi"))
}

/// The features an `hpc --version` line lists: `hpc 0.1.0 (features: mpi)` gives
/// `["mpi"]`, `(features: none; ...)` none; `None` when the line has no such list
/// (not hpc-cli's launcher, or one older than the list).
pub fn hpc_features(version: &str) -> Option<Vec<String>> {
    let rest = &version[version.find("(features:")? + "(features:".len()..];
    let list = &rest[..rest.find([';', ')'])?];
    Some(
        list.split([',', ' '])
            .filter(|f| !f.is_empty() && *f != "none")
            .map(str::to_string)
            .collect(),
    )
}

/// Checks that the `hpc` at `path` has MPI exactly when the image does (`--features`
/// of the image is `features`): an MPI launcher needs the MPI libraries the image was
/// not made for, and a launcher without MPI cannot start the image's MPI ranks. The
/// error says how to get the right one.
pub fn check_hpc_features(path: &Path, features: &str) -> Result<()> {
    let image_mpi = wants_mpi(features);
    let install = if image_mpi {
        "cargo install hpc-cli --features mpi"
    } else {
        "cargo install hpc-cli"
    };
    let out = version_of(path)?;
    let version = String::from_utf8_lossy(&out).trim().to_string();
    let Some(hpc) = hpc_features(&version) else {
        let version = hpc_env::shown(&version);
        usage!(
            "--with-hpc: {} does not list its features in `--version` (it printed {version}), \
             so whether it has MPI is unknown; install hpc-cli's launcher with: {install}",
            hpc_io::message::path(path)
        );
    };
    let hpc_mpi = hpc.iter().any(|f| f == "mpi");
    if image_mpi && !hpc_mpi {
        usage!(
            "--with-hpc: {} ({version}) was built without MPI, but the image is built with \
             --features {features}; install one with MPI: {install} (or build the image \
             without --features mpi)",
            hpc_io::message::path(path)
        );
    }
    if hpc_mpi && !image_mpi {
        usage!(
            "--with-hpc: {} ({version}) was built with MPI, but the image is built without \
             it (--features {}); install one without MPI: {install} (or build the image \
             with --features mpi)",
            hpc_io::message::path(path),
            if features.is_empty() {
                "not given"
            } else {
                features
            }
        );
    }
    Ok(())
}

/// How long `hpc --version` may take ([`version_of`]).
const VERSION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The most bytes of `hpc --version` read ([`version_of`]).
const MAX_VERSION_BYTES: u64 = 64 << 10;

/// What `path --version` prints: at most [`MAX_VERSION_BYTES`], within
/// [`VERSION_TIMEOUT`], its input closed. An `hpc` on the PATH that never
/// answered kept the command waiting for ever, and one that never stopped
/// printing was read into memory without end.
fn version_of(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read as _;
    use std::process::Stdio;
    let mut child = Command::new(path)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| {
            format!(
                "--with-hpc: running {} --version",
                hpc_io::message::path(path)
            )
        })?;
    let out = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = out.take(MAX_VERSION_BYTES).read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    let got = rx.recv_timeout(VERSION_TIMEOUT);
    let _ = child.kill();
    let _ = child.wait();
    match got {
        Ok(buf) => Ok(buf),
        Err(_) => usage!(
            "--with-hpc: {} --version did not answer within {} s; install hpc-cli's \
             launcher with: cargo install hpc-cli",
            hpc_io::message::path(path),
            VERSION_TIMEOUT.as_secs()
        ),
    }
}

/// The `hpc` on the PATH, checked against the image's features, when the workspace
/// has no `hpc` binary to build; `None` when it has one (which must then have an
/// `mpi` feature if the image has MPI). Called before anything is built.
fn path_hpc(ws: &Workspace, args: &Args, features: &str) -> Result<Option<PathBuf>> {
    if !args.with_hpc {
        return Ok(None);
    }
    if let Some(hpc) = ws.bins.iter().find(|b| b.name == "hpc" && !b.example) {
        if wants_mpi(features) && !hpc.features.iter().any(|f| f == "mpi") {
            usage!(
                "--with-hpc: the workspace's `hpc` (package {0}) has no `mpi` feature, but \
                 the image is built with --features {features}; give {0} an `mpi` feature, \
                 or build the image without --features mpi",
                hpc.package
            );
        }
        return Ok(None);
    }
    let Some(path) = crate::sys::which("hpc") else {
        usage!(
            "--with-hpc: this workspace has no `hpc` binary and none is on the PATH; \
             install it with: cargo install hpc-cli{}",
            if wants_mpi(features) {
                " --features mpi"
            } else {
                ""
            }
        );
    };
    check_hpc_features(&path, features)?;
    Ok(Some(path))
}

/// The `hpc` launcher to put beside the binary: built from the workspace when it has
/// one (with MPI when the image has it), else `on_path` (see [`path_hpc`]).
fn hpc_launcher(
    ws: &Workspace,
    args: &Args,
    features: &str,
    manifest: &[String],
    on_path: Option<PathBuf>,
) -> Result<PathBuf> {
    if let Some(path) = on_path {
        return Ok(path);
    }
    let hpc = ws
        .bins
        .iter()
        .find(|b| b.name == "hpc" && !b.example)
        .context("--with-hpc: the workspace's `hpc` binary")?;
    let mut b: Vec<String> = vec!["build".into()];
    b.extend(profile_args(&args.profile));
    b.extend(manifest.iter().cloned());
    b.extend([
        "-p".into(),
        hpc.package.clone(),
        "--bin".into(),
        "hpc".into(),
    ]);
    if wants_mpi(features) && hpc.features.iter().any(|f| f == "mpi") {
        b.extend(["--features".into(), "mpi".into()]);
    }
    crate::sys::run(crate::sys::cargo().args(&b))?;
    Ok(ws.target_dir.join(profile_dir(&args.profile)).join("hpc"))
}

/// Runs `cargo xtask image`: finds the binary, builds it, and writes the image and
/// its run files. Bad input fails with a [`UsageError`] before anything is built or
/// written.
pub fn run(args: Args) -> Result<()> {
    if args.setup_tools {
        crate::sys::apt(crate::sys::TOOL_PACKAGES)?;
        if args.binary.is_none() {
            return Ok(());
        }
    }
    let mut pr = Progress::new();
    let built = stage::binary::build(&args, &mut pr)?;
    let (ws, bin) = (&built.ws, &built.bin);
    let cache = built
        .cache
        .clone()
        .unwrap_or_else(|| ws.target_dir.join("hpc-image-cache"));
    let out_dir = args
        .out
        .clone()
        .unwrap_or_else(|| ws.target_dir.join("image").join(&bin.name));
    fs::create_dir_all(&out_dir)
        .with_context(|| format!("creating {}", hpc_io::message::path(&out_dir)))?;
    let out_dir = out_dir.canonicalize()?;
    // One build at a time writes an output folder: two at once (with caches of
    // their own) replaced each other's files, and one failed with "No such file
    // or directory", naming none. The claim goes with the build.
    let _out_claim = hpc_io::rundir::FileClaim::take(
        &out_dir.join("image.json"),
        &format!("cargo xtask image, pid {}", std::process::id()),
    )
    .map_err(|e| UsageError(format!("--out {}: {e}", hpc_io::message::path(&out_dir))))?;

    // From here a stop between the tools is held for the next stage's start,
    // and what the build had begun in the output folder is removed: one stopped
    // at once left `.image.json.lock`, `app-layer.tmp` and a part of `oci/`.
    let _stops = crate::sys::defer_stops();
    let mut begun = Begun::default();
    let result = write_image(&args, &built, &cache, &out_dir, &mut pr, &mut begun);
    if result.is_err() {
        begun.remove();
    }
    result
}

/// What a build has begun and not finished in its output folder: removed when
/// it stops or fails, so that nothing half-written is left.
#[derive(Default)]
pub(crate) struct Begun(Vec<PathBuf>);

impl Begun {
    pub(crate) fn begin(&mut self, path: PathBuf) {
        self.0.push(path);
    }

    pub(crate) fn end(&mut self, path: &Path) {
        self.0.retain(|p| p != path);
    }

    /// Removes what is left begun (a folder with what it holds), saying what
    /// it could not.
    fn remove(&mut self) {
        for p in self.0.drain(..).rev() {
            let gone = match fs::symlink_metadata(&p) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Ok(m) if m.is_dir() => fs::remove_dir_all(&p),
                _ => fs::remove_file(&p),
            };
            if let Err(e) = gone {
                say!(
                    "warning: cannot remove the unfinished {}: {e}",
                    hpc_io::message::path(&p)
                );
            }
        }
    }
}

/// The stages after the binaries are built, each started only if no stop came
/// ([`sys::stop_point`]), with what each begins in `out_dir` noted in `begun`.
fn write_image(
    args: &Args,
    built: &stage::binary::Built,
    cache: &Path,
    out_dir: &Path,
    pr: &mut Progress,
    begun: &mut Begun,
) -> Result<()> {
    let bin = &built.bin;
    // The cache is locked for the rest of the build: the base's blobs are read from
    // it until the layout is written.
    let _cache_lock = crate::sys::lock_dir(cache)?;
    sys::stop_point()?;
    let (spec, base, base_size) = stage::base_layer::base(args, cache, built.epoch, pr)?;
    sys::stop_point()?;
    let mut app = stage::app_layer::write(args, built, &base, out_dir, pr, begun)?;
    sys::stop_point()?;
    let image = stage::layout::write(args, built, &base, &app, pr)?;
    let part = app.layout.dir().to_path_buf();
    stage::layout::put_in_place(&mut app, out_dir)?;
    begun.end(&part);
    sys::stop_point()?;
    for name in [
        format!("{}-oci.tar", bin.name),
        format!("{}-docker.tar", bin.name),
    ] {
        begun.begin(out_dir.join(name));
    }
    let mut archives =
        stage::archives::write(args, &bin.name, built.epoch, &app, &image, out_dir, pr)?;
    begun.0.clear();
    sys::stop_point()?;
    let inputs = stage::scripts::Inputs {
        args,
        built,
        spec: &spec,
        app: &app,
        image: &image,
        archives: &archives,
    };
    let names = stage::scripts::write(&inputs, out_dir, pr)?;
    sys::stop_point()?;
    stage::summary::write_json(args, built, &app, &image, &archives, out_dir)?;
    let sif_error = stage::summary::build_sif(&mut archives, &names, out_dir, pr)?;
    stage::summary::report(&image, base_size, &app, &archives, out_dir, sif_error, pr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// Pass 19's leftover: a rebuild stopped once its layout stage began kept
    /// the earlier `image.json` but not its `oci/` (the stage removed it before
    /// writing the new one). The new layout is written beside it: a stop leaves
    /// the whole earlier image; a layout put in place takes the earlier
    /// `image.json` with the earlier `oci/`.
    #[test]
    fn a_stopped_rebuild_keeps_the_whole_earlier_image() {
        let d = hpc_test_support::TmpDir::new("hpc-image", "rebuild");
        let out: &Path = &d;
        fs::create_dir_all(out.join("oci/blobs/sha256")).unwrap();
        fs::write(out.join("oci/index.json"), "earlier").unwrap();
        fs::write(out.join("image.json"), "{}").unwrap();
        let mut begun = Begun::default();
        let layout = stage::app_layer::new_layout(out, &mut begun).unwrap();
        layout.put(oci::CONFIG_MEDIA_TYPE, b"{}").unwrap();
        // Stopped: what it began is removed, the earlier image is whole.
        begun.remove();
        assert_eq!(
            fs::read_to_string(out.join("oci/index.json")).unwrap(),
            "earlier"
        );
        assert!(out.join("image.json").is_file());
        let names = |out: &Path| {
            let mut n: Vec<String> = fs::read_dir(out)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            n.sort();
            n
        };
        assert_eq!(names(out), ["image.json", "oci"]);
        // Not stopped: the new layout replaces the earlier one and its summary.
        let mut begun = Begun::default();
        let layout = stage::app_layer::new_layout(out, &mut begun).unwrap();
        fs::write(layout.dir().join("index.json"), "new").unwrap();
        let mut app = stage::app_layer::App {
            layout,
            layer: oci::Layer {
                blob: oci::Descriptor {
                    media_type: String::new(),
                    digest: String::new(),
                    size: 0,
                },
                diff_id: String::new(),
                created_by: String::new(),
            },
            size: 0,
            app_libs: Default::default(),
            bind_paths: vec![],
            extra_packages: Default::default(),
        };
        stage::layout::put_in_place(&mut app, out).unwrap();
        assert_eq!(app.layout.dir(), out.join("oci"));
        assert_eq!(
            fs::read_to_string(out.join("oci/index.json")).unwrap(),
            "new"
        );
        assert_eq!(names(out), ["oci"]);
        // An `oci` that is a link is replaced, its target kept (the rename
        // failed over it: "Not a directory", after the earlier summary was gone).
        let target = d.join("target");
        fs::create_dir_all(&target).unwrap();
        fs::write(target.join("f"), "keep").unwrap();
        let o2 = d.join("o2");
        fs::create_dir_all(&o2).unwrap();
        std::os::unix::fs::symlink(&target, o2.join("oci")).unwrap();
        let mut begun = Begun::default();
        app.layout = stage::app_layer::new_layout(&o2, &mut begun).unwrap();
        stage::layout::put_in_place(&mut app, &o2).unwrap();
        assert!(fs::symlink_metadata(o2.join("oci")).unwrap().is_dir());
        assert_eq!(fs::read_to_string(target.join("f")).unwrap(), "keep");
    }

    /// What a stopped build had begun (a part of `oci/`, `app-layer.tmp`) is
    /// removed; what it finished, and what was there before, is kept.
    #[test]
    fn what_a_stopped_build_began_is_removed() {
        let d = hpc_test_support::TmpDir::unmade("hpc-image", "begun");
        fs::create_dir_all(d.join("oci/blobs/sha256")).unwrap();
        fs::write(d.join("oci/oci-layout"), "{}").unwrap();
        fs::write(d.join("app-layer.tmp"), "part").unwrap();
        fs::write(d.join("image.json"), "{}").unwrap();
        let mut begun = Begun::default();
        begun.begin(d.join("oci"));
        begun.begin(d.join("app-layer.tmp"));
        begun.begin(d.join("hello-oci.tar"));
        begun.begin(d.join("image.json"));
        begun.end(&d.join("image.json"));
        begun.remove();
        let left: Vec<_> = fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        let _ = fs::remove_dir_all(&d);
        assert_eq!(left, ["image.json"]);
    }

    /// An `ldd` that prints without end, or never ends, is bounded: it was read
    /// into memory without bound (4.4 GB in 20 s), or waited for without end.
    #[test]
    fn an_ldd_printing_without_end_or_hanging_is_bounded() {
        let limit = std::time::Duration::from_secs(30);
        let mut yes = Command::new("sh");
        yes.args([
            "-c",
            "head -c 20000000 /dev/zero | tr '\\0' x; exit 0",
            "ldd",
        ]);
        let e = ldd_output(&mut yes, Path::new("/bin/app"), limit).unwrap_err();
        assert!(
            format!("{e:#}").contains("ldd of /bin/app printed 8388608 bytes or more"),
            "{e:#}"
        );
        let mut hang = Command::new("sh");
        hang.args(["-c", "exec sleep 60", "ldd"]);
        let t = std::time::Instant::now();
        let e = ldd_output(
            &mut hang,
            Path::new("/bin/app"),
            std::time::Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(t.elapsed().as_secs() < 15, "{:?}", t.elapsed());
        assert!(
            format!("{e:#}").contains("cannot run ldd of /bin/app") && e.to_string().len() < 200,
            "{e:#}"
        );
    }

    /// Hostile-user pass 15: `SOURCE_DATE_EPOCH` past the year 9999 dated the
    /// image `584554051223-11-09T07:00:15Z` (status 0), a date no tool reads.
    #[test]
    fn a_date_after_the_year_9999_is_refused() {
        let root = Path::new("/nonexistent");
        let last = LAST_RFC3339_SECOND.to_string();
        assert_eq!(rfc3339(LAST_RFC3339_SECOND), "9999-12-31T23:59:59Z");
        assert_eq!(
            source_date_epoch_from(Some(last.into()), root).unwrap(),
            (LAST_RFC3339_SECOND, Dated::Env)
        );
        // A value of 100,000 digits is named cut.
        let long = "9".repeat(100_000);
        let e = source_date_epoch_from(Some(long.into()), root).unwrap_err();
        assert!(
            format!("{e:#}").len() < 300,
            "{} bytes",
            format!("{e:#}").len()
        );
        for late in ["253402300800", "99999999999999", "18446744073709551615"] {
            let e = source_date_epoch_from(Some(late.into()), root).unwrap_err();
            assert!(
                e.to_string()
                    .contains(&format!("SOURCE_DATE_EPOCH={late} is after 9999-12-31")),
                "{e}"
            );
        }
    }

    /// Hostile pass 20: a workspace whose last commit is dated after the year
    /// 9999 (git takes any date) dated the image `11476-08-15T05:20:00Z`, status
    /// 0; the variable's bound did not hold for the commit's date.
    #[test]
    fn a_commit_after_the_year_9999_is_refused() {
        let d = hpc_test_support::TmpDir::new("hpc-image", "late-commit");
        let git = |args: &[&str]| {
            let o = Command::new("git")
                .args(args)
                .current_dir(&*d)
                .env("GIT_COMMITTER_DATE", "@300000000000 +0000")
                .env("GIT_AUTHOR_DATE", "@300000000000 +0000")
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        };
        git(&["init", "-q"]);
        fs::write(d.join("f"), "x").unwrap();
        git(&["add", "f"]);
        git(&[
            "-c",
            "user.email=a@b",
            "-c",
            "user.name=a",
            "commit",
            "-qm",
            "late",
        ]);
        let e = source_date_epoch_from(None, &d).unwrap_err().to_string();
        assert!(
            e.contains("last commit is dated 300000000000 seconds, after 9999-12-31")
                && e.contains("set SOURCE_DATE_EPOCH"),
            "{e}"
        );
    }

    /// An `hpc` on the PATH that never answers `--version` kept the command
    /// waiting for ever; one that never stops printing was read without end.
    #[test]
    fn an_hpc_that_hangs_or_floods_is_refused_in_time() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = hpc_test_support::TmpDir::new("hpc-image", "fake-hpc");
        for (name, script, want) in [
            (
                "hang",
                "#!/bin/sh\nexec sleep 100\n",
                "did not answer within 10 s",
            ),
            (
                "flood",
                "#!/bin/sh\nexec yes\n",
                "does not list its features",
            ),
        ] {
            let p = d.join(name);
            fs::write(&p, script).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
            let t = std::time::Instant::now();
            let e = format!("{:#}", check_hpc_features(&p, "").unwrap_err());
            assert!(e.contains(want) && e.len() < 600, "{name}: {e:.300}");
            assert!(t.elapsed() < std::time::Duration::from_secs(30), "{name}");
        }
        let _ = fs::remove_dir_all(&d);
    }

    /// A symbolic link planted in the output folder under a script's or an
    /// archive's name is replaced, its target untouched (as `hpc man --dir`).
    #[test]
    fn outputs_are_never_written_through_a_planted_link() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = hpc_test_support::TmpDir::new("hpc-image", "planted");
        let victim = d.join("victim");
        fs::write(&victim, "keep").unwrap();
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
        let script = d.join("podman-run.sh");
        std::os::unix::fs::symlink(&victim, &script).unwrap();
        write_new(&script, b"#!/bin/sh\n", 0o755).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(
            fs::metadata(&victim).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(!fs::symlink_metadata(&script)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            fs::metadata(&script).unwrap().permissions().mode() & 0o777,
            0o755
        );
        let archive = d.join("app-oci.tar");
        std::os::unix::fs::symlink(&victim, &archive).unwrap();
        drop(create_new(&archive).unwrap());
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn image_names_and_tags_are_checked_as_references() {
        for (name, tag) in [("hpc_benchmark", "latest"), ("a.b-c__d/e", "V1_2.3-rc")] {
            assert!(check_reference(name, tag).is_ok(), "{name}:{tag}");
        }
        for (name, tag, what) in [
            ("App", "latest", "name"),
            ("a b", "latest", "name"),
            ("app;reboot", "latest", "name"),
            ("-app", "latest", "name"),
            ("a___b", "latest", "name"),
            ("a//b", "latest", "name"),
            ("", "latest", "name"),
            ("app", "", "tag"),
            ("app", ".x", "tag"),
            ("app", "x y", "tag"),
            ("app", "$(reboot)", "tag"),
        ] {
            let e = check_reference(name, tag).unwrap_err();
            assert!(e.starts_with(&format!("image {what}")), "{name}:{tag}: {e}");
        }
        assert!(check_reference("app", &"x".repeat(129)).is_err());
    }

    #[test]
    fn ldd_output_is_parsed() {
        let text = "\tlinux-vdso.so.1 (0x00007ffc8a5f2000)\n\
            \tlibhwloc.so.15 => /lib/x86_64-linux-gnu/libhwloc.so.15 (0x00007f3a1c000000)\n\
            \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f3a1be00000)\n\
            \t/lib64/ld-linux-x86-64.so.2 (0x00007f3a1c3a0000)\n";
        let libs = parse_ldd(text).unwrap();
        assert_eq!(libs.len(), 4);
        assert_eq!(libs[0].path, None);
        assert_eq!(libs[1].soname, "libhwloc.so.15");
        assert_eq!(
            libs[1].path.as_deref(),
            Some("/lib/x86_64-linux-gnu/libhwloc.so.15")
        );
        assert_eq!(libs[3].soname, "ld-linux-x86-64.so.2");
        assert!(parse_ldd("\tlibfoo.so.1 => not found\n").is_err());
        assert!(parse_ldd("\tstatically linked\n").unwrap().is_empty());
    }

    #[test]
    fn libraries_are_looked_up_usr_merged() {
        assert_eq!(
            usr_merged("/lib/x86_64-linux-gnu/libc.so.6"),
            "usr/lib/x86_64-linux-gnu/libc.so.6"
        );
        assert_eq!(usr_merged("/usr/lib/x/libz.so.1"), "usr/lib/x/libz.so.1");
        let files: BTreeSet<String> = ["usr/lib/x86_64-linux-gnu/libc.so.6".to_string()].into();
        assert!(base_has(&files, "/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(!base_has(&files, "/lib/x86_64-linux-gnu/libudev.so.1"));
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn metadata_lists_bins_and_examples() {
        let v = json!({
            "target_directory": "/t", "workspace_root": "/w",
            "packages": [
                {"name": "hpc-cli", "version": "0.1.0", "repository": null, "features": {"mpi": []},
                 "targets": [{"name": "hpc", "kind": ["bin"]}, {"name": "hpc_cli", "kind": ["lib"]}]},
                {"name": "hpc-example-hello", "version": "0.1.0", "features": {},
                 "targets": [{"name": "hello", "kind": ["bin"]}, {"name": "demo", "kind": ["example"]}]}
            ]
        });
        let ws = parse_metadata(&v).unwrap();
        assert_eq!(ws.bins.len(), 3);
        assert_eq!(find_bin(&ws, "hello").unwrap().package, "hpc-example-hello");
        assert!(find_bin(&ws, "demo").unwrap().example);
        let err = find_bin(&ws, "brunel").unwrap_err().to_string();
        assert!(err.contains("available binaries") && err.contains("hello") && err.contains("hpc"));
    }

    #[test]
    fn the_source_label_comes_from_the_repository_field_or_is_left_out() {
        assert_eq!(
            source_label(Some("https://example.org/hpc/app")).as_deref(),
            Some("https://example.org/hpc/app")
        );
        assert_eq!(source_label(None), None);
        assert_eq!(source_label(Some("")), None);
        assert_eq!(source_label(Some("  ")), None);
        assert_eq!(source_label(Some("not a url")), None);
        assert_eq!(source_label(Some("https://")), None);
        // The field as metadata gives it: null for a package without one.
        let v = json!({"target_directory": "/t", "packages": [
            {"name": "a", "version": "0.1.0", "repository": null, "features": {}, "targets": [{"name": "a", "kind": ["bin"]}]},
            {"name": "b", "version": "0.1.0", "repository": "https://example.org/b", "features": {}, "targets": [{"name": "b", "kind": ["bin"]}]}
        ]});
        let ws = parse_metadata(&v).unwrap();
        assert_eq!(
            source_label(find_bin(&ws, "a").unwrap().repository.as_deref()),
            None
        );
        assert_eq!(
            source_label(find_bin(&ws, "b").unwrap().repository.as_deref()).as_deref(),
            Some("https://example.org/b")
        );
    }

    /// `hpc --version` as hpc-cli prints it, with and without MPI.
    const VERSION_MPI: &str = "hpc 0.1.0 (features: mpi)";
    const VERSION_PLAIN: &str =
        "hpc 0.1.0 (features: none; for mpirun and srun: cargo install hpc-cli --features mpi)";

    #[test]
    fn hpc_version_lines_give_their_features() {
        assert_eq!(hpc_features(VERSION_MPI), Some(vec!["mpi".to_string()]));
        // The hint names `--features mpi` but the build has none.
        assert_eq!(hpc_features(VERSION_PLAIN), Some(vec![]));
        assert_eq!(
            hpc_features("hpc 0.2.0 (features: mpi, ofi)"),
            Some(vec!["mpi".to_string(), "ofi".to_string()])
        );
        assert_eq!(hpc_features("hpc 0.1.50"), None);
    }

    /// A fake `hpc` whose `--version` prints `line`.
    fn fake_hpc(dir: &Path, line: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join("hpc");
        fs::write(&p, format!("#!/bin/sh\necho '{line}'\n")).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn refusal(dir: &Path, line: &str, features: &str) -> Option<String> {
        let r = check_hpc_features(&fake_hpc(dir, line), features);
        r.err().map(|e| {
            assert!(e.is::<UsageError>(), "{e:#}");
            e.to_string()
        })
    }

    #[test]
    fn with_hpc_refuses_a_launcher_whose_mpi_does_not_match_the_image() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(refusal(d, VERSION_MPI, "mpi"), None);
        assert_eq!(refusal(d, VERSION_PLAIN, ""), None);
        assert_eq!(refusal(d, VERSION_PLAIN, "fast"), None);
        let e = refusal(d, VERSION_PLAIN, "mpi").expect("an MPI image needs an MPI hpc");
        assert!(e.contains("built without MPI"), "{e}");
        assert!(e.contains("cargo install hpc-cli --features mpi"), "{e}");
        let e = refusal(d, VERSION_MPI, "").expect("a plain image needs a plain hpc");
        assert!(e.contains("built with MPI"), "{e}");
        assert!(
            e.contains("install one without MPI: cargo install hpc-cli "),
            "{e}"
        );
        let e = refusal(d, "hpc 0.1.50", "mpi").expect("unknown features");
        assert!(e.contains("does not list its features"), "{e}");
    }

    #[test]
    fn with_hpc_refuses_a_workspace_hpc_without_mpi_for_an_mpi_image() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let args = <Cli as clap::Parser>::parse_from(["image", "--with-hpc"]).args;
        let ws = |features: Value| {
            parse_metadata(&json!({
                "target_directory": "/t", "workspace_root": "/w",
                "packages": [{"name": "my-hpc", "version": "0.1.0", "features": features,
                    "targets": [{"name": "hpc", "kind": ["bin"]}]}]
            }))
            .unwrap()
        };
        let plain = ws(json!({}));
        let e = path_hpc(&plain, &args, "mpi").unwrap_err();
        assert!(e.is::<UsageError>(), "{e:#}");
        assert!(
            e.to_string()
                .contains("package my-hpc) has no `mpi` feature"),
            "{e}"
        );
        assert!(path_hpc(&plain, &args, "").unwrap().is_none());
        assert!(path_hpc(&ws(json!({"mpi": []})), &args, "mpi")
            .unwrap()
            .is_none());
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("/usr/bin:/bin"), "/usr/bin:/bin");
        assert_eq!(shell_quote("a b"), "'a b'");
    }
}
