//! The four figure shapes as SVG snapshots, and the PNG and PDF made from them.

use std::time::{Duration, Instant};

use fracflow_plot::{PlotSpec, draw, figure_files, render_svg};
use fracflow_record::Table;

use super::fixtures::{self, provenance, tables};

fn svg_of(spec: &PlotSpec, table_name: &str, table: Table) -> String {
    let svg = render_svg(spec, &tables(table_name, table), &provenance()).expect("figure draws");
    assert!(
        svg.contains(&provenance().footer()),
        "footer missing from {}",
        spec.figure
    );
    svg
}

#[test]
fn lines_with_band_and_six_panels() {
    let svg = svg_of(
        &fixtures::scalability_spec(),
        "summary",
        fixtures::scalability(),
    );
    // The spec orders fRAC, CPU, DPU; the table has no DPU rows, so the legend does not list it.
    assert!(
        !svg.contains("DPU"),
        "a series without data is in the legend"
    );
    for text in [
        "fRAC",
        "CPU",
        "p25–p75",
        "4 units · 4096 B",
        "Latency (µs)",
        "Clients",
        "1000",
    ] {
        assert!(svg.contains(text), "{text:?} missing");
    }
    insta::assert_snapshot!("lines_band_facets", svg);
}

#[test]
fn bars_with_groups_error_bars_and_outlines() {
    let svg = svg_of(
        &fixtures::reassembly_spec(),
        "summary",
        fixtures::reassembly(),
    );
    for text in [
        "4 fragments",
        "Without Reassembly (emu)",
        "Mixed Workload",
        "isolated",
        "Norm",
    ] {
        assert!(svg.contains(text), "{text:?} missing");
    }
    insta::assert_snapshot!("bars_groups_errors_outline", svg);
}

#[test]
fn cdf_with_a_broken_x_axis() {
    let svg = svg_of(&fixtures::trace_cdf_spec(), "cdf", fixtures::trace_cdf());
    for text in ["Top-K", "CNN", "8840", "CDF"] {
        assert!(svg.contains(text), "{text:?} missing");
    }
    insta::assert_snapshot!("cdf_broken_x", svg);
}

#[test]
fn bars_with_a_broken_y_axis() {
    let svg = svg_of(
        &fixtures::mixed_workload_spec(),
        "summary",
        fixtures::mixed_workload(),
    );
    // Without series the legend names what the bars show.
    for text in ["Latency (µs) (± std_us)", "CNN", "10000", "50"] {
        assert!(svg.contains(text), "{text:?} missing");
    }
    insta::assert_snapshot!("bars_broken_y", svg);
}

/// The x of each `<text>` element whose content is one of `titles`, in the order the titles are given.
fn title_positions(svg: &str, titles: &[&str]) -> Vec<Option<f64>> {
    titles
        .iter()
        .map(|title| {
            let end = svg.find(&format!(">\n{title}\n</text>"))?;
            let start = svg[..end].rfind("<text ")?;
            let x = svg[start..end].split("x=\"").nth(1)?.split('"').next()?;
            x.parse().ok()
        })
        .collect()
}

#[test]
fn panels_follow_their_order_and_an_ordered_value_without_rows_gets_an_empty_panel() {
    let spec = fixtures::sume_throughput_spec();
    let svg = svg_of(&spec, "summary", fixtures::sume_throughput());
    let x = title_positions(&svg, &["tx-only", "rx-only", "loopback"]);
    assert!(x.iter().all(Option::is_some), "panel titles missing: {x:?}");
    assert!(
        x.windows(2).all(|pair| pair[0] < pair[1]),
        "TX only, RX only, loopback from left to right: {x:?}"
    );
    assert!(!svg.contains("no data"));
    insta::assert_snapshot!("bars_panel_order", svg);

    // Values not listed follow in their natural order; a listed value no row has is an empty panel.
    let mut partial = spec.clone();
    partial.panels.as_mut().expect("panels").order = Some(fracflow_plot::PanelOrder::Values(
        ["both", "rx-only"]
            .map(|v| fracflow_record::Cell::Text(v.to_owned()))
            .to_vec(),
    ));
    let svg = svg_of(&partial, "summary", fixtures::sume_throughput());
    let x = title_positions(&svg, &["both", "rx-only", "loopback", "tx-only"]);
    assert!(x.iter().all(Option::is_some), "panel titles missing: {x:?}");
    assert!(x.windows(2).all(|pair| pair[0] < pair[1]), "{x:?}");
    assert_eq!(svg.matches("no data").count(), 1, "one empty panel");
}

#[test]
fn panel_order_by_column_orders_rows_and_columns() {
    let mut spec = fixtures::scalability_spec();
    spec.panels.as_mut().expect("panels").order = Some(
        serde_json::from_value(serde_json::json!({"units": [4, 2], "m": [4096]}))
            .expect("order parses"),
    );
    let svg = svg_of(&spec, "summary", fixtures::scalability());
    // Row-major: m = 4096 first, then 1024; within a row units 4, 2, then 1.
    let titles = [
        "4 units · 4096 B",
        "2 units · 4096 B",
        "1 units · 4096 B",
        "4 units · 1024 B",
        "2 units · 1024 B",
        "1 units · 1024 B",
    ];
    let order: Vec<usize> = titles
        .iter()
        .map(|title| svg.find(&format!(">\n{title}\n</text>")).expect(title))
        .collect();
    assert!(order.windows(2).all(|pair| pair[0] < pair[1]), "{order:?}");
}

/// The `width="…"` and `height="…"` of the SVG root.
fn svg_size(svg: &str) -> (u32, u32) {
    let attribute = |name: &str| {
        let start = svg.find(&format!("{name}=\"")).expect("size attribute") + name.len() + 2;
        let end = start + svg[start..].find('"').expect("closing quote");
        svg[start..end].parse::<u32>().expect("integer size")
    };
    (attribute("width"), attribute("height"))
}

#[test]
fn draw_writes_svg_png_and_pdf_with_the_font_embedded() {
    let out = tempfile::tempdir().expect("temp dir");
    let spec = fixtures::scalability_spec();
    let started = Instant::now();
    let written = draw(
        &spec,
        &tables("summary", fixtures::scalability()),
        &provenance(),
        out.path(),
    )
    .expect("draws");
    let elapsed = started.elapsed();
    eprintln!("six-panel figure drawn and converted in {elapsed:?}");
    // Generous for a debug build on a shared 2-core host; a regression to seconds per figure still fails.
    assert!(
        elapsed < Duration::from_secs(10),
        "drawing took {elapsed:?}"
    );
    let expected: Vec<_> = figure_files(&spec)
        .iter()
        .map(|name| out.path().join(name))
        .collect();
    assert_eq!(written, expected);
    assert_eq!(figure_files(&spec), ["fig16.svg", "fig16.png", "fig16.pdf"]);

    let svg = std::fs::read_to_string(&written[0]).expect("svg");
    let (width, height) = svg_size(&svg);
    let png = std::fs::read(&written[1]).expect("png");
    let pixmap = resvg::tiny_skia::Pixmap::decode_png(&png).expect("PNG decodes");
    assert_eq!((pixmap.width(), pixmap.height()), (2 * width, 2 * height));

    let pdf = std::fs::read(&written[2]).expect("pdf");
    assert!(pdf.starts_with(b"%PDF"), "not a PDF");
    let contains = |needle: &[u8]| pdf.windows(needle.len()).any(|window| window == needle);
    assert!(
        contains(b"/FontFile2"),
        "PDF embeds no TrueType font program"
    );
    assert!(contains(b"DejaVuSans"), "PDF's font is not DejaVu Sans");

    let leftovers: Vec<_> = std::fs::read_dir(out.path())
        .expect("read dir")
        .map(|entry| entry.expect("entry").file_name())
        .filter(|name| !figure_files(&spec).iter().any(|file| name == file.as_str()))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[test]
fn spec_parses_every_key_of_the_format_and_keeps_written_order() {
    let text = r#"{
        "figure": "fig14", "title": "Figure 14", "table": "summary", "style": "bars",
        "x": {"column": "f", "label": "Function"},
        "y": {"column": "mean_us", "label": "Latency (µs)", "scale": "linear",
              "break": {"below": [0, 50], "above": [1000, 10000]}},
        "error": "std_us",
        "series": {"column": "series", "order": ["fRAC", "CPU", "DPU"]},
        "panels": {"rows": "m", "columns": "units", "title": "{units} units · {m} B", "order": {"m": [4096, 1024]}},
        "where": {"m": 4096},
        "categories": {"column": "f", "names": {"1": "Top-K", "3": "Logit", "5": "Norm", "2": "CNN"}},
        "groups": {"column": "mix", "order": ["isolated", "mixed"], "names": {"mixed": "Mixed Workload"}},
        "outline": {"column": "computed", "value": 1, "label": "Without Reassembly (emu)"}
    }"#;
    let spec: PlotSpec = serde_json::from_str(text).expect("parses");
    let categories = spec.categories.expect("categories");
    let keys: Vec<&str> = categories
        .names
        .0
        .iter()
        .map(|(key, _)| key.as_str())
        .collect();
    assert_eq!(keys, ["1", "3", "5", "2"]);
    assert_eq!(spec.filter.len(), 1);

    let unknown = serde_json::from_str::<PlotSpec>(
        r#"{"figure": "f", "style": "lines", "y": {"column": "y"}, "colour": "red"}"#,
    );
    assert!(
        unknown
            .expect_err("unknown key")
            .to_string()
            .contains("colour")
    );
}

#[test]
fn where_filter_keeps_matching_rows_numerically() {
    let mut spec = fixtures::scalability_spec();
    spec.panels = None;
    spec.filter = vec![
        (
            "m".to_owned(),
            fracflow_record::Cell::Text("4096".to_owned()),
        ),
        ("units".to_owned(), fracflow_record::Cell::Num(1.0)),
    ];
    let svg = svg_of(&spec, "summary", fixtures::scalability());
    // 2 series × 6 client counts survive the filter, plus one marker in each of the 2 legend entries (DPU has
    // no rows, so no entry).
    assert_eq!(svg.matches("<circle").count(), 12 + 2);
}

#[test]
fn series_without_a_number_to_draw_are_left_out_of_the_legend() {
    let mut spec = fixtures::scalability_spec();
    spec.panels = None;
    spec.filter = vec![("units".to_owned(), fracflow_record::Cell::Num(1.0))];
    let mut table = fixtures::scalability();
    // DPU rows exist but measured nothing (null medians): nothing is drawn for them, so no legend entry.
    let width = table.columns.len();
    for clients in [1.0, 28.0] {
        let mut row = vec![fracflow_record::Cell::Null; width];
        row[0] = fracflow_record::Cell::Text("DPU".to_owned());
        row[1] = fracflow_record::Cell::Num(1.0);
        row[2] = fracflow_record::Cell::Num(1024.0);
        row[3] = fracflow_record::Cell::Num(clients);
        table.rows.push(row);
    }
    let svg = svg_of(&spec, "summary", table.clone());
    assert!(!svg.contains("DPU"), "{svg}");
    assert!(svg.contains("fRAC") && svg.contains("CPU"));

    // One DPU row with a number: the series is drawn and listed, in its place after CPU.
    let last = table.rows.len() - 1;
    table.rows[last][4] = fracflow_record::Cell::Num(5.0);
    let svg = svg_of(&spec, "summary", table);
    let at = |label: &str| svg.find(&format!(">\n{label}\n<"));
    assert!(at("DPU").is_some(), "{svg}");
    assert!(at("CPU") < at("DPU"), "the legend keeps the spec's order");
}
