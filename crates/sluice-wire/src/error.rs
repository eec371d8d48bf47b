use core::fmt;

/// The header a decoding problem was found in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layer {
    Link,
    Ethernet,
    Vlan,
    Ipv4,
    Ipv6,
    Ipv6Ext,
    Tcp,
    Udp,
    Icmp,
    Mpls,
    Pppoe,
    Gre,
    Vxlan,
    Geneve,
    GtpU,
}

impl Layer {
    pub const fn name(self) -> &'static str {
        match self {
            Layer::Link => "link",
            Layer::Ethernet => "ethernet",
            Layer::Vlan => "vlan",
            Layer::Ipv4 => "ipv4",
            Layer::Ipv6 => "ipv6",
            Layer::Ipv6Ext => "ipv6_ext",
            Layer::Tcp => "tcp",
            Layer::Udp => "udp",
            Layer::Icmp => "icmp",
            Layer::Mpls => "mpls",
            Layer::Pppoe => "pppoe",
            Layer::Gre => "gre",
            Layer::Vxlan => "vxlan",
            Layer::Geneve => "geneve",
            Layer::GtpU => "gtpu",
        }
    }
}

/// Why a frame (or part of it) could not be decoded.
///
/// Small and `Copy` so that the fast path can count it without allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The captured bytes end inside this header.
    Truncated(Layer),
    /// The IP version nibble is not the one the link layer announced.
    BadIpVersion(u8),
    /// IPv4 IHL below 5 (20 bytes).
    BadIpv4HeaderLen(u8),
    /// IPv4 total length shorter than its own header.
    BadIpv4TotalLen { total: u16, header: u8 },
    /// TCP data offset below 5 or past the captured bytes.
    BadTcpHeaderLen(u8),
    /// More stacked VLAN tags than [`crate::MAX_VLAN_TAGS`].
    TooManyVlanTags,
    /// More IPv6 extension headers than [`crate::MAX_EXT_HEADERS`].
    TooManyExtHeaders,
    /// A link type this decoder does not handle.
    UnsupportedLinkType(u32),
    /// BSD loopback header with an address family that is neither IPv4 nor IPv6.
    UnknownLoopbackFamily(u32),
    /// IPv4 total length 0 (a TSO / BIG TCP capture): the captured length
    /// was used. An anomaly: the packet is still judged by its addresses.
    Ipv4TotalLenZero,
    /// The capture ends inside the IPv4 options, after the addresses. An
    /// anomaly: the packet is still judged by its addresses.
    TruncatedIpv4Options,
    /// The packet inside a tunnel could not be decoded: its Ethernet, VLAN
    /// or IP header failed with this kind. An anomaly of the outer header,
    /// which is still judged by its addresses; the packet has no `inner`.
    BadInner(DecodeErrorKind),
    /// More nested encapsulations than [`crate::MAX_ENCAP_DEPTH`]. An
    /// anomaly of the outer header; the packet has no `inner`.
    TooManyEncapsulations,
    /// A GTP-U extension header of length 0, or a chain longer than
    /// [`crate::MAX_EXT_HEADERS`]. An anomaly of the outer header.
    BadGtpUExtHeader,
}

/// Field-less discriminant of [`DecodeError`], usable as a counter index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DecodeErrorKind {
    TruncatedLink,
    TruncatedEthernet,
    TruncatedVlan,
    TruncatedIpv4,
    TruncatedIpv6,
    TruncatedIpv6Ext,
    TruncatedTcp,
    TruncatedUdp,
    TruncatedIcmp,
    BadIpVersion,
    BadIpv4HeaderLen,
    BadIpv4TotalLen,
    BadTcpHeaderLen,
    TooManyVlanTags,
    TooManyExtHeaders,
    UnsupportedLinkType,
    UnknownLoopbackFamily,
    Ipv4TotalLenZero,
    TruncatedIpv4Options,
    TruncatedMpls,
    TruncatedPppoe,
    TruncatedGre,
    TruncatedVxlan,
    TruncatedGeneve,
    TruncatedGtpU,
    BadInner,
    TooManyEncapsulations,
    BadGtpUExtHeader,
}

impl DecodeErrorKind {
    pub const COUNT: usize = 28;
    pub const ALL: [DecodeErrorKind; Self::COUNT] = [
        DecodeErrorKind::TruncatedLink,
        DecodeErrorKind::TruncatedEthernet,
        DecodeErrorKind::TruncatedVlan,
        DecodeErrorKind::TruncatedIpv4,
        DecodeErrorKind::TruncatedIpv6,
        DecodeErrorKind::TruncatedIpv6Ext,
        DecodeErrorKind::TruncatedTcp,
        DecodeErrorKind::TruncatedUdp,
        DecodeErrorKind::TruncatedIcmp,
        DecodeErrorKind::BadIpVersion,
        DecodeErrorKind::BadIpv4HeaderLen,
        DecodeErrorKind::BadIpv4TotalLen,
        DecodeErrorKind::BadTcpHeaderLen,
        DecodeErrorKind::TooManyVlanTags,
        DecodeErrorKind::TooManyExtHeaders,
        DecodeErrorKind::UnsupportedLinkType,
        DecodeErrorKind::UnknownLoopbackFamily,
        DecodeErrorKind::Ipv4TotalLenZero,
        DecodeErrorKind::TruncatedIpv4Options,
        DecodeErrorKind::TruncatedMpls,
        DecodeErrorKind::TruncatedPppoe,
        DecodeErrorKind::TruncatedGre,
        DecodeErrorKind::TruncatedVxlan,
        DecodeErrorKind::TruncatedGeneve,
        DecodeErrorKind::TruncatedGtpU,
        DecodeErrorKind::BadInner,
        DecodeErrorKind::TooManyEncapsulations,
        DecodeErrorKind::BadGtpUExtHeader,
    ];

    /// Stable snake_case name, used as a counter label and in JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            DecodeErrorKind::TruncatedLink => "truncated_link",
            DecodeErrorKind::TruncatedEthernet => "truncated_ethernet",
            DecodeErrorKind::TruncatedVlan => "truncated_vlan",
            DecodeErrorKind::TruncatedIpv4 => "truncated_ipv4",
            DecodeErrorKind::TruncatedIpv6 => "truncated_ipv6",
            DecodeErrorKind::TruncatedIpv6Ext => "truncated_ipv6_ext",
            DecodeErrorKind::TruncatedTcp => "truncated_tcp",
            DecodeErrorKind::TruncatedUdp => "truncated_udp",
            DecodeErrorKind::TruncatedIcmp => "truncated_icmp",
            DecodeErrorKind::BadIpVersion => "bad_ip_version",
            DecodeErrorKind::BadIpv4HeaderLen => "bad_ipv4_header_len",
            DecodeErrorKind::BadIpv4TotalLen => "bad_ipv4_total_len",
            DecodeErrorKind::BadTcpHeaderLen => "bad_tcp_header_len",
            DecodeErrorKind::TooManyVlanTags => "too_many_vlan_tags",
            DecodeErrorKind::TooManyExtHeaders => "too_many_ext_headers",
            DecodeErrorKind::UnsupportedLinkType => "unsupported_link_type",
            DecodeErrorKind::UnknownLoopbackFamily => "unknown_loopback_family",
            DecodeErrorKind::Ipv4TotalLenZero => "ipv4_total_len_zero",
            DecodeErrorKind::TruncatedIpv4Options => "truncated_ipv4_options",
            DecodeErrorKind::TruncatedMpls => "truncated_mpls",
            DecodeErrorKind::TruncatedPppoe => "truncated_pppoe",
            DecodeErrorKind::TruncatedGre => "truncated_gre",
            DecodeErrorKind::TruncatedVxlan => "truncated_vxlan",
            DecodeErrorKind::TruncatedGeneve => "truncated_geneve",
            DecodeErrorKind::TruncatedGtpU => "truncated_gtpu",
            DecodeErrorKind::BadInner => "bad_inner",
            DecodeErrorKind::TooManyEncapsulations => "too_many_encapsulations",
            DecodeErrorKind::BadGtpUExtHeader => "bad_gtpu_ext_header",
        }
    }

    pub const fn index(self) -> usize {
        self as usize
    }
}

impl DecodeError {
    pub const fn kind(self) -> DecodeErrorKind {
        match self {
            DecodeError::Truncated(layer) => match layer {
                Layer::Link => DecodeErrorKind::TruncatedLink,
                Layer::Ethernet => DecodeErrorKind::TruncatedEthernet,
                Layer::Vlan => DecodeErrorKind::TruncatedVlan,
                Layer::Ipv4 => DecodeErrorKind::TruncatedIpv4,
                Layer::Ipv6 => DecodeErrorKind::TruncatedIpv6,
                Layer::Ipv6Ext => DecodeErrorKind::TruncatedIpv6Ext,
                Layer::Tcp => DecodeErrorKind::TruncatedTcp,
                Layer::Udp => DecodeErrorKind::TruncatedUdp,
                Layer::Icmp => DecodeErrorKind::TruncatedIcmp,
                Layer::Mpls => DecodeErrorKind::TruncatedMpls,
                Layer::Pppoe => DecodeErrorKind::TruncatedPppoe,
                Layer::Gre => DecodeErrorKind::TruncatedGre,
                Layer::Vxlan => DecodeErrorKind::TruncatedVxlan,
                Layer::Geneve => DecodeErrorKind::TruncatedGeneve,
                Layer::GtpU => DecodeErrorKind::TruncatedGtpU,
            },
            DecodeError::BadIpVersion(_) => DecodeErrorKind::BadIpVersion,
            DecodeError::BadIpv4HeaderLen(_) => DecodeErrorKind::BadIpv4HeaderLen,
            DecodeError::BadIpv4TotalLen { .. } => DecodeErrorKind::BadIpv4TotalLen,
            DecodeError::BadTcpHeaderLen(_) => DecodeErrorKind::BadTcpHeaderLen,
            DecodeError::TooManyVlanTags => DecodeErrorKind::TooManyVlanTags,
            DecodeError::TooManyExtHeaders => DecodeErrorKind::TooManyExtHeaders,
            DecodeError::UnsupportedLinkType(_) => DecodeErrorKind::UnsupportedLinkType,
            DecodeError::UnknownLoopbackFamily(_) => DecodeErrorKind::UnknownLoopbackFamily,
            DecodeError::Ipv4TotalLenZero => DecodeErrorKind::Ipv4TotalLenZero,
            DecodeError::TruncatedIpv4Options => DecodeErrorKind::TruncatedIpv4Options,
            DecodeError::BadInner(_) => DecodeErrorKind::BadInner,
            DecodeError::TooManyEncapsulations => DecodeErrorKind::TooManyEncapsulations,
            DecodeError::BadGtpUExtHeader => DecodeErrorKind::BadGtpUExtHeader,
        }
    }

    /// Stable snake_case reason (see [`DecodeErrorKind::as_str`]).
    pub const fn reason(self) -> &'static str {
        self.kind().as_str()
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DecodeError::Truncated(layer) => write!(f, "truncated {} header", layer.name()),
            DecodeError::BadIpVersion(v) => write!(f, "bad IP version {v}"),
            DecodeError::BadIpv4HeaderLen(ihl) => {
                write!(f, "bad IPv4 header length {} (IHL {ihl})", u32::from(ihl) * 4)
            }
            DecodeError::BadIpv4TotalLen { total, header } => {
                write!(f, "IPv4 total length {total} shorter than header length {header}")
            }
            DecodeError::BadTcpHeaderLen(off) => write!(f, "bad TCP data offset {off}"),
            DecodeError::TooManyVlanTags => {
                write!(f, "more than {} stacked VLAN tags", crate::MAX_VLAN_TAGS)
            }
            DecodeError::TooManyExtHeaders => {
                write!(f, "more than {} IPv6 extension headers", crate::MAX_EXT_HEADERS)
            }
            DecodeError::UnsupportedLinkType(lt) => write!(f, "unsupported link type {lt}"),
            DecodeError::UnknownLoopbackFamily(fam) => {
                write!(f, "unknown loopback address family {fam}")
            }
            DecodeError::Ipv4TotalLenZero => {
                f.write_str("IPv4 total length 0 (TSO capture); the captured length was used")
            }
            DecodeError::TruncatedIpv4Options => f.write_str("capture ends inside the IPv4 options"),
            DecodeError::BadInner(kind) => write!(f, "packet inside the tunnel undecodable ({})", kind.as_str()),
            DecodeError::TooManyEncapsulations => {
                write!(f, "more than {} nested encapsulations", crate::MAX_ENCAP_DEPTH)
            }
            DecodeError::BadGtpUExtHeader => f.write_str("GTP-U extension header of length 0 or chain too long"),
        }
    }
}

impl std::error::Error for DecodeError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_index_all_in_order() {
        for (i, k) in DecodeErrorKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
        }
        let names: std::collections::HashSet<_> = DecodeErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), DecodeErrorKind::COUNT, "names are distinct");
    }
}
