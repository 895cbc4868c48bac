//! RPCNIC's figures (pipelines/rpcnic/) on the `rpcnic-doubles` testbed: the tool doubles of tests/doubles/rpcnic/
//! first on PATH stand in for Vivado, the host (ssh, sudo, reboot, insmod, dma-ctl, dmesg) and the build (cmake,
//! make), and record every call. The tests check the commands and their order per bitstream, the summary tables
//! against the doubles' formulas, the figures and their "tool doubles" footer, what a re-run and a changed bench
//! set run again (the device steps are lazy effects: they run only before runs that have to), and that a missing
//! `speed:` and a hung program fail one node each.

use std::path::PathBuf;
use std::process::Output;

use fracflow_record::{Cell, NodeStatus, RunManifest, Table};

use crate::support::{Sandbox, copy_tree, repo, text};

/// The doubles' fake FPGA enumerates on this bus; the rpcnic-doubles profile sets `pci_bus: d8` to match, so a
/// bus left at the artifact's hard-coded 1a anywhere fails the run.
const FAKE_BUS: &str = "d8";

/// A project with the RPCNIC pipelines, the programming script, the doubles' testbed profile and the fake
/// RPCNIC tree, plus the doubles' scratch lab (the fake host, FPGA and the record of calls).
struct Lab {
    sandbox: Sandbox,
}

impl Lab {
    fn new() -> Lab {
        let sandbox = Sandbox::new();
        for folder in ["pipelines/rpcnic", "hw/rpcnic", "tests/doubles/rpcnic/tree"] {
            copy_tree(&repo().join(folder), &sandbox.path().join(folder));
        }
        let profile = "hw/testbeds/rpcnic-doubles.yaml";
        std::fs::copy(repo().join(profile), sandbox.path().join(profile)).expect(profile);
        std::fs::create_dir_all(sandbox.path().join("lab")).expect("lab");
        Lab { sandbox }
    }

    fn lab(&self) -> PathBuf {
        self.sandbox.path().join("lab")
    }

    /// `fracflow run TARGET --smoke --testbed rpcnic-doubles ARGS` with the doubles first on PATH; `fault` is the
    /// doubles' RPCNIC_DOUBLES_FAULT.
    fn run(&self, target: &str, args: &[&str], fault: &str) -> Output {
        let mut all = vec!["run", target, "--smoke", "--testbed", "rpcnic-doubles"];
        all.extend(args);
        let doubles = repo().join("tests/doubles/rpcnic");
        let path = std::env::join_paths(std::iter::once(doubles).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )))
        .expect("PATH");
        self.sandbox
            .command(&all)
            .env("PATH", path)
            .env("RPCNIC_DOUBLES_HOME", self.lab())
            .env("RPCNIC_FAKE_BUS", FAKE_BUS)
            .env("RPCNIC_DOUBLES_FAULT", fault)
            .output()
            .expect("spawn fracflow")
    }

    /// The calls the doubles recorded, one per line.
    fn record(&self) -> Vec<String> {
        std::fs::read_to_string(self.lab().join("record.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The run `run` made last: a smoke run on `rpcnic-doubles`.
    fn latest(&self, pipeline: &str) -> PathBuf {
        self.sandbox
            .latest_on(pipeline, Some("smoke"), "rpcnic-doubles")
    }

    fn manifest(&self, pipeline: &str) -> RunManifest {
        let path = self.latest(pipeline).join("manifest.json");
        serde_json::from_slice(&std::fs::read(&path).expect("manifest")).expect("manifest json")
    }

    fn summary(&self, pipeline: &str) -> Table {
        let path = self.latest(pipeline).join("nodes/aggregate/summary.csv");
        csv_table(&std::fs::read_to_string(&path).expect("summary.csv"))
    }
}

/// An aggregation's CSV export as a table: numbers as numbers, empty cells null. Read here rather than through
/// the aggregation crate, which would link polars into this test binary.
fn csv_table(text: &str) -> Table {
    let mut lines = text.lines().map(csv_fields);
    let mut table = Table::new(lines.next().unwrap_or_default());
    for fields in lines {
        assert_eq!(fields.len(), table.columns.len(), "{fields:?}");
        table.rows.push(
            fields
                .into_iter()
                .map(|field| match field.parse::<f64>() {
                    _ if field.is_empty() => Cell::Null,
                    Ok(number) => Cell::Num(number),
                    Err(_) => Cell::Text(field),
                })
                .collect(),
        );
    }
    table
}

/// The fields of one CSV line; a field in double quotes may hold commas and doubled quotes.
fn csv_fields(line: &str) -> Vec<String> {
    let (mut fields, mut field, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(std::mem::take(&mut field)),
            other => field.push(other),
        }
    }
    fields.push(field);
    fields
}

#[test]
fn csv_fields_are_split_outside_quotes_only() {
    let table = csv_table("design,speed,note\n\"a,b\",1.5,\n\"say \"\"hi\"\"\",,x\n");
    assert_eq!(table.columns, ["design", "speed", "note"]);
    assert_eq!(
        table.rows,
        [
            vec![Cell::Text("a,b".to_owned()), Cell::Num(1.5), Cell::Null],
            vec![
                Cell::Text("say \"hi\"".to_owned()),
                Cell::Null,
                Cell::Text("x".to_owned())
            ],
        ]
    );
}

/// Node ids of the manifest with `status`.
fn with_status(manifest: &RunManifest, status: NodeStatus) -> Vec<String> {
    manifest
        .nodes
        .iter()
        .filter(|(_, record)| record.status == status)
        .map(|(id, _)| id.clone())
        .collect()
}

/// Index of the first line at or after `from` that starts with `prefix` and contains every one of `parts`.
fn find(lines: &[String], from: usize, prefix: &str, parts: &[&str]) -> usize {
    (from..lines.len())
        .find(|&i| lines[i].starts_with(prefix) && parts.iter().all(|p| lines[i].contains(p)))
        .unwrap_or_else(|| {
            panic!(
                "no `{prefix} … {parts:?}` after line {from} in:\n{}",
                lines.join("\n")
            )
        })
}

/// Indices of the host program runs recorded by the fake programs (`PROGRAM IDX … bench=B design=D run=K`).
fn runs_of(lines: &[String], program: &str, design: &str) -> Vec<usize> {
    (0..lines.len())
        .filter(|&i| {
            lines[i].starts_with(&format!("{program} "))
                && lines[i].contains(&format!("design={design} "))
        })
        .collect()
}

/// Checks that `design`'s bitstream was programmed, the host rebooted and the driver set up, in that order,
/// before every run of `programs` on it; returns the index after its last run.
fn assert_chain(
    lines: &[String],
    from: usize,
    bitstream: &str,
    design: &str,
    programs: &[&str],
    runs: usize,
) -> usize {
    let programmed = lines
        .iter()
        .filter(|l| l.starts_with("vivado ") && l.contains(bitstream))
        .count();
    assert_eq!(
        programmed,
        1,
        "{bitstream} is programmed once:\n{}",
        lines.join("\n")
    );
    let program = find(
        lines,
        from,
        "vivado ",
        &["-mode batch", "program.tcl", "xcu280_u55c_0", bitstream],
    );
    let reboot = find(lines, program, "reboot", &[]);
    let insmod = find(lines, reboot, "insmod ", &["qdma-pf.ko"]);
    let qmax = find(
        lines,
        insmod,
        "ssh ",
        &["echo 1024", &format!("0000:{FAKE_BUS}:00.0/qdma/qmax")],
    );
    let add = find(
        lines,
        qmax,
        "dma-ctl ",
        &[&format!("qdma{FAKE_BUS}000 q add idx 0 mode st dir bi")],
    );
    let start = find(
        lines,
        add,
        "dma-ctl ",
        &[&format!("qdma{FAKE_BUS}000 q start idx 0 dir bi")],
    );
    let probe = find(lines, start, "dmesg", &[]);
    let mut all = Vec::new();
    for program_name in programs {
        all.extend(runs_of(lines, program_name, design));
    }
    assert_eq!(
        all.len(),
        runs,
        "runs on {design}: {all:?}\n{}",
        lines.join("\n")
    );
    assert!(
        all.iter().all(|&run| run > probe),
        "every run on {design} comes after its driver set-up (line {probe}): {all:?}\n{}",
        lines.join("\n")
    );
    all.into_iter().max().map_or(probe, |last| last + 1)
}

fn number(table: &Table, row: usize, column: &str) -> f64 {
    table
        .get(row, column)
        .and_then(Cell::as_f64)
        .unwrap_or_else(|| panic!("row {row} has no number in {column}: {:?}", table.rows[row]))
}

/// The row whose `design`, `bench` and `idx` are these.
fn row(table: &Table, design: &str, bench: u32, idx: u32) -> usize {
    (0..table.rows.len())
        .find(|&r| {
            table.get(r, "design") == Some(&Cell::Text(design.to_owned()))
                && table.get(r, "bench").and_then(Cell::as_f64) == Some(f64::from(bench))
                && table.get(r, "idx").and_then(Cell::as_f64) == Some(f64::from(idx))
        })
        .unwrap_or_else(|| panic!("no row {design} bench{bench} idx{idx} in {:?}", table.rows))
}

fn assert_close(actual: f64, expected: f64, relative: f64, what: &str) {
    assert!(
        (actual - expected).abs() <= relative * expected.abs(),
        "{what}: {actual} is not {expected} (±{relative} relative)"
    );
}

/// The doubles' formulas (tests/doubles/rpcnic/programs.py), written again here as the test's oracle.
mod formula {
    /// deserialize_hw's `total size` (docs/tools.md §2.5).
    pub fn size(bench: u32, idx: u32) -> u64 {
        let table: [u64; 10] = match bench {
            0 => [
                91323, 10091, 301623, 199606, 78490, 182783, 84250, 282819, 117569, 45176,
            ],
            1 => [6874, 583, 9111, 8954, 12474, 17, 2395, 1016, 89, 1435],
            3 => [
                202083, 845, 45885, 1821, 85898, 12888, 324753, 540, 35039, 634,
            ],
            4 => [
                1710, 326750, 248204, 664, 20128, 25284, 37490, 146428, 63668, 36078,
            ],
            other => panic!("the doubles know no bench{other}"),
        };
        table[idx as usize]
    }

    /// deserialize_hw's `speed:` for a design on repetition 0.
    pub fn speed(one_shot: bool, bench: u32, idx: u32) -> f64 {
        let size = size(bench, idx) as f64;
        let lines = (size / 64.0).ceil();
        let cycles = if one_shot {
            lines + 64.0
        } else {
            3.0 * lines + 512.0
        };
        let timer_cnt = 100_000.0 * cycles;
        size * 100_000.0 * 8.0 / (timer_cnt * 5.0) / 1_048_576.0 * 1e6
    }

    fn full_length(bench: u32, idx: u32) -> u64 {
        size(bench, idx) + 17 + u64::from((31 * bench + 17 * idx) % 174)
    }

    /// (cpu-part, c2h): bench0 from docs/tools.md §2.5, else the doubles' rule.
    pub fn split(bench: u32, idx: u32) -> (u64, u64) {
        const BENCH0: [(u64, u64); 10] = [
            (502, 91776),
            (325, 10048),
            (365, 301952),
            (1315, 199424),
            (1227, 77696),
            (2458, 181312),
            (1024, 83648),
            (1036, 282688),
            (809, 117184),
            (584, 44864),
        ];
        if bench == 0 {
            return BENCH0[idx as usize];
        }
        let full = full_length(bench, idx);
        let c2h = if full >= 4096 {
            full * 3 / 4 / 64 * 64
        } else {
            0
        };
        (full - c2h, c2h)
    }

    /// The total time (µs) of each serializer on repetition 0; repetition k takes (1 + k/100) times as long.
    pub fn total_us(program: &str, bench: u32, idx: u32) -> f64 {
        let full = full_length(bench, idx) as f64;
        let (cpu, c2h) = split(bench, idx);
        let (cpu, c2h) = (cpu as f64, c2h as f64);
        match program {
            "serialize_sw" => 0.8 + full / 1500.0 + 2.0 + full / 9000.0,
            "serialize_co" => 0.5 + cpu / 1500.0 + 1.5 + c2h / 20000.0,
            "serialize_hw" => 0.5 + cpu / 1500.0 + 3.0 + c2h / 6000.0,
            other => panic!("no serializer {other}"),
        }
    }
}

#[test]
fn fig5_and_fig7_run_on_the_doubles_in_order_and_a_new_bench_reruns_only_its_build_and_runs() {
    let lab = Lab::new();
    let fig5 = lab.run("fig5", &[], "");
    assert!(fig5.status.success(), "{}", text(&fig5));
    let calls = lab.record();
    // The builds: cmake and make once per bench, in a copy of the tree.
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.starts_with("cmake .. (in build_host/)"))
            .count(),
        2
    );
    let after_oneshot = assert_chain(
        &calls,
        0,
        "deser_one-shot_DMA.bit",
        "deser-oneshot",
        &["deserialize_hw"],
        4,
    );
    assert_chain(
        &calls,
        after_oneshot,
        "deser_field_by_field.bit",
        "deser-fbf",
        &["deserialize_hw"],
        4,
    );
    for bench in [0, 3] {
        for idx in [0, 1] {
            let call = format!("deserialize_hw {idx} 8 bench={bench} ");
            assert_eq!(
                calls.iter().filter(|c| c.starts_with(&call)).count(),
                2,
                "{call}"
            );
        }
    }
    assert!(
        calls.iter().any(|c| c.starts_with("sudo ./bin/")),
        "programs run through sudo"
    );

    let summary = lab.summary("rpcnic-deserializer");
    assert_eq!(summary.rows.len(), 8, "{:?}", summary.rows);
    assert_from_doubles(&summary);
    for bench in [0, 3] {
        for idx in [0, 1] {
            let one_shot = row(&summary, "one-shot", bench, idx);
            let expected = formula::speed(true, bench, idx) / formula::speed(false, bench, idx);
            // The doubles print six significant digits, as the real program's cout does.
            assert_close(
                number(&summary, one_shot, "ratio_speed"),
                expected,
                1e-5,
                "fig5 ratio",
            );
            assert_close(
                number(&summary, one_shot, "speed"),
                formula::speed(true, bench, idx),
                1e-5,
                "one-shot speed",
            );
            assert_eq!(number(&summary, one_shot, "n"), 1.0);
            assert_eq!(
                number(&summary, one_shot, "total_size"),
                formula::size(bench, idx) as f64
            );
            let baseline = row(&summary, "field-by-field", bench, idx);
            assert_eq!(number(&summary, baseline, "ratio_speed"), 1.0);
        }
    }
    let record: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            lab.latest("rpcnic-deserializer")
                .join("nodes/run_oneshot[bench=3,idx=1,rep=0]/metrics.json"),
        )
        .expect("metrics.json of a run"),
    )
    .expect("json");
    assert_eq!(
        record["point"],
        serde_json::json!({"bench": 3, "idx": 1, "rep": 0})
    );
    assert_eq!(
        record["labels"],
        serde_json::json!({"design": "one-shot", "source": "tool doubles"})
    );
    assert_figure(&lab, "rpcnic-deserializer", "fig5");

    let fig7 = lab.run("fig7", &[], "");
    assert!(fig7.status.success(), "{}", text(&fig7));
    let calls = lab.record();
    let fig7_start = find(&calls, 0, "vivado ", &["ser_memory-affinity.bit"]);
    let after_ma = assert_chain(
        &calls,
        fig7_start,
        "ser_memory-affinity.bit",
        "ser-memory-affinity",
        &["serialize_sw", "serialize_co"],
        16,
    );
    assert_chain(
        &calls,
        after_ma,
        "ser_protoACC-PCIe.bit",
        "ser-protoacc-pcie",
        &["serialize_hw"],
        8,
    );
    let summary = lab.summary("rpcnic-serializer");
    assert_eq!(summary.rows.len(), 12, "{:?}", summary.rows);
    assert_from_doubles(&summary);
    for bench in [0, 3] {
        for idx in [0, 1] {
            let co = formula::total_us("serialize_co", bench, idx);
            // Two repetitions: t and 1.01·t, so the mean is 1.005·t and the sample sd 0.01·t / √2.
            let mean = |t: f64| t * 1.005;
            for (design, program) in [
                ("CPU-only", "serialize_sw"),
                ("ProtoAcc-PCIe", "serialize_hw"),
            ] {
                let r = row(&summary, design, bench, idx);
                let total = formula::total_us(program, bench, idx);
                assert_close(
                    number(&summary, r, "ratio_total_us"),
                    total / co,
                    1e-3,
                    "fig7 speedup",
                );
                assert_close(
                    number(&summary, r, "total_us"),
                    mean(total),
                    1e-3,
                    "mean total",
                );
                let sd = number(&summary, r, "total_us_sd");
                assert!(
                    (sd - 0.01 * total / 2f64.sqrt()).abs() < 1.5e-3,
                    "{design} sd {sd}"
                );
                assert_eq!(number(&summary, r, "n"), 2.0);
            }
            // serialize_hw prints its lengths in hex without 0x; `base: 16` read them.
            let hw = row(&summary, "ProtoAcc-PCIe", bench, idx);
            let (cpu, c2h) = formula::split(bench, idx);
            assert_eq!(number(&summary, hw, "length"), cpu as f64);
            assert_eq!(number(&summary, hw, "c2h"), c2h as f64);
            // serialize_co's second `Serialize() timeing` line is the total, its first the software part.
            let co_row = row(&summary, "memory-affinity", bench, idx);
            assert_close(
                number(&summary, co_row, "total_us"),
                mean(co),
                1e-3,
                "co total",
            );
            assert!(number(&summary, co_row, "sw_us") < number(&summary, co_row, "total_us"));
        }
    }
    assert_figure(&lab, "rpcnic-serializer", "fig7");

    // Again: every run is a cache hit, so no device step is needed and no double is called (no programming, no
    // reboot).
    let before = lab.record().len();
    let again = lab.run("fig5", &[], "");
    assert!(again.status.success(), "{}", text(&again));
    let manifest = lab.manifest("rpcnic-deserializer");
    assert!(
        with_status(&manifest, NodeStatus::Built).is_empty(),
        "{}",
        text(&again)
    );
    assert_eq!(lab.record().len(), before, "a cached run calls no tool");
    for chain in ["oneshot", "fbf"] {
        for step in ["program", "reboot", "driver"] {
            let record = &manifest.nodes[&format!("{chain}.{step}")];
            assert_eq!(record.status, NodeStatus::Skipped, "{chain}.{step}");
            assert_eq!(
                record.reason.as_deref(),
                Some("nothing that needs it runs"),
                "{chain}.{step}"
            );
        }
    }
    assert!(
        text(&again).contains("skipped  oneshot.reboot: nothing that needs it runs"),
        "{}",
        text(&again)
    );
    // `plan` says the same before a run: the set-up chain will be skipped.
    let plan = lab
        .sandbox
        .run(&["plan", "fig5", "--smoke", "--testbed", "rpcnic-doubles"]);
    let plan = text(&plan);
    let reboot = plan
        .lines()
        .find(|l| l.contains("oneshot.reboot"))
        .unwrap_or_else(|| panic!("no oneshot.reboot in the plan:\n{plan}"));
    assert!(
        reboot.contains("skip") && reboot.contains("nothing that needs it runs"),
        "{plan}"
    );
    assert!(
        plan.contains(", 0 to run,"),
        "a skipped effect is not to run: {plan}"
    );

    // Bench 1 joins the smoke sweep: its build and runs are new; bench 0 and 3 are cached (the device steps are
    // keyed on their commands and bitstreams, not on the points). Each chain runs once, before the new runs on
    // its bitstream, because those have to run.
    let pipeline = lab
        .sandbox
        .path()
        .join("pipelines/rpcnic/deserializer.yaml");
    let yaml = std::fs::read_to_string(&pipeline).expect("deserializer.yaml");
    let edited = yaml.replace(
        "smoke: {sweep: {bench: [0, 3],",
        "smoke: {sweep: {bench: [0, 1, 3],",
    );
    assert_ne!(edited, yaml, "the smoke variant's bench list");
    std::fs::write(&pipeline, edited).expect("edit");
    let more = lab.run("fig5", &[], "");
    assert!(more.status.success(), "{}", text(&more));
    let manifest = lab.manifest("rpcnic-deserializer");
    let built = with_status(&manifest, NodeStatus::Built);
    let cached = with_status(&manifest, NodeStatus::Cached);
    for id in [
        "build[bench=1]",
        "run_oneshot[bench=1,idx=0,rep=0]",
        "run_fbf[bench=1,idx=1,rep=0]",
    ] {
        assert!(built.iter().any(|b| b == id), "{id} runs: built {built:?}");
    }
    for id in [
        "build[bench=0]",
        "build[bench=3]",
        "run_oneshot[bench=0,idx=0,rep=0]",
        "run_fbf[bench=3,idx=1,rep=0]",
    ] {
        assert!(
            cached.iter().any(|c| c == id),
            "{id} stays cached: {cached:?}"
        );
    }
    assert_eq!(
        built.iter().filter(|b| b.starts_with("run_")).count(),
        4,
        "{built:?}"
    );
    assert_eq!(
        built.iter().filter(|b| b.starts_with("build[")).count(),
        1,
        "{built:?}"
    );
    for chain in ["oneshot", "fbf"] {
        for step in ["program", "reboot", "driver"] {
            let id = format!("{chain}.{step}");
            assert!(
                built.contains(&id),
                "{id} runs again before the new runs: {built:?}"
            );
        }
    }
    let calls = lab.record();
    let new = &calls[before..];
    let after = assert_chain(
        new,
        0,
        "deser_one-shot_DMA.bit",
        "deser-oneshot",
        &["deserialize_hw"],
        2,
    );
    assert_chain(
        new,
        after,
        "deser_field_by_field.bit",
        "deser-fbf",
        &["deserialize_hw"],
        2,
    );
    assert!(
        new.iter()
            .filter(|c| c.starts_with("deserialize_hw "))
            .all(|c| c.contains("bench=1 ")),
        "only bench 1 runs: {new:?}"
    );
    assert_eq!(lab.summary("rpcnic-deserializer").rows.len(), 12);
}

/// Every row of the table says its numbers come from the tool doubles.
fn assert_from_doubles(summary: &Table) {
    for r in 0..summary.rows.len() {
        assert_eq!(
            summary.get(r, "source"),
            Some(&Cell::Text("tool doubles".to_owned())),
            "row {r}: {:?}",
            summary.rows[r]
        );
    }
}

/// The figure's three files exist and its footer says the numbers come from tool doubles.
fn assert_figure(lab: &Lab, pipeline: &str, figure: &str) {
    let dir = lab.latest(pipeline).join("nodes").join(figure);
    for ext in ["svg", "png", "pdf"] {
        let file = dir.join(format!("{figure}.{ext}"));
        let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
        assert!(size > 1000, "{} is missing or empty", file.display());
    }
    let svg = std::fs::read_to_string(dir.join(format!("{figure}.svg"))).expect("svg");
    assert!(
        svg.contains("tool doubles"),
        "{figure}: the footer must say tool doubles"
    );
    assert!(
        svg.contains("rpcnic-doubles"),
        "{figure}: the footer names the testbed"
    );
}

#[test]
fn a_run_without_speed_a_hung_run_and_a_host_in_another_state_each_fail_their_node_alone() {
    let lab = Lab::new();
    // deserialize_hw of bench 3, message 1 prints no `speed:` line: that node fails, its siblings are kept.
    let faulty = lab.run("fig5", &["--keep-going"], "deserialize_hw/3/1:no-speed");
    assert_eq!(faulty.status.code(), Some(1), "{}", text(&faulty));
    let manifest = lab.manifest("rpcnic-deserializer");
    let failed = "run_oneshot[bench=3,idx=1,rep=0]";
    let error = manifest.nodes[failed].error.clone().unwrap_or_default();
    assert!(
        error.contains("metric `speed`") && error.contains("not found"),
        "{error}"
    );
    assert_eq!(with_status(&manifest, NodeStatus::Failed), [failed]);
    let built = with_status(&manifest, NodeStatus::Built);
    assert_eq!(
        built
            .iter()
            .filter(|id| id.starts_with("run_oneshot["))
            .count(),
        3,
        "{built:?}"
    );
    // The next bitstream's chain waits for every run of this one, so it did not start.
    assert_eq!(manifest.nodes["fbf.program"].status, NodeStatus::Skipped);

    // Fixed: the failed run runs, after the one-shot steps that it needs; the others are cache hits.
    let fixed = lab.run("fig5", &[], "");
    assert!(fixed.status.success(), "{}", text(&fixed));
    let manifest = lab.manifest("rpcnic-deserializer");
    let built = with_status(&manifest, NodeStatus::Built);
    assert!(built.iter().any(|id| id == failed), "{built:?}");
    assert_eq!(
        built
            .iter()
            .filter(|id| id.starts_with("run_oneshot["))
            .count(),
        1,
        "{built:?}"
    );

    // The host now holds the field-by-field design: forcing a one-shot run alone programs, reboots and sets up
    // the one-shot design first, and the field-by-field steps, which no run needs, do not run.
    let before = lab.record().len();
    let forced = lab.run("fig5", &["--rerun", "run_oneshot[bench=0,idx=0,rep=0]"], "");
    assert!(forced.status.success(), "{}", text(&forced));
    let manifest = lab.manifest("rpcnic-deserializer");
    // (The doubles' numbers differ from run to run, so the table and figure are made again as well.)
    let built: Vec<String> = with_status(&manifest, NodeStatus::Built)
        .into_iter()
        .filter(|id| id.starts_with("run_") || id.contains('.'))
        .collect();
    assert_eq!(
        built,
        [
            "oneshot.driver",
            "oneshot.program",
            "oneshot.reboot",
            "run_oneshot[bench=0,idx=0,rep=0]"
        ],
        "{}",
        text(&forced)
    );
    assert_eq!(
        manifest.nodes["fbf.program"].reason.as_deref(),
        Some("nothing that needs it runs")
    );
    let record = lab.record();
    assert_chain(
        &record[before..],
        0,
        "deser_one-shot_DMA.bit",
        "deser-oneshot",
        &["deserialize_hw"],
        1,
    );

    // serialize_co of bench 0, message 1 spins forever, as the real one does on a hung FPGA: its timeout stops it.
    let started = std::time::Instant::now();
    let hung = lab.run(
        "fig7",
        &[
            "--keep-going",
            "--only",
            "bench=0",
            "--only",
            "idx=1",
            "--set",
            "run_timeout_s=5",
        ],
        "serialize_co/0/1:hang",
    );
    assert_eq!(hung.status.code(), Some(1), "{}", text(&hung));
    let manifest = lab.manifest("rpcnic-serializer");
    let failed = with_status(&manifest, NodeStatus::Failed);
    assert_eq!(
        failed,
        ["run_co[bench=0,idx=1,rep=0]", "run_co[bench=0,idx=1,rep=1]"],
        "{}",
        text(&hung)
    );
    for id in &failed {
        let error = manifest.nodes[id].error.clone().unwrap_or_default();
        assert!(error.contains("timed out after 5s"), "{id}: {error}");
    }
    let built = with_status(&manifest, NodeStatus::Built);
    assert_eq!(
        built.iter().filter(|id| id.starts_with("run_sw[")).count(),
        2,
        "{built:?}"
    );
    // Each hung repetition ran once (a timeout is not retried by default), and the first stop signal ended it:
    // SIGINT at the timeout, not SIGTERM or SIGKILL 20 s later. (On a loaded machine a program may still be
    // starting when its 5 s are up; then it never records itself, and the timeout alone is what the node says.)
    let record = lab.record();
    let hung_runs = record
        .iter()
        .filter(|c| c.starts_with("serialize_co 1 bench=0 design="))
        .count();
    assert!(
        (1..=2).contains(&hung_runs),
        "{hung_runs} hung runs started"
    );
    let stopped: Vec<&String> = record
        .iter()
        .filter(|c| c.contains(" stopped by "))
        .collect();
    assert_eq!(stopped.len(), hung_runs, "{stopped:?}");
    assert!(
        stopped.iter().all(|c| c.ends_with("stopped by SIGINT")),
        "{stopped:?}"
    );
    assert!(
        started.elapsed().as_secs() < 120,
        "the hung runs held the test up"
    );
}
