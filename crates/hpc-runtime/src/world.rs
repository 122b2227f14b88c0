//! The [`World`]: every rank of the job, however it was started.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use crate::env::{self, Detected, MpiLauncher};
use crate::error::{Error, Result};
use crate::link::LauncherLink;
use crate::node::NodeMap;
use crate::wire::Op;

/// How this process joined its job.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Bootstrap {
    /// A plain run: one rank.
    Singleton,
    /// Started by `hpc run` (the built-in launcher).
    Launcher {
        /// The coordinator's address.
        rendezvous: String,
    },
    /// Through an MPI library.
    Mpi {
        /// The launcher its environment names, if any.
        launcher: Option<MpiLauncher>,
        /// The MPI library's version string (first line).
        library: String,
        /// The thread support level MPI granted.
        threading: String,
    },
    /// Built by [`World::relayed`]: its collectives are carried by the
    /// program that made it (for processes that are not ranks of the job, such
    /// as the collectives proxies, whose ranks relay their set-up).
    Relayed,
}

impl fmt::Display for Bootstrap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bootstrap::Singleton => write!(f, "singleton"),
            Bootstrap::Launcher { rendezvous } => write!(f, "hpc run launcher ({rendezvous})"),
            Bootstrap::Mpi {
                launcher,
                library,
                threading,
            } => {
                write!(f, "MPI")?;
                if let Some(l) = launcher {
                    write!(f, " via {}", l.name())?;
                }
                write!(f, " [{library}; threading {threading}]")
            }
            Bootstrap::Relayed => write!(f, "relayed"),
        }
    }
}

/// The longest node name (`HPC_NODE_NAME`, else the host name) a rank may
/// have, in bytes: it fits, with the rank's other fields, the hello that `hpc
/// run`'s coordinator takes (at most 4096 bytes).
pub const MAX_NODE_NAME: usize = 1024;

/// Settings of [`World::init_with`]. [`Config::from_env`] reads them from the
/// environment (`HPC_TIMEOUT`, `HPC_NODE_NAME`, `HPC_BOOTSTRAP`).
#[derive(Debug, Clone)]
pub struct Config {
    /// Bound on every blocking call (join, barrier, allgather, broadcast):
    /// above 0 and at most [`env::MAX_TIMEOUT`].
    pub timeout: Duration,
    /// The node name of this rank; ranks with equal names share a node.
    pub node_name: String,
    /// The environment to detect the launcher from.
    pub env: HashMap<String, String>,
}

impl Config {
    /// Reads the configuration from this process's environment.
    pub fn from_env() -> Result<Config> {
        // Not `std::env::vars()`, which panics on any variable that is not UTF-8.
        Config::from_map(env::vars().map_err(Error::Bootstrap)?)
    }

    /// Reads the configuration from an environment map.
    pub fn from_map(env: HashMap<String, String>) -> Result<Config> {
        let timeout = env::timeout_from(&env).map_err(Error::Bootstrap)?;
        let node_name = env
            .get(env::NODE_NAME)
            .filter(|s| !s.trim().is_empty())
            .cloned()
            .unwrap_or_else(hostname);
        // The name travels in the rank's hello to `hpc run`'s coordinator, which
        // refuses a hello over `HELLO_MAX` bytes: a longer name failed as "the
        // launcher ... is unreachable: failed to fill whole buffer (the launcher
        // stopped?)", naming neither the variable nor its length.
        if node_name.len() > MAX_NODE_NAME {
            return Err(Error::Bootstrap(format!(
                "{}={} is {} bytes long: a node name is at most {MAX_NODE_NAME} bytes",
                env::NODE_NAME,
                env::shown(&node_name),
                node_name.len()
            )));
        }
        // A line break or a terminal's escape was written as it is wherever the
        // node is named (`hpc selftest`'s line, `--show-placement`, the logs).
        // The rule of what a message escapes (`hpc_env::needs_escape`), not
        // `char::is_control` alone: a line separator (U+2028) or a right-to-left
        // override was taken, and broke or reversed the lines that name it.
        if node_name.chars().any(hpc_env::needs_escape) {
            return Err(Error::Bootstrap(format!(
                "{}={} holds a control character (a line break, a tab, a terminal's \
                 escape or a bidirectional control): a node name is one line of text",
                env::NODE_NAME,
                env::shown(&node_name)
            )));
        }
        Ok(Config {
            timeout,
            node_name,
            env,
        })
    }

    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Config {
        self.timeout = timeout;
        self
    }
}

/// Carries the collectives of a [`World::relayed`] world.
///
/// Every member calls [`Relay::allgather`] in the same order; an
/// implementation must bound each call (the world's timeout) and fail rather
/// than wait for a member that is gone.
pub trait Relay: Send + Sync {
    /// Every member contributes `mine`; returns all contributions, indexed by
    /// member.
    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;
}

pub(crate) enum Backend {
    Singleton,
    Relayed(Box<dyn Relay>),
    Launcher(Mutex<LauncherLink>),
    #[cfg(feature = "mpi")]
    Mpi(Box<crate::mpi_backend::MpiBackend>),
}

/// All ranks of the job.
///
/// `World` is created once per process ([`World::init`]) and finalizes the bootstrap
/// (says goodbye to the launcher, or finalizes MPI) when dropped. Its collectives are
/// for bootstrap and control (exchanging endpoints, agreeing on settings): they move
/// bytes through the launcher or MPI and are not meant for bulk data, which goes
/// through `hpc-rdma` and `hpc-collectives`.
///
/// Every blocking call is bounded by [`World::timeout`]: a peer that died or never
/// arrives makes it return [`Error::PeerLost`] or [`Error::Timeout`] naming the rank.
/// All ranks must call the collectives in the same order (as in MPI).
///
/// ```
/// let world = hpc_runtime::World::init()?;
/// let parts = world.allgather(&(world.rank() as u32).to_le_bytes())?;
/// assert_eq!(parts.len(), world.size());
/// world.barrier()?;
/// # Ok::<(), hpc_runtime::Error>(())
/// ```
pub struct World {
    rank: usize,
    size: usize,
    nodes: NodeMap,
    timeout: Duration,
    bootstrap: Bootstrap,
    backend: Backend,
}

impl fmt::Debug for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("World")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("node", &self.node())
            .field("bootstrap", &self.bootstrap)
            .finish()
    }
}

/// This host's name, or `localhost` if it cannot be read.
pub fn hostname() -> String {
    // On Linux, uname's node name is what gethostname(2) reads.
    let uname = rustix::system::uname();
    match uname.nodename().to_string_lossy() {
        name if name.is_empty() => "localhost".into(),
        name => name.into_owned(),
    }
}

/// A place in a job this process took (or is taking): a rank of a
/// launcher's job (its rendezvous and secret), or MPI's, which a process
/// initialises once.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Place {
    Launcher {
        rendezvous: String,
        secret: u64,
        rank: usize,
    },
    Mpi,
}

/// The places this process joined (or is joining) by [`World::init`] or
/// [`World::init_with`], each with its `(rank, size)`; kept after the world
/// is dropped (its rank said goodbye: the launcher has no place for it
/// again). A second join of a rank waited `HPC_TIMEOUT` for a launcher that
/// has no second place for it, then said "the launcher … is unreachable: no
/// answer to init within 7.5s (launcher hung or network partitioned)" of a
/// launcher that was fine; through `init_with` it was told "another process
/// of this job joined as rank R first", of this process itself. A map: a
/// process that makes many communicators joins a link's job for each.
static JOINED: std::sync::LazyLock<Mutex<HashMap<Place, (usize, usize)>>> =
    std::sync::LazyLock::new(|| Mutex::new(HashMap::new()));

fn joined() -> std::sync::MutexGuard<'static, HashMap<Place, (usize, usize)>> {
    JOINED.lock().unwrap_or_else(|p| p.into_inner())
}

/// [`Error::AlreadyJoined`] where this process joined `place` before (or
/// another of its threads is joining it now); else `place` is taken, to be
/// given back by [`leave_place`] if the join fails.
fn take_place(place: Place, rank: usize, size: usize) -> Result<()> {
    let mut joined = joined();
    if let Some(&(rank, size)) = joined.get(&place) {
        return Err(Error::AlreadyJoined { rank, size });
    }
    joined.insert(place, (rank, size));
    Ok(())
}

/// Gives back a place whose join failed: a later call may try again (and is
/// answered by the launcher or MPI).
fn leave_place(place: &Place) {
    joined().remove(place);
}

impl World {
    /// Joins the job this process belongs to, detecting how it was started:
    /// `hpc run`, an MPI launcher (with the `mpi` feature), or a plain run (size 1).
    ///
    /// Once per process where it joins a launcher's or MPI's job: a second
    /// call there is [`Error::AlreadyJoined`] at once (a process alone may
    /// call it again). [`World::init_with`] is under the same rule.
    pub fn init() -> Result<World> {
        World::init_with(Config::from_env()?)
    }

    /// Like [`World::init`] with explicit settings. A [`Config::timeout`] of 0
    /// or beyond [`env::MAX_TIMEOUT`] is [`Error::InvalidArgument`].
    ///
    /// A rank of a launcher's job (its rendezvous and secret) is joined once
    /// per process, and MPI's job once: a second call for the same rank, by
    /// this function or [`World::init`], while its world lives or after it was
    /// dropped, is [`Error::AlreadyJoined`] at once. Other ranks of the same job
    /// may be joined by other threads of the process (tests run ranks so).
    pub fn init_with(config: Config) -> Result<World> {
        env::check_timeout("hpc_runtime::Config::timeout", config.timeout)
            .map_err(Error::InvalidArgument)?;
        let detected = env::detect(&config.env).map_err(Error::Bootstrap)?;
        let world = match detected {
            Detected::Singleton => {
                if let Some(why) = env::stray_launcher_vars(&config.env) {
                    tracing::warn!("{why}");
                }
                World::singleton(&config)
            }
            Detected::Launcher {
                rank,
                size,
                rendezvous,
                secret,
            } => {
                let place = Place::Launcher {
                    rendezvous: rendezvous.clone(),
                    secret,
                    rank,
                };
                take_place(place.clone(), rank, size)?;
                let (link, names) = match LauncherLink::connect(
                    rank,
                    size,
                    &rendezvous,
                    secret,
                    &config.node_name,
                    config.timeout,
                ) {
                    Ok(joined) => joined,
                    Err(e) => {
                        leave_place(&place);
                        return Err(e);
                    }
                };
                World {
                    rank,
                    size,
                    nodes: NodeMap::from_names(&names),
                    timeout: config.timeout,
                    bootstrap: Bootstrap::Launcher { rendezvous },
                    backend: Backend::Launcher(Mutex::new(link)),
                }
            }
            Detected::Mpi {
                launcher,
                size_hint,
            } => {
                if let Some(&(rank, size)) = joined().get(&Place::Mpi) {
                    return Err(Error::AlreadyJoined { rank, size });
                }
                let world = World::mpi(&config, launcher, size_hint)?;
                if matches!(world.bootstrap, Bootstrap::Mpi { .. }) {
                    joined().insert(Place::Mpi, (world.rank, world.size));
                }
                world
            }
        };
        tracing::info!(
            bootstrap = %world.bootstrap,
            rank = world.rank,
            size = world.size,
            node = world.node(),
            nodes = world.node_count(),
            local_rank = world.local_rank(),
            local_size = world.local_size(),
            "hpc-runtime initialised"
        );
        Ok(world)
    }

    /// A world of `node_names.len()` members whose collectives `relay` carries,
    /// `rank` being this process: for processes that are not ranks of a job but
    /// must connect to each other (a transport among the collectives proxies of
    /// several nodes, bootstrapped through their ranks). Members with equal node
    /// names share a node. A `timeout` of 0 or beyond [`env::MAX_TIMEOUT`] is
    /// [`Error::InvalidArgument`], as [`World::init_with`]'s is: the world's
    /// timeout bounds every wait of what is built on it (`Duration::MAX` was
    /// taken, and the first deadline made from it, `Instant::now() +
    /// timeout`, panicked with an overflow in the transport).
    pub fn relayed(
        rank: usize,
        node_names: &[String],
        timeout: Duration,
        relay: Box<dyn Relay>,
    ) -> Result<World> {
        env::check_timeout("hpc_runtime::World::relayed's timeout", timeout)
            .map_err(Error::InvalidArgument)?;
        if rank >= node_names.len() {
            return Err(Error::InvalidArgument(format!(
                "member {rank} of a relayed world of {}",
                node_names.len()
            )));
        }
        Ok(World {
            rank,
            size: node_names.len(),
            nodes: NodeMap::from_names(node_names),
            timeout,
            bootstrap: Bootstrap::Relayed,
            backend: Backend::Relayed(relay),
        })
    }

    fn singleton(config: &Config) -> World {
        World {
            rank: 0,
            size: 1,
            nodes: NodeMap::from_names(std::slice::from_ref(&config.node_name)),
            timeout: config.timeout,
            bootstrap: Bootstrap::Singleton,
            backend: Backend::Singleton,
        }
    }

    #[cfg(feature = "mpi")]
    fn mpi(config: &Config, launcher: MpiLauncher, size_hint: Option<usize>) -> Result<World> {
        let backend = crate::mpi_backend::MpiBackend::init(config.timeout)?;
        let (rank, size) = (backend.rank(), backend.size());
        if let Some(hint) = size_hint {
            if hint != size {
                let why = match launcher {
                    MpiLauncher::SlurmNoPmi => {
                        "srun started the tasks without a PMI plugin this MPI understands: use `srun --mpi=pmix`"
                    }
                    _ => "the launcher and the MPI library do not match (e.g. an Open MPI program started by MPICH's mpiexec)",
                };
                return Err(Error::Bootstrap(format!(
                    "{} announced {hint} ranks but MPI sees {size}: {why}",
                    launcher.name()
                )));
            }
        }
        let names = backend.allgather(config.node_name.as_bytes(), "init")?;
        let names: Vec<String> = names
            .iter()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect();
        Ok(World {
            rank,
            size,
            nodes: NodeMap::from_names(&names),
            timeout: config.timeout,
            bootstrap: Bootstrap::Mpi {
                launcher: Some(launcher),
                library: backend.library().to_string(),
                threading: backend.threading().to_string(),
            },
            backend: Backend::Mpi(Box::new(backend)),
        })
    }

    #[cfg(not(feature = "mpi"))]
    fn mpi(config: &Config, launcher: MpiLauncher, size_hint: Option<usize>) -> Result<World> {
        match size_hint {
            Some(1) => {
                tracing::warn!(
                    launcher = launcher.name(),
                    "started by an MPI launcher with one rank; built without the `mpi` feature, running as a singleton"
                );
                Ok(World::singleton(config))
            }
            _ => Err(Error::Bootstrap(format!(
                "started by {} ({} ranks) but this program was built without the `mpi` \
                 feature of hpc-runtime: rebuild with `--features mpi`, or launch with `hpc run -n N`",
                launcher.name(),
                size_hint.map_or("an unknown number of".to_string(), |s| s.to_string())
            ))),
        }
    }

    /// This process's rank, `0..size()`.
    pub fn rank(&self) -> usize {
        self.rank
    }
    /// Number of ranks in the job.
    pub fn size(&self) -> usize {
        self.size
    }
    /// Rank among the ranks on this node.
    pub fn local_rank(&self) -> usize {
        self.nodes.local_rank(self.rank)
    }
    /// Number of ranks on this node.
    pub fn local_size(&self) -> usize {
        self.nodes.local_size(self.rank)
    }
    /// This rank's node id, `0..node_count()` (node 0 holds rank 0).
    pub fn node(&self) -> usize {
        self.nodes.node_of(self.rank)
    }
    /// Number of nodes in the job.
    pub fn node_count(&self) -> usize {
        self.nodes.node_count()
    }
    /// The node id of any rank (it panics, naming it, for a rank beyond the
    /// job's, as [`NodeMap`] says).
    pub fn node_of(&self, rank: usize) -> usize {
        self.nodes.node_of(rank)
    }
    /// Whether two ranks share a node (and so can use shared memory).
    pub fn same_node(&self, a: usize, b: usize) -> bool {
        self.nodes.same_node(a, b)
    }
    /// The full node layout.
    pub fn nodes(&self) -> &NodeMap {
        &self.nodes
    }
    /// How this process joined the job.
    pub fn bootstrap(&self) -> &Bootstrap {
        &self.bootstrap
    }
    /// The bound on blocking calls.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Waits until every rank has called `barrier`.
    pub fn barrier(&self) -> Result<()> {
        match &self.backend {
            Backend::Singleton => Ok(()),
            Backend::Relayed(r) => r.allgather(&[]).map(|_| ()),
            Backend::Launcher(l) => lock(l)?.collective(Op::Barrier, &[]).map(|_| ()),
            #[cfg(feature = "mpi")]
            Backend::Mpi(m) => m.allgather(&[], "barrier").map(|_| ()),
        }
    }

    /// Every rank contributes `mine`; every rank receives all contributions, indexed by
    /// rank. Contributions may differ in length. Under `hpc run` the launcher carries
    /// at most [`wire::MAX_DATA`](crate::wire::MAX_DATA) bytes a contribution and a
    /// frame a result: more is an error (the endpoints of a job, not bulk data).
    pub fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let parts = match &self.backend {
            Backend::Singleton => vec![mine.to_vec()],
            Backend::Relayed(r) => r.allgather(mine)?,
            Backend::Launcher(l) => lock(l)?.collective(Op::Allgather, mine)?,
            #[cfg(feature = "mpi")]
            Backend::Mpi(m) => m.allgather(mine, "allgather")?,
        };
        if parts.len() != self.size {
            return Err(Error::Protocol(format!(
                "allgather returned {} parts for {} ranks",
                parts.len(),
                self.size
            )));
        }
        Ok(parts)
    }

    /// The root's `data` is delivered to every rank (other ranks' `data` is ignored).
    pub fn broadcast(&self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        if root >= self.size {
            return Err(Error::InvalidArgument(format!(
                "broadcast root {root} is not a rank of a job of {}",
                self.size
            )));
        }
        match &self.backend {
            Backend::Singleton => Ok(data.to_vec()),
            Backend::Relayed(r) => {
                let mut parts = r.allgather(if root == self.rank { data } else { &[] })?;
                if parts.len() != self.size {
                    return Err(Error::Protocol(format!(
                        "relayed broadcast returned {} parts for {} members",
                        parts.len(),
                        self.size
                    )));
                }
                Ok(parts.swap_remove(root))
            }
            Backend::Launcher(l) => {
                let payload = if root == self.rank { data } else { &[] };
                let mut parts =
                    lock(l)?.collective(Op::Broadcast { root: root as u32 }, payload)?;
                parts
                    .pop()
                    .ok_or_else(|| Error::Protocol("empty broadcast result".into()))
            }
            #[cfg(feature = "mpi")]
            Backend::Mpi(m) => m.broadcast(root, data),
        }
    }

    /// The MPI world communicator, when the job was bootstrapped through MPI.
    #[cfg(feature = "mpi")]
    pub fn mpi_communicator(&self) -> Option<&mpi::topology::SimpleCommunicator> {
        match &self.backend {
            Backend::Mpi(m) => Some(m.world()),
            _ => None,
        }
    }
}

fn lock(l: &Mutex<LauncherLink>) -> Result<std::sync::MutexGuard<'_, LauncherLink>> {
    l.lock()
        .map_err(|_| Error::Protocol("a previous call on this world panicked".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    /// Members that meet in this process: each allgather waits for all, as a
    /// relay over real links does.
    struct Local {
        me: usize,
        slots: Arc<Mutex<Vec<Vec<u8>>>>,
        barrier: Arc<Barrier>,
    }

    impl Relay for Local {
        fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
            self.slots.lock().unwrap()[self.me] = mine.to_vec();
            self.barrier.wait();
            let all = self.slots.lock().unwrap().clone();
            self.barrier.wait();
            Ok(all)
        }
    }

    /// `HPC_NODE_NAME` holding a line break and a terminal's escape was taken
    /// as the node's name and written as it is (`selftest ok: … node 0 (a` on one
    /// line, `b` and a colour change on the next). Refused, shown escaped.
    #[test]
    fn a_node_name_with_a_control_character_is_refused() {
        let map = |v: &str| HashMap::from([(env::NODE_NAME.to_string(), v.to_string())]);
        let e = Config::from_map(map("a\nb\u{1b}[31m"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("holds a control character") && e.contains("\\n") && !e.contains('\n'),
            "{e}"
        );
        assert_eq!(
            Config::from_map(map("node-7.cluster")).unwrap().node_name,
            "node-7.cluster"
        );
        // A line separator and a right-to-left override were taken (the
        // check was `char::is_control`, which neither is).
        for odd in ["a\u{2028}b", "node\u{202e}7"] {
            let e = Config::from_map(map(odd)).unwrap_err().to_string();
            assert!(e.contains("holds a control character"), "{e}");
        }
    }

    #[test]
    fn a_relayed_world_runs_its_collectives_through_the_relay() {
        let n = 3;
        let slots = Arc::new(Mutex::new(vec![Vec::new(); n]));
        let barrier = Arc::new(Barrier::new(n));
        let names: Vec<String> = ["a", "b", "a"].iter().map(|s| s.to_string()).collect();
        let threads: Vec<_> = (0..n)
            .map(|me| {
                let relay = Local {
                    me,
                    slots: slots.clone(),
                    barrier: barrier.clone(),
                };
                let names = names.clone();
                std::thread::spawn(move || {
                    let w = World::relayed(me, &names, Duration::from_secs(5), Box::new(relay))
                        .unwrap();
                    assert_eq!((w.rank(), w.size(), w.node_count()), (me, 3, 2));
                    assert!(w.same_node(0, 2) && !w.same_node(0, 1));
                    assert_eq!(w.bootstrap(), &Bootstrap::Relayed);
                    let all = w.allgather(&[me as u8; 2]).unwrap();
                    assert_eq!(all, vec![vec![0, 0], vec![1, 1], vec![2, 2]]);
                    w.barrier().unwrap();
                    let b = w.broadcast(1, &[me as u8 + 10]).unwrap();
                    assert_eq!(b, vec![11]);
                    assert!(w.broadcast(3, &[]).is_err());
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let relay = Local {
            me: 0,
            slots,
            barrier,
        };
        assert!(World::relayed(3, &names, Duration::from_secs(1), Box::new(relay)).is_err());
    }

    /// A relayed world given a timeout no wait can be bounded by: taken, and
    /// the first deadline made from it (`Instant::now() + timeout`, as the
    /// tcp transport's set-up makes) panicked with an overflow. Refused
    /// naming it, as `init_with`'s `Config::timeout` is; a week is still taken.
    #[test]
    fn a_relayed_world_refuses_a_timeout_no_wait_is_bounded_by() {
        struct Alone;
        impl Relay for Alone {
            fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
                Ok(vec![mine.to_vec()])
            }
        }
        let names = ["a".to_string()];
        for t in [
            Duration::ZERO,
            Duration::MAX,
            env::MAX_TIMEOUT + Duration::from_nanos(1),
        ] {
            match World::relayed(0, &names, t, Box::new(Alone)) {
                Err(Error::InvalidArgument(e)) => assert!(
                    e.contains("World::relayed's timeout") && e.contains("at most a week"),
                    "{e}"
                ),
                other => panic!("{t:?} taken: {other:?}"),
            }
        }
        let w = World::relayed(0, &names, env::MAX_TIMEOUT, Box::new(Alone)).unwrap();
        assert!(std::time::Instant::now().checked_add(w.timeout()).is_some());
    }
}
