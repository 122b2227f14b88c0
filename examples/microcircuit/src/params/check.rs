//! The checks of the parameters: each value on its own ([`Params::check`]), the
//! TOML file's whole numbers, and the values a network derives together.

use anyhow::{bail, Context as _, Result};
use hpc_spiking::run::{finite_together, num};

use super::{Params, Projection, Propagators, NPOP, POPULATIONS};

/// Refuses a value that is not a finite number, naming the parameter.
fn finite(name: &str, x: f64) -> Result<()> {
    if !x.is_finite() {
        bail!("{name} must be a finite number, got {}", num(x));
    }
    Ok(())
}

impl Params {
    /// Checks every value; the error names the parameter.
    pub fn check(&self) -> Result<()> {
        let positive = |name: &str, x: f64| -> Result<()> {
            finite(name, x)?;
            if x <= 0.0 {
                bail!("{name} must be > 0, got {}", num(x));
            }
            Ok(())
        };
        for (name, x) in [("n_scaling", self.n_scaling), ("k_scaling", self.k_scaling)] {
            finite(name, x)?;
            if !(x > 0.0 && x <= 1.0) {
                bail!(
                    "{name} must be in (0, 1] (a fraction of the full-scale model), got {}",
                    num(x)
                );
            }
        }
        positive("dt", self.dt)?;
        finite("t_presim", self.t_presim)?;
        if self.t_presim < 0.0 {
            bail!("t_presim must be >= 0 ms, got {}", num(self.t_presim));
        }
        positive("t_sim", self.t_sim)?;
        let steps = (self.t_presim + self.t_sim) / self.dt;
        if steps > u32::MAX as f64 / 2.0 {
            bail!(
                "t_presim + t_sim is {} steps of dt; at most 2^31 are supported",
                num(steps.round())
            );
        }
        finite("bg_rate", self.bg_rate)?;
        if self.bg_rate < 0.0 {
            bail!("bg_rate must be >= 0 Hz, got {}", num(self.bg_rate));
        }
        positive("psp_exc_mean", self.psp_exc_mean)?;
        finite("g", self.g)?;
        if self.g >= 0.0 {
            bail!(
                "g must be negative (inhibitory PSPs are g * psp_exc_mean), got {}",
                self.g
            );
        }
        finite("weight_rel_std", self.weight_rel_std)?;
        finite("delay_rel_std", self.delay_rel_std)?;
        if self.weight_rel_std < 0.0 || self.delay_rel_std < 0.0 {
            bail!("weight_rel_std and delay_rel_std must be >= 0");
        }
        for (name, d) in [
            ("delay_exc_mean", self.delay_exc_mean),
            ("delay_inh_mean", self.delay_inh_mean),
            ("thalamus.delay_mean", self.thalamus.delay_mean),
        ] {
            finite(name, d)?;
            if d < self.dt {
                bail!(
                    "{name} is {} ms, below the time step dt = {} ms: no delay can be shorter than one step",
                    num(d),
                    num(self.dt)
                );
            }
        }
        let n = &self.neuron;
        positive("neuron.c_m", n.c_m)?;
        positive("neuron.tau_m", n.tau_m)?;
        positive("neuron.tau_syn", n.tau_syn)?;
        if (n.tau_m - n.tau_syn).abs() < 1e-9 {
            bail!(
                "neuron.tau_syn must differ from neuron.tau_m (the exact propagator is singular)"
            );
        }
        finite("neuron.e_l", n.e_l)?;
        finite("neuron.v_th", n.v_th)?;
        finite("neuron.v_reset", n.v_reset)?;
        if n.v_reset >= n.v_th {
            bail!(
                "neuron.v_reset ({}) must be below neuron.v_th ({})",
                num(n.v_reset),
                num(n.v_th)
            );
        }
        finite("neuron.t_ref", n.t_ref)?;
        if n.t_ref < self.dt {
            bail!(
                "neuron.t_ref is {} ms, below the time step dt = {} ms: the refractory period must last at least one step",
                num(n.t_ref),
                num(self.dt)
            );
        }
        for name in POPULATIONS {
            self.check_population(name)?;
        }
        let th = &self.thalamus;
        finite("thalamus.rate", th.rate)?;
        finite("thalamus.start", th.start)?;
        finite("thalamus.duration", th.duration)?;
        finite("thalamus.psp", th.psp)?;
        finite("thalamus.delay_rel_std", th.delay_rel_std)?;
        if th.rate < 0.0 || th.duration < 0.0 || th.psp < 0.0 || th.delay_rel_std < 0.0 {
            bail!("thalamus.rate, duration, psp and delay_rel_std must be >= 0");
        }
        if th.enabled && th.n == 0 {
            bail!("thalamus.n must be > 0 when the thalamus is enabled");
        }
        Ok(())
    }

    /// Checks population `name`'s parameters and its rows of connection
    /// probabilities (from the other populations and the thalamus).
    pub(super) fn check_population(&self, name: &str) -> Result<()> {
        let p = self
            .populations
            .get(name)
            .with_context(|| format!("population {name} has no parameters"))?;
        if p.n_full == 0 {
            bail!("populations.{name}.n_full must be > 0");
        }
        for (k, x) in [
            ("k_ext", p.k_ext),
            ("full_mean_rate", p.full_mean_rate),
            ("v0_std", p.v0_std),
        ] {
            finite(&format!("populations.{name}.{k}"), x)?;
            if x < 0.0 {
                bail!("populations.{name}.{k} must be >= 0, got {}", num(x));
            }
        }
        finite(&format!("populations.{name}.v0_mean"), p.v0_mean)?;
        let row = self
            .conn_probs
            .get(name)
            .with_context(|| format!("conn_probs has no row for target {name}"))?;
        if row.len() != NPOP {
            bail!(
                "conn_probs.{name} has {} entries; it needs one per source population ({})",
                row.len(),
                POPULATIONS.join(", ")
            );
        }
        for (k, &x) in row.iter().enumerate() {
            if !(0.0..1.0).contains(&x) {
                bail!(
                    "conn_probs.{name} from {} is {}: a connection probability must be in [0, 1)",
                    POPULATIONS[k],
                    num(x)
                );
            }
        }
        let t = self.thalamus.conn_probs.get(name).copied().unwrap_or(0.0);
        if !(0.0..1.0).contains(&t) {
            bail!(
                "thalamus.conn_probs.{name} is {}: a connection probability must be in [0, 1)",
                num(t)
            );
        }
        Ok(())
    }
}

/// Each parameter is finite, but together they may not be (brunel's check): every
/// weight, the DC and the largest input one step can bring a neuron must be
/// numbers, or the potentials become infinite or NaN and a silent or saturated
/// network would pass for a result.
pub(super) fn check_together(
    p: &Params,
    ratio: f64,
    projections: &[Projection],
    sizes: &[u32],
    k_ext: &[u32; NPOP],
    w_ext: f64,
    dc: &[f64; NPOP],
) -> Result<()> {
    let nu = &p.neuron;
    let mut together = vec![("the PSC/PSP ratio of neuron.c_m, tau_m, tau_syn", ratio)];
    let mut step_input = [0.0f64; NPOP];
    for q in projections {
        together.push((
            "a weight's mean plus 8 deviations",
            q.w_mean.abs() + 8.0 * q.w_std,
        ));
        step_input[q.target] +=
            (q.w_mean.abs() + 8.0 * q.w_std) * q.synapses as f64 / sizes[q.target] as f64;
    }
    // The current and the potential at most accumulate the largest input over
    // their decays: bounds that must be numbers too.
    let prop = Propagators::new(nu, p.dt);
    let (keep_i, keep_v) = (-(-p.dt / nu.tau_syn).exp_m1(), -(-p.dt / nu.tau_m).exp_m1());
    let mut bounds = [(0.0f64, 0.0f64); NPOP];
    for i in 0..NPOP {
        step_input[i] += w_ext.abs() * k_ext[i] as f64 + dc[i].abs();
        let current = step_input[i] / keep_i;
        bounds[i] = (
            current,
            (current * prop.p21.abs() + dc[i].abs() * prop.p20) / keep_v
                + nu.e_l.abs()
                + nu.v_th.abs()
                + nu.v_reset.abs(),
        );
    }
    for i in 0..NPOP {
        together.push(("a population's DC input", dc[i]));
        together.push((
            "the largest input of one step onto a population",
            step_input[i],
        ));
        together.push(("the largest synaptic current of a population", bounds[i].0));
        together.push((
            "the largest membrane potential of a population",
            bounds[i].1,
        ));
    }
    // With the thalamus, its PSP makes weights too (thalamus.psp = 1e300 was
    // not among the parameters named).
    let thalamus = if p.thalamus.enabled {
        ", thalamus.psp, thalamus.conn_probs"
    } else {
        ""
    };
    finite_together(
        &together,
        &format!(
            "psp_exc_mean, g, weight_rel_std, bg_rate, k_ext, k_scaling{thalamus} and the \
             neuron's constants are too large together"
        ),
    )
}

/// Refuses a float where a whole number is read (a population's `n_full`,
/// the thalamus's `n`, `seed`), naming the key; `at` is the table's path.
pub(super) fn whole_numbers(t: &toml::Table, at: &str) -> Result<()> {
    for (k, v) in t {
        match v {
            toml::Value::Float(f) if ["n_full", "n", "seed"].contains(&k.as_str()) => {
                bail!(
                    "`{}` must be a whole number, not {f:e}",
                    hpc_io::message::cut(&format!("{at}{k}"))
                )
            }
            toml::Value::Table(inner) => whole_numbers(inner, &format!("{at}{k}."))?,
            _ => {}
        }
    }
    Ok(())
}
