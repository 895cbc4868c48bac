//! The commands a researcher reaches for beside `run`: `runs`, `status`, `logs`, `clean`, `completions` and
//! `man`, on real runs of small command pipelines.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::support::{KillOnDrop, Sandbox, text};

const QUICK: &str = "pipeline: quick\nnodes:\n  gen:\n    kind: command\n    outputs: [x]\n    run: echo made-by-gen; echo 1 > \"$FRACFLOW_OUT/x\"\n  use:\n    kind: command\n    deps: [gen]\n    outputs: [y]\n    run: cat \"$FRACFLOW_DEP_GEN/x\" > \"$FRACFLOW_OUT/y\"\n";

fn quick_project() -> Sandbox {
    let sandbox = Sandbox::new();
    sandbox.write("pipelines/quick.yaml", QUICK);
    sandbox
}

/// A pipeline whose node `hold` runs until the file `release` appears in the project (bounded to 60 s), so a
/// test decides when the run ends instead of guessing how long it takes.
fn gated_project() -> Sandbox {
    let sandbox = Sandbox::new();
    let release = sandbox.path().join("release");
    sandbox.write(
        "pipelines/gated.yaml",
        &format!(
            "pipeline: gated\nnodes:\n  first:\n    kind: command\n    outputs: [x]\n    run: echo 1 > \"$FRACFLOW_OUT/x\"\n  hold:\n    kind: command\n    deps: [first]\n    run: i=0; while [ ! -e {} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done\n",
            release.display()
        ),
    );
    sandbox
}

fn run_ok(sandbox: &Sandbox, args: &[&str]) -> String {
    let output = sandbox.run(args);
    assert!(output.status.success(), "{args:?}: {}", text(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Polls `fracflow status` until `until` holds for its output, at most 30 s.
fn wait_for_status(sandbox: &Sandbox, until: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let shown = run_ok(sandbox, &["status"]);
        if until(&shown) {
            return shown;
        }
        assert!(Instant::now() < deadline, "status never showed it: {shown}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn start_gated(sandbox: &Sandbox, extra: &[&str]) -> KillOnDrop {
    let mut args = vec!["run", "gated"];
    args.extend_from_slice(extra);
    let child: Child = sandbox
        .command(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the gated run");
    KillOnDrop(child)
}

fn release_and_wait(sandbox: &Sandbox, mut run: KillOnDrop) {
    sandbox.write("release", "");
    let status = run.0.wait().expect("wait for the run");
    assert!(status.success(), "the gated run failed: {status:?}");
    let _ = std::fs::remove_file(sandbox.path().join("release"));
}

#[test]
fn runs_lists_every_run_newest_first_as_text_and_json() {
    let sandbox = quick_project();
    assert!(run_ok(&sandbox, &["runs"]).contains("no runs"));
    run_ok(&sandbox, &["run", "quick"]);
    run_ok(&sandbox, &["run", "quick", "--rerun", "use"]);

    let listed = run_ok(&sandbox, &["runs"]);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}");
    assert!(
        lines[0].contains("quick") && lines[0].contains("succeeded"),
        "{listed}"
    );
    assert!(
        lines[0].contains("built 1 cached 1 failed 0"),
        "newest first: {listed}"
    );
    assert!(lines[1].contains("built 2 cached 0 failed 0"), "{listed}");
    assert!(lines[0].contains("testbed emulated (emulated)"), "{listed}");

    let json: serde_json::Value =
        serde_json::from_str(&run_ok(&sandbox, &["runs", "quick", "--json"]))
            .expect("a JSON array");
    let runs = json.as_array().expect("an array");
    assert_eq!(runs.len(), 2, "{json}");
    assert_eq!(runs[0]["nodes"]["built"], 1, "{json}");
    assert_eq!(runs[1]["nodes"]["built"], 2, "{json}");
    assert_eq!(runs[0]["status"], "succeeded");
    assert_eq!(runs[0]["testbed_kind"], "emulated");
    assert!(runs[0]["seconds"].as_f64().is_some(), "{json}");
    assert!(
        runs[0]["run_id"].as_str() > runs[1]["run_id"].as_str(),
        "{json}"
    );

    let refused = sandbox.run(&["runs", "quik"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("no runs of pipeline `quik`"),
        "{}",
        text(&refused)
    );
    assert!(
        text(&refused).contains("did you mean `quick`?"),
        "{}",
        text(&refused)
    );
    let outside = sandbox.run(&["runs", "../etc"]);
    assert_eq!(outside.status.code(), Some(2), "{}", text(&outside));
    assert!(
        text(&outside).contains("not a pipeline name"),
        "{}",
        text(&outside)
    );
}

#[test]
fn status_shows_a_run_in_progress_from_another_process_and_nothing_otherwise() {
    let sandbox = gated_project();
    assert_eq!(run_ok(&sandbox, &["status"]).trim(), "nothing running");
    let json: serde_json::Value =
        serde_json::from_str(&run_ok(&sandbox, &["status", "--json"])).expect("JSON");
    assert_eq!(json, serde_json::json!([]));

    // A first run with no past durations: no estimate. `hold` starts on `first`'s staged output before that is
    // committed, so for a moment both show as running; on a loaded machine `status` can land in that moment.
    let run = start_gated(&sandbox, &[]);
    let shown = wait_for_status(&sandbox, |s| {
        s.contains("running hold for") && s.contains("1 of 2 nodes done")
    });
    assert!(shown.contains("gated run "), "{shown}");
    assert!(
        shown.contains("1 of 2 nodes done, 1 running, 0 left"),
        "{shown}"
    );
    assert!(shown.contains("eta: no estimate"), "{shown}");
    let listed = run_ok(&sandbox, &["runs"]);
    assert!(
        listed.contains(" running "),
        "runs shows it running too: {listed}"
    );
    release_and_wait(&sandbox, run);
    assert_eq!(run_ok(&sandbox, &["status"]).trim(), "nothing running");

    // Re-run with hold's past duration in the cache: an estimate.
    let run = start_gated(&sandbox, &["--rerun", "hold"]);
    wait_for_status(&sandbox, |s| s.contains("running hold for"));
    let json: serde_json::Value =
        serde_json::from_str(&run_ok(&sandbox, &["status", "--json"])).expect("JSON");
    assert_eq!(json[0]["pipeline"], "gated", "{json}");
    assert_eq!(json[0]["running"][0]["node"], "hold", "{json}");
    assert!(json[0]["eta_seconds"].as_f64().is_some(), "{json}");
    release_and_wait(&sandbox, run);
}

#[test]
fn logs_prints_a_nodes_log_and_names_what_exists_when_not_found() {
    let sandbox = quick_project();
    run_ok(&sandbox, &["run", "quick"]);
    // A second run of cache hits borrows the first run's logs/: followed.
    run_ok(&sandbox, &["run", "quick"]);
    assert!(run_ok(&sandbox, &["logs", "gen"]).contains("made-by-gen"));
    let latest = std::fs::read_link(sandbox.results("quick").join("latest")).expect("latest");
    let latest = latest.to_string_lossy().into_owned();
    assert!(run_ok(&sandbox, &["logs", "gen", "--run", &latest]).contains("made-by-gen"));
    assert!(run_ok(&sandbox, &["logs", "gen", "--run", "latest"]).contains("made-by-gen"));

    let typo = sandbox.run(&["logs", "gne"]);
    assert_eq!(typo.status.code(), Some(2), "{}", text(&typo));
    assert!(
        text(&typo).contains("error: no node `gne` in any of the 2 runs"),
        "{}",
        text(&typo)
    );
    assert!(
        text(&typo).contains("hint: did you mean `gen`?"),
        "{}",
        text(&typo)
    );
    let unknown = sandbox.run(&["logs", "zzzzzz", "--run", &latest]);
    assert!(
        text(&unknown).contains(&format!("no node `zzzzzz` in run {latest}")),
        "{}",
        text(&unknown)
    );
    assert!(
        text(&unknown).contains("nodes there: `gen` and `use`"),
        "{}",
        text(&unknown)
    );
    let no_run = sandbox.run(&["logs", "gen", "--run", "1999-01-01T000000"]);
    assert_eq!(no_run.status.code(), Some(2), "{}", text(&no_run));
    assert!(
        text(&no_run).contains("no run `1999-01-01T000000` under results/"),
        "{}",
        text(&no_run)
    );
    assert!(
        text(&no_run).contains(&latest),
        "names the runs that exist: {}",
        text(&no_run)
    );
}

fn run_dirs(results: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(results)
        .expect("results")
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn clean_keeps_latest_a_running_run_and_what_kept_runs_borrow() {
    let sandbox = gated_project();
    let results = sandbox.results("gated");
    // Three finished runs that each ran `hold` (no borrowed views), then one in progress.
    for _ in 0..3 {
        let run = start_gated(&sandbox, &["--rerun", "hold"]);
        release_and_wait(&sandbox, run);
    }
    let finished = run_dirs(&results);
    assert_eq!(finished.len(), 3, "{finished:?}");
    let running = start_gated(&sandbox, &["--rerun", "hold"]);
    wait_for_status(&sandbox, |s| s.contains("running hold for"));
    let all = run_dirs(&results);
    assert_eq!(all.len(), 4, "{all:?}");

    let refused = sandbox.run(&["clean"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("say which runs may go, with --keep N, --older-than D"),
        "{}",
        text(&refused)
    );
    let bad_age = sandbox.run(&["clean", "--older-than", "7days"]);
    assert_eq!(bad_age.status.code(), Some(2), "{}", text(&bad_age));
    assert!(
        text(&bad_age).contains("a whole number and a unit"),
        "{}",
        text(&bad_age)
    );

    let dry = run_ok(&sandbox, &["clean", "--keep", "0", "--dry-run"]);
    assert_eq!(run_dirs(&results), all, "--dry-run removes nothing: {dry}");
    assert!(dry.contains("would remove"), "{dry}");
    assert!(dry.contains("nothing was removed"), "{dry}");

    // The running run is the `latest` link's now; the link is what keeps it, and its lock too.
    let cleaned = run_ok(&sandbox, &["clean", "--keep", "0"]);
    let left = run_dirs(&results);
    assert_eq!(left, vec![all[3].clone()], "{cleaned}");
    assert!(
        cleaned.contains("the `latest` link points at it"),
        "{cleaned}"
    );
    assert!(cleaned.contains("removed 3 run(s), freed "), "{cleaned}");
    assert!(
        !cleaned.contains("freed 0 B"),
        "each run's own log and manifest are freed: {cleaned}"
    );
    release_and_wait(&sandbox, running);

    // A run of cache hits borrows the earlier run's nodes/ and logs/: keeping it keeps the lender.
    let quick = quick_project();
    run_ok(&quick, &["run", "quick"]);
    run_ok(&quick, &["run", "quick"]);
    let before = run_dirs(&quick.results("quick"));
    assert_eq!(before.len(), 2, "{before:?}");
    let fresh = run_ok(&quick, &["clean", "--older-than", "1h"]);
    assert_eq!(
        run_dirs(&quick.results("quick")),
        before,
        "runs written just now are younger: {fresh}"
    );
    assert!(fresh.contains("removed 0 run(s)"), "{fresh}");
    // A clean killed between its rename and its removal left a `.trash-*` folder: the next one finishes it.
    quick.write(
        "results/quick/.trash-2000-01-01T000000-1/logs/x.log",
        "left behind",
    );
    let finished = run_ok(&quick, &["clean", "--older-than", "1h"]);
    assert!(finished.contains("removed the leftover"), "{finished}");
    assert!(
        !quick
            .results("quick")
            .join(".trash-2000-01-01T000000-1")
            .exists()
    );
    let kept = run_ok(&quick, &["clean", "--keep", "1"]);
    assert_eq!(run_dirs(&quick.results("quick")), before, "{kept}");
    assert!(kept.contains("links its nodes/ into it"), "{kept}");
    assert!(
        run_ok(&quick, &["logs", "gen"]).contains("made-by-gen"),
        "the borrowed log is still there"
    );
}

#[test]
fn clean_never_removes_a_running_run_that_no_link_points_at() {
    let sandbox = gated_project();
    let running = start_gated(&sandbox, &[]);
    wait_for_status(&sandbox, |s| s.contains("running hold for"));
    // With its `latest` link gone, the run in progress is kept because it holds its testbed's lock.
    let results = sandbox.results("gated");
    std::fs::remove_file(results.join("latest")).expect("drop the link");
    let cleaned = run_ok(&sandbox, &["clean", "--keep", "0"]);
    assert!(cleaned.contains("it is running"), "{cleaned}");
    assert_eq!(run_dirs(&results).len(), 1, "{cleaned}");
    release_and_wait(&sandbox, running);
}

#[test]
fn completions_for_three_shells_and_the_man_pages() {
    let sandbox = Sandbox::new();
    let commands = [
        "run",
        "plan",
        "runs",
        "status",
        "logs",
        "clean",
        "completions",
        "man",
        "cache",
    ];
    for shell in ["bash", "zsh", "fish"] {
        let script = run_ok(&sandbox, &["completions", shell]);
        for command in commands {
            assert!(script.contains(command), "{shell} completes `{command}`");
        }
        let parser: &[&str] = match shell {
            "bash" => &["-n"],
            "zsh" => &["-n"],
            _ => &["--no-execute"],
        };
        let file = sandbox.path().join(format!("fracflow.{shell}"));
        std::fs::write(&file, &script).expect("write the script");
        match std::process::Command::new(shell)
            .args(parser)
            .arg(&file)
            .output()
        {
            Ok(parsed) => assert!(
                parsed.status.success(),
                "{shell} parses it: {}",
                text(&parsed)
            ),
            // Not installed: the names above are what can be checked.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                assert_ne!(shell, "bash", "bash is needed to check the bash script");
            }
            Err(e) => panic!("{shell}: {e}"),
        }
    }
    let refused = sandbox.run(&["completions", "powershell"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));

    let page = run_ok(&sandbox, &["man"]);
    assert!(page.contains(".TH fracflow"), "{page}");
    let out = sandbox.path().join("man");
    run_ok(
        &sandbox,
        &["man", "--out", out.to_str().expect("utf-8 path")],
    );
    for command in [
        "fracflow.1",
        "fracflow-runs.1",
        "fracflow-clean.1",
        "fracflow-status.1",
    ] {
        let page = std::fs::read_to_string(out.join(command)).expect(command);
        assert!(
            page.starts_with(".ie") || page.contains(".TH"),
            "{command}: {page}"
        );
    }
}

#[test]
fn a_killed_run_is_listed_interrupted_and_its_claims_are_counted() {
    let sandbox = gated_project();
    let mut run = start_gated(&sandbox, &[]);
    wait_for_status(&sandbox, |s| s.contains("running hold for"));
    run.0.kill().expect("SIGKILL the engine");
    run.0.wait().expect("reap it");
    let listed = run_ok(&sandbox, &["runs"]);
    assert!(
        listed.contains(" interrupted "),
        "no `finished`, lock free: {listed}"
    );
    assert_eq!(run_ok(&sandbox, &["status"]).trim(), "nothing running");

    // Claims are read from each `check` node's expectations.json, as the report reads them.
    let quick = quick_project();
    run_ok(&quick, &["run", "quick"]);
    let dir = quick.results("quick").join("latest");
    let manifest_path = dir.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).expect("manifest")).expect("JSON");
    manifest["nodes"]["use"]["kind"] = "check".into();
    std::fs::write(&manifest_path, manifest.to_string()).expect("rewrite the manifest");
    let verdict = |passed: bool| serde_json::json!({"name": "n", "claim": "c", "passed": passed, "measured": "m"});
    std::fs::write(
        dir.join("nodes/use/expectations.json"),
        serde_json::json!([verdict(true), verdict(false), verdict(true)]).to_string(),
    )
    .expect("write the verdicts");
    assert!(run_ok(&quick, &["runs"]).contains("claims 2/3 hold"));
    let json: serde_json::Value =
        serde_json::from_str(&run_ok(&quick, &["runs", "--json"])).expect("JSON");
    assert_eq!(
        json[0]["claims"],
        serde_json::json!({"held": 2, "failed": 1})
    );
}

#[test]
fn a_missing_log_and_a_man_directory_that_is_a_file_are_named() {
    let sandbox = quick_project();
    run_ok(&sandbox, &["run", "quick"]);
    let log = sandbox.results("quick").join("latest/logs/gen.log");
    std::fs::remove_file(&log).expect("remove the log");
    let missing = sandbox.run(&["logs", "gen"]);
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    let message = text(&missing);
    assert!(message.contains("error: node `gen` of run "), "{message}");
    assert!(
        message.contains("has no log at results/quick/"),
        "{message}"
    );
    assert!(
        message.contains("caused by: No such file or directory"),
        "{message}"
    );

    sandbox.write("notes", "a file");
    let refused = sandbox.run(&["man", "--out", "notes"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("error: cannot write the man pages into notes"),
        "{}",
        text(&refused)
    );
}
