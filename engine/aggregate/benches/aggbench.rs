//! Aggregation throughput: our `aggregate()` in every configuration a figure pipeline uses, read through the
//! `samples.by-thread` sidecars or (the same directories without them) through `samples.parquet`, against polars
//! doing the same work over the same Parquet files. Run through `bench/aggregate_100m.sh`, which runs each mode in
//! its own process under GNU time for the peak RSS.
//!
//! ```text
//! aggbench generate DIR POINTS ROWS_PER_POINT   # per point dir: samples.parquet + sidecar, by the client's writer
//! aggbench ours-MODE DIR                        # aggregate() with MODE's spec (below)
//! aggbench polars-MODE DIR                      # polars, lazily over the Parquet files, the same work
//! ```
//! Modes (and the pipeline that uses each):
//! `skip`   `skip_s: 10`: exact quantiles per point (the plain quantile path)
//! `all`    no cuts
//! `warmup` `skip_s: 10, drop_fraction: 0.25` (scalability_cpu.yaml, figure 16's CPU curves)
//! `fig16`  warmup + `cdf: {where: {m: 4096, clients: 28}, drop_fraction: 0.1}` + `blocks_ms: 50` (scalability.yaml)
//! `trace`  `stats: trace`, four functions, `piece: 512`: per (function, fragments) summary and CDF (azure_trace.yaml)
//!
//! Each prints `mode rows seconds`, timing the aggregation only (process start-up excluded).

use std::collections::BTreeMap;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::Instant;

use fracflow_aggregate::{AggregateSpec, Cell, PointSource, aggregate};
use fracflow_client::Sample;
use fracflow_record::by_thread::write_samples_by_thread;
use fracflow_record::{SAMPLES_FILE, SampleColumn};
use parquet::file::reader::{FileReader, SerializedFileReader};
use polars::prelude::*;
use rayon::prelude::*;

const CLIENTS: u64 = 28;
/// The run every point simulates: 30 s, of which the first 10 s are cut (`skip_s: 10`).
const RUN_NS: u64 = 30_000_000_000;
const SKIP_S: u64 = 10;
const WARMUP_DROP: f64 = 0.25;
const CDF_DROP: f64 = 0.1;
const CDF_POINTS: usize = 200;
const BLOCK_MS: u64 = 50;
/// A trace's fragment size (the request header is 64 bytes).
const PIECE: u32 = 512;
/// The points' `clients` and `m` labels cycle through these; the CDF is drawn for m = 4096 and 28 clients.
const CLIENT_LABELS: [u64; 6] = [1, 4, 8, 16, 20, 28];
const M_LABELS: [u64; 2] = [1024, 4096];

type BenchResult<T = ()> = Result<T, Box<dyn Error + Send + Sync>>;

/// The allocator of the `fracflow` binary, in which the aggregate node runs: what aggregation's allocations cost
/// there is what this measures (polars' too).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Skip,
    All,
    Warmup,
    Fig16,
    Trace,
}

impl Mode {
    fn parse(name: &str) -> Option<Mode> {
        Some(match name {
            "skip" => Mode::Skip,
            "all" => Mode::All,
            "warmup" => Mode::Warmup,
            "fig16" => Mode::Fig16,
            "trace" => Mode::Trace,
            _ => return None,
        })
    }

    fn spec(self) -> String {
        match self {
            Mode::Skip => format!(r#"{{"stats":"samples","skip_s":{SKIP_S}}}"#),
            Mode::All => r#"{"stats":"samples"}"#.to_owned(),
            Mode::Warmup => {
                format!(r#"{{"stats":"samples","skip_s":{SKIP_S},"drop_fraction":{WARMUP_DROP}}}"#)
            }
            Mode::Fig16 => format!(
                r#"{{"stats":"samples","skip_s":{SKIP_S},"drop_fraction":{WARMUP_DROP},
                    "cdf":{{"where":{{"m":4096,"clients":28}},"drop_fraction":{CDF_DROP},"points":{CDF_POINTS}}},
                    "blocks_ms":{BLOCK_MS}}}"#
            ),
            Mode::Trace => format!(
                r#"{{"stats":"trace","functions":{{"0":"Top-K","1":"Logit","2":"CNN","3":"Norm"}},"piece":{PIECE}}}"#
            ),
        }
    }
}

fn main() -> BenchResult {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["generate", dir, points, rows] => generate(Path::new(dir), points.parse()?, rows.parse()?),
        [mode, dir] => {
            let (who, name) = mode
                .split_once('-')
                .ok_or("a mode is ours-MODE or polars-MODE")?;
            let kind = Mode::parse(name).ok_or_else(|| format!("unknown mode {name}"))?;
            match who {
                "ours" => ours(Path::new(dir), mode, kind),
                "polars" => baseline(Path::new(dir), mode, kind),
                _ => Err(format!("unknown mode {mode}").into()),
            }
        }
        // `cargo bench` without arguments (e.g. in CI): nothing to measure without generated data.
        [] => {
            eprintln!(
                "usage: aggbench generate DIR POINTS ROWS_PER_POINT | (ours|polars)-(skip|all|warmup|fig16|trace) DIR"
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
    dirs.retain(|d| d.join(SAMPLES_FILE).is_file());
    dirs.sort();
    Ok(dirs)
}

/// One point's samples as the client holds them: thread after thread, each in seq order. A trace's groups:
/// the slot cycles through four functions, the request through one to eight 512-byte fragments.
fn point_samples(point: u64, rows_per_point: u64) -> Vec<Sample> {
    let rows_per_thread = rows_per_point.div_ceil(CLIENTS);
    let mut state = 0x5eed ^ point.wrapping_mul(0x1000_0000_01b3);
    let mut samples = Vec::with_capacity(rows_per_point as usize);
    for thread in 0..CLIENTS {
        let rows = rows_per_thread.min(rows_per_point.saturating_sub(thread * rows_per_thread));
        for seq in 0..rows {
            let last_piece = latency_ns(&mut state, thread);
            samples.push(Sample {
                thread: thread as u32,
                seq,
                t_send_ns: seq * RUN_NS / rows_per_thread,
                latency_ns: last_piece + 300,
                latency_last_piece_ns: last_piece,
                slot: (seq % 4) as u16,
                request_bytes: 64 + PIECE * (1 + (seq / 4 % 8) as u32),
                response_bytes: 64,
            });
        }
    }
    samples
}

/// Seconds `write` takes, the median of three.
fn median_of_three(write: &dyn Fn() -> BenchResult) -> BenchResult<f64> {
    let mut seconds = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        write()?;
        seconds.push(started.elapsed().as_secs_f64());
    }
    seconds.sort_by(f64::total_cmp);
    Ok(seconds[1])
}

/// What the client's write of one point costs per sample, against writing the Parquet file alone (the client
/// before the sidecar) and the sidecar alone; one point at a time, as the client writes after its run (never on
/// the request path).
fn write_costs(dir: &Path, rows_per_point: u64) -> BenchResult<String> {
    let samples = point_samples(0, rows_per_point);
    let (parquet, sidecar) = (dir.join("timing.parquet"), dir.join("timing.by-thread"));
    let before = median_of_three(&|| {
        Ok(fracflow_client::samples::write_parquet_alone(
            &parquet, &samples,
        )?)
    })?;
    let alone = median_of_three(&|| {
        write_samples_by_thread(&sidecar, &parquet, &samples, Sample::by_thread_row)?;
        Ok(())
    })?;
    let after =
        median_of_three(&|| Ok(fracflow_client::write_samples_parquet(&parquet, &samples)?))?;
    for file in [&parquet, &sidecar] {
        std::fs::remove_file(file)?;
    }
    let ns = |seconds: f64| seconds / rows_per_point as f64 * 1e9;
    Ok(format!(
        "the client's write of a point, per sample (median of 3): {:.0} ns, of which the Parquet file alone \
         takes {:.0} ns and the sidecar alone {:.0} ns",
        ns(after),
        ns(before),
        ns(alone)
    ))
}

/// Writes each point through the client's own writer.
fn generate(dir: &Path, points: u64, rows_per_point: u64) -> BenchResult {
    let costs = write_costs(dir, rows_per_point)?;
    let started = Instant::now();
    (0..points)
        .into_par_iter()
        .try_for_each(|point| -> BenchResult {
            let point_dir = dir.join(format!("point_{point:03}"));
            std::fs::create_dir_all(&point_dir)?;
            let samples = point_samples(point, rows_per_point);
            fracflow_client::write_samples_parquet(&point_dir.join(SAMPLES_FILE), &samples)?;
            Ok(())
        })?;
    println!(
        "generated {points} points × {rows_per_point} rows in {:.1} s; {costs}",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn total_rows(dirs: &[PathBuf]) -> BenchResult<u64> {
    dirs.iter().try_fold(0u64, |sum, dir| {
        let reader = SerializedFileReader::new(std::fs::File::open(dir.join(SAMPLES_FILE))?)?;
        Ok(sum + reader.metadata().file_metadata().num_rows() as u64)
    })
}

fn labels(index: usize) -> (u64, u64) {
    (
        M_LABELS[index / CLIENT_LABELS.len() % M_LABELS.len()],
        CLIENT_LABELS[index % CLIENT_LABELS.len()],
    )
}

/// Whether figure 16's CDF is drawn for the point.
fn wants_cdf(index: usize) -> bool {
    labels(index) == (4096, 28)
}

fn ours(dir: &Path, mode: &str, kind: Mode) -> BenchResult {
    let dirs = point_dirs(dir)?;
    let rows = total_rows(&dirs)?;
    let points: Vec<PointSource> = dirs
        .iter()
        .enumerate()
        .map(|(index, dir)| {
            let (m, clients) = labels(index);
            PointSource {
                labels: BTreeMap::from([
                    ("point".to_string(), Cell::Num(index as f64)),
                    ("m".to_string(), Cell::Num(m as f64)),
                    ("clients".to_string(), Cell::Num(clients as f64)),
                ]),
                dir: dir.clone(),
                member: None,
            }
        })
        .collect();
    let spec: AggregateSpec = serde_json::from_str(&kind.spec())?;
    let out = tempfile::tempdir()?;
    let started = Instant::now();
    let result = aggregate(&spec, &points, out.path())?;
    let seconds = started.elapsed().as_secs_f64();
    for note in &result.notes {
        eprintln!("{mode}: note: {note}");
    }
    let sizes: Vec<String> = result
        .tables
        .iter()
        .map(|(name, table)| format!("{name} {}", table.rows.len()))
        .collect();
    eprintln!(
        "{mode}: rows out: {}; first summary row {:?}",
        sizes.join(", "),
        result.tables["summary"].rows.first()
    );
    println!("{mode} {rows} {seconds:.3}");
    Ok(())
}

/// polars doing what `kind` asks of `aggregate`, the way one writes it in polars: a lazy scan of every file,
/// the cuts as filters and window slices, `group_by().agg()` for the statistics, and a sort per CDF.
fn baseline(dir: &Path, mode: &str, kind: Mode) -> BenchResult {
    let dirs = point_dirs(dir)?;
    let rows = total_rows(&dirs)?;
    let started = Instant::now();
    let scans: Vec<LazyFrame> = dirs
        .iter()
        .enumerate()
        .map(|(index, dir)| {
            let path = dir.join(SAMPLES_FILE);
            LazyFrame::scan_parquet(
                PlRefPath::new(path.to_string_lossy().into_owned()),
                ScanArgsParquet::default(),
            )
            .map(|scan| scan.with_column(lit(index as u32).alias("point")))
        })
        .collect::<Result<_, _>>()?;
    let latency_name = SampleColumn::LatencyLastPieceNs.name();
    let latency = || col(latency_name);
    let statistics = || {
        let quantile = |q: f64, name: &str| {
            latency()
                .quantile(lit(q), QuantileMethod::Nearest)
                .alias(name)
        };
        vec![
            len().alias("requests"),
            latency().mean().alias("mean"),
            quantile(0.25, "p25"),
            quantile(0.5, "median"),
            quantile(0.75, "p75"),
            quantile(0.90, "p90"),
            quantile(0.95, "p95"),
            quantile(0.99, "p99"),
            latency().max().alias("max"),
        ]
    };
    let all = concat(scans, UnionArgs::default())?;
    let skipped = || {
        all.clone()
            .filter(col("t_send_ns").gt_eq(lit(SKIP_S * 1_000_000_000)))
    };
    // The warm-up cut: per point and thread, in seq order, drop the first ⌊n · fraction⌋ rows.
    let warm = |fraction: f64, columns: &[&str]| {
        let kept = |name: &str| {
            col(name)
                .sort_by([col("seq")], SortMultipleOptions::default())
                .slice(
                    (len().cast(DataType::Float64) * lit(fraction)).cast(DataType::Int64),
                    len(),
                )
        };
        skipped()
            .group_by([col("point"), col("thread")])
            .agg(columns.iter().map(|name| kept(name)).collect::<Vec<_>>())
            .explode(
                cols(columns.iter().copied()),
                ExplodeOptions {
                    empty_as_null: false,
                    keep_nulls: false,
                },
            )
    };
    let by_point = |frame: LazyFrame, extra: &[&str]| {
        let mut keys = vec![col("point")];
        keys.extend(extra.iter().map(|name| col(*name)));
        let mut order = vec!["point".to_owned()];
        order.extend(extra.iter().map(|name| name.to_string()));
        frame
            .group_by(keys)
            .agg(statistics())
            .sort(order, SortMultipleOptions::default())
    };
    let mut out_rows = Vec::new();
    match kind {
        Mode::Skip => out_rows.push(by_point(skipped(), &[]).collect()?.height()),
        Mode::All => out_rows.push(by_point(all.clone(), &[]).collect()?.height()),
        Mode::Warmup => out_rows.push(
            by_point(warm(WARMUP_DROP, &[latency_name]), &[])
                .collect()?
                .height(),
        ),
        Mode::Fig16 => {
            let kept = warm(WARMUP_DROP, &[latency_name, "t_send_ns"]).cache();
            out_rows.push(by_point(kept.clone(), &[]).collect()?.height());
            let blocks =
                kept.with_column((col("t_send_ns") / lit(BLOCK_MS * 1_000_000)).alias("block"));
            out_rows.push(by_point(blocks, &["block"]).collect()?.height());
            let cdf_points = (0..dirs.len())
                .filter(|&i| wants_cdf(i))
                .map(|i| col("point").eq(lit(i as u32)))
                .reduce(|a, b| a.or(b))
                .unwrap_or(lit(false));
            let cdf = warm(CDF_DROP, &[latency_name])
                .filter(cdf_points)
                .group_by([col("point")])
                .agg([latency().sort(SortOptions::default())])
                .collect()?;
            out_rows.push(cdf_rows(&cdf, latency_name)?);
        }
        Mode::Trace => {
            let grouped = all
                .clone()
                .with_column(
                    ((col("request_bytes").cast(DataType::Int64) - lit(64))
                        / lit(i64::from(PIECE)))
                    .alias("fragments"),
                )
                .group_by([col("point"), col("slot"), col("fragments")])
                .agg(
                    statistics()
                        .into_iter()
                        .chain([latency().sort(SortOptions::default())])
                        .collect::<Vec<_>>(),
                )
                .sort(
                    ["point", "slot", "fragments"],
                    SortMultipleOptions::default(),
                )
                .collect()?;
            out_rows.push(grouped.height());
            out_rows.push(cdf_rows(&grouped, latency_name)?);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("{mode}: rows out {out_rows:?}");
    println!("{mode} {rows} {seconds:.3}");
    Ok(())
}

/// The CDF rows of each group's sorted latencies (a list column): the value at rank ⌈i·n/points⌉ − 1.
fn cdf_rows(frame: &DataFrame, column: &str) -> BenchResult<usize> {
    let mut rows = 0;
    let lists = frame.column(column)?.list()?;
    for sorted in (0..lists.len()).filter_map(|i| lists.get_as_series(i)) {
        let sorted = sorted.u64()?;
        let n = sorted.len();
        for i in 1..=CDF_POINTS {
            let rank = (i * n).div_ceil(CDF_POINTS);
            if rank > 0 && sorted.get(rank - 1).is_some() {
                rows += 1;
            }
        }
    }
    Ok(rows)
}
