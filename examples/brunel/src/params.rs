//! Model parameters: the TOML file format, the `paper` and `nest` presets, and the
//! derived quantities the simulation uses ([`Model`]).

use std::path::Path;

use anyhow::{bail, Context as _, Result};
use hpc_io::message::cut;
use hpc_spiking::run::{finite_together, num};
use serde::{Deserialize, Serialize};

/// A named set of defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// Brunel (2000), model A: `V_reset` = 10 mV.
    Paper,
    /// NEST's `brunel_delta_nest.py` exactly: `V_reset` = 0 mV.
    Nest,
}

/// Every parameter of the model and the run. Units: ms, mV, Hz.
///
/// In a TOML file every key is optional; missing keys take the preset's value:
///
/// ```text
/// preset = "nest"   # optional, the base values (default "paper")
/// order = 2500      # NE = 4*order, NI = order
/// ce = 1000         # optional: excitatory in-degree (default epsilon*NE)
/// t_sim = 1000.0
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Network size: NE = 4*order excitatory, NI = order inhibitory neurons.
    pub order: u32,
    /// Connection probability used for the default in-degrees.
    pub epsilon: f64,
    /// Excitatory in-degree (default `epsilon * NE`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ce: Option<u32>,
    /// Inhibitory in-degree (default `epsilon * NI`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci: Option<u32>,
    /// Excitatory weight J (mV): the jump of V per excitatory spike.
    pub j: f64,
    /// Relative inhibition: inhibitory weight is `-g * J`.
    pub g: f64,
    /// External rate relative to threshold rate: `nu_ext = eta * V_th / (J CE tau_m)`.
    pub eta: f64,
    /// Synaptic delay (ms), the same for every synapse and for the external drive.
    pub delay: f64,
    /// Membrane time constant (ms).
    pub tau_m: f64,
    /// Threshold (mV, relative to rest).
    pub v_th: f64,
    /// Reset potential (mV).
    pub v_reset: f64,
    /// Initial membrane potential of every neuron (mV).
    pub v_init: f64,
    /// Absolute refractory period (ms).
    pub t_ref: f64,
    /// Time step (ms).
    pub dt: f64,
    /// Simulated time (ms).
    pub t_sim: f64,
    /// Seed of every random stream (connectivity and external drive).
    pub seed: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params::preset(Preset::Paper)
    }
}

impl Params {
    /// The values of a preset.
    pub fn preset(p: Preset) -> Params {
        let base = Params {
            order: 2500,
            epsilon: 0.1,
            ce: None,
            ci: None,
            j: 0.1,
            g: 5.0,
            eta: 2.0,
            delay: 1.5,
            tau_m: 20.0,
            v_th: 20.0,
            v_reset: 10.0,
            v_init: 0.0,
            t_ref: 2.0,
            dt: 0.1,
            t_sim: 1000.0,
            seed: 12345,
        };
        match p {
            Preset::Paper => base,
            Preset::Nest => Params {
                v_reset: 0.0,
                ..base
            },
        }
    }

    /// Parameters from a TOML string: its `preset` key (or `default_preset`) gives
    /// the base values, its other keys override them.
    pub fn from_toml_str(text: &str, default_preset: Preset) -> Result<Params> {
        // The parser's message quotes the line it refused: cut (a line of 100,000
        // characters was echoed whole).
        let mut table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| anyhow::anyhow!("{}", cut(&e.to_string())))
            .context("parsing TOML")?;
        let preset = match table.remove("preset") {
            None => default_preset,
            Some(toml::Value::String(s)) => match s.as_str() {
                "paper" => Preset::Paper,
                "nest" => Preset::Nest,
                other => bail!(
                    "unknown preset `{}` (expected `paper` or `nest`)",
                    cut(other)
                ),
            },
            Some(v) => bail!("`preset` must be a string, not {}", cut(&v.to_string())),
        };
        // A number with a fraction or exponent for a whole-number key is named
        // here: serde's own message wrote `order = 1e300` out in 301 digits.
        for k in ["order", "ce", "ci", "seed"] {
            if let Some(toml::Value::Float(f)) = table.get(k) {
                bail!("`{k}` must be a whole number, not {f:e}");
            }
        }
        let mut base = toml::Table::try_from(Params::preset(preset))?;
        for (k, v) in table {
            base.insert(k, v);
        }
        // serde's message quotes the string it refused whole: cut.
        base.try_into()
            .map_err(|e: toml::de::Error| anyhow::anyhow!("{}", cut(&e.to_string())))
            .context("invalid parameter")
    }

    /// Parameters from a TOML file (see [`Params::from_toml_str`]).
    pub fn from_file(path: &Path, default_preset: Preset) -> Result<Params> {
        // Bounded and never blocking: a FIFO or /dev/zero is refused at once.
        let text = hpc_io::read::read_regular_to_string(path, hpc_io::read::MAX_CONFIG_BYTES)?;
        Params::from_toml_str(&text, default_preset)
            .with_context(|| format!("in {}", hpc_io::message::path(path)))
    }

    /// The parameters as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    /// Whether two parameter sets describe the same network and dynamics (all but
    /// `t_sim`), so that a checkpoint of one can be resumed with the other:
    /// compared as the network uses them ([`Params::as_used`]), so that an
    /// in-degree given equal to the one `epsilon` gives is the same network
    /// (it was refused as another model).
    pub fn same_model(&self, other: &Params) -> bool {
        self.as_used() == other.as_used()
    }

    /// The in-degrees (CE, CI) the network of these parameters has, for `ne`
    /// excitatory and `ni` inhibitory neurons: as given, else `epsilon` times
    /// the population's size.
    pub fn in_degrees(&self, ne: u32, ni: u32) -> (u32, u32) {
        (
            self.ce.unwrap_or((self.epsilon * ne as f64) as u32),
            self.ci.unwrap_or((self.epsilon * ni as f64) as u32),
        )
    }

    /// The parameters as the network uses them: `t_sim` (which a restart may
    /// change) 0, the in-degrees written in ([`Params::in_degrees`]) and
    /// `epsilon`, which sets nothing else, 0; as they are when the order is
    /// too large for its neurons to be counted.
    pub fn as_used(&self) -> Params {
        let mut p = Params {
            t_sim: 0.0,
            ..self.clone()
        };
        if let Some(ne) = p.order.checked_mul(4) {
            let (ce, ci) = p.in_degrees(ne, p.order);
            (p.ce, p.ci, p.epsilon) = (Some(ce), Some(ci), 0.0);
        }
        p
    }
}

/// Validated parameters and the quantities derived from them.
#[derive(Clone, Debug)]
pub struct Model {
    /// The parameters.
    pub params: Params,
    /// Number of excitatory neurons (ids `0..ne`).
    pub ne: u32,
    /// Number of inhibitory neurons (ids `ne..n`).
    pub ni: u32,
    /// Number of neurons.
    pub n: u32,
    /// Excitatory in-degree.
    pub ce: u32,
    /// Inhibitory in-degree.
    pub ci: u32,
    /// Delay in steps (`D`).
    pub delay_steps: u32,
    /// Refractory period in steps.
    pub ref_steps: u32,
    /// Number of steps to simulate.
    pub steps: u64,
    /// Membrane decay per step, `exp(-dt/tau_m)`.
    pub decay: f64,
    /// Rate of the Poisson generator feeding each neuron (Hz), as NEST's
    /// `p_rate = 1000 * nu_ex * CE`.
    pub p_rate: f64,
    /// Mean number of external spikes per neuron per step, `p_rate * dt / 1000`.
    pub lambda_ext: f64,
    /// Bits of a spike code that hold the neuron id (the rest hold the step within
    /// the exchange interval).
    pub gid_bits: u32,
}

/// `x > 0` (false for NaN).
fn pos(x: f64) -> bool {
    x > 0.0
}

/// `x >= 0` (false for NaN).
fn nonneg(x: f64) -> bool {
    x >= 0.0
}

/// Steps that a duration spans, refusing durations that are not whole steps.
fn steps_of(what: &str, t: f64, dt: f64) -> Result<u64> {
    let s = t / dt;
    let r = s.round();
    if !nonneg(r) || (s - r).abs() > 1e-6 * r.max(1.0) {
        bail!(
            "{what} = {} ms is not a whole number of steps of dt = {} ms",
            num(t),
            num(dt)
        );
    }
    Ok(r as u64)
}

impl Model {
    /// Checks the parameters and derives the model.
    pub fn new(params: Params) -> Result<Model> {
        let p = &params;
        if p.order == 0 {
            bail!("order must be at least 1");
        }
        // Every number from a file or a flag: finite (NaN and infinities are
        // meaningless for each), then in its range; the error names the parameter.
        for (name, x) in [
            ("epsilon", p.epsilon),
            ("j", p.j),
            ("g", p.g),
            ("eta", p.eta),
            ("delay", p.delay),
            ("tau_m", p.tau_m),
            ("v_th", p.v_th),
            ("v_reset", p.v_reset),
            ("v_init", p.v_init),
            ("t_ref", p.t_ref),
            ("dt", p.dt),
            ("t_sim", p.t_sim),
        ] {
            if !x.is_finite() {
                bail!("{name} must be a finite number, got {}", num(x));
            }
        }
        for (name, x) in [("dt", p.dt), ("tau_m", p.tau_m), ("j", p.j)] {
            if !pos(x) {
                bail!("{name} must be > 0, got {}", num(x));
            }
        }
        for (name, x) in [
            ("t_ref", p.t_ref),
            ("t_sim", p.t_sim),
            ("g", p.g),
            ("eta", p.eta),
        ] {
            if !nonneg(x) {
                bail!("{name} must be >= 0, got {}", num(x));
            }
        }
        if !(0.0..=1.0).contains(&p.epsilon) {
            bail!(
                "epsilon must be a probability in [0, 1], got {}",
                num(p.epsilon)
            );
        }
        if p.v_reset.partial_cmp(&p.v_th) != Some(std::cmp::Ordering::Less) {
            bail!("V_reset must be below V_th");
        }
        let ne = p
            .order
            .checked_mul(4)
            .filter(|&ne| ne.checked_add(p.order).is_some_and(|n| n < (1 << 31)))
            .ok_or_else(|| anyhow::anyhow!("order {} is too large", p.order))?;
        let ni = p.order;
        let n = ne + ni;
        let (ce, ci) = p.in_degrees(ne, ni);
        if ce == 0 {
            bail!("the excitatory in-degree CE must be at least 1 (it sets the external rate)");
        }
        // Named (CE or CI, given or from epsilon and order), not "in-degrees".
        for (name, k) in [("ce", ce), ("ci", ci)] {
            if k > u16::MAX as u32 {
                bail!(
                    "{name} = {k}: in-degrees above 65535 are not supported (ring buffers \
                     count inputs in 16 bits)"
                );
            }
        }
        let delay_steps = steps_of("delay", p.delay, p.dt)?;
        if delay_steps == 0 || delay_steps > 1 << 20 {
            bail!(
                "delay = {} ms is {} steps of dt = {} ms: it must be between 1 and 2^20 steps",
                num(p.delay),
                num(p.delay / p.dt),
                num(p.dt)
            );
        }
        let ref_steps = steps_of("t_ref", p.t_ref, p.dt)?;
        // Counted in 32 bits: more would wrap (2^32 steps read as none).
        if ref_steps > u64::from(u32::MAX) {
            bail!(
                "t_ref = {} ms is {} steps of dt = {} ms: it must be at most 2^32 - 1 steps",
                num(p.t_ref),
                num(p.t_ref / p.dt),
                num(p.dt)
            );
        }
        let steps = steps_of("t_sim", p.t_sim, p.dt)?;
        // As hpc_benchmark and the microcircuit: a run of no step writes a spike
        // file with nothing to read (its window (0, 0] is empty).
        if steps == 0 {
            bail!(
                "t_sim = {} ms is not a step of dt = {} ms: it must be at least one step",
                num(p.t_sim),
                num(p.dt)
            );
        }
        if steps >= u32::MAX as u64 - 1 - delay_steps {
            bail!(
                "t_sim = {} ms is too long: {} steps of dt = {} ms, at most 2^32 - 2 - {delay_steps} \
                 (the delay's steps)",
                num(p.t_sim),
                num(p.t_sim / p.dt),
                num(p.dt)
            );
        }
        let nu_th = p.v_th / (p.j * ce as f64 * p.tau_m);
        let nu_ex = p.eta * nu_th;
        let p_rate = 1000.0 * nu_ex * ce as f64;
        let lambda_ext = p_rate * p.dt / 1000.0;
        if lambda_ext.is_nan() || lambda_ext > 500.0 {
            bail!(
                "the external drive ({} spikes per step) is too strong",
                num(lambda_ext)
            );
        }
        // Each parameter is finite, but together they may not be: the largest input
        // a neuron can get in one step must be a number, or the potentials become
        // NaN and a silent network would pass for a result.
        finite_together(
            &[
                ("g*J (the inhibitory weight)", p.g * p.j),
                ("J*CE (all excitatory inputs in one step)", p.j * ce as f64),
                (
                    "g*J*CI (all inhibitory inputs in one step)",
                    p.g * p.j * ci as f64,
                ),
                (
                    "J*(CE + external drive) + g*J*CI (a step's input)",
                    p.j * (ce as f64 + 4.0 * lambda_ext.max(1.0)) + p.g * p.j * ci as f64,
                ),
                ("the threshold rate V_th/(J*CE*tau_m)", nu_th),
            ],
            &format!(
                "j {}, g {} and the in-degrees (CE {ce}, CI {ci}) are too large together",
                num(p.j),
                num(p.g)
            ),
        )?;
        let gid_bits = 32 - (n - 1).leading_zeros().min(31);
        code_fits(p, n, gid_bits, delay_steps)?;
        Ok(Model {
            ne,
            ni,
            n,
            ce,
            ci,
            delay_steps: delay_steps as u32,
            ref_steps: ref_steps as u32,
            steps,
            decay: (-p.dt / p.tau_m).exp(),
            p_rate,
            lambda_ext,
            gid_bits: gid_bits.max(1),
            params,
        })
    }

    /// Synapses in the whole network (`N * (CE + CI)`).
    pub fn synapses(&self) -> u64 {
        self.n as u64 * (self.ce + self.ci) as u64
    }
}

/// Whether a spike of a network of `n` neurons (`gid_bits` bits of id) fits its
/// 32-bit code beside its step within an interval of up to `delay_steps`.
fn code_fits(p: &Params, n: u32, gid_bits: u32, delay_steps: u64) -> Result<()> {
    // A spike travels as `(step within the interval) << gid_bits | neuron`
    // in 32 bits, and an interval is up to the delay long: a step that does
    // not fit was cut to its low bits, and the spike delivered at another
    // step without a word (n = 10^6 neurons and a delay of 10,000 steps,
    // runnable on a few ranks of a cluster).
    let step_bits = 32 - (delay_steps as u32 - 1).leading_zeros();
    if gid_bits.max(1) + step_bits > 32 {
        bail!(
            "order = {} ({n} neurons, {gid_bits} bits) with delay = {} ms ({delay_steps} \
             steps of dt, {step_bits} bits) does not fit a spike's 32-bit code: use a \
             smaller order or a shorter delay (a larger dt)",
            p.order,
            num(p.delay)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// A step of the interval that does not fit beside the neuron in a spike's
    /// 32-bit code is refused (pass 19: cut to its low bits, the spike
    /// delivered at another step).
    #[test]
    fn a_delay_too_long_for_the_network_in_a_spike_code_is_refused() {
        // 10^6 neurons (20 bits) and a delay of 8,192 steps (13 bits): 33 bits.
        let mut p = super::Params::preset(super::Preset::Nest);
        p.order = 200_000;
        p.ce = Some(8);
        p.ci = Some(2);
        p.delay = 1024.0;
        p.dt = 0.125;
        let e = format!("{:#}", super::Model::new(p.clone()).unwrap_err());
        assert!(
            e.contains("order = 200000 (1000000 neurons, 20 bits)"),
            "{e}"
        );
        assert!(
            e.contains("(8192 steps of dt, 13 bits) does not fit"),
            "{e}"
        );
        // 4,096 steps (12 bits) fit.
        p.delay = 512.0;
        super::Model::new(p).unwrap();
    }

    /// An in-degree beyond 16 bits is named (it said "in-degrees", not which).
    #[test]
    fn an_in_degree_too_large_is_named() {
        for (text, name) in [("ce = 70000", "ce = 70000"), ("ci = 70000", "ci = 70000")] {
            let p = super::Params::from_toml_str(text, super::Preset::Paper).unwrap();
            let e = format!("{:#}", super::Model::new(p).unwrap_err());
            assert!(e.contains(name) && e.contains("above 65535"), "{e}");
        }
    }

    /// A line, a string or a preset of 100,000 characters: the parser's excerpt
    /// and serde's quote were echoed whole (pass 16).
    #[test]
    fn a_long_line_or_string_is_cut_in_the_message() {
        let long = "y".repeat(100_000);
        for text in [
            format!("g = 5 {long}"),
            format!("order = \"{long}\""),
            format!("preset = \"{long}\""),
            format!("preset = [\"{long}\"]"),
        ] {
            let e = format!(
                "{:#}",
                super::Params::from_toml_str(&text, super::Preset::Paper).unwrap_err()
            );
            assert!(e.len() < 2000, "{}", &e[..300]);
        }
    }

    #[test]
    fn a_float_for_a_whole_number_is_named_in_a_short_message() {
        for (text, name) in [
            ("order = 1e300", "order"),
            ("ce = 2.5", "ce"),
            ("seed = -1e300", "seed"),
        ] {
            let e = format!(
                "{:#}",
                super::Params::from_toml_str(text, super::Preset::Paper).unwrap_err()
            );
            assert!(
                e.contains(&format!("`{name}` must be a whole number")),
                "{e}"
            );
            assert!(e.len() < 120, "{} bytes: {e}", e.len());
        }
    }

    use super::*;

    #[test]
    fn presets_and_overrides() {
        let p = Params::from_toml_str("preset = \"nest\"\norder = 50\nce = 100", Preset::Paper)
            .unwrap();
        assert_eq!(p.v_reset, 0.0);
        assert_eq!(p.order, 50);
        assert_eq!(p.ce, Some(100));
        assert!(Params::from_toml_str("ordr = 5", Preset::Paper).is_err());
        let m = Model::new(Params::preset(Preset::Nest)).unwrap();
        assert_eq!((m.ne, m.ni, m.ce, m.ci), (10000, 2500, 1000, 250));
        assert_eq!((m.delay_steps, m.ref_steps, m.steps), (15, 20, 10000));
        assert!((m.p_rate - 20000.0).abs() < 1e-9);
        assert!((m.lambda_ext - 2.0).abs() < 1e-12);
        assert_eq!(m.gid_bits, 14);
        let back = Params::from_toml_str(&m.params.to_toml(), Preset::Paper).unwrap();
        assert_eq!(back, m.params);
    }

    /// NaN, infinities and negative values are refused, naming the parameter,
    /// whether they come from a file or a flag.
    #[test]
    fn non_finite_and_negative_parameters_are_refused_by_name() {
        let bad = |edit: fn(&mut Params)| {
            let mut p = Params::preset(Preset::Paper);
            edit(&mut p);
            Model::new(p).unwrap_err().to_string()
        };
        let e = bad(|p| p.tau_m = f64::NAN);
        assert!(e.contains("tau_m must be a finite number, got NaN"), "{e}");
        let e = bad(|p| p.g = f64::INFINITY);
        assert!(e.contains("g must be a finite number, got inf"), "{e}");
        let e = bad(|p| p.v_init = f64::NEG_INFINITY);
        assert!(e.contains("v_init must be a finite number"), "{e}");
        let e = bad(|p| p.epsilon = f64::NAN);
        assert!(e.contains("epsilon must be a finite number"), "{e}");
        let e = bad(|p| p.epsilon = 1.5);
        assert!(e.contains("epsilon must be a probability"), "{e}");
        let e = bad(|p| p.eta = -1.0);
        assert!(e.contains("eta must be >= 0, got -1"), "{e}");
        let e = bad(|p| p.dt = 0.0);
        assert!(e.contains("dt must be > 0, got 0"), "{e}");
        // Pass 9: a dt or a delay that gives a delay beyond 2^20 steps was
        // "the delay must be between 1 and 2^20 steps", with neither value.
        for (toml, words) in [
            (
                "dt = 1e-300",
                &["delay = 1.5 ms is 1.5e300 steps of dt = 1e-300 ms", "2^20"][..],
            ),
            ("delay = 1e300", &["delay = 1e300 ms is 1e301 steps"][..]),
            ("delay = 0.0", &["delay = 0 ms is 0 steps"][..]),
            (
                "t_sim = 1e300",
                &["t_sim = 1e300 ms is too long: 1e301 steps"][..],
            ),
            // Pass 12: a run of no step was accepted (0 ms, -0 ms, less than a
            // step), where hpc_benchmark and the microcircuit refuse it.
            (
                "t_sim = 0.0",
                &["t_sim = 0 ms is not a step of dt = 0.1 ms"][..],
            ),
            ("t_sim = -0.0", &["t_sim = -0 ms is not a step"][..]),
            ("t_sim = 1e-300", &["t_sim = 1e-300 ms is not a step"][..]),
            // Pass 13: a refractory period of 2^32 steps wrapped to none (the
            // spikes of t_ref = 0), one of 2^32 + 1 to a step.
            (
                "t_ref = 429496729.6",
                &[
                    "t_ref = 429496729.6 ms is 4294967296 steps",
                    "at most 2^32 - 1",
                ][..],
            ),
            ("t_ref = 1e300", &["t_ref = 1e300 ms is 1e301 steps"][..]),
        ] {
            let e = Params::from_toml_str(toml, Preset::Paper)
                .and_then(Model::new)
                .map(|_| ())
                .unwrap_err()
                .to_string();
            for w in words {
                assert!(e.contains(w), "{toml}: {w:?} not in {e}");
            }
            assert!(e.len() < 200, "{e}");
        }
        let e = Params::from_toml_str("t_sim = nan", Preset::Paper)
            .and_then(Model::new)
            .unwrap_err()
            .to_string();
        assert!(e.contains("t_sim must be a finite number"), "{e}");
    }

    /// A parameter file that is a FIFO or `/dev/zero` is refused at once, naming it.
    #[test]
    fn a_parameter_file_that_is_not_a_regular_file_is_refused_at_once() {
        let dir = std::env::temp_dir().join(format!("brunel-params-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("params.toml");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t = std::time::Instant::now();
        let e = format!("{:#}", Params::from_file(&fifo, Preset::Paper).unwrap_err());
        assert!(
            e.contains("params.toml is a FIFO, not a regular file"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            Params::from_file(Path::new("/dev/zero"), Preset::Paper).unwrap_err()
        );
        assert!(e.contains("/dev/zero is a character device"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn shipped_file_is_the_paper_preset() {
        let p = Params::from_toml_str(include_str!("../brunel.toml"), Preset::Nest).unwrap();
        assert_eq!(p, Params::preset(Preset::Paper));
    }
}
