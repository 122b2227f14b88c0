//! Barrier.

use crate::kind::{Algorithm, CollectiveKind};
use crate::schedule::{Builder, Region, Schedule};

/// Dissemination barrier (Hensgen, Finkel, Manber): in round `k` every rank
/// sends a zero-byte message to `rank + 2^k` and receives one from
/// `rank - 2^k`; `ceil(log2 size)` rounds for any `size`.
pub fn dissemination(rank: usize, size: usize) -> Schedule {
    let mut b = Builder::new(
        CollectiveKind::Barrier,
        Algorithm::Dissemination,
        rank,
        size,
    );
    let empty = Region::recv(0, 0);
    let mut dist = 1;
    let mut tag = 0;
    while dist < size {
        b.send((rank + dist) % size, empty, tag);
        b.recv((rank + size - dist) % size, empty, tag);
        b.next_round();
        dist *= 2;
        tag += 1;
    }
    b.finish()
}
