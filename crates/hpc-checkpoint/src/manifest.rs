//! The manifest: what a checkpoint holds, written last and checksummed.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::file::{check_name, named_file_name, rank_file_name};
use crate::{CRC_FIELD, CRC_PLACEHOLDER, FORMAT, FORMAT_VERSION};

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

pub(crate) mod hex32 {
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
    pub(crate) manifest_crc32c: String,
}

impl Manifest {
    /// The entry of `rank`'s file.
    pub fn rank_file(&self, rank: u32) -> Option<&FileEntry> {
        self.files.iter().find(|f| f.rank == Some(rank))
    }

    /// The entry of the named file `name` (as given to [`Checkpoints::write_file`](crate::Checkpoints::write_file)).
    pub fn named_file(&self, name: &str) -> Option<&FileEntry> {
        let file = named_file_name(name);
        self.files
            .iter()
            .find(|f| f.rank.is_none() && f.name == file)
    }
}

pub(crate) fn manifest_text(m: &Manifest) -> String {
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

pub(crate) fn parse_manifest(path: &Path, bytes: &[u8]) -> Result<Manifest> {
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
    check_files(&m.files, m.ranks).map_err(bad)?;
    Ok(m)
}

/// Checks that `files` list every rank `0..ranks` once, each under its rank
/// file's name, and named files under names [`Checkpoints::write_file`]
/// gives (a plain name of at most 128 characters and `.ckpt`): what a
/// manifest must hold, and what [`Checkpoints::commit`] is given. Sorted once,
/// not counted over the list for each rank: that took 20 s for a manifest of
/// 40,000 ranks (the square of the ranks). A name in the reason is cut.
///
/// [`Checkpoints::write_file`]: crate::Checkpoints::write_file
/// [`Checkpoints::commit`]: crate::Checkpoints::commit
pub(crate) fn check_files(files: &[FileEntry], ranks: u32) -> std::result::Result<(), String> {
    let shown = |f: &FileEntry| hpc_env::shown(&f.name);
    if let Some(f) = files.iter().find(|f| f.rank.is_some_and(|r| r >= ranks)) {
        return Err(format!(
            "it lists {} for rank {} of {ranks}: beyond the rank count",
            shown(f),
            f.rank.unwrap_or_default()
        ));
    }
    let mut listed: Vec<u32> = files.iter().filter_map(|f| f.rank).collect();
    listed.sort_unstable();
    // Sorted, the list is 0, 1, 2, ...: at index `i`, a rank below `i` is
    // listed twice, one above it says that rank `i` is missing.
    let wrong = listed
        .iter()
        .enumerate()
        .find(|&(i, &r)| r as usize != i)
        .map(|(i, &r)| r.min(i as u32))
        .or_else(|| (listed.len() < ranks as usize).then_some(listed.len() as u32));
    if let Some(r) = wrong {
        let n = listed.iter().filter(|&&l| l == r).count();
        return Err(format!("it lists {n} files for rank {r} (expected 1)"));
    }
    for f in files {
        let plain = match f.rank {
            Some(r) => f.name == rank_file_name(r),
            None => f
                .name
                .strip_suffix(".ckpt")
                .is_some_and(|n| check_name(n).is_ok() && named_file_name(n) == f.name),
        };
        if !plain {
            return Err(format!("it lists a file named {}", shown(f)));
        }
    }
    Ok(())
}
