//! One module per subcommand. Each exposes `Args` (clap) and `exec(Args) -> Result<i32>`
//! returning the process exit code.
//!
//! Exit status (also in `hpc --help` and the man page): 0 success; 1 the command ran
//! and reports a problem (`doctor` warnings, `topo` oversubscription); 2 bad input or
//! an error (a usage error, an invalid value, an unreadable file, a destination that
//! is not empty; `doctor`: errors found). `hpc run` exits with the status of the first
//! rank that failed (0 when all succeed), 128+N when a rank was killed by signal N,
//! 124 when `--time-limit` stopped the job, and 125 when `hpc run` itself failed
//! once its arguments were accepted (a program that cannot be started); bad arguments
//! are 2 as for every subcommand.

pub mod bind;
pub mod completions;
pub mod doctor;
pub mod job;
pub mod man;
pub mod new;
pub mod perftest;
pub mod proxy;
pub mod run;
pub mod selftest;
pub mod topo;
pub mod values;

/// Bad input or an error of the command itself.
pub const EXIT_ERROR: i32 = 2;
/// `hpc run`: the launcher itself failed once its arguments were accepted (a program
/// that cannot be started, the coordinator failing).
pub const EXIT_RUN_FAILED: i32 = 125;

/// The text of `hpc --help`'s exit status section.
pub const EXIT_STATUS_HELP: &str = "Exit status:\n  \
    0    success\n  \
    1    the command ran and reports a problem: doctor found warnings, topo had to\n       \
    oversubscribe cores\n  \
    2    bad input or an error: a usage error, an invalid value, an unreadable file, a\n       \
    destination that is not empty; doctor found errors\n  \
    hpc run: the status of the first rank that failed (0 when all succeed), 128+N when a\n  \
    rank was killed by signal N, 124 when --time-limit stopped the job, 125 when hpc run\n  \
    itself failed once its arguments were accepted (a program that cannot be started);\n  \
    bad arguments are 2 as everywhere";

/// Bad input, reported with exit status 2 and its message.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}
