//! Stage 7: `image.json`, the SIF (when asked for and Apptainer is installed), and
//! the closing report (the manifest digest on standard output).

use std::fs;
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use serde_json::json;

use super::app_layer::App;
use super::archives::Archives;
use super::binary::Built;
use super::layout::Image;
use super::scripts::SifNames;
use crate::{sif, Args, Format, Progress};

/// Writes `image.json`: what was built, from what, and where it lies.
pub(crate) fn write_json(
    args: &Args,
    built: &Built,
    app: &App,
    image: &Image,
    archives: &Archives,
    out_dir: &Path,
) -> Result<()> {
    let written = &image.written;
    let summary = json!({
        "name": image.name,
        "ref": image.image_ref,
        "binary": built.bin.name,
        "binary_path": built.binaries[0].1,
        "package": built.bin.package,
        "build": image.build_cmd,
        "features": built.features,
        "mpi": args.mpi.name(),
        "gpu": args.gpu,
        "revision": built.revision,
        "source_date_epoch": built.epoch,
        "manifest_digest": written.manifest.digest,
        "config_digest": written.config.digest,
        "compressed_size": image.compressed,
        "layers": written.layers.iter().map(|l| json!({
            "digest": l.blob.digest, "size": l.blob.size, "diff_id": l.diff_id, "created_by": l.created_by,
        })).collect::<Vec<_>>(),
        "app_libraries": app.app_libs.iter().map(|s| format!("/{s}")).collect::<Vec<_>>(),
        "bind_paths": app.bind_paths,
        "layout": app.layout.dir(),
        "archives": archives.paths,
    });
    crate::write_new(
        &out_dir.join("image.json"),
        &serde_json::to_vec_pretty(&summary)?,
        0o644,
    )?;
    Ok(())
}

/// Builds the SIF where one is asked for; without Apptainer, the error to fail
/// with once everything else is reported.
pub(crate) fn build_sif(
    archives: &mut Archives,
    names: &SifNames,
    out_dir: &Path,
    pr: &mut Progress,
) -> Result<Option<String>> {
    if !archives.formats.contains(&Format::Sif) {
        return Ok(None);
    }
    let SifNames { sif, def } = names;
    pr.step(&format!("apptainer build {sif} {def}"));
    if crate::sys::has("apptainer") {
        let p = sif::build(out_dir, sif, def)?;
        pr.done(&format!("{:.1} MB", fs::metadata(&p)?.len() as f64 / 1e6));
        archives.paths.insert("sif", p);
        Ok(None)
    } else {
        Ok(Some(sif::missing_apptainer(out_dir, sif, def)))
    }
}

/// Sizes, places and how to run the image; prints the manifest digest on standard
/// output, or fails with `sif_error`.
pub(crate) fn report(
    image: &Image,
    base_size: u64,
    app: &App,
    archives: &Archives,
    out_dir: &Path,
    sif_error: Option<String>,
    pr: &Progress,
) -> Result<()> {
    let image_ref = &image.image_ref;
    say!(
        "\nimage {image_ref}  manifest {}\n  compressed size {:.1} MB (base {:.1} MB + app {:.1} MB), built in {:.1}s\n  {}",
        image.written.manifest.digest,
        image.compressed as f64 / 1e6,
        base_size as f64 / 1e6,
        app.size as f64 / 1e6,
        pr.total.elapsed().as_secs_f64(),
        hpc_io::message::path(out_dir)
    );
    for (k, p) in &archives.paths {
        say!("  {k}: {}", hpc_io::message::path(p));
    }
    // Either archive loads in both engines; the oci-archive where it was written.
    let archive = if archives.paths.contains_key("oci-archive") {
        &archives.oci_archive
    } else {
        &archives.docker_archive
    };
    say!(
        "  run:  podman load -i {0}/{1} && podman run --rm {image_ref}\n        \
         docker load -i {0}/{1} && docker run --rm {image_ref}\n        \
         {0}/podman-run.sh (ENGINE=docker for Docker)\n        \
         sbatch {0}/slurm-podman.sbatch | sbatch {0}/slurm-apptainer.sbatch",
        hpc_io::message::path(out_dir),
        archive
    );
    if let Some(e) = sif_error {
        bail!(e);
    }
    print_digest(std::io::stdout().lock(), &image.written.manifest.digest)
}

/// Writes the manifest's digest, the command's one line of standard output: a
/// failed write (a full device, a closed pipe) is an error naming the stream,
/// where `println!` panicked (status 101).
fn print_digest(mut out: impl std::io::Write, digest: &str) -> Result<()> {
    writeln!(out, "{digest}")
        .and_then(|()| out.flush())
        .context("writing the image's digest to standard output")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Standard output on a full device: `cargo xtask image > /dev/full` wrote
    /// the whole image, then panicked printing its digest.
    #[test]
    fn a_failed_write_of_the_digest_is_an_error_naming_the_stream() {
        let full = fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let e = print_digest(full, "sha256:0").unwrap_err();
        assert!(
            format!("{e:#}").contains("standard output") && format!("{e:#}").contains("space"),
            "{e:#}"
        );
        let mut v = Vec::new();
        print_digest(&mut v, "sha256:0").unwrap();
        assert_eq!(v, b"sha256:0\n");
    }
}
