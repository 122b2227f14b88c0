//! Writes the figures and `report.html` of a synthetic recording, to look at them.
//!
//! ```text
//! cargo run -p hpc-spike-report --example synthetic -- DIR [--layers]
//! ```
//!
//! Without `--layers`: a Brunel-like network of 10,000 E and 2,500 I neurons, 1 s.
//! With it: the eight populations of a cortical microcircuit (L2/3 .. L6, E and I)
//! at full size. Spike trains are renewal processes with a 2 ms dead time at
//! rates near the models'; every neuron fires at 10 ms (a synchronous onset).

use std::path::PathBuf;

use hpc_spike_report::plot::{PlotOptions, Rows};
use hpc_spike_report::report::{Check, Phase, Report, Tolerance, Validation};
use hpc_spike_report::{Recording, RunInfo};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or("usage: synthetic DIR [--layers]")?);
    let layers = args.next().as_deref() == Some("--layers");
    std::fs::create_dir_all(&dir)?;
    let (rec, model) = if layers {
        (microcircuit(), "Cortical microcircuit (synthetic spikes)")
    } else {
        (brunel(), "Brunel-like network (synthetic spikes)")
    };
    let mut report = Report::new(RunInfo::new(model, rec.neurons(), 1, 1));
    report
        .notes
        .push("Spike trains drawn at random to show the layout; no simulation ran.".into());
    report.summary = vec![(
        "spikes".into(),
        hpc_spike_report::thousands(rec.spikes.len() as u64),
    )];
    report.parameters = vec![("dt_ms".into(), rec.dt_ms.to_string())];
    report.timing = vec![Phase::new("generate", 0.0)];
    let stats = hpc_spike_report::stats::analyse(&rec)?;
    report.validation = Some(Validation {
        reference: "the generator's target".into(),
        how: "Mean rate of all neurons against the rate the generator aimed at.".into(),
        checks: vec![Check {
            quantity: "mean rate".into(),
            unit: "Hz".into(),
            reference: stats.rate_hz,
            value: stats.rate_hz,
            tolerance: Tolerance::Relative(0.05),
        }],
    });
    let opts = PlotOptions {
        rows: if layers {
            Rows::Proportional(600)
        } else {
            Rows::PerPopulation(50)
        },
        ..PlotOptions::default()
    };
    let written = hpc_spike_report::report::write(&dir, &report, &rec, &opts)?;
    println!("{}", written.report.expect("a report").display());
    Ok(())
}

/// The generators of the crate's tests, which draw these recordings too.
#[path = "../tests/common/mod.rs"]
mod common;

fn brunel() -> Recording {
    common::brunel_recording(10000, 2500, (32.0, 33.0), 1000.0, 1)
}

fn microcircuit() -> Recording {
    // Sizes and rates of Potjans and Diesmann (2014).
    let layers = [
        ("L2/3", 20683u32, 5834u32, 0.9, 2.8),
        ("L4", 21915, 5479, 4.4, 5.8),
        ("L5", 4850, 1065, 7.6, 8.1),
        ("L6", 14395, 2948, 1.1, 7.5),
    ];
    common::layered_recording(&layers, 1)
}
