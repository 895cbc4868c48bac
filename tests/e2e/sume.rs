//! The NetFPGA SUME pipelines (`pipelines/sume/`): `sume` against the tool doubles of `tests/doubles/sume/`
//! (flash, driver, interfaces, the seed's table, a watchdog reset, interfaces that never appear, the set-up steps
//! running only before points that run), and
//! `sume-loopback` for real with Debian's iperf3, netperf and sockperf on 127.0.0.1.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Output;

use crate::figures::csv_rows;
use crate::support::{Sandbox, copy_tree, repo, text};

type Row = BTreeMap<String, String>;

/// A project with the SUME scripts, pipelines, testbed profiles and tool doubles of the repository.
fn sume_project() -> Sandbox {
    let sandbox = Sandbox::new();
    for dir in ["hw/sume", "pipelines/sume", "tests/doubles/sume"] {
        copy_tree(&repo().join(dir), &sandbox.path().join(dir));
    }
    for profile in ["sume-doubles", "sume-freebsd", "loopback"] {
        let file = format!("hw/testbeds/{profile}.yaml");
        std::fs::copy(repo().join(&file), sandbox.path().join(&file)).expect(&file);
    }
    sandbox
}

/// `fracflow ARGS` with the doubles keeping their state and record in the sandbox, plus `env`.
fn run_with_doubles(sandbox: &Sandbox, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = sandbox.command(args);
    command.env("SUME_DOUBLES_DIR", sandbox.path().join("doubles"));
    for var in ["SUME_DOUBLES_RESET_ON", "SUME_DOUBLES_NO_IFACES"] {
        command.env_remove(var);
    }
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("run fracflow")
}

/// What the doubles recorded, one `HOST: TOOL ARGS` per line, without the ssh and sudo hops themselves (the
/// commands they carried are recorded again by the double that ran them, on its host).
fn recorded(sandbox: &Sandbox) -> Vec<String> {
    let path = sandbox.path().join("doubles/record.txt");
    std::fs::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with("local: ssh ") && !l.starts_with("local: sudo "))
        .map(str::to_owned)
        .collect()
}

fn num(row: &Row, column: &str) -> f64 {
    let cell = row
        .get(column)
        .unwrap_or_else(|| panic!("no column {column} in {row:?}"));
    cell.parse()
        .unwrap_or_else(|_| panic!("{column} is not a number ({cell:?}) in {row:?}"))
}

/// `direction/tool/size` of a row.
fn point(row: &Row) -> String {
    format!("{}/{}/{}", row["direction"], row["tool"], num(row, "size"))
}

fn close(actual: f64, expected: f64, relative: f64) -> bool {
    (actual - expected).abs() <= relative * expected.abs()
}

/// The ids of the nodes that got `event` in the latest smoke run of `pipeline` on `sume-doubles`.
fn nodes_with(sandbox: &Sandbox, pipeline: &str, event: &str) -> BTreeSet<String> {
    std::fs::read_to_string(
        sandbox
            .latest_on(pipeline, Some("smoke"), "sume-doubles")
            .join("events.jsonl"),
    )
    .unwrap_or_default()
    .lines()
    .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    .filter(|e| e["event"] == event)
    .filter_map(|e| e["node"].as_str().map(str::to_owned))
    .collect()
}

/// The seed's FreeBSD 12.1-p7 column as the doubles model it (tests/doubles/sume/_double.py, RATES): pkt-gen
/// Kpps by path and size; TCP Mbit/s by tool and path at 1500-B writes, scaled by size/1500 below that.
fn pktgen_kpps(direction: &str, size: f64) -> f64 {
    match (direction, size as u32) {
        ("tx-only", 60) => 279.0,
        ("tx-only", 1500) => 260.0,
        ("rx-only", 60) => 220.0,
        ("rx-only", 1500) => 215.0,
        ("loopback", 60) => 164.0,
        ("loopback", 1500) => 133.0,
        other => panic!("no pkt-gen rate for {other:?}"),
    }
}

fn tcp_mbps(tool: &str, direction: &str, size: f64) -> f64 {
    let at_1500 = match (tool, direction) {
        ("iperf", "tx-only") | ("netperf", "tx-only") => 2200.0,
        ("iperf", "rx-only") => 610.0,
        ("netperf", "rx-only") => 201.0,
        other => panic!("no TCP rate for {other:?}"),
    };
    ((at_1500 * (size / 1500.0).min(1.0)) * 10.0).round() / 10.0
}

/// The board pipeline's smoke sweep: 3 directions × 3 tools × 2 sizes, minus TCP on loopback (the seed's "-").
fn board_points() -> BTreeSet<String> {
    let mut points = BTreeSet::new();
    for direction in ["tx-only", "rx-only", "loopback"] {
        for tool in ["iperf", "netperf", "pkt-gen"] {
            if direction == "loopback" && tool != "pkt-gen" {
                continue;
            }
            for size in [60, 1500] {
                points.insert(format!("{direction}/{tool}/{size}"));
            }
        }
    }
    points
}

#[test]
fn sume_flashes_loads_the_driver_and_tabulates_the_seeds_table_against_tool_doubles() {
    let sandbox = sume_project();
    let run = run_with_doubles(
        &sandbox,
        &["run", "sume", "--testbed", "sume-doubles", "--smoke"],
        &[],
    );
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));

    // The steps, where they ran and in which order.
    let steps = recorded(&sandbox);
    let at = |wanted: &str| {
        steps
            .iter()
            .position(|l| l == wanted)
            .unwrap_or_else(|| panic!("`{wanted}` was not run; recorded:\n{}", steps.join("\n")))
    };
    let flash: Vec<&String> = steps.iter().filter(|l| l.contains("dsumecfg")).collect();
    assert_eq!(
        flash,
        [
            "adept.example: dsumecfg -d NetSUME write -verbose -s 2 -f fracflow-sume.bit",
            "adept.example: dsumecfg -d NetSUME setbootsec -s 2",
            "adept.example: dsumecfg -d NetSUME reconfig -s 2",
        ],
        "the flash commands, on the Adept host, in the driver page's order"
    );
    let reconfig = at("adept.example: dsumecfg -d NetSUME reconfig -s 2");
    let rescan = at("local: devctl rescan pci0");
    let kldload = at("local: kldload if_sume.ko");
    let interfaces = at("local: ifconfig -l");
    let address = at("local: ifconfig sume0 inet 10.0.0.1/24 up");
    let benchmarks: Vec<usize> = steps
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            ["iperf ", "netperf ", "netserver ", "pkt-gen "]
                .iter()
                .any(|tool| l.contains(&format!(": {tool}")))
        })
        .map(|(i, _)| i)
        .collect();
    assert!(!benchmarks.is_empty(), "no benchmark ran: {steps:?}");
    let first_benchmark = benchmarks[0];
    assert!(
        reconfig < rescan
            && rescan < kldload
            && kldload < interfaces
            && interfaces < address
            && address < first_benchmark,
        "flash, rescan, kldload, the interface check and the addresses come before any benchmark:\n{}",
        steps.join("\n")
    );
    // TX only sends from here, RX only from the peer (over ssh), loopback from sume2 to sume3.
    let port = regex::Regex::new(r"-p \d+").expect("regex");
    for line in [
        "local: pkt-gen -i sume0 -f tx -l 60 -w 0",
        "peer.example: pkt-gen -i ix0 -f tx -l 1500 -w 0",
        "local: pkt-gen -i sume3 -f rx -w 0",
        "local: pkt-gen -i sume2 -f tx -l 60 -w 0",
        "local: iperf -c 10.0.0.2 -p PORT -l 60 -t 1 -f m",
        "peer.example: iperf -c 10.0.0.1 -p PORT -l 1500 -t 1 -f m",
    ] {
        assert!(
            steps.iter().any(|l| port.replace(l, "-p PORT") == line),
            "`{line}` was not run; recorded:\n{}",
            steps.join("\n")
        );
    }
    let latest = sandbox.latest_on("sume", Some("smoke"), "sume-doubles");
    let driver_log = std::fs::read_to_string(latest.join("logs/driver.log")).expect("driver log");
    assert!(
        driver_log.contains("interfaces: em0 lo0 sume0 sume1 sume2 sume3"),
        "{driver_log}"
    );

    // The table: exactly the seed's points, with the doubles' numbers.
    let rows = csv_rows(&latest.join("nodes/aggregate/summary.csv"));
    let points: BTreeSet<String> = rows.iter().map(point).collect();
    assert_eq!(points, board_points(), "rows of the table");
    assert_eq!(rows.len(), points.len(), "one row per point: {rows:?}");
    for row in &rows {
        let (direction, tool, size) = (
            row["direction"].as_str(),
            row["tool"].as_str(),
            num(row, "size"),
        );
        assert_eq!(row["source"], "doubles", "{row:?}");
        assert_eq!(num(row, "n"), 1.0, "{row:?}");
        assert_eq!(num(row, "watchdog_resets"), 0.0, "{row:?}");
        assert_eq!(num(row, "dropped"), 0.0, "{row:?}");
        assert_eq!(
            num(row, "packets"),
            num(row, "hw_packets"),
            "host and board counters agree: {row:?}"
        );
        let (packets, elapsed) = (num(row, "packets"), num(row, "elapsed_s"));
        if tool == "pkt-gen" {
            let kpps = pktgen_kpps(direction, size);
            assert!(
                close(num(row, "kpps"), kpps, 0.005),
                "kpps of {}: {row:?}",
                point(row)
            );
            let mbps = kpps * 1000.0 * size * 8.0 / 1e6;
            assert!(
                close(num(row, "throughput_mbps"), mbps, 0.005),
                "throughput of {}: {row:?}",
                point(row)
            );
            // The counter delta is what the tool sent in its own seconds.
            assert!(
                close(packets, kpps * 1000.0 * elapsed, 0.01),
                "packets of {}: {row:?}",
                point(row)
            );
        } else {
            let mbps = tcp_mbps(tool, direction, size);
            assert!(
                close(num(row, "throughput_mbps"), mbps, 1e-6),
                "throughput of {}: {row:?}",
                point(row)
            );
            assert_eq!(elapsed, 1.0, "{row:?}");
            // One segment per 1448 B (an MSS at 1500 B) of what the tool moved in its 1 s.
            let segments = ((mbps * 1e6 / 8.0).floor() / 1448.0).ceil();
            assert_eq!(packets, segments, "packets of {}: {row:?}", point(row));
        }
    }

    // The seed's layout, the figure, and where the numbers came from.
    let table =
        std::fs::read_to_string(latest.join("nodes/table/seed_table.md")).expect("seed table");
    for line in [
        "| test | TX only | RX only | loopback |",
        "| iperf - 60 B | 88 Mb/s (7.597 Kpps) | 24.4 Mb/s (2.107 Kpps) | - |",
        "| netperf - 1500 B | 2200 Mb/s (189.9 Kpps) | 201 Mb/s (17.35 Kpps) | - |",
    ] {
        assert!(
            table.lines().any(|l| l == line),
            "`{line}` not in:\n{table}"
        );
    }
    assert!(
        table.contains("| pkt-gen - 60 B | 133.9 Mb/s (279 Kpps) |"),
        "{table}"
    );
    assert!(table.contains("Numbers from: doubles"), "{table}");
    for ext in ["svg", "png", "pdf"] {
        let file = latest.join(format!("nodes/figure/sume_throughput.{ext}"));
        let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
        assert!(size > 1000, "{} is missing or empty", file.display());
    }
    let svg =
        std::fs::read_to_string(latest.join("nodes/figure/sume_throughput.svg")).expect("svg");
    assert!(
        svg.contains("tool doubles, not measured"),
        "the footer must say the numbers are the doubles'"
    );
    let verdicts: Vec<serde_json::Value> = serde_json::from_slice(
        &std::fs::read(latest.join("nodes/expectations/expectations.json")).expect("verdicts"),
    )
    .expect("json");
    assert_eq!(verdicts.len(), 3, "{verdicts:?}");
    assert!(
        verdicts.iter().all(|v| v["verdict"] == "pass"),
        "{verdicts:?}"
    );

    // The same command again touches nothing: the flash is cached by the bitstream's bytes, the points by key.
    let before = recorded(&sandbox).len();
    let again = run_with_doubles(
        &sandbox,
        &["run", "sume", "--testbed", "sume-doubles", "--smoke"],
        &[],
    );
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert!(
        nodes_with(&sandbox, "sume", "node_started").is_empty(),
        "{}",
        text(&again)
    );
    assert_eq!(
        recorded(&sandbox).len(),
        before,
        "no tool ran the second time"
    );
    // No point runs, so the set-up steps (effects) did not either, and say why.
    let events: Vec<serde_json::Value> = std::fs::read_to_string(
        sandbox
            .latest_on("sume", Some("smoke"), "sume-doubles")
            .join("events.jsonl"),
    )
    .unwrap_or_default()
    .lines()
    .filter_map(|l| serde_json::from_str(l).ok())
    .collect();
    for step in ["rescan", "driver", "configure"] {
        assert!(
            events.iter().any(|e| e["event"] == "node_skipped"
                && e["node"] == step
                && e["reason"] == "nothing that needs it runs"),
            "{step}: {events:?}"
        );
    }

    // One point measured again: the host is set up again first (rescan, driver, configure), the flash stays
    // cached.
    let point = "measure[direction=tx-only,tool=pkt-gen,size=60,rep=1]";
    let rerun = run_with_doubles(
        &sandbox,
        &[
            "run",
            "sume",
            "--testbed",
            "sume-doubles",
            "--smoke",
            "--rerun",
            point,
        ],
        &[],
    );
    assert_eq!(rerun.status.code(), Some(0), "{}", text(&rerun));
    let started = nodes_with(&sandbox, "sume", "node_started");
    for id in ["rescan", "driver", "configure", point] {
        assert!(started.contains(id), "{id} runs: {started:?}");
    }
    assert!(
        !started
            .iter()
            .any(|n| n == "flash" || (n.starts_with("measure[") && n != point)),
        "{started:?}"
    );
    let steps = recorded(&sandbox);
    let new = &steps[before..];
    let at = |wanted: &str| {
        new.iter().position(|l| l == wanted).unwrap_or_else(|| {
            panic!(
                "`{wanted}` was not run again; recorded:\n{}",
                new.join("\n")
            )
        })
    };
    let (rescan, kldstat, address) = (
        at("local: devctl rescan pci0"),
        at("local: kldstat -q -m sume"),
        at("local: ifconfig sume0 inet 10.0.0.1/24 up"),
    );
    let sent = at("local: pkt-gen -i sume0 -f tx -l 60 -w 0");
    assert!(
        rescan < kldstat && kldstat < address && address < sent,
        "set up again, then the point:\n{}",
        new.join("\n")
    );
    assert!(
        !new.iter().any(|l| l.contains("dsumecfg")),
        "the flash is not repeated: {new:?}"
    );
}

#[test]
fn a_watchdog_reset_during_a_point_taints_its_row_and_the_run_exits_5() {
    let sandbox = sume_project();
    // The doubles' TX path hangs while pkt-gen sends 1500-B frames from sume0 (the driver page's own bug), and
    // the driver's watchdog resets the board: reset_ctr + 1 during that point only.
    let run = run_with_doubles(
        &sandbox,
        &[
            "run",
            "sume",
            "--testbed",
            "sume-doubles",
            "--smoke",
            "--only",
            "tool=pkt-gen",
        ],
        &[("SUME_DOUBLES_RESET_ON", "pkt-gen -i sume0 -f tx -l 1500")],
    );
    let output = text(&run);
    assert_eq!(
        run.status.code(),
        Some(5),
        "a tainted point is a failed claim, not a crash: {output}"
    );
    assert!(
        output.contains("0 failed"),
        "the measurement itself succeeded: {output}"
    );
    assert!(
        output.contains("FAIL the SUME watchdog never reset the board"),
        "{output}"
    );

    let latest = sandbox.latest_on("sume", Some("smoke"), "sume-doubles");
    let rows = csv_rows(&latest.join("nodes/aggregate/summary.csv"));
    let points: BTreeSet<String> = rows.iter().map(point).collect();
    let expected: BTreeSet<String> = board_points()
        .into_iter()
        .filter(|p| p.contains("/pkt-gen/"))
        .collect();
    assert_eq!(points, expected, "the other rows are kept");
    for row in &rows {
        let tainted = point(row) == "tx-only/pkt-gen/1500";
        assert_eq!(
            num(row, "watchdog_resets"),
            if tainted { 1.0 } else { 0.0 },
            "{row:?}"
        );
        assert!(num(row, "throughput_mbps") > 0.0, "{row:?}");
    }

    let verdicts: Vec<serde_json::Value> = serde_json::from_slice(
        &std::fs::read(latest.join("nodes/expectations/expectations.json")).expect("verdicts"),
    )
    .expect("json");
    let watchdog = verdicts
        .iter()
        .find(|v| v["name"].as_str().is_some_and(|n| n.contains("watchdog")))
        .expect("the watchdog claim");
    assert_eq!(watchdog["verdict"], "fail", "{watchdog}");
    let measured = watchdog["measured"].as_str().expect("measured");
    let per_row: Vec<&str> = measured.split("; ").collect();
    assert_eq!(per_row.len(), rows.len(), "one verdict per row: {measured}");
    let tainted = "watchdog_resets 1 (limit ±0) at direction=tx-only, size=1500, source=doubles, tool=pkt-gen";
    for verdict in per_row {
        if verdict.contains("direction=tx-only") && verdict.contains("size=1500") {
            // The row is named by its labels only, not by the metrics beside them.
            assert_eq!(
                verdict,
                format!("{tainted} ✗"),
                "the verdict names the tainted row"
            );
        } else {
            assert!(
                verdict.starts_with("watchdog_resets 0 ")
                    && verdict.ends_with(", tool=pkt-gen ✓")
                    && !verdict.contains("_sd="),
                "{verdict}"
            );
        }
    }
    let table =
        std::fs::read_to_string(latest.join("nodes/table/seed_table.md")).expect("seed table");
    let line = table
        .lines()
        .find(|l| l.starts_with("| pkt-gen - 1500 B |"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        line.contains("(260 Kpps) **watchdog reset** |"),
        "the TX only cell is marked: {line}"
    );
    assert_eq!(line.matches("watchdog reset").count(), 1, "{line}");
    let log = std::fs::read_to_string(
        latest.join("logs/measure[direction=tx-only,tool=pkt-gen,size=1500,rep=1].log"),
    )
    .expect("log");
    assert!(
        log.contains("the SUME watchdog reset the board 1 time(s) during this point"),
        "{log}"
    );
}

#[test]
fn interfaces_missing_after_kldload_fail_the_run_before_any_benchmark() {
    let sandbox = sume_project();
    let run = run_with_doubles(
        &sandbox,
        &["run", "sume", "--testbed", "sume-doubles", "--smoke"],
        &[("SUME_DOUBLES_NO_IFACES", "1")],
    );
    let output = text(&run);
    assert_eq!(run.status.code(), Some(1), "{output}");
    assert!(
        output.contains("driver"),
        "the failed node is named: {output}"
    );
    let latest = sandbox.latest_on("sume", Some("smoke"), "sume-doubles");
    let log = std::fs::read_to_string(latest.join("logs/driver.log")).expect("driver log");
    assert!(
        log.contains(
            "these interfaces did not appear: sume0 sume1 sume2 sume3 (ifconfig -l: em0 lo0)"
        ),
        "the log says what is missing: {log}"
    );
    let steps = recorded(&sandbox);
    assert!(
        steps.iter().any(|l| l == "local: kldload if_sume.ko"),
        "{steps:?}"
    );
    let benchmarked: Vec<&String> = steps
        .iter()
        .filter(|l| {
            ["iperf", "netperf", "netserver", "pkt-gen", "sysctl"]
                .iter()
                .any(|t| l.contains(&format!(": {t} ")))
        })
        .collect();
    assert!(
        benchmarked.is_empty(),
        "nothing is benchmarked: {benchmarked:?}"
    );
    let started = nodes_with(&sandbox, "sume", "node_started");
    assert!(
        !started
            .iter()
            .any(|n| n.starts_with("measure[") || n == "configure"),
        "{started:?}"
    );
}

/// The tools `sume-loopback` runs: missing ones fail the test with how to install them (CI installs them).
fn require_loopback_tools() {
    let missing: Vec<&str> = ["iperf3", "netperf", "netserver", "sockperf"]
        .into_iter()
        .filter(|tool| {
            !std::process::Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the sume-loopback test runs real tools, and these are missing: {}. On Debian: \
         `apt-get install iperf3 sockperf`, and netperf (netperf, netserver) from the non-free component: add \
         `non-free` to the APT sources, `apt-get update`, `apt-get install netperf`",
        missing.join(", ")
    );
}

#[test]
fn sume_loopback_measures_the_same_table_for_real_with_iperf3_netperf_and_sockperf() {
    require_loopback_tools();
    let sandbox = sume_project();
    let started = std::time::Instant::now();
    let run = sandbox.run(&["run", "sume-loopback", "--testbed", "loopback", "--smoke"]);
    eprintln!(
        "sume-loopback --smoke took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let latest = sandbox.latest_on("sume-loopback", Some("smoke"), "loopback");
    let rows = csv_rows(&latest.join("nodes/aggregate/summary.csv"));
    let mut expected = BTreeSet::new();
    for direction in ["tx-only", "rx-only", "loopback"] {
        for tool in ["iperf3", "netperf", "sockperf"] {
            for size in [60, 1500] {
                expected.insert(format!("{direction}/{tool}/{size}"));
            }
        }
    }
    let points: BTreeSet<String> = rows.iter().map(point).collect();
    assert_eq!(points, expected, "rows of the table");
    assert_eq!(rows.len(), expected.len(), "{rows:?}");
    for row in &rows {
        assert_eq!(row["source"], "loopback", "{row:?}");
        assert!(num(row, "throughput_mbps") > 0.0, "{row:?}");
        assert!(num(row, "packets") > 0.0, "lo's counters moved: {row:?}");
        assert!(num(row, "elapsed_s") > 0.0, "{row:?}");
        assert_eq!(num(row, "watchdog_resets"), 0.0, "{row:?}");
    }
    let table =
        std::fs::read_to_string(latest.join("nodes/table/seed_table.md")).expect("seed table");
    eprintln!("{table}");
    assert!(table.contains("Numbers from: loopback"), "{table}");
    let svg =
        std::fs::read_to_string(latest.join("nodes/figure/sume_throughput.svg")).expect("svg");
    assert!(
        svg.contains("testbed loopback (real)"),
        "the footer says where the numbers came from"
    );
    let versions =
        std::fs::read_to_string(latest.join("nodes/tools/versions.txt")).expect("versions");
    assert!(
        versions.contains("iperf 3") && versions.contains("Netperf version"),
        "{versions}"
    );
}
