//! Multi-process tests of the engines: this test binary re-executes itself as
//! the ranks of a job (and as the proxy), started by hand against an
//! `hpc_runtime::Coordinator`. The child's role is chosen by environment
//! variables; `child_entry` and `proxy_entry` do nothing in a normal run.
//! A rank counts as successful only if it exits with 0 *and* printed
//! [`CHILD_OK`] at the end of its scenario: a child that ran no test (a
//! renamed entry point, a filter that matches nothing) exits with 0 too.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

// Every collective `Comm` offers, each rank's inputs and the simulator's
// reference: the conformance suite's, which `hpc selftest --every-algorithm` runs
// on real jobs.
use hpc_comm::conformance::{collectives, inputs, reference};
use hpc_comm::{Comm, CommOptions, Engine, Error, ReduceOp, SharedBuf};
use hpc_runtime::World;
use hpc_test_support::ok;

mod common;
use common::{CHILD_OK, ENGINES};

/// Runs `scenario` on `size` ranks on `nodes` emulated nodes, rank r on node
/// `r % nodes` (interleaved, so a node's ranks are not contiguous: ranks on
/// different nodes reach each other only through the network path); returns
/// each rank's (success, stderr), success being exit status 0 and the
/// [`CHILD_OK`] marker.
fn job_on_nodes(
    scenario: &str,
    size: usize,
    nodes: usize,
    timeout_s: f64,
    env: &[(&str, &str)],
) -> Vec<(bool, String)> {
    common::job(scenario, size)
        .timeout(Duration::from_secs_f64(timeout_s))
        .nodes(nodes)
        // Every collective of the Proxy engine goes to the proxy unless a
        // test asks for the host path of small ones.
        .env("HPC_PROXY_MIN", "0")
        // And the proxy makes every copy, as on a node with a core for it,
        // unless a test asks the ranks to make their own.
        .env("HPC_PROXY_OWN_COPIES", "0")
        .envs(env)
        .run()
        .into_iter()
        .map(|o| (ok(&o), String::from_utf8_lossy(&o.stderr).into_owned()))
        .collect()
}

fn all_ok(scenario: &str, size: usize) {
    all_ok_with(scenario, size, 20.0, &[]);
}

/// Like [`all_ok`] with a timeout and variables of its own.
fn all_ok_with(scenario: &str, size: usize, timeout_s: f64, env: &[(&str, &str)]) {
    let what = format!("{scenario} on {size} ranks");
    all_ok_on(&what, scenario, size, 1, timeout_s, env);
}

/// Runs `scenario` as [`job_on_nodes`] does and fails, after `what`, with
/// every failed rank's output: the first to fail is not always the first rank.
fn all_ok_on(
    what: &str,
    scenario: &str,
    size: usize,
    nodes: usize,
    timeout_s: f64,
    env: &[(&str, &str)],
) {
    let t = Instant::now();
    let failed: Vec<String> = job_on_nodes(scenario, size, nodes, timeout_s, env)
        .into_iter()
        .enumerate()
        .filter(|(_, (ok, _))| !ok)
        .map(|(r, (_, err))| format!("rank {r} failed:\n{err}"))
        .collect();
    assert!(failed.is_empty(), "{what}: {}", failed.join("\n"));
    eprintln!("{what}: {:?}", t.elapsed());
}

/// The `kill` scenario on 3 ranks on `nodes` nodes with `env`: every rank
/// but rank 1, which is killed, names it (`what` leads each failure).
fn killed_rank_is_named_by_the_others(what: &str, nodes: usize, env: &[(&str, &str)]) {
    for (r, (ok, err)) in job_on_nodes("kill", 3, nodes, 20.0, env).iter().enumerate() {
        if r != 1 {
            assert!(ok, "{what}rank {r}: {err}");
            assert!(err.contains("rank 1 is lost"), "{what}rank {r}: {err}");
        }
    }
}

#[test]
fn proxy_entry() {
    // In a normal run the variable is unset and this returns at once.
    hpc_comm::proxy::serve_env().unwrap();
}

#[test]
fn child_entry() {
    let Some((s, world)) = common::rank_scenario() else {
        return;
    };
    let rank = world.rank();
    match s.as_str() {
        "correct" => correct(&world),
        "stress" => stress(&world),
        "big" => big(&world),
        "kill" => kill(&world),
        "kill_split" => kill_split(&world),
        "mixed_engines" => mixed_engines(&world),
        "count_split" => count_split(&world),
        "stopped" => stopped(&world),
        "mismatch" => mismatch(&world),
        "proxy_sizes" => proxy_sizes(&world),
        "disagree" => disagree(&world),
        "safety" => safety(&world),
        "staging" => staging(&world),
        "progress" => progress(&world),
        "proxy_death" => proxy_death(&world),
        "proxy_absent" => absent(&world, CommOptions::new(Engine::Proxy), 2),
        "proxy_never_serves" => never_serves(&world),
        "custom_op" => custom_op(&world),
        // Rank 1 of 3 on 2 nodes: alone on node 1.
        "proxy_absent_away" => absent(&world, CommOptions::new(Engine::Proxy), 1),
        "dpu_absent" => absent(&world, dpu::options(), 2),
        "nodes" => across_nodes(&world),
        "proxy_nodes" => proxy_across_nodes(&world),
        "proxy_node_death" => proxy_node_death(&world),
        "shared" => shared(&world),
        "no_cma" => no_cross_memory_attach(&world),
        "proxy_memory" => proxy_memory(&world),
        "proxy_memory_bad_cap" => proxy_memory_bad_cap(&world),
        "dpu_correct" => dpu::correct(&world),
        "dpu_isolated" => dpu::isolated(&world),
        "dpu_proxy_death" => dpu::proxy_death(&world),
        "dpu_refusals" => dpu::refusals(&world),
        "dpu_no_proxy" => dpu::no_proxy(&world),
        "dpu_registered" => dpu::registered(&world),
        "dpu_node_death" => dpu::node_death(&world),
        "dpu_cancel" => dpu::cancel(&world),
        "dpu_split" => dpu::split(&world),
        "dpu_split_death" => dpu::split_death(&world),
        o => panic!("unknown scenario {o}"),
    }
    eprintln!("{CHILD_OK} rank {rank} {s}");
}

fn val(r: usize, i: usize) -> i64 {
    (r * 1000 + i) as i64
}

/// Every collective through every engine against the obvious reference.
fn correct(world: &World) {
    // The Proxy engine with its host path for blocks under 1000 bytes: the
    // sizes of `check_all` fall on both sides.
    let mut hybrid = CommOptions::new(Engine::Proxy);
    hybrid.proxy_min = Some(1000);
    // With the ranks' own blocks copied by the ranks, as on a node without a
    // core for the proxy.
    hybrid.own_copies = Some(true);
    let hybrid = Comm::with_options(world, hybrid).unwrap();
    assert!(
        hybrid.progress_note().contains("1000 bytes"),
        "{}",
        hybrid.progress_note()
    );
    check_all(&hybrid, Engine::Proxy);
    // Outstanding on both paths at once, waited for in the other order.
    let small = vec![hybrid.rank() as u64; 10];
    let big = vec![hybrid.rank() as u64; 1000];
    let (mut rs, mut rb) = (vec![0u64; 10], vec![0u64; 1000]);
    let n = hybrid.size() as u64;
    let r1 = hybrid.iallreduce(&big, &mut rb, ReduceOp::Sum).unwrap();
    let r2 = hybrid.iallreduce(&small, &mut rs, ReduceOp::Sum).unwrap();
    r2.wait().unwrap();
    r1.wait().unwrap();
    assert_eq!((rs[9], rb[999]), (n * (n - 1) / 2, n * (n - 1) / 2));
    drop(hybrid);
    for engine in ENGINES {
        let comm = Comm::new(world, engine).unwrap();
        check_all(&comm, engine);
        // Several outstanding at once, and a sub-communicator.
        let sub = comm
            .split((comm.rank() % 2) as u32, -(comm.rank() as i64))
            .unwrap();
        let expect_sub: Vec<usize> = (0..comm.size())
            .filter(|r| r % 2 == comm.rank() % 2)
            .rev()
            .collect();
        assert_eq!(sub.size(), expect_sub.len());
        assert_eq!(sub.world_rank(sub.rank()), comm.rank());
        let a = vec![comm.rank() as i64; 3];
        let mut ra = vec![0i64; 3];
        let b = vec![1.0f32; 5];
        let mut rb = vec![0.0f32; 5];
        let sa = vec![comm.rank() as u32; 2];
        let mut rsa = vec![0u32; 2 * sub.size()];
        let r1 = comm.iallreduce(&a, &mut ra, ReduceOp::Sum).unwrap();
        let r2 = sub.iallreduce(&b, &mut rb, ReduceOp::Sum).unwrap();
        let r3 = sub.iallgather(&sa, &mut rsa).unwrap();
        hpc_comm::Request::wait_all([r3, r2, r1]).unwrap();
        let n = comm.size() as i64;
        assert_eq!(ra, vec![n * (n - 1) / 2; 3]);
        assert_eq!(rb, vec![sub.size() as f32; 5]);
        let want: Vec<u32> = expect_sub.iter().flat_map(|&r| [r as u32; 2]).collect();
        assert_eq!(rsa, want, "{engine:?}");
        // f16 and ndarray buffers.
        let h = vec![half::f16::from_f32(1.5); 4];
        let mut rh = vec![half::f16::ZERO; 4];
        comm.allreduce(&h, &mut rh, ReduceOp::Max).unwrap();
        assert_eq!(rh[0].to_f32(), 1.5);
        let arr = ndarray::Array2::<f64>::from_elem((2, 3), comm.rank() as f64);
        let mut out = ndarray::Array2::<f64>::zeros((2, 3));
        comm.allreduce(&arr, &mut out, ReduceOp::Sum).unwrap();
        assert_eq!(out[[1, 2]], (n * (n - 1) / 2) as f64);
        let t = arr.t();
        assert!(matches!(
            comm.allreduce(&t, &mut out, ReduceOp::Sum),
            Err(Error::NotContiguous)
        ));
    }
}

fn check_all(comm: &Comm, engine: Engine) {
    let (me, n) = (comm.rank(), comm.size());
    for count in [0usize, 1, 7, 300] {
        let ctx = format!("{engine:?} count {count} rank {me}/{n}");
        let send: Vec<i64> = (0..count).map(|i| val(me, i)).collect();
        // allgather
        let mut recv = vec![0i64; count * n];
        comm.iallgather(&send, &mut recv).unwrap().wait().unwrap();
        let want: Vec<i64> = (0..n)
            .flat_map(|r| (0..count).map(move |i| val(r, i)))
            .collect();
        assert_eq!(recv, want, "allgather {ctx}");
        // zero-copy through a scope
        let mut recv2 = vec![0i64; count * n];
        comm.scope(|s| s.iallgather(&send, &mut recv2)?.wait())
            .unwrap();
        assert_eq!(recv2, want, "scoped allgather {ctx}");
        // allgatherv: rank r gives r+count%3 elements
        let counts: Vec<usize> = (0..n).map(|r| r + count % 3).collect();
        let mine: Vec<i64> = (0..counts[me]).map(|i| val(me, i)).collect();
        let mut recv = vec![0i64; counts.iter().sum()];
        comm.allgatherv(&mine, &mut recv, &counts).unwrap();
        let want: Vec<i64> = (0..n)
            .flat_map(|r| (0..counts[r]).map(move |i| val(r, i)))
            .collect();
        assert_eq!(recv, want, "allgatherv {ctx}");
        // alltoall: block j of rank i = val(i, j*count + k)
        let send_a: Vec<i64> = (0..n * count).map(|i| val(me, i)).collect();
        let mut recv = vec![0i64; n * count];
        comm.ialltoall(&send_a, &mut recv).unwrap().wait().unwrap();
        let want: Vec<i64> = (0..n)
            .flat_map(|i| (0..count).map(move |k| val(i, me * count + k)))
            .collect();
        assert_eq!(recv, want, "alltoall {ctx}");
        // alltoallv: rank i sends (i + j) % 3 + count elements to j
        let sc: Vec<usize> = (0..n).map(|j| (me + j) % 3 + count).collect();
        let rc: Vec<usize> = (0..n).map(|i| (i + me) % 3 + count).collect();
        let sendv: Vec<i64> = (0..sc.iter().sum()).map(|i| val(me, i)).collect();
        let mut recv = vec![0i64; rc.iter().sum()];
        comm.ialltoallv(&sendv, &sc, &mut recv, &rc)
            .unwrap()
            .wait()
            .unwrap();
        let mut want = Vec::new();
        for (i, &c) in rc.iter().enumerate() {
            let off: usize = (0..me).map(|j| (i + j) % 3 + count).sum();
            want.extend((0..c).map(|k| val(i, off + k)));
        }
        assert_eq!(recv, want, "alltoallv {ctx}");
        // allreduce / reduce / reduce_scatter
        let mut recv = vec![0i64; count];
        comm.iallreduce(&send, &mut recv, ReduceOp::Sum)
            .unwrap()
            .wait()
            .unwrap();
        let want: Vec<i64> = (0..count)
            .map(|i| (0..n).map(|r| val(r, i)).sum())
            .collect();
        assert_eq!(recv, want, "allreduce {ctx}");
        let root = n - 1;
        let mut recv = vec![0i64; if me == root { count } else { 0 }];
        comm.ireduce(&send, &mut recv, ReduceOp::Max, root)
            .unwrap()
            .wait()
            .unwrap();
        if me == root {
            let want: Vec<i64> = (0..count).map(|i| val(n - 1, i)).collect();
            assert_eq!(recv, want, "reduce {ctx}");
        }
        let rcounts: Vec<usize> = (0..n).map(|r| count + r % 2).collect();
        let total: usize = rcounts.iter().sum();
        let sendrs: Vec<i64> = (0..total).map(|i| val(me, i)).collect();
        let mut recv = vec![0i64; rcounts[me]];
        comm.ireduce_scatter(&sendrs, &mut recv, &rcounts, ReduceOp::Sum)
            .unwrap()
            .wait()
            .unwrap();
        let off: usize = rcounts[..me].iter().sum();
        let want: Vec<i64> = (0..rcounts[me])
            .map(|k| (0..n).map(|r| val(r, off + k)).sum())
            .collect();
        assert_eq!(recv, want, "reduce_scatter {ctx}");
        // bcast / gather / scatter
        let root = count % n;
        let mut buf: Vec<i64> = if me == root {
            (0..count).map(|i| val(root, i)).collect()
        } else {
            vec![0; count]
        };
        comm.ibcast(&mut buf, root).unwrap().wait().unwrap();
        assert_eq!(
            buf,
            (0..count).map(|i| val(root, i)).collect::<Vec<_>>(),
            "bcast {ctx}"
        );
        let mut recv = vec![0i64; if me == root { n * count } else { 0 }];
        comm.igather(&send, &mut recv, root)
            .unwrap()
            .wait()
            .unwrap();
        if me == root {
            let want: Vec<i64> = (0..n)
                .flat_map(|r| (0..count).map(move |i| val(r, i)))
                .collect();
            assert_eq!(recv, want, "gather {ctx}");
        }
        let sends: Vec<i64> = if me == root {
            (0..n * count).map(|i| val(root, i)).collect()
        } else {
            Vec::new()
        };
        let mut recv = vec![0i64; count];
        comm.iscatter(&sends, &mut recv, root)
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(
            recv,
            (0..count)
                .map(|i| val(root, me * count + i))
                .collect::<Vec<_>>(),
            "scatter {ctx}"
        );
        comm.ibarrier().unwrap().wait().unwrap();
    }
}

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Hundreds of back-to-back collectives of random sizes (same sequence on
/// every rank), two outstanding at a time; memory must stay flat.
fn stress(world: &World) {
    for engine in [Engine::Thread, Engine::Inline] {
        let comm = Comm::new(world, engine).unwrap();
        let n = comm.size();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut base = 0;
        for it in 0..300 {
            if it == 50 {
                base = rss_kib();
            }
            let count = (rnd() % 2000) as usize;
            let send = vec![comm.rank() as u32 + 1; count];
            let mut r1 = vec![0u32; count];
            let s2 = vec![it as u16; count * n];
            let mut r2 = vec![0u16; count * n];
            let a = comm.iallreduce(&send, &mut r1, ReduceOp::Sum).unwrap();
            let b = comm.ialltoall(&s2, &mut r2).unwrap();
            b.wait().unwrap();
            a.wait().unwrap();
            assert!(r1.iter().all(|&v| v as usize == n * (n + 1) / 2));
            assert!(r2.iter().all(|&v| v == it as u16));
        }
        let grown = rss_kib().saturating_sub(base);
        assert!(grown < 16 * 1024, "{engine:?}: VmRSS grew by {grown} KiB");
    }
}

/// Many ranks: an allreduce and an alltoall.
fn big(world: &World) {
    let comm = Comm::new(world, Engine::Thread).unwrap();
    let n = comm.size();
    let mut r = vec![0u64; 4];
    comm.allreduce(&[1u64; 4], &mut r, ReduceOp::Sum).unwrap();
    assert_eq!(r, vec![n as u64; 4]);
    let send: Vec<u32> = (0..n as u32).collect();
    let mut recv = vec![0u32; n];
    comm.alltoall(&send, &mut recv).unwrap();
    assert_eq!(recv, vec![comm.rank() as u32; n]);
}

/// Every collective through the engines that span nodes, a split within and
/// across nodes (the Proxy engine's own test is [`proxy_across_nodes`]).
fn across_nodes(world: &World) {
    assert!(world.node_count() > 1 || world.size() == 1);
    for engine in [Engine::Inline, Engine::Thread] {
        let comm = Comm::new(world, engine).unwrap();
        if world.size() > 1 {
            assert!(
                comm.progress_note().contains("other nodes over tcp"),
                "{}",
                comm.progress_note()
            );
        }
        check_all(&comm, engine);
        // Split by node (each sub-communicator within one node) and by parity
        // (across nodes when there are more than two ranks), both at once.
        let by_node = comm.split(world.node() as u32, 0).unwrap();
        let by_parity = comm.split((comm.rank() % 2) as u32, 0).unwrap();
        let a = vec![1u64; 100];
        let mut ra = vec![0u64; 100];
        let mut rb = vec![0u64; 100];
        let r1 = by_node.iallreduce(&a, &mut ra, ReduceOp::Sum).unwrap();
        let r2 = by_parity.iallreduce(&a, &mut rb, ReduceOp::Sum).unwrap();
        hpc_comm::Request::wait_all([r1, r2]).unwrap();
        assert_eq!(ra, vec![world.local_size() as u64; 100]);
        assert_eq!(rb, vec![by_parity.size() as u64; 100]);
        check_all(&by_parity, engine);
        split_unevenly(&comm);
    }
}

/// A split of `comm` into its last rank and the others, whose groups take
/// different set-ups (with 3 ranks or more on 2 nodes or more, the others span
/// nodes and the last rank is alone): an allreduce on each.
fn split_unevenly(comm: &Comm) {
    let (me, n) = (comm.rank(), comm.size());
    let sub = comm.split(u32::from(me + 1 == n), 0).unwrap();
    let mut r = [0u64; 4];
    sub.allreduce(&[1u64; 4], &mut r, ReduceOp::Sum).unwrap();
    let want = if me + 1 == n { 1 } else { n as u64 - 1 };
    assert_eq!(r, [want; 4], "{:?} rank {me}", comm.engine());
}

/// Starts `coll` on `comm` through its public call.
fn start<'a>(
    comm: &'a Comm,
    coll: &hpc_collectives::Collective,
    send: &'a [i64],
    recv: &'a mut [i64],
) -> hpc_comm::Request<'a> {
    hpc_comm::conformance::start(comm, coll, send, recv).unwrap()
}

/// The Proxy engine across nodes: every collective with every algorithm that
/// has a schedule for it, against the simulator; the typed checks of
/// [`check_all`]; several collectives in flight at once; a split across and
/// within nodes.
fn proxy_across_nodes(world: &World) {
    let n = world.size();
    let mut checked = 0;
    for alg in hpc_collectives::Algorithm::ALL {
        let mut opts = CommOptions::new(Engine::Proxy);
        opts.schedule = hpc_collectives::Options::with_algorithm(alg);
        let comm = Comm::with_options(world, opts.clone()).unwrap();
        if world.node_count() > 1 {
            assert!(
                comm.progress_note()
                    .contains("other nodes through the proxies over"),
                "{}",
                comm.progress_note()
            );
        }
        let me = comm.rank();
        if me == 0 && alg == hpc_collectives::Algorithm::Auto {
            eprintln!("NOTE {}", comm.progress_note());
        }
        // Blocks of a few elements for every algorithm, and larger ones (several
        // pieces of the proxy's copies) for the default selection.
        let counts: &[usize] = if alg == hpc_collectives::Algorithm::Auto {
            &[5, 20_000]
        } else {
            &[5]
        };
        for &c in counts {
            let colls = collectives(me, n, c);
            for (i, coll) in colls.iter().enumerate() {
                let Some(want) = reference(i, c, me, n, &opts.schedule) else {
                    continue;
                };
                let (send, mut recv) = inputs(coll, me, n);
                start(&comm, coll, &send, &mut recv).wait().unwrap();
                assert!(
                    recv == want,
                    "{} with {alg}, {c} elements, rank {me} of {n}",
                    coll.kind()
                );
                checked += 1;
            }
        }
        if alg != hpc_collectives::Algorithm::Auto {
            continue;
        }
        check_all(&comm, Engine::Proxy);
        // Every collective in flight at once, waited for in reverse order: the
        // proxies match by (collective, step), not by arrival.
        let colls = collectives(me, n, 700);
        let mut bufs: Vec<(Vec<i64>, Vec<i64>)> = colls.iter().map(|c| inputs(c, me, n)).collect();
        let reqs: Vec<_> = colls
            .iter()
            .zip(bufs.iter_mut())
            .map(|(coll, (send, recv))| start(&comm, coll, send, recv))
            .collect();
        for r in reqs.into_iter().rev() {
            r.wait().unwrap();
        }
        for (i, (_, recv)) in bufs.iter().enumerate() {
            let want = reference(i, 700, me, n, &opts.schedule).unwrap();
            assert!(
                *recv == want,
                "{} in flight with the others, rank {me}",
                colls[i].kind()
            );
        }
        // Sub-communicators by node (within one) and by parity (across nodes
        // when there are more than two ranks), both at once.
        let by_node = comm.split(world.node() as u32, 0).unwrap();
        let by_parity = comm.split((me % 2) as u32, 0).unwrap();
        let a = vec![1u64; 100];
        let (mut ra, mut rb) = (vec![0u64; 100], vec![0u64; 100]);
        let r1 = by_node.iallreduce(&a, &mut ra, ReduceOp::Sum).unwrap();
        let r2 = by_parity.iallreduce(&a, &mut rb, ReduceOp::Sum).unwrap();
        hpc_comm::Request::wait_all([r1, r2]).unwrap();
        assert_eq!(ra, vec![world.local_size() as u64; 100]);
        assert_eq!(rb, vec![by_parity.size() as u64; 100]);
        split_unevenly(&comm);
        // Shared buffers, which the proxy maps, to and from other nodes.
        let count = 3000;
        let send =
            SharedBuf::from_slice(&(0..n * count).map(|i| val(me, i)).collect::<Vec<_>>()).unwrap();
        let mut recv = SharedBuf::<i64>::new(n * count).unwrap();
        comm.scope(|s| s.ialltoall(&send, &mut recv)?.wait())
            .unwrap();
        let want: Vec<i64> = (0..n)
            .flat_map(|i| (0..count).map(move |k| val(i, me * count + k)))
            .collect();
        assert_eq!(&recv[..], &want[..], "shared alltoall rank {me}");
    }
    // With the ranks' own blocks copied by the ranks (as on a node without a
    // core for the proxy), the proxies skipping those steps.
    let mut own = CommOptions::new(Engine::Proxy);
    own.own_copies = Some(true);
    check_all(&Comm::with_options(world, own).unwrap(), Engine::Proxy);
    // Every collective with the default selection (twice) and with at least
    // one forced algorithm each, most with several.
    assert!(checked >= 2 * 11 + 11, "{checked} checked");
    eprintln!("{checked} collectives checked against the simulator");
}

/// The children of this process (the proxy, for the rank that started it).
fn children() -> Vec<i32> {
    let me = std::process::id();
    std::fs::read_dir(format!("/proc/{me}/task"))
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .map(|p| p.parse::<i32>().unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The proxy of node 1 is killed (SIGKILL, by the rank that started it) while
/// node 0's ranks are in a collective that waits for node 1: node 1's ranks
/// fail naming the proxy, node 0's naming node 1, well within the timeout.
/// Each rank prints its pid and the node's proxy's pid (`PIDS`) for the test
/// to check that nothing is left behind.
fn proxy_node_death(world: &World) {
    let mut opts = CommOptions::new(Engine::Proxy);
    opts.timeout = Some(Duration::from_secs(10));
    node_death_with(world, Comm::with_options(world, opts).unwrap());
}

/// The body of the killed-proxy scenarios, host or DPU placement alike: node
/// 1's first rank kills its node's proxy (its one child) while node 0 waits in
/// an alltoall for node 1.
fn node_death_with(world: &World, comm: Comm) {
    let me = comm.rank();
    let proxy = if me < 2 { children() } else { Vec::new() };
    eprintln!("PIDS {} {proxy:?}", std::process::id());
    let n = comm.size();
    let send = vec![1u8; 65536 * n];
    let mut recv = vec![0u8; 65536 * n];
    comm.alltoall(&send, &mut recv).unwrap();
    world.barrier().unwrap();
    let t0 = Instant::now();
    if world.node() == 1 {
        // Node 0 is in the alltoall below by now, waiting for node 1.
        std::thread::sleep(Duration::from_millis(300));
        if me == 1 {
            assert_eq!(proxy.len(), 1, "one child, the proxy: {proxy:?}");
            // SAFETY: plain kill(2) of our own child.
            assert_eq!(unsafe { libc::kill(proxy[0], libc::SIGKILL) }, 0);
        } else {
            std::thread::sleep(Duration::from_millis(300));
        }
        let err = comm.alltoall(&send, &mut recv).unwrap_err();
        assert!(matches!(err, Error::Stopped("proxy")), "{err}");
        eprintln!("OK: {err} after {:?}", t0.elapsed());
    } else {
        let err = comm
            .ialltoall(&send, &mut recv)
            .unwrap()
            .wait()
            .unwrap_err();
        assert!(matches!(err, Error::NodeLost { node: 1 }), "{err}");
        eprintln!("OK: {err} after {:?}", t0.elapsed());
        // And at once for the next one.
        let err = comm.barrier().unwrap_err();
        assert!(matches!(err, Error::NodeLost { node: 1 }), "{err}");
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

/// Rank 1 dies after posting; the others' wait names it.
fn kill(world: &World) {
    let engine: Engine = std::env::var("HPC_COLL_TEST_ENGINE")
        .unwrap()
        .parse()
        .unwrap();
    let mut opts = CommOptions::new(engine);
    opts.timeout = Some(Duration::from_secs(10));
    let comm = Comm::with_options(world, opts).unwrap();
    let n = comm.size();
    comm.barrier().unwrap();
    let send = vec![1u8; 4096 * n];
    let mut recv = vec![0u8; 4096 * n];
    let mut r = [0u8; 4096];
    // A first collective that completes, then one rank 1 abandons.
    comm.allreduce(&[1u8; 4096], &mut r, ReduceOp::Sum).unwrap();
    if comm.rank() == 1 {
        std::thread::sleep(Duration::from_millis(50));
        std::process::exit(3);
    }
    let err = comm
        .ialltoall(&send, &mut recv)
        .unwrap()
        .wait()
        .unwrap_err();
    // RankLost, not Timeout: the death was detected, not waited out.
    assert!(
        matches!(err, Error::RankLost { rank: 1 }),
        "{engine:?}: {err}"
    );
    eprintln!("OK: {err}");
    // Rank 1 is known lost here: a small send to it fails naming it (it was
    // copied out and returned `Ok`, the message lost without a word), and
    // so does a bcast whose root and receivers are alive, on every engine
    // alike (it succeeded under Inline and Thread, failed under Proxy).
    let err = comm.send(&[7u8; 4], 1, 5).unwrap_err();
    assert!(
        matches!(err, Error::RankLost { rank: 1 }),
        "{engine:?}: send to the lost rank: {err}"
    );
    let mut b = [comm.rank() as u8; 16];
    let err = comm.bcast(&mut b, 0).unwrap_err();
    assert!(
        matches!(err, Error::RankLost { rank: 1 }),
        "{engine:?}: bcast after the loss: {err}"
    );
    // The survivors' own messages still go.
    let other = 2 - comm.rank();
    let mut got = [0u8; 4];
    comm.sendrecv(&[comm.rank() as u8; 4], other, 6, &mut got, other, 6)
        .unwrap();
    assert_eq!(got, [other as u8; 4], "{engine:?}");
    // Stay a moment, so that the other survivors see rank 1 gone before this one
    // (a rank on the same node is seen exiting faster than one across the network).
    std::thread::sleep(Duration::from_millis(300));
    eprintln!("{CHILD_OK} rank {} kill", world.rank());
    std::process::exit(0);
}

/// The `kill` scenario in a split communicator whose ranks are not the
/// world's: world ranks 1, 2, 3 form it as its ranks 0, 1, 2 (world rank 0
/// alone in its own); world rank 2, its rank 1, exits. Every engine names
/// the lost member by its rank in the world (`Comm::world_rank`), as the
/// errors' text says, in its collective, its send and its receive; a send
/// to the lost member fails and one to the living member 2 (world rank 3)
/// goes. (The host proxy named its rank in the communicator, 1, the other
/// engines its world rank, 2; and under `Inline` and `Thread` on one node
/// the record of gone members took 2 for the communicator's rank: the send
/// to the lost member was `Ok`.)
fn kill_split(world: &World) {
    let engine: Engine = std::env::var("HPC_COLL_TEST_ENGINE")
        .unwrap()
        .parse()
        .unwrap();
    let mut opts = CommOptions::new(engine);
    opts.timeout = Some(Duration::from_secs(10));
    let all = Comm::with_options(world, opts).unwrap();
    let me = all.rank();
    let comm = all.split(u32::from(me != 0), me as i64).unwrap();
    if me == 0 {
        // Waits until the others are done with the lost member.
        std::thread::sleep(Duration::from_millis(2000));
        eprintln!("{CHILD_OK} rank 0 kill_split");
        std::process::exit(0);
    }
    assert_eq!((comm.size(), comm.rank()), (3, me - 1));
    assert_eq!(comm.world_rank(1), 2);
    let mut r = [0u8; 64];
    comm.allreduce(&[1u8; 64], &mut r, ReduceOp::Sum).unwrap();
    if me == 2 {
        std::thread::sleep(Duration::from_millis(50));
        std::process::exit(3);
    }
    let send = vec![1u8; 4096 * 3];
    let mut recv = vec![0u8; 4096 * 3];
    let err = comm
        .ialltoall(&send, &mut recv)
        .unwrap()
        .wait()
        .unwrap_err();
    let lost = |err: &Error| matches!(err, Error::RankLost { rank: 2 });
    assert!(lost(&err), "{engine:?}: the collective: {err}");
    let err = comm.send(&[7u8; 4], 1, 5).unwrap_err();
    assert!(lost(&err), "{engine:?}: a send to the lost member: {err}");
    let err = comm.recv(&mut [0u8; 4], 1, 9).unwrap_err();
    assert!(
        lost(&err),
        "{engine:?}: a receive from the lost member: {err}"
    );
    let err = comm.bcast(&mut [0u8; 4], 0).unwrap_err();
    assert!(lost(&err), "{engine:?}: a bcast after the loss: {err}");
    // The living members' own messages still go.
    let other = 2 - comm.rank();
    let mut got = [0u8; 4];
    comm.sendrecv(&[comm.rank() as u8; 4], other, 6, &mut got, other, 6)
        .unwrap();
    assert_eq!(got, [other as u8; 4], "{engine:?}");
    std::thread::sleep(Duration::from_millis(300));
    eprintln!("{CHILD_OK} rank {me} kill_split");
    std::process::exit(0);
}

/// Ranks that choose different engines for one communicator: `Inline` and
/// `Thread` work together; a rank with the `Proxy` engine and one without
/// it are both told so (the first read "rank 1 is lost: rank 1 finalized
/// before joining allgather", the other "transport: mapping the node's
/// board"), and the world goes on.
fn mixed_engines(world: &World) {
    let me = world.rank();
    for (a, b) in [
        (Engine::Inline, Engine::Thread),
        (Engine::Inline, Engine::Proxy),
        (Engine::Proxy, Engine::Thread),
    ] {
        let engine = if me == 0 { a } else { b };
        let mut opts = CommOptions::new(engine);
        opts.timeout = Some(Duration::from_secs(5));
        let made = Comm::with_options(world, opts);
        if a != Engine::Proxy && b != Engine::Proxy {
            let comm = made.unwrap();
            let mut r = [0u32; 4];
            comm.allreduce(&[me as u32 + 1; 4], &mut r, ReduceOp::Sum)
                .unwrap();
            assert_eq!(r, [3; 4]);
            continue;
        }
        let Err(err) = made else {
            panic!("{a:?} and {b:?}: a communicator was made")
        };
        // Refused on every rank, naming the lowest rank that differs from
        // rank 0 and the engines, before anything is built.
        let kind = |e: Engine| {
            if e == Engine::Proxy {
                "proxy"
            } else {
                "inline or thread"
            }
        };
        let want = format!(
            "rank 1 was given other communicator settings than rank 0 (engine {} -> {}",
            kind(a),
            kind(b)
        );
        assert!(
            matches!(err, Error::Runtime(_)) && err.to_string().contains(&want),
            "{a:?} and {b:?}, rank {me}: {err}"
        );
        world.barrier().unwrap();
    }
    eprintln!("{CHILD_OK} rank {me} mixed_engines");
}

/// A count mismatch in a split communicator whose ranks are not the world's
/// (world ranks 1, 2, 3 as its ranks 0, 1, 2; its rank 2's count one more):
/// the error names the other rank and the ranks of its text by their world
/// rank, as the error says, on every engine (the other rank among those its
/// text names) (on the ranks' own path its text
/// named the communicator's: "count mismatch with rank 3: rank 2 sent 40
/// bytes where 32 were expected").
fn count_split(world: &World) {
    let engine: Engine = std::env::var("HPC_COLL_TEST_ENGINE")
        .unwrap()
        .parse()
        .unwrap();
    let mut opts = CommOptions::new(engine);
    opts.timeout = Some(Duration::from_secs(5));
    let all = Comm::with_options(world, opts).unwrap();
    let me = all.rank();
    let comm = all.split(u32::from(me != 0), me as i64).unwrap();
    for count in [4usize, 5000] {
        if me != 0 {
            let c = if comm.rank() == 2 { count + 1 } else { count };
            let mut recv = vec![0i64; c];
            let err = comm
                .allreduce(&vec![1i64; c], &mut recv, ReduceOp::Sum)
                .unwrap_err();
            let Error::CountMismatch { rank, detail } = &err else {
                panic!("{engine:?} rank {me}: {err}")
            };
            let named: Vec<usize> = detail
                .split("rank ")
                .skip(1)
                .filter_map(|t| {
                    let n = t.len() - t.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                    t[..n].parse().ok()
                })
                .collect();
            assert!(
                named.contains(rank) && named.iter().all(|r| (1..=3).contains(r)),
                "{engine:?} world rank {me}, {count} elements: {err}"
            );
        }
        all.barrier().unwrap();
    }
    eprintln!("{CHILD_OK} rank {me} count_split");
}

/// The state letter of process `pid` in `/proc/PID/stat` (`T` when stopped).
fn proc_state(pid: u32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(')')?.1.trim_start().chars().next()
}

/// A slow rank is not a dead one: rank 0 stops rank 1 (`SIGSTOP`) for far
/// longer than any liveness check's period, as a starved or descheduled
/// process on a busy node is, and lets it go on (`SIGCONT`); every engine's
/// collectives then complete, correct and without error, on every rank.
fn stopped(world: &World) {
    const STOP: Duration = Duration::from_millis(1500);
    let pids = world.allgather(&std::process::id().to_le_bytes()).unwrap();
    let pid1 = u32::from_le_bytes(pids[1][..4].try_into().unwrap());
    for engine in ENGINES {
        let mut opts = CommOptions::new(engine);
        // Generous: the stop is what must not fail the collective.
        opts.timeout = Some(Duration::from_secs(20));
        let comm = Comm::with_options(world, opts).unwrap();
        let n = comm.size();
        comm.barrier().unwrap();
        let resume = (comm.rank() == 0).then(|| {
            // SAFETY: signals to a process of this job, identified by the pid it
            // published; nothing of this process is touched.
            assert_eq!(unsafe { libc::kill(pid1 as libc::pid_t, libc::SIGSTOP) }, 0);
            let t = Instant::now();
            while proc_state(pid1) != Some('T') {
                assert!(t.elapsed() < Duration::from_secs(5), "rank 1 did not stop");
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::spawn(move || {
                std::thread::sleep(STOP);
                // SAFETY: as above.
                assert_eq!(unsafe { libc::kill(pid1 as libc::pid_t, libc::SIGCONT) }, 0);
            })
        });
        let t0 = Instant::now();
        // Small (staged) and large (single-copy) messages, both waiting on rank 1.
        for count in [4usize, 16384] {
            let send = vec![comm.rank() as u64 + 1; count];
            let mut recv = vec![0u64; count];
            comm.allreduce(&send, &mut recv, ReduceOp::Sum)
                .unwrap_or_else(|e| panic!("{engine:?}: allreduce of {count}: {e}"));
            assert!(recv.iter().all(|&x| x == (n * (n + 1) / 2) as u64));
            let send: Vec<u32> = (0..(n * count) as u32).map(|i| i / count as u32).collect();
            let mut recv = vec![0u32; n * count];
            comm.alltoall(&send, &mut recv)
                .unwrap_or_else(|e| panic!("{engine:?}: alltoall of {count}: {e}"));
            assert!(recv.iter().all(|&x| x == comm.rank() as u32));
        }
        if let Some(h) = resume {
            h.join().unwrap();
            // Rank 0 waited for rank 1 through the whole stop.
            assert!(t0.elapsed() >= STOP / 2, "{engine:?}: {:?}", t0.elapsed());
        }
        eprintln!("{engine:?}: done after {:?}", t0.elapsed());
    }
}

/// Ranks disagree on the count: a typed error, not a hang.
fn mismatch(world: &World) {
    for engine in ENGINES {
        let mut opts = CommOptions::new(engine);
        opts.timeout = Some(Duration::from_secs(5));
        let comm = Comm::with_options(world, opts).unwrap();
        let count = 4 + comm.rank();
        let send = vec![1i32; count];
        let mut recv = vec![0i32; count * comm.size()];
        let err = comm.allgather(&send, &mut recv).unwrap_err();
        assert!(
            matches!(err, Error::CountMismatch { .. }),
            "{engine:?}: {err}"
        );
        // Local argument errors.
        let err = comm.allgather(&send, &mut recv[..1]).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err}");
        // One rank's count odd (staged and single-copy sizes): every rank
        // fails with the typed error and is told, not by the timeout, also
        // those that never receive the odd rank's message (with three ranks
        // or more they wait for one that failed already); then a matching
        // allreduce works. On one node, and across nodes on the ranks' own
        // path (`Inline`, `Thread`: the rank that finds the mismatch tells
        // the members on other nodes, hostile pass 19) and through the
        // proxies (`Proxy`, both placements: the proxy that finds it tells
        // the other nodes' proxies, which fail the collective of their
        // ranks; hostile pass 20 found it so, where it was not run before).
        let odd = comm.size() - 1;
        for count in [4, 5000] {
            world.barrier().unwrap();
            let c = if comm.rank() == odd { count + 1 } else { count };
            let mut recv = vec![0i64; c];
            let t0 = Instant::now();
            let res = comm.allreduce(&vec![1i64; c], &mut recv, ReduceOp::Sum);
            let took = t0.elapsed();
            assert!(
                matches!(res, Err(Error::CountMismatch { .. })),
                "{engine:?} rank {} of {}, {count} elements: {res:?}",
                comm.rank(),
                comm.size()
            );
            assert!(
                took < Duration::from_millis(2500),
                "{engine:?} rank {}: told after {took:?}",
                comm.rank()
            );
            world.barrier().unwrap();
            let mut recv = vec![0i64; count];
            comm.allreduce(&vec![1i64; count], &mut recv, ReduceOp::Sum)
                .unwrap_or_else(|e| panic!("{engine:?} after the odd count: {e}"));
            assert!(recv.iter().all(|&x| x == comm.size() as i64));
        }
        // A refusal the sender may never wait for (its staged send completed at
        // once): the receivers fail, the root may not, and neither the refusal
        // nor its slots outlive the operation.
        for _ in 0..3 {
            let mut buf = vec![7u8; 100 + comm.rank()];
            let res = comm.bcast(&mut buf, 0);
            if comm.rank() != 0 {
                let err = res.unwrap_err();
                assert!(
                    matches!(err, Error::CountMismatch { .. }),
                    "{engine:?}: {err}"
                );
            } else {
                // The root may succeed or learn of the refusal, but never wait
                // for the timeout.
                assert!(
                    !matches!(res, Err(Error::Timeout { .. })),
                    "{engine:?}: {res:?}"
                );
            }
            world.barrier().unwrap();
            let mut buf = vec![comm.rank() as u8; 100];
            comm.bcast(&mut buf, 0).unwrap();
            assert!(buf.iter().all(|&b| b == 0), "{engine:?}");
        }
        drop(comm);
        world.barrier().unwrap();
    }
}

/// Whether `detail` names a message's sizes as every engine does: "rank A
/// sent N bytes where rank B expected M", N and M differing.
fn names_sizes(detail: &str) -> bool {
    let w: Vec<&str> = detail.split(' ').collect();
    let num = |i: usize| w[i].parse::<u64>().ok();
    w.len() == 10
        && (w[0], w[2], w[4], w[5], w[6], w[8])
            == ("rank", "sent", "bytes", "where", "rank", "expected")
        && num(1).is_some()
        && num(7).is_some()
        && matches!((num(3), num(9)), (Some(n), Some(m)) if n != m)
}

/// The host-placed proxy names the sizes of a count mismatch, as the other
/// engines and the DPU-placed proxy do (hostile pass 14, cases 73-74): an
/// alltoallv whose count from rank 0 to rank 1 is not the one rank 1
/// expects, and a reduce-scatter whose counts have the same total but are
/// split otherwise (`[2, 2]` and `[3, 1]`). Every rank that fails fails
/// with `CountMismatch` naming the other rank and who sent how many bytes
/// where who expected how many; the receivers always fail (on one node every rank does: the
/// proxy fails the whole collective; across nodes a rank whose messages
/// all went and whose receives took the right sizes may finish, with its
/// data right), and a matching collective afterwards works.
fn proxy_sizes(world: &World) {
    let mut opts = CommOptions::new(Engine::Proxy);
    opts.timeout = Some(Duration::from_secs(5));
    let comm = Comm::with_options(world, opts).unwrap();
    let me = comm.rank();
    let one_node = world.node_count() == 1;
    let check = |what: &str, res: Result<(), Error>, must_fail: bool| match res {
        Err(Error::CountMismatch { rank, detail }) if rank == 1 - me && names_sizes(&detail) => {
            detail
        }
        Err(e) => panic!("{what}, rank {me}: {e}"),
        Ok(()) if must_fail => panic!("{what}, rank {me}: finished"),
        Ok(()) => String::new(),
    };
    // Rank 0 sends rank 1 four elements, rank 1 expects two.
    let (sc, rc) = if me == 0 {
        ([1, 4], [1, 1])
    } else {
        ([1, 1], [2, 1])
    };
    let send: Vec<i32> = (0..sc.iter().sum::<usize>() as i32).collect();
    let mut recv = vec![-1i32; rc.iter().sum()];
    let res = comm.alltoallv(&send, &sc, &mut recv, &rc);
    let detail = check("alltoallv", res, one_node || me == 1);
    if detail.is_empty() {
        // Rank 0 across nodes, finished: its own element and rank 1's first.
        assert_eq!(recv, [0, 0], "alltoallv, rank {me}");
    } else {
        assert_eq!(
            detail, "rank 0 sent 16 bytes where rank 1 expected 8",
            "alltoallv, rank {me}"
        );
    }
    world.barrier().unwrap();
    // The same total, split otherwise: each rank receives a block of
    // another size than its own counts say.
    let counts = if me == 0 { [2, 2] } else { [3, 1] };
    let mut recv = vec![0i32; counts[me]];
    let res = comm.reduce_scatter(&vec![1i32; 4], &mut recv, &counts, ReduceOp::Sum);
    check("reduce_scatter", res, true);
    world.barrier().unwrap();
    let mut recv = vec![0i64; 4];
    comm.allreduce(&[1i64; 4], &mut recv, ReduceOp::Sum)
        .unwrap_or_else(|e| panic!("after the mismatches, rank {me}: {e}"));
    assert_eq!(recv, [2; 4]);
    drop(comm);
    world.barrier().unwrap();
    // Across nodes, a rank that only its proxy can tell: an allreduce of 4
    // elements and of 5 by recursive halving then doubling. One rank's
    // first message has the size its peer expects, the other's not: the
    // refusing rank sends nothing more, so the first waits for a second
    // message that never comes until the other node's proxy tells its own.
    let mut opts = CommOptions::new(Engine::Proxy);
    opts.timeout = Some(Duration::from_secs(5));
    opts.schedule =
        hpc_collectives::Options::with_algorithm(hpc_collectives::Algorithm::Rabenseifner);
    let comm = Comm::with_options(world, opts).unwrap();
    let c = 4 + me;
    let mut recv = vec![0i32; c];
    let res = comm.allreduce(&vec![1i32; c], &mut recv, ReduceOp::Sum);
    check("allreduce", res, true);
    drop(comm);
    world.barrier().unwrap();
}

/// Ranks that call different collectives at the same point of the
/// communicator's order, with the same byte counts, so that only what travels
/// with the data beside the sizes can tell: the last rank calls another
/// collective than the others, and every rank fails with
/// `CollectiveMismatch` naming both collectives and a rank that called the
/// other one (each of the others the last rank; the last rank one of them),
/// and a matching collective afterwards works. With three ranks or more some
/// ranks never receive the last rank's message (they wait for one that
/// failed): they too fail with the mismatch, well before their short timeout.
fn disagree(world: &World) {
    let n = world.size();
    assert!(n >= 2, "the scenario is for two ranks or more");
    let odd = n - 1;
    for engine in ENGINES {
        let mut opts = CommOptions::new(engine);
        let timeout = Duration::from_secs(if n == 2 { 10 } else { 4 });
        opts.timeout = Some(timeout);
        let comm = Comm::with_options(world, opts).unwrap();
        let me = comm.rank();
        let expect = |t0: Instant, res: Result<(), Error>, a: &str, b: &str| {
            let (ours, theirs) = if me == odd { (b, a) } else { (a, b) };
            match res {
                Err(Error::CollectiveMismatch {
                    rank,
                    ours: o,
                    theirs: t,
                }) => {
                    assert_eq!(
                        (o.as_str(), t.as_str()),
                        (ours, theirs),
                        "{engine:?} rank {me} of {n}"
                    );
                    if me == odd {
                        assert_ne!(rank, odd, "{engine:?} rank {me} of {n}");
                    } else {
                        assert_eq!(rank, odd, "{engine:?} rank {me} of {n}");
                    }
                }
                r => panic!("{engine:?} rank {me} of {n}: {ours} against {theirs}: {r:?}"),
            }
            // Told, not waited out.
            assert!(
                t0.elapsed() < timeout / 2,
                "{engine:?} rank {me} of {n}: {ours} against {theirs} after {:?}",
                t0.elapsed()
            );
        };
        // Afterwards the same collective on every rank works.
        let agree = |what: &str| {
            world.barrier().unwrap();
            let send = vec![me as f64 + 1.0; 4];
            let mut recv = vec![0.0f64; 4];
            comm.allreduce(&send, &mut recv, ReduceOp::Sum).unwrap();
            let sum = (n * (n + 1) / 2) as f64;
            assert_eq!(recv, vec![sum; 4], "{engine:?} after {what}");
            world.barrier().unwrap();
        };
        world.barrier().unwrap();
        // (a) The type: f64 against u64, the same bytes.
        for count in [4, 5000] {
            let t0 = Instant::now();
            let res = if me != odd {
                let mut recv = vec![0.0f64; count];
                comm.allreduce(&vec![1.5f64; count], &mut recv, ReduceOp::Sum)
            } else {
                let mut recv = vec![0u64; count];
                comm.allreduce(&vec![1u64; count], &mut recv, ReduceOp::Sum)
            };
            expect(t0, res, "allreduce f64 sum", "allreduce u64 sum");
            agree("another type");
        }
        // (b) The operation: a sum against a maximum.
        let op = if me == odd {
            ReduceOp::Max
        } else {
            ReduceOp::Sum
        };
        let mut recv = vec![0.0f64; 4];
        let t0 = Instant::now();
        let res = comm.allreduce(&vec![2.0f64; 4], &mut recv, op);
        expect(t0, res, "allreduce f64 sum", "allreduce f64 max");
        agree("another operation");
        // (c) The root: a proxy sees every part of its node. (Where the
        // ranks are apart, on the ranks' own path or on two proxies, two
        // ranks that each call themselves the broadcast's root only send,
        // and nothing meets that could tell in time.) With three ranks or
        // more, a rank whose part of the others' broadcast or reduction
        // ended before the odd part came was answered already: it may
        // succeed (nothing of the odd rank's reached it); the odd rank and
        // every rank still waiting are told.
        if engine == Engine::Proxy && world.node_count() == 1 {
            let root = if me == odd { odd } else { 0 };
            let rooted = |t0, res: Result<(), Error>, a: &str, b: &str| {
                if n == 2 || me == odd || res.is_err() {
                    expect(t0, res, a, b);
                }
            };
            let odd_root = format!("broadcast u8 root {odd}");
            let mut buf = vec![me as u8; 100];
            let t0 = Instant::now();
            rooted(
                t0,
                comm.bcast(&mut buf, root),
                "broadcast u8 root 0",
                &odd_root,
            );
            agree("another broadcast root");
            let odd_root = format!("reduce i32 sum root {odd}");
            let mut recv = vec![0i32; 8];
            let t0 = Instant::now();
            let res = comm.reduce(&vec![1i32; 8], &mut recv, ReduceOp::Sum, root);
            rooted(t0, res, "reduce i32 sum root 0", &odd_root);
            agree("another reduction root");
        }
        drop(comm);
        world.barrier().unwrap();
    }
}

/// Messages bigger than the board's staging area (staged head, single-copy
/// tail), more outstanding than its slots (single-copy fallback), and a
/// refused multi-chunk message, after which the communicator still works.
fn staging(world: &World) {
    for engine in ENGINES {
        let comm = Comm::new(world, engine).unwrap();
        let (me, n) = (comm.rank(), comm.size());
        // 3 MiB + 5 bytes from the last rank: 192 chunks and a tail.
        let len = (3 << 20) + 5;
        let root = n - 1;
        let mut buf: Vec<u8> = if me == root {
            (0..len).map(|i| (i % 251) as u8).collect()
        } else {
            vec![0; len]
        };
        comm.bcast(&mut buf, root).unwrap();
        assert!(
            buf.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8),
            "{engine:?}: broadcast of {len} bytes"
        );
        // Eight alltoalls of 96 Ki u16 per peer in flight at once (576 KiB out
        // per op and rank on 3 ranks, 4.5 MiB in all: far more than the slots hold).
        let count = 96 * 1024;
        let sends: Vec<Vec<u16>> = (0..8)
            .map(|k| {
                (0..n * count)
                    .map(|i| (k * 7 + me * 3 + i / count + i % count % 13) as u16)
                    .collect()
            })
            .collect();
        let mut recvs = vec![vec![0u16; n * count]; 8];
        let reqs: Vec<_> = sends
            .iter()
            .zip(recvs.iter_mut())
            .map(|(s, r)| comm.ialltoall(s, r).unwrap())
            .collect();
        for r in reqs.into_iter().rev() {
            r.wait().unwrap();
        }
        for (k, r) in recvs.iter().enumerate() {
            for (i, &v) in r.iter().enumerate() {
                let src = i / count;
                assert_eq!(
                    v,
                    (k * 7 + src * 3 + me + i % count % 13) as u16,
                    "{engine:?} op {k} at {i}"
                );
            }
        }
        // A refused message of many chunks: a typed error on every rank...
        let count = 50_000 + me * 1000;
        let send = vec![me as u32; count];
        let mut recv = vec![0u32; count * n];
        let err = comm.allgather(&send, &mut recv).unwrap_err();
        assert!(
            matches!(err, Error::CountMismatch { .. }),
            "{engine:?}: {err}"
        );
        world.barrier().unwrap();
        // ...and the communicator goes on (the refused chunks' slots came back).
        for _ in 0..3 {
            let mut buf = if me == 0 {
                vec![9u8; 1 << 20]
            } else {
                vec![0u8; 1 << 20]
            };
            comm.bcast(&mut buf, 0).unwrap();
            assert!(buf.iter().all(|&b| b == 9), "{engine:?}");
        }
        drop(comm);
        world.barrier().unwrap();
    }
}

/// A leaked (forgotten) request never writes into freed memory: its
/// result lands in engine-owned staging; later collectives still work.
fn safety(world: &World) {
    for engine in ENGINES {
        let comm = Comm::new(world, engine).unwrap();
        let n = comm.size();
        for _ in 0..20 {
            let send = vec![7u64; 50_000];
            let mut recv = vec![0u64; 50_000 * n];
            let req = comm.iallgather(&send, &mut recv).unwrap();
            std::mem::forget(req);
            drop(recv);
            drop(send);
            // Reuse the freed memory at once.
            let fresh = vec![1u64; 50_000 * n];
            let mut out = vec![0u64; 50_000 * n];
            comm.allgather(&fresh[..50_000], &mut out).unwrap();
            assert!(out.iter().all(|&v| v == 1));
            assert!(
                fresh.iter().all(|&v| v == 1),
                "{engine:?}: freed memory was written"
            );
        }
        // Scoped requests that are leaked are finished by the scope.
        let send = vec![3u32; 1000];
        let mut recv = vec![0u32; 1000 * n];
        comm.scope(|s| {
            let r = s.iallgather(&send, &mut recv).unwrap();
            std::mem::forget(r);
        });
        assert!(recv.iter().all(|&v| v == 3), "{engine:?}");
    }
}

/// Lines of the proxy processes' memory maps that are shared buffers.
/// Buffers the proxies this rank started map (only those: the proxies of tests
/// running beside this one map buffers of their own).
fn proxy_mapped_buffers() -> usize {
    let me = format!("PPid:\t{}\n", std::process::id());
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains("proxy_entry") && status.contains(&me) {
            let maps = std::fs::read_to_string(e.path().join("maps")).unwrap_or_default();
            n += maps.lines().filter(|l| l.contains("hpc-coll-buf")).count();
        }
    }
    n
}

/// Zero-copy collectives on `SharedBuf`s (which the proxy maps), mixed with
/// ordinary buffers, over sizes beyond the proxy's copy piece; the proxy
/// drops its mapping of a buffer the rank freed.
/// Alltoall of `count` elements a block from `send` into `recv`, and from
/// `send` into an ordinary `Vec` (returned), both checked against
/// [`val`]'s pattern.
fn alltoall_both<S, R>(comm: &Comm, send: &S, recv: &mut R, count: usize, ctx: &str) -> Vec<i64>
where
    S: hpc_comm::Buf<Elem = i64>,
    R: hpc_comm::BufMut<Elem = i64>,
{
    let (me, n) = (comm.rank(), comm.size());
    let mut plain = vec![0i64; n * count];
    comm.scope(|s| {
        s.ialltoall(send, recv)?.wait()?;
        s.ialltoall(send, &mut plain)?.wait()
    })
    .unwrap();
    let want: Vec<i64> = (0..n)
        .flat_map(|i| (0..count).map(move |k| val(i, me * count + k)))
        .collect();
    assert_eq!(recv.elems().unwrap(), &want[..], "alltoall {ctx}");
    assert_eq!(plain, want, "alltoall to a Vec {ctx}");
    plain
}

fn shared(world: &World) {
    for engine in ENGINES {
        let comm = Comm::new(world, engine).unwrap();
        let (me, n) = (comm.rank(), comm.size());
        for count in [0usize, 7, 40_000] {
            let ctx = format!("{engine:?} count {count} rank {me}/{n}");
            let send =
                SharedBuf::from_slice(&(0..n * count).map(|i| val(me, i)).collect::<Vec<_>>())
                    .unwrap();
            let mut recv = SharedBuf::<i64>::new(n * count).unwrap();
            // Shared to shared, shared to ordinary (and back below).
            let plain = alltoall_both(&comm, &send, &mut recv, count, &ctx);
            let mut back = SharedBuf::<i64>::new(n * count).unwrap();
            comm.scope(|s| {
                s.iallgather(&plain[me * count..(me + 1) * count], &mut back)?
                    .wait()
            })
            .unwrap();
            let want: Vec<i64> = (0..n)
                .flat_map(|r| (0..count).map(move |k| val(r, r * count + k)))
                .collect();
            assert_eq!(&back[..], &want[..], "allgather from a Vec {ctx}");
            let mut sum = SharedBuf::<i64>::new(count).unwrap();
            comm.scope(|s| {
                s.iallreduce(&send[..count], &mut sum, ReduceOp::Sum)?
                    .wait()
            })
            .unwrap();
            let want: Vec<i64> = (0..count)
                .map(|i| (0..n).map(|r| val(r, i)).sum())
                .collect();
            assert_eq!(&sum[..], &want[..], "allreduce {ctx}");
            let mut b = SharedBuf::<i64>::new(count).unwrap();
            if me == 0 {
                b.copy_from_slice(&send[..count]);
            }
            comm.scope(|s| s.ibcast(&mut b, 0)?.wait()).unwrap();
            assert!((0..count).all(|i| b[i] == val(0, i)), "bcast {ctx}");
        }
        if engine == Engine::Proxy {
            comm.barrier().unwrap();
            // Buffers come and go: the proxy keeps at most those still open.
            for round in 0..30 {
                let send = SharedBuf::from_slice(&[round as u32; 1000]).unwrap();
                let mut recv = SharedBuf::<u32>::new(1000 * n).unwrap();
                comm.scope(|s| s.iallgather(&send, &mut recv)?.wait())
                    .unwrap();
                assert!(recv.iter().all(|&v| v == round as u32));
            }
            comm.barrier().unwrap();
            if me == 0 {
                let t0 = Instant::now();
                let mut seen = proxy_mapped_buffers();
                // The proxy looks every 20 ms; the bound is for a loaded machine.
                while seen > 0 && t0.elapsed() < Duration::from_secs(30) {
                    std::thread::sleep(Duration::from_millis(20));
                    seen = proxy_mapped_buffers();
                }
                assert_eq!(seen, 0, "the proxy still maps freed buffers");
            }
            comm.barrier().unwrap();
            // While a buffer is in use the proxy maps it (no silent fallback).
            let send = SharedBuf::from_slice(&[1u8; 4096]).unwrap();
            let mut recv = SharedBuf::<u8>::new(4096 * n).unwrap();
            comm.scope(|s| s.iallgather(&send, &mut recv)?.wait())
                .unwrap();
            comm.barrier().unwrap();
            if me == 0 {
                assert!(
                    proxy_mapped_buffers() >= 2 * n,
                    "the proxy did not map the shared buffers"
                );
            }
            comm.barrier().unwrap();
        }
    }
}

/// Makes `process_vm_readv` fail with `EPERM` in this process, as a seccomp
/// profile or Yama's `ptrace_scope` does where they forbid it.
fn forbid_process_vm_readv() {
    let op = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let filter = [
        // The system call number (offset 0 of `seccomp_data`).
        op(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: libc::SYS_process_vm_readv as u32,
        },
        op(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        ),
        op(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with a valid, live filter program; the filter only answers
    // one system call with EPERM.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog
            ),
            0,
            "installing the seccomp filter: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Rank 1 may not read other processes' memory: every rank's communicator
/// refuses to start, naming rank 1 and the cause, for every engine, instead
/// of failing in the first large collective.
fn no_cross_memory_attach(world: &World) {
    if world.rank() == 1 {
        forbid_process_vm_readv();
    }
    for engine in ENGINES {
        match Comm::new(world, engine) {
            Err(Error::Unsupported(m)) => assert!(
                m.contains("cross-memory attach") && m.contains("rank 1 could not read"),
                "{engine:?}: {m}"
            ),
            Err(e) => panic!("{engine:?}: another error: {e}"),
            Ok(_) => panic!("{engine:?}: a communicator without cross-memory attach"),
        }
    }
}

#[test]
fn a_blocked_cross_memory_attach_is_refused_at_creation() {
    all_ok("no_cma", 3);
}

#[test]
fn shared_buffers_through_every_engine() {
    all_ok("shared", 3);
}

#[test]
fn every_collective_every_engine_1_to_4_ranks() {
    for n in 1..=4 {
        all_ok("correct", n);
    }
}

#[test]
fn back_to_back_random_sizes_4_and_7_ranks() {
    all_ok("stress", 4);
    all_ok("stress", 7);
}

#[test]
fn sixty_four_ranks_oversubscribed() {
    all_ok("big", 64);
}

#[test]
fn mismatched_counts_are_typed_errors() {
    all_ok("mismatch", 2);
    all_ok("mismatch", 3);
}

/// The host-placed proxy's count mismatch names the sizes (hostile pass
/// 14, cases 73-74): 2 ranks on one node, and on two emulated nodes, whose
/// proxies tell each other the sizes with the failure.
#[test]
fn the_host_proxy_names_the_sizes_of_a_count_mismatch() {
    let host = [("HPC_COLL_PROXY_PLACEMENT", "host")];
    all_ok_with("proxy_sizes", 2, 30.0, &host);
    all_ok_on("proxy_sizes on 2 nodes", "proxy_sizes", 2, 2, 30.0, &host);
}

/// Inline, Thread and the host proxy, then the DPU-placed proxy (with Inline
/// and Thread again): the ranks of one node that call different collectives.
#[test]
fn ranks_that_disagree_on_type_op_or_root_get_typed_errors() {
    all_ok("disagree", 2);
    // One rank odd among three or four: ranks that never receive its message
    // are told by the board (the Inline and Thread engines) or by the proxy.
    all_ok("disagree", 3);
    all_ok("disagree", 4);
    all_ok_with("disagree", 2, 60.0, &[("HPC_COLL_PROXY_PLACEMENT", "dpu")]);
    all_ok_with("disagree", 3, 60.0, &[("HPC_COLL_PROXY_PLACEMENT", "dpu")]);
    // The two ranks on two nodes: messages between the nodes (the ranks' own
    // network path; the proxies' messages to each other).
    all_ok_on("disagree on 2 nodes", "disagree", 2, 2, 60.0, &[]);
    let dpu = [("HPC_COLL_PROXY_PLACEMENT", "dpu")];
    all_ok_on(
        "disagree on 2 nodes, DPU placement",
        "disagree",
        2,
        2,
        60.0,
        &dpu,
    );
}

#[test]
fn messages_beyond_the_staging_area() {
    // Every message staged as far as the slots go, whatever its size.
    let big = usize::MAX.to_string();
    all_ok_with("staging", 3, 60.0, &[("HPC_STAGE_MAX", big.as_str())]);
    // The default: small messages staged, large ones by single copy.
    all_ok("staging", 3);
}

/// Progress while the application neither tests nor waits: rank 0 starts an
/// allreduce and sleeps; rank 1's blocking allreduce needs rank 0's later
/// rounds (reduce-scatter then allgather), so it finishes early only if
/// rank 0's progress thread runs them. `Inline` is the control: there
/// rank 1 must wait for rank 0 to wake up.
fn progress(world: &World) {
    use hpc_comm::AgentWake;
    const NAP: Duration = Duration::from_millis(600);
    let cases = [
        (Engine::Inline, None),
        (Engine::Thread, Some(AgentWake::Lazy)),
        (Engine::Thread, Some(AgentWake::Eager)),
    ];
    for (engine, wake) in cases {
        let mut opts = CommOptions::new(engine);
        opts.agent_wake = wake;
        // Recursive halving then doubling: rank 1's last round needs what rank
        // 0 reduced from rank 1's first message, which arrives after rank 0
        // posted (with recursive doubling, rank 0's staged send would complete
        // rank 1's allreduce by itself).
        opts.schedule =
            hpc_collectives::Options::with_algorithm(hpc_collectives::Algorithm::Rabenseifner);
        let comm = Comm::with_options(world, opts).unwrap();
        // 1 KiB goes through the staging slots, 256 KiB by single copy.
        for count in [256usize, 65536] {
            let send = vec![comm.rank() as f32 + 1.0; count];
            let mut recv = vec![0f32; count];
            world.barrier().unwrap();
            if engine == Engine::Inline {
                // The control: nothing moves rank 0's collective while it sleeps,
                // so rank 1 finishes only after rank 0 woke (a lower bound, which
                // a loaded machine can only lengthen).
                if comm.rank() == 0 {
                    let req = comm.iallreduce(&send, &mut recv, ReduceOp::Sum).unwrap();
                    std::thread::sleep(NAP);
                    req.wait().unwrap();
                } else {
                    std::thread::sleep(NAP / 4);
                    let t0 = Instant::now();
                    comm.allreduce(&send, &mut recv, ReduceOp::Sum).unwrap();
                    let took = t0.elapsed();
                    assert!(
                        took >= NAP / 2,
                        "{engine:?} finished in {took:?} without rank 0"
                    );
                }
            } else if comm.rank() == 0 {
                // Rank 0's application thread neither tests nor waits until rank 1
                // has finished: the world's barrier below is not the
                // communicator's, so only the progress thread can run rank 0's
                // rounds meanwhile. Without it rank 1 never finishes and the
                // barrier fails by the world's timeout.
                let req = comm.iallreduce(&send, &mut recv, ReduceOp::Sum).unwrap();
                world.barrier().unwrap();
                req.wait().unwrap();
            } else {
                // Rank 0 posts first: had rank 1's data come before, rank 0 would
                // run every round while posting.
                std::thread::sleep(NAP / 4);
                comm.allreduce(&send, &mut recv, ReduceOp::Sum).unwrap();
                world.barrier().unwrap();
            }
            assert!(recv.iter().all(|&v| v == 3.0));
        }
    }
}

/// The proxy dies (rank 0, which started it, kills it): every rank's next
/// collective fails with `Stopped("proxy")`, promptly and not by timeout.
fn proxy_death(world: &World) {
    let comm = Comm::new(world, Engine::Proxy).unwrap();
    let mut buf = vec![comm.rank() as u8; 4096];
    comm.bcast(&mut buf, 0).unwrap();
    world.barrier().unwrap();
    if comm.rank() == 0 {
        // The proxy is this process's child.
        let kids = children();
        assert_eq!(kids.len(), 1, "one child, the proxy: {kids:?}");
        // SAFETY: plain kill(2) of our own child.
        assert_eq!(unsafe { libc::kill(kids[0], libc::SIGKILL) }, 0);
    }
    world.barrier().unwrap();
    // Stopped, not Timeout: the death was detected, not waited out.
    let err = comm.bcast(&mut buf, 0).unwrap_err();
    assert!(matches!(err, Error::Stopped("proxy")), "{err}");
    // And the next one at once.
    assert!(matches!(
        comm.bcast(&mut buf, 0),
        Err(Error::Stopped("proxy"))
    ));
}

/// Rank `victim` never enters the barrier: the others time out (after the
/// communicator's 1 s), their error naming it and not themselves, which the
/// proxy tells them (it holds their parts, not the victim's; on another node,
/// its parts wait for the victim's message). The victim waits meanwhile in
/// the world's barrier (whose timeout is the job's, longer), so that it is
/// neither lost nor gone while the others wait.
fn absent(world: &World, mut o: CommOptions, victim: usize) {
    o.timeout = Some(Duration::from_secs(1));
    let comm = Comm::with_options(world, o).unwrap();
    if comm.rank() != victim {
        let t0 = Instant::now();
        match comm.barrier() {
            Err(Error::Timeout { waiting_for, .. }) => {
                assert_eq!(waiting_for, vec![victim], "rank {}", comm.rank());
            }
            o => panic!("a barrier rank {victim} never enters: {o:?}"),
        }
        assert!(
            t0.elapsed() >= Duration::from_millis(900),
            "{:?}",
            t0.elapsed()
        );
    }
    world.barrier().unwrap();
}

/// A collective with a custom reduction under each engine: refused on every
/// rank before anything moves, and the communicator still works.
fn custom_op(world: &World) {
    for engine in ENGINES {
        let mut o = CommOptions::new(engine);
        o.timeout = Some(Duration::from_secs(3));
        let comm = Comm::with_options(world, o).unwrap();
        let send = [1.0f64; 4];
        let mut recv = [0.0f64; 4];
        let e = comm
            .allreduce(&send[..], &mut recv[..], ReduceOp::Custom(7))
            .unwrap_err();
        assert!(
            matches!(&e, Error::Unsupported(why) if why.contains("custom#7")),
            "{engine:?}: {}",
            e.chain()
        );
        comm.allreduce(&send[..], &mut recv[..], ReduceOp::Sum)
            .unwrap();
        assert_eq!(recv, [2.0; 4], "{engine:?}");
    }
}

/// A reduction by a custom operation, which no engine applies, is refused by
/// name: it failed after the data moved, as "transport: reduction" (the cause
/// only in the error's chain) and under the proxy as "the proxy failed the
/// collective".
#[test]
fn a_custom_reduction_is_refused_by_name_under_every_engine() {
    all_ok("custom_op", 2);
}

/// A proxy program that never serves, under a communicator's timeout of
/// 300 ms.
fn never_serves(world: &World) {
    let mut o = CommOptions::new(Engine::Proxy);
    o.timeout = Some(Duration::from_millis(300));
    let t0 = Instant::now();
    let e = Comm::with_options(world, o).unwrap_err().to_string();
    assert!(
        e.contains("did not start serving within 150ms (half the communicator's timeout"),
        "{e}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

/// A proxy that does not start serving is waited for half the
/// communicator's timeout (at most 10 s), and the message says that limit: a
/// timeout of 300 ms was said as "within 10 s".
#[test]
fn a_proxy_that_never_serves_is_said_with_the_limit_waited() {
    all_ok_with(
        "proxy_never_serves",
        1,
        20.0,
        &[(hpc_runtime::env::COLL_PROXY_CMD, "sleep 30")],
    );
}

#[test]
fn a_barrier_that_times_out_on_the_proxy_names_the_absent_rank() {
    all_ok_with("proxy_absent", 3, 20.0, &[]);
    all_ok_with("dpu_absent", 3, 20.0, &[]);
}

/// The barrier's ranks on node 0 name the rank of node 1 that never entered,
/// which their proxy knows only as the one whose message its parts wait for.
#[test]
fn a_barrier_that_times_out_on_the_proxy_names_the_absent_rank_of_another_node() {
    let what = "rank 1 of 3 on 2 nodes never enters the barrier";
    all_ok_on(what, "proxy_absent_away", 3, 2, 20.0, &[]);
}

#[test]
fn a_dead_proxy_is_reported() {
    all_ok("proxy_death", 2);
}

#[test]
fn thread_engine_progresses_while_the_application_sleeps() {
    all_ok("progress", 2);
}

#[test]
fn leaked_requests_are_safe() {
    all_ok("safety", 3);
}

#[test]
fn inline_and_thread_engines_span_nodes() {
    for (n, nodes) in [(2, 2), (3, 2), (5, 3)] {
        let what = format!("{n} ranks on {nodes} nodes");
        all_ok_on(&what, "nodes", n, nodes, 20.0, &[]);
    }
}

#[test]
fn proxy_engine_spans_nodes() {
    // 1-8 ranks on 1-4 nodes (rank r on node r % nodes).
    for (n, nodes) in [(1, 1), (2, 2), (3, 2), (4, 4), (5, 3), (8, 2)] {
        let t = Instant::now();
        for (r, (ok, err)) in job_on_nodes("proxy_nodes", n, nodes, 30.0, &[])
            .into_iter()
            .enumerate()
        {
            assert!(ok, "{n} ranks on {nodes} nodes, rank {r} failed:\n{err}");
            if let Some(note) = err.lines().find(|l| l.starts_with("NOTE ")) {
                eprintln!("{note}");
            }
        }
        eprintln!("proxy_nodes x{n} on {nodes}: {:?}", t.elapsed());
    }
}

/// Under a proxy memory cap (`HPC_COLL_PROXY_MAX_SCRATCH`, in the job's
/// environment) an allreduce of 16 MiB (the ring: 5.3 MiB of scratch per
/// rank, and in DPU placement 32 MiB of staging), whose memory in the proxy
/// passes it, fails on every rank with the
/// typed error naming the proxy, the bytes and the knob; the proxy survives,
/// and the next collective on the same communicator succeeds. Twice, so that
/// a refused collective leaves nothing behind that the next one trips on.
fn proxy_memory(world: &World) {
    let mut opts = CommOptions::new(Engine::Proxy);
    opts.timeout = Some(Duration::from_secs(10));
    let comm = Comm::with_options(world, opts).unwrap();
    let n = comm.size();
    let big = vec![1.0f64; 1 << 21];
    let mut out = vec![0.0f64; 1 << 21];
    for round in 0..2 {
        let t = Instant::now();
        let err = comm.allreduce(&big, &mut out, ReduceOp::Sum).unwrap_err();
        assert!(
            matches!(err, Error::ProxyMemory { bytes: Some(b), .. } if b > 1 << 20),
            "round {round}: {err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("proxy") && msg.contains("HPC_COLL_PROXY_MAX_SCRATCH"),
            "{msg}"
        );
        // And the cap itself: its value as set, or in bytes (the host
        // proxy's refusal named the variable alone, hostile pass 19).
        let cap = std::env::var("HPC_COLL_PROXY_MAX_SCRATCH").unwrap();
        let bytes = cap.trim_end_matches('M').parse::<u64>().unwrap() << 20;
        assert!(
            msg.contains(&format!("HPC_COLL_PROXY_MAX_SCRATCH=\"{cap}\""))
                || msg.contains(&format!("cap of {bytes} bytes")),
            "{msg}"
        );
        // Refused at once, not by the timeout.
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        let send = vec![comm.rank() as f64 + 1.0; 1000];
        let mut recv = vec![0.0f64; 1000];
        comm.allreduce(&send, &mut recv, ReduceOp::Sum).unwrap();
        let want = (n * (n + 1) / 2) as f64;
        assert!(recv.iter().all(|&x| x == want), "round {round}");
    }
    drop(comm);
    world.barrier().unwrap();
}

/// A cap that is no size is refused by name when the communicator is created.
fn proxy_memory_bad_cap(world: &World) {
    let Err(err) = Comm::new(world, Engine::Proxy) else {
        panic!("a bad cap is refused");
    };
    assert!(
        err.to_string().contains("HPC_COLL_PROXY_MAX_SCRATCH"),
        "{err}"
    );
}

/// [`proxy_memory`] under a cap each op passes alone (1 MiB) and one that a
/// node's first op fits and its second does not (`together`), on one node and
/// on two (3 ranks: node 0 holds two ops, node 1 one, so under `together`
/// node 1's op runs until node 0's proxy tells it the collective failed).
fn memory_cap_cases(together: &str, env: &[(&str, &str)]) {
    for cap in ["1M", together] {
        let mut env = env.to_vec();
        env.push(("HPC_COLL_PROXY_MAX_SCRATCH", cap));
        for nodes in [1, 2] {
            let what = format!("cap {cap}, {nodes} nodes");
            all_ok_on(&what, "proxy_memory", 3, nodes, 30.0, &env);
        }
    }
}

#[test]
fn a_collective_over_the_proxys_memory_cap_fails_alone() {
    // 5.3 MiB of scratch per rank's op.
    memory_cap_cases("8M", &[]);
    all_ok_with(
        "proxy_memory_bad_cap",
        2,
        20.0,
        &[("HPC_COLL_PROXY_MAX_SCRATCH", "lots")],
    );
}

#[test]
fn dpu_placement_a_collective_over_the_proxys_memory_cap_fails_alone() {
    // Per rank: 16 MiB of send and of receive staging, 5.3 MiB of scratch.
    memory_cap_cases("48M", &[("HPC_COLL_PROXY_PLACEMENT", "dpu")]);
}

/// Whether process `pid` is gone (or a zombie).
fn exited(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z')),
    }
}

/// Runs `entry` on 4 ranks on 2 nodes, whose node 1's proxy is killed
/// mid-collective: node 1's ranks must name the proxy, node 0's the lost node,
/// within the timeout; then every process of the job must exit and none may
/// leave a file in /dev/shm that `left_by(file, pid)` claims for it.
fn a_killed_proxy_is_named(entry: &str, left_by: impl Fn(&str, i32) -> bool) {
    let t = Instant::now();
    let res = job_on_nodes(entry, 4, 2, 10.0, &[]);
    let took = t.elapsed();
    let mut pids = Vec::new();
    for (r, (ok, err)) in res.iter().enumerate() {
        assert!(ok, "rank {r}: {err}");
        let want = if r % 2 == 1 {
            "the proxy engine stopped"
        } else {
            "node 1 is lost"
        };
        assert!(err.contains(want), "rank {r}: {err}");
        let line = err.lines().find_map(|l| l.strip_prefix("PIDS ")).unwrap();
        let (pid, kids) = line.split_once(' ').unwrap();
        pids.push(pid.parse::<i32>().unwrap());
        let kids = kids.trim_matches(|c| c == '[' || c == ']');
        pids.extend(
            kids.split(", ")
                .filter(|k| !k.is_empty())
                .map(|k| k.parse::<i32>().unwrap()),
        );
    }
    // Well within the 10 s timeout: detected, not waited out.
    assert!(took < Duration::from_secs(8), "{took:?}");
    // The surviving proxy goes too (its ranks are gone), and nothing is left in
    // /dev/shm by any of the processes.
    let t = Instant::now();
    while !pids.iter().all(|&p| exited(p)) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(pids.iter().all(|&p| exited(p)), "left running: {pids:?}");
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|f| pids.iter().any(|&p| left_by(f, p)))
        .collect();
    assert!(left.is_empty(), "left behind in /dev/shm: {left:?}");
}

/// A count mismatch across nodes (the odd rank's count on one node, ranks
/// that never receive its message on the other) is told to every rank well
/// before the timeout on every engine, the proxies in both placements (the
/// `mismatch` scenario's odd counts, 3 and 4 ranks over 2 nodes; without
/// the proxies' message of a failure to each other, `Proxy`'s ranks on the
/// other node end in `Timeout { after: 5s, .. }`).
#[test]
fn a_count_mismatch_across_nodes_is_told_to_ranks_not_involved() {
    for n in [3, 4] {
        let what = format!("mismatch: {n} ranks on 2 nodes");
        all_ok_on(&what, "mismatch", n, 2, 60.0, &[]);
        let what = format!("mismatch: {n} ranks on 2 nodes, DPU placement");
        all_ok_on(
            &what,
            "mismatch",
            n,
            2,
            60.0,
            &[("HPC_COLL_PROXY_PLACEMENT", "dpu")],
        );
    }
}

#[test]
fn a_killed_proxy_fails_its_node_and_names_it_to_the_others() {
    a_killed_proxy_is_named("proxy_node_death", |f, p| {
        f.starts_with(&format!("hpc-coll-{p}-"))
    });
}

#[test]
fn killed_rank_on_another_node_is_named() {
    for engine in ["inline", "thread", "proxy"] {
        let env = [("HPC_COLL_TEST_ENGINE", engine)];
        killed_rank_is_named_by_the_others(&format!("{engine}: "), 2, &env);
    }
}

#[test]
fn a_stopped_rank_is_slow_not_lost() {
    all_ok("stopped", 3);
}

#[test]
fn killed_rank_is_named() {
    for engine in ["inline", "thread", "proxy"] {
        let env = [("HPC_COLL_TEST_ENGINE", engine)];
        killed_rank_is_named_by_the_others(&format!("{engine}: "), 1, &env);
    }
}

/// A count mismatch in a split communicator names world ranks in its
/// text too, on every engine, on one node and across two (see
/// `count_split`).
#[test]
fn a_count_mismatch_in_a_split_communicator_names_world_ranks() {
    for nodes in [1, 2] {
        for engine in ["inline", "thread", "proxy"] {
            let env = [("HPC_COLL_TEST_ENGINE", engine)];
            let what = format!("count_split, {engine}, {nodes} node(s)");
            all_ok_on(&what, "count_split", 4, nodes, 30.0, &env);
        }
    }
}

/// Ranks that choose the `Proxy` engine and ranks that do not, for one
/// communicator, are told so (see `mixed_engines`).
#[test]
fn ranks_that_choose_different_engines_are_told_so() {
    all_ok_with("mixed_engines", 2, 30.0, &[]);
}

/// A lost member of a split communicator is named by its world rank on
/// every engine, and a send to it fails, one to a living member goes (see
/// `kill_split`), on one node and across two.
#[test]
fn a_lost_member_of_a_split_communicator_is_named_alike_by_every_engine() {
    for nodes in [1, 2] {
        for (engine, placement) in [
            ("inline", "host"),
            ("thread", "host"),
            ("proxy", "host"),
            ("proxy", "dpu"),
        ] {
            let env = [
                ("HPC_COLL_TEST_ENGINE", engine),
                ("HPC_COLL_PROXY_PLACEMENT", placement),
            ];
            for (r, (ok, err)) in job_on_nodes("kill_split", 4, nodes, 20.0, &env)
                .iter()
                .enumerate()
            {
                if r != 2 {
                    assert!(
                        ok,
                        "{engine} ({placement}) on {nodes} node(s): rank {r}: {err}"
                    );
                }
            }
        }
    }
}

/// The `Proxy` engine with its proxy placed as on a DPU: every collective and
/// algorithm against the simulator's reference, isolation, faults.
mod dpu {
    use super::*;
    use hpc_collectives::{Algorithm, Collective, CollectiveKind, DataType};
    use hpc_comm::Placement;

    pub(super) fn options() -> CommOptions {
        let mut o = CommOptions::new(Engine::Proxy);
        o.placement = Some(Placement::Dpu);
        o
    }

    /// The collective of `kind` for `n` ranks and `count` (elements per
    /// block) with root `n - 1`, and rank `r`'s (send, receive) inputs.
    fn case(kind: CollectiveKind, n: usize, count: usize) -> Option<Collective> {
        let d = DataType::I64;
        let root = n - 1;
        let op = ReduceOp::Sum;
        Some(match kind {
            CollectiveKind::Barrier => Collective::Barrier,
            CollectiveKind::Broadcast => Collective::Broadcast {
                root,
                count,
                dtype: d,
            },
            CollectiveKind::Gather => Collective::Gather {
                root,
                count,
                dtype: d,
            },
            CollectiveKind::Scatter => Collective::Scatter {
                root,
                count,
                dtype: d,
            },
            CollectiveKind::Allgather => Collective::Allgather { count, dtype: d },
            CollectiveKind::Allgatherv => Collective::Allgatherv {
                counts: (0..n).map(|r| count + r % 3).collect(),
                dtype: d,
            },
            CollectiveKind::Alltoall => Collective::Alltoall { count, dtype: d },
            CollectiveKind::Alltoallv => return None,
            CollectiveKind::Reduce => Collective::Reduce {
                root,
                count,
                dtype: d,
                op,
            },
            CollectiveKind::Allreduce => Collective::Allreduce {
                count,
                dtype: d,
                op,
            },
            CollectiveKind::ReduceScatter => Collective::ReduceScatter {
                counts: (0..n).map(|r| count + r % 2).collect(),
                dtype: d,
                op,
            },
            // Not in `Comm`'s calls.
            _ => return None,
        })
    }

    use hpc_comm::conformance::inputs;

    /// What the simulator computes for rank `me` with these options.
    fn reference(
        coll: &Collective,
        me: usize,
        n: usize,
        opts: &hpc_collectives::Options,
    ) -> Vec<i64> {
        hpc_comm::conformance::reference_with(|_| coll.clone(), me, n, opts).unwrap()
    }

    /// Runs `coll` through `comm` (staged, or zero-copy in a scope).
    fn run(comm: &Comm, coll: &Collective, send: &[i64], recv: &mut Vec<i64>, scoped: bool) {
        let me = comm.rank();
        let go = |c: &Comm, send: &[i64], recv: &mut Vec<i64>| -> Result<(), Error> {
            if scoped {
                return c.scope(|s| match coll {
                    Collective::Alltoall { .. } => s.ialltoall(send, recv)?.wait(),
                    Collective::Allreduce { op, .. } => s.iallreduce(send, recv, *op)?.wait(),
                    Collective::Allgather { .. } => s.iallgather(send, recv)?.wait(),
                    Collective::Broadcast { root, .. } => s.ibcast(recv, *root)?.wait(),
                    _ => unreachable!("scoped runs use these kinds"),
                });
            }
            match coll {
                Collective::Barrier => c.ibarrier()?.wait(),
                Collective::Broadcast { root, .. } => c.ibcast(recv, *root)?.wait(),
                Collective::Gather { root, .. } => c.igather(send, recv, *root)?.wait(),
                Collective::Scatter { root, .. } => c.iscatter(send, recv, *root)?.wait(),
                Collective::Allgather { .. } => c.iallgather(send, recv)?.wait(),
                Collective::Allgatherv { counts, .. } => c.iallgatherv(send, recv, counts)?.wait(),
                Collective::Alltoall { .. } => c.ialltoall(send, recv)?.wait(),
                Collective::Reduce { root, op, .. } => c.ireduce(send, recv, *op, *root)?.wait(),
                Collective::Allreduce { op, .. } => c.iallreduce(send, recv, *op)?.wait(),
                Collective::ReduceScatter { counts, op, .. } => {
                    c.ireduce_scatter(send, recv, counts, *op)?.wait()
                }
                _ => unreachable!("not a case"),
            }
        };
        go(comm, send, recv).unwrap_or_else(|e| panic!("{coll:?} on rank {me}: {e}"));
    }

    /// Every collective of `Comm`, every algorithm each kind has, against the
    /// simulator's reference; then the independent references of `check_all`,
    /// several collectives outstanding at once, and a split.
    pub(super) fn correct(world: &World) {
        let n = world.size();
        for alg in Algorithm::ALL {
            let mut o = options();
            o.schedule = hpc_collectives::Options::with_algorithm(alg);
            let comm = Comm::with_options(world, o.clone()).unwrap();
            assert!(
                comm.progress_note().contains("DPU"),
                "{}",
                comm.progress_note()
            );
            // Across emulated nodes, through the nodes' proxies.
            assert_eq!(
                world.node_count() > 1,
                comm.progress_note().contains("nodes' DPU proxies"),
                "{}",
                comm.progress_note()
            );
            let me = comm.rank();
            for kind in CollectiveKind::ALL {
                if alg != Algorithm::Auto && !kind.algorithms().contains(&alg) {
                    continue;
                }
                for count in [0usize, 3, 1000] {
                    let Some(coll) = case(kind, n, count) else {
                        continue;
                    };
                    let (send, mut recv) = inputs(&coll, me, n);
                    run(&comm, &coll, &send, &mut recv, false);
                    let want = reference(&coll, me, n, &o.schedule);
                    assert_eq!(recv, want, "{alg} {coll:?} rank {me}/{n}");
                    if matches!(
                        kind,
                        CollectiveKind::Alltoall
                            | CollectiveKind::Allreduce
                            | CollectiveKind::Allgather
                            | CollectiveKind::Broadcast
                    ) {
                        let (send, mut recv) = inputs(&coll, me, n);
                        run(&comm, &coll, &send, &mut recv, true);
                        assert_eq!(recv, want, "scoped {alg} {coll:?} rank {me}/{n}");
                    }
                }
            }
        }
        let comm = Comm::with_options(world, options()).unwrap();
        check_all(&comm, Engine::Proxy);
        // Several outstanding, waited for out of order, and a sub-communicator
        // (served by the same proxies).
        let sub = comm.split((comm.rank() % 2) as u32, 0).unwrap();
        let a = vec![comm.rank() as i64; 3000];
        let mut ra = vec![0i64; 3000];
        let b = vec![1.0f32; 5];
        let mut rb = vec![0.0f32; 5];
        let s2 = vec![comm.rank() as u16; 70_000 * n];
        let mut r2 = vec![0u16; 70_000 * n];
        let r1 = comm.iallreduce(&a, &mut ra, ReduceOp::Sum).unwrap();
        let r3 = comm.ialltoall(&s2, &mut r2).unwrap();
        let rs = sub.iallreduce(&b, &mut rb, ReduceOp::Sum).unwrap();
        hpc_comm::Request::wait_all([r3, rs, r1]).unwrap();
        let nn = n as i64;
        assert!(ra.iter().all(|&x| x == nn * (nn - 1) / 2));
        assert_eq!(rb, vec![sub.size() as f32; 5]);
        for (i, &x) in r2.iter().enumerate() {
            assert_eq!(x as usize, i / 70_000, "alltoall element {i}");
        }
        // A refused collective (an algorithm its kind does not have) is an
        // error naming the proxy and the reason, and the communicator goes on.
        let mut o = options();
        o.schedule = hpc_collectives::Options::with_algorithm(Algorithm::Bruck);
        let odd = Comm::with_options(world, o).unwrap();
        let mut r = vec![0i64; 4];
        if n > 1 {
            let e = odd
                .allreduce(&[1i64; 4], &mut r, ReduceOp::Sum)
                .unwrap_err();
            let text = e.to_string();
            assert!(
                text.contains("DPU proxy refused") && text.contains("bruck"),
                "{text}"
            );
        }
        let mut g = vec![0i64; 4 * n];
        odd.allgather(&[5i64; 4], &mut g).unwrap();
        assert!(g.iter().all(|&x| x == 5));
        // Mismatched counts: a typed error on every rank.
        let count = 4 + comm.rank();
        let mut recv = vec![0i32; count * n];
        if n > 1 {
            let err = comm.allgather(&vec![1i32; count], &mut recv).unwrap_err();
            assert!(matches!(err, Error::CountMismatch { .. }), "{err}");
        }
        comm.barrier().unwrap();
    }

    /// The proxy of this job: rank 0's child.
    fn proxy_pid() -> i32 {
        let kids = super::children();
        assert_eq!(kids.len(), 1, "one child, the proxy: {kids:?}");
        kids[0]
    }

    /// Nothing shared between ranks and proxy: no board, no mapping of the
    /// ranks' memory in the proxy, cross-memory attach denied to it by
    /// seccomp, and (under `HPC_COLL_TEST_NETNS`) another network namespace.
    pub(super) fn isolated(world: &World) {
        let comm = Comm::with_options(world, options()).unwrap();
        let n = comm.size();
        // SharedBufs too: the proxy does not map them here.
        let send = SharedBuf::from_slice(&vec![comm.rank() as u64; 50_000 * n]).unwrap();
        let mut recv = SharedBuf::<u64>::new(50_000 * n).unwrap();
        comm.scope(|s| s.ialltoall(&send, &mut recv)?.wait())
            .unwrap();
        assert!((0..n).all(|r| recv[r * 50_000] == r as u64));
        world.barrier().unwrap();
        if comm.rank() == 0 {
            let me = std::process::id();
            let boards: Vec<_> = std::fs::read_dir("/dev/shm")
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|f| f.starts_with(&format!("hpc-coll-{me}-")))
                .collect();
            assert!(boards.is_empty(), "a board in DPU placement: {boards:?}");
            let pid = proxy_pid();
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            assert!(
                status
                    .lines()
                    .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Seccomp:", "2"]),
                "the proxy runs without its seccomp filter:\n{status}"
            );
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
            assert!(
                !maps.contains("hpc-coll"),
                "the proxy maps a board or a rank's buffer:\n{maps}"
            );
            if std::env::var("HPC_COLL_TEST_NETNS").is_ok() {
                let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/net")).unwrap();
                assert_ne!(
                    ns(&pid.to_string()),
                    ns("self"),
                    "the proxy shares the ranks' network"
                );
            }
        }
        world.barrier().unwrap();
    }

    /// The proxy dies mid-collective (rank 0, which started it, kills it while
    /// the others wait for a broadcast it has not posted yet): every rank's
    /// collective fails with `Stopped("proxy")` well within the timeout, and
    /// so does the next one.
    pub(super) fn proxy_death(world: &World) {
        let mut o = options();
        o.timeout = Some(Duration::from_secs(10));
        let comm = Comm::with_options(world, o).unwrap();
        let mut buf = vec![comm.rank() as u8; 4096];
        comm.bcast(&mut buf, 0).unwrap();
        world.barrier().unwrap();
        let t = Instant::now();
        let err = if comm.rank() == 0 {
            // The others are inside `wait` by now (or soon: their collective
            // cannot finish without this rank's part either way).
            std::thread::sleep(Duration::from_millis(300));
            // SAFETY: plain kill(2) of our own child.
            assert_eq!(unsafe { libc::kill(proxy_pid(), libc::SIGKILL) }, 0);
            comm.bcast(&mut buf, 0).unwrap_err()
        } else {
            comm.bcast(&mut buf, 0).unwrap_err()
        };
        assert!(matches!(err, Error::Stopped("proxy")), "{err}");
        assert!(err.to_string().contains("proxy"), "{err}");
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert!(matches!(
            comm.bcast(&mut buf, 0),
            Err(Error::Stopped("proxy"))
        ));
        world.barrier().unwrap();
    }

    /// A proxy program that does not serve: every rank's communicator fails
    /// with the reason, long before the timeout.
    pub(super) fn no_proxy(world: &World) {
        let t = Instant::now();
        let err = Comm::with_options(world, options())
            .unwrap_err()
            .to_string();
        eprintln!("rank {}: {err}", world.rank());
        assert!(
            err.contains("without serving") && err.contains("serve_env"),
            "{err}"
        );
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }

    /// Collectives in place on registered buffers (the proxy gets and puts
    /// them directly: a registered receive buffer is never copied into by the
    /// rank), mixed with ordinary ones; with another engine the buffers are
    /// ordinary memory.
    pub(super) fn registered(world: &World) {
        let comm = Comm::with_options(world, options()).unwrap();
        let (me, n) = (comm.rank(), comm.size());
        for count in [0usize, 7, 40_000] {
            let ctx = format!("count {count} rank {me}/{n}");
            let mut send = comm.registered_buf::<i64>(n * count).unwrap();
            assert!(send.is_registered());
            for (i, x) in send.iter_mut().enumerate() {
                *x = val(me, i);
            }
            let mut recv = comm.registered_buf::<i64>(n * count).unwrap();
            let plain = alltoall_both(&comm, &send, &mut recv, count, &format!("in place {ctx}"));
            // An ordinary send buffer into a registered receive buffer, blocking.
            let mut sum = comm.registered_buf::<i64>(count).unwrap();
            comm.allreduce(&plain[..count], &mut sum, ReduceOp::Sum)
                .unwrap();
            // Rank i's first block of `plain` is rank 0's block i.
            let want: Vec<i64> = (0..count)
                .map(|k| (0..n).map(|i| val(0, i * count + k)).sum())
                .collect();
            assert_eq!(&sum[..], &want[..], "allreduce {ctx}");
            // The broadcast root's buffer is input and output.
            let mut b = comm.registered_buf::<i64>(count).unwrap();
            if me == n - 1 {
                b.copy_from_slice(&send[..count]);
            }
            comm.bcast(&mut b, n - 1).unwrap();
            assert!((0..count).all(|i| b[i] == val(n - 1, i)), "bcast {ctx}");
            // A staged request on registered buffers works on copies.
            let mut again = comm.registered_buf::<i64>(n * count).unwrap();
            comm.ialltoall(&send, &mut again).unwrap().wait().unwrap();
            assert_eq!(&again[..], &recv[..], "staged alltoall {ctx}");
        }
        let other = Comm::new(world, Engine::Thread).unwrap();
        let b = other.registered_buf::<f32>(10).unwrap();
        assert!(!b.is_registered() && b.iter().all(|&x| x == 0.0));
    }

    /// The DPU proxy of node 1 is killed (SIGKILL, by the rank that started
    /// it) while node 0's ranks are in a collective that waits for node 1:
    /// node 1's ranks fail naming the proxy, node 0's naming node 1, well
    /// within the timeout. Each rank prints its pid and its node's proxy's
    /// (`PIDS`) for the test to check that nothing is left behind.
    pub(super) fn node_death(world: &World) {
        let mut o = options();
        o.timeout = Some(Duration::from_secs(10));
        let comm = Comm::with_options(world, o).unwrap();
        assert!(
            comm.progress_note().contains("nodes' DPU proxies"),
            "{}",
            comm.progress_note()
        );
        super::node_death_with(world, comm);
    }

    /// Rank 0 (node 0) gives up a collective that rank 1 (node 1) has not
    /// posted (its wait times out, its scope cancels it), after node 0's proxy
    /// sent node 1's the messages for it. The cancellation fails it on every
    /// node: node 1's proxy drops those messages, and rank 1, posting it late,
    /// is told so at once rather than completing it with them. Then the
    /// communicator goes on.
    pub(super) fn cancel(world: &World) {
        let mut o = options();
        o.timeout = Some(Duration::from_secs(3));
        let comm = Comm::with_options(world, o).unwrap();
        let me = comm.rank();
        let send = vec![me as u64 + 1; 1000];
        let mut recv = vec![0u64; 2000];
        if me == 0 {
            let err = comm
                .scope(|s| s.iallgather(&send, &mut recv)?.wait())
                .unwrap_err();
            assert!(matches!(err, Error::Timeout { .. }), "{err}");
        }
        // Rank 0 gave it up (its wait, then the scope's, timed out) and sent the
        // cancellation; a moment for it to reach node 1's proxy.
        world.barrier().unwrap();
        if me == 1 {
            std::thread::sleep(Duration::from_secs(1));
            let t = Instant::now();
            let err = comm.allgather(&send, &mut recv).unwrap_err().to_string();
            assert!(err.contains("rank 0 gave collective"), "{err}");
            assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
            assert!(recv.iter().all(|&x| x == 0), "written: {:?}", &recv[..4]);
        }
        // Both at the same collective again.
        comm.allgather(&send, &mut recv).unwrap();
        assert!(recv[..1000].iter().all(|&x| x == 1) && recv[1000..].iter().all(|&x| x == 2));
    }

    /// Posts `coll` on `comm` (not waited for).
    fn post<'a>(
        comm: &'a Comm,
        coll: &Collective,
        send: &'a [i64],
        recv: &'a mut [i64],
    ) -> hpc_comm::Request<'a> {
        let r = hpc_comm::conformance::start(comm, coll, send, recv);
        r.unwrap_or_else(|e| panic!("posting {coll:?} on rank {}: {e}", comm.rank()))
    }

    /// The proxies this rank started: its children, none where a standing
    /// DPU service starts them.
    fn proxies_started() -> usize {
        super::children().len()
    }

    /// Whether this rank is its node's first (the one that starts the
    /// node's proxy).
    fn first_on_node(world: &World) -> bool {
        (0..world.size()).find(|&r| world.node_of(r) == world.node()) == Some(world.rank())
    }

    /// Splits of a DPU-placed communicator share the nodes' proxies: by node,
    /// by parity (in reverse order of rank), unevenly, and a split of a split,
    /// each running every collective against the simulator's results; then
    /// collectives of the parent and of every group in flight at once (posted
    /// in a different order on odd ranks, waited for in reverse); no split
    /// starts a proxy (each node's first rank keeps its one child).
    pub(super) fn split(world: &World) {
        let comm = Comm::with_options(world, options()).unwrap();
        let service = std::env::var_os("HPC_COLL_PROXY_DPU_HOST").is_some();
        let want = usize::from(first_on_node(world) && !service);
        assert_eq!(proxies_started(), want, "before any split");
        let (me, n) = (comm.rank(), comm.size());
        let t = Instant::now();
        let by_node = comm.split(world.node() as u32, 0).unwrap();
        let by_parity = comm.split((me % 2) as u32, -(me as i64)).unwrap();
        let uneven = comm.split(u32::from(me + 1 == n), 0).unwrap();
        let nested = by_parity.split((by_parity.rank() % 2) as u32, 0).unwrap();
        if me == 0 {
            eprintln!("SPLITS 4 on rank 0 in {:?}", t.elapsed());
        }
        assert_eq!(by_node.size(), world.local_size());
        assert_eq!(by_parity.size(), (n + 1 - me % 2) / 2);
        // Reversed: the highest rank of each parity is its rank 0.
        assert_eq!(
            by_parity.world_rank(0),
            (0..n).rev().find(|r| r % 2 == me % 2).unwrap()
        );
        assert_eq!(proxies_started(), want, "a split started a proxy");
        let opts = hpc_collectives::Options::default();
        let subs = [
            ("by node", &by_node),
            ("by parity", &by_parity),
            ("uneven", &uneven),
            ("nested", &nested),
        ];
        for (name, sub) in subs {
            let (r, k) = (sub.rank(), sub.size());
            for kind in CollectiveKind::ALL {
                for count in [3usize, 1000] {
                    let Some(coll) = case(kind, k, count) else {
                        continue;
                    };
                    let (send, mut recv) = inputs(&coll, r, k);
                    run(sub, &coll, &send, &mut recv, false);
                    let want = reference(&coll, r, k, &opts);
                    assert_eq!(recv, want, "{name} {coll:?} rank {r}/{k} (world {me})");
                }
            }
        }
        // Parent and groups in flight at once, each a few collectives, so
        // that the proxies hold several communicators' collectives of the
        // same sequence numbers together.
        // (communicator's index, name, communicator, collective)
        let mut work: Vec<(usize, &str, &Comm, Collective)> = Vec::new();
        for round in 0..2 {
            let count = 500 + round * 1500;
            let all = [("parent", &comm)].into_iter().chain(subs);
            for (ci, (name, c)) in all.enumerate() {
                let k = c.size();
                for kind in [
                    CollectiveKind::Alltoall,
                    CollectiveKind::Allreduce,
                    CollectiveKind::Allgatherv,
                    CollectiveKind::Broadcast,
                ] {
                    work.push((ci, name, c, case(kind, k, count).unwrap()));
                }
            }
        }
        let mut bufs: Vec<(Vec<i64>, Vec<i64>)> = work
            .iter()
            .map(|(_, _, c, coll)| inputs(coll, c.rank(), c.size()))
            .collect();
        let mut order: Vec<usize> = (0..work.len()).collect();
        if me % 2 == 1 {
            // Another interleaving of the communicators (each one's own order
            // kept, as collectives require).
            order.sort_by_key(|&i| (std::cmp::Reverse(work[i].0), i));
        }
        let mut slots: Vec<Option<&mut (Vec<i64>, Vec<i64>)>> = bufs.iter_mut().map(Some).collect();
        let mut reqs = Vec::new();
        for &i in &order {
            let (send, recv) = slots[i].take().unwrap();
            let (_, _, c, coll) = &work[i];
            reqs.push(post(c, coll, send, recv));
        }
        for r in reqs.into_iter().rev() {
            r.wait().unwrap();
        }
        for (i, (_, name, c, coll)) in work.iter().enumerate() {
            let want = reference(coll, c.rank(), c.size(), &opts);
            assert_eq!(
                bufs[i].1,
                want,
                "{name} {coll:?} in flight with the others, rank {}/{} (world {me})",
                c.rank(),
                c.size()
            );
        }
        // A group outlives its parent: the link stays while any uses it.
        drop(comm);
        let mut r = [0i64; 4];
        uneven.allreduce(&[1i64; 4], &mut r, ReduceOp::Sum).unwrap();
        assert_eq!(r, [uneven.size() as i64; 4]);
        assert_eq!(proxies_started(), want, "the proxies at the end");
    }

    /// A killed proxy fails every communicator that uses it: node 1's first
    /// rank kills its node's proxy (its one child, the proxy of the world's
    /// communicator and of its splits); on node 1 the world's communicator,
    /// a group across nodes and the node's own group fail naming the proxy;
    /// on node 0 the first two name node 1, and node 0's own group, which
    /// does not need node 1, goes on.
    pub(super) fn split_death(world: &World) {
        let mut o = options();
        o.timeout = Some(Duration::from_secs(10));
        let comm = Comm::with_options(world, o).unwrap();
        let me = comm.rank();
        let across = comm.split((me / 2) as u32, 0).unwrap();
        let by_node = comm.split(world.node() as u32, 0).unwrap();
        assert!(world.node_count() == 2 && comm.size() == 4);
        let mut r = [0i64; 8];
        across.allreduce(&[1i64; 8], &mut r, ReduceOp::Sum).unwrap();
        by_node
            .allreduce(&[1i64; 8], &mut r, ReduceOp::Sum)
            .unwrap();
        world.barrier().unwrap();
        let t0 = Instant::now();
        if world.node() == 1 {
            if first_on_node(world) {
                let kids = super::children();
                assert_eq!(kids.len(), 1, "one child, the proxy: {kids:?}");
                // SAFETY: plain kill(2) of our own child.
                assert_eq!(unsafe { libc::kill(kids[0], libc::SIGKILL) }, 0);
            }
            std::thread::sleep(Duration::from_millis(300));
            for (name, c) in [("world", &comm), ("across", &across), ("by node", &by_node)] {
                let err = c.allreduce(&[1i64; 8], &mut r, ReduceOp::Sum).unwrap_err();
                assert!(matches!(err, Error::Stopped("proxy")), "{name}: {err}");
                eprintln!("OK {name}: {err}");
            }
        } else {
            std::thread::sleep(Duration::from_millis(300));
            for (name, c) in [("across", &across), ("world", &comm)] {
                let err = c.allreduce(&[1i64; 8], &mut r, ReduceOp::Sum).unwrap_err();
                assert!(matches!(err, Error::NodeLost { node: 1 }), "{name}: {err}");
                eprintln!("OK {name}: {err}");
            }
            by_node
                .allreduce(&[1i64; 8], &mut r, ReduceOp::Sum)
                .unwrap();
            assert_eq!(r, [2; 8]);
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    }

    /// A placement that is neither `host` nor `dpu` is refused by name.
    pub(super) fn refusals(world: &World) {
        let err = Comm::new(world, Engine::Proxy).unwrap_err().to_string();
        assert!(
            err.contains("\"nic\"") && err.contains("host or dpu"),
            "{err}"
        );
    }
}

#[test]
fn dpu_placement_every_collective_and_algorithm_1_to_8_ranks() {
    for n in 1..=8 {
        all_ok("dpu_correct", n);
    }
}

/// DPU placement across emulated nodes: each node's DPU proxy serves its
/// ranks and carries the steps between nodes to the others' (rank r on node
/// r % nodes).
#[test]
fn dpu_placement_spans_nodes() {
    for (n, nodes) in [(2, 2), (3, 2), (4, 4), (5, 3), (8, 2), (8, 4)] {
        let what = format!("dpu_correct: {n} ranks on {nodes} nodes");
        all_ok_on(&what, "dpu_correct", n, nodes, 60.0, &[]);
    }
    // Leaked requests, megabyte messages and many outstanding, mismatched
    // counts, with the proxies of 2 nodes.
    let env = [("HPC_COLL_PROXY_PLACEMENT", "dpu")];
    for scenario in ["safety", "staging", "mismatch"] {
        all_ok_on(
            &format!("{scenario} on 2 nodes"),
            scenario,
            3,
            2,
            60.0,
            &env,
        );
    }
}

#[test]
fn dpu_placement_a_killed_proxy_fails_its_node_and_names_it_to_the_others() {
    // DPU placement makes no segment at all: any file naming a pid of the job
    // is one too many.
    a_killed_proxy_is_named("dpu_node_death", |f, p| f.contains(&format!("-{p}-")));
}

/// Splits in DPU placement (by node, by parity, uneven, nested) give the
/// simulator's results with collectives of parent and groups in flight at
/// once, and start no proxy (1-8 ranks on 1-3 nodes).
#[test]
fn dpu_placement_splits_share_the_node_proxies() {
    for (n, nodes) in [(1, 1), (3, 1), (4, 2), (5, 3), (8, 2)] {
        let t = Instant::now();
        for (r, (ok, err)) in job_on_nodes("dpu_split", n, nodes, 60.0, &[])
            .into_iter()
            .enumerate()
        {
            if let Some(l) = err.lines().find(|l| l.starts_with("SPLITS ")) {
                eprintln!("{n} ranks on {nodes} nodes: {l}");
            }
            assert!(ok, "{n} ranks on {nodes} nodes, rank {r} failed:\n{err}");
        }
        eprintln!("dpu_split x{n} on {nodes}: {:?}", t.elapsed());
    }
}

#[test]
fn dpu_placement_a_killed_proxy_fails_every_communicator_on_it() {
    let t = Instant::now();
    for (r, (ok, err)) in job_on_nodes("dpu_split_death", 4, 2, 10.0, &[])
        .into_iter()
        .enumerate()
    {
        assert!(ok, "rank {r} failed:\n{err}");
        let want = if r % 2 == 1 {
            "the proxy engine stopped"
        } else {
            "node 1 is lost"
        };
        assert!(err.contains(want), "rank {r}: {err}");
    }
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
}

#[test]
fn dpu_placement_a_cancelled_collective_is_dropped_on_every_node() {
    all_ok_on("dpu_cancel on 2 nodes", "dpu_cancel", 2, 2, 20.0, &[]);
}

#[test]
fn dpu_placement_killed_rank_on_another_node_is_named() {
    let env = [
        ("HPC_COLL_TEST_ENGINE", "proxy"),
        ("HPC_COLL_PROXY_PLACEMENT", "dpu"),
    ];
    killed_rank_is_named_by_the_others("", 2, &env);
}

/// Each node's proxy started by a standing DPU service (as `hpc proxy
/// --dpu-service` runs on a DPU) rather than by the node's first rank: the
/// ranks name it in `HPC_COLL_PROXY_DPU_HOST` and prove its key (the file
/// `HPC_COLL_PROXY_DPU_KEY_FILE` names); on 2 nodes. Ranks without the key,
/// or with another, get a clear error and the service starts nothing.
#[test]
fn dpu_placement_proxies_from_a_standing_service() {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let dir = hpc_test_support::TmpDir::new("hpc-dpu", "service");
    let key_file = |name: &str, byte: u8| {
        let p = dir.join(name);
        std::fs::write(&p, [byte; 32]).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p.to_str().unwrap().to_string()
    };
    let (key, other) = (key_file("key", 1), key_file("other", 2));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let started = Arc::new(AtomicUsize::new(0));
    let count = started.clone();
    let exe = std::env::current_exe().unwrap();
    let auth = hpc_comm::proxy::ServiceAuth::Key(
        hpc_comm::proxy::DpuKey::from_file(std::path::Path::new(&key)).unwrap(),
    );
    std::thread::spawn(move || {
        hpc_comm::proxy::dpu_service(listen, auth, move || {
            count.fetch_add(1, Ordering::SeqCst);
            let mut c = Command::new(&exe);
            c.args(["proxy_entry", "--exact", "--nocapture", "--test-threads=1"]);
            c
        })
        .unwrap();
    });
    let at = listen.to_string();
    let env = |key: &str| {
        vec![
            ("HPC_COLL_PROXY_PLACEMENT", "dpu".to_string()),
            ("HPC_COLL_PROXY_DPU_HOST", at.clone()),
            ("HPC_COLL_PROXY_DPU_KEY_FILE", key.to_string()),
            // Not a program that serves: only the service's proxies may.
            ("HPC_COLL_PROXY_CMD", "/bin/false".to_string()),
        ]
    };
    let with = env(&key);
    let with: Vec<(&str, &str)> = with.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // (The mismatch scenario on 3 ranks: its Inline engine part expects a
    // refusal to reach every rank within a node.)
    for (scenario, n) in [("dpu_registered", 4), ("mismatch", 3), ("dpu_split", 4)] {
        let before = started.load(Ordering::SeqCst);
        all_ok_on(scenario, scenario, n, 2, 30.0, &with);
        let count = started.load(Ordering::SeqCst) - before;
        assert!(
            count >= 2,
            "{scenario}: the service started {count} proxies"
        );
        if scenario == "dpu_split" {
            // One communicator, its splits on the same proxies: one per node.
            assert_eq!(count, 2, "{scenario}: the service started {count} proxies");
        }
    }
    // No key, and another key: every rank fails naming the cause; no proxy starts.
    for (key, why) in [
        ("", "requires an authenticated request"),
        (other.as_str(), "refused the request: authentication failed"),
    ] {
        let before = started.load(Ordering::SeqCst);
        let vars = env(key);
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        for (r, (ok, err)) in job_on_nodes("dpu_registered", 2, 2, 30.0, &vars)
            .iter()
            .enumerate()
        {
            assert!(!ok, "rank {r} ran without the service's key");
            assert!(
                err.contains(why) && err.contains("HPC_COLL_PROXY_DPU_KEY_FILE"),
                "rank {r}: {err}"
            );
        }
        assert_eq!(
            started.load(Ordering::SeqCst),
            before,
            "the service started a proxy for ranks without its key"
        );
    }
}

#[test]
fn dpu_placement_shares_nothing_with_the_ranks() {
    all_ok("dpu_isolated", 3);
}

#[test]
fn dpu_placement_dead_proxy_is_reported() {
    all_ok("dpu_proxy_death", 3);
}

#[test]
fn dpu_placement_killed_rank_is_named() {
    let env = [
        ("HPC_COLL_TEST_ENGINE", "proxy"),
        ("HPC_COLL_PROXY_PLACEMENT", "dpu"),
    ];
    killed_rank_is_named_by_the_others("", 1, &env);
}

/// The engine-wide scenarios whose `Proxy` communicators take the placement
/// from the environment: leaked requests, messages of megabytes and many
/// outstanding, mismatched counts.
#[test]
fn dpu_placement_in_the_engine_scenarios() {
    for scenario in ["safety", "staging", "mismatch"] {
        all_ok_with(scenario, 3, 60.0, &[("HPC_COLL_PROXY_PLACEMENT", "dpu")]);
    }
}

#[test]
fn dpu_placement_registered_buffers_in_place() {
    all_ok("dpu_registered", 3);
}

#[test]
fn dpu_placement_proxy_that_does_not_serve_is_named() {
    all_ok_with(
        "dpu_no_proxy",
        3,
        20.0,
        &[("HPC_COLL_PROXY_CMD", "/bin/false")],
    );
}

#[test]
fn dpu_placement_bad_setting_is_refused() {
    all_ok_with(
        "dpu_refusals",
        2,
        20.0,
        &[("HPC_COLL_PROXY_PLACEMENT", "nic")],
    );
}

/// The DPU-placed proxy in a network namespace of its own, reached over a veth
/// pair only, serving a communicator and its splits (needs root;
/// `HPC_TEST_NETNS=1`).
#[test]
fn dpu_placement_proxy_in_its_own_network_namespace() {
    if std::env::var("HPC_TEST_NETNS").as_deref() != Ok("1") {
        println!(
            "skipped: set HPC_TEST_NETNS=1 (needs root) to run the proxy in a network namespace"
        );
        return;
    }
    let id = hpc_runtime::random_u64().expect("random bytes from the kernel") & 0xff_ffff;
    let subnet = (id % 250) as u8 + 1;
    let ns = format!("hpcd{id:06x}");
    let (host_if, dpu_if) = (format!("hd{id:06x}h"), format!("hd{id:06x}d"));
    let (host_ip, dpu_ip) = (format!("10.232.{subnet}.1"), format!("10.232.{subnet}.2"));
    let sh = |args: &[&str]| {
        let st = Command::new(args[0]).args(&args[1..]).status().unwrap();
        assert!(st.success(), "{args:?}");
    };
    struct Cleanup(String, String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            // Deleting the namespace deletes the pair; the second is for a
            // set-up that failed before the move.
            for args in [["netns", "del", &self.0], ["link", "del", &self.1]] {
                let _ = Command::new("ip").args(args).stderr(Stdio::null()).status();
            }
        }
    }
    sh(&["ip", "netns", "add", &ns]);
    let _cleanup = Cleanup(ns.clone(), host_if.clone());
    sh(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
    sh(&[
        "ip", "link", "add", &host_if, "type", "veth", "peer", "name", &dpu_if,
    ]);
    sh(&["ip", "link", "set", &dpu_if, "netns", &ns]);
    sh(&[
        "ip",
        "addr",
        "add",
        &format!("{host_ip}/24"),
        "dev",
        &host_if,
    ]);
    sh(&["ip", "link", "set", &host_if, "up"]);
    sh(&[
        "ip",
        "-n",
        &ns,
        "addr",
        "add",
        &format!("{dpu_ip}/24"),
        "dev",
        &dpu_if,
    ]);
    sh(&["ip", "-n", &ns, "link", "set", &dpu_if, "up"]);
    let exe = std::env::current_exe().unwrap();
    let cmd = format!(
        "ip netns exec {ns} {} proxy_entry --exact --nocapture --test-threads=1",
        exe.display()
    );
    let env = [
        ("HPC_COLL_PROXY_CMD", cmd.as_str()),
        ("HPC_COLL_PROXY_ADDR", host_ip.as_str()),
        ("HPC_COLL_TEST_NETNS", ns.as_str()),
    ];
    for scenario in ["dpu_isolated", "dpu_proxy_death", "dpu_split"] {
        all_ok_with(scenario, 3, 20.0, &env);
    }
}
