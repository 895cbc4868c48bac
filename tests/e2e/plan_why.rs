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
