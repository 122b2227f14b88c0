//! `hpc doctor`: diagnoses the container runtime, devices, launcher and limits.

use anyhow::Context as _;
use hpc_container::{Environment, Probe, Report};
use std::io::Write as _;
use std::path::PathBuf;

/// Arguments of `hpc doctor`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    hpc doctor                                   this process's environment\n  \
    srun -n 1 hpc doctor --json                  what a Slurm step sees, as JSON\n  \
    apptainer exec app.sif hpc doctor            inside a container\n  \
    hpc doctor --root /mnt/node7 --env-file node7.env   a captured node\n\n\
    Exit status: 0 healthy, 1 warnings, 2 errors or bad input.")]
pub struct Args {
    /// Root directory to diagnose instead of `/` (a file system captured elsewhere).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Environment to diagnose instead of this process's: `KEY=VALUE` lines
    /// (`env` output) or a NUL-separated `/proc/<pid>/environ` copy.
    #[arg(long, value_name = "FILE")]
    env_file: Option<PathBuf>,
    /// Print the report as JSON (schema_version 1) instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `hpc doctor`; the exit code is 0 when healthy, 1 with warnings, 2 with errors.
pub fn exec(args: Args) -> anyhow::Result<i32> {
    let live = Probe::live();
    let root = args.root.clone().unwrap_or_else(|| PathBuf::from("/"));
    let probe = match &args.env_file {
        // hpc-io's bounded read of a regular file: a FIFO or `/dev/zero` is refused
        // naming what it is, before anything is read.
        Some(file) => Probe::from_env_file(root.clone(), file).context("--env-file")?,
        None => Probe::new(root.clone(), live.env),
    };
    if !probe.root.is_dir() {
        anyhow::bail!(
            "--root {} is not a directory",
            hpc_env::short(&probe.root.to_string_lossy())
        );
    }
    let report = Report::new(
        &root.display().to_string(),
        Environment::detect_from(&probe),
    );
    let text = if args.json {
        report.to_json()
    } else {
        report.to_text(use_color())
    };
    let mut out = super::stdout::Stdout;
    writeln!(out, "{}", text.trim_end()).context("writing the report to standard output")?;
    out.flush()
        .context("writing the report to standard output")?;
    Ok(report.exit_code)
}

/// Colour only on a terminal, and never when `NO_COLOR` is set (no-color.org).
fn use_color() -> bool {
    if std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()) {
        return false;
    }
    std::io::IsTerminal::is_terminal(&std::io::stdout())
}
