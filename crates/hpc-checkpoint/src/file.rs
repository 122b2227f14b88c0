//! One file of a checkpoint: its name, its header, and its atomic write.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{io, Error, Result};
use crate::{FORMAT_VERSION, HEADER_LEN, MAGIC};

/// The file name of rank `rank`'s file.
pub fn rank_file_name(rank: u32) -> String {
    format!("rank-{rank:06}.ckpt")
}

pub(crate) fn named_file_name(name: &str) -> String {
    format!("{name}.ckpt")
}

pub(crate) fn check_name(name: &str) -> Result<()> {
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
            "checkpoint file name {}: use letters, digits, '.', '_' and '-', \
             not starting with '.' or 'rank-', at most 128",
            hpc_env::shown(name)
        )))
    }
}

/// The header before each file's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) kind: u32,
    pub(crate) step: u64,
    pub(crate) rank: u32,
    pub(crate) ranks: u32,
    pub(crate) payload_len: u64,
}

impl Header {
    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
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

    pub(crate) fn decode(b: &[u8]) -> std::result::Result<Header, String> {
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
pub(crate) fn write_atomic(
    path: &Path,
    header: Header,
    payload: &mut dyn Read,
) -> Result<(u64, u32)> {
    let tmp = tmp_name(path);
    hpc_io::atomic::replace_with(path, &tmp, |f| {
        let h = header.encode();
        f.write_all(&h).map_err(io("write", &tmp))?;
        let mut crc = crc32c::crc32c(&h);
        let mut size = HEADER_LEN as u64;
        let mut buf = vec![0u8; 1 << 20];
        // At most one byte more than announced is read: a payload that never
        // ends (a pipe, `/dev/zero`) was written to the disk until it was full
        // before its length was checked.
        let mut payload = payload.take(header.payload_len.saturating_add(1));
        loop {
            let n = read_some(&mut payload, &mut buf).map_err(io("read the payload for", &tmp))?;
            if n == 0 {
                break;
            }
            f.write_all(&buf[..n]).map_err(io("write", &tmp))?;
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            size += n as u64;
        }
        let got = size - HEADER_LEN as u64;
        if got > header.payload_len {
            return Err(Error::InvalidArgument(format!(
                "{}: the payload is longer than the {} bytes announced",
                hpc_io::message::path(&tmp),
                header.payload_len
            )));
        }
        if got != header.payload_len {
            return Err(Error::InvalidArgument(format!(
                "{}: the payload was {got} bytes, announced {}",
                hpc_io::message::path(&tmp),
                header.payload_len
            )));
        }
        Ok((size, crc))
    })
}

/// Whether `name` is a temporary name of [`tmp_name`]: `<name>.tmp<digits>`.
pub(crate) fn is_temporary(name: &str) -> bool {
    name.rfind(".tmp").is_some_and(|i| {
        let digits = &name[i + 4..];
        i > 0 && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
    })
}

pub(crate) fn tmp_name(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(format!(".tmp{}", std::process::id()));
    PathBuf::from(p)
}

/// Syncs a directory so that the renames in it survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
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

/// Reads until `buf` is full or the file ends; returns the bytes read.
pub(crate) fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match read_some(f, &mut buf[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

/// One read of `r` into `buf`, retried while a signal interrupts it: the bytes
/// read, 0 at the end.
pub(crate) fn read_some<R: Read + ?Sized>(r: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match r.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            done => return done,
        }
    }
}
