//! A shard: one thread's neurons, their state, calendar and update.

use crate::network::{Conn, COUNT_BITS, COUNT_MAX};
use crate::params::NPOP;
use crate::rng::{draw, key, Poisson32, Purpose};

/// Constants of the update.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dyn {
    pub(super) p22: f64,
    pub(super) p21: f64,
    pub(super) p20: f64,
    pub(super) p11: f64,
    pub(super) theta: f64,
    pub(super) v_reset: f64,
    pub(super) ref_steps: u32,
    pub(super) q_syn: f64,
    pub(super) w_ext: f64,
    pub(super) dc: [f64; NPOP],
    /// Whether each population has a Poisson background.
    pub(super) bg: [bool; NPOP],
    /// Key of the background streams (one per step, counter = neuron).
    pub(super) bg_key: u64,
    pub(super) gid_bits: u32,
    pub(super) gid_mask: u32,
}

/// Whether [`Shard::update`] runs its portable build on every processor.
static PORTABLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes the neuron update run its portable build (`true`) even where the
/// processor has AVX2 or AVX-512, for which it is also compiled and chosen at
/// run time (the default, `false`). Both give the same spikes: Rust fuses no
/// multiply with an add unless asked, so the wider instructions compute the
/// same bits; a test checks it.
pub fn set_portable_update(portable: bool) {
    PORTABLE.store(portable, std::sync::atomic::Ordering::Relaxed);
}

/// A spike whose synapses onto the shard are not all delivered yet, waiting in
/// the calendar slot of the step its next group is due.
#[derive(Clone, Copy, Debug)]
pub(super) struct Active {
    /// Next group of its row.
    pub(super) g: u32,
    /// End of its row's groups.
    pub(super) gend: u32,
    /// Position in `syn` of the next group's synapses.
    pub(super) pos: u32,
    /// Inhibitory source.
    pub(super) neg: bool,
    /// Step it was emitted in.
    pub(super) t0: u64,
}

pub(super) struct Shard {
    pub(super) first: u32,
    pub(super) len: u32,
    pub(super) conn: Conn,
    pub(super) v: Vec<f64>,
    pub(super) isyn: Vec<f64>,
    pub(super) refr: Vec<u32>,
    /// Input arriving in the current step, in weight quanta.
    pub(super) input: Vec<i32>,
    /// Calendar of spikes in flight: slot `u & mask` holds those with a group due
    /// in step `u` (every delay is below the number of slots).
    pub(super) calendar: Vec<Vec<Active>>,
    /// A spare slot, swapped with the one being delivered.
    pub(super) spare: Vec<Active>,
    pub(super) spikes: Vec<u32>,
    pub(super) events: u64,
}

impl Shard {
    /// Starts delivering the spike of `gid` emitted in step `t0`; groups due
    /// before step `now` (delivered before a checkpoint) are skipped.
    #[inline]
    pub(super) fn activate(&mut self, gid: u32, t0: u64, now: u64, neg: bool) {
        let c = &self.conn;
        let s = gid as usize;
        let (mut g, gend) = (c.grp[s], c.grp[s + 1]);
        let mut pos = c.row[s];
        while g < gend && t0 + (c.groups[g as usize] >> 24) as u64 <= now.saturating_sub(1) {
            pos += c.groups[g as usize] & COUNT_MAX;
            g += 1;
        }
        if g < gend {
            let due = t0 + (c.groups[g as usize] >> 24) as u64;
            let mask = self.calendar.len() - 1;
            self.calendar[due as usize & mask].push(Active {
                g,
                gend,
                pos,
                neg,
                t0,
            });
        }
    }

    /// Adds the input of every group due in step `u` to `input`, and files each
    /// spike under the step of its next group.
    pub(super) fn deliver(&mut self, u: u64) {
        let (groups, syn, base) = (&self.conn.groups, &self.conn.syn, &self.conn.pop_base);
        let input = &mut self.input[..];
        let mask = self.calendar.len() - 1;
        // The next step's spikes: fetch their groups and first synapses into cache
        // while this step delivers and updates.
        for a in &self.calendar[(u + 1) as usize & mask] {
            prefetch(&groups[a.g as usize]);
            prefetch(&syn[a.pos as usize]);
        }
        let mut due = std::mem::take(&mut self.spare);
        std::mem::swap(&mut due, &mut self.calendar[u as usize & mask]);
        let mut events = 0u64;
        for mut a in due.drain(..) {
            let age = (u - a.t0) as u32;
            while a.g < a.gend {
                let gr = groups[a.g as usize];
                let d = gr >> 24;
                if d > age {
                    break;
                }
                debug_assert_eq!(d, age, "a group was not delivered in its step");
                let cnt = gr & COUNT_MAX;
                let b = base[((gr >> COUNT_BITS) & 7) as usize] as usize;
                let tg = &mut input[b..];
                let ws = &syn[a.pos as usize..(a.pos + cnt) as usize];
                if a.neg {
                    for &w in ws {
                        tg[(w & 0xFFFF) as usize] -= (w >> 16) as i32;
                    }
                } else {
                    for &w in ws {
                        tg[(w & 0xFFFF) as usize] += (w >> 16) as i32;
                    }
                }
                events += cnt as u64;
                a.pos += cnt;
                a.g += 1;
            }
            if a.g < a.gend {
                let next = a.t0 + (groups[a.g as usize] >> 24) as u64;
                self.calendar[next as usize & mask].push(a);
            }
        }
        self.spare = due;
        self.events += events;
    }

    /// Updates step `u` (`s`-th of its interval), appending spike codes to `spikes`.
    ///
    /// Per chunk of a population's neurons that fits L1, two loops: the
    /// background counts (one hash per pair of neurons, a guide-table lookup per
    /// neuron), then the neurons' exact update without branches, which the
    /// compiler turns into vector instructions; the spikes are collected from the
    /// refractory counters that were just set.
    pub(super) fn update(&mut self, u: u64, s: u32, d: &Dyn, pois: &[Poisson32; NPOP]) {
        #[cfg(target_arch = "x86_64")]
        if !PORTABLE.load(std::sync::atomic::Ordering::Relaxed) {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx512dq") && has!("avx512vl") {
                // SAFETY: the processor has the features the function is compiled for.
                return unsafe { self.update_avx512(u, s, d, pois) };
            }
            if has!("avx2") {
                // SAFETY: as above.
                return unsafe { self.update_avx2(u, s, d, pois) };
            }
        }
        self.update_body(u, s, d, pois)
    }

    /// [`Shard::update`] compiled for AVX-512 (4 to 8 neurons per instruction,
    /// and the background's 64-bit multiplies vectorised). Rust never fuses a
    /// multiply and an add on its own, so every variant computes the same bits.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,avx512f,avx512dq,avx512vl")]
    unsafe fn update_avx512(&mut self, u: u64, s: u32, d: &Dyn, pois: &[Poisson32; NPOP]) {
        self.update_body(u, s, d, pois)
    }

    /// [`Shard::update`] compiled for AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn update_avx2(&mut self, u: u64, s: u32, d: &Dyn, pois: &[Poisson32; NPOP]) {
        self.update_body(u, s, d, pois)
    }

    #[inline(always)]
    fn update_body(&mut self, u: u64, s: u32, d: &Dyn, pois: &[Poisson32; NPOP]) {
        let code0 = s << d.gid_bits;
        let bg_key = key(d.bg_key, Purpose::Background, u, 0);
        for pop in 0..NPOP {
            let a = self.conn.pop_base[pop] as usize;
            let b = if pop + 1 < NPOP {
                self.conn.pop_base[pop + 1] as usize
            } else {
                self.len as usize
            };
            if a >= b {
                continue;
            }
            let gid0 = (self.first as usize + a) as u64;
            let dc = d.dc[pop] * d.p20;
            let (p22, p21, p11, q, w_ext) = (d.p22, d.p21, d.p11, d.q_syn, d.w_ext);
            let (theta, v_reset, ref_steps) = (d.theta, d.v_reset, d.ref_steps);
            // In chunks that stay in L1: the background counts of a chunk, then
            // its neurons.
            const CHUNK: usize = 512;
            let mut ext = [0.0f64; CHUNK];
            let mut c0 = a;
            while c0 < b {
                let c1 = (c0 + CHUNK).min(b);
                let n = c1 - c0;
                let ext = &mut ext[..n];
                if d.bg[pop] {
                    background(&pois[pop], bg_key, (self.first as usize + c0) as u64, ext);
                }
                let (v, isyn, refr, input) = (
                    &mut self.v[c0..c1],
                    &mut self.isyn[c0..c1],
                    &mut self.refr[c0..c1],
                    &mut self.input[c0..c1],
                );
                for i in 0..n {
                    let inp = input[i] as f64 * q + ext[i] * w_ext;
                    input[i] = 0;
                    let r = refr[i];
                    let x = if r == 0 {
                        v[i] * p22 + isyn[i] * p21 + dc
                    } else {
                        v[i]
                    };
                    isyn[i] = isyn[i] * p11 + inp;
                    let spike = x >= theta;
                    v[i] = if spike { v_reset } else { x };
                    refr[i] = if spike {
                        ref_steps
                    } else {
                        r.saturating_sub(1)
                    };
                }
                c0 = c1;
            }
            let refr = &self.refr[a..b];
            // A counter at its full value was set in this step (t_ref is at least
            // one step, so a counter set before has counted down): a spike.
            for (i, &r) in refr.iter().enumerate() {
                if r == ref_steps {
                    self.spikes.push(code0 | (gid0 as u32 + i as u32));
                }
            }
        }
    }
}

/// The background counts of the neurons `gid0..gid0 + out.len()` in step key
/// `bg_key`: one 64-bit draw per pair of neurons (2k, 2k + 1), the even one
/// taking the low 32 bits and the odd one the high 32, as uniforms of 32-bit
/// resolution for the table's inverse.
#[inline(always)]
pub(super) fn background(table: &Poisson32, bg_key: u64, gid0: u64, out: &mut [f64]) {
    let n = out.len();
    let lo = |h: u64| table.sample(h as u32) as f64;
    let hi = |h: u64| table.sample((h >> 32) as u32) as f64;
    let mut i = 0;
    if gid0 & 1 == 1 && n > 0 {
        out[0] = hi(draw(bg_key, gid0 >> 1));
        i = 1;
    }
    while i + 1 < n {
        let h = draw(bg_key, (gid0 + i as u64) >> 1);
        out[i] = lo(h);
        out[i + 1] = hi(h);
        i += 2;
    }
    if i < n {
        out[i] = lo(draw(bg_key, (gid0 + i as u64) >> 1));
    }
}

/// Hints the processor to bring `x`'s cache line into L2.
#[inline(always)]
pub(super) fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it reads nothing architecturally and cannot
    // fault, and `x` is a valid reference besides.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_mm_prefetch(x as *const T as *const i8, std::arch::x86_64::_MM_HINT_T1);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}
