//! Stage 4: the OCI layout: the image's environment and labels, its config, the
//! manifest and the index.

use std::collections::BTreeMap;

use anyhow::Result;

use super::app_layer::App;
use super::binary::Built;
use crate::base::Base;
use crate::{oci, rfc3339, source_label, Args, Progress};

/// The image as written into the layout.
pub(crate) struct Image {
    /// Image name (`--name`, else the binary's).
    pub(crate) name: String,
    /// `localhost/NAME:TAG`.
    pub(crate) image_ref: String,
    /// The config's environment (`KEY=value`).
    pub(crate) env: Vec<String>,
    pub(crate) labels: BTreeMap<String, String>,
    /// `cargo build ...` as recorded in the labels.
    pub(crate) build_cmd: String,
    pub(crate) written: oci::Written,
    /// Compressed size of layers, config and manifest.
    pub(crate) compressed: u64,
}

/// Writes the config, the manifest and the index into the app layer's layout.
pub(crate) fn write(
    args: &Args,
    built: &Built,
    base: &Base,
    app: &App,
    pr: &mut Progress,
) -> Result<Image> {
    pr.step("OCI layout: config, manifest, index");
    let bin = &built.bin;
    let name = args.name.clone().unwrap_or_else(|| bin.name.clone());
    let ref_name = format!("{name}:{}", args.tag);
    let image_ref = format!("localhost/{ref_name}");
    let env = env(args.gpu);
    let build_cmd = format!("cargo {}", built.build.join(" "));
    let labels = labels(args, built, base, app, &name, &ref_name, &build_cmd);
    let app_cmd = vec![format!("/usr/local/bin/{}", bin.name)];
    let cfg = oci::ImageConfig {
        env: env.clone(),
        entrypoint: if args.entrypoint {
            app_cmd.clone()
        } else {
            vec![]
        },
        cmd: if args.entrypoint { vec![] } else { app_cmd },
        working_dir: "/".into(),
        labels: labels.clone(),
        created: rfc3339(built.epoch),
    };
    let layout = &app.layout;
    let mut layers = Vec::new();
    for (path, l) in &base.layers {
        layout.put_file(path, &l.blob)?;
        layers.push(l.clone());
    }
    layers.push(app.layer.clone());
    let written = layout.finish(&cfg, &layers, &ref_name)?;
    let compressed: u64 = written.layers.iter().map(|l| l.blob.size).sum::<u64>()
        + written.config.size
        + written.manifest.size;
    pr.done(&format!(
        "{} manifest {}",
        hpc_io::message::path(&layout.dir().with_file_name(LAYOUT)),
        written.manifest.digest
    ));
    Ok(Image {
        name,
        image_ref,
        env,
        labels,
        build_cmd,
        written,
        compressed,
    })
}

/// The layout's name in the output folder.
pub(crate) const LAYOUT: &str = "oci";

/// The new layout's name in the output folder until it is whole: the earlier
/// `oci/` stays as it was beside it.
pub(crate) const PART: &str = ".oci.part";

/// Puts the new layout, whole, in the place of the earlier one: first the earlier
/// `image.json` is removed (it describes the earlier layout: from here until the
/// new one is written, nothing in `out_dir` claims to be a whole image), then the
/// earlier `oci/`, and the new layout is renamed `oci/`. A stop is held until the
/// next stage ([`crate::sys::defer_stops`]), so the three steps are done together.
pub(crate) fn put_in_place(app: &mut App, out_dir: &std::path::Path) -> Result<()> {
    use anyhow::Context as _;
    let summary = out_dir.join("image.json");
    match std::fs::remove_file(&summary) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| {
                format!("removing the earlier {}", hpc_io::message::path(&summary))
            })
        }
        _ => {}
    }
    app.layout.rename(&out_dir.join(LAYOUT))
}

/// The image's environment.
fn env(gpu: bool) -> Vec<String> {
    let mut env = vec![
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        // Containers commonly run as root; Open MPI refuses that without these.
        "OMPI_ALLOW_RUN_AS_ROOT=1".into(),
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1".into(),
        // Single-copy (CMA) needs ptrace rights across containers: copy-in/copy-out.
        "OMPI_MCA_btl_vader_single_copy_mechanism=none".into(),
    ];
    if gpu {
        env.push("NVIDIA_VISIBLE_DEVICES=all".into());
        env.push("NVIDIA_DRIVER_CAPABILITIES=compute,utility".into());
    }
    env
}

/// The image's labels (OCI's and ours).
fn labels(
    args: &Args,
    built: &Built,
    base: &Base,
    app: &App,
    name: &str,
    ref_name: &str,
    build_cmd: &str,
) -> BTreeMap<String, String> {
    let bin = &built.bin;
    let features = &built.features;
    let mut labels = BTreeMap::new();
    let mut label = |k: &str, v: String| {
        labels.insert(k.to_string(), v);
    };
    label("org.opencontainers.image.title", name.to_string());
    label("org.opencontainers.image.ref.name", ref_name.to_string());
    label("org.opencontainers.image.revision", built.revision.clone());
    label("org.opencontainers.image.created", rfc3339(built.epoch));
    label("org.opencontainers.image.version", bin.version.clone());
    if let Some(r) = source_label(bin.repository.as_deref()) {
        label("org.opencontainers.image.source", r);
    }
    label("org.opencontainers.image.base.name", base.source.clone());
    label("io.hpc-rs.build", build_cmd.to_string());
    label(
        "io.hpc-rs.features",
        if features.is_empty() {
            "none".into()
        } else {
            features.clone()
        },
    );
    label("io.hpc-rs.mpi", args.mpi.name().into());
    label("io.hpc-rs.gpu", args.gpu.to_string());
    label("io.hpc-rs.binaries", built.names(","));
    if !app.bind_paths.is_empty() {
        label("io.hpc-rs.bind-paths", app.bind_paths.join(","));
    }
    labels
}
