//! NEST's `iaf_psc_alpha` with exact integration: a leaky integrate-and-fire
//! neuron with alpha-shaped postsynaptic currents, stepped on a grid of
//! resolution `h`.
//!
//! # Equations
//!
//! With `V` relative to the resting potential `E_L`, and separate excitatory and
//! inhibitory currents of time constants `tau_syn_ex`, `tau_syn_in`:
//!
//! ```text
//! dV/dt  = -V / tau_m + (I_ex + I_in + I_e + I_0) / C_m
//! dI/dt  = dI - I / tau_syn          (for each of ex, in)
//! d dI/dt = -dI / tau_syn
//! ```
//!
//! A spike of weight `J` (pA) makes `dI += e / tau_syn * J`, so that the current
//! is `J e t/tau_syn exp(-t/tau_syn)`: it peaks at `J` after `tau_syn`. Within a
//! step the system is linear and is advanced exactly by its propagator matrix
//! (`P11 = P22 = exp(-h/tau_syn)`, `P21 = h P11`, `P30 = -tau_m/C_m
//! expm1(-h/tau_m)`, `P31`, `P32` from NEST's `IAFPropagatorAlpha`, with its
//! numerically stable forms near `tau_m = tau_syn`).
//!
//! # One step, in NEST's order (`iaf_psc_alpha::update`)
//!
//! 1. a neuron that is not refractory advances `V` by the propagator (with the
//!    currents at the start of the step and the constant current `I_0` given in
//!    the step before) and is bounded below by `V_min`; a refractory one counts
//!    down and keeps `V`;
//! 2. both currents advance, then the spikes arriving in this step add
//!    `e / tau_syn * J` to their `dI` (weights `> 0` excitatory, the others
//!    inhibitory): they act from the end of the step on;
//! 3. `V >= V_th`: the neuron spikes at the end of the step, `V <- V_reset`, and
//!    stays refractory for `t_ref` rounded to steps as NEST rounds it (to the tic
//!    of 1 µs, then up to a whole step);
//! 4. the constant current given with this step becomes `I_0` of the next.
//!
//! The crate's `validate/stdp_vs_nest.sh` runs NEST 3.10 beside the
//! `alpha_trace` example: over 12 neurons, 240,000 steps and 1,610 spikes, `V_m`
//! differs by at most 1.1e-13 mV and every spike falls in the same step. An input
//! of NEST's stamped `t` with delay `d` is the input of the step that ends at
//! `t + d`.
//!
//! Not matched: NEST's recording of state variables (multimeter), changing
//! parameters during a run, and the precise-spike-time variant
//! (`iaf_psc_alpha_ps`). The brunel and microcircuit examples keep their own
//! vectorised `iaf_psc_delta` / `iaf_psc_exp` updates inside their shard loops;
//! this is a per-neuron model piece for networks built on this crate.
//!
//! # Example
//!
//! ```
//! use hpc_spiking::neuron::{psc_per_psp, IafPscAlpha, IafPscAlphaParams};
//!
//! // hpc_benchmark's neuron: tau_syn chosen for a PSP rise time of 1.700759 ms.
//! let tau_syn = 0.32582722403722841;
//! let params = IafPscAlphaParams {
//!     e_l: 0.0, c_m: 250.0, tau_m: 10.0, t_ref: 0.5, v_th: 20.0, v_reset: 0.0,
//!     tau_syn_ex: tau_syn, tau_syn_in: tau_syn, ..Default::default()
//! };
//! let neuron = IafPscAlpha::new(params, 0.1)?;
//! // A 0.14 mV EPSP in pA.
//! let j = 0.14 * psc_per_psp(10.0, tau_syn, 250.0)?;
//! let mut s = neuron.rest();
//! let mut peak = f64::MIN;
//! for step in 0..100 {
//!     let input = if step == 0 { j } else { 0.0 };
//!     assert!(!neuron.step(&mut s, input, 0.0, 0.0));
//!     peak = peak.max(neuron.v_m(&s));
//! }
//! assert!((peak - 0.14).abs() < 1e-5, "{peak}");
//! # Ok::<(), hpc_spiking::model::ModelError>(())
//! ```

use crate::model::{finite, non_negative, positive, ModelError};

/// NEST's tics per millisecond (its default): times in ms are rounded to tics.
const TICS_PER_MS: f64 = 1000.0;

/// NEST's `IAFPropagator` criterion: the regular form of `P31` is used when
/// `h > 1e-7 tau_m^2 / |tau_m - tau_syn|`.
const NUMERICAL_STABILITY_FACTOR: f64 = 1e-7;

/// The parameters of `iaf_psc_alpha` (NEST's names; mV, ms, pF, pA).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IafPscAlphaParams {
    /// Membrane capacitance (pF), `> 0`.
    pub c_m: f64,
    /// Membrane time constant (ms), `> 0`.
    pub tau_m: f64,
    /// Refractory period (ms), `>= 0`.
    pub t_ref: f64,
    /// Resting potential (mV).
    pub e_l: f64,
    /// Reset potential (mV), `< v_th`.
    pub v_reset: f64,
    /// Threshold (mV).
    pub v_th: f64,
    /// Lower bound of the membrane potential (mV; `-inf`: none).
    pub v_min: f64,
    /// Constant input current (pA).
    pub i_e: f64,
    /// Rise time of the excitatory current (ms), `> 0`.
    pub tau_syn_ex: f64,
    /// Rise time of the inhibitory current (ms), `> 0`.
    pub tau_syn_in: f64,
}

impl Default for IafPscAlphaParams {
    /// NEST's defaults.
    fn default() -> Self {
        IafPscAlphaParams {
            c_m: 250.0,
            tau_m: 10.0,
            t_ref: 2.0,
            e_l: -70.0,
            v_reset: -70.0,
            v_th: -55.0,
            v_min: f64::NEG_INFINITY,
            i_e: 0.0,
            tau_syn_ex: 2.0,
            tau_syn_in: 2.0,
        }
    }
}

/// The state of one neuron.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AlphaState {
    /// Excitatory current (pA).
    pub i_ex: f64,
    /// Its derivative (pA/ms).
    pub di_ex: f64,
    /// Inhibitory current (pA).
    pub i_in: f64,
    /// Its derivative (pA/ms).
    pub di_in: f64,
    /// Membrane potential relative to `E_L` (mV).
    pub v: f64,
    /// Constant current of this step, given with the step before (pA).
    pub i_0: f64,
    /// Refractory steps left.
    pub refractory: u32,
}

/// One current's propagators.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Syn {
    p11: f64,
    p21: f64,
    p31: f64,
    p32: f64,
    /// `e / tau_syn`: a spike of weight `J` adds `J e / tau_syn` to `dI`.
    jump: f64,
}

impl Syn {
    fn new(tau_syn: f64, tau_m: f64, c_m: f64, h: f64) -> Syn {
        let p11 = (-h / tau_syn).exp();
        let (p31, p32) = alpha_propagator(tau_syn, tau_m, c_m, h);
        Syn {
            p11,
            p21: h * p11,
            p31,
            p32,
            jump: std::f64::consts::E / tau_syn,
        }
    }

    fn finite(&self) -> bool {
        [self.p11, self.p21, self.p31, self.p32, self.jump]
            .iter()
            .all(|x| x.is_finite())
    }
}

/// `(P31, P32)`: the response of `V` to `dI` and to `I` over `h`, NEST's
/// `IAFPropagatorAlpha::evaluate`, with its singular forms where the regular
/// ones lose precision (`tau_m` close to `tau_syn`).
fn alpha_propagator(tau_syn: f64, tau_m: f64, c_m: f64, h: f64) -> (f64, f64) {
    let h_min_regular = NUMERICAL_STABILITY_FACTOR * tau_m * tau_m / (tau_m - tau_syn).abs();
    // Infinite when tau_m == tau_syn; then the singular forms are used below.
    let beta = tau_syn * tau_m / (tau_m - tau_syn);
    let gamma = beta / c_m;
    let inv_beta = (tau_m - tau_syn) / (tau_syn * tau_m);
    let exp_h_tau_syn = (-h * (1.0 / tau_syn)).exp();
    let expm1_h_tau = (h * inv_beta).exp_m1();
    let exp_h_tau_m = || (-h * (1.0 / tau_m)).exp();
    let regular = gamma * exp_h_tau_syn * expm1_h_tau;
    let p32 = if regular.is_normal() && regular > 0.0 {
        regular
    } else {
        h * (1.0 / c_m) * exp_h_tau_m()
    };
    let p31 = if h > h_min_regular {
        gamma * exp_h_tau_syn * (beta * expm1_h_tau - h)
    } else {
        0.5 * h * h * (1.0 / c_m) * exp_h_tau_m()
    };
    (p31, p32)
}

/// The checked model on a grid of resolution `h`, with its propagators.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IafPscAlpha {
    params: IafPscAlphaParams,
    h: f64,
    ex: Syn,
    inh: Syn,
    p30: f64,
    expm1_tau_m: f64,
    theta: f64,
    v_reset: f64,
    v_min: f64,
    refractory_steps: u32,
}

impl IafPscAlpha {
    /// Checks the parameters (as NEST does, and also that every value is a
    /// number) and computes the propagators for resolution `h` (ms).
    pub fn new(params: IafPscAlphaParams, h: f64) -> Result<Self, ModelError> {
        let p = &params;
        positive("resolution", h)?;
        positive("C_m", p.c_m)?;
        positive("tau_m", p.tau_m)?;
        non_negative("t_ref", p.t_ref)?;
        finite("E_L", p.e_l)?;
        finite("V_reset", p.v_reset)?;
        finite("V_th", p.v_th)?;
        finite("I_e", p.i_e)?;
        positive("tau_syn_ex", p.tau_syn_ex)?;
        positive("tau_syn_in", p.tau_syn_in)?;
        if p.v_min.is_nan() || p.v_min == f64::INFINITY {
            return Err(ModelError::Param {
                name: "V_min",
                value: p.v_min,
                must: "a number below +inf",
            });
        }
        if p.v_reset >= p.v_th {
            return Err(ModelError::Param {
                name: "V_reset",
                value: p.v_reset,
                must: "below V_th",
            });
        }
        // NEST: Time(ms(t_ref)) rounds to the tic, get_steps() rounds up to a step.
        let tics_per_step = (TICS_PER_MS * h).round().max(1.0);
        let tics = (p.t_ref * TICS_PER_MS + 0.5).floor();
        let steps = (tics / tics_per_step).ceil();
        if steps > u32::MAX as f64 {
            return Err(ModelError::Param {
                name: "t_ref",
                value: p.t_ref,
                must: "at most 2^32 - 1 steps",
            });
        }
        // Potentials relative to E_L: V_th = 1e308 above E_L = -1e308 made
        // a threshold of inf, never reached.
        for (name, value) in [("V_th", p.v_th), ("V_reset", p.v_reset)] {
            if !(value - p.e_l).is_finite() {
                return Err(ModelError::Param {
                    name,
                    value,
                    must: "a finite number of mV away from E_L",
                });
            }
        }
        // Each parameter in its domain, and still propagators that are not
        // numbers (C_m 5e-324, tau_syn 1e308, h 1e308): V was NaN from the
        // first step, and the neuron silently never spiked.
        let propagators = |current, tau_syn| ModelError::Propagators {
            current,
            h,
            c_m: p.c_m,
            tau_m: p.tau_m,
            tau_syn,
        };
        let ex = Syn::new(p.tau_syn_ex, p.tau_m, p.c_m, h);
        if !ex.finite() {
            return Err(propagators("excitatory", p.tau_syn_ex));
        }
        let inh = Syn::new(p.tau_syn_in, p.tau_m, p.c_m, h);
        if !inh.finite() {
            return Err(propagators("inhibitory", p.tau_syn_in));
        }
        let p30 = -p.tau_m / p.c_m * (-h / p.tau_m).exp_m1();
        let expm1_tau_m = (-h / p.tau_m).exp_m1();
        if !(p30.is_finite() && expm1_tau_m.is_finite()) {
            return Err(propagators("membrane", p.tau_m));
        }
        Ok(IafPscAlpha {
            params,
            h,
            ex,
            inh,
            p30,
            expm1_tau_m,
            theta: p.v_th - p.e_l,
            v_reset: p.v_reset - p.e_l,
            v_min: p.v_min - p.e_l,
            refractory_steps: steps as u32,
        })
    }

    /// The parameters.
    pub fn params(&self) -> &IafPscAlphaParams {
        &self.params
    }

    /// The resolution (ms).
    pub fn resolution(&self) -> f64 {
        self.h
    }

    /// The refractory period in steps.
    pub fn refractory_steps(&self) -> u32 {
        self.refractory_steps
    }

    /// A neuron at rest (`V = E_L`, no current).
    pub fn rest(&self) -> AlphaState {
        AlphaState::default()
    }

    /// The membrane potential (mV, absolute).
    pub fn v_m(&self, s: &AlphaState) -> f64 {
        s.v + self.params.e_l
    }

    /// Sets the membrane potential (mV, absolute), as NEST's `V_m`.
    pub fn set_v_m(&self, s: &mut AlphaState, v_m: f64) {
        s.v = v_m - self.params.e_l;
    }

    /// Advances `s` by one step (see the [module](self) docs): `ex` is the sum
    /// of the weights `> 0` arriving in this step (pA), `inh` the sum of the
    /// others (`<= 0`), `current` the constant current for the next step (pA).
    /// Answers whether the neuron spiked (at the end of the step).
    #[inline]
    pub fn step(&self, s: &mut AlphaState, ex: f64, inh: f64, current: f64) -> bool {
        if s.refractory == 0 {
            let (e, i) = (&self.ex, &self.inh);
            let v = self.p30 * (s.i_0 + self.params.i_e)
                + e.p31 * s.di_ex
                + e.p32 * s.i_ex
                + i.p31 * s.di_in
                + i.p32 * s.i_in
                + self.expm1_tau_m * s.v
                + s.v;
            s.v = if v < self.v_min { self.v_min } else { v };
        } else {
            s.refractory -= 1;
        }
        s.i_ex = self.ex.p21 * s.di_ex + self.ex.p11 * s.i_ex;
        s.di_ex *= self.ex.p11;
        s.di_ex += self.ex.jump * ex;
        s.i_in = self.inh.p21 * s.di_in + self.inh.p11 * s.i_in;
        s.di_in *= self.inh.p11;
        s.di_in += self.inh.jump * inh;
        let spiked = s.v >= self.theta;
        if spiked {
            s.refractory = self.refractory_steps;
            s.v = self.v_reset;
        }
        s.i_0 = current;
        spiked
    }
}

/// `tau_m / tau_syn` above which the PSP and its peak take their closed forms
/// (Lambert's `W_{-1}`, NEST's `hpc_benchmark`); at or below it (a synaptic time
/// constant longer than the membrane's, or nearly as long) the closed form of the
/// peak does not hold (it names the other root, `t = 0`) or loses its digits:
/// the PSP is written without cancellation and its peak searched.
pub const CLOSED_FORM_RATIO: f64 = 1.0 + 1e-3;

/// The PSP (mV) at `t` ms after an alpha current of amplitude 1 pA starts, in
/// a neuron at rest (no threshold): `e/(tau_syn C_m b) ((exp(-t/tau_m) -
/// exp(-t/tau_syn))/b - t exp(-t/tau_syn))`, `b = 1/tau_syn - 1/tau_m`, and its
/// limit `e t^2 exp(-t/tau) / (2 tau C_m)` when `tau_m == tau_syn` (for
/// `tau_m / tau_syn` up to [`CLOSED_FORM_RATIO`], in the form `e/(tau_syn C_m)
/// t^2 exp(-t/tau_syn) (expm1(bt) - bt)/(bt)^2`, which has no cancellation).
pub fn alpha_psp(t: f64, tau_m: f64, tau_syn: f64, c_m: f64) -> f64 {
    let e = std::f64::consts::E;
    if tau_m == tau_syn {
        return e * t * t * (-t / tau_m).exp() / (2.0 * tau_m * c_m);
    }
    let b = 1.0 / tau_syn - 1.0 / tau_m;
    if tau_m / tau_syn > CLOSED_FORM_RATIO {
        return e / (tau_syn * c_m * b)
            * (((-t / tau_m).exp() - (-t / tau_syn).exp()) / b - t * (-t / tau_syn).exp());
    }
    let x = b * t;
    let g = if x.abs() < 1e-3 {
        0.5 + x * (1.0 / 6.0 + x * (1.0 / 24.0 + x / 120.0))
    } else {
        (x.exp_m1() - x) / (x * x)
    };
    e / (tau_syn * c_m) * t * t * (-t / tau_syn).exp() * g
}

/// The time (ms) at which [`alpha_psp`] peaks: `1/b (-W_{-1}(-exp(-1/a)/a) -
/// 1/a)`, `a = tau_m/tau_syn`, with `W_{-1}` the lower branch of Lambert's W
/// (`2 tau_m` when `tau_m == tau_syn`); for `a` up to [`CLOSED_FORM_RATIO`]
/// (`tau_syn` longer than `tau_m`, or within 0.1 % of it), the maximum found
/// by a golden-section search. An error where no finite peak comes out (time
/// constants 1e300 apart).
pub fn alpha_psp_peak_time(tau_m: f64, tau_syn: f64) -> Result<f64, ModelError> {
    positive("tau_m", tau_m)?;
    positive("tau_syn", tau_syn)?;
    peak_time(tau_m, tau_syn).ok_or_else(|| {
        // Each value checked alone, with a usual other: `tau_m` of 1e308 was
        // blamed on a `tau_syn` of 0.5.
        if peak_time(tau_m, USUAL_TAU_SYN).is_none() {
            ModelError::Param {
                name: "tau_m",
                value: tau_m,
                must: "a time constant whose PSP peak is a finite time",
            }
        } else {
            ModelError::Param {
                name: "tau_syn",
                value: tau_syn,
                must: "a time constant whose PSP peak, with tau_m's, is a finite time",
            }
        }
    })
}

/// The usual values the parameters of [`psc_per_psp`] and
/// [`alpha_psp_peak_time`] are checked with, one at a time, to name the one
/// whose PSP peak is not finite: `tau_m` (ms), `tau_syn` (ms), `C_m` (pF).
const USUAL_TAU_M: f64 = 10.0;
/// See [`USUAL_TAU_M`].
const USUAL_TAU_SYN: f64 = 0.5;
/// See [`USUAL_TAU_M`].
const USUAL_C_M: f64 = 250.0;

/// [`alpha_psp_peak_time`] of positive time constants, `None` where no finite
/// positive time comes out.
fn peak_time(tau_m: f64, tau_syn: f64) -> Option<f64> {
    if tau_m == tau_syn {
        return Some(2.0 * tau_m).filter(|t| t.is_finite());
    }
    let a = tau_m / tau_syn;
    let t = if a > CLOSED_FORM_RATIO {
        let b = 1.0 / tau_syn - 1.0 / tau_m;
        // In [-1/e, 0) for every finite a > 1; -0 when a is infinite.
        let x = -(-1.0 / a).exp() / a;
        if x >= 0.0 {
            return None;
        }
        1.0 / b * (-lambert_w_m1(x) - 1.0 / a)
    } else {
        // The PSP rises to its one peak and falls; the peak is before
        // 10 (tau_m + tau_syn).
        let f = |t: f64| alpha_psp(t, tau_m, tau_syn, 1.0);
        let r = (5f64.sqrt() - 1.0) / 2.0;
        let (mut lo, mut hi) = (0.0, 10.0 * (tau_m + tau_syn));
        for _ in 0..200 {
            let (x1, x2) = (hi - r * (hi - lo), lo + r * (hi - lo));
            if f(x1) < f(x2) {
                lo = x1;
            } else {
                hi = x2;
            }
        }
        (lo + hi) / 2.0
    };
    Some(t).filter(|t| t.is_finite() && *t > 0.0)
}

/// pA per mV: the amplitude of an alpha current whose PSP peaks at 1 mV in a
/// neuron at rest (`hpc_benchmark`'s `convert_synapse_weight`; its 0.14 mV EPSP
/// is `0.14 * psc_per_psp(10, 0.3258..., 250)` pA). An error where the PSP's
/// peak is not a finite positive number of mV (time constants 1e300 apart),
/// naming the parameter that makes it so: the one that does alone, with the
/// others at usual values (10 ms, 0.5 ms, 250 pF), else `tau_syn` with `tau_m`.
pub fn psc_per_psp(tau_m: f64, tau_syn: f64, c_m: f64) -> Result<f64, ModelError> {
    positive("C_m", c_m)?;
    let t = alpha_psp_peak_time(tau_m, tau_syn)?;
    let k = |tau_m: f64, tau_syn: f64, c_m: f64| {
        peak_time(tau_m, tau_syn)
            .map(|t| 1.0 / alpha_psp(t, tau_m, tau_syn, c_m))
            .filter(|k| k.is_finite() && *k > 0.0)
    };
    if let Some(k) =
        Some(1.0 / alpha_psp(t, tau_m, tau_syn, c_m)).filter(|k| k.is_finite() && *k > 0.0)
    {
        return Ok(k);
    }
    // Each value checked alone, the others usual ones: a capacitance of
    // 1e-310 pF or a `tau_m` of 1e-300 ms was blamed on `tau_syn`.
    Err(if k(tau_m, tau_syn, USUAL_C_M).is_some() {
        ModelError::Param {
            name: "C_m",
            value: c_m,
            must: "a capacitance whose PSP peak, with tau_m's and tau_syn's, is a finite positive number",
        }
    } else if k(tau_m, USUAL_TAU_SYN, USUAL_C_M).is_none() {
        ModelError::Param {
            name: "tau_m",
            value: tau_m,
            must: "a time constant whose PSP peak is a finite positive number",
        }
    } else if k(USUAL_TAU_M, tau_syn, USUAL_C_M).is_none() {
        ModelError::Param {
            name: "tau_syn",
            value: tau_syn,
            must: "a time constant whose PSP peak is a finite positive number",
        }
    } else {
        ModelError::Param {
            name: "tau_syn",
            value: tau_syn,
            must: "a time constant whose PSP peak, with tau_m's, is a finite positive number",
        }
    })
}

/// `W_{-1}(x)` for `x` in `[-1/e, 0)`: the solution `w <= -1` of `w e^w = x`
/// (Halley's iteration from the branch point's series or the asymptote).
fn lambert_w_m1(x: f64) -> f64 {
    let e = std::f64::consts::E;
    debug_assert!((-1.0 / e..0.0).contains(&x), "{x}");
    let mut w = if x < -0.25 {
        let p = -(2.0 * (e * x + 1.0)).max(0.0).sqrt();
        -1.0 + p - p * p / 3.0 + 11.0 / 72.0 * p * p * p
    } else {
        let l1 = (-x).ln();
        l1 - (-l1).ln()
    };
    for _ in 0..64 {
        let ew = w.exp();
        let f = w * ew - x;
        let wp1 = w + 1.0;
        if wp1 == 0.0 || f == 0.0 {
            break;
        }
        let step = f / (ew * wp1 - (w + 2.0) * f / (2.0 * wp1));
        w -= step;
        if step.abs() <= 1e-15 * w.abs() {
            break;
        }
    }
    w
}

#[cfg(test)]
mod tests;
