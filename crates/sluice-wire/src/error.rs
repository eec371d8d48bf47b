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
    BadInner(ErrorKind),
    /// More nested encapsulations than [`crate::MAX_ENCAP_DEPTH`]. An
    /// anomaly of the outer header; the packet has no `inner`.
    TooManyEncapsulations,
    /// A GTP-U extension header of length 0, or a chain longer than
    /// [`crate::MAX_EXT_HEADERS`]. An anomaly of the outer header.
    BadGtpUExtHeader,
}

/// Field-less discriminant of [`DecodeError`], usable as a counter index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
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

impl ErrorKind {
    pub const COUNT: usize = 28;
    pub const ALL: [ErrorKind; Self::COUNT] = [
        ErrorKind::TruncatedLink,
        ErrorKind::TruncatedEthernet,
        ErrorKind::TruncatedVlan,
        ErrorKind::TruncatedIpv4,
        ErrorKind::TruncatedIpv6,
        ErrorKind::TruncatedIpv6Ext,
        ErrorKind::TruncatedTcp,
        ErrorKind::TruncatedUdp,
        ErrorKind::TruncatedIcmp,
        ErrorKind::BadIpVersion,
        ErrorKind::BadIpv4HeaderLen,
        ErrorKind::BadIpv4TotalLen,
        ErrorKind::BadTcpHeaderLen,
        ErrorKind::TooManyVlanTags,
        ErrorKind::TooManyExtHeaders,
        ErrorKind::UnsupportedLinkType,
        ErrorKind::UnknownLoopbackFamily,
        ErrorKind::Ipv4TotalLenZero,
        ErrorKind::TruncatedIpv4Options,
        ErrorKind::TruncatedMpls,
        ErrorKind::TruncatedPppoe,
        ErrorKind::TruncatedGre,
        ErrorKind::TruncatedVxlan,
        ErrorKind::TruncatedGeneve,
        ErrorKind::TruncatedGtpU,
        ErrorKind::BadInner,
        ErrorKind::TooManyEncapsulations,
        ErrorKind::BadGtpUExtHeader,
    ];

    /// Stable snake_case name, used as a counter label and in JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKind::TruncatedLink => "truncated_link",
            ErrorKind::TruncatedEthernet => "truncated_ethernet",
            ErrorKind::TruncatedVlan => "truncated_vlan",
            ErrorKind::TruncatedIpv4 => "truncated_ipv4",
            ErrorKind::TruncatedIpv6 => "truncated_ipv6",
            ErrorKind::TruncatedIpv6Ext => "truncated_ipv6_ext",
            ErrorKind::TruncatedTcp => "truncated_tcp",
            ErrorKind::TruncatedUdp => "truncated_udp",
            ErrorKind::TruncatedIcmp => "truncated_icmp",
            ErrorKind::BadIpVersion => "bad_ip_version",
            ErrorKind::BadIpv4HeaderLen => "bad_ipv4_header_len",
            ErrorKind::BadIpv4TotalLen => "bad_ipv4_total_len",
            ErrorKind::BadTcpHeaderLen => "bad_tcp_header_len",
            ErrorKind::TooManyVlanTags => "too_many_vlan_tags",
            ErrorKind::TooManyExtHeaders => "too_many_ext_headers",
            ErrorKind::UnsupportedLinkType => "unsupported_link_type",
            ErrorKind::UnknownLoopbackFamily => "unknown_loopback_family",
            ErrorKind::Ipv4TotalLenZero => "ipv4_total_len_zero",
            ErrorKind::TruncatedIpv4Options => "truncated_ipv4_options",
            ErrorKind::TruncatedMpls => "truncated_mpls",
            ErrorKind::TruncatedPppoe => "truncated_pppoe",
            ErrorKind::TruncatedGre => "truncated_gre",
            ErrorKind::TruncatedVxlan => "truncated_vxlan",
            ErrorKind::TruncatedGeneve => "truncated_geneve",
            ErrorKind::TruncatedGtpU => "truncated_gtpu",
            ErrorKind::BadInner => "bad_inner",
            ErrorKind::TooManyEncapsulations => "too_many_encapsulations",
            ErrorKind::BadGtpUExtHeader => "bad_gtpu_ext_header",
        }
    }

    pub const fn index(self) -> usize {
        self as usize
    }
}

impl DecodeError {
    pub const fn kind(self) -> ErrorKind {
        match self {
            DecodeError::Truncated(layer) => match layer {
                Layer::Link => ErrorKind::TruncatedLink,
                Layer::Ethernet => ErrorKind::TruncatedEthernet,
                Layer::Vlan => ErrorKind::TruncatedVlan,
                Layer::Ipv4 => ErrorKind::TruncatedIpv4,
                Layer::Ipv6 => ErrorKind::TruncatedIpv6,
                Layer::Ipv6Ext => ErrorKind::TruncatedIpv6Ext,
                Layer::Tcp => ErrorKind::TruncatedTcp,
                Layer::Udp => ErrorKind::TruncatedUdp,
                Layer::Icmp => ErrorKind::TruncatedIcmp,
                Layer::Mpls => ErrorKind::TruncatedMpls,
                Layer::Pppoe => ErrorKind::TruncatedPppoe,
                Layer::Gre => ErrorKind::TruncatedGre,
                Layer::Vxlan => ErrorKind::TruncatedVxlan,
                Layer::Geneve => ErrorKind::TruncatedGeneve,
                Layer::GtpU => ErrorKind::TruncatedGtpU,
            },
            DecodeError::BadIpVersion(_) => ErrorKind::BadIpVersion,
            DecodeError::BadIpv4HeaderLen(_) => ErrorKind::BadIpv4HeaderLen,
            DecodeError::BadIpv4TotalLen { .. } => ErrorKind::BadIpv4TotalLen,
            DecodeError::BadTcpHeaderLen(_) => ErrorKind::BadTcpHeaderLen,
            DecodeError::TooManyVlanTags => ErrorKind::TooManyVlanTags,
            DecodeError::TooManyExtHeaders => ErrorKind::TooManyExtHeaders,
            DecodeError::UnsupportedLinkType(_) => ErrorKind::UnsupportedLinkType,
            DecodeError::UnknownLoopbackFamily(_) => ErrorKind::UnknownLoopbackFamily,
            DecodeError::Ipv4TotalLenZero => ErrorKind::Ipv4TotalLenZero,
            DecodeError::TruncatedIpv4Options => ErrorKind::TruncatedIpv4Options,
            DecodeError::BadInner(_) => ErrorKind::BadInner,
            DecodeError::TooManyEncapsulations => ErrorKind::TooManyEncapsulations,
            DecodeError::BadGtpUExtHeader => ErrorKind::BadGtpUExtHeader,
        }
    }

    /// Stable snake_case reason (see [`ErrorKind::as_str`]).
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
        for (i, k) in ErrorKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
        }
        let names: std::collections::HashSet<_> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), ErrorKind::COUNT, "names are distinct");
    }
}
