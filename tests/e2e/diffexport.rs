//! `fracflow diff`, `export` and `verify` on a tiny pipeline whose points are per-second records a script writes
//! (so a latency shift of known size can be injected with one parameter), then aggregated and plotted as any
//! measurement is.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use crate::support::{Sandbox, text};

/// Two points (m = 1024, 2048), 30 seconds each with a ±5 % spread that is the same in every run (awk's
/// generator seeded with m); `shift_us` is added to every latency of the point `shifted_m`.
fn synth_project() -> Sandbox {
    let sandbox = Sandbox::new();
    sandbox.write(
        "pipelines/scripts/synth.sh",
        r#"m="$1"; out="$2"
shift_ns=0
if [ "$m" = "$SHIFTED_M" ]; then shift_ns=$((SHIFT_US * 1000)); fi
awk -v m="$m" -v shift="$shift_ns" 'BEGIN {
  srand(m);
  for (s = 0; s < 30; s++) {
    v = int((10000 + m) * (0.95 + 0.1 * rand())) + shift;
    printf "{\"second\":%d,\"member\":0,\"warmup\":false,\"count\":2000,\"p50_ns\":%d,\"p99_ns\":%d,\"min_ns\":%d,\"max_ns\":%d,\"read_gbps\":0.1,\"write_gbps\":0.2,\"threads\":[{\"thread\":0,\"count\":1000,\"sum_ns\":%d},{\"thread\":1,\"count\":1000,\"sum_ns\":%d}]}\n", s, v, int(v * 1.5), int(v / 2), v * 2, v * 1000, v * 1000
  }
}' > "$out/seconds.jsonl"
printf '{"point":{"m":%s},"labels":{},"source":{"testbed":"emulated","testbed_kind":"doubles","host":"test","target":"none","against":"synthetic seconds written by the test","client":"synth.sh"},"device":[],"adapted":[],"requests":60000,"cpu_saturated":false,"members":[]}\n' "$m" > "$out/summary.json"
"#,
    );
    sandbox.write(
        "pipelines/synth.yaml",
        r#"pipeline: synth
description: per-second latencies written by a script, with a shift of known size at one point
params:
  shift_us: 0
  shifted_m: 2048
sweep:
  m: [1024, 2048]
targets:
  fig: [fig]
nodes:
  gen:
    kind: command
    foreach: [m]
    inputs: [pipelines/scripts/synth.sh]
    outputs: [summary.json, seconds.jsonl]
    env: {SHIFT_US: "{shift_us}", SHIFTED_M: "{shifted_m}"}
    run: sh "$FRACFLOW_ROOT/pipelines/scripts/synth.sh" {m} "$FRACFLOW_OUT"
  aggregate:
    kind: aggregate
    deps: [gen]
    stats: seconds
    from_s: 2
    outputs: [summary.csv, summary.parquet]
  fig:
    kind: plot
    deps: [aggregate]
    figure: synth
    style: lines
    x: {column: m, label: "Request size (B)"}
    y: {column: median_us, label: "Latency (µs)"}
    outputs: [synth.svg, synth.png, synth.pdf]
"#,
    );
    sandbox
}

fn run_ok(sandbox: &Sandbox, args: &[&str]) -> String {
    let output = sandbox.run(args);
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(0), "fracflow {args:?}:\n{shown}");
    shown
}

/// The run ids of `pipeline`, oldest first.
fn run_ids(sandbox: &Sandbox, pipeline: &str) -> Vec<String> {
    let output = sandbox.run(&["runs", pipeline, "--json"]);
    let runs: serde_json::Value = serde_json::from_slice(&output.stdout).expect("runs --json");
    let mut ids: Vec<String> = runs
        .as_array()
        .expect("an array")
        .iter()
        .map(|r| r["run_id"].as_str().expect("run_id").to_owned())
        .collect();
    ids.reverse();
    ids
}

fn point<'a>(diff: &'a serde_json::Value, m: &str) -> &'a serde_json::Value {
    diff["points"]
        .as_array()
        .expect("points")
        .iter()
        .find(|p| p["labels"]["m"] == m)
        .unwrap_or_else(|| panic!("no point m={m} in {diff:#}"))
}

fn statistic<'a>(point: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    point["statistics"]
        .as_array()
        .expect("statistics")
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no statistic {name} in {point:#}"))
}

#[test]
fn diff_names_the_changed_parameter_and_judges_the_shift_and_the_unchanged_point() {
    let sandbox = synth_project();
    run_ok(&sandbox, &["run", "synth"]);
    run_ok(&sandbox, &["run", "synth", "--set", "shift_us=6"]);
    let ids = run_ids(&sandbox, "synth");
    let [a, b] = ids.as_slice() else {
        panic!("two runs expected: {ids:?}")
    };

    let shown = run_ok(&sandbox, &["diff", a, b]);
    assert!(shown.contains("--set shift_us: (none) → 6"), "{shown}");
    assert!(
        shown.contains("gen[*] (2 nodes) config.env.SHIFT_US: \"0\" → \"6\""),
        "the parameter, once for the swept group:\n{shown}"
    );
    assert!(
        shown.contains("node keys differ") && !shown.contains("ACROSS TESTBEDS"),
        "{shown}"
    );

    let output = sandbox.run(&["diff", a, b, "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let diff: serde_json::Value = serde_json::from_slice(&output.stdout).expect("diff --json");
    assert_eq!(diff["schema"], "fracflow.diff/1");
    assert_eq!(diff["across_testbeds"], false);

    let shifted = point(&diff, "2048");
    assert_eq!(shifted["verdict"], "regressed", "{shifted:#}");
    let median = statistic(shifted, "median_us");
    assert_eq!(median["verdict"], "regressed", "{median:#}");
    // The injected shift, relative to run A's median: what the interval must contain.
    let injected = 6.0 / median["a"].as_f64().expect("a") * 100.0;
    let interval = &median["interval"];
    let (low, high) = (
        interval["low_percent"].as_f64().expect("low"),
        interval["high_percent"].as_f64().expect("high"),
    );
    assert!(
        low <= injected && injected <= high && low > 2.0,
        "the interval [{low}, {high}] must contain the injected +{injected}% and lie above the noise threshold"
    );
    assert_eq!(interval["unit"], "seconds");
    assert_eq!(interval["units_a"], 28, "seconds from from_s = 2 on");

    let unchanged = point(&diff, "1024");
    assert_eq!(unchanged["verdict"], "no change", "{unchanged:#}");
    for name in ["mean_us", "median_us", "throughput_gbps"] {
        let s = statistic(unchanged, name);
        assert_eq!(s["verdict"], "no change", "{s:#}");
        let (low, high) = (
            s["interval"]["low_percent"].as_f64().expect("low"),
            s["interval"]["high_percent"].as_f64().expect("high"),
        );
        assert!(low <= 0.0 && 0.0 <= high, "{name}: [{low}, {high}]");
    }

    let page = sandbox
        .results("synth")
        .join(b)
        .join(format!("diff-{a}.html"));
    let html = std::fs::read_to_string(&page).expect("the diff page beside B's report");
    assert!(
        html.contains("regressed") && html.contains("config.env.SHIFT_US"),
        "{html}"
    );
    assert!(!html.contains("<script"), "no script in the page");
    assert!(
        !std::fs::read_dir(sandbox.results("synth").join(b))
            .expect("run dir")
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".part")),
        "no temporary left beside the page"
    );

    // The same measurements on another testbed: the diff says so at the top.
    run_ok(&sandbox, &["run", "synth", "--testbed", "other"]);
    let ids = run_ids(&sandbox, "synth");
    let shown = run_ok(&sandbox, &["diff", a, &ids[2]]);
    assert!(
        shown.contains("ACROSS TESTBEDS: A ran on emulated (emulated), B on other (emulated)"),
        "{shown}"
    );
    assert!(shown.contains("name: emulated → other"), "{shown}");

    let unknown = sandbox.run(&["diff", a, "no-such-run"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown));
    assert!(text(&unknown).contains("no run `no-such-run`"));
}

/// Every entry of a bundle: (path, bytes).
fn entries(bundle: &Path) -> Vec<(String, Vec<u8>)> {
    let file = std::fs::File::open(bundle).expect("bundle");
    let mut archive = tar::Archive::new(zstd::Decoder::new(file).expect("zstd"));
    let mut out = Vec::new();
    for entry in archive.entries().expect("tar") {
        let mut entry = entry.expect("entry");
        let path = entry.path().expect("path").to_string_lossy().into_owned();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).expect("read");
        out.push((path, bytes));
    }
    out
}

/// Writes `files` as a bundle at `path` (a tampered copy).
fn write_bundle(path: &Path, files: &[(String, Vec<u8>)]) {
    let file = std::fs::File::create(path).expect("create");
    let mut builder = tar::Builder::new(zstd::Encoder::new(file, 1).expect("zstd"));
    for (name, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        builder
            .append_data(&mut header, name, bytes.as_slice())
            .expect("append");
    }
    builder
        .into_inner()
        .expect("tar")
        .finish()
        .expect("zstd finish");
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `files` with `name`'s bytes changed by `edit`, and (when `relist`) SHA256SUMS updated to match.
fn tampered(
    files: &[(String, Vec<u8>)],
    name: &str,
    edit: impl Fn(&[u8]) -> Vec<u8>,
    relist: bool,
) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = files
        .iter()
        .map(|(n, b)| (n.clone(), if n == name { edit(b) } else { b.clone() }))
        .collect();
    assert!(
        files.iter().any(|(n, _)| n == name),
        "no {name} in the bundle"
    );
    if relist {
        let new_hash = sha256(&out.iter().find(|(n, _)| n == name).expect("edited").1);
        for (n, bytes) in &mut out {
            if n == "SHA256SUMS" {
                let text = String::from_utf8_lossy(bytes)
                    .lines()
                    .map(|line| match line.split_once("  ") {
                        Some((_, path)) if path == name => format!("{new_hash}  {path}\n"),
                        _ => format!("{line}\n"),
                    })
                    .collect::<String>();
                *bytes = text.into_bytes();
            }
        }
    }
    out
}

fn verify_fails_naming(sandbox: &Sandbox, bundle: &Path, named: &[&str]) {
    let output = sandbox.run(&["verify", bundle.to_str().expect("utf-8")]);
    let shown = text(&output);
    assert_eq!(output.status.code(), Some(1), "{shown}");
    for name in named {
        assert!(shown.contains(name), "`{name}` not named:\n{shown}");
    }
}

#[test]
fn export_and_verify_pass_untouched_and_fail_on_a_tampered_figure_or_table() {
    let sandbox = synth_project();
    run_ok(&sandbox, &["run", "synth"]);
    let bundle: PathBuf = sandbox.path().join("synth.tar.zst");
    let shown = run_ok(
        &sandbox,
        &[
            "export",
            "latest",
            "--out",
            bundle.to_str().expect("utf-8"),
            "--with-samples",
        ],
    );
    assert!(
        shown.contains("1 figure(s), raw samples included"),
        "{shown}"
    );
    let files = entries(&bundle);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    for path in &names {
        assert!(
            !path.starts_with('/') && !path.split('/').any(|c| c == ".."),
            "{path}"
        );
    }
    let gen_dir = fracflow_core::run::node_dir_name("gen[m=2048]");
    for wanted in [
        "SHA256SUMS".to_owned(),
        "manifest.json".to_owned(),
        "provenance.json".to_owned(),
        "commands.json".to_owned(),
        "figures.json".to_owned(),
        "report.html".to_owned(),
        "nodes/fig/synth.svg".to_owned(),
        "nodes/aggregate/summary.parquet".to_owned(),
        format!("nodes/{gen_dir}/seconds.jsonl"),
        format!("logs/{gen_dir}.log"),
    ] {
        assert!(
            names.contains(&wanted.as_str()),
            "{wanted} not in {names:?}"
        );
    }
    let provenance: serde_json::Value = serde_json::from_slice(
        &files
            .iter()
            .find(|(n, _)| n == "provenance.json")
            .expect("provenance")
            .1,
    )
    .expect("provenance.json");
    assert_eq!(provenance["testbed_profile"]["kind"], "emulated");
    assert_eq!(provenance["raw_samples"], true);

    let lean = sandbox.path().join("lean.tar.zst");
    run_ok(
        &sandbox,
        &["export", "latest", "--out", lean.to_str().expect("utf-8")],
    );
    let lean_names: Vec<String> = entries(&lean).into_iter().map(|(n, _)| n).collect();
    assert!(
        !lean_names.iter().any(|n| n.ends_with("seconds.jsonl"))
            && lean_names.contains(&format!("nodes/{gen_dir}/summary.json")),
        "without --with-samples: the summaries, not the raw samples: {lean_names:?}"
    );

    let shown = run_ok(&sandbox, &["verify", bundle.to_str().expect("utf-8")]);
    assert!(
        shown.contains("1 figure(s) re-drawn from the bundle's tables are identical"),
        "{shown}"
    );

    let bad = sandbox.path().join("bad.tar.zst");
    let flip_svg = |bytes: &[u8]| {
        String::from_utf8_lossy(bytes)
            .replacen("Latency", "Lateness", 1)
            .into_bytes()
    };
    write_bundle(
        &bad,
        &tampered(&files, "nodes/fig/synth.svg", flip_svg, false),
    );
    verify_fails_naming(&sandbox, &bad, &["nodes/fig/synth.svg: its sha256"]);

    // Listed anew in SHA256SUMS, the changed figure still differs from the one its tables give.
    write_bundle(
        &bad,
        &tampered(&files, "nodes/fig/synth.svg", flip_svg, true),
    );
    verify_fails_naming(
        &sandbox,
        &bad,
        &["nodes/fig/synth.svg: differs from the figure re-drawn"],
    );

    let bump_table = |bytes: &[u8]| {
        let mut bytes = bytes.to_vec();
        let last = bytes.len() / 2;
        bytes[last] ^= 1;
        bytes
    };
    write_bundle(
        &bad,
        &tampered(&files, "nodes/aggregate/summary.csv", bump_table, false),
    );
    verify_fails_naming(&sandbox, &bad, &["nodes/aggregate/summary.csv: its sha256"]);
    write_bundle(
        &bad,
        &tampered(&files, "nodes/aggregate/summary.parquet", bump_table, false),
    );
    verify_fails_naming(&sandbox, &bad, &["nodes/aggregate/summary.parquet"]);

    // An unlisted extra file, and a listed file removed.
    let mut extra = files.clone();
    extra.push(("nodes/fig/extra.txt".to_owned(), b"x".to_vec()));
    write_bundle(&bad, &extra);
    verify_fails_naming(
        &sandbox,
        &bad,
        &["nodes/fig/extra.txt: in the bundle but not listed"],
    );
    let missing: Vec<(String, Vec<u8>)> = files
        .iter()
        .filter(|(n, _)| n != "report.html")
        .cloned()
        .collect();
    write_bundle(&bad, &missing);
    verify_fails_naming(
        &sandbox,
        &bad,
        &["report.html: listed in SHA256SUMS but not in the bundle"],
    );
}

#[test]
fn verify_refuses_links_and_paths_outside_the_bundle() {
    let sandbox = Sandbox::new();
    let bad = sandbox.path().join("evil.tar.zst");
    let file = std::fs::File::create(&bad).expect("create");
    let mut builder = tar::Builder::new(zstd::Encoder::new(file, 1).expect("zstd"));
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Symlink);
    header.set_size(0);
    builder
        .append_link(&mut header, "nodes/fig/synth.svg", "/etc/passwd")
        .expect("link");
    builder.into_inner().expect("tar").finish().expect("zstd");
    verify_fails_naming(&sandbox, &bad, &["nodes/fig/synth.svg", "no links"]);

    // A name written into the header by hand, since the tar crate refuses to write one with `..`.
    let file = std::fs::File::create(&bad).expect("create");
    let mut builder = tar::Builder::new(zstd::Encoder::new(file, 1).expect("zstd"));
    for name in ["../outside", "/tmp/absolute"] {
        let mut header = tar::Header::new_gnu();
        let raw = &mut header.as_gnu_mut().expect("gnu").name;
        raw[..name.len()].copy_from_slice(name.as_bytes());
        header.set_size(1);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append(&header, &b"x"[..]).expect("append");
    }
    builder.into_inner().expect("tar").finish().expect("zstd");
    verify_fails_naming(&sandbox, &bad, &["`../outside`: not a relative path"]);
    assert!(
        !sandbox
            .path()
            .parent()
            .expect("parent")
            .join("outside")
            .exists()
    );
}

/// A run that repeated another exactly writes its own fields and links its manifest to that run's instead of
/// listing its nodes; every command that reads runs sees it whole: `runs`, `logs`, `diff`, `export` and
/// `verify`, `plot`, and its report.
#[test]
fn a_repeat_reads_whole_in_runs_logs_diff_export_verify_plot_and_its_report() {
    let sandbox = synth_project();
    run_ok(&sandbox, &["run", "synth"]);
    let shown = run_ok(&sandbox, &["run", "synth"]);
    assert!(shown.contains("0 built, 4 cached"), "{shown}");
    let ids = run_ids(&sandbox, "synth");
    let [first, repeat] = ids.as_slice() else {
        panic!("two runs expected: {ids:?}")
    };
    let dir = sandbox.path().join("results/synth").join(repeat);
    // Its own fields, and a link to the manifest of the run it repeated.
    let head: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("repeat.json")).expect("repeat.json"))
            .expect("repeat.json is JSON");
    assert_eq!(head["repeats"], first.as_str(), "{head:#}");
    assert_eq!(head["run_id"], repeat.as_str(), "{head:#}");
    assert_eq!(head["nodes"], serde_json::json!({}), "{head:#}");
    assert_eq!(
        std::fs::read_link(dir.join("manifest.json")).expect("a link"),
        Path::new("..").join(first).join("manifest.json")
    );
    let journal = std::fs::read_to_string(dir.join("events.jsonl")).expect("events");
    assert!(
        journal.contains("\"event\":\"run_repeated\"") && !journal.contains("node_cached"),
        "{journal}"
    );

    let runs: serde_json::Value =
        serde_json::from_slice(&sandbox.run(&["runs", "synth", "--json"]).stdout).expect("runs");
    let listed = runs
        .as_array()
        .expect("an array")
        .iter()
        .find(|r| r["run_id"] == repeat.as_str())
        .expect("the repeat is listed");
    assert_eq!(
        listed["nodes"],
        serde_json::json!({"built": 0, "cached": 4, "failed": 0}),
        "{listed:#}"
    );
    assert_eq!(listed["status"], "succeeded", "{listed:#}");

    // The log is found through the repeat's `logs/`, which is the first run's.
    run_ok(&sandbox, &["logs", "gen[m=1024]", "--run", repeat]);

    let output = sandbox.run(&["diff", first, repeat, "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let diff: serde_json::Value = serde_json::from_slice(&output.stdout).expect("diff --json");
    assert_eq!(point(&diff, "2048")["verdict"], "no change", "{diff:#}");

    let bundle = sandbox.path().join("repeat.tar.zst");
    run_ok(
        &sandbox,
        &["export", repeat, "--out", bundle.to_str().expect("utf-8")],
    );
    let files = entries(&bundle);
    let manifest: serde_json::Value = serde_json::from_slice(
        &files
            .iter()
            .find(|(n, _)| n == "manifest.json")
            .expect("the bundle holds a manifest")
            .1,
    )
    .expect("bundle manifest");
    assert_eq!(manifest["nodes"]["fig"]["status"], "cached", "{manifest:#}");
    assert!(
        manifest["params"]["gen[m=1024]"]["config"].is_object(),
        "{manifest:#}"
    );
    for wanted in ["nodes/fig/synth.svg", "nodes/aggregate/summary.csv"] {
        assert!(
            files.iter().any(|(n, _)| n == wanted),
            "{wanted} not bundled"
        );
    }
    run_ok(&sandbox, &["verify", bundle.to_str().expect("utf-8")]);

    let redrawn = run_ok(&sandbox, &["plot", "synth"]);
    assert!(redrawn.contains(repeat.as_str()), "{redrawn}");

    let report = std::fs::read_to_string(dir.join("report.html")).expect("report");
    assert!(
        report.contains("synth.svg") && report.contains(&format!("../{first}/report.html")),
        "the repeat's report shows the figure and names the run it repeated"
    );
}
