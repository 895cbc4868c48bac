//! Aggregation throughput: our `aggregate()` samples path against a plain polars lazy `group_by().quantile()`
//! over the same Parquet files. Run through `bench/aggregate_100m.sh`, which runs each mode in its own process
//! under GNU time for the peak RSS.
//!
//! ```text
//! aggbench generate DIR POINTS ROWS_PER_POINT   # samples.parquet per point dir, 28 client threads each
//! aggbench ours DIR                             # aggregate(): skip_s 10, exact quantiles p25..p99 per point
//! aggbench ours-warmup DIR                      # the same plus figure 16's drop_fraction 0.25 (reads thread, seq)
//! aggbench ours-all DIR                         # no cuts: every row group decoded (no statistics pruning)
//! aggbench polars DIR                           # scan_parquet + filter + group_by(point).agg(quantiles)
//! ```
//! Each query mode prints `mode rows seconds`, timing the aggregation only (process start-up excluded).

use std::collections::BTreeMap;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{ArrayRef, RecordBatch, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use fracflow_aggregate::{AggregateSpec, Cell, PointSource, aggregate};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use polars::prelude::*;
use rayon::prelude::*;

const CLIENTS: u64 = 28;
/// The run every point simulates: 30 s, of which the first 10 s are cut (`skip_s: 10`).
const RUN_NS: u64 = 30_000_000_000;
const SKIP_S: u64 = 10;
/// Rows generated and written per batch.
const BATCH_ROWS: u64 = 1 << 20;

type BenchResult<T = ()> = Result<T, Box<dyn Error + Send + Sync>>;

fn main() -> BenchResult {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["generate", dir, points, rows] => generate(Path::new(dir), points.parse()?, rows.parse()?),
        ["ours", dir] => ours(Path::new(dir), "ours", SKIP_S, 0.0),
        ["ours-warmup", dir] => ours(Path::new(dir), "ours-warmup", SKIP_S, 0.25),
        ["ours-all", dir] => ours(Path::new(dir), "ours-all", 0, 0.0),
        ["polars", dir] => baseline(Path::new(dir)),
        // `cargo bench` without arguments (e.g. in CI): nothing to measure without generated data.
        [] => {
            eprintln!(
                "usage: aggbench generate DIR POINTS ROWS_PER_POINT | ours DIR | ours-warmup DIR | ours-all DIR | polars DIR"
            );
            Ok(())
        }
        other => Err(format!("unknown arguments {other:?}").into()),
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// docs/rust-stack.md §4's latencies: 10 µs + 150 ns per client + an exponential body of mean 4 µs, 0.1 % 20× slower.
fn latency_ns(state: &mut u64, client: u64) -> u64 {
    let uniform = (splitmix64(state) >> 11) as f64 / (1u64 << 53) as f64;
    let body = -(1.0 - uniform).ln() * 4000.0;
    let latency = 10_000.0 + 150.0 * client as f64 + body;
    let slow = splitmix64(state).is_multiple_of(1000);
    (if slow { latency * 20.0 } else { latency }) as u64
}

fn point_dirs(dir: &Path) -> BenchResult<Vec<PathBuf>> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    dirs.retain(|d| d.join("samples.parquet").is_file());
    dirs.sort();
    Ok(dirs)
}

fn generate(dir: &Path, points: u64, rows_per_point: u64) -> BenchResult {
    let started = Instant::now();
    (0..points)
        .into_par_iter()
        .try_for_each(|point| -> BenchResult {
            let point_dir = dir.join(format!("point_{point:03}"));
            std::fs::create_dir_all(&point_dir)?;
            let u32f = |n: &str| Field::new(n, DataType::UInt32, false);
            let u64f = |n: &str| Field::new(n, DataType::UInt64, false);
            let schema = Arc::new(Schema::new(vec![
                u32f("thread"),
                u64f("seq"),
                u64f("t_send_ns"),
                u64f("latency_ns"),
                u64f("latency_last_piece_ns"),
                u32f("slot"),
                u32f("request_bytes"),
                u32f("response_bytes"),
            ]));
            let props = WriterProperties::builder()
                .set_compression(Compression::ZSTD(ZstdLevel::default()))
                .build();
            let file = std::fs::File::create(point_dir.join("samples.parquet"))?;
            let mut writer = ArrowWriter::try_new(file, Arc::clone(&schema), Some(props))?;
            let mut state = 0x5eed ^ point.wrapping_mul(0x1000_0000_01b3);
            let rows_per_thread = rows_per_point.div_ceil(CLIENTS);
            let mut start = 0;
            while start < rows_per_point {
                let end = (start + BATCH_ROWS).min(rows_per_point);
                let rows = start..end;
                let thread: Vec<u32> = rows.clone().map(|r| (r % CLIENTS) as u32).collect();
                let seq: Vec<u64> = rows.clone().map(|r| r / CLIENTS).collect();
                let t_send: Vec<u64> = seq.iter().map(|s| s * RUN_NS / rows_per_thread).collect();
                let last_piece: Vec<u64> = thread
                    .iter()
                    .map(|&t| latency_ns(&mut state, u64::from(t)))
                    .collect();
                let from_send: Vec<u64> = last_piece.iter().map(|l| l + 300).collect();
                let batch_len = thread.len();
                let constant =
                    |v: u32| -> ArrayRef { Arc::new(UInt32Array::from(vec![v; batch_len])) };
                let batch = RecordBatch::try_new(
                    Arc::clone(&schema),
                    vec![
                        Arc::new(UInt32Array::from(thread)),
                        Arc::new(UInt64Array::from(seq)),
                        Arc::new(UInt64Array::from(t_send)),
                        Arc::new(UInt64Array::from(from_send)),
                        Arc::new(UInt64Array::from(last_piece)),
                        constant(0),
                        constant(4096),
                        constant(64),
                    ],
                )?;
                writer.write(&batch)?;
                start = end;
            }
            writer.close()?;
            Ok(())
        })?;
    println!(
        "generated {points} points × {rows_per_point} rows in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn total_rows(dirs: &[PathBuf]) -> BenchResult<u64> {
    dirs.iter().try_fold(0u64, |sum, dir| {
        let reader = SerializedFileReader::new(std::fs::File::open(dir.join("samples.parquet"))?)?;
        Ok(sum + reader.metadata().file_metadata().num_rows() as u64)
    })
}

fn ours(dir: &Path, mode: &str, skip_s: u64, drop_fraction: f64) -> BenchResult {
    let dirs = point_dirs(dir)?;
    let rows = total_rows(&dirs)?;
    let points: Vec<PointSource> = dirs
        .iter()
        .enumerate()
        .map(|(index, dir)| PointSource {
            labels: BTreeMap::from([("point".to_string(), Cell::Num(index as f64))]),
            dir: dir.clone(),
            member: None,
        })
        .collect();
    let spec: AggregateSpec = serde_json::from_str(&format!(
        r#"{{"stats":"samples","skip_s":{skip_s},"drop_fraction":{drop_fraction}}}"#
    ))?;
    let out = tempfile::tempdir()?;
    let started = Instant::now();
    let result = aggregate(&spec, &points, out.path())?;
    let seconds = started.elapsed().as_secs_f64();
    let summary = &result.tables["summary"];
    eprintln!("{mode}: first row {:?}", summary.rows.first());
    println!("{mode} {rows} {seconds:.3}");
    Ok(())
}

fn baseline(dir: &Path) -> BenchResult {
    let dirs = point_dirs(dir)?;
    let rows = total_rows(&dirs)?;
    let started = Instant::now();
    let scans: Vec<LazyFrame> = dirs
        .iter()
        .enumerate()
        .map(|(index, dir)| {
            let path = dir.join("samples.parquet");
            LazyFrame::scan_parquet(
                PlRefPath::new(path.to_string_lossy().into_owned()),
                ScanArgsParquet::default(),
            )
            .map(|scan| scan.with_column(lit(index as u32).alias("point")))
        })
        .collect::<Result<_, _>>()?;
    let latency = || col("latency_last_piece_ns");
    let quantile = |q: f64, name: &str| {
        latency()
            .quantile(lit(q), QuantileMethod::Nearest)
            .alias(name)
    };
    let summary = concat(scans, UnionArgs::default())?
        .filter(col("t_send_ns").gt_eq(lit(SKIP_S * 1_000_000_000)))
        .group_by([col("point")])
        .agg([
            len().alias("requests"),
            latency().mean().alias("mean"),
            quantile(0.25, "p25"),
            quantile(0.5, "median"),
            quantile(0.75, "p75"),
            quantile(0.90, "p90"),
            quantile(0.95, "p95"),
            quantile(0.99, "p99"),
            latency().max().alias("max"),
        ])
        .sort(["point"], SortMultipleOptions::default())
        .collect()?;
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "polars: {} rows of output, first median {:?}",
        summary.height(),
        summary.column("median")?.get(0)?
    );
    println!("polars {rows} {seconds:.3}");
    Ok(())
}
