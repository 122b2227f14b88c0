//! What the multi-process test binaries share: each re-executes itself as the
//! ranks of a job (its `child_entry` test) and as the proxy (its `proxy_entry`
//! test), the scenario named in the ranks' environment.

use hpc_test_support::Job;

/// The variable that names a rank's scenario.
pub const SCENARIO: &str = hpc_runtime::env::COLL_TEST_SCENARIO;
/// What a rank prints (to stderr) when its scenario ran to its end.
pub const CHILD_OK: &str = hpc_test_support::CHILD_OK;
/// The engines with the ranks' own path (and the proxy's).
pub const ENGINES: [hpc_comm::Engine; 3] = [
    hpc_comm::Engine::Inline,
    hpc_comm::Engine::Thread,
    hpc_comm::Engine::Proxy,
];

/// `size` ranks of this test binary running `scenario`, whose proxies (in
/// either placement) are this binary's `proxy_entry`; their standard output
/// discarded. The staging bound is the default whatever the environment of
/// the tests says (a test may set another after): the scenarios assume it
/// (a small message copied out at once), and `HPC_STAGE_MAX=0` in a
/// developer's environment, a valid setting (no staging), failed two of them.
pub fn job(scenario: &str, size: usize) -> Job {
    let exe = std::env::current_exe().unwrap();
    let proxy_cmd = format!(
        "{} proxy_entry --exact --nocapture --test-threads=1",
        exe.display()
    );
    Job::this_test("child_entry", size)
        .env(SCENARIO, scenario)
        .env(hpc_runtime::env::COLL_PROXY_CMD, &proxy_cmd)
        .env(
            hpc_runtime::env::STAGE_MAX,
            &hpc_comm::DEFAULT_STAGE_MAX.to_string(),
        )
        .quiet_stdout()
}

/// Runs `scenario` on `size` ranks over `nodes` nodes, with a communicator
/// timeout of `timeout_s` seconds and `env` set for every rank (and so for
/// the proxies they start); fails naming every rank that did not end its
/// scenario. (`engines.rs` checks its jobs' outputs its own way.)
#[allow(dead_code)]
pub fn run(scenario: &str, size: usize, nodes: usize, timeout_s: u64, env: &[(&str, &str)]) {
    let t = std::time::Instant::now();
    let outs = job(scenario, size)
        .timeout(std::time::Duration::from_secs(timeout_s))
        .nodes(nodes)
        .envs(env)
        .run();
    let failed = hpc_test_support::failures(&outs);
    assert!(
        failed.is_empty(),
        "{scenario} on {size} ranks: {}",
        failed.join("\n")
    );
    eprintln!("{scenario} x{size} on {nodes} nodes: {:?}", t.elapsed());
}

/// The scenario this process runs as a rank of a job (its `child_entry`), with
/// its world; `None` in a normal test run, where `child_entry` returns at once.
pub fn rank_scenario() -> Option<(String, hpc_runtime::World)> {
    let scenario = std::env::var(SCENARIO).ok()?;
    Some((scenario, hpc_runtime::World::init().unwrap()))
}
