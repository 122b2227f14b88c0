//! `hpc completions`: the shell completion script, generated from the command line
//! definition (clap_complete), so it always matches this `hpc`.

/// Arguments of `hpc completions`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    hpc completions bash > ~/.local/share/bash-completion/completions/hpc\n  \
    hpc completions zsh > ~/.zfunc/_hpc        (with fpath+=~/.zfunc in ~/.zshrc)\n  \
    hpc completions fish > ~/.config/fish/completions/hpc.fish")]
pub struct Args {
    /// The shell to write the script for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Writes the completion script of `cmd` for the shell to standard output.
pub fn exec(args: Args, mut cmd: clap::Command) -> anyhow::Result<i32> {
    let name = cmd.get_name().to_string();
    // Generated in memory: clap_complete panics on a failed write, and standard
    // output may be a closed pipe or a full disk.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, name, &mut script);
    super::print_bytes(&script)?;
    Ok(0)
}
