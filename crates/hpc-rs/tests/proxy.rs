//! `init()` runs the collectives proxy's entry: a program that never calls
//! `proxy::serve_env` itself still serves as its own proxy when the `Proxy` engine
//! re-executes it (this test binary is that program: the proxy process runs this test
//! again, and its `init()` serves instead of returning).
#![cfg(feature = "collectives")]

use hpc_rs::comm::{Comm, Engine, ReduceOp};

#[test]
fn the_program_serves_as_its_own_proxy() {
    let ctx = hpc_rs::init().unwrap();
    std::env::set_var(hpc_env::ENGINE, "proxy");
    let mut opts = ctx.comm_options().unwrap();
    assert_eq!(opts.engine, Engine::Proxy);
    // Everything to the proxy, however small.
    opts.proxy_min = Some(0);
    let comm = Comm::with_options(&ctx.world, opts).unwrap();
    assert!(
        comm.progress_note().contains("proxy process"),
        "{}",
        comm.progress_note()
    );
    let mut sum = [0u64; 4];
    comm.allreduce(&[1u64, 2, 3, 4], &mut sum, ReduceOp::Sum)
        .unwrap();
    assert_eq!(sum, [1, 2, 3, 4]);
}
