//! The bad-config catalogue: one wrong value per kind field that can be wrong, each reported by `fracflow run`
//! before anything starts (exit 2, no run directory, no node process), as a snapshot of the exact diagnostic.
//!
//! Every pipeline has a `first` node that would create `started` in the project as soon as the engine ran
//! anything; the bad node is `bad`, written by the case.

use crate::support::{Sandbox, text};

/// (case name, the `bad` node's body, indented by four spaces).
const CASES: &[(&str, &str)] = &[
    // command
    ("command_run_not_a_command", "kind: command\n    run: 5"),
    ("command_run_empty_argv", "kind: command\n    run: []"),
    ("command_run_blank", "kind: command\n    run: '  '"),
    (
        "command_run_unquoted_template",
        "kind: command\n    run: {m}",
    ),
    (
        "command_env_name_with_equals",
        "kind: command\n    run: env\n    env: {\"A=B\": x}",
    ),
    (
        "command_env_empty_name",
        "kind: command\n    run: env\n    env: {\"\": x}",
    ),
    (
        "command_env_value_a_list",
        "kind: command\n    run: env\n    env: {A: [1, 2]}",
    ),
    (
        "command_cwd_not_a_path",
        "kind: command\n    run: pwd\n    cwd: [scripts]",
    ),
    (
        "command_metric_bad_regex",
        "kind: command\n    run: echo tps=1\n    metrics: {tps: {regex: 'tps=(\\d+'}}",
    ),
    (
        "command_metric_unknown_key",
        "kind: command\n    run: echo tps=1\n    metrics: {tps: {regx: 'tps=(\\d+)'}}",
    ),
    (
        "command_metric_regex_and_json",
        "kind: command\n    run: echo\n    metrics: {tps: {regex: 'x', json: $.x}}",
    ),
    (
        "command_metric_match_zero",
        "kind: command\n    run: echo\n    metrics: {tps: {regex: 'x(\\d)', match: 0}}",
    ),
    (
        "command_metric_bad_base",
        "kind: command\n    run: echo\n    metrics: {tps: {regex: 'x(\\d)', base: 8}}",
    ),
    (
        "command_require_bad_regex",
        "kind: command\n    run: echo\n    require: ['BENCH (']",
    ),
    (
        "command_success_codes_impossible",
        "kind: command\n    run: 'true'\n    success_codes: [256, -1]",
    ),
    (
        "command_effect_not_a_bool",
        "kind: command\n    run: reboot\n    effect: maybe",
    ),
    (
        "command_effect_with_metrics",
        "kind: command\n    run: reboot\n    effect: true\n    metrics: {up: {regex: 'up (\\d+)'}}",
    ),
    (
        "command_effect_with_outputs",
        "kind: command\n    run: reboot\n    effect: true\n    outputs: [log.txt]",
    ),
    (
        "command_unknown_key",
        "kind: command\n    run: echo\n    deps_on: [first]",
    ),
    // group
    (
        "group_key_of_another_kind",
        "kind: group\n    deps: [first]\n    run: echo hi",
    ),
    // hls
    ("hls_unit_upper_case", "kind: hls\n    unit: Top_K"),
    ("hls_unit_without_sources", "kind: hls\n    unit: top_kk"),
    (
        "hls_tool_unknown",
        "kind: hls\n    unit: top_k\n    tool: vitis",
    ),
    (
        "hls_part_not_text",
        "kind: hls\n    unit: top_k\n    part: [xcu280]",
    ),
    (
        "hls_compiler_not_text",
        "kind: hls\n    unit: top_k\n    compiler: {cxx: g++}",
    ),
    // weave
    (
        "weave_shell_missing",
        "kind: weave\n    shell: hw/shel.yaml",
    ),
    (
        "weave_units_missing",
        "kind: weave\n    units: hw/accelerator",
    ),
    ("weave_tool_unknown", "kind: weave\n    tool: spin"),
    // partials
    (
        "partials_unit_without_sources",
        "kind: partials\n    unit: cnnn",
    ),
    (
        "partials_tool_unknown",
        "kind: partials\n    unit: top_k\n    tool: vivado",
    ),
    // image
    ("image_bypass_not_a_bool", "kind: image\n    bypass: please"),
    (
        "image_unknown_key",
        "kind: image\n    slots: {0: c00_f00.bin}",
    ),
    // program
    (
        "program_addr_without_port",
        "kind: program\n    addr: localhost",
    ),
    (
        "program_image_missing",
        "kind: program\n    addr: 127.0.0.1:7000\n    image: bitstreams/nowhere.bit",
    ),
    (
        "program_tool_unknown",
        "kind: program\n    addr: 127.0.0.1:7000\n    tool: vivad",
    ),
    (
        "program_settle_negative",
        "kind: program\n    addr: 127.0.0.1:7000\n    settle_s: -1",
    ),
    (
        "program_ready_timeout_text",
        "kind: program\n    addr: 127.0.0.1:7000\n    ready_timeout_s: soon",
    ),
    // load
    (
        "load_slot_out_of_range",
        "kind: load\n    slot: 4\n    partial: c00_f00.bin\n    addr: 127.0.0.1:7000",
    ),
    (
        "load_partial_with_directory",
        "kind: load\n    slot: 0\n    partial: icap/c00_f00.bin\n    addr: 127.0.0.1:7000",
    ),
    (
        "load_addr_port_zero",
        "kind: load\n    slot: 0\n    partial: c00_f00.bin\n    addr: 127.0.0.1:0",
    ),
    (
        "load_chunk_size_not_a_multiple",
        "kind: load\n    slot: 0\n    partial: c00_f00.bin\n    addr: 127.0.0.1:7000\n    chunk_size: 100",
    ),
    (
        "load_hbm_addr_unaligned",
        "kind: load\n    slot: 0\n    partial: c00_f00.bin\n    addr: 127.0.0.1:7000\n    hbm_addr: 0x10004004",
    ),
    (
        "load_hbm_addr_not_a_number",
        "kind: load\n    slot: 0\n    partial: c00_f00.bin\n    addr: 127.0.0.1:7000\n    hbm_addr: high",
    ),
    (
        "load_slot_missing",
        "kind: load\n    partial: c00_f00.bin\n    addr: 127.0.0.1:7000",
    ),
    // measure
    (
        "measure_fperf_unknown_flag",
        "kind: measure\n    fperf: -t rr -Q 7",
    ),
    (
        "measure_fperf_duration_not_a_number",
        "kind: measure\n    fperf: -t rr -d soon",
    ),
    (
        "measure_fperf_slot_out_of_range",
        "kind: measure\n    fperf: -t rr -K 171",
    ),
    (
        "measure_fperf_together_second_bad",
        "kind: measure\n    fperf: ['-t rr -d 1', '-t rr -n zero']",
    ),
    ("measure_fperf_missing", "kind: measure\n    clients: 4"),
    ("measure_fperf_empty_list", "kind: measure\n    fperf: []"),
    (
        "measure_instances_with_several_fperf",
        "kind: measure\n    fperf: ['-t rr', '-t rr']\n    instances: 2\n    clients: 4",
    ),
    (
        "measure_addr_not_an_ip",
        "kind: measure\n    addr: device:7000\n    fperf: -t rr -d 1",
    ),
    (
        "measure_slots_no_such_slot",
        "kind: measure\n    fperf: -t rr -d 1\n    slots: {7: c00_f00.bin}",
    ),
    (
        "measure_instances_without_clients",
        "kind: measure\n    fperf: -t rr -d 1\n    instances: 4",
    ),
    (
        "measure_clients_zero",
        "kind: measure\n    fperf: -t rr -d 1\n    instances: 2\n    clients: 0",
    ),
    (
        "measure_clients_uneven",
        "kind: measure\n    fperf: -t rr -d 1\n    instances: 4\n    clients: 6",
    ),
    (
        "measure_server_cores_zero",
        "kind: measure\n    fperf: -t rr -d 1\n    server: {cores: 0}",
    ),
    (
        "measure_trace_rows_text",
        "kind: measure\n    fperf: -t rr -d 1\n    trace: {rows: many}",
    ),
    (
        "measure_member_labels_count",
        "kind: measure\n    fperf: ['-t rr -d 1', '-t rr -d 1']\n    member_labels: [{f: a}]",
    ),
    (
        "measure_skip_negative",
        "kind: measure\n    fperf: -t rr -d 1\n    skip_s: -2",
    ),
    (
        "measure_open_loop_bad_rate",
        "kind: measure\n    fperf: -t rr -d 1\n    open_loop: fast",
    ),
    // aggregate
    (
        "aggregate_stats_bogus",
        "kind: aggregate\n    deps: [first]\n    stats: bogus",
    ),
    (
        "aggregate_unknown_key",
        "kind: aggregate\n    deps: [first]\n    stats: seconds\n    skip: 3",
    ),
    (
        "aggregate_from_s_text",
        "kind: aggregate\n    deps: [first]\n    stats: seconds\n    from_s: soon",
    ),
    (
        "aggregate_stats_missing",
        "kind: aggregate\n    deps: [first]",
    ),
    (
        "aggregate_functions_key_not_a_number",
        "kind: aggregate\n    deps: [first]\n    stats: samples\n    functions: {topk: Top-K}",
    ),
    // plot
    (
        "plot_style_pie",
        "kind: plot\n    deps: [first]\n    figure: fig1\n    style: pie\n    x: {column: n}\n    y: {column: tps}",
    ),
    (
        "plot_y_missing",
        "kind: plot\n    deps: [first]\n    figure: fig1\n    style: lines\n    x: {column: n}",
    ),
    (
        "plot_unknown_key",
        "kind: plot\n    deps: [first]\n    figure: fig1\n    style: lines\n    y: {column: tps}\n    colour: red",
    ),
    // check
    (
        "check_claim_unknown_key",
        "kind: check\n    deps: [first]\n    expect:\n      emulated:\n        - {name: a, below: {column: p99, limit: 5}}\n        - {name: b, above: {column: tps, limit: 1}, tabel: summary}",
    ),
    (
        "check_expect_not_a_list",
        "kind: check\n    deps: [first]\n    expect: {emulated: {name: a}}",
    ),
    ("check_expect_missing", "kind: check\n    deps: [first]"),
    // the kind itself
    ("unknown_kind", "kind: comand\n    run: echo"),
];

/// A project with sources the FPGA kinds look for, and `pipelines/bad.yaml` with the case's node.
fn project(node: &str) -> Sandbox {
    let sandbox = Sandbox::new();
    sandbox.write("hw/shell.yaml", "cells: []\n");
    sandbox.write("hw/accelerators/top_k/top_k.cpp", "// sources\n");
    sandbox.write("hw/accelerators/cnn/cnn.cpp", "// sources\n");
    sandbox.write(
        "pipelines/bad.yaml",
        &format!(
            "pipeline: bad\ntargets:\n  all: [first, bad]\nnodes:\n  first:\n    kind: command\n    run: touch \"$FRACFLOW_ROOT/started\"\n  bad:\n    {node}\n"
        ),
    );
    sandbox
}

/// `fracflow ARGS` refused the pipeline before anything started; its output.
fn refused(sandbox: &Sandbox, args: &[&str], case: &str) -> String {
    let output = sandbox.run(args);
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(2), "{case}: {args:?}:\n{shown}");
    assert!(
        !sandbox.path().join("started").exists(),
        "{case}: {args:?} started a node:\n{shown}"
    );
    let runs = std::fs::read_dir(sandbox.results("bad")).map_or(0, |entries| entries.count());
    assert_eq!(runs, 0, "{case}: {args:?} made a run directory:\n{shown}");
    shown
}

#[test]
fn every_bad_value_is_refused_before_anything_runs() {
    assert!(CASES.len() >= 40, "{} cases", CASES.len());
    let mut names: Vec<&str> = CASES.iter().map(|(name, _)| *name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), CASES.len(), "case names repeat");
    for (name, node) in CASES {
        let sandbox = project(node);
        let shown = refused(&sandbox, &["run", "all"], name);
        insta::assert_snapshot!(*name, shown);
    }
}

#[test]
fn plan_and_why_refuse_a_bad_config_the_same_way() {
    let sandbox = project("kind: aggregate\n    deps: [first]\n    stats: bogus");
    let run = refused(&sandbox, &["run", "all"], "run");
    let plan = refused(&sandbox, &["plan", "all"], "plan");
    let why = refused(&sandbox, &["why", "bad"], "why");
    assert_eq!(plan, run);
    assert_eq!(why, run);
}

#[test]
fn every_problem_of_every_node_is_reported_at_once() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "pipelines/bad.yaml",
        "pipeline: bad\ntargets:\n  all: [first, agg, fig, claims]\nnodes:\n  first:\n    kind: command\n    run: touch \"$FRACFLOW_ROOT/started\"\n    env: {\"A=B\": x}\n    success_codes: [256]\n  agg:\n    kind: aggregate\n    deps: [first]\n    stats: bogus\n  fig:\n    kind: plot\n    deps: [agg]\n    figure: f\n    style: pie\n    y: {column: tps}\n  claims:\n    kind: check\n    deps: [agg]\n    expect: {emulated: [{name: a, bellow: {column: p99, limit: 5}}]}\n",
    );
    let shown = refused(&sandbox, &["run", "all"], "all at once");
    insta::assert_snapshot!("all_at_once", shown);
}
