//! # Spiking-network simulation codes on hpc-rs
//!
//! The machinery that every spiking-network code of the workspace shares, so that
//! a network of your own needs only its model: neurons, connectivity and
//! parameters. The `brunel`, `microcircuit` and `hpc_benchmark` examples are
//! built on it.
//!
//! * [`exchange`]: the spike exchange between ranks, every spike to every rank
//!   (an allgather through `hpc-comm`'s engines, the runtime, or in memory), and
//!   [`alltoallv`]: each spike only to the ranks with its targets;
//! * [`Block`]: the decomposition of the neurons over ranks and threads;
//! * [`rng`]: counter-based random streams keyed by what they draw, so that
//!   spikes are bit-identical for any number of ranks and threads, and the Poisson
//!   sampling of a background input;
//! * [`team`]: the spinning thread team that steps a rank's shards;
//! * [`spikes`]: the spike file format (`.spk`), its writer, its checked reader
//!   [`spikes::decode_spikes`] and run statistics; `python/hpc_spikes.py` in this
//!   crate is the same reader in Python;
//! * [`checkpoint`]: checkpoint/restart on `hpc-checkpoint`;
//! * [`run`]: the options every run shares ([`RunOptions`]), the rank's thread
//!   pool, the run's output directory, progress, and the hand-off of every rank's
//!   report to rank 0 ([`run::gather_reports`]);
//! * [`args`]: the command-line options every binary shares ([`args::RunArgs`], to
//!   flatten into a binary's own), [`progress`]: the progress line and the pace of
//!   a run, and [`intake`]: the intervals of a run's loop and the spikes of its
//!   exchanges on their way to delivery and to rank 0's statistics and spike file;
//!   [`rank_loop`]: the loop of a rank around them, its exchange overlapped with
//!   the update, drained for checkpoints;
//! * [`ring`]: the ring buffers of input pending for the next steps;
//! * [`memory`]: the memory a run may use;
//! * [`plasticity`]: NEST's `stdp_pl_synapse_hom` (power-law STDP) with the
//!   postsynaptic spike archive it reads, and [`neuron`]: NEST's
//!   `iaf_psc_alpha` with exact integration; [`model`] holds their typed error;
//! * [`targets`]: synapse targets stored as `u16` steps (2 bytes a synapse
//!   for ascending targets), which the STDP rows use.
//!
//! The crate is published (unlike the examples), because it is what a user
//! writing a network code of their own depends on; it depends on no example.
//!
//! # Write your own network
//!
//! Two ranks (in memory) of eight neurons that integrate a Poisson drive and
//! fire at a threshold; rank 0 writes the spike file, which reads back the same
//! whatever the number of ranks.
//!
//! ```
//! use hpc_spiking::exchange::{virtual_ranks, SpikeExchange};
//! use hpc_spiking::rng::{draw, stream_key, PoissonTable, Purpose};
//! use hpc_spiking::spikes::{read_spikes, SpikeWriter};
//! use hpc_spiking::Block;
//!
//! let (n, ranks, steps, seed) = (8u32, 2usize, 200u32, 42u64);
//! let dir = std::env::temp_dir().join(format!("hpc-spiking-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("spikes.spk");
//! let header = serde_json::json!({
//!     "dt_ms": 1.0, "t_sim_ms": steps as f64, "n_neurons": n,
//!     "populations": [{"name": "all", "first": 0, "count": n}],
//! })
//! .to_string();
//! // Each rank a thread of this process, with its member of a `LocalExchange`.
//! virtual_ranks(ranks, 1, |rank, mut ex, _pool| {
//!     let block = Block::part(n, ranks as u32, rank as u32);
//!     let drive = PoissonTable::new(0.3);
//!     let mut v = vec![0u32; block.len as usize];
//!     let mut writer = if rank == 0 {
//!         Some(SpikeWriter::with_header(&path, &header)?)
//!     } else {
//!         None
//!     };
//!     let (mut local, mut all) = (Vec::new(), Vec::new());
//!     for step in 1..=steps {
//!         local.clear();
//!         for i in 0..block.len {
//!             let id = block.first + i;
//!             let key = stream_key(seed, Purpose::External, id);
//!             v[i as usize] += drive.sample(draw(key, step as u64));
//!             if v[i as usize] >= 4 {
//!                 v[i as usize] = 0;
//!                 local.push(id);
//!             }
//!         }
//!         ex.overlap(&local, &mut all, || ())?;
//!         if let Some(w) = &mut writer {
//!             let spikes: Vec<(u32, u32)> = all.iter().map(|&id| (step, id)).collect();
//!             w.append(&spikes)?;
//!         }
//!     }
//!     if let Some(w) = writer {
//!         w.finish()?;
//!     }
//!     Ok(())
//! })?;
//! let file = read_spikes(&path)?;
//! assert_eq!(file.n_neurons, 8);
//! assert!(file.spikes.len() > 50, "{} spikes", file.spikes.len());
//! std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod alltoallv;
pub mod args;
mod block;
pub mod checkpoint;
pub mod exchange;
pub mod intake;
pub mod memory;
pub mod model;
pub mod neuron;
pub mod plasticity;
pub mod progress;
pub mod rank_loop;
pub mod ring;
pub mod rng;
pub mod run;
pub mod spikes;
pub mod stop;
pub mod targets;
pub mod team;

pub use block::Block;
pub use run::RunOptions;
