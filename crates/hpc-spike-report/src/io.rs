//! Atomic file writes: a temporary name in the same directory, then a rename
//! (hpc-io's, which refuses a final name that is a directory, a device or a FIFO).

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Writes `bytes` to `path` so that `path` is either its old content or the whole
/// new content, never a part: the data go to `.<name>.tmp-<pid>` in the same
/// directory, are synced, and the file is renamed to `path`
/// ([`hpc_io::atomic::write`]). A `path` that exists as something other than a
/// regular file or a symbolic link (a directory, `/dev/null`, a FIFO) is refused,
/// not replaced. On an error the temporary file is removed and the error names the
/// file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let err = |source| Error::Write {
        path: path.to_path_buf(),
        source,
    };
    let name = path.file_name().ok_or_else(|| {
        err(hpc_io::atomic::StepError {
            op: "name",
            path: path.to_path_buf(),
            error: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"),
        })
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp: PathBuf = path.with_file_name(tmp_name);
    hpc_io::atomic::write(path, &tmp, bytes).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_whole_files_and_names_the_path_on_error() {
        let dir = hpc_test_support::TmpDir::new("spike-report", "io");
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
    }

    /// A final name that is a directory, a FIFO or a device is refused, not
    /// replaced (a rename once turned `/dev/null` into a plain file, and replaced
    /// an empty directory or a FIFO of the figure's name), and no temporary file
    /// is left beside it.
    #[test]
    fn a_final_name_that_is_not_a_regular_file_is_refused() {
        let dir = hpc_test_support::TmpDir::new("spike-report", "io-kinds");
        std::fs::create_dir_all(dir.join("raster.png")).unwrap();
        let fifo = dir.join("rates.svg");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        for (path, kind) in [
            (dir.join("raster.png"), "a directory"),
            (fifo.clone(), "a FIFO"),
        ] {
            let e = write_atomic(&path, b"x").unwrap_err();
            let text = format!("{e}: {}", std::error::Error::source(&e).unwrap());
            assert!(
                text.contains(&format!("it is {kind}, not a regular file")),
                "{text}"
            );
            assert!(text.contains(&path.display().to_string()), "{text}");
        }
        assert!(std::fs::symlink_metadata(dir.join("raster.png"))
            .unwrap()
            .is_dir());
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["raster.png", "rates.svg"]);
        // A device: refused before anything is written to it.
        let e = write_atomic(Path::new("/dev/null"), b"x").unwrap_err();
        let text = format!("{e}: {}", std::error::Error::source(&e).unwrap());
        assert!(text.contains("it is a character device"), "{text}");
        use std::os::unix::fs::FileTypeExt as _;
        assert!(std::fs::symlink_metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device());
    }
}
