//! Fixed summary tables shaped like the artifact's figures, with made-up but plausible numbers.

use std::collections::BTreeMap;

use fracflow_plot::PlotSpec;
use fracflow_record::{Cell, Provenance, Table};

pub fn provenance() -> Provenance {
    Provenance {
        pipeline: "fig16".to_owned(),
        run_id: "2026-11-30T02-00-00Z-ab12".to_owned(),
        testbed: "emulated".to_owned(),
        testbed_kind: "emulated".to_owned(),
        host: "ci-host".to_owned(),
        client: "embedded client, closed loop".to_owned(),
    }
}

pub fn spec(json: serde_json::Value) -> PlotSpec {
    serde_json::from_value(json).expect("spec parses")
}

fn table(columns: &[&str], rows: Vec<Vec<Cell>>) -> Table {
    Table {
        columns: columns.iter().map(|c| (*c).to_owned()).collect(),
        rows,
        labels: None,
    }
}

fn num(value: f64) -> Cell {
    Cell::Num(value)
}

fn text(value: &str) -> Cell {
    Cell::Text(value.to_owned())
}

pub fn tables(name: &str, table: Table) -> BTreeMap<String, Table> {
    BTreeMap::from([(name.to_owned(), table)])
}

/// Fig. 16: median latency with p25–p75 per (series, units, size, clients); the DPU series has no rows.
pub fn scalability() -> Table {
    let mut rows = Vec::new();
    for (series, base, per_client) in [("fRAC", 7.7, 0.04), ("CPU", 14.0, 4.5)] {
        for units in [1.0, 2.0, 4.0] {
            for m in [1024.0, 4096.0] {
                for clients in [1.0, 4.0, 8.0, 16.0, 20.0, 28.0] {
                    let size_factor = if m == 4096.0 { 1.9 } else { 1.0 };
                    let median = (base + per_client * clients / units) * size_factor;
                    rows.push(vec![
                        text(series),
                        num(units),
                        num(m),
                        num(clients),
                        num(median),
                        num(median * 0.93),
                        num(median * 1.08),
                    ]);
                }
            }
        }
    }
    table(
        &[
            "series",
            "units",
            "m",
            "clients",
            "median_us",
            "p25_us",
            "p75_us",
        ],
        rows,
    )
}

pub fn scalability_spec() -> PlotSpec {
    spec(serde_json::json!({
        "figure": "fig16",
        "title": "Figure 16: Top-K latency vs clients",
        "table": "summary",
        "style": "lines",
        "x": {"column": "clients", "label": "Clients", "range": [0, 30]},
        "y": {"column": "median_us", "label": "Latency (µs)", "scale": "log"},
        "band": {"lo": "p25_us", "hi": "p75_us", "label": "p25–p75"},
        "series": {"column": "series", "order": ["fRAC", "CPU", "DPU"]},
        "panels": {"rows": "m", "columns": "units", "title": "{units} units · {m} B"}
    }))
}

/// Fig. 15-like bars: per function and fragment count, measured (computed = 0) and emulated (computed = 1),
/// alone and mixed.
pub fn reassembly() -> Table {
    let mut rows = Vec::new();
    for mix in ["isolated", "mixed"] {
        for (f, one) in [(1.0, 7.7), (3.0, 9.3), (5.0, 9.4)] {
            for fragments in [1.0, 2.0, 4.0] {
                let measured =
                    one * (1.0 + 0.3 * (fragments - 1.0)) + if mix == "mixed" { 0.5 } else { 0.0 };
                rows.push(vec![
                    text(mix),
                    num(f),
                    num(fragments),
                    num(measured),
                    num(0.4 * fragments),
                    num(0.0),
                ]);
                if fragments > 1.0 {
                    rows.push(vec![
                        text(mix),
                        num(f),
                        num(fragments),
                        num(one * fragments),
                        Cell::Null,
                        num(1.0),
                    ]);
                }
            }
        }
    }
    table(
        &["mix", "f", "fragments", "mean_us", "std_us", "computed"],
        rows,
    )
}

pub fn reassembly_spec() -> PlotSpec {
    spec(serde_json::json!({
        "figure": "fig15",
        "title": "Figure 15: reassembly",
        "style": "bars",
        "y": {"column": "mean_us", "label": "Latency (µs)"},
        "error": "std_us",
        "series": {"column": "fragments", "names": {"1": "1 fragment", "2": "2 fragments", "4": "4 fragments"}},
        "categories": {"column": "f", "order": [1, 3, 5], "names": {"1": "Top-K", "3": "Logit", "5": "Norm"}},
        "groups": {"column": "mix", "order": ["isolated", "mixed"], "names": {"mixed": "Mixed Workload"}},
        "outline": {"column": "computed", "value": 1, "label": "Without Reassembly (emu)"}
    }))
}

/// Fig. 18: CDF points per function; the CNN answers three orders of magnitude later.
pub fn trace_cdf() -> Table {
    let mut rows = Vec::new();
    for (series, start, spread) in [
        ("Top-K", 7.0, 6.0),
        ("Logit", 9.0, 9.0),
        ("Norm", 9.5, 12.0),
        ("CNN", 8826.0, 22.0),
    ] {
        for step in 0..=20 {
            let fraction = f64::from(step) / 20.0;
            rows.push(vec![
                text(series),
                num(start + spread * fraction * fraction),
                num(fraction),
            ]);
        }
    }
    table(&["function", "latency_us", "fraction"], rows)
}

pub fn trace_cdf_spec() -> PlotSpec {
    spec(serde_json::json!({
        "figure": "fig18",
        "title": "Figure 18: Azure trace",
        "table": "cdf",
        "style": "cdf",
        "x": {"column": "latency_us", "label": "Latency (µs)", "break": {"left": [0, 50], "right": [8820, 8860]}},
        "y": {"column": "fraction", "label": "CDF"},
        "series": {"column": "function", "order": ["Top-K", "Logit", "Norm", "CNN"]}
    }))
}

/// Fig. 14: mean ± std per function, alone and mixed; the CNN is ~8.6 ms against ~8 µs.
pub fn mixed_workload() -> Table {
    let mut rows = Vec::new();
    for (mix, extra) in [("isolated", 0.0), ("mixed", 0.5)] {
        for (f, mean, std) in [
            (1.0, 7.7, 0.3),
            (3.0, 9.3, 0.4),
            (5.0, 9.3, 0.5),
            (2.0, 8600.0, 40.0),
        ] {
            rows.push(vec![text(mix), num(f), num(mean + extra), num(std)]);
        }
    }
    table(&["mix", "f", "mean_us", "std_us"], rows)
}

pub fn mixed_workload_spec() -> PlotSpec {
    spec(serde_json::json!({
        "figure": "fig14",
        "title": "Figure 14: mixed workload",
        "style": "bars",
        "y": {"column": "mean_us", "label": "Latency (µs)", "break": {"below": [0, 50], "above": [1000, 10000]}},
        "error": "std_us",
        "categories": {"column": "f", "order": [1, 3, 5, 2], "names": {"1": "Top-K", "3": "Logit", "5": "Norm", "2": "CNN"}},
        "groups": {"column": "mix", "order": ["isolated", "mixed"], "names": {"mixed": "Mixed Workload"}}
    }))
}

/// The SUME table: Mbit/s ± sd per direction, tool and size, its rows in the alphabetical order of their
/// directions (loopback, rx-only, tx-only), as an aggregation of dependencies sorted by id has them.
pub fn sume_throughput() -> Table {
    let mut rows = Vec::new();
    for (direction, scale) in [("loopback", 2.0), ("rx-only", 0.9), ("tx-only", 1.0)] {
        for (tool, mbps) in [("iperf", 9400.0), ("netperf", 9300.0), ("pkt-gen", 9900.0)] {
            for (size, share) in [(60.0, 0.04), (1500.0, 1.0)] {
                let value = mbps * scale * share;
                rows.push(vec![
                    text(direction),
                    text(tool),
                    num(size),
                    num(value),
                    num(value * 0.01),
                ]);
            }
        }
    }
    table(
        &[
            "direction",
            "tool",
            "size",
            "throughput_mbps",
            "throughput_mbps_sd",
        ],
        rows,
    )
}

/// The SUME figure: a panel per direction in the seed table's order (TX only, RX only, loopback).
pub fn sume_throughput_spec() -> PlotSpec {
    spec(serde_json::json!({
        "figure": "sume_throughput",
        "title": "NetFPGA SUME throughput per size",
        "style": "bars",
        "x": {"column": "size", "label": "Size (B)"},
        "y": {"column": "throughput_mbps", "label": "Throughput (Mbit/s)", "scale": "log"},
        "error": "throughput_mbps_sd",
        "categories": {"column": "size"},
        "series": {"column": "tool", "order": ["iperf", "netperf", "pkt-gen"]},
        "panels": {"columns": "direction", "title": "{direction}", "order": ["tx-only", "rx-only", "loopback"]}
    }))
}
