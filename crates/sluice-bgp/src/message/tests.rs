use super::*;
use crate::flowspec::{Component, NumericOp, PrefixMatch};
use proptest::prelude::*;

/// An attribute: flags, code, length (one byte), value.
fn attr(flags: u8, code: u8, value: &[u8]) -> Vec<u8> {
    let mut a = vec![flags, code, value.len() as u8];
    a.extend_from_slice(value);
    a
}

/// An UPDATE of `attrs` and IPv4 NLRI `nlri`.
fn update(withdrawn: &[u8], attrs: &[u8], nlri: &[u8]) -> Vec<u8> {
    let mut body = (withdrawn.len() as u16).to_be_bytes().to_vec();
    body.extend_from_slice(withdrawn);
    body.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
    body.extend_from_slice(attrs);
    body.extend_from_slice(nlri);
    frame(UPDATE, &body)
}

fn base_attrs() -> Vec<u8> {
    let mut a = attr(0x40, 1, &[0]);
    a.extend(attr(0x40, 2, &[2, 1, 0, 0, 0xfd, 0xe8])); // AS_SEQUENCE 65000 (4-octet)
    a
}

fn udp_53() -> Flow {
    let eq = |value| NumericOp { and: false, lt: false, gt: false, eq: true, len: 1, value };
    Flow {
        family: Family::V4,
        components: vec![
            Component::Destination(PrefixMatch::new("192.0.2.0".parse().unwrap(), 24)),
            Component::Protocol(vec![eq(17)]),
            Component::DestinationPort(vec![eq(53)]),
        ],
    }
}

#[test]
fn an_open_says_what_the_peer_can() {
    let fams = [AfiSafi::IPV4_FLOWSPEC, AfiSafi::IPV6_FLOWSPEC, AfiSafi::IPV4_UNICAST];
    let bytes = open(4_200_000_000, 90, Ipv4Addr::new(192, 0, 2, 1), &fams, 120);
    assert_eq!(frame_len(&bytes).unwrap(), Some(bytes.len()));
    let Message::Open(o) = decode(&bytes, false).unwrap() else { panic!() };
    assert_eq!((o.version, o.my_as, o.hold_time, o.asn()), (4, 23456, 90, 4_200_000_000));
    assert_eq!(o.capabilities.multiprotocol, fams);
    assert!(o.capabilities.route_refresh);
    assert_eq!(o.capabilities.graceful_restart, Some((120, vec![])));
    // A hold time of 1 or 2 s is refused as RFC 4271 says.
    let mut bad = bytes.clone();
    bad[HEADER + 3..HEADER + 5].copy_from_slice(&2u16.to_be_bytes());
    assert_eq!(decode(&bad, false).unwrap_err().subcode, 6);
    let mut v3 = bytes;
    v3[HEADER] = 3;
    let e = decode(&v3, false).unwrap_err();
    assert_eq!((e.code, e.subcode), (OPEN_ERROR, 1));
}

#[test]
fn headers_are_checked_before_anything_is_read() {
    assert_eq!(frame_len(&[0xff; 18]).unwrap(), None);
    let mut k = keepalive();
    assert_eq!(decode(&k, true).unwrap(), Message::Keepalive);
    k[3] = 0;
    assert_eq!(frame_len(&k).unwrap_err().subcode, 1, "marker");
    let mut long = keepalive();
    long[16..18].copy_from_slice(&4097u16.to_be_bytes());
    assert_eq!(frame_len(&long).unwrap_err().subcode, 2, "length");
    let e = decode(&frame(9, &[]), true).unwrap_err();
    assert_eq!((e.code, e.subcode), (HEADER_ERROR, 3));
    assert_eq!(decode(&frame(KEEPALIVE, &[0]), true).unwrap_err().subcode, 2);
    let n = notification(CEASE, 2, b"bye");
    assert_eq!(decode(&n, true).unwrap(), Message::Notification { code: CEASE, subcode: 2, data: b"bye".to_vec() });
}

#[test]
fn the_discard_encoder_splits_at_4096_bytes_and_decodes_back() {
    let flows: Vec<Flow> = (0..3000u32)
        .map(|i| Flow {
            family: Family::V4,
            components: vec![crate::flowspec::Component::Destination(crate::flowspec::PrefixMatch::new(
                Ipv4Addr::from(0x0a00_0000 | i).into(),
                32,
            ))],
        })
        .collect();
    let ups = flowspec_discards(&flows);
    assert!(ups.len() > 1 && ups.iter().all(|u| u.len() <= 4096), "{:?}", ups.iter().map(Vec::len).collect::<Vec<_>>());
    let mut back = Vec::new();
    for u in &ups {
        let Message::Update(u) = decode(u, true).unwrap() else { panic!() };
        assert_eq!(u.flow_actions, vec![FlowAction::RateBytes(0.0)]);
        assert!(u.treat_as_withdraw.is_none());
        back.extend(u.flows_announced);
    }
    assert_eq!(back, flows);
    let Message::Update(bad) = decode(&flowspec_discard(&flows[0].to_bytes(), 3), true).unwrap() else { panic!() };
    assert!(bad.treat_as_withdraw.is_some(), "ORIGIN 3 is malformed (RFC 7606: treat as withdraw)");
}

#[test]
fn a_flowspec_update_brings_its_flows_and_actions() {
    let flow = udp_53();
    let mut mp = vec![0, 1, 133, 0, 0];
    mp.extend(flow.to_bytes());
    let mut attrs = base_attrs();
    attrs.extend(attr(0x80, 14, &mp));
    // traffic-rate 0 (discard), and a route target sluice does not read.
    let mut ec = vec![0x80, 0x06, 0, 0, 0, 0, 0, 0];
    ec.extend_from_slice(&[0x00, 0x02, 0xfd, 0xe8, 0, 0, 0, 1]);
    attrs.extend(attr(0xc0, 16, &ec));
    let Message::Update(u) = decode(&update(&[], &attrs, &[]), true).unwrap() else { panic!() };
    assert_eq!(u.flows_announced, vec![flow.clone()]);
    assert_eq!(u.flow_actions, vec![FlowAction::RateBytes(0.0)]);
    assert_eq!(u.other_extended.len(), 1);
    assert!(u.treat_as_withdraw.is_none());
    // Withdrawn: MP_UNREACH.
    let mut un = vec![0, 1, 133];
    un.extend(flow.to_bytes());
    let Message::Update(u) = decode(&update(&[], &attr(0x80, 15, &un), &[]), true).unwrap() else { panic!() };
    assert_eq!(u.flows_withdrawn, vec![flow]);
}

#[test]
fn a_blackhole_route_is_a_unicast_prefix_with_its_community() {
    let mut attrs = base_attrs();
    attrs.extend(attr(0x40, 3, &[192, 0, 2, 254]));
    attrs.extend(attr(0xc0, 8, &[0xff, 0xff, 0x02, 0x9a, 0xfd, 0xe8, 0, 1]));
    // 203.0.113.7/32 and 198.51.100.0/24, host bits left set on the /24.
    let nlri = [32, 203, 0, 113, 7, 24, 198, 51, 100];
    let Message::Update(u) = decode(&update(&[16, 10, 1], &attrs, &nlri), true).unwrap() else { panic!() };
    assert!(u.communities.contains(&BLACKHOLE));
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert_eq!(u.announced, vec![(ip("203.0.113.7"), 32), (ip("198.51.100.0"), 24)]);
    assert_eq!(u.withdrawn, vec![(ip("10.1.0.0"), 16)]);
    // IPv6 unicast in MP_REACH: AFI 2, a 16-byte next hop.
    let mut mp = vec![0, 2, 1, 16];
    mp.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    mp.push(0);
    mp.extend_from_slice(&[48, 0x20, 0x01, 0x0d, 0xb8, 0, 7]);
    let Message::Update(u) = decode(&update(&[], &attr(0x80, 14, &mp), &[]), true).unwrap() else { panic!() };
    assert_eq!(u.announced, vec![(ip("2001:db8:7::"), 48)]);
}

#[test]
fn a_wrong_attribute_withdraws_what_the_update_announced() {
    let flow = udp_53();
    let mut mp = vec![0, 1, 133, 0, 0];
    mp.extend(flow.to_bytes());
    let mut attrs = attr(0x40, 1, &[7]); // ORIGIN 7: there is no such origin.
    attrs.extend(attr(0x80, 14, &mp));
    let Message::Update(u) = decode(&update(&[], &attrs, &[24, 192, 0, 2]), true).unwrap() else { panic!() };
    assert!(u.flows_announced.is_empty() && u.announced.is_empty());
    assert_eq!(u.flows_withdrawn, vec![flow]);
    assert_eq!(u.withdrawn.len(), 1);
    assert!(u.treat_as_withdraw.unwrap().contains("ORIGIN"));
    // A 2-octet AS_PATH where 4-octet was agreed.
    let attrs = attr(0x40, 2, &[2, 1, 0xfd, 0xe8]);
    let Message::Update(u) = decode(&update(&[], &attrs, &[24, 192, 0, 2]), true).unwrap() else { panic!() };
    assert!(u.treat_as_withdraw.is_some() && u.announced.is_empty());
}

#[test]
fn what_cannot_be_told_apart_ends_the_session() {
    // An attribute longer than the list.
    let attrs = [0x40, 1, 9, 0];
    let e = decode(&update(&[], &attrs, &[]), true).unwrap_err();
    assert_eq!((e.code, e.subcode), (UPDATE_ERROR, 1));
    // A FlowSpec NLRI that does not decode: its rules cannot be known.
    let mp = [0, 1, 133, 0, 0, 4, 1, 24, 192, 0];
    let e = decode(&update(&[], &attr(0x80, 14, &mp), &[]), true).unwrap_err();
    assert_eq!((e.code, e.subcode), (UPDATE_ERROR, 9));
    assert!(e.message.contains("FlowSpec NLRI, byte"), "{e}");
    // MP_REACH twice.
    let mut twice = attr(0x80, 14, &[0, 1, 133, 0, 0]);
    twice.extend(attr(0x80, 14, &[0, 1, 133, 0, 0]));
    assert_eq!(decode(&update(&[], &twice, &[]), true).unwrap_err().subcode, 1);
    // Withdrawn routes with a /33.
    assert_eq!(decode(&update(&[33, 1, 2, 3, 4, 5], &[], &[]), true).unwrap_err().subcode, 10);
}

proptest! {
    #[test]
    fn any_framed_bytes_decode_or_end_the_session(kind in 1u8..6, body in prop::collection::vec(any::<u8>(), 0..200), as4 in any::<bool>()) {
        let m = frame(kind, &body);
        let _ = decode(&m, as4);
    }

    #[test]
    fn any_update_body_decodes_or_ends_the_session(attrs in prop::collection::vec(any::<u8>(), 0..120), nlri in prop::collection::vec(any::<u8>(), 0..20)) {
        let _ = decode(&update(&[], &attrs, &nlri), true);
    }
}

#[test]
fn end_of_rib_is_told_per_family() {
    // An UPDATE with nothing in it: IPv4 unicast's.
    assert_eq!(decode_update(&[0, 0, 0, 0], true).unwrap().end_of_rib, Some(AfiSafi::IPV4_UNICAST));
    // Only an empty MP_UNREACH_NLRI: that family's.
    let eor = |afi: u16, safi: u8| {
        let a = afi.to_be_bytes();
        vec![0, 0, 0, 6, 0x80, 15, 3, a[0], a[1], safi]
    };
    assert_eq!(decode_update(&eor(1, 133), true).unwrap().end_of_rib, Some(AfiSafi::IPV4_FLOWSPEC));
    assert_eq!(decode_update(&eor(2, 1), true).unwrap().end_of_rib, Some(AfiSafi::IPV6_UNICAST));
    // An UPDATE without routes but with other attributes is no marker.
    let mut other = eor(1, 133);
    other[3] = 10;
    other.extend_from_slice(&[0x40, 1, 1, 0]);
    assert_eq!(decode_update(&other, true).unwrap().end_of_rib, None);
    // Nor is one that withdraws a route.
    assert_eq!(decode_update(&[0, 2, 8, 10, 0, 0], true).unwrap().end_of_rib, None);
    // A FlowSpec withdrawal is read as one (destination 10.0.0.0/8), and is
    // no marker.
    let u = decode_update(&[0, 0, 0, 10, 0x80, 15, 7, 0, 1, 133, 3, 1, 8, 10], true).unwrap();
    assert_eq!((u.flows_withdrawn.len(), u.end_of_rib), (1, None));
}
