//! One process's trace file: its header (clocks, host, boot), one event per line,
//! its end (rank, label, counts), every write checked.
//!
//! ```text
//! {"hpcTrace":{"version":1,...},"traceEvents":[
//! {"ph":"M","name":"process_name",...}
//! ,{"ph":"X",...}
//! ],"hpcEnd":{"rank":2,"label":null,"events":1234}}
//! ```

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::{clock, Error};

/// The largest rank a file may name (`i32::MAX`), the same for the file a
/// rank writes and for the merge that reads it: the merged trace numbers the
/// other processes after the ranks, and viewers read a `pid` as a 32-bit
/// integer.
pub const MAX_RANK: usize = i32::MAX as usize;

/// The header of a process's file: what the merge aligns it on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Head {
    /// [`crate::FORMAT_VERSION`].
    pub version: u64,
    /// The process id.
    pub pid: u32,
    /// The host's name.
    pub host: String,
    /// The machine's boot id (empty when unknown).
    pub boot_id: String,
    /// `CLOCK_REALTIME` at the start, ns since the epoch.
    pub realtime_ns: u64,
    /// `CLOCK_MONOTONIC` at the same moment, ns; every `ts` counts from it.
    pub monotonic_ns: u64,
}

/// The end of a finished file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct End {
    /// The rank, when the process learnt it.
    pub rank: Option<usize>,
    /// The process's label (`proxy`), when it gave one.
    pub label: Option<String>,
    /// Events written.
    pub events: u64,
    /// The number of ranks of the job, when the process learnt it (absent in files
    /// of earlier writers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<usize>,
    /// The job the process belonged to, as its launcher named it ([`job_id`]), when
    /// one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

/// The job this process belongs to, as its launcher names it: `hpc run`'s job id,
/// Slurm's job and step, or the PMIx namespace of `mpirun`; `None` for a process
/// started alone (whose file records [`alone_job`] instead once it knows it is a
/// job of one rank). The merge refuses files of different jobs.
pub fn job_id() -> Option<String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    if let Some(id) = var(hpc_env::JOB_ID) {
        return Some(format!("hpc run {id}"));
    }
    if let Some(job) = var("SLURM_JOB_ID") {
        let step = var("SLURM_STEP_ID").unwrap_or_default();
        return Some(format!("slurm {job}.{step}"));
    }
    var("PMIX_NAMESPACE").map(|ns| format!("pmix {ns}"))
}

/// The job of a process started without a launcher, a job of one rank: itself,
/// by its pid and host, so that two such runs' files in one directory (a rank of
/// one, a proxy of the other) are told apart by the merge.
pub fn alone_job() -> String {
    format!("alone: pid {} on {}", std::process::id(), clock::host())
}

/// One event as written (Chrome's trace-event format).
#[derive(Serialize)]
pub struct Event<'a> {
    pub name: &'a str,
    pub cat: &'a str,
    pub ph: &'static str,
    /// Microseconds since the file's start.
    pub ts: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    pub pid: u32,
    pub tid: u32,
    /// An instant's scope (`t`: its thread).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s: Option<&'static str>,
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub args: &'a serde_json::Map<String, serde_json::Value>,
}

struct State {
    out: Option<BufWriter<File>>,
    error: Option<std::io::Error>,
    rank: Option<usize>,
    size: Option<usize>,
    label: Option<String>,
    events: u64,
    threads: HashSet<u32>,
    finished: Option<Option<PathBuf>>,
    /// The rank's own name, when a file written while this process ran held
    /// it, and the file was written beside it ([`Sink::aside`]); whether that
    /// file was of this process's own job.
    aside: Option<(PathBuf, bool)>,
    /// [`Sink::set_rank`] was given a rank beyond what the merge takes: the
    /// file is no rank's, and the launcher's rank variable is not read either.
    rank_refused: bool,
    /// The rank's own file (`rank-<R>.json`) as it was when this process first
    /// knew its rank `R` (from the launcher's variable at the start, else from
    /// [`Sink::set_rank`]): a file there that is not that one was put there
    /// since, while this process ran.
    seen: Option<(usize, Option<Identity>)>,
}

/// What tells one file from another exactly: its device and inode, with its
/// size and its times (an inode freed and made again is not taken for the
/// same file). Not its modification time alone, which a coarse file-system
/// clock dates up to a clock tick early: a file written while this process
/// ran was taken for an earlier run's, and replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    fn of(meta: &std::fs::Metadata) -> Identity {
        use std::os::unix::fs::MetadataExt as _;
        Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// The identity of what `path` names now (`None`: nothing).
    fn at(path: &Path) -> Option<Identity> {
        std::fs::symlink_metadata(path)
            .ok()
            .map(|m| Identity::of(&m))
    }
}

/// A process's trace file being written.
pub struct Sink {
    state: Mutex<State>,
    dir: PathBuf,
    part: PathBuf,
    pid: u32,
    /// `CLOCK_MONOTONIC` at the start, ns.
    pub start_ns: u64,
    /// When the job started ([`job_started`]): a rank's file of another job
    /// written after it was written while this job ran.
    started: std::time::SystemTime,
}

impl Sink {
    /// Makes `dir` (and its parents) if missing and starts `dir/pid-<PID>.json.part`
    /// (a new file; `pid-<PID>-<N>.json.part` where another process of the same
    /// id has that name). `what` names where `dir` came from, for messages.
    pub fn create(dir: &Path, what: &str) -> Result<Sink, Error> {
        let dir_err = |error| Error::Dir {
            what: what.to_string(),
            path: dir.to_path_buf(),
            error,
        };
        // `create_dir_all` of a path that is a file or a device (`/dev/null`) says
        // only "File exists": say what the path is and what it must be.
        if let Ok(m) = std::fs::metadata(dir) {
            if !m.is_dir() {
                return Err(dir_err(std::io::Error::other(format!(
                    "it is {}, not a directory: the trace is a directory each process \
                     writes its timeline into; name a directory (a new one is made), or \
                     unset the setting to record no timeline",
                    kind_of(&m.file_type())
                ))));
            }
        }
        // A link to a missing directory: "File exists" said neither.
        // Its folders too (hostile pass 20: `/lnk/t` said "File exists").
        if let Some((link, target)) = hpc_io::rundir::dangling_link_in(dir) {
            let said = hpc_io::rundir::dangling_said(dir, &link, &target);
            let said = if link == dir {
                format!("it is {said}")
            } else {
                said
            };
            return Err(dir_err(std::io::Error::other(format!(
                "{said}: make that directory, or name another"
            ))));
        }
        // A directory that is, or goes through, a link another user planted:
        // the trace went where it pointed (as a run directory refuses it).
        hpc_io::rundir::check_dir_link(dir)
            .map_err(|e| dir_err(std::io::Error::other(e.to_string())))?;
        std::fs::create_dir_all(dir).map_err(dir_err)?;
        let pid = std::process::id();
        // The file that could not be made is named, not only its folder
        // (hostile pass 20: "HPC_TRACE=D: File exists" named no file).
        let (part, file) = create_part(dir, pid).map_err(|(part, e)| {
            dir_err(std::io::Error::new(
                e.kind(),
                format!("cannot create {}: {e}", hpc_io::message::path(&part)),
            ))
        })?;
        let (realtime_ns, monotonic_ns) = clock::base();
        let head = Head {
            version: crate::FORMAT_VERSION,
            pid,
            host: clock::host(),
            boot_id: clock::boot_id(),
            realtime_ns,
            monotonic_ns,
        };
        let sink = Sink {
            state: Mutex::new(State {
                out: Some(BufWriter::with_capacity(1 << 16, file)),
                error: None,
                rank: None,
                size: None,
                label: None,
                events: 0,
                threads: HashSet::new(),
                finished: None,
                aside: None,
                rank_refused: false,
                seen: None,
            }),
            dir: dir.to_path_buf(),
            part,
            pid,
            start_ns: monotonic_ns,
            started: job_started(),
        };
        // The rank its launcher gave it, known before the job is joined: the
        // rank's file as it is now.
        if let Some(r) = launcher_rank() {
            sink.lock().seen = Some((r, Identity::at(&sink.rank_file(r))));
        }
        {
            let mut st = sink.lock();
            let head = serde_json::to_string(&head).map_err(std::io::Error::from);
            let r = head.and_then(|h| {
                let out = st.out.as_mut().expect("just made");
                write!(
                    out,
                    "{{\"hpcTrace\":{h},\"traceEvents\":[\n{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"tid\":0,\"args\":{{\"name\":\"pid {pid}\"}}}}"
                )
            });
            if let Err(error) = r {
                drop(st);
                let _ = std::fs::remove_file(&sink.part);
                return Err(Error::Write {
                    path: sink.part.clone(),
                    error,
                });
            }
        }
        Ok(sink)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The process id its events carry.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Writes `ev` (on thread `tid`, named `thread` the first time), unless the file
    /// is finished or a write failed before.
    pub fn write(&self, ev: &Event<'_>, thread: impl FnOnce() -> String) {
        let mut st = self.lock();
        if st.finished.is_some() || st.error.is_some() {
            return;
        }
        let name = st.threads.insert(ev.tid).then(thread);
        let State { out, error, .. } = &mut *st;
        let Some(out) = out.as_mut() else { return };
        let r = (|| {
            if let Some(name) = name {
                let args = serde_json::json!({ "name": name });
                let m = serde_json::json!({"ph": "M", "name": "thread_name", "pid": ev.pid, "tid": ev.tid, "args": args});
                out.write_all(b"\n,")?;
                serde_json::to_writer(&mut *out, &m)?;
            }
            out.write_all(b"\n,")?;
            serde_json::to_writer(&mut *out, ev)?;
            Ok::<(), std::io::Error>(())
        })();
        match r {
            Ok(()) => st.events += 1,
            Err(e) => *error = Some(e),
        }
    }

    /// Records the process's rank. A rank the merge refuses, and with it the
    /// whole folder, is not taken: one beyond [`MAX_RANK`], or
    /// not below the job's size given before ([`Sink::set_size`]); the file
    /// stays a process's that is no rank (`proc-<PID>.json`), and a warning
    /// says so.
    pub fn set_rank(&self, rank: usize) {
        let max = MAX_RANK;
        let why = {
            let mut st = self.lock();
            let why = if rank > max {
                Some(format!("it is beyond the largest rank a job has ({max})"))
            } else {
                st.size
                    .filter(|&size| rank >= size)
                    .map(|size| format!("it is not a rank of the job of {size} ranks given before"))
            };
            st.rank = why.is_none().then_some(rank);
            st.rank_refused = why.is_some();
            if why.is_none() && st.seen.as_ref().is_none_or(|(r, _)| *r != rank) {
                st.seen = Some((rank, Identity::at(&self.rank_file(rank))));
            }
            why
        };
        // Outside the lock: the warning may be recorded into this very file.
        if let Some(why) = why {
            tracing::warn!(
                "hpc_trace: rank {rank} not taken: {why}, and the trace's merge refuses \
                 it; this process's trace is kept as a process that is no rank \
                 (proc-{}.json)",
                self.pid
            );
        }
    }

    /// Records the number of ranks of the process's job. A size the merge
    /// refuses is not taken, and a warning says so: 0, or not above the rank
    /// given before ([`Sink::set_rank`]).
    pub fn set_size(&self, size: usize) {
        let why = {
            let mut st = self.lock();
            let why = if size == 0 {
                Some("a job has at least one rank".to_string())
            } else {
                st.rank
                    .filter(|&rank| rank >= size)
                    .map(|rank| format!("the rank given before, {rank}, is not a rank of it"))
            };
            if why.is_none() {
                st.size = Some(size);
            }
            why
        };
        if let Some(why) = why {
            tracing::warn!(
                "hpc_trace: a job of {size} ranks not taken: {why}, and the trace's merge \
                 refuses it"
            );
        }
    }

    /// Records the process's label.
    pub fn set_label(&self, label: &str) {
        self.lock().label = Some(label.to_string());
    }

    /// Writes the end and renames the file to its final name (returned; `None`
    /// when it was finished before and failed). A write that failed, now or
    /// before, leaves the `.part` file and is the error.
    pub fn finish(&self) -> Result<Option<PathBuf>, Error> {
        let mut st = self.lock();
        if let Some(done) = &st.finished {
            return Ok(done.clone());
        }
        st.finished = Some(None);
        let out = st.out.take();
        let fail = |error| Error::Write {
            path: self.part.clone(),
            error,
        };
        if let Some(error) = st.error.take() {
            return Err(fail(error));
        }
        let Some(mut out) = out else { return Ok(None) };
        // A rank that ended before it learnt its rank (it failed to join the job) is
        // still the rank its launcher started; a process with a label is no rank.
        if st.rank.is_none() && st.label.is_none() && !st.rank_refused {
            st.rank = launcher_rank();
        }
        let end = End {
            rank: st.rank,
            label: st.label.clone(),
            events: st.events,
            size: st.size,
            job: job_id().or_else(|| (st.size == Some(1)).then(alone_job)),
        };
        let job = end.job.clone();
        let end = serde_json::to_string(&end).map_err(|e| fail(e.into()))?;
        write!(out, "\n],\"hpcEnd\":{end}}}\n").map_err(fail)?;
        let file = out.into_inner().map_err(|e| fail(e.into_error()))?;
        file.sync_all().map_err(fail)?;
        // A `.part` removed or replaced while this process wrote (by hand, by
        // another process): its name was renamed all the same, `Ok`, the
        // timeline lost (a link to `/dev/full` became `rank-0.json`).
        if !hpc_io::atomic::still_at(&file, &self.part) {
            return Err(fail(std::io::Error::other(
                "it is no longer the file this process wrote (removed or replaced while it \
                 ran); nothing renamed",
            )));
        }
        let path = match st.rank {
            Some(r) => {
                let seen = st.seen.as_ref().filter(|(s, _)| *s == r).map(|(_, i)| i);
                let (path, aside) = self.rank_name(r, job.as_deref(), seen);
                st.aside = aside;
                path
            }
            None => free_proc_name(&self.dir, self.pid),
        };
        hpc_io::atomic::rename_over(&self.part, &path).map_err(|e| Error::Write {
            path: self.part.clone(),
            error: std::io::Error::other(e.to_string()),
        })?;
        st.finished = Some(Some(path.clone()));
        Ok(Some(path))
    }
}

impl Sink {
    /// Rank `r`'s own file in the folder, `rank-<R>.json`.
    fn rank_file(&self, r: usize) -> PathBuf {
        self.dir.join(format!("rank-{r}.json"))
    }

    /// The final name of rank `r`'s file, this process's job being `job`:
    /// `rank-<R>.json`, replacing an earlier run's file there (a rerun into
    /// the same folder), but not one written while this job ran: another
    /// job's (two jobs given one `HPC_TRACE` folder at once: the later ranks'
    /// files replaced the earlier's without a word), or this job's own
    /// (another process given the same rank, or a second trace layer of this
    /// process in the same folder: the later replaced the earlier's timeline
    /// without a word). Then the file is `rank-<R>-<N>.json`, and the rank's
    /// own name is returned beside it with whether it was this job's (the
    /// merge then refuses the mixture of jobs, or the two files of one rank,
    /// naming them).
    ///
    /// Written meanwhile is told exactly where this process knew its rank
    /// early (`seen`, what the rank's file was then): any other file there
    /// now was put there since. A file that was there already is this job's
    /// when it names the launcher's job this process is of; else it was
    /// written meanwhile only if it is dated at or after the job's start (the
    /// time between the job's start and this process's knowing its rank).
    fn rank_name(
        &self,
        r: usize,
        job: Option<&str>,
        seen: Option<&Option<Identity>>,
    ) -> (PathBuf, Option<(PathBuf, bool)>) {
        let first = self.rank_file(r);
        let Ok(meta) = std::fs::symlink_metadata(&first) else {
            return (first, None);
        };
        if !meta.is_file() {
            return (first, None);
        }
        let file_job = file_job(&first);
        let same_job = file_job == Some(job.map(str::to_string));
        let meanwhile = match seen {
            Some(seen) if seen.as_ref() != Some(&Identity::of(&meta)) => true,
            _ => {
                (same_job && job.is_some() && job_id().is_some())
                    || meta.modified().is_ok_and(|m| m >= self.started)
            }
        };
        if !meanwhile {
            return (first, None);
        }
        let taken = |p: &Path| std::fs::symlink_metadata(p).is_ok();
        match (1..=SAME_PID_MAX)
            .map(|n| self.dir.join(format!("rank-{r}-{n}.json")))
            .find(|p| !taken(p))
        {
            Some(p) => (p, Some((first, same_job))),
            None => (first, None),
        }
    }

    /// The rank's own name, when [`Sink::finish`] found there a file written
    /// while this process ran, and wrote this one beside it; whether that file
    /// was of this process's own job.
    pub fn aside(&self) -> Option<(PathBuf, bool)> {
        self.lock().aside.clone()
    }
}

/// The rank the launcher gave this process (its rank variable), if it is one
/// the merge takes.
fn launcher_rank() -> Option<usize> {
    std::env::var(hpc_env::RANK)
        .ok()
        .and_then(|r| r.trim().parse().ok())
        .filter(|&r| r <= MAX_RANK)
}

/// When this process's job started, as near as this process can tell: under a
/// launcher (a job id given), when its parent started (the launcher, or a
/// shell it started: a rank may start its trace long after the job did, and a
/// job that ran meanwhile was taken for an earlier run); else now.
fn job_started() -> std::time::SystemTime {
    let now = std::time::SystemTime::now();
    match job_id().and_then(|_| crate::clock::parent_start()) {
        Some(t) if t < now => t,
        _ => now,
    }
}

/// The most bytes of a finished file's end read for its job.
const END_BYTES: u64 = 64 << 10;

/// The job a finished process file names (`Some(None)`: none), read from its
/// last [`END_BYTES`]; `None` when it cannot be read as a finished file.
fn file_job(path: &Path) -> Option<Option<String>> {
    use std::io::{Read as _, Seek as _};
    let mut f = File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(std::io::SeekFrom::Start(len.saturating_sub(END_BYTES)))
        .ok()?;
    let mut tail = Vec::new();
    f.take(END_BYTES).read_to_end(&mut tail).ok()?;
    let tail = String::from_utf8_lossy(&tail);
    let (_, end) = tail.rsplit_once("\"hpcEnd\":")?;
    let end = end.trim_end().strip_suffix('}')?;
    serde_json::from_str::<End>(end).ok().map(|e| e.job)
}

/// The most other processes of one process id whose files one trace
/// directory holds beside each other (`pid-<PID>-<N>.json.part`).
const SAME_PID_MAX: u32 = 4096;

/// Starts this process's `.part` file in `dir`: `pid-<PID>.json.part`, or
/// `pid-<PID>-<N>.json.part` where another process of the same id has that name
/// (a rank in a container of its own is often pid 1 or 2 in each, and ranks of
/// several machines share a directory on a shared file system: the second
/// refused to start, "File exists").
fn create_part(dir: &Path, pid: u32) -> Result<(PathBuf, File), (PathBuf, std::io::Error)> {
    let mut last = None;
    for n in 0..=SAME_PID_MAX {
        let part = if n == 0 {
            dir.join(format!("pid-{pid}.json.part"))
        } else {
            dir.join(format!("pid-{pid}-{n}.json.part"))
        };
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&part)
        {
            Ok(f) => return Ok((part, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some((part, e)),
            Err(e) => return Err((part, e)),
        }
    }
    Err(last.unwrap_or_else(|| {
        (
            dir.join(format!("pid-{pid}.json.part")),
            std::io::ErrorKind::AlreadyExists.into(),
        )
    }))
}

/// The final name of a process that is no rank (a proxy): `proc-<PID>.json`,
/// or `proc-<PID>-<N>.json` where that name is taken (by a process of the same
/// id on another machine or in another container: its file was replaced).
fn free_proc_name(dir: &Path, pid: u32) -> PathBuf {
    let taken = |p: &Path| std::fs::symlink_metadata(p).is_ok();
    let first = dir.join(format!("proc-{pid}.json"));
    if !taken(&first) {
        return first;
    }
    (1..=SAME_PID_MAX)
        .map(|n| dir.join(format!("proc-{pid}-{n}.json")))
        .find(|p| !taken(p))
        .unwrap_or(first)
}

/// What a file that is not a directory is, in words.
fn kind_of(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Processes of one id writing into one directory (a rank in a container
    /// of its own is pid 1 or 2 in each; machines sharing the directory on a
    /// shared file system): the second refused to start ("HPC_TRACE= DIR: File
    /// exists"), and a proxy's `proc-<PID>.json` replaced the other's. Each
    /// gets a file of its own; the other's files are kept.
    #[test]
    fn processes_of_one_id_in_one_directory_each_get_a_file() {
        let dir = hpc_test_support::TmpDir::new("hpc-trace", "same-pid");
        let pid = std::process::id();
        // Another process of this id writing its file, and one that finished as
        // a proxy.
        std::fs::write(dir.join(format!("pid-{pid}.json.part")), "{").unwrap();
        std::fs::write(dir.join(format!("proc-{pid}.json")), "other").unwrap();
        let proxy = Sink::create(&dir, &format!("{}=", hpc_env::TRACE)).unwrap();
        assert_eq!(proxy.part, dir.join(format!("pid-{pid}-1.json.part")));
        proxy.set_label("proxy");
        let done = proxy.finish().unwrap().unwrap();
        assert_eq!(done, dir.join(format!("proc-{pid}-1.json")));
        let other = std::fs::read_to_string(dir.join(format!("proc-{pid}.json"))).unwrap();
        assert_eq!(other, "other");
        let rank = Sink::create(&dir, &format!("{}=", hpc_env::TRACE)).unwrap();
        rank.set_rank(3);
        assert_eq!(rank.finish().unwrap().unwrap(), dir.join("rank-3.json"));
        assert!(dir.join(format!("pid-{pid}.json.part")).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Two jobs given one `HPC_TRACE` folder at once: the later rank's file
    /// replaced the earlier's of the same rank without a word (pass 18's
    /// noticed list). Another job's file written while this process ran is
    /// kept and this one written beside it (which the merge then refuses
    /// as a mixture); an earlier run's file (a rerun into the folder) is replaced.
    #[test]
    fn a_rank_file_another_job_wrote_meanwhile_is_kept() {
        let dir = hpc_test_support::TmpDir::new("hpc-trace", "two-jobs");
        let trace = format!("{}=", hpc_env::TRACE);
        let pause = || std::thread::sleep(std::time::Duration::from_millis(30));
        // An earlier run's file: replaced.
        std::fs::write(dir.join("rank-0.json"), "earlier").unwrap();
        pause();
        let rerun = Sink::create(&dir, &trace).unwrap();
        rerun.set_rank(0);
        assert_eq!(rerun.finish().unwrap().unwrap(), dir.join("rank-0.json"));
        assert_eq!(rerun.aside(), None);
        // That file as another job's rank 0 would have written it.
        let other = std::fs::read_to_string(dir.join("rank-0.json"))
            .unwrap()
            .replacen("\"hpcEnd\":{", "\"hpcEnd\":{\"job\":\"hpc run 99\",", 1);
        // Another job's, written while this process ran: kept.
        let rank = Sink::create(&dir, &trace).unwrap();
        rank.set_rank(0);
        pause();
        std::fs::write(dir.join("rank-0.json"), &other).unwrap();
        let done = rank.finish().unwrap().unwrap();
        assert_eq!(done, dir.join("rank-0-1.json"));
        assert_eq!(rank.aside(), Some((dir.join("rank-0.json"), false)));
        assert_eq!(
            std::fs::read_to_string(dir.join("rank-0.json")).unwrap(),
            other
        );
        // The merge refuses the mixture: `crates/hpc-cli/tests/trace.rs`
        // `two_jobs_in_one_trace_folder_at_once_are_told_not_mixed_silently`.
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A rank file put there while this process ran, which a coarse
    /// file-system clock dated before this process started (a clock tick
    /// early; here by a second): taken for an earlier run's by its
    /// modification time, and replaced, the other's timeline lost (pass 20's
    /// leftover). What the rank's file was when this process knew its rank
    /// tells it exactly: another file is kept, this one written beside it;
    /// the file that was there then is still replaced.
    #[test]
    fn a_rank_file_put_there_meanwhile_but_dated_earlier_is_kept() {
        let dir = hpc_test_support::TmpDir::new("hpc-trace", "dated-early");
        let trace = format!("{}=", hpc_env::TRACE);
        let early = std::time::SystemTime::now() - std::time::Duration::from_secs(1);
        let backdate = |p: &Path| {
            let f = File::options().write(true).open(p).unwrap();
            f.set_modified(early).unwrap();
        };
        // An earlier run's file, there before this process knew its rank.
        std::fs::write(dir.join("rank-0.json"), "earlier").unwrap();
        backdate(&dir.join("rank-0.json"));
        let rerun = Sink::create(&dir, &trace).unwrap();
        rerun.set_rank(0);
        assert_eq!(rerun.finish().unwrap().unwrap(), dir.join("rank-0.json"));
        assert_eq!(rerun.aside(), None);
        let other = std::fs::read_to_string(dir.join("rank-0.json"))
            .unwrap()
            .replacen("\"hpcEnd\":{", "\"hpcEnd\":{\"job\":\"hpc run 98\",", 1);
        // Another job's, put there (by a rename, as a trace is) after this
        // process knew its rank, dated a second early.
        let rank = Sink::create(&dir, &trace).unwrap();
        rank.set_rank(0);
        let tmp = dir.join("other.tmp");
        std::fs::write(&tmp, &other).unwrap();
        backdate(&tmp);
        std::fs::rename(&tmp, dir.join("rank-0.json")).unwrap();
        let done = rank.finish().unwrap().unwrap();
        assert_eq!(done, dir.join("rank-0-1.json"));
        assert_eq!(rank.aside(), Some((dir.join("rank-0.json"), false)));
        assert_eq!(
            std::fs::read_to_string(dir.join("rank-0.json")).unwrap(),
            other
        );
    }

    /// A `.part` replaced while the process wrote (here by a link to
    /// `/dev/full`; by hand, or by another process) was renamed all the same:
    /// `finish` said `Ok` and `rank-0.json` was the link, the timeline lost.
    /// Nothing is renamed; the error names the `.part`.
    /// Hostile pass 20: a trace folder where this process's file could not be
    /// made said the folder and the system's reason ("HPC_TRACE=D: File
    /// exists"), naming no file. The file is named.
    #[test]
    fn a_file_that_cannot_be_made_is_named() {
        let dir = hpc_test_support::TmpDir::new("hpc-trace", "no-part");
        let pid = std::process::id();
        for n in 0..=SAME_PID_MAX {
            let name = if n == 0 {
                format!("pid-{pid}.json.part")
            } else {
                format!("pid-{pid}-{n}.json.part")
            };
            std::fs::write(dir.join(name), b"").unwrap();
        }
        let e = Sink::create(&dir, &format!("{}=", hpc_env::TRACE))
            .err()
            .expect("no name left")
            .to_string();
        let last = dir.join(format!("pid-{pid}-{SAME_PID_MAX}.json.part"));
        assert!(
            e.contains(&format!("cannot create {}: ", last.display())),
            "{e}"
        );
    }

    #[test]
    fn a_part_replaced_while_written_is_not_renamed() {
        let dir = hpc_test_support::TmpDir::new("hpc-trace", "part-replaced");
        let sink = Sink::create(&dir, &format!("{}=", hpc_env::TRACE)).unwrap();
        sink.set_rank(0);
        std::fs::remove_file(&sink.part).unwrap();
        std::os::unix::fs::symlink("/dev/full", &sink.part).unwrap();
        let e = sink.finish().unwrap_err().to_string();
        assert!(e.contains("no longer the file this process wrote"), "{e}");
        assert!(!dir.join("rank-0.json").exists());
    }
}
