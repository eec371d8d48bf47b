//! Rules from routers: FlowSpec routes (RFC 8955 for IPv4, RFC 8956 for
//! IPv6) and blackhole routes, compiled into a [`FlowTable`] the judge
//! reads beside the rule file's rules (before them, or after them for the
//! packets no rule decided), in the same snapshot.
//!
//! Flows are applied in RFC 8955 §5.1's order: the first that matches
//! decides, unless its traffic-action's T bit says to go on. A table of
//! thousands of flows is not walked per packet: each flow is indexed in
//! one place, by its destination prefix, else its source prefix (one hash
//! table per prefix mask, IPv6 offsets included), else the destination
//! ports, ports or protocols it admits when they are few; a packet walks only the
//! lists its addresses, port and protocol select, plus the residual list
//! of flows with none of these (any protocol, no prefix), merged in order.
//! Each component is compiled from the RFC's operator lists into what it
//! admits (sorted ranges of a numeric field, searched when there are
//! many; a bitmap of a bitmask field), and
//! [`FlowTable::reference_walk`] walks every flow with
//! `sluice_bgp::flowspec::Flow::matches`, the RFC's definitions read
//! directly: the property test holds the two equal.

use sluice_bgp::flowspec::{
    bitmask_values, BitmaskOp, Component, Family, Flow, FlowOrder, FlowPacket, NumericOp, PrefixMatch, FRAG_DF,
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
    Test::Ranges(op_ranges(ops, max).into_boxed_slice())
}

/// The values of `0..=max` an operator list admits, as sorted, disjoint,
/// non-adjacent inclusive ranges: what `numeric_ranges` says (the tests
/// hold the two equal), in O(k log k) for k pairs. Each pair admits an
/// interval or all but one value (`!=`), so an AND group is one interval
/// less the sorted excluded values, and the groups' ranges are joined by
/// one sort; intersecting range lists pair by pair instead is O(k^2) on
/// the AND-chain of `!=` that a list of excluded ports is.
fn op_ranges(ops: &[NumericOp], max: u32) -> Vec<(u32, u32)> {
    let max = u64::from(max);
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut holes: Vec<u64> = Vec::new();
    // The open group: its interval (empty when lo > hi) and its holes.
    let mut group: Option<(u64, u64)> = None;
    let close = |g: Option<(u64, u64)>, holes: &mut Vec<u64>, out: &mut Vec<(u64, u64)>| {
        let Some((lo, hi)) = g else { return };
        if lo > hi {
            holes.clear();
            return;
        }
        holes.retain(|&h| lo <= h && h <= hi);
        holes.sort_unstable();
        holes.dedup();
        let mut from = lo;
        for &h in holes.iter() {
            if h > from {
                out.push((from, h - 1));
            }
            from = h + 1;
        }
        if from <= hi {
            out.push((from, hi));
        }
        holes.clear();
    };
    for op in ops {
        let (mut lo, mut hi) = match group {
            Some(g) if op.and => g,
            g => {
                close(g, &mut holes, &mut out);
                (0, max)
            }
        };
        let v = op.value;
        match (op.lt, op.gt, op.eq) {
            (false, false, false) => (lo, hi) = (1, 0),
            (true, true, true) => {}
            (false, false, true) => (lo, hi) = (lo.max(v), hi.min(v)),
            (true, false, false) if v == 0 => (lo, hi) = (1, 0),
            (true, false, false) => hi = hi.min(v - 1),
            (true, false, true) => hi = hi.min(v),
            (false, true, false) if v >= max => (lo, hi) = (1, 0),
            (false, true, false) => lo = lo.max(v + 1),
            (false, true, true) => lo = lo.max(v),
            (true, true, false) => holes.push(v),
        }
        group = Some((lo, hi));
    }
    close(group, &mut holes, &mut out);
    out.sort_unstable();
    let mut merged: Vec<(u32, u32)> = Vec::with_capacity(out.len());
    for (lo, hi) in out {
        // Both within 0..=max, which is a u32.
        let (lo, hi) = (lo as u32, hi as u32);
        match merged.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    merged
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

/// Ranges up to which a component's are scanned; past it, searched.
const SCAN_RANGES: usize = 4;

#[inline]
fn admits(test: &Test, v: u32) -> bool {
    match test {
        Test::Ranges(r) if r.len() <= SCAN_RANGES => r.iter().any(|&(lo, hi)| lo <= v && v <= hi),
        // Sorted and disjoint: the last range starting at or below v.
        Test::Ranges(r) => r.partition_point(|&(lo, _)| lo <= v).checked_sub(1).is_some_and(|i| v <= r[i].1),
        Test::Values(w) => v < 256 && w[(v / 64) as usize] & (1 << (v % 64)) != 0,
        Test::Prefix { .. } => false,
    }
}

/// Most prefix masks (an offset and a length) one family's destination
/// or source index keeps: a packet probes one hash table per mask, and
/// merges up to one list per mask. A flow whose mask is not kept is
/// indexed under a kept mask inside its own (fewer bits: more flows per
/// key, each still tested whole); the shortest from the first bit is
/// always kept, so every prefix from the first bit has one.
const MAX_MASKS: usize = 16;

/// Most values of a port (or a protocol) a flow indexed by it is listed
/// under; a flow admitting more is not indexed by that field.
const MAX_PORT_FANOUT: usize = 64;
const MAX_PROTOCOL_FANOUT: usize = 16;

type FixedState = foldhash::fast::FixedState;

/// A flow index on a list whose flow matches every packet that reaches
/// the list: a flow of one prefix component, listed under its own mask.
/// Its compiled tests are not read (a cache miss spared per packet on a
/// table too large for the cache); lists are ordered by the index without
/// this bit.
const KEYED: u32 = 1 << 31;

/// The flows listed under one key: one inline (one /32 per flow, the
/// common case, costs no second lookup), or more.
#[derive(Clone, Debug)]
enum Listed {
    One([u32; 1]),
    Many(Box<[u32]>),
}

impl Listed {
    fn new(flows: Vec<u32>) -> Listed {
        match flows[..] {
            [one] => Listed::One([one]),
            _ => Listed::Many(flows.into_boxed_slice()),
        }
    }

    #[inline]
    fn as_slice(&self) -> &[u32] {
        match self {
            Listed::One(one) => one,
            Listed::Many(many) => many,
        }
    }
}

/// Flows by an address's bits under one mask.
type ByKey = HashMap<u128, Listed, FixedState>;

/// A gate's size, in bits of an address's top: the least from 16 (8 KiB)
/// to 22 (512 KiB) with at least 16 bits per key, so that few are set.
/// 100,000 /32s set 78% of 2^16 bits (most packets from elsewhere would
/// be probed for nothing), 5% of 2^21.
const GATE_BITS: std::ops::RangeInclusive<u32> = 16..=22;

/// One family's flows by one address (the destination or the source).
#[derive(Clone, Debug, Default)]
struct PrefixIndex {
    /// (mask, flows by masked address) for prefixes from the first bit,
    /// most bits first; behind the gate.
    from_top: Vec<(u128, ByKey)>,
    /// The same for IPv6 prefixes with an offset: probed for every packet
    /// of the family (the gate reads the top bits, which they leave open).
    offset: Vec<(u128, ByKey)>,
    /// A bit per value of an address's top bits that some `from_top` key
    /// covers (empty: none): most packets meet no flow, and learn it here
    /// from one bit instead of a hash probe per mask.
    gate: Box<[u64]>,
    /// 128 less the gate's bits: an address's top bits are `a >> shift`.
    shift: u32,
}

impl PrefixIndex {
    #[inline]
    fn gate_open(&self, a: u128) -> bool {
        let top = (a >> self.shift) as usize;
        self.gate.get(top / 64).is_some_and(|w| w & (1 << (top % 64)) != 0)
    }

    /// The lists of flows `a` may match, one per mask with its key:
    /// the masks from the first bit (behind the gate), or those with an
    /// offset.
    #[inline]
    fn lists<'a>(&'a self, a: u128, offset: bool, out: &mut Lists<'a>) {
        let masks = if offset {
            &self.offset
        } else if self.gate_open(a) {
            &self.from_top
        } else {
            return;
        };
        for (mask, map) in masks {
            if let Some(l) = map.get(&(a & mask)) {
                out.push(l.as_slice());
            }
        }
    }

    /// Indexes the flows `prefix` gives a usable prefix (offset below a
    /// length past 0; `/0` admits every address, and says nothing), and
    /// returns the others.
    fn build(
        rules: &[FlowRule],
        flows: Vec<u32>,
        prefix: impl Fn(&Flow) -> Option<&PrefixMatch>,
    ) -> (PrefixIndex, Vec<u32>) {
        let usable = |i: u32| prefix(&rules[i as usize].flow).filter(|p| p.len > 0 && p.offset < p.len);
        // The masks kept: the most used (ties: more bits first).
        let mut uses: HashMap<(u8, u8), usize> = HashMap::new();
        for &i in &flows {
            if let Some(p) = usable(i) {
                *uses.entry((p.offset, p.len)).or_default() += 1;
            }
        }
        let mut kept: Vec<((u8, u8), usize)> = uses.into_iter().collect();
        let shortest = kept.iter().filter(|((o, _), _)| *o == 0).map(|((_, l), _)| *l).min();
        kept.sort_unstable_by_key(|&((o, l), n)| {
            (o != 0 || Some(l) != shortest, std::cmp::Reverse(n), std::cmp::Reverse(l - o), o)
        });
        kept.truncate(MAX_MASKS);
        let kept: Vec<(u8, u8)> = kept.into_iter().map(|(m, _)| m).collect();
        let mut by_mask: HashMap<(u8, u8), HashMap<u128, Vec<u32>>> = HashMap::new();
        let mut rest = Vec::new();
        for i in flows {
            // The kept mask with the most bits inside the flow's own.
            let under = usable(i).and_then(|p| {
                let inside = kept.iter().filter(|&&(o, l)| p.offset <= o && l <= p.len);
                inside.max_by_key(|&&(o, l)| (l - o, std::cmp::Reverse(o))).map(|&m| (p, m))
            });
            match under {
                Some((p, (o, l))) => {
                    let key = p.pattern().0 & span(o, l);
                    let whole = (o, l) == (p.offset, p.len) && rules[i as usize].flow.components.len() == 1;
                    let id = if whole { i | KEYED } else { i };
                    by_mask.entry((o, l)).or_default().entry(key).or_default().push(id);
                }
                None => rest.push(i),
            }
        }
        let mut masks: Vec<(u8, u8)> = by_mask.keys().copied().collect();
        masks.sort_unstable_by_key(|&(o, l)| (o, std::cmp::Reverse(l)));
        let mut index = PrefixIndex::default();
        let keys_from_top: usize = by_mask.iter().filter(|((o, _), _)| *o == 0).map(|(_, m)| m.len()).sum();
        let bits = GATE_BITS.clone().find(|&b| keys_from_top << 4 <= 1 << b).unwrap_or(*GATE_BITS.end());
        index.shift = 128 - bits;
        let mut gate = Vec::new();
        for (o, l) in masks {
            let flows = by_mask.remove(&(o, l)).unwrap_or_default();
            if o == 0 {
                gate.resize(1 << (bits - 6), 0u64);
                for &k in flows.keys() {
                    // The top-bit values the prefix covers: a run of bits.
                    let first = (k >> index.shift) as usize;
                    set_bits(&mut gate, first, 1usize << (bits - u32::from(l).min(bits)));
                }
            }
            let mut m = HashMap::with_capacity_and_hasher(flows.len(), FixedState::default());
            m.extend(flows.into_iter().map(|(k, v)| (k, Listed::new(v))));
            let list = if o == 0 { &mut index.from_top } else { &mut index.offset };
            list.push((span(o, l), m));
        }
        index.gate = gate.into_boxed_slice();
        (index, rest)
    }
}

/// Sets `count` bits from bit `first`, a word at a time where it can.
fn set_bits(words: &mut [u64], first: usize, count: usize) {
    let mut at = first;
    let end = first + count;
    while at < end {
        if at.is_multiple_of(64) && end - at >= 64 {
            words[at / 64] = u64::MAX;
            at += 64;
        } else {
            words[at / 64] |= 1 << (at % 64);
            at += 1;
        }
    }
}

/// The bits from `from` to `to` of an address (most significant first),
/// as `PrefixMatch::pattern` masks them.
fn span(from: u8, to: u8) -> u128 {
    let upto = |n: u8| u128::MAX.checked_shr(u32::from(n)).unwrap_or(0);
    upto(from) & !upto(to)
}

/// What an [`Index`] holds, for a packet's first test: one load says
/// which of the rest to read.
const RESIDUAL_OR_OFFSET: u8 = 1;
const DST_FROM_TOP: u8 = 2;
const SRC_FROM_TOP: u8 = 4;
const BY_PROTOCOL: u8 = 8;
const BY_DST_PORT: u8 = 16;
const BY_ANY_PORT: u8 = 32;

/// Flows by a port they admit, with a bit per port some flow admits.
#[derive(Clone, Debug, Default)]
struct PortIndex {
    lists: HashMap<u16, Box<[u32]>, FixedState>,
    gate: Box<[u64]>,
}

impl PortIndex {
    fn new(by: HashMap<u16, Vec<u32>>) -> PortIndex {
        let mut gate = vec![0u64; if by.is_empty() { 0 } else { 1 << 10 }];
        for &p in by.keys() {
            gate[usize::from(p) / 64] |= 1 << (p % 64);
        }
        let mut lists = HashMap::with_capacity_and_hasher(by.len(), FixedState::default());
        lists.extend(by.into_iter().map(|(k, v)| (k, v.into_boxed_slice())));
        PortIndex { lists, gate: gate.into_boxed_slice() }
    }

    #[inline]
    fn holds(&self, p: u16) -> bool {
        let p = usize::from(p);
        self.gate.get(p / 64).is_some_and(|w| w & (1 << (p % 64)) != 0)
    }

    #[inline]
    fn list(&self, p: u16) -> &[u32] {
        self.lists.get(&p).map_or(&[], |l| l)
    }
}

/// One family's flows: each in one place, by its destination, else its
/// source, else its destination port, else its port (either), else its
/// protocol (named, or implied by an ICMP type or code or TCP flags), else on
/// the residual list every packet of the family walks.
#[derive(Clone, Debug, Default)]
struct Index {
    dst: PrefixIndex,
    src: PrefixIndex,
    /// Flows by a destination port they admit.
    by_dst_port: PortIndex,
    /// Flows by a port (either) they admit: a packet looks up both its
    /// ports, and meets a flow under both once.
    by_any_port: PortIndex,
    /// Flows by a protocol they admit (empty, or one list per protocol).
    by_protocol: Box<[Box<[u32]>]>,
    /// Flows indexed by nothing, in order.
    residual: Box<[u32]>,
    /// Which of the above hold flows: `RESIDUAL_OR_OFFSET` and the others.
    holds: u8,
}

impl Index {
    /// Whether a packet of these addresses, protocol and destination port
    /// may meet a flow (false: it meets none).
    #[inline]
    fn may_match(&self, src: IpAddr, dst: IpAddr, protocol: u8, ports: Option<(u16, u16)>) -> bool {
        let h = self.holds;
        h & RESIDUAL_OR_OFFSET != 0
            || (h & DST_FROM_TOP != 0 && self.dst.gate_open(PrefixMatch::bits_of(dst)))
            || (h & SRC_FROM_TOP != 0 && self.src.gate_open(PrefixMatch::bits_of(src)))
            || (h & BY_PROTOCOL != 0 && !self.by_protocol[usize::from(protocol)].is_empty())
            || (h & BY_DST_PORT != 0 && ports.is_some_and(|(_, d)| self.by_dst_port.holds(d)))
            || (h & BY_ANY_PORT != 0
                && ports.is_some_and(|(s, d)| self.by_any_port.holds(s) || self.by_any_port.holds(d)))
    }

    fn build(rules: &[FlowRule], v6: bool) -> Index {
        let flows: Vec<u32> =
            (0..rules.len() as u32).filter(|&i| (rules[i as usize].flow.family == Family::V6) == v6).collect();
        let (dst, flows) = PrefixIndex::build(rules, flows, |f| {
            f.components.iter().find_map(|c| if let Component::Destination(p) = c { Some(p) } else { None })
        });
        let (src, flows) = PrefixIndex::build(rules, flows, |f| {
            f.components.iter().find_map(|c| if let Component::Source(p) = c { Some(p) } else { None })
        });
        // The values a component (by its type) admits, when they are few.
        let few = |i: u32, kind: u8, most: usize| -> Option<Vec<(u32, u32)>> {
            let (ops, max) = rules[i as usize].flow.components.iter().find_map(|c| match c {
                Component::Protocol(ops) if kind == c.kind() => Some((ops, 0xff)),
                Component::Port(ops) | Component::DestinationPort(ops) if kind == c.kind() => Some((ops, 0xffff)),
                _ => None,
            })?;
            let r = op_ranges(ops, max);
            let n: u64 = r.iter().map(|&(lo, hi)| u64::from(hi - lo) + 1).sum();
            (n as usize <= most).then_some(r)
        };
        let list_under = |by: &mut HashMap<u16, Vec<u32>>, r: Vec<(u32, u32)>, i: u32| {
            for (lo, hi) in r {
                for p in lo..=hi {
                    by.entry(p as u16).or_default().push(i);
                }
            }
        };
        let (mut by_dst_port, mut by_any_port) = (HashMap::new(), HashMap::new());
        let mut by_protocol: Vec<Vec<u32>> = Vec::new();
        let mut residual = Vec::new();
        for i in flows {
            if let Some(r) = few(i, 5, MAX_PORT_FANOUT) {
                list_under(&mut by_dst_port, r, i);
            } else if let Some(r) = few(i, 4, MAX_PORT_FANOUT) {
                list_under(&mut by_any_port, r, i);
            } else if let Some(r) = few(i, 3, MAX_PROTOCOL_FANOUT)
                .or_else(|| implied_protocol(&rules[i as usize].flow).map(|p| vec![(p, p)]))
            {
                by_protocol.resize(256, Vec::new());
                for (lo, hi) in r {
                    for p in lo..=hi {
                        by_protocol[p as usize].push(i);
                    }
                }
            } else {
                residual.push(i);
            }
        }
        let (by_dst_port, by_any_port) = (PortIndex::new(by_dst_port), PortIndex::new(by_any_port));
        let holds = [
            (!residual.is_empty() || !dst.offset.is_empty() || !src.offset.is_empty(), RESIDUAL_OR_OFFSET),
            (!dst.from_top.is_empty(), DST_FROM_TOP),
            (!src.from_top.is_empty(), SRC_FROM_TOP),
            (!by_protocol.is_empty(), BY_PROTOCOL),
            (!by_dst_port.lists.is_empty(), BY_DST_PORT),
            (!by_any_port.lists.is_empty(), BY_ANY_PORT),
        ]
        .into_iter()
        .fold(0, |h, (yes, bit)| if yes { h | bit } else { h });
        Index {
            dst,
            src,
            by_dst_port,
            by_any_port,
            by_protocol: by_protocol.into_iter().map(Vec::into_boxed_slice).collect(),
            residual: residual.into_boxed_slice(),
            holds,
        }
    }
}

/// The one protocol a flow's packets must have though it names none: an
/// ICMP type or code is only read of ICMP (ICMPv6 in an IPv6 flow), TCP
/// flags only of TCP, and a packet without the field never matches
/// ([`Flow::matches`]). Such a flow is listed under that protocol, not
/// walked by every packet.
fn implied_protocol(f: &Flow) -> Option<u32> {
    let icmp = if f.family == Family::V6 { 58 } else { 1 };
    f.components.iter().find_map(|c| match c {
        Component::IcmpType(_) | Component::IcmpCode(_) => Some(icmp),
        Component::TcpFlags(_) => Some(6),
        _ => None,
    })
}

/// Lists one packet merges: one per mask of either address, the
/// destination port's, two of either port, the protocol's and the
/// residual one.
const MAX_LISTS: usize = 2 * MAX_MASKS + 5;

/// The lists of flows one packet may meet, each in order.
struct Lists<'a> {
    lists: [&'a [u32]; MAX_LISTS],
    n: usize,
}

impl<'a> Lists<'a> {
    #[inline]
    fn push(&mut self, l: &'a [u32]) {
        if !l.is_empty() {
            self.lists[self.n] = l;
            self.n += 1;
        }
    }
}

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
    pub fn new(rules: Vec<FlowRule>, placement: Placement) -> FlowTable {
        FlowTable::with_orders(rules.into_iter().map(|r| (FlowOrder::of(&r.flow), r)).collect(), placement)
    }

    /// [`FlowTable::new`] for flows whose orders were made when they came
    /// (a BGP RIB's routes): none is encoded again, and a list handed over
    /// in order is one run for the (stable) sort.
    pub fn with_orders(mut rules: Vec<(FlowOrder, FlowRule)>, placement: Placement) -> FlowTable {
        rules.sort_by(|a, b| a.0.cmp(&b.0));
        let rules: Vec<FlowRule> = rules.into_iter().map(|(_, r)| r).collect();
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
        let mut lists = Lists { lists: [&[]; MAX_LISTS], n: 0 };
        let h = index.holds;
        if h & RESIDUAL_OR_OFFSET != 0 {
            lists.push(&index.residual);
            index.dst.lists(f.dst, true, &mut lists);
            index.src.lists(f.src, true, &mut lists);
        }
        if h & DST_FROM_TOP != 0 {
            index.dst.lists(f.dst, false, &mut lists);
        }
        if h & SRC_FROM_TOP != 0 {
            index.src.lists(f.src, false, &mut lists);
        }
        if h & BY_PROTOCOL != 0 {
            lists.push(&index.by_protocol[f.protocol as usize]);
        }
        if let Some((s, d)) = f.ports {
            if h & BY_DST_PORT != 0 {
                lists.push(index.by_dst_port.list(d as u16));
            }
            if h & BY_ANY_PORT != 0 {
                lists.push(index.by_any_port.list(d as u16));
                if s != d {
                    lists.push(index.by_any_port.list(s as u16));
                }
            }
        }
        let lists = &mut lists.lists[..lists.n];
        // A flow under both of a packet's ports heads two lists at once.
        let mut last = None;
        loop {
            // The next flow in order: the least head of the lists.
            let mut best: Option<usize> = None;
            for (j, l) in lists.iter().enumerate() {
                if let Some(&head) = l.first() {
                    if best.is_none_or(|b| head & !KEYED < lists[b][0] & !KEYED) {
                        best = Some(j);
                    }
                }
            }
            let Some(j) = best else { return };
            let id = lists[j][0];
            lists[j] = &lists[j][1..];
            let i = (id & !KEYED) as usize;
            if last == Some(i) {
                continue;
            }
            last = Some(i);
            if (id & KEYED != 0 || self.compiled[i].matches(f)) && !visit(i) {
                return;
            }
        }
    }

    /// Flows of either family on the residual lists, which every packet of
    /// the family walks (no destination, source, destination port, port or
    /// protocol to index them by): the rest are met only by packets that
    /// can match them.
    pub fn unindexed(&self) -> usize {
        self.v4.residual.len() + self.v6.residual.len()
    }

    /// Judge one packet (its outer header, frame of `wire_len` bytes) at
    /// `now_ns` ([`mono_ns`]; only policers read it), counting it against
    /// the flows it meets.
    #[inline]
    pub fn judge(&self, ip: &IpSummary, wire_len: u32, now_ns: u64) -> FlowDecision {
        let index = if ip.is_ipv6() { &self.v6 } else { &self.v4 };
        if !index.may_match(ip.src, ip.dst, ip.protocol, ip.ports) {
            return FlowDecision::Pass;
        }
        self.judge_walk(ip, wire_len, now_ns)
    }

    /// The rest of [`FlowTable::judge`] for a packet that may meet a flow:
    /// apart, so that the test most packets stop at stays small inline.
    #[inline(never)]
    fn judge_walk(&self, ip: &IpSummary, wire_len: u32, now_ns: u64) -> FlowDecision {
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
        if !index.may_match(p.src, p.dst, p.protocol, p.ports) {
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
/// (a bounded table; such a pair is held to one rate between them). The
/// shield's kernel program has as many, chosen by the same hash.
pub const PER_ADDRESS_BUCKETS: usize = 4096;

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

    /// What a packet of `len` bytes costs: how far it pushes its bucket's
    /// time on, in ns.
    pub fn cost_ns(&self, len: u32) -> u64 {
        let units = match self.rate {
            Rate::BytesPerSecond(_) => f64::from(len),
            Rate::PacketsPerSecond(_) => 1.0,
        };
        (units * self.ns_per_unit).min(u64::MAX as f64 / 4.0) as u64
    }

    /// Nanoseconds per unit (byte or packet) of the rate.
    pub fn ns_per_unit(&self) -> f64 {
        self.ns_per_unit
    }

    /// How far ahead of now a bucket's time may be for a packet to
    /// conform: the burst's worth of ns.
    pub fn tolerance_ns(&self) -> u64 {
        self.tolerance_ns
    }

    /// Which of the [`PER_ADDRESS_BUCKETS`] a per-address policer charges
    /// for `key` (the address's bits, as `PrefixMatch::bits_of`).
    pub fn bucket_of(key: &u128) -> usize {
        (xxhash_rust::xxh3::xxh3_64(&key.to_le_bytes()) as usize) % PER_ADDRESS_BUCKETS
    }

    /// Whether a packet of `len` bytes keyed `key` is within the rate at
    /// `now_ns`; if so it is charged.
    pub fn admit(&self, key: &u128, len: u32, now_ns: u64) -> bool {
        let cost = self.cost_ns(len);
        let slot = if self.buckets.len() == 1 { 0 } else { Self::bucket_of(key) };
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
    use sluice_bgp::flowspec::{numeric_ranges, BitmaskOp, NumericOp};
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
        // Mostly a few pairs; sometimes many, so that a component has many
        // ranges (searched, not scanned) or long AND groups.
        let n = prop_oneof![4 => 1usize..4, 1 => 4usize..40];
        n.prop_flat_map(move |n| {
            proptest::collection::vec(
                (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>(), prop_oneof![0..=max.min(70), 0..=max]),
                n,
            )
        })
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
                        // As the decoder reads them: ICMP of IPv4, ICMPv6 of IPv6.
                        icmp: ((protocol == 1 && !v6) || (protocol == 58 && v6)).then_some(icmp),
                        tcp_flags: (protocol == 6).then_some(u16::from(flags)),
                        length,
                        dscp,
                        fragment,
                        flow_label: if v6 { flow_label } else { 0 },
                    }
                },
            )
    }

    /// Flows of each kind the index takes, and the ones it cannot.
    fn kinds_table(with_unindexable: bool) -> FlowTable {
        let v4 = |a: [u8; 4], len| PrefixMatch::new(IpAddr::V4(Ipv4Addr::from(a)), len);
        let mut flows = vec![
            Flow { family: Family::V4, components: vec![Component::Destination(v4([192, 0, 2, 0], 24))] },
            Flow { family: Family::V4, components: vec![Component::Source(v4([198, 51, 100, 0], 24))] },
            // A /0 destination says nothing: indexed by its source.
            Flow {
                family: Family::V4,
                components: vec![Component::Destination(v4([0, 0, 0, 0], 0)), Component::Source(v4([10, 0, 0, 1], 32))],
            },
            Flow {
                family: Family::V4,
                components: vec![Component::Protocol(vec![num(false, false, false, true, 47)])],
            },
            // Either port 7000 or 7001: listed under both, met once.
            Flow {
                family: Family::V4,
                components: vec![Component::Port(vec![
                    num(false, false, true, true, 7000),
                    num(true, true, false, true, 7001),
                ])],
            },
            Flow {
                family: Family::V4,
                components: vec![
                    Component::Protocol(vec![num(false, false, false, true, 17)]),
                    Component::DestinationPort(vec![num(false, false, false, true, 53)]),
                ],
            },
            // ICMP type 8 alone, TCP flags alone: under ICMP and TCP.
            Flow { family: Family::V4, components: vec![Component::IcmpType(vec![num(false, false, false, true, 8)])] },
            Flow {
                family: Family::V4,
                components: vec![Component::TcpFlags(vec![BitmaskOp {
                    and: false,
                    not: false,
                    matched: true,
                    len: 1,
                    value: 0x02,
                }])],
            },
        ];
        if with_unindexable {
            // Any protocol but TCP, no address: every IPv4 packet's.
            flows.push(Flow {
                family: Family::V4,
                components: vec![Component::Protocol(vec![num(false, true, true, false, 6)])],
            });
        }
        FlowTable::new(flows.into_iter().map(|f| rule(f, FlowVerdict::Drop, false)).collect(), Placement::First)
    }

    #[test]
    fn flows_are_indexed_by_destination_source_port_or_protocol() {
        let t = kinds_table(false);
        assert_eq!(t.unindexed(), 0, "no flow on the residual list");
        let udp = |src: [u8; 4], dst: [u8; 4], port| IpSummary {
            src: IpAddr::V4(Ipv4Addr::from(src)),
            ..udp_to(dst, port, 100)
        };
        let dropped_by = |ip: &IpSummary| match t.judge(ip, 114, 0) {
            FlowDecision::Drop(i) => Some(t.rules()[i as usize].flow.to_string()),
            FlowDecision::Pass => None,
        };
        assert_eq!(dropped_by(&udp([1, 1, 1, 1], [192, 0, 2, 7], 9)).as_deref(), Some("destination 192.0.2.0/24"));
        assert_eq!(dropped_by(&udp([198, 51, 100, 3], [8, 8, 8, 8], 9)).as_deref(), Some("source 198.51.100.0/24"));
        assert_eq!(
            dropped_by(&udp([10, 0, 0, 1], [8, 8, 8, 8], 9)).as_deref(),
            Some("destination 0.0.0.0/0 source 10.0.0.1/32")
        );
        assert_eq!(
            dropped_by(&udp([1, 1, 1, 1], [8, 8, 8, 8], 53)).as_deref(),
            Some("protocol ==17 destination-port ==53")
        );
        let port = |s, d| IpSummary { ports: Some((s, d)), ..udp([1, 1, 1, 1], [8, 8, 8, 8], 0) };
        for (s, d) in [(7000, 9), (9, 7001), (7000, 7001), (7001, 7001)] {
            assert_eq!(dropped_by(&port(s, d)).as_deref(), Some("port >=7000&<=7001"), "{s} {d}");
            let p = flow_packet(&port(s, d));
            assert_eq!(t.matched(&p), t.reference_walk(&p), "{s} {d}: met once");
        }
        assert_eq!(dropped_by(&port(6999, 7002)), None);
        let gre = IpSummary { protocol: 47, ports: None, ..udp([1, 1, 1, 1], [8, 8, 8, 8], 0) };
        assert_eq!(dropped_by(&gre).as_deref(), Some("protocol ==47"));
        assert_eq!(dropped_by(&udp([1, 1, 1, 1], [8, 8, 8, 8], 54)), None);
        let ping = IpSummary { protocol: 1, ports: None, icmp: Some((8, 0)), ..udp([1, 1, 1, 1], [8, 8, 8, 8], 0) };
        assert!(dropped_by(&ping).is_some_and(|f| f.contains("icmp-type")), "{:?}", dropped_by(&ping));
        let pong = IpSummary { icmp: Some((0, 0)), ..ping };
        assert_eq!(dropped_by(&pong), None);
        let syn = IpSummary { protocol: 6, tcp_flags: Some(0x02), ..udp([1, 1, 1, 1], [8, 8, 8, 8], 54) };
        assert!(dropped_by(&syn).is_some_and(|f| f.contains("tcp-flags")), "{:?}", dropped_by(&syn));
        assert_eq!(kinds_table(true).unindexed(), 1);
    }

    /// The botnet mitigation at scale: 100,000 `source X/32 discard`
    /// flows, every listed source dropped by its own flow, no other
    /// source dropped, and no flow walked for every packet.
    #[test]
    fn a_hundred_thousand_source_flows_are_enforced_exactly() {
        let addr = |i: u32| Ipv4Addr::from(0x0a00_0000 | i.wrapping_mul(2_654_435_761) >> 8);
        let listed: Vec<Ipv4Addr> = (0..100_000).map(addr).collect();
        let source = |a: Ipv4Addr, len| {
            let c = Component::Source(PrefixMatch::new(IpAddr::V4(a), len));
            rule(Flow { family: Family::V4, components: vec![c] }, FlowVerdict::Drop, false)
        };
        let mut flows: Vec<FlowRule> = listed.iter().map(|&a| source(a, 32)).collect();
        // A /12 beside them: the gate, grown past 16 bits, covers it whole.
        flows.push(source(Ipv4Addr::new(172, 16, 0, 0), 12));
        let t = FlowTable::new(flows, Placement::First);
        assert_eq!(t.rules().len(), 100_001, "the addresses are distinct");
        assert_eq!(t.unindexed(), 0);
        let from = |a: Ipv4Addr| IpSummary { src: IpAddr::V4(a), ..udp_to([192, 0, 2, 1], 53, 100) };
        for (a, dropped) in [([172, 16, 0, 0], true), ([172, 31, 255, 255], true), ([172, 32, 0, 0], false)] {
            assert_eq!(t.judge(&from(Ipv4Addr::from(a)), 114, 0) != FlowDecision::Pass, dropped, "{a:?}");
        }
        for &a in &listed {
            let FlowDecision::Drop(i) = t.judge(&from(a), 114, 0) else { panic!("{a} passed") };
            let Component::Source(p) = &t.rules()[i as usize].flow.components[0] else { unreachable!() };
            assert_eq!(p.addr, IpAddr::V4(a));
        }
        let set: std::collections::HashSet<Ipv4Addr> = listed.iter().copied().collect();
        let mut others = 0;
        for i in 0..200_000u32 {
            let a = Ipv4Addr::from(0x0a00_0000 | i.wrapping_mul(40_503) & 0x00ff_ffff);
            if !set.contains(&a) {
                others += 1;
                assert_eq!(t.judge(&from(a), 114, 0), FlowDecision::Pass, "{a}");
            }
        }
        assert!(others > 100_000, "{others}");
        let once = |r: &FlowRule| r.counts.dropped.load(Ordering::Relaxed) == 1;
        assert!(t.rules().iter().filter(|r| r.flow.to_string() != "source 172.16.0.0/12").all(once));
    }

    /// Operator lists compile to what `numeric_ranges` says, long
    /// AND-chains of `!=` (a list of excluded ports) among them.
    #[test]
    fn a_long_and_chain_of_not_equal_compiles_to_its_ranges() {
        let ops: Vec<NumericOp> = (0..5_000u64).map(|i| num(i > 0, true, true, false, i * 13 % 65_536)).collect();
        let r = op_ranges(&ops, 0xffff);
        let want: Vec<(u32, u32)> =
            numeric_ranges(&ops, 0xffff).into_iter().map(|(a, b)| (a as u32, b as u32)).collect();
        assert_eq!(r, want);
        assert_eq!(r.len(), 5_000, "0 is one of the holes");
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

        /// The same on larger tables of every kind of flow: source-only,
        /// destination, protocol or port alone, `/0`, IPv6 with offsets,
        /// more masks than are kept, many ranges; the first flow matched
        /// (and those its T bit reaches) are the reference's.
        #[test]
        fn every_kind_of_flow_is_met_as_the_reference_meets_it(
            flows in proptest::collection::vec(
                (prop_oneof![arb_flow(false), arb_flow(true)], 0u8..3, any::<bool>(), 0u8..5, arb_prefix(false), arb_prefix(true)),
                0..120),
            packets in proptest::collection::vec(arb_packet(), 1..60),
        ) {
            let rules = flows
                .into_iter()
                .map(|(mut f, v, go_on, shape, s4, s6)| {
                    let s = if f.family == Family::V6 { s6 } else { s4 };
                    match shape {
                        // Source-only.
                        0 => f.components.retain(|c| c.kind() > 2),
                        1 => {
                            f.components.retain(|c| c.kind() > 2);
                            f.components.insert(0, Component::Source(s));
                        }
                        // No prefix at all: protocol, ports, the rest.
                        2 => f.components.retain(|c| c.kind() > 2),
                        _ => {}
                    }
                    let v = match v { 0 => FlowVerdict::Drop, _ => FlowVerdict::Accept };
                    rule(f, v, go_on)
                })
                .collect();
            let t = FlowTable::new(rules, Placement::First);
            for p in &packets {
                prop_assert_eq!(t.matched(p), t.reference_walk(p), "{:?}", p);
            }
        }

        /// Operator lists compile to the ranges `numeric_ranges` says.
        #[test]
        fn operator_lists_compile_to_their_ranges(ops in arb_numeric(300), max in prop_oneof![Just(255u32), Just(65_535), 0u32..400]) {
            let want: Vec<(u32, u32)> =
                numeric_ranges(&ops, u64::from(max)).into_iter().map(|(a, b)| (a as u32, b as u32)).collect();
            prop_assert_eq!(op_ranges(&ops, max), want);
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
