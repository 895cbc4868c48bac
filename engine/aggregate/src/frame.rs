//! The tables as polars DataFrames: conversion from and to [`Table`], the reduction of repeated rows
//! (`stats: metrics`), the `derive` and `compare` post-processing (joins and concatenation), and the
//! CSV/Parquet exports and their read-back.

use std::num::NonZeroUsize;
use std::path::Path;

use polars::prelude::*;
use rayon::prelude::*;

use crate::error::AggregateError;
use crate::spec::{CompareOp, CompareSpec, DeriveStep, ScaleBy};
use crate::{Cell, Table};

/// The column that marks rows computed by `derive` (1) rather than measured (0).
pub(crate) const COMPUTED_COLUMN: &str = "computed";

/// Columns the post-processing adds temporarily; a `__` prefix keeps them apart from user labels.
const ROW_INDEX: &str = "__row";
const JOIN_KEY: &str = "__all";

/// Rows a CSV export's threads serialize at a time each: polars' default of 1 024 made a trace's 204 800-row CDF
/// a hundred rounds of slicing the frame and joining its threads.
const CSV_BATCH_ROWS: NonZeroUsize = NonZeroUsize::new(16 * 1024).expect("not zero");

fn polars_error(table: &str) -> impl Fn(PolarsError) -> AggregateError + '_ {
    move |e| AggregateError::table(table, e)
}

/// A DataFrame with one column per table column: f64 when every cell is a number or null, text otherwise.
pub(crate) fn table_to_frame(name: &str, table: &Table) -> Result<DataFrame, AggregateError> {
    let columns = table
        .columns
        .iter()
        .enumerate()
        .map(|(index, column)| {
            let cells = table
                .rows
                .iter()
                .map(|row| row.get(index).unwrap_or(&Cell::Null));
            let name = column.as_str().into();
            if cells
                .clone()
                .all(|c| matches!(c, Cell::Num(_) | Cell::Null))
            {
                let values: Vec<Option<f64>> = cells.map(Cell::as_f64).collect();
                Column::new(name, values)
            } else if cells
                .clone()
                .all(|c| matches!(c, Cell::Text(_) | Cell::Null))
            {
                // Borrowed: a CDF's label columns are hundreds of thousands of cells.
                let values: Vec<Option<&str>> = cells
                    .map(|c| match c {
                        Cell::Text(text) => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                Column::new(name, values)
            } else {
                let values: Vec<Option<String>> = cells
                    .map(|c| (!matches!(c, Cell::Null)).then(|| c.label()))
                    .collect();
                Column::new(name, values)
            }
        })
        .collect();
    DataFrame::new(table.rows.len(), columns).map_err(polars_error(name))
}

/// The CSV polars writes for [`table_to_frame`]'s frame of `table` (header, `,`, quotes only where needed, null
/// as nothing, `\n` after each row), byte for byte, written straight from the table's cells: made that way, a
/// trace's 204 800-row CDF waited for its frame and then took polars 40–100 ms to write. `table` is as
/// [`as_read_back`] leaves it, so that a column's numbers are all [`Cell::Num`] or all text; floats are formatted
/// as polars formats them (zmij's shortest round-trip form).
pub(crate) fn table_csv(table: &Table) -> Vec<u8> {
    let mut header = Vec::new();
    for (index, column) in table.columns.iter().enumerate() {
        if index > 0 {
            header.push(b',');
        }
        csv_text(&mut header, column);
    }
    header.push(b'\n');
    let chunks: Vec<Vec<u8>> = table
        .rows
        .par_chunks(CSV_BATCH_ROWS.get())
        .map(|rows| {
            let mut out = Vec::with_capacity(rows.len() * 64);
            let mut floats = zmij::Buffer::new();
            for row in rows {
                for index in 0..table.columns.len() {
                    if index > 0 {
                        out.push(b',');
                    }
                    match row.get(index).unwrap_or(&Cell::Null) {
                        Cell::Num(value) => out.extend_from_slice(floats.format(*value).as_bytes()),
                        Cell::Text(text) => csv_text(&mut out, text),
                        Cell::Null => {}
                    }
                }
                out.push(b'\n');
            }
            out
        })
        .collect();
    let mut csv = header;
    csv.reserve(chunks.iter().map(Vec::len).sum());
    for chunk in chunks {
        csv.extend_from_slice(&chunk);
    }
    csv
}

/// `text` as one CSV field, as polars' `QuoteStyle::Necessary` writes it: quoted when it holds a comma, a line
/// break or is empty (an empty field is a null), its quotes doubled (and then quoted).
fn csv_text(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    if bytes.is_empty() {
        out.extend_from_slice(b"\"\"");
        return;
    }
    let quoted = bytes
        .iter()
        .any(|&b| matches!(b, b',' | b'\n' | b'\r' | b'"'));
    if !quoted {
        out.extend_from_slice(bytes);
        return;
    }
    out.push(b'"');
    for &byte in bytes {
        if byte == b'"' {
            out.push(b'"');
        }
        out.push(byte);
    }
    out.push(b'"');
}

/// What [`frame_to_table`] gives for the frame [`table_to_frame`] makes of `table`, without making it: every row
/// one cell per column, the numbers of a column that also holds text turned into text (their
/// [`Cell::label`]), and `labels` (those the table has) as its label columns.
pub(crate) fn as_read_back(mut table: Table, labels: &[String]) -> Table {
    let width = table.columns.len();
    for row in &mut table.rows {
        row.resize(width, Cell::Null);
    }
    for index in 0..width {
        let numeric = table
            .rows
            .iter()
            .all(|row| matches!(row[index], Cell::Num(_) | Cell::Null));
        if !numeric {
            for row in &mut table.rows {
                if let cell @ Cell::Num(_) = &mut row[index] {
                    *cell = Cell::Text(cell.label());
                }
            }
        }
    }
    table.labels = Some(
        labels
            .iter()
            .filter(|label| table.columns.contains(label))
            .cloned()
            .collect(),
    );
    table
}

/// The table of a DataFrame: numbers (of any numeric type) become [`Cell::Num`], everything else text. `labels`:
/// the label columns when known (those the frame lacks are dropped).
pub(crate) fn frame_to_table(
    name: &str,
    frame: &DataFrame,
    labels: Option<&[String]>,
) -> Result<Table, AggregateError> {
    let error = polars_error(name);
    let mut table = Table::new(
        frame
            .get_column_names()
            .into_iter()
            .map(|n| n.to_string())
            .collect(),
    );
    table.labels = labels.map(|labels| {
        labels
            .iter()
            .filter(|l| table.columns.contains(l))
            .cloned()
            .collect()
    });
    table.rows = vec![Vec::with_capacity(frame.width()); frame.height()];
    for column in frame.columns() {
        let dtype = column.dtype();
        let cells: Vec<Cell> = if dtype.is_primitive_numeric() || dtype.is_bool() {
            let numbers = column.cast(&DataType::Float64).map_err(&error)?;
            numbers
                .f64()
                .map_err(&error)?
                .iter()
                .map(|v| v.map_or(Cell::Null, Cell::Num))
                .collect()
        } else {
            let texts = column.cast(&DataType::String).map_err(&error)?;
            texts
                .str()
                .map_err(&error)?
                .iter()
                .map(|v| v.map_or(Cell::Null, |t| Cell::Text(t.to_string())))
                .collect()
        };
        for (row, cell) in table.rows.iter_mut().zip(cells) {
            row.push(cell);
        }
    }
    Ok(table)
}

/// Rows equal in `group` reduced into one, in order of first appearance: each metric's mean (over its non-null
/// values), its sample standard deviation (n − 1; null below two values) as `sd_name(metric)`, and the number
/// of rows as `count`.
pub(crate) fn reduce(
    name: &str,
    frame: DataFrame,
    group: &[String],
    metrics: &[String],
    count: &str,
    sd_name: impl Fn(&str) -> String,
) -> Result<DataFrame, AggregateError> {
    let error = polars_error(name);
    let mut statistics: Vec<Expr> = Vec::with_capacity(metrics.len() * 2 + 1);
    for metric in metrics {
        let values = || col(metric.as_str()).cast(DataType::Float64);
        statistics.push(values().mean().alias(metric.as_str()));
        statistics.push(values().std(1).alias(sd_name(metric)));
    }
    statistics.push(len().cast(DataType::Float64).alias(count));
    let lazy = frame.lazy();
    let reduced = if group.is_empty() {
        lazy.select(statistics)
    } else {
        let keys: Vec<Expr> = group.iter().map(|g| col(g.as_str())).collect();
        lazy.group_by_stable(keys).agg(statistics)
    };
    reduced.collect().map_err(&error)
}

/// Applies the `derive` steps in order; `labels` are the table's label columns.
pub(crate) fn derive(
    name: &str,
    frame: DataFrame,
    steps: &[DeriveStep],
    labels: &[String],
) -> Result<DataFrame, AggregateError> {
    steps.iter().try_fold(frame, |frame, step| match step {
        DeriveStep::ScaleBy(scale) => scale_by(name, frame, scale, labels),
    })
}

fn require_columns(
    name: &str,
    frame: &DataFrame,
    columns: &[&str],
    what: &str,
) -> Result<(), AggregateError> {
    match columns.iter().find(|c| frame.column(c).is_err()) {
        Some(missing) => Err(AggregateError::table(
            name,
            format!("{what} names column `{missing}`, which the table does not have"),
        )),
        None => Ok(()),
    }
}

fn scale_by(
    name: &str,
    frame: DataFrame,
    scale: &ScaleBy,
    labels: &[String],
) -> Result<DataFrame, AggregateError> {
    let error = polars_error(name);
    let mut named: Vec<&str> = vec![scale.column.as_str()];
    named.extend(scale.columns.iter().map(String::as_str));
    require_columns(name, &frame, &named, "`scale_by`")?;
    let unit = scale.unit.unwrap_or(scale.base);
    let x = || col(scale.column.as_str()).cast(DataType::Float64);
    let has_computed = frame.column(COMPUTED_COLUMN).is_ok();
    let mut measured = frame.lazy();
    if !has_computed {
        measured = measured.with_column(lit(0.0).alias(COMPUTED_COLUMN));
    }
    // The factor of measured rows; rows computed by an earlier step keep theirs or get it here.
    let measured = measured
        .with_column((x() / lit(unit)).alias(scale.factor_column.as_str()))
        .with_column(lit(1.0).alias(JOIN_KEY));
    let schema = measured.clone().collect_schema().map_err(&error)?;

    let group_labels: Vec<&str> = labels
        .iter()
        .map(String::as_str)
        .filter(|l| *l != scale.column)
        .chain([JOIN_KEY])
        .collect();
    let group_keys: Vec<Expr> = group_labels.iter().map(|l| col(*l)).collect();
    let is_measured = col(COMPUTED_COLUMN).eq(lit(0.0));
    let base_name = |c: &str| format!("__base_{c}");
    let base_rows = measured
        .clone()
        .filter(is_measured.clone().and(x().eq(lit(scale.base))))
        .select(
            group_keys
                .iter()
                .cloned()
                .chain(
                    scale
                        .columns
                        .iter()
                        .map(|c| col(c.as_str()).alias(base_name(c))),
                )
                .collect::<Vec<_>>(),
        );
    let targets = measured
        .clone()
        .filter(is_measured.and(x().neq(lit(scale.base))))
        .select(
            group_keys
                .iter()
                .cloned()
                .chain([col(scale.column.as_str())])
                .collect::<Vec<_>>(),
        );
    let joined = targets.join(
        base_rows,
        group_keys.clone(),
        group_keys,
        JoinArgs::new(JoinType::Inner),
    );
    // The computed rows in the measured table's column order: scaled values, factor and marker set, the
    // remaining statistics null.
    let computed_columns: Vec<Expr> = schema
        .iter()
        .map(|(column, dtype)| {
            let column = column.as_str();
            if column == scale.factor_column {
                (x() / lit(unit)).alias(column)
            } else if column == COMPUTED_COLUMN {
                lit(1.0).alias(column)
            } else if scale.columns.iter().any(|c| c == column) {
                (col(base_name(column).as_str()) * x() / lit(scale.base))
                    .cast(dtype.clone())
                    .alias(column)
            } else if column == scale.column || group_labels.contains(&column) {
                col(column)
            } else {
                lit(NULL).cast(dtype.clone()).alias(column)
            }
        })
        .collect();
    let computed = joined.select(computed_columns);
    concat([measured, computed], UnionArgs::default())
        .map_err(&error)?
        .drop(cols([JOIN_KEY]))
        .collect()
        .map_err(&error)
}

/// Adds `<op>_<value>` for each of `compare.values` against the baseline series' value among rows equal in
/// `compare.on`: `delta_` = value − baseline, `ratio_` = value / baseline, `speedup_` = baseline / value. A
/// quotient by zero is null, as is every column of a row without a baseline row.
pub(crate) fn compare(
    name: &str,
    frame: DataFrame,
    compare: &CompareSpec,
) -> Result<DataFrame, AggregateError> {
    let error = polars_error(name);
    let mut named: Vec<&str> = vec![compare.column.as_str()];
    named.extend(compare.on.iter().map(String::as_str));
    named.extend(compare.values.iter().map(String::as_str));
    require_columns(name, &frame, &named, "`compare`")?;
    let series_dtype = frame
        .column(&compare.column)
        .map_err(&error)?
        .dtype()
        .clone();
    let baseline = match (&compare.baseline, series_dtype.is_primitive_numeric()) {
        (cell, true) => lit(cell.as_f64().ok_or_else(|| {
            AggregateError::table(name, format!("baseline {} is not a number", cell.label()))
        })?),
        (cell, false) => lit(cell.label()),
    };
    let base_name = |c: &str| format!("__baseline_{c}");
    let keys: Vec<Expr> = compare.on.iter().map(|c| col(c.as_str())).collect();
    let baseline_rows = frame
        .clone()
        .lazy()
        .filter(col(compare.column.as_str()).eq(baseline))
        .select(
            keys.iter()
                .cloned()
                .chain(
                    compare
                        .values
                        .iter()
                        .map(|v| col(v.as_str()).alias(base_name(v))),
                )
                .collect::<Vec<_>>(),
        );
    let duplicated = baseline_rows
        .clone()
        .group_by(keys.clone())
        .agg([len().alias("rows")])
        .filter(col("rows").gt(lit(1)))
        .collect()
        .map_err(&error)?;
    if duplicated.height() > 0 {
        return Err(AggregateError::table(
            name,
            format!(
                "`compare`: the baseline {} has several rows with the same {:?}",
                compare.baseline.label(),
                compare.on
            ),
        ));
    }
    let quotient = |numerator: Expr, denominator: Expr| {
        when(denominator.clone().eq(lit(0.0)))
            .then(lit(NULL).cast(DataType::Float64))
            .otherwise(numerator.cast(DataType::Float64) / denominator.cast(DataType::Float64))
    };
    let deltas: Vec<Expr> = compare
        .values
        .iter()
        .map(|v| {
            let (value, baseline) = (col(v.as_str()), col(base_name(v).as_str()));
            let compared = match compare.op {
                CompareOp::Delta => value - baseline,
                CompareOp::Ratio => quotient(value, baseline),
                CompareOp::Speedup => quotient(baseline, value),
            };
            compared.alias(format!("{}_{v}", compare.op.prefix()))
        })
        .collect();
    let helpers: Vec<String> = compare
        .values
        .iter()
        .map(|v| base_name(v))
        .chain([ROW_INDEX.to_string()])
        .collect();
    frame
        .lazy()
        .with_row_index(ROW_INDEX, None)
        .join(
            baseline_rows,
            keys.clone(),
            keys,
            JoinArgs::new(JoinType::Left),
        )
        .sort([ROW_INDEX], SortMultipleOptions::default())
        .with_columns(deltas)
        .drop(cols(helpers))
        .collect()
        .map_err(&error)
}

/// The key of the Parquet file metadata that lists a table's label columns (a JSON array of column names).
/// Readers that do not know it (pandas, pyarrow, polars) ignore it; a CSV export has no place for it.
pub(crate) const LABELS_METADATA_KEY: &str = "fracflow.label_columns";

/// Writes `<name>.csv` and `<name>.parquet` of `frame` into `out_dir`, each atomically; the Parquet file
/// records `labels` (the table's label columns) in its key-value metadata under [`LABELS_METADATA_KEY`].
pub(crate) fn export(
    name: &str,
    frame: &DataFrame,
    labels: &[String],
    out_dir: &Path,
) -> Result<(), AggregateError> {
    let csv = || {
        let mut csv = Vec::new();
        CsvWriter::new(&mut csv)
            .include_header(true)
            .with_batch_size(CSV_BATCH_ROWS)
            .finish(&mut frame.clone())
            .map_err(polars_error(name))?;
        write_export(name, "csv", &csv, out_dir)
    };
    // Written side by side: each is mostly encoding, then an fsync.
    let (csv, parquet) = rayon::join(csv, || export_parquet(name, frame, labels, out_dir));
    csv.and(parquet)
}

/// Writes `table`'s exports as [`export`] writes those of its frame, and returns the table as they read back
/// ([`as_read_back`]). The CSV is written from the table itself ([`table_csv`]), beside the frame the Parquet
/// file needs.
pub(crate) fn export_table(
    name: &str,
    table: Table,
    labels: &[String],
    out_dir: &Path,
) -> Result<Table, AggregateError> {
    let table = as_read_back(table, labels);
    let (csv, parquet) = rayon::join(
        || write_export(name, "csv", &table_csv(&table), out_dir),
        || export_parquet(name, &table_to_frame(name, &table)?, labels, out_dir),
    );
    csv.and(parquet).map(|()| table)
}

fn export_parquet(
    name: &str,
    frame: &DataFrame,
    labels: &[String],
    out_dir: &Path,
) -> Result<(), AggregateError> {
    let mut parquet = Vec::new();
    let labels_json = serde_json::to_string(labels).map_err(|e| AggregateError::table(name, e))?;
    ParquetWriter::new(&mut parquet)
        .with_compression(ParquetCompression::Zstd(None))
        .with_key_value_metadata(Some(KeyValueMetadata::from_static(vec![(
            LABELS_METADATA_KEY.to_owned(),
            labels_json,
        )])))
        .finish(&mut frame.clone())
        .map_err(polars_error(name))?;
    write_export(name, "parquet", &parquet, out_dir)
}

fn write_export(
    name: &str,
    extension: &str,
    bytes: &[u8],
    out_dir: &Path,
) -> Result<(), AggregateError> {
    let path = out_dir.join(format!("{name}.{extension}"));
    fracflow_record::atomic_write(&path, bytes).map_err(|e| AggregateError::io(&path, e))
}

/// Reads a `.csv` (with header) or `.parquet` export back, with the label columns its Parquet metadata
/// records (`None` for a CSV file or a Parquet file without them).
pub(crate) fn read_frame(path: &Path) -> Result<(DataFrame, Option<Vec<String>>), AggregateError> {
    let shown = path.display().to_string();
    let error =
        |e: PolarsError| AggregateError::table(&shown, format!("not a readable table: {e}"));
    match path.extension().and_then(|e| e.to_str()) {
        Some("csv") => {
            // Open it ourselves first so that a missing file is an I/O error naming it.
            std::fs::metadata(path).map_err(|e| AggregateError::io(path, e))?;
            CsvReadOptions::default()
                .with_has_header(true)
                .try_into_reader_with_file_path(Some(path.to_path_buf()))
                .and_then(|reader| reader.finish())
                .map(|frame| (frame, None))
                .map_err(error)
        }
        Some("parquet") => {
            let file = std::fs::File::open(path).map_err(|e| AggregateError::io(path, e))?;
            let mut reader = ParquetReader::new(file);
            let recorded = reader
                .get_metadata()
                .map_err(error)?
                .key_value_metadata()
                .iter()
                .flatten()
                .find(|kv| kv.key == LABELS_METADATA_KEY)
                .and_then(|kv| kv.value.clone());
            let labels = recorded
                .map(|json| {
                    serde_json::from_str::<Vec<String>>(&json).map_err(|e| {
                        AggregateError::table(
                            &shown,
                            format!("its `{LABELS_METADATA_KEY}` metadata is not a list of column names: {e}"),
                        )
                    })
                })
                .transpose()?;
            let frame = reader.finish().map_err(error)?;
            Ok((frame, labels))
        }
        _ => Err(AggregateError::table(
            &shown,
            "only .csv and .parquet tables can be read",
        )),
    }
}
