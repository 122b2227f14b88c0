//! The names of what a collective is and how it runs: [`CollectiveKind`]
//! and [`Algorithm`], shared by the request ([`Collective`](crate::Collective)),
//! the algorithms ([`algo`](crate::algo)) and their output
//! ([`Schedule`](crate::Schedule)), below all three.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// `FromStr` for a type of [`by_name`] (its `ALL` and `name`): `what` names it
/// in the error, `sep` and the `aliases` as [`by_name`] takes them.
macro_rules! from_str_by_name {
    ($t:ty, $what:literal, $sep:expr, [$(($alias:literal, $name:literal)),+ $(,)?]) => {
        impl FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                by_name(s, $sep, &[$(($alias, $name)),+], &<$t>::ALL, <$t>::name, $what)
            }
        }
    };
}

/// The kind of collective operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CollectiveKind {
    /// Barrier.
    Barrier,
    /// Broadcast from a root.
    Broadcast,
    /// Gather equal blocks to a root.
    Gather,
    /// Scatter equal blocks from a root.
    Scatter,
    /// Allgather of equal blocks.
    Allgather,
    /// Allgather of per-rank counts.
    Allgatherv,
    /// All-to-all of equal blocks.
    Alltoall,
    /// All-to-all of per-pair counts.
    Alltoallv,
    /// Reduction to a root.
    Reduce,
    /// Reduction to all ranks.
    Allreduce,
    /// Reduce-scatter with equal blocks.
    ReduceScatterBlock,
    /// Reduce-scatter with per-rank counts.
    ReduceScatter,
}

impl CollectiveKind {
    /// Every kind.
    pub const ALL: [CollectiveKind; 12] = [
        CollectiveKind::Barrier,
        CollectiveKind::Broadcast,
        CollectiveKind::Gather,
        CollectiveKind::Scatter,
        CollectiveKind::Allgather,
        CollectiveKind::Allgatherv,
        CollectiveKind::Alltoall,
        CollectiveKind::Alltoallv,
        CollectiveKind::Reduce,
        CollectiveKind::Allreduce,
        CollectiveKind::ReduceScatterBlock,
        CollectiveKind::ReduceScatter,
    ];

    /// Lower-case name (`"allreduce"`, `"reduce_scatter_block"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            CollectiveKind::Barrier => "barrier",
            CollectiveKind::Broadcast => "broadcast",
            CollectiveKind::Gather => "gather",
            CollectiveKind::Scatter => "scatter",
            CollectiveKind::Allgather => "allgather",
            CollectiveKind::Allgatherv => "allgatherv",
            CollectiveKind::Alltoall => "alltoall",
            CollectiveKind::Alltoallv => "alltoallv",
            CollectiveKind::Reduce => "reduce",
            CollectiveKind::Allreduce => "allreduce",
            CollectiveKind::ReduceScatterBlock => "reduce_scatter_block",
            CollectiveKind::ReduceScatter => "reduce_scatter",
        }
    }

    /// The algorithms implemented for this kind (excluding `Auto`).
    pub const fn algorithms(self) -> &'static [Algorithm] {
        use Algorithm::*;
        match self {
            CollectiveKind::Barrier => &[Dissemination],
            CollectiveKind::Broadcast => &[Binomial, ScatterAllgather],
            CollectiveKind::Gather | CollectiveKind::Scatter | CollectiveKind::Reduce => {
                &[Binomial]
            }
            CollectiveKind::Allgather | CollectiveKind::Allgatherv => {
                &[Ring, RecursiveDoubling, Bruck]
            }
            CollectiveKind::Alltoall => &[Pairwise, Bruck],
            CollectiveKind::Alltoallv => &[Pairwise],
            CollectiveKind::Allreduce => &[RecursiveDoubling, Rabenseifner, Ring],
            CollectiveKind::ReduceScatterBlock | CollectiveKind::ReduceScatter => &[Ring, Pairwise],
        }
    }
}

crate::display_by_name!(CollectiveKind);

from_str_by_name!(
    CollectiveKind,
    "collective",
    ('-', "_"),
    [
        ("bcast", "broadcast"),
        ("reduce_scatter_v", "reduce_scatter")
    ]
);

/// A collective algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Algorithm {
    /// Choose by message size and rank count (see [`collective`](crate::collective)).
    #[default]
    Auto,
    /// Dissemination barrier: `ceil(log2 p)` rounds.
    Dissemination,
    /// Binomial tree (broadcast, gather, scatter, reduce).
    Binomial,
    /// Van de Geijn broadcast: binomial scatter, then ring allgather.
    ScatterAllgather,
    /// Ring (allgather, allreduce, reduce-scatter): `p - 1` neighbour steps.
    Ring,
    /// Recursive doubling (allgather, allreduce), with MPICH's folding of
    /// the ranks beyond the largest power of two.
    RecursiveDoubling,
    /// Bruck (allgather, alltoall): `ceil(log2 p)` rounds for any `p`.
    Bruck,
    /// Pairwise exchange (alltoall, reduce-scatter): `p - 1` rounds.
    Pairwise,
    /// Rabenseifner allreduce: recursive-halving reduce-scatter plus
    /// recursive-doubling allgather, folding non-power-of-two ranks.
    Rabenseifner,
}

impl Algorithm {
    /// Every algorithm, `Auto` first.
    pub const ALL: [Algorithm; 9] = [
        Algorithm::Auto,
        Algorithm::Dissemination,
        Algorithm::Binomial,
        Algorithm::ScatterAllgather,
        Algorithm::Ring,
        Algorithm::RecursiveDoubling,
        Algorithm::Bruck,
        Algorithm::Pairwise,
        Algorithm::Rabenseifner,
    ];

    /// Lower-case name (`"rabenseifner"`, `"recursive-doubling"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Auto => "auto",
            Algorithm::Dissemination => "dissemination",
            Algorithm::Binomial => "binomial",
            Algorithm::ScatterAllgather => "scatter-allgather",
            Algorithm::Ring => "ring",
            Algorithm::RecursiveDoubling => "recursive-doubling",
            Algorithm::Bruck => "bruck",
            Algorithm::Pairwise => "pairwise",
            Algorithm::Rabenseifner => "rabenseifner",
        }
    }
}

crate::display_by_name!(Algorithm);

from_str_by_name!(
    Algorithm,
    "algorithm",
    ('_', "-"),
    [
        ("rd", "recursive-doubling"),
        ("vandegeijn", "scatter-allgather"),
        ("van-de-geijn", "scatter-allgather"),
    ]
);

/// A name that both [`CollectiveKind`] and [`Algorithm`] read back: one of
/// `all` by its `name`, in any case, with `sep.0` read as `sep.1` and the
/// `aliases` read as the names they stand for; else an error naming `what`.
fn by_name<T: Copy>(
    s: &str,
    sep: (char, &str),
    aliases: &[(&str, &'static str)],
    all: &[T],
    name: fn(T) -> &'static str,
    what: &str,
) -> Result<T, String> {
    let s = s.to_ascii_lowercase().replace(sep.0, sep.1);
    let s = aliases
        .iter()
        .find(|(alias, _)| *alias == s)
        .map_or(s.as_str(), |(_, name)| name);
    all.iter()
        .copied()
        .find(|&k| name(k) == s)
        .ok_or_else(|| format!("unknown {what} {}", quoted_cut(s)))
}

/// `s` quoted, cut after 40 characters with the count of the others, as
/// `hpc_env::shown` quotes a value (this crate depends on no other of the
/// workspace): a name of 100,000 characters was quoted whole.
fn quoted_cut(s: &str) -> String {
    let mut chars = s.chars();
    let head: String = chars.by_ref().take(40).collect();
    match chars.count() {
        0 => format!("{head:?}"),
        more => format!("{head:?}... ({more} more characters)"),
    }
}
