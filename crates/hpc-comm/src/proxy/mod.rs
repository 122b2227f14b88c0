//! The `Proxy` engine's side in a rank: its clients of the per-node proxy
//! process, which is [`hpc_proxy`] (its protocol, its life cycle of a
//! collective, its placement beside the ranks or as on a DPU are described
//! there). What an application calls is re-exported here: a program that may
//! use the proxy engine calls [`serve_env`] first thing in `main` (it returns
//! at once in a normal run):
//!
//! ```no_run
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     hpc_comm::proxy::serve_env()?; // becomes the proxy when asked to
//!     let world = hpc_runtime::World::init()?;
//!     let comm = hpc_comm::Comm::new(&world, hpc_comm::Engine::Proxy)?;
//!     # let _ = comm;
//!     Ok(())
//! }
//! ```
//!
//! # Modules
//!
//! `client.rs` (a rank's side in host placement: the communicator's board,
//! descriptors on a ring) and `dpu/` (a rank's side in DPU placement: a link
//! over the transport, registered memory; `client/launch.rs` asks the DPU
//! service for a proxy, `client/message.rs` its point-to-point messages).
//! `ProxyClient` is what both do.

mod client;
pub(crate) mod dpu;

pub(crate) use client::Client;
pub use hpc_proxy::{
    dpu_service, forbid_host_memory, max_scratch, requested, serve, serve_env, DpuKey, Placement,
    ServiceAuth, DPU_SERVICE_PORT, PROXY_CMD,
};

use hpc_board::Result;

/// What an error says of a proxy that could not be started: its program, cut
/// as a shown value is (the command's arguments and environment are the
/// SDK's own; `HPC_COLL_PROXY_CMD` may name a program of any length).
pub(crate) fn starting_the_proxy(cmd: &std::process::Command) -> String {
    let program = cmd.get_program().to_string_lossy();
    format!("starting the proxy {}", hpc_runtime::env::short(&program))
}

/// The line a rank ends with when its proxy (`whose`: "the proxy", "the DPU
/// proxy") did not confirm, within `timeout`, the cancellation of a
/// collective on the application's own buffers: it said "hpc-collectives:",
/// a crate that has no proxy, and no timeout.
fn unconfirmed_cancel_line(whose: &str, timeout: std::time::Duration) -> String {
    format!(
        "hpc-comm: {whose} did not confirm a cancellation within {timeout:?}; aborting \
         rather than risk its writes into a buffer in use"
    )
}

/// Ends the process as [`unconfirmed_cancel_line`] says, rather than let a
/// late write of the proxy land in a buffer in use again: the line goes to
/// the log and to standard error (one write, whatever the log).
pub(crate) fn abort_unconfirmed_cancel(whose: &str, timeout: std::time::Duration) -> ! {
    use std::io::Write as _;
    let line = unconfirmed_cancel_line(whose, timeout);
    tracing::error!("{line}");
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
    std::process::abort()
}

/// A rank's side of a proxy, in either placement: the host client
/// (`client.rs`: the communicator's board, descriptors on a ring) and the DPU
/// client (`dpu/client.rs`: a link over the transport, registered memory).
/// The engines hand collectives to both through it.
pub(crate) trait ProxyClient: Send + Sync + 'static {
    /// The client's handle on one collective handed to its proxy.
    type Posted: Send + Sync + 'static;

    /// Hands `job` to the proxy.
    fn submit(&self, job: crate::job::Job<'_>) -> Result<Self::Posted>;

    /// Whether the proxy answered `p`.
    fn poll(&self, p: &Self::Posted) -> bool;

    /// Waits for the proxy's answer to `p`, then takes its outcome; `out`
    /// receives a staged result.
    fn wait(&self, p: &Self::Posted, out: Option<&mut [u8]>) -> Result<()>;

    /// Gives `p` up: the proxy no longer touches its buffers once this returns.
    fn cancel(&self, p: &Self::Posted);

    /// Finished, but nobody takes its outcome: drops what the client keeps
    /// of its answer.
    fn discard(&self, p: &Self::Posted);

    /// This rank leaves the proxy (the communicator is dropped).
    fn detach(&self);
}

#[cfg(test)]
mod start_tests {
    /// A proxy program of 100,000 characters that cannot be started is named
    /// cut: the error quoted the whole command (`{cmd:?}`), environment and all.
    #[test]
    fn a_proxy_that_cannot_start_is_named_cut() {
        let mut cmd = std::process::Command::new(format!("/nonexistent/{}", "x".repeat(100_000)));
        cmd.env("SOME_SETTING", "y".repeat(10_000));
        let what = super::starting_the_proxy(&cmd);
        assert!(what.len() < 200, "{} bytes: {what:.200}", what.len());
        assert!(
            what.starts_with("starting the proxy \"/nonexistent/xx"),
            "{what}"
        );
        assert!(what.contains("more characters"), "{what}");
    }

    /// The abort of a rank whose proxy did not confirm a cancellation names
    /// this crate and the timeout (it named `hpc-collectives`, which has no
    /// proxy).
    #[test]
    fn an_unconfirmed_cancellation_names_this_crate() {
        let line =
            super::unconfirmed_cancel_line("the DPU proxy", std::time::Duration::from_secs(3));
        assert_eq!(
            line,
            "hpc-comm: the DPU proxy did not confirm a cancellation within 3s; aborting \
             rather than risk its writes into a buffer in use"
        );
    }
}
