//! Reference implementations of the units, written from the table of
//! `docs/frac.md` §2.5 and hw/accelerators/cnn/README.md, independent of the
//! C++ sources.

fn words(data: &[u8]) -> impl Iterator<Item = u32> + '_ {
    data.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

fn ftz(v: f32) -> f32 {
    if v.is_subnormal() {
        0.0f32.copysign(v)
    } else {
        v
    }
}

/// top_k: the 16 largest data words, descending; word j zeroed where bit j
/// of the top config is clear.
pub fn top_k(data: &[u8], top_config: u16) -> [u8; 64] {
    let mut all: Vec<u32> = words(data).collect();
    all.sort_unstable_by(|a, b| b.cmp(a));
    all.resize(16.max(all.len()), 0);
    let mut out = [0u8; 64];
    for j in 0..16 {
        let w = if top_config >> j & 1 == 1 { all[j] } else { 0 };
        out[4 * j..4 * j + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// log: ln(x / (1 - x)) per f32, single precision, flushing subnormals.
pub fn logit(x: f32) -> f32 {
    let x = ftz(x);
    ftz(ftz(x / ftz(1.0 - x)).ln())
}

pub fn log(data: &[u8]) -> Vec<f32> {
    words(data).map(|w| logit(f32::from_bits(w))).collect()
}

/// norm: (x - min) / (max - min) over the request, bit-exact with FTZ.
pub fn norm(data: &[u8]) -> Vec<u32> {
    let xs: Vec<f32> = words(data).map(|w| ftz(f32::from_bits(w))).collect();
    let mut lo = f32::INFINITY;
    let mut hi = f32::NEG_INFINITY;
    for &x in &xs {
        if x < lo {
            lo = x;
        }
        if x > hi {
            hi = x;
        }
    }
    let range = ftz(hi - lo);
    xs.iter()
        .map(|&x| ftz(ftz(x - lo) / range).to_bits())
        .collect()
}

/// Distance in units in the last place; NaNs only match NaNs.
pub fn ulps(a: f32, b: f32) -> u32 {
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() {
            0
        } else {
            u32::MAX
        };
    }
    if a == b {
        return 0;
    }
    if a.is_sign_negative() != b.is_sign_negative() {
        return u32::MAX;
    }
    a.to_bits().abs_diff(b.to_bits())
}

// ---- the CNN, per hw/accelerators/cnn/README.md ----

fn mix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

fn weight(tag: u32, i: usize) -> i32 {
    (mix32(tag << 24 | i as u32) % 15) as i32 - 7
}

fn bias(tag: u32, i: usize) -> i32 {
    (mix32(tag << 24 | i as u32) % 2049) as i32 - 1024
}

fn floor_shift(v: i64, s: u32) -> i64 {
    v.div_euclid(1 << s)
}

/// conv 3x3 (zero padding) + bias, floor shift, ReLU, clamp; map [y][x][c].
fn conv(input: &[i32], h: usize, w: usize, ci: usize, co: usize, tag: u32, shift: u32) -> Vec<i32> {
    let wts: Vec<i32> = (0..co * ci * 9).map(|i| weight(tag, i)).collect();
    let mut out = vec![0i32; h * w * co];
    for y in 0..h {
        for x in 0..w {
            for o in 0..co {
                let mut acc = i64::from(bias(tag + 1, o));
                for ky in 0..3 {
                    for kx in 0..3 {
                        let (iy, ix) = (y + ky, x + kx);
                        if iy == 0 || ix == 0 || iy > h || ix > w {
                            continue;
                        }
                        let (iy, ix) = (iy - 1, ix - 1);
                        for c in 0..ci {
                            let wt = wts[((o * ci + c) * 3 + ky) * 3 + kx];
                            acc += i64::from(input[(iy * w + ix) * ci + c]) * i64::from(wt);
                        }
                    }
                }
                out[(y * w + x) * co + o] = floor_shift(acc, shift).clamp(0, 32767) as i32;
            }
        }
    }
    out
}

fn pool(input: &[i32], h: usize, w: usize, c: usize) -> Vec<i32> {
    let mut out = vec![0i32; (h / 2) * (w / 2) * c];
    for y in 0..h / 2 {
        for x in 0..w / 2 {
            for k in 0..c {
                let at = |yy: usize, xx: usize| input[(yy * w + xx) * c + k];
                out[(y * (w / 2) + x) * c + k] = at(2 * y, 2 * x)
                    .max(at(2 * y, 2 * x + 1))
                    .max(at(2 * y + 1, 2 * x))
                    .max(at(2 * y + 1, 2 * x + 1));
            }
        }
    }
    out
}

/// The CNN's answer line for `data` (the bytes after the header).
pub fn cnn(data: &[u8]) -> [u8; 64] {
    let mut image = vec![0i32; 64 * 64 * 3];
    for (i, c) in data.chunks_exact(2).take(image.len()).enumerate() {
        image[i] = i32::from(i16::from_le_bytes([c[0], c[1]]));
    }
    let c1 = conv(&image, 64, 64, 3, 16, 1, 6);
    let p1 = pool(&c1, 64, 64, 16);
    let c2 = conv(&p1, 32, 32, 16, 32, 3, 7);
    let p2 = pool(&c2, 32, 32, 32);
    let mut out = [0u8; 64];
    for k in 0..10 {
        let mut acc = i64::from(bias(6, k));
        for (j, &v) in p2.iter().enumerate() {
            acc += i64::from(v) * i64::from(weight(5, k * 8192 + j));
        }
        let score = floor_shift(acc, 8).clamp(-32768, 32767) as i16;
        out[2 * k..2 * k + 2].copy_from_slice(&score.to_le_bytes());
    }
    out
}
