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

mod coordinator;
pub mod env;
mod error;
mod link;
#[cfg(feature = "mpi")]
mod mpi_backend;
mod node;
pub mod wire;
mod world;

pub use coordinator::Coordinator;
pub use env::MpiLauncher;
pub use error::{Error, Result};
pub use node::NodeMap;
pub use world::{hostname, Bootstrap, Config, Relay, World};

/// A random 64-bit value from the kernel, for job secrets and unguessable names.
pub fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`.
        let n =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n <= 0 {
            // getrandom cannot fail for 8 bytes on Linux >= 3.17 except EINTR; fall
            // back to time and pid mixing rather than panic.
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            return t ^ ((std::process::id() as u64) << 32) ^ 0x9e37_79b9_7f4a_7c15;
        }
        filled += n as usize;
    }
    u64::from_le_bytes(buf)
}
