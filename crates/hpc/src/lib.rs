//! # hpc: the facade of hpc-rs
//!
//! Add this one crate and call [`init`]: it joins the job (however it was launched:
//! `./app`, `hpc run -n N`, `mpirun`, `srun --mpi=pmix`) and returns a [`Context`].
//!
//! ```
//! let ctx = hpc::init()?;
//! println!("rank {} of {}", ctx.world.rank(), ctx.world.size());
//! # Ok::<(), hpc::Error>(())
//! ```
//!
//! The capability crates are re-exported as modules: [`runtime`] (always).

pub use hpc_runtime as runtime;
pub use hpc_runtime::{Error, World};

/// Everything a rank needs to know about where it runs.
#[derive(Debug)]
#[non_exhaustive]
pub struct Context {
    /// All ranks of the job.
    pub world: World,
}

/// Joins the job and gathers the context. Call once per process.
pub fn init() -> Result<Context, Error> {
    Ok(Context {
        world: World::init()?,
    })
}
