//! Bounded reads of user-named files.
//!
//! A path given by a user (a configuration file, a key file, a reference file, an env
//! file) may name something that is not a file at all: a FIFO, whose `open` blocks
//! until a writer comes (for ever, without a message), or `/dev/zero`, which never
//! ends and fills memory. The functions here open the path with `O_NONBLOCK |
//! O_CLOEXEC | O_NOCTTY` (opening a FIFO returns at once), look at what was opened
//! with `fstat` (not at the path, which could be swapped in between), refuse anything
//! but a regular file, naming what it is, refuse a file larger than the bound before
//! anything is allocated for it, and read at most one byte more than the bound, so a
//! file that grows while it is read is still bounded.
//!
//! Symbolic links are followed: a link to a regular file is read like the file.
//!
//! ```
//! use hpc_io::read::{read_regular_to_string, ReadError, MAX_CONFIG_BYTES};
//! let dir = std::env::temp_dir().join(format!("hpc-io-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("params.toml");
//! std::fs::write(&path, "n = 3\n").unwrap();
//! assert_eq!(read_regular_to_string(&path, MAX_CONFIG_BYTES).unwrap(), "n = 3\n");
//! // A directory is refused, and the message says what it is.
//! let err = read_regular_to_string(&dir, MAX_CONFIG_BYTES).unwrap_err();
//! assert!(matches!(err, ReadError::NotRegular { kind: "a directory", .. }));
//! std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};

/// The bound for a configuration or parameter file (TOML, JSON): 4 MiB.
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;
/// The bound for a key or secret file: 4 KiB.
pub const MAX_KEY_BYTES: u64 = 4 << 10;
/// The bound for an env file (`KEY=VALUE` lines): 1 MiB.
pub const MAX_ENV_FILE_BYTES: u64 = 1 << 20;
/// The bound for a reference file a result is compared with (spike trains, rates,
/// checksums): 256 MiB.
pub const MAX_REFERENCE_BYTES: u64 = 256 << 20;
/// The bound for a data file read whole (a spike file, an image layer): 64 GiB. Such a
/// file is as large as the run that wrote it; the bound keeps a mistaken path (a
/// disk image) from being read into memory.
pub const MAX_DATA_BYTES: u64 = 64 << 30;
/// The bound for a small metadata file (an image's manifest, index or config, a
/// checkpoint's manifest): 16 MiB.
pub const MAX_METADATA_BYTES: u64 = 16 << 20;
/// The bound for a file of the kernel's under `/proc` or `/sys`: 1 MiB. Their `stat`
/// size is 0; [`read_regular`] reads them to their end, at most the bound.
pub const MAX_PROC_BYTES: u64 = 1 << 20;

/// Why a user-named file was not read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The path could not be opened (missing, no permission, a dangling link).
    #[error("cannot open {}: {source}", crate::message::path(path))]
    Open {
        /// The path as given.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The path names something other than a regular file.
    #[error("{} is {kind}, not a regular file", crate::message::path(path))]
    NotRegular {
        /// The path as given.
        path: PathBuf,
        /// What it is: "a FIFO", "a character device", "a block device", "a
        /// directory", "a socket".
        kind: &'static str,
    },
    /// The file is larger than the bound for its kind (refused before reading).
    #[error(
        "{} is {size} bytes, more than the {max} bytes accepted for it",
        crate::message::path(path)
    )]
    TooLarge {
        /// The path as given.
        path: PathBuf,
        /// Its size (as `fstat` said, or the bytes read when it grew).
        size: u64,
        /// The bound.
        max: u64,
    },
    /// Reading failed part way.
    #[error("cannot read {}: {source}", crate::message::path(path))]
    Read {
        /// The path as given.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file was asked for as text but is not UTF-8.
    #[error(
        "{} is not UTF-8 text (invalid byte at offset {offset})",
        crate::message::path(path)
    )]
    NotUtf8 {
        /// The path as given.
        path: PathBuf,
        /// The offset of the first invalid byte.
        offset: usize,
    },
}

impl ReadError {
    /// The path the error is about.
    pub fn path(&self) -> &Path {
        match self {
            ReadError::Open { path, .. }
            | ReadError::NotRegular { path, .. }
            | ReadError::TooLarge { path, .. }
            | ReadError::Read { path, .. }
            | ReadError::NotUtf8 { path, .. } => path,
        }
    }
}

/// What the file `m` describes is, in words, for messages: "a regular file",
/// "a directory", "a FIFO", "a character device", …
///
/// ```
/// let m = std::fs::metadata("/dev/null").unwrap();
/// assert_eq!(hpc_io::read::kind_of_meta(&m), "a character device");
/// ```
pub fn kind_of_meta(m: &std::fs::Metadata) -> &'static str {
    kind_of(FileType::from_raw_mode(
        std::os::unix::fs::MetadataExt::mode(m),
    ))
}

/// What a file type is, in words, for messages.
pub(crate) fn kind_of(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "of an unknown type",
    }
}

/// Opens `path` without blocking, whatever it names, and returns the open file with
/// its type and size as `fstat` saw them.
fn open_nonblocking(path: &Path) -> Result<(File, FileType, u64), ReadError> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| {
        // A socket cannot be opened at all (ENXIO, "No such device or address",
        // which said nothing of what the path is): said as what it is.
        if e == rustix::io::Errno::NXIO {
            if let Ok(st) = rustix::fs::stat(path) {
                let ty = FileType::from_raw_mode(st.st_mode);
                if ty != FileType::RegularFile {
                    return ReadError::NotRegular {
                        path: path.to_path_buf(),
                        kind: kind_of(ty),
                    };
                }
            }
        }
        ReadError::Open {
            path: path.to_path_buf(),
            source: e.into(),
        }
    })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| ReadError::Open {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    let size = u64::try_from(st.st_size).unwrap_or(0);
    Ok((File::from(fd), FileType::from_raw_mode(st.st_mode), size))
}

/// Opens a user-named regular file for reading, without blocking on a FIFO, and
/// returns it with its size. For a file that is streamed (an archive) rather than read
/// whole; [`read_regular`] reads a file whole, with a bound.
///
/// # Errors
///
/// [`ReadError::Open`] when it cannot be opened, [`ReadError::NotRegular`] when it is
/// not a regular file.
pub fn open_regular(path: impl AsRef<Path>) -> Result<(File, u64), ReadError> {
    let path = path.as_ref();
    let (file, ty, size) = open_nonblocking(path)?;
    if ty != FileType::RegularFile {
        return Err(ReadError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(ty),
        });
    }
    tracing::trace!(path = %crate::message::path(path), size, "opened a regular file");
    Ok((file, size))
}

/// Reads what is left of a file [`open_regular`] opened (after the caller looked at
/// it: its mode, its owner), at most `max_bytes`; more is [`ReadError::TooLarge`].
/// `path` is for messages; `size_hint` is the size [`open_regular`] returned: above
/// `max_bytes` it is refused before anything is allocated or read.
///
/// # Errors
///
/// [`ReadError::TooLarge`] and [`ReadError::Read`].
pub fn read_open(
    path: &Path,
    file: File,
    size_hint: u64,
    max_bytes: u64,
) -> Result<Vec<u8>, ReadError> {
    if size_hint > max_bytes {
        return Err(ReadError::TooLarge {
            path: path.to_path_buf(),
            size: size_hint,
            max: max_bytes,
        });
    }
    let cap = usize::try_from(size_hint).unwrap_or(0);
    let mut bytes = Vec::with_capacity(cap);
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| ReadError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > max_bytes {
        return Err(ReadError::TooLarge {
            path: path.to_path_buf(),
            size: bytes.len() as u64,
            max: max_bytes,
        });
    }
    Ok(bytes)
}

/// Reads a user-named regular file whole, refusing anything else and anything larger
/// than `max_bytes`.
///
/// # Errors
///
/// [`ReadError::Open`] when it cannot be opened (missing, no permission),
/// [`ReadError::NotRegular`] for a FIFO, a device, a directory or a socket (returned
/// at once, without waiting for a writer), [`ReadError::TooLarge`] for a file larger
/// than `max_bytes` (before anything is allocated, or when it grows past the bound
/// while it is read), [`ReadError::Read`] when reading fails.
pub fn read_regular(path: impl AsRef<Path>, max_bytes: u64) -> Result<Vec<u8>, ReadError> {
    let path = path.as_ref();
    let (file, size) = open_regular(path)?;
    read_open(path, file, size, max_bytes)
}

/// [`read_regular`], as UTF-8 text.
///
/// # Errors
///
/// Those of [`read_regular`], and [`ReadError::NotUtf8`] when the bytes are not UTF-8.
pub fn read_regular_to_string(path: impl AsRef<Path>, max_bytes: u64) -> Result<String, ReadError> {
    let path = path.as_ref();
    to_string(path, read_regular(path, max_bytes)?)
}

fn to_string(path: &Path, bytes: Vec<u8>) -> Result<String, ReadError> {
    String::from_utf8(bytes).map_err(|e| ReadError::NotUtf8 {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to(),
    })
}

/// The memory the kernel says is available for new allocations without swapping
/// (`MemAvailable` of `/proc/meminfo`), in bytes; `None` when it cannot be read. For
/// checking the size a run needs before allocating it.
pub fn mem_available() -> Option<u64> {
    let text = read_regular_to_string("/proc/meminfo", MAX_PROC_BYTES).ok()?;
    parse_mem_available(&text)
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .and_then(|kb| kb.checked_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    use crate::test_util::mkfifo;

    /// `message::chain` prints a cause the message already holds once (the
    /// test lives here: `message` uses no other module of this crate).
    #[test]
    fn a_cause_already_in_the_message_is_printed_once() {
        let e = ReadError::Open {
            path: "c\u{fffd}".into(),
            source: std::io::Error::from_raw_os_error(2),
        };
        let os = std::io::Error::from_raw_os_error(2).to_string();
        let e = anyhow::Error::new(e).context("in the parameters");
        let line = crate::message::chain(e.as_ref());
        assert_eq!(
            line,
            format!("in the parameters: cannot open c\u{fffd}: {os}")
        );
        assert_eq!(line.matches(&os).count(), 1, "{line}");
    }

    fn tempdir(name: &str) -> crate::test_util::TmpDir {
        crate::test_util::scratch("read", name)
    }

    #[test]
    fn a_fifo_is_refused_at_once() {
        let d = tempdir("fifo");
        let p = d.join("params.toml");
        mkfifo(&p);
        let t = Instant::now();
        let err = read_regular(&p, MAX_CONFIG_BYTES).unwrap_err();
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "took {:?}",
            t.elapsed()
        );
        assert!(
            matches!(err, ReadError::NotRegular { kind: "a FIFO", .. }),
            "{err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains(&p.display().to_string()) && msg.contains("FIFO"),
            "{msg}"
        );
    }

    /// A socket, which no `open` opens, was "cannot open …: No such device or
    /// address" instead of what it is.
    #[test]
    fn a_socket_is_refused_as_a_socket() {
        let d = tempdir("socket");
        let p = d.join("app.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&p).unwrap();
        let err = read_regular(&p, MAX_CONFIG_BYTES).unwrap_err();
        assert!(
            matches!(
                err,
                ReadError::NotRegular {
                    kind: "a socket",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn dev_zero_is_refused_as_a_character_device() {
        let err = read_regular("/dev/zero", MAX_CONFIG_BYTES).unwrap_err();
        assert!(
            matches!(
                err,
                ReadError::NotRegular {
                    kind: "a character device",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("/dev/zero"), "{err}");
    }

    #[test]
    fn a_directory_is_refused() {
        let d = tempdir("dir");
        let err = read_regular_to_string(&d, MAX_CONFIG_BYTES).unwrap_err();
        assert!(
            matches!(
                err,
                ReadError::NotRegular {
                    kind: "a directory",
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(err.path(), &*d);
    }

    #[test]
    fn a_file_over_the_bound_is_refused_naming_size_and_bound() {
        let d = tempdir("large");
        let p = d.join("key");
        std::fs::write(&p, vec![b'k'; 5000]).unwrap();
        let err = read_regular(&p, MAX_KEY_BYTES).unwrap_err();
        match &err {
            ReadError::TooLarge { size, max, .. } => {
                assert_eq!((*size, *max), (5000, MAX_KEY_BYTES));
            }
            other => panic!("{other}"),
        }
        let msg = err.to_string();
        assert!(
            msg.contains("5000") && msg.contains("4096") && msg.contains("key"),
            "{msg}"
        );
        // Exactly at the bound is accepted.
        std::fs::write(&p, vec![b'k'; 4096]).unwrap();
        assert_eq!(read_regular(&p, MAX_KEY_BYTES).unwrap().len(), 4096);
    }

    /// A file that grows after its size was taken is still read only to the bound.
    #[test]
    fn a_file_that_grows_while_read_is_still_bounded() {
        let d = tempdir("grow");
        let p = d.join("growing");
        std::fs::write(&p, b"small").unwrap();
        let (f, size) = open_regular(&p).unwrap();
        assert_eq!(size, 5);
        std::fs::write(&p, vec![b'x'; 5000]).unwrap();
        let err = read_open(&p, f, size, MAX_KEY_BYTES).unwrap_err();
        assert!(
            matches!(
                err,
                ReadError::TooLarge {
                    size: 4097,
                    max: 4096,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_symlink_to_a_regular_file_is_read() {
        let d = tempdir("link");
        let p = d.join("real.toml");
        std::fs::write(&p, "a = 1\n").unwrap();
        let l = d.join("link.toml");
        std::os::unix::fs::symlink(&p, &l).unwrap();
        assert_eq!(
            read_regular_to_string(&l, MAX_CONFIG_BYTES).unwrap(),
            "a = 1\n"
        );
        // A link to a FIFO is refused like the FIFO.
        let f = d.join("fifo");
        mkfifo(&f);
        let lf = d.join("link-fifo");
        std::os::unix::fs::symlink(&f, &lf).unwrap();
        assert!(matches!(
            read_regular(&lf, MAX_CONFIG_BYTES),
            Err(ReadError::NotRegular { kind: "a FIFO", .. })
        ));
    }

    #[test]
    fn a_missing_file_is_an_open_error_naming_it() {
        let err = read_regular("/nonexistent/hpc-io/params.toml", MAX_CONFIG_BYTES).unwrap_err();
        assert!(
            matches!(&err, ReadError::Open { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
        );
        assert!(
            err.to_string().contains("/nonexistent/hpc-io/params.toml"),
            "{err}"
        );
    }

    #[test]
    fn non_utf8_text_is_refused_with_its_offset() {
        let d = tempdir("utf8");
        let p = d.join("c.toml");
        std::fs::write(&p, b"ab\xffcd").unwrap();
        let err = read_regular_to_string(&p, MAX_CONFIG_BYTES).unwrap_err();
        assert!(matches!(err, ReadError::NotUtf8 { offset: 2, .. }), "{err}");
        assert_eq!(read_regular(&p, MAX_CONFIG_BYTES).unwrap(), b"ab\xffcd");
    }

    #[test]
    fn mem_available_is_read_from_meminfo() {
        assert_eq!(
            parse_mem_available("MemTotal: 100 kB\nMemAvailable:    2048 kB\n"),
            Some(2048 * 1024)
        );
        assert_eq!(parse_mem_available("MemTotal: 100 kB\n"), None);
        assert!(mem_available().is_some_and(|b| b > 0));
    }

    #[test]
    fn proc_files_are_read_despite_their_zero_size() {
        // Their stat size is 0: they are read to their end, still bounded.
        let s = read_regular_to_string("/proc/self/status", MAX_PROC_BYTES).unwrap();
        assert!(s.contains("Pid:"), "{s}");
        let err = read_regular_to_string("/proc/self/status", 8).unwrap_err();
        assert!(
            matches!(
                err,
                ReadError::TooLarge {
                    size: 9,
                    max: 8,
                    ..
                }
            ),
            "{err}"
        );
    }
}
