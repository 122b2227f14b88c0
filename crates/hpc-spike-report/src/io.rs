//! Atomic file writes: a temporary name in the same directory, then a rename.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Writes `bytes` to `path` so that `path` is either its old content or the whole
/// new content, never a part: the data go to `.<name>.tmp-<pid>` in the same
/// directory, are synced, and the file is renamed to `path`. On an error the
/// temporary file is removed and the error names the file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    // Errors name the file the caller asked for, also when the temporary file failed.
    let err = |_: &Path| {
        let p = path.to_path_buf();
        move |source| Error::Write { path: p, source }
    };
    let name = path.file_name().ok_or_else(|| Error::Write {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"),
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp: PathBuf = path.with_file_name(tmp_name);
    let result = (|| {
        let mut f = File::create(&tmp).map_err(err(&tmp))?;
        f.write_all(bytes).map_err(err(&tmp))?;
        f.sync_all().map_err(err(&tmp))?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(err(path))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_whole_files_and_names_the_path_on_error() {
        let dir = std::env::temp_dir().join(format!("spike-report-io-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.txt");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a.txt")]);
        let missing = dir.join("no-such-dir").join("b.txt");
        let e = write_atomic(&missing, b"x").unwrap_err().to_string();
        assert!(e.contains("no-such-dir"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
