//! The figures: raster (with the population rate under it), firing-rate bars, ISI
//! CV histogram and an overview of the three, each as PNG and SVG.
//!
//! Every figure is drawn by the same code on both of plotters' backends, so the
//! SVG twin holds the same marks and the same text (as `<text>` elements) as the
//! PNG. Sizes are in pixels; PNGs carry a 150 dpi resolution tag, so a 1400 px
//! wide raster prints 23.7 cm wide.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::font::{self, Label};
use crate::stats::{self, Analysis, IdIndex};
use crate::{thousands_f, Error, Recording, Result, RunInfo, Written};

/// The figures this crate draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Plot {
    /// Spike raster of a selection of neurons per population, with the population
    /// rate of all neurons under it; the title names the run.
    Raster,
    /// Mean firing rate per population, ± the standard deviation across neurons.
    FiringRates,
    /// Histogram of the neurons' CV of inter-spike intervals, per population (one
    /// panel per group).
    CvIsi,
    /// The three side by side under the run's title.
    Overview,
}

impl Plot {
    /// Every figure, in the order the report shows them.
    pub const ALL: [Plot; 4] = [Plot::Overview, Plot::Raster, Plot::FiringRates, Plot::CvIsi];

    /// The file name without extension (`raster` for `raster.png` and `raster.svg`).
    pub fn file_stem(self) -> &'static str {
        match self {
            Plot::Raster => "raster",
            Plot::FiringRates => "firing-rates",
            Plot::CvIsi => "cv-isi",
            Plot::Overview => "overview",
        }
    }

    /// Width and height in pixels.
    pub fn size(self) -> (u32, u32) {
        match self {
            Plot::Raster => (1400, 900),
            Plot::FiringRates => (1000, 700),
            Plot::CvIsi => (1000, 700),
            Plot::Overview => (2000, 1100),
        }
    }

    /// A sentence saying what the figure shows.
    pub fn caption(self) -> &'static str {
        match self {
            Plot::Raster => "Spike raster (each dot a spike of one neuron) and the population rate of all neurons.",
            Plot::FiringRates => "Firing rate per population: mean over its neurons, error bars ± one standard deviation across neurons.",
            Plot::CvIsi => "Coefficient of variation of the inter-spike intervals, per neuron with at least 3 spikes, as a fraction of the population's neurons.",
            Plot::Overview => "Overview: raster and population rate, firing rates and ISI CV distributions.",
        }
    }
}

/// Which neurons the raster shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rows {
    /// The first `n` neurons of every population (all of a smaller one).
    PerPopulation(u32),
    /// About `n` neurons in all, shared in proportion to the populations' sizes (at
    /// least one each), evenly spaced over each population's ids.
    Proportional(u32),
}

/// How the figures are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlotOptions {
    /// The neurons of the raster.
    pub rows: Rows,
    /// Bin of the population rate under the raster (ms); `None`: 1 ms up to 2 s
    /// shown, longer windows in 1000 bins. At most [`MAX_RATE_BINS`] bins fit
    /// the window (a smaller bin is refused).
    pub rate_bin_ms: Option<f64>,
    /// Draw the text (titles, tick labels, axis titles, legends). Without it the
    /// figures have the same layout and marks and no glyphs, e.g. for thumbnails or
    /// to check what the text adds.
    pub text: bool,
}

impl Default for PlotOptions {
    fn default() -> PlotOptions {
        PlotOptions {
            rows: Rows::PerPopulation(50),
            rate_bin_ms: None,
            text: true,
        }
    }
}

/// Draws `plot` as a PNG file's bytes.
pub fn render_png(
    plot: Plot,
    rec: &Recording,
    run: &RunInfo,
    opts: &PlotOptions,
) -> Result<Vec<u8>> {
    let p = Prepared::new(rec, run, opts)?;
    p.png(plot)
}

/// Draws `plot` as an SVG document.
pub fn render_svg(
    plot: Plot,
    rec: &Recording,
    run: &RunInfo,
    opts: &PlotOptions,
) -> Result<String> {
    let p = Prepared::new(rec, run, opts)?;
    p.svg(plot)
}

/// Writes every figure as `DIR/<stem>.png` and `DIR/<stem>.svg` (atomically).
/// A `dir` that is, or goes through, a link another user made is refused
/// ([`crate::check_dir`]).
pub fn write_all(
    dir: &Path,
    rec: &Recording,
    run: &RunInfo,
    opts: &PlotOptions,
) -> Result<Written> {
    crate::check_dir(dir)?;
    let p = Prepared::new(rec, run, opts)?;
    let mut plots = Vec::new();
    for kind in Plot::ALL {
        let (png, svg) = p.write(kind, dir)?;
        plots.push((kind, png, svg));
    }
    Ok(Written {
        report: None,
        plots,
    })
}

pub use crate::stats::MAX_RATE_BINS;

/// Pixels per metre of the PNGs' resolution tag (150 dpi).
const PIXELS_PER_METRE: u32 = 5906;
/// Text and axes.
const INK: RGBColor = RGBColor(0x20, 0x20, 0x20);
/// Grid lines and separators between populations.
const RULE: RGBColor = RGBColor(0xD0, 0xD0, 0xD0);
/// Separators between groups.
const RULE_DARK: RGBColor = RGBColor(0x80, 0x80, 0x80);
/// Secondary text (notes).
const MUTED: RGBColor = RGBColor(0x60, 0x60, 0x60);

/// Font sizes (pixels per em) at scale 1.
const EM_TITLE: f64 = 28.0;
const EM_CAPTION: f64 = 24.0;
const EM_AXIS: f64 = 23.0;
const EM_TICK: f64 = 21.0;
const EM_LEGEND: f64 = 21.0;
const EM_NOTE: f64 = 18.0;

/// One block of raster rows: a population's shown neurons.
#[derive(Clone, Debug)]
struct Block {
    /// The first row (0 at the top).
    row: u32,
    /// Rows (neurons shown).
    n: u32,
    /// Id step between shown neurons.
    stride: u32,
}

/// Everything the figures need, computed once.
pub(crate) struct Prepared<'a> {
    rec: &'a Recording,
    title: String,
    pub(crate) analysis: Analysis,
    blocks: Vec<Block>,
    rows: u32,
    rate: Vec<f64>,
    bin_ms: f64,
    spikes: std::borrow::Cow<'a, [(u32, u32)]>,
    index: IdIndex,
    text: bool,
}

mod canvas;
mod histogram;
mod output;
mod raster;
mod rates;
mod scale;

use canvas::{x_gutter, y_gutter, Canvas, DResult, Frame, Rect};
use scale::{axis_to, cv_axis_max, nice_step, rate_axis_max, ticks, wrap_title};

impl<'a> Prepared<'a> {
    pub(crate) fn new(
        rec: &'a Recording,
        run: &RunInfo,
        opts: &PlotOptions,
    ) -> Result<Prepared<'a>> {
        let analysis = stats::analyse(rec)?;
        let mut blocks = Vec::new();
        let mut row = 0;
        let total = rec.neurons() as f64;
        for p in &rec.populations {
            let n = match opts.rows {
                Rows::PerPopulation(n) => n.min(p.count),
                Rows::Proportional(n) => {
                    ((n as f64 * p.count as f64 / total).round() as u32).clamp(1, p.count)
                }
            };
            if n == 0 {
                return Err(Error::Input(
                    "the raster must show at least one neuron per population".into(),
                ));
            }
            let stride = match opts.rows {
                Rows::PerPopulation(_) => 1,
                Rows::Proportional(_) => (p.count / n).max(1),
            };
            blocks.push(Block { row, n, stride });
            row += n;
        }
        let dur = rec.duration_ms();
        let bin_ms = match opts.rate_bin_ms {
            Some(b) if b.is_finite() && b > 0.0 => b.max(rec.dt_ms),
            Some(b) => {
                return Err(Error::Input(format!(
                    "rate_bin_ms must be > 0, got {}",
                    hpc_io::message::num(b)
                )))
            }
            None if dur <= 2000.0 => 1.0f64.max(rec.dt_ms),
            None => (dur / 1000.0).max(rec.dt_ms),
        };
        // The population rate holds a bin per `bin_ms` of the window, and the
        // figures a mark per bin: a bin given by the caller is refused before
        // that is allocated when the window holds more than a figure draws.
        let rate = stats::population_rate(rec, bin_ms)?;
        Ok(Prepared {
            title: run.title(dur),
            analysis,
            blocks,
            rows: row,
            rate,
            bin_ms,
            spikes: stats::windowed(rec),
            index: IdIndex::new(&rec.populations),
            text: opts.text,
            rec,
        })
    }

    fn draw<DB: DrawingBackend>(
        &self,
        plot: Plot,
        root: &DrawingArea<DB, Shift>,
        glyphs: bool,
    ) -> DResult<DB> {
        root.fill(&WHITE)?;
        let (w, h) = root.dim_in_pixel();
        let (w, h) = (w as i32, h as i32);
        let c = Canvas {
            root,
            glyphs,
            ink: if self.text {
                INK.to_rgba()
            } else {
                TRANSPARENT
            },
            muted: if self.text {
                MUTED.to_rgba()
            } else {
                TRANSPARENT
            },
        };
        let all = Rect {
            l: 0,
            t: 0,
            r: w,
            b: h,
        };
        match plot {
            Plot::Raster => {
                let top = self.heading(&c, all, 1.0)?;
                self.raster(&c, all.inset(top, 30, 10, 16), 1.0)
            }
            Plot::FiringRates => self.firing_rates(
                &c,
                all.inset(14, 24, 12, 24),
                1.0,
                "Firing rate per population (mean ± SD across neurons)",
            ),
            Plot::CvIsi => self.cv_isi(
                &c,
                all.inset(14, 24, 12, 16),
                1.0,
                "Irregularity: CV of inter-spike intervals",
            ),
            Plot::Overview => {
                let k = 1.15;
                let top = self.heading(&c, all, k)?;
                let body = all.inset(top, 24, 12, 16);
                let split = body.l + (body.w() as f64 * 0.6) as i32;
                self.raster(&c, Rect { r: split, ..body }, k)?;
                let right = Rect {
                    l: split + 40,
                    ..body
                };
                let mid = right.t + right.h() * 44 / 100;
                self.firing_rates(
                    &c,
                    Rect {
                        b: mid - 10,
                        ..right
                    },
                    k,
                    "Firing rate (mean ± SD)",
                )?;
                self.cv_isi(
                    &c,
                    Rect {
                        t: mid + 14,
                        ..right
                    },
                    k,
                    "CV of inter-spike intervals",
                )
            }
        }
    }

    /// The title (wrapped onto several lines when it does not fit) and the
    /// population legend; returns the height they take.
    fn heading<DB: DrawingBackend>(
        &self,
        c: &Canvas<DB>,
        area: Rect,
        k: f64,
    ) -> Result<i32, DrawingAreaErrorKind<DB::ErrorType>> {
        let em = EM_TITLE * k;
        let mut y = (14.0 * k) as i32;
        let lines = wrap_title(&self.title, |s| font::width(s, em), area.w() - 40);
        for l in &lines {
            c.label(
                l,
                (area.l + area.w() / 2, y),
                em,
                Pos::new(HPos::Center, VPos::Top),
            )?;
            y += (em * 1.45) as i32;
        }
        y += (4.0 * k) as i32;
        y += self.legend_row(c, (area.l + 30, y), area.w() - 60, k)?;
        Ok(y + (6.0 * k) as i32)
    }

    /// Colour swatches and names of the populations in a row (wrapping), and what
    /// the raster shows of them; returns the height used.
    fn legend_row<DB: DrawingBackend>(
        &self,
        c: &Canvas<DB>,
        (x0, y0): (i32, i32),
        width: i32,
        k: f64,
    ) -> Result<i32, DrawingAreaErrorKind<DB::ErrorType>> {
        let em = EM_LEGEND * k;
        let sw = (em * 0.8) as i32;
        let line_h = (em * 1.7) as i32;
        let gap = (em * 1.5) as i32;
        let mut entries: Vec<(Option<RGBColor>, String)> = self
            .rec
            .populations
            .iter()
            .map(|p| (Some(rgb(p.color)), p.name.clone()))
            .collect();
        entries.push((None, self.rows_note()));
        let (mut x, mut y) = (x0, y0);
        for (color, label) in entries {
            let tw = font::width(&label, em);
            let ew = tw + if color.is_some() { sw + 8 } else { 0 };
            if x > x0 && x + ew > x0 + width {
                x = x0;
                y += line_h;
            }
            let mid = y + line_h / 2;
            match color {
                Some(col) => {
                    let top = mid - sw / 2 - 1;
                    c.rect((x, top), (x + sw, top + sw), col.filled())?;
                    x += sw + 8;
                    c.label(&label, (x, mid), em, Pos::new(HPos::Left, VPos::Center))?;
                }
                None => c.note(
                    &label,
                    (x, mid),
                    EM_NOTE * k,
                    Pos::new(HPos::Left, VPos::Center),
                )?,
            }
            x += tw + gap;
        }
        Ok(y + line_h - y0)
    }

    fn rows_note(&self) -> String {
        let shown: u64 = self.blocks.iter().map(|b| b.n as u64).sum();
        let all = self.rec.neurons();
        if shown == all {
            "raster: every neuron".into()
        } else if self.blocks.iter().all(|b| b.stride == 1) {
            let n = self.blocks.iter().map(|b| b.n).max().unwrap_or(0);
            format!("raster: the first {n} neurons of each population")
        } else {
            format!(
                "raster: {} of {} neurons, evenly spaced in each population",
                crate::thousands(shown),
                crate::thousands(all)
            )
        }
    }
}

fn rgb(c: crate::Rgb) -> RGBColor {
    RGBColor(c.0, c.1, c.2)
}

fn draw_err<E: std::error::Error + Send + Sync>(plot: Plot, e: DrawingAreaErrorKind<E>) -> Error {
    Error::Draw {
        figure: plot.file_stem().into(),
        message: e.to_string(),
    }
}
