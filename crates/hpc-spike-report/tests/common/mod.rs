//! Small synthetic recordings: irregular spike trains with a refractory period,
//! reproducible (a fixed linear congruential generator), fast to make.

#![allow(dead_code)]

use hpc_spike_report::{palette, Population, Recording, RunInfo};

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Spikes of `(first, count, rate Hz)` populations over `t_ms`, plus a
/// synchronous onset at 10 ms (as a network started from identical states).
pub fn trains(pops: &[(u32, u32, f64)], t_ms: f64, dt: f64) -> Vec<(u32, u32)> {
    trains_seeded(42, pops, t_ms, dt)
}

/// [`trains`] drawn from the generator started at `seed`.
pub fn trains_seeded(seed: u64, pops: &[(u32, u32, f64)], t_ms: f64, dt: f64) -> Vec<(u32, u32)> {
    let mut g = Lcg(seed);
    let mut v = Vec::new();
    for &(first, count, rate) in pops {
        let mean = 1000.0 / rate;
        for id in first..first + count {
            v.push(((10.0 / dt) as u32, id));
            let mut t = 10.0;
            loop {
                // 2 ms refractory + exponential: CV a little under 1.
                t += 2.0 + -(1.0 - g.next()).ln() * (mean - 2.0).max(0.1);
                if t > t_ms {
                    break;
                }
                v.push(((t / dt).round() as u32, id));
            }
        }
    }
    v.sort();
    v
}

/// A Brunel-like recording of `ne` E and `ni` I neurons firing at `rates` (Hz)
/// over `t_ms`, spikes from [`trains_seeded`] with `seed`.
pub fn brunel_recording(ne: u32, ni: u32, rates: (f64, f64), t_ms: f64, seed: u64) -> Recording {
    Recording {
        populations: vec![
            Population::new("E", 0, ne, palette::EXCITATORY),
            Population::new("I", ne, ni, palette::INHIBITORY),
        ],
        spikes: trains_seeded(seed, &[(0, ne, rates.0), (ne, ni, rates.1)], t_ms, 0.1),
        dt_ms: 0.1,
        t_start_ms: 0.0,
        t_stop_ms: t_ms,
        group_title: None,
    }
}

/// A small Brunel-like network: 400 E and 100 I neurons, 500 ms.
pub fn brunel() -> (Recording, RunInfo) {
    let rec = brunel_recording(400, 100, (30.0, 35.0), 500.0, 42);
    let mut run = RunInfo::new("Brunel (2000) balanced network", 500, 2, 1);
    run.synapses = Some(62_500);
    (rec, run)
}

/// A recording of layers `(name, E neurons, I neurons, E rate, I rate)`, an E and
/// an I population each in the layer's group, over 1 s; spikes from
/// [`trains_seeded`] with `seed`.
pub fn layered_recording(layers: &[(&str, u32, u32, f64, f64)], seed: u64) -> Recording {
    let mut pops = Vec::new();
    let mut spec = Vec::new();
    let mut first = 0;
    for &(layer, ne, ni, re, ri) in layers {
        pops.push(
            Population::new(format!("{layer}E"), first, ne, palette::EXCITATORY).in_group(layer),
        );
        spec.push((first, ne, re));
        first += ne;
        pops.push(
            Population::new(format!("{layer}I"), first, ni, palette::INHIBITORY).in_group(layer),
        );
        spec.push((first, ni, ri));
        first += ni;
    }
    Recording {
        populations: pops,
        spikes: trains_seeded(seed, &spec, 1000.0, 0.1),
        dt_ms: 0.1,
        t_start_ms: 0.0,
        t_stop_ms: 1000.0,
        group_title: Some("layer".into()),
    }
}

/// The eight populations of the cortical microcircuit (Potjans and Diesmann
/// 2014) at 5 % of its size, with rates near the model's.
pub fn microcircuit() -> (Recording, RunInfo) {
    let layers = [
        ("L2/3", 1034u32, 292u32, 0.9, 2.8),
        ("L4", 1096, 274, 4.4, 5.8),
        ("L5", 243, 53, 7.6, 8.1),
        ("L6", 720, 147, 1.1, 7.5),
    ];
    let rec = layered_recording(&layers, 42);
    let run = RunInfo::new(
        "Cortical microcircuit (Potjans and Diesmann 2014), 5 %",
        rec.neurons(),
        4,
        2,
    );
    (rec, run)
}
