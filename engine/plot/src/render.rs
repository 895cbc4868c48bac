//! SVG → PNG and PDF through one usvg tree, with the embedded font, so that the result is the same on every
//! machine whatever fonts it has installed.

use std::sync::{Arc, OnceLock};

use resvg::tiny_skia;
use resvg::usvg::{self, fontdb};

/// DejaVu Sans (Bitstream Vera licence, see fonts/DejaVuSans-LICENSE.txt): wide coverage, including µ and ±.
const DEJAVU_SANS: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");
const FONT_FAMILY: &str = "DejaVu Sans";
/// The PNG is rendered at twice the SVG's size, for sharp text on high-density screens and in slides.
pub(crate) const PNG_SCALE: f32 = 2.0;

pub(crate) struct Rendered {
    pub png: Vec<u8>,
    pub pdf: Vec<u8>,
}

/// Only the embedded font, so that no installed font can change the rendering.
fn fonts() -> Arc<fontdb::Database> {
    static FONTS: OnceLock<Arc<fontdb::Database>> = OnceLock::new();
    FONTS
        .get_or_init(|| {
            let mut database = fontdb::Database::new();
            database.load_font_data(DEJAVU_SANS.to_vec());
            database.set_sans_serif_family(FONT_FAMILY);
            Arc::new(database)
        })
        .clone()
}

/// The PNG (at [`PNG_SCALE`]) and the PDF of `svg`; on failure, the stage and its message.
pub(crate) fn rasterise(svg: &str) -> Result<Rendered, (&'static str, String)> {
    let options = usvg::Options {
        font_family: FONT_FAMILY.to_owned(),
        fontdb: fonts(),
        ..usvg::Options::default()
    };
    let tree =
        usvg::Tree::from_str(svg, &options).map_err(|e| ("parsing the SVG", e.to_string()))?;
    let size = tree
        .size()
        .to_int_size()
        .scale_by(PNG_SCALE)
        .ok_or(("rendering the PNG", "empty image".to_owned()))?;
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height()).ok_or((
        "rendering the PNG",
        format!("cannot allocate {}×{} pixels", size.width(), size.height()),
    ))?;
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(PNG_SCALE, PNG_SCALE),
        &mut pixmap.as_mut(),
    );
    let png = pixmap
        .encode_png()
        .map_err(|e| ("encoding the PNG", e.to_string()))?;
    let pdf = svg2pdf::to_pdf(
        &tree,
        svg2pdf::ConversionOptions::default(),
        svg2pdf::PageOptions::default(),
    )
    .map_err(|e| ("writing the PDF", e.to_string()))?;
    Ok(Rendered { png, pdf })
}
