//! The histogram of the neurons' CV of inter-spike intervals: one panel per
//! group (stacked, legends at the right) or one for all.

use super::*;

impl Prepared<'_> {
    pub(super) fn cv_isi<DB: DrawingBackend>(
        &self,
        c: &Canvas<DB>,
        area: Rect,
        k: f64,
        caption: &str,
    ) -> DResult<DB> {
        let panels = self.cv_panels();
        let stacked = panels.len() > 1;
        let caption = if stacked {
            format!("{caption} (means at right)")
        } else {
            caption.to_string()
        };
        c.label(
            &caption,
            ((area.l + area.r) / 2, area.t),
            EM_CAPTION * k,
            Pos::new(HPos::Center, VPos::Top),
        )?;
        let tick_em = EM_TICK * k;
        let note_em = EM_NOTE * k;
        let line_h = (note_em * 1.45) as i32;
        // Stacked panels put their legends in a column at the right.
        let legend_w = if stacked {
            self.cv_legend_width(&panels, k)
        } else {
            0
        };
        let body = area.inset(
            (EM_CAPTION * k * 2.0) as i32,
            (14.0 * k) as i32 + legend_w,
            0,
            0,
        );
        let gap = if stacked { (18.0 * k) as i32 } else { 0 };
        let n = panels.len() as i32;
        let ph = (body.h() - x_gutter(k) - gap * (n - 1)) / n;

        // Shared x axis: as many ticks as fit with their labels apart.
        let all: Vec<f64> = self
            .analysis
            .populations
            .iter()
            .flat_map(|p| p.cvs.iter().copied())
            .collect();
        let probe = font::width("0.25", tick_em) as f64;
        let label_w = font::width("0.25", tick_em);
        let l = body.l + y_gutter(label_w, k);
        let max_n = ((body.r - l) as f64 / (probe * 2.2)).clamp(2.0, 8.0) as usize;
        let (xmax, xt) = axis_to(cv_axis_max(&all), max_n);
        let bins = 40usize;
        let bw = xmax / bins as f64;
        let hists = self.cv_hists(bins, bw);

        let mut last = None;
        for (pi, (title, members)) in panels.iter().enumerate() {
            let t = body.t + pi as i32 * (ph + gap);
            // Head room for the legend (and the group's name) above the data.
            let lines = if stacked { 0 } else { members.len() as i32 };
            let legend_h = lines * line_h + 8;
            let room = (1.0 - legend_h as f64 / ph.max(1) as f64).clamp(0.25, 0.9);
            let ymax = members
                .iter()
                .flat_map(|&i| hists[i].iter().copied())
                .fold(0.0, f64::max);
            let (ytop, yt) = axis_to((ymax / room).max(0.01), if stacked { 2 } else { 5 });
            let f = Frame {
                px: Rect {
                    l,
                    t,
                    r: body.r,
                    b: t + ph,
                },
                x: (0.0, xmax),
                y: (0.0, ytop),
            };
            c.grid_y(&f, &yt[1..])?;
            self.cv_bars(c, &f, members, &hists, bw)?;
            c.axes(&f)?;
            c.x_ticks(&f, &xt, tick_em, pi + 1 == panels.len())?;
            // Stacked panels label only their top (their zero is the axis line).
            let ylabels: Vec<(f64, String)> = yt
                .iter()
                .filter(|&&v| !stacked || v == ytop)
                .map(|&v| (v, thousands_f(v)))
                .collect();
            c.y_ticks(&f, &ylabels, tick_em)?;
            let legend_x = body.r + (14.0 * k) as i32;
            self.cv_legend(c, &f, title, members, stacked, legend_x, legend_w, k)?;
            last = Some(f);
        }
        if let Some(f) = last {
            let below =
                f.px.b + (EM_TICK * 0.4 * k) as i32 + 5 + font::cap_height(tick_em).ceil() as i32;
            c.x_title("CV of ISI", &f, below, k)?;
            let mid = (body.t + f.px.b) / 2;
            c.vlabel(
                "fraction of neurons",
                (body.l + (EM_AXIS * k * 0.6) as i32, mid),
                EM_AXIS * k,
            )?;
        }
        Ok(())
    }

    /// The panels: one per group (stacked over a shared x axis), or one for all;
    /// each with its populations.
    fn cv_panels(&self) -> Vec<(String, Vec<usize>)> {
        let mut panels: Vec<(String, Vec<usize>)> = Vec::new();
        if self.rec.grouped() {
            for (i, p) in self.rec.populations.iter().enumerate() {
                let g = p.group.clone().unwrap_or_default();
                match panels.iter_mut().find(|(name, _)| *name == g) {
                    Some((_, v)) => v.push(i),
                    None => panels.push((g, vec![i])),
                }
            }
        } else {
            panels.push((String::new(), (0..self.rec.populations.len()).collect()));
        }
        panels
    }

    /// The width of the legend column right of stacked panels.
    fn cv_legend_width(&self, panels: &[(String, Vec<usize>)], k: f64) -> i32 {
        let note_em = EM_NOTE * k;
        self.analysis
            .populations
            .iter()
            .map(|p| {
                font::width(
                    &format!("{} {:.2}", p.name, p.cv_mean.unwrap_or(0.0)),
                    note_em,
                ) + 40
            })
            .chain(
                panels
                    .iter()
                    .map(|(g, _)| font::width(g, EM_LEGEND * k) + 10),
            )
            .max()
            .unwrap_or(0)
            + (10.0 * k) as i32
    }

    /// Per population, the fraction of its neurons in each of `bins` bins `bw` wide.
    fn cv_hists(&self, bins: usize, bw: f64) -> Vec<Vec<f64>> {
        self.analysis
            .populations
            .iter()
            .map(|p| {
                let mut h = vec![0f64; bins];
                for &v in &p.cvs {
                    h[((v / bw) as usize).min(bins - 1)] += 1.0;
                }
                let n = p.cvs.len().max(1) as f64;
                h.iter_mut().for_each(|v| *v /= n);
                h
            })
            .collect()
    }

    /// The histograms of `members` in frame `f`: filled bars under an outline.
    fn cv_bars<DB: DrawingBackend>(
        &self,
        c: &Canvas<DB>,
        f: &Frame,
        members: &[usize],
        hists: &[Vec<f64>],
        bw: f64,
    ) -> DResult<DB> {
        let xmax = f.x.1;
        let fill = if members.len() > 1 { 0.12 } else { 0.25 };
        for &i in members {
            if self.analysis.populations[i].cvs.is_empty() {
                continue;
            }
            let col = rgb(self.rec.populations[i].color);
            let h = &hists[i];
            for (j, &v) in h.iter().enumerate().filter(|(_, &v)| v > 0.0) {
                c.rect(
                    f.pt(j as f64 * bw, v),
                    f.pt((j + 1) as f64 * bw, 0.0),
                    col.mix(fill).filled(),
                )?;
            }
            let mut pts = vec![f.pt(0.0, 0.0)];
            for (j, &v) in h.iter().enumerate() {
                pts.push(f.pt(j as f64 * bw, v));
                pts.push(f.pt((j + 1) as f64 * bw, v));
            }
            pts.push(f.pt(xmax, 0.0));
            c.line(pts, col.stroke_width(2))?;
        }
        Ok(())
    }

    /// A panel's legend: at its top right (a single panel), or the group's name and
    /// a line per population in the column from `legend_x` (stacked).
    #[allow(clippy::too_many_arguments)]
    fn cv_legend<DB: DrawingBackend>(
        &self,
        c: &Canvas<DB>,
        f: &Frame,
        title: &str,
        members: &[usize],
        stacked: bool,
        legend_x: i32,
        legend_w: i32,
        k: f64,
    ) -> DResult<DB> {
        let note_em = EM_NOTE * k;
        let line_h = (note_em * 1.45) as i32;
        // A single panel: one line per population at the top right (name, mean
        // CV, the neurons that have one). Stacked: the group's name and a line
        // per population (name, mean CV) right of the panel.
        let (mut y, right) = if stacked {
            let h = (members.len() as i32 + 1) * line_h;
            (f.px.t + (f.px.h() - h) / 2, legend_x + legend_w)
        } else {
            (f.px.t + 2, f.px.r - 6)
        };
        if stacked {
            c.label(
                title,
                (legend_x + 10, y + line_h / 2),
                EM_LEGEND * k,
                Pos::new(HPos::Left, VPos::Center),
            )?;
            y += line_h;
        }
        for &i in members {
            let p = &self.analysis.populations[i];
            let s = match (p.cv_mean, stacked) {
                (Some(m), false) => format!(
                    "{}: mean {:.2}, n = {}",
                    p.name,
                    m,
                    crate::thousands(p.cvs.len() as u64)
                ),
                (Some(m), true) => format!("{} {:.2}", p.name, m),
                (None, false) => format!("{}: no neuron with 3 spikes", p.name),
                (None, true) => format!("{} –", p.name),
            };
            let x = right - font::width(&s, note_em);
            let mid = y + line_h / 2;
            c.line(
                vec![(x - 28, mid), (x - 8, mid)],
                rgb(self.rec.populations[i].color).stroke_width(3),
            )?;
            c.label(&s, (x, mid), note_em, Pos::new(HPos::Left, VPos::Center))?;
            y += line_h;
        }
        Ok(())
    }
}
