//! The run: intervals of updates between exchanges, checkpoints on the way.

use anyhow::Result;
use hpc_spiking::alltoallv::Exchange;
use hpc_spiking::rank_loop::{run_intervals, IntervalRank, Ran};
use hpc_spiking::team::{StopOnDrop, Team};
use rayon::prelude::*;

use super::shard::{Active, Dyn, Shard};
use super::{Progress, RankReport, RunOptions, Simulation};
use crate::checkpoint;
use crate::output::{header_json, Recorder};
use crate::params::NPOP;
use crate::rng::{draw, key, Poisson32, Purpose};
use hpc_spiking::intake::{Intake, SpikeFile};

/// One interval of `m` steps of one shard: the spikes `codes` (emitted from
/// step `base` on) start their delivery, then each step delivers and updates.
#[allow(clippy::too_many_arguments)]
pub(super) fn interval(
    sh: &mut Shard,
    codes: &[u32],
    base: u64,
    step0: u64,
    m: u32,
    dp: &Dyn,
    pois: &[Poisson32; NPOP],
    inh: &[bool],
) {
    for &c in codes {
        let gid = c & dp.gid_mask;
        sh.activate(
            gid,
            base + (c >> dp.gid_bits) as u64,
            step0,
            inh[gid as usize],
        );
    }
    sh.spikes.clear();
    for s in 0..m {
        sh.deliver(step0 + s as u64);
        sh.update(step0 + s as u64, s, dp, pois);
    }
}

/// One interval, as the team's workers need it (see [`crate::team`]).
pub(super) struct Job {
    pub(super) codes: Vec<u32>,
    pub(super) base: u64,
    pub(super) step0: u64,
    pub(super) m: u32,
}

impl Clone for Job {
    fn clone(&self) -> Job {
        let mut j = Job::empty();
        j.clone_from(self);
        j
    }

    /// Reuses the worker's buffer: an interval's codes are copied, not
    /// allocated, 10^4 times per biological second.
    fn clone_from(&mut self, o: &Job) {
        self.codes.clear();
        self.codes.extend_from_slice(&o.codes);
        (self.base, self.step0, self.m) = (o.base, o.step0, o.m);
    }
}

impl Job {
    fn empty() -> Job {
        Job {
            codes: Vec::new(),
            base: 0,
            step0: 0,
            m: 0,
        }
    }
}

impl<'a> Simulation<'a> {
    /// Starts delivering `codes`, spikes of the interval starting at `base`, on
    /// every shard, and remembers them for checkpoints.
    fn activate_all(&mut self, pool: &rayon::ThreadPool, codes: &[u32], base: u64) {
        let (d, inh, now) = (&self.dynp, &self.inh, self.step);
        pool.install(|| {
            self.shards.par_iter_mut().for_each(|sh| {
                for &c in codes {
                    let gid = c & d.gid_mask;
                    sh.activate(gid, base + (c >> d.gid_bits) as u64, now, inh[gid as usize]);
                }
            })
        });
        self.remember(codes, base);
    }

    fn remember(&mut self, codes: &[u32], base: u64) {
        let d = &self.dynp;
        let keep = self.step.saturating_sub(self.model.max_delay as u64 + 1);
        self.recent.retain(|&(t0, _)| t0 >= keep);
        self.recent.extend(
            codes
                .iter()
                .map(|&c| (base + (c >> d.gid_bits) as u64, c & d.gid_mask)),
        );
    }

    /// The thalamic spikes of steps `base..base + m` as spike codes (every rank
    /// draws all of them: they need no exchange).
    fn thalamic(&self, base: u64, m: u32, out: &mut Vec<u32>) {
        let model = self.model;
        let (on, off) = model.th_steps;
        if model.n_th == 0 || base + m as u64 <= on || base >= off {
            return;
        }
        let thr = (model.th_p * 18_446_744_073_709_551_616.0) as u64;
        let seed = model.params.seed;
        for s in 0..m {
            let step = base + s as u64;
            if step < on || step >= off {
                continue;
            }
            for k in 0..model.n_th {
                if draw(key(seed, Purpose::Thalamus, k as u64, 0), step) < thr {
                    out.push(s << model.gid_bits | (model.n + k));
                }
            }
        }
    }

    /// Runs to the end (or `opts.stop_at`), exchanging spikes through `ex`.
    pub fn run<E: Exchange>(
        &mut self,
        pool: &rayon::ThreadPool,
        ex: &mut E,
        opts: &RunOptions,
        progress: Option<&mut dyn FnMut(&Progress)>,
    ) -> Result<RankReport> {
        if self.shards.len() < 2 {
            return self.run_inner(pool, ex, opts, progress, None);
        }
        // One worker per shard but the first, for the whole run, on the pool's
        // (pinned) threads; this thread steps the first shard (see `Team`).
        let team = Team::new(self.shards.len() - 1, Job::empty());
        let (dp, pois, inh) = (self.dynp, self.pois.clone(), self.inh.clone());
        pool.in_place_scope(|sc| {
            for w in 0..team.workers() {
                let (team, dp, pois, inh) = (&team, &dp, &pois, &inh);
                sc.spawn(move |_| {
                    team.work(w, Job::empty(), |sh, j| {
                        interval(sh, &j.codes, j.base, j.step0, j.m, dp, pois, inh)
                    })
                });
            }
            let _stop = StopOnDrop(&team);
            self.run_inner(pool, ex, opts, progress, Some(&team))
        })
    }

    fn run_inner<E: Exchange>(
        &mut self,
        pool: &rayon::ThreadPool,
        ex: &mut E,
        opts: &RunOptions,
        progress: Option<&mut dyn FnMut(&Progress)>,
        team: Option<&Team<Shard, Job>>,
    ) -> Result<RankReport> {
        let model = self.model;
        let mut rank = Stepping {
            sim: self,
            pool,
            team,
        };
        let ran = run_intervals(&mut rank, ex, (opts, &model.params), progress)?;
        self.report(ran)
    }

    /// Steps every shard through the `m` steps from `step0`, delivering
    /// `codes` (received in the interval from `base`): this thread steps the first shard itself and the team's
    /// workers the others. Handing every shard to the pool made this thread
    /// sleep and wake once per interval, 10^4 times per biological second,
    /// and with one thread it handed over all the work.
    fn update(
        &mut self,
        team: Option<&Team<Shard, Job>>,
        codes: &[u32],
        base: u64,
        step0: u64,
        m: u32,
    ) -> Result<()> {
        let (dp, pois, inh) = (&self.dynp, &self.pois, &self.inh);
        let shards = &mut self.shards;
        let Some(team) = team else {
            interval(&mut shards[0], codes, base, step0, m, dp, pois, inh);
            return Ok(());
        };
        // `Vec::as_mut_ptr` makes no reference to the slice, so
        // the workers' pointers stay valid beside this thread's.
        let p = shards.as_mut_ptr();
        // SAFETY: `shards` holds one shard per worker and the first,
        // lives past `finish` below, and this thread touches only the
        // first until then.
        unsafe {
            team.start(p, shards.len(), |j| {
                j.codes.clear();
                j.codes.extend_from_slice(codes);
                (j.base, j.step0, j.m) = (base, step0, m);
            })
        };
        // SAFETY: `start` gave the workers the shards after the
        // first, through this same pointer; the first is this
        // thread's alone until `finish`.
        let first = unsafe { &mut *p };
        interval(first, codes, base, step0, m, dp, pois, inh);
        team.finish()
    }

    /// The rank's report at the end of the run, its spike file finished if
    /// the run completed.
    fn report(&self, ran: Ran<Recorder>) -> Result<RankReport> {
        let model = self.model;
        let (received, clocks) = (ran.intake.received, ran.clocks);
        let who = (self.rank, self.size, self.shards.len());
        let (run, recorder) =
            ran.finish(who, self.block, (self.step, model.steps, self.build_s))?;
        let state_bytes: usize = self
            .shards
            .iter()
            .map(|s| {
                s.v.len() * 24
                    + s.calendar.iter().map(Vec::capacity).sum::<usize>()
                        * std::mem::size_of::<Active>()
            })
            .sum();
        let window = (self.step.saturating_sub(model.presim_steps)) as f64 * model.params.dt;
        for (i, sh) in self.shards.iter().enumerate() {
            tracing::debug!(
                shard = i,
                first = sh.first,
                neurons = sh.len,
                events = sh.events,
                "shard load"
            );
        }
        Ok(RankReport {
            run,
            synapses: self.synapses(),
            connectivity_bytes: self.connectivity_bytes(),
            state_bytes: state_bytes as u64,
            build_cpu_s: self.build_cpu_s,
            simulate_recorded_s: clocks.recorded_s(),
            spikes_received: received,
            bytes_received: received * 4,
            events: self.shards.iter().map(|s| s.events).sum(),
            stats: recorder.map(|r| crate::output::stats(&r, model, window)),
        })
    }
}

/// A rank of the simulation as [`run_intervals`] steps it: its shards stepped
/// by this thread and the `team` ([`Simulation::update`]), with the threads of
/// `pool` for the deliveries at once.
struct Stepping<'s, 'a> {
    sim: &'s mut Simulation<'a>,
    pool: &'s rayon::ThreadPool,
    team: Option<&'s Team<Shard, Job>>,
}

impl IntervalRank for Stepping<'_, '_> {
    type Record = Recorder;

    fn rank_size(&self) -> (usize, usize) {
        (self.sim.rank, self.sim.size)
    }

    fn step(&self) -> u64 {
        self.sim.step
    }

    fn set_step(&mut self, step: u64) {
        self.sim.step = step;
    }

    fn shape(&self) -> (u32, u64, Option<u64>) {
        let model = self.sim.model;
        (model.min_delay, model.steps, Some(model.presim_steps))
    }

    /// Rank 0's recorder and spike file (continued from a restored
    /// checkpoint's), and nothing on the other ranks.
    fn intake(&self, opts: &RunOptions) -> Result<Intake<Recorder>> {
        let (sim, model) = (&*self.sim, self.sim.model);
        let header = header_json(model);
        // Flushed every 100 steps (10^4 exchanges per biological second).
        let file = opts.spikes.as_deref().map(|path| SpikeFile {
            path,
            header: &header,
            flush_every: 100,
        });
        let recorder = || Recorder::after(model.n, model.presim_steps as u32);
        let restored = sim.restored.as_ref();
        Intake::open((sim.rank, sim.step), recorder, file, restored, model.n)
    }

    fn update(&mut self, codes: &[u32], base: u64, step0: u64, m: u32) -> Result<()> {
        self.sim.update(self.team, codes, base, step0, m)
    }

    /// The codes an update delivered are remembered for checkpoints.
    fn delivered(&mut self, codes: &[u32], base: u64) {
        self.sim.remember(codes, base);
    }

    fn deliver_now(&mut self, codes: &[u32], base: u64) {
        self.sim.activate_all(self.pool, codes, base);
    }

    fn spikes(&self, send: &mut Vec<u32>) {
        for sh in &self.sim.shards {
            send.extend_from_slice(&sh.spikes);
        }
    }

    /// Rank 0 records the spikes received (and writes them to its spike file),
    /// every rank adds its thalamic input.
    fn receive(&self, intake: &mut Intake<Recorder>, base: u64, m: u32) -> Result<()> {
        intake.receive(base, m, self.sim.model.gid_bits)?;
        self.sim.thalamic(base, m, &mut intake.gathered);
        Ok(())
    }

    fn checkpoint(&self) -> Vec<u8> {
        let sim = &*self.sim;
        checkpoint::encode(sim.step, sim.block, &sim.state())
    }
}
