//! A rank's connection to the `hpc run` coordinator.

use std::io::BufReader;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::wire::{read_msg, write_msg, FrameTooLarge, Msg, Op, ReadError};

pub(crate) struct LauncherLink {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    seq: u64,
    addr: String,
    timeout: Duration,
    /// Once a peer is lost the job is over; later calls fail the same way at once.
    poisoned: Option<(usize, String)>,
    finalized: bool,
}

/// Extra time a rank waits beyond the job timeout, so that the coordinator's own
/// timeout message (which names the missing ranks) arrives first.
fn grace(timeout: Duration) -> Duration {
    Duration::from_secs(2) + timeout / 10
}

impl LauncherLink {
    pub(crate) fn connect(
        rank: usize,
        size: usize,
        addr: &str,
        secret: u64,
        node: &str,
        timeout: Duration,
    ) -> Result<(LauncherLink, Vec<String>)> {
        let lost = |cause: String| Error::LauncherLost {
            addr: addr.to_string(),
            cause,
        };
        let sockaddr = addr
            .to_socket_addrs()
            .map_err(|e| lost(format!("bad address: {e}")))?
            .next()
            .ok_or_else(|| lost("address resolves to nothing".into()))?;
        let deadline = Instant::now() + timeout;
        // The launcher listens before it starts any rank, but a rank on a slow or
        // remote node may still race it: retry until the timeout.
        let stream = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match TcpStream::connect_timeout(&sockaddr, left.max(Duration::from_millis(10))) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    return Err(lost(format!("cannot connect within {timeout:?}: {e}")))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let _ = stream.set_nodelay(true);
        stream
            .set_read_timeout(Some(timeout + grace(timeout)))
            .map_err(|e| Error::io("setting a socket timeout", e))?;
        stream
            .set_write_timeout(Some(timeout))
            .map_err(|e| Error::io("setting a socket timeout", e))?;
        let reader = BufReader::new(
            stream
                .try_clone()
                .map_err(|e| Error::io("cloning the launcher socket", e))?,
        );
        let mut link = LauncherLink {
            writer: stream,
            reader,
            seq: 0,
            addr: addr.to_string(),
            timeout,
            poisoned: None,
            finalized: false,
        };
        link.send(&Msg::Hello {
            rank: rank as u32,
            size: size as u32,
            secret,
            node: node.to_string(),
            pid: std::process::id(),
        })?;
        // What answers at the address may be no coordinator at all (a web
        // server at a stale HPC_RENDEZVOUS): its bytes read as a bad frame.
        let not_ours = |e: Error| match e {
            Error::Protocol(why) => Error::Protocol(format!(
                "{addr} ({}) does not answer as hpc run's coordinator: {why}",
                crate::env::RENDEZVOUS
            )),
            e => e,
        };
        let welcome = match link.recv("init") {
            Err(Error::Mismatch(detail)) => Ok(Msg::Mismatch { detail }),
            r => r,
        };
        match welcome.map_err(not_ours)? {
            Msg::Welcome { nodes } if nodes.len() == size => Ok((link, nodes)),
            Msg::Welcome { nodes } => Err(Error::Protocol(format!(
                "welcome lists {} ranks, expected {size}",
                nodes.len()
            ))),
            // Before its welcome the coordinator's only free text is its
            // refusal of this rank (another process joined as it first): no
            // collective's mismatch, as it read.
            Msg::Mismatch { detail } => Err(Error::Bootstrap(format!(
                "the launcher refused this rank: {detail}"
            ))),
            other => Err(not_ours(Error::Protocol(format!(
                "unexpected message during init: {other:?}"
            )))),
        }
    }

    fn send(&mut self, msg: &Msg) -> Result<()> {
        write_msg(&mut self.writer, msg).map_err(|e| {
            // Refused before anything was written: the launcher is not lost.
            match e.get_ref().and_then(|i| i.downcast_ref::<FrameTooLarge>()) {
                Some(big) => Error::InvalidArgument(big.to_string()),
                None => Error::LauncherLost {
                    addr: self.addr.clone(),
                    cause: e.to_string(),
                },
            }
        })
    }

    /// Reads the next message, turning the coordinator's failure reports into errors.
    fn recv(&mut self, op: &str) -> Result<Msg> {
        match read_msg(&mut self.reader) {
            Ok(Msg::Abort { rank, cause }) => {
                self.poisoned = Some((rank as usize, cause.clone()));
                Err(Error::PeerLost {
                    rank: rank as usize,
                    cause,
                })
            }
            Ok(Msg::Timeout {
                op,
                after_ms,
                missing,
            }) => Err(Error::Timeout {
                op,
                after: Duration::from_millis(after_ms),
                missing: missing.into_iter().map(|r| r as usize).collect(),
            }),
            Ok(Msg::Mismatch { detail }) => Err(Error::Mismatch(detail)),
            Ok(m) => Ok(m),
            Err(ReadError::Protocol(e)) => Err(e),
            Err(ReadError::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(Error::LauncherLost {
                    addr: self.addr.clone(),
                    cause: format!(
                        "no answer to {op} within {:?} (launcher hung or network partitioned)",
                        self.timeout + grace(self.timeout)
                    ),
                })
            }
            // Closed before its welcome: the coordinator refuses a hello that is
            // not of its job, and says why in its own log only (a peer that
            // did not prove the job's secret learns nothing).
            Err(ReadError::Io(e))
                if op == "init" && e.kind() == std::io::ErrorKind::UnexpectedEof =>
            {
                Err(Error::LauncherLost {
                    addr: self.addr.clone(),
                    cause: format!(
                        "it closed the connection before welcoming this rank: it refuses \
                         a rank whose job secret, size or rank is not its job's (a rank \
                         of another job, or {} and {} set by hand), and its log says \
                         which; or it stopped",
                        crate::env::SECRET,
                        crate::env::SIZE
                    ),
                })
            }
            Err(ReadError::Io(e)) => Err(Error::LauncherLost {
                addr: self.addr.clone(),
                cause: format!("{e} during {op} (the launcher stopped?)"),
            }),
        }
    }

    pub(crate) fn collective(&mut self, op: Op, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        if let Some((rank, cause)) = &self.poisoned {
            return Err(Error::PeerLost {
                rank: *rank,
                cause: cause.clone(),
            });
        }
        if self.finalized {
            return Err(Error::InvalidArgument("the world was finalized".into()));
        }
        if data.len() > crate::wire::MAX_DATA {
            return Err(Error::InvalidArgument(format!(
                "{}: a contribution of {} bytes is more than the {} bytes the launcher's \
                 collectives carry (they are for endpoints and small data; bulk data goes \
                 through hpc-comm)",
                op.name(),
                data.len(),
                crate::wire::MAX_DATA
            )));
        }
        self.seq += 1;
        let seq = self.seq;
        self.send(&Msg::Contribute {
            seq,
            op,
            data: data.to_vec(),
        })?;
        loop {
            match self.recv(&op.name())? {
                Msg::Result { seq: s, parts } if s == seq => return Ok(parts),
                Msg::Result { seq: s, .. } => {
                    tracing::debug!(expected = seq, got = s, "stale collective result ignored")
                }
                other => {
                    return Err(Error::Protocol(format!(
                        "unexpected message during {}: {other:?}",
                        op.name()
                    )))
                }
            }
        }
    }

    pub(crate) fn finalize(&mut self) {
        if !self.finalized {
            self.finalized = true;
            let _ = self.send(&Msg::Goodbye);
        }
    }
}

impl Drop for LauncherLink {
    fn drop(&mut self) {
        self.finalize();
    }
}
