use super::*;
use proptest::prelude::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect()
}

/// RFC 8955 §5.1's order as the RFC words it, one component pair at a
/// time: the plain reference the byte key ([`Flow::precedence_key`], the
/// one order sluice sorts by) is checked against.
fn reference_precedence(a: &Flow, b: &Flow) -> std::cmp::Ordering {
    use std::cmp::Ordering::Equal;
    let value = |c: &Component| {
        let mut v = Vec::new();
        c.encode_value(Family::V4, &mut v);
        v
    };
    for (x, y) in a.components.iter().zip(&b.components) {
        let by = x.kind().cmp(&y.kind()).then_with(|| match (x, y) {
            (Component::Destination(p), Component::Destination(q)) | (Component::Source(p), Component::Source(q)) => {
                // The lower offset first; of two that overlap the longer
                // first, else the lower address.
                let overlap = (bits(p.addr) ^ bits(q.addr)) & span(0, p.len.min(q.len)) == 0;
                p.offset.cmp(&q.offset).then_with(|| {
                    if overlap {
                        q.len.cmp(&p.len)
                    } else {
                        bits(p.addr).cmp(&bits(q.addr))
                    }
                })
            }
            _ => {
                // Bytes as far as both go, the lower first, else the longer first.
                let (x, y) = (value(x), value(y));
                let common = x.len().min(y.len());
                x[..common].cmp(&y[..common]).then(y.len().cmp(&x.len()))
            }
        });
        if by != Equal {
            return by;
        }
    }
    // A flow lacking a component the other has comes after it.
    b.components.len().cmp(&a.components.len())
}

fn eq(value: u64) -> NumericOp {
    NumericOp { and: false, lt: false, gt: false, eq: true, len: 1, value }
}

/// RFC 8955 §4.2.2's examples, byte for byte.
#[test]
fn the_rfc_examples_decode_and_encode_back() {
    // Packets to 192.0.2.0/24, TCP, port 25.
    let bytes = hex("0b 01 18 c0 00 02 03 81 06 04 81 19");
    let (f, n) = Flow::decode(Family::V4, &bytes).unwrap();
    assert_eq!(n, bytes.len());
    let want = Flow {
        family: Family::V4,
        components: vec![
            Component::Destination(PrefixMatch::new(ip("192.0.2.0"), 24)),
            Component::Protocol(vec![eq(6)]),
            Component::Port(vec![eq(25)]),
        ],
    };
    assert_eq!(f, want);
    assert_eq!(f.to_bytes(), bytes);
    assert_eq!(f.to_string(), "destination 192.0.2.0/24 protocol ==6 port ==25");

    // To 192.0.2.0/24 from 203.0.113.0/24, port 137 to 139 or 8080.
    let bytes = hex("12 01 18 c0 00 02 02 18 cb 00 71 04 03 89 45 8b 91 1f 90");
    let (f, _) = Flow::decode(Family::V4, &bytes).unwrap();
    let Component::Port(ops) = &f.components[2] else { panic!("{f:?}") };
    assert_eq!(ops.len(), 3);
    assert!(ops[0].gt && ops[0].eq && !ops[0].and && ops[0].value == 137);
    assert!(ops[1].lt && ops[1].eq && ops[1].and && ops[1].value == 139);
    assert!(ops[2].eq && !ops[2].and && ops[2].len == 2 && ops[2].value == 8080);
    assert_eq!(f.to_bytes(), bytes);
    assert_eq!(f.to_string(), "destination 192.0.2.0/24 source 203.0.113.0/24 port >=137&<=139 ==8080");

    // To 192.0.2.1/32, fragments DF or FF.
    let bytes = hex("09 01 20 c0 00 02 01 0c 80 05");
    let (f, _) = Flow::decode(Family::V4, &bytes).unwrap();
    assert_eq!(
        f.components[1],
        Component::Fragment(vec![BitmaskOp {
            and: false,
            not: false,
            matched: false,
            len: 1,
            value: FRAG_DF | FRAG_FIRST
        }])
    );
    assert_eq!(f.to_bytes(), bytes);
}

/// RFC 8956 §3.1: an IPv6 prefix sends only the bits from its offset to
/// its length.
#[test]
fn an_ipv6_offset_sends_only_the_pattern_bits() {
    // Source, 104 bits from bit 64: 40 bits, 5 bytes.
    let bytes = hex("08 02 68 40 11 22 33 44 55");
    let (f, n) = Flow::decode(Family::V6, &bytes).unwrap();
    assert_eq!(n, 9);
    let Component::Source(p) = f.components[0] else { panic!() };
    assert_eq!((p.len, p.offset, p.addr), (104, 64, ip("::1122:3344:5500:0")));
    assert_eq!(f.to_bytes(), bytes);
    assert!(p.holds(ip("2001:db8:0:0:1122:3344:55ff:ffff")));
    assert!(p.holds(ip("ffff:0:0:0:1122:3344:5500:1")));
    assert!(!p.holds(ip("2001:db8:0:0:1122:3344:5600:0")));
    assert!(!p.holds(ip("192.0.2.1")), "another family");
    // Offset 0: a plain prefix.
    let bytes = hex("0a 01 20 00 20 01 0d b8 03 81 06");
    let (f, _) = Flow::decode(Family::V6, &bytes).unwrap();
    assert_eq!(f.components[0], Component::Destination(PrefixMatch::new(ip("2001:db8::"), 32)));
    assert_eq!(f.to_bytes(), bytes);
}

#[test]
fn bad_nlri_is_named_with_its_byte() {
    let e = |family, s: &str| Flow::decode(family, &hex(s)).unwrap_err();
    assert_eq!(e(Family::V4, "05 01 18 c0 00"), err(1, FlowErrorKind::Truncated("the NLRI")));
    assert_eq!(e(Family::V4, "04 01 18 c0 00"), err(3, FlowErrorKind::Truncated("a prefix")));
    assert_eq!(e(Family::V4, "03 01 21 00"), err(2, FlowErrorKind::PrefixLength(33, 32)));
    assert_eq!(e(Family::V4, "06 03 81 06 01 08 c0"), err(4, FlowErrorKind::Order(1, 3)));
    assert_eq!(e(Family::V4, "06 03 81 06 03 81 06"), err(4, FlowErrorKind::Order(3, 3)));
    assert_eq!(e(Family::V4, "03 0e 81 06"), err(1, FlowErrorKind::Unknown(14)));
    assert_eq!(e(Family::V4, "03 0d 81 06"), err(1, FlowErrorKind::NotForFamily(13, "IPv4")));
    assert_eq!(e(Family::V6, "04 01 40 40 00"), err(3, FlowErrorKind::Offset { offset: 64, len: 64 }));
    assert_eq!(e(Family::V4, "02 03 01"), err(3, FlowErrorKind::Truncated("a value")));
    // No end-of-list bit before the NLRI ends.
    assert_eq!(e(Family::V4, "03 03 01 06"), err(4, FlowErrorKind::Truncated("an operator list")));
    assert_eq!(e(Family::V4, "00"), err(0, FlowErrorKind::Empty));
    // A two-byte length, and decode_all names the byte in the whole field.
    let mut two = vec![0xf0, 0x03];
    two.extend(hex("03 81 06"));
    assert_eq!(Flow::decode(Family::V4, &two).unwrap().1, 5);
    let mut field = hex("03 03 81 06");
    field.extend(hex("03 03 81"));
    assert_eq!(Flow::decode_all(Family::V4, &field).unwrap_err(), err(5, FlowErrorKind::Truncated("the NLRI")));
}

#[test]
fn operators_are_ors_of_ands() {
    let op = |and, lt, gt, eq, value| NumericOp { and, lt, gt, eq, len: 2, value };
    // >=137 & <=139, or ==8080
    let ops =
        [op(false, false, true, true, 137), op(true, true, false, true, 139), op(false, false, false, true, 8080)];
    let hit = |d| numeric(&ops, Some(d));
    assert!(!hit(136) && hit(137) && hit(139) && !hit(140) && hit(8080) && !hit(8081));
    // AND binds tighter: a | b & c is a | (b & c), not (a | b) & c.
    let ops = [op(false, false, false, true, 1), op(false, false, true, false, 5), op(true, true, false, false, 10)];
    assert!(numeric(&ops, Some(1)) && numeric(&ops, Some(7)) && !numeric(&ops, Some(12)));
    // 000 never, 111 always, 110 is !=.
    assert!(!op(false, false, false, false, 3).holds(3));
    assert!(op(false, true, true, true, 3).holds(9));
    assert!(op(false, true, true, false, 3).holds(4) && !op(false, true, true, false, 3).holds(3));
    // No such field (ports of an ICMP packet): no match, whatever the ops.
    assert!(!numeric(&[op(false, true, true, true, 0)], None));
    let bm = |not, matched, value| BitmaskOp { and: false, not, matched, len: 1, value };
    // SYN (0x02) without ACK (0x10): =0x02 & !0x10.
    let syn = [bm(false, true, 0x02), BitmaskOp { and: true, ..bm(true, false, 0x10) }];
    assert!(bitmask(&syn, Some(0x02)) && bitmask(&syn, Some(0x0a)) && !bitmask(&syn, Some(0x12)));
    assert!(bm(false, false, 0x12).holds(0x10) && !bm(false, true, 0x12).holds(0x10));
}

fn packet(src: &str, dst: &str, protocol: u8, ports: Option<(u16, u16)>) -> FlowPacket {
    FlowPacket {
        src: ip(src),
        dst: ip(dst),
        protocol,
        ports,
        icmp: None,
        tcp_flags: None,
        length: 60,
        dscp: 0,
        fragment: 0,
        flow_label: 0,
    }
}

#[test]
fn a_flow_matches_when_every_component_does() {
    let (f, _) = Flow::decode(Family::V4, &hex("0b 01 18 c0 00 02 03 81 06 04 81 19")).unwrap();
    assert!(f.matches(&packet("203.0.113.1", "192.0.2.9", 6, Some((40000, 25)))));
    assert!(f.matches(&packet("203.0.113.1", "192.0.2.9", 6, Some((25, 40000)))), "port: either side");
    assert!(!f.matches(&packet("203.0.113.1", "192.0.2.9", 17, Some((40000, 25)))));
    assert!(!f.matches(&packet("203.0.113.1", "192.0.3.9", 6, Some((40000, 25)))));
    assert!(!f.matches(&packet("203.0.113.1", "192.0.2.9", 6, None)), "no ports: no port match");
    assert!(!f.matches(&packet("2001:db8::1", "2001:db8::2", 6, Some((25, 25)))), "another family");
}

/// RFC 8956's appendix tests (`flow_rule_cmp_v6`), with components that
/// encode as theirs compare.
#[test]
fn flows_are_ordered_as_the_rfcs_order_them() {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let v6 = |c: Vec<Component>| Flow { family: Family::V6, components: c };
    let port = |v: u64| Component::Port(vec![eq(v)]);
    let dport = |v: u64| Component::DestinationPort(vec![eq(v)]);
    let sport = |v: u64| Component::SourcePort(vec![eq(v)]);
    let pre = |s: &str, len: u8, offset: u8| PrefixMatch { offset, ..PrefixMatch::new(ip(s), len) };
    let both = |a: &Flow, b: &Flow, want| {
        assert_eq!(a.precedence(b), want, "{a} vs {b}");
        assert_eq!(b.precedence(a), want.reverse(), "{b} vs {a}");
    };
    // A flow with one more component first; a lower type first.
    both(&v6(vec![port(1), dport(1)]), &v6(vec![port(1)]), Less);
    both(&v6(vec![port(1)]), &v6(vec![dport(1), sport(1)]), Less);
    let full = v6(vec![
        Component::Destination(pre("200::", 16, 4)),
        Component::Source(pre("100::", 16, 4)),
        port(1),
        dport(1),
    ]);
    both(&full, &full.clone(), Equal);
    // Overlapping prefixes: the longer first; else the lower address; a lower offset first.
    let d = |s, len, offset| v6(vec![Component::Destination(pre(s, len, offset))]);
    both(&d("200::", 8, 4), &d("201::", 16, 4), Greater);
    both(&d("200::", 8, 4), &d("301::", 16, 4), Less);
    both(&d("200::", 8, 3), &d("301::", 16, 4), Less);
    // Other components by their bytes: the lower first.
    both(&v6(vec![port(7)]), &v6(vec![port(6)]), Greater);
    let two = v6(vec![Component::Port(vec![eq(1), NumericOp { and: true, ..eq(2) }])]);
    both(&two, &v6(vec![port(1)]), Less);
    // A sort puts a flow before every one it has precedence over.
    let mut flows = [d("200::", 8, 4), v6(vec![port(6)]), d("201::", 16, 4), full.clone()];
    flows.sort_by(Flow::precedence);
    let order: Vec<String> = flows.iter().map(ToString::to_string).collect();
    assert_eq!(order[0], full.to_string());
    assert_eq!(order[3], "port ==6");
}

fn numeric_ops_strategy(max: u64) -> impl Strategy<Value = Vec<NumericOp>> {
    prop::collection::vec((any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>(), 0..4u32, 0..=max), 1..5)
        .prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (and, lt, gt, eq, w, value))| {
                    let len = 1u8 << w;
                    let value = if len == 8 { value } else { value & ((1u64 << (8 * u32::from(len))) - 1) };
                    NumericOp { and: and && i > 0, lt, gt, eq, len, value }
                })
                .collect()
        })
}

fn bitmask_ops_strategy() -> impl Strategy<Value = Vec<BitmaskOp>> {
    prop::collection::vec((any::<bool>(), any::<bool>(), any::<bool>(), 0..2u32, any::<u16>()), 1..4).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (and, not, matched, w, value))| {
                let len = 1u8 << w;
                let value = if len == 1 { u64::from(value & 0xff) } else { u64::from(value) };
                BitmaskOp { and: and && i > 0, not, matched, len, value }
            })
            .collect()
    })
}

fn prefix_strategy(v6: bool) -> impl Strategy<Value = PrefixMatch> {
    let width = if v6 { 128u8 } else { 32 };
    (0..=width, 0..=width, any::<u128>()).prop_map(move |(a, b, raw)| {
        let (mut offset, len) = (a.min(b), a.max(b));
        if !v6 || offset == len {
            offset = 0;
        }
        let raw = if v6 { raw } else { raw & (u128::MAX << 96) };
        PrefixMatch { len, offset, addr: from_bits(v6, raw & span(offset, len)) }
    })
}

fn flow_strategy() -> impl Strategy<Value = Flow> {
    any::<bool>().prop_flat_map(|v6| {
        let family = if v6 { Family::V6 } else { Family::V4 };
        (
            prop::option::of(prefix_strategy(v6)),
            prop::option::of(prefix_strategy(v6)),
            prop::collection::vec(prop::option::of(numeric_ops_strategy(u64::MAX)), 9),
            prop::option::of(bitmask_ops_strategy()),
            prop::option::of(bitmask_ops_strategy()),
        )
            .prop_filter_map("a flow has a component", move |(dst, src, nums, tcp, frag)| {
                let mut c = Vec::new();
                c.extend(dst.map(Component::Destination));
                c.extend(src.map(Component::Source));
                let mut nums = nums.into_iter();
                let mut next = |f: fn(Vec<NumericOp>) -> Component| nums.next().flatten().map(f);
                c.extend(next(Component::Protocol));
                c.extend(next(Component::Port));
                c.extend(next(Component::DestinationPort));
                c.extend(next(Component::SourcePort));
                c.extend(next(Component::IcmpType));
                c.extend(next(Component::IcmpCode));
                c.extend(tcp.map(Component::TcpFlags));
                c.extend(next(Component::PacketLength));
                c.extend(next(Component::Dscp));
                c.extend(frag.map(Component::Fragment));
                if v6 {
                    c.extend(next(Component::FlowLabel));
                }
                (!c.is_empty()).then_some(Flow { family, components: c })
            })
    })
}

/// Flows of which some carry an operator list of 240 bytes or more (the
/// NLRI's length then takes two bytes): its own operators repeated, or its
/// last value made wider, so long lists differ late as well as early.
fn some_long_flow_strategy() -> impl Strategy<Value = Flow> {
    (flow_strategy(), 0..3u8, 100..140usize).prop_map(|(mut f, how, n)| {
        let long = |ops: &mut Vec<NumericOp>| {
            let first = ops.clone();
            while ops.len() < n {
                ops.extend(first.iter().map(|o| NumericOp { len: 8, ..*o }));
            }
            if how == 2 {
                if let Some(last) = ops.last_mut() {
                    last.value = last.value.wrapping_add(1);
                }
            }
        };
        if how > 0 {
            for c in &mut f.components {
                match c {
                    Component::Destination(_)
                    | Component::Source(_)
                    | Component::TcpFlags(_)
                    | Component::Fragment(_) => {}
                    Component::Protocol(o)
                    | Component::Port(o)
                    | Component::DestinationPort(o)
                    | Component::SourcePort(o)
                    | Component::IcmpType(o)
                    | Component::IcmpCode(o)
                    | Component::PacketLength(o)
                    | Component::Dscp(o)
                    | Component::FlowLabel(o) => {
                        long(o);
                        break;
                    }
                }
            }
        }
        f
    })
}

#[test]
fn numeric_lists_become_ranges() {
    let op = |and, lt, gt, eq, value| NumericOp { and, lt, gt, eq, len: 2, value };
    // >=137 & <=139, or ==8080
    let ops =
        [op(false, false, true, true, 137), op(true, true, false, true, 139), op(false, false, false, true, 8080)];
    assert_eq!(numeric_ranges(&ops, 65535), vec![(137, 139), (8080, 8080)]);
    // != 53 over a byte: everything else; values past the field clip.
    assert_eq!(numeric_ranges(&[op(false, true, true, false, 53)], 255), vec![(0, 52), (54, 255)]);
    assert_eq!(numeric_ranges(&[op(false, true, false, false, 300)], 255), vec![(0, 255)]);
    assert_eq!(numeric_ranges(&[op(false, false, true, false, 300)], 255), vec![]);
    // Adjacent ranges join: <10 or ==10.
    assert_eq!(
        numeric_ranges(&[op(false, true, false, false, 10), op(false, false, false, true, 10)], 255),
        vec![(0, 10)]
    );
}

proptest! {
    #[test]
    fn ranges_admit_exactly_what_the_operators_do(ops in numeric_ops_strategy(70_000), max in prop_oneof![Just(255u64), Just(65_535), Just(1_048_575)], probes in prop::collection::vec(0u64..1_100_000, 50)) {
        let ranges = numeric_ranges(&ops, max);
        // Sorted, disjoint, not adjacent, within the field.
        for w in ranges.windows(2) {
            prop_assert!(w[0].1 + 1 < w[1].0, "{:?}", ranges);
        }
        prop_assert!(ranges.iter().all(|&(lo, hi)| lo <= hi && hi <= max));
        let edges = ops.iter().flat_map(|o| [o.value.saturating_sub(1), o.value, o.value.saturating_add(1)]);
        for d in probes.into_iter().chain(edges).chain([0, max]).filter(|&d| d <= max) {
            let inside = ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&d));
            prop_assert_eq!(inside, numeric(&ops, Some(d)), "{} in {:?} for {:?}", d, ranges, ops);
        }
    }

    #[test]
    fn precedence_is_a_total_order(a in some_long_flow_strategy(), b in some_long_flow_strategy(), c in some_long_flow_strategy()) {
        use std::cmp::Ordering::*;
        prop_assert_eq!(a.precedence(&b), b.precedence(&a).reverse());
        prop_assert_eq!(a.precedence(&a), Equal);
        if a.precedence(&b) != Greater && b.precedence(&c) != Greater {
            prop_assert_ne!(a.precedence(&c), Greater, "{} / {} / {}", a, b, c);
        }
    }

    #[test]
    fn the_precedence_key_orders_as_the_rfc_words_it(a in some_long_flow_strategy(), b in some_long_flow_strategy(), share in any::<bool>()) {
        // Half the pairs share their first component, so later ones decide.
        let mut b = b;
        if share && a.family == b.family {
            b.components[0] = a.components[0].clone();
            b.components.sort_by_key(Component::kind);
            b.components.dedup_by_key(|c| c.kind());
        }
        prop_assert_eq!(a.precedence(&b), reference_precedence(&a, &b), "{} / {}", a, b);
        prop_assert_eq!(FlowOrder::of(&a).cmp(&FlowOrder::of(&b)),
            (a.family == Family::V6).cmp(&(b.family == Family::V6)).then(reference_precedence(&a, &b)));
    }

    #[test]
    fn encode_then_decode_is_the_flow(f in flow_strategy()) {
        let bytes = f.to_bytes();
        let (back, n) = Flow::decode(f.family, &bytes).unwrap();
        prop_assert_eq!(n, bytes.len());
        prop_assert_eq!(&back, &f);
        prop_assert_eq!(back.to_bytes(), bytes);
    }

    #[test]
    fn any_bytes_decode_or_are_refused_and_what_decodes_encodes_back(bytes in prop::collection::vec(any::<u8>(), 0..64), v6 in any::<bool>()) {
        let family = if v6 { Family::V6 } else { Family::V4 };
        if let Ok(flows) = Flow::decode_all(family, &bytes) {
            for f in flows {
                let again = f.to_bytes();
                prop_assert_eq!(Flow::decode(family, &again).unwrap().0, f);
            }
        }
    }
}

/// A component of 240 bytes or more makes the NLRI's length two bytes
/// (0xFnnn): its values are still what is compared, not the length's second
/// byte or the type. Here the short list's first operator byte (0x05: `<=`,
/// one byte, not the last) is below the long one's (0x11: `==`, two bytes),
/// so the short list comes first; read past the length, the long one's type
/// byte (4) would have won.
#[test]
fn a_long_component_is_compared_by_its_values() {
    use std::cmp::Ordering::{Greater, Less};
    let port = |ops: Vec<NumericOp>| Flow { family: Family::V4, components: vec![Component::Port(ops)] };
    let long = port((0..100).map(|v| NumericOp { len: 2, ..eq(v) }).collect());
    assert!(long.to_bytes()[0] >= 0xf0, "the NLRI's length takes two bytes");
    let short = port(vec![NumericOp { lt: true, ..eq(5) }, eq(6)]);
    assert_eq!(short.precedence(&long), Less);
    assert_eq!(long.precedence(&short), Greater);
    // Two long lists: the first value that differs decides.
    let other = port((0..100).map(|v| NumericOp { len: 2, ..eq(if v == 90 { 1000 } else { v }) }).collect());
    assert_eq!(long.precedence(&other), Less);
    assert_eq!(other.precedence(&long), Greater);
}
