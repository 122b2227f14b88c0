//! One checkpoint: verifying it and reading its payloads.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::{io, read_error, Error, Result};
use crate::file::{read_full, read_some, Header};
use crate::manifest::{parse_manifest, FileEntry, Manifest};
use crate::{HEADER_LEN, KIND_NAMED, KIND_RANK, MANIFEST, MAX_MANIFEST_BYTES};

/// One checkpoint: a step directory and its manifest.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub(crate) dir: PathBuf,
    pub(crate) manifest: Manifest,
}

impl Checkpoint {
    /// The checkpoint (a directory whose manifest reads) that `dir` is or lies
    /// in, if any: no place for a run's checkpoints nor for its output
    /// directory, whose files would be mixed with the checkpoint's and go
    /// with it when it is pruned.
    pub fn holding(dir: &Path) -> Option<&Path> {
        dir.ancestors()
            .filter(|a| !a.as_os_str().is_empty())
            .find(|a| Checkpoint::open(a).is_ok())
    }

    /// Opens the checkpoint in `dir`: reads the manifest and checks its own checksum
    /// and structure. The files are checked by [`Checkpoint::verify`] (all of them)
    /// or by [`Checkpoint::read_rank`] and [`Checkpoint::read_file`] (the one read).
    pub fn open(dir: impl Into<PathBuf>) -> Result<Checkpoint> {
        let dir = dir.into();
        if dir.as_os_str().is_empty() {
            // `"".join(MANIFEST)` is a manifest in the current directory.
            return Err(io("open the checkpoint directory", &dir)(
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "an empty path names no directory",
                ),
            ));
        }
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
        // A directory named for a step holds that step's checkpoint.
        let named = dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("step-"))
            .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|d| d.parse::<u64>().ok());
        if named.is_some_and(|n| n != manifest.step) {
            return Err(Error::Manifest {
                path,
                reason: format!(
                    "it is the checkpoint of step {} but its directory is {} \
                     (moved, or the manifest edited)",
                    manifest.step,
                    dir.file_name().unwrap_or_default().to_string_lossy()
                ),
            });
        }
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
                hpc_io::message::path(&self.dir),
                self.manifest.ranks
            ))
        })?;
        let mut payload = Vec::new();
        self.check_file(f, Some(&mut payload))?;
        Ok(payload)
    }

    /// Reads, checks and returns the payload of the named file `name` (as given to
    /// [`Checkpoints::write_file`](crate::Checkpoints::write_file)); `None` if the checkpoint has no such file.
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
        // A damaged header's length near u64::MAX overflowed the sum.
        if (HEADER_LEN as u64).checked_add(header.payload_len) != Some(f.size) {
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
            let n = read_some(&mut file, &mut buf).map_err(io("read", &path))?;
            if n == 0 {
                break;
            }
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
