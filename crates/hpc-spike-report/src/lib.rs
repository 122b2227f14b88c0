//! # Spike reports: labelled plots and a one-page run report
//!
//! For spiking-network codes on hpc-rs (the `brunel` and `microcircuit` examples
//! use it; a network of your own on `hpc-spiking` can too). It is a crate of its
//! own, published, so that no example depends on another. Given the populations of a
//! network (names, colours, contiguous id ranges, optionally a group such as the
//! cortical layer), the recorded spikes as `(tick, neuron id)` and a description
//! of the run, it draws
//!
//! - a **raster** with the network's population rate under it (time in ms, neuron
//!   index or layer labels, a title naming model, size, ranks and simulated time,
//!   a population legend),
//! - per-population **firing-rate** bars (mean ± SD across neurons),
//! - an **ISI CV** histogram (one panel per group),
//! - an **overview** with the three side by side,
//!
//! each as PNG and as an SVG twin ([`plot`]), and writes a self-contained
//! `report.html` ([`report`]): the plots inlined as data URIs, the summary table,
//! per-population statistics, parameters, the validation against a reference
//! simulator where the run has one, and the split of the run time. The page loads
//! nothing from the network (its Content-Security-Policy forbids it).
//!
//! Text is drawn with DejaVu Sans, shipped in this crate (see `fonts/LICENSE`), so
//! nothing depends on the fonts installed on the machine. The default palette is
//! Okabe and Ito's, which stays distinct for the common forms of colour blindness.
//! Every file is written under a temporary name and renamed when complete.
//!
//! ```
//! use hpc_spike_report::{palette, plot, Population, Recording, RunInfo};
//! let rec = Recording {
//!     populations: vec![
//!         Population::new("E", 0, 80, palette::EXCITATORY),
//!         Population::new("I", 80, 20, palette::INHIBITORY),
//!     ],
//!     // (tick, neuron id): neuron 3 fires at 1.0, 2.0 and 3.5 ms, neuron 90 at 2.5 ms.
//!     spikes: vec![(10, 3), (20, 3), (25, 90), (35, 3)],
//!     dt_ms: 0.1,
//!     t_start_ms: 0.0,
//!     t_stop_ms: 5.0,
//!     group_title: None,
//! };
//! let run = RunInfo::new("Toy network", 100, 1, 1);
//! let png = plot::render_png(plot::Plot::Raster, &rec, &run, &plot::PlotOptions::default())?;
//! assert_eq!(&png[1..4], b"PNG");
//! # Ok::<(), hpc_spike_report::Error>(())
//! ```

use std::path::{Path, PathBuf};

mod font;
mod io;
pub mod palette;
pub mod plot;
pub mod report;
pub mod stats;

pub use io::write_atomic;

/// What can go wrong while plotting or writing a report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The recording or the report's data make no sense (names the field and why).
    #[error("invalid input: {0}")]
    Input(String),
    /// The drawing library failed (names the figure).
    #[error("drawing {figure}: {message}")]
    Draw {
        /// The figure being drawn.
        figure: String,
        /// The drawing library's message.
        message: String,
    },
    /// A file could not be written (names the file; nothing under the final name
    /// was changed).
    #[error("writing {}", hpc_io::message::path(path))]
    Write {
        /// The file that was being written.
        path: PathBuf,
        /// The step that failed (create, write, sync, rename) and why, or a final
        /// name that is not a regular file (a directory, a device, a FIFO).
        source: hpc_io::atomic::StepError,
    },
}

/// Results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Checks a directory the figures and the report are written into with
/// [`hpc_io::rundir::check_dir_link`]: one that is, or goes through, a link
/// another user planted is refused ([`Error::Input`], naming the link), as the
/// figures went where it pointed; an empty path is the current directory.
pub fn check_dir(dir: &Path) -> Result<()> {
    if dir.as_os_str().is_empty() {
        return Ok(());
    }
    hpc_io::rundir::check_dir_link(dir).map_err(|e| Error::Input(e.to_string()))
}

/// An sRGB colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rgb(pub u8, pub u8, pub u8);

impl Rgb {
    /// `#rrggbb`, as CSS and SVG write it.
    pub fn hex(self) -> String {
        format!("#{:02x}{:02x}{:02x}", self.0, self.1, self.2)
    }
}

/// A population: a contiguous range of neuron ids drawn in one colour.
#[derive(Clone, Debug, PartialEq)]
pub struct Population {
    /// Short name shown in legends and on axes (`E`, `L2/3I`).
    pub name: String,
    /// First neuron id.
    pub first: u32,
    /// Number of neurons (`first..first + count`).
    pub count: u32,
    /// Colour of its spikes, bars and histogram.
    pub color: Rgb,
    /// The group it belongs to, such as its cortical layer (`L2/3`). When every
    /// population has one, the raster labels its y axis with the groups (one tick
    /// in the middle of each group, as NEST's microcircuit example draws it) and
    /// the CV histogram gets one panel per group.
    pub group: Option<String>,
}

impl Population {
    /// A population without a group.
    pub fn new(name: impl Into<String>, first: u32, count: u32, color: Rgb) -> Population {
        Population {
            name: name.into(),
            first,
            count,
            color,
            group: None,
        }
    }

    /// The same population in group `group`.
    pub fn in_group(mut self, group: impl Into<String>) -> Population {
        self.group = Some(group.into());
        self
    }

    /// Whether neuron `id` belongs to it.
    pub fn contains(&self, id: u32) -> bool {
        id >= self.first && id - self.first < self.count
    }
}

/// The recorded activity of a network.
#[derive(Clone, Debug)]
pub struct Recording {
    /// The populations, in the order they are drawn (top to bottom in the raster).
    pub populations: Vec<Population>,
    /// `(tick, neuron id)`: a spike at `tick * dt_ms` ms. Any order; spikes outside
    /// `t_start_ms..=t_stop_ms` are not shown nor counted.
    pub spikes: Vec<(u32, u32)>,
    /// Length of a tick (ms).
    pub dt_ms: f64,
    /// Start of the window that is shown and analysed (ms), e.g. after a transient.
    pub t_start_ms: f64,
    /// End of the window (ms): the simulated time for a whole run.
    pub t_stop_ms: f64,
    /// Title of the raster's y axis when the populations have groups (`layer`).
    pub group_title: Option<String>,
}

impl Recording {
    /// Checks the populations, the time window and that every spike belongs to a
    /// population; the error names the offending item (a long name cut, as
    /// [`hpc_env::shown`] cuts it: a name read from a file's header can be of any
    /// length).
    pub fn validate(&self) -> Result<()> {
        use hpc_env::shown;
        // Numbers as a message writes them (1e300 was written in its 301 digits).
        use hpc_io::message::num;
        let bad = |m: String| Err(Error::Input(m));
        if self.populations.is_empty() {
            return bad("no populations".into());
        }
        if !(self.dt_ms.is_finite() && self.dt_ms > 0.0) {
            return bad(format!("dt_ms must be > 0, got {}", num(self.dt_ms)));
        }
        if !(self.t_start_ms.is_finite()
            && self.t_stop_ms.is_finite()
            && self.t_stop_ms > self.t_start_ms
            && self.t_start_ms >= 0.0)
        {
            return bad(format!(
                "the time window {} ms ..= {} ms is empty or not finite",
                num(self.t_start_ms),
                num(self.t_stop_ms)
            ));
        }
        let mut ranges: Vec<(u64, u64, &str)> = Vec::new();
        for p in &self.populations {
            if p.name.trim().is_empty() {
                return bad(format!("population at id {} has no name", p.first));
            }
            if p.count == 0 {
                return bad(format!("population {} has no neurons", shown(&p.name)));
            }
            let end = p.first as u64 + p.count as u64;
            if end > u32::MAX as u64 + 1 {
                return bad(format!(
                    "population {} runs past id {}",
                    shown(&p.name),
                    u32::MAX
                ));
            }
            ranges.push((p.first as u64, end, &p.name));
        }
        ranges.sort();
        for w in ranges.windows(2) {
            if w[1].0 < w[0].1 {
                return bad(format!(
                    "populations {} and {} overlap (ids {}..{} and {}..{})",
                    shown(w[0].2),
                    shown(w[1].2),
                    w[0].0,
                    w[0].1,
                    w[1].0,
                    w[1].1
                ));
            }
        }
        let grouped = self
            .populations
            .iter()
            .filter(|p| p.group.is_some())
            .count();
        if grouped != 0 && grouped != self.populations.len() {
            return bad("either every population has a group or none has".into());
        }
        let index = stats::IdIndex::new(&self.populations);
        if let Some(&(t, id)) = self.spikes.iter().find(|&&(_, id)| index.of(id).is_none()) {
            return bad(format!(
                "the spike of neuron {id} at {} ms belongs to no population",
                num(t as f64 * self.dt_ms)
            ));
        }
        Ok(())
    }

    /// Whether every population has a group.
    pub fn grouped(&self) -> bool {
        self.populations.iter().all(|p| p.group.is_some())
    }

    /// The number of neurons of all populations.
    pub fn neurons(&self) -> u64 {
        self.populations.iter().map(|p| p.count as u64).sum()
    }

    /// The window's length in ms.
    pub fn duration_ms(&self) -> f64 {
        self.t_stop_ms - self.t_start_ms
    }
}

/// What ran: shown in the raster's title and the report's heading.
#[derive(Clone, Debug, PartialEq)]
pub struct RunInfo {
    /// The model (`Brunel (2000) balanced network`).
    pub model: String,
    /// Neurons in the network.
    pub neurons: u64,
    /// Synapses in the network, where known.
    pub synapses: Option<u64>,
    /// Ranks (processes).
    pub ranks: u32,
    /// Threads per rank.
    pub threads: u32,
}

impl RunInfo {
    /// A run of `model` with `neurons` neurons on `ranks` x `threads`.
    pub fn new(model: impl Into<String>, neurons: u64, ranks: u32, threads: u32) -> RunInfo {
        RunInfo {
            model: model.into(),
            neurons,
            synapses: None,
            ranks,
            threads,
        }
    }

    /// The title of the raster and the report: model, size, ranks and simulated
    /// time, e.g. `Brunel network · 12,500 neurons, 15.6 M synapses · 2 ranks × 1
    /// thread · 1,000 ms simulated`.
    pub fn title(&self, simulated_ms: f64) -> String {
        let mut s = format!("{} · {} neurons", self.model, thousands(self.neurons));
        if let Some(syn) = self.synapses {
            s.push_str(&format!(", {} synapses", si(syn as f64)));
        }
        let plural = |n: u32, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
        s.push_str(&format!(
            " · {} × {} · {} ms simulated",
            plural(self.ranks, "rank"),
            plural(self.threads, "thread"),
            thousands_f(simulated_ms)
        ));
        s
    }
}

/// `12500` as `12,500`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A time or count with thousands separators, keeping up to 3 decimals that are
/// not zero (`1000` as `1,000`, `12.5` as `12.5`); from 10^15 on in exponent form
/// (`1e300`: its whole part would not fit a `u64`, and 301 digits say nothing).
pub fn thousands_f(x: f64) -> String {
    if !x.is_finite() || x.abs() >= 1e15 {
        return hpc_io::message::num(x);
    }
    let neg = x < 0.0;
    let x = x.abs();
    let whole = x.trunc() as u64;
    let frac = format!("{:.3}", x - whole as f64);
    // `0.9996` rounds to `1.000`: carry.
    let (whole, frac) = if frac.starts_with('1') {
        (whole + 1, String::new())
    } else {
        (whole, frac[1..].trim_end_matches('0').to_string())
    };
    let frac = if frac == "." { String::new() } else { frac };
    format!("{}{}{}", if neg { "-" } else { "" }, thousands(whole), frac)
}

/// `15625000` as `15.6 M` (k, M, G with 3 significant digits).
pub fn si(x: f64) -> String {
    // Beyond a thousand million G (and for infinity and NaN) a number as
    // `hpc_io::message::num` writes it: 1e300 was written with its 300 digits
    // and a unit, infinity as "inf G".
    if !x.is_finite() || x.abs() >= 1e15 {
        return hpc_io::message::num(x);
    }
    let (v, unit) = if x.abs() >= 1e9 {
        (x / 1e9, " G")
    } else if x.abs() >= 1e6 {
        (x / 1e6, " M")
    } else if x.abs() >= 1e4 {
        (x / 1e3, " k")
    } else {
        return thousands_f(x.round());
    };
    let digits = if v.abs() >= 100.0 {
        0
    } else if v.abs() >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$}{unit}")
}

/// The files a call wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// The HTML report, when one was written.
    pub report: Option<PathBuf>,
    /// Every plot: `(kind, png, svg)`.
    pub plots: Vec<(plot::Plot, PathBuf, PathBuf)>,
}

impl Written {
    /// The PNG of `kind`, if it was written.
    pub fn png(&self, kind: plot::Plot) -> Option<&Path> {
        self.plots
            .iter()
            .find(|p| p.0 == kind)
            .map(|p| p.1.as_path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_for_people() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(12500), "12,500");
        assert_eq!(thousands(15625000), "15,625,000");
        assert_eq!(thousands_f(1000.0), "1,000");
        assert_eq!(thousands_f(12.5), "12.5");
        assert_eq!(thousands_f(0.9999), "1");
        // Pass 15: beyond u64 the whole part saturated (1e300 as
        // "18,446,744,073,709,551,615").
        assert_eq!(thousands_f(1e300), "1e300");
        assert_eq!(thousands_f(-2.5e19), "-2.5e19");
        assert_eq!(thousands_f(-1234.5), "-1,234.5");
        assert_eq!(si(15_625_000.0), "15.6 M");
        assert_eq!(si(2_000.0), "2,000");
        assert_eq!(si(250_000.0), "250 k");
        assert_eq!(si(1.2e9), "1.20 G");
        // Beyond a thousand million G, and infinity: written as `num` writes
        // them (1e300 came with its 300 digits and " G", infinity as "inf G").
        assert_eq!(si(1e300), "1e300");
        assert_eq!(si(-1e300), "-1e300");
        assert_eq!(si(f64::INFINITY), "inf");
        assert_eq!(si(f64::NAN), "NaN");
        assert_eq!(si(999e12), "999000 G");
    }

    /// A population's name, which a spike file's header may give at any length,
    /// is cut in the refusals (100,000 characters were echoed whole).
    #[test]
    fn long_population_names_are_cut_in_refusals() {
        let long = "N".repeat(100_000);
        let rec = |pops: Vec<Population>| Recording {
            populations: pops,
            spikes: Vec::new(),
            dt_ms: 0.1,
            t_start_ms: 0.0,
            t_stop_ms: 10.0,
            group_title: None,
        };
        let c = Rgb(0, 0, 0);
        for r in [
            rec(vec![Population::new(long.as_str(), 0, 0, c)]),
            rec(vec![Population::new(long.as_str(), u32::MAX, 2, c)]),
            rec(vec![
                Population::new(long.as_str(), 0, 10, c),
                Population::new(long.as_str(), 5, 10, c),
            ]),
        ] {
            let e = r.validate().unwrap_err().to_string();
            assert!(e.len() < 400 && e.contains("more characters"), "{e}");
        }
    }

    #[test]
    fn the_title_names_model_size_ranks_and_time() {
        let mut run = RunInfo::new("Brunel network", 12500, 2, 1);
        run.synapses = Some(15_625_000);
        assert_eq!(
            run.title(1000.0),
            "Brunel network · 12,500 neurons, 15.6 M synapses · 2 ranks × 1 thread · 1,000 ms simulated"
        );
    }

    fn rec() -> Recording {
        Recording {
            populations: vec![
                Population::new("E", 0, 8, palette::EXCITATORY),
                Population::new("I", 8, 2, palette::INHIBITORY),
            ],
            spikes: vec![(1, 0), (2, 9)],
            dt_ms: 0.1,
            t_start_ms: 0.0,
            t_stop_ms: 10.0,
            group_title: None,
        }
    }

    #[test]
    fn bad_recordings_are_named() {
        rec().validate().unwrap();
        let mut r = rec();
        r.spikes.push((3, 10));
        let e = r.validate().unwrap_err().to_string();
        assert!(
            e.contains("neuron 10") && e.contains("no population"),
            "{e}"
        );
        let mut r = rec();
        r.populations[1].first = 7;
        let e = r.validate().unwrap_err().to_string();
        assert!(e.contains("\"E\" and \"I\" overlap"), "{e}");
        let mut r = rec();
        r.t_stop_ms = 0.0;
        assert!(r.validate().unwrap_err().to_string().contains("window"));
        let mut r = rec();
        r.dt_ms = f64::NAN;
        assert!(r.validate().unwrap_err().to_string().contains("dt_ms"));
        let mut r = rec();
        r.populations[0].group = Some("L4".into());
        assert!(r.validate().unwrap_err().to_string().contains("group"));
        let mut r = rec();
        r.populations[1].count = 0;
        assert!(r
            .validate()
            .unwrap_err()
            .to_string()
            .contains("\"I\" has no neurons"));
    }

    /// Huge and tiny numbers in the refusals are written short, as the
    /// examples' summaries write theirs (pass 17): a dt of -1e300 was written
    /// out in 301 digits, a time window of 1e300 ms in two such numbers.
    #[test]
    fn huge_numbers_in_refusals_are_written_short() {
        let mut r = rec();
        r.dt_ms = -1e300;
        assert_eq!(
            r.validate().unwrap_err().to_string(),
            "invalid input: dt_ms must be > 0, got -1e300"
        );
        let mut r = rec();
        r.t_start_ms = 1e300;
        r.t_stop_ms = 1e-300;
        let e = r.validate().unwrap_err().to_string();
        assert!(e.contains("1e300 ms ..= 1e-300 ms"), "{e}");
        let mut r = rec();
        r.dt_ms = 1e300;
        r.t_stop_ms = f64::MAX;
        r.spikes.push((3, 10));
        let e = r.validate().unwrap_err().to_string();
        assert!(e.len() < 120 && e.contains("at 3e300 ms"), "{e}");
    }
}
