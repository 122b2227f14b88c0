//! The `Proxy` engine in DPU placement: collectives go to a proxy that
//! reaches the ranks only through the transport (see `proxy::dpu`).

use std::sync::Arc;

use super::proxy::Handle;
use super::{Driver, Job, Pending, Split, Ticket};
use crate::proxy::dpu::{Carried, Client};
use crate::proxy::ProxyClient;
use hpc_board::Result;

/// The `Proxy` engine with its proxy placed as on a DPU.
pub(crate) struct Dpu {
    pub client: Arc<Client>,
}

impl Driver for Dpu {
    fn start(&self, job: Job<'_>) -> Result<Ticket> {
        Handle::post(&self.client, job)
    }

    /// The new group's collectives go to the same proxies, over the same
    /// link: a split starts no proxy.
    fn split(&self, s: &Split<'_>) -> Option<Result<Box<dyn Driver>>> {
        Some(self.client.split(s).map(|c| {
            Box::new(Dpu {
                client: Arc::new(c),
            }) as Box<dyn Driver>
        }))
    }

    fn shutdown(&self) {
        self.client.detach();
    }

    fn register(&self, bytes: usize) -> Option<Result<Arc<hpc_rdma::Region>>> {
        Some(self.client.register_buf(bytes))
    }

    /// The proxy carries the ranks' point-to-point messages.
    fn message(
        &self,
        m: &super::Message,
        bufs: (*const u8, usize, *mut u8, usize),
        stage: Option<crate::job::Stage>,
    ) -> Option<Result<Ticket>> {
        Some(
            self.client
                .message(m, bufs, stage)
                .map(|c| Arc::new(Message(c)) as Ticket),
        )
    }
}

/// A point-to-point message the DPU-placed proxy carries.
struct Message(Carried);

impl Pending for Message {
    fn test(&self, _: &dyn Driver) -> bool {
        self.0.poll()
    }

    fn wait(&self, _: &dyn Driver, out: Option<&mut [u8]>) -> Result<()> {
        self.0.wait(out)
    }

    fn cancel(&self, _: &dyn Driver) {
        self.0.cancel();
    }

    fn discard(&self, _: &dyn Driver) {
        self.0.discard();
    }

    fn matched(&self) -> Option<(usize, u16)> {
        self.0.matched()
    }
}
