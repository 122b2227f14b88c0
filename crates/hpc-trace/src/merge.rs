//! The files of one job's processes made into one Chrome/Perfetto trace.
//!
//! Each rank becomes a process of the trace (`pid` = rank, named `rank R (host)`),
//! each process that is no rank (the collectives proxy) one numbered after the
//! ranks. Clocks are aligned so: every file counts from its start, recorded on both
//! `CLOCK_MONOTONIC` and `CLOCK_REALTIME`. Files of one boot of one machine (the same
//! `boot_id`: ranks of one host, containers included) share the monotonic clock and
//! are placed exactly by it; one such group is placed against another by the
//! realtime clocks of their first processes, which assumes the machines' clocks are
//! synchronised (NTP, PTP): an error in that synchronisation shifts a machine's ranks
//! by as much. The merged file says so in its `otherData`.
//!
//! A file that a process left unfinished (killed, or its disk full: `*.json.part`),
//! one cut short or not a trace of this format, and a directory without a trace, are
//! errors naming the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::sink::{End, Head};

/// The largest process file read (a GiB).
pub const MAX_FILE_BYTES: u64 = 1 << 30;

pub use crate::sink::MAX_RANK;

/// How the merged clocks were aligned, as the merged file's `otherData` says it.
pub const ALIGNMENT: &str = "processes of one boot of one machine: CLOCK_MONOTONIC (exact); \
    between machines: CLOCK_REALTIME of each machine's first process, assumed synchronised \
    (NTP/PTP); its error shifts that machine's processes";

/// What cannot be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// The directory cannot be listed.
    #[error(
        "cannot read the trace directory {}: {error}",
        hpc_io::message::path(path)
    )]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The operating system's error.
        error: std::io::Error,
    },
    /// The directory holds no finished or unfinished trace file.
    #[error(
        "{} holds no trace file (rank-<R>.json); was the job run with {var} set to it?",
        hpc_io::message::path(.0),
        var = hpc_env::TRACE
    )]
    Empty(PathBuf),
    /// A process did not finish its file.
    #[error(
        "{} was never finished: the process (pid {pid}) was killed or failed to write it \
         before its end (a full disk?); {lines} events were written{}; {}",
        hpc_io::message::path(path),
        others_note(others),
        what_to_do(others.len() + 1, *finished)
    )]
    Unfinished {
        /// The `.part` file (the first by name).
        path: PathBuf,
        /// The process id in its name.
        pid: String,
        /// Lines of events in it.
        lines: usize,
        /// The directory's other unfinished files, by name: named too (at most
        /// [`OTHERS_NAMED`] of them, then their count), so that removing the one
        /// named is not met by the next.
        others: Vec<PathBuf>,
        /// The finished process files beside them.
        finished: usize,
    },
    /// The files to merge would need more memory than this machine has
    /// available ([`check_memory`]): they are read and parsed whole, and more
    /// than the machine holds ended the merge killed for its memory, without
    /// a word (a rank's file may hold up to a GiB).
    #[error("{what} would need about {} of memory, {}", hpc_io::message::format_bytes(*.need), match .available { Some(a) => format!("but {} is available (MemAvailable)", hpc_io::message::format_bytes(*a)), None => "more than this process can address".to_string() })]
    Memory {
        /// What would need it: the files, their folder and their size.
        what: String,
        /// The memory it would need, in bytes (saturated).
        need: u64,
        /// The memory available (`None`: more than the process can address).
        available: Option<u64>,
    },
    /// A process of this machine is still writing its file (the job still runs).
    #[error("{path} is not finished yet: its process (pid {pid}) still runs on this machine; merge once the job has ended", path = hpc_io::message::path(path))]
    Running {
        /// The `.part` file.
        path: PathBuf,
        /// Its process id.
        pid: String,
    },
    /// A file cannot be read or is not a finished trace of this format. The
    /// reason is cut ([`hpc_io::message::cut`]): a parser's message quoted a
    /// string of the file whole.
    #[error("{}: {}", hpc_io::message::path(path), hpc_io::message::cut(why))]
    Bad {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A process file cannot be read (missing, a FIFO or a device, too large):
    /// the error names it.
    #[error(transparent)]
    Read(#[from] hpc_io::read::ReadError),
    /// The files are of different jobs.
    #[error(
        "{} is {why}: the directory holds the files of more than one job; merge the files of \
         one job (remove the others)",
        hpc_io::message::path(path)
    )]
    Mixed {
        /// The file found not to belong with the others.
        path: PathBuf,
        /// How it differs.
        why: String,
    },
    /// Two files name the same rank.
    #[error(
        "{} and {} are both rank {rank}'s: traces of two jobs in one directory?",
        hpc_io::message::path(first),
        hpc_io::message::path(second)
    )]
    Duplicate {
        /// The rank.
        rank: usize,
        /// One file.
        first: PathBuf,
        /// The other.
        second: PathBuf,
    },
}

/// The most other unfinished files an [`MergeError::Unfinished`] names.
pub const OTHERS_NAMED: usize = 8;

/// What to do with `unfinished` files beside `finished` ones.
fn what_to_do(unfinished: usize, finished: usize) -> String {
    let it = if unfinished == 1 { "it" } else { "them" };
    match finished {
        // A job stopped before any of its processes finished: "remove them to
        // merge the others" named others that were not there.
        0 => "no process finished its file: there is nothing to merge".into(),
        1 => format!("remove {it} to merge the 1 finished file"),
        n => format!("remove {it} to merge the {n} finished files"),
    }
}

/// "; so were A, B (and N more)" for the other unfinished files.
fn others_note(others: &[PathBuf]) -> String {
    if others.is_empty() {
        return String::new();
    }
    let named: Vec<String> = others
        .iter()
        .take(OTHERS_NAMED)
        .map(|p| hpc_io::message::path(p))
        .collect();
    let more = others.len().saturating_sub(OTHERS_NAMED);
    format!(
        "; so were {}{}",
        named.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )
}

#[derive(Deserialize)]
struct File {
    #[serde(rename = "hpcTrace")]
    head: Head,
    #[serde(rename = "traceEvents")]
    events: Vec<Value>,
    #[serde(rename = "hpcEnd")]
    end: End,
}

/// A merged trace: its events (the ranks' first, `pid` = rank) and its metadata.
#[derive(Debug, Clone)]
pub struct Merged {
    /// Every event, timestamps in microseconds from the earliest process's start.
    pub events: Vec<Value>,
    /// The merged file's `otherData`: the alignment, the processes, the start.
    pub meta: Value,
    /// Number of ranks.
    pub ranks: usize,
    /// The ranks, in order.
    pub rank_ids: Vec<usize>,
    /// The number of ranks of the job, where its rank files say (ranks missing
    /// from [`Merged::rank_ids`] left no file in the directory).
    pub job_size: Option<usize>,
}

impl Merged {
    /// The ranks of the job (by [`Merged::job_size`]) that left no file (a rank
    /// killed before it finished its trace, or its file removed or not copied):
    /// how many, and the first `show` of them (a file may claim 2^31 ranks).
    ///
    /// ```
    /// use hpc_trace::merge::Merged;
    /// let m = |rank_ids: Vec<usize>, job_size| Merged {
    ///     events: vec![],
    ///     meta: serde_json::Value::Null,
    ///     ranks: rank_ids.len(),
    ///     rank_ids,
    ///     job_size,
    /// };
    /// assert_eq!(m(vec![1], Some(1 << 31)).missing_ranks(3), ((1 << 31) - 1, vec![0, 2, 3]));
    /// assert_eq!(m(vec![0, 1], Some(2)).missing_ranks(3), (0, vec![]));
    /// assert_eq!(m(vec![4], None).missing_ranks(3), (0, vec![]));
    /// ```
    pub fn missing_ranks(&self, show: usize) -> (usize, Vec<usize>) {
        let n = self.job_size.unwrap_or(0);
        let present = self.rank_ids.iter().filter(|&&r| r < n).count();
        let first = (0..n)
            .filter(|r| self.rank_ids.binary_search(r).is_err())
            .take(show)
            .collect();
        (n - present, first)
    }
}

impl Merged {
    /// The Chrome trace JSON (object format: `traceEvents`, `otherData`), one event a
    /// line.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.events.len() * 160 + 1024);
        out.extend_from_slice(b"{\"displayTimeUnit\":\"ms\",\"otherData\":");
        out.extend_from_slice(self.meta.to_string().as_bytes());
        out.extend_from_slice(b",\"traceEvents\":[");
        for (i, e) in self.events.iter().enumerate() {
            out.extend_from_slice(if i == 0 { b"\n" } else { b",\n" });
            out.extend_from_slice(e.to_string().as_bytes());
        }
        out.extend_from_slice(b"\n]}\n");
        out
    }
}

/// Reads one finished process file.
fn read(path: &Path) -> Result<File, MergeError> {
    let bad = |why: String| MergeError::Bad {
        path: path.to_path_buf(),
        why,
    };
    // Its own error names the file (given to `Bad`, the path was said twice:
    // "d/rank-1.json: d/rank-1.json is a FIFO").
    let bytes = hpc_io::read::read_regular(path, MAX_FILE_BYTES)?;
    let file: File = serde_json::from_slice(&bytes).map_err(|e| {
        bad(if e.is_eof() {
            "the file ends early: it was cut short after it was finished (copied in part?)"
                .to_string()
        } else {
            format!("not a trace file of hpc-trace: {e}")
        })
    })?;
    if file.head.version != crate::FORMAT_VERSION {
        return Err(bad(format!(
            "format version {}, this merge reads version {}",
            file.head.version,
            crate::FORMAT_VERSION
        )));
    }
    Ok(file)
}

/// The process files of `dir`: finished ones, refusing unfinished ones.
fn list(dir: &Path) -> Result<Vec<PathBuf>, MergeError> {
    let entries = std::fs::read_dir(dir).map_err(|error| MergeError::Dir {
        path: dir.to_path_buf(),
        error,
    })?;
    let mut files = Vec::new();
    let mut parts = Vec::new();
    for e in entries {
        let e = e.map_err(|error| MergeError::Dir {
            path: dir.to_path_buf(),
            error,
        })?;
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        if let Some(pid) = name
            .strip_prefix("pid-")
            .and_then(|n| n.strip_suffix(".json.part"))
        {
            // `pid-<PID>-<N>.json.part`: another process of that id had the name.
            let pid = pid.split('-').next().unwrap_or(pid);
            // The folder of a job that still runs: its process was said to have
            // been killed, and the user told to remove the file it was writing.
            if pid.bytes().all(|b| b.is_ascii_digit()) && held_open_by(pid, &path) {
                return Err(MergeError::Running {
                    path,
                    pid: pid.to_string(),
                });
            }
            parts.push((path, pid.to_string()));
            continue;
        }
        if is_process_file(&name) {
            files.push(path);
        }
    }
    // Every unfinished file named, the first by name in full: one of several
    // was named, and the next met only once it was removed.
    parts.sort();
    if let Some((path, pid)) = parts.first().cloned() {
        let lines = event_lines(&path);
        return Err(MergeError::Unfinished {
            path,
            pid,
            lines,
            others: parts.into_iter().skip(1).map(|(p, _)| p).collect(),
            finished: files.len(),
        });
    }
    if files.is_empty() {
        return Err(MergeError::Empty(dir.to_path_buf()));
    }
    files.sort();
    Ok(files)
}

/// About how many bytes of memory a byte of a trace's JSON takes while it is
/// merged or drawn: the text read whole, the tree of values parsed from it
/// (about 12 times the text: 620 MB for a trace of 52 MB), and the text written.
pub const MEMORY_PER_TRACE_BYTE: u64 = 16;

/// Refuses to read `bytes` of traces (`what`: the files, as a message names
/// them) whose merge or drawing would need more memory
/// ([`MEMORY_PER_TRACE_BYTE`] a byte) than this machine has available
/// (`MemAvailable`) or than this process can address, before anything is read.
pub fn check_memory(what: &str, bytes: u64) -> Result<(), MergeError> {
    let need = bytes.saturating_mul(MEMORY_PER_TRACE_BYTE);
    let available = if need > isize::MAX as u64 {
        None
    } else {
        match hpc_io::read::mem_available() {
            Some(a) if need > a => Some(a),
            _ => return Ok(()),
        }
    };
    Err(MergeError::Memory {
        what: what.to_string(),
        need,
        available,
    })
}

/// The lines of events in the unfinished file `path` (0 if it cannot be read).
fn event_lines(path: &Path) -> usize {
    let text = hpc_io::read::read_regular(path, MAX_FILE_BYTES).unwrap_or_default();
    text.split(|&b| b == b'\n')
        .filter(|l| l.starts_with(b",{"))
        .count()
}

/// Whether `dir` holds nothing but unfinished process files (`pid-<PID>.json.part`)
/// of processes that no longer run, none with an event in it, and at least one:
/// what a job stopped before any of its processes recorded or finished anything
/// leaves (`hpc run --trace` then removes the folder rather than leave it to be
/// merged: there is nothing to merge).
pub fn nothing_recorded(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut any = false;
    for e in entries {
        let Ok(e) = e else { return false };
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("pid-")
            .and_then(|n| n.strip_suffix(".json.part"))
        else {
            return false;
        };
        let pid = pid.split('-').next().unwrap_or(pid);
        let path = e.path();
        if !e.file_type().is_ok_and(|t| t.is_file())
            || held_open_by(pid, &path)
            || event_lines(&path) > 0
        {
            return false;
        }
        any = true;
    }
    any
}

/// Whether the process `pid` of this machine holds the file `path` open (it is
/// still writing it: its job runs). The header may still be in the process's
/// buffer, so the process's open files are looked at, not the file; a process
/// of another user (whose files cannot be listed) or of another machine is
/// taken as gone.
fn held_open_by(pid: &str, path: &Path) -> bool {
    let Ok(me) = std::fs::canonicalize(path) else {
        return false;
    };
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == me))
}

/// Whether `name` is a name the merge reads in a directory: a rank's file
/// (`rank-<R>.json`) or a proxy's (`proc-<PID>.json`).
pub fn is_process_file(name: &str) -> bool {
    (name.starts_with("rank-") || name.starts_with("proc-")) && name.ends_with(".json")
}

/// Merges the process files of `dir` (see the [module](self) documentation).
pub fn merge_dir(dir: &Path) -> Result<Merged, MergeError> {
    let mut ranks: BTreeMap<usize, (PathBuf, File)> = BTreeMap::new();
    let mut others: Vec<(PathBuf, File)> = Vec::new();
    let paths = list(dir)?;
    // Hostile pass 21: the files were read and parsed whole, whatever their sum.
    let bytes = paths
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .fold(0u64, |sum, m| sum.saturating_add(m.len()));
    check_memory(
        &format!(
            "merging the {} trace file(s) of {} ({})",
            paths.len(),
            hpc_io::message::path(dir),
            hpc_io::message::format_bytes(bytes)
        ),
        bytes,
    )?;
    for path in paths {
        let f = read(&path)?;
        match f.end.rank {
            Some(r) if r > MAX_RANK => {
                return Err(MergeError::Bad {
                    path,
                    why: format!("rank {r} is beyond the largest rank a job has ({MAX_RANK})"),
                });
            }
            Some(r) => {
                if let Some((first, _)) = ranks.get(&r) {
                    return Err(MergeError::Duplicate {
                        rank: r,
                        first: first.clone(),
                        second: path,
                    });
                }
                ranks.insert(r, (path, f));
            }
            None => others.push((path, f)),
        }
    }
    let job_size = one_job(&ranks, &others)?;
    let n_ranks = ranks.len();
    let rank_ids: Vec<usize> = ranks.keys().copied().collect();
    let top = ranks.keys().next_back().map_or(0, |&r| r + 1);
    // (pid in the merged trace, its name, its sort index, the file)
    let mut procs: Vec<(usize, String, File)> = Vec::new();
    for (r, (_, f)) in ranks {
        let name = format!("rank {r} ({})", f.head.host);
        procs.push((r, name, f));
    }
    for (i, (_, f)) in others.into_iter().enumerate() {
        let label = f.end.label.clone().unwrap_or_else(|| "process".into());
        let name = format!("{label} ({}, pid {})", f.head.host, f.head.pid);
        procs.push((top + i, name, f));
    }
    // Per boot, the realtime clock minus the monotonic one of its first process.
    let mut offsets: BTreeMap<String, i128> = BTreeMap::new();
    for (_, _, f) in &procs {
        let key = boot_key(&f.head);
        offsets
            .entry(key)
            .or_insert(i128::from(f.head.realtime_ns) - i128::from(f.head.monotonic_ns));
    }
    let start = |h: &Head| i128::from(h.monotonic_ns) + offsets[&boot_key(h)];
    let t0 = procs
        .iter()
        .map(|(_, _, f)| start(&f.head))
        .min()
        .unwrap_or(0);
    let mut events = Vec::new();
    let mut described = Vec::new();
    for (pid, name, f) in procs {
        let shift_us = (start(&f.head) - t0) as f64 / 1000.0;
        events.push(json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}));
        events.push(json!({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}));
        described.push(json!({
            "pid": pid, "name": name, "os_pid": f.head.pid, "host": f.head.host,
            "boot_id": f.head.boot_id, "offset_us": shift_us, "events": f.end.events,
        }));
        for mut e in f.events {
            if e["ph"] == "M" && e["name"] == "process_name" {
                continue;
            }
            if let Some(ts) = e.get("ts").and_then(Value::as_f64) {
                e["ts"] = json!(ts + shift_us);
            }
            e["pid"] = json!(pid);
            events.push(e);
        }
    }
    let meta = json!({
        "producer": "hpc-trace",
        "clock_alignment": ALIGNMENT,
        "t0_realtime_ns": t0.to_string(),
        "ranks": n_ranks,
        "processes": described,
    });
    Ok(Merged {
        events,
        meta,
        ranks: n_ranks,
        rank_ids,
        job_size,
    })
}

/// Refuses files of different jobs (a directory written by two jobs, or one
/// holding an earlier job's files that this job's did not replace): the job
/// (`hpc run`'s id, Slurm's, PMIx's, a process started alone) of a rank file or a
/// proxy's file differs from the others', or the number of ranks of two rank files
/// differ, or a rank is beyond its job's. Files that do not say are taken as they
/// are.
/// Gives the number of ranks of the job, where a rank file says.
fn one_job(
    ranks: &BTreeMap<usize, (PathBuf, File)>,
    others: &[(PathBuf, File)],
) -> Result<Option<usize>, MergeError> {
    let mut size: Option<(usize, &PathBuf)> = None;
    for (&r, (path, f)) in ranks {
        let mixed = |why: String| MergeError::Mixed {
            path: path.clone(),
            why,
        };
        if let Some(n) = f.end.size {
            if r >= n {
                return Err(mixed(format!("rank {r} of a job of {n} ranks")));
            }
            match size {
                Some((m, other)) if m != n => {
                    return Err(mixed(format!(
                        "a rank of a job of {n} ranks, {} one of {m}",
                        hpc_io::message::path(other)
                    )))
                }
                Some(_) => {}
                None => size = Some((n, path)),
            }
        }
    }
    let mut job: Option<(&str, &PathBuf)> = None;
    for (path, f) in ranks
        .values()
        .map(|(p, f)| (p, f))
        .chain(others.iter().map(|(p, f)| (p, f)))
    {
        if let Some(id) = f.end.job.as_deref() {
            match job {
                Some((other_id, other)) if other_id != id => {
                    return Err(MergeError::Mixed {
                        path: path.clone(),
                        // The ids as the files say them, cut (a file's id of
                        // 100,000 characters was quoted whole).
                        why: format!(
                            "of the job {}, {} of the job {}",
                            hpc_env::shown(id),
                            hpc_io::message::path(other),
                            hpc_env::shown(other_id)
                        ),
                    });
                }
                Some(_) => {}
                None => job = Some((id, path)),
            }
        }
    }
    Ok(size.map(|(n, _)| n))
}

/// What processes sharing `CLOCK_MONOTONIC` have in common: the boot, else the host.
fn boot_key(h: &Head) -> String {
    if h.boot_id.is_empty() {
        format!("host:{}", h.host)
    } else {
        format!("boot:{}", h.boot_id)
    }
}
