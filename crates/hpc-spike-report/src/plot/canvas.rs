//! Pixel geometry and the drawing helpers every figure uses: rectangles, a data
//! frame mapping values to pixels, and a canvas that draws labels, lines, axes
//! and ticks.

use super::*;

pub(super) type DResult<DB> =
    std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// A pixel rectangle: `(left, top, right, bottom)`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rect {
    pub(super) l: i32,
    pub(super) t: i32,
    pub(super) r: i32,
    pub(super) b: i32,
}

impl Rect {
    pub(super) fn w(&self) -> i32 {
        self.r - self.l
    }
    pub(super) fn h(&self) -> i32 {
        self.b - self.t
    }
    pub(super) fn inset(&self, t: i32, r: i32, b: i32, l: i32) -> Rect {
        Rect {
            l: self.l + l,
            t: self.t + t,
            r: self.r - r,
            b: self.b - b,
        }
    }
}

/// A plot frame: the pixel box of the data and the data ranges it shows (y up).
#[derive(Clone, Copy, Debug)]
pub(super) struct Frame {
    pub(super) px: Rect,
    pub(super) x: (f64, f64),
    pub(super) y: (f64, f64),
}

impl Frame {
    pub(super) fn x(&self, v: f64) -> i32 {
        let f = (v - self.x.0) / (self.x.1 - self.x.0);
        self.px.l + (f * self.px.w() as f64).round() as i32
    }
    pub(super) fn y(&self, v: f64) -> i32 {
        let f = (v - self.y.0) / (self.y.1 - self.y.0);
        self.px.b - (f * self.px.h() as f64).round() as i32
    }
    pub(super) fn pt(&self, x: f64, y: f64) -> (i32, i32) {
        (self.x(x), self.y(y))
    }
}

/// Where and how a figure is drawn.
pub(super) struct Canvas<'r, DB: DrawingBackend> {
    pub(super) root: &'r DrawingArea<DB, Shift>,
    /// Rasterise text (bitmaps) rather than write it (SVG).
    pub(super) glyphs: bool,
    /// Text colour (transparent when text is off).
    pub(super) ink: RGBAColor,
    pub(super) muted: RGBAColor,
}

impl<DB: DrawingBackend> Canvas<'_, DB> {
    pub(super) fn label(&self, s: &str, at: (i32, i32), em: f64, pos: Pos) -> DResult<DB> {
        self.root
            .draw(&Label::new(s, at, em, self.ink, pos, self.glyphs))
    }
    pub(super) fn note(&self, s: &str, at: (i32, i32), em: f64, pos: Pos) -> DResult<DB> {
        self.root
            .draw(&Label::new(s, at, em, self.muted, pos, self.glyphs))
    }
    pub(super) fn vlabel(&self, s: &str, at: (i32, i32), em: f64) -> DResult<DB> {
        let pos = Pos::new(HPos::Center, VPos::Center);
        self.root
            .draw(&Label::new(s, at, em, self.ink, pos, self.glyphs).vertical())
    }
    pub(super) fn line(&self, pts: Vec<(i32, i32)>, style: ShapeStyle) -> DResult<DB> {
        self.root.draw(&PathElement::new(pts, style))
    }
    pub(super) fn rect(&self, a: (i32, i32), b: (i32, i32), style: ShapeStyle) -> DResult<DB> {
        self.root.draw(&Rectangle::new([a, b], style))
    }

    /// The left and bottom axis lines of `f`.
    pub(super) fn axes(&self, f: &Frame) -> DResult<DB> {
        let p = f.px;
        self.line(
            vec![(p.l, p.t), (p.l, p.b), (p.r, p.b)],
            INK.stroke_width(1),
        )
    }

    /// Ticks and labels under the x axis; returns the y below the labels.
    pub(super) fn x_ticks(
        &self,
        f: &Frame,
        ticks: &[f64],
        em: f64,
        labels: bool,
    ) -> Result<i32, DrawingAreaErrorKind<DB::ErrorType>> {
        let tl = (em * 0.4) as i32;
        for &v in ticks {
            let x = f.x(v);
            self.line(vec![(x, f.px.b), (x, f.px.b + tl)], INK.stroke_width(1))?;
            if labels {
                self.label(
                    &thousands_f(v),
                    (x, f.px.b + tl + 5),
                    em,
                    Pos::new(HPos::Center, VPos::Top),
                )?;
            }
        }
        Ok(f.px.b
            + tl
            + 5
            + if labels {
                font::cap_height(em).ceil() as i32
            } else {
                0
            })
    }

    /// The x axis's title `s`, centred under frame `f` a little below `below`
    /// (the y under its tick labels), at scale `k`.
    pub(super) fn x_title(&self, s: &str, f: &Frame, below: i32, k: f64) -> DResult<DB> {
        self.label(
            s,
            ((f.px.l + f.px.r) / 2, below + (12.0 * k) as i32),
            EM_AXIS * k,
            Pos::new(HPos::Center, VPos::Top),
        )
    }

    /// Ticks and labels left of the y axis, at `(value, label)`.
    pub(super) fn y_ticks(&self, f: &Frame, ticks: &[(f64, String)], em: f64) -> DResult<DB> {
        let tl = (em * 0.4) as i32;
        for (v, s) in ticks {
            let y = f.y(*v);
            self.line(vec![(f.px.l - tl, y), (f.px.l, y)], INK.stroke_width(1))?;
            self.label(
                s,
                (f.px.l - tl - 5, y),
                em,
                Pos::new(HPos::Right, VPos::Center),
            )?;
        }
        Ok(())
    }

    /// Horizontal grid lines at `ys`.
    pub(super) fn grid_y(&self, f: &Frame, ys: &[f64]) -> DResult<DB> {
        for &v in ys {
            let y = f.y(v);
            if y < f.px.b {
                self.line(vec![(f.px.l + 1, y), (f.px.r, y)], RULE.stroke_width(1))?;
            }
        }
        Ok(())
    }
}

/// The space left of a y axis for tick labels of width `label_w` and a title.
pub(super) fn y_gutter(label_w: i32, k: f64) -> i32 {
    label_w + (EM_TICK * 0.4 * k) as i32 + 5 + (14.0 * k) as i32 + (EM_AXIS * 1.1 * k) as i32 + 6
}

/// The space under an x axis for tick labels and a title.
pub(super) fn x_gutter(k: f64) -> i32 {
    (EM_TICK * 0.4 * k) as i32
        + 5
        + (EM_TICK * k * 0.8) as i32
        + (14.0 * k) as i32
        + (EM_AXIS * k * 1.15) as i32
        + 4
}
