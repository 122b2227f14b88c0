//! `hpc cluster`: a Slurm + PMIx cluster of Docker containers on this machine, for
//! any workspace: one controller (`ctl`: slurmctld, munge) and N compute nodes
//! (`node1`..: slurmd, munge, Open MPI, PMIx), each a host with its own address on a
//! private Docker network, with the binaries of `--bin` mounted read-only at
//! `/opt/hpc/bin` (on the PATH) and the work folder's `shared/` at `/shared` on
//! every node. `hpc cluster exec -- srun --mpi=pmix -N 2 -n 4 APP` runs a job there.
//!
//! Why a shell script embedded in the binary rather than a port to Rust: the
//! orchestration is a sequence of `docker`, `mmdebstrap` and `flock` calls (the node
//! image, the network, the containers, waiting for Slurm, the bounded `exec` that
//! prints the cluster's state before it ends a job that does not end) whose
//! behaviour the repository's cluster tests have measured, and a shell states each
//! call as the user would type it. The script (`cluster/cluster.sh`, with the
//! nodes' entry point `cluster/node-init.sh` and `cluster/slurm.conf.in`) is in the
//! binary through `include_str!`, so `hpc` needs no file of this repository: it
//! works from any workspace. It is the one implementation (`cargo xtask cluster`
//! forwards here). Rust does what a shell does badly, before anything runs: it
//! checks the arguments (errors name the flag or the variable), looks for
//! `docker` and its daemon (the error says how to fix it), resolves the folders, and
//! writes the files the containers mount (`slurm.conf` for the number of nodes,
//! `node-init.sh`) into the work folder. Then this process becomes `bash` running
//! the script (`exec`), so that the output, the signals and the exit status are the
//! script's: `exec` passes the command's status through (124 when `--timeout`
//! ended it, 125 when the cluster is not up), the other actions exit 0, or 1 when
//! a step failed.
//!
//! Folders: the work folder (`HPC_CLUSTER_DIR`, default
//! `$XDG_CACHE_HOME/hpc-rs/cluster/NAME`, else `~/.cache/hpc-rs/cluster/NAME`) holds
//! the configuration, the munge key and `shared/` (the nodes' `/shared`, with the
//! daemons' logs in `shared/log`); the cache (`HPC_CACHE_DIR`, default
//! `.../hpc-rs/cluster-cache`) holds the node file system that mmdebstrap makes once
//! (the image is then `docker import`ed: no registry is needed). `HPC_CLUSTER_NAME`
//! (default `hpc-cluster`) prefixes the containers and the network, so that
//! clusters of different names run side by side.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;

use hpc_runtime::env;

use super::UsageError;

/// The orchestration, run by bash.
const SCRIPT: &str = include_str!("cluster/cluster.sh");
/// The containers' entry point (munge, then the Slurm daemon of the node's role).
const NODE_INIT: &str = include_str!("cluster/node-init.sh");
/// Slurm's configuration, `@NODES@` and `@CPUS@` to fill.
const SLURM_CONF: &str = include_str!("cluster/slurm.conf.in");

/// The most compute nodes `up` starts (each a container with its own slurmd).
pub const MAX_NODES: usize = 8;
/// The longest `exec --timeout`, in seconds: a day.
pub const MAX_TIMEOUT_S: u64 = 86_400;
/// The cluster name when `HPC_CLUSTER_NAME` is unset.
pub const DEFAULT_NAME: &str = "hpc-cluster";
/// The longest cluster name (Docker names its containers `NAME-node8-dpu`).
const MAX_NAME: usize = 48;

/// Arguments of `hpc cluster`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    cargo build --release --features mpi\n  \
    hpc cluster up --nodes 2 --bin target/release\n  \
    hpc cluster exec -- srun --mpi=pmix -N 2 -n 4 my-sim\n  \
    hpc cluster status\n  \
    hpc cluster kill-node node2           (or stop-node, cut-node / heal-node)\n  \
    hpc cluster down\n\n\
    Needs docker (a user of the docker group is enough) and, for the first up,\n  \
    mmdebstrap (Debian: apt-get install mmdebstrap) and a reachable Debian mirror.\n\n\
    Environment: HPC_CLUSTER_NAME (default hpc-cluster), HPC_CLUSTER_DIR (work\n  \
    folder; its shared/ is /shared on the nodes), HPC_CACHE_DIR (node file system).\n\n\
    Exit status: 2 bad arguments or no docker (nothing ran); exec: the command's\n  \
    status, 124 when --timeout ended it, 125 when the cluster is not up; otherwise 0,\n  \
    or 1 when a step failed.")]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub action: Action,
}

/// The actions of `hpc cluster`.
#[derive(clap::Subcommand, Debug)]
pub enum Action {
    /// Start the cluster (one of this name that is up is replaced); builds the node
    /// image first if this machine has none (mmdebstrap, a few minutes, once).
    Up(Up),
    /// Build the node image only.
    Image,
    /// Remove this cluster's containers and network (the work folder stays).
    Down,
    /// Show this cluster's containers and Slurm's view of its nodes.
    Status,
    /// Run a command on the controller, in /shared (e.g. `srun --mpi=pmix ...`).
    Exec(Exec),
    /// Stop a node's container at once (`docker stop -t 0`).
    StopNode(Node),
    /// Kill a node's container (`docker kill`), as a crash would.
    KillNode(Node),
    /// Cut a node off the network (it keeps running).
    CutNode(Node),
    /// Connect a node that `cut-node` cut off again.
    HealNode(Node),
}

/// Arguments of `hpc cluster up`.
#[derive(clap::Args, Debug)]
pub struct Up {
    /// Compute nodes (1 to 8).
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    /// Folder of the binaries the jobs run, mounted read-only at /opt/hpc/bin (on the
    /// nodes' PATH). Build them with `--features mpi` for `srun --mpi=pmix`.
    #[arg(long, value_name = "DIR", default_value = "target/release")]
    pub bin: PathBuf,
    /// Apptainer on every node: DIR holds `bin/apptainer` and `rootfs/` (the folder
    /// `HPC_TEST_CONTAINERS=1 cargo xtask setup` makes in the SDK's repository).
    #[arg(long, value_name = "DIR")]
    pub apptainer: Option<PathBuf>,
    /// A DPU container `nodeI-dpu` beside each node, running `hpc proxy
    /// --dpu-service` (needs `hpc` in --bin).
    #[arg(long)]
    pub dpus: bool,
}

/// Arguments of `hpc cluster exec`.
#[derive(clap::Args, Debug)]
pub struct Exec {
    /// Seconds after which the command is ended (status 124), the cluster's state
    /// (queue, nodes, processes, daemons' logs) printed first. Without a cluster up,
    /// nothing runs: status 125.
    #[arg(long, value_name = "S", default_value_t = 600)]
    pub timeout: u64,
    /// The command and its arguments.
    #[arg(
        value_name = "CMD",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}

/// The node a fault is for.
#[derive(clap::Args, Debug)]
pub struct Node {
    /// `nodeN`, `nodeN-dpu` or `ctl`.
    #[arg(value_name = "NODE", value_parser = node_name)]
    pub node: String,
}

/// A node's name as `up` names its containers: `ctl`, `nodeN`, `nodeN-dpu`.
fn node_name(s: &str) -> Result<String, String> {
    let base = s.strip_suffix("-dpu").unwrap_or(s);
    // Written as `up` writes it: digits without a sign or a leading zero (`node+1`
    // and `node01` parse as 1 but name no container).
    let numbered = base.strip_prefix("node").is_some_and(|n| {
        !n.starts_with('0')
            && n.bytes().all(|b| b.is_ascii_digit())
            && n.parse::<usize>()
                .is_ok_and(|n| (1..=MAX_NODES).contains(&n))
    });
    if s == "ctl" || numbered {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{} is not a node of the cluster (ctl, node1..node{MAX_NODES}, nodeN-dpu)",
            hpc_env::shown(s)
        ))
    }
}

/// Where a cluster lives: its name and folders (absolute).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// Prefix of its containers and network.
    pub name: String,
    /// Work folder: configuration, keys, `shared/`.
    pub work: PathBuf,
    /// Cache of the node file system.
    pub cache: PathBuf,
}

/// A variable's value as [`hpc_runtime::env::var`] reads it: an empty value counts
/// as unset; one that is not UTF-8 is an error naming it.
type Lookup<'a> = &'a dyn Fn(&str) -> Result<Option<String>, String>;

fn nonempty(get: Lookup<'_>, name: &str) -> Result<Option<String>, UsageError> {
    Ok(get(name).map_err(UsageError)?.filter(|v| !v.is_empty()))
}

impl Place {
    /// The cluster that the environment names (see the module's doc), paths relative
    /// to `cwd` made absolute.
    pub fn resolve(get: Lookup<'_>, cwd: &Path) -> Result<Place, UsageError> {
        let name = nonempty(get, env::CLUSTER_NAME)?.unwrap_or_else(|| DEFAULT_NAME.into());
        check_cluster_name(&name)?;
        let absolute = |p: String| cwd.join(p);
        let base = || -> Result<PathBuf, UsageError> {
            // XDG: a relative XDG_CACHE_HOME is invalid and ignored.
            if let Some(x) = nonempty(get, "XDG_CACHE_HOME")?.filter(|x| x.starts_with('/')) {
                return Ok(PathBuf::from(x).join("hpc-rs"));
            }
            // A relative HOME is taken from `cwd` as the variables are: kept
            // relative, it reached `docker run -v` (which reads such a source as
            // a volume's name) and the script, which needs absolute folders.
            match nonempty(get, "HOME")? {
                Some(h) => Ok(absolute(h).join(".cache/hpc-rs")),
                None => Err(UsageError(format!(
                    "neither XDG_CACHE_HOME nor HOME is set: name the cluster's folders \
                     with {} and {}",
                    env::CLUSTER_DIR,
                    env::CACHE_DIR
                ))),
            }
        };
        let work = match nonempty(get, env::CLUSTER_DIR)? {
            Some(d) => absolute(d),
            None => base()?.join("cluster").join(&name),
        };
        let cache = match nonempty(get, env::CACHE_DIR)? {
            Some(d) => absolute(d),
            None => base()?.join("cluster-cache"),
        };
        for (what, p) in [(env::CLUSTER_DIR, &work), (env::CACHE_DIR, &cache)] {
            mountable(what, p)?;
            folder_or_missing(what, p)?;
            // `HPC_CLUSTER_DIR=/` (as root): `slurm.conf` and `node-init.sh`
            // were written into `/`, and the nodes mounted it.
            if let Some(why) = hpc_io::system::system_folder(p) {
                return Err(UsageError(format!(
                    "{what}={}: {why}, not a folder for a cluster's files: name a folder of \
                     your own, or unset {what} for the default (under XDG_CACHE_HOME or \
                     HOME/.cache)",
                    hpc_io::message::path(p)
                )));
            }
        }
        Ok(Place { name, work, cache })
    }
}

/// Docker's names: a letter or digit, then letters, digits, `_`, `.`, `-`.
fn check_cluster_name(name: &str) -> Result<(), UsageError> {
    let ok = name.len() <= MAX_NAME
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok {
        Ok(())
    } else {
        Err(UsageError(format!(
            "{}={} is not a cluster name: at most {MAX_NAME} letters, digits, '_', \
             '.' or '-', beginning with a letter or digit",
            env::CLUSTER_NAME,
            hpc_env::shown(name)
        )))
    }
}

/// A path that `docker run -v PATH:...` can mount: UTF-8, without `:` or `,`.
fn mountable(what: &str, p: &Path) -> Result<(), UsageError> {
    match p.to_str() {
        Some(s) if !s.contains([':', ',']) => Ok(()),
        _ => Err(UsageError(format!(
            "{what} {}: Docker cannot mount a path with ':' or ',' or that is not UTF-8",
            hpc_env::short(&p.to_string_lossy())
        ))),
    }
}

/// A folder of the cluster (`what` names its variable) is a directory or does not
/// exist yet (it is made): a file or a device there (`/dev/null`) is refused
/// before anything runs, where `up` said only "creating /dev/null: File exists".
fn folder_or_missing(what: &str, p: &Path) -> Result<(), UsageError> {
    match std::fs::metadata(p) {
        Ok(m) if !m.is_dir() => Err(UsageError(format!(
            "{what} {}: it exists and is not a directory; name a directory (it is made \
             when missing) or unset {what} for the default",
            hpc_env::short(&p.to_string_lossy())
        ))),
        _ => Ok(()),
    }
}

/// Whether `p` is a regular file that someone may execute.
fn executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `--bin`: an existing folder that holds at least one executable; its canonical path.
fn check_bin(bin: &Path, dpus: bool) -> Result<PathBuf, UsageError> {
    // Cut when long: a path of 100,000 characters was echoed whole.
    let shown = hpc_env::short(&bin.to_string_lossy());
    let build = "build the application first (cargo build --release --features mpi) or \
                 name the folder of its binaries with --bin";
    let meta =
        std::fs::metadata(bin).map_err(|e| UsageError(format!("--bin {shown}: {e}; {build}")))?;
    if !meta.is_dir() {
        return Err(UsageError(format!(
            "--bin {shown} is not a directory (give the folder that holds the binaries)"
        )));
    }
    let dir = bin
        .canonicalize()
        .map_err(|e| UsageError(format!("--bin {shown}: {e}")))?;
    mountable("--bin", &dir)?;
    let entries = std::fs::read_dir(&dir)
        .map_err(|e| UsageError(format!("--bin {shown}: cannot list it: {e}")))?;
    if !entries.flatten().any(|e| executable(&e.path())) {
        return Err(UsageError(format!(
            "--bin {shown} holds no executable file; {build}"
        )));
    }
    if dpus && !executable(&dir.join("hpc")) {
        return Err(UsageError(format!(
            "--dpus runs `hpc proxy --dpu-service` on each DPU, but --bin {shown} has no \
             hpc (copy the `hpc` of this SDK, built for the nodes, there)"
        )));
    }
    Ok(dir)
}

/// `--apptainer`: a folder with `bin/apptainer` and `rootfs/`; its canonical path.
fn check_apptainer(dir: &Path) -> Result<PathBuf, UsageError> {
    let shown = hpc_env::short(&dir.to_string_lossy());
    if !executable(&dir.join("bin/apptainer")) || !dir.join("rootfs").is_dir() {
        return Err(UsageError(format!(
            "--apptainer {shown}: no bin/apptainer and rootfs/ there \
             ({}=1 cargo xtask setup makes them in the SDK's repository)",
            env::TEST_CONTAINERS
        )));
    }
    let dir = dir
        .canonicalize()
        .map_err(|e| UsageError(format!("--apptainer {shown}: {e}")))?;
    mountable("--apptainer", &dir)?;
    Ok(dir)
}

/// Slurm's configuration for `nodes` nodes of `cpus` CPUs each.
fn slurm_conf(nodes: usize, cpus: usize) -> String {
    SLURM_CONF
        .replace("@NODES@", &nodes.to_string())
        .replace("@CPUS@", &cpus.to_string())
}

/// `program` on the PATH.
fn on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(program))
        .find(|p| executable(p))
}

/// Docker is installed; with `daemon`, its daemon answers this user too.
fn check_docker(daemon: bool) -> Result<(), UsageError> {
    if on_path("docker").is_none() {
        return Err(UsageError(
            "docker is not on the PATH: hpc cluster runs its nodes as Docker containers; \
             install Docker Engine (https://docs.docker.com/engine/install/, or apt-get \
             install docker.io) and let this user use it (the docker group)"
                .into(),
        ));
    }
    if !daemon {
        return Ok(());
    }
    docker_answers("docker".as_ref(), DOCKER_LIMIT)
}

/// How long `docker version` may take to say whether its daemon answers: a
/// daemon that hangs (or a `docker` that waits on one) stopped `hpc cluster`
/// without a word.
const DOCKER_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether the Docker daemon answers `program version`, within `limit`; its
/// output kept bounded ([`hpc_io::tool`]).
fn docker_answers(program: &std::ffi::OsStr, limit: std::time::Duration) -> Result<(), UsageError> {
    match hpc_io::tool::output_within(
        Command::new(program).args(["version", "--format", "{{.Server.Version}}"]),
        limit,
        64 << 10,
    ) {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(UsageError(format!(
            "the Docker daemon does not answer ({}): start it (systemctl start docker) \
             or, for `permission denied`, add this user to the docker group",
            hpc_io::message::said(&hpc_io::message::cut(
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        ))),
        Err(e @ hpc_io::tool::ToolError::TimedOut(_)) => Err(UsageError(format!(
            "the Docker daemon does not answer: {e}; check it (systemctl status docker)"
        ))),
        Err(e) => Err(UsageError(e.to_string())),
    }
}

/// The script's arguments for `action`, checked, and for `up` the number of nodes
/// (whose `slurm.conf` to write).
fn script_args(action: &Action) -> Result<(Vec<OsString>, Option<usize>), UsageError> {
    let word = |w: &str| vec![OsString::from(w)];
    let node = |w: &str, n: &Node| vec![OsString::from(w), OsString::from(&n.node)];
    let args = match action {
        Action::Up(up) => {
            super::check_between("--nodes", up.nodes, 1, MAX_NODES)?;
            let bin = check_bin(&up.bin, up.dpus)?;
            let mut a = word("up");
            a.extend(["--nodes".into(), up.nodes.to_string().into()]);
            a.extend(["--bin".into(), bin.into_os_string()]);
            if let Some(dir) = &up.apptainer {
                a.extend(["--apptainer".into(), check_apptainer(dir)?.into_os_string()]);
            }
            if up.dpus {
                a.push("--dpus".into());
            }
            return Ok((a, Some(up.nodes)));
        }
        Action::Image => word("image"),
        Action::Down => word("down"),
        Action::Status => word("status"),
        Action::Exec(e) => {
            if !(1..=MAX_TIMEOUT_S).contains(&e.timeout) {
                return Err(UsageError(format!(
                    "--timeout {} is outside 1..={MAX_TIMEOUT_S} seconds",
                    e.timeout
                )));
            }
            let mut a = word("exec");
            a.extend(["--timeout".into(), e.timeout.to_string().into()]);
            a.extend(e.command.iter().cloned());
            a
        }
        Action::StopNode(n) => node("stop-node", n),
        Action::KillNode(n) => node("kill-node", n),
        Action::CutNode(n) => node("cut-node", n),
        Action::HealNode(n) => node("heal-node", n),
    };
    Ok((args, None))
}

/// The file in the work folder that `up` and `down` lock ([`lock_work_folder`]).
const LOCK_FILE: &str = ".cluster.lock";

/// Holds the work folder `work` of cluster `name` for one `up` or `down` at a
/// time, until the script this process becomes has ended (the lock's
/// descriptor is left open across the `exec`). Two `up`s at once (another
/// `--nodes`) wrote each other's `slurm.conf` and started containers under the
/// same names: one failed on a name in use, or the cluster came up with the
/// other's node count and waited 90 s for nodes that never came (hostile pass
/// 21). The second is refused at once.
fn lock_work_folder(work: &Path, name: &str) -> anyhow::Result<std::os::fd::OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt as _;
    use std::os::unix::io::AsRawFd as _;
    let path = work.join(LOCK_FILE);
    // Never through a link, never a FIFO's open that waits; not truncated.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .with_context(|| {
            format!(
                "opening the cluster's lock {}",
                hpc_io::message::path(&path)
            )
        })?;
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Err(UsageError(format!(
            "{} is not a regular file: remove it",
            hpc_io::message::path(&path)
        ))
        .into());
    }
    // SAFETY: flock and fcntl on a descriptor this function owns (open until
    // `f` is dropped); they touch no memory of this process.
    let locked = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    if !locked {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::WouldBlock {
            return Err(UsageError(format!(
                "cluster {name}: another hpc cluster up or down of it runs (it holds {}); \
                 wait for it to end",
                hpc_io::message::path(&path)
            ))
            .into());
        }
        return Err(
            anyhow::Error::new(e).context(format!("locking {}", hpc_io::message::path(&path)))
        );
    }
    // Kept by the script after the `exec`: a duplicate without close-on-exec,
    // numbered 10 or more, above the descriptors the script itself opens
    // (8 and 9), which would close it.
    // SAFETY: as above.
    let high = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_DUPFD, 10) };
    if high == -1 {
        return Err(
            anyhow::Error::new(std::io::Error::last_os_error()).context(format!(
                "keeping {} open for the script",
                hpc_io::message::path(&path)
            )),
        );
    }
    // SAFETY: `high` is a new descriptor that nothing else owns.
    Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(high) })
}

/// Checks that the work folder `work` (from `HPC_CLUSTER_DIR`, or the default)
/// is the cluster's own: missing, empty, or holding the `slurm.conf` that `up`
/// writes (its first line says so). A folder of the user's (`HPC_CLUSTER_DIR=.`
/// in a project) had its own `slurm.conf` and `node-init.sh` replaced without a
/// word and its `shared/` made writable by everyone.
fn check_work_folder(work: &Path) -> Result<(), UsageError> {
    let Ok(entries) = std::fs::read_dir(work) else {
        return Ok(());
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != LOCK_FILE)
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    let mark = SLURM_CONF.lines().next().unwrap_or_default();
    let ours = hpc_io::read::read_regular_to_string(
        work.join("slurm.conf"),
        hpc_io::read::MAX_CONFIG_BYTES,
    )
    .is_ok_and(|text| text.lines().next() == Some(mark));
    if ours {
        return Ok(());
    }
    names.sort();
    let more = names.len().saturating_sub(4);
    names.truncate(4);
    let names: Vec<String> = names.iter().map(|n| hpc_env::short(n)).collect();
    Err(UsageError(format!(
        "{}={}: it holds {}{} and no slurm.conf that hpc cluster wrote: it is not a cluster's \
         work folder, whose slurm.conf, node-init.sh, munge.key and shared/ (made writable by \
         all) up writes; name a folder of its own (a new one is made), or unset {} for the \
         default",
        env::CLUSTER_DIR,
        hpc_io::message::path(work),
        names.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        },
        env::CLUSTER_DIR
    )))
}

/// Writes what the containers of `nodes` nodes mount from the work folder.
fn write_work_files(work: &Path, nodes: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(work)
        .with_context(|| format!("creating {}", hpc_io::message::path(work)))?;
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    super::replace_file(&work.join("slurm.conf"), slurm_conf(nodes, cpus).as_bytes())?;
    let init = work.join("node-init.sh");
    // Executable from the moment it has its name: the mode was set by path
    // after the rename, on whatever the name held by then (hostile pass 20).
    super::replace_file_with_mode(&init, NODE_INIT.as_bytes(), 0o755)?;
    Ok(())
}

/// `hpc cluster`: checks, then becomes the script (returns only on an error).
pub fn exec(args: Args) -> anyhow::Result<i32> {
    let cwd = std::env::current_dir().context("the current directory")?;
    let place = Place::resolve(&env::var, &cwd)?;
    let (script_args, nodes) = script_args(&args.action)?;
    // Every action asks the daemon: one that hangs held `status`, `down` and
    // `exec` in the script's first `docker ps` without end; its bounded
    // `docker version` names it in 30 s.
    check_docker(true)?;
    // Held until the script ends: one `up` or `down` of a cluster at a time
    // (the lock is made only in a folder that is the cluster's: a user's
    // folder is refused, or left alone by `down`, before it is written).
    let mut _lock = None;
    if matches!(args.action, Action::Down)
        && place.work.is_dir()
        && check_work_folder(&place.work).is_ok()
    {
        _lock = Some(lock_work_folder(&place.work, &place.name)?);
    }
    if let Some(nodes) = nodes {
        check_work_folder(&place.work)?;
        std::fs::create_dir_all(&place.work)
            .with_context(|| format!("creating {}", hpc_io::message::path(&place.work)))?;
        _lock = Some(lock_work_folder(&place.work, &place.name)?);
        // Again, locked: another `up` may have written it meanwhile.
        check_work_folder(&place.work)?;
        write_work_files(&place.work, nodes)?;
        super::say(&format!(
            "cluster {}: work folder {} (the nodes' /shared is its shared/)",
            place.name,
            hpc_io::message::path(&place.work)
        ))?;
    }
    let e = Command::new("bash")
        .arg("-c")
        .arg(SCRIPT)
        .arg("hpc-cluster")
        .args(&script_args)
        .env(env::CLUSTER_NAME, &place.name)
        .env(env::CLUSTER_DIR, &place.work)
        .env(env::CACHE_DIR, &place.cache)
        .exec();
    Err(anyhow::Error::new(e).context("running bash (hpc cluster needs it on the PATH)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    /// A `docker` that hangs is stopped at its limit and named: `hpc cluster
    /// up` waited for it without end (pass 18's noticed list).
    #[test]
    fn a_docker_that_hangs_is_stopped_and_named() {
        let d = scratch("docker-hang");
        let docker = d.join("docker");
        std::fs::write(&docker, "#!/bin/sh\nexec sleep 60\n").unwrap();
        std::fs::set_permissions(&docker, std::fs::Permissions::from_mode(0o755)).unwrap();
        let t = std::time::Instant::now();
        let e =
            docker_answers(docker.as_os_str(), std::time::Duration::from_millis(300)).unwrap_err();
        let took = t.elapsed();
        let _ = std::fs::remove_dir_all(&d);
        assert!(took < std::time::Duration::from_secs(10), "{took:?}");
        assert!(
            e.0.starts_with("the Docker daemon does not answer: ")
                && e.0
                    .contains("version --format {{.Server.Version}} did not end within 0.3 s"),
            "{}",
            e.0
        );
    }

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        action: Action,
    }

    fn parse(args: &[&str]) -> Result<Action, clap::Error> {
        Cli::try_parse_from(std::iter::once("cluster").chain(args.iter().copied()))
            .map(|c| c.action)
    }

    fn scratch(test: &str) -> hpc_test_support::TmpDir {
        hpc_test_support::TmpDir::new("hpc-cluster", test)
    }

    fn err(r: Result<impl std::fmt::Debug, UsageError>) -> String {
        r.expect_err("must be refused").0
    }

    fn up(bin: &Path, nodes: usize, dpus: bool) -> Action {
        Action::Up(Up {
            nodes,
            bin: bin.to_path_buf(),
            apptainer: None,
            dpus,
        })
    }

    #[test]
    fn exec_takes_the_command_with_its_flags_after_its_own() {
        let Action::Exec(e) = parse(&["exec", "srun", "--mpi=pmix", "-N", "2", "app"]).unwrap()
        else {
            panic!("not exec")
        };
        assert_eq!(e.timeout, 600);
        assert_eq!(e.command, ["srun", "--mpi=pmix", "-N", "2", "app"]);
        let Action::Exec(e) = parse(&["exec", "--timeout", "10", "--", "sleep", "300"]).unwrap()
        else {
            panic!("not exec")
        };
        assert_eq!(e.timeout, 10);
        assert_eq!(e.command, ["sleep", "300"]);
        // A flag after the command is the command's.
        let Action::Exec(e) = parse(&["exec", "env", "--timeout", "3"]).unwrap() else {
            panic!("not exec")
        };
        assert_eq!(e.timeout, 600);
        assert_eq!(e.command, ["env", "--timeout", "3"]);
        assert!(parse(&["exec"]).is_err(), "a command is required");
        let (a, nodes) =
            script_args(&parse(&["exec", "--timeout", "5", "hostname"]).unwrap()).unwrap();
        assert_eq!(a, ["exec", "--timeout", "5", "hostname"]);
        assert_eq!(nodes, None);
        for t in ["0", "86401"] {
            let m = err(script_args(&parse(&["exec", "--timeout", t, "x"]).unwrap()));
            assert!(m.contains("--timeout"), "{m}");
        }
    }

    #[test]
    fn node_names_are_those_up_makes() {
        for ok in ["ctl", "node1", "node8", "node2-dpu"] {
            let a = parse(&["kill-node", ok]).unwrap();
            assert_eq!(script_args(&a).unwrap().0, ["kill-node", ok]);
        }
        for bad in [
            "node0",
            "node9",
            "node",
            "ctl-dpu2",
            "other-ctl",
            "node1 ",
            "-x",
            "node+1",
            "node01",
            "node1-dpu+",
            "node+2-dpu",
        ] {
            let e = parse(&["cut-node", bad]).expect_err(bad).to_string();
            assert!(
                e.contains("is not a node") || e.contains("unexpected"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn up_checks_nodes_and_bin_before_anything_runs() {
        let s = scratch("bin");
        let empty = s.join("empty");
        std::fs::create_dir(&empty).unwrap();
        let data = s.join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("notes.txt"), "x").unwrap();
        let good = s.join("good");
        std::fs::create_dir(&good).unwrap();
        std::fs::write(good.join("app"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(good.join("app"), std::fs::Permissions::from_mode(0o755)).unwrap();

        for n in [0, MAX_NODES + 1] {
            assert!(err(script_args(&up(&good, n, false))).contains("--nodes"));
        }
        let m = err(script_args(&up(&s.join("missing"), 2, false)));
        assert!(
            m.contains("--bin") && m.contains("cargo build --release"),
            "{m}"
        );
        let m = err(script_args(&up(&good.join("app"), 2, false)));
        assert!(m.contains("not a directory"), "{m}");
        for d in [&empty, &data] {
            let m = err(script_args(&up(d, 2, false)));
            assert!(m.contains("no executable"), "{m}");
        }
        let m = err(script_args(&up(&good, 2, true)));
        assert!(m.contains("--dpus") && m.contains("no hpc"), "{m}");

        let (a, nodes) = script_args(&up(&good, 3, false)).unwrap();
        let canonical = good.canonicalize().unwrap();
        assert_eq!(
            a,
            [
                OsString::from("up"),
                "--nodes".into(),
                "3".into(),
                "--bin".into(),
                canonical.into_os_string()
            ]
        );
        assert_eq!(nodes, Some(3));
        std::fs::copy(good.join("app"), good.join("hpc")).unwrap();
        assert!(script_args(&up(&good, 1, true))
            .unwrap()
            .0
            .contains(&"--dpus".into()));

        let m = err(script_args(&Action::Up(Up {
            nodes: 2,
            bin: good.clone(),
            apptainer: Some(empty.clone()),
            dpus: false,
        })));
        assert!(
            m.contains("--apptainer") && m.contains("bin/apptainer"),
            "{m}"
        );
        let colon = s.join("a:b");
        std::fs::create_dir(&colon).unwrap();
        std::fs::copy(good.join("app"), colon.join("app")).unwrap();
        assert!(err(script_args(&up(&colon, 2, false))).contains("':'"));
        let _ = std::fs::remove_dir_all(&s);
    }

    #[test]
    fn folders_default_to_the_users_cache_and_honour_the_variables() {
        let cwd = Path::new("/tmp/app");
        let with = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| -> Result<Option<String>, String> {
                Ok(vars
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string()))
            }
        };
        let p = Place::resolve(&with(&[("HOME", "/home/u")]), cwd).unwrap();
        assert_eq!(p.name, DEFAULT_NAME);
        assert_eq!(
            p.work,
            Path::new("/home/u/.cache/hpc-rs/cluster/hpc-cluster")
        );
        assert_eq!(p.cache, Path::new("/home/u/.cache/hpc-rs/cluster-cache"));
        // Hostile pass 20: a relative HOME gave relative folders, passed as
        // they were to `docker run -v` and the script. (Folders under /tmp, not
        // new ones in /, which are refused.)
        let p = Place::resolve(&with(&[("HOME", "rel")]), cwd).unwrap();
        assert_eq!(
            p.work,
            Path::new("/tmp/app/rel/.cache/hpc-rs/cluster/hpc-cluster")
        );
        assert_eq!(
            p.cache,
            Path::new("/tmp/app/rel/.cache/hpc-rs/cluster-cache")
        );

        let p = Place::resolve(
            &with(&[
                ("HOME", "/home/u"),
                ("XDG_CACHE_HOME", "/tmp/xdg"),
                (env::CLUSTER_NAME, "dev.2"),
            ]),
            cwd,
        )
        .unwrap();
        assert_eq!(p.work, Path::new("/tmp/xdg/hpc-rs/cluster/dev.2"));
        assert_eq!(p.cache, Path::new("/tmp/xdg/hpc-rs/cluster-cache"));

        // Hostile-user pass 19: a folder of the system is refused naming the
        // variable (`HPC_CLUSTER_DIR=/` wrote `slurm.conf` into `/`).
        for (var, dir) in [
            (env::CLUSTER_DIR, "/"),
            (env::CACHE_DIR, "/etc/hpcc"),
            (env::CLUSTER_DIR, "/tmp/.."),
        ] {
            let vars = [
                ("HOME".to_string(), "/home/u".to_string()),
                (var.to_string(), dir.to_string()),
            ];
            let get = move |name: &str| -> Result<Option<String>, String> {
                Ok(vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
            };
            let e = Place::resolve(&get, cwd).unwrap_err();
            assert!(
                e.0.starts_with(&format!("{var}={dir}: it is "))
                    && e.0.contains("not a folder for a cluster's files"),
                "{}",
                e.0
            );
        }

        // Relative folders are the current directory's; no HOME is needed then.
        let p = Place::resolve(
            &with(&[(env::CLUSTER_DIR, "target/c"), (env::CACHE_DIR, "/tmp/c")]),
            cwd,
        )
        .unwrap();
        assert_eq!(p.work, Path::new("/tmp/app/target/c"));
        assert_eq!(p.cache, Path::new("/tmp/c"));

        let m = err(Place::resolve(&with(&[]), cwd));
        assert!(m.contains(env::CLUSTER_DIR) && m.contains("HOME"), "{m}");
        for bad in ["-x", "a b", "a/b", ""] {
            let vars: &'static [(&str, &str)] =
                Box::leak(Box::new([("HOME", "/tmp/h"), (env::CLUSTER_NAME, bad)]));
            let r = Place::resolve(&with(vars), cwd);
            if bad.is_empty() {
                assert_eq!(r.unwrap().name, DEFAULT_NAME, "empty is unset");
            } else {
                assert!(err(r).contains(env::CLUSTER_NAME), "{bad}");
            }
        }
        let m = err(Place::resolve(
            &with(&[("HOME", "/tmp/h"), (env::CLUSTER_DIR, "/a:b")]),
            cwd,
        ));
        assert!(m.contains(env::CLUSTER_DIR), "{m}");
        // A device or a file where a folder goes: named with its variable (it was
        // "creating /dev/null: File exists" once `up` had started).
        for var in [env::CLUSTER_DIR, env::CACHE_DIR] {
            let vars: &'static [(&str, &str)] =
                Box::leak(Box::new([("HOME", "/tmp/h"), (var, "/dev/null")]));
            let m = err(Place::resolve(&with(vars), cwd));
            assert!(
                m.contains(&format!("{var} /dev/null")) && m.contains("not a directory"),
                "{m}"
            );
        }
        let bad_utf8 = |name: &str| -> Result<Option<String>, String> {
            if name == env::CLUSTER_NAME {
                Err(format!("{} is not valid UTF-8", env::CLUSTER_NAME))
            } else {
                Ok(None)
            }
        };
        assert!(err(Place::resolve(&bad_utf8, cwd)).contains(env::CLUSTER_NAME));
    }

    #[test]
    fn embedded_files_are_complete() {
        let conf = slurm_conf(3, 16);
        assert!(!conf.contains('@'), "{conf}");
        assert!(conf.contains("NodeName=node[1-3] CPUs=16"), "{conf}");
        assert!(conf.contains("MpiDefault=pmix"));
        assert!(NODE_INIT.starts_with("#!/bin/sh"));
        // The script parses, and runs only with the folders `exec` sets.
        let o = Command::new("bash")
            .args(["-n", "-c", SCRIPT])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let o = Command::new("bash")
            .args(["-c", SCRIPT, "hpc-cluster", "status"])
            .env_remove(env::CLUSTER_DIR)
            .output()
            .unwrap();
        assert!(!o.status.success());
        assert!(String::from_utf8_lossy(&o.stderr).contains(env::CLUSTER_DIR));
    }

    /// Hostile-user pass 19: an `mmdebstrap` that failed (no mirror) left
    /// `node-<tag>.tar.part.tar` in the cache. Removed with the failure.
    #[test]
    fn a_failed_node_file_system_build_leaves_no_part() {
        let s = scratch("mmdebstrap-fails");
        let bin = s.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for (name, text) in [
            ("docker", "#!/bin/sh\nexit 1\n"),
            (
                "mmdebstrap",
                "#!/bin/sh\nfor last; do :; done\necho partial > \"$last\"\nexit 1\n",
            ),
        ] {
            std::fs::write(bin.join(name), text).unwrap();
            std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755))
                .unwrap();
        }
        let o = Command::new("bash")
            .args(["-c", SCRIPT, "hpc-cluster", "image"])
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env(env::CLUSTER_NAME, "t")
            .env(env::CLUSTER_DIR, s.join("work"))
            .env(env::CACHE_DIR, s.join("cache"))
            .output()
            .unwrap();
        let left: Vec<_> = std::fs::read_dir(s.join("cache"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n != ".build.lock")
            .collect();
        let _ = std::fs::remove_dir_all(&s);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains("mmdebstrap failed"),
            "{err}"
        );
        assert!(left.is_empty(), "{left:?}");
    }

    /// Hostile pass 20: the cache's `.build.lock` was opened with `>`: a link
    /// there had its target emptied, a FIFO held the script without end.
    /// Refused, the target kept.
    #[test]
    fn a_build_lock_that_is_a_link_or_a_fifo_is_refused() {
        let s = hpc_test_support::TmpDir::new("hpc-cluster", "build-lock");
        let bin = s.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for (name, text) in [
            ("docker", "#!/bin/sh\nexit 1\n"),
            ("mmdebstrap", "#!/bin/sh\nexit 1\n"),
        ] {
            std::fs::write(bin.join(name), text).unwrap();
            std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755))
                .unwrap();
        }
        let victim = s.join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let (link, fifo) = (s.join("link"), s.join("fifo"));
        std::fs::create_dir_all(&link).unwrap();
        std::os::unix::fs::symlink(&victim, link.join(".build.lock")).unwrap();
        std::fs::create_dir_all(&fifo).unwrap();
        hpc_test_support::mkfifo(&fifo.join(".build.lock"));
        for cache in [&link, &fifo] {
            let o = hpc_io::tool::output_within(
                Command::new("bash")
                    .args(["-c", SCRIPT, "hpc-cluster", "image"])
                    .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
                    .env(env::CLUSTER_NAME, "t")
                    .env(env::CLUSTER_DIR, s.join("work"))
                    .env(env::CACHE_DIR, cache),
                std::time::Duration::from_secs(20),
                64 << 10,
            )
            .unwrap_or_else(|e| match e {
                hpc_io::tool::ToolError::TimedOut(_) => {
                    panic!("{}: the script did not end within 20 s", cache.display())
                }
                e => panic!("{e}"),
            });
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                !o.status.success() && err.contains(".build.lock is not a regular file"),
                "{err}"
            );
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    }

    /// Hostile pass 20: the work folder's `munge.key` (and `dpu.key`) was
    /// written with `>`: a link planted there had its target made and
    /// written. A key that is not a regular file is refused, its link's
    /// target never made.
    #[test]
    fn a_key_that_is_a_link_is_refused() {
        let s = hpc_test_support::TmpDir::new("hpc-cluster", "key-link");
        let bin = s.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let docker = "#!/bin/sh\ncase \"$1 $2\" in version*) echo 24.0.0 ;; 'network create') exit 1 ;; esac\nexit 0\n";
        std::fs::write(bin.join("docker"), docker).unwrap();
        std::fs::set_permissions(bin.join("docker"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let work = s.join("work");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(work.join("slurm.conf"), "").unwrap();
        let made = s.join("made");
        std::os::unix::fs::symlink(&made, work.join("munge.key")).unwrap();
        let o = hpc_io::tool::output_within(
            Command::new("bash")
                .args(["-c", SCRIPT, "hpc-cluster", "up", "--nodes", "1", "--bin"])
                .arg(&bin)
                .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
                .env(env::CLUSTER_NAME, "t")
                .env(env::CLUSTER_DIR, &work)
                .env(env::CACHE_DIR, s.join("cache")),
            std::time::Duration::from_secs(30),
            64 << 10,
        )
        .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains("munge.key is not a regular file"),
            "{err}"
        );
        assert!(!made.exists(), "{err}");
    }

    /// Pass 19's leftover: once `docker version` answered, the script's own
    /// `docker ps`, `exec`, `network`, ... had no bound: a daemon that answers
    /// that and hangs on the rest held `status` and `down` without end. Each
    /// call is now stopped at its limit and named, with the status 124.
    #[test]
    fn a_docker_call_of_the_script_that_hangs_is_stopped_and_named() {
        let s = hpc_test_support::TmpDir::new("hpc-cluster", "script-docker-hang");
        let bin = s.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("docker"), "#!/bin/sh\nexec sleep 60\n").unwrap();
        std::fs::set_permissions(bin.join("docker"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        for (action, call) in [
            ("status", "ps"),
            ("down", "ps"),
            // Said not to be up (125) before: its message went to /dev/null.
            ("exec", "inspect"),
            // Ended 124 without a word: `docker image inspect … 2>/dev/null`.
            ("image", "image"),
        ] {
            let t = std::time::Instant::now();
            let o = hpc_io::tool::output_within(
                Command::new("bash")
                    .args(["-c", SCRIPT, "hpc-cluster", action])
                    .args(if action == "exec" {
                        &["--timeout", "5", "true"][..]
                    } else {
                        &[]
                    })
                    .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
                    .env("docker_limit", "1")
                    .env(env::CLUSTER_NAME, "t")
                    .env(env::CLUSTER_DIR, s.join("work"))
                    .env(env::CACHE_DIR, s.join("cache")),
                std::time::Duration::from_secs(30),
                64 << 10,
            )
            .unwrap_or_else(|e| match e {
                hpc_io::tool::ToolError::TimedOut(_) => {
                    panic!("{action}: the script did not end within 30 s")
                }
                e => panic!("{action}: {e}"),
            });
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(124), "{action}: {err}");
            assert!(
                err.contains(&format!(
                    "docker {call} did not end within 1s and was stopped: the Docker daemon does not answer"
                )),
                "{action}: {err}"
            );
            assert!(t.elapsed() < std::time::Duration::from_secs(20), "{action}");
        }
    }

    /// Hostile pass 20: `HPC_CLUSTER_DIR` naming a folder of the user's (a
    /// project holding its own `slurm.conf`, `node-init.sh` and `shared/`) had
    /// them replaced and `shared/` made 0777. Refused, naming what it holds; a
    /// folder `up` wrote is taken again.
    #[test]
    fn a_work_folder_that_is_not_the_clusters_is_refused() {
        let s = hpc_test_support::TmpDir::new("hpc-cluster", "work-of-user");
        let w = s.join("project");
        std::fs::create_dir_all(w.join("shared")).unwrap();
        std::fs::write(w.join("slurm.conf"), "# my own\n").unwrap();
        let e = check_work_folder(&w).unwrap_err().0;
        assert!(
            e.contains("it holds shared, slurm.conf and no slurm.conf that hpc cluster wrote"),
            "{e}"
        );
        assert_eq!(
            std::fs::read_to_string(w.join("slurm.conf")).unwrap(),
            "# my own\n"
        );
        // Missing, empty, or the cluster's own: taken.
        check_work_folder(&s.join("missing")).unwrap();
        let c = s.join("cluster");
        std::fs::create_dir_all(&c).unwrap();
        check_work_folder(&c).unwrap();
        write_work_files(&c, 2).unwrap();
        std::fs::create_dir_all(c.join("shared")).unwrap();
        check_work_folder(&c).unwrap();
    }

    #[test]
    fn work_files_are_written_and_replaced() {
        let s = scratch("work");
        let w = s.join("w");
        write_work_files(&w, 2).unwrap();
        write_work_files(&w, 4).unwrap();
        let conf = std::fs::read_to_string(w.join("slurm.conf")).unwrap();
        assert!(conf.contains("node[1-4]"), "{conf}");
        assert!(executable(&w.join("node-init.sh")));
        let _ = std::fs::remove_dir_all(&s);
    }

    /// Hostile pass 20: `node-init.sh` was made executable by its path after
    /// the rename, so a symbolic link put at that name in between (another
    /// user of a shared work folder swapping it in) had its target made
    /// 0755. The mode is set on the open file before the rename: a file the
    /// link points to keeps its mode however often the name is swapped.
    #[test]
    fn node_init_is_made_executable_before_it_has_its_name() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let s = scratch("mode-by-file");
        let w = s.join("w");
        write_work_files(&w, 2).unwrap();
        let victim = s.join("victim");
        std::fs::write(&victim, "mine\n").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let swapper = {
            let (stop, w, victim) = (stop.clone(), w.clone(), victim.clone());
            std::thread::spawn(move || {
                use std::os::unix::ffi::OsStrExt as _;
                let link = w.join(".swap");
                let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
                let (from, to) = (c(&link), c(&w.join("node-init.sh")));
                while !stop.load(Ordering::Relaxed) {
                    if !link.is_symlink() {
                        let _ = std::fs::remove_file(&link);
                        std::os::unix::fs::symlink(&victim, &link).unwrap();
                    }
                    // The link and the name swapped in one step, again and
                    // again: half of the time the name is the link.
                    // SAFETY: two NUL-terminated paths that outlive the call.
                    unsafe {
                        libc::renameat2(
                            libc::AT_FDCWD,
                            from.as_ptr(),
                            libc::AT_FDCWD,
                            to.as_ptr(),
                            libc::RENAME_EXCHANGE,
                        )
                    };
                }
            })
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut writes = 0;
        while std::time::Instant::now() < deadline {
            write_work_files(&w, 2).unwrap();
            writes += 1;
            let mode = std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777;
            assert_eq!(
                mode, 0o600,
                "after {writes} writes, the link's target was chmod-ed"
            );
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        let _ = std::fs::remove_dir_all(&s);
    }
}
