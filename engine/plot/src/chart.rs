//! Laying out and drawing a [`Figure`] with plotters into SVG text: title, legend, a grid of panels (each split
//! into sub-plots along a broken axis), axis descriptions, and the provenance footer.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::axis::{AxisRange, tick_label};
use crate::clip::Bounds;
use crate::model::{CategoryAxis, Figure, LegendEntry, Mark, Panel, Swatch};

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<TickedAxis, TickedAxis>>;

/// A linear axis over drawing coordinates with the tick positions [`AxisRange::ticks`] chose. plotters' own
/// `with_key_points` wrapper does the same but loses the f64 label formatter, so the mesh could not be drawn.
struct TickedAxis {
    range: (f64, f64),
    bold: Vec<f64>,
    light: Vec<f64>,
}

impl Ranged for TickedAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, (start, end): (i32, i32)) -> i32 {
        let fraction = (value - self.range.0) / (self.range.1 - self.range.0);
        if !fraction.is_finite() {
            return (start + end) / 2;
        }
        start + (f64::from(end - start) * fraction + 1e-3).floor() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.light.clone()
        } else {
            self.bold.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.range.0..self.range.1
    }
}

/// Colour-blind-friendly series colours (matplotlib's tab10 without its grey and olive).
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];
const INK: RGBColor = RGBColor(30, 30, 30);
const MUTED: RGBColor = RGBColor(95, 95, 95);
const GRID: RGBColor = RGBColor(225, 225, 225);
const LIGHT_GRID: RGBColor = RGBColor(242, 242, 242);

const MARGIN: i32 = 16;
const TITLE_HEIGHT: i32 = 30;
const LEGEND_ROW_HEIGHT: i32 = 22;
const FOOTER_HEIGHT: i32 = 26;
const PANEL_TITLE_HEIGHT: i32 = 20;
const AXIS_DESC_SIZE: i32 = 20;
const Y_TICK_AREA: i32 = 46;
const X_TICK_AREA: i32 = 22;
const GROUP_LABEL_AREA: i32 = 20;
const SUBPLOT_GAP: i32 = 10;

fn series_color(series: usize) -> RGBColor {
    PALETTE[series % PALETTE.len()]
}

/// A text style of `px` pixels: plotters writes `font-size` as its size divided by 1.24.
fn text(px: f64, color: RGBColor, h: HPos, v: VPos) -> TextStyle<'static> {
    ("sans-serif", px * 1.24)
        .into_font()
        .color(&color)
        .pos(Pos::new(h, v))
}

/// A rough width of `label` at `px` pixels (DejaVu Sans averages about 0.6 em), for legend and footer layout.
fn text_width(label: &str, px: f64) -> i32 {
    (label.chars().count() as f64 * px * 0.6).ceil() as i32
}

/// A pixel rectangle.
#[derive(Debug, Clone, Copy)]
struct Rect {
    x: i32,
    y: i32,
    w: i32,
    h: i32,
}

impl Rect {
    fn area<'a>(&self, root: &Area<'a>) -> Area<'a> {
        root.clone()
            .shrink((self.x, self.y), (self.w.max(1), self.h.max(1)))
    }
}

const LEGEND_TEXT: f64 = 12.0;

fn legend_entry_width(entry: &LegendEntry) -> i32 {
    30 + text_width(&entry.label, LEGEND_TEXT) + 18
}

/// Legend entries split into rows that fit `width`.
fn legend_rows(legend: &[LegendEntry], width: i32) -> Vec<Vec<&LegendEntry>> {
    let mut rows: Vec<Vec<&LegendEntry>> = Vec::new();
    let mut used = 0;
    for entry in legend {
        let entry_width = legend_entry_width(entry);
        match rows.last_mut() {
            Some(row) if used + entry_width <= width => row.push(entry),
            _ => {
                rows.push(vec![entry]);
                used = 0;
            }
        }
        used += entry_width;
    }
    rows
}

pub(crate) fn to_svg(figure: &Figure, footer: &str) -> Result<String, String> {
    let single = figure.grid_rows * figure.grid_columns == 1;
    let (panel_width, mut panel_height) = if single { (640, 400) } else { (360, 290) };
    if figure.y_segments.len() > 1 {
        panel_height += 60;
    }
    let columns = figure.grid_columns as i32;
    let rows = figure.grid_rows as i32;
    let width = (2 * MARGIN + columns * panel_width)
        .max(2 * MARGIN + text_width(footer, 10.5))
        .max(
            2 * MARGIN
                + figure
                    .legend
                    .iter()
                    .map(legend_entry_width)
                    .max()
                    .unwrap_or(0),
        );
    let legend = legend_rows(&figure.legend, width - 2 * MARGIN);
    let title_height = if figure.title.is_some() {
        TITLE_HEIGHT
    } else {
        0
    };
    let legend_height =
        legend.len() as i32 * LEGEND_ROW_HEIGHT + if legend.is_empty() { 0 } else { 6 };
    let panels_top = MARGIN / 2 + title_height + legend_height;
    let height = panels_top + rows * panel_height + FOOTER_HEIGHT;
    let panel_left = (width - columns * panel_width) / 2;

    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (width as u32, height as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        if let Some(title) = &figure.title {
            root.draw_text(
                title,
                &text(16.0, INK, HPos::Center, VPos::Center),
                (width / 2, MARGIN / 2 + TITLE_HEIGHT / 2),
            )
            .map_err(|e| e.to_string())?;
        }
        draw_legend(&root, &legend, width, MARGIN / 2 + title_height).map_err(|e| e.to_string())?;
        for (index, panel) in figure.panels.iter().enumerate() {
            let (row, column) = (
                (index / figure.grid_columns) as i32,
                (index % figure.grid_columns) as i32,
            );
            let rect = Rect {
                x: panel_left + column * panel_width,
                y: panels_top + row * panel_height,
                w: panel_width,
                h: panel_height,
            };
            draw_panel(&root, rect, figure, panel)?;
        }
        root.draw_text(
            footer,
            &text(10.5, MUTED, HPos::Left, VPos::Center),
            (MARGIN, height - FOOTER_HEIGHT / 2),
        )
        .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

fn draw_legend(
    root: &Area,
    rows: &[Vec<&LegendEntry>],
    width: i32,
    top: i32,
) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    for (row_index, row) in rows.iter().enumerate() {
        let row_width: i32 = row.iter().map(|entry| legend_entry_width(entry)).sum();
        let mut x = (width - row_width) / 2;
        let y = top + row_index as i32 * LEGEND_ROW_HEIGHT + LEGEND_ROW_HEIGHT / 2 + 3;
        for entry in row {
            match entry.swatch {
                Swatch::Line { series, markers } => {
                    let color = series_color(series);
                    root.draw(&PathElement::new(
                        vec![(x, y), (x + 24, y)],
                        color.stroke_width(2),
                    ))?;
                    if markers {
                        root.draw(&Circle::new((x + 12, y), 3, color.filled()))?;
                    }
                }
                Swatch::Bar { series } => {
                    root.draw(&Rectangle::new(
                        [(x + 4, y - 6), (x + 20, y + 6)],
                        series_color(series).filled(),
                    ))?;
                }
                Swatch::DashedOutline => {
                    let corners = [
                        (x + 4, y - 6),
                        (x + 20, y - 6),
                        (x + 20, y + 6),
                        (x + 4, y + 6),
                        (x + 4, y - 6),
                    ];
                    root.draw(&DashedPathElement::new(
                        corners,
                        3,
                        2,
                        MUTED.stroke_width(1),
                    ))?;
                }
                Swatch::Band => {
                    root.draw(&Rectangle::new(
                        [(x + 2, y - 6), (x + 22, y + 6)],
                        MUTED.mix(0.25).filled(),
                    ))?;
                }
            }
            root.draw_text(
                &entry.label,
                &text(LEGEND_TEXT, INK, HPos::Left, VPos::Center),
                (x + 30, y),
            )?;
            x += legend_entry_width(entry);
        }
    }
    Ok(())
}

/// Splits `total` pixels into parts of the given shares with `gap` between them; returns (offset, size) pairs.
fn split(total: i32, shares: &[f64], gap: i32) -> Vec<(i32, i32)> {
    let usable = (total - gap * (shares.len() as i32 - 1)).max(1) as f64;
    let mut offset = 0;
    shares
        .iter()
        .map(|share| {
            let size = (usable * share).round() as i32;
            let part = (offset, size);
            offset += size + gap;
            part
        })
        .collect()
}

fn draw_panel(root: &Area, rect: Rect, figure: &Figure, panel: &Panel) -> Result<(), String> {
    let mut inner = Rect {
        x: rect.x + 4,
        y: rect.y,
        w: rect.w - 8,
        h: rect.h - 4,
    };
    if let Some(title) = &panel.title {
        root.draw_text(
            title,
            &text(12.5, INK, HPos::Center, VPos::Center),
            (inner.x + inner.w / 2, inner.y + PANEL_TITLE_HEIGHT / 2),
        )
        .map_err(|e| e.to_string())?;
        inner.y += PANEL_TITLE_HEIGHT;
        inner.h -= PANEL_TITLE_HEIGHT;
    }
    let plots = Rect {
        x: inner.x + AXIS_DESC_SIZE,
        y: inner.y,
        w: inner.w - AXIS_DESC_SIZE,
        h: inner.h
            - if figure.x_label.is_empty() {
                0
            } else {
                AXIS_DESC_SIZE
            },
    };
    let desc = text(12.5, INK, HPos::Center, VPos::Center);
    root.draw_text(
        &figure.y_label,
        &desc.transform(FontTransform::Rotate270),
        (inner.x + AXIS_DESC_SIZE / 2, plots.y + plots.h / 2),
    )
    .map_err(|e| e.to_string())?;
    if !figure.x_label.is_empty() {
        root.draw_text(
            &figure.x_label,
            &desc,
            (
                plots.x + Y_TICK_AREA + (plots.w - Y_TICK_AREA) / 2,
                plots.y + plots.h + AXIS_DESC_SIZE / 2,
            ),
        )
        .map_err(|e| e.to_string())?;
    }
    // Broken axes: the range with most of the data gets the larger share.
    let column_shares: &[f64] = if figure.x_segments.len() > 1 {
        &[0.65, 0.35]
    } else {
        &[1.0]
    };
    let row_shares: &[f64] = if figure.y_segments.len() > 1 {
        &[0.4, 0.6]
    } else {
        &[1.0]
    };
    // Side by side, the gap must also keep the tick labels at the two inner edges apart.
    let columns = split(plots.w, column_shares, 3 * SUBPLOT_GAP);
    let rows = split(plots.h, row_shares, SUBPLOT_GAP);
    for (row, (y_offset, height)) in rows.iter().enumerate() {
        for (column, (x_offset, width)) in columns.iter().enumerate() {
            let sub = SubPlot {
                rect: Rect {
                    x: plots.x + x_offset,
                    y: plots.y + y_offset,
                    w: *width,
                    h: *height,
                },
                x_range: figure.x_segments[column],
                y_range: figure.y_segments[row],
                x_ticks: row + 1 == rows.len(),
                y_ticks: column == 0,
                break_above: row > 0,
                break_below: row + 1 < rows.len(),
                break_left: column > 0,
                break_right: column + 1 < columns.len(),
                note_empty: row == 0 && column == 0 && panel.marks.is_empty(),
            };
            sub.draw(root, figure.categories.as_ref(), &panel.marks)
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// One chart of a panel: the whole panel, or one side of a broken axis.
struct SubPlot {
    rect: Rect,
    x_range: AxisRange,
    y_range: AxisRange,
    /// Only the outer sub-plots carry tick labels; the inner ones share them.
    x_ticks: bool,
    y_ticks: bool,
    /// Edges where the axis continues in a neighbouring sub-plot, which get break marks.
    break_above: bool,
    break_below: bool,
    break_left: bool,
    break_right: bool,
    note_empty: bool,
}

impl SubPlot {
    fn draw(
        &self,
        root: &Area,
        categories: Option<&CategoryAxis>,
        marks: &[Mark],
    ) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
        let area = self.rect.area(root);
        let (x_lo, x_hi) = self.x_range.coords();
        let (y_lo, y_hi) = self.y_range.coords();
        let (x_bold, x_light) = match categories {
            Some(categories) => (
                categories
                    .ticks
                    .iter()
                    .map(|(position, _)| *position)
                    .collect(),
                Vec::new(),
            ),
            None => self.x_range.ticks(),
        };
        let (y_bold, y_light) = self.y_range.ticks();
        let x_tick_area = match (self.x_ticks, categories) {
            (false, _) => 0,
            (true, Some(categories)) if !categories.groups.is_empty() => {
                X_TICK_AREA + GROUP_LABEL_AREA
            }
            (true, _) => X_TICK_AREA,
        };
        let mut chart: Chart = ChartBuilder::on(&area)
            .margin_top(8)
            .margin_right(12)
            .x_label_area_size(x_tick_area)
            .y_label_area_size(if self.y_ticks { Y_TICK_AREA } else { 0 })
            .build_cartesian_2d(
                TickedAxis {
                    range: (x_lo, x_hi),
                    bold: x_bold,
                    light: x_light,
                },
                TickedAxis {
                    range: (y_lo, y_hi),
                    bold: y_bold,
                    light: y_light,
                },
            )?;
        let x_scale = self.x_range.scale;
        let y_scale = self.y_range.scale;
        let x_label = |coord: &f64| match categories {
            Some(categories) => categories
                .ticks
                .iter()
                .find(|(position, _)| (position - coord).abs() < 1e-6)
                .map(|(_, label)| label.clone())
                .unwrap_or_default(),
            None => tick_label(x_scale, *coord),
        };
        let y_label = |coord: &f64| tick_label(y_scale, *coord);
        let mut mesh = chart.configure_mesh();
        mesh.x_label_formatter(&x_label)
            .y_label_formatter(&y_label)
            .label_style(text(11.0, INK, HPos::Center, VPos::Center))
            .bold_line_style(GRID.stroke_width(1))
            .light_line_style(LIGHT_GRID.stroke_width(1))
            .axis_style(INK.stroke_width(1));
        if categories.is_some() {
            mesh.disable_x_mesh();
        }
        mesh.draw()?;

        let bounds = Bounds {
            x: (x_lo, x_hi),
            y: (y_lo, y_hi),
        };
        let plot = chart.plotting_area();
        if let Some(categories) = categories {
            for separator in &categories.separators {
                plot.draw(&DashedPathElement::new(
                    [(*separator, y_lo), (*separator, y_hi)],
                    4,
                    3,
                    MUTED.stroke_width(1),
                ))?;
            }
        }
        for mark in marks {
            draw_mark(plot, &bounds, mark)?;
        }
        let (pixels_x, pixels_y) = plot.get_pixel_range();
        // plotters draws the y axis one pixel left of the plotting area; the frame's left edge is drawn over it.
        let (left, right, top, bottom) = (
            pixels_x.start - 1,
            pixels_x.end,
            pixels_y.start,
            pixels_y.end,
        );
        root.draw(&Rectangle::new(
            [(left, top), (right, bottom)],
            INK.stroke_width(1),
        ))?;
        self.draw_break_marks(root, (left, right, top, bottom))?;
        if let (Some(categories), true) = (categories, self.x_ticks) {
            for (position, label) in &categories.groups {
                let (x, _) = chart.backend_coord(&(*position, y_lo));
                root.draw_text(
                    label,
                    &text(12.0, INK, HPos::Center, VPos::Center),
                    (x, bottom + X_TICK_AREA + GROUP_LABEL_AREA / 2),
                )?;
            }
        }
        if self.note_empty {
            root.draw_text(
                "no data",
                &text(12.0, MUTED, HPos::Center, VPos::Center),
                ((left + right) / 2, (top + bottom) / 2),
            )?;
        }
        Ok(())
    }

    /// Short slanted strokes where the axis is cut, on both sides of the frame.
    fn draw_break_marks(
        &self,
        root: &Area,
        (left, right, top, bottom): (i32, i32, i32, i32),
    ) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
        let mut points = Vec::new();
        if self.break_above {
            points.extend([(left, top), (right, top)]);
        }
        if self.break_below {
            points.extend([(left, bottom), (right, bottom)]);
        }
        if self.break_left {
            points.extend([(left, top), (left, bottom)]);
        }
        if self.break_right {
            points.extend([(right, top), (right, bottom)]);
        }
        for (x, y) in points {
            root.draw(&PathElement::new(
                vec![(x - 5, y + 3), (x + 5, y - 3)],
                INK.stroke_width(1),
            ))?;
        }
        Ok(())
    }
}

fn draw_mark(
    plot: &DrawingArea<SVGBackend, Cartesian2d<TickedAxis, TickedAxis>>,
    bounds: &Bounds,
    mark: &Mark,
) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    match mark {
        Mark::Band { series, outline } => {
            let clipped = bounds.clip_polygon(outline);
            if clipped.len() >= 3 {
                plot.draw(&Polygon::new(
                    clipped,
                    series_color(*series).mix(0.18).filled(),
                ))?;
            }
        }
        Mark::Line {
            series,
            points,
            markers,
        } => {
            let color = series_color(*series);
            for run in bounds.clip_polyline(points) {
                plot.draw(&PathElement::new(run, color.stroke_width(2)))?;
            }
            if *markers {
                for point in points.iter().filter(|point| bounds.contains(**point)) {
                    plot.draw(&Circle::new(*point, 3, color.filled()))?;
                }
            }
        }
        Mark::Bar {
            series,
            x,
            y,
            dashed,
        } => {
            let (low, high) = (y.0.min(y.1), y.0.max(y.1));
            let (bottom, top) = (low.max(bounds.y.0), high.min(bounds.y.1));
            let (left, right) = (x.0.max(bounds.x.0), x.1.min(bounds.x.1));
            if bottom >= top || left >= right {
                return Ok(());
            }
            let color = series_color(*series);
            if *dashed {
                // Only edges that are really the bar's are drawn; where a break cuts the bar it stays open.
                let mut edges = vec![
                    [(left, bottom), (left, top)],
                    [(right, bottom), (right, top)],
                ];
                if high <= bounds.y.1 {
                    edges.push([(left, top), (right, top)]);
                }
                if low >= bounds.y.0 {
                    edges.push([(left, bottom), (right, bottom)]);
                }
                for edge in edges {
                    plot.draw(&DashedPathElement::new(edge, 5, 3, color.stroke_width(2)))?;
                }
            } else {
                plot.draw(&Rectangle::new(
                    [(left, bottom), (right, top)],
                    color.filled(),
                ))?;
            }
        }
        Mark::ErrorBar { x, cap, y } => {
            for run in bounds.clip_polyline(&[(*x, y.0), (*x, y.1)]) {
                plot.draw(&PathElement::new(run, INK.stroke_width(1)))?;
            }
            for end in [y.0, y.1] {
                if bounds.contains((*x, end)) {
                    plot.draw(&PathElement::new(
                        vec![(x - cap, end), (x + cap, end)],
                        INK.stroke_width(1),
                    ))?;
                }
            }
        }
    }
    Ok(())
}
