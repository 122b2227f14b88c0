//! The `Proxy` engine: a process per node runs every local rank's schedules
//! (the role of a DPU); see the `proxy` module for the process and the
//! protocol. Where the node has no core for the proxy, collectives whose
//! blocks are under `proxy_min` bytes run on the ranks' own path ([`Host`]).

use std::sync::Arc;
use std::time::Duration;

use super::inline::Host;
use super::{Driver, Job, Pending, Ticket};
use crate::proxy::{Client, ProxyClient};
use hpc_board::Result;

/// The `Proxy` engine.
pub(crate) struct Proxy {
    pub client: Arc<Client>,
    /// The ranks' own path (for point-to-point messages, and collectives
    /// whose blocks are under the size given, from which they go to the
    /// proxy instead).
    pub host: (Arc<Host>, usize),
}

impl Driver for Proxy {
    fn start(&self, job: Job<'_>) -> Result<Ticket> {
        let (host, min) = &self.host;
        if job.coll.block_bytes().is_some_and(|b| b < *min) {
            // Descriptors queued for a full ring go out while this one runs.
            self.client.flush();
            return host.start(job);
        }
        Handle::post(&self.client, job)
    }

    fn shutdown(&self) {
        self.host.0.shutdown();
        self.client.detach();
    }

    fn host(&self) -> Option<&Host> {
        Some(&self.host.0)
    }
}

/// A collective handed to a proxy, in either placement (the host client's
/// and the DPU client's alike).
pub(super) struct Handle<C: ProxyClient> {
    p: C::Posted,
    client: Arc<C>,
}

impl<C: ProxyClient> Handle<C> {
    /// Hands `job` to `client`'s proxy.
    pub(super) fn post(client: &Arc<C>, job: Job<'_>) -> Result<Ticket> {
        Ok(Arc::new(Handle {
            p: client.submit(job)?,
            client: client.clone(),
        }))
    }
}

impl<C: ProxyClient> Pending for Handle<C> {
    fn test(&self, _: &dyn Driver) -> bool {
        self.client.poll(&self.p)
    }

    fn wait(&self, engine: &dyn Driver, out: Option<&mut [u8]>) -> Result<()> {
        // While the proxy runs this collective, the rank's own path still
        // moves: a peer's send to this rank may complete only when this rank
        // polls its network path or pushes its `FIN`, and that peer may be
        // what the collective waits for. Without this, a rank that took a
        // peer's messages and then waited in a barrier held the peer in its
        // sends until the communicator's timeout.
        if let Some(host) = engine.host() {
            let t0 = std::time::Instant::now();
            let mut rest = Duration::from_micros(1);
            while !self.client.poll(&self.p) && host.progress_aside() {
                if t0.elapsed() > host.timeout() {
                    break;
                }
                std::thread::sleep(rest);
                // At most 100 us: the collective may end during a sleep.
                rest = (rest * 2).min(Duration::from_micros(100));
            }
        }
        self.client.wait(&self.p, out)
    }

    fn cancel(&self, _: &dyn Driver) {
        self.client.cancel(&self.p);
    }

    fn discard(&self, _: &dyn Driver) {
        // Its answer, if nobody took it, would stay in the rank's list.
        self.client.discard(&self.p);
    }
}
