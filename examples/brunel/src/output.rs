//! The spike file, and the statistics rank 0 keeps while writing it.
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
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};

use crate::params::Model;

/// File magic.
pub const MAGIC: &[u8; 8] = b"HPCSPIKE";
/// Format version.
pub const VERSION: u32 = 1;

/// The header JSON of a model's spike file.
pub fn header_json(model: &Model) -> String {
    let h = serde_json::json!({
        "format": "hpc-rs spikes",
        "version": VERSION,
        "record": "tick u32 LE, node_id u32 LE; time_ms = tick * dt_ms",
        "dt_ms": model.params.dt,
        "t_sim_ms": model.params.t_sim,
        "n_neurons": model.n,
        "populations": [
            {"name": "excitatory", "first": 0, "count": model.ne},
            {"name": "inhibitory", "first": model.ne, "count": model.ni},
        ],
        "params": model.params,
        "model": "Brunel (2000) delta-synapse LIF network (hpc-example-brunel)",
    });
    h.to_string()
}

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
}

impl SpikeWriter {
    /// Creates `<path>.partial` with the header.
    pub fn create(path: &Path, model: &Model) -> Result<SpikeWriter> {
        let partial = partial_path(path);
        let f =
            File::create(&partial).with_context(|| format!("creating {}", partial.display()))?;
        let mut out = BufWriter::with_capacity(1 << 16, f);
        let h = header_json(model);
        out.write_all(MAGIC)?;
        out.write_all(&VERSION.to_le_bytes())?;
        out.write_all(&(h.len() as u32).to_le_bytes())?;
        out.write_all(h.as_bytes())?;
        out.flush()?;
        Ok(SpikeWriter {
            path: path.to_owned(),
            partial,
            out,
        })
    }

    /// Appends one interval's spikes, `(tick, id)` sorted, and flushes.
    pub fn append(&mut self, spikes: &[(u32, u32)]) -> Result<()> {
        for &(t, id) in spikes {
            self.out.write_all(&t.to_le_bytes())?;
            self.out.write_all(&id.to_le_bytes())?;
        }
        self.out.flush()?;
        Ok(())
    }

    /// The file being written (complete up to the last `append`).
    pub fn partial(&self) -> &Path {
        &self.partial
    }

    /// Syncs and renames the file to its final name.
    pub fn finish(mut self) -> Result<PathBuf> {
        self.out.flush()?;
        self.out.get_ref().sync_all()?;
        std::fs::rename(&self.partial, &self.path)
            .with_context(|| format!("renaming {}", self.partial.display()))?;
        Ok(self.path)
    }
}

/// A spike file read back.
#[derive(Debug)]
pub struct SpikeFile {
    /// The header JSON.
    pub header: serde_json::Value,
    /// `(tick, node_id)` records.
    pub spikes: Vec<(u32, u32)>,
}

/// Reads a spike file (a trailing partial record is ignored).
pub fn read_spikes(path: &Path) -> Result<SpikeFile> {
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut head = [0u8; 16];
    f.read_exact(&mut head)?;
    if &head[..8] != MAGIC {
        bail!("{} is not a spike file", path.display());
    }
    let hlen = u32::from_le_bytes([head[12], head[13], head[14], head[15]]) as usize;
    let mut h = vec![0u8; hlen];
    f.read_exact(&mut h)?;
    let header = serde_json::from_slice(&h)?;
    let mut rest = Vec::new();
    f.seek(SeekFrom::Start(16 + hlen as u64))?;
    f.read_to_end(&mut rest)?;
    let spikes = rest
        .chunks_exact(8)
        .map(|c| {
            (
                u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            )
        })
        .collect();
    Ok(SpikeFile { header, spikes })
}

/// Running statistics over all spikes: count, per-neuron inter-spike intervals.
#[derive(Clone, Debug)]
pub struct Recorder {
    last: Vec<u32>,
    isi_n: Vec<u32>,
    isi_sum: Vec<f64>,
    isi_sum2: Vec<f64>,
    /// Spikes seen.
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

impl Recorder {
    /// No spikes yet, for `n` neurons.
    pub fn new(n: u32) -> Recorder {
        let n = n as usize;
        Recorder {
            last: vec![0; n],
            isi_n: vec![0; n],
            isi_sum: vec![0.0; n],
            isi_sum2: vec![0.0; n],
            spikes: 0,
        }
    }

    /// Adds spikes (`tick >= 1`), in time order per neuron.
    pub fn add(&mut self, spikes: &[(u32, u32)]) {
        for &(t, id) in spikes {
            let i = id as usize;
            if self.last[i] != 0 {
                let d = (t - self.last[i]) as f64;
                self.isi_n[i] += 1;
                self.isi_sum[i] += d;
                self.isi_sum2[i] += d * d;
            }
            self.last[i] = t;
        }
        self.spikes += spikes.len() as u64;
    }

    /// The statistics after `t_ms` of simulated time.
    pub fn stats(&self, t_ms: f64) -> Stats {
        let n = self.last.len();
        let (mut cv, mut k) = (0.0, 0u32);
        for i in 0..n {
            let m = self.isi_n[i] as f64;
            if self.isi_n[i] >= 2 {
                let mean = self.isi_sum[i] / m;
                let var = (self.isi_sum2[i] / m - mean * mean).max(0.0);
                cv += var.sqrt() / mean;
                k += 1;
            }
        }
        Stats {
            spikes: self.spikes,
            rate_hz: if t_ms > 0.0 && n > 0 {
                self.spikes as f64 / n as f64 / (t_ms / 1000.0)
            } else {
                0.0
            },
            cv_isi: if k > 0 { cv / k as f64 } else { 0.0 },
            cv_neurons: k,
        }
    }
}
