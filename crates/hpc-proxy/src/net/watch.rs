//! The watch connections between proxies (and between a proxy and its
//! ranks): plain TCP connections that carry nothing and close when the
//! process at the other end ends, each opened with its name and the
//! listener's token.

use std::io::Write as _;
use std::time::{Duration, Instant};

use hpc_board::{Error, Result};

/// Whether the other end of a watch connection is gone.
pub fn closed(s: &std::net::TcpStream) -> bool {
    let mut b = [0u8; 1];
    match s.peek(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// The watch connections between the proxies of `world` (one member each):
/// every proxy listens on `ip`; each connects to those before it and
/// accepts those after it. Non-blocking, by proxy index (`None` for itself).
pub fn watch_each_other(
    world: &hpc_runtime::World,
    ip: std::net::IpAddr,
    timeout: Duration,
) -> Result<Vec<Option<std::net::TcpStream>>> {
    let (me, n) = (world.rank(), world.size());
    let l = std::net::TcpListener::bind(std::net::SocketAddr::new(ip, 0))
        .map_err(|e| Error::transport_from("listening", e))?;
    let (mine, token) = watch_address(&l)?;
    let all = world.allgather(mine.as_bytes())?;
    let mut watch: Vec<Option<std::net::TcpStream>> = (0..n).map(|_| None).collect();
    // One deadline for every connection, made and accepted: each connection
    // to a proxy before this one was given the whole timeout, one after the
    // other, and the accepts the whole of it again.
    let deadline = Instant::now() + timeout;
    connect_each(&all[..me], me, deadline, &mut watch)?;
    watch_accept(
        &l,
        token,
        &mut watch,
        |p| p > me,
        left(deadline),
        "proxy",
        |_| "the other proxies did not connect".to_string(),
    )?;
    Ok(watch)
}

/// The time left until `deadline`, at least a millisecond (a timeout of 0
/// is none).
fn left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// Connects the watch connection of proxy `me` to each proxy whose address
/// is in `at` (by index, [`watch_address`]'s), into `watch`, by `deadline`.
fn connect_each(
    at: &[Vec<u8>],
    me: usize,
    deadline: Instant,
    watch: &mut [Option<std::net::TcpStream>],
) -> Result<()> {
    for (p, at) in at.iter().enumerate() {
        watch[p] = Some(watch_connect(
            at,
            &format!("proxy {p}'s"),
            me,
            left(deadline),
        )?);
    }
    Ok(())
}

/// What a watch listener `l` tells the job (`ADDRESS TOKEN`, for
/// [`watch_connect`]), and the token, which every connection to it must
/// give ([`watch_accept`]): without it a process that reached the port first
/// took a peer's slot by naming it.
pub fn watch_address(l: &std::net::TcpListener) -> Result<(String, u64)> {
    let addr = l
        .local_addr()
        .map_err(|e| Error::transport_from("listening", e))?;
    let token = hpc_runtime::random_u64()?;
    Ok((format!("{addr} {token}"), token))
}

/// Connects a watch connection to `at` (`ADDRESS TOKEN`, what `whose`
/// listener gave: [`watch_address`]), and names this end `me` there with the
/// token (what [`watch_accept`] reads); then non-blocking.
pub fn watch_connect(
    at: &[u8],
    whose: &str,
    me: usize,
    timeout: Duration,
) -> Result<std::net::TcpStream> {
    let io = |what: &str, e: std::io::Error| Error::transport_from(what, e);
    let at = String::from_utf8_lossy(at);
    let (addr, token) = at
        .split_once(' ')
        .and_then(|(a, t)| {
            Some((
                a.parse::<std::net::SocketAddr>().ok()?,
                t.parse::<u64>().ok()?,
            ))
        })
        .ok_or_else(|| {
            Error::transport(format!(
                "{whose} watch address {}",
                hpc_runtime::env::shown(&at)
            ))
        })?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| io(&format!("connecting to the proxy at {addr}"), e))?;
    let mut hello = (me as u64).to_le_bytes().to_vec();
    hello.extend_from_slice(&token.to_le_bytes());
    s.write_all(&hello)
        .map_err(|e| io("greeting the proxy", e))?;
    s.set_nonblocking(true).map_err(|e| io("watch", e))?;
    Ok(s)
}

/// Accepts on `l`, within `timeout`, the watch connection of every peer `p`
/// that `wanted(p)` holds for, into `slots[p]` (non-blocking); a connection
/// that names another, or does not give `token` ([`watch_address`]), is
/// refused (logged by `who`). `late` says that the peers it is given (by
/// index) did not connect. Every connection's name is read at once
/// ([`hpc_runtime::greet`]): one that said nothing held the peers behind it
/// for up to 5 s each, and a few made the wait fail at its deadline.
pub fn watch_accept(
    l: &std::net::TcpListener,
    token: u64,
    slots: &mut [Option<std::net::TcpStream>],
    wanted: impl Fn(usize) -> bool,
    timeout: Duration,
    who: &str,
    late: impl Fn(Vec<usize>) -> String,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let missing = |slots: &[Option<_>]| -> Vec<usize> {
        (0..slots.len())
            .filter(|&p| wanted(p) && slots[p].is_none())
            .collect()
    };
    if missing(slots).is_empty() {
        return Ok(());
    }
    let all_in = hpc_runtime::greet::accept_greetings::<16>(l, deadline, who, |s, b, from| {
        match name_of(&b, token) {
            Ok(p) if p < slots.len() && wanted(p) && slots[p].is_none() => slots[p] = Some(s),
            _ => tracing::warn!(%from, "{who}: refused a watch connection"),
        }
        missing(slots).is_empty()
    })
    .map_err(|e| Error::transport_from("accepting a watch connection", e))?;
    if !all_in {
        return Err(Error::transport(format!(
            "{} within {timeout:?}",
            late(missing(slots))
        )));
    }
    Ok(())
}

/// The name (a rank or node index) of the 16 bytes that open a watch
/// connection: the name, then the listener's `token`, each 8 bytes
/// little-endian; another token is an error.
fn name_of(b: &[u8; 16], token: u64) -> std::io::Result<usize> {
    let (name, given) = b.split_at(8);
    if given != token.to_le_bytes() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "the watch connection did not give the listener's token",
        ));
    }
    Ok(u64::from_le_bytes(name.try_into().expect("8 bytes")) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Watch connections that say nothing do not hold the wait past its
    /// deadline: each was given 5 s to say its name and the deadline was
    /// looked at only while none waited (three held a wait of 800 ms for 15
    /// s). The error says who did not connect and the timeout.
    #[test]
    fn silent_watch_connections_do_not_hold_the_wait_past_its_deadline() {
        let l = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).unwrap();
        let at = l.local_addr().unwrap();
        let silent: Vec<std::net::TcpStream> = (0..3)
            .map(|_| std::net::TcpStream::connect(at).unwrap())
            .collect();
        let mut slots: Vec<Option<std::net::TcpStream>> = (0..3).map(|_| None).collect();
        let t0 = Instant::now();
        let e = watch_accept(
            &l,
            7,
            &mut slots,
            |p| p > 0,
            Duration::from_millis(800),
            "proxy",
            |m| format!("proxies {m:?} did not connect"),
        )
        .unwrap_err()
        .to_string();
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(3), "{took:?}: {e}");
        assert!(e.contains("did not connect within 800ms"), "{e}");
        drop(silent);
    }

    /// The connections to the proxies before this one end by one deadline:
    /// each was given the whole timeout, one after the other. Here the first
    /// proxy's listener takes the connection late (its queue full until
    /// 300 ms: the kernel's second try, after a second, gets in), the
    /// second's never: a set-up of 1.5 s took 2.5 s.
    #[test]
    fn connections_to_full_listeners_end_by_one_deadline() {
        use std::os::fd::AsRawFd;
        let full = || {
            let l = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).unwrap();
            // SAFETY: `l`'s descriptor is open (it owns it) and listening;
            // listen(2) again only sets its queue to one connection.
            assert_eq!(unsafe { libc::listen(l.as_raw_fd(), 0) }, 0);
            // The queue's one place, taken.
            let queued = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (at, _) = watch_address(&l).unwrap();
            (l, queued, at.into_bytes())
        };
        let (late, never) = (full(), full());
        let (at_late, at_never) = (late.2.clone(), never.2.clone());
        let frees = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let taken = late.0.accept().unwrap();
            std::thread::sleep(Duration::from_secs(2));
            drop((late, taken));
        });
        let mut slots: Vec<Option<std::net::TcpStream>> = (0..3).map(|_| None).collect();
        let t0 = Instant::now();
        let e = connect_each(
            &[at_late, at_never],
            2,
            t0 + Duration::from_millis(1500),
            &mut slots,
        )
        .unwrap_err()
        .to_string();
        let took = t0.elapsed();
        assert!(
            slots[0].is_some(),
            "the first proxy's connection was not made: {e}"
        );
        assert!(took < Duration::from_millis(1900), "{took:?}: {e}");
        assert!(e.contains("connecting to the proxy at"), "{e}");
        drop(never);
        frees.join().unwrap();
    }

    /// A watch connection that says nothing does not hold a peer's that
    /// comes after it: the names were read one after the other, blocking up
    /// to 5 s on each.
    #[test]
    fn a_silent_watch_connection_holds_no_peer_behind_it() {
        let l = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).unwrap();
        let (at, token) = watch_address(&l).unwrap();
        let addr = at.split_once(' ').unwrap().0.to_string();
        let silent = std::net::TcpStream::connect(&addr).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let real = watch_connect(at.as_bytes(), "the test's", 1, Duration::from_secs(5)).unwrap();
        let mut slots: Vec<Option<std::net::TcpStream>> = (0..2).map(|_| None).collect();
        let t0 = Instant::now();
        watch_accept(
            &l,
            token,
            &mut slots,
            |p| p == 1,
            Duration::from_secs(20),
            "proxy",
            |m| format!("{m:?} did not connect"),
        )
        .unwrap();
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(2), "the peer waited {took:?}");
        let taken = slots[1].as_ref().unwrap().peer_addr().unwrap();
        assert_eq!(taken, real.local_addr().unwrap());
        drop(silent);
    }

    /// A connection that names a peer without the listener's token does not
    /// take its slot: the name was all a watch connection said, so a process
    /// that reached the port first took a peer's slot, and the peer's own
    /// connection was refused (its death then went unseen, or the impostor's
    /// end was taken for it).
    #[test]
    fn a_watch_connection_without_the_token_takes_no_slot() {
        let l = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).unwrap();
        let (at, token) = watch_address(&l).unwrap();
        let addr = at.split_once(' ').unwrap().0.to_string();
        let mut impostor = std::net::TcpStream::connect(&addr).unwrap();
        let mut hello = 1u64.to_le_bytes().to_vec();
        hello.extend_from_slice(&token.wrapping_add(1).to_le_bytes());
        impostor.write_all(&hello).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let real = watch_connect(at.as_bytes(), "the test's", 1, Duration::from_secs(5)).unwrap();
        let mut slots: Vec<Option<std::net::TcpStream>> = (0..2).map(|_| None).collect();
        watch_accept(
            &l,
            token,
            &mut slots,
            |p| p == 1,
            Duration::from_secs(5),
            "proxy",
            |m| format!("{m:?} did not connect"),
        )
        .unwrap();
        let taken = slots[1].as_ref().unwrap().peer_addr().unwrap();
        assert_eq!(
            taken,
            real.local_addr().unwrap(),
            "the impostor took the slot"
        );
        // An address without a token is refused by name, not taken.
        let e = watch_connect(addr.as_bytes(), "the test's", 1, Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("the test's watch address"), "{e}");
    }
}
