//! Figures and the run report, drawn by `hpc-spike-report` from the spike
//! file and the summary: `raster`, `firing-rates`, `cv-isi` and `overview` (PNG and
//! SVG) and `report.html` in the output directory.
//!
//! With `--reference FILE` (the JSON line `tools/nest_brunel.py` prints for the
//! same parameters) the report compares the run with NEST: mean rate within 5 %
//! and mean CV of ISIs within 0.05, the tolerances of `validate.sh`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use hpc_io::message::num;
use hpc_spike_report::plot::{PlotOptions, Rows};
use hpc_spike_report::report::{Check, Phase, Report, Tolerance, Validation};
use hpc_spike_report::{palette, Population, Recording};
use serde_json::Value;

use crate::params::Model;

/// Neurons of each population shown in the raster.
pub const RASTER_NEURONS: u32 = 50;

/// A reference simulator's statistics of the same network.
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    /// The file it came from.
    pub path: PathBuf,
    /// The simulator and its version (`NEST 3.10.0`).
    pub simulator: String,
    /// Its mean rate (Hz).
    pub rate_hz: f64,
    /// Its mean CV of ISIs.
    pub cv_isi: f64,
    /// Its spike count.
    pub spikes: Option<u64>,
}

impl Reference {
    /// Reads the last JSON line of `path` and checks that it describes `model`'s
    /// network (order, in-degrees, reset potential, simulated time); the error
    /// names the file and the field.
    pub fn read(path: &Path, model: &Model) -> Result<Reference> {
        // The error names the flag and the file (it said "reading the reference").
        let text = hpc_spiking::args::read_flag_file(
            "--reference",
            path,
            hpc_io::read::MAX_REFERENCE_BYTES,
        )?;
        let line = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .with_context(|| format!("the reference {} is empty", hpc_io::message::path(path)))?;
        let v: Value = serde_json::from_str(line).with_context(|| {
            format!(
                "the reference {} is not JSON (tools/nest_brunel.py's last line)",
                hpc_io::message::path(path)
            )
        })?;
        Reference::from_json(&v, model)
            .with_context(|| format!("in the reference {}", hpc_io::message::path(path)))
            .map(|mut r| {
                r.path = path.to_owned();
                r
            })
    }

    fn from_json(v: &Value, model: &Model) -> Result<Reference> {
        let num = |k: &str| v[k].as_f64().with_context(|| format!("no number `{k}`"));
        let p = &model.params;
        let same = |k: &str, ours: f64| -> Result<()> {
            let theirs = num(k)?;
            if (theirs - ours).abs() > 1e-9 * ours.abs().max(1.0) {
                bail!(
                    "`{k}` is {}, this run has {}: not the same network",
                    hpc_io::message::num(theirs),
                    hpc_io::message::num(ours)
                );
            }
            Ok(())
        };
        // A rate or a CV is a number >= 0: a negative one is no simulator's.
        let statistic = |k: &str| -> Result<f64> {
            let x = num(k)?;
            if !(x.is_finite() && x >= 0.0) {
                bail!(
                    "`{k}` is {}: not a statistic of a run",
                    hpc_io::message::num(x)
                );
            }
            Ok(x)
        };
        same("order", p.order as f64)?;
        same("ce", model.ce as f64)?;
        same("ci", model.ci as f64)?;
        same("v_reset", p.v_reset)?;
        same("t_sim_ms", p.t_sim)?;
        Ok(Reference {
            path: PathBuf::new(),
            simulator: v["simulator"].as_str().unwrap_or("reference").to_string(),
            rate_hz: statistic("rate_hz")?,
            cv_isi: statistic("cv_isi")?,
            spikes: v["spikes"].as_u64(),
        })
    }

    /// The comparison of `summary`'s statistics with this reference.
    pub fn validation(&self, summary: &Value) -> Result<Validation> {
        let stats = &summary["stats"];
        let num = |k: &str| {
            stats[k]
                .as_f64()
                .with_context(|| format!("summary has no stats.{k}"))
        };
        Ok(Validation {
            reference: self.simulator.clone(),
            how: format!(
                "The reference {} (written by tools/nest_brunel.py) holds {}'s statistics of the same network. Connectivity and drive come from different random generators, so the comparison is statistical, with the tolerances of validate.sh.",
                hpc_io::message::path(&self.path),
                self.simulator
            ),
            checks: vec![
                Check {
                    quantity: "mean rate".into(),
                    unit: "Hz".into(),
                    reference: self.rate_hz,
                    value: num("rate_hz")?,
                    tolerance: Tolerance::Relative(0.05),
                },
                Check {
                    quantity: "mean CV of ISIs".into(),
                    unit: String::new(),
                    reference: self.cv_isi,
                    value: num("cv_isi")?,
                    tolerance: Tolerance::Absolute(0.05),
                },
            ],
        })
    }
}

/// The recording of a spike file written by this example.
pub fn recording(spikes: &Path, model: &Model) -> Result<Recording> {
    let f = hpc_spiking::spikes::read_spikes(spikes)?;
    let pops = f.header["populations"].as_array().with_context(|| {
        format!(
            "{} has no populations in its header",
            hpc_io::message::path(spikes)
        )
    })?;
    let mut populations = Vec::new();
    for (i, p) in pops.iter().enumerate() {
        let name = p["name"].as_str().unwrap_or("?");
        let color = match name {
            "excitatory" => palette::EXCITATORY,
            "inhibitory" => palette::INHIBITORY,
            _ => palette::categorical(i),
        };
        let field = |k: &str| {
            p[k].as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .with_context(|| {
                    format!(
                        "{}: population {name} has no `{k}`",
                        hpc_io::message::path(spikes)
                    )
                })
        };
        populations.push(Population::new(
            name,
            field("first")?,
            field("count")?,
            color,
        ));
    }
    Ok(Recording {
        populations,
        spikes: f.spikes,
        dt_ms: model.params.dt,
        t_start_ms: 0.0,
        t_stop_ms: model.params.t_sim,
        group_title: None,
    })
}

/// Writes the figures and `report.html` of a finished run into `out`; returns
/// the report's path.
pub fn report(
    spikes: &Path,
    model: &Model,
    summary: &Value,
    reference: Option<&Reference>,
    out: &Path,
) -> Result<PathBuf> {
    let rec = recording(spikes, model)?;
    let p = &model.params;
    let u = |k: &str| summary[k].as_u64().unwrap_or(0);
    let f = |k: &str| summary[k].as_f64().unwrap_or(0.0);
    let mut rep = Report::of_summary("Brunel (2000) balanced network", model.n as u64, summary);
    rep.notes.push(format!(
        "Sparse random network of leaky integrate-and-fire neurons with delta synapses (NEST's brunel_delta_nest.py), order {}, g = {}, eta = {}, V_reset = {} mV; {} ms simulated in steps of {} ms.",
        p.order,
        num(p.g),
        num(p.eta),
        num(p.v_reset),
        num(p.t_sim),
        num(p.dt)
    ));
    let stats = &summary["stats"];
    let ranks = summary["ranks_report"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let max = |k: &str| {
        ranks
            .iter()
            .filter_map(|r| r[k].as_f64())
            .fold(0.0, f64::max)
    };
    let peak: u64 = summary["peak_rss_bytes"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).sum())
        .unwrap_or(0);
    let th = hpc_spike_report::thousands;
    rep.summary = vec![
        (
            "neurons".into(),
            format!(
                "{} ({} E, {} I)",
                th(model.n as u64),
                th(model.ne as u64),
                th(model.ni as u64)
            ),
        ),
        (
            "synapses".into(),
            format!("{} (CE {}, CI {})", th(u("synapses")), model.ce, model.ci),
        ),
        Report::ranks_threads_row(summary),
        (
            "simulated".into(),
            format!("{} ms (dt {} ms)", p.t_sim, p.dt),
        ),
        ("spikes".into(), th(stats["spikes"].as_u64().unwrap_or(0))),
        (
            "mean rate".into(),
            format!("{:.2} Hz", stats["rate_hz"].as_f64().unwrap_or(0.0)),
        ),
        (
            "CV ISI".into(),
            format!(
                "{:.3} (mean over {} neurons with ≥ 2 ISIs)",
                stats["cv_isi"].as_f64().unwrap_or(0.0),
                th(stats["cv_neurons"].as_u64().unwrap_or(0))
            ),
        ),
        Report::wall_time_row(summary),
        (
            "real-time factor".into(),
            format!("{:.3} (wall / biological time)", f("real_time_factor")),
        ),
        (
            "CPU time".into(),
            format!(
                "{:.3} CPU-s simulating, all ranks and threads",
                f("simulate_cpu_s")
            ),
        ),
        (
            "peak memory".into(),
            format!("{:.1} MiB, all ranks", peak as f64 / (1u64 << 20) as f64),
        ),
        (
            "bytes per synapse".into(),
            format!("{:.3} (connectivity)", f("bytes_per_synapse")),
        ),
    ];
    if let Some(r) = reference {
        if let Some(s) = r.spikes {
            rep.summary
                .push((format!("spikes in {}", r.simulator), th(s)));
        }
        rep.validation = Some(r.validation(summary)?);
    }
    // The slowest rank's phases; what the loop spent outside them is "other".
    let (update, comm, io) = (max("update_s"), max("communicate_s"), max("io_s"));
    rep.timing = vec![
        Phase::new("build network", max("build_s")),
        Phase::new("deliver + update", update),
        Phase::new("communicate / wait", comm),
        Phase::new("write spikes, checkpoints", io),
    ];
    let other = f("simulate_s") - update - comm - io;
    if other > 1e-3 {
        rep.timing.push(Phase::new("other (loop, pacing)", other));
    }
    if let Some(o) = summary["params"].as_object() {
        rep.parameters = o.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
    }
    let opts = PlotOptions {
        rows: Rows::PerPopulation(RASTER_NEURONS),
        ..PlotOptions::default()
    };
    let written = hpc_spike_report::report::write(out, &rep, &rec, &opts)?;
    written.report.context("the report was not written")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::{Params, Preset};

    fn model() -> Model {
        Model::new(Params {
            order: 250,
            ce: Some(100),
            ci: Some(25),
            t_sim: 1000.0,
            ..Params::preset(Preset::Nest)
        })
        .unwrap()
    }

    fn nest_line() -> Value {
        serde_json::json!({"simulator": "NEST 3.10.0", "order": 250, "ce": 100, "ci": 25, "v_reset": 0.0,
            "t_sim_ms": 1000.0, "spikes": 71604, "rate_hz": 57.28, "cv_isi": 0.084})
    }

    #[test]
    fn a_reference_for_another_network_is_refused() {
        let m = model();
        let r = Reference::from_json(&nest_line(), &m).unwrap();
        assert_eq!(
            (r.simulator.as_str(), r.rate_hz, r.spikes),
            ("NEST 3.10.0", 57.28, Some(71604))
        );
        let mut v = nest_line();
        v["order"] = 2500.into();
        let e = Reference::from_json(&v, &m).unwrap_err().to_string();
        assert!(e.contains("`order` is 2500, this run has 250"), "{e}");
        let mut v = nest_line();
        v["v_reset"] = 10.0.into();
        assert!(Reference::from_json(&v, &m)
            .unwrap_err()
            .to_string()
            .contains("v_reset"));
        let mut v = nest_line();
        v.as_object_mut().unwrap().remove("rate_hz");
        assert!(Reference::from_json(&v, &m)
            .unwrap_err()
            .to_string()
            .contains("rate_hz"));
    }

    /// Pass 15: `order` 1e300 was written out in 301 digits, and a negative or
    /// huge rate or CV was taken and compared (a difference of 302 digits in
    /// report.html).
    #[test]
    fn a_reference_with_numbers_no_run_has_is_refused_in_a_short_line() {
        let m = model();
        let mut v = nest_line();
        v["order"] = 1e300.into();
        let e = Reference::from_json(&v, &m).unwrap_err().to_string();
        assert!(e.contains("`order` is 1e300, this run has 250"), "{e}");
        for (k, x) in [("rate_hz", -5.0), ("cv_isi", -1e300), ("cv_isi", -0.001)] {
            let mut v = nest_line();
            v[k] = x.into();
            let e = Reference::from_json(&v, &m).unwrap_err().to_string();
            assert!(e.contains(&format!("`{k}`")), "{e}");
            assert!(e.len() < 100, "{e}");
        }
    }

    #[test]
    fn the_validation_uses_validate_sh_tolerances() {
        let r = Reference::from_json(&nest_line(), &model()).unwrap();
        let summary = serde_json::json!({"stats": {"rate_hz": 57.33, "cv_isi": 0.083}});
        let v = r.validation(&summary).unwrap();
        assert!(v.passed());
        let summary = serde_json::json!({"stats": {"rate_hz": 61.0, "cv_isi": 0.083}});
        assert!(!r.validation(&summary).unwrap().passed());
    }

    #[test]
    fn reading_names_the_file() {
        let dir = std::env::temp_dir().join(format!("brunel-ref-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("nest.json");
        std::fs::write(&p, format!("NEST says hello\n{}\n", nest_line())).unwrap();
        assert_eq!(Reference::read(&p, &model()).unwrap().path, p);
        std::fs::write(&p, "not json\n").unwrap();
        let e = format!("{:#}", Reference::read(&p, &model()).unwrap_err());
        assert!(e.contains("nest.json") && e.contains("not JSON"), "{e}");
        let e = format!(
            "{:#}",
            Reference::read(&dir.join("none.json"), &model()).unwrap_err()
        );
        assert!(e.contains("none.json"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
