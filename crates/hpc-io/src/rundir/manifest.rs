//! The manifest (`run.json`): what a run says about itself, and how it is read.

use std::fs::File;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::error::{io, Error, Result};
use super::{FORMAT, FORMAT_VERSION};

/// What a run says about itself in its manifest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The program (`brunel`).
    pub program: String,
    /// Its command line.
    #[serde(default)]
    pub args: Vec<String>,
    /// The program's own details (seed, ranks, parameters).
    #[serde(default)]
    pub details: serde_json::Value,
    /// Names of files the program writes into the directory. An earlier file of
    /// one of these names is removed when the run starts even if no manifest lists
    /// it. Not written to the manifest.
    #[serde(skip)]
    pub outputs: Vec<String>,
}

impl RunInfo {
    /// A run of `program` with this process' command line.
    pub fn new(program: &str) -> RunInfo {
        RunInfo {
            program: program.into(),
            // A non-UTF-8 argument (a legal file name) is recorded lossily.
            args: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            details: serde_json::Value::Null,
            outputs: Vec::new(),
        }
    }
}

/// How a run ended (or that it has not).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Status {
    /// Still running (or killed before it could say otherwise).
    Running,
    /// Ran to the end; every listed file is complete.
    Complete,
    /// Stopped early or failed; the listed files are what it left.
    Incomplete {
        /// Why (`--stop-at`, an error).
        reason: String,
        /// Where it stopped, in the program's words (`500.0 ms`), if known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stopped_at: Option<String>,
    },
}

/// A file as the manifest lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFile {
    /// Its name in the directory.
    pub name: String,
    /// Its size when the manifest was written (`None` while the run is writing it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// The manifest (`run.json`) of a run directory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`FORMAT_VERSION`] of the writer.
    pub version: u32,
    /// Unique id of the run (host, pid, start time).
    pub run_id: String,
    /// Pid of the run.
    pub pid: u32,
    /// Host name of the run.
    pub host: String,
    /// Start, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// End, milliseconds since the Unix epoch (once finished).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_unix_ms: Option<u64>,
    /// What the run says about itself.
    #[serde(flatten)]
    pub info: RunInfo,
    /// How it ended.
    #[serde(flatten)]
    pub status: Status,
    /// Every file the run wrote.
    pub files: Vec<RunFile>,
}

impl Manifest {
    /// The entry of `name`, if the run wrote it.
    pub fn file(&self, name: &str) -> Option<&RunFile> {
        self.files.iter().find(|f| f.name == name)
    }
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub(super) fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// Opens `path` without following a symbolic link and without blocking (a FIFO
/// opens at once), and checks that it is a regular file. `create` also creates it
/// (read-write). `Ok(None)` when it does not exist (and `create` is false).
/// For a lock file of the caller's own (`cargo xtask image`'s cache lock opened
/// a FIFO there for writing and waited for a reader for ever, and created the
/// file a link there named).
pub fn open_own(path: &Path, create: bool) -> Result<Option<(File, u64)>> {
    use rustix::fs::{FileType, Mode, OFlags};
    let mut flags = OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    flags |= if create {
        OFlags::RDWR | OFlags::CREATE
    } else {
        OFlags::RDONLY
    };
    let fd = match rustix::fs::open(path, flags, Mode::from_raw_mode(0o644)) {
        Ok(fd) => fd,
        Err(e) if e == rustix::io::Errno::NOENT && !create => return Ok(None),
        Err(e) if e == rustix::io::Errno::LOOP => {
            return Err(Error::WrongType {
                path: path.to_path_buf(),
                kind: "a symbolic link",
                wanted: "a regular file",
            })
        }
        Err(e) => return Err(io("open", path)(e.into())),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| io("open", path)(e.into()))?;
    let ty = FileType::from_raw_mode(st.st_mode);
    if ty != FileType::RegularFile {
        return Err(Error::WrongType {
            path: path.to_path_buf(),
            kind: crate::read::kind_of(ty),
            wanted: "a regular file",
        });
    }
    Ok(Some((
        File::from(fd),
        u64::try_from(st.st_size).unwrap_or(0),
    )))
}

pub(super) fn read_manifest(path: &Path) -> Result<Option<Manifest>> {
    let Some((file, size)) = open_own(path, false)? else {
        return Ok(None);
    };
    let bytes =
        crate::read::read_open(path, file, size, crate::read::MAX_METADATA_BYTES).map_err(|e| {
            Error::Manifest {
                path: path.to_path_buf(),
                reason: e.to_string(),
            }
        })?;
    let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| Error::Manifest {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    if m.format != FORMAT || m.version != FORMAT_VERSION {
        return Err(Error::Manifest {
            path: path.to_path_buf(),
            reason: format!(
                "format {:?} version {}, this reader knows {FORMAT:?} version {FORMAT_VERSION}",
                m.format, m.version
            ),
        });
    }
    Ok(Some(m))
}
