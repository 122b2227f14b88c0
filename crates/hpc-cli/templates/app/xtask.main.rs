//! Automation of this workspace: `cargo xtask <task>` (the alias is in
//! `.cargo/config.toml`).

use clap::Parser;

/// Automation of {{name}}.
#[derive(Parser)]
#[command(name = "cargo xtask")]
enum Task {
    /// Build a container image of {{name}}: OCI layout and archives, an Apptainer
    /// definition, Slurm batch scripts and a Podman run script.
    Image(hpc_image::Args),
}

fn main() -> std::process::ExitCode {
    match Task::parse() {
        Task::Image(args) => hpc_image::exit(hpc_image::run(args)),
    }
}
