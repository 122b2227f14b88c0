//! What every rank of a collective must agree on, as one word that travels
//! with its data: the collective's kind, element type, reduction operation
//! and root. Not its counts: a v-collective's counts differ between ranks
//! by design, and a size that differs is refused on its own
//! ([`Error::CountMismatch`](crate::Error::CountMismatch)).
//!
//! A receiver compares the word of what arrives with its own (one `u32`
//! compare) and fails the collective with
//! [`Error::CollectiveMismatch`](crate::Error::CollectiveMismatch) where
//! they differ, naming both in words ("allreduce f64 sum", "broadcast u8
//! root 1"). A leaf: the error, the board and the engines read it.

use hpc_collectives::{Collective, CollectiveKind, DataType, ReduceOp};

/// The low 20 bits of a signature's root field hold `root + 1` (0: no
/// root); roots are compared modulo this span (a million ranks).
const ROOT_SPAN: usize = (1 << 20) - 1;

/// A collective's signature: bits 0-3 its kind (1 + its index in
/// [`CollectiveKind::ALL`]), 4-7 its element type (1 + its index in
/// [`DataType::ALL`], 0 for none), 8-11 its reduction (1 + its index in
/// [`ReduceOp::BUILTIN`], 8 for a custom one, 0 for none), 12-31 its root
/// (1 + the root modulo 2^20 - 1, 0 for none). [`Sig::NONE`] (0) is no
/// collective's: what a point-to-point message and every other descriptor
/// carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sig(pub u32);

impl Sig {
    /// No collective's signature.
    pub const NONE: Sig = Sig(0);

    /// The signature of `c`: a few matches and shifts, on every collective's
    /// start (an enum's `as` value is its place in `ALL`, which the tests check).
    #[inline]
    pub fn of(c: &Collective) -> Sig {
        let kind = c.kind() as u32 + 1;
        let dtype = c.dtype().map_or(0, |d| d as u32 + 1);
        let op = match c.op() {
            None => 0,
            Some(ReduceOp::Sum) => 1,
            Some(ReduceOp::Prod) => 2,
            Some(ReduceOp::Min) => 3,
            Some(ReduceOp::Max) => 4,
            Some(ReduceOp::Band) => 5,
            Some(ReduceOp::Bor) => 6,
            Some(ReduceOp::Bxor) => 7,
            Some(ReduceOp::Custom(_)) => 8,
        };
        let root = c.root().map_or(0, |r| (r % ROOT_SPAN) as u32 + 1);
        Sig(kind | dtype << 4 | op << 8 | root << 12)
    }

    /// The signature in words: `"allreduce f64 sum"`, `"broadcast u8 root 1"`,
    /// `"barrier"` (`"none"` for [`Sig::NONE`]; a field no signature holds
    /// reads `"?"`).
    pub fn describe(self) -> String {
        let field = |shift: u32, bits: u32| ((self.0 >> shift) & ((1 << bits) - 1)) as usize;
        let pick = |i: usize, n: usize| i.checked_sub(1).filter(|&i| i < n);
        let Some(kind) = pick(field(0, 4), CollectiveKind::ALL.len()) else {
            return if self == Sig::NONE {
                "none".into()
            } else {
                format!("? ({:#x})", self.0)
            };
        };
        let mut s = CollectiveKind::ALL[kind].name().to_string();
        match field(4, 4) {
            0 => {}
            d => {
                s += &format!(
                    " {}",
                    pick(d, DataType::ALL.len()).map_or("?", |i| DataType::ALL[i].name())
                )
            }
        }
        match field(8, 4) {
            0 => {}
            8 => s += " custom",
            o => match pick(o, ReduceOp::BUILTIN.len()) {
                Some(i) => s += &format!(" {}", ReduceOp::BUILTIN[i]),
                None => s += " ?",
            },
        }
        if let Some(r) = field(12, 20).checked_sub(1) {
            s += &format!(" root {r}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_ranks_must_agree_on_is_told_apart_and_named() {
        let sum = |dtype| Collective::Allreduce {
            count: 4,
            dtype,
            op: ReduceOp::Sum,
        };
        let (f, u) = (Sig::of(&sum(DataType::F64)), Sig::of(&sum(DataType::U64)));
        assert_ne!(f, u, "same size, other type");
        assert_eq!(f.describe(), "allreduce f64 sum");
        assert_eq!(u.describe(), "allreduce u64 sum");
        let max = Sig::of(&Collective::Allreduce {
            count: 4,
            dtype: DataType::F64,
            op: ReduceOp::Max,
        });
        assert_ne!(f, max);
        assert_eq!(max.describe(), "allreduce f64 max");
        let bcast = |root| Collective::Broadcast {
            root,
            count: 1,
            dtype: DataType::U8,
        };
        assert_ne!(Sig::of(&bcast(0)), Sig::of(&bcast(1)));
        assert_eq!(Sig::of(&bcast(1)).describe(), "broadcast u8 root 1");
        assert_eq!(Sig::of(&Collective::Barrier).describe(), "barrier");
        // Counts are not part of it (a v-collective's differ between ranks).
        let v = |counts| Collective::Allgatherv {
            counts,
            dtype: DataType::I32,
        };
        assert_eq!(Sig::of(&v(vec![1, 2])), Sig::of(&v(vec![3, 0])));
        let custom = Sig::of(&Collective::Reduce {
            root: 3,
            count: 1,
            dtype: DataType::Bf16,
            op: ReduceOp::Custom(9),
        });
        assert_eq!(custom.describe(), "reduce bf16 custom root 3");
        assert_eq!(Sig::NONE.describe(), "none");
        // No collective's signature is `NONE`, and every kind, type and
        // operation reads back.
        for (i, k) in CollectiveKind::ALL.into_iter().enumerate() {
            assert_eq!(k as usize, i, "{k:?}'s place in ALL");
            assert!(!k.name().is_empty());
        }
        for (i, d) in DataType::ALL.into_iter().enumerate() {
            assert_eq!(d as usize, i, "{d:?}'s place in ALL");
        }
        assert_eq!(
            Sig::of(&Collective::Barrier).describe(),
            CollectiveKind::Barrier.name()
        );
        assert_eq!(
            Sig::of(&Collective::ReduceScatterBlock {
                count: 1,
                dtype: DataType::F64,
                op: ReduceOp::Bxor,
            })
            .describe(),
            "reduce_scatter_block f64 bxor"
        );
        for d in DataType::ALL {
            for o in ReduceOp::BUILTIN {
                let s = Sig::of(&Collective::Reduce {
                    root: 0,
                    count: 1,
                    dtype: d,
                    op: o,
                });
                assert_ne!(s, Sig::NONE);
                assert_eq!(s.describe(), format!("reduce {d} {o} root 0"));
            }
        }
        assert_eq!(Sig(0xf).describe(), "? (0xf)");
    }
}
