//! The sample readers of `aggregate`, on a `samples.parquet` or a `samples.by-thread` sidecar from anywhere (a
//! bundle, a remote cache, a run directory someone edited).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use fracflow_aggregate::{AggregateSpec, Cell, PointSource, Table, aggregate};
use fracflow_record::by_thread::{
    Directory, STORED_COLUMNS, SamplesByThread, page_checksum, write_samples_by_thread,
};
use fracflow_record::{SAMPLES_BY_THREAD_FILE, SAMPLES_FILE};

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
    let file = point.join(SAMPLES_FILE);
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

/// The samples behind the fixed `samples.parquet` of [`samples_by_thread`]: three threads of uneven length, each
/// in seq order, sent over 300 ms, four slots and three request sizes.
pub fn by_thread_samples() -> Vec<fracflow_client::Sample> {
    (0..40u32)
        .map(|i| {
            let (thread, seq) = if i < 20 {
                (0, i)
            } else {
                (1 + (i - 20) / 12, (i - 20) % 12)
            };
            fracflow_client::Sample {
                thread,
                seq: u64::from(seq),
                t_send_ns: u64::from(seq) * 15_000_000 + u64::from(thread),
                latency_ns: 4_000 + u64::from(i % 7) * 300,
                latency_last_piece_ns: 3_500 + u64::from(i % 7) * 300 + u64::from(i / 13) * 40_000,
                slot: (i % 4) as u16,
                request_bytes: 64 + 512 * (i % 3),
                response_bytes: 64,
            }
        })
        .collect()
}

/// Two points of [`by_thread_samples`]: `with/` gets the input as its sidecar, `without/` has none.
fn by_thread_points() -> Option<&'static (PathBuf, PathBuf)> {
    static POINTS: OnceLock<Option<(PathBuf, PathBuf)>> = OnceLock::new();
    POINTS
        .get_or_init(|| {
            let root = scratch().root.join("fuzz_by_thread");
            let (with, without) = (root.join("with"), root.join("without"));
            std::fs::create_dir_all(&with).ok()?;
            std::fs::create_dir_all(&without).ok()?;
            fracflow_client::write_samples_parquet(
                &without.join(SAMPLES_FILE),
                &by_thread_samples(),
            )
            .ok()?;
            std::fs::remove_file(without.join(SAMPLES_BY_THREAD_FILE)).ok()?;
            std::fs::copy(without.join(SAMPLES_FILE), with.join(SAMPLES_FILE)).ok()?;
            Some((with, without))
        })
        .as_ref()
}

/// The sidecar the client writes for [`by_thread_samples`]' Parquet file: the seed the corpus starts from.
pub fn by_thread_sidecar() -> Option<Vec<u8>> {
    let (_, without) = by_thread_points()?;
    let dir = tempfile::tempdir().ok()?;
    let path = dir.path().join(SAMPLES_BY_THREAD_FILE);
    write_samples_by_thread(
        &path,
        &without.join(SAMPLES_FILE),
        &by_thread_samples(),
        fracflow_client::Sample::by_thread_row,
    )
    .ok()?;
    std::fs::read(path).ok()
}

/// The trailer: directory length (u64), the directory's blake3, the magic.
const TRAILER_BYTES: usize = 48;

/// Recomputes the checksum of every page the directory places inside the file, so that mutated data reaches
/// the decoding instead of stopping at a checksum.
fn recheck_pages(bytes: &mut Vec<u8>) {
    let Some(data_end) = directory_start(bytes) else {
        return;
    };
    let Ok(mut directory) =
        serde_json::from_slice::<Directory>(&bytes[data_end..bytes.len() - TRAILER_BYTES])
    else {
        return;
    };
    let page_rows = u64::from(directory.page_rows.max(1));
    let widths: Vec<u64> = directory
        .columns
        .iter()
        .map(|c| u64::from(c.width))
        .collect();
    for thread in &mut directory.threads {
        let pages = thread.rows.div_ceil(page_rows);
        if thread.checksums.len() as u64 != pages.saturating_mul(widths.len() as u64) {
            continue;
        }
        let mut column_start = thread.offset;
        for (c, &width) in widths.iter().enumerate() {
            for p in 0..pages {
                let start = column_start.saturating_add(p * page_rows * width);
                let end =
                    start.saturating_add((page_rows.min(thread.rows - p * page_rows)) * width);
                if let Some(page) = bytes.get(start as usize..end as usize) {
                    thread.checksums[c * pages as usize + p as usize] = page_checksum(page);
                }
            }
            column_start = column_start.saturating_add(thread.rows.saturating_mul(width));
        }
    }
    if let Ok(json) = serde_json::to_vec(&directory) {
        bytes.truncate(data_end);
        bytes.extend_from_slice(&json);
        bytes.extend_from_slice(&[0; TRAILER_BYTES]);
        let len = bytes.len();
        bytes[len - TRAILER_BYTES..len - 40].copy_from_slice(&(json.len() as u64).to_le_bytes());
        bytes[len - 8..].copy_from_slice(b"FRFLSBT\0");
    }
}

/// Where the directory starts, as the trailer says, when that is inside the file.
fn directory_start(bytes: &[u8]) -> Option<usize> {
    let trailer = bytes.len().checked_sub(TRAILER_BYTES)?;
    let mut len = [0u8; 8];
    len.copy_from_slice(&bytes[trailer..trailer + 8]);
    trailer.checked_sub(usize::try_from(u64::from_le_bytes(len)).ok()?)
}

/// Writes the blake3 of the directory into the trailer, so that a mutated directory reaches the parser.
fn reseal(bytes: &mut [u8]) {
    let Some(start) = directory_start(bytes) else {
        return;
    };
    let len = bytes.len();
    let digest = blake3::hash(&bytes[start..len - TRAILER_BYTES]);
    bytes[len - 40..len - 8].copy_from_slice(digest.as_bytes());
}

/// The first byte chooses (bit 0) to reseal the directory's checksum, (bit 1) to recompute the pages' checksums
/// first, (bit 2) the histogram path, (bit 3) a trace; the rest is a `samples.by-thread` beside a fixed, sound
/// `samples.parquet`. The reader refuses what it cannot read with an error; when aggregation does not use the
/// sidecar it says so and its tables are exactly the Parquet file's; when it does use it, every request the
/// sidecar holds is counted once.
pub fn samples_by_thread(data: &[u8]) {
    let Some((&mode, sidecar)) = data.split_first() else {
        return;
    };
    let Some((with, without)) = by_thread_points() else {
        return;
    };
    let mut bytes = sidecar.to_vec();
    if mode & 2 != 0 {
        recheck_pages(&mut bytes);
    }
    if mode & 3 != 0 {
        reseal(&mut bytes);
    }
    let path = with.join(SAMPLES_BY_THREAD_FILE);
    if std::fs::write(&path, &bytes).is_err() {
        return;
    }
    let mut stored_rows = None;
    if let Ok(file) = SamplesByThread::open(&path, &with.join(SAMPLES_FILE)) {
        let threads: Vec<(u32, u64)> = file.threads().collect();
        let mut readable = true;
        for (index, &(_, rows)) in threads.iter().enumerate() {
            for column in STORED_COLUMNS {
                let mut out = vec![0u64; rows as usize];
                readable &= file.read_rows(index, column, 0..rows, &mut out).is_ok();
            }
            for ns in [0, 1, 100_000_000, u64::MAX] {
                if let Ok(first) = file.first_row_sent_from(index, ns) {
                    assert!(first <= rows, "row {first} of {rows}");
                }
            }
        }
        stored_rows = readable.then(|| file.rows());
    }

    let stats = if mode & 8 != 0 { "trace" } else { "samples" };
    let extra = if mode & 8 != 0 {
        ""
    } else {
        r#","cdf":{"points":10},"blocks_ms":100"#
    };
    let exact_max = if mode & 4 != 0 { 0 } else { 1 << 20 };
    let spec_json = format!(
        r#"{{"stats":"{stats}","skip_s":0.05,"drop_fraction":0.25,"exact_max_samples":{exact_max}{extra}}}"#
    );
    let no_cuts = format!(r#"{{"stats":"{stats}","exact_max_samples":{exact_max}}}"#);
    let scratch = scratch();
    let run = |json: &str, dir: &PathBuf, name: &str| {
        let spec: AggregateSpec = match serde_json::from_str(json) {
            Ok(spec) => spec,
            Err(e) => panic!("the fixed aggregate spec does not parse: {e}"),
        };
        let points = [PointSource {
            labels: BTreeMap::from([("series".to_owned(), Cell::Text("fuzz".to_owned()))]),
            dir: dir.clone(),
            member: None,
        }];
        aggregate(&spec, &points, &scratch.root.join(name))
    };
    for json in [&spec_json, &no_cuts] {
        let Ok(expected) = run(json, without, "fuzz_by_thread_expected") else {
            panic!("the fixed samples.parquet does not aggregate");
        };
        let Ok(actual) = run(json, with, "fuzz_by_thread_actual") else {
            panic!("a sidecar turned a readable point into an error");
        };
        if !actual.notes.is_empty() {
            assert_eq!(
                actual.tables, expected.tables,
                "a sidecar not used changed the tables"
            );
        } else if json == &no_cuts
            && stats == "samples"
            && let Some(rows) = stored_rows
        {
            let Some(summary) = actual.tables.get("summary") else {
                panic!("an aggregation without its summary table");
            };
            assert_eq!(
                number(summary, "requests"),
                Some(rows as f64),
                "requests against the stored rows"
            );
        }
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
