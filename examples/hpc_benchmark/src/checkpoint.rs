//! Checkpoints of the plastic network on [`hpc_spiking::checkpoint`]: one file per
//! rank, keyed by neuron id, so a run resumes with any number of ranks and
//! threads, the spike file so far, and a manifest with the parameters.
//!
//! A rank's payload: `"HPCBCK01"`, first neuron u32, count u32, delay `D` u32,
//! step u64, excitatory neurons u32; then for each neuron, in id order: its
//! state (`I_ex`, `dI_ex`, `I_in`, `dI_in`, `V`, `I_0` f64, refractory steps
//! u32), its STDP archive (trace `K-` f64, last spike f64, archived spikes u32,
//! each time f64, `K-` f64, reads u32), its pending input (`D` times: STDP
//! input f64, static excitatory and inhibitory counts u32, for steps `step +
//! d`); an excitatory neuron then has its trace `K+` f64 and last spike time f64
//! as a source, and the weights of its 9,000 excitatory inputs (f64, in the
//! order it draws its sources). Everything is little-endian.
//!
//! The connectivity is drawn again from the seed; a restart checks every file
//! against the manifest (`hpc-checkpoint`), the parameters against this run's
//! (only `t_sim` may differ: a restart may extend the run), then each file's
//! content against the model, and names the file and what differs.

use std::path::Path;

use anyhow::{anyhow, bail, Result};
use hpc_spiking::checkpoint::{rank_files, rank_head, RankFile, RANK_HEAD};
use hpc_spiking::neuron::AlphaState;
use hpc_spiking::plasticity::{ArchivedSpike, SourceTrace, SourceTraces, StdpRows};
use hpc_spiking::run::RunOptions;
use hpc_spiking::Block;

use crate::network::{sources, Shard};
use crate::params::{Model, Params, CE};

/// A checkpoint to resume from, with this model's metadata.
pub type Restart = hpc_spiking::checkpoint::Restart<Meta>;

const MAGIC: &[u8; 8] = b"HPCBCK01";
const HEAD: usize = 32;

/// The metadata in a checkpoint's manifest: the parameters and the spike count.
pub type Meta = hpc_spiking::checkpoint::RunMeta<Params>;

/// The header JSON of the spike file (the recorded neurons, ids `0..n_rec`).
pub fn header_json(model: &Model) -> String {
    serde_json::json!({
        "format": "hpc-rs spikes",
        "version": hpc_spiking::spikes::VERSION,
        "record": "tick u32 LE, node_id u32 LE; time_ms = tick * dt_ms",
        "dt_ms": model.params.dt,
        "t_sim_ms": model.steps as f64 * model.params.dt,
        "t_presim_ms": model.params.t_presim,
        "n_neurons": model.n_rec,
        "populations": [{"name": "excitatory (recorded)", "first": 0, "count": model.n_rec}],
        "params": model.params,
        "model": "NEST's hpc_benchmark (hpc-example-hpc-benchmark)",
    })
    .to_string()
}

fn put_f64(b: &mut Vec<u8>, x: f64) {
    b.extend_from_slice(&x.to_le_bytes());
}

fn put_u32(b: &mut Vec<u8>, x: u32) {
    b.extend_from_slice(&x.to_le_bytes());
}

/// Where neuron `t`'s excitatory inputs are, in draw order, among the
/// weights of `rows` (the rows of its shard; `cursor`: per row, how many of
/// its synapses were taken), given to `each`.
fn input_positions(
    model: &Model,
    rows: &StdpRows,
    t: u32,
    cursor: &mut [u32],
    mut each: impl FnMut(usize),
) {
    sources(model, t, |k, s| {
        if k < CE {
            // Every excitatory source of the shard's neurons has a row.
            let p = rows.index().get(s).expect("a row for each source");
            each(rows.weights_start(p) + cursor[p] as usize);
            cursor[p] += 1;
        }
    });
}

/// A rank's payload: its neurons (`block`, held by `shards`, their traces
/// as sources in `traces`) at `step`.
pub fn encode(
    model: &Model,
    step: u64,
    block: Block,
    shards: &[Shard],
    traces: &SourceTraces,
) -> Vec<u8> {
    let d = model.delay_steps as usize;
    let mut b = rank_head(MAGIC, block, d as u32, step, HEAD);
    put_u32(&mut b, model.ne);
    for sh in shards {
        let len = sh.len as usize;
        let all = sh.plastic.all_weights();
        let mut cursor = vec![0u32; sh.plastic.index().len()];
        for i in 0..len {
            let s = &sh.state[i];
            for x in [s.i_ex, s.di_ex, s.i_in, s.di_in, s.v, s.i_0] {
                put_f64(&mut b, x);
            }
            put_u32(&mut b, s.refractory);
            let a = &sh.archives[i];
            put_f64(&mut b, a.trace());
            put_f64(&mut b, a.last_spike());
            put_u32(&mut b, a.archived() as u32);
            for e in a.archived_spikes() {
                put_f64(&mut b, e.t);
                put_f64(&mut b, e.k_minus);
                put_u32(&mut b, e.reads);
            }
            for k in 0..d as u64 {
                put_f64(&mut b, sh.ring_w.row(step + k)[i]);
                put_u32(&mut b, sh.ring_ex.row(step + k)[i]);
                put_u32(&mut b, sh.ring_in.row(step + k)[i]);
            }
            let t = sh.first + i as u32;
            if t < model.ne {
                // Every excitatory neuron of the rank has its trace there.
                let own = traces.get(t).expect("a trace for each own source");
                put_f64(&mut b, own.k_plus());
                put_f64(&mut b, own.t_last());
                input_positions(model, &sh.plastic, t, &mut cursor, |at| {
                    put_f64(&mut b, all[at])
                });
            }
        }
    }
    b
}

/// The checkpoint to resume from (a step directory as named, or the newest that
/// verifies in a checkpoint directory).
pub fn open(dir: &Path) -> Result<Restart> {
    hpc_spiking::checkpoint::open_with(dir, "hpc_benchmark")
}

/// Checks that this run continues `r`'s: the same parameters but `t_sim`, and a
/// `t_sim` that reaches the checkpoint.
pub fn check_model(r: &Restart, model: &Model) -> Result<()> {
    let p = &model.params;
    r.check_continues(
        &model.differences(&r.meta.params),
        model.steps,
        p.dt,
        p.t_presim,
    )
}

/// The checkpoint `opts.restart` to resume from ([`open`]), checked against
/// `model` ([`check_model`]) and the run's options
/// ([`RunOptions::check_restart`]) before the network is built; `None` without one.
pub fn resume(opts: &RunOptions, model: &Model) -> Result<Option<Restart>> {
    hpc_spiking::checkpoint::resume(opts.restart.as_deref(), "hpc_benchmark", |r| {
        check_model(r, model)?;
        opts.check_restart(r, model.params.dt)
    })
}

/// A bounds-checked reader of a rank file.
struct Reader<'b> {
    b: &'b [u8],
    at: usize,
    path: &'b Path,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or_else(|| {
            anyhow!(
                "{}: truncated at byte {}",
                hpc_io::message::path(self.path),
                self.at
            )
        })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into()?))
    }

    fn f64(&mut self) -> Result<f64> {
        let x = f64::from_le_bytes(self.take(8)?.try_into()?);
        if x.is_nan() {
            bail!(
                "{}: a NaN at byte {}",
                hpc_io::message::path(self.path),
                self.at - 8
            );
        }
        Ok(x)
    }

    /// An f64 of a neuron's state (`what`): finite, as every state a run
    /// has (an infinite one became NaN at the first update, which silenced
    /// the neuron without a word).
    fn state(&mut self, what: &str, t: u32) -> Result<f64> {
        let x = self.f64()?;
        if !x.is_finite() {
            bail!(
                "{}: {what} of neuron {t} is {x} (at byte {}): not a state a run has",
                hpc_io::message::path(self.path),
                self.at - 8
            );
        }
        Ok(x)
    }
}

/// One neuron as a rank file holds it.
struct Saved {
    state: AlphaState,
    trace: f64,
    last_spike: f64,
    archive: Vec<ArchivedSpike>,
    ring: Vec<(f64, u32, u32)>,
    source: Option<(f64, f64, Vec<f64>)>,
}

fn read_neuron(r: &mut Reader, t: u32, d: usize, ne: u32, max_refractory: u32) -> Result<Saved> {
    let mut st = [0.0; 6];
    for (x, what) in st
        .iter_mut()
        .zip(["I_ex", "dI_ex", "I_in", "dI_in", "V_m", "I_0"])
    {
        *x = r.state(what, t)?;
    }
    let refractory = r.u32()?;
    // A counter is set to the refractory period at a spike and counts down.
    if refractory > max_refractory {
        bail!(
            "{}: neuron {t} has {refractory} refractory steps left, more than the model's {max_refractory}",
            hpc_io::message::path(r.path)
        );
    }
    let [i_ex, di_ex, i_in, di_in, v, i_0] = st;
    let state = AlphaState {
        i_ex,
        di_ex,
        i_in,
        di_in,
        v,
        i_0,
        refractory,
    };
    let (trace, last_spike) = (r.f64()?, r.f64()?);
    let n = r.u32()? as usize;
    // Each archived spike takes 20 bytes: a count beyond the file is refused
    // before anything is allocated for it.
    if n > (r.b.len() - r.at) / 20 {
        bail!(
            "{}: neuron {t} claims {n} archived spikes, more than the file holds",
            hpc_io::message::path(r.path)
        );
    }
    let archive = (0..n)
        .map(|_| {
            Ok(ArchivedSpike {
                t: r.f64()?,
                k_minus: r.f64()?,
                reads: r.u32()?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    // The weight of the input already on its way is state too: an infinite one
    // made the neuron fire at every step it could, and through STDP the whole
    // network with it (pass 15).
    let ring = (0..d)
        .map(|_| {
            Ok((
                r.state("the input in the ring buffer", t)?,
                r.u32()?,
                r.u32()?,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let source = if t < ne {
        let (kp, tl) = (r.f64()?, r.f64()?);
        let w = (0..CE).map(|_| r.f64()).collect::<Result<Vec<_>>>()?;
        Some((kp, tl, w))
    } else {
        None
    };
    Ok(Saved {
        state,
        trace,
        last_spike,
        archive,
        ring,
        source,
    })
}

/// Reads rank `rank`'s file of `r` and calls `each(neuron, saved)` for each of its
/// neurons, after checking its header against the model.
fn each_saved(
    r: &Restart,
    model: &Model,
    rank: u32,
    mut each: impl FnMut(u32, Saved) -> Result<()>,
) -> Result<()> {
    let f = RankFile::read(r, rank, MAGIC, "hpc_benchmark")?;
    f.check_holds(r, rank, model.n)?;
    let (first, len, d) = (f.block.first, f.block.len, f.extra);
    let mut rd = Reader {
        b: &f.bytes,
        at: RANK_HEAD,
        path: &f.path,
    };
    let ne = rd.u32()?;
    debug_assert_eq!(rd.at, HEAD);
    if d != model.delay_steps || ne != model.ne {
        return Err(f.error(format!(
            "written with a delay of {d} steps and {ne} excitatory neurons, the model has {} \
             and {}",
            model.delay_steps, model.ne
        )));
    }
    for t in first..first + len {
        let saved = read_neuron(&mut rd, t, d as usize, ne, model.neuron.refractory_steps())?;
        each(t, saved).map_err(|e| f.error(format!("neuron {t}: {e}")))?;
    }
    if rd.at != f.bytes.len() {
        bail!(
            "{}: {} bytes left over after the last neuron",
            hpc_io::message::path(&f.path),
            f.bytes.len() - rd.at
        );
    }
    Ok(())
}

/// Puts the checkpoint's state into `shards` and `traces` (this rank's,
/// freshly built for `block`); answers the step to continue from.
pub fn restore(
    r: &Restart,
    model: &Model,
    block: Block,
    shards: &mut [Shard],
    traces: &mut SourceTraces,
) -> Result<u64> {
    let ranks = rank_files(r, model.n)?;
    let step = r.step();
    // The weights of this rank's neurons' inputs; each source's trace goes
    // straight to the rank's traces, where it has one.
    let mut inputs: Vec<Vec<f64>> = vec![Vec::new(); block.len as usize];
    for rank in 0..ranks {
        each_saved(r, model, rank, |t, s| {
            let trace = match &s.source {
                Some((kp, tl, _)) => Some(SourceTrace::restore(*kp, *tl)?),
                None => None,
            };
            if let Some(trace) = trace {
                traces.restore(t, trace);
            }
            if t < block.first || t >= block.end() {
                return Ok(());
            }
            let sh = shards
                .iter_mut()
                .find(|sh| sh.first <= t && t < sh.first + sh.len)
                .ok_or_else(|| anyhow!("no shard holds neuron {t}"))?;
            let i = (t - sh.first) as usize;
            if let Some((_, _, w)) = s.source {
                inputs[(t - block.first) as usize] = w;
            }
            sh.state[i] = s.state;
            sh.archives[i].restore(s.trace, s.last_spike, &s.archive)?;
            for (k, &(w, e, n)) in s.ring.iter().enumerate() {
                let at = step + k as u64;
                sh.ring_w.row_mut(at)[i] = w;
                sh.ring_ex.row_mut(at)[i] = e;
                sh.ring_in.row_mut(at)[i] = n;
            }
            Ok(())
        })?;
    }
    for sh in shards.iter_mut() {
        let mut weights = sh.plastic.all_weights().to_vec();
        let mut cursor = vec![0u32; sh.plastic.index().len()];
        for t in sh.first..sh.first.saturating_add(sh.len).min(model.ne) {
            let mut w = inputs[(t - block.first) as usize].iter();
            input_positions(model, &sh.plastic, t, &mut cursor, |at| {
                if let Some(&x) = w.next() {
                    weights[at] = x;
                }
            });
        }
        sh.plastic
            .restore_weights(&weights)
            .map_err(|e| anyhow!("checkpoint {}: {e}", hpc_io::message::path(r.dir())))?;
    }
    Ok(step)
}

/// The spikes recorded up to the checkpoint (`None` if it has no spike file),
/// checked against the model and the manifest.
pub fn spikes(r: &Restart, model: &Model) -> Result<Option<Vec<(u32, u32)>>> {
    hpc_spiking::checkpoint::spikes_of(&r.checkpoint, model.n_rec, r.meta.spikes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A neuron of a rank file as `encode` writes it (an inhibitory one: no
    /// weights follow), with state `st` and refractory counter `refractory`.
    fn neuron_bytes(st: [f64; 6], refractory: u32, d: usize) -> Vec<u8> {
        neuron_bytes_with_ring(st, refractory, d, 0.0)
    }

    /// [`neuron_bytes`] whose ring buffer holds the input `ring` at each delay.
    fn neuron_bytes_with_ring(st: [f64; 6], refractory: u32, d: usize, ring: f64) -> Vec<u8> {
        let mut b = Vec::new();
        for x in st {
            put_f64(&mut b, x);
        }
        put_u32(&mut b, refractory);
        put_f64(&mut b, 0.5); // K-
        put_f64(&mut b, 1.0); // last spike
        put_u32(&mut b, 0); // archived spikes
        for _ in 0..d {
            put_f64(&mut b, ring);
            put_u32(&mut b, 0);
            put_u32(&mut b, 0);
        }
        b
    }

    /// A rank file whose checksums agree but whose neuron state no run has:
    /// `V_m` = inf (restored as it was, it became NaN at the first update and
    /// silenced the neuron for the rest of the run: a restart of such a file
    /// ran to its end with status 0) or a refractory counter of 2^32 - 1 steps
    /// is refused, naming the neuron and the value; a finite state reads.
    #[test]
    fn a_neuron_state_no_run_has_is_refused() {
        let path = Path::new("rank-000000.ckpt");
        let (t, d, ne, max_refractory) = (7, 3, 5, 5);
        let read = |st: [f64; 6], refractory: u32| {
            let bytes = neuron_bytes(st, refractory, d);
            let mut r = Reader {
                b: &bytes,
                at: 0,
                path,
            };
            read_neuron(&mut r, t, d, ne, max_refractory).map(|s| (s.state.v, s.state.refractory))
        };
        assert_eq!(read([1.0; 6], 5).unwrap(), (1.0, 5));
        let mut inf = [1.0; 6];
        inf[4] = f64::INFINITY;
        let e = read(inf, 0).unwrap_err().to_string();
        assert!(e.contains("V_m of neuron 7 is inf"), "{e}");
        let mut neg = [1.0; 6];
        neg[0] = f64::NEG_INFINITY;
        let e = read(neg, 0).unwrap_err().to_string();
        assert!(e.contains("I_ex of neuron 7 is -inf"), "{e}");
        let e = read([1.0; 6], u32::MAX).unwrap_err().to_string();
        assert!(
            e.contains("neuron 7 has 4294967295 refractory steps left, more than the model's 5"),
            "{e}"
        );
        // An infinite input in the ring buffer (pass 15: the neuron fired at every
        // step it could, and the network with it, status 0).
        for x in [f64::INFINITY, f64::NEG_INFINITY] {
            let bytes = neuron_bytes_with_ring([1.0; 6], 0, d, x);
            let mut r = Reader {
                b: &bytes,
                at: 0,
                path,
            };
            let e = read_neuron(&mut r, t, d, ne, max_refractory)
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("the input in the ring buffer of neuron 7 is {x}")),
                "{e}"
            );
        }
        let bytes = neuron_bytes_with_ring([1.0; 6], 0, d, -1e300);
        let mut r = Reader {
            b: &bytes,
            at: 0,
            path,
        };
        assert!(read_neuron(&mut r, t, d, ne, max_refractory).is_ok());
    }
}
