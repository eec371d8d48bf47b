//! The kernel program against the engine: random rule files and random
//! frames; each frame run in the kernel (`BPF_PROG_TEST_RUN`) gets the
//! verdict the engine's reference evaluator gives the frame as
//! `sluice_wire::decode` reads it, and every rule's counter (packets and
//! bytes) ends equal.
//!
//! Needs root (or CAP_BPF + CAP_PERFMON): skipped without unless
//! `SLUICE_REQUIRE_LIVE=1` (CI), when it fails.

mod common;
#[path = "common/tunnels.rs"]
mod tunnels;
use common::can_load;
use proptest::prelude::*;
use sluice_engine::tags::Tags;
use sluice_engine::SetChange;
use sluice_engine::{CompileOptions, RuleSet, Verdict};
use sluice_live::bpf::{BpfMap, MapType};
use sluice_rules::{parse_rules, Prefix};
use sluice_shield::origins::OriginCounts;
use sluice_shield::program::SampleTap;
use sluice_shield::tables::{origin_byte, Layout, ORIGIN_SLOTS};
use sluice_shield::{program::XDP_DROP, program::XDP_PASS, Compiled, Options};
use std::os::fd::AsRawFd;

/// The fullest an exact table is built (`V4ExactSet` clamps there).
const MAX_FILL: f64 = 0.9;
use sluice_wire::LinkType;

/// A seeded xorshift: a failing case prints its seed and reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, in_n: u64) -> bool {
        self.below(in_n) == 0
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// Addresses the frames use, and the sets are drawn near: 10.x/16 and
/// 192.0.2.x/24 plus a few high ones (past 127/8, where a sign-extended
/// compare would go wrong).
fn addr(r: &mut Rng) -> u32 {
    match r.below(4) {
        0 => 0x0a00_0000 | (r.below(4) as u32) << 16 | r.below(1024) as u32,
        1 => 0xc000_0200 | r.below(256) as u32,
        2 => 0xcb00_7100 | r.below(16) as u32,
        _ => 0xf000_0000 | r.below(4096) as u32,
    }
}

fn ip4(a: u32) -> String {
    std::net::Ipv4Addr::from(a).to_string()
}

/// An IPv6 address as the frames use them: 2001:100::/32 with the low 32
/// bits an IPv4-like address, so that sets and frames meet.
fn addr6(r: &mut Rng) -> u128 {
    let mid = r.below(4) as u128;
    0x2001_0100_u128 << 96 | mid << 64 | u128::from(addr(r))
}

fn prefix(r: &mut Rng) -> String {
    if r.chance(4) {
        let len = r.pick(&[0u8, 16, 32, 48, 64, 64, 96, 100, 120, 127, 128, 128]);
        let a = addr6(r) & if len == 0 { 0 } else { u128::MAX << (128 - u32::from(len)) };
        return format!("{}/{len}", std::net::Ipv6Addr::from(a));
    }
    let len = r.pick(&[8u8, 16, 20, 24, 25, 28, 30, 31, 32, 32, 32]);
    let a = addr(r) & if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
    format!("{}/{len}", ip4(a))
}

fn set_body(r: &mut Rng, n: usize) -> String {
    (0..n).map(|_| prefix(r)).collect::<Vec<_>>().join(", ")
}

/// `n` distinct IPv4 hosts (the kernel's exact table) and a few prefixes
/// of either family beside them (the prefix table or compares, both
/// looked up).
fn hosts_body(r: &mut Rng, n: usize) -> String {
    let mut hosts = std::collections::BTreeSet::new();
    while hosts.len() < n {
        hosts.insert(addr(r));
    }
    let mut items: Vec<String> = hosts.into_iter().map(ip4).collect();
    // As many IPv6 hosts (/128s: the IPv6 exact table) half the time.
    if r.chance(2) {
        let mut hosts6 = std::collections::BTreeSet::new();
        while hosts6.len() < n {
            hosts6.insert(addr6(r));
        }
        items.extend(hosts6.into_iter().map(|a| std::net::Ipv6Addr::from(a).to_string()));
    }
    for _ in 0..r.below(n as u64 / 8) {
        items.push(prefix(r));
    }
    items.join(", ")
}

/// How many hosts the hosts set has: any number, or as many as fill a
/// table of a few buckets to [`MAX_FILL`], where buckets overflow into
/// their neighbours and lookups walk chains.
fn host_count(r: &mut Rng) -> usize {
    let buckets = r.pick(&[0usize, 4, 8, 16]);
    if buckets == 0 {
        return 2 * sluice_shield::tables::INLINE_MAX + r.below(300) as usize;
    }
    (MAX_FILL * (sluice_sets::V4_SLOTS * buckets) as f64) as usize
}

fn list(r: &mut Rng, n: u64, f: impl Fn(&mut Rng) -> String) -> String {
    let k = 1 + r.below(n);
    let items: Vec<String> = (0..k).map(|_| f(r)).collect();
    if items.len() == 1 {
        items[0].clone()
    } else {
        format!("{{ {} }}", items.join(", "))
    }
}

/// This host's interfaces (at most four, `lo` among them): the frames come
/// in on them, the `iface` matches name them (the engine's ports, in order).
fn host_ifaces() -> Vec<(String, u32)> {
    let mut names: Vec<String> =
        std::fs::read_dir("/sys/class/net").unwrap().filter_map(|e| e.ok()?.file_name().into_string().ok()).collect();
    names.sort_by_key(|n| n != "lo");
    names.truncate(4);
    names.into_iter().map(|n| (n.clone(), sluice_live::sys::ifindex(&n).unwrap())).collect()
}

/// A `police` rule's head whose verdicts do not depend on the clock while
/// a case runs (well under a second): a burst nothing in 300 frames
/// exhausts, or a rate so slow that after its burst nothing refills (1
/// packet, or 1 byte, a second: every bucket time is a whole number of
/// seconds, so the first packet over is over by a second or more).
fn police_head(r: &mut Rng) -> String {
    let rate = match r.below(3) {
        0 => "1000000pps burst 1000000".to_owned(),
        1 if r.chance(3) => "1pps".to_owned(),
        1 => format!("1pps burst {}", 1 + r.below(4)),
        _ => format!("8bit burst {}", 40 + r.below(400)),
    };
    let per = r.pick(&["", "", " per saddr", " per daddr"]);
    format!("police {rate}{per}")
}

fn rule_file(r: &mut Rng, ifaces: &[(String, u32)]) -> String {
    let mut text = String::new();
    // Two sets: one small (compares), one large (the kernel table).
    let (small, big) = (1 + r.below(8) as usize, 40 + r.below(200) as usize);
    text += &format!("set small {{ {} }}\n", set_body(r, small));
    text += &format!("set big {{ {} }}\n", set_body(r, big));
    // Mostly hosts, more than compares hold: the exact table.
    let hosts = host_count(r);
    text += &format!("set hosts {{ {} }}\n", hosts_body(r, hosts));
    // Filled at runtime: its elements go into the kernel's tries below.
    text += "set dyn dynamic\n";
    // Half the files read the innermost header behind tunnels too: each
    // match that reads an IP header then reads the outer or the inner one.
    let inner = r.chance(2);
    let depth = |r: &mut Rng| if inner && r.chance(2) { "inner " } else { "" };
    // Every frame looks the hosts up: their counter must end as the
    // engine's (a lookup that misses a key past a full bucket shows).
    text += &format!("count {}addr @hosts\n", depth(r));
    for _ in 0..1 + r.below(8) {
        let action = match r.pick(&["drop", "drop", "pass", "count", "police"]) {
            "police" => police_head(r),
            a => a.to_owned(),
        };
        let mut matches = Vec::new();
        for _ in 0..1 + r.below(3) {
            let neg = if r.chance(4) { "!= " } else { "" };
            // `inner` holds for the rest of the rule; `outer` takes it back.
            let at = if depth(r).is_empty() { "outer " } else { "inner " };
            matches.push(
                at.to_owned()
                    + &match r.below(10) {
                        0 | 1 => format!(
                            "{} {neg}@{}",
                            r.pick(&["saddr", "daddr", "addr"]),
                            r.pick(&["small", "big", "dyn", "hosts", "hosts"])
                        ),
                        2 => format!("{} {neg}{}", r.pick(&["saddr", "daddr", "addr"]), prefix(r)),
                        3 => format!(
                            "proto {neg}{}",
                            list(r, 3, |r| r.pick(&["tcp", "udp", "icmp", "icmpv6", "47"]).into())
                        ),
                        4 => format!(
                            "{} {} {neg}{}",
                            r.pick(&["tcp", "udp"]),
                            r.pick(&["sport", "dport"]),
                            list(r, 3, |r| {
                                let lo = r.pick(&[0u16, 22, 53, 80, 443, 1024, 40000]);
                                if r.chance(2) {
                                    lo.to_string()
                                } else {
                                    format!("{lo}-{}", lo.saturating_add(r.below(30000) as u16))
                                }
                            })
                        ),
                        5 => format!("tcp flags {}", r.pick(&["syn", "syn,!ack", "ack", "fin,!syn", "rst"])),
                        6 => format!(
                            "{} type {neg}{}",
                            r.pick(&["icmp", "icmpv6"]),
                            list(r, 3, |r| r.pick(&["0", "8", "3", "128", "135"]).into())
                        ),
                        7 => format!("vlan {neg}{}", list(r, 2, |r| r.pick(&["1", "100", "4094"]).into())),
                        8 if r.chance(2) => {
                            let names: Vec<&str> = ifaces.iter().map(|(n, _)| n.as_str()).collect();
                            format!("iface {neg}{}", list(r, 2, |r| r.pick(&names).to_owned()))
                        }
                        8 => format!("frag {}", r.pick(&["first", "later"])),
                        _ => {
                            let lo = r.pick(&[0u32, 60, 64, 100, 1000]);
                            format!("len {neg}{lo}-{}", lo + r.below(200) as u32)
                        }
                    },
            );
        }
        text += &format!("{action} {}\n", matches.join(" "));
    }
    if r.chance(3) {
        text += "default drop\n";
    }
    text
}

fn be16(v: u16) -> [u8; 2] {
    v.to_be_bytes()
}

/// A frame of the shapes the kernel program reads, fields random, often
/// damaged or cut; a third of them in tunnels (one to five, of every kind
/// the engine walks, their headers now and then damaged).
fn frame(r: &mut Rng, set_addrs: &[u32], set_addrs6: &[u128]) -> Vec<u8> {
    let v6 = r.chance(3);
    let l3: u16 = match r.below(12) {
        0 => 0x0806,
        1 => r.next() as u16,
        _ if v6 => 0x86dd,
        _ => 0x0800,
    };
    let (l3, packet) = if r.chance(3) {
        let p = packet(r, l3, set_addrs, set_addrs6);
        tunnelled(r, l3, p, set_addrs)
    } else {
        (l3, packet(r, l3, set_addrs, set_addrs6))
    };
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
    let tags = r.pick(&[0u64, 0, 0, 1, 1, 2, 4, 5]);
    let mut types: Vec<u16> = (0..tags).map(|_| r.pick(&[0x8100u16, 0x88a8, 0x9100])).collect();
    types.push(l3);
    f.extend_from_slice(&be16(types[0]));
    for t in &types[1..] {
        f.extend_from_slice(&be16(r.pick(&[1u16, 100, 4094, 0xf064])));
        f.extend_from_slice(&be16(*t));
    }
    f.extend_from_slice(&packet);
    if r.chance(6) {
        let cut = r.below(f.len() as u64) as usize;
        f.truncate(cut.max(14));
    }
    f
}

/// `packet` (of EtherType `ty`) in one to five tunnels, inside out; the
/// outer one's EtherType and bytes. A tunnel's own headers (outer IP, UDP,
/// the tunnel's) get a random byte now and then: a version, a length, a
/// flag, a port.
fn tunnelled(r: &mut Rng, mut ty: u16, mut packet: Vec<u8>, set_addrs: &[u32]) -> (u16, Vec<u8>) {
    for _ in 0..r.pick(&[1u64, 1, 1, 2, 2, 3, 4, 5, 6]) {
        let kind = r.pick(&tunnels::ALL);
        let outer_v6 = r.chance(3);
        let end = |r: &mut Rng| {
            let a = if r.chance(2) && !set_addrs.is_empty() { r.pick(set_addrs) } else { addr(r) };
            if outer_v6 {
                (addr6(r) & !0xffff_ffff | u128::from(a)).to_be_bytes()
            } else {
                tunnels::v4(a)
            }
        };
        let (src, dst) = (end(r), end(r));
        let mut out = tunnels::wrap(kind, ty, &packet, outer_v6, src, dst, r.next());
        if r.chance(5) {
            let at = r.below((out.len() - packet.len()) as u64) as usize;
            out[at] = if r.chance(2) { r.next() as u8 } else { out[at] ^ 1 << r.below(8) };
        }
        ty = if outer_v6 { 0x86dd } else { 0x0800 };
        packet = out;
    }
    (ty, packet)
}

/// An IP packet (or anything) of EtherType `l3`, fields random, often
/// damaged or cut.
fn packet(r: &mut Rng, l3: u16, set_addrs: &[u32], set_addrs6: &[u128]) -> Vec<u8> {
    let mut f = Vec::new();
    let pick_addr = |r: &mut Rng| if r.chance(2) && !set_addrs.is_empty() { r.pick(set_addrs) } else { addr(r) };
    // Random bytes behind GRE, IP in IP and the UDP tunnels' ports too.
    let proto = r.pick(&[6u8, 6, 17, 17, 17, 1, 58, 47, 4, 41, 0]);
    let mut l4 = Vec::new();
    let l4len = match proto {
        6 => 20 + 4 * r.below(3) as usize,
        17 | 1 | 58 => 8,
        _ => 8,
    };
    for _ in 0..l4len + r.below(20) as usize {
        l4.push(r.next() as u8);
    }
    l4[0..2].copy_from_slice(&be16(r.pick(&[22u16, 53, 80, 443, 1024, 40000, 65535])));
    l4[2..4].copy_from_slice(&be16(r.pick(&[22u16, 53, 80, 443, 1024, 40000, 0, 4789, 6081, 2152])));
    if proto == 6 {
        l4[12] = if r.chance(8) { (r.below(5) as u8) << 4 } else { ((l4len / 4) as u8) << 4 };
        let any = r.next() as u8;
        l4[13] = r.pick(&[0x02u8, 0x12, 0x10, 0x11, 0x04, any]);
    }
    if proto == 1 || proto == 58 {
        l4[0] = r.pick(&[0u8, 8, 3, 128, 135]);
    }
    if l3 == 0x0800 {
        let opts = if r.chance(4) { r.below(11) as usize } else { 0 };
        let ihl = if r.chance(20) { r.below(5) as u8 } else { 5 + opts as u8 };
        let mut h = vec![0u8; 20 + 4 * opts];
        h[0] = if r.chance(20) { 0x60 | ihl } else { 0x40 | ihl };
        let total = match r.below(10) {
            0 => 0,
            1 => r.below(100) as u16,
            _ => (h.len() + l4.len()) as u16 - if r.chance(4) { r.below(12) as u16 } else { 0 },
        };
        h[2..4].copy_from_slice(&be16(total));
        let frag: u16 = match r.below(6) {
            0 => 0x2000,
            1 => 0x2000 | r.below(100) as u16,
            2 => r.below(100) as u16,
            _ => {
                if r.chance(2) {
                    0x4000
                } else {
                    0
                }
            }
        };
        h[6..8].copy_from_slice(&be16(frag));
        h[9] = proto;
        h[12..16].copy_from_slice(&pick_addr(r).to_be_bytes());
        h[16..20].copy_from_slice(&pick_addr(r).to_be_bytes());
        f.extend_from_slice(&h);
        f.extend_from_slice(&l4);
    } else if l3 == 0x86dd {
        let mut exts = Vec::new();
        let mut next = proto;
        for _ in 0..r.pick(&[0u64, 0, 1, 2, 3, 8, 9]) {
            let kind = r.pick(&[0u8, 43, 44, 60, 51, 135]);
            let mut e = match kind {
                44 => {
                    let mut e = vec![0u8; 8];
                    let off: u16 = if r.chance(3) { (r.below(50) as u16) << 3 } else { 0 };
                    e[2..4].copy_from_slice(&be16(off | r.below(2) as u16));
                    e
                }
                51 => {
                    let n = r.below(3) as u8;
                    let mut e = vec![0u8; (usize::from(n) + 2) * 4];
                    e[1] = n;
                    e
                }
                _ => {
                    let n = r.below(2) as u8;
                    let mut e = vec![0u8; (usize::from(n) + 1) * 8];
                    e[1] = n;
                    e
                }
            };
            e[0] = next;
            next = kind;
            exts.insert(0, e);
        }
        let mut h = vec![0u8; 40];
        h[0] = if r.chance(20) { 0x40 } else { 0x60 };
        let payload: usize = exts.iter().map(Vec::len).sum::<usize>() + l4.len();
        let pl = match r.below(8) {
            0 => 0,
            1 => r.below(40) as u16,
            _ => payload as u16,
        };
        h[4..6].copy_from_slice(&be16(pl));
        h[6] = next;
        let mapped = |r: &mut Rng, a: u32| -> [u8; 16] {
            match r.below(3) {
                0 => std::net::Ipv4Addr::from(a).to_ipv6_mapped().octets(),
                1 if !set_addrs6.is_empty() => r.pick(set_addrs6).to_be_bytes(),
                _ => (addr6(r) & !0xffff_ffff | u128::from(a)).to_be_bytes(),
            }
        };
        let (s, d) = (pick_addr(r), pick_addr(r));
        h[8..24].copy_from_slice(&mapped(r, s));
        h[24..40].copy_from_slice(&mapped(r, d));
        f.extend_from_slice(&h);
        for e in exts {
            f.extend_from_slice(&e);
        }
        f.extend_from_slice(&l4);
    } else {
        f.extend_from_slice(&l4);
    }
    // Cut inside a tunnel (the frame itself is cut later).
    if r.chance(12) {
        let cut = r.below(f.len() as u64 + 1) as usize;
        f.truncate(cut);
    }
    f
}

/// What a case met (so that a test can say the generator reaches them).
#[derive(Default)]
struct Met {
    /// Frames a `police` rule dropped over its rate.
    police_drops: usize,
    /// Frames a `police` rule let through (charged).
    police_passes: usize,
    /// Rules with an `iface` match that decided a frame.
    iface_decided: usize,
    /// Drops counted under an origin.
    origin_drops: usize,
}

fn check(seed: u64) -> Result<Met, TestCaseError> {
    let mut met = Met::default();
    let mut r = Rng(seed | 1);
    let ifaces = host_ifaces();
    let text = rule_file(&mut r, &ifaces);
    let file = parse_rules("random.rules", &text, std::path::Path::new("."))
        .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
    let dyn_count = r.below(40) as usize;
    let dynamic: Vec<Prefix> = {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..dyn_count {
            seen.insert(prefix(&mut r).parse::<Prefix>().unwrap());
        }
        seen.into_iter().collect()
    };
    let sets: Vec<Vec<Prefix>> = file
        .sets
        .iter()
        .map(|s| match &s.source {
            sluice_rules::SetSource::Inline(p) => p.clone(),
            sluice_rules::SetSource::Dynamic { .. } => dynamic.clone(),
            _ => Vec::new(),
        })
        .collect();
    let v4mapped = r.chance(2);
    let undecodable_drop = r.chance(2);
    let opts = CompileOptions {
        v4mapped,
        ifaces: ifaces.iter().map(|(n, _)| n.clone()).collect(),
        ..CompileOptions::default()
    };
    let engine = RuleSet::compile(&file, &sets, &opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
    // Half the programs count the dynamic set's drops by the origin of the
    // element that matched, each element of a random origin (the engine's
    // tags, as the CrowdSec feed sets them).
    // (Drawn apart, as the rows below: the rules and frames stay the seed's.)
    let mut ro = Rng((seed ^ 0x0819_1a57) | 1);
    let by_origin = ro.chance(2);
    let origins: Vec<u16> = dynamic.iter().map(|_| ro.below(ORIGIN_SLOTS as u64) as u16).collect();
    let engine = match file.sets.iter().position(|s| s.name == "dyn").filter(|_| by_origin) {
        Some(set) => {
            let mut tags = Tags::new();
            for (p, &o) in dynamic.iter().zip(&origins) {
                tags.set(*p, o);
            }
            engine.with_sets(vec![SetChange { set, base: None, delta: None, tags: Some(std::sync::Arc::new(tags)) }])
        }
        None => engine,
    };
    let origin_counts = by_origin.then(|| OriginCounts::new("dyn").unwrap());
    // Tables at the engine's fill, the kernel's, or fuller (so that lookups
    // walk chains of full buckets), or every host in the prefix table as
    // before.
    let fills = [sluice_sets::DEFAULT_MAX_LOAD, Layout::default().max_load, MAX_FILL];
    // A dynamic set's host table of 2 buckets (32 slots) half the time, so
    // its hosts spill into the trie as a full set's would.
    let layout = Layout {
        exact_hosts: !r.chance(6),
        max_load: r.pick(&fills),
        early_keys: r.chance(2),
        dyn_buckets: r.chance(2).then_some(2),
    };
    // Half the programs sample their drops (into a one-page ring that soon
    // fills): the verifier takes the sampling after any rules, and the
    // verdicts and counters below are the same with it.
    let ring = r.chance(2).then(|| {
        let ring = BpfMap::new(MapType::RingBuf, 0, 0, 4096, 0, "t_samples").unwrap();
        let cap = BpfMap::new(MapType::Array, 4, 8, 1, 0, "t_cap").unwrap();
        (ring, BpfMap::new(MapType::PercpuArray, 4, 16, 2, 0, "t_lost").unwrap(), cap)
    });
    // Half of those with a kernel cap on the samples (drawn apart, so that
    // the rules and frames stay the seed's).
    let mut cr = Rng((seed ^ 0xca9) | 1);
    let sample = ring.as_ref().map(|(ring, lost, cap)| SampleTap {
        ring_fd: ring.as_raw_fd(),
        lost_fd: lost.as_raw_fd(),
        rate: 1 + r.below(3) as u32,
        max_pps: if cr.chance(2) { 1 + cr.below(50) } else { 0 },
        cap_fd: cap.as_raw_fd(),
    });
    // Counter rows for some of the interfaces (none, some, all; in some
    // order), drawn apart so that the rules and frames stay the seed's:
    // a frame from another interface counts in the row past them.
    let mut rr = Rng((seed ^ 0x1f_ace5) | 1);
    let turn = rr.below(ifaces.len() as u64) as usize;
    let mut rows: Vec<u32> = ifaces.iter().map(|&(_, i)| i).collect();
    rows.rotate_left(turn);
    rows.truncate(rr.below(ifaces.len() as u64 + 1) as usize);
    let opts = Options {
        undecodable_drop,
        v4mapped,
        dry_run: false,
        sample,
        origins: origin_counts.as_ref().map(OriginCounts::tap),
        ifaces: rows.clone(),
    };
    let kernel =
        Compiled::with_layout(&file, &sets, &opts, &layout).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
    let row_of = |ifindex: u32| rows.iter().position(|&i| i == ifindex).unwrap_or(rows.len());
    // Per row: packets and bytes passed, then dropped.
    let mut want_rows = vec![[(0u64, 0u64); 2]; rows.len() + 1];
    // The runtime elements, as the shield writes them into the kernel.
    for (name, maps) in kernel.dynamic_sets() {
        assert_eq!(name, "dyn");
        for (p, &o) in dynamic.iter().zip(&origins) {
            let origin = if by_origin { origin_byte(Some(o)) } else { 0 };
            maps.insert(p, origin).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
    }
    // The engine's drops by origin: per tag, IPv4 and IPv6.
    let mut want_origins = vec![[(0u64, 0u64); 2]; ORIGIN_SLOTS];
    let set_addrs: Vec<u32> = sets
        .iter()
        .flatten()
        .filter_map(|p| match *p {
            Prefix::V4 { addr, len } => Some(addr | if len < 32 { r.below(1 << (32 - len).min(8)) as u32 } else { 0 }),
            Prefix::V6 { .. } => None,
        })
        .collect();
    let set_addrs6: Vec<u128> = sets
        .iter()
        .flatten()
        .filter_map(|p| match *p {
            Prefix::V6 { addr, len } => {
                Some(addr | if len < 128 { u128::from(r.next()) & (u128::MAX >> len.max(64)) } else { 0 })
            }
            Prefix::V4 { .. } => None,
        })
        .collect();
    let mut want = vec![(0u64, 0u64); file.rules.len()];
    // The engine's police rules judge on a clock held at 0, the kernel's
    // on its own: they agree while the case runs in under a second (see
    // `police_head`).
    let start = std::time::Instant::now();
    for i in 0..300 {
        let f = frame(&mut r, &set_addrs, &set_addrs6);
        let wire = f.len() as u32;
        let port = r.below(ifaces.len() as u64) as u32;
        let expected = match sluice_wire::decode(LinkType::ETHERNET, &f) {
            Ok(p) => {
                let d = engine.evaluate_reference_at(&p, wire, port, 0, |rule| {
                    met.police_passes += usize::from(file.rules[rule].action == sluice_rules::Action::Police);
                    want[rule].0 += 1;
                    want[rule].1 += u64::from(wire);
                });
                for (rule, r) in file.rules.iter().enumerate() {
                    let decided = d.rule == Some(rule as u16);
                    if r.action == sluice_rules::Action::Police {
                        met.police_drops += usize::from(decided);
                    }
                    if decided && r.matches.iter().any(|m| matches!(m, sluice_rules::Match::Iface { .. })) {
                        met.iface_decided += 1;
                    }
                }
                if let Some(rule) = d.rule {
                    want[usize::from(rule)].0 += 1;
                    want[usize::from(rule)].1 += u64::from(wire);
                    if d.verdict == Verdict::Drop {
                        if let Some((tag, v6)) = engine.tag_of(usize::from(rule), &p) {
                            let c = &mut want_origins[usize::from(tag)][usize::from(v6)];
                            c.0 += 1;
                            c.1 += u64::from(wire);
                        }
                    }
                }
                d.verdict
            }
            Err(_) if undecodable_drop => Verdict::Drop,
            Err(_) => Verdict::Pass,
        };
        let got = kernel.test_run_on(&f, ifaces[port as usize].1).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let want_action = if expected == Verdict::Drop { XDP_DROP } else { XDP_PASS } as u32;
        let cell = &mut want_rows[row_of(ifaces[port as usize].1)][usize::from(expected == Verdict::Drop)];
        cell.0 += 1;
        cell.1 += u64::from(wire);
        prop_assert_eq!(
            got,
            want_action,
            "seed {} frame {} on {} ({:?} in): {:02x?}\ndecoded: {:?}\nrules (v4mapped {}):\n{}",
            seed,
            i,
            ifaces[port as usize].0,
            start.elapsed(),
            f,
            sluice_wire::decode(LinkType::ETHERNET, &f).map(|p| p.to_string()),
            v4mapped,
            text
        );
    }
    let took = start.elapsed();
    let counts = kernel.counts().map_err(|e| TestCaseError::fail(e.to_string()))?;
    // What each police rule found over its rate: the engine's own count.
    let over = kernel.police_dropped().map_err(|e| TestCaseError::fail(e.to_string()))?;
    for (rule, o) in over.iter().enumerate() {
        let e = engine.policer(rule).map(|p| p.over.load(std::sync::atomic::Ordering::Relaxed));
        prop_assert_eq!(*o, e, "seed {} rule {} over its rate ({:?}):\n{}", seed, rule, took, text);
    }
    for (rule, (&(p, b), c)) in want.iter().zip(&counts).enumerate() {
        prop_assert_eq!((c.packets, c.bytes), (p, b), "seed {} rule {} counter ({:?}):\n{}", seed, rule, took, text);
    }
    if let Some(oc) = &origin_counts {
        let got = oc.read().map_err(|e| TestCaseError::fail(e.to_string()))?;
        for (tag, want) in want_origins.iter().enumerate() {
            let got = got.get(tag).map_or([(0, 0); 2], |g| [(g[0].packets, g[0].bytes), (g[1].packets, g[1].bytes)]);
            met.origin_drops += want.iter().map(|c| c.0 as usize).sum::<usize>();
            prop_assert_eq!(got, *want, "seed {} drops of origin {} (v4, v6):\n{}", seed, tag, text);
        }
    }
    // Each interface's packets by verdict: what the engine decided of the
    // frames that came in on it.
    let by_iface = kernel.iface_counts().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let got_rows: Vec<[(u64, u64); 2]> =
        by_iface.iter().map(|v| [(v.pass.packets, v.pass.bytes), (v.drop.packets, v.drop.bytes)]).collect();
    prop_assert_eq!(got_rows, want_rows, "seed {} rows {:?} ({:?}):\n{}", seed, rows, took, text);
    Ok(met)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn the_kernel_program_judges_as_the_engine(seed in any::<u64>()) {
        if !can_load() {
            return Ok(());
        }
        check(seed)?;
    }
}

/// The random files reach what the property is about: police rules over
/// and within their rate, `iface` matches that decide, and drops counted
/// by origin (40 fixed seeds).
#[test]
fn the_random_rules_police_and_match_interfaces() {
    if !can_load() {
        return;
    }
    let mut all = Met::default();
    for seed in 1..=40u64 {
        let m = check(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)).unwrap_or_else(|e| panic!("{e}"));
        all.police_drops += m.police_drops;
        all.police_passes += m.police_passes;
        all.iface_decided += m.iface_decided;
        all.origin_drops += m.origin_drops;
    }
    eprintln!(
        "police drops {}, passes {}, iface decided {}, drops by origin {}",
        all.police_drops, all.police_passes, all.iface_decided, all.origin_drops
    );
    assert!(all.police_drops > 0 && all.police_passes > 0 && all.iface_decided > 0 && all.origin_drops > 0);
}
