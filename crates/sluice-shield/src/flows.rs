//! Routes from BGP peers (`--bgp-*`, the feed in `sluice-bgpfeed`) in the
//! kernel program.
//!
//! The feed hands the control plane one `FlowTable` per burst of UPDATEs,
//! as it does the bridge's; the shield enforces it in two parts:
//! - blackhole routes: one rule, `drop daddr @bgp-blackholes`, over a
//!   dynamic set whose tries take each route added or withdrawn as a
//!   delta ([`crate::mirror`]), with no new program;
//! - FlowSpec flows that discard (traffic-rate 0) and match only what the
//!   rule language has (destination and source prefixes, protocols,
//!   ports, ICMP types): each becomes one rule or a few (a port on TCP or
//!   UDP, either port), compiled into a new program swapped into the
//!   links in one step, as a reload is. Every other flow is refused one
//!   by one, logged, and counted by reason ([`REFUSAL_REASONS`]).
//!
//! All of them sit before the rule file's rules (`--bgp-rules first`) or
//! after them (`last`), as on the bridge. A flow that stops the flows
//! (a rate, an accept) is not in the program, so a later discard that may
//! meet its packets is refused too (`shadowed`): the kernel then drops
//! nothing the bridge would pass. Blackholes are always enforced.

use sluice_bgp::flowspec::{numeric_ranges, Component, Family, Flow, NumericOp};
use sluice_engine::flows::{FlowTable, FlowVerdict, Placement};
use sluice_rules::{Action, AddrField, AddrValue, Depth, Match, PortField, Prefix, Rule};
use std::collections::{BTreeMap, HashSet};

/// The dynamic set the blackhole routes go into: a name no rule file can
/// give a set (it holds a space), so it never meets one of the operator's.
pub const BLACKHOLE_SET: &str = "bgp blackholes";

/// The rule over it, as the summary and the metrics name it.
pub const BLACKHOLE_RULE: &str = "drop daddr @bgp-blackholes (BGP blackhole routes)";

/// Why a flow is not in the kernel program (`sluice_bgp_flows_refused`'s
/// `reason`): `rate` (a traffic-rate above 0: the program has no
/// policer), `accept` (no discard: the program only drops), `offset` (an
/// RFC 8956 prefix offset), a component the rule language lacks
/// (`icmp_code`, `tcp_flags`, `packet_length`, `dscp`, `fragment`,
/// `flow_label`), `matches_nothing` (its ranges admit no packet),
/// `too_many_rules` (its alternatives would take more than
/// [`MAX_RULES_PER_FLOW`] rules, or the flows more than
/// [`MAX_FLOW_RULES`]) and `too_many_ranges` (a port component of more
/// than [`MAX_RANGES`] ranges), and `shadowed`: an earlier flow the
/// program does not run and that stops the flows (a rate, an accept,
/// without the T bit) may match its packets first, and the bridge would
/// not drop them.
pub const REFUSAL_REASONS: [&str; 13] = [
    "rate",
    "accept",
    "offset",
    "icmp_code",
    "tcp_flags",
    "packet_length",
    "dscp",
    "fragment",
    "flow_label",
    "matches_nothing",
    "too_many_rules",
    "too_many_ranges",
    "shadowed",
];

/// The ranges one port component may hold: each is two compares in the
/// program, and the verifier bounds its length (a peer's `!=` chain of
/// thousands of ports would otherwise make every later program fail).
pub const MAX_RANGES: usize = 64;

/// The rules one flow may become (its alternatives: TCP and UDP, source
/// or destination port).
pub const MAX_RULES_PER_FLOW: usize = 4;

/// The most FlowSpec rules the program takes; flows past them are
/// refused as `too_many_rules` (each rule is compares in the program, and
/// the verifier bounds its length).
pub const MAX_FLOW_RULES: usize = 256;

/// What a BGP table becomes in the kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelFlows {
    /// The blackhole routes' prefixes (the dynamic set's elements).
    pub blackholes: HashSet<Prefix>,
    /// The FlowSpec flows' rules, in the table's order.
    pub rules: Vec<Rule>,
    /// Per flow in `rules`: its index in the table, and its rules' indices
    /// in `rules` (to count its packets from theirs).
    pub spans: Vec<(usize, std::ops::Range<usize>)>,
    pub placement: Placement,
    /// FlowSpec flows enforced (each is one rule or more).
    pub enforced: usize,
    /// Flows refused, by reason, and each one's text.
    pub refused: BTreeMap<&'static str, u64>,
    pub refused_texts: HashSet<String>,
}

/// The rules a shield with BGP adds to the file's: the blackhole rule,
/// then the flows', before or after the file's rules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BgpRules {
    pub flows: Vec<Rule>,
    pub placement: Placement,
}

impl KernelFlows {
    /// What the kernel can enforce of `table` (None: no table yet). A
    /// refused flow is logged unless its text is in `known` (the flows
    /// refused before: a table comes again with every UPDATE).
    pub fn of(table: Option<&FlowTable>, placement: Placement, known: &HashSet<String>) -> KernelFlows {
        let mut k = KernelFlows { placement, ..KernelFlows::default() };
        // The flows seen that stop the flows and are not in the program.
        let mut stoppers: Vec<&Flow> = Vec::new();
        for (i, r) in table.iter().flat_map(|t| t.rules()).enumerate() {
            if r.blackhole {
                if let Some(p) = blackhole_prefix(&r.flow) {
                    k.blackholes.insert(p);
                    continue;
                }
            }
            if !matches!(r.verdict, FlowVerdict::Drop) && !r.go_on {
                stoppers.push(&r.flow);
            }
            let refused = match &r.verdict {
                FlowVerdict::Drop if stoppers.iter().any(|s| may_meet(s, &r.flow)) => "shadowed",
                FlowVerdict::Drop => match flow_rules(&r.flow) {
                    Ok(rules) if k.rules.len() + rules.len() <= MAX_FLOW_RULES => {
                        let start = k.rules.len();
                        k.rules.extend(rules);
                        k.spans.push((i, start..k.rules.len()));
                        k.enforced += 1;
                        continue;
                    }
                    Ok(_) => "too_many_rules",
                    Err(why) => why,
                },
                FlowVerdict::Police(_) => "rate",
                FlowVerdict::Accept => "accept",
            };
            *k.refused.entry(refused).or_default() += 1;
            let text = r.flow.to_string();
            if !known.contains(&text) && !k.refused_texts.contains(&text) {
                tracing::warn!(
                    event = "bgp_flow_refused",
                    "BGP flow from {}: {text}: not enforced by the kernel program ({refused})",
                    r.source
                );
            }
            k.refused_texts.insert(text);
        }
        k
    }

    /// The rules the program is built with.
    pub fn program_rules(&self) -> BgpRules {
        BgpRules { flows: self.rules.clone(), placement: self.placement }
    }
}

/// Whether one packet may match both flows: false only when their family,
/// their prefixes (destination, source) or the values of a protocol or
/// port component both have cannot meet.
fn may_meet(a: &Flow, b: &Flow) -> bool {
    if a.family != b.family {
        return false;
    }
    let prefix = |f: &Flow, dst: bool| {
        f.components.iter().find_map(|c| match c {
            Component::Destination(p) if dst && p.offset == 0 => Some(Prefix::new(p.addr, p.len)),
            Component::Source(p) if !dst && p.offset == 0 => Some(Prefix::new(p.addr, p.len)),
            _ => None,
        })
    };
    let prefixes_meet = [true, false].into_iter().all(|dst| match (prefix(a, dst), prefix(b, dst)) {
        (Some(x), Some(y)) => x.contains_prefix(&y) || y.contains_prefix(&x),
        _ => true,
    });
    // Each numeric component both have, by its type: do their values meet?
    let numeric = |f: &Flow, kind: u8| {
        f.components.iter().find_map(|c| match (kind, c) {
            (3, Component::Protocol(o)) => Some(numeric_ranges(o, 255)),
            (5, Component::DestinationPort(o)) | (6, Component::SourcePort(o)) => Some(numeric_ranges(o, 65_535)),
            _ => None,
        })
    };
    let values_meet = [3, 5, 6].into_iter().all(|kind| match (numeric(a, kind), numeric(b, kind)) {
        (Some(x), Some(y)) => x.iter().any(|&(lo, hi)| y.iter().any(|&(l, h)| lo <= h && l <= hi)),
        _ => true,
    });
    prefixes_meet && values_meet
}

/// A blackhole route's prefix (its flow is one destination component).
fn blackhole_prefix(f: &Flow) -> Option<Prefix> {
    match f.components.as_slice() {
        [Component::Destination(p)] if p.offset == 0 => Some(Prefix::new(p.addr, p.len)),
        _ => None,
    }
}

/// The rule over the blackhole set, whose index in the file's sets is `set`.
pub fn blackhole_rule(set: usize) -> Rule {
    Rule {
        line: 0,
        text: BLACKHOLE_RULE.into(),
        action: Action::Drop,
        matches: vec![addr(AddrField::Dst, AddrValue::Set(set))],
        police: None,
    }
}

fn addr(field: AddrField, value: AddrValue) -> Match {
    Match::Addr { depth: Depth::Outer, field, negate: false, value }
}

/// The values in `0..=max` the operators admit.
fn values(ops: &[NumericOp], max: u64) -> Vec<u64> {
    numeric_ranges(ops, max).into_iter().flat_map(|(lo, hi)| lo..=hi).collect()
}

fn port_ranges(ops: &[NumericOp]) -> Vec<(u16, u16)> {
    let clamp = |v: u64| u16::try_from(v).unwrap_or(u16::MAX);
    numeric_ranges(ops, 65_535).into_iter().map(|(lo, hi)| (clamp(lo), clamp(hi))).collect()
}

/// A port component: its field (None: either port) and its ranges.
type PortComponent = (Option<PortField>, Vec<(u16, u16)>);

/// A flow as the rules that drop what it matches (any of them matching is
/// the flow matching), or why the rule language cannot say it.
pub fn flow_rules(flow: &Flow) -> Result<Vec<Rule>, &'static str> {
    let mut common = Vec::new();
    let mut directed = false;
    let mut protos: Option<Vec<u8>> = None;
    // Each port component: Some(field), or None for either port.
    let mut ports: Vec<PortComponent> = Vec::new();
    let mut icmp: Option<Vec<u8>> = None;
    for c in &flow.components {
        match c {
            Component::Destination(p) | Component::Source(p) => {
                if p.offset > 0 {
                    return Err("offset");
                }
                let field = if matches!(c, Component::Destination(_)) { AddrField::Dst } else { AddrField::Src };
                common.push(addr(field, AddrValue::Prefixes(vec![Prefix::new(p.addr, p.len)])));
                directed = true;
            }
            Component::Protocol(ops) => protos = Some(values(ops, 255).into_iter().map(|v| v as u8).collect()),
            Component::Port(ops) => ports.push((None, port_ranges(ops))),
            Component::DestinationPort(ops) => ports.push((Some(PortField::Dst), port_ranges(ops))),
            Component::SourcePort(ops) => ports.push((Some(PortField::Src), port_ranges(ops))),
            Component::IcmpType(ops) => icmp = Some(values(ops, 255).into_iter().map(|v| v as u8).collect()),
            Component::IcmpCode(_) => return Err("icmp_code"),
            Component::TcpFlags(_) => return Err("tcp_flags"),
            Component::PacketLength(_) => return Err("packet_length"),
            Component::Dscp(_) => return Err("dscp"),
            Component::Fragment(_) => return Err("fragment"),
            Component::FlowLabel(_) => return Err("flow_label"),
        }
    }
    if !directed {
        // Without a prefix the family still narrows it: a v4 flow never
        // matches an IPv6 packet.
        let all = match flow.family {
            Family::V4 => Prefix::new(std::net::Ipv4Addr::UNSPECIFIED.into(), 0),
            Family::V6 => Prefix::new(std::net::Ipv6Addr::UNSPECIFIED.into(), 0),
        };
        common.push(addr(AddrField::Dst, AddrValue::Prefixes(vec![all])));
    }
    if ports.iter().any(|(_, r)| r.is_empty()) || protos.as_ref().is_some_and(Vec::is_empty) {
        return Err("matches_nothing");
    }
    if ports.iter().any(|(_, r)| r.len() > MAX_RANGES) {
        return Err("too_many_ranges");
    }
    let alternatives = match icmp {
        Some(types) => icmp_rule(flow.family, types, protos.as_deref(), !ports.is_empty())?,
        None if ports.is_empty() => {
            vec![protos
                .map(|protos| vec![Match::Proto { depth: Depth::Outer, negate: false, protos }])
                .unwrap_or_default()]
        }
        None => port_rules(protos.as_deref(), &ports)?,
    };
    let n = alternatives.len();
    Ok(alternatives
        .into_iter()
        .enumerate()
        .map(|(i, own)| Rule {
            line: 0,
            text: if n == 1 { format!("drop bgp {flow}") } else { format!("drop bgp {flow} ({}/{n})", i + 1) },
            action: Action::Drop,
            matches: common.iter().cloned().chain(own).collect(),
            police: None,
        })
        .collect())
}

/// An ICMP type component: one rule, under the family's ICMP (a protocol
/// or a port beside it that ICMP cannot have matches nothing).
fn icmp_rule(
    family: Family,
    types: Vec<u8>,
    protos: Option<&[u8]>,
    ports: bool,
) -> Result<Vec<Vec<Match>>, &'static str> {
    let v6 = family == Family::V6;
    let proto = if v6 { 58 } else { 1 };
    if types.is_empty() || ports || protos.is_some_and(|p| !p.contains(&proto)) {
        return Err("matches_nothing");
    }
    Ok(vec![vec![Match::IcmpType { depth: Depth::Outer, v6, negate: false, types }]])
}

/// Port components: one rule per protocol that has ports (TCP, UDP,
/// among those the flow admits) and per choice of port for each
/// either-port component.
fn port_rules(protos: Option<&[u8]>, ports: &[PortComponent]) -> Result<Vec<Vec<Match>>, &'static str> {
    let with_ports: Vec<u8> = [6u8, 17].into_iter().filter(|p| protos.is_none_or(|ps| ps.contains(p))).collect();
    if with_ports.is_empty() {
        return Err("matches_nothing");
    }
    let either = ports.iter().filter(|(f, _)| f.is_none()).count();
    if with_ports.len() << either > MAX_RULES_PER_FLOW {
        return Err("too_many_rules");
    }
    let mut out = Vec::new();
    for proto in with_ports {
        for choice in 0..1usize << either {
            let mut k = 0;
            let matches = ports
                .iter()
                .map(|(field, ranges)| {
                    let field = field.unwrap_or_else(|| {
                        k += 1;
                        if choice >> (k - 1) & 1 == 0 {
                            PortField::Src
                        } else {
                            PortField::Dst
                        }
                    });
                    Match::Port { depth: Depth::Outer, proto, field, negate: false, ranges: ranges.clone() }
                })
                .collect();
            out.push(matches);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_bgp::flowspec::PrefixMatch;
    use std::sync::Arc;

    fn eq(v: u64) -> NumericOp {
        NumericOp { and: false, lt: false, gt: false, eq: true, len: 1, value: v }
    }

    fn dst(p: &str) -> Component {
        let p: Prefix = p.parse().unwrap();
        Component::Destination(PrefixMatch::new(p.addr(), p.len()))
    }

    fn v4(components: Vec<Component>) -> Flow {
        Flow { family: Family::V4, components }
    }

    #[test]
    fn a_udp_port_flow_is_one_rule_and_a_port_without_protocol_is_tcp_and_udp() {
        let f = v4(vec![
            dst("203.0.113.0/24"),
            Component::Protocol(vec![eq(17)]),
            Component::DestinationPort(vec![eq(53)]),
        ]);
        let r = flow_rules(&f).unwrap();
        assert_eq!(r.len(), 1);
        assert!(r[0].matches.contains(&Match::Port {
            depth: Depth::Outer,
            proto: 17,
            field: PortField::Dst,
            negate: false,
            ranges: vec![(53, 53)]
        }));
        let f = v4(vec![dst("203.0.113.0/24"), Component::Port(vec![eq(53)])]);
        let r = flow_rules(&f).unwrap();
        // TCP and UDP, each source or destination port.
        assert_eq!(r.len(), 4);
        assert_eq!(r.iter().map(|r| &r.text).collect::<HashSet<_>>().len(), 4, "distinct texts: {r:?}");
    }

    #[test]
    fn what_the_rules_cannot_say_is_refused_by_reason() {
        let refused = |c: Vec<Component>| flow_rules(&v4(c)).unwrap_err();
        assert_eq!(refused(vec![dst("10.0.0.0/8"), Component::TcpFlags(vec![])]), "tcp_flags");
        assert_eq!(
            refused(vec![dst("10.0.0.0/8"), Component::Protocol(vec![eq(1)]), Component::DestinationPort(vec![eq(1)])]),
            "matches_nothing"
        );
        assert_eq!(
            refused(vec![dst("10.0.0.0/8"), Component::IcmpType(vec![eq(8)]), Component::Protocol(vec![eq(6)])]),
            "matches_nothing"
        );
        let ne = |v: u64| NumericOp { and: v > 0, lt: true, gt: true, eq: false, len: 2, value: v * 2 };
        let chain: Vec<NumericOp> = (0..100).map(ne).collect();
        assert_eq!(refused(vec![dst("10.0.0.0/8"), Component::DestinationPort(chain)]), "too_many_ranges");
        let offset = Component::Destination(PrefixMatch { len: 16, offset: 8, addr: "10.0.0.0".parse().unwrap() });
        assert_eq!(refused(vec![offset]), "offset");
    }

    #[test]
    fn a_table_splits_into_blackholes_rules_and_refusals() {
        use sluice_engine::flows::{FlowRule, PoliceKey, Policer, Rate};
        let rule = |flow: Flow, verdict: FlowVerdict, blackhole: bool| FlowRule {
            flow,
            verdict,
            go_on: false,
            blackhole,
            source: "192.0.2.1".into(),
            unsupported: Vec::new(),
            counts: Default::default(),
        };
        let udp53 = v4(vec![
            dst("203.0.113.0/24"),
            Component::Protocol(vec![eq(17)]),
            Component::DestinationPort(vec![eq(53)]),
        ]);
        let police = FlowVerdict::Police(Arc::new(Policer::new(Rate::BytesPerSecond(1000.0), None, PoliceKey::Rule)));
        let table = FlowTable::new(
            vec![
                rule(v4(vec![dst("198.51.100.7/32")]), FlowVerdict::Drop, true),
                rule(udp53.clone(), FlowVerdict::Drop, false),
                rule(v4(vec![dst("192.0.2.0/24"), Component::Dscp(vec![eq(1)])]), FlowVerdict::Drop, false),
                rule(v4(vec![dst("198.51.100.0/25")]), police, false),
                rule(v4(vec![dst("198.51.100.0/26")]), FlowVerdict::Accept, false),
            ],
            Placement::Last,
        );
        let k = KernelFlows::of(Some(&table), Placement::Last, &HashSet::new());
        assert_eq!(k.blackholes, HashSet::from(["198.51.100.7/32".parse().unwrap()]));
        assert_eq!((k.enforced, k.rules.len()), (1, 1));
        assert_eq!(k.rules, flow_rules(&udp53).unwrap());
        assert_eq!(k.refused, BTreeMap::from([("dscp", 1), ("rate", 1), ("accept", 1)]));
        assert_eq!(k.refused_texts.len(), 3);
        // The flow's rules are counted for it: its index in the table.
        assert_eq!(k.spans.len(), 1);
        assert_eq!((table.rules()[k.spans[0].0].flow.clone(), k.spans[0].1.clone()), (udp53.clone(), 0..1));
        // Behind a rate on a /24: a discard of the /16 around it (its
        // packets meet the rate first on the bridge) is refused; one of
        // another port, or of the rest of the family, is not.
        let udp = |p: &str, port: u64| {
            v4(vec![dst(p), Component::Protocol(vec![eq(17)]), Component::DestinationPort(vec![eq(port)])])
        };
        let police = FlowVerdict::Police(Arc::new(Policer::new(Rate::BytesPerSecond(1.0), None, PoliceKey::Rule)));
        let table = FlowTable::new(
            vec![
                rule(udp("198.51.100.0/24", 5000), police, false),
                rule(udp("198.51.0.0/16", 5000), FlowVerdict::Drop, false),
                rule(udp("198.51.0.0/16", 53), FlowVerdict::Drop, false),
                rule(udp("10.0.0.0/8", 5000), FlowVerdict::Drop, false),
            ],
            Placement::First,
        );
        let behind = KernelFlows::of(Some(&table), Placement::First, &HashSet::new());
        assert_eq!(behind.refused, BTreeMap::from([("rate", 1), ("shadowed", 1)]));
        assert_eq!(behind.enforced, 2);
        // Each enforced flow's rules, in order, one after another.
        let mut at = 0;
        for (i, r) in &behind.spans {
            assert!(matches!(table.rules()[*i].verdict, FlowVerdict::Drop) && r.start == at && r.end > at);
            at = r.end;
        }
        assert_eq!((behind.spans.len(), at), (2, behind.rules.len()));
        assert_eq!(k.program_rules(), BgpRules { flows: k.rules.clone(), placement: Placement::Last });
    }

    #[test]
    fn an_undirected_flow_keeps_to_its_family() {
        let r = flow_rules(&v4(vec![Component::Protocol(vec![eq(47)])])).unwrap();
        assert_eq!(r.len(), 1);
        assert!(r[0].matches.contains(&addr(AddrField::Dst, AddrValue::Prefixes(vec!["0.0.0.0/0".parse().unwrap()]))));
    }
}
