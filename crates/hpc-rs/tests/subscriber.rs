//! `init()` leaves an application's own `tracing` subscriber in place (and does not
//! panic), and the SDK's warnings reach it.
#![cfg(feature = "topology")]

mod common;

#[test]
fn an_application_subscriber_is_kept() {
    let buf = common::Buffer::install_warn();
    // More threads than this machine has cores: the placement warns (oversubscribed).
    let ctx = hpc_rs::init_with(hpc_rs::Options {
        threads: Some(4096),
        bind: Some(false),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(ctx.world.size(), 1);
    assert!(!ctx.bound);
    let seen = buf.text();
    assert!(seen.contains("oversubscribed"), "{seen:?}");
}
