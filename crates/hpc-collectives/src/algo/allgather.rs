//! Allgather and allgatherv.
//!
//! All three algorithms take per-rank block sizes in bytes (`blocks[r]` is
//! rank `r`'s contribution) and place the blocks packed in rank order in
//! the receive buffer, so the same code serves allgather (equal blocks) and
//! allgatherv. The schedules report [`CollectiveKind::Allgatherv`];
//! [`Collective::schedule`](crate::Collective::schedule) relabels the
//! equal-block case.

use crate::kind::{Algorithm, CollectiveKind};
use crate::schedule::{Builder, Region, Schedule};

use super::{fold_newrank, fold_oldrank, pof2_floor, prefix};

/// Dispatches to [`ring`], [`recursive_doubling`] or [`bruck`].
///
/// # Panics
/// If `algorithm` is not one of those three.
pub fn allgatherv(algorithm: Algorithm, rank: usize, size: usize, blocks: &[usize]) -> Schedule {
    match algorithm {
        Algorithm::Ring => ring(rank, size, blocks),
        Algorithm::RecursiveDoubling => recursive_doubling(rank, size, blocks),
        Algorithm::Bruck => bruck(rank, size, blocks),
        other => panic!("{other} is not an allgather algorithm"),
    }
}

fn builder(
    algorithm: Algorithm,
    rank: usize,
    size: usize,
    blocks: &[usize],
) -> (Builder, Vec<usize>) {
    assert_eq!(blocks.len(), size, "one block size per rank");
    super::total_bytes(blocks, 1, "allgather's receive buffer (sum of blocks)");
    let mut b = Builder::new(CollectiveKind::Allgatherv, algorithm, rank, size);
    let displs = prefix(blocks);
    b.buffers(blocks[rank], displs[size]);
    (b, displs)
}

/// Ring allgather: `size - 1` rounds; in round `s` each rank passes block
/// `rank - s` to its right neighbour. Bandwidth-optimal, neighbour-only
/// traffic, latency linear in `size`.
pub fn ring(rank: usize, size: usize, blocks: &[usize]) -> Schedule {
    let (mut b, displs) = builder(Algorithm::Ring, rank, size, blocks);
    let blk = |j: usize| Region::recv(displs[j], blocks[j]);
    b.copy(Region::send(0, blocks[rank]), blk(rank));
    let right = (rank + 1) % size;
    let left = (rank + size - 1) % size;
    for s in 0..size.saturating_sub(1) {
        let sb = (rank + size - s) % size;
        let rb = (rank + 2 * size - s - 1) % size;
        let src = if s == 0 {
            Region::send(0, blocks[rank])
        } else {
            blk(sb)
        };
        b.send(right, src, 0);
        b.recv(left, blk(rb), 0);
        b.next_round();
    }
    b.finish()
}

/// Recursive-doubling allgather: `log2 pof2` exchange rounds in which
/// partners `newrank ^ 2^k` swap everything they hold (a contiguous range
/// of blocks that doubles each round). For a non-power-of-two `size` the
/// first `2 * (size - pof2)` ranks fold in pairs (even hands its block to
/// odd before, odd hands the full result back after), as MPICH does for
/// allreduce; a folded pair's blocks are adjacent, so every exchanged range
/// stays contiguous.
pub fn recursive_doubling(rank: usize, size: usize, blocks: &[usize]) -> Schedule {
    let (mut b, displs) = builder(Algorithm::RecursiveDoubling, rank, size, blocks);
    let pof2 = pof2_floor(size);
    let rem = size - pof2;
    let total = displs[size];
    // Bytes held by survivors [a, e): blocks of ranks fold_start(a)..fold_start(e).
    let start = |nr: usize| {
        if nr == pof2 {
            size
        } else if nr < rem {
            2 * nr
        } else {
            nr + rem
        }
    };
    let range = |a: usize, e: usize| {
        let lo = displs[start(a)];
        Region::recv(lo, displs[start(e)] - lo)
    };

    b.copy(
        Region::send(0, blocks[rank]),
        Region::recv(displs[rank], blocks[rank]),
    );
    if rank < 2 * rem {
        if rank % 2 == 0 {
            b.send(rank + 1, Region::send(0, blocks[rank]), 0);
        } else {
            b.recv(
                rank - 1,
                Region::recv(displs[rank - 1], blocks[rank - 1]),
                0,
            );
        }
    }
    b.next_round();

    if let Some(nr) = fold_newrank(rank, rem) {
        let mut mask = 1;
        while mask < pof2 {
            let partner = nr ^ mask;
            let mine = nr & !(mask - 1);
            let theirs = partner & !(mask - 1);
            let peer = fold_oldrank(partner, rem);
            // A survivor that holds only its own block sends it from the send
            // buffer (as ring and Bruck do): the copy into the receive buffer
            // has just dirtied those lines in this core's cache, and a peer
            // reading them from there costs a cross-core transfer of every line
            // (2.7x the time of a 64 KiB allgather on 2 ranks).
            let src = if mask == 1 && start(mine + 1) == start(mine) + 1 {
                Region::send(0, blocks[rank])
            } else {
                range(mine, mine + mask)
            };
            b.send(peer, src, 1);
            b.recv(peer, range(theirs, theirs + mask), 1);
            b.next_round();
            mask *= 2;
        }
    }

    if rank < 2 * rem {
        if rank % 2 == 1 {
            b.send(rank - 1, Region::recv(0, total), 2);
        } else {
            b.recv(rank + 1, Region::recv(0, total), 2);
        }
    }
    b.finish()
}

/// Bruck allgather: `ceil(log2 size)` rounds for any `size`. Each rank keeps
/// the blocks in rotated order (`T[j]` = block of `rank + j`); in round `k`
/// it sends `T[0..min(2^k, size - 2^k))` to `rank - 2^k` and receives the
/// same count into `T[2^k..]` from `rank + 2^k`. A final two-copy rotation
/// (skipped on rank 0, which works in its receive buffer) restores rank
/// order.
pub fn bruck(rank: usize, size: usize, blocks: &[usize]) -> Schedule {
    let (mut b, displs) = builder(Algorithm::Bruck, rank, size, blocks);
    let total = displs[size];
    let rotated: Vec<usize> = (0..size).map(|j| blocks[(rank + j) % size]).collect();
    let toff = prefix(&rotated);
    let t = if rank == 0 {
        Region::recv(0, total)
    } else {
        b.alloc(total)
    };
    let trange = |a: usize, e: usize| t.sub(toff[a], toff[e] - toff[a]);

    b.copy(Region::send(0, blocks[rank]), trange(0, 1));
    let mut dist = 1;
    let mut tag = 0;
    while dist < size {
        let cnt = dist.min(size - dist);
        let src = if dist == 1 {
            Region::send(0, blocks[rank])
        } else {
            trange(0, cnt)
        };
        b.send((rank + size - dist) % size, src, tag);
        b.recv((rank + dist) % size, trange(dist, dist + cnt), tag);
        b.next_round();
        dist *= 2;
        tag += 1;
    }
    if rank != 0 {
        let head = total - displs[rank];
        b.copy(t.sub(0, head), Region::recv(displs[rank], head));
        b.copy(t.sub(head, displs[rank]), Region::recv(0, displs[rank]));
    }
    b.finish()
}
