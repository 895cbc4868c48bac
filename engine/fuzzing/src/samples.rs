//! The Parquet sample reader of `aggregate`, on a `samples.parquet` from anywhere (a bundle, a remote cache,
//! a run directory someone edited).

use std::collections::BTreeMap;
use std::path::{Component, Path};

use fracflow_aggregate::{AggregateSpec, Cell, PointSource, Table, aggregate};

use crate::scratch::scratch;

fn number(table: &Table, column: &str) -> Option<f64> {
    let at = table.column(column)?;
    match table.rows.first()?.get(at)? {
        Cell::Num(value) => Some(*value),
        _ => None,
    }
}

/// The input as one point's `samples.parquet`, summarised by an `aggregate` node without cuts (exact
/// quantiles, or every point on the histogram path when the file's length is odd). When both it and the client's
/// own reader take the file, the summary counts exactly the rows that reader finds, and its median lies within
/// the smallest and largest latency of those rows.
pub fn samples_parquet(data: &[u8]) {
    let scratch = scratch();
    let point = scratch.root.join("fuzz_point");
    let out = scratch.root.join("fuzz_aggregate");
    if std::fs::create_dir_all(&point).is_err() || std::fs::create_dir_all(&out).is_err() {
        return;
    }
    let file = point.join(fracflow_record::SAMPLES_FILE);
    if std::fs::write(&file, data).is_err() {
        return;
    }
    // Parquet files all start with `PAR1`: the length's parity picks the path instead.
    let exact_max = if data.len() % 2 == 1 { 0 } else { 1 << 20 };
    let spec_json = format!(
        r#"{{"stats": "samples", "skip_s": 0, "latency": "last_piece", "exact_max_samples": {exact_max}}}"#
    );
    let spec: AggregateSpec = match serde_json::from_str(&spec_json) {
        Ok(spec) => spec,
        Err(e) => panic!("the fixed aggregate spec does not parse: {e}"),
    };
    let points = [PointSource {
        labels: BTreeMap::from([("series".to_owned(), Cell::Text("fuzz".to_owned()))]),
        dir: point.clone(),
        member: None,
    }];
    let Ok(aggregated) = aggregate(&spec, &points, &out) else {
        return;
    };
    // Aggregate reads only the columns it needs, so it may take a file the client's whole-schema reader does not.
    let Ok(samples) = fracflow_client::read_samples_parquet(&file) else {
        return;
    };
    let Some(summary) = aggregated.tables.get("summary") else {
        panic!("an aggregation without its summary table");
    };
    let requests = number(summary, "requests");
    assert_eq!(
        requests,
        Some(samples.len() as f64),
        "requests against the rows"
    );
    if let (Some(median), Some(low), Some(high)) = (
        number(summary, "median_us"),
        samples.iter().map(|s| s.latency_last_piece_ns).min(),
        samples.iter().map(|s| s.latency_last_piece_ns).max(),
    ) {
        let (low, high) = (low as f64 / 1000.0, high as f64 / 1000.0);
        // The histogram path keeps three significant digits.
        let slack = high * 1e-3 + 1e-3;
        assert!(
            median >= low - slack && median <= high + slack,
            "median {median} µs outside [{low}, {high}]"
        );
    }
}

/// For the libFuzzer build of `samples_parquet`, called once after libfuzzer-sys installed its panic hook (which
/// aborts at every panic, before any `catch_unwind` can see it): a panic raised inside the `parquet` crate
/// unwinds instead, silently, so that the readers' guard ([`fracflow_record::samples::next_batch`]) makes it the
/// file's error as it does in fracflow. Every other panic still goes to libFuzzer's hook. A parquet panic that no
/// guard catches still ends the run: libfuzzer-sys aborts on any panic that leaves the target (without a
/// message then; the stable replay of the input prints it).
pub fn let_parquet_panics_unwind() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info
            .location()
            .is_some_and(|at| in_parquet_crate(Path::new(at.file())))
        {
            previous(info);
        }
    }));
}

/// Whether a source path is the `parquet` crate's, as Cargo unpacks it (`…/parquet-60.1.0/src/…`); not
/// `polars-parquet`'s, which no guard covers.
fn in_parquet_crate(file: &Path) -> bool {
    file.components().any(|part| match part {
        Component::Normal(name) => name
            .to_str()
            .and_then(|name| name.strip_prefix("parquet-"))
            .is_some_and(|version| version.starts_with(|c: char| c.is_ascii_digit())),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_parquet_crates_sources_count_as_parquet() {
        let registry = "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f";
        assert!(in_parquet_crate(Path::new(&format!(
            "{registry}/parquet-60.1.0/src/column/reader/decoder.rs"
        ))));
        for elsewhere in [
            format!("{registry}/polars-parquet-0.55.2/src/parquet/read/mod.rs"),
            format!("{registry}/parquet-format-safe-0.2.4/src/lib.rs"),
            "engine/client/src/samples.rs".to_owned(),
            "engine/fuzzing/src/parquet-like/mod.rs".to_owned(),
        ] {
            assert!(!in_parquet_crate(Path::new(&elsewhere)), "{elsewhere}");
        }
    }
}
