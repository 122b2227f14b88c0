//! The files a simulation run reads and writes, handled so that nothing is silently
//! lost and nothing silently wrong.
//!
//! - [`atomic`]: files replaced atomically (a temporary name, synced, renamed, the
//!   directory synced), so that a reader or a crash never meets half a file.
//! - [`message`]: an error and its causes as one line, each cause once.
//! - [`read`]: user-named files read with a size bound, refused when they are not
//!   regular files (a FIFO would block for ever, `/dev/zero` would never end) before
//!   anything is allocated for them.
//! - [`rundir`]: an output directory owned by one run at a time, with a manifest that
//!   names the run that wrote each file and says whether the run completed.
//! - [`tool`]: another program run for its answer, bounded in time and in the
//!   output kept.
//! - [`mod@write`]: writes whose failures are reported: result lines on standard output
//!   (a full disk is an error, a closed pipe is not) and a writer that keeps the
//!   first error of a library that drops them.
//!
//! This crate depends on none of the other hpc-rs crates, so every crate and example
//! can use it.

pub mod atomic;
mod lockfile;
pub mod message;
pub mod read;
pub mod rundir;
pub mod serde_path;
pub mod system;
pub mod tool;
pub mod write;

/// What the modules' tests share: a fresh directory and a FIFO.
#[cfg(test)]
pub(crate) mod test_util {
    use std::path::Path;

    pub(crate) use hpc_test_support::TmpDir;

    /// A fresh, empty directory of the tests (`hpc-io-<pid>-<n>-<module>-<tag>`
    /// under the temporary directory), removed with what it holds when dropped:
    /// when the test fails too, and unique to the call (the same tag in two
    /// tests, or two runs of the tests at once, do not share it).
    pub(crate) fn scratch(module: &str, tag: &str) -> TmpDir {
        TmpDir::new("hpc-io", &format!("{module}-{tag}"))
    }

    /// Makes a FIFO (mode 0600) at `path`.
    pub(crate) fn mkfifo(path: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
    }
}
