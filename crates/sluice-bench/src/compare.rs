//! What the memory experiments (`aliasing`, `memalign`, `pool`) share: rows
//! with the seed's figure beside ours, repetitions alternating the variants,
//! ratios against a same-run baseline per repetition, the table, JSON lines
//! and an SVG bar chart.

use crate::pmc::{self, Pmc, Reading};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// One measured variant of a memory experiment, beside the seed's figure.
#[derive(Clone, Debug)]
pub struct Variant {
    /// The experiment's part, e.g. "himeno", "small", "batch".
    pub group: String,
    /// The variant, e.g. "pad=64", "pool", "libc-4096".
    pub name: String,
    /// The seed's figure in our unit (converted where the seed printed
    /// another, see `seed_note`), or None where the seed had none.
    pub seed: Option<f64>,
    /// The seed's figure as it printed it, and what it was measured on.
    pub seed_note: Option<String>,
    /// What `ratio` compares against, e.g. "pad=0", "system".
    pub baseline: Option<String>,
    /// Per repetition: how many times better than the baseline in the same
    /// repetition (>1 = better, whatever the unit's direction).
    pub ratios: Vec<f64>,
    /// The seed's same ratio, from its own figures.
    pub seed_ratio: Option<f64>,
}

/// The memory experiments' result row.
pub type Row = crate::stats::Row<Variant>;

pub use crate::stats::{max, min};

/// A row for `name` in `group`, with no measurements yet.
pub fn row(group: &str, name: &str, unit: &'static str, higher_is_better: bool) -> Row {
    Row::new(
        Variant {
            group: group.to_owned(),
            name: name.to_owned(),
            seed: None,
            seed_note: None,
            baseline: None,
            ratios: Vec::new(),
            seed_ratio: None,
        },
        unit,
        higher_is_better,
    )
}

impl Variant {
    /// The median ratio against the baseline, if there is one.
    pub fn ratio(&self) -> Option<f64> {
        (!self.ratios.is_empty()).then(|| crate::median(&self.ratios))
    }
}

impl Row {
    /// The row as one JSON line.
    pub fn json(&self, experiment: &str) -> Value {
        let (hw, sw) = Reading::json_fields(self.pmc.as_ref());
        let mut v = json!({
            "experiment": experiment,
            "group": self.group,
            "name": self.name,
            "unit": self.unit,
            "seed": self.seed,
            "seed_note": self.seed_note,
            "ours": self.median(),
            "ours_min": min(&self.values),
            "ours_max": max(&self.values),
            "reps": self.values.len(),
            "baseline": self.baseline,
            "ratio": self.ratio(),
            "ratio_min": (!self.ratios.is_empty()).then(|| min(&self.ratios)),
            "ratio_max": (!self.ratios.is_empty()).then(|| max(&self.ratios)),
            "seed_ratio": self.seed_ratio,
        });
        if self.pmc.is_some() {
            v["pmc"] = hw;
            v["pmc_sw"] = sw;
        }
        v
    }
}

/// Runs `reps` repetitions of `variants` variants, alternating them (each
/// repetition starts one variant later, so none always runs first after a
/// quiet or busy moment). `f(variant)` returns that variant's figure.
/// With `pmc`, counts are summed per variant over the repetitions.
pub fn alternate(
    reps: usize,
    variants: usize,
    pmc: &mut Option<Pmc>,
    mut f: impl FnMut(usize) -> f64,
) -> (Vec<Vec<f64>>, Vec<Option<Reading>>) {
    let mut samples = vec![Vec::with_capacity(reps); variants];
    let mut readings: Vec<Option<Reading>> = vec![None; variants];
    for r in 0..reps.max(1) {
        for k in 0..variants {
            let v = (k + r) % variants;
            let (x, reading) = pmc::maybe(pmc, || f(v));
            samples[v].push(x);
            if let Some(reading) = reading {
                readings[v].get_or_insert_with(Reading::default).add(&reading);
            }
        }
    }
    (samples, readings)
}

/// Per-repetition ratios of `row` against `base` (same repetitions).
pub fn paired_ratios(row: &Row, base: &[f64]) -> Vec<f64> {
    row.values.iter().zip(base).map(|(&o, &b)| row.better_ratio(o, b)).collect()
}

fn fmt_num(v: f64) -> String {
    if v >= 1000.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The readable table, grouped, one row per variant.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<10} {:<18} {:>10} {:>19} {:>10} {:>22} {:>8}  seed's figure",
        "group", "variant", "ours", "[min-max]", "seed", "ratio [min-max]", "seed"
    );
    for r in rows {
        let ratio = match r.ratio() {
            Some(x) => format!("{x:.2} [{:.2}-{:.2}]", min(&r.ratios), max(&r.ratios)),
            None => "-".into(),
        };
        let _ = writeln!(
            s,
            "{:<10} {:<18} {:>10} {:>19} {:>10} {:>22} {:>8}  {}",
            r.group,
            r.name,
            format!("{} {}", fmt_num(r.median()), r.unit),
            format!("[{}-{}]", fmt_num(min(&r.values)), fmt_num(max(&r.values))),
            r.seed.map_or("-".into(), fmt_num),
            ratio,
            r.seed_ratio.map_or("-".into(), |x| format!("{x:.2}")),
            r.seed_note.as_deref().unwrap_or("-"),
        );
        if let Some(p) = &r.pmc {
            let _ = writeln!(s, "{:<10} {}", "", p.line());
        }
    }
    if let Some(r) = rows.iter().find(|r| r.baseline.is_some()) {
        let _ = writeln!(
            s,
            "ratio: times better than the group's baseline ({}) in the same repetition; seed ratio: the same from the seed's figures",
            r.baseline.as_deref().unwrap_or("")
        );
    }
    s
}

/// Horizontal bars: our median with min-max whiskers per row, the seed's
/// figure as a red tick where it has one. Rows of different units should
/// not share a chart; `rows` is one unit.
pub fn svg(rows: &[Row], title: &str) -> String {
    let bars: Vec<crate::svg::Bar> = rows
        .iter()
        .map(|r| crate::svg::Bar {
            label: format!("{} {}", r.group, r.name),
            median: r.median(),
            min: min(&r.values),
            max: max(&r.values),
            seed: r.seed,
            value: fmt_num(r.median()),
        })
        .collect();
    let unit = rows.first().map_or("", |r| r.unit);
    let legend = format!("bars: median {unit} over repetitions, whiskers: min-max; red tick: the seed's figure");
    crate::svg::bars(title, 230.0, &bars, &legend)
}
