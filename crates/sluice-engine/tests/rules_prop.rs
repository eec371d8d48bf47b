//! The bit-vector rule evaluation equals the plain one-rule-at-a-time
//! reference, on random rule files and random packets (decoded from bytes
//! built here, so the summaries are real decoder output).

use proptest::prelude::*;
use sluice_engine::{judge_decoded, CompileOptions, Decision, RuleSet, Stats, Verdict};
use sluice_rules::{parse_rules, Prefix};
use sluice_wire::{decode, LinkType, PacketSummary};
use std::path::Path;

/// A small address pool so sets hit often.
fn v4(h: u8) -> [u8; 4] {
    [10, 0, h >> 4, h & 15]
}

/// Mostly 2001:db8::/32; an eighth of the values IPv4-mapped
/// (`::ffff:10.0.x.y`), which `v4mapped` looks up as IPv4.
fn v6(h: u8) -> [u8; 16] {
    let mut a = [0u8; 16];
    if h & 0x38 == 0x38 {
        a[10..12].copy_from_slice(&[0xff, 0xff]);
        a[12..].copy_from_slice(&v4(h));
        return a;
    }
    a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    a[14] = h >> 4;
    a[15] = h & 15;
    a
}

#[derive(Clone, Debug)]
struct Pkt {
    vlan: Option<u16>,
    six: bool,
    src: u8,
    dst: u8,
    /// 0 TCP, 1 UDP, 2 ICMP, 3 other
    l4: u8,
    sport: u16,
    dport: u16,
    flags: u8,
    icmp_type: u8,
    /// 0 whole, 1 first fragment, 2 later fragment
    frag: u8,
    pad: usize,
    /// Wrap in IPIP / 6in6 with these outer hosts.
    tunnel: Option<(u8, u8)>,
    non_ip: bool,
}

fn l4_bytes(p: &Pkt) -> (u8, Vec<u8>) {
    match p.l4 {
        0 => {
            let mut t = vec![0u8; 20];
            t[..2].copy_from_slice(&p.sport.to_be_bytes());
            t[2..4].copy_from_slice(&p.dport.to_be_bytes());
            t[12] = 5 << 4;
            t[13] = p.flags;
            (6, t)
        }
        1 => {
            let mut u = vec![0u8; 8];
            u[..2].copy_from_slice(&p.sport.to_be_bytes());
            u[2..4].copy_from_slice(&p.dport.to_be_bytes());
            u[4..6].copy_from_slice(&8u16.to_be_bytes());
            (17, u)
        }
        2 => (if p.six { 58 } else { 1 }, vec![p.icmp_type, 0, 0, 0, 0, 0, 0, 0]),
        _ => (99, vec![0u8; 8]),
    }
}

fn ip_bytes(six: bool, src: u8, dst: u8, proto: u8, frag: u8, payload: &[u8]) -> Vec<u8> {
    if six {
        let mut h = vec![0u8; 40];
        h[0] = 0x60;
        let (next, body) = if frag == 0 {
            (proto, payload.to_vec())
        } else {
            let mut f = vec![proto, 0, 0, 0, 0, 0, 0, 7];
            let off: u16 = if frag == 1 { 1 } else { 8 << 3 | 1 };
            f[2..4].copy_from_slice(&off.to_be_bytes());
            f.extend_from_slice(if frag == 1 { payload } else { &[0u8; 8] });
            (44, f)
        };
        h[4..6].copy_from_slice(&(body.len() as u16).to_be_bytes());
        h[6] = next;
        h[7] = 64;
        h[8..24].copy_from_slice(&v6(src));
        h[24..40].copy_from_slice(&v6(dst));
        h.extend_from_slice(&body);
        h
    } else {
        let mut h = vec![0u8; 20];
        h[0] = 0x45;
        let body: Vec<u8> = if frag == 2 { vec![0u8; 8] } else { payload.to_vec() };
        h[2..4].copy_from_slice(&((20 + body.len()) as u16).to_be_bytes());
        let ff: u16 = match frag {
            0 => 0,
            1 => 0x2000,
            _ => 0x2000 | 8,
        };
        h[6..8].copy_from_slice(&ff.to_be_bytes());
        h[8] = 64;
        h[9] = proto;
        h[12..16].copy_from_slice(&v4(src));
        h[16..20].copy_from_slice(&v4(dst));
        h.extend_from_slice(&body);
        h
    }
}

fn frame(p: &Pkt) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
    if let Some(v) = p.vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&v.to_be_bytes());
    }
    if p.non_ip {
        f.extend_from_slice(&[0x08, 0x06]);
        f.extend_from_slice(&[0u8; 28]);
        return f;
    }
    let (proto, l4) = l4_bytes(p);
    let mut ip = ip_bytes(p.six, p.src, p.dst, proto, p.frag, &l4);
    if let Some((os, od)) = p.tunnel {
        ip = ip_bytes(p.six, os, od, if p.six { 41 } else { 4 }, 0, &ip);
    }
    f.extend_from_slice(if p.six { &[0x86, 0xdd] } else { &[0x08, 0x00] });
    f.extend_from_slice(&ip);
    f.extend(std::iter::repeat_n(0u8, p.pad));
    f
}

fn pkt() -> impl Strategy<Value = Pkt> {
    (
        (prop::option::weighted(0.3, 0u16..4), any::<bool>(), 0u8..64, 0u8..64, 0u8..4),
        (
            prop_oneof![Just(53u16), Just(80), Just(23), 0u16..2000],
            prop_oneof![Just(53u16), Just(80), Just(23), 0u16..2000],
        ),
        (
            any::<u8>(),
            prop_oneof![Just(8u8), Just(0), Just(128), any::<u8>()],
            prop_oneof![4 => Just(0u8), 1 => Just(1), 1 => Just(2)],
        ),
        (0usize..200, prop::option::weighted(0.2, (0u8..64, 0u8..64)), prop::bool::weighted(0.05)),
    )
        .prop_map(
            |((vlan, six, src, dst, l4), (sport, dport), (flags, icmp_type, frag), (pad, tunnel, non_ip))| Pkt {
                vlan: vlan.map(|v| v * 50),
                six,
                src,
                dst,
                l4,
                sport,
                dport,
                flags,
                icmp_type,
                frag,
                pad,
                tunnel,
                non_ip,
            },
        )
}

fn prefix_text(six: bool, h: u8, len_cut: u8) -> String {
    if six {
        let a = std::net::Ipv6Addr::from(v6(h));
        let len = 128 - len_cut.min(8);
        Prefix::new(a.into(), len).to_string()
    } else {
        let a = std::net::Ipv4Addr::from(v4(h));
        let len = 32 - len_cut.min(6);
        Prefix::new(a.into(), len).to_string()
    }
}

fn addrs() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec((any::<bool>(), 0u8..64, prop_oneof![3 => Just(0u8), 1 => 0u8..8]), 1..30)
        .prop_map(|v| v.into_iter().map(|(six, h, cut)| prefix_text(six, h, cut)).collect())
}

/// One match, as rule text.
fn a_match() -> impl Strategy<Value = String> {
    let depth = prop_oneof![3 => Just(""), 1 => Just("inner "), 1 => Just("outer ")];
    let neg = prop_oneof![3 => Just(""), 1 => Just("!= ")];
    let ports = prop_oneof![
        (0u16..2000).prop_map(|p| p.to_string()),
        Just("53".to_owned()),
        Just("{ 23, 80 }".to_owned()),
        (0u16..1000, 0u16..1000).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
    ];
    prop_oneof![
        (depth.clone(), prop_oneof![Just("saddr"), Just("daddr"), Just("addr")], neg.clone(), 0usize..3)
            .prop_map(|(l, f, n, s)| format!("{l}{f} {n}@s{s}")),
        (depth.clone(), prop_oneof![Just("saddr"), Just("daddr")], addrs())
            .prop_map(|(l, f, a)| format!("{l}{f} {{ {} }}", a[..a.len().min(3)].join(", "))),
        (
            depth.clone(),
            neg.clone(),
            prop_oneof![Just("tcp"), Just("udp"), Just("icmp"), Just("icmpv6"), Just("99"), Just("{ tcp, udp }")]
        )
            .prop_map(|(l, n, p)| format!("{l}proto {n}{p}")),
        (
            depth.clone(),
            prop_oneof![Just("tcp"), Just("udp")],
            prop_oneof![Just("sport"), Just("dport")],
            neg.clone(),
            ports
        )
            .prop_map(|(l, p, f, n, v)| format!("{l}{p} {f} {n}{v}")),
        (depth.clone(), prop_oneof![Just("syn"), Just("syn,!ack"), Just("ack,fin"), Just("!rst")])
            .prop_map(|(l, f)| format!("{l}tcp flags {f}")),
        (
            depth.clone(),
            prop_oneof![Just("icmp"), Just("icmpv6")],
            neg.clone(),
            prop_oneof![Just("8"), Just("{ 0, 128 }")]
        )
            .prop_map(|(l, p, n, t)| format!("{l}{p} type {n}{t}")),
        (neg.clone(), prop_oneof![Just("0"), Just("50"), Just("{ 100, 150 }")])
            .prop_map(|(n, v)| format!("vlan {n}{v}")),
        (depth.clone(), prop_oneof![Just("first"), Just("later")]).prop_map(|(l, k)| format!("{l}frag {k}")),
        // Small lengths, and around 65536 where the class table ends and
        // the conditions themselves are checked (jumbo and TSO lengths).
        (neg, prop_oneof![Just(0u32), Just(65_400)], 0u32..300, 0u32..300).prop_map(|(n, base, a, b)| format!(
            "len {n}{}-{}",
            base + a.min(b),
            base + a.max(b)
        )),
        prop_oneof![Just("tcp"), Just("udp"), Just("icmp")].prop_map(str::to_owned),
    ]
}

fn rule_file() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(addrs(), 3),
        prop::collection::vec(
            (
                prop_oneof![2 => Just("drop"), 2 => Just("pass"), 3 => Just("count")],
                prop::collection::vec(a_match(), 0..4),
            ),
            0..300,
        ),
        any::<bool>(),
    )
        .prop_map(|(sets, rules, default_drop)| {
            let mut t = String::new();
            for (i, s) in sets.iter().enumerate() {
                t += &format!("set s{i} {{ {} }}\n", s.join(", "));
            }
            for (a, ms) in rules {
                t += &format!("{a} {}\n", ms.join(" "));
            }
            if default_drop {
                t += "default drop\n";
            }
            t
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn bit_vectors_equal_the_reference(text in rule_file(), pkts in prop::collection::vec(pkt(), 1..150), v4mapped in any::<bool>(), batch in 1usize..32, big in any::<bool>()) {
        let file = parse_rules("p.rules", &text, Path::new(".")).unwrap();
        let sets: Vec<Vec<Prefix>> = file.sets.iter().map(|s| match &s.source {
            sluice_rules::SetSource::Inline(p) => p.clone(),
            sluice_rules::SetSource::File(_)
            | sluice_rules::SetSource::Dynamic { .. }
            | sluice_rules::SetSource::Geo { .. } => unreachable!(),
        }).collect();
        // Many inline sets can exceed the lookup limit: a clean error, not a case.
        let compiled = RuleSet::compile(&file, &sets, &CompileOptions { v4mapped, ..CompileOptions::default() });
        prop_assume!(!matches!(compiled, Err(sluice_engine::CompileError::TooManyLookups)));
        let rules = compiled.unwrap();
        let frames: Vec<Vec<u8>> = pkts.iter().map(frame).collect();
        let decoded: Vec<_> = frames.iter().map(|f| decode(LinkType::ETHERNET, f)).collect();
        // Wire lengths: the frame's, or for some packets one around 65536
        // (a jumbo or TSO frame captured short).
        let wire: Vec<u32> = frames.iter().enumerate()
            .map(|(i, f)| if big && i % 3 == 0 { 65_400 + (i as u32 * 37) % 300 } else { f.len() as u32 })
            .collect();
        let summaries: Vec<(&PacketSummary, u32, u32)> =
            decoded.iter().zip(&wire).map(|(d, &w)| (d.as_ref().expect("built frames decode"), w, 0)).collect();
        let mut want_counts = vec![0u64; rules.rules().len()];
        let want: Vec<Decision> = summaries.iter().map(|(p, l, port)| rules.evaluate_reference(p, *l, *port, |r| want_counts[r] += 1)).collect();
        let mut got_counts = vec![0u64; rules.rules().len()];
        let mut got = vec![Decision { verdict: Verdict::Pass, rule: None }; summaries.len()];
        for (c, o) in summaries.chunks(64).zip(got.chunks_mut(64)) {
            rules.evaluate_batch(c, o, batch, |r, _| got_counts[r] += 1);
        }
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            prop_assert_eq!(g, w, "packet {} {:?}\nrules:\n{}", i, pkts[i], text);
        }
        prop_assert_eq!(&got_counts, &want_counts);

        // And through `judge_decoded`: every packet counted once, each rule's
        // counter is its count hits plus its decisions.
        let mut stats = Stats::default();
        let mut verdicts = vec![Verdict::Pass; decoded.len()];
        judge_decoded(&rules, Verdict::Pass, batch, &mut stats, decoded.len(), |i| (&decoded[i], wire[i], 0), &mut verdicts);
        let mut per_rule = want_counts.clone();
        for d in &want {
            if let Some(r) = d.rule { per_rule[usize::from(r)] += 1; }
        }
        prop_assert_eq!(stats.rule_hits.iter().map(|c| c.packets).collect::<Vec<_>>(), per_rule);
        prop_assert_eq!(stats.default_hits.packets, want.iter().filter(|d| d.rule.is_none()).count() as u64);
        prop_assert_eq!(verdicts, want.iter().map(|d| d.verdict).collect::<Vec<_>>());
        prop_assert_eq!(stats.passed + stats.dropped, stats.packets);
        prop_assert_eq!(stats.dropped, stats.dropped_by_src + stats.dropped_by_dst + stats.dropped_by_rule + stats.dropped_by_default);
    }
}

#[test]
fn first_match_decides_and_count_goes_on() {
    let text = "set bad { 10.0.0.1, 10.0.0.2 }\ncount proto tcp\npass tcp dport 53 saddr @bad\ndrop saddr @bad\ncount saddr @bad\ndefault pass\n";
    let file = parse_rules("t.rules", text, Path::new(".")).unwrap();
    let sets = vec![vec!["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()]];
    let rules = RuleSet::compile(&file, &sets, &CompileOptions::default()).unwrap();
    let p = |src, dport| Pkt {
        vlan: None,
        six: false,
        src,
        dst: 9,
        l4: 0,
        sport: 1000,
        dport,
        flags: 2,
        icmp_type: 0,
        frag: 0,
        pad: 0,
        tunnel: None,
        non_ip: false,
    };
    let frames = [frame(&p(1, 53)), frame(&p(2, 80)), frame(&p(3, 80))];
    let decoded: Vec<_> = frames.iter().map(|f| decode(LinkType::ETHERNET, f)).collect();
    let mut stats = Stats::default();
    let mut v = vec![Verdict::Pass; 3];
    judge_decoded(&rules, Verdict::Pass, 8, &mut stats, 3, |i| (&decoded[i], 60, 0), &mut v);
    assert_eq!(v, [Verdict::Pass, Verdict::Drop, Verdict::Pass]);
    let hits: Vec<u64> = stats.rule_hits.iter().map(|c| c.packets).collect();
    // count tcp: all 3; pass: 1; drop: 1; the count after the drop: never.
    assert_eq!(hits, [3, 1, 1, 0]);
    assert_eq!(stats.default_hits.packets, 1);
    assert_eq!(stats.dropped_by_src, 1);
}

#[test]
fn iface_matches_the_port_a_packet_came_in_on() {
    let file = parse_rules("i.rules", "drop iface eth1 proto tcp\ncount iface != eth1\n", Path::new(".")).unwrap();
    let ifaces = vec!["eth0".to_owned(), "eth1".to_owned()];
    let rules = RuleSet::compile(&file, &[], &CompileOptions { ifaces, ..CompileOptions::default() }).unwrap();
    let f = frame(&Pkt {
        vlan: None,
        six: false,
        src: 1,
        dst: 2,
        l4: 0,
        sport: 1,
        dport: 2,
        flags: 0,
        icmp_type: 0,
        frag: 0,
        pad: 0,
        tunnel: None,
        non_ip: false,
    });
    let d = decode(LinkType::ETHERNET, &f).unwrap();
    let mut counted = 0;
    assert_eq!(rules.evaluate_reference(&d, 60, 1, |_| counted += 1).verdict, Verdict::Drop);
    assert_eq!(rules.evaluate_reference(&d, 60, 0, |_| counted += 1).verdict, Verdict::Pass);
    assert_eq!(counted, 1, "count iface != eth1 matched the packet from eth0 only");
    let mut out = [Decision { verdict: Verdict::Pass, rule: None }; 2];
    rules.evaluate_batch(&[(&d, 60, 1), (&d, 60, 0)], &mut out, 4, |_, _| {});
    assert_eq!(out.map(|o| o.verdict), [Verdict::Drop, Verdict::Pass]);
    // Unknown names and files without ports are refused.
    let bad = parse_rules("i.rules", "drop iface eth9\n", Path::new(".")).unwrap();
    let ifaces = vec!["eth0".to_owned(), "eth1".to_owned()];
    assert!(RuleSet::compile(&bad, &[], &CompileOptions { ifaces, ..CompileOptions::default() })
        .err()
        .expect("refused")
        .to_string()
        .contains("not one of the interfaces given"));
    assert!(RuleSet::compile(&bad, &[], &CompileOptions::default())
        .err()
        .expect("refused")
        .to_string()
        .contains("live ports only"));
}
