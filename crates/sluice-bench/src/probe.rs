//! The memory-parallelism probe: random 64-byte reads over a buffer as large
//! as the table, batched with prefetch. How many independent cache lines one
//! core can pull in per second is the limit for any structure that needs one
//! line per lookup.

use crate::ring::Rng;
use sluice_classify::mem::Table;
use sluice_classify::simd::prefetch;
use std::hint::black_box;
use std::time::Instant;

const LINE_WORDS: usize = 8;

/// Millions of random line reads per second over `bytes`, median of `reps`
/// runs of `lines` reads, batched `batch` at a time. Also returns min, max.
pub fn lines_per_second(bytes: usize, lines: u64, reps: usize, batch: usize, seed: u64) -> (f64, f64, f64) {
    let n_lines = (bytes / 64).max(1);
    let mut buf: Table<u64> = Table::zeroed(n_lines * LINE_WORDS);
    for (i, line) in buf.chunks_mut(LINE_WORDS).enumerate() {
        line[0] = i as u64;
    }
    let mask_ok = n_lines.is_power_of_two();
    let mut rng = Rng::new(seed);
    let mut idx = [0usize; 64];
    let batch = batch.clamp(1, idx.len());
    let mut results = Vec::with_capacity(reps);
    let mut sum = 0u64;
    for _ in 0..reps.max(1) {
        let started = Instant::now();
        let mut done = 0;
        while done < lines {
            for i in idx.iter_mut().take(batch) {
                let r = rng.next_u64() as usize;
                *i = if mask_ok { r & (n_lines - 1) } else { r % n_lines } * LINE_WORDS;
                prefetch(buf.addr_of(*i));
            }
            for &i in &idx[..batch] {
                sum = sum.wrapping_add(buf[i]);
            }
            done += batch as u64;
        }
        results.push(done as f64 / started.elapsed().as_secs_f64() / 1e6);
    }
    black_box(sum);
    let med = crate::median(&results);
    let min = results.iter().copied().fold(f64::INFINITY, f64::min);
    let max = results.iter().copied().fold(0.0, f64::max);
    (med, min, max)
}
