//! The command-line options every spiking network binary shares ([`RunArgs`], for
//! a binary's `clap::Parser` to take in with `#[command(flatten)]`), and their
//! checks and conversion into the [`RunOptions`] of a run.
//!
//! ```
//! use clap::Parser;
//! use hpc_spiking::args::RunArgs;
//!
//! #[derive(Parser)]
//! struct Args {
//!     /// The model's own option.
//!     #[arg(long, default_value_t = 1.0)]
//!     scale: f64,
//!     #[command(flatten)]
//!     run: RunArgs,
//! }
//!
//! let a = Args::parse_from(["net", "--threads", "2", "--checkpoint-every", "10", "--stop-at", "20"]);
//! assert_eq!(a.run.threads(), 2);
//! // 100 ms of 0.1 ms steps: a checkpoint every 100 steps, a stop at step 200.
//! let t = a.run.times(0.1, 1000).unwrap();
//! assert_eq!((t.checkpoint_every, t.stop_at), (Some(100), Some(200)));
//! // A stop after the end would change nothing and is refused, naming the flag.
//! let e = a.run.times(0.1, 150).unwrap_err().to_string();
//! assert!(e.contains("--stop-at"), "{e}");
//! // --checkpoint-keep alone would be ignored: a usage error.
//! assert!(Args::try_parse_from(["net", "--checkpoint-keep", "2"]).is_err());
//! ```

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::exchange::Engine;
use crate::run::{check_threads, max_threads, whole_steps_within, RunOptions};

/// `HPC_THREADS`, the default of `--threads` (`hpc run --threads` sets it):
/// `None` when unset; an error naming the variable when it is not UTF-8 or not a
/// number of threads from 1 to [`max_threads`] (it decides how many threads the
/// run starts, so a value that is not one is not taken as 1).
fn env_threads() -> Result<Option<usize>> {
    let name = hpc_runtime::env::THREADS;
    let Some(v) = hpc_runtime::env::var(name).map_err(anyhow::Error::msg)? else {
        return Ok(None);
    };
    let max = max_threads();
    match v.trim().parse::<usize>() {
        Ok(t) if (1..=max).contains(&t) => Ok(Some(t)),
        _ => {
            // A 100,000-character value is not echoed whole.
            anyhow::bail!(
                "{name}={} (the default of --threads, which `hpc run --threads` \
                 sets) is not a number of threads from 1 to {max} (64 per CPU this process \
                 may use, at most 4096); unset it or give --threads",
                hpc_runtime::env::shown(&v)
            )
        }
    }
}

/// The options every spiking network binary shares: threads and their pinning, the
/// exchange engine, the spike file, checkpoints, a restart, an early stop and the
/// progress line. The output directory (whose default names the binary) stays in
/// the binary's own options.
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// Threads per rank (pinned to the rank's cores): at least 1, at most 64 per CPU
    /// this process may use (4096 at most). Default: HPC_THREADS (which `hpc run
    /// --threads` sets), else 1. [`RunArgs::threads`] gives the number.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Do not pin threads (use a plain rayon pool).
    #[arg(long)]
    pub no_pin: bool,
    /// Engine of the spike exchange between ranks (one rank exchanges in memory).
    #[arg(long, value_enum, default_value_t = Engine::World)]
    pub engine: Engine,
    /// Do not write the spike file.
    #[arg(long)]
    pub no_spikes: bool,
    /// Write a checkpoint every this many ms of simulated time (a warm-up included).
    #[arg(long, value_name = "MS")]
    pub checkpoint_every: Option<f64>,
    /// Keep the newest N of this run's checkpoints, removing older ones of this run
    /// once a newer one is complete (0: keep all).
    /// Only with `--checkpoint-every` (alone it would be ignored).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 3,
        requires = "checkpoint_every"
    )]
    pub checkpoint_keep: usize,
    /// Checkpoint directory (default OUT/checkpoints).
    /// Only with `--checkpoint-every` (alone it would be ignored).
    #[arg(long, value_name = "DIR", requires = "checkpoint_every")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Resume from a checkpoint (a step-* directory, or the checkpoint directory for
    /// the newest).
    #[arg(long, value_name = "DIR")]
    pub restart: Option<PathBuf>,
    /// Stop at this simulated time (ms, a warm-up included) as if interrupted
    /// (leaves spikes.spk.partial).
    #[arg(long, value_name = "MS")]
    pub stop_at: Option<f64>,
    /// No progress line.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `--checkpoint-every` and `--stop-at` in steps ([`RunArgs::times`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunTimes {
    /// Steps between checkpoints.
    pub checkpoint_every: Option<u64>,
    /// The step to stop at.
    pub stop_at: Option<u64>,
}

impl RunArgs {
    /// The threads per rank: `--threads`, else `HPC_THREADS`, else 1 (an
    /// `HPC_THREADS` that is not a number of threads gives 1 here;
    /// [`RunArgs::check`] refuses it, naming the variable).
    pub fn threads(&self) -> usize {
        self.threads
            .unwrap_or_else(|| env_threads().ok().flatten().unwrap_or(1))
    }

    /// The options every rank of a run must be given alike (the engine, the
    /// spike file, checkpoints, a restart, an early stop), for
    /// [`crate::run::same_on_every_rank`]; the threads, their pinning and the
    /// progress line may differ between ranks.
    pub fn shared(&self) -> serde_json::Value {
        serde_json::json!({
            "engine": format!("{:?}", self.engine),
            "no_spikes": self.no_spikes,
            "checkpoint_every": self.checkpoint_every,
            "checkpoint_keep": self.checkpoint_keep,
            "checkpoint_dir": self.checkpoint_dir.as_deref().map(crate::run::path_setting),
            "restart": self.restart.as_deref().map(crate::run::path_setting),
            "stop_at": self.stop_at,
        })
    }

    /// Checks what needs no model, before anything starts: `--threads`
    /// ([`check_threads`]) or, without it, `HPC_THREADS` (refused naming the
    /// variable, not the flag the user did not give), and that `--engine` is
    /// built into this binary.
    pub fn check(&self) -> Result<()> {
        match self.threads {
            Some(t) => check_threads(t)?,
            None => {
                env_threads()?;
            }
        }
        if !self.engine.available() {
            return Err(self.engine.unavailable_error());
        }
        Ok(())
    }

    /// `--checkpoint-every` and `--stop-at` in steps of `dt` ms, each a whole
    /// number of steps inside the run's `total` steps ([`whole_steps_within`]; the
    /// error names the flag).
    pub fn times(&self, dt: f64, total: u64) -> Result<RunTimes> {
        let steps = |ms: Option<f64>, what| {
            ms.map(|ms| whole_steps_within(ms, dt, total, what))
                .transpose()
        };
        Ok(RunTimes {
            checkpoint_every: steps(self.checkpoint_every, "--checkpoint-every")?,
            stop_at: steps(self.stop_at, "--stop-at")?,
        })
    }

    /// The options of a run writing into the output directory `out` (the spike
    /// file `out/spikes.spk` unless `--no-spikes`, the checkpoints in
    /// `--checkpoint-dir` or `out/checkpoints`), with the exchange overlapped with
    /// the update when `overlap`. A collective with `--restart`: rank 0 chooses the
    /// checkpoint with `find` ([`crate::checkpoint::choose`]) and every rank
    /// resumes from it.
    pub fn options(
        &self,
        world: &hpc_rs::World,
        out: &Path,
        times: RunTimes,
        overlap: bool,
        find: impl FnOnce(&Path) -> Result<PathBuf>,
    ) -> Result<RunOptions> {
        let restart = match &self.restart {
            Some(dir) => Some(crate::checkpoint::choose(world, dir, find)?),
            None => None,
        };
        let checkpoint_dir = times.checkpoint_every.map(|_| {
            self.checkpoint_dir
                .clone()
                .unwrap_or_else(|| out.join("checkpoints"))
        });
        Ok(RunOptions {
            overlap,
            spikes: self.spike_path(out),
            checkpoint_every: times.checkpoint_every,
            checkpoint_dir,
            checkpoint_keep: (self.checkpoint_keep > 0).then_some(self.checkpoint_keep),
            restart,
            stop_at: times.stop_at,
            stop_on_signal: true,
        })
    }

    /// The spike file of a run writing into `out`: `out/spikes.spk`, or none
    /// with `--no-spikes`.
    pub fn spike_path(&self, out: &Path) -> Option<PathBuf> {
        (!self.no_spikes).then(|| out.join("spikes.spk"))
    }

    /// The summary's line on the spike file of a run writing into `out`
    /// ([`crate::run::spike_file_line`] of [`RunArgs::spike_path`]): `file`
    /// once complete, else, for a run stopped at `end_ms`, its `.partial` file
    /// or that it writes none.
    pub fn spike_file_line(
        &self,
        out: &Path,
        file: Option<&Path>,
        completed: bool,
        end_ms: f64,
    ) -> Option<String> {
        let spikes = self.spike_path(out);
        crate::run::spike_file_line(file, completed, end_ms, spikes.as_deref())
    }

    /// Whether rank `rank` draws the progress line: rank 0, without `--quiet`,
    /// when stderr is a terminal.
    pub fn shows_progress(&self, rank: usize) -> bool {
        use std::io::IsTerminal as _;
        rank == 0 && !self.quiet && std::io::stderr().is_terminal()
    }
}

impl RunOptions {
    /// Takes the checkpoint directory for the run when it writes checkpoints
    /// ([`crate::checkpoint::claim_dir`], a collective): rank 0 gets the lock to
    /// hold until the run ends, so that no other run writes into it, and a
    /// directory holding another model's checkpoints (other `params`) is refused
    /// before anything is written. `out` is the run's output directory (rank 0's,
    /// from [`crate::run::own_output_dir`]; `None` on the other ranks): a
    /// checkpoint directory at the name of one of its files is refused.
    pub fn claim_checkpoint_dir(
        &self,
        world: &hpc_rs::World,
        params: &impl serde::Serialize,
        out: Option<&hpc_io::rundir::RunDir>,
    ) -> Result<Option<crate::checkpoint::DirLock>> {
        match &self.checkpoint_dir {
            Some(d) => crate::checkpoint::claim_dir(world, d, params, out),
            None => Ok(None),
        }
    }

    /// [`RunOptions::claim_checkpoint_dir`] where `differences` compares a
    /// checkpoint's parameters with this run's
    /// ([`crate::checkpoint::claim_dir_with`]).
    pub fn claim_checkpoint_dir_with(
        &self,
        world: &hpc_rs::World,
        differences: impl Fn(&serde_json::Value) -> Vec<String>,
        out: Option<&hpc_io::rundir::RunDir>,
    ) -> Result<Option<crate::checkpoint::DirLock>> {
        match &self.checkpoint_dir {
            Some(d) => crate::checkpoint::claim_dir_with(world, d, differences, out),
            None => Ok(None),
        }
    }

    /// The checkpoints the run writes ([`crate::checkpoint::RunCheckpoints`] of
    /// the model parameters `params` in `checkpoint_dir`, keeping
    /// `checkpoint_keep`); `None` when it writes none.
    pub fn checkpoints<'a, P: serde::Serialize>(
        &self,
        params: &'a P,
    ) -> Option<crate::checkpoint::RunCheckpoints<'a, P>> {
        let dir = self.checkpoint_dir.as_deref()?;
        Some(crate::checkpoint::RunCheckpoints::new(
            dir,
            params,
            self.checkpoint_keep,
        ))
    }

    /// Checks that this run can continue the checkpoint `r` it resumes from (steps
    /// of `dt` ms), before the network is built and before the output directory is
    /// started (whose earlier files would otherwise be removed for a run that then
    /// fails): a `--stop-at` before the checkpoint's time, and a run that writes a
    /// spike file resuming from a checkpoint written without one (`--no-spikes`),
    /// are refused naming the flag.
    pub fn check_restart<P>(
        &self,
        r: &crate::checkpoint::Restart<crate::checkpoint::RunMeta<P>>,
        dt: f64,
    ) -> Result<()> {
        if let Some(stop) = self.stop_at.filter(|&s| s < r.step()) {
            anyhow::bail!(
                "--stop-at {} ms is before the checkpoint {} that --restart resumes at \
                 ({} ms, step {}): give --stop-at {} or later",
                crate::run::num(stop as f64 * dt),
                hpc_io::message::path(r.dir()),
                crate::run::num(r.step() as f64 * dt),
                r.step(),
                crate::run::num(r.step() as f64 * dt)
            );
        }
        if self.spikes.is_some() && r.meta.spikes.is_none() {
            anyhow::bail!(
                "checkpoint {} has no spike file to continue (its run had --no-spikes): \
                 give --no-spikes to continue it",
                hpc_io::message::path(r.dir())
            );
        }
        Ok(())
    }

    /// Starts the run in its output directory `dir` (rank 0's, from
    /// [`crate::run::own_output_dir`]; `None` on the other ranks): removes an
    /// earlier run's files and records the spike file's names when the run writes
    /// one.
    pub fn start_output_dir(&self, dir: Option<&mut hpc_io::rundir::RunDir>) -> Result<()> {
        if let Some(d) = dir {
            d.start()?;
            if self.spikes.is_some() {
                d.record("spikes.spk.partial")?;
                d.record("spikes.spk")?;
            }
        }
        Ok(())
    }
}

/// `FLAG PATH`, the path as messages show it ([`hpc_io::message::path`]): the
/// context of every error about the file a flag names, so that the message
/// names the flag as well as the file (`--config /tmp: /tmp is a directory,
/// not a regular file`; it said only the second half, and a value the file
/// set wrong was named with neither).
pub fn flag_file(flag: &str, path: &Path) -> String {
    format!("{flag} {}", hpc_io::message::path(path))
}

/// Where a model's parameters came from, for an error about their values
/// when `--config FILE` set them: `--config FILE`, with those of `flags`
/// given (each a flag and whether it was given), which override the file
/// (`--config FILE with --dt, --seed`). A value of the file that the model
/// refused was named without the file (`dt must be > 0`).
pub fn config_source(file: &Path, flags: &[(&str, bool)]) -> String {
    let given: Vec<&str> = flags
        .iter()
        .filter_map(|&(flag, given)| given.then_some(flag))
        .collect();
    let file = flag_file("--config", file);
    if given.is_empty() {
        file
    } else {
        format!("{file} with {}", given.join(", "))
    }
}

/// [`hpc_io::read::read_regular_to_string`] of the file a flag names (at most
/// `max_bytes`, never blocking on a FIFO), its error naming the flag and the
/// file ([`flag_file`]).
///
/// # Errors
///
/// Those of [`hpc_io::read::read_regular_to_string`], with the flag.
pub fn read_flag_file(flag: &str, path: &Path, max_bytes: u64) -> Result<String> {
    use anyhow::Context as _;
    hpc_io::read::read_regular_to_string(path, max_bytes).with_context(|| flag_file(flag, path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;
    use std::os::unix::ffi::OsStrExt as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    /// Ranks given `--restart` (or `--checkpoint-dir`) directories whose names
    /// differ in bytes that are not UTF-8 were compared as the same (each
    /// byte replaced by U+FFFD): the check that every rank is given the same
    /// options let them through. They differ; a UTF-8 path is compared as it is.
    #[test]
    fn paths_that_differ_in_bytes_not_utf8_are_not_the_same() {
        let shared = |dir: &[u8]| {
            let dir = std::ffi::OsStr::from_bytes(dir);
            let cli = Cli::parse_from([
                std::ffi::OsStr::new("net"),
                std::ffi::OsStr::new("--restart"),
                dir,
                std::ffi::OsStr::new("--checkpoint-every"),
                std::ffi::OsStr::new("1"),
                std::ffi::OsStr::new("--checkpoint-dir"),
                dir,
            ]);
            cli.run.shared()
        };
        let (a, b) = (shared(b"ck\xff"), shared(b"ck\xfe"));
        assert_ne!(a["restart"], b["restart"]);
        assert_ne!(a["checkpoint_dir"], b["checkpoint_dir"]);
        assert_eq!(shared(b"ck")["restart"], "ck");
    }
}
