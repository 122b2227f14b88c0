//! Memory estimates that are checked before a large topology or plan is built, so
//! that an impossible request is refused at once with the numbers instead of
//! running for minutes and aborting on a failed allocation.

use crate::{Result, TopologyError};

/// The most PUs a synthetic topology may have: what the largest Linux build
/// supports (`NR_CPUS` = 8192 on x86-64), so every machine Linux runs on fits.
/// hwloc inserts a synthetic topology's objects in time quadratic in their
/// number under one parent: 8192 PUs in one level take it 3 to 7 s, the 65536
/// accepted before took minutes (`pu:65536`; `numa:65536 pu:1` ran past 60 s).
pub const MAX_SYNTHETIC_PUS: u64 = 8192;

/// Memory this process may still allocate: `MemAvailable` of `/proc/meminfo`;
/// `None` when it cannot be read (the checks are then skipped).
pub fn available_memory() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = s
        .lines()
        .find(|l| l.starts_with("MemAvailable:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Refuses `what` when `estimate` exceeds the available memory.
pub(crate) fn check(what: String, estimate: u64) -> Result<()> {
    match available_memory() {
        Some(available) if estimate > available => Err(TopologyError::TooLarge {
            what,
            estimate,
            available,
        }),
        _ => Ok(()),
    }
}

/// PUs and objects of an hwloc synthetic description (`"pack:2 numa:2 core:8 pu:2"`):
/// the product of the arities, and the sum over levels of the objects at each.
/// `None` when a level's arity cannot be read (hwloc then judges the description).
pub fn synthetic_size(description: &str) -> Option<(u64, u64)> {
    // hwloc reads `pack : 2` as `pack:2`: without the spaces around a colon
    // the level was no level here, and a description of a billion PUs went
    // to hwloc unchecked.
    let mut joined = String::with_capacity(description.len());
    let mut chars = description.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_whitespace() {
            let mut rest = chars.clone();
            while rest.next_if(|c| c.is_whitespace()).is_some() {}
            if joined.ends_with(':') || rest.peek() == Some(&':') {
                chars = rest;
                continue;
            }
        }
        joined.push(c);
    }
    let mut depth = 0i32;
    let mut level = String::new();
    let mut levels = Vec::new();
    for c in joined.chars() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            c if c.is_whitespace() && depth == 0 => {
                if !level.is_empty() {
                    levels.push(std::mem::take(&mut level));
                }
                continue;
            }
            _ => {}
        }
        if depth == 0 && c != ')' && c != ']' {
            level.push(c);
        }
    }
    if !level.is_empty() {
        levels.push(level);
    }
    let (mut pus, mut objects) = (1u64, 0u64);
    for l in &levels {
        let arity = l.rsplit(':').next()?;
        let arity: u64 = arity.trim().parse().ok()?;
        pus = pus.saturating_mul(arity);
        objects = objects.saturating_add(pus);
    }
    (!levels.is_empty()).then_some((pus, objects))
}

/// Estimated bytes of loading a synthetic topology of `pus` PUs and `objects`
/// objects: hwloc's objects with their bitmaps (each up to `pus` bits, twice) and
/// this crate's model of them. Calibrated on this machine: 1,024 PUs take 13 MB,
/// 12,800 take 71 MB and 51,200 take 768 MB (peak RSS of `hpc topo --synthetic`).
pub fn synthetic_bytes(pus: u64, objects: u64) -> u64 {
    (16u64 << 20).saturating_add(objects.saturating_mul(512u64.saturating_add(pus / 4)))
}

/// Estimated bytes of a placement plan: about a kilobyte per rank plus its cores.
pub fn plan_bytes(ranks: usize, threads: usize, progress: usize) -> u64 {
    let per_rank = 1024u64.saturating_add(
        (threads as u64)
            .saturating_add(progress as u64)
            .saturating_mul(256),
    );
    (ranks as u64).saturating_mul(per_rank)
}

/// Checks a synthetic description before hwloc builds it.
pub(crate) fn check_synthetic(description: &str) -> Result<()> {
    let Some((pus, objects)) = synthetic_size(description) else {
        return Ok(());
    };
    if pus > MAX_SYNTHETIC_PUS {
        return Err(TopologyError::SyntheticTooLarge {
            description: description.to_string(),
            pus,
            max: MAX_SYNTHETIC_PUS,
            estimate: synthetic_bytes(pus, objects),
        });
    }
    check(
        format!("the synthetic topology \"{description}\" ({pus} PUs, {objects} objects)"),
        synthetic_bytes(pus, objects),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// hwloc builds `pack : 100 pu : 100` as 10,000 PUs; with the spaces the
    /// levels were not read here, and no bound applied (`pack : 1000 core :
    /// 1000 pu : 1000` went to hwloc whole).
    #[test]
    fn spaces_around_a_colon_do_not_hide_a_level() {
        assert_eq!(
            synthetic_size("pack : 100 pu :\t100"),
            Some((10_000, 100 + 10_000))
        );
        assert_eq!(
            synthetic_size("pack :2  core: 3 pu:1"),
            Some((6, 2 + 6 + 6))
        );
        assert!(matches!(
            check_synthetic("pack : 1000 core : 1000 pu : 1000"),
            Err(TopologyError::SyntheticTooLarge {
                pus: 1_000_000_000,
                ..
            })
        ));
    }

    #[test]
    fn synthetic_descriptions_are_sized() {
        assert_eq!(
            synthetic_size("pack:2 numa:2 core:8 pu:2"),
            Some((64, 2 + 4 + 32 + 64))
        );
        assert_eq!(
            synthetic_size("pack:1000 core:1000 pu:1000"),
            Some((1_000_000_000, 1000 + 1_000_000 + 1_000_000_000))
        );
        assert_eq!(
            synthetic_size("numa:2(memory=1GB) pack:2 [numa(memory=2GB)] core:4 pu:1"),
            Some((16, 2 + 4 + 16 + 16))
        );
        assert_eq!(synthetic_size("pack:x"), None);
        assert_eq!(synthetic_size(""), None);
    }

    #[test]
    fn synthetic_topologies_beyond_the_largest_linux_build_are_refused() {
        for d in ["pu:65536", "numa:65536 pu:1", "pack:2 core:4097 pu:1"] {
            assert!(
                matches!(
                    check_synthetic(d),
                    Err(TopologyError::SyntheticTooLarge { max: 8192, .. })
                ),
                "{d}"
            );
        }
        assert!(check_synthetic("pack:16 core:256 pu:2").is_ok());
    }

    #[test]
    fn huge_requests_are_estimated_huge() {
        assert!(plan_bytes(4_000_000_000, 1, 0) > 1 << 40);
        assert!(synthetic_bytes(65536, 70000) > 1 << 30);
        assert!(synthetic_bytes(64, 102) < 32 << 20);
    }
}
