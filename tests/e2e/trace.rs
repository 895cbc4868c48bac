//! Figure 18's trace replay: a trace file in the artifact's `processed_trace.csv` format is an input of the
//! measure node (its rows replayed, its hash in the key), a synthetic trace only where the profile allows it
//! (and then the figure says so), a bad row refused before the run naming its line, and a profile without
//! synthetic traces refuses a missing file at `plan`.

use fracflow_record::{MeasureSummary, RunManifest, SUMMARY_FILE};

use crate::figures::{csv_rows, figures_project};
use crate::support::{Sandbox, text};

/// Where the pipeline looks for the real trace.
const TRACE_FILE: &str = "eval/azure_trace/processed_trace.csv";

/// A small trace in the real file's format: every app, integers written as floats as the real file does,
/// think times of a millisecond or none.
fn small_trace(rows: usize) -> String {
    let kinds = [
        (1, 512, 64),
        (5, 4096, 4096),
        (2, 24576, 64),
        (3, 1024, 1024),
        (1, 2048, 64),
    ];
    let mut text = String::from("app,sleep_time,request_size,response_size\n");
    for i in 0..rows {
        let (app, size, response) = kinds[i % kinds.len()];
        let sleep = if i % 2 == 0 { "0.0" } else { "0.001" };
        text.push_str(&format!("{app},{sleep},{size}.0,{response}.0\n"));
    }
    text
}

fn finished(output: &std::process::Output) -> bool {
    matches!(output.status.code(), Some(0 | 5))
}

/// The replay node's summary and key in the latest smoke run of azure_trace.
fn replay(sandbox: &Sandbox) -> (MeasureSummary, fracflow_record::Digest) {
    let latest = sandbox.latest_smoke("azure_trace");
    let summary = fracflow_record::read_record(&latest.join("nodes/replay").join(SUMMARY_FILE))
        .expect("the replay's summary");
    let manifest: RunManifest =
        serde_json::from_slice(&std::fs::read(latest.join("manifest.json")).expect("manifest"))
            .expect("manifest json");
    let key = manifest.nodes["replay"].key.expect("replay key");
    (summary, key)
}

fn figure(sandbox: &Sandbox) -> String {
    std::fs::read_to_string(
        sandbox
            .latest_smoke("azure_trace")
            .join("nodes/fig18/fig18.svg"),
    )
    .expect("fig18.svg")
}

fn functions_measured(sandbox: &Sandbox) -> Vec<(String, String)> {
    let rows = csv_rows(
        &sandbox
            .latest_smoke("azure_trace")
            .join("nodes/aggregate/summary.csv"),
    );
    let mut found: Vec<(String, String)> = rows
        .iter()
        .filter(|row| row.get("median_us").is_some_and(|v| !v.is_empty()))
        .map(|row| (row["function"].clone(), row["trace"].clone()))
        .collect();
    found.sort();
    found.dedup();
    found
}

#[test]
fn the_real_trace_file_is_replayed_when_present_and_its_edits_re_measure() {
    let sandbox = figures_project();

    // No file: the emulated profile allows a synthetic trace, and the figure says it is one.
    let run = sandbox.run(&["run", "fig18", "--smoke"]);
    assert!(finished(&run), "{}", text(&run));
    let (synthetic, synthetic_key) = replay(&sandbox);
    assert_eq!(synthetic.labels["trace"], "synthetic");
    let svg = figure(&sandbox);
    assert!(
        svg.contains("per-request latency CDFs of the trace replay (synthetic trace)"),
        "the title says synthetic trace"
    );
    assert!(
        svg.matches("synthetic trace").count() >= 2,
        "the footer says synthetic trace too"
    );
    // Re-drawn from the run's tables, it still says so.
    let replot = sandbox.run(&["plot", "fig18", "--smoke"]);
    assert_eq!(replot.status.code(), Some(0), "{}", text(&replot));
    let redrawn =
        std::fs::read_to_string(sandbox.latest_smoke("azure_trace").join("replot/fig18.svg"))
            .expect("re-drawn fig18.svg");
    assert!(
        redrawn.contains("trace replay (synthetic trace)")
            && redrawn.matches("synthetic trace").count() >= 2,
        "the re-drawn figure says synthetic trace in its title and footer"
    );

    // The real file in place: replayed, on the emulated profile too, under another key.
    sandbox.write(TRACE_FILE, &small_trace(15));
    let run = sandbox.run(&["run", "fig18", "--smoke"]);
    assert!(finished(&run), "{}", text(&run));
    let (real, real_key) = replay(&sandbox);
    assert_ne!(real_key, synthetic_key, "the trace file enters the key");
    assert_eq!(real.labels["trace"], "azure-2021");
    assert_eq!(real.requests, 15, "every row replayed once");
    let console = std::fs::read_to_string(
        sandbox
            .latest_smoke("azure_trace")
            .join("nodes/replay/console.log"),
    )
    .expect("console");
    assert!(console.contains("trace: all 15 rows replayed"), "{console}");
    let functions = functions_measured(&sandbox);
    let names: Vec<&str> = functions.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(names, ["CNN", "Logit", "Norm", "Top-K"], "{functions:?}");
    assert!(functions.iter().all(|(_, trace)| trace == "azure-2021"));
    assert!(
        !figure(&sandbox).contains("synthetic"),
        "a real trace's figure"
    );

    // Unchanged: a cache hit. Edited: measured again under a new key.
    let run = sandbox.run(&["run", "fig18", "--smoke"]);
    assert!(finished(&run), "{}", text(&run));
    assert_eq!(replay(&sandbox).1, real_key);
    sandbox.write(TRACE_FILE, &small_trace(16));
    let run = sandbox.run(&["run", "fig18", "--smoke"]);
    assert!(finished(&run), "{}", text(&run));
    let (edited, edited_key) = replay(&sandbox);
    assert_ne!(edited_key, real_key, "an edited trace re-measures");
    assert_eq!(edited.requests, 16);
}

#[test]
fn a_bad_row_of_the_trace_file_is_refused_before_the_run_naming_its_line() {
    let sandbox = figures_project();
    let mut trace = small_trace(3);
    trace.push_str("4,0.0,512.0,64.0\n");
    sandbox.write(TRACE_FILE, &trace);
    let plan = sandbox.run(&["plan", "fig18", "--smoke"]);
    let output = text(&plan);
    assert_eq!(plan.status.code(), Some(2), "{output}");
    assert!(
        output.contains(&format!(
            "trace file `{TRACE_FILE}`: trace line 5: app 4 is not 1 (top_k), 2 (cnn), 3 (logit) or 5 (norm)"
        )),
        "{output}"
    );
}

#[test]
fn a_profile_without_synthetic_traces_refuses_a_missing_trace_file_at_plan() {
    let sandbox = figures_project();
    sandbox.write(
        "hw/testbeds/strict.yaml",
        "kind: emulated\ndescription: replays only the real trace\n",
    );
    let plan = sandbox.run(&["plan", "fig18", "--smoke", "--testbed", "strict"]);
    let output = text(&plan);
    assert_eq!(plan.status.code(), Some(2), "{output}");
    for part in [
        format!(
            "trace file `{TRACE_FILE}` does not exist, and testbed `strict` replays only a real trace"
        ),
        "the artifact's `eval/azure_trace/processed_trace.csv`".to_owned(),
        sandbox.path().join(TRACE_FILE).display().to_string(),
    ] {
        assert!(output.contains(&part), "no `{part}` in:\n{output}");
    }
    assert!(
        !sandbox.results("azure_trace").exists(),
        "nothing ran: {output}"
    );
}
