//! Collective communication algorithms as data.
//!
//! This crate is the pure, I/O-free core of hpc-rs collectives: it depends
//! on no runtime, transport or operating-system crate, so GPU code and tools
//! use it as freely as the engines of `hpc-comm` that run its schedules over
//! shared memory and the network. Every
//! collective algorithm is a function
//! `(rank, size, counts, options) -> Schedule` that returns a [`Schedule`]:
//! a list of [`Round`]s of [`Step`]s (`Send`, `Recv`, `Copy`, `Reduce`)
//! over byte [`Region`]s of the user's send buffer, receive buffer and a
//! scratch buffer whose size the schedule states. Nothing here touches a
//! network.
//!
//! # Why schedules as data
//!
//! As in libNBC and UCC, separating *what* a collective does from *how* it
//! is executed means:
//!
//! * one engine runs every algorithm: it posts the steps of a round,
//!   waits for them, moves on. It can be a blocking loop, a progress
//!   thread driving many non-blocking collectives at once, or a separate
//!   proxy process — schedules are plain `serde`-serialisable data with no
//!   closures or references;
//! * schedules can be built once and cached per communicator and size,
//!   printed ([`Display`](std::fmt::Display)) for debugging and
//!   documentation, and verified without a cluster: the [`sim`] executor
//!   runs all ranks in memory, models `(src, dst, tag)` in-order matching
//!   with rendezvous semantics, and detects deadlocks and size mismatches.
//!   The test suite runs every algorithm for every rank count 1..=64;
//! * reduction kernels ([`apply_reduce`]) are separate from the movement
//!   of data, so the same schedule serves host and (later) device memory.
//!
//! # Layers
//!
//! * [`Collective`] — what the user asked for (kind, counts, element type,
//!   operation, root), with validation ([`CollectiveError`]), the
//!   algorithm-selection rule ([`Collective::select`], table in
//!   [`collective`]) and [`Collective::schedule`];
//! * [`algo`] — one pure function per algorithm;
//! * [`schedule`] — the data types and the engine contract;
//! * [`interp`] — the schedule interpreter, without I/O: a state machine
//!   fed events that returns actions, driven by the simulator and by every
//!   engine;
//! * [`op`] — element types, operations and the reduction kernel;
//! * [`sim`] — the verifying executor.
//!
//! # Floating-point determinism
//!
//! The order in which partial results are combined is fixed by the
//! schedule, so for a given collective, rank count, counts and algorithm
//! the result is bit-for-bit reproducible, and all ranks of an allreduce
//! get identical bits. Changing the rank count or algorithm can change the
//! last bits of floating-point sums. All operations, custom ones included,
//! are assumed associative and commutative.
//!
//! # Example
//!
//! ```
//! use hpc_collectives::{Algorithm, Collective, DataType, Options, ReduceOp};
//!
//! let coll = Collective::Allreduce { count: 1024, dtype: DataType::F32, op: ReduceOp::Sum };
//! let opts = Options::with_algorithm(Algorithm::Rabenseifner);
//! let s = coll.schedule(3, 6, &opts).unwrap();
//! assert_eq!(s.algorithm, Algorithm::Rabenseifner);
//! assert!(s.scratch_bytes >= 4096);
//! println!("{s}"); // rounds, peers, bytes
//! ```

/// `Display` for types whose text is their `name()` (a `&'static str`): one
/// impl for the names of collectives, algorithms, data types and operations,
/// here and in the crates that name their own (`hpc-gpu`).
///
/// ```
/// struct Op;
/// impl Op {
///     fn name(&self) -> &'static str {
///         "sum"
///     }
/// }
/// hpc_collectives::display_by_name!(Op);
/// assert_eq!(Op.to_string(), "sum");
/// ```
#[macro_export]
macro_rules! display_by_name {
    ($($t:ty),+ $(,)?) => {
        $(
            impl ::core::fmt::Display for $t {
                fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                    f.write_str(self.name())
                }
            }
        )+
    };
}

pub mod algo;
pub mod collective;
pub mod interp;
mod kind;
pub mod op;
pub mod schedule;
pub mod sim;

pub use collective::{
    Algorithm, Collective, CollectiveError, CollectiveKind, Options, Tuning, MAX_RANKS,
};
pub use op::{apply_reduce, CustomFn, CustomOps, DataType, ReduceError, ReduceOp};
pub use schedule::{own_copy, BufferId, Region, Round, Schedule, Step};
