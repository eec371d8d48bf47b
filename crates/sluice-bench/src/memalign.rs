//! 4 KiB allocations aligned to 16 against 4096 bytes (the seed's
//! "Performance Issue with posix_memalign(3)"): glibc serves a page-aligned
//! request by asking for more and throwing the slack away, so the heap grows
//! about twice as fast (twice the brk calls in the seed's strace).
//!
//! Two patterns, each through libc `posix_memalign`, Rust's allocator
//! (`Layout::from_size_align(4096, align)`; the system allocator here, which
//! for an alignment above 16 calls `posix_memalign` itself) and mimalloc:
//! `batch`, N allocations each touched, then N frees (the seed's test, N =
//! 100,000), and `loop`, allocate, touch, free, N times (the allocator
//! recycles one block).

use crate::compare::{self, Row};
use crate::pmc::Pmc;
use crate::sys::{Backend, Heap};
use std::alloc::Layout;
use std::time::Instant;

/// The seed's figures: 100,000 4 KiB allocations then frees (Core i7-4650U,
/// glibc), 16-byte aligned 110 ms, page aligned 203 ms.
pub const SEED_N: usize = 100_000;
pub const SEED_16_MS: f64 = 110.0;
pub const SEED_4096_MS: f64 = 203.0;

#[derive(Clone, Debug)]
pub struct Config {
    pub backends: Vec<Backend>,
    /// Allocations per repetition of `batch`.
    pub n: usize,
    /// Iterations per repetition of `loop`.
    pub loop_n: usize,
    pub reps: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            backends: vec![Backend::Libc, Backend::Rust, Backend::Mimalloc],
            n: SEED_N,
            loop_n: 1_000_000,
            reps: 5,
        }
    }
}

const SIZE: usize = 4096;

fn batch(backend: Backend, align: usize, n: usize) -> f64 {
    let layout = Layout::from_size_align(SIZE, align).expect("power-of-two alignment");
    let mut heap = Heap::with_capacity(backend, n);
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(heap.alloc_touch(layout));
    }
    drop(heap);
    t.elapsed().as_secs_f64() * 1e9 / n as f64
}

fn looped(backend: Backend, align: usize, n: usize) -> f64 {
    let layout = Layout::from_size_align(SIZE, align).expect("power-of-two alignment");
    let mut heap = Heap::with_capacity(backend, 1);
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(heap.alloc_touch(layout));
        heap.free_last();
    }
    t.elapsed().as_secs_f64() * 1e9 / n as f64
}

/// Rows: pattern x backend x alignment, ns per allocation (alloc + touch +
/// free); ratio: the 16-byte-aligned row of the same backend over this one.
pub fn run(cfg: &Config, pmc: &mut Option<Pmc>) -> Vec<Row> {
    let mut rows = Vec::new();
    for pattern in ["batch", "loop"] {
        let variants: Vec<(Backend, usize)> = cfg.backends.iter().flat_map(|&b| [(b, 16usize), (b, 4096)]).collect();
        let (samples, readings) = compare::alternate(cfg.reps, variants.len(), pmc, |v| {
            let (b, align) = variants[v];
            if pattern == "batch" {
                batch(b, align, cfg.n.max(1))
            } else {
                looped(b, align, cfg.loop_n.max(1))
            }
        });
        for (i, &(b, align)) in variants.iter().enumerate() {
            let mut row = compare::row(pattern, &format!("{}-{align}", b.name()), "ns/op", false);
            row.values = samples[i].clone();
            row.pmc = readings[i].clone();
            let base = variants.iter().position(|&(bb, a)| bb == b && a == 16).expect("16 is measured");
            row.baseline = Some("same backend, align 16".into());
            row.ratios = compare::paired_ratios(&row, &samples[base]);
            if pattern == "batch" && b == Backend::Libc {
                let ms = if align == 16 { SEED_16_MS } else { SEED_4096_MS };
                row.seed = Some(ms * 1e6 / SEED_N as f64);
                row.seed_note = Some(format!("{ms:.0} ms for {SEED_N} (i7-4650U, glibc)"));
                row.seed_ratio = Some(SEED_16_MS / ms);
            }
            rows.push(row);
        }
    }
    rows
}

/// Does "page aligned is almost 2 times slower" hold here, per backend and pattern.
pub fn verdict(rows: &[Row]) -> Vec<String> {
    let mut lines = Vec::new();
    for r in rows.iter().filter(|r| r.name.ends_with("-4096")) {
        let Some(ratio) = r.ratio() else { continue };
        let slower = 1.0 / ratio;
        let v = if slower >= 1.5 {
            "holds"
        } else if slower >= 1.1 {
            "holds in part"
        } else {
            "does not hold"
        };
        lines.push(format!(
            "{} {}: align 4096 takes {slower:.2}x the time of align 16 (seed 1.85x for libc batch): {v}",
            r.group,
            r.name.trim_end_matches("-4096")
        ));
    }
    lines
}
