//! `hpc topo` (placeholder until its crate lands).

/// Arguments of `hpc topo`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `hpc topo`.
pub fn exec(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`hpc topo` is not available in this build yet")
}
