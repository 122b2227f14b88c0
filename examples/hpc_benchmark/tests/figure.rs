//! The weight histogram a run writes beside its summary (`weights.svg`): there,
//! well-formed, one bar per bin of the summary's histogram with the heights of
//! its counts; absent with `--no-plot`.

use std::path::Path;
use std::time::Duration;

use hpc_benchmark::figure::{weights_svg, Bar};
use hpc_test_support::{example, Job};

const BIN: &str = env!("CARGO_BIN_EXE_hpc_benchmark");
const MODEL: &[&str] = &["--scale", "0.02", "--t-presim", "10", "--t-sim", "40"];

/// Checks that `doc` is a well-formed XML document whose root is `<svg>`:
/// every element closed in order, attributes quoted, `&` only in the five
/// predefined entities or a character reference, no `<` in text or values.
fn well_formed(doc: &str) -> Result<(), String> {
    let body = doc
        .strip_prefix("<?xml version=\"1.0\" encoding=\"UTF-8\"?>")
        .ok_or("no XML declaration")?;
    let mut stack: Vec<&str> = Vec::new();
    let mut rest = body;
    let mut roots = 0;
    let check_text = |t: &str| -> Result<(), String> {
        let mut parts = t.split('&');
        parts.next();
        for p in parts {
            let ent = p.split(';').next().unwrap_or("");
            let ok = ["amp", "lt", "gt", "quot", "apos"].contains(&ent)
                || (ent.starts_with('#') && p.contains(';'));
            if !ok {
                return Err(format!("a bare & before {p:?}"));
            }
        }
        Ok(())
    };
    while let Some(open) = rest.find('<') {
        let text = &rest[..open];
        if stack.is_empty() && !text.trim().is_empty() {
            return Err(format!("text outside the root: {text:?}"));
        }
        check_text(text)?;
        let close = rest[open..].find('>').ok_or("an unclosed tag")? + open;
        let tag = &rest[open + 1..close];
        rest = &rest[close + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            match stack.pop() {
                Some(top) if top == name.trim() => {}
                other => return Err(format!("</{name}> closes {other:?}")),
            }
            continue;
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let (name, mut attrs) = tag.split_once(char::is_whitespace).unwrap_or((tag, ""));
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(format!("a bad element name {name:?}"));
        }
        // name="value" pairs, each value quoted, no '<' inside.
        loop {
            attrs = attrs.trim_start();
            if attrs.is_empty() {
                break;
            }
            let (key, after) = attrs
                .split_once("=\"")
                .ok_or(format!("attribute {attrs:?}"))?;
            if key.is_empty() || key.contains(char::is_whitespace) {
                return Err(format!("attribute name {key:?}"));
            }
            let (value, after) = after.split_once('"').ok_or("an unquoted value")?;
            if value.contains('<') {
                return Err(format!("'<' in attribute {key}"));
            }
            check_text(value)?;
            attrs = after;
        }
        if stack.is_empty() {
            roots += 1;
            if name != "svg" {
                return Err(format!("the root is <{name}>"));
            }
        }
        if !self_closing {
            stack.push(name);
        }
    }
    if !rest.trim().is_empty() || !stack.is_empty() || roots != 1 {
        return Err(format!("open at the end: {stack:?}, {roots} root(s)"));
    }
    Ok(())
}

/// The heights of the bars (`height="..."` of each `class="bar"` rectangle).
fn bar_heights(svg: &str) -> Vec<f64> {
    svg.split("<rect class=\"bar\"")
        .skip(1)
        .map(|r| {
            let h = r.split("height=\"").nth(1).unwrap();
            h[..h.find('"').unwrap()].parse().unwrap()
        })
        .collect()
}

fn run(out: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args: Vec<String> = MODEL.iter().map(|s| s.to_string()).collect();
    args.extend(["--quiet", "--no-pin", "--out"].map(String::from));
    args.push(out.display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for o in Job::program(BIN, &args, 1)
        .timeout(Duration::from_secs(60))
        .run()
    {
        assert!(o.status.success(), "{}", example::stderr(&o));
    }
    serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn a_run_writes_its_weight_histogram() {
    let dir = hpc_test_support::TmpDir::new("hpc-benchmark-figure", "run");
    let summary = run(&dir.join("plot"), &[]);
    let svg = std::fs::read_to_string(dir.join("plot").join("weights.svg")).unwrap();
    well_formed(&svg).unwrap();
    let bins = summary["weights"]["histogram"].as_array().unwrap();
    assert!(
        bins.len() > 5,
        "{} bins: the weights hardly spread",
        bins.len()
    );
    let counts: Vec<f64> = bins.iter().map(|b| b["count"].as_f64().unwrap()).collect();
    let heights = bar_heights(&svg);
    assert_eq!(heights.len(), counts.len());
    // Heights in proportion to the counts (to the 0.01 px they are written with).
    let (hmax, cmax) = (
        heights.iter().copied().fold(0.0, f64::max),
        counts.iter().copied().fold(0.0, f64::max),
    );
    for (h, c) in heights.iter().zip(&counts) {
        assert!(
            (h / hmax - c / cmax).abs() < 1e-3,
            "height {h} for count {c}"
        );
    }
    let total: f64 = counts.iter().sum();
    assert_eq!(Some(total as u64), summary["stdp_synapses"].as_u64());
    assert!(
        svg.contains("initial 45.61 pA"),
        "no marker of the initial weight"
    );

    // --no-plot: the same run without the figure.
    run(&dir.join("none"), &["--no-plot"]);
    assert!(dir.join("none").join("summary.json").exists());
    assert!(!dir.join("none").join("weights.svg").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn edge_histograms_are_well_formed() {
    // No synapse, one bin (plasticity off), a title with markup characters.
    let one = [Bar {
        low_pa: 45.6,
        high_pa: 45.61,
        count: 1_620_000,
    }];
    for (bars, title) in [(&[][..], "none"), (&one[..], "E->E <&> \"quoted\"")] {
        let svg = weights_svg(bars, title, "a & b", 45.61);
        well_formed(&svg).unwrap_or_else(|e| panic!("{e}:\n{svg}"));
        assert_eq!(bar_heights(&svg).len(), bars.len());
    }
    // The checker is not a formality.
    assert!(well_formed("<?xml version=\"1.0\" encoding=\"UTF-8\"?><svg><g></svg>").is_err());
    assert!(well_formed("<?xml version=\"1.0\" encoding=\"UTF-8\"?><svg a=b/>").is_err());
    assert!(well_formed("<?xml version=\"1.0\" encoding=\"UTF-8\"?><svg>a & b</svg>").is_err());
}
