//! Provenance that never leaks: every measured table says its testbed, testbed kind and source; smoke and full
//! runs (and runs on other testbeds) keep `latest` links of their own; `fracflow plot` re-draws from the link
//! its flags name and stamps the footer with what the run itself measured with.

use std::path::Path;

use crate::figures::{csv_rows, figures_project};
use crate::support::{Sandbox, text};

/// Figure 16 restricted to one fRAC and one CPU point, so a smoke and a full run both stay short.
const ONE_POINT: [&str; 6] = ["--only", "k=1", "--only", "n=4", "--only", "m=4096"];

fn run_fig16(sandbox: &Sandbox, smoke: bool) -> std::process::Output {
    let mut args = vec!["run", "fig16"];
    if smoke {
        args.push("--smoke");
    }
    args.extend(ONE_POINT);
    sandbox.run(&args)
}

/// Exit 0, or 5 when one of the paper's claims does not hold on these few points (a result, not a failure).
fn finished(output: &std::process::Output) -> bool {
    matches!(output.status.code(), Some(0 | 5))
}

/// The summary and CDF tables of the run's aggregate node carry the three provenance columns, every row with
/// `testbed` and `testbed_kind` as given and a `source` naming `client`; the Parquet twins declare them too.
fn assert_provenance_columns(run: &Path, testbed: &str, kind: &str, client: &str) {
    for table in ["summary", "cdf"] {
        let csv = run.join(format!("nodes/aggregate/{table}.csv"));
        let header = std::fs::read_to_string(&csv)
            .unwrap_or_else(|e| panic!("{}: {e}", csv.display()))
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned();
        for column in ["testbed", "testbed_kind", "source"] {
            assert!(
                header.split(',').any(|c| c.trim_matches('"') == column),
                "{}: no column `{column}` in {header}",
                csv.display()
            );
        }
        let rows = csv_rows(&csv);
        assert!(
            table != "summary" || !rows.is_empty(),
            "{}: no rows",
            csv.display()
        );
        for row in &rows {
            assert_eq!(
                row.get("testbed").map(String::as_str),
                Some(testbed),
                "{row:?}"
            );
            assert_eq!(
                row.get("testbed_kind").map(String::as_str),
                Some(kind),
                "{row:?}"
            );
            let source = row.get("source").map(String::as_str).unwrap_or("");
            assert!(source.contains(client), "{table}: source `{source}`");
        }
        // The Parquet footer names its columns in plain bytes (the schema is not compressed); its values are
        // the CSV's, which the aggregate crate's export round-trip test holds them to.
        let parquet = run.join(format!("nodes/aggregate/{table}.parquet"));
        let bytes =
            std::fs::read(&parquet).unwrap_or_else(|e| panic!("{}: {e}", parquet.display()));
        for column in ["testbed", "testbed_kind", "source"] {
            assert!(
                bytes.windows(column.len()).any(|w| w == column.as_bytes()),
                "{}: no column `{column}`",
                parquet.display()
            );
        }
    }
}

#[test]
fn smoke_and_full_runs_keep_their_own_latest_and_plot_redraws_the_one_its_flags_name() {
    let sandbox = figures_project();

    // Nothing ran yet: the re-draw names the link it looked for and the command that makes it.
    let nothing = sandbox.run(&["plot", "fig16", "--smoke"]);
    let said = text(&nothing);
    assert_eq!(nothing.status.code(), Some(2), "{said}");
    assert!(
        said.contains("error: no run to re-draw in results/scalability/latest-smoke"),
        "{said}"
    );
    assert!(
        said.contains("hint: `fracflow run fig16 --smoke` makes it, or name a run with --run"),
        "{said}"
    );

    let smoke = run_fig16(&sandbox, true);
    assert!(finished(&smoke), "{}", text(&smoke));
    let full = run_fig16(&sandbox, false);
    assert!(finished(&full), "{}", text(&full));
    let results = sandbox.results("scalability");
    let smoke_run = std::fs::read_link(results.join("latest-smoke")).expect("latest-smoke");
    let full_run = std::fs::read_link(results.join("latest")).expect("latest");
    assert_ne!(
        smoke_run, full_run,
        "a full run must not replace latest-smoke"
    );
    assert_eq!(
        results.join("latest-smoke"),
        sandbox.latest_smoke("scalability")
    );

    for run in [results.join("latest-smoke"), results.join("latest")] {
        assert_provenance_columns(
            &run,
            "emulated",
            "emulated",
            "; embedded client closed loop",
        );
        let summary = csv_rows(&run.join("nodes/aggregate/summary.csv"));
        let sources: std::collections::BTreeSet<&str> = summary
            .iter()
            .filter_map(|row| row.get("source").map(String::as_str))
            .collect();
        assert!(
            sources.contains("emulated fRAC device; embedded client closed loop"),
            "{sources:?}"
        );
    }

    // `plot --smoke` re-draws the smoke run, not the full run that ran after it, and says so.
    let replot = sandbox.run(&["plot", "fig16", "--smoke"]);
    let said = text(&replot);
    assert!(replot.status.success(), "{said}");
    let smoke_id = smoke_run.to_string_lossy();
    assert!(
        said.contains(&format!(
            "re-drew 1 figure(s) from run {smoke_id} (results/scalability/latest-smoke, testbed emulated)"
        )),
        "{said}"
    );
    let svg = std::fs::read_to_string(results.join(&*smoke_id).join("replot/fig16.svg"))
        .expect("re-drawn svg");
    assert!(
        svg.contains(&format!("run {smoke_id}")),
        "the footer names the smoke run"
    );
    let footer = footer_text(&svg);
    assert!(
        footer.contains("embedded client"),
        "the footer says who measured: {footer}"
    );
    let drawn_in_the_run =
        std::fs::read_to_string(results.join(&*smoke_id).join("nodes/fig16/fig16.svg"))
            .expect("the run's svg");
    assert_eq!(
        footer,
        footer_text(&drawn_in_the_run),
        "a re-drawn footer is the run's"
    );
    assert!(
        !results.join(full_run).join("replot").exists(),
        "the full run was not re-drawn"
    );
}

#[test]
fn a_run_measured_by_the_real_fperf_is_redrawn_saying_so() {
    let (sandbox, _stop, _addr) = crate::testbed::board_project(20, "exit 0");
    let bin = sandbox.path().join("bin");
    let profile =
        std::fs::read_to_string(sandbox.path().join("hw/testbeds/board.yaml")).expect("profile");
    sandbox.write(
        "hw/testbeds/board.yaml",
        &format!(
            "{profile}client:\n  start_cpu: 2\n  tpa: {bin}/tpa\n  fperf: {bin}/fperf\n",
            bin = bin.display()
        ),
    );
    crate::testbed::fake(
        &sandbox,
        "tpa",
        "[ \"$1\" = run ] || exit 2\nshift\nexec \"$@\"",
    );
    crate::testbed::fake(&sandbox, "fperf", crate::testbed::FAKE_FPERF);
    let run = crate::testbed::run_on_board(&sandbox);
    assert!(finished(&run), "{}", text(&run));

    let latest = sandbox.latest_on("scalability", Some("smoke"), "board");
    assert!(
        !sandbox.results("scalability").join("latest").exists(),
        "a smoke run on another testbed leaves `latest` alone"
    );
    let summary = csv_rows(&latest.join("nodes/aggregate/summary.csv"));
    let frac = summary
        .iter()
        .find(|row| row.get("series").map(String::as_str) == Some("fRAC"))
        .expect("the fRAC row");
    assert_eq!(frac.get("testbed").map(String::as_str), Some("board"));
    assert_eq!(frac.get("testbed_kind").map(String::as_str), Some("real"));
    assert_eq!(
        frac.get("source").map(String::as_str),
        Some("fRAC device; real fperf through the adapter")
    );

    // The default link of plain flags is not this run's: the re-draw must be asked for with the run's flags.
    let plain = sandbox.run(&["plot", "fig16"]);
    assert_eq!(plain.status.code(), Some(2), "{}", text(&plain));
    let replot = sandbox.run(&["plot", "fig16", "--smoke", "--testbed", "board"]);
    assert!(replot.status.success(), "{}", text(&replot));
    let svg = std::fs::read_to_string(latest.join("replot/fig16.svg")).expect("re-drawn svg");
    let footer = footer_text(&svg);
    assert!(footer.contains("real fperf"), "{footer}");
    let drawn_in_the_run =
        std::fs::read_to_string(latest.join("nodes/fig16/fig16.svg")).expect("the run's svg");
    assert_eq!(
        footer,
        footer_text(&drawn_in_the_run),
        "a re-drawn footer is the run's"
    );
    assert!(footer.contains("testbed board (real)"), "{footer}");
    assert!(!footer.contains("embedded client"), "{footer}");
}

/// The SVG's text nodes, joined: the footer is among them.
fn footer_text(svg: &str) -> String {
    svg.split("<text")
        .skip(1)
        .filter_map(|part| {
            part.split_once('>')
                .and_then(|(_, rest)| rest.split_once("</text>"))
        })
        .map(|(inner, _)| inner)
        .filter(|inner| inner.contains(" · run "))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_measurement_label_named_like_a_provenance_column_fails_the_aggregation_naming_it() {
    let sandbox = figures_project();
    let pipeline = sandbox.path().join("pipelines/frac/scalability.yaml");
    let yaml = std::fs::read_to_string(&pipeline).expect("pipeline");
    assert!(
        yaml.contains("labels: {series: fRAC,"),
        "the fRAC node's labels"
    );
    std::fs::write(
        &pipeline,
        yaml.replace(
            "labels: {series: fRAC,",
            "labels: {series: fRAC, source: mine,",
        ),
    )
    .expect("edit the pipeline");
    let run = run_fig16(&sandbox, true);
    let said = text(&run);
    assert_eq!(run.status.code(), Some(1), "{said}");
    assert!(
        said.contains(
            "summary.json: the point has a label `source`, the name of a column aggregate adds to say where the \
             numbers came from (testbed, testbed_kind, source); rename the label"
        ),
        "{said}"
    );
}
