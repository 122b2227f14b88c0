//! `Context::comm()` follows the placement: a progress core gives the `Thread` engine
//! pinned there, and `init()` binds the process to the placement.
#![cfg(all(feature = "collectives", feature = "topology"))]

#[test]
fn a_progress_core_gives_the_thread_engine_pinned_to_it() {
    for v in hpc_env::ALL {
        std::env::remove_var(v.name);
    }
    let ctx = hpc_rs::init_with(hpc_rs::Options {
        threads: Some(1),
        progress: 1,
        ..Default::default()
    })
    .unwrap();
    let p = ctx.placement.as_ref().expect("a placement on this machine");
    assert!(!p.progress_cpuset.is_empty(), "{p:?}");
    let opts = ctx.comm_options().unwrap();
    assert_eq!(opts.engine, hpc_rs::comm::Engine::Thread);
    assert_eq!(opts.progress_cpus.as_ref(), Some(&p.progress_cpuset));
    // Bound to the placement: the process may run on its CPUs only.
    assert!(ctx.bound);
    let now = hpc_rs::topology::current_binding().unwrap();
    assert_eq!(now, p.cpuset);
    // A collective through it.
    let comm = ctx.comm().unwrap();
    assert_eq!(comm.engine(), hpc_rs::comm::Engine::Thread);
    let mut x = [0u32];
    comm.allreduce(&[7u32], &mut x, hpc_rs::comm::ReduceOp::Sum)
        .unwrap();
    assert_eq!(x, [7]);
    // HPC_ENGINE overrides.
    std::env::set_var(hpc_env::ENGINE, "inline");
    assert_eq!(
        ctx.comm_options().unwrap().engine,
        hpc_rs::comm::Engine::Inline
    );
    std::env::set_var(hpc_env::ENGINE, "turbo");
    let e = ctx.comm_options().unwrap_err().to_string();
    assert!(e.contains("HPC_ENGINE"), "{e}");
}
