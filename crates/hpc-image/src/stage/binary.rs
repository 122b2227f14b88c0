//! Stage 1: find the binary in the workspace and build it (and the `hpc` launcher
//! with `--with-hpc`).

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::{
    default_bin, find_bin, git, hpc_launcher, metadata, path_hpc, profile_args, profile_dir,
    source_date_epoch, Args, BinTarget, Dated, Progress, UsageError, Workspace,
};

/// What the build stage found and built.
pub(crate) struct Built {
    pub(crate) ws: Workspace,
    pub(crate) bin: BinTarget,
    /// `SOURCE_DATE_EPOCH`: every time stamp of the image.
    pub(crate) epoch: u64,
    /// The workspace's git revision (see [`revision`]).
    pub(crate) revision: String,
    /// `--features`, empty for none.
    pub(crate) features: String,
    /// The cargo command as recorded in the image (without `--manifest-path`).
    pub(crate) build: Vec<String>,
    /// Name in the image and path of each binary: the app first.
    pub(crate) binaries: Vec<(String, PathBuf)>,
    /// `--cache`, else `HPC_IMAGE_CACHE`; `None`: the default under the target.
    pub(crate) cache: Option<PathBuf>,
}

impl Built {
    /// The names of the binaries in the image, joined by `sep`.
    pub(crate) fn names(&self, sep: &str) -> String {
        self.binaries
            .iter()
            .map(|b| b.0.as_str())
            .collect::<Vec<_>>()
            .join(sep)
    }
}

/// Finds the binary, checks the input that needs no build, and builds it.
pub(crate) fn build(args: &Args, pr: &mut Progress) -> Result<Built> {
    pr.step(&match args.binary.as_deref() {
        Some(name) => format!("finding `{}` in the workspace", hpc_env::short(name)),
        None => "finding the workspace's binary".to_string(),
    });
    let ws = metadata(args.manifest_path.as_deref())?;
    let bin = match &args.binary {
        Some(name) => find_bin(&ws, name)?,
        None => default_bin(&ws)?,
    }
    .clone();
    pr.done(&format!(
        "{} `{}` of package {} in {}",
        if bin.example { "example" } else { "binary" },
        bin.name,
        bin.package,
        hpc_io::message::path(&ws.root)
    ));
    // The name and tag are written into the archives and, as written, into the
    // run scripts: checked before anything is built.
    if let Err(why) = crate::check_reference(args.name.as_deref().unwrap_or(&bin.name), &args.tag) {
        usage!("{why}");
    }
    if let Some(b) = &args.base {
        if let Some(why) = crate::base::check_shape(b) {
            usage!("--base {}: {why}", hpc_io::message::path(b));
        }
    }
    // Folders the image is written into: a file or a device there was found only
    // after the build (minutes), as "creating /dev/null: File exists".
    let cache_env = std::env::var_os(hpc_env::IMAGE_CACHE);
    // Read here, not by clap: clap took an empty variable for an empty --cache
    // ("a value is required for '--cache <DIR>'"), a flag not given.
    if args.cache.is_none() && cache_env.as_ref().is_some_and(|v| v.is_empty()) {
        usage!(
            "{} is set but empty: give the cache folder, or unset it for the default \
             (<target>/hpc-image-cache)",
            hpc_env::IMAGE_CACHE
        );
    }
    let cache = args
        .cache
        .clone()
        .or_else(|| cache_env.clone().map(PathBuf::from));
    for (flag, dir) in [("--out", &args.out), ("--cache", &cache)] {
        if let Some(d) = dir {
            let named = || {
                if flag == "--cache" {
                    cache_named(d, cache_env.as_deref())
                } else {
                    format!("{flag} {}", hpc_io::message::path(d))
                }
            };
            if std::fs::metadata(d).is_ok_and(|m| !m.is_dir()) {
                usage!(
                    "{}: it exists and is not a directory (give a directory; a missing one \
                     is made)",
                    named()
                );
            }
            // `/`, `/usr/bin`, `/etc` (as root): the image's files were written
            // among the system's, its run scripts onto every user's PATH.
            if let Some(why) = hpc_io::system::system_folder(d) {
                usage!(
                    "{}: {why}, not a folder for an image's files (give a folder of your own{})",
                    named(),
                    if flag == "--out" {
                        "; without --out: <target>/image/<binary>"
                    } else {
                        "; without --cache: <target>/hpc-image-cache"
                    }
                );
            }
            // A link to a missing folder is neither one to write into nor one to
            // make: it was found after the build, as "creating D: File exists".
            if let Some((link, target)) = hpc_io::rundir::dangling_link_in(d) {
                usage!(
                    "{}: {} (make that directory, or give another)",
                    named(),
                    hpc_io::rundir::dangling_said(d, &link, &target)
                );
            }
        }
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| ws.target_dir.join("image").join(&bin.name));
    // `image.json` and the run files name the folder's files as text: a name that
    // is not UTF-8 ended the finished build in a panic.
    if std::path::absolute(&out).map_or(true, |a| a.to_str().is_none()) {
        usage!(
            "--out {}: the folder's path is not valid UTF-8, and image.json names its files \
             as text (give another folder)",
            hpc_env::short(&out.to_string_lossy())
        );
    }
    let checked = check_out(&out, &bin.name, args.base.as_deref());
    if let Some(why) = checked
        .err()
        .or(cache_in_layout(cache.as_deref(), &cache_env, &out))
    {
        usage!("{why}");
    }
    let (epoch, dated) = match source_date_epoch(&ws.root) {
        Ok(e) => e,
        Err(e) => usage!("{}", hpc_io::message::chain(e.as_ref())),
    };
    let revision = revision(&ws.root);
    if dated == Dated::Now {
        say!(
            "    note: {} has no commit yet: the image is dated now and its revision is \
             `{revision}`, so it is not reproducible (commit, or set SOURCE_DATE_EPOCH)",
            hpc_io::message::path(&ws.root)
        );
    }

    let features = args.features.clone().unwrap_or_default();
    let on_path = if bin.name == "hpc" {
        None
    } else {
        path_hpc(&ws, args, &features)?
    };
    let manifest: Vec<String> = match &args.manifest_path {
        Some(m) => vec!["--manifest-path".into(), m.display().to_string()],
        None => Vec::new(),
    };
    // The command as recorded in the image: without --manifest-path, so that the
    // labels do not depend on where the workspace lies.
    let mut build: Vec<String> = vec!["build".into()];
    build.extend(profile_args(&args.profile));
    build.extend(["-p".into(), bin.package.clone()]);
    build.push(if bin.example { "--example" } else { "--bin" }.into());
    build.push(bin.name.clone());
    if !features.is_empty() {
        build.push("--features".into());
        build.push(features.clone());
    }
    pr.step(&format!("cargo {}", build.join(" ")));
    crate::sys::run(crate::sys::cargo().args(&build).args(&manifest))?;
    let release = ws.target_dir.join(profile_dir(&args.profile));
    let bin_path = if bin.example {
        release.join("examples").join(&bin.name)
    } else {
        release.join(&bin.name)
    };
    let mut binaries = vec![(bin.name.clone(), bin_path)];
    if args.with_hpc && bin.name != "hpc" {
        binaries.push((
            "hpc".into(),
            hpc_launcher(&ws, args, &features, &manifest, on_path)?,
        ));
    }
    pr.done("built");
    Ok(Built {
        ws,
        bin,
        epoch,
        revision,
        features,
        build,
        binaries,
        cache,
    })
}

/// The workspace's git revision: the commit, `uncommitted` in a repository
/// without a commit, `not-in-git` outside git.
fn revision(root: &std::path::Path) -> String {
    if let Some(r) = git(root, &["rev-parse", "--verify", "-q", "HEAD"]) {
        return r;
    }
    if git(root, &["rev-parse", "--git-dir"]).is_some() {
        "uncommitted".into()
    } else {
        "not-in-git".into()
    }
}

/// Checks the output folder `out` before anything is built: the image of
/// `binary` replaces its `oci/` layout, its scripts and `image.json` there. Refused
/// (the message names `--out`): a folder that holds another binary's image (its
/// `image.json` names it; the scripts would then start this one beside the other's
/// archive), an `oci/` that is no image layout (no `oci-layout` file: the user's
/// own folder, removed whole before), and a `--base` inside that `oci/` (removed
/// before it was read).
fn check_out(out: &Path, binary: &str, base: Option<&Path>) -> Result<(), String> {
    let oci = out.join("oci");
    if let (Some(b), Ok(layout)) = (base, std::fs::canonicalize(&oci)) {
        if std::fs::canonicalize(b).is_ok_and(|b| b.starts_with(&layout)) {
            return Err(format!(
                "--base {} lies in {}, the layout this image replaces (--out {}): copy the \
                 base elsewhere, or give another --out",
                hpc_io::message::path(b),
                hpc_io::message::path(&oci),
                hpc_io::message::path(out)
            ));
        }
    }
    // A file of the user's under the layout's name (a link is replaced, as
    // before).
    if std::fs::symlink_metadata(&oci).is_ok_and(|m| !m.is_dir() && !m.file_type().is_symlink()) {
        return Err(format!(
            "--out {}: its oci is not a directory and would be replaced by the image's \
             layout: move it, or give another --out",
            hpc_io::message::path(out)
        ));
    }
    if std::fs::symlink_metadata(&oci).is_ok_and(|m| m.is_dir())
        && !oci.join("oci-layout").is_file()
    {
        return Err(format!(
            "--out {}: its oci/ is not an image layout (no oci-layout file) and would be \
             replaced whole: give another --out",
            hpc_io::message::path(out)
        ));
    }
    // A script or definition under one of the names the image writes that no
    // image wrote (every template names itself in its first lines): the user's
    // own `Containerfile` in `--out .` was replaced without a word. One this
    // command wrote, a run stopped before `image.json` included, is replaced.
    let templates = [
        &crate::templates::APPTAINER_HYBRID,
        &crate::templates::APPTAINER_BIND,
    ];
    for t in templates.into_iter().chain(crate::templates::COMMON) {
        let file = out.join(t.out.replace("{app}", binary));
        if std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_file()) && !written_here(&file) {
            return Err(format!(
                "--out {}: {} is not one this command wrote (its first lines do not name \
                 hpc-image's templates) and would be replaced: move it, or give another --out",
                hpc_io::message::path(out),
                hpc_io::message::path(&file)
            ));
        }
    }
    let summary = out.join("image.json");
    if let Ok(text) =
        hpc_io::read::read_regular_to_string(&summary, hpc_io::read::MAX_METADATA_BYTES)
    {
        let other = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["binary"].as_str().map(str::to_string));
        if let Some(other) = other.filter(|o| o != binary) {
            return Err(format!(
                "--out {} holds the image of `{other}` ({}): the image of `{binary}` would \
                 replace its layout and scripts; give another --out",
                hpc_io::message::path(out),
                hpc_io::message::path(&summary)
            ));
        }
    }
    Ok(())
}

/// Whether the regular file `file` is one of the image's run files: its first
/// lines name the template it was made from, as every template's do.
fn written_here(file: &Path) -> bool {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(1024).read_to_end(&mut head))
        .is_ok_and(|_| {
            head.windows(TEMPLATE_MARK.len())
                .any(|w| w == TEMPLATE_MARK.as_bytes())
        })
}

/// What the first lines of every run file the image writes hold.
const TEMPLATE_MARK: &str = "hpc-image's templates/";

/// Why the cache folder `cache` (from `--cache`, or the variable's value
/// `env`) cannot be used with the output folder `out`: it lies in `out`'s
/// `oci/` (or the `.oci.part` the new one is written into first), which the
/// build removes and writes anew (such a cache was made, then removed with the
/// layout, each build).
fn cache_in_layout(
    cache: Option<&Path>,
    env: &Option<std::ffi::OsString>,
    out: &Path,
) -> Option<String> {
    let cache = cache?;
    let out_resolved = hpc_io::system::resolved(out)?;
    let c = hpc_io::system::resolved(cache)?;
    // The new layout is written as `.oci.part` first, removed the same way.
    [super::layout::LAYOUT, super::layout::PART]
        .into_iter()
        .map(|name| out_resolved.join(name))
        .find(|layout| c.starts_with(layout))
        .map(|layout| {
            format!(
                "{}: it lies in {}, the layout this image removes and writes anew (--out {}): \
                 give a cache folder outside the output's oci/",
                cache_named(cache, env.as_deref()),
                hpc_io::message::path(&layout),
                hpc_io::message::path(out)
            )
        })
}

/// The cache folder `dir` as a message names it: by `HPC_IMAGE_CACHE` when
/// that is where it came from (`env`, the variable's value), else by `--cache`.
fn cache_named(dir: &Path, env: Option<&std::ffi::OsStr>) -> String {
    if env == Some(dir.as_os_str()) {
        format!(
            "{}={} (or --cache)",
            hpc_env::IMAGE_CACHE,
            hpc_io::message::path(dir)
        )
    } else {
        format!("--cache {}", hpc_io::message::path(dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hostile-user pass 15: `--out .` in a repository with its own
    /// `Containerfile` or `podman-run.sh` replaced them without a word. A run
    /// file this command wrote (a run stopped before `image.json` too) is
    /// replaced; a link is replaced, its target untouched (an earlier pass).
    #[test]
    fn a_users_own_file_under_a_run_files_name_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        for t in [
            &crate::templates::APPTAINER_HYBRID,
            &crate::templates::APPTAINER_BIND,
        ]
        .into_iter()
        .chain(crate::templates::COMMON)
        {
            let file = out.join(t.out.replace("{app}", "app"));
            // What the image writes there (before `{{...}}` is filled in).
            std::fs::write(&file, t.text).unwrap();
            assert_eq!(check_out(out, "app", None), Ok(()), "{}", t.name);
            std::fs::write(&file, "FROM debian:12\nRUN make\n").unwrap();
            let e = check_out(out, "app", None).unwrap_err();
            assert!(
                e.contains(&file.display().to_string()) && e.contains("not one this command wrote"),
                "{e}"
            );
            std::fs::remove_file(&file).unwrap();
            std::os::unix::fs::symlink("/nonexistent-target", &file).unwrap();
            assert_eq!(check_out(out, "app", None), Ok(()), "{}: a link", t.name);
            std::fs::remove_file(&file).unwrap();
        }
    }

    #[test]
    fn a_cache_folder_from_the_variable_is_named_by_it() {
        // Pass 9: the cache variable set to /dev/null was refused as "--cache /dev/null",
        // a flag the user did not give.
        let d = Path::new("/dev/null");
        assert_eq!(
            cache_named(d, Some(std::ffi::OsStr::new("/dev/null"))),
            format!("{}=/dev/null (or --cache)", hpc_env::IMAGE_CACHE)
        );
        assert_eq!(cache_named(d, None), "--cache /dev/null");
        assert_eq!(
            cache_named(d, Some(std::ffi::OsStr::new("/elsewhere"))),
            "--cache /dev/null"
        );
    }

    #[test]
    fn a_workspace_without_commits_is_dated_now_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(revision(dir.path()), "not-in-git");
        let git = |args: &[&str]| {
            let ok = std::process::Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .status()
                .unwrap()
                .success();
            assert!(ok, "git {args:?}");
        };
        git(&["init", "-q"]);
        assert_eq!(revision(dir.path()), "uncommitted");
        // A value that is not UTF-8 is refused by name, not taken as unset.
        use std::os::unix::ffi::OsStringExt;
        let bad = std::ffi::OsString::from_vec(vec![b'1', 0xff]);
        let e = crate::source_date_epoch_from(Some(bad), dir.path()).unwrap_err();
        assert!(
            e.to_string()
                .contains("SOURCE_DATE_EPOCH=\"1\u{fffd}\" is not valid UTF-8"),
            "{e}"
        );
        // Only when SOURCE_DATE_EPOCH is not set for the whole test run.
        if std::env::var_os("SOURCE_DATE_EPOCH").is_none() {
            let (epoch, dated) = source_date_epoch(dir.path()).unwrap();
            assert_eq!(dated, Dated::Now);
            // 2024-01-01: a build clock, not the epoch.
            assert!(epoch > 1_704_067_200, "{epoch}");
            std::fs::write(dir.path().join("f"), "x").unwrap();
            git(&["add", "f"]);
            git(&[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-q",
                "--date=2001-09-09T01:46:40Z",
                "-m",
                "m",
            ]);
            let (epoch, dated) = source_date_epoch(dir.path()).unwrap();
            assert_eq!(dated, Dated::Commit);
            let r = revision(dir.path());
            assert_eq!(r.len(), 40, "{r}");
            assert!(epoch > 1_704_067_200, "committer date is now: {epoch}");
        }
    }
}
