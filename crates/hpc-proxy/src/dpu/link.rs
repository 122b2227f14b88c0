//! Finding each other: the link between ranks and proxy (its backend, the
//! address, the watch connections, joining the small job) and the meeting of
//! the nodes' proxies.

use super::wire::Place;
use crate::net::{watch_accept, watch_address, watch_connect, watch_each_other, Hello, ProxyNet};
use hpc_board::{Error, Result};
use hpc_rdma::{Choice, Transport};
use hpc_runtime::World;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

// ---------------------------------------------------------------------------
// Finding each other.

/// The backend of the link between ranks and proxy: `HPC_TRANSPORT` where it
/// names a network backend, else tcp (never shared memory).
pub fn link_backend() -> Choice {
    match std::env::var(hpc_runtime::env::TRANSPORT)
        .ok()
        .and_then(|v| v.parse::<Choice>().ok())
    {
        Some(c @ (Choice::Ofi | Choice::Verbs)) => c,
        _ => Choice::Tcp,
    }
}

/// The backend's name as `HPC_TRANSPORT` spells it.
pub fn backend_name(c: Choice) -> &'static str {
    match c {
        Choice::Ofi => "ofi",
        Choice::Verbs => "verbs",
        _ => "tcp",
    }
}

/// The address the first rank listens on for its proxy: `HPC_COLL_PROXY_ADDR`,
/// else the one that routes to the node's DPU (`HPC_COLL_PROXY_DPU_HOST`),
/// else loopback.
pub fn host_addr() -> Result<IpAddr> {
    // A value that is not UTF-8 is an error naming the variable (it was read
    // as unset: loopback, or the DPU's route, without a word).
    match hpc_runtime::env::var(hpc_runtime::env::COLL_PROXY_ADDR).map_err(Error::Unsupported)? {
        Some(v) => ip_of(&v),
        None => match dpu_service_addr() {
            Some(at) => Ok(route_to(at?)),
            None => Ok(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        },
    }
}

/// A value of `HPC_COLL_PROXY_ADDR` as an address, or an error naming it.
fn ip_of(v: &str) -> Result<IpAddr> {
    v.trim().parse().map_err(|_| {
        Error::Unsupported(format!(
            "{}={} is not an IP address",
            hpc_runtime::env::COLL_PROXY_ADDR,
            hpc_runtime::env::shown(v)
        ))
    })
}

/// The default port of the standing DPU service ([`dpu_service`](crate::dpu_service)).
pub const DPU_SERVICE_PORT: u16 = 7471;

/// The address of this node's DPU service, from `HPC_COLL_PROXY_DPU_HOST`
/// (`host[:port]`, `{host}` replaced by this host's name); `None` if unset,
/// an error naming it where it is not UTF-8 (it was read as unset).
pub fn dpu_service_addr() -> Option<Result<SocketAddr>> {
    match hpc_runtime::env::var(hpc_runtime::env::COLL_PROXY_DPU_HOST) {
        Ok(v) => Some(service_addr_of(&v?)),
        Err(e) => Some(Err(Error::Unsupported(e))),
    }
}

/// A value of `HPC_COLL_PROXY_DPU_HOST` as an address, or an error naming it
/// (the value shown cut, as every variable's).
fn service_addr_of(v: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    let at = v.trim().replace("{host}", &hpc_runtime::hostname());
    // An IPv6 address without a port (`::1`, `[::1]`) gets the default port
    // too: its colons were taken for a port's, and the value refused.
    let bare = at.strip_prefix('[').and_then(|a| a.strip_suffix(']'));
    let with_port = if let Ok(ip) = bare.unwrap_or(&at).parse::<IpAddr>() {
        SocketAddr::new(ip, DPU_SERVICE_PORT).to_string()
    } else if at.contains(':') {
        at.clone()
    } else {
        format!("{at}:{DPU_SERVICE_PORT}")
    };
    with_port
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            Error::Unsupported(format!(
                "{}={}: no address for {}",
                hpc_runtime::env::COLL_PROXY_DPU_HOST,
                hpc_runtime::env::shown(v),
                hpc_runtime::env::shown(&with_port)
            ))
        })
}

/// The local address that routes to `to` (`to`'s own where none does).
pub fn route_to(to: SocketAddr) -> IpAddr {
    crate::net::route(to).unwrap_or(to.ip())
}

/// The small job that ranks and proxy meet in: its coordinator, members
/// (the ranks, then the proxy), timeout and the transport's backend.
pub struct Link {
    /// The coordinator's address.
    pub rendezvous: String,
    /// The job's secret.
    pub secret: u64,
    /// How many members: the ranks, then the proxy.
    pub members: usize,
    /// How long joining may take.
    pub timeout: Duration,
    /// The transport's backend.
    pub backend: Choice,
}

/// The other side's liveness, whatever the transport: a plain TCP
/// connection between each rank and the proxy that carries nothing and
/// closes when its process ends (the kernel closes it), so that a waiting
/// side learns of the other's death even where the transport reports a lost
/// peer only when an operation to it fails (libfabric's `tcp;ofi_rxm`).
pub enum Watch {
    /// A rank's connection to the proxy.
    Proxy(TcpStream),
    /// The proxy's connections from the ranks, by rank (`None` once closed).
    Ranks(Vec<Option<TcpStream>>),
}

/// The watch connections: the proxy (the last member) listens on `ip`, every
/// rank connects and names itself.
pub fn watch(side: &World, rank: usize, ip: IpAddr, timeout: Duration) -> Result<Watch> {
    let io = |what: &str, e: std::io::Error| Error::transport_from(what, e);
    let size = side.size();
    let listener = if rank == size - 1 {
        Some(TcpListener::bind(SocketAddr::new(ip, 0)).map_err(|e| io("listening", e))?)
    } else {
        None
    };
    let (mine, token) = match &listener {
        Some(l) => watch_address(l)?,
        None => (String::new(), 0),
    };
    let all = side.allgather(mine.as_bytes())?;
    let Some(l) = listener else {
        return watch_connect(&all[size - 1], "the proxy's", rank, timeout).map(Watch::Proxy);
    };
    let mut ranks: Vec<Option<TcpStream>> = (0..size - 1).map(|_| None).collect();
    watch_accept(
        &l,
        token,
        &mut ranks,
        |_| true,
        timeout,
        "DPU proxy",
        |missing| format!("ranks {missing:?} did not connect to the proxy"),
    )?;
    Ok(Watch::Ranks(ranks))
}

/// Joins the link's job as `rank` and builds the transport over it,
/// listening on `ip`; then the watch connections.
pub fn join(link: &Link, rank: usize, ip: IpAddr, node: &str) -> Result<(Transport, Watch)> {
    let Link {
        ref rendezvous,
        secret,
        members: size,
        timeout,
        backend,
    } = *link;
    let env = hpc_runtime::env::NODE_NAME;
    let map: HashMap<String, String> = [
        (hpc_runtime::env::RANK, rank.to_string()),
        (hpc_runtime::env::SIZE, size.to_string()),
        (hpc_runtime::env::RENDEZVOUS, rendezvous.to_string()),
        (hpc_runtime::env::SECRET, format!("{secret:x}")),
        (hpc_runtime::env::TIMEOUT, timeout.as_secs_f64().to_string()),
        (env, node.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let config = hpc_runtime::Config::from_map(map)?;
    let side = World::init_with(config).map_err(|e| proxy_absent(e, rank, size))?;
    let t = Transport::with_options(
        &side,
        hpc_rdma::Options {
            backend,
            timeout: Some(timeout),
            tcp_addr: Some(ip),
        },
    )
    .map_err(|e| Error::transport_from("the link between ranks and DPU proxy", e))?;
    let w = watch(&side, rank, ip, timeout)?;
    side.barrier()?;
    Ok((t, w))
}

/// A rank's failure to join its link (`size` members, the proxy last): the
/// proxy not joining in time is said so, where it read "init (waiting for
/// all ranks to join) timed out after 3s: still waiting for rank(s) 2", the
/// proxy known only by its place in the link.
fn proxy_absent(e: hpc_runtime::Error, rank: usize, size: usize) -> Error {
    let proxy = size.saturating_sub(1);
    match &e {
        hpc_runtime::Error::Timeout { after, missing, .. }
            if rank != proxy && missing.contains(&proxy) =>
        {
            Error::transport(format!(
                "the DPU proxy did not join its ranks within {after:?} (it was started and \
                 does not serve: is it a program that serves as the proxy?); {e}"
            ))
        }
        _ => e.into(),
    }
}

/// Joins the other nodes' proxies at the coordinator `at` and connects to them.
pub fn meet(
    place: &Place,
    at: &str,
    secret: u64,
    timeout: Duration,
    backend: Choice,
) -> Result<ProxyNet> {
    let to: SocketAddr = at
        .parse()
        .map_err(|_| Error::transport(format!("the proxies' meeting point {at:?}")))?;
    let nodes = place.node_ids.len();
    let map: HashMap<String, String> = [
        (hpc_runtime::env::RANK, place.me.to_string()),
        (hpc_runtime::env::SIZE, nodes.to_string()),
        (hpc_runtime::env::RENDEZVOUS, at.to_string()),
        (hpc_runtime::env::SECRET, format!("{secret:x}")),
        (hpc_runtime::env::TIMEOUT, timeout.as_secs_f64().to_string()),
        // One node each: no two proxies share memory.
        (
            hpc_runtime::env::NODE_NAME,
            format!("dpu-node-{}", place.me),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let world = World::init_with(hpc_runtime::Config::from_map(map)?)?;
    let t = Transport::with_options(
        &world,
        hpc_rdma::Options {
            backend,
            timeout: Some(timeout),
            tcp_addr: Some(route_to(to)),
        },
    )
    .map_err(|e| Error::transport_from("connecting to the other nodes' DPU proxies", e))?;
    let watch = watch_each_other(&world, route_to(to), timeout)?;
    world.barrier()?;
    let hello = Hello {
        me: place.me,
        node_of: place.node_of.clone(),
        node_ids: place.node_ids.clone(),
        timeout_ms: timeout.as_millis() as u64,
        rendezvous: None,
    };
    Ok(ProxyNet::over(t, hello).with_watch(watch))
}

/// How often a waiting rank looks at its watch connection, and the proxy at
/// its ranks'.
pub const WATCH_EVERY: Duration = Duration::from_millis(5);

/// How long the DPU proxy waits, after a rank's watch connection closed, for
/// that rank's `Detach` still in flight on the transport, before it counts
/// the rank as dead (and tells the other nodes so). A rank that ends normally
/// has sent its `Detach`, and waited for the send to complete, before it
/// exits (the client's `detach`).
pub const DETACH_GRACE: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;

    /// Pass 15: the proxy's address variables echoed a value of 100,000
    /// characters whole into each rank's error, as the other variables did
    /// before `hpc_env::shown`.
    #[test]
    fn a_long_address_is_refused_in_a_line() {
        let long = "h".repeat(100_000);
        let named = [
            (ip_of(&long).unwrap_err(), hpc_runtime::env::COLL_PROXY_ADDR),
            (
                service_addr_of(&long).unwrap_err(),
                hpc_runtime::env::COLL_PROXY_DPU_HOST,
            ),
        ];
        for (e, name) in named {
            let e = e.to_string();
            assert!(e.contains(name), "{e}");
            assert!(e.len() < 300, "{} bytes", e.len());
        }
        assert_eq!(ip_of(" 10.0.0.1 ").unwrap(), IpAddr::from([10, 0, 0, 1]));
        assert_eq!(
            service_addr_of("127.0.0.1:99").unwrap(),
            SocketAddr::from(([127, 0, 0, 1], 99))
        );
    }

    /// `host[:port]` with an IPv6 address for the host and no port: the
    /// default port (`::1` and `[::1]` were refused, "no address for
    /// \"::1\"": the address's colons taken for a port's).
    #[test]
    fn an_ipv6_service_address_without_a_port_gets_the_default_port() {
        let v6 = SocketAddr::new(
            IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
            DPU_SERVICE_PORT,
        );
        assert_eq!(service_addr_of("::1").unwrap(), v6);
        assert_eq!(service_addr_of(" [::1] ").unwrap(), v6);
        assert_eq!(
            service_addr_of("[::1]:99").unwrap(),
            SocketAddr::new(v6.ip(), 99)
        );
        assert_eq!(
            service_addr_of("127.0.0.1").unwrap(),
            SocketAddr::from(([127, 0, 0, 1], DPU_SERVICE_PORT))
        );
    }

    /// A rank whose link's proxy (its last member) does not join says so:
    /// it read "init (waiting for all ranks to join) timed out after 3s:
    /// still waiting for rank(s) 2", the proxy known only by its place.
    #[test]
    fn a_proxy_that_does_not_join_the_link_is_named() {
        let secret = hpc_runtime::random_u64().unwrap();
        let coord = hpc_runtime::Coordinator::start(
            2,
            secret,
            Duration::from_millis(300),
            IpAddr::from([127, 0, 0, 1]),
        )
        .unwrap();
        let link = Link {
            rendezvous: coord.addr().to_string(),
            secret,
            members: 2,
            timeout: Duration::from_millis(300),
            backend: Choice::Auto,
        };
        let e = match join(&link, 0, IpAddr::from([127, 0, 0, 1]), "host") {
            Err(e) => e.to_string(),
            Ok(_) => panic!("joined a link without its proxy"),
        };
        assert!(
            e.contains("the DPU proxy did not join its ranks within 300ms")
                && e.contains("still waiting for rank(s) 1"),
            "{e}"
        );
    }
}
