//! # Brunel (2000) balanced network on hpc-rs
//!
//! A sparse random network of `NE = 4*order` excitatory and `NI = order` inhibitory
//! leaky integrate-and-fire neurons with delta synapses and a Poisson drive, as
//! NEST's `brunel_delta_nest.py`, distributed over ranks (contiguous blocks of
//! neurons) and threads (a pinned rayon pool per rank).
//!
//! Results are bit-identical for any number of ranks and threads: random streams
//! are keyed by neuron ([`rng`]), each rank draws the inputs of its own neurons
//! ([`network`]), and inputs are counted in integers ([`sim`]).
//!
//! ```
//! use brunel::{exchange::LocalExchange, params::{Model, Params, Preset}, sim::*};
//! let model = Model::new(Params { order: 20, t_sim: 20.0, ..Params::preset(Preset::Nest) })?;
//! let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
//! let mut ex = LocalExchange::group(1).pop().unwrap();
//! let mut sim = Simulation::new(&model, 0, 1, &pool, None)?;
//! let opts = RunOptions { overlap: true, ..Default::default() };
//! let report = sim.run(&pool, &mut ex, &opts, None)?;
//! assert_eq!(report.end_step, 200);
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod checkpoint;
pub mod exchange;
pub mod memory;
pub mod network;
pub mod output;
pub mod params;
pub mod plot;
pub mod rng;
pub mod sim;

/// Peak resident memory of this process (`VmHWM` from `/proc/self/status`), bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// CPU time (user + system) of this process so far, all threads, in seconds.
pub fn cpu_seconds() -> f64 {
    // SAFETY: `getrusage` fills the zero-initialised struct we pass and reads nothing else.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}
