//! SIGKILL at random instants, restart, and nothing completed is lost or redone.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::support::{Rng, Sandbox, text};

const NODES: usize = 50;
const KILLS: usize = 24;

/// 50 command nodes in five chains of ten; each appends its id to a side-effect file, then writes its output.
fn pipeline() -> String {
    let mut yaml = String::from("pipeline: kill\nnodes:\n");
    for k in 0..NODES {
        yaml.push_str(&format!(
            "  n{k:02}:\n    kind: command\n    outputs: [out]\n"
        ));
        if k >= 5 {
            yaml.push_str(&format!("    deps: [n{:02}]\n", k - 5));
        }
        yaml.push_str(&format!(
            "    run: echo \"$FRACFLOW_NODE\" >> \"$FRACFLOW_ROOT/side-effects.txt\" && sleep 0.0{} && echo {k} > \"$FRACFLOW_OUT/out\"\n",
            k % 10
        ));
    }
    yaml
}

#[derive(Debug)]
struct Seen {
    at_ms: u64,
    event: String,
    node: String,
    key: String,
}

fn all_events(sandbox: &Sandbox) -> Vec<Seen> {
    let mut events = Vec::new();
    for run in std::fs::read_dir(sandbox.results("kill"))
        .expect("results")
        .flatten()
    {
        let path = run.path().join("events.jsonl");
        if run.path().is_symlink() || !path.is_file() {
            continue;
        }
        for line in std::fs::read_to_string(&path).expect("events").lines() {
            // A SIGKILL may cut the last line short; a whole line is one write, so only the tail can be torn.
            let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            events.push(Seen {
                at_ms: value["at_ms"].as_u64().unwrap_or(0),
                event: value["event"].as_str().unwrap_or("").to_owned(),
                node: value["node"].as_str().unwrap_or("").to_owned(),
                key: value["key"].as_str().unwrap_or("").to_owned(),
            });
        }
    }
    events.sort_by_key(|e| e.at_ms);
    events
}

#[test]
fn sigkill_at_random_instants_loses_and_repeats_no_completed_node() {
    let sandbox = Sandbox::new();
    sandbox.write("pipelines/kill.yaml", &pipeline());
    let mut rng = Rng::from_env_or_time();
    for _ in 0..KILLS {
        let mut child = sandbox
            .command(&["run", "kill", "--jobs", "2"])
            .spawn()
            .expect("spawn");
        std::thread::sleep(Duration::from_millis(30 + rng.below(400)));
        let _ = child.kill();
        let _ = child.wait();
    }
    let last = sandbox.run(&["run", "kill", "--jobs", "2"]);
    assert!(last.status.success(), "final run failed:\n{}", text(&last));

    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(sandbox.results("kill").join("latest/manifest.json")).expect("manifest"),
    )
    .expect("manifest JSON");
    assert_eq!(manifest["status"], "succeeded");
    let nodes = manifest["nodes"].as_object().expect("nodes");
    assert_eq!(nodes.len(), NODES);
    for (id, record) in nodes {
        let status = record["status"].as_str().unwrap_or("");
        assert!(
            status == "built" || status == "cached",
            "{id} ended {status}"
        );
        let index: usize = id[1..].parse().expect("node number");
        let published = sandbox
            .results("kill")
            .join("latest/nodes")
            .join(id)
            .join("out");
        assert_eq!(
            std::fs::read_to_string(&published).expect("output").trim(),
            index.to_string()
        );
    }

    // Once a key has finished (or been found cached), no later process starts it again.
    let events = all_events(&sandbox);
    let mut completed_at: HashMap<String, u64> = HashMap::new();
    for seen in &events {
        if seen.event == "node_finished" || seen.event == "node_cached" {
            completed_at.entry(seen.key.clone()).or_insert(seen.at_ms);
        }
    }
    for seen in events.iter().filter(|e| e.event == "node_started") {
        if let Some(&done) = completed_at.get(&seen.key) {
            assert!(
                seen.at_ms <= done,
                "{} started again at {} after completing at {done}",
                seen.node,
                seen.at_ms
            );
        }
    }
    let side =
        std::fs::read_to_string(sandbox.path().join("side-effects.txt")).expect("side effects");
    let mut executions: BTreeMap<&str, usize> = BTreeMap::new();
    for line in side.lines() {
        *executions.entry(line).or_default() += 1;
    }
    assert_eq!(executions.len(), NODES, "every node ran at least once");

    let verify = sandbox.run(&["cache", "verify"]);
    assert!(verify.status.success(), "cache verify:\n{}", text(&verify));
    assert!(text(&verify).contains(" 0 corrupt"), "{}", text(&verify));
}
