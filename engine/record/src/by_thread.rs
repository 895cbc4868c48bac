//! `samples.by-thread`: the columns of `samples.parquet` that aggregation's cuts and groups read, stored per
//! client thread in seq order, in checksummed pages of raw little-endian integers. The client writes it beside
//! the Parquet file (which stays, for pandas users); aggregation reads it when it belongs to that file and falls
//! back to the Parquet file otherwise.
//!
//! Why this shape: in seq order with non-decreasing send times, both cuts of a thread (`skip_s` on the send
//! time, then the first ⌊kept · drop_fraction⌋ in seq order) leave one contiguous range of rows, found by a
//! binary search over each page's first send time and one page read. Only the kept rows of the latency column
//! are read then, with no decompression, in the narrowest width that holds the column.
//!
//! ```text
//! header   "FRFLSBT\0", version (u32), 0 (u32)                                 16 bytes
//! data     per thread, per stored column: its rows in pages of `page_rows`      raw LE integers of `width` bytes
//! directory JSON (Directory)
//! trailer  directory length (u64), blake3 of the directory (32), "FRFLSBT\0"   48 bytes
//! ```
//!
//! The directory records which Parquet file the sidecar belongs to (its length and the blake3 of its footer,
//! which holds every column chunk's offset, compressed size and min/max statistics), each column's width, and
//! per thread its row count, where its data starts, each page's first send time and each page's checksum (its
//! xxh3 since version 2, the first 8 bytes of its blake3 in version 1, which readers still read). A
//! file is hostile input: every size is checked against the file's length before anything is allocated or read,
//! and a page whose checksum differs is an error, never data.
//!
//! Keyed columns (version 3). A trace point's requests have several keys (slot, request bytes), and its
//! statistics are per group of keys. Grouping rows stored in seq order sends each row's latency to one of the
//! point's groups, a scatter that was most of what was left of a trace's aggregation. So a point with a thread
//! of more than one key also stores its latency columns in key order ([`KEYED_COLUMNS`]): per thread, the rows of each key
//! together, keys in increasing order, each key's rows in seq order. The thread's directory entry lists its keys
//! ([`KeyRows`]) with, per page of the thread, how many of the key's rows are in the pages before it; a cut at
//! row `r` keeps, of each key, the rows from that count plus those of the key in `r`'s page before `r` (one page
//! of slots and request sizes read). Points with one key, or too many, have no keyed columns.

use std::collections::HashMap;
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::samples::SampleColumn;

/// The sidecar's name beside `samples.parquet` ([`sidecar_path`]).
pub const SAMPLES_BY_THREAD_FILE: &str = "samples.by-thread";

/// Where the sidecar of the Parquet samples file `parquet` is: beside it, its extension `by-thread`.
pub fn sidecar_path(parquet: &Path) -> PathBuf {
    parquet.with_extension("by-thread")
}

/// The format's version, which the writer writes. Readers read it, version 2 (the same without keyed columns)
/// and version 1, whose pages were checksummed with blake3 ([`PageChecksum`]), and refuse any other.
pub const VERSION: u32 = 3;

const MAGIC: &[u8; 8] = b"FRFLSBT\0";
const HEADER_BYTES: u64 = 16;
const TRAILER_BYTES: u64 = 48;

/// Rows per page: a cut's boundary costs one page read of the send times (32 KiB), and a checksum covers a
/// page, so this is also the granularity of what a read touches beyond the rows it keeps.
pub const PAGE_ROWS: u32 = 4096;

/// Readers refuse directories above this (a 100 M-row point's is about 2 MiB).
const MAX_DIRECTORY_BYTES: u64 = 64 << 20;
/// Readers refuse pages above this many rows.
const MAX_PAGE_ROWS: u32 = 1 << 20;
/// Thread ids index per-thread arrays; anything larger is a corrupt file, not a real client.
pub const MAX_THREAD_ID: u32 = 1 << 16;
/// A Parquet footer above this is not one the client wrote.
const MAX_PARQUET_FOOTER_BYTES: u64 = 256 << 20;

/// The columns stored, in data order: what the send-time cut, the latencies and a trace's groups need.
pub const STORED_COLUMNS: [SampleColumn; 5] = [
    SampleColumn::TSendNs,
    SampleColumn::LatencyNs,
    SampleColumn::LatencyLastPieceNs,
    SampleColumn::Slot,
    SampleColumn::RequestBytes,
];

/// The latency columns stored a second time in key order, after [`STORED_COLUMNS`], in a point with keys.
pub const KEYED_COLUMNS: [SampleColumn; 2] =
    [SampleColumn::LatencyNs, SampleColumn::LatencyLastPieceNs];

/// A keyed column's name in the directory: its column's, then this.
const KEYED_SUFFIX: &str = "@key";

/// A thread with more keys than this has no keyed columns (nor has its point): a trace has a few functions and
/// request sizes, and each key costs the directory a count per page.
const MAX_KEYS: usize = 256;

/// Nor has a point whose keys' page counts would add up to more entries than this (a directory of a few MiB).
const MAX_KEY_PAGE_ENTRIES: usize = 1 << 20;

/// One request, as the sidecar's writer needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleRow {
    pub thread: u32,
    pub seq: u64,
    pub t_send_ns: u64,
    pub latency_ns: u64,
    pub latency_last_piece_ns: u64,
    pub slot: u32,
    pub request_bytes: u32,
}

impl SampleRow {
    fn value(&self, column: SampleColumn) -> u64 {
        match column {
            SampleColumn::Thread => u64::from(self.thread),
            SampleColumn::Seq => self.seq,
            SampleColumn::TSendNs => self.t_send_ns,
            SampleColumn::LatencyNs => self.latency_ns,
            SampleColumn::LatencyLastPieceNs => self.latency_last_piece_ns,
            SampleColumn::Slot => u64::from(self.slot),
            SampleColumn::RequestBytes => u64::from(self.request_bytes),
            SampleColumn::ResponseBytes => 0,
        }
    }
}

/// Which Parquet file a sidecar belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParquetIdentity {
    /// The file's length.
    pub bytes: u64,
    /// blake3 (hex) of the footer: the Thrift metadata, its length and the closing `PAR1`.
    pub footer_blake3: String,
}

impl ParquetIdentity {
    /// Reads the identity of the Parquet file at `path`: its length and the hash of its footer, without
    /// decoding anything.
    pub fn of(path: &Path) -> io::Result<ParquetIdentity> {
        let mut file = File::open(path)?;
        let bytes = file.metadata()?.len();
        let invalid = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_owned());
        if bytes < 12 {
            return Err(invalid("too short for a Parquet file"));
        }
        let mut tail = [0u8; 8];
        file.seek(SeekFrom::Start(bytes - 8))?;
        file.read_exact(&mut tail)?;
        if &tail[4..] != b"PAR1" {
            return Err(invalid("no closing PAR1"));
        }
        let footer = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]])) + 8;
        if footer > bytes - 4 || footer > MAX_PARQUET_FOOTER_BYTES {
            return Err(invalid("the footer length exceeds the file"));
        }
        let mut hasher = blake3::Hasher::new();
        file.seek(SeekFrom::Start(bytes - footer))?;
        io::copy(&mut (&mut file).take(footer), &mut hasher)?;
        Ok(ParquetIdentity {
            bytes,
            footer_blake3: hasher.finalize().to_hex().to_string(),
        })
    }
}

/// A stored column and the width of its values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredColumn {
    pub name: String,
    /// Bytes per value: 1, 2, 4 or 8 — the narrowest that holds the column's largest value.
    pub width: u8,
}

/// One thread's rows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadLayout {
    pub thread: u32,
    pub rows: u64,
    /// Where its data starts: each stored column's rows in turn, in the directory's column order.
    pub offset: u64,
    /// Per page, the send time of its first row (non-decreasing: the send times are, in seq order).
    pub first_send_ns: Vec<u64>,
    /// Per column, per page (column-major): the page's checksum ([`PageChecksum`] of the file's version).
    pub checksums: Vec<u64>,
    /// Its keys in increasing order, when the file has keyed columns; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<KeyRows>,
}

/// One key's rows in a thread: in the keyed columns, after the rows of the keys before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRows {
    pub slot: u32,
    pub request_bytes: u32,
    pub rows: u64,
    /// Per page of the thread, how many of the key's rows are in the pages before it.
    pub before_page: Vec<u64>,
}

/// The directory at the end of the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Directory {
    pub parquet: ParquetIdentity,
    pub page_rows: u32,
    pub columns: Vec<StoredColumn>,
    pub threads: Vec<ThreadLayout>,
    /// Why the samples could not be stored by thread (a thread's send times decrease in seq order, or a seq
    /// repeats): readers use the Parquet file. `threads` is empty then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_indexed: Option<String>,
}

/// Why a sidecar was not used.
#[derive(Debug)]
pub enum ByThreadError {
    Io {
        path: PathBuf,
        source: io::Error,
    },
    /// The bytes are not a sidecar this reader wrote: damaged, truncated, another version.
    Corrupt {
        path: PathBuf,
        why: String,
    },
    /// A sound sidecar of another Parquet file (an older run's, or copied from elsewhere).
    Foreign {
        path: PathBuf,
        why: String,
    },
    /// The writer could not store these samples by thread.
    NotIndexed {
        path: PathBuf,
        why: String,
    },
}

impl std::fmt::Display for ByThreadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ByThreadError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            ByThreadError::Corrupt { path, why } => write!(f, "{}: corrupt: {why}", path.display()),
            ByThreadError::Foreign { path, why } => write!(
                f,
                "{}: belongs to another samples.parquet ({why})",
                path.display()
            ),
            ByThreadError::NotIndexed { path, why } => {
                write!(f, "{}: not indexed: {why}", path.display())
            }
        }
    }
}

impl std::error::Error for ByThreadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ByThreadError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn width_of(max: u64) -> u8 {
    if max <= u64::from(u8::MAX) {
        1
    } else if max <= u64::from(u16::MAX) {
        2
    } else if max <= u64::from(u32::MAX) {
        4
    } else {
        8
    }
}

/// How a version of the format checksums a page. The checksum finds pages damaged or torn on disk; it is no
/// defence against a forger, who could recompute either (the reader treats every byte as hostile anyway).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageChecksum {
    /// Version 1: the first 8 bytes of the page's blake3, little-endian. 2–4 GB/s on the 4–16 KiB pages, a
    /// tenth of a trace's aggregation (`bench/aggregate_100m.sh`, mode `trace`).
    Blake3,
    /// Versions 2 and 3: the page's xxh3 (64 bits), about 24 GB/s on the same pages.
    Xxh3,
}

impl PageChecksum {
    /// The checksum of format `version`, `None` for a version this reader does not read.
    pub fn of_version(version: u32) -> Option<PageChecksum> {
        match version {
            1 => Some(PageChecksum::Blake3),
            2 | 3 => Some(PageChecksum::Xxh3),
            _ => None,
        }
    }

    /// The checksum of the page `bytes`.
    pub fn of(self, bytes: &[u8]) -> u64 {
        match self {
            PageChecksum::Blake3 => {
                let hash = blake3::hash(bytes);
                let mut first = [0u8; 8];
                first.copy_from_slice(&hash.as_bytes()[..8]);
                u64::from_le_bytes(first)
            }
            PageChecksum::Xxh3 => xxhash_rust::xxh3::xxh3_64(bytes),
        }
    }
}

/// A page's checksum as the writer records it ([`VERSION`]'s [`PageChecksum`]).
pub fn page_checksum(bytes: &[u8]) -> u64 {
    PageChecksum::Xxh3.of(bytes)
}

/// Writes the sidecar of the Parquet file `parquet` (already written) holding `samples` to `path`: [`begin`]
/// then [`PendingSidecar::finish`].
pub fn write_samples_by_thread<T>(
    path: &Path,
    parquet: &Path,
    samples: &[T],
    row: impl Fn(&T) -> SampleRow,
) -> io::Result<()> {
    begin(path, samples, row)?.finish(parquet)
}

/// A sidecar whose data is written; its directory names the Parquet file, so it is finished once that is.
#[derive(Debug)]
pub struct PendingSidecar {
    out: BufWriter<File>,
    columns: Vec<StoredColumn>,
    threads: Vec<ThreadLayout>,
    not_indexed: Option<String>,
}

impl PendingSidecar {
    /// Writes the directory, naming the Parquet file `parquet` (now written) as the one the sidecar belongs to.
    pub fn finish(mut self, parquet: &Path) -> io::Result<()> {
        let directory = Directory {
            parquet: ParquetIdentity::of(parquet)?,
            page_rows: PAGE_ROWS,
            columns: self.columns,
            threads: self.threads,
            not_indexed: self.not_indexed,
        };
        let json = serde_json::to_vec(&directory).map_err(io::Error::other)?;
        self.out.write_all(&json)?;
        self.out.write_all(&(json.len() as u64).to_le_bytes())?;
        self.out.write_all(blake3::hash(&json).as_bytes())?;
        self.out.write_all(MAGIC)?;
        // Durability is the caller's, as for the Parquet file beside it (the cache publishes both).
        self.out.flush()
    }
}

/// Writes the data of the sidecar of `samples` to `path`, so that it can be written while the Parquet file is.
/// `row` gives a sample's values. The samples must be in the Parquet file's order, grouped by thread in
/// increasing thread order, each thread's in increasing seq with non-decreasing send times (as the client writes
/// them); otherwise the sidecar says why it holds no rows, and readers use the Parquet file.
pub fn begin<T>(
    path: &Path,
    samples: &[T],
    row: impl Fn(&T) -> SampleRow,
) -> io::Result<PendingSidecar> {
    // Each thread's [start, end), and whether the rows can be stored by thread as they are: the client writes
    // each thread's samples together and in seq order, so the Parquet file's order is the sidecar's.
    let mut runs: Vec<(u32, usize, usize)> = Vec::new();
    let mut not_indexed = None;
    let mut maxima = [0u64; STORED_COLUMNS.len()];
    let mut previous: Option<SampleRow> = None;
    for (i, sample) in samples.iter().enumerate() {
        let current = row(sample);
        for (max, column) in maxima.iter_mut().zip(STORED_COLUMNS) {
            *max = (*max).max(current.value(column));
        }
        match (previous, runs.last_mut()) {
            (Some(previous), Some((_, _, end))) if previous.thread == current.thread => {
                if current.seq <= previous.seq || current.t_send_ns < previous.t_send_ns {
                    not_indexed.get_or_insert_with(|| {
                        format!(
                            "thread {}: seq {} (sent at {} ns) follows seq {} (sent at {} ns)",
                            current.thread,
                            current.seq,
                            current.t_send_ns,
                            previous.seq,
                            previous.t_send_ns
                        )
                    });
                }
                *end = i + 1;
            }
            (Some(previous), _) if current.thread < previous.thread => {
                not_indexed.get_or_insert_with(|| {
                    format!(
                        "thread {} follows thread {}: the samples are not grouped by thread",
                        current.thread, previous.thread
                    )
                });
                runs.push((current.thread, i, i + 1));
            }
            _ => runs.push((current.thread, i, i + 1)),
        }
        previous = Some(current);
    }
    if let Some((thread, _, _)) = runs.iter().find(|(thread, _, _)| *thread > MAX_THREAD_ID) {
        not_indexed = Some(format!("thread id {thread} is above {MAX_THREAD_ID}"));
    }
    let mut columns: Vec<StoredColumn> = STORED_COLUMNS
        .iter()
        .zip(maxima)
        .map(|(column, max)| StoredColumn {
            name: column.name().to_owned(),
            width: width_of(max),
        })
        .collect();
    let keyed = if not_indexed.is_none() {
        keyed_threads(samples, &runs, &row)
    } else {
        None
    };
    if keyed.is_some() {
        for column in KEYED_COLUMNS {
            let width = columns
                .iter()
                .find(|stored| stored.name == column.name())
                .map_or(8, |stored| stored.width);
            columns.push(StoredColumn {
                name: keyed_name(column),
                width,
            });
        }
    }

    let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
    out.write_all(MAGIC)?;
    out.write_all(&VERSION.to_le_bytes())?;
    out.write_all(&0u32.to_le_bytes())?;
    let mut offset = HEADER_BYTES;
    let mut threads = Vec::new();
    let page_rows = PAGE_ROWS as usize;
    let mut page = Vec::with_capacity(page_rows * 8);
    if not_indexed.is_none() {
        for (index, &(thread, start, end)) in runs.iter().enumerate() {
            let rows = end - start;
            let pages = rows.div_ceil(page_rows);
            let mut layout = ThreadLayout {
                thread,
                rows: rows as u64,
                offset,
                first_send_ns: (0..pages)
                    .map(|p| row(&samples[start + p * page_rows]).t_send_ns)
                    .collect(),
                checksums: Vec::with_capacity(pages * columns.len()),
                keys: Vec::new(),
            };
            for (&column, stored) in STORED_COLUMNS.iter().zip(&columns) {
                for first in (start..end).step_by(page_rows) {
                    page.clear();
                    let values = samples[first..(first + page_rows).min(end)]
                        .iter()
                        .map(|sample| row(sample).value(column));
                    encode(values, stored.width, &mut page);
                    layout.checksums.push(page_checksum(&page));
                    out.write_all(&page)?;
                    offset += page.len() as u64;
                }
            }
            if let Some(keyed) = &keyed {
                let (keys, order) = keyed_order(rows, &keyed[index]);
                let stored = &columns[STORED_COLUMNS.len()..];
                for (&column, stored) in KEYED_COLUMNS.iter().zip(stored) {
                    for first in (0..rows).step_by(page_rows) {
                        page.clear();
                        let values = order[first..(first + page_rows).min(rows)]
                            .iter()
                            .map(|&i| row(&samples[start + i as usize]).value(column));
                        encode(values, stored.width, &mut page);
                        layout.checksums.push(page_checksum(&page));
                        out.write_all(&page)?;
                        offset += page.len() as u64;
                    }
                }
                layout.keys = keys;
            }
            threads.push(layout);
        }
    }
    Ok(PendingSidecar {
        out,
        columns,
        threads,
        not_indexed,
    })
}

/// A keyed column's name in the directory.
fn keyed_name(column: SampleColumn) -> String {
    format!("{}{KEYED_SUFFIX}", column.name())
}

/// A row's key: its slot and request size in one integer, in the keys' order.
fn packed_key(row: &SampleRow) -> u64 {
    (u64::from(row.slot) << 32) | u64::from(row.request_bytes)
}

/// One thread's keys as the first pass finds them: each row's key (an index into `keys`, which are in the
/// order they first appear), and each key's rows.
struct ThreadKeys {
    keys: Vec<(u64, u64)>,
    row_keys: Vec<u32>,
}

/// Each thread's keys (`runs`: thread, first and end sample), when the point has keyed columns: more than one
/// key in a thread (with one key per thread, grouping a thread's rows moves nothing), at most [`MAX_KEYS`] in
/// each thread, at most [`MAX_KEY_PAGE_ENTRIES`] page counts over all, and no
/// thread of 2^32 rows or more (a row's place in its key order is a `u32`).
fn keyed_threads<T>(
    samples: &[T],
    runs: &[(u32, usize, usize)],
    row: &impl Fn(&T) -> SampleRow,
) -> Option<Vec<ThreadKeys>> {
    let mut threads = Vec::with_capacity(runs.len());
    let mut several = false;
    let mut entries = 0usize;
    for &(_, start, end) in runs {
        u32::try_from(end - start).ok()?;
        let mut ids: HashMap<u64, u32, BuildHasherDefault<KeyHasher>> = HashMap::default();
        let mut keys: Vec<(u64, u64)> = Vec::new();
        let mut row_keys = Vec::with_capacity(end - start);
        for sample in &samples[start..end] {
            let key = packed_key(&row(sample));
            let id = *ids.entry(key).or_insert_with(|| {
                keys.push((key, 0));
                (keys.len() - 1) as u32
            });
            if let Some((_, rows)) = keys.get_mut(id as usize) {
                *rows += 1;
            }
            row_keys.push(id);
        }
        if keys.len() > MAX_KEYS {
            return None;
        }
        several |= keys.len() > 1;
        entries += keys.len() * (end - start).div_ceil(PAGE_ROWS as usize);
        if entries > MAX_KEY_PAGE_ENTRIES {
            return None;
        }
        threads.push(ThreadKeys { keys, row_keys });
    }
    several.then_some(threads)
}

/// A thread's keys in increasing order with their page counts, and its `rows` rows (indexes from its first) in
/// key order.
fn keyed_order(rows: usize, thread: &ThreadKeys) -> (Vec<KeyRows>, Vec<u32>) {
    let mut by_key: Vec<usize> = (0..thread.keys.len()).collect();
    by_key.sort_by_key(|&id| thread.keys[id].0);
    // Each first-seen id's place in key order, and where its rows start in the keyed columns.
    let mut rank = vec![0usize; by_key.len()];
    let mut next = vec![0usize; by_key.len()];
    let mut at = 0usize;
    for (place, &id) in by_key.iter().enumerate() {
        rank[id] = place;
        next[place] = at;
        at += thread.keys[id].1 as usize;
    }
    let page_rows = PAGE_ROWS as usize;
    let pages = rows.div_ceil(page_rows);
    let mut seen = vec![0u64; by_key.len()];
    let mut before_page = vec![Vec::with_capacity(pages); by_key.len()];
    let mut order = vec![0u32; rows];
    for (i, &id) in thread.row_keys.iter().enumerate() {
        if i % page_rows == 0 {
            for (counts, &seen) in before_page.iter_mut().zip(&seen) {
                counts.push(seen);
            }
        }
        let place = rank[id as usize];
        order[next[place]] = i as u32;
        next[place] += 1;
        seen[place] += 1;
    }
    let keys = by_key
        .iter()
        .zip(before_page)
        .map(|(&id, before_page)| {
            let (key, rows) = thread.keys[id];
            KeyRows {
                slot: (key >> 32) as u32,
                request_bytes: key as u32,
                rows,
                before_page,
            }
        })
        .collect();
    (keys, order)
}

/// The hash of a packed key in the writer's first pass, one per row: a multiply and a fold instead of SipHash,
/// since the keys are the writer's own.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0 ^ value).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

/// Appends `values` to `page` as little-endian integers of `width` bytes (the width holds every value).
fn encode(values: impl Iterator<Item = u64>, width: u8, page: &mut Vec<u8>) {
    match width {
        1 => page.extend(values.map(|v| v as u8)),
        2 => values.for_each(|v| page.extend_from_slice(&(v as u16).to_le_bytes())),
        4 => values.for_each(|v| page.extend_from_slice(&(v as u32).to_le_bytes())),
        _ => values.for_each(|v| page.extend_from_slice(&v.to_le_bytes())),
    }
}

/// An open, checked sidecar.
#[derive(Debug)]
pub struct SamplesByThread {
    path: PathBuf,
    file: File,
    directory: Directory,
    /// Per stored column (directory order): its offset within a thread's data per row of the thread, as
    /// (sum of the widths of the columns before it), and its width.
    widths: Vec<(u64, u64)>,
    row_bytes: u64,
    /// How the file's version checksums its pages.
    checksum: PageChecksum,
}

impl SamplesByThread {
    /// Opens the sidecar at `path` and checks it against the Parquet file `parquet` it must belong to.
    pub fn open(path: &Path, parquet: &Path) -> Result<SamplesByThread, ByThreadError> {
        let io = |source| ByThreadError::Io {
            path: path.to_path_buf(),
            source,
        };
        let corrupt = |why: String| ByThreadError::Corrupt {
            path: path.to_path_buf(),
            why,
        };
        let file = File::open(path).map_err(io)?;
        let length = file.metadata().map_err(io)?.len();
        if length < HEADER_BYTES + TRAILER_BYTES {
            return Err(corrupt(format!(
                "{length} bytes, shorter than header and trailer"
            )));
        }
        let mut header = [0u8; HEADER_BYTES as usize];
        file.read_exact_at(&mut header, 0).map_err(io)?;
        if &header[..8] != MAGIC || header[12..] != [0; 4] {
            return Err(corrupt("not a samples.by-thread file".into()));
        }
        let version = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
        let Some(checksum) = PageChecksum::of_version(version) else {
            return Err(corrupt(format!(
                "version {version}, this reader reads 1 to {VERSION}"
            )));
        };
        let mut trailer = [0u8; TRAILER_BYTES as usize];
        file.read_exact_at(&mut trailer, length - TRAILER_BYTES)
            .map_err(io)?;
        if &trailer[40..] != MAGIC {
            return Err(corrupt("truncated: no closing magic".into()));
        }
        let mut len_bytes = [0u8; 8];
        len_bytes.copy_from_slice(&trailer[..8]);
        let directory_bytes = u64::from_le_bytes(len_bytes);
        let data_end = length - TRAILER_BYTES;
        if directory_bytes > MAX_DIRECTORY_BYTES || directory_bytes > data_end - HEADER_BYTES {
            return Err(corrupt(format!(
                "a directory of {directory_bytes} bytes in a file of {length}"
            )));
        }
        let data_end = data_end - directory_bytes;
        let mut json = vec![0u8; directory_bytes as usize];
        file.read_exact_at(&mut json, data_end).map_err(io)?;
        if blake3::hash(&json).as_bytes()[..] != trailer[8..40] {
            return Err(corrupt("the directory's checksum differs".into()));
        }
        let directory: Directory = serde_json::from_slice(&json)
            .map_err(|e| corrupt(format!("the directory does not parse: {e}")))?;
        let actual = ParquetIdentity::of(parquet).map_err(|e| ByThreadError::Foreign {
            path: path.to_path_buf(),
            why: format!("{}: {e}", parquet.display()),
        })?;
        if actual != directory.parquet {
            let why = if actual.bytes != directory.parquet.bytes {
                format!(
                    "written for {} bytes, the file has {}",
                    directory.parquet.bytes, actual.bytes
                )
            } else {
                "the footer differs".to_owned()
            };
            return Err(ByThreadError::Foreign {
                path: path.to_path_buf(),
                why,
            });
        }
        if let Some(why) = directory.not_indexed {
            return Err(ByThreadError::NotIndexed {
                path: path.to_path_buf(),
                why,
            });
        }
        let widths = check_layout(&directory, HEADER_BYTES, data_end).map_err(corrupt)?;
        let row_bytes = widths.iter().map(|(_, w)| w).sum();
        Ok(SamplesByThread {
            path: path.to_path_buf(),
            file,
            directory,
            widths,
            row_bytes,
            checksum,
        })
    }

    /// The threads, in file order: (thread id, rows).
    pub fn threads(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.directory.threads.iter().map(|t| (t.thread, t.rows))
    }

    /// Rows over all threads.
    pub fn rows(&self) -> u64 {
        self.directory.threads.iter().map(|t| t.rows).sum()
    }

    /// Whether `column` is stored.
    pub fn has(&self, column: SampleColumn) -> bool {
        self.column_index(column).is_some()
    }

    fn column_index(&self, column: SampleColumn) -> Option<usize> {
        self.directory
            .columns
            .iter()
            .position(|c| c.name == column.name())
    }

    /// The error for what a reader finds wrong in the values of thread `index` (in [`SamplesByThread::threads`]
    /// order), which the checksums cannot catch: a writer that broke the format's promises.
    pub fn corrupt_thread(&self, index: usize, why: &str) -> ByThreadError {
        let thread = self.directory.threads.get(index).map_or(0, |t| t.thread);
        self.corrupt(format!("thread {thread}: {why}"))
    }

    fn corrupt(&self, why: String) -> ByThreadError {
        ByThreadError::Corrupt {
            path: self.path.clone(),
            why,
        }
    }

    /// The first row of thread `index` (in [`SamplesByThread::threads`] order) sent at or after `ns`: the rows
    /// before it are the ones a `skip_s` cut drops. Reads at most one page of send times.
    pub fn first_row_sent_from(&self, index: usize, ns: u64) -> Result<u64, ByThreadError> {
        let thread = &self.directory.threads[index];
        // Pages whose first row was sent before `ns`; the boundary is in the last of them.
        let before = thread.first_send_ns.partition_point(|&first| first < ns);
        if before == 0 {
            return Ok(0);
        }
        let page_rows = u64::from(self.directory.page_rows);
        let start = (before as u64 - 1) * page_rows;
        let end = (start + page_rows).min(thread.rows);
        let mut sends = vec![0u64; (end - start) as usize];
        self.read_rows(index, SampleColumn::TSendNs, start..end, &mut sends)?;
        if !sends.is_sorted() {
            return Err(self.corrupt(format!(
                "thread {}: send times decrease within a page",
                thread.thread
            )));
        }
        Ok(start + sends.partition_point(|&sent| sent < ns) as u64)
    }

    /// The width in bytes `column` is stored in, if it is stored: a column of at most 4 bytes can be read
    /// into `u32`s.
    pub fn width(&self, column: SampleColumn) -> Option<u64> {
        self.column_index(column).map(|c| self.widths[c].1)
    }

    /// Reads the values of `column` at `rows` of thread `index` into `out` (as long as the range), checking
    /// every page it touches. Into `u64`s always; into `u32`s when the column is stored in at most 4 bytes
    /// ([`SamplesByThread::width`]), which halves what the values take in memory.
    pub fn read_rows<T: RowValue>(
        &self,
        index: usize,
        column: SampleColumn,
        rows: std::ops::Range<u64>,
        out: &mut [T],
    ) -> Result<(), ByThreadError> {
        let Some(c) = self.column_index(column) else {
            return Err(self.corrupt(format!("no column `{}`", column.name())));
        };
        self.read_column(index, c, rows, out)
    }

    /// Whether the file has keyed columns, and so every thread its keys ([`SamplesByThread::keys`]).
    pub fn keyed(&self) -> bool {
        self.keyed_index(KEYED_COLUMNS[0]).is_some()
    }

    /// The keys of thread `index`, in the order of the keyed columns; empty when the file has none.
    pub fn keys(&self, index: usize) -> &[KeyRows] {
        &self.directory.threads[index].keys
    }

    /// Where, in the keyed columns of thread `index`, each of its keys ([`SamplesByThread::keys`] order) has its
    /// rows from row `from` (in seq order) on: the rows a cut at `from` keeps. Reads the slots and request sizes
    /// of `from`'s page before it, which the page counts do not tell apart.
    pub fn keyed_rows_from(
        &self,
        index: usize,
        from: u64,
    ) -> Result<Vec<std::ops::Range<u64>>, ByThreadError> {
        let thread = &self.directory.threads[index];
        let from = from.min(thread.rows);
        let page_rows = u64::from(self.directory.page_rows);
        let page = from / page_rows;
        let page_start = page * page_rows;
        // Each key's rows before `from`: those before its page, then those in the page before it.
        let mut before: Vec<u64> = thread
            .keys
            .iter()
            .map(|key| {
                key.before_page
                    .get(page as usize)
                    .copied()
                    .unwrap_or(key.rows)
            })
            .collect();
        if from > page_start {
            let len = (from - page_start) as usize;
            let (mut slots, mut bytes) = (vec![0u32; len], vec![0u32; len]);
            self.read_rows(index, SampleColumn::Slot, page_start..from, &mut slots)?;
            self.read_rows(
                index,
                SampleColumn::RequestBytes,
                page_start..from,
                &mut bytes,
            )?;
            for (&slot, &request_bytes) in slots.iter().zip(&bytes) {
                let Ok(key) = thread
                    .keys
                    .binary_search_by_key(&(slot, request_bytes), |k| (k.slot, k.request_bytes))
                else {
                    return Err(self.corrupt_thread(index, "a row's key is not among its keys"));
                };
                before[key] += 1;
            }
        }
        let mut start = 0u64;
        let mut ranges = Vec::with_capacity(thread.keys.len());
        for (key, before) in thread.keys.iter().zip(before) {
            if before > key.rows {
                return Err(
                    self.corrupt_thread(index, "a key has more rows before a cut than in all")
                );
            }
            ranges.push(start + before..start + key.rows);
            start += key.rows;
        }
        Ok(ranges)
    }

    /// [`SamplesByThread::read_rows`] of the keyed copy of `column` (one of [`KEYED_COLUMNS`]): `rows` are
    /// places in the keyed columns ([`SamplesByThread::keyed_rows_from`]).
    pub fn read_keyed_rows<T: RowValue>(
        &self,
        index: usize,
        column: SampleColumn,
        rows: std::ops::Range<u64>,
        out: &mut [T],
    ) -> Result<(), ByThreadError> {
        let Some(c) = self.keyed_index(column) else {
            return Err(self.corrupt(format!("no column `{}`", keyed_name(column))));
        };
        self.read_column(index, c, rows, out)
    }

    fn keyed_index(&self, column: SampleColumn) -> Option<usize> {
        let name = keyed_name(column);
        self.directory.columns.iter().position(|c| c.name == name)
    }

    /// The values of the column at `c` (directory order) at `rows` of thread `index`, into `out`.
    fn read_column<T: RowValue>(
        &self,
        index: usize,
        c: usize,
        rows: std::ops::Range<u64>,
        out: &mut [T],
    ) -> Result<(), ByThreadError> {
        let thread = &self.directory.threads[index];
        let name = &self.directory.columns[c].name;
        if self.widths[c].1 > T::MAX_WIDTH {
            return Err(self.corrupt(format!(
                "`{name}` is stored in {} bytes, more than a {}-byte read holds",
                self.widths[c].1,
                T::MAX_WIDTH
            )));
        }
        if rows.end > thread.rows
            || rows.start > rows.end
            || out.len() as u64 != rows.end - rows.start
        {
            return Err(self.corrupt(format!(
                "rows {rows:?} of thread {} beyond its {}",
                thread.thread, thread.rows
            )));
        }
        let (before, width) = self.widths[c];
        let page_rows = u64::from(self.directory.page_rows);
        let pages = thread.rows.div_ceil(page_rows);
        let column_start = thread.offset + before * thread.rows;
        let mut page = vec![0u8; (page_rows * width) as usize];
        let mut written = 0usize;
        let mut p = rows.start / page_rows;
        while p * page_rows < rows.end {
            let page_start = p * page_rows;
            let page_len = (page_start + page_rows).min(thread.rows) - page_start;
            let bytes = &mut page[..(page_len * width) as usize];
            self.file
                .read_exact_at(bytes, column_start + page_start * width)
                .map_err(|source| ByThreadError::Io {
                    path: self.path.clone(),
                    source,
                })?;
            if self.checksum.of(bytes) != thread.checksums[c * pages as usize + p as usize] {
                return Err(self.corrupt(format!(
                    "thread {}: page {p} of `{name}` has another checksum",
                    thread.thread,
                )));
            }
            let from = (rows.start.max(page_start) - page_start) as usize;
            let to = (rows.end.min(page_start + page_len) - page_start) as usize;
            let target = &mut out[written..written + (to - from)];
            T::widen(
                &bytes[from * width as usize..to * width as usize],
                width,
                target,
            );
            written += to - from;
            p += 1;
        }
        Ok(())
    }

    /// Bytes per row over every stored column.
    pub fn row_bytes(&self) -> u64 {
        self.row_bytes
    }
}

/// What [`SamplesByThread::read_rows`] reads values into.
pub trait RowValue: Copy + Default + Send + Sync {
    /// The widest stored column this type holds, in bytes.
    const MAX_WIDTH: u64;

    /// Little-endian values of `width` bytes (at most [`RowValue::MAX_WIDTH`]) into `out`.
    fn widen(bytes: &[u8], width: u64, out: &mut [Self]);
}

impl RowValue for u64 {
    const MAX_WIDTH: u64 = 8;

    fn widen(bytes: &[u8], width: u64, out: &mut [u64]) {
        if width < 8 {
            return widen_narrow(bytes, width, out);
        }
        out.iter_mut()
            .zip(bytes.chunks_exact(8))
            .for_each(|(o, b)| {
                let mut value = [0u8; 8];
                value.copy_from_slice(b);
                *o = u64::from_le_bytes(value);
            });
    }
}

impl RowValue for u32 {
    const MAX_WIDTH: u64 = 4;

    fn widen(bytes: &[u8], width: u64, out: &mut [u32]) {
        widen_narrow(bytes, width, out);
    }
}

/// Little-endian values of 1, 2 or 4 bytes (`width`; the layout check admits no other below 8) into `out`.
fn widen_narrow<T: From<u32>>(bytes: &[u8], width: u64, out: &mut [T]) {
    match width {
        1 => out
            .iter_mut()
            .zip(bytes)
            .for_each(|(o, &b)| *o = T::from(u32::from(b))),
        2 => out
            .iter_mut()
            .zip(bytes.chunks_exact(2))
            .for_each(|(o, b)| *o = T::from(u32::from(u16::from_le_bytes([b[0], b[1]])))),
        _ => out
            .iter_mut()
            .zip(bytes.chunks_exact(4))
            .for_each(|(o, b)| *o = T::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
    }
}

/// Checks that the directory describes data inside `[data_start, data_end)` with consistent page tables, and
/// returns each column's (widths before it, width).
fn check_layout(
    directory: &Directory,
    data_start: u64,
    data_end: u64,
) -> Result<Vec<(u64, u64)>, String> {
    if directory.page_rows == 0 || directory.page_rows > MAX_PAGE_ROWS {
        return Err(format!("{} rows per page", directory.page_rows));
    }
    let mut widths = Vec::with_capacity(directory.columns.len());
    let mut before = 0u64;
    for (i, column) in directory.columns.iter().enumerate() {
        let known = STORED_COLUMNS.iter().any(|c| c.name() == column.name)
            || KEYED_COLUMNS.iter().any(|&c| keyed_name(c) == column.name);
        if !known || directory.columns[..i].iter().any(|c| c.name == column.name) {
            return Err(format!("column `{}` unknown or repeated", column.name));
        }
        if ![1, 2, 4, 8].contains(&column.width) {
            return Err(format!(
                "column `{}` is {} bytes wide",
                column.name, column.width
            ));
        }
        widths.push((before, u64::from(column.width)));
        before += u64::from(column.width);
    }
    // Every stored column is there, so each row takes bytes of the file and a row count cannot claim more
    // rows (and allocations) than the file could hold.
    if let Some(missing) = STORED_COLUMNS.iter().find(|c| {
        !directory
            .columns
            .iter()
            .any(|stored| stored.name == c.name())
    }) {
        return Err(format!("no column `{}`", missing.name()));
    }
    let keyed_columns = KEYED_COLUMNS
        .iter()
        .filter(|&&c| {
            directory
                .columns
                .iter()
                .any(|stored| stored.name == keyed_name(c))
        })
        .count();
    if keyed_columns != 0 && keyed_columns != KEYED_COLUMNS.len() {
        return Err("some keyed columns, not all".to_owned());
    }
    let row_bytes = before;
    let page_rows = u64::from(directory.page_rows);
    let mut seen = std::collections::BTreeSet::new();
    for thread in &directory.threads {
        if thread.thread > MAX_THREAD_ID || !seen.insert(thread.thread) {
            return Err(format!(
                "thread id {} implausible or repeated",
                thread.thread
            ));
        }
        let bytes = thread.rows.checked_mul(row_bytes);
        let end = bytes.and_then(|b| thread.offset.checked_add(b));
        if thread.offset < data_start || end.is_none_or(|end| end > data_end) {
            return Err(format!(
                "thread {}: {} rows at {} exceed the data",
                thread.thread, thread.rows, thread.offset
            ));
        }
        let pages = thread.rows.div_ceil(page_rows);
        if thread.first_send_ns.len() as u64 != pages
            || thread.checksums.len() as u64 != pages * directory.columns.len() as u64
        {
            return Err(format!(
                "thread {}: page tables do not match its {} rows",
                thread.thread, thread.rows
            ));
        }
        if !thread.first_send_ns.is_sorted() {
            return Err(format!(
                "thread {}: send times decrease between pages",
                thread.thread
            ));
        }
        check_keys(thread, keyed_columns != 0, page_rows)
            .map_err(|why| format!("thread {}: {why}", thread.thread))?;
    }
    Ok(widths)
}

/// Checks a thread's keys: present exactly when the file has keyed columns, in increasing order, their rows
/// adding up to the thread's, and their page counts each a count of rows before a page boundary.
fn check_keys(thread: &ThreadLayout, keyed: bool, page_rows: u64) -> Result<(), String> {
    if !keyed {
        return match thread.keys.is_empty() {
            true => Ok(()),
            false => Err("keys without keyed columns".to_owned()),
        };
    }
    if thread.keys.is_empty() != (thread.rows == 0) || thread.keys.len() > MAX_KEYS {
        return Err(format!(
            "{} keys for {} rows",
            thread.keys.len(),
            thread.rows
        ));
    }
    if !thread
        .keys
        .windows(2)
        .all(|pair| (pair[0].slot, pair[0].request_bytes) < (pair[1].slot, pair[1].request_bytes))
    {
        return Err("keys not in increasing order".to_owned());
    }
    let total = thread
        .keys
        .iter()
        .try_fold(0u64, |total, key| total.checked_add(key.rows));
    if total != Some(thread.rows) {
        return Err(format!("its keys' rows are not its {} rows", thread.rows));
    }
    let pages = thread.rows.div_ceil(page_rows) as usize;
    for key in &thread.keys {
        if key.before_page.len() != pages
            || key.before_page.first().is_some_and(|&first| first != 0)
            || !key.before_page.is_sorted()
            || key.before_page.last().is_some_and(|&last| last > key.rows)
        {
            return Err("a key's page counts are not counts of its rows".to_owned());
        }
    }
    // Before each page, the keys' rows are the rows of the pages before it.
    for page in 0..pages {
        let before: u64 = thread.keys.iter().map(|key| key.before_page[page]).sum();
        if before != page as u64 * page_rows {
            return Err(format!("the keys' rows before page {page} are {before}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(thread: u32, seq: u64, t_send_ns: u64, latency: u64) -> SampleRow {
        SampleRow {
            thread,
            seq,
            t_send_ns,
            latency_ns: latency + 300,
            latency_last_piece_ns: latency,
            slot: thread % 3,
            request_bytes: 4096,
        }
    }

    /// A stand-in Parquet file: the identity reads only the length and the footer.
    fn fake_parquet(path: &Path, footer: &[u8]) {
        let mut bytes = b"PAR1".to_vec();
        bytes.extend_from_slice(footer);
        bytes.extend_from_slice(&(footer.len() as u32).to_le_bytes());
        bytes.extend_from_slice(b"PAR1");
        std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{e}"));
    }

    fn open(dir: &Path) -> Result<SamplesByThread, ByThreadError> {
        SamplesByThread::open(
            &dir.join(SAMPLES_BY_THREAD_FILE),
            &dir.join("samples.parquet"),
        )
    }

    fn write(dir: &Path, rows: &[SampleRow]) {
        write_samples_by_thread(
            &dir.join(SAMPLES_BY_THREAD_FILE),
            &dir.join("samples.parquet"),
            rows,
            |r| *r,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn rows_come_back_by_thread_with_each_cut_a_binary_search() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        fake_parquet(&dir.path().join("samples.parquet"), b"footer one");
        // More than a page per thread, repeated send times, a gap in the thread ids, a thread of one row.
        let mut rows = Vec::new();
        for thread in [0, 1] {
            for seq in 0..5_000u64 {
                rows.push(row(
                    thread,
                    seq * 3,
                    seq / 2 * 10,
                    5_000_000_000 + seq * u64::from(thread + 1),
                ));
            }
        }
        rows.push(row(9, 0, 3, 70_000));
        write(dir.path(), &rows);
        let file = open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let threads: Vec<(u32, u64)> = file.threads().collect();
        assert_eq!(threads, [(0, 5000), (1, 5000), (9, 1)]);
        assert_eq!(file.rows(), 10_001);
        for (index, &(thread, count)) in threads.iter().enumerate() {
            let expected: Vec<&SampleRow> = rows.iter().filter(|r| r.thread == thread).collect();
            for column in STORED_COLUMNS {
                let mut values = vec![0; count as usize];
                file.read_rows(index, column, 0..count, &mut values)
                    .unwrap_or_else(|e| panic!("{e}"));
                let wanted: Vec<u64> = expected.iter().map(|r| r.value(column)).collect();
                assert_eq!(values, wanted, "thread {thread}, {}", column.name());
                // Into u32s exactly when the column is stored in at most 4 bytes (the latencies here need 5).
                let mut narrow = vec![0u32; count as usize];
                let read = file.read_rows(index, column, 0..count, &mut narrow);
                match file.width(column) {
                    Some(width) if width <= 4 => {
                        assert!(read.is_ok(), "{}: {read:?}", column.name());
                        assert!(narrow.iter().zip(&wanted).all(|(&n, &w)| u64::from(n) == w));
                    }
                    _ => {
                        let message = read.err().map(|e| e.to_string()).unwrap_or_default();
                        assert!(
                            message.contains("bytes, more than a 4-byte read holds"),
                            "{} read into u32s: {message:?}",
                            column.name()
                        );
                    }
                }
            }
            // A range across a page boundary.
            if count > 4200 {
                let mut part = vec![0; 200];
                file.read_rows(index, SampleColumn::LatencyNs, 4000..4200, &mut part)
                    .unwrap_or_else(|e| panic!("{e}"));
                let wanted: Vec<u64> = expected[4000..4200].iter().map(|r| r.latency_ns).collect();
                assert_eq!(part, wanted);
            }
            for cut in [0, 1, 3, 4, 20_470, 20_480, 20_481, 24_990, 25_000, u64::MAX] {
                let first = file
                    .first_row_sent_from(index, cut)
                    .unwrap_or_else(|e| panic!("{e}"));
                let by_scan = expected.iter().filter(|r| r.t_send_ns < cut).count() as u64;
                assert_eq!(first, by_scan, "thread {thread}, cut {cut}");
            }
        }
    }

    #[test]
    fn samples_not_grouped_by_thread_are_not_indexed() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        fake_parquet(&dir.path().join("samples.parquet"), b"f");
        write(
            dir.path(),
            &[row(0, 0, 1, 10), row(1, 0, 1, 10), row(0, 1, 2, 10)],
        );
        let Err(ByThreadError::NotIndexed { why, .. }) = open(dir.path()) else {
            panic!("interleaved threads were indexed");
        };
        assert!(why.contains("not grouped by thread"), "{why}");
    }

    #[test]
    fn a_sidecar_of_another_parquet_file_is_foreign() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let parquet = dir.path().join("samples.parquet");
        fake_parquet(&parquet, b"footer one");
        write(dir.path(), &[row(0, 0, 0, 10)]);
        assert!(open(dir.path()).is_ok());
        fake_parquet(&parquet, b"footer two");
        assert!(matches!(
            open(dir.path()),
            Err(ByThreadError::Foreign { .. })
        ));
        fake_parquet(&parquet, b"a longer footer");
        assert!(matches!(
            open(dir.path()),
            Err(ByThreadError::Foreign { .. })
        ));
    }

    #[test]
    fn decreasing_send_times_are_not_indexed() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        fake_parquet(&dir.path().join("samples.parquet"), b"f");
        write(dir.path(), &[row(0, 0, 50, 10), row(0, 1, 40, 10)]);
        assert!(matches!(
            open(dir.path()),
            Err(ByThreadError::NotIndexed { .. })
        ));
        write(dir.path(), &[row(0, 0, 50, 10), row(0, 0, 60, 10)]);
        assert!(matches!(
            open(dir.path()),
            Err(ByThreadError::NotIndexed { .. })
        ));
    }

    #[test]
    fn every_flipped_byte_and_every_truncation_is_an_error_not_data() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        fake_parquet(&dir.path().join("samples.parquet"), b"f");
        // Three threads of 50 rows, two keys in each: the file has keyed columns.
        let rows: Vec<SampleRow> = (0..150)
            .map(|s| SampleRow {
                slot: (s % 2) as u32,
                ..row((s / 50) as u32, s, s * 7, 1000 + s * s)
            })
            .collect();
        write(dir.path(), &rows);
        let path = dir.path().join(SAMPLES_BY_THREAD_FILE);
        let good = std::fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(open(dir.path()).is_ok_and(|file| file.keyed()));
        let read_all = || -> Result<(), ByThreadError> {
            let file = open(dir.path())?;
            for (index, (_, count)) in file.threads().collect::<Vec<_>>().into_iter().enumerate() {
                let mut out = vec![0u64; count as usize];
                for column in STORED_COLUMNS {
                    file.read_rows(index, column, 0..count, &mut out)?;
                }
                for column in KEYED_COLUMNS {
                    file.read_keyed_rows(index, column, 0..count, &mut out)?;
                }
                file.first_row_sent_from(index, 500)?;
                file.keyed_rows_from(index, 7)?;
            }
            Ok(())
        };
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            std::fs::write(&path, &bad).unwrap_or_else(|e| panic!("{e}"));
            assert!(read_all().is_err(), "a flipped byte at {at} went unnoticed");
        }
        for len in [0, 10, 16, 63, good.len() / 2, good.len() - 1] {
            std::fs::write(&path, &good[..len]).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                matches!(read_all(), Err(ByThreadError::Corrupt { .. })),
                "truncated to {len}"
            );
        }
    }

    /// The keyed columns hold each key's rows in seq order, keys in increasing order, and a cut at any row keeps
    /// of each key exactly its rows from that row on, at page boundaries and inside pages.
    #[test]
    fn keyed_columns_hold_each_keys_rows_and_a_cut_keeps_each_keys_rows_after_it() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        fake_parquet(&dir.path().join("samples.parquet"), b"keyed");
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut rows = Vec::new();
        for (thread, count) in [(0u32, 10_000u64), (1, 1), (3, 2 * u64::from(PAGE_ROWS))] {
            for seq in 0..count {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                rows.push(SampleRow {
                    slot: (state % 3) as u32,
                    request_bytes: 64 + 512 * ((state >> 8) % 4) as u32,
                    ..row(thread, seq, seq * 10, state % 100_000)
                });
            }
        }
        write(dir.path(), &rows);
        let file = open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        assert!(file.keyed());
        for (index, (thread, count)) in file.threads().collect::<Vec<_>>().into_iter().enumerate() {
            let own: Vec<&SampleRow> = rows.iter().filter(|r| r.thread == thread).collect();
            let mut keys: Vec<(u32, u32)> = own.iter().map(|r| (r.slot, r.request_bytes)).collect();
            keys.sort_unstable();
            keys.dedup();
            let listed: Vec<(u32, u32)> = file
                .keys(index)
                .iter()
                .map(|k| (k.slot, k.request_bytes))
                .collect();
            assert_eq!(listed, keys, "thread {thread}");
            // Every row around each page boundary, and others spread over the thread.
            let page = u64::from(PAGE_ROWS);
            let froms = (0..=count).filter(|&from| {
                from % 61 == 0 || from % page <= 2 || from % page >= page - 2 || from == count
            });
            for from in froms {
                let ranges = file
                    .keyed_rows_from(index, from)
                    .unwrap_or_else(|e| panic!("{e}"));
                let expected: Vec<u64> = keys
                    .iter()
                    .map(|&key| {
                        own[from as usize..]
                            .iter()
                            .filter(|r| (r.slot, r.request_bytes) == key)
                            .count() as u64
                    })
                    .collect();
                let kept: Vec<u64> = ranges.iter().map(|r| r.end - r.start).collect();
                assert_eq!(kept, expected, "thread {thread}, from {from}");
                let checked = [0, 1, 4095, 4096, 4097, 5000, count];
                if !checked.contains(&from) {
                    continue;
                }
                for (range, &key) in ranges.iter().zip(&keys) {
                    let mut latencies = vec![0u64; (range.end - range.start) as usize];
                    file.read_keyed_rows(
                        index,
                        SampleColumn::LatencyNs,
                        range.clone(),
                        &mut latencies,
                    )
                    .unwrap_or_else(|e| panic!("{e}"));
                    let wanted: Vec<u64> = own[from as usize..]
                        .iter()
                        .filter(|r| (r.slot, r.request_bytes) == key)
                        .map(|r| r.latency_ns)
                        .collect();
                    assert_eq!(
                        latencies, wanted,
                        "thread {thread}, from {from}, key {key:?}"
                    );
                }
            }
        }
    }

    /// A point whose threads each have one key has no keyed columns: grouping a thread's rows moves nothing.
    #[test]
    fn one_key_per_thread_is_not_keyed() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        fake_parquet(&dir.path().join("samples.parquet"), b"one key");
        let rows: Vec<SampleRow> = (0..300).map(|s| row((s / 100) as u32, s, s, s)).collect();
        write(dir.path(), &rows);
        let file = open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        assert!(!file.keyed());
        assert!(file.keys(0).is_empty());
    }
}
