//! `sluice-bench`: the test bed's experiments (the seed posts' tables, and
//! sluice against hashbrown, DPDK-style tables, httparse, picohttpparser,
//! crossbeam, mimalloc, dd, tcpdump, wrk...), each printing JSON. A binary of
//! its own so that the product binary, `sluice`, links none of the peers.
#![deny(unsafe_code)]

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use sluice_bench::pmc::{self, Pmc};
use sluice_bench::report::{self, SEED_BUCKETS, SEED_ENTRIES};
use sluice_bench::{probe, Bench, Measured, Prefetch, PrefixDist, Scenario, Settings, Structure, SyncMode, Tables};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

mod attack;
mod filter;
mod flowspec;
mod fronts;
mod guard;
mod guard_h2;
mod http;
mod http_load;
mod mem;
mod origins;
mod shield;
mod shield_peers;
mod shield_v6;
mod shield_veth;
mod slow;
mod syscalls;
mod tunnels;
// Under `--cfg loom` (CI's model check of the NatSys queue) the library's
// queue benchmark is built for loom's types and left out; so are the two
// experiments that run it.
#[cfg(not(loom))]
mod queue;
mod rules;
mod sets;
mod sets_geo;

/// The cache-resident probe's buffer: 8 MiB fits the last-level cache of
/// any server CPU of the last decade (L2 on none), so its random line reads
/// are LLC hits.
const PROBE_LLC_BYTES: usize = 8 << 20;

/// Dependent loads per repetition of the pointer chase: about 0.1 s at DRAM latency.
const CHASE_LOADS: u64 = 1_000_000;

// Parsed once per run; boxing the larger variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Packet classification in memory: structures x batch x prefetch x stride x table x threads.
    Classify(ClassifyArgs),
    /// Toeplitz hashing: the per-byte table against the bit-by-bit reference.
    Rss(RssBenchArgs),
    /// The file path of `sluice filter` against dd, cp and tcpdump, as ratios.
    Filter(filter::FilterBenchArgs),
    /// A rule file of N rules (ports, protocols, flags, VLANs...) against address-only rules, as a ratio.
    Rules(rules::RulesBenchArgs),
    /// Drops counted by origin (tagged CrowdSec elements) against untagged, the same set and traffic, as a ratio.
    Origins(origins::OriginsBenchArgs),
    /// FlowSpec: judging with 1,000 flows against without, installing 10,000 from a peer, gobgp add to first drop, nft -f beside.
    Flowspec(flowspec::FlowspecBenchArgs),
    /// sluice shield's XDP program per packet against BPF HASH and LPM_TRIE programs and an empty one (needs root).
    Shield(shield::ShieldBenchArgs),
    /// Loading a 6M-entry list from text against the file `sluice compile` makes of it.
    Load(rules::LoadBenchArgs),
    /// HTTP/1.1 request parsers: sluice-h1 against httparse and picohttpparser, and the seed's goto-vs-switch case.
    Http(http::HttpParseBenchArgs),
    /// sluice http-load against wrk on the same sluice http-serve, alternating, as ratios.
    HttpLoad(http_load::HttpBenchArgs),
    /// Cache line aliasing: page-aligned arrays against compounding offsets (the seed's pad table).
    Aliasing(mem::AliasingArgs),
    /// 4 KiB allocations aligned to 16 vs 4096 bytes: posix_memalign, Rust's Layout, mimalloc.
    Memalign(mem::MemalignArgs),
    /// The seed's pool workloads: our TfwPool-style pool against bumpalo, malloc and mimalloc.
    Pool(mem::PoolArgs),
    /// Runtime set updates into a large set: the control plane, its socket, ipset and nft.
    Sets(sets::SetsBenchArgs),
    /// Millions of timed adds into one dynamic set in batches: time per commit, expiry, peak RSS.
    SetsScale(sets::SetsScaleArgs),
    /// http-load straight to http-serve against through http-guard (limits on, none reached), alternating, as a ratio.
    Guard(guard::GuardBenchArgs),
    /// Messages over loopback TCP by write/read against io_uring batches: whether the guard should use io_uring.
    Syscalls(syscalls::SyscallsBenchArgs),
    /// The NatSys MPMC queue against crossbeam, a locked queue and rtrb, every item checked delivered once.
    #[cfg(not(loom))]
    Queue(queue::QueueBenchArgs),
    /// A flow table's expiry: ordered list against walks, cost per packet as flows grow.
    #[cfg(not(loom))]
    Flowtable(queue::FlowtableBenchArgs),
}

#[derive(Args, Debug)]
pub struct RssBenchArgs {
    /// Hashes per repetition.
    #[arg(long, default_value_t = 2_000_000)]
    pub hashes: u64,
    /// Repetitions (median, min and max are reported).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// One JSON object per input kind.
    #[arg(long)]
    pub json: bool,
    /// Hardware and software counters around each input kind's table hashing.
    #[arg(long)]
    pub pmc: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Preset {
    /// The headline comparison (naive, hashbrown, sluice, sluice-prefix, probe); under a minute.
    Quick,
    /// Every single-thread row of the seed post's DDIO tables, with its figures beside ours.
    Seed,
    /// The front filter (issue 12): tables of 250k/1M/6M/50M hosts with it on and off beside
    /// hashbrown, and 0.1/1/10/50% listed traffic at 6M; needs about 3 GB of memory.
    Filter,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum OutputFormat {
    Table,
    Json,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum PipelineArg {
    /// Pipelined (when prefetching table lines).
    Yes,
    No,
    /// Both, side by side.
    Both,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum FilterArg {
    /// sluice's exact tables with their front filter.
    On,
    Off,
    /// Both, side by side (rows without it end in -nofilter).
    Both,
}

/// With a preset, the scenario flags below that are given replace the
/// preset's values (a list of several multiplies its rows, named with a
/// suffix); with --structure they make the custom scenarios.
#[derive(Args, Debug)]
pub struct ClassifyArgs {
    /// A preset set of scenarios; ignored when --structure is given.
    #[arg(long, value_enum, default_value = "quick")]
    pub preset: Preset,
    /// Custom scenarios: structures (chained, hashbrown, sluice, sluice-prefix, prefix-trie), comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub structure: Vec<String>,
    /// Batch sizes [custom default: sluice's default batch].
    #[arg(long, value_delimiter = ',')]
    pub batch: Vec<usize>,
    /// Prefetch modes: none, header, bucket, both [custom default: bucket].
    #[arg(long, value_delimiter = ',')]
    pub prefetch: Vec<String>,
    /// Buffer strides in bytes [custom default: 2048].
    #[arg(long, value_delimiter = ',')]
    pub stride: Vec<usize>,
    /// Table entries: random hosts, or prefixes for prefix structures
    /// (firehol: random prefixes added to FireHOL level1) [custom default:
    /// 6000000].
    #[arg(long)]
    pub entries: Option<usize>,
    /// Prefix structures' lists: firehol (FireHOL level1 plus random
    /// prefixes, 80% longer than /24; IPv4), bgp (the public routing table's
    /// length mix), blocklist (FireHOL level1-3-like: mostly hosts, some
    /// short prefixes), comma-separated [custom default: firehol, with
    /// --ipv6 bgp].
    #[arg(long, value_delimiter = ',')]
    pub prefix_dist: Vec<String>,
    /// Prefix structures look up this list file instead (any list sluice
    /// reads: its entries of the scenario's family).
    #[arg(long, value_name = "FILE")]
    pub prefixes: Option<PathBuf>,
    /// Buckets of the chained table [custom default: 524288].
    #[arg(long, value_delimiter = ',')]
    pub buckets: Vec<usize>,
    /// Threads, each with its own ring (like NIC queues), pinned one per CPU [custom default: 1].
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// How threads reach the table: snapshot (sluice's), rwlock (a read lock
    /// per packet, as in the seed), none (no protection), arcswap (the
    /// arc-swap crate, for comparison) [custom default: snapshot].
    #[arg(long, value_delimiter = ',')]
    pub sync: Vec<String>,
    /// sluice's front filter on the exact tables [custom default: on; the
    /// quick preset has both for its headline rows].
    #[arg(long, value_enum)]
    pub filter: Option<FilterArg>,
    /// Shares of addresses (0-1, each source and destination on its own)
    /// drawn from the table's keys (host structures) or from inside its
    /// prefixes (prefix structures) [default: all random, 0.14% of
    /// addresses listed at 6M hosts].
    #[arg(long, value_delimiter = ',')]
    pub listed: Vec<f64>,
    /// Repetitions per scenario (median, min and max are reported).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Packets per repetition per thread.
    #[arg(long, default_value_t = 2_000_000)]
    pub packets: u64,
    /// Buffers in the ring.
    #[arg(long, default_value_t = 2048)]
    pub ring: usize,
    /// Seed of the generated sets and lookups: the same seed, the same run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Fill limit of sluice's exact tables (an experiment knob).
    #[arg(long, default_value_t = sluice_sets::DEFAULT_MAX_LOAD)]
    pub max_load: f64,
    /// `table` for a person, `json` for one object per row.
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
    /// Also write an SVG bar chart here.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Pipeline table-line prefetch across batches [custom default: yes].
    #[arg(long, value_enum)]
    pub pipeline: Option<PipelineArg>,
    /// IPv6 traffic and IPv6 tables (sluice and hashbrown; with a preset,
    /// its other rows are left out).
    #[arg(long)]
    pub ipv6: bool,
    /// Skip the memory-parallelism probes.
    #[arg(long)]
    pub no_probe: bool,
    /// Hardware and software counters per scenario, summed over its
    /// repetitions (each with its untimed warm-up pass).
    #[arg(long)]
    pub pmc: bool,
}

/// The experiments, one subcommand each.
#[derive(Parser)]
#[command(
    name = "sluice-bench",
    version,
    about = "sluice's test bed: the seed posts' experiments and sluice against its peers, as JSON"
)]
struct Cli {
    #[command(subcommand)]
    command: BenchCommand,
}

impl BenchCommand {
    /// Whether the experiment prints JSON (else a table for a person).
    fn json(&self) -> bool {
        match self {
            BenchCommand::Classify(a) => a.format == OutputFormat::Json,
            BenchCommand::Rss(a) => a.json,
            BenchCommand::Filter(a) => a.json,
            BenchCommand::Rules(a) => a.json,
            BenchCommand::Origins(a) => a.json,
            BenchCommand::Flowspec(a) => a.json,
            BenchCommand::Shield(a) => a.json,
            BenchCommand::Load(a) => a.json,
            BenchCommand::Http(a) => a.json,
            BenchCommand::HttpLoad(a) => a.json,
            BenchCommand::Aliasing(a) => a.out.json(),
            BenchCommand::Memalign(a) => a.out.json(),
            BenchCommand::Pool(a) => a.out.json(),
            BenchCommand::Sets(a) => a.json,
            BenchCommand::SetsScale(a) => a.json,
            BenchCommand::Guard(_) => true,
            BenchCommand::Syscalls(_) => true,
            #[cfg(not(loom))]
            BenchCommand::Queue(a) => a.json || a.format == OutputFormat::Json,
            #[cfg(not(loom))]
            BenchCommand::Flowtable(a) => a.json || a.format == OutputFormat::Json,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Every run says first which machine it ran on, so figures from two
    // machines are never compared by accident.
    let machine = sluice_bench::machine::Machine::read();
    if cli.command.json() {
        println!("{}", machine.record());
    } else {
        println!("machine: {}", machine.line());
    }
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice-bench: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The `sluice` binary that the file, HTTP and guard experiments run:
/// `$SLUICE_BIN`, else the one beside this binary (both are built into the
/// same target directory, and installed side by side), else `sluice` on PATH.
pub fn sluice_exe() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("SLUICE_BIN") {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe().context("finding this executable")?;
    let beside = me.with_file_name("sluice");
    if beside.is_file() {
        return Ok(beside);
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("sluice"))
        .find(|p| p.is_file());
    on_path.with_context(|| {
        format!(
            "no sluice binary beside {} or on PATH: build it (cargo build --release -p sluice-cli) or set SLUICE_BIN",
            me.display()
        )
    })
}

fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Classify(a) => classify(a),
        BenchCommand::Rss(a) => rss(a),
        BenchCommand::Filter(a) => filter::run(a),
        BenchCommand::Rules(a) => rules::run(a),
        BenchCommand::Origins(a) => origins::run(a),
        BenchCommand::Flowspec(a) => flowspec::run(a),
        BenchCommand::Shield(a) => shield::run(a),
        BenchCommand::Load(a) => rules::run_load(a),
        BenchCommand::Http(a) => http::run(a),
        BenchCommand::HttpLoad(a) => http_load::run(a),
        BenchCommand::Aliasing(a) => mem::aliasing(a),
        BenchCommand::Memalign(a) => mem::memalign(a),
        BenchCommand::Pool(a) => mem::pool(a),
        BenchCommand::Guard(a) => guard::run(a),
        BenchCommand::Syscalls(a) => syscalls::run(a),
        BenchCommand::Sets(a) => sets::run(a),
        BenchCommand::SetsScale(a) => sets::run_scale(a),
        #[cfg(not(loom))]
        BenchCommand::Queue(a) => queue::run_queue(a),
        #[cfg(not(loom))]
        BenchCommand::Flowtable(a) => queue::run_flowtable(a),
    }
}

/// Millions of hashes per second: median, min, max over `reps`.
fn rate(reps: usize, hashes: u64, mut f: impl FnMut(u64) -> u32) -> (f64, f64, f64) {
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let started = Instant::now();
        let mut acc = 0u32;
        for i in 0..hashes {
            acc ^= f(i);
        }
        std::hint::black_box(acc);
        v.push(hashes as f64 / started.elapsed().as_secs_f64() / 1e6);
    }
    let med = sluice_bench::median(&v);
    (med, v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(0.0, f64::max))
}

fn rss(a: RssBenchArgs) -> Result<()> {
    use sluice_steer::{hash_reference, Toeplitz, MAX_INPUT, MICROSOFT_KEY};
    let t = Toeplitz::new(&MICROSOFT_KEY);
    // Inputs vary per hash so nothing is hoisted out of the loop.
    let mut input = [0u8; MAX_INPUT];
    let mut pmc = a.pmc.then(Pmc::open_reporting);
    for (name, len) in [("ipv4-2tuple", 8usize), ("ipv4-4tuple", 12), ("ipv6-2tuple", 32), ("ipv6-4tuple", 36)] {
        let (fast, counts) = pmc::maybe(&mut pmc, || {
            rate(a.reps, a.hashes, |i| {
                input[..8].copy_from_slice(&i.to_le_bytes());
                t.hash(&input[..len])
            })
        });
        let slow_n = (a.hashes / 20).max(1);
        let reference = rate(a.reps, slow_n, |i| {
            input[..8].copy_from_slice(&i.to_le_bytes());
            hash_reference(&MICROSOFT_KEY, &input[..len])
        });
        if a.json {
            let mut v = serde_json::json!({
                "scenario": name, "input_bytes": len,
                "mhashes_median": fast.0, "mhashes_min": fast.1, "mhashes_max": fast.2,
                "reference_mhashes_median": reference.0, "speedup": fast.0 / reference.0,
            });
            add_pmc(&mut v, counts.as_ref());
            println!("{v}");
        } else {
            println!(
                "{name:<12} {len:>2} bytes  table {:>8.1} M hashes/s [{:.1}-{:.1}]  bit-by-bit {:>6.1} M/s  x{:.1}",
                fast.0,
                fast.1,
                fast.2,
                reference.0,
                fast.0 / reference.0
            );
            if let Some(c) = &counts {
                println!("  {}", c.line());
            }
        }
    }
    Ok(())
}

/// `"pmc"` (hardware, or null where there is none) and `"pmc_sw"` fields,
/// when counting was asked for.
fn add_pmc(v: &mut serde_json::Value, counts: Option<&pmc::Reading>) {
    if let Some(c) = counts {
        let (hw, sw) = pmc::Reading::json_fields(Some(c));
        v["pmc"] = hw;
        v["pmc_sw"] = sw;
    }
}

/// `given`, or `default` when the flag was not given.
fn or<T: Clone>(given: &[T], default: T) -> Vec<T> {
    if given.is_empty() {
        vec![default]
    } else {
        given.to_vec()
    }
}

fn custom(a: &ClassifyArgs) -> Result<Vec<Scenario>> {
    let mut v = Vec::new();
    let (buckets_l, prefetch_l) = (or(&a.buckets, SEED_BUCKETS), or(&a.prefetch, "bucket".to_string()));
    let (batch_l, stride_l) = (or(&a.batch, sluice_sets::DEFAULT_BATCH), or(&a.stride, 2048));
    let (threads_l, sync_l) = (or(&a.threads, 1), or(&a.sync, "snapshot".to_string()));
    for s in &a.structure {
        for &buckets in &buckets_l {
            let Some(structure) = Structure::parse(s, buckets) else {
                bail!("unknown structure {s:?} (chained, hashbrown, sluice, sluice-prefix, prefix-trie)");
            };
            if a.ipv6 && !structure.supports_ipv6() {
                bail!("{s} has no IPv6 variant (the seed's table is IPv4)");
            }
            for p in &prefetch_l {
                let Some(prefetch) = Prefetch::parse(p) else {
                    bail!("unknown prefetch mode {p:?} (none, header, bucket, both)")
                };
                for &batch in &batch_l {
                    for &stride in &stride_l {
                        for (&threads, sync_name) in threads_l.iter().flat_map(|t| sync_l.iter().map(move |s| (t, s))) {
                            let Some(sync) = SyncMode::parse(sync_name) else {
                                bail!("unknown sync mode {sync_name:?} (snapshot, rwlock, none, arcswap)");
                            };
                            let modes: &[bool] = match a.pipeline.unwrap_or(PipelineArg::Yes) {
                                PipelineArg::Yes => &[true],
                                PipelineArg::No => &[false],
                                PipelineArg::Both => &[false, true],
                            };
                            for &pipeline in modes {
                                let pipeline = pipeline && matches!(prefetch, Prefetch::Bucket | Prefetch::Both);
                                let pipe = if pipeline { "-pipe" } else { "" };
                                let v6 = if a.ipv6 { "-v6" } else { "" };
                                let sy = if sync_l.len() > 1 { format!("-{sync_name}") } else { String::new() };
                                let name = format!("{s}{v6}-b{batch}-{p}{pipe}-{stride}-t{threads}{sy}");
                                let default_dist = if a.ipv6 { PrefixDist::Bgp } else { PrefixDist::Firehol };
                                if v.iter().any(|x: &Scenario| x.name == name) {
                                    continue;
                                }
                                v.push(Scenario {
                                    name,
                                    structure,
                                    entries: a.entries.unwrap_or(SEED_ENTRIES),
                                    batch,
                                    prefetch,
                                    stride,
                                    threads,
                                    pipeline,
                                    ipv6: a.ipv6,
                                    sync,
                                    seed_mpps: None,
                                    filter: true,
                                    listed: None,
                                    prefix_dist: default_dist,
                                });
                            }
                        }
                    }
                }
            }
            if !matches!(structure, Structure::Chained { .. }) {
                break; // buckets only matter to the chained table
            }
        }
    }
    Ok(v)
}

/// Each scenario once per value of a flag given with several values (named
/// with `suffix(value)`), or with its one value set; unchanged when not given.
fn expand<T: Copy>(
    v: Vec<Scenario>,
    values: &[T],
    suffix: impl Fn(T) -> String,
    set: impl Fn(&mut Scenario, T),
) -> Vec<Scenario> {
    if values.is_empty() {
        return v;
    }
    let mut out = Vec::with_capacity(v.len() * values.len());
    for sc in v {
        for &x in values {
            let mut s = sc.clone();
            set(&mut s, x);
            if values.len() > 1 {
                s.name.push_str(&suffix(x));
            }
            out.push(s);
        }
    }
    out
}

/// The scenario flags given with a preset, applied over its values.
fn override_preset(mut v: Vec<Scenario>, a: &ClassifyArgs) -> Result<Vec<Scenario>> {
    let prefetch = a
        .prefetch
        .iter()
        .map(|p| {
            Prefetch::parse(p).with_context(|| format!("unknown prefetch mode {p:?} (none, header, bucket, both)"))
        })
        .collect::<Result<Vec<_>>>()?;
    let sync = a
        .sync
        .iter()
        .map(|s| {
            SyncMode::parse(s).with_context(|| format!("unknown sync mode {s:?} (snapshot, rwlock, none, arcswap)"))
        })
        .collect::<Result<Vec<_>>>()?;
    if a.ipv6 {
        // The firehol distribution is IPv4 only.
        v.retain(|s| {
            let firehol = s.prefix_dist == PrefixDist::Firehol && a.prefix_dist.is_empty() && a.prefixes.is_none();
            s.structure.supports_ipv6() && !(s.structure.holds_prefixes() && firehol)
        });
    }
    for s in &mut v {
        s.ipv6 |= a.ipv6;
        s.entries = a.entries.unwrap_or(s.entries);
        if let Structure::Chained { buckets } = &mut s.structure {
            *buckets = a.buckets.first().copied().unwrap_or(*buckets);
        }
    }
    v = expand(v, &a.batch, |b| format!("-b{b}"), |s, b| s.batch = b);
    v = expand(v, &prefetch, |p| format!("-{}", p.name()), |s, p| s.prefetch = p);
    v = expand(v, &a.stride, |x| format!("-{x}"), |s, x| s.stride = x);
    v = expand(v, &a.threads, |t| format!("-t{t}"), |s, t| s.threads = t);
    v = expand(v, &sync, |m| format!("-{}", m.name()), |s, m| s.sync = m);
    let pipe: &[bool] = match a.pipeline {
        None => &[],
        Some(PipelineArg::Yes) => &[true],
        Some(PipelineArg::No) => &[false],
        Some(PipelineArg::Both) => &[false, true],
    };
    v = expand(v, pipe, |p| if p { "-pipe" } else { "-nopipe" }.into(), |s, p| s.pipeline = p);
    if !a.listed.is_empty() {
        // The preset's own listed-traffic rows give way to the given shares.
        v.retain(|s| s.listed.is_none());
    }
    Ok(v)
}

/// `--prefix-dist` and `--prefixes` for presets and custom scenarios alike:
/// each prefix row once per distribution (named with its suffix), or with
/// the file's list.
fn prefix_lists(v: Vec<Scenario>, a: &ClassifyArgs) -> Result<Vec<Scenario>> {
    let dists: Vec<PrefixDist> = match &a.prefixes {
        Some(path) => vec![PrefixDist::File(path.clone())],
        None => a
            .prefix_dist
            .iter()
            .map(|d| {
                PrefixDist::parse(d)
                    .with_context(|| format!("unknown prefix distribution {d:?} (firehol, bgp, blocklist)"))
            })
            .collect::<Result<_>>()?,
    };
    if dists.is_empty() {
        return Ok(v);
    }
    let mut out = Vec::new();
    for sc in v {
        if !sc.structure.holds_prefixes() {
            out.push(sc);
            continue;
        }
        for d in &dists {
            let mut x = sc.clone();
            if dists.len() > 1 || matches!(d, PrefixDist::File(_)) {
                x.name.push_str(match d {
                    PrefixDist::File(_) => "-file",
                    _ => "",
                });
                if !matches!(d, PrefixDist::File(_)) {
                    x.name.push('-');
                    x.name.push_str(&d.name());
                }
            }
            x.prefix_dist = d.clone();
            if !out.iter().any(|o: &Scenario| o.name == x.name) {
                out.push(x);
            }
        }
    }
    Ok(out)
}

/// `--filter` and `--listed` for presets and custom scenarios alike.
fn filter_and_listed(mut v: Vec<Scenario>, a: &ClassifyArgs) -> Vec<Scenario> {
    if let Some(f) = a.filter {
        // The preset's own no-filter rows give way to the given mode.
        v.retain(|s| s.filter || s.structure != Structure::Sluice);
        let modes: &[bool] = match f {
            FilterArg::On => &[true],
            FilterArg::Off => &[false],
            FilterArg::Both => &[true, false],
        };
        let mut out = Vec::new();
        for s in v {
            for &on in modes {
                let mut x = s.clone();
                x.filter = on;
                if !on && f == FilterArg::Both {
                    x.name.push_str("-nofilter");
                }
                if on || x.structure == Structure::Sluice {
                    out.push(x);
                }
            }
        }
        v = out;
    }
    let listed: Vec<u64> = a.listed.iter().map(|l| l.to_bits()).collect();
    expand(v, &listed, |l| format!("-l{}", f64::from_bits(l) * 100.0), |s, l| s.listed = Some(f64::from_bits(l)))
}

fn classify(a: ClassifyArgs) -> Result<()> {
    let scenarios = scenarios_of(&a)?;
    let settings = Settings {
        reps: a.reps.max(1),
        packets: a.packets.max(1),
        ring_slots: a.ring.max(1),
        seed: a.seed,
        max_load: a.max_load,
    };
    let json = a.format == OutputFormat::Json;
    // Progress on stderr, only for a person watching.
    let progress = !json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut out = std::io::stdout().lock();
    let started = Instant::now();
    if !json {
        writeln!(
            out,
            "sluice-bench classify: {} scenarios, {} reps x {} packets, ring {}",
            scenarios.len(),
            settings.reps,
            settings.packets,
            settings.ring_slots
        )?;
        writeln!(out, "{}", report::table_header())?;
    }
    let mut tables = Tables::default();
    // Every prefix list is made or read before anything is built, so a bad
    // file stops the run at once; a file's rows show its entries.
    let mut scenarios = scenarios;
    for sc in scenarios.iter_mut().filter(|s| s.structure.holds_prefixes()) {
        let list = tables
            .list(&sc.prefix_dist, sc.entries, sc.ipv6, settings.seed)
            .map_err(|e| anyhow::anyhow!("{}: {e}", sc.name))?;
        if matches!(sc.prefix_dist, PrefixDist::File(_)) {
            sc.entries = list.len();
        }
    }
    let mut pmc = a.pmc.then(Pmc::open_reporting);
    // Every scenario is built first; then repetition r of every scenario
    // (and of the probes) runs before repetition r+1 of any: a slow spell
    // on a shared machine lands on all rows alike, so the ratios between
    // them hold.
    let mut benches: Vec<(Bench, Option<pmc::Reading>)> = Vec::with_capacity(scenarios.len());
    for (i, sc) in scenarios.iter().enumerate() {
        if progress {
            eprint!("\rbuilding {}/{}: {:<40}", i + 1, scenarios.len(), sc.name);
        }
        benches.push((Bench::new(sc, &settings, &mut tables), None));
    }
    // The probe reads a buffer as large as sluice's 6M-entry table (or the
    // first sluice table there is); probe-dram one four times the reported
    // last-level cache, so its reads go to DRAM whatever the cache (the
    // table-sized buffer may fit a large one); probe-llc one that fits the
    // last-level cache: the limit a lookup answered from cache (a front
    // filter's) runs into.
    let mut probes: Vec<(&str, probe::Probe)> = Vec::new();
    if !a.no_probe {
        let sluice = |b: &&(Bench, _)| b.0.scenario().structure == Structure::Sluice;
        let bytes = (benches.iter().filter(sluice).find(|b| b.0.scenario().entries == SEED_ENTRIES))
            .or_else(|| benches.iter().find(sluice))
            .map_or(32 << 20, |b| b.0.result().table_bytes);
        for (name, bytes) in
            [("probe", bytes), ("probe-dram", probe::dram_probe_bytes()), ("probe-llc", PROBE_LLC_BYTES)]
        {
            probes.push((name, probe::Probe::new(bytes, 16, settings.seed)));
        }
    }
    // And the latency of one miss beyond the last-level cache (a pointer
    // chase), beside the seed's figure.
    let mut chase = (!a.no_probe).then(|| probe::Chase::new(probe::dram_probe_bytes(), settings.seed));
    for r in 0..settings.reps {
        if let Some(c) = &mut chase {
            c.rep(CHASE_LOADS);
        }
        for (i, (b, counts)) in benches.iter_mut().enumerate() {
            if progress {
                eprint!("\rrep {}/{}, {}/{}: {:<40}", r + 1, settings.reps, i + 1, scenarios.len(), b.scenario().name);
            }
            let ((), c) = pmc::maybe(&mut pmc, || b.rep(&settings));
            if let Some(c) = c {
                counts.get_or_insert_with(pmc::Reading::default).add(&c);
            }
        }
        for (_, p) in &mut probes {
            p.rep(settings.packets * 2);
        }
    }
    if progress {
        eprint!("\r{:<80}\r", "");
    }
    let rows = write_rows(&mut out, benches, json)?;
    drop(tables);
    let build = (a.structure.is_empty() && a.preset == Preset::Quick)
        .then(|| Tables::time_sluice_build(SEED_ENTRIES, settings.seed));
    let limits = write_probes(&mut out, &probes, chase.as_ref(), json, settings.reps)?;
    let ratios = report::ratios(&rows, &limits, build);
    if let Some(r) = &ratios {
        if json {
            writeln!(out, "{r}")?;
        } else {
            write_ratios(&mut out, r)?;
        }
    }
    if !json {
        writeln!(out, "done in {:.1} s", started.elapsed().as_secs_f64())?;
    }
    if let Some(path) = &a.plot {
        let title = format!("sluice-bench classify ({} reps, {} packets/rep)", settings.reps, settings.packets);
        std::fs::write(path, report::svg(&rows, limits.table, &title))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The scenarios `classify`'s flags ask for, checked.
fn scenarios_of(a: &ClassifyArgs) -> Result<Vec<Scenario>> {
    if let Some(b) = a.batch.iter().find(|b| !(1..=sluice_sets::MAX_BATCH).contains(*b)) {
        bail!("batch {b} is outside 1-{}", sluice_sets::MAX_BATCH);
    }
    if let Some(s) = a.stride.iter().find(|&&s| s < 64) {
        bail!("stride {s} cannot hold a 60-byte frame");
    }
    if let Some(l) = a.listed.iter().find(|l| !(0.0..=1.0).contains(*l)) {
        bail!("--listed {l} is not a share between 0 and 1");
    }
    let scenarios = if a.structure.is_empty() {
        let preset = match a.preset {
            Preset::Quick => report::quick(),
            Preset::Seed => report::seed(),
            Preset::Filter => report::filter(),
        };
        override_preset(preset, a)?
    } else {
        custom(a)?
    };
    let scenarios = filter_and_listed(prefix_lists(scenarios, a)?, a);
    if scenarios.is_empty() {
        bail!("no scenario left (--ipv6 leaves out the seed's chained table)");
    }
    if !(0.05..=0.9).contains(&a.max_load) {
        bail!("--max-load must be between 0.05 and 0.9");
    }
    Ok(scenarios)
}

/// The probes' rates and the pointer chase's latency, printed; the limits they set.
fn write_probes(
    out: &mut impl Write,
    probes: &[(&str, probe::Probe)],
    chase: Option<&probe::Chase>,
    json: bool,
    reps: usize,
) -> Result<report::Probes> {
    let mut limits = report::Probes::default();
    for (name, p) in probes {
        let (bytes, r) = (p.bytes(), p.summary());
        if json {
            writeln!(out, "{}", report::probe_json(name, bytes, r, reps))?;
        } else {
            let what = match *name {
                "probe" => "table-sized",
                "probe-dram" => "beyond the last-level cache",
                _ => "cache-resident",
            };
            writeln!(out, "{name}: {:.1} M random 64-byte lines/s [{:.1}-{:.1}] over {} MiB, {what} (2 lookups per packet -> limit {:.1} Mpps)", r.0, r.1, r.2, bytes >> 20, r.0 / 2.0)?;
        }
        match *name {
            "probe" => limits.table = Some(r.0),
            "probe-dram" => limits.dram = Some(r.0),
            _ => limits.llc = Some(r.0),
        }
    }
    if let Some(c) = chase {
        let r = c.summary();
        if json {
            writeln!(out, "{}", report::chase_json(c.bytes(), r, reps))?;
        } else {
            writeln!(
                out,
                "probe-chase: {:.1} ns per dependent load [{:.1}-{:.1}] over {} MiB, beyond the last-level cache (the seed: ~{} ns per L3 miss on Sandy Bridge)",
                r.0,
                r.1,
                r.2,
                c.bytes() >> 20,
                report::SEED_MISS_NS
            )?;
        }
    }
    Ok(limits)
}

/// The ratios line(s) for a person.
fn write_ratios(out: &mut impl Write, r: &serde_json::Value) -> std::io::Result<()> {
    let f = |k: &str| r[k].as_f64().map_or("-".to_owned(), |x| format!("{x:.2}"));
    writeln!(
        out,
        "ratios: sluice/naive {}  sluice/hashbrown {}  sluice/probe {}  sluice/probe-dram {}  2*sluice/probe-llc {}  250k sluice/hashbrown (best batches) {}  sluice-prefix/sluice {}  sluice-prefix/prefix-trie {}  filter on/off {} (50% listed {})  build 6M set {} s",
        f("sluice_vs_naive"),
        f("sluice_vs_hashbrown"),
        f("sluice_vs_probe"),
        f("sluice_vs_dram_probe"),
        f("two_lookups_vs_llc_probe"),
        f("small_sluice_vs_hashbrown_best"),
        f("prefix_vs_sluice"),
        f("prefix_vs_prefix_trie"),
        f("filter_on_vs_off"),
        f("filter_on_vs_off_listed50"),
        f("build_6m_s")
    )?;
    if r["prefix_bgp_vs_sluice"].is_number() || r["prefix6_bgp_vs_sluice"].is_number() {
        writeln!(
            out,
            "prefix lists / sluice: bgp {}  blocklist {}  IPv6 bgp {}  IPv6 blocklist {}",
            f("prefix_bgp_vs_sluice"),
            f("prefix_blocklist_vs_sluice"),
            f("prefix6_bgp_vs_sluice"),
            f("prefix6_blocklist_vs_sluice")
        )?;
    }
    if let Some(x) = r["stride1920_sluice_vs_dram_probe"].as_f64() {
        writeln!(
            out,
            "stride 1920: sluice/probe-dram {x:.2}  sluice/hashbrown {}",
            f("stride1920_sluice_vs_hashbrown")
        )?;
    }
    if let Some(by_row) = r["filter_on_vs_off_by_row"].as_object().filter(|m| !m.is_empty()) {
        let list: Vec<String> =
            by_row.iter().map(|(k, v)| format!("{k} {:.2}", v.as_f64().unwrap_or(f64::NAN))).collect();
        writeln!(out, "filter on/off by row: {}", list.join("  "))?;
    }
    Ok(())
}

/// Each scenario's row (and its counters), printed; the rows.
fn write_rows(out: &mut impl Write, benches: Vec<(Bench, Option<pmc::Reading>)>, json: bool) -> Result<Vec<Measured>> {
    let mut rows: Vec<Measured> = Vec::with_capacity(benches.len());
    for (b, counts) in benches {
        let m = b.result();
        if json {
            let mut v = report::scenario_json(&m);
            add_pmc(&mut v, counts.as_ref());
            writeln!(out, "{v}")?;
        } else {
            writeln!(out, "{}", report::table_row(&m))?;
            if let Some((bytes, fpr)) = m.filter {
                writeln!(
                    out,
                    "  front filter {:.1} MiB, false positives {:.2}%",
                    bytes as f64 / (1 << 20) as f64,
                    fpr * 100.0
                )?;
            }
            if let Some(c) = &counts {
                writeln!(out, "  {}", c.line())?;
            }
        }
        rows.push(m);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_subcommand_and_flag_has_help() {
        let missing = sluice_service::help::without_help(&<super::Cli as clap::CommandFactory>::command());
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }
}
