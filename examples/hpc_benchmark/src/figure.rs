//! The figure of a run: the histogram of the final E->E weights as an SVG
//! document ([`WEIGHTS_SVG`] beside `summary.json`), from the same bins as the
//! summary's `weights.histogram`.
//!
//! The document is written by hand (bars as `<rect>`, text as `<text>`), with
//! nothing but the standard library: the figure is one histogram, and the
//! spike-raster machinery of `hpc-spike-report` draws none of this kind.

use std::fmt::Write as _;

use crate::sim::{WeightStats, BIN_PA};

/// The figure's file name in the output directory.
pub const WEIGHTS_SVG: &str = "weights.svg";

/// One bar of the histogram: `[low, high)` (pA) and its synapses.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Bar {
    /// Lower edge (pA).
    pub low_pa: f64,
    /// Upper edge (pA).
    pub high_pa: f64,
    /// Synapses whose weight falls in it.
    pub count: u64,
}

/// The histogram of `w` in at most 40 bars between its smallest and largest
/// weight, each a whole number of its [`BIN_PA`] bins.
pub fn histogram(w: &WeightStats) -> Vec<Bar> {
    let (Some(&(lo, _)), Some(&(hi, _))) = (w.bins.first(), w.bins.last()) else {
        return Vec::new();
    };
    let per = (hi - lo) / 40 + 1;
    let mut out: Vec<Bar> = Vec::new();
    for &(b, c) in &w.bins {
        let k = (b - lo) / per;
        let low = (lo + k * per) as f64 * BIN_PA;
        match out.last_mut() {
            Some(last) if last.low_pa == low => last.count += c,
            _ => out.push(Bar {
                low_pa: low,
                high_pa: low + per as f64 * BIN_PA,
                count: c,
            }),
        }
    }
    out
}

/// Width and height of the figure (px).
const SIZE: (f64, f64) = (800.0, 500.0);
/// The plot area's margins: left, right, top, bottom (px).
const MARGIN: (f64, f64, f64, f64) = (90.0, 30.0, 70.0, 70.0);

/// A step of 1, 2 or 5 times a power of ten near `x / n` (`x > 0`).
fn tick_step(x: f64, n: f64) -> f64 {
    let raw = x / n;
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    mag * if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    }
}

/// Decimals that show a step of `step`.
fn decimals(step: f64) -> usize {
    (-step.log10().floor()).max(0.0) as usize
}

/// A count on the y axis, in thousands (k) or millions (M) from 10,000 up.
fn count_label(y: f64, step: f64) -> String {
    let (div, unit) = if step >= 1e6 || y >= 1e7 {
        (1e6, " M")
    } else if step >= 1e3 || y >= 1e4 {
        (1e3, " k")
    } else {
        (1.0, "")
    };
    let d = decimals(step / div);
    format!("{:.d$}{unit}", y / div)
}

/// `s` with XML's special characters escaped.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The histogram `bars` as an SVG document, titled `title` over `subtitle`,
/// with a dashed line at `initial_pa` (the weight every synapse started from)
/// when it falls in the drawn range.
pub fn weights_svg(bars: &[Bar], title: &str, subtitle: &str, initial_pa: f64) -> String {
    let (w, h) = SIZE;
    let (ml, mr, mt, mb) = MARGIN;
    let (pw, ph) = (w - ml - mr, h - mt - mb);
    let mut s = String::new();
    // Writing into a String cannot fail.
    let _ = write!(
        s,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\">\n\
         <rect width=\"{w}\" height=\"{h}\" fill=\"#ffffff\"/>\n\
         <text x=\"{0}\" y=\"26\" font-size=\"18\" text-anchor=\"middle\">{1}</text>\n\
         <text x=\"{0}\" y=\"48\" font-size=\"14\" text-anchor=\"middle\" fill=\"#606060\">{2}</text>\n",
        w / 2.0,
        esc(title),
        esc(subtitle)
    );
    let (Some(first), Some(last)) = (bars.first(), bars.last()) else {
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" font-size=\"16\" text-anchor=\"middle\">no E-&gt;E synapses</text>\n</svg>",
            w / 2.0,
            h / 2.0
        );
        return s;
    };
    let (x0, x1) = (first.low_pa, last.high_pa.max(first.low_pa + BIN_PA));
    let peak = bars.iter().map(|b| b.count).max().unwrap_or(0).max(1) as f64;
    let ystep = tick_step(peak, 5.0);
    let ytop = (peak / ystep).ceil() * ystep;
    let px = |x: f64| ml + (x - x0) / (x1 - x0) * pw;
    let py = |y: f64| mt + ph - y / ytop * ph;
    // Grid and y ticks.
    let mut y = 0.0;
    while y <= ytop * (1.0 + 1e-9) {
        let _ = writeln!(
            s,
            "<line x1=\"{ml}\" y1=\"{0:.1}\" x2=\"{1}\" y2=\"{0:.1}\" stroke=\"#d0d0d0\"/>\n\
             <text x=\"{2}\" y=\"{0:.1}\" font-size=\"13\" text-anchor=\"end\" dy=\"4\">{3}</text>",
            py(y),
            ml + pw,
            ml - 8.0,
            count_label(y, ystep)
        );
        y += ystep;
    }
    // The bars.
    for b in bars {
        let (l, r) = (px(b.low_pa), px(b.high_pa));
        let top = py(b.count as f64);
        let _ = writeln!(
            s,
            "<rect class=\"bar\" x=\"{l:.2}\" y=\"{top:.2}\" width=\"{:.2}\" height=\"{:.2}\" \
             fill=\"#4c72b0\" stroke=\"#ffffff\" stroke-width=\"0.5\"><title>{:.2} to {:.2} pA: {} synapses</title></rect>",
            (r - l).max(0.5),
            mt + ph - top,
            b.low_pa,
            b.high_pa,
            b.count
        );
    }
    // X ticks.
    let xstep = tick_step(x1 - x0, 6.0);
    let xdec = decimals(xstep);
    let mut x = (x0 / xstep).ceil() * xstep;
    while x <= x1 + xstep * 1e-9 {
        let _ = writeln!(
            s,
            "<line x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{2}\" stroke=\"#202020\"/>\n\
             <text x=\"{0:.1}\" y=\"{3}\" font-size=\"13\" text-anchor=\"middle\">{4:.xdec$}</text>",
            px(x),
            mt + ph,
            mt + ph + 6.0,
            mt + ph + 22.0,
            x
        );
        x += xstep;
    }
    if (x0..=x1).contains(&initial_pa) {
        let _ = writeln!(
            s,
            "<line class=\"initial\" x1=\"{0:.1}\" y1=\"{mt}\" x2=\"{0:.1}\" y2=\"{1}\" stroke=\"#c44e52\" \
             stroke-dasharray=\"6 4\"/>\n\
             <text x=\"{2:.1}\" y=\"{3}\" font-size=\"13\" fill=\"#c44e52\">initial {initial_pa:.2} pA</text>",
            px(initial_pa),
            mt + ph,
            px(initial_pa) + 4.0,
            mt + 14.0
        );
    }
    let _ = write!(
        s,
        "<line x1=\"{ml}\" y1=\"{mt}\" x2=\"{ml}\" y2=\"{0}\" stroke=\"#202020\"/>\n\
         <line x1=\"{ml}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"#202020\"/>\n\
         <text x=\"{2}\" y=\"{3}\" font-size=\"15\" text-anchor=\"middle\">E-&gt;E weight at the end (pA)</text>\n\
         <text x=\"22\" y=\"{4}\" font-size=\"15\" text-anchor=\"middle\" \
         transform=\"rotate(-90 22 {4})\">synapses</text>\n</svg>\n",
        mt + ph,
        ml + pw,
        ml + pw / 2.0,
        h - 20.0,
        mt + ph / 2.0
    );
    s
}
