//! The seed's pool benchmark ("Fast Memory Pool Allocators: Boost, Nginx &
//! Tempesta FW"): our TfwPool-style [`Pool`] against bumpalo, the system
//! allocator (one allocation per object, through the global allocator as
//! `Box` would) and mimalloc (its `GlobalAlloc` methods, called directly).
//!
//! Workloads, as in the seed (N = 20,000,000 there; objects are touched with
//! one 8-byte store, pool creation and destruction are outside the timed
//! region except in `crdestr`):
//! - `small`: N allocations of 24 bytes; `small-free`: every 4th is freed
//!   right after it is made.
//! - `big`: N*24/240 allocations of 240 bytes; `big-free` likewise.
//! - `mix`: N allocations, 1/4 big (240 B), 1/4096 huge (8305 B, freed right
//!   away), the rest small. (The seed's listing nests the small branch where
//!   it can never run; the text says "1/4 of big and 1/4096 of huge", which
//!   is what this does.)
//! - `crdestr`: N/100 times: create a pool, 100 allocations (all big in
//!   every 4th pool, else all small, as the seed's loop tests `i`), destroy.
//!
//! bumpalo cannot free one allocation, so it has no `-free` rows and its
//! `mix` keeps the huge ones.

use crate::compare::{self, Row};
use crate::pmc::Pmc;
use crate::pool::Pool;
use crate::sys::{self, Backend, Heap};
use std::alloc::Layout;
use std::time::Instant;

pub const SEED_N: usize = 20_000_000;
const SMALL: usize = 24;
const BIG: usize = 240;
const HUGE: usize = 8305;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Small,
    SmallFree,
    Big,
    BigFree,
    Mix,
    CrDestr,
}

impl Workload {
    pub const ALL: [Workload; 6] =
        [Workload::Small, Workload::SmallFree, Workload::Big, Workload::BigFree, Workload::Mix, Workload::CrDestr];
    pub fn name(self) -> &'static str {
        match self {
            Workload::Small => "small",
            Workload::SmallFree => "small-free",
            Workload::Big => "big",
            Workload::BigFree => "big-free",
            Workload::Mix => "mix",
            Workload::CrDestr => "crdestr",
        }
    }
    pub fn parse(s: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == s)
    }
    /// Allocations (operations) the workload makes for a given N.
    pub fn ops(self, n: usize) -> usize {
        match self {
            Workload::Big | Workload::BigFree => n * SMALL / BIG,
            Workload::CrDestr => n / 100 * 100,
            _ => n,
        }
    }
    fn frees(self) -> bool {
        matches!(self, Workload::SmallFree | Workload::BigFree | Workload::Mix)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocator {
    Pool,
    Bumpalo,
    System,
    Mimalloc,
}

impl Allocator {
    pub const ALL: [Allocator; 4] = [Allocator::Pool, Allocator::Bumpalo, Allocator::System, Allocator::Mimalloc];
    pub fn name(self) -> &'static str {
        match self {
            Allocator::Pool => "pool",
            Allocator::Bumpalo => "bumpalo",
            Allocator::System => "system",
            Allocator::Mimalloc => "mimalloc",
        }
    }
    pub fn parse(s: &str) -> Option<Allocator> {
        Allocator::ALL.into_iter().find(|a| a.name() == s)
    }
    /// The seed's allocator this one stands beside, and its name.
    fn seed_peer(self) -> Option<&'static str> {
        match self {
            Allocator::Pool => Some("tfw_pool"),
            Allocator::System => Some("mallocfree"),
            // Nearest in kind: grows exponentially; boost::pool can free, bumpalo cannot.
            Allocator::Bumpalo => Some("boost::pool"),
            Allocator::Mimalloc => None,
        }
    }
}

/// The seed's user-space table (its "Update", best of 4 runs, Core
/// i7-4650U, N = 20M), in ms. The seed's figures.
pub fn seed_ms(peer: &str, w: Workload) -> Option<f64> {
    use Workload::*;
    Some(match (peer, w) {
        ("mallocfree", Small) => 711.0,
        ("mallocfree", SmallFree) => 478.0,
        ("mallocfree", Big) => 319.0,
        ("mallocfree", BigFree) => 204.0,
        ("boost::pool", Small) => 262.0,
        ("boost::pool", SmallFree) => 169.0,
        ("boost::pool", Big) => 181.0,
        ("boost::pool", BigFree) => 157.0,
        ("boost::pool", CrDestr) => 136.0,
        ("ngx_pool", Small) => 312.0,
        ("ngx_pool", Big) => 134.0,
        ("ngx_pool", Mix) => 554.0,
        ("ngx_pool", CrDestr) => 99.0,
        ("tfw_pool", Small) => 273.0,
        ("tfw_pool", SmallFree) => 102.0,
        ("tfw_pool", Big) => 107.0,
        ("tfw_pool", BigFree) => 46.0,
        ("tfw_pool", Mix) => 103.0,
        ("tfw_pool", CrDestr) => 53.0,
        _ => return None,
    })
}

#[derive(Clone, Debug)]
pub struct Config {
    pub n: usize,
    pub reps: usize,
    pub workloads: Vec<Workload>,
    pub allocators: Vec<Allocator>,
}

impl Default for Config {
    fn default() -> Self {
        Config { n: 2_000_000, reps: 5, workloads: Workload::ALL.to_vec(), allocators: Allocator::ALL.to_vec() }
    }
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).expect("small sizes")
}

/// The object size of allocation `i` of a workload.
#[inline]
fn size_of_op(w: Workload, i: usize) -> usize {
    match w {
        Workload::Small | Workload::SmallFree => SMALL,
        Workload::Big | Workload::BigFree => BIG,
        Workload::Mix if i & 0xfff == 0 => HUGE,
        Workload::Mix if i & 3 == 0 => BIG,
        Workload::Mix => SMALL,
        // In crdestr `i` is the pool's number.
        Workload::CrDestr if i & 3 == 0 => BIG,
        Workload::CrDestr => SMALL,
    }
}

/// Whether allocation `i` is freed right after it is made.
#[inline]
fn freed(w: Workload, i: usize) -> bool {
    match w {
        Workload::SmallFree | Workload::BigFree => i & 3 == 0,
        Workload::Mix => i & 0xfff == 0,
        _ => false,
    }
}

#[inline]
fn touch_pool(pool: &Pool, size: usize) -> usize {
    let o = pool.alloc_uninit(size, 8);
    // The seed's touch_obj: one 8-byte store.
    for b in &mut o[..8] {
        b.write(1);
    }
    o.as_ptr() as usize
}

/// One repetition: ns per allocation.
fn measure(a: Allocator, w: Workload, n: usize) -> f64 {
    let ops = w.ops(n);
    let mut sink = 0usize;
    let secs = match (a, w) {
        (Allocator::Pool, Workload::CrDestr) => {
            let t = Instant::now();
            for i in 0..n / 100 {
                let pool = Pool::new();
                for _ in 0..100 {
                    sink ^= touch_pool(&pool, size_of_op(w, i));
                }
            }
            t.elapsed().as_secs_f64()
        }
        (Allocator::Pool, _) => {
            let mut pool = Pool::new();
            let t = Instant::now();
            for i in 0..ops {
                sink ^= touch_pool(&pool, size_of_op(w, i));
                if freed(w, i) {
                    pool.free_last();
                }
            }
            let s = t.elapsed().as_secs_f64();
            drop(pool);
            s
        }
        (Allocator::Bumpalo, Workload::CrDestr) => {
            let t = Instant::now();
            for i in 0..n / 100 {
                let bump = bumpalo::Bump::new();
                for _ in 0..100 {
                    sink ^= sys::bump_alloc_touch(&bump, layout(size_of_op(w, i)));
                }
            }
            t.elapsed().as_secs_f64()
        }
        (Allocator::Bumpalo, _) => {
            let bump = bumpalo::Bump::new();
            let t = Instant::now();
            for i in 0..ops {
                sink ^= sys::bump_alloc_touch(&bump, layout(size_of_op(w, i)));
            }
            let s = t.elapsed().as_secs_f64();
            drop(bump);
            s
        }
        (Allocator::System | Allocator::Mimalloc, _) => {
            let backend = if a == Allocator::System { Backend::Rust } else { Backend::Mimalloc };
            if w == Workload::CrDestr {
                let t = Instant::now();
                for i in 0..n / 100 {
                    // A "pool" of per-object allocations: its list, then each freed.
                    let mut heap = Heap::with_capacity(backend, 100);
                    for _ in 0..100 {
                        sink ^= heap.alloc_touch(layout(size_of_op(w, i)));
                    }
                }
                t.elapsed().as_secs_f64()
            } else {
                let mut heap = Heap::with_capacity(backend, ops);
                let t = Instant::now();
                for i in 0..ops {
                    sink ^= heap.alloc_touch(layout(size_of_op(w, i)));
                    if freed(w, i) {
                        heap.free_last();
                    }
                }
                let s = t.elapsed().as_secs_f64();
                drop(heap);
                s
            }
        }
    };
    std::hint::black_box(sink);
    secs * 1e9 / ops.max(1) as f64
}

/// Rows: workload x allocator, ns per allocation; ratio: system over this
/// allocator in the same repetition (how many times faster than malloc).
pub fn run(cfg: &Config, pmc: &mut Option<Pmc>) -> Vec<Row> {
    let mut rows = Vec::new();
    for &w in &cfg.workloads {
        let allocs: Vec<Allocator> = cfg
            .allocators
            .iter()
            .copied()
            .filter(|&a| !(a == Allocator::Bumpalo && w.frees() && w != Workload::Mix))
            .collect();
        if allocs.is_empty() {
            continue;
        }
        let (samples, readings) =
            compare::alternate(cfg.reps, allocs.len(), pmc, |v| measure(allocs[v], w, cfg.n.max(100)));
        let sys_i = allocs.iter().position(|&a| a == Allocator::System);
        let seed_sys = seed_ms("mallocfree", w);
        for (i, &a) in allocs.iter().enumerate() {
            let name = if a == Allocator::Bumpalo && w == Workload::Mix { "bumpalo(no free)" } else { a.name() };
            let mut row = compare::row(w.name(), name, "ns/op", false);
            row.values = samples[i].clone();
            row.pmc = readings[i].clone();
            if let Some(peer) = a.seed_peer() {
                if let Some(ms) = seed_ms(peer, w) {
                    row.seed = Some(ms * 1e6 / w.ops(SEED_N) as f64);
                    row.seed_note = Some(format!("{peer} {ms:.0} ms"));
                    row.seed_ratio = seed_sys.map(|s| s / ms);
                }
            }
            if let Some(si) = sys_i {
                row.baseline = Some("system".into());
                row.ratios = compare::paired_ratios(&row, &samples[si]);
            }
            rows.push(row);
        }
    }
    rows
}

/// Does the seed's ordering hold here: the pool faster than malloc, and
/// where the seed had both, by as much?
pub fn verdict(rows: &[Row]) -> Vec<String> {
    let mut lines = Vec::new();
    for r in rows.iter().filter(|r| r.name == "pool") {
        let Some(ratio) = r.ratio() else { continue };
        let mut l = format!("{}: pool {ratio:.2}x as fast as system", r.group);
        if let Some(sr) = r.seed_ratio {
            let v = if ratio >= 0.67 * sr {
                "holds"
            } else if ratio > 1.0 {
                "holds in direction, smaller"
            } else {
                "does not hold"
            };
            l += &format!(" (seed tfw_pool/mallocfree {sr:.2}x): {v}");
        }
        for other in ["bumpalo", "mimalloc"] {
            if let Some(o) = rows.iter().find(|x| x.group == r.group && x.name == other) {
                l += &format!("; {other} takes {:.2}x pool's time", o.median() / r.median());
            }
        }
        lines.push(l);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_allocator_runs_every_workload() {
        for w in Workload::ALL {
            for a in Allocator::ALL {
                assert!(measure(a, w, 1000) > 0.0, "{a:?} {w:?}");
            }
        }
    }

    #[test]
    fn mix_has_the_seeds_shares() {
        let n = 1 << 16;
        let big = (0..n).filter(|&i| size_of_op(Workload::Mix, i) == BIG).count();
        let huge = (0..n).filter(|&i| size_of_op(Workload::Mix, i) == HUGE).count();
        assert_eq!(huge, n / 4096);
        assert_eq!(big + huge, n / 4);
    }
}
