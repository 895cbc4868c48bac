//! `fracflow diff RUN_A RUN_B`: what differed between two runs of one pipeline (command line, git commit,
//! testbed profile as used, parameters, tool versions, what the device held, node keys — grouped), then for
//! every point of the summary tables the change of each statistic with a bootstrap 95 % interval and a verdict
//! (see `compare.rs`). Printed as text or `--json`; an HTML page is written beside RUN_B's report.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use fracflow_core::run::node_dir_name;
use fracflow_record::{
    Cell, MeasureSummary, PROVENANCE_COLUMNS, SAMPLES_FILE, SECONDS_FILE, SUMMARY_FILE, Table,
};
use serde::Serialize;

use crate::compare::{self, Counterpart, Verdict};
use crate::error::{Error, Result};
use crate::exit::Exit;
use crate::human::shown;
use crate::project::Project;
use crate::rundirs::{self, RunInfo};

/// The version of `--json`'s schema; a field is only ever added within one version.
pub const SCHEMA: &str = "fracflow.diff/1";
/// What the intervals do not cover, said under every list of points.
const CAVEAT: &str = "(each interval resamples within the two runs: it does not include the variation from one run \
                      to the next, which repeated runs show; the change is the tables', the interval's own estimate \
                      follows its method)";
/// Why a statistic has no interval when the seconds cannot estimate it (`std_us`, `requests`, a `max_us`).
const NO_COUNTERPART: &str = "no per-second counterpart";
/// The column that marks a row derived from others (fracflow-aggregate's `derive: scale_by`).
const COMPUTED: &str = "computed";
/// Lines a group of differences prints at most in text and HTML (`--json` has them all).
const SHOWN: usize = 12;

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The run compared against: a run id as `fracflow runs` prints it, a `latest*` link name, or a run directory.
    pub run_a: String,
    /// The run compared (its changes are relative to RUN_A); the HTML page is written into its directory.
    pub run_b: String,
    /// The pipeline whose runs the ids and `latest*` names refer to (default: the one holding them).
    #[arg(long)]
    pub pipeline: Option<String>,
    /// Print the comparison as JSON (schema `fracflow.diff/1`) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Changes whose 95 % interval reaches into ±PERCENT are no change (criterion's noise threshold).
    #[arg(long, value_name = "PERCENT", default_value_t = 2.0, value_parser = parse_noise)]
    pub noise: f64,
    /// Seed of the bootstrap's generator (each interval's seed is derived from it and the point).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

fn parse_noise(text: &str) -> std::result::Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() && (0.0..100.0).contains(&value) => Ok(value),
        _ => Err(format!(
            "`{text}` is not a percentage from 0 to 100 (e.g. 2 for ±2 %)"
        )),
    }
}

#[derive(Debug, Serialize)]
struct Side {
    run_id: String,
    pipeline: String,
    dir: PathBuf,
    status: &'static str,
    testbed: String,
    testbed_kind: String,
    host: String,
    git: Option<String>,
    command: Vec<String>,
    engine_version: String,
}

/// One value that differs: `a` and `b` as text, `None` where a run has none.
#[derive(Debug, Serialize, Clone, PartialEq)]
struct Change {
    what: String,
    a: Option<String>,
    b: Option<String>,
}

/// A field that differs in a group of nodes of one name (`measure[*]`).
#[derive(Debug, Serialize)]
struct FieldGroup {
    nodes: String,
    count: usize,
    field: String,
    /// The values when every node of the group changed the same way; else one node's, in `example`.
    a: Option<String>,
    b: Option<String>,
    same_in_all: bool,
    example: String,
}

/// Nodes of one name and kind.
#[derive(Debug, Serialize, Clone)]
struct NodeGroup {
    name: String,
    kind: String,
    count: usize,
}

#[derive(Debug, Serialize, Default)]
struct Keys {
    compared: usize,
    differ: usize,
    groups: Vec<NodeGroup>,
    /// For the nodes whose key differs, the fingerprint fields that differ (from the cache entries), by group.
    why: Vec<FieldGroup>,
    /// Nodes with an unchanged key whose outputs differ (a build that is not reproducible).
    outputs_differ: Vec<NodeGroup>,
    only_in_a: Vec<NodeGroup>,
    only_in_b: Vec<NodeGroup>,
}

#[derive(Debug, Serialize, Default)]
struct Differences {
    command: Vec<Change>,
    set: Vec<Change>,
    git: Option<Change>,
    engine_version: Option<Change>,
    testbed_profile: Vec<Change>,
    params: Vec<FieldGroup>,
    tools: Vec<Change>,
    device_images: Vec<Change>,
    node_keys: Keys,
}

#[derive(Debug, Serialize)]
struct IntervalOut {
    estimate_percent: f64,
    low_percent: f64,
    high_percent: f64,
    /// How it was made: the resampling unit and the estimator.
    over: String,
    /// `seconds` (of seconds.jsonl) or `blocks` (of raw samples, by send time).
    unit: &'static str,
    units_a: usize,
    units_b: usize,
}

#[derive(Debug, Serialize)]
struct Statistic {
    name: String,
    better: Option<&'static str>,
    a: f64,
    b: f64,
    change_percent: Option<f64>,
    interval: Option<IntervalOut>,
    verdict: Option<&'static str>,
    no_interval: Option<String>,
}

#[derive(Debug, Serialize)]
struct Point {
    node: String,
    table: String,
    labels: BTreeMap<String, String>,
    verdict: Option<&'static str>,
    note: Option<String>,
    statistics: Vec<Statistic>,
}

#[derive(Debug, Serialize)]
struct Counts {
    regressed: usize,
    improved: usize,
    no_change: usize,
    without_interval: usize,
}

#[derive(Debug, Serialize)]
struct Report {
    schema: &'static str,
    a: Side,
    b: Side,
    across_testbeds: bool,
    confidence: f64,
    noise_threshold_percent: f64,
    resamples: usize,
    seed: u64,
    differences: Differences,
    points: Vec<Point>,
    /// Points of a table in only one run, and tables that could not be compared, in words.
    notes: Vec<String>,
    counts: Counts,
    html: PathBuf,
}

pub fn run(project: &Project, args: &DiffArgs) -> Result<Exit> {
    let root = &project.root;
    if let Some(name) = &args.pipeline {
        super::runs::check_pipeline_name(root, name)?;
    }
    let (a, b) = resolve_pair(root, &args.run_a, &args.run_b, args.pipeline.as_deref())?;
    if a.manifest.pipeline != b.manifest.pipeline {
        return Err(Error::bad_input_with_hint(
            format!(
                "run {} is of pipeline `{}`, run {} of `{}`: diff compares two runs of one pipeline",
                a.manifest.run_id, a.manifest.pipeline, b.manifest.run_id, b.manifest.pipeline
            ),
            "`fracflow runs PIPELINE` lists the runs of one pipeline",
        ));
    }
    let differences = differences(project, &a, &b);
    let (points, notes) = points(&a, &b, args)?;
    let counts = count(&points);
    let html = b
        .dir
        .join(format!("diff-{}.html", file_safe(&a.manifest.run_id)));
    let report = Report {
        schema: SCHEMA,
        across_testbeds: a.manifest.testbed != b.manifest.testbed
            || a.testbed_kind() != b.testbed_kind(),
        a: side(&a),
        b: side(&b),
        confidence: 0.95,
        noise_threshold_percent: args.noise,
        resamples: compare::RESAMPLES,
        seed: args.seed,
        differences,
        points,
        notes,
        counts,
        html: html.clone(),
    };
    fracflow_record::atomic_write(&html, render_html(&report).as_bytes())
        .map_err(|e| Error::io("cannot write the diff page", &html, e))?;
    if args.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| Error::internal("writing the diff as JSON", e))?;
        super::runs::print_out(format!("{text}\n").as_bytes())?;
        eprintln!("diff page: {}", shown(root, &html));
    } else {
        super::runs::print_out(render_text(root, &report).as_bytes())?;
    }
    Ok(Exit::Ok)
}

/// The two runs; an id or `latest*` name of one is looked up in the other's pipeline when it is ambiguous.
fn resolve_pair(
    root: &Path,
    run_a: &str,
    run_b: &str,
    pipeline: Option<&str>,
) -> Result<(RunInfo, RunInfo)> {
    match (
        rundirs::resolve_run(root, run_a, pipeline),
        rundirs::resolve_run(root, run_b, pipeline),
    ) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        (Ok(a), Err(_)) => {
            let b = rundirs::resolve_run(root, run_b, Some(&a.manifest.pipeline))?;
            Ok((a, b))
        }
        (Err(_), Ok(b)) => {
            let a = rundirs::resolve_run(root, run_a, Some(&b.manifest.pipeline))?;
            Ok((a, b))
        }
        (Err(e), Err(_)) => Err(e),
    }
}

fn side(info: &RunInfo) -> Side {
    let manifest = &info.manifest;
    Side {
        run_id: manifest.run_id.clone(),
        pipeline: manifest.pipeline.clone(),
        dir: info.dir.clone(),
        status: info.state.as_str(),
        testbed: manifest.testbed.clone(),
        testbed_kind: info.testbed_kind(),
        host: manifest.host.clone(),
        git: manifest.git.as_ref().map(|_| info.commit()),
        command: manifest.command.clone(),
        engine_version: manifest.engine_version.clone(),
    }
}

/// A run id as part of a file name: anything but letters, digits, `.`, `-` and `_` becomes `_`.
fn file_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn change(what: &str, a: Option<String>, b: Option<String>) -> Option<Change> {
    (a != b).then(|| Change {
        what: what.to_owned(),
        a,
        b,
    })
}

fn differences(project: &Project, a: &RunInfo, b: &RunInfo) -> Differences {
    let (ma, mb) = (&a.manifest, &b.manifest);
    let mut differences = Differences::default();
    let words = |command: &[String]| command.get(1..).unwrap_or_default().join(" ");
    if words(&ma.command) != words(&mb.command) {
        differences.command.push(Change {
            what: "command line".to_owned(),
            a: Some(words(&ma.command)),
            b: Some(words(&mb.command)),
        });
    }
    differences.set = map_changes(&set_flags(&ma.command), &set_flags(&mb.command));
    let git = |info: &RunInfo| info.manifest.git.as_ref().map(|_| info.commit());
    differences.git = change("git commit", git(a), git(b));
    differences.engine_version = change(
        "fracflow version",
        Some(ma.engine_version.clone()),
        Some(mb.engine_version.clone()),
    );
    let mut profile_a = BTreeMap::new();
    let mut profile_b = BTreeMap::new();
    flatten("", &ma.testbed_profile, &mut profile_a);
    flatten("", &mb.testbed_profile, &mut profile_b);
    if ma.testbed != mb.testbed {
        differences.testbed_profile.push(Change {
            what: "name".to_owned(),
            a: Some(ma.testbed.clone()),
            b: Some(mb.testbed.clone()),
        });
    }
    differences
        .testbed_profile
        .extend(map_changes(&profile_a, &profile_b));
    differences.params = param_groups(ma, mb);
    differences.tools = map_changes(
        &rundirs::tool_versions(&project.cache, a),
        &rundirs::tool_versions(&project.cache, b),
    );
    differences.device_images = map_changes(&rundirs::device_images(a), &rundirs::device_images(b));
    differences.node_keys = keys(project, a, b);
    differences
}

/// `--set KEY=VALUE` flags of a command line, by key.
fn set_flags(command: &[String]) -> BTreeMap<String, String> {
    let mut flags = BTreeMap::new();
    let mut words = command.iter();
    while let Some(word) = words.next() {
        let pair = if word == "--set" {
            words.next().cloned()
        } else {
            word.strip_prefix("--set=").map(str::to_owned)
        };
        if let Some((key, value)) = pair.as_deref().and_then(|p| p.split_once('=')) {
            flags.insert(key.to_owned(), value.to_owned());
        }
    }
    flags
}

fn map_changes(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> Vec<Change> {
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter_map(|key| change(key, a.get(key).cloned(), b.get(key).cloned()))
        .collect()
}

/// Leaves of a JSON value by dotted path, each as its JSON text.
fn flatten(prefix: &str, value: &serde_json::Value, out: &mut BTreeMap<String, String>) {
    match value {
        serde_json::Value::Object(map) if !map.is_empty() => {
            for (key, inner) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten(&path, inner, out);
            }
        }
        serde_json::Value::Null if prefix.is_empty() => {}
        other => {
            out.insert(prefix.to_owned(), other.to_string());
        }
    }
}

/// A node's name: its id without the sweep point (`measure[m=1024]` → `measure`).
fn family(id: &str) -> &str {
    id.split_once('[').map_or(id, |(name, _)| name)
}

/// A group's name as printed: `measure[*]` for swept nodes, the id for one unswept node.
fn group_name(name: &str, ids: &[&str]) -> String {
    if ids.iter().any(|id| id.contains('[')) {
        format!("{name}[*]")
    } else {
        name.to_owned()
    }
}

/// A fingerprint field with the sweep points of the node ids in it generalised (`upstream.gen[m=1]` →
/// `upstream.gen[*]`), so the fields of a swept group collapse to one line.
fn general_field(field: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for c in field.chars() {
        match c {
            '[' => {
                if depth == 0 {
                    out.push_str("[*]");
                }
                depth += 1;
            }
            ']' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// Changed fields grouped by node name and field: (node name, field) → each node's (id, a, b).
type Grouped<'a> = BTreeMap<(String, String), Vec<(&'a str, Option<String>, Option<String>)>>;

fn field_groups(grouped: Grouped<'_>) -> Vec<FieldGroup> {
    grouped
        .into_iter()
        .map(|((name, field), changes)| {
            let mut ids: Vec<&str> = changes.iter().map(|(id, _, _)| *id).collect();
            ids.sort_unstable();
            ids.dedup();
            let (example, a, b) = changes[0].clone();
            let same_in_all = changes.iter().all(|(_, x, y)| *x == a && *y == b);
            FieldGroup {
                nodes: group_name(&name, &ids),
                count: ids.len(),
                field,
                a,
                b,
                same_in_all,
                example: example.to_owned(),
            }
        })
        .collect()
}

/// The resolved parameters (each node's point and config, as the manifests record them) that differ.
fn param_groups(
    ma: &fracflow_record::RunManifest,
    mb: &fracflow_record::RunManifest,
) -> Vec<FieldGroup> {
    let mut grouped: Grouped<'_> = BTreeMap::new();
    for (id, params_a) in &ma.params {
        let Some(params_b) = mb.params.get(id) else {
            continue;
        };
        if params_a == params_b {
            continue;
        }
        let (mut fa, mut fb) = (BTreeMap::new(), BTreeMap::new());
        flatten("", params_a, &mut fa);
        flatten("", params_b, &mut fb);
        for c in map_changes(&fa, &fb) {
            grouped
                .entry((family(id).to_owned(), c.what))
                .or_default()
                .push((id.as_str(), c.a, c.b));
        }
    }
    field_groups(grouped)
}

fn node_groups<'a>(nodes: impl Iterator<Item = (&'a String, &'a str)>) -> Vec<NodeGroup> {
    let mut groups: BTreeMap<(String, String), Vec<&str>> = BTreeMap::new();
    for (id, kind) in nodes {
        groups
            .entry((family(id).to_owned(), kind.to_owned()))
            .or_default()
            .push(id);
    }
    let mut groups: Vec<NodeGroup> = groups
        .into_iter()
        .map(|((name, kind), ids)| NodeGroup {
            name: group_name(&name, &ids),
            kind,
            count: ids.len(),
        })
        .collect();
    groups.sort_by(|x, y| y.count.cmp(&x.count).then_with(|| x.name.cmp(&y.name)));
    groups
}

fn keys(project: &Project, a: &RunInfo, b: &RunInfo) -> Keys {
    let (na, nb) = (&a.manifest.nodes, &b.manifest.nodes);
    let mut keys = Keys::default();
    let mut differ = Vec::new();
    let mut outputs_differ = Vec::new();
    let mut why: Grouped<'_> = BTreeMap::new();
    for (id, ra) in na {
        let Some(rb) = nb.get(id) else { continue };
        keys.compared += 1;
        if ra.key != rb.key {
            differ.push((id, rb.kind.as_str()));
            let entries = ra
                .key
                .as_ref()
                .and_then(|k| project.cache.get(k))
                .zip(rb.key.as_ref().and_then(|k| project.cache.get(k)));
            match entries {
                Some((ea, eb)) => {
                    for field in ea.fingerprint.diff(&eb.fingerprint) {
                        why.entry((family(id).to_owned(), general_field(&field.field)))
                            .or_default()
                            .push((id.as_str(), field.old, field.new));
                    }
                }
                None => why
                    .entry((
                        family(id).to_owned(),
                        "(a cache entry is gone: fields unknown)".to_owned(),
                    ))
                    .or_default()
                    .push((
                        id.as_str(),
                        ra.key.map(|k| k.to_string()),
                        rb.key.map(|k| k.to_string()),
                    )),
            }
        } else if ra.outputs != rb.outputs && !ra.outputs.is_empty() && !rb.outputs.is_empty() {
            outputs_differ.push((id, rb.kind.as_str()));
        }
    }
    keys.differ = differ.len();
    keys.groups = node_groups(differ.into_iter());
    keys.outputs_differ = node_groups(outputs_differ.into_iter());
    // Within a group, the ids of the upstream fields differ node by node; only the field's shape is kept.
    keys.why = field_groups(why);
    keys.only_in_a = node_groups(
        na.iter()
            .filter(|(id, _)| !nb.contains_key(*id))
            .map(|(id, r)| (id, r.kind.as_str())),
    );
    keys.only_in_b = node_groups(
        nb.iter()
            .filter(|(id, _)| !na.contains_key(*id))
            .map(|(id, r)| (id, r.kind.as_str())),
    );
    keys
}

/// A measured point of a run: its labels (sweep point, node labels, a client process's own labels) and where
/// its per-second records are.
#[derive(Debug)]
struct Source {
    node: String,
    labels: BTreeMap<String, Cell>,
    seconds: PathBuf,
    member: Option<u64>,
}

/// Every node of the run that left a measurement `summary.json` beside a `seconds.jsonl`.
fn sources(info: &RunInfo) -> Vec<Source> {
    let mut sources = Vec::new();
    for id in info.manifest.nodes.keys() {
        let dir = info.dir.join("nodes").join(node_dir_name(id));
        let seconds = dir.join(SECONDS_FILE);
        if !seconds.is_file() {
            continue;
        }
        let Ok(summary) = fracflow_record::read_record::<MeasureSummary>(&dir.join(SUMMARY_FILE))
        else {
            continue;
        };
        for (member, labels) in summary.rows() {
            sources.push(Source {
                node: id.clone(),
                labels,
                seconds: seconds.clone(),
                member,
            });
        }
    }
    sources
}

fn same_cell(a: &Cell, b: &Cell) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a.label() == b.label(),
    }
}

/// The one measurement whose labels agree with the row's on every label both have; an error in words when
/// none or several do.
fn source_of<'s>(
    sources: &'s [Source],
    row: &BTreeMap<String, Cell>,
) -> std::result::Result<&'s Source, String> {
    let matching: Vec<&Source> = sources
        .iter()
        .filter(|source| {
            let shared: Vec<(&String, &Cell)> = row
                .iter()
                .filter(|(name, _)| source.labels.contains_key(*name))
                .collect();
            !shared.is_empty()
                && shared
                    .iter()
                    .all(|(name, cell)| same_cell(&source.labels[*name], cell))
        })
        .collect();
    match matching.as_slice() {
        [one] => Ok(one),
        [] => Err("no measurement with these labels (no seconds.jsonl)".to_owned()),
        many => Err(format!(
            "{} measurements have these labels ({}, …)",
            many.len(),
            many[0].node
        )),
    }
}

/// How an aggregate's points are resampled: its per-second records from its `from_s` on, or (`stats:
/// samples`) its raw samples cut as it cut them, in blocks.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Reading {
    Seconds(u64),
    Blocks(compare::SampleCuts),
    /// A trace replay's rows are groups of one point's requests: one point's resamples cannot be split by row.
    Trace,
}

impl Reading {
    fn unit(self) -> &'static str {
        match self {
            Reading::Seconds(_) | Reading::Trace => "seconds",
            Reading::Blocks(_) => "blocks",
        }
    }
}

fn reading(info: &RunInfo, aggregate: &str) -> Reading {
    let config = info.manifest.params.get(aggregate).map(|p| &p["config"]);
    let number = |key: &str| {
        config
            .and_then(|c| match &c[key] {
                serde_json::Value::Number(n) => n.as_f64(),
                serde_json::Value::String(s) => s.trim().parse().ok(),
                _ => None,
            })
            .filter(|v| v.is_finite() && *v > 0.0)
    };
    match config.and_then(|c| c["stats"].as_str()) {
        Some("samples") => Reading::Blocks(compare::SampleCuts {
            skip_ns: number("skip_s").map_or(0, |s| (s * 1e9) as u64),
            drop_fraction: number("drop_fraction").unwrap_or(0.0).min(1.0),
            last_piece: config.and_then(|c| c["latency"].as_str()) != Some("from_send"),
        }),
        Some("trace") => Reading::Trace,
        _ => Reading::Seconds(number("from_s").map_or(0, |v| v.ceil() as u64)),
    }
}

/// A point's resampling units as `reading` says.
fn read_units(
    source: &Source,
    reading: Reading,
) -> std::result::Result<compare::PerSecond, String> {
    match reading {
        Reading::Seconds(from) => compare::read_seconds(&source.seconds, from, source.member),
        Reading::Blocks(cuts) => {
            let samples = source.seconds.with_file_name(SAMPLES_FILE);
            if samples.is_file() {
                compare::read_sample_blocks(&samples, cuts)
            } else {
                Err(format!("no {SAMPLES_FILE} beside {}", source.seconds.display()))
            }
        }
        Reading::Trace => Err(
            "a trace replay's rows are groups of one replay's requests; they are not resampled one by one"
                .to_owned(),
        ),
    }
}

/// The tables of an aggregate node's outputs: `NAME.parquet`, else `NAME.csv` (which cannot say its labels).
fn tables_of(info: &RunInfo, node: &str) -> BTreeMap<String, std::result::Result<Table, String>> {
    let Some(record) = info.manifest.nodes.get(node) else {
        return BTreeMap::new();
    };
    let dir = info.dir.join("nodes").join(node_dir_name(node));
    let mut tables = BTreeMap::new();
    for name in record.outputs.keys() {
        let (stem, ext) = match name.rsplit_once('.') {
            Some(parts) => parts,
            None => continue,
        };
        let wanted = ext == "parquet"
            || (ext == "csv" && !record.outputs.contains_key(&format!("{stem}.parquet")));
        if wanted {
            let path = dir.join(name);
            let table = fracflow_aggregate::read_table(&path)
                .map_err(|e| format!("{}: {e}", path.display()));
            tables.insert(stem.to_owned(), table);
        }
    }
    tables
}

/// A row's identity: its label cells, without the provenance columns (which differ across testbeds).
fn row_labels(table: &Table, row: &[Cell], labels: &[String]) -> BTreeMap<String, Cell> {
    labels
        .iter()
        .filter(|l| !PROVENANCE_COLUMNS.contains(&l.as_str()))
        .filter_map(|l| Some((l.clone(), row.get(table.column(l)?)?.clone())))
        .collect()
}

fn key_text(labels: &BTreeMap<String, Cell>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={}", v.label()))
        .collect::<Vec<_>>()
        .join(",")
}

type Rows = Vec<(String, BTreeMap<String, Cell>, Vec<Cell>)>;

/// The rows of a table by their labels, in table order; `None` when two rows share their labels (a CDF).
fn rows_by_labels(table: &Table, labels: &[String]) -> Option<Rows> {
    let mut seen = BTreeSet::new();
    let mut rows = Vec::new();
    for row in &table.rows {
        let cells = row_labels(table, row, labels);
        let key = key_text(&cells);
        if !seen.insert(key.clone()) {
            return None;
        }
        rows.push((key, cells, row.clone()));
    }
    Some(rows)
}

fn points(a: &RunInfo, b: &RunInfo, args: &DiffArgs) -> Result<(Vec<Point>, Vec<String>)> {
    let (sources_a, sources_b) = (sources(a), sources(b));
    let mut points = Vec::new();
    let mut notes = Vec::new();
    let mut units_cache: BTreeMap<(bool, String, Option<u64>), compare::PerSecond> =
        BTreeMap::new();
    for (node, record) in &a.manifest.nodes {
        if record.kind != "aggregate" {
            continue;
        }
        if !b.manifest.nodes.contains_key(node) {
            notes.push(format!("aggregate `{node}` is only in run A"));
            continue;
        }
        let (tables_a, tables_b) = (tables_of(a, node), tables_of(b, node));
        for (name, table_a) in &tables_a {
            let Some(table_b) = tables_b.get(name) else {
                notes.push(format!("{node}/{name}: only in run A"));
                continue;
            };
            let (table_a, table_b) = match (table_a, table_b) {
                (Ok(x), Ok(y)) => (x, y),
                (Err(e), _) | (_, Err(e)) => {
                    notes.push(format!("{node}/{name}: not compared: {e}"));
                    continue;
                }
            };
            let Some(mut labels) = table_a.labels.clone() else {
                notes.push(format!(
                    "{node}/{name}: not compared: the table does not say which columns are labels (a CSV export)"
                ));
                continue;
            };
            // A derived row (`scale_by`'s) repeats its measured twin's labels; its mark tells them apart.
            if table_a.column(COMPUTED).is_some() && !labels.iter().any(|l| l == COMPUTED) {
                labels.push(COMPUTED.to_owned());
            }
            let (Some(rows_a), Some(rows_b)) = (
                rows_by_labels(table_a, &labels),
                rows_by_labels(table_b, &labels),
            ) else {
                notes.push(format!(
                    "{node}/{name}: not compared: several rows share their labels (a distribution, not points)"
                ));
                continue;
            };
            let b_rows: BTreeMap<&str, &Vec<Cell>> =
                rows_b.iter().map(|(k, _, r)| (k.as_str(), r)).collect();
            let a_keys: BTreeSet<&str> = rows_a.iter().map(|(k, _, _)| k.as_str()).collect();
            let only_b = rows_b
                .iter()
                .filter(|(k, _, _)| !a_keys.contains(k.as_str()))
                .count();
            if only_b > 0 {
                notes.push(format!("{node}/{name}: {only_b} point(s) only in run B"));
            }
            let statistics: Vec<&String> = table_a
                .columns
                .iter()
                .filter(|c| !labels.contains(c) && table_b.column(c).is_some())
                .collect();
            let readings = (reading(a, node), reading(b, node));
            let stats = a
                .manifest
                .params
                .get(node)
                .and_then(|p| p["config"]["stats"].as_str())
                .unwrap_or("")
                .to_owned();
            for (key, cells, row_a) in &rows_a {
                let Some(row_b) = b_rows.get(key.as_str()) else {
                    notes.push(format!("{node}/{name}: point {key} only in run A"));
                    continue;
                };
                let computed = table_a
                    .column(COMPUTED)
                    .and_then(|c| row_a.get(c))
                    .and_then(Cell::as_f64)
                    == Some(1.0);
                let matched = if computed {
                    Err("computed from other rows, not measured".to_owned())
                } else {
                    source_of(&sources_a, cells)
                        .map_err(|e| format!("run A: {e}"))
                        .and_then(|sa| {
                            source_of(&sources_b, cells)
                                .map(|sb| (sa, sb))
                                .map_err(|e| format!("run B: {e}"))
                        })
                };
                let mut units = |in_b: bool, source: &Source, reading: Reading| {
                    let slot = (in_b, source.seconds.display().to_string(), source.member);
                    if let Some(found) = units_cache.get(&slot) {
                        return Ok(found.clone());
                    }
                    let read = read_units(source, reading)?;
                    units_cache.insert(slot, read.clone());
                    Ok::<_, String>(read)
                };
                let seconds = match &matched {
                    Ok((sa, sb)) => units(false, sa, readings.0)
                        .and_then(|x| units(true, sb, readings.1).map(|y| (x, y))),
                    Err(e) => Err(e.clone()),
                };
                let mut point = Point {
                    node: node.clone(),
                    table: name.clone(),
                    labels: cells.iter().map(|(k, v)| (k.clone(), v.label())).collect(),
                    verdict: None,
                    note: seconds.as_ref().err().cloned(),
                    statistics: Vec::new(),
                };
                for column in &statistics {
                    let (Some(va), Some(vb)) = (
                        table_a
                            .column(column)
                            .and_then(|c| row_a.get(c))
                            .and_then(Cell::as_f64),
                        table_b
                            .column(column)
                            .and_then(|c| row_b.get(c))
                            .and_then(Cell::as_f64),
                    ) else {
                        continue;
                    };
                    let better = compare::better(column);
                    let mut statistic = Statistic {
                        name: (*column).clone(),
                        better: better.map(compare::Better::as_str),
                        a: va,
                        b: vb,
                        change_percent: (va != 0.0).then(|| (vb / va - 1.0) * 100.0),
                        interval: None,
                        verdict: None,
                        no_interval: None,
                    };
                    match (Counterpart::of(&stats, column).zip(better), &seconds) {
                        (None, _) => {
                            statistic.no_interval = Some(NO_COUNTERPART.to_owned());
                        }
                        (Some(_), Err(e)) => statistic.no_interval = Some(e.clone()),
                        (Some((counterpart, better)), Ok((sa, sb))) => {
                            let with_values = |seconds: &compare::PerSecond| {
                                seconds
                                    .iter()
                                    .filter(|s| !s.values(counterpart.values).is_empty())
                                    .count()
                            };
                            let (xa, xb) = (with_values(sa), with_values(sb));
                            let seed = compare::seed_for(
                                args.seed,
                                &format!("{node}/{name}/{key}/{column}"),
                            );
                            match compare::bootstrap(sa, sb, counterpart, seed) {
                                Some(interval) => {
                                    statistic.verdict = Some(
                                        compare::verdict(&interval, args.noise / 100.0, better)
                                            .as_str(),
                                    );
                                    statistic.interval = Some(IntervalOut {
                                        estimate_percent: interval.estimate * 100.0,
                                        low_percent: interval.low * 100.0,
                                        high_percent: interval.high * 100.0,
                                        over: format!(
                                            "resampled {}, {}",
                                            readings.1.unit(),
                                            counterpart.words()
                                        ),
                                        unit: readings.1.unit(),
                                        units_a: xa,
                                        units_b: xb,
                                    });
                                }
                                None => {
                                    statistic.no_interval = Some(format!(
                                        "{xa} and {xb} {} in the window; an interval needs {} on each side",
                                        readings.1.unit(),
                                        compare::MIN_SECONDS
                                    ));
                                }
                            }
                        }
                    }
                    point.statistics.push(statistic);
                }
                point.verdict = point_verdict(&point);
                points.push(point);
            }
        }
    }
    for node in b.manifest.nodes.keys() {
        let is_aggregate = b.manifest.nodes[node].kind == "aggregate";
        if is_aggregate && !a.manifest.nodes.contains_key(node) {
            notes.push(format!("aggregate `{node}` is only in run B"));
        }
    }
    Ok((points, notes))
}

/// A point regressed when any statistic did, improved when any did and none regressed, else no change; `None`
/// when no statistic has an interval.
fn point_verdict(point: &Point) -> Option<&'static str> {
    let verdicts: Vec<Verdict> = point
        .statistics
        .iter()
        .filter_map(|s| match s.verdict? {
            "regressed" => Some(Verdict::Regressed),
            "improved" => Some(Verdict::Improved),
            _ => Some(Verdict::NoChange),
        })
        .collect();
    verdicts.into_iter().max().map(Verdict::as_str)
}

fn count(points: &[Point]) -> Counts {
    let with = |v: &str| points.iter().filter(|p| p.verdict == Some(v)).count();
    Counts {
        regressed: with("regressed"),
        improved: with("improved"),
        no_change: with("no change"),
        without_interval: points.iter().filter(|p| p.verdict.is_none()).count(),
    }
}

fn shown_value(value: &Option<String>) -> &str {
    value.as_deref().unwrap_or("(none)")
}

fn side_line(side: &Side) -> String {
    format!(
        "{} ({}, testbed {} ({}), host {}, git {})",
        side.run_id,
        side.status,
        side.testbed,
        side.testbed_kind,
        side.host,
        side.git.as_deref().unwrap_or("-")
    )
}

fn group_list(groups: &[NodeGroup]) -> String {
    let mut parts: Vec<String> = groups
        .iter()
        .take(SHOWN)
        .map(|g| format!("{} {} ({})", g.count, g.name, g.kind))
        .collect();
    if groups.len() > SHOWN {
        parts.push(format!("and {} more groups", groups.len() - SHOWN));
    }
    parts.join(", ")
}

/// `gen[*] (2 nodes)`, or the one node's id.
fn group_nodes(group: &FieldGroup) -> String {
    if group.count > 1 {
        format!("{} ({} nodes)", group.nodes, group.count)
    } else {
        group.example.clone()
    }
}

fn field_line(group: &FieldGroup) -> String {
    let nodes = group_nodes(group);
    if group.same_in_all {
        format!(
            "{nodes} {}: {} → {}",
            group.field,
            shown_value(&group.a),
            shown_value(&group.b)
        )
    } else {
        format!(
            "{nodes} {}: differs node by node, e.g. {}: {} → {}",
            group.field,
            group.example,
            shown_value(&group.a),
            shown_value(&group.b)
        )
    }
}

/// Lines of a list, at most [`SHOWN`], then how many more there are.
fn bounded<T>(items: &[T], line: impl Fn(&T) -> String) -> Vec<String> {
    let mut lines: Vec<String> = items.iter().take(SHOWN).map(line).collect();
    if items.len() > SHOWN {
        lines.push(format!("… and {} more (see --json)", items.len() - SHOWN));
    }
    lines
}

fn change_line(c: &Change) -> String {
    format!("{}: {} → {}", c.what, shown_value(&c.a), shown_value(&c.b))
}

/// The "what differed" section as (heading, lines), shared by the text and the HTML page.
fn difference_sections(d: &Differences) -> Vec<(String, Vec<String>)> {
    let mut sections = Vec::new();
    let mut runs = Vec::new();
    runs.extend(d.command.iter().map(change_line));
    runs.extend(d.set.iter().map(|c| format!("--set {}", change_line(c))));
    runs.extend(d.git.iter().map(change_line));
    runs.extend(d.engine_version.iter().map(change_line));
    if !runs.is_empty() {
        sections.push(("how the runs were started".to_owned(), runs));
    }
    if !d.testbed_profile.is_empty() {
        sections.push((
            format!(
                "testbed profile as used: {} field(s)",
                d.testbed_profile.len()
            ),
            bounded(&d.testbed_profile, change_line),
        ));
    }
    if !d.params.is_empty() {
        let nodes: usize = d.params.iter().map(|g| g.count).sum();
        sections.push((
            format!(
                "parameters: {} field(s), {nodes} node-field change(s)",
                d.params.len()
            ),
            bounded(&d.params, field_line),
        ));
    }
    if !d.tools.is_empty() {
        sections.push(("tool versions".to_owned(), bounded(&d.tools, change_line)));
    }
    if !d.device_images.is_empty() {
        sections.push((
            "images and partials the device held (blake3)".to_owned(),
            bounded(&d.device_images, change_line),
        ));
    }
    let k = &d.node_keys;
    let mut keys = Vec::new();
    if k.differ > 0 {
        keys.push(format!(
            "{} of {} node keys differ: {}",
            k.differ,
            k.compared,
            group_list(&k.groups)
        ));
        // The fields only: the parameters above have the values, and a dependency's output hash says nothing.
        keys.extend(
            bounded(&k.why, |g| format!("{} {}", group_nodes(g), g.field))
                .into_iter()
                .map(|l| format!("  because of {l}")),
        );
    } else {
        keys.push(format!("all {} node keys are the same", k.compared));
    }
    if !k.outputs_differ.is_empty() {
        keys.push(format!(
            "same key, different outputs: {}",
            group_list(&k.outputs_differ)
        ));
    }
    if !k.only_in_a.is_empty() {
        keys.push(format!("only in A: {}", group_list(&k.only_in_a)));
    }
    if !k.only_in_b.is_empty() {
        keys.push(format!("only in B: {}", group_list(&k.only_in_b)));
    }
    sections.push(("node keys".to_owned(), keys));
    sections
}

fn percent(value: f64) -> String {
    format!("{value:+.1}%")
}

fn number(value: f64) -> String {
    if value.abs() >= 100.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.3}")
    }
}

fn point_title(point: &Point) -> String {
    let labels: Vec<String> = point
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    format!("{}/{} {}", point.node, point.table, labels.join(" "))
}

fn statistic_line(s: &Statistic) -> String {
    let change = s.change_percent.map_or_else(|| "-".to_owned(), percent);
    match &s.interval {
        Some(i) => format!(
            "{:<16} {} → {}  {change}  95% CI of the change [{}, {}]  {}  ({}: {}, {} vs {})",
            s.name,
            number(s.a),
            number(s.b),
            percent(i.low_percent),
            percent(i.high_percent),
            s.verdict.unwrap_or("-"),
            i.over,
            percent(i.estimate_percent),
            i.units_a,
            i.units_b
        ),
        None => format!("{:<16} {} → {}  {change}", s.name, number(s.a), number(s.b)),
    }
}

fn render_text(root: &Path, report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "diff of pipeline `{}`", report.a.pipeline);
    let _ = writeln!(out, "  A: {}", side_line(&report.a));
    let _ = writeln!(out, "  B: {}", side_line(&report.b));
    if report.across_testbeds {
        let _ = writeln!(
            out,
            "ACROSS TESTBEDS: A ran on {} ({}), B on {} ({}); every change below includes the testbed's",
            report.a.testbed, report.a.testbed_kind, report.b.testbed, report.b.testbed_kind
        );
    }
    let _ = writeln!(out, "\nwhat differed:");
    for (heading, lines) in difference_sections(&report.differences) {
        let _ = writeln!(out, "  {heading}");
        for line in lines {
            let _ = writeln!(out, "    {line}");
        }
    }
    let _ = writeln!(
        out,
        "\npoints (B against A; 95% bootstrap intervals over resampled seconds or blocks of requests, {} resamples, seed {}; noise threshold ±{}%):",
        report.resamples, report.seed, report.noise_threshold_percent
    );
    for point in &report.points {
        let _ = writeln!(
            out,
            "  {}: {}",
            point_title(point),
            point.verdict.unwrap_or("no interval")
        );
        let mut reasons: Vec<&str> = point.note.iter().map(String::as_str).collect();
        for s in &point.statistics {
            if let Some(reason) = s.no_interval.as_deref()
                && reason != NO_COUNTERPART
                && !reasons.contains(&reason)
            {
                reasons.push(reason);
            }
        }
        for reason in reasons {
            let _ = writeln!(out, "      ({reason})");
        }
        let (with, without): (Vec<&Statistic>, Vec<&Statistic>) =
            point.statistics.iter().partition(|s| s.interval.is_some());
        for s in with {
            let _ = writeln!(out, "      {}", statistic_line(s));
        }
        if !without.is_empty() {
            let parts: Vec<String> = without
                .iter()
                .map(|s| {
                    format!(
                        "{} {}",
                        s.name,
                        s.change_percent.map_or_else(|| "-".to_owned(), percent)
                    )
                })
                .collect();
            let _ = writeln!(out, "      without interval: {}", parts.join(", "));
        }
    }
    if report.points.is_empty() {
        let _ = writeln!(out, "  (no summary table points in both runs)");
    } else {
        let _ = writeln!(out, "  {CAVEAT}");
    }
    for note in &report.notes {
        let _ = writeln!(out, "  note: {note}");
    }
    let c = &report.counts;
    let _ = writeln!(
        out,
        "\n{} point(s): {} regressed, {} improved, {} no change, {} without interval",
        report.points.len(),
        c.regressed,
        c.improved,
        c.no_change,
        c.without_interval
    );
    let _ = writeln!(out, "diff page: {}", shown(root, &report.html));
    out
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn verdict_class(verdict: Option<&str>) -> &'static str {
    match verdict {
        Some("regressed") => "regressed",
        Some("improved") => "improved",
        Some(_) => "same",
        None => "none",
    }
}

/// The page: one file, inline style, no script.
fn render_html(report: &Report) -> String {
    let mut page = String::new();
    let title = format!(
        "{}: run {} against {}",
        report.a.pipeline, report.b.run_id, report.a.run_id
    );
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>\
         body{{font-family:sans-serif;margin:2em;max-width:80em}}table{{border-collapse:collapse;margin:.5em 0}}\
         td,th{{border:1px solid #ccc;padding:.2em .5em;text-align:left}}td.n{{text-align:right;font-variant-numeric:tabular-nums}}\
         .regressed{{background:#fdd}}.improved{{background:#dfd}}.same{{background:#f4f4f4}}.none{{color:#777}}\
         .warn{{background:#ffd;padding:.5em;border:1px solid #cc6}}</style></head><body>\n",
        escape(&title)
    );
    let _ = writeln!(page, "<h1>{}</h1>", escape(&title));
    let _ = writeln!(
        page,
        "<p>A: {}<br>B: {}</p>",
        escape(&side_line(&report.a)),
        escape(&side_line(&report.b))
    );
    if report.across_testbeds {
        let _ = writeln!(
            page,
            "<p class=\"warn\">Across testbeds: A ran on {} ({}), B on {} ({}); every change below includes the testbed's.</p>",
            escape(&report.a.testbed),
            escape(&report.a.testbed_kind),
            escape(&report.b.testbed),
            escape(&report.b.testbed_kind)
        );
    }
    let _ = writeln!(page, "<h2>What differed</h2>");
    for (heading, lines) in difference_sections(&report.differences) {
        let _ = writeln!(page, "<h3>{}</h3><ul>", escape(&heading));
        for line in lines {
            let _ = writeln!(page, "<li>{}</li>", escape(&line));
        }
        let _ = writeln!(page, "</ul>");
    }
    let c = &report.counts;
    let _ = writeln!(
        page,
        "<h2>Points</h2><p>{} point(s): {} regressed, {} improved, {} no change, {} without interval. \
         95&nbsp;% bootstrap intervals of the relative change (B against A) over resampled seconds or blocks of requests, {} resamples, seed {}; \
         noise threshold ±{}&nbsp;%. Lower latency and higher throughput are improvements.</p>",
        report.points.len(),
        c.regressed,
        c.improved,
        c.no_change,
        c.without_interval,
        report.resamples,
        report.seed,
        report.noise_threshold_percent
    );
    let _ = writeln!(
        page,
        "<table><tr><th>point</th><th>statistic</th><th>A</th><th>B</th><th>change</th><th>95&nbsp;% interval</th>\
         <th>verdict</th><th>from</th></tr>"
    );
    for point in &report.points {
        let rows = point.statistics.len().max(1);
        let _ = write!(
            page,
            "<tr class=\"{}\"><td rowspan=\"{rows}\">{}<br><b>{}</b>{}</td>",
            verdict_class(point.verdict),
            escape(&point_title(point)),
            point.verdict.unwrap_or("no interval"),
            point
                .note
                .as_ref()
                .map_or_else(String::new, |n| format!("<br><small>{}</small>", escape(n)))
        );
        if point.statistics.is_empty() {
            let _ = writeln!(page, "<td colspan=\"7\"></td></tr>");
        }
        for (index, s) in point.statistics.iter().enumerate() {
            if index > 0 {
                let _ = write!(page, "<tr class=\"{}\">", verdict_class(point.verdict));
            }
            let (interval, from) = match &s.interval {
                Some(i) => (
                    format!("[{}, {}]", percent(i.low_percent), percent(i.high_percent)),
                    format!(
                        "{}: {}, {} vs {}",
                        i.over,
                        percent(i.estimate_percent),
                        i.units_a,
                        i.units_b
                    ),
                ),
                None => ("-".to_owned(), s.no_interval.clone().unwrap_or_default()),
            };
            let _ = writeln!(
                page,
                "<td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
                 <td class=\"n\">{}</td><td class=\"{}\">{}</td><td><small>{}</small></td></tr>",
                escape(&s.name),
                number(s.a),
                number(s.b),
                s.change_percent.map_or_else(|| "-".to_owned(), percent),
                interval,
                verdict_class(s.verdict),
                s.verdict.unwrap_or("-"),
                escape(&from)
            );
        }
    }
    let _ = writeln!(page, "</table><p>{}</p>", escape(CAVEAT));
    if !report.notes.is_empty() {
        let _ = writeln!(page, "<h3>Notes</h3><ul>");
        for note in &report.notes {
            let _ = writeln!(page, "<li>{}</li>", escape(note));
        }
        let _ = writeln!(page, "</ul>");
    }
    let _ = writeln!(
        page,
        "<p><small>written by fracflow diff (schema {})</small></p></body></html>",
        SCHEMA
    );
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swept_ids_in_fields_collapse_and_set_flags_are_read() {
        assert_eq!(
            general_field("upstream.gen[m=1024,n=[1]]"),
            "upstream.gen[*]"
        );
        assert_eq!(family("measure[m=1]"), "measure");
        let command: Vec<String> = ["fracflow", "run", "p", "--set", "d=3", "--set=x=\"a\""]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let flags = set_flags(&command);
        assert_eq!(flags.get("d").map(String::as_str), Some("3"));
        assert_eq!(flags.get("x").map(String::as_str), Some("\"a\""));
        assert_eq!(
            file_safe("2026-01-01T000000/../x"),
            "2026-01-01T000000_.._x"
        );
    }

    #[test]
    fn html_escapes_what_runs_control() {
        assert_eq!(escape("<a href='x'>&"), "&lt;a href=&#39;x&#39;&gt;&amp;");
    }
}
