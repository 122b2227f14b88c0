//! `hpc proxy`: the progress process of `hpc-comm`' `Proxy` engine.
//!
//! Under `hpc run --proxy` every rank finds `HPC_COLL_PROXY_CMD` naming this command, so
//! when a communicator with the `Proxy` engine is created, its first rank starts
//! `hpc proxy` (one per communicator and node) instead of re-executing the application.
//! The application then need not call `hpc_comm::proxy::serve_env()`, and the
//! proxy is a small, separate program that can be pinned to the cores `--bind`
//! reserved for progress: the role a DPU's Arm cores play in MVAPICH2-DPU.

use anyhow::{bail, Context};

/// Arguments of `hpc proxy`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Started by the ranks, not by hand:\n  \
    hpc run -n 4 --proxy --progress 1 --bind core -- ./app   (the app uses Engine::Proxy)\n\n\
    On a DPU, as its standing service (the ranks set HPC_COLL_PROXY_DPU_HOST and\n\
    HPC_COLL_PROXY_DPU_KEY_FILE to a copy of the same key):\n  \
    head -c 32 /dev/urandom > /etc/hpc/dpu.key && chmod 600 /etc/hpc/dpu.key\n  \
    hpc proxy --dpu-service 0.0.0.0:7471 --key-file /etc/hpc/dpu.key\n\n\
    Each request proves the key (HMAC-SHA256 of a fresh nonce and the request); it is\n\
    authenticated, not encrypted.")]
pub struct Args {
    /// Pin the proxy to these CPUs (a cpulist such as `3` or `6-7`).
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// Run as a DPU's standing service on this address (e.g. `0.0.0.0:7471`): start
    /// a proxy (`hpc proxy`, with `--cpus`) for each node's first rank that asks and
    /// proves the key, in `dpu` placement with `HPC_COLL_PROXY_DPU_HOST` naming this host.
    #[arg(long, value_name = "ADDR")]
    pub dpu_service: Option<String>,
    /// With `--dpu-service`: the file of the key the ranks must prove they hold
    /// (at least 16 bytes, readable by its owner only). Without it (or the
    /// variable) the service refuses to start unless `--insecure` is given.
    #[arg(long, value_name = "PATH", env = hpc_runtime::env::COLL_PROXY_DPU_KEY_FILE)]
    pub key_file: Option<std::path::PathBuf>,
    /// With `--dpu-service`: serve without a key, starting a proxy for anyone who
    /// reaches the port (only where nobody but the ranks can).
    #[arg(long)]
    pub insecure: bool,
}

/// Runs the proxy until every rank of its communicator detached or died.
pub fn exec(args: Args) -> anyhow::Result<i32> {
    // Checked first: the DPU service passes the list on to every proxy it starts.
    let cpus = match &args.cpus {
        Some(list) => Some(super::cpu_list_flag("--cpus", list)?),
        None => None,
    };
    if let Some(at) = &args.dpu_service {
        let listen: std::net::SocketAddr = at.parse().with_context(|| {
            format!("--dpu-service {}: not an address:port", hpc_env::short(at))
        })?;
        let key_var = hpc_runtime::env::COLL_PROXY_DPU_KEY_FILE;
        let auth = match (&args.key_file, args.insecure) {
            (Some(path), false) => hpc_comm::proxy::ServiceAuth::Key(
                hpc_comm::proxy::DpuKey::from_file(path).context("the DPU service's key")?,
            ),
            (None, true) => hpc_comm::proxy::ServiceAuth::Insecure,
            (Some(path), true) => bail!(
                "--insecure and a key ({}, from --key-file or {key_var}): choose one",
                hpc_io::message::path(path)
            ),
            (None, false) => bail!(
                "the DPU service needs a key, so that only the ranks can make it start \
                 proxies: --key-file PATH (or {key_var}), a file of at least 16 random bytes \
                 readable by its owner only (`head -c 32 /dev/urandom > dpu.key && chmod 600 \
                 dpu.key`), a copy of which the ranks name in {key_var}; or --insecure to \
                 serve anyone who reaches the port"
            ),
        };
        // A list naming no CPU this process may run on: every proxy the service
        // started ran unpinned, each with a warning of its own, the service
        // itself saying nothing.
        if let (Some(set), Ok(allowed)) = (&cpus, hpc_topology::current_binding()) {
            if !set.intersects(&allowed) {
                return Err(super::UsageError(format!(
                    "--cpus {set}: none of these CPUs is one this service may run on ({allowed}): \
                     the proxies it starts could not be pinned; give CPUs of this machine"
                ))
                .into());
            }
        }
        let exe = std::env::current_exe().context("this program's path")?;
        let cpus = args.cpus.clone();
        hpc_comm::proxy::dpu_service(listen, auth, move || {
            let mut c = std::process::Command::new(&exe);
            c.arg("proxy");
            if let Some(list) = &cpus {
                c.args(["--cpus", list]);
            }
            // The proxy serves one job: it needs neither the key nor its file's name.
            c.env_remove(key_var);
            c
        })
        .context("the DPU service")?;
        return Ok(0);
    }
    if args.insecure {
        bail!("--insecure goes with --dpu-service");
    }
    // The key's variable reaches proxies started by a job's ranks on a node that also
    // talks to a DPU service; only the flag itself, given by hand, is a mistake.
    let key_var = hpc_runtime::env::COLL_PROXY_DPU_KEY_FILE;
    if let Some(path) = &args.key_file {
        if std::env::var_os(key_var)
            .map(std::path::PathBuf::from)
            .as_ref()
            != Some(path)
        {
            bail!(
                "--key-file {} goes with --dpu-service ADDR (the DPU's standing service); \
                 the ranks of a job name their copy of the key in {key_var}",
                hpc_io::message::path(path)
            );
        }
    }
    if !hpc_comm::proxy::requested() {
        bail!(
            "hpc proxy is started by the ranks of a job, not by hand: run the job with \
             `hpc run --proxy -n N -- ./app` and create the communicator with Engine::Proxy \
             (neither {} nor {} is set)",
            hpc_runtime::env::COLL_PROXY_BOARD,
            hpc_runtime::env::COLL_PROXY_DPU
        );
    }
    if let Some(set) = &cpus {
        if let Err(e) = hpc_topology::bind_current_process(set) {
            tracing::warn!(cpus = %set, error = %e, "the proxy could not pin itself");
        } else {
            tracing::info!(cpus = %set, "proxy pinned");
        }
    }
    hpc_comm::proxy::serve_env().context("serving as the collectives proxy")?;
    Ok(0)
}
