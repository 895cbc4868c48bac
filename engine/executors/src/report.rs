//! A run's report page, assembled from its run directory: the manifest's nodes, the figures the `plot` nodes
//! drew, the `aggregate` tables, the `check` verdicts, and where every number came from (testbed, host, client,
//! git commit, tool versions, the image and partials the device held).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fracflow_core::Cache;
use fracflow_core::run::node_dir_name;
use fracflow_plot::report::{
    RepeatedRun, Report, ReportFigure, ReportNode, ReportTable, write_report,
};
use fracflow_record::{
    ExpectationResult, MeasureSummary, Provenance, RunManifest, SUMMARY_FILE, Verdict,
};

use crate::analysis::EXPECTATIONS_FILE;

/// The page's file name in the run directory.
pub const REPORT_FILE: &str = "report.html";

/// What the report found, for the run's closing lines.
#[derive(Debug, Clone, Default)]
pub struct ReportSummary {
    pub path: PathBuf,
    pub figures: Vec<PathBuf>,
    pub expectations: Vec<ExpectationResult>,
}

/// The verdicts counted for a run's summary line: `2 pass, 0 FAIL, 1 inconclusive (not a failure), 1 not testable
/// here`; only the kinds that occur after `pass` and `FAIL`, which are always shown.
pub fn verdict_counts(expectations: &[ExpectationResult]) -> String {
    let count = |verdict: Verdict| expectations.iter().filter(|e| e.verdict == verdict).count();
    let mut words = format!(
        "{} of {} pass, {} FAIL",
        count(Verdict::Pass),
        expectations.len(),
        count(Verdict::Fail)
    );
    let inconclusive = count(Verdict::Inconclusive);
    if inconclusive > 0 {
        words.push_str(&format!(", {inconclusive} inconclusive (not a failure)"));
    }
    let not_testable = count(Verdict::NotTestable);
    if not_testable > 0 {
        words.push_str(&format!(
            ", {not_testable} not testable here (not a failure)"
        ));
    }
    words
}

/// Where a run's numbers came from, as its manifest records it; `client` says how requests were made. A repeat's
/// numbers (and figures) are those of the run it repeated, so that run is named: a figure it re-draws, and one
/// `verify` re-draws from its bundle, says what the figure drawn in that run says.
pub fn provenance<P>(manifest: &RunManifest<P>, client: &str) -> Provenance {
    Provenance {
        pipeline: manifest.pipeline.clone(),
        run_id: manifest
            .repeats
            .clone()
            .unwrap_or_else(|| manifest.run_id.clone()),
        testbed: manifest.testbed.clone(),
        testbed_kind: manifest.testbed_profile["kind"]
            .as_str()
            .unwrap_or("unknown")
            .to_owned(),
        host: manifest.host.clone(),
        client: client.to_owned(),
    }
}

/// Where the numbers of the run in `run_dir` came from, as its own records say: the manifest's testbed, kind and
/// host, and who made the requests as each measurement's `summary.json` records it ([`fracflow_record::MeasureSource::words`],
/// e.g. `fRAC device; real fperf through the adapter`), else the tools its aggregate tables name in their
/// `source` column. The run's report page and `fracflow plot` both stamp this, so a re-drawn figure says what
/// the run measured with, not what this build would.
pub fn run_provenance<P>(run_dir: &Path, manifest: &RunManifest<P>) -> Provenance {
    let mut measured: Vec<String> = Vec::new();
    let mut tables = Vec::new();
    for (id, record) in &manifest.nodes {
        // Only two kinds are read: a 10 000-node command pipeline makes no path per node.
        if !matches!(record.kind.as_str(), "measure" | "aggregate") {
            continue;
        }
        let dir = run_dir.join("nodes").join(node_dir_name(id));
        match record.kind.as_str() {
            "measure" => {
                // A summary this build cannot read says nothing here; the aggregate node that reads it fails,
                // naming the file and the field.
                let path = dir.join(SUMMARY_FILE);
                if let Ok(summary) = fracflow_record::read_record::<MeasureSummary>(&path) {
                    let words = summary.source.words();
                    if !measured.contains(&words) {
                        measured.push(words);
                    }
                }
            }
            "aggregate" => {
                for name in record.outputs.keys().filter(|n| n.ends_with(".csv")) {
                    if let Ok(table) = fracflow_aggregate::read_table(&dir.join(name)) {
                        tables.push(table);
                    }
                }
            }
            _ => {}
        }
    }
    let client = if !measured.is_empty() {
        measured.join(" + ")
    } else {
        let tools = crate::analysis::tool_sources(&tables);
        if tools.is_empty() {
            String::new()
        } else {
            crate::analysis::tools_phrase(&tools)
        }
    };
    provenance(manifest, &client)
}

/// Writes `<run_dir>/report.html` for the run whose manifest is `manifest` (the run's own, in memory: reading
/// back what was just written was a tenth of a large no-op); `cache` supplies the tool versions recorded in each
/// node's fingerprint.
pub fn write_run_report<P>(
    run_dir: &Path,
    manifest: &RunManifest<P>,
    cache: &Cache,
) -> Result<ReportSummary, String> {
    let node_dir = |id: &str| PathBuf::from("nodes").join(node_dir_name(id));
    let relative = |path: PathBuf| path.to_string_lossy().into_owned();

    let mut summary = ReportSummary {
        path: run_dir.join(REPORT_FILE),
        ..ReportSummary::default()
    };
    let mut figures = Vec::new();
    let mut tables = Vec::new();
    let mut build: Vec<(String, String)> = Vec::new();
    let mut tools: BTreeMap<String, String> = BTreeMap::new();
    let mut device: BTreeMap<String, String> = BTreeMap::new();
    for (id, record) in &manifest.nodes {
        // Only the FPGA, measurement and analysis kinds record tools or show on the page; reading every entry
        // of a 10 000-node command pipeline would cost its no-op run a second.
        if matches!(record.kind.as_str(), "command" | "group") {
            continue;
        }
        let dir = node_dir(id);
        if let Some(entry) = record.key.as_ref().and_then(|key| cache.get(key)) {
            for (tool, version) in entry.fingerprint.tools {
                tools.entry(tool).or_insert(version);
            }
        }
        match record.kind.as_str() {
            "plot" => {
                for name in record.outputs.keys().filter(|n| n.ends_with(".svg")) {
                    let stem = name.trim_end_matches(".svg");
                    let with = |ext: &str| {
                        let file = format!("{stem}.{ext}");
                        record
                            .outputs
                            .contains_key(&file)
                            .then(|| relative(dir.join(&file)))
                    };
                    summary.figures.push(run_dir.join(dir.join(name)));
                    figures.push(ReportFigure {
                        caption: format!("{stem} (node {id})"),
                        svg: relative(dir.join(name)),
                        png: with("png").unwrap_or_default(),
                        pdf: with("pdf"),
                    });
                }
            }
            "aggregate" => {
                for name in record.outputs.keys().filter(|n| n.ends_with(".csv")) {
                    let path = run_dir.join(dir.join(name));
                    let table = fracflow_aggregate::read_table(&path)
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                    tables.push(ReportTable {
                        name: format!("{id}: {}", name.trim_end_matches(".csv")),
                        table,
                        csv: relative(dir.join(name)),
                    });
                }
            }
            "check" => {
                let path = run_dir.join(dir.join(EXPECTATIONS_FILE));
                if let Ok(bytes) = std::fs::read(&path) {
                    let verdicts: Vec<ExpectationResult> = serde_json::from_slice(&bytes)
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                    summary.expectations.extend(verdicts);
                }
            }
            "measure" => {
                let path = run_dir.join(dir.join(SUMMARY_FILE));
                // A summary this build cannot read leaves its node out of these lines; the aggregate node that
                // reads it fails, naming the file and the field.
                if let Ok(summary) = fracflow_record::read_record::<MeasureSummary>(&path) {
                    for action in summary.device {
                        device.insert(action.file, action.sha);
                    }
                }
            }
            _ => {}
        }
    }
    if let Some(git) = &manifest.git {
        build.push((
            "git commit".to_owned(),
            format!(
                "{}{}",
                git.commit,
                if git.dirty {
                    " (with uncommitted changes)"
                } else {
                    ""
                }
            ),
        ));
    }
    build.push((
        "fracflow".to_owned(),
        format!(
            "{} ({})",
            manifest.engine_version,
            manifest.command.join(" ")
        ),
    ));
    build.push((
        "testbed".to_owned(),
        format!("{} {}", manifest.testbed, manifest.testbed_profile),
    ));
    for (tool, version) in tools {
        build.push((format!("tool {tool}"), version));
    }
    for (file, sha) in device {
        build.push((format!("device held {file}"), format!("blake3 {sha}")));
    }
    // A repeat's page names the run it repeated instead of listing every node again.
    let repeats = manifest.repeats.as_ref().map(|run_id| RepeatedRun {
        run_id: run_id.clone(),
        nodes: manifest.nodes.len(),
    });
    let nodes = if repeats.is_some() {
        Vec::new()
    } else {
        manifest
            .nodes
            .iter()
            .map(|(id, record)| ReportNode {
                id,
                kind: &record.kind,
                status: record.status,
                seconds: record.seconds,
                log: record.log.as_deref(),
            })
            .collect()
    };
    let report = Report {
        provenance: run_provenance(run_dir, manifest),
        title: format!("{} — run {}", manifest.pipeline, manifest.run_id),
        figures,
        tables,
        expectations: summary.expectations.clone(),
        build,
        nodes,
        repeats,
    };
    write_report(&report, &summary.path).map_err(|e| format!("{}: {e}", summary.path.display()))?;
    Ok(summary)
}
