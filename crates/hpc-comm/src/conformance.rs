//! A conformance check that runs on a real job: every collective [`Comm`]
//! offers, with every algorithm that has a schedule for it, on the engine and
//! placement the job asks for, checked element by element against the
//! simulator's reference ([`hpc_collectives::sim`]).
//!
//! The engines' tests run it on emulated nodes; `hpc selftest --collectives
//! ENGINE --every-algorithm` runs it under `hpc run`, `mpirun` or `srun` on a
//! real cluster, so that a site can check the engines across its own nodes
//! (and, with the Proxy engine in DPU placement, its DPUs) before a user's job
//! depends on them.
//!
//! Each rank computes the reference for the whole job itself (the simulator
//! runs every rank's schedule over the same inputs), so nothing but the
//! collective under test crosses the network. The receive buffers start with
//! a pattern (`-7`), so a region that a schedule should leave alone but writes
//! shows as a mismatch.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use hpc_comm::{conformance, CommOptions, Engine};
//! let world = hpc_runtime::World::init()?;
//! let report = conformance::check(&world, &CommOptions::new(Engine::Thread), &[5, 20_000])?;
//! println!("{} collectives agree with the simulator", report.checks);
//! # Ok(())
//! # }
//! ```

use hpc_collectives::{Algorithm, Collective, DataType, Options};
use hpc_runtime::World;

use crate::{Comm, CommOptions, ReduceOp, Request};

/// What [`check`] verified on this rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// Collectives whose receive buffer matched the simulator's, element by element.
    pub checks: usize,
    /// Algorithms run (each on a communicator of its own).
    pub algorithms: usize,
}

/// Why [`check`] failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The engine refused or failed a call.
    #[error("{what}: {source}")]
    Comm {
        /// The collective, algorithm and size that failed.
        what: String,
        /// The engine's error.
        #[source]
        source: crate::Error,
    },
    /// A collective completed with a result other than the simulator's.
    #[error(
        "{what}: element {index} is {got}, the simulator's reference is {want} \
         ({wrong} of {len} elements differ)"
    )]
    Mismatch {
        /// The collective, algorithm, size and rank.
        what: String,
        /// The first element that differs.
        index: usize,
        /// Its value.
        got: i64,
        /// The reference's value.
        want: i64,
        /// How many elements differ.
        wrong: usize,
        /// The receive buffer's length in elements.
        len: usize,
    },
}

/// Element `i` of rank `r`'s send buffer.
fn val(r: usize, i: usize) -> i64 {
    (r * 1000 + i) as i64
}

/// Every collective `Comm` offers, as rank `me` of `n` calls it with blocks of
/// about `c` elements (`i64`): roots and the v-variants' counts differ between
/// ranks and collectives, so that a schedule that confuses them shows.
pub fn collectives(me: usize, n: usize, c: usize) -> Vec<Collective> {
    let dtype = DataType::I64;
    let sum = ReduceOp::Sum;
    vec![
        Collective::Barrier,
        Collective::Broadcast {
            root: c % n,
            count: c,
            dtype,
        },
        Collective::Gather {
            root: (c + 1) % n,
            count: c,
            dtype,
        },
        Collective::Scatter {
            root: (c + 2) % n,
            count: c,
            dtype,
        },
        Collective::Allgather { count: c, dtype },
        Collective::Allgatherv {
            counts: (0..n).map(|r| r % 3 + c).collect(),
            dtype,
        },
        Collective::Alltoall { count: c, dtype },
        Collective::Alltoallv {
            send_counts: (0..n).map(|j| (me + j) % 3 + c).collect(),
            recv_counts: (0..n).map(|i| (i + me) % 3 + c).collect(),
            dtype,
        },
        Collective::Reduce {
            root: n - 1,
            count: c,
            dtype,
            op: sum,
        },
        Collective::Allreduce {
            count: c,
            dtype,
            op: sum,
        },
        Collective::ReduceScatter {
            counts: (0..n).map(|r| c + r % 2).collect(),
            dtype,
            op: sum,
        },
    ]
}

/// Rank `r`'s buffers for `coll`: its send buffer, and its receive buffer as
/// it starts (the root's data for a broadcast, the pattern `-7` elsewhere, so
/// that a region written by mistake shows).
pub fn inputs(coll: &Collective, r: usize, n: usize) -> (Vec<i64>, Vec<i64>) {
    let (s, rl) = coll.buffer_bytes(r, n);
    let send = (0..s / 8).map(|i| val(r, i)).collect();
    let recv = match coll {
        Collective::Broadcast { root, .. } if *root == r => {
            (0..rl / 8).map(|i| val(r, i)).collect()
        }
        _ => vec![-7; rl / 8],
    };
    (send, recv)
}

/// Starts `coll` (one of [`collectives`]) on `comm` through its public call.
pub fn start<'a>(
    comm: &'a Comm,
    coll: &Collective,
    send: &'a [i64],
    recv: &'a mut [i64],
) -> crate::Result<Request<'a>> {
    match coll {
        Collective::Barrier => comm.ibarrier(),
        Collective::Broadcast { root, .. } => comm.ibcast(recv, *root),
        Collective::Gather { root, .. } => comm.igather(send, recv, *root),
        Collective::Scatter { root, .. } => comm.iscatter(send, recv, *root),
        Collective::Allgather { .. } => comm.iallgather(send, recv),
        Collective::Allgatherv { counts, .. } => comm.iallgatherv(send, recv, counts),
        Collective::Alltoall { .. } => comm.ialltoall(send, recv),
        Collective::Alltoallv {
            send_counts,
            recv_counts,
            ..
        } => comm.ialltoallv(send, send_counts, recv, recv_counts),
        Collective::Reduce { root, op, .. } => comm.ireduce(send, recv, *op, *root),
        Collective::Allreduce { op, .. } => comm.iallreduce(send, recv, *op),
        Collective::ReduceScatter { counts, op, .. } => {
            comm.ireduce_scatter(send, recv, counts, *op)
        }
        other => Err(crate::Error::Unsupported(format!(
            "{} has no call of its own on Comm",
            other.kind()
        ))),
    }
}

/// The simulator's receive buffer of rank `me` of `n` for the `i`-th
/// collective of [`collectives`] with blocks of `c`, under `opts`; `None`
/// where the algorithm has no schedule for it.
pub fn reference(i: usize, c: usize, me: usize, n: usize, opts: &Options) -> Option<Vec<i64>> {
    reference_with(|r| collectives(r, n, c).swap_remove(i), me, n, opts)
}

/// The simulator's receive buffer of rank `me` of `n` for a collective that
/// rank `r` calls as `coll_of(r)`, with the [`inputs`] of each rank, under
/// `opts`; `None` where the algorithm has no schedule for it.
pub fn reference_with(
    coll_of: impl Fn(usize) -> Collective,
    me: usize,
    n: usize,
    opts: &Options,
) -> Option<Vec<i64>> {
    let mut scheds = Vec::with_capacity(n);
    let mut ins = Vec::with_capacity(n);
    for r in 0..n {
        let coll = coll_of(r);
        scheds.push(coll.schedule(r, n, opts).ok()?);
        let (send, recv) = inputs(&coll, r, n);
        let bytes = |v: Vec<i64>| v.iter().flat_map(|x| x.to_ne_bytes()).collect();
        ins.push(hpc_collectives::sim::RankBuffers {
            send: bytes(send),
            recv: bytes(recv),
        });
    }
    // The schedules come from the crate's own builders: one the simulator
    // refuses is a bug of the builder, not of the engine under test.
    let out = hpc_collectives::sim::run(&scheds, ins)
        .unwrap_or_else(|e| panic!("the simulator refused a schedule of the crate: {e}"));
    Some(
        out[me]
            .chunks_exact(8)
            .map(|w| i64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
            .collect(),
    )
}

/// Compares `got` with `want`: `Ok` if equal, else the first difference.
fn compare(what: impl FnOnce() -> String, got: &[i64], want: &[i64]) -> Result<(), CheckError> {
    if got == want {
        return Ok(());
    }
    let wrong =
        got.iter().zip(want).filter(|(a, b)| a != b).count() + got.len().abs_diff(want.len());
    let index = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    Err(CheckError::Mismatch {
        what: what(),
        index,
        got: got.get(index).copied().unwrap_or(i64::MIN),
        want: want.get(index).copied().unwrap_or(i64::MIN),
        wrong,
        len: want.len(),
    })
}

/// Runs every collective of [`collectives`] with every algorithm that has a
/// schedule for it, at each block size of `counts`, on communicators made
/// from `world` with `base` (its engine, placement and knobs; the algorithm
/// is replaced), and compares each result with the simulator's. With the
/// default selection (`Auto`) it also starts every collective at once and
/// waits for them in reverse order, which checks that the engine matches
/// messages by collective and step rather than by arrival.
///
/// Collective: every rank of `world` must call it with the same arguments.
/// Returns at the first failure on this rank (the others then fail on the
/// same collective, or with the engine's error for a peer that stopped).
pub fn check(world: &World, base: &CommOptions, counts: &[usize]) -> Result<Report, CheckError> {
    let mut report = Report {
        checks: 0,
        algorithms: 0,
    };
    for alg in Algorithm::ALL {
        let schedule = Options {
            algorithm: alg,
            ..base.schedule
        };
        let mut opts = base.clone();
        opts.schedule = schedule;
        let comm = Comm::with_options(world, opts).map_err(|source| CheckError::Comm {
            what: format!("making a communicator for {alg}"),
            source,
        })?;
        let (me, n) = (comm.rank(), comm.size());
        report.algorithms += 1;
        for &c in counts {
            for (i, coll) in collectives(me, n, c).iter().enumerate() {
                let Some(want) = reference(i, c, me, n, &schedule) else {
                    continue;
                };
                let what = || format!("{} with {alg}, {c} elements, rank {me} of {n}", coll.kind());
                let (send, mut recv) = inputs(coll, me, n);
                start(&comm, coll, &send, &mut recv)
                    .and_then(Request::wait)
                    .map_err(|source| CheckError::Comm {
                        what: what(),
                        source,
                    })?;
                compare(what, &recv, &want)?;
                report.checks += 1;
            }
        }
        if alg == Algorithm::Auto {
            report.checks += all_in_flight(&comm, &schedule, counts.iter().copied().max())?;
        }
    }
    Ok(report)
}

/// Every collective of [`collectives`] in flight at once (blocks of `c`, at
/// most 700 elements), waited for in reverse order; the number checked.
fn all_in_flight(comm: &Comm, opts: &Options, c: Option<usize>) -> Result<usize, CheckError> {
    let Some(c) = c else { return Ok(0) };
    let c = c.min(700);
    let (me, n) = (comm.rank(), comm.size());
    let colls = collectives(me, n, c);
    let mut bufs: Vec<(Vec<i64>, Vec<i64>)> = colls.iter().map(|k| inputs(k, me, n)).collect();
    let what = || format!("every collective in flight at once, {c} elements, rank {me} of {n}");
    {
        let mut reqs = Vec::with_capacity(colls.len());
        for (coll, (send, recv)) in colls.iter().zip(bufs.iter_mut()) {
            reqs.push(
                start(comm, coll, send, recv).map_err(|source| CheckError::Comm {
                    what: what(),
                    source,
                })?,
            );
        }
        while let Some(r) = reqs.pop() {
            r.wait().map_err(|source| CheckError::Comm {
                what: what(),
                source,
            })?;
        }
    }
    for (i, (coll, (_, recv))) in colls.iter().zip(&bufs).enumerate() {
        if let Some(want) = reference(i, c, me, n, opts) {
            compare(|| format!("{} ({})", coll.kind(), what()), recv, &want)?;
        }
    }
    Ok(colls.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_of_an_allreduce_is_the_sum() {
        let n = 3;
        let i = collectives(0, n, 4)
            .iter()
            .position(|c| matches!(c, Collective::Allreduce { .. }))
            .unwrap();
        let want: Vec<i64> = (0..4).map(|k| (0..n).map(|r| val(r, k)).sum()).collect();
        for me in 0..n {
            let got = reference(i, 4, me, n, &Options::default()).unwrap();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn an_algorithm_without_a_schedule_has_no_reference() {
        // Bruck has no broadcast.
        assert!(reference(1, 4, 0, 3, &Options::with_algorithm(Algorithm::Bruck)).is_none());
    }

    #[test]
    fn a_mismatch_names_the_first_difference_and_counts_the_rest() {
        let e = compare(|| "x".into(), &[1, 2, 9, 9], &[1, 2, 3, 4]).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("element 2 is 9"), "{text}");
        assert!(text.contains("reference is 3"), "{text}");
        assert!(text.contains("2 of 4 elements differ"), "{text}");
        assert!(compare(|| "x".into(), &[1], &[1]).is_ok());
    }
}
