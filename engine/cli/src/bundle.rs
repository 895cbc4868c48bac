//! The artifact-evaluation bundle `fracflow export` writes and `fracflow verify` checks: a zstd-compressed tar
//! of relative paths, laid out as the run directory is, so the report's links work once it is unpacked:
//!
//! ```text
//! SHA256SUMS        the sha256 of every other file (`sha256sum -c SHA256SUMS` checks an unpacked bundle)
//! manifest.json     the run's manifest
//! provenance.json   git commit, fracflow version, command line, host, testbed profile as used, tool versions,
//!                   the images and partials the device held
//! commands.json     every node's kind, sweep point and resolved configuration (a command node's `run` line)
//! figures.json      what `verify` needs to re-draw each figure: the plot node's spec, the dependencies whose
//!                   tables it drew from, and the provenance its footer carries
//! report.html       the run's report page
//! nodes/<node>/     figures, summary tables, verdicts, measurement summaries (raw samples with --with-samples)
//! logs/<node>.log   every node's log the run holds
//! ```

use std::io::{self, Read};
use std::path::{Component, Path};

use sha2::{Digest, Sha256};

pub const SUMS_FILE: &str = "SHA256SUMS";
pub const FIGURES_FILE: &str = "figures.json";

/// The largest file `verify` unpacks (raw samples of a long run are a few GB).
pub const MAX_FILE_BYTES: u64 = 16 << 30;
/// The most `verify` unpacks in all: a bundle that inflates beyond this is refused, not unpacked.
pub const MAX_TOTAL_BYTES: u64 = 64 << 30;
/// The most entries `verify` reads.
pub const MAX_ENTRIES: usize = 500_000;
/// The largest table `verify` re-draws a figure from (a figure's summary table is kilobytes; it is read whole).
pub const MAX_TABLE_BYTES: u64 = 256 << 20;
/// The largest `SHA256SUMS` or `figures.json` read into memory.
pub const MAX_INDEX_BYTES: u64 = 64 << 20;
/// The longest path inside a bundle.
const MAX_PATH_BYTES: usize = 1024;

/// One figure as `figures.json` records it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct FigureRecord {
    /// The plot node's id.
    pub node: String,
    /// Its folder under `nodes/`.
    pub dir: String,
    /// Its resolved configuration (the plot spec) and sweep point.
    pub config: serde_json::Map<String, serde_json::Value>,
    pub point: serde_json::Map<String, serde_json::Value>,
    /// The SVG files it drew, relative to `dir`.
    pub svgs: Vec<String>,
    /// The folders under `nodes/` of the dependencies it drew from, in the order it read them.
    pub dependencies: Vec<String>,
    /// The provenance its footer carries (the run's, as `fracflow plot` re-draws it).
    pub provenance: fracflow_record::Provenance,
}

/// Whether `path` is one a bundle may hold: relative, only plain components, no `..`, not empty, not too long.
pub fn is_safe_path(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= MAX_PATH_BYTES
        && !path.contains('\\')
        && !path.contains('\0')
        && Path::new(path)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

/// `path` with its components joined by single slashes (`a//b/` → `a/b`), when it is safe: the one spelling
/// under which a file is compared, so two spellings of one path cannot both be listed.
pub fn normalized(path: &str) -> Option<String> {
    if !is_safe_path(path) {
        return None;
    }
    let parts: Vec<String> = Path::new(path)
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    Some(parts.join("/"))
}

/// A single plain path component (a node folder's or a file's name).
pub fn is_plain_name(name: &str) -> bool {
    is_safe_path(name) && !name.contains('/')
}

/// Hex sha256 of everything read through it.
#[derive(Debug)]
pub struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    pub bytes: u64,
}

impl<R: Read> HashingReader<R> {
    pub fn new(inner: R) -> HashingReader<R> {
        HashingReader {
            inner,
            hasher: Sha256::new(),
            bytes: 0,
        }
    }

    pub fn hex(self) -> String {
        hex(&self.hasher.finalize())
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `SHA256SUMS` in `sha256sum`'s format: `<hex>  <path>` per line.
pub fn sums_text(sums: &[(String, String)]) -> String {
    sums.iter()
        .map(|(path, hash)| format!("{hash}  {path}\n"))
        .collect()
}

/// Parses `SHA256SUMS`: path → hash, in file order; an error names the first bad line.
pub fn parse_sums(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut sums: Vec<(String, String)> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (index, line) in text.lines().enumerate() {
        let bad = |why: &str| format!("{SUMS_FILE} line {}: {why}", index + 1);
        let Some((hash, path)) = line.split_once("  ") else {
            return Err(bad("expected `<sha256>  <path>`"));
        };
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("not a sha256 in hex"));
        }
        let Some(path) = normalized(path) else {
            return Err(bad(&format!(
                "`{path}` is not a relative path inside the bundle"
            )));
        };
        if !seen.insert(path.clone()) {
            return Err(bad(&format!("`{path}` is listed twice")));
        }
        sums.push((path, hash.to_ascii_lowercase()));
    }
    Ok(sums)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths_are_safe() {
        for good in ["SHA256SUMS", "nodes/fig/fig.svg", "logs/a[m=1].log"] {
            assert!(is_safe_path(good), "{good}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "nodes/../../x",
            "./x",
            "a\\b",
            "a\0b",
        ] {
            assert!(!is_safe_path(bad), "{bad}");
        }
        assert!(!is_plain_name("nodes/x"));
        assert!(is_plain_name("plot"));
    }

    #[test]
    fn sums_round_trip_and_bad_lines_are_named() {
        let sums = vec![("manifest.json".to_owned(), sha256_hex(b"{}"))];
        assert_eq!(parse_sums(&sums_text(&sums)), Ok(sums));
        let twice = format!("{0}  a\n{0}  a\n", "0".repeat(64));
        assert!(parse_sums(&twice).is_err_and(|e| e.contains("line 2")));
        let escape = format!("{}  ../a\n", "0".repeat(64));
        assert!(parse_sums(&escape).is_err());
        assert_eq!(normalized("nodes//fig/"), Some("nodes/fig".to_owned()));
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
