//! The proxy in DPU placement: it reaches the ranks only through the
//! transport, as a BlueField's Arm cores reach the host.
//!
//! No board, no cross-memory attach, no mapped file: a rank copies the part
//! of its send buffer the collective reads into registered memory (a
//! [`Region`](hpc_rdma::Region) from its registration cache), sends the proxy a [`Request`](wire::Request)
//! message naming the collective and the remote keys of its send and receive
//! spans, and waits for an [`Answer`](wire::Answer) message. The proxy reads each rank's
//! send span with RMA get into its own memory, runs the node's schedules
//! there once every rank's span arrived, writes each receive span back with
//! RMA put and answers when the put completed (after which the rank copies
//! its result out of the region). The proxy itself runs under a seccomp
//! filter that denies `process_vm_readv`/`process_vm_writev`, `pidfd_getfd`
//! and `ptrace` ([`forbid_host_memory`]).
//!
//! # Finding each other
//!
//! The first rank of each node of the communicator starts a [`Coordinator`](hpc_runtime::Coordinator)
//! for a job of the node's ranks plus one (the proxy is the last rank), on
//! `HPC_COLL_PROXY_ADDR`, and starts the proxy with its address and secret in
//! `HPC_COLL_PROXY_DPU`; the other ranks learn it through the communicator's
//! bootstrap. All of them join that small job and build a [`Transport`](hpc_rdma::Transport) over
//! it (`tcp`, or `ofi`/`verbs` when `HPC_TRANSPORT` names one), then leave
//! the job: from then on ranks and proxy talk only over the transport's
//! connections. The node's first rank then tells the proxy its [`Place`](wire::Place):
//! the communicator's rank of each of its ranks, the node of every rank and,
//! where the communicator spans nodes, a second coordinator (started by the
//! communicator's first rank, on the address that routes to the launcher)
//! where the nodes' proxies meet to build a transport of their own
//! (`net.rs`'s `ProxyNet`). Each proxy then tells each of its ranks that it
//! is ready, or why not, and the ranks agree on the outcome.
//!
//! # Across nodes
//!
//! A collective starts on a node once every part of that node's ranks
//! arrived; its schedules run step by step (`steps.rs`; `dpu/server.rs` drives them), the steps whose
//! peer is on another node as messages to that node's proxy, tagged (source,
//! destination, sequence, schedule tag) as between host-placed proxies.
//! Messages that come before the collective started here wait with it; one
//! that comes after it finished here is dropped. A collective that fails on
//! one node (a refusal, a mismatch, a rank lost, a rank that cancelled it
//! before it finished there) fails on all: its proxy tells the others, which
//! drop what they hold of it. A proxy that loses another fails every collective in
//! flight and every later one with `NodeLost` naming that node.
//!
//! # Point-to-point messages
//!
//! The proxy carries its ranks' messages (`client/message.rs` on the rank,
//! `server/messages.rs` in the proxy): a send's bytes come in its
//! [`Request::Send`](wire::Request::Send) (up to 64 KiB) or by RMA get from
//! its region, and it is answered once the proxy has them; a
//! [`Request::Recv`](wire::Request::Recv) names a region, into which the
//! proxy puts the message it matched before it answers with its source and
//! tag ([`Delivery`](wire::Delivery)). Each communicator's
//! `Mailbox` matches them, with the
//! executor's rules; a message for another node goes to its proxy under the
//! point-to-point sequence number, as a step does. Their numbers on the link
//! start at `P2P_FIRST`, above every collective's sequence number.
//!
//! # Splits
//!
//! A split of a communicator in DPU placement starts no proxy: the group's
//! ranks keep their links, and each tells its proxy the group's id and
//! members once ([`Request::Open`](wire::Request::Open)). The proxy serves each communicator with
//! its own collectives, keyed on the link by the rank's number for the
//! communicator beside the sequence number ([`wire`](wire::wire)), and between nodes by
//! the group's id after the payload, with ranks named as ranks of the first
//! communicator. A killed proxy fails every communicator that uses it.

use hpc_board::{Error, Result};

mod boot;
pub mod link;
mod seccomp;
mod server;
mod state;
pub mod wire;

pub(crate) use boot::serve_spec;
pub use link::DPU_SERVICE_PORT;
pub use seccomp::forbid_host_memory;
use wire::P2P_FIRST;
pub(crate) use wire::{fuzz_request, fuzz_waiting};

/// Where the `Proxy` engine's proxy runs, and so how it reaches the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Placement {
    /// Beside the ranks on the host: a shared-memory board, cross-memory
    /// attach and mapped [`SharedBuf`](hpc_board::shm::SharedBuf)s.
    #[default]
    Host,
    /// As on a DPU: only through the transport (registered memory, RMA get and
    /// put, messages); see the module `proxy::dpu`.
    Dpu,
}

impl Placement {
    /// `host` or `dpu`.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Host => "host",
            Placement::Dpu => "dpu",
        }
    }

    /// `HPC_COLL_PROXY_PLACEMENT`, else [`Placement::Host`]; a value that is
    /// neither, or not UTF-8 (it was read as unset: the host), is an error
    /// naming it.
    pub fn from_env() -> Result<Placement> {
        match hpc_runtime::env::var(hpc_runtime::env::COLL_PROXY_PLACEMENT)
            .map_err(Error::Unsupported)?
        {
            Some(v) => v.parse(),
            None => Ok(Placement::Host),
        }
    }
}

impl std::str::FromStr for Placement {
    type Err = Error;
    fn from_str(s: &str) -> Result<Placement> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "host" => Ok(Placement::Host),
            "dpu" => Ok(Placement::Dpu),
            _ => Err(Error::Unsupported(format!(
                "proxy placement {}: expected host or dpu ({})",
                hpc_runtime::env::shown(s),
                hpc_runtime::env::COLL_PROXY_PLACEMENT
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_placement_is_refused_in_a_line() {
        let e = "d"
            .repeat(100_000)
            .parse::<Placement>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected host or dpu"), "{e}");
        assert!(e.len() < 200, "{} bytes", e.len());
    }

    #[test]
    fn placements_parse_and_bad_ones_are_named() {
        assert_eq!("dpu".parse::<Placement>().unwrap(), Placement::Dpu);
        assert_eq!(" Host ".parse::<Placement>().unwrap(), Placement::Host);
        let e = "nic".parse::<Placement>().unwrap_err().to_string();
        assert!(e.contains("\"nic\"") && e.contains("host or dpu"), "{e}");
    }
}
