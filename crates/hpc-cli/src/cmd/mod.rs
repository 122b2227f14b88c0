//! One module per subcommand. Each exposes `Args` (clap) and `exec(Args) -> Result<i32>`
//! returning the process exit code.
//!
//! Exit status (also in `hpc --help` and the man page): 0 success; 1 the command ran
//! and reports a problem (`doctor` warnings, `topo` oversubscription); 2 bad input or
//! an error (a usage error, an invalid value, an unreadable file, a destination that
//! holds files `hpc new` would overwrite; `doctor`: errors found). `hpc run` exits
//! with the status of the first rank that failed (0 when all succeed), 128+N when a
//! rank was killed by signal N, 124 when `--time-limit` stopped the job, and 125 when
//! `hpc run` itself failed once its arguments were accepted (a program that cannot
//! be started, the ranks' output that cannot be written, say to a full disk); bad
//! arguments are 2 as for every subcommand. A rank that exits with 124 or 125 would
//! be mistaken for the launcher, so `hpc run` names that status in its message and
//! exits with 1 ([`EXIT_RANK_RESERVED`]). `hpc cluster exec` passes its command's
//! status through (124 when its `--timeout` ended it, 125 when the cluster is not
//! up).
//!
//! Output to a closed pipe (`hpc ... | head -1`) ends every subcommand quietly with
//! 141 (128 + SIGPIPE), what a shell reports for a program killed by a broken pipe;
//! any other failed write of the output (a full disk, `>/dev/full`) is an error with
//! a message naming the stream: status 2, or 125 for `hpc run`.

pub mod bind;
pub mod cluster;
pub mod completions;
pub mod doctor;
pub mod job;
pub mod man;
pub mod new;
pub mod perftest;
pub mod proxy;
mod replace;
pub mod run;
pub mod selftest;
pub mod stdout;
pub mod topo;
pub mod trace;
pub mod values;

/// Bad input or an error of the command itself.
pub const EXIT_ERROR: i32 = 2;
/// `hpc run`: the launcher itself failed once its arguments were accepted (a program
/// that cannot be started, the coordinator failing).
pub const EXIT_RUN_FAILED: i32 = 125;
/// `hpc run`: a rank exited with a status the launcher keeps for itself (124, 125);
/// the message names the rank's status.
pub const EXIT_RANK_RESERVED: i32 = 1;
/// Output into a closed pipe: 128 + SIGPIPE, as a shell reports a program that
/// SIGPIPE killed. Every subcommand ends with it, without a message.
pub const EXIT_BROKEN_PIPE: i32 = 128 + libc::SIGPIPE;

/// The text of `hpc --help`'s exit status section.
pub const EXIT_STATUS_HELP: &str = "Exit status:\n  \
    0    success\n  \
    1    the command ran and reports a problem: doctor found warnings, topo had to\n       \
    oversubscribe cores\n  \
    2    bad input or an error: a usage error, an invalid value, an unreadable file, a\n       \
    destination that holds files hpc new would overwrite; doctor found errors\n  \
    hpc run: the status of the first rank that failed (0 when all succeed), 128+N when a\n  \
    rank was killed by signal N, 124 when --time-limit stopped the job, 125 when hpc run\n  \
    itself failed once its arguments were accepted (a program that cannot be started,\n  \
    the ranks' output that cannot be written); a rank's own 124 or 125 is named in the\n  \
    message and gives 1; bad arguments are 2 as everywhere\n  \
    hpc cluster exec: the command's status, 124 when --timeout ended it, 125 when the\n  \
    cluster is not up\n  \
    141  the output is a closed pipe (hpc ... | head -1), without a message; any other\n       \
    failed write of the output is an error naming the stream (2, 125 for hpc run)";

pub use replace::{replace_file, replace_file_with_mode};

/// Bad input, reported with exit status 2 and its message.
pub use hpc_io::message::UsageError;

/// Writes `bytes` to standard output and flushes it; the error names the stream
/// (one closed when `hpc` started included: [`stdout::Stdout`]).
pub fn print_bytes(bytes: &[u8]) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use std::io::Write as _;
    let mut out = stdout::Stdout;
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .context("writing to standard output")
}

/// Writes `line` and a newline to standard output (see [`print_bytes`]).
pub fn say(line: &str) -> anyhow::Result<()> {
    let mut l = String::with_capacity(line.len() + 1);
    l.push_str(line);
    l.push('\n');
    print_bytes(l.as_bytes())
}

/// Refuses a request whose memory `need` (bytes, computed without overflow from the
/// flags named in `what`) exceeds what this machine has available (`MemAvailable`),
/// or what this process can address, before anything is allocated for it.
pub fn check_memory(what: &str, need: u128) -> Result<(), UsageError> {
    let fmt = |b: u128| hpc_topology::format_bytes(u64::try_from(b).unwrap_or(u64::MAX));
    if need > isize::MAX as u128 {
        return Err(UsageError(format!(
            "{what} would need about {} of memory, more than this process can address",
            fmt(need)
        )));
    }
    match hpc_topology::budget::available_memory() {
        Some(available) if need > u128::from(available) => Err(UsageError(format!(
            "{what} would need about {} of memory, but {} is available (MemAvailable)",
            fmt(need),
            fmt(u128::from(available))
        ))),
        _ => Ok(()),
    }
}

/// Refuses `value` of `flag` above `max`.
pub fn check_at_most(flag: &str, value: usize, max: usize) -> Result<(), UsageError> {
    check_between(flag, value, 0, max)
}

/// Checks a count flag against its range: a value below `min` (`--iters 0`, which
/// measured nothing and exited 0) or above `max` is a usage error naming the flag.
pub fn check_between(flag: &str, value: usize, min: usize, max: usize) -> Result<(), UsageError> {
    if value < min {
        return Err(UsageError(format!(
            "{flag} {value} is below the least of {min}"
        )));
    }
    if value > max {
        return Err(UsageError(format!(
            "{flag} {value} is above the limit of {max}"
        )));
    }
    Ok(())
}

/// A CPU list given on the command line (`topo --allowed`, `proxy --cpus`): the
/// parser's checks, and a list that names no CPU (`--allowed ''`, `--cpus ,`) is
/// refused naming the flag rather than taken as "no restriction" or "no core".
pub fn cpu_list_flag(flag: &str, list: &str) -> anyhow::Result<hpc_topology::CpuSet> {
    use anyhow::Context as _;
    let set = hpc_topology::CpuSet::parse_list(list)
        .with_context(|| format!("{flag} {}", hpc_env::short(list)))?;
    if set.is_empty() {
        return Err(UsageError(format!(
            "{flag} {} names no CPU (give a list such as 0-3,8)",
            hpc_env::shown(list)
        ))
        .into());
    }
    Ok(set)
}

/// Whether `e` is, or was caused by, a write into a closed pipe.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    /// Hostile pass 20: a `.NAME.tmp-PID` already there (a planted file or
    /// link) made the write fail with "File exists", and was then removed as
    /// if it were the write's own. The next name is taken; what was there is
    /// left as it was.
    #[test]
    fn a_temporary_name_already_taken_is_left_alone() {
        let dir = hpc_test_support::TmpDir::new("hpc-cli", "replace-file");
        let planted = dir.join(format!(".out.tmp-{}", std::process::id()));
        std::fs::write(&planted, b"keep").unwrap();
        super::replace_file(&dir.join("out"), b"new").unwrap();
        assert_eq!(std::fs::read(dir.join("out")).unwrap(), b"new");
        assert_eq!(std::fs::read(&planted).unwrap(), b"keep");
        // A write that fails (a directory at the name) removes only its own.
        std::fs::create_dir(dir.join("d")).unwrap();
        let planted = dir.join(format!(".d.tmp-{}", std::process::id()));
        std::fs::write(&planted, b"keep").unwrap();
        assert!(super::replace_file(&dir.join("d"), b"new").is_err());
        assert_eq!(std::fs::read(&planted).unwrap(), b"keep");
        let left: Vec<_> = std::fs::read_dir(&*dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".d.tmp-") && n.contains('-') && n.matches('-').count() > 1)
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    /// Hostile pass 21: a file replaced (`hpc trace merge -o F`, F a user's
    /// private 0640 file) became 0644, readable by every user. It keeps its
    /// permission bits, as every replacement through `hpc_io::atomic`.
    #[test]
    fn a_file_replaced_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = hpc_test_support::TmpDir::new("hpc-cli", "replace-mode");
        let out = dir.join("private.json");
        std::fs::write(&out, b"old").unwrap();
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o640)).unwrap();
        super::replace_file(&out, b"new").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"new");
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640);
    }

    /// Hostile pass 20: a write that failed named only its hidden temporary
    /// ("writing ./.big.json.tmp-PID: File too large"), not the output asked
    /// for. The output is named.
    #[test]
    fn a_failed_write_names_the_output() {
        let dir = hpc_test_support::TmpDir::new("hpc-cli", "replace-fails");
        let e = super::replace_file(&dir.join("absent/out.json"), b"x").unwrap_err();
        assert!(
            format!("{e:#}").starts_with(&format!(
                "writing {}: creating its temporary {}",
                dir.join("absent/out.json").display(),
                dir.join(format!("absent/.out.json.tmp-{}", std::process::id()))
                    .display()
            )),
            "{e:#}"
        );
    }
}
