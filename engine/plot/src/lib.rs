//! Summary tables → figures (SVG, PNG, PDF) and the run report page.
//!
//! [`draw`] turns the summary tables an `aggregate` node wrote into one figure: plotters draws it to SVG (text
//! as `sans-serif`), then usvg parses that SVG once with the embedded DejaVu Sans, and resvg renders the PNG (2×)
//! and svg2pdf the PDF from the same tree, so the PNG and PDF look the same on every machine. Every figure carries
//! a legend and, at its bottom, the provenance footer ([`Provenance::footer`]). [`report`] writes the run's
//! single-file HTML page.
//!
//! # The `plot` node's spec
//!
//! ```yaml
//! figure: fig16                       # file stem: fig16.svg, fig16.png, fig16.pdf
//! title: "Figure 16: Top-K latency vs clients"   # optional
//! table: summary                      # which table (default: summary)
//! style: lines                        # lines | bars | cdf
//! x: {column: clients, label: "Clients", scale: linear, range: [0, 30]}  # scale linear|log (default linear)
//! y: {column: median_us, label: "Latency (µs)", scale: log}              # label defaults to the column name
//! band: {lo: p25_us, hi: p75_us, label: "p25–p75"}  # lines only, optional; label adds a legend entry
//! series: {column: series, order: [fRAC, CPU, DPU], names: {fRAC: "fRAC"}}   # one colour per value
//! panels: {rows: m, columns: units, title: "{units} units · {m} B"}  # optional facets, rows/columns optional
//! #   panels: {columns: direction, order: [tx-only, rx-only, loopback]}     # panel order, one facet column
//! #   panels: {rows: m, columns: units, order: {m: [4096, 1024], units: [4, 2, 1]}}   # or one list per facet
//! where: {m: 4096}                    # optional filter: cell equals value (numbers compare numerically)
//! # bars only:
//! error: std_us                                           # error bar = ± this column
//! categories: {column: f, order: [1, 3, 5, 2], names: {"1": Top-K, "3": Logit, "5": Norm, "2": CNN}}
//! groups: {column: mix, order: [isolated, mixed], names: {mixed: "Mixed Workload"}}
//! outline: {column: computed, value: 1, label: "Without Reassembly (emu)"}  # dashed outline bars
//! # broken axes (instead of `range`):
//! #   y: {column: mean_us, break: {below: [0, 50], above: [1000, 10000]}}   # stacked sub-plots sharing x
//! #   x: {column: latency_us, break: {left: [0, 50], right: [8820, 8860]}}  # side-by-side sub-plots sharing y
//! ```
//!
//! - `series`, `categories`, `groups` share one shape (a *grouping*): `column`, optional `order`, optional
//!   `names` (display names). Their values come in this order: those in `order`; then those named in `names`, in
//!   the order written; then the other values in the rows, ascending when all are numbers, else as they first
//!   appear. A value listed in `order` with no rows still gets its legend entry (the artifact's DPU series).
//!   A map read through `serde_json::Value` loses its written order (its keys come sorted), so a pipeline whose
//!   category order matters should say `order:`.
//! - `panels`: one panel per (row value, column value); `{column}` in `title` is replaced by the panel's value.
//!   The values come in the order above, with `panels.order` as the grouping's `order` (there are no `names`):
//!   a list when the panels split by one column, else a map from `rows`' and `columns`' column to its list. A
//!   listed value with no rows still gets its panel, empty and marked "no data" (so a layout stays the same on a
//!   partial run). All panels share their axis ranges so that they compare.
//! - `lines`: per series, a line with markers through the rows sorted by x; with `band`, a shaded area between
//!   the two columns. `cdf`: per series a step line through (x, y) sorted by x; y defaults to 0–1.
//! - `bars`: x positions are the `categories` values (or `x.column`'s when there is no `categories`), inside
//!   each `groups` value; one bar per series in each position. Rows matching `outline` are drawn as dashed
//!   outlines at their series' position, over the filled bar (for values computed rather than measured).
//! - Cells that are null are skipped; a cell that is neither a number nor null in a numeric column is an error.
//!   Values a log axis cannot show (≤ 0) are left out.

pub mod report;

mod axis;
mod chart;
mod clip;
mod model;
mod render;
mod spec;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fracflow_record::{Provenance, Table};

pub use spec::{
    AxisBreak, AxisSpec, BandSpec, Grouping, Names, OutlineSpec, PanelOrder, PanelSpec, PlotSpec,
    Scale, Style,
};

/// Why a figure could not be drawn; every variant names the figure and what it expected.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("figure {figure}: no table `{table}` among the inputs (tables given: {available})")]
    MissingTable {
        figure: String,
        table: String,
        available: String,
    },
    #[error(
        "figure {figure}: table `{table}` has no column `{column}`, expected for {role} (columns: {available})"
    )]
    MissingColumn {
        figure: String,
        table: String,
        column: String,
        role: &'static str,
        available: String,
    },
    #[error(
        "figure {figure}: column `{column}` of table `{table}` ({role}) must hold numbers, but row {row} has {value:?}"
    )]
    NotNumeric {
        figure: String,
        table: String,
        column: String,
        role: &'static str,
        row: usize,
        value: String,
    },
    #[error("figure {figure}: table `{table}` has two rows for the same bar ({bar})")]
    DuplicateBar {
        figure: String,
        table: String,
        bar: String,
    },
    #[error("figure {figure}: invalid spec: {message}")]
    Spec { figure: String, message: String },
    #[error("figure {figure}: {stage} failed: {message}")]
    Render {
        figure: String,
        stage: &'static str,
        message: String,
    },
    #[error("figure {figure}: writing {}: {source}", path.display())]
    Write {
        figure: String,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The extensions [`draw`] writes, in the order of its returned paths.
const EXTENSIONS: [&str; 3] = ["svg", "png", "pdf"];

/// The file names [`draw`] writes for `spec`, for declaring the node's outputs.
pub fn figure_files(spec: &PlotSpec) -> Vec<String> {
    EXTENSIONS
        .iter()
        .map(|extension| format!("{}.{extension}", spec.figure))
        .collect()
}

/// Draws the figure from `tables` (by name: "summary", "cdf", …) and writes `<figure>.svg`, `<figure>.png` and
/// `<figure>.pdf` into `out_dir`, each published atomically. Returns the paths written.
pub fn draw(
    spec: &PlotSpec,
    tables: &BTreeMap<String, Table>,
    provenance: &Provenance,
    out_dir: &Path,
) -> Result<Vec<PathBuf>, PlotError> {
    let svg = render_svg(spec, tables, provenance)?;
    let rendered = render::rasterise(&svg).map_err(|(stage, message)| PlotError::Render {
        figure: spec.figure.clone(),
        stage,
        message,
    })?;
    let contents: [&[u8]; 3] = [svg.as_bytes(), &rendered.png, &rendered.pdf];
    let mut written = Vec::new();
    for (name, bytes) in figure_files(spec).into_iter().zip(contents) {
        let path = out_dir.join(name);
        fracflow_record::atomic_write(&path, bytes).map_err(|source| PlotError::Write {
            figure: spec.figure.clone(),
            path: path.clone(),
            source,
        })?;
        written.push(path);
    }
    Ok(written)
}

/// The figure as SVG text, before conversion; what the snapshot tests compare.
pub fn render_svg(
    spec: &PlotSpec,
    tables: &BTreeMap<String, Table>,
    provenance: &Provenance,
) -> Result<String, PlotError> {
    let figure = model::build(spec, tables)?;
    chart::to_svg(&figure, &provenance.footer()).map_err(|message| PlotError::Render {
        figure: spec.figure.clone(),
        stage: "drawing",
        message,
    })
}
