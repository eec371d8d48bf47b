//! `sluice-bench shield`: what `sluice shield`'s kernel program costs per
//! packet against the BPF maps XDP users reach for, in the same run.
//!
//! Contenders, each an XDP program: `sluice` (the shield's own program for
//! `drop saddr @set`: hosts in the engine's exact table, prefixes in its
//! prefix table, both in mmapable array maps), `sluice_prefix` (with
//! `--prefix-layout`: the same with the hosts in the prefix table, the
//! layout before the exact table), `hash` (a BPF `HASH` map of the hosts,
//! filled with `BPF_MAP_UPDATE_BATCH`, one lookup of the source), `lpm`
//! (a BPF `LPM_TRIE` of the prefixes, one lookup), `xdpfilter` (Debian's
//! xdp-filter, loaded by its own tool onto a veth in a netns, up to its
//! 10,000 addresses: [`crate::shield_peers`]) and `empty` (returns
//! `XDP_DROP`: the floor, what running any program costs, timer
//! included). After the rows, runtime updates of a dynamic set
//! ([`crate::shield_peers::updates`]). Each runs every frame of the same traffic
//! (distinct random sources, `--listed` of them in the set) once through
//! `BPF_PROG_TEST_RUN`, the contenders taking turns for `--reps` rounds;
//! the kernel's time per run (median of the rounds) is reported raw and
//! above the floor, and the ratio to the peer is taken above the floor.
//! Every contender must give every frame the same verdict (checked).
//!
//! What this is not: traffic through a NIC (no DMA, no driver), so a
//! cost, not a packet rate; and on a 2-vCPU shared machine the tables of
//! 1M entries and up do not fit the last-level cache, as on a real
//! server, but the absolute numbers are this machine's.

use anyhow::{bail, Context, Result};
use clap::Args;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_live::bpf::{BpfMap, MapType, XdpProgram, BPF_F_NO_PREALLOC};
use sluice_rules::{Action, AddrField, AddrValue, Depth, Match, Prefix, Rule, RuleFile, SetDef, SetSource};
use sluice_shield::asm::{Alu, Asm, Cond, Size, FP, R0, R1, R2, R3, R7, R8};
use sluice_shield::tables::Layout;
use sluice_shield::{Compiled, Options};
use std::os::fd::AsRawFd;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct ShieldBenchArgs {
    /// Host-set sizes to run (sluice against HASH and LPM_TRIE).
    #[arg(long, value_delimiter = ',', default_values_t = [10_000usize, 1_000_000])]
    pub hosts: Vec<usize>,
    /// IPv6 host-set sizes to run (/128s; sluice against HASH and
    /// LPM_TRIE of 16-byte keys).
    #[arg(long, value_delimiter = ',')]
    pub hosts6: Vec<usize>,
    /// Prefix-set sizes to run (BGP-like lengths; sluice against LPM_TRIE).
    #[arg(long, value_delimiter = ',', default_values_t = [1_000_000usize])]
    pub prefixes: Vec<usize>,
    /// Distinct frames (sources) per round.
    #[arg(long, default_value_t = 16_384)]
    pub frames: usize,
    /// Share of the frames whose source is in the set.
    #[arg(long, default_value_t = 0.5)]
    pub listed: f64,
    /// Rounds, the contenders taking turns (medians are reported).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// One JSON object per row.
    #[arg(long)]
    pub json: bool,
    /// Also run the hosts in the prefix table (the layout before the
    /// exact table) as the contender `sluice_prefix`.
    #[arg(long, hide = true)]
    pub prefix_layout: bool,
    /// Also run the exact table built to this most fill, as the contender
    /// `sluice_alt_load` (the default's fill chosen against it).
    #[arg(long, hide = true)]
    pub alt_max_load: Option<f64>,
    /// Also run the exact table with the key bucket read only after the
    /// tags, as the contender `sluice_late_keys`.
    #[arg(long, hide = true)]
    pub late_keys: bool,
    /// Also run the program with per-interface counters for this many
    /// interfaces, the one the test runs come in on (`lo`) the last of
    /// them, as the contender `sluice_ifaces` (the shield's program on N
    /// interfaces; `sluice` has none).
    #[arg(long, hide = true)]
    pub iface_rows: Option<u32>,
    /// Also run the hosts as a dynamic set, written as the shield writes
    /// runtime adds (`sluice_dynamic`), and the same counting its drops by
    /// origin, the hosts of 32 origins (`sluice_dyn_origins`: the CrowdSec
    /// set's program; a drop looks its element up again).
    #[arg(long, hide = true)]
    pub origins: bool,
    /// Leave xdp-filter out (it needs `xdp-filter` on the path, a netns
    /// and a bpffs mount of its own).
    #[arg(long)]
    pub no_xdp_filter: bool,
    /// Runtime updates: this many single adds to a dynamic set (0: none).
    #[arg(long, default_value_t = 100_000)]
    pub updates: usize,
    /// Also send this many frames of each hosts row over a veth into a
    /// netns, each contender attached in drv mode in turn, costs from
    /// `kernel.bpf_stats_enabled` (0: not).
    #[arg(long, default_value_t = 0)]
    pub veth_frames: u64,
    /// Adds timed from the call to the first frame dropped.
    #[arg(long, default_value_t = 1_000)]
    pub enforce_samples: usize,
}

/// A contender: its program (and what it holds), how long loading took
/// and how.
pub(crate) struct Contender {
    pub name: &'static str,
    pub program: XdpProgram,
    pub load_ms: f64,
    pub load_how: &'static str,
    /// Kernel memory of its tables, when known.
    pub table_bytes: Option<u64>,
    pub _maps: Vec<BpfMap>,
    pub _compiled: Option<Compiled>,
    pub _origins: Option<sluice_shield::origins::OriginCounts>,
}

impl Contender {
    pub fn new(name: &'static str, program: XdpProgram, load_ms: f64, load_how: &'static str) -> Contender {
        Contender {
            name,
            program,
            load_ms,
            load_how,
            table_bytes: None,
            _maps: Vec::new(),
            _compiled: None,
            _origins: None,
        }
    }
}

/// `drop saddr @set` as the rule file says it.
pub(crate) fn set_rule(source: SetSource) -> RuleFile {
    RuleFile {
        source: "(bench)".into(),
        text: String::new(),
        sets: vec![SetDef { name: "set".into(), line: 1, source }],
        rules: vec![Rule {
            line: 2,
            text: "drop saddr @set".into(),
            action: Action::Drop,
            matches: vec![Match::Addr {
                depth: Depth::Outer,
                field: AddrField::Src,
                negate: false,
                value: AddrValue::Set(0),
            }],
            police: None,
        }],
        default: Action::Pass,
    }
}

/// `drop saddr @set` as the shield compiles it, its tables as `layout` says.
pub(crate) fn sluice(name: &'static str, set: &[Prefix], layout: &Layout) -> Result<Contender> {
    sluice_with(name, set, layout, &Options::default())
}

/// [`sluice`] with these options.
fn sluice_with(name: &'static str, set: &[Prefix], layout: &Layout, opts: &Options) -> Result<Contender> {
    // The sets as the shield has them when it loads (parsed from files).
    let sets = [set.to_vec()];
    let file = set_rule(SetSource::Inline(Vec::new()));
    let t = Instant::now();
    let compiled = Compiled::with_layout(&file, &sets, opts, layout)?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    // The program lives as long as `compiled`; the contender holds both.
    let program = compiled.program().try_clone().context("dup of the program")?;
    let mut c = Contender::new(name, program, load_ms, "tables built, written through mmap, program verified");
    c.table_bytes = Some(compiled.table_bytes());
    c._compiled = Some(compiled);
    Ok(c)
}

/// `set` as a dynamic set's elements, written one by one as the shield
/// writes runtime adds; with `origins`, each host of one of 32 origins and
/// the drops counted by origin.
fn sluice_dynamic(name: &'static str, set: &[Prefix], origins: bool) -> Result<Contender> {
    use sluice_shield::origins::OriginCounts;
    let maxelem = Some(u32::try_from(set.len()).unwrap_or(u32::MAX).max(1));
    let file = set_rule(SetSource::Dynamic { timeout: None, maxelem });
    let counts = origins.then(|| OriginCounts::new("set")).transpose()?;
    let opts = Options { origins: counts.as_ref().map(OriginCounts::tap), ..Options::default() };
    let t = Instant::now();
    let compiled = Compiled::with_layout(&file, &[Vec::new()], &opts, &Layout::default())?;
    let (_, maps) = compiled.dynamic_sets().next().context("the dynamic set's tables")?;
    for (i, p) in set.iter().enumerate() {
        let origin = if origins { sluice_shield::tables::origin_byte(Some((i % 32) as u16)) } else { 0 };
        maps.insert(p, origin)?;
    }
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    let program = compiled.program().try_clone().context("dup of the program")?;
    let mut c = Contender::new(name, program, load_ms, "empty tables, then each host written through mmap");
    c.table_bytes = Some(compiled.table_bytes());
    c._compiled = Some(compiled);
    c._origins = counts;
    Ok(c)
}

/// Ethernet + IPv4 checks, then `R3` = the source (network order);
/// frames that are not IPv4 pass.
fn ipv4_source(a: &mut Asm, pass: sluice_shield::asm::Label) {
    a.ldx(Size::W, R7, R1, 0);
    a.ldx(Size::W, R8, R1, 4);
    a.mov(R2, R7);
    a.alu_imm(Alu::Add, R2, 34);
    a.jmp(Cond::Gt, R2, R8, pass);
    a.ldx(Size::H, R3, R7, 12);
    a.jmp_imm(Cond::Ne, R3, 0x0008, pass); // 0x0800 read little-endian
    a.ldx(Size::W, R3, R7, 26);
}

/// One map lookup of the key at fp-8 (`lpm`: prefix length first).
fn lookup_program(map: &BpfMap, lpm: bool) -> Vec<sluice_live::bpf::Insn> {
    let mut a = Asm::new();
    let pass = a.label();
    ipv4_source(&mut a, pass);
    if lpm {
        a.st_imm(Size::W, FP, -8, 32);
        a.stx(Size::W, FP, -4, R3);
    } else {
        a.stx(Size::W, FP, -8, R3);
    }
    a.lookup(map.as_raw_fd(), -8);
    a.jmp_imm(Cond::Eq, R0, 0, pass);
    a.mov_imm(R0, sluice_shield::program::XDP_DROP);
    a.exit();
    a.bind(pass);
    a.mov_imm(R0, sluice_shield::program::XDP_PASS);
    a.exit();
    a.finish().expect("a short program")
}

/// Fills `map` with `keys` (each `key_size` bytes, value 1) in one
/// `BPF_MAP_UPDATE_BATCH`, or element by element where the kernel has no
/// batch update for the map's type: how it was filled.
pub(crate) fn fill(map: &BpfMap, keys: &[u8], key_size: usize) -> Result<&'static str> {
    let values = vec![1u8; keys.len() / key_size];
    if map.update_batch(keys, &values).is_ok() {
        return Ok("BPF_MAP_UPDATE_BATCH");
    }
    for k in keys.chunks_exact(key_size) {
        map.update(k, &[1])?;
    }
    Ok("BPF_MAP_UPDATE_ELEM per element")
}

fn hash(set: &[Prefix]) -> Result<Contender> {
    let t = Instant::now();
    let map = BpfMap::new(MapType::Hash, 4, 1, set.len().max(1) as u32, 0, "bench_hash")?;
    let mut keys = Vec::with_capacity(4 * set.len());
    for p in set {
        let Prefix::V4 { addr, len: 32 } = *p else { bail!("the HASH program holds hosts only") };
        keys.extend_from_slice(&addr.to_be_bytes());
    }
    let how = fill(&map, &keys, 4)?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    let program = XdpProgram::load_named(&lookup_program(&map, false), "bench_hash")?;
    let mut c = Contender::new("hash", program, load_ms, how);
    c._maps = vec![map];
    Ok(c)
}

fn lpm(set: &[Prefix]) -> Result<Contender> {
    let t = Instant::now();
    let map = BpfMap::new(MapType::LpmTrie, 8, 1, set.len().max(1) as u32, BPF_F_NO_PREALLOC, "bench_lpm")?;
    let mut keys = Vec::with_capacity(8 * set.len());
    for p in set {
        let Prefix::V4 { addr, len } = *p else { bail!("IPv4 only") };
        keys.extend_from_slice(&u32::from(len).to_ne_bytes());
        keys.extend_from_slice(&addr.to_be_bytes());
    }
    let how = fill(&map, &keys, 8)?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    let program = XdpProgram::load_named(&lookup_program(&map, true), "bench_lpm")?;
    let mut c = Contender::new("lpm_trie", program, load_ms, how);
    c._maps = vec![map];
    Ok(c)
}

pub(crate) fn empty() -> Result<Contender> {
    let mut a = Asm::new();
    a.mov_imm(R0, sluice_shield::program::XDP_DROP);
    a.exit();
    let program = XdpProgram::load_named(&a.finish()?, "bench_empty")?;
    Ok(Contender::new("empty", program, 0.0, "-"))
}

pub(crate) fn frame(src: u32) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0, 0, 46, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&src.to_be_bytes());
    f.extend_from_slice(&[192, 0, 2, 1, 0x30, 0x39, 0, 53, 0, 26, 0, 0]);
    f.resize(60, 0);
    f
}

/// Random hosts, distinct, none in 192.0.2.0/24.
pub(crate) fn hosts(n: usize, rng: &mut ChaCha8Rng) -> Vec<Prefix> {
    let mut seen = std::collections::HashSet::with_capacity(n);
    while seen.len() < n {
        seen.insert(rng.random::<u32>() | 1);
    }
    let mut v: Vec<Prefix> = seen.into_iter().map(|addr| Prefix::V4 { addr, len: 32 }).collect();
    v.sort_unstable();
    v
}

/// Prefixes with a routing table's lengths (mostly /24, then /22-/23,
/// /20-/21, a few /16-/19).
fn prefixes(n: usize, rng: &mut ChaCha8Rng) -> Vec<Prefix> {
    let mut seen = std::collections::HashSet::with_capacity(n);
    while seen.len() < n {
        let len: u8 = match rng.random_range(0..100) {
            0..60 => 24,
            60..70 => 23,
            70..80 => 22,
            80..88 => 21,
            88..95 => 20,
            _ => rng.random_range(16..20),
        };
        let addr = rng.random::<u32>() & (u32::MAX << (32 - u32::from(len)));
        seen.insert((addr, len));
    }
    let mut v: Vec<Prefix> = seen.into_iter().map(|(addr, len)| Prefix::V4 { addr, len }).collect();
    v.sort_unstable();
    v
}

/// Sources: `listed` of them inside the set's elements, the rest random.
fn sources(set: &[Prefix], frames: usize, listed: f64, rng: &mut ChaCha8Rng) -> Vec<u32> {
    (0..frames)
        .map(|_| {
            if rng.random_bool(listed.clamp(0.0, 1.0)) {
                let Prefix::V4 { addr, len } = set[rng.random_range(0..set.len())] else { unreachable!() };
                addr | (rng.random::<u32>() & !(u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)))
            } else {
                rng.random::<u32>()
            }
        })
        .collect()
}

pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the rounds: each contender's median ns per run, after checking
/// every contender's verdicts against the first's.
pub(crate) fn measure(contenders: &[Contender], frames: &[Vec<u8>], reps: usize) -> Result<Vec<f64>> {
    let mut times = vec![Vec::new(); contenders.len()];
    let judged: Vec<Vec<u32>> = contenders
        .iter()
        .map(|c| frames.iter().map(|f| c.program.test_run(f)).collect::<Result<Vec<_>, _>>())
        .collect::<Result<_, _>>()?;
    for (c, v) in contenders.iter().zip(&judged).skip(1) {
        if c.name != "empty" && *v != judged[0] {
            let at = v.iter().zip(&judged[0]).position(|(a, b)| a != b).unwrap_or(0);
            bail!("{} and {} disagree on frame {at}", contenders[0].name, c.name);
        }
    }
    for _ in 0..reps {
        for (i, c) in contenders.iter().enumerate() {
            let mut total = 0u64;
            for f in frames {
                total += u64::from(c.program.test_run_repeat(f, 1)?.1);
            }
            times[i].push(total as f64 / frames.len() as f64);
        }
    }
    Ok(times.iter_mut().map(|t| median(t)).collect())
}

pub(crate) fn report(a: &ShieldBenchArgs, kind: &str, size: usize, contenders: &[Contender], ns: &[f64], peer: &str) {
    let floor = ns[contenders.iter().position(|c| c.name == "empty").expect("a floor")];
    let of = |name: &str| contenders.iter().position(|c| c.name == name).map(|i| ns[i]);
    let above = |ns: Option<f64>| (ns.unwrap_or(f64::NAN) - floor).max(0.0);
    let ratio_to = |peer: &str| above(of("sluice")) / above(of(peer)).max(f64::MIN_POSITIVE);
    let ratio = ratio_to(peer);
    // Against every other contender too (above the floor), by name.
    let ratios: serde_json::Map<String, serde_json::Value> = contenders
        .iter()
        .filter(|c| !matches!(c.name, "sluice" | "empty"))
        .map(|c| (c.name.to_string(), serde_json::json!(ratio_to(c.name))))
        .collect();
    if a.json {
        let rows: Vec<serde_json::Value> = contenders
            .iter()
            .zip(ns)
            .map(|(c, &t)| {
                serde_json::json!({
                    "contender": c.name, "ns_per_run": t, "ns_above_floor": (t - floor).max(0.0), "load_ms": c.load_ms,
                    "load": c.load_how, "table_bytes": c.table_bytes,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "bench": "shield", "set": kind, "entries": size, "frames": a.frames, "listed": a.listed,
                "contenders": rows, "peer": peer, "ratio_above_floor": ratio, "sluice_over": ratios,
            })
        );
    } else {
        println!("{kind} {size}: (ns per run, BPF_PROG_TEST_RUN; above the empty program's {floor:.1})");
        for (c, &t) in contenders.iter().zip(ns) {
            println!(
                "  {:<13} {t:>8.1} ns  {:>8.1} above  load {:>9.1} ms ({})",
                c.name,
                (t - floor).max(0.0),
                c.load_ms,
                c.load_how
            );
        }
        for (name, r) in &ratios {
            println!("  sluice / {name} above the floor: {:.2}x", r.as_f64().unwrap_or(f64::NAN));
        }
    }
}

/// The hosts row's frames as traffic over a veth ([`crate::shield_veth`]),
/// every contender but xdp-filter (attached by its own tool elsewhere).
fn veth_row(a: &ShieldBenchArgs, n: usize, contenders: &[Contender], frames: &[Vec<u8>]) -> Result<()> {
    let ours: Vec<&Contender> = contenders.iter().filter(|c| c.name != "xdpfilter").collect();
    let mut shares = Vec::new();
    for c in &ours {
        let mut dropped = 0usize;
        for f in frames {
            dropped += usize::from(c.program.test_run(f)? == sluice_shield::program::XDP_DROP as u32);
        }
        shares.push(dropped as f64 / frames.len().max(1) as f64);
    }
    let owned: Vec<Contender> = ours
        .iter()
        .map(|c| Ok(Contender::new(c.name, c.program.try_clone()?, c.load_ms, c.load_how)))
        .collect::<Result<_>>()?;
    let rows = crate::shield_veth::run(&owned, frames, &shares, a.veth_frames)?;
    if a.json {
        let list: Vec<serde_json::Value> = owned
            .iter()
            .zip(&rows)
            .map(|(c, r)| {
                serde_json::json!({
                    "contender": c.name, "ns_per_packet": r.ns_per_packet, "judged_mpps": r.judged_mpps,
                    "dropped_mpps": r.dropped_mpps, "sent_mpps": r.sent_mpps,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "bench": "shield", "row": "veth", "set": "hosts", "entries": n, "frames_sent": a.veth_frames,
                "contenders": list,
            })
        );
    } else {
        println!("hosts {n} on a veth (drv mode, {} frames each; run_time_ns / run_cnt):", a.veth_frames);
        for (c, r) in owned.iter().zip(&rows) {
            println!(
                "  {:<13} {:>8.1} ns/packet  judged {:.2} Mpps  dropped {:.2} Mpps  (sent {:.2} Mpps)",
                c.name, r.ns_per_packet, r.judged_mpps, r.dropped_mpps, r.sent_mpps
            );
        }
    }
    Ok(())
}

pub fn run(a: ShieldBenchArgs) -> Result<()> {
    let mut rng = ChaCha8Rng::seed_from_u64(0x5e1d);
    for &n in a.hosts.iter().filter(|&&n| n > 0) {
        let set = hosts(n, &mut rng);
        let frames: Vec<Vec<u8>> = sources(&set, a.frames, a.listed, &mut rng).into_iter().map(frame).collect();
        let mut contenders = vec![sluice("sluice", &set, &Layout::default())?];
        if a.prefix_layout {
            let before = Layout { exact_hosts: false, ..Layout::default() };
            contenders.push(sluice("sluice_prefix", &set, &before)?);
        }
        if let Some(max_load) = a.alt_max_load {
            contenders.push(sluice("sluice_alt_load", &set, &Layout { max_load, ..Layout::default() })?);
        }
        if a.late_keys {
            contenders.push(sluice("sluice_late_keys", &set, &Layout { early_keys: false, ..Layout::default() })?);
        }
        if let Some(n) = a.iface_rows.filter(|&n| n > 0) {
            // Indexes no interface has, then lo's (BPF_PROG_TEST_RUN's).
            let ifaces = (1..n).map(|i| 1_000_000 + i).chain([1]).collect();
            let opts = Options { ifaces, ..Options::default() };
            contenders.push(sluice_with("sluice_ifaces", &set, &Layout::default(), &opts)?);
        }
        if a.origins {
            contenders.push(sluice_dynamic("sluice_dynamic", &set, false)?);
            contenders.push(sluice_dynamic("sluice_dyn_origins", &set, true)?);
        }
        contenders.push(hash(&set)?);
        contenders.push(lpm(&set)?);
        // Held until the row is done: the netns and veth it was loaded on.
        let mut xdp_filter = None;
        if !a.no_xdp_filter && n <= crate::shield_peers::XDP_FILTER_MAX {
            let (c, guard) = crate::shield_peers::xdp_filter(&set)?;
            contenders.push(c);
            xdp_filter = Some(guard);
        }
        contenders.push(empty()?);
        let ns = measure(&contenders, &frames, a.reps)?;
        report(&a, "hosts", n, &contenders, &ns, "hash");
        if a.veth_frames > 0 {
            veth_row(&a, n, &contenders, &frames)?;
        }
        drop(contenders);
        drop(xdp_filter);
    }
    for &n in a.prefixes.iter().filter(|&&n| n > 0) {
        let set = prefixes(n, &mut rng);
        let frames: Vec<Vec<u8>> = sources(&set, a.frames, a.listed, &mut rng).into_iter().map(frame).collect();
        let contenders = vec![sluice("sluice", &set, &Layout::default())?, lpm(&set)?, empty()?];
        let ns = measure(&contenders, &frames, a.reps)?;
        report(&a, "prefixes", n, &contenders, &ns, "lpm_trie");
    }
    crate::shield_v6::rows(&a, &mut rng)?;
    if a.updates > 0 {
        crate::shield_peers::updates(a.updates, a.enforce_samples, a.json, &mut rng)?;
    }
    Ok(())
}
