//! The fperf adapter against a fake testbed (in the crate's unit test binary rather than a test binary of its own:
//! every binary that links this crate links polars, through aggregation): shell scripts standing in for `sudo`, `timeout`, `tpa` and fperf,
//! found first on the child's PATH. Each fake records its argv (one argument per line) in `$FAKE_DIR`; the
//! fake fperf also records its `TPA_*` environment, prints fperf's documented rr console format
//! (docs/tools.md §1.6) and writes `hugepage_thread_<i>.txt` into `-D` (§1.7).
//!
//! The fake fperf's data: thread `i` completes `2 + s + i` requests in second `s`, and the `j`-th of them
//! (from 1) has latency `1000 × (s + 1) + j` ns, so a sample tells which second it came from.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::fperf::{FperfInvocation, FperfStatus, run_fperf};
use fracflow_core::Cancel;

const SUDO: &str = r#"#!/bin/sh
printf '%s\n' "$@" > "$FAKE_DIR/sudo.argv"
if [ -n "$FAKE_SUDO_REFUSE" ]; then
  echo "sudo: a password is required" >&2
  exit 1
fi
while [ $# -gt 0 ]; do
  case "$1" in -*) shift ;; *) break ;; esac
done
exec "$@"
"#;

const TIMEOUT: &str = r#"#!/bin/sh
printf '%s\n' "$@" > "$FAKE_DIR/timeout.argv"
[ "$1" = -k ] || exit 125
shift 3
"$@"
rc=$?
exit $rc
"#;

const TPA: &str = r#"#!/bin/sh
printf '%s\n' "$@" > "$FAKE_DIR/tpa.argv"
[ "$1" = run ] || exit 2
shift
exec "$@"
"#;

const FPERF: &str = r#"#!/bin/sh
printf '%s\n' "$@" > "$FAKE_DIR/fperf.argv"
printf 'TPA_ID=%s\nTPA_ETH_DEV=%s\nTPA_CFG=%s\n' "$TPA_ID" "$TPA_ETH_DEV" "$TPA_CFG" > "$FAKE_DIR/fperf.env"
d=""; n=1; D=""; E=""
while [ $# -gt 0 ]; do
  case "$1" in
    -d) d=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    -D) D=$2; shift 2 ;;
    -E) E=$2; shift 2 ;;
    *) shift ;;
  esac
done
[ -n "$d" ] || d=3
seconds=${FAKE_FPERF_SECONDS:-$d}
s=0
while [ $s -lt $seconds ]; do
  i=0
  while [ $i -lt $n ]; do
    c=$((2 + s + i))
    printf '%5d RR .%d min=1.00us avg=2.00us max=3.00us read(Gbits/sec)=0.001 write(Gbits/sec)=0.001 count=%d\n' $s $i $c
    if [ -n "$D" ] && [ $i -lt ${FAKE_FPERF_FILES:-$n} ]; then
      j=1
      while [ $j -le $c ]; do
        echo $((1000 * (s + 1) + j)) >> "$D/hugepage_thread_$i.txt"
        j=$((j + 1))
      done
    fi
    i=$((i + 1))
  done
  printf '%5d RR Total-Throughput read(Gbits/sec)=0.002 write(Gbits/sec)=0.002\n' $s
  [ $n -gt 1 ] && echo
  s=$((s + 1))
done
[ -n "$FAKE_FPERF_EXIT" ] && exit "$FAKE_FPERF_EXIT"
printf '\n---\n'
i=0
while [ $i -lt $n ]; do printf '%2d nr_conn=1 nr_zero_io_conn=0\n' $i; i=$((i + 1)); done
i=0
while [ $i -lt $n ]; do echo "exiting client: $i"; i=$((i + 1)); done
if [ -n "$E" ]; then
  echo "trace: all $(($(wc -l < "$E") - 1)) rows replayed"
fi
exit 0
"#;

/// The fakes, written once before any test spawns: a script being written while another thread forks
/// would make its exec fail with ETXTBSY. They live in a folder of the temp directory named by their
/// contents, made complete under another name and renamed into place, so that every run of these tests
/// shares one folder instead of leaving one behind each (a static is never dropped, so a `TempDir` would be).
fn fake_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let fakes = [
            ("sudo", SUDO),
            ("timeout", TIMEOUT),
            ("tpa", TPA),
            ("fperf", FPERF),
        ];
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&fakes, &mut hasher);
        let dir = std::env::temp_dir().join(format!(
            "fracflow-fperf-fakes-{:016x}",
            std::hash::Hasher::finish(&hasher)
        ));
        if fakes.iter().all(|(name, _)| dir.join(name).is_file()) {
            return dir;
        }
        let staging = tempfile::tempdir().expect("temp dir");
        for (name, text) in fakes {
            let path = staging.path().join(name);
            fs::write(&path, text).expect("write fake");
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        // Another test process may have renamed its own copy into place first: the same bytes, so either does.
        if fs::rename(staging.path(), &dir).is_err() {
            assert!(dir.join("fperf").is_file(), "cannot make {}", dir.display());
        }
        dir
    })
}

struct Bed {
    _dir: tempfile::TempDir,
    records: PathBuf,
    work: PathBuf,
    log: PathBuf,
}

fn bed() -> Bed {
    let dir = tempfile::tempdir().expect("temp dir");
    let records = dir.path().join("records");
    fs::create_dir(&records).expect("records dir");
    Bed {
        records,
        work: dir.path().join("work"),
        log: dir.path().join("logs/n2-d5.log"),
        _dir: dir,
    }
}

fn args(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_owned).collect()
}

fn invocation(bed: &Bed, fperf_args: &str, extra_env: &[(&str, &str)]) -> FperfInvocation {
    let bin = fake_bin();
    let mut inv = FperfInvocation::new(
        bin.join("tpa"),
        bin.join("fperf"),
        "enp33s0f1np1",
        "172.24.1.52",
        2888,
        args(fperf_args),
    );
    inv.sudo = vec!["sudo".to_owned(), "-n".to_owned()];
    inv.start_cpu = 3;
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    inv.spawn_env = vec![
        ("PATH".to_owned(), path),
        ("FAKE_DIR".to_owned(), bed.records.display().to_string()),
    ];
    inv.spawn_env.extend(
        extra_env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    inv
}

fn recorded(bed: &Bed, name: &str) -> Vec<String> {
    fs::read_to_string(bed.records.join(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .lines()
        .map(str::to_owned)
        .collect()
}

const CFG: &str = "tcp {tso = 0; } dpdk { socket-mem = 8192; mbuf_mem_size = 6GB; }";

#[test]
fn command_line_is_the_artifacts() {
    let bed = bed();
    let mut inv = invocation(&bed, "-t rr -d 5 -n 2 -m 4096 -X 4096 -R 64 -Z 1 -K 1", &[]);
    let cmd = inv.command(Path::new("/tmp/fe12345678")).expect("command");
    let tpa = fake_bin().join("tpa").display().to_string();
    let fperf = fake_bin().join("fperf").display().to_string();
    let expected: Vec<String> = [
        "sudo",
        "-n",
        "timeout",
        "-k",
        "15",
        "125",
        "env",
        "TPA_ID=client",
        "TPA_ETH_DEV=enp33s0f1np1",
        &format!("TPA_CFG={CFG}"),
        &tpa,
        "run",
        &fperf,
        "-c",
        "172.24.1.52",
        "-p",
        "2888",
        "-S",
        "3",
        "-t",
        "rr",
        "-d",
        "5",
        "-n",
        "2",
        "-m",
        "4096",
        "-X",
        "4096",
        "-R",
        "64",
        "-Z",
        "1",
        "-K",
        "1",
        "-L",
        "1",
        "-D",
        "/tmp/fe12345678",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    assert_eq!(cmd.argv(), expected);
    assert_eq!(cmd.timeout_s, 125);
    assert_eq!(cmd.env[0], ("TPA_ID".to_owned(), "client".to_owned()));

    // Root: no sudo; no latency log: no -L/-D.
    inv.sudo.clear();
    inv.latency_log = false;
    let cmd = inv.command(Path::new("/tmp/x")).expect("command");
    assert_eq!(cmd.program, "timeout");
    assert!(!cmd.args.iter().any(|a| a == "-L" || a == "-D"));

    // A trace: d = ceil(Σ sleep_time) = ceil(9.2) = 10, timeout d + 120 + d/4 = 132, -E after the template.
    let trace = bed.work.with_file_name("trace.csv");
    fs::write(
        &trace,
        "app,sleep_time,request_size,response_size\n1,4.5,128,64\n3,4.7,1088,1024\n",
    )
    .expect("trace");
    let mut inv = invocation(&bed, "-t rr -n 1 -C 1 -Z 1", &[]);
    inv.trace = Some(trace.clone());
    let cmd = inv.command(Path::new("/tmp/fe0")).expect("command");
    assert_eq!(cmd.timeout_s, 132);
    assert_eq!(cmd.args[4], "132");
    let tail: Vec<&str> = cmd
        .args
        .iter()
        .rev()
        .take(6)
        .rev()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        [
            "-E",
            trace.to_str().expect("utf-8"),
            "-L",
            "1",
            "-D",
            "/tmp/fe0"
        ]
    );

    // `duration_s` must agree with the template's -d.
    let mut inv = invocation(&bed, "-t rr -d 5", &[]);
    inv.duration_s = Some(6);
    assert!(inv.command(Path::new("/tmp/x")).is_err());
}

#[test]
fn complete_run_is_published_with_samples_cut_by_skip() {
    let bed = bed();
    let mut inv = invocation(&bed, "-t rr -d 5 -n 2 -m 4096 -X 4096 -R 64 -Z 1 -K 1", &[]);
    inv.skip_s = 2;
    let result = run_fperf(&inv, &bed.work, &bed.log, &Cancel::new()).expect("runs");
    assert_eq!(result.status, FperfStatus::Ok, "{}", result.status.label());
    assert_eq!(result.log, bed.log);
    assert!(bed.log.exists());
    assert!(!bed.log.with_extension("log.part").exists());

    // What each layer saw.
    assert_eq!(recorded(&bed, "sudo.argv")[0], "-n");
    assert_eq!(
        recorded(&bed, "timeout.argv")[..7],
        [
            "-k",
            "15",
            "125",
            "env",
            "TPA_ID=client",
            "TPA_ETH_DEV=enp33s0f1np1",
            &format!("TPA_CFG={CFG}")
        ]
    );
    assert_eq!(recorded(&bed, "tpa.argv")[0], "run");
    let fperf = recorded(&bed, "fperf.argv");
    assert_eq!(
        fperf[..fperf.len() - 1],
        args("-c 172.24.1.52 -p 2888 -S 3 -t rr -d 5 -n 2 -m 4096 -X 4096 -R 64 -Z 1 -K 1 -L 1 -D")
            [..]
    );
    let log_dir = PathBuf::from(&fperf[fperf.len() - 1]);
    assert!(
        log_dir.starts_with("/tmp") && log_dir.as_os_str().len() <= 16,
        "{log_dir:?}"
    );
    assert!(!log_dir.exists(), "the -D directory is removed");
    assert_eq!(
        recorded(&bed, "fperf.env"),
        [
            "TPA_ID=client",
            "TPA_ETH_DEV=enp33s0f1np1",
            &format!("TPA_CFG={CFG}")
        ]
    );

    // Thread i wrote Σ_s (2 + s + i) lines; skip 2 drops (2 + i) + (3 + i).
    assert_eq!(result.skipped.get(&0), Some(&5));
    assert_eq!(result.skipped.get(&1), Some(&7));
    let of = |t: u32| {
        result
            .samples
            .iter()
            .filter(|s| s.thread == t)
            .collect::<Vec<_>>()
    };
    let (t0, t1) = (of(0), of(1));
    assert_eq!((t0.len(), t1.len()), (20 - 5, 25 - 7));
    // The first kept sample is second 2's first request.
    assert_eq!((t0[0].seq, t0[0].latency_last_piece_ns), (5, 3001));
    assert_eq!((t1[0].seq, t1[0].latency_last_piece_ns), (7, 3001));
    assert!(
        result
            .samples
            .iter()
            .all(|s| s.latency_ns == s.latency_last_piece_ns
                && s.t_send_ns == 0
                && s.slot == 1
                && s.request_bytes == 4096
                && s.response_bytes == 64)
    );
    assert_eq!(result.sample_files.len(), 2);
    assert!(bed.work.join("hugepage_thread_1.txt").exists());

    // The per-second records: counts from the log, percentiles from the attributed lines.
    assert_eq!(result.seconds.len(), 5);
    let s3 = &result.seconds[3];
    assert_eq!(
        (s3.count, s3.warmup, s3.min_ns, s3.max_ns),
        (5 + 6, false, 1000, 3000)
    );
    assert_eq!(s3.threads[0].p99_ns, 4005);
    assert!(result.seconds[1].warmup);

    // Written like the embedded client's samples.
    let parquet = bed.work.join("samples.parquet");
    result.write_samples(&parquet).expect("parquet");
    let back = fracflow_client::read_samples_parquet(&parquet).expect("read back");
    assert_eq!(back, result.samples);
}

#[test]
fn trace_run_needs_the_replayed_line_and_gets_the_longer_timeout() {
    let bed = bed();
    let trace = bed.work.with_file_name("t.csv");
    fs::write(
        &trace,
        "app,sleep_time,request_size,response_size\n1,0.5,128,64\n3,1.0,1088,1024\n5,1.2,128,64\n",
    )
    .expect("trace");
    let mut inv = invocation(&bed, "-t rr -n 1 -C 1 -Z 1", &[]);
    inv.trace = Some(trace);
    let result = run_fperf(&inv, &bed.work, &bed.log, &Cancel::new()).expect("runs");
    assert_eq!(result.status, FperfStatus::Ok, "{}", result.status.label());
    // d = ceil(2.7) = 3: 3 + 120 + 0.
    assert_eq!(recorded(&bed, "timeout.argv")[2], "123");
    assert_eq!(
        result.parsed.trace.as_deref(),
        Some("trace: all 3 rows replayed")
    );
}

#[test]
fn early_exit_is_incomplete_and_not_published() {
    let bed = bed();
    fs::create_dir_all(bed.log.parent().expect("parent")).expect("log dir");
    fs::write(&bed.log, "an earlier attempt's log\n").expect("stale log");
    let inv = invocation(&bed, "-t rr -d 5 -n 2", &[("FAKE_FPERF_SECONDS", "2")]);
    let result = run_fperf(&inv, &bed.work, &bed.log, &Cancel::new()).expect("runs");
    match &result.status {
        FperfStatus::Incomplete { reason } => assert!(reason.contains("second 4"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(result.status.label().starts_with("incomplete: "));
    assert!(!bed.log.exists(), "no final log, and the stale one is gone");
    let part = PathBuf::from(format!("{}.part", bed.log.display()));
    assert_eq!(result.log, part);
    let kept = fs::read_to_string(&part).expect("the .part is kept");
    assert!(kept.contains("1 RR Total-Throughput") && !kept.contains("4 RR Total"));
    // What fperf left is still parsed: two seconds of samples.
    assert_eq!(result.parsed.totals.len(), 2);
    assert_eq!(result.samples.len(), (2 + 3) + (3 + 4));
}

#[test]
fn exit_124_is_timed_out() {
    let bed = bed();
    let inv = invocation(&bed, "-t rr -d 5", &[("FAKE_FPERF_EXIT", "124")]);
    let result = run_fperf(&inv, &bed.work, &bed.log, &Cancel::new()).expect("runs");
    assert_eq!(result.status, FperfStatus::TimedOut);
    assert_eq!(result.status.label(), "timed out");
    assert!(!bed.log.exists());
}

#[test]
fn other_exit_codes_fail() {
    let bed = bed();
    let inv = invocation(&bed, "-t rr -d 5", &[("FAKE_FPERF_EXIT", "3")]);
    let result = run_fperf(&inv, &bed.work, &bed.log, &Cancel::new()).expect("runs");
    assert!(
        matches!(&result.status, FperfStatus::Failed { reason } if reason.contains("code 3")),
        "{:?}",
        result.status
    );
    assert!(!bed.log.exists());
}

#[test]
fn sudo_refusing_is_reported_clearly() {
    let bed = bed();
    let inv = invocation(&bed, "-t rr -d 5", &[("FAKE_SUDO_REFUSE", "1")]);
    let result = run_fperf(&inv, &bed.work, &bed.log, &Cancel::new()).expect("runs");
    let FperfStatus::Failed { reason } = &result.status else {
        panic!("{:?}", result.status)
    };
    assert!(reason.contains("sudo refused"), "{reason}");
    assert!(reason.contains("a password is required"), "{reason}");
    assert!(reason.contains("sudo -n true"), "{reason}");
    assert!(!bed.records.join("fperf.argv").exists(), "fperf never ran");
    assert!(!bed.log.exists());
    assert!(
        fs::read_to_string(&result.stderr_log)
            .expect("stderr")
            .contains("password")
    );
}

#[test]
fn a_thread_without_latency_file_makes_the_run_incomplete() {
    let bed = bed();
    let inv = invocation(&bed, "-t rr -d 3 -n 2", &[("FAKE_FPERF_FILES", "1")]);
    let result = run_fperf(&inv, &bed.work, &bed.log, &Cancel::new()).expect("runs");
    let FperfStatus::Incomplete { reason } = &result.status else {
        panic!("{:?}", result.status)
    };
    assert!(reason.contains("threads [0]"), "{reason}");
    assert!(!bed.log.exists());
}

#[test]
fn skip_beyond_the_run_leaves_no_latency() {
    let bed = bed();
    let mut inv = invocation(&bed, "-t rr -d 3 -n 1", &[]);
    inv.skip_s = 3;
    let result = run_fperf(&inv, &bed.work, &bed.log, &Cancel::new()).expect("runs");
    assert!(
        matches!(&result.status, FperfStatus::Incomplete { reason } if reason.contains("no latency after the warm-up")),
        "{:?}",
        result.status
    );
    assert_eq!(result.skipped.get(&0), Some(&(2 + 3 + 4)));
    assert!(result.samples.is_empty());
}
