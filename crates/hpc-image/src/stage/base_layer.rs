//! Stage 2: the base layers: imported (`--base`) or made by `mmdebstrap` into the
//! cache.

use std::fs;
use std::path::Path;

use anyhow::Result;

use crate::base::{self, Base, BaseSpec};
use crate::{Args, Progress};

/// The base of the image, and its compressed size. The caller holds the cache's
/// lock.
pub(crate) fn base(
    args: &Args,
    cache: &Path,
    epoch: u64,
    pr: &mut Progress,
) -> Result<(BaseSpec, Base, u64)> {
    let spec = BaseSpec::for_model(args.mpi);
    let base = match &args.base {
        Some(p) => {
            pr.step(&format!("importing base {}", hpc_io::message::path(p)));
            fs::create_dir_all(cache)?;
            base::import(p, cache)?
        }
        None => {
            pr.step(&format!(
                "base layer: Debian {} {} + [{}] ({})",
                spec.suite,
                spec.variant,
                spec.packages.join(" "),
                hpc_io::message::path(&cache.join(spec.key()))
            ));
            base::ensure(&spec, cache, epoch)?
        }
    };
    let base_size: u64 = base.layers.iter().map(|(_, l)| l.blob.size).sum();
    pr.done(&format!(
        "{} layer(s), {:.1} MB compressed{}",
        base.layers.len(),
        base_size as f64 / 1e6,
        if base.cached { ", from the cache" } else { "" }
    ));
    Ok((spec, base, base_size))
}
