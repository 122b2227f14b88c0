//! `hpc selftest`: a launch check that runs under `hpc run`, `mpirun` or `srun`.
//!
//! Every rank joins the world, checks rank/size/node consistency, runs barriers,
//! allgathers and broadcasts with known contents, and verifies the results. It can also
//! fail on purpose (`--fail-rank`) so that failure handling can be tested.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context};
use hpc_runtime::World;

/// How a rank fails on purpose.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailMode {
    /// Exit with `--exit-code` before the first barrier.
    Exit,
    /// Kill itself with SIGKILL before the first barrier.
    Kill,
    /// Never reach the first barrier (sleep for an hour).
    Hang,
}

/// Arguments of `hpc selftest`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    hpc run -n 4 -- hpc selftest --expect-size 4\n  \
    hpc run -n 4 --nodes 2 -- hpc selftest --transport --collectives thread\n  \
    hpc run -n 4 --nodes 2 --proxy -- hpc selftest --collectives proxy --every-algorithm\n  \
    mpirun -n 2 hpc selftest --collectives mpi        (an hpc built with --features mpi)\n  \
    srun --mpi=pmix -N 2 -n 8 hpc selftest --expect-nodes 2 --json\n\n\
    Exit status: 0 every check passed, 2 a check failed.")]
pub struct Args {
    /// Rounds of barrier + allgather + broadcast (0 checks the node map only; at most
    /// 2^40, for jobs that run for days).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Fail if the world size differs (at least 1: no job has fewer ranks).
    #[arg(long)]
    pub expect_size: Option<usize>,
    /// Fail if the number of nodes differs (at least 1: a job of no node was
    /// taken and failed "1 nodes, expected 0" after the world was joined).
    #[arg(long)]
    pub expect_nodes: Option<usize>,
    /// Print one JSON object per rank instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also check the data transport: exchange messages and one-sided puts with every
    /// peer and report the backend chosen for each (shm on the same node, tcp or
    /// verbs across nodes).
    #[arg(long)]
    pub transport: bool,
    /// Bytes per message for `--transport` (the check holds about three times this
    /// per peer; refused when that exceeds the available memory; only with
    /// `--transport`: alone it would be ignored).
    #[arg(long, default_value_t = 65536, requires = "transport")]
    pub transport_bytes: usize,
    /// Also run non-blocking collectives (allreduce, alltoall, broadcast, alltoallv,
    /// reduce-scatter) through hpc-comm with this engine and check them.
    #[arg(long, value_name = "ENGINE", value_enum)]
    pub collectives: Option<super::values::Engine>,
    /// With `--collectives`: check every collective with every algorithm that has a
    /// schedule for it against the simulator's reference, at blocks of 5 and 20,000
    /// elements, and all of them in flight at once (`hpc_comm::conformance`): the
    /// engines' own conformance suite, on this job's nodes. Takes seconds, not
    /// milliseconds.
    #[arg(long, requires = "collectives")]
    pub every_algorithm: bool,
    /// This rank fails on purpose (for testing failure handling); a rank the job
    /// does not have is refused (status 2).
    #[arg(long)]
    pub fail_rank: Option<usize>,
    /// How `--fail-rank` fails (only with `--fail-rank`).
    #[arg(long, value_enum, default_value_t = FailMode::Exit, requires = "fail_rank")]
    pub fail_mode: FailMode,
    /// Exit code for `--fail-mode exit` (1 to 255, default 3: 0 would not be a
    /// failure; only with `--fail-rank` and `--fail-mode exit`: otherwise it would
    /// be ignored).
    #[arg(
        long,
        value_parser = clap::value_parser!(i32).range(1..=255),
        requires = "fail_rank"
    )]
    pub exit_code: Option<i32>,
}

/// The most `--rounds`: a job that runs for days (the cluster tests run one "for
/// ever" and lose a node under it); what a round holds is bounded by
/// [`ROUND_CYCLE`], not by the count.
pub const MAX_ROUNDS: usize = 1 << 40;

/// A round's message grows with the round modulo this, so that its size stays
/// bounded (at most `ranks + ROUND_CYCLE` bytes a rank) however many rounds run.
pub const ROUND_CYCLE: usize = 4096;

/// Bytes the transport check of `size` ranks holds at once with messages of `bytes`:
/// the registered region (one block per rank), a message and a put per peer, and a
/// block to read into.
fn transport_need(bytes: usize, size: usize) -> u128 {
    let (b, n) = (bytes as u128, size.max(1) as u128);
    b * n + 2 * b * (n - 1) + b
}

/// Refuses ranks given different checks (a collective, by the runtime's rule
/// for values every rank must be given alike,
/// [`World::same_on_every_rank`]): one that ran `--collectives` while the
/// others did not failed with "rank 1 finalized before joining allgather" or
/// "allgather round 2: wrong part from rank 0", naming no flag. `--json` and
/// `--fail-*` may differ; so may `--rounds`, whose mismatch the runtime itself
/// reports as a collective a rank never joined, naming the rank that
/// finalized.
fn check_same_checks(world: &World, args: &Args) -> anyhow::Result<()> {
    let none = || "(none)".to_string();
    let checks = [
        ("--transport", args.transport.to_string()),
        (
            "--transport-bytes",
            if args.transport {
                args.transport_bytes.to_string()
            } else {
                none()
            },
        ),
        (
            "--collectives",
            args.collectives.map_or_else(none, |e| e.name().to_string()),
        ),
        ("--every-algorithm", args.every_algorithm.to_string()),
    ];
    world
        .same_on_every_rank("checks", &checks)
        .map_err(|e| match e {
            hpc_runtime::Error::NotTheSame { .. } => anyhow::Error::new(e),
            e => anyhow::Error::new(e).context("comparing the ranks' flags"),
        })
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Runs the self-test on this rank.
pub fn exec(args: Args) -> anyhow::Result<i32> {
    if args.collectives == Some(super::values::Engine::Mpi) && !cfg!(feature = "mpi") {
        bail!(
            "--collectives mpi: this hpc was built without MPI \
             (cargo install hpc-cli --features mpi)"
        );
    }
    super::check_at_most("--rounds", args.rounds, MAX_ROUNDS)?;
    // Hostile pass 20: `--expect-nodes 0` was taken, and every rank failed
    // "1 nodes, expected 0": a job has at least one rank on one node.
    for (flag, v) in [
        ("--expect-size", args.expect_size),
        ("--expect-nodes", args.expect_nodes),
    ] {
        if let Some(v) = v {
            super::check_between(flag, v, 1, usize::MAX)?;
        }
    }
    // A killed or hanging rank has no exit code of its own: the flag would be
    // ignored (the job ended 137 however it was given).
    if let (Some(code), FailMode::Kill | FailMode::Hang) = (args.exit_code, args.fail_mode) {
        return Err(super::UsageError(format!(
            "--exit-code {code} goes with --fail-mode exit; --fail-mode {} ends the rank \
             without one",
            if args.fail_mode == FailMode::Kill {
                "kill"
            } else {
                "hang"
            }
        ))
        .into());
    }
    if args.transport {
        super::check_memory(
            &format!("--transport-bytes {}", args.transport_bytes),
            transport_need(args.transport_bytes, 2),
        )?;
    }
    let t0 = Instant::now();
    let world = World::init().context("joining the world")?;
    hpc_trace::set_rank(world.rank());
    hpc_trace::set_size(world.size());
    let (rank, size) = (world.rank(), world.size());
    let t_init = t0.elapsed();
    if args.transport {
        super::check_memory(
            &format!(
                "--transport-bytes {} with {size} ranks",
                args.transport_bytes
            ),
            transport_need(args.transport_bytes, size),
        )?;
    }

    if let Some(r) = args.fail_rank.filter(|&r| r >= size) {
        // Nothing would fail, and the test would pass for the wrong reason.
        return Err(super::UsageError(format!(
            "--fail-rank {r}: the job has {size} rank(s) (0..={})",
            size - 1
        ))
        .into());
    }
    if args.fail_rank == Some(rank) {
        match args.fail_mode {
            FailMode::Exit => std::process::exit(args.exit_code.unwrap_or(3)),
            FailMode::Kill => {
                let _ = rustix::process::kill_process(
                    rustix::process::getpid(),
                    rustix::process::Signal::KILL,
                );
            }
            FailMode::Hang => std::thread::sleep(std::time::Duration::from_secs(3600)),
        }
    }

    let settings = check_settings(rank);
    let result = (|| -> anyhow::Result<(u128, serde_json::Value, serde_json::Value)> {
        world.barrier().context("first barrier")?;
        let t_barrier = unix_ns();
        check_same_checks(&world, &args)?;
        check_world(&world, &args)?;
        let transport = if args.transport {
            check_transport(&world, args.transport_bytes).context("transport check")?
        } else {
            serde_json::Value::Null
        };
        let collectives = match args.collectives.map(|e| e.name()) {
            Some(engine) => check_collectives(&world, &engine, args.every_algorithm)
                .with_context(|| format!("collectives check ({engine} engine)"))?,
            None => serde_json::Value::Null,
        };
        Ok((t_barrier, transport, collectives))
    })();

    match result {
        Ok((t_barrier, transport, collectives)) => {
            if args.json {
                super::say(
                    &serde_json::json!({
                        "rank": rank, "size": size, "node": world.node(),
                        "node_name": world.nodes().name(world.node()),
                        "nodes": world.node_count(), "local_rank": world.local_rank(),
                        "local_size": world.local_size(), "bootstrap": world.bootstrap().to_string(),
                        "init_ms": t_init.as_secs_f64() * 1e3,
                        "first_barrier_unix_ns": t_barrier.to_string(),
                        "transport": transport,
                        "collectives": collectives,
                        "settings": settings,
                        "ok": true,
                    })
                    .to_string(),
                )?;
            } else {
                let mut text = format!(
                    "selftest ok: rank {rank}/{size} node {} ({}) local {}/{} bootstrap: {}",
                    world.node(),
                    world.nodes().name(world.node()),
                    world.local_rank(),
                    world.local_size(),
                    world.bootstrap()
                );
                if !transport.is_null() {
                    text.push_str(&format!("\ntransport ok: rank {rank} peers {transport}"));
                }
                if !collectives.is_null() {
                    text.push_str(&format!("\ncollectives ok: rank {rank} {collectives}"));
                }
                super::say(&text)?;
            }
            Ok(0)
        }
        Err(e) => {
            say_err(&failure_line(rank, &e));
            if let Some(peer) = e
                .downcast_ref::<hpc_runtime::Error>()
                .and_then(|e| e.rank())
            {
                say_err(&format!("selftest: the failure names rank {peer}"));
            }
            bail!("selftest failed")
        }
    }
}

/// The library's settings, read as a communicator reads them: each value it
/// would warn about and not take as given (`HPC_SPIN_US=fast`, a stage bound
/// that is no number) is said on this rank's standard error, naming the
/// variable, and listed in the JSON (`settings`); as in the library, the
/// default applies and the check goes on (a tuning knob does not fail a
/// job). The selftest read none of them, and a job whose ranks would each
/// run on a default passed it without a word.
fn check_settings(rank: usize) -> Vec<String> {
    let problems = hpc_comm::settings_problems();
    for p in &problems {
        say_err(&hpc_io::message::escape_controls(&format!(
            "selftest: rank {rank}: the library's settings: {p}"
        )));
    }
    problems
}

/// The world's own checks: its size and node count as expected, the same node
/// map on every rank, and `--rounds` rounds of allgathers of every length,
/// broadcasts from every root and barriers, each result verified.
fn check_world(world: &World, args: &Args) -> anyhow::Result<()> {
    let (rank, size) = (world.rank(), world.size());
    if let Some(n) = args.expect_size {
        ensure!(size == n, "size is {size}, expected {n}");
    }
    if let Some(k) = args.expect_nodes {
        ensure!(
            world.node_count() == k,
            "{} nodes, expected {k}",
            world.node_count()
        );
    }
    // Node consistency: everyone agrees on the node map.
    let my_view: Vec<u8> = (0..size)
        .flat_map(|r| (world.node_of(r) as u32).to_le_bytes())
        .collect();
    for (r, v) in world
        .allgather(&my_view)
        .context("node map allgather")?
        .iter()
        .enumerate()
    {
        ensure!(v == &my_view, "rank {r} sees a different node map");
    }
    ensure!(
        world.local_rank() < world.local_size(),
        "local rank out of range"
    );
    for round in 0..args.rounds {
        // Variable-length contributions: rank r sends r+(round mod ROUND_CYCLE)+1
        // bytes of value r.
        let grow = round % ROUND_CYCLE;
        let mine = vec![(rank % 251) as u8; rank + grow + 1];
        let all = world
            .allgather(&mine)
            .with_context(|| format!("allgather round {round}"))?;
        ensure!(all.len() == size, "allgather gave {} parts", all.len());
        for (r, part) in all.iter().enumerate() {
            ensure!(
                part.len() == r + grow + 1 && part.iter().all(|&b| b == (r % 251) as u8),
                "allgather round {round}: wrong part from rank {r}"
            );
        }
        let root = (round + size - 1) % size;
        let payload = format!("round {round} from {root}").into_bytes();
        let got = world
            .broadcast(root, if rank == root { &payload } else { b"ignored" })
            .with_context(|| format!("broadcast round {round}"))?;
        ensure!(got == payload, "broadcast round {round}: wrong payload");
        // Sum of ranks through allgather, as an allreduce would give it.
        let sum: u64 = world
            .allgather(&(rank as u64).to_le_bytes())?
            .iter()
            .map(|b| u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])))
            .sum();
        ensure!(
            sum == (size as u64) * (size as u64 - 1) / 2,
            "sum of ranks is {sum}"
        );
        world
            .barrier()
            .with_context(|| format!("barrier round {round}"))?;
    }
    Ok(())
}

/// Runs an allreduce, an alltoall, a broadcast, an alltoallv and a reduce-scatter,
/// non-blocking, through hpc-comm with `engine`, and verifies the results;
/// returns the engine's progress note.
fn check_collectives(
    world: &World,
    engine: &str,
    every_algorithm: bool,
) -> anyhow::Result<serde_json::Value> {
    use hpc_comm::{Comm, Engine, ReduceOp};
    let engine: Engine = engine
        .parse()
        .map_err(|e| anyhow::anyhow!("--collectives: {e}"))?;
    let conformance = if every_algorithm {
        let r =
            hpc_comm::conformance::check(world, &hpc_comm::CommOptions::new(engine), &[5, 20_000])?;
        serde_json::json!({ "checks": r.checks, "algorithms": r.algorithms })
    } else {
        serde_json::Value::Null
    };
    let comm = Comm::new(world, engine)?;
    let (me, n) = (comm.rank(), comm.size());
    let len = 4099; // odd, so that segmenting algorithms meet a remainder
    let send: Vec<u64> = (0..len).map(|i| (me * len + i) as u64).collect();
    let mut sum = vec![0u64; len];
    let mut a2a_in = vec![0u32; n * 3];
    let a2a_out: Vec<u32> = (0..n * 3).map(|i| (me * 1000 + i) as u32).collect();
    let mut bcast: Vec<f64> = if me == n - 1 {
        (0..len).map(|i| i as f64 * 0.5).collect()
    } else {
        vec![0.0; len]
    };
    {
        let r1 = comm.iallreduce(&send, &mut sum, ReduceOp::Sum)?;
        let r2 = comm.ialltoall(&a2a_out, &mut a2a_in)?;
        let r3 = comm.ibcast(&mut bcast, n - 1)?;
        hpc_comm::Request::wait_all([r1, r2, r3])?;
    }
    for (i, &s) in sum.iter().enumerate() {
        let want: u64 = (0..n).map(|r| (r * len + i) as u64).sum();
        ensure!(s == want, "allreduce element {i}: {s}, expected {want}");
    }
    for p in 0..n {
        for k in 0..3 {
            let want = (p * 1000 + me * 3 + k) as u32;
            let got = a2a_in[p * 3 + k];
            ensure!(
                got == want,
                "alltoall block from rank {p}: {got}, expected {want}"
            );
        }
    }
    ensure!(
        bcast.iter().enumerate().all(|(i, &x)| x == i as f64 * 0.5),
        "broadcast from rank {} is wrong",
        n - 1
    );
    // The v-variants: rank i sends (i + j) % 3 + 1 elements to rank j, and receives
    // j + 1 elements of the reduce-scatter's result.
    let send_counts: Vec<usize> = (0..n).map(|j| (me + j) % 3 + 1).collect();
    let recv_counts: Vec<usize> = (0..n).map(|j| (j + me) % 3 + 1).collect();
    let sendv: Vec<i32> = (0..n)
        .flat_map(|j| std::iter::repeat_n((me * 100 + j) as i32, send_counts[j]))
        .collect();
    let mut recvv = vec![0i32; recv_counts.iter().sum()];
    let rs_counts: Vec<usize> = (1..=n).collect();
    let rs_send: Vec<f32> = (0..rs_counts.iter().sum::<usize>())
        .map(|i| i as f32)
        .collect();
    let mut rs_recv = vec![0f32; rs_counts[me]];
    {
        let r1 = comm.ialltoallv(&sendv, &send_counts, &mut recvv, &recv_counts)?;
        let r2 = comm.ireduce_scatter(&rs_send, &mut rs_recv, &rs_counts, ReduceOp::Sum)?;
        hpc_comm::Request::wait_all([r1, r2])?;
    }
    let want: Vec<i32> = (0..n)
        .flat_map(|j| std::iter::repeat_n((j * 100 + me) as i32, recv_counts[j]))
        .collect();
    ensure!(recvv == want, "alltoallv: {recvv:?}, expected {want:?}");
    let first: usize = rs_counts[..me].iter().sum();
    for (k, &x) in rs_recv.iter().enumerate() {
        let want = ((first + k) * n) as f32;
        ensure!(
            x == want,
            "reduce_scatter element {k}: {x}, expected {want}"
        );
    }
    Ok(serde_json::json!({
        "engine": engine.name(),
        "progress": comm.progress_note(),
        "every_algorithm": conformance,
    }))
}

/// Writes one line to stderr with a single `write`: stderr is unbuffered, and
/// `eprintln!` issues a write per formatted piece, which an MPI launcher forwarding
/// several ranks' stderr interleaves mid-line.
/// The line a rank's failure is said in, the error's control characters
/// escaped and the line cut as the last words' are (hostile pass 20: written
/// as the error's text was, a terminal's escape in it reached the terminal).
fn failure_line(rank: usize, e: &anyhow::Error) -> String {
    let line = format!(
        "selftest failed on rank {rank}: {}",
        hpc_io::message::chain(e.as_ref())
    );
    hpc_io::message::cut_line(&hpc_io::message::escape_controls(&line)).into_owned()
}

fn say_err(line: &str) {
    use std::io::Write;
    let mut l = String::with_capacity(line.len() + 1);
    l.push_str(line);
    l.push('\n');
    let _ = std::io::stderr().write_all(l.as_bytes());
}

/// A byte pattern that depends on sender, receiver and position, so misrouted or
/// shifted data is caught.
fn pattern(from: usize, to: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64 * 31 + from as u64 * 7 + to as u64 * 13) as u8)
        .collect()
}

/// Sends a message to and puts a block into every peer, verifies what arrives, and
/// returns `{peer: backend}`.
fn check_transport(world: &World, bytes: usize) -> anyhow::Result<serde_json::Value> {
    use hpc_rdma::Transport;
    let (me, n) = (world.rank(), world.size());
    let t = Transport::new(world)?;
    let region = t.register(bytes * n.max(1))?;
    let keys = t.exchange_keys(world, &region)?;
    let mut ops = Vec::new();
    for p in (0..n).filter(|&p| p != me) {
        ops.push(t.send(p, 7, pattern(me, p, bytes))?);
        ops.push(t.put(pattern(me, p, bytes), &keys[p], (me * bytes) as u64)?);
    }
    let recvs: Vec<(usize, hpc_rdma::OpId)> = (0..n)
        .filter(|&p| p != me)
        .map(|p| Ok((p, t.recv(p, 7)?)))
        .collect::<anyhow::Result<_>>()?;
    for (p, op) in recvs {
        let got = t.wait(op)?.into_bytes();
        ensure!(
            got == pattern(p, me, bytes),
            "message from rank {p} is corrupt ({} bytes)",
            got.len()
        );
    }
    t.wait_all(&ops)?;
    // Every put completed at its target before the barrier, so all blocks are here.
    world.barrier()?;
    let mut block = vec![0u8; bytes];
    for p in (0..n).filter(|&p| p != me) {
        region.read(p * bytes, &mut block)?;
        ensure!(
            block == pattern(p, me, bytes),
            "put from rank {p} is corrupt"
        );
    }
    world.barrier()?;
    let mut peers = serde_json::Map::new();
    for p in (0..n).filter(|&p| p != me) {
        let b = t.backend_of(p).map_or("none", |b| b.name());
        peers.insert(p.to_string(), serde_json::Value::from(b));
    }
    Ok(serde_json::Value::Object(peers))
}

#[cfg(test)]
mod tests {
    /// Hostile pass 20: the failure line was written as the error's text was:
    /// a terminal's escape in it reached the terminal raw.
    #[test]
    fn a_failure_line_shows_control_characters_escaped() {
        let e = anyhow::anyhow!("peer said \u{1b}[31mred\u{7}").context("joining the world");
        assert_eq!(
            super::failure_line(3, &e),
            "selftest failed on rank 3: joining the world: peer said \\u{1b}[31mred\\u{7}"
        );
    }
}
