//! A functional check of what a slot computes, like the artifact's `checkfuncs` (docs/frac.md §8).
//!
//! The slot is identified first from one probe request, then sent a few requests whose answers are
//! compared with references computed here from each unit's definition (docs/frac.md §2.5), not with the
//! emulator's kernels: a real board and the emulator must both agree with the definition.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The units a slot can answer as, re-exported so callers need not depend on the protocol crate.
pub use fracflow_proto::Unit;
use fracflow_proto::{Flags, RequestHeader, SLOT_COUNT};

/// Bytes in one line of a request or answer (docs/frac.md §2.2).
const LINE: usize = 64;
/// Words in one line.
const WORDS: usize = LINE / 4;
/// How far the Xilinx log core may be off (docs/frac.md §2.5): 2 ulp, or 2^-24 absolute near 0.
const LOG_ULPS: u32 = 2;
const LOG_ABSOLUTE: f32 = 1.0 / 16_777_216.0;

/// Why a slot could not be checked at all (as opposed to a check that failed).
#[derive(Debug)]
pub enum SlotCheckError {
    NoSuchSlot {
        slot: u8,
    },
    Io {
        doing: String,
        source: std::io::Error,
    },
}

impl std::fmt::Display for SlotCheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlotCheckError::NoSuchSlot { slot } => write!(
                f,
                "slot {slot} does not exist (a device has slots 0 to {})",
                SLOT_COUNT - 1
            ),
            SlotCheckError::Io { doing, source } => write!(f, "{doing}: {source}"),
        }
    }
}

impl std::error::Error for SlotCheckError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SlotCheckError::NoSuchSlot { .. } => None,
            SlotCheckError::Io { source, .. } => Some(source),
        }
    }
}

/// One request of a check and whether the answer matched its reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckOutcome {
    /// What the request tests, e.g. `top_k masked by 0xa5a7`.
    pub name: String,
    pub passed: bool,
    /// Why it failed (empty when it passed).
    pub detail: String,
}

/// What a slot answers as, and whether it computes what that unit should.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotVerdict {
    pub slot: u8,
    /// The unit the probe's answer identifies; `None` when no unit answers like that.
    pub unit: Option<Unit>,
    pub checks: Vec<CheckOutcome>,
}

impl SlotVerdict {
    /// A slot passes when it answers as a unit and every check of that unit passed.
    #[must_use]
    pub fn passed(&self) -> bool {
        self.unit.is_some() && self.checks.iter().all(|c| c.passed)
    }
}

/// The unit named as in the artifact (`top_k`, `log`, `norm`, `cnn`, `pattern_slot`, `or_slot`) or by
/// one of checkfuncs' aliases (docs/frac.md §8).
#[must_use]
pub fn unit_by_name(name: &str) -> Option<Unit> {
    let canonical = match name {
        "topk" => "top_k",
        "logit" => "log",
        "pattern" | "echo" => "pattern_slot",
        "or" => "or_slot",
        other => other,
    };
    Unit::ALL.into_iter().find(|u| u.name() == canonical)
}

/// Identifies the unit in `slot` and runs its checks, each request on a fresh connection (so a slot that
/// swallows one request, as log and norm do with a header alone, cannot confuse the next).
pub fn check_slot(
    addr: SocketAddr,
    slot: u8,
    timeout: Duration,
) -> Result<SlotVerdict, SlotCheckError> {
    if slot >= SLOT_COUNT {
        return Err(SlotCheckError::NoSuchSlot { slot });
    }
    let probe =
        fracflow_emulator::client::probe_with_timeout(addr, &[slot], timeout).map_err(|e| {
            SlotCheckError::Io {
                doing: format!("probing slot {slot} at {addr}"),
                source: std::io::Error::other(e.to_string()),
            }
        })?;
    let unit = probe.first().and_then(|p| p.unit);
    let checks = match unit {
        Some(unit) => checks_for(unit)
            .into_iter()
            .map(|check| run_check(addr, slot, timeout, &check))
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    Ok(SlotVerdict { slot, unit, checks })
}

/// One request and the answer it must get.
struct Check {
    name: String,
    request: Vec<u8>,
    expected: Expected,
}

enum Expected {
    /// Byte for byte.
    Exact(Vec<u8>),
    /// Per f32 word, within [`LOG_ULPS`] or [`LOG_ABSOLUTE`].
    Logit(Vec<f32>),
}

impl Expected {
    fn len(&self) -> usize {
        match self {
            Expected::Exact(bytes) => bytes.len(),
            Expected::Logit(values) => values.len() * 4,
        }
    }
}

fn request(slot: u8, top_config: u16, data: &[u8]) -> Vec<u8> {
    let size = u32::try_from(LINE + data.len()).unwrap_or(u32::MAX);
    let header = RequestHeader {
        top_config,
        ..RequestHeader::accelerator(u16::from(slot), size, Flags::FIRST_LAST)
    };
    let mut bytes = header.encode().to_vec();
    bytes.extend_from_slice(data);
    bytes
}

fn words_to_bytes(words: impl IntoIterator<Item = u32>) -> Vec<u8> {
    words.into_iter().flat_map(u32::to_le_bytes).collect()
}

/// A fixed pseudo-random sequence (xorshift32), so a failure can be reproduced exactly.
fn pseudo_random(seed: u32, count: usize) -> Vec<u32> {
    let mut state = seed.max(1);
    (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        })
        .collect()
}

/// top_k's answer: the 16 largest words (unsigned), largest first, zeros where fewer than 16, word `j`
/// zeroed where bit `j` of the top config is clear (docs/frac.md §2.2, §2.5).
#[must_use]
pub fn top_k_reference(data: &[u32], top_config: u16) -> [u32; WORDS] {
    let mut sorted = data.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let mut answer = [0u32; WORDS];
    for (j, word) in answer.iter_mut().enumerate() {
        let kept = top_config & (1 << j) != 0;
        *word = if kept {
            sorted.get(j).copied().unwrap_or(0)
        } else {
            0
        };
    }
    answer
}

/// log's answer for one value: ln(x / (1 − x)) in single precision (docs/frac.md §2.5).
#[must_use]
pub fn logit_reference(x: f32) -> f32 {
    (x / (1.0 - x)).ln()
}

/// norm's answer: (x − min) / (max − min) with min and max over every value, single precision.
#[must_use]
pub fn norm_reference(values: &[f32]) -> Vec<f32> {
    let min = values.iter().copied().fold(f32::INFINITY, f32::min);
    let max = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    values.iter().map(|&x| (x - min) / (max - min)).collect()
}

/// The cnn's image: 64 x 64 pixels, three int16 channels (hw/accelerators/cnn/README.md).
const CNN_SIDE: usize = 64;
const CNN_INPUT_VALUES: usize = CNN_SIDE * CNN_SIDE * 3;
const CNN_CLASSES: usize = 10;

/// The parameter formula of hw/accelerators/cnn/README.md ("Parameters").
fn cnn_mix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

fn cnn_weight(tag: u32, index: usize) -> i64 {
    i64::from(cnn_mix32((tag << 24) | index as u32) % 15) - 7
}

fn cnn_bias(tag: u32, index: usize) -> i64 {
    i64::from(cnn_mix32((tag << 24) | index as u32) % 2049) - 1024
}

/// `floor(value / 2^shift)`.
fn floor_shift(value: i64, shift: u32) -> i64 {
    value.div_euclid(1 << shift)
}

/// conv 3x3 (zero padding 1) + bias, requantised with ReLU and saturation, then 2x2 max pooling;
/// maps are `[y][x][c]` (hw/accelerators/cnn/README.md, "Network").
fn cnn_conv_pool(
    input: &[i64],
    side: usize,
    channels_in: usize,
    channels_out: usize,
    tags: (u32, u32),
    shift: u32,
) -> Vec<i64> {
    let conv = |y: usize, x: usize, co: usize| {
        let mut acc = cnn_bias(tags.1, co);
        for ky in 0..3 {
            for kx in 0..3 {
                let (Some(iy), Some(ix)) = ((y + ky).checked_sub(1), (x + kx).checked_sub(1))
                else {
                    continue;
                };
                if iy >= side || ix >= side {
                    continue;
                }
                for ci in 0..channels_in {
                    let weight = cnn_weight(tags.0, ((co * channels_in + ci) * 3 + ky) * 3 + kx);
                    acc += input[(iy * side + ix) * channels_in + ci] * weight;
                }
            }
        }
        floor_shift(acc, shift).clamp(0, 32767)
    };
    let half = side / 2;
    let mut out = vec![0; half * half * channels_out];
    for py in 0..half {
        for px in 0..half {
            for co in 0..channels_out {
                out[(py * half + px) * channels_out + co] = (0..4)
                    .map(|d| conv(2 * py + d / 2, 2 * px + d % 2, co))
                    .max()
                    .unwrap_or(0);
            }
        }
    }
    out
}

/// The cnn's ten class scores for an image of up to 12 288 int16 values (missing values are zero).
#[must_use]
pub fn cnn_reference(image: &[i16]) -> [i16; CNN_CLASSES] {
    let mut input = vec![0i64; CNN_INPUT_VALUES];
    for (value, given) in input.iter_mut().zip(image) {
        *value = i64::from(*given);
    }
    let pooled1 = cnn_conv_pool(&input, CNN_SIDE, 3, 16, (1, 2), 6);
    let flat = cnn_conv_pool(&pooled1, CNN_SIDE / 2, 16, 32, (3, 4), 7);
    let mut scores = [0i16; CNN_CLASSES];
    for (k, score) in scores.iter_mut().enumerate() {
        let acc = cnn_bias(6, k)
            + flat
                .iter()
                .enumerate()
                .map(|(j, v)| v * cnn_weight(5, k * flat.len() + j))
                .sum::<i64>();
        // Clamped to the i16 range first, so the narrowing cannot fail.
        *score = i16::try_from(floor_shift(acc, 8).clamp(-32768, 32767)).unwrap_or_default();
    }
    scores
}

/// Values in (0, 1) on a fixed grid, for log and norm.
fn unit_interval(seed: u32, count: usize) -> Vec<f32> {
    pseudo_random(seed, count)
        .into_iter()
        // 2^20 steps strictly inside (0, 1): exact in f32, never 0 or 1.
        .map(|r| ((r >> 12) as f32 + 0.5) / 1_048_576.0)
        .collect()
}

fn checks_for(unit: Unit) -> Vec<Check> {
    // The slot is chosen when the check runs; 0 here is replaced in `run_check`.
    match unit {
        Unit::TopK => {
            let data = pseudo_random(7, 4 * WORDS);
            // Ties and the header-like all-ones word, which must rank as data, not as a header.
            let mut tied = pseudo_random(11, 3 * WORDS);
            tied[5] = u32::MAX;
            tied[20] = tied[3];
            tied[40] = tied[3];
            let mask = 0xa5a7;
            vec![
                Check {
                    name: "top_k of 64 words".to_owned(),
                    request: request(0, 0xffff, &words_to_bytes(data.clone())),
                    expected: Expected::Exact(words_to_bytes(top_k_reference(&data, 0xffff))),
                },
                Check {
                    name: "top_k with ties and an all-ones word".to_owned(),
                    request: request(0, 0xffff, &words_to_bytes(tied.clone())),
                    expected: Expected::Exact(words_to_bytes(top_k_reference(&tied, 0xffff))),
                },
                Check {
                    name: format!("top_k masked by {mask:#06x}"),
                    request: request(0, mask, &words_to_bytes(data.clone())),
                    expected: Expected::Exact(words_to_bytes(top_k_reference(&data, mask))),
                },
            ]
        }
        Unit::Log => {
            let values = unit_interval(13, 3 * WORDS);
            vec![Check {
                name: "log of 48 values in (0, 1)".to_owned(),
                request: request(
                    0,
                    0xffff,
                    &words_to_bytes(values.iter().map(|v| v.to_bits())),
                ),
                expected: Expected::Logit(values.iter().copied().map(logit_reference).collect()),
            }]
        }
        Unit::Norm => {
            let values = unit_interval(17, 4 * WORDS);
            vec![Check {
                name: "norm of 64 values".to_owned(),
                request: request(
                    0,
                    0xffff,
                    &words_to_bytes(values.iter().map(|v| v.to_bits())),
                ),
                expected: Expected::Exact(words_to_bytes(
                    norm_reference(&values).iter().map(|v| v.to_bits()),
                )),
            }]
        }
        Unit::Pattern => {
            let data = words_to_bytes(pseudo_random(19, 2 * WORDS));
            let sent = request(0, 0xffff, &data);
            vec![Check {
                name: "pattern_slot echoes header and data".to_owned(),
                expected: Expected::Exact(sent.clone()),
                request: sent,
            }]
        }
        Unit::Or => {
            let data = words_to_bytes(pseudo_random(23, 2 * WORDS));
            let sent = request(0, 0xffff, &data);
            vec![Check {
                name: "or_slot answers all ones".to_owned(),
                expected: Expected::Exact(vec![0xff; sent.len()]),
                request: sent,
            }]
        }
        Unit::Cnn => {
            // A full 64 x 64 x 3 image of small values, so every layer has non-zero activations.
            let image: Vec<i16> = pseudo_random(29, CNN_INPUT_VALUES)
                .into_iter()
                .map(|r| (r % 1024) as i16 - 512)
                .collect();
            let data: Vec<u8> = image.iter().flat_map(|v| v.to_le_bytes()).collect();
            let mut answer = vec![0u8; LINE];
            for (k, score) in cnn_reference(&image).iter().enumerate() {
                answer[2 * k..2 * k + 2].copy_from_slice(&score.to_le_bytes());
            }
            vec![Check {
                name: "cnn scores of a fixed image".to_owned(),
                request: request(0, 0xffff, &data),
                expected: Expected::Exact(answer),
            }]
        }
    }
}

fn io_error(doing: String) -> impl FnOnce(std::io::Error) -> SlotCheckError {
    move |source| SlotCheckError::Io { doing, source }
}

fn run_check(
    addr: SocketAddr,
    slot: u8,
    timeout: Duration,
    check: &Check,
) -> Result<CheckOutcome, SlotCheckError> {
    let mut request = check.request.clone();
    request[62..64].copy_from_slice(&u16::from(slot).to_le_bytes());
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(io_error(format!("connecting to {addr}")))?;
    stream
        .set_nodelay(true)
        .and_then(|()| stream.set_read_timeout(Some(timeout)))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(io_error(format!("configuring the connection to {addr}")))?;
    stream
        .write_all(&request)
        .map_err(io_error(format!("sending `{}` to slot {slot}", check.name)))?;
    let mut answer = vec![0u8; check.expected.len()];
    let outcome = |detail: String| CheckOutcome {
        name: check.name.clone(),
        passed: detail.is_empty(),
        detail,
    };
    // A slot that answers short or not at all computes wrong; that is a failed check, not an error.
    if let Err(e) = stream.read_exact(&mut answer) {
        return Ok(outcome(format!(
            "no complete answer of {} bytes ({e})",
            answer.len()
        )));
    }
    Ok(outcome(compare(&check.expected, &answer)))
}

/// Empty when `answer` matches; otherwise where it first differs.
fn compare(expected: &Expected, answer: &[u8]) -> String {
    match expected {
        Expected::Exact(bytes) => match bytes.iter().zip(answer).position(|(a, b)| a != b) {
            None => String::new(),
            Some(at) => format!(
                "byte {at}: expected {:#04x}, got {:#04x}",
                bytes[at], answer[at]
            ),
        },
        Expected::Logit(values) => {
            for (i, (want, got)) in values.iter().zip(answer.chunks_exact(4)).enumerate() {
                let got = f32::from_le_bytes([got[0], got[1], got[2], got[3]]);
                if !logit_close(*want, got) {
                    return format!("value {i}: expected {want:e}, got {got:e}");
                }
            }
            String::new()
        }
    }
}

fn logit_close(want: f32, got: f32) -> bool {
    if (want - got).abs() <= LOG_ABSOLUTE {
        return true;
    }
    want.is_sign_negative() == got.is_sign_negative()
        && want.to_bits().abs_diff(got.to_bits()) <= LOG_ULPS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_keeps_the_sixteen_largest_unsigned_largest_first() {
        let data: Vec<u32> = (1..=20).chain([u32::MAX, 0x8000_0000]).collect();
        let answer = top_k_reference(&data, 0xffff);
        assert_eq!(answer[0], u32::MAX, "unsigned: 0xffffffff is the largest");
        assert_eq!(answer[1], 0x8000_0000);
        assert_eq!(
            &answer[2..],
            &[20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7]
        );
    }

    #[test]
    fn top_k_masks_words_whose_config_bit_is_clear_and_pads_with_zeros() {
        let answer = top_k_reference(&[5, 9, 7], 0x0005);
        assert_eq!(answer[..4], [9, 0, 5, 0]);
        assert!(answer[4..].iter().all(|&w| w == 0));
    }

    #[test]
    fn logit_of_known_values() {
        assert_eq!(logit_reference(0.5), 0.0);
        assert!((logit_reference(0.75) - 3f32.ln()).abs() <= f32::EPSILON);
        assert!((logit_reference(0.25) + 3f32.ln()).abs() <= f32::EPSILON);
    }

    #[test]
    fn norm_maps_min_to_zero_max_to_one_and_equal_inputs_to_nan() {
        assert_eq!(norm_reference(&[2.0, 4.0, 3.0]), vec![0.0, 1.0, 0.5]);
        assert!(norm_reference(&[1.0, 1.0]).iter().all(|v| v.is_nan()));
    }

    #[test]
    fn logit_tolerance_is_two_ulp_or_absolute_near_zero() {
        let want = 1.5f32;
        assert!(logit_close(want, f32::from_bits(want.to_bits() + 2)));
        assert!(!logit_close(want, f32::from_bits(want.to_bits() + 3)));
        assert!(logit_close(0.0, LOG_ABSOLUTE));
    }

    #[test]
    fn a_wrong_answer_names_the_first_differing_byte() {
        let detail = compare(&Expected::Exact(vec![1, 2, 3]), &[1, 9, 3]);
        assert_eq!(detail, "byte 1: expected 0x02, got 0x09");
    }

    #[test]
    fn units_are_known_by_artifact_names_and_checkfuncs_aliases() {
        assert_eq!(unit_by_name("top_k"), Some(Unit::TopK));
        assert_eq!(unit_by_name("logit"), Some(Unit::Log));
        assert_eq!(unit_by_name("echo"), Some(Unit::Pattern));
        assert_eq!(unit_by_name("or"), Some(Unit::Or));
        assert_eq!(unit_by_name("fft"), None);
    }

    #[test]
    fn a_slot_outside_the_device_is_refused_before_connecting() {
        let addr = SocketAddr::from(([127, 0, 0, 1], 9));
        let refused = check_slot(addr, 4, Duration::from_millis(100)).map_err(|e| e.to_string());
        assert_eq!(
            refused,
            Err("slot 4 does not exist (a device has slots 0 to 3)".to_owned())
        );
    }

    #[test]
    fn no_device_listening_says_what_it_was_doing() {
        // A port bound and then closed again: nothing listens there.
        let unused = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let failed = check_slot(unused, 0, Duration::from_millis(500)).map_err(|e| e.to_string());
        assert!(
            failed
                .as_ref()
                .is_err_and(|m| m.starts_with(&format!("probing slot 0 at {unused}"))),
            "{failed:?}"
        );
    }

    /// A stand-in top_k that sorts but ignores the mask: it must be identified as top_k and fail the
    /// masked check, so a wrong computation cannot pass.
    fn serve_unmasked_top_k() -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut header = [0u8; LINE];
                if stream.read_exact(&mut header).is_err() {
                    continue;
                }
                let size = u32::from_le_bytes([header[56], header[57], header[58], header[59]]);
                let mut data = vec![0u8; size as usize - LINE];
                if stream.read_exact(&mut data).is_err() {
                    continue;
                }
                let words: Vec<u32> = data
                    .chunks_exact(4)
                    .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                    .collect();
                let answer = words_to_bytes(top_k_reference(&words, 0xffff));
                let _ = stream.write_all(&answer);
            }
        });
        addr
    }

    #[test]
    fn a_top_k_that_ignores_the_mask_fails_only_the_masked_check() {
        let addr = serve_unmasked_top_k();
        let verdict = check_slot(addr, 0, Duration::from_secs(2)).expect("checked");
        assert_eq!(verdict.unit, Some(Unit::TopK));
        assert!(!verdict.passed());
        let failed: Vec<&str> = verdict
            .checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(failed, ["top_k masked by 0xa5a7"]);
        let masked = verdict
            .checks
            .iter()
            .find(|c| !c.passed)
            .expect("a failure");
        assert!(
            masked.detail.starts_with("byte 12: expected 0x00"),
            "{}",
            masked.detail
        );
    }

    #[test]
    fn cnn_parameters_and_rounding_follow_the_unit_definition() {
        assert_eq!(cnn_mix32(0), 0);
        assert!((1..1000).all(|i| (-7..=7).contains(&cnn_weight(5, i))));
        assert!((0..32).all(|i| (-1024..=1024).contains(&cnn_bias(4, i))));
        assert_eq!(floor_shift(-1, 6), -1, "floor, not truncation towards zero");
        assert_eq!(floor_shift(130, 6), 2);
    }

    #[test]
    fn cnn_of_a_blank_image_is_its_biases_carried_through() {
        // All-zero input: conv1 sees only its biases, so its outputs are max(0, B1 >> 6), known by hand.
        let blank = cnn_conv_pool(&vec![0; 4 * 4 * 3], 4, 3, 16, (1, 2), 6);
        for (i, v) in blank.iter().enumerate() {
            assert_eq!(*v, floor_shift(cnn_bias(2, i % 16), 6).max(0), "value {i}");
        }
        // And the whole network is deterministic: the same image, the same scores.
        assert_eq!(cnn_reference(&[]), cnn_reference(&[0; 10]));
    }
}
