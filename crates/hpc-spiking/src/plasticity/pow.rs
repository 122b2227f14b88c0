//! `w^mu` of the facilitation without `powf` on the hot path: a pure function
//! of `w` and `mu`, so that every decomposition and restart computes the same
//! bits, within a few ulps of `powf` (about `1e-15` relative).
//!
//! For a normal positive `w = 2^e m` (`m` in `[1, 2)`), `w^mu` is
//! `(2^e)^mu * g^mu * (1 + r)^mu` with `g` the centre of the 1/256-wide cell
//! of `m` and `r = (m - g) / g`, `|r| <= 2^-9`. Both powers of a grid point
//! are tables made with `powf` once per `mu`; `(1 + r)^mu` is its binomial
//! series to `r^6`, whose remainder is below `2^-60` wherever the table is
//! used (`|binom(mu, 7)| < 8`, about `mu <= 9`). Any other `w` (zero,
//! subnormal, beyond `2^±64`, not finite) or `mu` is `powf`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Cells of the mantissa `[1, 2)`: `|r| <= 1 / (2 * CELLS)`.
const CELLS: usize = 256;
/// Binary exponents with a table entry: `-EXP_HALF .. EXP_HALF`.
const EXP_HALF: i64 = 64;
/// Terms of the series past the constant one.
const DEGREE: usize = 6;

/// The tables of one exponent `mu`.
#[derive(PartialEq)]
pub(crate) struct PowMu {
    mu: f64,
    /// `(2^e)^mu` for `e` in `-EXP_HALF .. EXP_HALF`; empty where `mu` is
    /// not served by the tables (every call is `powf`).
    exp2: Vec<f64>,
    /// `(g^mu, 1/g)` of each cell's centre `g`.
    cell: Vec<(f64, f64)>,
    /// `binom(mu, k)` for `k = 1 ..= DEGREE`.
    coef: [f64; DEGREE],
}

impl std::fmt::Debug for PowMu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PowMu({}, tables: {})", self.mu, !self.exp2.is_empty())
    }
}

impl PowMu {
    /// The tables of `mu`, shared by every rule of this `mu` alive in the
    /// process (a few KiB each) and freed with the last of them.
    ///
    /// A table made again after its rules were dropped holds the same bits
    /// (`powf` of the same arguments), so whether a process saw other `mu`
    /// before, or dropped this one's rules in between, changes no weight.
    pub(crate) fn shared(mu: f64) -> Arc<PowMu> {
        let mut tables = tables()
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(live) = tables.get(&mu.to_bits()).and_then(Weak::upgrade) {
            return live;
        }
        // The cache holds no more entries than tables alive (plus this
        // one): a process that makes rules of many `mu` in turn and drops
        // them keeps memory for the live ones only.
        tables.retain(|_, table| table.strong_count() > 0);
        let made = Arc::new(PowMu::new(mu));
        tables.insert(mu.to_bits(), Arc::downgrade(&made));
        made
    }

    fn new(mu: f64) -> PowMu {
        let mut coef = [0.0; DEGREE];
        let mut b = 1.0;
        for (k, c) in coef.iter_mut().enumerate() {
            b *= (mu - k as f64) / (k as f64 + 1.0);
            *c = b;
        }
        let next = b * (mu - DEGREE as f64) / (DEGREE as f64 + 1.0);
        let served = mu.is_finite() && mu >= 0.0 && next.abs() < 8.0;
        let (mut exp2, mut cell) = (Vec::new(), Vec::new());
        if served {
            exp2 = (-EXP_HALF..EXP_HALF)
                .map(|e| 2f64.powf(e as f64 * mu))
                .collect();
            cell = (0..CELLS)
                .map(|i| {
                    let g = 1.0 + (i as f64 + 0.5) / CELLS as f64;
                    (g.powf(mu), 1.0 / g)
                })
                .collect();
        }
        PowMu {
            mu,
            exp2,
            cell,
            coef,
        }
    }

    /// `w^mu`, within a few ulps of `w.powf(mu)`.
    #[inline]
    pub(crate) fn pow(&self, w: f64) -> f64 {
        let bits = w.to_bits();
        // Biased exponent with the sign bit above it: a negative `w` is
        // out of range, as are zero and subnormals (biased exponent 0).
        let e = (bits >> 52).wrapping_sub((1023 - EXP_HALF) as u64) as usize;
        let (Some(&p2), false) = (self.exp2.get(e), bits >> 52 == 0) else {
            return w.powf(self.mu);
        };
        let i = ((bits >> 44) & (CELLS as u64 - 1)) as usize;
        let (pg, inv_g) = self.cell[i];
        let m = f64::from_bits((bits & ((1 << 52) - 1)) | 1f64.to_bits());
        let g = 1.0 + (i as f64 + 0.5) / CELLS as f64;
        // `m - g` is exact (both in [1, 2), within 2^-9).
        let r = (m - g) * inv_g;
        let c = &self.coef;
        let s = r * (c[0] + r * (c[1] + r * (c[2] + r * (c[3] + r * (c[4] + r * c[5])))));
        p2 * pg * (1.0 + s)
    }
}

/// The cache of [`PowMu::shared`]: by the bits of `mu`, the tables alive.
fn tables() -> &'static Mutex<HashMap<u64, Weak<PowMu>>> {
    static TABLES: OnceLock<Mutex<HashMap<u64, Weak<PowMu>>>> = OnceLock::new();
    TABLES.get_or_init(Default::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(a: f64, b: f64) -> f64 {
        if a == b {
            0.0
        } else {
            ((a - b) / b).abs()
        }
    }

    #[test]
    fn within_a_few_ulps_of_powf() {
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for mu in [0.0, 0.4, 0.5, 1.0, 1.7, 3.0, 6.5] {
            let p = PowMu::shared(mu);
            assert!(!p.exp2.is_empty(), "mu {mu} served by the tables");
            let mut worst: f64 = 0.0;
            for _ in 0..200_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Weights from 1e-6 to 1e6, and the grid's own cell edges.
                let w = 10f64.powf((x >> 11) as f64 / (1u64 << 53) as f64 * 12.0 - 6.0);
                worst = worst.max(rel(p.pow(w), w.powf(mu)));
            }
            for i in 0..=CELLS {
                let w = 45.0 * (1.0 + i as f64 / CELLS as f64);
                worst = worst.max(rel(p.pow(w), w.powf(mu)));
            }
            eprintln!("mu {mu}: worst relative difference from powf {worst:e}");
            assert!(worst < 2e-15, "mu {mu}: {worst:e}");
        }
    }

    #[test]
    fn outside_the_tables_is_powf() {
        let p = PowMu::shared(0.4);
        for w in [
            0.0,
            -0.0,
            5e-324,
            1e-300,
            1e30,
            f64::INFINITY,
            2f64.powi(-65),
            2f64.powi(64),
        ] {
            assert_eq!(p.pow(w).to_bits(), w.powf(0.4).to_bits(), "{w}");
        }
        assert!(p.pow(-1.0).is_nan() && p.pow(f64::NAN).is_nan());
        // An exponent whose series would be too long: powf for every weight.
        let big = PowMu::shared(40.0);
        assert!(big.exp2.is_empty());
        assert_eq!(big.pow(1.5), 1.5f64.powf(40.0));
    }

    #[test]
    fn a_pure_function_of_w() {
        let p = PowMu::shared(0.4);
        let a: Vec<u64> = (1..1000)
            .map(|k| p.pow(k as f64 * 0.37).to_bits())
            .collect();
        let q = PowMu::new(0.4);
        let b: Vec<u64> = (1..1000)
            .rev()
            .map(|k| q.pow(k as f64 * 0.37).to_bits())
            .collect();
        assert!(a.iter().eq(b.iter().rev()));
    }

    /// Exponents no other test uses: the cache is the process's.
    fn unique_mu(k: u64) -> f64 {
        0.123_456 + k as f64 * 1e-9
    }

    #[test]
    fn the_tables_of_dropped_rules_are_freed_and_made_again_the_same() {
        let mu = unique_mu(0);
        let first = PowMu::shared(mu);
        let again = PowMu::shared(mu);
        assert!(Arc::ptr_eq(&first, &again), "one table per mu alive");
        let bits: Vec<u64> = (1..500)
            .map(|k| first.pow(k as f64 * 0.77).to_bits())
            .collect();
        let weak = Arc::downgrade(&first);
        drop((first, again));
        assert!(weak.upgrade().is_none(), "freed with its last rule");
        let remade = PowMu::shared(mu);
        let after: Vec<u64> = (1..500)
            .map(|k| remade.pow(k as f64 * 0.77).to_bits())
            .collect();
        assert_eq!(bits, after, "a table made again gives the same bits");
    }

    #[test]
    fn many_exponents_in_turn_keep_only_the_live_tables() {
        // Pass 14, case 40: 100,000 distinct `mu`, each rule dropped, grew the
        // process by 516 MB. Now the cache holds the tables alive, plus the
        // dead entries of at most one miss.
        let kept = PowMu::shared(unique_mu(1));
        for k in 0..20_000 {
            let t = PowMu::shared(unique_mu(100 + k));
            assert_eq!(Arc::strong_count(&t), 1);
        }
        let entries = tables().lock().unwrap().len();
        // Other tests of this process may hold a few tables of their own.
        assert!(
            entries < 64,
            "{entries} entries cached after 20,000 dropped tables"
        );
        assert!(Arc::ptr_eq(&kept, &PowMu::shared(unique_mu(1))));
    }
}
