//! The errors of run directories ([`Error`]).

use std::path::{Path, PathBuf};

use super::LOCK;
use crate::atomic::StepError;

/// Everything that can go wrong; each variant names the directory or file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another run holds the directory.
    #[error(
        "output directory {} is in use by {holder}; wait for it to finish or choose another \
         directory",
        crate::message::path(dir)
    )]
    Busy {
        /// The directory.
        dir: PathBuf,
        /// Who holds it, as far as its lock file says (`another run` if unknown).
        holder: String,
    },
    /// The output file is a lock file that a running process holds (a run
    /// directory's [`LOCK`], a checkpoint directory's lock): replacing it would
    /// let a second run into what that process owns ([`FileClaim`](super::FileClaim)).
    #[error(
        "{} is a lock file that a running process holds (a run's {LOCK} or a \
         checkpoint directory's lock): replacing it would let a second run into what that \
         run owns; choose another file",
        crate::message::path(path)
    )]
    LockFile {
        /// The output file.
        path: PathBuf,
    },
    /// Another run is writing the output file ([`FileClaim`](super::FileClaim)).
    #[error(
        "{} is being written by {holder}; wait for it to finish or choose another file",
        crate::message::path(path)
    )]
    FileBusy {
        /// The output file.
        path: PathBuf,
        /// Who holds it, as its lock file says (`another run` if unknown).
        holder: String,
    },
    /// A file operation failed.
    #[error("cannot {op} {}: {error}", crate::message::path(path))]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error (in the message, so not also a `source`).
        error: std::io::Error,
    },
    /// A manifest that cannot be read as one.
    /// A reason quoting the manifest is cut in the message ([`crate::message::cut`]).
    #[error(
        "{} is not a valid run manifest: {}",
        crate::message::path(path),
        crate::message::cut(reason)
    )]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A name that is not a plain file name inside the directory.
    /// The name is quoted cut ([`crate::message::cut`]): a caller's name of
    /// 100,000 characters was echoed whole.
    #[error(
        "{} is not a plain file name (no '/', not '.' or '..', not the manifest, the lock \
         or a temporary .NAME.tmp-PID)",
        crate::message::cut(&format!("{:?}", .0))
    )]
    Name(String),
    /// The directory holds files of the program's output names that no earlier
    /// run's manifest lists: they are not removed, and the run is refused.
    #[error(
        "{} holds {} that no earlier run of this program wrote (no run.json lists {}); remove {} or choose another output directory",
        crate::message::path(dir),
        files.join(", "),
        if files.len() == 1 { "it" } else { "them" },
        if files.len() == 1 { "it" } else { "them" }
    )]
    Foreign {
        /// The directory.
        dir: PathBuf,
        /// The files' names.
        files: Vec<String>,
    },
    /// The directory holds the files of an earlier run of another program: they
    /// are not removed, and the run is refused.
    #[error(
        "{} holds the results of a run of {} ({}); choose another output directory, or remove them",
        crate::message::path(dir),
        crate::message::cut(program),
        crate::message::cut(run_id)
    )]
    OtherProgram {
        /// The directory.
        dir: PathBuf,
        /// The earlier run's program.
        program: String,
        /// The earlier run's id.
        run_id: String,
    },
    /// A path that must be a regular file (the manifest, the lock) or a directory
    /// (the run directory) is something else.
    #[error(
        "{} is {kind}, not {wanted}; {}",
        crate::message::path(path),
        wrong_type_advice(kind)
    )]
    WrongType {
        /// The path.
        path: PathBuf,
        /// What it is ("a FIFO", "a symbolic link", "a regular file").
        kind: &'static str,
        /// What it must be.
        wanted: &'static str,
    },
    /// The directory is, or goes through, a symbolic link that another user made
    /// (neither this process's user, `root`, nor the owner of the folder holding
    /// the link), such as a link planted in a shared folder before the run: the
    /// run's files would go wherever it points.
    #[error(
        "{} is a symbolic link to {} made by user {owner}, not by this user nor by \
         the owner of its folder; give the directory it should be, or remove the link",
        crate::message::path(path),
        crate::message::path(target)
    )]
    ForeignLink {
        /// The link.
        path: PathBuf,
        /// Where it points.
        target: PathBuf,
        /// The user id that owns the link.
        owner: u32,
    },
    /// A file a reader should not trust (not listed, or the run did not complete).
    #[error("{}: {}", crate::message::path(path), crate::message::cut(reason))]
    Untrusted {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// What to do about a path of the wrong kind: a device (`--out /dev/null`) is not
/// something to remove, so only the other choice is given for it.
pub(super) fn wrong_type_advice(kind: &str) -> &'static str {
    if kind.ends_with("device") {
        "choose another output directory (a device cannot be one)"
    } else {
        "remove it or choose another output directory"
    }
}

/// Result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<StepError> for Error {
    fn from(e: StepError) -> Error {
        Error::Io {
            op: e.op,
            path: e.path,
            error: e.error,
        }
    }
}

pub(super) fn io<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |error| StepError::of(op, path)(error).into()
}
