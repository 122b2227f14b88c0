//! The spike file of every network of the workspace, its reader, and the
//! statistics rank 0 keeps while writing it.
//!
//! # Format (`.spk`, version 1)
//!
//! ```text
//! offset  size  content
//! 0       8     magic "HPCSPIKE"
//! 8       4     format version, u32 little-endian (1)
//! 12      4     header length H, u32 little-endian
//! 16      H     header: UTF-8 JSON (dt_ms, n_neurons, populations, params, ...)
//! 16+H    8*k   k records (tick: u32 LE, node_id: u32 LE), sorted by tick then id
//! ```
//!
//! A spike at `tick` happened at `tick * dt_ms` ms (NEST's spike time: the end of
//! the step in which the threshold was crossed). Populations are contiguous id
//! ranges (`first`, `count`). The header holds no rank or thread count, so files
//! of the same model compare bit for bit across decompositions.
//!
//! The file is written as `<name>.partial`, flushed after every exchange interval
//! (an interrupted run leaves every completed interval readable) and renamed to
//! `<name>` when the run completes.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

/// File magic.
pub const MAGIC: &[u8; 8] = b"HPCSPIKE";
/// Format version.
pub const VERSION: u32 = 1;

/// The path of the file being written.
pub fn partial_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".partial");
    PathBuf::from(p)
}

/// Writes the spike file (rank 0).
pub struct SpikeWriter {
    path: PathBuf,
    partial: PathBuf,
    out: BufWriter<File>,
    /// An exclusive `flock` on `partial`, so that a second writer given the
    /// same path is refused.
    _lock: File,
    /// What [`decode_spikes`] will check of every record.
    n_neurons: u32,
    limit: f64,
    /// The last record written, and how many were.
    last: Option<(u32, u32)>,
    records: usize,
}

impl SpikeWriter {
    /// Creates `<path>.partial` with the header JSON `h` (the model's: at least
    /// `dt_ms`, `t_sim_ms`, `n_neurons` and `populations`, which [`decode_spikes`]
    /// checks). A header the reader would refuse is an error here, before the
    /// file is made, naming what is wrong: a file its own reader refuses is never
    /// written.
    ///
    /// ```
    /// use hpc_spiking::spikes::SpikeWriter;
    ///
    /// let path = std::env::temp_dir().join(format!("spk-doc-{}", std::process::id()));
    /// let e = SpikeWriter::with_header(&path, r#"{"dt_ms": 0.1}"#).err().unwrap();
    /// assert!(format!("{e:#}").contains("n_neurons"), "{e:#}");
    /// ```
    pub fn with_header(path: &Path, h: &str) -> Result<SpikeWriter> {
        // Refused before the run, not at `finish` after it: a path that names
        // no file (`""` wrote `.partial` into the current directory) or a
        // directory, a device or a FIFO, which the final rename refuses.
        if path.file_name().is_none() {
            anyhow::bail!(
                "cannot write the spike file {}: it names no file",
                hpc_runtime::env::shown(&path.to_string_lossy())
            );
        }
        hpc_io::atomic::check_replaceable(path)?;
        let hlen = u32::try_from(h.len()).map_err(|_| {
            anyhow::anyhow!(
                "a spike file's header holds at most 4 GiB, not {} bytes",
                h.len()
            )
        })?;
        let mut head = Vec::with_capacity(16 + h.len());
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&VERSION.to_le_bytes());
        head.extend_from_slice(&hlen.to_le_bytes());
        head.extend_from_slice(h.as_bytes());
        let checked = decode_spikes(&head, false)
            .with_context(|| format!("the header of {}", hpc_io::message::path(path)))?;
        let limit = tick_limit(
            checked.header["dt_ms"].as_f64().unwrap_or(1.0),
            checked.header["t_sim_ms"].as_f64().unwrap_or(0.0),
        );
        let partial = partial_path(path);
        // Another writer's file, still being written (two writers given one
        // path): refused, not removed under it. The writer that finished
        // first renamed the other's `.partial` as its own output and said
        // nothing; the other failed at its end.
        if hpc_io::rundir::lock_holder(&partial).is_some() {
            anyhow::bail!(
                "cannot write the spike file {}: another writer is writing it ({} is locked)",
                hpc_io::message::path(path),
                hpc_io::message::path(&partial)
            );
        }
        // A new file: never written through a symbolic link planted at its name.
        let f = hpc_io::atomic::create_fresh(&partial)?;
        // Held until the writer ends: what the check above sees.
        let lock = hpc_io::rundir::try_lock_file(&partial)?.ok_or_else(|| {
            anyhow::anyhow!(
                "cannot write the spike file {}: another writer took {} as it was made",
                hpc_io::message::path(path),
                hpc_io::message::path(&partial)
            )
        })?;
        let mut out = BufWriter::with_capacity(1 << 16, f);
        (|| {
            out.write_all(&head)?;
            out.flush()
        })()
        .with_context(|| format!("writing {}", hpc_io::message::path(&partial)))?;
        Ok(SpikeWriter {
            path: path.to_owned(),
            partial,
            out,
            _lock: lock,
            n_neurons: checked.n_neurons,
            limit,
            last: None,
            records: 0,
        })
    }

    /// Checks the next record as [`decode_spikes`] will: a neuron of the header,
    /// after the previous record (by tick, then id), not at tick 0, not after the
    /// end of the run.
    fn check(&mut self, tick: u32, id: u32) -> std::result::Result<(), SpikeFileError> {
        let index = self.records;
        if id >= self.n_neurons {
            return Err(SpikeFileError::NeuronId {
                index,
                id,
                n: self.n_neurons,
            });
        }
        if let Some((t, i)) = self.last {
            if tick < t {
                return Err(SpikeFileError::Unsorted {
                    index,
                    tick,
                    previous: t,
                });
            }
            if tick == t && id <= i {
                return Err(SpikeFileError::IdOrder {
                    index,
                    tick,
                    id,
                    previous: i,
                });
            }
        } else if tick == 0 {
            // After a record, the order check refuses tick 0 (the record's
            // tick is at least 1).
            return Err(SpikeFileError::TickZero { index, id });
        }
        if tick as f64 > self.limit {
            return Err(SpikeFileError::AfterEnd {
                index,
                tick,
                limit: self.limit as u64,
            });
        }
        self.last = Some((tick, id));
        self.records += 1;
        Ok(())
    }

    /// Appends one interval's spikes, `(tick, id)` sorted, and flushes.
    pub fn append(&mut self, spikes: &[(u32, u32)]) -> Result<()> {
        self.write(spikes)?;
        self.flush()
    }

    /// Appends spikes, `(tick, id)` sorted, without flushing (see
    /// [`SpikeWriter::flush`]). A record that [`decode_spikes`] would refuse (a
    /// neuron the header does not have, out of order, after the end of the run)
    /// is an error naming it, and nothing of it or after it is written.
    pub fn write(&mut self, spikes: &[(u32, u32)]) -> Result<()> {
        for &(t, id) in spikes {
            self.check(t, id)
                .with_context(|| format!("writing {}", hpc_io::message::path(&self.partial)))?;
            (|| {
                self.out.write_all(&t.to_le_bytes())?;
                self.out.write_all(&id.to_le_bytes())
            })()
            .with_context(|| format!("writing {}", hpc_io::message::path(&self.partial)))?;
        }
        Ok(())
    }

    /// Flushes what was written to the file.
    pub fn flush(&mut self) -> Result<()> {
        self.out
            .flush()
            .with_context(|| format!("writing {}", hpc_io::message::path(&self.partial)))
    }

    /// The file being written (complete up to the last flush).
    pub fn partial(&self) -> &Path {
        &self.partial
    }

    /// Syncs and renames the file to its final name.
    ///
    /// # Errors
    ///
    /// A failed write or rename, and a `.partial` file that is no longer
    /// this writer's (removed, or replaced by another's): nothing is renamed
    /// then, so the output is never another writer's data.
    pub fn finish(mut self) -> Result<PathBuf> {
        self.out
            .flush()
            .and_then(|()| self.out.get_ref().sync_all())
            .with_context(|| format!("writing {}", hpc_io::message::path(&self.partial)))?;
        {
            if !hpc_io::atomic::still_at(self.out.get_ref(), &self.partial) {
                anyhow::bail!(
                    "cannot finish the spike file {}: {} is no longer the file this writer \
                     wrote (removed or replaced while it ran); nothing renamed",
                    hpc_io::message::path(&self.path),
                    hpc_io::message::path(&self.partial)
                );
            }
        }
        hpc_io::atomic::rename_over(&self.partial, &self.path).with_context(|| {
            format!(
                "renaming {} to {}",
                hpc_io::message::path(&self.partial),
                hpc_io::message::path(&self.path)
            )
        })?;
        Ok(self.path)
    }
}

/// A spike file read back.
#[derive(Debug)]
pub struct SpikeFile {
    /// The header JSON.
    pub header: serde_json::Value,
    /// Number of neurons the header declares (every id is below it).
    pub n_neurons: u32,
    /// `(tick, node_id)` records, sorted by tick.
    pub spikes: Vec<(u32, u32)>,
    /// Bytes of an incomplete last record that were dropped (only with
    /// [`decode_spikes`]`(.., true)`, for a `.partial` file being written).
    pub dropped_bytes: usize,
}

/// What is wrong with the bytes of a spike file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpikeFileError {
    /// Fewer bytes than the fixed part of the header.
    #[error("{0} bytes is too short for a spike file (16 bytes of header at least)")]
    TooShort(usize),
    /// The file does not start with `HPCSPIKE`.
    #[error("not a spike file (it does not start with \"HPCSPIKE\")")]
    Magic,
    /// A format version this reader does not know.
    #[error("format version {0}, this reader knows version {VERSION}")]
    Version(u32),
    /// The header length runs past the end of the file.
    #[error(
        "the header claims {declared} bytes but only {available} follow (truncated or damaged)"
    )]
    HeaderLength {
        /// Header bytes the file declares.
        declared: u64,
        /// Bytes after the fixed part.
        available: u64,
    },
    /// The header is not the JSON this format writes.
    #[error("the header is not valid: {0}")]
    Header(String),
    /// The records end in the middle of one.
    #[error("the records end {0} bytes into a record (truncated mid-record)")]
    PartialRecord(usize),
    /// A record names a neuron the header does not have.
    #[error("record {index} names neuron {id}, but the file has {n} neurons (ids 0..{n})")]
    NeuronId {
        /// Index of the record.
        index: usize,
        /// The id in the record.
        id: u32,
        /// Neurons per the header.
        n: u32,
    },
    /// Records are not in time order.
    #[error("record {index} has tick {tick}, before the previous record's tick {previous}")]
    Unsorted {
        /// Index of the record.
        index: usize,
        /// Its tick.
        tick: u32,
        /// The previous record's tick.
        previous: u32,
    },
    /// A record repeats or precedes the previous record's neuron at the same tick
    /// (records are sorted by tick, then id, each spike once).
    #[error(
        "record {index} has neuron {id} at tick {tick}, not after the previous record's neuron {previous} at that tick (records are sorted by tick, then id, each spike once)"
    )]
    IdOrder {
        /// Index of the record.
        index: usize,
        /// Its tick (the previous record's too).
        tick: u32,
        /// Its neuron id.
        id: u32,
        /// The previous record's neuron id.
        previous: u32,
    },
    /// A record at tick 0, which no run writes: a spike at tick `t` happened
    /// at the end of step `t`, and the first step ends at tick 1.
    #[error(
        "record {index} has neuron {id} at tick 0, which no run writes (its first step ends at tick 1)"
    )]
    TickZero {
        /// Index of the record.
        index: usize,
        /// Its neuron id.
        id: u32,
    },
    /// A record's time is after the end of the run the header describes.
    #[error(
        "record {index} has tick {tick}, after the end of the run (tick {limit} at most, by the header's t_sim_ms and dt_ms)"
    )]
    AfterEnd {
        /// Index of the record.
        index: usize,
        /// Its tick.
        tick: u32,
        /// The last tick the run can write ([`tick_limit`]).
        limit: u64,
    },
}

/// Decodes a spike file from its bytes, checking the header length against the
/// bytes present, the header's numbers (`n_neurons`, `dt_ms`, `t_sim_ms`) and
/// populations (contiguous id ranges from 0 covering `n_neurons`), every neuron id
/// against `n_neurons`, the order (by tick, then id, each spike once) and every tick against the start
/// (tick 1 at least: [`SpikeFileError::TickZero`]) and the end of the run ([`tick_limit`]), before anything is allocated or indexed by them. Never panics, whatever
/// the bytes. With `partial_ok`, an incomplete last record (a `.partial` file caught
/// mid-write) is dropped and counted instead of refused.
pub fn decode_spikes(bytes: &[u8], partial_ok: bool) -> Result<SpikeFile, SpikeFileError> {
    check_head(bytes)?;
    let u32_at =
        |o: usize| u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
    let hlen = u32_at(12) as u64;
    let available = (bytes.len() - 16) as u64;
    if hlen > available {
        return Err(SpikeFileError::HeaderLength {
            declared: hlen,
            available,
        });
    }
    let hend = 16 + hlen as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[16..hend])
        .map_err(|e| SpikeFileError::Header(e.to_string()))?;
    let n_neurons = header
        .get("n_neurons")
        .and_then(|v| v.as_u64())
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| SpikeFileError::Header("no n_neurons below 2^32".into()))?;
    let dt_ms = header
        .get("dt_ms")
        .and_then(|v| v.as_f64())
        .filter(|dt| *dt > 0.0 && dt.is_finite())
        .ok_or_else(|| SpikeFileError::Header("no positive dt_ms".into()))?;
    let t_sim_ms = header
        .get("t_sim_ms")
        .and_then(|v| v.as_f64())
        .filter(|t| *t >= 0.0 && t.is_finite())
        .ok_or_else(|| SpikeFileError::Header("no t_sim_ms >= 0".into()))?;
    check_populations(&header, n_neurons)?;
    let limit = tick_limit(dt_ms, t_sim_ms);
    let body = &bytes[hend..];
    let rest = body.len() % 8;
    if rest != 0 && !partial_ok {
        return Err(SpikeFileError::PartialRecord(rest));
    }
    let mut spikes = Vec::with_capacity(body.len() / 8);
    let mut previous = 0u32;
    let mut previous_id = None;
    for (index, c) in body.chunks_exact(8).enumerate() {
        let tick = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        let id = u32::from_le_bytes([c[4], c[5], c[6], c[7]]);
        if id >= n_neurons {
            return Err(SpikeFileError::NeuronId {
                index,
                id,
                n: n_neurons,
            });
        }
        if tick < previous {
            return Err(SpikeFileError::Unsorted {
                index,
                tick,
                previous,
            });
        }
        if tick == previous && previous_id.is_some_and(|p| id <= p) {
            return Err(SpikeFileError::IdOrder {
                index,
                tick,
                id,
                previous: previous_id.unwrap_or(0),
            });
        }
        if tick == 0 {
            return Err(SpikeFileError::TickZero { index, id });
        }
        if tick as f64 > limit {
            return Err(SpikeFileError::AfterEnd {
                index,
                tick,
                limit: limit as u64,
            });
        }
        previous = tick;
        previous_id = Some(id);
        spikes.push((tick, id));
    }
    Ok(SpikeFile {
        header,
        n_neurons,
        spikes,
        dropped_bytes: rest,
    })
}

/// The last tick a run of `t_sim_ms` in steps of `dt_ms` can write:
/// `ceil(t_sim_ms / dt_ms) + 1` (the writers round durations to whole steps; the
/// microcircuit's warm-up and recorded time separately), or 2^33, above every
/// tick, when that is larger.
pub fn tick_limit(dt_ms: f64, t_sim_ms: f64) -> f64 {
    let q = t_sim_ms / dt_ms;
    if q < TICK_CAP {
        q.ceil() + 1.0
    } else {
        TICK_CAP
    }
}

const TICK_CAP: f64 = (1u64 << 33) as f64;

/// Checks the header's `populations`: `{name, first, count}` objects whose id
/// ranges follow each other from 0 and cover the `n` neurons.
fn check_populations(header: &serde_json::Value, n: u32) -> Result<(), SpikeFileError> {
    let pops = header
        .get("populations")
        .and_then(|v| v.as_array())
        .ok_or_else(|| SpikeFileError::Header("no populations list".into()))?;
    let mut end = 0u128;
    for (i, p) in pops.iter().enumerate() {
        let field = |k: &str| p.get(k).and_then(|v| v.as_u64());
        let (Some(name), Some(first), Some(count)) = (
            p.get("name").and_then(|v| v.as_str()),
            field("first"),
            field("count"),
        ) else {
            return Err(SpikeFileError::Header(format!(
                "population {i} is not {{name, first, count}}"
            )));
        };
        if u128::from(first) != end {
            // The name is the file's, of any length and any characters: a short
            // one as it is, a long one cut as every shown value is
            // (`hpc_env::short`), and one holding a control character (a line
            // break, a terminal's escape) quoted, so that the message stays one
            // line; as the Python reader says it.
            let name = if name.chars().any(char::is_control) {
                hpc_runtime::env::shown(name)
            } else {
                hpc_runtime::env::short(name)
            };
            return Err(SpikeFileError::Header(format!(
                "population {i} ({name}) starts at {first}, not at {end} where the previous one ends"
            )));
        }
        end += u128::from(count);
    }
    if end != u128::from(n) {
        return Err(SpikeFileError::Header(format!(
            "the populations cover ids 0..{end}, not the {n} neurons of n_neurons"
        )));
    }
    Ok(())
}

/// Reads and checks a complete spike file ([`decode_spikes`]); errors name the file.
pub fn read_spikes(path: &Path) -> Result<SpikeFile> {
    read_spikes_with(path, false)
}

/// Reads a spike file that may end in an incomplete record (a `.partial` file of a
/// run that is still writing it or was interrupted).
pub fn read_spikes_partial(path: &Path) -> Result<SpikeFile> {
    read_spikes_with(path, true)
}

fn read_spikes_with(path: &Path, partial_ok: bool) -> Result<SpikeFile> {
    use std::io::{Read as _, Seek as _};
    let invalid = || format!("{} is not a valid spike file", hpc_io::message::path(path));
    let (mut file, size) = hpc_io::read::open_regular(path)?;
    // Its first bytes before the rest: what is no spike file is refused by them,
    // not after reading gigabytes of it, and then its size against the memory.
    let mut head = Vec::with_capacity(16);
    (&mut file)
        .take(16)
        .read_to_end(&mut head)
        .with_context(|| format!("cannot read {}", hpc_io::message::path(path)))?;
    check_head(&head).with_context(invalid)?;
    if let Some(available) = hpc_io::read::mem_available().filter(|&a| size > a) {
        anyhow::bail!(
            "{}: {size} bytes, more than the {available} bytes of memory available \
             (MemAvailable) to read it",
            hpc_io::message::path(path)
        );
    }
    file.rewind()
        .with_context(|| format!("cannot read {}", hpc_io::message::path(path)))?;
    let bytes = hpc_io::read::read_open(path, file, size, hpc_io::read::MAX_DATA_BYTES)?;
    decode_spikes(&bytes, partial_ok).with_context(invalid)
}

/// Checks a spike file's first 16 bytes (all of it when shorter): the magic and
/// the format's version.
fn check_head(bytes: &[u8]) -> Result<(), SpikeFileError> {
    if bytes.len() < 16 {
        return Err(SpikeFileError::TooShort(bytes.len()));
    }
    if &bytes[..8] != MAGIC {
        return Err(SpikeFileError::Magic);
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version != VERSION {
        return Err(SpikeFileError::Version(version));
    }
    Ok(())
}

/// Running statistics of the spikes: their count, and per neuron the spikes and
/// inter-spike intervals after a warm-up (none with [`Recorder::new`]).
#[derive(Clone, Debug)]
pub struct Recorder {
    from_tick: u32,
    last: Vec<u32>,
    count: Vec<u32>,
    isi_n: Vec<u32>,
    isi_sum: Vec<f64>,
    isi_sum2: Vec<f64>,
    /// Spikes seen, the warm-up's too.
    pub spikes: u64,
}

/// The summary statistics of a run.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    /// Spikes of all neurons.
    pub spikes: u64,
    /// Mean firing rate over neurons and the simulated time (Hz).
    pub rate_hz: f64,
    /// Mean over neurons with at least 2 ISIs of the coefficient of variation of
    /// their ISIs.
    pub cv_isi: f64,
    /// Neurons that contributed to `cv_isi`.
    pub cv_neurons: u32,
}

/// Why [`Recorder::add`] refuses spike `index`, `(t, id)`, whose neuron last
/// spiked at `last` (0: never), after the spike `previous` (`(tick << 32) |
/// id`) of the same call, if any.
#[cold]
fn out_of_order(index: usize, t: u32, id: u32, last: u32, previous: Option<u64>) -> SpikeFileError {
    let (pt, pid) = previous.map_or((0, None), |p| ((p >> 32) as u32, Some(p as u32)));
    if t < pt || t < last {
        return SpikeFileError::Unsorted {
            index,
            tick: t,
            previous: pt.max(last),
        };
    }
    if t == 0 && pid.is_none() && last == 0 {
        return SpikeFileError::TickZero { index, id };
    }
    SpikeFileError::IdOrder {
        index,
        tick: t,
        id,
        previous: if t == last { id } else { pid.unwrap_or(0) },
    }
}

/// Bytes a [`Recorder`] holds per neuron: its last spike, its spikes, its
/// intervals and their sum and sum of squares.
pub const RECORDER_BYTES_PER_NEURON: u64 = 28;

impl Recorder {
    /// No spikes yet, for `n` neurons.
    ///
    /// # Errors
    ///
    /// As [`Recorder::after`].
    pub fn new(n: u32) -> Result<Recorder> {
        Recorder::after(n, 0)
    }

    /// No spikes yet, for `n` neurons whose statistics count the spikes at
    /// ticks after `from_tick` (the end of a warm-up).
    ///
    /// # Errors
    ///
    /// When the [`RECORDER_BYTES_PER_NEURON`] bytes of each neuron are more
    /// than the memory available (`MemAvailable`), or cannot be allocated: a
    /// recorder of 2^32 - 1 neurons aborted the process on its allocation.
    pub fn after(n: u32, from_tick: u32) -> Result<Recorder> {
        let need = u64::from(n) * RECORDER_BYTES_PER_NEURON;
        if let Some(available) = hpc_io::read::mem_available().filter(|&a| need > a) {
            anyhow::bail!(
                "the statistics of {n} neurons need {need} bytes, more than the \
                 {available} bytes of memory available (MemAvailable)"
            );
        }
        fn zeros<T: Clone + Default>(n: u32) -> Result<Vec<T>> {
            let mut v = Vec::new();
            v.try_reserve_exact(n as usize)
                .with_context(|| format!("allocating the statistics of {n} neurons"))?;
            v.resize(n as usize, T::default());
            Ok(v)
        }
        Ok(Recorder {
            from_tick,
            last: zeros(n)?,
            count: zeros(n)?,
            isi_n: zeros(n)?,
            isi_sum: zeros(n)?,
            isi_sum2: zeros(n)?,
            spikes: 0,
        })
    }

    /// Adds spikes `(tick, id)` (`tick >= 1`), sorted by tick, then id (as a
    /// spike file's records), each spike once, and after every spike added
    /// before of the same neuron.
    ///
    /// # Errors
    ///
    /// [`SpikeFileError::NeuronId`] for a neuron beyond this recorder's count,
    /// [`SpikeFileError::Unsorted`] for a spike before the previous one (in this
    /// call, or of its neuron before) and [`SpikeFileError::IdOrder`] for a
    /// spike of a neuron at a tick it already spiked at (in this call, or
    /// before: counted twice, it doubled the neuron's rate and gave it an
    /// interval of 0), or not after the previous one's neuron at its tick;
    /// [`SpikeFileError::TickZero`] for a spike at tick 0 (a spike file's
    /// reader refuses it: it was counted); nothing is added then.
    pub fn add(&mut self, spikes: &[(u32, u32)]) -> Result<(), SpikeFileError> {
        let n = self.last.len();
        // One compare of (tick, id) as one number for the order within the
        // call, one of the tick against the neuron's last: the common case
        // costs what the order check alone cost. The first spike is compared
        // with tick 0's largest key, which refuses tick 0 (no writer makes
        // it: the first step ends at tick 1) in the same compare.
        let mut previous = u64::from(u32::MAX);
        for (index, &(t, id)) in spikes.iter().enumerate() {
            let Some(&last) = self.last.get(id as usize) else {
                return Err(SpikeFileError::NeuronId {
                    index,
                    id,
                    // `n` came from a u32 in `after`.
                    n: n as u32,
                });
            };
            let key = (u64::from(t) << 32) | u64::from(id);
            if key <= previous || (last != 0 && t <= last) {
                return Err(out_of_order(
                    index,
                    t,
                    id,
                    last,
                    (index > 0).then_some(previous),
                ));
            }
            previous = key;
        }
        for &(t, id) in spikes {
            if t <= self.from_tick {
                continue;
            }
            let i = id as usize;
            self.count[i] += 1;
            if self.last[i] != 0 {
                let d = (t - self.last[i]) as f64;
                self.isi_n[i] += 1;
                self.isi_sum[i] += d;
                self.isi_sum2[i] += d * d;
            }
            self.last[i] = t;
        }
        self.spikes += spikes.len() as u64;
        Ok(())
    }

    /// Spikes of the neurons `ids` after the warm-up.
    ///
    /// # Panics
    ///
    /// If `ids` reaches beyond the recorder's neurons, as a slice index does.
    pub fn spikes_of(&self, ids: std::ops::Range<usize>) -> u64 {
        self.count[ids].iter().map(|&c| c as u64).sum()
    }

    /// The mean coefficient of variation of the inter-spike intervals after the
    /// warm-up over the neurons `ids` with at least 2, and how many they are.
    ///
    /// # Panics
    ///
    /// If `ids` reaches beyond the recorder's neurons, as a slice index does.
    pub fn cv_of(&self, ids: std::ops::Range<usize>) -> (f64, u32) {
        let (mut cv, mut k) = (0.0, 0u32);
        for i in ids {
            if self.isi_n[i] >= 2 {
                let m = self.isi_n[i] as f64;
                let mean = self.isi_sum[i] / m;
                let var = (self.isi_sum2[i] / m - mean * mean).max(0.0);
                cv += var.sqrt() / mean;
                k += 1;
            }
        }
        (if k > 0 { cv / k as f64 } else { 0.0 }, k)
    }

    /// The statistics after `t_ms` of simulated time.
    pub fn stats(&self, t_ms: f64) -> Stats {
        let n = self.last.len();
        let (cv_isi, k) = self.cv_of(0..n);
        Stats {
            spikes: self.spikes,
            rate_hz: if t_ms > 0.0 && n > 0 {
                self.spikes as f64 / n as f64 / (t_ms / 1000.0)
            } else {
                0.0
            },
            cv_isi,
            cv_neurons: k,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A file of 100 neurons (80 excitatory, 20 inhibitory) over 1000 ms in steps
    /// of 0.1 ms.
    fn valid(spikes: &[(u32, u32)]) -> Vec<u8> {
        let h = serde_json::json!({
            "format": "hpc-rs spikes",
            "version": VERSION,
            "dt_ms": 0.1,
            "t_sim_ms": 1000.0,
            "n_neurons": 100,
            "populations": [
                {"name": "excitatory", "first": 0, "count": 80},
                {"name": "inhibitory", "first": 80, "count": 20},
            ],
        })
        .to_string();
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&(h.len() as u32).to_le_bytes());
        b.extend_from_slice(h.as_bytes());
        for &(t, id) in spikes {
            b.extend_from_slice(&t.to_le_bytes());
            b.extend_from_slice(&id.to_le_bytes());
        }
        b
    }

    /// A population's name in the header is cut in the refusal (100,000
    /// characters were echoed whole).
    #[test]
    fn a_long_population_name_is_cut_in_the_refusal() {
        let h = serde_json::json!({
            "dt_ms": 0.1, "t_sim_ms": 1.0, "n_neurons": 2,
            "populations": [{"name": "E".repeat(100_000), "first": 5, "count": 2}],
        })
        .to_string();
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&(h.len() as u32).to_le_bytes());
        b.extend_from_slice(h.as_bytes());
        let e = decode_spikes(&b, false).unwrap_err().to_string();
        assert!(e.len() < 300 && e.contains("more characters"), "{e}");
    }

    #[test]
    fn what_is_no_spike_file_is_refused_by_its_first_bytes_and_size() {
        let dir = hpc_test_support::TmpDir::new("hpc-spiking", "head");
        // 60 GiB, sparse: read whole (as it was, under the 64 GiB bound) it asked
        // for an allocation of 60 GiB before its first bytes said it is no
        // spike file.
        let sparse = |name: &str, head: &[u8]| {
            let p = dir.join(name);
            let f = std::fs::File::create(&p).unwrap();
            (&f).write_all(head).unwrap();
            f.set_len(60 << 30).unwrap();
            p
        };
        let t = std::time::Instant::now();
        let e = format!(
            "{:#}",
            read_spikes(&sparse("image.spk", b"\x89PNG")).unwrap_err()
        );
        assert!(e.contains("does not start with \"HPCSPIKE\""), "{e}");
        let mut head = MAGIC.to_vec();
        head.extend_from_slice(&7u32.to_le_bytes());
        head.extend_from_slice(&0u32.to_le_bytes());
        let e = format!("{:#}", read_spikes(&sparse("v7.spk", &head)).unwrap_err());
        assert!(e.contains("format version 7"), "{e}");
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            t.elapsed()
        );
        // A spike file's head on a file larger than the memory available.
        head[8..12].copy_from_slice(&VERSION.to_le_bytes());
        let big = sparse("big.spk", &head);
        if hpc_io::read::mem_available().is_some_and(|a| a < 60 << 30) {
            let e = format!("{:#}", read_spikes(&big).unwrap_err());
            assert!(e.contains("bytes of memory available"), "{e}");
        }
        let e = check_head(b"HPCSPIKE").unwrap_err().to_string();
        assert!(e.contains("8 bytes is too short"), "{e}");
    }

    #[test]
    fn damage_is_named() {
        let good = valid(&[(1, 3), (1, 99), (4, 0)]);
        let f = decode_spikes(&good, false).unwrap();
        assert_eq!(f.spikes, vec![(1, 3), (1, 99), (4, 0)]);
        assert_eq!(f.n_neurons, 100);
        // A flipped bit in a neuron id.
        let mut b = good.clone();
        let last = b.len() - 1;
        b[last] ^= 0x80;
        assert!(matches!(
            decode_spikes(&b, false),
            Err(SpikeFileError::NeuronId { index: 2, .. })
        ));
        // Truncated mid-record: refused, or dropped for a .partial file.
        let cut = &good[..good.len() - 3];
        assert_eq!(
            decode_spikes(cut, false).unwrap_err(),
            SpikeFileError::PartialRecord(5)
        );
        assert_eq!(decode_spikes(cut, true).unwrap().dropped_bytes, 5);
        // A header length beyond the file.
        let mut b = good.clone();
        b[15] = 0x7f;
        assert!(matches!(
            decode_spikes(&b, false),
            Err(SpikeFileError::HeaderLength { .. })
        ));
        // Out of time order.
        let b = valid(&[(5, 1), (4, 1)]);
        assert!(matches!(
            decode_spikes(&b, false),
            Err(SpikeFileError::Unsorted { index: 1, .. })
        ));
        assert_eq!(
            decode_spikes(&good[..10], false).unwrap_err(),
            SpikeFileError::TooShort(10)
        );
    }

    #[test]
    fn order_end_of_run_and_populations_are_checked() {
        // Order 20, t_sim 1000 ms in steps of 0.1 ms: 100 neurons, ticks up to 10001.
        let limit = tick_limit(0.1, 1000.0);
        assert_eq!(limit, 10001.0);
        assert!(decode_spikes(&valid(&[(10_000, 0), (10_001, 99)]), false).is_ok());
        assert_eq!(
            decode_spikes(&valid(&[(1, 0), (10_002, 0)]), false).unwrap_err(),
            SpikeFileError::AfterEnd {
                index: 1,
                tick: 10_002,
                limit: 10_001
            }
        );
        // Within a tick, ids increase: no repeated spike, no unsorted ids.
        for b in [valid(&[(3, 7), (3, 7)]), valid(&[(3, 7), (3, 6)])] {
            assert!(matches!(
                decode_spikes(&b, false),
                Err(SpikeFileError::IdOrder {
                    index: 1,
                    tick: 3,
                    previous: 7,
                    ..
                })
            ));
        }
        // The header's end of the run and populations.
        let with = |edit: &dyn Fn(&mut serde_json::Value)| {
            let b = valid(&[(1, 0)]);
            let hlen = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
            let mut h: serde_json::Value = serde_json::from_slice(&b[16..16 + hlen]).unwrap();
            edit(&mut h);
            let h = h.to_string();
            let mut out = b[..12].to_vec();
            out.extend_from_slice(&(h.len() as u32).to_le_bytes());
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(&b[16 + hlen..]);
            decode_spikes(&out, false)
        };
        assert!(with(&|_| {}).is_ok());
        let header_err = |r: Result<SpikeFile, SpikeFileError>| match r {
            Err(SpikeFileError::Header(m)) => m,
            other => panic!("{other:?}"),
        };
        let m = header_err(with(&|h| h["t_sim_ms"] = serde_json::json!(null)));
        assert!(m.contains("t_sim_ms"), "{m}");
        let m = header_err(with(&|h| {
            h["populations"][1]["first"] = serde_json::json!(81)
        }));
        assert!(
            m.contains("population 1 (inhibitory) starts at 81, not at 80"),
            "{m}"
        );
        // A name of 41 to 100 characters was shown whole (other values are cut
        // after 40), and a line break or escape in a name written as it is.
        for (name, shown) in [
            (
                "y".repeat(60),
                format!("(\"{}\"... (20 more characters))", "y".repeat(40)),
            ),
            ("a\nb\u{1b}[31m".into(), "(\"a\\nb\\u{1b}[31m\")".into()),
        ] {
            let m = header_err(with(&|h| {
                h["populations"][1]["first"] = serde_json::json!(81);
                h["populations"][1]["name"] = serde_json::json!(name);
            }));
            assert!(
                m.contains(&format!("population 1 {shown} starts at 81")),
                "{m}"
            );
        }
        // Pass 16: a name of 100,000 characters was echoed whole.
        let m = header_err(with(&|h| {
            h["populations"][1]["first"] = serde_json::json!(81);
            h["populations"][1]["name"] = serde_json::json!("x".repeat(100_000));
        }));
        assert!(
            m.len() < 1000 && m.contains("more characters)) starts at 81"),
            "{}",
            &m[m.len().saturating_sub(300)..]
        );
        let m = header_err(with(&|h| {
            h["populations"][1]["count"] = serde_json::json!(u64::MAX)
        }));
        assert!(m.contains("not the 100 neurons"), "{m}");
        let m = header_err(with(&|h| {
            h["populations"] = serde_json::json!([{"name": "all"}])
        }));
        assert!(m.contains("population 0 is not"), "{m}");
    }

    /// The writer refuses what its reader would: a header without the numbers it
    /// needs (before the file is made), a neuron the header does not have, a record
    /// out of order or after the end of the run; what it did write reads back.
    #[test]
    fn a_recorder_refuses_a_neuron_beyond_its_count_and_a_tick_out_of_order() {
        let mut r = Recorder::new(4).unwrap();
        r.add(&[(1, 0), (2, 3)]).unwrap();
        // Neuron 4 of 4 used to index past the end (a panic); nothing of the
        // call is added.
        assert_eq!(
            r.add(&[(3, 1), (3, 4)]),
            Err(SpikeFileError::NeuronId {
                index: 1,
                id: 4,
                n: 4
            })
        );
        assert_eq!(r.spikes, 2);
        assert_eq!(r.spikes_of(1..2), 0);
        // A spike before its neuron's last one used to underflow the interval.
        assert_eq!(
            r.add(&[(1, 3)]),
            Err(SpikeFileError::Unsorted {
                index: 0,
                tick: 1,
                previous: 2
            })
        );
        assert!(matches!(
            r.add(&[(5, 0), (4, 1)]),
            Err(SpikeFileError::Unsorted { index: 1, .. })
        ));
        assert_eq!(r.spikes, 2);
        r.add(&[(4, 3), (9, 3)]).unwrap();
        assert_eq!(r.spikes_of(0..4), 4);
    }

    /// A record at tick 0, which no writer makes (the first step ends at tick
    /// 1), was read as a spike at 0 ms, and `Recorder::add` counted it (twice
    /// for one neuron, its last spike left at "never"): both refuse it, naming
    /// the record, and the writer does not write it.
    #[test]
    fn a_record_at_tick_0_is_refused_by_the_reader_the_recorder_and_the_writer() {
        assert_eq!(
            decode_spikes(&valid(&[(0, 7), (1, 2)]), false).unwrap_err(),
            SpikeFileError::TickZero { index: 0, id: 7 }
        );
        let e = decode_spikes(&valid(&[(0, 7)]), true)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("record 0 has neuron 7 at tick 0"), "{e}");
        // After a record, tick 0 is out of order, as the other readers say.
        assert!(matches!(
            decode_spikes(&valid(&[(1, 2), (0, 7)]), false),
            Err(SpikeFileError::Unsorted { index: 1, .. })
        ));
        let mut r = Recorder::new(8).unwrap();
        for _ in 0..2 {
            assert_eq!(
                r.add(&[(0, 7)]),
                Err(SpikeFileError::TickZero { index: 0, id: 7 })
            );
        }
        assert_eq!(r.spikes, 0);
        assert!(matches!(
            r.add(&[(1, 2), (0, 7)]),
            Err(SpikeFileError::Unsorted { index: 1, .. })
        ));
        r.add(&[(1, 7), (2, 7)]).unwrap();
        assert_eq!(r.spikes, 2);
        assert!(matches!(
            r.add(&[(0, 3)]),
            Err(SpikeFileError::TickZero { index: 0, id: 3 })
        ));
        let dir = hpc_test_support::TmpDir::new("hpc-spk", "tick0");
        let path = dir.join("s.spk");
        let good = valid(&[]);
        let h = std::str::from_utf8(&good[16..]).unwrap();
        let mut w = SpikeWriter::with_header(&path, h).unwrap();
        let e = w.append(&[(0, 7)]).unwrap_err();
        assert!(
            format!("{e:#}").contains("at tick 0, which no run writes"),
            "{e:#}"
        );
    }

    #[test]
    fn the_writer_writes_nothing_its_reader_refuses() {
        let dir = hpc_test_support::TmpDir::new("hpc-spk", "writer");
        let path = dir.join("s.spk");
        let e = SpikeWriter::with_header(&path, r#"{"dt_ms": 0.1, "t_sim_ms": 10}"#)
            .err()
            .unwrap();
        assert!(format!("{e:#}").contains("n_neurons"), "{e:#}");
        assert!(!partial_path(&path).exists());
        let good = valid(&[]);
        let h = std::str::from_utf8(&good[16..]).unwrap();
        for (records, want) in [
            (vec![(1, 100)], "names neuron 100"),
            (vec![(5, 1), (4, 1)], "before the previous record's tick 5"),
            (
                vec![(5, 3), (5, 3)],
                "not after the previous record's neuron 3",
            ),
            (vec![(10_002, 0)], "after the end of the run"),
        ] {
            let mut w = SpikeWriter::with_header(&path, h).unwrap();
            let e = w.append(&records).unwrap_err();
            assert!(format!("{e:#}").contains(want), "{records:?}: {e:#}");
            drop(w);
            // What was written before the refused record reads back.
            let back = read_spikes_partial(&partial_path(&path)).unwrap();
            assert_eq!(back.spikes, records[..records.len() - 1], "{records:?}");
            std::fs::remove_file(partial_path(&path)).unwrap();
        }
        let mut w = SpikeWriter::with_header(&path, h).unwrap();
        w.append(&[(1, 3), (1, 99), (4, 0)]).unwrap();
        w.finish().unwrap();
        assert_eq!(
            read_spikes(&path).unwrap().spikes,
            [(1, 3), (1, 99), (4, 0)]
        );
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = decode_spikes(&b, false);
            let _ = decode_spikes(&b, true);
        }

        #[test]
        fn mutated_files_never_panic_and_keep_ids_in_range(
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
            cut in any::<usize>(),
        ) {
            let mut b = valid(&[(1, 0), (2, 50), (2, 99), (7, 12), (9, 3)]);
            for (at, x) in flips {
                let i = at % b.len();
                b[i] ^= x;
            }
            b.truncate(cut % (b.len() + 1));
            for partial in [false, true] {
                if let Ok(f) = decode_spikes(&b, partial) {
                    prop_assert!(f.spikes.iter().all(|&(_, id)| id < f.n_neurons));
                    prop_assert!(f.spikes.windows(2).all(|w| w[0] < w[1]));
                }
            }
        }
    }
}
