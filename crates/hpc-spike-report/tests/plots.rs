//! Every figure, drawn from small recordings, checked as a reader would: the
//! expected size, marks in the populations' colours where the data go, and the
//! text (title, axis titles, tick labels, legend) present in the PNG (drawn with
//! text and without, compared) and in the SVG twin (as `<text>`).

mod common;

use hpc_spike_report::plot::{self, Plot, PlotOptions, Rows, MAX_RATE_BINS};
use hpc_spike_report::{Recording, Rgb, RunInfo};

struct Image {
    w: u32,
    h: u32,
    px: Vec<u8>,
}

impl Image {
    fn decode(bytes: &[u8]) -> Image {
        let dec = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut r = dec.read_info().unwrap();
        let mut px = vec![0; r.output_buffer_size()];
        let info = r.next_frame(&mut px).unwrap();
        assert_eq!(info.color_type, png::ColorType::Rgb);
        px.truncate(info.buffer_size());
        Image {
            w: info.width,
            h: info.height,
            px,
        }
    }

    fn at(&self, x: u32, y: u32) -> [u8; 3] {
        let i = (y * self.w + x) as usize * 3;
        [self.px[i], self.px[i + 1], self.px[i + 2]]
    }

    /// Pixels of exactly `c` in the box given as fractions of the image.
    fn count(&self, c: Rgb, (x0, y0, x1, y1): (f64, f64, f64, f64)) -> usize {
        let (xa, xb) = ((x0 * self.w as f64) as u32, (x1 * self.w as f64) as u32);
        let (ya, yb) = ((y0 * self.h as f64) as u32, (y1 * self.h as f64) as u32);
        (ya..yb)
            .flat_map(|y| (xa..xb).map(move |x| (x, y)))
            .filter(|&(x, y)| self.at(x, y) == [c.0, c.1, c.2])
            .count()
    }

    /// Pixels that differ from `other` in the box.
    fn diff(&self, other: &Image, (x0, y0, x1, y1): (f64, f64, f64, f64)) -> usize {
        let (xa, xb) = ((x0 * self.w as f64) as u32, (x1 * self.w as f64) as u32);
        let (ya, yb) = ((y0 * self.h as f64) as u32, (y1 * self.h as f64) as u32);
        (ya..yb)
            .flat_map(|y| (xa..xb).map(move |x| (x, y)))
            .filter(|&(x, y)| self.at(x, y) != other.at(x, y))
            .count()
    }
}

/// The text of every `<text>` element of an SVG, unescaped.
fn svg_texts(svg: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find("<text") {
        rest = &rest[i..];
        let open = rest.find('>').unwrap();
        let close = rest.find("</text>").unwrap();
        out.push(
            rest[open + 1..close]
                .trim()
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&#39;", "'")
                .replace("&amp;", "&"),
        );
        rest = &rest[close..];
    }
    out
}

fn opts(text: bool) -> PlotOptions {
    PlotOptions {
        text,
        ..PlotOptions::default()
    }
}

/// Draws `kind` with and without text; checks size, colours in `data_box`, text
/// in the label strips, and the SVG's text; returns the SVG's texts.
fn check(
    kind: Plot,
    rec: &Recording,
    run: &RunInfo,
    o: PlotOptions,
    data_box: (f64, f64, f64, f64),
    min_marks: usize,
) -> Vec<String> {
    let with = Image::decode(&plot::render_png(kind, rec, run, &o).unwrap());
    let without = Image::decode(
        &plot::render_png(kind, rec, run, &PlotOptions { text: false, ..o }).unwrap(),
    );
    assert_eq!((with.w, with.h), kind.size(), "{kind:?}: size");
    assert_eq!((without.w, without.h), kind.size());

    // The data: marks in every population's colour inside the plot area.
    let mut colors: Vec<Rgb> = rec.populations.iter().map(|p| p.color).collect();
    colors.dedup();
    for c in colors {
        let n = with.count(c, data_box);
        assert!(
            n >= min_marks,
            "{kind:?}: only {n} pixels of {} in the plot area",
            c.hex()
        );
        // Text does not move or cover the marks.
        assert_eq!(
            without.count(c, data_box),
            n,
            "{kind:?}: marks differ without text"
        );
    }

    // The text: the label strips (left: y ticks and title, bottom: x ticks and
    // title) change when text is drawn.
    let left = with.diff(&without, (0.0, 0.1, 0.07, 0.9));
    let bottom = with.diff(&without, (0.1, 0.9, 0.9, 1.0));
    assert!(
        left > 100,
        "{kind:?}: no y-axis text ({left} pixels differ)"
    );
    assert!(
        bottom > 300,
        "{kind:?}: no x-axis text ({bottom} pixels differ)"
    );
    // Glyphs are anti-aliased: text adds grey levels, not just ink.
    let levels: std::collections::BTreeSet<[u8; 3]> = (0..with.h)
        .flat_map(|y| (0..with.w / 10).map(move |x| (x, y)))
        .map(|(x, y)| with.at(x, y))
        .collect();
    assert!(levels.len() > 20, "{kind:?}: text is not anti-aliased");

    // The SVG twin: same size, the text as text; none without text.
    let svg = plot::render_svg(kind, rec, run, &o).unwrap();
    let (w, h) = kind.size();
    assert!(
        svg.contains(&format!("width=\"{w}\"")) && svg.contains(&format!("height=\"{h}\"")),
        "{kind:?}: SVG size"
    );
    let bare = plot::render_svg(kind, rec, run, &PlotOptions { text: false, ..o }).unwrap();
    assert!(
        !bare.contains("<text"),
        "{kind:?}: text drawn though switched off"
    );
    svg_texts(&svg)
}

fn has(texts: &[String], want: &str) {
    assert!(
        texts.iter().any(|t| t == want),
        "missing text {want:?} in {texts:?}"
    );
}

/// The title, possibly wrapped onto several lines at its ` · ` separators.
fn has_title(texts: &[String], title: &str) {
    let joined = texts.join(" · ");
    assert!(
        joined.contains(title),
        "missing title {title:?} in {texts:?}"
    );
}

fn has_prefix(texts: &[String], want: &str) {
    assert!(
        texts.iter().any(|t| t.starts_with(want)),
        "missing text {want:?}… in {texts:?}"
    );
}

/// Every text of `want` is among `texts`.
fn has_all(texts: &[String], want: &[&str]) {
    for s in want {
        has(texts, s);
    }
}

/// The Brunel recording's plot `kind`, checked as [`check`] does with text on
/// (its marks in `data_box`, at least `min_marks` pixels of each colour) and
/// with every text of `want`; its texts, and the run.
fn brunel(
    kind: Plot,
    data_box: (f64, f64, f64, f64),
    min_marks: usize,
    want: &[&str],
) -> (Vec<String>, RunInfo) {
    let (rec, run) = common::brunel();
    let t = check(kind, &rec, &run, opts(true), data_box, min_marks);
    has_all(&t, want);
    (t, run)
}

#[test]
fn brunel_raster() {
    let texts = [
        "time (ms)",
        "neuron index",
        "rate (Hz)",
        "E",
        "I",
        "0",
        "400",
        "100",
        "500",
    ];
    let (t, run) = brunel(Plot::Raster, (0.15, 0.2, 0.95, 0.6), 2000, &texts);
    has_title(&t, &run.title(500.0));
    assert_eq!(run.title(500.0), "Brunel (2000) balanced network · 500 neurons, 62.5 k synapses · 2 ranks × 1 thread · 500 ms simulated");
    has_prefix(&t, "raster: the first 50 neurons");
    // The onset (every neuron at 10 ms) is far above the rest: marked off scale.
    has_prefix(&t, "▲ off scale: peak 1,000 Hz");
}

#[test]
fn brunel_firing_rates() {
    let texts = [
        "firing rate (spikes/s)",
        "E",
        "I",
        "0",
        "Firing rate per population (mean ± SD across neurons)",
    ];
    brunel(Plot::FiringRates, (0.1, 0.1, 0.9, 0.85), 5000, &texts);
}

#[test]
fn brunel_cv_isi() {
    let texts = ["CV of ISI", "fraction of neurons", "0"];
    let (t, _) = brunel(Plot::CvIsi, (0.1, 0.1, 0.98, 0.88), 300, &texts);
    has_prefix(&t, "E: mean 0.");
    has_prefix(&t, "I: mean 0.");
}

#[test]
fn brunel_overview() {
    let texts = [
        "time (ms)",
        "neuron index",
        "firing rate (spikes/s)",
        "CV of ISI",
        "E",
        "I",
    ];
    let (t, run) = brunel(Plot::Overview, (0.1, 0.15, 0.98, 0.85), 5000, &texts);
    has_title(&t, &run.title(500.0));
}

#[test]
fn microcircuit_eight_populations_with_layer_labels() {
    let (rec, run) = common::microcircuit();
    let o = PlotOptions {
        rows: Rows::Proportional(600),
        ..opts(true)
    };
    let t = check(Plot::Raster, &rec, &run, o, (0.12, 0.25, 0.95, 0.65), 300);
    // Layer labels on the y axis (one per layer, as NEST's example), the axis
    // title, and all eight populations in the legend.
    has_all(
        &t,
        &["layer", "L2/3", "L4", "L5", "L6", "time (ms)", "rate (Hz)"],
    );
    for p in &rec.populations {
        has(&t, &p.name);
    }
    assert!(!t.iter().any(|s| s == "neuron index"));
    let t = check(
        Plot::FiringRates,
        &rec,
        &run,
        o,
        (0.15, 0.1, 0.9, 0.85),
        2000,
    );
    for p in &rec.populations {
        has(&t, &p.name);
    }
    let t = check(Plot::CvIsi, &rec, &run, o, (0.1, 0.1, 0.85, 0.88), 100);
    has_all(
        &t,
        &["L2/3", "L4", "L5", "L6", "CV of ISI", "fraction of neurons"],
    );
    has_prefix(&t, "L2/3E 0.");
    let t = check(Plot::Overview, &rec, &run, o, (0.1, 0.2, 0.98, 0.8), 2000);
    has(&t, "L2/3");
}

#[test]
fn the_raster_shows_the_chosen_rows() {
    // The first 10 neurons of each population: ids 0..10 and 400..410 only.
    let (rec, run) = common::brunel();
    let o = PlotOptions {
        rows: Rows::PerPopulation(10),
        ..opts(true)
    };
    let t = svg_texts(&plot::render_svg(Plot::Raster, &rec, &run, &o).unwrap());
    has(&t, "0");
    has(&t, "400");
    assert!(!t.iter().any(|s| s == "20" || s == "420"), "{t:?}");
    has_prefix(&t, "raster: the first 10 neurons");
}

#[test]
fn plots_are_written_atomically_with_their_twins() {
    let (rec, run) = common::brunel();
    let dir = hpc_test_support::TmpDir::new("spike-report", "plots");
    let w = plot::write_all(&dir, &rec, &run, &PlotOptions::default()).unwrap();
    assert_eq!(w.plots.len(), Plot::ALL.len());
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "cv-isi.png",
            "cv-isi.svg",
            "firing-rates.png",
            "firing-rates.svg",
            "overview.png",
            "overview.svg",
            "raster.png",
            "raster.svg"
        ]
    );
    assert_eq!(
        std::fs::read(w.png(Plot::Raster).unwrap()).unwrap()[1..4],
        *b"PNG"
    );
    // An unwritable directory: the error names the file.
    let e = plot::write_all(&dir.join("missing"), &rec, &run, &PlotOptions::default()).unwrap_err();
    assert!(e.to_string().contains("missing/overview.png"), "{e}");
}

#[test]
fn bad_input_is_refused_with_its_name() {
    let (mut rec, run) = common::brunel();
    rec.spikes.push((5, 9999));
    let e = plot::render_png(Plot::Raster, &rec, &run, &PlotOptions::default()).unwrap_err();
    assert!(e.to_string().contains("neuron 9999"), "{e}");
    let (rec, run) = common::brunel();
    let o = PlotOptions {
        rate_bin_ms: Some(-1.0),
        ..PlotOptions::default()
    };
    let e = plot::render_png(Plot::Raster, &rec, &run, &o).unwrap_err();
    assert!(e.to_string().contains("rate_bin_ms"), "{e}");
    // Written short: -1e300 was written out in 301 digits.
    let o = PlotOptions {
        rate_bin_ms: Some(-1e300),
        ..PlotOptions::default()
    };
    let e = plot::render_png(Plot::Raster, &rec, &run, &o).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid input: rate_bin_ms must be > 0, got -1e300"
    );
    let o = PlotOptions {
        rows: Rows::PerPopulation(0),
        ..PlotOptions::default()
    };
    assert!(plot::render_png(Plot::Raster, &rec, &run, &o).is_err());
}

/// A rate bin given by the caller made a bin per `rate_bin_ms` of the window,
/// unbounded: 0.1 ms over 10^6 ms drew a 183 MB raster, and a bin of 1e-300 ms
/// (a tick as small), or 1 ms over a window of 1e300 ms, panicked allocating
/// them. More bins than a figure draws are refused by name; as many are drawn.
#[test]
fn a_rate_bin_that_makes_too_many_bins_is_refused_before_they_are_made() {
    let (base, run) = common::brunel();
    let rows: [(f64, f64, f64); 3] = [(0.1, 1e6, 0.1), (1e-300, 500.0, 1e-300), (0.1, 1e300, 1.0)];
    for (dt, t_stop, bin) in rows {
        let rec = Recording {
            dt_ms: dt,
            t_stop_ms: t_stop,
            ..base.clone()
        };
        let o = PlotOptions {
            rate_bin_ms: Some(bin),
            ..PlotOptions::default()
        };
        let e = plot::render_svg(Plot::Raster, &rec, &run, &o).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("rate_bin_ms")
                && text.contains(&format!("more than the {MAX_RATE_BINS}")),
            "{dt} {t_stop} {bin}: {text}"
        );
    }
    let rec = Recording {
        t_stop_ms: MAX_RATE_BINS as f64 * 0.1,
        ..base
    };
    let o = PlotOptions {
        rate_bin_ms: Some(0.1),
        ..PlotOptions::default()
    };
    plot::render_svg(Plot::FiringRates, &rec, &run, &o).unwrap();
}

#[test]
fn a_silent_population_still_draws() {
    // No spikes at all: empty bars and histograms, no panic, text still there.
    let (mut rec, run) = common::brunel();
    rec.spikes.clear();
    for kind in Plot::ALL {
        let svg = plot::render_svg(kind, &rec, &run, &PlotOptions::default()).unwrap();
        assert!(svg.contains("<text"));
        plot::render_png(kind, &rec, &run, &PlotOptions::default()).unwrap();
    }
}

/// A population, group or model named with a control character (`"E\u{1}"`)
/// was written into the SVGs as it was: XML 1.0 allows no such character, so
/// the figure did not open. Every figure's text is now free of them.
#[test]
fn control_characters_in_names_leave_every_svg_valid_xml() {
    let (mut rec, run) = common::brunel();
    rec.populations[0].name = "E\u{1}\u{1b}[31m".into();
    rec.populations[1].name = "I\u{0}".into();
    let run = RunInfo::new("model\u{7}", run.neurons, 1, 1);
    for kind in Plot::ALL {
        let svg = plot::render_svg(kind, &rec, &run, &PlotOptions::default()).unwrap();
        let bad: Vec<u32> = svg
            .chars()
            .filter(|&c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
            .map(u32::from)
            .collect();
        assert!(bad.is_empty(), "{kind:?}: {bad:?}");
        assert!(svg.contains('\u{fffd}'), "{kind:?}");
        plot::render_png(kind, &rec, &run, &PlotOptions::default()).unwrap();
    }
}

/// A figure of populations whose statistics need more than the memory
/// available is refused by name before anything is allocated (2^32 - 1
/// neurons aborted the process on an allocation of 16 GiB through the raster).
#[test]
fn a_figure_of_populations_beyond_memory_is_refused() {
    let r = Recording {
        populations: vec![hpc_spike_report::Population::new(
            "E",
            0,
            u32::MAX,
            Rgb(0, 0, 0),
        )],
        spikes: vec![(1, 5)],
        dt_ms: 0.1,
        t_start_ms: 0.0,
        t_stop_ms: 10.0,
        group_title: None,
    };
    let need = u64::from(u32::MAX) * hpc_spike_report::stats::BYTES_PER_NEURON;
    if hpc_io::read::mem_available().is_none_or(|a| a >= need) {
        eprintln!("this machine has {need} bytes available: nothing to refuse");
        return;
    }
    let run = RunInfo::new("m", u64::from(u32::MAX), 1, 1);
    let e = plot::render_svg(Plot::Raster, &r, &run, &PlotOptions::default()).unwrap_err();
    assert!(e.to_string().contains("4294967295 neurons"), "{e}");
}
