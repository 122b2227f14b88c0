//! The run: intervals of updates between exchanges, checkpoints on the way.

use std::time::{Duration, Instant};

use anyhow::Result;
use hpc_spiking::alltoallv::Exchange;
use hpc_spiking::checkpoint::RunCheckpoints;
use hpc_spiking::team::{StopOnDrop, Team};
use rayon::prelude::*;

use super::shard::{Active, Dyn, Shard};
use super::{Progress, RankReport, RunOptions, Simulation};
use crate::checkpoint;
use crate::output::{header_json, Recorder};
use crate::params::{Params, NPOP};
use crate::rng::{draw, key, Poisson32, Purpose};
use hpc_spiking::intake::{Intake, Intervals, SpikeFile};

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
        mut progress: Option<&mut dyn FnMut(&Progress)>,
        team: Option<&Team<Shard, Job>>,
    ) -> Result<RankReport> {
        let model = self.model;
        let start_step = self.step;
        let iv = Intervals::new(opts, model.min_delay, model.steps, start_step)?;
        let mut intake = self.intake(opts)?;
        let mut times = Times {
            t0: Instant::now(),
            t_rec: (self.step >= model.presim_steps).then(Instant::now),
            cpu0: hpc_spiking::run::cpu_seconds(),
            update_s: 0.0,
            comm_s: 0.0,
        };
        let mut send: Vec<u32> = Vec::new();
        let mut send_base: Option<(u64, u32)> = None;
        let mut checkpoints = opts.checkpoints(&model.params);

        while self.step < iv.end {
            let m = iv.next(self.step, Some(model.presim_steps));
            let step0 = self.step;
            let tu = Instant::now();
            let base = intake.base;
            // Whether this update delivers the codes of the last exchange.
            let delivers = intake.has;
            match send_base.take() {
                Some((prev, pm)) => {
                    let (r, work_s) = {
                        let (codes, incoming) = intake.codes_and_incoming();
                        let work = || self.update(team, codes, base, step0, m);
                        ex.spikes(&send, incoming, work)?
                    };
                    r?;
                    times.update_s += work_s;
                    times.comm_s += tu.elapsed().as_secs_f64() - work_s;
                    self.delivered(&mut intake, delivers);
                    self.receive(&mut intake, prev, pm)?;
                }
                None => {
                    let (codes, _) = intake.codes_and_incoming();
                    self.update(team, codes, base, step0, m)?;
                    times.update_s += tu.elapsed().as_secs_f64();
                    self.delivered(&mut intake, delivers);
                }
            }
            send.clear();
            for sh in &self.shards {
                send.extend_from_slice(&sh.spikes);
            }
            send_base = Some((step0, m));
            if iv.lag == 1 {
                let tc = Instant::now();
                ex.spikes(&send, &mut intake.incoming, || ())?;
                times.comm_s += tc.elapsed().as_secs_f64();
                self.receive(&mut intake, step0, m)?;
                send_base = None;
            }
            self.step += m as u64;
            if self.step == model.presim_steps {
                times.t_rec = Some(Instant::now());
            }

            let at_checkpoint = iv.at_checkpoint(self.step);
            if at_checkpoint || self.step == iv.end {
                if let Some((prev, pm)) = send_base.take() {
                    self.activate_gathered(pool, &mut intake);
                    let tc = Instant::now();
                    ex.spikes(&send, &mut intake.incoming, || ())?;
                    times.comm_s += tc.elapsed().as_secs_f64();
                    self.receive(&mut intake, prev, pm)?;
                }
                self.activate_gathered(pool, &mut intake);
                intake.flush()?;
            }
            if at_checkpoint {
                if let Some(ck) = checkpoints.as_mut() {
                    let ti = Instant::now();
                    self.write_checkpoint(ex, ck, &intake)?;
                    intake.io_s += ti.elapsed().as_secs_f64();
                }
            }
            if let Some(cb) = progress.as_mut() {
                cb(&Progress {
                    step: self.step,
                    steps: model.steps,
                    start_step,
                    wall: times.t0.elapsed(),
                    wall_recorded: times.t_rec.map_or(Duration::ZERO, |t| t.elapsed()),
                });
            }
        }
        self.report(intake, &times, iv.interval, start_step)
    }

    /// Rank 0's recorder and spike file (continued from a restored
    /// checkpoint's), and nothing on the other ranks.
    fn intake(&self, opts: &RunOptions) -> Result<Intake<Recorder>> {
        let model = self.model;
        let header = header_json(model);
        // Flushed every 100 steps (10^4 exchanges per biological second).
        let file = opts.spikes.as_deref().map(|path| SpikeFile {
            path,
            header: &header,
            flush_every: 100,
        });
        let recorder = || Recorder::new(model.n, model.presim_steps as u32);
        let restored = self.restored.as_ref();
        Intake::open((self.rank, self.step), recorder, file, restored, model.n)
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

    /// Takes the spikes just received, the exchange of the interval of `m`
    /// steps from `base`: rank 0 records them (and writes them to its spike
    /// file), every rank adds its thalamic input.
    fn receive(&self, intake: &mut Intake<Recorder>, base: u64, m: u32) -> Result<()> {
        intake.receive(base, m, self.model.gid_bits)?;
        self.thalamic(base, m, &mut intake.gathered);
        Ok(())
    }

    /// After an update that delivered the codes received (`delivers`): they are
    /// remembered for checkpoints and taken.
    fn delivered(&mut self, intake: &mut Intake<Recorder>, delivers: bool) {
        if delivers {
            let codes = std::mem::take(&mut intake.gathered);
            self.remember(&codes, intake.base);
            intake.gathered = codes;
            intake.has = false;
        }
    }

    /// Activates the spikes received and not yet delivered at once (before a
    /// checkpoint or the end) and takes them.
    fn activate_gathered(&mut self, pool: &rayon::ThreadPool, intake: &mut Intake<Recorder>) {
        if intake.has {
            let codes = std::mem::take(&mut intake.gathered);
            self.activate_all(pool, &codes, intake.base);
            intake.gathered = codes;
            intake.has = false;
        }
    }

    /// The rank's report at the end of the run, its spike file finished if
    /// the run completed.
    fn report(
        &self,
        intake: Intake<Recorder>,
        times: &Times,
        m_steps: u32,
        start_step: u64,
    ) -> Result<RankReport> {
        let model = self.model;
        let completed = self.step >= model.steps;
        let (io_s, received) = (intake.io_s, intake.received);
        let (spike_file, recorder) = intake.finish(completed)?;
        let simulate_s = times.t0.elapsed().as_secs_f64();
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
            rank: self.rank,
            size: self.size,
            threads: self.shards.len(),
            first: self.block.first,
            neurons: self.block.len,
            synapses: self.synapses(),
            connectivity_bytes: self.connectivity_bytes(),
            state_bytes: state_bytes as u64,
            interval_steps: m_steps,
            start_step,
            end_step: self.step,
            completed,
            build_s: self.build_s,
            build_cpu_s: self.build_cpu_s,
            simulate_s,
            simulate_recorded_s: times.t_rec.map_or(0.0, |t| t.elapsed().as_secs_f64()),
            simulate_cpu_s: hpc_spiking::run::cpu_seconds() - times.cpu0,
            update_s: times.update_s,
            communicate_s: times.comm_s,
            io_s,
            spikes_received: received,
            bytes_received: received * 4,
            events: self.shards.iter().map(|s| s.events).sum(),
            stats: recorder.map(|r| r.stats(model, window)),
            spike_file,
        })
    }

    /// Writes this rank's checkpoint at the current step; rank 0 commits it
    /// (with the spike file so far) once every rank's file is there.
    fn write_checkpoint<E: Exchange>(
        &self,
        ex: &mut E,
        checkpoints: &mut RunCheckpoints<'_, Params>,
        intake: &Intake<Recorder>,
    ) -> Result<()> {
        let payload = checkpoint::encode(self.step, self.block, &self.state());
        checkpoints.write(
            (self.step, self.rank, self.size),
            &payload,
            intake.checkpoint_spikes(),
            |words, all| ex.words(words, all),
        )
    }
}

/// The clocks of a run.
struct Times {
    t0: Instant,
    t_rec: Option<Instant>,
    cpu0: f64,
    update_s: f64,
    comm_s: f64,
}
