//! The `hpc` command-line tool.
//!
//! `hpc run` launches ranks on this machine, `hpc new` writes an application
//! workspace, `hpc doctor` diagnoses the environment, `hpc topo` shows the hardware
//! and the placement of ranks, `hpc selftest` checks that a launch works end to end,
//! `hpc cluster` runs a Slurm + PMIx cluster of Docker containers to try jobs on.

use std::io::IsTerminal;

use clap::{CommandFactory, Parser, Subcommand};

mod cmd;

/// `hpc --version`: the version and whether this build has MPI. `cargo xtask image
/// --with-hpc` reads the `(features: ...)` list (hpc-image's `hpc_features`): keep
/// its shape.
#[cfg(feature = "mpi")]
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (features: mpi)");
#[cfg(not(feature = "mpi"))]
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (features: none; for mpirun and srun: cargo install hpc-cli --features mpi)"
);

/// Tools for running and checking hpc-rs applications.
#[derive(Parser, Debug)]
#[command(
    name = "hpc",
    version = VERSION,
    about,
    long_about = None,
    propagate_version = true,
    after_help = "Examples:\n  \
        hpc new my-sim && cd my-sim && cargo build\n  \
        hpc run -n 4 -- target/debug/my-sim\n  \
        hpc doctor\n  \
        hpc topo --ranks 4 --threads 6\n  \
        hpc completions bash > ~/.local/share/bash-completion/completions/hpc",
    after_long_help = cmd::EXIT_STATUS_HELP,
)]
struct Cli {
    /// Log filter (tracing `EnvFilter` syntax); also read from `HPC_LOG`.
    #[arg(long, global = true, env = hpc_runtime::env::LOG, default_value = "warn")]
    log: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    // Its about, long about and examples are `cmd::run::Args`'s: a doc comment here
    // would replace them with its one line (the long about, with the exit statuses,
    // was then in neither `--help` nor the manual page).
    Run(cmd::run::Args),
    /// Write a new application workspace: program, `cargo xtask image`, Slurm script.
    New(cmd::new::Args),
    /// Diagnose the environment: container runtime, devices, launcher, limits.
    Doctor(cmd::doctor::Args),
    /// Show the hardware topology and the placement of ranks, threads and progress cores.
    Topo(cmd::topo::Args),
    /// Check that a launch works: ranks, sizes, nodes, barrier and allgather.
    Selftest(cmd::selftest::Args),
    /// Measure the transport like perftest (run under `hpc run -n 2`).
    Perftest(cmd::perftest::Args),
    /// Serve as the collectives proxy of a node (started by the ranks under `hpc run --proxy`).
    Proxy(cmd::proxy::Args),
    /// A Slurm + PMIx cluster of Docker containers on this machine: up, exec, down.
    Cluster(cmd::cluster::Args),
    /// Merge the ranks' timelines (HPC_TRACE) into one Chrome/Perfetto trace, or draw one.
    Trace(cmd::trace::Args),
    /// Print the shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd::completions::Args),
    /// Print the manual page, or write all of them into a directory.
    Man(cmd::man::Args),
}

fn main() {
    // clap reads HPC_LOG as --log's default and would call a value that is not UTF-8
    // an invalid argument: name the variable instead.
    if let Err(e) = hpc_runtime::env::var(hpc_runtime::env::LOG) {
        last_words(&e.to_string());
        std::process::exit(cmd::EXIT_ERROR);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => clap_exit(e),
    };
    // A --log (or HPC_LOG) that is not a filter is said so, naming it, as
    // hpc_rs::init says it for the ranks; tracing's own line named neither.
    let (filter, log_problem) = match tracing_subscriber::EnvFilter::try_new(&cli.log) {
        Ok(f) => (f, None),
        Err(e) => (
            tracing_subscriber::EnvFilter::new("warn"),
            Some(format!(
                "--log {} (or {}) is not a log filter ({e}); using warn",
                hpc_runtime::env::shown(&cli.log),
                hpc_runtime::env::LOG
            )),
        ),
    };
    let launcher = matches!(cli.command, Command::Run(_));
    // A subcommand run as a rank or a proxy of a traced job (`HPC_TRACE`) records its
    // timeline as applications do; `hpc run` itself records none (it must stay
    // single-threaded until it forks its supervisor).
    let trace = if launcher {
        None
    } else {
        match hpc_trace::layer_from_env() {
            Ok(t) => t,
            Err(e) => {
                last_words(&e.to_string());
                std::process::exit(cmd::EXIT_ERROR);
            }
        }
    };
    {
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;
        use tracing_subscriber::Layer as _;
        let _ = tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(hpc_trace::LogWriter::stderr())
                    .with_ansi(stderr_in_colour())
                    .with_filter(filter),
            )
            .with(trace.map(|t| t.with_filter(hpc_trace::default_filter())))
            .try_init();
    }
    if let Some(p) = log_problem {
        tracing::warn!("{p}");
    }
    // A rank of `hpc selftest --collectives proxy` (or any hpc subcommand that makes a
    // Proxy communicator) started without `hpc run --proxy` re-executes this program as
    // its proxy: serve, as every application does through `hpc_rs::init()`.
    // `hpc proxy` serves itself, once it has pinned itself.
    if matches!(cli.command, Command::Proxy(_)) {
        hpc_trace::set_label("collectives proxy");
    }
    if !matches!(cli.command, Command::Proxy(_)) && hpc_comm::proxy::requested() {
        if let Err(e) = hpc_comm::proxy::serve_env() {
            last_words(&format!("serving as the collectives proxy: {e}"));
            std::process::exit(cmd::EXIT_ERROR);
        }
    }
    let result = match cli.command {
        Command::Run(a) => cmd::run::exec(a),
        Command::New(a) => cmd::new::exec(a),
        Command::Completions(a) => cmd::completions::exec(a, Cli::command()),
        Command::Man(a) => cmd::man::exec(a, Cli::command()),
        Command::Doctor(a) => cmd::doctor::exec(a),
        Command::Topo(a) => cmd::topo::exec(a),
        Command::Selftest(a) => cmd::selftest::exec(a),
        Command::Perftest(a) => cmd::perftest::exec(a),
        Command::Proxy(a) => cmd::proxy::exec(a),
        Command::Cluster(a) => cmd::cluster::exec(a),
        Command::Trace(a) => cmd::trace::exec(a),
    };
    match result {
        Ok(code) => std::process::exit(code),
        // Output into a closed pipe (`hpc topo | head -1`): end as a Unix tool killed
        // by SIGPIPE would, without a message.
        Err(e) if cmd::is_broken_pipe(&e) => std::process::exit(cmd::EXIT_BROKEN_PIPE),
        Err(e) => {
            last_words(&hpc_io::message::chain(e.as_ref()));
            // A rank's own status passes through `hpc run`, so the launcher's own
            // failures have a code of their own (as `timeout` and `env` do).
            let usage = e
                .chain()
                .any(|c| c.downcast_ref::<cmd::UsageError>().is_some());
            std::process::exit(if launcher && !usage {
                cmd::EXIT_RUN_FAILED
            } else {
                cmd::EXIT_ERROR
            });
        }
    }
}

/// Writes `hpc: error: MESSAGE` to standard error in one write
/// ([`hpc_io::message::last_words`]): a rank that `hpc run` stops while it says this
/// (another rank failed first) leaves the whole line or nothing.
fn last_words(message: &str) {
    hpc_io::message::last_words("hpc", message);
}

/// Ends the process with what clap has to say (`--help`, `--version`, a usage
/// error), as `clap::Error::exit` does, except that a failed write is not silent
/// (a closed pipe ends with 141, any other write error with a message and status
/// 2), a line is cut after `hpc_io::message::LINE_CHARS` characters (clap's
/// "invalid value" quotes the value whole), and a value's control characters
/// are shown escaped, never in colour.
fn clap_exit(e: clap::Error) -> ! {
    let to_stderr = e.use_stderr();
    // clap's "invalid UTF-8 was detected in one or more arguments" named no
    // argument (`hpc trace svg --title $'\xff'`): the first one that is not
    // UTF-8 is named, with the flag it is given to.
    if e.kind() == clap::error::ErrorKind::InvalidUtf8 {
        if let Some(what) = not_utf8_argument(std::env::args_os()) {
            last_words(&what);
            std::process::exit(cmd::EXIT_ERROR);
        }
    }
    // `hpc --help >&-`: the text went to the runtime's `/dev/null`, status 0.
    if !to_stderr && cmd::stdout::closed_at_start() {
        last_words(&format!(
            "writing to standard output: {}",
            cmd::stdout::closed_error()
        ));
        std::process::exit(cmd::EXIT_ERROR);
    }
    let text = e.render();
    let terminal = if to_stderr {
        std::io::stderr().is_terminal()
    } else {
        std::io::stdout().is_terminal()
    };
    // An argument holding a control character (a carriage return, a terminal's
    // escape) or a bidirectional control is quoted in plain text, escaped: the
    // coloured text, itself made of escapes, passed the refused value to the
    // terminal as it was (a title set, a line hidden or reordered). The plain
    // text leaves a terminal's escapes out.
    let odd = std::env::args_os().any(|a| {
        a.to_string_lossy()
            .chars()
            .any(hpc_io::message::needs_escape)
    });
    let colour = terminal && !odd && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let text = if colour {
        text.ansi().to_string()
    } else {
        hpc_io::message::escape_controls(&text.to_string()).into_owned()
    };
    hpc_io::message::usage_exit("hpc", &text, to_stderr, e.exit_code())
}

/// Names the first of `args` (the program first) that is not valid UTF-8, and
/// the flag it is the value of (`--title X`, `--title=X`), for a refusal.
fn not_utf8_argument(args: impl IntoIterator<Item = std::ffi::OsString>) -> Option<String> {
    use std::os::unix::ffi::OsStrExt as _;
    let args: Vec<std::ffi::OsString> = args.into_iter().collect();
    let i = args.iter().skip(1).position(|a| a.to_str().is_none())? + 1;
    let bytes = args[i].as_bytes();
    let shown = hpc_io::message::escape_controls(&args[i].to_string_lossy()).into_owned();
    let flag = match bytes.iter().position(|&b| b == b'=') {
        Some(eq) if bytes.starts_with(b"--") => {
            Some(String::from_utf8_lossy(&bytes[..eq]).into_owned())
        }
        _ => args[i - 1]
            .to_str()
            .filter(|p| i > 1 && p.starts_with('-') && *p != "--")
            .map(str::to_string),
    };
    Some(match flag {
        Some(f) => format!(
            "the value of {} is not valid UTF-8 (shown with U+FFFD for the invalid bytes): {shown}; it takes text",
            hpc_io::message::escape_controls(&f)
        ),
        None => format!(
            "argument {i} is not valid UTF-8 (shown with U+FFFD for the invalid bytes): {shown}; it takes text"
        ),
    })
}

/// Colour in log lines only when stderr is a terminal and `NO_COLOR` is unset or
/// empty (no-color.org).
fn stderr_in_colour() -> bool {
    if std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()) {
        return false;
    }
    std::io::stderr().is_terminal()
}
