//! Prints the schedules of a collective, for the book and for debugging.
//!
//! ```text
//! cargo run -p hpc-collectives --example show_schedule -- allreduce rabenseifner 8 1024
//! cargo run -p hpc-collectives --example show_schedule -- allgather ring 4 16 --rank 1
//! ```
//!
//! Arguments: `COLLECTIVE ALGORITHM RANKS COUNT [--rank R] [--root R]
//! [--dtype T] [--op OP]`. `COUNT` is in elements of `--dtype` (default
//! `u8`, so bytes; `f32` for reductions). `ALGORITHM` may be `auto`. For
//! the v-variants every rank gets `COUNT` elements. Prints every rank's
//! schedule (or just `--rank`) and a traffic summary from the simulator.

use std::process::ExitCode;

use hpc_collectives::sim::{self, RankBuffers};
use hpc_collectives::{Algorithm, Collective, CollectiveKind, DataType, Options, ReduceOp};

/// The most ranks shown (every rank's schedule is built and printed).
const MAX_RANKS: usize = 65536;
/// The most bytes of all ranks' buffers the simulation of the traffic holds.
const MAX_SIM_BYTES: usize = 1 << 30;

fn usage() -> ExitCode {
    eprintln!(
        "usage: show_schedule COLLECTIVE ALGORITHM RANKS COUNT [--rank R] [--root R] [--dtype T] [--op OP]\n\
         collectives: barrier broadcast gather scatter allgather allgatherv alltoall alltoallv\n\
         \x20            reduce allreduce reduce_scatter_block reduce_scatter\n\
         algorithms:  auto dissemination binomial scatter-allgather ring recursive-doubling\n\
         \x20            bruck pairwise rabenseifner"
    );
    ExitCode::from(2)
}

fn parse_dtype(s: &str) -> Option<DataType> {
    DataType::ALL.into_iter().find(|d| d.name() == s)
}

fn parse_op(s: &str) -> Option<ReduceOp> {
    ReduceOp::BUILTIN.into_iter().find(|o| o.to_string() == s)
}

fn main() -> ExitCode {
    // Arguments that are not UTF-8 are a usage error, not a panic.
    let Ok(args) = std::env::args_os()
        .skip(1)
        .map(|a| a.into_string())
        .collect::<Result<Vec<String>, _>>()
    else {
        eprintln!("error: an argument is not UTF-8 text");
        return usage();
    };
    if args.len() < 4 {
        return usage();
    }
    let (Ok(kind), Ok(algorithm), Ok(size), Ok(count)) = (
        args[0].parse::<CollectiveKind>(),
        args[1].parse::<Algorithm>(),
        args[2].parse::<usize>(),
        args[3].parse::<usize>(),
    ) else {
        return usage();
    };
    let reducing = matches!(
        kind,
        CollectiveKind::Reduce
            | CollectiveKind::Allreduce
            | CollectiveKind::ReduceScatter
            | CollectiveKind::ReduceScatterBlock
    );
    let (mut only_rank, mut root): (Option<usize>, usize) = (None, 0);
    let mut dtype = if reducing {
        DataType::F32
    } else {
        DataType::U8
    };
    let mut op = ReduceOp::Sum;
    let mut rest = args[4..].iter();
    while let Some(flag) = rest.next() {
        let Some(val) = rest.next() else {
            return usage();
        };
        match (flag.as_str(), val) {
            // A value that is not a rank is refused, never read as "every rank"
            // or as rank 0.
            ("--rank", v) => match v.parse() {
                Ok(r) => only_rank = Some(r),
                Err(_) => return usage(),
            },
            ("--root", v) => match v.parse() {
                Ok(r) => root = r,
                Err(_) => return usage(),
            },
            ("--dtype", v) => match parse_dtype(v) {
                Some(d) => dtype = d,
                None => return usage(),
            },
            ("--op", v) => match parse_op(v) {
                Some(o) => op = o,
                None => return usage(),
            },
            _ => return usage(),
        }
    }

    if size > MAX_RANKS {
        eprintln!("error: RANKS is {size}; at most {MAX_RANKS} are shown");
        return ExitCode::from(2);
    }
    let coll = match kind {
        CollectiveKind::Barrier => Collective::Barrier,
        CollectiveKind::Broadcast => Collective::Broadcast { root, count, dtype },
        CollectiveKind::Gather => Collective::Gather { root, count, dtype },
        CollectiveKind::Scatter => Collective::Scatter { root, count, dtype },
        CollectiveKind::Allgather => Collective::Allgather { count, dtype },
        CollectiveKind::Allgatherv => Collective::Allgatherv {
            counts: vec![count; size],
            dtype,
        },
        CollectiveKind::Alltoall => Collective::Alltoall { count, dtype },
        CollectiveKind::Alltoallv => Collective::Alltoallv {
            send_counts: vec![count; size],
            recv_counts: vec![count; size],
            dtype,
        },
        CollectiveKind::Reduce => Collective::Reduce {
            root,
            count,
            dtype,
            op,
        },
        CollectiveKind::Allreduce => Collective::Allreduce { count, dtype, op },
        CollectiveKind::ReduceScatterBlock => Collective::ReduceScatterBlock { count, dtype, op },
        CollectiveKind::ReduceScatter => Collective::ReduceScatter {
            counts: vec![count; size],
            dtype,
            op,
        },
    };
    if let Err(e) = coll.validate(size) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    // The simulator holds every rank's buffers: bound them before anything is
    // allocated (an alltoall of a large COUNT over many ranks would ask for
    // terabytes).
    let total = (0..size).try_fold(0usize, |all, r| {
        let (s, rv) = coll.buffer_bytes(r, size);
        all.checked_add(s)?.checked_add(rv)
    });
    if total.is_none_or(|t| t > MAX_SIM_BYTES) {
        eprintln!(
            "error: the ranks' buffers of COUNT {count} over {size} ranks exceed the {MAX_SIM_BYTES} bytes this simulation holds"
        );
        return ExitCode::from(2);
    }
    let opts = Options::with_algorithm(algorithm);
    let schedules: Result<Vec<_>, _> = (0..size).map(|r| coll.schedule(r, size, &opts)).collect();
    let schedules = match schedules {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    for s in &schedules {
        if only_rank.is_none_or(|r: usize| r == s.rank) {
            println!("{s}");
        }
    }
    // Run it once in the simulator (zeroed buffers) for a traffic summary.
    let inputs = (0..size)
        .map(|r| {
            let (s, rv) = coll.buffer_bytes(r, size);
            RankBuffers {
                send: vec![0; s],
                recv: vec![0; rv],
            }
        })
        .collect();
    match sim::run_with(&schedules, inputs, &Default::default()) {
        Ok(o) => println!(
            "simulated: {} rounds, {} messages, {} bytes total, {} bytes max per rank",
            o.stats.max_rounds, o.stats.messages, o.stats.bytes, o.stats.max_bytes_per_rank
        ),
        Err(e) => {
            eprintln!("simulation failed: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
