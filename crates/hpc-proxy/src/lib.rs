//! The per-node collectives proxy of hpc-rs: one progress process per node
//! runs the schedules of all local ranks — the role MVAPICH2-DPU gives to a
//! BlueField's Arm cores. The ranks' side, `Engine::Proxy`, is in `hpc-comm`
//! (its module `proxy`: the host and DPU clients), which re-exports what an
//! application calls from here ([`serve_env`]).
//!
//! # Protocol
//!
//! The ranks and the proxy share the communicator's board (see
//! `board.rs`), with one extra slot for the proxy. A rank posts a collective
//! by pushing a `SUBMIT` descriptor on its ring to the proxy; the descriptor
//! points at a small `postcard`-encoded blob in the rank's memory (the
//! [`Collective`](hpc_collectives::Collective), the addresses and lengths of its send and receive
//! buffers). The proxy reads the blob with cross-memory attach
//! (`process_vm_readv`), builds the rank's schedule and runs it together with the other ranks' schedules, keeping
//! every scratch buffer in its own memory. A send from a rank's buffer is not
//! read when it is posted: the matching receive copies it straight to its
//! destination (`process_vm_readv` into scratch, or through a 128 KiB piece
//! of the proxy's cache and `process_vm_writev` into the receiver), and the
//! sender's round stays open until then, as a rendezvous send would. The
//! proxy then answers `DONE` (with an error code) on the ring to the rank,
//! ringing the rank's doorbell. The ranks' CPUs do nothing between post and
//! wait. After its last work the proxy polls its doorbell for the ranks'
//! spin time (nonzero only where the node has a core for it) before it
//! sleeps, so a busy loop of collectives pays no wake-up. Where the node has
//! no core for it, waiting ranks and the proxy (while collectives are in
//! flight) yield the CPU for up to a millisecond instead, so that each runs
//! as soon as the other waits.
//!
//! Buffers that are [`SharedBuf`](hpc_board::shm::SharedBuf)s the proxy maps into its
//! own memory (once, then kept: a registration cache) and copies with
//! `memcpy`, one copy per byte from rank to rank; see [`hpc_board::shm`].
//!
//! # Starting it
//!
//! The first rank of the communicator starts the proxy when the
//! communicator is created, by running `HPC_COLL_PROXY_CMD` (split at
//! whitespace) if set (`hpc run --proxy` sets it to `hpc proxy`, pinned to
//! the node's progress cores), else the application's own executable, with
//! `HPC_COLL_PROXY_BOARD` and `HPC_COLL_PROXY_SLOTS` in its environment and
//! the launcher's `HPC_*` variables removed. A program that may use the
//! proxy engine therefore calls [`serve_env`] first thing in `main` (it
//! returns at once in a normal run; an application calls it as
//! `hpc_comm::proxy::serve_env`, or through `hpc_rs::init()`, which does):
//!
//! ```no_run
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     hpc_proxy::serve_env()?; // becomes the proxy when asked to
//!     let world = hpc_runtime::World::init()?;
//!     // ... `hpc_comm::Comm::new(&world, hpc_comm::Engine::Proxy)` and the work
//!     # let _ = world;
//!     Ok(())
//! }
//! ```
//!
//! If the proxy does not publish its pid in time, creating the communicator
//! fails with a message saying this. The proxy exits when every rank
//! detached (dropped its communicator) or died.
//!
//! # On a DPU
//!
//! A BlueField is a separate Linux host on the NIC: it reaches host memory
//! only by RDMA with registered memory keys. In host placement the proxy's
//! contact with the ranks is (1) a descriptor queue in shared memory and
//! (2) reading and writing their buffers by cross-memory attach or mapped
//! memfds; neither exists on a DPU. [`Placement::Dpu`]
//! (`HPC_COLL_PROXY_PLACEMENT=dpu`, `CommOptions::placement` in `hpc-comm`)
//! runs the proxy the way a DPU must (module `dpu/`): no board is created,
//! and the proxy touches rank memory only through an `hpc-rdma`
//! [`Transport`](hpc_rdma::Transport) (tcp, or `HPC_TRANSPORT=ofi`/`verbs`).
//! A rank copies what the collective reads into registered memory from its
//! registration cache (regions kept and reused, as MVAPICH2-DPU keeps its
//! registrations), sends a request message with the collective and the
//! remote keys of its send and receive spans, and waits for the answer
//! message. The proxy reads every rank's span with RMA get into its own
//! memory, runs the node's schedules there once all have arrived (step by
//! step, with the simulator's semantics: `steps.rs`), writes the results
//! back with RMA put and answers each rank once its put completed: the
//! staging through the DPU's DRAM that MVAPICH2-DPU did before cross-GVMI
//! keys let the DPU post RDMA between host buffers directly. The proxy runs
//! under a seccomp filter that denies it `process_vm_readv`/`writev`,
//! `pidfd_getfd` and `ptrace` ([`forbid_host_memory`]); ranks and proxy find
//! each other through a small job of their own (a coordinator in the first
//! rank on `HPC_COLL_PROXY_ADDR`, its address given to the proxy in
//! `HPC_COLL_PROXY_DPU`) and share no file. Tested here with the proxy in a
//! network namespace of its own, over tcp on one machine; it has not run on
//! a DPU. The book's chapter "The proxy on a DPU" maps each piece onto a
//! BlueField (verbs, cross-GVMI keys, DOCA) and says what would change.
//! Across nodes each node's DPU proxy serves its node's ranks, and the
//! proxies carry the steps between nodes to each other with the messages of
//! `net.rs` (below), over a transport of their own that they set up at a
//! coordinator in the communicator's first rank (a DPU's proxy is no child
//! of a rank, so it cannot be relayed over its standard input); `steps.rs`
//! runs the node's schedules step by step. A split of a DPU-placed
//! communicator shares its node's proxy and each rank's link (no proxy per
//! split); in host placement a split starts proxies of its own (one board
//! per communicator).
//!
//! # Across nodes
//!
//! Where a communicator spans nodes, each node has its proxy (started by the
//! node's first rank), and the proxies connect to each other with an
//! `hpc_rdma::Transport` (tcp by default, whatever `HPC_TRANSPORT` asks for,
//! e.g. `ofi`), bootstrapped through the ranks: a proxy is no rank of the
//! job's `World`, so its node's first rank relays its set-up allgathers over
//! a socket on the proxy's standard input (`net.rs`). A schedule's step
//! whose peer is on another node is the proxies' business: the sending proxy
//! reads the region when the round is posted (eagerly) and sends it to the
//! peer's proxy, tagged with the ranks and the step's (sequence, tag); the
//! receiving proxy files it with its node's messages, where the receive
//! step matches it like any other. Steps within a node stay as they are.
//! Every collective goes to the proxy there (`proxy_min` is 0: the ranks
//! have no network path of their own). A proxy that loses another fails its
//! collectives with `Error::NodeLost` naming that node; a dead proxy fails
//! its own node's ranks with `Error::Stopped("proxy")`.
//!
//! # Its memory
//!
//! The proxy holds each collective's scratch (and in DPU placement the
//! staging copies of the ranks' spans) in its own memory, sized by counts the
//! ranks chose. Those sizes are summed with checked arithmetic, admitted
//! against a cap on what it holds for the collectives in flight
//! (`HPC_COLL_PROXY_MAX_SCRATCH`, default half its memory) and allocated with
//! `try_reserve_exact`: a collective over the cap, whose allocation fails or
//! whose size overflows fails on every rank with
//! [`Error::ProxyMemory`] (answer codes `OverCap`
//! and `NoMemory`, the bytes in `len`), its other ranks' parts and messages
//! are dropped, the other nodes' proxies are told, and the proxy goes on
//! serving (`memory.rs`: `Budget`).
//!
//! What host placement lacks today: more than one copying thread. Between
//! ordinary buffers, rank-to-rank bytes cross the proxy twice
//! (read, then write; a DPU does the same through its own DRAM), all on the
//! proxy's one core, so for large messages the proxy is bound by its copy
//! rate where the ranks of an MPI library copy in parallel, each once.
//! Between [`SharedBuf`](hpc_board::shm::SharedBuf)s each byte is copied once, by
//! `memcpy`.
//!
//! # Modules
//!
//! `session/` (what both proxies keep alike of a collective's life, with no
//! I/O: the typed outcome that replaces the wire's code and `aux` word inside
//! a proxy, and the window of collectives that ended), `dpu/` (DPU
//! placement: `wire.rs` its messages, `link.rs` finding each other,
//! `boot.rs` starting the proxy, `state.rs` and
//! `server.rs` the proxy, `seccomp.rs` its guard),
//! `protocol.rs` (descriptor kinds, answer codes, the posted blob),
//! `memory.rs` (regions in a rank's process, a mapped `SharedBuf` or
//! scratch; copies and reductions between them) and
//! `server.rs` (the proxy process: intake, the schedules' state machine,
//! liveness, backoff) and `net.rs` (the proxies of a communicator that spans
//! nodes: their set-up through the ranks, messages between them, goodbye),
//! `steps.rs` (the DPU proxy's executor of its node's schedules, whose
//! steps to other nodes are `net.rs` messages), `service.rs` (the DPU's
//! standing service that starts those proxies, and the authenticated
//! request a node's first rank makes to it).

pub mod dpu;
#[doc(hidden)]
pub mod fuzz;
mod mailbox;
mod memory;
mod net;
pub mod protocol;
mod server;
pub mod service;
mod session;
mod steps;
mod submits;

use std::time::Duration;

pub use dpu::{forbid_host_memory, Placement, DPU_SERVICE_PORT};
pub use mailbox::Failure as RecvFailure;
pub use memory::max_scratch;
pub use net::{attach, bootstrap, closed, Hello};
pub(crate) use protocol::parse_submit;
pub use protocol::PROXY_CMD;
pub use server::serve;
pub use service::{dpu_service, DpuKey, ServiceAuth};
pub use session::{Outcome, Sizes};

/// The blob a rank posts for `coll` over buffers of these lengths (at
/// placeholder addresses; for the fuzz corpus).
pub(crate) fn encode_blob(
    coll: &hpc_collectives::Collective,
    send_len: usize,
    recv_len: usize,
) -> Vec<u8> {
    let blob = protocol::Blob {
        coll,
        opts: hpc_collectives::Options::default(),
        send: 0x1000,
        send_len,
        recv: 0x10_0000,
        recv_len,
        send_shm: None,
        recv_shm: None,
        own_copies: false,
    };
    postcard::to_allocvec(&blob).unwrap_or_default()
}

use hpc_board::{Error, Result};

/// Whether this process was started to serve as a proxy (in either
/// [`Placement`]): then [`serve_env`] serves.
pub fn requested() -> bool {
    std::env::var_os(hpc_runtime::env::COLL_PROXY_BOARD).is_some()
        || std::env::var_os(hpc_runtime::env::COLL_PROXY_DPU).is_some()
}

/// With `HPC_TRACE` set, this proxy process records its timeline (its file is
/// finished when it exits), as the collectives proxy; an application or `hpc_rs`
/// that installed a subscriber first decides for itself.
fn record_timeline() -> Result<()> {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::Layer as _;
    hpc_trace::set_label("collectives proxy");
    if tracing::dispatcher::has_been_set() {
        return Ok(());
    }
    let layer = hpc_trace::layer_from_env().map_err(|e| Error::Unsupported(e.to_string()))?;
    if let Some(layer) = layer {
        // A label names the sinks that exist: this one is new (the call above named
        // those of a layer installed before).
        hpc_trace::set_label("collectives proxy");
        let subscriber =
            tracing_subscriber::registry().with(layer.with_filter(hpc_trace::default_filter()));
        // Lost to a subscriber installed meanwhile: that one decides.
        let _ = tracing::subscriber::set_global_default(subscriber);
    }
    Ok(())
}

/// Serves as the proxy if `HPC_COLL_PROXY_BOARD` (host placement) or
/// `HPC_COLL_PROXY_DPU` (DPU placement) is set (then never returns
/// normally: exits the process when done). Returns `Ok(false)` otherwise.
pub fn serve_env() -> Result<bool> {
    if requested() {
        record_timeline()?;
    }
    // A value that is not UTF-8 is an error naming the variable, not a variable
    // read as unset (which would run the application instead of the proxy).
    if let Some(spec) =
        hpc_runtime::env::var(hpc_runtime::env::COLL_PROXY_DPU).map_err(Error::Unsupported)?
    {
        dpu::serve_spec(&spec)?;
        std::process::exit(0);
    }
    let Some(path) =
        hpc_runtime::env::var(hpc_runtime::env::COLL_PROXY_BOARD).map_err(Error::Unsupported)?
    else {
        return Ok(false);
    };
    // Not UTF-8: an error naming it (it was said to be "not set").
    let slots = slots_of(
        hpc_runtime::env::var(hpc_runtime::env::COLL_PROXY_SLOTS)
            .map_err(Error::Unsupported)?
            .as_deref(),
    )?;
    let spin = hpc_runtime::env::number(
        hpc_runtime::env::COLL_PROXY_SPIN_US,
        hpc_runtime::env::MAX_SPIN_US,
    )
    .map_or(Duration::ZERO, Duration::from_micros);
    let net = std::env::var_os(hpc_runtime::env::COLL_PROXY_NET).is_some_and(|v| v == "1");
    server::serve_with(std::path::Path::new(&path), slots, spin, net)?;
    std::process::exit(0);
}

/// `HPC_COLL_PROXY_SLOTS` (the board's rank slots) as the proxy reads it: a
/// value that is no count is said so, not taken for an unset variable.
fn slots_of(v: Option<&str>) -> Result<usize> {
    let name = hpc_runtime::env::COLL_PROXY_SLOTS;
    let v = v.ok_or_else(|| Error::Unsupported(format!("{name} is not set")))?;
    // At least a rank's and the proxy's own (the proxy serves `slots - 1` ranks).
    match v.trim().parse::<usize>() {
        Ok(n) if n >= 2 => Ok(n),
        _ => Err(Error::Unsupported(format!(
            "{name}={} is not a number of slots (2 or more: the ranks' and the proxy's)",
            hpc_runtime::env::shown(v)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pass 15: a slot count that was no number was said to be "not set".
    #[test]
    fn a_slot_count_that_is_no_number_is_said_so() {
        assert_eq!(slots_of(Some(" 4 ")).unwrap(), 4);
        let unset = slots_of(None).unwrap_err().to_string();
        assert!(unset.contains("HPC_COLL_PROXY_SLOTS is not set"), "{unset}");
        let bad = slots_of(Some(&"x".repeat(1000))).unwrap_err().to_string();
        assert!(
            bad.contains("is not a number of slots") && bad.len() < 200,
            "{bad}"
        );
        // Fewer than a rank's and the proxy's own slots: `slots - 1` ranks
        // underflowed at 0.
        for few in ["0", "1"] {
            let e = slots_of(Some(few)).unwrap_err().to_string();
            assert!(e.contains("2 or more"), "{e}");
        }
    }
}
