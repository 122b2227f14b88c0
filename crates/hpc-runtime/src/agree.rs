//! [`World::same_on_every_rank`]: the check that every rank of a job was given
//! the same values (its flags, its settings) before anything is built.

use crate::error::{Error, Result};
use crate::world::World;

/// The most differences [`Error::NotTheSame`] lists; the others are counted
/// (`and N more`).
pub const LISTED_DIFFERENCES: usize = 10;

/// `items` as one message: each a 32-bit little-endian length and its bytes.
fn encode<'a>(items: impl IntoIterator<Item = &'a str>) -> Vec<u8> {
    let mut out = Vec::new();
    for item in items {
        out.extend_from_slice(&(item.len() as u32).to_le_bytes());
        out.extend_from_slice(item.as_bytes());
    }
    out
}

/// What [`encode`] wrote; a message it did not write is a protocol error.
fn decode(mut bytes: &[u8]) -> Result<Vec<String>> {
    let bad = || Error::Protocol("a rank's values to compare are cut or not text".into());
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let (len, rest) = bytes.split_first_chunk::<4>().ok_or_else(bad)?;
        let len = u32::from_le_bytes(*len) as usize;
        if rest.len() < len {
            return Err(bad());
        }
        let (item, rest) = rest.split_at(len);
        out.push(String::from_utf8(item.to_vec()).map_err(|_| bad())?);
        bytes = rest;
    }
    Ok(out)
}

/// What differs between rank 0's `theirs` and `mine` (named values), each
/// `name theirs -> mine`, a name one side lacks `(none)` there; in `mine`'s
/// order, then rank 0's names this rank lacks.
fn differences(theirs: &[(String, String)], mine: &[(&str, String)]) -> Vec<String> {
    let none = "(none)".to_string();
    let find = |name: &str| theirs.iter().find(|(n, _)| n == name).map(|(_, v)| v);
    let mut out: Vec<String> = mine
        .iter()
        .filter_map(|(name, v)| {
            let t = find(name).unwrap_or(&none);
            (t != v).then(|| {
                format!(
                    "{} {} -> {}",
                    hpc_env::short(name),
                    hpc_env::short(t),
                    hpc_env::short(v)
                )
            })
        })
        .collect();
    out.extend(
        theirs
            .iter()
            .filter(|(n, _)| !mine.iter().any(|(m, _)| m == n))
            .map(|(n, t)| format!("{} {} -> {none}", hpc_env::short(n), hpc_env::short(t))),
    );
    let more = out.len().saturating_sub(LISTED_DIFFERENCES);
    if more > 0 {
        out.truncate(LISTED_DIFFERENCES);
        out.push(format!("and {more} more"));
    }
    out
}

impl World {
    /// Checks that every rank was given the same `values` (a collective, at
    /// the same point on every rank; before anything is built from them): each
    /// a name and its value as text, such as `("--mode", "\"overlap\"")`.
    /// Rank 0's are sent to every rank, each compares them with its own, and
    /// where any rank's differ every rank returns the same
    /// [`Error::NotTheSame`], naming the lowest such rank and what differs
    /// (`what` says what the values are: `flags`, `settings`). A launcher line
    /// that differs by rank (`--seed $HPC_RANK`, another mode) otherwise runs
    /// ranks that disagree, and rank 0 reports its own values for all of them.
    /// A job of one rank has nothing to compare.
    ///
    /// ```
    /// let world = hpc_runtime::World::init()?;
    /// world.same_on_every_rank("flags", &[("--n", "64".to_string())])?;
    /// # Ok::<(), hpc_runtime::Error>(())
    /// ```
    pub fn same_on_every_rank(&self, what: &str, values: &[(&str, String)]) -> Result<()> {
        if self.size() < 2 {
            return Ok(());
        }
        let mine = encode(values.iter().flat_map(|(n, v)| [*n, v.as_str()]));
        let rank0 = decode(&self.broadcast(0, &mine)?)?;
        if rank0.len() % 2 != 0 {
            return Err(Error::Protocol(
                "rank 0's values to compare are not pairs of a name and a value".into(),
            ));
        }
        let rank0: Vec<(String, String)> = rank0
            .chunks_exact(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect();
        let differs = differences(&rank0, values);
        let all = self.allgather(&encode(differs.iter().map(String::as_str)))?;
        for (rank, d) in all.iter().enumerate() {
            let differences = decode(d)?;
            if !differences.is_empty() {
                return Err(Error::NotTheSame {
                    rank,
                    what: what.to_string(),
                    differences,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_differs_is_named_in_order_and_cut() {
        let rank0 = vec![
            ("--n".to_string(), "8".to_string()),
            ("--mode".to_string(), "\"overlap\"".to_string()),
            ("--old".to_string(), "1".to_string()),
        ];
        let mine = [
            ("--n", "8".to_string()),
            ("--mode", "\"blocking\"".to_string()),
            ("--new", "2".to_string()),
        ];
        assert_eq!(
            differences(&rank0, &mine),
            [
                "--mode \"overlap\" -> \"blocking\"",
                "--new (none) -> 2",
                "--old 1 -> (none)"
            ]
        );
        let many: Vec<(String, String)> = (0..15)
            .map(|i| (format!("v{i}"), "0".to_string()))
            .collect();
        let mine: Vec<(&str, String)> =
            many.iter().map(|(n, _)| (n.as_str(), "1".into())).collect();
        let d = differences(&many, &mine);
        assert_eq!(d.len(), LISTED_DIFFERENCES + 1);
        assert_eq!(d.last().unwrap(), "and 5 more");
    }

    #[test]
    fn a_value_with_control_characters_is_escaped() {
        let d = differences(&[("x".into(), "a".into())], &[("x", "b\u{1b}[2J".into())]);
        assert!(!d[0].contains('\u{1b}'), "{d:?}");
    }

    #[test]
    fn the_encoding_is_read_back_and_a_cut_one_refused() {
        let bytes = encode(["a", "", "ü"]);
        assert_eq!(decode(&bytes).unwrap(), ["a", "", "ü"]);
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode(&[9, 0, 0]).is_err());
    }
}
