//! A progress CPU the launcher reserved (`hpc run --bind core --progress 1` sets
//! `HPC_PROGRESS_CPUSET`) is kept out of the compute placement, stays in the process's
//! binding, and gives `ctx.comm()` the `Thread` engine pinned there.
#![cfg(all(feature = "collectives", feature = "topology"))]

#[test]
fn the_launchers_progress_cpu_is_not_a_compute_core() {
    for v in hpc_env::ALL {
        std::env::remove_var(v.name);
    }
    let allowed = hpc_rs::topology::current_binding().unwrap();
    let topo = hpc_rs::topology::Topology::this_machine().unwrap();
    if topo.allowed_cores(&allowed).count() < 2 {
        eprintln!("fewer than 2 cores allowed: nothing to reserve; skipping");
        return;
    }
    // The last core's PUs as the progress CPUs.
    let last = topo.allowed_cores(&allowed).last().unwrap();
    let progress = last.pus.intersection(&allowed);
    std::env::set_var(hpc_env::PROGRESS_CPUSET, progress.to_string());

    let ctx = hpc_rs::init().unwrap();
    let p = ctx.placement.as_ref().expect("a placement");
    assert!(p.cpuset.intersection(&progress).is_empty(), "{p:?}");
    assert!(!p.compute_cores.contains(&last.logical_index), "{p:?}");
    assert!(ctx.bound);
    assert_eq!(
        hpc_rs::topology::current_binding().unwrap(),
        p.cpuset.union(&progress)
    );
    let opts = ctx.comm_options().unwrap();
    assert_eq!(opts.engine, hpc_rs::comm::Engine::Thread);
    assert_eq!(opts.progress_cpus, Some(progress));
}
