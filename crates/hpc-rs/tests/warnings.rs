//! A setting that is wrong is warned about once, however many parts of the SDK
//! read it.
#![cfg(all(feature = "collectives", feature = "topology"))]

mod common;

/// `HPC_PROGRESS_CPUSET` naming CPUs no list may hold: the placement, the
/// choice of engine and the communicator each read it, and each warned (three
/// identical warnings, each echoing the value). And an `HPC_AGENT_WAKE` of
/// 100,000 characters is warned about with its value cut (it was echoed whole).
#[test]
fn a_wrong_setting_read_in_several_places_is_warned_about_once() {
    for v in hpc_env::ALL {
        std::env::remove_var(v.name);
    }
    std::env::set_var(hpc_env::PROGRESS_CPUSET, "0-4294967295");
    std::env::set_var(hpc_env::ENGINE, "thread");
    std::env::set_var(hpc_env::AGENT_WAKE, "w".repeat(100_000));
    let buf = common::Buffer::install_warn();
    let ctx = hpc_rs::init_with(hpc_rs::Options {
        bind: Some(false),
        ..Default::default()
    })
    .unwrap();
    ctx.comm_options().unwrap();
    ctx.comm().unwrap();
    let seen = buf.text();
    let said = seen
        .matches("HPC_PROGRESS_CPUSET=\"0-4294967295\" is ignored")
        .count();
    assert_eq!(said, 1, "{seen}");
    assert!(
        seen.contains("HPC_AGENT_WAKE=\"www")
            && seen.contains("is ignored: neither eager nor lazy")
            && seen.len() < 5_000,
        "{} bytes of warnings",
        seen.len()
    );
}
