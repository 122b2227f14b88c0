//! What every run of a spiking network shares: the thread pool of a rank, time in
//! steps, the run's output directory (owned through [`hpc_io::rundir`]), the
//! progress bar, the options of [`RunOptions`], and the hand-off of every rank's
//! report to rank 0 for the summary and the report.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// Serde for an `Option<PathBuf>` that may not be UTF-8 (a legal Linux file name):
/// a UTF-8 path is written as a string, any other as its bytes, and both are read
/// back exactly (`#[serde(with = "hpc_spiking::run::opt_path")]`); the rule of
/// [`hpc_io::serde_path`], which the topology's source follows too.
pub use hpc_io::serde_path::opt as opt_path;

/// How a simulation runs: the overlap of the exchange, the spike file, the
/// checkpoints and an early stop (shared by every network of the workspace).
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Overlap the exchange with the next interval's update (`M = D/2`; ignored
    /// when the minimum delay `D` is under 2 steps).
    pub overlap: bool,
    /// Where rank 0 writes the spike file (none: no file).
    pub spikes: Option<PathBuf>,
    /// Write a checkpoint every this many steps (needs `checkpoint_dir`).
    pub checkpoint_every: Option<u64>,
    /// Directory of the checkpoints.
    pub checkpoint_dir: Option<PathBuf>,
    /// Keep only the newest this many of the checkpoints this run writes (older ones
    /// of this run are removed once a newer one is complete); `None`: keep all.
    pub checkpoint_keep: Option<usize>,
    /// Resume from this checkpoint (a `step-*` directory or their parent). Read by
    /// `Simulation::new`; `Simulation::run` continues the spike file of the
    /// checkpoint that `new` restored.
    pub restart: Option<PathBuf>,
    /// Stop (as if interrupted) once this step is reached: the spike file is
    /// left as `.partial`.
    pub stop_at: Option<u64>,
    /// While the run's loop runs, SIGTERM, SIGINT and SIGHUP stop it after the interval
    /// in progress, every rank of a run of several at the same step
    /// ([`crate::stop`], [`OnSignal::check_among`](crate::stop::OnSignal::check_among)):
    /// the loop returns
    /// [`Stopped`](crate::stop::Stopped) with the spike file flushed, rather
    /// than the process ending where it stood (set by the binaries'
    /// [`RunArgs::options`](crate::args::RunArgs::options); off by default).
    pub stop_on_signal: bool,
}

/// Peak resident memory of this process (`VmHWM` from `/proc/self/status`), bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    let s = hpc_io::read::read_regular_to_string("/proc/self/status", hpc_io::read::MAX_PROC_BYTES)
        .ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// CPU time (user + system) of this process so far, all threads, in seconds.
pub fn cpu_seconds() -> f64 {
    // SAFETY: `getrusage` fills the zero-initialised struct we pass and reads nothing else.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The thread pool of this rank: `threads` threads (at least one), named `name`,
/// pinned to this rank's share of the node's cores when `pin` (unpinned, with a
/// warning, when no placement fits).
pub fn thread_pool(
    world: &hpc_rs::World,
    threads: usize,
    pin: bool,
    name: &str,
) -> anyhow::Result<rayon::ThreadPool> {
    // hpc_rs::init_with (given these threads) already warned when a launcher's
    // binding leaves them one core (mpirun).
    let threads = threads.max(1);
    if pin {
        // Ranks that a launcher bound each to their own cores plan inside them;
        // ranks that share the node's cores divide them.
        let (local_rank, local_size) = match hpc_topology::Topology::this_machine()
            .map_err(anyhow::Error::from)
            .and_then(|t| Ok(hpc_rs::placement_slot(world, &t)?))
        {
            Ok(slot) => slot,
            Err(_) => (world.local_rank(), world.local_size()),
        };
        match hpc_topology::plan_for_env(
            local_rank,
            local_size,
            threads,
            0,
            hpc_topology::ProgressScope::PerRank,
            hpc_topology::Policy::Compact,
        ) {
            // A worker that cannot be pinned is an error of `build` (it was
            // unpinned behind a warning): the run goes on unpinned, said so.
            Ok(placement) => match hpc_topology::PinnedPoolBuilder::new(&placement)
                .thread_name(name)
                .build()
            {
                Ok(pool) => return Ok(pool),
                Err(e) => tracing::warn!(error = %e, "threads are not pinned"),
            },
            Err(e) => tracing::warn!(error = %e, "no placement; threads are not pinned"),
        }
    }
    Ok(rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?)
}

pub use hpc_io::message::num;

/// `message` (a parser's, which writes a float such as `1e300` out in full) with
/// every number of more than 20 characters (digits, and a `.` with the digits
/// after it) written as [`num`] writes it: `1e300`, `1e-70`.
///
/// ```
/// use hpc_spiking::run::short_numbers;
///
/// let tiny = format!("dt = {} ms", 1e-70);
/// assert_eq!(short_numbers(&tiny), "dt = 1e-70 ms");
/// assert_eq!(short_numbers(&format!("{:.1}", 1e300)), "1e300");
/// assert_eq!(short_numbers("version 1.2.3, 20 ms"), "version 1.2.3, 20 ms");
/// ```
pub fn short_numbers(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(1024));
    let mut rest = message;
    let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    while let Some(start) = rest.find(|c: char| c.is_ascii_digit()) {
        out.push_str(&rest[..start]);
        let run = &rest[start..];
        let mut len = digits(run);
        // The fraction is part of the number: `0.000…01` was written `0.` and
        // then its 70 digits as the number 1, "0.1".
        if let Some(fraction) = run[len..].strip_prefix('.') {
            let more = digits(fraction);
            if more > 0 {
                len += 1 + more;
            }
        }
        let number = &run[..len];
        match number.parse::<f64>() {
            Ok(x) if len > 20 => out.push_str(&num(x)),
            _ => out.push_str(number),
        }
        rest = &run[len..];
    }
    out.push_str(rest);
    out
}

/// Refuses a model whose parameters are finite one by one but not together: each
/// `(what, value)` is a quantity derived from several parameters (a weight, the
/// largest input of one step, a rate) that must be a finite number, or the
/// potentials become infinite or NaN and a silent (or saturated) network would
/// pass for a result. The error names the first quantity that is not, its value,
/// and `because` (which parameters make it).
///
/// ```
/// use hpc_spiking::run::finite_together;
///
/// assert!(finite_together(&[("w", 2.0), ("w*K", 200.0)], "w and K").is_ok());
/// let err = finite_together(&[("w", 1e300), ("w*K", 1e300 * 1e10)], "w and K are too large together")
///     .unwrap_err()
///     .to_string();
/// assert!(err.contains("w*K is inf: w and K are too large together"), "{err}");
/// ```
pub fn finite_together(quantities: &[(&str, f64)], because: &str) -> anyhow::Result<()> {
    for &(what, x) in quantities {
        if !x.is_finite() {
            anyhow::bail!("{what} is {}: {because}", num(x));
        }
    }
    Ok(())
}

/// The most threads per rank a run accepts: 64 for each CPU this process may use,
/// at most 4096. More only oversubscribes the cores (and a mistyped `--threads
/// 100000` would spend minutes starting threads).
pub fn max_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .saturating_mul(64)
        .min(4096)
}

/// Checks `--threads`: at least 1 and at most [`max_threads`], naming the limit.
pub fn check_threads(threads: usize) -> anyhow::Result<()> {
    if threads == 0 {
        anyhow::bail!("--threads must be at least 1");
    }
    let max = max_threads();
    if threads > max {
        anyhow::bail!(
            "--threads {threads} is more than the limit of {max} (64 per CPU this process may use, at most 4096)"
        );
    }
    Ok(())
}

/// `ms` milliseconds in steps of `dt` (rounded, at least one); `what` names the
/// value in the error when `ms` is not positive or makes more than
/// [`MAX_STEPS`] steps, and the error names `dt` when it is not a finite number
/// above 0 (a `dt` of 0, or `ms` 1e300 in steps of 1e-300, gave `u64::MAX`
/// steps, and a `dt` of infinity one step).
pub fn steps_of(ms: f64, dt: f64, what: &str) -> anyhow::Result<u64> {
    if !(ms.is_finite() && ms > 0.0) {
        anyhow::bail!(
            "{what} must be a finite number of ms above 0, got {}",
            num(ms)
        );
    }
    if !(dt.is_finite() && dt > 0.0) {
        anyhow::bail!(
            "the time step dt must be a finite number of ms above 0, got {}",
            num(dt)
        );
    }
    let r = (ms / dt).round();
    if r > MAX_STEPS as f64 {
        anyhow::bail!(
            "{what} {} ms is {} steps of dt = {} ms: at most {MAX_STEPS} steps (2^53)",
            num(ms),
            num(r),
            num(dt)
        );
    }
    Ok((r as u64).max(1))
}

/// `ms` milliseconds in whole steps of `dt`: an interval that is not a positive
/// multiple of the step (a `--checkpoint-every 0.01` with a 0.1 ms step would
/// otherwise be rounded to one step, a checkpoint at every step) is refused with a
/// message naming `what` and the step. So is one of more than [`MAX_STEPS`] steps,
/// which no run reaches and whose sums would overflow.
pub fn whole_steps(ms: f64, dt: f64, what: &str) -> anyhow::Result<u64> {
    // As `steps_of`: a negative `dt` made a negative `ms` a positive number
    // of steps (-1 ms in steps of -0.1 ms: 10), and a `dt` of 1e-300 was
    // written in 300 digits.
    if !(dt.is_finite() && dt > 0.0) {
        anyhow::bail!(
            "the time step dt must be a finite number of ms above 0, got {}",
            num(dt)
        );
    }
    let s = ms / dt;
    let r = s.round();
    if ms.is_finite() && r > MAX_STEPS as f64 {
        anyhow::bail!(
            "{what} {} ms is {} steps of dt = {} ms: at most {MAX_STEPS} steps (2^53)",
            num(ms),
            num(r),
            num(dt)
        );
    }
    if !(ms.is_finite() && r >= 1.0 && (s - r).abs() <= 1e-6 * r) {
        anyhow::bail!(
            "{what} {} ms is not a positive multiple of the time step dt = {} ms \
             (give {} ms or a multiple of it)",
            num(ms),
            num(dt),
            num(dt)
        );
    }
    Ok(r as u64)
}

/// The most steps [`whole_steps`] gives (2^53: every count up to it is exact in an
/// `f64`, and two of them add up without overflow).
pub const MAX_STEPS: u64 = 1 << 53;

/// [`whole_steps`] for a time inside a run of `total` steps: a `--stop-at` after the
/// end, or a `--checkpoint-every` longer than the run, would change nothing (the
/// run went to its end, no checkpoint was written) and is refused naming `what`
/// and the run's length, as a setting that is ignored would leave the user
/// believing it took effect.
pub fn whole_steps_within(ms: f64, dt: f64, total: u64, what: &str) -> anyhow::Result<u64> {
    let steps = whole_steps(ms, dt, what)?;
    if steps > total {
        anyhow::bail!(
            "{what} {} ms is beyond the end of the run ({} ms): it would change nothing",
            num(ms),
            num(total as f64 * dt)
        );
    }
    Ok(steps)
}

/// The most differences [`params_diff`] lists; the others are counted in a
/// last entry (a checkpoint's parameters of 100,000 keys named every one).
pub const LISTED_DIFFERENCES: usize = 10;

/// The parameters that differ between `old` and `new` (serialisable parameter
/// sets), as `name old -> new`, leaving out `ignore` (such as `t_sim`, which a
/// restart may extend); empty when none differs. A parameter one side does not
/// give (absent or `null`: an optional one left to its default) is written
/// `(not given)`, not `null`. The first [`LISTED_DIFFERENCES`] are listed, then
/// `and N more`; a long name is cut as [`hpc_runtime::env::short`] cuts it, and
/// a long value is written short: both come from a checkpoint's file, which may
/// say anything.
pub fn params_diff(
    old: &impl serde::Serialize,
    new: &impl serde::Serialize,
    ignore: &[&str],
) -> Vec<String> {
    params_diff_used(
        old,
        new,
        ignore,
        &serde_json::Value::Null,
        &serde_json::Value::Null,
    )
}

/// [`params_diff`], where `old_used` and `new_used` (tables of the same names
/// as the parameters, such as `{"ce": 1000}`) say what each run used for a
/// parameter it did not give (a default derived from others): such a side is
/// written `(not given: 1000)` (a text as it is: `{"ce": "epsilon * NE =
/// 1000"}` gives `(not given: epsilon * NE = 1000)`), so that the message says
/// what the run used (brunel's `ce` taken from `epsilon` was written `null`).
pub fn params_diff_used(
    old: &impl serde::Serialize,
    new: &impl serde::Serialize,
    ignore: &[&str],
    old_used: &impl serde::Serialize,
    new_used: &impl serde::Serialize,
) -> Vec<String> {
    type Difference = (String, serde_json::Value, serde_json::Value);
    fn walk(prefix: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<Difference>) {
        use serde_json::Value;
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    let name = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(
                        &name,
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                        out,
                    );
                }
            }
            _ if a != b => out.push((prefix.to_string(), a.clone(), b.clone())),
            _ => {}
        }
    }
    /// A value as JSON, or, for a table or list of many characters (one side's
    /// whole `populations` where the other has none), its size in words.
    fn short(v: &serde_json::Value) -> String {
        let text = v.to_string();
        if text.len() <= 80 {
            return text;
        }
        match v {
            serde_json::Value::Object(m) => format!("{{{} fields}}", m.len()),
            serde_json::Value::Array(a) => format!("[{} items]", a.len()),
            _ => format!("{}...", text.chars().take(60).collect::<String>()),
        }
    }
    /// `v`, or for a parameter not given, what the run used for it (the value
    /// at the dotted `name` in `used`) when known.
    fn side(name: &str, v: &serde_json::Value, used: &serde_json::Value) -> String {
        if !v.is_null() {
            return short(v);
        }
        let at = name
            .split('.')
            .try_fold(used, |t, k| t.get(k))
            .filter(|u| !u.is_null());
        match at {
            Some(serde_json::Value::String(u)) => {
                format!("(not given: {})", hpc_runtime::env::short(u))
            }
            Some(u) => format!("(not given: {})", short(u)),
            None => "(not given)".into(),
        }
    }
    let (Ok(a), Ok(b), Ok(a_used), Ok(b_used)) = (
        serde_json::to_value(old),
        serde_json::to_value(new),
        serde_json::to_value(old_used),
        serde_json::to_value(new_used),
    ) else {
        return vec!["(the parameters cannot be compared)".into()];
    };
    let mut out = Vec::new();
    walk("", &a, &b, &mut out);
    out.retain(|(name, _, _)| !ignore.contains(&name.as_str()));
    let more = out.len().saturating_sub(LISTED_DIFFERENCES);
    let mut listed: Vec<String> = out
        .into_iter()
        .take(LISTED_DIFFERENCES)
        .map(|(name, a, b)| {
            format!(
                "{} {} -> {}",
                hpc_runtime::env::short(&name),
                side(&name, &a, &a_used),
                side(&name, &b, &b_used)
            )
        })
        .collect();
    if more > 0 {
        listed.push(format!("and {more} more"));
    }
    listed
}

/// Writes `bytes` to `path` through a temporary name, so that a failure (a full
/// disk) leaves no partial file; the error names the file. The temporary file
/// (`.NAME.tmp-PID` beside it) is made new, never through a symbolic link planted
/// at its name, and the final name is never a device, a FIFO or a directory
/// ([`hpc_io::atomic::write`]).
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    let name = path.file_name().ok_or_else(|| {
        anyhow::anyhow!(
            "cannot write {}: it names no file",
            hpc_io::message::path(path)
        )
    })?;
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".tmp-{}", std::process::id()));
    hpc_io::atomic::write(path, &path.with_file_name(tmp), bytes)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", hpc_io::message::path(path)))
}

/// The names of the files a run writes into its output directory: the spike file
/// (and its `.partial` name), the summary, the report, and each of `figures` (file
/// stems, such as those of `hpc_spike_report::plot::Plot::ALL`) as PNG and SVG. Earlier
/// files of these names are removed when a run starts ([`own_output_dir`]), so that
/// none can be taken for the new run's.
pub fn output_names<'a>(figures: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut names: Vec<String> = [
        "spikes.spk",
        "spikes.spk.partial",
        "summary.json",
        "report.html",
    ]
    .map(String::from)
    .to_vec();
    for stem in figures {
        names.push(format!("{stem}.png"));
        names.push(format!("{stem}.svg"));
    }
    names
}

/// Records in the run's output directory `dir` the names of the figures it is
/// about to draw (the file stems `figures`, as PNG and SVG) and of its report, so
/// that they are the run's ([`output_names`] but the spike file and the summary).
pub fn record_figures<'a>(
    dir: &mut hpc_io::rundir::RunDir,
    figures: impl IntoIterator<Item = &'a str>,
) -> anyhow::Result<()> {
    for name in output_names(figures) {
        if name.ends_with(".png") || name.ends_with(".svg") || name == "report.html" {
            dir.record(&name)?;
        }
    }
    Ok(())
}

/// The summary's line on the spike file `spikes` of a run (`None`: the run writes
/// none, `--no-spikes`): where it was written (`file`, once complete), or, for a
/// run stopped at `end_ms` before its end, where its spikes so far are (the
/// `.partial` file), or that there is no spike file; `None` for a complete run
/// that wrote none.
///
/// ```
/// use std::path::Path;
/// use hpc_spiking::run::spike_file_line;
///
/// let spikes = Some(Path::new("out/spikes.spk"));
/// assert_eq!(
///     spike_file_line(spikes, true, 100.0, spikes).unwrap(),
///     "  spikes written to out/spikes.spk"
/// );
/// assert_eq!(
///     spike_file_line(None, false, 50.0, spikes).unwrap(),
///     "  stopped at 50.0 ms: spikes so far in out/spikes.spk.partial"
/// );
/// // A stopped run without a spike file names no .partial file.
/// assert_eq!(
///     spike_file_line(None, false, 50.0, None).unwrap(),
///     "  stopped at 50.0 ms (no spike file: --no-spikes)"
/// );
/// assert!(spike_file_line(None, true, 100.0, spikes).is_none());
/// assert!(spike_file_line(None, true, 100.0, None).is_none());
/// ```
pub fn spike_file_line(
    file: Option<&std::path::Path>,
    completed: bool,
    end_ms: f64,
    spikes: Option<&std::path::Path>,
) -> Option<String> {
    match (file, spikes) {
        (Some(f), _) => Some(format!("  spikes written to {}", hpc_io::message::path(f))),
        _ if completed => None,
        (None, Some(s)) => Some(format!(
            "  stopped at {end_ms:.1} ms: spikes so far in {}",
            hpc_io::message::path(&crate::spikes::partial_path(s))
        )),
        (None, None) => Some(format!(
            "  stopped at {end_ms:.1} ms (no spike file: --no-spikes)"
        )),
    }
}

/// Takes the output directory `out` for this run (a collective: every rank calls
/// it). Rank 0, which writes the shared files, creates the directory and locks it
/// against other runs ([`hpc_io::rundir::RunDir::lock`]; its `start`, once the
/// run's input is checked, removes an earlier run's files and writes `run.json`);
/// the other ranks learn whether it could, so that all ranks fail together (with
/// rank 0's message) when another run holds the directory. Rank 0 gets the
/// directory, the others `None`. `outputs` are the names of the files the run
/// writes ([`output_names`]).
pub fn own_output_dir(
    world: &hpc_rs::World,
    out: &std::path::Path,
    program: &str,
    details: serde_json::Value,
    outputs: Vec<String>,
) -> anyhow::Result<Option<hpc_io::rundir::RunDir>> {
    rank0_takes(
        world,
        || format!("the output directory {}", hpc_io::message::path(out)),
        || {
            // The timeline's directory (`HPC_TRACE`, made when the log started)
            // at the name of one of the run's files: named, not taken for a file
            // no earlier run wrote.
            if let Some(trace) = std::env::var_os(hpc_runtime::env::TRACE) {
                let trace = std::path::Path::new(&trace);
                if hpc_io::rundir::is_run_file(out, &outputs, trace) {
                    return Err(format!(
                        "{}={} is the name of one of the files this run writes into its \
                         output directory {}: choose another",
                        hpc_runtime::env::TRACE,
                        hpc_io::message::path(trace),
                        hpc_io::message::path(out)
                    ));
                }
            }
            // A checkpoint's step directory, or a folder in one: the run's files
            // were written among the checkpoint's (`--restart D/step-N --out
            // D/step-N`) and went with it when it was removed.
            if let Some(ck) = hpc_checkpoint::Checkpoint::holding(out) {
                return Err(format!(
                    "--out {} {} the checkpoint {}: the run's files would be mixed with the \
                     checkpoint's and removed with it; choose another --out",
                    hpc_io::message::path(out),
                    if ck == out { "is" } else { "lies in" },
                    hpc_io::message::path(ck)
                ));
            }
            let mut info = hpc_io::rundir::RunInfo::new(program);
            info.details = details;
            info.outputs = outputs;
            hpc_io::rundir::RunDir::lock(out, info).map_err(|e| e.to_string())
        },
    )
}

/// A path as a setting [`same_on_every_rank`] compares: its text when it is
/// UTF-8, else the array of its bytes (never equal to a text). Compared as
/// lossy text, `--checkpoint-dir c$'\xff'` on rank 0 and `c$'\xfe'` on rank
/// 1 were both `c\u{fffd}`, taken as the same directory: each rank wrote its
/// file into its own, and the run failed at its first checkpoint ("listed in
/// the manifest but missing"), after the simulation up to it.
pub fn path_setting(path: &Path) -> serde_json::Value {
    match path.to_str() {
        Some(text) => serde_json::Value::from(text),
        None => serde_json::Value::from(path.as_os_str().as_encoded_bytes().to_vec()),
    }
}

/// Checks that every rank of the run was given the same `settings` (a
/// collective over `world`, before anything is built): the model's parameters,
/// the output directory and every option that must agree
/// ([`crate::args::RunArgs::shared`]). Each setting is named by its dotted path
/// in `settings` (`params.seed`) with its value as JSON (`(not given)` for
/// `null`), and compared with rank 0's by
/// [`hpc_rs::World::same_on_every_rank`]: where one differs every rank fails
/// with the same message, naming the lowest such rank and what differs (rank
/// 0 -> it). A rank given another seed built its neurons' inputs from it
/// without a word (a network no single seed gives, `run.json` naming rank
/// 0's); another engine failed in its first exchange with words about the
/// transport; another checkpoint directory only at the first checkpoint.
pub fn same_on_every_rank(
    world: &hpc_rs::World,
    settings: &serde_json::Value,
) -> anyhow::Result<()> {
    fn leaves(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, String)>) {
        match v {
            serde_json::Value::Object(m) if !m.is_empty() => {
                for (k, v) in m {
                    let name = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    leaves(&name, v, out);
                }
            }
            serde_json::Value::Null => out.push((prefix.to_string(), "(not given)".into())),
            _ => out.push((prefix.to_string(), v.to_string())),
        }
    }
    let mut named = Vec::new();
    leaves("", settings, &mut named);
    let named: Vec<(&str, String)> = named.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
    world.same_on_every_rank("settings", &named)?;
    Ok(())
}

/// Rank 0 runs `take` and tells every rank whether it succeeded (a collective
/// over `world`): rank 0 gets what it took, the others `None`; where it failed,
/// every rank fails with it, rank 0 with `take`'s message and the others saying
/// that rank 0 could not take `what`.
pub(crate) fn rank0_takes<T>(
    world: &hpc_rs::World,
    what: impl FnOnce() -> String,
    take: impl FnOnce() -> std::result::Result<T, String>,
) -> anyhow::Result<Option<T>> {
    let mut mine = None;
    let outcome: std::result::Result<(), String> = if world.rank() == 0 {
        take().map(|t| mine = Some(t))
    } else {
        Ok(())
    };
    let shared: std::result::Result<(), String> =
        serde_json::from_slice(&world.broadcast(0, &serde_json::to_vec(&outcome)?)?)?;
    match shared {
        Ok(()) => Ok(mine),
        Err(e) if world.rank() == 0 => Err(anyhow::anyhow!(e)),
        Err(_) => Err(anyhow::anyhow!("rank 0 could not take {}", what())),
    }
}

/// Ends the run in `dir`: complete, or incomplete when it stopped at `end_step`
/// (of `dt` ms) before the end (`--stop-at`).
pub fn finish_output_dir(
    dir: hpc_io::rundir::RunDir,
    completed: bool,
    end_step: u64,
    dt: f64,
) -> anyhow::Result<()> {
    let status = if completed {
        hpc_io::rundir::Status::Complete
    } else {
        hpc_io::rundir::Status::Incomplete {
            reason: "stopped early (--stop-at)".into(),
            stopped_at: Some(format!("{:.1} ms", end_step as f64 * dt)),
        }
    };
    dir.finish(status)?;
    Ok(())
}

/// The end of a run on every rank (a collective): every rank's `report` goes to
/// rank 0 ([`gather_reports`]), where `summarise` writes the run's summary into its
/// output directory `out_dir` from all of them, in rank order; then rank 0 ends the
/// run in that directory, complete or stopped at `end_step` (of `dt` ms)
/// ([`finish_output_dir`]). `out_dir` is what [`own_output_dir`] gave this rank.
pub fn hand_off(
    world: &hpc_rs::World,
    report: &impl serde::Serialize,
    out_dir: Option<hpc_io::rundir::RunDir>,
    (completed, end_step, dt): (bool, u64, f64),
    summarise: impl FnOnce(&mut hpc_io::rundir::RunDir, &[Gathered]) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut out_dir = out_dir;
    if let Some(all) = gather_reports(world, report)? {
        let dir = out_dir.as_mut().context("rank 0 has no output directory")?;
        summarise(dir, &all)?;
        hpc_io::write::flush_stdout()?;
    }
    // A signal since the summary began ends the run here, marked incomplete,
    // not marked complete before the watchdog's next look.
    crate::stop::take_outside();
    if let Some(d) = out_dir {
        finish_output_dir(d, completed, end_step, dt)?;
    }
    Ok(())
}

/// The log filter of a simulation binary: the project's log variable (`HPC_LOG`,
/// read as [`hpc_rs::log_filter`] reads it), then `RUST_LOG`, then warnings only;
/// with the warning to log once the subscriber is installed when `HPC_LOG` is not
/// a filter (it was once dropped without a word, leaving only warnings logged).
pub fn log_filter() -> (tracing_subscriber::EnvFilter, Option<String>) {
    match hpc_runtime::env::var(hpc_runtime::env::LOG) {
        Ok(None) => (
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            None,
        ),
        _ => hpc_rs::log_filter(),
    }
}

/// The start of a simulation binary's `main`: when the `proxy` exchange engine
/// re-executed this program as a node's progress process, serves it and returns
/// `true` (the program has nothing else to do); a proxy that fails ends the
/// process with `program`'s last words and status 1.
pub fn serve_proxy(program: &str) -> bool {
    match hpc_comm::proxy::serve_env() {
        Ok(served) => served,
        Err(e) => {
            hpc_io::message::last_words(program, &format!("proxy failed: {}", e.chain()));
            std::process::exit(1);
        }
    }
}

/// Installs a simulation binary's log subscriber: to stderr (coloured on a
/// terminal), filtered by [`log_filter`], with its warning when `HPC_LOG` is not a
/// filter; and, when `HPC_TRACE` is set (`hpc run --trace FILE` sets it), the
/// timeline's layer beside it, as `hpc_rs::init` installs it for a program
/// without a subscriber of its own. (Without it the setting was ignored with a
/// warning, and `hpc run --trace` merged no rank of the binary.) A bad
/// `HPC_TRACE` ends `program` with status 1, naming it.
pub fn init_log(program: &str) {
    use std::io::IsTerminal as _;
    use tracing_subscriber::prelude::*;
    let (filter, problem) = log_filter();
    let timeline = match hpc_rs::trace::layer_from_env() {
        Ok(t) => t,
        Err(e) => {
            hpc_io::message::last_words(program, &e.to_string());
            std::process::exit(1);
        }
    };
    let log = tracing_subscriber::fmt::layer()
        .with_writer(hpc_rs::trace::LogWriter::stderr())
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(filter);
    tracing_subscriber::registry()
        .with(log)
        .with(timeline.map(|t| t.with_filter(hpc_rs::trace::default_filter())))
        .init();
    if let Some(p) = problem {
        tracing::warn!("{p}");
    }
}

/// The end of a simulation binary's `main`: a failed run's error chain as
/// `program`'s last words (one write, so that a rank stopped meanwhile leaves no
/// line cut short; a failed write changes nothing) and exit status 1; or, for a
/// run a signal stopped ([`crate::stop`]), the end by that signal
/// ([`crate::stop::end_by`]: 143 for SIGTERM, 130 for SIGINT in a shell).
pub fn exit_on_error(program: &str, result: anyhow::Result<()>) {
    if let Err(e) = result {
        hpc_io::message::last_words(program, &hpc_io::message::chain(e.as_ref()));
        if let Some(signal) = crate::stop::received() {
            crate::stop::end_by(signal);
        }
        std::process::exit(1);
    }
}

/// The arguments of `program` (`A`), or the end of the process with the
/// parser's usage text (`--help`, `--version`, a usage error) through
/// [`hpc_io::message::usage_exit`]: its write checked and each line cut, where
/// clap's own exit quoted a value of any length whole and ignored a failed
/// write (`--help > /dev/full` ended 0).
pub fn parse_args<A: clap::Parser>(program: &str) -> A {
    A::try_parse().unwrap_or_else(|e| {
        hpc_io::message::usage_exit(program, &usage_text(&e), e.use_stderr(), e.exit_code())
    })
}

/// What the parser has to say, as plain text (no colours), a terminal's
/// escape, a carriage return or a right-to-left override in a value it
/// quotes ("invalid value '…'") escaped: the terminal obeyed them.
fn usage_text(e: &clap::Error) -> String {
    hpc_io::message::escape_controls(&e.render().to_string()).into_owned()
}

/// The whole `main` of a simulation binary named `program`: serves as the
/// node's progress process when the `proxy` engine re-executes it
/// ([`serve_proxy`]), else parses its arguments `A`, installs the log
/// ([`init_log`]) and runs `run`, ending with one line and status 1 on an error
/// ([`exit_on_error`]).
pub fn run_program<A: clap::Parser>(program: &str, run: impl FnOnce(A) -> anyhow::Result<()>) {
    if serve_proxy(program) {
        return;
    }
    let args = parse_args::<A>(program);
    init_log(program);
    exit_on_error(program, run(args));
}

/// Draws a run's progress bar on stderr (over the previous one): `step` of `steps`
/// steps of `dt` ms, and the real-time factor `rtf` as the caller words it.
pub fn draw_progress(step: u64, steps: u64, dt: f64, rtf: &str) {
    let frac = step as f64 / steps.max(1) as f64;
    let w = 30usize;
    let fill = ((frac * w as f64) as usize).min(w);
    eprint!(
        "\r[{}{}] {:>9.1} / {:.1} ms  real-time factor {rtf}  ",
        "#".repeat(fill),
        " ".repeat(w - fill),
        step as f64 * dt,
        steps as f64 * dt,
    );
    let _ = std::io::Write::flush(&mut std::io::stderr());
}

/// A rank's report as rank 0 gathers it for the summary.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Gathered {
    /// The rank's report (its `RankReport` as JSON).
    pub report: serde_json::Value,
    /// The rank's peak resident memory, bytes (0 where unknown).
    pub peak_rss: u64,
}

/// Gathers every rank's `report` with its peak resident memory (a collective: every
/// rank calls it); rank 0 gets them in rank order, the other ranks `None`.
pub fn gather_reports(
    world: &hpc_rs::World,
    report: &impl serde::Serialize,
) -> anyhow::Result<Option<Vec<Gathered>>> {
    let mine = Gathered {
        report: serde_json::to_value(report)?,
        peak_rss: peak_rss_bytes().unwrap_or(0),
    };
    let all = world.allgather(&serde_json::to_vec(&mine)?)?;
    if world.rank() != 0 {
        return Ok(None);
    }
    let all = all
        .iter()
        .map(|b| serde_json::from_slice(b))
        .collect::<Result<_, _>>()?;
    Ok(Some(all))
}

/// Every rank's report, as the binary's report type `R`, from what rank 0
/// gathered (`all`, from [`gather_reports`] through [`hand_off`]), in rank order.
pub fn reports<R: serde::de::DeserializeOwned>(all: &[Gathered]) -> anyhow::Result<Vec<R>> {
    Ok(all
        .iter()
        .map(|g| serde_json::from_value(g.report.clone()))
        .collect::<Result<_, _>>()?)
}

/// The summary's two lines on a run's memory: the peak resident memory of all
/// ranks (`all`, from [`gather_reports`]) and of each, and the bytes per synapse of
/// the network's `synapses`, in its connectivity (`connectivity_bytes` of all
/// ranks) and in the peak memory.
///
/// ```
/// use hpc_spiking::run::{memory_lines, Gathered};
///
/// let rank = |mib: u64| Gathered { report: serde_json::Value::Null, peak_rss: mib << 20 };
/// let [peak, per_synapse] = memory_lines(&[rank(3), rank(5)], 4 << 20, 1 << 20);
/// assert_eq!(peak, "  peak memory       8.0 MiB (VmHWM per rank: 3.0 MiB, 5.0 MiB)");
/// assert_eq!(per_synapse, "  bytes/synapse     4.000 (connectivity), 8.0 (peak memory of all ranks)");
/// ```
pub fn memory_lines(all: &[Gathered], connectivity_bytes: u64, synapses: u64) -> [String; 2] {
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1 << 20) as f64);
    let peak: u64 = all.iter().map(|g| g.peak_rss).sum();
    let per_rank: Vec<String> = all.iter().map(|g| mib(g.peak_rss)).collect();
    [
        format!(
            "  peak memory       {} (VmHWM per rank: {})",
            mib(peak),
            per_rank.join(", ")
        ),
        format!(
            "  bytes/synapse     {:.3} (connectivity), {:.1} (peak memory of all ranks)",
            connectivity_bytes as f64 / synapses.max(1) as f64,
            peak as f64 / synapses.max(1) as f64
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value with a carriage return and a right-to-left override, refused
    /// by the parser, is shown escaped in the usage text (clap's plain text
    /// drops escape sequences and most control characters, but wrote these
    /// as given: the carriage return hid the start of the line, the override
    /// reordered it).
    #[test]
    fn a_refused_value_is_shown_escaped_in_the_usage_text() {
        #[derive(clap::Parser, Debug)]
        struct A {
            #[arg(long)]
            n: u32,
        }
        let value = "12\r\u{8}\u{202e}7\u{1b}[2J";
        let e = <A as clap::Parser>::try_parse_from(["x", "--n", value]).unwrap_err();
        let text = usage_text(&e);
        assert!(
            !text.contains(['\u{1b}', '\r', '\u{8}', '\u{202e}']),
            "{text:?}"
        );
        // clap drops the escape sequence and the backspace itself; the
        // carriage return and the override it wrote as given.
        assert!(text.contains("'12\\r\\u{202e}7'"), "{text}");
    }

    #[test]
    fn long_digit_runs_are_written_short() {
        let long = format!("floating point `1{}.0`, expected", "0".repeat(300));
        assert_eq!(short_numbers(&long), "floating point `1e300`, expected");
        for kept in ["line 3, column 8", "18446744073709551615", "", "x1.5y"] {
            assert_eq!(short_numbers(kept), kept);
        }
    }

    /// A number written out with its fraction (`format!("{}", 1e-70)`, as a
    /// parser's message may quote it) was cut at its `.`: "0." and then 70
    /// digits read as the number 1, "0.1" (part E of pass 19).
    #[test]
    fn a_long_fraction_is_shortened_whole_not_read_as_another_number() {
        for x in [1e-70, 1.5e-300, 123.25e-30, 5e-324] {
            let long = format!("got {x} ms.");
            assert_eq!(
                short_numbers(&long),
                format!("got {} ms.", num(x)),
                "{long}"
            );
        }
        assert_eq!(
            short_numbers("1.2.3 and 0.5 and 7."),
            "1.2.3 and 0.5 and 7."
        );
    }

    /// `whole_steps` took any `dt`: -1 ms in steps of -0.1 ms was 10 steps,
    /// and a `dt` of 1e-300 was written in 300 digits, inf as "give inf ms"
    /// (part E of pass 19). A `dt` that is not a finite number above 0 is
    /// refused as `steps_of` refuses it, and every number is written short.
    #[test]
    fn whole_steps_refuse_a_step_that_is_not_a_positive_number() {
        for dt in [-0.1, -0.0, 0.0, f64::INFINITY, f64::NAN] {
            let e = whole_steps(-1.0, dt, "--x").unwrap_err().to_string();
            assert!(
                e.contains("the time step dt must be a finite number"),
                "{dt}: {e}"
            );
        }
        let e = whole_steps(1.0, 1e-300, "--x").unwrap_err().to_string();
        assert!(e.contains("dt = 1e-300 ms") && e.len() < 120, "{e}");
        let e = whole_steps(0.15, 1e-1, "--x").unwrap_err().to_string();
        assert!(e.contains("give 0.1 ms"), "{e}");
    }

    #[test]
    fn whole_steps_refuse_what_is_not_a_multiple_of_the_step() {
        assert_eq!(whole_steps(10.0, 0.1, "--x").unwrap(), 100);
        assert_eq!(whole_steps(0.3, 0.1, "--x").unwrap(), 3);
        for bad in [0.01, 0.15, 0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = whole_steps(bad, 0.1, "--x").unwrap_err().to_string();
            assert!(e.contains("--x") && e.contains("dt = 0.1 ms"), "{e}");
        }
        // Beyond 2^53 steps a count would saturate (1e300 ms: u64::MAX steps, whose
        // sum with another overflowed): refused, naming the flag and the limit.
        for huge in [1e300, f64::MAX, 2f64.powi(60)] {
            let e = whole_steps(huge, 0.1, "--x").unwrap_err().to_string();
            assert!(e.contains("--x") && e.contains("2^53"), "{e}");
        }
        assert_eq!(
            whole_steps(0.1 * 2f64.powi(50), 0.1, "--x").unwrap(),
            1 << 50
        );
    }

    /// `steps_of`, `whole_steps`'s neighbour: a step of 0 or a count beyond
    /// 2^53 gave `u64::MAX` steps, and a step of infinity one step.
    #[test]
    fn steps_of_refuses_a_step_or_a_count_no_run_has() {
        assert_eq!(steps_of(0.3, 0.1, "--x").unwrap(), 3);
        assert_eq!(steps_of(0.01, 0.1, "--x").unwrap(), 1);
        for dt in [0.0, -0.1, f64::INFINITY, f64::NAN] {
            let e = steps_of(1.0, dt, "--x").unwrap_err().to_string();
            assert!(e.contains("time step dt"), "{dt}: {e}");
        }
        for (ms, dt) in [(1e300, 1e-300), (1.0, 1e-300), (f64::MAX, 0.1)] {
            let e = steps_of(ms, dt, "--x").unwrap_err().to_string();
            assert!(e.contains("--x") && e.contains("2^53"), "{ms} {dt}: {e}");
        }
    }

    /// A checkpoint's parameters that name a key of 100,000 characters, or
    /// differ in 100,000 keys, were listed whole: the refusal of a restart
    /// quoted every one.
    #[test]
    fn the_differences_are_few_and_their_names_cut() {
        let long = "k".repeat(100_000);
        let a = serde_json::json!({ long.clone(): 1, "t_sim": 1 });
        let d = params_diff(&a, &serde_json::json!({}), &["t_sim"]);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            d[0].len() < 200 && d[0].ends_with(" 1 -> (not given)"),
            "{}",
            d[0]
        );
        let many: serde_json::Map<String, serde_json::Value> = (0..100_000)
            .map(|i| (format!("p{i:06}"), serde_json::json!(i)))
            .collect();
        let d = params_diff(
            &serde_json::Value::Object(many),
            &serde_json::json!({}),
            &[],
        );
        assert_eq!(d.len(), LISTED_DIFFERENCES + 1, "{:?}", &d[..3]);
        assert_eq!(d[0], "p000000 0 -> (not given)");
        assert_eq!(d[LISTED_DIFFERENCES], "and 99990 more");
    }

    /// An in-degree that one run took from `epsilon` (not given) and the other
    /// gave was written `ce null -> 50`, as if the checkpoint's run had none:
    /// it is `(not given)`, with what that run used when the caller knows it.
    #[test]
    fn a_parameter_not_given_says_what_its_run_used() {
        let a = serde_json::json!({"epsilon": 0.1, "ci": null, "t_sim": 1});
        let b = serde_json::json!({"epsilon": 0.1, "ce": 50, "ci": 20, "t_sim": 2});
        assert_eq!(
            params_diff(&a, &b, &["t_sim"]),
            ["ce (not given) -> 50", "ci (not given) -> 20"]
        );
        let used = serde_json::json!({"ce": "epsilon * NE = 1000", "ci": 250});
        assert_eq!(
            params_diff_used(&a, &b, &["t_sim"], &used, &serde_json::json!({})),
            [
                "ce (not given: epsilon * NE = 1000) -> 50",
                "ci (not given: 250) -> 20"
            ]
        );
        assert_eq!(
            params_diff_used(&b, &a, &["t_sim"], &serde_json::json!({}), &used),
            [
                "ce 50 -> (not given: epsilon * NE = 1000)",
                "ci 20 -> (not given: 250)"
            ]
        );
    }

    #[test]
    fn the_differing_parameters_are_named_with_both_values() {
        let a = serde_json::json!({"g": 5.0, "t_sim": 10.0, "pop": {"n": 1, "m": 2}});
        let b = serde_json::json!({"g": 6.0, "t_sim": 20.0, "pop": {"n": 1, "m": 3}});
        assert_eq!(
            params_diff(&a, &b, &["t_sim"]),
            ["g 5.0 -> 6.0", "pop.m 2 -> 3"]
        );
        assert!(params_diff(&a, &a, &[]).is_empty());
        // Pass 15: a table one side has and the other not was written whole (the
        // microcircuit's populations: a line of 2.3 KB).
        let big: serde_json::Map<String, serde_json::Value> = (0..40)
            .map(|i| (format!("population{i}"), serde_json::json!({"n_full": i})))
            .collect();
        let c = serde_json::json!({"g": 5.0, "populations": big});
        assert_eq!(
            params_diff(&a, &c, &["t_sim"]),
            [
                "pop {\"m\":2,\"n\":1} -> (not given)",
                "populations (not given) -> {40 fields}"
            ]
        );
    }
}
