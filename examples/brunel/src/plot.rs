//! Raster and population-rate plots as PNG, drawn without text (no font needed):
//! the axes are the frame, time runs left to right over the simulated time. The
//! labelled versions come from `tools/plot.py`.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

/// Draws a raster of the first `n_show` neurons of each population (excitatory
/// blue, inhibitory red) to `raster`, and the population rate in `bin_ms` bins to
/// `rate`. `spikes` are `(tick, id)`, `dt_ms` the tick length.
#[allow(clippy::too_many_arguments)]
pub fn plots(
    spikes: &[(u32, u32)],
    dt_ms: f64,
    t_ms: f64,
    ne: u32,
    n: u32,
    n_show: u32,
    raster: &Path,
    rate: &Path,
) -> Result<()> {
    let err = |e: DrawingAreaErrorKind<_>| anyhow!("drawing: {e:?}");
    let (w, h) = (1200u32, 600u32);
    let (l, r, t, b) = (40i32, 20i32, 20i32, 30i32);
    let pw = (w as i32 - l - r) as f64;
    let t_ms = t_ms.max(dt_ms);
    let x_of = |tick: u32| l + ((tick as f64 * dt_ms) / t_ms * pw) as i32;

    let show_e = n_show.min(ne);
    let show_i = n_show.min(n - ne);
    let rows = (show_e + show_i).max(1);
    {
        let root = BitMapBackend::new(raster, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let ph = (h as i32 - t - b) as f64;
        let y_of = |row: u32| t + ((rows - 1 - row) as f64 / rows as f64 * ph) as i32;
        let dot = ((ph / rows as f64) as i32 / 2).clamp(1, 3);
        for &(tick, id) in spikes {
            let (row, color) = if id < show_e {
                (id, BLUE)
            } else if id >= ne && id < ne + show_i {
                (show_e + id - ne, RED)
            } else {
                continue;
            };
            let (x, y) = (x_of(tick), y_of(row));
            root.draw(&Rectangle::new([(x, y), (x + 1, y + dot)], color.filled()))
                .map_err(err)?;
        }
        root.draw(&Rectangle::new(
            [(l - 2, t - 2), (w as i32 - r + 2, h as i32 - b + 2)],
            BLACK.stroke_width(1),
        ))
        .map_err(err)?;
        root.present().map_err(err)?;
    }
    {
        let (w, h) = (1200u32, 300u32);
        let bin_ms = 1.0;
        let bins = (t_ms / bin_ms).ceil().max(1.0) as usize;
        let mut count = vec![0u32; bins];
        for &(tick, _) in spikes {
            let i = ((tick as f64 * dt_ms - 1e-9) / bin_ms) as usize;
            if let Some(c) = count.get_mut(i.min(bins - 1)) {
                *c += 1;
            }
        }
        let rate_hz: Vec<f64> = count
            .iter()
            .map(|&c| c as f64 / n as f64 / (bin_ms / 1000.0))
            .collect();
        // Scale to the 99.5th percentile so the synchronous onset (all neurons
        // start at V_init) does not flatten the rest; it is clipped.
        let mut sorted = rate_hz.clone();
        sorted.sort_by(f64::total_cmp);
        let p995 = sorted[(sorted.len() - 1) * 995 / 1000];
        let max = (p995 * 1.2).max(1.0);
        let root = BitMapBackend::new(rate, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let ph = (h as i32 - t - b) as f64;
        let pts: Vec<(i32, i32)> = rate_hz
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                (
                    l + (i as f64 / bins as f64 * pw) as i32,
                    h as i32 - b - (v.min(max) / max * ph) as i32,
                )
            })
            .collect();
        root.draw(&PathElement::new(pts, BLACK.stroke_width(1)))
            .map_err(err)?;
        // Gridlines every 10 Hz (light), the frame.
        let mut y = 10.0;
        while y < max {
            let py = h as i32 - b - (y / max * ph) as i32;
            root.draw(&PathElement::new(
                vec![(l, py), (w as i32 - r, py)],
                RGBColor(220, 220, 220).stroke_width(1),
            ))
            .map_err(err)?;
            y += 10.0;
        }
        root.draw(&Rectangle::new(
            [(l - 2, t - 2), (w as i32 - r + 2, h as i32 - b + 2)],
            BLACK.stroke_width(1),
        ))
        .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(())
}
