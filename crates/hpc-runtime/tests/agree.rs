//! `World::same_on_every_rank` across the ranks of a job (threads of this
//! process, each joined to one coordinator).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hpc_runtime::{Config, Coordinator, Error, World};

/// Runs `size` ranks, rank r giving `values(r)`, and returns each rank's
/// outcome.
fn job(
    size: usize,
    values: impl Fn(usize) -> Vec<(&'static str, String)> + Sync,
) -> Vec<Result<(), Error>> {
    let coord = Coordinator::start(
        size,
        0x5a,
        Duration::from_secs(10),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
    )
    .unwrap();
    let out = std::thread::scope(|s| {
        let handles: Vec<_> = (0..size)
            .map(|r| {
                let env: HashMap<String, String> = coord
                    .rank_env(r)
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .chain([(hpc_env::SECRET.to_string(), "5a".to_string())])
                    .collect();
                let values = &values;
                s.spawn(move || {
                    let world = World::init_with(Config::from_map(env).unwrap()).unwrap();
                    world.same_on_every_rank("flags", &values(r))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    coord.shutdown();
    out
}

/// Every rank fails with one message naming the lowest rank that differs and
/// what differs (fft3d's ranks given another `--mode`, brunel's another seed:
/// rank 0 reported its own for all of them); ranks that agree pass.
#[test]
fn ranks_given_other_values_all_fail_naming_the_lowest_and_what() {
    let outs = job(4, |r| {
        vec![
            ("--n", "8".to_string()),
            (
                "--mode",
                if r >= 2 {
                    "\"blocking\""
                } else {
                    "\"overlap\""
                }
                .to_string(),
            ),
        ]
    });
    for (rank, o) in outs.iter().enumerate() {
        match o {
            Err(e @ Error::NotTheSame { rank: 2, .. }) => assert_eq!(
                e.to_string(),
                "rank 2 was given other flags than rank 0 (--mode \"overlap\" -> \"blocking\": \
                 rank 0 -> rank 2): every rank of a job must be given the same flags",
                "rank {rank}"
            ),
            other => panic!("rank {rank}: {other:?}"),
        }
    }
    for o in job(3, |_| vec![("--n", "8".to_string())]) {
        o.unwrap();
    }
}
