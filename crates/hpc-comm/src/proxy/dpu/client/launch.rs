//! Starting a link's proxy: rank 0's coordinator for the link, and the proxy
//! process it starts, on this host or through the node's DPU service.

use super::Conn;
use hpc_board::{Error, Result};
use hpc_proxy::dpu::link::{backend_name, dpu_service_addr};
use hpc_rdma::Choice;
use hpc_runtime::Coordinator;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

impl Conn {
    /// Rank 0: the link's coordinator and the proxy process.
    pub(super) fn launch(
        size: usize,
        timeout: Duration,
        backend: Choice,
        ip: &Result<IpAddr>,
    ) -> Result<(Arc<Coordinator>, u64)> {
        crate::proxy::client::refuse_recursion(hpc_runtime::env::COLL_PROXY_DPU)?;
        let ip = super::listen_ip(ip)?;
        let secret = hpc_runtime::random_u64()?;
        let coord = Coordinator::start(size + 1, secret, timeout, ip)
            .map_err(|e| Error::transport_from(format!("listening for the proxy on {ip}"), e))?;
        let spec = format!(
            "{} {secret:x} {} {} {}",
            coord.addr(),
            size + 1,
            timeout.as_secs_f64(),
            backend_name(backend)
        );
        // The libfabric provider stays, for `HPC_TRANSPORT=ofi`, and so does
        // the proxy's memory cap.
        let mut cmd = crate::proxy::client::proxy_command(&[
            hpc_runtime::env::OFI_PROVIDER,
            hpc_runtime::env::COLL_PROXY_MAX_SCRATCH,
        ]);
        if let Some(at) = dpu_service_addr() {
            let at = at?;
            let key = hpc_proxy::service::DpuKey::from_env()?;
            let coord = Arc::new(coord);
            launch_remote(
                at,
                key.as_ref(),
                &spec,
                timeout,
                Arc::downgrade(&coord),
                size,
            )?;
            return Ok((coord, secret));
        }
        cmd.env(hpc_runtime::env::COLL_PROXY_DPU, spec);
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::transport_from(crate::proxy::starting_the_proxy(&cmd), e))?;
        let coord = Arc::new(coord);
        let weak = Arc::downgrade(&coord);
        // Until the link is up, a proxy that exits fails the link's job at once
        // (the coordinator tells every member) rather than by its timeout; then
        // the thread only reaps it.
        std::thread::spawn(move || loop {
            match child.try_wait() {
                Ok(Some(st)) => {
                    if let Some(c) = weak.upgrade() {
                        let why = format!("exited ({st}) without serving");
                        c.rank_exited(size, false, crate::proxy::client::did_not_serve(&why));
                    }
                    return;
                }
                Ok(None) if weak.strong_count() == 0 => {
                    let _ = child.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => return,
            }
        });
        Ok((coord, secret))
    }
}

/// Asks the DPU service at `at` to start this node's proxy with `spec`,
/// proving `key` where the service asks for it (`service.rs`); until the
/// link is up, a proxy that exits (or a service that goes) fails the link's
/// job at once, as a proxy started here does.
fn launch_remote(
    at: SocketAddr,
    key: Option<&hpc_proxy::service::DpuKey>,
    spec: &str,
    timeout: Duration,
    coord: std::sync::Weak<Coordinator>,
    size: usize,
) -> Result<()> {
    // Half the timeout, the rest of the ranks' wait for this one: a service
    // that said nothing held the node's first rank as long as the others
    // waited for it, and they gave up first ("still waiting for rank(s) 0"),
    // the launcher stopped it, and no line of the job named the service. In
    // half, it fails first and every rank says why.
    let timeout = timeout / 2;
    let io = |e: std::io::Error| Error::transport_from(format!("the DPU service at {at}"), e);
    let s = TcpStream::connect_timeout(&at, timeout).map_err(io)?;
    // The libfabric provider the ranks use (`HPC_TRANSPORT=ofi`), for the link.
    let provider = std::env::var(hpc_runtime::env::OFI_PROVIDER)
        .ok()
        .filter(|p| !p.is_empty() && !p.contains(char::is_whitespace))
        .map(|p| format!(" {p}"))
        .unwrap_or_default();
    let (pid, mut r) = hpc_proxy::service::ask(&s, at, key, &format!("{spec}{provider}"), timeout)?;
    tracing::info!(%at, pid, "the DPU service started the proxy");
    std::thread::spawn(move || {
        use hpc_proxy::service::{wait_end, End};
        let every = Duration::from_millis(50);
        let Some(end) = wait_end(&mut r, every, || coord.strong_count() > 0) else {
            return;
        };
        let why = match end {
            End::Closed => format!("the DPU service at {at} went away"),
            End::Said(line) => format!("the proxy on the DPU {at} {line} without serving"),
            End::Failed(e) => format!("the DPU service at {at}: {e}"),
        };
        if let Some(c) = coord.upgrade() {
            c.rank_exited(size, false, why);
        }
    });
    Ok(())
}
