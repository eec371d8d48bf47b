//! Runtime set changes end to end through the rule set the judge reads:
//! random adds (with and without timeouts), deletes, flushes, expiry,
//! merges into new tables and reloads, IPv4 and IPv6, hosts and prefixes,
//! interleaved with lookups, against a plain model (a map of elements per
//! set, rebuilt from scratch: an address matches when a live element covers
//! it). Lookups go both ways the engine has: the batched evaluation the
//! workers run and the one-address `set_contains`. The dynamic set has a
//! small maxelem now and then (from its definition or the default for its
//! name): adds past it are refused as the model refuses them, and counted.

use proptest::prelude::*;
use sluice_control::ctl::Command;
use sluice_control::sets::RuntimeSets;
use sluice_engine::dynamic::Elements;
use sluice_engine::{CompileOptions, Decision, RuleSet, Verdict};
use sluice_rules::{parse_rules, Prefix, SetSource};
use sluice_wire::{decode, LinkType, PacketSummary};
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

const SECS: u64 = 1_000_000_000;
/// `f` is a list's set (its base from the file), `d` a dynamic one, with
/// `maxelem` when given.
fn rules_text(maxelem: Option<u32>) -> String {
    format!(
        "set f {{ 10.0.0.0/16, 10.0.4.0/24, 10.0.4.7, 2001:db8::/48, 2001:db8::9 }}\n\
         set d dynamic{}\n\
         drop saddr @d\n\
         drop daddr @f\n",
        maxelem.map_or(String::new(), |n| format!(" maxelem {n}"))
    )
}

fn compile(maxelem: Option<u32>) -> RuleSet {
    let file = parse_rules("t.rules", &rules_text(maxelem), Path::new(".")).unwrap();
    let sets: Vec<Vec<Prefix>> = file.load_sets(false).unwrap().into_iter().map(|l| l.prefixes).collect();
    RuleSet::compile(&file, &sets, &CompileOptions::default()).unwrap()
}

fn base_of(rules: &RuleSet, i: usize) -> Option<Elements> {
    let file = parse_rules("t.rules", &rules_text(None), Path::new(".")).unwrap();
    let def = &file.sets[file.set_index(&rules.named_set_info()[i].name)?];
    match &def.source {
        SetSource::Inline(p) => Some(Elements::from_prefixes(p)),
        _ => Some(Elements::new()),
    }
}

/// A UDP frame from `src` to `dst` (checksums zero: damage after the
/// addresses is only an anomaly).
fn frame(src: IpAddr, dst: IpAddr) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, 17, 64]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        _ => unreachable!("one family per packet"),
    }
    f.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, 8, 0, 0]);
    f
}

#[derive(Debug, Clone)]
enum Op {
    Add(bool, Prefix, Option<u32>),
    Del(bool, Prefix),
    Flush(bool),
    Tick(u64),
    Reload,
    /// Several lines as one batch: all or nothing.
    Batch(Vec<Op>),
    /// Wait for the merges running on their threads.
    Settle,
    /// A CrowdSec feed into `d`: (full, adds with timeouts, deletes).
    Feed(bool, Vec<(Prefix, Option<u32>)>, Vec<Prefix>),
}

/// Elements near the list's, so that changes and lookups meet.
fn arb_prefix() -> impl Strategy<Value = Prefix> {
    prop_oneof![
        (0u32..8, 0u32..12, prop::sample::select(vec![16u8, 24, 28, 32]))
            .prop_map(|(c, d, len)| Prefix::new(IpAddr::from([10, 0, c as u8, d as u8]), len)),
        (0u128..3, 0u128..12, prop::sample::select(vec![48u8, 64, 120, 128])).prop_map(|(g, h, len)| {
            Prefix::new(IpAddr::from(((0x2001_0db8u128 << 96) | (g << 80) | h).to_be_bytes()), len)
        }),
    ]
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (any::<bool>(), arb_prefix(), prop::option::of(1u32..4)).prop_map(|(d, p, t)| Op::Add(d, p, t)),
        5 => (any::<bool>(), arb_prefix()).prop_map(|(d, p)| Op::Del(d, p)),
        1 => any::<bool>().prop_map(Op::Flush),
        2 => (0u64..3).prop_map(Op::Tick),
        1 => Just(Op::Reload),
        2 => Just(Op::Settle),
        2 => (
            any::<bool>(),
            prop::collection::vec((arb_prefix(), prop::option::of(1u32..4)), 0..5),
            prop::collection::vec(arb_prefix(), 0..3)
        )
            .prop_map(|(full, adds, dels)| Op::Feed(full, adds, dels)),
        2 => prop::collection::vec(
            prop_oneof![
                3 => (any::<bool>(), arb_prefix(), prop::option::of(1u32..4)).prop_map(|(d, p, t)| Op::Add(d, p, t)),
                3 => (any::<bool>(), arb_prefix()).prop_map(|(d, p)| Op::Del(d, p)),
                1 => any::<bool>().prop_map(Op::Flush),
            ],
            2..6
        )
        .prop_map(Op::Batch),
    ]
}

fn line(op: &Op) -> Command {
    let name = |dynamic: bool| if dynamic { "d" } else { "f" }.to_string();
    match op {
        Op::Add(d, p, t) => Command::Add { set: name(*d), elem: *p, timeout: *t },
        Op::Del(d, p) => Command::Del { set: name(*d), elem: *p },
        Op::Flush(d) => Command::Flush { set: name(*d) },
        _ => unreachable!("only changes are batched"),
    }
}

/// The model after `lines`, or the first line (1-based) that fails: a
/// delete of what is not there, or an add past `d`'s maxelem `dmax` (then
/// also how many add lines to `d` the batch had: every one is refused).
fn model_batch(
    lines: &[Op],
    fm: &Model,
    dm: &Model,
    now: u64,
    dmax: usize,
) -> Result<(Model, Model), (usize, Option<usize>)> {
    let (mut f, mut d) = (fm.clone(), dm.clone());
    for (i, op) in lines.iter().enumerate() {
        let (m, max) = match op {
            Op::Add(true, ..) | Op::Del(true, _) | Op::Flush(true) => (&mut d, dmax),
            _ => (&mut f, usize::MAX),
        };
        match op {
            Op::Add(_, p, t) => {
                if !m.contains_key(p) && m.len() >= max {
                    let adds = lines.iter().filter(|l| matches!(l, Op::Add(true, ..))).count();
                    return Err((i + 1, Some(adds)));
                }
                m.insert(*p, t.map(|t| now + u64::from(t) * SECS));
            }
            Op::Del(_, p) => {
                if m.remove(p).is_none() {
                    return Err((i + 1, None));
                }
            }
            Op::Flush(_) => m.clear(),
            _ => unreachable!(),
        }
    }
    Ok((f, d))
}

type Model = HashMap<Prefix, Option<u64>>;

fn covered(m: &Model, ip: IpAddr) -> bool {
    m.keys().any(|p| p.contains(ip))
}

fn list_model() -> Model {
    ["10.0.0.0/16", "10.0.4.0/24", "10.0.4.7", "2001:db8::/48", "2001:db8::9"]
        .iter()
        .map(|s| (s.parse().unwrap(), None))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn runtime_sets_equal_the_model(
        ops in prop::collection::vec(arb_op(), 1..50),
        probes in prop::collection::vec(arb_prefix(), 6),
        merge_min in 0usize..6,
        background in any::<bool>(),
        defined in prop_oneof![2 => Just(None), 1 => (1u32..8).prop_map(Some)],
        by_name in prop_oneof![2 => Just(None), 1 => (1usize..8).prop_map(Some)],
    ) {
        let mut rules = compile(defined);
        let mut sets = RuntimeSets::new();
        if let Some(n) = by_name {
            sets.set_maxelem_default("d", n);
        }
        let dmax = defined.map(|n| n as usize).or(by_name).unwrap_or(sluice_control::sets::DEFAULT_MAXELEM);
        let mut refused = 0u64;
        sets.merge_min = merge_min;
        sets.merge_ratio = 1;
        sets.background = background;
        let (fi, di) = (rules.named_index("f").unwrap(), rules.named_index("d").unwrap());
        let mut fm = list_model();
        let mut dm = Model::new();
        let mut now = 1_000 * SECS;
        for op in ops {
            let name = |dynamic: bool| if dynamic { "d" } else { "f" }.to_string();
            let mut batch = Vec::new();
            match &op {
                Op::Add(d, p, t) => batch.push((1, Command::Add { set: name(*d), elem: *p, timeout: *t })),
                Op::Del(d, p) => batch.push((1, Command::Del { set: name(*d), elem: *p })),
                Op::Flush(d) => batch.push((1, Command::Flush { set: name(*d) })),
                Op::Tick(s) => {
                    now += s * SECS;
                    if let Some((r, _)) = sets.expire(&rules, now) {
                        rules = r;
                    }
                    for m in [&mut fm, &mut dm] {
                        m.retain(|_, d| d.is_none_or(|d| d > now));
                    }
                }
                Op::Reload => {
                    let (r, _) = sets.carry_over(compile(defined));
                    rules = r;
                    fm = list_model();
                }
                Op::Feed(full, adds, dels) => {
                    let feed = sluice_control::sets::Feed { set: "d".into(), adds: adds.clone(), dels: dels.clone(), full: *full, ..Default::default() };
                    let out = sets.feed(&rules, &feed, now, &base_of).unwrap();
                    if let (Some(r), _) = sets.commit(&rules) {
                        rules = r;
                    }
                    if *full {
                        dm.retain(|p, _| adds.iter().any(|a| a.0 == *p));
                    }
                    for p in dels {
                        dm.remove(p);
                    }
                    // As far as it fits, in the answer's order.
                    let mut n = 0;
                    for (p, t) in adds {
                        if dm.contains_key(p) || dm.len() < dmax {
                            dm.insert(*p, t.map(|t| now + u64::from(t) * SECS));
                        } else {
                            n += 1;
                        }
                    }
                    prop_assert_eq!(out.refused, n);
                    refused += n as u64;
                }
                Op::Settle => {
                    if let (Some(r), _) = sets.poll_merges(&rules, true) {
                        rules = r;
                    }
                }
                Op::Batch(lines) => {
                    let batch: Vec<(usize, Command)> = lines.iter().enumerate().map(|(i, l)| (i + 1, line(l))).collect();
                    let got = sets.stage(&rules, &batch, now, &base_of);
                    match model_batch(lines, &fm, &dm, now, dmax) {
                        Ok((f, d)) => {
                            prop_assert!(got.is_ok(), "{:?}", got);
                            (fm, dm) = (f, d);
                        }
                        Err((bad, full)) => {
                            if let (Some(n), Err(e)) = (full, &got) {
                                prop_assert!(e.message.contains("the set is full"), "{}", e);
                                refused += n as u64;
                            }
                            prop_assert_eq!(got.map_err(|e| e.line), Err(bad));
                        }
                    }
                    if let (Some(r), _) = sets.commit(&rules) {
                        rules = r;
                    }
                }
            }
            if !batch.is_empty() {
                let r = sets.stage(&rules, &batch, now, &base_of);
                let m = if matches!(&op, Op::Add(true, ..) | Op::Del(true, _) | Op::Flush(true)) { &mut dm } else { &mut fm };
                let max = if matches!(&op, Op::Add(true, ..)) { dmax } else { usize::MAX };
                match &op {
                    Op::Add(_, p, t) if !m.contains_key(p) && m.len() >= max => {
                        let e = r.unwrap_err();
                        prop_assert!(e.message.contains(&format!("the set is full: it holds {max} elements")), "{}", e);
                        refused += 1;
                    }
                    Op::Add(_, p, t) => {
                        prop_assert!(r.is_ok());
                        m.insert(*p, t.map(|t| now + u64::from(t) * SECS));
                    }
                    Op::Del(_, p) => prop_assert_eq!(r.is_ok(), m.remove(p).is_some(), "del {}", p),
                    _ => {
                        prop_assert!(r.is_ok());
                        m.clear();
                    }
                }
                if let (Some(r), _) = sets.commit(&rules) {
                    rules = r;
                }
            }
            // Merges that happen to be done are published, as the controller does.
            if let (Some(r), _) = sets.poll_merges(&rules, false) {
                rules = r;
            }
            // Every probe as a source (set d) and as a destination (set f).
            let addrs: Vec<IpAddr> = probes.iter().map(|p| p.addr()).chain(fm.keys().chain(dm.keys()).map(|p| p.addr())).collect();
            let frames: Vec<Vec<u8>> = addrs.iter().flat_map(|&a| {
                let other = if a.is_ipv4() { IpAddr::from([192, 0, 2, 1]) } else { "2001:db8:ffff::1".parse().unwrap() };
                [frame(a, other), frame(other, a)]
            }).collect();
            let sums: Vec<PacketSummary> = frames.iter().map(|f| decode(LinkType::ETHERNET, f).unwrap()).collect();
            for chunk in sums.chunks(64) {
                let pkts: Vec<(&PacketSummary, u32, u32)> = chunk.iter().map(|s| (s, 60, 0)).collect();
                let mut out = vec![Decision { verdict: Verdict::Pass, rule: None }; pkts.len()];
                rules.evaluate_batch(&pkts, &mut out, 16, |_, _| {});
                for (s, d) in chunk.iter().zip(&out) {
                    let ip = s.ip.as_ref().unwrap();
                    let want = covered(&dm, ip.src) || covered(&fm, ip.dst);
                    prop_assert_eq!(d.verdict == Verdict::Drop, want, "{} -> {} after {:?}", ip.src, ip.dst, op);
                }
            }
            prop_assert_eq!(sets.refused.get("d", "full"), refused);
            let row = sets.rows(&rules).into_iter().find(|r| r.name == "d").unwrap();
            prop_assert_eq!((row.entries, row.maxelem), (dm.len(), dmax));
            for &a in &addrs {
                prop_assert_eq!(rules.set_contains(di, a), covered(&dm, a), "d {}", a);
                prop_assert_eq!(rules.set_contains(fi, a), covered(&fm, a), "f {}", a);
            }
        }
    }
}
