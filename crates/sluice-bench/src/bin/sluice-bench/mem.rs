//! `sluice-bench aliasing`, `memalign` and `pool`: flags and printing only;
//! the experiments live in sluice-bench.

use super::OutputFormat;
use anyhow::{bail, Context, Result};
use clap::Args;
use sluice_bench::compare::{self, Row};
use sluice_bench::pmc::Pmc;
use sluice_bench::{aliasing, memalign, poolbench, Backend};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Output flags every memory bench shares.
#[derive(Args, Debug)]
pub struct MemOut {
    /// Repetitions, alternating the variants (median, min, max reported).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// `table` for a person, `json` for one object per row.
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
    /// Same as --format json: one JSON object per row.
    #[arg(long)]
    pub json: bool,
    /// Also write an SVG bar chart here (ours, and the seed's figure as a tick).
    #[arg(long, value_name = "FILE", alias = "plot")]
    pub svg: Option<PathBuf>,
    /// Count cycles, instructions, LLC misses, stalls (hardware, where there
    /// is a PMU) and task clock, page faults, context switches per row.
    #[arg(long)]
    pub pmc: bool,
}

impl MemOut {
    pub fn json(&self) -> bool {
        self.json || self.format == OutputFormat::Json
    }
}

#[derive(Args, Debug)]
pub struct AliasingArgs {
    /// Kernels: himeno (the seed's Jacobi, 19-point), triad (a = b + c*d).
    #[arg(long, value_delimiter = ',', default_values_t = ["himeno".to_string(), "triad".to_string()])]
    pub kernel: Vec<String>,
    /// Bytes each array is offset from the one before (compounding), as in the seed's table.
    #[arg(long, value_delimiter = ',', default_values_t = aliasing::DEFAULT_PADS)]
    pub pad: Vec<usize>,
    /// Boundary the unpadded arrays start on: 4096 or 2097152 (2 MiB).
    #[arg(long, default_value_t = 4096)]
    pub align: usize,
    /// Himeno grid, points per dimension i,j,k (himeno's S: 65,65,129).
    #[arg(long, value_delimiter = ',', default_values_t = [65usize, 65, 129])]
    pub grid: Vec<usize>,
    /// Jacobi sweeps per repetition.
    #[arg(long, default_value_t = 20)]
    pub iters: usize,
    /// Doubles per triad array.
    #[arg(long, default_value_t = 16 * 1024)]
    pub triad_len: usize,
    /// Triad passes per repetition.
    #[arg(long, default_value_t = 10_000)]
    pub triad_passes: usize,
    #[command(flatten)]
    pub out: MemOut,
}

#[derive(Args, Debug)]
pub struct MemalignArgs {
    /// 4 KiB allocations per batch repetition (the seed's 100,000).
    #[arg(long, default_value_t = memalign::SEED_N)]
    pub n: usize,
    /// alloc-touch-free iterations per loop repetition.
    #[arg(long, default_value_t = 1_000_000)]
    pub loop_n: usize,
    /// Backends: libc (posix_memalign), rust (Layout via the global allocator), mimalloc.
    #[arg(long, value_delimiter = ',', default_values_t = ["libc".to_string(), "rust".to_string(), "mimalloc".to_string()])]
    pub backend: Vec<String>,
    #[command(flatten)]
    pub out: MemOut,
}

#[derive(Args, Debug)]
pub struct PoolArgs {
    /// The seed's N (20,000,000 there): small allocations per repetition.
    #[arg(long, default_value_t = 2_000_000)]
    pub n: usize,
    /// Workloads: small, small-free, big, big-free, mix, crdestr.
    #[arg(long, value_delimiter = ',')]
    pub workload: Vec<String>,
    /// Allocators: pool, bumpalo, system, mimalloc.
    #[arg(long, value_delimiter = ',')]
    pub allocator: Vec<String>,
    #[command(flatten)]
    pub out: MemOut,
}

fn open_pmc(on: bool) -> Option<Pmc> {
    on.then(Pmc::open_reporting)
}

fn print(
    experiment: &str,
    rows: &[Row],
    verdict: &[String],
    out: &MemOut,
    title: &str,
    started: Instant,
) -> Result<()> {
    if out.json() {
        for r in rows {
            println!("{}", r.json(experiment));
        }
        println!("{}", serde_json::json!({"experiment": experiment, "verdict": verdict}));
    } else {
        println!("{title}");
        print!("{}", compare::table(rows));
        for l in verdict {
            println!("{l}");
        }
        println!("done in {:.1} s", started.elapsed().as_secs_f64());
    }
    if let Some(path) = &out.svg {
        write_svg(path, rows, title)?;
    }
    Ok(())
}

fn write_svg(path: &Path, rows: &[Row], title: &str) -> Result<()> {
    std::fs::write(path, compare::svg(rows, title)).with_context(|| format!("writing {}", path.display()))
}

pub fn aliasing(a: AliasingArgs) -> Result<()> {
    let kernels = a
        .kernel
        .iter()
        .map(|k| match k.as_str() {
            "himeno" => Ok(aliasing::Kernel::Himeno),
            "triad" => Ok(aliasing::Kernel::Triad),
            _ => bail!("unknown kernel {k:?} (himeno, triad)"),
        })
        .collect::<Result<Vec<_>>>()?;
    if !a.align.is_power_of_two() || a.align < 64 {
        bail!("--align must be a power of two of at least 64");
    }
    let [i, j, k] = a.grid[..] else { bail!("--grid takes three sizes i,j,k") };
    if i.min(j).min(k) < 3 {
        bail!("--grid sizes must be at least 3");
    }
    let cfg = aliasing::Config {
        kernels,
        pads: a.pad.clone(),
        align: a.align,
        grid: (i, j, k),
        iters: a.iters.max(1),
        triad_len: a.triad_len.max(1),
        triad_passes: a.triad_passes.max(1),
        reps: a.out.reps.max(1),
    };
    let started = Instant::now();
    let mut pmc = open_pmc(a.out.pmc);
    let rows = aliasing::run(&cfg, &mut pmc);
    let title = format!(
        "sluice-bench aliasing: arrays at {}-byte boundaries + k*pad, himeno {i}x{j}x{k} x{} sweeps, triad {} doubles x{}, {} reps",
        cfg.align, cfg.iters, cfg.triad_len, cfg.triad_passes, cfg.reps
    );
    print("aliasing", &rows, &aliasing::verdict(&rows), &a.out, &title, started)?;
    Ok(())
}

pub fn memalign(a: MemalignArgs) -> Result<()> {
    let backends = a
        .backend
        .iter()
        .map(|b| match b.as_str() {
            "libc" => Ok(Backend::Libc),
            "rust" => Ok(Backend::Rust),
            "mimalloc" => Ok(Backend::Mimalloc),
            _ => bail!("unknown backend {b:?} (libc, rust, mimalloc)"),
        })
        .collect::<Result<Vec<_>>>()?;
    let cfg = memalign::Config { backends, n: a.n.max(1), loop_n: a.loop_n.max(1), reps: a.out.reps.max(1) };
    let started = Instant::now();
    let mut pmc = open_pmc(a.out.pmc);
    let rows = memalign::run(&cfg, &mut pmc);
    let title = format!(
        "sluice-bench memalign: 4 KiB allocations, align 16 vs 4096; batch {} then free, loop {}; {} reps",
        cfg.n, cfg.loop_n, cfg.reps
    );
    print("memalign", &rows, &memalign::verdict(&rows), &a.out, &title, started)?;
    Ok(())
}

pub fn pool(a: PoolArgs) -> Result<()> {
    let mut cfg = poolbench::Config { n: a.n.max(100), reps: a.out.reps.max(1), ..Default::default() };
    if !a.workload.is_empty() {
        cfg.workloads = a
            .workload
            .iter()
            .map(|w| {
                poolbench::Workload::parse(w)
                    .with_context(|| format!("unknown workload {w:?} (small, small-free, big, big-free, mix, crdestr)"))
            })
            .collect::<Result<_>>()?;
    }
    if !a.allocator.is_empty() {
        cfg.allocators = a
            .allocator
            .iter()
            .map(|x| {
                poolbench::Allocator::parse(x)
                    .with_context(|| format!("unknown allocator {x:?} (pool, bumpalo, system, mimalloc)"))
            })
            .collect::<Result<_>>()?;
    }
    let started = Instant::now();
    let mut pmc = open_pmc(a.out.pmc);
    let rows = poolbench::run(&cfg, &mut pmc);
    let title = format!(
        "sluice-bench pool: N = {} (seed: {}), ns per allocation, {} reps; seed column = the seed's ms / its count",
        cfg.n,
        poolbench::SEED_N,
        cfg.reps
    );
    print("pool", &rows, &poolbench::verdict(&rows), &a.out, &title, started)?;
    Ok(())
}
