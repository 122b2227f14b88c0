//! A node's placement warnings are said once, by its first rank, not once per rank.

use hpc_test_support::{text, Job};

#[test]
fn oversubscription_is_reported_once_per_node() {
    // 64 threads for each of 3 ranks: more than any test machine has cores.
    let outs = Job::program(env!("CARGO_BIN_EXE_hello"), &[], 3)
        .env("HPC_THREADS", "64")
        .run();
    let mut said = 0;
    for (r, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "rank {r}: {}", text(o));
        let err = String::from_utf8_lossy(&o.stderr);
        let n = err.matches("oversubscribed").count();
        if n > 0 {
            assert_eq!(r, 0, "only the node's first rank warns: {err}");
            assert!(
                err.contains("3 ranks x 64 threads)"),
                "no progress core was asked for: {err}"
            );
        }
        said += n;
    }
    assert_eq!(said, 1, "{outs:?}");
}
