//! The raster: a spike mark per spike of the shown neurons, populations apart,
//! and the population rate under it.

use super::*;

impl Prepared<'_> {
    pub(super) fn raster<DB: DrawingBackend>(
        &self,
        c: &Canvas<DB>,
        area: Rect,
        k: f64,
    ) -> DResult<DB> {
        let (t0, t1) = (self.rec.t_start_ms, self.rec.t_stop_ms);
        let rows = self.rows.max(1) as f64;
        let tick_em = EM_TICK * k;
        let gap = (16.0 * k) as i32;
        let xg = x_gutter(k);
        let raster_b = area.t + ((area.h() - xg) as f64 * 0.72) as i32;
        let rate_t = raster_b + gap;
        let rate_b = area.b - xg;

        // Both panels share the y gutter, sized for the wider labels.
        let labels = self.raster_labels(raster_b - area.t, k);
        let cap = rate_axis_max(&self.rate);
        let (rate_top, rate_ticks) = axis_to(cap, 3);
        let rate_labels: Vec<(f64, String)> =
            rate_ticks.iter().map(|&v| (v, thousands_f(v))).collect();
        let label_w = labels
            .iter()
            .chain(rate_labels.iter())
            .map(|(_, s)| font::width(s, tick_em))
            .max()
            .unwrap_or(0);
        let l = area.l + y_gutter(label_w, k);
        // Room for half of the last time label right of the axis' end.
        let r = area.r - font::width(&thousands_f(t1), tick_em) / 2 - 4;
        let top = Frame {
            px: Rect {
                l,
                t: area.t,
                r,
                b: raster_b,
            },
            x: (t0, t1),
            y: (0.0, rows),
        };
        let x_max_ticks = ((r - l) as f64 / (95.0 * k)).max(2.0) as usize;
        let xt = ticks(t0, t1, x_max_ticks);

        let grouped = self.rec.grouped();
        self.raster_marks(c, &top, rows)?;
        c.axes(&top)?;
        c.x_ticks(&top, &xt, tick_em, false)?;
        let ticks_px: Vec<(f64, String)> =
            labels.iter().map(|(r, s)| (rows - r, s.clone())).collect();
        c.y_ticks(&top, &ticks_px, tick_em)?;
        let y_title = if grouped {
            self.rec
                .group_title
                .clone()
                .unwrap_or_else(|| "group".into())
        } else {
            "neuron index".into()
        };
        let title_x = area.l + (EM_AXIS * k * 0.6) as i32;
        c.vlabel(&y_title, (title_x, (top.px.t + top.px.b) / 2), EM_AXIS * k)?;

        // The population rate of all neurons under it.
        let bottom = Frame {
            px: Rect {
                l,
                t: rate_t,
                r,
                b: rate_b,
            },
            x: (t0, t1),
            y: (0.0, rate_top),
        };
        c.grid_y(&bottom, &rate_ticks[1..])?;
        self.rate_line(c, &bottom, rate_top, k)?;
        c.axes(&bottom)?;
        let below = c.x_ticks(&bottom, &xt, tick_em, true)?;
        c.y_ticks(&bottom, &rate_labels, tick_em)?;
        c.x_title("time (ms)", &bottom, below, k)?;
        c.vlabel(
            "rate (Hz)",
            (title_x, (bottom.px.t + bottom.px.b) / 2),
            EM_AXIS * k,
        )?;
        Ok(())
    }

    /// The raster's marks in frame `top` (`rows` rows): lines between populations
    /// (darker between groups) and a vertical mark per spike, 2 px wide, most of a
    /// row high.
    fn raster_marks<DB: DrawingBackend>(
        &self,
        c: &Canvas<DB>,
        top: &Frame,
        rows: f64,
    ) -> DResult<DB> {
        let grouped = self.rec.grouped();
        for (i, b) in self.blocks.iter().enumerate().skip(1) {
            let y = top.y(rows - b.row as f64);
            let new_group =
                grouped && self.rec.populations[i].group != self.rec.populations[i - 1].group;
            let color = if new_group || !grouped {
                RULE_DARK
            } else {
                RULE
            };
            c.line(
                vec![(top.px.l + 1, y), (top.px.r, y)],
                color.stroke_width(1),
            )?;
        }

        // Spikes: a vertical mark per spike, 2 px wide, most of a row high.
        let row_px = top.px.h() as f64 / rows;
        let half = (0.42 * row_px).clamp(1.0, 4.0).round() as i32;
        let colors: Vec<RGBColor> = self.rec.populations.iter().map(|p| rgb(p.color)).collect();
        let marks = self.spikes.iter().filter_map(|&(t, id)| {
            let (pop, _) = self.index.slot(id)?;
            let b = &self.blocks[pop];
            let off = id - self.rec.populations[pop].first;
            if off % b.stride != 0 || off / b.stride >= b.n {
                return None;
            }
            let row = b.row + off / b.stride;
            let y = top.y(rows - row as f64 - 0.5);
            let x = top.x(t as f64 * self.rec.dt_ms);
            Some(Rectangle::new(
                [(x - 1, y - half), (x + 1, y + half)],
                colors[pop].filled(),
            ))
        });
        for m in marks {
            c.root.draw(&m)?;
        }
        Ok(())
    }

    /// The population rate in frame `bottom`, cut at `rate_top`: bins above it get
    /// a mark at the top and the peak is given in words.
    fn rate_line<DB: DrawingBackend>(
        &self,
        c: &Canvas<DB>,
        bottom: &Frame,
        rate_top: f64,
        k: f64,
    ) -> DResult<DB> {
        let (t0, t1) = bottom.x;
        let pts: Vec<(i32, i32)> = self
            .rate
            .iter()
            .enumerate()
            .flat_map(|(i, &v)| {
                let a = t0 + i as f64 * self.bin_ms;
                let b = (a + self.bin_ms).min(t1);
                let v = v.min(rate_top);
                [bottom.pt(a, v), bottom.pt(b, v)]
            })
            .collect();
        c.line(pts, BLACK.stroke_width(1))?;
        let rate_max = self.rate.iter().copied().fold(0.0, f64::max);
        if rate_max > rate_top {
            // Bins above the axis: a mark at the top, and the peak in words.
            for (i, _) in self.rate.iter().enumerate().filter(|(_, &v)| v > rate_top) {
                let x = bottom.x(t0 + (i as f64 + 0.5) * self.bin_ms);
                let y = bottom.px.t;
                let s = (5.0 * k) as i32;
                c.root.draw(&Polygon::new(
                    vec![(x, y - s), (x - s, y + s / 2), (x + s, y + s / 2)],
                    INK.filled(),
                ))?;
            }
            c.note(
                &format!(
                    "▲ off scale: peak {} Hz in a {} ms bin",
                    thousands_f(rate_max.round()),
                    thousands_f(self.bin_ms)
                ),
                (bottom.px.r - 6, bottom.px.t + 4),
                EM_NOTE * k,
                Pos::new(HPos::Right, VPos::Top),
            )?;
        }
        Ok(())
    }

    /// `(row position from the top, label)` of the raster's y ticks: for grouped
    /// populations one per group at its middle (as NEST's microcircuit example),
    /// otherwise neuron ids at round numbers inside each population, spaced so
    /// that labels never overlap. `height`: the raster's height in pixels.
    pub(super) fn raster_labels(&self, height: i32, k: f64) -> Vec<(f64, String)> {
        let rows = self.rows.max(1) as f64;
        if self.rec.grouped() {
            let mut out: Vec<(f64, String)> = Vec::new();
            let mut start = 0u32;
            for (i, p) in self.rec.populations.iter().enumerate() {
                let b = &self.blocks[i];
                let last = i + 1 == self.rec.populations.len()
                    || self.rec.populations[i + 1].group != p.group;
                if last {
                    let end = b.row + b.n;
                    out.push((
                        (start + end) as f64 / 2.0,
                        p.group.clone().unwrap_or_default(),
                    ));
                    start = end;
                }
            }
            return out;
        }
        let row_px = height as f64 / rows;
        let min_gap = EM_TICK * k * 2.0;
        let mut out: Vec<(f64, String)> = Vec::new();
        let mut last_y = f64::NEG_INFINITY;
        for (i, p) in self.rec.populations.iter().enumerate() {
            let b = &self.blocks[i];
            // A round step of ids whose labels are at least min_gap apart.
            let step = nice_step(min_gap * b.stride as f64 / row_px).max(1.0) as u64;
            let span = b.n as u64 * b.stride as u64;
            let mut v = 0u64;
            while v < span {
                let id = p.first as u64 + v;
                // Neuron `first + v` sits at the centre of row `v / stride`.
                let row = b.row as f64 + v as f64 / b.stride as f64 + 0.5;
                let y = row * row_px;
                if y - last_y >= min_gap {
                    out.push((row, crate::thousands(id)));
                    last_y = y;
                }
                v = (id / step + 1) * step - p.first as u64;
            }
        }
        out
    }
}
