//! Reduce to a root.

use crate::kind::{Algorithm, CollectiveKind};
use crate::op::{DataType, ReduceOp};
use crate::schedule::{Builder, Region, Schedule};

use super::lowbit;

/// Binomial-tree reduce of `count` elements to `root`.
///
/// Relative rank `vr` receives from its children `vr + 1, vr + 2, vr + 4,
/// ...` (while below `lowbit(vr)`), folding each into its accumulator
/// (`acc = acc ⊕ child`, children in increasing distance), then sends the
/// accumulator to its parent. Receives alternate between two scratch
/// buffers so that reducing child `k` overlaps receiving child `k + 1`.
/// Leaves send straight from the send buffer; the root accumulates in its
/// receive buffer.
pub fn binomial(
    rank: usize,
    size: usize,
    root: usize,
    count: usize,
    dtype: DataType,
    op: ReduceOp,
) -> Schedule {
    assert!(root < size, "root out of range");
    let mut b = Builder::new(CollectiveKind::Reduce, Algorithm::Binomial, rank, size);
    let bytes = super::bytes(count, dtype.size(), "reduce's buffers (count x element)");
    b.buffers(bytes, if rank == root { bytes } else { 0 });
    let vr = (rank + size - root) % size;
    let abs = |v: usize| (v + root) % size;
    let limit = if vr == 0 {
        size.next_power_of_two()
    } else {
        lowbit(vr)
    };
    let children: Vec<usize> = (0..usize::BITS)
        .map(|k| 1usize << k)
        .take_while(|&m| m < limit && vr + m < size)
        .map(|m| vr + m)
        .collect();
    let parent = (vr != 0).then(|| abs(vr - lowbit(vr)));
    let input = Region::send(0, bytes);

    if children.is_empty() {
        match parent {
            Some(p) => b.send(p, input, 0),
            None => b.copy(input, Region::recv(0, bytes)),
        }
        return b.finish();
    }

    let acc = if parent.is_none() {
        Region::recv(0, bytes)
    } else {
        b.alloc(bytes)
    };
    let tmp = [
        b.alloc(bytes),
        if children.len() > 1 {
            b.alloc(bytes)
        } else {
            Region::scratch(0, 0)
        },
    ];
    b.copy(input, acc);
    for (i, &child) in children.iter().enumerate() {
        b.recv(abs(child), tmp[i % 2], 0);
        if i > 0 {
            b.reduce(tmp[(i - 1) % 2], acc, op, dtype);
        }
        b.next_round();
    }
    b.reduce(tmp[(children.len() - 1) % 2], acc, op, dtype);
    b.next_round();
    if let Some(p) = parent {
        b.send(p, acc, 0);
    }
    b.finish()
}
