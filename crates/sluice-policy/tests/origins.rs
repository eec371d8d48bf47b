//! Drops counted by the origin of the element that caused them, end to
//! end: random feed answers (adds tagged with origins, deletes, full
//! pulls), expiry and merges, through `RuntimeSets` into the rule set the
//! judge reads; random packets judged in batches as the workers judge
//! them. Against a plain model (each live element with its origin and
//! deadline): a packet is dropped when a live element covers its source,
//! and counted under the origin of the longest such element; the elements
//! per origin are what `active_decisions` reports.

use proptest::prelude::*;
use sluice_engine::dynamic::Elements;
use sluice_engine::{judge_batch, CompileOptions, RawFrame, RuleSet, Stats, Verdict};
use sluice_policy::sets::{Feed, RuntimeSets};
use sluice_policy::usage::{origin_usage, Origins};
use sluice_rules::{parse_rules, Prefix};
use sluice_wire::LinkType;
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

const SECS: u64 = 1_000_000_000;
const ORIGINS: [&str; 4] = ["crowdsec", "cscli", "CAPI", "lists:firehol"];

fn compile() -> RuleSet {
    let text = "set crowdsec dynamic\ndrop saddr @crowdsec\n";
    let file = parse_rules("t.rules", text, Path::new(".")).unwrap();
    RuleSet::compile(&file, &[vec![]], &CompileOptions::default()).unwrap()
}

fn frame(src: IpAddr) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    match src {
        IpAddr::V4(s) => {
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&[192, 0, 2, 1]);
        }
        IpAddr::V6(s) => {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, 17, 64]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&"2001:db8:ffff::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
        }
    }
    f.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, 8, 0, 0]);
    f
}

/// Addresses from a small space so elements overlap: 10.0.x.y and 2001:db8::x:y.
fn prefix() -> impl Strategy<Value = Prefix> {
    (any::<bool>(), 0u8..4, any::<u8>(), prop_oneof![Just(32u8), Just(24), Just(16), Just(30)]).prop_map(
        |(six, x, y, len)| {
            if six {
                let a: IpAddr = format!("2001:db8::{x}:{y}").parse().unwrap();
                Prefix::new(a, 96 + len)
            } else {
                Prefix::new(IpAddr::from([10, 0, x, y]), len)
            }
        },
    )
}

fn addr() -> impl Strategy<Value = IpAddr> {
    (any::<bool>(), 0u8..5, any::<u8>()).prop_map(|(six, x, y)| {
        if six {
            format!("2001:db8::{x}:{y}").parse().unwrap()
        } else {
            IpAddr::from([10, 0, x, y])
        }
    })
}

#[derive(Debug, Clone)]
enum Op {
    /// An answer: adds (element, origin, timeout), deletes; full or not.
    Answer(Vec<(Prefix, usize, u32)>, Vec<Prefix>, bool),
    Tick(u64),
    Packets(Vec<IpAddr>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (
            prop::collection::vec((prefix(), 0usize..ORIGINS.len(), 1u32..20), 0..12),
            prop::collection::vec(prefix(), 0..4),
            prop::bool::weighted(0.15),
        )
            .prop_map(|(a, d, f)| Op::Answer(a, d, f)),
        1 => (1u64..8).prop_map(Op::Tick),
        3 => prop::collection::vec(addr(), 1..40).prop_map(Op::Packets),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn drops_are_counted_by_the_origin_of_the_element_that_matched(ops in prop::collection::vec(op(), 1..40)) {
        let mut rules = compile();
        let mut sets = RuntimeSets::new();
        // Merges fold the delta into tables now and then: tags must survive them.
        sets.merge_min = 4;
        sets.merge_ratio = 1;
        let base_of = |_: &RuleSet, _: usize| Some(Elements::new());
        let mut registry = Origins::default();
        let mut model: HashMap<Prefix, (usize, u64)> = HashMap::new();
        let mut now = SECS;
        let mut stats = Stats::default();
        // By origin name, IPv4 / IPv6: packets and bytes.
        let mut want: HashMap<(String, bool), (u64, u64)> = HashMap::new();
        for op in ops {
            match op {
                Op::Answer(adds, dels, full) => {
                    // As the bouncer makes it: tags index this answer's
                    // names, then the registry's.
                    let mut local = Origins::default();
                    let mut feed = Feed { set: "crowdsec".into(), full, ..Feed::default() };
                    for &(p, o, t) in &adds {
                        feed.adds.push((p, Some(t)));
                        feed.tags.push(local.tag(ORIGINS[o]));
                    }
                    feed.tag_names = local.names().to_vec();
                    feed.dels = if full { Vec::new() } else { dels.clone() };
                    registry.globalize(&mut feed);
                    sets.feed(&rules, &feed, now, &base_of).unwrap();
                    if let (Some(r), _) = sets.commit(&rules) {
                        rules = r;
                    }
                    if full {
                        model.clear();
                    } else {
                        for p in &dels {
                            model.remove(p);
                        }
                    }
                    for &(p, o, t) in &adds {
                        model.insert(p, (o, now + u64::from(t) * SECS));
                    }
                }
                Op::Tick(s) => {
                    now += s * SECS;
                    if let Some((r, _)) = sets.expire(&rules, now) {
                        rules = r;
                    }
                    model.retain(|_, (_, d)| *d > now);
                }
                Op::Packets(srcs) => {
                    if let (Some(r), _) = sets.poll_merges(&rules, true) {
                        rules = r;
                    }
                    let frames: Vec<Vec<u8>> = srcs.iter().map(|a| frame(*a)).collect();
                    let raw: Vec<RawFrame<'_>> = frames
                        .iter()
                        .map(|f| RawFrame { link: LinkType::ETHERNET, data: f, wire_len: f.len() as u32 })
                        .collect();
                    let mut verdicts = vec![Verdict::Pass; raw.len()];
                    judge_batch(&rules, Verdict::Pass, 8, &mut stats, &raw, &mut verdicts);
                    for ((a, f), v) in srcs.iter().zip(&frames).zip(&verdicts) {
                        let best = model.iter().filter(|(p, _)| p.contains(*a)).max_by_key(|(p, _)| p.len());
                        prop_assert_eq!(*v == Verdict::Drop, best.is_some(), "verdict of {}", a);
                        if let Some((_, (o, _))) = best {
                            let e = want.entry((ORIGINS[*o].to_owned(), a.is_ipv6())).or_default();
                            e.0 += 1;
                            e.1 += f.len() as u64;
                        }
                    }
                }
            }
        }
        let usage = origin_usage(&rules, "crowdsec", &stats);
        for u in &usage {
            let v6 = u.ip_type == "ipv6";
            let (p, b) = want.get(&(u.origin.clone(), v6)).copied().unwrap_or_default();
            prop_assert_eq!((u.dropped_packets, u.dropped_bytes), (p, b), "drops of {} {}", &u.origin, u.ip_type);
            let active = model.iter().filter(|(p, (o, _))| ORIGINS[*o] == u.origin && matches!(p, Prefix::V6 { .. }) == v6).count();
            prop_assert_eq!(u.active, active as u64, "active of {} {}", &u.origin, u.ip_type);
        }
        // Every origin with drops or elements is reported.
        for ((o, v6), (p, _)) in &want {
            let t = if *v6 { "ipv6" } else { "ipv4" };
            prop_assert!(*p == 0 || usage.iter().any(|u| &u.origin == o && u.ip_type == t), "{} {} missing", o, t);
        }
    }
}
