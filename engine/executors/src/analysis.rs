//! The analysis kinds — `aggregate`, `plot`, `check` — gluing fracflow-aggregate and fracflow-plot to the
//! engine: which dependency outputs they read, what they publish, and where the figures say the numbers came from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fracflow_aggregate::{AggregateSpec, Expectation, Host, PointSource, StatsKind};
use fracflow_core::{ConfigProblem, Executor, Job, KindInfo, NodeError, NodeSpec, Outcome};
use fracflow_plot::PlotSpec;
use fracflow_record::{
    Cell, ExpectationResult, METRICS_FILE, MeasureSource, MeasureSummary, MetricsRecord,
    Provenance, SUMMARY_FILE, Table, Verdict,
};

use crate::config;
use crate::testbed::Session;

/// The schema of a kind whose keys a leaf crate's spec defines (fracflow-aggregate's, fracflow-plot's): those
/// crates do not derive schemas, so it names the keys (read from the spec struct itself) and leaves their values
/// to the spec's parse, which the loader runs through `check` before anything starts.
fn leaf_schema(description: &str, required: &[&str], keys: &[&'static str]) -> serde_json::Value {
    let properties: serde_json::Map<String, serde_json::Value> = keys
        .iter()
        .map(|k| ((*k).to_owned(), serde_json::Value::Bool(true)))
        .collect();
    serde_json::json!({
        "type": "object",
        "description": description,
        "properties": properties,
        "required": required,
    })
}

/// A node's first configuration problem as the error of a node asked to run anyway.
fn first_problem(spec: &NodeSpec, problems: &[ConfigProblem]) -> NodeError {
    match problems.first() {
        Some(problem) => config::node_error(spec, problem),
        None => failed(spec, "invalid configuration"),
    }
}

/// The aggregate keys that take a number, which a template leaves as text (`from_s: "{from_s}"`).
const AGGREGATE_NUMBERS: &[&str] = &[
    "from_s",
    "skip_s",
    "drop_fraction",
    "piece",
    "exact_max_samples",
    "blocks_ms",
];

/// The node's aggregate spec: fracflow-aggregate's struct, read from the config with template-made numbers
/// turned back into numbers.
fn aggregate_spec(spec: &NodeSpec) -> Result<AggregateSpec, Vec<ConfigProblem>> {
    let mut object = serde_json::Map::new();
    for (key, value) in &spec.config {
        let number = match value {
            serde_json::Value::String(text) if AGGREGATE_NUMBERS.contains(&key.as_str()) => {
                config::integer_text(text)
                    .map(serde_json::Value::from)
                    .or_else(|| {
                        text.trim()
                            .parse::<f64>()
                            .ok()
                            .and_then(serde_json::Number::from_f64)
                            .map(serde_json::Value::Number)
                    })
            }
            _ => None,
        };
        object.insert(key.clone(), number.unwrap_or_else(|| value.clone()));
    }
    config::parse_value(&serde_json::Value::Object(object))
}

fn failed(spec: &NodeSpec, what: impl std::fmt::Display) -> NodeError {
    NodeError::permanent(format!("node `{}`: {what}", spec.id))
}

fn info(version: u32) -> KindInfo {
    KindInfo {
        version,
        tools: BTreeMap::new(),
        cacheable: true,
    }
}

/// `aggregate`: every dependency with a measurement `summary.json` is a point; with `stats: metrics`, every
/// dependency with a `metrics.json` (a `command` node's extracted values) is a row.
#[derive(Debug, Default)]
pub struct AggregateKind;

impl Executor for AggregateKind {
    fn check(&self, spec: &NodeSpec, _root: &Path) -> Vec<ConfigProblem> {
        aggregate_spec(spec).err().unwrap_or_default()
    }

    fn config_schema(&self) -> serde_json::Value {
        leaf_schema(
            "`aggregate`: its dependencies' per-request samples, per-second records or extracted metrics → summary \
             tables (`summary.csv`, `summary.parquet`, and `cdf.*` when asked). The keys are fracflow-aggregate's \
             spec (see its docs).",
            &["stats"],
            fracflow_core::suggest::field_names::<AggregateSpec>(),
        )
    }

    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        aggregate_spec(spec).map_err(|p| first_problem(spec, &p))?;
        // 2: `stats: metrics` and `compare.op`; 3: the provenance columns of measured tables.
        Ok(info(3))
    }

    fn describe(&self, spec: &NodeSpec) -> String {
        format!(
            "aggregate {} measured points ({})",
            spec.deps.len(),
            spec.config
                .get("stats")
                .and_then(|v| v.as_str())
                .unwrap_or("?")
        )
    }

    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let spec: AggregateSpec =
            aggregate_spec(job.spec).map_err(|p| first_problem(job.spec, &p))?;
        let points = if spec.stats == StatsKind::Metrics {
            metric_rows(job)?
        } else {
            measured_points(job)?
        };
        let aggregated = fracflow_aggregate::aggregate(&spec, &points, job.out_dir)
            .map_err(|e| failed(job.spec, e))?;
        if !aggregated.notes.is_empty() {
            use std::io::Write;
            let mut log = std::fs::OpenOptions::new()
                .append(true)
                .open(job.log)
                .map_err(|e| failed(job.spec, e))?;
            for note in &aggregated.notes {
                writeln!(log, "note: {note}").map_err(|e| failed(job.spec, e))?;
            }
        }
        let rows: usize = aggregated.tables.values().map(|t| t.rows.len()).sum();
        let metrics = BTreeMap::from([
            ("points".to_owned(), serde_json::json!(points.len())),
            ("rows".to_owned(), serde_json::json!(rows)),
        ]);
        Ok(Outcome { metrics })
    }
}

/// Reads a dependency's record (`summary.json`, `metrics.json`): a missing or mistyped field fails the node,
/// naming the file and the field.
fn read_dependency_record<T>(job: &Job<'_>, path: &Path) -> Result<T, NodeError>
where
    T: serde::de::DeserializeOwned + fracflow_record::Versioned,
{
    fracflow_record::read_record(path).map_err(|e| failed(job.spec, e))
}

/// `stats: metrics`: one row per dependency with a `metrics.json`, labelled like a measured point.
fn metric_rows(job: &Job<'_>) -> Result<Vec<PointSource>, NodeError> {
    let mut rows = Vec::new();
    for dir in job.inputs.dirs() {
        let path = dir.join(METRICS_FILE);
        if !path.is_file() {
            continue;
        }
        let record: MetricsRecord = read_dependency_record(job, &path)?;
        rows.push(PointSource {
            labels: record.label_cells(),
            dir,
            member: None,
        });
    }
    if rows.is_empty() {
        return Err(failed(
            job.spec,
            "no dependency left a metrics.json (a `command` node with `metrics:` writes one)",
        ));
    }
    Ok(rows)
}

/// Every dependency with a measurement `summary.json`: a point, or one per labelled client process.
fn measured_points(job: &Job<'_>) -> Result<Vec<PointSource>, NodeError> {
    let mut points = Vec::new();
    for dir in job.inputs.dirs() {
        let path = dir.join(SUMMARY_FILE);
        if !path.is_file() {
            continue;
        }
        let summary: MeasureSummary = read_dependency_record(job, &path)?;
        let provenance = |labels| {
            with_provenance(labels, &summary.source)
                .map_err(|e| failed(job.spec, format!("{}: {e}", path.display())))
        };
        // Client processes that ran at once with labels of their own are one point each.
        for (member, labels) in summary.rows() {
            points.push(PointSource {
                labels: provenance(labels)?,
                dir: dir.clone(),
                member,
            });
        }
    }
    if points.is_empty() {
        return Err(failed(
            job.spec,
            "no dependency is a measurement (no summary.json among the deps' outputs)",
        ));
    }
    Ok(points)
}

/// A measured point's labels with the columns that say where its numbers came from
/// ([`fracflow_record::PROVENANCE_COLUMNS`]), so every table made from it carries them. A label of the same name
/// would hide them (or be silently replaced), so it is refused.
fn with_provenance(
    mut labels: BTreeMap<String, Cell>,
    source: &MeasureSource,
) -> Result<BTreeMap<String, Cell>, String> {
    for (column, value) in source.columns() {
        if labels.contains_key(column) {
            return Err(format!(
                "the point has a label `{column}`, the name of a column aggregate adds to say where the numbers \
                 came from ({}); rename the label",
                fracflow_record::PROVENANCE_COLUMNS.join(", ")
            ));
        }
        labels.insert(column.to_owned(), Cell::Text(value));
    }
    Ok(labels)
}

/// Every table (`NAME.parquet`, else `NAME.csv`) in the dependencies' outputs, by name.
fn dependency_tables(job: &Job<'_>) -> Result<BTreeMap<String, Table>, NodeError> {
    tables_in(job.inputs.dirs()).map_err(|e| failed(job.spec, e))
}

/// Every table in `dirs`: `NAME.parquet` (or `NAME.csv` when there is no Parquet twin).
pub fn tables_in(
    dirs: impl IntoIterator<Item = impl AsRef<Path>>,
) -> Result<BTreeMap<String, Table>, String> {
    let mut tables = BTreeMap::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir.as_ref()) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        files.sort();
        for path in files {
            let (Some(stem), Some(ext)) = (
                path.file_stem().and_then(|s| s.to_str()),
                path.extension().and_then(|s| s.to_str()),
            ) else {
                continue;
            };
            let twin_parquet = path.with_extension("parquet");
            let wanted = ext == "parquet" || (ext == "csv" && !twin_parquet.is_file());
            if wanted {
                let table = fracflow_aggregate::read_table(&path).map_err(|e| e.to_string())?;
                tables.insert(stem.to_owned(), table);
            }
        }
    }
    Ok(tables)
}

/// The distinct tools the tables not made from measurements name in their `source` column (tool-driven
/// artifacts such as RPCNIC and SUME set it from a param), in order of appearance.
pub fn tool_sources<'t>(tables: impl IntoIterator<Item = &'t Table>) -> Vec<String> {
    let mut sources: Vec<String> = Vec::new();
    for table in tables.into_iter().filter(|t| !t.is_measured()) {
        if let Some(column) = table.column("source") {
            for row in &table.rows {
                if let Some(Cell::Text(source)) = row.get(column)
                    && !sources.contains(source)
                {
                    sources.push(source.clone());
                }
            }
        }
    }
    sources
}

/// A footer's words for numbers a pipeline's own tools produced.
pub fn tools_phrase(sources: &[String]) -> String {
    format!("numbers from the pipeline's tools ({})", sources.join(", "))
}

/// Who produced the numbers of `tables`, in a figure footer's words: the distinct clients the `source` column of
/// measured tables names ([`MeasureSource::client_in`], e.g. `real fperf through the adapter`), else the tools
/// the other tables name there (tool-driven artifacts such as RPCNIC and SUME); `None` when no table says.
/// A fresh figure and its re-drawing (`redraw`) read their footer from the same tables through this.
pub fn client_in_tables<'t>(tables: impl IntoIterator<Item = &'t Table> + Clone) -> Option<String> {
    let mut clients: Vec<&str> = Vec::new();
    for table in tables.clone().into_iter().filter(|t| t.is_measured()) {
        let Some(column) = table.column("source") else {
            continue;
        };
        for row in &table.rows {
            if let Some(Cell::Text(source)) = row.get(column) {
                let client = MeasureSource::client_in(source);
                if !clients.contains(&client) {
                    clients.push(client);
                }
            }
        }
    }
    if !clients.is_empty() {
        return Some(clients.join(" + "));
    }
    let tools = tool_sources(tables);
    (!tools.is_empty()).then(|| tools_phrase(&tools))
}

/// Who produced a figure's numbers: what its tables say ([`client_in_tables`]), else the client the testbed
/// measures with (tables a `command` node wrote carry no provenance columns).
fn client_of(tables: &BTreeMap<String, Table>, session: Option<&Session>) -> String {
    if let Some(client) = client_in_tables(tables.values()) {
        return client;
    }
    let real_fperf = session.is_some_and(|s| s.profile().measures_with_fperf());
    if real_fperf {
        "real fperf through the adapter".to_owned()
    } else {
        "embedded client".to_owned()
    }
}

/// Where the figure's numbers came from: the testbed and host of the measurements, and the run that drew it.
fn provenance(job: &Job<'_>, session: Option<&Session>, client: String) -> Provenance {
    let (testbed, kind) = match session {
        Some(s) => (s.name().to_owned(), s.profile().kind.as_str().to_owned()),
        None => (job.run.testbed.clone(), "unknown".to_owned()),
    };
    Provenance {
        pipeline: job.run.pipeline.clone(),
        run_id: job.run.run_id.clone(),
        testbed,
        testbed_kind: kind,
        host: crate::host::name(),
        client,
    }
}

/// `plot`: one figure from the dependencies' tables.
#[derive(Debug, Default)]
pub struct PlotKind {
    pub session: Option<Arc<Session>>,
}

impl Executor for PlotKind {
    fn check(&self, spec: &NodeSpec, _root: &Path) -> Vec<ConfigProblem> {
        config::check_with::<PlotSpec>(spec, |_| Vec::new())
    }

    fn config_schema(&self) -> serde_json::Value {
        leaf_schema(
            "`plot`: draws one figure from its `aggregate` dependency's tables as SVG, PNG and PDF. The keys are \
             fracflow-plot's spec (see its docs).",
            &["figure", "style", "y"],
            fracflow_core::suggest::field_names::<PlotSpec>(),
        )
    }

    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        config::typed::<PlotSpec>(spec)?;
        Ok(info(1))
    }

    fn describe(&self, spec: &NodeSpec) -> String {
        match config::typed::<PlotSpec>(spec) {
            Ok(plot) => format!("draw {}", fracflow_plot::figure_files(&plot).join(", ")),
            Err(e) => format!("<{e}>"),
        }
    }

    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let mut plot: PlotSpec = config::typed(job.spec)?;
        let tables = dependency_tables(job)?;
        let client = client_of(&tables, self.session.as_deref());
        let mut provenance = provenance(job, self.session.as_deref(), client);
        mark_synthetic_trace(&mut plot, &mut provenance, &tables);
        fracflow_plot::draw(&plot, &tables, &provenance, job.out_dir)
            .map_err(|e| failed(job.spec, e))?;
        Ok(Outcome::default())
    }
}

/// Re-draws the figure of `plot` node `spec` from the tables in `dep_dirs` (its dependencies' outputs in a run
/// directory) into `out_dir`, without running anything else. `run` is the run's provenance
/// ([`crate::report::run_provenance`]); the footer names the client the tables name, as the figure drawn in the
/// run did, and the run's own measurements' client where the tables name none (tables from before they did).
pub fn redraw(
    spec: &NodeSpec,
    dep_dirs: &[PathBuf],
    run: &Provenance,
    out_dir: &Path,
) -> Result<Vec<PathBuf>, String> {
    let mut plot: PlotSpec = config::typed(spec).map_err(|e| e.message)?;
    let tables = tables_in(dep_dirs)?;
    let mut provenance = run.clone();
    if let Some(client) = client_in_tables(tables.values()) {
        provenance.client = client;
    }
    mark_synthetic_trace(&mut plot, &mut provenance, &tables);
    fracflow_plot::draw(&plot, &tables, &provenance, out_dir).map_err(|e| e.to_string())
}

/// A figure of points that replayed a synthetic trace (a `trace` label of `synthetic` in any of its tables)
/// says so in its title and its footer, so it cannot pass for the real trace's figure.
fn mark_synthetic_trace(
    plot: &mut PlotSpec,
    provenance: &mut Provenance,
    tables: &BTreeMap<String, Table>,
) {
    let synthetic = tables.values().any(|table| {
        table
            .columns
            .iter()
            .position(|c| c == "trace")
            .is_some_and(|column| {
                table.rows.iter().any(|row| {
                    matches!(row.get(column), Some(Cell::Text(label))
                    if label == crate::trace_input::SYNTHETIC_LABEL)
                })
            })
    });
    if !synthetic {
        return;
    }
    const MARK: &str = "synthetic trace";
    plot.title = Some(match plot.title.take() {
        Some(title) => format!("{title} ({MARK})"),
        None => MARK.to_owned(),
    });
    provenance.client = if provenance.client.is_empty() {
        MARK.to_owned()
    } else {
        format!("{} · {MARK}", provenance.client)
    };
}

/// `check`: the paper's claims as data, evaluated on its `aggregate` dependencies' tables. `expect` maps a
/// testbed kind (`emulated`, `real`) or profile name to its claims; only the run's testbed's claims apply. A
/// failed claim is a result (listed in the summary and the report, own exit code), not a failed node.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckConfig {
    pub expect: BTreeMap<String, Vec<Expectation>>,
}

/// `check`: evaluates the claims for this testbed and writes `expectations.json`; failures are results.
#[derive(Debug, Default)]
pub struct CheckKind {
    pub session: Option<Arc<Session>>,
}

/// Overrides the host's core count for claims' `needs:` (tests set a small and a large one).
pub const HOST_CORES_VAR: &str = "FRACFLOW_HOST_CORES";

/// The cores claims may count on: `FRACFLOW_HOST_CORES`, else the testbed profile's `cores`, else this machine's
/// `available_parallelism`; a value of the variable that is not a positive number is an error, not ignored.
pub fn host_cores(session: Option<&Session>) -> Result<Host, String> {
    if let Ok(text) = std::env::var(HOST_CORES_VAR) {
        return match text.trim().parse::<u32>() {
            Ok(cores) if cores > 0 => Ok(Host {
                cores,
                from: HOST_CORES_VAR.to_owned(),
            }),
            _ => Err(format!(
                "{HOST_CORES_VAR}={text:?} is not a positive number of cores"
            )),
        };
    }
    if let Some((name, cores)) = session.and_then(|s| Some((s.name(), s.profile().cores?))) {
        return Ok(Host {
            cores,
            from: format!("testbed profile {name}"),
        });
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    Ok(Host {
        cores,
        from: "available_parallelism".to_owned(),
    })
}

impl CheckKind {
    /// The claims that apply on this testbed: those under its profile name, else those under its kind.
    fn applicable<'c>(&self, config: &'c CheckConfig) -> &'c [Expectation] {
        let (name, kind) = match &self.session {
            Some(s) => (s.name(), s.profile().kind.as_str()),
            None => ("", "emulated"),
        };
        config
            .expect
            .get(name)
            .or_else(|| config.expect.get(kind))
            .map_or(&[], Vec::as_slice)
    }
}

/// File the check kind writes; the report and the run summary read it.
pub const EXPECTATIONS_FILE: &str = "expectations.json";

impl Executor for CheckKind {
    fn check(&self, spec: &NodeSpec, _root: &Path) -> Vec<ConfigProblem> {
        config::check_with::<CheckConfig>(spec, |_| Vec::new())
    }

    fn config_schema(&self) -> serde_json::Value {
        let mut schema = leaf_schema(
            "`check`: the paper's claims as data, evaluated on its `aggregate` dependencies' tables. `expect` maps \
             a testbed kind (`emulated`, `real`) or profile name to its claims; only the run's testbed's claims \
             apply. A failed claim is a result (listed in the summary and the report, own exit code), not a \
             failed node.",
            &["expect"],
            fracflow_core::suggest::field_names::<CheckConfig>(),
        );
        schema["properties"]["expect"] = serde_json::json!({
            "type": "object",
            "additionalProperties": { "type": "array", "items": true }
        });
        schema
    }

    fn info(&self, spec: &NodeSpec) -> Result<KindInfo, NodeError> {
        config::typed::<CheckConfig>(spec)?;
        // The verdicts depend on which testbed's claims apply, and on the cores a claim's `needs:` is held
        // against. 2: four verdicts, intervals, `needs:` and `paper:`.
        let mut info = info(2);
        if let Some(session) = &self.session {
            info.tools
                .insert("testbed".to_owned(), session.name().to_owned());
        }
        let host = host_cores(self.session.as_deref()).map_err(|e| failed(spec, e))?;
        info.tools.insert(
            "host_cores".to_owned(),
            format!("{} ({})", host.cores, host.from),
        );
        Ok(info)
    }

    fn describe(&self, spec: &NodeSpec) -> String {
        match config::typed::<CheckConfig>(spec) {
            Ok(config) => format!("check {} expectations", self.applicable(&config).len()),
            Err(e) => format!("<{e}>"),
        }
    }

    fn execute(&self, job: &Job<'_>) -> Result<Outcome, NodeError> {
        let config: CheckConfig = config::typed(job.spec)?;
        let tables = dependency_tables(job)?;
        let host = host_cores(self.session.as_deref()).map_err(|e| failed(job.spec, e))?;
        let results: Vec<ExpectationResult> =
            fracflow_aggregate::evaluate(self.applicable(&config), &tables, Some(&host));
        let count = |verdict: Verdict| results.iter().filter(|r| r.verdict == verdict).count();
        let text = serde_json::to_string_pretty(&results).map_err(|e| failed(job.spec, e))?;
        std::fs::write(job.out_dir.join(EXPECTATIONS_FILE), text)
            .map_err(|e| failed(job.spec, e))?;
        let metrics = BTreeMap::from([
            ("expectations".to_owned(), serde_json::json!(results.len())),
            (
                "expectations_failed".to_owned(),
                serde_json::json!(count(Verdict::Fail)),
            ),
            (
                "expectations_inconclusive".to_owned(),
                serde_json::json!(count(Verdict::Inconclusive)),
            ),
            (
                "expectations_not_testable".to_owned(),
                serde_json::json!(count(Verdict::NotTestable)),
            ),
        ]);
        Ok(Outcome { metrics })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> MeasureSource {
        MeasureSource {
            testbed: "u280-direct".to_owned(),
            testbed_kind: "doubles".to_owned(),
            host: "client-host".to_owned(),
            target: "172.24.1.52:2888".to_owned(),
            against: "fRAC device".to_owned(),
            client: "real fperf (libtpa/DPDK) through the adapter".to_owned(),
        }
    }

    #[test]
    fn a_measured_point_carries_its_testbed_kind_and_source() -> Result<(), String> {
        let labels = BTreeMap::from([("n".to_owned(), Cell::Num(4.0))]);
        let labels = with_provenance(labels, &source())?;
        assert_eq!(
            labels.get("testbed"),
            Some(&Cell::Text("u280-direct".into()))
        );
        assert_eq!(
            labels.get("testbed_kind"),
            Some(&Cell::Text("doubles".into()))
        );
        assert_eq!(
            labels.get("source"),
            Some(&Cell::Text(
                "fRAC device; real fperf through the adapter".into()
            ))
        );
        Ok(())
    }

    #[test]
    fn a_label_named_like_a_provenance_column_is_refused() {
        let labels = BTreeMap::from([("source".to_owned(), Cell::Text("mine".into()))]);
        let refused = with_provenance(labels, &source()).expect_err("a colliding label");
        assert_eq!(
            refused,
            "the point has a label `source`, the name of a column aggregate adds to say where the numbers came \
             from (testbed, testbed_kind, source); rename the label"
        );
    }

    #[test]
    fn only_tables_not_made_from_measurements_name_tools() {
        let mut measured = Table::new(
            ["n", "testbed", "testbed_kind", "source", "median_us"]
                .map(String::from)
                .to_vec(),
        );
        measured.rows.push(vec![
            Cell::Num(1.0),
            Cell::Text("emulated".into()),
            Cell::Text("emulated".into()),
            Cell::Text("emulated fRAC device; embedded client closed loop".into()),
            Cell::Num(7.5),
        ]);
        let mut tools = Table::new(["design", "source", "speed"].map(String::from).to_vec());
        tools.rows.push(vec![
            Cell::Text("one-shot".into()),
            Cell::Text("doubles".into()),
            Cell::Num(3.0),
        ]);
        assert!(tool_sources([&measured]).is_empty());
        assert_eq!(tool_sources([&measured, &tools]), ["doubles"]);
        assert_eq!(
            client_in_tables([&measured, &tools]).as_deref(),
            Some("embedded client closed loop"),
            "a measured table names its client, whatever other tables say"
        );
        assert_eq!(
            client_in_tables([&tools]).as_deref(),
            Some("numbers from the pipeline's tools (doubles)")
        );
        assert_eq!(client_in_tables(std::iter::empty::<&Table>()), None);
    }
}
