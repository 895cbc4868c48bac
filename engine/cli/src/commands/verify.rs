//! `fracflow verify FILE`: unpacks a bundle written by `fracflow export` into a temporary directory (refusing
//! links, absolute paths, `..` and anything over the size bounds of `bundle.rs`), checks every file against
//! `SHA256SUMS` and that nothing unlisted is present, then re-draws every figure from the bundle's own tables and
//! compares the SVG bytes (plotters writes an SVG deterministically: the same table and spec give the same bytes).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use clap::Args;

use crate::bundle::{self, FigureRecord, HashingReader};
use crate::error::{Error, Result};
use crate::exit::Exit;

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// A bundle written by `fracflow export` (FILE.tar.zst).
    pub bundle: PathBuf,
}

pub fn run(args: &VerifyArgs) -> Result<Exit> {
    let path = &args.bundle;
    let file = File::open(path).map_err(|e| Error::io("cannot open the bundle", path, e))?;
    let work = tempfile::tempdir()
        .map_err(|e| Error::internal("making a directory to unpack the bundle into", e))?;
    let unpacked = work.path().join("bundle");
    std::fs::create_dir(&unpacked)
        .map_err(|e| Error::internal("making a directory to unpack the bundle into", e))?;
    let hashes = unpack(file, &unpacked).map_err(|why| {
        Error::failed(format!(
            "{} is not a bundle fracflow verifies: {why}",
            path.display()
        ))
    })?;
    let mut problems = check_sums(&unpacked, &hashes);
    let (figures, figure_problems) = redraw_figures(&unpacked, &work.path().join("redrawn"));
    problems.extend(figure_problems);
    if !problems.is_empty() {
        return Err(Error::failed(format!(
            "{} failed verification, {} problem(s):\n  {}",
            path.display(),
            problems.len(),
            problems.join("\n  ")
        )));
    }
    println!(
        "verified {}: {} files match SHA256SUMS and nothing unlisted is present; {figures} figure(s) re-drawn \
         from the bundle's tables are identical",
        path.display(),
        hashes.len() - 1
    );
    Ok(Exit::Ok)
}

/// Unpacks every entry into `into`; path inside the bundle → sha256. Any entry that is not a plain file at a
/// safe path, a bundle over the bounds, or a corrupt stream ends it with the reason.
fn unpack(reader: impl Read, into: &Path) -> std::result::Result<BTreeMap<String, String>, String> {
    let decoder = zstd::Decoder::new(reader).map_err(|e| format!("not zstd-compressed: {e}"))?;
    let mut archive = tar::Archive::new(decoder);
    let mut hashes = BTreeMap::new();
    let mut total: u64 = 0;
    let entries = archive
        .entries()
        .map_err(|e| format!("not a tar archive: {e}"))?;
    for (index, entry) in entries.enumerate() {
        if index >= bundle::MAX_ENTRIES {
            return Err(format!("more than {} entries", bundle::MAX_ENTRIES));
        }
        let mut entry = entry.map_err(|e| format!("entry {}: {e}", index + 1))?;
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let Some(inside) = bundle::normalized(&raw) else {
            return Err(format!(
                "entry `{raw}`: not a relative path inside the bundle (absolute, `..`, or empty)"
            ));
        };
        match entry.header().entry_type() {
            tar::EntryType::Directory => continue,
            tar::EntryType::Regular | tar::EntryType::Continuous => {}
            other => {
                return Err(format!(
                    "entry `{inside}`: a {other:?} entry; a bundle holds plain files only (no links)"
                ));
            }
        }
        let size = entry
            .header()
            .size()
            .map_err(|e| format!("entry `{inside}`: {e}"))?;
        if size > bundle::MAX_FILE_BYTES {
            return Err(format!(
                "entry `{inside}`: {size} bytes, more than the {} a bundle file may have",
                bundle::MAX_FILE_BYTES
            ));
        }
        total = total.saturating_add(size);
        if total > bundle::MAX_TOTAL_BYTES {
            return Err(format!(
                "more than {} bytes unpacked",
                bundle::MAX_TOTAL_BYTES
            ));
        }
        if hashes.contains_key(&inside) {
            return Err(format!("entry `{inside}` appears twice"));
        }
        let target = into.join(&inside);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("entry `{inside}`: {e}"))?;
        }
        // `create_new`: every directory on the way was made here from plain components, so nothing in it is
        // a link; an entry that collides with a directory of another fails.
        let mut out = File::options()
            .write(true)
            .create_new(true)
            .open(&target)
            .map_err(|e| format!("entry `{inside}`: {e}"))?;
        let mut reader = HashingReader::new((&mut entry).take(size));
        io::copy(&mut reader, &mut out).map_err(|e| format!("entry `{inside}`: {e}"))?;
        if reader.bytes != size {
            return Err(format!(
                "entry `{inside}`: {} of {size} bytes (the bundle is cut short)",
                reader.bytes
            ));
        }
        hashes.insert(inside, reader.hex());
    }
    if !hashes.contains_key(bundle::SUMS_FILE) {
        return Err(format!("no {} in it", bundle::SUMS_FILE));
    }
    Ok(hashes)
}

/// Reads a small file of the unpacked bundle (an index), bounded.
fn read_index(unpacked: &Path, name: &str) -> std::result::Result<Vec<u8>, String> {
    let path = unpacked.join(name);
    let size = std::fs::metadata(&path)
        .map_err(|e| format!("{name}: {e}"))?
        .len();
    if size > bundle::MAX_INDEX_BYTES {
        return Err(format!(
            "{name}: {size} bytes, more than the {} read",
            bundle::MAX_INDEX_BYTES
        ));
    }
    std::fs::read(&path).map_err(|e| format!("{name}: {e}"))
}

/// Every file against `SHA256SUMS`, and every file present listed there; one problem per file.
fn check_sums(unpacked: &Path, hashes: &BTreeMap<String, String>) -> Vec<String> {
    let text = match read_index(unpacked, bundle::SUMS_FILE) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => return vec![e],
    };
    let sums = match bundle::parse_sums(&text) {
        Ok(sums) => sums,
        Err(e) => return vec![e],
    };
    let mut problems = Vec::new();
    let listed: BTreeMap<&str, &str> = sums.iter().map(|(p, h)| (p.as_str(), h.as_str())).collect();
    for (path, hash) in &listed {
        match hashes.get(*path) {
            None => problems.push(format!(
                "{path}: listed in {} but not in the bundle",
                bundle::SUMS_FILE
            )),
            Some(actual) if actual != hash => problems.push(format!(
                "{path}: its sha256 is not the one {} lists (the file was changed)",
                bundle::SUMS_FILE
            )),
            Some(_) => {}
        }
    }
    for path in hashes.keys() {
        if path != bundle::SUMS_FILE && !listed.contains_key(path.as_str()) {
            problems.push(format!(
                "{path}: in the bundle but not listed in {}",
                bundle::SUMS_FILE
            ));
        }
    }
    problems
}

/// Re-draws every figure of `figures.json` into `out` and compares it with the bundle's; returns how many SVG
/// files were compared, and one problem per figure that differs or cannot be drawn.
fn redraw_figures(unpacked: &Path, out: &Path) -> (usize, Vec<String>) {
    let figures: Vec<FigureRecord> =
        match read_index(unpacked, bundle::FIGURES_FILE).and_then(|bytes| {
            serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", bundle::FIGURES_FILE))
        }) {
            Ok(figures) => figures,
            Err(e) => return (0, vec![e]),
        };
    let mut compared = 0;
    let mut problems = Vec::new();
    for figure in &figures {
        match redraw_one(unpacked, out, figure) {
            Ok((count, mut differ)) => {
                compared += count;
                problems.append(&mut differ);
            }
            Err(e) => problems.push(format!("figure of node `{}`: {e}", figure.node)),
        }
    }
    (compared, problems)
}

fn redraw_one(
    unpacked: &Path,
    out: &Path,
    figure: &FigureRecord,
) -> std::result::Result<(usize, Vec<String>), String> {
    let names = std::iter::once(&figure.dir)
        .chain(&figure.dependencies)
        .chain(&figure.svgs);
    if let Some(bad) = names.into_iter().find(|n| !bundle::is_plain_name(n)) {
        return Err(format!(
            "{}: `{bad}` is not a plain file or folder name",
            bundle::FIGURES_FILE
        ));
    }
    // The figure's name becomes the names of the files drawn; it must stay inside the directory drawn into.
    let figure_name = figure.config.get("figure").and_then(|v| v.as_str());
    if !figure_name.is_some_and(bundle::is_plain_name) {
        return Err(format!(
            "{}: the plot spec's `figure` is not a plain name",
            bundle::FIGURES_FILE
        ));
    }
    let name = figure
        .node
        .split_once('[')
        .map_or(figure.node.as_str(), |(n, _)| n);
    let spec: fracflow_core::NodeSpec = serde_json::from_value(serde_json::json!({
        "id": figure.node,
        "name": name,
        "kind": "plot",
        "config": figure.config,
        "point": figure.point,
        "deps": [],
        "inputs": [],
        "outputs": figure.svgs,
        "resources": [],
        "retries": 0,
        "timeout": null,
        "estimate": null,
        "origin": {"file": bundle::FIGURES_FILE, "line": 0, "column": 0},
    }))
    .map_err(|e| format!("{}: {e}", bundle::FIGURES_FILE))?;
    let mut dep_dirs = Vec::new();
    for dependency in &figure.dependencies {
        let dir = unpacked.join("nodes").join(dependency);
        if !dir.is_dir() {
            return Err(format!(
                "the tables it drew from (nodes/{dependency}/) are not in the bundle"
            ));
        }
        let entries = std::fs::read_dir(&dir).map_err(|e| format!("nodes/{dependency}/: {e}"))?;
        for entry in entries.flatten() {
            let size = entry.metadata().map_or(0, |m| m.len());
            if size > bundle::MAX_TABLE_BYTES {
                return Err(format!(
                    "nodes/{dependency}/{}: {size} bytes, more than the {} a table it re-draws from may have",
                    entry.file_name().to_string_lossy(),
                    bundle::MAX_TABLE_BYTES
                ));
            }
        }
        dep_dirs.push(dir);
    }
    let drawn_dir = out.join(&figure.dir);
    std::fs::create_dir_all(&drawn_dir).map_err(|e| format!("{}: {e}", drawn_dir.display()))?;
    fracflow_executors::analysis::redraw(&spec, &dep_dirs, &figure.provenance, &drawn_dir)
        .map_err(|e| format!("cannot re-draw it from the bundle's tables: {e}"))?;
    let tables = figure
        .dependencies
        .iter()
        .map(|d| format!("nodes/{d}/"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut differ = Vec::new();
    for svg in &figure.svgs {
        let inside = format!("nodes/{}/{svg}", figure.dir);
        let original = std::fs::read(unpacked.join(&inside));
        let drawn = std::fs::read(drawn_dir.join(svg));
        match (original, drawn) {
            (Ok(original), Ok(drawn)) if original == drawn => {}
            (Ok(_), Ok(_)) => differ.push(format!(
                "{inside}: differs from the figure re-drawn from the tables in {tables}"
            )),
            (Err(_), _) => differ.push(format!("{inside}: the figure is not in the bundle")),
            (_, Err(_)) => differ.push(format!("{inside}: re-drawing from {tables} made no {svg}")),
        }
    }
    Ok((figure.svgs.len(), differ))
}
