//! Which GPU each rank of a node uses.
//!
//! Two rules, in order:
//!
//! 1. `CUDA_VISIBLE_DEVICES` set: the driver already shows this process only
//!    the listed devices, so the launcher (or the user) chose. Local rank `r`
//!    takes visible ordinal `r % visible` ([`visible_choice`]).
//! 2. Otherwise, the GPU nearest to the rank's cores, with no two ranks on
//!    one GPU while a free one exists ([`assign`]): a pure function over the
//!    GPUs' locality cpusets (from `hpc-topology`) and the ranks' cpusets,
//!    which every rank of a node computes identically from data exchanged
//!    through the `World`.

use hpc_topology::CpuSet;

/// Parses `CUDA_VISIBLE_DEVICES`: `None` when unset, else the number of
/// entries it lists (an empty value hides every device: `Some(0)`). Entries
/// may be ordinals or `GPU-…`/`MIG-…` UUIDs; listing stops at the first
/// invalid entry as the driver does (an ordinal entry that is not a number).
pub fn parse_visible(value: Option<&str>) -> Option<usize> {
    let v = value?;
    let mut n = 0;
    for entry in v.split(',').map(str::trim) {
        if entry.is_empty() {
            break;
        }
        let valid = entry.parse::<i64>().is_ok_and(|x| x >= 0)
            || entry.starts_with("GPU-")
            || entry.starts_with("MIG-");
        if !valid {
            break;
        }
        n += 1;
    }
    Some(n)
}

/// Rule 1: with `visible` devices visible, local rank `local_rank` uses
/// ordinal `local_rank % visible`; `None` when nothing is visible.
pub fn visible_choice(local_rank: usize, visible: usize) -> Option<usize> {
    (visible > 0).then(|| local_rank % visible)
}

/// Rule 2: assigns one of `gpus` (their locality cpusets, in ordinal order)
/// to each rank (its cpuset), returning GPU indices, one per rank.
///
/// Loads are balanced first: with `r` ranks and `g` GPUs every GPU takes
/// `r / g` or `r / g + 1` ranks, so no GPU gets a second rank while one has
/// none. Within that, pairs are chosen greedily by locality: repeatedly the
/// (rank, GPU) pair whose cpusets share the most cores, then the less
/// loaded GPU, then the lower rank and GPU index. Empty when there are no
/// GPUs.
///
/// ```
/// use hpc_gpu::device::assign;
/// use hpc_topology::CpuSet;
/// let s0 = CpuSet::parse_list("0-7").unwrap();
/// let s1 = CpuSet::parse_list("8-15").unwrap();
/// // GPU 0 near socket 1, GPU 1 near socket 0.
/// let gpus = [s1.clone(), s0.clone()];
/// assert_eq!(assign(&gpus, &[s0, s1]), vec![1, 0]);
/// ```
pub fn assign(gpus: &[CpuSet], ranks: &[CpuSet]) -> Vec<usize> {
    let (g, r) = (gpus.len(), ranks.len());
    if g == 0 {
        return Vec::new();
    }
    // Capacities: every GPU takes `floor(r / g)` ranks, `r % g` of them one more.
    let base = r / g;
    let mut extra = r % g;
    let mut load = vec![0usize; g];
    let mut out = vec![usize::MAX; r];
    for _ in 0..r {
        let mut best: Option<(usize, usize, usize)> = None; // (affinity, rank, gpu)
        for (q, set) in ranks
            .iter()
            .enumerate()
            .filter(|(q, _)| out[*q] == usize::MAX)
        {
            for (x, gset) in gpus.iter().enumerate() {
                let room = load[x] < base || (load[x] == base && extra > 0);
                if !room {
                    continue;
                }
                let a = gset.intersection_len(set);
                let better = match best {
                    None => true,
                    Some((ba, bq, bx)) => {
                        (
                            a,
                            std::cmp::Reverse(load[x]),
                            std::cmp::Reverse(q),
                            std::cmp::Reverse(x),
                        ) > (
                            ba,
                            std::cmp::Reverse(load[bx]),
                            std::cmp::Reverse(bq),
                            std::cmp::Reverse(bx),
                        )
                    }
                };
                if better {
                    best = Some((a, q, x));
                }
            }
        }
        let (_, q, x) = best.expect("capacities add up to the rank count");
        if load[x] == base {
            extra -= 1;
        }
        load[x] += 1;
        out[q] = x;
    }
    out
}

/// Parses the ordinal of a CUDA OS device name (`cuda3` → 3).
pub fn cuda_ordinal(name: &str) -> Option<usize> {
    name.strip_prefix("cuda")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> CpuSet {
        CpuSet::parse_list(s).unwrap()
    }

    #[test]
    fn visible_parsing() {
        assert_eq!(parse_visible(None), None);
        assert_eq!(parse_visible(Some("")), Some(0));
        assert_eq!(parse_visible(Some("0")), Some(1));
        assert_eq!(parse_visible(Some("2,3")), Some(2));
        assert_eq!(parse_visible(Some("0,x,1")), Some(1));
        assert_eq!(parse_visible(Some("GPU-abc,MIG-def")), Some(2));
        assert_eq!(parse_visible(Some("-1")), Some(0));
        assert_eq!(visible_choice(3, 2), Some(1));
        assert_eq!(visible_choice(0, 0), None);
    }

    #[test]
    fn nearest_gpu_per_socket() {
        let (a, b) = (set("0-7"), set("8-15"));
        let gpus = [a.clone(), a.clone(), b.clone(), b.clone()];
        let ranks = [set("8-11"), set("0-3"), set("12-15"), set("4-7")];
        assert_eq!(assign(&gpus, &ranks), vec![2, 0, 3, 1]);
    }

    #[test]
    fn no_sharing_while_a_gpu_is_free() {
        // All ranks near GPU 0: still spread over all GPUs.
        let gpus = [set("0-3"), set("4-7"), set("8-11")];
        let ranks = vec![set("0"); 3];
        let mut got = assign(&gpus, &ranks);
        got.sort();
        assert_eq!(got, vec![0, 1, 2]);
        // Eight ranks over four GPUs: two each, each near its cores.
        let gpus = [set("0-3"), set("4-7"), set("8-11"), set("12-15")];
        let ranks: Vec<CpuSet> = (0..8).map(|i| set(&format!("{}", i * 2))).collect();
        let got = assign(&gpus, &ranks);
        assert_eq!(got, vec![0, 0, 1, 1, 2, 2, 3, 3]);
    }

    #[test]
    fn one_gpu_many_ranks_and_unknown_locality() {
        assert_eq!(assign(&[set("0-15")], &vec![set("0"); 4]), vec![0; 4]);
        let unknown = [CpuSet::new(), CpuSet::new()];
        assert_eq!(assign(&unknown, &vec![set("0"); 5]), vec![0, 1, 0, 1, 0]);
        assert!(assign(&[], &[set("0")]).is_empty());
    }

    #[test]
    fn loads_never_differ_by_more_than_one() {
        for g in 1..6 {
            for r in 0..20 {
                let gpus: Vec<CpuSet> = (0..g).map(|i| set(&format!("{i}"))).collect();
                let ranks: Vec<CpuSet> = (0..r).map(|i| set(&format!("{}", i % 3))).collect();
                let got = assign(&gpus, &ranks);
                let mut load = vec![0; g];
                for x in got {
                    load[x] += 1;
                }
                assert!(load.iter().max().unwrap() - load.iter().min().unwrap() <= 1);
            }
        }
    }

    #[test]
    fn ordinals() {
        assert_eq!(cuda_ordinal("cuda12"), Some(12));
        assert_eq!(cuda_ordinal("nvml0"), None);
    }
}
