//! Output: a figure as PNG (with its resolution tag) or SVG, and both written to
//! files.

use super::*;

impl Prepared<'_> {
    /// The PNG of `plot`.
    pub(crate) fn png(&self, plot: Plot) -> Result<Vec<u8>> {
        let (w, h) = plot.size();
        let mut buf = vec![0u8; w as usize * h as usize * 3];
        {
            let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
            self.draw(plot, &root, true)
                .map_err(|e| draw_err(plot, e))?;
            root.present().map_err(|e| draw_err(plot, e))?;
        }
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Best);
        enc.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
        enc.set_pixel_dims(Some(png::PixelDimensions {
            xppu: PIXELS_PER_METRE,
            yppu: PIXELS_PER_METRE,
            unit: png::Unit::Meter,
        }));
        let encode = |e: png::EncodingError| Error::Draw {
            figure: plot.file_stem().into(),
            message: format!("encoding the PNG: {e}"),
        };
        let mut wr = enc.write_header().map_err(encode)?;
        wr.write_image_data(&buf).map_err(encode)?;
        wr.finish().map_err(encode)?;
        Ok(out)
    }

    /// The SVG of `plot`.
    pub(crate) fn svg(&self, plot: Plot) -> Result<String> {
        let mut s = String::new();
        {
            let root = SVGBackend::with_string(&mut s, plot.size()).into_drawing_area();
            self.draw(plot, &root, false)
                .map_err(|e| draw_err(plot, e))?;
            root.present().map_err(|e| draw_err(plot, e))?;
        }
        Ok(s)
    }

    /// Writes the PNG and SVG of `plot` into `dir`.
    pub(crate) fn write(&self, plot: Plot, dir: &Path) -> Result<(PathBuf, PathBuf)> {
        let png = dir.join(format!("{}.png", plot.file_stem()));
        let svg = dir.join(format!("{}.svg", plot.file_stem()));
        crate::write_atomic(&png, &self.png(plot)?)?;
        crate::write_atomic(&svg, self.svg(plot)?.as_bytes())?;
        Ok((png, svg))
    }
}
