//! Sizes and timeouts given to the runtime's public API that no job or clock
//! has: refused by name where they are given, not a panic or an abort later.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hpc_runtime::{Config, Coordinator, Error, World, MAX_JOB_RANKS};

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// `Coordinator::start(usize::MAX, …)` said `Ok` and its thread panicked
/// ("capacity overflow"); `2^40` ranks aborted the process ("memory
/// allocation of 4398046511104 bytes failed"). Both are refused at the start,
/// naming the size (a size within it whose records exceed the memory
/// available is refused by that, not written on credit); a small job still
/// starts.
#[test]
fn a_job_no_coordinator_can_hold_is_refused_at_its_start() {
    for size in [usize::MAX, 1 << 40, MAX_JOB_RANKS + 1] {
        match Coordinator::start(size, 1, Duration::from_secs(1), LO) {
            Err(Error::InvalidArgument(why)) => {
                assert!(why.contains(&format!("a job of {size} ranks")), "{why}")
            }
            Err(e) => panic!("{size}: {e}"),
            Ok(_) => panic!("{size} ranks taken"),
        }
    }
    Coordinator::start(2, 1, Duration::from_secs(1), LO).unwrap();
}

/// A timeout of `Duration::MAX` panicked where a deadline was computed
/// ("overflow when adding duration to instant"): in the coordinator's thread
/// (the start said `Ok`, and gave its ranks an `HPC_TIMEOUT` they refuse), and
/// in the caller's own `World::init_with` for `Config::timeout`; 0 failed at
/// the first socket ("cannot set a 0 duration timeout"). Each is refused by
/// name.
#[test]
fn timeouts_no_clock_reaches_are_refused_where_they_are_given() {
    for t in [
        Duration::MAX,
        Duration::ZERO,
        Duration::from_secs(8 * 86400),
    ] {
        let e = Coordinator::start(1, 1, t, LO).map(|_| ()).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument(why) if why.contains("the coordinator's timeout")),
            "{t:?}: {e}"
        );
    }
    let coord = Coordinator::start(1, 0xc0, Duration::from_secs(5), LO).unwrap();
    let env: HashMap<String, String> = coord
        .rank_env(0)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain([(hpc_env::SECRET.to_string(), "c0".to_string())])
        .collect();
    for t in [Duration::MAX, Duration::ZERO] {
        let mut config = Config::from_map(env.clone()).unwrap();
        config.timeout = t;
        let e = World::init_with(config).map(|_| ()).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument(why) if why.contains("Config::timeout")),
            "{t:?}: {e}"
        );
    }
    let world = World::init_with(Config::from_map(env).unwrap()).unwrap();
    world.barrier().unwrap();
}

/// The join carries the rank and the size as 32-bit numbers: `HPC_SIZE` of
/// 2^32 + 1 was said to the launcher as 1, and refused only by the welcome
/// ("protocol error: welcome lists 1 ranks, expected 4294967297"). A size
/// beyond what a job has is refused naming the variable, before anything is
/// sent.
#[test]
fn a_size_beyond_what_a_job_has_is_refused_naming_the_variable() {
    for size in ["4294967297", "18446744073709551615"] {
        let env: HashMap<String, String> = [
            (hpc_env::RANK, "0"),
            (hpc_env::SIZE, size),
            (hpc_env::RENDEZVOUS, "127.0.0.1:1"),
            (hpc_env::SECRET, "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let e = World::init_with(Config::from_map(env).unwrap())
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!(
                "HPC_SIZE={size} is more than the 2147483647 ranks"
            )),
            "{e}"
        );
    }
}
