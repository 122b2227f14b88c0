//! # hpc-rs: the facade of the hpc-rs SDK
//!
//! Add this one crate and call [`init`]: it joins the job (however it was launched:
//! `./app`, `hpc run -n N`, `mpirun`, `srun --mpi=pmix`) and returns a [`Context`]
//! with the world, the machine's topology, this rank's placement, and the environment
//! it runs in.
//!
//! ```
//! let ctx = hpc_rs::init()?;
//! println!("rank {} of {}", ctx.world.rank(), ctx.world.size());
//! # #[cfg(feature = "topology")]
//! if let Some(p) = &ctx.placement {
//!     println!("my cores: {:?}", p.compute_cores);
//! }
//! # Ok::<(), hpc_rs::Error>(())
//! ```
//!
//! ```toml
//! [dependencies]
//! hpc-rs = "0.1"                                  # code says hpc_rs::init()
//! # hpc-rs = { version = "0.1", features = ["mpi"] }   # mpirun / srun --mpi=pmix
//! ```
//!
//! ## The name
//!
//! The crate is `hpc-rs`, the project's own name, and code calls it `hpc_rs`. The
//! shorter `hpc` belongs to an unrelated crate on crates.io, so a dependency line
//! `hpc = "0.1"` would fetch that one. `hpc-sdk` was free as well but reads as NVIDIA's
//! "HPC SDK", the compiler suite (`nvhpc`) that many clusters have as a module, which
//! is exactly where this crate is used. No dependency rename is needed or suggested:
//! the name in `Cargo.toml`, in `use` lines, in error messages and on docs.rs is the
//! same. The other crates of the family are `hpc-*` (`hpc-runtime`, `hpc-topology`,
//! ...), the launcher is the `hpc` command of `hpc-cli`.
//!
//! ## Platform and build prerequisites
//!
//! Linux only (built and tested on x86_64): the runtime, the transport and the launcher use
//! Linux interfaces (`/proc`, memfd, `process_vm_readv`, `prctl`, futexes). Rust 1.85
//! or newer. What each feature needs at build time is in the table below; the default
//! build needs a C toolchain, `pkg-config` and hwloc 2.0 or newer with its headers
//! (`libhwloc-dev` and `libudev-dev` on Debian/Ubuntu, `hwloc-devel` on RHEL), or the
//! `vendored-hwloc` feature.
//!
//! ## Features
//!
//! | feature | default | re-exports | needs at build time |
//! |---|---|---|---|
//! | `topology` | yes | [`topology`] (`hpc-topology`) | hwloc >= 2.0 (`libhwloc-dev`, `libudev-dev`), `pkg-config` |
//! | `vendored-hwloc` | no | builds hwloc from source into `topology` instead of using the system's | a C compiler, `make`, autoconf, automake, libtool; the build downloads hwloc's source from open-mpi.org |
//! | `container` | yes | [`container`] (`hpc-container`) | nothing |
//! | `rdma` | no | `rdma` (`hpc-rdma`): shm and tcp transport | nothing |
//! | `verbs` | no | InfiniBand verbs in `rdma` | `libibverbs-dev`, `cmake` |
//! | `collectives` | no | `collectives` (`hpc-collectives`) | nothing |
//! | `gpu` | no | `gpu` (`hpc-gpu`): collectives on CUDA buffers | nothing (CUDA is loaded at run time) |
//! | `mpi` | no | MPI bootstrap in [`runtime`] | an MPI-3.1 library with `mpicc` (Open MPI >= 4.0, MPICH >= 3.3), `libclang` |
//!
//! [`runtime`] (`hpc-runtime`) is always there.

pub use hpc_runtime as runtime;
pub use hpc_runtime::{Error, World};

#[cfg(feature = "collectives")]
pub use hpc_collectives as collectives;
#[cfg(feature = "container")]
pub use hpc_container as container;
#[cfg(feature = "gpu")]
pub use hpc_gpu as gpu;
#[cfg(feature = "rdma")]
pub use hpc_rdma as rdma;
#[cfg(feature = "topology")]
pub use hpc_topology as topology;

/// Everything a rank needs to know about where it runs.
#[derive(Debug)]
#[non_exhaustive]
pub struct Context {
    /// All ranks of the job.
    pub world: World,
    /// This machine's hardware topology (`None` if hwloc could not load it; the reason
    /// is logged).
    #[cfg(feature = "topology")]
    pub topology: Option<hpc_topology::Topology>,
    /// This rank's cores, progress cores, home NUMA node, nearest GPU and NIC, planned
    /// for the ranks of this node (see [`Options`]).
    #[cfg(feature = "topology")]
    pub placement: Option<hpc_topology::Placement>,
    /// The container runtime, devices, launcher and limits this rank sees.
    #[cfg(feature = "container")]
    pub environment: hpc_container::Environment,
}

/// What [`init_with`] plans for.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Compute threads per rank; default: `HPC_THREADS`, else the allowed cores
    /// divided among the ranks of this node.
    pub threads: Option<usize>,
    /// Progress cores reserved per rank (for offloaded collectives).
    pub progress: usize,
}

/// Joins the job and gathers the context, with default [`Options`]. Call once per
/// process.
pub fn init() -> Result<Context, Error> {
    init_with(Options::default())
}

/// Like [`init`] with explicit options.
pub fn init_with(options: Options) -> Result<Context, Error> {
    let world = World::init()?;
    #[cfg(feature = "topology")]
    let (topology, placement) = plan(&world, &options);
    #[cfg(not(feature = "topology"))]
    let _ = options;
    Ok(Context {
        #[cfg(feature = "container")]
        environment: hpc_container::Environment::detect(),
        world,
        #[cfg(feature = "topology")]
        topology,
        #[cfg(feature = "topology")]
        placement,
    })
}

/// Where this rank's placement is planned: `(slot, slots)` among the ranks that share
/// its allowed CPUs.
///
/// If the ranks of a node all see the same allowed CPUs (a plain `hpc run`, a
/// container's cpuset), they divide them: `(local_rank, local_size)`. If a launcher
/// bound each rank to its own CPUs (`hpc run --bind`, `srun --cpu-bind`, `mpirun`'s
/// default core binding), each plans alone inside its own: `(0, 1)`. Collective: every
/// rank must call it.
#[cfg(feature = "topology")]
pub fn placement_slot(
    world: &World,
    topo: &hpc_topology::Topology,
) -> Result<(usize, usize), Error> {
    let mine = topo.allowed.to_string();
    let all = world.allgather(mine.as_bytes())?;
    let node = world.node();
    let shared = (0..world.size())
        .filter(|&r| world.node_of(r) == node)
        .all(|r| all[r] == mine.as_bytes());
    Ok(if shared {
        (world.local_rank(), world.local_size())
    } else {
        (0, 1)
    })
}

#[cfg(feature = "topology")]
fn plan(
    world: &World,
    options: &Options,
) -> (
    Option<hpc_topology::Topology>,
    Option<hpc_topology::Placement>,
) {
    use hpc_topology::{plan_for_rank, Policy, ProgressScope, Topology};
    let topo = match Topology::this_machine() {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "cannot load the hardware topology; no placement");
            return (None, None);
        }
    };
    let (local_rank, local_size) = match placement_slot(world, &topo) {
        Ok(slot) => slot,
        Err(e) => {
            tracing::warn!(error = %e, "cannot compare bindings with the other ranks");
            (world.local_rank(), world.local_size())
        }
    };
    let asked = options
        .threads
        .or_else(|| std::env::var(hpc_runtime::env::THREADS).ok()?.parse().ok());
    if let Some(t) = asked.filter(|&t| t > 1) {
        // Launchers bind on their own (Open MPI: one core per rank under mpirun);
        // say so when that leaves the requested threads no room.
        let _ = hpc_topology::check_binding(&topo, t);
    }
    let threads = asked
        .unwrap_or_else(|| (topo.allowed_cores(&topo.allowed).count() / local_size.max(1)).max(1));
    let placement = match plan_for_rank(
        &topo,
        local_rank,
        local_size,
        threads,
        options.progress,
        ProgressScope::PerRank,
        Policy::Compact,
    ) {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::warn!(error = %e, "cannot plan this rank's placement");
            None
        }
    };
    (Some(topo), placement)
}
