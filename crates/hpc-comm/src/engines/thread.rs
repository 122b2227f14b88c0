//! The `Thread` engine: the ranks' own path ([`Host`]) plus a progress thread
//! per process, pinned to the progress core where one is reserved, that
//! sleeps on its futex until a large copy or a round to post needs it (an
//! eager agent) or polls every millisecond while collectives are in flight
//! (a lazy one); see `AgentWake`. Its driver is [`Inline`]'s, which joins the
//! thread at shutdown.

use std::sync::{Arc, Mutex};

use super::inline::{Host, Inline};
use crate::executor;
use hpc_board::{Error, Result};

/// Starts the progress thread of `host` (whose `agent` is set), pinned to
/// `cpus` where given.
pub(crate) fn spawn(
    host: Arc<Host>,
    cpus: Option<hpc_topology::CpuSet>,
    eager: bool,
) -> Result<Inline> {
    let me = host.rank();
    host.board.set_agent_eager(me, eager);
    let (s, b) = (host.shared.clone(), host.board.clone());
    let h = std::thread::Builder::new()
        .name(format!("hpc-progress-{me}"))
        .spawn(move || {
            if let Some(c) = cpus {
                if let Err(e) = hpc_topology::bind_current_thread(&c) {
                    tracing::warn!(error = %e, "could not pin the progress thread");
                }
            }
            executor::raise_priority();
            executor::agent_loop(s, b, me)
        })
        .map_err(|e| Error::transport_from("spawning the progress thread", e))?;
    Ok(Inline {
        host,
        agent: Mutex::new(Some(h)),
    })
}
