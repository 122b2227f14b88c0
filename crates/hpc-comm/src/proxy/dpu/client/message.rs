//! A rank's point-to-point messages in DPU placement: the rank reaches
//! nothing but its proxy, so the proxy carries them. A send hands the proxy
//! its bytes (in the request when small, else in a registered region the
//! proxy reads with RMA get, as a collective's span) and is done once the
//! proxy has them (an eager send); a receive names a registered region the
//! proxy puts the message into once it matched one, and is answered after
//! the put, with the message's source and tag. The matching is the proxy's
//! (the proxy's mailbox), with the rules of the
//! ranks' own path.

use super::{clone_error, Client, Out};
use crate::job::{Message, Stage};
use hpc_board::backoff::Backoff;
use hpc_board::p2p::{p2p_tag, p2p_type_name};
use hpc_board::sync::lock;
use hpc_board::{Error, Result};
use hpc_collectives::Collective;
use hpc_proxy::dpu::wire::{
    encode_request, wire, Body, Delivery, Request, Span, P2P_FIRST, TAG_ANSWER,
};
use hpc_proxy::RecvFailure as Failure;
use hpc_rdma::{OpId, Region};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Messages of at most this many bytes travel in their request; the proxy
/// reads a larger one from the sender's registered memory.
pub(super) const INLINE_MAX: usize = 64 << 10;

/// How a message ended.
enum Ended {
    /// Sent; or received, from this source with this tag.
    Done(Option<(usize, u16)>),
    /// The proxy's answer other than done.
    Refused(Delivery),
    /// Here: the link, the proxy gone, a cancel.
    Err(Error),
}

struct State {
    /// The registered memory the proxy reads or writes, until it answered.
    region: Option<Region>,
    ended: Option<Ended>,
}

/// A message posted to the DPU proxy.
pub(crate) struct Carried {
    client: Arc<Client>,
    seq: u64,
    answer: OpId,
    /// The schedule tag of the receive's element type.
    kind: u32,
    /// The receive's bytes, and where they land (the caller's buffer, or
    /// the stage's copy).
    len: usize,
    recv: Out,
    stage: Option<Stage>,
    state: Mutex<State>,
}

impl Client {
    /// Posts message `m` to the proxy: `bufs` are its send and receive
    /// buffers (pointer, length), valid until the ticket finishes (`stage`
    /// owns them where given).
    pub(crate) fn message(
        self: &Arc<Self>,
        m: &Message,
        bufs: (*const u8, usize, *mut u8, usize),
        stage: Option<Stage>,
    ) -> Result<Carried> {
        if self.link.proxy_gone() {
            return Err(Error::Stopped("proxy"));
        }
        let seq = P2P_FIRST + self.messages.fetch_add(1, Ordering::Relaxed) % P2P_FIRST;
        let (sp, sl, rp, rl) = bufs;
        let kind = p2p_tag(0, m.dtype);
        let span = |r: &Region, len: usize| Span {
            key: r.remote_key().to_bytes().to_vec(),
            offset: 0,
            len: len as u64,
        };
        let mut region = None;
        let req = if m.send {
            // SAFETY: the send buffer (the caller's, or the stage's copy) holds
            // `sl` bytes until the ticket finishes; it is read here, once.
            let bytes = unsafe { std::slice::from_raw_parts(sp, sl) };
            let body = if sl <= INLINE_MAX {
                Body::Inline(bytes.to_vec())
            } else {
                let r = self.link.region(sl)?;
                r.write(0, bytes)
                    .map_err(|e| Error::transport_from("staging into registered memory", e))?;
                let s = span(&r, sl);
                region = Some(r);
                Body::Span(s)
            };
            Request::Send {
                dest: m.peer.unwrap_or(0),
                tag: p2p_tag(m.tag.unwrap_or(0), m.dtype),
                body,
            }
        } else {
            let r = self.link.region(rl)?;
            let into = span(&r, rl);
            region = Some(r);
            Request::Recv {
                source: m.peer,
                tag: m.tag,
                kind,
                into,
            }
        };
        let w = wire(self.local, seq);
        let bytes = encode_request::<Collective>(w, &req)?;
        let give = |region: Option<Region>| {
            if let Some(r) = region {
                self.link.give(r);
            }
        };
        // The answer's receive is posted before the request goes out.
        let answer = match self.link.t.recv(self.link.proxy(), TAG_ANSWER + w) {
            Ok(a) => a,
            Err(e) => {
                give(region);
                return Err(self.link.link_error(e));
            }
        };
        if let Err(e) = self.link.send(bytes) {
            give(region);
            return Err(e);
        }
        Ok(Carried {
            client: self.clone(),
            seq,
            answer,
            kind,
            len: rl,
            recv: Out(rp),
            // A send's bytes went out (or into the region): its copies can go.
            stage: if m.send { None } else { stage },
            state: Mutex::new(State {
                region,
                ended: None,
            }),
        })
    }
}

impl Carried {
    /// The error of an answer other than done.
    fn error(&self, d: &Delivery) -> Error {
        let world = |r: usize| self.client.world.get(r).copied().unwrap_or(r);
        match d {
            Delivery::Refused(f) => match f {
                Failure::Type { src, tag } => Error::MessageType {
                    rank: *src,
                    tag: *tag as u16,
                    sent: p2p_type_name(*tag),
                    expected: p2p_type_name(self.kind),
                },
                Failure::Length { src, tag, sent } => Error::MessageLength {
                    rank: *src,
                    tag: *tag as u16,
                    sent: *sent,
                    expected: self.len,
                },
                Failure::Memory { bytes, why, .. } => Error::ProxyMemory {
                    bytes: Some(*bytes as u64),
                    why: why.clone(),
                },
                Failure::Lost { rank } => Error::RankLost { rank: world(*rank) },
                Failure::Node { node } => Error::NodeLost { node: *node },
            },
            Delivery::Failed(why) => {
                Error::transport(format!("the DPU proxy refused a message: {why}"))
            }
            Delivery::Sent | Delivery::Received { .. } => {
                Error::transport("the DPU proxy's answer to a message is not an error")
            }
        }
    }

    /// Takes the proxy's answer if it came (a received message is copied
    /// out of the region); whether the message ended.
    pub(crate) fn poll(&self) -> bool {
        let mut st = lock(&self.state);
        if st.ended.is_some() {
            return true;
        }
        let link = &self.client.link;
        let ended = match link.t.test(self.answer) {
            Ok(None) if link.proxy_gone() => Ended::Err(Error::Stopped("proxy")),
            Ok(None) => return false,
            Err(e) => Ended::Err(link.link_error(e)),
            Ok(Some(p)) => match postcard::from_bytes::<Delivery>(&p.into_bytes()) {
                Err(e) => Ended::Err(Error::transport(format!(
                    "an undecodable answer from the DPU proxy to message {}: {e}",
                    self.seq
                ))),
                Ok(Delivery::Sent) => Ended::Done(None),
                Ok(Delivery::Received { source, tag }) => self.land(&st, source, tag),
                Ok(d) => Ended::Refused(d),
            },
        };
        st.ended = Some(ended);
        if let Some(r) = st.region.take() {
            link.give(r);
        }
        true
    }

    /// The message in the region, copied to where the receive lands.
    fn land(&self, st: &State, source: usize, tag: u32) -> Ended {
        if self.len > 0 {
            let Some(region) = &st.region else {
                return Ended::Err(Error::transport("a message received without its region"));
            };
            // SAFETY: the receive buffer (the caller's, borrowed by its request
            // until the message is finished, or the stage's copy, owned here)
            // holds `len` bytes; the region is the transport's own mapping, so
            // the two do not overlap; the proxy's put completed before it answered.
            let dst = unsafe { std::slice::from_raw_parts_mut(self.recv.0, self.len) };
            if let Err(e) = region.read(0, dst) {
                return Ended::Err(Error::transport_from(
                    "reading a message from registered memory",
                    e,
                ));
            }
        }
        Ended::Done(Some((source, tag as u16)))
    }
}

/// What the engine's handle on a message asks of it.
impl Carried {
    /// Waits for the proxy's answer (until the communicator's timeout); a
    /// staged receive's message goes to `out`.
    pub(crate) fn wait(&self, out: Option<&mut [u8]>) -> Result<()> {
        let t0 = Instant::now();
        let backoff = Backoff::new(self.client.spin, true);
        while !self.poll() {
            if t0.elapsed() > self.client.timeout {
                return Err(Error::Timeout {
                    after: self.client.timeout,
                    waiting_for: Vec::new(),
                });
            }
            backoff.rest(|idle| {
                (idle / 16).clamp(Duration::from_micros(20), Duration::from_micros(500))
            });
        }
        let st = lock(&self.state);
        match st.ended.as_ref() {
            Some(Ended::Done(_)) => {
                if let Some(stage) = &self.stage {
                    stage.deliver(out);
                }
                Ok(())
            }
            Some(Ended::Refused(d)) => Err(self.error(d)),
            Some(Ended::Err(e)) => Err(clone_error(e)),
            None => unreachable!("poll returned true"),
        }
    }

    /// The proxy must no longer write the receive's region: it is told to
    /// drop the receive, and the region is deregistered, so that a put
    /// already under way fails at its key.
    pub(crate) fn cancel(&self) {
        let mut st = lock(&self.state);
        if st.ended.is_some() {
            return;
        }
        let link = &self.client.link;
        let w = wire(self.client.local, self.seq);
        if let Ok(bytes) = encode_request::<Collective>(w, &Request::Cancel) {
            let _ = link.send(bytes);
        }
        if let Some(r) = st.region.take() {
            link.t.deregister(r);
        }
        st.ended = Some(Ended::Err(Error::Stopped("cancelled")));
    }

    /// Finished, nobody takes the outcome: the region goes back.
    pub(crate) fn discard(&self) {
        if let Some(r) = lock(&self.state).region.take() {
            self.client.link.give(r);
        }
    }

    /// The source and tag of the message a receive got, once it got one.
    pub(crate) fn matched(&self) -> Option<(usize, u16)> {
        match lock(&self.state).ended {
            Some(Ended::Done(m)) => m,
            _ => None,
        }
    }
}
