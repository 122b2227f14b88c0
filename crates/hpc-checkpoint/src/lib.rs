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

mod checkpoint;
mod checkpoints;
mod error;
mod file;
mod manifest;
#[cfg(test)]
mod tests;

pub use checkpoint::Checkpoint;
pub use checkpoints::Checkpoints;
pub use error::{Error, Rejected, Result, LISTED_REJECTIONS};
pub use file::rank_file_name;
pub use manifest::{FileEntry, Manifest};

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
