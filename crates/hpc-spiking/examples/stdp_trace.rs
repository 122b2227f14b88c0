//! The weight of `stdp_pl_synapse_hom` synapses after every presynaptic spike,
//! for given pre- and postsynaptic spike trains: the Rust side of
//! `validate/stdp_vs_nest.sh`, which gives NEST 3.10 the same trains.
//!
//! ```text
//! cargo run --release -p hpc-spiking --example stdp_trace -- cases.txt > weights.json
//! ```
//!
//! `cases.txt`, three lines a case (one synapse), numbers as Rust parses them:
//!
//! ```text
//! case NAME tau_plus lambda alpha mu tau_minus weight delay min_delay
//! pre T1 T2 ...     (presynaptic spike times, ms)
//! post T1 T2 ...    (postsynaptic spike times, ms)
//! ```
//!
//! (Text rather than JSON: `serde_json`'s default float parsing may be one ulp
//! off, which shows in a comparison to 1e-12.) Output, one JSON line:
//! `{"cases": [{"name", "times": [ms...], "weights": [...]}]}`, a time and a
//! weight for every presynaptic spike.

use anyhow::{bail, Context, Result};
use hpc_spiking::plasticity::{PostArchive, StdpPlHom, StdpPlParams, StdpRow, STDP_EPS_MS};
use serde::Serialize;

struct Case {
    name: String,
    tau_plus: f64,
    lambda: f64,
    alpha: f64,
    mu: f64,
    tau_minus: f64,
    weight: f64,
    delay: f64,
    min_delay: f64,
    pre: Vec<f64>,
    post: Vec<f64>,
}

/// The cases of `text` (see the module docs).
fn parse(text: &str) -> Result<Vec<Case>> {
    let nums = |words: std::str::SplitWhitespace, line: usize| -> Result<Vec<f64>> {
        words
            .map(|w| {
                w.parse::<f64>()
                    .with_context(|| format!("line {line}: {w:?} is not a number"))
            })
            .collect()
    };
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let mut cases = Vec::new();
    while let Some((i, line)) = lines.next() {
        let mut words = line.split_whitespace();
        let (Some("case"), Some(name)) = (words.next(), words.next()) else {
            bail!("line {}: expected `case NAME ...`", i + 1);
        };
        let p = nums(words, i + 1)?;
        let [tau_plus, lambda, alpha, mu, tau_minus, weight, delay, min_delay] = p[..] else {
            bail!(
                "line {}: case {name} needs 8 numbers, has {}",
                i + 1,
                p.len()
            );
        };
        let mut train = |what: &str| -> Result<Vec<f64>> {
            let (j, line) = lines
                .next()
                .with_context(|| format!("case {name}: no `{what}` line"))?;
            let mut words = line.split_whitespace();
            if words.next() != Some(what) {
                bail!("line {}: expected `{what} ...`", j + 1);
            }
            nums(words, j + 1)
        };
        let (pre, post) = (train("pre")?, train("post")?);
        let name = name.to_string();
        cases.push(Case {
            name,
            tau_plus,
            lambda,
            alpha,
            mu,
            tau_minus,
            weight,
            delay,
            min_delay,
            pre,
            post,
        });
    }
    Ok(cases)
}

#[derive(Serialize)]
struct Trace {
    name: String,
    times: Vec<f64>,
    weights: Vec<f64>,
}

fn trace(case: &Case) -> Result<Trace> {
    let params = StdpPlParams {
        tau_plus: case.tau_plus,
        lambda: case.lambda,
        alpha: case.alpha,
        mu: case.mu,
    };
    let rule = StdpPlHom::new(params)?;
    let mut post = vec![PostArchive::new(case.tau_minus, case.min_delay)?];
    let mut row = StdpRow::new(case.delay)?;
    row.connect(0, case.weight, &mut post)?;
    let (mut next, mut weights) = (0, Vec::with_capacity(case.pre.len()));
    for &t in &case.pre {
        // Every postsynaptic spike that reached the synapse by `t` first.
        while next < case.post.len() && case.post[next] + case.delay < t + STDP_EPS_MS {
            post[0].record_post_spike(case.post[next])?;
            next += 1;
        }
        let (_, w) = row
            .deliver(&rule, t, &mut post)?
            .next()
            .context("a row of one synapse")?;
        weights.push(w);
    }
    Ok(Trace {
        name: case.name.clone(),
        times: case.pre.clone(),
        weights,
    })
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path] = args.as_slice() else {
        bail!("usage: stdp_trace CASES.txt (see the source's docs for its format)");
    };
    let text = hpc_io::read::read_regular_to_string(path, 1 << 30)
        .with_context(|| format!("reading {path}"))?;
    let cases = parse(&text).with_context(|| format!("parsing {path}"))?;
    let traces = cases
        .iter()
        .map(|c| trace(c).with_context(|| format!("case {}", c.name)))
        .collect::<Result<Vec<_>>>()?;
    let out = serde_json::json!({ "cases": traces });
    hpc_io::write::stdout_line(format_args!("{out}"))?;
    hpc_io::write::flush_stdout()?;
    Ok(())
}
