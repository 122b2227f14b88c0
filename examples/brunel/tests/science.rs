//! The published science, pinned: the four cases validated against NEST 3.10 in the
//! book (`book/src/brunel.md`, "Validation against NEST"), run with the default seed
//! for 1 s of biological time.
//!
//! Two checks per case:
//! - the spike count is exactly the one the book prints for this example (the
//!   simulation is deterministic for a seed), so any change in results is seen; if a
//!   change is meant to alter them, rerun `examples/brunel/validate.sh` against NEST and
//!   update the book's table and these numbers together;
//! - the mean rate is within 5 % and the mean CV of the inter-spike intervals within
//!   0.05 of NEST's (the tolerance of `validate.sh`), so the pinned numbers themselves
//!   stay valid science.

use std::path::PathBuf;
use std::process::Command;

const BRUNEL: &str = env!("CARGO_BIN_EXE_brunel");

struct Case {
    label: &'static str,
    /// The network's flags ([`SMALL`] or [`FULL`]).
    network: &'static [&'static str],
    /// `--v-reset` (mV).
    v_reset: &'static str,
    /// This example's spike count, as printed in the book.
    spikes: u64,
    /// NEST 3.10's mean rate (Hz) and mean CV of ISIs for the same parameters.
    nest_rate_hz: f64,
    nest_cv: f64,
}

/// Order 250 with in-degrees CE 100 and CI 25.
const SMALL: &[&str] = &["--order", "250", "--ce", "100", "--ci", "25"];
/// Order 2500 with the default in-degrees.
const FULL: &[&str] = &["--order", "2500"];

const CASES: &[Case] = &[
    Case {
        label: "order 250, CE 100, CI 25, V_reset 0",
        network: SMALL,
        v_reset: "0",
        spikes: 71661,
        nest_rate_hz: 57.28,
        nest_cv: 0.084,
    },
    Case {
        label: "order 250, CE 100, CI 25, V_reset 10",
        network: SMALL,
        v_reset: "10",
        spikes: 106112,
        nest_rate_hz: 84.70,
        nest_cv: 0.130,
    },
    Case {
        label: "order 2500, V_reset 0 (nest)",
        network: FULL,
        v_reset: "0",
        spikes: 400253,
        nest_rate_hz: 32.10,
        nest_cv: 0.174,
    },
    Case {
        label: "order 2500, V_reset 10 (paper)",
        network: FULL,
        v_reset: "10",
        spikes: 465901,
        nest_rate_hz: 37.66,
        nest_cv: 0.417,
    },
];

fn run(case: &Case, idx: usize) -> serde_json::Value {
    let out: PathBuf =
        std::env::temp_dir().join(format!("brunel-science-{}-{idx}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let status = Command::new(BRUNEL)
        .args(case.network)
        .args(["--v-reset", case.v_reset])
        .args([
            "--t-sim",
            "1000",
            "--quiet",
            "--no-plot",
            "--no-spikes",
            "--out",
        ])
        .arg(&out)
        .status()
        .expect("starting brunel");
    assert!(
        status.success(),
        "{}: brunel failed with {status}",
        case.label
    );
    let text = std::fs::read_to_string(out.join("summary.json")).expect("summary.json");
    let _ = std::fs::remove_dir_all(&out);
    serde_json::from_str(&text).expect("summary.json is JSON")
}

#[test]
fn the_nest_validated_cases_give_the_published_spikes() {
    let mut wrong = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        let s = run(case, i);
        let stats = &s["stats"];
        let spikes = stats["spikes"].as_u64().expect("stats.spikes");
        let rate = stats["rate_hz"].as_f64().expect("stats.rate_hz");
        let cv = stats["cv_isi"].as_f64().expect("stats.cv_isi");
        if spikes != case.spikes {
            wrong.push(format!(
                "{}: {spikes} spikes, the book says {} (rate {rate:.2} Hz, CV {cv:.3})",
                case.label, case.spikes
            ));
        }
        let rel = (rate - case.nest_rate_hz).abs() / case.nest_rate_hz;
        if rel > 0.05 {
            wrong.push(format!(
                "{}: rate {rate:.2} Hz is {:.1} % from NEST's {:.2} Hz (tolerance 5 %)",
                case.label,
                rel * 100.0,
                case.nest_rate_hz
            ));
        }
        if (cv - case.nest_cv).abs() > 0.05 {
            wrong.push(format!(
                "{}: CV {cv:.3} is more than 0.05 from NEST's {:.3}",
                case.label, case.nest_cv
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "the published results changed:\n  {}\nif this is intended, rerun \
         examples/brunel/validate.sh and update book/src/brunel.md and this test",
        wrong.join("\n  ")
    );
}
