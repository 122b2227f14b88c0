//! What the model pieces ([`crate::plasticity`], [`crate::neuron`]) share: the
//! typed error of a bad parameter or an out-of-order event, and the checks that
//! make it.

use hpc_io::message::num;

/// A parameter or an event that a model refuses (its numbers written as
/// [`num`] writes them: `1e300`, not three hundred digits).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// A parameter outside its domain (NaN, infinite, negative, zero where it
    /// divides, ...).
    #[error("parameter {name} = {} is invalid: it must be {must}", num(*value))]
    Param {
        /// The parameter's name (NEST's where NEST has one).
        name: &'static str,
        /// The value given.
        value: f64,
        /// What the value must be.
        must: &'static str,
    },
    /// An event earlier than (or at the time of) the one before it from the same
    /// neuron: spikes are given in increasing time.
    #[error("{what} at {} ms is not after the previous one at {} ms", num(*t), num(*last))]
    TimeOrder {
        /// Which events ("presynaptic spike", "postsynaptic spike").
        what: &'static str,
        /// The time given (ms).
        t: f64,
        /// The time of the one before (ms).
        last: f64,
    },
    /// A plastic weight left the finite numbers (the rule's step `lambda` and
    /// exponent `mu` too large for the weights they grow): the run stops here
    /// rather than go on with infinite or NaN weights, which the depression
    /// would silently turn into 0 while their input drives the targets.
    #[error(
        "an STDP weight became {weight} (facilitated from {} at the presynaptic spike at {} ms): \
         lambda {} and mu {} grow the weights beyond any finite number",
        num(*from), num(*t), num(*lambda), num(*mu)
    )]
    WeightOverflow {
        /// The weight the facilitation gave.
        weight: f64,
        /// The weight before it.
        from: f64,
        /// The presynaptic spike's time (ms).
        t: f64,
        /// The rule's step.
        lambda: f64,
        /// The rule's exponent.
        mu: f64,
    },
    /// Parameters each in its domain whose propagators over one step are not
    /// finite numbers (a capacitance or a time constant near 0 or 1e308 beside
    /// the others, a resolution of 1e308 ms): the membrane potential would be
    /// NaN from the first step, and the neuron never spike.
    #[error(
        "the {current} propagators of iaf_psc_alpha over a step of {} ms are not finite numbers \
         (C_m = {} pF, tau_m = {} ms, tau_syn = {} ms): these values, together, \
         leave no finite membrane potential",
        num(*h), num(*c_m), num(*tau_m), num(*tau_syn)
    )]
    Propagators {
        /// Which current's (`excitatory`, `inhibitory`), or `membrane` for
        /// the constant current's and the leak's.
        current: &'static str,
        /// The resolution (ms).
        h: f64,
        /// The capacitance (pF).
        c_m: f64,
        /// The membrane time constant (ms).
        tau_m: f64,
        /// The synaptic time constant (ms; `tau_m` for the membrane's).
        tau_syn: f64,
    },
    /// A synapse's target outside the postsynaptic archives (or the inputs)
    /// given.
    #[error("target {target} is outside the {len} postsynaptic archives (or inputs) given")]
    Target {
        /// The target index.
        target: u32,
        /// How many archives (or inputs, the fewer) there were.
        len: usize,
    },
}

/// `value` finite and strictly positive (a time constant, a capacitance).
pub(crate) fn positive(name: &'static str, value: f64) -> Result<f64, ModelError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(ModelError::Param {
            name,
            value,
            must: "finite and > 0",
        })
    }
}

/// `value` finite and `>= 0` (a rate, an exponent, a refractory period).
pub(crate) fn non_negative(name: &'static str, value: f64) -> Result<f64, ModelError> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(ModelError::Param {
            name,
            value,
            must: "finite and >= 0",
        })
    }
}

/// `value` finite (a potential, a current).
pub(crate) fn finite(name: &'static str, value: f64) -> Result<f64, ModelError> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(ModelError::Param {
            name,
            value,
            must: "finite",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_name_the_parameter() {
        assert_eq!(positive("tau_m", 10.0), Ok(10.0));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = positive("tau_m", bad).unwrap_err();
            assert!(e.to_string().contains("tau_m"), "{e}");
        }
        assert_eq!(non_negative("mu", 0.0), Ok(0.0));
        assert!(non_negative("mu", -1e-300).is_err());
        assert!(non_negative("mu", f64::NAN).is_err());
        assert_eq!(finite("E_L", -70.0), Ok(-70.0));
        assert!(matches!(
            finite("E_L", f64::NEG_INFINITY),
            Err(ModelError::Param { name: "E_L", .. })
        ));
    }

    /// `hpc_benchmark --tau-plus -1e300` (or `--lambda 1e300`, whose weights
    /// overflow) printed each number as three hundred digits: every number of
    /// the messages is now written as `num` writes it.
    #[test]
    fn huge_numbers_are_one_short_line() {
        let errors = [
            positive("tau_plus", -1e300).unwrap_err(),
            ModelError::TimeOrder {
                what: "presynaptic spike",
                t: 1e300,
                last: 2e300,
            },
            ModelError::WeightOverflow {
                weight: f64::INFINITY,
                from: 1e200,
                t: 1e250,
                lambda: 1e300,
                mu: 1e300,
            },
        ];
        for e in errors {
            let text = e.to_string();
            assert!(text.len() < 200 && text.contains("e300"), "{text}");
        }
    }
}
