//! Accepting the connections of a set-up, each opened by a greeting of a
//! fixed length, all at once: one that says nothing holds none of the
//! others.
//!
//! The set-ups that accept their peers' connections (the tcp transport's,
//! the proxies' watch connections) read each connection's greeting in turn,
//! blocking up to 5 s on it: a connection that said nothing (anyone who
//! reached the port) held every peer behind it for 5 s, and a few of them
//! made the set-up fail at its deadline. Here every connection waiting for
//! its greeting is read without blocking, in one loop.

use std::collections::VecDeque;
use std::io::Read as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// The longest an accepted connection is given to say its greeting.
pub const GREETING_WAIT: Duration = Duration::from_secs(5);

/// How many connections may wait for their greeting at once; past that the
/// one that has waited longest is closed.
pub const MAX_WAITING: usize = 64;

/// A connection that has not said its whole greeting yet.
struct Waiting<const N: usize> {
    s: TcpStream,
    from: SocketAddr,
    b: [u8; N],
    have: usize,
    since: Instant,
}

/// Accepts connections on `l` (made non-blocking) until `deadline`, each
/// opened by a greeting of `N` bytes, reading the greetings of every
/// waiting connection without blocking: `take(stream, greeting, from)` gets
/// each connection whose greeting came (its stream non-blocking) and says
/// whether the set-up now has every connection it wants. A connection that
/// closes, or says nothing for [`GREETING_WAIT`], is closed (logged as
/// `who`'s). `Ok(true)` once `take` said so, `Ok(false)` at the deadline.
///
/// # Errors
///
/// The listener's error (other than an interrupted or would-block accept).
pub fn accept_greetings<const N: usize>(
    l: &TcpListener,
    deadline: Instant,
    who: &str,
    mut take: impl FnMut(TcpStream, [u8; N], SocketAddr) -> bool,
) -> std::io::Result<bool> {
    l.set_nonblocking(true)?;
    let mut waiting: VecDeque<Waiting<N>> = VecDeque::new();
    let (mut evicted, mut closed_count) = (0u64, 0u64);
    loop {
        if Instant::now() > deadline {
            return Ok(false);
        }
        let mut idle = true;
        loop {
            match l.accept() {
                Ok((s, from)) => {
                    idle = false;
                    if s.set_nonblocking(true).is_err() {
                        continue;
                    }
                    if waiting.len() >= MAX_WAITING {
                        if let Some(w) = waiting.pop_front() {
                            // Said once: a flood of connections is not a
                            // flood of warnings.
                            evicted += 1;
                            if evicted == 1 {
                                tracing::warn!(from = %w.from, "{who}: more than {MAX_WAITING} connections wait for their greeting; closing the oldest");
                            }
                        }
                    }
                    waiting.push_back(Waiting {
                        s,
                        from,
                        b: [0; N],
                        have: 0,
                        since: Instant::now(),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let mut i = 0;
        while i < waiting.len() {
            let w = &mut waiting[i];
            let closed = match (&w.s).read(&mut w.b[w.have..]) {
                Ok(0) => Some("closed before its greeting"),
                Ok(n) => {
                    idle = false;
                    w.have += n;
                    if w.have == N {
                        let w = waiting.remove(i).expect("index in range");
                        if take(w.s, w.b, w.from) {
                            return Ok(true);
                        }
                        continue;
                    }
                    None
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    (w.since.elapsed() > GREETING_WAIT).then_some("said no greeting in time")
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => None,
                Err(_) => Some("failed before its greeting"),
            };
            match closed {
                Some(why) => {
                    let w = waiting.remove(i).expect("index in range");
                    closed_count += 1;
                    if closed_count == 1 {
                        tracing::warn!(from = %w.from, "{who}: closed a connection that {why} (the next are logged at debug level)");
                    } else {
                        tracing::debug!(from = %w.from, "{who}: closed a connection that {why}");
                    }
                }
                None => i += 1,
            }
        }
        if idle {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    /// A connection that says nothing does not hold the one behind it: the
    /// greetings were read one connection after the other, blocking up to
    /// 5 s on each, so a silent connection that came first held a peer's
    /// 5 s (and three of them failed a set-up of 10 s).
    #[test]
    fn a_silent_connection_holds_none_behind_it() {
        let l = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).unwrap();
        let at = l.local_addr().unwrap();
        let silent: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(at).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(20));
        let mut peer = TcpStream::connect(at).unwrap();
        peer.write_all(b"hello!").unwrap();
        let t0 = Instant::now();
        let mut got = Vec::new();
        let all = accept_greetings::<6>(&l, t0 + Duration::from_secs(10), "test", |_, b, _| {
            got.push(b);
            true
        })
        .unwrap();
        let took = t0.elapsed();
        assert!(all && got == [*b"hello!"], "{got:?}");
        assert!(took < Duration::from_secs(2), "the peer waited {took:?}");
        drop(silent);
    }

    /// Greetings that come in pieces, and from several connections
    /// interleaved, are each read whole; at the deadline the answer is no.
    #[test]
    fn greetings_in_pieces_are_read_whole_and_the_deadline_holds() {
        let l = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).unwrap();
        let at = l.local_addr().unwrap();
        let writer = std::thread::spawn(move || {
            let mut s = [
                TcpStream::connect(at).unwrap(),
                TcpStream::connect(at).unwrap(),
            ];
            for (i, part) in [(0, b"ab"), (1, b"xy"), (0, b"cd"), (1, b"zw")] {
                s[i].write_all(part).unwrap();
                std::thread::sleep(Duration::from_millis(30));
            }
            s
        });
        let mut got = Vec::new();
        let t0 = Instant::now();
        let all = accept_greetings::<4>(&l, t0 + Duration::from_secs(10), "test", |_, b, _| {
            got.push(b);
            got.len() == 2
        })
        .unwrap();
        assert!(all);
        got.sort();
        assert_eq!(got, [*b"abcd", *b"xyzw"]);
        let _kept = writer.join().unwrap();
        let t0 = Instant::now();
        let none =
            accept_greetings::<4>(&l, t0 + Duration::from_millis(200), "test", |_, _, _| true)
                .unwrap();
        assert!(!none && t0.elapsed() < Duration::from_secs(2));
    }
}
