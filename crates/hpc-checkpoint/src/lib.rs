//! Verified, atomic checkpoints for distributed simulations.
//!
//! A *checkpoint set* is a directory holding one directory per checkpointed step:
//!
//! ```text
//! <root>/step-0000003000/
//!   rank-000000.ckpt    rank 0's bytes     (header + payload, written by rank 0)
//!   rank-000001.ckpt    rank 1's bytes     (written by rank 1)
//!   ...
//!   spikes.ckpt         a named file       (any rank, usually rank 0)
//!   manifest.json       written last, by one rank: step, rank count, every
//!                       file's size and CRC-32C, the application's metadata
//! ```
//!
//! The payloads are the application's bytes; this crate does not interpret them.
//! Each file starts with a 40-byte header (magic `HPCCKPT\0`, format version, kind,
//! step, rank, rank count, payload length, little-endian) so that a file copied or
//! renamed into the wrong checkpoint is caught, and the manifest carries a CRC-32C
//! of itself, so an edited or damaged manifest is caught too.
//!
//! # Writing
//!
//! Every rank writes its own file with [`Checkpoints::write_rank`], which returns a
//! [`FileEntry`] (name, size, checksum). The application gathers the entries on one
//! rank (they are `serde` values; an allgather of their JSON does) and that rank
//! calls [`Checkpoints::commit`], which checks that every rank's file is there with
//! its size and writes `manifest.json`. Every file goes to a temporary name, is
//! synced, and is renamed; the manifest is renamed last and the directory synced,
//! so a crash at any point leaves either a complete checkpoint or one without a
//! manifest, which readers skip with a warning.
//!
//! # Reading
//!
//! [`Checkpoints::latest`] returns the newest checkpoint that verifies: every file
//! listed exists, has the size and checksum of the manifest, and its header names
//! the manifest's step, its own rank and the manifest's rank count. A newer
//! checkpoint that fails is skipped with a `tracing` warning that names the file and
//! the problem, never silently; if none verifies, the error lists why each failed.
//! [`Checkpoint::open`] opens one directory the caller names (no fallback).
//! [`Checkpoint::read_rank`] and [`Checkpoint::read_file`] check the file they read
//! again, so a rank that reads only its own part (the usual case on a parallel file
//! system) still reads only verified bytes.
//!
//! # Why CRC-32C
//!
//! The threat is damage (a flipped bit on a disk or a network, a truncated or
//! half-copied file, a file from another checkpoint), not an adversary who forges
//! files. CRC-32C is the checksum storage systems use for that (iSCSI, ext4 and
//! Btrfs metadata, Ceph, Lustre's wire checksums): it detects every burst error up
//! to 32 bits and all but 2^-32 of other damage, and the `crc32c` crate computes it
//! with the SSE 4.2 / ARMv8 CRC instructions at memory speed, so verifying costs
//! little next to reading the file. A cryptographic hash (SHA-256, BLAKE3) would
//! add tamper evidence that a checkpoint on the user's own file system does not
//! need, at several times the CPU cost.
//!
//! # Layout on parallel file systems
//!
//! One file per rank and one directory per step: no two ranks write the same file,
//! nothing is locked, and a rank reads only the files it needs. The manifest is small
//! and written by one rank. Thousands of ranks put thousands of files in one
//! directory; that is what Lustre and GPFS handle well (and far better than one
//! shared file with byte-range locks).
//!
//! ```
//! use hpc_checkpoint::{Checkpoints, Error};
//! let root = std::env::temp_dir().join(format!("ckpt-doc-{}", std::process::id()));
//! let set = Checkpoints::new(&root);
//! for step in [100u64, 200] {
//!     let entries = (0..2u32)
//!         .map(|r| set.write_rank(step, r, 2, format!("rank {r} at {step}").as_bytes()))
//!         .collect::<Result<Vec<_>, Error>>()?;
//!     set.commit(step, 2, entries, serde_json::json!({ "dt_ms": 0.1 }))?;
//! }
//! // A bit flips in the newest checkpoint: it is skipped, with a warning.
//! let newest = set.step_dir(200).join("rank-000001.ckpt");
//! let mut bytes = std::fs::read(&newest).unwrap();
//! *bytes.last_mut().unwrap() ^= 1;
//! std::fs::write(&newest, bytes).unwrap();
//! let ck = set.latest()?;
//! assert_eq!(ck.step(), 100);
//! assert_eq!(ck.read_rank(1)?, b"rank 1 at 100");
//! assert_eq!(ck.metadata()["dt_ms"], 0.1);
//! // Opened by name, the damaged one says what is wrong.
//! let err = hpc_checkpoint::Checkpoint::open(set.step_dir(200))?.verify().unwrap_err();
//! assert!(err.to_string().contains("rank-000001.ckpt"), "{err}");
//! # std::fs::remove_dir_all(&root).unwrap();
//! # Ok::<(), Error>(())
//! ```

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Name of the manifest in a checkpoint directory.
pub const MANIFEST: &str = "manifest.json";
/// Version of the file header and manifest written by this crate.
pub const FORMAT_VERSION: u32 = 1;
/// The `format` field of every manifest.
pub const FORMAT: &str = "hpc-checkpoint";
/// Bytes of the header before each file's payload.
pub const HEADER_LEN: usize = 40;
/// The largest manifest read (64 MiB: hundreds of thousands of ranks' entries); a
/// larger `manifest.json` is refused before it is read.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

const MAGIC: &[u8; 8] = b"HPCCKPT\0";
const KIND_RANK: u32 = 0;
const KIND_NAMED: u32 = 1;
const NO_RANK: u32 = u32::MAX;
const CRC_FIELD: &str = "\"manifest_crc32c\": \"";
const CRC_PLACEHOLDER: &str = "00000000";

/// Everything that can go wrong; every variant names the file or directory.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read, written, synced or renamed.
    #[error("cannot {op} {path}: {source}")]
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
    #[error("checkpoint {dir} is incomplete: it has no {MANIFEST} (its write was interrupted)")]
    Incomplete {
        /// The directory.
        dir: PathBuf,
    },
    /// The manifest cannot be parsed, fails its own checksum, or lists files wrongly.
    #[error("{path} is not a valid checkpoint manifest: {reason}")]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A file listed in the manifest does not exist.
    #[error("{path} is listed in the manifest but missing")]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// A file's size differs from the manifest's.
    #[error("{path} is {found} bytes but the manifest says {expected} (truncated or overwritten)")]
    Size {
        /// The file.
        path: PathBuf,
        /// Bytes per the manifest.
        expected: u64,
        /// Bytes on disk.
        found: u64,
    },
    /// A file's CRC-32C differs from the manifest's.
    #[error("{path} is damaged: its CRC-32C is {found:08x} but the manifest says {expected:08x}")]
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
    #[error("{path}: {reason}")]
    Header {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An argument was out of range (a rank beyond the rank count, a bad file name).
    #[error("{0}")]
    InvalidArgument(String),
    /// The root holds no checkpoint directory at all.
    #[error("no checkpoint in {root} (no step-* directory)")]
    NotFound {
        /// The checkpoint set's root.
        root: PathBuf,
    },
    /// Every checkpoint in the root failed verification.
    #[error("no checkpoint in {root} verifies:{}", list(.rejected))]
    NoneValid {
        /// The checkpoint set's root.
        root: PathBuf,
        /// Each rejected checkpoint, newest first, and why.
        rejected: Vec<Rejected>,
    },
}

fn list(rejected: &[Rejected]) -> String {
    rejected
        .iter()
        .map(|r| format!("\n  step {}: {}", r.step, r.error))
        .collect()
}

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A checkpoint that [`Checkpoints::latest`] skipped.
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
fn read_error(
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

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// One file of a checkpoint as the manifest lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// File name inside the step directory.
    pub name: String,
    /// The rank whose state it holds (`None` for a named file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// Size in bytes, header included.
    pub size: u64,
    /// CRC-32C of the whole file (header included).
    #[serde(with = "hex32")]
    pub crc32c: u32,
}

mod hex32 {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u32, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:08x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        let s = String::deserialize(d)?;
        u32::from_str_radix(&s, 16).map_err(|_| D::Error::custom(format!("bad checksum {s:?}")))
    }
}

/// The manifest of a checkpoint (`manifest.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`FORMAT_VERSION`] of the writer.
    pub version: u32,
    /// The step the checkpoint holds.
    pub step: u64,
    /// Number of rank files.
    pub ranks: u32,
    /// Every file, rank files first in rank order.
    pub files: Vec<FileEntry>,
    /// The application's metadata (model parameters, counters, ...).
    pub metadata: serde_json::Value,
    /// CRC-32C of the manifest text with this field set to `00000000`.
    manifest_crc32c: String,
}

impl Manifest {
    /// The entry of `rank`'s file.
    pub fn rank_file(&self, rank: u32) -> Option<&FileEntry> {
        self.files.iter().find(|f| f.rank == Some(rank))
    }

    /// The entry of the named file `name` (as given to [`Checkpoints::write_file`]).
    pub fn named_file(&self, name: &str) -> Option<&FileEntry> {
        let file = named_file_name(name);
        self.files
            .iter()
            .find(|f| f.rank.is_none() && f.name == file)
    }
}

/// The file name of rank `rank`'s file.
pub fn rank_file_name(rank: u32) -> String {
    format!("rank-{rank:06}.ckpt")
}

fn named_file_name(name: &str) -> String {
    format!("{name}.ckpt")
}

fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && !name.starts_with("rank-")
        && name != "manifest"
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "checkpoint file name {name:?}: use letters, digits, '.', '_' and '-', \
             not starting with '.' or 'rank-'"
        )))
    }
}

/// The header before each file's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    kind: u32,
    step: u64,
    rank: u32,
    ranks: u32,
    payload_len: u64,
}

impl Header {
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.kind.to_le_bytes());
        b[16..24].copy_from_slice(&self.step.to_le_bytes());
        b[24..28].copy_from_slice(&self.rank.to_le_bytes());
        b[28..32].copy_from_slice(&self.ranks.to_le_bytes());
        b[32..40].copy_from_slice(&self.payload_len.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> std::result::Result<Header, String> {
        if b.len() < HEADER_LEN {
            return Err(format!(
                "{} bytes, too short for a checkpoint file header ({HEADER_LEN})",
                b.len()
            ));
        }
        if &b[..8] != MAGIC {
            return Err("not a checkpoint file (wrong magic)".into());
        }
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let version = u32_at(8);
        if version != FORMAT_VERSION {
            return Err(format!(
                "format version {version}, this reader knows {FORMAT_VERSION}"
            ));
        }
        Ok(Header {
            kind: u32_at(12),
            step: u64_at(16),
            rank: u32_at(24),
            ranks: u32_at(28),
            payload_len: u64_at(32),
        })
    }
}

/// Writes `header` and `payload` to `path` through a temporary name ([`tmp_name`],
/// with [`hpc_io::atomic::replace_with`]); returns the file's size and CRC-32C. The
/// directory is synced by [`Checkpoints::commit`], once for every file of the step.
fn write_atomic(path: &Path, header: Header, payload: &mut dyn Read) -> Result<(u64, u32)> {
    let tmp = tmp_name(path);
    hpc_io::atomic::replace_with(path, &tmp, |f| {
        let h = header.encode();
        f.write_all(&h).map_err(io("write", &tmp))?;
        let mut crc = crc32c::crc32c(&h);
        let mut size = HEADER_LEN as u64;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = match payload.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io("read the payload for", &tmp)(e)),
            };
            f.write_all(&buf[..n]).map_err(io("write", &tmp))?;
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            size += n as u64;
        }
        if size != HEADER_LEN as u64 + header.payload_len {
            return Err(Error::InvalidArgument(format!(
                "{}: the payload was {} bytes, announced {}",
                tmp.display(),
                size - HEADER_LEN as u64,
                header.payload_len
            )));
        }
        Ok((size, crc))
    })
}

/// Whether `name` is a temporary name of [`tmp_name`]: `<name>.tmp<digits>`.
fn is_temporary(name: &str) -> bool {
    name.rfind(".tmp").is_some_and(|i| {
        let digits = &name[i + 4..];
        i > 0 && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
    })
}

fn tmp_name(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(format!(".tmp{}", std::process::id()));
    PathBuf::from(p)
}

/// Syncs a directory so that the renames in it survive a crash.
fn sync_dir(dir: &Path) -> Result<()> {
    Ok(hpc_io::atomic::sync_dir(dir)?)
}

impl From<hpc_io::atomic::StepError> for Error {
    fn from(e: hpc_io::atomic::StepError) -> Error {
        Error::Io {
            op: e.op,
            path: e.path,
            source: e.error,
        }
    }
}

/// A directory of checkpoints, one `step-NNNNNNNNNN` directory per step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoints {
    root: PathBuf,
}

impl Checkpoints {
    /// The checkpoint set in `root` (created when the first file is written).
    pub fn new(root: impl Into<PathBuf>) -> Checkpoints {
        Checkpoints { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of the checkpoint of `step`.
    pub fn step_dir(&self, step: u64) -> PathBuf {
        self.root.join(format!("step-{step:010}"))
    }

    fn make_dir(&self, step: u64) -> Result<PathBuf> {
        let dir = self.step_dir(step);
        fs::create_dir_all(&dir).map_err(io("create", &dir))?;
        Ok(dir)
    }

    /// Writes rank `rank`'s part (of `ranks`) of the checkpoint of `step`.
    pub fn write_rank(
        &self,
        step: u64,
        rank: u32,
        ranks: u32,
        payload: &[u8],
    ) -> Result<FileEntry> {
        self.write_rank_from(step, rank, ranks, payload.len() as u64, &mut &payload[..])
    }

    /// Like [`Checkpoints::write_rank`], streaming `len` bytes from `payload`.
    pub fn write_rank_from(
        &self,
        step: u64,
        rank: u32,
        ranks: u32,
        len: u64,
        payload: &mut dyn Read,
    ) -> Result<FileEntry> {
        if rank >= ranks {
            return Err(Error::InvalidArgument(format!(
                "rank {rank} is not below the rank count {ranks}"
            )));
        }
        let dir = self.make_dir(step)?;
        let name = rank_file_name(rank);
        let header = Header {
            kind: KIND_RANK,
            step,
            rank,
            ranks,
            payload_len: len,
        };
        let (size, crc32c) = write_atomic(&dir.join(&name), header, payload)?;
        Ok(FileEntry {
            name,
            rank: Some(rank),
            size,
            crc32c,
        })
    }

    /// Writes a named file (not tied to a rank) into the checkpoint of `step`:
    /// `<name>.ckpt`. Names are letters, digits, `.`, `_` and `-`.
    pub fn write_file(&self, step: u64, name: &str, payload: &[u8]) -> Result<FileEntry> {
        self.write_file_from(step, name, payload.len() as u64, &mut &payload[..])
    }

    /// Like [`Checkpoints::write_file`], streaming `len` bytes from `payload` (a large
    /// file is copied without holding it in memory).
    pub fn write_file_from(
        &self,
        step: u64,
        name: &str,
        len: u64,
        payload: &mut dyn Read,
    ) -> Result<FileEntry> {
        check_name(name)?;
        let dir = self.make_dir(step)?;
        let file = named_file_name(name);
        let header = Header {
            kind: KIND_NAMED,
            step,
            rank: NO_RANK,
            ranks: 0,
            payload_len: len,
        };
        let (size, crc32c) = write_atomic(&dir.join(&file), header, payload)?;
        Ok(FileEntry {
            name: file,
            rank: None,
            size,
            crc32c,
        })
    }

    /// Completes the checkpoint of `step`: checks that `entries` name every rank
    /// `0..ranks` once and that each file is on disk with its size, then writes the
    /// manifest (last, atomically) with `metadata`. Call it on one rank, after every
    /// rank's [`Checkpoints::write_rank`] returned.
    pub fn commit(
        &self,
        step: u64,
        ranks: u32,
        entries: impl IntoIterator<Item = FileEntry>,
        metadata: serde_json::Value,
    ) -> Result<Checkpoint> {
        let dir = self.step_dir(step);
        let mut files: Vec<FileEntry> = entries.into_iter().collect();
        files.sort_by(|a, b| {
            (a.rank.is_none(), a.rank, &a.name).cmp(&(b.rank.is_none(), b.rank, &b.name))
        });
        for r in 0..ranks {
            let n = files.iter().filter(|f| f.rank == Some(r)).count();
            if n != 1 {
                return Err(Error::InvalidArgument(format!(
                    "checkpoint {}: {n} entries for rank {r} (expected 1)",
                    dir.display()
                )));
            }
        }
        if let Some(f) = files.iter().find(|f| f.rank.is_some_and(|r| r >= ranks)) {
            return Err(Error::InvalidArgument(format!(
                "checkpoint {}: entry {} is beyond the rank count {ranks}",
                dir.display(),
                f.name
            )));
        }
        for f in &files {
            let path = dir.join(&f.name);
            let found = fs::metadata(&path)
                .map_err(|_| Error::Missing { path: path.clone() })?
                .len();
            if found != f.size {
                return Err(Error::Size {
                    path,
                    expected: f.size,
                    found,
                });
            }
        }
        // Every rank's file of this step is written, and earlier steps are done:
        // a temporary file left in any of them is an interrupted write's.
        self.remove_temporaries(step);
        let manifest = Manifest {
            format: FORMAT.into(),
            version: FORMAT_VERSION,
            step,
            ranks,
            files,
            metadata,
            manifest_crc32c: CRC_PLACEHOLDER.into(),
        };
        let text = manifest_text(&manifest);
        let path = dir.join(MANIFEST);
        // Synced, renamed, and the step's directory synced (its rank files' renames
        // with the manifest's).
        hpc_io::atomic::write(&path, &tmp_name(&path), text.as_bytes())?;
        sync_dir(&self.root)?;
        Ok(Checkpoint {
            dir,
            manifest: parse_manifest(&path, text.as_bytes())?,
        })
    }

    /// Keeps the newest `keep` (at least one) of the checkpoints whose steps are
    /// listed in `written` (those this run committed, ascending) and removes the
    /// directories of the others, oldest first; `written` is left holding the kept
    /// steps. Only the listed steps are touched, so checkpoints of another run in the
    /// same root (newer ones included) are never removed for this run's. Returns the
    /// steps removed.
    pub fn prune(&self, written: &mut Vec<u64>, keep: usize) -> Result<Vec<u64>> {
        let keep = keep.max(1);
        let excess = written.len().saturating_sub(keep);
        let gone: Vec<u64> = written.drain(..excess).collect();
        for &step in &gone {
            let dir = self.step_dir(step);
            match fs::remove_dir_all(&dir) {
                Ok(()) => {
                    tracing::debug!(checkpoint = %dir.display(), "removed an older checkpoint")
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("remove the older checkpoint", &dir)(e)),
            }
        }
        if !gone.is_empty() {
            sync_dir(&self.root)?;
        }
        Ok(gone)
    }

    /// Removes the temporary files (`<name>.tmp<pid>`) that interrupted writes left
    /// in the directories of `step` and of the steps before it, whose writes are all
    /// over once `step` is committed; each removal is logged. Returns how many were
    /// removed. Failures are warnings: a leftover costs space, not correctness.
    pub fn remove_temporaries(&self, step: u64) -> usize {
        let mut removed = 0;
        let steps = match self.steps() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot look for temporary checkpoint files");
                return 0;
            }
        };
        for s in steps.into_iter().filter(|&s| s <= step) {
            let dir = self.step_dir(s);
            let Ok(rd) = fs::read_dir(&dir) else { continue };
            for e in rd.filter_map(|e| e.ok()) {
                let name = e.file_name();
                let Some(name) = name.to_str() else { continue };
                if !is_temporary(name) || !e.file_type().is_ok_and(|t| t.is_file()) {
                    continue;
                }
                let path = e.path();
                match fs::remove_file(&path) {
                    Ok(()) => {
                        removed += 1;
                        tracing::info!(file = %path.display(), "removed the temporary file of an interrupted checkpoint write");
                    }
                    Err(e) => {
                        tracing::warn!(file = %path.display(), error = %e, "cannot remove a temporary checkpoint file")
                    }
                }
            }
        }
        removed
    }

    /// The steps that have a directory (complete or not), ascending.
    pub fn steps(&self) -> Result<Vec<u64>> {
        let rd = match fs::read_dir(&self.root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("read the directory", &self.root)(e)),
        };
        let mut steps: Vec<u64> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name();
                let name = name.to_str()?;
                let digits = name.strip_prefix("step-")?;
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                // Only the name `step_dir` gives the step: `step-10` is not step
                // 10's directory (`step-0000000010`), which would then be opened.
                let step: u64 = digits.parse().ok()?;
                (self.step_dir(step).file_name()? == name).then_some(step)
            })
            .collect();
        steps.sort_unstable();
        steps.dedup();
        Ok(steps)
    }

    /// The newest checkpoint that verifies completely ([`Checkpoint::verify`]).
    /// Each newer one that does not is skipped with a `tracing` warning naming the
    /// file and the problem.
    pub fn latest(&self) -> Result<Checkpoint> {
        self.latest_with_rejections().map(|(c, _)| c)
    }

    /// Like [`Checkpoints::latest`], also returning the checkpoints skipped (newest
    /// first), for applications that report them themselves.
    pub fn latest_with_rejections(&self) -> Result<(Checkpoint, Vec<Rejected>)> {
        let steps = self.steps()?;
        if steps.is_empty() {
            return Err(Error::NotFound {
                root: self.root.clone(),
            });
        }
        let mut rejected = Vec::new();
        for &step in steps.iter().rev() {
            let dir = self.step_dir(step);
            match Checkpoint::open(&dir).and_then(|c| c.verify().map(|()| c)) {
                Ok(c) => {
                    if c.step() != step {
                        let e = Error::Manifest {
                            path: dir.join(MANIFEST),
                            reason: format!(
                                "it names step {} but lies in the directory of step {step}",
                                c.step()
                            ),
                        };
                        warn_rejected(&dir, &e);
                        rejected.push(Rejected {
                            step,
                            dir,
                            error: Box::new(e),
                        });
                        continue;
                    }
                    if !rejected.is_empty() {
                        tracing::warn!(
                            checkpoint = %dir.display(),
                            step,
                            skipped = rejected.len(),
                            "resuming from an older checkpoint because the newer one(s) failed verification"
                        );
                    }
                    return Ok((c, rejected));
                }
                Err(e) => {
                    warn_rejected(&dir, &e);
                    rejected.push(Rejected {
                        step,
                        dir,
                        error: Box::new(e),
                    });
                }
            }
        }
        Err(Error::NoneValid {
            root: self.root.clone(),
            rejected,
        })
    }
}

fn warn_rejected(dir: &Path, e: &Error) {
    tracing::warn!(
        checkpoint = %dir.display(),
        error = %e,
        "checkpoint failed verification; trying the previous one"
    );
}

fn manifest_text(m: &Manifest) -> String {
    let mut text = serde_json::to_string_pretty(m).expect("a manifest serialises");
    text.push('\n');
    let crc = crc32c::crc32c(text.as_bytes());
    let at = text
        .rfind(&format!("{CRC_FIELD}{CRC_PLACEHOLDER}\""))
        .expect("the checksum field is present")
        + CRC_FIELD.len();
    text.replace_range(at..at + 8, &format!("{crc:08x}"));
    text
}

fn parse_manifest(path: &Path, bytes: &[u8]) -> Result<Manifest> {
    let bad = |reason: String| Error::Manifest {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::str::from_utf8(bytes).map_err(|_| bad("it is not UTF-8 text".into()))?;
    let at = text
        .rfind(CRC_FIELD)
        .map(|i| i + CRC_FIELD.len())
        .filter(|&i| text.len() >= i + 8 && text.is_char_boundary(i + 8))
        .ok_or_else(|| bad("it has no manifest_crc32c field".into()))?;
    let stored = u32::from_str_radix(&text[at..at + 8], 16)
        .map_err(|_| bad("its manifest_crc32c is not 8 hex digits".into()))?;
    let mut zeroed = text.to_string();
    zeroed.replace_range(at..at + 8, CRC_PLACEHOLDER);
    let found = crc32c::crc32c(zeroed.as_bytes());
    if found != stored {
        return Err(bad(format!(
            "its CRC-32C is {found:08x} but it records {stored:08x} (edited or damaged)"
        )));
    }
    let m: Manifest = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    if m.format != FORMAT {
        return Err(bad(format!("format {:?}, expected {FORMAT:?}", m.format)));
    }
    if m.version != FORMAT_VERSION {
        return Err(bad(format!(
            "format version {}, this reader knows {FORMAT_VERSION}",
            m.version
        )));
    }
    for r in 0..m.ranks {
        let n = m.files.iter().filter(|f| f.rank == Some(r)).count();
        if n != 1 {
            return Err(bad(format!("it lists {n} files for rank {r} (expected 1)")));
        }
    }
    for f in &m.files {
        if f.rank.is_some_and(|r| r >= m.ranks) {
            return Err(bad(format!(
                "it lists {} for rank {:?} of {}",
                f.name, f.rank, m.ranks
            )));
        }
        let expected = match f.rank {
            Some(r) => rank_file_name(r),
            None => f.name.clone(),
        };
        let plain = !f.name.contains('/') && !f.name.starts_with('.') && f.name.ends_with(".ckpt");
        if f.name != expected || !plain || f.name == MANIFEST {
            return Err(bad(format!("it lists a file named {:?}", f.name)));
        }
    }
    Ok(m)
}

/// One checkpoint: a step directory and its manifest.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    dir: PathBuf,
    manifest: Manifest,
}

impl Checkpoint {
    /// Opens the checkpoint in `dir`: reads the manifest and checks its own checksum
    /// and structure. The files are checked by [`Checkpoint::verify`] (all of them)
    /// or by [`Checkpoint::read_rank`] and [`Checkpoint::read_file`] (the one read).
    pub fn open(dir: impl Into<PathBuf>) -> Result<Checkpoint> {
        let dir = dir.into();
        let path = dir.join(MANIFEST);
        // Bounded, and refused at once when it is a FIFO or a device.
        let bytes = match hpc_io::read::read_regular(&path, MAX_MANIFEST_BYTES) {
            Ok(b) => b,
            Err(hpc_io::read::ReadError::Open { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Err(if dir.is_dir() {
                    Error::Incomplete { dir }
                } else {
                    io("open the checkpoint directory", &dir)(source)
                });
            }
            Err(e) => {
                return Err(read_error(
                    e,
                    &path,
                    || unreachable!("a missing manifest is handled above"),
                    |reason| Error::Manifest {
                        path: path.clone(),
                        reason,
                    },
                ))
            }
        };
        let manifest = parse_manifest(&path, &bytes)?;
        Ok(Checkpoint { dir, manifest })
    }

    /// The step directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The step this checkpoint holds.
    pub fn step(&self) -> u64 {
        self.manifest.step
    }

    /// Number of ranks that wrote it.
    pub fn ranks(&self) -> u32 {
        self.manifest.ranks
    }

    /// The application's metadata.
    pub fn metadata(&self) -> &serde_json::Value {
        &self.manifest.metadata
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Checks every file: present, the manifest's size and CRC-32C, and a header
    /// naming the manifest's step, the file's rank and the rank count. Reads every
    /// byte once (streaming, without holding a file in memory).
    pub fn verify(&self) -> Result<()> {
        for f in &self.manifest.files {
            self.check_file(f, None)?;
        }
        Ok(())
    }

    /// Reads, checks and returns rank `rank`'s payload.
    pub fn read_rank(&self, rank: u32) -> Result<Vec<u8>> {
        let f = self.manifest.rank_file(rank).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "checkpoint {} has {} ranks, no rank {rank}",
                self.dir.display(),
                self.manifest.ranks
            ))
        })?;
        let mut payload = Vec::new();
        self.check_file(f, Some(&mut payload))?;
        Ok(payload)
    }

    /// Reads, checks and returns the payload of the named file `name` (as given to
    /// [`Checkpoints::write_file`]); `None` if the checkpoint has no such file.
    pub fn read_file(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let Some(f) = self.manifest.named_file(name) else {
            return Ok(None);
        };
        let mut payload = Vec::new();
        self.check_file(f, Some(&mut payload))?;
        Ok(Some(payload))
    }

    /// Checks one file; with `out`, also returns its payload.
    fn check_file(&self, f: &FileEntry, mut out: Option<&mut Vec<u8>>) -> Result<()> {
        let path = self.dir.join(&f.name);
        // Opened without blocking (a FIFO in place of a rank file would wait for a
        // writer for ever) and only when it is a regular file.
        let (mut file, len) = hpc_io::read::open_regular(&path).map_err(|e| {
            read_error(
                e,
                &path,
                || Error::Missing { path: path.clone() },
                |reason| Error::Header {
                    path: path.clone(),
                    reason,
                },
            )
        })?;
        if len != f.size {
            return Err(Error::Size {
                path,
                expected: f.size,
                found: len,
            });
        }
        let mut head = [0u8; HEADER_LEN];
        let got = read_full(&mut file, &mut head).map_err(io("read", &path))?;
        let header = Header::decode(&head[..got]).map_err(|reason| Error::Header {
            path: path.clone(),
            reason,
        })?;
        let bad = |reason: String| Error::Header {
            path: path.clone(),
            reason,
        };
        match f.rank {
            Some(r) => {
                if header.kind != KIND_RANK {
                    return Err(bad(
                        "a named file where the manifest lists a rank file".into()
                    ));
                }
                if header.rank != r || header.ranks != self.manifest.ranks {
                    return Err(bad(format!(
                        "it holds rank {} of {} but the manifest lists it as rank {r} of {}",
                        header.rank, header.ranks, self.manifest.ranks
                    )));
                }
            }
            None => {
                if header.kind != KIND_NAMED {
                    return Err(bad(
                        "a rank file where the manifest lists a named file".into()
                    ));
                }
            }
        }
        if header.step != self.manifest.step {
            return Err(bad(format!(
                "it holds step {} but the manifest is of step {}",
                header.step, self.manifest.step
            )));
        }
        if HEADER_LEN as u64 + header.payload_len != f.size {
            return Err(bad(format!(
                "its header announces {} payload bytes, the file has {}",
                header.payload_len,
                f.size.saturating_sub(HEADER_LEN as u64)
            )));
        }
        let mut crc = crc32c::crc32c(&head);
        if let Some(v) = out.as_mut() {
            // The payload is held in memory: refused when the machine does not have
            // it (an allocation failure would abort the process).
            let available = hpc_io::read::mem_available();
            if available.is_some_and(|a| header.payload_len > a) {
                return Err(bad(format!(
                    "its payload of {} bytes is more than the {} bytes of memory available \
                     (MemAvailable)",
                    header.payload_len,
                    available.unwrap_or(0)
                )));
            }
            v.clear();
            usize::try_from(header.payload_len)
                .ok()
                .and_then(|n| v.try_reserve_exact(n).ok())
                .ok_or_else(|| {
                    bad(format!(
                        "its payload of {} bytes cannot be allocated",
                        header.payload_len
                    ))
                })?;
        }
        let mut buf = vec![0u8; (1 << 20).min(header.payload_len as usize).max(1)];
        let mut total = 0u64;
        // At most one byte more than the header announces (which is the size the
        // manifest claims): a file that grows while it is read is still bounded.
        let mut file = (&mut file).take(header.payload_len.saturating_add(1));
        loop {
            let n = match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io("read", &path)(e)),
            };
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            total += n as u64;
            if let Some(v) = out.as_mut() {
                v.extend_from_slice(&buf[..n]);
            }
        }
        if total != header.payload_len {
            return Err(Error::Size {
                path,
                expected: f.size,
                found: HEADER_LEN as u64 + total,
            });
        }
        if crc != f.crc32c {
            return Err(Error::Checksum {
                path,
                expected: f.crc32c,
                found: crc,
            });
        }
        Ok(())
    }
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match f.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_roundtrips() {
        let h = Header {
            kind: KIND_RANK,
            step: 3000,
            rank: 7,
            ranks: 9,
            payload_len: 12345,
        };
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        assert!(Header::decode(&h.encode()[..39]).is_err());
    }

    #[test]
    fn only_canonical_step_names_are_steps() {
        // `step-10` is not the directory of step 10 (`step-0000000010`): listing it
        // as step 10 then failed with "No such file" for a directory that exists.
        let root = std::env::temp_dir().join(format!("ckpt-names-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let set = Checkpoints::new(&root);
        for name in [
            "step-10",
            "step-00000000020",
            "step-",
            "step-x",
            "step-0000000030",
        ] {
            fs::create_dir_all(root.join(name)).unwrap();
        }
        fs::create_dir_all(set.step_dir(12345678901)).unwrap();
        assert_eq!(set.steps().unwrap(), vec![30, 12345678901]);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn temporaries_of_interrupted_writes_are_removed_at_the_next_commit() {
        let root = std::env::temp_dir().join(format!("ckpt-tmp-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let set = Checkpoints::new(&root);
        // An interrupted checkpoint of step 10: a rank file and the manifest's
        // temporary, no manifest.
        let e = set.write_rank(10, 0, 1, b"ten").unwrap();
        let left = [
            set.step_dir(10).join("manifest.json.tmp4242"),
            set.step_dir(10).join("rank-000000.ckpt.tmp17"),
        ];
        for p in &left {
            fs::write(p, b"partial").unwrap();
        }
        let later = set.step_dir(30).join("rank-000000.ckpt.tmp99");
        fs::create_dir_all(set.step_dir(30)).unwrap();
        fs::write(&later, b"another step's write").unwrap();
        drop(e);
        let e = set.write_rank(20, 0, 1, b"twenty").unwrap();
        set.commit(20, 1, [e], serde_json::json!({})).unwrap();
        for p in &left {
            assert!(!p.exists(), "{} is left", p.display());
        }
        // A later step's write may be under way: left alone.
        assert!(later.exists());
        assert!(set.step_dir(10).join("rank-000000.ckpt").exists());
        assert!(
            is_temporary("manifest.json.tmp1") && !is_temporary("a.tmp") && !is_temporary(".tmp1")
        );
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn pruning_keeps_the_newest_of_this_runs_checkpoints_only() {
        let root = std::env::temp_dir().join(format!("ckpt-prune-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let set = Checkpoints::new(&root);
        let write = |step: u64| {
            let e = set.write_rank(step, 0, 1, b"x").unwrap();
            set.commit(step, 1, [e], serde_json::json!({})).unwrap();
        };
        // Another run's checkpoint, newer than all of this run's.
        write(9000);
        let mut written = Vec::new();
        for step in (100..=600).step_by(100) {
            write(step);
            written.push(step);
            set.prune(&mut written, 3).unwrap();
            assert!(written.len() <= 3);
        }
        assert_eq!(written, [400, 500, 600]);
        assert_eq!(set.steps().unwrap(), [400, 500, 600, 9000]);
        // keep 0 is taken as 1: the newest is never removed.
        assert_eq!(set.prune(&mut written, 0).unwrap(), [400, 500]);
        assert_eq!(set.steps().unwrap(), [600, 9000]);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn names_are_checked() {
        for bad in ["", ".hidden", "a/b", "rank-1", "manifest", "x y"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        check_name("spikes.spk").unwrap();
    }

    proptest! {
        #[test]
        fn manifest_parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_manifest(Path::new("m.json"), &bytes);
        }

        #[test]
        fn header_decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Header::decode(&bytes);
        }
    }
}
