//! The one-page run report: `report.html`, self-contained.
//!
//! The page holds the run's title, the summary table, per-population statistics,
//! the validation against a reference simulator (when the run has one), the split
//! of the run time, every figure (PNG inlined as a `data:` URI, with links to the
//! PNG and SVG files next to it) and the parameters. It loads nothing: a
//! Content-Security-Policy allows only inline styles and `data:` images, so it
//! opens the same from a laptop, a cluster's web portal or an e-mail attachment.

use std::fmt::Write as _;
use std::path::Path;

use base64::Engine as _;

use crate::plot::{Plot, PlotOptions, Prepared};
use crate::{palette, thousands, Error, Recording, Result, RunInfo, Written};

/// How close a value must be to its reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tolerance {
    /// `|value - reference| <= f * |reference|`.
    Relative(f64),
    /// `|value - reference| <= d`.
    Absolute(f64),
}

/// One quantity compared with a reference simulator.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// What is compared (`mean rate`).
    pub quantity: String,
    /// Its unit (`Hz`), empty for none.
    pub unit: String,
    /// The reference's value.
    pub reference: f64,
    /// This run's value.
    pub value: f64,
    /// The accepted difference.
    pub tolerance: Tolerance,
}

impl Check {
    /// Whether the value is within the tolerance of the reference.
    pub fn passed(&self) -> bool {
        let d = (self.value - self.reference).abs();
        match self.tolerance {
            Tolerance::Relative(f) => d <= f * self.reference.abs(),
            Tolerance::Absolute(a) => d <= a,
        }
    }

    /// The difference as the tolerance states it (`+0.3 %`, `-0.004`).
    pub fn difference(&self) -> String {
        match self.tolerance {
            Tolerance::Relative(_) if self.reference != 0.0 => {
                format!(
                    "{} %",
                    signed(
                        (self.value - self.reference) / self.reference.abs() * 100.0,
                        1
                    )
                )
            }
            _ => signed(self.value - self.reference, 3),
        }
    }

    fn tolerance_text(&self) -> String {
        match self.tolerance {
            Tolerance::Relative(f) => format!("± {} %", crate::thousands_f(f * 100.0)),
            Tolerance::Absolute(a) => format!("± {}", hpc_io::message::num(a)),
        }
    }
}

/// A comparison of the run with a reference simulator on the same model.
#[derive(Clone, Debug, PartialEq)]
pub struct Validation {
    /// The reference (`NEST 3.10.0`).
    pub reference: String,
    /// How the reference was run, in a sentence.
    pub how: String,
    /// The compared quantities.
    pub checks: Vec<Check>,
}

impl Validation {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(Check::passed)
    }
}

/// One phase of the run time.
#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    /// Its name (`update`).
    pub name: String,
    /// Wall-clock seconds (the slowest rank's).
    pub seconds: f64,
}

impl Phase {
    /// `name` took `seconds`.
    pub fn new(name: impl Into<String>, seconds: f64) -> Phase {
        Phase {
            name: name.into(),
            seconds,
        }
    }
}

/// Everything the report shows besides the figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// What ran.
    pub run: RunInfo,
    /// The summary table: `(quantity, value with unit)`, in order.
    pub summary: Vec<(String, String)>,
    /// The model's parameters: `(name, value)`, in order.
    pub parameters: Vec<(String, String)>,
    /// The split of the wall-clock time, in order; shown as a bar and a table.
    pub timing: Vec<Phase>,
    /// The comparison with a reference simulator, if the run has one.
    pub validation: Option<Validation>,
    /// Sentences shown under the title (how the run was started, warnings).
    pub notes: Vec<String>,
}

impl Report {
    /// A report of `run` with nothing in it yet.
    pub fn new(run: RunInfo) -> Report {
        Report {
            run,
            summary: Vec::new(),
            parameters: Vec::new(),
            timing: Vec::new(),
            validation: None,
            notes: Vec::new(),
        }
    }

    /// An empty report of the run `title` of `neurons` neurons whose summary JSON
    /// (`summary`, as a simulation binary prints it) gives its ranks, threads and
    /// synapses.
    pub fn of_summary(title: &str, neurons: u64, summary: &serde_json::Value) -> Report {
        let u = |k: &str| summary[k].as_u64().unwrap_or(0);
        let mut run = RunInfo::new(title, neurons, u("ranks") as u32, u("threads") as u32);
        run.synapses = summary["synapses"].as_u64();
        Report::new(run)
    }

    /// The summary table's row of the ranks and threads of a run whose summary
    /// JSON is `summary` (as [`Report::of_summary`] reads it).
    pub fn ranks_threads_row(summary: &serde_json::Value) -> (String, String) {
        let u = |k: &str| summary[k].as_u64().unwrap_or(0);
        (
            "ranks × threads".into(),
            format!("{} × {}", u("ranks"), u("threads")),
        )
    }

    /// The summary table's row of the wall time building and simulating, from
    /// `summary`'s `build_s` and `simulate_s`.
    pub fn wall_time_row(summary: &serde_json::Value) -> (String, String) {
        let f = |k: &str| summary[k].as_f64().unwrap_or(0.0);
        (
            "wall time".into(),
            format!(
                "build {:.3} s, simulate {:.3} s",
                f("build_s"),
                f("simulate_s")
            ),
        )
    }
}

/// Writes every figure (PNG and SVG) and `report.html` into `dir`, each file
/// atomically; returns their paths. A `dir` that is, or goes through, a link
/// another user made is refused ([`crate::check_dir`]).
pub fn write(dir: &Path, report: &Report, rec: &Recording, opts: &PlotOptions) -> Result<Written> {
    crate::check_dir(dir)?;
    let prepared = Prepared::new(rec, &report.run, opts)?;
    let mut plots = Vec::new();
    let mut images = Vec::new();
    for kind in Plot::ALL {
        let png = prepared.png(kind)?;
        let png_path = dir.join(format!("{}.png", kind.file_stem()));
        let svg_path = dir.join(format!("{}.svg", kind.file_stem()));
        crate::write_atomic(&png_path, &png)?;
        crate::write_atomic(&svg_path, prepared.svg(kind)?.as_bytes())?;
        plots.push((kind, png_path, svg_path));
        images.push((kind, png));
    }
    let html = html(report, rec, &prepared, &images)?;
    let path = dir.join("report.html");
    crate::write_atomic(&path, html.as_bytes())?;
    Ok(Written {
        report: Some(path),
        plots,
    })
}

/// Escapes text for HTML.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const STYLE: &str = r#"
:root { color-scheme: light; }
body { font-family: "DejaVu Sans", Verdana, Arial, sans-serif; color: #202020; margin: 2rem auto; max-width: 78rem; padding: 0 1.5rem; line-height: 1.45; }
h1 { font-size: 1.45rem; margin-bottom: .2rem; }
h2 { font-size: 1.15rem; margin-top: 2.2rem; border-bottom: 1px solid #d0d0d0; padding-bottom: .2rem; }
p.note { color: #505050; margin: .2rem 0; }
table { border-collapse: collapse; margin: .6rem 0; font-size: .92rem; }
th, td { text-align: left; padding: .25rem .9rem .25rem 0; border-bottom: 1px solid #e4e4e4; vertical-align: top; }
td:first-child { white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
code { font-family: "DejaVu Sans Mono", monospace; font-size: .88rem; }
.swatch { display: inline-block; width: .8rem; height: .8rem; margin-right: .4rem; vertical-align: -.05rem; }
.pass { color: #006b4f; font-weight: bold; }
.fail { color: #b23c00; font-weight: bold; }
figure { margin: 1.2rem 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #e4e4e4; }
figcaption { color: #505050; font-size: .9rem; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(22rem, 1fr)); gap: 0 2rem; }
footer { margin-top: 3rem; color: #707070; font-size: .8rem; }
"#;

fn html(
    report: &Report,
    rec: &Recording,
    p: &Prepared,
    images: &[(Plot, Vec<u8>)],
) -> Result<String> {
    let title = report.run.title(rec.duration_ms());
    let mut h = String::new();
    let w = |h: &mut String, s: &str| h.push_str(s);
    w(
        &mut h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
    );
    w(
        &mut h,
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\">\n",
    );
    w(
        &mut h,
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
    );
    let _ = writeln!(h, "<title>{}</title>", esc(&title));
    let _ = writeln!(h, "<style>{STYLE}</style>\n</head>\n<body>");
    let _ = writeln!(h, "<h1>{}</h1>", esc(&title));
    for n in &report.notes {
        let _ = writeln!(h, "<p class=\"note\">{}</p>", esc(n));
    }
    if let Some(v) = &report.validation {
        let (class, word) = if v.passed() {
            ("pass", "agrees with")
        } else {
            ("fail", "differs from")
        };
        let _ = writeln!(
            h,
            "<p>Validation: this run <span class=\"{class}\">{word}</span> {} (details below).</p>",
            esc(&v.reference)
        );
    }

    // Summary and populations side by side.
    w(
        &mut h,
        "<div class=\"grid\">\n<section>\n<h2>Summary</h2>\n<table>\n",
    );
    for (k, v) in &report.summary {
        let _ = writeln!(h, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
    }
    w(
        &mut h,
        "</table>\n</section>\n<section>\n<h2>Populations</h2>\n<table>\n",
    );
    w(
        &mut h,
        "<tr><th>population</th><th class=\"num\">neurons</th><th class=\"num\">spikes</th><th class=\"num\">rate (Hz, mean ± SD)</th><th class=\"num\">CV ISI (mean)</th><th class=\"num\">neurons with a CV</th></tr>\n",
    );
    for (pop, s) in rec.populations.iter().zip(&p.analysis.populations) {
        let _ = writeln!(
            h,
            "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{:.2} ± {:.2}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            pop.color.hex(),
            pop.group.as_ref().map(|g| format!("{} · ", esc(g))).unwrap_or_default(),
            esc(&pop.name),
            thousands(s.neurons as u64),
            thousands(s.spikes),
            s.rate_hz,
            s.rate_sd_hz,
            s.cv_mean.map(|c| format!("{c:.3}")).unwrap_or_else(|| "–".into()),
            thousands(s.cvs.len() as u64),
        );
    }
    let a = &p.analysis;
    let _ = writeln!(
        h,
        "<tr><th>all</th><th class=\"num\">{}</th><th class=\"num\">{}</th><th class=\"num\">{:.2}</th><th class=\"num\">{}</th><th class=\"num\">{}</th></tr>",
        thousands(rec.neurons()),
        thousands(a.spikes),
        a.rate_hz,
        a.cv_mean.map(|c| format!("{c:.3}")).unwrap_or_else(|| "–".into()),
        thousands(a.cv_neurons),
    );
    let _ = writeln!(
        h,
        "</table>\n<p class=\"note\">From the spikes between {} ms and {} ms; a neuron's CV needs at least 3 spikes.</p>\n</section>\n</div>",
        crate::thousands_f(rec.t_start_ms),
        crate::thousands_f(rec.t_stop_ms)
    );

    if let Some(v) = &report.validation {
        validation(&mut h, v);
    }
    figures(&mut h, images);

    if !report.timing.is_empty() {
        w(&mut h, "<h2>Where the time went</h2>\n");
        timing(&mut h, &report.timing)?;
    }
    if !report.parameters.is_empty() {
        w(&mut h, "<h2>Parameters</h2>\n<table>\n");
        for (k, v) in &report.parameters {
            let _ = writeln!(
                h,
                "<tr><th><code>{}</code></th><td><code>{}</code></td></tr>",
                esc(k),
                esc(v)
            );
        }
        w(&mut h, "</table>\n");
    }
    let _ = writeln!(
        h,
        "<footer>Written by {} {}. Plots drawn with DejaVu Sans (Bitstream Vera licence); colours from the Okabe–Ito palette.</footer>\n</body>\n</html>",
        env!("CARGO_PKG_NAME"),
        env!("CARGO_PKG_VERSION")
    );
    Ok(h)
}

/// The validation's table: each quantity against the reference, within its
/// tolerance or not.
fn validation(h: &mut String, v: &Validation) {
    let _ = writeln!(h, "<h2>Validation against {}</h2>", esc(&v.reference));
    if !v.how.is_empty() {
        let _ = writeln!(h, "<p>{}</p>", esc(&v.how));
    }
    let _ = writeln!(
        h,
        "<table>\n<tr><th>quantity</th><th class=\"num\">{}</th><th class=\"num\">this run</th><th class=\"num\">difference</th><th class=\"num\">tolerance</th><th></th></tr>",
        esc(&v.reference)
    );
    for c in &v.checks {
        let unit = if c.unit.is_empty() {
            String::new()
        } else {
            format!(" {}", esc(&c.unit))
        };
        let (class, word) = if c.passed() {
            ("pass", "pass")
        } else {
            ("fail", "FAIL")
        };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"num\">{}{unit}</td><td class=\"num\">{}{unit}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"{class}\">{word}</td></tr>",
            esc(&c.quantity),
            fmt_value(c.reference),
            fmt_value(c.value),
            c.difference(),
            c.tolerance_text()
        );
    }
    h.push_str("</table>\n");
}

/// The figures, inline: the overview large, the raster, the others in a grid.
fn figures(h: &mut String, images: &[(Plot, Vec<u8>)]) {
    h.push_str("<h2>Figures</h2>\n");
    let fig = |h: &mut String, kind: Plot, png: &[u8]| {
        let (wd, ht) = kind.size();
        let stem = kind.file_stem();
        let _ = writeln!(
            h,
            "<figure id=\"{stem}\"><img src=\"data:image/png;base64,{}\" width=\"{wd}\" height=\"{ht}\" alt=\"{}\"><figcaption>{} Files: <a href=\"{stem}.png\">{stem}.png</a>, <a href=\"{stem}.svg\">{stem}.svg</a>.</figcaption></figure>",
            base64::engine::general_purpose::STANDARD.encode(png),
            esc(kind.caption()),
            esc(kind.caption()),
        );
    };
    for (kind, png) in images.iter().filter(|(k, _)| *k == Plot::Overview) {
        fig(h, *kind, png);
    }
    for (kind, png) in images.iter().filter(|(k, _)| *k == Plot::Raster) {
        fig(h, *kind, png);
    }
    h.push_str("<div class=\"grid\">\n");
    for (kind, png) in images
        .iter()
        .filter(|(k, _)| !matches!(k, Plot::Overview | Plot::Raster))
    {
        fig(h, *kind, png);
    }
    h.push_str("</div>\n");
}

/// A value of the validation's table: whole with thousands separators from 100 on
/// (a negative one too: it was shown as 0), in exponent form where that would be
/// more than 15 digits.
fn fmt_value(x: f64) -> String {
    if x.abs() >= 100.0 {
        crate::thousands_f(x.round())
    } else {
        format!("{x:.3}")
    }
}

/// `x` with its sign and `decimals` decimals, in exponent form from 10^15 on (a
/// difference of 1e301 % was written out in 302 digits).
fn signed(x: f64, decimals: usize) -> String {
    if x.is_finite() && x.abs() >= 1e15 {
        format!("{x:+.3e}")
    } else {
        format!("{x:+.decimals$}")
    }
}

/// The timing split as a stacked bar (inline SVG) and a table.
fn timing(h: &mut String, phases: &[Phase]) -> Result<()> {
    if let Some(bad) = phases
        .iter()
        .find(|p| !(p.seconds.is_finite() && p.seconds >= 0.0))
    {
        return Err(Error::Input(format!(
            "the time of phase {} is {} s",
            bad.name, bad.seconds
        )));
    }
    let total: f64 = phases.iter().map(|p| p.seconds).sum();
    let (w, bar_h) = (900.0, 28.0);
    let _ = writeln!(
        h,
        "<svg width=\"{w}\" height=\"{bar_h}\" viewBox=\"0 0 {w} {bar_h}\" role=\"img\" aria-label=\"time per phase\" style=\"max-width:100%\">"
    );
    let mut x = 0.0;
    for (i, p) in phases.iter().enumerate() {
        let pw = if total > 0.0 {
            p.seconds / total * w
        } else {
            0.0
        };
        let _ = writeln!(
            h,
            "<rect x=\"{x:.2}\" y=\"0\" width=\"{pw:.2}\" height=\"{bar_h}\" fill=\"{}\"><title>{}: {:.3} s</title></rect>",
            palette::categorical(i).hex(),
            esc(&p.name),
            p.seconds
        );
        x += pw;
    }
    h.push_str("</svg>\n<table>\n<tr><th>phase</th><th class=\"num\">wall time (s)</th><th class=\"num\">share</th></tr>\n");
    for (i, p) in phases.iter().enumerate() {
        let _ = writeln!(
            h,
            "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td><td class=\"num\">{:.3}</td><td class=\"num\">{:.1} %</td></tr>",
            palette::categorical(i).hex(),
            esc(&p.name),
            p.seconds,
            if total > 0.0 { p.seconds / total * 100.0 } else { 0.0 }
        );
    }
    let _ = writeln!(
        h,
        "<tr><th>total</th><th class=\"num\">{total:.3}</th><th class=\"num\">100 %</th></tr>\n</table>"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report and the figures are not written through a link another user
    /// planted as their directory (they were, every file of them).
    #[test]
    fn a_directory_that_is_a_planted_link_is_refused() {
        let base = hpc_test_support::TmpDir::unmade("spike-report", "link");
        let target = base.join("target");
        std::fs::create_dir_all(&target).unwrap();
        let dir = base.join("out");
        std::os::unix::fs::symlink(&target, &dir).unwrap();
        if let Err(e) = std::os::unix::fs::lchown(&dir, Some(65534), Some(65534)) {
            eprintln!("the link's owner kept ({e}): not run");
            return;
        }
        let rec = Recording {
            populations: vec![crate::Population::new("E", 0, 10, crate::Rgb(0, 0, 0))],
            spikes: vec![(1, 1)],
            dt_ms: 0.1,
            t_start_ms: 0.0,
            t_stop_ms: 10.0,
            group_title: None,
        };
        let report = Report::new(crate::RunInfo::new("m", 10, 1, 1));
        let opts = PlotOptions::default();
        let e = write(&dir, &report, &rec, &opts).unwrap_err().to_string();
        assert!(e.contains("user 65534"), "{e}");
        let e = crate::plot::write_all(&dir, &rec, &report.run, &opts).unwrap_err();
        assert!(e.to_string().contains("user 65534"), "{e}");
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
    }

    #[test]
    fn checks_compare_within_their_tolerance() {
        let c = Check {
            quantity: "rate".into(),
            unit: "Hz".into(),
            reference: 32.10,
            value: 32.02,
            tolerance: Tolerance::Relative(0.05),
        };
        assert!(c.passed());
        assert_eq!(c.difference(), "-0.2 %");
        let c = Check { value: 40.0, ..c };
        assert!(!c.passed());
        let c = Check {
            quantity: "CV".into(),
            unit: String::new(),
            reference: 0.174,
            value: 0.230,
            tolerance: Tolerance::Absolute(0.05),
        };
        assert!(!c.passed());
        assert_eq!(c.difference(), "+0.056");
    }

    /// Pass 15: a reference far from the value wrote its difference out in
    /// hundreds of digits, and a value of -100 or below was shown as 0.
    #[test]
    fn huge_differences_and_negative_values_are_written_as_numbers() {
        let c = Check {
            quantity: "rate".into(),
            unit: "Hz".into(),
            reference: 1e-300,
            value: 50.0,
            tolerance: Tolerance::Relative(0.05),
        };
        assert_eq!(c.difference(), "+5.000e303 %");
        let c = Check {
            reference: -1e300,
            tolerance: Tolerance::Absolute(0.05),
            ..c
        };
        assert_eq!(c.difference(), "+1.000e300");
        // An absolute tolerance of 1e300 was written out in the report in 301 digits.
        let c = Check {
            tolerance: Tolerance::Absolute(1e300),
            ..c
        };
        assert_eq!(c.tolerance_text(), "± 1e300");
        assert_eq!(fmt_value(-1e300), "-1e300");
        assert_eq!(fmt_value(-2500.4), "-2,500");
        assert_eq!(fmt_value(1e20), "1e20");
        assert_eq!(fmt_value(12.5), "12.500");
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(esc("<a & 'b'>"), "&lt;a &amp; &#39;b&#39;&gt;");
    }

    #[test]
    fn a_negative_phase_time_is_refused() {
        let mut s = String::new();
        let e = timing(&mut s, &[Phase::new("update", -1.0)]).unwrap_err();
        assert!(e.to_string().contains("update"));
    }
}
