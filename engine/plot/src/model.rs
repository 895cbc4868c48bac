//! From a spec and its table to what is drawn: panels of marks in drawing coordinates, axis ranges, legend.
//! Every column the spec names is checked here, so a bad spec fails before anything is drawn.

use std::collections::BTreeMap;

use fracflow_record::{Cell, Table};

use crate::PlotError;
use crate::axis::{AxisRange, fit_range, to_coord};
use crate::spec::{AxisSpec, Grouping, Names, PanelOrder, PlotSpec, Scale, Style, cells_equal};

/// The whole figure, ready to lay out.
#[derive(Debug)]
pub(crate) struct Figure {
    pub title: Option<String>,
    pub legend: Vec<LegendEntry>,
    pub grid_rows: usize,
    pub grid_columns: usize,
    /// Row-major, `grid_rows × grid_columns`.
    pub panels: Vec<Panel>,
    /// Left to right; two when the x axis is broken.
    pub x_segments: Vec<AxisRange>,
    /// Top to bottom; two when the y axis is broken.
    pub y_segments: Vec<AxisRange>,
    pub x_label: String,
    pub y_label: String,
    pub categories: Option<CategoryAxis>,
}

/// Bars: what the x axis says at each position, and the outer groups.
#[derive(Debug)]
pub(crate) struct CategoryAxis {
    pub ticks: Vec<(f64, String)>,
    pub groups: Vec<(f64, String)>,
    /// Positions of the lines between groups.
    pub separators: Vec<f64>,
}

#[derive(Debug)]
pub(crate) struct Panel {
    pub title: Option<String>,
    pub marks: Vec<Mark>,
}

/// One drawn element, in drawing coordinates (log10 on a log axis). `series` picks the colour.
#[derive(Debug)]
pub(crate) enum Mark {
    /// A closed area between a lower and an upper line, as a polygon.
    Band {
        series: usize,
        outline: Vec<(f64, f64)>,
    },
    Line {
        series: usize,
        points: Vec<(f64, f64)>,
        markers: bool,
    },
    Bar {
        series: usize,
        x: (f64, f64),
        y: (f64, f64),
        dashed: bool,
    },
    ErrorBar {
        x: f64,
        cap: f64,
        y: (f64, f64),
    },
}

#[derive(Debug)]
pub(crate) struct LegendEntry {
    pub label: String,
    pub swatch: Swatch,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Swatch {
    Line { series: usize, markers: bool },
    Bar { series: usize },
    DashedOutline,
    Band,
}

/// Bar slots are 1 wide; this much extra space separates groups.
const GROUP_GAP: f64 = 0.6;
/// The share of a slot the bars fill.
const SLOT_FILL: f64 = 0.8;

pub(crate) fn build(
    spec: &PlotSpec,
    tables: &BTreeMap<String, Table>,
) -> Result<Figure, PlotError> {
    check_spec(spec)?;
    let table = tables
        .get(&spec.table)
        .ok_or_else(|| PlotError::MissingTable {
            figure: spec.figure.clone(),
            table: spec.table.clone(),
            available: tables.keys().cloned().collect::<Vec<_>>().join(", "),
        })?;
    let view = View::filtered(spec, table)?;
    let series = match &spec.series {
        Some(grouping) => view.levels_of(grouping, "series")?,
        None => Levels::single(),
    };
    let (panel_rows, panel_columns) = view.panel_levels(spec)?;
    let mut panel_row_sets = vec![Vec::new(); panel_rows.len() * panel_columns.len()];
    for &row in &view.rows {
        let (Some(r), Some(c)) = (
            panel_rows.index_of(&view, row),
            panel_columns.index_of(&view, row),
        ) else {
            continue;
        };
        panel_row_sets[r * panel_columns.len() + c].push(row);
    }
    let titles = panel_titles(spec, &panel_rows, &panel_columns);

    let (panels, x_segments, y_segments, categories, mut legend) = match spec.style {
        Style::Lines | Style::Cdf => {
            let plotted = PanelPoints::collect(spec, &view, &series, &panel_row_sets)?;
            let (x_segments, y_segments) = plotted.ranges(spec)?;
            let panels = plotted.into_marks(spec, titles);
            (
                panels,
                x_segments,
                y_segments,
                None,
                series_legend(spec, &series, &view),
            )
        }
        Style::Bars => {
            let bars = BarLayout::collect(spec, &view, &series, &panel_row_sets)?;
            let y_segments = y_ranges(spec, &bars.y_extent_values(), true)?;
            let base = match spec.y.scale {
                Scale::Linear => 0.0,
                Scale::Log => y_segments.last().map_or(0.0, |range| range.coords().0),
            };
            let (marks, categories, x_range) = bars.into_marks(base);
            let panels = marks
                .into_iter()
                .zip(titles)
                .map(|(marks, title)| Panel { title, marks })
                .collect();
            let mut legend = series_legend(spec, &series, &view);
            if let Some(outline) = &spec.outline {
                legend.push(LegendEntry {
                    label: outline.label.clone(),
                    swatch: Swatch::DashedOutline,
                });
            }
            (panels, vec![x_range], y_segments, Some(categories), legend)
        }
    };
    if let (Some(band), Style::Lines) = (&spec.band, spec.style)
        && let Some(label) = &band.label
    {
        legend.push(LegendEntry {
            label: label.clone(),
            swatch: Swatch::Band,
        });
    }
    // Bars without `x` name their categories under each position; a column name below them would add nothing.
    let x_label = spec
        .x
        .as_ref()
        .map_or_else(String::new, |x| x.description().to_owned());
    Ok(Figure {
        title: spec.title.clone(),
        legend,
        grid_rows: panel_rows.len(),
        grid_columns: panel_columns.len(),
        panels,
        x_segments,
        y_segments,
        x_label,
        y_label: spec.y.description().to_owned(),
        categories,
    })
}

fn spec_error(spec: &PlotSpec, message: impl Into<String>) -> PlotError {
    PlotError::Spec {
        figure: spec.figure.clone(),
        message: message.into(),
    }
}

/// The combinations the format allows; anything else is a mistake worth naming rather than ignoring.
fn check_spec(spec: &PlotSpec) -> Result<(), PlotError> {
    let stem_ok = !spec.figure.is_empty()
        && !spec.figure.starts_with('.')
        && !spec.figure.contains(['/', '\\', '\0']);
    if !stem_ok {
        return Err(spec_error(
            spec,
            format!("`figure` must be a plain file stem, not {:?}", spec.figure),
        ));
    }
    let bars = spec.style == Style::Bars;
    if !bars && spec.x.is_none() {
        return Err(spec_error(spec, "`x` is required for lines and cdf"));
    }
    if bars && spec.x.is_none() && spec.categories.is_none() {
        return Err(spec_error(
            spec,
            "bars need `categories` (or `x`) for the bar positions",
        ));
    }
    for (given, key) in [
        (spec.error.is_some(), "error"),
        (spec.categories.is_some(), "categories"),
        (spec.groups.is_some(), "groups"),
        (spec.outline.is_some(), "outline"),
    ] {
        if given && !bars {
            return Err(spec_error(spec, format!("`{key}` applies to bars only")));
        }
    }
    if spec.band.is_some() && spec.style != Style::Lines {
        return Err(spec_error(spec, "`band` applies to lines only"));
    }
    if let (Some(x), Some(categories)) = (&spec.x, &spec.categories)
        && bars
        && x.column != categories.column
    {
        return Err(spec_error(
            spec,
            format!(
                "bars are placed by `categories.column` ({}); `x.column` ({}) must name the same column",
                categories.column, x.column
            ),
        ));
    }
    check_panel_order(spec)?;
    if let Some(x) = &spec.x {
        check_axis(spec, "x", x)?;
        if bars && (x.axis_break.is_some() || x.range.is_some() || x.scale == Scale::Log) {
            return Err(spec_error(
                spec,
                "bars have categories along x: no `x.range`, `x.scale: log` or `x.break`",
            ));
        }
    }
    check_axis(spec, "y", &spec.y)
}

/// `panels.order` must say which facet it orders: a list for panels split by one column, else a map by column.
fn check_panel_order(spec: &PlotSpec) -> Result<(), PlotError> {
    let Some(panels) = &spec.panels else {
        return Ok(());
    };
    let facets: Vec<&String> = [&panels.rows, &panels.columns]
        .into_iter()
        .flatten()
        .collect();
    match &panels.order {
        None => Ok(()),
        Some(_) if facets.is_empty() => Err(spec_error(
            spec,
            "`panels.order` needs `panels.rows` or `panels.columns` to order",
        )),
        Some(PanelOrder::Values(_)) if facets.len() > 1 => Err(spec_error(
            spec,
            format!(
                "`panels.order` is one list, but the panels split by two columns ({}); give a list for each: \
                 `order: {{{}: […], {}: […]}}`",
                facets
                    .iter()
                    .map(|f| f.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                facets[0],
                facets[1]
            ),
        )),
        Some(PanelOrder::Values(_)) => Ok(()),
        Some(PanelOrder::ByColumn(orders)) => {
            match orders.iter().find(|(column, _)| !facets.contains(&column)) {
                Some((column, _)) => Err(spec_error(
                    spec,
                    format!(
                        "`panels.order` names `{column}`, which is neither `panels.rows` nor `panels.columns` ({})",
                        facets
                            .iter()
                            .map(|f| f.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )),
                None => Ok(()),
            }
        }
    }
}

fn check_axis(spec: &PlotSpec, name: &str, axis: &AxisSpec) -> Result<(), PlotError> {
    let check_range = |what: &str, [lo, hi]: [f64; 2]| {
        let ordered = lo.partial_cmp(&hi) == Some(std::cmp::Ordering::Less);
        if !ordered || (axis.scale == Scale::Log && lo <= 0.0) {
            let need = if axis.scale == Scale::Log {
                "0 < lo < hi (log scale)"
            } else {
                "lo < hi"
            };
            return Err(spec_error(
                spec,
                format!("`{name}.{what}` is [{lo}, {hi}]; it needs {need}"),
            ));
        }
        Ok(())
    };
    if let Some(range) = axis.range {
        check_range("range", range)?;
    }
    let Some(axis_break) = &axis.axis_break else {
        return Ok(());
    };
    if axis.range.is_some() {
        return Err(spec_error(
            spec,
            format!("`{name}` has both `range` and `break`; give one"),
        ));
    }
    let (first, second, wrong) = match name {
        "x" => (
            ("left", axis_break.left),
            ("right", axis_break.right),
            [axis_break.below, axis_break.above],
        ),
        _ => (
            ("below", axis_break.below),
            ("above", axis_break.above),
            [axis_break.left, axis_break.right],
        ),
    };
    if wrong.iter().any(Option::is_some) {
        let keys = if name == "x" {
            "left/right"
        } else {
            "below/above"
        };
        return Err(spec_error(spec, format!("`{name}.break` takes {keys}")));
    }
    for (key, range) in [first, second] {
        let range =
            range.ok_or_else(|| spec_error(spec, format!("`{name}.break` needs `{key}`")))?;
        check_range(&format!("break.{key}"), range)?;
    }
    Ok(())
}

/// The table's rows that pass `where`, with column lookups that name what is missing.
struct View<'t> {
    spec: &'t PlotSpec,
    table: &'t Table,
    rows: Vec<usize>,
}

impl<'t> View<'t> {
    fn filtered(spec: &'t PlotSpec, table: &'t Table) -> Result<View<'t>, PlotError> {
        let mut conditions = Vec::new();
        for (column, value) in &spec.filter {
            conditions.push((Self::column_in(spec, table, column, "`where`")?, value));
        }
        let rows = (0..table.rows.len())
            .filter(|&row| {
                conditions.iter().all(|(column, value)| {
                    table.rows[row]
                        .get(*column)
                        .is_some_and(|cell| cells_equal(cell, value))
                })
            })
            .collect();
        Ok(View { spec, table, rows })
    }

    fn column_in(
        spec: &PlotSpec,
        table: &Table,
        column: &str,
        role: &'static str,
    ) -> Result<usize, PlotError> {
        table
            .column(column)
            .ok_or_else(|| PlotError::MissingColumn {
                figure: spec.figure.clone(),
                table: spec.table.clone(),
                column: column.to_owned(),
                role,
                available: table.columns.join(", "),
            })
    }

    fn column(&self, column: &str, role: &'static str) -> Result<NumberColumn<'_>, PlotError> {
        Ok(NumberColumn {
            view: self,
            index: Self::column_in(self.spec, self.table, column, role)?,
            role,
        })
    }

    fn cell(&self, row: usize, column: usize) -> &Cell {
        self.table.rows[row].get(column).unwrap_or(&Cell::Null)
    }

    /// The distinct values of a grouping's column among the rows, in the order the format promises.
    fn levels_of(&self, grouping: &Grouping, role: &'static str) -> Result<Levels, PlotError> {
        let column = Self::column_in(self.spec, self.table, &grouping.column, role)?;
        Ok(self.levels(
            column,
            grouping.order.as_deref().unwrap_or(&[]),
            &grouping.names,
        ))
    }

    fn levels(&self, column: usize, order: &[Cell], names: &Names) -> Levels {
        let mut values: Vec<Cell> = Vec::new();
        let push = |values: &mut Vec<Cell>, cell: &Cell| {
            if *cell != Cell::Null && !values.iter().any(|known| cells_equal(known, cell)) {
                values.push(cell.clone());
            }
        };
        for cell in order {
            push(&mut values, cell);
        }
        for (key, _) in &names.0 {
            push(&mut values, &Cell::Text(key.clone()));
        }
        let mut seen: Vec<Cell> = Vec::new();
        for &row in &self.rows {
            push(&mut seen, self.cell(row, column));
        }
        if seen.iter().all(|cell| cell.as_f64().is_some()) {
            seen.sort_by(|a, b| {
                a.as_f64()
                    .unwrap_or(0.0)
                    .total_cmp(&b.as_f64().unwrap_or(0.0))
            });
        }
        for cell in &seen {
            push(&mut values, cell);
        }
        let labels = values
            .iter()
            .map(|value| {
                names
                    .get(value)
                    .map_or_else(|| value.label(), str::to_owned)
            })
            .collect();
        Levels {
            column: Some(column),
            values,
            labels,
        }
    }

    fn panel_levels(&self, spec: &PlotSpec) -> Result<(Levels, Levels), PlotError> {
        let Some(panels) = &spec.panels else {
            return Ok((Levels::single(), Levels::single()));
        };
        let level = |column: &Option<String>, role: &'static str| match column {
            Some(column) => {
                let index = Self::column_in(self.spec, self.table, column, role)?;
                let levels = self.levels(index, panels.order_of(column), &Names::default());
                // No rows at all: one empty panel that says so, rather than a figure without any.
                Ok(if levels.values.is_empty() {
                    Levels::single()
                } else {
                    levels
                })
            }
            None => Ok(Levels::single()),
        };
        Ok((
            level(&panels.rows, "`panels.rows`")?,
            level(&panels.columns, "`panels.columns`")?,
        ))
    }
}

/// A numeric column of the view.
struct NumberColumn<'v> {
    view: &'v View<'v>,
    index: usize,
    role: &'static str,
}

impl NumberColumn<'_> {
    /// The number in `row`; `None` for an empty cell.
    fn number(&self, row: usize) -> Result<Option<f64>, PlotError> {
        let cell = self.view.cell(row, self.index);
        match cell {
            Cell::Null => Ok(None),
            Cell::Text(text) if text.trim().is_empty() => Ok(None),
            _ => cell
                .as_f64()
                .map(Some)
                .ok_or_else(|| PlotError::NotNumeric {
                    figure: self.view.spec.figure.clone(),
                    table: self.view.spec.table.clone(),
                    column: self.view.table.columns[self.index].clone(),
                    role: self.role,
                    row,
                    value: cell.label(),
                }),
        }
    }
}

/// The values of one grouping column, in display order, with their display names.
#[derive(Debug)]
struct Levels {
    /// `None`: no grouping, every row belongs to the one level.
    column: Option<usize>,
    values: Vec<Cell>,
    labels: Vec<String>,
}

impl Levels {
    fn single() -> Levels {
        Levels {
            column: None,
            values: vec![Cell::Null],
            labels: vec![String::new()],
        }
    }

    fn len(&self) -> usize {
        self.values.len()
    }

    fn index_of(&self, view: &View, row: usize) -> Option<usize> {
        let Some(column) = self.column else {
            return Some(0);
        };
        let cell = view.cell(row, column);
        self.values
            .iter()
            .position(|value| cells_equal(value, cell))
    }
}

fn panel_titles(spec: &PlotSpec, rows: &Levels, columns: &Levels) -> Vec<Option<String>> {
    let Some(panels) = &spec.panels else {
        return vec![None];
    };
    let facets = [(&panels.rows, rows), (&panels.columns, columns)];
    let mut titles = Vec::new();
    for r in 0..rows.len() {
        for c in 0..columns.len() {
            let chosen = [r, c];
            let pairs: Vec<(&String, &String)> = facets
                .iter()
                .zip(chosen)
                .filter_map(|((column, levels), index)| {
                    column
                        .as_ref()
                        .map(|column| (column, &levels.labels[index]))
                })
                .collect();
            let title = match &panels.title {
                Some(template) => pairs
                    .iter()
                    .fold(template.clone(), |title, (column, value)| {
                        title.replace(&format!("{{{column}}}"), value)
                    }),
                None => pairs
                    .iter()
                    .map(|(column, value)| format!("{column} = {value}"))
                    .collect::<Vec<_>>()
                    .join(" · "),
            };
            titles.push(Some(title));
        }
    }
    titles
}

/// One entry per series with data (a row whose y is a number: a series that `order` names but the table lacks,
/// or has only nulls for, draws nothing and is left out); without series, one entry naming what the marks show,
/// so that no figure lacks a legend. A series keeps its index, so its colour does not depend on which others
/// have data.
fn series_legend(spec: &PlotSpec, series: &Levels, view: &View) -> Vec<LegendEntry> {
    let y = View::column_in(spec, view.table, &spec.y.column, "y").ok();
    let has_data = |index: usize| {
        series.column.is_none()
            || view.rows.iter().any(|&row| {
                series.index_of(view, row) == Some(index)
                    && y.is_some_and(|y| view.cell(row, y).as_f64().is_some_and(f64::is_finite))
            })
    };
    let style = spec.style;
    let unnamed;
    let labels = if series.column.is_some() {
        &series.labels
    } else {
        let error = spec.error.as_ref().filter(|_| style == Style::Bars);
        unnamed = vec![match error {
            Some(error) => format!("{} (± {error})", spec.y.description()),
            None => spec.y.description().to_owned(),
        }];
        &unnamed
    };
    labels
        .iter()
        .enumerate()
        .filter(|&(index, _)| has_data(index))
        .map(|(index, label)| LegendEntry {
            label: label.clone(),
            swatch: match style {
                Style::Bars => Swatch::Bar { series: index },
                Style::Lines => Swatch::Line {
                    series: index,
                    markers: true,
                },
                Style::Cdf => Swatch::Line {
                    series: index,
                    markers: false,
                },
            },
        })
        .collect()
}

/// The y ranges, top to bottom: the two of a break, the fixed one, or one fitted to `values`.
fn y_ranges(
    spec: &PlotSpec,
    values: &[f64],
    include_zero: bool,
) -> Result<Vec<AxisRange>, PlotError> {
    axis_ranges(&spec.y, values, include_zero, spec.style == Style::Cdf).map(|mut ranges| {
        // A break lists `below` first; the drawing goes top to bottom.
        ranges.reverse();
        ranges
    })
}

/// The ranges of an axis in break order (`left`/`below` first).
fn axis_ranges(
    axis: &AxisSpec,
    values: &[f64],
    include_zero: bool,
    fraction: bool,
) -> Result<Vec<AxisRange>, PlotError> {
    let scale = axis.scale;
    let fixed = |[lo, hi]: [f64; 2]| AxisRange { scale, lo, hi };
    Ok(match (&axis.axis_break, axis.range) {
        (Some(axis_break), _) => [
            axis_break.left.or(axis_break.below),
            axis_break.right.or(axis_break.above),
        ]
        .into_iter()
        .flatten()
        .map(fixed)
        .collect(),
        (None, Some(range)) => vec![fixed(range)],
        // A CDF runs from 0 to 1; the little headroom keeps the top of the curve off the frame.
        (None, None) if fraction && scale == Scale::Linear => vec![AxisRange {
            scale,
            lo: 0.0,
            hi: 1.02,
        }],
        (None, None) => vec![fit_range(scale, values, include_zero)],
    })
}

/// Lines and CDFs: per panel, per series, the rows' points sorted by x.
struct PanelPoints {
    /// `[panel][series]` → points sorted by x.
    panels: Vec<Vec<Vec<Point>>>,
}

/// One row of a line, in data units.
#[derive(Debug, Clone, Copy)]
struct Point {
    x: f64,
    y: f64,
    /// The band's (lower, upper) edge at x.
    band: Option<(f64, f64)>,
}

impl PanelPoints {
    fn collect(
        spec: &PlotSpec,
        view: &View,
        series: &Levels,
        panel_rows: &[Vec<usize>],
    ) -> Result<PanelPoints, PlotError> {
        let Some(x_axis) = &spec.x else {
            return Err(spec_error(spec, "`x` is required for lines and cdf"));
        };
        let x = view.column(&x_axis.column, "x")?;
        let y = view.column(&spec.y.column, "y")?;
        let band = match &spec.band {
            Some(band) => Some((
                view.column(&band.lo, "band.lo")?,
                view.column(&band.hi, "band.hi")?,
            )),
            None => None,
        };
        let mut panels = Vec::new();
        for rows in panel_rows {
            let mut lines = vec![Vec::new(); series.len()];
            for &row in rows {
                let Some(index) = series.index_of(view, row) else {
                    continue;
                };
                let (Some(x_value), Some(y_value)) = (x.number(row)?, y.number(row)?) else {
                    continue;
                };
                let band_values = match &band {
                    Some((lo, hi)) => match (lo.number(row)?, hi.number(row)?) {
                        (Some(lo), Some(hi)) => Some((lo, hi)),
                        _ => None,
                    },
                    None => None,
                };
                lines[index].push(Point {
                    x: x_value,
                    y: y_value,
                    band: band_values,
                });
            }
            for line in &mut lines {
                line.sort_by(|a, b| a.x.total_cmp(&b.x).then(a.y.total_cmp(&b.y)));
            }
            panels.push(lines);
        }
        Ok(PanelPoints { panels })
    }

    fn points(&self) -> impl Iterator<Item = &Point> {
        self.panels.iter().flatten().flatten()
    }

    fn ranges(&self, spec: &PlotSpec) -> Result<(Vec<AxisRange>, Vec<AxisRange>), PlotError> {
        let Some(x_axis) = &spec.x else {
            return Err(spec_error(spec, "`x` is required for lines and cdf"));
        };
        let xs: Vec<f64> = self.points().map(|point| point.x).collect();
        let ys: Vec<f64> = self
            .points()
            .flat_map(|point| {
                [
                    Some(point.y),
                    point.band.map(|b| b.0),
                    point.band.map(|b| b.1),
                ]
            })
            .flatten()
            .collect();
        Ok((
            axis_ranges(x_axis, &xs, false, false)?,
            y_ranges(spec, &ys, false)?,
        ))
    }

    fn into_marks(self, spec: &PlotSpec, titles: Vec<Option<String>>) -> Vec<Panel> {
        let x_scale = spec.x.as_ref().map_or(Scale::Linear, |x| x.scale);
        let transform = |x: f64, y: f64| Some((to_coord(x_scale, x)?, to_coord(spec.y.scale, y)?));
        self.panels
            .into_iter()
            .zip(titles)
            .map(|(lines, title)| {
                let mut bands = Vec::new();
                let mut paths = Vec::new();
                for (series, points) in lines.iter().enumerate() {
                    let lower = points
                        .iter()
                        .filter_map(|point| transform(point.x, point.band?.0));
                    let upper = points
                        .iter()
                        .rev()
                        .filter_map(|point| transform(point.x, point.band?.1));
                    let outline: Vec<(f64, f64)> = lower.chain(upper).collect();
                    if outline.len() >= 3 {
                        bands.push(Mark::Band { series, outline });
                    }
                    let path: Vec<(f64, f64)> = match spec.style {
                        // A CDF holds its value until the next sample: a step after each point.
                        Style::Cdf => points
                            .iter()
                            .zip(points.iter().skip(1).map(Some).chain([None]))
                            .flat_map(|(point, next)| {
                                [Some((point.x, point.y)), next.map(|next| (next.x, point.y))]
                            })
                            .flatten()
                            .filter_map(|(x, y)| transform(x, y))
                            .collect(),
                        _ => points
                            .iter()
                            .filter_map(|point| transform(point.x, point.y))
                            .collect(),
                    };
                    if !path.is_empty() {
                        paths.push(Mark::Line {
                            series,
                            points: path,
                            markers: spec.style == Style::Lines,
                        });
                    }
                }
                bands.extend(paths);
                Panel {
                    title,
                    marks: bands,
                }
            })
            .collect()
    }
}

/// One bar's row: where it goes and how tall it is, in data units.
#[derive(Debug)]
struct BarRow {
    group: usize,
    category: usize,
    series: usize,
    value: f64,
    error: Option<f64>,
    dashed: bool,
}

/// Bars: per panel, the rows placed by group, category and series.
struct BarLayout {
    panels: Vec<Vec<BarRow>>,
    groups: Levels,
    categories: Levels,
    /// Series index → its position inside a slot; series without any row take no room.
    series_slot: Vec<Option<usize>>,
    slot_parts: usize,
    y_scale: Scale,
}

impl BarLayout {
    fn collect(
        spec: &PlotSpec,
        view: &View,
        series: &Levels,
        panel_rows: &[Vec<usize>],
    ) -> Result<BarLayout, PlotError> {
        let categories = match (&spec.categories, &spec.x) {
            (Some(categories), _) => view.levels_of(categories, "categories")?,
            (None, Some(x)) => {
                let grouping = Grouping {
                    column: x.column.clone(),
                    order: None,
                    names: Names::default(),
                };
                view.levels_of(&grouping, "x")?
            }
            (None, None) => {
                return Err(spec_error(
                    spec,
                    "bars need `categories` (or `x`) for the bar positions",
                ));
            }
        };
        let groups = match &spec.groups {
            Some(groups) => view.levels_of(groups, "groups")?,
            None => Levels::single(),
        };
        let y = view.column(&spec.y.column, "y")?;
        let error = match &spec.error {
            Some(column) => Some(view.column(column, "error")?),
            None => None,
        };
        let outline = match &spec.outline {
            Some(outline) => Some((
                View::column_in(spec, view.table, &outline.column, "outline")?,
                &outline.value,
            )),
            None => None,
        };
        let mut panels = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for (panel, rows) in panel_rows.iter().enumerate() {
            let mut bars = Vec::new();
            for &row in rows {
                let (Some(group), Some(category), Some(series_index)) = (
                    groups.index_of(view, row),
                    categories.index_of(view, row),
                    series.index_of(view, row),
                ) else {
                    continue;
                };
                let Some(value) = y.number(row)? else {
                    continue;
                };
                let error = match &error {
                    Some(column) => column.number(row)?,
                    None => None,
                };
                let dashed = outline
                    .is_some_and(|(column, value)| cells_equal(view.cell(row, column), value));
                if !seen.insert((panel, group, category, series_index, dashed)) {
                    let bar = [
                        ("category", &categories.labels[category]),
                        ("group", &groups.labels[group]),
                        ("series", &series.labels[series_index]),
                    ]
                    .iter()
                    .filter(|(_, label)| !label.is_empty())
                    .map(|(what, label)| format!("{what} {label}"))
                    .chain(dashed.then(|| "outline".to_owned()))
                    .collect::<Vec<_>>()
                    .join(", ");
                    return Err(PlotError::DuplicateBar {
                        figure: spec.figure.clone(),
                        table: spec.table.clone(),
                        bar,
                    });
                }
                bars.push(BarRow {
                    group,
                    category,
                    series: series_index,
                    value,
                    error,
                    dashed,
                });
            }
            panels.push(bars);
        }
        let mut series_slot = vec![None; series.len()];
        let mut slot_parts = 0;
        for (index, slot) in series_slot.iter_mut().enumerate() {
            if panels.iter().flatten().any(|bar| bar.series == index) {
                *slot = Some(slot_parts);
                slot_parts += 1;
            }
        }
        Ok(BarLayout {
            panels,
            groups,
            categories,
            series_slot,
            slot_parts: slot_parts.max(1),
            y_scale: spec.y.scale,
        })
    }

    fn y_extent_values(&self) -> Vec<f64> {
        self.panels
            .iter()
            .flatten()
            .flat_map(|bar| {
                let spread = bar.error.unwrap_or(0.0).abs();
                [bar.value, bar.value - spread, bar.value + spread]
            })
            .collect()
    }

    fn slot_center(&self, group: usize, category: usize) -> f64 {
        let index = group * self.categories.len() + category;
        index as f64 + group as f64 * GROUP_GAP
    }

    /// The marks of each panel (bars from `base`, in drawing coordinates), the category axis and the x range.
    fn into_marks(self, base: f64) -> (Vec<Vec<Mark>>, CategoryAxis, AxisRange) {
        let part_width = SLOT_FILL / self.slot_parts as f64;
        let mut panels = Vec::new();
        for bars in &self.panels {
            let mut filled = Vec::new();
            let mut dashed = Vec::new();
            let mut errors = Vec::new();
            for bar in bars {
                let Some(part) = self.series_slot[bar.series] else {
                    continue;
                };
                let Some(top) = to_coord(self.y_scale, bar.value) else {
                    continue;
                };
                let left = self.slot_center(bar.group, bar.category) - SLOT_FILL / 2.0
                    + part as f64 * part_width;
                // A hairline of space between neighbouring bars keeps their edges apart.
                let x = (left + part_width * 0.04, left + part_width * 0.96);
                let mark = Mark::Bar {
                    series: bar.series,
                    x,
                    y: (base, top),
                    dashed: bar.dashed,
                };
                if bar.dashed {
                    dashed.push(mark)
                } else {
                    filled.push(mark)
                }
                if let Some(spread) = bar.error.filter(|spread| *spread > 0.0) {
                    let low = to_coord(self.y_scale, bar.value - spread).unwrap_or(base);
                    let high = to_coord(self.y_scale, bar.value + spread).unwrap_or(top);
                    errors.push(Mark::ErrorBar {
                        x: left + part_width / 2.0,
                        cap: part_width * 0.2,
                        y: (low, high),
                    });
                }
            }
            filled.extend(dashed);
            filled.extend(errors);
            panels.push(filled);
        }
        let mut ticks = Vec::new();
        let mut groups = Vec::new();
        let mut separators = Vec::new();
        for group in 0..self.groups.len() {
            let first = self.slot_center(group, 0);
            let last = self.slot_center(group, self.categories.len().saturating_sub(1));
            for (category, label) in self.categories.labels.iter().enumerate() {
                ticks.push((self.slot_center(group, category), label.clone()));
            }
            if self.groups.column.is_some() {
                groups.push(((first + last) / 2.0, self.groups.labels[group].clone()));
            }
            if group > 0 {
                separators.push(first - (1.0 + GROUP_GAP) / 2.0);
            }
        }
        let last_center = self.slot_center(
            self.groups.len().saturating_sub(1),
            self.categories.len().saturating_sub(1),
        );
        let x_range = AxisRange {
            scale: Scale::Linear,
            lo: -0.6,
            hi: last_center + 0.6,
        };
        (
            panels,
            CategoryAxis {
                ticks,
                groups,
                separators,
            },
            x_range,
        )
    }
}
