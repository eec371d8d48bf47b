//! BGP's routes in the kernel program, run with `BPF_PROG_TEST_RUN`:
//! IPv4 and IPv6 blackholes written into the blackhole set's tries (and
//! taken out again), FlowSpec discards compiled as rules, both before the
//! rule file's rules (`--bgp-rules first`) or after them (`last`), each
//! rule's counter exact.
//!
//! Needs root (or CAP_BPF + CAP_PERFMON): skipped without unless
//! `SLUICE_REQUIRE_LIVE=1` (CI), when it fails.

use sluice_bgp::flowspec::{Component, Family, Flow, NumericOp, PrefixMatch};
use sluice_engine::flows::Placement;
use sluice_live::LiveError;
use sluice_rules::{parse_rules, Prefix};
use sluice_shield::flows::{flow_rules, BgpRules, BLACKHOLE_RULE, BLACKHOLE_SET};
use sluice_shield::program::{XDP_DROP, XDP_PASS};
use sluice_shield::{Compiled, Options, ShieldError};
use std::net::IpAddr;

/// Whether programs load here (the verifier refusing one is a bug of
/// ours, never a skip).
fn can_load() -> bool {
    let file = parse_rules("probe", "", std::path::Path::new(".")).unwrap();
    match Compiled::new(&file, &[], &Options::default()) {
        Ok(_) => true,
        Err(e @ ShieldError::Kernel(LiveError::XdpRefused { .. })) => panic!("{e}"),
        Err(e) => {
            assert!(std::env::var_os("SLUICE_REQUIRE_LIVE").is_none(), "SLUICE_REQUIRE_LIVE=1 but: {e}");
            eprintln!("SKIPPED: cannot load BPF programs here: {e}");
            false
        }
    }
}

/// Ethernet, then IPv4 or IPv6 from `src` to `dst`, then a UDP (17) or
/// TCP (6) header to `dport`.
fn frame(src: IpAddr, dst: IpAddr, proto: u8, dport: u16) -> Vec<u8> {
    let l4: Vec<u8> = match proto {
        6 => [&[0x30, 0x39][..], &dport.to_be_bytes(), &[0; 8], &[0x50, 0x02, 0x20, 0, 0, 0, 0, 0]].concat(),
        _ => [&[0x30, 0x39][..], &dport.to_be_bytes(), &[0, 8, 0, 0]].concat(),
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
    let bgp = BgpRules { flows: discards(), placement };
    let c = Compiled::with_bgp(&file, &[], &Options::default(), Some(&bgp)).unwrap();
    let (_, maps) = c.dynamic_sets().find(|(n, _)| *n == BLACKHOLE_SET).expect("the blackhole set");
    for h in holes {
        maps.insert(&h.parse().unwrap()).unwrap();
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
