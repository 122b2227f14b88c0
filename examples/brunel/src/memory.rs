//! The memory a run needs, estimated from the model before anything is allocated,
//! so that a network too large for the machine is refused at once with the numbers
//! instead of building for minutes and then failing an allocation.
//!
//! The estimate follows the allocations of [`crate::network::Connectivity::build`]
//! and [`crate::sim::Simulation`]: for a rank of `L` neurons in a network of `N`
//! with in-degree `K = CE + CI`, built with `T` threads,
//!
//! * connectivity: `8 (N + 1)` bytes of offsets and `2 L K` of targets (`4 L K` where a rank has more than 65,536 neurons);
//! * building it: per thread `4 N` of counts and `8 N` of cursors, while the targets
//!   fill (the counts are freed first): peak `offsets + 8 T N + max(4 T N, 4 L K)`;
//! * neuron state: `20 + 4 R` bytes per neuron (potential, refractory counter, stream
//!   key, two `u16` ring buffers of `R = next_pow2(D + 1)` slots), twice the state
//!   again while a checkpoint is encoded;
//! * rank 0: `40 N` for the spike statistics and the buffers of one interval.
//!
//! The ranks on one node add up; the node's available memory is `MemAvailable`
//! (and the cgroup's limit, when lower).

pub use hpc_spiking::memory::{available, human};

use crate::params::Model;

/// The estimate for one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Estimate {
    /// Ranks on the node.
    pub ranks_here: usize,
    /// Connectivity of one rank (offsets and targets).
    pub connectivity: u64,
    /// Peak of one rank while its connectivity is built.
    pub build_peak: u64,
    /// Neuron state of one rank (with a checkpoint's copies when checkpointing).
    pub state: u64,
    /// What rank 0 holds beyond the others.
    pub rank0: u64,
}

impl Estimate {
    /// Peak bytes of one rank.
    pub fn rank_peak(&self) -> u64 {
        self.build_peak
            .max(self.connectivity.saturating_add(self.state))
    }

    /// Peak bytes of all ranks of the node.
    pub fn node_total(&self) -> u64 {
        self.rank_peak()
            .saturating_mul(self.ranks_here as u64)
            .saturating_add(self.rank0)
    }
}

/// Estimates the node's memory for `model` split over `ranks` ranks, `ranks_here` of
/// them on this node, each with `threads` threads.
pub fn estimate(
    model: &Model,
    ranks: usize,
    ranks_here: usize,
    threads: usize,
    checkpoints: bool,
) -> Estimate {
    let n = model.n as u64;
    let ranks = ranks.max(1) as u64;
    let len = n.div_ceil(ranks);
    let k = (model.ce + model.ci) as u64;
    let chunks = (threads.max(1) as u64).clamp(1, len.max(1));
    let offsets = (n + 1).saturating_mul(8);
    let width = if len <= 1 << 16 { 2 } else { 4 };
    let targets = len.saturating_mul(k).saturating_mul(width);
    let build_peak = offsets
        .saturating_add(chunks.saturating_mul(n).saturating_mul(8))
        .saturating_add(chunks.saturating_mul(n).saturating_mul(4).max(targets));
    let slots = (model.delay_steps as u64 + 1).next_power_of_two();
    let mut state = len.saturating_mul(20 + 4 * slots);
    if checkpoints {
        let copy = len.saturating_mul(12 + 4 * model.delay_steps as u64);
        state = state.saturating_add(copy.saturating_mul(2));
    }
    Estimate {
        ranks_here: ranks_here.max(1),
        connectivity: offsets.saturating_add(targets),
        build_peak,
        state,
        rank0: n.saturating_mul(40),
    }
}

/// Refuses `e` when it exceeds `available` bytes, with the estimate and the machine's
/// figure in the message.
pub fn check(model: &Model, e: &Estimate, available: Option<(u64, String)>) -> anyhow::Result<()> {
    let Some((avail, source)) = available else {
        tracing::debug!("available memory unknown; the network's size is not checked");
        return Ok(());
    };
    let need = e.node_total();
    if need <= avail {
        tracing::debug!(need, avail, "memory estimate fits");
        return Ok(());
    }
    anyhow::bail!(
        "the network needs about {} on this node but only {} is available ({source}): \
         {} neurons, {:.3e} synapses; per rank {} of connectivity (4 B per synapse), \
         {} while building it, {} of neuron state; {} rank(s) on this node. Use a smaller \
         --order, --ce or --ci, spread the ranks over more nodes, or pass --allow-oversize \
         to try anyway",
        human(need),
        human(avail),
        model.n,
        model.synapses() as f64,
        human(e.connectivity),
        human(e.build_peak),
        human(e.state),
        e.ranks_here
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::{Block, Connectivity};
    use crate::params::{Params, Preset};

    #[test]
    fn connectivity_estimate_is_what_is_built() {
        let model = Model::new(Params {
            order: 40,
            ..Params::preset(Preset::Nest)
        })
        .unwrap();
        for ranks in [1u32, 3] {
            let block = Block::part(model.n, ranks, 0);
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .unwrap();
            let conn = pool.install(|| Connectivity::build(&model, block));
            let e = estimate(&model, ranks as usize, 1, 1, false);
            // Rank 0 has the largest block, and every neuron has exactly CE + CI
            // sources: the estimate is exact.
            assert_eq!(e.connectivity, conn.bytes(), "{ranks} ranks");
        }
    }

    #[test]
    fn huge_networks_are_refused_with_the_numbers() {
        // 2.5e8 neurons (28 bits of a spike's code, beside the 4 of a delay of 15
        // steps), 2.9e11 synapses.
        let model = Model::new(Params {
            order: 50_000_000,
            ce: Some(1000),
            ci: Some(250),
            ..Params::preset(Preset::Nest)
        })
        .unwrap();
        let e = estimate(&model, 1, 1, 1, false);
        assert!(e.node_total() > 16 << 30, "{e:?}");
        let err = check(&model, &e, Some((8 << 30, "MemAvailable".into())))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("needs about") && err.contains("8.0 GiB"),
            "{err}"
        );
        let small = Model::new(Params {
            order: 100,
            ..Params::preset(Preset::Nest)
        })
        .unwrap();
        let e = estimate(&small, 2, 2, 1, true);
        check(&small, &e, Some((1 << 30, "MemAvailable".into()))).unwrap();
    }
}
