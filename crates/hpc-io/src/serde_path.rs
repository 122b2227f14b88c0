//! Serde for paths that may not be UTF-8 (a name Linux allows): a UTF-8 path
//! is written as a string, any other as its bytes, and both are read back
//! exactly (`#[serde(with = "hpc_io::serde_path")]`, or
//! [`opt`] for an `Option<PathBuf>`). Serde's own `PathBuf` fails on such a
//! path ("path contains invalid UTF-8 characters"), and `serde_json::json!`
//! around it panics.
//!
//! ```
//! use std::os::unix::ffi::OsStrExt as _;
//! #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
//! struct File(#[serde(with = "hpc_io::serde_path")] std::path::PathBuf);
//! let odd = File(std::ffi::OsStr::from_bytes(b"n\xff.xml").into());
//! let text = serde_json::to_string(&odd).unwrap();
//! assert_eq!(serde_json::from_str::<File>(&text).unwrap(), odd);
//! assert_eq!(serde_json::to_string(&File("a.xml".into())).unwrap(), r#""a.xml""#);
//! ```

use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Repr {
    Text(String),
    Bytes(Vec<u8>),
}

impl Repr {
    fn of(p: &Path) -> Repr {
        match p.to_str() {
            Some(t) => Repr::Text(t.into()),
            None => Repr::Bytes(p.as_os_str().as_bytes().to_vec()),
        }
    }

    fn path(self) -> PathBuf {
        match self {
            Repr::Text(t) => PathBuf::from(t),
            Repr::Bytes(b) => PathBuf::from(std::ffi::OsString::from_vec(b)),
        }
    }
}

/// Writes the path as a string, or as bytes when it is not UTF-8.
pub fn serialize<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    Repr::of(p).serialize(s)
}

/// Reads what [`serialize`] wrote.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
    Ok(Repr::deserialize(d)?.path())
}

/// The same for an `Option<PathBuf>` (`#[serde(with = "hpc_io::serde_path::opt")]`).
pub mod opt {
    use std::path::PathBuf;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Repr;

    /// Writes the path as a string, or as bytes when it is not UTF-8.
    pub fn serialize<S: Serializer>(p: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
        p.as_deref().map(Repr::of).serialize(s)
    }

    /// Reads what [`serialize`] wrote.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
        Ok(Option::<Repr>::deserialize(d)?.map(Repr::path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct R(#[serde(with = "opt")] Option<PathBuf>);

    #[test]
    fn a_non_utf8_path_goes_through_json_exactly() {
        for p in [
            None,
            Some(PathBuf::from("out/spikes.spk")),
            Some(PathBuf::from(std::ffi::OsStr::from_bytes(
                b"o\xff/spikes.spk",
            ))),
        ] {
            let r = R(p);
            let text = serde_json::to_string(&r).unwrap();
            assert_eq!(serde_json::from_str::<R>(&text).unwrap(), r, "{text}");
        }
    }
}
