//! Output directories owned by one run at a time.
//!
//! A run that writes into a directory ([`RunDir::create`]):
//!
//! 1. creates the directory if it is missing and takes an exclusive, non-blocking
//!    `flock` on [`LOCK`] inside it. A second run on the same directory fails at once
//!    with [`Error::Busy`], which names the directory and the process (pid, host,
//!    run id) holding it. The lock belongs to the open file, so it goes away with
//!    the process however it ends (a crash or `kill -9` leaves no stale lock);
//!    It refuses ([`Error::Foreign`]) a directory holding files of the names the
//!    program declares as its outputs ([`RunInfo::outputs`]) that no earlier run's
//!    manifest lists as its own: they are someone's files, not a run's, and are
//!    never removed; and ([`Error::OtherProgram`]) a directory whose earlier run
//!    was another program's (`microcircuit --out brunel-out`), whose results a
//!    run of this one would otherwise remove;
//!    A `dir` that is, or goes through, a symbolic link is followed when this
//!    process's user, `root` or the owner of the folder holding the link made it
//!    (a user's own link to scratch space), and refused ([`Error::ForeignLink`])
//!    when another user did: a link planted where a run will write would send its
//!    files elsewhere unseen ([`check_dir_link`]); an empty `dir` is refused;
//! 2. removes the files that an earlier run's manifest lists (saying so, with the
//!    earlier run's id), so that nothing older can be taken for this run's.
//!    Subdirectories and unknown files are left alone;
//! 3. writes the manifest [`MANIFEST`] (`run.json`): run id, program, pid, host,
//!    start time, arguments, the program's details (such as the seed) and status
//!    `running`.
//!
//! [`RunDir::lock`] does the first step only, so that a run can check its input
//! (a checkpoint to resume from, its parameters) once it holds the directory and
//! before [`RunDir::start`] changes anything in it: a run refused for bad input
//! leaves the earlier run's files as they were.
//!
//! Every file the run writes is recorded in the manifest ([`RunDir::record`]);
//! [`RunDir::finish`] marks the run [`Status::Complete`] or [`Status::Incomplete`]
//! (a run stopped early, with the reason and where it stopped) and lists every
//! recorded file that exists with its size. Each manifest is written to a temporary
//! name, synced and renamed, and the directory synced, so a reader sees either the
//! old or the new manifest. A run dropped without `finish` (an error) marks itself
//! incomplete (a program that stops its run on a signal finishes it as
//! incomplete with the signal as the reason, as `hpc_spiking::stop` does); a run
//! that was killed leaves status `running` without a lock holder, which
//! [`inspect`] reports as [`Liveness::Abandoned`].
//!
//! The manifest and the lock file are opened without following a symbolic link and
//! without blocking, and must be regular files (a FIFO or a device there is refused,
//! or, for an earlier manifest, ignored with a warning); a manifest is read with the
//! bound [`crate::read::MAX_METADATA_BYTES`].
//!
//! Readers check a file with [`check_file`]: a file in a run directory is trusted
//! only when the manifest lists it and the run completed.
//!
//! `flock` works across nodes on NFSv4 and on Lustre mounted with `-o flock`; with
//! `-o localflock` (or NFSv3 without lockd) two runs on different nodes are not kept
//! apart. In a multi-rank run, the rank that writes the shared files (rank 0) owns
//! the directory; the other ranks only write under subdirectories it leaves alone.
//!
//! ```
//! use hpc_io::rundir::{RunDir, RunInfo, Status, Liveness};
//! let dir = std::env::temp_dir().join(format!("rundir-doc-{}", std::process::id()));
//! let mut info = RunInfo::new("demo");
//! info.outputs = vec!["result.txt".into()];
//! let mut run = RunDir::create(&dir, info.clone())?;
//! // A second run on the same directory is refused at once.
//! let busy = RunDir::create(&dir, info).unwrap_err();
//! assert!(busy.to_string().contains("in use by"), "{busy}");
//! run.write_atomic("result.txt", b"42\n")?;
//! run.finish(Status::Complete)?;
//! let m = hpc_io::rundir::inspect(&dir)?.unwrap();
//! assert_eq!(m.liveness, Liveness::Finished);
//! assert_eq!(m.manifest.files[0].name, "result.txt");
//! hpc_io::rundir::check_file(&dir.join("result.txt"))?;
//! # std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), hpc_io::rundir::Error>(())
//! ```

use std::fs::{self, File};
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::atomic::{self, StepError};
use crate::message::said;

mod claim;
mod link;
use claim::holder_in;
pub use claim::{lock_holder, try_lock_file, FileClaim};
pub use link::{check_dir_link, dangling_link};

/// The manifest of a run directory.
pub const MANIFEST: &str = "run.json";
/// The lock file of a run directory (it holds the pid, host and run id of its holder).
pub const LOCK: &str = "run.lock";
/// The `format` field of every manifest.
pub const FORMAT: &str = "hpc-io run";
/// The manifest format version this crate writes.
pub const FORMAT_VERSION: u32 = 1;

/// Everything that can go wrong; each variant names the directory or file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another run holds the directory.
    #[error(
        "output directory {} is in use by {holder}; wait for it to finish or choose another \
         directory",
        crate::message::path(dir)
    )]
    Busy {
        /// The directory.
        dir: PathBuf,
        /// Who holds it, as far as its lock file says (`another run` if unknown).
        holder: String,
    },
    /// The output file is a lock file that a running process holds (a run
    /// directory's [`LOCK`], a checkpoint directory's lock): replacing it would
    /// let a second run into what that process owns ([`FileClaim`]).
    #[error(
        "{} is a lock file that a running process holds (a run's {LOCK} or a \
         checkpoint directory's lock): replacing it would let a second run into what that \
         run owns; choose another file",
        crate::message::path(path)
    )]
    LockFile {
        /// The output file.
        path: PathBuf,
    },
    /// Another run is writing the output file ([`FileClaim`]).
    #[error(
        "{} is being written by {holder}; wait for it to finish or choose another file",
        crate::message::path(path)
    )]
    FileBusy {
        /// The output file.
        path: PathBuf,
        /// Who holds it, as its lock file says (`another run` if unknown).
        holder: String,
    },
    /// A file operation failed.
    #[error("cannot {op} {}: {error}", crate::message::path(path))]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error (in the message, so not also a `source`).
        error: std::io::Error,
    },
    /// A manifest that cannot be read as one.
    /// A reason quoting the manifest is cut in the message ([`crate::message::cut`]).
    #[error(
        "{} is not a valid run manifest: {}",
        crate::message::path(path),
        crate::message::cut(reason)
    )]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A name that is not a plain file name inside the directory.
    /// The name is quoted cut ([`crate::message::cut`]): a caller's name of
    /// 100,000 characters was echoed whole.
    #[error(
        "{} is not a plain file name (no '/', not '.' or '..', not the manifest or lock)",
        crate::message::cut(&format!("{:?}", .0))
    )]
    Name(String),
    /// The directory holds files of the program's output names that no earlier
    /// run's manifest lists: they are not removed, and the run is refused.
    #[error(
        "{} holds {} that no earlier run of this program wrote (no run.json lists {}); remove {} or choose another output directory",
        crate::message::path(dir),
        files.join(", "),
        if files.len() == 1 { "it" } else { "them" },
        if files.len() == 1 { "it" } else { "them" }
    )]
    Foreign {
        /// The directory.
        dir: PathBuf,
        /// The files' names.
        files: Vec<String>,
    },
    /// The directory holds the files of an earlier run of another program: they
    /// are not removed, and the run is refused.
    #[error(
        "{} holds the results of a run of {} ({}); choose another output directory, or remove them",
        crate::message::path(dir),
        crate::message::cut(program),
        crate::message::cut(run_id)
    )]
    OtherProgram {
        /// The directory.
        dir: PathBuf,
        /// The earlier run's program.
        program: String,
        /// The earlier run's id.
        run_id: String,
    },
    /// A path that must be a regular file (the manifest, the lock) or a directory
    /// (the run directory) is something else.
    #[error(
        "{} is {kind}, not {wanted}; {}",
        crate::message::path(path),
        wrong_type_advice(kind)
    )]
    WrongType {
        /// The path.
        path: PathBuf,
        /// What it is ("a FIFO", "a symbolic link", "a regular file").
        kind: &'static str,
        /// What it must be.
        wanted: &'static str,
    },
    /// The directory is, or goes through, a symbolic link that another user made
    /// (neither this process's user, `root`, nor the owner of the folder holding
    /// the link), such as a link planted in a shared folder before the run: the
    /// run's files would go wherever it points.
    #[error(
        "{} is a symbolic link to {} made by user {owner}, not by this user nor by \
         the owner of its folder; give the directory it should be, or remove the link",
        crate::message::path(path),
        crate::message::path(target)
    )]
    ForeignLink {
        /// The link.
        path: PathBuf,
        /// Where it points.
        target: PathBuf,
        /// The user id that owns the link.
        owner: u32,
    },
    /// A file a reader should not trust (not listed, or the run did not complete).
    #[error("{}: {}", crate::message::path(path), crate::message::cut(reason))]
    Untrusted {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// What to do about a path of the wrong kind: a device (`--out /dev/null`) is not
/// something to remove, so only the other choice is given for it.
fn wrong_type_advice(kind: &str) -> &'static str {
    if kind.ends_with("device") {
        "choose another output directory (a device cannot be one)"
    } else {
        "remove it or choose another output directory"
    }
}

/// Result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<StepError> for Error {
    fn from(e: StepError) -> Error {
        Error::Io {
            op: e.op,
            path: e.path,
            error: e.error,
        }
    }
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |error| StepError::of(op, path)(error).into()
}

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

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\0')
        && name != MANIFEST
        && name != LOCK;
    if ok {
        Ok(())
    } else {
        Err(Error::Name(name.into()))
    }
}

fn tmp_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!(".{name}.tmp-{}", std::process::id()))
}

/// Writes `bytes` to `dir/name` through a temporary name ([`tmp_path`]) with
/// [`atomic::write`].
fn write_replace(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    Ok(atomic::write(&dir.join(name), &tmp_path(dir, name), bytes)?)
}

/// Opens `path` without following a symbolic link and without blocking (a FIFO
/// opens at once), and checks that it is a regular file. `create` also creates it
/// (read-write). `Ok(None)` when it does not exist (and `create` is false).
fn open_own(path: &Path, create: bool) -> Result<Option<(File, u64)>> {
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

fn read_manifest(path: &Path) -> Result<Option<Manifest>> {
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

/// Tries to take the lock of `dir`; `Ok(None)` when another process holds it.
fn try_lock(dir: &Path) -> Result<Option<File>> {
    try_lock_file(&dir.join(LOCK))
}

/// Who holds the run directory `dir`, as its lock file says.
fn holder_of(dir: &Path) -> String {
    holder_in(&dir.join(LOCK))
}

/// An output directory this run owns (see the [module](self) documentation).
#[derive(Debug)]
pub struct RunDir {
    dir: PathBuf,
    manifest: Manifest,
    lock: Option<File>,
    earlier: Option<Manifest>,
    started: bool,
    finished: bool,
}

impl RunDir {
    /// Creates `dir` if missing, takes its lock (failing at once with
    /// [`Error::Busy`] when another run holds it), removes the files of an earlier
    /// run and writes the manifest with status `running`: [`RunDir::lock`], then
    /// [`RunDir::start`].
    pub fn create(dir: impl Into<PathBuf>, info: RunInfo) -> Result<RunDir> {
        let mut run = RunDir::lock(dir, info)?;
        run.start()?;
        Ok(run)
    }

    /// Creates `dir` if missing and takes its lock (failing at once with
    /// [`Error::Busy`] when another run holds it), changing nothing else: a run
    /// that finds a problem in its input after this and before [`RunDir::start`]
    /// leaves the earlier run's files and manifest as they were.
    pub fn lock(dir: impl Into<PathBuf>, info: RunInfo) -> Result<RunDir> {
        let dir = dir.into();
        check_dir_link(&dir)?;
        if let Err(e) = fs::create_dir_all(&dir) {
            return Err(match fs::metadata(&dir) {
                Ok(m) if !m.is_dir() => Error::WrongType {
                    // What it is in words ("/dev/null is a character device, not a
                    // directory"), not "is not a directory, not a directory".
                    kind: crate::read::kind_of_meta(&m),
                    path: dir,
                    wanted: "a directory",
                },
                _ => io("create", &dir)(e),
            });
        }
        let Some(mut lock) = try_lock(&dir)? else {
            return Err(Error::Busy {
                holder: holder_of(&dir),
                dir,
            });
        };
        let earlier = match read_manifest(&dir.join(MANIFEST)) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "ignoring an unreadable earlier manifest");
                None
            }
        };
        // Files of the output names that no earlier run lists are not a run's;
        // nor is a directory of such a name, whatever a manifest lists (no run
        // writes one there, and the run's write of that file would fail only
        // at its end, after all its work).
        let foreign: Vec<String> = info
            .outputs
            .iter()
            .filter(|name| check_name(name).is_ok())
            .filter(|name| match fs::symlink_metadata(dir.join(name)) {
                Ok(m) if m.is_dir() => true,
                Ok(_) => earlier.as_ref().is_none_or(|m| m.file(name).is_none()),
                Err(_) => false,
            })
            .cloned()
            .collect();
        if !foreign.is_empty() {
            return Err(Error::Foreign {
                dir,
                files: foreign,
            });
        }
        // Another program's run: its files are its results, not this program's to
        // replace (a manifest that lists no file leaves nothing to lose).
        if let Some(m) = earlier
            .as_ref()
            .filter(|m| m.info.program != info.program && !m.files.is_empty())
        {
            return Err(Error::OtherProgram {
                dir,
                program: m.info.program.clone(),
                run_id: m.run_id.clone(),
            });
        }
        let pid = std::process::id();
        let host = host_name();
        let started = now_ms();
        let run_id = format!("{host}-{pid}-{started}");
        let lock_path = dir.join(LOCK);
        (|| {
            lock.set_len(0)?;
            lock.rewind()?;
            write!(lock, "run {run_id} (pid {pid} on host {host})")?;
            lock.sync_all()
        })()
        .map_err(io("write", &lock_path))?;
        Ok(RunDir {
            manifest: Manifest {
                format: FORMAT.into(),
                version: FORMAT_VERSION,
                run_id,
                pid,
                host,
                started_unix_ms: started,
                finished_unix_ms: None,
                info,
                status: Status::Running,
                files: Vec::new(),
            },
            dir,
            lock: Some(lock),
            earlier,
            started: false,
            finished: false,
        })
    }

    /// Starts the run in the locked directory (once; later calls do nothing):
    /// removes what an earlier run left (the files its manifest lists, and the
    /// temporaries of those and of the program's output names), saying so with the
    /// earlier run's id, and writes the manifest with status `running`.
    pub fn start(&mut self) -> Result<()> {
        if self.started {
            return Ok(());
        }
        let dir = self.dir.clone();
        let mut stale: Vec<String> = Vec::new();
        if let Some(m) = &self.earlier {
            stale.extend(m.files.iter().map(|f| f.name.clone()));
        }
        stale.sort();
        stale.dedup();
        let mut removed = Vec::new();
        for name in stale.iter().filter(|n| check_name(n).is_ok()) {
            if fs::symlink_metadata(dir.join(name)).is_ok_and(|m| !m.is_dir()) {
                let path = dir.join(name);
                fs::remove_file(&path).map_err(io("remove the earlier run's", &path))?;
                removed.push(name.as_str());
            }
        }
        if let (Some(m), false) = (&self.earlier, removed.is_empty()) {
            let status = match &m.status {
                Status::Complete => "complete",
                Status::Incomplete { .. } => "incomplete",
                Status::Running => "not finished",
            };
            tracing::info!(
                dir = %crate::message::path(&dir),
                files = %removed.join(", "),
                "removed the files of the earlier run {} ({status})",
                m.run_id
            );
        }
        // Temporaries (`.NAME.tmp-PID`) are never anyone's finished file.
        let mut names: Vec<&String> = self.manifest.info.outputs.iter().chain(&stale).collect();
        names.sort();
        names.dedup();
        for name in names.into_iter().filter(|n| check_name(n).is_ok()) {
            let path = tmp_path(&dir, name);
            if fs::symlink_metadata(&path).is_ok_and(|m| !m.is_dir()) {
                fs::remove_file(&path).map_err(io("remove the temporary", &path))?;
            }
        }
        self.started = true;
        self.write_manifest()
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Whether `path` names one of this run's files ([`is_run_file`] of its
    /// outputs).
    pub fn owns_path(&self, path: &Path) -> bool {
        is_run_file(&self.dir, &self.manifest.info.outputs, path)
    }

    /// The manifest as last written.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The path of `name` in the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn write_manifest(&mut self) -> Result<()> {
        let mut text = serde_json::to_vec_pretty(&self.manifest).map_err(|e| Error::Manifest {
            path: self.dir.join(MANIFEST),
            reason: e.to_string(),
        })?;
        text.push(b'\n');
        // Not written where its own reader ([`read_manifest`]) would refuse it:
        // details nested deeper than the parser goes, or a manifest beyond the
        // bound of a metadata file, were written, and then every later run in
        // the directory and every reader refused it. Refused at `start`, before
        // the run's work.
        let refused = |reason: String| Error::Manifest {
            path: self.dir.join(MANIFEST),
            reason,
        };
        if text.len() as u64 > crate::read::MAX_METADATA_BYTES {
            return Err(refused(format!(
                "this run's manifest would be {} bytes, more than the {} bytes its readers take",
                text.len(),
                crate::read::MAX_METADATA_BYTES
            )));
        }
        serde_json::from_slice::<Manifest>(&text)
            .map_err(|e| refused(format!("its readers would refuse this run's manifest: {e}")))?;
        // The manifest's name in the directory this run holds the lock of is the
        // run's own: a FIFO, device node or socket left there (warned about as an
        // unreadable earlier manifest) is removed, not refused as `atomic`'s
        // renames refuse such a name elsewhere. Removing the entry touches no
        // device; a directory of that name stays an error.
        let path = self.dir.join(MANIFEST);
        if fs::symlink_metadata(&path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
            fs::remove_file(&path).map_err(StepError::of("remove", &path))?;
        }
        write_replace(&self.dir, MANIFEST, &text)
    }

    /// Records `name` as a file this run writes (before writing it, so that a run
    /// that dies mid-write still names it); rewrites the manifest when it is new.
    pub fn record(&mut self, name: &str) -> Result<PathBuf> {
        check_name(name)?;
        self.start()?;
        if self.manifest.file(name).is_none() {
            self.manifest.files.push(RunFile {
                name: name.into(),
                size: None,
            });
            self.write_manifest()?;
        }
        Ok(self.dir.join(name))
    }

    /// Records the file at `path`, which must lie directly in the directory (as the
    /// paths a writer returns); see [`RunDir::record`].
    pub fn record_path(&mut self, path: &Path) -> Result<()> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|_| path.parent().is_some_and(|p| same_dir(p, &self.dir)))
            .ok_or_else(|| Error::Name(path.display().to_string()))?;
        self.record(name).map(|_| ())
    }

    /// Writes `bytes` to `name` atomically (temporary name, sync, rename) and
    /// records it.
    pub fn write_atomic(&mut self, name: &str, bytes: &[u8]) -> Result<PathBuf> {
        let path = self.record(name)?;
        write_replace(&self.dir, name, bytes)?;
        Ok(path)
    }

    /// Ends the run: every recorded file that exists is listed with its size (a
    /// recorded name that no longer exists, such as a `.partial` file renamed to its
    /// final name, is dropped), `status` is written, and the lock is released.
    pub fn finish(mut self, status: Status) -> Result<Manifest> {
        self.finish_with(status)?;
        Ok(self.manifest.clone())
    }

    fn finish_with(&mut self, status: Status) -> Result<()> {
        self.start()?;
        self.finished = true;
        let dir = self.dir.clone();
        self.manifest
            .files
            .retain_mut(|f| match fs::symlink_metadata(dir.join(&f.name)) {
                // A directory under a recorded file's name is not what the run
                // wrote (its write there failed): not listed as the run's.
                Ok(m) if !m.is_dir() => {
                    f.size = Some(m.len());
                    true
                }
                _ => false,
            });
        self.manifest.status = status;
        self.manifest.finished_unix_ms = Some(now_ms());
        let r = self.write_manifest();
        // The holder's name goes with the lock, so that it never names a run that
        // has ended; closing the file releases the lock.
        if let Some(lock) = self.lock.take() {
            let _ = lock.set_len(0);
        }
        r
    }
}

/// Whether `path` names one of the files a run writing into `dir` owns: one of its
/// `outputs` (file names, as [`RunInfo::outputs`]), its manifest (`run.json`) or
/// its lock (`run.lock`), directly in `dir` (`./out/x` and `out/x` alike). Another
/// output of the same run (a trace, a checkpoint directory) given such a name would
/// replace the run's file, or be replaced by it, after all the run's work: it is
/// refused before the run with this.
pub fn is_run_file(dir: &Path, outputs: &[String], path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    (name == MANIFEST || name == LOCK || outputs.iter().any(|o| o == name)) && same_dir(parent, dir)
}

fn same_dir(a: &Path, b: &Path) -> bool {
    a == b
        || match (fs::canonicalize(a), fs::canonicalize(b)) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if !self.started {
            // Nothing was changed: only the holder's name leaves the lock file.
            if let Some(lock) = self.lock.take() {
                let _ = lock.set_len(0);
            }
        } else if !self.finished {
            let status = Status::Incomplete {
                reason: "the run ended with an error before finishing".into(),
                stopped_at: None,
            };
            if let Err(e) = self.finish_with(status) {
                // The run fails anyway (this is its error path); the manifest that
                // still says "running" is named, and readers take a "running"
                // manifest whose lock nobody holds as a run that ended unfinished
                // (`inspect`'s `Liveness::Abandoned`, the Python reader's check).
                tracing::error!(
                    error = %e,
                    "could not mark {} incomplete: it still says \"running\"; \
                     its files are not a finished run's",
                    self.dir.join(MANIFEST).display()
                );
            }
        }
    }
}

/// Whether the run that wrote a manifest is still there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// A process holds the lock: the run is in progress.
    Running,
    /// The run finished (completely or not).
    Finished,
    /// The manifest says `running` but nobody holds the lock: the run was killed.
    Abandoned,
}

/// A run directory's manifest as a reader finds it.
#[derive(Clone, Debug)]
pub struct Inspected {
    /// The manifest.
    pub manifest: Manifest,
    /// Whether its run is still there.
    pub liveness: Liveness,
}

/// Reads the manifest of `dir` (`None` when there is none) and finds out whether its
/// run is still in progress (by trying its lock, released at once).
pub fn inspect(dir: &Path) -> Result<Option<Inspected>> {
    let Some(manifest) = read_manifest(&dir.join(MANIFEST))? else {
        return Ok(None);
    };
    let liveness = match manifest.status {
        Status::Running => {
            let held = match open_own(&dir.join(LOCK), false) {
                Ok(Some((f, _))) => matches!(
                    rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockShared),
                    Err(e) if e == rustix::io::Errno::WOULDBLOCK
                ),
                _ => false,
            };
            if held {
                Liveness::Running
            } else {
                Liveness::Abandoned
            }
        }
        _ => Liveness::Finished,
    };
    Ok(Some(Inspected { manifest, liveness }))
}

/// Checks that the file at `path` can be trusted as a result: when its directory has
/// a manifest, the manifest must list it, its run must have completed, and its size
/// must be the listed one. A file in a directory without a manifest passes (it was
/// not written by a run directory); the caller decides whether to warn.
pub fn check_file(path: &Path) -> Result<()> {
    let untrusted = |reason: String| Error::Untrusted {
        path: path.to_path_buf(),
        reason,
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| untrusted("not a file name".into()))?;
    let Some(found) = inspect(dir)? else {
        return Ok(());
    };
    let m = &found.manifest;
    let Some(entry) = m.file(name) else {
        return Err(untrusted(format!(
            "not written by the run {} that {} describes (an older or foreign file)",
            said(&m.run_id),
            dir.join(MANIFEST).display()
        )));
    };
    match (&m.status, found.liveness) {
        (_, Liveness::Running) => {
            return Err(untrusted(format!(
                "the run {} (pid {} on {}) is still writing it",
                said(&m.run_id),
                m.pid,
                said(&m.host)
            )))
        }
        (_, Liveness::Abandoned) => {
            return Err(untrusted(format!(
                "the run {} that wrote it ended without finishing (killed, or it failed and \
                 could not mark its run.json: a full disk?)",
                said(&m.run_id)
            )))
        }
        (Status::Incomplete { reason, stopped_at }, _) => {
            return Err(untrusted(format!(
                "the run {} that wrote it is incomplete: {}{}",
                said(&m.run_id),
                said(reason),
                stopped_at
                    .as_ref()
                    .map(|s| format!(" (stopped at {})", said(s)))
                    .unwrap_or_default()
            )))
        }
        _ => {}
    }
    let size = fs::metadata(path).map_err(io("read", path))?.len();
    if entry.size.is_some_and(|s| s != size) {
        return Err(untrusted(format!(
            "{size} bytes, but its run's manifest says {} (changed since)",
            entry.size.unwrap_or(0)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tmp(PathBuf);
    impl Tmp {
        fn new(tag: &str) -> Tmp {
            let p = std::env::temp_dir().join(format!(
                "hpc-io-rundir-{tag}-{}-{}",
                std::process::id(),
                now_ms()
            ));
            let _ = fs::remove_dir_all(&p);
            Tmp(p)
        }
    }
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn info() -> RunInfo {
        let mut i = RunInfo::new("test");
        i.outputs = vec!["spikes.spk".into(), "summary.json".into()];
        i
    }

    /// An output directory that is a symbolic link is followed when this user
    /// made it, refused when another user did (a link planted in a shared folder
    /// sent the run's manifest, lock and outputs where it pointed, unseen), and
    /// a link to nothing is said to be one ("cannot create out: File exists").
    #[test]
    fn a_link_as_the_directory_is_followed_only_when_this_user_made_it() {
        use rustix::fs::{chownat, AtFlags, Gid, Uid, CWD};
        let t = Tmp::new("dir-link");
        let target = t.0.join("target");
        fs::create_dir_all(&target).unwrap();
        let out = t.0.join("out");
        std::os::unix::fs::symlink(&target, &out).unwrap();
        RunDir::create(&out, info())
            .unwrap()
            .finish(Status::Complete)
            .unwrap();
        assert!(target.join(MANIFEST).is_file());
        fs::remove_dir_all(&target).unwrap();
        fs::create_dir(&target).unwrap();

        let nobody = (Uid::from_raw(65534), Gid::from_raw(65534));
        match chownat(
            CWD,
            &out,
            Some(nobody.0),
            Some(nobody.1),
            AtFlags::SYMLINK_NOFOLLOW,
        ) {
            Ok(()) => {
                let e = RunDir::create(&out, info()).unwrap_err();
                assert!(matches!(e, Error::ForeignLink { owner: 65534, .. }), "{e}");
                let msg = e.to_string();
                assert!(
                    msg.contains("out is a symbolic link to") && msg.contains("user 65534"),
                    "{msg}"
                );
                assert_eq!(fs::read_dir(&target).unwrap().count(), 0);
            }
            // Only root may give a link away.
            Err(e) => eprintln!("the link's owner kept ({e}): the planted case not run"),
        }

        // Through a planted link further up, and an empty path (the current
        // directory, unseen).
        let lnk = t.0.join("lnk");
        std::os::unix::fs::symlink(&target, &lnk).unwrap();
        let e = RunDir::create("", info()).unwrap_err().to_string();
        assert!(e.contains("empty path"), "{e}");
        if chownat(
            CWD,
            &lnk,
            Some(nobody.0),
            Some(nobody.1),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .is_ok()
        {
            let e = RunDir::create(lnk.join("out"), info()).unwrap_err();
            assert!(matches!(e, Error::ForeignLink { .. }), "{e}");
            assert!(!target.join("out").exists());
            // A claimed file whose folder is a planted link: refused too.
            let e = FileClaim::take(&lnk.join("trace.json"), "a run").unwrap_err();
            assert!(matches!(e, Error::ForeignLink { .. }), "{e}");
            assert!(!target.join(".trace.json.lock").exists());
        }

        let dangling = t.0.join("dangling");
        std::os::unix::fs::symlink(t.0.join("nowhere"), &dangling).unwrap();
        let e = RunDir::create(&dangling, info()).unwrap_err().to_string();
        assert!(
            e.contains("symbolic link to") && e.contains("nowhere, which does not exist"),
            "{e}"
        );
        assert!(!t.0.join("nowhere").exists());
    }

    /// Pass 15: a claim in a folder not made yet was said of the lock file no
    /// user named ("cannot open N/.summary.json.lock").
    #[test]
    fn a_claim_in_a_missing_folder_names_the_file_and_its_folder() {
        let t = Tmp::new("claim-missing");
        let out = t.0.join("not-made").join("trace.json");
        let e = FileClaim::take(&out, "a run").unwrap_err().to_string();
        assert!(
            e.contains("not-made/trace.json")
                && e.contains("does not exist")
                && !e.contains(".lock"),
            "{e}"
        );
        assert!(!t.0.join("not-made").exists());
    }

    /// A hand-edited run.json whose words are 100,000 characters long: the
    /// messages cut them (they were echoed whole, twice over 100 KB).
    #[test]
    fn a_manifests_long_words_are_cut_in_the_messages() {
        let t = Tmp::new("long-words");
        let mut a = RunDir::create(&t.0, info()).unwrap();
        let spikes = a.record("spikes.spk").unwrap();
        fs::write(&spikes, b"x").unwrap();
        a.finish(Status::Complete).unwrap();
        let path = t.0.join(MANIFEST);
        let edit = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut m: serde_json::Value =
                serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
            f(&mut m);
            fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
        };
        let long = "x".repeat(100_000);
        edit(&|m| {
            m["program"] = long.clone().into();
            m["run_id"] = long.clone().into();
        });
        let msg = RunDir::create(&t.0, info()).unwrap_err().to_string();
        assert!(
            msg.len() < 1000 && msg.contains("more characters"),
            "{}",
            &msg[..300]
        );
        edit(&|m| {
            m["program"] = "test".into();
            m["status"] = "incomplete".into();
            m["reason"] = long.clone().into();
        });
        let msg = check_file(&spikes).unwrap_err().to_string();
        assert!(
            msg.len() < 1000 && msg.contains("more characters"),
            "{}",
            &msg[..300]
        );
        edit(&|m| m["format"] = long.clone().into());
        let msg = check_file(&spikes).unwrap_err().to_string();
        assert!(
            msg.len() < 1000 && msg.contains("more characters"),
            "{}",
            &msg[..300]
        );
    }

    /// A directory that another program's run wrote is refused, its files kept
    /// (`microcircuit --out brunel-out` removed brunel's results and exited 0);
    /// the same program replaces its own earlier run as before.
    #[test]
    fn another_programs_results_are_refused_not_removed() {
        let t = Tmp::new("other-program");
        let mut a = RunDir::create(&t.0, info()).unwrap();
        let spikes = a.record("spikes.spk").unwrap();
        fs::write(&spikes, b"brunel's").unwrap();
        a.finish(Status::Complete).unwrap();
        let mut other = info();
        other.program = "other".into();
        let e = RunDir::create(&t.0, other).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, Error::OtherProgram { .. }), "{msg}");
        assert!(msg.contains("a run of test"), "{msg}");
        assert_eq!(fs::read(&spikes).unwrap(), b"brunel's");
        // The same program takes the directory over.
        let b = RunDir::create(&t.0, info()).unwrap();
        assert!(!spikes.exists());
        b.finish(Status::Complete).unwrap();
    }

    #[test]
    fn a_second_run_is_refused_at_once_and_the_first_keeps_its_files() {
        let t = Tmp::new("busy");
        let mut a = RunDir::create(&t.0, info()).unwrap();
        a.write_atomic("spikes.spk", b"first run").unwrap();
        let t0 = std::time::Instant::now();
        let err = RunDir::create(&t.0, info()).unwrap_err();
        assert!(t0.elapsed() < std::time::Duration::from_secs(2));
        let msg = err.to_string();
        assert!(matches!(err, Error::Busy { .. }), "{msg}");
        assert!(msg.contains(&t.0.display().to_string()), "{msg}");
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        assert_eq!(fs::read(t.0.join("spikes.spk")).unwrap(), b"first run");
        let m = a.finish(Status::Complete).unwrap();
        assert_eq!(
            m.files,
            vec![RunFile {
                name: "spikes.spk".into(),
                size: Some(9)
            }]
        );
        assert_eq!(
            fs::read(t.0.join(LOCK)).unwrap(),
            b"",
            "the lock names no ended run"
        );
        // Released: the next run may start, and removes the earlier run's file.
        let b = RunDir::create(&t.0, info()).unwrap();
        assert!(!t.0.join("spikes.spk").exists());
        drop(b);
    }

    #[test]
    fn an_earlier_runs_files_do_not_stay_beside_a_new_runs() {
        let t = Tmp::new("stale");
        fs::create_dir_all(t.0.join("checkpoints")).unwrap();
        // A file the user put there: no run's, so kept.
        fs::write(t.0.join("notes.txt"), "mine").unwrap();
        let mut a = RunDir::create(&t.0, info()).unwrap();
        a.write_atomic("report.html", b"<p>a</p>").unwrap();
        a.write_atomic("spikes.spk", b"aaaa").unwrap();
        a.finish(Status::Complete).unwrap();
        // The next run writes only a summary: nothing of the first is left.
        let mut b = RunDir::create(&t.0, info()).unwrap();
        assert!(!t.0.join("report.html").exists());
        assert!(!t.0.join("spikes.spk").exists());
        b.write_atomic("summary.json", b"{}").unwrap();
        let m = b.finish(Status::Complete).unwrap();
        assert_eq!(m.files.len(), 1);
        assert_eq!(fs::read(t.0.join("notes.txt")).unwrap(), b"mine");
        assert!(t.0.join("checkpoints").is_dir());
        check_file(&t.0.join("summary.json")).unwrap();
        let e = check_file(&t.0.join("notes.txt")).unwrap_err().to_string();
        assert!(e.contains("older or foreign"), "{e}");
    }

    #[test]
    fn files_of_output_names_that_no_run_wrote_are_refused_not_removed() {
        let t = Tmp::new("foreign");
        fs::create_dir_all(&t.0).unwrap();
        fs::write(t.0.join("spikes.spk"), "mine").unwrap();
        fs::write(t.0.join("summary.json"), "mine too").unwrap();
        let e = RunDir::create(&t.0, info()).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, Error::Foreign { .. }), "{msg}");
        assert!(msg.contains("spikes.spk, summary.json"), "{msg}");
        assert!(msg.contains("choose another output directory"), "{msg}");
        assert_eq!(fs::read(t.0.join("spikes.spk")).unwrap(), b"mine");
        assert_eq!(fs::read(t.0.join("summary.json")).unwrap(), b"mine too");
        assert!(!t.0.join(MANIFEST).exists());
        // Beside an earlier run's manifest, an unlisted file of an output name is
        // just as foreign.
        fs::remove_file(t.0.join("summary.json")).unwrap();
        fs::remove_file(t.0.join("spikes.spk")).unwrap();
        let mut a = RunDir::create(&t.0, info()).unwrap();
        a.write_atomic("summary.json", b"{}").unwrap();
        a.finish(Status::Complete).unwrap();
        fs::write(t.0.join("spikes.spk"), "mine").unwrap();
        let e = RunDir::create(&t.0, info()).unwrap_err().to_string();
        assert!(e.contains("holds spikes.spk that no earlier run"), "{e}");
        assert_eq!(fs::read(t.0.join("summary.json")).unwrap(), b"{}");
    }

    /// `hpc_benchmark --out D` with a directory `D/summary.json` ran the whole
    /// simulation, failed at its end ("cannot replace D/summary.json: it is a
    /// directory"), and its run.json listed that directory as a file it wrote
    /// (size 4096), so that the next run took it for its own and failed the
    /// same way: a directory of an output name is refused before the run, and
    /// never listed.
    /// Another output of a run (a trace, a checkpoint directory) at the name of one
    /// of its files, however the directory is spelt, is found; other names and
    /// other directories are not (pass 15).
    #[test]
    fn the_files_a_run_owns_are_found_by_any_spelling_of_its_directory() {
        let t = Tmp::new("owns");
        let outputs = info().outputs;
        let owned = |p: &Path| is_run_file(&t.0, &outputs, p);
        assert!(owned(&t.0.join("spikes.spk")));
        assert!(owned(&t.0.join("run.json")));
        assert!(owned(&t.0.join("run.lock")));
        assert!(owned(&t.0.join(".").join("summary.json")));
        assert!(!owned(&t.0.join("trace.json")));
        assert!(!owned(&t.0.join("sub").join("spikes.spk")));
        assert!(!owned(Path::new("/")));
        let run = RunDir::lock(&t.0, info()).unwrap();
        assert!(run.owns_path(&t.0.join("summary.json")));
        assert!(!run.owns_path(&t.0.join("checkpoints")));
    }

    #[test]
    fn a_directory_of_an_output_name_is_refused_first_and_never_listed() {
        let t = Tmp::new("dir-output");
        fs::create_dir_all(t.0.join("summary.json")).unwrap();
        let e = RunDir::create(&t.0, info()).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, Error::Foreign { .. }), "{msg}");
        assert!(
            msg.contains("holds summary.json that no earlier run"),
            "{msg}"
        );
        assert!(t.0.join("summary.json").is_dir());
        assert!(!t.0.join(MANIFEST).exists());
        // A run whose recorded name became a directory: not listed at its end,
        // and its directory is refused again by the next run.
        fs::remove_dir(t.0.join("summary.json")).unwrap();
        let mut a = RunDir::create(&t.0, info()).unwrap();
        a.record("summary.json").unwrap();
        fs::create_dir(t.0.join("summary.json")).unwrap();
        let m = a.finish(Status::Complete).unwrap();
        assert!(m.file("summary.json").is_none(), "{:?}", m.files);
        let e = RunDir::create(&t.0, info()).unwrap_err();
        assert!(matches!(e, Error::Foreign { .. }), "{e}");
    }

    #[test]
    fn a_manifest_or_lock_that_is_not_a_regular_file_is_not_read_or_followed() {
        let t = Tmp::new("fifo");
        fs::create_dir_all(&t.0).unwrap();
        let victim = t.0.with_extension("victim");
        fs::write(&victim, "keep").unwrap();
        let fifo = |p: &Path| {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                p,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o644),
                0,
            )
            .unwrap()
        };
        // A FIFO run.json: refused at once (no writer ever comes), then replaced
        // (the run's own name in the directory it holds).
        fifo(&t.0.join(MANIFEST));
        let t0 = std::time::Instant::now();
        let e = inspect(&t.0).unwrap_err().to_string();
        assert!(e.contains("is a FIFO, not a regular file"), "{e}");
        RunDir::create(&t.0, info())
            .unwrap()
            .finish(Status::Complete)
            .unwrap();
        assert!(t0.elapsed() < std::time::Duration::from_secs(5));
        // A symlink run.json (to /dev/zero, to a file elsewhere) is not followed.
        for target in [Path::new("/dev/zero"), victim.as_path()] {
            fs::remove_file(t.0.join(MANIFEST)).unwrap();
            std::os::unix::fs::symlink(target, t.0.join(MANIFEST)).unwrap();
            let e = inspect(&t.0).unwrap_err().to_string();
            assert!(e.contains("is a symbolic link, not a regular file"), "{e}");
            RunDir::create(&t.0, info())
                .unwrap()
                .finish(Status::Complete)
                .unwrap();
            assert!(inspect(&t.0).unwrap().is_some());
        }
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
        // A run.lock that is a FIFO or a symlink: refused, naming what it is.
        fs::remove_file(t.0.join(LOCK)).unwrap();
        fifo(&t.0.join(LOCK));
        let e = RunDir::create(&t.0, info()).unwrap_err().to_string();
        assert!(e.contains("run.lock is a FIFO, not a regular file"), "{e}");
        fs::remove_file(t.0.join(LOCK)).unwrap();
        std::os::unix::fs::symlink(&victim, t.0.join(LOCK)).unwrap();
        let e = RunDir::create(&t.0, info()).unwrap_err().to_string();
        assert!(e.contains("run.lock is a symbolic link"), "{e}");
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
        let _ = fs::remove_file(&victim);
        // A regular file as the directory: said so.
        let f = t.0.join("afile");
        fs::write(&f, "x").unwrap();
        let e = RunDir::create(&f, info()).unwrap_err().to_string();
        assert!(e.contains("is a regular file, not a directory"), "{e}");
        // A device: named as one.
        let e = RunDir::create("/dev/null", info()).unwrap_err().to_string();
        assert_eq!(e.matches("not a directory").count(), 1, "{e}");
        assert!(
            e.contains("/dev/null is a character device, not a directory"),
            "{e}"
        );
        // Nobody is told to remove a device to make room for a run.
        assert!(!e.contains("remove it"), "{e}");
        assert!(e.contains("choose another output directory"), "{e}");
        // A file that can be removed is still offered both choices.
        let e = RunDir::create(&f, info()).unwrap_err().to_string();
        assert!(e.contains("remove it or choose another"), "{e}");
    }

    #[test]
    fn an_early_stop_is_marked_incomplete_and_readers_are_told() {
        let t = Tmp::new("stop");
        let mut a = RunDir::create(&t.0, info()).unwrap();
        let partial = a.record("spikes.spk.partial").unwrap();
        fs::write(&partial, b"1234").unwrap();
        a.record("spikes.spk").unwrap();
        let m = a
            .finish(Status::Incomplete {
                reason: "--stop-at".into(),
                stopped_at: Some("50.0 ms".into()),
            })
            .unwrap();
        // The final name was never written: only the partial file is listed.
        assert_eq!(
            m.files,
            vec![RunFile {
                name: "spikes.spk.partial".into(),
                size: Some(4)
            }]
        );
        let text = fs::read_to_string(t.0.join(MANIFEST)).unwrap();
        assert!(text.contains("\"status\": \"incomplete\""), "{text}");
        let e = check_file(&partial).unwrap_err().to_string();
        assert!(
            e.contains("incomplete: --stop-at (stopped at 50.0 ms)"),
            "{e}"
        );
        // A run that errors out (dropped) says so too.
        let b = RunDir::create(&t.0, info()).unwrap();
        drop(b);
        let m = inspect(&t.0).unwrap().unwrap();
        assert!(matches!(m.manifest.status, Status::Incomplete { .. }));
        assert!(
            !partial.exists(),
            "the earlier run's partial file was removed"
        );
    }

    /// A reason, a stop time or a run id of a forged `run.json` holding a line
    /// break or a terminal escape was written into `check_file`'s message as it
    /// is (pass 17 quoted them in the Python reader only): quoted and escaped.
    #[test]
    fn a_forged_reason_is_quoted_not_written_as_it_is() {
        let t = Tmp::new("forged-reason");
        let mut a = RunDir::create(&t.0, info()).unwrap();
        let partial = a.record("spikes.spk.partial").unwrap();
        fs::write(&partial, b"1234").unwrap();
        a.finish(Status::Incomplete {
            reason: "a\nb\u{1b}[31mred".into(),
            stopped_at: Some("1\r2".into()),
        })
        .unwrap();
        let e = check_file(&partial).unwrap_err().to_string();
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(!e.contains('\u{1b}'), "{e}");
        assert!(
            e.contains("incomplete: \"a\\nb\\u{1b}[31mred\" (stopped at \"1\\r2\")"),
            "{e}"
        );
        // A plain reason is written as it is.
        assert_eq!(said("--stop-at"), "--stop-at");
        assert_eq!(said("x\ty"), "\"x\\ty\"");
    }

    #[test]
    fn a_killed_runs_lock_goes_away() {
        let t = Tmp::new("killed");
        fs::create_dir_all(&t.0).unwrap();
        // A child process takes the lock with flock(1), says so, and is killed.
        // (`-o`: the lock stays with the flock process, which is the one killed.)
        let mut child = std::process::Command::new("flock")
            .arg("-o")
            .arg(t.0.join(LOCK))
            .args(["sh", "-c", "echo locked; read line"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("flock(1) is needed for this test");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "locked");
        let e = RunDir::create(&t.0, info()).unwrap_err();
        assert!(matches!(e, Error::Busy { .. }), "{e}");
        child.kill().unwrap();
        child.wait().unwrap();
        // Its shell ends with its input.
        drop(child.stdin.take());
        let r = RunDir::create(&t.0, info()).unwrap();
        assert_eq!(inspect(&t.0).unwrap().unwrap().liveness, Liveness::Running);
        r.finish(Status::Complete).unwrap();
        // A manifest still saying `running` with nobody holding the lock is what a
        // killed run leaves: readers are told it was abandoned.
        let text = fs::read_to_string(t.0.join(MANIFEST)).unwrap();
        fs::write(
            t.0.join(MANIFEST),
            text.replace("\"complete\"", "\"running\""),
        )
        .unwrap();
        assert_eq!(
            inspect(&t.0).unwrap().unwrap().liveness,
            Liveness::Abandoned
        );
    }

    #[test]
    fn a_run_that_stops_before_it_starts_changes_nothing() {
        let t = Tmp::new("lockonly");
        let mut a = RunDir::create(&t.0, info()).unwrap();
        a.write_atomic("spikes.spk", b"kept").unwrap();
        a.finish(Status::Complete).unwrap();
        let before = fs::read(t.0.join(MANIFEST)).unwrap();
        let b = RunDir::lock(&t.0, info()).unwrap();
        assert!(matches!(
            RunDir::create(&t.0, info()),
            Err(Error::Busy { .. })
        ));
        drop(b); // bad input found before start
        assert_eq!(fs::read(t.0.join("spikes.spk")).unwrap(), b"kept");
        assert_eq!(fs::read(t.0.join(MANIFEST)).unwrap(), before);
        check_file(&t.0.join("spikes.spk")).unwrap();
    }

    #[test]
    fn names_are_plain_and_manifests_are_checked() {
        let t = Tmp::new("names");
        let mut a = RunDir::create(&t.0, info()).unwrap();
        for bad in ["", "..", "a/b", MANIFEST, LOCK] {
            assert!(a.record(bad).is_err(), "{bad:?}");
        }
        assert!(a.record_path(Path::new("/elsewhere/x")).is_err());
        a.record_path(&t.0.join("x")).unwrap();
        a.finish(Status::Complete).unwrap();
        fs::write(t.0.join(MANIFEST), "{ not json").unwrap();
        let e = inspect(&t.0).unwrap_err().to_string();
        assert!(e.contains("not a valid run manifest"), "{e}");
    }
}
