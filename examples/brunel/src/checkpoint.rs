//! Checkpoints: the state of every neuron at an interval boundary, one file per
//! rank, keyed by neuron id so a run can resume with any number of ranks/threads.
//! Stored with `hpc-checkpoint`, which verifies every file before it is used.
//!
//! ```text
//! <dir>/step-0000005000/
//!   rank-000000.ckpt  each rank's state (written by that rank), payload:
//!   rank-000001.ckpt    "BRCKPT02", first id u32, count u32, slots D u32, step u64,
//!   ...                 then V (f64 x count), refractory counters (u32 x count),
//!                       ring buffer (u32 x D x count, offset-major: input arriving
//!                       at step + d for d in 0..D)
//!   spikes.ckpt       the spike file up to this step (rank 0)
//!   manifest.json     written last by rank 0: step, ranks, every file's size and
//!                     CRC-32C, and brunel's metadata (parameters, spikes so far)
//! ```
//!
//! Every file is written under a temporary name and renamed; the manifest comes last,
//! after every rank's file (the ranks exchange their files' sizes and checksums
//! first). A restart checks every file it reads against the manifest (size,
//! checksum, step, rank) and then its content against the model (parameters, delay,
//! the rank's neurons, step, the number of spikes), and names the file and the
//! problem when anything differs. Given the checkpoint directory, a restart takes the
//! newest checkpoint that verifies and warns about each newer one it skipped.
//!
//! Random streams are counter-based with the step as counter, so the step is the only
//! RNG state; no spikes are pending at a checkpoint (the exchange is drained first);
//! the connectivity is regenerated from the seed.

use std::path::Path;

use anyhow::Result;

use hpc_spiking::checkpoint::{check_covered, rank_files, rank_head, RankFile, RANK_HEAD};
pub use hpc_spiking::checkpoint::{
    choose, commit_with, entry_words, gathered_entries, open_with, spikes_of, SPIKES,
};
use hpc_spiking::run::RunOptions;
use hpc_spiking::Block;

use crate::params::{Model, Params};

/// A checkpoint to resume from, with brunel's metadata.
pub type Restart = hpc_spiking::checkpoint::Restart<Meta>;

const MAGIC: &[u8; 8] = b"BRCKPT02";

/// The metadata in a checkpoint's manifest: the parameters and the spike count.
pub type Meta = hpc_spiking::checkpoint::RunMeta<Params>;

/// The state of a block of neurons at a step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct State {
    /// Membrane potentials.
    pub v: Vec<f64>,
    /// Refractory counters (steps left).
    pub refr: Vec<u32>,
    /// Ring buffer, `ring[d * len + i]` = input of neuron `i` arriving at `step + d`.
    pub ring: Vec<u32>,
}

/// A rank's payload: its block of neurons at `step`.
pub fn encode(model: &Model, step: u64, block: Block, state: &State) -> Vec<u8> {
    let d = model.delay_steps;
    let capacity = RANK_HEAD + state.v.len() * 12 + state.ring.len() * 4;
    let mut b = rank_head(MAGIC, block, d, step, capacity);
    state
        .v
        .iter()
        .for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    state
        .refr
        .iter()
        .for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    state
        .ring
        .iter()
        .for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
    b
}

/// The checkpoint to resume from: `dir` itself if it is a step directory (used as
/// named, no fallback), else the newest checkpoint in `dir` that verifies (each newer
/// one that fails is skipped with a warning).
pub fn open(dir: &Path) -> Result<Restart> {
    open_with(dir, "brunel")
}

/// Checks that `model` can continue from `r`: the same network and dynamics, and a
/// `t_sim` that reaches at least the checkpoint's time.
pub fn check_model(r: &Restart, model: &Model) -> Result<()> {
    let differences = model_differences(&r.meta.params, &model.params);
    r.check_continues(&differences, model.steps, model.params.dt, 0.0)
}

/// The parameters in which the network of `mine` differs from that of
/// `theirs` (a checkpoint's), as `name theirs -> mine`; empty when they are
/// the same network ([`Params::same_model`]). An in-degree one side takes from
/// `epsilon` says what it used (`ce (not given: epsilon * NE = 20) -> 50`);
/// an in-degree that differs as given but not as used is no difference.
pub fn model_differences(theirs: &Params, mine: &Params) -> Vec<String> {
    if theirs.same_model(mine) {
        return Vec::new();
    }
    let (a, b) = (theirs.as_used(), mine.as_used());
    let used = |p: &Params| {
        serde_json::json!({
            "ce": p.ce.map(|k| format!("epsilon * NE = {k}")),
            "ci": p.ci.map(|k| format!("epsilon * NI = {k}")),
        })
    };
    let mut ignore = vec!["t_sim"];
    for (name, same) in [("ce", a.ce == b.ce), ("ci", a.ci == b.ci)] {
        if same {
            ignore.push(name);
        }
    }
    let listed = hpc_spiking::run::params_diff_used(theirs, mine, &ignore, &used(&a), &used(&b));
    if listed.is_empty() {
        // Not the same network, yet nothing listed (no case known): every
        // parameter as given, never an empty list that lets the restart go on.
        hpc_spiking::run::params_diff(theirs, mine, &["t_sim"])
    } else {
        listed
    }
}

/// The checkpoint `opts.restart` to resume from ([`open`]), checked against
/// `model` ([`check_model`]) and the run's options
/// ([`RunOptions::check_restart`]) before anything of it is read; `None` without one.
pub fn resume(opts: &RunOptions, model: &Model) -> Result<Option<Restart>> {
    hpc_spiking::checkpoint::resume(opts.restart.as_deref(), "brunel", |r| {
        check_model(r, model)?;
        opts.check_restart(r, model.params.dt)
    })
}

/// Reads the state of the neurons of `block` (global ids) from the rank files that
/// hold them (each checked against the manifest and the model).
pub fn read(r: &Restart, model: &Model, block: Block) -> Result<State> {
    let d = model.delay_steps as usize;
    let n = block.len as usize;
    let mut st = State {
        v: vec![0.0; n],
        refr: vec![0; n],
        ring: vec![0; d * n],
    };
    let ranks = rank_files(r, model.n)?;
    let mut covered = 0usize;
    for rank in 0..ranks {
        let theirs = Block::part(model.n, ranks, rank);
        let lo = theirs.first.max(block.first);
        let hi = theirs.end().min(block.end());
        if lo >= hi {
            continue;
        }
        let f = RankFile::read(r, rank, MAGIC, "brunel")?;
        if f.extra as usize != d {
            return Err(f.error(format!(
                "written with a delay of {} steps, the model has {d}",
                f.extra
            )));
        }
        f.check_holds(r, rank, model.n)?;
        let (first, len) = (f.block.first, f.block.len as usize);
        let want = RANK_HEAD + len * 12 + d * len * 4;
        f.check_len(
            want,
            format_args!("{len} neurons with a delay of {d} steps"),
        )?;
        let v0 = RANK_HEAD;
        let r0 = v0 + len * 8;
        let g0 = r0 + len * 4;
        for gid in lo..hi {
            let (i, j) = ((gid - first) as usize, (gid - block.first) as usize);
            st.v[j] = f.finite_f64_at(v0 + i * 8, format_args!("V of neuron {gid}"))?;
            st.refr[j] =
                f.refractory_at(r0 + i * 4, model.ref_steps, format_args!("neuron {gid}"))?;
            for k in 0..d {
                st.ring[k * n + j] = f.u32_at(g0 + (k * len + i) * 4);
            }
            covered += 1;
        }
    }
    check_covered(r, covered, block)?;
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Params;

    /// The same network given its in-degrees once and taking them from
    /// `epsilon` the other time is no other model (pass 19's leftover:
    /// refused, "ce (not given: epsilon * NE = 40) -> 40"); an in-degree that
    /// differs as used says what the side that did not give it used; an
    /// `epsilon` that changes no in-degree (both given) is no difference.
    #[test]
    fn the_in_degrees_are_compared_as_the_network_uses_them() {
        let theirs = Params {
            order: 100,
            ..Params::default()
        };
        let with = |f: fn(&mut Params)| {
            let mut p = theirs.clone();
            f(&mut p);
            p
        };
        let none: Vec<String> = Vec::new();
        assert_eq!(model_differences(&theirs, &with(|p| p.ce = Some(40))), none);
        assert_eq!(
            model_differences(&theirs, &with(|p| (p.ce, p.ci) = (Some(40), Some(10)))),
            none
        );
        assert_eq!(model_differences(&theirs, &with(|p| p.t_sim = 7.0)), none);
        assert_eq!(
            model_differences(&theirs, &with(|p| p.ce = Some(50))),
            ["ce (not given: epsilon * NE = 40) -> 50"]
        );
        // Only what differs as used: the seed, not the in-degree given equal.
        assert_eq!(
            model_differences(&theirs, &with(|p| (p.ce, p.seed) = (Some(40), 9))),
            ["seed 12345 -> 9"]
        );
        // epsilon with both in-degrees given sets nothing; alone it sets both.
        let given = with(|p| (p.ce, p.ci) = (Some(40), Some(10)));
        let other_eps = Params {
            epsilon: 0.2,
            ..given.clone()
        };
        assert_eq!(model_differences(&given, &other_eps), none);
        assert_eq!(
            model_differences(&theirs, &with(|p| p.epsilon = 0.2)),
            ["epsilon 0.1 -> 0.2"]
        );
        assert!(theirs.same_model(&with(|p| p.ce = Some(40))));
    }

    /// A checkpoint whose files verify (sizes and checksums agree) but whose
    /// state no run has: a potential that is infinite or NaN (which silenced the
    /// neuron for the rest of the run without a word) and a refractory counter
    /// of 2^32 - 1 steps (silent for 2^32 steps) are refused, naming the
    /// neuron; the same state with finite values reads.
    #[test]
    fn a_state_no_run_has_is_refused_by_neuron() {
        let model = Model::new(Params {
            order: 10,
            t_sim: 40.0,
            ..Params::default()
        })
        .unwrap();
        let block = Block::part(model.n, 1, 0);
        let (n, d) = (block.len as usize, model.delay_steps as usize);
        let good = State {
            v: vec![1.0; n],
            refr: vec![model.ref_steps; n],
            ring: vec![0; d * n],
        };
        let root = std::env::temp_dir().join(format!("brunel-ckpt-state-{}", std::process::id()));
        let step = 300;
        let mut cases: Vec<(State, &str)> = vec![(good.clone(), "")];
        for (v, what) in [
            (f64::INFINITY, "V of neuron 3 is inf"),
            (f64::NAN, "V of neuron 3 is NaN"),
        ] {
            let mut s = good.clone();
            s.v[3] = v;
            cases.push((s, what));
        }
        let mut s = good.clone();
        s.refr[3] = u32::MAX;
        cases.push((s, "neuron 3 has 4294967295 refractory steps left"));
        for (state, what) in cases {
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(&root).unwrap();
            let set = hpc_checkpoint::Checkpoints::new(&root);
            let entry = set
                .write_rank(step, 0, 1, &encode(&model, step, block, &state))
                .unwrap();
            hpc_spiking::checkpoint::commit_run(&set, &model.params, step, 1, vec![entry], None)
                .unwrap();
            let r = open(&root).unwrap();
            match read(&r, &model, block) {
                Ok(st) => assert!(what.is_empty() && st == state, "{what}: read"),
                Err(e) => assert!(
                    !what.is_empty() && e.to_string().contains(what),
                    "{what}: {e}"
                ),
            }
        }
        std::fs::remove_dir_all(&root).unwrap();
    }
}
