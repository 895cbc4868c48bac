//! The report page: its content, and a headless Chromium that proves the figure links load.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fracflow_plot::report::{
    MAX_TABLE_ROWS, RepeatedRun, Report, ReportFigure, ReportNode, ReportTable, render_html,
    write_report,
};
use fracflow_plot::{draw, figure_files};
use fracflow_record::{Cell, ExpectationResult, NodeStatus, PaperComparison, Table, Verdict};

use super::fixtures::{self, provenance, tables};

fn figure(stem: &str) -> ReportFigure {
    ReportFigure {
        caption: format!("Figure {stem} <draft>"),
        svg: format!("figures/{stem}.svg"),
        png: format!("figures/{stem}.png"),
        pdf: Some(format!("figures/{stem}.pdf")),
    }
}

fn report(figures: Vec<ReportFigure>) -> Report<'static> {
    let mut long = Table::new(vec!["i".to_owned(), "note".to_owned()]);
    for i in 0..MAX_TABLE_ROWS + 7 {
        long.rows
            .push(vec![Cell::Num(i as f64), Cell::Text(format!("<row {i}>"))]);
    }
    Report {
        provenance: provenance(),
        title: "fig16 · run report".to_owned(),
        figures,
        tables: vec![ReportTable {
            name: "summary".to_owned(),
            table: long,
            csv: "nodes/aggregate/summary.csv".to_owned(),
        }],
        expectations: vec![
            ExpectationResult {
                name: "fRAC flat".to_owned(),
                claim: "median at 28 clients < 10 µs".to_owned(),
                verdict: Verdict::Pass,
                measured: "median 8.7 µs at n=28, limit 10 µs".to_owned(),
                paper: vec![
                    PaperComparison {
                        paper: "8.7".to_owned(),
                        unit: "µs".to_owned(),
                        source: "Fig. 16, 1 accelerator, 28 clients, 1 KiB".to_owned(),
                        at: "median_us at series=fRAC, units=1, clients=28, m=1024".to_owned(),
                        measured: Some(31.4159),
                        testbed_kind: Some("emulated".to_owned()),
                    },
                    PaperComparison {
                        paper: "10–12".to_owned(),
                        unit: "µs".to_owned(),
                        source: "Fig. 16 <4 KiB>".to_owned(),
                        at: "median_us at series=fRAC, units=1, clients=28, m=4096".to_owned(),
                        measured: None,
                        testbed_kind: None,
                    },
                ],
            },
            ExpectationResult {
                name: "tail <script>".to_owned(),
                claim: "p99 within 1 µs of the median".to_owned(),
                verdict: Verdict::Fail,
                measured: "p99 − median = 3.2 µs".to_owned(),
                paper: Vec::new(),
            },
        ],
        build: vec![
            ("git commit".to_owned(), "64bdbe7".to_owned()),
            ("image".to_owned(), "blake3:ab12…".to_owned()),
        ],
        nodes: vec![
            ReportNode {
                id: "measure[units=1,m=1024]",
                kind: "measure",
                status: NodeStatus::Built,
                seconds: Some(31.25),
                log: Some("nodes/measure[units=1,m=1024]/log.txt"),
            },
            ReportNode {
                id: "plot",
                kind: "plot",
                status: NodeStatus::Failed,
                seconds: None,
                log: None,
            },
        ],
        repeats: None,
    }
}

#[test]
fn page_shows_provenance_verdicts_capped_tables_and_escapes_everything() {
    let html = render_html(&report(vec![figure("fig16")]));
    assert!(
        html.contains("EMULATED testbed"),
        "the testbed kind must be unmistakable"
    );
    assert!(html.contains("1 of 2 expectations FAILED"));
    assert!(html.contains("<tr class=\"fail\">"));
    assert!(html.contains("tail &lt;script&gt;") && !html.contains("tail <script>"));
    assert!(html.contains("Figure fig16 &lt;draft&gt;"));
    assert!(html.contains(&format!(
        "Showing the first {MAX_TABLE_ROWS} of {} rows",
        MAX_TABLE_ROWS + 7
    )));
    assert!(
        !html.contains(&format!("&lt;row {}&gt;", MAX_TABLE_ROWS)),
        "rows past the cap are not rendered"
    );
    assert!(html.contains("href=\"nodes/measure[units=1,m=1024]/log.txt\""));
    assert!(html.contains("href=\"figures/fig16.pdf\""));
    assert!(html.contains("blake3:ab12…"));
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "the page must not reach the network"
    );
}

#[test]
fn a_repeat_names_the_run_it_repeated_instead_of_a_row_per_node() {
    let mut repeat = report(vec![figure("fig16")]);
    repeat.nodes.clear();
    repeat.repeats = Some(RepeatedRun {
        run_id: "2026-01-01T000000".to_owned(),
        nodes: 10_000,
    });
    let html = render_html(&repeat);
    assert!(
        html.contains("10000 nodes: 0 built, 10000 cached")
            && html.contains("href=\"../2026-01-01T000000/report.html\""),
        "{html}"
    );
    assert!(!html.contains("<th>node</th>"), "no node table: {html}");
    assert!(html.contains("fig16"), "figures are still shown: {html}");
}

#[test]
fn a_large_node_table_is_written_in_pieces_that_make_the_same_page() -> std::io::Result<()> {
    let ids: Vec<String> = (0..5_000)
        .map(|i| format!("point[a={i},b=<{i}>]"))
        .collect();
    let mut large = report(vec![figure("fig16")]);
    large.nodes = ids
        .iter()
        .map(|id| ReportNode {
            id,
            kind: "command",
            status: NodeStatus::Built,
            seconds: Some(0.0),
            log: None,
        })
        .collect();
    let html = render_html(&large);
    assert!(html.len() > 4 * 64 * 1024, "several pieces: {}", html.len());
    let dir = tempfile::tempdir()?;
    let page = dir.path().join("report.html");
    write_report(&large, &page)?;
    assert!(
        std::fs::read_to_string(&page)? == html,
        "the written page differs"
    );
    assert_eq!(html.matches("<tr><td><code>point[").count(), 5_000);
    assert!(
        html.contains("<code>point[a=4999,b=&lt;4999&gt;]</code>") && html.ends_with("</html>\n")
    );
    Ok(())
}

#[test]
fn paper_values_sit_beside_the_measured_ones_with_the_testbed_kind() {
    let html = render_html(&report(Vec::new()));
    let table = html
        .split("<h3 id=\"paper\">Paper vs this run</h3>")
        .nth(1)
        .and_then(|rest| rest.split("</table>").next())
        .expect("a paper-vs-run table");
    assert!(
        table.contains(
            "<tr><td>fRAC flat</td><td class=\"num\">8.7 µs</td><td>Fig. 16, 1 accelerator, 28 clients, 1 KiB</td>\
             <td class=\"num\">31.4 µs</td><td class=\"kind emulated\">emulated</td>\
             <td>median_us at series=fRAC, units=1, clients=28, m=1024</td></tr>"
        ),
        "{table}"
    );
    // A point the run did not measure says so; the kind falls back to the run's testbed.
    assert!(table.contains("<td class=\"num\">10–12 µs</td><td>Fig. 16 &lt;4 KiB&gt;</td><td class=\"num\">not measured in this run</td><td class=\"kind emulated\">emulated</td>"), "{table}");
    assert!(
        !table.contains("tail"),
        "a claim without paper values has no row"
    );

    // No claim with a paper value: no table.
    let mut bare = report(Vec::new());
    for result in &mut bare.expectations {
        result.paper.clear();
    }
    assert!(!render_html(&bare).contains("Paper vs this run"));
}

#[test]
fn inconclusive_and_untestable_verdicts_are_neither_pass_nor_failure() {
    let mut page = report(Vec::new());
    page.expectations[1].verdict = Verdict::Inconclusive;
    page.expectations.push(ExpectationResult {
        name: "more cores".to_owned(),
        claim: "slower growth".to_owned(),
        verdict: Verdict::NotTestable,
        measured: "needs ≥ 6 cores: 4 server + 2 client; host has 2".to_owned(),
        paper: Vec::new(),
    });
    let html = render_html(&page);
    assert!(
        html.contains("1 of 3 expectations passed, 1 inconclusive (not a failure), 1 not testable here (not a failure)"),
        "{html}"
    );
    assert!(html.contains("class=\"verdicts passing\""));
    assert!(html.contains("<td class=\"verdict inconclusive\">inconclusive</td>"));
    assert!(html.contains("<td class=\"verdict untestable\">not testable here</td>"));
}

#[test]
fn real_and_unrecorded_testbeds_are_marked_too() {
    let mut real = report(Vec::new());
    real.provenance.testbed_kind = "real".to_owned();
    assert!(render_html(&real).contains("REAL testbed"));
    real.provenance.testbed_kind = String::new();
    assert!(render_html(&real).contains("origin of these numbers is unknown"));
}

const SKIP_VARIABLE: &str = "FRACFLOW_SKIP_BROWSER";

/// Debian's `chromium` (or Ubuntu's `chromium-browser`) on PATH.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// The DOM Chromium ends up with for `page`, after its load handlers ran.
fn dump_dom(browser: &Path, page: &Path, scratch: &Path) -> String {
    let dump = scratch.join(format!(
        "{}.dom",
        page.file_name().and_then(|n| n.to_str()).unwrap_or("page")
    ));
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--allow-file-access-from-files",
            "--virtual-time-budget=5000",
        ])
        .arg(format!(
            "--user-data-dir={}",
            scratch.join("profile").display()
        ))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(File::create(&dump).expect("dump file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(status) = child.try_wait().expect("wait for chromium") {
            assert!(status.success(), "chromium exited with {status}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::read_to_string(&dump).expect("dumped DOM")
}

#[test]
fn headless_chromium_loads_every_figure_and_notices_a_missing_one() {
    let Some(browser) = chromium() else {
        if std::env::var(SKIP_VARIABLE).as_deref() == Ok("1") {
            eprintln!("SKIPPED: chromium is not installed and {SKIP_VARIABLE}=1");
            return;
        }
        panic!(
            "chromium is not installed: run `apt-get install chromium` (CI installs it), \
             or set {SKIP_VARIABLE}=1 to skip this browser check"
        );
    };
    let run = tempfile::tempdir().expect("temp dir");
    let figures_dir = run.path().join("figures");
    let cdf = fixtures::trace_cdf_spec();
    let bars = fixtures::mixed_workload_spec();
    draw(
        &cdf,
        &tables("cdf", fixtures::trace_cdf()),
        &provenance(),
        &figures_dir,
    )
    .expect("fig18");
    draw(
        &bars,
        &tables("summary", fixtures::mixed_workload()),
        &provenance(),
        &figures_dir,
    )
    .expect("fig14");
    assert!(
        figure_files(&bars)
            .iter()
            .all(|name| figures_dir.join(name).is_file())
    );

    let complete = run.path().join("report.html");
    write_report(&report(vec![figure("fig18"), figure("fig14")]), &complete).expect("report");
    let broken = run.path().join("broken.html");
    write_report(&report(vec![figure("fig18"), figure("fig99")]), &broken).expect("broken report");

    let dom = dump_dom(&browser, &complete, run.path());
    assert!(
        dom.contains("data-figures-loaded=\"2/2\""),
        "not every figure loaded:\n{}",
        &dom[..dom.len().min(2000)]
    );
    let dom = dump_dom(&browser, &broken, run.path());
    assert!(
        dom.contains("data-figures-loaded=\"1/2\""),
        "the missing figure went unnoticed:\n{}",
        &dom[..dom.len().min(2000)]
    );
}
