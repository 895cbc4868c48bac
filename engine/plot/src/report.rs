//! The run report: one self-contained HTML page (inline CSS, no network, no external script) that shows where
//! every number came from, the figures, the verdicts on the paper's claims, the summary tables, the build
//! provenance and every node with its log.
//!
//! A few lines of inline script count the figures that loaded and write `data-figures-loaded="K/N"` on `<body>`,
//! so that a headless browser can check that no figure link is broken; the page reads the same without script.

use std::fmt::Write as _;
use std::io;
use std::path::Path;

use fracflow_record::{
    ExpectationResult, Files, NodeStatus, PaperComparison, Provenance, Publish, Table, Verdict,
};

/// Everything the page shows. Paths are relative to the page, so the run directory can move as a whole.
#[derive(Debug, Clone)]
pub struct Report<'a> {
    pub provenance: Provenance,
    pub title: String,
    pub figures: Vec<ReportFigure>,
    pub tables: Vec<ReportTable>,
    pub expectations: Vec<ExpectationResult>,
    /// Provenance rows: git commit, tool versions, image and partial hashes, testbed fields.
    pub build: Vec<(String, String)>,
    pub nodes: Vec<ReportNode<'a>>,
    /// Set for a run that repeated another exactly: `nodes` is then empty, and the page names that run,
    /// whose report lists them.
    pub repeats: Option<RepeatedRun>,
}

/// The run a repeat served every node as, and how many nodes that is.
#[derive(Debug, Clone)]
pub struct RepeatedRun {
    pub run_id: String,
    pub nodes: usize,
}

#[derive(Debug, Clone)]
pub struct ReportFigure {
    pub caption: String,
    pub svg: String,
    pub png: String,
    pub pdf: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ReportTable {
    pub name: String,
    pub table: Table,
    /// The full table as CSV, linked below the rendering (which stops at [`MAX_TABLE_ROWS`]).
    pub csv: String,
}

/// One row of the node table, borrowed from the run's manifest: a copy of every id was a fifth of what the end
/// of a 30 000-node run held.
#[derive(Debug, Clone)]
pub struct ReportNode<'a> {
    pub id: &'a str,
    pub kind: &'a str,
    pub status: NodeStatus,
    pub seconds: Option<f64>,
    pub log: Option<&'a str>,
}

/// Rows rendered per table; past this the page would be slow to scroll and the CSV is the better view.
pub const MAX_TABLE_ROWS: usize = 50;

/// How much of the page is built before it is handed on: the node table of a 300 000-node run is tens of
/// megabytes of HTML, which a run would otherwise hold whole at its end beside everything else.
const PIECE: usize = 64 * 1024;

/// Writes the page to `path` atomically (durable, as [`fracflow_record::atomic_write`]), piece by piece.
pub fn write_report(report: &Report<'_>, path: &Path) -> io::Result<()> {
    Files::real()
        .prepare(path, Publish::Durable, |out| {
            render(report, &mut |piece| out.write_all(piece.as_bytes()))
        })?
        .publish()
}

/// The page's HTML.
pub fn render_html(report: &Report<'_>) -> String {
    let mut html = String::new();
    // Appending to a string cannot fail.
    let _ = render(report, &mut |piece| {
        html.push_str(piece);
        Ok(())
    });
    html
}

/// Renders the page and hands it to `emit` in pieces of about [`PIECE`] bytes.
fn render(report: &Report<'_>, emit: &mut dyn FnMut(&str) -> io::Result<()>) -> io::Result<()> {
    let mut page = String::with_capacity(PIECE + 16 * 1024);
    let title = escape(&report.title);
    page.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    page.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    let _ = writeln!(
        page,
        "<title>{title}</title>\n<style>{STYLE}</style>\n<script>{SCRIPT}</script>"
    );
    page.push_str("</head>\n<body data-figures-loaded=\"\">\n");
    let _ = writeln!(page, "<header>\n<h1>{title}</h1>");
    push_provenance(&mut page, &report.provenance);
    push_verdict_summary(&mut page, &report.expectations);
    page.push_str(
        "<nav><a href=\"#figures\">Figures</a> · <a href=\"#expectations\">Expectations</a> · ",
    );
    page.push_str("<a href=\"#tables\">Tables</a> · <a href=\"#build\">Build</a> · <a href=\"#nodes\">Nodes</a></nav>\n");
    page.push_str("</header>\n<main>\n");
    push_figures(&mut page, &report.figures);
    push_expectations(
        &mut page,
        &report.expectations,
        &report.provenance.testbed_kind,
    );
    push_tables(&mut page, &report.tables);
    push_build(&mut page, &report.build);
    match &report.repeats {
        Some(repeated) => push_repeated(&mut page, repeated),
        None => push_nodes(&mut page, &report.nodes, emit)?,
    }
    let _ = writeln!(
        page,
        "</main>\n<footer>{}</footer>\n</body>\n</html>",
        escape(&report.provenance.footer())
    );
    emit(&page)
}

const STYLE: &str = "
body{font-family:'DejaVu Sans',system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 1.5rem 2rem;color:#1e1e1e;line-height:1.45}
header{border-bottom:1px solid #ddd;padding-bottom:.8rem}
h1{font-size:1.6rem;margin:1.2rem 0 .6rem}h2{font-size:1.25rem;margin-top:2rem;border-bottom:1px solid #eee}
dl.provenance{display:grid;grid-template-columns:max-content 1fr;gap:.15rem 1rem;margin:.6rem 0}
dl.provenance dt{color:#555}dl.provenance dd{margin:0;font-family:monospace}
.testbed{display:inline-block;padding:.35rem .7rem;border-radius:4px;font-weight:bold;margin:.3rem 0}
.testbed.emulated{background:#fff1d6;border:1px solid #d08a00;color:#7a4d00}
.testbed.real{background:#e3f5e1;border:1px solid #2c8a2c;color:#1d5e1d}
.testbed.doubles{background:#f1e3f5;border:1px solid #7a2c8a;color:#4d1d5e}
.testbed.unknown{background:#fde2e2;border:1px solid #c62828;color:#8e1b1b}
.verdicts{font-size:1.1rem;font-weight:bold;margin:.5rem 0}.verdicts a{color:inherit}.verdicts.failing{color:#b71c1c}.verdicts.passing{color:#1d5e1d}
figure{margin:1.2rem 0;padding:.6rem;border:1px solid #eee}figure img{max-width:100%;height:auto;display:block}
figcaption{margin-top:.4rem;color:#333}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f5f5f5}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.fail td{background:#fdecea}tr.fail td.verdict{color:#b71c1c;font-weight:bold}td.verdict.pass{color:#1d5e1d;font-weight:bold}
td.verdict.inconclusive{color:#7a4d00;font-weight:bold}td.verdict.untestable{color:#555;font-style:italic}
.status-failed{color:#b71c1c;font-weight:bold}.status-skipped{color:#777}
.note{color:#555;font-size:.9rem}footer{margin-top:2rem;color:#666;font-size:.85rem}
";

/// Counts the images that really loaded; `<img>` elements are the figures.
const SCRIPT: &str = "
window.addEventListener('load', function () {
  var images = document.querySelectorAll('img');
  var loaded = 0;
  for (var i = 0; i < images.length; i++) {
    if (images[i].complete && images[i].naturalWidth > 0) { loaded++; }
  }
  document.body.setAttribute('data-figures-loaded', loaded + '/' + images.length);
});
";

fn push_provenance(page: &mut String, provenance: &Provenance) {
    let (class, words) = match provenance.testbed_kind.as_str() {
        "emulated" => (
            "emulated",
            "EMULATED testbed: every number on this page comes from the software fRAC device, not an FPGA",
        ),
        "real" => (
            "real",
            "REAL testbed: numbers measured with real tools on the testbed its profile describes",
        ),
        "doubles" => (
            "doubles",
            "TOOL DOUBLES: every number on this page comes from scripts standing in for the hardware tools; none is a measurement",
        ),
        _ => (
            "unknown",
            "testbed kind not recorded: the origin of these numbers is unknown",
        ),
    };
    let _ = writeln!(
        page,
        "<p class=\"testbed {class}\" id=\"testbed\">{}</p>",
        escape(words)
    );
    page.push_str("<dl class=\"provenance\">\n");
    for (term, value) in [
        ("pipeline", &provenance.pipeline),
        ("run", &provenance.run_id),
        (
            "testbed",
            &format!("{} ({})", provenance.testbed, provenance.testbed_kind),
        ),
        ("host", &provenance.host),
        ("client", &provenance.client),
    ] {
        let _ = writeln!(page, "<dt>{term}</dt><dd>{}</dd>", escape(value));
    }
    page.push_str("</dl>\n");
}

fn push_verdict_summary(page: &mut String, expectations: &[ExpectationResult]) {
    let count = |verdict: Verdict| {
        expectations
            .iter()
            .filter(|result| result.verdict == verdict)
            .count()
    };
    let total = expectations.len();
    let failed = count(Verdict::Fail);
    let mut words = match (total, failed) {
        (0, _) => "no expectations were checked".to_owned(),
        (_, 0) => format!("{} of {total} expectations passed", count(Verdict::Pass)),
        _ => format!("{failed} of {total} expectations FAILED"),
    };
    for (verdict, what) in [
        (Verdict::Inconclusive, "inconclusive"),
        (Verdict::NotTestable, "not testable here"),
    ] {
        let n = count(verdict);
        if n > 0 {
            let _ = write!(words, ", {n} {what} (not a failure)");
        }
    }
    let class = if failed > 0 { "failing" } else { "passing" };
    let _ = writeln!(
        page,
        "<p class=\"verdicts {class}\"><a href=\"#expectations\">{}</a></p>",
        escape(&words)
    );
}

fn push_figures(page: &mut String, figures: &[ReportFigure]) {
    page.push_str("<section id=\"figures\">\n<h2>Figures</h2>\n");
    if figures.is_empty() {
        page.push_str("<p class=\"note\">No figures in this run.</p>\n");
    }
    for figure in figures {
        let caption = escape(&figure.caption);
        let svg = link(&figure.svg);
        let _ = write!(
            page,
            "<figure>\n<a href=\"{svg}\"><img src=\"{svg}\" alt=\"{caption}\"></a>\n<figcaption>{caption} · <a href=\"{svg}\">SVG</a> · <a href=\"{}\">PNG</a>",
            link(&figure.png)
        );
        if let Some(pdf) = &figure.pdf {
            let _ = write!(page, " · <a href=\"{}\">PDF</a>", link(pdf));
        }
        page.push_str("</figcaption>\n</figure>\n");
    }
    page.push_str("</section>\n");
}

fn push_expectations(page: &mut String, expectations: &[ExpectationResult], testbed_kind: &str) {
    page.push_str("<section id=\"expectations\">\n<h2>Expectations</h2>\n");
    if expectations.is_empty() {
        page.push_str("<p class=\"note\">No expectations were checked.</p>\n</section>\n");
        return;
    }
    page.push_str("<table>\n<thead><tr><th>verdict</th><th>expectation</th><th>claim</th><th>measured</th></tr></thead>\n<tbody>\n");
    for result in expectations {
        let class = match result.verdict {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Inconclusive => "inconclusive",
            Verdict::NotTestable => "untestable",
        };
        let _ = writeln!(
            page,
            "<tr class=\"{class}\"><td class=\"verdict {class}\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(result.verdict.words()),
            escape(&result.name),
            escape(&result.claim),
            escape(&result.measured)
        );
    }
    page.push_str("</tbody>\n</table>\n");
    push_paper_table(page, expectations, testbed_kind);
    page.push_str("</section>\n");
}

/// The paper's numbers beside this run's, for every claim that carries one (`paper:`), each measured value
/// labelled with the testbed kind it came from.
fn push_paper_table(page: &mut String, expectations: &[ExpectationResult], testbed_kind: &str) {
    let rows: Vec<(&ExpectationResult, &PaperComparison)> = expectations
        .iter()
        .flat_map(|result| result.paper.iter().map(move |paper| (result, paper)))
        .collect();
    if rows.is_empty() {
        return;
    }
    page.push_str("<h3 id=\"paper\">Paper vs this run</h3>\n");
    page.push_str("<table class=\"paper\">\n<thead><tr><th>expectation</th><th>paper</th><th>where in the paper</th><th>this run</th><th>testbed</th><th>measured at</th></tr></thead>\n<tbody>\n");
    for (result, paper) in rows {
        let measured = paper.measured.map_or_else(
            || "not measured in this run".to_owned(),
            |value| format!("{} {}", short_number(value), paper.unit),
        );
        let kind = paper.testbed_kind.as_deref().unwrap_or(testbed_kind);
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td class=\"num\">{} {}</td><td>{}</td><td class=\"num\">{}</td><td class=\"kind {}\">{}</td><td>{}</td></tr>",
            escape(&result.name),
            escape(&paper.paper),
            escape(&paper.unit),
            escape(&paper.source),
            escape(&measured),
            escape(kind),
            escape(kind),
            escape(&paper.at)
        );
    }
    page.push_str("</tbody>\n</table>\n");
}

/// A measured value with three significant digits at most (`7.93`, `146`, `0.412`).
fn short_number(value: f64) -> String {
    if value.abs() >= 100.0 {
        format!("{value:.0}")
    } else if value.abs() >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

fn push_tables(page: &mut String, tables: &[ReportTable]) {
    page.push_str("<section id=\"tables\">\n<h2>Summary tables</h2>\n");
    if tables.is_empty() {
        page.push_str("<p class=\"note\">No summary tables in this run.</p>\n");
    }
    for table in tables {
        let rows = table.table.rows.len();
        let _ = writeln!(
            page,
            "<h3>{}</h3>\n<p class=\"note\">{rows} rows · <a href=\"{}\">CSV</a></p>",
            escape(&table.name),
            link(&table.csv)
        );
        page.push_str("<table>\n<thead><tr>");
        for column in &table.table.columns {
            let _ = write!(page, "<th>{}</th>", escape(column));
        }
        page.push_str("</tr></thead>\n<tbody>\n");
        for row in table.table.rows.iter().take(MAX_TABLE_ROWS) {
            page.push_str("<tr>");
            for cell in row {
                let class = if matches!(cell, fracflow_record::Cell::Num(_)) {
                    " class=\"num\""
                } else {
                    ""
                };
                let _ = write!(page, "<td{class}>{}</td>", escape(&cell.label()));
            }
            page.push_str("</tr>\n");
        }
        page.push_str("</tbody>\n</table>\n");
        if rows > MAX_TABLE_ROWS {
            let _ = writeln!(
                page,
                "<p class=\"note\">Showing the first {MAX_TABLE_ROWS} of {rows} rows; the <a href=\"{}\">CSV</a> has them all.</p>",
                link(&table.csv)
            );
        }
    }
    page.push_str("</section>\n");
}

fn push_build(page: &mut String, build: &[(String, String)]) {
    page.push_str("<section id=\"build\">\n<h2>Build provenance</h2>\n");
    if build.is_empty() {
        page.push_str("<p class=\"note\">No build provenance recorded.</p>\n</section>\n");
        return;
    }
    page.push_str("<table>\n<tbody>\n");
    for (key, value) in build {
        let _ = writeln!(
            page,
            "<tr><th>{}</th><td><code>{}</code></td></tr>",
            escape(key),
            escape(value)
        );
    }
    page.push_str("</tbody>\n</table>\n</section>\n");
}

fn status_word(status: NodeStatus) -> &'static str {
    match status {
        NodeStatus::Pending => "pending",
        NodeStatus::Running => "running",
        NodeStatus::Built => "built",
        NodeStatus::Cached => "cached",
        NodeStatus::Failed => "failed",
        NodeStatus::Skipped => "skipped",
    }
}

/// A repeat's node section: one line instead of a row per node.
fn push_repeated(page: &mut String, repeated: &RepeatedRun) {
    page.push_str("<section id=\"nodes\">\n<h2>Nodes</h2>\n");
    let run = escape(&repeated.run_id);
    let _ = writeln!(
        page,
        "<p class=\"note\">{} nodes: 0 built, {} cached. This run repeated run <code>{run}</code> exactly (every node a cache hit under the key that run recorded); <a href=\"{}\">its report</a> lists the nodes.</p>",
        repeated.nodes,
        repeated.nodes,
        link(&format!("../{}/report.html", repeated.run_id)),
    );
    page.push_str("</section>\n");
}

/// The node table; what is built so far goes to `emit` whenever it passes [`PIECE`] bytes.
fn push_nodes(
    page: &mut String,
    nodes: &[ReportNode<'_>],
    emit: &mut dyn FnMut(&str) -> io::Result<()>,
) -> io::Result<()> {
    page.push_str("<section id=\"nodes\">\n<h2>Nodes</h2>\n");
    let count = |wanted: NodeStatus| nodes.iter().filter(|node| node.status == wanted).count();
    let _ = writeln!(
        page,
        "<p class=\"note\">{} nodes: {} built, {} cached, {} failed, {} skipped.</p>",
        nodes.len(),
        count(NodeStatus::Built),
        count(NodeStatus::Cached),
        count(NodeStatus::Failed),
        count(NodeStatus::Skipped)
    );
    page.push_str("<table>\n<thead><tr><th>node</th><th>kind</th><th>status</th><th>seconds</th><th>log</th></tr></thead>\n<tbody>\n");
    for node in nodes {
        let status = status_word(node.status);
        let seconds = node
            .seconds
            .map_or_else(String::new, |seconds| format!("{seconds:.1}"));
        let log = node.log.as_ref().map_or_else(String::new, |log| {
            format!("<a href=\"{}\">log</a>", link(log))
        });
        let _ = writeln!(
            page,
            "<tr><td><code>{}</code></td><td>{}</td><td class=\"status-{status}\">{status}</td><td class=\"num\">{seconds}</td><td>{log}</td></tr>",
            escape(node.id),
            escape(node.kind)
        );
        if page.len() >= PIECE {
            emit(page)?;
            page.clear();
        }
    }
    page.push_str("</tbody>\n</table>\n</section>\n");
    Ok(())
}

/// Text made safe for HTML element content and quoted attribute values.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            other => escaped.push(other),
        }
    }
    escaped
}

/// A relative path as an `href`/`src` value: characters a URL cannot hold raw (space, `#`, `?`, `%`, non-ASCII)
/// are percent-encoded, so a node id like `partials[unit=cnn]` or a space in a name still links; then escaped.
fn link(path: &str) -> String {
    let mut encoded = String::with_capacity(path.len());
    for byte in path.bytes() {
        let keep = byte.is_ascii_alphanumeric() || b"-._~/!$&'()*+,;=:@[]".contains(&byte);
        if keep {
            encoded.push(char::from(byte));
        } else {
            let _ = write!(encoded, "%{byte:02X}");
        }
    }
    escape(&encoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_names_is_escaped_and_paths_are_encoded() {
        assert_eq!(
            escape("<b>\"a\" & 'b'</b>"),
            "&lt;b&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/b&gt;"
        );
        assert_eq!(
            link("nodes/plot[fig=16]/a b#1.log"),
            "nodes/plot[fig=16]/a%20b%231.log"
        );
        assert_eq!(link("µ.svg"), "%C2%B5.svg");
    }
}
