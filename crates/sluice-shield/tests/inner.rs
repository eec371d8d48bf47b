//! `inner` matches in the kernel program: the innermost IP header behind
//! each tunnel the engine walks, the outer one when there is no tunnel (or
//! the tunnel is damaged), each frame judged as the engine judges it.
//!
//! Needs root (or CAP_BPF + CAP_PERFMON): skipped without unless
//! `SLUICE_REQUIRE_LIVE=1` (CI), when it fails.

mod common;
#[path = "common/tunnels.rs"]
mod tunnels;

use common::can_load;
use sluice_engine::{CompileOptions, RuleSet, Verdict};
use sluice_rules::parse_rules;
use sluice_shield::program::{XDP_DROP, XDP_PASS};
use sluice_shield::{Compiled, Options};
use sluice_wire::{ethertype, LinkType};
use tunnels::{ethernet, ip, udp, v4, wrap, Kind, ALL};

/// The rules in the kernel and in the engine.
struct Both {
    kernel: Compiled,
    engine: RuleSet,
}

impl Both {
    fn new(text: &str) -> Both {
        let file = parse_rules("inner.rules", text, std::path::Path::new(".")).unwrap();
        let kernel = Compiled::new(&file, &[], &Options::default()).unwrap();
        let engine = RuleSet::compile(&file, &[], &CompileOptions::default()).unwrap();
        Both { kernel, engine }
    }

    /// The kernel's verdict on `frame`, after checking it is the engine's.
    fn judge(&self, frame: &[u8], what: &str) -> Verdict {
        let p = sluice_wire::decode(LinkType::ETHERNET, frame).unwrap();
        let want = self.engine.evaluate_reference_at(&p, frame.len() as u32, 0, 0, |_| {}).verdict;
        let got = match self.kernel.test_run(frame).unwrap() as i32 {
            XDP_DROP => Verdict::Drop,
            XDP_PASS => Verdict::Pass,
            other => panic!("{what}: action {other}"),
        };
        assert_eq!(got, want, "{what}: kernel against engine, decoded {p}");
        got
    }
}

const LISTED: u32 = 0x0a01_0203; // 10.1.2.3
const OTHER: u32 = 0xc000_0207; // 192.0.2.7

/// A UDP datagram to port 53 from `src`.
fn dns_from(src: [u8; 16], v6: bool) -> Vec<u8> {
    ip(v6, src, v4(0xc633_6401), 17, &udp(40000, 53, b"question"))
}

fn outer_addr(v6: bool, a: u32) -> [u8; 16] {
    if v6 {
        let mut b = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        b[12..].copy_from_slice(&a.to_be_bytes());
        b
    } else {
        v4(a)
    }
}

fn framed(outer_v6: bool, packet: &[u8]) -> Vec<u8> {
    ethernet(if outer_v6 { ethertype::IPV6 } else { ethertype::IPV4 }, 0, packet)
}

#[test]
fn inner_saddr_drops_the_listed_source_in_every_tunnel_and_bare() {
    if !can_load() {
        return;
    }
    let both = Both::new("drop inner saddr 10.0.0.0/8\n");
    let listed = dns_from(v4(LISTED), false);
    // No tunnel: the innermost header is the only one.
    assert_eq!(both.judge(&ethernet(ethertype::IPV4, 0, &listed), "bare"), Verdict::Drop);
    let other = dns_from(v4(OTHER), false);
    assert_eq!(both.judge(&ethernet(ethertype::IPV4, 1, &other), "bare, not listed"), Verdict::Pass);
    for kind in ALL {
        for outer_v6 in [false, true] {
            for variant in [0u64, 0x1ff, 0x2a6, 0xe5] {
                let what = format!("{kind:?} outer v6 {outer_v6} variant {variant:#x}");
                // Listed inside, not outside: dropped.
                let out = wrap(kind, ethertype::IPV4, &listed, outer_v6, outer_addr(outer_v6, OTHER), v4(1), variant);
                assert_eq!(both.judge(&framed(outer_v6, &out), &what), Verdict::Drop, "{what}");
                // Listed outside only: the inner source decides.
                let out = wrap(kind, ethertype::IPV4, &other, outer_v6, outer_addr(outer_v6, LISTED), v4(1), variant);
                assert_eq!(both.judge(&framed(outer_v6, &out), &what), Verdict::Pass, "{what}, listed outer");
                // The inner header cut short: damage, so the engine has no
                // inner header and reads the outer one.
                let cut = &other[..12];
                let out = wrap(kind, ethertype::IPV4, cut, outer_v6, outer_addr(outer_v6, LISTED), v4(1), variant);
                let want = if outer_v6 { Verdict::Pass } else { Verdict::Drop };
                assert_eq!(both.judge(&framed(outer_v6, &out), &what), want, "{what}, damaged inner");
            }
        }
    }
}

#[test]
fn four_tunnels_are_walked_and_a_fifth_is_damage() {
    if !can_load() {
        return;
    }
    let both = Both::new("drop inner saddr 10.0.0.0/8\n");
    let mut packet = dns_from(v4(LISTED), false);
    let kinds = [Kind::Gre, Kind::Vxlan, Kind::GtpU, Kind::IpInIp, Kind::GeneveTeb];
    for (depth, kind) in kinds.into_iter().enumerate() {
        packet = wrap(kind, ethertype::IPV4, &packet, false, v4(OTHER), v4(1), depth as u64);
        let f = framed(false, &packet);
        let p = sluice_wire::decode(LinkType::ETHERNET, &f).unwrap();
        // The fifth is not recorded: it is the damage.
        assert_eq!(p.encap.len(), (depth + 1).min(4), "{p}");
        // Up to four, the listed innermost source; a fifth tunnel leaves
        // the engine with the outer header only (not listed).
        let want = if depth < 4 { Verdict::Drop } else { Verdict::Pass };
        assert_eq!(both.judge(&f, &format!("{} tunnels", depth + 1)), want);
    }
}

#[test]
fn inner_ports_protocols_and_ipv6_behind_tunnels() {
    if !can_load() {
        return;
    }
    let both = Both::new(
        "count inner proto udp\n\
         drop inner udp dport 53 inner saddr 2001:db8::/32\n\
         pass inner icmp type 8\n\
         drop saddr 192.0.2.0/24 inner frag later\n",
    );
    let mut v6src = [0u8; 16];
    v6src[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    v6src[15] = 9;
    let v6dns = ip(true, v6src, v6src, 17, &udp(40000, 53, b"question"));
    let mut later = ip(false, v4(LISTED), v4(1), 17, &[0u8; 16]);
    later[6..8].copy_from_slice(&0x0010u16.to_be_bytes());
    for kind in ALL {
        for outer_v6 in [false, true] {
            let src = outer_addr(outer_v6, OTHER);
            let out = wrap(kind, ethertype::IPV6, &v6dns, outer_v6, src, v4(2), 0x13);
            assert_eq!(both.judge(&framed(outer_v6, &out), &format!("{kind:?} v6 dns")), Verdict::Drop);
            // A later fragment inside: no ports; the outer 192.0.2.7 with
            // an inner later fragment is dropped by the last rule (IPv4
            // outer only).
            let out = wrap(kind, ethertype::IPV4, &later, outer_v6, src, v4(2), 0x40);
            let want = if outer_v6 { Verdict::Pass } else { Verdict::Drop };
            assert_eq!(both.judge(&framed(outer_v6, &out), &format!("{kind:?} later fragment")), want);
        }
    }
    let counts = both.kernel.counts().unwrap();
    assert!(counts[0].packets > 0 && counts[1].packets > 0, "{counts:?}");
}
