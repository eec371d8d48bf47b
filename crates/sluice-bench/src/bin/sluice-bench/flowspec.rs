//! `sluice-bench flowspec`: what FlowSpec costs and how fast it lands.
//!
//! - `judge`: generated IMIX traffic judged with 1,000 flows in force
//!   against the same rules without them, the two alternating (best of
//!   each). The flows' destinations are /24s and /32s the traffic goes to,
//!   with protocol and port components, so packets meet candidate flows
//!   and their components are read; two bases: no rules at all (the flows'
//!   whole cost) and a 100,000-address blocklist (a bridge's usual work).
//! - `install`: a peer (a byte-level speaker on loopback, sending as fast
//!   as TCP takes it) announces 10,000 flows to a bridge over in-memory
//!   ports: from its first UPDATE to the table in force holding all.
//! - `announce`: with gobgpd here, `gobgp global rib add` of one flow at a
//!   time (100 of them) against a bridge peering with it, a matching frame
//!   sent every 50 µs: from starting the command to the flow's first drop,
//!   median and p99 (and the command's own time, most of it process start).
//! - `nft`: with root and nft, the same 10,000 rules as `nft -f` of one
//!   table in a fresh network namespace, timed, beside `install`.
//!
//! `--source-only N` measures instead what a botnet mitigation costs: the
//! flow table's own judging (decoded packets, no rules, no decoding timed)
//! with 100 and with N `source X/32 discard` flows, per packet and their
//! ratio, over IMIX traffic half of which comes from listed sources (each
//! such packet must be dropped, and nothing else): `hot_sources`, the same
//! packets for both tables, half from 100 sources both list;
//! `all_sources`, each table's own, half from any of its sources. And the
//! time to build a table of 10,000 mixed flows as a BGP feed sends them.

use anyhow::{Context, Result};
use clap::Args;
use sluice_bgp::flowspec::{Component, Family, Flow, FlowOrder, NumericOp, PrefixMatch};
use sluice_bridge::bgp::BgpFlags;
use sluice_bridge::{Bridge, BridgeConfig, MemoryPair};
use sluice_engine::flows::{FlowDecision, FlowRule, FlowTable, FlowVerdict, Placement};
use sluice_engine::{CompileOptions, RuleSet};
use sluice_gen::{FrameSize, GenConfig, Generator, ProtoMix};
use sluice_policy::RuleSpec;
use sluice_rules::{parse_rules, Prefix};
use sluice_testkit::bgp::{try_free_port, Gobgpd, GobgpdConfig};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct FlowspecBenchArgs {
    /// Packets judged per repetition.
    #[arg(long, default_value_t = 1_000_000)]
    pub packets: u64,
    /// Flows in force for the judging part.
    #[arg(long, default_value_t = 1_000)]
    pub flows: usize,
    /// Flows a peer announces for the install part.
    #[arg(long, default_value_t = 10_000)]
    pub install: usize,
    /// Flows added one at a time through gobgp for the latency part (0: skip).
    #[arg(long, default_value_t = 100)]
    pub announce: usize,
    /// Repetitions of the judging part, the sides alternating.
    #[arg(long, default_value_t = 7)]
    pub reps: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Only the source-only part: judging with 100 and with this many
    /// `source X/32 discard` flows, and a 10,000-flow table's build time.
    #[arg(long)]
    pub source_only: Option<usize>,
}

fn eq(v: u64) -> NumericOp {
    NumericOp { and: false, lt: false, gt: false, eq: true, len: 1, value: v }
}

fn dst(a: Ipv4Addr, len: u8) -> Component {
    Component::Destination(PrefixMatch::new(IpAddr::V4(a), len))
}

/// Flow `i` of a table of distinct flows: a /32 in 10.0.0.0/8, UDP, a port.
fn numbered(i: usize) -> Flow {
    let a = Ipv4Addr::from(0x0a00_0000 | (i as u32 + 1));
    Flow {
        family: Family::V4,
        components: vec![
            dst(a, 32),
            Component::Protocol(vec![eq(17)]),
            Component::DestinationPort(vec![eq(53 + (i % 7) as u64)]),
        ],
    }
}

fn rule(flow: Flow) -> FlowRule {
    FlowRule {
        flow,
        verdict: FlowVerdict::Drop,
        go_on: false,
        blackhole: false,
        source: "bench".into(),
        unsupported: Vec::new(),
        counts: Arc::default(),
    }
}

pub fn run(a: FlowspecBenchArgs) -> Result<()> {
    if let Some(n) = a.source_only {
        let v = serde_json::json!({
            "bench": "flowspec",
            "source_only": source_only_part(&a, n)?,
            "rebuild": rebuild_part(10_000, a.reps)?,
        });
        if a.json {
            println!("{v}");
        } else {
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        return Ok(());
    }
    let judge = judge_part(&a)?;
    let install = install_part(a.install)?;
    let announce = if a.announce > 0 { announce_part(a.announce)? } else { serde_json::Value::Null };
    let nft = nft_part(a.install);
    let v = serde_json::json!({
        "bench": "flowspec",
        "judge": judge,
        "install": install,
        "announce": announce,
        "nft": nft,
    });
    if a.json {
        println!("{v}");
    } else {
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(())
}

fn judge_part(a: &FlowspecBenchArgs) -> Result<serde_json::Value> {
    // A 100,000-address blocklist, half the sources from it.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut list = Vec::new();
    while list.len() < 100_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        list.push(Prefix::new(IpAddr::V4(Ipv4Addr::from(x as u32 | 0x0100_0000)), 32));
    }
    let cfg = GenConfig {
        count: a.packets,
        seed: 12,
        ipv6_share: 0.0,
        mix: ProtoMix { tcp: 6, udp: 3, icmp: 1 },
        size: FrameSize::Imix,
        listed_share: 0.5,
        list: list.clone(),
        ..GenConfig::default()
    };
    let mut gen = Generator::new(cfg).context("generator")?;
    let (mut buf, mut bytes, mut frames) = (Vec::new(), Vec::new(), Vec::with_capacity(a.packets as usize));
    let mut dsts = Vec::new();
    while gen.next_frame(&mut buf).is_some() {
        if let Ok(s) = sluice_wire::decode(sluice_wire::LinkType::ETHERNET, &buf) {
            if let Some(IpAddr::V4(d)) = s.ip.map(|ip| ip.dst) {
                if dsts.len() < a.flows && frames.len() % 97 == 0 {
                    dsts.push(d);
                }
            }
        }
        frames.push((bytes.len(), buf.len()));
        bytes.extend_from_slice(&buf);
    }
    // Half /24s, half /32s of addresses the traffic goes to; UDP to a port.
    let flows: Vec<FlowRule> = dsts
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            rule(Flow {
                family: Family::V4,
                components: vec![
                    dst(d, if i % 2 == 0 { 24 } else { 32 }),
                    Component::Protocol(vec![eq(17)]),
                    Component::DestinationPort(vec![eq(53)]),
                ],
            })
        })
        .collect();
    let n_flows = flows.len();
    let table = Arc::new(FlowTable::new(flows, Placement::First));
    let empty = RuleSet::empty();
    let file = parse_rules("bench.rules", "set bl from \"bl.txt\"\ndrop saddr @bl\ndefault pass\n", Path::new("."))?;
    let blocklist = RuleSet::compile(&file, &[list], &CompileOptions::default())?;
    let mut out = serde_json::Map::new();
    for (name, base) in [("no_rules", &empty), ("blocklist", &blocklist)] {
        let with = base.with_flows(Some(Arc::clone(&table)));
        let (mut best_without, mut best_with) = (f64::MAX, f64::MAX);
        let mut dropped = (0, 0);
        for _ in 0..a.reps {
            let (t0, s0) = crate::rules::judge_all(base, &frames, &bytes);
            let (t1, s1) = crate::rules::judge_all(&with, &frames, &bytes);
            best_without = best_without.min(t0);
            best_with = best_with.min(t1);
            dropped = (s0.dropped, s1.dropped_by_flow);
        }
        let mpps = |t: f64| a.packets as f64 / t / 1e6;
        out.insert(
            name.into(),
            serde_json::json!({
                "without_mpps": mpps(best_without),
                "with_mpps": mpps(best_with),
                "with_over_without": best_without / best_with,
                "dropped_by_rules": dropped.0,
                "dropped_by_flows": dropped.1,
            }),
        );
    }
    Ok(serde_json::json!({ "packets": a.packets, "flows": n_flows, "reps": a.reps, "bases": out }))
}

/// `n` distinct addresses spread over the IPv4 space (outside 0/8).
fn addresses(n: usize, seed: u64) -> Vec<Ipv4Addr> {
    let mut x = seed;
    let mut seen = std::collections::HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let a = Ipv4Addr::from(x as u32 | 0x0100_0000);
        if seen.insert(a) {
            out.push(a);
        }
    }
    out
}

/// IMIX traffic over decoded IPv4 headers, half of it from `sources`.
fn traffic(packets: u64, sources: &[Ipv4Addr]) -> Result<Vec<(sluice_wire::IpSummary, u32)>> {
    let cfg = GenConfig {
        count: packets,
        seed: 12,
        ipv6_share: 0.0,
        mix: ProtoMix { tcp: 6, udp: 3, icmp: 1 },
        size: FrameSize::Imix,
        listed_share: 0.5,
        list: sources.iter().map(|&s| Prefix::new(IpAddr::V4(s), 32)).collect(),
        ..GenConfig::default()
    };
    let mut gen = Generator::new(cfg).context("generator")?;
    let (mut buf, mut out) = (Vec::new(), Vec::with_capacity(packets as usize));
    while gen.next_frame(&mut buf).is_some() {
        if let Some(ip) = sluice_wire::decode(sluice_wire::LinkType::ETHERNET, &buf).ok().and_then(|s| s.ip) {
            out.push((ip, buf.len() as u32));
        }
    }
    Ok(out)
}

/// The best time of `reps` judging `packets` by `table` alone, per
/// packet in ns; checked: exactly the packets from `listed` are dropped.
fn judge_flows(
    table: &FlowTable,
    packets: &[(sluice_wire::IpSummary, u32)],
    listed: &std::collections::HashSet<IpAddr>,
    reps: usize,
) -> Result<serde_json::Value> {
    let from_listed = packets.iter().filter(|(ip, _)| listed.contains(&ip.src)).count();
    let (mut best, mut dropped) = (f64::MAX, 0);
    for _ in 0..reps {
        let start = Instant::now();
        let mut d = 0usize;
        for (ip, len) in packets {
            d += usize::from(table.judge(ip, *len, 0) != FlowDecision::Pass);
        }
        best = best.min(start.elapsed().as_secs_f64());
        dropped = d;
    }
    anyhow::ensure!(dropped == from_listed, "{dropped} dropped, {from_listed} from listed sources");
    Ok(serde_json::json!({
        "packets": packets.len(),
        "from_listed": from_listed,
        "dropped": dropped,
        "judge_ns_per_packet": best * 1e9 / packets.len() as f64,
    }))
}

fn source_only_part(a: &FlowspecBenchArgs, n: usize) -> Result<serde_json::Value> {
    let all = addresses(n.max(100), 0x2545_f491_4f6c_dd1d);
    // The same packets for both tables: half from 100 sources both list.
    let hot = traffic(a.packets, &all[..100])?;
    let (mut out, mut ns) = (serde_json::Map::new(), Vec::new());
    for flows in [100, n] {
        let listed = &all[..flows];
        let rules: Vec<FlowRule> = listed
            .iter()
            .map(|&s| {
                rule(Flow {
                    family: Family::V4,
                    components: vec![Component::Source(PrefixMatch::new(IpAddr::V4(s), 32))],
                })
            })
            .collect();
        let table = FlowTable::new(rules, Placement::First);
        anyhow::ensure!(table.unindexed() == 0, "{} source-only flows walked by every packet", table.unindexed());
        let set: std::collections::HashSet<IpAddr> = listed.iter().map(|&s| IpAddr::V4(s)).collect();
        let hot_sources = judge_flows(&table, &hot, &set, a.reps).with_context(|| format!("{flows} flows"))?;
        // Half the packets from any of the table's sources, each a cold
        // lookup once the table outgrows the cache.
        let own = traffic(a.packets, listed)?;
        let all_sources = judge_flows(&table, &own, &set, a.reps).with_context(|| format!("{flows} flows"))?;
        ns.push([hot_sources["judge_ns_per_packet"].as_f64(), all_sources["judge_ns_per_packet"].as_f64()]);
        out.insert(
            flows.to_string(),
            serde_json::json!({ "flows": flows, "hot_sources": hot_sources, "all_sources": all_sources }),
        );
    }
    let ratio = |k: usize| Some(ns[1][k]? / ns[0][k]?);
    Ok(serde_json::json!({
        "reps": a.reps,
        "tables": out,
        "ratio_hot_sources": ratio(0),
        "ratio_all_sources": ratio(1),
    }))
}

/// `n` flows as a feed sends them: destination /24s and /32s with a
/// protocol and ports (some a list of excluded ports), source-only /32s,
/// protocol and port alone, IPv6 with and without an offset.
fn mixed_flows(n: usize) -> Vec<FlowRule> {
    let ne = |v: u64, and: bool| NumericOp { and, lt: true, gt: true, eq: false, len: 2, value: v };
    let v6 = |i: usize| IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, (i >> 16) as u16, i as u16, 0, 0, 0, 1));
    let a = addresses(n, 0x9e37_79b9_7f4a_7c15);
    (0..n)
        .map(|i| {
            let (family, components) = match i % 10 {
                0..=2 => (Family::V4, numbered(i).components),
                3 => (
                    Family::V4,
                    vec![
                        dst(a[i], 24),
                        Component::Protocol(vec![eq(6)]),
                        // Every port but 20 of them.
                        Component::DestinationPort((0..20).map(|k| ne(1000 + 7 * k + i as u64 % 5, k > 0)).collect()),
                    ],
                ),
                4..=6 => (Family::V4, vec![Component::Source(PrefixMatch::new(IpAddr::V4(a[i]), 32))]),
                7 => (
                    Family::V4,
                    vec![Component::Protocol(vec![eq(17)]), Component::DestinationPort(vec![eq(i as u64 % 60_000)])],
                ),
                8 => (
                    Family::V6,
                    vec![Component::Destination(PrefixMatch::new(v6(i), 64)), Component::Protocol(vec![eq(17)])],
                ),
                _ => {
                    // The interface identifier alone: bits 64 to 128.
                    let mut p = PrefixMatch::new(v6(i), 128);
                    p.offset = 64;
                    p.addr = IpAddr::V6(std::net::Ipv6Addr::from(p.pattern().0));
                    (Family::V6, vec![Component::Destination(p)])
                }
            };
            rule(Flow { family, components })
        })
        .collect()
}

fn rebuild_part(n: usize, reps: usize) -> Result<serde_json::Value> {
    let rules = mixed_flows(n);
    // A RIB's routes: each flow's order made once, when it came, and
    // kept in that order.
    let mut routes: Vec<(FlowOrder, FlowRule)> = rules.iter().map(|r| (FlowOrder::of(&r.flow), r.clone())).collect();
    routes.sort_by(|a, b| a.0.cmp(&b.0));
    let (mut build, mut with_clone, mut feed) = (f64::MAX, f64::MAX, f64::MAX);
    let mut unindexed = 0;
    for _ in 0..reps {
        // From flows alone: each flow's order encoded, then the table.
        let start = Instant::now();
        let copy = rules.clone();
        let cloned = start.elapsed();
        let table = FlowTable::new(copy, Placement::First);
        let took = start.elapsed();
        anyhow::ensure!(table.rules().len() == n, "{} of {n} flows", table.rules().len());
        unindexed = table.unindexed();
        build = build.min((took - cloned).as_secs_f64());
        with_clone = with_clone.min(took.as_secs_f64());
        // As the feed rebuilds: its routes and their orders cloned, then
        // the table (nothing encoded again).
        let start = Instant::now();
        let table = FlowTable::with_orders(routes.clone(), Placement::First);
        feed = feed.min(start.elapsed().as_secs_f64());
        anyhow::ensure!(table.rules().len() == n, "{} of {n} flows", table.rules().len());
    }
    Ok(serde_json::json!({
        "flows": n,
        "reps": reps,
        "table_new_ms": build * 1e3,
        "clone_and_table_new_ms": with_clone * 1e3,
        "feed_rebuild_ms": feed * 1e3,
        "unindexed": unindexed,
    }))
}

/// A bridge over in-memory ports peering with `peer`.
fn bridge(peer: &str) -> Result<(Bridge, sluice_bridge::Wire)> {
    let flags = BgpFlags {
        peers: vec![peer.into()],
        peer_as: vec![65001],
        local_as: Some(65002),
        router_id: Some(Ipv4Addr::new(192, 0, 2, 2)),
        rules: "first".into(),
        hold_time: 90,
        restart_time: 120,
        ..BgpFlags::default()
    };
    let mut bgp = flags.config().map_err(anyhow::Error::msg)?.context("a peer")?;
    bgp.peers[0].connect_retry = Duration::from_millis(100);
    let cfg = BridgeConfig { bgp: Some(bgp), ..BridgeConfig::new(RuleSpec::default()) };
    let (pair, wire) = MemoryPair::new(["mem0", "mem1"]);
    Ok((Bridge::start(cfg, pair)?, wire))
}

fn flows_in_force(b: &Bridge) -> usize {
    b.rules().load().value.flows().map_or(0, |f| f.rules().len())
}

fn install_part(n: usize) -> Result<serde_json::Value> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let (b, _wire) = bridge(&l.local_addr()?.to_string())?;
    let (mut s, _) = l.accept()?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let fams = [sluice_bgp::message::AfiSafi::IPV4_FLOWSPEC];
    s.write_all(&sluice_bgp::message::open(65001, 90, Ipv4Addr::new(192, 0, 2, 3), &fams, 0))?;
    s.write_all(&sluice_bgp::message::keepalive())?;
    // Their OPEN and KEEPALIVE.
    let mut seen = 0;
    let mut buf = vec![0u8; 4096];
    while seen < 2 {
        let mut h = [0u8; 19];
        s.read_exact(&mut h)?;
        let len = usize::from(u16::from_be_bytes([h[16], h[17]]));
        s.read_exact(&mut buf[..len - 19])?;
        seen += 1;
    }
    let flows: Vec<Flow> = (0..n).map(numbered).collect();
    let ups = sluice_bgp::message::flowspec_discards(&flows);
    let start = Instant::now();
    for u in &ups {
        s.write_all(u)?;
    }
    let sent = start.elapsed();
    let end = start + Duration::from_secs(120);
    while flows_in_force(&b) < n {
        anyhow::ensure!(Instant::now() < end, "{} of {n} flows in force after 120 s", flows_in_force(&b));
        std::thread::sleep(Duration::from_micros(200));
    }
    let took = start.elapsed();
    let publications = b.metrics().control.flow_publications.load(Ordering::Relaxed);
    b.stop();
    b.wait()?;
    Ok(serde_json::json!({
        "flows": n,
        "updates": ups.len(),
        "sent_ms": sent.as_secs_f64() * 1e3,
        "installed_ms": took.as_secs_f64() * 1e3,
        "publications": publications,
    }))
}

fn announce_part(n: usize) -> Result<serde_json::Value> {
    if Command::new("gobgpd").arg("--version").output().is_err() {
        return Ok(serde_json::json!({ "skipped": "gobgpd is missing (apt-get install gobgpd)" }));
    }
    let port = try_free_port()?;
    let gobgpd = Gobgpd::spawn(&GobgpdConfig::on(port).families(&["ipv4-flowspec"]))?;
    let result = (|| -> Result<serde_json::Value> {
        let (b, wire) = bridge(&format!("127.0.0.1:{port}"))?;
        let cli = |args: &str| gobgpd.try_cli(args).map_err(anyhow::Error::msg);
        // Until the API answers and the session is up.
        gobgpd.wait_api(Duration::from_secs(20)).map_err(anyhow::Error::msg)?;
        let (mut to_drop, mut cli_own) = (Vec::new(), Vec::new());
        for i in 0..n {
            let d = Ipv4Addr::new(10, 200, (i / 250) as u8, (i % 250) as u8 + 1);
            // A matching frame every 50 µs until the flow drops one.
            let stop = Arc::new(AtomicBool::new(false));
            let sender = {
                let (stop, wire) = (Arc::clone(&stop), wire.clone());
                let frame = udp_frame(d, 53);
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        wire.send(0, &frame);
                        while wire.recv(1, Duration::ZERO).is_some() {}
                        std::thread::sleep(Duration::from_micros(50));
                    }
                })
            };
            let t0 = Instant::now();
            let own =
                cli(&format!("global rib -a ipv4-flowspec add match destination {d}/32 protocol udp destination-port ==53 then discard"))?;
            let end = t0 + Duration::from_secs(20);
            let target = format!("destination {d}/32 protocol ==17 destination-port ==53");
            loop {
                let dropped = b.rules().load().value.flows().is_some_and(|t| {
                    t.rules()
                        .iter()
                        .any(|r| r.flow.to_string() == target && r.counts.dropped.load(Ordering::Relaxed) > 0)
                });
                if dropped {
                    break;
                }
                anyhow::ensure!(Instant::now() < end, "flow {i} dropped nothing in 20 s");
                std::thread::sleep(Duration::from_micros(20));
            }
            to_drop.push(t0.elapsed().as_secs_f64() * 1e3);
            cli_own.push(own.as_secs_f64() * 1e3);
            stop.store(true, Ordering::Relaxed);
            let _ = sender.join();
        }
        b.stop();
        b.wait()?;
        let q = |v: &mut Vec<f64>, p: f64| {
            v.sort_by(f64::total_cmp);
            v[((v.len() - 1) as f64 * p).round() as usize]
        };
        Ok(serde_json::json!({
            "flows": n,
            "add_to_first_drop_ms": { "median": q(&mut to_drop, 0.5), "p99": q(&mut to_drop, 0.99) },
            "gobgp_command_ms": { "median": q(&mut cli_own, 0.5), "p99": q(&mut cli_own, 0.99) },
        }))
    })();
    drop(gobgpd);
    result
}

/// Ethernet + IPv4 + UDP to `d`:`port`.
fn udp_frame(d: Ipv4Addr, port: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x08, 0x00];
    f.extend_from_slice(&[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 0, 1]);
    f.extend_from_slice(&d.octets());
    f.extend_from_slice(&[0x9c, 0x40]);
    f.extend_from_slice(&port.to_be_bytes());
    f.extend_from_slice(&[0, 8, 0, 0]);
    f
}

/// The same flows as nftables rules, loaded with `nft -f` in a namespace
/// of their own.
fn nft_part(n: usize) -> serde_json::Value {
    let root = sluice_live_euid() == 0;
    if !root || Command::new("nft").arg("--version").output().is_err() {
        return serde_json::json!({ "skipped": "needs root and nft (apt-get install nftables)" });
    }
    let ns = format!("sluicebench{}", std::process::id());
    let run = || -> Result<serde_json::Value> {
        let dir = tempfile::tempdir()?;
        let mut text =
            String::from("table inet sluicebench {\n chain forward {\n  type filter hook forward priority 0;\n");
        for i in 0..n {
            let a = Ipv4Addr::from(0x0a00_0000 | (i as u32 + 1));
            text += &format!("  ip daddr {a} udp dport {} drop\n", 53 + i % 7);
        }
        text += " }\n}\n";
        let file = dir.path().join("flows.nft");
        std::fs::write(&file, text)?;
        anyhow::ensure!(Command::new("ip").args(["netns", "add", &ns]).status()?.success(), "ip netns add");
        let t = Instant::now();
        let out = Command::new("ip").args(["netns", "exec", &ns, "nft", "-f"]).arg(&file).output()?;
        let took = t.elapsed();
        anyhow::ensure!(out.status.success(), "nft -f: {}", String::from_utf8_lossy(&out.stderr));
        Ok(serde_json::json!({ "rules": n, "nft_f_ms": took.as_secs_f64() * 1e3 }))
    };
    let v = run().unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }));
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    v
}

fn sluice_live_euid() -> u32 {
    // SAFETY-free: the effective uid from /proc, as `id -u` would say.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(2)?.parse().ok()))
        .unwrap_or(u32::MAX)
}
