//! Native collectives as plans: `hpc-collectives` schedules mapped onto
//! device memory operations.
//!
//! A [`Plan`] is what one rank does in a native collective: [`Phase`]s of
//! [`Op`]s over byte ranges ([`Loc`]) of three buffers: the user's input,
//! the user's output, and the rank's *window*, a device buffer that the
//! other ranks of the node can write (CUDA IPC) or that the host transport
//! fills (other nodes).
//!
//! The plans are built from the ring reduce-scatter and ring allgather
//! schedules of `hpc-collectives` (allreduce is one then the other, on
//! chunks from [`chunk::split_aligned`](crate::chunk::split_aligned)):
//!
//! * a schedule's `Send` on rank `a` and the matching `Recv` on rank `b`
//!   become a *push*: [`Op::Put`] on `a` writes straight into `b`'s window,
//!   and [`Op::Land`] on `b` marks where the data arrives (for the host
//!   transport it is the receive). Receive regions therefore always lie in
//!   the window;
//! * `Copy` and `Reduce` become device copies and reduction-kernel launches;
//! * the local steps before a communication round and that round form one
//!   phase; phases are separated by an inter-rank barrier (stream
//!   synchronisation, then `World::barrier`), which orders every push after
//!   the target's earlier use of the landing region and every use of landed
//!   data after its push.
//!
//! Execution contract: phases run in order; within a phase each rank runs
//! its ops in the listed order on its stream (local ops first, then puts);
//! a barrier of all ranks ends every phase, the last one included (the
//! next collective reuses the windows). Plans are verified on host memory
//! by [`run_on_host`], with the ranks of each phase run in forward and in
//! reverse order so that a missing barrier shows up as a wrong result.

use hpc_collectives::algo::{allgather, reduce_scatter};
use hpc_collectives::{apply_reduce, BufferId, Region, Schedule, Step};

use crate::bandwidth::CollKind;
use crate::chunk::{offsets, split_aligned};
use crate::error::{GpuError, Result};
use crate::types::{Dtype, GpuOp};

/// Alignment of the scratch part of the window.
const WINDOW_ALIGN: usize = 256;

/// A buffer of one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Buf {
    /// The user's input (read only).
    Input,
    /// The user's output (written only by local copies).
    Output,
    /// The rank's window: landing area and scratch, writable by peers.
    Window,
}

/// A byte range of one of a rank's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Loc {
    /// The buffer.
    pub buf: Buf,
    /// Offset in bytes.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

impl Loc {
    /// `buf[offset..offset + len]`.
    pub const fn new(buf: Buf, offset: usize, len: usize) -> Self {
        Self { buf, offset, len }
    }

    /// One past the last byte; `usize::MAX` where `offset + len` is beyond it
    /// (as `hpc_collectives`' `Region::end`: the sum panicked with "attempt to
    /// add with overflow").
    pub const fn end(&self) -> usize {
        self.offset.saturating_add(self.len)
    }

    /// Whether two ranges share a byte.
    pub fn overlaps(&self, other: &Loc) -> bool {
        self.buf == other.buf
            && self.len > 0
            && other.len > 0
            && self.offset < other.end()
            && other.offset < self.end()
    }
}

/// One operation of a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Local device copy `dst = src`.
    Copy {
        /// Source.
        src: Loc,
        /// Destination.
        dst: Loc,
    },
    /// Local reduction `dst = dst ⊕ src` (the plan's op and type).
    Reduce {
        /// Operand read.
        src: Loc,
        /// Operand read and written.
        dst: Loc,
    },
    /// Push local `src` into the window of rank `peer` at `dst`.
    Put {
        /// Target rank.
        peer: usize,
        /// Local source.
        src: Loc,
        /// Range of the peer's window.
        dst: Loc,
    },
    /// Data from rank `peer` arrives in this rank's window at `dst` during
    /// this phase (the other side of that peer's [`Op::Put`], in the same
    /// order as the peer lists its puts to this rank).
    Land {
        /// Source rank.
        peer: usize,
        /// Range of this rank's window.
        dst: Loc,
    },
}

/// Ops that run between two barriers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Phase {
    /// In execution order.
    pub ops: Vec<Op>,
}

/// One rank's program for one native collective.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The collective.
    pub kind: CollKind,
    /// This rank.
    pub rank: usize,
    /// Number of ranks.
    pub size: usize,
    /// Element type.
    pub dtype: Dtype,
    /// Reduction (for reductions).
    pub op: Option<GpuOp>,
    /// Bytes read from the input.
    pub input_bytes: usize,
    /// Bytes written to the output.
    pub output_bytes: usize,
    /// Window size needed, in bytes (the same on every rank).
    pub window_bytes: usize,
    /// The phases.
    pub phases: Vec<Phase>,
}

impl Plan {
    /// Iterates over all ops.
    pub fn ops(&self) -> impl Iterator<Item = &Op> {
        self.phases.iter().flat_map(|p| p.ops.iter())
    }

    /// Number of barriers the plan costs (one per phase).
    pub fn barriers(&self) -> usize {
        self.phases.len()
    }
}

/// A schedule step with buffers resolved.
#[derive(Debug, Clone, Copy)]
enum MStep {
    Copy(Loc, Loc),
    Reduce(Loc, Loc),
    Send(usize, Loc, u32),
    Recv(usize, Loc, u32),
}

impl MStep {
    fn is_comm(&self) -> bool {
        matches!(self, MStep::Send(..) | MStep::Recv(..))
    }
}

/// Resolves a schedule's regions with `map`; drops self-copies.
fn map_schedule(
    s: &Schedule,
    tag_base: u32,
    map: impl Fn(Region) -> Loc,
) -> Result<Vec<Vec<MStep>>> {
    let mut rounds = Vec::new();
    for round in &s.rounds {
        let mut out = Vec::new();
        for step in &round.steps {
            match *step {
                Step::Copy { src, dst } => {
                    let (s, d) = (map(src), map(dst));
                    if s != d && s.len > 0 {
                        out.push(MStep::Copy(s, d));
                    }
                }
                Step::Reduce { src, dst, .. } => out.push(MStep::Reduce(map(src), map(dst))),
                Step::Send { peer, region, tag } => {
                    out.push(MStep::Send(peer, map(region), tag_base + tag))
                }
                Step::Recv { peer, region, tag } => {
                    let l = map(region);
                    if l.buf != Buf::Window {
                        return Err(GpuError::Plan(format!(
                            "a receive of rank {} lands in {:?}, not in the window",
                            s.rank, l.buf
                        )));
                    }
                    out.push(MStep::Recv(peer, l, tag_base + tag))
                }
            }
        }
        rounds.push(out);
    }
    Ok(rounds)
}

/// One rank's rounds grouped into (local ops, comm steps) segments.
struct Segment {
    local: Vec<MStep>,
    comm: Vec<MStep>,
}

fn segments(rounds: Vec<Vec<MStep>>) -> Vec<Segment> {
    let mut segs = Vec::new();
    let mut local = Vec::new();
    for round in rounds {
        if round.iter().any(MStep::is_comm) {
            let (comm, loc): (Vec<_>, Vec<_>) = round.into_iter().partition(MStep::is_comm);
            local.extend(loc);
            segs.push(Segment {
                local: std::mem::take(&mut local),
                comm,
            });
        } else {
            local.extend(round);
        }
    }
    if !local.is_empty() {
        segs.push(Segment {
            local,
            comm: Vec::new(),
        });
    }
    segs
}

/// [`phases_from`] with each rank copying the first `out` bytes of its window to its
/// output at the end; no phases at all where a rank's block is empty (`bytes == 0`).
fn phases_to_output(
    per_rank: Vec<Vec<Vec<MStep>>>,
    bytes: usize,
    out: usize,
) -> Result<Vec<Vec<Phase>>> {
    let size = per_rank.len();
    if bytes == 0 {
        return Ok(vec![Vec::new(); size]);
    }
    let tail = vec![
        vec![Op::Copy {
            src: Loc::new(Buf::Window, 0, out),
            dst: Loc::new(Buf::Output, 0, out),
        }];
        size
    ];
    phases_from(per_rank, &tail)
}

/// Turns every rank's mapped rounds into phases: matches sends with
/// receives, appends `tail` (per rank) to the last phase, and splits a
/// phase whose incoming pushes would race with its local ops.
fn phases_from(per_rank: Vec<Vec<Vec<MStep>>>, tail: &[Vec<Op>]) -> Result<Vec<Vec<Phase>>> {
    let size = per_rank.len();
    let segs: Vec<Vec<Segment>> = per_rank.into_iter().map(segments).collect();
    let comm_count = |s: &Vec<Segment>| s.iter().filter(|g| !g.comm.is_empty()).count();
    let nphases = segs.iter().map(Vec::len).max().unwrap_or(0);
    for (r, s) in segs.iter().enumerate() {
        if comm_count(s) != comm_count(&segs[0]) {
            return Err(GpuError::Plan(format!(
                "rank {r} has {} communication rounds, rank 0 has {}",
                comm_count(s),
                comm_count(&segs[0])
            )));
        }
    }
    let mut out: Vec<Vec<Phase>> = vec![Vec::new(); size];
    for j in 0..nphases {
        let mut phase: Vec<(Vec<Op>, Vec<Op>)> = vec![(Vec::new(), Vec::new()); size];
        for (r, rsegs) in segs.iter().enumerate() {
            let Some(seg) = rsegs.get(j) else { continue };
            for st in &seg.local {
                match *st {
                    MStep::Copy(s, d) => phase[r].0.push(Op::Copy { src: s, dst: d }),
                    MStep::Reduce(s, d) if s.len > 0 => {
                        phase[r].0.push(Op::Reduce { src: s, dst: d })
                    }
                    _ => {}
                }
            }
            // Match sends against the peer's receives of the same segment.
            for st in &seg.comm {
                match *st {
                    MStep::Send(peer, src, tag) => {
                        let nth = seg
                            .comm
                            .iter()
                            .take_while(|x| !std::ptr::eq(*x, st))
                            .filter(
                                |x| matches!(x, MStep::Send(p, _, t) if *p == peer && *t == tag),
                            );
                        let k = nth.count();
                        let dst = segs
                            .get(peer)
                            .and_then(|ps| ps.get(j))
                            .and_then(|g| {
                                g.comm
                                    .iter()
                                    .filter_map(|x| match *x {
                                        MStep::Recv(p, l, t) if p == r && t == tag => Some(l),
                                        _ => None,
                                    })
                                    .nth(k)
                            })
                            .ok_or_else(|| {
                                GpuError::Plan(format!(
                                    "send {r} -> {peer} tag {tag} in phase {j} has no receive"
                                ))
                            })?;
                        if dst.len != src.len {
                            return Err(GpuError::Plan(format!(
                                "send {r} -> {peer} of {} B meets a receive of {} B",
                                src.len, dst.len
                            )));
                        }
                        if src.len > 0 {
                            phase[r].1.push(Op::Put { peer, src, dst });
                        }
                    }
                    MStep::Recv(peer, dst, _) if dst.len > 0 => {
                        phase[r].1.push(Op::Land { peer, dst });
                    }
                    _ => {}
                }
            }
        }
        // Hazard: a push into rank b during this phase must not touch what
        // b's local ops or outgoing pushes of the phase use.
        let hazard = (0..size).any(|b| {
            let lands: Vec<Loc> = phase[b]
                .1
                .iter()
                .filter_map(|o| match o {
                    Op::Land { dst, .. } => Some(*dst),
                    _ => None,
                })
                .collect();
            let used: Vec<Loc> = phase[b]
                .0
                .iter()
                .chain(phase[b].1.iter())
                .flat_map(|o| match *o {
                    Op::Copy { src, dst } | Op::Reduce { src, dst } => vec![src, dst],
                    Op::Put { src, .. } => vec![src],
                    Op::Land { .. } => vec![],
                })
                .collect();
            lands.iter().any(|l| used.iter().any(|u| u.overlaps(l)))
        });
        if hazard {
            for (r, (local, _)) in phase.iter_mut().enumerate() {
                out[r].push(Phase {
                    ops: std::mem::take(local),
                });
            }
        }
        for (r, (local, comm)) in phase.into_iter().enumerate() {
            let mut ops = local;
            ops.extend(comm);
            out[r].push(Phase { ops });
        }
    }
    // The tail runs after the last communication: appended to a last phase
    // without communication, else in a phase of its own.
    let last_is_local = out.iter().all(|p| {
        p.last().is_some_and(|ph| {
            ph.ops
                .iter()
                .all(|o| matches!(o, Op::Copy { .. } | Op::Reduce { .. }))
        })
    });
    for (r, t) in tail.iter().enumerate() {
        match out[r].last_mut() {
            Some(ph) if last_is_local => ph.ops.extend(t.iter().copied()),
            _ => out[r].push(Phase { ops: t.clone() }),
        }
    }
    // Drop phases that are empty on every rank.
    let keep: Vec<bool> = (0..out.first().map_or(0, Vec::len))
        .map(|j| out.iter().any(|p| !p[j].ops.is_empty()))
        .collect();
    for p in &mut out {
        let mut i = 0;
        p.retain(|_| {
            i += 1;
            keep[i - 1]
        });
    }
    Ok(out)
}

fn region_in(owner_map: impl Fn(BufferId) -> (Buf, usize)) -> impl Fn(Region) -> Loc {
    move |r: Region| {
        let (buf, base) = owner_map(r.buf);
        Loc::new(buf, base + r.offset, r.len)
    }
}

fn finish(
    kind: CollKind,
    size: usize,
    dtype: Dtype,
    op: Option<GpuOp>,
    io: (usize, usize),
    window_bytes: usize,
    phases: Vec<Vec<Phase>>,
) -> Vec<Plan> {
    phases
        .into_iter()
        .enumerate()
        .map(|(rank, phases)| Plan {
            kind,
            rank,
            size,
            dtype,
            op,
            input_bytes: io.0,
            output_bytes: io.1,
            window_bytes,
            phases,
        })
        .collect()
}

fn single_rank(kind: CollKind, dtype: Dtype, op: Option<GpuOp>, bytes: usize) -> Vec<Plan> {
    let ops = if bytes > 0 {
        vec![Phase {
            ops: vec![Op::Copy {
                src: Loc::new(Buf::Input, 0, bytes),
                dst: Loc::new(Buf::Output, 0, bytes),
            }],
        }]
    } else {
        Vec::new()
    };
    finish(kind, 1, dtype, op, (bytes, bytes), 0, vec![ops])
}

pub use crate::chunk::MAX_PLAN_RANKS;

/// Bytes the plans of `size` ranks hold, about, per pair of ranks: the plans of
/// every rank are built together and grow with the square of the ranks (about
/// 640 bytes a pair measured, for an allreduce of 512 ranks: 168 MB; 4096 ranks
/// take about 10 GiB).
pub const PLAN_BYTES_PER_RANK_PAIR: u64 = 1024;

/// Refuses the plans of `size` ranks when they would need more than `available`
/// bytes of memory ([`PLAN_BYTES_PER_RANK_PAIR`] a pair of ranks): a size the
/// bound [`MAX_PLAN_RANKS`] admits aborted the process on an allocation on a
/// machine with less memory (4096 ranks within 8 GB).
pub(crate) fn check_plan_memory(what: &str, size: usize, available: Option<u64>) -> Result<()> {
    let need = (size as u64)
        .saturating_mul(size as u64)
        .saturating_mul(PLAN_BYTES_PER_RANK_PAIR);
    match available {
        Some(available) if need > available => Err(GpuError::Plan(format!(
            "{what} on {size} ranks: its plans would need about {need} bytes of memory, \
             more than the {available} bytes available (MemAvailable)"
        ))),
        _ => Ok(()),
    }
}

/// Checks the arguments every plan shares and gives the bytes of `count`
/// elements: a size of 1 to [`MAX_PLAN_RANKS`] whose plans fit the memory
/// available ([`check_plan_memory`]), and `count` elements on each of
/// `size` ranks within what a buffer can hold (`isize::MAX` bytes).
fn plan_bytes(what: &str, size: usize, count: usize, dtype: Dtype) -> Result<usize> {
    if size == 0 {
        return Err(GpuError::Plan(format!(
            "{what} on 0 ranks: a plan needs at least one rank"
        )));
    }
    if size > MAX_PLAN_RANKS {
        return Err(GpuError::Plan(format!(
            "{what} on {size} ranks: plans are built for at most {MAX_PLAN_RANKS}"
        )));
    }
    check_plan_memory(what, size, hpc_topology::budget::available_memory())?;
    let bytes = count.checked_mul(dtype.size());
    match bytes.and_then(|b| b.checked_mul(size)) {
        Some(total) if total <= isize::MAX as usize => Ok(bytes.unwrap_or(0)),
        _ => Err(GpuError::Plan(format!(
            "{what} of {count} elements of {dtype:?} on {size} ranks: more bytes than a \
             buffer can hold"
        ))),
    }
}

/// Plans of every rank for an allreduce of `count` elements: ring
/// reduce-scatter over 16-byte-aligned chunks into the window, ring
/// allgather within the window, one copy to the output.
pub fn allreduce(size: usize, count: usize, dtype: Dtype, op: GpuOp) -> Result<Vec<Plan>> {
    let e = dtype.size();
    let bytes = plan_bytes("allreduce", size, count, dtype)?;
    if size == 1 {
        return Ok(single_rank(CollKind::AllReduce, dtype, Some(op), bytes));
    }
    let counts = split_aligned(count, e, size)?;
    let off: Vec<usize> = offsets(&counts).into_iter().map(|x| x * e).collect();
    let blocks: Vec<usize> = counts.iter().map(|c| c * e).collect();
    let sbase = bytes.next_multiple_of(WINDOW_ALIGN);
    let mut window = sbase;
    let mut per_rank = Vec::with_capacity(size);
    for (r, &base) in off.iter().take(size).enumerate() {
        let rs = reduce_scatter::ring(r, size, &counts, dtype.data_type(), op.reduce_op());
        window = window.max(sbase + rs.scratch_bytes);
        let mut rounds = map_schedule(
            &rs,
            0,
            region_in(|b| match b {
                BufferId::Send => (Buf::Input, 0),
                BufferId::Recv => (Buf::Window, base),
                BufferId::Scratch => (Buf::Window, sbase),
            }),
        )?;
        let ag = allgather::ring(r, size, &blocks);
        rounds.extend(map_schedule(
            &ag,
            1000,
            region_in(|b| match b {
                BufferId::Send => (Buf::Window, base),
                BufferId::Recv | BufferId::Scratch => (Buf::Window, 0),
            }),
        )?);
        per_rank.push(rounds);
    }
    let phases = phases_to_output(per_rank, bytes, bytes)?;
    Ok(finish(
        CollKind::AllReduce,
        size,
        dtype,
        Some(op),
        (bytes, bytes),
        window,
        phases,
    ))
}

/// Plans for a reduce-scatter: each rank's input holds `size * count`
/// elements, rank `r` gets the reduction of block `r` (`count` elements).
pub fn reduce_scatter(size: usize, count: usize, dtype: Dtype, op: GpuOp) -> Result<Vec<Plan>> {
    let bytes = plan_bytes("reduce-scatter", size, count, dtype)?;
    if size == 1 {
        return Ok(single_rank(CollKind::ReduceScatter, dtype, Some(op), bytes));
    }
    let counts = vec![count; size];
    let sbase = bytes.next_multiple_of(WINDOW_ALIGN);
    let mut window = sbase;
    let mut per_rank = Vec::with_capacity(size);
    for r in 0..size {
        let rs = reduce_scatter::ring(r, size, &counts, dtype.data_type(), op.reduce_op());
        window = window.max(sbase + rs.scratch_bytes);
        per_rank.push(map_schedule(
            &rs,
            0,
            region_in(|b| match b {
                BufferId::Send => (Buf::Input, 0),
                BufferId::Recv => (Buf::Window, 0),
                BufferId::Scratch => (Buf::Window, sbase),
            }),
        )?);
    }
    let phases = phases_to_output(per_rank, bytes, bytes)?;
    Ok(finish(
        CollKind::ReduceScatter,
        size,
        dtype,
        Some(op),
        (bytes * size, bytes),
        window,
        phases,
    ))
}

/// Plans for an allgather: each rank contributes `count` elements; every
/// output holds the `size` blocks in rank order.
pub fn allgather(size: usize, count: usize, dtype: Dtype) -> Result<Vec<Plan>> {
    let bytes = plan_bytes("allgather", size, count, dtype)?;
    if size == 1 {
        return Ok(single_rank(CollKind::AllGather, dtype, None, bytes));
    }
    let blocks = vec![bytes; size];
    let mut per_rank = Vec::with_capacity(size);
    for r in 0..size {
        let ag = allgather::ring(r, size, &blocks);
        per_rank.push(map_schedule(
            &ag,
            0,
            region_in(|b| match b {
                BufferId::Send => (Buf::Input, 0),
                BufferId::Recv | BufferId::Scratch => (Buf::Window, 0),
            }),
        )?);
    }
    let total = bytes * size;
    let phases = phases_to_output(per_rank, bytes, total)?;
    Ok(finish(
        CollKind::AllGather,
        size,
        dtype,
        None,
        (bytes, total),
        total,
        phases,
    ))
}

/// Plans for a broadcast of `count` elements from `root`: the root pushes
/// its input into every other rank's window and copies it to its own
/// output; the others copy their window to their output.
pub fn broadcast(size: usize, root: usize, count: usize, dtype: Dtype) -> Result<Vec<Plan>> {
    let bytes = plan_bytes("broadcast", size, count, dtype)?;
    if root >= size {
        return Err(GpuError::Mismatch {
            what: "broadcast root (must be below the rank count)",
            expected: size,
            got: root,
        });
    }
    let all = |b| Loc::new(b, 0, bytes);
    let phases = (0..size)
        .map(|r| {
            if bytes == 0 {
                return Vec::new();
            }
            if r == root {
                let mut ops = vec![Op::Copy {
                    src: all(Buf::Input),
                    dst: all(Buf::Output),
                }];
                ops.extend((0..size).filter(|&p| p != root).map(|peer| Op::Put {
                    peer,
                    src: all(Buf::Input),
                    dst: all(Buf::Window),
                }));
                let mut v = vec![Phase { ops }];
                if size > 1 {
                    v.push(Phase::default());
                }
                v
            } else {
                vec![
                    Phase {
                        ops: vec![Op::Land {
                            peer: root,
                            dst: all(Buf::Window),
                        }],
                    },
                    Phase {
                        ops: vec![Op::Copy {
                            src: all(Buf::Window),
                            dst: all(Buf::Output),
                        }],
                    },
                ]
            }
        })
        .collect();
    let window = if size > 1 { bytes } else { 0 };
    Ok(finish(
        CollKind::Broadcast,
        size,
        dtype,
        None,
        (bytes, bytes),
        window,
        phases,
    ))
}

/// The order in which [`run_on_host`] runs the ranks within a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostOrder {
    /// Rank 0 first.
    Forward,
    /// Last rank first.
    Reverse,
}

/// Runs every rank's plan on host memory, as the device executor does,
/// with a CPU reduction (`hpc_collectives::apply_reduce`): the reference
/// against which plans are tested. `inputs[r]` and `outputs[r]` are rank
/// `r`'s buffers; windows start filled with `0xA5` bytes.
///
/// # Errors
///
/// [`GpuError::Mismatch`] when there is not one input and one output per
/// plan, or a buffer is shorter than its plan's `input_bytes` or
/// `output_bytes` (checked before anything runs: they panicked with "range
/// end index 16 out of range for slice of length 4"), and
/// [`GpuError::Plan`] for plans that disagree or that no honest plan would
/// be (a plan's fields are public): checked before anything runs
/// ([`check_plans`]), and windows beyond the memory available.
pub fn run_on_host(
    plans: &[Plan],
    inputs: &[Vec<u8>],
    outputs: &mut [Vec<u8>],
    order: HostOrder,
) -> Result<()> {
    let size = plans.len();
    for (what, got) in [
        ("run_on_host inputs (one per plan)", inputs.len()),
        ("run_on_host outputs (one per plan)", outputs.len()),
    ] {
        if got != size {
            return Err(GpuError::Mismatch {
                what,
                expected: size,
                got,
            });
        }
    }
    for (p, (i, o)) in plans.iter().zip(inputs.iter().zip(outputs.iter())) {
        if i.len() < p.input_bytes {
            return Err(GpuError::Mismatch {
                what: "run_on_host input bytes (at least the plan's)",
                expected: p.input_bytes,
                got: i.len(),
            });
        }
        if o.len() < p.output_bytes {
            return Err(GpuError::Mismatch {
                what: "run_on_host output bytes (at least the plan's)",
                expected: p.output_bytes,
                got: o.len(),
            });
        }
    }
    check_plans(plans)?;
    let mut windows = host_windows(plans, hpc_topology::budget::available_memory())?;
    let nphases = plans.first().map_or(0, |p| p.phases.len());
    let ranks: Vec<usize> = match order {
        HostOrder::Forward => (0..size).collect(),
        HostOrder::Reverse => (0..size).rev().collect(),
    };
    for j in 0..nphases {
        for &r in &ranks {
            let plan = &plans[r];
            for op in &plan.phases[j].ops {
                let read = |l: Loc, windows: &[Vec<u8>], outputs: &[Vec<u8>]| -> Vec<u8> {
                    let b: &[u8] = match l.buf {
                        Buf::Input => &inputs[r],
                        Buf::Output => &outputs[r],
                        Buf::Window => &windows[r],
                    };
                    b[l.offset..l.end()].to_vec()
                };
                match *op {
                    Op::Copy { src, dst } => {
                        let data = read(src, &windows, outputs);
                        write(dst, &data, &mut windows[r], &mut outputs[r])?;
                    }
                    Op::Reduce { src, dst } => {
                        let s = read(src, &windows, outputs);
                        let mut d = read(dst, &windows, outputs);
                        let gop = plan
                            .op
                            .ok_or_else(|| GpuError::Plan("reduce without an op".into()))?;
                        apply_reduce(gop.reduce_op(), plan.dtype.data_type(), &s, &mut d)
                            .map_err(|e| GpuError::Plan(e.to_string()))?;
                        write(dst, &d, &mut windows[r], &mut outputs[r])?;
                    }
                    Op::Put { peer, src, dst } => {
                        let data = read(src, &windows, outputs);
                        let target = &mut windows[peer];
                        target[dst.offset..dst.end()].copy_from_slice(&data);
                    }
                    Op::Land { .. } => {}
                }
            }
        }
    }
    Ok(())
}

fn write(dst: Loc, data: &[u8], window: &mut [u8], output: &mut [u8]) -> Result<()> {
    let b = match dst.buf {
        Buf::Output => output,
        Buf::Window => window,
        Buf::Input => return Err(GpuError::Plan("a plan writes its input".into())),
    };
    b[dst.offset..dst.end()].copy_from_slice(data);
    Ok(())
}

/// The windows of `plans` on host memory, filled with `0xA5` bytes: refused
/// where together they are more than `available` bytes (a forged plan's
/// `window_bytes` of `usize::MAX` aborted the process on the allocation, one
/// of a terabyte filled the memory).
fn host_windows(plans: &[Plan], available: Option<u64>) -> Result<Vec<Vec<u8>>> {
    let total = plans
        .iter()
        .fold(0u64, |t, p| t.saturating_add(p.window_bytes as u64));
    let refuse = || {
        GpuError::Plan(format!(
            "run_on_host: windows of {total} bytes in all, more than the {} bytes of \
             memory available",
            available.map_or("addressable".to_string(), |a| a.to_string())
        ))
    };
    if total > available.unwrap_or(isize::MAX as u64) {
        return Err(refuse());
    }
    let mut windows = Vec::with_capacity(plans.len());
    for p in plans {
        let mut w = Vec::new();
        w.try_reserve_exact(p.window_bytes).map_err(|_| refuse())?;
        w.resize(p.window_bytes, 0xA5);
        windows.push(w);
    }
    Ok(windows)
}

/// Checks that `plans` are what [`run_on_host`] can run without a panic,
/// as the builders of this module make them: plan `r` is rank `r` of
/// `plans.len()`, every rank has the same number of phases, every range
/// lies within its buffer (the plan's `input_bytes`, `output_bytes`,
/// `window_bytes`; a [`Op::Put`]'s in its peer's window), every peer is a
/// rank, a copy, a reduction and a put move as many bytes as they take,
/// a copy and a reduction write the output or the window, and a put and a
/// land the window. A plan's fields are public: a forged one whose range
/// lay beyond its window made `run_on_host` panic on a slice's index.
///
/// # Errors
///
/// [`GpuError::Plan`] naming the rank, the phase, the operation and what is
/// wrong with it.
pub fn check_plans(plans: &[Plan]) -> Result<()> {
    let size = plans.len();
    let nphases = plans.first().map_or(0, |p| p.phases.len());
    for (r, p) in plans.iter().enumerate() {
        if p.rank != r || p.size != size {
            return Err(GpuError::Plan(format!(
                "plan {r} of {size} says it is rank {} of {}",
                p.rank, p.size
            )));
        }
        if p.phases.len() != nphases {
            return Err(GpuError::Plan(format!(
                "ranks disagree on the number of phases: rank 0 has {nphases}, rank {r} {}",
                p.phases.len()
            )));
        }
        for (j, phase) in p.phases.iter().enumerate() {
            for (k, op) in phase.ops.iter().enumerate() {
                check_op(plans, p, op).map_err(|why| {
                    GpuError::Plan(format!("rank {r}, phase {j}, op {k} ({op:?}): {why}"))
                })?;
            }
        }
    }
    Ok(())
}

/// What is wrong with `op` of plan `p`, if anything ([`check_plans`]).
fn check_op(plans: &[Plan], p: &Plan, op: &Op) -> std::result::Result<(), String> {
    let within = |l: &Loc, plan: &Plan| -> std::result::Result<(), String> {
        let bytes = match l.buf {
            Buf::Input => plan.input_bytes,
            Buf::Output => plan.output_bytes,
            Buf::Window => plan.window_bytes,
        };
        if l.end() > bytes || l.offset.checked_add(l.len).is_none() {
            return Err(format!(
                "bytes {}..{} are beyond the {:?} of {bytes} bytes",
                l.offset,
                l.offset as u128 + l.len as u128,
                l.buf
            ));
        }
        Ok(())
    };
    let peer_plan = |peer: usize| {
        plans
            .get(peer)
            .ok_or_else(|| format!("peer {peer} is not a rank of these {} plans", plans.len()))
    };
    let same_len = |src: &Loc, dst: &Loc| {
        if src.len == dst.len {
            Ok(())
        } else {
            Err(format!("it takes {} bytes and writes {}", src.len, dst.len))
        }
    };
    match op {
        Op::Copy { src, dst } | Op::Reduce { src, dst } => {
            within(src, p)?;
            within(dst, p)?;
            same_len(src, dst)?;
            if dst.buf == Buf::Input {
                return Err("it writes the input".into());
            }
        }
        Op::Put { peer, src, dst } => {
            within(src, p)?;
            let target = peer_plan(*peer)?;
            if dst.buf != Buf::Window {
                return Err(format!("it puts into the {:?}, not the window", dst.buf));
            }
            within(dst, target)?;
            same_len(src, dst)?;
        }
        Op::Land { peer, dst } => {
            peer_plan(*peer)?;
            if dst.buf != Buf::Window {
                return Err(format!("it lands in the {:?}, not the window", dst.buf));
            }
            within(dst, p)?;
        }
    }
    Ok(())
}
