//! `--format sif`: the Singularity Image Format file, built by Apptainer from the
//! generated definition file, which bootstraps from the image's own `oci-archive`
//! (`Bootstrap: oci-archive`, `From: <app>-oci.tar`), so the SIF holds the same two
//! layers as the OCI image plus the definition's `%environment`, `%runscript`,
//! `%labels` and `%help`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// The command that builds `sif` from `def` in the image's output folder.
pub fn build_command(sif: &str, def: &str) -> Vec<String> {
    ["build", "--force", sif, def]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// What to tell a user who asked for a SIF on a machine without Apptainer.
pub fn missing_apptainer(out_dir: &Path, sif: &str, def: &str) -> String {
    format!(
        "apptainer is not on the PATH, so no SIF was built. Install it (as root, \
         `{}=1 cargo xtask setup` sets it up on Debian) or build it where \
         Apptainer is installed:\n  cd {} && apptainer build {sif} {def}",
        hpc_env::TEST_CONTAINERS,
        hpc_io::message::path(out_dir)
    )
}

/// Builds `out_dir/sif` from `out_dir/def` with `apptainer build`, checks that the
/// SIF carries the image's labels (`apptainer inspect --json`), and records its path
/// and size in `image.json`. Returns the SIF's path.
pub fn build(out_dir: &Path, sif: &str, def: &str) -> Result<PathBuf> {
    remove_stale_parts(out_dir, sif);
    if !crate::sys::has("apptainer") {
        bail!(missing_apptainer(out_dir, sif, def));
    }
    // Built under a temporary name and renamed once whole and checked: a build
    // that failed or was stopped left its part of a SIF under the final name,
    // which the batch script would then run.
    let tmp = format!(".{sif}.tmp-{}", std::process::id());
    let tmp_path = out_dir.join(&tmp);
    let built = build_checked(out_dir, &tmp, def).and_then(|()| {
        fs::rename(&tmp_path, out_dir.join(sif))
            .with_context(|| format!("renaming {} to {sif}", hpc_io::message::path(&tmp_path)))
    });
    if let Err(e) = built {
        let _ = fs::remove_file(&tmp_path);
        return Err(e);
    }
    record(out_dir, &out_dir.join(sif))
}

/// Removes the parts of a SIF (`.SIF.tmp-PID`, often gigabytes) that builds of
/// processes no longer running left in `out_dir`: a build killed while
/// `apptainer build` wrote (SIGKILL, a crash) left its part for good, and every
/// such build one more (hostile pass 21). The output folder is the caller's
/// (one build at a time holds it), and a part of a process still running, or
/// of another user's (its process cannot be asked), is left.
pub fn remove_stale_parts(out_dir: &Path, sif: &str) {
    let prefix = format!(".{sif}.tmp-");
    let Ok(entries) = fs::read_dir(out_dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let Ok(pid) = pid.parse::<libc::pid_t>() else {
            continue;
        };
        if pid <= 0 || !e.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        // SAFETY: signal 0 only asks whether the process exists; nothing is sent.
        let gone = unsafe { libc::kill(pid, 0) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            match fs::remove_file(e.path()) {
                Ok(()) => say!(
                    "    removed {}, the part of a SIF an earlier build (pid {pid}) left",
                    hpc_io::message::path(&e.path())
                ),
                Err(err) => say!(
                    "    warning: cannot remove {}, the part of a SIF an earlier build left: {err}",
                    hpc_io::message::path(&e.path())
                ),
            }
        }
    }
}

/// The time `apptainer inspect` of a built SIF is given (it reads the SIF's
/// header: seconds even on a slow shared file system).
pub const INSPECT_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// `apptainer build` of `def` into `tmp` (in `out_dir`), then its labels checked.
fn build_checked(out_dir: &Path, tmp: &str, def: &str) -> Result<()> {
    // Run in the output folder: the definition's `From:` names the archive beside it.
    let args = build_command(tmp, def);
    say!(
        "\n==> cd {} && apptainer {}",
        hpc_io::message::path(out_dir),
        args.join(" ")
    );
    let st = crate::sys::status_guarded(Command::new("apptainer").args(&args).current_dir(out_dir))
        .context("cannot run apptainer")?;
    if !st.success() {
        bail!(
            "apptainer {} failed with {st} (in {})",
            args.join(" "),
            hpc_io::message::path(out_dir)
        );
    }
    let path = out_dir.join(tmp);
    // Bounded, and stopped with the build: an `apptainer` that never stops
    // printing is not read into memory without end, nor waited for without end
    // (one that hung, hung the build without a word).
    let out = crate::sys::output_within(
        Command::new("apptainer")
            .args(["inspect", "--json", "--labels"])
            .arg(&path)
            .stdin(std::process::Stdio::null()),
        INSPECT_LIMIT,
    )
    .context("cannot run apptainer inspect")?;
    if !out.status.success() {
        bail!(
            "apptainer inspect {} failed: {}",
            hpc_io::message::path(&path),
            hpc_env::short(String::from_utf8_lossy(&out.stderr).trim())
        );
    }
    let labels = sif_labels(&String::from_utf8_lossy(&out.stdout))?;
    let revision = summary(out_dir)?["revision"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if labels
        .get("org.opencontainers.image.revision")
        .and_then(Value::as_str)
        != Some(revision.as_str())
    {
        bail!(
            "{} does not carry the image's revision label {revision} (labels: {labels:?})",
            hpc_io::message::path(&path)
        );
    }
    Ok(())
}

/// The output folder's `image.json`.
fn summary(out_dir: &Path) -> Result<Value> {
    Ok(serde_json::from_slice(&hpc_io::read::read_regular(
        out_dir.join("image.json"),
        hpc_io::read::MAX_METADATA_BYTES,
    )?)?)
}

/// Records the SIF's path and size in `image.json`; returns the path.
fn record(out_dir: &Path, path: &Path) -> Result<PathBuf> {
    let mut summary = summary(out_dir)?;
    let size = fs::metadata(path)?.len();
    summary["sif"] = Value::String(path.display().to_string());
    summary["sif_size"] = Value::from(size);
    crate::write_new(
        &out_dir.join("image.json"),
        &serde_json::to_vec_pretty(&summary)?,
        0o644,
    )?;
    Ok(path.to_path_buf())
}

/// The label map of `apptainer inspect --json --labels` output.
pub fn sif_labels(json: &str) -> Result<serde_json::Map<String, Value>> {
    let v: Value = serde_json::from_str(json).context("apptainer inspect printed no JSON")?;
    v.pointer("/data/attributes/labels")
        .and_then(Value::as_object)
        .cloned()
        .context("apptainer inspect --json has no data.attributes.labels")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hostile pass 21: a build killed while `apptainer build` wrote left its
    /// `.app.sif.tmp-PID` (gigabytes) for good. The next build removes the
    /// parts of processes that no longer run, and only those.
    #[test]
    fn parts_of_sifs_that_dead_builds_left_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // A process that has ended: its id, reaped, names no process.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let alive = std::process::id();
        for n in [
            format!(".app.sif.tmp-{dead}"),
            format!(".app.sif.tmp-{alive}"),
            format!(".other.sif.tmp-{dead}"),
            "app.sif".to_string(),
        ] {
            fs::write(d.join(n), "part").unwrap();
        }
        remove_stale_parts(d, "app.sif");
        let mut left: Vec<String> = fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut want = vec![
            format!(".app.sif.tmp-{alive}"),
            format!(".other.sif.tmp-{dead}"),
            "app.sif".to_string(),
        ];
        want.sort();
        assert_eq!(left, want);
    }

    #[test]
    fn labels_are_read_from_inspect_output() {
        let j = r#"{"data":{"attributes":{"labels":{"org.opencontainers.image.revision":"abc","io.hpc-rs.mpi":"bind"}}},"type":"container"}"#;
        let l = sif_labels(j).unwrap();
        assert_eq!(l["io.hpc-rs.mpi"], "bind");
        assert!(sif_labels("{}").is_err());
        assert!(sif_labels("not json").is_err());
    }

    /// The generated `slurm-apptainer.sbatch`, run with stand-ins for `srun` and
    /// `scontrol`: `--nv` for a GPU image, the bind paths this node has (and a
    /// missing one named), the slurmd spool when it exists outside `/tmp`, then the
    /// app and its arguments. A spool under `/tmp` (Apptainer binds `/tmp` itself),
    /// a missing one and none at all add no bind. Every spool path is chosen here, so
    /// the result does not depend on where the checkout lives.
    #[test]
    fn apptainer_batch_script_passes_nv_binds_and_spool() {
        use crate::templates::{fill, COMMON};
        let t = COMMON
            .iter()
            .find(|t| t.name == "slurm-apptainer.sbatch")
            .expect("template");
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let lib = d.join("libmpi.so.40");
        fs::write(&lib, "").unwrap();
        let mut vars = std::collections::BTreeMap::new();
        for k in crate::template_keys() {
            vars.insert(*k, String::new());
        }
        vars.insert("app", "hpc".into());
        vars.insert("sif", "hpc.sif".into());
        vars.insert("apptainer_flags", "--nv".into());
        vars.insert(
            "bind_paths",
            format!("{},/nonexistent/libfoo.so.1", lib.display()),
        );
        let script = d.join("job.sbatch");
        fs::write(&script, fill(t.text, &vars).unwrap()).unwrap();
        let bin = d.join("bin");
        fs::create_dir(&bin).unwrap();
        let stub = |name: &str, body: &str| {
            let p = bin.join(name);
            fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        };
        stub("srun", "echo \"srun $*\"");
        // The spool `scontrol show config` reports; "" for a config without one.
        let run = |spool: &str| {
            let line = if spool.is_empty() {
                String::new()
            } else {
                format!("SlurmdSpoolDir          = {spool}")
            };
            stub("scontrol", &format!("echo \"{line}\""));
            let out = Command::new("bash")
                .arg(&script)
                .args(["selftest", "--json"])
                .env(
                    "PATH",
                    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
                )
                .env_remove("SLURMD_SPOOL")
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let stderr = String::from_utf8_lossy(&out.stderr).to_string();
            assert!(out.status.success(), "spool {spool:?}: {stderr}");
            assert!(
                stderr.contains("not bound: /nonexistent/libfoo.so.1"),
                "{stderr}"
            );
            stdout
        };
        let srun = |spool_bind: &str| {
            format!(
                "srun --mpi=pmix apptainer exec --nv --bind {}{spool_bind} hpc.sif hpc selftest --json",
                lib.display()
            )
        };
        // An existing spool outside /tmp is bound: /dev is a directory on every
        // Linux machine and never under /tmp.
        assert_eq!(run("/dev"), srun(" --bind /dev"));
        // Under /tmp (an existing folder there, so that only the place decides), at
        // /tmp itself, missing, or not reported: no bind of its own.
        let under_tmp = tempfile::tempdir_in("/tmp").unwrap();
        let under_tmp = under_tmp.path().display().to_string();
        for spool in [under_tmp.as_str(), "/tmp", "/nonexistent/spool", ""] {
            assert_eq!(run(spool), srun(""), "spool {spool:?}");
        }
    }

    #[test]
    fn build_runs_in_the_output_folder_from_the_def() {
        assert_eq!(
            build_command("hpc.sif", "hpc.def"),
            ["build", "--force", "hpc.sif", "hpc.def"]
        );
        let m = missing_apptainer(Path::new("/o"), "a.sif", "a.def");
        assert!(m.contains("cd /o && apptainer build a.sif a.def"), "{m}");
    }
}
