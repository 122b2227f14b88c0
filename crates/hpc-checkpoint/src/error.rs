//! The crate's error and the checks it reports.

use std::path::{Path, PathBuf};

use crate::MANIFEST;

/// Everything that can go wrong; every variant names the file or directory
/// (cut as [`hpc_io::message::path`] cuts a path longer than any the system
/// takes).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read, written, synced or renamed.
    #[error("cannot {op} {}: {source}", hpc_io::message::path(path))]
    Io {
        /// What was being done (`write`, `read`, `rename`, ...).
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A checkpoint directory without a manifest: its write did not finish.
    #[error(
        "checkpoint {} is incomplete: it has no {MANIFEST} (its write was interrupted)",
        hpc_io::message::path(dir)
    )]
    Incomplete {
        /// The directory.
        dir: PathBuf,
    },
    /// The manifest cannot be parsed, fails its own checksum, or lists files wrongly.
    /// A reason quoting the manifest (a field of 100,000 characters) is cut in the
    /// message ([`hpc_io::message::cut`]).
    #[error(
        "{} is not a valid checkpoint manifest: {}",
        hpc_io::message::path(path),
        hpc_io::message::cut(reason)
    )]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A file listed in the manifest does not exist.
    #[error(
        "{} is listed in the manifest but missing",
        hpc_io::message::path(path)
    )]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// A file's size differs from the manifest's.
    #[error(
        "{} is {found} bytes but the manifest says {expected} (truncated or overwritten)",
        hpc_io::message::path(path)
    )]
    Size {
        /// The file.
        path: PathBuf,
        /// Bytes per the manifest.
        expected: u64,
        /// Bytes on disk.
        found: u64,
    },
    /// A file's CRC-32C differs from the manifest's.
    #[error(
        "{} is damaged: its CRC-32C is {found:08x} but the manifest says {expected:08x}",
        hpc_io::message::path(path)
    )]
    Checksum {
        /// The file.
        path: PathBuf,
        /// Checksum per the manifest.
        expected: u32,
        /// Checksum of the bytes on disk.
        found: u32,
    },
    /// A file's header is not a checkpoint header or contradicts the manifest
    /// (another step, another rank, another rank count).
    #[error("{}: {}", hpc_io::message::path(path), hpc_io::message::cut(reason))]
    Header {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An argument was out of range (a rank beyond the rank count, a bad file name).
    #[error("{0}")]
    InvalidArgument(String),
    /// The root holds no checkpoint directory at all (or is an empty path).
    #[error("no checkpoint in {}", not_found(root))]
    NotFound {
        /// The checkpoint set's root.
        root: PathBuf,
    },
    /// Every checkpoint in the root failed verification.
    #[error(
        "no checkpoint in {} verifies:{}",
        hpc_io::message::path(root),
        list(.rejected)
    )]
    NoneValid {
        /// The checkpoint set's root.
        root: PathBuf,
        /// Each rejected checkpoint, newest first, and why.
        rejected: Vec<Rejected>,
    },
}

/// The most rejected checkpoints [`Error::NoneValid`]'s message lists, newest
/// first; the others are counted (a root of 5,000 interrupted steps gave a
/// message of 5,000 lines). Every one is in its `rejected` field.
pub const LISTED_REJECTIONS: usize = 10;

/// The root of [`Error::NotFound`] and why it holds no checkpoint: an empty
/// path was shown as nothing ("no checkpoint in  (no step-* directory)").
fn not_found(root: &Path) -> String {
    if root.as_os_str().is_empty() {
        "\"\": an empty path names no directory".into()
    } else {
        format!("{} (no step-* directory)", hpc_io::message::path(root))
    }
}

pub(crate) fn list(rejected: &[Rejected]) -> String {
    let mut text: String = rejected
        .iter()
        .take(LISTED_REJECTIONS)
        .map(|r| format!("\n  step {}: {}", r.step, r.error))
        .collect();
    if let Some(more) = rejected
        .len()
        .checked_sub(LISTED_REJECTIONS)
        .filter(|&n| n > 0)
    {
        text.push_str(&format!("\n  and {more} older ones"));
    }
    text
}

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A checkpoint that [`Checkpoints::latest`](crate::Checkpoints::latest) skipped.
#[derive(Debug)]
pub struct Rejected {
    /// Its step.
    pub step: u64,
    /// Its directory.
    pub dir: PathBuf,
    /// Why it was skipped.
    pub error: Box<Error>,
}

/// The error of a bounded read ([`hpc_io::read`]) of a checkpoint's file at `path`:
/// a missing file is `missing`, one that is not a regular file (a FIFO, a device)
/// or too large is `invalid`'s error with the reason, others are I/O errors.
pub(crate) fn read_error(
    e: hpc_io::read::ReadError,
    path: &Path,
    missing: impl FnOnce() -> Error,
    invalid: impl FnOnce(String) -> Error,
) -> Error {
    use hpc_io::read::ReadError;
    match e {
        ReadError::Open { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            missing()
        }
        ReadError::Open { source, .. } => io("open", path)(source),
        ReadError::Read { source, .. } => io("read", path)(source),
        ReadError::NotRegular { kind, .. } => invalid(format!("it is {kind}, not a regular file")),
        ReadError::TooLarge { size, max, .. } => {
            invalid(format!("it is {size} bytes, more than the {max} accepted"))
        }
        other => invalid(other.to_string()),
    }
}

pub(crate) fn io<'a>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}
