//! Cache line aliasing (the seed's posts #1 and #2): arrays that all start
//! on a page boundary make loads and stores at the same index differ by a
//! multiple of 4 KiB (4K aliasing in the store-forwarding check) and crowd
//! the same L1 sets. Each array k starts at an `align` boundary plus
//! `k * pad` bytes (the offset compounds per allocation, as in the seed's
//! himenobmtxpa branch), for pads over the seed's table.
//!
//! Two kernels: `himeno`, the himenobmtxpa Jacobi (19-point stencil, 34
//! flops per point, f32 as in the original, its 7 allocations in its order:
//! p, bnd, wrk1, wrk2, a[4], b[3], c[3]) on a grid small enough for the
//! default run; `triad`, a[i] = b[i] + c[i] * d[i] over four f64 arrays that
//! fit in L2. Offsets are in whole elements (the pad rounded down to the
//! element size: 127 bytes is 124 for f32 and 120 for f64), since Rust
//! slices of floats must be aligned.

use crate::compare::{self, Row};
use crate::pmc::Pmc;
use std::time::Instant;

/// The seed's table (post #2, Sandy Bridge Xeon, `himenobmtxpa M`): pad
/// bytes, LD_BLOCKS_PARTIAL.ADDRESS_ALIAS events, MFLOPS. The seed's figures.
pub const SEED_TABLE: [(usize, u64, f64); 11] = [
    (0, 217_799_413, 830.995025),
    (64, 18_138_386, 1624.296713),
    (96, 8_876_469, 1662.486298),
    (128, 19_281_984, 1645.370750),
    (192, 18_247_069, 1643.119908),
    (256, 18_511_952, 1661.426341),
    (320, 19_636_951, 1674.154119),
    (352, 19_716_236, 1686.694053),
    (384, 19_684_863, 1681.110499),
    (448, 18_189_029, 1683.163673),
    (512, 19_380_987, 1691.937818),
];

/// The seed's table's pads plus the small ones and post #1's 127 bytes.
pub const DEFAULT_PADS: [usize; 15] = [0, 8, 16, 32, 64, 96, 127, 128, 192, 256, 320, 352, 384, 448, 512];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    Himeno,
    Triad,
}

impl Kernel {
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Himeno => "himeno",
            Kernel::Triad => "triad",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    pub kernels: Vec<Kernel>,
    pub pads: Vec<usize>,
    /// Where each array's unpadded start lies: 4096, or 2 MiB.
    pub align: usize,
    /// Himeno grid (points per dimension, including the boundary).
    pub grid: (usize, usize, usize),
    /// Jacobi iterations per repetition.
    pub iters: usize,
    /// Elements per triad array, and passes over them per repetition.
    pub triad_len: usize,
    pub triad_passes: usize,
    pub reps: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            kernels: vec![Kernel::Himeno, Kernel::Triad],
            pads: DEFAULT_PADS.to_vec(),
            align: 4096,
            // himeno's "S" grid: 65 x 65 x 129 (2.1 MB per matrix, 31 MB in all).
            grid: (65, 65, 129),
            iters: 20,
            triad_len: 16 * 1024,
            triad_passes: 10_000,
            reps: 5,
        }
    }
}

/// A buffer with room for an array of `len` `T`s starting at an
/// `align`-aligned address plus `offset` bytes (rounded down to whole `T`s).
struct Placed<T> {
    buf: Vec<T>,
    start: usize,
    len: usize,
}

impl<T: Copy + Default> Placed<T> {
    fn new(len: usize, align: usize, offset: usize) -> Placed<T> {
        let sz = std::mem::size_of::<T>();
        let buf = vec![T::default(); len + (align + offset) / sz + 1];
        let addr = buf.as_ptr() as usize;
        let aligned = addr.next_multiple_of(align);
        let start = (aligned - addr) / sz + offset / sz;
        Placed { buf, start, len }
    }
    fn slice(&self) -> &[T] {
        &self.buf[self.start..self.start + self.len]
    }
    fn slice_mut(&mut self) -> &mut [T] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

/// himenobmtxpa's matrices, each allocation offset by its index times the pad.
struct Himeno {
    dims: (usize, usize, usize),
    p: Placed<f32>,
    bnd: Placed<f32>,
    wrk1: Placed<f32>,
    wrk2: Placed<f32>,
    a: Placed<f32>,
    b: Placed<f32>,
    c: Placed<f32>,
}

impl Himeno {
    fn new((ni, nj, nk): (usize, usize, usize), align: usize, pad: usize) -> Himeno {
        let m = ni * nj * nk;
        let mk = |k: usize, n: usize| Placed::<f32>::new(n * m, align, k * pad);
        let mut h = Himeno {
            dims: (ni, nj, nk),
            p: mk(0, 1),
            bnd: mk(1, 1),
            wrk1: mk(2, 1),
            wrk2: mk(3, 1),
            a: mk(4, 4),
            b: mk(5, 3),
            c: mk(6, 3),
        };
        // himenobmtxpa's initmt: a = 1,1,1,1/6; b = 0; c = 1; bnd = 1; wrk = 0;
        // p = (i/(imax-1))^2.
        // Every array is written once so each has pages of its own: calloc'd
        // pages never written all map the one shared zero page, which would
        // hide any aliasing (b is all zeros in himeno).
        for pl in [&mut h.p, &mut h.bnd, &mut h.wrk1, &mut h.wrk2, &mut h.a, &mut h.b, &mut h.c] {
            pl.slice_mut().fill(0.0);
        }
        let a = h.a.slice_mut();
        a[..3 * m].fill(1.0);
        a[3 * m..].fill(1.0 / 6.0);
        h.c.slice_mut().fill(1.0);
        h.bnd.slice_mut().fill(1.0);
        let p = h.p.slice_mut();
        for i in 0..ni {
            let v = (i * i) as f32 / ((ni - 1) * (ni - 1)) as f32;
            p[i * nj * nk..(i + 1) * nj * nk].fill(v);
        }
        h
    }

    /// One Jacobi sweep; returns gosa (the residual) so it is not optimised out.
    fn jacobi(&mut self) -> f32 {
        let (ni, nj, nk) = self.dims;
        let m = ni * nj * nk;
        let omega = 0.8f32;
        let mut gosa = 0.0f32;
        let p = self.p.slice();
        let (a, b, c) = (self.a.slice(), self.b.slice(), self.c.slice());
        let (bnd, wrk1) = (self.bnd.slice(), self.wrk1.slice());
        let wrk2 = self.wrk2.buf[self.wrk2.start..self.wrk2.start + m].as_mut();
        let row = |i: usize, j: usize| -> std::ops::Range<usize> {
            let s = (i * nj + j) * nk;
            s..s + nk
        };
        for i in 1..ni - 1 {
            for j in 1..nj - 1 {
                let r = row(i, j);
                let pc = &p[r.clone()];
                let pip = &p[row(i + 1, j)];
                let pim = &p[row(i - 1, j)];
                let pjp = &p[row(i, j + 1)];
                let pjm = &p[row(i, j - 1)];
                let pipjp = &p[row(i + 1, j + 1)];
                let pipjm = &p[row(i + 1, j - 1)];
                let pimjp = &p[row(i - 1, j + 1)];
                let pimjm = &p[row(i - 1, j - 1)];
                let a0 = &a[r.clone()];
                let a1 = &a[m + r.start..m + r.end];
                let a2 = &a[2 * m + r.start..2 * m + r.end];
                let a3 = &a[3 * m + r.start..3 * m + r.end];
                let b0 = &b[r.clone()];
                let b1 = &b[m + r.start..m + r.end];
                let b2 = &b[2 * m + r.start..2 * m + r.end];
                let c0 = &c[r.clone()];
                let c1 = &c[m + r.start..m + r.end];
                let c2 = &c[2 * m + r.start..2 * m + r.end];
                let bn = &bnd[r.clone()];
                let w1 = &wrk1[r.clone()];
                let w2 = &mut wrk2[r];
                for k in 1..nk - 1 {
                    let s0 = a0[k] * pip[k]
                        + a1[k] * pjp[k]
                        + a2[k] * pc[k + 1]
                        + b0[k] * (pipjp[k] - pipjm[k] - pimjp[k] + pimjm[k])
                        + b1[k] * (pjp[k + 1] - pjm[k + 1] - pjp[k - 1] + pjm[k - 1])
                        + b2[k] * (pip[k + 1] - pim[k + 1] - pip[k - 1] + pim[k - 1])
                        + c0[k] * pim[k]
                        + c1[k] * pjm[k]
                        + c2[k] * pc[k - 1]
                        + w1[k];
                    let ss = (s0 * a3[k] - pc[k]) * bn[k];
                    gosa += ss * ss;
                    w2[k] = pc[k] + omega * ss;
                }
            }
        }
        // himenobmtxpa copies wrk2 back into p's interior after each sweep.
        let p = self.p.slice_mut();
        let wrk2 = self.wrk2.slice();
        for i in 1..ni - 1 {
            for j in 1..nj - 1 {
                let s = (i * nj + j) * nk;
                p[s + 1..s + nk - 1].copy_from_slice(&wrk2[s + 1..s + nk - 1]);
            }
        }
        gosa
    }

    /// Floating-point operations per sweep, counted as himeno counts them.
    fn flops(&self) -> f64 {
        let (ni, nj, nk) = self.dims;
        34.0 * ((ni - 2) * (nj - 2) * (nk - 2)) as f64
    }
}

struct Triad {
    arrays: [Placed<f64>; 4],
}

impl Triad {
    fn new(len: usize, align: usize, pad: usize) -> Triad {
        let mut arrays = std::array::from_fn(|k| Placed::<f64>::new(len, align, k * pad));
        for (k, arr) in arrays.iter_mut().enumerate() {
            for (i, x) in arr.slice_mut().iter_mut().enumerate() {
                *x = (i % 7 + k) as f64 * 0.5;
            }
        }
        Triad { arrays }
    }

    fn pass(&mut self) -> f64 {
        let [a, b, c, d] = &mut self.arrays;
        let (b, c, d) = (b.slice(), c.slice(), d.slice());
        let a = a.slice_mut();
        for (((a, &b), &c), &d) in a.iter_mut().zip(b).zip(c).zip(d) {
            *a = b + c * d;
        }
        a[a.len() / 2]
    }
}

enum Work {
    Himeno(Himeno),
    Triad(Triad),
}

/// Runs the experiment; rows are kernel x pad, MFLOPS, ratio against pad 0.
pub fn run(cfg: &Config, pmc: &mut Option<Pmc>) -> Vec<Row> {
    let mut out = Vec::new();
    for &kernel in &cfg.kernels {
        let mut work: Vec<Work> = cfg
            .pads
            .iter()
            .map(|&pad| match kernel {
                Kernel::Himeno => Work::Himeno(Himeno::new(cfg.grid, cfg.align, pad)),
                Kernel::Triad => Work::Triad(Triad::new(cfg.triad_len, cfg.align, pad)),
            })
            .collect();
        let (samples, readings) = compare::alternate(cfg.reps, work.len(), pmc, |v| match &mut work[v] {
            Work::Himeno(h) => {
                h.jacobi(); // warm: first touch of wrk2, caches
                let t = Instant::now();
                let mut g = 0.0;
                for _ in 0..cfg.iters.max(1) {
                    g += h.jacobi();
                }
                let s = t.elapsed().as_secs_f64();
                std::hint::black_box(g);
                h.flops() * cfg.iters.max(1) as f64 / s / 1e6
            }
            Work::Triad(tr) => {
                tr.pass();
                let t = Instant::now();
                let mut g = 0.0;
                for _ in 0..cfg.triad_passes.max(1) {
                    g += tr.pass();
                    std::hint::black_box(&mut tr.arrays[0].buf);
                }
                let s = t.elapsed().as_secs_f64();
                std::hint::black_box(g);
                2.0 * (cfg.triad_len * cfg.triad_passes.max(1)) as f64 / s / 1e6
            }
        });
        let base = cfg.pads.iter().position(|&p| p == 0).map(|i| samples[i].clone());
        let seed0 = SEED_TABLE[0].2;
        for (i, &pad) in cfg.pads.iter().enumerate() {
            let elem = if kernel == Kernel::Himeno { 4 } else { 8 };
            let name =
                if pad % elem == 0 { format!("pad={pad}") } else { format!("pad={pad}(->{})", pad / elem * elem) };
            let mut row = compare::row(kernel.name(), &name, "MFLOPS", true);
            row.values = samples[i].clone();
            row.pmc = readings[i].clone();
            if kernel == Kernel::Himeno {
                if let Some(&(_, events, mflops)) = SEED_TABLE.iter().find(|e| e.0 == pad) {
                    row.seed = Some(mflops);
                    row.seed_note = Some(format!("{mflops:.0} MFLOPS, {events} alias events (himeno M, SNB Xeon)"));
                    row.seed_ratio = Some(mflops / seed0);
                }
            }
            if let Some(b) = &base {
                row.baseline = Some("pad=0".into());
                row.ratios = compare::paired_ratios(&row, b);
            }
            out.push(row);
        }
    }
    out
}

/// The verdict lines: does the seed's effect (pad 0 about half as fast as
/// any pad >= 64) hold here, and which pads hurt (below 90% of the kernel's
/// best median).
pub fn verdict(rows: &[Row]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut kernels: Vec<&str> = rows.iter().map(|r| r.group.as_str()).collect();
    kernels.dedup();
    for k in kernels {
        let rs: Vec<&Row> = rows.iter().filter(|r| r.group == k).collect();
        let best = rs.iter().map(|r| r.median()).fold(0.0, f64::max);
        let hurt: Vec<&str> = rs.iter().filter(|r| r.median() < 0.9 * best).map(|r| r.name.as_str()).collect();
        let zero = rs.iter().find(|r| r.name == "pad=0");
        let big: Vec<f64> = rs
            .iter()
            .filter(|r| r.name != "pad=0" && SEED_TABLE.iter().any(|e| e.0 > 0 && r.name == format!("pad={}", e.0)))
            .filter_map(|r| r.ratio())
            .collect();
        let mut line = format!("{k}: ");
        if let (Some(_), false) = (zero, big.is_empty()) {
            let med = crate::median(&big);
            let seed_big: Vec<f64> = SEED_TABLE[1..].iter().map(|e| e.2 / SEED_TABLE[0].2).collect();
            let seed_med = crate::median(&seed_big);
            let holds = med >= 1.5;
            line += &format!(
                "pads of the seed's table run {med:.2}x pad 0 (median over pads {:.2}-{:.2}; seed {seed_med:.2}x): the seed's effect {} on this CPU. ",
                compare::min(&big),
                compare::max(&big),
                if holds {
                    "holds"
                } else if med >= 1.1 {
                    "holds only in part"
                } else {
                    "does not hold"
                }
            );
        }
        if hurt.is_empty() {
            line += "no pad is below 90% of the best.";
        } else {
            line += &format!("below 90% of the best ({best:.0} MFLOPS): {}.", hurt.join(", "));
        }
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_start_where_asked() {
        for pad in [0, 8, 64, 127, 512] {
            let h = Himeno::new((5, 5, 9), 4096, pad);
            for (k, pl) in [&h.p, &h.bnd, &h.wrk1, &h.wrk2, &h.a, &h.b, &h.c].into_iter().enumerate() {
                let addr = pl.slice().as_ptr() as usize;
                assert_eq!(addr % 4096, (k * pad) / 4 * 4, "pad {pad} array {k}");
            }
        }
    }

    #[test]
    fn jacobi_reduces_the_residual_the_same_for_any_pad() {
        let g: Vec<f32> = [0usize, 64, 127]
            .iter()
            .map(|&pad| {
                let mut h = Himeno::new((9, 9, 17), 4096, pad);
                h.jacobi();
                h.jacobi()
            })
            .collect();
        assert!(g[0] > 0.0);
        assert_eq!(g[0], g[1]);
        assert_eq!(g[0], g[2]);
    }
}
