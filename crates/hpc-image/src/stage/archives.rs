//! Stage 5: the archives asked for (`oci-archive`, `docker-archive`); a SIF needs
//! the `oci-archive`, so asking for one adds it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::app_layer::App;
use super::layout::Image;
use crate::{oci, Args, Format, Progress};

/// The archives written, and the names they have (or would have) in the output.
pub(crate) struct Archives {
    /// The formats asked for, with `oci` added where a SIF is.
    pub(crate) formats: Vec<Format>,
    /// `BIN-oci.tar`.
    pub(crate) oci_archive: String,
    /// `BIN-docker.tar`.
    pub(crate) docker_archive: String,
    /// What was written, by kind (`oci-archive`, `docker-archive`, later `sif`).
    pub(crate) paths: BTreeMap<&'static str, PathBuf>,
}

/// Writes the archives of the layout into `out_dir`.
pub(crate) fn write(
    args: &Args,
    bin_name: &str,
    epoch: u64,
    app: &App,
    image: &Image,
    out_dir: &Path,
    pr: &mut Progress,
) -> Result<Archives> {
    let mut formats = args.format.clone();
    if formats.contains(&Format::Sif) && !formats.contains(&Format::Oci) {
        formats.push(Format::Oci);
    }
    let oci_archive = format!("{bin_name}-oci.tar");
    let docker_archive = format!("{bin_name}-docker.tar");
    let mut paths = BTreeMap::new();
    for f in &formats {
        match f {
            Format::Oci => {
                pr.step(&format!("oci-archive {oci_archive}"));
                let p = out_dir.join(&oci_archive);
                oci::write_oci_archive(&app.layout, &image.written, &p, &image.image_ref, epoch)?;
                pr.done(&format!("{:.1} MB", fs::metadata(&p)?.len() as f64 / 1e6));
                paths.insert("oci-archive", p);
            }
            Format::Docker => {
                pr.step(&format!("docker-archive {docker_archive}"));
                let p = out_dir.join(&docker_archive);
                oci::write_docker_archive(
                    &app.layout,
                    &image.written,
                    &p,
                    &image.image_ref,
                    epoch,
                )?;
                pr.done(&format!("{:.1} MB", fs::metadata(&p)?.len() as f64 / 1e6));
                paths.insert("docker-archive", p);
            }
            Format::Sif => {}
        }
    }
    Ok(Archives {
        formats,
        oci_archive,
        docker_archive,
        paths,
    })
}
