//! Where the proxies of a `Proxy` communicator are, and how they connect.

use std::sync::Arc;
use std::time::Duration;

use super::boot::Boot;
use crate::proxy;
use hpc_board::Result;

/// Where the proxies of a `Proxy` communicator are: one per node, numbered
/// in the order of the nodes' first ranks.
pub(super) struct ProxyPlaces {
    /// The first rank of each node index.
    leaders: Vec<usize>,
    /// The node index of each rank.
    index: Vec<usize>,
}

impl ProxyPlaces {
    pub(super) fn of(nodes: &[usize]) -> ProxyPlaces {
        let mut leaders: Vec<usize> = Vec::new();
        let index = (0..nodes.len())
            .map(
                |r| match leaders.iter().position(|&l| nodes[l] == nodes[r]) {
                    Some(i) => i,
                    None => {
                        leaders.push(r);
                        leaders.len() - 1
                    }
                },
            )
            .collect();
        ProxyPlaces { leaders, index }
    }

    /// Whether rank `r` starts its node's proxy.
    pub(super) fn leads(&self, r: usize) -> bool {
        self.leaders[self.index[r]] == r
    }

    /// Connects the proxies of a communicator that spans nodes (`net`;
    /// collective over every process of `boot`, which takes part without
    /// `net` too): returns the name of the transport between them.
    pub(super) fn connect(
        &self,
        boot: &dyn Boot,
        client: &proxy::Client,
        me: usize,
        nodes: &[usize],
        timeout: Duration,
        net: bool,
    ) -> Result<String> {
        let link = client.take_link();
        let hello = link.as_ref().map(|_| hpc_proxy::Hello {
            me: self.index[me],
            node_of: self.index.clone(),
            node_ids: self.leaders.iter().map(|&l| nodes[l]).collect(),
            timeout_ms: timeout.as_millis().min(u64::MAX as u128) as u64,
            rendezvous: std::env::var(hpc_runtime::env::RENDEZVOUS).ok(),
        });
        let leaders: Vec<usize> = if net {
            self.leaders.iter().map(|&l| boot.index_of(l)).collect()
        } else {
            Vec::new()
        };
        hpc_proxy::bootstrap(
            link,
            hello.as_ref(),
            &|b: &[u8]| boot.allgather_all(b),
            &leaders,
            timeout,
        )
    }
}

/// The transport backend that reaches the first rank on another node.
pub(super) fn net_backend(
    t: &Option<Arc<hpc_rdma::Transport>>,
    world_ranks: &[usize],
    nodes: &[usize],
    me: usize,
) -> &'static str {
    let remote = (0..nodes.len()).find(|&r| nodes[r] != nodes[me]);
    match (t, remote) {
        (Some(t), Some(r)) => t.backend_of(world_ranks[r]).map_or("none", |b| b.name()),
        _ => "none",
    }
}
