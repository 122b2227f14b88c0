//! Text: the shipped font, its metrics, and a label element that draws the same
//! text as anti-aliased glyphs on a bitmap and as `<text>` in an SVG.
//!
//! Glyphs are placed with their side bearings and the font's kerning (plotters'
//! own `ab_glyph` text path drops the left side bearing, which spaces letters
//! unevenly), so PNG text is set as a typesetter would set it.

use std::sync::OnceLock;

use ab_glyph::{Font, FontRef, PxScale, ScaleFont};
use plotters::element::{Drawable, PointCollection};
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{FontTransform, IntoFont, RGBAColor, TextStyle};
use plotters_backend::{BackendColor, BackendCoord, DrawingBackend, DrawingErrorKind};

/// DejaVu Sans 2.37 (Bitstream Vera licence with the Arev addition: `fonts/LICENSE`).
static DEJAVU_SANS: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");

/// The family SVGs ask for: DejaVu Sans where the viewer has it, a similar
/// sans-serif face otherwise.
pub const FAMILY: &str = "DejaVu Sans, Verdana, Arial, sans-serif";

/// The parsed font.
pub fn font() -> &'static FontRef<'static> {
    static FONT: OnceLock<FontRef<'static>> = OnceLock::new();
    // The font is part of the binary; a failure to parse it is a build defect.
    FONT.get_or_init(|| {
        FontRef::try_from_slice(DEJAVU_SANS).expect("the shipped DejaVu Sans parses")
    })
}

/// Horizontal metrics of `s` at `em` pixels per em: `(width, ascent, descent)`,
/// descent negative.
pub fn measure(s: &str, em: f64) -> (f64, f64, f64) {
    let f = font().as_scaled(scale(em));
    let mut w = 0f32;
    let mut prev = None;
    for c in s.chars() {
        let g = f.glyph_id(c);
        if let Some(p) = prev {
            w += f.kern(p, g);
        }
        w += f.h_advance(g);
        prev = Some(g);
    }
    (w as f64, f.ascent() as f64, f.descent() as f64)
}

/// The width of `s` in pixels at `em`.
pub fn width(s: &str, em: f64) -> i32 {
    measure(s, em).0.ceil() as i32
}

/// Height of a capital letter at `em` (what "centred" text is centred on).
pub fn cap_height(em: f64) -> f64 {
    0.729 * em
}

/// ab_glyph's scale is the height from descender to ascender; an em is less.
fn scale(em: f64) -> PxScale {
    let f = font();
    let upem = f.units_per_em().unwrap_or(2048.0);
    let h = f.ascent_unscaled() - f.descent_unscaled();
    PxScale::from((em * h as f64 / upem as f64) as f32)
}

/// A line of text at an anchor: drawn as glyphs on bitmaps, as `<text>` in SVGs.
#[derive(Clone)]
pub struct Label {
    text: String,
    at: BackendCoord,
    em: f64,
    color: RGBAColor,
    pos: Pos,
    vertical: bool,
    glyphs: bool,
}

impl Label {
    /// `text` at `at` (backend pixels), `em` pixels per em, anchored by `pos`;
    /// `glyphs`: rasterise (bitmaps) rather than write text (SVG). A control
    /// character of `text` (a population named `"E\u{1}"`) is drawn as U+FFFD:
    /// XML 1.0 allows none, even as a reference, and an SVG holding one does
    /// not open.
    pub fn new(
        text: &str,
        at: BackendCoord,
        em: f64,
        color: RGBAColor,
        pos: Pos,
        glyphs: bool,
    ) -> Label {
        Label {
            text: text
                .chars()
                .map(|c| if c.is_control() { '\u{fffd}' } else { c })
                .collect(),
            at,
            em,
            color,
            pos,
            vertical: false,
            glyphs,
        }
    }

    /// Reads bottom to top (a y axis title), rotated about the anchor.
    pub fn vertical(mut self) -> Label {
        self.vertical = true;
        self
    }
}

impl<'a> PointCollection<'a, BackendCoord> for &'a Label {
    type Point = &'a BackendCoord;
    type IntoIter = std::iter::Once<&'a BackendCoord>;
    fn point_iter(self) -> Self::IntoIter {
        std::iter::once(&self.at)
    }
}

impl<DB: DrawingBackend> Drawable<DB> for Label {
    fn draw<I: Iterator<Item = BackendCoord>>(
        &self,
        mut pos: I,
        backend: &mut DB,
        _: (u32, u32),
    ) -> Result<(), DrawingErrorKind<DB::ErrorType>> {
        let Some(at) = pos.next() else { return Ok(()) };
        if self.color.3 == 0.0 || self.text.is_empty() {
            return Ok(());
        }
        if !self.glyphs {
            // plotters' SVG text writes font-size = size / 1.24 and anchors with dy.
            let style = TextStyle::from((FAMILY, self.em * 1.24).into_font())
                .pos(self.pos)
                .transform(if self.vertical {
                    FontTransform::Rotate270
                } else {
                    FontTransform::None
                });
            let style = TextStyle {
                color: BackendColor {
                    alpha: self.color.3,
                    rgb: (self.color.0, self.color.1, self.color.2),
                },
                ..style
            };
            return backend.draw_text(&self.text, &style, at);
        }
        let (w, _, _) = measure(&self.text, self.em);
        // Offsets of the text's origin (left end of the baseline) from the anchor,
        // in the text's own frame (x along the text, y down).
        let dx = match self.pos.h_pos {
            HPos::Left => 0.0,
            HPos::Center => -w / 2.0,
            HPos::Right => -w,
        };
        let cap = cap_height(self.em);
        let dy = match self.pos.v_pos {
            VPos::Top => cap,
            VPos::Center => cap / 2.0,
            VPos::Bottom => 0.0,
        };
        let f = font().as_scaled(scale(self.em));
        let mut caret = dx as f32;
        let mut prev = None;
        let rgb = (self.color.0, self.color.1, self.color.2);
        let mut result = Ok(());
        for c in self.text.chars() {
            let id = f.glyph_id(c);
            if let Some(p) = prev {
                caret += f.kern(p, id);
            }
            prev = Some(id);
            let g = id.with_scale_and_position(f.scale(), ab_glyph::point(caret, dy as f32));
            caret += f.h_advance(id);
            let Some(o) = font().outline_glyph(g) else {
                continue;
            };
            let b = o.px_bounds();
            o.draw(|x, y, cov| {
                if result.is_err() || cov <= 0.0 {
                    return;
                }
                // Pixel (x, y) of the glyph's box, in the text frame.
                let (tx, ty) = (b.min.x as i32 + x as i32, b.min.y as i32 + y as i32);
                let p = if self.vertical {
                    (at.0 + ty, at.1 - tx)
                } else {
                    (at.0 + tx, at.1 + ty)
                };
                let color = BackendColor {
                    alpha: self.color.3 * cov.min(1.0) as f64,
                    rgb,
                };
                result = backend.draw_pixel(p, color);
            });
            if result.is_err() {
                break;
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_font_measures_text() {
        let (w, a, d) = measure("neuron index", 20.0);
        // DejaVu Sans: about 0.6 em per lower-case letter, ascent 0.93 em, descent 0.24 em.
        assert!((100.0..160.0).contains(&w), "{w}");
        assert!((17.0..21.0).contains(&a), "{a}");
        assert!((-6.0..-3.0).contains(&d), "{d}");
        assert!(width("10,000", 20.0) > width("10", 20.0));
        // Kerning: "AV" is narrower than "A" + "V".
        assert!(measure("AV", 20.0).0 < measure("A", 20.0).0 + measure("V", 20.0).0);
    }
}
