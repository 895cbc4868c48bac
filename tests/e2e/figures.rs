//! The paper's figures end to end on the emulated testbed: every figure pipeline's smoke variant, the run report
//! in a headless browser, the exit code of a failed expectation, incremental re-runs after an accelerator edit,
//! and SIGKILL at random instants of `fracflow run fig16 --smoke`.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use crate::support::{Rng, Sandbox, copy_tree, repo, text};

/// A project with the repository's accelerators, shell, figure pipelines and emulated testbed profile.
pub(crate) fn figures_project() -> Sandbox {
    let sandbox = Sandbox::new();
    copy_tree(
        &repo().join("hw/accelerators"),
        &sandbox.path().join("hw/accelerators"),
    );
    for file in ["hw/shell.yaml", "hw/testbeds/emulated.yaml"] {
        std::fs::copy(repo().join(file), sandbox.path().join(file)).expect(file);
    }
    copy_tree(
        &repo().join("pipelines/frac"),
        &sandbox.path().join("pipelines/frac"),
    );
    sandbox
}

/// Exit codes a figure run may end with: 0, or 5 when an expectation failed (a result, not a crash).
fn finished(output: &std::process::Output) -> bool {
    matches!(output.status.code(), Some(0 | 5))
}

/// The node ids that got `event` in the latest smoke run of `pipeline`.
fn nodes_with(sandbox: &Sandbox, pipeline: &str, event: &str) -> BTreeSet<String> {
    let events = std::fs::read_to_string(sandbox.latest_smoke(pipeline).join("events.jsonl"))
        .expect("events");
    events
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|e| e["event"] == event)
        .filter_map(|e| e["node"].as_str().map(str::to_owned))
        .collect()
}

/// The rows of a CSV table (an aggregate's export: no quoted commas) as maps of column → text.
pub(crate) fn csv_rows(path: &Path) -> Vec<std::collections::BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .expect("header")
        .split(',')
        .map(|c| c.trim_matches('"').to_owned())
        .collect();
    lines
        .map(|line| {
            header
                .iter()
                .cloned()
                .zip(line.split(',').map(|c| c.trim_matches('"').to_owned()))
                .collect()
        })
        .collect()
}

/// The set of `columns` tuples in a table, numbers written without a trailing `.0`.
fn points(
    rows: &[std::collections::BTreeMap<String, String>],
    columns: &[&str],
) -> BTreeSet<String> {
    rows.iter()
        .map(|row| {
            columns
                .iter()
                .map(|c| {
                    let value = row
                        .get(*c)
                        .unwrap_or_else(|| panic!("no column {c}: {row:?}"));
                    value.strip_suffix(".0").unwrap_or(value).to_owned()
                })
                .collect::<Vec<_>>()
                .join("/")
        })
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// Opens `report` in headless Chromium and returns the body's `data-figures-loaded` value ("K/N").
fn figures_loaded_in_browser(report: &Path, profile: &Path) -> String {
    let browser = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            std::process::Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("headless Chromium is needed for the report test: apt-get install chromium (.ci/run does)");
    let output = std::process::Command::new("timeout")
        .args(["60", browser, "--headless", "--no-sandbox", "--disable-gpu"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args([
            "--allow-file-access-from-files",
            "--virtual-time-budget=5000",
            "--dump-dom",
        ])
        .arg(format!("file://{}", report.display()))
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&output.stdout);
    let marker = "data-figures-loaded=\"";
    let start = dom
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker} in the page as Chromium saw it:\n{dom}"))
        + marker.len();
    dom[start..].chars().take_while(|c| *c != '"').collect()
}

/// (target, pipeline, plot node, table, label columns, the points expected in that table)
type SmokeCase<'a> = (
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a [&'a str],
    &'a [&'a str],
);

#[test]
fn every_figure_pipeline_runs_its_smoke_variant_on_the_emulated_testbed() {
    let sandbox = figures_project();
    let cases: &[SmokeCase] = &[
        (
            "fig13",
            "latency_throughput",
            "fig13",
            "summary",
            &["series", "clients"],
            &[
                "Transport/1",
                "Transport/22",
                "Transport+fRAC/1",
                "Transport+fRAC/22",
            ],
        ),
        (
            "fig14",
            "mixed_workload",
            "fig14",
            "summary",
            &["mix", "function"],
            &[
                "isolated/Top-K",
                "isolated/Logit",
                "isolated/Norm",
                "isolated/CNN",
                "mixed/Top-K",
                "mixed/Logit",
                "mixed/Norm",
                "mixed/CNN",
            ],
        ),
        (
            "fig15",
            "reassembly",
            "fig15",
            "summary",
            &["function", "pieces", "computed"],
            &[
                "Top-K/1/0",
                "Top-K/2/0",
                "Top-K/4/0",
                "Top-K/2/1",
                "Top-K/4/1",
                "Logit/1/0",
                "Logit/2/0",
                "Logit/4/0",
                "Logit/2/1",
                "Logit/4/1",
                "Norm/1/0",
                "Norm/2/0",
                "Norm/4/0",
                "Norm/2/1",
                "Norm/4/1",
            ],
        ),
        (
            "fig16",
            "scalability",
            "fig16",
            "summary",
            &["series", "units", "clients"],
            &[
                "fRAC/1/4",
                "fRAC/1/28",
                "fRAC/2/4",
                "fRAC/2/28",
                "fRAC/4/4",
                "fRAC/4/28",
                "CPU/1/4",
                "CPU/1/28",
                "CPU/2/4",
                "CPU/2/28",
                "CPU/4/4",
                "CPU/4/28",
            ],
        ),
        (
            "fig17",
            "scalability",
            "fig17",
            "cdf",
            &["config"],
            &["1 accel", "2 accel", "4 accel", "1 cpu", "2 cpu", "4 cpu"],
        ),
        (
            "fig18",
            "azure_trace",
            "fig18",
            "summary",
            &["function"],
            &["Top-K", "Logit", "Norm", "CNN"],
        ),
        (
            "cpu",
            "scalability_cpu",
            "figure",
            "summary",
            &["units", "clients"],
            &["1/1", "1/28", "4/1", "4/28"],
        ),
    ];
    for (target, pipeline, plot, table, columns, expected) in cases {
        let run = sandbox.run(&["run", target, "--smoke"]);
        assert!(finished(&run), "{target}: {}", text(&run));
        let latest = sandbox.latest_smoke(pipeline);
        let figure_stem = if *plot == "figure" { "fig16_cpu" } else { plot };
        for ext in ["svg", "png", "pdf"] {
            let file = latest
                .join("nodes")
                .join(plot)
                .join(format!("{figure_stem}.{ext}"));
            let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
            assert!(
                size > 1000,
                "{target}: {} is missing or empty",
                file.display()
            );
        }
        let svg = std::fs::read_to_string(
            latest
                .join("nodes")
                .join(plot)
                .join(format!("{figure_stem}.svg")),
        )
        .expect("svg");
        assert!(
            svg.contains("emulated"),
            "{target}: the footer must say where the numbers came from"
        );
        let rows = csv_rows(&latest.join("nodes/aggregate").join(format!("{table}.csv")));
        let found = points(&rows, columns);
        assert_eq!(found, set(expected), "{target}: points of table {table}");
        let report = latest.join("report.html");
        assert!(report.is_file(), "{target}: no report");
        if *target == "fig16" {
            let expectations: Vec<serde_json::Value> = serde_json::from_slice(
                &std::fs::read(latest.join("nodes/expectations/expectations.json"))
                    .expect("verdicts"),
            )
            .expect("json");
            assert_eq!(
                expectations.len(),
                3,
                "the emulated profile's three claims: {expectations:?}"
            );
            let manifest: serde_json::Value = serde_json::from_slice(
                &std::fs::read(latest.join("manifest.json")).expect("manifest"),
            )
            .expect("json");
            let lowered = manifest["testbed_profile"]["lowered_params"].to_string();
            assert!(
                lowered.contains("\"skip\""),
                "the adaptation is recorded: {lowered}"
            );
            let loaded = figures_loaded_in_browser(
                &report.canonicalize().expect("report path"),
                &sandbox.path().join("chromium-profile"),
            );
            assert_eq!(loaded, "1/1", "figures that loaded in Chromium");
        }
    }

    // A second run of fig16 measures nothing: every node is a cache hit.
    let again = sandbox.run(&["run", "fig16", "--smoke"]);
    assert!(finished(&again), "{}", text(&again));
    assert!(
        nodes_with(&sandbox, "scalability", "node_started").is_empty(),
        "{}",
        text(&again)
    );

    // Editing top_k re-runs its build chain, the measurements that use it and what reads them; nothing else.
    let source = sandbox.path().join("hw/accelerators/top_k/top_k.cpp");
    let mut code = std::fs::read_to_string(&source).expect("top_k source");
    code.push_str("\n// an edit that changes the compiled unit\nextern \"C\" int fracflow_test_edit() { return 1; }\n");
    std::fs::write(&source, code).expect("edit top_k");
    let edited = sandbox.run(&["run", "fig16", "--smoke"]);
    assert!(finished(&edited), "{}", text(&edited));
    let built = nodes_with(&sandbox, "scalability", "node_finished");
    let cached = nodes_with(&sandbox, "scalability", "node_cached");
    for node in [
        "hls[unit=top_k]",
        "partials[unit=top_k]",
        "image",
        "aggregate",
        "fig16",
        "expectations",
    ] {
        assert!(
            built.contains(node),
            "{node} should re-run: built {built:?}"
        );
    }
    assert!(
        built.iter().filter(|n| n.starts_with("frac[")).count() == 6,
        "{built:?}"
    );
    for node in [
        "hls[unit=log]",
        "hls[unit=cnn]",
        "partials[unit=norm]",
        "weave",
    ] {
        assert!(
            cached.contains(node),
            "{node} should stay cached: {cached:?}"
        );
    }
    assert!(
        cached.iter().filter(|n| n.starts_with("cpu[")).count() == 6,
        "the CPU points do not use top_k's build: {cached:?}"
    );
}

#[test]
fn a_failed_expectation_is_a_result_with_its_own_exit_code() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "pipelines/claims.yaml",
        r#"
pipeline: claims
nodes:
  table:
    kind: command
    run: printf 'series,clients,median_us\nfRAC,1,8.5\nfRAC,28,12.5\n' > $FRACFLOW_OUT/summary.csv
    outputs: [summary.csv]
  verdicts:
    kind: check
    deps: [table]
    expect:
      emulated:
        - name: "median below 10 µs"
          below: {column: median_us, limit: 10}
        - name: "latency grows with clients"
          grows: {x: clients, y: median_us, by: [series]}
    outputs: [expectations.json]
"#,
    );
    let run = sandbox.run(&["run", "claims"]);
    assert_eq!(run.status.code(), Some(5), "{}", text(&run));
    let output = text(&run);
    assert!(output.contains("1 of 2 pass, 1 FAIL"), "{output}");
    assert!(output.contains("FAIL median below 10 µs"), "{output}");
    assert!(
        output.contains("12.5"),
        "the measured value is shown: {output}"
    );
    let report = std::fs::read_to_string(sandbox.results("claims").join("latest/report.html"))
        .expect("report");
    assert!(
        report.contains("median below 10 µs"),
        "the report lists the verdict"
    );
}

/// The capacity rule: a claim whose `needs:` the host cannot give is `not testable here`, which fails nothing
/// (exit 0); on a host with enough cores (`FRACFLOW_HOST_CORES`, part of the check's key) the same claim is
/// judged, and here it fails (the 4-core server grows faster than the 1-core one), so the run exits 5.
#[test]
fn a_claim_the_host_cannot_test_is_no_failure_and_is_judged_where_it_can() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "pipelines/capacity.yaml",
        r#"
pipeline: capacity
nodes:
  table:
    kind: command
    run: printf 'series,units,clients,median_us\nCPU,1,4,20\nCPU,1,28,40\nCPU,4,4,20\nCPU,4,28,80\n' > $FRACFLOW_OUT/summary.csv
    outputs: [summary.csv]
  verdicts:
    kind: check
    deps: [table]
    expect:
      emulated:
        - name: "more CPU cores slow the growth"
          slower_growth: {x: clients, y: median_us, group: units}
          needs: {cores: {server: units, client: 2}}
        - name: "CPU latency grows with clients"
          grows: {x: clients, y: median_us, by: [units]}
    outputs: [expectations.json]
"#,
    );
    let run_with = |cores: &str| {
        sandbox
            .command(&["run", "capacity"])
            .env("FRACFLOW_HOST_CORES", cores)
            .output()
            .expect("spawn fracflow")
    };
    let small = run_with("2");
    let output = text(&small);
    assert_eq!(small.status.code(), Some(0), "{output}");
    assert!(
        output.contains("1 of 2 pass, 0 FAIL, 1 not testable here (not a failure)"),
        "{output}"
    );
    assert!(
        output.contains(
            "not testable here more CPU cores slow the growth: all rows: not testable here (needs ≥ 6 cores: \
             4 server + 2 client; host has 2 (FRACFLOW_HOST_CORES))"
        ),
        "{output}"
    );
    let report = std::fs::read_to_string(sandbox.results("capacity").join("latest/report.html"))
        .expect("report");
    assert!(
        report.contains("<td class=\"verdict untestable\">not testable here</td>"),
        "{report}"
    );

    let large = run_with("6");
    let output = text(&large);
    assert_eq!(large.status.code(), Some(5), "{output}");
    assert!(
        output.contains(
            "FAIL more CPU cores slow the growth: all rows: ×4 at units=4, ×2 at units=1 ✗"
        ),
        "{output}"
    );

    let bad = run_with("many");
    assert_ne!(bad.status.code(), Some(0), "{}", text(&bad));
    assert!(
        text(&bad).contains("FRACFLOW_HOST_CORES=\"many\" is not a positive number of cores"),
        "{}",
        text(&bad)
    );
}

#[test]
fn killing_a_smoke_run_at_random_instants_loses_no_completed_point() {
    let sandbox = figures_project();
    let mut rng = Rng::from_env_or_time();
    let mut completed: BTreeSet<String> = BTreeSet::new();
    for round in 0..3 {
        let mut child = sandbox
            .command(&["run", "fig16", "--smoke"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start fracflow");
        let wait_ms = 500 + rng.below(12_000);
        std::thread::sleep(Duration::from_millis(wait_ms));
        // SIGKILL: no handler runs, nothing is cleaned up.
        let _ = child.kill();
        let _ = child.wait();
        let done = nodes_with(&sandbox, "scalability", "node_finished");
        eprintln!(
            "round {round}: killed after {wait_ms} ms, {} nodes had finished",
            done.len()
        );
        completed.extend(done);
    }
    let last = sandbox.run(&["run", "fig16", "--smoke"]);
    assert!(finished(&last), "{}", text(&last));
    let rebuilt = nodes_with(&sandbox, "scalability", "node_finished");
    let lost: Vec<&String> = completed.intersection(&rebuilt).collect();
    assert!(
        lost.is_empty(),
        "completed before a kill but run again: {lost:?}"
    );
    let verify = sandbox.run(&["cache", "verify"]);
    assert!(verify.status.success(), "{}", text(&verify));
    let latest = sandbox.latest_smoke("scalability");
    assert!(latest.join("nodes/fig16/fig16.svg").is_file());
}
