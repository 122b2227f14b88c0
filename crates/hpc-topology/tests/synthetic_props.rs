//! Property tests over random synthetic topologies.

use std::collections::BTreeSet;

use hpc_topology::{plan, CpuSet, PlacementRequest, Policy, ProgressScope, Topology};
use proptest::prelude::*;

fn policy() -> impl Strategy<Value = Policy> {
    prop_oneof![
        Just(Policy::Compact),
        Just(Policy::Spread),
        Just(Policy::NumaPerRank),
        Just(Policy::PackagePerRank)
    ]
}

/// A synthetic description: packages, NUMA nodes per package, cores per NUMA node,
/// PUs per core.
fn shape() -> impl Strategy<Value = (u32, u32, u32, u32)> {
    (1u32..=4, 1u32..=3, 1u32..=6, 1u32..=2)
}

fn topo((p, n, c, t): (u32, u32, u32, u32)) -> Topology {
    Topology::from_synthetic(&format!("pack:{p} numa:{n} core:{c} pu:{t}")).unwrap()
}

/// Cores owned by ranks (compute + own progress) and node progress: all disjoint
/// unless oversubscribed.
fn owned_cores(plan: &hpc_topology::PlacementPlan) -> (Vec<u32>, BTreeSet<u32>) {
    let mut all = plan.node_progress_cores.clone();
    for r in &plan.ranks {
        all.extend(&r.compute_cores);
        if plan.request.progress_scope == ProgressScope::PerRank {
            all.extend(&r.progress_cores);
        }
    }
    let set = all.iter().copied().collect();
    (all, set)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn never_overlaps_never_leaves_allowed(
        s in shape(), ranks in 1usize..=8, threads in 1usize..=4, progress in 0usize..=2,
        per_node in any::<bool>(), pol in policy(), mask in any::<u64>(),
    ) {
        let t = topo(s);
        let all = t.pus.len() as u32;
        // A random allowed subset (never empty).
        let mut allowed: CpuSet = (0..all).filter(|i| mask >> (i % 64) & 1 == 1).collect();
        if allowed.is_empty() {
            allowed.insert(all - 1);
        }
        let mut req = PlacementRequest::new(ranks, threads).policy(pol).allowed(allowed.clone());
        req = if per_node { req.per_node_progress(progress) } else { req.progress(progress) };
        let p = plan(&t, &req).unwrap();
        let allowed_cores = t.allowed_cores(&allowed).count();
        for r in &p.ranks {
            prop_assert!(r.cpuset.is_subset(&allowed));
            prop_assert_eq!(r.compute_cores.len(), threads);
            for (core, set) in r.compute_cores.iter().zip(&r.thread_cpusets) {
                prop_assert!(set.is_subset(&t.core(*core).unwrap().pus));
                prop_assert!(!set.is_empty());
            }
        }
        let (list, set) = owned_cores(&p);
        let need = ranks * (threads + if per_node { 0 } else { progress }) + if per_node { progress } else { 0 };
        prop_assert_eq!(p.oversubscribed, need > allowed_cores);
        if !p.oversubscribed {
            prop_assert_eq!(list.len(), set.len(), "cores shared without oversubscription");
        } else {
            // Every allowed core is used before any is shared.
            prop_assert_eq!(set.len(), allowed_cores);
        }
    }

    #[test]
    fn fills_the_machine(s in shape(), pol in policy(), per_node in any::<bool>()) {
        let t = topo(s);
        let cores = t.cores.len();
        // ranks x threads (+ progress) == cores: every core used exactly once.
        for ranks in (1..=cores).filter(|r| cores % r == 0) {
            let threads = cores / ranks;
            let req = if per_node && threads > 1 && ranks == 1 {
                PlacementRequest::new(1, threads - 1).per_node_progress(1)
            } else {
                PlacementRequest::new(ranks, threads)
            }.policy(pol);
            let p = plan(&t, &req).unwrap();
            prop_assert!(!p.oversubscribed);
            let (list, set) = owned_cores(&p);
            prop_assert_eq!(list.len(), cores);
            prop_assert_eq!(set.len(), cores);
            let pus: CpuSet = p.ranks.iter().flat_map(|r| r.cpuset.to_vec()).collect();
            prop_assert_eq!(pus, t.pus.clone());
        }
    }

    #[test]
    fn numa_per_rank_is_numa_local(p in 1u32..=4, n in 1u32..=3, c in 1u32..=6, threads in 1usize..=6) {
        let t = topo((p, n, c, 1));
        let domains = (p * n) as usize;
        let threads = threads.min(c as usize);
        let plan = plan(&t, &PlacementRequest::new(domains, threads).policy(Policy::NumaPerRank)).unwrap();
        for r in &plan.ranks {
            let node = t.numa_node(r.numa.unwrap()).unwrap();
            prop_assert!(r.cpuset.is_subset(&node.cpuset));
            prop_assert_eq!(node.logical_index as usize, r.rank);
        }
    }
}
