//! NEST 3.10's `hpc_benchmark` (`pynest/examples/hpc_benchmark.py`) on
//! [`hpc_spiking`]: `scale` x 11,250 `iaf_psc_alpha` neurons (9,000 excitatory and
//! 2,250 inhibitory per unit of scale), each with 9,000 excitatory and 2,250
//! inhibitory inputs whatever the scale (multapses, no autapses), power-law STDP
//! on the excitatory-excitatory synapses, static synapses elsewhere, a Poisson
//! drive, 1.5 ms delays.
//!
//! * [`params`]: the script's parameters and what follows from them;
//! * [`network`]: a thread's neurons, their synapses and their step;
//! * [`sim`]: one rank's network and its simulation loop;
//! * [`checkpoint`]: its checkpoints (plastic weights, traces and archives
//!   included);
//! * [`figure`]: the histogram of the final E->E weights as an SVG.
//!
//! Every random number comes from a stream keyed by what it draws
//! ([`hpc_spiking::rng`]), every STDP update depends only on spike times, and
//! the inputs of a step are summed in an order fixed by the spikes' steps and
//! sources: spikes and weights are bit-identical for any number of ranks and
//! threads.

pub mod checkpoint;
pub mod figure;
pub mod network;
pub mod params;
pub mod sim;
