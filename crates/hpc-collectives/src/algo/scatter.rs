//! Scatter.

use crate::kind::{Algorithm, CollectiveKind};
use crate::schedule::{Builder, Region, Schedule};

use super::lowbit;

/// Binomial-tree scatter of `block` bytes per rank from `root`.
///
/// The mirror image of [`gather::binomial`](super::gather::binomial): the
/// root (after rotating its send buffer into relative order in scratch when
/// `root != 0`) sends each child its subtree's blocks in one message;
/// inner ranks receive their subtree into scratch and forward, leaves
/// receive straight into the receive buffer.
pub fn binomial(rank: usize, size: usize, root: usize, block: usize) -> Schedule {
    assert!(root < size, "root out of range");
    super::bytes(size, block, "scatter's send buffer (ranks x block)");
    let mut b = Builder::new(CollectiveKind::Scatter, Algorithm::Binomial, rank, size);
    let vr = (rank + size - root) % size;
    let abs = |v: usize| (v + root) % size;
    b.buffers(if rank == root { size * block } else { 0 }, block);
    let sub = if vr == 0 {
        size
    } else {
        lowbit(vr).min(size - vr)
    };
    let mine = Region::recv(0, block);

    // Where my subtree's blocks (relative order) live.
    let src = if vr == 0 {
        if root == 0 {
            Region::send(0, size * block)
        } else {
            let s = b.alloc(size * block);
            let head = (size - root) * block;
            b.copy(Region::send(root * block, head), s.sub(0, head));
            b.copy(Region::send(0, root * block), s.sub(head, root * block));
            b.next_round();
            s
        }
    } else if sub == 1 {
        b.recv(abs(vr - lowbit(vr)), mine, 0);
        return b.finish();
    } else {
        let s = b.alloc(sub * block);
        b.recv(abs(vr - lowbit(vr)), s, 0);
        b.next_round();
        s
    };

    b.copy(src.sub(0, block), mine);
    let mut mask = sub.next_power_of_two() / 2;
    while mask > 0 {
        let child = vr + mask;
        if child < size && mask < sub {
            let n = mask.min(size - child);
            b.send(abs(child), src.sub(mask * block, n * block), 0);
        }
        b.next_round();
        mask /= 2;
    }
    b.finish()
}
