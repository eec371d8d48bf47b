//! `sluice-bench rules`: what a rule file costs over address-only rules.
//!
//! Generated IMIX traffic (a share of sources from FireHOL) is held in
//! memory; then, interleaved rep by rep so drift hits both alike, the same
//! packets are decoded and judged batch by batch (`decode`, then
//! `judge_decoded`: the pipeline's decode and judge steps, without I/O)
//! by (a) the address-only shorthand `--drop-src FireHOL` and (b) a rule
//! file of N rules: the same FireHOL drop, plus port, protocol, flag, VLAN,
//! ICMP and length rules and an inline set, of which few match. The ratio
//! b/a is the target (>= 0.8 for 100 rules).

use anyhow::{Context, Result};
use clap::Args;
use sluice_bench::pmc::{self, Pmc, Reading};
use sluice_engine::{judge_decoded, CompileOptions, RuleSet, Stats, Verdict};
use sluice_gen::{FrameSize, GenConfig, Generator, ProtoMix};
use sluice_rules::{parse_list, parse_rules, Prefix, FIREHOL_LEVEL1};
use sluice_wire::{decode_into, LinkType, PacketSummary};
use std::path::Path;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct RulesBenchArgs {
    /// Packets judged per repetition.
    #[arg(long, default_value_t = 1_000_000)]
    pub packets: u64,
    /// Rules in the generated rule file scenario.
    #[arg(long, default_value_t = 100)]
    pub rules: usize,
    /// Measure this rule file instead of the generated one (its list files
    /// are read as usual).
    #[arg(long, value_name = "FILE")]
    pub rules_file: Option<std::path::PathBuf>,
    /// Repetitions, the contenders alternating (median, min and max are reported).
    #[arg(long, default_value_t = 7)]
    pub reps: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Hardware and software counters for each side, summed over the reps
    /// (perf_event_open; software counters only where the VM has no PMU).
    #[arg(long)]
    pub pmc: bool,
}

/// A rule file of `n` rules: the FireHOL drop first among a mix that reads
/// every kind of field.
pub fn rule_file(n: usize) -> String {
    let mut t = String::from("set fh from \"firehol\"\nset resolvers { 192.0.2.53, 198.51.100.53, 2001:db8::53 }\n");
    t += "count proto udp\npass udp dport 53 daddr @resolvers\ndrop saddr @fh\n";
    let kinds = [
        // Values wrap inside their fields' ranges for any number of rules.
        |i: usize| format!("drop tcp dport {}", 10000 + i % 10000),
        |i: usize| format!("drop udp dport {{ {}, {} }}", 20000 + i % 10000, 30000 + i % 10000),
        |i: usize| format!("count tcp flags syn,!ack tcp dport {}", 40000 + i % 10000),
        |i: usize| format!("drop vlan {} proto icmp", 1000 + i % 3000),
        |i: usize| format!("drop icmp type {} len {}-{}", 100 + i % 100, 9000 + i, 9100 + i),
        |i: usize| format!("drop udp sport {}-{}", 50000 + (i * 10) % 10000, 50005 + (i * 10) % 10000),
        |i: usize| format!("count proto {}", 140 + i % 100),
        |i: usize| format!("drop tcp sport {} tcp dport 80", 60000 + i % 5000),
    ];
    let mut i = 0;
    while t.lines().filter(|l| !l.starts_with("set ")).count() < n {
        t += &kinds[i % kinds.len()](i);
        t.push('\n');
        i += 1;
    }
    t + "default pass\n"
}

pub fn run(a: RulesBenchArgs) -> Result<()> {
    let firehol = parse_list("firehol", FIREHOL_LEVEL1.as_bytes(), false)?.prefixes;
    let cfg = GenConfig {
        count: a.packets,
        seed: 7,
        ipv6_share: 0.1,
        mix: ProtoMix { tcp: 6, udp: 3, icmp: 1 },
        size: FrameSize::Imix,
        vlan_share: 0.1,
        listed_share: 0.1,
        list: firehol.clone(),
        ..GenConfig::default()
    };
    let mut gen = Generator::new(cfg).context("generator")?;
    // Frames back to back in memory, as a capture's chunks would hold them.
    let mut buf = Vec::new();
    let mut bytes = Vec::new();
    let mut frames: Vec<(usize, usize)> = Vec::with_capacity(a.packets as usize);
    while gen.next_frame(&mut buf).is_some() {
        frames.push((bytes.len(), buf.len()));
        bytes.extend_from_slice(&buf);
    }
    let address_only = RuleSet::new(&firehol, &[], &[]);
    let (file, sets) = match &a.rules_file {
        Some(path) => {
            let file = sluice_rules::load_rules(path)?;
            let sets: Vec<Vec<Prefix>> = file.load_sets(false)?.into_iter().map(|l| l.prefixes).collect();
            (file, sets)
        }
        None => {
            let file = parse_rules("bench.rules", &rule_file(a.rules), Path::new("."))?;
            let sets = file
                .sets
                .iter()
                .map(|s| match &s.source {
                    sluice_rules::SetSource::File(_) | sluice_rules::SetSource::Geo { .. } => firehol.clone(),
                    sluice_rules::SetSource::Inline(p) => p.clone(),
                    sluice_rules::SetSource::Dynamic { .. } => Vec::new(),
                })
                .collect();
            (file, sets)
        }
    };
    let with_rules = RuleSet::compile(&file, &sets, &CompileOptions::default())?;
    let time = |rules: &RuleSet| judge_all(rules, &frames, &bytes);
    let (mut best_a, mut best_b) = (f64::MAX, f64::MAX);
    let mut stats = (Stats::default(), Stats::default());
    let mut pmc = a.pmc.then(Pmc::open_reporting);
    let mut counts = (Reading::default(), Reading::default());
    for rep in 0..a.reps {
        let ((ta, sa), ra) = pmc::maybe(&mut pmc, || time(&address_only));
        let ((tb, sb), rb) = pmc::maybe(&mut pmc, || time(&with_rules));
        if let (Some(ra), Some(rb)) = (ra, rb) {
            counts.0.add(&ra);
            counts.1.add(&rb);
        }
        best_a = best_a.min(ta);
        best_b = best_b.min(tb);
        stats = (sa, sb);
        if !a.json {
            eprintln!(
                "rep {rep}: address-only {:.1} Mpps, {} rules {:.1} Mpps",
                mpps(a.packets, ta),
                a.rules,
                mpps(a.packets, tb)
            );
        }
    }
    let ratio = best_a / best_b;
    let mut v = serde_json::json!({
        "bench": "rules",
        "packets": a.packets,
        "reps": a.reps,
        "rules": with_rules.rules().len(),
        "address_only_mpps": mpps(a.packets, best_a),
        "rules_mpps": mpps(a.packets, best_b),
        "rules_over_address_only": ratio,
        "target": 0.8,
        "met": ratio >= 0.8,
        "address_only_dropped": stats.0.dropped,
        "rules_dropped": stats.1.dropped,
    });
    if a.pmc {
        v["pmc"] = pmc_pair(("address_only", &counts.0), ("rules", &counts.1));
    }
    if a.json {
        println!("{v}");
    } else {
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(())
}

/// Decodes and judges `frames` (offsets and lengths in `bytes`) as the
/// pipeline does: a batch decoded into its packets' slots (`decode_into`,
/// no summary moved), then judged while its summaries are still in cache.
/// The seconds it took, and the counters.
pub fn judge_all(rules: &RuleSet, frames: &[(usize, usize)], bytes: &[u8]) -> (f64, Stats) {
    let mut verdicts = vec![Verdict::Pass; 256];
    let mut decoded = vec![(Ok(PacketSummary::EMPTY), 0u32); 256];
    let mut stats = Stats::default();
    let start = Instant::now();
    for chunk in frames.chunks(256) {
        for (slot, &(at, len)) in decoded.iter_mut().zip(chunk) {
            decode_into(LinkType::ETHERNET, &bytes[at..at + len], &mut slot.0);
            slot.1 = len as u32;
        }
        let (v, d) = (&mut verdicts[..chunk.len()], &decoded[..chunk.len()]);
        judge_decoded(
            rules,
            Verdict::Pass,
            sluice_sets::DEFAULT_BATCH,
            &mut stats,
            d.len(),
            |i| (&d[i].0, d[i].1, 0),
            v,
        );
    }
    (start.elapsed().as_secs_f64(), stats)
}

/// `{"a": {"hw", "sw"}, "b": {...}}`: two sides' counters for the JSON.
fn pmc_pair(a: (&str, &Reading), b: (&str, &Reading)) -> serde_json::Value {
    let side = |r: &Reading| {
        let (hw, sw) = Reading::json_fields(Some(r));
        serde_json::json!({ "hw": hw, "sw": sw })
    };
    serde_json::json!({ a.0: side(a.1), b.0: side(b.1) })
}

fn mpps(n: u64, secs: f64) -> f64 {
    n as f64 / secs / 1e6
}

#[derive(Args, Debug)]
pub struct LoadBenchArgs {
    /// Entries of the generated list (random IPv4 and IPv6 hosts, 1% prefixes).
    #[arg(long, default_value_t = 6_000_000)]
    pub entries: usize,
    /// Repetitions, the contenders alternating (median, min and max are reported).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Directory for the list and the compiled file (default: the system's temp dir).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Hardware and software counters for each side, summed over the reps
    /// (perf_event_open; software counters only where the VM has no PMU).
    #[arg(long)]
    pub pmc: bool,
}

/// `sluice-bench load`: a list of N entries loaded from its text (parse and
/// build) against the file `sluice compile` made of it (verify and copy the
/// tables), best of `reps` each, alternating; and the verdicts of both on
/// every listed address and as many others compared.
pub fn run_load(a: LoadBenchArgs) -> Result<()> {
    use rand::{Rng, SeedableRng};
    let dir = match &a.dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let list = dir.path().join("big.txt");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let mut text = String::with_capacity(a.entries * 16);
    let mut probes = Vec::with_capacity(a.entries / 100);
    for i in 0..a.entries {
        let line = if i % 100 == 99 {
            format!("{}.{}.{}.0/24\n", rng.random::<u8>(), rng.random::<u8>(), rng.random::<u8>())
        } else if i % 10 == 9 {
            format!("2001:db8:{:x}:{:x}::{:x}\n", rng.random::<u16>(), rng.random::<u16>(), rng.random::<u16>())
        } else {
            std::net::Ipv4Addr::from(rng.random::<u32>()).to_string() + "\n"
        };
        if i % 100 == 0 {
            probes.push(line.trim().split('/').next().unwrap_or("").parse::<std::net::IpAddr>()?);
            probes.push(std::net::IpAddr::from(std::net::Ipv4Addr::from(rng.random::<u32>())));
        }
        text += &line;
    }
    std::fs::write(&list, &text)?;
    drop(text);
    let snap = dir.path().join("big.snap");
    let args = |rules: Option<&Path>| sluice_policy::RuleSpec {
        rules: rules.map(Path::to_path_buf),
        drop_src: if rules.is_none() { vec![list.clone()] } else { Vec::new() },
        ..sluice_policy::RuleSpec::default()
    };
    let text_rules = args(None).load(&[])?;
    std::fs::write(&snap, sluice_engine::compiled::save(&text_rules.rules))?;
    let snap_bytes = std::fs::metadata(&snap)?.len();
    let (mut best_text, mut best_snap) = (f64::MAX, f64::MAX);
    let mut loaded = None;
    let mut pmc = a.pmc.then(Pmc::open_reporting);
    let mut counts = (Reading::default(), Reading::default());
    for rep in 0..a.reps {
        let t = Instant::now();
        let (text, rt) = pmc::maybe(&mut pmc, || args(None).load(&[]));
        drop(text?);
        let tt = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let (l, rs) = pmc::maybe(&mut pmc, || args(Some(&snap)).load(&[]));
        let l = l?;
        let ts = t.elapsed().as_secs_f64();
        if let (Some(rt), Some(rs)) = (rt, rs) {
            counts.0.add(&rt);
            counts.1.add(&rs);
        }
        best_text = best_text.min(tt);
        best_snap = best_snap.min(ts);
        loaded = Some(l);
        if !a.json {
            eprintln!("rep {rep}: text {:.0} ms, compiled {:.1} ms", tt * 1e3, ts * 1e3);
        }
    }
    let compiled = loaded.context("at least one rep")?.rules;
    let same = probes.iter().all(|ip| {
        let ip = *ip;
        let f = |r: &RuleSet| {
            let summary = sluice_wire::PacketSummary {
                ip: Some(sluice_wire::IpSummary { src: ip, dst: ip, ..sluice_wire::IpSummary::UNSPECIFIED }),
                ..sluice_wire::PacketSummary::EMPTY
            };
            r.evaluate_reference(&summary, 60, 0, |_| {}).verdict
        };
        f(&compiled) == f(&text_rules.rules)
    });
    let mut v = serde_json::json!({
        "bench": "load",
        "entries": a.entries,
        "list_bytes": std::fs::metadata(&list)?.len(),
        "compiled_bytes": snap_bytes,
        "text_ms": best_text * 1e3,
        "compiled_ms": best_snap * 1e3,
        "compiled_over_text": best_snap / best_text,
        "targets": {
            "compiled_ms_max": 100.0, "met_ms": best_snap * 1e3 < 100.0,
            "ratio_max": 0.1, "met_ratio": best_snap / best_text < 0.1,
        },
        "probes": probes.len(),
        "same_verdicts": same,
    });
    if a.pmc {
        v["pmc"] = pmc_pair(("text", &counts.0), ("compiled", &counts.1));
    }
    if a.json {
        println!("{v}");
    } else {
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    if !same {
        anyhow::bail!("the compiled file and the text list disagree on a probe");
    }
    Ok(())
}
