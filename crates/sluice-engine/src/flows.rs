//! Rules from routers: FlowSpec routes (RFC 8955 for IPv4, RFC 8956 for
//! IPv6) and blackhole routes, compiled into a [`FlowTable`] the judge
//! reads beside the rule file's rules (before them, or after them for the
//! packets no rule decided), in the same snapshot.
//!
//! Flows are applied in RFC 8955 §5.1's order: the first that matches
//! decides, unless its traffic-action's T bit says to go on. A table of
//! thousands of flows is not walked per packet: the flows whose destination
//! is a prefix (offset 0) are indexed by it, one hash table per prefix
//! length, and a packet walks only the flows its destination can match plus
//! those without a destination prefix, merged in order. Each component is
//! compiled from the RFC's operator lists into what it admits (ranges of a
//! numeric field, a bitmap of a bitmask field), and
//! [`FlowTable::reference_walk`] walks every flow with
//! `sluice_bgp::flowspec::Flow::matches`, the RFC's definitions read
//! directly: the property test holds the two equal.

use sluice_bgp::flowspec::{
    bitmask_values, numeric_ranges, BitmaskOp, Component, Family, Flow, FlowPacket, NumericOp, PrefixMatch, FRAG_DF,
    FRAG_FIRST, FRAG_IS, FRAG_LAST,
};
use sluice_wire::IpSummary;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// What a matching flow does with a packet.
#[derive(Clone, Debug)]
pub enum FlowVerdict {
    /// traffic-rate 0, or a blackhole route.
    Drop,
    /// traffic-rate N > 0: packets over the rate are dropped.
    Police(Arc<Policer>),
    /// No rate action (none at all, or only actions sluice cannot take):
    /// the flows stop here and the packet goes on to the rule file.
    Accept,
}

/// Packets and bytes a flow matched, and of them the packets it dropped;
/// shared by every table the flow is part of, so they survive updates.
#[derive(Debug, Default)]
pub struct FlowCounts {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    pub dropped: AtomicU64,
}

/// One installed flow.
#[derive(Clone, Debug)]
pub struct FlowRule {
    pub flow: Flow,
    pub verdict: FlowVerdict,
    /// The traffic-action T bit: after this flow's action, later flows
    /// apply too (RFC 8955 §7.4).
    pub go_on: bool,
    /// A blackhole route (shown as one; matched as `destination PREFIX`).
    pub blackhole: bool,
    /// Who announced it (the peer's address, for `ctl flows`).
    pub source: String,
    /// Actions it carries that sluice does not take (redirect, marking,
    /// sample), named for `ctl flows` and the log.
    pub unsupported: Vec<String>,
    pub counts: Arc<FlowCounts>,
}

/// Where the flows sit relative to the rule file's rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// Before them (a flow's drop is final; an accepted packet goes on to
    /// the file's rules).
    #[default]
    First,
    /// After them: only packets no file rule decided meet the flows.
    Last,
}

/// A compiled component.
#[derive(Clone, Debug)]
enum Test {
    /// Bits of the address (most significant first) under a mask.
    Prefix { bits: u128, mask: u128 },
    /// Inclusive ranges of the field's values.
    Ranges(Box<[(u32, u32)]>),
    /// A bitmap of the field's values (at most 256).
    Values([u64; 4]),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Dst,
    Src,
    Protocol,
    AnyPort,
    DstPort,
    SrcPort,
    IcmpType,
    IcmpCode,
    TcpFlags,
    Length,
    Dscp,
    Fragment,
    FlowLabel,
}

/// What the components read of a packet, once per packet.
#[derive(Clone, Copy, Debug)]
struct Fields {
    v6: bool,
    src: u128,
    dst: u128,
    protocol: u32,
    ports: Option<(u32, u32)>,
    icmp: Option<(u32, u32)>,
    tcp_flags: Option<u32>,
    length: u32,
    dscp: u32,
    fragment: u32,
    flow_label: u32,
}

impl Fields {
    fn of(p: &FlowPacket) -> Fields {
        Fields {
            v6: p.src.is_ipv6(),
            src: PrefixMatch::bits_of(p.src),
            dst: PrefixMatch::bits_of(p.dst),
            protocol: u32::from(p.protocol),
            ports: p.ports.map(|(s, d)| (u32::from(s), u32::from(d))),
            icmp: p.icmp.map(|(t, c)| (u32::from(t), u32::from(c))),
            tcp_flags: p.tcp_flags.map(u32::from),
            length: p.length,
            dscp: u32::from(p.dscp),
            fragment: p.fragment as u32,
            flow_label: p.flow_label,
        }
    }
}

/// What FlowSpec components read of a decoded IP header whose frame was
/// `wire_len` bytes long: the outer header, as a router sees it.
pub fn flow_packet(ip: &IpSummary) -> FlowPacket {
    let fragment = match ip.fragment {
        Some(f) => {
            let first = f.offset == 0;
            (if first { 0 } else { FRAG_IS })
                | (if first && f.more { FRAG_FIRST } else { 0 })
                | (if !first && !f.more { FRAG_LAST } else { 0 })
        }
        None => 0,
    } | if ip.dont_fragment { FRAG_DF } else { 0 };
    FlowPacket {
        src: ip.src,
        dst: ip.dst,
        protocol: ip.protocol,
        ports: ip.ports,
        icmp: ip.icmp,
        tcp_flags: ip.tcp_flags.map(u16::from),
        length: ip.l3_end.saturating_sub(ip.l3_offset),
        dscp: ip.tos >> 2,
        fragment,
        flow_label: ip.flow_label,
    }
}

#[derive(Clone, Debug)]
struct Compiled {
    v6: bool,
    tests: Box<[(Field, Test)]>,
}

fn ranges(ops: &[NumericOp], max: u32) -> Test {
    let r = numeric_ranges(ops, u64::from(max));
    Test::Ranges(r.into_iter().map(|(lo, hi)| (lo as u32, hi as u32)).collect())
}

fn values(ops: &[BitmaskOp], max: u8) -> Test {
    let mut words = [0u64; 4];
    for (v, yes) in bitmask_values(ops, u16::from(max)).into_iter().enumerate() {
        if yes {
            words[v / 64] |= 1 << (v % 64);
        }
    }
    Test::Values(words)
}

impl Compiled {
    fn new(flow: &Flow) -> Compiled {
        let tests = flow
            .components
            .iter()
            .map(|c| match c {
                Component::Destination(p) | Component::Source(p) => {
                    let (bits, mask) = p.pattern();
                    let f = if matches!(c, Component::Destination(_)) { Field::Dst } else { Field::Src };
                    (f, Test::Prefix { bits, mask })
                }
                Component::Protocol(ops) => (Field::Protocol, ranges(ops, 0xff)),
                Component::Port(ops) => (Field::AnyPort, ranges(ops, 0xffff)),
                Component::DestinationPort(ops) => (Field::DstPort, ranges(ops, 0xffff)),
                Component::SourcePort(ops) => (Field::SrcPort, ranges(ops, 0xffff)),
                Component::IcmpType(ops) => (Field::IcmpType, ranges(ops, 0xff)),
                Component::IcmpCode(ops) => (Field::IcmpCode, ranges(ops, 0xff)),
                // The decoder keeps FIN..CWR; the bits above read as clear.
                Component::TcpFlags(ops) => (Field::TcpFlags, values(ops, 0xff)),
                Component::PacketLength(ops) => (Field::Length, ranges(ops, u32::MAX)),
                Component::Dscp(ops) => (Field::Dscp, ranges(ops, 0x3f)),
                Component::Fragment(ops) => (Field::Fragment, values(ops, 0x0f)),
                Component::FlowLabel(ops) => (Field::FlowLabel, ranges(ops, 0xf_ffff)),
            })
            .collect();
        Compiled { v6: flow.family == Family::V6, tests }
    }

    #[inline]
    fn matches(&self, f: &Fields) -> bool {
        self.v6 == f.v6
            && self.tests.iter().all(|(field, test)| {
                let v = match field {
                    Field::Dst | Field::Src => {
                        let a = if *field == Field::Dst { f.dst } else { f.src };
                        let Test::Prefix { bits, mask } = test else { return false };
                        return a & mask == *bits;
                    }
                    Field::AnyPort => {
                        return f.ports.is_some_and(|(s, d)| admits(test, s) || admits(test, d));
                    }
                    Field::Protocol => Some(f.protocol),
                    Field::DstPort => f.ports.map(|p| p.1),
                    Field::SrcPort => f.ports.map(|p| p.0),
                    Field::IcmpType => f.icmp.map(|i| i.0),
                    Field::IcmpCode => f.icmp.map(|i| i.1),
                    Field::TcpFlags => f.tcp_flags,
                    Field::Length => Some(f.length),
                    Field::Dscp => Some(f.dscp),
                    Field::Fragment => Some(f.fragment),
                    Field::FlowLabel => Some(f.flow_label),
                };
                v.is_some_and(|v| admits(test, v))
            })
    }
}

#[inline]
fn admits(test: &Test, v: u32) -> bool {
    match test {
        Test::Ranges(r) => r.iter().any(|&(lo, hi)| lo <= v && v <= hi),
        Test::Values(w) => v < 256 && w[(v / 64) as usize] & (1 << (v % 64)) != 0,
        Test::Prefix { .. } => false,
    }
}

/// Most destination prefix lengths indexed per family; flows of other
/// lengths are walked for every packet of the family.
const MAX_LENGTHS: usize = 32;

/// Flows by a destination's bits under one prefix length's mask.
type ByDst = HashMap<u128, Box<[u32]>, foldhash::fast::FixedState>;

/// One family's flows, by destination.
#[derive(Clone, Debug, Default)]
struct Index {
    /// (mask, flows by masked destination), longest first.
    by_dst: Vec<(u128, ByDst)>,
    /// Flows without an indexable destination, in order.
    wild: Box<[u32]>,
    /// A bit per value of a destination's top 16 bits that some indexed
    /// flow's prefix covers: most packets meet no flow, and learn it here
    /// from one bit instead of a hash probe per prefix length.
    gate: Box<[u64]>,
}

impl Index {
    #[inline]
    fn may_match(&self, dst: u128) -> bool {
        let top = (dst >> 112) as usize;
        !self.wild.is_empty() || self.gate.get(top / 64).is_some_and(|w| w & (1 << (top % 64)) != 0)
    }
}

impl Index {
    fn build(rules: &[FlowRule], v6: bool) -> Index {
        let mut lengths: Vec<u8> = Vec::new();
        let mut by_len: HashMap<u8, HashMap<u128, Vec<u32>>> = HashMap::new();
        let mut wild = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            if (r.flow.family == Family::V6) != v6 {
                continue;
            }
            let dst = r.flow.components.iter().find_map(|c| match c {
                Component::Destination(p) if p.offset == 0 && p.len > 0 => Some(p),
                _ => None,
            });
            match dst {
                Some(p) if lengths.contains(&p.len) || lengths.len() < MAX_LENGTHS => {
                    if !lengths.contains(&p.len) {
                        lengths.push(p.len);
                    }
                    by_len.entry(p.len).or_default().entry(p.pattern().0).or_default().push(i as u32);
                }
                _ => wild.push(i as u32),
            }
        }
        lengths.sort_unstable_by(|a, b| b.cmp(a));
        let mut gate = vec![0u64; 1 << 10].into_boxed_slice();
        for (&len, keys) in &by_len {
            for &k in keys.keys() {
                // The top-16-bit values the prefix covers.
                let first = (k >> 112) as usize;
                let count = 1usize << (16 - len.min(16));
                for top in first..first + count {
                    gate[top / 64] |= 1 << (top % 64);
                }
            }
        }
        let by_dst = lengths
            .into_iter()
            .map(|len| {
                let map = by_len.remove(&len).unwrap_or_default();
                let mask = PrefixMatch::new(IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), len).pattern().1;
                let mut m = HashMap::with_capacity_and_hasher(map.len(), foldhash::fast::FixedState::default());
                m.extend(map.into_iter().map(|(k, v)| (k, v.into_boxed_slice())));
                (mask, m)
            })
            .collect();
        Index { by_dst, wild: wild.into_boxed_slice(), gate }
    }
}

/// Lists one packet merges: the wild ones and one per indexed length.
const MAX_LISTS: usize = MAX_LENGTHS + 1;

/// The flows in force, in the order they apply. Replaced whole on each
/// change (a packet sees one table or the next, never half an UPDATE);
/// the counters and policers of flows that stay are carried over by the
/// caller, which keeps them with its routes.
#[derive(Clone, Debug, Default)]
pub struct FlowTable {
    rules: Vec<FlowRule>,
    compiled: Vec<Compiled>,
    v4: Index,
    v6: Index,
    placement: Placement,
    policed: bool,
}

/// What the flows decided for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowDecision {
    /// No flow dropped it (none matched, or one accepted it or let it
    /// through its rate).
    Pass,
    /// Dropped by flow N (of [`FlowTable::rules`]).
    Drop(u32),
}

impl FlowTable {
    /// The flows in RFC 8955's order (IPv4 before IPv6, which never meet);
    /// flows that tie keep the order given.
    pub fn new(mut rules: Vec<FlowRule>, placement: Placement) -> FlowTable {
        rules.sort_by(|a, b| {
            (a.flow.family == Family::V6).cmp(&(b.flow.family == Family::V6)).then_with(|| a.flow.precedence(&b.flow))
        });
        let compiled = rules.iter().map(|r| Compiled::new(&r.flow)).collect();
        FlowTable {
            v4: Index::build(&rules, false),
            v6: Index::build(&rules, true),
            policed: rules.iter().any(|r| matches!(r.verdict, FlowVerdict::Police(_))),
            compiled,
            rules,
            placement,
        }
    }

    pub fn rules(&self) -> &[FlowRule] {
        &self.rules
    }

    pub fn placement(&self) -> Placement {
        self.placement
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether some flow polices (the judge then reads the clock).
    pub fn policed(&self) -> bool {
        self.policed
    }

    /// Calls `visit` with each flow that matches `f`, in order, until it
    /// returns false.
    #[inline]
    fn walk(&self, f: &Fields, mut visit: impl FnMut(usize) -> bool) {
        let index = if f.v6 { &self.v6 } else { &self.v4 };
        let mut lists: [&[u32]; MAX_LISTS] = [&[]; MAX_LISTS];
        let mut n = 0;
        if !index.wild.is_empty() {
            lists[0] = &index.wild;
            n = 1;
        }
        for (mask, map) in &index.by_dst {
            if let Some(l) = map.get(&(f.dst & mask)) {
                lists[n] = l;
                n += 1;
            }
        }
        let lists = &mut lists[..n];
        loop {
            // The next flow in order: the least head of the lists.
            let mut best: Option<usize> = None;
            for (j, l) in lists.iter().enumerate() {
                if let Some(&head) = l.first() {
                    if best.is_none_or(|b| head < lists[b][0]) {
                        best = Some(j);
                    }
                }
            }
            let Some(j) = best else { return };
            let i = lists[j][0] as usize;
            lists[j] = &lists[j][1..];
            if self.compiled[i].matches(f) && !visit(i) {
                return;
            }
        }
    }

    /// Judge one packet (its outer header, frame of `wire_len` bytes) at
    /// `now_ns` ([`mono_ns`]; only policers read it), counting it against
    /// the flows it meets.
    #[inline]
    pub fn judge(&self, ip: &IpSummary, wire_len: u32, now_ns: u64) -> FlowDecision {
        let index = if ip.is_ipv6() { &self.v6 } else { &self.v4 };
        if !index.may_match(PrefixMatch::bits_of(ip.dst)) {
            return FlowDecision::Pass;
        }
        let p = flow_packet(ip);
        let f = Fields::of(&p);
        let mut decision = FlowDecision::Pass;
        self.walk(&f, |i| {
            let r = &self.rules[i];
            r.counts.packets.fetch_add(1, Ordering::Relaxed);
            r.counts.bytes.fetch_add(u64::from(wire_len), Ordering::Relaxed);
            let over = match &r.verdict {
                FlowVerdict::Drop => true,
                FlowVerdict::Police(p) => !p.admit(&p_key(p, &f), wire_len, now_ns),
                FlowVerdict::Accept => false,
            };
            if over {
                r.counts.dropped.fetch_add(1, Ordering::Relaxed);
                decision = FlowDecision::Drop(i as u32);
                return false;
            }
            r.go_on
        });
        decision
    }

    /// The flows that match `p` and are reached (each flow's action taken
    /// as if no policer were over its rate), by the compiled tables.
    pub fn matched(&self, p: &FlowPacket) -> Vec<usize> {
        let mut out = Vec::new();
        let index = if p.dst.is_ipv6() { &self.v6 } else { &self.v4 };
        if !index.may_match(PrefixMatch::bits_of(p.dst)) {
            return out;
        }
        self.walk(&Fields::of(p), |i| {
            out.push(i);
            self.reaches_next(i)
        });
        out
    }

    /// The same, walking every flow with `Flow::matches` (the RFC's
    /// definitions, read directly): the reference [`FlowTable::matched`]
    /// is tested against.
    pub fn reference_walk(&self, p: &FlowPacket) -> Vec<usize> {
        let mut out = Vec::new();
        for (i, r) in self.rules.iter().enumerate() {
            if r.flow.matches(p) {
                out.push(i);
                if !self.reaches_next(i) {
                    break;
                }
            }
        }
        out
    }

    fn reaches_next(&self, i: usize) -> bool {
        let r = &self.rules[i];
        !matches!(r.verdict, FlowVerdict::Drop) && r.go_on
    }
}

/// The key a policer's bucket is chosen by.
#[inline]
fn p_key(p: &Policer, f: &Fields) -> u128 {
    match p.per {
        PoliceKey::Rule => 0,
        PoliceKey::Source => f.src,
        PoliceKey::Destination => f.dst,
    }
}

/// Nanoseconds on a monotonic clock (since the first call).
pub fn mono_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// What a rate counts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rate {
    BytesPerSecond(f64),
    PacketsPerSecond(f64),
}

/// Whose traffic one bucket holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoliceKey {
    /// All the rule's traffic (FlowSpec's traffic-rate: an aggregate).
    Rule,
    Source,
    Destination,
}

/// Buckets of a per-address policer: addresses that hash alike share one
/// (a bounded table; such a pair is held to one rate between them).
const PER_ADDRESS_BUCKETS: usize = 4096;

/// A token bucket as GCRA keeps it: per bucket one atomic, the time the
/// bucket would be full again (its "theoretical arrival time"); a packet
/// conforms when that is at most `tolerance` ahead of now, and pushes it
/// on by its cost. Shared by every worker: one compare-and-swap per
/// policed packet, no lock.
#[derive(Debug)]
pub struct Policer {
    pub rate: Rate,
    /// The burst, in the rate's unit (bytes or packets).
    pub burst: f64,
    pub per: PoliceKey,
    ns_per_unit: f64,
    tolerance_ns: u64,
    buckets: Box<[AtomicU64]>,
    /// Packets found over the rate.
    pub over: AtomicU64,
}

impl Policer {
    /// A policer of `rate` with a burst of `burst` units (None: a tenth of
    /// a second's worth, at least two full-size frames or two packets).
    pub fn new(rate: Rate, burst: Option<f64>, per: PoliceKey) -> Policer {
        let (per_s, floor) = match rate {
            Rate::BytesPerSecond(r) => (r, 2.0 * 1514.0),
            Rate::PacketsPerSecond(r) => (r, 2.0),
        };
        let per_s = per_s.max(f64::MIN_POSITIVE);
        let burst = burst.unwrap_or((per_s / 10.0).max(floor));
        let ns_per_unit = 1e9 / per_s;
        let n = if per == PoliceKey::Rule { 1 } else { PER_ADDRESS_BUCKETS };
        Policer {
            rate,
            burst,
            per,
            ns_per_unit,
            tolerance_ns: (burst * ns_per_unit).min(u64::MAX as f64 / 4.0) as u64,
            buckets: (0..n).map(|_| AtomicU64::new(0)).collect(),
            over: AtomicU64::new(0),
        }
    }

    /// Whether a packet of `len` bytes keyed `key` is within the rate at
    /// `now_ns`; if so it is charged.
    pub fn admit(&self, key: &u128, len: u32, now_ns: u64) -> bool {
        let units = match self.rate {
            Rate::BytesPerSecond(_) => f64::from(len),
            Rate::PacketsPerSecond(_) => 1.0,
        };
        let cost = (units * self.ns_per_unit).min(u64::MAX as f64 / 4.0) as u64;
        let slot = if self.buckets.len() == 1 {
            0
        } else {
            (xxhash_rust::xxh3::xxh3_64(&key.to_le_bytes()) as usize) % self.buckets.len()
        };
        let b = &self.buckets[slot];
        let mut tat = b.load(Ordering::Relaxed);
        loop {
            let start = tat.max(now_ns);
            if start - now_ns > self.tolerance_ns {
                self.over.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            match b.compare_exchange_weak(tat, start.saturating_add(cost), Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(t) => tat = t,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sluice_bgp::flowspec::{BitmaskOp, NumericOp};
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn rule(flow: Flow, verdict: FlowVerdict, go_on: bool) -> FlowRule {
        FlowRule {
            flow,
            verdict,
            go_on,
            blackhole: false,
            source: "test".into(),
            unsupported: Vec::new(),
            counts: Arc::default(),
        }
    }

    fn num(and: bool, lt: bool, gt: bool, eq: bool, value: u64) -> NumericOp {
        NumericOp { and, lt, gt, eq, len: 2, value }
    }

    fn udp_to(dst: [u8; 4], port: u16, len: u32) -> IpSummary {
        IpSummary {
            src: IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7)),
            dst: IpAddr::V4(Ipv4Addr::from(dst)),
            protocol: 17,
            ports: Some((4000, port)),
            l3_end: len,
            ..IpSummary::UNSPECIFIED
        }
    }

    #[test]
    fn the_first_flow_in_rfc_order_decides_and_counts() {
        let dst = |a: [u8; 4], len| Component::Destination(PrefixMatch::new(IpAddr::V4(Ipv4Addr::from(a)), len));
        // A /24 drop of port 53, and a /16 accept: the longer prefix first.
        let drop53 = Flow {
            family: Family::V4,
            components: vec![
                dst([192, 0, 2, 0], 24),
                Component::DestinationPort(vec![num(false, false, false, true, 53)]),
            ],
        };
        let accept = Flow { family: Family::V4, components: vec![dst([192, 0, 0, 0], 16)] };
        let t = FlowTable::new(
            vec![rule(accept, FlowVerdict::Accept, false), rule(drop53, FlowVerdict::Drop, false)],
            Placement::First,
        );
        assert!(t.rules()[0].flow.components.len() == 2, "the /24 is first");
        assert_eq!(t.judge(&udp_to([192, 0, 2, 9], 53, 100), 114, 0), FlowDecision::Drop(0));
        assert_eq!(t.judge(&udp_to([192, 0, 2, 9], 54, 100), 114, 0), FlowDecision::Pass);
        assert_eq!(t.judge(&udp_to([192, 0, 7, 9], 53, 100), 114, 0), FlowDecision::Pass);
        assert_eq!(t.judge(&udp_to([10, 0, 7, 9], 53, 100), 114, 0), FlowDecision::Pass);
        let c = |i: usize| {
            let k = &t.rules()[i].counts;
            (k.packets.load(Ordering::Relaxed), k.bytes.load(Ordering::Relaxed), k.dropped.load(Ordering::Relaxed))
        };
        assert_eq!(c(0), (1, 114, 1));
        assert_eq!(c(1), (2, 228, 0), "the /16 accepted two; the packet to 10/8 met no flow");
    }

    #[test]
    fn an_aggregate_policer_holds_its_rate() {
        // 100,000 bytes/s, 1,000-byte packets every 1 ms for 10 s offered
        // 1,000,000 bytes/s: about 100 per second conform, plus the burst.
        let p = Policer::new(Rate::BytesPerSecond(100_000.0), Some(5_000.0), PoliceKey::Rule);
        let admitted = (0..10_000u64).filter(|i| p.admit(&0, 1000, i * 1_000_000)).count();
        assert!((1_000..=1_006).contains(&admitted), "{admitted}");
        // Per source: two sources each get the rate.
        let p = Policer::new(Rate::PacketsPerSecond(10.0), Some(1.0), PoliceKey::Source);
        let a = (0..1000u64).filter(|i| p.admit(&1, 60, i * 10_000_000)).count();
        let b = (0..1000u64).filter(|i| p.admit(&2, 60, i * 10_000_000)).count();
        assert!((100..=101).contains(&a) && (100..=101).contains(&b), "{a} {b}");
    }

    /// An Ethernet + IPv4 + UDP frame to `dst`:`port`.
    fn frame(dst: [u8; 4], port: u16) -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x08, 0x00];
        f.extend_from_slice(&[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 198, 51, 100, 1]);
        f.extend_from_slice(&dst);
        f.extend_from_slice(&[0x9c, 0x40]);
        f.extend_from_slice(&port.to_be_bytes());
        f.extend_from_slice(&[0, 8, 0, 0]);
        f
    }

    /// Flows first: their drop is final and their accept leaves the packet
    /// to the file's rules. Flows last: only what no file rule decided
    /// meets them. Either way the summary counts the flow's drops apart.
    #[test]
    fn flows_sit_before_or_after_the_file_rules() {
        use crate::{Engine, RuleSet, Verdict};
        use sluice_wire::LinkType;
        let file =
            sluice_rules::parse_rules("t.rules", "pass udp dport 53\ndrop udp dport 54\n", std::path::Path::new("."))
                .unwrap();
        let rules = RuleSet::compile(&file, &[], &Default::default()).unwrap();
        let dst = |len| Component::Destination(PrefixMatch::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 0)), len));
        // Drop all of 192.0.2.0/24; accept (stop the flows) for 192.0.2.0/25.
        let table = |placement| {
            Arc::new(FlowTable::new(
                vec![
                    rule(Flow { family: Family::V4, components: vec![dst(24)] }, FlowVerdict::Drop, false),
                    rule(Flow { family: Family::V4, components: vec![dst(25)] }, FlowVerdict::Accept, false),
                ],
                placement,
            ))
        };
        let cases = [
            // (destination, port): verdict with flows first, with flows last
            ([192, 0, 2, 200], 53, Verdict::Drop, Verdict::Pass),
            ([192, 0, 2, 200], 99, Verdict::Drop, Verdict::Drop),
            ([192, 0, 2, 1], 54, Verdict::Drop, Verdict::Drop),
            ([192, 0, 2, 1], 99, Verdict::Pass, Verdict::Pass),
            ([10, 0, 0, 1], 99, Verdict::Pass, Verdict::Pass),
        ];
        for (placement, col) in [(Placement::First, 0), (Placement::Last, 1)] {
            let mut e = Engine::new(rules.with_flows(Some(table(placement))), Verdict::Pass);
            for (d, port, first, last) in cases {
                let want = if col == 0 { first } else { last };
                assert_eq!(e.judge(LinkType::ETHERNET, &frame(d, port), 42), want, "{placement:?} {d:?}:{port}");
            }
            let (by_flow, all) = if placement == Placement::First { (2, 3) } else { (1, 2) };
            assert_eq!(e.stats().dropped_by_flow, by_flow, "{placement:?}");
            assert_eq!(e.stats().dropped, all, "{placement:?}");
        }
    }

    /// A `police` rule drops what is over its rate and lets the rest go
    /// on to the later rules; `per saddr` gives each source its own bucket.
    #[test]
    fn police_rules_drop_over_their_rate_and_pass_the_rest_on() {
        use crate::{Engine, RuleSet, Verdict};
        use sluice_wire::LinkType;
        let compile = |text: &str| {
            let file = sluice_rules::parse_rules("t.rules", text, std::path::Path::new(".")).unwrap();
            RuleSet::compile(&file, &[], &Default::default()).unwrap()
        };
        // 10 packets of burst, 1 a second: 100 frames back to back, 10 or 11 pass.
        let mut e = Engine::new(compile("police 1pps burst 10 udp dport 53\ndrop udp dport 54\n"), Verdict::Pass);
        let passed =
            (0..100).filter(|_| e.judge(LinkType::ETHERNET, &frame([192, 0, 2, 1], 53), 42) == Verdict::Pass).count();
        assert!((10..=11).contains(&passed), "{passed}");
        // Within the rate, the later rules still apply.
        let mut e = Engine::new(compile("police 1000000pps udp\ndrop udp dport 54\n"), Verdict::Pass);
        assert_eq!(e.judge(LinkType::ETHERNET, &frame([192, 0, 2, 1], 54), 42), Verdict::Drop);
        assert_eq!(e.judge(LinkType::ETHERNET, &frame([192, 0, 2, 1], 55), 42), Verdict::Pass);
        assert_eq!(e.stats().rule_hits[0].packets, 2, "both counted by the police rule");
        assert_eq!(e.stats().rule_hits[1].packets, 1);
        // Per destination: each gets its own burst.
        let rules = compile("police 1pps burst 5 per daddr udp\n");
        let mut e = Engine::new(rules.clone(), Verdict::Pass);
        for d in 1..=3u8 {
            let passed =
                (0..20).filter(|_| e.judge(LinkType::ETHERNET, &frame([192, 0, 2, d], 9), 42) == Verdict::Pass).count();
            assert!((5..=6).contains(&passed), "{d}: {passed}");
        }
        assert_eq!(e.stats().dropped_by_rule, 60 - e.stats().passed);
        assert_eq!(rules.policer(0).unwrap().over.load(Ordering::Relaxed), e.stats().dropped);
        // The reference evaluator agrees on a fresh bucket.
        let rules = compile("police 1pps burst 3 udp\n");
        let p = sluice_wire::decode(LinkType::ETHERNET, &frame([192, 0, 2, 1], 9)).unwrap();
        let v: Vec<Verdict> = (0..6).map(|_| rules.evaluate_reference(&p, 42, 0, |_| {}).verdict).collect();
        assert_eq!(&v[..3], [Verdict::Pass; 3]);
        assert_eq!(v[5], Verdict::Drop);
    }

    fn arb_prefix(v6: bool) -> impl Strategy<Value = PrefixMatch> {
        // Few distinct addresses, so that packets meet them.
        (0u8..4, 0u8..=if v6 { 128 } else { 32 }, 0u8..=if v6 { 64 } else { 0 }).prop_map(move |(a, len, off)| {
            let addr = if v6 {
                IpAddr::V6(Ipv6Addr::new(0x2001 + u16::from(a % 2), 0xdb8, 0, u16::from(a), 0, 0, 0, u16::from(a)))
            } else {
                IpAddr::V4(Ipv4Addr::new(if a.is_multiple_of(2) { 192 } else { 10 }, a * 40, 2, a))
            };
            let mut p = PrefixMatch::new(addr, len);
            if v6 && off < p.len {
                p.offset = off;
                let (bits, _) = p.pattern();
                p.addr = IpAddr::V6(Ipv6Addr::from(bits));
            }
            p
        })
    }

    fn arb_numeric(max: u64) -> impl Strategy<Value = Vec<NumericOp>> {
        proptest::collection::vec(
            (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>(), prop_oneof![0..=max.min(70), 0..=max]),
            1..4,
        )
        .prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (and, lt, gt, eq, value))| NumericOp { and: and && i > 0, lt, gt, eq, len: 2, value })
                .collect()
        })
    }

    fn arb_bitmask(max: u64) -> impl Strategy<Value = Vec<BitmaskOp>> {
        proptest::collection::vec((any::<bool>(), any::<bool>(), any::<bool>(), 0..=max), 1..3).prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (and, not, matched, value))| BitmaskOp { and: and && i > 0, not, matched, len: 1, value })
                .collect()
        })
    }

    fn arb_flow(v6: bool) -> impl Strategy<Value = Flow> {
        let c = prop_oneof![
            arb_prefix(v6).prop_map(Component::Destination),
            arb_prefix(v6).prop_map(Component::Source),
            arb_numeric(20).prop_map(Component::Protocol),
            arb_numeric(70).prop_map(Component::Port),
            arb_numeric(70).prop_map(Component::DestinationPort),
            arb_numeric(70).prop_map(Component::SourcePort),
            arb_numeric(5).prop_map(Component::IcmpType),
            arb_numeric(5).prop_map(Component::IcmpCode),
            arb_bitmask(0x1ff).prop_map(Component::TcpFlags),
            arb_numeric(1600).prop_map(Component::PacketLength),
            arb_numeric(63).prop_map(Component::Dscp),
            arb_bitmask(0xf).prop_map(Component::Fragment),
            arb_numeric(5).prop_map(Component::FlowLabel),
        ];
        proptest::collection::vec(c, 0..4).prop_map(move |mut cs| {
            cs.sort_by_key(Component::kind);
            cs.dedup_by_key(|c| c.kind());
            if !v6 {
                cs.retain(|c| !matches!(c, Component::FlowLabel(_)));
            }
            Flow { family: if v6 { Family::V6 } else { Family::V4 }, components: cs }
        })
    }

    fn arb_packet() -> impl Strategy<Value = FlowPacket> {
        (
            any::<bool>(),
            (0u8..4, 0u8..4, any::<u8>()),
            prop_oneof![Just(6u8), Just(17), Just(1), Just(58), 0u8..20],
            (0u16..70, 0u16..70),
            (0u8..6, 0u8..6),
            any::<u8>(),
            (20u32..1600, 0u8..64, 0u64..16, 0u32..6),
        )
            .prop_map(
                |(v6, (a, b, low), protocol, ports, icmp, flags, (length, dscp, fragment, flow_label))| {
                    let addr = |x: u8| {
                        if v6 {
                            let hi = 0x2001 + u16::from(x % 2) + u16::from(low % 5 == 0);
                            IpAddr::V6(Ipv6Addr::new(hi, 0xdb8, 0, u16::from(x), 0, 0, 0, u16::from(low % 3)))
                        } else {
                            let first = if x.is_multiple_of(2) { 192 } else { 10 };
                            IpAddr::V4(Ipv4Addr::new(first, x * 40 + low % 9, 2, low % 3))
                        }
                    };
                    FlowPacket {
                        src: addr(b),
                        dst: addr(a),
                        protocol,
                        ports: matches!(protocol, 6 | 17).then_some(ports),
                        icmp: matches!(protocol, 1 | 58).then_some(icmp),
                        tcp_flags: (protocol == 6).then_some(u16::from(flags)),
                        length,
                        dscp,
                        fragment,
                        flow_label: if v6 { flow_label } else { 0 },
                    }
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// The compiled, indexed walk meets the same flows, in the same
        /// order, as the reference that reads every flow with the RFC's
        /// definitions, on random flows and packets of both families.
        #[test]
        fn compiled_flows_match_as_the_rfc_reference(
            flows in proptest::collection::vec(
                (prop_oneof![arb_flow(false), arb_flow(true)], 0u8..3, any::<bool>(), arb_prefix(false), arb_prefix(true)),
                0..24),
            packets in proptest::collection::vec(arb_packet(), 1..40),
            // Every flow given a destination: no flow walked for every
            // packet, so the destination index alone says who is met.
            indexed in any::<bool>(),
        ) {
            let rules = flows
                .into_iter()
                .map(|(mut f, v, go_on, d4, d6)| {
                    if indexed && !matches!(f.components.first(), Some(Component::Destination(_))) {
                        let d = if f.family == Family::V6 { d6 } else { d4 };
                        f.components.insert(0, Component::Destination(PrefixMatch { offset: 0, ..d }));
                    }
                    let v = match v { 0 => FlowVerdict::Drop, _ => FlowVerdict::Accept };
                    rule(f, v, go_on)
                })
                .collect();
            let t = FlowTable::new(rules, Placement::First);
            for w in t.rules().windows(2) {
                if w[0].flow.family == w[1].flow.family {
                    prop_assert_ne!(w[0].flow.precedence(&w[1].flow), std::cmp::Ordering::Greater);
                }
            }
            for p in &packets {
                prop_assert_eq!(t.matched(p), t.reference_walk(p), "{:?}", p);
            }
        }

        /// What a decoded header becomes is what the components read.
        #[test]
        fn flow_packet_reads_the_decoded_header(
            tos in any::<u8>(), df in any::<bool>(), off in 0u16..3, more in any::<bool>(), len in 20u32..2000,
        ) {
            let ip = IpSummary {
                tos,
                dont_fragment: df,
                fragment: (off > 0 || more).then_some(sluice_wire::FragmentInfo { offset: off * 8, more, ident: 1 }),
                l3_offset: 14,
                l3_end: 14 + len,
                ..IpSummary::UNSPECIFIED
            };
            let p = flow_packet(&ip);
            prop_assert_eq!(p.dscp, tos >> 2);
            prop_assert_eq!(p.length, len);
            prop_assert_eq!(p.fragment & FRAG_DF != 0, df);
            prop_assert_eq!(p.fragment & FRAG_IS != 0, off > 0);
            prop_assert_eq!(p.fragment & FRAG_FIRST != 0, off == 0 && more);
            prop_assert_eq!(p.fragment & FRAG_LAST != 0, off > 0 && !more);
        }
    }
}
