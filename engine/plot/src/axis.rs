//! Axis arithmetic: scale transforms, fitted ranges and tick positions.
//!
//! Everything is drawn on linear plotters coordinates in *transformed* space (log10 of the value on a log axis),
//! with explicit tick positions. One coordinate type then serves every combination of scales and breaks, and the
//! ticks are the ones a reader expects (1, 10, 100 on a log axis) rather than plotters' choice.

use crate::spec::Scale;

/// One drawable axis range, in data units, with its scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AxisRange {
    pub scale: Scale,
    pub lo: f64,
    pub hi: f64,
}

impl AxisRange {
    /// The range in drawing coordinates.
    pub fn coords(&self) -> (f64, f64) {
        (
            to_coord(self.scale, self.lo).unwrap_or(0.0),
            to_coord(self.scale, self.hi).unwrap_or(1.0),
        )
    }

    /// Bold tick positions (labelled) and light ones (grid only), in drawing coordinates.
    pub fn ticks(&self) -> (Vec<f64>, Vec<f64>) {
        match self.scale {
            Scale::Linear => (linear_ticks(self.lo, self.hi), Vec::new()),
            Scale::Log => log_ticks(self.lo, self.hi),
        }
    }
}

/// The drawing coordinate of a value; `None` where the scale cannot show it (≤ 0 on a log axis).
pub(crate) fn to_coord(scale: Scale, value: f64) -> Option<f64> {
    match scale {
        Scale::Linear => value.is_finite().then_some(value),
        Scale::Log => (value > 0.0 && value.is_finite()).then(|| value.log10()),
    }
}

/// The value at a drawing coordinate.
pub(crate) fn from_coord(scale: Scale, coord: f64) -> f64 {
    match scale {
        Scale::Linear => coord,
        Scale::Log => 10f64.powf(coord),
    }
}

/// A range covering `values` with a little room, on round numbers (decades on a log axis).
/// `include_zero` keeps bars anchored at zero.
pub(crate) fn fit_range(scale: Scale, values: &[f64], include_zero: bool) -> AxisRange {
    let shown: Vec<f64> = values
        .iter()
        .copied()
        .filter(|v| to_coord(scale, *v).is_some())
        .collect();
    let min = shown.iter().copied().fold(f64::INFINITY, f64::min);
    let max = shown.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    match scale {
        Scale::Log => {
            if shown.is_empty() {
                return AxisRange {
                    scale,
                    lo: 1.0,
                    hi: 10.0,
                };
            }
            let lo = min.log10().floor();
            let mut hi = max.log10().ceil();
            if hi <= lo {
                hi = lo + 1.0;
            }
            AxisRange {
                scale,
                lo: 10f64.powf(lo),
                hi: 10f64.powf(hi),
            }
        }
        Scale::Linear => {
            if shown.is_empty() {
                return AxisRange {
                    scale,
                    lo: 0.0,
                    hi: 1.0,
                };
            }
            let (mut min, mut max) = (min, max);
            if include_zero {
                min = min.min(0.0);
                max = max.max(0.0);
            }
            if max - min < f64::EPSILON * max.abs().max(1.0) {
                let half = if max == 0.0 { 1.0 } else { max.abs() * 0.1 };
                min -= half;
                max += half;
            }
            let pad = (max - min) * 0.03;
            let padded_min = if include_zero && min == 0.0 {
                0.0
            } else {
                min - pad
            };
            let padded_max = if include_zero && max == 0.0 {
                0.0
            } else {
                max + pad
            };
            let step = nice_step((padded_max - padded_min) / 5.0);
            AxisRange {
                scale,
                lo: (padded_min / step).floor() * step,
                hi: (padded_max / step).ceil() * step,
            }
        }
    }
}

/// 1, 2, 2.5 or 5 times a power of ten, the nearest at or above `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    let fraction = raw / magnitude;
    let nice = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .find(|n| fraction <= *n + 1e-9)
        .unwrap_or(10.0);
    nice * magnitude
}

fn linear_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let step = nice_step((hi - lo) / 5.0);
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last)
        .map(|k| round_tick(k as f64 * step))
        .collect()
}

/// Decades as bold ticks; 2× and 5× too when fewer than two decades show. Light grid at 2…9 × each decade.
fn log_ticks(lo: f64, hi: f64) -> (Vec<f64>, Vec<f64>) {
    let (lo_log, hi_log) = (lo.log10(), hi.log10());
    let decades = (lo_log.floor() as i32)..=(hi_log.ceil() as i32);
    let inside = |v: f64| v >= lo_log - 1e-9 && v <= hi_log + 1e-9;
    let mut bold = Vec::new();
    let mut light = Vec::new();
    for decade in decades.clone() {
        let base = 10f64.powi(decade);
        for multiple in 1..10 {
            let coord = (base * f64::from(multiple)).log10();
            if !inside(coord) {
                continue;
            }
            if multiple == 1 {
                bold.push(coord)
            } else {
                light.push(coord)
            }
        }
    }
    if bold.len() < 2 {
        for decade in decades {
            for multiple in [2.0, 5.0] {
                let coord = (10f64.powi(decade) * multiple).log10();
                if inside(coord) {
                    bold.push(coord);
                    light.retain(|l| (l - coord).abs() > 1e-9);
                }
            }
        }
        bold.sort_by(f64::total_cmp);
    }
    (bold, light)
}

/// Removes float noise such as 0.30000000000000004 so labels and snapshots stay clean.
fn round_tick(v: f64) -> f64 {
    let rounded = (v * 1e9).round() / 1e9;
    if rounded == 0.0 { 0.0 } else { rounded }
}

/// A tick label: the value at `coord`, without float noise or trailing zeros.
pub(crate) fn tick_label(scale: Scale, coord: f64) -> String {
    let value = from_coord(scale, coord);
    let significant = if value == 0.0 {
        0.0
    } else {
        let digits = 6 - value.abs().log10().floor() as i32;
        let factor = 10f64.powi(digits.max(0));
        (value * factor).round() / factor
    };
    format!("{}", if significant == 0.0 { 0.0 } else { significant })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_range_is_rounded_and_starts_at_zero_for_bars() {
        let range = fit_range(Scale::Linear, &[1.0, 28.0], false);
        assert_eq!((range.lo, range.hi), (0.0, 30.0));
        let bars = fit_range(Scale::Linear, &[7.7, 9.3], true);
        assert_eq!(bars.lo, 0.0);
        assert!(bars.hi >= 9.3 && bars.hi <= 12.0, "{bars:?}");
    }

    #[test]
    fn log_range_spans_whole_decades_and_ticks_label_them() {
        let range = fit_range(Scale::Log, &[7.7, 625.0, -1.0], false);
        assert_eq!((range.lo, range.hi), (1.0, 1000.0));
        let (bold, light) = range.ticks();
        let labels: Vec<String> = bold.iter().map(|c| tick_label(Scale::Log, *c)).collect();
        assert_eq!(labels, ["1", "10", "100", "1000"]);
        assert_eq!(light.len(), 8 * 3);
    }

    #[test]
    fn narrow_log_range_gets_intermediate_ticks() {
        let (bold, _) = AxisRange {
            scale: Scale::Log,
            lo: 5.0,
            hi: 30.0,
        }
        .ticks();
        let labels: Vec<String> = bold.iter().map(|c| tick_label(Scale::Log, *c)).collect();
        assert_eq!(labels, ["5", "10", "20"]);
    }

    #[test]
    fn tick_labels_have_no_float_noise() {
        let labels: Vec<String> = linear_ticks(0.0, 1.0)
            .iter()
            .map(|c| tick_label(Scale::Linear, *c))
            .collect();
        assert_eq!(labels, ["0", "0.2", "0.4", "0.6", "0.8", "1"]);
        assert_eq!(tick_label(Scale::Linear, 8820.0), "8820");
    }
}
