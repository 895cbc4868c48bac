//! Per-unit arithmetic through the device, against the models, for the three
//! framings and sizes from 128 B to 65 472 B.

use std::net::TcpStream;

use crate::common::{FRAMINGS, Framing, Rng, connect, device, header, load, read_n, send_framed};
use crate::models;

/// Request sizes (header included) every unit is checked at.
const SIZES: [usize; 8] = [128, 192, 1024, 4096, 8192, 16_448, 24_640, 65_472];

/// Sends one request and reads `answer_len` bytes.
fn ask(
    stream: &mut TcpStream,
    workload: u16,
    top: u16,
    payload: &[u8],
    framing: Framing,
    answer_len: usize,
) -> (Vec<u8>, u16) {
    let head = header(workload, payload.len(), top, framing);
    send_framed(stream, &head, payload, framing);
    let top_config = u16::from_le_bytes([head[60], head[61]]);
    (read_n(stream, answer_len), top_config)
}

fn f32_payload(values: &[f32]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|v| v.to_bits().to_le_bytes())
        .collect()
}

#[test]
fn top_k_order_and_mask() {
    let (dev, _log) = device();
    let mut rng = Rng::new(1);
    for framing in FRAMINGS {
        // One connection per framing: any stray byte would shift later answers.
        let mut stream = connect(dev.addr());
        for size in SIZES {
            let n = (size - 64) / 4;
            let shapes: Vec<(&str, Vec<u32>)> = vec![
                ("random", (0..n).map(|_| rng.next_u32()).collect()),
                ("ties", (0..n).map(|_| 0x8000_0000 | rng.below(3)).collect()),
                ("ascending", (0..n as u32).collect()),
                ("descending", (0..n as u32).rev().collect()),
                ("equal", vec![0xdead_beef; n]),
                (
                    // Data lines that look like headers stay data.
                    "header-like",
                    (0..n)
                        .map(|i| {
                            if i % 16 < 14 {
                                0xffff_ffff
                            } else {
                                rng.next_u32()
                            }
                        })
                        .collect(),
                ),
            ];
            for (shape, words) in shapes {
                let payload: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
                for top in [0xffff, 0x0000, rng.next_u32() as u16, 0xa5a5] {
                    let (answer, top_config) = ask(&mut stream, 0, top, &payload, framing, 64);
                    assert_eq!(
                        answer,
                        models::top_k(&payload, top_config).to_vec(),
                        "top_k {shape} {size} B {framing:?} top config {top_config:#06x}"
                    );
                }
            }
        }
    }
}

#[test]
fn top_k_worked_example_b_and_header_only() {
    let (dev, _log) = device();
    // docs/frac.md §2.6 example B: header alone (FIRST only), counter words.
    let mut stream = connect(dev.addr());
    let payload: Vec<u8> = (0..16u32)
        .flat_map(|i| (0xaaaa_aaaa + i).to_le_bytes())
        .collect();
    let (answer, top) = ask(&mut stream, 0, 0xffff, &payload, Framing::HeaderAlone, 64);
    assert_eq!(top, 0xfffd);
    let mut expected = Vec::new();
    for j in 0..16u32 {
        let w = if j == 1 { 0 } else { 0xaaaa_aab9 - j };
        expected.extend_from_slice(&w.to_le_bytes());
    }
    assert_eq!(answer, expected);
    // A header-only request gets one line of zeros.
    let (answer, _) = ask(&mut stream, 0, 0xffff, &[], Framing::Whole, 64);
    assert_eq!(answer, vec![0u8; 64]);
    // Workload ids beyond 3 fall through to slot 0.
    let (answer, top) = ask(&mut stream, 0x1234, 0xffff, &payload, Framing::Whole, 64);
    assert_eq!(answer, models::top_k(&payload, top).to_vec());
}

fn log_values(rng: &mut Rng, n: usize) -> Vec<f32> {
    const SPECIALS: [f32; 12] = [
        0.0,
        1.0,
        0.5,
        -0.0,
        1e-40, // subnormal: flushed to zero
        -0.25,
        1.5,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e-30,
        0.999_999_9,
    ];
    (0..n)
        .map(|i| {
            if i % 37 == 5 {
                SPECIALS[(i / 37) % SPECIALS.len()]
            } else {
                // fperf's -r shape: k / 2^24 in (0, 1).
                (1 + rng.below((1 << 24) - 1)) as f32 / (1u32 << 24) as f32
            }
        })
        .collect()
}

#[test]
fn log_within_a_few_ulp() {
    let (dev, _log) = device();
    load(&dev, 1, "log");
    let mut rng = Rng::new(2);
    let mut worst = 0;
    for framing in FRAMINGS {
        let mut stream = connect(dev.addr());
        for size in SIZES {
            let values = log_values(&mut rng, (size - 64) / 4);
            let payload = f32_payload(&values);
            let (answer, _) = ask(&mut stream, 1, 0xffff, &payload, framing, size - 64);
            let expected = models::log(&payload);
            for (i, (got, want)) in answer.chunks_exact(4).zip(&expected).enumerate() {
                let got = f32::from_bits(u32::from_le_bytes([got[0], got[1], got[2], got[3]]));
                let d = models::ulps(got, *want);
                assert!(
                    d <= 4,
                    "log({}) = {got}, expected {want} ({d} ulp) at {i}, {size} B {framing:?}",
                    values[i]
                );
                worst = worst.max(d);
            }
        }
        // A header-only request is consumed without an answer: the next
        // request's answer is the next thing on the connection.
        send_framed(
            &mut stream,
            &header(1, 0, 0xffff, Framing::Whole),
            &[],
            Framing::Whole,
        );
        let payload = f32_payload(&[0.5; 16]);
        let (answer, _) = ask(&mut stream, 1, 0xffff, &payload, Framing::Whole, 64);
        assert_eq!(answer, vec![0u8; 64], "logit(0.5) = 0 in every lane");
    }
    assert!(worst <= 4);
}

#[test]
fn norm_bit_exact() {
    let (dev, log) = device();
    load(&dev, 3, "norm");
    let mut rng = Rng::new(3);
    for framing in FRAMINGS {
        let mut stream = connect(dev.addr());
        for size in SIZES.into_iter().filter(|&s| s <= 16_448) {
            let n = (size - 64) / 4;
            let shapes: Vec<(&str, Vec<f32>)> = vec![
                (
                    "range",
                    (0..n)
                        .map(|_| (rng.next_u32() as f32 / u32::MAX as f32 - 0.5) * 2000.0)
                        .collect(),
                ),
                (
                    "narrow",
                    (0..n).map(|i| 1.0 + (i % 7) as f32 * 1e-7).collect(),
                ),
                (
                    "integers",
                    (0..n).map(|_| (rng.below(100)) as f32).collect(),
                ),
                (
                    "min-max at ends",
                    (0..n)
                        .map(|i| {
                            if i == 0 {
                                -5.0
                            } else if i == n - 1 {
                                5.0
                            } else {
                                0.25
                            }
                        })
                        .collect(),
                ),
                ("all equal", vec![3.5; n]),
                (
                    "tiny",
                    (0..n)
                        .map(|i| f32::MIN_POSITIVE * (1 + i % 3) as f32)
                        .collect(),
                ),
            ];
            for (shape, values) in shapes {
                let payload = f32_payload(&values);
                let (answer, _) = ask(&mut stream, 3, 0xffff, &payload, framing, size - 64);
                let expected = models::norm(&payload);
                for (i, (got, want)) in answer.chunks_exact(4).zip(&expected).enumerate() {
                    let got = u32::from_le_bytes([got[0], got[1], got[2], got[3]]);
                    let both_nan = f32::from_bits(got).is_nan() && f32::from_bits(*want).is_nan();
                    assert!(
                        got == *want || both_nan,
                        "norm {shape} {size} B {framing:?} lane {i}: {:e} vs {:e}",
                        f32::from_bits(got),
                        f32::from_bits(*want)
                    );
                }
                if shape == "all equal" {
                    assert!(
                        f32::from_bits(expected[0]).is_nan(),
                        "all-equal input gives NaN"
                    );
                }
            }
        }
    }
    // More than 256 data lines: the board's norm never answers; the emulator
    // closes that connection with a log line.
    let mut stream = connect(dev.addr());
    let payload = f32_payload(&vec![1.0; 257 * 16]);
    send_framed(
        &mut stream,
        &header(3, payload.len(), 0xffff, Framing::Whole),
        &payload,
        Framing::Whole,
    );
    assert!(crate::common::closed_by_device(&mut stream));
    crate::common::wait_for_log(&log, "no answer");
    crate::common::assert_served(dev.addr());
}

#[test]
fn echo_and_or() {
    let (dev, _log) = device();
    load(&dev, 1, "pattern_slot");
    load(&dev, 2, "or_slot");
    let mut rng = Rng::new(4);
    for framing in FRAMINGS {
        let mut stream = connect(dev.addr());
        for size in std::iter::once(64).chain(SIZES) {
            let payload = rng.bytes(size - 64);
            let head = header(1, payload.len(), 0xffff, framing);
            let (answer, _) = ask(&mut stream, 1, 0xffff, &payload, framing, size);
            assert_eq!(&answer[..64], &head[..], "pattern_slot echoes the header");
            assert_eq!(
                &answer[64..],
                &payload[..],
                "pattern_slot {size} B {framing:?}"
            );
            let (answer, _) = ask(&mut stream, 2, 0xffff, &payload, framing, size);
            assert!(
                answer.iter().all(|&b| b == 0xff),
                "or_slot {size} B {framing:?}"
            );
        }
    }
}

#[test]
fn cnn_matches_the_rust_model() {
    let (dev, _log) = device();
    load(&dev, 2, "cnn");
    let mut rng = Rng::new(5);
    // 24 576 B is fperf's mixed-workload request (header included), 24 640 B
    // the trace's (24 576 payload bytes: one whole 64 x 64 x 3 image).
    for size in [128, 1024, 24_576, 24_640, 65_472] {
        let payload = rng.bytes(size - 64);
        let expected = models::cnn(&payload);
        assert!(
            expected[..20].iter().any(|&b| b != 0),
            "scores are not all zero"
        );
        for framing in FRAMINGS {
            let mut stream = connect(dev.addr());
            let started = std::time::Instant::now();
            let (answer, _) = ask(&mut stream, 2, 0xffff, &payload, framing, 64);
            let took = started.elapsed();
            assert_eq!(
                answer,
                expected.to_vec(),
                "cnn {size} B {framing:?} ({took:?})"
            );
        }
    }
}

#[test]
fn concurrent_clients_on_every_slot() {
    let (dev, _log) = device();
    let addr = dev.addr();
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            std::thread::spawn(move || {
                let mut rng = Rng::new(100 + t);
                let mut stream = connect(addr);
                for i in 0..50 {
                    let slot = ((t + i) % 4) as u16;
                    let lines = 1 + rng.below(63) as usize;
                    let payload = rng.bytes(64 * lines);
                    let (answer, top) =
                        ask(&mut stream, slot, 0xffff, &payload, Framing::Whole, 64);
                    assert_eq!(answer, models::top_k(&payload, top).to_vec());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }
}
