//! The membrane potential of `iaf_psc_alpha` neurons after every step, for given
//! input spikes: the Rust side of `validate/iaf_psc_alpha_vs_nest.py`, which
//! gives NEST 3.10 the same inputs.
//!
//! ```text
//! cargo run --release -p hpc-spiking --example alpha_trace -- cases.txt > v_m.json
//! ```
//!
//! `cases.txt`, two lines a case (one neuron), numbers as Rust parses them:
//!
//! ```text
//! case NAME h steps C_m tau_m t_ref E_L V_reset V_th I_e tau_syn_ex tau_syn_in V_m
//! input K1 W1 K2 W2 ...   (weight W arriving in step K, pA; > 0 excitatory)
//! ```
//!
//! Output, one JSON line: `{"cases": [{"name", "v_m": [mV...], "spikes":
//! [step...]}]}`, the membrane potential at the end of every step and the steps
//! that ended in a spike.

use anyhow::{bail, Context, Result};

#[path = "common/cases.rs"]
mod cases;
use hpc_spiking::neuron::{IafPscAlpha, IafPscAlphaParams};
use serde::Serialize;

#[derive(Serialize)]
struct Trace {
    name: String,
    v_m: Vec<f64>,
    spikes: Vec<u64>,
}

/// One case: its header line's words after `case` and its input line's numbers.
fn trace(name: &str, p: &[f64], input: &[f64]) -> Result<Trace> {
    let [h, steps, c_m, tau_m, t_ref, e_l, v_reset, v_th, i_e, tau_syn_ex, tau_syn_in, v_m] = p[..]
    else {
        bail!("case {name} needs 12 numbers, has {}", p.len());
    };
    if input.len() % 2 != 0 {
        bail!("case {name}: the input line needs step and weight pairs");
    }
    let params = IafPscAlphaParams {
        c_m,
        tau_m,
        t_ref,
        e_l,
        v_reset,
        v_th,
        i_e,
        tau_syn_ex,
        tau_syn_in,
        ..Default::default()
    };
    let neuron = IafPscAlpha::new(params, h)?;
    let steps = steps as u64;
    let (mut ex, mut inh) = (vec![0.0; steps as usize], vec![0.0; steps as usize]);
    for pair in input.chunks(2) {
        let (k, w) = (pair[0] as usize, pair[1]);
        let slot = if w > 0.0 { &mut ex } else { &mut inh };
        *slot
            .get_mut(k)
            .with_context(|| format!("case {name}: input step {k} beyond {steps} steps"))? += w;
    }
    let mut s = neuron.rest();
    neuron.set_v_m(&mut s, v_m);
    let mut trace = Trace {
        name: name.to_string(),
        v_m: Vec::with_capacity(steps as usize),
        spikes: Vec::new(),
    };
    for k in 0..steps {
        if neuron.step(&mut s, ex[k as usize], inh[k as usize], 0.0) {
            trace.spikes.push(k);
        }
        trace.v_m.push(neuron.v_m(&s));
    }
    Ok(trace)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path] = args.as_slice() else {
        bail!("usage: alpha_trace CASES.txt (see the source's docs for its format)");
    };
    let mut traces = Vec::new();
    for c in cases::read(path, 12, &["input"])? {
        traces.push(
            trace(&c.name, &c.params, &c.series[0]).with_context(|| format!("case {}", c.name))?,
        );
    }
    let out = serde_json::json!({ "cases": traces });
    hpc_io::write::stdout_line(format_args!("{out}"))?;
    hpc_io::write::flush_stdout()?;
    Ok(())
}
