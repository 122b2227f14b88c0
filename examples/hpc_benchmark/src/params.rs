//! The parameters of NEST's `hpc_benchmark.py` and what follows from them.
//!
//! From the script (NEST 3.10): `iaf_psc_alpha` neurons with `E_L` 0 mV, `C_m`
//! 250 pF, `tau_m` 10 ms, `t_ref` 0.5 ms, `V_th` 20 mV, `V_reset` 0 mV,
//! `tau_syn` 0.32582722403722841 ms (a PSP rise time of 1.700759 ms), `tau_minus`
//! 30 ms; initial `V_m` from N(5.7, 7.2) mV; `JE` = a 0.14 mV EPSP in pA, `g` = -5
//! (inhibitory weight `g * JE`), delay 1.5 ms, `dt` 0.1 ms; STDP (`alpha` 0.0513,
//! `lambda` 0.1, `mu` 0.4, `tau_plus` 15 ms) on E->E; the Poisson drive of rate
//! `eta * nu_th * CE * 1000` Hz with weight `JE` (`eta` 1.685,
//! `nu_th = V_th / (CE * tau_m / C_m * JE * e * tau_syn)`), 50 ms of warm-up
//! (`presimtime`) and 250 ms recorded (`simtime`), spikes of the first 1,000
//! excitatory neurons.

use anyhow::{bail, Context as _, Result};
use hpc_spiking::neuron::{psc_per_psp, IafPscAlpha, IafPscAlphaParams};
use hpc_spiking::plasticity::{PostArchive, StdpPlHom, StdpPlParams};
use serde::{Deserialize, Serialize};

/// `tau_syn` of the script (ms), for a PSP rise time of 1.700759 ms.
pub const TAU_SYN: f64 = 0.325_827_224_037_228_4;
/// Excitatory neurons per unit of scale, and the excitatory in-degree.
pub const NE_PER_SCALE: f64 = 9000.0;
/// Inhibitory neurons per unit of scale, and the inhibitory in-degree.
pub const NI_PER_SCALE: f64 = 2250.0;
/// Excitatory inputs of every neuron.
pub const CE: u32 = 9000;
/// Inhibitory inputs of every neuron.
pub const CI: u32 = 2250;
/// Neurons whose spikes are recorded (the first excitatory ones).
pub const N_REC: u32 = 1000;
/// The largest network: neuron ids and a step within an exchange interval
/// share the 32 bits of an exchanged spike.
pub const MAX_NEURONS: u64 = 1 << 27;

/// The parameters a run can change (the rest are the script's constants).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// Network size: `scale` x 11,250 neurons.
    pub scale: f64,
    /// Warm-up (ms), simulated before the recorded time.
    pub t_presim: f64,
    /// Recorded time (ms) after the warm-up.
    pub t_sim: f64,
    /// Time step (ms).
    pub dt: f64,
    /// Seed of every random stream.
    pub seed: u64,
    /// External drive relative to threshold.
    pub eta: f64,
    /// Relative inhibitory weight (negative).
    pub g: f64,
    /// Peak of the EPSP (mV) that gives `JE`.
    pub je_mv: f64,
    /// Delay of every synapse (ms).
    pub delay: f64,
    /// The STDP rule of the E->E synapses.
    pub stdp: StdpPlParams,
    /// The neurons' STDP depression time constant (ms).
    pub tau_minus: f64,
    /// Mean of the initial membrane potentials (mV).
    pub v_mean: f64,
    /// Standard deviation of the initial membrane potentials (mV).
    pub v_sd: f64,
}

impl Default for Params {
    /// The script's values at scale 1.
    fn default() -> Self {
        Params {
            scale: 1.0,
            t_presim: 50.0,
            t_sim: 250.0,
            dt: 0.1,
            seed: 1,
            eta: 1.685,
            g: -5.0,
            je_mv: 0.14,
            delay: 1.5,
            stdp: StdpPlParams {
                tau_plus: 15.0,
                lambda: 0.1,
                alpha: 0.0513,
                mu: 0.4,
            },
            tau_minus: 30.0,
            v_mean: 5.7,
            v_sd: 7.2,
        }
    }
}

/// The neuron parameters of the script.
pub fn neuron_params() -> IafPscAlphaParams {
    IafPscAlphaParams {
        e_l: 0.0,
        c_m: 250.0,
        tau_m: 10.0,
        t_ref: 0.5,
        v_th: 20.0,
        v_reset: 0.0,
        tau_syn_ex: TAU_SYN,
        tau_syn_in: TAU_SYN,
        ..Default::default()
    }
}

/// Checked parameters with what follows from them.
#[derive(Clone, Debug)]
pub struct Model {
    /// The parameters.
    pub params: Params,
    /// Excitatory neurons (ids `0..ne`).
    pub ne: u32,
    /// Inhibitory neurons (ids `ne..n`).
    pub ni: u32,
    /// All neurons.
    pub n: u32,
    /// Recorded neurons (ids `0..n_rec`).
    pub n_rec: u32,
    /// `JE` (pA).
    pub je: f64,
    /// Poisson rate of the drive of each neuron (Hz).
    pub p_rate: f64,
    /// Mean Poisson count per neuron per step.
    pub lambda_ext: f64,
    /// Delay in steps.
    pub delay_steps: u32,
    /// Warm-up steps.
    pub presim_steps: u64,
    /// Steps of the whole run (warm-up included).
    pub steps: u64,
    /// Bits of a neuron id in an exchanged spike.
    pub gid_bits: u32,
    /// The neuron model.
    pub neuron: IafPscAlpha,
    /// The STDP rule.
    pub rule: StdpPlHom,
}

fn flag_check(ok: bool, flag: &str, value: f64, must: &str) -> Result<()> {
    if !ok {
        bail!(
            "{flag} {} is invalid: it must be {must}",
            hpc_spiking::run::num(value)
        );
    }
    Ok(())
}

impl Model {
    /// Checks `params` (an error names the flag) and derives the model.
    pub fn new(params: Params) -> Result<Model> {
        let p = &params;
        flag_check(
            p.scale.is_finite() && p.scale > 0.0,
            "--scale",
            p.scale,
            "a number above 0",
        )?;
        let ne_f = (NE_PER_SCALE * p.scale).floor();
        let ni_f = (NI_PER_SCALE * p.scale).floor();
        if ne_f + ni_f > MAX_NEURONS as f64 {
            bail!(
                "--scale {} gives {} neurons: at most {MAX_NEURONS} (scale {:.0}) fit the spike exchange's ids",
                hpc_spiking::run::num(p.scale),
                hpc_spiking::run::num(ne_f + ni_f),
                MAX_NEURONS as f64 / 11_250.0
            );
        }
        let (ne, ni) = (ne_f as u32, ni_f as u32);
        if ne < 2 || ni < 2 {
            bail!(
                "--scale {} gives {ne} excitatory and {ni} inhibitory neurons: at least 2 of each \
                 are needed (no autapses), so scale >= {}",
                hpc_spiking::run::num(p.scale),
                2.0 / NI_PER_SCALE
            );
        }
        flag_check(
            p.dt.is_finite() && p.dt > 0.0 && p.dt <= 1.0,
            "--dt",
            p.dt,
            "in (0, 1] ms",
        )?;
        flag_check(
            p.t_presim.is_finite() && p.t_presim >= 0.0,
            "--t-presim",
            p.t_presim,
            "a number of ms >= 0",
        )?;
        flag_check(
            p.t_sim.is_finite() && p.t_sim > 0.0,
            "--t-sim",
            p.t_sim,
            "a number of ms above 0",
        )?;
        flag_check(
            p.eta.is_finite() && p.eta >= 0.0,
            "--eta",
            p.eta,
            "a number >= 0",
        )?;
        flag_check(
            p.g.is_finite() && p.g <= 0.0,
            "--g",
            p.g,
            "a number <= 0 (inhibition)",
        )?;
        flag_check(
            p.je_mv.is_finite() && p.je_mv > 0.0,
            "--je",
            p.je_mv,
            "a number of mV above 0",
        )?;
        flag_check(p.v_mean.is_finite(), "--v-mean", p.v_mean, "a number")?;
        flag_check(
            p.v_sd.is_finite() && p.v_sd >= 0.0,
            "--v-sd",
            p.v_sd,
            "a number >= 0",
        )?;
        let delay_steps = hpc_spiking::run::whole_steps(p.delay, p.dt, "--delay")?;
        if !(2..=1000).contains(&delay_steps) {
            bail!(
                "--delay {} ms is {delay_steps} steps: 2 to 1000 are supported",
                p.delay
            );
        }
        let presim_steps = if p.t_presim == 0.0 {
            0
        } else {
            hpc_spiking::run::whole_steps(p.t_presim, p.dt, "--t-presim")?
        };
        let sim_steps = hpc_spiking::run::whole_steps(p.t_sim, p.dt, "--t-sim")?;
        let steps = presim_steps + sim_steps;
        // The spike file keeps a spike's step as a u32.
        if steps >= u32::MAX as u64 {
            bail!(
                "--t-presim + --t-sim = {} ms is {steps} steps of {} ms: the spike file holds at most {} steps",
                p.t_presim + p.t_sim,
                p.dt,
                u32::MAX - 1
            );
        }
        let neuron = IafPscAlpha::new(neuron_params(), p.dt).context("the neuron model")?;
        let rule = StdpPlHom::new(p.stdp).map_err(|e| anyhow::anyhow!("STDP: {e}"))?;
        PostArchive::new(p.tau_minus, p.delay).map_err(|e| anyhow::anyhow!("STDP: {e}"))?;
        let np = neuron_params();
        let je = p.je_mv * psc_per_psp(np.tau_m, TAU_SYN, np.c_m)?;
        let nu_th = np.v_th / (CE as f64 * np.tau_m / np.c_m * je * std::f64::consts::E * TAU_SYN);
        let p_rate = p.eta * nu_th * CE as f64 * 1000.0;
        let lambda_ext = p_rate * p.dt / 1000.0;
        if lambda_ext > 500.0 {
            bail!(
                "--eta {}: a Poisson mean of {lambda_ext:.0} per step is above 500",
                p.eta
            );
        }
        let n = ne + ni;
        let gid_bits = 32 - (n - 1).leading_zeros();
        let offset_bits = 32 - (delay_steps as u32 - 1).leading_zeros();
        if gid_bits + offset_bits > 32 {
            bail!("--scale {} with a delay of {delay_steps} steps: too many neurons for 32-bit spikes", p.scale);
        }
        Ok(Model {
            ne,
            ni,
            n,
            n_rec: ne.min(N_REC),
            je,
            p_rate,
            lambda_ext,
            delay_steps: delay_steps as u32,
            presim_steps,
            steps,
            gid_bits,
            neuron,
            rule,
            params,
        })
    }

    /// The parameters that differ from `old`'s (a checkpoint's), but `t_sim`,
    /// which a restart may extend.
    pub fn differences(&self, old: &Params) -> Vec<String> {
        hpc_spiking::run::params_diff(old, &self.params, &["t_sim"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_s_numbers() {
        let m = Model::new(Params::default()).unwrap();
        assert_eq!((m.ne, m.ni, m.n_rec, m.delay_steps), (9000, 2250, 1000, 15));
        assert!((m.je - 45.6096).abs() < 1e-4, "{}", m.je);
        // eta * nu_th * CE * 1000 with JE = 45.6096 pA, computed by hand: 20,856.04 Hz.
        assert!((m.p_rate - 20_856.04).abs() < 0.01, "{}", m.p_rate);
        assert_eq!(m.steps, 3000);
        let small = Model::new(Params {
            scale: 0.02,
            ..Params::default()
        })
        .unwrap();
        assert_eq!((small.ne, small.ni, small.n_rec), (180, 45, 180));
    }

    #[test]
    fn bad_values_name_their_flag() {
        let bad = |p: Params| Model::new(p).unwrap_err().to_string();
        let d = Params::default;
        assert!(bad(Params {
            scale: f64::NAN,
            ..d()
        })
        .contains("--scale"));
        assert!(bad(Params { scale: 1e9, ..d() }).contains("--scale"));
        // The neuron count of a huge scale was written out whole (305 digits
        // for 1e300): the message is a line.
        let huge = bad(Params {
            scale: 1e300,
            ..d()
        });
        assert!(
            huge.contains("--scale 1e300 gives") && huge.len() < 200,
            "{huge}"
        );
        assert!(bad(Params { t_sim: -1.0, ..d() }).contains("--t-sim"));
        assert!(bad(Params { t_sim: 1e12, ..d() }).contains("--t-sim"));
        assert!(bad(Params {
            t_presim: 0.05,
            ..d()
        })
        .contains("--t-presim"));
        let stdp = |f: fn(&mut StdpPlParams)| {
            let mut p = d();
            f(&mut p.stdp);
            bad(p)
        };
        assert!(stdp(|s| s.tau_plus = -15.0).contains("tau_plus"));
        assert!(stdp(|s| s.lambda = f64::NAN).contains("lambda"));
        assert!(stdp(|s| s.alpha = f64::INFINITY).contains("alpha"));
        assert!(stdp(|s| s.mu = -0.4).contains("mu"));
        assert!(bad(Params {
            tau_minus: -30.0,
            ..d()
        })
        .contains("tau_minus"));
    }
}
