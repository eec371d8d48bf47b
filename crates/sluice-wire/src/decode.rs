//! Whole-frame decoding into a compact [`PacketSummary`].

use crate::{be16, ethernet, ethertype, icmp, ip_proto, ipv4, ipv6, tcp, udp, vlan, DecodeError, Layer, LinkType};
use core::fmt;
use std::net::IpAddr;

/// Most stacked VLAN tags walked (802.1ad QinQ is 2; 4 leaves room for odd gear).
pub const MAX_VLAN_TAGS: usize = 4;
/// Most IPv6 extension headers walked before giving up on the upper layer.
pub const MAX_EXT_HEADERS: usize = 8;

/// VLAN ids, outermost first, held inline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VlanIds {
    ids: [u16; MAX_VLAN_TAGS],
    len: u8,
}

impl VlanIds {
    pub fn as_slice(&self) -> &[u16] {
        &self.ids[..usize::from(self.len)]
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    fn push(&mut self, id: u16) -> Result<(), DecodeError> {
        let slot = self.ids.get_mut(usize::from(self.len)).ok_or(DecodeError::TooManyVlanTags)?;
        *slot = id;
        self.len += 1;
        Ok(())
    }
}

/// IPv4 fragment fields or the IPv6 fragment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentInfo {
    /// Offset of this fragment's data in the original datagram, in bytes.
    pub offset: u16,
    pub more: bool,
    /// Identification (16 bits for IPv4, 32 for IPv6).
    pub ident: u32,
}

/// What the decoder learned from the IP layer and what follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpSummary {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// Upper-layer protocol: IPv4's protocol field, or the last next-header of
    /// the IPv6 extension chain (the fragment header's for fragments).
    pub protocol: u8,
    /// Source and destination port for TCP and UDP when their header is present.
    pub ports: Option<(u16, u16)>,
    /// ICMP / ICMPv6 type and code when the header is present.
    pub icmp: Option<(u8, u8)>,
    /// Set for IP fragments (IPv4 MF or non-zero offset; any IPv6 fragment header).
    pub fragment: Option<FragmentInfo>,
    /// Offset of the IP header in the frame.
    pub l3_offset: u32,
    /// Offset where the upper-layer data starts: the L4 header for whole
    /// datagrams and first fragments, raw fragment data otherwise. `None` when
    /// the IPv6 extension chain could not be walked to its end.
    pub l4_offset: Option<u32>,
    /// Offset of the L4 payload, past the TCP/UDP/ICMP header, when that
    /// header was decoded.
    pub payload_offset: Option<u32>,
    /// End of the IP payload in the frame: the IP length, or the captured
    /// bytes if fewer (Ethernet padding excluded).
    pub l3_end: u32,
    /// The capture holds fewer bytes than the IP header says (snap length).
    pub cut_short: bool,
    /// A problem after the addresses (truncated L4 header, extension chain too
    /// long). The addresses are still good and the packet is still classified.
    pub anomaly: Option<DecodeError>,
}

impl IpSummary {
    /// A placeholder (0.0.0.0 to 0.0.0.0, protocol 0) for filling arrays.
    pub const UNSPECIFIED: IpSummary = IpSummary {
        src: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        dst: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        protocol: 0,
        ports: None,
        icmp: None,
        fragment: None,
        l3_offset: 0,
        l4_offset: None,
        payload_offset: None,
        l3_end: 0,
        cut_short: false,
        anomaly: None,
    };

    pub fn is_ipv6(&self) -> bool {
        self.src.is_ipv6()
    }
}

/// The decoded essentials of one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketSummary {
    /// EtherType of the network layer (after VLAN tags), inferred for raw IP links.
    pub ethertype: u16,
    pub vlans: VlanIds,
    /// `None` for non-IP traffic (ARP and other EtherTypes), which is recognised and passed through.
    pub ip: Option<IpSummary>,
}

/// Decode one captured frame of the given link type.
///
/// Returns `Err` only when the addresses cannot be known (link, VLAN or IP
/// header damaged); damage past the IP header is reported in
/// [`IpSummary::anomaly`] instead, so that an address rule still applies.
pub fn decode(link: LinkType, frame: &[u8]) -> Result<PacketSummary, DecodeError> {
    match link {
        LinkType::ETHERNET => {
            let eth = ethernet::Frame::new_checked(frame)?;
            network(frame, ethernet::HEADER_LEN, eth.ethertype())
        }
        LinkType::RAW | LinkType::RAW_BSD_12 | LinkType::RAW_BSD_14 => match frame.first().map(|b| b >> 4) {
            None => Err(DecodeError::Truncated(Layer::Link)),
            Some(4) => network(frame, 0, ethertype::IPV4),
            Some(6) => network(frame, 0, ethertype::IPV6),
            Some(v) => Err(DecodeError::BadIpVersion(v)),
        },
        LinkType::IPV4 => network(frame, 0, ethertype::IPV4),
        LinkType::IPV6 => network(frame, 0, ethertype::IPV6),
        LinkType::NULL | LinkType::LOOP => {
            let Some(h) = frame.get(..4) else {
                return Err(DecodeError::Truncated(Layer::Link));
            };
            let raw = [h[0], h[1], h[2], h[3]];
            // NULL is in the capturing host's byte order; families are small,
            // so a value whose top half is zero in big-endian is big-endian.
            let family = if link == LinkType::LOOP || (h[0] == 0 && h[1] == 0) {
                u32::from_be_bytes(raw)
            } else {
                u32::from_le_bytes(raw)
            };
            match family {
                2 => network(frame, 4, ethertype::IPV4),
                // AF_INET6 is 24 (NetBSD/OpenBSD), 28 (FreeBSD), 30 (macOS), 10 (Linux).
                10 | 24 | 28 | 30 => network(frame, 4, ethertype::IPV6),
                other => Err(DecodeError::UnknownLoopbackFamily(other)),
            }
        }
        LinkType::LINUX_SLL => {
            // 16 bytes: packet type, ARPHRD, address length, 8-byte address, protocol.
            if frame.len() < 16 {
                return Err(DecodeError::Truncated(Layer::Link));
            }
            network(frame, 16, be16(frame, 14))
        }
        LinkType::LINUX_SLL2 => {
            // 20 bytes: protocol first, then reserved, ifindex, ARPHRD, type, address.
            if frame.len() < 20 {
                return Err(DecodeError::Truncated(Layer::Link));
            }
            network(frame, 20, be16(frame, 0))
        }
        LinkType(other) => Err(DecodeError::UnsupportedLinkType(other)),
    }
}

/// Step over VLAN tags starting at `off`, then dispatch on the EtherType.
fn network(frame: &[u8], mut off: usize, mut ty: u16) -> Result<PacketSummary, DecodeError> {
    let mut vlans = VlanIds::default();
    while ethertype::is_vlan(ty) {
        let tag = vlan::Tag::new_checked(frame.get(off..).unwrap_or_default())?;
        vlans.push(tag.vlan_id())?;
        ty = tag.ethertype();
        off += vlan::HEADER_LEN;
    }
    let rest = frame.get(off..).unwrap_or_default();
    let ip = match ty {
        ethertype::IPV4 => Some(decode_ipv4(rest, off)?),
        ethertype::IPV6 => Some(decode_ipv6(rest, off)?),
        _ => None,
    };
    Ok(PacketSummary { ethertype: ty, vlans, ip })
}

fn decode_ipv4(bytes: &[u8], l3_offset: usize) -> Result<IpSummary, DecodeError> {
    let p = match ipv4::Packet::new_checked(bytes) {
        Ok(p) => p,
        Err(DecodeError::Truncated(Layer::Ipv4)) if bytes.len() >= ipv4::HEADER_LEN => {
            // The snap length cut the options, but the addresses are there:
            // judge by them rather than let options hide a listed source.
            return Ok(ipv4_options_cut(bytes, l3_offset));
        }
        Err(e) => return Err(e),
    };
    let fragment = ipv4_fragment(&p);
    let l4_offset = l3_offset + p.header_len();
    let mut s = IpSummary {
        src: IpAddr::V4(p.src_addr()),
        dst: IpAddr::V4(p.dst_addr()),
        protocol: p.protocol(),
        ports: None,
        icmp: None,
        fragment,
        l3_offset: l3_offset as u32,
        l4_offset: Some(l4_offset as u32),
        payload_offset: None,
        l3_end: (l4_offset + p.payload().len()) as u32,
        cut_short: p.is_cut_short(),
        anomaly: None,
    };
    if p.frag_offset() == 0 {
        upper_layer(&mut s, p.payload(), l4_offset, false);
    }
    if p.is_tso() && s.anomaly.is_none() {
        s.anomaly = Some(DecodeError::Ipv4TotalLenZero);
    }
    Ok(s)
}

/// The fragment fields, for a fragment (MF set or a non-zero offset).
fn ipv4_fragment(p: &ipv4::Packet<&[u8]>) -> Option<FragmentInfo> {
    (p.more_frags() || p.frag_offset() != 0).then(|| FragmentInfo {
        offset: p.frag_offset(),
        more: p.more_frags(),
        ident: u32::from(p.ident()),
    })
}

/// An IPv4 header whose options the capture cut: the fixed 20 bytes (and so
/// both addresses) are there, nothing after them is usable. No `l4_offset`
/// and `cut_short` set, so reassembly leaves such a fragment alone, and
/// `l3_end` is the end of the captured bytes.
fn ipv4_options_cut(bytes: &[u8], l3_offset: usize) -> IpSummary {
    let p = ipv4::Packet::new_unchecked(bytes);
    let fragment = ipv4_fragment(&p);
    IpSummary {
        src: IpAddr::V4(p.src_addr()),
        dst: IpAddr::V4(p.dst_addr()),
        protocol: p.protocol(),
        ports: None,
        icmp: None,
        fragment,
        l3_offset: l3_offset as u32,
        l4_offset: None,
        payload_offset: None,
        l3_end: (l3_offset + bytes.len()) as u32,
        cut_short: true,
        anomaly: Some(DecodeError::TruncatedIpv4Options),
    }
}

fn decode_ipv6(bytes: &[u8], l3_offset: usize) -> Result<IpSummary, DecodeError> {
    let p = ipv6::Packet::new_checked(bytes)?;
    let mut s = IpSummary {
        src: IpAddr::V6(p.src_addr()),
        dst: IpAddr::V6(p.dst_addr()),
        protocol: p.next_header(),
        ports: None,
        icmp: None,
        fragment: None,
        l3_offset: l3_offset as u32,
        l4_offset: None,
        payload_offset: None,
        l3_end: 0,
        cut_short: false,
        anomaly: None,
    };
    let payload = p.payload();
    s.l3_end = (l3_offset + ipv6::HEADER_LEN + payload.len()) as u32;
    s.cut_short = p.payload_len() != 0 && payload.len() < usize::from(p.payload_len());
    let mut cursor = 0usize;
    let mut walked = 0usize;
    while ipv6::is_extension_header(s.protocol) {
        if walked == MAX_EXT_HEADERS {
            s.anomaly = Some(DecodeError::TooManyExtHeaders);
            return Ok(s);
        }
        let h = match ipv6::ExtHeader::new_checked(s.protocol, payload.get(cursor..).unwrap_or_default()) {
            Ok(h) => h,
            Err(e) => {
                s.anomaly = Some(e);
                return Ok(s);
            }
        };
        s.protocol = h.next_header();
        cursor += h.len();
        walked += 1;
        if let Some(f) = h.fragment() {
            s.fragment = Some(FragmentInfo { offset: f.offset, more: f.more_frags, ident: f.ident });
            if f.offset != 0 {
                // Only the first fragment carries further headers.
                break;
            }
        }
    }
    let l4_offset = l3_offset + ipv6::HEADER_LEN + cursor;
    s.l4_offset = Some(l4_offset as u32);
    if s.fragment.is_none_or(|f| f.offset == 0) {
        upper_layer(&mut s, payload.get(cursor..).unwrap_or_default(), l4_offset, true);
    }
    Ok(s)
}

/// Fill ports / ICMP type from the upper-layer header at the start of `data`.
fn upper_layer(s: &mut IpSummary, data: &[u8], l4_offset: usize, v6: bool) {
    let header_len = match s.protocol {
        ip_proto::TCP => tcp::Packet::new_checked(data).map(|t| {
            s.ports = Some((t.src_port(), t.dst_port()));
            t.header_len()
        }),
        ip_proto::UDP => udp::Packet::new_checked(data).map(|u| {
            s.ports = Some((u.src_port(), u.dst_port()));
            udp::HEADER_LEN
        }),
        ip_proto::ICMP if !v6 => icmp_header(s, data),
        ip_proto::ICMPV6 if v6 => icmp_header(s, data),
        _ => return,
    };
    match header_len {
        Ok(len) => s.payload_offset = Some((l4_offset + len) as u32),
        Err(e) => s.anomaly = Some(e),
    }
}

fn icmp_header(s: &mut IpSummary, data: &[u8]) -> Result<usize, DecodeError> {
    let p = icmp::Packet::new_checked(data)?;
    s.icmp = Some((p.msg_type(), p.code()));
    Ok(icmp::HEADER_LEN)
}

impl fmt::Display for PacketSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.ip {
            None => write!(f, "ethertype 0x{:04x}", self.ethertype)?,
            Some(ip) => {
                match ip.ports {
                    Some((sp, dp)) => write!(f, "{} {} > {} {}", ip.src, sp, ip.dst, dp)?,
                    None => write!(f, "{} > {}", ip.src, ip.dst)?,
                }
                write!(f, " proto {}", ip.protocol)?;
                if let Some((t, c)) = ip.icmp {
                    write!(f, " icmp {t}/{c}")?;
                }
                if let Some(fr) = ip.fragment {
                    write!(f, " frag id {} off {} mf {}", fr.ident, fr.offset, u8::from(fr.more))?;
                }
                if let Some(a) = ip.anomaly {
                    write!(f, " [{a}]")?;
                }
            }
        }
        if !self.vlans.is_empty() {
            f.write_str(" vlan ")?;
            for (i, id) in self.vlans.as_slice().iter().enumerate() {
                if i > 0 {
                    f.write_str(",")?;
                }
                write!(f, "{id}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn eth(ty: u16) -> Vec<u8> {
        let mut v = vec![0u8; 14];
        ethernet::Repr { src: [2; 6], dst: [4; 6], ethertype: ty }
            .emit(&mut ethernet::Frame::new_unchecked(&mut v[..]));
        v
    }

    fn ipv4_udp(src: [u8; 4], dst: [u8; 4], frag_offset: u16, more: bool) -> Vec<u8> {
        let mut v = vec![0u8; 20 + 8 + 4];
        ipv4::Repr {
            src: Ipv4Addr::from(src),
            dst: Ipv4Addr::from(dst),
            protocol: ip_proto::UDP,
            payload_len: 12,
            dscp_ecn: 0,
            ident: 7,
            dont_frag: false,
            more_frags: more,
            frag_offset,
            ttl: 64,
        }
        .emit(&mut v);
        udp::Repr { src_port: 53, dst_port: 1024, length: 12 }.emit(&mut v[20..]);
        v
    }

    #[test]
    fn ethernet_qinq_ipv4_udp() {
        let mut f = eth(ethertype::QINQ);
        f.extend_from_slice(&[0x00, 100, 0x81, 0x00, 0x00, 200, 0x08, 0x00]);
        f.extend(ipv4_udp([1, 2, 3, 4], [5, 6, 7, 8], 0, false));
        let s = decode(LinkType::ETHERNET, &f).unwrap();
        assert_eq!(s.vlans.as_slice(), &[100, 200]);
        let ip = s.ip.unwrap();
        assert_eq!(ip.src, IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4)));
        assert_eq!(ip.ports, Some((53, 1024)));
        assert_eq!(ip.l3_offset, 22);
        assert_eq!(ip.l4_offset, Some(42));
        assert_eq!(ip.payload_offset, Some(50));
        assert_eq!(ip.fragment, None);
        assert_eq!(ip.anomaly, None);
    }

    #[test]
    fn ipv4_fragments() {
        let first = decode(LinkType::RAW, &ipv4_udp([1; 4], [2; 4], 0, true)).unwrap().ip.unwrap();
        assert_eq!(first.fragment, Some(FragmentInfo { offset: 0, more: true, ident: 7 }));
        assert_eq!(first.ports, Some((53, 1024)));
        let later = decode(LinkType::RAW, &ipv4_udp([1; 4], [2; 4], 1480, false)).unwrap().ip.unwrap();
        assert_eq!(later.fragment, Some(FragmentInfo { offset: 1480, more: false, ident: 7 }));
        assert_eq!(later.ports, None);
        assert_eq!(later.anomaly, None);
    }

    #[test]
    fn too_many_vlan_tags() {
        let mut f = eth(ethertype::VLAN);
        for _ in 0..MAX_VLAN_TAGS {
            f.extend_from_slice(&[0, 1, 0x81, 0x00]);
        }
        f.extend_from_slice(&[0; 40]);
        assert_eq!(decode(LinkType::ETHERNET, &f).unwrap_err(), DecodeError::TooManyVlanTags);
    }

    #[test]
    fn arp_passes_through() {
        let mut f = eth(ethertype::ARP);
        f.extend_from_slice(&[0; 28]);
        let s = decode(LinkType::ETHERNET, &f).unwrap();
        assert_eq!(s.ethertype, ethertype::ARP);
        assert!(s.ip.is_none());
    }

    fn ipv6_with(next: u8, ext: &[u8], l4: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; 40];
        ipv6::Repr {
            src: Ipv6Addr::LOCALHOST,
            dst: "2001:db8::1".parse().unwrap(),
            next_header: next,
            payload_len: (ext.len() + l4.len()) as u16,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
        }
        .emit(&mut v);
        v.extend_from_slice(ext);
        v.extend_from_slice(l4);
        v
    }

    #[test]
    fn ipv6_extension_chain_to_tcp() {
        let mut tcp_hdr = [0u8; 20];
        tcp::Repr { src_port: 443, dst_port: 5555, seq: 1, ack: 0, flags: tcp::flags::SYN, window: 1, urgent: 0 }
            .emit(&mut tcp_hdr);
        // hop-by-hop (8 bytes) -> dest opts (16 bytes) -> fragment (first) -> TCP
        let mut ext = vec![ip_proto::DSTOPTS, 0, 0, 0, 0, 0, 0, 0];
        ext.extend_from_slice(&[ip_proto::FRAGMENT, 1]);
        ext.extend_from_slice(&[0; 14]);
        let mut frag = [0u8; 8];
        ipv6::FragmentRepr { next_header: ip_proto::TCP, offset: 0, more_frags: true, ident: 99 }.emit(&mut frag);
        ext.extend_from_slice(&frag);
        let f = ipv6_with(ip_proto::HOPOPTS, &ext, &tcp_hdr);
        let ip = decode(LinkType::RAW, &f).unwrap().ip.unwrap();
        assert_eq!(ip.protocol, ip_proto::TCP);
        assert_eq!(ip.ports, Some((443, 5555)));
        assert_eq!(ip.fragment, Some(FragmentInfo { offset: 0, more: true, ident: 99 }));
        assert_eq!(ip.l4_offset, Some(40 + 32));
    }

    #[test]
    fn ipv6_truncated_chain_keeps_addresses() {
        let f = ipv6_with(ip_proto::HOPOPTS, &[ip_proto::TCP, 3, 0, 0], &[]);
        let ip = decode(LinkType::RAW, &f).unwrap().ip.unwrap();
        assert_eq!(ip.anomaly, Some(DecodeError::Truncated(Layer::Ipv6Ext)));
        assert_eq!(ip.src, IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert_eq!(ip.l4_offset, None);
    }

    #[test]
    fn link_types() {
        let pkt = ipv4_udp([9; 4], [8; 4], 0, false);
        let mut null_le = vec![2, 0, 0, 0];
        null_le.extend(&pkt);
        let mut null_be = vec![0, 0, 0, 2];
        null_be.extend(&pkt);
        let mut sll = vec![0u8; 16];
        sll[14..16].copy_from_slice(&ethertype::IPV4.to_be_bytes());
        sll.extend(&pkt);
        let mut sll2 = vec![0u8; 20];
        sll2[0..2].copy_from_slice(&ethertype::IPV4.to_be_bytes());
        sll2.extend(&pkt);
        for (lt, f) in [
            (LinkType::NULL, &null_le),
            (LinkType::NULL, &null_be),
            (LinkType::LINUX_SLL, &sll),
            (LinkType::LINUX_SLL2, &sll2),
            (LinkType::RAW, &pkt),
            (LinkType::IPV4, &pkt),
        ] {
            let ip = decode(lt, f).unwrap().ip.unwrap();
            assert_eq!(ip.src, IpAddr::V4(Ipv4Addr::new(9, 9, 9, 9)), "{lt}");
            assert_eq!(ip.ports, Some((53, 1024)), "{lt}");
        }
        assert_eq!(decode(LinkType(147), &pkt).unwrap_err(), DecodeError::UnsupportedLinkType(147));
        assert_eq!(decode(LinkType::NULL, &[7, 0, 0, 0]).unwrap_err(), DecodeError::UnknownLoopbackFamily(7));
        assert_eq!(decode(LinkType::RAW, &[]).unwrap_err(), DecodeError::Truncated(Layer::Link));
    }

    #[test]
    fn ipv4_total_length_zero_is_tso_judged_by_address() {
        let mut pkt = ipv4_udp([1, 2, 3, 4], [5, 6, 7, 8], 0, false);
        pkt[2..4].copy_from_slice(&[0, 0]);
        let ip = decode(LinkType::RAW, &pkt).unwrap().ip.unwrap();
        assert_eq!((ip.src, ip.dst), (IpAddr::from([1, 2, 3, 4]), IpAddr::from([5, 6, 7, 8])));
        assert_eq!(ip.ports, Some((53, 1024)), "the captured bytes are the datagram");
        assert_eq!(ip.anomaly, Some(DecodeError::Ipv4TotalLenZero));
        assert_eq!(ip.l3_end as usize, pkt.len());
        assert!(!ip.cut_short);
        // A total length that is not 0 but shorter than the header stays an error.
        pkt[2..4].copy_from_slice(&[0, 19]);
        assert_eq!(decode(LinkType::RAW, &pkt).unwrap_err(), DecodeError::BadIpv4TotalLen { total: 19, header: 20 });
    }

    #[test]
    fn big_tcp_total_length_zero_decodes_its_tcp_ports() {
        // BIG TCP: more than 64 KiB in one datagram, so the length field can only be 0.
        let mut pkt = vec![0u8; 20 + 20 + 70_000];
        ipv4::Repr {
            src: Ipv4Addr::new(203, 0, 113, 5),
            dst: Ipv4Addr::new(198, 51, 100, 1),
            protocol: ip_proto::TCP,
            payload_len: 0,
            dscp_ecn: 0,
            ident: 1,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            ttl: 64,
        }
        .emit(&mut pkt);
        pkt[2..4].copy_from_slice(&[0, 0]);
        tcp::Repr { src_port: 40000, dst_port: 443, seq: 1, ack: 1, flags: tcp::flags::ACK, window: 1, urgent: 0 }
            .emit(&mut pkt[20..40]);
        let mut f = eth(ethertype::IPV4);
        f.extend_from_slice(&pkt);
        let ip = decode(LinkType::ETHERNET, &f).unwrap().ip.unwrap();
        assert_eq!((ip.src, ip.dst), (IpAddr::from([203, 0, 113, 5]), IpAddr::from([198, 51, 100, 1])));
        assert_eq!((ip.protocol, ip.ports), (ip_proto::TCP, Some((40000, 443))));
        assert_eq!((ip.l4_offset, ip.payload_offset), (Some(34), Some(54)));
        assert_eq!(ip.l3_end as usize, f.len());
        assert_eq!(ip.anomaly, Some(DecodeError::Ipv4TotalLenZero));
        assert!(!ip.cut_short);
    }

    #[test]
    fn ipv4_options_cut_with_a_bogus_total_length_stay_an_error() {
        // IHL 8 but total length 24: the same error whether or not the options are captured.
        let mut pkt = ipv4_udp([10, 0, 0, 9], [5, 6, 7, 8], 0, false);
        pkt[0] = 0x48;
        pkt.splice(20..20, [1u8; 12]);
        pkt[2..4].copy_from_slice(&24u16.to_be_bytes());
        let want = DecodeError::BadIpv4TotalLen { total: 24, header: 32 };
        assert_eq!(decode(LinkType::RAW, &pkt).unwrap_err(), want);
        assert_eq!(decode(LinkType::RAW, &pkt[..24]).unwrap_err(), want);
    }

    #[test]
    fn ipv4_fragment_with_cut_options_is_left_to_the_address_rules() {
        // What reassembly checks before holding a fragment: it must skip this one.
        let mut pkt = ipv4_udp([10, 0, 0, 9], [5, 6, 7, 8], 0, true);
        pkt[0] = 0x46;
        pkt.splice(20..20, [1u8; 4]);
        let total = (pkt.len() as u16).to_be_bytes();
        pkt[2..4].copy_from_slice(&total);
        let ip = decode(LinkType::RAW, &pkt[..22]).unwrap().ip.unwrap();
        assert_eq!(ip.fragment, Some(FragmentInfo { offset: 0, more: true, ident: 7 }));
        assert!(ip.cut_short);
        assert_eq!((ip.l4_offset, ip.payload_offset, ip.l3_end), (None, None, 22));
    }

    #[test]
    fn ipv4_options_cut_by_the_snap_length_keep_the_addresses() {
        // IHL 8: 12 bytes of options, of which the capture keeps 4.
        let mut pkt = ipv4_udp([10, 0, 0, 9], [5, 6, 7, 8], 0, false);
        pkt[0] = 0x48;
        pkt.splice(20..20, [1u8; 12]);
        let total = (pkt.len() as u16).to_be_bytes();
        pkt[2..4].copy_from_slice(&total);
        let ip = decode(LinkType::RAW, &pkt[..24]).unwrap().ip.unwrap();
        assert_eq!((ip.src, ip.dst), (IpAddr::from([10, 0, 0, 9]), IpAddr::from([5, 6, 7, 8])));
        assert_eq!(ip.anomaly, Some(DecodeError::TruncatedIpv4Options));
        assert!(ip.cut_short);
        assert_eq!((ip.ports, ip.l4_offset, ip.l3_end), (None, None, 24));
        let whole = decode(LinkType::RAW, &pkt).unwrap().ip.unwrap();
        assert_eq!((whole.ports, whole.anomaly), (Some((53, 1024)), None));
        // Cut inside the addresses: they cannot be known.
        assert_eq!(decode(LinkType::RAW, &pkt[..19]).unwrap_err(), DecodeError::Truncated(Layer::Ipv4));
    }

    #[test]
    fn ipv6_jumbogram_decodes_to_its_ports() {
        // Payload length 0 and a hop-by-hop jumbo payload option (RFC 2675).
        let hbh = [ip_proto::UDP, 0, 0xc2, 4, 0, 1, 0, 48];
        let udp = [0, 53, 4, 0, 0, 0, 0, 0];
        let mut pkt = ipv6_with(ip_proto::HOPOPTS, &hbh, &udp);
        pkt[4..6].copy_from_slice(&[0, 0]);
        let ip = decode(LinkType::RAW, &pkt).unwrap().ip.unwrap();
        assert_eq!(ip.src, IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert_eq!(ip.dst, IpAddr::V6("2001:db8::1".parse().unwrap()));
        assert_eq!(ip.ports, Some((53, 1024)));
        assert_eq!(ip.protocol, ip_proto::UDP);
        assert_eq!((ip.l4_offset, ip.l3_end as usize), (Some(48), pkt.len()));
        assert!(!ip.cut_short);
        assert_eq!(ip.anomaly, None);
    }

    #[test]
    fn truncated_udp_is_an_anomaly_not_an_error() {
        let pkt = ipv4_udp([1; 4], [2; 4], 0, false);
        let ip = decode(LinkType::RAW, &pkt[..24]).unwrap().ip.unwrap();
        assert_eq!(ip.anomaly, Some(DecodeError::Truncated(Layer::Udp)));
        assert_eq!(ip.ports, None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]
        #[test]
        fn any_bytes_decode_without_panic(link in prop_oneof![Just(0u32), Just(1), Just(101), Just(113), Just(276), any::<u32>()],
                                          bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(s) = decode(LinkType(link), &bytes) {
                if let Some(ip) = s.ip {
                    for off in [Some(ip.l3_offset), ip.l4_offset, ip.payload_offset, Some(ip.l3_end)].into_iter().flatten() {
                        prop_assert!(off as usize <= bytes.len());
                    }
                    if let Some(l4) = ip.l4_offset {
                        prop_assert!(l4 <= ip.l3_end);
                    }
                }
            }
        }

        #[test]
        fn ipv4_cut_anywhere_after_the_addresses_keeps_them(ihl in 6u8..=15, total in prop_oneof![Just(0u16), 60u16..2000],
                                                            cut in 20usize..60) {
            // A header with options, cut by the snap length at any byte
            // after the addresses: judged by them, offsets inside the capture.
            let mut pkt = ipv4_udp([10, 0, 0, 9], [5, 6, 7, 8], 0, false);
            pkt[0] = 0x40 | ihl;
            pkt.splice(20..20, core::iter::repeat_n(1u8, usize::from(ihl) * 4 - 20));
            pkt[2..4].copy_from_slice(&total.to_be_bytes());
            let cut = cut.min(pkt.len());
            let ip = decode(LinkType::RAW, &pkt[..cut]).unwrap().ip.unwrap();
            prop_assert_eq!((ip.src, ip.dst), (IpAddr::from([10, 0, 0, 9]), IpAddr::from([5, 6, 7, 8])));
            prop_assert!(ip.l3_end as usize <= cut);
            if let Some(l4) = ip.l4_offset {
                prop_assert!(l4 <= ip.l3_end);
            }
            if cut < usize::from(ihl) * 4 {
                prop_assert_eq!(ip.anomaly, Some(DecodeError::TruncatedIpv4Options));
                prop_assert!(ip.cut_short);
                prop_assert_eq!((ip.l4_offset, ip.ports), (None, None));
            }
        }

        #[test]
        fn ethernet_prefix_bytes_decode_without_panic(ty in prop_oneof![Just(0x0800u16), Just(0x86dd), Just(0x8100), Just(0x88a8)],
                                                      first in prop_oneof![Just(0x45u8), Just(0x60), any::<u8>()],
                                                      nh in prop_oneof![Just(0u8), Just(6), Just(17), Just(44), Just(43), Just(51), Just(60)],
                                                      bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            // Bias toward plausible headers so the fuzz reaches deep layers.
            let mut f = eth(ty);
            f.push(first);
            f.extend_from_slice(&bytes);
            if f.len() > 20 { f[20] = nh; }
            let _ = decode(LinkType::ETHERNET, &f);
        }
    }
}
