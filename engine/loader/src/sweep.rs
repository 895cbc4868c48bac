//! Sweep points: the cartesian product of the swept values (first key outermost), less `exclude` rules and
//! what `--only` leaves out, and each node's instances among them.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use crate::doc::Scalar;
use crate::tree::Loc;

/// More points than this is almost certainly a mistake (and would not fit in a plan anyway).
pub(crate) const MAX_POINTS: usize = 1_000_000;

/// The swept keys, their values and the selected points.
#[derive(Debug, Default)]
pub(crate) struct Sweep {
    pub keys: Vec<String>,
    pub key_locs: Vec<Loc>,
    pub values: Vec<Vec<Scalar>>,
    /// `values` as text, for `--only`, `exclude` and ids.
    pub texts: Vec<Vec<String>>,
    /// Each point: one value index per key.
    pub points: Vec<Vec<u32>>,
    /// Distinct projections of `points` onto a set of key indices, cached.
    projections: HashMap<Vec<usize>, Rc<Vec<Vec<u32>>>>,
}

/// A rule of `exclude`: for each named key, the value indices it matches.
pub(crate) type Rule = Vec<(usize, HashSet<u32>)>;

impl Sweep {
    pub fn key_index(&self, key: &str) -> Option<usize> {
        self.keys.iter().position(|k| k == key)
    }

    /// Number of points the product of `allowed` has, saturating.
    pub fn product_len(allowed: &[Vec<u32>]) -> usize {
        allowed
            .iter()
            .fold(1usize, |n, values| n.saturating_mul(values.len()))
    }

    /// Fills `points` with the product of the allowed value indices (first key outermost), leaving out every
    /// point that matches a rule.
    pub fn fill_points(&mut self, allowed: &[Vec<u32>], rules: &[Rule]) {
        self.points.clear();
        if allowed.iter().any(Vec::is_empty) {
            return;
        }
        let mut cursor = vec![0usize; allowed.len()];
        loop {
            let point: Vec<u32> = cursor
                .iter()
                .zip(allowed)
                .map(|(&i, values)| values[i])
                .collect();
            let excluded = rules.iter().any(|rule| {
                rule.iter()
                    .all(|(key, values)| values.contains(&point[*key]))
            });
            if !excluded {
                self.points.push(point);
            }
            // Odometer: the last key turns fastest.
            let mut digit = allowed.len();
            loop {
                if digit == 0 {
                    return;
                }
                digit -= 1;
                cursor[digit] += 1;
                if cursor[digit] < allowed[digit].len() {
                    break;
                }
                cursor[digit] = 0;
            }
        }
    }

    /// The distinct combinations of values of `keys` (sorted key indices) among the points, in point order.
    pub fn instances(&mut self, keys: &[usize]) -> Rc<Vec<Vec<u32>>> {
        if keys.is_empty() {
            // An unswept node has its one instance whatever the points are.
            return Rc::new(vec![Vec::new()]);
        }
        if let Some(found) = self.projections.get(keys) {
            return Rc::clone(found);
        }
        let mut seen: HashSet<Vec<u32>> = HashSet::new();
        let mut out = Vec::new();
        for point in &self.points {
            let projected: Vec<u32> = keys.iter().map(|&k| point[k]).collect();
            if seen.insert(projected.clone()) {
                out.push(projected);
            }
        }
        let out = Rc::new(out);
        self.projections.insert(keys.to_vec(), Rc::clone(&out));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep(values: &[&[i64]]) -> Sweep {
        let mut sweep = Sweep::default();
        for (i, list) in values.iter().enumerate() {
            sweep.keys.push(format!("k{i}"));
            sweep.key_locs.push(Loc::default());
            sweep
                .values
                .push(list.iter().map(|&v| Scalar::Int(v)).collect());
            sweep
                .texts
                .push(list.iter().map(|v| v.to_string()).collect());
        }
        sweep
    }

    #[test]
    fn product_is_first_key_outermost_and_rules_exclude() {
        let mut s = sweep(&[&[1, 2], &[10, 20, 30]]);
        let allowed = vec![vec![0, 1], vec![0, 1, 2]];
        s.fill_points(&allowed, &[]);
        assert_eq!(
            s.points,
            vec![
                vec![0, 0],
                vec![0, 1],
                vec![0, 2],
                vec![1, 0],
                vec![1, 1],
                vec![1, 2]
            ]
        );
        let rule: Rule = vec![(0, HashSet::from([1])), (1, HashSet::from([0, 2]))];
        s.fill_points(&allowed, &[rule]);
        assert_eq!(
            s.points,
            vec![vec![0, 0], vec![0, 1], vec![0, 2], vec![1, 1]]
        );
        assert_eq!(*s.instances(&[1]), vec![vec![0], vec![1], vec![2]]);
    }

    #[test]
    fn no_sweep_is_one_point() {
        let mut s = Sweep::default();
        s.fill_points(&[], &[]);
        assert_eq!(s.points, vec![Vec::<u32>::new()]);
        assert_eq!(s.instances(&[]).len(), 1);
    }
}
