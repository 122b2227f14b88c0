//! Bandwidth as nccl-tests reports it.
//!
//! `algbw = bytes / time`, where `bytes` is the size of the full vector of
//! one rank (for allgather the gathered output, for reduce-scatter the
//! input); `busbw = algbw * factor`, with the factor that makes the number
//! comparable to the hardware's link bandwidth:
//!
//! ```text
//! allreduce       2 (n - 1) / n
//! reduce_scatter  (n - 1) / n
//! allgather       (n - 1) / n
//! broadcast       1
//! ```

use std::time::Duration;

/// A collective, for bandwidth arithmetic and reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CollKind {
    /// Allreduce.
    AllReduce,
    /// Reduce-scatter.
    ReduceScatter,
    /// Allgather.
    AllGather,
    /// Broadcast.
    Broadcast,
}

impl CollKind {
    /// Every kind.
    pub const ALL: [CollKind; 4] = [
        CollKind::AllReduce,
        CollKind::ReduceScatter,
        CollKind::AllGather,
        CollKind::Broadcast,
    ];

    /// nccl-tests' bus-bandwidth factor for `ranks` ranks.
    pub fn bus_factor(self, ranks: usize) -> f64 {
        let n = ranks.max(1) as f64;
        match self {
            CollKind::AllReduce => 2.0 * (n - 1.0) / n,
            CollKind::ReduceScatter | CollKind::AllGather => (n - 1.0) / n,
            CollKind::Broadcast => 1.0,
        }
    }

    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            CollKind::AllReduce => "all_reduce",
            CollKind::ReduceScatter => "reduce_scatter",
            CollKind::AllGather => "all_gather",
            CollKind::Broadcast => "broadcast",
        }
    }
}

hpc_collectives::display_by_name!(CollKind);

/// Algorithm and bus bandwidth of one measurement, in GB/s (10^9 bytes/s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bandwidth {
    /// `bytes / time`.
    pub algbw: f64,
    /// `algbw * factor` ([`CollKind::bus_factor`]).
    pub busbw: f64,
}

/// Bandwidth of `kind` over `ranks` ranks moving `bytes` (nccl-tests'
/// "size") in `time`. A zero time gives zeros rather than infinities.
///
/// ```
/// use hpc_gpu::bandwidth::{bandwidth, CollKind};
/// use std::time::Duration;
/// let b = bandwidth(CollKind::AllReduce, 4, 1_000_000_000, Duration::from_secs(1));
/// assert_eq!(b.algbw, 1.0);
/// assert_eq!(b.busbw, 1.5);
/// ```
pub fn bandwidth(kind: CollKind, ranks: usize, bytes: usize, time: Duration) -> Bandwidth {
    let t = time.as_secs_f64();
    if t <= 0.0 {
        return Bandwidth {
            algbw: 0.0,
            busbw: 0.0,
        };
    }
    let algbw = bytes as f64 / t / 1e9;
    Bandwidth {
        algbw,
        busbw: algbw * kind.bus_factor(ranks),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_match_nccl_tests() {
        assert_eq!(CollKind::AllReduce.bus_factor(1), 0.0);
        assert_eq!(CollKind::AllReduce.bus_factor(2), 1.0);
        assert_eq!(CollKind::AllReduce.bus_factor(8), 1.75);
        assert_eq!(CollKind::ReduceScatter.bus_factor(4), 0.75);
        assert_eq!(CollKind::AllGather.bus_factor(2), 0.5);
        assert_eq!(CollKind::Broadcast.bus_factor(8), 1.0);
    }

    #[test]
    fn bandwidth_values() {
        let b = bandwidth(
            CollKind::AllGather,
            8,
            4_000_000_000,
            Duration::from_secs(2),
        );
        assert_eq!(b.algbw, 2.0);
        assert_eq!(b.busbw, 1.75);
        let z = bandwidth(CollKind::Broadcast, 8, 10, Duration::ZERO);
        assert_eq!(z.busbw, 0.0);
    }
}
