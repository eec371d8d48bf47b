//! Routes from BGP peers (`--bgp-*`, the feed in `sluice-bgpfeed`) in the
//! kernel program.
//!
//! The feed hands the control plane one `FlowTable` per burst of UPDATEs,
//! as it does the bridge's; the shield enforces it in two parts:
//! - blackhole routes: one rule, `drop daddr @bgp-blackholes`, over a
//!   dynamic set whose tries take each route added or withdrawn as a
//!   delta ([`crate::mirror`]), with no new program;
//! - FlowSpec flows that match only what the rule language has
//!   (destination and source prefixes, protocols, ports, ICMP types):
//!   each becomes one rule or a few (a port on TCP or UDP, either port),
//!   compiled into a new program swapped into the links in one step, as
//!   a reload is. A discard (traffic-rate 0) is a `drop` rule; a rate is
//!   a `police` rule of the engine's numbers (one bucket per flow, so a
//!   rate is enforced only on a flow of one rule); an accept counts. A
//!   rate's conforming packet and an accepted one stop the flows (unless
//!   the flow has the T bit) as on the bridge: the program goes on past
//!   the flows' rules ([`BgpRules::stops`]). Every other flow is refused
//!   one by one, logged, and counted by reason ([`REFUSAL_REASONS`]).
//!
//! All of them sit before the rule file's rules (`--bgp-rules first`) or
//! after them (`last`), as on the bridge. A refused flow that would stop
//! the flows may meet packets of a later one, so that later flow is
//! refused too (`shadowed`): the kernel then drops nothing the bridge
//! would pass. Blackholes are always enforced.

use sluice_bgp::flowspec::{numeric_ranges, Component, Family, Flow, NumericOp};
use sluice_engine::flows::{FlowRule, FlowTable, FlowVerdict, Placement, PoliceKey, Policer, Rate};
use sluice_rules::{Action, AddrField, AddrValue, Depth, Match, PortField, Prefix, Rule};
use std::collections::{BTreeMap, HashSet};

/// The dynamic set the blackhole routes go into: a name no rule file can
/// give a set (it holds a space), so it never meets one of the operator's.
pub const BLACKHOLE_SET: &str = "bgp blackholes";

/// The rule over it, as the summary and the metrics name it.
pub const BLACKHOLE_RULE: &str = "drop daddr @bgp-blackholes (BGP blackhole routes)";

/// Why a flow is not in the kernel program (`sluice_bgp_flows_refused`'s
/// `reason`): `rate` (a traffic-rate that is not a whole number of bytes
/// or packets a second, which the kernel's policer counts in), `rate_split`
/// (a rate over a flow of several rules: they would each have a bucket,
/// where the bridge has one for the flow), `offset` (an
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
    "rate_split",
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
    /// Per rule: whether a packet it matches and does not drop stops the
    /// flows (a rate's conforming packet, an accept's, without the T bit).
    pub stops: Vec<bool>,
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
    /// Per rule of `flows`: a packet it matches and does not drop goes on
    /// past the flows' rules (see [`KernelFlows::stops`]).
    pub stops: Vec<bool>,
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
            let stops = !matches!(r.verdict, FlowVerdict::Drop) && !r.go_on;
            let taken = if stoppers.iter().any(|s| may_meet(s, &r.flow)) {
                Err("shadowed")
            } else {
                program_rules(r).and_then(|rules| {
                    if k.rules.len() + rules.len() > MAX_FLOW_RULES {
                        Err("too_many_rules")
                    } else {
                        Ok(rules)
                    }
                })
            };
            let refused = match taken {
                Ok(rules) => {
                    let start = k.rules.len();
                    k.stops.extend(std::iter::repeat_n(stops, rules.len()));
                    k.rules.extend(rules);
                    k.spans.push((i, start..k.rules.len()));
                    k.enforced += 1;
                    continue;
                }
                Err(why) => why,
            };
            if stops {
                stoppers.push(&r.flow);
            }
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
        BgpRules { flows: self.rules.clone(), stops: self.stops.clone(), placement: self.placement }
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

/// A flow's rules as the program runs them: a discard's drop, a rate's
/// police (of the engine's numbers: [`police_of`]), an accept's count.
fn program_rules(r: &FlowRule) -> Result<Vec<Rule>, &'static str> {
    let rules = flow_rules(&r.flow)?;
    let (action, police) = match &r.verdict {
        FlowVerdict::Drop => return Ok(rules),
        FlowVerdict::Police(p) => {
            let police = police_of(p).ok_or("rate")?;
            if rules.len() > 1 {
                return Err("rate_split");
            }
            (Action::Police, Some(police))
        }
        FlowVerdict::Accept => (Action::Count, None),
    };
    Ok(rules
        .into_iter()
        .map(|rule| Rule {
            text: rule.text.replacen("drop bgp", if police.is_some() { "police bgp" } else { "accept bgp" }, 1),
            action,
            police,
            ..rule
        })
        .collect())
}

/// The rule language's `police` with the numbers of a flow's policer (a
/// traffic-rate: one bucket for the flow, the default burst), when its
/// rate is a whole number of bytes or packets a second.
pub fn police_of(p: &Policer) -> Option<sluice_rules::Police> {
    let whole = |r: f64| (r >= 1.0 && r.fract() == 0.0 && r <= u64::MAX as f64).then_some(r as u64);
    let rate = match p.rate {
        Rate::BytesPerSecond(r) => sluice_rules::PoliceRate::Bytes(whole(r)?),
        Rate::PacketsPerSecond(r) => sluice_rules::PoliceRate::Packets(whole(r)?),
    };
    (p.per == PoliceKey::Rule).then_some(sluice_rules::Police { rate, burst: None, per: None })
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
        // The discard, the rate (a police rule of the engine's numbers)
        // and the accept (a count) run; the DSCP flow is refused.
        assert_eq!((k.enforced, k.rules.len()), (3, 3));
        assert_eq!(k.refused, BTreeMap::from([("dscp", 1)]));
        assert_eq!(k.refused_texts.len(), 1);
        // Each flow's rules are counted for it: its index in the table.
        let of = |i: usize| &table.rules()[k.spans[i].0];
        let rule_of = |i: usize| &k.rules[k.spans[i].1.clone()];
        let udp53_at = (0..3).find(|&i| of(i).flow == udp53).expect("the discard runs");
        assert_eq!(rule_of(udp53_at), &flow_rules(&udp53).unwrap()[..]);
        for i in 0..3 {
            let r = &rule_of(i)[0];
            match &of(i).verdict {
                FlowVerdict::Drop => assert_eq!((r.action, k.stops[k.spans[i].1.start]), (Action::Drop, false)),
                FlowVerdict::Police(p) => {
                    assert_eq!((r.action, r.police), (Action::Police, police_of(p)));
                    assert!(r.text.starts_with("police bgp ") && k.stops[k.spans[i].1.start]);
                    // The kernel's policer is the engine's for the flow.
                    let engine = sluice_engine::rules::policer(r.police.as_ref().unwrap());
                    assert_eq!((engine.rate, engine.burst, engine.per), (p.rate, p.burst, p.per));
                }
                FlowVerdict::Accept => {
                    assert_eq!(r.action, Action::Count);
                    assert!(r.text.starts_with("accept bgp ") && k.stops[k.spans[i].1.start]);
                }
            }
        }
        // A rate the kernel cannot count in whole units, and a rate split
        // over two rules, are refused; behind a refused rate (it would
        // stop the flows first on the bridge) a discard is shadowed.
        let fraction = FlowVerdict::Police(Arc::new(Policer::new(Rate::BytesPerSecond(1000.5), None, PoliceKey::Rule)));
        let split = FlowVerdict::Police(Arc::new(Policer::new(Rate::BytesPerSecond(1000.0), None, PoliceKey::Rule)));
        let either = v4(vec![dst("192.0.2.0/24"), Component::Port(vec![eq(80)])]);
        let table = FlowTable::new(
            vec![
                rule(v4(vec![dst("203.0.113.0/24")]), fraction, false),
                rule(either, split, false),
                rule(v4(vec![dst("203.0.0.0/16")]), FlowVerdict::Drop, false),
            ],
            Placement::First,
        );
        let held = KernelFlows::of(Some(&table), Placement::First, &HashSet::new());
        assert_eq!(held.refused, BTreeMap::from([("rate", 1), ("rate_split", 1), ("shadowed", 1)]));
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
        // The rate runs in the kernel now: nothing behind it is refused.
        assert!(behind.refused.is_empty(), "{:?}", behind.refused);
        assert_eq!(behind.enforced, 4);
        // Each enforced flow's rules, in order, one after another.
        let mut at = 0;
        for (_, r) in &behind.spans {
            assert!(r.start == at && r.end > at);
            at = r.end;
        }
        assert_eq!((behind.spans.len(), at), (4, behind.rules.len()));
        assert_eq!(
            k.program_rules(),
            BgpRules { flows: k.rules.clone(), stops: k.stops.clone(), placement: Placement::Last }
        );
    }

    #[test]
    fn an_undirected_flow_keeps_to_its_family() {
        let r = flow_rules(&v4(vec![Component::Protocol(vec![eq(47)])])).unwrap();
        assert_eq!(r.len(), 1);
        assert!(r[0].matches.contains(&addr(AddrField::Dst, AddrValue::Prefixes(vec!["0.0.0.0/0".parse().unwrap()]))));
    }
}
