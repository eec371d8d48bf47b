//! BGP's routes in the kernel program, run with `BPF_PROG_TEST_RUN`:
//! IPv4 and IPv6 blackholes written into the blackhole set's tries (and
//! taken out again), FlowSpec discards compiled as rules, both before the
//! rule file's rules (`--bgp-rules first`) or after them (`last`), each
//! rule's counter exact.
//!
//! And each flow `flow_rules` takes, against the RFCs' reference
//! (`Flow::matches` over what `sluice_wire::decode` reads): random flows
//! of the components the program runs, random frames of both families.
//!
//! Needs root (or CAP_BPF + CAP_PERFMON): skipped without unless
//! `SLUICE_REQUIRE_LIVE=1` (CI), when it fails.

mod common;
use common::can_load;
use sluice_bgp::flowspec::{Component, Family, Flow, NumericOp, PrefixMatch};
use sluice_engine::flows::Placement;
use sluice_rules::{parse_rules, Prefix};
use sluice_shield::flows::{flow_rules, BgpRules, BLACKHOLE_RULE, BLACKHOLE_SET};
use sluice_shield::program::{XDP_DROP, XDP_PASS};
use sluice_shield::{Compiled, Options};
use std::net::IpAddr;

/// Ethernet, then IPv4 or IPv6 from `src` to `dst`, then a UDP (17) or
/// TCP (6) header to `dport`.
fn frame(src: IpAddr, dst: IpAddr, proto: u8, dport: u16) -> Vec<u8> {
    frame_from(src, dst, proto, 12345, dport)
}

/// The same from `sport`; an ICMP (1, 58) header of type `dport >> 8`,
/// code `dport & 0xff` instead of ports; SCTP (132) has ports too.
fn frame_from(src: IpAddr, dst: IpAddr, proto: u8, sport: u16, dport: u16) -> Vec<u8> {
    let ports = [sport.to_be_bytes(), dport.to_be_bytes()].concat();
    let l4: Vec<u8> = match proto {
        6 => [&ports[..], &[0; 8], &[0x50, 0x02, 0x20, 0, 0, 0, 0, 0]].concat(),
        17 => [&ports[..], &[0, 8, 0, 0]].concat(),
        1 | 58 => [&dport.to_be_bytes()[..], &[0; 6]].concat(),
        _ => [&ports[..], &[0; 8]].concat(),
    };
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
            f.extend_from_slice(&(20 + l4.len() as u16).to_be_bytes());
            f.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
            f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
            f.extend_from_slice(&[proto, 64]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        _ => unreachable!("one family"),
    }
    f.extend_from_slice(&l4);
    f
}

fn eq(v: u64) -> NumericOp {
    NumericOp { and: false, lt: false, gt: false, eq: true, len: 1, value: v }
}

fn to(p: &str) -> Component {
    let p: Prefix = p.parse().unwrap();
    Component::Destination(PrefixMatch::new(p.addr(), p.len()))
}

/// UDP to 198.51.100.0/24 port 53, and TCP to 2001:db8:53::/48 port 80.
fn discards() -> Vec<sluice_rules::Rule> {
    let v4 = Flow {
        family: Family::V4,
        components: vec![
            to("198.51.100.0/24"),
            Component::Protocol(vec![eq(17)]),
            Component::DestinationPort(vec![eq(53)]),
        ],
    };
    let v6 = Flow {
        family: Family::V6,
        components: vec![
            to("2001:db8:53::/48"),
            Component::Protocol(vec![eq(6)]),
            Component::DestinationPort(vec![eq(80)]),
        ],
    };
    [flow_rules(&v4).unwrap(), flow_rules(&v6).unwrap()].concat()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The program with the file `pass udp dport 9` and BGP's rules placed
/// as asked, its blackholes `holes`.
fn compiled(placement: Placement, holes: &[&str]) -> Compiled {
    let file = parse_rules("t.rules", "pass udp dport 9\n", std::path::Path::new(".")).unwrap();
    let bgp = BgpRules { flows: discards(), stops: Vec::new(), placement };
    let c = Compiled::with_bgp(&file, &[], &Options::default(), Some(&bgp)).unwrap();
    let (_, maps) = c.dynamic_sets().find(|(n, _)| *n == BLACKHOLE_SET).expect("the blackhole set");
    for h in holes {
        maps.insert(&h.parse().unwrap(), 0).unwrap();
    }
    c
}

#[test]
fn blackholes_and_discards_of_both_families_are_dropped_in_the_kernel() {
    if !can_load() {
        return;
    }
    let c = compiled(Placement::First, &["192.0.2.9/32", "2001:db8:dead::/48"]);
    let (s4, s6) = (ip("10.1.0.1"), ip("2001:db8:1::1"));
    let cases = [
        (frame(s4, ip("192.0.2.9"), 17, 1000), XDP_DROP, "v4 blackhole"),
        (frame(s4, ip("192.0.2.10"), 17, 1000), XDP_PASS, "next to it"),
        (frame(s6, ip("2001:db8:dead:1::7"), 6, 22), XDP_DROP, "v6 blackhole"),
        (frame(s6, ip("2001:db8:beef::7"), 6, 22), XDP_PASS, "outside it"),
        (frame(s4, ip("198.51.100.7"), 17, 53), XDP_DROP, "v4 discard"),
        (frame(s4, ip("198.51.100.7"), 6, 53), XDP_PASS, "TCP, not the flow's UDP"),
        (frame(s4, ip("198.51.100.7"), 17, 54), XDP_PASS, "another port"),
        (frame(s6, ip("2001:db8:53:1::1"), 6, 80), XDP_DROP, "v6 discard"),
        (frame(s6, ip("2001:db8:54::1"), 6, 80), XDP_PASS, "outside the v6 flow"),
        // First: the flows before the file's `pass udp dport 9`.
        (frame(s4, ip("192.0.2.9"), 17, 9), XDP_DROP, "blackholed before the file's pass"),
    ];
    for (f, want, what) in &cases {
        assert_eq!(c.test_run(f).unwrap(), *want as u32, "{what}");
    }
    let counts = c.counts().unwrap();
    assert_eq!(c.rule_texts()[0], BLACKHOLE_RULE);
    // The blackhole rule, the two flows' rules, then the file's.
    assert_eq!(counts.iter().take(4).map(|c| c.packets).collect::<Vec<_>>(), [3, 1, 1, 0]);

    // Withdrawn: out of the tries, the same program passes them.
    let (_, maps) = c.dynamic_sets().find(|(n, _)| *n == BLACKHOLE_SET).unwrap();
    maps.remove(&"192.0.2.9/32".parse().unwrap()).unwrap();
    maps.remove(&"2001:db8:dead::/48".parse().unwrap()).unwrap();
    assert_eq!(c.test_run(&cases[0].0).unwrap(), XDP_PASS as u32);
    assert_eq!(c.test_run(&cases[2].0).unwrap(), XDP_PASS as u32);
}

/// Rates and accepts from a BGP table, as the bridge's flows run them: a
/// rate's conforming packets and an accepted one stop the flows (a later
/// discard that covers them does not drop them), and the file's rules
/// judge them (`First`); a rate's packets over it are dropped, as many as
/// the engine's policer for the flow refuses.
#[test]
fn rates_and_accepts_stop_the_flows_as_on_the_bridge() {
    use sluice_engine::flows::{FlowRule, FlowTable, FlowVerdict, PoliceKey, Policer, Rate};
    use sluice_shield::flows::KernelFlows;
    use std::sync::Arc;
    if !can_load() {
        return;
    }
    let rule = |flow: Flow, verdict: FlowVerdict| FlowRule {
        flow,
        verdict,
        go_on: false,
        blackhole: false,
        source: "192.0.2.1".into(),
        unsupported: Vec::new(),
        counts: Default::default(),
    };
    let udp_to = |p: &str| Flow { family: Family::V4, components: vec![to(p), Component::Protocol(vec![eq(17)])] };
    let rate = Policer::new(Rate::BytesPerSecond(1000.0), None, PoliceKey::Rule);
    let burst = rate.burst;
    let table = FlowTable::new(
        vec![
            rule(udp_to("198.51.100.0/25"), FlowVerdict::Accept),
            rule(udp_to("203.0.113.0/24"), FlowVerdict::Police(Arc::new(rate))),
            // Less specific: after both in RFC 8955's order.
            rule(udp_to("198.51.0.0/16"), FlowVerdict::Drop),
            rule(udp_to("203.0.0.0/16"), FlowVerdict::Drop),
        ],
        Placement::First,
    );
    let k = KernelFlows::of(Some(&table), Placement::First, &std::collections::HashSet::new());
    assert_eq!((k.enforced, k.refused.len()), (4, 0), "{:?}", k.refused);
    // The file drops what reaches it on port 7: the stop goes on there.
    let file = parse_rules(
        "t.rules",
        "drop udp dport 7
",
        std::path::Path::new("."),
    )
    .unwrap();
    let c = Compiled::with_bgp(&file, &[], &Options::default(), Some(&k.program_rules())).unwrap();
    let s = ip("10.1.0.1");
    let cases = [
        (frame(s, ip("198.51.100.7"), 17, 1000), XDP_PASS, "accepted: the /16's discard never meets it"),
        (frame(s, ip("198.51.100.7"), 17, 7), XDP_DROP, "accepted, then the file's rule"),
        (frame(s, ip("198.51.200.7"), 17, 1000), XDP_DROP, "outside the accept: the discard"),
        (frame(s, ip("198.51.100.7"), 6, 1000), XDP_PASS, "TCP: no flow"),
    ];
    for (f, want, what) in &cases {
        assert_eq!(c.test_run(f).unwrap(), *want as u32, "{what}");
    }
    // Back to back, 200 frames under the rate: the engine's policer for
    // the flow (its clock held still) admits `want`; the kernel's, on a
    // clock that moves a little meanwhile (1,000 bytes a second: a frame
    // per 46 ms), as many or one or two more. The rest are dropped by the
    // police rule, not by the discard behind it (whose counter stays 0).
    let f = frame(s, ip("203.0.113.9"), 17, 1000);
    let engine = sluice_engine::rules::policer(
        &sluice_shield::flows::police_of(&Policer::new(Rate::BytesPerSecond(1000.0), None, PoliceKey::Rule)).unwrap(),
    );
    assert_eq!(engine.burst, burst);
    // A flow's one bucket: the engine keys it 0.
    let key = 0u128;
    let want = (0..200).filter(|_| engine.admit(&key, f.len() as u32, 0)).count();
    let passed = (0..200).filter(|_| c.test_run(&f).unwrap() == XDP_PASS as u32).count();
    assert!((want..=want + 2).contains(&passed), "{passed} passed, the engine's policer admits {want}");
    assert!(want > 10 && want < 200);
    let texts = c.rule_texts();
    let at = |prefix: &str| texts.iter().position(|t| t.starts_with(prefix) && t.contains("203.0.")).unwrap();
    let counts = c.counts().unwrap();
    assert_eq!(counts[at("police bgp")].packets, 200);
    assert_eq!(counts[at("drop bgp")].packets, 0, "the discard behind the rate meets nothing");
    let over = c.police_dropped().unwrap()[at("police bgp")];
    assert_eq!(over, Some(200 - passed as u64));
}

#[test]
fn last_puts_the_routes_after_the_files_rules() {
    if !can_load() {
        return;
    }
    let c = compiled(Placement::Last, &["192.0.2.9/32"]);
    let s4 = ip("10.1.0.1");
    assert_eq!(c.test_run(&frame(s4, ip("192.0.2.9"), 17, 9)).unwrap(), XDP_PASS as u32, "the file's pass first");
    assert_eq!(c.test_run(&frame(s4, ip("192.0.2.9"), 17, 10)).unwrap(), XDP_DROP as u32, "then the blackhole");
    assert_eq!(c.rule_texts().last().unwrap(), &discards().last().unwrap().text);
}

/// A seeded xorshift: a failing case names its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[(self.next() % xs.len() as u64) as usize]
    }
    fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }
}

/// 1 to 3 operators over values near `near` (ORed or ANDed at random).
fn ops(r: &mut Rng, near: &[u64]) -> Vec<NumericOp> {
    let n = 1 + r.next() % 3;
    (0..n)
        .map(|i| {
            let bits = 1 + r.next() % 7;
            let value = r.pick(near) + r.pick(&[0, 0, 1]);
            NumericOp {
                and: i > 0 && r.one_in(2),
                lt: bits & 4 != 0,
                gt: bits & 2 != 0,
                eq: bits & 1 != 0,
                len: 2,
                value,
            }
        })
        .collect()
}

const PORTS: [u64; 4] = [53, 80, 1000, 12345];
const PROTOS: [u64; 5] = [1, 6, 17, 58, 132];

/// An address of the pools the flows' prefixes are drawn in.
fn addr(r: &mut Rng, v6: bool) -> IpAddr {
    let low = r.pick(&[0u8, 1, 2, 0x80, 0xff]);
    let net = r.pick(&[0u8, 1]);
    if v6 {
        IpAddr::from([0x20, 0x01, 0x0d, 0xb8, 0, net, 0, 0, 0, 0, 0, 0, 0, 0, 0, low])
    } else {
        IpAddr::from([198, 51, net, low])
    }
}

fn flow(r: &mut Rng) -> Flow {
    let v6 = r.one_in(2);
    let mut components = Vec::new();
    for (kind, chance) in [(1, 2), (2, 4), (3, 2), (4, 6), (5, 3), (6, 6), (7, 6)] {
        if !r.one_in(chance) {
            continue;
        }
        let len = r.pick(if v6 { &[0u8, 40, 48, 128][..] } else { &[0u8, 16, 24, 32][..] });
        components.push(match kind {
            1 => Component::Destination(PrefixMatch::new(addr(r, v6), len)),
            2 => Component::Source(PrefixMatch::new(addr(r, v6), len)),
            3 => Component::Protocol(ops(r, &PROTOS)),
            4 => Component::Port(ops(r, &PORTS)),
            5 => Component::DestinationPort(ops(r, &PORTS)),
            6 => Component::SourcePort(ops(r, &PORTS)),
            _ => Component::IcmpType(ops(r, &[0, 3, 8, 128])),
        });
    }
    Flow { family: if v6 { Family::V6 } else { Family::V4 }, components }
}

#[test]
fn each_flow_the_program_takes_drops_what_the_rfcs_match() {
    if !can_load() {
        return;
    }
    let empty = parse_rules("t.rules", "", std::path::Path::new(".")).unwrap();
    let (mut taken, mut dropped) = (0, 0);
    for seed in 1..=120u64 {
        let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let f = flow(&mut r);
        let Ok(rules) = flow_rules(&f) else { continue };
        taken += 1;
        let bgp = BgpRules { flows: rules, stops: Vec::new(), placement: Placement::First };
        let c = Compiled::with_bgp(&empty, &[], &Options::default(), Some(&bgp)).unwrap();
        for i in 0..60 {
            // Mostly the flow's family, now and then the other.
            let v6 = (f.family == Family::V6) != r.one_in(4);
            let proto = r.pick(&[6u8, 17, if v6 { 58 } else { 1 }, 132]);
            let (sport, dport) = (r.pick(&PORTS) as u16, r.pick(&PORTS) as u16);
            let dport = if proto == 1 || proto == 58 { r.pick(&[0u16, 0x300, 0x800, 0x8000]) } else { dport };
            let frame = frame_from(addr(&mut r, v6), addr(&mut r, v6), proto, sport, dport);
            let ip = sluice_wire::decode(sluice_wire::LinkType::ETHERNET, &frame).unwrap().ip.unwrap();
            let want = f.matches(&sluice_engine::flows::flow_packet(&ip));
            dropped += usize::from(want);
            let got = c.test_run(&frame).unwrap();
            assert_eq!(got, if want { XDP_DROP } else { XDP_PASS } as u32, "seed {seed} frame {i}: {f}\n{ip:?}");
        }
    }
    // The draw reaches flows the program takes and packets they drop.
    assert!(taken >= 40 && dropped >= 100, "{taken} flows taken, {dropped} packets dropped");
}
