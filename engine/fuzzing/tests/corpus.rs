//! Replays every committed fuzz input through its target on the stable toolchain: each file of
//! `fuzz/corpus/<target>/` (the seeds and what campaigns kept) and `fuzz/regressions/<target>/` (inputs that once
//! broke an invariant). Every target needs a corpus directory, and `fuzz/fuzz_targets/` holds exactly the
//! targets `fracflow_fuzzing::TARGETS` lists.

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_committed_input_keeps_its_targets_invariants() {
    let mut failures = Vec::new();
    let mut replayed = 0;
    for &(name, target) in fracflow_fuzzing::TARGETS {
        let corpus = fuzz_dir().join("corpus").join(name);
        let seeds = files(&corpus);
        if seeds.is_empty() {
            failures.push(format!("{name}: no corpus in {}", corpus.display()));
        }
        let regressions = files(&fuzz_dir().join("regressions").join(name));
        for file in seeds.iter().chain(&regressions) {
            let bytes = match std::fs::read(file) {
                Ok(bytes) => bytes,
                Err(e) => {
                    failures.push(format!("{}: {e}", file.display()));
                    continue;
                }
            };
            replayed += 1;
            if catch_unwind(AssertUnwindSafe(|| target(&bytes))).is_err() {
                failures.push(format!("{name}: {} breaks an invariant", file.display()));
            }
        }
    }
    fracflow_fuzzing::remove_scratch();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(replayed >= fracflow_fuzzing::TARGETS.len());
}

#[test]
fn the_fuzz_project_has_one_target_file_per_target() {
    let listed: BTreeSet<String> = fracflow_fuzzing::TARGETS
        .iter()
        .map(|(name, _)| (*name).to_owned())
        .collect();
    let files: BTreeSet<String> = files(&fuzz_dir().join("fuzz_targets"))
        .iter()
        .filter_map(|path| Some(path.file_stem()?.to_str()?.to_owned()))
        .collect();
    assert_eq!(files, listed);
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap_or_default();
    for name in &listed {
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "fuzz/Cargo.toml has no [[bin]] {name}"
        );
    }
}

/// Writes the binary seeds (frames, images, Parquet files) from the crates' own encoders into `fuzz/corpus/`;
/// the text seeds are copies of the repository's files and fixtures. Not a check: run it by hand after a format
/// changes (`cargo test -p fracflow-fuzzing --test corpus -- --ignored write_the_binary_seeds`), then commit.
#[test]
#[ignore = "writes into fuzz/corpus/; run by hand when a format changes"]
fn write_the_binary_seeds() -> Result<(), Box<dyn std::error::Error>> {
    use fracflow_emulator::{
        BuildId, DeviceStatus, FullImage, ImageKind, PartialImage, SlotStatus,
    };
    use fracflow_proto::{
        ControllerRequest, ControllerResponse, ErrorCode, FracFraming, QueryStatus, RequestHeader,
        TestInfo,
    };

    let corpus = fuzz_dir().join("corpus");
    let write = |target: &str, name: &str, bytes: &[u8]| -> std::io::Result<()> {
        let dir = corpus.join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(name), bytes)
    };
    let requests = [
        ControllerRequest::WriteHbm {
            addr: 0x1000_4000,
            data: (0..100u8).collect(),
        },
        ControllerRequest::ReadHbm {
            addr: 0x1000_4000,
            len: 64,
        },
        ControllerRequest::ReconfIcap {
            slot: 1,
            addr: 0x1000_4000,
            len: 200,
        },
        ControllerRequest::QueryStatus,
    ];
    let top_k = FracFraming::new(0, 1088, 512).build()?.into_bytes();
    let one_piece = FracFraming::new(3, 128, 1024).build()?.into_bytes();
    let mut filler_first = vec![fracflow_proto::FILLER_BYTE; 64];
    filler_first[60] = 0xfe;
    filler_first.extend_from_slice(&one_piece);
    let mut mixed = top_k.clone();
    for request in &requests {
        mixed.extend(request.encode());
    }
    let header_only =
        RequestHeader::accelerator(2, 4096, fracflow_proto::Flags::FIRST_LAST).encode();
    // Cut counts and positions first (proto_reassembly's layout), then the stream.
    let with_cuts = |cuts: &[u16], stream: &[u8]| {
        let mut out = vec![cuts.len() as u8];
        for cut in cuts {
            out.extend_from_slice(&cut.to_le_bytes());
        }
        out.extend_from_slice(stream);
        out
    };
    write(
        "proto_reassembly",
        "top_k_pieces",
        &with_cuts(&[512, 1024], &top_k),
    )?;
    write(
        "proto_reassembly",
        "mixed_stream",
        &with_cuts(&[1, 63, 64, 700, 1500], &mixed),
    )?;
    write(
        "proto_reassembly",
        "filler_then_request",
        &with_cuts(&[64], &filler_first),
    )?;
    write(
        "proto_reassembly",
        "header_only_last",
        &with_cuts(&[], &header_only),
    )?;
    for (name, request) in ["write_hbm", "read_hbm", "reconf_icap", "query_status"]
        .iter()
        .zip(&requests)
    {
        write("proto_controller", name, &request.body())?;
    }
    let mut lines = QueryStatus {
        query_result: ErrorCode::Ok,
        reconf_active: false,
        last_slot_id: 1,
        last_error: ErrorCode::Ok,
        icap_avail: true,
        prdone_seen: true,
        prerror_seen: false,
        last_cycles: 812_345,
        active_cycles: 0,
    }
    .encode()
    .to_vec();
    lines.extend(ControllerResponse::Status(ErrorCode::Addr).encode());
    lines.extend(TestInfo::rr(1024, 1024, 64, 1).encode());
    lines.extend(header_only);
    write("proto_controller", "answer_lines", &lines)?;

    let bypass = FullImage::Bypass.encode();
    let partial = PartialImage {
        cell: 1,
        rm_id: 4,
        build_id: BuildId([7; 32]),
        unit: "norm".to_owned(),
        plugin: b"\x7fELF not really a plugin".to_vec(),
    }
    .encode();
    let mut padded = partial.clone();
    padded.extend_from_slice(&[0, 0]);
    let unsealed = &partial[..partial.len() - 32];
    let framed = fracflow_proto::bitstream::make_bit_file(
        "frac",
        "xcu280",
        "2026/12/02",
        "04:00:00",
        &bypass,
    );
    for (name, mode, bytes) in [
        ("bypass", 0u8, bypass.as_slice()),
        ("partial_padded", 2, &padded),
        ("partial_unsealed", 3, unsealed),
        ("bit_framed_bypass", 4, &framed),
    ] {
        let mut seed = vec![mode];
        seed.extend_from_slice(bytes);
        write("device_image", name, &seed)?;
    }

    let mut program = format!("PROGRAM {}\n", bypass.len()).into_bytes();
    program.extend_from_slice(&bypass);
    program.extend_from_slice(b"STATUS\n");
    write("management_channel", "program_bypass_then_status", &program)?;
    write("management_channel", "status", b"STATUS\n")?;
    write("management_channel", "short_image", b"PROGRAM 5\nabc")?;
    write("management_channel", "unknown", b"HELLO device\n")?;

    let status = DeviceStatus {
        image: ImageKind::Design,
        build_id: Some("ab".repeat(32)),
        slots: vec![SlotStatus {
            slot: 0,
            rm_id: 0,
            unit: "top_k".to_owned(),
        }],
    };
    write(
        "client_replies",
        "status",
        format!("\x00OK {}\n", serde_json::to_string(&status)?).as_bytes(),
    )?;
    write(
        "client_replies",
        "program",
        format!("\x01OK bypass {}\n", FullImage::bypass_build_id()).as_bytes(),
    )?;
    let mut load = vec![2u8];
    for _ in 0..5 {
        load.extend(ControllerResponse::Status(ErrorCode::Ok).encode());
    }
    load.extend_from_slice(&lines[..64]);
    write("client_replies", "load_partial", &load)?;
    let mut or_slot = vec![3u8];
    or_slot.extend_from_slice(&[0xff; 128]);
    write("client_replies", "probe_or_slot", &or_slot)?;

    let samples: Vec<fracflow_client::Sample> = (0..40u32)
        .map(|i| fracflow_client::Sample {
            thread: i % 3,
            seq: u64::from(i / 3),
            t_send_ns: u64::from(i) * 25_000_000,
            latency_ns: 4_000 + u64::from(i % 7) * 300,
            latency_last_piece_ns: 3_500 + u64::from(i % 7) * 300,
            slot: (i % 4) as u16,
            request_bytes: 1088,
            response_bytes: 64,
        })
        .collect();
    let scratch = tempfile::tempdir()?;
    for (name, rows) in [
        ("forty_rows", &samples[..]),
        ("one_row", &samples[..1]),
        ("empty", &samples[..0]),
    ] {
        let path = scratch.path().join(name);
        fracflow_client::write_samples_parquet(&path, rows)?;
        write(
            "samples_parquet",
            &format!("{name}.parquet"),
            &std::fs::read(&path)?,
        )?;
    }

    // The sidecar of the fixed Parquet file the target writes, behind each mode byte, and cut short.
    let sidecar =
        fracflow_fuzzing::by_thread_sidecar().ok_or("the sidecar seed was not written")?;
    for (name, mode) in [
        ("sound", 0u8),
        ("resealed", 1),
        ("rechecked", 2),
        ("histogram", 4),
        ("trace", 8),
    ] {
        let mut input = vec![mode];
        input.extend_from_slice(&sidecar);
        write("samples_by_thread", name, &input)?;
    }
    let mut truncated = vec![0u8];
    truncated.extend_from_slice(&sidecar[..sidecar.len() / 2]);
    write("samples_by_thread", "truncated", &truncated)?;
    Ok(())
}
