//! # hpc-rs: the facade of the hpc-rs SDK
//!
//! Add this one crate and call [`init`] first thing in `main`: it joins the job
//! (however it was launched: `./app`, `hpc run -n N`, `mpirun`, `srun --mpi=pmix`) and
//! returns a [`Context`] with the world, the machine's topology, this rank's placement
//! (the process bound to it), and the environment it runs in. It also installs a log
//! subscriber (`HPC_LOG`, default `warn`) unless the application has one, so that the
//! SDK's warnings are seen, and serves as the collectives proxy when the `Proxy`
//! engine started the program as one. [`Context::comm`] gives a communicator whose
//! engine fits the placement.
//!
//! ```
//! let ctx = hpc_rs::init()?;
//! println!("rank {} of {}", ctx.world.rank(), ctx.world.size());
//! # #[cfg(feature = "topology")]
//! if let Some(p) = &ctx.placement {
//!     println!("my cores: {:?}", p.compute_cores);
//! }
//! # #[cfg(feature = "collectives")]
//! # {
//! let comm = ctx.comm()?;
//! let mut sum = [0u64];
//! comm.allreduce(&[ctx.world.rank() as u64 + 1], &mut sum, hpc_rs::comm::ReduceOp::Sum)?;
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
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
//! | `verbs` | no | InfiniBand verbs in `rdma` (not yet run on an HCA) | `libibverbs-dev`, `cmake` |
//! | `ofi` | no | libfabric in `rdma` (run on its `shm` and `tcp;ofi_rxm` providers only, no fabric provider yet) | libfabric's headers (`libfabric-dev`); libfabric is loaded at run time |
//! | `collectives` | yes | [`collectives`] (`hpc-collectives`): schedules, reduction kernels, simulator; [`comm`] (`hpc-comm`): communicators and their engines, [`Context::comm`] | nothing |
//! | `gpu` | no | `gpu` (`hpc-gpu`): collectives on CUDA buffers (not yet run on a GPU) | nothing (CUDA is loaded at run time) |
//! | `mpi` | no | MPI bootstrap in [`runtime`] | an MPI-3.1 library with `mpicc` (Open MPI >= 4.0, MPICH >= 3.3), `libclang` |
//!
//! [`runtime`] (`hpc-runtime`) is always there.

pub use hpc_runtime as runtime;
pub use hpc_runtime::{Error, World};

#[cfg(feature = "collectives")]
pub use hpc_collectives as collectives;
#[cfg(feature = "collectives")]
pub use hpc_comm as comm;
#[cfg(feature = "container")]
pub use hpc_container as container;
#[cfg(feature = "gpu")]
pub use hpc_gpu as gpu;
#[cfg(feature = "rdma")]
pub use hpc_rdma as rdma;
#[cfg(feature = "topology")]
pub use hpc_topology as topology;
/// The timeline of a job (`HPC_TRACE`, `hpc run --trace`): [`trace::region`] marks
/// a region of the application's code on it.
pub use hpc_trace as trace;

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
    /// Whether [`init`] bound this process to [`Context::placement`]'s CPUs.
    #[cfg(feature = "topology")]
    pub bound: bool,
    /// The container runtime, devices, launcher and limits this rank sees.
    #[cfg(feature = "container")]
    pub environment: hpc_container::Environment,
}

/// The most compute threads, or progress cores, one rank is planned for:
/// [`Options::threads`] and [`Options::progress`] beyond it are an error of
/// [`init_with`], and `HPC_THREADS` beyond it is taken as this many.
pub const MAX_THREADS: usize = 65_536;

/// What [`init_with`] plans for. A build without the `topology` feature plans
/// and binds nothing: a warning names what these options (or `HPC_BIND=1`,
/// `HPC_THREADS`) asked for.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Compute threads per rank, 1 to [`MAX_THREADS`] (`Some(0)` or more is
    /// an error of [`init_with`]; a count this machine cannot give is
    /// warned about, the rank left unplaced); default: `HPC_THREADS`, else
    /// the allowed cores divided among the ranks of this node.
    pub threads: Option<usize>,
    /// Progress cores reserved per rank (for offloaded collectives: with one,
    /// [`Context::comm`] gives a communicator whose progress thread runs
    /// there), at most [`MAX_THREADS`] (more is an error of [`init_with`]).
    pub progress: usize,
    /// Whether to bind this process to its placement's CPUs; default: `HPC_BIND`
    /// (`0` or `1`), else yes.
    pub bind: Option<bool>,
    /// Do not install a `tracing` subscriber. By default [`init`] installs one that
    /// prints to standard error what `HPC_LOG` selects (default `warn`), unless the
    /// application installed a global subscriber before. With this, `HPC_TRACE`
    /// records nothing unless the application adds
    /// [`hpc_trace::layer_from_env`]'s layer to its own subscriber (a warning
    /// says so).
    pub no_subscriber: bool,
}

/// Joins the job and gathers the context, with default [`Options`]. Call once per
/// process, first thing in `main`: a second call in a rank of a launcher's job
/// is an error at once (a launcher has one place per rank).
///
/// In order, it:
/// 1. installs a `tracing` subscriber on standard error that honours `HPC_LOG`
///    (`EnvFilter` syntax, default `warn`), unless the application installed a global
///    one before (then it leaves that alone), so that the SDK's warnings reach the
///    user; under `mpirun` and `srun` each line starts with the rank (`[3] `), as
///    `hpc run` tags lines itself; with `HPC_TRACE=DIR` set, it also records this
///    process's timeline into `DIR` ([`trace`]: the SDK's collective, proxy and
///    transport spans and the application's spans at `INFO` and above, named as
///    this rank's once the world is known; a `DIR` that cannot be made or written
///    is an error naming `HPC_TRACE`);
/// 2. with feature `collectives`: refuses an `HPC_ENGINE` that names no engine of
///    this build, and the proxy's settings where the engine is the proxy (before
///    the job is joined, not at the first [`Context::comm`]);
///    serves as the node's collectives proxy and exits
///    when this process was started to be one (the `Proxy` engine starts the
///    application's own executable for that); it returns at once otherwise;
/// 3. joins the job ([`World::init`]: `hpc run`, `mpirun`, `srun --mpi=pmix` or alone);
/// 4. with feature `topology`: loads the topology, plans this rank's placement, warns
///    when a launcher's binding cannot hold the threads asked for (`HPC_THREADS`), and
///    binds the process to the placement's CPUs (`HPC_BIND=0` or [`Options::bind`]
///    turns that off). Progress CPUs that a launcher reserved for a rank it bound
///    (`hpc run --bind core --progress K`, `HPC_PROGRESS_CPUSET`) are left out of the
///    compute cores and kept in the binding, for the progress thread.
pub fn init() -> Result<Context, Error> {
    init_with(Options::default())
}

/// A setting [`init`] refuses before the job is joined (`HPC_TRACE`,
/// `HPC_ENGINE`, the proxy's, a variable of ours that is not UTF-8):
/// [`Error::InvalidArgument`], "invalid argument: HPC_TRACE=…". These were
/// `Error::Bootstrap`'s "bootstrap failed: HPC_TRACE=…", of a setting that is
/// no part of joining the job (nothing was joined yet).
fn refused_setting(why: String) -> Error {
    Error::InvalidArgument(why)
}

/// Like [`init`] with explicit options.
///
/// # Errors
///
/// A setting refused before the job is joined ([`init`]'s steps 1 and 2), or
/// [`Options::threads`] of `Some(0)`, or [`Options::threads`] or
/// [`Options::progress`] beyond [`MAX_THREADS`], is [`Error::InvalidArgument`]
/// naming it; joining the job gives [`World::init`]'s errors
/// ([`Error::AlreadyJoined`] for a second call in a rank of a launcher's job),
/// and a process started to be the node's collectives proxy whose serving
/// fails gives [`Error::Proxy`].
pub fn init_with(options: Options) -> Result<Context, Error> {
    // The application's own argument: 0 threads is no plan at all, and was
    // taken as a warning ("cannot plan this rank's placement", which a
    // program without a subscriber never saw), the rank left unplaced and
    // unbound.
    if options.threads == Some(0) {
        return Err(Error::InvalidArgument(format!(
            "hpc_rs::Options::threads = Some(0): a rank needs at least 1 compute thread \
             (None: {}, else the allowed cores divided among the node's ranks)",
            runtime::env::THREADS
        )));
    }
    // Counts no machine has (`usize::MAX`) were taken: the plan failed behind
    // the warning "cannot plan this rank's placement" and `init_with` said
    // `Ok`, the rank unplaced and unbound. A count a machine may have but this
    // one cannot give stays a warning (the plan's), as documented.
    for (field, n) in [
        ("threads = Some(", options.threads.unwrap_or(0)),
        ("progress = (", options.progress),
    ] {
        if n > MAX_THREADS {
            return Err(Error::InvalidArgument(format!(
                "hpc_rs::Options::{field}{n}): more than the {MAX_THREADS} CPUs a rank is \
                 planned for (as {} is at most)",
                runtime::env::THREADS
            )));
        }
    }
    if !options.no_subscriber {
        install_subscriber()?;
    } else {
        warn_trace_unrecorded();
    }
    // Before anything reads a variable of ours: one that is not UTF-8 is an error
    // naming it, not a variable read as unset (others that are not are skipped).
    runtime::env::vars().map_err(refused_setting)?;
    // An engine this build has not is refused before the job is joined and the
    // program does its work, not at its first `Context::comm`.
    #[cfg(feature = "collectives")]
    check_engine()?;
    #[cfg(feature = "collectives")]
    serve_proxy()?;
    // Once per process in a launcher's job: a second call is refused at once
    // (`Error::AlreadyJoined`).
    let world = World::init()?;
    // The timeline's file is this rank's from now on (`HPC_TRACE`).
    hpc_trace::set_rank(world.rank());
    hpc_trace::set_size(world.size());
    #[cfg(feature = "topology")]
    let (topology, placement, bound) = plan(&world, &options);
    // Asked for and not done, said: without the feature, `Options::threads`,
    // `bind`, `progress` and `HPC_BIND=1`, `HPC_THREADS` were taken without
    // a word, the rank neither placed nor bound.
    #[cfg(not(feature = "topology"))]
    if let Some(why) = unplaced(
        &options,
        runtime::env::var(runtime::env::BIND)
            .ok()
            .flatten()
            .as_deref(),
        runtime::env::var(runtime::env::THREADS)
            .ok()
            .flatten()
            .as_deref(),
    ) {
        tracing::warn!("{why}");
    }
    Ok(Context {
        #[cfg(feature = "container")]
        environment: hpc_container::Environment::detect(),
        world,
        #[cfg(feature = "topology")]
        topology,
        #[cfg(feature = "topology")]
        placement,
        #[cfg(feature = "topology")]
        bound,
    })
}

/// What a build of hpc-rs without its `topology` feature was asked to plan or
/// bind (`options`, and the values of `HPC_BIND` and `HPC_THREADS`): a
/// sentence saying that none of it is done, or `None` where nothing was asked
/// (`HPC_BIND=0` asks for nothing).
#[cfg(any(test, not(feature = "topology")))]
fn unplaced(options: &Options, bind: Option<&str>, threads: Option<&str>) -> Option<String> {
    let mut asked = Vec::new();
    if let Some(t) = options.threads {
        asked.push(format!("Options::threads = Some({t})"));
    }
    if options.progress > 0 {
        asked.push(format!("Options::progress = {}", options.progress));
    }
    match (options.bind, bind.map(str::trim)) {
        (Some(true), _) => asked.push("Options::bind = Some(true)".into()),
        (None, Some(v)) if v != "0" => {
            asked.push(format!("{}={}", runtime::env::BIND, runtime::env::shown(v)))
        }
        _ => {}
    }
    if let Some(v) = threads.filter(|_| options.threads.is_none()) {
        asked.push(format!(
            "{}={}",
            runtime::env::THREADS,
            runtime::env::shown(v)
        ));
    }
    (!asked.is_empty()).then(|| {
        format!(
            "{} asked for this rank's placement, but hpc-rs was built without its \
             `topology` feature: the rank is neither placed nor bound (enable the \
             feature `topology` of hpc-rs)",
            asked.join(", ")
        )
    })
}

/// The log filter `HPC_LOG` asks for, or `warn`, and what was wrong with it if it
/// is not a filter, naming the variable (one that is not UTF-8 is left to [`init`],
/// which refuses it; `warn` meanwhile): the warning
/// for the caller to log once its subscriber is installed. [`init`] uses it, and
/// so do programs that install a subscriber of their own.
///
/// ```
/// let (_filter, problem) = hpc_rs::log_filter();
/// assert!(problem.is_none() || problem.unwrap().contains(hpc_rs::runtime::env::LOG));
/// ```
pub fn log_filter() -> (tracing_subscriber::EnvFilter, Option<String>) {
    use tracing_subscriber::EnvFilter;
    match runtime::env::var(runtime::env::LOG) {
        Ok(None) => (EnvFilter::new("warn"), None),
        // Not UTF-8: [`init`] (its `World::init`) refuses any variable of ours
        // that is not, naming it; a warning here that warnings are logged would
        // only be overruled by that refusal.
        Err(_) => (EnvFilter::new("warn"), None),
        Ok(Some(v)) => match EnvFilter::try_new(&v) {
            Ok(f) => (f, None),
            Err(e) => (
                EnvFilter::new("warn"),
                Some(format!(
                    "{}={} is not a log filter ({e}); using warn",
                    runtime::env::LOG,
                    runtime::env::shown(&v)
                )),
            ),
        },
    }
}

/// Installs the global subscriber unless there is one already: the log lines
/// `HPC_LOG` selects on standard error, and with `HPC_TRACE` set the timeline's
/// [`hpc_trace::TraceLayer`] beside them (an `HPC_TRACE` that cannot be used is
/// an error naming it).
fn install_subscriber() -> Result<(), Error> {
    use std::io::IsTerminal as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    if tracing::dispatcher::has_been_set() {
        warn_trace_unrecorded();
        return Ok(());
    }
    let (filter, problem) = log_filter();
    // Not `std::env::vars()`, which panics on a variable that is not UTF-8; one of
    // ours that is not is reported by `World::init` (here the tag is left off).
    let env = runtime::env::vars().unwrap_or_default();
    // Each event in one write, after the rank's tag, its lines cut.
    let writer = match rank_tag(&env) {
        Some(r) => hpc_trace::LogWriter::tagged(format!("[{r}] ")),
        None => hpc_trace::LogWriter::stderr(),
    };
    let ansi = std::io::stderr().is_terminal();
    let installed =
        match hpc_trace::layer_from_env().map_err(|e| refused_setting(e.to_string()))? {
            // The log alone: one global filter, as fast as a subscriber gets when a
            // span or event is off (per-layer filters are checked per callsite hit).
            None => tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(writer)
                .with_ansi(ansi)
                .finish()
                .try_init(),
            // The timeline beside it, each with its own filter.
            Some(trace) => tracing_subscriber::registry()
                .with(
                    tracing_subscriber::fmt::layer()
                        .with_writer(writer)
                        .with_ansi(ansi)
                        .with_filter(filter),
                )
                .with(trace.with_filter(hpc_trace::default_filter()))
                .try_init(),
        }
        .is_ok();
    if let Some(p) = problem {
        if installed {
            tracing::warn!("{p}");
        }
    }
    Ok(())
}

/// Says that `HPC_TRACE` records nothing where the application has its own
/// subscriber (installed before [`init`], or [`Options::no_subscriber`]) and
/// added no timeline layer: with `no_subscriber` it was ignored without a word.
fn warn_trace_unrecorded() {
    if std::env::var_os(runtime::env::TRACE).is_some() && !hpc_trace::recording() {
        tracing::warn!(
            "{} is set but the application installed its own subscriber: nothing is \
             recorded unless it adds hpc_trace::layer_from_env()'s layer",
            runtime::env::TRACE
        );
    }
}

/// The rank to put before each log line: an MPI launcher's rank in a job of several
/// ranks (`mpirun` and `srun` do not tag lines as `hpc run` does), else none.
fn rank_tag(env: &std::collections::HashMap<String, String>) -> Option<usize> {
    let num = |k: &str| env.get(k).and_then(|v| v.trim().parse::<usize>().ok());
    match runtime::env::detect(env) {
        Ok(runtime::env::Detected::Mpi { size_hint, .. }) if size_hint != Some(1) => [
            "OMPI_COMM_WORLD_RANK",
            "PMIX_RANK",
            "PMI_RANK",
            "SLURM_PROCID",
        ]
        .into_iter()
        .find_map(num),
        _ => None,
    }
}

/// Serves as the collectives proxy when this process was started to be one.
#[cfg(feature = "collectives")]
fn serve_proxy() -> Result<(), Error> {
    #[cfg(feature = "topology")]
    if hpc_comm::proxy::requested() {
        // Started by a rank that init() bound to its own cores: the proxy serves every
        // rank of the node and must not share that rank's cores only. The kernel keeps
        // it within what the cgroup allows.
        if let Ok(topo) = hpc_topology::Topology::this_machine() {
            match hpc_topology::bind_current_process(&topo.pus) {
                Ok(()) => {
                    tracing::debug!(cpus = %topo.pus, "collectives proxy unbound from its rank's cores")
                }
                Err(e) => tracing::debug!(error = %e, "collectives proxy keeps its rank's binding"),
            }
        }
    }
    hpc_comm::proxy::serve_env()
        .map(|_| ())
        .map_err(|e| Error::Proxy(e.to_string()))
}

#[cfg(feature = "collectives")]
impl Context {
    /// A communicator of every rank (collective: every rank calls it) with the engine
    /// that fits this rank's placement: see [`Context::comm_options`].
    pub fn comm(&self) -> Result<hpc_comm::Comm, hpc_comm::Error> {
        hpc_comm::Comm::with_options(&self.world, self.comm_options()?)
    }

    /// The settings [`Context::comm`] uses, to adjust before
    /// [`Comm::with_options`](hpc_comm::Comm::with_options).
    ///
    /// The engine is `HPC_ENGINE` (`inline`, `thread`, `proxy`, `mpi`) if set;
    /// otherwise, where this rank has a progress core (its placement's, from
    /// [`Options::progress`], or `hpc run --progress`'s `HPC_PROGRESS_CPUSET`), the
    /// `Proxy` engine when the job was started with `hpc run --proxy` (on one node or
    /// several: the nodes' proxies then carry the messages between nodes) and
    /// the `Thread` engine pinned to that core otherwise; without a progress core,
    /// `Proxy` when `hpc run --proxy` asked for it and `Inline` (progress inside
    /// `test`/`wait`) otherwise. The book's chapter "Choosing an engine" explains why.
    pub fn comm_options(&self) -> Result<hpc_comm::CommOptions, hpc_comm::Error> {
        let progress = self.progress_cpus();
        let proxy_asked = std::env::var_os(runtime::env::COLL_PROXY_CMD).is_some();
        let asked = std::env::var(runtime::env::ENGINE).ok();
        let (engine, why) = choose_engine(asked.as_deref(), progress.as_ref(), proxy_asked)?;
        // Said once for the job (every rank decides the same way from the same inputs
        // but its own progress cores, which go to the debug log).
        if self.world.rank() == 0 {
            tracing::info!(engine = engine.name(), "collectives engine: {why}");
        } else {
            tracing::debug!(engine = engine.name(), "collectives engine: {why}");
        }
        let mut opts = hpc_comm::CommOptions::new(engine);
        opts.progress_cpus = progress;
        Ok(opts)
    }

    /// This rank's progress CPUs: its placement's progress cores, else the launcher's.
    fn progress_cpus(&self) -> Option<hpc_topology::CpuSet> {
        #[cfg(feature = "topology")]
        if let Some(p) = &self.placement {
            if !p.progress_cpuset.is_empty() {
                return Some(p.progress_cpuset.clone());
            }
        }
        runtime::env::parsed(
            runtime::env::PROGRESS_CPUSET,
            hpc_topology::CpuSet::parse_list,
        )
        .filter(|c| !c.is_empty())
    }
}

/// Refuses an `HPC_ENGINE` that names no engine of this build, and, where the
/// engine is the proxy, the proxy's settings that [`Context::comm`] would refuse
/// (`HPC_COLL_PROXY_MAX_SCRATCH`, `HPC_COLL_PROXY_PLACEMENT`), for [`init`] to
/// say before the program's work.
#[cfg(feature = "collectives")]
fn check_engine() -> Result<(), Error> {
    let asked = std::env::var(runtime::env::ENGINE).ok();
    let proxy_asked = std::env::var_os(runtime::env::COLL_PROXY_CMD).is_some();
    let refused = |e: hpc_comm::Error| match e {
        hpc_comm::Error::Unsupported(why) => refused_setting(why),
        e => refused_setting(e.to_string()),
    };
    match choose_engine(asked.as_deref(), None, proxy_asked).map_err(refused)? {
        (hpc_comm::Engine::Proxy, _) => {
            hpc_comm::proxy::max_scratch().map_err(refused_setting)?;
            hpc_comm::proxy::Placement::from_env().map_err(refused)?;
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The engine of [`Context::comm`] and why (for the log): `HPC_ENGINE` if given,
/// else from whether the rank has a progress core and whether `hpc run --proxy`
/// asked for the proxy.
#[cfg(feature = "collectives")]
fn choose_engine(
    asked: Option<&str>,
    progress: Option<&hpc_topology::CpuSet>,
    proxy_asked: bool,
) -> Result<(hpc_comm::Engine, String), hpc_comm::Error> {
    use hpc_comm::Engine;
    if let Some(name) = asked.map(str::trim).filter(|s| !s.is_empty()) {
        let engine = name.to_ascii_lowercase().parse().map_err(|_| {
            hpc_comm::Error::Unsupported(format!(
                "{}={} is not an engine of this build: inline, thread, proxy{}",
                runtime::env::ENGINE,
                runtime::env::shown(name),
                if cfg!(feature = "mpi") {
                    ", mpi"
                } else {
                    " (mpi needs the `mpi` feature)"
                }
            ))
        })?;
        return Ok((engine, format!("{}={name}", runtime::env::ENGINE)));
    }
    Ok(match (progress, proxy_asked) {
        (_, true) => (
            Engine::Proxy,
            "the job was started with `hpc run --proxy`".to_string(),
        ),
        (Some(p), false) => (Engine::Thread, format!("this rank has progress CPUs {p}")),
        (None, false) => (
            Engine::Inline,
            "no progress core: progress inside test/wait".to_string(),
        ),
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
    bool,
) {
    use hpc_topology::{plan_for_rank, Policy, ProgressScope, Topology};
    let topo = match Topology::this_machine() {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "cannot load the hardware topology; no placement");
            return (None, None, false);
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
        // A value that is not a number is warned about, not silently dropped.
        .or_else(|| {
            let name = hpc_runtime::env::THREADS;
            match hpc_runtime::env::number(name, MAX_THREADS) {
                // 0 threads is no plan at all: the rank ran unplaced and unbound
                // behind a warning about planning, not about the variable.
                Some(0) => {
                    tracing::warn!(
                        variable = name,
                        "{name}=0: a rank needs at least 1 thread; using the default"
                    );
                    None
                }
                t => t,
            }
        });
    if let Some(t) = asked.filter(|&t| t > 1) {
        // Launchers bind on their own (Open MPI: one core per rank under mpirun);
        // say so when that leaves the requested threads no room.
        let _ = hpc_topology::check_binding(&topo, t);
    }
    // A launcher that bound this rank on its own and reserved it progress CPUs
    // (`hpc run --bind core --progress K`) leaves the compute threads the rest of the
    // binding; the progress CPUs stay in the process's binding for the progress thread.
    let launcher_progress = runtime::env::parsed(
        runtime::env::PROGRESS_CPUSET,
        hpc_topology::CpuSet::parse_list,
    )
    .filter(|p| {
        options.progress == 0
            && local_size == 1
            && !p.is_empty()
            && !topo.allowed.difference(p).is_empty()
    });
    let compute_allowed = match &launcher_progress {
        Some(p) => topo.allowed.difference(p),
        None => topo.allowed.clone(),
    };
    let threads = asked.unwrap_or_else(|| {
        (topo.allowed_cores(&compute_allowed).count() / local_size.max(1)).max(1)
    });
    let planned = match &launcher_progress {
        None => plan_for_rank(
            &topo,
            local_rank,
            local_size,
            threads,
            options.progress,
            ProgressScope::PerRank,
            Policy::Compact,
        ),
        Some(_) => {
            let req = hpc_topology::PlacementRequest::new(1, threads)
                .policy(Policy::Compact)
                .allowed(compute_allowed.clone());
            hpc_topology::plan(&topo, &req).map(|mut plan| {
                plan.log_warnings(true);
                plan.ranks.swap_remove(0)
            })
        }
    };
    let placement = match planned {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::warn!(error = %e, "cannot plan this rank's placement");
            None
        }
    };
    // `1` or `0`; anything else (`false`, `no`) is warned about and binds, the
    // default, rather than being read as "not 0" in silence.
    let bind = options.bind.unwrap_or_else(|| {
        runtime::env::parsed(runtime::env::BIND, runtime::env::flag).unwrap_or(true)
    });
    let bound = match (&placement, bind) {
        (Some(p), true) => match hpc_topology::bind_current_process(&match &launcher_progress {
            Some(progress) => p.cpuset.union(progress),
            None => p.cpuset.clone(),
        }) {
            Ok(()) => {
                tracing::debug!(rank = world.rank(), cpus = %p.cpuset, "bound to the placement");
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot bind this rank to its placement");
                false
            }
        },
        _ => false,
    };
    (Some(topo), placement, bound)
}

#[cfg(test)]
mod unplaced_tests {
    use super::{unplaced, Options};

    /// Built without `topology`, `init_with` took `Options::threads`,
    /// `bind`, `progress`, `HPC_BIND=1` and `HPC_THREADS` without a word, the
    /// rank neither placed nor bound. What was asked is named; nothing asked,
    /// nothing said.
    #[test]
    fn a_placement_asked_of_a_build_without_topology_is_named() {
        let none = Options::default();
        assert_eq!(unplaced(&none, None, None), None);
        assert_eq!(unplaced(&none, Some("0"), None), None);
        let off = Options {
            bind: Some(false),
            ..Default::default()
        };
        assert_eq!(unplaced(&off, Some("1"), None), None);
        let asked = Options {
            threads: Some(8),
            progress: 1,
            bind: Some(true),
            ..Default::default()
        };
        let why = unplaced(&asked, Some("0"), Some("4")).unwrap();
        assert!(
            why.starts_with(
                "Options::threads = Some(8), Options::progress = 1, Options::bind = Some(true) \
                 asked for this rank's placement"
            ) && why.contains("without its `topology` feature"),
            "{why}"
        );
        let why = unplaced(&none, Some("1"), Some("4")).unwrap();
        assert!(
            why.starts_with("HPC_BIND=\"1\", HPC_THREADS=\"4\" asked"),
            "{why}"
        );
    }
}

#[cfg(test)]
mod log_tests {
    use super::rank_tag;

    fn env(vars: &[(&str, &str)]) -> std::collections::HashMap<String, String> {
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn log_lines_carry_the_rank_under_mpi_launchers_only() {
        let ompi = [("OMPI_COMM_WORLD_SIZE", "4"), ("OMPI_COMM_WORLD_RANK", "3")];
        assert_eq!(rank_tag(&env(&ompi)), Some(3));
        let one = [("OMPI_COMM_WORLD_SIZE", "1"), ("OMPI_COMM_WORLD_RANK", "0")];
        assert_eq!(rank_tag(&env(&one)), None);
        let hydra = [("PMI_RANK", "1"), ("PMI_SIZE", "2")];
        assert_eq!(rank_tag(&env(&hydra)), Some(1));
        // hpc run tags the lines itself; a plain program has no rank to show.
        use crate::runtime::env::{RANK, RENDEZVOUS, SECRET, SIZE};
        let hpc = [
            (RANK, "2"),
            (SIZE, "4"),
            (RENDEZVOUS, "127.0.0.1:1"),
            (SECRET, "00ff"),
        ];
        assert_eq!(rank_tag(&env(&hpc)), None);
        assert_eq!(rank_tag(&env(&[])), None);
    }
}

#[cfg(all(test, feature = "collectives"))]
mod tests {
    use super::choose_engine;
    use hpc_comm::Engine;

    #[test]
    fn the_engine_follows_the_placement() {
        let core = hpc_topology::CpuSet::parse_list("1").unwrap();
        let engine = |asked, progress, proxy| choose_engine(asked, progress, proxy).map(|c| c.0);
        assert_eq!(engine(None, None, false).unwrap(), Engine::Inline);
        assert_eq!(engine(None, Some(&core), false).unwrap(), Engine::Thread);
        // `hpc run --proxy`: the proxy, whether the job spans nodes or not.
        assert_eq!(engine(None, Some(&core), true).unwrap(), Engine::Proxy);
        assert_eq!(engine(None, None, true).unwrap(), Engine::Proxy);
        // HPC_ENGINE overrides.
        assert_eq!(
            engine(Some("inline"), Some(&core), true).unwrap(),
            Engine::Inline
        );
        assert_eq!(
            engine(Some(" Thread "), None, false).unwrap(),
            Engine::Thread
        );
        assert_eq!(
            engine(Some(""), Some(&core), false).unwrap(),
            Engine::Thread
        );
        let e = engine(Some("fast"), None, false).unwrap_err().to_string();
        assert!(
            e.contains("HPC_ENGINE=\"fast\"") && e.contains("inline, thread, proxy"),
            "{e}"
        );
        // A long value is shown cut, as every HPC_* value is: it was echoed
        // whole into the error (and each rank's log).
        let long = "x".repeat(100_000);
        let e = engine(Some(&long), None, false).unwrap_err().to_string();
        assert!(
            e.len() < 300 && e.contains("99960 more characters"),
            "{}",
            e.len()
        );
    }

    #[test]
    fn the_log_says_why_the_engine_was_chosen() {
        let core = hpc_topology::CpuSet::parse_list("3").unwrap();
        let why = |asked, progress, proxy| choose_engine(asked, progress, proxy).unwrap().1;
        assert_eq!(why(Some("thread"), None, true), "HPC_ENGINE=thread");
        assert!(why(None, Some(&core), true).contains("hpc run --proxy"));
        assert_eq!(
            why(None, Some(&core), false),
            "this rank has progress CPUs 3"
        );
        assert!(why(None, None, false).starts_with("no progress core"));
    }
}
