//! The bookkeeping of a run's loop that every network shares: its intervals
//! between exchanges ([`Intervals`]: their length, the overlap of the exchange,
//! the end, the checkpoints), and the spikes of the exchange on their way
//! ([`Intake`]: received, waiting for delivery, and recorded by rank 0 into its
//! statistics and the spike file, continued from a restored checkpoint's).
//!
//! A network's loop keeps its own update and delivery (monomorphised and inlined
//! in its code); these types only hold what lies around them.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Result};

use crate::exchange::spike_records;
use crate::run::RunOptions;
use crate::spikes::SpikeWriter;

/// The intervals of a run of `total` steps: `interval` steps per exchange (the
/// shortest delay `D`, or `D/2` with the exchange overlapped with the next
/// interval's update), up to `end` (the run's end or its `--stop-at`), cut at every
/// checkpoint.
///
/// ```
/// use hpc_spiking::intake::Intervals;
/// use hpc_spiking::RunOptions;
///
/// let opts = RunOptions { overlap: true, stop_at: Some(35), ..Default::default() };
/// let iv = Intervals::new(&opts, 15, 100, 0).unwrap();
/// assert_eq!((iv.interval, iv.lag, iv.end), (7, 2, 35));
/// assert_eq!(iv.next(28, None), 7);
/// assert_eq!(iv.next(30, None), 5);
/// assert_eq!(iv.next(0, Some(3)), 3);
/// // A restart past the stop is refused.
/// assert!(Intervals::new(&opts, 15, 100, 40).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Intervals {
    /// Steps per exchange interval.
    pub interval: u32,
    /// 2 when the exchange of an interval overlaps the next interval's update
    /// (`interval = D/2`), 1 when it completes before it (`interval = D`).
    pub lag: u32,
    /// The step the run stops at.
    pub end: u64,
    /// Steps between checkpoints.
    pub checkpoint_every: Option<u64>,
}

impl Intervals {
    /// The intervals of a run of `total` steps with the options `opts`, resumed at
    /// `start` (0 for a new run), for a shortest delay of `min_delay` steps (at
    /// least 1). The overlap needs `min_delay >= 2` and is left out below that.
    pub fn new(opts: &RunOptions, min_delay: u32, total: u64, start: u64) -> Result<Intervals> {
        let min_delay = min_delay.max(1);
        let (interval, lag) = if opts.overlap && min_delay >= 2 {
            (min_delay / 2, 2)
        } else {
            (min_delay, 1)
        };
        let end = opts.stop_at.map_or(total, |s| s.min(total));
        if end < start {
            bail!("the run resumes at step {start} but is asked to stop at step {end}");
        }
        let checkpoint_every = opts.checkpoint_every.filter(|&c| c > 0);
        if checkpoint_every.is_some() && opts.checkpoint_dir.is_none() {
            bail!("checkpoints need a directory");
        }
        Ok(Intervals {
            interval,
            lag,
            end,
            checkpoint_every,
        })
    }

    /// Steps of the interval from `step` (before `end`): the interval, cut at the
    /// end, the next checkpoint, and `until` (a warm-up's end) when `step` is
    /// before it.
    pub fn next(&self, step: u64, until: Option<u64>) -> u32 {
        let mut m = (self.end - step).min(self.interval as u64);
        if let Some(c) = self.checkpoint_every {
            m = m.min(c - step % c);
        }
        if let Some(u) = until.filter(|&u| step < u) {
            m = m.min(u - step);
        }
        m as u32
    }

    /// Whether a checkpoint is due at `step`.
    pub fn at_checkpoint(&self, step: u64) -> bool {
        self.checkpoint_every.is_some_and(|c| step % c == 0)
    }
}

/// What rank 0 keeps of every spike beside the spike file: running statistics.
pub trait Record {
    /// Adds spikes `(tick, id)`, sorted by tick, then id; an error for a spike
    /// the record cannot hold (a neuron beyond its count, a tick out of order).
    fn add(&mut self, spikes: &[(u32, u32)]) -> Result<()>;

    /// Spikes added so far (the count a checkpoint's manifest holds).
    fn count(&self) -> u64;
}

impl Record for crate::spikes::Recorder {
    fn add(&mut self, spikes: &[(u32, u32)]) -> Result<()> {
        Ok(crate::spikes::Recorder::add(self, spikes)?)
    }

    fn count(&self) -> u64 {
        self.spikes
    }
}

/// The checkpoint a run resumes from, for [`Intake::rank0`]: its directory and the
/// spikes of its spike file (`None`: it has none).
#[derive(Clone, Debug)]
pub struct Restored<'a> {
    /// The checkpoint's directory (for the error when it has no spike file).
    pub dir: &'a Path,
    /// The spikes `(tick, id)` up to the checkpoint.
    pub spikes: Option<Vec<(u32, u32)>>,
}

impl<'a> Restored<'a> {
    /// The checkpoint `r` of a run as [`Intake::rank0`] continues it: its directory
    /// and the spikes of its spike file, checked for `n_neurons` neurons and the
    /// count of its manifest ([`crate::checkpoint::spikes_of`]).
    pub fn of<P>(
        r: &'a crate::checkpoint::Restart<crate::checkpoint::RunMeta<P>>,
        n_neurons: u32,
    ) -> Result<Restored<'a>> {
        Ok(Restored {
            dir: r.dir(),
            spikes: crate::checkpoint::spikes_of(&r.checkpoint, n_neurons, r.meta.spikes)?,
        })
    }
}

/// The spike file of a run, for [`Intake::rank0`]: where it goes and its header.
#[derive(Clone, Copy, Debug)]
pub struct SpikeFile<'a> {
    /// The file (written as `<path>.partial` until the run completes).
    pub path: &'a Path,
    /// Its header JSON (the model's).
    pub header: &'a str,
    /// Steps between flushes of the file (at least every exchange with 1; every
    /// checkpoint and the end of the run flush it too, [`Intake::flush`]).
    pub flush_every: u64,
}

/// The spikes of a rank's exchanges on their way: the exchange in flight lands in
/// `incoming`; [`Intake::receive`] makes them `gathered`, waiting for delivery
/// (while `has`), and rank 0 records them: in its statistics `R` and its spike
/// file.
pub struct Intake<R> {
    /// The spike codes (step in the interval, neuron) of the interval from `base`,
    /// received, not yet delivered while `has`.
    pub gathered: Vec<u32>,
    /// Where the exchange in flight lands.
    pub incoming: Vec<u32>,
    /// The first step of the interval `gathered` came from.
    pub base: u64,
    /// Whether `gathered` waits for delivery.
    pub has: bool,
    /// Spike codes received during the run.
    pub received: u64,
    /// Seconds recording and writing spikes (and checkpoints, which the caller
    /// adds).
    pub io_s: f64,
    records: Vec<(u32, u32)>,
    recorder: Option<R>,
    writer: Option<SpikeWriter>,
    flush_every: u64,
    last_flush: u64,
}

impl<R: Record> Intake<R> {
    /// The intake of a rank that records nothing (every rank but 0), from `step`.
    pub fn elsewhere(step: u64) -> Intake<R> {
        Intake {
            gathered: Vec::new(),
            incoming: Vec::new(),
            base: 0,
            has: false,
            received: 0,
            io_s: 0.0,
            records: Vec::new(),
            recorder: None,
            writer: None,
            flush_every: 1,
            last_flush: step,
        }
    }

    /// The intake of rank `rank` from `step`: [`Intake::rank0`] on rank 0, with the
    /// statistics `recorder` makes (or its error, such as
    /// [`Recorder::after`](crate::spikes::Recorder::after)'s for more neurons than
    /// memory) and the spike file `file`, continuing the
    /// checkpoint `restored` (of `n_neurons` neurons, [`Restored::of`]) when the
    /// run resumes from one; [`Intake::elsewhere`] on the other ranks.
    pub fn open<P>(
        (rank, step): (usize, u64),
        recorder: impl FnOnce() -> Result<R>,
        file: Option<SpikeFile<'_>>,
        restored: Option<&crate::checkpoint::Restart<crate::checkpoint::RunMeta<P>>>,
        n_neurons: u32,
    ) -> Result<Intake<R>> {
        if rank != 0 {
            return Ok(Intake::elsewhere(step));
        }
        let restored = restored.map(|r| Restored::of(r, n_neurons)).transpose()?;
        Intake::rank0(recorder()?, file, restored, step)
    }

    /// Rank 0's intake from `step`: `recorder` takes every spike, and so does the
    /// spike file `file` when the run writes one. After a restart from `restored`,
    /// both continue from the spikes of its spike file (the file is rewritten rather than copied:
    /// its header follows this run's parameters); a run that writes a spike file
    /// cannot continue a checkpoint without one.
    pub fn rank0(
        mut recorder: R,
        file: Option<SpikeFile<'_>>,
        restored: Option<Restored<'_>>,
        step: u64,
    ) -> Result<Intake<R>> {
        let prefix = match restored {
            Some(Restored {
                spikes: Some(prefix),
                ..
            }) => prefix,
            Some(Restored { dir, spikes: None }) if file.is_some() => {
                bail!(
                    "checkpoint {} has no spike file to continue",
                    hpc_io::message::path(dir)
                )
            }
            _ => Vec::new(),
        };
        recorder.add(&prefix)?;
        let mut intake = Intake::elsewhere(step);
        if let Some(f) = file {
            let mut w = SpikeWriter::with_header(f.path, f.header)?;
            w.append(&prefix)?;
            intake.writer = Some(w);
            intake.flush_every = f.flush_every.max(1);
        }
        intake.recorder = Some(recorder);
        Ok(intake)
    }

    /// The codes to deliver in the next update (none when they were taken),
    /// beside the buffer the next exchange lands in.
    pub fn codes_and_incoming(&mut self) -> (&[u32], &mut Vec<u32>) {
        let codes: &[u32] = if self.has { &self.gathered } else { &[] };
        (codes, &mut self.incoming)
    }

    /// After an exchange: every spike of the interval of `m` steps from `base`
    /// that this rank takes is in `incoming` (codes of `gid_bits` bits of neuron
    /// id); they become `gathered`, waiting for delivery, and rank 0 records them.
    pub fn receive(&mut self, base: u64, m: u32, gid_bits: u32) -> Result<()> {
        std::mem::swap(&mut self.gathered, &mut self.incoming);
        self.base = base;
        self.has = true;
        self.received += self.gathered.len() as u64;
        if let Some(rec) = self.recorder.as_mut() {
            let t0 = Instant::now();
            spike_records(&self.gathered, base, gid_bits, &mut self.records);
            self.records.sort_unstable();
            rec.add(&self.records)?;
            if let Some(w) = self.writer.as_mut() {
                w.write(&self.records)?;
                let reached = base + m as u64;
                if reached >= self.last_flush + self.flush_every {
                    w.flush()?;
                    self.last_flush = reached;
                }
            }
            self.io_s += t0.elapsed().as_secs_f64();
        }
        Ok(())
    }

    /// Writes what the spike file holds so far to it (before a checkpoint copies
    /// it, and at the end of the run).
    pub fn flush(&mut self) -> Result<()> {
        match self.writer.as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }

    /// Rank 0's spike file so far and the spikes it holds, for a checkpoint
    /// (after [`Intake::flush`]); `None` on the other ranks and without a file.
    pub fn checkpoint_spikes(&self) -> Option<(&Path, u64)> {
        match (&self.writer, &self.recorder) {
            (Some(w), Some(r)) => Some((w.partial(), r.count())),
            _ => None,
        }
    }

    /// Ends the intake: the spike file, renamed to its final name when the run
    /// `completed` (left as `.partial` otherwise), and rank 0's statistics.
    pub fn finish(self, completed: bool) -> Result<(Option<PathBuf>, Option<R>)> {
        let file = match self.writer {
            Some(w) if completed => Some(w.finish()?),
            Some(mut w) => {
                w.flush()?;
                None
            }
            None => None,
        };
        Ok((file, self.recorder))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spikes::{read_spikes, read_spikes_partial, Recorder};

    /// A fresh directory, removed when dropped (also when the test fails).
    fn dir(tag: &str) -> hpc_test_support::TmpDir {
        hpc_test_support::TmpDir::new("hpc-spiking-intake", tag)
    }

    const HEADER: &str = r#"{"dt_ms": 1.0, "t_sim_ms": 20.0, "n_neurons": 8,
        "populations": [{"name": "all", "first": 0, "count": 8}]}"#;

    /// The spike file `path` of 8 neurons, flushed every `flush_every` steps.
    fn file(path: &Path, flush_every: u64) -> Option<SpikeFile<'_>> {
        Some(SpikeFile {
            path,
            header: HEADER,
            flush_every,
        })
    }

    #[test]
    fn rank0_continues_the_restored_spikes_and_records_what_arrives_sorted() {
        let d = dir("rank0");
        let path = d.join("spikes.spk");
        let file = file(&path, 100);
        let restored = Restored {
            dir: &d,
            spikes: Some(vec![(3, 1), (5, 0)]),
        };
        let mut intake = Intake::rank0(Recorder::new(8).unwrap(), file, Some(restored), 5).unwrap();
        // Codes of 4 bits of neuron id, from two ranks, out of order: step 1 of the
        // interval from 10 for neuron 2, step 0 for neurons 7 and 3.
        intake.incoming = vec![1 << 4 | 2, 7, 3];
        intake.receive(10, 2, 4).unwrap();
        assert!(intake.has);
        assert_eq!(intake.gathered, [1 << 4 | 2, 7, 3]);
        assert_eq!((intake.base, intake.received), (10, 3));
        assert_eq!(intake.codes_and_incoming().0.len(), 3);
        intake.has = false;
        assert!(intake.codes_and_incoming().0.is_empty());
        intake.flush().unwrap();
        let (partial, count) = intake.checkpoint_spikes().unwrap();
        assert_eq!(count, 5);
        let so_far = read_spikes_partial(partial).unwrap();
        assert_eq!(so_far.spikes, [(3, 1), (5, 0), (11, 3), (11, 7), (12, 2)]);
        let (done, recorder) = intake.finish(true).unwrap();
        assert_eq!(done.as_deref(), Some(path.as_path()));
        assert_eq!(read_spikes(&path).unwrap().spikes, so_far.spikes);
        assert_eq!(recorder.unwrap().spikes, 5);
    }

    #[test]
    fn a_stopped_run_leaves_its_spikes_partial_and_other_ranks_record_nothing() {
        let d = dir("stopped");
        let path = d.join("spikes.spk");
        let file = file(&path, 1);
        let mut intake = Intake::rank0(Recorder::new(8).unwrap(), file, None, 0).unwrap();
        intake.incoming = vec![4];
        intake.receive(0, 1, 4).unwrap();
        // Flushed at every exchange: the partial file holds the spike already.
        let partial = intake.checkpoint_spikes().unwrap().0.to_path_buf();
        assert_eq!(read_spikes_partial(&partial).unwrap().spikes, [(1, 4)]);
        let (done, _) = intake.finish(false).unwrap();
        assert!(done.is_none() && !path.exists() && partial.exists());

        let mut other = Intake::<Recorder>::elsewhere(0);
        other.incoming = vec![4, 5];
        other.receive(0, 1, 4).unwrap();
        assert_eq!(other.received, 2);
        assert!(other.checkpoint_spikes().is_none());
        assert!(matches!(other.finish(true).unwrap(), (None, None)));
    }

    #[test]
    fn a_spike_file_cannot_continue_a_checkpoint_without_one() {
        let d = dir("none");
        let path = d.join("spikes.spk");
        let file = file(&path, 1);
        let restored = Restored {
            dir: &d,
            spikes: None,
        };
        let err = Intake::rank0(Recorder::new(8).unwrap(), file, Some(restored.clone()), 5)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("has no spike file to continue"), "{err}");
        assert!(!crate::spikes::partial_path(&path).exists());
        // Without a spike file of its own the run continues it.
        let i = Intake::rank0(Recorder::new(8).unwrap(), None, Some(restored), 5).unwrap();
        assert!(i.checkpoint_spikes().is_none());
    }

    #[test]
    fn intervals_stop_at_checkpoints_the_warm_up_and_the_end() {
        let opts = RunOptions {
            checkpoint_every: Some(10),
            checkpoint_dir: Some("ck".into()),
            ..Default::default()
        };
        // Without overlap: one interval per minimum delay.
        let iv = Intervals::new(&opts, 4, 25, 0).unwrap();
        assert_eq!((iv.interval, iv.lag, iv.end), (4, 1, 25));
        let mut steps = vec![0u64];
        while *steps.last().unwrap() < iv.end {
            let s = *steps.last().unwrap();
            steps.push(s + iv.next(s, Some(6)) as u64);
        }
        assert_eq!(steps, [0, 4, 6, 10, 14, 18, 20, 24, 25]);
        assert!(iv.at_checkpoint(20) && !iv.at_checkpoint(24));
        // The overlap needs a minimum delay of two steps.
        let o = RunOptions {
            overlap: true,
            ..Default::default()
        };
        assert_eq!(Intervals::new(&o, 1, 25, 0).unwrap().lag, 1);
        assert_eq!(Intervals::new(&o, 0, 25, 0).unwrap().interval, 1);
        // Checkpoints without a directory are refused.
        let e = RunOptions {
            checkpoint_every: Some(10),
            ..Default::default()
        };
        let err = Intervals::new(&e, 4, 25, 0).unwrap_err().to_string();
        assert!(err.contains("checkpoints need a directory"), "{err}");
    }
}
