//! Binding on this machine.

use hpc_topology::{
    bind_current_thread, bind_memory_to_numa, check_binding, current_cpu, diagnose_binding, plan,
    thread_affinity, BindingDiagnostic, CpuSet, Launcher, MemoryBindScope, MemoryBinding,
    PinnedPoolBuilder, PlacementRequest, Topology,
};

#[test]
fn this_machine_loads() {
    let t = Topology::this_machine().unwrap();
    assert!(!t.cores.is_empty());
    assert!(t.allowed.is_subset(&t.pus));
    assert!(t.allowed.is_subset(&thread_affinity().unwrap()));
    assert!(t.summary().contains("this machine"));
}

#[test]
fn pinned_pool_workers_run_on_their_core() {
    let t = Topology::this_machine().unwrap();
    let cores = t.allowed_cores(&t.allowed).count();
    let p = plan(&t, &PlacementRequest::new(1, cores)).unwrap();
    let placement = &p.ranks[0];
    let pool = PinnedPoolBuilder::new(placement)
        .bind_memory(true)
        .thread_name("test-worker")
        .build()
        .unwrap();
    assert_eq!(pool.current_num_threads(), cores);
    let seen: Vec<(usize, CpuSet, Option<u32>)> =
        pool.broadcast(|ctx| (ctx.index(), thread_affinity().unwrap(), current_cpu()));
    for (i, affinity, cpu) in seen {
        assert_eq!(affinity, placement.thread_cpusets[i], "worker {i}");
        let cpu = cpu.expect("sched_getcpu");
        assert!(
            placement.thread_cpusets[i].contains(cpu),
            "worker {i} ran on PU {cpu}"
        );
    }
}

#[test]
fn thread_binding_and_memory_binding() {
    let t = Topology::this_machine().unwrap();
    let last = t.allowed.last().unwrap();
    let handle = std::thread::spawn(move || {
        bind_current_thread(&[last].into_iter().collect()).unwrap();
        (thread_affinity().unwrap(), current_cpu())
    });
    let (aff, cpu) = handle.join().unwrap();
    assert_eq!(aff.to_vec(), vec![last]);
    assert_eq!(cpu, Some(last));
    assert!(bind_current_thread(&CpuSet::new()).is_err());
}

/// The calling thread's memory policy as the kernel holds it: (mode, node mask).
fn thread_mempolicy() -> (i32, u64) {
    let mut mode: libc::c_int = -1;
    let mut mask: libc::c_ulong = 0;
    // SAFETY: get_mempolicy writes one int to `mode` and at most `maxnode` (64) bits
    // to `mask`, both valid for writes; addr is unused without MPOL_F_ADDR.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            &mut mask as *mut libc::c_ulong,
            64 as libc::c_ulong,
            std::ptr::null::<libc::c_void>(),
            0 as libc::c_ulong,
        )
    };
    assert_eq!(rc, 0, "get_mempolicy: {}", std::io::Error::last_os_error());
    (mode, mask as u64)
}

/// Whether the kernel lets this thread set a memory policy at all (seccomp profiles
/// of some container runtimes refuse it); resets the policy to the default.
fn set_mempolicy_allowed() -> bool {
    // SAFETY: MPOL_DEFAULT with an empty mask changes only this thread's policy.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            0 as libc::c_int,
            std::ptr::null::<libc::c_ulong>(),
            0 as libc::c_ulong,
        )
    };
    rc == 0
}

#[test]
fn memory_binding_binds_the_node_or_says_why_not() {
    const MPOL_BIND: i32 = 2;
    const MPOL_LOCAL: i32 = 5;
    let t = Topology::this_machine().unwrap();
    let numa = t.numa_nodes[0].os_index;
    let single = t.numa_nodes.len() == 1;
    std::thread::spawn(move || {
        match bind_memory_to_numa(numa, MemoryBindScope::Thread) {
            MemoryBinding::Bound => {
                let (mode, mask) = thread_mempolicy();
                if single {
                    // Binding to the machine's only node is binding to all of them,
                    // which hwloc asks of the kernel as MPOL_LOCAL. A call that did
                    // nothing would leave the thread's MPOL_DEFAULT.
                    assert!(
                        mode == MPOL_BIND || mode == MPOL_LOCAL,
                        "hwloc said Bound, the kernel's policy is {mode}"
                    );
                } else {
                    assert_eq!(
                        mode, MPOL_BIND,
                        "hwloc said Bound, the kernel's policy is {mode}"
                    );
                    assert_ne!(
                        mask & (1 << numa),
                        0,
                        "node {numa} is not in the mask {mask:#x}"
                    );
                }
            }
            MemoryBinding::NotApplied(why) => {
                assert!(!why.is_empty(), "NotApplied without a reason");
                assert!(
                    !set_mempolicy_allowed(),
                    "memory binding to node {numa} was not applied ({why}) although \
                     set_mempolicy works here"
                );
            }
        }
        // A node that does not exist is never reported as bound, and says why.
        match bind_memory_to_numa(9999, MemoryBindScope::Thread) {
            MemoryBinding::Bound => panic!("bound to NUMA node 9999, which does not exist"),
            MemoryBinding::NotApplied(why) => assert!(!why.is_empty()),
        }
    })
    .join()
    .unwrap();
}

#[test]
fn launcher_single_core_binding_is_reported() {
    let t = Topology::from_synthetic("pack:2 core:4 pu:2").unwrap();
    let one_core = t.cores[3].pus.clone();
    let r = diagnose_binding(&t, &one_core, 8, Launcher::OpenMpi);
    assert_eq!(r.cores, 1);
    let d = r.diagnostic.unwrap();
    assert!(matches!(
        d,
        BindingDiagnostic::SingleCore { threads: 8, .. }
    ));
    assert!(d.to_string().contains("--bind-to none"));
    assert!(d.to_string().contains("hpc run --bind"));
    let two = t.cores[0].pus.union(&t.cores[1].pus);
    assert!(matches!(
        diagnose_binding(&t, &two, 4, Launcher::Slurm).diagnostic,
        Some(BindingDiagnostic::TooFewCores { cores: 2, .. })
    ));
    assert!(diagnose_binding(&t, &t.pus, 8, Launcher::Unknown)
        .diagnostic
        .is_none());
    // More threads than the whole machine's cores, none left out by a binding: it
    // said "this process is bound to 8 cores … launch without CPU binding".
    let d = diagnose_binding(&t, &t.pus, 9, Launcher::OpenMpi)
        .diagnostic
        .unwrap();
    assert_eq!(
        d,
        BindingDiagnostic::MoreThreadsThanCores {
            cores: 8,
            threads: 9
        }
    );
    assert!(
        !d.to_string().contains("bound") && !d.to_string().contains("--bind-to"),
        "{d}"
    );
    assert!(diagnose_binding(&t, &one_core, 1, Launcher::OpenMpi)
        .diagnostic
        .is_none());
    assert_eq!(
        Launcher::from_env(|k| k == "OMPI_COMM_WORLD_SIZE"),
        Launcher::OpenMpi
    );
    assert_eq!(Launcher::from_env(|_| false), Launcher::Unknown);
}

#[test]
fn single_core_binding_detected_in_a_bound_thread() {
    // check_binding reads the process (main thread) binding; a bound helper thread
    // exercises the same diagnosis on its own affinity.
    let t = Topology::this_machine().unwrap();
    let report = check_binding(&t, 1).unwrap();
    assert!(report.diagnostic.is_none(), "{:?}", report.diagnostic);
    assert_eq!(
        report.cpuset,
        thread_affinity().unwrap(),
        "the process's binding"
    );
    assert!(report.cores >= 1);
    // More threads than the allowed cores is diagnosed.
    let many = check_binding(&t, report.cores * 4 + 1).unwrap();
    assert!(
        many.diagnostic.is_some(),
        "{} threads on {} cores is not reported",
        report.cores * 4 + 1,
        report.cores
    );
    let first = t.allowed.first().unwrap();
    let t2 = t.clone();
    std::thread::spawn(move || {
        bind_current_thread(&[first].into_iter().collect()).unwrap();
        let r = diagnose_binding(&t2, &thread_affinity().unwrap(), 4, Launcher::OpenMpi);
        assert!(matches!(
            r.diagnostic,
            Some(BindingDiagnostic::SingleCore { .. })
        ));
    })
    .join()
    .unwrap();
}

/// A worker name prefix holding a NUL character (no thread's name may) gives
/// a pool whose workers' names show it escaped: `build` panicked with
/// "thread name may not contain interior null bytes" instead of returning.
#[test]
fn a_worker_name_with_a_nul_still_builds_the_pool() {
    // A CPU this thread may use (no cpuset at all is an error since pass 20).
    let cpu = thread_affinity().unwrap().first().unwrap();
    let pool = PinnedPoolBuilder::from_cpusets(vec![CpuSet::parse_list(&cpu.to_string()).unwrap()])
        .thread_name("a\0b")
        .build()
        .unwrap();
    let name = pool.install(|| std::thread::current().name().map(str::to_owned));
    assert_eq!(name.as_deref(), Some("a\\0b-0"));
}

/// A pinned pool of no cpuset was one worker, unpinned; a worker whose cpuset
/// is empty or names a CPU the machine has not (1000) ran unpinned: `build`
/// said `Ok` behind a warning ("cannot pin worker thread") that a program
/// without a subscriber never saw. Each is an error naming the worker; a
/// pool of the CPUs this thread may use is still built and pinned.
#[test]
fn a_pinned_pool_that_cannot_be_pinned_is_an_error() {
    use hpc_topology::{CpuSet, PinnedPoolBuilder, TopologyError};
    assert!(matches!(
        PinnedPoolBuilder::from_cpusets(vec![]).build(),
        Err(TopologyError::ZeroThreads)
    ));
    let allowed = hpc_topology::thread_affinity().unwrap();
    let one = CpuSet::parse_list(&allowed.first().unwrap().to_string()).unwrap();
    for (sets, said) in [
        (
            vec![CpuSet::new()],
            "worker 0 of the pinned pool: empty cpuset",
        ),
        (
            vec![one.clone(), CpuSet::parse_list("1000").unwrap()],
            "binding to cpuset 1000 failed: worker 1 of the pinned pool: sched_setaffinity",
        ),
    ] {
        match PinnedPoolBuilder::from_cpusets(sets).build() {
            Err(e @ TopologyError::Bind { .. }) => {
                assert!(e.to_string().contains(said), "{e}")
            }
            Err(e) => panic!("{said}: {e}"),
            Ok(_) => panic!("{said}: built"),
        }
    }
    let pool = PinnedPoolBuilder::from_cpusets(vec![one.clone()])
        .build()
        .unwrap();
    assert_eq!(
        pool.install(|| hpc_topology::thread_affinity().unwrap()),
        one
    );
}

/// `bind_memory_to_numa(u32::MAX, …)` panicked inside hwlocality ("Bitmap
/// index is out of the accepted 0..=c_int::MAX range"), where its text
/// promises `NotApplied` for an unknown node, never an error.
#[test]
fn a_numa_node_beyond_hwlocs_bitmaps_is_not_applied_not_a_panic() {
    use hpc_topology::{bind_memory_to_numa, MemoryBindScope, MemoryBinding};
    match bind_memory_to_numa(u32::MAX, MemoryBindScope::Thread) {
        MemoryBinding::NotApplied(why) => assert!(why.contains("4294967295"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// A process binding to a PU hwloc's bitmaps cannot index (`u32::MAX`, past
/// `c_int::MAX`) panicked in hwlocality ("Bitmap index is out of the accepted
/// 0..=c_int::MAX range"), and one far past any machine (2^30) was a bitmap of
/// that many bits made before the system refused it; a thread's binding was
/// refused by name. Refused, naming the PU and the bound, the binding kept.
#[test]
fn a_process_binding_to_a_pu_no_machine_has_is_refused_by_name() {
    let before = hpc_topology::current_binding().unwrap();
    for pu in [u32::MAX, 1 << 30, hpc_topology::MAX_CPU_ID + 1] {
        let set: CpuSet = [0, pu].into_iter().collect();
        let e = hpc_topology::bind_current_process(&set)
            .expect_err("bound to a PU no machine has")
            .to_string();
        assert!(
            e.contains(&format!(
                "PU {pu} is beyond PU {}",
                hpc_topology::MAX_CPU_ID
            )),
            "{e}"
        );
    }
    assert_eq!(hpc_topology::current_binding().unwrap(), before);
}
