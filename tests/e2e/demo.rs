//! The README's demo pipeline: runs, then is all cache hits; a changed parameter re-runs only what uses it.

use crate::support::{Sandbox, text};

fn copy_demo(sandbox: &Sandbox) {
    let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    for file in [
        "pipelines/demo.yaml",
        "pipelines/scripts/time_tool.sh",
        "pipelines/scripts/tabulate.sh",
    ] {
        let text = std::fs::read_to_string(format!("{repo}/{file}")).expect("demo file");
        sandbox.write(file, &text);
    }
}

#[test]
fn demo_smoke_runs_then_is_a_no_op() {
    let sandbox = Sandbox::new();
    copy_demo(&sandbox);
    let first = sandbox.run(&["run", "table", "--smoke"]);
    assert!(first.status.success(), "{}", text(&first));
    assert!(
        text(&first).contains("4 built, 0 cached"),
        "{}",
        text(&first)
    );
    let csv = std::fs::read_to_string(
        sandbox
            .latest_smoke("demo")
            .join("nodes/table/throughput.csv"),
    )
    .expect("table output");
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(
        rows[0],
        "size_mib,tool,rounds,seconds,mib_per_s,host,source"
    );
    assert_eq!(rows.len(), 3, "one row per tool: {csv}");
    assert!(
        rows[1..]
            .iter()
            .all(|r| r.ends_with("measured on this host (no device)")),
        "{csv}"
    );

    let second = sandbox.run(&["run", "table", "--smoke"]);
    assert!(second.status.success(), "{}", text(&second));
    assert!(
        text(&second).contains("0 built, 4 cached"),
        "{}",
        text(&second)
    );

    // `rounds` is used by the measurements only: the data node stays cached.
    let changed = sandbox.run(&["run", "table", "--smoke", "--set", "rounds=2"]);
    assert!(changed.status.success(), "{}", text(&changed));
    assert!(
        text(&changed).contains("3 built, 1 cached"),
        "{}",
        text(&changed)
    );
}

#[test]
fn timeouts_are_transient_retried_then_reported_and_resume_continues_a_run_dir() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "pipelines/slow.yaml",
        "pipeline: slow\nnodes:\n  hang:\n    kind: command\n    timeout: 200ms\n    retries: 1\n    run: echo attempt >> \"$FRACFLOW_ROOT/attempts\"; sleep 5\n  ok:\n    kind: command\n    outputs: [o]\n    run: echo fine > \"$FRACFLOW_OUT/o\"\n",
    );
    let failed = sandbox.run(&["run", "slow", "--keep-going"]);
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed));
    assert!(
        text(&failed).contains("`hang` timed out after 200ms"),
        "{}",
        text(&failed)
    );
    let attempts = std::fs::read_to_string(sandbox.path().join("attempts")).expect("attempts");
    assert_eq!(attempts.lines().count(), 2, "first attempt + one retry");
    assert!(
        text(&failed).contains("1 built"),
        "--keep-going ran the independent node: {}",
        text(&failed)
    );

    let run_dir =
        std::fs::canonicalize(sandbox.results("slow").join("latest")).expect("latest run");
    sandbox.write("pipelines/slow.yaml", "pipeline: slow\nnodes:\n  ok:\n    kind: command\n    outputs: [o]\n    run: echo fine > \"$FRACFLOW_OUT/o\"\n");
    let resumed = sandbox.run(&[
        "run",
        "slow",
        "--resume",
        run_dir.to_str().expect("utf-8 path"),
    ]);
    assert!(resumed.status.success(), "{}", text(&resumed));
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("manifest.json")).expect("manifest"))
            .expect("json");
    assert_eq!(
        manifest["resumed"].as_array().map(Vec::len),
        Some(1),
        "{manifest}"
    );
    assert_eq!(manifest["status"], "succeeded");
    assert_eq!(manifest["nodes"]["ok"]["status"], "cached");

    let graph = sandbox.run(&["graph", "slow", "--format", "mermaid"]);
    assert_eq!(text(&graph), "flowchart LR\n  n0[\"ok (command)\"]\n");
}

#[test]
fn a_wide_fan_in_lists_its_dependencies_in_a_file() {
    // 300 dependencies: more than get one variable each; the run must not trip over the environment's size.
    let sandbox = Sandbox::new();
    let mut yaml =
        String::from("pipeline: wide\nnodes:\n  leaf:\n    kind: command\n    foreach: {i: [");
    yaml.push_str(
        &(0..300)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", "),
    );
    yaml.push_str("]}\n    outputs: [v]\n    run: echo {i} > \"$FRACFLOW_OUT/v\"\n");
    yaml.push_str("  sum:\n    kind: command\n    deps: [leaf]\n    outputs: [total]\n");
    yaml.push_str("    run: cut -f2 \"$FRACFLOW_DEPS\" | while read d; do cat \"$d/v\"; done | awk '{{s += $1}} END {{print s}}' > \"$FRACFLOW_OUT/total\"\n");
    sandbox.write("pipelines/wide.yaml", &yaml);
    let run = sandbox.run(&["run", "wide"]);
    assert!(run.status.success(), "{}", text(&run));
    let total = std::fs::read_to_string(sandbox.results("wide").join("latest/nodes/sum/total"))
        .expect("total");
    assert_eq!(total.trim(), (0..300).sum::<u32>().to_string());
}
