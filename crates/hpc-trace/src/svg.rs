//! A merged trace drawn as an SVG picture: one lane per thread of each process, its
//! spans as boxes stacked by nesting, coloured by name, on a common time axis.
//!
//! ```
//! let trace = serde_json::json!({"traceEvents": [
//!     {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "rank 0"}},
//!     {"ph": "X", "name": "fft", "cat": "app", "ts": 0.0, "dur": 50.0, "pid": 0, "tid": 7},
//!     {"ph": "X", "name": "alltoall", "cat": "hpc_comm", "ts": 10.0, "dur": 20.0, "pid": 0, "tid": 8},
//! ]});
//! let svg = hpc_trace::svg::render(&trace, &hpc_trace::svg::Options::default())?;
//! assert!(svg.starts_with("<svg") && svg.contains("alltoall") && svg.contains("rank 0"));
//! # Ok::<(), hpc_trace::svg::SvgError>(())
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

/// What to draw.
#[derive(Debug, Clone)]
pub struct Options {
    /// Width of the picture in pixels, [`MIN_WIDTH`] to [`MAX_WIDTH`].
    pub width: f64,
    /// Draw from this time on (µs of the trace; default: its first span).
    pub from_us: Option<f64>,
    /// Draw up to this time (µs; default: its last span's end).
    pub to_us: Option<f64>,
    /// Draw the last span of this name of the first process (and what the others
    /// did meanwhile) instead of a window of times.
    pub around: Option<String>,
    /// A title above the lanes.
    pub title: String,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            width: 1200.0,
            from_us: None,
            to_us: None,
            around: None,
            title: String::new(),
        }
    }
}

/// The narrowest picture drawn, in pixels (the lanes' labels take 200).
pub const MIN_WIDTH: f64 = 200.0;
/// The widest picture drawn, in pixels.
pub const MAX_WIDTH: f64 = 100_000.0;

/// The most spans drawn (a larger trace is refused: narrow it with a window).
pub const MAX_SPANS: usize = 200_000;

/// What cannot be drawn.
#[derive(Debug, thiserror::Error)]
pub enum SvgError {
    /// Not a trace: no `traceEvents` list.
    #[error("not a Chrome trace: no traceEvents list")]
    NotATrace,
    /// No span in the window.
    #[error("no span (\"ph\":\"X\") to draw{0}")]
    Nothing(String),
    /// Too many spans.
    #[error("{0} spans to draw, more than {MAX_SPANS}: draw a shorter window (--from, --to)")]
    TooMany(usize),
    /// No span of the name `around` asked for.
    #[error("no span named {} to draw around", hpc_env::shown(.0))]
    NoSuchSpan(String),
    /// A window that is empty or reversed.
    #[error("the window from {} µs to {} µs is empty", num(*from), num(*to))]
    Window {
        /// Its start.
        from: f64,
        /// Its end.
        to: f64,
    },
    /// A width that is not a number of pixels from [`MIN_WIDTH`] to
    /// [`MAX_WIDTH`] (a NaN, 0 or negative width was written into the
    /// picture as it was, which no viewer draws).
    #[error("width {} pixels: a picture is {MIN_WIDTH} to {MAX_WIDTH} pixels wide", num(*.0))]
    Width(f64),
    /// Times whose span or end is beyond the finite numbers (a span of `ts`
    /// 1e308 and `dur` 1e308 ends at infinity), where every coordinate would be
    /// NaN, or a window from or to no number ([`Options::from_us`] NaN).
    #[error("{0}: not a finite time, no picture can place it")]
    Time(String),
}

pub use hpc_io::message::num;

struct Span {
    ts: f64,
    dur: f64,
    name: String,
}

const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];
const ROW: f64 = 14.0;
const LABEL: f64 = 170.0;

/// `s` as XML text: markup escaped, and the control characters XML 1.0 does not
/// allow (even as references; a picture holding one does not open) replaced by
/// U+FFFD.
fn escape(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() && !matches!(c, '\t' | '\n' | '\r') {
                '\u{fffd}'
            } else {
                c
            }
        })
        .collect::<String>()
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Each span's depth in its lane: the number of spans still open at its start.
fn depths(spans: &mut [Span]) -> Vec<usize> {
    spans.sort_by(|a, b| a.ts.total_cmp(&b.ts).then(b.dur.total_cmp(&a.dur)));
    let mut open: Vec<f64> = Vec::new();
    spans
        .iter()
        .map(|s| {
            while open.last().is_some_and(|&end| end <= s.ts) {
                open.pop();
            }
            let d = open.len();
            open.push(s.ts + s.dur);
            d
        })
        .collect()
}

type Lanes = BTreeMap<(i64, i64), Vec<Span>>;

/// The spans by (pid, tid), and the names of processes and threads.
fn collect(events: &[Value]) -> (Lanes, BTreeMap<(i64, i64), String>) {
    let mut lanes: Lanes = BTreeMap::new();
    let mut names = BTreeMap::new();
    for e in events {
        let pid = e["pid"].as_i64().unwrap_or(0);
        let tid = e["tid"].as_i64().unwrap_or(0);
        match (e["ph"].as_str(), e["name"].as_str()) {
            (Some("M"), Some("process_name")) => {
                if let Some(n) = e["args"]["name"].as_str() {
                    names.insert((pid, -1), n.to_string());
                }
            }
            (Some("M"), Some("thread_name")) => {
                if let Some(n) = e["args"]["name"].as_str() {
                    names.insert((pid, tid), n.to_string());
                }
            }
            (Some("X"), Some(name)) => {
                if let (Some(ts), Some(dur)) = (e["ts"].as_f64(), e["dur"].as_f64()) {
                    lanes.entry((pid, tid)).or_default().push(Span {
                        ts,
                        dur: dur.max(0.0),
                        name: name.to_string(),
                    });
                }
            }
            _ => {}
        }
    }
    (lanes, names)
}

/// Draws `trace` (a Chrome trace: an object with `traceEvents`, or a list of events).
pub fn render(trace: &Value, opts: &Options) -> Result<String, SvgError> {
    if !(MIN_WIDTH..=MAX_WIDTH).contains(&opts.width) {
        return Err(SvgError::Width(opts.width));
    }
    let events = match trace {
        Value::Array(a) => a,
        _ => trace["traceEvents"].as_array().ok_or(SvgError::NotATrace)?,
    };
    let (mut lanes, names) = collect(events);
    if let Some(s) = lanes
        .values()
        .flatten()
        .find(|s| !(s.ts + s.dur).is_finite())
    {
        // The name is the trace's, of any length: shown cut.
        return Err(SvgError::Time(format!(
            "span {} at ts {} µs with dur {} µs ends at {}",
            hpc_env::shown(&s.name),
            num(s.ts),
            num(s.dur),
            s.ts + s.dur
        )));
    }
    let all = lanes.values().flatten();
    let first = all.clone().map(|s| s.ts).fold(f64::INFINITY, f64::min);
    let last = all.map(|s| s.ts + s.dur).fold(f64::NEG_INFINITY, f64::max);
    let (mut from, mut to) = (opts.from_us.unwrap_or(first), opts.to_us.unwrap_or(last));
    let mut window = opts.from_us.is_some() || opts.to_us.is_some();
    if let Some(name) = &opts.around {
        let s = lanes
            .iter()
            .filter(|((pid, _), _)| Some(*pid) == lanes.keys().next().map(|k| k.0))
            .flat_map(|(_, spans)| spans.iter())
            .filter(|s| &s.name == name)
            .max_by(|a, b| a.ts.total_cmp(&b.ts))
            .ok_or_else(|| SvgError::NoSuchSpan(name.clone()))?;
        // At least 1 µs each side: a span of no duration (a fast region at the
        // clock's resolution) made a window from its start to its start, refused
        // as empty.
        let margin = (s.dur * 0.03).max(1.0);
        (from, to, window) = (s.ts - margin, s.ts + s.dur + margin, true);
    }
    if window {
        // NaN is no time: it was said to make "the window from NaN µs to
        // 5 µs" empty.
        if !(from.is_finite() && to.is_finite()) {
            return Err(SvgError::Time(format!(
                "the window from {} µs to {} µs",
                num(from),
                num(to)
            )));
        }
        if to.partial_cmp(&from) != Some(std::cmp::Ordering::Greater) {
            return Err(SvgError::Window { from, to });
        }
        for spans in lanes.values_mut() {
            spans.retain(|s| s.ts + s.dur >= from && s.ts <= to);
        }
        lanes.retain(|_, s| !s.is_empty());
    }
    let count: usize = lanes.values().map(Vec::len).sum();
    if count == 0 {
        let w = if window { " in the window" } else { "" };
        return Err(SvgError::Nothing(w.into()));
    }
    if count > MAX_SPANS {
        return Err(SvgError::TooMany(count));
    }
    if !(to - from).is_finite() {
        return Err(SvgError::Time(format!(
            "the window from {} µs to {} µs",
            num(from),
            num(to)
        )));
    }
    let span_us = (to - from).max(1e-3);
    let plot = (opts.width - LABEL - 10.0).max(100.0);
    let x = |t: f64| LABEL + (t.clamp(from, to) - from) / span_us * plot;
    let mut colours: BTreeMap<String, &str> = BTreeMap::new();
    let mut body = String::new();
    let mut y = 40.0;
    for ((pid, tid), spans) in &mut lanes {
        let d = depths(spans);
        let rows = d.iter().max().map_or(1, |m| m + 1) as f64;
        let process = names
            .get(&(*pid, -1))
            .cloned()
            .unwrap_or(format!("pid {pid}"));
        let thread = names
            .get(&(*pid, *tid))
            .cloned()
            .unwrap_or(format!("{tid}"));
        let _ = write!(
            body,
            r##"<text x="4" y="{:.1}" class="l">{}</text><text x="4" y="{:.1}" class="t">{}</text><line x1="0" x2="{:.0}" y1="{:.1}" y2="{:.1}" stroke="#ddd"/>"##,
            y + 10.0,
            escape(&process),
            y + 21.0,
            escape(&thread),
            opts.width,
            y - 2.0,
            y - 2.0
        );
        for (s, depth) in spans.iter().zip(d) {
            let n = colours.len();
            let colour = *colours
                .entry(s.name.clone())
                .or_insert(PALETTE[n % PALETTE.len()]);
            let (x0, x1) = (x(s.ts), x(s.ts + s.dur));
            let _ = write!(
                body,
                r#"<rect x="{x0:.2}" y="{:.1}" width="{:.2}" height="{:.1}" fill="{colour}"><title>{} {} µs</title></rect>"#,
                y + depth as f64 * ROW,
                (x1 - x0).max(0.5),
                ROW - 2.0,
                escape(&s.name),
                fixed(s.dur, 1)
            );
        }
        y += (rows * ROW).max(26.0) + 6.0;
    }
    let height = y + 30.0 + 16.0 * colours.len().div_ceil(4) as f64;
    let mut out = String::with_capacity(body.len() + 4096);
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{:.0}" height="{height:.0}" font-family="sans-serif" font-size="11"><style>.l{{font-weight:bold}}.t{{fill:#555}}</style><rect width="100%" height="100%" fill="white"/><text x="4" y="16" font-size="14">{}</text>"#,
        opts.width,
        escape(&opts.title)
    );
    // Time axis: ten ticks, in ms.
    for i in 0..=10 {
        // A tenth first: `span_us * 10` overflowed to infinity near f64::MAX.
        let at = span_us / 10.0 * f64::from(i);
        let _ = write!(
            out,
            r##"<line x1="{0:.1}" x2="{0:.1}" y1="28" y2="{1:.0}" stroke="#eee"/><text x="{0:.1}" y="34" text-anchor="middle" fill="#555">{2} ms</text>"##,
            x(from + at),
            y,
            fixed(at / 1000.0, 3)
        );
    }
    out.push_str(&body);
    for (i, (name, colour)) in colours.iter().enumerate() {
        let lx = 4.0 + (i % 4) as f64 * (opts.width / 4.0);
        let ly = y + 16.0 + (i / 4) as f64 * 16.0;
        let _ = write!(
            out,
            r#"<rect x="{lx:.0}" y="{:.0}" width="10" height="10" fill="{colour}"/><text x="{:.0}" y="{ly:.0}">{}</text>"#,
            ly - 9.0,
            lx + 14.0,
            escape(name)
        );
    }
    out.push_str("</svg>\n");
    Ok(out)
}

/// `v` with `decimals` decimals, in exponent form from 10^12 on: a span at
/// 1e300 µs labelled the axis with numbers of 300 digits.
fn fixed(v: f64, decimals: usize) -> String {
    if v.abs() < 1e12 {
        format!("{v:.decimals$}")
    } else {
        format!("{v:.3e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A span's name in a refusal is cut, whether the trace or `around` gave it
    /// (100,000 characters were echoed whole).
    #[test]
    fn long_span_names_are_cut_in_refusals() {
        let long = "s".repeat(100_000);
        let t = serde_json::json!({"traceEvents": [
            {"ph": "X", "name": long, "ts": 1e308, "dur": 1e308, "pid": 0, "tid": 0}
        ]});
        let e = render(&t, &Options::default()).unwrap_err().to_string();
        assert!(e.len() < 400 && e.contains("more characters"), "{e}");
        let t = serde_json::json!({"traceEvents": [
            {"ph": "X", "name": "a", "ts": 1.0, "dur": 1.0, "pid": 0, "tid": 0}
        ]});
        let opts = Options {
            around: Some(long),
            ..Options::default()
        };
        let e = render(&t, &opts).unwrap_err().to_string();
        assert!(e.len() < 400 && e.contains("more characters"), "{e}");
    }

    /// A span at 1e300 µs, or one lasting 1e308 µs, labelled the time axis
    /// with numbers of 300 digits, or `inf`, and its title likewise.
    #[test]
    fn huge_times_are_labelled_in_exponent_form() {
        for (ts, dur) in [(1e300, 1.0), (0.0, 1e308)] {
            let trace = serde_json::json!({"traceEvents": [
                {"ph": "X", "name": "a", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
                {"ph": "X", "name": "b", "ts": ts, "dur": dur, "pid": 1, "tid": 1}
            ]});
            let svg = render(&trace, &Options::default()).unwrap();
            let longest = svg
                .split(|c: char| !c.is_ascii_digit())
                .map(str::len)
                .max()
                .unwrap();
            assert!(longest < 20 && !svg.contains("inf"), "{ts} {dur}: {svg}");
        }
    }

    /// A width that no picture can have is refused by name: NaN, 0, -1 and
    /// infinity were written into the `<svg>` element as they were.
    #[test]
    fn a_width_no_picture_can_have_is_refused_by_name() {
        let trace = serde_json::json!({"traceEvents": [
            {"ph": "X", "name": "a", "ts": 0, "dur": 10, "pid": 1, "tid": 1}
        ]});
        for width in [f64::NAN, 0.0, -1.0, 199.0, 100_001.0, 1e300, f64::INFINITY] {
            let opts = Options {
                width,
                ..Options::default()
            };
            let e = render(&trace, &opts).unwrap_err();
            assert!(matches!(e, SvgError::Width(_)), "{width}: {e}");
            assert!(e.to_string().starts_with("width "), "{e}");
        }
        for width in [MIN_WIDTH, 1200.0, MAX_WIDTH] {
            let opts = Options {
                width,
                ..Options::default()
            };
            let svg = render(&trace, &opts).unwrap();
            assert!(svg.contains(&format!("width=\"{width:.0}\"")), "{svg}");
        }
    }
}
