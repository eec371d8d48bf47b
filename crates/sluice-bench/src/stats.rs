//! What every experiment reports: one result row type (`Row`: what was
//! measured, one value per repetition, counters) and one median (and min,
//! max) for the whole test bed.

use crate::pmc::Reading;

/// One result row of any experiment: its `case` (what was measured and
/// what the experiment learned besides: a queue and its thread counts and
/// deliveries, a flow-table variant and its evictions, a scenario and its
/// table size) and one value per repetition in `unit`. A row reads as its
/// case (`Deref`), so `row.kind` is the case's field and `row.values` the
/// measurements.
#[derive(Clone, Debug)]
pub struct Row<C> {
    pub case: C,
    /// Unit of `values`, e.g. "Mpps", "ns/op", "s".
    pub unit: &'static str,
    pub higher_is_better: bool,
    /// One value per repetition.
    pub values: Vec<f64>,
    /// Hardware counters over every repetition (`--pmc`).
    pub pmc: Option<Reading>,
}

impl<C> Row<C> {
    pub fn new(case: C, unit: &'static str, higher_is_better: bool) -> Row<C> {
        Row { case, unit, higher_is_better, values: Vec::new(), pmc: None }
    }

    pub fn median(&self) -> f64 {
        median(&self.values)
    }

    pub fn min(&self) -> f64 {
        min(&self.values)
    }

    pub fn max(&self) -> f64 {
        max(&self.values)
    }

    /// Adds one repetition's counters to the row's.
    pub fn add_pmc(&mut self, reading: Option<Reading>) {
        if let Some(x) = reading {
            self.pmc.get_or_insert_with(Default::default).add(&x);
        }
    }

    /// `ours` over `base` as a "times better" factor in this row's
    /// direction (>1 = better, whatever the unit).
    pub fn better_ratio(&self, ours: f64, base: f64) -> f64 {
        if self.higher_is_better {
            ours / base
        } else {
            base / ours
        }
    }
}

impl<C> std::ops::Deref for Row<C> {
    type Target = C;
    fn deref(&self) -> &C {
        &self.case
    }
}

impl<C> std::ops::DerefMut for Row<C> {
    fn deref_mut(&mut self) -> &mut C {
        &mut self.case
    }
}

/// The median of `v` (the mean of the middle two for an even count); 0 for
/// no samples.
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// The smallest sample (infinity for none).
pub fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// The largest sample (minus infinity for none).
pub fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_one_and_none() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert_eq!(median(&[]), 0.0);
        assert_eq!((min(&[2.0, -1.0]), max(&[2.0, -1.0])), (-1.0, 2.0));
    }
}
