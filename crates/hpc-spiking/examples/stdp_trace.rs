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

#[path = "common/cases.rs"]
mod cases;
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
    let mut traces = Vec::new();
    for c in cases::read(path, 8, &["pre", "post"])? {
        let [tau_plus, lambda, alpha, mu, tau_minus, weight, delay, min_delay] = c.params[..]
        else {
            unreachable!("cases::read checked the count");
        };
        let [pre, post] = <[Vec<f64>; 2]>::try_from(c.series).expect("two series");
        let case = Case {
            name: c.name,
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
        };
        traces.push(trace(&case).with_context(|| format!("case {}", case.name))?);
    }
    let out = serde_json::json!({ "cases": traces });
    hpc_io::write::stdout_line(format_args!("{out}"))?;
    hpc_io::write::flush_stdout()?;
    Ok(())
}
