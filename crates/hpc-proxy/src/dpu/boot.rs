//! Starting the proxy: its spec, joining the link and serving.

use super::link::{backend_name, join, meet, route_to, Link, Watch};
use super::seccomp::forbid_host_memory;
use super::server::Server;
use super::wire::{Place, TAG_PLACE, TAG_READY};
use crate::net::ProxyNet;
use hpc_board::{Error, Result};
use hpc_rdma::Choice;
use std::net::SocketAddr;
use std::time::Duration;

/// The longest timeout a DPU proxy's spec may give, in seconds (a week, as
/// `HPC_TIMEOUT`).
pub const MAX_SPEC_TIMEOUT_S: f64 = 7.0 * 86400.0;

/// Serves as the proxy in DPU placement, from `HPC_COLL_PROXY_DPU`
/// (`ADDRESS SECRET MEMBERS TIMEOUT_S BACKEND`), until every rank detached or
/// died.
pub fn serve_spec(spec: &str) -> Result<()> {
    let bad = || {
        Error::Unsupported(format!(
            "{}={} is malformed",
            hpc_runtime::env::COLL_PROXY_DPU,
            hpc_runtime::env::shown(spec)
        ))
    };
    let f: Vec<&str> = spec.split_whitespace().collect();
    let [addr, secret, members, timeout, backend] = f[..] else {
        return Err(bad());
    };
    let to: SocketAddr = addr.parse().map_err(|_| bad())?;
    let secret = u64::from_str_radix(secret, 16).map_err(|_| bad())?;
    let members: usize = members.parse().map_err(|_| bad())?;
    // From a request (through the DPU service): a number of seconds that
    // `Duration` cannot hold (1e300) is refused, not a panic.
    let timeout = timeout
        .parse::<f64>()
        .ok()
        .filter(|t| t.is_finite() && *t > 0.0 && *t <= MAX_SPEC_TIMEOUT_S)
        .and_then(|t| Duration::try_from_secs_f64(t).ok())
        // Above 0 as a `Duration` too: 5e-324 s is none.
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            // The spec and its timeout cut: a variable's value of 100,000
            // characters was quoted whole, twice.
            Error::Unsupported(format!(
                "{}={}: its timeout {} is not a number of seconds above 0 and at \
                 most {MAX_SPEC_TIMEOUT_S} (a week)",
                hpc_runtime::env::COLL_PROXY_DPU,
                hpc_runtime::env::shown(spec),
                hpc_runtime::env::shown(timeout)
            ))
        })?;
    let backend: Choice = backend.parse().map_err(|_| bad())?;
    if members < 2 {
        return Err(bad());
    }
    forbid_host_memory()?;
    let link = Link {
        rendezvous: addr.to_string(),
        secret,
        members,
        timeout,
        backend,
    };
    let (t, watch) = join(&link, members - 1, route_to(to), "dpu")?;
    let Watch::Ranks(watch) = watch else {
        unreachable!("the proxy's watch is its ranks' connections");
    };
    let ranks = members - 1;
    // Its place, from the node's first rank; then the other nodes' proxies.
    let placed = (|| -> Result<(Place, Option<ProxyNet>)> {
        let op = t
            .recv(0, TAG_PLACE)
            .map_err(|e| Error::transport_from("waiting for its place", e))?;
        let b = t
            .wait_timeout(op, timeout)
            .map_err(|e| Error::transport_from("waiting for its place", e))?
            .into_bytes();
        let place: Place = postcard::from_bytes(&b)
            .map_err(|e| Error::transport_from("an undecodable place", e))?;
        let nodes = place.node_ids.len();
        let size = place.node_of.len();
        if place.ranks.len() != ranks
            || place.me >= nodes
            || place.node_of.iter().any(|&n| n >= nodes)
            || place
                .ranks
                .iter()
                .any(|&r| place.node_of.get(r) != Some(&place.me))
            || (nodes > 1) != place.net.is_some()
        {
            return Err(Error::transport(format!(
                "a place that does not fit its {ranks} ranks ({size} in all)"
            )));
        }
        let net = match &place.net {
            None => None,
            Some((at, secret)) => Some(meet(&place, at, *secret, timeout, backend)?),
        };
        Ok((place, net))
    })();
    let word = match &placed {
        Ok(_) => String::new(),
        Err(e) => e.chain(),
    };
    for r in 0..ranks {
        if let Ok(op) = t.send(r, TAG_READY, word.clone().into_bytes()) {
            let _ = t.wait_timeout(op, timeout);
        }
    }
    let (place, net) = placed?;
    tracing::info!(
        ranks,
        node = place.me,
        nodes = place.node_ids.len(),
        backend = backend_name(backend),
        "DPU proxy serving"
    );
    Server::new(t, place, watch, net).run()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec whose timeout `Duration` cannot hold (reachable by an authenticated
    /// request to the DPU service) is an error naming the timeout, not a panic.
    #[test]
    fn a_spec_timeout_out_of_range_is_an_error() {
        for t in ["1e300", "inf", "NaN", "-1", "0", "604801"] {
            let e = serve_spec(&format!("127.0.0.1:9 00ff 2 {t} auto"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("timeout") && e.contains(t), "{t}: {e}");
        }
    }

    /// A timeout below a nanosecond was taken as a `Duration` of 0, and a
    /// spec of 100,000 characters was quoted whole in the refusal.
    #[test]
    fn a_spec_is_cut_and_its_timeout_above_a_nanosecond() {
        let e = serve_spec("127.0.0.1:9 00ff 2 5e-324 auto")
            .unwrap_err()
            .to_string();
        assert!(e.contains("its timeout \"5e-324\""), "{e}");
        let long = "x".repeat(100_000);
        for spec in [long.clone(), format!("127.0.0.1:9 00ff 2 {long} auto")] {
            let e = serve_spec(&spec).unwrap_err().to_string();
            assert!(e.len() < 400, "{} bytes: {}", e.len(), &e[..200]);
        }
    }
}
