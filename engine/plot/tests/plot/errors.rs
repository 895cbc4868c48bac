//! Bad input fails with an error that names what is missing, and writes nothing.

use fracflow_plot::{AxisBreak, AxisSpec, PlotError, Scale, draw};
use fracflow_record::{Cell, Table};

use super::fixtures::{self, provenance, spec, tables};

fn error_of(spec: &fracflow_plot::PlotSpec, table_name: &str, table: Table) -> PlotError {
    let out = tempfile::tempdir().expect("temp dir");
    let error =
        draw(spec, &tables(table_name, table), &provenance(), out.path()).expect_err("must fail");
    let written = std::fs::read_dir(out.path()).expect("read dir").count();
    assert_eq!(written, 0, "a failed figure wrote files");
    error
}

#[test]
fn missing_table_is_named_with_the_tables_given() {
    let error = error_of(
        &fixtures::trace_cdf_spec(),
        "summary",
        fixtures::trace_cdf(),
    );
    assert!(
        matches!(&error, PlotError::MissingTable { table, .. } if table == "cdf"),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("`cdf`") && message.contains("summary"),
        "{message}"
    );
}

#[test]
fn missing_y_column_is_named_with_its_role() {
    let mut spec = fixtures::scalability_spec();
    spec.y.column = "p50_us".to_owned();
    let error = error_of(&spec, "summary", fixtures::scalability());
    assert!(
        matches!(&error, PlotError::MissingColumn { column, role, .. } if column == "p50_us" && *role == "y"),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("median_us"),
        "the message lists the columns there are: {error}"
    );
}

#[test]
fn missing_band_series_and_panel_columns_are_named() {
    for (key, value, column) in [
        (
            "band",
            serde_json::json!({"lo": "p10_us", "hi": "p75_us"}),
            "p10_us",
        ),
        ("series", serde_json::json!({"column": "config"}), "config"),
        ("panels", serde_json::json!({"rows": "size"}), "size"),
        ("where", serde_json::json!({"msg": 4096}), "msg"),
    ] {
        let mut json = serde_json::json!({
            "figure": "fig16", "style": "lines",
            "x": {"column": "clients"}, "y": {"column": "median_us"}
        });
        json[key] = value;
        let error = error_of(&spec(json), "summary", fixtures::scalability());
        assert!(
            matches!(&error, PlotError::MissingColumn { column: c, .. } if c == column),
            "{key}: {error:?}"
        );
    }
}

#[test]
fn text_in_a_numeric_column_is_reported_with_its_row() {
    let mut table = fixtures::scalability();
    table.rows[3][4] = Cell::Text("n/a".to_owned());
    let error = error_of(&fixtures::scalability_spec(), "summary", table);
    assert!(
        matches!(&error, PlotError::NotNumeric { column, row: 3, value, .. } if column == "median_us" && value == "n/a"),
        "{error:?}"
    );
}

#[test]
fn a_break_on_the_wrong_axis_or_style_is_a_spec_error() {
    let mut bars = fixtures::mixed_workload_spec();
    bars.x = Some(AxisSpec {
        column: "f".to_owned(),
        label: None,
        scale: Scale::Linear,
        range: None,
        axis_break: Some(AxisBreak {
            left: Some([0.0, 1.0]),
            right: Some([2.0, 3.0]),
            below: None,
            above: None,
        }),
    });
    let error = error_of(&bars, "summary", fixtures::mixed_workload());
    assert!(
        matches!(&error, PlotError::Spec { message, .. } if message.contains("x.break")),
        "{error:?}"
    );

    let mut sideways = fixtures::trace_cdf_spec();
    sideways.y.axis_break = sideways.x.as_ref().and_then(|x| x.axis_break);
    let error = error_of(&sideways, "cdf", fixtures::trace_cdf());
    assert!(error.to_string().contains("below/above"), "{error}");
}

#[test]
fn a_panel_order_that_does_not_say_which_facet_it_orders_is_a_spec_error() {
    for (panels, expected) in [
        (
            serde_json::json!({"rows": "m", "columns": "units", "order": [1, 2]}),
            "give a list for each: `order: {m: […], units: […]}`",
        ),
        (
            serde_json::json!({"columns": "units", "order": {"m": [1024]}}),
            "`panels.order` names `m`, which is neither",
        ),
        (
            serde_json::json!({"order": [1, 2]}),
            "needs `panels.rows` or `panels.columns`",
        ),
    ] {
        let mut json = serde_json::json!({
            "figure": "fig16", "style": "lines",
            "x": {"column": "clients"}, "y": {"column": "median_us"}
        });
        json["panels"] = panels;
        let error = error_of(&spec(json), "summary", fixtures::scalability());
        assert!(
            matches!(&error, PlotError::Spec { message, .. } if message.contains(expected)),
            "{error}"
        );
    }
    let not_a_list = serde_json::from_value::<fracflow_plot::PlotSpec>(serde_json::json!({
        "figure": "f", "style": "lines", "x": {"column": "x"}, "y": {"column": "y"},
        "panels": {"columns": "units", "order": "4, 2"}
    }));
    assert!(
        not_a_list
            .expect_err("a string is no order")
            .to_string()
            .contains("a list of values"),
    );
}

#[test]
fn two_rows_for_one_bar_are_refused() {
    let mut table = fixtures::mixed_workload();
    let first = table.rows[0].clone();
    table.rows.push(first);
    let error = error_of(&fixtures::mixed_workload_spec(), "summary", table);
    let message = error.to_string();
    assert!(
        message.contains("Top-K") && message.contains("isolated"),
        "{message}"
    );
}

#[test]
fn a_figure_name_with_a_path_is_refused() {
    let mut spec = fixtures::scalability_spec();
    spec.figure = "../fig16".to_owned();
    let error = error_of(&spec, "summary", fixtures::scalability());
    assert!(matches!(error, PlotError::Spec { .. }), "{error:?}");
}
