//! Clipping marks to a sub-plot's rectangle. plotters' SVG backend draws whatever it is given, even outside the
//! plotting area, and a broken axis draws the same data into two sub-plots that must each show only their range.

/// An axis-aligned rectangle in drawing coordinates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Bounds {
    pub x: (f64, f64),
    pub y: (f64, f64),
}

impl Bounds {
    pub fn contains(&self, (x, y): (f64, f64)) -> bool {
        let eps = 1e-9;
        x >= self.x.0 - eps && x <= self.x.1 + eps && y >= self.y.0 - eps && y <= self.y.1 + eps
    }

    /// The part of segment `a`–`b` inside (Liang–Barsky), if any.
    fn clip_segment(&self, a: (f64, f64), b: (f64, f64)) -> Option<((f64, f64), (f64, f64))> {
        let (dx, dy) = (b.0 - a.0, b.1 - a.1);
        let mut enter: f64 = 0.0;
        let mut leave: f64 = 1.0;
        for (p, q) in [
            (-dx, a.0 - self.x.0),
            (dx, self.x.1 - a.0),
            (-dy, a.1 - self.y.0),
            (dy, self.y.1 - a.1),
        ] {
            if p == 0.0 {
                if q < 0.0 {
                    return None;
                }
            } else {
                let t = q / p;
                if p < 0.0 {
                    enter = enter.max(t);
                } else {
                    leave = leave.min(t);
                }
            }
        }
        (enter <= leave).then(|| {
            let at = |t: f64| (a.0 + t * dx, a.1 + t * dy);
            (at(enter), at(leave))
        })
    }

    /// The visible runs of a polyline.
    pub fn clip_polyline(&self, points: &[(f64, f64)]) -> Vec<Vec<(f64, f64)>> {
        let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
        let mut current: Vec<(f64, f64)> = Vec::new();
        if let [only] = points {
            if self.contains(*only) {
                runs.push(vec![*only]);
            }
            return runs;
        }
        for pair in points.windows(2) {
            match self.clip_segment(pair[0], pair[1]) {
                Some((start, end)) => {
                    if current.last() != Some(&start) {
                        if current.len() > 1 {
                            runs.push(std::mem::take(&mut current));
                        }
                        current = vec![start];
                    }
                    current.push(end);
                }
                None => {
                    if current.len() > 1 {
                        runs.push(std::mem::take(&mut current));
                    }
                    current.clear();
                }
            }
        }
        if current.len() > 1 {
            runs.push(current);
        }
        runs
    }

    /// The part of a polygon inside (Sutherland–Hodgman; the rectangle is convex, so one pass per edge).
    pub fn clip_polygon(&self, polygon: &[(f64, f64)]) -> Vec<(f64, f64)> {
        let edges: [(Inside, Crossing); 4] = [
            (|b, p| p.0 >= b.x.0, |b, p, q| at_x(p, q, b.x.0)),
            (|b, p| p.0 <= b.x.1, |b, p, q| at_x(p, q, b.x.1)),
            (|b, p| p.1 >= b.y.0, |b, p, q| at_y(p, q, b.y.0)),
            (|b, p| p.1 <= b.y.1, |b, p, q| at_y(p, q, b.y.1)),
        ];
        let mut output = polygon.to_vec();
        for (inside, crossing) in edges {
            let input = std::mem::take(&mut output);
            for (index, &point) in input.iter().enumerate() {
                let previous = input[(index + input.len() - 1) % input.len()];
                match (inside(self, previous), inside(self, point)) {
                    (true, true) => output.push(point),
                    (true, false) => output.push(crossing(self, previous, point)),
                    (false, true) => {
                        output.push(crossing(self, previous, point));
                        output.push(point);
                    }
                    (false, false) => {}
                }
            }
        }
        output
    }
}

/// Whether a point is on the inner side of one rectangle edge.
type Inside = fn(&Bounds, (f64, f64)) -> bool;
/// Where a segment crosses one rectangle edge.
type Crossing = fn(&Bounds, (f64, f64), (f64, f64)) -> (f64, f64);

fn at_x(p: (f64, f64), q: (f64, f64), x: f64) -> (f64, f64) {
    let t = (x - p.0) / (q.0 - p.0);
    (x, p.1 + t * (q.1 - p.1))
}

fn at_y(p: (f64, f64), q: (f64, f64), y: f64) -> (f64, f64) {
    let t = (y - p.1) / (q.1 - p.1);
    (p.0 + t * (q.0 - p.0), y)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNIT: Bounds = Bounds {
        x: (0.0, 1.0),
        y: (0.0, 1.0),
    };

    #[test]
    fn polyline_leaving_and_reentering_splits_into_runs() {
        let runs = UNIT.clip_polyline(&[(0.5, 0.5), (0.5, 2.0), (0.8, 0.5), (0.9, 0.6)]);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0], vec![(0.5, 0.5), (0.5, 1.0)]);
        assert_eq!(runs[1].last(), Some(&(0.9, 0.6)));
    }

    #[test]
    fn polygon_is_cut_at_the_edges() {
        let clipped = UNIT.clip_polygon(&[(0.5, 0.5), (2.0, 0.5), (2.0, 0.8), (0.5, 0.8)]);
        assert!(clipped.iter().all(|p| UNIT.contains(*p)));
        assert!(clipped.contains(&(1.0, 0.5)) && clipped.contains(&(1.0, 0.8)));
        assert!(
            UNIT.clip_polygon(&[(2.0, 2.0), (3.0, 2.0), (3.0, 3.0)])
                .is_empty()
        );
    }
}
