//! Project automation for hpc-rs: `cargo xtask <task>`.
//!
//! - `demo`: set up the machine, build, and run the main demo under `hpc run`.
//! - `test`: set up the machine and run every check CI runs (fmt, clippy, tests, docs,
//!   book, packaging).
//! - `setup`: only the set-up step (system packages, toolchain components, mdbook).
//!
//! Set-up installs what is missing: Debian packages through `apt-get` when running as
//! root (otherwise it prints the exact command and stops), rustup components, and
//! `mdbook` through `cargo install`. It is idempotent and quick when nothing is missing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

mod apptainer;
mod image;
mod setup;

/// hpc-rs project automation.
#[derive(Parser)]
#[command(name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Set up, build, and run the main demo on 2 and 4 ranks.
    Demo {
        /// Skip installing missing system packages and tools.
        #[arg(long)]
        no_setup: bool,
    },
    /// Set up and run every check CI runs.
    Test {
        /// Skip installing missing system packages and tools.
        #[arg(long)]
        no_setup: bool,
        /// Skip the slow checks (docs, book, packaging); for a quick local loop.
        #[arg(long)]
        quick: bool,
    },
    /// Only install what the other tasks need.
    Setup,
    /// A Slurm + PMIx cluster of Docker containers on this machine:
    /// `up [--nodes N] [--bin DIR]`, `down`, `status`, `exec CMD...`
    /// (containers/cluster/cluster.sh does the work).
    Cluster {
        /// Arguments for containers/cluster/cluster.sh.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        args: Vec<String>,
    },
    /// Build a binary in release mode and write its container image (OCI layout,
    /// oci-archive/docker-archive, SIF) plus Apptainer/Slurm/Podman run files.
    Image(image::Args),
}

/// The workspace root (the parent of this crate's folder).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Runs a command in the workspace root, echoing it, failing on a non-zero exit.
fn run(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}").replace('"', "");
    eprintln!("\n==> {shown}");
    let t = Instant::now();
    let status = cmd
        .current_dir(root())
        .status()
        .with_context(|| format!("cannot start {shown}"))?;
    eprintln!("    ({:.1}s)", t.elapsed().as_secs_f64());
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn demo() -> Result<()> {
    run(cargo().args([
        "build",
        "--release",
        "-p",
        "hpc-cli",
        "-p",
        "hpc-example-hello",
        "-p",
        "hpc-example-brunel",
    ]))?;
    let bin = root().join("target/release");
    let hpc = bin.join("hpc");
    for n in ["2", "4"] {
        run(Command::new(&hpc)
            .args(["run", "-n", n, "--"])
            .arg(bin.join("hello")))?;
    }
    // The main demo: Brunel's balanced network (12,500 neurons, 15.6 M synapses, 1 s
    // of biological time) on 2 ranks, spikes exchanged every interval.
    let out = root().join("target/demo/brunel");
    run(Command::new(&hpc)
        .args(["run", "-n", "2", "--bind", "core", "--"])
        .arg(bin.join("brunel"))
        .arg("--out")
        .arg(&out))?;
    eprintln!(
        "\ndemo finished: hello + allreduce on 2 and 4 ranks; Brunel network on 2 ranks \
         (spikes, summary and plots in {})",
        out.display()
    );
    Ok(())
}

fn test(quick: bool) -> Result<()> {
    let t = Instant::now();
    run(cargo().args(["fmt", "--all", "--", "--check"]))?;
    run(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--all-features",
        "--",
        "-D",
        "warnings",
    ]))?;
    // Integration tests that need MPI fail loudly instead of skipping.
    std::env::set_var("HPC_REQUIRE_MPI", "1");
    if setup::has("cargo-nextest") {
        run(cargo().args([
            "nextest",
            "run",
            "--workspace",
            "--all-features",
            "--no-fail-fast",
        ]))?;
        run(cargo().args(["test", "--workspace", "--all-features", "--doc"]))?;
    } else {
        run(cargo().args(["test", "--workspace", "--all-features", "--no-fail-fast"]))?;
    }
    if !quick {
        run(cargo()
            .args(["doc", "--workspace", "--no-deps", "--all-features"])
            .env("RUSTDOCFLAGS", "-D warnings -D missing_docs"))?;
        // The device script (GPU check, overlap with spare cores, scaling) packs its
        // bundle and runs every part in miniature, so it is known to work before a
        // GPU machine is at hand.
        run(Command::new("bash").args(["benches/device.sh", "dry"]))?;
        run(Command::new("mdbook").args(["build", "book"]))?;
        run(Command::new("mdbook").args(["test", "book"]))?;
        run(cargo().args([
            "package",
            "--workspace",
            "--exclude",
            "xtask",
            "--exclude",
            "hpc-benches",
            "--exclude",
            "hpc-example-hello",
            "--no-verify",
            "--allow-dirty",
        ]))?;
    }
    eprintln!("\nall checks passed in {:.0}s", t.elapsed().as_secs_f64());
    Ok(())
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.task {
        Task::Setup => setup::all(),
        Task::Cluster { args } => {
            if args.first().map(String::as_str) == Some("up") && !args.iter().any(|a| a == "--bin")
            {
                // The cluster runs the MPI-enabled release binaries of the workspace.
                run(cargo().args(["build", "--release", "-p", "hpc-cli", "--features", "mpi"]))?;
            }
            run(Command::new("bash")
                .arg(root().join("containers/cluster/cluster.sh"))
                .args(&args))
        }
        Task::Image(args) => image::run(args),
        Task::Demo { no_setup } => {
            if !no_setup {
                setup::all()?;
            }
            demo()
        }
        Task::Test { no_setup, quick } => {
            if !no_setup {
                setup::all()?;
            }
            test(quick)
        }
    }
}
