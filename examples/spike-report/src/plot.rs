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
    /// shown, longer windows in 1000 bins.
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
pub fn write_all(
    dir: &Path,
    rec: &Recording,
    run: &RunInfo,
    opts: &PlotOptions,
) -> Result<Written> {
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

type DResult<DB> = std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// A pixel rectangle: `(left, top, right, bottom)`.
#[derive(Clone, Copy, Debug)]
struct Rect {
    l: i32,
    t: i32,
    r: i32,
    b: i32,
}

impl Rect {
    fn w(&self) -> i32 {
        self.r - self.l
    }
    fn h(&self) -> i32 {
        self.b - self.t
    }
    fn inset(&self, t: i32, r: i32, b: i32, l: i32) -> Rect {
        Rect {
            l: self.l + l,
            t: self.t + t,
            r: self.r - r,
            b: self.b - b,
        }
    }
}

/// A plot frame: the pixel box of the data and the data ranges it shows (y up).
#[derive(Clone, Copy, Debug)]
struct Frame {
    px: Rect,
    x: (f64, f64),
    y: (f64, f64),
}

impl Frame {
    fn x(&self, v: f64) -> i32 {
        let f = (v - self.x.0) / (self.x.1 - self.x.0);
        self.px.l + (f * self.px.w() as f64).round() as i32
    }
    fn y(&self, v: f64) -> i32 {
        let f = (v - self.y.0) / (self.y.1 - self.y.0);
        self.px.b - (f * self.px.h() as f64).round() as i32
    }
    fn pt(&self, x: f64, y: f64) -> (i32, i32) {
        (self.x(x), self.y(y))
    }
}

/// Where and how a figure is drawn.
struct Canvas<'r, DB: DrawingBackend> {
    root: &'r DrawingArea<DB, Shift>,
    /// Rasterise text (bitmaps) rather than write it (SVG).
    glyphs: bool,
    /// Text colour (transparent when text is off).
    ink: RGBAColor,
    muted: RGBAColor,
}

impl<DB: DrawingBackend> Canvas<'_, DB> {
    fn label(&self, s: &str, at: (i32, i32), em: f64, pos: Pos) -> DResult<DB> {
        self.root
            .draw(&Label::new(s, at, em, self.ink, pos, self.glyphs))
    }
    fn note(&self, s: &str, at: (i32, i32), em: f64, pos: Pos) -> DResult<DB> {
        self.root
            .draw(&Label::new(s, at, em, self.muted, pos, self.glyphs))
    }
    fn vlabel(&self, s: &str, at: (i32, i32), em: f64) -> DResult<DB> {
        let pos = Pos::new(HPos::Center, VPos::Center);
        self.root
            .draw(&Label::new(s, at, em, self.ink, pos, self.glyphs).vertical())
    }
    fn line(&self, pts: Vec<(i32, i32)>, style: ShapeStyle) -> DResult<DB> {
        self.root.draw(&PathElement::new(pts, style))
    }
    fn rect(&self, a: (i32, i32), b: (i32, i32), style: ShapeStyle) -> DResult<DB> {
        self.root.draw(&Rectangle::new([a, b], style))
    }

    /// The left and bottom axis lines of `f`.
    fn axes(&self, f: &Frame) -> DResult<DB> {
        let p = f.px;
        self.line(
            vec![(p.l, p.t), (p.l, p.b), (p.r, p.b)],
            INK.stroke_width(1),
        )
    }

    /// Ticks and labels under the x axis; returns the y below the labels.
    fn x_ticks(
        &self,
        f: &Frame,
        ticks: &[f64],
        em: f64,
        labels: bool,
    ) -> Result<i32, DrawingAreaErrorKind<DB::ErrorType>> {
        let tl = (em * 0.4) as i32;
        for &v in ticks {
            let x = f.x(v);
            self.line(vec![(x, f.px.b), (x, f.px.b + tl)], INK.stroke_width(1))?;
            if labels {
                self.label(
                    &thousands_f(v),
                    (x, f.px.b + tl + 5),
                    em,
                    Pos::new(HPos::Center, VPos::Top),
                )?;
            }
        }
        Ok(f.px.b
            + tl
            + 5
            + if labels {
                font::cap_height(em).ceil() as i32
            } else {
                0
            })
    }

    /// Ticks and labels left of the y axis, at `(value, label)`.
    fn y_ticks(&self, f: &Frame, ticks: &[(f64, String)], em: f64) -> DResult<DB> {
        let tl = (em * 0.4) as i32;
        for (v, s) in ticks {
            let y = f.y(*v);
            self.line(vec![(f.px.l - tl, y), (f.px.l, y)], INK.stroke_width(1))?;
            self.label(
                s,
                (f.px.l - tl - 5, y),
                em,
                Pos::new(HPos::Right, VPos::Center),
            )?;
        }
        Ok(())
    }

    /// Horizontal grid lines at `ys`.
    fn grid_y(&self, f: &Frame, ys: &[f64]) -> DResult<DB> {
        for &v in ys {
            let y = f.y(v);
            if y < f.px.b {
                self.line(vec![(f.px.l + 1, y), (f.px.r, y)], RULE.stroke_width(1))?;
            }
        }
        Ok(())
    }
}

/// The space left of a y axis for tick labels of width `label_w` and a title.
fn y_gutter(label_w: i32, k: f64) -> i32 {
    label_w + (EM_TICK * 0.4 * k) as i32 + 5 + (14.0 * k) as i32 + (EM_AXIS * 1.1 * k) as i32 + 6
}

/// The space under an x axis for tick labels and a title.
fn x_gutter(k: f64) -> i32 {
    (EM_TICK * 0.4 * k) as i32
        + 5
        + (EM_TICK * k * 0.8) as i32
        + (14.0 * k) as i32
        + (EM_AXIS * k * 1.15) as i32
        + 4
}

/// Ticks at round numbers from `lo` to `hi`, at most about `max_n`.
fn ticks(lo: f64, hi: f64, max_n: usize) -> Vec<f64> {
    let step = nice_step((hi - lo) / max_n.max(1) as f64);
    let mut v = Vec::new();
    let mut i = (lo / step - 1e-9).ceil() as i64;
    loop {
        let x = i as f64 * step;
        if x > hi + step * 1e-9 {
            break;
        }
        // Round away the representation error of i * step (0.30000000000000004).
        v.push((x / step).round() * step);
        i += 1;
    }
    v
}

/// An axis end at a round tick above `hi`, and the ticks up to it.
fn axis_to(hi: f64, max_n: usize) -> (f64, Vec<f64>) {
    let hi = if hi.is_finite() && hi > 0.0 { hi } else { 1.0 };
    let step = nice_step(hi / max_n.max(1) as f64);
    let end = (hi / step - 1e-9).ceil().max(1.0) * step;
    (end, ticks(0.0, end, max_n + 1))
}

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
            Some(b) => return Err(Error::Input(format!("rate_bin_ms must be > 0, got {b}"))),
            None if dur <= 2000.0 => 1.0f64.max(rec.dt_ms),
            None => (dur / 1000.0).max(rec.dt_ms),
        };
        Ok(Prepared {
            title: run.title(dur),
            analysis,
            blocks,
            rows: row,
            rate: stats::population_rate(rec, bin_ms),
            bin_ms,
            spikes: stats::windowed(rec),
            index: IdIndex::new(&rec.populations),
            text: opts.text,
            rec,
        })
    }

    /// The PNG of `plot`.
    pub(crate) fn png(&self, plot: Plot) -> Result<Vec<u8>> {
        let (w, h) = plot.size();
        let mut buf = vec![0u8; w as usize * h as usize * 3];
        {
            let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
            self.draw(plot, &root, true)
                .map_err(|e| draw_err(plot, e))?;
            root.present().map_err(|e| draw_err(plot, e))?;
        }
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Best);
        enc.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
        enc.set_pixel_dims(Some(png::PixelDimensions {
            xppu: PIXELS_PER_METRE,
            yppu: PIXELS_PER_METRE,
            unit: png::Unit::Meter,
        }));
        let encode = |e: png::EncodingError| Error::Draw {
            figure: plot.file_stem().into(),
            message: format!("encoding the PNG: {e}"),
        };
        let mut wr = enc.write_header().map_err(encode)?;
        wr.write_image_data(&buf).map_err(encode)?;
        wr.finish().map_err(encode)?;
        Ok(out)
    }

    /// The SVG of `plot`.
    pub(crate) fn svg(&self, plot: Plot) -> Result<String> {
        let mut s = String::new();
        {
            let root = SVGBackend::with_string(&mut s, plot.size()).into_drawing_area();
            self.draw(plot, &root, false)
                .map_err(|e| draw_err(plot, e))?;
            root.present().map_err(|e| draw_err(plot, e))?;
        }
        Ok(s)
    }

    /// Writes the PNG and SVG of `plot` into `dir`.
    pub(crate) fn write(&self, plot: Plot, dir: &Path) -> Result<(PathBuf, PathBuf)> {
        let png = dir.join(format!("{}.png", plot.file_stem()));
        let svg = dir.join(format!("{}.svg", plot.file_stem()));
        crate::write_atomic(&png, &self.png(plot)?)?;
        crate::write_atomic(&svg, self.svg(plot)?.as_bytes())?;
        Ok((png, svg))
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

    // ---- raster -----------------------------------------------------------------

    fn raster<DB: DrawingBackend>(&self, c: &Canvas<DB>, area: Rect, k: f64) -> DResult<DB> {
        let (t0, t1) = (self.rec.t_start_ms, self.rec.t_stop_ms);
        let rows = self.rows.max(1) as f64;
        let tick_em = EM_TICK * k;
        let gap = (16.0 * k) as i32;
        let xg = x_gutter(k);
        let raster_b = area.t + ((area.h() - xg) as f64 * 0.72) as i32;
        let rate_t = raster_b + gap;
        let rate_b = area.b - xg;

        // Both panels share the y gutter, sized for the wider labels.
        let labels = self.raster_labels(raster_b - area.t, k);
        let cap = rate_axis_max(&self.rate);
        let (rate_top, rate_ticks) = axis_to(cap, 3);
        let rate_labels: Vec<(f64, String)> =
            rate_ticks.iter().map(|&v| (v, thousands_f(v))).collect();
        let label_w = labels
            .iter()
            .chain(rate_labels.iter())
            .map(|(_, s)| font::width(s, tick_em))
            .max()
            .unwrap_or(0);
        let l = area.l + y_gutter(label_w, k);
        // Room for half of the last time label right of the axis' end.
        let r = area.r - font::width(&thousands_f(t1), tick_em) / 2 - 4;
        let top = Frame {
            px: Rect {
                l,
                t: area.t,
                r,
                b: raster_b,
            },
            x: (t0, t1),
            y: (0.0, rows),
        };
        let x_max_ticks = ((r - l) as f64 / (95.0 * k)).max(2.0) as usize;
        let xt = ticks(t0, t1, x_max_ticks);

        // Separators between populations, darker between groups.
        let grouped = self.rec.grouped();
        for (i, b) in self.blocks.iter().enumerate().skip(1) {
            let y = top.y(rows - b.row as f64);
            let new_group =
                grouped && self.rec.populations[i].group != self.rec.populations[i - 1].group;
            let color = if new_group || !grouped {
                RULE_DARK
            } else {
                RULE
            };
            c.line(
                vec![(top.px.l + 1, y), (top.px.r, y)],
                color.stroke_width(1),
            )?;
        }

        // Spikes: a vertical mark per spike, 2 px wide, most of a row high.
        let row_px = top.px.h() as f64 / rows;
        let half = (0.42 * row_px).clamp(1.0, 4.0).round() as i32;
        let colors: Vec<RGBColor> = self.rec.populations.iter().map(|p| rgb(p.color)).collect();
        let marks = self.spikes.iter().filter_map(|&(t, id)| {
            let (pop, _) = self.index.slot(id)?;
            let b = &self.blocks[pop];
            let off = id - self.rec.populations[pop].first;
            if off % b.stride != 0 || off / b.stride >= b.n {
                return None;
            }
            let row = b.row + off / b.stride;
            let y = top.y(rows - row as f64 - 0.5);
            let x = top.x(t as f64 * self.rec.dt_ms);
            Some(Rectangle::new(
                [(x - 1, y - half), (x + 1, y + half)],
                colors[pop].filled(),
            ))
        });
        for m in marks {
            c.root.draw(&m)?;
        }
        c.axes(&top)?;
        c.x_ticks(&top, &xt, tick_em, false)?;
        let ticks_px: Vec<(f64, String)> =
            labels.iter().map(|(r, s)| (rows - r, s.clone())).collect();
        c.y_ticks(&top, &ticks_px, tick_em)?;
        let y_title = if grouped {
            self.rec
                .group_title
                .clone()
                .unwrap_or_else(|| "group".into())
        } else {
            "neuron index".into()
        };
        let title_x = area.l + (EM_AXIS * k * 0.6) as i32;
        c.vlabel(&y_title, (title_x, (top.px.t + top.px.b) / 2), EM_AXIS * k)?;

        // The population rate of all neurons under it.
        let bottom = Frame {
            px: Rect {
                l,
                t: rate_t,
                r,
                b: rate_b,
            },
            x: (t0, t1),
            y: (0.0, rate_top),
        };
        c.grid_y(&bottom, &rate_ticks[1..])?;
        let pts: Vec<(i32, i32)> = self
            .rate
            .iter()
            .enumerate()
            .flat_map(|(i, &v)| {
                let a = t0 + i as f64 * self.bin_ms;
                let b = (a + self.bin_ms).min(t1);
                let v = v.min(rate_top);
                [bottom.pt(a, v), bottom.pt(b, v)]
            })
            .collect();
        c.line(pts, BLACK.stroke_width(1))?;
        let rate_max = self.rate.iter().copied().fold(0.0, f64::max);
        if rate_max > rate_top {
            // Bins above the axis: a mark at the top, and the peak in words.
            for (i, _) in self.rate.iter().enumerate().filter(|(_, &v)| v > rate_top) {
                let x = bottom.x(t0 + (i as f64 + 0.5) * self.bin_ms);
                let y = bottom.px.t;
                let s = (5.0 * k) as i32;
                c.root.draw(&Polygon::new(
                    vec![(x, y - s), (x - s, y + s / 2), (x + s, y + s / 2)],
                    INK.filled(),
                ))?;
            }
            c.note(
                &format!(
                    "▲ off scale: peak {} Hz in a {} ms bin",
                    thousands_f(rate_max.round()),
                    thousands_f(self.bin_ms)
                ),
                (bottom.px.r - 6, bottom.px.t + 4),
                EM_NOTE * k,
                Pos::new(HPos::Right, VPos::Top),
            )?;
        }
        c.axes(&bottom)?;
        let below = c.x_ticks(&bottom, &xt, tick_em, true)?;
        c.y_ticks(&bottom, &rate_labels, tick_em)?;
        c.label(
            "time (ms)",
            ((bottom.px.l + bottom.px.r) / 2, below + (12.0 * k) as i32),
            EM_AXIS * k,
            Pos::new(HPos::Center, VPos::Top),
        )?;
        c.vlabel(
            "rate (Hz)",
            (title_x, (bottom.px.t + bottom.px.b) / 2),
            EM_AXIS * k,
        )?;
        Ok(())
    }

    /// `(row position from the top, label)` of the raster's y ticks: for grouped
    /// populations one per group at its middle (as NEST's microcircuit example),
    /// otherwise neuron ids at round numbers inside each population, spaced so
    /// that labels never overlap. `height`: the raster's height in pixels.
    fn raster_labels(&self, height: i32, k: f64) -> Vec<(f64, String)> {
        let rows = self.rows.max(1) as f64;
        if self.rec.grouped() {
            let mut out: Vec<(f64, String)> = Vec::new();
            let mut start = 0u32;
            for (i, p) in self.rec.populations.iter().enumerate() {
                let b = &self.blocks[i];
                let last = i + 1 == self.rec.populations.len()
                    || self.rec.populations[i + 1].group != p.group;
                if last {
                    let end = b.row + b.n;
                    out.push((
                        (start + end) as f64 / 2.0,
                        p.group.clone().unwrap_or_default(),
                    ));
                    start = end;
                }
            }
            return out;
        }
        let row_px = height as f64 / rows;
        let min_gap = EM_TICK * k * 2.0;
        let mut out: Vec<(f64, String)> = Vec::new();
        let mut last_y = f64::NEG_INFINITY;
        for (i, p) in self.rec.populations.iter().enumerate() {
            let b = &self.blocks[i];
            // A round step of ids whose labels are at least min_gap apart.
            let step = nice_step(min_gap * b.stride as f64 / row_px).max(1.0) as u64;
            let span = b.n as u64 * b.stride as u64;
            let mut v = 0u64;
            while v < span {
                let id = p.first as u64 + v;
                // Neuron `first + v` sits at the centre of row `v / stride`.
                let row = b.row as f64 + v as f64 / b.stride as f64 + 0.5;
                let y = row * row_px;
                if y - last_y >= min_gap {
                    out.push((row, crate::thousands(id)));
                    last_y = y;
                }
                v = (id / step + 1) * step - p.first as u64;
            }
        }
        out
    }

    // ---- firing rates -------------------------------------------------------------

    fn firing_rates<DB: DrawingBackend>(
        &self,
        c: &Canvas<DB>,
        area: Rect,
        k: f64,
        caption: &str,
    ) -> DResult<DB> {
        let pops = &self.analysis.populations;
        let n = pops.len() as f64;
        let tick_em = EM_TICK * k;
        c.label(
            caption,
            ((area.l + area.r) / 2, area.t),
            EM_CAPTION * k,
            Pos::new(HPos::Center, VPos::Top),
        )?;
        let hi = pops
            .iter()
            .map(|p| p.rate_hz + p.rate_sd_hz)
            .fold(0.0, f64::max);
        let name_w = pops
            .iter()
            .map(|p| font::width(&p.name, tick_em))
            .max()
            .unwrap_or(0);
        let value_w = pops
            .iter()
            .map(|p| font::width(&format!("{:.1}", p.rate_hz), EM_NOTE * k))
            .max()
            .unwrap_or(0);
        let l = area.l + name_w + (EM_TICK * 0.4 * k) as i32 + 10;
        let r = area.r - value_w - 10;
        let max_n = ((r - l) as f64 / (80.0 * k)).clamp(2.0, 8.0) as usize;
        let (xmax, xt) = axis_to(hi * 1.02, max_n);
        let f = Frame {
            px: Rect {
                l,
                t: area.t + (EM_CAPTION * k * 2.0) as i32,
                r,
                b: area.b - x_gutter(k),
            },
            x: (0.0, xmax),
            y: (0.0, n),
        };
        // Vertical grid lines at the x ticks.
        for &v in &xt[1..] {
            let x = f.x(v);
            c.line(vec![(x, f.px.t), (x, f.px.b - 1)], RULE.stroke_width(1))?;
        }
        // Bars 60 % of a row, at most 56 px thick.
        let row_px = f.px.h() as f64 / n;
        let bar = 0.3f64.min(28.0 * k / row_px);
        let cap = bar * 0.4;
        let mut names = Vec::new();
        for (i, p) in pops.iter().enumerate() {
            let y = n - i as f64 - 0.5;
            let col = rgb(self.rec.populations[i].color);
            if p.rate_hz > 0.0 {
                c.rect(f.pt(0.0, y + bar), f.pt(p.rate_hz, y - bar), col.filled())?;
            }
            let (lo, hi) = (
                (p.rate_hz - p.rate_sd_hz).max(0.0),
                p.rate_hz + p.rate_sd_hz,
            );
            let w = ShapeStyle::from(INK).stroke_width(2);
            c.line(vec![f.pt(lo, y), f.pt(hi, y)], w)?;
            c.line(vec![f.pt(lo, y - cap), f.pt(lo, y + cap)], w)?;
            c.line(vec![f.pt(hi, y - cap), f.pt(hi, y + cap)], w)?;
            let (x, yc) = f.pt(hi, y);
            c.note(
                &format!("{:.1}", p.rate_hz),
                (x + 8, yc),
                EM_NOTE * k,
                Pos::new(HPos::Left, VPos::Center),
            )?;
            names.push((y, p.name.clone()));
        }
        c.axes(&f)?;
        let below = c.x_ticks(&f, &xt, tick_em, true)?;
        c.y_ticks(&f, &names, tick_em)?;
        c.label(
            "firing rate (spikes/s)",
            ((f.px.l + f.px.r) / 2, below + (12.0 * k) as i32),
            EM_AXIS * k,
            Pos::new(HPos::Center, VPos::Top),
        )
    }

    // ---- CV of ISI ------------------------------------------------------------------

    fn cv_isi<DB: DrawingBackend>(
        &self,
        c: &Canvas<DB>,
        area: Rect,
        k: f64,
        caption: &str,
    ) -> DResult<DB> {
        // Panels: one per group stacked over a shared x axis, or one for all.
        let mut panels: Vec<(String, Vec<usize>)> = Vec::new();
        if self.rec.grouped() {
            for (i, p) in self.rec.populations.iter().enumerate() {
                let g = p.group.clone().unwrap_or_default();
                match panels.iter_mut().find(|(name, _)| *name == g) {
                    Some((_, v)) => v.push(i),
                    None => panels.push((g, vec![i])),
                }
            }
        } else {
            panels.push((String::new(), (0..self.rec.populations.len()).collect()));
        }
        let stacked = panels.len() > 1;
        let caption = if stacked {
            format!("{caption} (means at right)")
        } else {
            caption.to_string()
        };
        c.label(
            &caption,
            ((area.l + area.r) / 2, area.t),
            EM_CAPTION * k,
            Pos::new(HPos::Center, VPos::Top),
        )?;
        let tick_em = EM_TICK * k;
        let note_em = EM_NOTE * k;
        let line_h = (note_em * 1.45) as i32;
        // Stacked panels put their legends in a column at the right.
        let legend_w = if stacked {
            self.analysis
                .populations
                .iter()
                .map(|p| {
                    font::width(
                        &format!("{} {:.2}", p.name, p.cv_mean.unwrap_or(0.0)),
                        note_em,
                    ) + 40
                })
                .chain(
                    panels
                        .iter()
                        .map(|(g, _)| font::width(g, EM_LEGEND * k) + 10),
                )
                .max()
                .unwrap_or(0)
                + (10.0 * k) as i32
        } else {
            0
        };
        let body = area.inset(
            (EM_CAPTION * k * 2.0) as i32,
            (14.0 * k) as i32 + legend_w,
            0,
            0,
        );
        let gap = if stacked { (18.0 * k) as i32 } else { 0 };
        let n = panels.len() as i32;
        let ph = (body.h() - x_gutter(k) - gap * (n - 1)) / n;

        // Shared x axis: as many ticks as fit with their labels apart.
        let all: Vec<f64> = self
            .analysis
            .populations
            .iter()
            .flat_map(|p| p.cvs.iter().copied())
            .collect();
        let probe = font::width("0.25", tick_em) as f64;
        let label_w = font::width("0.25", tick_em);
        let l = body.l + y_gutter(label_w, k);
        let max_n = ((body.r - l) as f64 / (probe * 2.2)).clamp(2.0, 8.0) as usize;
        let (xmax, xt) = axis_to(cv_axis_max(&all), max_n);
        let bins = 40usize;
        let bw = xmax / bins as f64;
        let hists: Vec<Vec<f64>> = self
            .analysis
            .populations
            .iter()
            .map(|p| {
                let mut h = vec![0f64; bins];
                for &v in &p.cvs {
                    h[((v / bw) as usize).min(bins - 1)] += 1.0;
                }
                let n = p.cvs.len().max(1) as f64;
                h.iter_mut().for_each(|v| *v /= n);
                h
            })
            .collect();

        let mut last = None;
        for (pi, (title, members)) in panels.iter().enumerate() {
            let t = body.t + pi as i32 * (ph + gap);
            // Head room for the legend (and the group's name) above the data.
            let lines = if stacked { 0 } else { members.len() as i32 };
            let legend_h = lines * line_h + 8;
            let room = (1.0 - legend_h as f64 / ph.max(1) as f64).clamp(0.25, 0.9);
            let ymax = members
                .iter()
                .flat_map(|&i| hists[i].iter().copied())
                .fold(0.0, f64::max);
            let (ytop, yt) = axis_to((ymax / room).max(0.01), if stacked { 2 } else { 5 });
            let f = Frame {
                px: Rect {
                    l,
                    t,
                    r: body.r,
                    b: t + ph,
                },
                x: (0.0, xmax),
                y: (0.0, ytop),
            };
            c.grid_y(&f, &yt[1..])?;
            let fill = if members.len() > 1 { 0.12 } else { 0.25 };
            for &i in members {
                if self.analysis.populations[i].cvs.is_empty() {
                    continue;
                }
                let col = rgb(self.rec.populations[i].color);
                let h = &hists[i];
                for (j, &v) in h.iter().enumerate().filter(|(_, &v)| v > 0.0) {
                    c.rect(
                        f.pt(j as f64 * bw, v),
                        f.pt((j + 1) as f64 * bw, 0.0),
                        col.mix(fill).filled(),
                    )?;
                }
                let mut pts = vec![f.pt(0.0, 0.0)];
                for (j, &v) in h.iter().enumerate() {
                    pts.push(f.pt(j as f64 * bw, v));
                    pts.push(f.pt((j + 1) as f64 * bw, v));
                }
                pts.push(f.pt(xmax, 0.0));
                c.line(pts, col.stroke_width(2))?;
            }
            c.axes(&f)?;
            c.x_ticks(&f, &xt, tick_em, pi + 1 == panels.len())?;
            // Stacked panels label only their top (their zero is the axis line).
            let ylabels: Vec<(f64, String)> = yt
                .iter()
                .filter(|&&v| !stacked || v == ytop)
                .map(|&v| (v, thousands_f(v)))
                .collect();
            c.y_ticks(&f, &ylabels, tick_em)?;
            // A single panel: one line per population at the top right (name, mean
            // CV, the neurons that have one). Stacked: the group's name and a line
            // per population (name, mean CV) right of the panel.
            let (mut y, right) = if stacked {
                let h = (members.len() as i32 + 1) * line_h;
                (
                    f.px.t + (f.px.h() - h) / 2,
                    body.r + (14.0 * k) as i32 + legend_w,
                )
            } else {
                (f.px.t + 2, f.px.r - 6)
            };
            if stacked {
                c.label(
                    title,
                    (body.r + (14.0 * k) as i32 + 10, y + line_h / 2),
                    EM_LEGEND * k,
                    Pos::new(HPos::Left, VPos::Center),
                )?;
                y += line_h;
            }
            for &i in members {
                let p = &self.analysis.populations[i];
                let s = match (p.cv_mean, stacked) {
                    (Some(m), false) => format!(
                        "{}: mean {:.2}, n = {}",
                        p.name,
                        m,
                        crate::thousands(p.cvs.len() as u64)
                    ),
                    (Some(m), true) => format!("{} {:.2}", p.name, m),
                    (None, false) => format!("{}: no neuron with 3 spikes", p.name),
                    (None, true) => format!("{} –", p.name),
                };
                let x = right - font::width(&s, note_em);
                let mid = y + line_h / 2;
                c.line(
                    vec![(x - 28, mid), (x - 8, mid)],
                    rgb(self.rec.populations[i].color).stroke_width(3),
                )?;
                c.label(&s, (x, mid), note_em, Pos::new(HPos::Left, VPos::Center))?;
                y += line_h;
            }
            last = Some(f);
        }
        if let Some(f) = last {
            let below =
                f.px.b + (EM_TICK * 0.4 * k) as i32 + 5 + font::cap_height(tick_em).ceil() as i32;
            c.label(
                "CV of ISI",
                ((f.px.l + f.px.r) / 2, below + (12.0 * k) as i32),
                EM_AXIS * k,
                Pos::new(HPos::Center, VPos::Top),
            )?;
            let mid = (body.t + f.px.b) / 2;
            c.vlabel(
                "fraction of neurons",
                (body.l + (EM_AXIS * k * 0.6) as i32, mid),
                EM_AXIS * k,
            )?;
        }
        Ok(())
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

/// Splits a long title at its `·` separators into lines no wider than `max`.
fn wrap_title(title: &str, width: impl Fn(&str) -> i32, max: i32) -> Vec<String> {
    if width(title) <= max {
        return vec![title.to_string()];
    }
    let parts: Vec<&str> = title.split(" · ").collect();
    let mut lines: Vec<String> = Vec::new();
    let mut cur = String::new();
    for p in parts {
        let cand = if cur.is_empty() {
            p.to_string()
        } else {
            format!("{cur} · {p}")
        };
        if !cur.is_empty() && width(&cand) > max {
            lines.push(cur);
            cur = p.to_string();
        } else {
            cur = cand;
        }
    }
    lines.push(cur);
    lines
}

/// The smallest of 1, 2, 2.5, 5 × 10^k that is at least `x`.
pub(crate) fn nice_step(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(x.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * p >= x * (1.0 - 1e-9) {
            return m * p;
        }
    }
    10.0 * p
}

/// `x` rounded up to 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 or 10 × 10^k: an axis end.
pub(crate) fn nice_ceil(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(x.log10().floor());
    for m in [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if m * p >= x * (1.0 - 1e-9) {
            return m * p;
        }
    }
    10.0 * p
}

/// The top of the population-rate axis: all of the trace, unless a few bins (the
/// synchronous onset of a network started from identical states) are far above
/// the rest; then 1.3 times the 99.5th percentile, and those bins are marked.
fn rate_axis_max(rate: &[f64]) -> f64 {
    let max = rate.iter().copied().fold(0.0, f64::max);
    let mut s = rate.to_vec();
    s.sort_by(f64::total_cmp);
    let p995 = s
        .get((s.len().saturating_sub(1)) * 995 / 1000)
        .copied()
        .unwrap_or(0.0);
    let top = if max > 2.0 * p995.max(1e-9) {
        p995 * 1.3
    } else {
        max * 1.08
    };
    nice_ceil(top.max(1.0))
}

/// The end of the CV axis: a quarter past the 99th percentile, so that a narrow
/// distribution (a regular network has CVs near 0.1) spreads over the bins.
fn cv_axis_max(cvs: &[f64]) -> f64 {
    let mut s = cvs.to_vec();
    s.sort_by(f64::total_cmp);
    let p99 = s
        .get(s.len().saturating_sub(1) * 99 / 100)
        .copied()
        .unwrap_or(0.0);
    nice_ceil((p99 * 1.25).max(0.05))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_numbers() {
        assert_eq!(nice_step(7.1), 10.0);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(0.21), 0.25);
        assert_eq!(nice_step(100.0), 100.0);
        assert_eq!(nice_ceil(37.2), 40.0);
        assert_eq!(nice_ceil(0.11), 0.12);
        assert_eq!(nice_ceil(1.0), 1.0);
        assert_eq!(nice_ceil(f64::NAN), 1.0);
    }

    #[test]
    fn an_onset_peak_does_not_flatten_the_rate_axis() {
        let mut r = vec![30.0; 1000];
        r[10] = 1000.0;
        assert_eq!(rate_axis_max(&r), 40.0);
        let r = vec![30.0, 60.0, 45.0];
        assert_eq!(rate_axis_max(&r), 80.0);
    }

    #[test]
    fn long_titles_wrap_at_separators() {
        let w = |s: &str| s.chars().count() as i32;
        assert_eq!(wrap_title("a · b", w, 10), vec!["a · b"]);
        assert_eq!(
            wrap_title("aaaa · bbbb · cc", w, 11),
            vec!["aaaa · bbbb", "cc"]
        );
    }
}
