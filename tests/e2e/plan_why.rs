//! `plan` and `why` after edits, as snapshots (durations and keys redacted: they vary run to run).

use crate::support::{Sandbox, text};

const PIPELINE: &str = r#"pipeline: pw
params: {scale: 2}
sweep: {x: [1, 2]}
targets:
  total: [sum]
nodes:
  gen:
    kind: command
    foreach: [x]
    inputs: [data/base.txt]
    outputs: [value]
    estimate: 3s
    run: echo $(( $(cat "$FRACFLOW_ROOT/data/base.txt") * {x} )) > "$FRACFLOW_OUT/value"
  sum:
    kind: command
    deps: [gen]
    outputs: [total]
    run: cat "$FRACFLOW_DEP_GEN_X_1/value" "$FRACFLOW_DEP_GEN_X_2/value" | awk '{{s += $1 * {scale}}} END {{print s}}' > "$FRACFLOW_OUT/total"
"#;

fn redact(output: &str) -> String {
    let rules = [
        (r"[0-9a-f]{64}", "[hash]"),
        (r"[0-9a-f]{16}", "[key]"),
        (
            r"\d+\.\d+s \(median of past runs\)",
            "[duration] (median of past runs)",
        ),
        (r"estimated time [^,\s]+", "estimated time [t]"),
    ];
    rules
        .iter()
        .fold(output.to_owned(), |text, (pattern, replacement)| {
            regex::Regex::new(pattern)
                .expect("regex")
                .replace_all(&text, *replacement)
                .into_owned()
        })
}

#[test]
fn plan_and_why_explain_what_changed() {
    let sandbox = Sandbox::new();
    sandbox.write("pipelines/pw.yaml", PIPELINE);
    sandbox.write("data/base.txt", "5\n");

    let fresh = sandbox.run(&["plan", "total"]);
    assert!(fresh.status.success(), "{}", text(&fresh));
    insta::assert_snapshot!("plan_fresh", redact(&text(&fresh)));
    assert!(
        !sandbox.path().join("results").exists(),
        "plan touches nothing"
    );

    let first = sandbox.run(&["run", "total"]);
    assert!(first.status.success(), "{}", text(&first));
    let total = std::fs::read_to_string(sandbox.results("pw").join("latest/nodes/sum/total"))
        .expect("total");
    assert_eq!(total.trim(), "30", "(5*1 + 5*2) * 2");

    let cached = sandbox.run(&["plan", "total"]);
    insta::assert_snapshot!("plan_cached", redact(&text(&cached)));

    sandbox.write("data/base.txt", "7\n");
    let edited = sandbox.run(&["plan", "total"]);
    insta::assert_snapshot!("plan_after_input_edit", redact(&text(&edited)));
    let why = sandbox.run(&["why", "gen[x=2]"]);
    assert!(why.status.success(), "{}", text(&why));
    insta::assert_snapshot!("why_after_input_edit", redact(&text(&why)));

    let set = sandbox.run(&["plan", "total", "--set", "scale=3", "--rerun", "gen*"]);
    insta::assert_snapshot!("plan_forced_and_param", redact(&text(&set)));
}

/// A node waiting on a wide sweep names a few of its upstream nodes and counts the rest; `--json` lists all.
#[test]
fn a_wide_upstream_is_named_in_part_and_counted() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "pipelines/wide.yaml",
        r#"pipeline: wide
sweep: {x: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]}
nodes:
  gen:
    kind: command
    foreach: [x]
    outputs: [value]
    run: echo {x} > "$FRACFLOW_OUT/value"
  sum:
    kind: command
    deps: [gen]
    outputs: [total]
    run: echo 0 > "$FRACFLOW_OUT/total"
"#,
    );
    let plan = sandbox.run(&["plan", "wide"]);
    assert!(plan.status.success(), "{}", text(&plan));
    let listing = text(&plan);
    let line = listing
        .lines()
        .find(|line| line.contains("sum [command]"))
        .unwrap_or_else(|| panic!("no line for sum in:\n{listing}"));
    assert!(line.ends_with("after upstream: gen[x=10], gen[x=11], gen[x=12], gen[x=1], gen[x=2], gen[x=3], gen[x=4], gen[x=5] and 4 more"), "{line}");

    let json = sandbox.run(&["plan", "wide", "--json"]);
    assert!(json.status.success(), "{}", text(&json));
    let listed = text(&json)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|item| item["node"] == "sum")
        .and_then(|item| item["upstream"].as_array().map(Vec::len));
    assert_eq!(listed, Some(12), "{}", text(&json));
}
