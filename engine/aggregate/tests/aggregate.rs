//! The crate's one integration test binary (each binary links polars, so they are modules here): statistics
//! against hand-computed values, exports read back, every expectation claim, and bad inputs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, UInt32Array, UInt64Array};
use fracflow_aggregate::{
    AggregateSpec, Cell, Expectation, PointSource, Table, aggregate, evaluate, read_table,
};
use fracflow_record::samples::samples_schema;
use fracflow_record::{METRICS_FILE, MetricsRecord, SAMPLES_FILE, SampleColumn};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// One row of `samples.parquet`; `latency_ns` (from send) is always `last_piece_ns + 500`.
#[derive(Clone, Copy)]
struct Sample {
    thread: u32,
    seq: u64,
    t_send_ns: u64,
    last_piece_ns: u64,
    slot: u32,
    request_bytes: u32,
}

fn sample(thread: u32, seq: u64, t_send_ns: u64, last_piece_ns: u64) -> Sample {
    Sample {
        thread,
        seq,
        t_send_ns,
        last_piece_ns,
        slot: 0,
        request_bytes: 1088,
    }
}

/// Writes `samples` in the schema record defines, `row_group_rows` rows per row group (the client's writer
/// cannot choose row groups, which the statistics-skipping tests need).
fn write_samples(dir: &Path, samples: &[Sample], row_group_rows: usize) -> TestResult {
    std::fs::create_dir_all(dir)?;
    let schema = Arc::new(samples_schema());
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(row_group_rows))
        .build();
    let file = std::fs::File::create(dir.join(SAMPLES_FILE))?;
    let mut writer = ArrowWriter::try_new(file, Arc::clone(&schema), Some(props))?;
    for chunk in samples.chunks(row_group_rows) {
        let u32c = |f: fn(&Sample) -> u32| -> ArrayRef {
            Arc::new(UInt32Array::from_iter_values(chunk.iter().map(f)))
        };
        let u64c = |f: fn(&Sample) -> u64| -> ArrayRef {
            Arc::new(UInt64Array::from_iter_values(chunk.iter().map(f)))
        };
        let columns = SampleColumn::ALL
            .iter()
            .map(|column| match column {
                SampleColumn::Thread => u32c(|s| s.thread),
                SampleColumn::Seq => u64c(|s| s.seq),
                SampleColumn::TSendNs => u64c(|s| s.t_send_ns),
                SampleColumn::LatencyNs => u64c(|s| s.last_piece_ns + 500),
                SampleColumn::LatencyLastPieceNs => u64c(|s| s.last_piece_ns),
                SampleColumn::Slot => u32c(|s| s.slot),
                SampleColumn::RequestBytes => u32c(|s| s.request_bytes),
                SampleColumn::ResponseBytes => u32c(|_| 64),
            })
            .collect();
        let batch = RecordBatch::try_new(Arc::clone(&schema), columns)?;
        writer.write(&batch)?;
        writer.flush()?;
    }
    writer.close()?;
    Ok(())
}

fn labels(pairs: &[(&str, Cell)]) -> BTreeMap<String, Cell> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn text(t: &str) -> Cell {
    Cell::Text(t.to_string())
}

fn num(v: f64) -> Cell {
    Cell::Num(v)
}

fn spec(json: &str) -> Result<AggregateSpec, serde_json::Error> {
    serde_json::from_str(json)
}

/// The cell of the row whose cells match `key` (column, value) pairs.
fn cell<'a>(table: &'a Table, key: &[(&str, Cell)], column: &str) -> &'a Cell {
    let row = (0..table.rows.len())
        .find(|&row| key.iter().all(|(c, v)| table.get(row, c) == Some(v)))
        .unwrap_or_else(|| panic!("no row {key:?} in {:?}", table.rows));
    table
        .get(row, column)
        .unwrap_or_else(|| panic!("no column {column}"))
}

fn value(table: &Table, key: &[(&str, Cell)], column: &str) -> f64 {
    cell(table, key, column)
        .as_f64()
        .unwrap_or_else(|| panic!("{column} is not a number"))
}

fn assert_close(actual: f64, expected: f64) {
    assert!(
        (actual - expected).abs() <= 1e-9 * expected.abs().max(1.0),
        "{actual} != {expected}"
    );
}

fn point(dir: PathBuf, pairs: &[(&str, Cell)]) -> PointSource {
    PointSource {
        labels: labels(pairs),
        dir,
        member: None,
    }
}

/// Every table of an aggregation reads back equal from both exports: the Parquet file with its label columns,
/// the CSV file (which has no place for them) without.
fn assert_exports_round_trip(out: &Path, tables: &BTreeMap<String, Table>) -> TestResult {
    for (name, table) in tables {
        assert!(table.labels.is_some(), "{name} says which are its labels");
        let parquet = read_table(&out.join(format!("{name}.parquet")))?;
        assert_eq!(&parquet, table, "{name}.parquet");
        let csv = read_table(&out.join(format!("{name}.csv")))?;
        let unlabelled = Table {
            labels: None,
            ..table.clone()
        };
        assert_eq!(csv, unlabelled, "{name}.csv");
    }
    Ok(())
}

/// Every file under `dir` (recursively) that holds unit tests.
fn files_with_unit_tests(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            found.extend(files_with_unit_tests(&path)?);
        } else if std::fs::read_to_string(&path)?.contains("#[cfg(test)]") {
            found.push(path);
        }
    }
    Ok(found)
}

/// The library target has `test = false` (Cargo.toml), so unit tests in `src/` would silently never run.
#[test]
fn the_library_holds_no_unit_tests_that_would_not_run() -> TestResult {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = files_with_unit_tests(&src)?;
    assert!(
        found.is_empty(),
        "unit tests in {found:?} do not run (the lib has `test = false`); write them in tests/aggregate.rs"
    );
    Ok(())
}

mod seconds {
    use super::*;

    fn write_seconds(dir: &Path, lines: &[&str]) -> TestResult {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("seconds.jsonl"), lines.join("\n") + "\n")?;
        Ok(())
    }

    /// One line with a single thread whose average is `avg_us`.
    fn one_thread(dir: &Path, avg_us: f64) -> TestResult {
        let line = format!(
            r#"{{"second":0,"threads":[{{"thread":0,"count":1,"sum_ns":{}}}],"write_gbps":1.0}}"#,
            (avg_us * 1e3).round() as u64
        );
        write_seconds(dir, &[&line])
    }

    #[test]
    fn per_second_statistics_sum_members_and_cut_early_seconds() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("p");
        write_seconds(
            &dir,
            &[
                // second 0 is before from_s = 1: ignored entirely.
                r#"{"second":0,"latency":"last_piece","threads":[{"thread":0,"count":10,"sum_ns":100000}],"write_gbps":1.0}"#,
                // member 0 (implicit): averages 20000/2 = 10 µs and 48000/4 = 12 µs; an unknown field is ignored.
                r#"{"second":1,"latency":"last_piece","threads":[{"thread":0,"count":2,"sum_ns":20000,"p50_ns":1},{"thread":1,"count":4,"sum_ns":48000}],"count":6,"write_gbps":40.0,"read_gbps":0.5,"extra":[1]}"#,
                // 14 µs, and a thread without requests (skipped).
                r#"{"second":2,"threads":[{"thread":0,"count":1,"sum_ns":14000},{"thread":1,"count":0,"sum_ns":0}],"write_gbps":42.0,"member":0}"#,
                r#"{"second":1,"member":1,"threads":[{"thread":2,"count":5,"sum_ns":80000}],"write_gbps":45.0}"#,
                r#"{"second":2,"member":1,"threads":[{"thread":2,"count":2,"sum_ns":36000}],"write_gbps":46.0}"#,
            ],
        )?;
        let out = tmp.path().join("out");
        let result = aggregate(
            &spec(r#"{"stats":"seconds","from_s":1}"#)?,
            &[point(
                dir,
                &[("series", text("fRAC")), ("clients", num(3.0))],
            )],
            &out,
        )?;
        let summary = &result.tables["summary"];
        assert_eq!(
            summary.columns,
            [
                "clients",
                "series",
                "throughput_gbps",
                "mean_us",
                "std_us",
                "p25_us",
                "median_us",
                "p75_us",
                "values",
                "requests"
            ]
        );
        let key = [("series", text("fRAC"))];
        // Per-second totals: 40 + 45 = 85 and 42 + 46 = 88 Gb/s → mean 86.5.
        assert_close(value(summary, &key, "throughput_gbps"), 86.5);
        // Averages 10, 12, 14, 16, 18 µs: mean 14, sample variance (16+4+0+4+16)/4 = 10,
        // nearest ranks round(4·q): p25 → rank 1 = 12, median → rank 2 = 14, p75 → rank 3 = 16.
        assert_close(value(summary, &key, "mean_us"), 14.0);
        assert_close(value(summary, &key, "std_us"), 10f64.sqrt());
        assert_close(value(summary, &key, "p25_us"), 12.0);
        assert_close(value(summary, &key, "median_us"), 14.0);
        assert_close(value(summary, &key, "p75_us"), 16.0);
        assert_close(value(summary, &key, "values"), 5.0);
        // 2 + 4 + 1 + 5 + 2 requests in seconds 1 and 2.
        assert_close(value(summary, &key, "requests"), 14.0);
        assert_exports_round_trip(&out, &result.tables)
    }

    #[test]
    fn derive_scales_the_base_row_and_sublinear_holds_on_measured_rows() -> TestResult {
        let tmp = tempfile::tempdir()?;
        // Means: f=1: 10, 13, 16 µs at X = 1024, 2048, 4096; f=3: 20, 50 µs at X = 1024, 4096.
        let measured = [
            (1.0, 1024.0, 10.0),
            (1.0, 2048.0, 13.0),
            (1.0, 4096.0, 16.0),
            (3.0, 1024.0, 20.0),
            (3.0, 4096.0, 50.0),
        ];
        let mut points = Vec::new();
        for (f, x, mean) in measured {
            let dir = tmp.path().join(format!("f{f}_x{x}"));
            one_thread(&dir, mean)?;
            points.push(point(dir, &[("f", num(f)), ("X", num(x))]));
        }
        let out = tmp.path().join("out");
        let result = aggregate(
            &spec(
                r#"{"stats":"seconds","derive":[{"scale_by":{"column":"X","base":1024,"factor_column":"pieces"}}]}"#,
            )?,
            &points,
            &out,
        )?;
        let summary = &result.tables["summary"];
        assert_eq!(summary.rows.len(), 8, "5 measured + 3 computed rows");
        assert_eq!(summary.columns.last().map(String::as_str), Some("pieces"));
        let row = |f: f64, x: f64, computed: f64| {
            [("f", num(f)), ("X", num(x)), ("computed", num(computed))]
        };
        // Measured rows keep their values, pieces = X/1024.
        assert_close(value(summary, &row(1.0, 2048.0, 0.0), "mean_us"), 13.0);
        assert_close(value(summary, &row(1.0, 4096.0, 0.0), "pieces"), 4.0);
        // Computed: base mean × X/1024; other statistics null.
        assert_close(value(summary, &row(1.0, 2048.0, 1.0), "mean_us"), 20.0);
        assert_close(value(summary, &row(1.0, 4096.0, 1.0), "mean_us"), 40.0);
        assert_close(value(summary, &row(1.0, 4096.0, 1.0), "pieces"), 4.0);
        assert_close(value(summary, &row(3.0, 4096.0, 1.0), "mean_us"), 80.0);
        assert_eq!(
            cell(summary, &row(3.0, 4096.0, 1.0), "median_us"),
            &Cell::Null
        );
        assert_exports_round_trip(&out, &result.tables)?;

        // 13/10 = 1.3 < 2, 16/10 = 1.6 < 4, 50/20 = 2.5 < 4: sub-linear; the computed rows (exactly linear,
        // which would fail the strict `<`) are left out.
        let claim: Vec<Expectation> = serde_json::from_str(
            r#"[{"name":"sub-linear","sublinear":{"x":"pieces","y":"mean_us","by":["f"]}}]"#,
        )?;
        let verdicts = evaluate(&claim, &result.tables, None);
        assert!(verdicts[0].passed(), "{verdicts:?}");
        assert!(
            verdicts[0]
                .measured
                .contains("f=3: mean_us ×2.500 at pieces ×4"),
            "{}",
            verdicts[0].measured
        );
        Ok(())
    }

    #[test]
    fn compare_adds_deltas_against_the_baseline_series_in_row_order() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let medians = [
            ("Transport", 1.0, 7.0),
            ("Transport+fRAC", 1.0, 7.25),
            ("Transport", 4.0, 7.5),
            ("Transport+fRAC", 4.0, 7.625),
        ];
        let mut points = Vec::new();
        for (series, n, median) in medians {
            let dir = tmp.path().join(format!("{series}_{n}"));
            one_thread(&dir, median)?;
            points.push(point(dir, &[("series", text(series)), ("n", num(n))]));
        }
        let out = tmp.path().join("out");
        let result = aggregate(
            &spec(
                r#"{"stats":"seconds","compare":{"column":"series","baseline":"Transport","on":["n"],"values":["median_us","mean_us"]}}"#,
            )?,
            &points,
            &out,
        )?;
        let summary = &result.tables["summary"];
        let deltas: Vec<Option<f64>> = (0..4)
            .map(|row| summary.get(row, "delta_median_us").and_then(Cell::as_f64))
            .collect();
        // Rows stay in point order; baseline rows get 0, fRAC 7.25 − 7 and 7.625 − 7.5.
        assert_eq!(deltas, [Some(0.0), Some(0.25), Some(0.0), Some(0.125)]);
        assert_eq!(summary.get(1, "delta_mean_us"), Some(&num(0.25)));
        // One value per point: the sample std is undefined (null) and survives both exports as null.
        assert_eq!(summary.get(0, "std_us"), Some(&Cell::Null));
        assert_exports_round_trip(&out, &result.tables)?;

        let claims: Vec<Expectation> = serde_json::from_str(
            r#"[{"name":"within","where":{"series":"Transport+fRAC"},"within":{"column":"delta_median_us","limit":0.3}},
                {"name":"too tight","where":{"series":"Transport+fRAC"},"within":{"column":"delta_median_us","limit":0.2}}]"#,
        )?;
        let verdicts = evaluate(&claims, &result.tables, None);
        assert!(verdicts[0].passed(), "{verdicts:?}");
        assert!(!verdicts[1].passed(), "{verdicts:?}");
        assert!(
            verdicts[1]
                .measured
                .contains("delta_median_us 0.250 (limit ±0.200) at n=1 ✗"),
            "{}",
            verdicts[1].measured
        );
        Ok(())
    }
}

mod samples {
    use super::*;

    /// Thread 0 sends seq s at s seconds with latency (s+1) µs; thread 1 sends seqs 0..5 at 2 s with
    /// latency 10·s µs. With skip_s = 2, thread 0 keeps seqs 2..=7 (6 samples) and thread 1 all 5; the
    /// 0.5 warm-up cut drops ⌊6·0.5⌋ = 3 and ⌊5·0.5⌋ = 2 of them, leaving thread 0's 6, 7, 8 µs and
    /// thread 1's 20, 30, 40 µs.
    fn warm_up_samples() -> Vec<Sample> {
        let mut thread0: Vec<Sample> = (0..8)
            .map(|s| sample(0, s, s * 1_000_000_000, (s + 1) * 1000))
            .collect();
        let mut thread1: Vec<Sample> = (0..5)
            .map(|s| sample(1, s, 2_000_000_000 + s, s * 10_000))
            .collect();
        // Interleave the threads as concurrent clients would.
        let mut rows = Vec::new();
        while !thread0.is_empty() || !thread1.is_empty() {
            for thread in [&mut thread0, &mut thread1] {
                if !thread.is_empty() {
                    rows.push(thread.remove(0));
                }
            }
        }
        rows
    }

    /// The one schema in use: what the client's writer (the measure node's and the fperf adapter's) leaves is
    /// what this reader reads, both latencies from their own columns.
    #[test]
    fn a_file_the_client_writes_is_read_with_the_same_schema() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("client");
        std::fs::create_dir_all(&dir)?;
        let written: Vec<fracflow_client::Sample> = (0..10u32)
            .map(|i| fracflow_client::Sample {
                thread: i % 2,
                seq: u64::from(i / 2),
                t_send_ns: u64::from(i) * 1_000_000_000,
                latency_ns: u64::from(i + 1) * 2_000,
                latency_last_piece_ns: u64::from(i + 1) * 1_000,
                slot: 1,
                request_bytes: 64 + 512 * (i % 3),
                response_bytes: 64,
            })
            .collect();
        fracflow_client::write_samples_parquet(&dir.join(SAMPLES_FILE), &written)?;
        let points = [point(dir, &[("series", text("client"))])];
        for (latency, median_us, max_us) in [("last_piece", 6.0, 10.0), ("from_send", 12.0, 20.0)] {
            let result = aggregate(
                &spec(&format!(
                    r#"{{"stats":"samples","skip_s":0,"latency":"{latency}"}}"#
                ))?,
                &points,
                &tmp.path().join(latency),
            )?;
            let summary = &result.tables["summary"];
            let key = [("series", text("client"))];
            assert_eq!(value(summary, &key, "requests"), 10.0, "{latency}");
            assert_close(value(summary, &key, "median_us"), median_us);
            assert_close(value(summary, &key, "max_us"), max_us);
        }
        // A trace groups by the slot and request size columns the client wrote.
        let result = aggregate(
            &spec(r#"{"stats":"trace","functions":{"1":"Logit"}}"#)?,
            &points,
            &tmp.path().join("trace"),
        )?;
        let fragments: Vec<String> = result.tables["summary"]
            .rows
            .iter()
            .filter_map(|row| row.get(result.tables["summary"].column("fragments")?))
            .map(Cell::label)
            .collect();
        assert_eq!(fragments, ["0", "1", "2"]);
        Ok(())
    }

    #[test]
    fn skip_and_warm_up_cuts_then_nearest_rank_quantiles() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let ordered = tmp.path().join("ordered");
        write_samples(&ordered, &warm_up_samples(), 3)?;
        // The same samples with each thread's rows out of seq order: the exact path must cut by seq.
        let shuffled = tmp.path().join("shuffled");
        let mut rows = warm_up_samples();
        rows.reverse();
        rows.swap(0, 5);
        write_samples(&shuffled, &rows, 4)?;
        let points = [
            point(ordered, &[("series", text("in order"))]),
            point(shuffled, &[("series", text("shuffled"))]),
        ];
        let out = tmp.path().join("out");
        let result = aggregate(
            &spec(r#"{"stats":"samples","skip_s":2,"drop_fraction":0.5}"#)?,
            &points,
            &out,
        )?;
        let summary = &result.tables["summary"];
        assert_eq!(
            summary.columns,
            [
                "series",
                "requests",
                "mean_us",
                "p25_us",
                "median_us",
                "p75_us",
                "p90_us",
                "p95_us",
                "p99_us",
                "max_us",
                "method"
            ]
        );
        for series in ["in order", "shuffled"] {
            let key = [("series", text(series))];
            // Kept: 6, 7, 8, 20, 30, 40 µs; mean 111/6 = 18.5. Ranks round(5·q): p25 1.25 → 1 (7),
            // median 2.5 → 3 (20, halves round away from zero), p75 3.75 → 4 (30), p90/p95/p99 → 5 (40).
            assert_close(value(summary, &key, "requests"), 6.0);
            assert_close(value(summary, &key, "mean_us"), 18.5);
            assert_close(value(summary, &key, "p25_us"), 7.0);
            assert_close(value(summary, &key, "median_us"), 20.0);
            assert_close(value(summary, &key, "p75_us"), 30.0);
            assert_close(value(summary, &key, "p90_us"), 40.0);
            assert_close(value(summary, &key, "p99_us"), 40.0);
            assert_close(value(summary, &key, "max_us"), 40.0);
            assert_eq!(cell(summary, &key, "method"), &text("exact"));
        }
        assert!(!result.tables.contains_key("cdf"), "no cdf unless asked");
        assert_exports_round_trip(&out, &result.tables)?;

        // The from-send latency is 0.5 µs longer on every sample.
        let from_send = aggregate(
            &spec(r#"{"stats":"samples","skip_s":2,"drop_fraction":0.5,"latency":"from_send"}"#)?,
            &points,
            &tmp.path().join("out2"),
        )?;
        assert_close(
            value(
                &from_send.tables["summary"],
                &[("series", text("shuffled"))],
                "median_us",
            ),
            20.5,
        );

        // The send-time cut alone keeps thread 0's 3..=8 µs and thread 1's 0, 10, 20, 30, 40 µs: 11 values,
        // sum 133; sorted 0 3 4 5 6 7 8 10 20 30 40, median rank round(10·0.5) = 5 → 7 µs.
        let skip_only = aggregate(
            &spec(r#"{"stats":"samples","skip_s":2}"#)?,
            &points,
            &tmp.path().join("out3"),
        )?;
        for series in ["in order", "shuffled"] {
            let key = [("series", text(series))];
            let summary = &skip_only.tables["summary"];
            assert_close(value(summary, &key, "requests"), 11.0);
            assert_close(value(summary, &key, "mean_us"), 133.0 / 11.0);
            assert_close(value(summary, &key, "median_us"), 7.0);
        }
        Ok(())
    }

    /// A fixed pseudo-random sequence (splitmix64) from `seed`, so that a failure repeats.
    fn splitmix64(seed: u64) -> impl FnMut() -> u64 {
        let mut state = seed;
        move || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let z = (state ^ (state >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
    }

    /// The selection (bucket counts, then selection inside the target buckets) agrees with sorting, both for a
    /// spread of latencies and when one huge outlier squeezes almost every value into one bucket.
    #[test]
    fn exact_quantiles_equal_the_sorted_nearest_ranks() -> TestResult {
        let mut next = splitmix64(7);
        for outlier in [None, Some(5_000_000_000u64), Some(u64::MAX - 1000)] {
            let tmp = tempfile::tempdir()?;
            let dir = tmp.path().join("p");
            let mut latencies: Vec<u64> = (0..50_001).map(|_| 8_000 + next() % 40_000).collect();
            if let Some(outlier) = outlier {
                latencies[123] = outlier;
            }
            let rows: Vec<Sample> = latencies
                .iter()
                .enumerate()
                .map(|(i, &l)| sample((i % 7) as u32, i as u64, 0, l))
                .collect();
            write_samples(&dir, &rows, 8192)?;
            let result = aggregate(
                &spec(r#"{"stats":"samples"}"#)?,
                &[point(dir, &[])],
                &tmp.path().join("out"),
            )?;
            latencies.sort_unstable();
            assert_sorted_ranks(
                &result.tables["summary"],
                0,
                &latencies,
                &format!("outlier {outlier:?}"),
            );
        }
        Ok(())
    }

    /// A point above the size where the selection counts over the whole range of its values' type (2^18), with
    /// and without a CDF: a summary's six ranks alone are found by comparing each value with the target buckets'
    /// ranges, with a CDF's hundred by a table from bucket to target. Both agree with sorting, with values at 0
    /// and near the top of u64.
    #[test]
    fn a_large_points_quantiles_and_cdf_equal_the_sorted_ranks() -> TestResult {
        let mut next = splitmix64(11);
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("p");
        let n = (1 << 18) + 4_321;
        // Every magnitude from 1 µs to 1 s, so that ranks land in buckets of many widths.
        let mut latencies: Vec<u64> = (0..n)
            .map(|_| 1_000 + (next() >> (34 + next() % 30)))
            .collect();
        latencies[5] = 0;
        latencies[77] = u64::MAX - 1_000;
        let rows: Vec<Sample> = latencies
            .iter()
            .enumerate()
            .map(|(i, &l)| sample((i % 5) as u32, i as u64, 0, l))
            .collect();
        write_samples(&dir, &rows, 65_536)?;
        let summary_only = aggregate(
            &spec(r#"{"stats":"samples"}"#)?,
            &[point(dir.clone(), &[])],
            &tmp.path().join("out"),
        )?;
        let points = 100;
        let result = aggregate(
            &spec(r#"{"stats":"samples","cdf":{"points":100}}"#)?,
            &[point(dir, &[])],
            &tmp.path().join("out-cdf"),
        )?;
        latencies.sort_unstable();
        assert_sorted_ranks(&summary_only.tables["summary"], 0, &latencies, "summary");
        assert_sorted_ranks(
            &result.tables["summary"],
            0,
            &latencies,
            "summary with a CDF",
        );
        let cdf = &result.tables["cdf"];
        assert_eq!(cdf.rows.len(), points);
        for (i, row) in cdf.rows.iter().enumerate() {
            // Rank ⌈(i + 1)·n/points⌉, 1-based.
            let rank = ((i + 1) * n).div_ceil(points);
            assert_eq!(
                row[cdf
                    .columns
                    .iter()
                    .position(|c| c == "latency_us")
                    .ok_or("no latency_us")?],
                num(latencies[rank - 1] as f64 / 1e3),
                "CDF point {i}"
            );
        }
        Ok(())
    }

    /// Each block's quantiles (selected in place, block by block) agree with sorting the block's values, with
    /// many repeated values, blocks of one value and blocks whose rows come from several threads.
    #[test]
    fn block_quantiles_equal_the_sorted_nearest_ranks() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("p");
        let block_ns = 10_000_000u64;
        // Thread t sends every (t + 1) µs for 95 ms; a last thread sends once, alone in a later block.
        let mut rows = Vec::new();
        for thread in 0..5u32 {
            let step = u64::from(thread + 1) * 1_000;
            for seq in 0..95_000_000 / step {
                let latency = 5_000 + (seq * 7_919 + u64::from(thread) * 104_729) % 3_001 / 3 * 3;
                rows.push(sample(thread, seq, seq * step, latency));
            }
        }
        rows.push(sample(9, 0, 120_000_000, 123_456));
        write_samples(&dir, &rows, 8192)?;
        let result = aggregate(
            &spec(r#"{"stats":"samples","blocks_ms":10}"#)?,
            &[point(dir, &[])],
            &tmp.path().join("out"),
        )?;
        let mut expected: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for row in &rows {
            expected
                .entry(row.t_send_ns / block_ns)
                .or_default()
                .push(row.last_piece_ns);
        }
        let blocks = &result.tables["blocks"];
        assert_eq!(blocks.rows.len(), expected.len());
        for (row, (block, mut values)) in expected.into_iter().enumerate() {
            values.sort_unstable();
            assert_eq!(blocks.get(row, "block_ms"), Some(&num((block * 10) as f64)));
            assert_eq!(blocks.get(row, "requests"), Some(&num(values.len() as f64)));
            assert_sorted_ranks(blocks, row, &values, &format!("block {block}"));
        }
        Ok(())
    }

    /// Row `row` of `table` has the quantiles (nearest rank, round((n−1)·q)) and the maximum of `sorted`, in µs.
    fn assert_sorted_ranks(table: &Table, row: usize, sorted: &[u64], context: &str) {
        let n = sorted.len();
        for (column, q) in [
            ("p25_us", 0.25),
            ("median_us", 0.5),
            ("p75_us", 0.75),
            ("p90_us", 0.9),
            ("p95_us", 0.95),
            ("p99_us", 0.99),
        ] {
            let expected = sorted[((n - 1) as f64 * q).round() as usize] as f64 / 1e3;
            assert_eq!(
                table.get(row, column),
                Some(&num(expected)),
                "{column}, {context}"
            );
        }
        assert_eq!(
            table.get(row, "max_us"),
            Some(&num(sorted[n - 1] as f64 / 1e3)),
            "max_us, {context}"
        );
    }

    #[test]
    fn histogram_path_matches_exact_within_a_tenth_of_a_percent() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("p");
        // Thread 0: 1001 warm-up samples of 1 s (seq 0..=1000) then 1001 samples of 1..=1001 µs; the 0.5 cut
        // drops ⌊2002·0.5⌋ = 1001, the warm-up. 600 samples of thread 1 sent before skip_s (t_send 0) go
        // first: the first row group (500 rows) is pruned by its statistics, the second is cut row by row.
        let mut rows: Vec<Sample> = (0..600).map(|i| sample(1, i, 0, 5_000_000_000)).collect();
        rows.extend((0..2002).map(|s| {
            let latency = if s < 1001 {
                1_000_000_000
            } else {
                (s - 1000) * 1000
            };
            sample(0, s, 3_000_000_000 + s, latency)
        }));
        write_samples(&dir, &rows, 500)?;
        let points = [point(dir, &[("m", num(1024.0))])];
        let exact = aggregate(
            &spec(r#"{"stats":"samples","skip_s":1,"drop_fraction":0.5}"#)?,
            &points,
            &tmp.path().join("a"),
        )?;
        let hdr = aggregate(
            &spec(r#"{"stats":"samples","skip_s":1,"drop_fraction":0.5,"exact_max_samples":100}"#)?,
            &points,
            &tmp.path().join("b"),
        )?;
        let (exact, hdr) = (&exact.tables["summary"], &hdr.tables["summary"]);
        let key = [("m", num(1024.0))];
        assert_eq!(cell(hdr, &key, "method"), &text("hdr-3-digits"));
        // Exact: n = 1001, median rank round(1000·0.5) = 500 → 501 µs; p99 rank 990 → 991 µs.
        assert_close(value(exact, &key, "median_us"), 501.0);
        assert_close(value(exact, &key, "p99_us"), 991.0);
        for column in [
            "p25_us",
            "median_us",
            "p75_us",
            "p90_us",
            "p95_us",
            "p99_us",
        ] {
            let (e, h) = (value(exact, &key, column), value(hdr, &key, column));
            assert!(
                (h - e).abs() <= e * 1e-3 + 1e-3,
                "{column}: hdr {h} vs exact {e}"
            );
        }
        // Count, mean and max stay exact: mean of 1..=1001 is 501.
        for column in ["requests", "mean_us", "max_us"] {
            assert_close(value(hdr, &key, column), value(exact, &key, column));
        }
        assert_close(value(hdr, &key, "mean_us"), 501.0);
        Ok(())
    }

    #[test]
    fn cdf_only_for_matching_points_with_its_own_warm_up_cut() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let mut points = Vec::new();
        for m in [1024.0, 4096.0] {
            let dir = tmp.path().join(format!("m{m}"));
            // One thread, 1..=8 µs in seq order.
            let rows: Vec<Sample> = (0..8).map(|s| sample(0, s, s, (s + 1) * 1000)).collect();
            write_samples(&dir, &rows, 8)?;
            points.push(point(dir, &[("m", num(m)), ("clients", num(28.0))]));
        }
        let out = tmp.path().join("out");
        let result = aggregate(
            &spec(
                r#"{"stats":"samples","drop_fraction":0.5,"cdf":{"where":{"m":4096,"clients":"28"},"drop_fraction":0,"points":4}}"#,
            )?,
            &points,
            &out,
        )?;
        // The summary drops ⌊8·0.5⌋ = 4: 5..=8 µs, median rank round(1.5) = 2 → 7 µs.
        assert_close(
            value(
                &result.tables["summary"],
                &[("m", num(1024.0))],
                "median_us",
            ),
            7.0,
        );
        let cdf = &result.tables["cdf"];
        assert_eq!(cdf.columns, ["clients", "m", "latency_us", "fraction"]);
        // Only m = 4096, all 8 samples (the cdf's own cut is 0): ranks ⌈i·8/4⌉ − 1 = 1, 3, 5, 7.
        let pairs: Vec<(Cell, Cell, Cell)> = cdf
            .rows
            .iter()
            .map(|r| (r[1].clone(), r[2].clone(), r[3].clone()))
            .collect();
        assert_eq!(
            pairs,
            [
                (num(4096.0), num(2.0), num(0.25)),
                (num(4096.0), num(4.0), num(0.5)),
                (num(4096.0), num(6.0), num(0.75)),
                (num(4096.0), num(8.0), num(1.0)),
            ]
        );
        assert_exports_round_trip(&out, &result.tables)
    }

    /// The CDF and blocks tables are returned as their exports read back without reading them: a label column
    /// holding both numbers and text is text in every row of them, as in the summary.
    #[test]
    fn a_label_of_numbers_and_text_is_text_in_every_table() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let mut points = Vec::new();
        for (name, run) in [("a", num(7.0)), ("b", text("azure"))] {
            let dir = tmp.path().join(name);
            let rows: Vec<Sample> = (0..8)
                .map(|s| sample(0, s, s * 5_000_000, (s + 1) * 1000))
                .collect();
            write_samples(&dir, &rows, 8)?;
            points.push(point(dir, &[("run", run)]));
        }
        let out = tmp.path().join("out");
        let result = aggregate(
            &spec(r#"{"stats":"samples","blocks_ms":10,"cdf":{"points":2}}"#)?,
            &points,
            &out,
        )?;
        for name in ["summary", "cdf", "blocks"] {
            let table = &result.tables[name];
            let run = table
                .columns
                .iter()
                .position(|c| c == "run")
                .expect("a run column");
            let runs: Vec<&Cell> = table.rows.iter().map(|row| &row[run]).collect();
            assert!(
                runs.contains(&&text("7")) && runs.contains(&&text("azure")),
                "{name}: {runs:?}"
            );
            assert!(
                runs.iter().all(|cell| matches!(cell, Cell::Text(_))),
                "{name}: {runs:?}"
            );
        }
        assert_exports_round_trip(&out, &result.tables)
    }

    /// The CDF and blocks tables' CSV files are written from their cells, not by polars: they must be the bytes
    /// polars writes for the same frame (read here from the Parquet export), with labels that need quoting,
    /// empty text, numbers beside text and floats of every size.
    #[test]
    fn a_table_written_from_its_cells_is_the_csv_polars_writes() -> TestResult {
        use polars::prelude::{CsvWriter, ParquetReader, SerReader, SerWriter};
        let tmp = tempfile::tempdir()?;
        let mut points = Vec::new();
        let labelled = [
            (
                "a",
                [
                    ("run", num(7.0)),
                    ("note", text("say \"hi\"")),
                    ("separators", text("a,b")),
                    ("empty", text("")),
                    ("scale", num(0.1)),
                    ("big", num(1e20)),
                ],
            ),
            (
                "b",
                [
                    ("run", text("azure")),
                    ("note", text("cr\ronly")),
                    ("separators", text("x\ny")),
                    ("empty", text(" lead")),
                    ("scale", num(1e-7)),
                    ("big", num(-2.5)),
                ],
            ),
        ];
        for (name, pairs) in labelled {
            let dir = tmp.path().join(name);
            let rows: Vec<Sample> = (0..64)
                .map(|s| sample((s % 2) as u32, s, s * 1_000_000, 1000 + s * s * 37))
                .collect();
            write_samples(&dir, &rows, 16)?;
            points.push(point(dir, &pairs));
        }
        let out = tmp.path().join("out");
        let result = aggregate(
            &spec(r#"{"stats":"samples","blocks_ms":10,"cdf":{"points":7}}"#)?,
            &points,
            &out,
        )?;
        for name in ["cdf", "blocks"] {
            let file = std::fs::File::open(out.join(format!("{name}.parquet")))?;
            let mut frame = ParquetReader::new(file).finish()?;
            let mut by_polars = Vec::new();
            CsvWriter::new(&mut by_polars)
                .include_header(true)
                .finish(&mut frame)?;
            let written = std::fs::read(out.join(format!("{name}.csv")))?;
            assert_eq!(
                String::from_utf8_lossy(&written),
                String::from_utf8_lossy(&by_polars),
                "{name}.csv"
            );
            assert_eq!(written, by_polars, "{name}.csv");
        }
        assert_exports_round_trip(&out, &result.tables)
    }

    #[test]
    fn trace_groups_by_function_and_fragments() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("trace");
        let request = |slot, request_bytes, latency_us: u64, seq| Sample {
            slot,
            request_bytes,
            ..sample(0, seq, seq, latency_us * 1000)
        };
        // fragments = (bytes − 64) // 512: 576 → 1, 1088 → 2, 100 → 0.
        let rows = [
            request(0, 576, 5, 0),
            request(2, 100, 8600, 1),
            request(0, 576, 7, 2),
            request(0, 1088, 9, 3),
            request(3, 100, 1, 4),
        ];
        write_samples(&dir, &rows, 2)?;
        let out = tmp.path().join("out");
        let result = aggregate(
            &spec(r#"{"stats":"trace","functions":{"0":"Top-K","2":"CNN"},"piece":512}"#)?,
            &[point(dir, &[("run", text("azure"))])],
            &out,
        )?;
        let summary = &result.tables["summary"];
        assert_eq!(
            &summary.columns[..4],
            ["run", "function", "fragments", "requests"]
        );
        let groups: Vec<(String, String)> = summary
            .rows
            .iter()
            .map(|r| (r[1].label(), r[2].label()))
            .collect();
        assert_eq!(
            groups,
            [
                ("Top-K", "1"),
                ("Top-K", "2"),
                ("CNN", "0"),
                ("slot 3", "0")
            ]
            .map(|(f, n)| (f.to_string(), n.to_string()))
        );
        let top_k_1 = [("function", text("Top-K")), ("fragments", num(1.0))];
        // [5, 7]: mean 6, median rank round(0.5) = 1 → 7.
        assert_close(value(summary, &top_k_1, "requests"), 2.0);
        assert_close(value(summary, &top_k_1, "mean_us"), 6.0);
        assert_close(value(summary, &top_k_1, "median_us"), 7.0);
        assert_close(
            value(summary, &[("function", text("CNN"))], "p99_us"),
            8600.0,
        );
        // One cdf curve per group; Top-K/1 has two steps.
        let cdf = &result.tables["cdf"];
        let top_k_curve: Vec<(f64, f64)> = cdf
            .rows
            .iter()
            .filter(|r| r[1] == text("Top-K") && r[2] == num(1.0))
            .filter_map(|r| Some((r[3].as_f64()?, r[4].as_f64()?)))
            .collect();
        assert_eq!(top_k_curve, [(5.0, 0.5), (7.0, 1.0)]);
        assert_eq!(cdf.rows.len(), 5);
        assert_exports_round_trip(&out, &result.tables)
    }
}

mod claims {
    use super::*;

    /// A CPU/fRAC scalability table: CPU medians grow 14 → 146 µs (1 unit) and 14 → 41 µs (4 units);
    /// fRAC 7.7 → 8.7 µs. p99 is median + 0.8 µs except CPU.
    fn scalability() -> BTreeMap<String, Table> {
        let mut table = Table::new(
            ["series", "units", "m", "clients", "median_us", "p99_us"]
                .map(String::from)
                .to_vec(),
        );
        let rows = [
            ("CPU", 1.0, 1024.0, 1.0, 14.0, 20.0),
            ("CPU", 1.0, 1024.0, 28.0, 146.0, 300.0),
            ("CPU", 4.0, 1024.0, 1.0, 14.0, 20.0),
            ("CPU", 4.0, 1024.0, 28.0, 41.0, 90.0),
            ("fRAC", 1.0, 1024.0, 1.0, 7.7, 8.5),
            ("fRAC", 1.0, 1024.0, 28.0, 8.7, 9.5),
            ("fRAC", 4.0, 1024.0, 1.0, 7.7, 8.5),
            ("fRAC", 4.0, 1024.0, 28.0, 8.7, 9.5),
        ];
        for (series, units, m, clients, median, p99) in rows {
            table.rows.push(vec![
                text(series),
                num(units),
                num(m),
                num(clients),
                num(median),
                num(p99),
            ]);
        }
        BTreeMap::from([("summary".to_string(), table)])
    }

    fn judge(json: &str) -> Result<(bool, String), Box<dyn std::error::Error>> {
        let expectation: Expectation = serde_json::from_str(json)?;
        let verdicts = evaluate(std::slice::from_ref(&expectation), &scalability(), None);
        let verdict = verdicts.into_iter().next().ok_or("no verdict")?;
        assert_eq!(verdict.name, expectation.name);
        assert!(!verdict.claim.is_empty());
        Ok((verdict.passed(), verdict.measured))
    }

    fn assert_verdict(json: &str, passes: bool, measured_contains: &str) -> TestResult {
        let (passed, measured) = judge(json)?;
        assert_eq!(passed, passes, "{json}: {measured}");
        assert!(
            measured.contains(measured_contains),
            "{measured:?} lacks {measured_contains:?}"
        );
        Ok(())
    }

    #[test]
    fn below_and_above() -> TestResult {
        assert_verdict(
            r#"{"name":"b","where":{"series":"fRAC"},"below":{"column":"median_us","limit":10}}"#,
            true,
            "median_us 8.700 (limit 10) at units=4, m=1024, clients=28 ✓",
        )?;
        assert_verdict(
            r#"{"name":"b","where":{"series":"fRAC"},"below":{"column":"median_us","limit":8}}"#,
            false,
            "8.700 (limit 8)",
        )?;
        assert_verdict(
            r#"{"name":"a","where":{"series":"CPU"},"above":{"column":"median_us","limit":10}}"#,
            true,
            "146",
        )?;
        assert_verdict(
            r#"{"name":"a","where":{"series":"CPU"},"above":{"column":"median_us","limit":14}}"#,
            false,
            "14 (limit 14)",
        )
    }

    #[test]
    fn within() -> TestResult {
        assert_verdict(
            r#"{"name":"w","where":{"series":"fRAC","clients":1},"within":{"column":"median_us","limit":7.7}}"#,
            true,
            "7.700",
        )?;
        assert_verdict(
            r#"{"name":"w","where":{"series":"fRAC"},"within":{"column":"median_us","limit":8}}"#,
            false,
            "8.700 (limit ±8) at units=1",
        )
    }

    #[test]
    fn near() -> TestResult {
        assert_verdict(
            r#"{"name":"n","where":{"clients":28,"series":"fRAC"},"near":{"a":"p99_us","b":"median_us","limit":1.0}}"#,
            true,
            "9.500 − 8.700 = 0.800 (limit ±1)",
        )?;
        assert_verdict(
            r#"{"name":"n","where":{"clients":28},"near":{"a":"p99_us","b":"median_us","limit":1.0}}"#,
            false,
            "series=CPU",
        )
    }

    #[test]
    fn a_row_of_a_measured_table_is_named_without_its_provenance_columns() -> TestResult {
        let mut tables = scalability();
        let table = tables.get_mut("summary").ok_or("no summary")?;
        // Label columns are those before the first statistic: the provenance columns go right after `clients`.
        table.columns.splice(
            4..4,
            ["testbed", "testbed_kind", "source"].map(String::from),
        );
        for row in &mut table.rows {
            row.splice(
                4..4,
                [
                    text("emulated"),
                    text("emulated"),
                    text("emulated fRAC device; embedded client closed loop"),
                ],
            );
        }
        assert!(table.is_measured());
        let claim: Vec<Expectation> = serde_json::from_str(
            r#"[{"name":"n","where":{"clients":28},"near":{"a":"p99_us","b":"median_us","limit":1.0}}]"#,
        )?;
        let verdicts = evaluate(&claim, &tables, None);
        let measured = &verdicts.first().ok_or("no verdict")?.measured;
        assert!(
            measured.contains("series=CPU, units=1, m=1024"),
            "{measured}"
        );
        assert!(
            !measured.contains("testbed") && !measured.contains("source="),
            "{measured}"
        );
        Ok(())
    }

    #[test]
    fn grows() -> TestResult {
        assert_verdict(
            r#"{"name":"g","where":{"series":"CPU"},"grows":{"x":"clients","y":"median_us","by":["units","m"]}}"#,
            true,
            "units=1, m=1024: median_us 14 → 146 (clients 1 → 28, ×10.429) ✓",
        )?;
        // At one client the CPU median is 14 µs with 1 and 4 units: no growth along units.
        assert_verdict(
            r#"{"name":"g","where":{"series":"CPU","clients":1},"grows":{"x":"units","y":"median_us","by":["m"]}}"#,
            false,
            "median_us 14 → 14",
        )
    }

    #[test]
    fn slower_growth() -> TestResult {
        assert_verdict(
            r#"{"name":"s","where":{"series":"CPU"},"slower_growth":{"x":"clients","y":"median_us","group":"units","by":["m"]}}"#,
            true,
            "m=1024: ×2.929 at units=4, ×10.429 at units=1 ✓",
        )?;
        // fRAC grows equally with 1 and 4 units: not slower.
        assert_verdict(
            r#"{"name":"s","where":{"series":"fRAC"},"slower_growth":{"x":"clients","y":"median_us","group":"units","by":["m"]}}"#,
            false,
            "✗",
        )
    }

    #[test]
    fn flatter() -> TestResult {
        assert_verdict(
            r#"{"name":"f","flatter":{"x":"clients","y":"median_us","series":"series","flat":"fRAC","steep":"CPU","by":["units","m"]}}"#,
            true,
            "units=4, m=1024: fRAC: median_us 7.700 → 8.700",
        )?;
        assert_verdict(
            r#"{"name":"f","flatter":{"x":"clients","y":"median_us","series":"series","flat":"CPU","steep":"fRAC","by":["units","m"]}}"#,
            false,
            "✗",
        )
    }

    #[test]
    fn sublinear() -> TestResult {
        // CPU median at 1 unit: 146/14 ≈ 10.4 < 28/1: sub-linear; p99 300/20 = 15 < 28 too.
        assert_verdict(
            r#"{"name":"l","where":{"series":"CPU","units":1},"sublinear":{"x":"clients","y":"median_us"}}"#,
            true,
            "all rows: median_us ×10.429 at clients ×28 ✓",
        )?;
        // p99 against the median grows faster than linear: x = median 14 → 146 (×10.4), y = p99 20 → 300 (×15).
        assert_verdict(
            r#"{"name":"l","where":{"series":"CPU","units":1},"sublinear":{"x":"median_us","y":"p99_us"}}"#,
            false,
            "p99_us ×15 at median_us ×10.429 ✗",
        )
    }

    #[test]
    fn claims_without_rows_or_with_ambiguous_groups_fail() -> TestResult {
        assert_verdict(
            r#"{"name":"x","where":{"series":"DPU"},"below":{"column":"median_us","limit":10}}"#,
            false,
            "no rows match series=DPU in table summary",
        )?;
        assert_verdict(
            r#"{"name":"x","where":{"cores":4},"below":{"column":"median_us","limit":10}}"#,
            false,
            "no column `cores`",
        )?;
        assert_verdict(
            r#"{"name":"x","table":"cdf","below":{"column":"median_us","limit":10}}"#,
            false,
            "no table `cdf`",
        )?;
        assert_verdict(
            r#"{"name":"x","below":{"column":"mean_us","limit":10}}"#,
            false,
            "no column `mean_us`",
        )?;
        // Without `by`, CPU has two rows per client count.
        assert_verdict(
            r#"{"name":"x","where":{"series":"CPU"},"grows":{"x":"clients","y":"median_us"}}"#,
            false,
            "several rows at clients=1",
        )?;
        assert_verdict(
            r#"{"name":"x","below":{"column":"median_us","limit":10},"above":{"column":"median_us","limit":1}}"#,
            false,
            "states 2 claims",
        )?;
        assert_verdict(r#"{"name":"x"}"#, false, "states 0 claims")?;
        let unknown: Result<Expectation, _> =
            serde_json::from_str(r#"{"name":"x","bellow":{"column":"a","limit":1}}"#);
        assert!(unknown.is_err(), "unknown fields are rejected");
        Ok(())
    }
}

mod errors {
    use super::*;

    fn message(
        result: Result<fracflow_aggregate::Aggregated, fracflow_aggregate::AggregateError>,
    ) -> String {
        match result {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn missing_samples_file_names_it() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("empty");
        std::fs::create_dir_all(&dir)?;
        let error = message(aggregate(
            &spec(r#"{"stats":"samples"}"#)?,
            &[point(dir.clone(), &[])],
            tmp.path(),
        ));
        assert!(
            error.contains(&dir.join("samples.parquet").display().to_string()),
            "{error}"
        );
        assert!(error.contains("No such file"), "{error}");
        Ok(())
    }

    #[test]
    fn corrupt_parquet_and_missing_columns_name_the_file() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("corrupt");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("samples.parquet");
        std::fs::write(&path, b"PAR1 this is not parquet at all PAR1")?;
        let error = message(aggregate(
            &spec(r#"{"stats":"samples"}"#)?,
            &[point(dir, &[])],
            tmp.path(),
        ));
        assert!(error.starts_with(&path.display().to_string()), "{error}");
        assert!(error.contains("not a readable Parquet file"), "{error}");

        let dir = tmp.path().join("seconds-only");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("seconds.jsonl"),
            "{\"second\":0,\"write_gbps\":1}\nnot json\n",
        )?;
        let error = message(aggregate(
            &spec(r#"{"stats":"seconds"}"#)?,
            &[point(dir.clone(), &[])],
            tmp.path(),
        ));
        assert!(
            error.contains(&format!("{}:2:", dir.join("seconds.jsonl").display())),
            "{error}"
        );
        Ok(())
    }

    #[test]
    fn a_point_without_a_label_is_named() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        for dir in [&a, &b] {
            write_samples(dir, &[sample(0, 0, 0, 1000)], 1)?;
        }
        let points = [
            point(a, &[("series", text("fRAC")), ("m", num(1024.0))]),
            point(b.clone(), &[("series", text("fRAC"))]),
        ];
        let error = message(aggregate(
            &spec(r#"{"stats":"samples"}"#)?,
            &points,
            tmp.path(),
        ));
        assert!(
            error.contains(&b.display().to_string()) && error.contains("missing [\"m\"]"),
            "{error}"
        );
        Ok(())
    }

    #[test]
    fn spec_fields_that_do_not_apply_are_rejected() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let wrong = [
            (
                r#"{"stats":"seconds","skip_s":10}"#,
                "`skip_s` applies to `stats: samples | trace`",
            ),
            (
                r#"{"stats":"samples","from_s":10}"#,
                "`from_s` applies to `stats: seconds`",
            ),
            (
                r#"{"stats":"samples","functions":{"0":"Top-K"}}"#,
                "`functions` applies to `stats: trace` only",
            ),
            (
                r#"{"stats":"samples","drop_fraction":1.0}"#,
                "`drop_fraction` must be in [0, 1)",
            ),
        ];
        for (json, expected) in wrong {
            let error = message(aggregate(&spec(json)?, &[], tmp.path()));
            assert!(error.contains(expected), "{json}: {error}");
        }
        assert!(
            spec(r#"{"stats":"samples","skip":10}"#).is_err(),
            "unknown fields are rejected"
        );
        Ok(())
    }

    #[test]
    fn spec_shapes_of_the_issue_parse() -> TestResult {
        let shapes = [
            r#"{"stats":"seconds","from_s":10}"#,
            r#"{"stats":"samples","skip_s":10,"drop_fraction":0.25,"cdf":{"where":{"m":4096,"clients":28},"drop_fraction":0.1,"points":200}}"#,
            r#"{"stats":"trace","functions":{"0":"Top-K","1":"Logit","2":"CNN","3":"Norm"},"piece":512}"#,
            r#"{"stats":"seconds","from_s":10,"derive":[{"scale_by":{"column":"X","base":1024,"factor_column":"pieces","unit":1024,"columns":["mean_us"]}}],
                "compare":{"column":"series","baseline":"Transport","on":["n"],"values":["median_us"]}}"#,
            r#"{"stats":"samples","latency":"from_send","exact_max_samples":1000}"#,
        ];
        for json in shapes {
            spec(json).map_err(|e| format!("{json}: {e}"))?;
        }
        Ok(())
    }

    #[test]
    fn read_table_rejects_other_files() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let missing = tmp.path().join("summary.parquet");
        let error = read_table(&missing)
            .map(|_| ())
            .err()
            .ok_or("expected an error")?
            .to_string();
        assert!(error.contains(&missing.display().to_string()), "{error}");
        assert!(read_table(&tmp.path().join("summary.json")).is_err());
        Ok(())
    }
}

mod members {
    use super::*;

    /// Two client processes that ran at once, split into one row each: member 0 averages 10 µs and member 1
    /// 30 µs in every second; only their own lines count.
    #[test]
    fn a_point_splits_by_client_process() -> TestResult {
        let dir = tempfile::tempdir()?;
        let mut lines = String::new();
        for second in 0..3 {
            for (member, sum_ns) in [(0, 10_000u64), (1, 30_000)] {
                lines.push_str(&format!(
                    "{{\"second\":{second},\"member\":{member},\"write_gbps\":1.0,\"threads\":[{{\"count\":1,\"sum_ns\":{sum_ns}}}]}}\n"
                ));
            }
        }
        std::fs::write(dir.path().join("seconds.jsonl"), lines)?;
        let points: Vec<PointSource> = [(0, "A"), (1, "B")]
            .into_iter()
            .map(|(member, name)| PointSource {
                labels: labels(&[("function", Cell::Text(name.to_owned()))]),
                dir: dir.path().to_path_buf(),
                member: Some(member),
            })
            .collect();
        let spec: AggregateSpec = serde_json::from_str(r#"{"stats":"seconds","from_s":1}"#)?;
        let out = tempfile::tempdir()?;
        let tables = aggregate(&spec, &points, out.path())?.tables;
        let summary = &tables["summary"];
        assert_eq!(summary.get(0, "mean_us"), Some(&Cell::Num(10.0)));
        assert_eq!(summary.get(1, "mean_us"), Some(&Cell::Num(30.0)));
        // Throughput is the member's own: 1 Gb/s per second, not the point's 2.
        assert_eq!(summary.get(0, "throughput_gbps"), Some(&Cell::Num(1.0)));
        assert_eq!(summary.get(1, "requests"), Some(&Cell::Num(2.0)));

        let samples: AggregateSpec = serde_json::from_str(r#"{"stats":"samples"}"#)?;
        let refused = aggregate(&samples, &points, out.path());
        assert!(
            matches!(&refused, Err(fracflow_aggregate::AggregateError::Spec(why)) if why.contains("stats: seconds")),
            "{refused:?}"
        );
        Ok(())
    }
}

mod metrics {
    use super::*;

    fn message(
        result: Result<fracflow_aggregate::Aggregated, fracflow_aggregate::AggregateError>,
    ) -> String {
        match result {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.to_string(),
        }
    }

    /// A `metrics.json` as the `command` kind writes it.
    fn write_metrics(dir: &Path, metrics: serde_json::Value) -> TestResult {
        std::fs::create_dir_all(dir)?;
        let record = MetricsRecord {
            version: MetricsRecord::VERSION,
            point: BTreeMap::new(),
            labels: BTreeMap::new(),
            metrics: serde_json::from_value(metrics)?,
        };
        fracflow_record::write_record(&dir.join(METRICS_FILE), &record)?;
        Ok(())
    }

    /// RPCNIC's deserializer: two designs, two messages, three repetitions each (speed in Gbit/s), plus one
    /// message measured once.
    fn deserializer_points(root: &Path) -> Result<Vec<PointSource>, Box<dyn std::error::Error>> {
        let speeds = [
            ("one-shot", 0.0, [90.0, 92.0, 94.0]),
            ("field-by-field", 0.0, [30.0, 31.0, 32.0]),
            ("one-shot", 1.0, [40.0, 40.0, 46.0]),
            ("field-by-field", 1.0, [20.0, 20.0, 20.0]),
        ];
        let mut points = Vec::new();
        for (design, idx, reps) in speeds {
            for (rep, speed) in reps.into_iter().enumerate() {
                let dir = root.join(format!("{design}_{idx}_{rep}"));
                write_metrics(
                    &dir,
                    serde_json::json!({"speed": speed, "size": 1000.0 + idx}),
                )?;
                points.push(point(
                    dir,
                    &[
                        ("design", text(design)),
                        ("idx", num(idx)),
                        ("rep", num(rep as f64)),
                    ],
                ));
            }
        }
        let dir = root.join("once");
        write_metrics(&dir, serde_json::json!({"speed": 50.0, "size": null}))?;
        points.push(point(
            dir,
            &[
                ("design", text("one-shot")),
                ("idx", num(2.0)),
                ("rep", num(0.0)),
            ],
        ));
        Ok(points)
    }

    #[test]
    fn repetitions_reduce_to_mean_sample_sd_and_count() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let points = deserializer_points(tmp.path())?;
        let out = tmp.path().join("out");
        let result = aggregate(
            &spec(r#"{"stats":"metrics","over":["rep"]}"#)?,
            &points,
            &out,
        )?;
        let summary = &result.tables["summary"];
        // The labels but `rep`, in the points' label order, then each metric, its sd, and n.
        assert_eq!(
            summary.columns,
            ["design", "idx", "size", "size_sd", "speed", "speed_sd", "n"]
        );
        assert_eq!(summary.rows.len(), 5, "{:?}", summary.rows);
        let key = |design: &str, idx: f64| [("design", text(design)), ("idx", num(idx))];
        assert_close(value(summary, &key("one-shot", 0.0), "speed"), 92.0);
        // Sample sd (n − 1) of 90, 92, 94 is 2; of 40, 40, 46 it is √12.
        assert_close(value(summary, &key("one-shot", 0.0), "speed_sd"), 2.0);
        assert_close(
            value(summary, &key("one-shot", 1.0), "speed_sd"),
            12f64.sqrt(),
        );
        assert_close(value(summary, &key("field-by-field", 1.0), "speed_sd"), 0.0);
        assert_close(value(summary, &key("one-shot", 1.0), "n"), 3.0);
        // One row: the sd is undefined (null); a metric that is null everywhere has a null mean.
        assert_eq!(
            cell(summary, &key("one-shot", 2.0), "speed_sd"),
            &Cell::Null
        );
        assert_close(value(summary, &key("one-shot", 2.0), "n"), 1.0);
        assert_eq!(cell(summary, &key("one-shot", 2.0), "size"), &Cell::Null);
        // Rows keep the order in which their first repetition came.
        assert_eq!(summary.get(0, "design"), Some(&text("one-shot")));
        assert_eq!(summary.get(1, "design"), Some(&text("field-by-field")));
        assert_exports_round_trip(&out, &result.tables)?;
        Ok(())
    }

    /// A verdict names a row by its labels only, not by the metrics beside them: from the aggregation itself, from
    /// its Parquet export (which records the labels), and from its CSV export (read back without them, so the
    /// metric columns, each beside its `_sd`, are told apart by that).
    #[test]
    fn verdicts_name_rows_by_their_labels_not_their_metrics() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let points = deserializer_points(tmp.path())?;
        let out = tmp.path().join("out");
        let result = aggregate(
            &spec(
                r#"{"stats":"metrics","over":["rep"],
                    "compare":{"column":"design","baseline":"field-by-field","on":["idx"],"values":["speed"],"op":"ratio"}}"#,
            )?,
            &points,
            &out,
        )?;
        let summary = &result.tables["summary"];
        assert_eq!(summary.labels, Some(vec!["design".into(), "idx".into()]));
        let claim: Vec<Expectation> = serde_json::from_str(
            r#"[{"name": "fast", "where": {"idx": 0}, "above": {"column": "speed", "limit": 50}}]"#,
        )?;
        let expected = "speed 92 (limit 50) at design=one-shot ✓; speed 31 (limit 50) at design=field-by-field ✗";
        let read =
            |extension: &str| -> Result<BTreeMap<String, Table>, Box<dyn std::error::Error>> {
                Ok(BTreeMap::from([(
                    "summary".to_owned(),
                    read_table(&out.join(format!("summary.{extension}")))?,
                )]))
            };
        for (source, tables) in [
            ("aggregate", result.tables.clone()),
            ("parquet", read("parquet")?),
            ("csv", read("csv")?),
        ] {
            let verdicts = evaluate(&claim, &tables, None);
            assert_eq!(verdicts[0].measured, expected, "{source}");
        }
        Ok(())
    }

    #[test]
    fn compare_ratio_and_speedup_against_the_baseline_design() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let points = deserializer_points(tmp.path())?;
        let out = tmp.path().join("out");
        let ratio = aggregate(
            &spec(
                r#"{"stats":"metrics","over":["rep"],
                    "compare":{"column":"design","baseline":"field-by-field","on":["idx"],"values":["speed"],"op":"ratio"}}"#,
            )?,
            &points,
            &out,
        )?;
        let summary = &ratio.tables["summary"];
        let key = |design: &str, idx: f64| [("design", text(design)), ("idx", num(idx))];
        // ratio_X = X / baseline: 92 / 31 and 42 / 20; the baseline rows get 1; idx 2 has no baseline row.
        assert_close(
            value(summary, &key("one-shot", 0.0), "ratio_speed"),
            92.0 / 31.0,
        );
        assert_close(
            value(summary, &key("one-shot", 1.0), "ratio_speed"),
            42.0 / 20.0,
        );
        assert_close(
            value(summary, &key("field-by-field", 0.0), "ratio_speed"),
            1.0,
        );
        assert_eq!(
            cell(summary, &key("one-shot", 2.0), "ratio_speed"),
            &Cell::Null
        );
        assert!(summary.column("delta_speed").is_none());
        assert_exports_round_trip(&out, &ratio.tables)?;

        // speedup_X = baseline / X: times, where smaller is faster.
        let speedup = aggregate(
            &spec(
                r#"{"stats":"metrics","over":["rep"],
                    "compare":{"column":"design","baseline":"field-by-field","on":["idx"],"values":["speed"],"op":"speedup"}}"#,
            )?,
            &points,
            &out,
        )?;
        let summary = &speedup.tables["summary"];
        assert_close(
            value(summary, &key("one-shot", 0.0), "speedup_speed"),
            31.0 / 92.0,
        );
        assert_close(
            value(summary, &key("one-shot", 1.0), "speedup_speed"),
            20.0 / 42.0,
        );

        // A zero baseline gives a null quotient, not an infinity in the exports.
        let zero = tmp.path().join("zero");
        let mut with_zero = Vec::new();
        for (design, speed) in [("field-by-field", 0.0), ("one-shot", 5.0)] {
            let dir = zero.join(design);
            write_metrics(&dir, serde_json::json!({"speed": speed}))?;
            with_zero.push(point(dir, &[("design", text(design)), ("idx", num(0.0))]));
        }
        let divided = aggregate(
            &spec(
                r#"{"stats":"metrics","compare":{"column":"design","baseline":"field-by-field","on":["idx"],"values":["speed"],"op":"ratio"}}"#,
            )?,
            &with_zero,
            &zero,
        )?;
        let summary = &divided.tables["summary"];
        assert_eq!(
            cell(summary, &key("one-shot", 0.0), "ratio_speed"),
            &Cell::Null
        );
        Ok(())
    }

    #[test]
    fn bad_metric_rows_and_specs_are_named() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let points = deserializer_points(tmp.path())?;
        let error = message(aggregate(
            &spec(r#"{"stats":"metrics","over":["repetition"]}"#)?,
            &points,
            tmp.path(),
        ));
        assert!(error.contains("`over` names `repetition`"), "{error}");
        let error = message(aggregate(
            &spec(r#"{"stats":"seconds","over":["rep"]}"#)?,
            &points,
            tmp.path(),
        ));
        assert!(
            error.contains("`over` applies to `stats: metrics`"),
            "{error}"
        );
        let error = message(aggregate(
            &spec(r#"{"stats":"metrics","skip_s":1}"#)?,
            &points,
            tmp.path(),
        ));
        assert!(error.contains("not `metrics`"), "{error}");

        // A record without its metrics is one error naming the file and the field.
        let bare = tmp.path().join("bare");
        std::fs::create_dir_all(&bare)?;
        std::fs::write(bare.join(METRICS_FILE), r#"{"point":{},"labels":{}}"#)?;
        let error = message(aggregate(
            &spec(r#"{"stats":"metrics"}"#)?,
            &[point(bare.clone(), &[])],
            tmp.path(),
        ));
        assert_eq!(
            error,
            format!(
                "{}: not a command metrics record: missing field `metrics` at line 1 column 24",
                bare.join(METRICS_FILE).display()
            )
        );

        // A text metric (a capture without `base` that was no number) names the file and the metric.
        let text_dir = tmp.path().join("text");
        write_metrics(&text_dir, serde_json::json!({"len": "1f6"}))?;
        let error = message(aggregate(
            &spec(r#"{"stats":"metrics"}"#)?,
            &[point(text_dir.clone(), &[("idx", num(0.0))])],
            tmp.path(),
        ));
        assert!(
            error.contains(&text_dir.join("metrics.json").display().to_string())
                && error.contains("metric `len`"),
            "{error}"
        );
        // A metric named like a label would make two columns of one name.
        let clash = tmp.path().join("clash");
        write_metrics(&clash, serde_json::json!({"idx": 1.0}))?;
        let error = message(aggregate(
            &spec(r#"{"stats":"metrics"}"#)?,
            &[point(clash, &[("idx", num(0.0))])],
            tmp.path(),
        ));
        assert!(error.contains("two columns named `idx`"), "{error}");
        Ok(())
    }
}

mod verdicts {
    use super::*;
    use fracflow_aggregate::Host;
    use fracflow_record::Verdict;

    fn host(cores: u32) -> Host {
        Host {
            cores,
            from: "test".to_owned(),
        }
    }

    /// The scalability table of `claims` with one CPU server on 1 core and one on 4: both grow with clients.
    fn cpu_table() -> BTreeMap<String, Table> {
        let mut table = Table::new(
            ["series", "units", "m", "clients", "median_us"]
                .map(String::from)
                .to_vec(),
        );
        for (units, clients, median) in [
            (1.0, 1.0, 14.0),
            (1.0, 28.0, 146.0),
            (4.0, 1.0, 14.0),
            (4.0, 28.0, 41.0),
        ] {
            table.rows.push(vec![
                text("CPU"),
                num(units),
                num(1024.0),
                num(clients),
                num(median),
            ]);
        }
        BTreeMap::from([("summary".to_owned(), table)])
    }

    fn one(
        json: &str,
        tables: &BTreeMap<String, Table>,
        host: Option<&Host>,
    ) -> fracflow_record::ExpectationResult {
        let expectation: Expectation = serde_json::from_str(json).expect("a claim");
        evaluate(std::slice::from_ref(&expectation), tables, host)
            .into_iter()
            .next()
            .expect("one verdict")
    }

    const SLOWER: &str = r#"{"name":"more cores slow the growth","where":{"series":"CPU"},
        "slower_growth":{"x":"clients","y":"median_us","group":"units","by":["m"]},
        "needs":{"cores":{"server":"units","client":2}}}"#;

    #[test]
    fn a_claim_needing_more_cores_than_the_host_has_is_not_testable_here() {
        let tables = cpu_table();
        let small = one(SLOWER, &tables, Some(&host(2)));
        assert_eq!(small.verdict, Verdict::NotTestable, "{small:?}");
        assert_eq!(
            small.measured,
            "m=1024: not testable here (needs ≥ 6 cores: 4 server + 2 client; host has 2 (test))"
        );
        assert!(!small.passed() && !small.failed());

        // Large enough: judged, and it holds (×10.4 at 1 core against ×2.9 at 4).
        let large = one(SLOWER, &tables, Some(&host(6)));
        assert_eq!(large.verdict, Verdict::Pass, "{large:?}");
        assert!(
            large
                .measured
                .contains("×2.929 at units=4, ×10.429 at units=1"),
            "{}",
            large.measured
        );

        // Unknown cores: not testable, saying so.
        let unknown = one(SLOWER, &tables, None);
        assert_eq!(unknown.verdict, Verdict::NotTestable);
        assert!(
            unknown
                .measured
                .contains("this host's cores were not given"),
            "{}",
            unknown.measured
        );

        // A plain number, and a per-group need: the group that fits is judged, the other is not.
        let total = one(
            r#"{"name":"n","below":{"column":"median_us","limit":1000},"needs":{"cores":3}}"#,
            &tables,
            Some(&host(2)),
        );
        assert_eq!(total.verdict, Verdict::NotTestable);
        assert!(
            total.measured.contains("needs ≥ 3 cores; host has 2"),
            "{}",
            total.measured
        );
        let grows = one(
            r#"{"name":"g","grows":{"x":"clients","y":"median_us","by":["units"]},"needs":{"cores":{"server":"units"}}}"#,
            &tables,
            Some(&host(2)),
        );
        assert_eq!(grows.verdict, Verdict::Pass, "{grows:?}");
        assert!(
            grows.measured.contains("units=1: median_us 14 → 146"),
            "{}",
            grows.measured
        );
        assert!(
            grows.measured.contains(
                "units=4: not testable here (needs ≥ 4 cores: 4 server; host has 2 (test))"
            ),
            "{}",
            grows.measured
        );
    }

    /// A point left with no samples after the cuts (a starved client under load: its median is empty) says
    /// nothing about the claim, so the claim is inconclusive and the run does not fail; text where a number
    /// belongs is a wrong pipeline, and fails.
    #[test]
    fn a_starved_point_makes_its_claim_inconclusive_not_failed() {
        const GROWS: &str = r#"{"name":"g","where":{"series":"CPU"},
            "grows":{"x":"clients","y":"median_us","by":["units"]}}"#;
        let with_cell = |cell: Cell| {
            let mut tables = cpu_table();
            let summary = tables.get_mut("summary").expect("the summary table");
            summary.rows[1][4] = cell;
            tables
        };

        let starved = one(GROWS, &with_cell(Cell::Null), Some(&host(2)));
        assert_eq!(starved.verdict, Verdict::Inconclusive, "{starved:?}");
        assert!(!starved.failed());
        assert!(
            starved.measured.contains(
                "units=1: no median_us at units=1, m=1024, clients=28 (no samples were left to compute it) (inconclusive)"
            ),
            "{}",
            starved.measured
        );
        assert!(
            starved.measured.contains("units=4: median_us 14 → 41"),
            "the other group is still judged: {}",
            starved.measured
        );
        let not_a_number = one(GROWS, &with_cell(num(f64::NAN)), Some(&host(2)));
        assert_eq!(
            not_a_number.verdict,
            Verdict::Inconclusive,
            "{not_a_number:?}"
        );

        let wrong = one(GROWS, &with_cell(text("fast")), Some(&host(2)));
        assert_eq!(wrong.verdict, Verdict::Fail, "{wrong:?}");
        assert!(
            wrong
                .measured
                .contains("median_us is not a number (\"fast\")"),
            "{}",
            wrong.measured
        );
    }

    /// A deterministic noise in [-spread, spread): the same for the same (point, index).
    fn noise(point: u64, index: u64, spread: f64) -> f64 {
        let mut z = (point << 32 | index).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * spread
    }

    /// Two seconds of one thread's samples, one every ms, latency `median_us` ± 30 %, plus a warm-up second
    /// at 10× the latency that the `skip_s` cut must remove.
    fn write_point(dir: &Path, point: u64, median_us: f64) -> TestResult {
        let samples: Vec<Sample> = (0..3000u64)
            .map(|i| {
                let warm = if i < 1000 { 10.0 } else { 1.0 };
                let us = median_us * warm * (1.0 + noise(point, i, 0.3));
                sample(0, i, i * 1_000_000, (us * 1000.0) as u64)
            })
            .collect();
        write_samples(dir, &samples, 1024)
    }

    /// Aggregates a 4-client and a 28-client point with the given medians, with 100-ms blocks.
    fn measured(
        root: &Path,
        at_4: f64,
        at_28: f64,
    ) -> Result<BTreeMap<String, Table>, Box<dyn std::error::Error>> {
        let mut points = Vec::new();
        for (index, (clients, median)) in [(4.0, at_4), (28.0, at_28)].into_iter().enumerate() {
            let dir = root.join(format!("n{clients}"));
            write_point(&dir, index as u64, median)?;
            points.push(point(dir, &[("clients", num(clients))]));
        }
        let out = root.join("out");
        let result = aggregate(
            &spec(r#"{"stats":"samples","skip_s":1,"blocks_ms":100}"#)?,
            &points,
            &out,
        )?;
        assert_exports_round_trip(&out, &result.tables)?;
        Ok(result.tables)
    }

    const GROWS: &str = r#"{"name":"grows","grows":{"x":"clients","y":"median_us"},"margin":0.05}"#;

    #[test]
    fn a_difference_is_judged_with_its_bootstrap_interval() -> TestResult {
        let tmp = tempfile::tempdir()?;
        // Clearly better: 10 → 20 µs; clearly worse: 20 → 10 µs; equal: 10 → 10 µs (different noise).
        let cases = [
            ("better", 10.0, 20.0, Verdict::Pass),
            ("worse", 20.0, 10.0, Verdict::Fail),
            ("equal", 10.0, 10.0, Verdict::Inconclusive),
        ];
        for (case, at_4, at_28, expected) in cases {
            let tables = measured(&tmp.path().join(case), at_4, at_28)?;
            let blocks = &tables["blocks"];
            // 2 points × 20 blocks of 100 ms after the 1-s cut, each of 100 samples.
            assert_eq!(blocks.rows.len(), 40, "{case}");
            assert!(
                blocks
                    .rows
                    .iter()
                    .all(|row| row[blocks.column("requests").unwrap_or(0)] == num(100.0))
            );
            let verdict = one(GROWS, &tables, None);
            assert_eq!(verdict.verdict, expected, "{case}: {}", verdict.measured);
            assert!(
                verdict.measured.contains("growth of median_us = ")
                    && verdict.measured.contains("95 % CI ["),
                "{case}: {}",
                verdict.measured
            );
            assert!(
                verdict
                    .measured
                    .contains("≥ 20 blocks per point, margin 0.050"),
                "{}",
                verdict.measured
            );
            // The same data: the same draws, the same words.
            assert_eq!(one(GROWS, &tables, None), verdict, "{case}");
        }
        Ok(())
    }

    #[test]
    fn the_interval_brackets_the_known_ratio_and_few_blocks_give_none() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let tables = measured(tmp.path(), 10.0, 20.0)?;
        let verdict = one(GROWS, &tables, None);
        // "… 95 % CI [lo, hi] …": the true ratio 2 lies inside, and the interval is narrow.
        let bounds = verdict
            .measured
            .split("95 % CI [")
            .nth(1)
            .and_then(|rest| rest.split(']').next())
            .ok_or("no interval")?;
        let (lo, hi) = bounds.split_once(", ").ok_or("no bounds")?;
        let (lo, hi): (f64, f64) = (lo.parse()?, hi.parse()?);
        assert!(
            lo < 2.0 && 2.0 < hi && hi - lo < 0.2,
            "{}",
            verdict.measured
        );

        // With 500-ms blocks each point has 4: no interval, the point values decide, and the verdict says why.
        let mut points = Vec::new();
        for clients in [4.0, 28.0] {
            points.push(point(
                tmp.path().join(format!("n{clients}")),
                &[("clients", num(clients))],
            ));
        }
        let coarse = aggregate(
            &spec(r#"{"stats":"samples","skip_s":1,"blocks_ms":500}"#)?,
            &points,
            &tmp.path().join("coarse"),
        )?;
        let verdict = one(GROWS, &coarse.tables, None);
        assert_eq!(verdict.verdict, Verdict::Pass, "{}", verdict.measured);
        assert!(
            verdict
                .measured
                .contains("no interval: 4 block(s) at clients=4, an interval needs 5"),
            "{}",
            verdict.measured
        );
        Ok(())
    }

    #[test]
    fn blocks_apply_to_samples_only_and_must_be_positive() -> TestResult {
        let tmp = tempfile::tempdir()?;
        for (json, why) in [
            (
                r#"{"stats":"seconds","blocks_ms":100}"#,
                "`blocks_ms` applies to `stats: samples`, not `seconds`",
            ),
            (
                r#"{"stats":"samples","blocks_ms":0}"#,
                "`blocks_ms` must be positive",
            ),
        ] {
            let refused = aggregate(&spec(json)?, &[], tmp.path()).expect_err(json);
            assert!(refused.to_string().contains(why), "{refused}");
        }
        Ok(())
    }

    #[test]
    fn paper_values_are_matched_to_one_measured_row() {
        let tables = cpu_table();
        let verdict = one(
            r#"{"name":"p","where":{"series":"CPU"},"grows":{"x":"clients","y":"median_us","by":["units"]},
                "paper":[{"value":146,"unit":"µs","source":"Fig. 16","column":"median_us","at":{"units":1,"clients":28}},
                         {"value":[10,12],"unit":"µs","source":"Fig. 16","column":"median_us","at":{"units":1,"clients":28,"m":4096}},
                         {"value":41,"unit":"µs","source":"Fig. 16","column":"median_us","at":{"clients":28}}]}"#,
            &tables,
            None,
        );
        let paper = &verdict.paper;
        assert_eq!(paper.len(), 3);
        assert_eq!(
            (paper[0].paper.as_str(), paper[0].measured),
            ("146", Some(146.0))
        );
        assert_eq!(paper[0].at, "median_us at clients=28, series=CPU, units=1");
        assert_eq!(
            (paper[1].paper.as_str(), paper[1].measured),
            ("10–12", None)
        );
        assert_eq!(paper[2].measured, None, "two rows match");
        assert!(paper[2].at.contains("2 rows match"), "{}", paper[2].at);
    }
}

/// The `samples.by-thread` sidecar the client writes beside `samples.parquet`: reading through it gives the
/// Parquet reader's tables exactly, and a sidecar that is stale, corrupt or not indexed is not used and says so.
mod by_thread {
    use super::*;

    use fracflow_record::SAMPLES_BY_THREAD_FILE;

    /// A deterministic point: `threads` client threads (ids `0, 2, 4, …`: a gap between each) with `rows(t)`
    /// samples each, thread after thread in seq order as the client writes them. Thread t sends seq s at
    /// `start(t) + s · 1 ms`; latencies spread over three orders of magnitude, with repeats.
    fn client_samples(
        threads: u32,
        rows: impl Fn(u32) -> u64,
        start: impl Fn(u32) -> u64,
    ) -> Vec<fracflow_client::Sample> {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut samples = Vec::new();
        for t in 0..threads {
            for seq in 0..rows(t) {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let last_piece = 1_000 + (state >> 33) % (1 << (10 + (state >> 60)));
                samples.push(fracflow_client::Sample {
                    thread: 2 * t,
                    seq,
                    t_send_ns: start(t) + seq * 1_000_000,
                    latency_ns: last_piece + 300,
                    latency_last_piece_ns: last_piece,
                    slot: (seq % 3) as u16,
                    request_bytes: 64 + 512 * (seq % 5) as u32,
                    response_bytes: 64,
                });
            }
        }
        samples
    }

    /// Writes `samples` with the client's writer into `dir` (Parquet + sidecar) and the Parquet file alone into
    /// `dir-parquet`; returns both points.
    fn both_ways(
        root: &Path,
        name: &str,
        samples: &[fracflow_client::Sample],
    ) -> Result<(PointSource, PointSource), Box<dyn std::error::Error>> {
        let with = root.join(name);
        let without = root.join(format!("{name}-parquet"));
        std::fs::create_dir_all(&with)?;
        std::fs::create_dir_all(&without)?;
        fracflow_client::write_samples_parquet(&with.join(SAMPLES_FILE), samples)?;
        assert!(with.join(SAMPLES_BY_THREAD_FILE).is_file());
        std::fs::copy(with.join(SAMPLES_FILE), without.join(SAMPLES_FILE))?;
        let labels = [("point", text(name))];
        Ok((point(with, &labels), point(without, &labels)))
    }

    /// Aggregates `points` with `json` and returns the tables and notes.
    fn run(
        root: &Path,
        json: &str,
        points: &[PointSource],
    ) -> Result<fracflow_aggregate::Aggregated, Box<dyn std::error::Error>> {
        let out = root.join(format!("out-{}", fracflow_record::unique_suffix()));
        Ok(aggregate(&spec(json)?, points, &out)?)
    }

    /// Every spec shape the pipelines use, and the edges of the cuts.
    const SPECS: &[&str] = &[
        r#"{"stats":"samples"}"#,
        r#"{"stats":"samples","skip_s":0.5}"#,
        r#"{"stats":"samples","skip_s":0.5,"drop_fraction":0.25,"latency":"from_send"}"#,
        r#"{"stats":"samples","skip_s":0.25,"drop_fraction":0.999}"#,
        r#"{"stats":"samples","skip_s":1000}"#,
        r#"{"stats":"samples","skip_s":0.5,"drop_fraction":0.25,"cdf":{"drop_fraction":0.1,"points":50},"blocks_ms":50}"#,
        r#"{"stats":"samples","skip_s":0.5,"drop_fraction":0.25,"exact_max_samples":100}"#,
        r#"{"stats":"samples","drop_fraction":0.5,"cdf":{"points":20},"exact_max_samples":10}"#,
        r#"{"stats":"trace","functions":{"0":"Top-K","1":"Logit"},"piece":512}"#,
        r#"{"stats":"trace","skip_s":0.3,"drop_fraction":0.1,"piece":1024,"exact_max_samples":100}"#,
        r#"{"stats":"trace","skip_s":0.3,"drop_fraction":0.1,"piece":512}"#,
    ];

    #[test]
    fn the_sidecar_gives_the_parquet_readers_tables_exactly() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let root = tmp.path();
        let cases: Vec<(&str, Vec<fracflow_client::Sample>)> = vec![
            // Several pages per thread, the send-time cut inside a page, threads of different lengths.
            (
                "pages",
                client_samples(
                    5,
                    |t| 3_000 + 2_500 * u64::from(t),
                    |t| u64::from(t) * 7_777,
                ),
            ),
            // A thread that starts after every other ended, and one entirely before the cut.
            (
                "late",
                client_samples(
                    3,
                    |t| 600 + u64::from(t),
                    |t| [0, 900_000_000, 0][t as usize] * 3,
                ),
            ),
            ("one sample", client_samples(1, |_| 1, |_| 600_000_000)),
            (
                "one per thread",
                client_samples(4, |_| 1, |t| u64::from(t) * 400_000_000),
            ),
            ("all before the cut", client_samples(3, |_| 200, |_| 0)),
            ("empty", Vec::new()),
            // Trace groups beyond the small slots and fragment counts a table holds.
            ("large groups", {
                let mut samples = client_samples(3, |t| 2_000 + u64::from(t), |_| 0);
                for (i, sample) in samples.iter_mut().enumerate() {
                    if i % 7 == 0 {
                        sample.request_bytes = 64 + 512 * 300 + (i % 3) as u32 * 1024;
                    }
                    if i % 11 == 0 {
                        sample.slot = 17 + (i % 2) as u16;
                    }
                }
                samples
            }),
            // Trace groups of more than one piece of counted values (16 384), on one side of the point's two
            // runs of threads, and of fewer on the other: counted and uncounted parts merged. Narrow, and wide.
            (
                "groups of many pieces",
                client_samples(2, |t| [300_000, 20_000][t as usize], |_| 0),
            ),
            ("wide groups of many pieces", {
                let mut samples = client_samples(2, |t| [300_000, 20_000][t as usize], |_| 0);
                for sample in samples.iter_mut().step_by(101) {
                    sample.latency_last_piece_ns += 5_000_000_000;
                    sample.latency_ns += 5_000_000_000;
                }
                samples
            }),
            // A latency beyond 32 bits: the sidecar stores the column in 8 bytes, read into u64s.
            ("wide latencies", {
                let mut samples = client_samples(3, |t| 3_000 + u64::from(t), |_| 0);
                for sample in samples.iter_mut().step_by(97) {
                    sample.latency_last_piece_ns += 5_000_000_000;
                    sample.latency_ns += 5_000_000_000;
                }
                samples
            }),
        ];
        let mut keyed = Vec::new();
        for (name, samples) in &cases {
            let (with, without) = both_ways(root, name, samples)?;
            let sidecar = fracflow_record::by_thread::SamplesByThread::open(
                &with.dir.join(SAMPLES_BY_THREAD_FILE),
                &with.dir.join(SAMPLES_FILE),
            );
            if sidecar.is_ok_and(|sidecar| sidecar.keyed()) {
                keyed.push(*name);
            }
            for json in SPECS {
                let by_thread = run(root, json, std::slice::from_ref(&with))?;
                let parquet = run(root, json, std::slice::from_ref(&without))?;
                assert!(
                    by_thread.notes.is_empty(),
                    "{name}, {json}: {:?}",
                    by_thread.notes
                );
                assert_eq!(by_thread.tables, parquet.tables, "{name}, {json}");
            }
        }
        // Every case of several keys in a thread went through the keyed columns (a trace's groups read key by
        // key), the others through the rows in seq order.
        assert_eq!(
            keyed,
            [
                "pages",
                "late",
                "all before the cut",
                "large groups",
                "groups of many pieces",
                "wide groups of many pieces",
                "wide latencies"
            ]
        );
        Ok(())
    }

    /// A sidecar whose checksums hold but whose send times decrease within a thread (a writer that broke the
    /// format's promise, which no checksum catches) gives no blocks: the Parquet file's are used, and the note
    /// says why.
    #[test]
    fn blocks_from_a_sidecar_whose_send_times_decrease_come_from_the_parquet_file() -> TestResult {
        use fracflow_record::by_thread::page_checksum;
        let tmp = tempfile::tempdir()?;
        let root = tmp.path();
        let json = r#"{"stats":"samples","skip_s":0.5,"blocks_ms":100}"#;
        let samples = client_samples(1, |_| 5_000, |_| 0);
        let (with, without) = both_ways(root, "point", &samples)?;
        let expected = run(root, json, std::slice::from_ref(&without))?.tables;
        // Thread 0's row 4500 (on its second page, past the cut's page) sent at 0, its page checksum and the
        // directory's made to match.
        let sidecar = with.dir.join(SAMPLES_BY_THREAD_FILE);
        let bytes = with_directory(&std::fs::read(&sidecar)?, |data, directory| {
            let page_rows = directory.page_rows as usize;
            let offset = directory.threads[0].offset as usize;
            let row = 4_500;
            data[offset + row * 8..offset + row * 8 + 8].copy_from_slice(&0u64.to_le_bytes());
            let page = row / page_rows;
            let page_start = offset + page * page_rows * 8;
            let page_end = offset + (5_000 * 8).min((page + 1) * page_rows * 8);
            directory.threads[0].checksums[page] = page_checksum(&data[page_start..page_end]);
        })?;
        std::fs::write(&sidecar, &bytes)?;

        let result = run(root, json, std::slice::from_ref(&with))?;
        assert_eq!(result.tables["blocks"], expected["blocks"]);
        assert!(
            result
                .notes
                .iter()
                .any(|n| n.contains("thread 0: send times decrease") && n.contains("instead")),
            "{:?}",
            result.notes
        );
        Ok(())
    }

    /// `sidecar` with its data (header included) and its directory changed by `edit`, and its trailer (the
    /// directory's length and hash) made to match.
    fn with_directory(
        sidecar: &[u8],
        edit: impl FnOnce(&mut [u8], &mut fracflow_record::by_thread::Directory),
    ) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
        let mut bytes = sidecar.to_vec();
        let length = bytes.len();
        let directory_length =
            u64::from_le_bytes(bytes[length - 48..length - 40].try_into()?) as usize;
        let directory_start = length - 48 - directory_length;
        let mut directory = serde_json::from_slice(&bytes[directory_start..length - 48])?;
        edit(&mut bytes[..directory_start], &mut directory);
        let listing = serde_json::to_vec(&directory)?;
        bytes.truncate(directory_start);
        bytes.extend_from_slice(&listing);
        bytes.extend_from_slice(&(listing.len() as u64).to_le_bytes());
        bytes.extend_from_slice(blake3::hash(&listing).as_bytes());
        bytes.extend_from_slice(b"FRFLSBT\0");
        Ok(bytes)
    }

    /// `sidecar` rewritten as format `version` with its pages checksummed by `checksum`: the header's version
    /// and every page's checksum in the directory.
    fn rewritten(
        sidecar: &[u8],
        version: u32,
        checksum: fracflow_record::by_thread::PageChecksum,
    ) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
        with_directory(sidecar, |data, directory| {
            data[8..12].copy_from_slice(&version.to_le_bytes());
            let page_rows = u64::from(directory.page_rows);
            for thread in &mut directory.threads {
                let pages = thread.rows.div_ceil(page_rows);
                let mut column_start = thread.offset;
                for (c, column) in directory.columns.iter().enumerate() {
                    let width = u64::from(column.width);
                    for p in 0..pages {
                        let start = column_start + p * page_rows * width;
                        let end = start + page_rows.min(thread.rows - p * page_rows) * width;
                        thread.checksums[c * pages as usize + p as usize] =
                            checksum.of(&data[start as usize..end as usize]);
                    }
                    column_start += thread.rows * width;
                }
            }
        })
    }

    /// A sidecar of the first format (blake3 page checksums) is still read through; a version-1 header over
    /// format 2's checksums is corrupt, and a version this reader does not know is not used and says which.
    #[test]
    fn a_first_format_sidecar_is_read_and_an_unknown_version_is_not() -> TestResult {
        use fracflow_record::by_thread::{PageChecksum, VERSION};
        let tmp = tempfile::tempdir()?;
        let root = tmp.path();
        let samples = client_samples(3, |t| 5_000 + u64::from(t), |_| 0);
        let (with, without) = both_ways(root, "point", &samples)?;
        let sidecar = with.dir.join(SAMPLES_BY_THREAD_FILE);
        let written = std::fs::read(&sidecar)?;
        assert_eq!(
            written[8..12],
            VERSION.to_le_bytes(),
            "the writer's version"
        );
        assert_eq!(PageChecksum::of_version(VERSION), Some(PageChecksum::Xxh3));

        let reads = |bytes: &[u8], why: Option<&str>| -> TestResult {
            std::fs::write(&sidecar, bytes)?;
            for json in [
                r#"{"stats":"samples","skip_s":0.5,"cdf":{"points":20},"blocks_ms":100}"#,
                r#"{"stats":"trace","drop_fraction":0.25}"#,
            ] {
                let expected = run(root, json, std::slice::from_ref(&without))?.tables;
                let result = run(root, json, std::slice::from_ref(&with))?;
                assert_eq!(result.tables, expected, "{json}, {why:?}");
                match why {
                    None => assert!(result.notes.is_empty(), "{json}: {:?}", result.notes),
                    Some(why) => assert!(
                        !result.notes.is_empty()
                            && result
                                .notes
                                .iter()
                                .all(|n| n.contains(why) && n.contains("instead")),
                        "{json}, {why}: {:?}",
                        result.notes
                    ),
                }
            }
            Ok(())
        };
        reads(&rewritten(&written, 1, PageChecksum::Blake3)?, None)?;
        reads(
            &rewritten(&written, 1, PageChecksum::Xxh3)?,
            Some("has another checksum"),
        )?;
        let unknown = VERSION + 1;
        reads(
            &rewritten(&written, unknown, PageChecksum::Xxh3)?,
            Some(&format!("version {unknown}")),
        )?;
        Ok(())
    }

    #[test]
    fn a_stale_corrupt_or_unindexed_sidecar_is_not_used_and_says_why() -> TestResult {
        let tmp = tempfile::tempdir()?;
        let root = tmp.path();
        let json = r#"{"stats":"samples","skip_s":0.5,"drop_fraction":0.25,"cdf":{"points":20},"blocks_ms":100}"#;
        let samples = client_samples(3, |t| 5_000 + u64::from(t), |_| 0);
        let (with, without) = both_ways(root, "point", &samples)?;
        let expected = run(root, json, std::slice::from_ref(&without))?.tables;
        let sidecar = with.dir.join(SAMPLES_BY_THREAD_FILE);
        let good = std::fs::read(&sidecar)?;
        let parquet = std::fs::read(with.dir.join(SAMPLES_FILE))?;

        let assert_falls_back = |why: &str| -> TestResult {
            let result = run(root, json, std::slice::from_ref(&with))?;
            assert_eq!(result.tables, expected, "{why}");
            assert!(
                !result.notes.is_empty()
                    && result
                        .notes
                        .iter()
                        .all(|n| n.contains(why) && n.contains("instead")),
                "{why}: {:?}",
                result.notes
            );
            Ok(())
        };
        // A flipped byte in the page of send times where the cut falls: found when the page is read.
        let mut bad = good.clone();
        bad[16 + 3_000 * 8 + 100] ^= 1;
        std::fs::write(&sidecar, &bad)?;
        assert_falls_back("corrupt")?;
        // Cut short.
        std::fs::write(&sidecar, &good[..good.len() - 1])?;
        assert_falls_back("corrupt")?;
        // A sound sidecar of other samples: the Parquet file was rewritten after it.
        std::fs::write(&sidecar, &good)?;
        let other = client_samples(3, |_| 4_000, |_| 1);
        std::fs::create_dir_all(root.join("other"))?;
        fracflow_client::write_samples_parquet(&root.join("other").join(SAMPLES_FILE), &other)?;
        std::fs::copy(
            root.join("other").join(SAMPLES_FILE),
            with.dir.join(SAMPLES_FILE),
        )?;
        std::fs::copy(
            root.join("other").join(SAMPLES_FILE),
            without.dir.join(SAMPLES_FILE),
        )?;
        let expected_other = run(root, json, std::slice::from_ref(&without))?.tables;
        let result = run(root, json, std::slice::from_ref(&with))?;
        assert_eq!(result.tables, expected_other);
        assert!(
            result
                .notes
                .iter()
                .all(|n| n.contains("belongs to another")),
            "{:?}",
            result.notes
        );
        assert!(!result.notes.is_empty());
        // Samples the client did not write thread by thread: the sidecar says it holds none.
        std::fs::write(with.dir.join(SAMPLES_FILE), &parquet)?;
        let mut interleaved = samples.clone();
        interleaved.sort_by_key(|s| (s.seq, s.thread));
        fracflow_client::write_samples_parquet(&with.dir.join(SAMPLES_FILE), &interleaved)?;
        std::fs::copy(with.dir.join(SAMPLES_FILE), without.dir.join(SAMPLES_FILE))?;
        let result = run(root, json, std::slice::from_ref(&with))?;
        assert_eq!(
            result.tables,
            run(root, json, std::slice::from_ref(&without))?.tables
        );
        assert!(
            result.notes.iter().all(|n| n.contains("not indexed")),
            "{:?}",
            result.notes
        );
        assert!(!result.notes.is_empty());
        Ok(())
    }
}
