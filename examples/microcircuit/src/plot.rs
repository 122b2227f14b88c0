//! Figures and the run report, drawn by `hpc-spike-report` from the spike
//! file and the summary: raster (grouped by layer, as NEST's example draws it),
//! per-population firing rates, CV of ISIs, overview (PNG and SVG), and
//! `report.html`, over the recorded time (after the warm-up).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use hpc_io::message::num;
use hpc_spike_report::plot::{PlotOptions, Rows};
use hpc_spike_report::report::{Phase, Report};
use hpc_spike_report::{palette, Population, Recording};
use serde_json::Value;

use crate::params::{Model, NPOP, POPULATIONS};

/// The recording of a spike file of `model`, over the recorded time.
pub fn recording(spikes: &Path, model: &Model) -> Result<Recording> {
    let f = crate::output::read_spikes(spikes)?;
    let layers = ["L2/3", "L2/3", "L4", "L4", "L5", "L5", "L6", "L6"];
    let populations = (0..NPOP)
        .map(|i| {
            let color = if i % 2 == 0 {
                palette::EXCITATORY
            } else {
                palette::INHIBITORY
            };
            Population::new(POPULATIONS[i], model.first[i], model.sizes[i], color)
                .in_group(layers[i])
        })
        .collect();
    let p = &model.params;
    Ok(Recording {
        populations,
        spikes: f.spikes,
        dt_ms: p.dt,
        t_start_ms: p.t_presim,
        t_stop_ms: p.t_presim + p.t_sim,
        group_title: Some("layer".into()),
    })
}

/// Draws the figures and writes `report.html` into `out`; returns the report's path.
pub fn report(spikes: &Path, model: &Model, summary: &Value, out: &Path) -> Result<PathBuf> {
    let rec = recording(spikes, model)?;
    let p = &model.params;
    let u = |k: &str| summary[k].as_u64().unwrap_or(0);
    let f = |k: &str| summary[k].as_f64().unwrap_or(0.0);
    let mut rep = Report::of_summary(
        "Potjans & Diesmann (2014) microcircuit",
        model.n as u64,
        summary,
    );
    rep.notes.push(format!(
        "NEST's Potjans_2014 example: iaf_psc_exp neurons, N_scaling {}, K_scaling {}, {:?} background; {} ms warm-up (not shown) and {} ms recorded in steps of {} ms.",
        num(p.n_scaling),
        num(p.k_scaling),
        p.input,
        num(p.t_presim),
        num(p.t_sim),
        num(p.dt)
    ));
    let th = hpc_spike_report::thousands;
    rep.summary = vec![
        ("neurons".into(), th(model.n as u64)),
        ("synapses".into(), th(u("synapses"))),
        Report::ranks_threads_row(summary),
        Report::wall_time_row(summary),
        (
            "real-time factor".into(),
            format!(
                "{:.3} (recorded time, after the warm-up)",
                f("real_time_factor")
            ),
        ),
        (
            "bytes per synapse".into(),
            format!("{:.3} (connectivity)", f("bytes_per_synapse")),
        ),
    ];
    if let Some(pops) = summary["stats"]["populations"].as_array() {
        for q in pops {
            rep.summary.push((
                q["name"].as_str().unwrap_or("?").to_string(),
                format!(
                    "{:.3} Hz, CV ISI {:.3}",
                    q["rate_hz"].as_f64().unwrap_or(0.0),
                    q["cv_isi"].as_f64().unwrap_or(0.0)
                ),
            ));
        }
    }
    rep.timing = vec![
        Phase::new("build network", f("build_s")),
        Phase::new("simulate", f("simulate_s")),
    ];
    if let Some(o) = summary["params"].as_object() {
        rep.parameters = o
            .iter()
            .filter(|(_, v)| !v.is_object())
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect();
    }
    let opts = PlotOptions {
        rows: Rows::Proportional(1000),
        ..PlotOptions::default()
    };
    let written = hpc_spike_report::report::write(out, &rep, &rec, &opts)?;
    written.report.context("the report was not written")
}
