//! `hpc trace`: the ranks' timelines (`HPC_TRACE=DIR`) merged into one
//! Chrome/Perfetto trace, and a merged trace drawn as an SVG picture; and the part of
//! `hpc run --trace FILE` that gives the ranks a directory and merges it after the job.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::UsageError;

/// Arguments of `hpc trace`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Merge the ranks' timelines (HPC_TRACE) into one Chrome/Perfetto trace, or draw one",
    after_help = "Examples:\n  \
        hpc run -n 4 --trace job.json -- ./app      (merges by itself)\n  \
        HPC_TRACE=trace.d mpirun -n 4 ./app && hpc trace merge trace.d -o job.json\n  \
        hpc trace svg job.json -o job.svg\n\n\
        Open the JSON in https://ui.perfetto.dev or chrome://tracing."
)]
pub struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(clap::Subcommand, Debug)]
enum Sub {
    /// Merge the files of a job's `HPC_TRACE=DIR` (written under mpirun, srun or hpc
    /// run) into one trace: one process per rank, clocks aligned.
    Merge {
        /// The directory the ranks wrote (`HPC_TRACE`).
        dir: PathBuf,
        /// The merged trace (JSON trace-event format), replaced if it exists.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: PathBuf,
    },
    /// Draw a merged trace as an SVG picture: a lane per thread, a box per span.
    Svg {
        /// The merged trace.
        file: PathBuf,
        /// The picture, replaced if it exists.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: PathBuf,
        /// Draw from this time on, in ms from the trace's start.
        #[arg(long, value_name = "MS")]
        from: Option<f64>,
        /// Draw up to this time, in ms from the trace's start.
        #[arg(long, value_name = "MS")]
        to: Option<f64>,
        /// Draw the last span of this name of the first rank (say `forward`), and
        /// what every process did meanwhile, instead of --from/--to.
        #[arg(long, value_name = "SPAN", conflicts_with_all = ["from", "to"])]
        around: Option<String>,
        /// Width in pixels.
        #[arg(long, value_name = "PX", default_value_t = 1200.0)]
        width: f64,
        /// A title above the lanes.
        #[arg(long, default_value = "")]
        title: String,
    },
}

/// The largest merged trace `hpc trace svg` reads (4 GiB).
const MAX_TRACE_BYTES: u64 = 4 << 30;

/// Runs `hpc trace`.
pub fn exec(args: Args) -> anyhow::Result<i32> {
    match args.command {
        Sub::Merge { dir, output } => {
            check_output("-o", &output)?;
            check_not_an_input(&dir, &output)?;
            // Checked before the work, held for the write alone (a merge stopped
            // by Ctrl-C leaves no lock file beside the output).
            drop(claim_output(&output, "hpc trace merge")?);
            let merged = merge(&dir)?;
            let _claim = claim_output(&output, "hpc trace merge")?;
            super::replace_file(&output, &merged.to_json())?;
            let (missing, first) = merged.missing_ranks(8);
            if missing > 0 {
                // Written, but not the whole job: said, as `hpc run --trace` does.
                use std::io::Write as _;
                let mut list: Vec<String> = first.iter().map(|r| r.to_string()).collect();
                if missing > first.len() {
                    list.push(format!("and {} more", missing - first.len()));
                }
                super::job::note!(
                    "hpc trace merge: {} holds no trace of rank(s) {} of its job of {} ranks \
                     (killed before its trace was finished, or the file removed); {} has \
                     the other {}",
                    hpc_io::message::path(&dir),
                    list.join(", "),
                    merged.job_size.unwrap_or(0),
                    hpc_io::message::path(&output),
                    merged.ranks
                );
            }
            Ok(0)
        }
        Sub::Svg {
            file,
            output,
            from,
            to,
            around,
            width,
            title,
        } => {
            check_output("-o", &output)?;
            check_not_the_trace(&file, &output)?;
            drop(claim_output(&output, "hpc trace svg")?);
            if !(width.is_finite() && (200.0..=100_000.0).contains(&width)) {
                return Err(UsageError(format!(
                    "--width must be between 200 and 100000 pixels, got {}",
                    hpc_trace::svg::num(width)
                ))
                .into());
            }
            for (flag, v) in [("--from", from), ("--to", to)] {
                if v.is_some_and(|v| !v.is_finite()) {
                    return Err(UsageError(format!("{flag} must be a number of ms")).into());
                }
                // Hostile pass 20: `--from 1e308` was refused as "the window
                // from inf µs …", naming neither the flag nor its value.
                if let Some(v) = v.filter(|v| !(v * 1000.0).is_finite()) {
                    return Err(UsageError(format!(
                        "{flag} {} ms is beyond the times a trace holds (at most about {:e} ms)",
                        hpc_trace::svg::num(v),
                        f64::MAX / 1000.0
                    ))
                    .into());
                }
            }
            if let Some(m) = std::fs::metadata(&file).ok().filter(|m| m.is_file()) {
                // The memory a trace needs, as the library's merge checks it.
                hpc_trace::merge::check_memory(
                    &format!(
                        "drawing {} ({})",
                        hpc_io::message::path(&file),
                        hpc_io::message::format_bytes(m.len())
                    ),
                    m.len(),
                )
                .map_err(|e| UsageError(e.to_string()))?;
            }
            let bytes = hpc_io::read::read_regular(&file, MAX_TRACE_BYTES)
                .map_err(|e| UsageError(e.to_string()))?;
            let trace: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
                UsageError(format!(
                    "{}: not a JSON trace: {e}",
                    hpc_io::message::path(&file)
                ))
            })?;
            let opts = hpc_trace::svg::Options {
                width,
                from_us: from.map(|ms| ms * 1000.0),
                to_us: to.map(|ms| ms * 1000.0),
                around,
                title,
            };
            let svg = hpc_trace::svg::render(&trace, &opts)
                .map_err(|e| UsageError(format!("{}: {e}", hpc_io::message::path(&file))))?;
            let _claim = claim_output(&output, "hpc trace svg")?;
            super::replace_file(&output, svg.as_bytes())?;
            Ok(0)
        }
    }
}

/// Claims the output `-o FILE` (checked before the work, held while it is
/// written), as `hpc run --trace FILE`
/// claims its trace for the whole job: a merge into the file a running job
/// will write at its end was written, then replaced by the job's without a word
/// (and a job given a FILE being merged into is refused).
fn claim_output(output: &Path, what: &str) -> Result<hpc_io::rundir::FileClaim, UsageError> {
    hpc_io::rundir::FileClaim::take(output, &format!("{what}, pid {}", std::process::id()))
        .map_err(|e| UsageError(format!("-o {}: {e}", hpc_io::message::path(output))))
}

/// Merges `dir`; an error names the file at fault.
fn merge(dir: &Path) -> anyhow::Result<hpc_trace::merge::Merged> {
    // The sum of the files is checked against the memory first (hostile
    // pass 21), by the library.
    hpc_trace::merge::merge_dir(dir).map_err(|e| UsageError(e.to_string()).into())
}

/// Refuses an output that is one of the files the merge of `dir` reads: the
/// merged trace would replace a rank's (or a proxy's) own file.
fn check_not_an_input(dir: &Path, output: &Path) -> Result<(), UsageError> {
    let Some(name) = output.file_name().and_then(|n| n.to_str()) else {
        return Ok(());
    };
    let parent = match output.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let same = matches!(
        (std::fs::canonicalize(parent), std::fs::canonicalize(dir)),
        (Ok(a), Ok(b)) if a == b
    );
    if same && hpc_trace::merge::is_process_file(name) {
        return Err(UsageError(format!(
            "-o {}: is one of the files it merges (a process's trace in {}); \
             choose another name",
            hpc_io::message::path(output),
            hpc_io::message::path(dir)
        )));
    }
    Ok(())
}

/// Refuses an output that is the trace `file` itself (by its name, its links
/// followed): the picture replaced the merged trace it was drawn from
/// (hostile pass 20). A link named as the output is replaced, not followed, so
/// it is not the trace.
fn check_not_the_trace(file: &Path, output: &Path) -> Result<(), UsageError> {
    let parent = match output.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let same = match (
        std::fs::canonicalize(file),
        std::fs::canonicalize(parent),
        output.file_name(),
    ) {
        (Ok(trace), Ok(dir), Some(name)) => trace == dir.join(name),
        _ => false,
    };
    if same {
        return Err(UsageError(format!(
            "-o {}: it is the trace {} it draws, which the picture would replace; \
             choose another name (trace.svg)",
            hpc_io::message::path(output),
            hpc_io::message::path(file)
        )));
    }
    Ok(())
}

/// The longest output file name whose lock, temporary and ranks' folder
/// (`.NAME.tmp-PID-N`: 16 bytes more) fit a file name's 255 bytes.
const MAX_OUTPUT_NAME: usize = 255 - 16;

/// Refuses an output that cannot be written before any work: a directory, a name
/// whose directory is missing, a device or FIFO.
fn check_output(flag: &str, path: &Path) -> Result<(), UsageError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // Hostile pass 20: `--trace -` wrote a file named `-` (no standard output
    // is meant: the output is renamed into place).
    if path == Path::new("-") {
        return Err(UsageError(format!(
            "{flag} -: the output is a file, written whole and renamed into place, not the \
             standard output: name a file (./- for one named -)"
        )));
    }
    // Hostile pass 20: a name of 250 bytes fits a folder, but the files made
    // beside it do not (".NAME.lock: File name too long", naming a file the
    // user never named).
    if let Some(n) = path
        .file_name()
        .map(|n| n.len())
        .filter(|&n| n > MAX_OUTPUT_NAME)
    {
        return Err(UsageError(format!(
            "{flag} {}: its name is {n} bytes; at most {MAX_OUTPUT_NAME} leave room for the \
             files made beside it (.NAME.lock, .NAME.tmp-PID)",
            hpc_io::message::path(path)
        )));
    }
    if path.file_name().is_none() || path.is_dir() {
        return Err(UsageError(format!(
            "{flag} {}: names a directory, not a file",
            hpc_io::message::path(path)
        )));
    }
    if !dir.is_dir() {
        // A file or a device there was said not to exist.
        let what = if dir.exists() {
            "is not a directory"
        } else {
            "does not exist"
        };
        return Err(UsageError(format!(
            "{flag} {}: the directory {} {what}",
            hpc_io::message::path(path),
            hpc_io::message::path(dir)
        )));
    }
    hpc_io::atomic::check_replaceable(path)
        .map_err(|e| UsageError(format!("{flag} {}: {e}", hpc_io::message::path(path))))
}

/// `hpc run --trace FILE`: the directory the ranks write into, beside `FILE`,
/// and the claim that keeps a second job from writing `FILE` at the same time.
#[derive(Debug)]
pub struct RunTrace {
    /// The merged trace to write.
    file: PathBuf,
    /// The ranks' directory (`HPC_TRACE`).
    pub dir: PathBuf,
    /// `FILE` claimed for this job until the trace is written.
    _claim: hpc_io::rundir::FileClaim,
}

impl RunTrace {
    /// Checks `--trace FILE` and makes the ranks' directory beside it (a new one:
    /// `.NAME.ranks-PID`). `-x HPC_TRACE=...` with `--trace` is refused.
    pub fn prepare(file: &Path, env: &[OsString]) -> Result<RunTrace, UsageError> {
        use std::os::unix::ffi::OsStrExt as _;
        let mut prefix = hpc_env::TRACE.as_bytes().to_vec();
        prefix.push(b'=');
        if env.iter().any(|kv| kv.as_bytes().starts_with(&prefix)) {
            return Err(UsageError(format!(
                "--trace and -x {}: give one (--trace merges the ranks' files into FILE)",
                hpc_env::TRACE
            )));
        }
        check_output("--trace", file)?;
        let claim =
            hpc_io::rundir::FileClaim::take(file, &format!("hpc run, pid {}", std::process::id()))
                .map_err(|e| UsageError(format!("--trace: {e}")))?;
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        let dir = file.with_file_name(format!(".{name}.ranks-{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| {
            UsageError(format!(
                "--trace {}: cannot make the ranks' directory {}: {e}",
                hpc_io::message::path(file),
                hpc_io::message::path(&dir)
            ))
        })?;
        // Absolute: the ranks may change directory before they record.
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        // The ranks refuse an HPC_TRACE that is not UTF-8 (as every variable of
        // ours): said here, before the job, not by every rank after its start.
        if dir.to_str().is_none() {
            let _ = std::fs::remove_dir(&dir);
            return Err(UsageError(format!(
                "--trace {}: the path of its folder is not valid UTF-8, which the ranks' {} \
                 must be: give a FILE in another folder",
                hpc_env::short(&file.to_string_lossy()),
                hpc_env::TRACE
            )));
        }
        Ok(RunTrace {
            file: file.to_path_buf(),
            dir,
            _claim: claim,
        })
    }

    /// Removes the ranks' directory of a job that could not run.
    pub fn discard(self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// After the job (which exited with `code`): merges the ranks' files into the
    /// trace and removes their directory. A merge that fails leaves the directory,
    /// says why and where, and makes a job that succeeded fail with 125.
    /// Ranks that wrote no trace (a program that is not an hpc-rs one, or one that
    /// installs a subscriber of its own) are named in a warning.
    /// A job whose ranks recorded nothing leaves nothing: its empty directory is
    /// removed and the note says so (no directory is offered to merge).
    pub fn finish(self, code: i32, np: usize) -> i32 {
        use std::io::Write as _;
        let recorded = std::fs::read_dir(&self.dir).map(|mut d| d.next().is_some());
        // A job stopped before any rank recorded an event or finished its file
        // left the folder of its empty `.part` files, offered to a merge that
        // had nothing to merge. Said of the files: ranks that recorded events
        // but could not write them (a full disk) were said to have recorded
        // none (hostile pass 21).
        if hpc_trace::merge::nothing_recorded(&self.dir) {
            let _ = std::fs::remove_dir_all(&self.dir);
            super::job::note!(
                "hpc run: --trace {}: the job ended (status {code}) before any of its {np} rank(s) wrote an event or a finished timeline into its file; nothing was written",
                hpc_io::message::path(&self.file)
            );
            return if code == 0 {
                super::EXIT_RUN_FAILED
            } else {
                code
            };
        }
        if let Ok(false) = recorded {
            let _ = std::fs::remove_dir(&self.dir);
            super::job::note!(
                "hpc run: --trace {}: none of the {np} rank(s) recorded a timeline (not hpc-rs programs, or ones with a tracing subscriber of their own without hpc_trace's layer); nothing was written",
                hpc_io::message::path(&self.file)
            );
            return if code == 0 {
                super::EXIT_RUN_FAILED
            } else {
                code
            };
        }
        let done = merge(&self.dir).and_then(|m| {
            super::replace_file(&self.file, &m.to_json()).with_context(|| {
                format!("writing --trace {}", hpc_io::message::path(&self.file))
            })?;
            Ok(m.rank_ids)
        });
        match done {
            Ok(ranks) => {
                let missing: Vec<String> = (0..np)
                    .filter(|r| ranks.binary_search(r).is_err())
                    .map(|r| r.to_string())
                    .collect();
                if !missing.is_empty() {
                    super::job::note!(
                        "hpc run: --trace {}: rank(s) {} recorded no timeline (not an hpc-rs program, or one with a tracing subscriber of its own without hpc_trace's layer)",
                        hpc_io::message::path(&self.file),
                        missing.join(", ")
                    );
                }
                let ranks = ranks.len();
                if let Err(e) = std::fs::remove_dir_all(&self.dir) {
                    tracing::warn!(dir = %self.dir.display(), error = %e, "cannot remove the ranks' trace files");
                }
                tracing::info!(ranks, file = %self.file.display(), "trace merged");
                code
            }
            Err(e) => {
                super::job::note!(
                    "hpc run: --trace {}: {}; the ranks' files are left in {} (hpc trace merge)",
                    hpc_io::message::path(&self.file),
                    hpc_io::message::chain(e.as_ref()),
                    hpc_io::message::path(&self.dir)
                );
                if code == 0 {
                    super::EXIT_RUN_FAILED
                } else {
                    code
                }
            }
        }
    }
}
