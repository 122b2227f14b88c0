//! What the proxy targets share: the rank and communicator size a fuzz input picks.

/// The rank and communicator size (1 to 16) that the first and second bytes of
/// `data` pick, and the rest of `data`; `None` when it is shorter than two bytes.
pub fn rank_size_rest(data: &[u8]) -> Option<(usize, usize, &[u8])> {
    let [r, s, rest @ ..] = data else {
        return None;
    };
    let size = 1 + usize::from(*s) % 16;
    let rank = usize::from(*r) % size;
    Some((rank, size, rest))
}
