//! `sluice-bench sets --geo FILE`: countries as sets from a real MaxMind DB
//! file, one JSON object.
//!
//! - build: the set of the 10 countries with the most networks, and of
//!   every country: the walk of the database (`sluice-geo`), building the
//!   set's tables, their bytes; beside `ipset restore` (a `hash:net` set
//!   per family, its "Size in memory") and `nft -f` (an `interval` set
//!   per family, elements 1,000 to a line, as geoipsets writes them) of
//!   the same prefixes, in a network namespace of their own.
//! - lookup: packets from random addresses (3/4 IPv4 over the unicast
//!   space, 1/4 IPv6 in 2000::/3) judged against the every-country set and
//!   against an exact set of as many hosts (a quarter of the packets'
//!   sources among them), repetitions alternating: Mpps and the ratio
//!   (target >= 1.0, as for prefix lists).

use anyhow::{Context, Result};
use serde_json::{json, Value};
use sluice_engine::{CompileOptions, RuleSet};
use sluice_geo::{GeoDb, Key, Select};
use sluice_rules::{parse_rules, Prefix};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

fn compile(prefixes: &[Prefix]) -> RuleSet {
    let file = parse_rules("geo.rules", "set c from \"c.txt\"\ndrop saddr @c\n", Path::new("."))
        .expect("the bench's rules parse");
    RuleSet::compile(&file, &[prefixes.to_vec()], &CompileOptions::default()).expect("they compile")
}

/// Runs `args` in namespace `ns` with `stdin` from a file; its stdout.
fn in_ns(ns: &str, args: &[&str], stdin: Option<&Path>) -> Result<String> {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(args).stderr(Stdio::piped()).stdout(Stdio::piped());
    if let Some(f) = stdin {
        c.stdin(std::fs::File::open(f)?);
    }
    let out = c.output().with_context(|| format!("running {args:?}"))?;
    anyhow::ensure!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ipset restore` of the prefixes (a set per family): seconds, and the
/// sets' "Size in memory".
fn ipset(dir: &Path, ns: &str, prefixes: &[Prefix]) -> Result<Value> {
    let file = dir.join("geo.ipset");
    let mut t = String::new();
    for (name, family, v4) in [("g4", "inet", true), ("g6", "inet6", false)] {
        let n = prefixes.iter().filter(|p| p.addr().is_ipv4() == v4).count();
        t += &format!(
            "create {name} hash:net family {family} hashsize {} maxelem {}\n",
            n.next_power_of_two(),
            n.max(1) * 2
        );
        for p in prefixes.iter().filter(|p| p.addr().is_ipv4() == v4) {
            t += &format!("add {name} {p}\n");
        }
    }
    std::fs::write(&file, t)?;
    let started = Instant::now();
    in_ns(ns, &["ipset", "restore"], Some(&file))?;
    let seconds = started.elapsed().as_secs_f64();
    let mut bytes = 0u64;
    for name in ["g4", "g6"] {
        let shown = in_ns(ns, &["ipset", "list", "-t", name], None)?;
        bytes += shown
            .lines()
            .find_map(|l| l.strip_prefix("Size in memory: "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        in_ns(ns, &["ipset", "destroy", name], None)?;
    }
    Ok(json!({ "seconds": seconds, "bytes": bytes }))
}

/// `nft -f` of the prefixes into interval sets: seconds.
fn nft(dir: &Path, ns: &str, prefixes: &[Prefix]) -> Result<Value> {
    let file = dir.join("geo.nft");
    let mut t = String::from("add table inet geo\n");
    for (name, ty, v4) in [("g4", "ipv4_addr", true), ("g6", "ipv6_addr", false)] {
        t += &format!("add set inet geo {name} {{ type {ty}; flags interval; auto-merge; }}\n");
        let family: Vec<String> = prefixes.iter().filter(|p| p.addr().is_ipv4() == v4).map(|p| p.to_string()).collect();
        for chunk in family.chunks(1000) {
            t += &format!("add element inet geo {name} {{ {} }}\n", chunk.join(", "));
        }
    }
    std::fs::write(&file, t)?;
    let started = Instant::now();
    in_ns(ns, &["nft", "-f", file.to_str().unwrap_or("")], None)?;
    let seconds = started.elapsed().as_secs_f64();
    in_ns(ns, &["nft", "delete", "table", "inet", "geo"], None)?;
    Ok(json!({ "seconds": seconds }))
}

/// Random sources: 3/4 IPv4 unicast, 1/4 IPv6 in 2000::/3.
fn addresses(n: usize) -> Vec<IpAddr> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|i| {
            if i % 4 == 3 {
                IpAddr::V6(Ipv6Addr::from((u128::from(next()) << 64 | u128::from(next())) >> 3 | 0x2000 << 112))
            } else {
                IpAddr::V4(Ipv4Addr::from((next() as u32 % (223 << 24)) + (1 << 24)))
            }
        })
        .collect()
}

/// A UDP frame from `src`.
fn frame(src: IpAddr) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    match src {
        IpAddr::V4(a) => {
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0]);
            f.extend_from_slice(&a.octets());
            f.extend_from_slice(&[192, 0, 2, 1]);
        }
        IpAddr::V6(a) => {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, 17, 64]);
            f.extend_from_slice(&a.octets());
            f.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        }
    }
    f.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, 8, 0, 0]);
    f
}

/// Mpps of each rule set over the same packets, repetitions alternating.
fn judge_rates(variants: &[&RuleSet], sources: &[IpAddr], reps: usize) -> Vec<(Vec<f64>, f64)> {
    let frames: Vec<Vec<u8>> = sources.iter().map(|&a| frame(a)).collect();
    let decoded: Vec<_> = frames.iter().map(|f| sluice_wire::decode(sluice_wire::LinkType::ETHERNET, f)).collect();
    let n = decoded.len();
    let mut verdicts = vec![sluice_engine::Verdict::Pass; n];
    let mut mpps = vec![Vec::new(); variants.len()];
    let mut share = vec![0.0; variants.len()];
    for rep in 0..reps {
        for j in 0..variants.len() {
            let v = (j + rep) % variants.len();
            let mut stats = sluice_engine::Stats::default();
            let t = Instant::now();
            for _ in 0..4 {
                sluice_engine::judge_decoded(
                    variants[v],
                    sluice_engine::Verdict::Pass,
                    sluice_sets::DEFAULT_BATCH,
                    &mut stats,
                    n,
                    |i| (&decoded[i], 60, 0),
                    &mut verdicts,
                );
            }
            mpps[v].push(4.0 * n as f64 / t.elapsed().as_secs_f64() / 1e6);
            share[v] = stats.dropped as f64 / (4 * n) as f64;
        }
    }
    mpps.into_iter().zip(share).collect()
}

pub fn run(db_path: &Path, peers: bool) -> Result<()> {
    let db = GeoDb::open(db_path)?;
    let field = Key::Country
        .known_fields()
        .iter()
        .copied()
        .find(|f| db.values(Key::Country, f).is_ok_and(|v| !v.is_empty()))
        .context("the database has no countries at country.iso_code or country_code")?;
    let countries = db.values(Key::Country, field)?;
    eprintln!("sets --geo: {} countries in {}", countries.len(), db_path.display());
    let dir = tempfile::tempdir()?;
    let ns = crate::sets::Netns(format!("sluice-bench-geo-{}", std::process::id()));
    let ns_made = peers && Command::new("ip").args(["netns", "add", &ns.0]).status().is_ok_and(|s| s.success());
    let mut builds = Vec::new();
    let mut every: Option<(RuleSet, usize)> = None;
    for (label, take) in [("top10", 10), ("all", countries.len())] {
        let values: Vec<String> = countries.iter().take(take).map(|(c, _)| c.clone()).collect();
        let sel = Select { key: Key::Country, values, field: Some(field.to_owned()) };
        let t = Instant::now();
        let nets = db.networks(&sel)?;
        let select_s = t.elapsed().as_secs_f64();
        let prefixes: Vec<Prefix> = nets.prefixes.iter().map(|&(a, l)| Prefix::new(a, l)).collect();
        let t = Instant::now();
        let rules = compile(&prefixes);
        let build_s = t.elapsed().as_secs_f64();
        let bytes = rules.named_set_info()[0].bytes;
        eprintln!("sets --geo: {label}: {} networks", prefixes.len());
        let peer = |name: &str, f: &dyn Fn() -> Result<Value>| -> Value {
            if !ns_made {
                return json!({ "skipped": "no network namespace (or --no-peers)" });
            }
            if Command::new(name).arg("--version").output().is_err() {
                return json!({ "skipped": format!("{name} is not installed") });
            }
            f().unwrap_or_else(|e| json!({ "skipped": e.to_string() }))
        };
        let ipset_row = peer("ipset", &|| ipset(dir.path(), &ns.0, &prefixes));
        let nft_row = peer("nft", &|| nft(dir.path(), &ns.0, &prefixes));
        let sluice_s = select_s + build_s;
        builds.push(json!({
            "set": label,
            "countries": sel.values.len(),
            "networks": prefixes.len(),
            "sluice": { "select_s": select_s, "build_s": build_s, "seconds": sluice_s, "bytes": bytes },
            "ipset": ipset_row,
            "nft": nft_row,
            "ipset_vs_sluice_seconds": ipset_row["seconds"].as_f64().map(|s| s / sluice_s),
            "nft_vs_sluice_seconds": nft_row["seconds"].as_f64().map(|s| s / sluice_s),
        }));
        if label == "all" {
            every = Some((rules, prefixes.len()));
        }
    }
    let (every, n) = every.expect("the all-country set was built");
    // The exact path: as many hosts as the country set has networks, a
    // quarter of the packets' sources among them.
    let sources = addresses(1 << 18);
    let mut hosts: Vec<Prefix> = sources.iter().step_by(4).map(|&a| Prefix::host(a)).collect();
    let mut x = 0x51u32;
    while hosts.len() < n {
        x = x.wrapping_mul(2_654_435_761).wrapping_add(1);
        hosts.push(Prefix::host(IpAddr::V4(Ipv4Addr::from(x | 0xe000_0000))));
    }
    hosts.truncate(n.max(sources.len() / 4));
    let exact = compile(&hosts);
    eprintln!("sets --geo: lookups");
    let rates = judge_rates(&[&every, &exact], &sources, 7);
    let med = |v: &[f64]| sluice_bench::median(v);
    let (geo_mpps, exact_mpps) = (med(&rates[0].0), med(&rates[1].0));
    println!(
        "{}",
        json!({
            "bench": "sets_geo",
            "database": db_path.display().to_string(),
            "database_type": db.info().database_type,
            "build_epoch": db.info().build_epoch,
            "field": field,
            "builds": builds,
            "lookup": {
                "packets": sources.len(),
                "country_set": { "networks": n, "mpps": geo_mpps, "drop_share": rates[0].1 },
                "exact_set": { "hosts": hosts.len(), "mpps": exact_mpps, "drop_share": rates[1].1 },
                "ratio": geo_mpps / exact_mpps,
                "target": { "min_ratio": 1.0, "met": geo_mpps / exact_mpps >= 1.0 },
            },
        })
    );
    Ok(())
}
