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
            .results("demo")
            .join("latest/nodes/table/throughput.csv"),
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
