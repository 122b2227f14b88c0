//! The proxies' settings whose value is not UTF-8: an error naming the
//! variable, not a variable read as unset. (The only test of this binary:
//! it sets the process's variables.)

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;

/// `HPC_COLL_PROXY_PLACEMENT`, `HPC_COLL_PROXY_ADDR`,
/// `HPC_COLL_PROXY_DPU_HOST` and `HPC_COLL_PROXY_MAX_SCRATCH` of bytes that
/// are not UTF-8 were read as unset (`std::env::var(..)` taken as absent):
/// the proxy placed on the host where `dpu` was meant, the rank's address
/// and the DPU service's defaulted to loopback, the memory cap to half the
/// memory, without a word; `HPC_COLL_PROXY_SLOTS` was said to be "not
/// set".
#[test]
fn proxy_settings_that_are_not_utf8_are_errors_naming_them() {
    let bad = OsStr::from_bytes(b"dp\xffu");
    let name = hpc_runtime::env::COLL_PROXY_PLACEMENT;
    std::env::set_var(name, bad);
    let e = hpc_proxy::Placement::from_env().unwrap_err().to_string();
    assert!(e.contains(name) && e.contains("not valid UTF-8"), "{e}");
    std::env::remove_var(name);

    for name in [
        hpc_runtime::env::COLL_PROXY_ADDR,
        hpc_runtime::env::COLL_PROXY_DPU_HOST,
    ] {
        std::env::set_var(name, bad);
        let e = hpc_proxy::dpu::link::host_addr()
            .map(|ip| ip.to_string())
            .unwrap_err()
            .to_string();
        assert!(e.contains(name) && e.contains("not valid UTF-8"), "{e}");
        std::env::remove_var(name);
    }
    let e = {
        std::env::set_var(hpc_runtime::env::COLL_PROXY_DPU_HOST, bad);
        let r = hpc_proxy::dpu::link::dpu_service_addr();
        std::env::remove_var(hpc_runtime::env::COLL_PROXY_DPU_HOST);
        r.map(|r| r.map(|a| a.to_string()))
    };
    assert!(matches!(&e, Some(Err(_))), "{e:?}");

    // The proxy's memory cap: it was half the memory.
    let name = hpc_runtime::env::COLL_PROXY_MAX_SCRATCH;
    std::env::set_var(name, OsStr::from_bytes(b"16\xffG"));
    let e = hpc_proxy::max_scratch().unwrap_err();
    assert!(e.contains(name) && e.contains("not valid UTF-8"), "{e}");
    std::env::remove_var(name);

    // The board's slots, set by the rank that starts the proxy: it was "not
    // set". (The board is not opened before the slots are read.)
    std::env::set_var(hpc_runtime::env::COLL_PROXY_BOARD, "/nonexistent/board");
    let name = hpc_runtime::env::COLL_PROXY_SLOTS;
    std::env::set_var(name, OsStr::from_bytes(b"\xff3"));
    let e = hpc_proxy::serve_env().unwrap_err().to_string();
    std::env::remove_var(name);
    std::env::remove_var(hpc_runtime::env::COLL_PROXY_BOARD);
    assert!(e.contains(name) && e.contains("not valid UTF-8"), "{e}");
}
