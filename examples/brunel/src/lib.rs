//! # Brunel (2000) balanced network on hpc-rs
//!
//! A sparse random network of `NE = 4*order` excitatory and `NI = order` inhibitory
//! leaky integrate-and-fire neurons with delta synapses and a Poisson drive, as
//! NEST's `brunel_delta_nest.py`, distributed over ranks (contiguous blocks of
//! neurons) and threads (a pinned rayon pool per rank).
//!
//! Results are bit-identical for any number of ranks and threads: random streams
//! are keyed by neuron ([`hpc_spiking::rng`]), each rank draws the inputs of its own neurons
//! ([`network`]), and inputs are counted in integers ([`sim`]).
//!
//! ```
//! use brunel::{params::{Model, Params, Preset}, sim::*};
//! use hpc_spiking::exchange::LocalExchange;
//! let model = Model::new(Params { order: 20, t_sim: 20.0, ..Params::preset(Preset::Nest) })?;
//! let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
//! let mut ex = LocalExchange::group(1).pop().unwrap();
//! let mut sim = Simulation::new(&model, 0, 1, &pool, &Default::default())?;
//! let opts = RunOptions { overlap: true, ..Default::default() };
//! let report = sim.run(&pool, &mut ex, &opts, None)?;
//! assert_eq!(report.end_step, 200);
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod checkpoint;
pub mod memory;
pub mod network;
pub mod output;
pub mod params;
pub mod plot;
pub mod sim;

/// The longest wall-clock time `--pace` may stretch a run to: a year, in seconds.
pub const MAX_PACED_WALL_S: f64 = 366.0 * 86400.0;

/// Checks `--pace FACTOR`: a finite number above 0 that does not stretch the run
/// past [`MAX_PACED_WALL_S`] of wall-clock time (`--pace 1e-300` would ask for
/// 1e297 s, which no `Duration` holds).
pub fn check_pace(factor: f64, model: &params::Model) -> anyhow::Result<()> {
    if !(factor.is_finite() && factor > 0.0) {
        // -1e300 as written (`--pace=-1e300`), not as 301 digits.
        anyhow::bail!(
            "--pace must be a finite number above 0, got {}",
            hpc_spiking::run::num(factor)
        );
    }
    let wall = model.steps as f64 * model.params.dt / 1000.0 / factor;
    if wall.is_nan() || wall > MAX_PACED_WALL_S {
        // 1e-300 as written, not as 300 digits.
        let factor = if factor < 1e-3 {
            format!("{factor:e}")
        } else {
            factor.to_string()
        };
        anyhow::bail!(
            "--pace {factor} would stretch {} ms of simulated time to {wall:.3e} s of \
             wall-clock time, more than a year ({MAX_PACED_WALL_S} s)",
            hpc_spiking::run::num(model.params.t_sim)
        );
    }
    Ok(())
}
