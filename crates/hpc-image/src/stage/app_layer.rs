//! Stage 3: the app layer: the binaries and the shared libraries they link that the
//! base lacks (with `--mpi bind`, the host's MPI stack is bound in instead).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::binary::Built;
use crate::base::Base;
use crate::tar::Entry;
use crate::{
    base_has, dpkg_owner, ldd, mpi_stack, oci, usr_merged, Args, MpiModel, Progress,
    BIND_EXTRA_PATHS,
};

/// The app layer, written into the OCI layout it created.
pub(crate) struct App {
    pub(crate) layout: oci::Layout,
    pub(crate) layer: oci::Layer,
    /// Compressed size of the layer.
    pub(crate) size: u64,
    /// Libraries put into the image (paths in it, without the leading `/`).
    pub(crate) app_libs: BTreeSet<String>,
    /// Host paths to bind in (`--mpi bind`).
    pub(crate) bind_paths: Vec<String>,
    /// Debian packages that own the added libraries.
    pub(crate) extra_packages: BTreeSet<String>,
}

/// What goes into the app layer, before it is written.
struct Contents {
    entries: Vec<Entry>,
    app_libs: BTreeSet<String>,
    bind_libs: BTreeSet<String>,
    extra_packages: BTreeSet<String>,
}

/// Writes the app layer into a new OCI layout under `out_dir` (named
/// [`PART`](crate::stage::layout::PART) until it is whole).
pub(crate) fn write(
    args: &Args,
    built: &Built,
    base: &Base,
    out_dir: &Path,
    pr: &mut Progress,
    begun: &mut crate::Begun,
) -> Result<App> {
    pr.step("app layer: binaries + the shared libraries the base lacks");
    let Contents {
        mut entries,
        app_libs,
        bind_libs,
        extra_packages,
    } = contents(args.mpi, &built.binaries, base)?;
    let bind_paths = bind_paths(args.mpi, &bind_libs);
    crate::tar::add_parents(&mut entries);
    let layout = new_layout(out_dir, begun)?;
    let tmp = out_dir.join("app-layer.tmp");
    begun.begin(tmp.clone());
    let d = crate::tar::write_layer_file(entries, built.epoch, &tmp)?;
    fs::rename(&tmp, layout.blob_path(&d.digest))?;
    begun.end(&tmp);
    let layer = oci::Layer {
        blob: oci::Descriptor {
            media_type: oci::LAYER_GZIP_MEDIA_TYPE.into(),
            digest: d.digest.clone(),
            size: d.size,
        },
        diff_id: d.diff_id.clone(),
        created_by: format!(
            "cargo xtask image {} ({} + {} libraries)",
            built.bin.name,
            built.names(" "),
            app_libs.len()
        ),
    };
    pr.done(&format!(
        "{:.1} MB compressed; libraries added: {}",
        d.size as f64 / 1e6,
        if app_libs.is_empty() {
            "none".to_string()
        } else {
            app_libs
                .iter()
                .map(|s| format!("/{s}"))
                .collect::<Vec<_>>()
                .join(" ")
        }
    ));
    Ok(App {
        layout,
        layer,
        size: d.size,
        app_libs,
        bind_paths,
        extra_packages,
    })
}

/// Creates the new layout, noted in `begun`. It is written beside the earlier
/// one, which stays whole (with the `image.json` that describes it) until the
/// new one is ([`crate::stage::layout::put_in_place`]): a rebuild stopped here
/// kept the earlier `image.json` without its `oci/`.
pub(crate) fn new_layout(out_dir: &Path, begun: &mut crate::Begun) -> Result<oci::Layout> {
    let part = out_dir.join(crate::stage::layout::PART);
    begun.begin(part.clone());
    oci::Layout::create(&part)
}

/// The binaries and the libraries they link that the base lacks; with `--mpi bind`
/// the MPI stack goes to the libraries to bind instead.
fn contents(mpi: MpiModel, binaries: &[(String, PathBuf)], base: &Base) -> Result<Contents> {
    let mut entries = Vec::new();
    let mut app_libs: BTreeSet<String> = BTreeSet::new();
    let mut bind_libs: BTreeSet<String> = BTreeSet::new();
    let mut extra_packages: BTreeSet<String> = BTreeSet::new();
    for (name, path) in binaries {
        let data = hpc_io::read::read_regular(path, hpc_io::read::MAX_DATA_BYTES)?;
        entries.push(Entry::file(&format!("usr/local/bin/{name}"), 0o755, data));
        let libs = ldd(path)?;
        // Bind model: the MPI library and what it pulls in come from the host.
        let mut mpi_stack: BTreeSet<String> = BTreeSet::new();
        let mut bind_extra: BTreeSet<String> = BTreeSet::new();
        if mpi == MpiModel::Bind {
            for l in libs.iter().filter(|l| l.soname.starts_with("libmpi.")) {
                if let Some(p) = &l.path {
                    mpi_stack.extend(self::mpi_stack(p)?);
                }
            }
        }
        // Libraries only the plugins need: bound in as well, when the base lacks them.
        for p in &mpi_stack {
            if !base_has(&base.files, p) && !libs.iter().any(|l| l.path.as_ref() == Some(p)) {
                bind_extra.insert(format!("/{}", usr_merged(p)));
            }
        }
        bind_libs.extend(bind_extra);
        for l in libs {
            let Some(p) = l.path else { continue };
            if base_has(&base.files, &p) {
                continue;
            }
            if mpi_stack.contains(&p) {
                bind_libs.insert(format!("/{}", usr_merged(&p)));
                continue;
            }
            let in_image = format!(
                "{}/{}",
                usr_merged(&p).rsplit_once('/').map_or("usr/lib", |x| x.0),
                l.soname
            );
            if app_libs.insert(in_image.clone()) {
                let data = hpc_io::read::read_regular(&p, hpc_io::read::MAX_DATA_BYTES)?;
                entries.push(Entry::file(&in_image, 0o644, data));
                if let Some(pkg) = dpkg_owner(&p) {
                    extra_packages.insert(pkg);
                }
            }
        }
    }
    Ok(Contents {
        entries,
        app_libs,
        bind_libs,
        extra_packages,
    })
}

/// The host paths to bind in: the MPI stack and, where it is bound, the extra
/// paths MPI needs that exist on this host.
fn bind_paths(mpi: MpiModel, bind_libs: &BTreeSet<String>) -> Vec<String> {
    let mut bind_paths: Vec<String> = bind_libs.iter().cloned().collect();
    if mpi == MpiModel::Bind {
        if bind_paths.is_empty() {
            say!("    note: the binary links no MPI library (build with --features mpi?): nothing to bind");
        } else {
            bind_paths.extend(
                BIND_EXTRA_PATHS
                    .iter()
                    .filter(|p| Path::new(p).exists())
                    .map(|s| s.to_string()),
            );
        }
    }
    bind_paths
}
