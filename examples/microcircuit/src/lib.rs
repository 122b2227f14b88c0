//! # The cortical microcircuit of Potjans & Diesmann (2014) on hpc-rs
//!
//! 77,169 `iaf_psc_exp` neurons in eight populations (layers 2/3, 4, 5 and 6,
//! excitatory and inhibitory) with about 3 x 10^8 synapses at full scale, as NEST's
//! `Potjans_2014` example defines it ([`params`]), distributed over ranks
//! (contiguous blocks of neurons) and threads (one shard of a rank's neurons per
//! thread, each with its own synapses, [`network`]).
//!
//! Spikes are bit-identical for any number of ranks and threads: random streams
//! are keyed by what they draw ([`rng`]), and synaptic input is summed in integers
//! ([`sim`]).
//!
//! ```
//! use hpc_spiking::{alltoallv::Gather, exchange::LocalExchange};
//! use microcircuit::{params::{Model, Params}, sim::*};
//! let model = Model::new(Params { n_scaling: 0.01, k_scaling: 0.05, t_presim: 5.0, t_sim: 10.0, ..Params::default() })?;
//! let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
//! let mut ex = Gather(LocalExchange::group(1).pop().unwrap());
//! let mut sim = Simulation::new(&model, 0, 1, &pool, &Default::default())?;
//! let report = sim.run(&pool, &mut ex, &RunOptions::default(), None)?;
//! assert_eq!(report.end_step, 150);
//! # Ok::<(), anyhow::Error>(())
//! ```

// Loops over population indices index several parallel tables at once.
#![allow(clippy::needless_range_loop)]

pub mod checkpoint;
pub mod network;
pub mod output;
pub mod params;
pub mod plot;
pub mod rng;
pub mod sim;
