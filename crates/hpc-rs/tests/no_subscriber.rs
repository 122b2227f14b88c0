//! `Options::no_subscriber` with `HPC_TRACE` set (a file of its own: the
//! test installs the process's global subscriber and sets its environment).

mod common;

/// With `no_subscriber: true` (the application installs its subscriber
/// itself) and `HPC_TRACE` set, nothing was recorded and nothing said so: the
/// warning given when the application's subscriber was installed before
/// `init` was not given. It is, and nothing is made in the folder.
#[test]
fn a_trace_asked_for_but_not_recorded_is_said() {
    for v in hpc_env::ALL {
        std::env::remove_var(v.name);
    }
    let dir = std::env::temp_dir().join(format!("hpc-rs-no-subscriber-{}", std::process::id()));
    std::env::set_var(hpc_env::TRACE, &dir);
    let buf = common::Buffer::install_warn();
    hpc_rs::init_with(hpc_rs::Options {
        bind: Some(false),
        no_subscriber: true,
        ..Default::default()
    })
    .unwrap();
    let seen = buf.text();
    assert!(
        seen.contains("HPC_TRACE is set but the application installed its own subscriber"),
        "{seen:?}"
    );
    assert!(!dir.exists());
}
