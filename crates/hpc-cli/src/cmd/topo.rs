//! `hpc topo`: shows the hardware topology and the placement of ranks, threads,
//! progress cores, GPUs and NICs (see the hpc-topology crate for the rules and the
//! JSON schema).

use std::path::PathBuf;

use std::io::Write as _;

use super::values;
use anyhow::Context as _;
use hpc_topology::{PlacementRequest, Policy, Topology, TopologySource, SCHEMA_VERSION};

/// Arguments of `hpc topo`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    hpc topo                                     this machine's packages, NUMA nodes, cores, GPUs, NICs\n  \
    hpc topo --ranks 4 --threads 6 --progress 1  where 4 ranks would run\n  \
    hpc topo --ranks 8 --policy spread --json    the plan as JSON\n  \
    hpc topo --synthetic \"pack:2 numa:2 core:8 pu:2\" --ranks 4 --policy numa\n  \
    lstopo node.xml && hpc topo --input node.xml --ranks 16\n\n\
    Exit status: 0, 1 when ranks had to share cores (oversubscribed), 2 bad input.")]
pub struct Args {
    /// Ranks on the node: prints their placement instead of the topology summary
    /// (1 to 4096, `hpc run`'s limit on one machine).
    #[arg(long, value_name = "N")]
    ranks: Option<usize>,
    /// Compute threads per rank (each gets a core; at most 65536, and a million
    /// cores for all ranks together). This and the placement flags
    /// below need --ranks: without it they would be ignored, so they are refused.
    #[arg(long, value_name = "T", default_value_t = 1, requires = "ranks")]
    threads: usize,
    /// Progress cores per rank (or per node with --per-node-progress).
    #[arg(long, value_name = "K", default_value_t = 0, requires = "ranks")]
    progress: usize,
    /// Reserve the --progress cores once for the node instead of per rank.
    #[arg(long, requires = "ranks")]
    per_node_progress: bool,
    /// Placement policy.
    #[arg(long, value_enum, default_value_t = values::Policy::Compact, requires = "ranks")]
    policy: values::Policy,
    /// Load the topology from an hwloc XML file (`lstopo machine.xml` writes one);
    /// it must be a regular file.
    #[arg(long, value_name = "FILE.xml", conflicts_with = "synthetic")]
    input: Option<PathBuf>,
    /// Use an hwloc synthetic topology, e.g. "pack:2 numa:2 core:8 pu:2" (at most
    /// 8192 PUs, and no more than the memory available).
    #[arg(long, value_name = "DESC")]
    synthetic: Option<String>,
    /// Restrict placement to these PUs (cpulist syntax, e.g. 0-15,32-47).
    #[arg(long, value_name = "CPULIST", requires = "ranks")]
    allowed: Option<String>,
    /// Print JSON (schema_version 1) instead of text.
    #[arg(long)]
    json: bool,
}

/// The most cores a placement may list, all ranks' threads and progress cores
/// together (as many as a million: its table is some 8 MB).
pub const MAX_CORE_SLOTS: usize = 1 << 20;

/// `--ranks` within `hpc run`'s limit of ranks on one machine, `--threads` and
/// `--progress` within its limit per rank, and the cores they ask for together
/// within [`MAX_CORE_SLOTS`]: `--ranks 3 --threads 10000000` took 3.3 GB and
/// 42 s to print 80 MB, `--ranks 1000000` 1 GB and 16 s, bounded only by the
/// memory available.
fn check_sizes(args: &Args) -> Result<(), super::UsageError> {
    let Some(ranks) = args.ranks else {
        return Ok(());
    };
    super::check_between("--ranks", ranks, 1, super::run::MAX_RANKS)?;
    super::check_between("--threads", args.threads, 1, super::run::MAX_THREADS)?;
    super::check_between("--progress", args.progress, 0, super::run::MAX_THREADS)?;
    let per_rank = if args.per_node_progress {
        args.threads
    } else {
        args.threads + args.progress
    };
    let slots = ranks.saturating_mul(per_rank);
    if slots > MAX_CORE_SLOTS {
        return Err(super::UsageError(format!(
            "--ranks {ranks} x --threads {} (+ --progress {}) ask for {slots} cores, more \
             than the {MAX_CORE_SLOTS} a placement may list: no node has so many",
            args.threads, args.progress
        )));
    }
    Ok(())
}

/// Runs `hpc topo`; the exit code is 0, or 1 when the plan is oversubscribed.
pub fn exec(args: Args) -> anyhow::Result<i32> {
    let source = match (&args.input, &args.synthetic) {
        (Some(path), _) => TopologySource::Xml(path.clone()),
        (None, Some(desc)) => TopologySource::Synthetic(desc.clone()),
        (None, None) => TopologySource::ThisMachine,
    };
    // Checked before the topology is loaded (it needs --ranks, see `Args`).
    check_sizes(&args)?;
    let allowed = match &args.allowed {
        Some(list) => Some(super::cpu_list_flag("--allowed", list)?),
        None => None,
    };
    let topo =
        Topology::load(&source).with_context(|| format!("loading the topology of {source}"))?;
    let mut out = super::stdout::Stdout;
    let Some(ranks) = args.ranks else {
        if args.json {
            let doc = serde_json::json!({ "schema_version": SCHEMA_VERSION, "topology": topo });
            writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)
        } else {
            write!(out, "{}", topo.summary())
        }
        .context("writing the topology to standard output")?;
        return Ok(0);
    };
    let mut req = PlacementRequest::new(ranks, args.threads).policy(Policy::from(args.policy));
    req = if args.per_node_progress {
        req.per_node_progress(args.progress)
    } else {
        req.progress(args.progress)
    };
    if let Some(set) = allowed {
        req = req.allowed(set);
    }
    let plan = hpc_topology::plan(&topo, &req)?;
    if args.json {
        writeln!(out, "{}", plan.to_json())
    } else {
        writeln!(out, "Topology of {}", topo.source).and_then(|()| write!(out, "{}", plan.table()))
    }
    .context("writing the placement to standard output")?;
    Ok(if plan.oversubscribed { 1 } else { 0 })
}
