//! The firing rates: a bar per population, ± the standard deviation across
//! neurons.

use super::*;

impl Prepared<'_> {
    pub(super) fn firing_rates<DB: DrawingBackend>(
        &self,
        c: &Canvas<DB>,
        area: Rect,
        k: f64,
        caption: &str,
    ) -> DResult<DB> {
        let pops = &self.analysis.populations;
        let n = pops.len() as f64;
        let tick_em = EM_TICK * k;
        c.label(
            caption,
            ((area.l + area.r) / 2, area.t),
            EM_CAPTION * k,
            Pos::new(HPos::Center, VPos::Top),
        )?;
        let hi = pops
            .iter()
            .map(|p| p.rate_hz + p.rate_sd_hz)
            .fold(0.0, f64::max);
        let name_w = pops
            .iter()
            .map(|p| font::width(&p.name, tick_em))
            .max()
            .unwrap_or(0);
        let value_w = pops
            .iter()
            .map(|p| font::width(&format!("{:.1}", p.rate_hz), EM_NOTE * k))
            .max()
            .unwrap_or(0);
        let l = area.l + name_w + (EM_TICK * 0.4 * k) as i32 + 10;
        let r = area.r - value_w - 10;
        let max_n = ((r - l) as f64 / (80.0 * k)).clamp(2.0, 8.0) as usize;
        let (xmax, xt) = axis_to(hi * 1.02, max_n);
        let f = Frame {
            px: Rect {
                l,
                t: area.t + (EM_CAPTION * k * 2.0) as i32,
                r,
                b: area.b - x_gutter(k),
            },
            x: (0.0, xmax),
            y: (0.0, n),
        };
        // Vertical grid lines at the x ticks.
        for &v in &xt[1..] {
            let x = f.x(v);
            c.line(vec![(x, f.px.t), (x, f.px.b - 1)], RULE.stroke_width(1))?;
        }
        // Bars 60 % of a row, at most 56 px thick.
        let row_px = f.px.h() as f64 / n;
        let bar = 0.3f64.min(28.0 * k / row_px);
        let cap = bar * 0.4;
        let mut names = Vec::new();
        for (i, p) in pops.iter().enumerate() {
            let y = n - i as f64 - 0.5;
            let col = rgb(self.rec.populations[i].color);
            if p.rate_hz > 0.0 {
                c.rect(f.pt(0.0, y + bar), f.pt(p.rate_hz, y - bar), col.filled())?;
            }
            let (lo, hi) = (
                (p.rate_hz - p.rate_sd_hz).max(0.0),
                p.rate_hz + p.rate_sd_hz,
            );
            let w = ShapeStyle::from(INK).stroke_width(2);
            c.line(vec![f.pt(lo, y), f.pt(hi, y)], w)?;
            c.line(vec![f.pt(lo, y - cap), f.pt(lo, y + cap)], w)?;
            c.line(vec![f.pt(hi, y - cap), f.pt(hi, y + cap)], w)?;
            let (x, yc) = f.pt(hi, y);
            c.note(
                &format!("{:.1}", p.rate_hz),
                (x + 8, yc),
                EM_NOTE * k,
                Pos::new(HPos::Left, VPos::Center),
            )?;
            names.push((y, p.name.clone()));
        }
        c.axes(&f)?;
        let below = c.x_ticks(&f, &xt, tick_em, true)?;
        c.y_ticks(&f, &names, tick_em)?;
        c.x_title("firing rate (spikes/s)", &f, below, k)
    }
}
