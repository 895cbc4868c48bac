//! Trace replay input (`-E`; `docs/tools.md` §1.11 and `docs/frac.md` §7,
//! "fperf §" and "frac §" below): the CSV
//! `app,sleep_time,request_size,response_size` and a synthetic generator
//! shaped like the Azure Functions trace (which is not redistributed here).

use std::fmt::Write as _;
use std::path::Path;

use fracflow_proto::{HEADER_LEN, MAX_REQUEST_BYTES, Unit};

use crate::rng::SplitMix64;

/// One row of a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceRow {
    /// Function id: 1 top_k, 2 cnn, 3 logit, 5 norm.
    pub app: u32,
    /// Seconds to wait after the previous response before sending this row.
    pub sleep_s: f64,
    /// Payload bytes, header excluded (the client adds the 64-byte header).
    pub request_size: u32,
    /// Response bytes as the file states them.
    pub response_size: u32,
}

impl TraceRow {
    /// The fixed slot of the row's app (fperf `func_slots[]`, frac §2.7):
    /// top_k → 0, logit → 1, cnn → 2, norm → 3.
    #[must_use]
    pub fn slot(&self) -> u16 {
        slot_of_app(self.app).unwrap_or(0)
    }

    /// Bytes on the wire: header + payload.
    #[must_use]
    pub fn wire_request_size(&self) -> u32 {
        self.request_size + HEADER_LEN as u32
    }

    /// Bytes the unit in the row's slot answers (newer fperf ignores the
    /// file's column in favour of this, fperf §1.11); the file's value if
    /// the app has no unit.
    #[must_use]
    pub fn expected_response_size(&self) -> u32 {
        Unit::from_function_id(self.app)
            .and_then(|u| u.response_size(self.wire_request_size()))
            .unwrap_or(self.response_size)
    }
}

/// The slot of a trace app id.
#[must_use]
pub fn slot_of_app(app: u32) -> Option<u16> {
    match app {
        1 => Some(0),
        3 => Some(1),
        2 => Some(2),
        5 => Some(3),
        _ => None,
    }
}

/// A trace that cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be read.
    #[error("cannot read trace {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The header line is not the expected one.
    #[error("trace header is {0:?}, expected \"app,sleep_time,request_size,response_size\"")]
    Header(String),
    /// A row does not parse or is out of range.
    #[error("trace line {line}: {why}")]
    Row {
        /// 1-based line number.
        line: usize,
        /// Why.
        why: String,
    },
    /// No rows.
    #[error("trace has no rows")]
    Empty,
    /// The file is larger than any trace this client replays.
    #[error("trace {path} is larger than {limit} bytes")]
    TooLarge {
        /// The file.
        path: String,
        /// The bound it exceeds.
        limit: u64,
    },
}

/// The largest trace file read: the real Azure trace is about 1.24 MB (frac §7); fifty times that still
/// parses in well under a second, and a file beyond it is not a trace of this format.
pub const MAX_TRACE_BYTES: u64 = 64 << 20;

/// Parses trace CSV text.
pub fn parse_trace(text: &str) -> Result<Vec<TraceRow>, TraceError> {
    let mut lines = text.lines().enumerate();
    // A byte-order mark is what a spreadsheet leaves in front of a CSV it saved.
    let header = lines
        .next()
        .map(|(_, l)| l.trim_start_matches('\u{feff}').trim())
        .unwrap_or_default();
    if header.replace(' ', "") != "app,sleep_time,request_size,response_size" {
        return Err(TraceError::Header(header.to_owned()));
    }
    let mut rows = Vec::new();
    for (i, line) in lines {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let row_err = |why: String| TraceError::Row { line: i + 1, why };
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != 4 {
            return Err(row_err(format!("{} fields, expected 4", fields.len())));
        }
        let int = |s: &str, what: &str| {
            // The real trace writes some integers as floats ("512.0").
            s.parse::<u32>().or_else(|_| {
                s.parse::<f64>()
                    .ok()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= f64::from(u32::MAX))
                    .map(|f| f as u32)
                    .ok_or_else(|| row_err(format!("{what} {s:?} is not a whole number")))
            })
        };
        let app = int(fields[0], "app")?;
        if slot_of_app(app).is_none() {
            return Err(row_err(format!(
                "app {app} is not 1 (top_k), 2 (cnn), 3 (logit) or 5 (norm)"
            )));
        }
        let sleep_s: f64 = fields[1]
            .parse()
            .ok()
            .filter(|f: &f64| f.is_finite() && *f >= 0.0)
            .ok_or_else(|| row_err(format!("sleep_time {:?} is not >= 0", fields[1])))?;
        let request_size = int(fields[2], "request_size")?;
        let response_size = int(fields[3], "response_size")?;
        if request_size == 0
            || !request_size.is_multiple_of(64)
            // Not `request_size + 64 > MAX`: near u32::MAX that sum wraps and a 4 GiB request would pass.
            || request_size > MAX_REQUEST_BYTES - HEADER_LEN as u32
        {
            return Err(row_err(format!(
                "request_size {request_size} must be whole 64-byte lines, 64..={}",
                MAX_REQUEST_BYTES - HEADER_LEN as u32
            )));
        }
        rows.push(TraceRow {
            app,
            sleep_s,
            request_size,
            response_size,
        });
    }
    if rows.is_empty() {
        return Err(TraceError::Empty);
    }
    Ok(rows)
}

/// Reads and parses a trace file (the real Azure file is accepted as is), at most [`MAX_TRACE_BYTES`].
pub fn read_trace(path: &Path) -> Result<Vec<TraceRow>, TraceError> {
    read_trace_bounded(path, MAX_TRACE_BYTES)
}

/// [`read_trace`] with another bound on the file's size.
pub fn read_trace_bounded(path: &Path, limit: u64) -> Result<Vec<TraceRow>, TraceError> {
    use std::io::Read as _;
    let io = |source| TraceError::Io {
        path: path.display().to_string(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    // One byte past the bound tells a file of exactly `limit` bytes from a larger one.
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(TraceError::TooLarge {
            path: path.display().to_string(),
            limit,
        });
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text ({e})"),
        ))
    })?;
    parse_trace(&text)
}

/// Trace rows as the file format's CSV, header first; [`parse_trace`] reads back the same rows (a float's
/// shortest round-trip text keeps every sleep time exact).
#[must_use]
pub fn format_trace(rows: &[TraceRow]) -> String {
    let mut out = String::from("app,sleep_time,request_size,response_size\n");
    for row in rows {
        let _ = writeln!(
            out,
            "{},{},{},{}",
            row.app, row.sleep_s, row.request_size, row.response_size
        );
    }
    out
}

/// Mean gap of the real trace: about an hour over 46 394 rows (frac §7).
pub const AZURE_MEAN_SLEEP_S: f64 = 3600.0 / 46_394.0;

/// [`synthetic_trace_with_mean_sleep`] with the real trace's mean gap.
#[must_use]
pub fn synthetic_trace(rows: usize, seed: u64) -> String {
    synthetic_trace_with_mean_sleep(rows, seed, AZURE_MEAN_SLEEP_S)
}

/// A synthetic trace with the Azure trace's columns, apps and sizes
/// (frac §7): top_k and logit payloads of 512, 1024, 2048 or 4096 bytes,
/// norm 4096, cnn 24576; responses 64 for top_k/cnn and the payload size
/// for logit/norm; exponential gaps with mean `mean_sleep_s` capped at
/// 15 s (the largest observed).  Its shape follows the observation in
/// frac §7: the first tenth interleaves top_k, norm and cnn, then come
/// long single-app stretches, logit last.  The source gives no app
/// proportions; every app appears whenever `rows >= 8`.
#[must_use]
pub fn synthetic_trace_with_mean_sleep(rows: usize, seed: u64, mean_sleep_s: f64) -> String {
    let mut rng = SplitMix64::new(seed);
    let mut out = String::from("app,sleep_time,request_size,response_size\n");
    let mixed = (rows / 10).max(rows.min(3));
    // Remaining rows: stretches of top_k, then cnn, norm, top_k, logit last.
    let rest = rows - mixed;
    let stretches = [(1u32, 4usize), (2, 1), (5, 1), (1, 2), (3, 2)];
    let weight: usize = stretches.iter().map(|s| s.1).sum();
    let mut apps = Vec::with_capacity(rows);
    let interleave = [1u32, 5, 2];
    for i in 0..mixed {
        apps.push(interleave[(i + rng.below(3) as usize) % 3]);
    }
    let mut left = rest;
    for (k, (app, w)) in stretches.iter().enumerate() {
        let n = if k + 1 == stretches.len() {
            left
        } else {
            (rest * w / weight).min(left)
        };
        apps.extend(std::iter::repeat_n(*app, n));
        left -= n;
    }
    for app in apps {
        let sleep = rng.exponential(mean_sleep_s).min(15.0);
        let size = match app {
            1 | 3 => 512u32 << rng.below(4),
            5 => 4096,
            _ => 24_576,
        };
        let response = if matches!(app, 1 | 2) { 64 } else { size };
        let _ = writeln!(out, "{app},{sleep:.6},{size},{response}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "app,sleep_time,request_size,response_size\n";

    #[test]
    fn a_request_size_whose_header_sum_wraps_is_refused() {
        // 4294967232 + 64 is 2^32: in a release build the sum wrapped to 0 and the row passed (found by fuzzing).
        let text = format!("{HEADER}1,0,4294967232,64\n");
        assert!(matches!(
            parse_trace(&text),
            Err(TraceError::Row { line: 2, .. })
        ));
        assert!(parse_trace(&format!("{HEADER}1,0,65408,64\n")).is_ok());
        assert!(parse_trace(&format!("{HEADER}1,0,65472,64\n")).is_err());
    }

    #[test]
    fn the_real_files_format_parses_with_float_integers_crlf_and_a_bom() {
        let text = "\u{feff}app,sleep_time,request_size,response_size\r\n1,0.0,512.0,64.0\r\n\
                    2,0.25,24576,64\r\n3,1.5,1024,1024\r\n5,0,4096,4096\r\n";
        let rows = parse_trace(text).expect("parses");
        assert_eq!(rows.len(), 4);
        assert_eq!(
            rows[0],
            TraceRow {
                app: 1,
                sleep_s: 0.0,
                request_size: 512,
                response_size: 64
            }
        );
        assert_eq!(
            rows.iter().map(TraceRow::slot).collect::<Vec<_>>(),
            [0, 2, 1, 3]
        );
        assert_eq!(rows[1].sleep_s, 0.25);
    }

    #[test]
    fn a_bad_row_names_its_line() {
        for (row, why) in [
            ("4,0,512,64", "app 4 is not 1 (top_k)"),
            ("1,-1,512,64", "sleep_time \"-1\" is not >= 0"),
            ("1,0,500,64", "request_size 500 must be whole 64-byte lines"),
            ("1,0,512", "3 fields, expected 4"),
            ("1,0,5x2,64", "request_size \"5x2\" is not a whole number"),
        ] {
            // Line 1 is the header, line 2 a good row, line 3 empty (skipped, still counted).
            let text = format!("{HEADER}1,0,512,64\n\n{row}\n");
            let error = parse_trace(&text).expect_err(row).to_string();
            assert!(
                error.starts_with("trace line 4: ") && error.contains(why),
                "{row}: {error}"
            );
        }
        let header = parse_trace("app,sleep\n1,0")
            .expect_err("header")
            .to_string();
        assert!(header.contains("expected \"app,sleep_time"), "{header}");
        assert!(matches!(parse_trace(HEADER), Err(TraceError::Empty)));
    }

    #[test]
    fn formatted_rows_read_back_the_same() {
        let rows = parse_trace(&synthetic_trace(200, 7)).expect("parses");
        assert_eq!(parse_trace(&format_trace(&rows)).expect("parses"), rows);
    }

    #[test]
    fn a_file_over_the_bound_is_refused_and_one_at_it_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("trace.csv");
        let text = format!("{HEADER}1,0,512,64\n");
        std::fs::write(&path, &text).expect("write");
        let size = text.len() as u64;
        assert_eq!(
            read_trace_bounded(&path, size).expect("at the bound").len(),
            1
        );
        let error = read_trace_bounded(&path, size - 1).expect_err("over");
        assert!(
            error
                .to_string()
                .ends_with(&format!("is larger than {} bytes", size - 1)),
            "{error}"
        );
        let missing = read_trace(&dir.path().join("none.csv")).expect_err("missing");
        assert!(
            missing.to_string().starts_with("cannot read trace "),
            "{missing}"
        );
    }
}
