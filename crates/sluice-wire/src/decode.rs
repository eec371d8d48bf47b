//! Whole-frame decoding into a compact [`PacketSummary`].

use crate::{
    be16, ethernet, ethertype, geneve, gre, gtpu, icmp, ip_proto, ipv4, ipv6, mpls, pppoe, tcp, udp, vlan, vxlan,
    DecodeError, DecodeErrorKind, Layer, LinkType,
};
use core::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// Most stacked VLAN tags walked (802.1ad QinQ is 2; 4 leaves room for odd gear).
pub const MAX_VLAN_TAGS: usize = 4;
/// Most IPv6 extension headers walked before giving up on the upper layer.
pub const MAX_EXT_HEADERS: usize = 8;
/// Most encapsulations walked (MPLS and PPPoE count one each, as does each tunnel).
pub const MAX_ENCAP_DEPTH: usize = 4;

/// VLAN ids, outermost first, held inline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VlanIds {
    ids: [u16; MAX_VLAN_TAGS],
    len: u8,
}

impl VlanIds {
    pub const EMPTY: VlanIds = VlanIds { ids: [0; MAX_VLAN_TAGS], len: 0 };

    #[inline]
    pub fn as_slice(&self) -> &[u16] {
        &self.ids[..usize::from(self.len)]
    }
    #[inline]
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

/// An encapsulation the decoder walks.
///
/// MPLS and PPPoE are link-level: the IP header after them is the packet's
/// own ([`PacketSummary::ip`]). The others are tunnels: `ip` stays the
/// outer header and the one they carry is [`PacketSummary::inner`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encap {
    /// An MPLS label stack (EtherType 0x8847 / 0x8848), however many labels.
    Mpls,
    /// A PPPoE session (EtherType 0x8864).
    Pppoe,
    /// GRE (IP protocol 47) carrying IPv4, IPv6 or Ethernet.
    Gre,
    /// IPv4 in IPv4 (protocol 4).
    Ipip,
    /// IPv6 in IPv4 (protocol 41).
    SixIn4,
    /// IPv4 in IPv6 (next header 4).
    FourIn6,
    /// IPv6 in IPv6 (next header 41).
    SixIn6,
    /// VXLAN (UDP destination port 4789) carrying Ethernet.
    Vxlan,
    /// Geneve (UDP destination port 6081).
    Geneve,
    /// GTP-U G-PDU (UDP destination port 2152).
    GtpU,
}

impl Encap {
    pub const ALL: [Encap; 10] = [
        Encap::Mpls,
        Encap::Pppoe,
        Encap::Gre,
        Encap::Ipip,
        Encap::SixIn4,
        Encap::FourIn6,
        Encap::SixIn6,
        Encap::Vxlan,
        Encap::Geneve,
        Encap::GtpU,
    ];

    /// Stable lower-case name, used on the command line and in JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            Encap::Mpls => "mpls",
            Encap::Pppoe => "pppoe",
            Encap::Gre => "gre",
            Encap::Ipip => "ipip",
            Encap::SixIn4 => "6in4",
            Encap::FourIn6 => "4in6",
            Encap::SixIn6 => "6in6",
            Encap::Vxlan => "vxlan",
            Encap::Geneve => "geneve",
            Encap::GtpU => "gtpu",
        }
    }

    /// A tunnel carries a whole IP packet behind an outer IP header;
    /// MPLS and PPPoE sit below the (only) IP header.
    pub const fn is_tunnel(self) -> bool {
        !matches!(self, Encap::Mpls | Encap::Pppoe)
    }
}

impl fmt::Display for Encap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of [`Encap::as_str`]'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseEncapError;

impl fmt::Display for ParseEncapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unknown encapsulation; expected one of")?;
        for (i, e) in Encap::ALL.iter().enumerate() {
            f.write_str(if i == 0 { " " } else { ", " })?;
            f.write_str(e.as_str())?;
        }
        Ok(())
    }
}

impl std::error::Error for ParseEncapError {}

impl FromStr for Encap {
    type Err = ParseEncapError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Encap::ALL.into_iter().find(|e| e.as_str().eq_ignore_ascii_case(s)).ok_or(ParseEncapError)
    }
}

/// The encapsulations walked, outermost first, held inline (like [`VlanIds`]).
#[derive(Clone, Copy)]
pub struct Encaps {
    list: [Encap; MAX_ENCAP_DEPTH],
    len: u8,
}

impl Encaps {
    /// No encapsulation (the unused slots hold a filler never shown).
    pub const EMPTY: Encaps = Encaps { list: [Encap::Mpls; MAX_ENCAP_DEPTH], len: 0 };

    #[inline]
    pub fn as_slice(&self) -> &[Encap] {
        &self.list[..usize::from(self.len)]
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }
    fn push(&mut self, e: Encap) -> Result<(), DecodeError> {
        let slot = self.list.get_mut(usize::from(self.len)).ok_or(DecodeError::TooManyEncapsulations)?;
        *slot = e;
        self.len += 1;
        Ok(())
    }
}

impl Default for Encaps {
    fn default() -> Self {
        Encaps::EMPTY
    }
}

// By the walked list only: the filler in unused slots is not part of the value.
impl PartialEq for Encaps {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Encaps {}

impl fmt::Debug for Encaps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
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
    /// TCP flags (FIN..CWR, the header's 14th byte) when the TCP header is present.
    pub tcp_flags: Option<u8>,
    /// Set for IP fragments (IPv4 MF or non-zero offset; any IPv6 fragment header).
    pub fragment: Option<FragmentInfo>,
    /// IPv4's DSCP and ECN byte, IPv6's traffic class (DSCP is the top 6 bits).
    pub tos: u8,
    /// IPv4's don't-fragment bit (always false for IPv6).
    pub dont_fragment: bool,
    /// IPv6's flow label (0 for IPv4).
    pub flow_label: u32,
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
        tcp_flags: None,
        fragment: None,
        tos: 0,
        dont_fragment: false,
        flow_label: 0,
        l3_offset: 0,
        l4_offset: None,
        payload_offset: None,
        l3_end: 0,
        cut_short: false,
        anomaly: None,
    };

    #[inline]
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
    /// Behind MPLS or PPPoE this is the IP header they carry (and
    /// `ethertype` is its EtherType); behind a tunnel, the outer header.
    pub ip: Option<IpSummary>,
    /// The innermost IP header reached through tunnels (whole datagrams and
    /// first fragments only). `None` without a tunnel, when the tunnel
    /// carries something else than IP (an inner ARP frame), or when the
    /// inner packet is damaged: then `ip.anomaly` says why
    /// ([`DecodeError::BadInner`], [`DecodeError::TooManyEncapsulations`],
    /// a truncated tunnel header). Damage after the inner addresses is the
    /// inner header's own `anomaly`.
    pub inner: Option<IpSummary>,
    /// The encapsulations walked, outermost first, including one whose
    /// inner packet turned out damaged.
    pub encap: Encaps,
}

impl PacketSummary {
    /// A placeholder (non-IP, EtherType 0) for filling arrays.
    pub const EMPTY: PacketSummary =
        PacketSummary { ethertype: 0, vlans: VlanIds::EMPTY, ip: None, inner: None, encap: Encaps::EMPTY };

    /// The innermost IP header: `inner` if a tunnel was walked, else `ip`.
    #[inline]
    pub fn innermost(&self) -> Option<&IpSummary> {
        self.inner.as_ref().or(self.ip.as_ref())
    }
}

/// Decode one captured frame of the given link type.
///
/// Returns `Err` only when the addresses cannot be known (link, VLAN or IP
/// header damaged); damage past the IP header is reported in
/// [`IpSummary::anomaly`] instead, so that an address rule still applies.
pub fn decode(link: LinkType, frame: &[u8]) -> Result<PacketSummary, DecodeError> {
    let mut s = PacketSummary::EMPTY;
    decode_in_place(link, frame, &mut s).map(|()| s)
}

/// [`decode`] into `out`, writing the summary where it is kept: a batch
/// decodes into its packets' slots without moving a summary through a
/// return value (perf put a 196-byte copy per packet on each return).
pub fn decode_into(link: LinkType, frame: &[u8], out: &mut Result<PacketSummary, DecodeError>) {
    if out.is_err() {
        // Field by field: the constant `EMPTY` would be copied in whole.
        let (vlans, encap) = (VlanIds::EMPTY, Encaps::EMPTY);
        *out = Ok(PacketSummary { ethertype: 0, vlans, ip: None, inner: None, encap });
    }
    if let Ok(s) = out {
        if let Err(e) = decode_in_place(link, frame, s) {
            *out = Err(e);
        }
    }
}

/// [`decode`] into `s`; on an error `s` is left partly written.
fn decode_in_place(link: LinkType, frame: &[u8], s: &mut PacketSummary) -> Result<(), DecodeError> {
    match link {
        LinkType::ETHERNET => {
            let eth = ethernet::Frame::new_checked(frame)?;
            network(frame, ethernet::HEADER_LEN, eth.ethertype(), s)
        }
        LinkType::RAW | LinkType::RAW_BSD_12 | LinkType::RAW_BSD_14 => match frame.first().map(|b| b >> 4) {
            None => Err(DecodeError::Truncated(Layer::Link)),
            Some(4) => network(frame, 0, ethertype::IPV4, s),
            Some(6) => network(frame, 0, ethertype::IPV6, s),
            Some(v) => Err(DecodeError::BadIpVersion(v)),
        },
        LinkType::IPV4 => network(frame, 0, ethertype::IPV4, s),
        LinkType::IPV6 => network(frame, 0, ethertype::IPV6, s),
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
                2 => network(frame, 4, ethertype::IPV4, s),
                // AF_INET6 is 24 (NetBSD/OpenBSD), 28 (FreeBSD), 30 (macOS), 10 (Linux).
                10 | 24 | 28 | 30 => network(frame, 4, ethertype::IPV6, s),
                other => Err(DecodeError::UnknownLoopbackFamily(other)),
            }
        }
        LinkType::LINUX_SLL => {
            // 16 bytes: packet type, ARPHRD, address length, 8-byte address, protocol.
            if frame.len() < 16 {
                return Err(DecodeError::Truncated(Layer::Link));
            }
            network(frame, 16, be16(frame, 14), s)
        }
        LinkType::LINUX_SLL2 => {
            // 20 bytes: protocol first, then reserved, ifindex, ARPHRD, type, address.
            if frame.len() < 20 {
                return Err(DecodeError::Truncated(Layer::Link));
            }
            network(frame, 20, be16(frame, 0), s)
        }
        LinkType(other) => Err(DecodeError::UnsupportedLinkType(other)),
    }
}

/// Step over VLAN tags starting at `off`, then dispatch on the EtherType.
fn network(frame: &[u8], mut off: usize, mut ty: u16, s: &mut PacketSummary) -> Result<(), DecodeError> {
    let mut vlans = VlanIds::default();
    while ethertype::is_vlan(ty) {
        let tag = vlan::Tag::new_checked(frame.get(off..).unwrap_or_default())?;
        vlans.push(tag.vlan_id())?;
        ty = tag.ethertype();
        off += vlan::HEADER_LEN;
    }
    let rest = frame.get(off..).unwrap_or_default();
    *s = PacketSummary { ethertype: ty, vlans, ip: None, inner: None, encap: Encaps::EMPTY };
    // The IP header is decoded into its slot: returned by value it was
    // copied twice per packet (about 100 instructions).
    match ty {
        ethertype::IPV4 => decode_ipv4(rest, off, &mut s.ip)?,
        ethertype::IPV6 => decode_ipv6(rest, off, &mut s.ip)?,
        ethertype::MPLS_UNICAST | ethertype::MPLS_MULTICAST | ethertype::PPPOE_SESSION => {
            s.ip = link_encap(frame, off, s)?
        }
        _ => {}
    }
    // The only cost of tunnels to a frame without one: this compare.
    if s.ip.as_ref().is_some_and(may_tunnel) {
        tunnels(frame, s);
    }
    Ok(())
}

/// Walk an MPLS label stack or a PPPoE session header at `off` to the IP
/// header it carries: that becomes the packet's own `ip`, and its
/// EtherType `s.ethertype`. `None` for non-IP payloads. Damage here is an
/// error, as for a VLAN tag: the addresses cannot be known.
fn link_encap(frame: &[u8], mut off: usize, s: &mut PacketSummary) -> Result<Option<IpSummary>, DecodeError> {
    let ty = if s.ethertype == ethertype::PPPOE_SESSION {
        let h = pppoe::Session::new_checked(frame.get(off..).unwrap_or_default())?;
        s.encap.push(Encap::Pppoe)?;
        off += h.header_len();
        match h.ppp_protocol() {
            pppoe::ppp_proto::IPV4 => ethertype::IPV4,
            pppoe::ppp_proto::IPV6 => ethertype::IPV6,
            _ => return Ok(None),
        }
    } else {
        s.encap.push(Encap::Mpls)?;
        // Bounded by the frame: every entry is 4 more bytes.
        loop {
            let entry = mpls::Entry::new_checked(frame.get(off..).unwrap_or_default())?;
            off += mpls::HEADER_LEN;
            if entry.bottom_of_stack() {
                break;
            }
        }
        // No payload type in MPLS: guess by the version nibble, as tcpdump does.
        match frame.get(off).map(|b| b >> 4) {
            None => return Err(DecodeError::Truncated(Layer::Mpls)),
            Some(4) => ethertype::IPV4,
            Some(6) => ethertype::IPV6,
            Some(_) => return Ok(None),
        }
    };
    s.ethertype = ty;
    let rest = frame.get(off..).unwrap_or_default();
    ip_value(ty, rest, off).map(Some)
}

/// Whether this IP header may carry a tunnel the decoder walks. Every IP
/// packet pays this check, so it is a compare or two.
#[inline]
fn may_tunnel(ip: &IpSummary) -> bool {
    match ip.protocol {
        ip_proto::IPIP | ip_proto::IPV6 | ip_proto::GRE => true,
        ip_proto::UDP => matches!(ip.ports, Some((_, vxlan::PORT | geneve::PORT | gtpu::PORT))),
        _ => false,
    }
}

/// Where a tunnel's payload starts and what it is.
enum Payload {
    /// An IP header of this EtherType.
    Ip(usize, u16),
    /// An IP header of either version, told by its first nibble (GTP-U).
    IpByNibble(usize),
    /// An Ethernet frame, possibly with VLAN tags.
    Ethernet(usize),
}

/// What one tunnel step found.
enum Step {
    /// The IP header inside.
    Ip(IpSummary),
    /// No (further) tunnel, or one carrying something other than IP.
    Done,
}

/// Walk tunnels from the outer `s.ip` to the innermost IP header; on
/// damage, leave `inner` empty and put the reason on the outer header.
#[inline(never)]
fn tunnels(frame: &[u8], s: &mut PacketSummary) {
    let Some(outer) = s.ip.as_mut() else { return };
    let mut cur = *outer;
    let mut reached = None;
    loop {
        match tunnel_step(frame, &cur, &mut s.encap) {
            Ok(Step::Ip(ip)) => {
                cur = ip;
                reached = Some(ip);
            }
            Ok(Step::Done) => break,
            Err(e) => {
                // An inner header nobody can trust is no inner header: the
                // packet is judged by what is known, and the reason counted.
                reached = None;
                if outer.anomaly.is_none() {
                    outer.anomaly = Some(e);
                }
                break;
            }
        }
    }
    s.inner = reached;
}

/// Recognise the tunnel `cur` carries, record it in `encap` and decode the
/// IP header inside.
fn tunnel_step(frame: &[u8], cur: &IpSummary, encap: &mut Encaps) -> Result<Step, DecodeError> {
    // A later fragment holds no tunnel header.
    if cur.fragment.is_some_and(|f| f.offset != 0) {
        return Ok(Step::Done);
    }
    let end = cur.l3_end as usize;
    let v6 = cur.is_ipv6();
    // No upper layer known (IPv6 extension chain cut, IPv4 options cut).
    let Some(at) = cur.l4_offset.map(|o| o as usize) else { return Ok(Step::Done) };
    // Past the UDP header, for the UDP tunnels.
    let data_at = cur.payload_offset.map_or(at, |o| o as usize);
    let (kind, payload) = match cur.protocol {
        ip_proto::IPIP => (if v6 { Encap::FourIn6 } else { Encap::Ipip }, Payload::Ip(at, ethertype::IPV4)),
        ip_proto::IPV6 => (if v6 { Encap::SixIn6 } else { Encap::SixIn4 }, Payload::Ip(at, ethertype::IPV6)),
        ip_proto::GRE => {
            let g = gre::Packet::new_checked(frame.get(at..end).unwrap_or_default())?;
            // PPTP's enhanced GRE (version 1) carries PPP; RFC 1701 routing
            // is deprecated: neither is walked.
            if g.version() != 0 || g.routing_present() {
                return Ok(Step::Done);
            }
            let p = at + g.header_len();
            let payload = match g.protocol() {
                ethertype::IPV4 | ethertype::IPV6 => Payload::Ip(p, g.protocol()),
                ethertype::TEB => Payload::Ethernet(p),
                _ => return Ok(Step::Done),
            };
            (Encap::Gre, payload)
        }
        ip_proto::UDP => {
            let bytes = frame.get(data_at..end).unwrap_or_default();
            match cur.ports.map(|(_, dport)| dport) {
                Some(vxlan::PORT) => {
                    vxlan::Packet::new_checked(bytes)?;
                    (Encap::Vxlan, Payload::Ethernet(data_at + vxlan::HEADER_LEN))
                }
                Some(geneve::PORT) => {
                    let g = geneve::Packet::new_checked(bytes)?;
                    if g.version() != 0 {
                        return Ok(Step::Done);
                    }
                    let p = data_at + g.header_len();
                    let payload = match g.protocol() {
                        ethertype::IPV4 | ethertype::IPV6 => Payload::Ip(p, g.protocol()),
                        ethertype::TEB => Payload::Ethernet(p),
                        _ => return Ok(Step::Done),
                    };
                    (Encap::Geneve, payload)
                }
                Some(gtpu::PORT) => {
                    let g = gtpu::Packet::new_checked(bytes)?;
                    // Echo, error indication and end marker carry no user packet.
                    if g.version() != 1 || g.msg_type() != gtpu::MSG_G_PDU {
                        return Ok(Step::Done);
                    }
                    let len = g.header_len()?;
                    if bytes.len() <= len {
                        return Err(DecodeError::Truncated(Layer::GtpU));
                    }
                    (Encap::GtpU, Payload::IpByNibble(data_at + len))
                }
                _ => return Ok(Step::Done),
            }
        }
        _ => return Ok(Step::Done),
    };
    encap.push(kind)?;
    Ok(match inner_ip(frame, payload, end)? {
        Some(ip) => Step::Ip(ip),
        None => Step::Done,
    })
}

/// Decode the IP header a tunnel carries, up to `end` (the outer datagram's).
/// `None` for a non-IP payload; any error is [`DecodeError::BadInner`].
fn inner_ip(frame: &[u8], payload: Payload, end: usize) -> Result<Option<IpSummary>, DecodeError> {
    let bad = |e: DecodeError| DecodeError::BadInner(e.kind());
    let (at, ty) = match payload {
        Payload::Ip(at, ty) => (at, ty),
        Payload::IpByNibble(at) => match frame.get(at).map(|b| b >> 4) {
            Some(4) => (at, ethertype::IPV4),
            Some(6) => (at, ethertype::IPV6),
            _ => return Ok(None),
        },
        Payload::Ethernet(at) => {
            let eth = ethernet::Frame::new_checked(frame.get(at..end).unwrap_or_default()).map_err(bad)?;
            let (mut off, mut ty) = (at + ethernet::HEADER_LEN, eth.ethertype());
            // Inner VLAN ids are walked past, not recorded.
            let mut tags = 0;
            while ethertype::is_vlan(ty) {
                if tags == MAX_VLAN_TAGS {
                    return Err(DecodeError::BadInner(DecodeErrorKind::TooManyVlanTags));
                }
                let tag = vlan::Tag::new_checked(frame.get(off..end).unwrap_or_default()).map_err(bad)?;
                ty = tag.ethertype();
                off += vlan::HEADER_LEN;
                tags += 1;
            }
            match ty {
                ethertype::IPV4 | ethertype::IPV6 => (off, ty),
                _ => return Ok(None),
            }
        }
    };
    let bytes = frame.get(at..end).unwrap_or_default();
    ip_value(ty, bytes, at).map(Some).map_err(bad)
}

/// The IPv4 (`ty` IPV4) or IPv6 header at the start of `bytes`, by value.
fn ip_value(ty: u16, bytes: &[u8], l3_offset: usize) -> Result<IpSummary, DecodeError> {
    let mut slot = None;
    if ty == ethertype::IPV4 {
        decode_ipv4(bytes, l3_offset, &mut slot)?;
    } else {
        decode_ipv6(bytes, l3_offset, &mut slot)?;
    }
    Ok(slot.expect("written on success"))
}

/// Decode the IPv4 header at the start of `bytes` into `slot`.
fn decode_ipv4(bytes: &[u8], l3_offset: usize, slot: &mut Option<IpSummary>) -> Result<(), DecodeError> {
    let p = match ipv4::Packet::new_checked(bytes) {
        Ok(p) => p,
        Err(DecodeError::Truncated(Layer::Ipv4)) if bytes.len() >= ipv4::HEADER_LEN => {
            // The snap length cut the options, but the addresses are there:
            // judge by them rather than let options hide a listed source.
            *slot = Some(ipv4_options_cut(bytes, l3_offset));
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let fragment = ipv4_fragment(&p);
    let l4_offset = l3_offset + p.header_len();
    let s = slot.insert(IpSummary {
        src: IpAddr::V4(p.src_addr()),
        dst: IpAddr::V4(p.dst_addr()),
        protocol: p.protocol(),
        ports: None,
        icmp: None,
        tcp_flags: None,
        fragment,
        tos: p.dscp_ecn(),
        dont_fragment: p.dont_frag(),
        flow_label: 0,
        l3_offset: l3_offset as u32,
        l4_offset: Some(l4_offset as u32),
        payload_offset: None,
        l3_end: (l4_offset + p.payload().len()) as u32,
        cut_short: p.is_cut_short(),
        anomaly: None,
    });
    if p.frag_offset() == 0 {
        upper_layer(s, p.payload(), l4_offset, false);
    }
    if p.is_tso() && s.anomaly.is_none() {
        s.anomaly = Some(DecodeError::Ipv4TotalLenZero);
    }
    Ok(())
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
        tcp_flags: None,
        fragment,
        tos: p.dscp_ecn(),
        dont_fragment: p.dont_frag(),
        flow_label: 0,
        l3_offset: l3_offset as u32,
        l4_offset: None,
        payload_offset: None,
        l3_end: (l3_offset + bytes.len()) as u32,
        cut_short: true,
        anomaly: Some(DecodeError::TruncatedIpv4Options),
    }
}

/// Decode the IPv6 header (and its extension headers) at the start of
/// `bytes` into `slot`.
fn decode_ipv6(bytes: &[u8], l3_offset: usize, slot: &mut Option<IpSummary>) -> Result<(), DecodeError> {
    let p = ipv6::Packet::new_checked(bytes)?;
    let s = slot.insert(IpSummary {
        src: IpAddr::V6(p.src_addr()),
        dst: IpAddr::V6(p.dst_addr()),
        protocol: p.next_header(),
        ports: None,
        icmp: None,
        tcp_flags: None,
        fragment: None,
        tos: p.traffic_class(),
        dont_fragment: false,
        flow_label: p.flow_label(),
        l3_offset: l3_offset as u32,
        l4_offset: None,
        payload_offset: None,
        l3_end: 0,
        cut_short: false,
        anomaly: None,
    });
    let payload = p.payload();
    s.l3_end = (l3_offset + ipv6::HEADER_LEN + payload.len()) as u32;
    s.cut_short = p.payload_len() != 0 && payload.len() < usize::from(p.payload_len());
    let mut cursor = 0usize;
    let mut walked = 0usize;
    while ipv6::is_extension_header(s.protocol) {
        if walked == MAX_EXT_HEADERS {
            s.anomaly = Some(DecodeError::TooManyExtHeaders);
            return Ok(());
        }
        let h = match ipv6::ExtHeader::new_checked(s.protocol, payload.get(cursor..).unwrap_or_default()) {
            Ok(h) => h,
            Err(e) => {
                s.anomaly = Some(e);
                return Ok(());
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
        upper_layer(s, payload.get(cursor..).unwrap_or_default(), l4_offset, true);
    }
    Ok(())
}

/// Fill ports / ICMP type from the upper-layer header at the start of `data`.
fn upper_layer(s: &mut IpSummary, data: &[u8], l4_offset: usize, v6: bool) {
    let header_len = match s.protocol {
        ip_proto::TCP => tcp::Packet::new_checked(data).map(|t| {
            s.ports = Some((t.src_port(), t.dst_port()));
            // The low byte: FIN..CWR (NS, the high bit, is not matched).
            s.tcp_flags = Some(t.flags() as u8);
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

impl fmt::Display for IpSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ports {
            Some((sp, dp)) => write!(f, "{} {} > {} {}", self.src, sp, self.dst, dp)?,
            None => write!(f, "{} > {}", self.src, self.dst)?,
        }
        write!(f, " proto {}", self.protocol)?;
        if let Some((t, c)) = self.icmp {
            write!(f, " icmp {t}/{c}")?;
        }
        if let Some(fr) = self.fragment {
            write!(f, " frag id {} off {} mf {}", fr.ident, fr.offset, u8::from(fr.more))?;
        }
        if let Some(a) = self.anomaly {
            write!(f, " [{a}]")?;
        }
        Ok(())
    }
}

impl fmt::Display for PacketSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.ip {
            None => write!(f, "ethertype 0x{:04x}", self.ethertype)?,
            Some(ip) => write!(f, "{ip}")?,
        }
        if !self.encap.is_empty() {
            f.write_str(" encap ")?;
            for (i, e) in self.encap.as_slice().iter().enumerate() {
                if i > 0 {
                    f.write_str(",")?;
                }
                f.write_str(e.as_str())?;
            }
        }
        if let Some(inner) = &self.inner {
            write!(f, " inner {inner}")?;
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

/// Encapsulations: each built from its parts, decoded back; damage and depth.
#[cfg(test)]
mod encap_tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    const OUTER4: ([u8; 4], [u8; 4]) = ([192, 0, 2, 1], [192, 0, 2, 2]);
    const OUTER6: (u128, u128) = (0x2001_0db8_0000_0000_0000_0000_0000_0001, 0x2001_0db8_0000_0000_0000_0000_0000_0002);

    fn eth(ty: u16) -> Vec<u8> {
        let mut v = vec![0u8; ethernet::HEADER_LEN];
        ethernet::Repr { src: [2; 6], dst: [4; 6], ethertype: ty }
            .emit(&mut ethernet::Frame::new_unchecked(&mut v[..]));
        v
    }

    fn ip4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; ipv4::HEADER_LEN];
        ipv4::Repr {
            src,
            dst,
            protocol,
            payload_len: payload.len() as u16,
            dscp_ecn: 0,
            ident: 1,
            dont_frag: false,
            more_frags: false,
            frag_offset: 0,
            ttl: 64,
        }
        .emit(&mut v);
        v.extend_from_slice(payload);
        v
    }

    fn ip6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; ipv6::HEADER_LEN];
        ipv6::Repr {
            src,
            dst,
            next_header,
            payload_len: payload.len() as u16,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
        }
        .emit(&mut v);
        v.extend_from_slice(payload);
        v
    }

    fn ip(src: IpAddr, dst: IpAddr, protocol: u8, payload: &[u8]) -> Vec<u8> {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => ip4(s, d, protocol, payload),
            (IpAddr::V6(s), IpAddr::V6(d)) => ip6(s, d, protocol, payload),
            _ => unreachable!("one family"),
        }
    }

    fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; udp::HEADER_LEN];
        udp::Repr { src_port: sport, dst_port: dport, length: (udp::HEADER_LEN + payload.len()) as u16 }.emit(&mut v);
        v.extend_from_slice(payload);
        v
    }

    fn l4(protocol: u8, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        if protocol == ip_proto::UDP {
            return udp(sport, dport, payload);
        }
        let mut v = vec![0u8; 20];
        tcp::Repr { src_port: sport, dst_port: dport, seq: 1, ack: 0, flags: tcp::flags::SYN, window: 1, urgent: 0 }
            .emit(&mut v);
        v.extend_from_slice(payload);
        v
    }

    fn outer_v4(protocol: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = eth(ethertype::IPV4);
        f.extend(ip4(OUTER4.0.into(), OUTER4.1.into(), protocol, payload));
        f
    }

    fn outer_v6(protocol: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = eth(ethertype::IPV6);
        f.extend(ip6(OUTER6.0.into(), OUTER6.1.into(), protocol, payload));
        f
    }

    fn ip_type(inner: &[u8]) -> u16 {
        if inner[0] >> 4 == 6 {
            ethertype::IPV6
        } else {
            ethertype::IPV4
        }
    }

    /// An inner Ethernet frame around `inner`, with `tags` VLAN tags.
    fn inner_eth(inner: &[u8], tags: usize) -> Vec<u8> {
        let mut f = eth(if tags > 0 { ethertype::VLAN } else { ip_type(inner) });
        for i in 0..tags {
            let next = if i + 1 < tags { ethertype::VLAN } else { ip_type(inner) };
            let mut t = [0u8; 4];
            vlan::Repr { priority: 0, drop_eligible: false, vlan_id: 10 + i as u16, ethertype: next }
                .emit(&mut vlan::Tag::new_unchecked(&mut t[..]));
            f.extend_from_slice(&t);
        }
        f.extend_from_slice(inner);
        f
    }

    /// A whole Ethernet frame carrying the IP datagram `inner` in `e`.
    /// `variant` picks header options (GRE key/seq, inner tags, GTP-U extensions).
    fn wrap(e: Encap, inner: &[u8], variant: u8) -> Vec<u8> {
        match e {
            Encap::Mpls => {
                let mut f = eth(ethertype::MPLS_UNICAST);
                let labels = 1 + usize::from(variant % 3);
                for i in 0..labels {
                    let mut b = [0u8; 4];
                    mpls::Repr { label: 16 + i as u32, traffic_class: 0, bottom_of_stack: i + 1 == labels, ttl: 64 }
                        .emit(&mut b);
                    f.extend_from_slice(&b);
                }
                f.extend_from_slice(inner);
                f
            }
            Encap::Pppoe => {
                let mut f = eth(ethertype::PPPOE_SESSION);
                let proto =
                    if ip_type(inner) == ethertype::IPV6 { pppoe::ppp_proto::IPV6 } else { pppoe::ppp_proto::IPV4 };
                let mut h = [0u8; pppoe::HEADER_LEN];
                pppoe::Repr { session_id: 7, length: (inner.len() + 2) as u16, ppp_protocol: proto }.emit(&mut h);
                f.extend_from_slice(&h);
                f.extend_from_slice(inner);
                f
            }
            Encap::Gre => {
                let teb = variant % 4 == 3;
                let r = gre::Repr {
                    protocol: if teb { ethertype::TEB } else { ip_type(inner) },
                    checksum: variant & 1 != 0,
                    key: (variant & 2 != 0).then_some(0xdead_beef),
                    seq: (variant & 4 != 0).then_some(42),
                };
                let body = if teb { inner_eth(inner, usize::from(variant % 3)) } else { inner.to_vec() };
                let mut g = vec![0u8; r.buffer_len()];
                r.emit(&mut g);
                g.extend(body);
                gre::Packet::new_unchecked(&mut g[..]).fill_checksum();
                if variant & 8 != 0 {
                    outer_v6(ip_proto::GRE, &g)
                } else {
                    outer_v4(ip_proto::GRE, &g)
                }
            }
            Encap::Ipip => outer_v4(ip_proto::IPIP, inner),
            Encap::SixIn4 => outer_v4(ip_proto::IPV6, inner),
            Encap::FourIn6 => outer_v6(ip_proto::IPIP, inner),
            Encap::SixIn6 => outer_v6(ip_proto::IPV6, inner),
            Encap::Vxlan => {
                let mut v = vec![0u8; vxlan::HEADER_LEN];
                vxlan::Repr { vni: 5000 }.emit(&mut v);
                v.extend(inner_eth(inner, usize::from(variant % 3)));
                outer_v4(ip_proto::UDP, &udp(40000, vxlan::PORT, &v))
            }
            Encap::Geneve => {
                let teb = variant & 1 != 0;
                let r = geneve::Repr {
                    options_len: 4 * usize::from(variant % 3),
                    protocol: if teb { ethertype::TEB } else { ip_type(inner) },
                    vni: 77,
                };
                let mut g = vec![0u8; r.buffer_len()];
                r.emit(&mut g);
                g.extend(if teb { inner_eth(inner, usize::from(variant % 2)) } else { inner.to_vec() });
                outer_v4(ip_proto::UDP, &udp(40001, geneve::PORT, &g))
            }
            Encap::GtpU => {
                let r = gtpu::Repr {
                    msg_type: gtpu::MSG_G_PDU,
                    length: 0,
                    teid: 0x1234,
                    seq: (variant & 1 != 0).then_some(9),
                };
                let mut g = vec![0u8; r.buffer_len()];
                r.emit(&mut g);
                if variant & 2 != 0 {
                    // E flag and a one-word PDU session container.
                    if g.len() == gtpu::MIN_HEADER_LEN {
                        g.extend_from_slice(&[0, 0, 0, 0]);
                    }
                    g[0] |= 0x04;
                    g[11] = 0x85;
                    g.extend_from_slice(&[1, 0x10, 0x09, 0]);
                }
                let len = (g.len() - gtpu::MIN_HEADER_LEN + inner.len()) as u16;
                g[2..4].copy_from_slice(&len.to_be_bytes());
                g.extend_from_slice(inner);
                outer_v4(ip_proto::UDP, &udp(2152, gtpu::PORT, &g))
            }
        }
    }

    /// Families an encapsulation can carry.
    fn carries_v6(e: Encap, v6: bool) -> bool {
        match e {
            Encap::Ipip | Encap::FourIn6 => false,
            Encap::SixIn4 | Encap::SixIn6 => true,
            _ => v6,
        }
    }

    fn addr(v6: bool, bits: u128) -> IpAddr {
        if v6 {
            IpAddr::V6(Ipv6Addr::from(bits))
        } else {
            IpAddr::V4(Ipv4Addr::from(bits as u32))
        }
    }

    /// Ports that would make the inner packet another tunnel are moved off.
    fn not_a_tunnel_port(p: u16) -> u16 {
        if matches!(p, vxlan::PORT | geneve::PORT | gtpu::PORT) {
            p + 1
        } else {
            p
        }
    }

    fn inner_udp(src: IpAddr, dst: IpAddr, sport: u16, dport: u16) -> Vec<u8> {
        ip(src, dst, ip_proto::UDP, &udp(sport, dport, b"payload"))
    }

    #[test]
    fn names_parse_back() {
        for e in Encap::ALL {
            assert_eq!(e.as_str().parse::<Encap>(), Ok(e));
            assert_eq!(e.is_tunnel(), !matches!(e, Encap::Mpls | Encap::Pppoe));
        }
        assert_eq!("l2tp".parse::<Encap>(), Err(ParseEncapError));
        assert!(ParseEncapError.to_string().contains("6in4, 4in6"));
    }

    #[test]
    fn each_encapsulation_reaches_the_inner_header() {
        let v4 = inner_udp("10.1.1.1".parse().unwrap(), "10.2.2.2".parse().unwrap(), 1111, 53);
        let v6 = inner_udp("2001:db8:1::1".parse().unwrap(), "2001:db8:2::2".parse().unwrap(), 2222, 443);
        for e in Encap::ALL {
            for variant in 0..16 {
                let inner = if carries_v6(e, variant & 1 != 0) { &v6 } else { &v4 };
                let f = wrap(e, inner, variant);
                let s = decode(LinkType::ETHERNET, &f).unwrap();
                assert_eq!(s.encap.as_slice(), &[e], "{e} variant {variant}");
                let got = if e.is_tunnel() {
                    let outer = s.ip.unwrap();
                    assert_eq!(outer.anomaly, None, "{e} variant {variant}");
                    s.inner.unwrap()
                } else {
                    assert_eq!(s.inner, None);
                    s.ip.unwrap()
                };
                assert_eq!(s.innermost(), Some(&got));
                let want = decode(LinkType::RAW, inner).unwrap().ip.unwrap();
                assert_eq!(
                    (got.src, got.dst, got.protocol, got.ports),
                    (want.src, want.dst, want.protocol, want.ports)
                );
                assert_eq!(got.anomaly, None);
                assert_eq!(got.l3_end as usize, f.len(), "{e} variant {variant}");
                assert_eq!(&f[got.l3_offset as usize..], &inner[..], "{e} variant {variant}");
            }
        }
    }

    #[test]
    fn link_level_non_ip_and_damage() {
        // A pseudowire control word after the bottom of the stack: not IP.
        let mut f = eth(ethertype::MPLS_UNICAST);
        f.extend_from_slice(&[0, 1, 0x10, 64, 0, 2, 0x11, 64, 0, 0, 0, 0, 1, 2, 3, 4]);
        let s = decode(LinkType::ETHERNET, &f).unwrap();
        assert_eq!((s.ip, s.encap.as_slice(), s.ethertype), (None, &[Encap::Mpls][..], ethertype::MPLS_UNICAST));
        // The stack never reaches its bottom.
        assert_eq!(decode(LinkType::ETHERNET, &f[..18]).unwrap_err(), DecodeError::Truncated(Layer::Mpls));
        assert_eq!(decode(LinkType::ETHERNET, &f[..20]).unwrap_err(), DecodeError::Truncated(Layer::Mpls));
        assert_eq!(decode(LinkType::ETHERNET, &f[..22]).unwrap_err(), DecodeError::Truncated(Layer::Mpls));
        // PPP LCP in a session: not IP.
        let mut f = eth(ethertype::PPPOE_SESSION);
        f.extend_from_slice(&[0x11, 0, 0, 1, 0, 6, 0xc0, 0x21, 1, 1, 0, 4]);
        let s = decode(LinkType::ETHERNET, &f).unwrap();
        assert_eq!((s.ip, s.encap.as_slice()), (None, &[Encap::Pppoe][..]));
        assert_eq!(decode(LinkType::ETHERNET, &f[..21]).unwrap_err(), DecodeError::Truncated(Layer::Pppoe));
        // A compressed protocol field (RFC 1661), as scapy writes it.
        let inner = inner_udp("10.1.1.1".parse().unwrap(), "10.2.2.2".parse().unwrap(), 1, 2);
        let mut f = eth(ethertype::PPPOE_SESSION);
        f.extend_from_slice(&[0x11, 0, 0, 1, 0, 1 + inner.len() as u8, 0x21]);
        f.extend_from_slice(&inner);
        let s = decode(LinkType::ETHERNET, &f).unwrap();
        assert_eq!((s.ip.unwrap().src, s.ip.unwrap().l3_offset), (IpAddr::from([10, 1, 1, 1]), 21));
        // Behind MPLS the IP header is the packet's own, EtherType included.
        let inner = inner_udp("10.1.1.1".parse().unwrap(), "10.2.2.2".parse().unwrap(), 1, 2);
        let s = decode(LinkType::ETHERNET, &wrap(Encap::Mpls, &inner, 1)).unwrap();
        assert_eq!(s.ethertype, ethertype::IPV4);
        // A damaged IP header behind them is an error, as without them.
        let mut bad = wrap(Encap::Pppoe, &inner, 0);
        bad[22] = 0x35;
        assert_eq!(decode(LinkType::ETHERNET, &bad).unwrap_err(), DecodeError::BadIpVersion(3));
    }

    #[test]
    fn damaged_inner_is_an_outer_anomaly() {
        let inner = inner_udp("10.1.1.1".parse().unwrap(), "10.2.2.2".parse().unwrap(), 1, 2);
        // Inner version nibble wrong for IPIP.
        let mut f = wrap(Encap::Ipip, &inner, 0);
        f[34] = 0x65;
        let s = decode(LinkType::ETHERNET, &f).unwrap();
        assert_eq!(s.inner, None);
        assert_eq!(s.ip.unwrap().anomaly, Some(DecodeError::BadInner(DecodeErrorKind::BadIpVersion)));
        assert_eq!(s.encap.as_slice(), &[Encap::Ipip]);
        assert_eq!(s.innermost(), s.ip.as_ref());
        // GRE announcing a key it does not hold.
        let g = outer_v4(ip_proto::GRE, &[0x20, 0, 8, 0, 0, 0]);
        let s = decode(LinkType::ETHERNET, &g).unwrap();
        assert_eq!((s.inner, s.ip.unwrap().anomaly), (None, Some(DecodeError::Truncated(Layer::Gre))));
        assert!(s.encap.is_empty(), "a header that cannot be read was not walked");
        // Inner Ethernet cut inside its header.
        let v = [&[8u8, 0, 0, 0, 0, 0, 1, 0][..], &[0; 10]].concat();
        let s = decode(LinkType::ETHERNET, &outer_v4(ip_proto::UDP, &udp(1, vxlan::PORT, &v))).unwrap();
        assert_eq!(s.ip.unwrap().anomaly, Some(DecodeError::BadInner(DecodeErrorKind::TruncatedEthernet)));
        // Inner L4 cut: the inner addresses are good, the anomaly is the inner's.
        let mut short = inner.clone();
        short.truncate(inner.len() - 10);
        let len = (short.len() as u16).to_be_bytes();
        short[2..4].copy_from_slice(&len);
        ipv4::Packet::new_unchecked(&mut short[..]).fill_checksum();
        let s = decode(LinkType::ETHERNET, &wrap(Encap::Ipip, &short, 0)).unwrap();
        let i = s.inner.unwrap();
        assert_eq!((s.ip.unwrap().anomaly, i.anomaly), (None, Some(DecodeError::Truncated(Layer::Udp))));
        // GTP-U extension header of length 0.
        let g = [&[0x34u8, 0xff, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0x85, 0, 0, 0, 0][..], &inner].concat();
        let s = decode(LinkType::ETHERNET, &outer_v4(ip_proto::UDP, &udp(2152, gtpu::PORT, &g))).unwrap();
        assert_eq!(s.ip.unwrap().anomaly, Some(DecodeError::BadGtpUExtHeader));
    }

    #[test]
    fn not_walked_without_anomaly() {
        let inner = inner_udp("10.1.1.1".parse().unwrap(), "10.2.2.2".parse().unwrap(), 1, 2);
        // VXLAN carrying ARP: walked, nothing inside.
        let v = [&[8u8, 0, 0, 0, 0, 0, 1, 0][..], &eth(ethertype::ARP), &[0; 28]].concat();
        let s = decode(LinkType::ETHERNET, &outer_v4(ip_proto::UDP, &udp(1, vxlan::PORT, &v))).unwrap();
        assert_eq!((s.inner, s.ip.unwrap().anomaly, s.encap.as_slice()), (None, None, &[Encap::Vxlan][..]));
        // GTP-U echo request: no user packet.
        let g = [0x32u8, 1, 0, 4, 0, 0, 0, 0, 0, 1, 0, 0];
        let s = decode(LinkType::ETHERNET, &outer_v4(ip_proto::UDP, &udp(2152, gtpu::PORT, &g))).unwrap();
        assert_eq!((s.inner, s.ip.unwrap().anomaly, s.encap.len()), (None, None, 0));
        // PPTP's GRE version 1.
        let g = [&[0x30u8, 0x01, 0x88, 0x0b, 0, 0, 0, 0, 0, 0, 0, 1][..], &inner].concat();
        let s = decode(LinkType::ETHERNET, &outer_v4(ip_proto::GRE, &g)).unwrap();
        assert_eq!((s.inner, s.ip.unwrap().anomaly, s.encap.len()), (None, None, 0));
        // A later fragment of an IPIP datagram holds no inner header.
        let mut f = wrap(Encap::Ipip, &inner, 0);
        f[20..22].copy_from_slice(&[0, 10]);
        ipv4::Packet::new_unchecked(&mut f[14..]).fill_checksum();
        let s = decode(LinkType::ETHERNET, &f).unwrap();
        assert_eq!((s.inner, s.ip.unwrap().anomaly, s.encap.len()), (None, None, 0));
        // A first fragment does.
        f[20..22].copy_from_slice(&[0x20, 0]);
        ipv4::Packet::new_unchecked(&mut f[14..]).fill_checksum();
        let s = decode(LinkType::ETHERNET, &f).unwrap();
        assert_eq!(s.inner.unwrap().ports, Some((1, 2)));
    }

    #[test]
    fn nesting_is_bounded() {
        let innermost = inner_udp("10.9.9.9".parse().unwrap(), "10.8.8.8".parse().unwrap(), 7, 8);
        let nest = |depth: usize| {
            let mut d = innermost.clone();
            for _ in 0..depth {
                d = ip4(OUTER4.0.into(), OUTER4.1.into(), ip_proto::IPIP, &d);
            }
            let mut f = eth(ethertype::IPV4);
            f.extend(d);
            f
        };
        let s = decode(LinkType::ETHERNET, &nest(MAX_ENCAP_DEPTH)).unwrap();
        assert_eq!(s.encap.len(), MAX_ENCAP_DEPTH);
        assert_eq!(s.inner.unwrap().src, IpAddr::from([10, 9, 9, 9]));
        let s = decode(LinkType::ETHERNET, &nest(MAX_ENCAP_DEPTH + 1)).unwrap();
        assert_eq!((s.inner, s.ip.unwrap().anomaly), (None, Some(DecodeError::TooManyEncapsulations)));
        // MPLS counts one.
        let mut m = wrap(Encap::Mpls, &nest(MAX_ENCAP_DEPTH)[14..], 0);
        let s = decode(LinkType::ETHERNET, &m).unwrap();
        assert_eq!(s.ip.unwrap().anomaly, Some(DecodeError::TooManyEncapsulations));
        m = wrap(Encap::Mpls, &nest(MAX_ENCAP_DEPTH - 1)[14..], 0);
        let s = decode(LinkType::ETHERNET, &m).unwrap();
        assert_eq!(s.encap.as_slice(), &[Encap::Mpls, Encap::Ipip, Encap::Ipip, Encap::Ipip]);
        assert!(s.to_string().contains("encap mpls,ipip,ipip,ipip inner 10.9.9.9 7 > 10.8.8.8 8"), "{s}");
    }

    fn check_offsets(s: &PacketSummary, len: usize) -> Result<(), TestCaseError> {
        for ip in [s.ip, s.inner].into_iter().flatten() {
            for off in [Some(ip.l3_offset), ip.l4_offset, ip.payload_offset, Some(ip.l3_end)].into_iter().flatten() {
                prop_assert!(off as usize <= len);
            }
            if let Some(l4) = ip.l4_offset {
                prop_assert!(l4 <= ip.l3_end);
            }
        }
        if let (Some(o), Some(i)) = (s.ip, s.inner) {
            prop_assert!(o.l3_offset < i.l3_offset && i.l3_end <= o.l3_end);
        }
        Ok(())
    }

    fn arb_encap() -> impl Strategy<Value = Encap> {
        proptest::sample::select(Encap::ALL.to_vec())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4_000))]

        #[test]
        fn round_trip(e in arb_encap(), v6 in any::<bool>(), variant in any::<u8>(), a in any::<u128>(), b in any::<u128>(),
                      tcp in any::<bool>(), sport in any::<u16>(), dport in any::<u16>(),
                      payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let v6 = carries_v6(e, v6);
            let (src, dst) = (addr(v6, a), addr(v6, b));
            let protocol = if tcp { ip_proto::TCP } else { ip_proto::UDP };
            let dport = not_a_tunnel_port(dport);
            let inner = ip(src, dst, protocol, &l4(protocol, sport, dport, &payload));
            let f = wrap(e, &inner, variant);
            let s = decode(LinkType::ETHERNET, &f).unwrap();
            prop_assert_eq!(s.encap.as_slice(), &[e]);
            let got = *s.innermost().unwrap();
            prop_assert_eq!(s.inner.is_some(), e.is_tunnel());
            prop_assert_eq!((got.src, got.dst, got.protocol, got.ports), (src, dst, protocol, Some((sport, dport))));
            prop_assert_eq!(got.anomaly, None);
            prop_assert_eq!(s.ip.unwrap().anomaly, None);
            check_offsets(&s, f.len())?;
        }

        #[test]
        fn random_bytes_after_each_header_never_panic(e in arb_encap(), variant in any::<u8>(),
                                                      first in prop_oneof![Just(0x45u8), Just(0x60), any::<u8>()],
                                                      bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            // The header built as for a real packet, then anything where the inner packet goes.
            let mut junk = vec![first];
            junk.extend_from_slice(&bytes);
            let f = wrap(e, &junk, variant);
            if let Ok(s) = decode(LinkType::ETHERNET, &f) {
                check_offsets(&s, f.len())?;
                let _ = s.to_string();
            }
        }

        /// Decoding in place over whatever the slot held before (a tunnel
        /// packet's summary, or an error) gives what `decode` returns.
        #[test]
        fn decode_into_any_earlier_result_equals_decode(e in arb_encap(), before in arb_encap(), variant in any::<u8>(),
                                                        v6 in any::<bool>(), cut in 0usize..200, flip in any::<(usize, u8)>(),
                                                        earlier_error in any::<bool>()) {
            let v6 = carries_v6(e, v6);
            let mut f = wrap(e, &inner_udp(addr(v6, 1), addr(v6, 2), 3, 4), variant);
            f.truncate(cut.min(f.len()));
            if !f.is_empty() {
                let at = flip.0 % f.len();
                f[at] ^= flip.1;
            }
            let earlier = wrap(before, &inner_udp(addr(carries_v6(before, !v6), 5), addr(carries_v6(before, !v6), 6), 7, 8), variant);
            let mut out = if earlier_error { Err(DecodeError::Truncated(Layer::Link)) } else { decode(LinkType::ETHERNET, &earlier) };
            decode_into(LinkType::ETHERNET, &f, &mut out);
            prop_assert_eq!(out, decode(LinkType::ETHERNET, &f));
        }

        #[test]
        fn cut_anywhere_never_panics(e in arb_encap(), variant in any::<u8>(), v6 in any::<bool>(), cut in 0usize..200,
                                     flip in any::<(usize, u8)>()) {
            let v6 = carries_v6(e, v6);
            let inner = inner_udp(addr(v6, 1), addr(v6, 2), 3, 4);
            let mut f = wrap(e, &inner, variant);
            f.truncate(cut.min(f.len()));
            if !f.is_empty() {
                let at = flip.0 % f.len();
                f[at] ^= flip.1;
            }
            if let Ok(s) = decode(LinkType::ETHERNET, &f) {
                check_offsets(&s, f.len())?;
                let _ = s.to_string();
            }
        }
    }
}
