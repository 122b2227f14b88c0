//! # hpc-runtime: the world of an hpc-rs job
//!
//! A [`World`] tells a process its rank, the job's size, which ranks share its node, and
//! offers the few byte-level collectives (barrier, allgather, broadcast) that transports
//! need to exchange endpoints. It works the same whichever way the job was started:
//!
//! | started by | bootstrap | needs |
//! |---|---|---|
//! | `./app` | singleton (size 1) | nothing |
//! | `hpc run -n N -- ./app` | the built-in launcher's coordinator (TCP) | nothing |
//! | `mpirun`/`mpiexec` (Open MPI, MPICH Hydra), `srun --mpi=pmix` | MPI via the `mpi` crate | feature `mpi` |
//!
//! The choice is made from the environment (see [`env::detect`]) and reported by a
//! `tracing` event at `info` level.
//!
//! ## The `mpi` feature
//! Off by default: the `mpi` crate runs bindgen against an installed MPI at build time,
//! so it fails to build on a laptop without MPI. Enable it (`features = ["mpi"]`) on
//! machines with an MPI library and `libclang`. MPI is initialised with
//! `MPI_THREAD_MULTIPLE`; a lower grant is logged as a warning. A program built without
//! the feature but started by `mpirun` with several ranks fails with a clear
//! [`Error::Bootstrap`] instead of running as N unrelated singletons.
//!
//! ## Failures
//! Every blocking call is bounded by a timeout (`HPC_TIMEOUT` seconds, default 30).
//! Under `hpc run` the coordinator also hears when a rank's process exits or its
//! connection breaks, so a dead peer is reported at once as [`Error::PeerLost`] naming
//! the rank and the cause; a peer that never arrives gives [`Error::Timeout`] naming it.
//! Under MPI the collectives are built from non-blocking messages polled against the
//! deadline, so a hung peer gives a `Timeout` naming it too.
//!
//! ## Invariants
//! - All ranks call collectives in the same order; a mismatch is detected by the
//!   launcher and reported as [`Error::Mismatch`].
//! - Node ids are numbered by the lowest rank on each node; rank 0 is on node 0.

mod agree;
mod coordinator;
pub mod env;
mod error;
pub mod greet;
mod link;
#[cfg(feature = "mpi")]
mod mpi_backend;
mod node;
pub mod wire;
mod world;

pub use agree::LISTED_DIFFERENCES;
pub use coordinator::Coordinator;
pub use env::MpiLauncher;
pub use error::{listed_ranks, Error, Result, LISTED_RANKS};
pub use node::NodeMap;
pub use wire::MAX_JOB_RANKS;
pub use world::{hostname, Bootstrap, Config, Relay, World};

/// A random 64-bit value from the kernel (`getrandom`, which retries when
/// interrupted), for job secrets and unguessable names.
///
/// # Errors
///
/// [`Error::Io`] when the kernel gives no random bytes: a secret is never made up
/// from the clock or the pid instead.
pub fn random_u64() -> Result<u64> {
    random_u64_from(getrandom::fill)
}

/// [`random_u64`] with the bytes from `fill`.
fn random_u64_from(fill: impl FnOnce(&mut [u8]) -> Result<(), getrandom::Error>) -> Result<u64> {
    let mut buf = [0u8; 8];
    fill(&mut buf).map_err(|e| {
        let source = match e.raw_os_error() {
            Some(code) => std::io::Error::from_raw_os_error(code),
            None => std::io::Error::other(e.to_string()),
        };
        Error::io("reading random bytes from the kernel (getrandom)", source)
    })?;
    Ok(u64::from_le_bytes(buf))
}

#[cfg(test)]
mod random_tests {
    use super::*;

    /// Secrets come from the kernel: many in a row are all different (a clock read
    /// in quick succession would repeat or count up).
    #[test]
    fn secrets_differ() {
        let v: Vec<u64> = (0..64).map(|_| random_u64().unwrap()).collect();
        let mut d = v.clone();
        d.sort_unstable();
        d.dedup();
        assert_eq!(d.len(), v.len(), "{v:x?}");
    }

    /// When the kernel gives no random bytes the result is an error naming why,
    /// not a value made from the time.
    #[test]
    fn a_failed_read_is_an_error() {
        let e = random_u64_from(|_| Err(getrandom::Error::new_custom(7)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("random bytes"), "{e}");
    }
}
