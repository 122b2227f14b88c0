//! All-to-all.

use crate::kind::{Algorithm, CollectiveKind};
use crate::schedule::{Builder, Region, Schedule};

use super::prefix;

/// Pairwise-exchange alltoall with `block` bytes per pair; see
/// [`pairwise_v`].
pub fn pairwise(rank: usize, size: usize, block: usize) -> Schedule {
    let counts = vec![block; size];
    let mut s = pairwise_v(rank, size, &counts, &counts);
    s.kind = CollectiveKind::Alltoall;
    s
}

/// Pairwise-exchange alltoallv: `size - 1` rounds, one peer per round
/// (`rank XOR i` when `size` is a power of two, else send to `rank + i` and
/// receive from `rank - i`); the own block is a local copy. `send[j]` bytes
/// go to rank `j`, `recv[i]` bytes come from rank `i`, both packed in rank
/// order.
///
/// # Panics
/// If the vectors are not of length `size` or `send[rank] != recv[rank]`.
pub fn pairwise_v(rank: usize, size: usize, send: &[usize], recv: &[usize]) -> Schedule {
    assert_eq!(send.len(), size, "one send count per rank");
    assert_eq!(recv.len(), size, "one recv count per rank");
    assert_eq!(
        send[rank], recv[rank],
        "own block must have the same size both ways"
    );
    super::total_bytes(send, 1, "alltoallv's send buffer (sum of counts)");
    super::total_bytes(recv, 1, "alltoallv's receive buffer (sum of counts)");
    let mut b = Builder::new(CollectiveKind::Alltoallv, Algorithm::Pairwise, rank, size);
    let sd = prefix(send);
    let rd = prefix(recv);
    b.buffers(sd[size], rd[size]);
    let sblk = |j: usize| Region::send(sd[j], send[j]);
    let rblk = |j: usize| Region::recv(rd[j], recv[j]);
    b.copy(sblk(rank), rblk(rank));
    let pow2 = size.is_power_of_two();
    for i in 1..size {
        let (to, from) = if pow2 {
            (rank ^ i, rank ^ i)
        } else {
            ((rank + i) % size, (rank + size - i) % size)
        };
        b.send(to, sblk(to), 0);
        b.recv(from, rblk(from), 0);
        b.next_round();
    }
    b.finish()
}

/// Bruck alltoall (`block` bytes per pair) for short messages:
/// `ceil(log2 size)` communication rounds for any `size`, each moving about
/// half the data. Local rotation into scratch (`T[j]` = block for
/// `rank + j`); in step `2^k` the blocks `j` with bit `k` set are packed,
/// sent to `rank + 2^k`, received from `rank - 2^k` and unpacked into the
/// same slots; finally `T[j]` (from `rank - j`) is copied to receive block
/// `rank - j`.
pub fn bruck(rank: usize, size: usize, block: usize) -> Schedule {
    super::bytes(size, block, "alltoall's buffers (ranks x block)");
    let mut b = Builder::new(CollectiveKind::Alltoall, Algorithm::Bruck, rank, size);
    b.buffers(size * block, size * block);
    let t = b.alloc(size * block);
    let maxn = size / 2 + 1;
    let pack = b.alloc(maxn * block);
    let unpack = b.alloc(maxn * block);
    let tb = |j: usize| t.sub(j * block, block);

    let head = (size - rank) * block;
    b.copy(Region::send(rank * block, head), t.sub(0, head));
    b.copy(Region::send(0, rank * block), t.sub(head, rank * block));
    b.next_round();

    let mut dist = 1;
    let mut tag = 0;
    while dist < size {
        let js: Vec<usize> = (0..size).filter(|j| j & dist != 0).collect();
        let n = js.len();
        for (i, &j) in js.iter().enumerate() {
            b.copy(tb(j), pack.sub(i * block, block));
        }
        b.next_round();
        b.send((rank + dist) % size, pack.sub(0, n * block), tag);
        b.recv((rank + size - dist) % size, unpack.sub(0, n * block), tag);
        b.next_round();
        for (i, &j) in js.iter().enumerate() {
            b.copy(unpack.sub(i * block, block), tb(j));
        }
        b.next_round();
        dist *= 2;
        tag += 1;
    }
    for j in 0..size {
        b.copy(
            tb(j),
            Region::recv(((rank + size - j) % size) * block, block),
        );
    }
    b.finish()
}
