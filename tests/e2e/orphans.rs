//! No orphans: a SIGKILLed engine takes every process its nodes started with it, whatever they forked (a
//! compiler driver's own children, a pipeline, a process in a session of its own), and the supervisor between
//! them passes stop signals on and reports the command's own ending.

use std::time::{Duration, Instant};

use crate::support::{KillOnDrop, Sandbox, frac_project, text};

/// How long a test waits for processes to appear or to be gone; a bound, not a pause.
const PATIENCE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(20);

/// A marker unique to this test process and `what`, put into the engine's environment, which every process it
/// starts inherits; `/proc/PID/environ` then tells the run's processes from everyone else's.
fn marker(what: &str) -> String {
    format!("FRACFLOW_ORPHAN_TEST={what}-{}", std::process::id())
}

/// Live processes (not zombies, whose environment reads empty) whose environment holds `marker`, with their
/// command lines.
fn marked_processes(marker: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ
            .split(|&b| b == 0)
            .any(|var| var == marker.as_bytes())
        {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            found.push((pid, cmdline.trim().to_owned()));
        }
    }
    found
}

/// Waits until `ready` holds for the marked processes, or fails after [`PATIENCE`].
fn wait_for(marker: &str, what: &str, ready: impl Fn(&[(u32, String)]) -> bool) {
    let start = Instant::now();
    loop {
        let processes = marked_processes(marker);
        if ready(&processes) {
            return;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "{what} within {PATIENCE:?}; marked processes: {processes:#?}"
        );
        std::thread::sleep(POLL);
    }
}

fn assert_none_survives(marker: &str) {
    wait_for(
        marker,
        "every process of the killed run should be gone",
        |p| p.is_empty(),
    );
}

#[test]
fn a_killed_engine_leaves_nothing_a_command_forked_alive() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "pipelines/forks.yaml",
        "pipeline: forks\nnodes:\n  forks:\n    kind: command\n    outputs: [a]\n    run: >-\n      setsid sleep 300 & (sleep 301 | cat) & sh -c 'sleep 303; true' & sleep 302\n",
    );
    let marker = marker("forks");
    let (name, value) = marker.split_once('=').expect("marker");
    let engine = KillOnDrop(
        sandbox
            .command(&["run", "forks"])
            .env(name, value)
            .spawn()
            .expect("spawn"),
    );
    wait_for(&marker, "the command's processes should start", |p| {
        ["sleep 300", "sleep 301", "sleep 302", "sleep 303"]
            .iter()
            .all(|want| p.iter().any(|(_, cmdline)| cmdline == want))
    });
    drop(engine); // SIGKILL
    assert_none_survives(&marker);
}

#[test]
fn a_killed_engine_leaves_no_compiler_of_an_hls_build_alive() {
    let sandbox = frac_project();
    let marker = marker("hls");
    let (name, value) = marker.split_once('=').expect("marker");
    let engine = KillOnDrop(
        sandbox
            .command(&["run", "bitstreams"])
            .env(name, value)
            .spawn()
            .expect("spawn"),
    );
    // The driver's own child (cc1plus, or as/ld later on) is what a PDEATHSIG on the direct child missed.
    wait_for(&marker, "an hls compile should start", |p| {
        p.iter().any(|(_, cmdline)| {
            cmdline.contains("cc1plus") || cmdline.starts_with("as ") || cmdline.contains("/ld")
        })
    });
    drop(engine); // SIGKILL
    assert_none_survives(&marker);
}

#[test]
fn stop_signals_reach_the_command_and_what_it_left_behind_is_killed() {
    let sandbox = Sandbox::new();
    // The command answers SIGINT (the engine's first stop step) by writing a file and exiting, leaving a
    // background sleep behind in a session of its own.
    sandbox.write(
        "pipelines/stop.yaml",
        "pipeline: stop\nnodes:\n  stop:\n    kind: command\n    outputs: [a]\n    run: >-\n      trap 'echo got-int > \"$FRACFLOW_ROOT/int\"; exit 3' INT;\n      setsid sleep 304 & sleep 305 & wait\n",
    );
    let marker = marker("stop");
    let (name, value) = marker.split_once('=').expect("marker");
    let mut engine = KillOnDrop(
        sandbox
            .command(&["run", "stop"])
            .env(name, value)
            .spawn()
            .expect("spawn"),
    );
    wait_for(&marker, "the command's sleeps should start", |p| {
        ["sleep 304", "sleep 305"]
            .iter()
            .all(|want| p.iter().any(|(_, cmdline)| cmdline == want))
    });
    // SAFETY: kill only sends SIGTERM to the engine this test started.
    unsafe {
        libc::kill(engine.0.id() as libc::pid_t, libc::SIGTERM);
    }
    let status = engine.0.wait().expect("engine");
    assert_eq!(status.code(), Some(130), "interrupted");
    assert_eq!(
        std::fs::read_to_string(sandbox.path().join("int"))
            .ok()
            .as_deref(),
        Some("got-int\n"),
        "the command got the engine's SIGINT"
    );
    assert_none_survives(&marker);
}

#[test]
fn a_command_killed_by_a_signal_is_reported_as_killed_by_that_signal() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "pipelines/sig.yaml",
        "pipeline: sig\nnodes:\n  term:\n    kind: command\n    outputs: [a]\n    run: kill -TERM $$\n  seven:\n    kind: command\n    outputs: [a]\n    run: exit 7\n",
    );
    let output = sandbox.run(&["run", "sig", "--keep-going"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let shown = text(&output);
    assert!(shown.contains("`term` was killed by signal 15"), "{shown}");
    assert!(shown.contains("`seven` exited with code 7"), "{shown}");
}

/// The command a node runs is started under a supervisor forked by the spawner, the small `fracflow-exec`
/// built beside `fracflow`, and by `fracflow __spawner` when the binary stands alone (as after `cargo run`,
/// which builds only `fracflow`).
#[test]
fn commands_start_through_the_small_spawner_or_the_commands_own() {
    let pipeline = "pipeline: parent\nnodes:\n  who:\n    kind: command\n    outputs: [o]\n    \
                    run: 'tr \"\\000\" \" \" < /proc/$PPID/cmdline > \"$FRACFLOW_OUT/o\"'\n";
    let beside = Sandbox::new();
    beside.write("pipelines/parent.yaml", pipeline);
    let output = beside.run(&["run", "parent"]);
    assert!(output.status.success(), "{}", text(&output));
    let parent = std::fs::read_to_string(beside.results("parent").join("latest/nodes/who/o"))
        .expect("the node's output");
    assert!(
        parent.contains("fracflow-exec __spawner"),
        "started by {parent:?}"
    );

    // A hard link of the binary alone in a folder of its own: it finds no `fracflow-exec` beside itself.
    let alone = Sandbox::new();
    alone.write("pipelines/parent.yaml", pipeline);
    let folder = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let binary = folder.path().join("fracflow");
    std::fs::hard_link(env!("CARGO_BIN_EXE_fracflow"), &binary).expect("hard link");
    let command = std::process::Command::new(&binary)
        .args(["run", "parent"])
        .current_dir(alone.path())
        .env("FRACFLOW_ROOT", alone.path())
        .env("FRACFLOW_LOCK_DIR", alone.path().join("locks"))
        .env_remove("FRACFLOW_CACHE")
        .output()
        .expect("spawn the lone fracflow");
    assert!(command.status.success(), "{}", text(&command));
    let parent = std::fs::read_to_string(alone.results("parent").join("latest/nodes/who/o"))
        .expect("the node's output");
    assert!(
        parent.contains("fracflow __spawner") && !parent.contains("fracflow-exec"),
        "started by {parent:?}"
    );
}

/// The spawner keeps a supervisor forked ahead of the engine's next question for one (a standby), and a
/// standby that died is replaced by a fork at the question. The first node waits for the standby forked after
/// its own supervisor was handed over (a child of the spawner that is not its parent), kills it and waits until
/// it is dead (a zombie or reaped: a SIGKILL is delivered asynchronously, and a standby still alive would be
/// handed over); the second still runs, under the first node's supervisor once it is free or under a new one.
#[test]
fn a_standby_supervisor_waits_for_the_next_command_and_a_dead_one_is_replaced() {
    let sandbox = Sandbox::new();
    // A bounded wait (10 s) for the standby; `stat`'s fourth field is the parent's pid (`{{ }}`: literal braces
    // in a template).
    let find_and_kill = r#"spawner=$(cut -d' ' -f4 /proc/$PPID/stat); i=0; standby=; while [ -z "$standby" ] && [ $i -lt 500 ]; do standby=$(awk -v p=$spawner -v me=$PPID '$4 == p && $1 != me {{ print $1 }}' /proc/[0-9]*/stat 2>/dev/null); i=$((i + 1)); [ -n "$standby" ] || sleep 0.02; done; [ -n "$standby" ] && grep -q __spawner /proc/$standby/cmdline && kill -9 $standby && i=0 && until [ $i -ge 500 ] || [ "$(cut -d' ' -f3 /proc/$standby/stat 2>/dev/null || echo Z)" = Z ]; do i=$((i + 1)); sleep 0.02; done && echo "$standby" > "$FRACFLOW_OUT/o""#;
    sandbox.write(
        "pipelines/standby.yaml",
        &format!(
            "pipeline: standby\nnodes:\n  first:\n    kind: command\n    outputs: [o]\n    run: '{}'\n  \
             second:\n    kind: command\n    deps: [first]\n    outputs: [o]\n    run: 'echo ran > \"$FRACFLOW_OUT/o\"'\n",
            find_and_kill.replace('\'', "''")
        ),
    );
    let output = sandbox.run(&["run", "standby", "--jobs", "1"]);
    assert!(output.status.success(), "{}", text(&output));
    let nodes = sandbox.results("standby").join("latest/nodes");
    let killed = std::fs::read_to_string(nodes.join("first/o")).expect("the first node's output");
    assert!(killed.trim().parse::<u32>().is_ok(), "{killed:?}");
    let second = std::fs::read_to_string(nodes.join("second/o")).expect("the second node's output");
    assert_eq!(second, "ran\n");
}

/// The start of pipeline `name` with `nodes` that run at once, so each under a supervisor of its own: each
/// writes its supervisor's pid (`$PPID`) as its output `o`, then waits (at most 10 s) until all have started.
fn at_once(name: &str, nodes: &[&str]) -> String {
    let all = nodes.len();
    let mut yaml = format!("pipeline: {name}\nnodes:\n");
    for me in nodes {
        let run = format!(
            r#"echo $PPID > "$FRACFLOW_OUT/o"; : > "$FRACFLOW_ROOT/{me}.started"; i=0; until [ "$(ls "$FRACFLOW_ROOT" | grep -c '\.started$')" -ge {all} ] || [ $i -ge 500 ]; do i=$((i + 1)); sleep 0.02; done"#
        );
        yaml.push_str(&format!(
            "  {me}:\n    kind: command\n    outputs: [o]\n    run: '{}'\n",
            run.replace('\'', "''")
        ));
    }
    yaml
}

/// The engine keeps the supervisors it let go of; one that died while it waited for a command is dropped and
/// the command goes to another. `p` and `q` run at once (each waits, at most 10 s, until the other started), so
/// under two supervisors; `killer` kills the one of them it does not run under and waits until it is dead; the
/// two nodes after it still run.
#[test]
fn a_free_supervisor_that_died_is_passed_over() {
    let sandbox = Sandbox::new();
    let killer = r#"for s in $(cat "$FRACFLOW_DEP_P/o" "$FRACFLOW_DEP_Q/o"); do [ "$s" != "$PPID" ] && victim=$s; done; [ -n "$victim" ] && kill -9 $victim && i=0 && until [ $i -ge 500 ] || [ "$(cut -d' ' -f3 /proc/$victim/stat 2>/dev/null || echo Z)" = Z ]; do i=$((i + 1)); sleep 0.02; done && echo $victim > "$FRACFLOW_OUT/o""#;
    sandbox.write(
        "pipelines/passover.yaml",
        &format!(
            "{}  killer:\n    kind: command\n    deps: [p, q]\n    outputs: [o]\n    run: '{}'\n  \
             after:\n    kind: command\n    deps: [killer]\n    outputs: [o]\n    run: 'echo ran > \"$FRACFLOW_OUT/o\"'\n  \
             last:\n    kind: command\n    deps: [after]\n    outputs: [o]\n    run: 'echo ran > \"$FRACFLOW_OUT/o\"'\n",
            at_once("passover", &["p", "q"]),
            killer.replace('\'', "''")
        ),
    );
    let output = sandbox.run(&["run", "passover", "--jobs", "2"]);
    assert!(output.status.success(), "{}", text(&output));
    let nodes = sandbox.results("passover").join("latest/nodes");
    let read = |node: &str| std::fs::read_to_string(nodes.join(node).join("o")).expect("an output");
    let supervisors = [read("p"), read("q")];
    assert_ne!(
        supervisors[0], supervisors[1],
        "p and q under one supervisor"
    );
    let victim = read("killer");
    assert!(
        supervisors.contains(&victim),
        "{victim:?} is not one of {supervisors:?}"
    );
    assert_eq!(read("after"), "ran\n");
    assert_eq!(read("last"), "ran\n");
}

/// A free supervisor dies with its spawner. Five nodes run at once (each waits, at most 10 s, until all
/// started), so five supervisors are free after them; `killer` (alone: it takes all five cores) kills the
/// spawner, and with it its own command. `after`, alone too and so after `killer`, still runs: on a new
/// spawner's supervisor, after the engine has passed over the four free ones, which died with their spawner
/// (more than a command's offers to new supervisors).
#[test]
fn a_free_supervisor_dies_with_its_spawner_and_the_next_command_runs() {
    let sandbox = Sandbox::new();
    let killer = r#"spawner=$(cut -d' ' -f4 /proc/$PPID/stat); grep -q __spawner /proc/$spawner/cmdline && kill -9 $spawner; sleep 10"#;
    sandbox.write(
        "pipelines/spawnerdeath.yaml",
        &format!(
            "{}  killer:\n    kind: command\n    deps: [s0, s1, s2, s3, s4]\n    resources: [cores:5]\n    outputs: [o]\n    run: '{}'\n  \
             after:\n    kind: command\n    deps: [s0, s1, s2, s3, s4]\n    resources: [cores:5]\n    outputs: [o]\n    run: 'echo ran > \"$FRACFLOW_OUT/o\"'\n",
            at_once("spawnerdeath", &["s0", "s1", "s2", "s3", "s4"]),
            killer.replace('\'', "''")
        ),
    );
    let output = sandbox.run(&["run", "spawnerdeath", "--jobs", "5", "--keep-going"]);
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(1), "{shown}");
    assert!(shown.contains("`killer` was killed by signal 9"), "{shown}");
    let nodes = sandbox.results("spawnerdeath").join("latest/nodes");
    let read = |node: &str| std::fs::read_to_string(nodes.join(node).join("o"));
    let supervisors: std::collections::BTreeSet<_> = ["s0", "s1", "s2", "s3", "s4"]
        .iter()
        .filter_map(|node| read(node).ok())
        .collect();
    assert_eq!(
        supervisors.len(),
        5,
        "not five supervisors: {supervisors:?}"
    );
    assert_eq!(read("after").ok().as_deref(), Some("ran\n"), "{shown}");
}

/// A supervisor serves one command after another: once the engine has let go of a command, its supervisor
/// takes the next instead of a fork per command. Six nodes in a chain, one at a time, each writing its
/// supervisor's pid: fewer supervisors than nodes, and every node's own output.
#[test]
fn a_supervisor_takes_the_next_command_once_the_last_is_done() {
    let sandbox = Sandbox::new();
    let mut pipeline = String::from("pipeline: reuse\nnodes:\n");
    for i in 0..6 {
        pipeline.push_str(&format!(
            "  n{i}:\n    kind: command\n    outputs: [o]\n    run: 'echo {i} $PPID > \"$FRACFLOW_OUT/o\"'\n"
        ));
        if i > 0 {
            pipeline.push_str(&format!("    deps: [n{}]\n", i - 1));
        }
    }
    sandbox.write("pipelines/reuse.yaml", &pipeline);
    let output = sandbox.run(&["run", "reuse", "--jobs", "1"]);
    assert!(output.status.success(), "{}", text(&output));
    let nodes = sandbox.results("reuse").join("latest/nodes");
    let mut supervisors = std::collections::BTreeSet::new();
    for i in 0..6 {
        let written =
            std::fs::read_to_string(nodes.join(format!("n{i}/o"))).expect("a node's output");
        let (node, pid) = written.trim().split_once(' ').expect("`node pid`");
        assert_eq!(node, i.to_string());
        supervisors.insert(pid.to_owned());
    }
    assert!(
        supervisors.len() < 6,
        "a supervisor per command: {supervisors:?}"
    );
}

/// A supervisor whose command could not be started says why in the node's log and then serves the next
/// command: four nodes after it, one at a time, each run to its end with its own output.
#[test]
fn a_supervisor_serves_the_next_command_after_one_that_could_not_start() {
    let sandbox = Sandbox::new();
    let mut pipeline = String::from(
        "pipeline: unstartable\nnodes:\n  missing:\n    kind: command\n    outputs: [o]\n    run: [/nonexistent/fracflow-test-program]\n",
    );
    for i in 0..4 {
        pipeline.push_str(&format!(
            "  n{i}:\n    kind: command\n    outputs: [o]\n    run: 'echo {i} > \"$FRACFLOW_OUT/o\"'\n"
        ));
    }
    sandbox.write("pipelines/unstartable.yaml", &pipeline);
    let output = sandbox.run(&["run", "unstartable", "--jobs", "1", "--keep-going"]);
    assert!(!output.status.success(), "{}", text(&output));
    let latest = sandbox.results("unstartable").join("latest");
    let log = std::fs::read_to_string(latest.join("logs/missing.log")).expect("the node's log");
    assert!(
        log.contains("cannot run /nonexistent/fracflow-test-program"),
        "{log}"
    );
    for i in 0..4 {
        let written = std::fs::read_to_string(latest.join(format!("nodes/n{i}/o")))
            .unwrap_or_else(|e| panic!("n{i}'s output: {e}\n{}", text(&output)));
        assert_eq!(written.trim(), i.to_string());
    }
}
