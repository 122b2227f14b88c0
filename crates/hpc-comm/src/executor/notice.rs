//! Failure notices between nodes: a rank whose collective failed tells the
//! members on other nodes ([`Core::notify`]), which put it on their node's
//! board ([`Core::poll_notices`]), where a member not involved finds it
//! rather than wait for its timeout.

use super::Core;
use hpc_board::board::Failure;

/// Bytes of a failure notice ([`Core::notify`]): the collective's sequence
/// number (its low 32 bits), the failure's kind and its three words, each a
/// little-endian u32.
const NOTICE_BYTES: usize = 20;

impl Core {
    /// Tells every member on another node that this rank's collective `seq`
    /// failed so (`f`, as this rank recorded it on its node's board): each
    /// records it on its own node's board in this rank's slot
    /// ([`Core::poll_notices`]), where its waiting members find it as they
    /// find a record of their own node's ([`Op::fail_as_elsewhere`]) rather
    /// than wait for the timeout (a rank that never hears from the one that
    /// failed, as a rank not involved in a count mismatch). One small
    /// message per member on another node; none where the communicator
    /// spans one node.
    pub(crate) fn notify(&mut self, seq: u32, f: Failure) {
        let Some(net) = &self.net else { return };
        let (kind, words) = f.words();
        let mut v = Vec::with_capacity(NOTICE_BYTES);
        for w in [seq, kind, words[0], words[1], words[2]] {
            v.extend_from_slice(&w.to_le_bytes());
        }
        for p in (0..self.size).filter(|&p| !net.local[p]) {
            match net.t.send(net.world[p], net.notice_tag(), v.clone()) {
                Ok(id) => self.notices_out.push(id),
                Err(e) => tracing::debug!(error = %e, rank = p, "a failure notice not sent"),
            }
        }
    }

    /// Takes the failure notices that arrived from the members on other
    /// nodes ([`Core::notify`]) onto this node's board, and forgets the
    /// notices this rank sent that completed. Called by a waiting rank at
    /// its liveness checks, not on every pass.
    pub(crate) fn poll_notices(&mut self) {
        let Some(net) = &self.net else { return };
        self.notices_out
            .retain(|&id| matches!(net.t.test(id), Ok(None)));
        let mut i = 0;
        while i < self.notices_in.len() {
            let (p, id) = self.notices_in[i];
            match net.t.test(id) {
                Ok(None) => i += 1,
                Ok(Some(payload)) => {
                    let b = payload.into_bytes();
                    let w = |k: usize| {
                        b.get(4 * k..4 * k + 4)
                            .and_then(|s| s.try_into().ok())
                            .map(u32::from_le_bytes)
                    };
                    let f = match (b.len() == NOTICE_BYTES, w(0), w(1), w(2), w(3), w(4)) {
                        (true, Some(seq), Some(kind), Some(a), Some(b1), Some(c)) => {
                            Failure::from_words(kind, [a, b1, c]).map(|f| (seq, f))
                        }
                        _ => None,
                    };
                    match f {
                        Some((seq, f)) => self.board.mark_failed(p, seq, f),
                        None => tracing::warn!(rank = p, len = b.len(), "a garbled failure notice"),
                    }
                    match net.t.recv(net.world[p], net.notice_tag()) {
                        Ok(id) => self.notices_in[i].1 = id,
                        Err(_) => {
                            self.notices_in.swap_remove(i);
                        }
                    }
                }
                Err(_) => {
                    self.notices_in.swap_remove(i);
                }
            }
        }
    }
}
