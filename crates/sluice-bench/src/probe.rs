//! The memory-parallelism probe: random 64-byte reads over a buffer as large
//! as the table, batched with prefetch. How many independent cache lines one
//! core can pull in per second is the limit for any structure that needs one
//! line per lookup.

use crate::ring::Rng;
use sluice_sets::mem::Table;
use sluice_sets::simd::prefetch;
use std::hint::black_box;
use std::time::Instant;

const LINE_WORDS: usize = 8;

/// A probe buffer, kept between repetitions so they can be interleaved
/// with other measurements.
pub struct Probe {
    buf: Table<u64>,
    n_lines: usize,
    rng: Rng,
    batch: usize,
    /// Millions of lines per second, one per repetition.
    pub results: Vec<f64>,
}

impl Probe {
    /// A buffer of `bytes` (one line at least) read `batch` lines at a time.
    pub fn new(bytes: usize, batch: usize, seed: u64) -> Probe {
        let n_lines = (bytes / 64).max(1);
        let mut buf: Table<u64> = Table::zeroed(n_lines * LINE_WORDS);
        for (i, line) in buf.chunks_mut(LINE_WORDS).enumerate() {
            line[0] = i as u64;
        }
        Probe { buf, n_lines, rng: Rng::new(seed), batch: batch.clamp(1, 64), results: Vec::new() }
    }

    /// One repetition of `lines` random line reads; records and returns M lines/s.
    pub fn rep(&mut self, lines: u64) -> f64 {
        let (n_lines, batch) = (self.n_lines, self.batch);
        let mask_ok = n_lines.is_power_of_two();
        let mut idx = [0usize; 64];
        // Untimed: read the buffer once, so a repetition that follows other
        // measurements starts with what the cache holds of it, not nothing.
        let mut sum = self.buf.iter().step_by(LINE_WORDS).fold(0u64, |a, &w| a.wrapping_add(w));
        let started = Instant::now();
        let mut done = 0;
        while done < lines {
            for i in idx.iter_mut().take(batch) {
                let r = self.rng.next_u64() as usize;
                *i = if mask_ok { r & (n_lines - 1) } else { r % n_lines } * LINE_WORDS;
                prefetch(self.buf.addr_of(*i));
            }
            for &i in &idx[..batch] {
                sum = sum.wrapping_add(self.buf[i]);
            }
            done += batch as u64;
        }
        let rate = done as f64 / started.elapsed().as_secs_f64() / 1e6;
        black_box(sum);
        self.results.push(rate);
        rate
    }

    /// The buffer's size.
    pub fn bytes(&self) -> usize {
        self.n_lines * 64
    }

    /// Median, min and max of the repetitions so far.
    pub fn summary(&self) -> (f64, f64, f64) {
        summary(&self.results)
    }
}

/// The dependent-load probe: a pointer chase through a buffer's lines in one
/// random cycle, so each read waits for the one before. Its time per load is
/// the latency of a miss at that size (beyond the last-level cache: a DRAM
/// access, the seed's "an L3 miss on Sandybridge is ~50ns"), where [`Probe`]
/// measures how many misses overlap.
pub struct Chase {
    buf: Table<u64>,
    n_lines: usize,
    at: usize,
    /// Nanoseconds per load, one per repetition.
    pub results: Vec<f64>,
}

impl Chase {
    pub fn new(bytes: usize, seed: u64) -> Chase {
        let n_lines = (bytes / 64).max(2);
        // Sattolo's shuffle: a random permutation that is one cycle, so the
        // chase visits every line before it repeats one.
        let mut next: Vec<u32> = (0..n_lines as u32).collect();
        let mut rng = Rng::new(seed ^ 0x6368_6173);
        for i in (1..n_lines).rev() {
            let j = (rng.next_u64() % i as u64) as usize;
            next.swap(i, j);
        }
        let mut buf: Table<u64> = Table::zeroed(n_lines * LINE_WORDS);
        for (i, &n) in next.iter().enumerate() {
            buf[i * LINE_WORDS] = u64::from(n);
        }
        Chase { buf, n_lines, at: 0, results: Vec::new() }
    }

    /// One repetition of `loads` dependent loads; records and returns ns per load.
    pub fn rep(&mut self, loads: u64) -> f64 {
        let mut at = self.at;
        let started = Instant::now();
        for _ in 0..loads {
            at = self.buf[at * LINE_WORDS] as usize;
        }
        let ns = started.elapsed().as_secs_f64() * 1e9 / loads.max(1) as f64;
        self.at = black_box(at);
        self.results.push(ns);
        ns
    }

    pub fn bytes(&self) -> usize {
        self.n_lines * 64
    }

    /// Median, min and max of the repetitions so far.
    pub fn summary(&self) -> (f64, f64, f64) {
        summary(&self.results)
    }
}

/// Median, min and max of `results`.
fn summary(results: &[f64]) -> (f64, f64, f64) {
    let min = results.iter().copied().fold(f64::INFINITY, f64::min);
    let max = results.iter().copied().fold(0.0, f64::max);
    (crate::median(results), min, max)
}

/// The last-level cache's size as Linux reports it (the largest
/// `/sys/devices/system/cpu/cpu0/cache/index*/size`), if it does.
pub fn llc_bytes() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("size")).ok())
        .filter_map(|s| crate::machine::parse_size(&s).map(|b| b as usize))
        .max()
}

/// A buffer well beyond the last-level cache, so its random reads go to
/// DRAM: four times the reported LLC, at least 256 MiB.
pub fn dram_probe_bytes() -> usize {
    llc_bytes().map_or(0, |b| b.saturating_mul(4)).max(256 << 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dram_probe_is_beyond_the_cache() {
        assert!(dram_probe_bytes() >= 256 << 20);
        assert!(llc_bytes().is_none_or(|llc| dram_probe_bytes() >= 4 * llc));
    }

    #[test]
    fn the_chase_is_one_cycle_through_every_line() {
        let mut c = Chase::new(64 * 1000, 3);
        let mut seen = vec![false; 1000];
        let mut at = 0usize;
        for _ in 0..1000 {
            assert!(!seen[at], "line {at} visited twice before the cycle closed");
            seen[at] = true;
            at = c.buf[at * LINE_WORDS] as usize;
        }
        assert_eq!(at, 0, "back at the start after every line");
        assert!(c.rep(10_000) > 0.0);
        let (med, min, max) = c.summary();
        assert!(min <= med && med <= max);
    }

    #[test]
    fn probe_reads_and_reports() {
        let mut p = Probe::new(1 << 20, 16, 1);
        assert!(p.rep(10_000) > 0.0 && p.rep(10_000) > 0.0);
        let (med, min, max) = p.summary();
        assert!(min <= med && med <= max && min > 0.0);
        assert_eq!(p.bytes(), 1 << 20);
    }
}
