//! Gather.

use crate::kind::{Algorithm, CollectiveKind};
use crate::schedule::{Builder, Region, Schedule};

use super::lowbit;

/// Binomial-tree gather of `block` bytes per rank to `root`.
///
/// Relative rank `vr` collects its subtree's blocks `[vr, vr + 2^k)` in
/// scratch (leaves send straight from the send buffer) and passes them to
/// its parent `vr - lowbit(vr)` in one message. The root gathers in
/// relative order — directly into its receive buffer when `root == 0`,
/// otherwise in scratch followed by a two-copy rotation.
pub fn binomial(rank: usize, size: usize, root: usize, block: usize) -> Schedule {
    assert!(root < size, "root out of range");
    super::bytes(size, block, "gather's receive buffer (ranks x block)");
    let mut b = Builder::new(CollectiveKind::Gather, Algorithm::Binomial, rank, size);
    let vr = (rank + size - root) % size;
    let abs = |v: usize| (v + root) % size;
    b.buffers(block, if rank == root { size * block } else { 0 });
    // Number of blocks in my subtree.
    let sub = if vr == 0 {
        size
    } else {
        lowbit(vr).min(size - vr)
    };

    if sub == 1 {
        if vr == 0 {
            b.copy(Region::send(0, block), Region::recv(0, block));
        } else {
            b.send(abs(vr - lowbit(vr)), Region::send(0, block), 0);
        }
        return b.finish();
    }

    let acc = if rank == root && root == 0 {
        Region::recv(0, size * block)
    } else {
        b.alloc(sub * block)
    };
    b.copy(Region::send(0, block), acc.sub(0, block));
    let mut mask = 1;
    while mask < sub {
        let child = vr + mask;
        let n = mask.min(size - child);
        b.recv(abs(child), acc.sub(mask * block, n * block), 0);
        b.next_round();
        mask *= 2;
    }
    if vr != 0 {
        b.send(abs(vr - lowbit(vr)), acc.sub(0, sub * block), 0);
    } else if root != 0 {
        // acc holds relative order; relative j is absolute (j + root) % size.
        let head = (size - root) * block;
        b.copy(acc.sub(0, head), Region::recv(root * block, head));
        b.copy(acc.sub(head, root * block), Region::recv(0, root * block));
    }
    b.finish()
}
