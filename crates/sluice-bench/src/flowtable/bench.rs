//! `sluice-bench flowtable`: cost per packet of a flow table with an idle
//! timeout as the number of flows grows, expiring by the ordered list
//! (ours), by a walk over every slot per tick (the PMC post's fix), and by
//! the post's O(n^2) walk.
//!
//! The traffic: a window of `n` flow ids slides forward (one id in 16
//! packets), each packet picks an id in the window at random, and the
//! clock ticks every `per_tick` packets (a tick is 1 ms at 1 Mpps); expiry
//! runs once per tick. The idle timeout is the time of `4 n` packets, so
//! about `n` flows are live (a flow in the window is seen about every `n`
//! packets) and the flows the window left behind expire steadily. The
//! table's capacity is `2 n`; a new flow evicts the oldest when full.

use super::{FlowKey, FlowTable};
use crate::median;
use crate::ring::Rng;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::time::Instant;

/// How expiry is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Ours: pop stale flows off the front of the last-seen list.
    Ordered,
    /// Visit every slot per tick: O(n) per tick.
    Walk,
    /// The PMC post's flowcleaner: O(n^2) per tick.
    Quadratic,
}

impl Variant {
    pub const ALL: [Variant; 3] = [Variant::Ordered, Variant::Walk, Variant::Quadratic];
    pub fn name(self) -> &'static str {
        match self {
            Variant::Ordered => "ordered",
            Variant::Walk => "walk",
            Variant::Quadratic => "walk-n2",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Settings {
    /// Flows (about as many live at once).
    pub sizes: Vec<usize>,
    pub reps: usize,
    /// Packets per rep for the ordered list.
    pub packets: u64,
    pub per_tick: u64,
    /// Slot visits per rep a walk may spend (whole ticks, at least 3).
    pub walk_budget: u64,
    /// The O(n^2) walk runs only up to this many flows (it takes seconds
    /// per tick beyond).
    pub quadratic_max: usize,
    pub seed: u64,
}

impl Settings {
    /// 10k, 100k, 1M flows; under a minute on 2 cores.
    pub fn quick() -> Self {
        Settings {
            sizes: vec![10_000, 100_000, 1_000_000],
            reps: 3,
            packets: 500_000,
            per_tick: 1000,
            walk_budget: 50_000_000,
            quadratic_max: 10_000,
            seed: 1,
        }
    }
    /// Up to 10M flows, and the O(n^2) walk at 100k too.
    pub fn full() -> Self {
        Settings { sizes: vec![10_000, 100_000, 1_000_000, 10_000_000], quadratic_max: 100_000, ..Settings::quick() }
    }
}

/// The packet stream: flow ids in a sliding window.
struct Stream {
    rng: Rng,
    base: u64,
    n: u64,
    packet: u64,
    per_tick: u64,
}

impl Stream {
    fn key(id: u64) -> FlowKey {
        // A bijection of the id (splitmix64's finaliser), so ids never
        // collide, spread over addresses and ports.
        let mut z = id.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        FlowKey::v4((z >> 32) as u32, z as u32, (id >> 16) as u16 | 1024, 443, 6)
    }
    /// The next packet's key and time, and whether a tick began with it.
    #[inline]
    fn next(&mut self) -> (FlowKey, u64, bool) {
        let r = self.rng.next_u64();
        if r & 15 == 0 {
            self.base += 1;
        }
        let id = self.base + (r >> 4) % self.n;
        let now = self.packet / self.per_tick;
        let tick = self.packet.is_multiple_of(self.per_tick);
        self.packet += 1;
        (Self::key(id), now, tick)
    }
}

fn expire(t: &mut FlowTable<FlowKey, u64>, v: Variant, now: u64) {
    let drop_it = |_: FlowKey, _: u64| {};
    match v {
        Variant::Ordered => t.expire(now, drop_it),
        Variant::Walk => t.expire_walk(now, drop_it),
        Variant::Quadratic => t.expire_walk_quadratic(now, drop_it),
    };
}

/// Runs `packets` packets of the stream with `v`'s expiry; ns per packet
/// in all, and of that in expiry (timed per tick: two clock reads per
/// `per_tick` packets).
fn run(t: &mut FlowTable<FlowKey, u64>, s: &mut Stream, v: Variant, packets: u64) -> (f64, f64) {
    let started = Instant::now();
    let mut in_expiry = 0.0;
    for _ in 0..packets {
        let (k, now, tick) = s.next();
        if tick {
            let e = Instant::now();
            expire(t, v, now);
            in_expiry += e.elapsed().as_secs_f64();
        }
        *t.touch(k, now, || 0).0 += 1;
    }
    let per = 1e9 / packets as f64;
    (started.elapsed().as_secs_f64() * per, in_expiry * per)
}

/// One variant at one size, and the table as the last rep left it.
#[derive(Clone, Debug)]
pub struct Case {
    pub variant: Variant,
    pub flows: usize,
    /// Packets measured per rep.
    pub packets: u64,
    /// The part of each rep's ns/packet spent expiring.
    pub expiry_ns: Vec<f64>,
    /// After the last rep: flows in the table, lifetime counters.
    pub live: usize,
    pub expired: u64,
    pub evicted: u64,
    pub memory_bytes: usize,
}

impl Case {
    pub fn expiry_median(&self) -> f64 {
        median(&self.expiry_ns)
    }
}

/// The flow-table experiment's result row: ns per packet, per rep.
pub type Row = crate::stats::Row<Case>;

/// Measures every size: a warm-up to the steady state, then reps in which
/// the variants take turns (each rep starts with a different one) on the
/// same table and the same continuing stream.
pub fn measure(st: &Settings, pmc: &mut Option<crate::pmc::Pmc>, mut progress: impl FnMut(&Row)) -> Vec<Row> {
    let mut rows = Vec::new();
    for &n in &st.sizes {
        let n = n.max(1);
        let per_tick = st.per_tick.max(1);
        let timeout = (4 * n as u64).div_ceil(per_tick);
        let mut t: FlowTable<FlowKey, u64> = FlowTable::new(2 * n, timeout);
        let mut s = Stream { rng: Rng::new(st.seed ^ n as u64), base: 0, n: n as u64, packet: 0, per_tick };
        run(&mut t, &mut s, Variant::Ordered, 5 * n as u64);
        let variants: Vec<Variant> =
            Variant::ALL.into_iter().filter(|&v| v != Variant::Quadratic || n <= st.quadratic_max).collect();
        // Whole ticks; a walk visits the slab's high-water mark of slots.
        let slots = (n as u64 * 3 / 2).max(1);
        let packets = |v: Variant| -> u64 {
            let ticks = match v {
                Variant::Ordered => st.packets.div_ceil(per_tick),
                Variant::Walk => (st.walk_budget / slots).clamp(3, st.packets.div_ceil(per_tick).max(3)),
                Variant::Quadratic => (st.walk_budget / (slots * slots / 16).max(1)).clamp(1, 20),
            };
            ticks * per_tick
        };
        let first = rows.len();
        for &v in &variants {
            let case = Case {
                variant: v,
                flows: n,
                packets: packets(v),
                expiry_ns: Vec::new(),
                live: 0,
                expired: 0,
                evicted: 0,
                memory_bytes: t.memory_bytes(),
            };
            rows.push(Row::new(case, "ns/packet", false));
        }
        for rep in 0..st.reps.max(1) {
            for i in 0..variants.len() {
                let r: &mut Row = &mut rows[first + (i + rep) % variants.len()];
                let ((all, expiry), reading) = crate::pmc::maybe(pmc, || run(&mut t, &mut s, r.variant, r.packets));
                r.add_pmc(reading);
                r.values.push(all);
                r.expiry_ns.push(expiry);
            }
        }
        for r in &mut rows[first..] {
            r.live = t.len();
            r.expired = t.stats().expired;
            r.evicted = t.stats().evicted;
            progress(r);
        }
    }
    rows
}

/// How a variant's cost grew from the smallest size to the largest.
pub fn growth(rows: &[Row], v: Variant) -> Option<(usize, usize, f64)> {
    let mut r: Vec<&Row> = rows.iter().filter(|r| r.variant == v).collect();
    r.sort_by_key(|r| r.flows);
    let (a, b) = (r.first()?, r.last()?);
    (a.flows != b.flows).then(|| (a.flows, b.flows, b.median() / a.median()))
}

/// The post's effect: a walk per tick costs more per packet as the table
/// grows (about linearly), expiry off an ordered list does not.
pub fn verdict(rows: &[Row]) -> Option<(bool, String)> {
    let (a, b, walk) = growth(rows, Variant::Walk)?;
    let (_, _, ours) = growth(rows, Variant::Ordered)?;
    let scale = b as f64 / a as f64;
    let holds = walk >= scale / 4.0 && ours * 10.0 <= walk;
    let mut s = format!(
        "from {a} to {b} flows (x{scale:.0}) the walk's cost per packet grew x{walk:.1}, ours x{ours:.1} (cache misses of a larger table; its expiry part went {:.1} -> {:.1} ns)",
        expiry_at(rows, Variant::Ordered, a), expiry_at(rows, Variant::Ordered, b)
    );
    if let Some((qa, qb, q)) = growth(rows, Variant::Quadratic) {
        let _ = write!(s, ", the O(n^2) walk's x{q:.0} (from {qa} to {qb})");
    }
    Some((holds, s))
}

fn expiry_at(rows: &[Row], v: Variant, flows: usize) -> f64 {
    rows.iter().find(|r| r.variant == v && r.flows == flows).map_or(f64::NAN, |r| r.expiry_median())
}

pub fn row_json(r: &Row, st: &Settings) -> Value {
    let mut v = row_json_plain(r, st);
    if let Some(reading) = &r.pmc {
        let (hw, sw) = crate::pmc::Reading::json_fields(Some(reading));
        v["pmc"] = hw;
        v["pmc_sw"] = sw;
    }
    v
}

fn row_json_plain(r: &Row, st: &Settings) -> Value {
    json!({
        "bench": "flowtable",
        "row": "flowtable",
        "expiry": r.variant.name(),
        "flows": r.flows,
        "capacity": 2 * r.flows,
        "per_tick": st.per_tick,
        "packets": r.packets,
        "reps": r.values.len(),
        // The PMC post gives no figures, only the shape (cost grows with flows).
        "seed": Value::Null,
        "ours": r.median(),
        "ours_min": r.min(),
        "ours_max": r.max(),
        "unit": "ns/packet",
        "expiry_ns_per_packet": r.expiry_median(),
        "live": r.live,
        "expired": r.expired,
        "evicted": r.evicted,
        "memory_bytes": r.memory_bytes,
    })
}

/// Same-size ratios of each walk to ours, per rep (the variants of a rep
/// run back to back on the same table), median and spread.
pub fn ratios(rows: &[Row]) -> Vec<Value> {
    let mut out = Vec::new();
    for o in rows.iter().filter(|r| r.variant == Variant::Ordered) {
        for w in rows.iter().filter(|r| r.variant != Variant::Ordered && r.flows == o.flows) {
            let per_rep: Vec<f64> = w.values.iter().zip(&o.values).map(|(w, o)| w / o).collect();
            out.push(json!({
                "bench": "flowtable",
                "row": "ratio",
                "ratio": format!("{}/ordered", w.variant.name()),
                "flows": o.flows,
                "seed": Value::Null,
                "ours": median(&per_rep),
                "ours_min": per_rep.iter().copied().fold(f64::INFINITY, f64::min),
                "ours_max": per_rep.iter().copied().fold(0.0, f64::max),
            }));
        }
    }
    out
}

pub fn table_header() -> String {
    format!(
        "{:>10} {:<8} {:>10} {:>9} {:>19} {:>10} {:>10} {:>9} {:>10} {:>8} {:>6}",
        "flows",
        "expiry",
        "packets",
        "ns/pkt",
        "[min-max]",
        "of which",
        "x ordered",
        "live",
        "expired",
        "evicted",
        "seed"
    )
}

pub fn table_row(r: &Row, rows: &[Row]) -> String {
    let ordered = rows.iter().find(|o| o.variant == Variant::Ordered && o.flows == r.flows).map(Row::median);
    format!(
        "{:>10} {:<8} {:>10} {:>9.1} {:>19} {:>10} {:>10} {:>9} {:>10} {:>8} {:>6}",
        r.flows,
        r.variant.name(),
        r.packets,
        r.median(),
        format!("[{:.1}-{:.1}]", r.min(), r.max()),
        format!("{:.1}", r.expiry_median()),
        ordered.map_or("-".into(), |o| format!("{:.1}", r.median() / o)),
        r.live,
        r.expired,
        r.evicted,
        "-"
    )
}

/// Cost per packet against flows, both axes logarithmic, a line per
/// expiry, min-max whiskers at each point.
pub fn svg(rows: &[Row], title: &str) -> String {
    let series: Vec<crate::svg::Series> =
        [(Variant::Ordered, "#4a7ab5"), (Variant::Walk, "#d9534f"), (Variant::Quadratic, "#8e44ad")]
            .into_iter()
            .map(|(v, color)| crate::svg::Series {
                name: v.name().to_owned(),
                color,
                points: rows
                    .iter()
                    .filter(|r| r.variant == v)
                    .map(|r| crate::svg::Point { x: r.flows as f64, median: r.median(), min: r.min(), max: r.max() })
                    .collect(),
            })
            .collect();
    crate::svg::log_lines(
        title,
        "flows (log)",
        "ns per packet (log)",
        &series,
        "median of the reps, whiskers min-max; expiry once per tick; the PMC post gives no figures, only this shape for its walk",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_reaches_a_steady_state_and_agrees_across_variants() {
        let st = Settings {
            sizes: vec![500, 2000],
            reps: 2,
            packets: 20_000,
            per_tick: 100,
            walk_budget: 100_000,
            quadratic_max: 2000,
            seed: 3,
        };
        let rows = measure(&st, &mut None, |_| {});
        assert_eq!(rows.len(), 6);
        for r in &rows {
            assert_eq!(r.values.len(), 2);
            // About n flows live, never more than the capacity.
            assert!(r.live > r.flows / 2 && r.live <= 2 * r.flows, "{r:?}");
            assert!(r.expired > 0, "the window's leftovers expire");
        }
        let svg = svg(&rows, "t");
        assert!(svg.starts_with("<svg") && svg.contains("walk-n2"));
        assert!(verdict(&rows).is_some());
    }
}
