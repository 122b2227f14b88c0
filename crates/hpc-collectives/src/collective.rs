//! What the user asked for ([`Collective`]), validation, algorithm
//! selection and schedule construction.
//!
//! # Algorithm selection
//!
//! With [`Algorithm::Auto`] (the default) the algorithm is chosen from the
//! message size and the number of ranks `p`, following the MPICH defaults.
//! `bytes` is the payload of one rank's contribution (for allgather the
//! whole gathered vector, as MPICH measures it). The thresholds are fields
//! of [`Tuning`] and can be changed.
//!
//! | collective | rule (defaults) |
//! |---|---|
//! | barrier | dissemination |
//! | broadcast | binomial if `bytes < 12 KiB` or `p < 8`; else scatter-allgather (van de Geijn) |
//! | gather, scatter, reduce | binomial |
//! | allgather, allgatherv (`bytes` = total gathered) | recursive doubling if `p` is a power of two and `bytes < 512 KiB`; Bruck if `p` is not a power of two and `bytes < 80 KiB`; else ring |
//! | alltoall | Bruck if the per-peer block is `<= 256 B` and `p >= 8`; else pairwise |
//! | alltoallv | pairwise |
//! | allreduce | recursive doubling if `bytes <= 2 KiB` or `count < pof2(p)`; ring if `bytes >= 16 MiB`; else Rabenseifner |
//! | reduce-scatter (block and v; `bytes` = whole input) | ring if `bytes < 512 KiB`; else pairwise |
//!
//! An explicit [`Options::algorithm`] overrides the rule; asking for an
//! algorithm the collective does not implement is an
//! [`CollectiveError::UnsupportedAlgorithm`] error.

use serde::{Deserialize, Serialize};

use crate::algo;
pub use crate::kind::{Algorithm, CollectiveKind};
use crate::op::{DataType, ReduceOp};
use crate::schedule::{BufferId, Schedule};

/// Thresholds of the automatic algorithm selection (bytes unless noted).
/// The defaults are MPICH's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tuning {
    /// Broadcast: binomial below this size.
    pub bcast_short: usize,
    /// Broadcast: binomial below this many ranks.
    pub bcast_min_ranks: usize,
    /// Allgather, power-of-two ranks: recursive doubling below this total.
    pub allgather_long: usize,
    /// Allgather, other rank counts: Bruck below this total.
    pub allgather_short: usize,
    /// Alltoall: Bruck up to this block size ...
    pub alltoall_short: usize,
    /// ... and from this many ranks on.
    pub alltoall_min_ranks: usize,
    /// Allreduce: recursive doubling up to this size.
    pub allreduce_short: usize,
    /// Allreduce: ring from this size on.
    pub allreduce_ring: usize,
    /// Reduce-scatter: pairwise from this total size on.
    pub reduce_scatter_long: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            bcast_short: 12 * 1024,
            bcast_min_ranks: 8,
            allgather_long: 512 * 1024,
            allgather_short: 80 * 1024,
            alltoall_short: 256,
            alltoall_min_ranks: 8,
            allreduce_short: 2048,
            allreduce_ring: 16 * 1024 * 1024,
            reduce_scatter_long: 512 * 1024,
        }
    }
}

/// Options for building a schedule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Options {
    /// The algorithm; [`Algorithm::Auto`] applies [`Options::tuning`].
    pub algorithm: Algorithm,
    /// Selection thresholds.
    pub tuning: Tuning,
}

impl Options {
    /// Options forcing `algorithm`.
    pub fn with_algorithm(algorithm: Algorithm) -> Self {
        Self {
            algorithm,
            ..Self::default()
        }
    }
}

/// The most ranks a communicator of a schedule may have (2^24, beyond the
/// largest machines' core counts). A schedule holds a step or a count per
/// rank for some collectives (alltoall, allgather), so a size beyond any
/// machine, such as a rank count computed wrongly, would be an allocation or
/// a loop sized by it; it is refused by [`Collective::validate`].
pub const MAX_RANKS: usize = 1 << 24;

/// `size` is a communicator size a schedule can be built for: 1 to
/// [`MAX_RANKS`].
fn check_size(size: usize) -> Result<(), CollectiveError> {
    if size == 0 {
        return Err(CollectiveError::EmptyCommunicator);
    }
    if size > MAX_RANKS {
        return Err(CollectiveError::TooManyRanks {
            size,
            max: MAX_RANKS,
        });
    }
    Ok(())
}

/// Invalid collective arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CollectiveError {
    /// The communicator has no ranks.
    #[error("communicator size must be at least 1")]
    EmptyCommunicator,
    /// `rank >= size`.
    #[error("rank {rank} out of range for {size} ranks")]
    RankOutOfRange {
        /// The rank.
        rank: usize,
        /// Number of ranks.
        size: usize,
    },
    /// `root >= size`.
    #[error("root {root} out of range for {size} ranks")]
    RootOutOfRange {
        /// The root.
        root: usize,
        /// Number of ranks.
        size: usize,
    },
    /// A per-rank count vector has the wrong length (one entry per rank is
    /// expected), or an alltoallv's own block differs between its send and
    /// receive counts.
    #[error("{what}: expected {expected}, got {got}")]
    CountMismatch {
        /// Which argument.
        what: &'static str,
        /// Expected value.
        expected: usize,
        /// Actual value.
        got: usize,
    },
    /// A user buffer is smaller than the collective needs.
    #[error("{buffer:?} buffer too small: need {needed} bytes, got {got}")]
    BufferTooSmall {
        /// Which buffer.
        buffer: BufferId,
        /// Bytes needed.
        needed: usize,
        /// Bytes provided.
        got: usize,
    },
    /// The reduction is not defined for the element type.
    #[error("operation {op} is not supported for {dtype}")]
    UnsupportedOp {
        /// Operation.
        op: ReduceOp,
        /// Element type.
        dtype: DataType,
    },
    /// The requested algorithm is not implemented for this collective.
    #[error("algorithm {algorithm} is not available for {kind}")]
    UnsupportedAlgorithm {
        /// Requested algorithm.
        algorithm: Algorithm,
        /// The collective.
        kind: CollectiveKind,
    },
    /// More ranks than [`MAX_RANKS`]: no machine has that many, and the
    /// schedules of some collectives hold a step or a count per rank.
    #[error("communicator size {size} is more than the {max} ranks a schedule is built for")]
    TooManyRanks {
        /// The size asked for.
        size: usize,
        /// [`MAX_RANKS`].
        max: usize,
    },
    /// The counts describe more bytes than any buffer can hold (`isize::MAX`):
    /// no process could pass such buffers, and the byte arithmetic of the
    /// schedules would overflow.
    #[error("{what} describe more than isize::MAX bytes")]
    TooLarge {
        /// Which counts.
        what: &'static str,
    },
}

/// A collective operation as the user describes it. Counts are in
/// elements of `dtype` (per rank or per peer as documented per variant);
/// buffers are packed (blocks are contiguous, in rank order).
///
/// ```
/// use hpc_collectives::{Collective, DataType, Options, ReduceOp, sim};
///
/// let coll = Collective::Allreduce { count: 5, dtype: DataType::I32, op: ReduceOp::Sum };
/// let size = 3;
/// let schedules: Vec<_> = (0..size)
///     .map(|rank| coll.schedule(rank, size, &Options::default()).unwrap())
///     .collect();
/// let inputs: Vec<_> = (0..size)
///     .map(|r| sim::RankBuffers {
///         send: (0..5).flat_map(|i| (10 * r as i32 + i).to_ne_bytes()).collect(),
///         recv: vec![0; 20],
///     })
///     .collect();
/// let out = sim::run(&schedules, inputs).unwrap();
/// let first = i32::from_ne_bytes(out[2][0..4].try_into().unwrap());
/// assert_eq!(first, 0 + 10 + 20);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Collective {
    /// Synchronise all ranks. No buffers.
    Barrier,
    /// The root's receive buffer (`count` elements) is copied to every
    /// rank's receive buffer (MPI's single buffer is the receive buffer).
    Broadcast {
        /// Source rank.
        root: usize,
        /// Elements.
        count: usize,
        /// Element type.
        dtype: DataType,
    },
    /// Every rank's send buffer (`count` elements) lands in block `rank` of
    /// the root's receive buffer (`size * count` elements).
    Gather {
        /// Destination rank.
        root: usize,
        /// Elements per rank.
        count: usize,
        /// Element type.
        dtype: DataType,
    },
    /// Block `rank` of the root's send buffer (`size * count` elements) lands
    /// in rank `rank`'s receive buffer (`count` elements).
    Scatter {
        /// Source rank.
        root: usize,
        /// Elements per rank.
        count: usize,
        /// Element type.
        dtype: DataType,
    },
    /// Every rank's send buffer (`count` elements) lands in block `rank` of
    /// every receive buffer (`size * count` elements).
    Allgather {
        /// Elements per rank.
        count: usize,
        /// Element type.
        dtype: DataType,
    },
    /// Like allgather with `counts[r]` elements from rank `r`, packed in the
    /// receive buffer at the prefix sums of `counts`.
    Allgatherv {
        /// Elements contributed by each rank.
        counts: Vec<usize>,
        /// Element type.
        dtype: DataType,
    },
    /// Block `j` of rank `i`'s send buffer lands in block `i` of rank `j`'s
    /// receive buffer; both buffers hold `size * count` elements.
    Alltoall {
        /// Elements per pair.
        count: usize,
        /// Element type.
        dtype: DataType,
    },
    /// Like alltoall with this rank sending `send_counts[j]` elements to
    /// rank `j` and receiving `recv_counts[i]` from rank `i` (packed at the
    /// prefix sums). `recv_counts[i]` must equal rank `i`'s
    /// `send_counts[rank]`, which only a run can check (the simulator
    /// reports a size mismatch).
    Alltoallv {
        /// Elements this rank sends to each rank.
        send_counts: Vec<usize>,
        /// Elements this rank receives from each rank.
        recv_counts: Vec<usize>,
        /// Element type.
        dtype: DataType,
    },
    /// Element-wise reduction of all send buffers (`count` elements) into
    /// the root's receive buffer.
    Reduce {
        /// Destination rank.
        root: usize,
        /// Elements.
        count: usize,
        /// Element type.
        dtype: DataType,
        /// Operation.
        op: ReduceOp,
    },
    /// Element-wise reduction of all send buffers (`count` elements) into
    /// every receive buffer.
    Allreduce {
        /// Elements.
        count: usize,
        /// Element type.
        dtype: DataType,
        /// Operation.
        op: ReduceOp,
    },
    /// Reduction of all send buffers (`size * count` elements); block `rank`
    /// of the result lands in rank `rank`'s receive buffer (`count`).
    ReduceScatterBlock {
        /// Elements per rank.
        count: usize,
        /// Element type.
        dtype: DataType,
        /// Operation.
        op: ReduceOp,
    },
    /// Like reduce-scatter-block with `counts[r]` elements for rank `r`
    /// (the send buffer holds `sum(counts)` elements).
    ReduceScatter {
        /// Elements of the result for each rank.
        counts: Vec<usize>,
        /// Element type.
        dtype: DataType,
        /// Operation.
        op: ReduceOp,
    },
}

fn bytes(v: &[usize], dtype: DataType) -> Vec<usize> {
    v.iter().map(|c| c * dtype.size()).collect()
}

impl Collective {
    /// The kind of this collective.
    pub fn kind(&self) -> CollectiveKind {
        match self {
            Collective::Barrier => CollectiveKind::Barrier,
            Collective::Broadcast { .. } => CollectiveKind::Broadcast,
            Collective::Gather { .. } => CollectiveKind::Gather,
            Collective::Scatter { .. } => CollectiveKind::Scatter,
            Collective::Allgather { .. } => CollectiveKind::Allgather,
            Collective::Allgatherv { .. } => CollectiveKind::Allgatherv,
            Collective::Alltoall { .. } => CollectiveKind::Alltoall,
            Collective::Alltoallv { .. } => CollectiveKind::Alltoallv,
            Collective::Reduce { .. } => CollectiveKind::Reduce,
            Collective::Allreduce { .. } => CollectiveKind::Allreduce,
            Collective::ReduceScatterBlock { .. } => CollectiveKind::ReduceScatterBlock,
            Collective::ReduceScatter { .. } => CollectiveKind::ReduceScatter,
        }
    }

    /// The root, for rooted collectives.
    pub fn root(&self) -> Option<usize> {
        match self {
            Collective::Broadcast { root, .. }
            | Collective::Gather { root, .. }
            | Collective::Scatter { root, .. }
            | Collective::Reduce { root, .. } => Some(*root),
            _ => None,
        }
    }

    /// The element type (`None` for a barrier).
    pub fn dtype(&self) -> Option<DataType> {
        match self {
            Collective::Barrier => None,
            Collective::Broadcast { dtype, .. }
            | Collective::Gather { dtype, .. }
            | Collective::Scatter { dtype, .. }
            | Collective::Allgather { dtype, .. }
            | Collective::Allgatherv { dtype, .. }
            | Collective::Alltoall { dtype, .. }
            | Collective::Alltoallv { dtype, .. }
            | Collective::Reduce { dtype, .. }
            | Collective::Allreduce { dtype, .. }
            | Collective::ReduceScatterBlock { dtype, .. }
            | Collective::ReduceScatter { dtype, .. } => Some(*dtype),
        }
    }

    /// The reduction, for reducing collectives.
    pub fn op(&self) -> Option<ReduceOp> {
        match self {
            Collective::Reduce { op, .. }
            | Collective::Allreduce { op, .. }
            | Collective::ReduceScatterBlock { op, .. }
            | Collective::ReduceScatter { op, .. } => Some(*op),
            _ => None,
        }
    }

    /// Checks the arguments against a communicator of `size` ranks: size 1 to
    /// [`MAX_RANKS`], root in range, count vectors of length `size`, operation
    /// defined for the type.
    pub fn validate(&self, size: usize) -> Result<(), CollectiveError> {
        check_size(size)?;
        if let Some(root) = self.root() {
            if root >= size {
                return Err(CollectiveError::RootOutOfRange { root, size });
            }
        }
        let check_len = |what, v: &Vec<usize>| {
            if v.len() == size {
                Ok(())
            } else {
                Err(CollectiveError::CountMismatch {
                    what,
                    expected: size,
                    got: v.len(),
                })
            }
        };
        match self {
            Collective::Allgatherv { counts, .. } => check_len("allgatherv counts length", counts)?,
            Collective::Alltoallv {
                send_counts,
                recv_counts,
                ..
            } => {
                check_len("alltoallv send_counts length", send_counts)?;
                check_len("alltoallv recv_counts length", recv_counts)?;
            }
            Collective::ReduceScatter { counts, .. } => {
                check_len("reduce_scatter counts length", counts)?
            }
            _ => {}
        }
        if let (Some(op), Some(dtype)) = (self.op(), self.dtype()) {
            if !op.supports(dtype) {
                return Err(CollectiveError::UnsupportedOp { op, dtype });
            }
        }
        self.check_total(size)
    }

    /// Every byte count of the collective (a whole gathered or scattered vector,
    /// the sum of a v-variant's counts) fits in `isize::MAX`, so that buffer
    /// sizes and the schedules' offsets are computed without overflow.
    fn check_total(&self, size: usize) -> Result<(), CollectiveError> {
        let e = self.dtype().map_or(1, DataType::size);
        let sum = |v: &[usize]| v.iter().try_fold(0usize, |a, &c| a.checked_add(c));
        let fits = |elems: Option<usize>, what| match elems.and_then(|n| n.checked_mul(e)) {
            Some(b) if b <= isize::MAX as usize => Ok(()),
            _ => Err(CollectiveError::TooLarge { what }),
        };
        match self {
            Collective::Barrier => Ok(()),
            Collective::Broadcast { count, .. }
            | Collective::Gather { count, .. }
            | Collective::Scatter { count, .. }
            | Collective::Allgather { count, .. }
            | Collective::Alltoall { count, .. }
            | Collective::Reduce { count, .. }
            | Collective::Allreduce { count, .. }
            | Collective::ReduceScatterBlock { count, .. } => {
                fits(count.checked_mul(size), "count times ranks")
            }
            Collective::Allgatherv { counts, .. } | Collective::ReduceScatter { counts, .. } => {
                fits(sum(counts), "the counts")
            }
            Collective::Alltoallv {
                send_counts,
                recv_counts,
                ..
            } => {
                fits(sum(send_counts), "the send counts")?;
                fits(sum(recv_counts), "the receive counts")
            }
        }
    }

    /// The size in bytes of the per-rank block of this collective (what OSU
    /// calls the message size: per peer for alltoall, the whole vector for
    /// broadcast and the reductions, the largest block of the v-variants),
    /// computed only from what every rank passes alike; `None` for alltoallv,
    /// where each rank knows only its own counts, and for a block of more
    /// bytes than a `usize` holds (a collective [`validate`](Self::validate)
    /// refuses).
    pub fn block_bytes(&self) -> Option<usize> {
        let e = self.dtype().map_or(0, DataType::size);
        let elems = match self {
            Collective::Barrier => 0,
            Collective::Broadcast { count, .. }
            | Collective::Gather { count, .. }
            | Collective::Scatter { count, .. }
            | Collective::Allgather { count, .. }
            | Collective::Alltoall { count, .. }
            | Collective::Reduce { count, .. }
            | Collective::Allreduce { count, .. }
            | Collective::ReduceScatterBlock { count, .. } => *count,
            Collective::Allgatherv { counts, .. } | Collective::ReduceScatter { counts, .. } => {
                counts.iter().copied().max().unwrap_or(0)
            }
            Collective::Alltoallv { .. } => return None,
        };
        elems.checked_mul(e)
    }

    /// The (send, receive) buffer sizes in bytes that `rank` must provide.
    /// Call after [`validate`](Self::validate): for a collective it refuses, a
    /// size beyond `usize` is `usize::MAX` (no buffer holds it) and the counts of
    /// a rank the v-variants do not list are 0, where a count of `usize::MAX`
    /// overflowed and a rank past the counts indexed out of bounds (panics).
    pub fn buffer_bytes(&self, rank: usize, size: usize) -> (usize, usize) {
        let e = self.dtype().map_or(0, DataType::size);
        // `a * b * ...` in bytes, `usize::MAX` past `usize`.
        let times = |xs: &[usize]| xs.iter().fold(e, |acc, &x| acc.saturating_mul(x));
        let sum = |c: &[usize]| c.iter().fold(0usize, |a, &x| a.saturating_add(x));
        let at = |c: &[usize]| c.get(rank).copied().unwrap_or(0);
        match self {
            Collective::Barrier => (0, 0),
            Collective::Broadcast { count, .. } => (0, times(&[*count])),
            Collective::Gather { root, count, .. } => (
                times(&[*count]),
                if rank == *root {
                    times(&[size, *count])
                } else {
                    0
                },
            ),
            Collective::Scatter { root, count, .. } => (
                if rank == *root {
                    times(&[size, *count])
                } else {
                    0
                },
                times(&[*count]),
            ),
            Collective::Allgather { count, .. } => (times(&[*count]), times(&[size, *count])),
            Collective::Allgatherv { counts, .. } => (times(&[at(counts)]), times(&[sum(counts)])),
            Collective::Alltoall { count, .. } => (times(&[size, *count]), times(&[size, *count])),
            Collective::Alltoallv {
                send_counts,
                recv_counts,
                ..
            } => (times(&[sum(send_counts)]), times(&[sum(recv_counts)])),
            Collective::Reduce { root, count, .. } => (
                times(&[*count]),
                if rank == *root { times(&[*count]) } else { 0 },
            ),
            Collective::Allreduce { count, .. } => (times(&[*count]), times(&[*count])),
            Collective::ReduceScatterBlock { count, .. } => {
                (times(&[size, *count]), times(&[*count]))
            }
            Collective::ReduceScatter { counts, .. } => {
                (times(&[sum(counts)]), times(&[at(counts)]))
            }
        }
    }

    /// Validates and checks that the user's buffers (of `send_len` and
    /// `recv_len` bytes) are large enough for `rank`.
    pub fn check_buffers(
        &self,
        rank: usize,
        size: usize,
        send_len: usize,
        recv_len: usize,
    ) -> Result<(), CollectiveError> {
        self.validate(size)?;
        if rank >= size {
            return Err(CollectiveError::RankOutOfRange { rank, size });
        }
        let (s, r) = self.buffer_bytes(rank, size);
        if send_len < s {
            return Err(CollectiveError::BufferTooSmall {
                buffer: BufferId::Send,
                needed: s,
                got: send_len,
            });
        }
        if recv_len < r {
            return Err(CollectiveError::BufferTooSmall {
                buffer: BufferId::Recv,
                needed: r,
                got: recv_len,
            });
        }
        Ok(())
    }

    /// The algorithm [`schedule`](Self::schedule) uses for `size` ranks:
    /// `options.algorithm` if explicit (checked against the kind), else the
    /// rule in the [module docs](self). The choice depends only on
    /// arguments that are identical on all ranks.
    pub fn select(&self, size: usize, options: &Options) -> Result<Algorithm, CollectiveError> {
        check_size(size)?;
        let kind = self.kind();
        if options.algorithm != Algorithm::Auto {
            return if kind.algorithms().contains(&options.algorithm) {
                Ok(options.algorithm)
            } else {
                Err(CollectiveError::UnsupportedAlgorithm {
                    algorithm: options.algorithm,
                    kind,
                })
            };
        }
        let t = &options.tuning;
        let e = self.dtype().map_or(0, DataType::size);
        // Saturating: `select` is asked without `validate`, and counts of a
        // collective `validate` refuses overflowed (a panic in a debug build).
        let sum = |v: &[usize]| v.iter().fold(0usize, |a, &c| a.saturating_add(c));
        let pow2 = size.is_power_of_two();
        let allgather = |total: usize| {
            if pow2 && total < t.allgather_long {
                Algorithm::RecursiveDoubling
            } else if !pow2 && total < t.allgather_short {
                Algorithm::Bruck
            } else {
                Algorithm::Ring
            }
        };
        let reduce_scatter = |total: usize| {
            if total < t.reduce_scatter_long {
                Algorithm::Ring
            } else {
                Algorithm::Pairwise
            }
        };
        Ok(match self {
            Collective::Barrier => Algorithm::Dissemination,
            Collective::Broadcast { count, .. } => {
                if count.saturating_mul(e) < t.bcast_short || size < t.bcast_min_ranks {
                    Algorithm::Binomial
                } else {
                    Algorithm::ScatterAllgather
                }
            }
            Collective::Gather { .. } | Collective::Scatter { .. } | Collective::Reduce { .. } => {
                Algorithm::Binomial
            }
            Collective::Allgather { count, .. } => {
                allgather(size.saturating_mul(*count).saturating_mul(e))
            }
            Collective::Allgatherv { counts, .. } => allgather(sum(counts).saturating_mul(e)),
            Collective::Alltoall { count, .. } => {
                if count.saturating_mul(e) <= t.alltoall_short && size >= t.alltoall_min_ranks {
                    Algorithm::Bruck
                } else {
                    Algorithm::Pairwise
                }
            }
            Collective::Alltoallv { .. } => Algorithm::Pairwise,
            Collective::Allreduce { count, .. } => {
                let pof2 = 1usize << size.ilog2();
                if count.saturating_mul(e) <= t.allreduce_short || *count < pof2 {
                    Algorithm::RecursiveDoubling
                } else if count.saturating_mul(e) >= t.allreduce_ring {
                    Algorithm::Ring
                } else {
                    Algorithm::Rabenseifner
                }
            }
            Collective::ReduceScatterBlock { count, .. } => {
                reduce_scatter(size.saturating_mul(*count).saturating_mul(e))
            }
            Collective::ReduceScatter { counts, .. } => {
                reduce_scatter(sum(counts).saturating_mul(e))
            }
        })
    }

    /// Validates, selects the algorithm and builds `rank`'s schedule.
    ///
    /// Every rank must call this with the same collective, `size` and
    /// options (except for `Alltoallv`'s per-rank counts).
    pub fn schedule(
        &self,
        rank: usize,
        size: usize,
        options: &Options,
    ) -> Result<Schedule, CollectiveError> {
        self.validate(size)?;
        if rank >= size {
            return Err(CollectiveError::RankOutOfRange { rank, size });
        }
        if let Collective::Alltoallv {
            send_counts,
            recv_counts,
            ..
        } = self
        {
            if send_counts[rank] != recv_counts[rank] {
                return Err(CollectiveError::CountMismatch {
                    what: "alltoallv own block (recv_counts[rank] vs send_counts[rank])",
                    expected: send_counts[rank],
                    got: recv_counts[rank],
                });
            }
        }
        let algorithm = self.select(size, options)?;
        use Algorithm as A;
        let e = self.dtype().map_or(0, DataType::size);
        let sched = match self {
            Collective::Barrier => algo::barrier::dissemination(rank, size),
            Collective::Broadcast { root, count, .. } => match algorithm {
                A::Binomial => algo::bcast::binomial(rank, size, *root, count * e),
                _ => algo::bcast::scatter_allgather(rank, size, *root, count * e),
            },
            Collective::Gather { root, count, .. } => {
                algo::gather::binomial(rank, size, *root, count * e)
            }
            Collective::Scatter { root, count, .. } => {
                algo::scatter::binomial(rank, size, *root, count * e)
            }
            Collective::Allgather { count, .. } => {
                let blocks = vec![count * e; size];
                let mut s = algo::allgather::allgatherv(algorithm, rank, size, &blocks);
                s.kind = CollectiveKind::Allgather;
                s
            }
            Collective::Allgatherv { counts, dtype } => {
                algo::allgather::allgatherv(algorithm, rank, size, &bytes(counts, *dtype))
            }
            Collective::Alltoall { count, .. } => match algorithm {
                A::Bruck => algo::alltoall::bruck(rank, size, count * e),
                _ => algo::alltoall::pairwise(rank, size, count * e),
            },
            Collective::Alltoallv {
                send_counts,
                recv_counts,
                dtype,
            } => algo::alltoall::pairwise_v(
                rank,
                size,
                &bytes(send_counts, *dtype),
                &bytes(recv_counts, *dtype),
            ),
            Collective::Reduce {
                root,
                count,
                dtype,
                op,
            } => algo::reduce::binomial(rank, size, *root, *count, *dtype, *op),
            Collective::Allreduce { count, dtype, op } => match algorithm {
                A::RecursiveDoubling => {
                    algo::allreduce::recursive_doubling(rank, size, *count, *dtype, *op)
                }
                A::Rabenseifner => algo::allreduce::rabenseifner(rank, size, *count, *dtype, *op),
                _ => algo::allreduce::ring(rank, size, *count, *dtype, *op),
            },
            Collective::ReduceScatterBlock { count, dtype, op } => {
                let counts = vec![*count; size];
                let mut s = algo::reduce_scatter::reduce_scatter(
                    algorithm, rank, size, &counts, *dtype, *op,
                );
                s.kind = CollectiveKind::ReduceScatterBlock;
                s
            }
            Collective::ReduceScatter { counts, dtype, op } => {
                algo::reduce_scatter::reduce_scatter(algorithm, rank, size, counts, *dtype, *op)
            }
        };
        debug_assert_eq!(sched.algorithm, algorithm);
        // Its scratch blocks together past what a `usize` counts (see `Builder::alloc`).
        if sched.scratch_bytes == usize::MAX {
            return Err(CollectiveError::TooLarge {
                what: "the schedule's scratch",
            });
        }
        Ok(sched)
    }
}
