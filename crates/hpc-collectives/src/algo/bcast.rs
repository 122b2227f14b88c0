//! Broadcast. The data is the first `bytes` bytes of every rank's receive
//! buffer (MPI's single broadcast buffer); the root's holds the input.

use crate::kind::{Algorithm, CollectiveKind};
use crate::schedule::{Builder, Region, Schedule};

/// Binomial-tree broadcast: `ceil(log2 size)` rounds; in round `k` the
/// ranks `vr < 2^k` (relative to the root) send the whole buffer to
/// `vr + 2^k`. Best for short messages (latency `log p`).
pub fn binomial(rank: usize, size: usize, root: usize, bytes: usize) -> Schedule {
    assert!(root < size, "root out of range");
    let mut b = Builder::new(CollectiveKind::Broadcast, Algorithm::Binomial, rank, size);
    super::bytes(bytes, 1, "broadcast's buffer");
    b.buffers(0, bytes);
    let data = Region::recv(0, bytes);
    let vr = (rank + size - root) % size;
    let abs = |v: usize| (v + root) % size;
    let mut mask = 1;
    while mask < size {
        if vr < mask {
            if vr + mask < size {
                b.send(abs(vr + mask), data, 0);
            }
        } else if vr < 2 * mask {
            b.recv(abs(vr - mask), data, 0);
        }
        b.next_round();
        mask *= 2;
    }
    b.finish()
}

/// Van de Geijn broadcast for long messages: the buffer is cut into `size`
/// chunks of `ceil(bytes / size)` bytes, scattered down a binomial tree
/// (relative rank `vr` ends with chunk `vr`), then collected with a ring
/// allgather. Moves about `2 * bytes` per rank instead of
/// `bytes * log2(size)`.
pub fn scatter_allgather(rank: usize, size: usize, root: usize, bytes: usize) -> Schedule {
    assert!(root < size, "root out of range");
    let mut b = Builder::new(
        CollectiveKind::Broadcast,
        Algorithm::ScatterAllgather,
        rank,
        size,
    );
    super::bytes(bytes, 1, "broadcast's buffer");
    b.buffers(0, bytes);
    let vr = (rank + size - root) % size;
    let abs = |v: usize| (v + root) % size;
    let cs = bytes.div_ceil(size);
    // Bytes of chunks [a, b) (relative chunk indices, clipped to the data).
    let chunks = |a: usize, e: usize| {
        let lo = (a * cs).min(bytes);
        let hi = (e * cs).min(bytes);
        Region::recv(lo, hi - lo)
    };

    // Binomial scatter, top-down.
    let mut mask = size.next_power_of_two() / 2;
    while mask > 0 {
        if vr % (2 * mask) == 0 {
            if vr + mask < size {
                let hi = (vr + 2 * mask).min(size);
                b.send(abs(vr + mask), chunks(vr + mask, hi), 0);
            }
        } else if vr % mask == 0 {
            let hi = (vr + mask).min(size);
            b.recv(abs(vr - mask), chunks(vr, hi), 0);
        }
        b.next_round();
        mask /= 2;
    }

    // Ring allgather of the chunks over relative ranks.
    if size > 1 {
        let right = abs((vr + 1) % size);
        let left = abs((vr + size - 1) % size);
        for s in 0..size - 1 {
            let sc = (vr + size - s) % size;
            let rc = (vr + 2 * size - s - 1) % size;
            b.send(right, chunks(sc, sc + 1), 1);
            b.recv(left, chunks(rc, rc + 1), 1);
            b.next_round();
        }
    }
    b.finish()
}
