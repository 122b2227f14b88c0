//! Parameters of the microcircuit (the TOML file format), their checks, and the
//! quantities derived from them exactly as NEST's `Potjans_2014` example derives
//! them ([`Model`]).
//!
//! Everything is checked in [`Model::new`], before any part of the network is
//! allocated: unknown keys and populations, probabilities outside `[0, 1]`,
//! scalings outside `(0, 1]`, a delay below the time step, non-finite numbers.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use hpc_io::message::cut;
use hpc_spiking::run::{num, short_numbers};
use serde::{Deserialize, Serialize};

mod check;

use check::{check_together, whole_numbers};

/// The eight populations, in the order of NEST's example (ids are assigned in
/// this order).
pub const POPULATIONS: [&str; 8] = ["L23E", "L23I", "L4E", "L4I", "L5E", "L5I", "L6E", "L6I"];
/// Number of populations.
pub const NPOP: usize = 8;

/// Neuron parameters of `iaf_psc_exp` (NEST's names; mV, ms, pF).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Neuron {
    /// Membrane capacitance (pF).
    pub c_m: f64,
    /// Membrane time constant (ms).
    pub tau_m: f64,
    /// Time constant of the excitatory and inhibitory synaptic currents (ms).
    pub tau_syn: f64,
    /// Resting potential (mV).
    pub e_l: f64,
    /// Threshold (mV).
    pub v_th: f64,
    /// Reset potential (mV).
    pub v_reset: f64,
    /// Absolute refractory period (ms).
    pub t_ref: f64,
}

impl Default for Neuron {
    fn default() -> Self {
        Neuron {
            c_m: 250.0,
            tau_m: 10.0,
            tau_syn: 0.5,
            e_l: -65.0,
            v_th: -50.0,
            v_reset: -65.0,
            t_ref: 2.0,
        }
    }
}

/// Per-population parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Population {
    /// Neurons at full scale.
    pub n_full: u32,
    /// External (cortico-cortical) in-degree at full scale.
    pub k_ext: f64,
    /// Mean rate of the full-scale network (Hz), used by the downscaling
    /// compensation.
    pub full_mean_rate: f64,
    /// Mean initial membrane potential (mV), `v0_type = "optimized"`.
    pub v0_mean: f64,
    /// Standard deviation of the initial membrane potential (mV), `"optimized"`.
    pub v0_std: f64,
}

/// The optional thalamic input: `n` parrot neurons firing Poisson spikes at
/// `rate` from `start` for `duration` ms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Thalamus {
    /// Whether the thalamic population exists.
    pub enabled: bool,
    /// Thalamic neurons (not scaled).
    pub n: u32,
    /// Their rate while active (Hz).
    pub rate: f64,
    /// Start of the activity (ms).
    pub start: f64,
    /// Duration of the activity (ms).
    pub duration: f64,
    /// Mean PSP of a thalamic synapse (mV).
    pub psp: f64,
    /// Mean delay (ms).
    pub delay_mean: f64,
    /// Relative standard deviation of the delay.
    pub delay_rel_std: f64,
    /// Connection probability to each population.
    pub conn_probs: BTreeMap<String, f64>,
}

impl Default for Thalamus {
    fn default() -> Self {
        let p = [0.0, 0.0, 0.0983, 0.0619, 0.0, 0.0, 0.0512, 0.0196];
        Thalamus {
            enabled: false,
            n: 902,
            rate: 120.0,
            start: 700.0,
            duration: 10.0,
            psp: 0.15,
            delay_mean: 1.5,
            delay_rel_std: 0.5,
            conn_probs: POPULATIONS
                .iter()
                .zip(p)
                .map(|(n, x)| (n.to_string(), x))
                .collect(),
        }
    }
}

/// Background input: Poisson spike trains, or the DC current that replaces them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Input {
    /// A Poisson train of `bg_rate * K_ext` per neuron (NEST's `poisson_input = True`).
    Poisson,
    /// The DC current of the same mean (`poisson_input = False`).
    Dc,
}

/// Initial membrane potentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum V0Type {
    /// Normal with population-specific mean and deviation (NEST's default).
    Optimized,
    /// Normal, mean -58 mV and deviation 10 mV for every neuron.
    Original,
}

/// Every parameter of the model and the run. Units: ms, mV, pA, pF, Hz.
/// Defaults are NEST 3.10's `Potjans_2014` example (`network_params.py`,
/// `sim_params.py`, `stimulus_params.py`) at `N_scaling = K_scaling = 0.1`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Scaling of the number of neurons, in (0, 1].
    pub n_scaling: f64,
    /// Scaling of the in-degrees, in (0, 1].
    pub k_scaling: f64,
    /// Time step (ms).
    pub dt: f64,
    /// Warm-up before the recorded time (ms); spikes are written, statistics skip it.
    pub t_presim: f64,
    /// Simulated time after the warm-up (ms).
    pub t_sim: f64,
    /// Seed of every random stream.
    pub seed: u64,
    /// Background input.
    pub input: Input,
    /// Rate of each background Poisson input (Hz).
    pub bg_rate: f64,
    /// Mean excitatory PSP (mV).
    pub psp_exc_mean: f64,
    /// Relative inhibitory strength (negative).
    pub g: f64,
    /// Relative standard deviation of the weights.
    pub weight_rel_std: f64,
    /// Mean delay of excitatory synapses (ms).
    pub delay_exc_mean: f64,
    /// Mean delay of inhibitory synapses (ms).
    pub delay_inh_mean: f64,
    /// Relative standard deviation of the delays.
    pub delay_rel_std: f64,
    /// Initial membrane potentials.
    pub v0_type: V0Type,
    /// The neuron model's parameters.
    pub neuron: Neuron,
    /// Per-population parameters, keyed by name (all eight).
    pub populations: BTreeMap<String, Population>,
    /// Connection probabilities: `conn_probs[target][k]` from source population `k`
    /// (in the order of [`POPULATIONS`]).
    pub conn_probs: BTreeMap<String, Vec<f64>>,
    /// The optional thalamic input.
    pub thalamus: Thalamus,
}

const CONN_PROBS: [[f64; 8]; 8] = [
    [0.1009, 0.1689, 0.0437, 0.0818, 0.0323, 0.0, 0.0076, 0.0],
    [0.1346, 0.1371, 0.0316, 0.0515, 0.0755, 0.0, 0.0042, 0.0],
    [0.0077, 0.0059, 0.0497, 0.135, 0.0067, 0.0003, 0.0453, 0.0],
    [0.0691, 0.0029, 0.0794, 0.1597, 0.0033, 0.0, 0.1057, 0.0],
    [0.1004, 0.0622, 0.0505, 0.0057, 0.0831, 0.3726, 0.0204, 0.0],
    [0.0548, 0.0269, 0.0257, 0.0022, 0.06, 0.3158, 0.0086, 0.0],
    [
        0.0156, 0.0066, 0.0211, 0.0166, 0.0572, 0.0197, 0.0396, 0.2252,
    ],
    [0.0364, 0.001, 0.0034, 0.0005, 0.0277, 0.008, 0.0658, 0.1443],
];

impl Default for Params {
    fn default() -> Self {
        let n_full = [20683, 5834, 21915, 5479, 4850, 1065, 14395, 2948];
        let k_ext = [
            1600.0, 1500.0, 2100.0, 1900.0, 2000.0, 1900.0, 2900.0, 2100.0,
        ];
        let rates = [0.903, 2.965, 4.414, 5.876, 7.569, 8.633, 1.105, 7.829];
        let v0m = [
            -68.28, -63.16, -63.33, -63.45, -63.11, -61.66, -66.72, -61.43,
        ];
        let v0s = [5.36, 4.57, 4.74, 4.94, 4.94, 4.55, 5.46, 4.48];
        Params {
            n_scaling: 0.1,
            k_scaling: 0.1,
            dt: 0.1,
            t_presim: 500.0,
            t_sim: 1000.0,
            seed: 55,
            input: Input::Poisson,
            bg_rate: 8.0,
            psp_exc_mean: 0.15,
            g: -4.0,
            weight_rel_std: 0.1,
            delay_exc_mean: 1.5,
            delay_inh_mean: 0.75,
            delay_rel_std: 0.5,
            v0_type: V0Type::Optimized,
            neuron: Neuron::default(),
            populations: (0..NPOP)
                .map(|i| {
                    (
                        POPULATIONS[i].to_string(),
                        Population {
                            n_full: n_full[i],
                            k_ext: k_ext[i],
                            full_mean_rate: rates[i],
                            v0_mean: v0m[i],
                            v0_std: v0s[i],
                        },
                    )
                })
                .collect(),
            conn_probs: (0..NPOP)
                .map(|i| (POPULATIONS[i].to_string(), CONN_PROBS[i].to_vec()))
                .collect(),
            thalamus: Thalamus::default(),
        }
    }
}

impl Params {
    /// Parses a TOML file's text; missing keys keep their default, and a
    /// `[populations.X]` or `[conn_probs]` entry replaces that population's default.
    pub fn from_toml_str(text: &str) -> Result<Params> {
        // Unknown population names are refused here, before serde fills defaults.
        // The parser's message quotes the line it refused: cut (a line of 100,000
        // characters was echoed whole).
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| anyhow::anyhow!("{}", cut(&e.to_string())))
            .context("not valid TOML")?;
        for section in ["populations", "conn_probs"] {
            if let Some(t) = table.get(section) {
                let t = t
                    .as_table()
                    .with_context(|| format!("`{section}` must be a table keyed by population"))?;
                for k in t.keys() {
                    if !POPULATIONS.contains(&k.as_str()) {
                        bail!(
                            "unknown population `{}` in [{section}]; the populations are {}",
                            cut(k),
                            POPULATIONS.join(", ")
                        );
                    }
                }
            }
        }
        if let Some(t) = table
            .get("thalamus")
            .and_then(|t| t.get("conn_probs"))
            .and_then(|t| t.as_table())
        {
            for k in t.keys() {
                if !POPULATIONS.contains(&k.as_str()) {
                    bail!(
                        "unknown population `{}` in [thalamus.conn_probs]; the populations are {}",
                        cut(k),
                        POPULATIONS.join(", ")
                    );
                }
            }
        }
        // A number with a fraction or exponent for a whole-number key is named
        // here: serde's own message wrote `seed = 1e300` out in 301 digits.
        whole_numbers(&table, "")?;
        // Serde writes any float out in full (`L23E = 1e300` where a table
        // is expected): its message is shortened.
        let mut p: Params = toml::from_str(text)
            .map_err(|e| anyhow::anyhow!("{}", cut(&short_numbers(&e.to_string()))))
            .context("in the parameters")?;
        // Partial tables merge with the defaults.
        let d = Params::default();
        for (k, v) in d.populations {
            p.populations.entry(k).or_insert(v);
        }
        for (k, v) in d.conn_probs {
            p.conn_probs.entry(k).or_insert(v);
        }
        for (k, v) in d.thalamus.conn_probs {
            p.thalamus.conn_probs.entry(k).or_insert(v);
        }
        Ok(p)
    }

    /// Reads a TOML parameter file.
    pub fn from_file(path: &Path) -> Result<Params> {
        // Bounded and never blocking: a FIFO or /dev/zero is refused at once.
        let text = hpc_io::read::read_regular_to_string(path, hpc_io::read::MAX_CONFIG_BYTES)?;
        Params::from_toml_str(&text).with_context(|| format!("in {}", hpc_io::message::path(path)))
    }

    /// The parameters as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    /// Whether `other` describes the same network and dynamics (a checkpoint of
    /// one can continue as the other): everything but `t_sim`.
    pub fn same_model(&self, other: &Params) -> bool {
        let mut a = self.clone();
        a.t_sim = other.t_sim;
        a == *other
    }
}

/// Synapses of one projection (source population onto target population).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Projection {
    /// Target population.
    pub target: usize,
    /// Source population (`NPOP` for the thalamus).
    pub source: usize,
    /// Total number of synapses (fixed total number).
    pub synapses: u64,
    /// Mean weight (pA; negative for inhibitory sources).
    pub w_mean: f64,
    /// Standard deviation of the weight (pA).
    pub w_std: f64,
    /// Mean delay (ms).
    pub d_mean: f64,
    /// Standard deviation of the delay (ms).
    pub d_std: f64,
}

/// The parameters with everything the simulation derives from them.
#[derive(Clone, Debug)]
pub struct Model {
    /// The parameters.
    pub params: Params,
    /// Neurons per population (scaled).
    pub sizes: [u32; NPOP],
    /// First global id of each population (contiguous, in [`POPULATIONS`] order).
    pub first: [u32; NPOP + 1],
    /// All neurons.
    pub n: u32,
    /// Thalamic neurons (0 when disabled); their ids follow the cortical ones.
    pub n_th: u32,
    /// Projections with at least one synapse.
    pub projections: Vec<Projection>,
    /// External in-degree per population (scaled).
    pub k_ext: [u32; NPOP],
    /// Mean of the background Poisson count per step per neuron of each population.
    pub lambda_ext: [f64; NPOP],
    /// Weight of a background spike (pA).
    pub w_ext: f64,
    /// DC current per population (pA): the compensation of downscaled in-degrees,
    /// and the background itself with `input = "dc"`.
    pub dc: [f64; NPOP],
    /// Weight quantum (pA): weight magnitudes are stored as 16-bit multiples of
    /// it (the largest mean weight plus 8 standard deviations is 65535 quanta),
    /// and synaptic input is summed in integer quanta.
    pub q_syn: f64,
    /// Longest delay (steps): delays are drawn from the clipped normal and cut
    /// at 8 standard deviations above the mean.
    pub max_delay: u32,
    /// Shortest possible delay (steps), the exchange interval.
    pub min_delay: u32,
    /// Warm-up steps.
    pub presim_steps: u64,
    /// All steps (warm-up and recorded time).
    pub steps: u64,
    /// Refractory steps.
    pub ref_steps: u32,
    /// Bits of a spike code that hold the neuron id.
    pub gid_bits: u32,
    /// Thalamic activity: steps `th_on..th_off` (none when disabled).
    pub th_steps: (u64, u64),
    /// Probability that a thalamic neuron spikes in one step.
    pub th_p: f64,
}

/// `PSC / PSP`: the current amplitude of `iaf_psc_exp` whose PSP peaks at 1 mV
/// (NEST's `helpers.postsynaptic_potential_to_current`).
pub fn psc_over_psp(c_m: f64, tau_m: f64, tau_syn: f64) -> f64 {
    let sub = 1.0 / (tau_syn - tau_m);
    let pre = tau_m * tau_syn / c_m * sub;
    let frac = (tau_m / tau_syn).powf(sub);
    1.0 / (pre * (frac.powf(tau_m) - frac.powf(tau_syn)))
}

/// The expected number of synapses that realises connection probability `p`
/// between populations of `n1` and `n2` neurons with multapses (NEST's
/// `helpers.num_synapses_from_conn_probs`).
pub fn synapses_from_prob(p: f64, n1: f64, n2: f64) -> f64 {
    let prod = n1 * n2;
    (1.0 - p).ln() / ((prod - 1.0) / prod).ln()
}

/// The exact propagators of `iaf_psc_exp` over a step of `h` ms (NEST's): the
/// potential's decay `p22`, the current's into the potential `p21`, a constant
/// current's `p20`, and the current's decay `p11`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Propagators {
    /// Decay of the potential over one step, `exp(-h/tau_m)`.
    pub p22: f64,
    /// What the synaptic current adds to the potential over one step.
    pub p21: f64,
    /// What a constant current (DC) adds to the potential over one step.
    pub p20: f64,
    /// Decay of the synaptic current over one step, `exp(-h/tau_syn)`.
    pub p11: f64,
}

impl Propagators {
    /// The propagators of neuron `nu` over a step of `h` ms.
    pub fn new(nu: &Neuron, h: f64) -> Propagators {
        Propagators {
            p22: (-h / nu.tau_m).exp(),
            p21: -nu.tau_m / (nu.c_m * (1.0 - nu.tau_m / nu.tau_syn))
                * (-h / nu.tau_syn).exp()
                * (h * (1.0 / nu.tau_syn - 1.0 / nu.tau_m)).exp_m1(),
            p20: -nu.tau_m / nu.c_m * (-h / nu.tau_m).exp_m1(),
            p11: (-h / nu.tau_syn).exp(),
        }
    }
}

/// [`synapses_from_prob`], refused when it is not a finite number of synapses (the
/// populations' product is so large that `(n1*n2 - 1) / (n1*n2)` rounds to 1 and
/// the projection would silently vanish); `what` names the probability.
fn finite_synapses(p: f64, n1: f64, n2: f64, what: impl Fn() -> String) -> Result<f64> {
    let syn = synapses_from_prob(p, n1, n2);
    if !syn.is_finite() {
        bail!(
            "{} = {p} between populations of {n1} and {n2} neurons gives {} synapses: the populations are too large",
            what(),
            num(syn)
        );
    }
    Ok(syn)
}

/// NumPy's `round` (half to even), as NEST's example rounds.
fn round_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 {
        2.0 * (x / 2.0).round()
    } else {
        r
    }
}

/// The sizes of the populations at `n_scaling`, and the first neuron of each
/// (the last entry: the number of neurons).
fn population_sizes(p: &Params, n_full: &[f64]) -> Result<([u32; NPOP], [u32; NPOP + 1])> {
    let mut sizes = [0u32; NPOP];
    let mut first = [0u32; NPOP + 1];
    for i in 0..NPOP {
        let s = round_even(n_full[i] * p.n_scaling);
        if s < 1.0 {
            bail!(
                "n_scaling {} leaves population {} without neurons",
                num(p.n_scaling),
                POPULATIONS[i]
            );
        }
        if s > 65536.0 {
            bail!(
                "population {} has {s} neurons; at most 65536 per population are supported (targets are stored in 16 bits)",
                POPULATIONS[i]
            );
        }
        sizes[i] = s as u32;
        first[i + 1] = first[i] + sizes[i];
    }
    Ok((sizes, first))
}

/// Adds the thalamus's projections to `projections` and returns its first and
/// end steps and its probability to spike in a step.
fn thalamic_projections(
    p: &Params,
    ratio: f64,
    n_full: &[f64],
    projections: &mut Vec<Projection>,
) -> Result<((u64, u64), f64)> {
    let th = &p.thalamus;
    let ks = p.k_scaling;
    let mut w_th = th.psp * ratio;
    if ks != 1.0 {
        w_th /= ks.sqrt();
    }
    for i in 0..NPOP {
        let prob = th.conn_probs.get(POPULATIONS[i]).copied().unwrap_or(0.0);
        if prob <= 0.0 {
            continue;
        }
        let syn = round_even(
            finite_synapses(prob, th.n as f64, n_full[i], || {
                format!("thalamus.conn_probs.{}", POPULATIONS[i])
            })? * ks,
        );
        if syn >= 1.0 {
            projections.push(Projection {
                target: i,
                source: NPOP,
                synapses: syn as u64,
                w_mean: w_th,
                w_std: w_th * p.weight_rel_std,
                d_mean: th.delay_mean,
                d_std: th.delay_mean * th.delay_rel_std,
            });
        }
    }
    let th_steps = (
        (th.start / p.dt).round() as u64,
        ((th.start + th.duration) / p.dt).round() as u64,
    );
    let th_p = th.rate * p.dt / 1000.0;
    if th_p > 1.0 {
        bail!(
            "thalamus.rate {} Hz exceeds one spike per step",
            num(th.rate)
        );
    }
    Ok((th_steps, th_p))
}

/// The shortest and longest delays of `projections`, in steps.
fn delay_steps(p: &Params, projections: &[Projection]) -> Result<(u32, u32)> {
    let steps_of = |ms: f64| (ms / p.dt + 0.5).floor() as u32;
    // The longest in f64 and the parameters that make it named: `as u32`
    // saturated, and "delays reach 4294967295 steps" said neither the true
    // count nor which mean (delay_exc_mean = 1e300).
    let longest = |q: &Projection| (q.d_mean + 8.0 * q.d_std) / p.dt;
    if let Some(q) = projections
        .iter()
        .find(|q| !(longest(q) + 0.5).floor().le(&255.0))
    {
        let which = if q.source == NPOP {
            "thalamus.delay_mean and thalamus.delay_rel_std"
        } else if q.source % 2 == 0 {
            "delay_exc_mean and delay_rel_std"
        } else {
            "delay_inh_mean and delay_rel_std"
        };
        bail!(
            "delays reach {} steps of dt = {} ms (mean + 8 standard deviations, by {which}); \
             at most 255 are supported: use a larger dt or shorter delays",
            num((longest(q) + 0.5).floor()),
            num(p.dt)
        );
    }
    let max_delay = projections
        .iter()
        .map(|q| steps_of(q.d_mean + 8.0 * q.d_std).max(1))
        .max()
        .unwrap_or(1);
    // Delays are redrawn below dt/2 and rounded to steps: the shortest is one
    // step unless the deviation is zero.
    let min_delay = projections
        .iter()
        .map(|q| {
            if q.d_std == 0.0 {
                steps_of(q.d_mean).max(1)
            } else {
                1
            }
        })
        .min()
        .unwrap_or(1);
    Ok((min_delay, max_delay))
}

impl Model {
    /// Checks `params` and derives the model (no network is allocated).
    pub fn new(params: Params) -> Result<Model> {
        params.check()?;
        let p = &params;
        let nu = &p.neuron;
        let pops: Vec<&Population> = POPULATIONS.iter().map(|n| &p.populations[*n]).collect();
        let probs: Vec<&Vec<f64>> = POPULATIONS.iter().map(|n| &p.conn_probs[*n]).collect();
        let n_full: Vec<f64> = pops.iter().map(|q| q.n_full as f64).collect();
        let (sizes, first) = population_sizes(p, &n_full)?;
        let n = first[NPOP];
        let ratio = psc_over_psp(nu.c_m, nu.tau_m, nu.tau_syn);
        // Mean PSCs (pA): excitatory sources PSP_e, inhibitory g * PSP_e, L4E -> L2/3E doubled.
        let mut w = [[0.0f64; NPOP]; NPOP];
        let mut full_syn = [[0.0f64; NPOP]; NPOP];
        for i in 0..NPOP {
            for j in 0..NPOP {
                let psp = if j % 2 == 0 {
                    p.psp_exc_mean
                } else {
                    p.psp_exc_mean * p.g
                };
                w[i][j] = psp * ratio;
                full_syn[i][j] = if probs[i][j] > 0.0 {
                    finite_synapses(probs[i][j], n_full[i], n_full[j], || {
                        format!("conn_probs.{} from {}", POPULATIONS[i], POPULATIONS[j])
                    })?
                } else {
                    0.0
                };
            }
        }
        w[0][2] *= 2.0;
        let mut w_ext = p.psp_exc_mean * ratio;
        let mut dc = [0.0f64; NPOP];
        if p.input == Input::Dc {
            for i in 0..NPOP {
                dc[i] = p.bg_rate * pops[i].k_ext * w_ext * nu.tau_syn * 0.001;
            }
        }
        let ks = p.k_scaling;
        if ks != 1.0 {
            let sq = ks.sqrt();
            for i in 0..NPOP {
                let mut input_rec = 0.0;
                for j in 0..NPOP {
                    input_rec += w[i][j] * (full_syn[i][j] / n_full[i]) * pops[j].full_mean_rate;
                }
                dc[i] += 0.001 * nu.tau_syn * (1.0 - sq) * input_rec;
                if p.input == Input::Poisson {
                    dc[i] += 0.001 * nu.tau_syn * (1.0 - sq) * (w_ext * pops[i].k_ext * p.bg_rate);
                }
            }
            for row in w.iter_mut() {
                for x in row.iter_mut() {
                    *x /= sq;
                }
            }
            w_ext /= sq;
        }
        let mut projections = Vec::new();
        for i in 0..NPOP {
            for j in 0..NPOP {
                let syn = round_even(full_syn[i][j] * p.n_scaling * ks);
                if syn >= 1.0 {
                    let d_mean = if j % 2 == 0 {
                        p.delay_exc_mean
                    } else {
                        p.delay_inh_mean
                    };
                    projections.push(Projection {
                        target: i,
                        source: j,
                        synapses: syn as u64,
                        w_mean: w[i][j],
                        w_std: (w[i][j] * p.weight_rel_std).abs(),
                        d_mean,
                        d_std: d_mean * p.delay_rel_std,
                    });
                }
            }
        }
        let th = &p.thalamus;
        let n_th = if th.enabled { th.n } else { 0 };
        let (th_steps, th_p) = if th.enabled {
            thalamic_projections(p, ratio, &n_full, &mut projections)?
        } else {
            ((0, 0), 0.0)
        };
        let mut k_ext = [0u32; NPOP];
        let mut lambda_ext = [0.0f64; NPOP];
        for i in 0..NPOP {
            // The count as drawn, before the cast to 32 bits (which saturates):
            // the message quotes the background the configuration asked for.
            let k = round_even(pops[i].k_ext * ks);
            if !(0.0..=f64::from(u32::MAX)).contains(&k) {
                bail!(
                    "the external in-degree of {} is {} (k_ext x k_scaling); at most {}",
                    POPULATIONS[i],
                    num(k),
                    u32::MAX
                );
            }
            k_ext[i] = k as u32;
            if p.input == Input::Poisson {
                lambda_ext[i] = p.bg_rate * k * p.dt / 1000.0;
                if lambda_ext[i] > 50.0 {
                    bail!(
                        "the background of {} is {} spikes per step (bg_rate x k_ext x dt); at most 50 are supported",
                        POPULATIONS[i],
                        num(lambda_ext[i].round())
                    );
                }
            }
        }
        check_together(p, ratio, &projections, &sizes, &k_ext, w_ext, &dc)?;
        // The weight quantum: the largest mean plus 8 deviations in 16 bits.
        let span = projections
            .iter()
            .map(|q| q.w_mean.abs() + 8.0 * q.w_std)
            .fold(0.0f64, f64::max);
        let q_syn = (span / 65535.0).max(f64::MIN_POSITIVE);
        let (min_delay, max_delay) = delay_steps(p, &projections)?;
        let presim_steps = (p.t_presim / p.dt).round() as u64;
        let steps = presim_steps + (p.t_sim / p.dt).round().max(1.0) as u64;
        let total = n as u64 + n_th as u64;
        let gid_bits = 64 - total.saturating_sub(1).max(1).leading_zeros();
        if gid_bits + 8 > 32 {
            bail!(
                "{total} neurons ({n} in the populations, thalamus.n = {n_th} in the thalamus) \
                 do not fit a spike code: at most {} in all",
                1u64 << 24
            );
        }
        Ok(Model {
            sizes,
            first,
            n,
            n_th,
            projections,
            k_ext,
            lambda_ext,
            w_ext,
            dc,
            q_syn,
            max_delay,
            min_delay,
            presim_steps,
            steps,
            ref_steps: (nu.t_ref / p.dt).round() as u32,
            gid_bits,
            th_steps,
            th_p,
            params: params.clone(),
        })
    }

    /// Total synapses of the network.
    pub fn synapses(&self) -> u64 {
        self.projections
            .iter()
            .fold(0u64, |all, q| all.saturating_add(q.synapses))
    }

    /// The population of neuron `gid` (`NPOP` for a thalamic neuron).
    pub fn pop_of(&self, gid: u32) -> usize {
        self.first[1..].partition_point(|&f| f <= gid).min(NPOP)
    }

    /// Whether neurons of population `pop` are excitatory (the thalamus is).
    pub fn excitatory(pop: usize) -> bool {
        pop % 2 == 0
    }

    /// The least memory `ranks_here` ranks of a `size`-rank run hold on one node:
    /// 4 bytes per synapse of their share (a synapse is one `u32`) and 64 bytes per
    /// neuron of state. A lower bound, so a refusal is certain to be right.
    pub fn min_node_bytes(&self, size: usize, ranks_here: usize) -> u64 {
        let size = size.max(1) as u64;
        let per_rank = self
            .synapses()
            .div_ceil(size)
            .saturating_mul(4)
            .saturating_add(
                (self.n as u64 + self.n_th as u64)
                    .div_ceil(size)
                    .saturating_mul(64),
            );
        per_rank.saturating_mul(ranks_here.max(1) as u64)
    }

    /// Refuses a network that cannot fit this node's available memory (`available`:
    /// bytes and where the figure came from; `None`: unknown, not checked), before
    /// anything of it is allocated, with the bytes needed and available.
    pub fn check_memory(
        &self,
        size: usize,
        ranks_here: usize,
        available: Option<(u64, String)>,
    ) -> Result<()> {
        let Some((avail, source)) = available else {
            return Ok(());
        };
        let need = self.min_node_bytes(size, ranks_here);
        if need > avail {
            bail!(
                "the network needs at least {need} bytes on this node ({} neurons, {} \
                 synapses at 4 bytes, {ranks_here} of {size} rank(s) here) but {avail} bytes \
                 are available ({source}): use a smaller n_scaling or k_scaling, or spread \
                 the ranks over more nodes",
                self.n,
                self.synapses()
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A delay or potential of 1e300: the count saturated at `u32::MAX` and
    /// named no parameter; the potentials written out in 301 digits (pass 16).
    #[test]
    fn huge_delays_and_potentials_are_named_in_a_short_message() {
        for (text, want) in [
            (
                "delay_exc_mean = 1e300",
                "delays reach 5e301 steps of dt = 0.1 ms",
            ),
            ("delay_exc_mean = 1e300", "delay_exc_mean and delay_rel_std"),
            ("delay_inh_mean = 30.0", "delay_inh_mean and delay_rel_std"),
            (
                "[neuron]\nv_reset = 1e300",
                "neuron.v_reset (1e300) must be below",
            ),
            // Pass 16: thalamus.psp was not among the parameters named.
            (
                "[thalamus]\nenabled = true\npsp = 1e300",
                "k_scaling, thalamus.psp, thalamus.conn_probs and the neuron's constants",
            ),
            // Pass 20: a probability, a delay below the step and a refractory
            // period written out in up to 310 digits.
            (
                "[conn_probs]\nL23E = [1e308, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]",
                "conn_probs.L23E from L23E is 1e308: a connection probability",
            ),
            (
                "[thalamus.conn_probs]\nL4E = 1e300",
                "thalamus.conn_probs.L4E is 1e300: a connection probability",
            ),
            (
                "delay_inh_mean = 1e-300",
                "delay_inh_mean is 1e-300 ms, below the time step dt = 0.1 ms",
            ),
            (
                "[neuron]\nt_ref = 1e-300",
                "neuron.t_ref is 1e-300 ms, below",
            ),
        ] {
            let p = Params::from_toml_str(text).unwrap();
            let e = format!("{:#}", Model::new(p).unwrap_err());
            assert!(e.contains(want) && e.len() < 300, "{text}: {e}");
        }
    }

    /// A line, a string or a key of 100,000 characters: the parser's excerpt
    /// and serde's quote were echoed whole (pass 16).
    #[test]
    fn a_long_line_string_or_key_is_cut_in_the_message() {
        let long = "y".repeat(100_000);
        for text in [
            format!("g = 5 {long}"),
            format!("input = \"{long}\""),
            format!("[populations.{long}]\nn_full = 5"),
            format!("[{long}]\nseed = 2.5"),
            format!("a = {}{}", "[".repeat(100_000), "]".repeat(100_000)),
        ] {
            let e = format!("{:#}", Params::from_toml_str(&text).unwrap_err());
            assert!(e.len() < 2000, "{}", &e[..300]);
        }
    }

    #[test]
    fn a_float_for_a_whole_number_is_named_in_a_short_message() {
        for (text, name) in [
            ("seed = 1e300", "seed"),
            (
                "[populations.L23E]\nn_full = 2.5e300",
                "populations.L23E.n_full",
            ),
            ("[thalamus]\nn = 1e300", "thalamus.n"),
        ] {
            let e = format!("{:#}", Params::from_toml_str(text).unwrap_err());
            assert!(
                e.contains(&format!("`{name}` must be a whole number")),
                "{e}"
            );
            assert!(e.len() < 160, "{} bytes: {e}", e.len());
        }
    }

    #[test]
    fn floats_where_tables_are_read_and_huge_rates_are_named_in_a_short_message() {
        // Pass 9: serde's message wrote 1e300 out in 301 digits, and the
        // background's rate was printed with {:.0}.
        let e = format!(
            "{:#}",
            Params::from_toml_str("[populations]\nL23E = 1e300").unwrap_err()
        );
        assert!(e.contains("floating point `1e300`"), "{e}");
        assert!(e.len() < 300, "{} bytes: {e}", e.len());
        let p = Params {
            bg_rate: 1e300,
            ..Params::default()
        };
        let e = Model::new(p).map(|_| ()).unwrap_err().to_string();
        assert!(
            e.contains("the background of L23E is 1.6e298 spikes"),
            "{e}"
        );
        assert!(e.len() < 200, "{e}");
    }

    #[test]
    fn huge_values_of_a_population_and_the_thalamus_are_named_in_a_short_message() {
        // Pass 15: `v0_std = -1e300` and `thalamus.rate = 1e300` were written out
        // in 301 digits, a NaN of a population's value did not say whose, and a
        // thalamus too large for a spike code did not name `thalamus.n`.
        let mut p = Params::default();
        if let Some(l) = p.populations.get_mut("L4I") {
            l.v0_std = -1e300;
        }
        let e = format!("{:#}", p.check().unwrap_err());
        assert!(
            e.contains("populations.L4I.v0_std must be >= 0, got -1e300"),
            "{e}"
        );
        let mut p = Params::default();
        if let Some(l) = p.populations.get_mut("L5E") {
            l.k_ext = f64::NAN;
        }
        let e = format!("{:#}", p.check().unwrap_err());
        assert!(
            e.contains("populations.L5E.k_ext must be a finite number"),
            "{e}"
        );
        let mut p = Params::default();
        p.thalamus.enabled = true;
        p.thalamus.rate = 1e300;
        let e = Model::new(p).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains("thalamus.rate 1e300 Hz"), "{e}");
        assert!(e.len() < 200, "{e}");
        let mut p = Params::default();
        p.thalamus.enabled = true;
        p.thalamus.n = u32::MAX;
        let e = Model::new(p).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains("thalamus.n = 4294967295"), "{e}");
    }

    #[test]
    fn a_network_larger_than_memory_is_refused_with_the_bytes() {
        let m = Model::new(Params::default()).unwrap();
        let need = m.min_node_bytes(1, 1);
        // 3 million synapses at 4 bytes, and the neurons.
        assert!((12_000_000..13_000_000).contains(&need), "{need}");
        assert_eq!(m.min_node_bytes(4, 4), 4 * m.min_node_bytes(4, 1));
        assert!(m.check_memory(1, 1, Some((need, "test".into()))).is_ok());
        assert!(m.check_memory(1, 1, None).is_ok());
        let e = m
            .check_memory(1, 1, Some((need - 1, "MemAvailable".into())))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("needs at least {need} bytes"))
                && e.contains(&format!(
                    "but {} bytes are available (MemAvailable)",
                    need - 1
                )),
            "{e}"
        );
    }

    /// A parameter file that is a FIFO or `/dev/zero` is refused at once, naming it.
    #[test]
    fn a_parameter_file_that_is_not_a_regular_file_is_refused_at_once() {
        let t = std::time::Instant::now();
        let e = format!(
            "{:#}",
            Params::from_file(Path::new("/dev/zero")).unwrap_err()
        );
        assert!(e.contains("/dev/zero is a character device"), "{e}");
        let dir = std::env::temp_dir().join(format!("microcircuit-params-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("params.toml");
        hpc_test_support::mkfifo(&fifo);
        let e = format!("{:#}", Params::from_file(&fifo).unwrap_err());
        assert!(
            e.contains("params.toml is a FIFO, not a regular file"),
            "{e}"
        );
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn defaults_match_nest() {
        let m = Model::new(Params::default()).unwrap();
        assert_eq!(m.n, 7717);
        assert_eq!(m.sizes, [2068, 583, 2192, 548, 485, 106, 1440, 295]);
        // 0.1 x 0.1 scale: about 3.0 million synapses.
        let s = m.synapses();
        assert!((2_900_000..3_100_000).contains(&s), "{s}");
        // 87.8 pA for a 0.15 mV PSP, times sqrt(10) at K_scaling 0.1.
        let ratio = psc_over_psp(250.0, 10.0, 0.5);
        assert!((ratio * 0.15 - 87.81).abs() < 0.01, "{}", ratio * 0.15);
        assert!((m.w_ext - ratio * 0.15 / 0.1f64.sqrt()).abs() < 1e-9);
        let l23e_from_l4e = m
            .projections
            .iter()
            .find(|q| q.target == 0 && q.source == 2)
            .unwrap();
        assert!((l23e_from_l4e.w_mean - 2.0 * m.w_ext).abs() < 1e-9);
        assert!(m.dc.iter().all(|&x| x > 0.0));
        assert_eq!(m.min_delay, 1);
        let full = Model::new(Params {
            n_scaling: 1.0,
            k_scaling: 1.0,
            ..Params::default()
        })
        .unwrap();
        assert_eq!(full.n, 77169);
        assert!(full.dc.iter().all(|&x| x == 0.0));
        let s = full.synapses();
        assert!((295_000_000..305_000_000).contains(&s), "{s}");
    }

    #[test]
    fn bad_input_is_refused_with_its_name() {
        let e = |text: &str| {
            format!(
                "{:#}",
                Params::from_toml_str(text)
                    .and_then(|p| Model::new(p).map(|_| ()))
                    .err()
                    .unwrap_or_else(|| panic!("accepted: {text}"))
            )
        };
        assert!(e("[populations.L7E]\nn_full = 3\nk_ext = 1\nfull_mean_rate = 1\nv0_mean = 0\nv0_std = 1\n").contains("unknown population `L7E`"));
        assert!(e("[conn_probs]\nL9I = [0,0,0,0,0,0,0,0]\n").contains("unknown population `L9I`"));
        assert!(e("[conn_probs]\nL23E = [-0.1,0,0,0,0,0,0,0]\n")
            .contains("conn_probs.L23E from L23E is -0.1"));
        assert!(e("[conn_probs]\nL23E = [0.1,0]\n").contains("has 2 entries"));
        assert!(e("n_scaling = 0.0\n").contains("n_scaling must be in (0, 1]"));
        assert!(e("k_scaling = 1.5\n").contains("k_scaling must be in (0, 1]"));
        assert!(e("n_scaling = -1\n").contains("n_scaling"));
        assert!(e("delay_inh_mean = 0.05\n").contains("below the time step"));
        assert!(e("bogus = 1\n").contains("bogus"));
        assert!(e("[thalamus.conn_probs]\nLX = 0.1\n").contains("unknown population `LX`"));
        // Finite one by one, not together (brunel's check, shared in hpc-spiking).
        let m = e("psp_exc_mean = 1e300\n");
        assert!(
            m.contains("too large together") && m.contains("is inf"),
            "{m}"
        );
        assert!(e("g = -1e306\n").contains("too large together"));
        assert!(e("weight_rel_std = 1e308\n").contains("a weight's mean plus 8 deviations is inf"));
        let m = e("input = \"dc\"\nbg_rate = 1e305\n");
        assert!(
            m.contains("DC input is inf") || m.contains("potential of a population is inf"),
            "{m}"
        );
        // A projection between populations too large for the formula is refused,
        // not dropped.
        let mut big = String::from("n_scaling = 0.000015\n");
        for name in POPULATIONS {
            big += &format!(
                "[populations.{name}]\nn_full = 4290000000\nk_ext = 1\nfull_mean_rate = 1\nv0_mean = 0\nv0_std = 1\n"
            );
        }
        let m = e(&big);
        assert!(
            m.contains("conn_probs.L23E from L23E") && m.contains("too large"),
            "{m}"
        );
    }

    #[test]
    fn partial_tables_merge_with_defaults() {
        let p =
            Params::from_toml_str("n_scaling = 0.05\n[conn_probs]\nL23E = [0.2,0,0,0,0,0,0,0]\n")
                .unwrap();
        assert_eq!(p.conn_probs["L23E"][0], 0.2);
        assert_eq!(p.conn_probs["L4E"], Params::default().conn_probs["L4E"]);
        assert_eq!(p.populations.len(), 8);
        // The shipped file is the defaults.
        let file =
            Params::from_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("microcircuit.toml"))
                .unwrap();
        assert_eq!(file, Params::default());
    }
}
